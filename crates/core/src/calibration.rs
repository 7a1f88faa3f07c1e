//! Post-hoc calibration of a method's prediction interval of y on held-out points: split
//! conformal prediction and two recalibrations ([`CalibrationRule`]). A rule sees the held-out
//! points only through their *standardised residuals* z_i = (y_i − μ(x_i)) / s(x_i), where μ
//! is the base method's mean and s its scale (1, or the base's predictive sd of y); the
//! interval at a test input x* is then μ(x*) + s(x*)·[a, b] with offsets (a, b) that depend
//! only on the level. What each rule does with the z_i:
//!
//! - [`CalibrationRule::Conformal`] (Vovk et al. 2005; Lei et al. 2018; Romano et al. 2019 for
//!   the normalised score): the scores are |z_i|; the half-width q̂ is the ⌈(n + 1)(1 − α)⌉-th
//!   smallest of the n scores, which gives marginal coverage in [1 − α, 1 − α + 1/(n + 1))
//!   for exchangeable points with continuous scores (MAPIE's and crepes' split conformal
//!   regressor use the same order statistic).
//! - [`CalibrationRule::StdScaling`] (uncertainty-toolbox's std recalibration with its `nll`
//!   criterion): one factor c on the predictive sd that maximises the likelihood of the
//!   held-out points under the base's family: for a normal c² = mean z_i² (the closed form of
//!   argmin_c Σ log c + z_i²/(2c²)), for a Student t_ν the t's maximum-likelihood scale (an
//!   EM fixed point, `Calibration::std_scaling_factor`); the interval is ±c·q_level of that
//!   family.
//! - [`CalibrationRule::Isotonic`] (Kuleshov et al. 2018): the base's CDF values (PIT)
//!   p_i = F(z_i) are mapped to their observed frequencies by isotonic regression. The PITs,
//!   sorted, are already monotone in their frequencies j/(n + 1), so the isotonic fit is the
//!   interpolated empirical CDF R of the PITs through (0, 0) and (1, 1); the recalibrated
//!   quantile at q is F⁻¹(R⁻¹(q)).

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

use crate::error::MethodError;

/// A central prediction interval of y at `level` from quantile outputs: lower and upper ends
/// per test input.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantileBand {
    /// The central level (the quantiles at (1 − level)/2 and (1 + level)/2).
    pub level: f64,
    /// Lower ends.
    pub lower: Vec<f64>,
    /// Upper ends.
    pub upper: Vec<f64>,
}

/// Which post-hoc rule turns held-out residuals into prediction intervals of y.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CalibrationRule {
    /// Split conformal prediction: ± the conformal quantile of |z|.
    Conformal,
    /// Std scaling: ± c·q with c the residuals' maximum-likelihood scale (c² = mean z² for a
    /// normal base).
    StdScaling,
    /// Isotonic recalibration of the predictive CDF.
    Isotonic,
    /// Conformalised quantile regression (Romano et al. 2019): per level the scores
    /// E_i = max(q_lo(x_i) − y_i, y_i − q_hi(x_i)) and the interval [q_lo − Q, q_hi + Q], Q
    /// their ⌈(n + 1)(1 − α)⌉-th smallest (negative Q shrinks the band).
    Cqr,
    /// Jackknife+-after-bootstrap (Kim, Xu & Barber 2020): per test input the
    /// ⌊α(n + 1)⌋-th smallest of μ₋ᵢ(x) − Rᵢ and the ⌈(1 − α)(n + 1)⌉-th smallest of
    /// μ₋ᵢ(x) + Rᵢ, μ₋ᵢ the mean of the members whose resample left point i out and Rᵢ its
    /// residual |yᵢ − μ₋ᵢ(xᵢ)| (coverage ≥ 1 − 2α guaranteed, about 1 − α in practice).
    JackknifePlus,
}

/// Jackknife+'s values per test input: μ₋ᵢ(x) − Rᵢ and μ₋ᵢ(x) + Rᵢ over the training points i
/// that some member left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Jackknife {
    /// Per test input, the lower values.
    pub lower: Vec<Vec<f64>>,
    /// Per test input, the upper values.
    pub upper: Vec<Vec<f64>>,
}

