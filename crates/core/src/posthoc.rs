//! Post-hoc methods around any other method (the *base*): split conformal prediction
//! (`Conformal`) and recalibration (`Recalibrated`). Both hold out part of every repetition's
//! training set, train the base on the rest, predict the held-out points with it, and turn
//! their residuals into a [`Calibration`] of the interval of y (rules in
//! [`crate::calibration`]). The interval of f stays the base's: these methods calibrate the
//! prediction of a new y, which is what their guarantees are about.
//!
//! Choices, with reasons:
//! - **Which points are held out.** A fixed random subset of round(fraction·N) training
//!   inputs, the same in every repetition of a setting (the inputs are shared by the
//!   repetitions of a task; the targets, hence the residuals, are fresh in each). It is drawn
//!   from the seed of (experiment, setting, purpose `NAME/calibration`). Under
//!   `design = "random"` every repetition's inputs are its own, so its held-out points are
//!   fresh draws too.
//! - **The scale s(x).** `score = "absolute"` uses s = 1 (the residual |y − μ|, MAPIE's
//!   default); `"normalized"` and both recalibrations use the base's predictive sd of y:
//!   its own when it has one (a mean–variance mixture, or sqrt(std² + noise²) with its noise
//!   model, or the problem's σ(x) where the base uses the known σ), and otherwise
//!   sqrt(std² + σ̂²) with σ̂ the base's training-residual noise estimate (`run.noise =
//!   "residual"`'s formula, on the points it was trained on). For an empirical base, the
//!   recalibrations treat its predictive of y as the normal with that sd.
//! - **Its training fit** is reported over all N training points: the base's fit at the
//!   points it trained on and its predictions at the held-out ones.

use serde::Deserialize;

use crate::calibration::{Calibration, CalibrationRule};
use crate::error::MethodError;
use crate::prediction::{Family, Prediction};
use crate::seed::Rng;
use crate::task::{Compute, Features, Likelihood, Method, NoiseInfo, Task};

/// The conformity score of `Conformal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Score {
    /// |y − μ(x)|.
    #[default]
    Absolute,
    /// |y − μ(x)| / s(x), s the base's predictive sd of y.
    Normalized,
}

/// The recalibration of `Recalibrated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recalibration {
    /// One factor on the predictive sd (maximum likelihood).
    #[default]
    StdScaling,
    /// Isotonic recalibration of the predictive CDF (Kuleshov et al. 2018).
    Isotonic,
    /// Temperature scaling of the logits (classification, Guo et al. 2017).
    Temperature,
}

/// The settings of `Conformal` (a `[methods.NAME]` table; `base` is resolved by the caller).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConformalConfig {
    /// The method table whose method is calibrated.
    pub base: String,
    /// The share of each repetition's training points held out for calibration.
    #[serde(default = "default_fraction")]
    pub calibration_fraction: f64,
    /// The conformity score.
    #[serde(default)]
    pub score: Score,
}

/// The settings of `Recalibrated`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecalibratedConfig {
    /// The method table whose method is recalibrated.
    pub base: String,
    /// The share of each repetition's training points held out.
    #[serde(default = "default_fraction")]
    pub calibration_fraction: f64,
    /// The recalibration.
    #[serde(default)]
    pub recalibration: Recalibration,
}

/// The share of each repetition's training points a post-hoc method holds out by default.
pub const DEFAULT_CALIBRATION_FRACTION: f64 = 0.25;

fn default_fraction() -> f64 {
    DEFAULT_CALIBRATION_FRACTION
}

/// A base method whose prediction interval of y is calibrated on held-out training points.
pub struct Calibrated {
    name: String,
    base: Box<dyn Method>,
    rule: CalibrationRule,
    fraction: f64,
    normalized: bool,
    /// Temperature scaling of a classification method instead of an interval rule.
    temperature: bool,
}

impl Calibrated {
    /// Split conformal prediction around `base`.
    pub fn conformal(
        name: &str,
        base: Box<dyn Method>,
        c: &ConformalConfig,
    ) -> Result<Self, MethodError> {
        Self::new(
            name,
            base,
            CalibrationRule::Conformal,
            c.calibration_fraction,
            c.score == Score::Normalized,
        )
    }

