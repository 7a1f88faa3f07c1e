//! Every metric of one input of predictions, as `uqbench metrics` prints it and the Python
//! package returns it: regression (means and stds, optionally samples), classification
//! (class probabilities, optionally members'), log-likelihood tables (WAIC, ISCV) and MCMC
//! draws (R̂, ESS).

use serde::Deserialize;
use serde_json::{json, Map, Value};
use uqbench_metrics::classification::{self as cls, Binning, CalibrationConfig};
use uqbench_metrics::information::{importance_sampling_cv, negative_waic, LogLikTable, WaicType};
use uqbench_metrics::ranking::roc_auc;
use uqbench_metrics::regression as reg;

use crate::bail;
use crate::error::{Context, Result};
use crate::summary::joint::{self, factor_of, Exact, JointInput, JointSettings, JOINT_DRAWS};
use uqbench_core::{Prediction, SeedPath};

/// The settings of the metrics that have any.
#[derive(Debug, Clone)]
pub struct Options {
    /// Bins of the classification calibration errors.
    pub bins: usize,
    /// Interval levels of the regression coverage, width and interval score.
    pub levels: Vec<f64>,
    /// Probability threshold of the thresholded adaptive calibration error.
    pub tace_threshold: f64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            bins: 15,
            levels: vec![0.95, 0.9, 0.8, 0.7],
            tace_threshold: 0.01,
        }
    }
}

/// One input, as JSON: `{"kind": "regression" | "classification" | "draws", …}`.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Input {
    /// Means and stds of a normal predictive per point, the observed y, optionally draws.
    Regression {
        /// Predictive means.
        mean: Vec<f64>,
        /// Predictive standard deviations.
        std: Vec<f64>,
        /// Observed targets.
        y: Vec<f64>,
        /// Optional draws, one row per point.
        #[serde(default)]
        samples: Option<Vec<Vec<f64>>>,
        /// Optional (n × m) table of log-likelihoods for WAIC and ISCV.
        #[serde(default)]
        loglik: Option<Vec<Vec<f64>>>,
    },
    /// Class probabilities per point and the observed labels.
    Classification {
        /// Class probabilities, one row per point.
        probs: Vec<Vec<f64>>,
        /// Observed classes.
        labels: Vec<usize>,
        /// Optional per-member probabilities, members × points × classes, for entropies.
        #[serde(default)]
        member_probs: Option<Vec<Vec<Vec<f64>>>>,
        /// Optional (n × m) table of log-likelihoods for WAIC and ISCV.
        #[serde(default)]
        loglik: Option<Vec<Vec<f64>>>,
    },
    /// MCMC draws of one quantity, one list per chain.
    Draws {
        /// Draws per chain.
        draws: Vec<Vec<f64>>,
    },
    /// A joint predictive of f at M points against an exact joint or the data-generating
    /// distribution (spec §10): `joint_kl_T` and `env_kl_T`.
    Joint(Box<JointSpec>),
    /// Draws of P(y = 1 | x) at M points against the true probabilities: `env_kl_T` of the
    /// labels (spec §10).
    JointClassification {
        /// Draws per point, `[M][S]`.
        probs: Vec<Vec<f64>>,
        /// The true P(y = 1 | x) per point.
        truth: Vec<f64>,
        /// Batch sizes τ.
        #[serde(default = "default_tau")]
        tau: Vec<usize>,
        /// Dyadic sampling's anchors κ.
        #[serde(default = "default_kappa")]
        kappa: usize,
        /// Batches per τ.
        #[serde(default = "default_batches")]
        batches: usize,
        /// Seed of the batches.
        #[serde(default)]
        seed: u64,
    },
}

