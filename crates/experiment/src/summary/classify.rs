//! The classification track ([002] §4.2, [003], [001]): what a run stores per repetition of a
//! classification problem ([`ClassRep`]) and its metrics against the exact P(y = 1 | x).
//!
//! A method's draws (ensemble members, MC-dropout passes; one for the deterministic net) are
//! probabilities P(y = 1 | x) at every test input. When a repetition is stored they are
//! reduced to what the summary needs, as the regression track does for an empirical family:
//! the mean probability (the prediction), the central interval of the draws at every level
//! (type-7 quantiles: [002]'s interval of P(y = 1 | x), Fig. 7 and 8), and the mean binary
//! entropy of the draws (the expected entropy; with the predictive entropy H(mean) it gives
//! the mutual information).
//!
//! Label-based metrics (accuracy, ROC AUC, ECE, Brier, NLL, referral curves) use fresh test
//! labels y ~ Bernoulli(P(y = 1 | x)) drawn per repetition from the seed of (experiment,
//! setting, repetition, purpose `test-labels`): the same labels for every method.

use std::collections::BTreeMap;

use crate::bail;
use crate::error::Result;
use serde::{Deserialize, Serialize};
use uqbench_anchor::{Rng, SeedPath};
use uqbench_metrics::classification::{
    brier, brier_decomposition, calibration_error, entropy, nll, reliability_diagram, Binning,
    CalibrationConfig,
};
use uqbench_metrics::ranking::{referral_curve, roc_auc};

use super::by_rep::Points;
use super::compute::{insert_joint, mean_se_per_point, mixing_flag, proportions};
use super::joint::{JointKind, JointMetrics};
use super::names;
use super::regions::regions;
use super::types::{
    level_name, nullable_map, nullable_vec, ByRepetition, MethodSummary, PointMetric, Scalar,
    TestInfo,
};
use uqbench_metrics::regression::quantile_sorted;

/// Bins of the ECE and the reliability diagram (equal width on the top-label confidence).
pub const ECE_BINS: usize = 10;

/// Retained fractions of the referral curves ([003]): 0.5, 0.55, …, 1.
pub fn referral_fractions() -> Vec<f64> {
    (0..=10).map(|k| f64::from(50 + 5 * k) / 100.0).collect()
}

/// Random subsets per repetition and fraction behind the random-referral AUC.
const RANDOM_DRAWS: usize = 100;

/// Probabilities are clipped to [ε, 1 − ε] for the NLL only: the networks run in f32, whose
/// logits cannot resolve a probability closer to 0 or 1 than about 1e-7, and one certain
/// mistake would otherwise make the mean infinite.
pub const NLL_CLIP: f64 = 1e-7;

/// The seed purpose of the fresh test labels.
pub const TEST_LABELS: &str = "test-labels";

/// One central interval of P(y = 1 | x) per test input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbBounds {
    /// Lower ends.
    #[serde(deserialize_with = "nullable_vec")]
    pub lower: Vec<f64>,
    /// Upper ends.
    #[serde(deserialize_with = "nullable_vec")]
    pub upper: Vec<f64>,
}

/// One method's predictions for one repetition of a classification problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassRep {
    /// The repetition index.
    pub repetition: u64,
    /// Number of draws (members × passes) behind the statistics.
    pub draws: usize,
    /// The predicted P(y = 1 | x): the mean of the draws.
    #[serde(deserialize_with = "nullable_vec")]
    pub prob: Vec<f64>,
    /// Central intervals of the draws per level name.
    pub intervals: BTreeMap<String, ProbBounds>,
    /// The mean over draws of the binary entropy H(p) (nats).
    #[serde(deserialize_with = "nullable_vec")]
    pub expected_entropy: Vec<f64>,
    /// Scalars such as `final_objective` or `diverged_members`.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "nullable_map"
    )]
    pub scalars: BTreeMap<String, f64>,
    /// Whether training diverged; such repetitions are counted but left out of the metrics.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub diverged: bool,
    /// The joint metrics per region (`env_kl_T`, spec §10), when they ran.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub joint: JointMetrics,
}

