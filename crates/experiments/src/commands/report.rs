//! `uqbench report`: redraw a run's summaries, figures and report from its stored results.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::runner::{self, Plan};
use uqbench_eval::spec::ExperimentSpec;
use uqbench_eval::store::{RunMeta, SPEC_FILE};

/// Arguments of `uqbench report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A run directory (holding spec.resolved.toml and reps/).
    pub dir: PathBuf,
}

/// Runs `uqbench report`.
pub fn run(args: &ReportArgs) -> Result<()> {
    let spec = ExperimentSpec::load(&args.dir.join(SPEC_FILE))
        .with_context(|| format!("{} is not a run directory", args.dir.display()))?;
    let plan = Plan::new(spec, None)?;
    runner::finish(&args.dir, &plan, &RunMeta::read(&args.dir))
}
