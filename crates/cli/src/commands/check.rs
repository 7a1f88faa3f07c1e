//! `uqbench check`: validate a spec and describe every setting's problem and anchor (or, for
//! a surrogate problem, its forests and split).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use uqbench_anchor::{Anchor, Model, Noise, Region};

use crate::runner::{check_methods, Plan};
use uqbench_experiment::spec::ExperimentSpec;

/// Arguments of `uqbench check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Experiment spec (TOML).
    pub spec: PathBuf,
    /// Named profile(s) of the spec, as for `uqbench run`.
    #[arg(long)]
    pub profile: Option<String>,
    /// Only these methods (comma separated), as for `uqbench run`.
    #[arg(long, value_delimiter = ',')]
    pub methods: Option<Vec<String>>,
}

/// Runs `uqbench check`: the problems, then (for a spec with a [run]) every method table at
/// every setting against its problem, as `uqbench run` does before it trains.
pub fn run(args: &CheckArgs) -> Result<()> {
    let spec = ExperimentSpec::load_profile(&args.spec, args.profile.as_deref())?;
    describe(&spec)?;
    if let Some(decision) = &spec.decision {
        let problems = super::decide::check(&spec, decision)?;
        outln!(
            "decision: {:?}, {} repetitions of {} steps of {} at {} settings checked against \
             their problems",
            decision.kind,
            decision.repetitions,
            decision.steps,
            decision.batch,
            problems.len()
        );
    }
    if spec.run.is_some() {
        let plan = Plan::new(spec, args.methods.as_deref())?;
        let checked = check_methods(&plan)?;
        outln!(
            "methods: {} at {} settings checked against their problems ({checked} pairs)",
            plan.methods.join(", "),
            plan.settings.len()
        );
    }
    outln!("ok");
    Ok(())
}

/// Prints every setting's problem and anchor (or forests and split).
fn describe(spec: &ExperimentSpec) -> Result<()> {
    outln!("experiment `{}`: {}", spec.name, spec.description);
    for setting in spec.settings() {
        let problem = spec.resolve(&setting)?;
        let count = |r: Region| problem.test.region.iter().filter(|&&x| x == r).count();
        let label = setting.label();
        let label = if label.is_empty() {
            "(no sweep)".to_string()
        } else {
            label
        };
        let regions = format!(
            "{} in, {} gap, {} out",
            count(Region::In),
            count(Region::Gap),
            count(Region::Out)
        );
        match &problem.model {
            Model::Linear { features, gamma } => {
                let anchor = Anchor::fit(&problem)?;
                outln!(
                    "  {label}: d = {}, p = {}, N = {}, M = {} test points ({regions}), σ {}, \
                     anchor {}, condition {:.3e}",
                    problem.d(),
                    anchor.p(),
                    anchor.n(),
                    problem.test.truth.len(),
                    match &problem.noise {
                        Noise::Constant(s) => format!("= {s}"),
                        Noise::Function(e) => format!("= {e}"),
                        Noise::Surrogate => "from a forest".to_string(),
                        Noise::Bernoulli => "Bernoulli".to_string(),
                    },
                    if problem.sigma_known {
                        "normal"
                    } else {
                        "Student t"
                    },
                    anchor.condition(),
                );
                let names: Vec<String> = features.terms().iter().map(|t| t.name()).collect();
                outln!("      G = ({})", names.join(", "));
                if problem.is_random_design() {
                    outln!(
                        "      inputs drawn per repetition (design = \"random\"): the counts \
                         and the anchor above are repetition 0's"
                    );
                }
                outln!(
                    "      γ = ({})",
                    gamma
                        .iter()
                        .map(|g| format!("{g:.4}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            Model::Surrogate(info) => {
                let sd = &problem.test.sigma;
                let (lo, hi) = sd
                    .iter()
                    .fold((f64::INFINITY, 0.0_f64), |(l, h), &s| (l.min(s), h.max(s)));
                outln!(
                    "  {label}: surrogate of {} ({} rows, target {}), d = {}, N = {}, \
                     validation {}, M = {} test points ({regions}), no anchor",
                    info.data,
                    info.rows,
                    info.target,
                    problem.d(),
                    problem.train.inputs.len(),
                    problem.validation.as_ref().map_or(0, |v| v.0.len()),
                    problem.test.truth.len(),
                );
                outln!(
                    "      f: forest with out-of-bag R² {:.3}; σ(x) at the test rows from {lo:.3} \
                     to {hi:.3}; units: target sd {:.4} (mean {:.4}) of the data",
                    info.oob_r2,
                    info.target_scale.1,
                    info.target_scale.0
                );
                outln!("      covariates: {}", info.covariates.join(", "));
            }
            Model::Classification(tcc) => {
                let p = &problem.train_truth;
                outln!(
                    "  {label}: two-class problem of [002] (λ_scale = {}, λ_rot = {}, P(y = 1) = \
                     {}), N = {}, M = {} test points ({regions}), truth = exact P(y = 1 | x), \
                     no anchor; mean P(y = 1 | x) at the training inputs {:.3}",
                    tcc.lambda_scale,
                    tcc.lambda_rot,
                    tcc.p1,
                    problem.train.inputs.len(),
                    problem.test.truth.len(),
                    p.iter().sum::<f64>() / p.len() as f64,
                );
            }
        }
    }
    Ok(())
}