/// The binary entropy H(p) = −p log p − (1 − p) log(1 − p) in nats.
pub fn binary_entropy(p: f64) -> f64 {
    entropy(&[p, 1.0 - p])
}

impl ClassRep {
    /// The stored form of repetition `rep` from its draws, one row per draw with one
    /// probability per test input. Every probability must lie in [0, 1] unless the
    /// repetition diverged (then NaN is kept for the record).
    pub fn from_draws(
        rep: u64,
        draws: &[Vec<f64>],
        levels: &[f64],
        scalars: BTreeMap<String, f64>,
        diverged: bool,
    ) -> Result<ClassRep> {
        let Some(m) = draws.first().map(Vec::len) else {
            bail!("repetition {rep}: no draws of P(y = 1 | x)");
        };
        for (k, row) in draws.iter().enumerate() {
            if row.len() != m {
                bail!(
                    "repetition {rep}: draw {k} has {} probabilities; draw 0 has {m} (one per \
                     test input)",
                    row.len()
                );
            }
            if !diverged {
                if let Some((i, p)) = row
                    .iter()
                    .enumerate()
                    .find(|(_, p)| !(0.0..=1.0).contains(*p))
                {
                    bail!(
                        "repetition {rep}, draw {k}, test input {i}: probability {p}; valid: a \
                         number in [0, 1]"
                    );
                }
            }
        }
        let t = draws.len() as f64;
        let mut prob = Vec::with_capacity(m);
        let mut expected_entropy = Vec::with_capacity(m);
        let mut intervals: BTreeMap<String, ProbBounds> = levels
            .iter()
            .map(|&l| {
                (
                    level_name(l),
                    ProbBounds {
                        lower: Vec::with_capacity(m),
                        upper: Vec::with_capacity(m),
                    },
                )
            })
            .collect();
        let mut column = Vec::with_capacity(draws.len());
        for i in 0..m {
            column.clear();
            column.extend(draws.iter().map(|r| r[i]));
            prob.push(column.iter().sum::<f64>() / t);
            expected_entropy.push(column.iter().map(|&p| binary_entropy(p)).sum::<f64>() / t);
            column.sort_by(f64::total_cmp);
            for &l in levels {
                let b = intervals.get_mut(&level_name(l)).expect("inserted above");
                b.lower.push(quantile_sorted(&column, (1.0 - l) / 2.0));
                b.upper.push(quantile_sorted(&column, (1.0 + l) / 2.0));
            }
        }
        Ok(ClassRep {
            repetition: rep,
            draws: draws.len(),
            prob,
            intervals,
            expected_entropy,
            scalars,
            diverged,
            joint: JointMetrics::new(),
        })
    }
}

/// The fresh test labels of repetition `rep`: y_i = 1 with probability `truth[i]`.
pub fn test_labels(seed: &SeedPath<'_>, truth: &[f64]) -> Vec<bool> {
    let mut rng: Rng = seed.rng();
    truth.iter().map(|&p| rng.uniform() < p).collect()
}

