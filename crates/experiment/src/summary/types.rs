//! What a run stores per repetition ([`RepResult`]) and what a summary holds, with the
//! intervals of each predictive family.

use std::collections::BTreeMap;

use crate::bail;
use crate::error::Result;
use serde::{Deserialize, Serialize};
use uqbench_anchor::{Problem, Region};
use uqbench_core::central_quantile;
use uqbench_core::{Family, Prediction};
use uqbench_metrics::coverage::PAPER_Z;
use uqbench_metrics::regression::{crps_gaussian, crps_student_t};

pub use super::distance::AnchorRef;
pub use super::empirical::{columns_of, empirical, per_input_t, NoiseSd};
use super::joint::{JointInput, JointKind, JointMetrics};
pub(super) use super::levels::nullable_map;
pub(super) use super::levels::nullable_vec;
pub use super::levels::{level_name, with_coverage_level, LevelBounds, PiBounds, COVERAGE_LEVEL};
use super::levels::{nullable_nested_map, nullable_opt_vec};
use super::names;
pub use super::scalar::Scalar;

/// The reference method's name.
pub use uqbench_anchor::ANCHOR;

fn is_normal(f: &Family) -> bool {
    *f == Family::Normal
}

/// One method's predictions for one repetition at every test input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepResult {
    /// The repetition index.
    pub repetition: u64,
    /// Prediction of f(x*) (mean of the predictive distribution).
    #[serde(deserialize_with = "nullable_vec")]
    pub mean: Vec<f64>,
    /// Uncertainty: std of the predictive distribution of f(x*) (epistemic); for a Student-t
    /// family its scale.
    #[serde(deserialize_with = "nullable_vec")]
    pub std: Vec<f64>,
    /// The method's own estimate of the noise sd at x* (aleatoric), when it has one.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "nullable_opt_vec"
    )]
    pub noise_std: Option<Vec<f64>>,
    /// The sd of the predictive distribution of a new y, when the method's is not
    /// sqrt(std² + noise²) (a mean–variance ensemble's mixture); the PI of a normal or
    /// Student-t family uses it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "nullable_opt_vec"
    )]
    pub predictive_std: Option<Vec<f64>>,
    /// The predictive family its intervals come from (normal when absent).
    #[serde(default, skip_serializing_if = "is_normal")]
    pub family: Family,
    /// Empirical family: the intervals at every level of the run (and at 0.95), keyed by
    /// level name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub intervals: BTreeMap<String, LevelBounds>,
    /// A post-hoc calibrated method (`Conformal`, `Recalibrated`): its prediction intervals
    /// of y at every level of the run (and at 0.95), keyed by level name, which replace the
    /// family's; its interval of f is the family's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub calibrated_pi: BTreeMap<String, PiBounds>,
    /// W2 from the method's predictive distribution of f to the anchor's, per test input.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "nullable_opt_vec"
    )]
    pub w2_anchor: Option<Vec<f64>>,
    /// KL(method ‖ anchor) per test input (normal and Student-t families).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "nullable_opt_vec"
    )]
    pub kl_anchor: Option<Vec<f64>>,
    /// Empirical family: the sample CRPS against the truth per test input.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "nullable_opt_vec"
    )]
    pub crps: Option<Vec<f64>>,
    /// Per-repetition scalars such as `learned_p`, `final_objective`, `train_mse`,
    /// `fit_ratio`, `diverged_members`.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "nullable_map"
    )]
    pub scalars: BTreeMap<String, f64>,
    /// Whether training diverged (non-finite objective or predictions); such repetitions are
    /// counted but left out of the metrics.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub diverged: bool,
    /// What the method's joint predictive was made of (spec §10), when joint metrics ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joint_kind: Option<JointKind>,
    /// Whether that joint is its base's: a conformal or recalibrated wrapper changes only the
    /// intervals of y (a set per input, not a density), so no calibrated joint exists and its
    /// joint metrics score the base's draws (or Gaussian joint) with the base's noise sd.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub joint_of_base: bool,
    /// The joint metrics per region: `joint_kl_T`, `env_kl_T` and their `…_se`.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "nullable_nested_map"
    )]
    pub joint: JointMetrics,
}

