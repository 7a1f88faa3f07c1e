//! Ranking metrics: ROC AUC and referral (rejection) curves ([003]).

use serde::{Deserialize, Serialize};

use crate::error::{check_finite, non_empty, same_len, MetricError};

/// Area under the ROC curve of `scores` for binary `labels` (true = positive): the
/// probability that a random positive scores higher than a random negative, ties counting ½
/// (Mann–Whitney U with average ranks).
pub fn roc_auc(scores: &[f64], labels: &[bool]) -> Result<f64, MetricError> {
    same_len("scores and labels", scores.len(), labels.len())?;
    non_empty("scores", scores.len())?;
    check_finite("scores", scores)?;
    let pos = labels.iter().filter(|&&l| l).count();
    let neg = labels.len() - pos;
    if pos == 0 || neg == 0 {
        return Err(MetricError::Invalid {
            what: "positive labels".into(),
            value: pos as f64,
            valid: format!(
                "ROC AUC needs both classes among the {} points",
                labels.len()
            ),
        });
    }
    // Every point a member: the rank-sum statistic with average ranks over ties.
    Ok(Ranked::new(scores, labels).auc(&vec![true; scores.len()]))
}

/// One point of a referral curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReferralPoint {
    /// Fraction of points retained (the most certain ones).
    pub retained: f64,
    /// Number of points retained.
    pub count: usize,
    /// Accuracy on the retained points.
    pub accuracy: f64,
    /// ROC AUC on the retained points (NaN when they hold only one class).
    pub auc: f64,
    /// Expected accuracy when the same number of points is retained at random (equals the
    /// accuracy on all points: a random subset's accuracy is unbiased).
    pub random_accuracy: f64,
    /// Mean AUC over random subsets of the same size (Monte Carlo, fixed seed).
    pub random_auc: f64,
}

/// Referral curve of [003]: rank points by `uncertainty` (e.g. predictive entropy; lower is
/// more certain), keep the most certain fraction q for every q in `fractions`, and report
/// accuracy and AUC on the kept points. `correct[i]` says whether point i was classified
/// correctly; `scores`/`labels` feed the AUC (probability of the positive class and the true
/// binary label). The random baseline's AUC averages `random_draws` random subsets drawn
/// with `seed`.
#[allow(clippy::too_many_arguments)]
pub fn referral_curve(
    uncertainty: &[f64],
    correct: &[bool],
    scores: &[f64],
    labels: &[bool],
    fractions: &[f64],
    random_draws: usize,
    seed: u64,
) -> Result<Vec<ReferralPoint>, MetricError> {
    let n = uncertainty.len();
    same_len("uncertainty and correct", n, correct.len())?;
    same_len("uncertainty and scores", n, scores.len())?;
    same_len("uncertainty and labels", n, labels.len())?;
    non_empty("uncertainty", n)?;
    check_finite("uncertainty", uncertainty)?;
    let mut order: Vec<usize> = (0..n).collect();
    // Stable sort: ties keep their input order, so the curve is deterministic.
    order.sort_by(|&a, &b| uncertainty[a].total_cmp(&uncertainty[b]));
    let overall = correct.iter().filter(|&&c| c).count() as f64 / n as f64;
    // The AUC of a subset (NaN where it holds one class or a non-finite score): the scores
    // are ranked once, and each of the many subsets is a pass over that order.
    let ranked = Ranked::new(scores, labels);
    let mut member = vec![false; n];
    let mut auc_of = |idx: &[usize]| {
        member.fill(false);
        for &i in idx {
            member[ranked.rank_of[i]] = true;
        }
        ranked.auc(&member)
    };
    let mut rng = crate::rng::SplitMix(seed);
    let mut out = Vec::with_capacity(fractions.len());
    for &q in fractions {
        if !(q > 0.0 && q <= 1.0) {
            return Err(MetricError::Invalid {
                what: "retained fraction".into(),
                value: q,
                valid: "fractions in (0, 1]".into(),
            });
        }
        let k = ((q * n as f64).round() as usize).clamp(1, n);
        let kept = &order[..k];
        let accuracy = kept.iter().filter(|&&i| correct[i]).count() as f64 / k as f64;
        let mut random_aucs = Vec::new();
        let mut pool: Vec<usize> = (0..n).collect();
        for _ in 0..random_draws {
            // Partial Fisher–Yates: the first k entries are a uniform random subset.
            for i in 0..k {
                let j = i + (rng.next() % (n - i) as u64) as usize;
                pool.swap(i, j);
            }
            let a = auc_of(&pool[..k]);
            if a.is_finite() {
                random_aucs.push(a);
            }
        }
        out.push(ReferralPoint {
            retained: q,
            count: k,
            accuracy,
            auc: auc_of(kept),
            random_accuracy: overall,
            random_auc: if random_aucs.is_empty() {
                f64::NAN
            } else {
                random_aucs.iter().sum::<f64>() / random_aucs.len() as f64
            },
        });
    }
    Ok(out)
}

