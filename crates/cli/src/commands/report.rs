//! `uqbench report`: redraw a run's summaries, figures and report from its stored results; on
//! a decision run with `--standard`, the rank correlation of its decisions with the standard
//! track's scores (spec §12).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::runner::{self, Plan};
use uqbench_experiment::compare::read_repetitions;
use uqbench_experiment::rank::{rank_correlations, BOOTSTRAP};
use uqbench_experiment::spec::ExperimentSpec;
use uqbench_experiment::store::{write_atomic, RunMeta, SPEC_FILE};
use uqbench_experiment::summary::REPETITIONS_CSV;

/// Arguments of `uqbench report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A run directory (holding spec.resolved.toml and reps/), or a decision run's
    /// (`uqbench decide`: decisions.csv).
    pub dir: PathBuf,
    /// With a decision run: a standard-track run of the same problem and methods (e.g.
    /// `uqbench run SPEC --profile standard`); prints the Spearman rank correlation across
    /// methods between the decisions and joint_kl_10, kl_anchor, coverage and CRPS.
    #[arg(long)]
    pub standard: Option<PathBuf>,
}

/// Runs `uqbench report`.
pub fn run(args: &ReportArgs) -> Result<()> {
    if args.dir.join("decisions.csv").is_file() {
        let Some(standard) = &args.standard else {
            bail!(
                "{} is a decision run: its report is the rank correlation with a standard-track \
                 run of the same problem and methods; valid: uqbench report {} --standard RUN_DIR",
                args.dir.display(),
                args.dir.display()
            );
        };
        return decision_report(&args.dir, standard);
    }
    if let Some(s) = &args.standard {
        bail!(
            "--standard {}: only a decision run's report (a directory with decisions.csv) takes \
             one; {} is not one",
            s.display(),
            args.dir.display()
        );
    }
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

fn read_rows(dir: &Path) -> Result<Vec<uqbench_experiment::compare::RepRow>> {
    let path = dir.join(REPETITIONS_CSV);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "{}: cannot read; valid: a run directory with {REPETITIONS_CSV}",
            path.display()
        )
    })?;
    Ok(read_repetitions(&text, &path.display().to_string())?)
}

/// The rank correlations of a decision run with a standard run: printed and written to
/// `rank_correlations.csv` in the decision run.
fn decision_report(dir: &Path, standard: &Path) -> Result<()> {
    let (decisions, std_rows) = (read_rows(dir)?, read_rows(standard)?);
    let main = if decisions.iter().any(|r| r.metric == "regret") {
        "regret"
    } else {
        "al_auc"
    };
    // One fixed seed: the bootstrap is part of the report, the same at every redraw.
    let table = rank_correlations(&decisions, &std_rows, main, 20_261_128)?;
    if table.is_empty() {
        bail!(
            "{} and {}: no setting has three methods in both runs; valid: a standard run of the \
             decision run's method agents ([decision] methods) and BLR",
            dir.display(),
            standard.display()
        );
    }
    let mut csv = String::from("setting,decision,against,methods,rho,lower,upper\n");
    outln!(
        "Spearman's ρ across methods between {main} and the standard track's scores (95% \
         bootstrap interval over repetitions, {BOOTSTRAP} resamples):"
    );
    outln!(
        "{:<14} {:<16} {:>7}  {:<17} methods",
        "setting",
        "against",
        "rho",
        "interval"
    );
    for c in &table {
        outln!(
            "{:<14} {:<16} {:>7.2}  [{:>6.2}, {:>6.2}]  {}",
            c.setting,
            c.against,
            c.rho,
            c.lower,
            c.upper,
            c.methods.join(" ")
        );
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{}",
            c.setting,
            c.decision,
            c.against,
            c.methods.join(" "),
            c.rho,
            c.lower,
            c.upper
        );
    }
    write_atomic(&dir.join("rank_correlations.csv"), csv.as_bytes())?;
    outln!("written: {}", dir.join("rank_correlations.csv").display());
    Ok(())
}