/// Which interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// Of f(x*) (confidence/credible interval).
    Ci,
    /// Of a new y at x* (prediction interval).
    Pi,
}

/// What turning a method's output into a stored result needs from the problem.
#[derive(Debug, Clone, Copy)]
pub struct RepContext<'a> {
    /// Interval levels of the run.
    pub levels: &'a [f64],
    /// The noise-free truth at the test inputs.
    pub truth: &'a [f64],
    /// σ(x) at the test inputs (the noise of prediction intervals for methods without their
    /// own).
    pub test_sigma: &'a [f64],
    /// The repetition's training targets.
    pub train_y: &'a [f64],
    /// σ(x) at the training inputs.
    pub train_sigma: &'a [f64],
    /// The exact posterior of f in this repetition, for the distances to it (W2, KL); `None`
    /// for the anchor itself and for problems without one.
    pub anchor: Option<AnchorRef<'a>>,
    /// The joint metrics' settings, seed, regions and exact joint (`None`: none computed).
    pub joint: Option<&'a JointInput<'a>>,
}

impl RepContext<'_> {
    /// The training-fit scalars of a mean prediction at the training inputs: `train_mse` =
    /// mean (ŷ_i − y_i)² and `fit_ratio` = mean (ŷ_i − y_i)²/σ(x_i)², which is about
    /// 1 − p_eff/N for a good fit (the anchor: 1 − p/N in expectation) and ≫ 1 for an underfit.
    pub fn fit_scalars(&self, fitted: &[f64], scalars: &mut BTreeMap<String, f64>) {
        let n = self.train_y.len() as f64;
        let (mut mse, mut ratio) = (0.0, 0.0);
        for ((f, y), s) in fitted.iter().zip(self.train_y).zip(self.train_sigma) {
            let r2 = (f - y).powi(2);
            mse += r2;
            ratio += r2 / (s * s);
        }
        scalars.insert(names::TRAIN_MSE.into(), mse / n);
        scalars.insert(names::FIT_RATIO.into(), ratio / n);
    }

    /// Every level whose intervals are computed: the run's, and 0.95 for spec §2's coverage.
    pub fn all_levels(&self) -> Vec<f64> {
        with_coverage_level(self.levels)
    }
}

