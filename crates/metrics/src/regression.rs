//! Scoring rules and calibration for regression predictions given as a Gaussian (mean, std)
//! or as samples. All functions return averages over points; lower is better for scores.

use std::f64::consts::PI;

use serde::{Deserialize, Serialize};
use statrs::distribution::{Continuous, ContinuousCDF, Normal, StudentsT};
use statrs::function::beta::ln_beta;

use crate::error::{check_finite, check_level, check_std, non_empty, same_len, MetricError};

fn check_gaussian(mean: &[f64], std: &[f64], y: &[f64]) -> Result<(), MetricError> {
    same_len("mean and std", mean.len(), std.len())?;
    same_len("mean and y", mean.len(), y.len())?;
    non_empty("mean", mean.len())?;
    check_finite("mean", mean)?;
    check_finite("y", y)?;
    check_std("std", std)
}

/// Root mean squared error.
pub fn rmse(mean: &[f64], y: &[f64]) -> Result<f64, MetricError> {
    same_len("mean and y", mean.len(), y.len())?;
    non_empty("mean", mean.len())?;
    Ok((mean
        .iter()
        .zip(y)
        .map(|(m, t)| (m - t).powi(2))
        .sum::<f64>()
        / mean.len() as f64)
        .sqrt())
}

/// Mean absolute error.
pub fn mae(mean: &[f64], y: &[f64]) -> Result<f64, MetricError> {
    same_len("mean and y", mean.len(), y.len())?;
    non_empty("mean", mean.len())?;
    Ok(mean.iter().zip(y).map(|(m, t)| (m - t).abs()).sum::<f64>() / mean.len() as f64)
}

/// Gaussian negative log-likelihood, ½ log(2πσ²) + (y − μ)²/(2σ²), averaged.
/// A zero std gives +∞ (the limit) unless y = μ exactly, where the density is a point mass
/// and the NLL is −∞; both are returned as such, not as errors.
pub fn gaussian_nll(mean: &[f64], std: &[f64], y: &[f64]) -> Result<f64, MetricError> {
    check_gaussian(mean, std, y)?;
    let total: f64 = mean
        .iter()
        .zip(std)
        .zip(y)
        .map(|((m, s), t)| {
            if *s == 0.0 {
                if m == t {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }
            } else {
                0.5 * (2.0 * PI * s * s).ln() + (t - m).powi(2) / (2.0 * s * s)
            }
        })
        .sum();
    Ok(total / mean.len() as f64)
}

/// CRPS of a Gaussian in closed form (Gneiting et al. 2005):
/// σ [z(2Φ(z) − 1) + 2φ(z) − 1/√π], z = (y − μ)/σ; σ = 0 gives |y − μ|. Averaged.
pub fn crps_gaussian(mean: &[f64], std: &[f64], y: &[f64]) -> Result<f64, MetricError> {
    check_gaussian(mean, std, y)?;
    let normal = Normal::standard();
    let total: f64 = mean
        .iter()
        .zip(std)
        .zip(y)
        .map(|((m, s), t)| {
            if *s == 0.0 {
                (t - m).abs()
            } else {
                let z = (t - m) / s;
                s * (z * (2.0 * normal.cdf(z) - 1.0) + 2.0 * normal.pdf(z) - 1.0 / PI.sqrt())
            }
        })
        .sum();
    Ok(total / mean.len() as f64)
}

