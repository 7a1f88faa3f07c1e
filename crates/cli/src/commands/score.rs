//! `uqbench score`: summarise predictions made by any other tool against the truth and the
//! anchor, with the same files as a native run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Deserialize;

use uqbench_anchor::{Anchor, Problem};
use uqbench_experiment::score::{
    classification_rep, regression_rep, score_setting, External, JointScoring,
};
use uqbench_experiment::spec::ExperimentSpec;
use uqbench_experiment::store::{rep_stem, setting_dir};
use uqbench_experiment::summary::{ClassRep, RepResult, Summary, ANCHOR};
use uqbench_experiment::{Stored, Track};

/// Arguments of `uqbench score`.
#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// Experiment spec (TOML) the predictions were made for.
    pub spec: PathBuf,
    /// Directory with one sub-directory per setting (`f_main=2`, or `default` without a sweep)
    /// holding `rep-NNN.csv` (columns mean,std[,noise_std]) or `rep-NNN.json`
    /// ({"mean", "std"[, "noise_std"]}, {"mean", "cov"[, "noise_std"]} with the covariance of
    /// f at the test inputs, or {"samples": [[..] per test input][, "noise_std": [.. per
    /// draw] or "sample_noise": [[.. per draw] per test input]]}: a draw is one function, the
    /// same index at every input; `uqbench draws` writes a run's stored draws in this form). For a
    /// classification problem: `rep-NNN.csv` with a column `prob`, or `rep-NNN.json` with
    /// {"probs": [P(y = 1 | x) per test input]} or {"probs": [[draws] per test input]}.
    #[arg(long)]
    pub predictions: PathBuf,
    /// Output directory for summary.json, summary.csv and aggregate.csv (default:
    /// PREDICTIONS/score).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Name of the scored method in the summaries.
    #[arg(long, default_value = "external")]
    pub method: String,
    /// Only this setting (KEY=VALUE, repeatable); by default every setting with a directory.
    #[arg(long = "setting", value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
    /// Interval levels (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "0.95,0.9,0.8,0.7")]
    pub levels: Vec<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum JsonPrediction {
    Gaussian {
        mean: Vec<f64>,
        #[serde(default)]
        std: Option<Vec<f64>>,
        #[serde(default)]
        noise_std: Option<Vec<f64>>,
        #[serde(default)]
        cov: Option<Vec<Vec<f64>>>,
    },
    Samples {
        samples: Vec<Vec<f64>>,
        #[serde(default)]
        noise_std: Option<Vec<f64>>,
        #[serde(default)]
        sample_noise: Option<Vec<Vec<f64>>>,
    },
}

/// Means, standard deviations and optional noise sds, one per test input.
type Columns = (Vec<f64>, Vec<f64>, Option<Vec<f64>>);

fn read_csv(path: &Path) -> Result<Columns> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = lines
        .next()
        .with_context(|| format!("{} is empty", path.display()))?
        .split(',')
        .map(|h| h.trim().trim_matches('"').to_string())
        .collect();
    let col = |name: &str| header.iter().position(|h| h == name);
    let (Some(im), Some(is)) = (col("mean"), col("std")) else {
        bail!(
            "{}: header {:?} needs columns `mean` and `std` (and optionally `noise_std`)",
            path.display(),
            header
        );
    };
    let inoise = col("noise_std");
    let (mut mean, mut std, mut noise) = (Vec::new(), Vec::new(), Vec::new());
    for (k, line) in lines.enumerate() {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let get = |i: usize, name: &str| -> Result<f64> {
            let cell = cells.get(i).with_context(|| {
                format!("{}: row {} has no `{name}` cell", path.display(), k + 1)
            })?;
            cell.parse::<f64>().with_context(|| {
                format!(
                    "{}: row {}: `{cell}` in column `{name}` is not a number",
                    path.display(),
                    k + 1
                )
            })
        };
        mean.push(get(im, "mean")?);
        std.push(get(is, "std")?);
        if let Some(i) = inoise {
            noise.push(get(i, "noise_std")?);
        }
    }
    Ok((mean, std, inoise.map(|_| noise)))
}