impl RepResult {
    /// A method's output for repetition `rep`, in stored form: scalars with the training fit,
    /// and for an empirical family its intervals and sample CRPS from the samples.
    pub fn from_output(rep: u64, mut out: Prediction, ctx: &RepContext<'_>) -> Result<RepResult> {
        let mut scalars = std::mem::take(&mut out.scalars);
        if let Some(fitted) = &out.train_mean {
            ctx.fit_scalars(fitted, &mut scalars);
        }
        let mut intervals = BTreeMap::new();
        let mut crps = None;
        let mut columns = None;
        if let (Family::StudentTPerInput, false) = (out.family, out.diverged) {
            let Some(t) = &out.extra.marginals_t else {
                bail!("repetition {rep}: a Student-t-per-input family needs its t marginals");
            };
            let (ints, c) = per_input_t(&out.mean, t, &ctx.all_levels(), ctx.truth)?;
            intervals = ints;
            crps = Some(c);
            // Its draws, where it has them, give its W2 to the anchor.
            columns = match &out.samples {
                Some(rows) => Some(columns_of(rows, ctx.truth.len())?),
                None => None,
            };
        }
        if out.family == Family::Empirical && !out.diverged {
            let Some(samples) = &out.samples else {
                bail!("repetition {rep}: an empirical predictive family needs its samples");
            };
            let noise = match (&out.extra.sample_noise, &out.extra.noise_samples) {
                (Some(rows), _) => NoiseSd::PerDrawPoint(rows),
                (None, Some(sds)) => NoiseSd::PerDraw(sds),
                (None, None) => {
                    NoiseSd::PerPoint(out.noise_std.as_deref().unwrap_or(ctx.test_sigma))
                }
            };
            let cols = columns_of(samples, ctx.truth.len())?;
            let (ints, c) = empirical(&cols, noise, &ctx.all_levels(), ctx.truth)?;
            intervals = ints;
            crps = Some(c);
            columns = Some(cols);
        }
        if let (Some(a), Some(mc), false) = (&ctx.anchor, &out.extra.mcse, out.diverged) {
            // A sampler's Monte Carlo errors relative to the exact posterior's sd of f, at its
            // worst test input.
            let worst = |v: &[f64]| {
                v.iter()
                    .zip(a.std)
                    .map(|(e, s)| e / s)
                    .fold(
                        0.0f64,
                        |m, r| if r.is_nan() { f64::INFINITY } else { m.max(r) },
                    )
            };
            scalars.insert(names::MCSE_MEAN_REL_MAX.into(), worst(&mc.mean));
            scalars.insert(names::MCSE_SD_REL_MAX.into(), worst(&mc.sd));
        }
        let (w2_anchor, kl_anchor) = match (&ctx.anchor, out.diverged) {
            (Some(a), false) => {
                let (w, k) = super::distance::to_anchor(&out, columns.as_deref(), a);
                (Some(w), k)
            }
            _ => (None, None),
        };
        let mut calibrated_pi = BTreeMap::new();
        if let (Some(cal), false) = (&out.extra.calibration, out.diverged) {
            for level in ctx.all_levels() {
                let (lower, upper) = cal.interval(&out.mean, level).map_err(|e| {
                    crate::error::ExperimentError::from(e).context(format!("repetition {rep}"))
                })?;
                calibrated_pi.insert(level_name(level), PiBounds { lower, upper });
            }
        } else if let (Some(bands), false) = (&out.extra.quantiles, out.diverged) {
            // Quantile regression without calibration: its bands are its intervals of y.
            for level in ctx.all_levels() {
                let Some(b) = bands.iter().find(|b| (b.level - level).abs() < 1e-9) else {
                    bail!(
                        "repetition {rep}: no quantile band at level {level} (bands at {:?}): \
                         set the method's `levels` to the run's levels and 0.95",
                        bands.iter().map(|b| b.level).collect::<Vec<_>>()
                    );
                };
                calibrated_pi.insert(
                    level_name(level),
                    PiBounds {
                        lower: b.lower.clone(),
                        upper: b.upper.clone(),
                    },
                );
            }
        }
        let (joint_kind, joint) = match (ctx.joint, out.diverged) {
            (Some(input), false) => {
                let noise = out.noise_std.as_deref().unwrap_or(ctx.test_sigma);
                let (kind, metrics) =
                    super::joint::regression(&out, noise, ctx.truth, ctx.test_sigma, input)
                        .map_err(|e| e.context(format!("repetition {rep}: joint metrics")))?;
                (Some(kind), metrics)
            }
            _ => (None, JointMetrics::new()),
        };
        Ok(RepResult {
            repetition: rep,
            joint_of_base: joint_kind.is_some() && out.extra.calibration.is_some(),
            joint_kind,
            joint,
            calibrated_pi,
            w2_anchor,
            kl_anchor,
            mean: out.mean,
            std: out.std,
            noise_std: out.noise_std,
            predictive_std: out.extra.predictive_std,
            family: out.family,
            intervals,
            crps,
            scalars,
            diverged: out.diverged,
        })
    }