impl CalibrationRule {
    /// The rule's name in specs and reports.
    pub fn name(self) -> &'static str {
        match self {
            CalibrationRule::Conformal => "conformal",
            CalibrationRule::StdScaling => "std_scaling",
            CalibrationRule::Isotonic => "isotonic",
            CalibrationRule::Cqr => "cqr",
            CalibrationRule::JackknifePlus => "jackknife_plus",
        }
    }
}

/// A repetition's calibration: the rule, the held-out points' standardised residuals, the
/// scale s(x*) at every test input, and the degrees of freedom of the base's standard shape
/// (`None`: normal).
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// The rule.
    pub rule: CalibrationRule,
    /// z_i = (y_i − μ(x_i)) / s(x_i) at the held-out points.
    pub residuals: Vec<f64>,
    /// s(x*) at every test input.
    pub scale: Vec<f64>,
    /// The base's Student-t degrees of freedom, when its family is one.
    pub dof: Option<f64>,
    /// CQR: per level the base's band at the test inputs and the held-out points' scores.
    pub bands: Vec<(QuantileBand, Vec<f64>)>,
    /// Jackknife+-after-bootstrap's values.
    pub jackknife: Option<Jackknife>,
}

/// The index k (1-based) of split conformal's order statistic at `level` among `n` scores,
/// ⌈(n + 1)·level⌉, or an error naming the calibration size the level needs.
pub fn conformal_rank(n: usize, level: f64) -> Result<usize, MethodError> {
    // A little slack so that (n + 1)·level landing on an integer in exact arithmetic is not
    // pushed up by rounding.
    let k = ((n as f64 + 1.0) * level - 1e-9).ceil() as usize;
    if k > n {
        let needed = ((level / (1.0 - level)) - 1e-9).ceil() as usize;
        return Err(MethodError::invalid(
            "calibration points",
            n,
            format!(
                "at least {needed} for a finite split-conformal interval at level {level} (it \
                 needs ⌈(n + 1)·{level}⌉ ≤ n); raise calibration_fraction or the training size"
            ),
        ));
    }
    Ok(k.max(1))
}

/// Jackknife+'s interval at `level` from one test input's lower and upper values.
fn jackknife_interval(lo: &[f64], hi: &[f64], level: f64) -> Result<(f64, f64), MethodError> {
    let n = lo.len();
    let k_hi = conformal_rank(n, level)?;
    let k_lo = ((1.0 - level) * (n as f64 + 1.0) + 1e-9).floor() as usize;
    if k_lo == 0 {
        return Err(MethodError::invalid(
            "out-of-bag points",
            n,
            format!("enough for ⌊(1 − {level})(n + 1)⌋ ≥ 1: more members or training points"),
        ));
    }
    Ok((kth_smallest(lo, k_lo), kth_smallest(hi, k_hi)))
}

/// The k-th smallest (1-based) of `v`.
fn kth_smallest(v: &[f64], k: usize) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[k - 1]
}

impl Calibration {
    /// Keeps the per-test-input parts for the first `m` test inputs only (inputs after them
    /// were appended by a caller: validation points).
    pub fn truncate(&mut self, m: usize) {
        if self.scale.len() > m {
            self.scale.truncate(m);
        }
        for (band, _) in &mut self.bands {
            band.lower.truncate(m);
            band.upper.truncate(m);
        }
        if let Some(j) = &mut self.jackknife {
            j.lower.truncate(m);
            j.upper.truncate(m);
        }
    }

    /// The number of held-out points.
    pub fn points(&self) -> usize {
        if let Some(j) = &self.jackknife {
            return j.lower.first().map_or(0, Vec::len);
        }
        match self.bands.first() {
            Some((_, scores)) => scores.len(),
            None => self.residuals.len(),
        }
    }