/// The label-based metrics of one repetition on the points `idx`.
fn label_metrics(prob: &[f64], labels: &[bool], idx: &[usize]) -> Result<BTreeMap<String, f64>> {
    let rows: Vec<Vec<f64>> = idx.iter().map(|&i| vec![1.0 - prob[i], prob[i]]).collect();
    let y: Vec<usize> = idx.iter().map(|&i| usize::from(labels[i])).collect();
    let clipped: Vec<Vec<f64>> = idx
        .iter()
        .map(|&i| {
            let p = prob[i].clamp(NLL_CLIP, 1.0 - NLL_CLIP);
            vec![1.0 - p, p]
        })
        .collect();
    let dec = brier_decomposition(&rows, &y)?;
    let scores: Vec<f64> = idx.iter().map(|&i| prob[i]).collect();
    let pos: Vec<bool> = idx.iter().map(|&i| labels[i]).collect();
    let mut out = BTreeMap::new();
    out.insert(
        names::ACCURACY.into(),
        uqbench_metrics::classification::accuracy(&rows, &y)?,
    );
    out.insert(
        names::AUC.into(),
        roc_auc(&scores, &pos).unwrap_or(f64::NAN), // one class only: undefined
    );
    out.insert(
        names::ECE.into(),
        calibration_error(&rows, &y, &CalibrationConfig::ece(ECE_BINS))?,
    );
    out.insert(names::BRIER.into(), brier(&rows, &y)?);
    out.insert(names::BRIER_UNCERTAINTY.into(), dec.uncertainty);
    out.insert(names::BRIER_RESOLUTION.into(), dec.resolution);
    out.insert(names::BRIER_RELIABILITY.into(), dec.reliability);
    out.insert(names::NLL.into(), nll(&clipped, &y)?);
    Ok(out)
}

/// Mean and standard error over repetitions, ignoring NaN (an AUC on a one-class region),
/// counting ±∞ ([`Scalar::over_repetitions`]).
fn over_reps(v: &[f64]) -> Scalar {
    Scalar::over_repetitions(v).unwrap_or_else(|| Scalar::bare(f64::NAN))
}

/// A method's flags: poor mixing, and the repetitions left out because training diverged.
fn method_flags<'a>(
    scalars: impl Iterator<Item = &'a BTreeMap<String, f64>> + Clone,
    diverged: &[u64],
    total: usize,
) -> Vec<String> {
    let mut flags: Vec<String> = mixing_flag(scalars, total);
    if !diverged.is_empty() {
        flags.push(format!(
            "{} of {total} repetitions diverged and are left out",
            diverged.len()
        ));
    }
    flags
}