    /// The central interval at `level` of f (CI) or of a new y (PI, with noise sd `noise`
    /// unless the method has its own), from the repetition's predictive family.
    pub fn interval(
        &self,
        level: f64,
        which: Which,
        noise: &[f64],
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let noise = self.noise_std.as_deref().unwrap_or(noise);
        if which == Which::Pi && !self.calibrated_pi.is_empty() {
            let Some(b) = self.calibrated_pi.get(&level_name(level)) else {
                bail!(
                    "repetition {}: no calibrated interval at level {level} is stored; rerun it \
                     with this level",
                    self.repetition
                );
            };
            return Ok((b.lower.clone(), b.upper.clone()));
        }
        let q = match self.family {
            Family::Normal => central_quantile(level, None),
            Family::StudentT { dof } => central_quantile(level, Some(dof)),
            Family::Empirical | Family::StudentTPerInput => {
                let Some(b) = self.intervals.get(&level_name(level)) else {
                    bail!(
                        "repetition {}: no interval at level {level} is stored \
                         (levels: {}); rerun it with these levels",
                        self.repetition,
                        self.intervals
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                };
                return Ok(match which {
                    Which::Ci => (b.ci_lower.clone(), b.ci_upper.clone()),
                    Which::Pi => (b.pi_lower.clone(), b.pi_upper.clone()),
                });
            }
        };
        Ok((0..self.mean.len())
            .map(|i| {
                let (m, s) = (self.mean[i], self.std[i]);
                let half = match (which, &self.predictive_std) {
                    (Which::Ci, _) => q * s,
                    (Which::Pi, Some(p)) => q * p[i],
                    (Which::Pi, None) => q * (s * s + noise[i] * noise[i]).sqrt(),
                };
                (m - half, m + half)
            })
            .unzip())
    }

    /// The interval of spec §2's coverage: [000]'s mean ± 1.96·uncertainty for a normal family,
    /// the 95% interval of any other.
    pub fn coverage_interval(&self) -> Result<(Vec<f64>, Vec<f64>)> {
        match self.family {
            Family::Normal => Ok(self
                .mean
                .iter()
                .zip(&self.std)
                .map(|(m, s)| (m - PAPER_Z * s, m + PAPER_Z * s))
                .unzip()),
            _ => self.interval(COVERAGE_LEVEL, Which::Ci, &self.std),
        }
    }

    /// The CRPS of the predictive distribution of f against the truth, per test input.
    pub fn crps(&self, truth: &[f64]) -> Result<Vec<f64>> {
        let per = |i: usize| -> Result<f64> {
            let (m, s, t) = ([self.mean[i]], [self.std[i]], [truth[i]]);
            Ok(match self.family {
                Family::Normal => crps_gaussian(&m, &s, &t)?,
                Family::StudentT { dof } if dof > 1.0 => crps_student_t(&m, &s, dof, &t)?,
                // ν ≤ 1 has no finite mean and no CRPS.
                Family::StudentT { .. } => f64::NAN,
                Family::Empirical | Family::StudentTPerInput => match &self.crps {
                    Some(c) => c[i],
                    None => bail!(
                        "repetition {}: a family without its stored CRPS",
                        self.repetition
                    ),
                },
            })
        };
        (0..truth.len()).map(per).collect()
    }
}

/// Per-test-input metrics: `value` and `stderr` per point, and for proportions the Wilson
/// 95% interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PointMetric {
    /// One value per test input.
    pub value: Vec<f64>,
    /// Standard errors (NaN where not defined).
    pub stderr: Vec<f64>,
    /// Wilson 95% lower bounds, for proportions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower: Option<Vec<f64>>,
    /// Wilson 95% upper bounds, for proportions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upper: Option<Vec<f64>>,
}

/// Everything computed for one method at one setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodSummary {
    /// Repetitions that entered the metrics.
    pub repetitions: usize,
    /// Repetitions left out because training diverged.
    pub diverged: Vec<u64>,
    /// Metric name → per-point values.
    pub points: BTreeMap<String, PointMetric>,
    /// Region (`all`, `in`, `gap`, `out`) → metric name → aggregate.
    pub aggregate: BTreeMap<String, BTreeMap<String, Scalar>>,
    /// Warnings about the results, such as an underfit (see [`UNDERFIT_FACTOR`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    /// Metric name → one value per repetition that entered the metrics: the marginal
    /// coverages `cicp_L` and `picp_L` of each repetition over all test inputs ([004]'s
    /// histograms over simulations).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_repetition: BTreeMap<String, Vec<f64>>,
    /// What the method's joint predictive was made of (spec §10; `marginals`: scored with the
    /// product of its marginals), when the joint metrics ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joint_kind: Option<JointKind>,
    /// Whether that joint is its base's (a calibration wrapper: [`RepResult::joint_of_base`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub joint_of_base: bool,
    /// Each repetition's value of every region aggregate that is a mean over repetitions
    /// (not in summary.json: `repetitions.csv` holds it), for paired comparisons.
    #[serde(skip)]
    pub by_repetition: ByRepetition,
}