    /// The offsets (a, b) of the central interval at `level`: μ + s·a to μ + s·b.
    pub fn offsets(&self, level: f64) -> Result<(f64, f64), MethodError> {
        if !(level > 0.0 && level < 1.0) {
            return Err(MethodError::invalid(
                "interval level",
                level,
                "a level strictly between 0 and 1",
            ));
        }
        let n = self.residuals.len();
        if n == 0 {
            return Err(MethodError::invalid(
                "calibration points",
                0,
                "at least 1 held-out point",
            ));
        }
        match self.rule {
            CalibrationRule::Conformal => {
                let k = conformal_rank(n, level)?;
                let scores: Vec<f64> = self.residuals.iter().map(|z| z.abs()).collect();
                let q = kth_smallest(&scores, k);
                Ok((-q, q))
            }
            CalibrationRule::Cqr | CalibrationRule::JackknifePlus => Err(MethodError::invalid(
                "calibration rule",
                self.rule.name(),
                "a rule with offsets: its intervals come from Calibration::interval",
            )),
            CalibrationRule::StdScaling => {
                let c = self.std_scaling_factor();
                let q = self.quantile(0.5 + level / 2.0);
                Ok((-c * q, c * q))
            }
            CalibrationRule::Isotonic => {
                let mut z = self.residuals.clone();
                z.sort_by(f64::total_cmp);
                Ok((
                    self.isotonic_offset(&z, (1.0 - level) / 2.0),
                    self.isotonic_offset(&z, (1.0 + level) / 2.0),
                ))
            }
        }
    }

    /// The interval at `level` around `mean` at every test input.
    pub fn interval(&self, mean: &[f64], level: f64) -> Result<(Vec<f64>, Vec<f64>), MethodError> {
        if let (CalibrationRule::JackknifePlus, Some(j)) = (self.rule, &self.jackknife) {
            return j
                .lower
                .iter()
                .zip(&j.upper)
                .map(|(lo, hi)| jackknife_interval(lo, hi, level))
                .collect::<Result<Vec<_>, _>>()
                .map(|v| v.into_iter().unzip());
        }
        if self.rule == CalibrationRule::Cqr {
            let Some((band, scores)) = self
                .bands
                .iter()
                .find(|(b, _)| (b.level - level).abs() < 1e-9)
            else {
                return Err(MethodError::invalid(
                    "interval level",
                    level,
                    format!(
                        "one of CQR's levels {:?}: set its `levels` to the run's",
                        self.bands.iter().map(|(b, _)| b.level).collect::<Vec<_>>()
                    ),
                ));
            };
            let q = kth_smallest(scores, conformal_rank(scores.len(), level)?);
            return Ok(band
                .lower
                .iter()
                .zip(&band.upper)
                .map(|(l, u)| {
                    // A negative correction can cross a narrow band's ends: it then shrinks
                    // to its midpoint.
                    if l - q > u + q {
                        ((l + u) / 2.0, (l + u) / 2.0)
                    } else {
                        (l - q, u + q)
                    }
                })
                .unzip());
        }
        let (a, b) = self.offsets(level)?;
        Ok(mean
            .iter()
            .zip(&self.scale)
            .map(|(m, s)| (m + s * a, m + s * b))
            .unzip())
    }

    /// A scalar that sums the calibration up for reports: q̂ at 0.9 (conformal), c (std
    /// scaling), or the recalibrated 90% half-width in units of s (isotonic), with its name.
    pub fn summary_scalar(&self) -> Option<(&'static str, f64)> {
        match self.rule {
            CalibrationRule::Cqr => self
                .bands
                .iter()
                .find(|(b, _)| (b.level - 0.9).abs() < 1e-9)
                .and_then(|(_, s)| {
                    Some((
                        "cqr_correction_0.9",
                        kth_smallest(s, conformal_rank(s.len(), 0.9).ok()?),
                    ))
                }),
            CalibrationRule::StdScaling => Some(("std_scaling_factor", self.std_scaling_factor())),
            _ => self
                .offsets(0.9)
                .ok()
                .map(|(a, b)| ("calibrated_half_width_0.9", (b - a) / 2.0)),
        }
    }

