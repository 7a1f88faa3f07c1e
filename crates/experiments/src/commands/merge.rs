//! `uqbench merge`: combine the directories of a sharded run into one run.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::runner::{self, rep_path, Plan};
use crate::spec::ExperimentSpec;
use crate::store::{prepare_dir, write_atomic, RunMeta, SPEC_FILE};

/// Arguments of `uqbench merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' run directories.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// The merged run directory.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `uqbench merge`.
pub fn run(args: &MergeArgs) -> Result<()> {
    let read_spec = |d: &Path| {
        std::fs::read_to_string(d.join(SPEC_FILE))
            .with_context(|| format!("{} is not a run directory (no {SPEC_FILE})", d.display()))
    };
    let text = read_spec(&args.dirs[0])?;
    for d in &args.dirs[1..] {
        if read_spec(d)? != text {
            bail!(
                "{} ran a different spec than {}: only shards of one run can be merged",
                d.display(),
                args.dirs[0].display()
            );
        }
    }
    let spec = ExperimentSpec::from_toml_str(&text, None)?;
    let plan = Plan::new(spec, None)?;
    prepare_dir(&args.out, &text, true)?;
    let meta = RunMeta::read(&args.dirs[0]);
    let mut copied = 0usize;
    for unit in &plan.units {
        let setting = &plan.settings[unit.setting];
        for r in unit.reps.clone() {
            let target = rep_path(&args.out, setting, &unit.method, r);
            for d in &args.dirs {
                let source = rep_path(d, setting, &unit.method, r);
                if !source.is_file() {
                    continue;
                }
                let bytes = std::fs::read(&source)?;
                if target.is_file() {
                    if std::fs::read(&target)? != bytes {
                        bail!(
                            "{} and {} disagree: the shards did not run the same computation",
                            source.display(),
                            target.display()
                        );
                    }
                } else {
                    write_atomic(&target, &bytes)?;
                    copied += 1;
                }
            }
        }
    }
    let merged = RunMeta {
        shard: None,
        merged_from: args.dirs.clone(),
        ..meta
    };
    merged.write(&args.out)?;
    eprintln!(
        "merged {copied} repetition files from {} shards into {}",
        args.dirs.len(),
        args.out.display()
    );
    runner::finish(&args.out, &plan, &merged)
}
