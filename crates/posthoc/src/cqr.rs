//! Conformalised quantile regression (Romano et al. 2019): per level of a quantile base's
//! bands, the held-out scores E_i = max(q_lo(x_i) − y_i, y_i − q_hi(x_i)); the interval is
//! [q_lo − Q, q_hi + Q] with Q their ⌈(n + 1)(1 − α)⌉-th smallest (a negative Q shrinks the
//! band). Its interval arithmetic is [`uqbench_core::CalibrationRule::Cqr`]'s.

use uqbench_core::{Calibration, CalibrationRule, Likelihood, MethodError, Prediction};

use crate::split::{attach, HeldOut};
use crate::Calibrator;

/// CQR's conformalisation of a quantile base's bands.
pub struct Cqr;

impl Calibrator for Cqr {
    fn conformal(&self) -> bool {
        true
    }

    fn describe(&self) -> &'static str {
        "conformalised quantile regression"
    }

    fn likelihood(&self) -> Likelihood {
        Likelihood::Gaussian
    }

    fn calibrate(
        &self,
        held: &HeldOut<'_>,
        out: &mut Prediction,
        cal: &Prediction,
    ) -> Result<(), MethodError> {
        let y = held.targets();
        let (Some(test_bands), Some(cal_bands)) =
            (out.extra.quantiles.take(), &cal.extra.quantiles)
        else {
            return Err(MethodError::invalid(
                format!("[methods.{}] base", held.table),
                "a method without quantile outputs",
                "a quantile regression (CQR conformalises its quantile bands)",
            ));
        };
        let bands = test_bands
            .into_iter()
            .zip(cal_bands)
            .map(|(band, c)| {
                let scores = held
                    .indices()
                    .iter()
                    .zip(c.lower.iter().zip(&c.upper))
                    .map(|(&i, (lo, hi))| (lo - y[i]).max(y[i] - hi))
                    .collect();
                (band, scores)
            })
            .collect();
        held.full_fit(out, cal);
        let calibration = Calibration {
            rule: CalibrationRule::Cqr,
            residuals: Vec::new(),
            scale: Vec::new(),
            dof: None,
            bands,
            jackknife: None,
        };
        attach(out, calibration);
        Ok(())
    }
}