/// Summarises one method's repetitions of a classification problem. `labels(rep)` gives the
/// fresh test labels of a repetition.
pub fn summarize_classification(
    test: &TestInfo,
    reps: &[ClassRep],
    levels: &[f64],
    labels: &dyn Fn(u64) -> Vec<bool>,
) -> Result<MethodSummary> {
    let m = test.truth.len();
    for r in reps {
        if r.prob.len() != m || r.expected_entropy.len() != m {
            bail!(
                "repetition {}: {} probabilities for {m} test inputs",
                r.repetition,
                r.prob.len()
            );
        }
    }
    let diverged: Vec<u64> = reps
        .iter()
        .filter(|r| r.diverged)
        .map(|r| r.repetition)
        .collect();
    let used: Vec<&ClassRep> = reps.iter().filter(|r| !r.diverged).collect();
    let k = used.len();
    if k == 0 {
        return Ok(MethodSummary::empty(
            diverged,
            vec!["every repetition diverged".into()],
        ));
    }
    let regs = regions(test);
    // Per repetition and test input (`[r][i]`): a per-point metric is the mean over
    // repetitions, a region aggregate the mean over repetitions of each repetition's mean over
    // the region, with its standard error over the repetitions (spec §8).
    let per_rep = |f: &dyn Fn(&ClassRep, usize) -> f64| -> Vec<Vec<f64>> {
        used.iter()
            .map(|r| (0..m).map(|i| f(r, i)).collect())
            .collect()
    };
    let mut tables = Tables {
        per_point: vec![
            (
                names::ABS_ERROR.into(),
                per_rep(&|r, i| (r.prob[i] - test.truth[i]).abs()),
            ),
            (
                names::PREDICTIVE_ENTROPY.into(),
                per_rep(&|r, i| binary_entropy(r.prob[i])),
            ),
            (
                names::EXPECTED_ENTROPY.into(),
                per_rep(&|r, i| r.expected_entropy[i]),
            ),
            (
                names::MUTUAL_INFORMATION.into(),
                per_rep(&|r, i| binary_entropy(r.prob[i]) - r.expected_entropy[i]),
            ),
        ],
        pointwise: vec![(
            names::PROB.into(),
            mean_se_per_point(&per_rep(&|r, i| r.prob[i]), m),
        )],
        aggregate: BTreeMap::new(),
        per_repetition: BTreeMap::new(),
        by: ByRepetition::new(used.iter().map(|r| r.repetition).collect()),
    };
    for &l in levels {
        interval_metrics(test, &used, l, &regs, &mut tables)?;
    }
    for (region, idx) in &regs {
        let agg = tables.aggregate.entry((*region).to_string()).or_default();
        for (name, v) in &tables.per_point {
            let idx = Points::Shared(idx);
            agg.insert(name.clone(), tables.by.region(region, name, v, idx));
        }
    }
    for (name, v) in std::mem::take(&mut tables.per_point) {
        tables.pointwise.push((name, mean_se_per_point(&v, m)));
    }
    // Label-based metrics per repetition, then mean ± se over repetitions.
    let labelled = label_metrics_of(&used, &regs, labels, m, &mut tables.per_repetition)?;
    let Tables {
        mut aggregate,
        per_repetition,
        pointwise,
        mut by,
        ..
    } = tables;
    labelled.insert_into(&mut aggregate, &mut by)?;
    insert_scalars(
        aggregate.entry(names::ALL.to_string()).or_default(),
        &used,
        &mut by,
    );
    insert_joint(&mut aggregate, used.iter().map(|r| &r.joint), &mut by);
    let flags = method_flags(used.iter().map(|r| &r.scalars), &diverged, reps.len());
    Ok(MethodSummary {
        repetitions: k,
        diverged,
        points: pointwise.into_iter().collect(),
        aggregate,
        flags,
        per_repetition,
        // Every classification method returns draws (members' or passes' probabilities).
        joint_kind: used
            .iter()
            .any(|r| !r.joint.is_empty())
            .then_some(JointKind::Draws),
        joint_of_base: false,
        by_repetition: by,
    })
}

/// What the summary accumulates: per-point values per repetition (`[r][i]`), per-point
/// metrics, region aggregates and per-repetition values.
struct Tables {
    per_point: Vec<(String, Vec<Vec<f64>>)>,
    pointwise: Vec<(String, PointMetric)>,
    aggregate: BTreeMap<String, BTreeMap<String, Scalar>>,
    per_repetition: BTreeMap<String, Vec<f64>>,
    by: ByRepetition,
}

