//! Metrics for probabilistic classifiers: calibration errors, reliability diagrams, Brier
//! score and its decomposition, NLL, accuracy, ensemble entropies.
//!
//! Predictions are `probs`, one row of class probabilities per point (rows sum to 1 within
//! 1e-6), and `labels`, the true class indices.

use serde::{Deserialize, Serialize};

use crate::error::{non_empty, same_len, MetricError};

/// Checks probability rows and labels; returns the number of classes.
pub fn check_probs(probs: &[Vec<f64>], labels: &[usize]) -> Result<usize, MetricError> {
    same_len("probs and labels", probs.len(), labels.len())?;
    non_empty("probs", probs.len())?;
    let c = probs[0].len();
    if c < 2 {
        return Err(MetricError::Invalid {
            what: "probs[0] (number of classes)".into(),
            value: c as f64,
            valid: "at least 2 classes per row".into(),
        });
    }
    for (i, row) in probs.iter().enumerate() {
        same_len(&format!("probs[{i}] and probs[0]"), row.len(), c)?;
        for (j, &p) in row.iter().enumerate() {
            if !(0.0..=1.0).contains(&p) {
                return Err(MetricError::Invalid {
                    what: format!("probs[{i}][{j}]"),
                    value: p,
                    valid: "probabilities lie in [0, 1]".into(),
                });
            }
        }
        let s: f64 = row.iter().sum();
        if (s - 1.0).abs() > 1e-6 {
            return Err(MetricError::Invalid {
                what: format!("sum of probs[{i}]"),
                value: s,
                valid: "each row must sum to 1 (within 1e-6)".into(),
            });
        }
        if labels[i] >= c {
            return Err(MetricError::Invalid {
                what: format!("labels[{i}]"),
                value: labels[i] as f64,
                valid: format!("a class index in 0..{c}"),
            });
        }
    }
    Ok(c)
}

fn argmax(row: &[f64]) -> usize {
    // First maximum on ties, like numpy.argmax.
    let mut best = 0;
    for (j, &p) in row.iter().enumerate() {
        if p > row[best] {
            best = j;
        }
    }
    best
}

/// Fraction of points whose most probable class is the label.
pub fn accuracy(probs: &[Vec<f64>], labels: &[usize]) -> Result<f64, MetricError> {
    check_probs(probs, labels)?;
    Ok(probs
        .iter()
        .zip(labels)
        .filter(|(p, l)| argmax(p) == **l)
        .count() as f64
        / labels.len() as f64)
}

/// Multi-class Brier score Σ_c (p_c − 1{y = c})², averaged over points (0 is perfect, 2 the
/// worst).
pub fn brier(probs: &[Vec<f64>], labels: &[usize]) -> Result<f64, MetricError> {
    check_probs(probs, labels)?;
    let total: f64 = probs
        .iter()
        .zip(labels)
        .map(|(row, &l)| {
            row.iter()
                .enumerate()
                .map(|(c, p)| (p - if c == l { 1.0 } else { 0.0 }).powi(2))
                .sum::<f64>()
        })
        .sum();
    Ok(total / labels.len() as f64)
}

/// Negative log-likelihood −log p_y, averaged. p_y = 0 gives +∞.
pub fn nll(probs: &[Vec<f64>], labels: &[usize]) -> Result<f64, MetricError> {
    check_probs(probs, labels)?;
    Ok(-probs
        .iter()
        .zip(labels)
        .map(|(row, &l)| row[l].ln())
        .sum::<f64>()
        / labels.len() as f64)
}

/// The Brier decomposition of [001] (after Bröcker 2009): points are grouped by their
/// predicted class k; p̄ is the overall label distribution and q_k the label distribution
/// within group k.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BrierDecomposition {
    /// 1 − Σ_c p̄_c²: the Brier score of always predicting p̄.
    pub uncertainty: f64,
    /// Σ_k w_k ‖q_k − p̄‖²: how much the groups' label distributions differ from p̄.
    pub resolution: f64,
    /// mean_i ‖q_{k(i)} − p_i‖²: how far predictions are from their group's label distribution.
    pub reliability: f64,
}

