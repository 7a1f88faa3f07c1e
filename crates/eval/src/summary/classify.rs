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

use super::compute::{mean_se_per_point, mixing_flag, proportions, region_aggregate, regions};
use super::names;
use super::types::{level_name, nullable_vec, MethodSummary, PointMetric, Scalar, TestInfo};
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
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scalars: BTreeMap<String, f64>,
    /// Whether training diverged; such repetitions are counted but left out of the metrics.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub diverged: bool,
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
    out.insert("brier_uncertainty".into(), dec.uncertainty);
    out.insert("brier_resolution".into(), dec.resolution);
    out.insert("brier_reliability".into(), dec.reliability);
    out.insert(names::NLL.into(), nll(&clipped, &y)?);
    Ok(out)
}

/// Mean and standard error over repetitions, ignoring NaN (an AUC on a one-class region).
fn over_reps(v: &[f64]) -> Scalar {
    let finite: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    match uqbench_metrics::coverage::mean_se(&finite) {
        Ok(s) => Scalar::with_se(s.mean, s.se),
        Err(_) => Scalar::bare(f64::NAN),
    }
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
    let points = BTreeMap::new();
    let mut aggregate: BTreeMap<String, BTreeMap<String, Scalar>> = BTreeMap::new();
    let mut per_repetition: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    if k == 0 {
        return Ok(MethodSummary {
            repetitions: 0,
            diverged,
            points,
            aggregate,
            flags: vec!["every repetition diverged".into()],
            per_repetition,
        });
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
    let mut per_point: Vec<(String, Vec<Vec<f64>>)> = vec![
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
    ];
    let mut pointwise: Vec<(String, PointMetric)> = vec![(
        names::PROB.into(),
        mean_se_per_point(&per_rep(&|r, i| r.prob[i]), m),
    )];
    for &l in levels {
        let name = level_name(l);
        let bounds: Vec<&ProbBounds> = used
            .iter()
            .map(|r| {
                r.intervals.get(&name).ok_or_else(|| {
                    crate::error::EvalError::Message(format!(
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
        pointwise.push((
            format!("{}_{name}", names::COVERAGE_AT),
            proportions(&hits, k),
        ));
        per_repetition.insert(
            format!("{}_{name}", names::COVERAGE_AT),
            covered
                .iter()
                .map(|c| c.iter().sum::<f64>() / m as f64)
                .collect(),
        );
        for (region, idx) in &regs {
            aggregate.entry((*region).to_string()).or_default().insert(
                format!("{}_{name}", names::COVERAGE_AT),
                region_aggregate(&covered, idx),
            );
        }
        let widths: Vec<Vec<f64>> = bounds
            .iter()
            .map(|b| (0..m).map(|i| b.upper[i] - b.lower[i]).collect())
            .collect();
        per_point.push((format!("{}_{name}", names::WIDTH), widths));
    }
    for (region, idx) in &regs {
        let agg = aggregate.entry((*region).to_string()).or_default();
        for (name, v) in &per_point {
            agg.insert(name.clone(), region_aggregate(v, idx));
        }
    }
    for (name, v) in per_point {
        pointwise.push((name, mean_se_per_point(&v, m)));
    }
    // Label-based metrics per repetition, then mean ± se over repetitions.
    let fractions = referral_fractions();
    let mut per_region: BTreeMap<&str, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    let mut referral: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut pooled_probs = Vec::new();
    let mut pooled_labels = Vec::new();
    for r in &used {
        let y = labels(r.repetition);
        if y.len() != m {
            bail!("test labels: {} for {m} test inputs", y.len());
        }
        for (region, idx) in &regs {
            for (name, v) in label_metrics(&r.prob, &y, idx)? {
                per_region
                    .entry(region)
                    .or_default()
                    .entry(name)
                    .or_default()
                    .push(v);
            }
        }
        // [003]: rank by predictive entropy, keep the most certain fraction.
        let unc: Vec<f64> = r.prob.iter().map(|&p| binary_entropy(p)).collect();
        // Class 1 is predicted when p > ½, as `accuracy`'s argmax (ties go to class 0).
        let correct: Vec<bool> = r
            .prob
            .iter()
            .zip(&y)
            .map(|(&p, &l)| (p > 0.5) == l)
            .collect();
        let curve = referral_curve(
            &unc,
            &correct,
            &r.prob,
            &y,
            &fractions,
            RANDOM_DRAWS,
            r.repetition,
        )?;
        for pt in curve {
            let q = level_name(pt.retained);
            for (what, v) in [
                ("referral_accuracy", pt.accuracy),
                ("referral_auc", pt.auc),
                ("random_accuracy", pt.random_accuracy),
                ("random_auc", pt.random_auc),
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
    for (region, metrics) in per_region {
        let agg = aggregate.entry(region.to_string()).or_default();
        for (name, v) in metrics {
            agg.insert(name, over_reps(&v));
        }
    }
    let all = aggregate.entry(names::ALL.to_string()).or_default();
    for (name, v) in referral {
        all.insert(name, over_reps(&v));
    }
    // The reliability diagram over every repetition's test points together ([002] Fig. 29–33,
    // Guo et al. 2017): per non-empty bin of the top-label confidence, its mean confidence,
    // the accuracy in it and its share of the points.
    let bins = reliability_diagram(&pooled_probs, &pooled_labels, ECE_BINS, Binning::EqualWidth)?;
    let total = pooled_labels.len() as f64;
    for (b, bin) in bins.iter().enumerate().filter(|(_, b)| b.count > 0) {
        all.insert(
            format!("reliability_confidence_{b}"),
            Scalar::bare(bin.confidence),
        );
        all.insert(
            format!("reliability_accuracy_{b}"),
            Scalar::bare(bin.accuracy),
        );
        all.insert(
            format!("reliability_share_{b}"),
            Scalar::bare(bin.count as f64 / total),
        );
    }
    let mut scalar_names: Vec<String> = used
        .iter()
        .flat_map(|r| r.scalars.keys().cloned())
        .collect();
    scalar_names.sort();
    scalar_names.dedup();
    for name in scalar_names {
        let v: Vec<f64> = used
            .iter()
            .filter_map(|r| r.scalars.get(&name).copied())
            .collect();
        all.insert(name, over_reps(&v));
    }
    let mut flags: Vec<String> = mixing_flag(used.iter().map(|r| &r.scalars), reps.len());
    if !diverged.is_empty() {
        flags.push(format!(
            "{} of {} repetitions diverged and are left out",
            diverged.len(),
            reps.len()
        ));
    }
    Ok(MethodSummary {
        repetitions: k,
        diverged,
        points: pointwise.into_iter().collect(),
        aggregate,
        flags,
        per_repetition,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use uqbench_anchor::Region;

    /// A 1-D-like test set of `m` points with probabilities spread over (0, 1).
    fn test_info(m: usize) -> TestInfo {
        let truth: Vec<f64> = (0..m)
            .map(|i| 1.0 / (1.0 + (-((i as f64 / m as f64) * 12.0 - 6.0)).exp()))
            .collect();
        TestInfo {
            x: (0..m).map(|i| vec![i as f64, 0.0]).collect(),
            coord: None,
            region: (0..m)
                .map(|i| if i < m / 2 { Region::In } else { Region::Out })
                .collect(),
            label: vec![None; m],
            sigma: truth.iter().map(|p| (p * (1.0 - p)).sqrt()).collect(),
            truth,
        }
    }

    fn labels_for(test: &TestInfo) -> impl Fn(u64) -> Vec<bool> + '_ {
        move |rep| {
            test_labels(
                &SeedPath {
                    base: 1,
                    experiment: "t",
                    setting: "",
                    repetition: rep,
                    member: 0,
                    purpose: TEST_LABELS,
                },
                &test.truth,
            )
        }
    }

    /// The summary over 20 repetitions of a "method" whose only draw is the exact P.
    fn exact_summary(m: usize) -> (TestInfo, MethodSummary) {
        let test = test_info(m);
        let reps: Vec<ClassRep> = (0..20)
            .map(|r| {
                ClassRep::from_draws(
                    r,
                    std::slice::from_ref(&test.truth),
                    &[0.9],
                    BTreeMap::new(),
                    false,
                )
                .unwrap()
            })
            .collect();
        let s = summarize_classification(&test, &reps, &[0.9], &labels_for(&test)).unwrap();
        (test, s)
    }

    #[test]
    fn the_exact_probability_is_calibrated_and_covered() {
        // A "method" whose only draw is the exact P(y = 1 | x): its interval has width 0 at
        // the truth and covers it everywhere; its ECE on fresh labels is sampling noise only.
        let m = 2000;
        let (test, s) = exact_summary(m);
        let all = &s.aggregate["all"];
        assert_eq!(all["coverage_0.9"].value, 1.0);
        assert_eq!(all["width_0.9"].value, 0.0);
        assert_eq!(all["abs_error"].value, 0.0);
        assert_eq!(all["mutual_information"].value, 0.0);
        // ECE's sampling bound, per repetition: with the confidence c_i = max(p_i, 1 − p_i)
        // exact, bin b's gap |Σ_{i∈b} (1{correct_i} − c_i)|/M has sd s_b/M with
        // s_b² = Σ_{i∈b} p_i(1 − p_i). Allow 4 sd in every bin: a false alarm has probability
        // below 10·6e-5 per repetition.
        let mut sums = [0.0; ECE_BINS];
        for &p in &test.truth {
            let c: f64 = p.max(1.0 - p);
            let b = ((c * ECE_BINS as f64) as usize).min(ECE_BINS - 1);
            sums[b] += p * (1.0 - p);
        }
        let bound: f64 = sums.iter().map(|v| 4.0 * v.sqrt()).sum::<f64>() / m as f64;
        for (r, ece) in s.per_repetition["ece"].iter().enumerate() {
            assert!(
                *ece <= bound,
                "repetition {r}: ECE {ece} above its bound {bound}"
            );
        }
        // Its reliability diagram lies on the diagonal within the binomial error of each bin.
        for b in 0..ECE_BINS {
            let (Some(c), Some(a), Some(share)) = (
                all.get(&format!("reliability_confidence_{b}")),
                all.get(&format!("reliability_accuracy_{b}")),
                all.get(&format!("reliability_share_{b}")),
            ) else {
                continue;
            };
            let n = share.value * (20 * m) as f64;
            let sd = (c.value * (1.0 - c.value) / n).sqrt();
            assert!((a.value - c.value).abs() < 5.0 * sd + 1e-12, "bin {b}");
        }
    }

    #[test]
    fn referral_of_the_exact_probability_beats_random_referral() {
        // Ranked by the entropy of the exact probability, the retained points are the most
        // predictable ones: the expected accuracy on them exceeds the overall accuracy (the
        // random baseline's expectation) at every fraction below 1. Over 20 repetitions the
        // mean difference has a standard error of at most sqrt(0.25/(0.5·M·20)) = 0.005; the
        // expected gain at 50% retained is about 0.15 here, so 0.05 is far inside it.
        let m = 2000;
        let (_, s) = exact_summary(m);
        let all = &s.aggregate["all"];
        for q in referral_fractions() {
            let name = level_name(q);
            let ours = all[&format!("referral_accuracy_{name}")];
            let random = all[&format!("random_accuracy_{name}")];
            if q < 1.0 {
                let margin = if q <= 0.5 { 0.05 } else { 0.0 };
                assert!(
                    ours.value > random.value + margin,
                    "q = {q}: {} vs random {}",
                    ours.value,
                    random.value
                );
            } else {
                assert_eq!(ours.value, random.value);
            }
            // The AUC on the retained points is defined and the random AUC is the overall one
            // in expectation.
            assert!(all[&format!("random_auc_{name}")].value > 0.5);
        }
    }

    #[test]
    fn region_error_bars_are_over_repetitions_by_hand() {
        // Four points with P = 0.2, 0.5, 0.7, 0.9, the first two `in`; three repetitions of two
        // draws each.
        let test = TestInfo {
            x: (0..4).map(|i| vec![f64::from(i), 0.0]).collect(),
            coord: None,
            region: vec![Region::In, Region::In, Region::Out, Region::Out],
            label: vec![None; 4],
            truth: vec![0.2, 0.5, 0.7, 0.9],
            sigma: vec![0.0; 4],
        };
        let draws = [
            [[0.1, 0.5, 0.6, 0.9], [0.3, 0.5, 0.8, 0.9]],
            [[0.4, 0.4, 0.7, 0.7], [0.4, 0.6, 0.7, 0.9]],
            [[0.1, 0.1, 0.5, 0.9], [0.1, 0.3, 0.5, 0.9]],
        ];
        let reps: Vec<ClassRep> = draws
            .iter()
            .enumerate()
            .map(|(r, d)| {
                let rows: Vec<Vec<f64>> = d.iter().map(|row| row.to_vec()).collect();
                ClassRep::from_draws(r as u64, &rows, &[0.5], BTreeMap::new(), false).unwrap()
            })
            .collect();
        let s = summarize_classification(&test, &reps, &[0.5], &labels_for(&test)).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // Mean probabilities: rep 0 (0.2, 0.5, 0.7, 0.9), rep 1 (0.4, 0.5, 0.7, 0.8), rep 2
        // (0.1, 0.2, 0.5, 0.9); |error| rep 0 (0, 0, 0, 0), rep 1 (0.2, 0, 0, 0.1), rep 2 (0.1,
        // 0.3, 0.2, 0). `in` per repetition 0, 0.1, 0.2 → 0.1 ± 0.1/√3; `all` 0, 0.075, 0.15
        // → 0.075 ± 0.075/√3.
        let e = s.aggregate["in"]["abs_error"];
        assert!(close(e.value, 0.1) && close(e.stderr, 0.1 / 3f64.sqrt()));
        let e = s.aggregate["all"]["abs_error"];
        assert!(close(e.value, 0.075) && close(e.stderr, 0.075 / 3f64.sqrt()));
        // Central 50% intervals of two draws a ≤ b (type 7): [a + (b − a)/4, a + 3(b − a)/4].
        // Covered (closed): rep 0 (1, 1, 1, 1), rep 1 (0, 1, 1, 0), rep 2 (0, 0, 0, 1); `in`
        // per repetition 1, ½, 0 → ½ ± ½/√3.
        let c = s.aggregate["in"]["coverage_0.5"];
        assert!(close(c.value, 0.5) && close(c.stderr, 0.5 / 3f64.sqrt()));
        // Widths in `in`: (0.1 + 0)/2, (0 + 0.1)/2, (0 + 0.1)/2 per repetition → 0.05 ± 0.
        let w = s.aggregate["in"]["width_0.5"];
        assert!(close(w.value, 0.05) && close(w.stderr, 0.0));
        // The spread across the `in` points of their mean widths (1/30 and 2/30) is descriptive.
        assert!(close(w.points_sd.unwrap(), (1.0 / 30.0) / 2f64.sqrt()));
    }

    #[test]
    fn draws_outside_the_unit_interval_are_errors() {
        let e = ClassRep::from_draws(3, &[vec![0.2, 1.2]], &[0.9], BTreeMap::new(), false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("repetition 3") && e.contains("1.2") && e.contains("[0, 1]"),
            "{e}"
        );
        // A diverged repetition keeps its NaN for the record.
        let r = ClassRep::from_draws(0, &[vec![f64::NAN]], &[0.9], BTreeMap::new(), true).unwrap();
        assert!(r.diverged && r.prob[0].is_nan());
        // Intervals are type-7 quantiles of the draws: 0.05/0.95 of {0.1, 0.2, 0.3} are 0.11
        // and 0.29.
        let r = ClassRep::from_draws(
            0,
            &[vec![0.1], vec![0.3], vec![0.2]],
            &[0.9],
            BTreeMap::new(),
            false,
        )
        .unwrap();
        let b = &r.intervals["0.9"];
        assert!((b.lower[0] - 0.11).abs() < 1e-12 && (b.upper[0] - 0.29).abs() < 1e-12);
        assert!((r.prob[0] - 0.2).abs() < 1e-12);
        // Expected entropy: the mean of the draws' binary entropies.
        let h = (binary_entropy(0.1) + binary_entropy(0.2) + binary_entropy(0.3)) / 3.0;
        assert!((r.expected_entropy[0] - h).abs() < 1e-15);
    }
}
