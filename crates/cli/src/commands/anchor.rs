//! `uqbench anchor`: one repetition of a problem with its exact posterior.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::{json, Value};
use uqbench_anchor::{Anchor, Problem, Setting};

use uqbench_experiment::spec::ExperimentSpec;

/// Arguments of `uqbench anchor`.
#[derive(Debug, Args)]
pub struct AnchorArgs {
    /// Experiment spec (TOML), e.g. experiments/e1.toml.
    pub spec: PathBuf,
    /// Sweep setting, KEY=VALUE (repeatable), e.g. --setting f_main=2. Unset keys take their
    /// first sweep value.
    #[arg(long = "setting", value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
    /// Repetition index (selects the noise draw).
    #[arg(long, default_value_t = 0)]
    pub rep: u64,
    /// Print the full result as one JSON object instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// With --json: add `cov`, the posterior covariance of f at the test inputs (M × M; for
    /// the Student-t posterior its scale matrix, with `dof`), for joint predictions.
    #[arg(long, requires = "json")]
    pub joint: bool,
}

/// Runs `uqbench anchor`.
pub fn run(args: &AnchorArgs) -> Result<()> {
    let spec = ExperimentSpec::load(&args.spec)?;
    let setting = spec.parse_setting(&args.settings)?;
    // With a random design the repetition's own inputs (a fixed design's are every one's).
    let problem = spec
        .resolve(&setting)?
        .at_repetition(args.rep)?
        .into_owned();
    let Some((features, gamma)) = problem.linear() else {
        return no_anchor(args, &spec, &setting, &problem);
    };
    let anchor = Anchor::fit(&problem)?;
    let draw = problem.draw(args.rep);
    let post = anchor
        .posterior(&draw.train_y)
        .with_context(|| format!("anchor of {}", problem.display_name()))?;

    if args.json {
        let report: Vec<Value> = problem
            .test
            .label
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.as_ref().map(|l| json!({"index": i, "label": l})))
            .collect();
        let mut out = json!({
            "experiment": spec.name,
            "setting": setting.label(),
            "repetition": args.rep,
            "train_x": problem.train.inputs.to_rows(),
            "train_y": draw.train_y,
            "train_truth": problem.train_truth,
            "train_sigma": problem.train_sigma,
            "validation_x": problem.validation.as_ref().map(|v| v.0.to_rows()),
            "validation_y": draw.validation_y,
            "validation_sigma": problem.validation.as_ref().map(|v| &v.1),
            "validation_truth": problem.validation.as_ref().map(|v| &v.2),
            "test_x": problem.test.inputs.to_rows(),
            "truth": problem.test.truth,
            "mean": post.mean,
            "std": post.std,
            "sigma": problem.test.sigma,
            "noise_std": post.noise_std,
            "predictive_std": post.predictive_std(),
            "dof": post.dof,
            "region": problem.test.region.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
            "report": report,
            "features": features.terms().iter().map(|t| t.name()).collect::<Vec<_>>(),
            "gamma": gamma,
            "gamma_hat": post.gamma_hat,
            "condition": anchor.condition(),
        });
        if args.joint {
            out["cov"] = json!(post.cov());
        }
        outln!("{out}");
        return Ok(());
    }

    let q = post.quantile_factor(0.95);
    let m = post.mean.len();
    let covered = (0..m)
        .filter(|&i| (post.mean[i] - problem.test.truth[i]).abs() <= q * post.std[i])
        .count();
    outln!("{} — repetition {}", problem.display_name(), args.rep);
    outln!(
        "  d = {}, p = {} features, N = {} training points, M = {} test points, condition number {:.3e}",
        problem.d(),
        anchor.p(),
        anchor.n(),
        m,
        anchor.condition()
    );
    outln!(
        "  posterior: {}; 95% intervals cover the truth at {covered} of {m} test points in this repetition",
        match post.dof {
            Some(nu) => format!("Student t with {nu} degrees of freedom"),
            None => "normal (σ known)".to_string(),
        }
    );
    for (i, label) in problem.test.label.iter().enumerate() {
        if let Some(label) = label {
            outln!(
                "  {label:>16} ({}): truth {:+.4}, mean {:+.4}, std {:.4}",
                problem.test.region[i].as_str(),
                problem.test.truth[i],
                post.mean[i],
                post.std[i]
            );
        }
    }
    outln!("  (add --json for every value)");
    Ok(())
}