/// The decomposition. brier = uncertainty − resolution + reliability holds exactly when the
/// predicted distribution is the same for all points of a group (and approximately otherwise).
pub fn brier_decomposition(
    probs: &[Vec<f64>],
    labels: &[usize],
) -> Result<BrierDecomposition, MetricError> {
    let c = check_probs(probs, labels)?;
    let n = labels.len() as f64;
    let mut confusion = vec![vec![0.0; c]; c]; // [predicted][label]
    for (row, &l) in probs.iter().zip(labels) {
        confusion[argmax(row)][l] += 1.0;
    }
    let pbar: Vec<f64> = (0..c)
        .map(|l| (0..c).map(|k| confusion[k][l]).sum::<f64>() / n)
        .collect();
    let group: Vec<f64> = confusion.iter().map(|r| r.iter().sum::<f64>()).collect();
    let q: Vec<Vec<f64>> = confusion
        .iter()
        .zip(&group)
        .map(|(r, &g)| {
            r.iter()
                .map(|v| if g > 0.0 { v / g } else { 0.0 })
                .collect()
        })
        .collect();
    let uncertainty = 1.0 - pbar.iter().map(|p| p * p).sum::<f64>();
    let resolution = (0..c)
        .map(|k| group[k] / n * (0..c).map(|l| (q[k][l] - pbar[l]).powi(2)).sum::<f64>())
        .sum();
    let reliability = probs
        .iter()
        .map(|row| {
            let k = argmax(row);
            (0..c).map(|l| (q[k][l] - row[l]).powi(2)).sum::<f64>()
        })
        .sum::<f64>()
        / n;
    Ok(BrierDecomposition {
        uncertainty,
        resolution,
        reliability,
    })
}

/// How bins are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Binning {
    /// Equal-width bins on [0, 1]; bin b holds probabilities in [b/B, (b+1)/B), the last bin
    /// also holds 1.
    EqualWidth,
    /// Equal-mass bins: the sorted probabilities split into B groups of (nearly) equal size.
    EqualMass,
}

/// Which probabilities are calibrated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Classes {
    /// The top-label confidence max_c p_c, against correctness of the argmax (ECE).
    TopLabel,
    /// Every class probability p_c against 1{y = c}, binned per class and averaged over
    /// classes (static/adaptive calibration error).
    All,
}

/// The space of calibration errors of [001]'s general calibration error.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CalibrationConfig {
    /// Number of bins B ≥ 1.
    pub bins: usize,
    /// Bin placement.
    pub binning: Binning,
    /// Top label or all classes.
    pub classes: Classes,
    /// 1 for the weighted L1 error (ECE), 2 for the root of the weighted squared error (RMSCE).
    pub norm: u8,
    /// Only probabilities above this threshold count (0 keeps all; TACE uses e.g. 0.01).
    pub threshold: f64,
}

impl CalibrationConfig {
    /// Expected calibration error with `bins` equal-width bins (top label, L1).
    pub fn ece(bins: usize) -> Self {
        CalibrationConfig {
            bins,
            binning: Binning::EqualWidth,
            classes: Classes::TopLabel,
            norm: 1,
            threshold: 0.0,
        }
    }

    /// Root-mean-squared calibration error (top label, L2, equal width).
    pub fn rmsce(bins: usize) -> Self {
        CalibrationConfig {
            norm: 2,
            ..Self::ece(bins)
        }
    }

    /// Static calibration error (all classes, equal width, L1; Nixon et al. 2019).
    pub fn sce(bins: usize) -> Self {
        CalibrationConfig {
            classes: Classes::All,
            ..Self::ece(bins)
        }
    }

    /// Adaptive calibration error (all classes, equal mass, L1).
    pub fn ace(bins: usize) -> Self {
        CalibrationConfig {
            binning: Binning::EqualMass,
            ..Self::sce(bins)
        }
    }

    /// Thresholded adaptive calibration error: ACE over probabilities above `threshold`.
    pub fn tace(bins: usize, threshold: f64) -> Self {
        CalibrationConfig {
            threshold,
            ..Self::ace(bins)
        }
    }
}

/// One bin of a reliability diagram.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReliabilityBin {
    /// Lower edge of the bin (for equal-mass bins, the smallest probability in it).
    pub lower: f64,
    /// Upper edge.
    pub upper: f64,
    /// Number of probabilities in the bin.
    pub count: usize,
    /// Mean predicted probability (confidence); NaN for an empty bin.
    pub confidence: f64,
    /// Observed frequency (accuracy); NaN for an empty bin.
    pub accuracy: f64,
}

