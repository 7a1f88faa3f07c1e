//! `uqbench report`: redraw a run's summaries, figures and report from its stored results.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::runner::{Plan, SPEC_FILE};
use crate::spec::ExperimentSpec;

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
    let meta: serde_json::Value = std::fs::read_to_string(args.dir.join("run.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let profile = meta["profile"].as_str().map(str::to_string);
    let backend = meta["backend"].as_str().unwrap_or("unknown").to_string();
    super::run::finish(&args.dir, &plan, profile.as_deref(), &backend)
}
