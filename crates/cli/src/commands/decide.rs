//! `uqbench decide`: the decision track of a spec's `[decision]` section (spec §12): every
//! setting's repetitions as a bandit or an active-learning pool, the exact policy and the
//! baselines on each, their regret (or `al_auc`) against the exact posterior's.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use uqbench_anchor::Problem;
use uqbench_core::par_map;
use uqbench_experiment::decision::results::{self, Row};
use uqbench_experiment::decision::{
    env::Environment, run_spec_repetition, DecisionKind, DecisionSpec,
};
use uqbench_experiment::spec::ExperimentSpec;
use uqbench_experiment::store::write_atomic;

/// Arguments of `uqbench decide`.
#[derive(Debug, Args)]
pub struct DecideArgs {
    /// Experiment spec (TOML) with a [decision] section, e.g. experiments/bandit.toml.
    pub spec: PathBuf,
    /// Profile(s) merged over the spec, comma-separated (e.g. quick).
    #[arg(long)]
    pub profile: Option<String>,
    /// Output directory (default: runs/NAME-decide or runs/NAME-PROFILE-decide).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print only the output directory's path when done.
    #[arg(long)]
    pub quiet: bool,
}

/// Every setting's problem, with the `[decision]` section checked against it (what `uqbench
/// check` and `decide` do before anything runs).
pub fn check(spec: &ExperimentSpec, decision: &DecisionSpec) -> Result<Vec<Problem>> {
    spec.settings()
        .iter()
        .map(|setting| {
            let problem = spec.resolve(setting)?;
            decision
                .validate(&problem)
                .with_context(|| format!("setting {}", setting.label()))?;
            Ok(problem)
        })
        .collect()
}

/// Runs `uqbench decide`.
pub fn run(args: &DecideArgs) -> Result<()> {
    let spec = ExperimentSpec::load_profile(&args.spec, args.profile.as_deref())?;
    let Some(decision) = spec.decision.clone() else {
        bail!(
            "{}: no [decision] section; valid: a spec with [decision] kind = \"bandit\" or \
             \"active\" (experiments/bandit.toml, experiments/active.toml)",
            args.spec.display()
        );
    };
    // Every setting checked before the first repetition runs.
    let problems = check(&spec, &decision)?;
    let dir = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("runs").join(match &args.profile {
            Some(p) => format!("{}-{p}-decide", spec.name),
            None => format!("{}-decide", spec.name),
        })
    });
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_atomic(
        &dir.join("spec.resolved.toml"),
        spec.resolved_toml()?.as_bytes(),
    )?;
    let (mut rows, mut curves): (Vec<Row>, Vec<results::Curve>) = (Vec::new(), Vec::new());
    for problem in &problems {
        let label = problem.setting.label();
        let per_rep = par_map(decision.repetitions as usize, |r| {
            Ok::<_, anyhow::Error>(run_spec_repetition(
                (spec.seed, &spec.name),
                &decision,
                problem,
                r as u64,
                Vec::new(),
            )?)
        })
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
        for (r, res) in per_rep.iter().enumerate() {
            rows.extend(results::rows(decision.kind, &label, r as u64, res));
        }
        curves.extend(results::curves(&label, &per_rep));
    }
    results::write(&dir, &rows, &curves)?;
    let p = Environment::from_problem(&problems[0], decision.actions, 0)?
        .actions
        .p;
    let figure = crate::figures::draw_decisions(
        &dir.join("figures"),
        &spec.name,
        decision.kind,
        (decision.initial_pulls(p), decision.batch),
        &curves,
    )?;
    if args.quiet {
        outln!("{}", dir.display());
        return Ok(());
    }
    let main = match decision.kind {
        DecisionKind::Bandit => ["regret", "regret_ratio", "optimal_fraction"],
        DecisionKind::Active => ["al_auc", "al_auc_ratio", "nll"],
    };
    outln!(
        "{} ({:?}, {} repetitions, {} steps of {}): mean ± standard error",
        spec.name,
        decision.kind,
        decision.repetitions,
        decision.steps,
        decision.batch
    );
    outln!(
        "{:<16} {:<10} {:>20} {:>20} {:>20}",
        "setting",
        "policy",
        main[0],
        main[1],
        main[2]
    );
    let agg = results::aggregate(&rows);
    let cell = |s: &str, p: &str, m: &str| {
        agg.iter()
            .find(|(a, b, c, _)| a == s && b == p && *c == m)
            .map_or(String::from("-"), |(.., (mean, se, _))| {
                format!("{mean:.3} ± {se:.3}")
            })
    };
    for c in &curves {
        outln!(
            "{:<16} {:<10} {:>20} {:>20} {:>20}",
            c.setting,
            c.policy,
            cell(&c.setting, &c.policy, main[0]),
            cell(&c.setting, &c.policy, main[1]),
            cell(&c.setting, &c.policy, main[2])
        );
    }
    outln!("results: {} (figure: {})", dir.display(), figure.display());
    Ok(())
}