/// Bins `(probability, outcome)` pairs.
fn bin_pairs(pairs: &mut [(f64, f64)], bins: usize, binning: Binning) -> Vec<ReliabilityBin> {
    let mut out = Vec::with_capacity(bins);
    match binning {
        Binning::EqualWidth => {
            let mut sums = vec![(0usize, 0.0, 0.0); bins];
            for &(p, o) in pairs.iter() {
                let b = ((p * bins as f64).floor() as usize).min(bins - 1);
                sums[b].0 += 1;
                sums[b].1 += p;
                sums[b].2 += o;
            }
            for (b, (n, sp, so)) in sums.into_iter().enumerate() {
                out.push(ReliabilityBin {
                    lower: b as f64 / bins as f64,
                    upper: (b + 1) as f64 / bins as f64,
                    count: n,
                    confidence: if n > 0 { sp / n as f64 } else { f64::NAN },
                    accuracy: if n > 0 { so / n as f64 } else { f64::NAN },
                });
            }
        }
        Binning::EqualMass => {
            pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let n = pairs.len();
            for b in 0..bins {
                let (lo, hi) = (b * n / bins, (b + 1) * n / bins);
                let chunk = &pairs[lo..hi];
                let m = chunk.len();
                out.push(ReliabilityBin {
                    lower: chunk.first().map_or(f64::NAN, |x| x.0),
                    upper: chunk.last().map_or(f64::NAN, |x| x.0),
                    count: m,
                    confidence: if m > 0 {
                        chunk.iter().map(|x| x.0).sum::<f64>() / m as f64
                    } else {
                        f64::NAN
                    },
                    accuracy: if m > 0 {
                        chunk.iter().map(|x| x.1).sum::<f64>() / m as f64
                    } else {
                        f64::NAN
                    },
                });
            }
        }
    }
    out
}

fn weighted_error(bins: &[ReliabilityBin], total: usize, norm: u8) -> f64 {
    if total == 0 {
        return 0.0;
    }
    let s: f64 = bins
        .iter()
        .filter(|b| b.count > 0)
        .map(|b| {
            b.count as f64 / total as f64 * (b.accuracy - b.confidence).abs().powi(i32::from(norm))
        })
        .sum();
    if norm == 2 {
        s.sqrt()
    } else {
        s
    }
}

/// Reliability-diagram data for the top-label confidence (the bins behind the ECE).
pub fn reliability_diagram(
    probs: &[Vec<f64>],
    labels: &[usize],
    bins: usize,
    binning: Binning,
) -> Result<Vec<ReliabilityBin>, MetricError> {
    check_probs(probs, labels)?;
    check_bins(bins)?;
    let mut pairs: Vec<(f64, f64)> = top_label_pairs(probs, labels).collect();
    Ok(bin_pairs(&mut pairs, bins, binning))
}

/// Per example, the top-label confidence and whether the top label is correct (1 or 0).
fn top_label_pairs<'a>(
    probs: &'a [Vec<f64>],
    labels: &'a [usize],
) -> impl Iterator<Item = (f64, f64)> + 'a {
    probs.iter().zip(labels).map(|(row, &l)| {
        let k = argmax(row);
        (row[k], if k == l { 1.0 } else { 0.0 })
    })
}

fn check_bins(bins: usize) -> Result<(), MetricError> {
    if bins == 0 {
        return Err(MetricError::Invalid {
            what: "bins".into(),
            value: 0.0,
            valid: "at least 1 bin".into(),
        });
    }
    Ok(())
}

/// The general calibration error for `config`. Empty bins contribute nothing. With
/// [`Classes::All`], each class is binned on its own and the per-class errors are averaged.
pub fn calibration_error(
    probs: &[Vec<f64>],
    labels: &[usize],
    config: &CalibrationConfig,
) -> Result<f64, MetricError> {
    let c = check_probs(probs, labels)?;
    check_bins(config.bins)?;
    if config.norm != 1 && config.norm != 2 {
        return Err(MetricError::Invalid {
            what: "norm".into(),
            value: f64::from(config.norm),
            valid: "1 or 2".into(),
        });
    }
    match config.classes {
        Classes::TopLabel => {
            let mut pairs: Vec<(f64, f64)> = top_label_pairs(probs, labels)
                .filter(|(p, _)| *p > config.threshold || config.threshold == 0.0)
                .collect();
            let total = pairs.len();
            let bins = bin_pairs(&mut pairs, config.bins, config.binning);
            Ok(weighted_error(&bins, total, config.norm))
        }
        Classes::All => {
            let mut sum = 0.0;
            for class in 0..c {
                let mut pairs: Vec<(f64, f64)> = probs
                    .iter()
                    .zip(labels)
                    .map(|(row, &l)| (row[class], if l == class { 1.0 } else { 0.0 }))
                    .filter(|(p, _)| *p > config.threshold || config.threshold == 0.0)
                    .collect();
                let total = pairs.len();
                let bins = bin_pairs(&mut pairs, config.bins, config.binning);
                sum += weighted_error(&bins, total, config.norm);
            }
            Ok(sum / c as f64)
        }
    }
}