/// Scores ranked once (a stable sort by `total_cmp`), for the AUC of many subsets of the same
/// points in O(n) each ([`roc_auc`] is the subset of all points). Within a run of equal
/// scores the subset's members share the average rank r + (c + 1)/2 (r members below, c in
/// the run); the rank sum adds it once per positive, run by run. The ranks are small
/// half-integers, exact in f64, so a subset's AUC is the same number whether it is ranked on
/// its own or marked in a larger ranking.
struct Ranked {
    /// Per point, its position in the ranking.
    rank_of: Vec<usize>,
    /// The ranking's runs of equal scores, as ranges of positions.
    runs: Vec<std::ops::Range<usize>>,
    /// Per position, the label of the point there.
    label: Vec<bool>,
    /// The positions of non-finite scores.
    non_finite: Vec<usize>,
}

impl Ranked {
    fn new(scores: &[f64], labels: &[bool]) -> Ranked {
        let n = scores.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
        let mut rank_of = vec![0; n];
        for (r, &i) in order.iter().enumerate() {
            rank_of[i] = r;
        }
        let mut runs = Vec::new();
        let mut i = 0;
        while i < n {
            let mut j = i;
            while j + 1 < n && scores[order[j + 1]] == scores[order[i]] {
                j += 1;
            }
            runs.push(i..j + 1);
            i = j + 1;
        }
        Ranked {
            rank_of,
            runs,
            label: order.iter().map(|&i| labels[i]).collect(),
            non_finite: (0..n).filter(|&r| !scores[order[r]].is_finite()).collect(),
        }
    }

