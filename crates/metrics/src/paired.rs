//! Paired comparisons of two methods over repetitions (issue 40 §7): repetition r of both
//! methods saw the same data, so the question "is A better than B here, or is that noise?" is
//! answered by the differences d_r = a_r − b_r, not by the two means' separate error bars.
//!
//! - The paired t interval and test: d̄ ± t_{0.975, K−1}·s_d/√K, p = 2·P(T_{K−1} > |d̄|/(s_d/√K))
//!   (scipy's `ttest_rel`).
//! - The paired bootstrap: resample the K repetitions with replacement (the pairs stay
//!   together), and count the resamples whose mean difference is below 0 (ties count ½):
//!   P(A's value < B's).
//! - The exact sign test, for pairs in which a value is ±∞ (an infinite KL or NLL is a
//!   result that a mean-based test cannot take; [`paired_signs`]).
//! - Holm's step-down correction of a family of p-values.
//! - The minimum detectable difference of a two-sided paired t-test at level α and power
//!   1 − β: (t_{1−α/2, K−1} + t_{1−β, K−1})·s_d/√K, the usual approximation to the
//!   noncentral-t solution (it drops the noncentrality's effect on the tail; within a few
//!   percent of the exact value for K ≥ 10).

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::error::{check_finite, same_len, MetricError};
use crate::rng::SplitMix;

/// The paired comparison of A and B over K repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    /// Repetitions paired.
    pub k: usize,
    /// Mean over repetitions of a − b.
    pub diff: f64,
    /// Its standard error, s_d/√K.
    pub stderr: f64,
    /// The 95% paired t interval of the mean difference.
    pub t_low: f64,
    /// Upper end of that interval.
    pub t_high: f64,
    /// Two-sided p-value of the paired t-test of "mean difference 0".
    pub p_value: f64,
    /// The share of paired-bootstrap resamples whose mean difference is below 0 (ties ½): a
    /// description of the K values, not a calibrated probability (too extreme below K ≈ 20).
    pub boot_share_a_lower: f64,
    /// The smallest true mean difference the paired t-test at an unadjusted 5% detects with
    /// 80% power.
    pub mdd_unadjusted: f64,
}

/// The significance level of the interval, the tests and the detectable difference.
pub const ALPHA: f64 = 0.05;
/// The power at which the minimum detectable difference is computed.
pub const POWER: f64 = 0.8;