/// `env_kl_T` of label draws (`probs` `[M][S]`) against the true probabilities.
fn joint_classification(
    probs: &[Vec<f64>],
    truth: &[f64],
    settings: JointSettings,
    seed: u64,
    out: &mut Map<String, Value>,
) -> Result<()> {
    let m = truth.len();
    let s = probs.first().map_or(0, Vec::len);
    if m == 0 || probs.len() != m || s == 0 || probs.iter().any(|p| p.len() != s) {
        bail!(
            "probs: {} rows; valid: {m} rows (one per point, as truth) of equally many draws",
            probs.len()
        );
    }
    if let Some(p) = probs
        .iter()
        .flatten()
        .chain(truth)
        .find(|p| !(0.0..=1.0).contains(*p))
    {
        bail!("a probability {p}; valid: a number in [0, 1]");
    }
    settings.check("")?;
    let draws: Vec<Vec<f64>> = (0..s)
        .map(|k| probs.iter().map(|p| p[k]).collect())
        .collect();
    let regions = vec![("all", (0..m).collect::<Vec<_>>())];
    let input = JointInput {
        settings: &settings,
        seed: SeedPath {
            base: seed,
            experiment: "metrics",
            setting: "",
            repetition: 0,
            member: 0,
            purpose: JOINT_DRAWS,
        },
        regions: &regions,
        exact: None,
    };
    for (name, v) in &joint::classification(&draws, truth, &input)?["all"] {
        out.insert(name.clone(), num(v));
    }
    Ok(())
}

/// `{"kind": "joint", …}`: the method's joint (draws `samples` `[M][S]` with an optional
/// `noise_std` per draw, or `mean` with `cov` `[M][M]` or `std` and an optional `noise_std`
/// per point), the noise sd `sigma` per point, and the references: the exact joint of f
/// (`exact_mean`, `exact_cov`, `exact_dof` for a t) and/or the true f (`truth`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JointSpec {
    /// Draws of f, one row per point.
    #[serde(default)]
    pub samples: Option<Vec<Vec<f64>>>,
    /// The method's mean of f.
    #[serde(default)]
    pub mean: Option<Vec<f64>>,
    /// Its covariance of f.
    #[serde(default)]
    pub cov: Option<Vec<Vec<f64>>>,
    /// Its sd of f (marginals only, without `cov`).
    #[serde(default)]
    pub std: Option<Vec<f64>>,
    /// The method's noise sd: per draw with `samples`, per point otherwise (default `sigma`).
    #[serde(default)]
    pub noise_std: Option<Vec<f64>>,
    /// The true noise sd per point (the exact joint's and the environment's).
    pub sigma: Vec<f64>,
    /// The exact posterior mean of f.
    #[serde(default)]
    pub exact_mean: Option<Vec<f64>>,
    /// The exact posterior covariance of f (a t's scale matrix).
    #[serde(default)]
    pub exact_cov: Option<Vec<Vec<f64>>>,
    /// The exact posterior's degrees of freedom (a t; its noise scale is then `sigma`).
    #[serde(default)]
    pub exact_dof: Option<f64>,
    /// The true f per point.
    #[serde(default)]
    pub truth: Option<Vec<f64>>,
    /// Batch sizes τ.
    #[serde(default = "default_tau")]
    pub tau: Vec<usize>,
    /// Dyadic sampling's anchors κ.
    #[serde(default = "default_kappa")]
    pub kappa: usize,
    /// Batches per τ.
    #[serde(default = "default_batches")]
    pub batches: usize,
    /// Seed of the batches and the draws of y.
    #[serde(default)]
    pub seed: u64,
}

fn default_tau() -> Vec<usize> {
    JointSettings::default().tau
}

fn default_kappa() -> usize {
    JointSettings::default().kappa
}

fn default_batches() -> usize {
    JointSettings::default().batches
}