    /// Recalibration of `base`.
    pub fn recalibrated(
        name: &str,
        base: Box<dyn Method>,
        c: &RecalibratedConfig,
    ) -> Result<Self, MethodError> {
        let rule = match c.recalibration {
            Recalibration::StdScaling => CalibrationRule::StdScaling,
            Recalibration::Isotonic => CalibrationRule::Isotonic,
            // Not a rule for intervals of y: the logits are rescaled instead.
            Recalibration::Temperature => CalibrationRule::StdScaling,
        };
        let mut method = Self::new(name, base, rule, c.calibration_fraction, true)?;
        method.temperature = c.recalibration == Recalibration::Temperature;
        Ok(method)
    }

    /// Conformalised quantile regression around a `base` that returns quantile bands
    /// (Romano et al. 2019).
    pub fn cqr(name: &str, base: Box<dyn Method>, fraction: f64) -> Result<Self, MethodError> {
        Self::new(name, base, CalibrationRule::Cqr, fraction, false)
    }

    fn new(
        name: &str,
        base: Box<dyn Method>,
        rule: CalibrationRule,
        fraction: f64,
        normalized: bool,
    ) -> Result<Self, MethodError> {
        MethodError::rate(&format!("[methods.{name}] calibration_fraction"), fraction)?;
        Ok(Calibrated {
            name: name.to_string(),
            base,
            rule,
            fraction,
            normalized,
            temperature: false,
        })
    }

    /// The held-out training indices of a task with `n` points (sorted).
    fn held_out(&self, task: &Task<'_>) -> Result<Vec<usize>, MethodError> {
        let n = task.n_train();
        let k = (self.fraction * n as f64).round() as usize;
        if k < 1 || n < k + 2 {
            return Err(MethodError::invalid(
                format!("[methods.{}] calibration_fraction", self.name),
                self.fraction,
                format!(
                    "a share of the {n} training points that holds out at least 1 and leaves at \
                     least 2 to train on (it holds out {k})"
                ),
            ));
        }
        let purpose = format!("{}/calibration", self.name);
        let mut rng = Rng::new(task.seeds.seed(0, 0, &purpose));
        let mut idx: Vec<usize> = (0..n).collect();
        for i in 0..k {
            let j = i + rng.below((n - i) as u64) as usize;
            idx.swap(i, j);
        }
        let mut out = idx[..k].to_vec();
        out.sort_unstable();
        Ok(out)
    }
}

/// A task's data with some training points moved to the end of its test inputs.
struct Split {
    fit: Vec<usize>,
    cal: Vec<usize>,
    x_train: Vec<f64>,
    y_train: Vec<Vec<f64>>,
    x_test: Vec<f64>,
    features: Option<(usize, Vec<f64>, Vec<f64>)>,
    noise_train: Vec<f64>,
    noise_test: Vec<f64>,
}

impl Split {
    fn new(task: &Task<'_>, cal: Vec<usize>) -> Split {
        let n = task.n_train();
        let fit: Vec<usize> = (0..n).filter(|i| cal.binary_search(i).is_err()).collect();
        let rows = |data: &[f64], w: usize, idx: &[usize]| -> Vec<f64> {
            idx.iter()
                .flat_map(|&i| data[i * w..(i + 1) * w].iter().copied())
                .collect()
        };
        let appended = |test: &[f64], train: &[f64], w: usize| -> Vec<f64> {
            let mut v = test.to_vec();
            v.extend(rows(train, w, &cal));
            v
        };
        let noise = |v: &[f64], idx: &[usize]| -> Vec<f64> {
            if v.len() == n {
                rows(v, 1, idx)
            } else {
                Vec::new()
            }
        };
        Split {
            x_train: rows(task.x_train, task.d, &fit),
            y_train: task.y_train.iter().map(|y| rows(y, 1, &fit)).collect(),
            x_test: appended(task.x_test, task.x_train, task.d),
            features: task.features.map(|f| {
                (
                    f.p,
                    rows(f.train, f.p, &fit),
                    appended(f.test, f.train, f.p),
                )
            }),
            noise_train: noise(task.noise.train, &fit),
            noise_test: if task.noise.train.len() == n {
                appended(task.noise.test, task.noise.train, 1)
            } else {
                Vec::new()
            },
            fit,
            cal,
        }
    }