/// [002]'s two-class problem: the training inputs and this repetition's labels, the test
/// inputs with the exact P(y = 1 | x) as `truth` and their region (`in`: inside the training
/// inputs' bounding box).
fn classification(
    args: &AnchorArgs,
    spec: &ExperimentSpec,
    setting: &Setting,
    problem: &Problem,
    tcc: &uqbench_anchor::Tcc,
    labels: &[f64],
) -> Result<()> {
    if args.json {
        let out = json!({
            "experiment": spec.name,
            "setting": setting.label(),
            "repetition": args.rep,
            "anchor": Value::Null,
            "task": "classification",
            "train_x": problem.train.inputs.to_rows(),
            "train_y": labels,
            "train_truth": problem.train_truth,
            "test_x": problem.test.inputs.to_rows(),
            "truth": problem.test.truth,
            "region": problem.test.region.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
            "lambda_scale": tcc.lambda_scale,
            "lambda_rot": tcc.lambda_rot,
            "p1": tcc.p1,
        });
        outln!("{out}");
        return Ok(());
    }
    let ones = labels.iter().filter(|&&y| y == 1.0).count();
    let inside = problem
        .test
        .region
        .iter()
        .filter(|r| r.as_str() == uqbench_experiment::summary::names::IN)
        .count();
    outln!("{} — repetition {}", problem.display_name(), args.rep);
    outln!(
        "  two-class problem of [002]: λ_scale = {}, λ_rot = {}, P(y = 1) = {}; N = {} \
         training points ({ones} labelled 1), M = {} test points ({inside} inside the training \
         inputs' bounding box); truth = the exact P(y = 1 | x), no anchor",
        tcc.lambda_scale,
        tcc.lambda_rot,
        tcc.p1,
        labels.len(),
        problem.test.truth.len()
    );
    outln!("  (add --json for the data and P(y = 1 | x) at every test input)");
    Ok(())
}

/// A problem without an anchor (a surrogate of a data set): its data, truth and σ(x), and a
/// note that there is no posterior.
fn no_anchor(
    args: &AnchorArgs,
    spec: &ExperimentSpec,
    setting: &Setting,
    problem: &Problem,
) -> Result<()> {
    let draw = problem.draw(args.rep);
    if let Some(tcc) = problem.classification() {
        return classification(args, spec, setting, problem, tcc, &draw.train_y);
    }
    if args.json {
        let out = json!({
            "experiment": spec.name,
            "setting": setting.label(),
            "repetition": args.rep,
            "anchor": Value::Null,
            "train_x": problem.train.inputs.to_rows(),
            "train_y": draw.train_y,
            "train_truth": problem.train_truth,
            "train_sigma": problem.train_sigma,
            "validation_x": problem.validation.as_ref().map(|v| v.0.to_rows()),
            "validation_y": draw.validation_y,
            "validation_sigma": problem.validation.as_ref().map(|v| &v.1),
            "validation_truth": problem.validation.as_ref().map(|v| &v.2),
            "test_x": problem.test.inputs.to_rows(),
            "truth": problem.test.truth,
            "sigma": problem.test.sigma,
            "region": problem.test.region.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
        });
        outln!("{out}");
        return Ok(());
    }
    outln!("{} — repetition {}", problem.display_name(), args.rep);
    outln!(
        "  no anchor: f and σ(x) are random forests fitted to a data set (`uqbench check {}` \
         describes them); d = {}, N = {} training points, M = {} test points",
        args.spec.display(),
        problem.d(),
        problem.train.inputs.len(),
        problem.test.truth.len()
    );
    outln!("  (add --json for the data, f and σ(x) at every point)");
    Ok(())
}