/// CRPS of a location-scale Student t with ν > 1 degrees of freedom in closed form (Jordan,
/// Krüger & Lerch 2019, `crps_t` of the R package scoringRules): with z = (y − μ)/s,
/// s·[z(2F_ν(z) − 1) + 2f_ν(z)(ν + z²)/(ν − 1) − 2√ν·B(½, ν − ½)/((ν − 1)·B(½, ν/2)²)];
/// s = 0 gives |y − μ|. Averaged over points.
pub fn crps_student_t(
    mean: &[f64],
    scale: &[f64],
    dof: f64,
    y: &[f64],
) -> Result<f64, MetricError> {
    check_gaussian(mean, scale, y)?;
    if !(dof.is_finite() && dof > 1.0) {
        return Err(MetricError::Invalid {
            what: "degrees of freedom".into(),
            value: dof,
            valid: "ν > 1 (the CRPS needs a finite mean)".into(),
        });
    }
    let t = StudentsT::new(0.0, 1.0, dof).expect("ν > 1");
    let b1 = ln_beta(0.5, dof - 0.5);
    let b2 = ln_beta(0.5, dof / 2.0);
    let last = 2.0 * dof.sqrt() / (dof - 1.0) * (b1 - 2.0 * b2).exp();
    let total: f64 = mean
        .iter()
        .zip(scale)
        .zip(y)
        .map(|((m, s), obs)| {
            if *s == 0.0 {
                (obs - m).abs()
            } else {
                let z = (obs - m) / s;
                s * (z * (2.0 * t.cdf(z) - 1.0) + 2.0 * t.pdf(z) * (dof + z * z) / (dof - 1.0)
                    - last)
            }
        })
        .sum();
    Ok(total / mean.len() as f64)
}

/// The p-quantile of a sample (Hyndman & Fan's type 7, numpy's default: linear interpolation
/// between order statistics at position p·(n − 1)). `sorted` must be sorted ascending.
pub fn quantile_sorted(sorted: &[f64], p: f64) -> f64 {
    assert!(!sorted.is_empty() && (0.0..=1.0).contains(&p));
    let h = p * (sorted.len() - 1) as f64;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// [004]'s noise estimate from a validation set: σ̂ = sqrt(mean_j max((y_j − f̂_j)² − σ̂_f,j², 0))
/// for validation targets `y`, a method's predictions `mean` and its uncertainty of f `std`
/// there (for the naive bootstrap, the members' std): the squared residual less the part the
/// method attributes to its own error, clipped at 0.
pub fn validation_noise_sd(y: &[f64], mean: &[f64], std: &[f64]) -> f64 {
    let excess: f64 = y
        .iter()
        .zip(mean)
        .zip(std)
        .map(|((y, m), s)| ((y - m).powi(2) - s * s).max(0.0))
        .sum();
    (excess / y.len() as f64).sqrt()
}

/// CRPS of one empirical sample distribution: E|X − y| − ½ E|X − X′| over the samples
/// (X, X′ independent draws from the empirical distribution, so pairs include i = j).
pub fn crps_sample(samples: &[f64], y: f64) -> Result<f64, MetricError> {
    non_empty("samples", samples.len())?;
    check_finite("samples", samples)?;
    let m = samples.len() as f64;
    let first = samples.iter().map(|x| (x - y).abs()).sum::<f64>() / m;
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    // Σ_i Σ_j |x_i − x_j| = 2 Σ_i (2i − m + 1) x_(i) for the sorted sample (0-based i).
    let pairs: f64 = sorted
        .iter()
        .enumerate()
        .map(|(i, x)| (2.0 * i as f64 - m + 1.0) * x)
        .sum::<f64>()
        * 2.0;
    Ok(first - pairs / (2.0 * m * m))
}

/// Sample CRPS averaged over points; `samples[i]` are the draws for point i.
pub fn crps_samples(samples: &[Vec<f64>], y: &[f64]) -> Result<f64, MetricError> {
    same_len("samples and y", samples.len(), y.len())?;
    non_empty("samples", samples.len())?;
    let mut total = 0.0;
    for (i, (s, t)) in samples.iter().zip(y).enumerate() {
        total += crps_sample(s, *t).map_err(|e| match e {
            MetricError::Empty(_) => MetricError::Empty(format!("samples[{i}]")),
            other => other,
        })?;
    }
    Ok(total / y.len() as f64)
}

/// Interval score of central intervals at `level` (Gneiting & Raftery 2007), averaged:
/// (u − l) + (2/α)(l − y)⁺ + (2/α)(y − u)⁺ with α = 1 − level.
pub fn interval_score(
    lower: &[f64],
    upper: &[f64],
    y: &[f64],
    level: f64,
) -> Result<f64, MetricError> {
    same_len("lower and upper", lower.len(), upper.len())?;
    same_len("lower and y", lower.len(), y.len())?;
    non_empty("lower", lower.len())?;
    check_level(level)?;
    let alpha = 1.0 - level;
    let mut total = 0.0;
    for i in 0..y.len() {
        if !lower[i].partial_cmp(&upper[i]).is_some_and(|o| o.is_le()) {
            return Err(MetricError::Invalid {
                what: format!("upper[{i}] − lower[{i}]"),
                value: upper[i] - lower[i],
                valid: "intervals need lower ≤ upper".into(),
            });
        }
        total += (upper[i] - lower[i])
            + 2.0 / alpha * (lower[i] - y[i]).max(0.0)
            + 2.0 / alpha * (y[i] - upper[i]).max(0.0);
    }
    Ok(total / y.len() as f64)
}

/// Central Gaussian intervals mean ± z·std at `level`.
pub fn gaussian_interval(
    mean: &[f64],
    std: &[f64],
    level: f64,
) -> Result<(Vec<f64>, Vec<f64>), MetricError> {
    same_len("mean and std", mean.len(), std.len())?;
    check_std("std", std)?;
    check_level(level)?;
    let z = Normal::standard().inverse_cdf(0.5 + level / 2.0);
    Ok(mean
        .iter()
        .zip(std)
        .map(|(m, s)| (m - z * s, m + z * s))
        .unzip())
}

/// Coverage and mean width of central Gaussian intervals at one level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IntervalQuality {
    /// The nominal level.
    pub level: f64,
    /// Fraction of points whose y lies inside the interval.
    pub coverage: f64,
    /// Mean interval width.
    pub width: f64,
    /// Mean interval score.
    pub interval_score: f64,
}