    fn task<'a>(&'a self, task: &Task<'a>) -> Task<'a> {
        Task {
            x_train: &self.x_train,
            y_train: &self.y_train,
            x_test: &self.x_test,
            features: self.features.as_ref().map(|(p, train, test)| Features {
                p: *p,
                train,
                test,
            }),
            noise: NoiseInfo {
                train: &self.noise_train,
                test: &self.noise_test,
                known: task.noise.known,
            },
            seeds: task.seeds.clone(),
            ..task.clone()
        }
    }
}

/// The base's predictive sd of y at every input of `p`, with `sigma` the problem's σ(x) there
/// and `residual_sd` the fallback noise estimate.
fn predictive_sd(p: &Prediction, sigma: &[f64], residual_sd: Option<f64>) -> Vec<f64> {
    (0..p.mean.len())
        .map(|i| {
            if let Some(ps) = &p.predictive_std {
                return ps[i];
            }
            let noise = match (&p.noise_std, p.noise_known, residual_sd) {
                (Some(n), _, _) => n[i],
                (None, true, _) => sigma.get(i).copied().unwrap_or(f64::NAN),
                (None, false, Some(r)) => r,
                (None, false, None) => 0.0,
            };
            (p.std[i] * p.std[i] + noise * noise).sqrt()
        })
        .collect()
}

/// Attaches a repetition's calibration with its scalars: the held-out points and the rule's
/// summary.
fn attach(out: &mut Prediction, calibration: Calibration) {
    out.scalars
        .insert("calibration_points".into(), calibration.points() as f64);
    if let Some((name, v)) = calibration.summary_scalar() {
        out.scalars.insert(name.into(), v);
    }
    out.calibration = Some(calibration);
}

/// The training fit over all N points: the base's fit where it trained, its prediction where
/// a point was held out.
fn full_fit(n: usize, split: &Split, out: &mut Prediction, cal: &Prediction) {
    if let Some(fit) = out.train_mean.take() {
        let mut full = vec![0.0; n];
        for (&i, v) in split.fit.iter().zip(fit) {
            full[i] = v;
        }
        for (&i, &v) in split.cal.iter().zip(&cal.mean) {
            full[i] = v;
        }
        out.train_mean = Some(full);
    }
}

impl Method for Calibrated {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        self.base.replicas_per_repetition()
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        self.base.parameters(task)
    }

    fn cost(&self, n_train: usize, epochs: usize) -> f64 {
        self.base.cost(
            ((1.0 - self.fraction) * n_train as f64).round() as usize,
            epochs,
        )
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        task.validate()?;
        let classification = task.likelihood == Likelihood::Bernoulli;
        if self.temperature != classification {
            return Err(MethodError::invalid(
                format!("[methods.{}] recalibration", self.name),
                if self.temperature {
                    "\"temperature\""
                } else {
                    "this rule"
                },
                if classification {
                    "\"temperature\" for a classification problem (its logits are rescaled)"
                } else {
                    "\"std_scaling\" or \"isotonic\" for a regression problem (temperature \
                     scaling is for logits)"
                },
            ));
        }
        let split = Split::new(task, self.held_out(task)?);
        let sub = split.task(task);
        let m = task.n_test();
        let mut outs = self.base.run(&sub, compute, keep_samples, progress)?;
        for (k, out) in outs.iter_mut().enumerate() {
            let cal = out.split_tail(m);
            if out.diverged {
                continue;
            }
            if self.temperature {
                let draws = cal.samples.as_ref().ok_or_else(|| {
                    MethodError::invalid(
                        format!("[methods.{}] base", self.name),
                        "a method without its draws",
                        "a classification method (it returns its members' or passes' logits)",
                    )
                })?;
                let labels: Vec<f64> = split.cal.iter().map(|&i| task.y_train[k][i]).collect();
                let t = crate::temperature::fit(draws, &labels);
                crate::temperature::apply(out, t);
                out.scalars
                    .insert("calibration_points".into(), split.cal.len() as f64);
                continue;
            }
            self.calibrate(task, &split, k, out, &cal)?;
        }
        Ok(outs)
    }
}

