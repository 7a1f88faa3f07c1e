//! Files on disk: atomic writes, the run directory and its `run.json`, and the directory
//! names of settings.

use std::io::Write;
use std::path::{Path, PathBuf};

use uqbench_anchor::Setting;

use crate::bail;
use crate::error::{Context, Result};
use serde::{Deserialize, Serialize};

/// Writes `contents` to `path` atomically: into a temporary file in the same directory, then
/// renamed over `path`, so a killed process never leaves a half-written file. Creates the
/// parent directories.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    // Host and process id: writers on different nodes of a shared file system never share a
    // temporary file.
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        host_name(),
        std::process::id()
    ));
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

/// This machine's host name (for temporary file names), or `host` where it cannot be read.
fn host_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| {
                h.trim()
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
                    .collect::<String>()
            })
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "host".into())
    })
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

/// The resolved spec's file name in a run directory.
pub const SPEC_FILE: &str = "spec.resolved.toml";

/// `run.json`: how a run directory was produced, and by what (provenance).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The spec's profile.
    pub profile: Option<String>,
    /// The backend that trained the methods.
    pub backend: String,
    /// `I/N` for one shard of a sharded run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// `A..B` for a run of a subset of the repetitions (`--reps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reps: Option<String>,
    /// The shard directories a merged run came from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<std::path::PathBuf>,
    /// uqbench's version.
    #[serde(default)]
    pub version: String,
    /// The git commit the binary was built from (`-dirty` when tracked files differed), or
    /// "unknown".
    #[serde(default)]
    pub git_commit: String,
    /// The compiler that built it.
    #[serde(default)]
    pub rustc: String,
    /// burn's version.
    #[serde(default)]
    pub burn: String,
    /// What trained: the CPU model (CPU backends) or the wgpu adapter.
    #[serde(default)]
    pub device: String,
    /// Worker threads for training.
    #[serde(default)]
    pub threads: usize,
    /// On a CPU backend: whether the methods with host loops ran them (`--host-loops`), which
    /// changes results within their distribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_loops: Option<bool>,
    /// The instruction set the host loops ran at (`--simd`; the same bits at every level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simd: Option<String>,
    /// The SHA-256 of the binary that ran, recorded by shard runs (`--shard`), whose parts
    /// `uqbench merge` combines only when they agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_sha256: Option<String>,
}

impl RunMeta {
    /// What makes two runs' results comparable bit for bit (the machine aside): version,
    /// commit, compiler, burn, backend, the host loops and their instruction set, and the
    /// binary's checksum (empty where the run did not record one: a run that is not a shard).
    pub fn provenance(&self) -> Vec<(&'static str, String)> {
        vec![
            ("version", self.version.clone()),
            ("git_commit", self.git_commit.clone()),
            ("rustc", self.rustc.clone()),
            ("burn", self.burn.clone()),
            ("backend", self.backend.clone()),
            ("host_loops", format!("{:?}", self.host_loops)),
            ("simd", format!("{:?}", self.simd)),
            (
                "binary_sha256",
                self.binary_sha256.clone().unwrap_or_default(),
            ),
        ]
    }
}

impl RunMeta {
    /// Reads `dir/run.json`; a missing or unreadable file gives an unknown backend and no
    /// profile (the summaries do not depend on it).
    pub fn read(dir: &Path) -> RunMeta {
        std::fs::read_to_string(dir.join("run.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_else(|| RunMeta {
                backend: "unknown".into(),
                ..RunMeta::default()
            })
    }

    /// Writes `dir/run.json` atomically.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_atomic(
            &dir.join("run.json"),
            serde_json::to_string_pretty(self)?.as_bytes(),
        )
    }
}

/// Prepares a run directory: creates it, checks it can be written, and records the spec.
/// A directory that already holds a run is only reused with `resume`, and only for the same
/// spec.
pub fn prepare_dir(dir: &Path, spec_text: &str, resume: bool) -> Result<()> {
    let spec_path = dir.join(SPEC_FILE);
    if spec_path.is_file() {
        if !resume {
            bail!(
                run_dir: "{} already holds a run: pass --resume to continue it, or choose another --out",
                dir.display()
            );
        }
        let old = std::fs::read_to_string(&spec_path)?;
        if old != spec_text {
            bail!(
                run_dir: "{} holds a run of a different spec (or profile, or --methods): resume it with the same \
                 arguments, or choose another --out",
                dir.display()
            );
        }
        return Ok(());
    }
    if dir.is_dir() && std::fs::read_dir(dir)?.next().is_some() && !resume {
        bail!(
            run_dir: "{} exists and is not empty: choose another --out",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the output directory {}", dir.display()))?;
    let probe = dir.join(".write-test");
    std::fs::write(&probe, b"")
        .with_context(|| format!("the output directory {} is not writable", dir.display()))?;
    std::fs::remove_file(&probe)?;
    write_atomic(&spec_path, spec_text.as_bytes())
}

/// Path of one repetition's result.
pub fn rep_path(dir: &Path, setting: &Setting, method: &str, rep: u64) -> PathBuf {
    dir.join("reps")
        .join(setting_dir(&setting.label()))
        .join(method)
        .join(format!("{}.json", rep_stem(rep)))
}

/// Reads one repetition's stored result of any kind; a missing file is an error that says
/// how to complete the run.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    if !path.is_file() {
        bail!(
            run_dir: "{} is missing: the run is incomplete (finish it with --resume, or merge its shards)",
            path.display()
        );
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text)
        .in_run_dir(|| format!("{} is not a repetition result", path.display()))
}
