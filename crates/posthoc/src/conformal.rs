//! Split conformal prediction (Vovk et al. 2005; Lei et al. 2018; the normalised score of
//! Romano et al. 2019): ± the ⌈(n + 1)(1 − α)⌉-th smallest of the held-out scores |z_i|, with
//! z_i the standardised residuals of [`crate::scaled`]. The rule's interval arithmetic is
//! [`uqbench_core::CalibrationRule::Conformal`]'s.

use serde::Deserialize;
use uqbench_core::{CalibrationRule, Likelihood, MethodError, Prediction};

use crate::split::{default_fraction, HeldOut};
use crate::Calibrator;

/// The conformity score of `Conformal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Score {
    /// |y − μ(x)|.
    #[default]
    Absolute,
    /// |y − μ(x)| / s(x), s the base's predictive sd of y.
    Normalized,
}

/// The settings of `Conformal` (a `[methods.NAME]` table; `base` is resolved by the caller).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConformalConfig {
    /// The method table whose method is calibrated.
    pub base: String,
    /// The share of each repetition's training points held out for calibration.
    #[serde(default = "default_fraction")]
    pub calibration_fraction: f64,
    /// The conformity score.
    #[serde(default)]
    pub score: Score,
}

/// Split conformal prediction with its score.
pub struct Conformal {
    /// The score.
    pub score: Score,
}

impl Calibrator for Conformal {
    fn conformal(&self) -> bool {
        true
    }

    fn describe(&self) -> &'static str {
        "split conformal prediction"
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
        let normalized = self.score == Score::Normalized;
        crate::scaled::calibrate(held, out, cal, CalibrationRule::Conformal, normalized)
    }
}