/// Reads one repetition's predictions (`rep-NNN.csv` or `rep-NNN.json`); the checks and the
/// stored form are `uqbench_experiment::score`'s.
fn read_rep(
    dir: &Path,
    rep: u64,
    problem: &Problem,
    anchor: Option<&Anchor>,
    levels: &[f64],
    joint: Option<&JointScoring>,
) -> Result<RepResult> {
    let stem = rep_stem(rep);
    let csv = dir.join(format!("{stem}.csv"));
    let json = dir.join(format!("{stem}.json"));
    let (prediction, path) = match (csv.exists(), json.exists()) {
        (true, true) => bail!(
            "both {} and {} exist: keep one",
            csv.display(),
            json.display()
        ),
        (true, false) => {
            let (mean, std, noise_std) = read_csv(&csv)?;
            (
                External::Gaussian {
                    mean,
                    std: Some(std),
                    noise_std,
                    cov: None,
                },
                csv,
            )
        }
        (false, true) => {
            let text = std::fs::read_to_string(&json)
                .with_context(|| format!("cannot read {}", json.display()))?;
            let p: JsonPrediction = serde_json::from_str(&text).with_context(|| {
                format!(
                    "{}: expected {{\"mean\": [..], \"std\": [..]}} or {{\"samples\": [[..], ..]}}",
                    json.display()
                )
            })?;
            let prediction = match p {
                JsonPrediction::Gaussian {
                    mean,
                    std,
                    noise_std,
                    cov,
                } => External::Gaussian {
                    mean,
                    std,
                    noise_std,
                    cov,
                },
                JsonPrediction::Samples {
                    samples,
                    noise_std,
                    sample_noise,
                } => External::Samples {
                    samples,
                    noise_std,
                    sample_noise,
                },
            };
            (prediction, json)
        }
        (false, false) => bail!(
            "repetition {rep} is missing: neither {} nor {} exists",
            csv.display(),
            json.display()
        ),
    };
    regression_rep(rep, prediction, problem, anchor, levels, joint)
        .with_context(|| path.display().to_string())
}

/// The repetition indices present in `dir`; they must be 0..K without gaps.
fn repetitions(dir: &Path) -> Result<Vec<u64>> {
    let mut reps = BTreeSet::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("rep-") else {
            continue;
        };
        let Some((num, ext)) = rest.split_once('.') else {
            continue;
        };
        if ext != "csv" && ext != "json" {
            continue; // rep-NNN.train.csv and rep-NNN.test.csv are exported data, not predictions
        }
        if let Ok(r) = num.parse::<u64>() {
            reps.insert(r);
        }
    }
    if reps.is_empty() {
        bail!(
            "{}: no predictions (rep-NNN.csv or rep-NNN.json)",
            dir.display()
        );
    }
    let k = reps.len() as u64;
    if let Some(missing) = (0..k).find(|r| !reps.contains(r)) {
        bail!(
            "{}: repetition {missing} is missing (found {} files up to repetition {}); repetitions must be 0..K without gaps",
            dir.display(),
            reps.len(),
            reps.iter().max().unwrap()
        );
    }
    Ok(reps.into_iter().collect())
}