/// Region → metric → one value per repetition of [`ByRepetition::repetitions`] (NaN where a
/// repetition has no value: a scalar it does not record, a region mean over undefined points).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ByRepetition {
    /// The repetitions that entered the metrics, in order.
    pub repetitions: Vec<u64>,
    /// Region → metric → values aligned with `repetitions`.
    pub values: BTreeMap<String, BTreeMap<String, Vec<f64>>>,
}

impl MethodSummary {
    /// The summary of a method none of whose repetitions entered the metrics.
    pub(super) fn empty(diverged: Vec<u64>, flags: Vec<String>) -> MethodSummary {
        MethodSummary {
            repetitions: 0,
            diverged,
            points: BTreeMap::new(),
            aggregate: BTreeMap::new(),
            flags,
            per_repetition: BTreeMap::new(),
            joint_kind: None,
            joint_of_base: false,
            by_repetition: ByRepetition::default(),
        }
    }
}

/// A method whose mean in-distribution deviation exceeds the anchor's by more than this
/// factor is flagged as not fitting the data. The anchor is the best unbiased estimator for
/// the problem, so its deviation is the floor; a factor 2 is a fit far worse than the data
/// allow. On E1 every deep method is flagged (2.3× and more under every setting measured,
/// nets that stay flat 2.4×), and even a kernel smoother tuned on the truth reaches 2.0×: at
/// N = 50 and σ = 0.75 that problem is at the limit of any learner that does not know its
/// frequencies (docs/e1-fidelity.md).
pub const UNDERFIT_FACTOR: f64 = 2.0;

/// The test inputs of one setting, as the summary reports them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestInfo {
    /// Coordinates, one row per test input.
    pub x: Vec<Vec<f64>>,
    /// Design coordinate (name, values) when the test design is 1-D-parametrised.
    pub coord: Option<(String, Vec<f64>)>,
    /// `in`, `gap` or `out`.
    pub region: Vec<Region>,
    /// Labels of report points.
    pub label: Vec<Option<String>>,
    /// The noise-free truth.
    pub truth: Vec<f64>,
    /// σ(x).
    pub sigma: Vec<f64>,
    /// `"random"` when every repetition drew its own test inputs (`design = "random"`): the
    /// fields above are then each test slot's mean over the repetitions, and the per-point
    /// metrics pool each slot's points (see [`TestInfo::for_repetitions`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub design: Option<String>,
    /// With a random design, whether the test inputs are drawn as the training inputs are (the
    /// same design): only then is a mean over repetitions the risk marginal over the training
    /// distribution of x.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_as_train: Option<bool>,
    /// With a random design, each repetition's own test inputs (not written to files: they
    /// follow from the spec's seeds).
    #[serde(skip)]
    pub repetitions: Option<BTreeMap<u64, RepInputs>>,
}

/// One repetition's own test inputs under a random design.
#[derive(Debug, Clone, PartialEq)]
pub struct RepInputs {
    /// Coordinates, row-major: d values per test input.
    pub x: Vec<f64>,
    /// `in`, `gap` or `out`.
    pub region: Vec<Region>,
    /// The noise-free truth.
    pub truth: Vec<f64>,
    /// σ(x).
    pub sigma: Vec<f64>,
    /// The position along a 1-D or diagonal design.
    pub coord: Option<Vec<f64>>,
}

impl TestInfo {
    /// The test inputs of a resolved problem (a fixed design's, or repetition 0's).
    pub fn of(problem: &Problem) -> TestInfo {
        TestInfo {
            x: problem.test.inputs.to_rows(),
            coord: problem.test.coord.clone(),
            region: problem.test.region.clone(),
            label: problem.test.label.clone(),
            truth: problem.test.truth.clone(),
            sigma: problem.test.sigma.clone(),
            design: None,
            test_as_train: None,
            repetitions: None,
        }
    }
}

/// The summary of one setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettingSummary {
    /// Canonical setting label (`f_main=2`, or empty).
    pub setting: String,
    /// The test inputs.
    pub test: TestInfo,
    /// Method name → its summary.
    pub methods: BTreeMap<String, MethodSummary>,
}

