//! `uqbench report`: redraw a run's summaries, figures and report from its stored results.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::runner::{self, Plan};
use uqbench_experiment::spec::ExperimentSpec;
use uqbench_experiment::store::{RunMeta, SPEC_FILE};

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
    let meta = RunMeta::read(&args.dir);
    let unfinished = plan
        .units
        .iter()
        .filter(|u| !runner::unit_done(&args.dir, &plan, u))
        .count();
    // A shard or a repetition range is a part of a run by design: merged, not reported
    // (finish names what is missing and says to merge).
    if unfinished == 0 || meta.shard.is_some() || meta.reps.is_some() {
        return runner::finish(&args.dir, &plan, &meta);
    }
    eprintln!(
        "{}: {unfinished} of {} work units are not finished: reporting the (method, setting) \
         pairs that are (report.md says what is missing)",
        args.dir.display(),
        plan.units.len()
    );
    runner::finish_partial(&args.dir, &plan, &meta)
}
