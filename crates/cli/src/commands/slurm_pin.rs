//! What `uqbench slurm` pins at submission, so that the jobs do not depend on files that may
//! change while they wait: the binary (stripped, hashed) and the resolved spec with the data
//! files it names.

use std::process::Command;

use anyhow::{bail, Context, Result};

use super::{path_str, SlurmDir, SlurmMeta};
use crate::provenance::sha256_file;
use uqbench_experiment::spec::{ExperimentSpec, ProblemDecl};
use uqbench_experiment::store::write_atomic;

/// The pinned spec's text and the data files to copy (source, destination).
pub struct PinnedSpec {
    pub text: String,
    copies: Vec<(std::path::PathBuf, std::path::PathBuf)>,
}

/// The resolved spec the jobs will read: `spec` (the plan's: profile and run options applied)
/// with every data file it names pointing at its copy in `DIR/slurm/data/` (absolute, as the
/// jobs run in the submission directory but the copy must not depend on it).
pub fn spec_text(spec: &ExperimentSpec, sd: &SlurmDir) -> Result<PinnedSpec> {
    let mut spec = spec.clone();
    let mut copies = Vec::new();
    if let ProblemDecl::Surrogate(s) = &mut spec.problem {
        let source = std::path::PathBuf::from(&s.data);
        let name = source
            .file_name()
            .with_context(|| format!("surrogate.data = {:?}: not a file name", s.data))?;
        let data = std::path::absolute(sd.root.join("data"))?.join(name);
        s.data = path_str(&data)?;
        copies.push((source, data));
    }
    Ok(PinnedSpec {
        text: spec.resolved_toml()?,
        copies,
    })
}

/// Writes the pinned spec and copies its data files. On `--resume` a pinned copy that differs
/// from the file now is refused: the parts finished so far were trained on the copy.
pub fn write_spec(pinned: &PinnedSpec, sd: &SlurmDir) -> Result<()> {
    for (source, copy) in &pinned.copies {
        let bytes = std::fs::read(source)
            .with_context(|| format!("cannot read the spec's data file {}", source.display()))?;
        if copy.is_file() {
            if std::fs::read(copy)? != bytes {
                bail!(
                    "{} changed since this run was submitted ({} holds the copy its finished \
                     parts used): restore it, or start a new --out",
                    source.display(),
                    copy.display()
                );
            }
            continue;
        }
        std::fs::create_dir_all(copy.parent().expect("a file in DIR/slurm/data"))?;
        write_atomic(copy, &bytes)?;
    }
    Ok(write_atomic(&sd.spec(), pinned.text.as_bytes())?)
}

/// The pinned binary: its checksum, where it came from, and that binary's checksum.
pub struct PinnedBinary {
    pub sha256: String,
    pub source: String,
    pub source_sha256: String,
}

/// Copies this binary to `sd.binary()` once per run, stripped of its symbols (`strip`, where
/// the machine has it: 148 MB become 114 MB; without it the copy is whole), atomically
/// and executable. A directory that already pins another build refuses: parts of two builds
/// cannot be merged. `old`: the directory's slurm.json, on --resume.
pub fn binary(sd: &SlurmDir, old: Option<&SlurmMeta>) -> Result<PinnedBinary> {
    let exe = std::env::current_exe().context("the path of this uqbench binary")?;
    let sha = sha256_file(&exe)?;
    let target = sd.binary();
    if target.is_file() {
        let pinned = sha256_file(&target)?;
        // The pinned file as written (slurm.json's checksum, where it has one), and this
        // binary its source or the pinned copy itself.
        let recorded = old
            .map(|m| m.binary_sha256.as_str())
            .filter(|s| !s.is_empty());
        let source_sha = old
            .map(|m| m.binary_source_sha256.clone())
            .unwrap_or_default();
        let intact = recorded.is_none_or(|r| r == pinned);
        if intact && (pinned == sha || source_sha == sha) {
            return Ok(PinnedBinary {
                sha256: pinned,
                source: old
                    .map(|m| m.binary_source.clone())
                    .unwrap_or(path_str(&exe)?),
                source_sha256: if source_sha.is_empty() {
                    sha
                } else {
                    source_sha
                },
            });
        }
        bail!(
            "{} pins another build of uqbench (sha256 {}…) than this one ({}…){}: parts of \
             two builds cannot be merged. Resume with the pinned binary ({} slurm … \
             --resume), or start a new --out",
            target.display(),
            &pinned[..12],
            &sha[..12],
            if intact {
                ""
            } else {
                ", and it changed since it was pinned"
            },
            target.display()
        );
    }
    let parent = target.parent().expect("DIR/slurm/bin");
    std::fs::create_dir_all(parent)?;
    let staging = parent.join(".uqbench.staging");
    std::fs::copy(&exe, &staging)
        .with_context(|| format!("cannot copy {} to {}", exe.display(), staging.display()))?;
    // Symbols only: the code, and so every result, is the same.
    let stripped = Command::new("strip")
        .arg("--strip-all")
        .arg(&staging)
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        eprintln!(
            "note: `strip` is not available here; {} is pinned with its symbols",
            target.display()
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o755))?;
    }
    std::fs::rename(&staging, &target)
        .with_context(|| format!("cannot write {}", target.display()))?;
    Ok(PinnedBinary {
        sha256: sha256_file(&target)?,
        source: path_str(&exe)?,
        source_sha256: sha,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_pinned_spec_points_at_its_own_copy_of_the_data() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let spec =
            ExperimentSpec::load_profile(&root.join("experiments/boston.toml"), None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let sd = SlurmDir::of(dir.path());
        let pinned = spec_text(&spec, &sd).unwrap();
        let copy = std::path::absolute(dir.path().join("slurm/data")).unwrap();
        assert!(
            pinned.text.contains(copy.to_str().unwrap()),
            "{}",
            pinned.text
        );
        let again = ExperimentSpec::from_toml_str(&pinned.text, None).unwrap();
        assert_eq!(
            again.resolved_toml().unwrap(),
            pinned.text,
            "resolving it again changes nothing"
        );
    }
}
