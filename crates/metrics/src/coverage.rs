//! Coverage over repetitions: the pointwise statistics of spec §2 ([000]) and the
//! simulation-based coverage fractions of spec §4 ([004]).

use serde::{Deserialize, Serialize};
use statrs::distribution::{Beta, ContinuousCDF, Normal};

use crate::error::{check_finite, check_level, check_std, non_empty, same_len, MetricError};

/// The factor [000] multiplies the uncertainty by for its coverage ("deviation < 1.96 ·
/// uncertainty"). Interval-level metrics use the exact normal quantile instead.
pub const PAPER_Z: f64 = 1.96;

/// Mean and standard error of the mean.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeanSe {
    /// The mean.
    pub mean: f64,
    /// Its standard error, sd / sqrt(k) (sd with k − 1 denominator). NaN when k = 1: one
    /// value says nothing about its spread (written blank in CSV, null in JSON, "—" in tables,
    /// never 0).
    pub se: f64,
}

/// Mean and standard error of `values` (k ≥ 1).
pub fn mean_se(values: &[f64]) -> Result<MeanSe, MetricError> {
    non_empty("values", values.len())?;
    let k = values.len() as f64;
    let mean = values.iter().sum::<f64>() / k;
    if values.len() == 1 {
        return Ok(MeanSe { mean, se: f64::NAN });
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (k - 1.0);
    Ok(MeanSe {
        mean,
        se: (var / k).sqrt(),
    })
}

/// A binomial proportion with its error bar and two confidence intervals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Proportion {
    /// Successes / trials.
    pub p: f64,
    /// sqrt(p(1 − p)/k), the error bar of [000].
    pub se: f64,
    /// Wilson score interval at the requested confidence.
    pub wilson: (f64, f64),
    /// Clopper–Pearson (exact) interval at the requested confidence.
    pub clopper_pearson: (f64, f64),
}

/// A proportion `successes / trials` with intervals at `confidence` (e.g. 0.95).
pub fn proportion(successes: u64, trials: u64, confidence: f64) -> Result<Proportion, MetricError> {
    non_empty("trials", trials as usize)?;
    check_level(confidence)?;
    if successes > trials {
        return Err(MetricError::Invalid {
            what: "successes".into(),
            value: successes as f64,
            valid: format!("at most the number of trials, {trials}"),
        });
    }
    let k = trials as f64;
    let x = successes as f64;
    let p = x / k;
    let z = Normal::standard().inverse_cdf(0.5 + confidence / 2.0);
    // Wilson: (p + z²/2k ± z sqrt(p(1−p)/k + z²/4k²)) / (1 + z²/k).
    let denom = 1.0 + z * z / k;
    let centre = (p + z * z / (2.0 * k)) / denom;
    let half = z * (p * (1.0 - p) / k + z * z / (4.0 * k * k)).sqrt() / denom;
    let wilson = ((centre - half).max(0.0), (centre + half).min(1.0));
    // Clopper–Pearson: Beta(α/2; x, k−x+1) and Beta(1−α/2; x+1, k−x) quantiles.
    let alpha = 1.0 - confidence;
    let lower = if successes == 0 {
        0.0
    } else {
        Beta::new(x, k - x + 1.0)
            .expect("positive shape parameters")
            .inverse_cdf(alpha / 2.0)
    };
    let upper = if successes == trials {
        1.0
    } else {
        Beta::new(x + 1.0, k - x)
            .expect("positive shape parameters")
            .inverse_cdf(1.0 - alpha / 2.0)
    };
    Ok(Proportion {
        p,
        se: (p * (1.0 - p) / k).sqrt(),
        wilson,
        clopper_pearson: (lower, upper),
    })
}

/// Deviation, uncertainty and coverage at one test input over k repetitions (spec §2).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PointSummary {
    /// |prediction − truth|: mean and standard error over repetitions.
    pub deviation: MeanSe,
    /// The reported uncertainty (std of f(x)): mean and standard error.
    pub uncertainty: MeanSe,
    /// Fraction of repetitions with deviation < z · uncertainty, with error bars.
    pub coverage: Proportion,
}