/// Coverage, width and interval score of mean ± z·std at `level`.
pub fn interval_quality(
    mean: &[f64],
    std: &[f64],
    y: &[f64],
    level: f64,
) -> Result<IntervalQuality, MetricError> {
    check_gaussian(mean, std, y)?;
    let (lo, hi) = gaussian_interval(mean, std, level)?;
    let n = y.len() as f64;
    let coverage = (0..y.len())
        .filter(|&i| lo[i] <= y[i] && y[i] <= hi[i])
        .count() as f64
        / n;
    let width = lo.iter().zip(&hi).map(|(l, h)| h - l).sum::<f64>() / n;
    Ok(IntervalQuality {
        level,
        coverage,
        width,
        interval_score: interval_score(&lo, &hi, y, level)?,
    })
}

/// A regression calibration curve: for every expected proportion p, the observed fraction of
/// y inside the central Gaussian p-interval (the "interval" curve of uncertainty-toolbox).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationCurve {
    /// Expected proportions, increasing in (0, 1).
    pub expected: Vec<f64>,
    /// Observed proportions.
    pub observed: Vec<f64>,
}

/// The calibration curve at `bins − 1` equally spaced expected proportions 1/bins, …,
/// (bins − 1)/bins (bins ≥ 2).
pub fn calibration_curve(
    mean: &[f64],
    std: &[f64],
    y: &[f64],
    bins: usize,
) -> Result<CalibrationCurve, MetricError> {
    check_gaussian(mean, std, y)?;
    if bins < 2 {
        return Err(MetricError::Invalid {
            what: "bins".into(),
            value: bins as f64,
            valid: "at least 2".into(),
        });
    }
    // The central p-interval contains y iff |z| ≤ Φ⁻¹(½ + p/2) with z = (y − μ)/σ; σ = 0
    // puts y inside every interval iff y = μ.
    let normal = Normal::standard();
    let abs_z: Vec<f64> = mean
        .iter()
        .zip(std)
        .zip(y)
        .map(|((m, s), t)| {
            if *s == 0.0 {
                if t == m {
                    0.0
                } else {
                    f64::INFINITY
                }
            } else {
                ((t - m) / s).abs()
            }
        })
        .collect();
    let n = y.len() as f64;
    let expected: Vec<f64> = (1..bins).map(|k| k as f64 / bins as f64).collect();
    let observed = expected
        .iter()
        .map(|p| {
            let q = normal.inverse_cdf(0.5 + p / 2.0);
            abs_z.iter().filter(|z| **z <= q).count() as f64 / n
        })
        .collect();
    Ok(CalibrationCurve { expected, observed })
}