    /// Std scaling's factor c: the maximum-likelihood scale of the held-out residuals under
    /// the base's own standard shape. Normal: c² = mean z², the closed form of
    /// argmin_c Σ log c + z_i²/(2c²) (uncertainty-toolbox's `nll` criterion). Student t_ν: the
    /// NLL is Σ log c + (ν+1)/2 · log(1 + z_i²/(ν c²)); setting its derivative in c to 0 gives
    /// n = (ν+1) Σ z_i²/(ν c² + z_i²), i.e. c² = (1/n) Σ w_i z_i² with weights
    /// w_i = (ν+1)/(ν + z_i²/c²): the EM fixed point of a t's scale, iterated from the normal
    /// fit (each step lowers the NLL; it converges to the unique optimum). The normal
    /// formula on a t base would set c² = E z² = ν/(ν−2) for an already calibrated t_ν and
    /// widen it by √(ν/(ν−2)).
    fn std_scaling_factor(&self) -> f64 {
        let z = &self.residuals;
        let n = z.len() as f64;
        let mut c2 = z.iter().map(|z| z * z).sum::<f64>() / n;
        let Some(nu) = self.dof.filter(|_| c2 > 0.0) else {
            return c2.sqrt();
        };
        for _ in 0..1000 {
            let next = z
                .iter()
                .map(|z| (nu + 1.0) * z * z / (nu + z * z / c2))
                .sum::<f64>()
                / n;
            let done = (next - c2).abs() <= 1e-14 * c2;
            c2 = next;
            if done {
                break;
            }
        }
        c2.sqrt()
    }

    fn cdf(&self, z: f64) -> f64 {
        match self.dof {
            None => Normal::standard().cdf(z),
            Some(nu) => StudentsT::new(0.0, 1.0, nu).map_or(f64::NAN, |t| t.cdf(z)),
        }
    }

    /// F⁻¹(p) of the base's standardised distribution, for 0 < p < 1.
    fn quantile(&self, p: f64) -> f64 {
        match self.dof {
            None => Normal::standard().inverse_cdf(p),
            Some(nu) => StudentsT::new(0.0, 1.0, nu).map_or(f64::NAN, |t| t.inverse_cdf(p)),
        }
    }