/// A classification problem's predictions: `probs`, one P(y = 1 | x) per test input, or one
/// list of draws (members' or passes' probabilities) per test input.
#[derive(Debug, Deserialize)]
struct JsonProbs {
    probs: ProbsField,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ProbsField {
    Point(Vec<f64>),
    Draws(Vec<Vec<f64>>),
}

/// Reads one repetition's classification predictions (`rep-NNN.json` with `probs`, or
/// `rep-NNN.csv` with a `prob` column) into its stored form: draws as rows.
fn read_class_rep(
    dir: &Path,
    rep: u64,
    problem: &Problem,
    levels: &[f64],
    joint: Option<&JointScoring>,
) -> Result<ClassRep> {
    let stem = rep_stem(rep);
    let csv = dir.join(format!("{stem}.csv"));
    let json = dir.join(format!("{stem}.json"));
    let (per_input, path): (Vec<Vec<f64>>, PathBuf) = match (csv.exists(), json.exists()) {
        (true, true) => bail!(
            "both {} and {} exist: keep one",
            csv.display(),
            json.display()
        ),
        (true, false) => {
            let text = std::fs::read_to_string(&csv)
                .with_context(|| format!("cannot read {}", csv.display()))?;
            let mut lines = text.lines().filter(|l| !l.trim().is_empty());
            let header: Vec<&str> = lines
                .next()
                .with_context(|| format!("{} is empty", csv.display()))?
                .split(',')
                .map(|h| h.trim().trim_matches('"'))
                .collect();
            let Some(col) = header.iter().position(|h| *h == "prob") else {
                bail!(
                    "{}: header {header:?} needs a column `prob` (P(y = 1 | x) per test input)",
                    csv.display()
                );
            };
            let mut out = Vec::new();
            for (k, line) in lines.enumerate() {
                let cell = line.split(',').nth(col).map(str::trim).with_context(|| {
                    format!("{}: row {} has no `prob` cell", csv.display(), k + 1)
                })?;
                let v: f64 = cell.parse().with_context(|| {
                    format!("{}: row {}: `{cell}` is not a number", csv.display(), k + 1)
                })?;
                out.push(vec![v]);
            }
            (out, csv)
        }
        (false, true) => {
            let text = std::fs::read_to_string(&json)
                .with_context(|| format!("cannot read {}", json.display()))?;
            let p: JsonProbs = serde_json::from_str(&text).with_context(|| {
                format!(
                    "{}: expected {{\"probs\": [..]}} (one P(y = 1 | x) per test input) or \
                     {{\"probs\": [[..], ..]}} (the members' or passes' probabilities per test input)",
                    json.display()
                )
            })?;
            let rows = match p.probs {
                ProbsField::Point(v) => v.into_iter().map(|p| vec![p]).collect(),
                ProbsField::Draws(v) => v,
            };
            (rows, json)
        }
        (false, false) => bail!(
            "repetition {rep} is missing: neither {} nor {} exists",
            csv.display(),
            json.display()
        ),
    };
    classification_rep(rep, per_input, problem, levels, joint)
        .with_context(|| path.display().to_string())
}

/// Runs `uqbench score`.
pub fn run(args: &ScoreArgs) -> Result<()> {
    let spec = ExperimentSpec::load(&args.spec)?;
    // The joint metrics with the spec's settings (run.joint_*), seeded as its run would be.
    let joint = JointScoring::of(&spec);
    if args.method == ANCHOR {
        bail!("--method {ANCHOR}: that name is the anchor's; choose another");
    }
    let settings = if args.settings.is_empty() {
        spec.settings()
    } else {
        vec![spec.parse_setting(&args.settings)?]
    };
    let mut out_settings = Vec::new();
    for setting in settings {
        let label = setting.label();
        let dir = args.predictions.join(setting_dir(&label));
        if !dir.is_dir() {
            if args.settings.is_empty() && spec.settings().len() > 1 {
                continue; // score the settings that have predictions
            }
            bail!(
                "no predictions for setting `{}`: {} is not a directory",
                setting_dir(&label),
                dir.display()
            );
        }
        let problem = spec.resolve(&setting)?;
        let track = Track::of(&problem);
        let reps = repetitions(&dir)?;
        // The anchor's fit depends on the inputs only: one per setting, for every repetition.
        let anchor = match (track, problem.linear()) {
            (Track::Regression, Some(_)) => Some(Anchor::fit(&problem)?),
            _ => None,
        };
        let external = reps
            .iter()
            .map(|&r| match track {
                Track::Regression => read_rep(
                    &dir,
                    r,
                    &problem,
                    anchor.as_ref(),
                    &args.levels,
                    joint.as_ref(),
                )
                .map(Stored::Regression),
                Track::Classification => {
                    read_class_rep(&dir, r, &problem, &args.levels, joint.as_ref())
                        .map(Stored::Classification)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        out_settings.push(score_setting(
            &spec,
            &setting,
            &problem,
            &args.method,
            external,
            &args.levels,
        )?);
        eprintln!(
            "scored setting `{}`: {} repetitions",
            setting_dir(&label),
            reps.len()
        );
    }
    if out_settings.is_empty() {
        bail!(
            "{}: no setting directories found; expected one of: {}",
            args.predictions.display(),
            spec.settings()
                .iter()
                .map(|s| setting_dir(&s.label()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let summary = Summary {
        experiment: spec.name.clone(),
        levels: args.levels.clone(),
        settings: out_settings,
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.predictions.join("score"));
    summary.write(&out)?;
    eprintln!(
        "wrote summary.json, summary.csv, aggregate.csv and repetitions.csv to {}",
        out.display()
    );
    Ok(())
}