impl CalibrationCurve {
    /// Mean |observed − expected| over the curve's points.
    pub fn mean_absolute_error(&self) -> f64 {
        self.expected
            .iter()
            .zip(&self.observed)
            .map(|(e, o)| (o - e).abs())
            .sum::<f64>()
            / self.expected.len() as f64
    }

    /// Root mean squared (observed − expected) over the curve's points.
    pub fn root_mean_squared_error(&self) -> f64 {
        (self
            .expected
            .iter()
            .zip(&self.observed)
            .map(|(e, o)| (o - e).powi(2))
            .sum::<f64>()
            / self.expected.len() as f64)
            .sqrt()
    }

    /// Miscalibration area: ∫₀¹ |observed(p) − p| dp for the piecewise-linear curve through
    /// (0, 0), the curve's points and (1, 1), integrated exactly (segments that cross the
    /// diagonal are split at the crossing).
    pub fn miscalibration_area(&self) -> f64 {
        let mut xs = vec![0.0];
        let mut ds = vec![0.0];
        for (e, o) in self.expected.iter().zip(&self.observed) {
            xs.push(*e);
            ds.push(o - e);
        }
        xs.push(1.0);
        ds.push(0.0);
        let mut area = 0.0;
        for k in 1..xs.len() {
            let h = xs[k] - xs[k - 1];
            let (a, b) = (ds[k - 1], ds[k]);
            area += if a * b >= 0.0 {
                h * (a.abs() + b.abs()) / 2.0
            } else {
                // |linear| over a sign change: two triangles.
                h * (a * a + b * b) / (2.0 * (a.abs() + b.abs()))
            };
        }
        area
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_and_nll_by_hand() {
        let mean = [0.0, 1.0];
        let y = [1.0, 3.0];
        assert!((rmse(&mean, &y).unwrap() - (2.5f64).sqrt()).abs() < 1e-15);
        assert!((mae(&mean, &y).unwrap() - 1.5).abs() < 1e-15);
        // NLL of N(0, 1) at 1: ½ log 2π + ½ = 1.4189385; of N(1, 2²) at 3: ½ log 8π + ½ = 2.1120857.
        let nll = gaussian_nll(&mean, &[1.0, 2.0], &y).unwrap();
        assert!((nll - (1.418_938_533_204_672_7 + 2.112_085_713_764_618) / 2.0).abs() < 1e-12);
        assert_eq!(gaussian_nll(&[0.0], &[0.0], &[1.0]).unwrap(), f64::INFINITY);
        assert!(gaussian_nll(&[0.0], &[-1.0], &[1.0])
            .unwrap_err()
            .to_string()
            .contains("std[0]"));
        assert!(gaussian_nll(&[0.0, 1.0], &[1.0], &[1.0, 2.0]).is_err());
    }

    #[test]
    fn crps_closed_form_and_samples() {
        // CRPS(N(0,1), 0) = 2φ(0) − 1/√π = 0.2336950.
        let c = crps_gaussian(&[0.0], &[1.0], &[0.0]).unwrap();
        assert!((c - (2.0 / (2.0 * PI).sqrt() - 1.0 / PI.sqrt())).abs() < 1e-12);
        // Scale equivariance: CRPS(N(0, 2²), 0) = 2 · CRPS(N(0,1), 0).
        assert!((crps_gaussian(&[0.0], &[2.0], &[0.0]).unwrap() - 2.0 * c).abs() < 1e-12);
        // σ = 0 reduces to the absolute error.
        assert_eq!(crps_gaussian(&[1.0], &[0.0], &[3.5]).unwrap(), 2.5);
        // Samples {0, 1, 3}, y = 1: E|X − y| = (1 + 0 + 2)/3 = 1;
        // E|X − X'| = (0+1+3 + 1+0+2 + 3+2+0)/9 = 12/9, so CRPS = 1 − 6/9 = 1/3.
        assert!((crps_sample(&[3.0, 0.0, 1.0], 1.0).unwrap() - 1.0 / 3.0).abs() < 1e-15);
        // A single sample is a point mass: CRPS = |x − y|.
        assert_eq!(crps_sample(&[2.0], 0.5).unwrap(), 1.5);
        // Many normal quantiles approach the closed form (error O(1/M)).
        let normal = Normal::standard();
        let m = 4000;
        let q: Vec<f64> = (0..m)
            .map(|i| normal.inverse_cdf((i as f64 + 0.5) / m as f64))
            .collect();
        assert!(
            (crps_sample(&q, 0.3).unwrap() - crps_gaussian(&[0.0], &[1.0], &[0.3]).unwrap()).abs()
                < 1e-3
        );
        assert!(crps_samples(&[vec![]], &[0.0])
            .unwrap_err()
            .to_string()
            .contains("samples[0]"));
    }

    #[test]
    fn student_t_crps_matches_numerical_integration() {
        // CRPS(F, y) = ∫ (F(x) − 1{x ≥ y})² dx, by the midpoint rule on [−400, 400] with step
        // 1e-3 (tails beyond contribute < 1e-6 at ν = 3: F(−400) ≈ 1e-8 at scale 1.5).
        for (dof, m, s, y) in [
            (3.0, 0.5, 1.5, 2.0),
            (7.0, -1.0, 0.4, -1.2),
            (30.0, 0.0, 1.0, 0.0),
        ] {
            let t = StudentsT::new(m, s, dof).unwrap();
            let h = 1e-3;
            let mut num = 0.0;
            let mut x = -400.0 + h / 2.0;
            while x < 400.0 {
                let f = t.cdf(x) - if x >= y { 1.0 } else { 0.0 };
                num += f * f * h;
                x += h;
            }
            let c = crps_student_t(&[m], &[s], dof, &[y]).unwrap();
            assert!((c - num).abs() < 1e-5, "ν = {dof}: {c} vs {num}");
        }
        // Large ν approaches the Gaussian; ν ≤ 1 has no CRPS.
        let c = crps_student_t(&[0.0], &[1.0], 1e6, &[0.3]).unwrap();
        assert!((c - crps_gaussian(&[0.0], &[1.0], &[0.3]).unwrap()).abs() < 1e-5);
        assert!(crps_student_t(&[0.0], &[1.0], 1.0, &[0.3]).is_err());
    }

    #[test]
    fn quantiles_of_samples() {
        // Type 7 on {1, 2, 3, 4}: position p·3; p = 0.5 → 2.5, p = 0.1 → 1.3.
        let s = [1.0, 2.0, 3.0, 4.0];
        assert!((quantile_sorted(&s, 0.5) - 2.5).abs() < 1e-15);
        assert!((quantile_sorted(&s, 0.1) - 1.3).abs() < 1e-12);
        assert_eq!(quantile_sorted(&s, 1.0), 4.0);
    }

    #[test]
    fn the_validation_noise_estimate_recovers_sigma() {
        // y = f + ε with ε ~ N(0, 0.3²) at V = 20 000 points (a fixed-seed LCG's uniforms
        // turned into normals by Box–Muller). With the truth as the prediction and σ̂_f = 0,
        // σ̂² is the mean of ε²: 0.09 ± 0.09·√(2/V) = 0.0009 (sd); checked at 5 sd. With
        // σ̂_f = 10 everywhere, every term is clipped to 0.
        let mut state: u64 = 42;
        let mut uniform = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let v = 20_000;
        let f: Vec<f64> = (0..v).map(|i| (i as f64 * 0.01).sin()).collect();
        let y: Vec<f64> = f
            .iter()
            .map(|f| {
                let (u1, u2) = (uniform(), uniform());
                f + 0.3 * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
            })
            .collect();
        let s2 = validation_noise_sd(&y, &f, &vec![0.0; v]).powi(2);
        assert!((s2 - 0.09).abs() < 5.0 * 0.0009, "{s2}");
        assert_eq!(validation_noise_sd(&y, &f, &vec![10.0; v]), 0.0);
        // A known std s = 0.1 removes s² from each squared residual before clipping:
        // E max(ε² − 0.01, 0) for ε ~ N(0, 0.09), by the midpoint rule.
        let expected: f64 = {
            let (n, lim) = (200_000, 3.0);
            let h = 2.0 * lim / n as f64;
            (0..n)
                .map(|i| {
                    let z = -lim + (i as f64 + 0.5) * h;
                    let e = 0.3 * z;
                    (e * e - 0.01).max(0.0) * (-0.5 * z * z).exp()
                        / (2.0 * std::f64::consts::PI).sqrt()
                        * h
                })
                .sum()
        };
        let got = validation_noise_sd(&y, &f, &vec![0.1; v]).powi(2);
        assert!((got - expected).abs() < 5.0 * 0.0009, "{got} vs {expected}");
    }

    #[test]
    fn interval_score_by_hand() {
        // [0, 2] at level 0.9 (α = 0.1): y = 1 inside → 2; y = 3 above → 2 + 20·1 = 22;
        // y = −0.5 below → 2 + 20·0.5 = 12. Mean = 12.
        let s = interval_score(&[0.0; 3], &[2.0; 3], &[1.0, 3.0, -0.5], 0.9).unwrap();
        assert!((s - 12.0).abs() < 1e-12);
        assert!(interval_score(&[1.0], &[0.0], &[0.5], 0.9).is_err());
        assert!(interval_score(&[0.0], &[1.0], &[0.5], 1.0).is_err());
        let q = interval_quality(&[0.0, 0.0], &[1.0, 1.0], &[0.5, 3.0], 0.95).unwrap();
        assert_eq!(q.coverage, 0.5);
        assert!((q.width - 2.0 * 1.959_963_984_540_054).abs() < 1e-9);
    }

    #[test]
    fn calibration_curve_and_area() {
        // z-scores 0.1, 0.5, 1.0, 2.0 (|z|); at p = 0.5 the cut-off is Φ⁻¹(0.75) = 0.6745 →
        // observed 2/4.
        let curve = calibration_curve(&[0.0; 4], &[1.0; 4], &[0.1, -0.5, 1.0, 2.0], 2).unwrap();
        assert_eq!(curve.expected, vec![0.5]);
        assert_eq!(curve.observed, vec![0.5]);
        assert_eq!(curve.miscalibration_area(), 0.0);
        // A hand-made curve: through (0,0), (0.5, 0.7), (1,1): |d| rises to 0.2 and back, area
        // = 2 · ½ · 0.5 · 0.2 = 0.1. One that crosses: (0.25, 0.35), (0.75, 0.65):
        // d = 0, 0.1, −0.1, 0 → 0.25·0.1/2 + 0.5·(0.01+0.01)/(2·0.2) + 0.25·0.1/2 = 0.05.
        let c = CalibrationCurve {
            expected: vec![0.5],
            observed: vec![0.7],
        };
        assert!((c.miscalibration_area() - 0.1).abs() < 1e-12);
        let c = CalibrationCurve {
            expected: vec![0.25, 0.75],
            observed: vec![0.35, 0.65],
        };
        assert!((c.miscalibration_area() - 0.05).abs() < 1e-12);
        assert!((c.mean_absolute_error() - 0.1).abs() < 1e-12);
        assert!((c.root_mean_squared_error() - 0.1).abs() < 1e-12);
    }
}
