//! The room of methods that take another method (its `base`), without burn.
//!
//! - **Post-hoc calibrations** ([`Calibrated`]): hold out part of every repetition's training
//!   set, train the base on the rest, predict the held-out points with it, and let a
//!   [`Calibrator`] turn those predictions and the held-out targets into the calibrated
//!   prediction. One file per rule:
//!   - [`conformal`]: split conformal prediction (absolute or normalised score);
//!   - [`recalibration`]: std scaling and isotonic recalibration of the predictive CDF;
//!   - [`cqr`]: the conformalisation of a quantile regression's bands (CQR);
//!   - [`temperature`]: temperature scaling of a classifier's logits.
//!
//!   What is stored per repetition (a [`uqbench_core::Calibration`], from which the
//!   evaluation computes the interval of y at any level) is a shared type of `core`; what a
//!   rule fits lives here. The held-out split, the training fit over all points and the
//!   standardised residuals that conformal prediction and the recalibrations share are in
//!   [`split`] and [`scaled`].
//! - **`inputs = "features"`** ([`inputs::FeatureInputs`]): any method on the problem's
//!   features G(x).
//!
//! **Adding a rule**: one file with a type that implements [`Calibrator`], plus one line where
//! the registry (`uqbench-methods`) maps its spec setting to it (for `Recalibrated`, a variant
//! of [`recalibration::Recalibration`] and its arm in
//! [`recalibration::RecalibratedConfig::calibrator`]).

pub mod calibrated;
pub mod conformal;
pub mod cqr;
pub mod inputs;
pub mod recalibration;
pub mod scaled;
pub mod split;
pub mod temperature;

pub use calibrated::Calibrated;
pub use conformal::{Conformal, ConformalConfig, Score};
pub use cqr::Cqr;
pub use inputs::FeatureInputs;
pub use recalibration::{Recalibrate, RecalibratedConfig, Recalibration};
pub use split::{HeldOut, DEFAULT_CALIBRATION_FRACTION};
pub use temperature::Temperature;

use uqbench_core::{Likelihood, MethodError, Prediction};

/// A post-hoc rule: what it fits on the held-out points of one repetition.
pub trait Calibrator: Send + Sync {
    /// The rule's name in errors (`"split conformal prediction"`).
    fn describe(&self) -> &'static str;

    /// The likelihood the rule calibrates; a task of another is refused before training.
    fn likelihood(&self) -> Likelihood;

    /// Whether its intervals are split-conformal order statistics of the held-out points,
    /// which at level l need ⌈(n + 1)·l⌉ ≤ n of them (checked before training).
    fn conformal(&self) -> bool {
        false
    }

    /// Calibrates one repetition: `out` is the base's prediction at the test inputs (the
    /// held-out points already split off), `cal` its prediction at the held-out points; the
    /// rule changes `out` in place (a [`uqbench_core::Calibration`], rescaled logits, scalars).
    fn calibrate(
        &self,
        held: &HeldOut<'_>,
        out: &mut Prediction,
        cal: &Prediction,
    ) -> Result<(), MethodError>;
}