    /// The AUC of the points at the positions with `member[r]` (a point i is at position
    /// `rank_of[i]`); NaN where they hold one class only or a non-finite score (where
    /// [`roc_auc`] errs).
    fn auc(&self, member: &[bool]) -> f64 {
        if self.non_finite.iter().any(|&r| member[r]) {
            return f64::NAN;
        }
        let (mut below, mut pos) = (0usize, 0usize);
        let mut rank_sum_pos = 0.0;
        for run in &self.runs {
            let (m, l) = (&member[run.clone()], &self.label[run.clone()]);
            let c: usize = m.iter().map(|&v| usize::from(v)).sum();
            let c_pos: usize = m.iter().zip(l).map(|(&v, &y)| usize::from(v & y)).sum();
            if c_pos > 0 {
                let avg = below as f64 + (c as f64 + 1.0) / 2.0;
                for _ in 0..c_pos {
                    rank_sum_pos += avg;
                }
            }
            (below, pos) = (below + c, pos + c_pos);
        }
        if pos == 0 || pos == below {
            return f64::NAN;
        }
        let (p, n) = (pos as f64, (below - pos) as f64);
        (rank_sum_pos - p * (p + 1.0) / 2.0) / (p * n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_by_hand() {
        // Positives score 0.8, 0.4; negatives 0.5, 0.1. Pairs (pos > neg): (0.8>0.5), (0.8>0.1),
        // (0.4>0.1) = 3 of 4 → 0.75.
        let auc = roc_auc(&[0.8, 0.5, 0.4, 0.1], &[true, false, true, false]).unwrap();
        assert!((auc - 0.75).abs() < 1e-15);
        // All tied: 0.5. Perfect: 1.
        assert_eq!(roc_auc(&[0.3, 0.3], &[true, false]).unwrap(), 0.5);
        assert_eq!(roc_auc(&[0.9, 0.1], &[true, false]).unwrap(), 1.0);
        assert!(roc_auc(&[0.9, 0.1], &[true, true]).is_err());
    }

    #[test]
    fn ranked_subsets_give_roc_aucs_bits() {
        // 300 points with scores on a coarse grid (many ties, a −0.0 among the 0.0s) and
        // random labels; 400 random subsets of every size: the subset AUC from the shared
        // ranking equals `roc_auc` of the subset itself exactly, NaN where that errs.
        let mut rng = crate::rng::SplitMix(3);
        let n = 300;
        let mut scores: Vec<f64> = (0..n).map(|_| (rng.next() % 17) as f64 / 16.0).collect();
        scores[5] = -0.0;
        scores[6] = 0.0;
        let labels: Vec<bool> = (0..n).map(|_| rng.next().is_multiple_of(3)).collect();
        let ranked = Ranked::new(&scores, &labels);
        for draw in 0..400 {
            let k = 1 + draw % n;
            let mut pool: Vec<usize> = (0..n).collect();
            for i in 0..k {
                let j = i + (rng.next() % (n - i) as u64) as usize;
                pool.swap(i, j);
            }
            let mut member = vec![false; n];
            let (s, l): (Vec<f64>, Vec<bool>) = pool[..k]
                .iter()
                .map(|&i| {
                    member[ranked.rank_of[i]] = true;
                    (scores[i], labels[i])
                })
                .unzip();
            let want = roc_auc(&s, &l).unwrap_or(f64::NAN);
            let got = ranked.auc(&member);
            assert!(
                want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()),
                "k = {k}: {want} vs {got}"
            );
        }
        let mut bad = scores.clone();
        bad[0] = f64::NAN;
        assert!(Ranked::new(&bad, &labels).auc(&vec![true; n]).is_nan());
    }

    #[test]
    fn referral_keeps_the_most_certain() {
        // Uncertainties 0.1..0.4; the two most certain points are right, the others wrong.
        let unc = [0.3, 0.1, 0.4, 0.2];
        let correct = [false, true, false, true];
        let scores = [0.6, 0.9, 0.4, 0.2];
        let labels = [false, true, true, false];
        let curve = referral_curve(&unc, &correct, &scores, &labels, &[0.5, 1.0], 200, 7).unwrap();
        assert_eq!(curve[0].count, 2);
        assert_eq!(curve[0].accuracy, 1.0); // points 1 and 3
        assert_eq!(curve[0].auc, 1.0); // 0.9 (pos) > 0.2 (neg)
        assert_eq!(curve[1].accuracy, 0.5);
        assert_eq!(curve[0].random_accuracy, 0.5);
        // Random subsets of 2 from 4: AUC is defined for the 4 mixed pairs of the 6 and equals
        // 1 for (1,0),(1,3),(2,3) and 0 for (2,0): mean 0.75. About 133 of 200 draws are mixed,
        // so the average has sd sqrt(0.75·0.25/133) = 0.0375; allow 4 sd = 0.15.
        assert!(
            (curve[0].random_auc - 0.75).abs() < 0.15,
            "{}",
            curve[0].random_auc
        );
        // Full retention equals the plain AUC: pos 0.9, 0.4; neg 0.6, 0.2 → 3/4.
        assert_eq!(curve[1].auc, 0.75);
        assert!(referral_curve(&unc, &correct, &scores, &labels, &[0.0], 1, 0).is_err());
    }
}