/// The summary of a run: every setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Experiment name.
    pub experiment: String,
    /// Interval levels of the CICF/PICF/width metrics.
    pub levels: Vec<f64>,
    /// Per setting.
    pub settings: Vec<SettingSummary>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(family: Family) -> RepResult {
        RepResult {
            repetition: 0,
            mean: vec![1.0, 2.0],
            std: vec![0.5, 1.0],
            noise_std: None,
            predictive_std: None,
            family,
            intervals: BTreeMap::new(),
            calibrated_pi: BTreeMap::new(),
            w2_anchor: None,
            kl_anchor: None,
            crps: None,
            scalars: BTreeMap::new(),
            diverged: false,
            joint_kind: None,
            joint_of_base: false,
            joint: BTreeMap::new(),
        }
    }

    #[test]
    fn intervals_follow_the_family() {
        let noise = [1.0, 0.0];
        let (lo, hi) = rep(Family::Normal)
            .interval(0.9, Which::Ci, &noise)
            .unwrap();
        let z = 1.644_853_626_951_472_2;
        assert!((lo[0] - (1.0 - z * 0.5)).abs() < 1e-12 && (hi[1] - (2.0 + z)).abs() < 1e-12);
        // PI: the half-width grows to z·sqrt(std² + noise²).
        let (lo, _) = rep(Family::Normal)
            .interval(0.9, Which::Pi, &noise)
            .unwrap();
        assert!((lo[0] - (1.0 - z * 1.25f64.sqrt())).abs() < 1e-12);
        // Student t with 7 dof: t_{0.975, 7} = 2.364624 (tables).
        let (lo, _) = rep(Family::StudentT { dof: 7.0 })
            .interval(0.95, Which::Ci, &noise)
            .unwrap();
        assert!((lo[0] - (1.0 - 2.364_624_251_6 * 0.5)).abs() < 1e-8);
        // The paper's coverage interval of a normal family uses 1.96 exactly.
        let (lo, _) = rep(Family::Normal).coverage_interval().unwrap();
        assert_eq!(lo[0], 1.0 - 1.96 * 0.5);
        // An empirical family without stored intervals is an error naming the level.
        let e = rep(Family::Empirical)
            .interval(0.9, Which::Ci, &noise)
            .unwrap_err()
            .to_string();
        assert!(e.contains("level 0.9"), "{e}");
    }

    #[test]
    fn empirical_intervals_from_samples() {
        // Five draws at two test inputs; type-7 quantiles at 0.1/0.9 of {0,1,2,3,4} are 0.4
        // and 3.6. Without noise the PI equals the CI.
        let samples: Vec<Vec<f64>> = (0..5).map(|k| vec![k as f64, 10.0 + k as f64]).collect();
        let columns = columns_of(&samples, 2).unwrap();
        let (ints, crps) = empirical(
            &columns,
            NoiseSd::PerPoint(&[0.0, 0.0]),
            &[0.8],
            &[2.0, 0.0],
        )
        .unwrap();
        let b = &ints["0.8"];
        assert!((b.ci_lower[0] - 0.4).abs() < 1e-12 && (b.ci_upper[0] - 3.6).abs() < 1e-12);
        assert_eq!(b.pi_lower, b.ci_lower);
        // CRPS of {0..4} at 2: E|X − 2| = 6/5, E|X − X′| = 40/25, so 6/5 − 4/5 = 0.4.
        assert!((crps[0] - 0.4).abs() < 1e-12);
        // At the second input the truth lies below every draw: CRPS = E|X − 0| − 0.8 = 11.2.
        assert!((crps[1] - 11.2).abs() < 1e-12);
    }

    #[test]
    fn non_finite_values_read_back_as_nan() {
        let mut r = rep(Family::Normal);
        r.mean[1] = f64::NAN;
        r.scalars.insert("final_objective".into(), f64::INFINITY);
        r.diverged = true;
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("null"), "{text}");
        let back: RepResult = serde_json::from_str(&text).unwrap();
        assert!(back.mean[1].is_nan() && back.scalars["final_objective"].is_nan());
        assert!(back.diverged);
        // A normal family is not written (files of earlier runs read as normal).
        assert!(!text.contains("family"));
        let t: RepResult = serde_json::from_str(
            &serde_json::to_string(&rep(Family::StudentT { dof: 7.0 })).unwrap(),
        )
        .unwrap();
        assert_eq!(t.family, Family::StudentT { dof: 7.0 });
    }
}