/// The joint metrics of one [`JointSpec`].
/// `v`, when given, holds one finite value per point (`m`).
fn check_len(name: &str, v: &Option<Vec<f64>>, m: usize) -> Result<()> {
    match v {
        Some(v) if v.len() != m => bail!(
            "{name}: {} values; valid: {m}, one per point (as sigma)",
            v.len()
        ),
        Some(v) => match v.iter().find(|x| !x.is_finite()) {
            Some(x) => bail!("{name} holds {x}; valid: finite numbers"),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

/// The points of a `joint` input, after checking its per-point fields: σ finite and > 0, and
/// every vector one finite value per point.
fn joint_points(j: &JointSpec) -> Result<usize> {
    let m = j.sigma.len();
    if m == 0 {
        bail!("sigma: empty; valid: one noise sd > 0 per point");
    }
    if let Some((i, v)) = j
        .sigma
        .iter()
        .enumerate()
        .find(|(_, v)| !(v.is_finite() && **v > 0.0))
    {
        bail!("sigma[{i}] = {v}; valid: a noise sd, finite and > 0");
    }
    check_len("mean", &j.mean, m)?;
    check_len("std", &j.std, m)?;
    check_len("exact_mean", &j.exact_mean, m)?;
    check_len("truth", &j.truth, m)?;
    Ok(m)
}

fn joint_metrics(j: &JointSpec, out: &mut Map<String, Value>) -> Result<()> {
    let m = joint_points(j)?;
    let settings = JointSettings {
        tau: j.tau.clone(),
        kappa: j.kappa,
        batches: j.batches,
    };
    settings.check("")?;
    let mut pred = Prediction::default();
    match (&j.samples, &j.mean) {
        (Some(cols), None) => {
            if cols.len() != m
                || cols
                    .iter()
                    .any(|c| c.len() != cols[0].len() || c.is_empty())
            {
                bail!(
                    "samples: {} rows; valid: {m} rows (one per point) of equally many draws",
                    cols.len()
                );
            }
            if let Some(x) = cols.iter().flatten().find(|x| !x.is_finite()) {
                bail!("samples hold {x}; valid: finite numbers");
            }
            let s = cols[0].len();
            if let Some(n) = &j.noise_std {
                if n.len() != s || n.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
                    bail!("noise_std with samples: {} values; valid: {s}, one finite value > 0 per draw", n.len());
                }
            }
            pred.samples = Some(
                (0..s)
                    .map(|k| cols.iter().map(|c| c[k]).collect())
                    .collect(),
            );
            pred.extra.noise_samples = j.noise_std.clone();
            pred.mean = cols
                .iter()
                .map(|c| c.iter().sum::<f64>() / s as f64)
                .collect();
        }
        (None, Some(mean)) => {
            check_len("noise_std", &j.noise_std, m)?;
            pred.mean = mean.clone();
            match (&j.cov, &j.std) {
                (Some(c), _) => {
                    let f = factor_of(c, m)?;
                    pred.std = (0..m).map(|i| c[i][i].max(0.0).sqrt()).collect();
                    pred.extra.joint = Some(f);
                }
                (None, Some(s)) => pred.std = s.clone(),
                (None, None) => bail!("mean needs cov (a Gaussian joint) or std (marginals only)"),
            }
            pred.noise_std = j.noise_std.clone();
        }
        _ => {
            bail!("give the method's joint as samples, or as mean with cov or std (one of the two)")
        }
    }
    let exact_factor = match (&j.exact_mean, &j.exact_cov) {
        (Some(_), Some(c)) => Some(factor_of(c, m).context("exact_cov")?),
        (None, None) => None,
        _ => bail!("exact_mean and exact_cov come together"),
    };
    if exact_factor.is_none() && j.truth.is_none() {
        bail!("nothing to compare with: give exact_mean and exact_cov, or truth, or both");
    }
    let regions = vec![("all", (0..m).collect::<Vec<_>>())];
    let exact = match (&j.exact_mean, &exact_factor) {
        (Some(mean), Some(f)) => Some(Exact {
            mean,
            factor: &f.factor,
            rank: f.rank,
            noise_sd: &j.sigma,
            dof: j.exact_dof,
        }),
        _ => None,
    };
    let input = JointInput {
        settings: &settings,
        seed: SeedPath {
            base: j.seed,
            experiment: "metrics",
            setting: "",
            repetition: 0,
            member: 0,
            purpose: JOINT_DRAWS,
        },
        regions: &regions,
        exact,
    };
    let noise = pred.noise_std.clone().unwrap_or_else(|| j.sigma.clone());
    // Without the truth, the environment's KL is not asked for: the exact mean stands in and
    // the env_kl values are dropped.
    let truth = j
        .truth
        .clone()
        .or_else(|| j.exact_mean.clone())
        .expect("checked above");
    let (kind, metrics) = joint::regression(&pred, &noise, &truth, &j.sigma, &input)?;
    out.insert("joint_kind".into(), json!(kind));
    for (name, v) in &metrics["all"] {
        if j.truth.is_none() && name.starts_with(joint::ENV_KL) {
            continue;
        }
        out.insert(name.clone(), num(v));
    }
    Ok(())
}

fn loglik_metrics(table: &[Vec<f64>], out: &mut Map<String, Value>) -> Result<()> {
    let members = table.first().map_or(0, Vec::len);
    if let Some((i, row)) = table.iter().enumerate().find(|(_, r)| r.len() != members) {
        bail!(
            "loglik[{i}] has {} entries, loglik[0] has {members}: the table must be n × m",
            row.len()
        );
    }
    let flat: Vec<f64> = table.iter().flatten().copied().collect();
    let t = LogLikTable {
        values: &flat,
        members,
    };
    let w1 = negative_waic(t, WaicType::Waic1).context("loglik")?;
    let w2 = negative_waic(t, WaicType::Waic2).context("loglik")?;
    let cv = importance_sampling_cv(t).context("loglik")?;
    out.insert("neg_waic1".into(), num(w1.value));
    out.insert("neg_waic1_se".into(), num(w1.se));
    out.insert("neg_waic2".into(), num(w2.value));
    out.insert("neg_waic2_se".into(), num(w2.se));
    out.insert("iscv".into(), num(cv.value));
    out.insert("iscv_se".into(), num(cv.se));
    Ok(())
}

/// Every applicable metric of `input`.
pub fn compute(input: &Input, args: &Options) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    match input {
        Input::Draws { draws } => draws_metrics(draws, &mut out)?,
        Input::Joint(j) => joint_metrics(j, &mut out)?,
        Input::JointClassification {
            probs,
            truth,
            tau,
            kappa,
            batches,
            seed,
        } => {
            let settings = JointSettings {
                tau: tau.clone(),
                kappa: *kappa,
                batches: *batches,
            };
            joint_classification(probs, truth, settings, *seed, &mut out)?
        }
        Input::Regression {
            mean,
            std,
            y,
            samples,
            loglik,
        } => {
            regression_metrics(mean, std, y, samples.as_deref(), args, &mut out)?;
            if let Some(t) = loglik {
                loglik_metrics(t, &mut out)?;
            }
        }
        Input::Classification {
            probs,
            labels,
            member_probs,
            loglik,
        } => {
            classification_metrics(probs, labels, args, &mut out)?;
            if let Some(members) = member_probs {
                ensemble_metrics(members, labels.len(), &mut out)?;
            }
            if let Some(t) = loglik {
                loglik_metrics(t, &mut out)?;
            }
        }
    }
    Ok(out)
}

/// R̂, ESS and MCSE of chains of draws, as ArviZ computes them.
fn draws_metrics(draws: &[Vec<f64>], out: &mut Map<String, Value>) -> Result<()> {
    let d = uqbench_metrics::mcmc::diagnose(draws)?;
    out.insert("kind".into(), json!("draws"));
    out.insert("chains".into(), json!(draws.len()));
    out.insert("draws_per_chain".into(), json!(draws[0].len()));
    for (name, v) in [
        ("rhat", d.rhat),
        ("rhat_bulk", d.rhat_bulk),
        ("rhat_tail", d.rhat_tail),
        ("ess_bulk", d.ess_bulk),
        ("ess_tail", d.ess_tail),
        ("mcse_mean", d.mcse_mean),
    ] {
        out.insert(name.into(), num(v));
    }
    Ok(())
}

/// Point, interval and calibration metrics of Gaussian predictions (and the sample CRPS).
fn regression_metrics(
    mean: &[f64],
    std: &[f64],
    y: &[f64],
    samples: Option<&[Vec<f64>]>,
    args: &Options,
    out: &mut Map<String, Value>,
) -> Result<()> {
    out.insert("kind".into(), json!("regression"));
    out.insert("n".into(), json!(y.len()));
    out.insert("rmse".into(), num(reg::rmse(mean, y)?));
    out.insert("mae".into(), num(reg::mae(mean, y)?));
    out.insert("nll".into(), num(reg::gaussian_nll(mean, std, y)?));
    out.insert("crps".into(), num(reg::crps_gaussian(mean, std, y)?));
    if let Some(s) = samples {
        out.insert("crps_samples".into(), num(reg::crps_samples(s, y)?));
    }
    for &level in &args.levels {
        let q = reg::interval_quality(mean, std, y, level)?;
        out.insert(format!("coverage_{level}"), num(q.coverage));
        out.insert(format!("width_{level}"), num(q.width));
        out.insert(format!("interval_score_{level}"), num(q.interval_score));
    }
    let curve = reg::calibration_curve(mean, std, y, 100)?;
    out.insert("calibration_mae".into(), num(curve.mean_absolute_error()));
    out.insert(
        "calibration_rmse".into(),
        num(curve.root_mean_squared_error()),
    );
    out.insert(
        "miscalibration_area".into(),
        num(curve.miscalibration_area()),
    );
    Ok(())
}

/// Proper scores, calibration errors, the reliability diagram and (two classes) the AUC.
fn classification_metrics(
    probs: &[Vec<f64>],
    labels: &[usize],
    args: &Options,
    out: &mut Map<String, Value>,
) -> Result<()> {
    let classes = cls::check_probs(probs, labels)?;
    out.insert("kind".into(), json!("classification"));
    out.insert("n".into(), json!(labels.len()));
    out.insert("classes".into(), json!(classes));
    out.insert("accuracy".into(), num(cls::accuracy(probs, labels)?));
    out.insert("brier".into(), num(cls::brier(probs, labels)?));
    let d = cls::brier_decomposition(probs, labels)?;
    out.insert("brier_uncertainty".into(), num(d.uncertainty));
    out.insert("brier_resolution".into(), num(d.resolution));
    out.insert("brier_reliability".into(), num(d.reliability));
    out.insert("nll".into(), num(cls::nll(probs, labels)?));
    let b = args.bins;
    out.insert(
        "ece".into(),
        num(cls::calibration_error(
            probs,
            labels,
            &CalibrationConfig::ece(b),
        )?),
    );
    out.insert(
        "rmsce".into(),
        num(cls::calibration_error(
            probs,
            labels,
            &CalibrationConfig::rmsce(b),
        )?),
    );
    out.insert(
        "sce".into(),
        num(cls::calibration_error(
            probs,
            labels,
            &CalibrationConfig::sce(b),
        )?),
    );
    out.insert(
        "ace".into(),
        num(cls::calibration_error(
            probs,
            labels,
            &CalibrationConfig::ace(b),
        )?),
    );
    out.insert(
        "tace".into(),
        num(cls::calibration_error(
            probs,
            labels,
            &CalibrationConfig::tace(b, args.tace_threshold),
        )?),
    );
    out.insert("bins".into(), json!(b));
    let diagram = cls::reliability_diagram(probs, labels, b, Binning::EqualWidth)?;
    out.insert(
        "reliability_diagram".into(),
        json!(diagram
            .iter()
            .map(|bin| json!({
                "lower": bin.lower, "upper": bin.upper, "count": bin.count,
                "confidence": num(bin.confidence),
                "accuracy": num(bin.accuracy),
            }))
            .collect::<Vec<_>>()),
    );
    if classes == 2 {
        let scores: Vec<f64> = probs.iter().map(|p| p[1]).collect();
        let positive: Vec<bool> = labels.iter().map(|&l| l == 1).collect();
        match roc_auc(&scores, &positive) {
            Ok(auc) => {
                out.insert("auc".into(), num(auc));
            }
            Err(_) => {
                out.insert("auc".into(), Value::Null);
            }
        }
    }
    Ok(())
}

/// The ensemble's entropy decomposition (total, expected, mutual information), mean over the
/// `n` points, from members × points × classes probabilities.
fn ensemble_metrics(
    members: &[Vec<Vec<f64>>],
    n: usize,
    out: &mut Map<String, Value>,
) -> Result<()> {
    if members.is_empty() {
        bail!("member_probs is empty: give members × points × classes probabilities");
    }
    let (mut total, mut expected, mut mi) = (0.0, 0.0, 0.0);
    for i in 0..n {
        let rows: Vec<Vec<f64>> = members
            .iter()
            .enumerate()
            .map(|(m, mp)| {
                mp.get(i).cloned().with_context(|| {
                    format!("member_probs[{m}] has {} points, labels has {n}", mp.len())
                })
            })
            .collect::<Result<_>>()?;
        let e = cls::ensemble_entropy(&rows)?;
        total += e.total;
        expected += e.expected;
        mi += e.mutual_information;
    }
    let n = n as f64;
    out.insert("predictive_entropy".into(), num(total / n));
    out.insert("expected_entropy".into(), num(expected / n));
    out.insert("mutual_information".into(), num(mi / n));
    Ok(())
}

/// A number of the output: ±∞ as `"inf"`/`"-inf"`, NaN as `null` ([`crate::json`]).
fn num(v: impl std::borrow::Borrow<f64>) -> Value {
    crate::json::number(*v.borrow())
}