/// Compares `a` and `b` (one value per repetition, paired by position; at least two, finite)
/// with `resamples` bootstrap resamples drawn from `seed`.
pub fn paired(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Result<Paired, MetricError> {
    same_len("a and b", a.len(), b.len())?;
    check_finite("a", a)?;
    check_finite("b", b)?;
    let k = a.len();
    if k < 2 {
        return Err(MetricError::Invalid {
            what: "paired repetitions".into(),
            value: k as f64,
            valid: "a paired comparison needs at least 2 repetitions of both methods".into(),
        });
    }
    if resamples == 0 {
        return Err(MetricError::Invalid {
            what: "bootstrap resamples".into(),
            value: 0.0,
            valid: "at least 1 (10 000 by default)".into(),
        });
    }
    let d: Vec<f64> = a.iter().zip(b).map(|(a, b)| a - b).collect();
    let kf = k as f64;
    let diff = d.iter().sum::<f64>() / kf;
    let sd = (d.iter().map(|x| (x - diff).powi(2)).sum::<f64>() / (kf - 1.0)).sqrt();
    let stderr = sd / kf.sqrt();
    let t = StudentsT::new(0.0, 1.0, kf - 1.0).expect("K − 1 ≥ 1 degrees of freedom");
    let half = t.inverse_cdf(1.0 - ALPHA / 2.0);
    let p_value = if stderr > 0.0 {
        2.0 * t.sf((diff / stderr).abs())
    } else if diff == 0.0 {
        // Every difference 0: nothing to reject.
        1.0
    } else {
        // Every difference the same nonzero number: no noise at all.
        0.0
    };
    Ok(Paired {
        k,
        diff,
        stderr,
        t_low: diff - half * stderr,
        t_high: diff + half * stderr,
        p_value,
        boot_share_a_lower: bootstrap_below_zero(&d, resamples, seed),
        mdd_unadjusted: (half + t.inverse_cdf(POWER)) * stderr,
    })
}

/// The exact two-sided sign test of "a_r < b_r and a_r > b_r are equally likely", for pairs
/// in which some value is ±∞ (an infinite KL or NLL: a result, which no mean-based test can
/// take). Pairs with a_r = b_r (both +∞ too) are ties and left out; with n the pairs left and
/// s those with a_r < b_r, p = min(1, 2·P(X ≤ min(s, n − s))) for X ~ Binomial(n, ½) (scipy's
/// `binomtest(s, n).pvalue`), 1 when n = 0. `diff` is the mean of a − b (±∞, or NaN when
/// +∞ − +∞ occurs); the interval, the standard error, the bootstrap share and the detectable
/// difference are undefined (NaN). NaN values are not allowed (leave such pairs out first).
pub fn paired_signs(a: &[f64], b: &[f64]) -> Result<Paired, MetricError> {
    use statrs::distribution::{Binomial, DiscreteCDF};
    same_len("a and b", a.len(), b.len())?;
    if let Some(x) = a.iter().chain(b).find(|x| x.is_nan()) {
        return Err(MetricError::Invalid {
            what: "paired value".into(),
            value: *x,
            valid: "a number or ±∞ (leave out pairs without a value)".into(),
        });
    }
    let lower = a.iter().zip(b).filter(|(x, y)| x < y).count() as u64;
    let higher = a.iter().zip(b).filter(|(x, y)| x > y).count() as u64;
    let n = lower + higher;
    let p_value = if n == 0 {
        1.0
    } else {
        let bin = Binomial::new(0.5, n).expect("p = ½ and n ≥ 1");
        (2.0 * bin.cdf(lower.min(higher))).min(1.0)
    };
    let nan = f64::NAN;
    Ok(Paired {
        k: a.len(),
        diff: a.iter().zip(b).map(|(x, y)| x - y).sum::<f64>() / a.len() as f64,
        stderr: nan,
        t_low: nan,
        t_high: nan,
        p_value,
        boot_share_a_lower: nan,
        mdd_unadjusted: nan,
    })
}

/// The fraction of `resamples` paired-bootstrap resamples of `d` whose mean is below 0, ties
/// counting ½ (so the reversed pair's value is exactly 1 minus this).
fn bootstrap_below_zero(d: &[f64], resamples: usize, seed: u64) -> f64 {
    let mut rng = SplitMix(seed);
    let k = d.len();
    let mut below = 0.0;
    for _ in 0..resamples {
        let sum: f64 = (0..k).map(|_| d[rng.below(k)]).sum();
        if sum < 0.0 {
            below += 1.0;
        } else if sum == 0.0 {
            below += 0.5;
        }
    }
    below / resamples as f64
}

/// Holm's step-down adjusted p-values (Holm 1979), in the input's order: with the m p-values
/// sorted ascending, p̃_(i) = max_{j ≤ i} min(1, (m − j + 1)·p_(j)). A hypothesis is rejected
/// at family-wise level α when its adjusted value is ≤ α. NaN stays NaN and is not counted.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..p.len()).filter(|&i| !p[i].is_nan()).collect();
    order.sort_by(|&i, &j| p[i].total_cmp(&p[j]));
    let m = order.len();
    let mut out = vec![f64::NAN; p.len()];
    let mut running = 0.0_f64;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p[i]).min(1.0));
        out[i] = running;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fixed inputs, and what scipy 1.17 and numpy give for them (the Python test
    /// `test_compare.py` repeats this against live scipy through the binding).
    const A: [f64; 10] = [0.51, 0.62, 0.48, 0.70, 0.55, 0.43, 0.66, 0.59, 0.47, 0.52];
    const B: [f64; 10] = [0.58, 0.61, 0.55, 0.78, 0.60, 0.49, 0.65, 0.70, 0.50, 0.60];

    #[test]
    fn paired_t_matches_scipy() {
        let p = paired(&A, &B, 10_000, 1).unwrap();
        assert_eq!(p.k, 10);
        assert!((p.diff - (-0.053)).abs() < 1e-12, "{}", p.diff);
        // scipy.stats.ttest_rel(A, B): statistic −4.278586189708712, p 0.002054219252678141.
        assert!((p.diff / p.stderr - (-4.278586189708712)).abs() < 1e-9);
        assert!(
            (p.p_value - 0.002054219252678141).abs() < 1e-9,
            "{}",
            p.p_value
        );
        // scipy: t.ppf(0.975, 9) = 2.262157, so the interval is diff ± 2.262157·stderr.
        assert!((p.t_high - p.diff - 2.262157 * p.stderr).abs() < 1e-6);
        assert!((p.diff - p.t_low - 2.262157 * p.stderr).abs() < 1e-6);
        // MDD: (t.ppf(0.975, 9) + t.ppf(0.8, 9))·stderr = (2.262157 + 0.883404)·stderr.
        assert!((p.mdd_unadjusted - 3.145561 * p.stderr).abs() < 1e-6);
    }

    /// B2: a difference the data do not settle (scipy: t = −1.35273, p = 0.20915).
    const B2: [f64; 10] = [0.55, 0.58, 0.52, 0.69, 0.60, 0.41, 0.70, 0.57, 0.50, 0.55];

    #[test]
    fn bootstrap_matches_numpy() {
        // numpy, 2·10⁶ resamples: `d[rng.integers(0, 10, (2_000_000, 10))].mean(1)`, P(< 0)
        // + ½P(= 0) = 0.912199 (its own Monte Carlo sd 0.0002; 0.36% of resamples tie at 0).
        // Ours with 10⁴ resamples has Monte Carlo sd √(0.912·0.088/10⁴) = 0.0028; ties are
        // decided on sums here and on means there, which can round a tie to either side:
        // at most ½·0.0036 = 0.0018. 4 sd + 0.0018 = 0.013.
        let p = paired(&A, &B2, 10_000, 7).unwrap();
        assert!(
            (p.boot_share_a_lower - 0.912199).abs() < 0.013,
            "{}",
            p.boot_share_a_lower
        );
        assert!(
            (p.p_value - 0.20914542219471283).abs() < 1e-9,
            "{}",
            p.p_value
        );
        // The reversed pair, same seed: exactly 1 − P (ties count ½).
        let q = paired(&B2, &A, 10_000, 7).unwrap();
        assert!((p.boot_share_a_lower + q.boot_share_a_lower - 1.0).abs() < 1e-12);
        // Same seed, same answer; the reversed pair's difference and interval mirror.
        assert_eq!(p, paired(&A, &B2, 10_000, 7).unwrap());
        assert!((q.diff + p.diff).abs() < 1e-15 && (q.t_low + p.t_high).abs() < 1e-15);
    }

    #[test]
    fn sign_test_takes_infinities_and_matches_scipy() {
        // a lower in 8 pairs, higher in 1 (b = +∞ twice, a = +∞ once), one tie (both +∞):
        // scipy.stats.binomtest(8, 9).pvalue = 0.0390625 (= 2·10/512).
        let inf = f64::INFINITY;
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, inf, inf];
        let b = [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, inf, inf, 1.0, inf];
        let p = paired_signs(&a, &b).unwrap();
        assert!((p.p_value - 0.0390625).abs() < 1e-12, "{}", p.p_value);
        assert_eq!(p.k, 10);
        // +∞ − +∞ in the last pair: the mean difference is undefined.
        assert!(p.diff.is_nan() && p.stderr.is_nan());
        // Without that pair: a − b has one +∞ and some −∞: still NaN; a clean case instead.
        let q = paired_signs(&[1.0, 2.0, inf], &[2.0, 3.0, 4.0]).unwrap();
        assert_eq!(q.diff, inf);
        // binomtest(2, 3).pvalue = 1.0.
        assert!((q.p_value - 1.0).abs() < 1e-12);
        // Mirror: the reversed pair has the same p.
        assert_eq!(paired_signs(&b, &a).unwrap().p_value, p.p_value);
        assert_eq!(paired_signs(&[inf], &[inf]).unwrap().p_value, 1.0);
        assert!(paired_signs(&[f64::NAN], &[1.0]).is_err());
    }

    #[test]
    fn degenerate_and_bad_inputs() {
        // Every difference 0: p = 1, P = ½.
        let p = paired(&A, &A, 100, 1).unwrap();
        assert_eq!((p.p_value, p.boot_share_a_lower, p.stderr), (1.0, 0.5, 0.0));
        // A constant nonzero difference: p = 0, P = 1.
        let p = paired(&[1.0, 2.0, 3.0], &[1.5, 2.5, 3.5], 100, 1).unwrap();
        assert_eq!((p.p_value, p.boot_share_a_lower), (0.0, 1.0));
        let e = paired(&A[..1], &B[..1], 100, 1).unwrap_err().to_string();
        assert!(e.contains("at least 2 repetitions"), "{e}");
        assert!(paired(&A, &B[..9], 100, 1).is_err());
        assert!(paired(&[1.0, f64::NAN], &[1.0, 2.0], 100, 1).is_err());
        assert!(paired(&A, &B, 0, 1).is_err());
    }

    #[test]
    fn holm_by_hand() {
        // m = 4: sorted 0.01, 0.02, 0.03, 0.5 → 0.04, max(0.04, 0.06), max(0.06, 0.06), 0.5.
        let h = holm(&[0.03, 0.01, 0.5, 0.02]);
        let want = [0.06, 0.04, 0.5, 0.06];
        for (h, w) in h.iter().zip(want) {
            assert!((h - w).abs() < 1e-15, "{h} vs {w}");
        }
        // Capped at 1, NaN left out of m.
        let h = holm(&[0.6, f64::NAN, 0.4]);
        assert_eq!(h[0], 1.0_f64.min(0.8_f64.max(0.6)));
        assert!(h[1].is_nan());
        assert!((h[2] - 0.8).abs() < 1e-15);
    }
}
