//! `uqbench draws`: a run's stored joint predictives (`rep-NNN.draws`, see
//! `uqbench_experiment::draws`) written as `uqbench score`'s input, so that a run's joint
//! predictions can be scored again (other τ, other batches, another reference) or read by any
//! tool that reads JSON.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};

use uqbench_anchor::logistic;
use uqbench_experiment::draws::{draws_path, Draws};
use uqbench_experiment::spec::ExperimentSpec;
use uqbench_experiment::store::{rep_stem, setting_dir, write_atomic, SPEC_FILE};
use uqbench_experiment::summary::joint::JointKind;

/// Arguments of `uqbench draws`.
#[derive(Debug, Args)]
pub struct DrawsArgs {
    /// A run directory (the --out of `uqbench run`).
    pub dir: PathBuf,
    /// The method whose draws to write.
    #[arg(long)]
    pub method: String,
    /// Only this setting (KEY=VALUE, repeatable); every setting of the run by default.
    #[arg(long = "setting", value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
    /// Output directory: one sub-directory per setting holding `rep-NNN.json`, the input of
    /// `uqbench score SPEC --predictions OUT`.
    #[arg(long)]
    pub out: PathBuf,
}

/// `[rows, cols]` row-major values as `cols` rows of `rows` values (one per test input).
fn by_input(values: &[f64], rows: usize, cols: usize, map: impl Fn(f64) -> f64) -> Value {
    Value::from(
        (0..cols)
            .map(|c| {
                (0..rows)
                    .map(|r| map(values[r * cols + c]))
                    .collect::<Vec<f64>>()
            })
            .collect::<Vec<_>>(),
    )
}

/// One repetition's draws file as `uqbench score`'s JSON input.
pub fn score_input(d: &Draws) -> Result<Value> {
    let m = d.header.points;
    let block = |name: &str| d.block(name);
    let noise_std = block("noise_std").map(|b| b.values.clone());
    Ok(match d.header.kind {
        JointKind::Draws => {
            let s = block("samples").context("a draws file of kind draws without samples")?;
            let rows = s.info.rows;
            if d.header.values == "logit" {
                return Ok(json!({ "probs": by_input(&s.values, rows, m, logistic) }));
            }
            let mut out = json!({ "samples": by_input(&s.values, rows, m, |v| v) });
            if let Some(n) = block("noise_samples") {
                out["noise_std"] = Value::from(n.values.clone());
            } else if let Some(n) = block("sample_noise") {
                out["sample_noise"] = by_input(&n.values, rows, m, |v| v);
            } else if let Some(sd) = &noise_std {
                // The method's own noise sd at every input, the same for every draw.
                out["sample_noise"] =
                    Value::from(sd.iter().map(|&v| vec![v; rows]).collect::<Vec<Vec<f64>>>());
            }
            out
        }
        JointKind::Gaussian => {
            if let Some(nu) = d.header.dof {
                bail!(
                    "a Student-t joint (ν = {nu}) has no input form in `uqbench score`, which \
                     scores Gaussian joints; read it with Python's uqbench.read_draws"
                );
            }
            let mean = block("mean").context("a Gaussian draws file without its mean")?;
            let f = block("factor_t").context("a Gaussian draws file without its factor")?;
            let rank = f.info.rows;
            let cov: Vec<Vec<f64>> = (0..m)
                .map(|i| {
                    (0..m)
                        .map(|j| {
                            (0..rank)
                                .map(|r| f.values[r * m + i] * f.values[r * m + j])
                                .sum()
                        })
                        .collect()
                })
                .collect();
            let mut out = json!({ "mean": mean.values, "cov": cov });
            if let Some(sd) = noise_std {
                out["noise_std"] = Value::from(sd);
            }
            out
        }
        JointKind::Marginals => bail!("a draws file of kind marginals: runs do not write them"),
    })
}

/// Runs `uqbench draws`.
pub fn run(args: &DrawsArgs) -> Result<()> {
    let spec_path = args.dir.join(SPEC_FILE);
    if !spec_path.is_file() {
        bail!(
            "{} is not a run directory (no {SPEC_FILE}); give the --out of `uqbench run`",
            args.dir.display()
        );
    }
    let spec = ExperimentSpec::load(&spec_path)?;
    let run = spec.run.as_ref().context("the run's spec has no [run]")?;
    if !run.methods.contains(&args.method) && args.method != uqbench_experiment::summary::ANCHOR {
        bail!(
            "--method {}: the run has no such method; valid: {}",
            args.method,
            run.methods.join(", ")
        );
    }
    let settings = if args.settings.is_empty() {
        spec.settings()
    } else {
        vec![spec.parse_setting(&args.settings)?]
    };
    let mut written = 0;
    for setting in &settings {
        let dir = args.out.join(setting_dir(&setting.label()));
        for r in 0..run.repetitions {
            let path = draws_path(&args.dir, setting, &args.method, r);
            if !path.is_file() {
                // Repetitions are 0..K without gaps in a score input: stop at the first gap.
                break;
            }
            let value =
                score_input(&Draws::read(&path)?).with_context(|| path.display().to_string())?;
            write_atomic(
                &dir.join(format!("{}.json", rep_stem(r))),
                serde_json::to_string(&value)?.as_bytes(),
            )?;
            written += 1;
        }
    }
    if written == 0 {
        bail!(
            "{} holds no draws files of {} (a method with marginals only has none, and \
             run.draws = \"none\" writes none)",
            args.dir.display(),
            args.method
        );
    }
    outln!(
        "wrote {written} repetitions of {} to {}: score them with `uqbench score {} \
         --predictions {}`",
        args.method,
        args.out.display(),
        spec_path.display(),
        args.out.display()
    );
    Ok(())
}