/// Summarises one test input: `prediction[r]` and `uncertainty[r]` of repetition r against
/// the noise-free `truth`, with coverage counted as deviation < `z` · uncertainty ([000]:
/// z = [`PAPER_Z`]) and its intervals at 95% confidence.
pub fn point_summary(
    prediction: &[f64],
    uncertainty: &[f64],
    truth: f64,
    z: f64,
) -> Result<PointSummary, MetricError> {
    same_len(
        "prediction and uncertainty",
        prediction.len(),
        uncertainty.len(),
    )?;
    non_empty("prediction", prediction.len())?;
    check_finite("prediction", prediction)?;
    check_std("uncertainty", uncertainty)?;
    let deviation: Vec<f64> = prediction.iter().map(|p| (p - truth).abs()).collect();
    let hits = deviation
        .iter()
        .zip(uncertainty)
        .filter(|(d, u)| **d < z * **u)
        .count() as u64;
    Ok(PointSummary {
        deviation: mean_se(&deviation)?,
        uncertainty: mean_se(uncertainty)?,
        coverage: proportion(hits, prediction.len() as u64, 0.95)?,
    })
}

/// Intervals of one simulation (repetition) at every test input.
#[derive(Debug, Clone, Copy)]
pub struct Intervals<'a> {
    /// Lower ends.
    pub lower: &'a [f64],
    /// Upper ends.
    pub upper: &'a [f64],
}