/// Shannon entropy (nats) of one distribution; 0 log 0 = 0.
pub fn entropy(p: &[f64]) -> f64 {
    -p.iter()
        .filter(|&&x| x > 0.0)
        .map(|x| x * x.ln())
        .sum::<f64>()
}

/// Ensemble uncertainty at one point from member (or MC-sample) distributions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EnsembleEntropy {
    /// H(mean_m p_m): total (predictive) entropy.
    pub total: f64,
    /// mean_m H(p_m): expected data entropy.
    pub expected: f64,
    /// total − expected: mutual information between label and model (model uncertainty).
    pub mutual_information: f64,
}

/// Entropies at one point; `members[m]` is member m's class distribution.
pub fn ensemble_entropy(members: &[Vec<f64>]) -> Result<EnsembleEntropy, MetricError> {
    non_empty("members", members.len())?;
    let c = members[0].len();
    for (m, row) in members.iter().enumerate() {
        same_len(&format!("members[{m}] and members[0]"), row.len(), c)?;
    }
    let mean: Vec<f64> = (0..c)
        .map(|j| members.iter().map(|r| r[j]).sum::<f64>() / members.len() as f64)
        .collect();
    let total = entropy(&mean);
    let expected = members.iter().map(|r| entropy(r)).sum::<f64>() / members.len() as f64;
    Ok(EnsembleEntropy {
        total,
        expected,
        mutual_information: total - expected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(v: &[[f64; 2]]) -> Vec<Vec<f64>> {
        v.iter().map(|r| r.to_vec()).collect()
    }

    #[test]
    fn accuracy_brier_nll_by_hand() {
        let p = rows(&[[0.9, 0.1], [0.3, 0.7], [0.6, 0.4]]);
        let y = [0, 1, 1];
        // Correct, correct, wrong.
        assert!((accuracy(&p, &y).unwrap() - 2.0 / 3.0).abs() < 1e-15);
        // Brier: (0.01 + 0.01) + (0.09 + 0.09) + (0.36 + 0.36) = 0.92 → /3.
        assert!((brier(&p, &y).unwrap() - 0.92 / 3.0).abs() < 1e-12);
        // NLL: −(ln 0.9 + ln 0.7 + ln 0.4)/3.
        assert!(
            (nll(&p, &y).unwrap() + (0.9f64.ln() + 0.7f64.ln() + 0.4f64.ln()) / 3.0).abs() < 1e-12
        );
        // p_y = 0 is an infinite NLL, not an error.
        assert_eq!(nll(&rows(&[[1.0, 0.0]]), &[1]).unwrap(), f64::INFINITY);
        // Bad inputs.
        assert!(brier(&rows(&[[0.5, 0.6]]), &[0])
            .unwrap_err()
            .to_string()
            .contains("sum"));
        assert!(brier(&rows(&[[0.5, 0.5]]), &[2])
            .unwrap_err()
            .to_string()
            .contains("labels[0]"));
        assert!(brier(&rows(&[[0.5, 0.5]]), &[0, 1]).is_err());
    }

    #[test]
    fn ece_and_friends_by_hand() {
        // Top-label confidences 0.9 (right), 0.7 (right), 0.6 (wrong), 0.95 (wrong), 5 bins of
        // width 0.2: [0.6, 0.8) holds 0.7, 0.6 → conf 0.65, acc 0.5; [0.8, 1] holds 0.9, 0.95
        // → conf 0.925, acc 0.5. ECE = 0.5·0.15 + 0.5·0.425 = 0.2875.
        let p = rows(&[[0.9, 0.1], [0.3, 0.7], [0.6, 0.4], [0.05, 0.95]]);
        let y = [0, 1, 1, 0];
        let ece = calibration_error(&p, &y, &CalibrationConfig::ece(5)).unwrap();
        assert!((ece - 0.2875).abs() < 1e-12, "{ece}");
        // RMSCE = sqrt(0.5·0.15² + 0.5·0.425²).
        let rms = calibration_error(&p, &y, &CalibrationConfig::rmsce(5)).unwrap();
        assert!((rms - (0.5f64 * 0.0225 + 0.5 * 0.180_625).sqrt()).abs() < 1e-12);
        // Reliability bins: three empty ones are NaN, counts add up.
        let d = reliability_diagram(&p, &y, 5, Binning::EqualWidth).unwrap();
        assert_eq!(d.iter().map(|b| b.count).sum::<usize>(), 4);
        assert!(d[0].confidence.is_nan());
        // SCE with 1 bin: class 0 probs 0.9, 0.3, 0.6, 0.05 (mean 0.4625) vs labels 1,0,0,1
        // (0.5): |0.0375|; class 1 symmetric: |0.5375 − 0.5| = 0.0375. Mean 0.0375.
        let sce = calibration_error(&p, &y, &CalibrationConfig::sce(1)).unwrap();
        assert!((sce - 0.0375).abs() < 1e-12);
        // ACE with 2 equal-mass bins, class 0: sorted (0.05,1),(0.3,0) | (0.6,0),(0.9,1):
        // |0.5 − 0.175| = 0.325, |0.5 − 0.75| = 0.25 → 0.2875; class 1: (0.1,0),(0.4,1) |
        // (0.7,1),(0.95,0): |0.5 − 0.25| = 0.25, |0.5 − 0.825| = 0.325 → 0.2875. ACE = 0.2875.
        let ace = calibration_error(&p, &y, &CalibrationConfig::ace(2)).unwrap();
        assert!((ace - 0.2875).abs() < 1e-12, "{ace}");
        // TACE with threshold 0.2 drops 0.05 and 0.1: class 0 keeps 0.3(0), 0.6(0), 0.9(1):
        // bins [0.3] | [0.6, 0.9] → |0 − 0.3|·1/3 + |0.5 − 0.75|·2/3 = 0.8/3; class 1 keeps
        // 0.4(1), 0.7(1), 0.95(0): [0.4] | [0.7, 0.95] → |1 − 0.4|·1/3 + |0.5 − 0.825|·2/3
        // = 1.25/3. TACE = (0.8/3 + 1.25/3)/2.
        let tace = calibration_error(&p, &y, &CalibrationConfig::tace(2, 0.2)).unwrap();
        assert!(
            (tace - (0.8 / 3.0 + 1.25 / 3.0) / 2.0).abs() < 1e-12,
            "{tace}"
        );
        // A perfectly calibrated constant forecast has zero error.
        let q = rows(&[[0.5, 0.5], [0.5, 0.5]]);
        assert_eq!(
            calibration_error(&q, &[0, 1], &CalibrationConfig::sce(10)).unwrap(),
            0.0
        );
        // Probabilities of exactly 0 and 1 fall into the first and last bins.
        let e = rows(&[[1.0, 0.0], [0.0, 1.0]]);
        let d = reliability_diagram(&e, &[0, 0], 10, Binning::EqualWidth).unwrap();
        assert_eq!(d[9].count, 2);
        assert!(calibration_error(&p, &y, &CalibrationConfig::ece(0)).is_err());
    }

    #[test]
    fn brier_decomposition_is_exact_for_constant_groups() {
        // Group "predicts 0" always says (0.8, 0.2) and sees labels 0,0,0,1; group "predicts 1"
        // says (0.3, 0.7) and sees 1,1,0,1.
        let p = rows(&[
            [0.8, 0.2],
            [0.8, 0.2],
            [0.8, 0.2],
            [0.8, 0.2],
            [0.3, 0.7],
            [0.3, 0.7],
            [0.3, 0.7],
            [0.3, 0.7],
        ]);
        let y = [0, 0, 0, 1, 1, 1, 0, 1];
        let d = brier_decomposition(&p, &y).unwrap();
        // p̄ = (0.5, 0.5): uncertainty = 0.5; q_0 = (0.75, 0.25), q_1 = (0.25, 0.75):
        // resolution = 0.5·0.125 + 0.5·0.125 = 0.125; reliability = 0.5·0.005 + 0.5·0.005.
        assert!((d.uncertainty - 0.5).abs() < 1e-12);
        assert!((d.resolution - 0.125).abs() < 1e-12);
        assert!((d.reliability - 0.005).abs() < 1e-12);
        let b = brier(&p, &y).unwrap();
        assert!((b - (d.uncertainty - d.resolution + d.reliability)).abs() < 1e-12);
    }

    #[test]
    fn entropies_by_hand() {
        assert!((entropy(&[0.5, 0.5]) - 2f64.ln()).abs() < 1e-15);
        assert_eq!(entropy(&[1.0, 0.0]), 0.0);
        // Two confident members that disagree: total ln 2, expected 0, MI ln 2.
        let e = ensemble_entropy(&[vec![1.0, 0.0], vec![0.0, 1.0]]).unwrap();
        assert!((e.total - 2f64.ln()).abs() < 1e-15 && e.expected == 0.0);
        assert!((e.mutual_information - 2f64.ln()).abs() < 1e-15);
        // Agreeing members: MI 0.
        let e = ensemble_entropy(&[vec![0.3, 0.7], vec![0.3, 0.7]]).unwrap();
        assert!(e.mutual_information.abs() < 1e-15);
    }
}