impl Calibrated {
    /// Attaches repetition `k`'s calibration to the base's test prediction `out`, from its
    /// predictions `cal` at the held-out points.
    fn calibrate(
        &self,
        task: &Task<'_>,
        split: &Split,
        k: usize,
        out: &mut Prediction,
        cal: &Prediction,
    ) -> Result<(), MethodError> {
        let y = &task.y_train[k];
        if self.rule == CalibrationRule::Cqr {
            return self.calibrate_bands(task, split, k, out, cal);
        }
        // The base's noise estimate from its training residuals, where it has no noise model.
        let own_noise = out.predictive_std.is_some() || out.noise_std.is_some() || out.noise_known;
        let residual_sd = match (&out.train_mean, own_noise) {
            (_, true) => None,
            (Some(fit), false) => Some(
                (fit.iter()
                    .zip(&split.fit)
                    .map(|(f, &i)| (y[i] - f).powi(2))
                    .sum::<f64>()
                    / fit.len() as f64)
                    .sqrt(),
            ),
            (None, false) if !self.normalized => None,
            (None, false) => {
                return Err(MethodError::invalid(
                    format!("[methods.{}]", self.name),
                    "a base without a noise model or a training fit",
                    "a base with its own noise sd or a training fit to estimate it from",
                ))
            }
        };
        let cal_sigma: Vec<f64> = if task.noise.train.len() == task.n_train() {
            split.cal.iter().map(|&i| task.noise.train[i]).collect()
        } else {
            Vec::new()
        };
        let (cal_scale, test_scale) = if self.normalized {
            (
                predictive_sd(cal, &cal_sigma, residual_sd),
                predictive_sd(out, task.noise.test, residual_sd),
            )
        } else {
            (vec![1.0; cal.mean.len()], vec![1.0; out.mean.len()])
        };
        if let Some(s) = cal_scale
            .iter()
            .chain(&test_scale)
            .find(|s| !(s.is_finite() && **s > 0.0))
        {
            return Err(MethodError::invalid(
                format!("[methods.{}] the base's predictive sd of y", self.name),
                s,
                "a positive, finite sd at every input (score = \"normalized\" and the \
                 recalibrations divide by it)",
            ));
        }
        let residuals: Vec<f64> = split
            .cal
            .iter()
            .zip(&cal.mean)
            .zip(&cal_scale)
            .map(|((&i, mu), s)| (y[i] - mu) / s)
            .collect();
        full_fit(task.n_train(), split, out, cal);
        if let (Some(sd), None) = (residual_sd, &out.noise_std) {
            out.noise_std = Some(vec![sd; out.mean.len()]);
            out.scalars.insert("residual_noise_sd".into(), sd);
        }
        let calibration = Calibration {
            rule: self.rule,
            residuals,
            scale: test_scale,
            dof: match out.family {
                Family::StudentT { dof } => Some(dof),
                _ => None,
            },
            bands: Vec::new(),
            jackknife: None,
        };
        attach(out, calibration);
        Ok(())
    }

    /// CQR: the scores max(q_lo − y, y − q_hi) of the held-out points per band.
    fn calibrate_bands(
        &self,
        task: &Task<'_>,
        split: &Split,
        k: usize,
        out: &mut Prediction,
        cal: &Prediction,
    ) -> Result<(), MethodError> {
        let y = &task.y_train[k];
        let (Some(test_bands), Some(cal_bands)) = (out.quantiles.take(), &cal.quantiles) else {
            return Err(MethodError::invalid(
                format!("[methods.{}] base", self.name),
                "a method without quantile outputs",
                "a quantile regression (CQR conformalises its quantile bands)",
            ));
        };
        let bands = test_bands
            .into_iter()
            .zip(cal_bands)
            .map(|(band, c)| {
                let scores = split
                    .cal
                    .iter()
                    .zip(c.lower.iter().zip(&c.upper))
                    .map(|(&i, (lo, hi))| (lo - y[i]).max(y[i] - hi))
                    .collect();
                (band, scores)
            })
            .collect();
        full_fit(task.n_train(), split, out, cal);
        let calibration = Calibration {
            rule: self.rule,
            residuals: Vec::new(),
            scale: Vec::new(),
            dof: None,
            bands,
            jackknife: None,
        };
        attach(out, calibration);
        Ok(())
    }
}
