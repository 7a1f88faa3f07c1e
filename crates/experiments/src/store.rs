//! Files on disk: atomic writes and the directory names of settings.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

/// Writes `contents` to `path` atomically: into a temporary file in the same directory, then
/// renamed over `path`, so a killed process never leaves a half-written file. Creates the
/// parent directories.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let mut file =
        std::fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    drop(file);
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))?;
    Ok(())
}

/// The directory name of a setting: its label (`f_main=2`), or `default` without a sweep.
pub fn setting_dir(label: &str) -> String {
    if label.is_empty() {
        "default".to_string()
    } else {
        label.to_string()
    }
}

/// A repetition's file stem: `rep-007`.
pub fn rep_stem(rep: u64) -> String {
    format!("rep-{rep:03}")
}