    /// The offset z with R(F(z)) = q, for Kuleshov et al.'s isotonic map R through the knots
    /// (0, 0), (F(z_(j)), j/(n + 1)) and (1, 1), linear in PIT space between them; `sorted`
    /// holds the calibration residuals z_(j) ascending (ties share the larger frequency).
    ///
    /// Computed in residual space, so that nothing saturates: a segment whose two PITs are
    /// distinguishable is interpolated in PIT space and mapped back by F⁻¹ (Kuleshov's map
    /// exactly), kept within the segment's residuals; where they are not (residuals so far in
    /// a tail of the base that F rounds them to 0 or 1 alike) the map is interpolated linearly
    /// in z between the two calibration residuals. Past the last calibration residual (a
    /// level beyond n/(n + 1)) the map runs on to the knot (1, 1) (or from (0, 0)), as
    /// Kuleshov et al.'s does: the base's own tail beyond that residual, its PIT stretched
    /// linearly over the remaining frequency; only where the base's PITs saturate there (F
    /// rounds the residual and everything past it to 1, or to 0) does the interval end at the
    /// residual.
    fn isotonic_offset(&self, sorted: &[f64], q: f64) -> f64 {
        let n = sorted.len() as f64;
        let cdf = |z: f64| match z {
            z if z == f64::NEG_INFINITY => 0.0,
            z if z == f64::INFINITY => 1.0,
            z => self.cdf(z),
        };
        // Knots (z, R), ascending in both; the segment (a, b] that holds q.
        let mut a = (f64::NEG_INFINITY, 0.0);
        let mut b = (f64::INFINITY, 1.0);
        for (j, &z) in sorted.iter().enumerate() {
            let knot = (z, (j + 1) as f64 / (n + 1.0));
            if q <= knot.1 {
                b = knot;
                break;
            }
            a = knot;
        }
        if b.1 <= a.1 {
            return b.0;
        }
        let t = (q - a.1) / (b.1 - a.1);
        let (pa, pb) = (cdf(a.0), cdf(b.0));
        let p = pa + (pb - pa) * t;
        if pb > pa && p > 0.0 && p < 1.0 {
            return self.quantile(p).clamp(a.0, b.0);
        }
        match (a.0.is_finite(), b.0.is_finite()) {
            (true, true) => a.0 + (b.0 - a.0) * t,
            (true, false) => a.0,
            (false, true) => b.0,
            (false, false) => f64::NAN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::Rng;

    fn calibration(rule: CalibrationRule, residuals: Vec<f64>) -> Calibration {
        Calibration {
            rule,
            residuals,
            scale: vec![1.0],
            dof: None,
            bands: Vec::new(),
            jackknife: None,
        }
    }

    #[test]
    fn conformal_takes_the_ceil_n_plus_one_order_statistic() {
        // n = 19 scores 1..19: at level 0.9, k = ⌈20·0.9⌉ = 18, so q̂ = 18; at 0.95, k = 19.
        let z: Vec<f64> = (1..=19)
            .map(|v| if v % 2 == 0 { v as f64 } else { -(v as f64) })
            .collect();
        let c = calibration(CalibrationRule::Conformal, z);
        assert_eq!(c.offsets(0.9).unwrap(), (-18.0, 18.0));
        assert_eq!(c.offsets(0.95).unwrap(), (-19.0, 19.0));
        // Level 0.96 needs ⌈20·0.96⌉ = 20 > 19 points: a clear error naming what is needed.
        let err = c.offsets(0.96).unwrap_err().to_string();
        assert!(
            err.contains("calibration points = 19") && err.contains("at least 24"),
            "{err}"
        );
    }

    #[test]
    fn std_scaling_is_the_likelihood_optimum() {
        // z = ±2: c = 2, so the 95% interval is ±2·1.95996.
        let c = calibration(CalibrationRule::StdScaling, vec![2.0, -2.0, 2.0, -2.0]);
        let (a, b) = c.offsets(0.95).unwrap();
        assert!((b - 2.0 * 1.959_963_985).abs() < 1e-6 && (a + b).abs() < 1e-12);
        // The likelihood optimum: Σ log c + z²/(2c²) is larger at c·1.01 and c/1.01.
        let nll = |c: f64| 4.0 * c.ln() + 4.0 * 4.0 / (2.0 * c * c);
        assert!(nll(2.02) > nll(2.0) && nll(2.0 / 1.01) > nll(2.0));
    }

    #[test]
    fn std_scaling_of_a_student_t_base_fits_the_t_scale() {
        // Residuals drawn from a calibrated t_5 (scale 1): the t fit's factor is 1 up to its
        // sampling error, sd(log ĉ) = √((ν+3)/(2νn)) from the t's Fisher information for a
        // log scale, 2ν/(ν+3) per point: √(8/(10·20 000)) = 0.0063; checked at 5 sds. The
        // normal formula would give √(ν/(ν−2)) = 1.29 (widening a calibrated base).
        let mut rng = Rng::new(11);
        let nu = 5.0;
        let z: Vec<f64> = (0..20_000)
            .map(|_| {
                let chi2: f64 = (0..5).map(|_| rng.normal().powi(2)).sum();
                rng.normal() / (chi2 / nu).sqrt()
            })
            .collect();
        let mut c = calibration(CalibrationRule::StdScaling, z);
        c.dof = Some(nu);
        let f = c.std_scaling_factor();
        assert!(f.ln().abs() < 5.0 * 0.0063, "factor {f}");
        // The optimum of the t likelihood: larger NLL at f·1.01 and f/1.01.
        let nll = |s: f64| {
            c.residuals
                .iter()
                .map(|z| s.ln() + (nu + 1.0) / 2.0 * (1.0 + z * z / (nu * s * s)).ln())
                .sum::<f64>()
        };
        assert!(nll(f * 1.01) > nll(f) && nll(f / 1.01) > nll(f));
        // Its interval is ±f·t_5 quantile.
        let (a, b) = c.offsets(0.9).unwrap();
        assert!((b - f * 2.015_048_373).abs() < 1e-6 && (a + b).abs() < 1e-12);
    }

    #[test]
    fn recalibrations_reach_nominal_coverage_on_fresh_draws() {
        // The base claims sd 1 but the residuals have sd 2.5 and a shift of 0.5: recalibrated
        // on n = 2000 points, the 80% interval covers fresh residuals with probability
        // 0.80 up to the calibration sample's error. Checked on 20 000 fresh draws; the
        // tolerance is 0.02, above 4 standard errors of the coverage of an interval fitted on
        // 2000 points (sd ≈ sqrt(0.8·0.2/2000) ≈ 0.009) plus the test draws' (0.003).
        let mut rng = Rng::new(7);
        let mut draw =
            |n: usize| -> Vec<f64> { (0..n).map(|_| 0.5 + 2.5 * rng.normal()).collect() };
        let fit = draw(2000);
        let fresh = draw(20_000);
        for rule in [
            CalibrationRule::Conformal,
            CalibrationRule::StdScaling,
            CalibrationRule::Isotonic,
        ] {
            let c = calibration(rule, fit.clone());
            let (a, b) = c.offsets(0.8).unwrap();
            let cover = fresh.iter().filter(|&&z| a < z && z < b).count() as f64 / 20_000.0;
            // Std scaling is symmetric about 0 and the residuals are shifted: its coverage is
            // that of ±c·1.2816 with c² = 2.5² + 0.5² under N(0.5, 2.5²), which is 0.79992.
            let target = 0.8;
            assert!(
                (cover - target).abs() < 0.02,
                "{}: coverage {cover}, expected {target}",
                rule.name()
            );
        }
        // Without recalibration the base's ±1.2816 covers only about 37% of the shifted draws.
        let raw = fresh.iter().filter(|&&z| z.abs() < 1.2816).count() as f64 / 20_000.0;
        assert!(raw < 0.45, "{raw}");
    }

    #[test]
    fn isotonic_recalibration_of_a_saturated_base_covers() {
        // A base whose sd is 10⁴ times too small: residuals 10⁴·u, u ~ N(0, 1), have PITs of
        // exactly 0 or 1. The recalibrated interval must still cover fresh residuals of the
        // same kind at its level. With n = 200 the 90% interval runs between the (201·0.05)th
        // and (201·0.95)th order statistics, whose coverage is Beta-distributed with mean 0.9
        // and sd √(0.9·0.1/202) = 0.021; 20 000 fresh draws add 0.002. Checked at 4.5 sds.
        let mut rng = Rng::new(17);
        let z: Vec<f64> = (0..200).map(|_| 1e4 * rng.normal()).collect();
        let c = calibration(CalibrationRule::Isotonic, z);
        let (a, b) = c.offsets(0.9).unwrap();
        assert!(
            a < -1e3 && b > 1e3,
            "{a} {b}: capped near the base's ±8 sds"
        );
        let covered = (0..20_000)
            .filter(|_| {
                let r = 1e4 * rng.normal();
                a <= r && r <= b
            })
            .count() as f64
            / 20_000.0;
        assert!((covered - 0.9).abs() < 4.5 * 0.0211, "coverage {covered}");
    }

    #[test]
    fn isotonic_inverse_interpolates_between_knots() {
        // Residuals with PITs 0.2 and 0.6: knots (0,0), (0.2,1/3), (0.6,2/3), (1,1) in PIT
        // space, so R⁻¹(1/2) = 0.4, R⁻¹(1/6) = 0.1, R⁻¹(5/6) = 0.8, mapped back by Φ⁻¹.
        let phi = Normal::standard();
        let z = vec![phi.inverse_cdf(0.2), phi.inverse_cdf(0.6)];
        let c = calibration(CalibrationRule::Isotonic, z.clone());
        for (q, p) in [(0.5, 0.4), (1.0 / 6.0, 0.1), (5.0 / 6.0, 0.8)] {
            let got = c.isotonic_offset(&z, q);
            assert!((got - phi.inverse_cdf(p)).abs() < 1e-9, "q {q}: {got}");
        }
        // Past the last residual the map runs on to (1, 1): with PITs 0.2 and 0.6 (n = 2),
        // q = 0.9 lies between (0.6, 2/3) and (1, 1), at t = (0.9 − 2/3)/(1/3) = 0.7, so
        // p = 0.6 + 0.4·0.7 = 0.88, beyond the last residual Φ⁻¹(0.6); and symmetrically
        // below the first, q = 0.1 → p = 0.2·0.3 = 0.06.
        assert!((c.isotonic_offset(&z, 0.9) - phi.inverse_cdf(0.88)).abs() < 1e-9);
        assert!((c.isotonic_offset(&z, 0.1) - phi.inverse_cdf(0.06)).abs() < 1e-9);
        // Saturated neighbours are interpolated in z; past a saturated last residual it is the
        // end.
        let far = vec![-2e4, -1e4, 1e4, 3e4];
        let c = calibration(CalibrationRule::Isotonic, far.clone());
        assert!((c.isotonic_offset(&far, 0.3) - -15_000.0).abs() < 1e-6);
        assert_eq!(c.isotonic_offset(&far, 0.1), -2e4);
        assert_eq!(c.isotonic_offset(&far, 0.99), 3e4);
    }
}