/// The central interval at level `l`: its coverage of the exact probability (per point, per
/// repetition and per region) and its width.
fn interval_metrics(
    test: &TestInfo,
    used: &[&ClassRep],
    l: f64,
    regs: &[(&'static str, Vec<usize>)],
    tables: &mut Tables,
) -> Result<()> {
    let (m, k) = (test.truth.len(), used.len());
    let name = level_name(l);
    let bounds: Vec<&ProbBounds> = used
        .iter()
        .map(|r| {
            r.intervals.get(&name).ok_or_else(|| {
                crate::error::ExperimentError::Invalid(format!(
                    "repetition {}: no interval at level {l} is stored (levels: {}); rerun \
                     it with these levels",
                    r.repetition,
                    r.intervals.keys().cloned().collect::<Vec<_>>().join(", ")
                ))
            })
        })
        .collect::<Result<_>>()?;
    // The interval covers the exact probability (closed: a zero-width interval at the
    // truth covers it).
    let covered: Vec<Vec<f64>> = bounds
        .iter()
        .map(|b| {
            (0..m)
                .map(|i| {
                    f64::from(u8::from(
                        b.lower[i] <= test.truth[i] && test.truth[i] <= b.upper[i],
                    ))
                })
                .collect()
        })
        .collect();
    let hits: Vec<u64> = (0..m)
        .map(|i| covered.iter().filter(|c| c[i] > 0.5).count() as u64)
        .collect();
    tables.pointwise.push((
        format!("{}_{name}", names::COVERAGE_AT),
        proportions(&hits, k),
    ));
    tables.per_repetition.insert(
        format!("{}_{name}", names::COVERAGE_AT),
        covered
            .iter()
            .map(|c| c.iter().sum::<f64>() / m as f64)
            .collect(),
    );
    for (region, idx) in regs {
        tables
            .aggregate
            .entry((*region).to_string())
            .or_default()
            .insert(
                format!("{}_{name}", names::COVERAGE_AT),
                tables.by.region(
                    region,
                    &format!("{}_{name}", names::COVERAGE_AT),
                    &covered,
                    Points::Shared(idx),
                ),
            );
    }
    let widths: Vec<Vec<f64>> = bounds
        .iter()
        .map(|b| (0..m).map(|i| b.upper[i] - b.lower[i]).collect())
        .collect();
    tables
        .per_point
        .push((format!("{}_{name}", names::WIDTH), widths));
    Ok(())
}

/// The label-based metrics of every repetition against its fresh test labels, per region,
/// its referral curve, and the pooled probabilities and labels (for the reliability diagram).
struct Labelled {
    per_region: BTreeMap<&'static str, BTreeMap<String, Vec<f64>>>,
    referral: BTreeMap<String, Vec<f64>>,
    pooled_probs: Vec<Vec<f64>>,
    pooled_labels: Vec<usize>,
}

/// [003]'s referral curve of one repetition's probabilities `prob` against its test labels
/// `y`: ranked by predictive entropy, the most certain fractions kept, the random baseline
/// drawn from the repetition's seed.
fn referral_of(
    prob: &[f64],
    y: &[bool],
    fractions: &[f64],
    repetition: u64,
) -> std::result::Result<Vec<uqbench_metrics::ranking::ReferralPoint>, uqbench_metrics::MetricError>
{
    let unc: Vec<f64> = prob.iter().map(|&p| binary_entropy(p)).collect();
    // Class 1 is predicted when p > ½, as `accuracy`'s argmax (ties go to class 0).
    let correct: Vec<bool> = (prob.iter().zip(y))
        .map(|(&p, &l)| (p > 0.5) == l)
        .collect();
    referral_curve(&unc, &correct, prob, y, fractions, RANDOM_DRAWS, repetition)
}

/// [`Labelled`] for the repetitions `used`; the headline label metrics of each repetition go
/// to `per_repetition`.
fn label_metrics_of(
    used: &[&ClassRep],
    regs: &[(&'static str, Vec<usize>)],
    labels: &dyn Fn(u64) -> Vec<bool>,
    m: usize,
    per_repetition: &mut BTreeMap<String, Vec<f64>>,
) -> Result<Labelled> {
    let fractions = referral_fractions();
    let mut per_region: BTreeMap<&str, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    let mut referral: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut pooled_probs = Vec::new();
    let mut pooled_labels = Vec::new();
    let ys: Vec<Vec<bool>> = used.iter().map(|r| labels(r.repetition)).collect();
    if let Some(y) = ys.iter().find(|y| y.len() != m) {
        bail!("test labels: {} for {m} test inputs", y.len());
    }
    // [003]'s referral curves, the costly part (100 random subsets per retained fraction), over
    // the cores; each repetition's from its own seed, so the same numbers in any order.
    let curves = uqbench_core::par_map(used.len(), |k| {
        referral_of(&used[k].prob, &ys[k], &fractions, used[k].repetition)
    });
    for ((r, y), curve) in used.iter().zip(ys).zip(curves) {
        for (region, idx) in regs {
            for (name, v) in label_metrics(&r.prob, &y, idx)? {
                per_region
                    .entry(region)
                    .or_default()
                    .entry(name)
                    .or_default()
                    .push(v);
            }
        }
        for pt in curve? {
            let q = level_name(pt.retained);
            for (what, v) in [
                (names::REFERRAL_ACCURACY, pt.accuracy),
                (names::REFERRAL_AUC, pt.auc),
                (names::RANDOM_ACCURACY, pt.random_accuracy),
                (names::RANDOM_AUC, pt.random_auc),
            ] {
                referral.entry(format!("{what}_{q}")).or_default().push(v);
            }
        }
        for (&p, &l) in r.prob.iter().zip(&y) {
            pooled_probs.push(vec![1.0 - p, p]);
            pooled_labels.push(usize::from(l));
        }
        for name in [
            names::ECE,
            names::ACCURACY,
            names::AUC,
            names::NLL,
            names::BRIER,
        ] {
            if let Some(v) = per_region
                .get(names::ALL)
                .and_then(|m| m.get(name))
                .and_then(|v| v.last())
            {
                per_repetition.entry(name.to_string()).or_default().push(*v);
            }
        }
    }
    Ok(Labelled {
        per_region,
        referral,
        pooled_probs,
        pooled_labels,
    })
}

impl Labelled {
    /// Mean ± se over repetitions of every label metric and referral point, and the
    /// reliability diagram over every repetition's test points together.
    fn insert_into(
        self,
        aggregate: &mut BTreeMap<String, BTreeMap<String, Scalar>>,
        by: &mut ByRepetition,
    ) -> Result<()> {
        for (region, metrics) in self.per_region {
            let agg = aggregate.entry(region.to_string()).or_default();
            for (name, v) in metrics {
                agg.insert(name.clone(), over_reps(&v));
                by.put(region, &name, v);
            }
        }
        let all = aggregate.entry(names::ALL.to_string()).or_default();
        for (name, v) in self.referral {
            all.insert(name.clone(), over_reps(&v));
            by.put(names::ALL, &name, v);
        }
        // The reliability diagram over every repetition's test points together ([002] Fig. 29–33,
        // Guo et al. 2017): per non-empty bin of the top-label confidence, its mean confidence,
        // the accuracy in it and its share of the points.
        let bins = reliability_diagram(
            &self.pooled_probs,
            &self.pooled_labels,
            ECE_BINS,
            Binning::EqualWidth,
        )?;
        let total = self.pooled_labels.len() as f64;
        for (b, bin) in bins.iter().enumerate().filter(|(_, b)| b.count > 0) {
            all.insert(
                format!("{}_{b}", names::RELIABILITY_CONFIDENCE),
                Scalar::bare(bin.confidence),
            );
            all.insert(
                format!("{}_{b}", names::RELIABILITY_ACCURACY),
                Scalar::bare(bin.accuracy),
            );
            all.insert(
                format!("{}_{b}", names::RELIABILITY_SHARE),
                Scalar::bare(bin.count as f64 / total),
            );
        }
        Ok(())
    }
}

/// Each scalar a method reports per repetition (final objective, learned rates, HMC's
/// diagnostics), as mean ± se over the repetitions. As in the regression track, only NaN is
/// left out: an infinite value (an R̂ that could not be computed) makes the mean infinite
/// rather than vanish from it.
fn insert_scalars(all: &mut BTreeMap<String, Scalar>, used: &[&ClassRep], by: &mut ByRepetition) {
    let mut scalar_names: Vec<String> = used
        .iter()
        .flat_map(|r| r.scalars.keys().cloned())
        .collect();
    scalar_names.sort();
    scalar_names.dedup();
    for name in scalar_names {
        by.put(
            names::ALL,
            &name,
            used.iter()
                .map(|r| r.scalars.get(&name).copied().unwrap_or(f64::NAN))
                .collect(),
        );
        let v: Vec<f64> = used
            .iter()
            .filter_map(|r| r.scalars.get(&name).copied())
            .collect();
        all.insert(name, over_reps(&v));
    }
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;
