//! The standardised residuals that split conformal prediction and the recalibrations share:
//! z_i = (y_i − μ(x_i)) / s(x_i) at the held-out points, and the scale s(x*) at every test
//! input, which the stored [`Calibration`] turns into intervals (rules in
//! [`uqbench_core::calibration`]).
//!
//! **The scale s(x).** `score = "absolute"` uses s = 1 (the residual |y − μ|, MAPIE's
//! default); `"normalized"` and both recalibrations use the base's predictive sd of y: its own
//! when it has one (a mean–variance mixture, or sqrt(std² + noise²) with its noise model, or
//! the problem's σ(x) where the base uses the known σ), and otherwise sqrt(std² + σ̂²) with σ̂
//! the base's training-residual noise estimate (`run.noise = "residual"`'s formula, on the
//! points it was trained on). For an empirical base, the recalibrations treat its predictive
//! of y as the normal with that sd.

use uqbench_core::{Calibration, CalibrationRule, Family, MethodError, Prediction};

use crate::split::{attach, HeldOut};

/// Calibrates one repetition by `rule` on its standardised residuals: with `normalized`,
/// s(x) is the base's predictive sd of y, otherwise 1.
pub fn calibrate(
    held: &HeldOut<'_>,
    out: &mut Prediction,
    cal: &Prediction,
    rule: CalibrationRule,
    normalized: bool,
) -> Result<(), MethodError> {
    let y = held.targets();
    let table = held.table;
    // The base's noise estimate from its training residuals, where it has no noise model.
    let own_noise =
        out.extra.predictive_std.is_some() || out.noise_std.is_some() || out.noise_known;
    let residual_sd = match (&out.train_mean, own_noise) {
        (_, true) => None,
        (Some(fit), false) => Some(
            (fit.iter()
                .zip(held.fit_indices())
                .map(|(f, &i)| (y[i] - f).powi(2))
                .sum::<f64>()
                / fit.len() as f64)
                .sqrt(),
        ),
        (None, false) if !normalized => None,
        (None, false) => {
            return Err(MethodError::invalid(
                format!("[methods.{table}]"),
                "a base without a noise model or a training fit",
                "a base with its own noise sd or a training fit to estimate it from",
            ))
        }
    };
    let (cal_scale, test_scale) = if normalized {
        (
            predictive_sd(cal, &held.noise(), residual_sd),
            predictive_sd(out, held.task.noise.test, residual_sd),
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
            format!("[methods.{table}] the base's predictive sd of y"),
            s,
            "a positive, finite sd at every input (score = \"normalized\" and the \
             recalibrations divide by it)",
        ));
    }
    let residuals: Vec<f64> = held
        .indices()
        .iter()
        .zip(&cal.mean)
        .zip(&cal_scale)
        .map(|((&i, mu), s)| (y[i] - mu) / s)
        .collect();
    held.full_fit(out, cal);
    if let (Some(sd), None) = (residual_sd, &out.noise_std) {
        out.noise_std = Some(vec![sd; out.mean.len()]);
        out.scalars.insert("residual_noise_sd".into(), sd);
    }
    let calibration = Calibration {
        rule,
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

/// The base's predictive sd of y at every input of `p`, with `sigma` the problem's σ(x) there
/// and `residual_sd` the fallback noise estimate.
fn predictive_sd(p: &Prediction, sigma: &[f64], residual_sd: Option<f64>) -> Vec<f64> {
    (0..p.mean.len())
        .map(|i| {
            if let Some(ps) = &p.extra.predictive_std {
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
