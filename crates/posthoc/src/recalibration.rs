//! Recalibration of the predictive CDF of y on held-out points: std scaling
//! (uncertainty-toolbox's std recalibration with its `nll` criterion) and isotonic
//! recalibration (Kuleshov et al. 2018), both on the standardised residuals of
//! [`crate::scaled`] with s(x) the base's predictive sd of y. Their interval arithmetic is
//! [`uqbench_core::CalibrationRule::StdScaling`]'s and `Isotonic`'s. The `Recalibrated` kind
//! also names temperature scaling, which rescales a classifier's logits instead
//! ([`crate::temperature`]).

use serde::Deserialize;
use uqbench_core::{CalibrationRule, Likelihood, MethodError, Prediction};

use crate::split::{default_fraction, HeldOut};
use crate::temperature::Temperature;
use crate::Calibrator;

/// The recalibration of `Recalibrated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recalibration {
    /// One factor on the predictive sd (maximum likelihood).
    #[default]
    StdScaling,
    /// Isotonic recalibration of the predictive CDF (Kuleshov et al. 2018).
    Isotonic,
    /// Temperature scaling of the logits (classification, Guo et al. 2017).
    Temperature,
}

/// The settings of `Recalibrated`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecalibratedConfig {
    /// The method table whose method is recalibrated.
    pub base: String,
    /// The share of each repetition's training points held out.
    #[serde(default = "default_fraction")]
    pub calibration_fraction: f64,
    /// The recalibration.
    #[serde(default)]
    pub recalibration: Recalibration,
}

impl RecalibratedConfig {
    /// The rule this table names.
    pub fn calibrator(&self) -> Box<dyn Calibrator> {
        match self.recalibration {
            Recalibration::StdScaling => Box::new(Recalibrate {
                rule: CalibrationRule::StdScaling,
            }),
            Recalibration::Isotonic => Box::new(Recalibrate {
                rule: CalibrationRule::Isotonic,
            }),
            Recalibration::Temperature => Box::new(Temperature),
        }
    }
}

/// A recalibration of the predictive CDF of y: `rule` is `StdScaling` or `Isotonic`.
pub struct Recalibrate {
    /// The rule.
    pub rule: CalibrationRule,
}

impl Calibrator for Recalibrate {
    fn describe(&self) -> &'static str {
        match self.rule {
            CalibrationRule::StdScaling => "std scaling",
            CalibrationRule::Isotonic => "isotonic recalibration",
            _ => "a recalibration",
        }
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
        crate::scaled::calibrate(held, out, cal, self.rule, true)
    }
}
