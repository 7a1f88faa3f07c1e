//! `uqbench compare`: every pair of methods of one or more runs compared repetition by
//! repetition, and the rankings whose ties the data do not separate (issue 40 §7).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use uqbench_experiment::compare::{compare, rows_of_runs, Options};

/// Arguments of `uqbench compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Run directories (each holding repetitions.csv). Several runs are compared together when
    /// they drew the same data (same seed and problem): each method from one run only.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// The metric (default: w2_anchor where the runs have it, else crps, else nll).
    #[arg(long)]
    pub metric: Option<String>,
    /// The region (all, in, gap, out).
    #[arg(long, default_value = "all")]
    pub region: String,
    /// One setting only (its label, e.g. f_main=2).
    #[arg(long)]
    pub setting: Option<String>,
    /// Print the pair records as JSON instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Bootstrap resamples per pair.
    #[arg(long, default_value_t = 10_000)]
    pub resamples: usize,
    /// The bootstrap's seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Runs `uqbench compare`.
pub fn run(args: &CompareArgs) -> Result<()> {
    let rows = rows_of_runs(&args.dirs)?;
    let opts = Options {
        metric: args.metric.clone(),
        region: args.region.clone(),
        setting: args.setting.clone(),
        resamples: args.resamples,
        seed: args.seed,
    };
    let c = compare(&rows, &opts)?;
    if args.json {
        println!("{}", uqbench_experiment::json::to_string_pretty(&c.pairs)?);
        return Ok(());
    }
    let mut md = String::new();
    crate::ranking::rankings_md(&c, &mut md);
    crate::ranking::pairs_md(&c.pairs, &mut md);
    print!("{md}");
    Ok(())
}