fn check_intervals(sims: &[Intervals<'_>], m: usize) -> Result<(), MetricError> {
    non_empty("simulations", sims.len())?;
    for (s, iv) in sims.iter().enumerate() {
        same_len(
            &format!("simulation {s}: lower ends and test inputs"),
            iv.lower.len(),
            m,
        )?;
        same_len(
            &format!("simulation {s}: upper ends and test inputs"),
            iv.upper.len(),
            m,
        )?;
        for i in 0..m {
            if !iv.lower[i]
                .partial_cmp(&iv.upper[i])
                .is_some_and(|o| o.is_le())
            {
                return Err(MetricError::Invalid {
                    what: format!("simulation {s}, test input {i}: upper − lower"),
                    value: iv.upper[i] - iv.lower[i],
                    valid: "intervals need lower ≤ upper (finite)".into(),
                });
            }
        }
    }
    Ok(())
}

/// Confidence-interval coverage fraction CICF(x) = (1/S) Σ_s 1{f(x) ∈ [L_s(x), U_s(x)]} at
/// every test input ([004]). `truth` is f at the test inputs.
pub fn cicf(sims: &[Intervals<'_>], truth: &[f64]) -> Result<Vec<f64>, MetricError> {
    check_intervals(sims, truth.len())?;
    let s = sims.len() as f64;
    Ok((0..truth.len())
        .map(|i| {
            sims.iter()
                .filter(|iv| iv.lower[i] <= truth[i] && truth[i] <= iv.upper[i])
                .count() as f64
                / s
        })
        .collect())
}

/// Prediction-interval coverage fraction, computed exactly from the known noise ([004]):
/// PICF(x) = (1/S) Σ_s [Φ((U_s(x) − f(x))/σ(x)) − Φ((L_s(x) − f(x))/σ(x))].
/// σ(x) = 0 counts the interval as covering iff it contains f(x).
pub fn picf(sims: &[Intervals<'_>], truth: &[f64], sigma: &[f64]) -> Result<Vec<f64>, MetricError> {
    check_intervals(sims, truth.len())?;
    same_len("truth and sigma", truth.len(), sigma.len())?;
    check_std("sigma", sigma)?;
    let normal = Normal::standard();
    let s = sims.len() as f64;
    Ok((0..truth.len())
        .map(|i| {
            sims.iter()
                .map(|iv| {
                    if sigma[i] == 0.0 {
                        f64::from(u8::from(iv.lower[i] <= truth[i] && truth[i] <= iv.upper[i]))
                    } else {
                        normal.cdf((iv.upper[i] - truth[i]) / sigma[i])
                            - normal.cdf((iv.lower[i] - truth[i]) / sigma[i])
                    }
                })
                .sum::<f64>()
                / s
        })
        .collect())
}

/// Brier score of coverage fractions against the nominal level:
/// mean over test inputs of (CF(x) − level)² ([004]).
pub fn coverage_brier(fractions: &[f64], level: f64) -> Result<f64, MetricError> {
    non_empty("coverage fractions", fractions.len())?;
    check_level(level)?;
    Ok(fractions.iter().map(|c| (c - level).powi(2)).sum::<f64>() / fractions.len() as f64)
}

/// Mean interval width over simulations and test inputs.
pub fn mean_width(sims: &[Intervals<'_>]) -> Result<f64, MetricError> {
    non_empty("simulations", sims.len())?;
    let m = sims[0].lower.len();
    check_intervals(sims, m)?;
    non_empty("test inputs", m)?;
    let total: f64 = sims
        .iter()
        .map(|iv| {
            iv.lower
                .iter()
                .zip(iv.upper)
                .map(|(l, u)| u - l)
                .sum::<f64>()
        })
        .sum();
    Ok(total / (sims.len() * m) as f64)
}

/// Marginal coverage (PICP or CICP of [004]): per simulation, the fraction of test inputs
/// covered, averaged over simulations. Given the pointwise fractions this is their mean.
pub fn marginal(fractions: &[f64]) -> Result<f64, MetricError> {
    non_empty("coverage fractions", fractions.len())?;
    Ok(fractions.iter().sum::<f64>() / fractions.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proportion_intervals_match_reference_values() {
        // 45 of 50 at 95%: p = 0.9, se = sqrt(0.9·0.1/50) = 0.0424264.
        let p = proportion(45, 50, 0.95).unwrap();
        assert!((p.p - 0.9).abs() < 1e-15);
        assert!((p.se - 0.042_426_406_871_192_85).abs() < 1e-12);
        // Wilson by the closed form with z = 1.959964: centre = (0.9 + z²/100)/(1 + z²/50),
        // half = z·sqrt(0.0018 + z²/10000)/(1 + z²/50) → (0.78640, 0.95653).
        assert!((p.wilson.0 - 0.786_398).abs() < 1e-5, "{:?}", p.wilson);
        assert!((p.wilson.1 - 0.956_524).abs() < 1e-5, "{:?}", p.wilson);
        // Clopper–Pearson for 45/50, reference from SciPy 1.x:
        // beta.ppf(0.025, 45, 6) = 0.7818646335657977, beta.ppf(0.975, 46, 5) = 0.9667249064109775.
        assert!(
            (p.clopper_pearson.0 - 0.781_864_633_565_797_7).abs() < 1e-8,
            "{:?}",
            p.clopper_pearson
        );
        assert!(
            (p.clopper_pearson.1 - 0.966_724_906_410_977_5).abs() < 1e-8,
            "{:?}",
            p.clopper_pearson
        );
        // Edge cases: 0 and k successes give the one-sided exact bounds (α/2)^(1/k).
        let zero = proportion(0, 10, 0.95).unwrap();
        assert_eq!(zero.clopper_pearson.0, 0.0);
        assert!((zero.clopper_pearson.1 - (1.0 - 0.025f64.powf(0.1))).abs() < 1e-9);
        let all = proportion(10, 10, 0.95).unwrap();
        assert_eq!(all.clopper_pearson.1, 1.0);
        assert!((all.clopper_pearson.0 - 0.025f64.powf(0.1)).abs() < 1e-9);
        assert_eq!(all.se, 0.0);
        assert!(proportion(11, 10, 0.95).is_err());
        assert!(proportion(1, 0, 0.95).is_err());
    }

    #[test]
    fn one_value_has_no_standard_error() {
        let one = mean_se(&[0.7]).unwrap();
        assert_eq!(one.mean, 0.7);
        assert!(one.se.is_nan(), "{}", one.se);
        let two = mean_se(&[1.0, 3.0]).unwrap();
        assert_eq!((two.mean, two.se), (2.0, 1.0));
    }

    #[test]
    fn point_summary_by_hand() {
        // Truth 1; predictions 1.5, 0.8, 1.1 with uncertainties 0.2, 0.2, 0.1:
        // deviations 0.5, 0.2, 0.1 → mean 0.26667, sd 0.20817, se 0.12019;
        // covered iff deviation < 1.96·u: 0.5 < 0.392 no, 0.2 < 0.392 yes, 0.1 < 0.196 yes → 2/3.
        let s = point_summary(&[1.5, 0.8, 1.1], &[0.2, 0.2, 0.1], 1.0, PAPER_Z).unwrap();
        assert!((s.deviation.mean - 0.8 / 3.0).abs() < 1e-12);
        assert!((s.deviation.se - 0.120_185_042_515_466_4).abs() < 1e-12);
        assert!((s.uncertainty.mean - 0.5 / 3.0).abs() < 1e-12);
        assert!((s.coverage.p - 2.0 / 3.0).abs() < 1e-12);
        // Zero uncertainty never covers (deviation < 0 is impossible).
        let z = point_summary(&[1.0, 1.0], &[0.0, 0.0], 1.0, PAPER_Z).unwrap();
        assert_eq!(z.coverage.p, 0.0);
        // Negative std and mismatched lengths are errors naming the input.
        let e = point_summary(&[1.0], &[-0.1], 1.0, PAPER_Z)
            .unwrap_err()
            .to_string();
        assert!(e.contains("uncertainty[0]") && e.contains("-0.1"), "{e}");
        assert!(point_summary(&[1.0, 2.0], &[0.1], 1.0, PAPER_Z).is_err());
    }

    #[test]
    fn cicf_picf_brier_width_by_hand() {
        // Two test inputs with truth 0 and 1, σ = 1 and 0; two simulations.
        let truth = [0.0, 1.0];
        let sims = [
            Intervals {
                lower: &[-1.0, 0.5],
                upper: &[1.0, 0.9],
            },
            Intervals {
                lower: &[0.5, 0.0],
                upper: &[2.0, 2.0],
            },
        ];
        // CICF: input 0 covered in sim 0 only → 0.5; input 1 covered in sim 1 only → 0.5.
        assert_eq!(cicf(&sims, &truth).unwrap(), vec![0.5, 0.5]);
        // PICF at input 0: [Φ(1) − Φ(−1) + Φ(2) − Φ(0.5)] / 2 = (0.682689 + 0.285787)/2.
        let p = picf(&sims, &truth, &[1.0, 0.0]).unwrap();
        assert!((p[0] - (0.682_689_492_137_086 + 0.285_787_406_777_808_3) / 2.0).abs() < 1e-9);
        assert_eq!(p[1], 0.5); // σ = 0: indicator of containing f
                               // Brier against 0.9: ((0.5 − 0.9)² + (0.5 − 0.9)²)/2 = 0.16.
        assert!((coverage_brier(&[0.5, 0.5], 0.9).unwrap() - 0.16).abs() < 1e-12);
        // Widths: 2, 0.4, 1.5, 2 → mean 1.475.
        assert!((mean_width(&sims).unwrap() - 1.475).abs() < 1e-12);
        assert_eq!(marginal(&[0.5, 1.0]).unwrap(), 0.75);
        // An inverted interval is an error.
        let bad = [Intervals {
            lower: &[1.0, 0.0],
            upper: &[0.0, 1.0],
        }];
        assert!(cicf(&bad, &truth).is_err());
    }
}
