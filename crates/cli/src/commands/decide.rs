//! `uqbench decide`: the decision track of a spec's `[decision]` section (spec §12): every
//! setting's repetitions as a bandit or an active-learning pool, the exact policy and the
//! baselines on each, their regret (or `al_auc`) against the exact posterior's.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use uqbench_anchor::{Problem, Setting};
use uqbench_core::{par_map, Compute, Method};
use uqbench_engine::{open_device, BackendKind, Resources};
use uqbench_experiment::decision::agent::MethodAgent;
use uqbench_experiment::decision::env::{initial_actions, History};
use uqbench_experiment::decision::lockstep;
use uqbench_experiment::decision::results::{self, Row};
use uqbench_experiment::decision::{
    env::Environment, run_spec_repetition, DecisionKind, DecisionSpec, PolicyResult, Update,
};
use uqbench_experiment::spec::ExperimentSpec;
use uqbench_experiment::store::write_atomic;
use uqbench_methods as registry;

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
    /// Backend of the method agents ([decision] methods): flex (default), ndarray or wgpu.
    #[arg(long, default_value = "flex")]
    pub backend: BackendKind,
    /// Let --backend wgpu run on a software adapter (lavapipe, llvmpipe, SwiftShader); tests
    /// use it. Without it (or UQBENCH_ALLOW_SOFTWARE_GPU=1) a software adapter is an error.
    #[arg(long, env = "UQBENCH_ALLOW_SOFTWARE_GPU", value_parser = clap::builder::FalseyValueParser::new())]
    pub allow_software_gpu: bool,
}

/// Every setting's problem, with the `[decision]` section and its method agents checked
/// against it (what `uqbench check` and `decide` do before anything runs).
pub fn check(spec: &ExperimentSpec, decision: &DecisionSpec) -> Result<Vec<Problem>> {
    let compute =
        Resources::new(BackendKind::Flex, open_device(BackendKind::Flex, false)?).compute();
    spec.settings()
        .iter()
        .map(|setting| {
            let problem = spec.resolve(setting)?;
            decision
                .validate(&problem)
                .with_context(|| format!("setting {}", setting.label()))?;
            agents(spec, decision, setting, &problem, &compute)?;
            Ok(problem)
        })
        .collect()
}

/// The method agents of `decision` at `setting`, each built and checked on the task of the
/// initial pulls: a method whose predictive is intervals of y alone is refused with the
/// reason.
fn agents(
    spec: &ExperimentSpec,
    decision: &DecisionSpec,
    setting: &Setting,
    problem: &Problem,
    compute: &Compute,
) -> Result<Vec<Box<dyn Method>>> {
    let env = Environment::from_problem(problem, decision.actions, 0)?;
    let mut initial = History::default();
    let pulls = decision.initial_pulls(env.actions.p);
    for a in initial_actions(env.actions.len(), pulls, 0) {
        initial.push(a, env.truth[a]);
    }
    let at = |name: &str| {
        format!(
            "[decision] methods: `{name}` at setting {}",
            setting.label()
        )
    };
    decision
        .methods
        .iter()
        .map(|name| {
            let kind = spec
                .method_table(name, setting)?
                .and_then(|t| t.get("kind").and_then(|k| k.as_str()).map(String::from))
                .unwrap_or_else(|| name.clone());
            let method = registry::build_for(spec, name, setting).with_context(|| at(name))?;
            if registry::POSTHOC.contains(&kind.as_str()) || method.band_levels().is_some() {
                bail!(
                    "{}: a {kind} predicts intervals of y (a calibration or quantile bands), \
                     not a distribution of f to draw from or to take a covariance of; valid: a \
                     method with a predictive distribution of f (Ens, EnsPrior, Epinet, SGLD, \
                     BD, MFVI, Laplace, SWAG, HMC, DER, …)",
                    at(name)
                );
            }
            if decision.update == Update::Warm && method.warm_start().is_none() {
                bail!(
                    "{}: update = \"warm\", but {kind} has no warm start (it cannot continue a \
                     previous training); valid: update = \"retrain\", or agents that warm-start: \
                     the ensembles on the built-in network (Ens, EnsAdvA, EnsBS and their \
                     tables), EnsPrior and BD",
                    at(name)
                );
            }
            let experiment = (spec.seed, spec.name.as_str());
            let agent = MethodAgent::of(
                method.as_ref(),
                compute,
                decision,
                experiment,
                &setting.label(),
                0,
            );
            agent
                .with_task(&env.actions, &initial, |t| method.check(t, &[0.95]))
                .with_context(|| at(name))?;
            Ok(method)
        })
        .collect()
}

/// Every repetition of `problem`: the baselines on each (the repetitions spread over the
/// cores), then each method agent on all of them stepped together ([`lockstep::run_agents`]:
/// one training call per step for every repetition, one engine job for the ensembles,
/// ensemble+, SG-MCMC and the dropout family), its results after the baselines' as
/// `run_spec_repetition` orders them.
fn repetitions(
    spec: &ExperimentSpec,
    decision: &DecisionSpec,
    problem: &Problem,
    methods: &[Box<dyn Method>],
    compute: &Compute,
) -> Result<Vec<Vec<PolicyResult>>> {
    let experiment = (spec.seed, spec.name.as_str());
    let mut per_rep = par_map(decision.repetitions as usize, |r| {
        run_spec_repetition(experiment, decision, problem, r as u64, Vec::new())
    })
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    for m in methods {
        let results = lockstep::run_agents(decision, problem, experiment, m.as_ref(), compute)
            .with_context(|| format!("agent {}", m.name()))?;
        for (rep, result) in per_rep.iter_mut().zip(results) {
            rep.push(result);
        }
    }
    Ok(per_rep)
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
    // A method agent's trainings of every repetition at a step go to the method at once
    // (`Method::run_tasks`), which spreads them over all the cores or trains them as one job.
    let device = open_device(args.backend, args.allow_software_gpu)?;
    let resources = Resources::new(args.backend, device);
    let compute = resources.compute();
    let (mut rows, mut curves): (Vec<Row>, Vec<results::Curve>) = (Vec::new(), Vec::new());
    for (problem, setting) in problems.iter().zip(spec.settings()) {
        let label = problem.setting.label();
        let started = Instant::now();
        let methods = agents(&spec, &decision, &setting, problem, &compute)?;
        let per_rep = repetitions(&spec, &decision, problem, &methods, &compute)?;
        if !args.quiet && !methods.is_empty() {
            eprintln!(
                "setting {label}: {} repetitions with {} method agents in {:.1} s",
                decision.repetitions,
                methods.len(),
                started.elapsed().as_secs_f64()
            );
        }
        for m in &methods {
            let lost = (per_rep.iter().flatten())
                .filter(|p| p.policy == m.name() && p.extra.is_nan() && p.curve[0].is_nan())
                .count();
            if lost > 0 {
                eprintln!(
                    "setting {label}: agent {} diverged on {lost} of {} repetitions (left out of \
                     its metrics: their rows are empty, n counts the rest)",
                    m.name(),
                    decision.repetitions
                );
            }
        }
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
        DecisionKind::Active => ["al_auc", "al_auc_ratio", "al_nll"],
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
