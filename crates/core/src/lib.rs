//! What learning and evaluation share, without burn: the seam of uqbench.
//!
//! - [`seed`]: the one seed derivation ([`SeedPath`]) and the portable generator ([`Rng`]).
//! - [`task`]: what a method gets ([`Task`], with its [`Likelihood`], features and noise),
//!   the [`Compute`] it may use, and the [`Method`] trait that every method implements — the
//!   deep methods on burn (`uqbench-models`), the Gaussian process (`uqbench-gp`) and the
//!   anchor (`uqbench-anchor`) alike.
//! - [`prediction`]: what a method returns per repetition ([`Prediction`]), its predictive
//!   [`Family`] and the quantiles its intervals use, and the combination of an ensemble's
//!   members.
//! - [`noise`]: the noise settings methods share (`tau`, `noise_sd`: a number or `"known"`).
//! - [`error`]: [`MethodError`], what a method's settings or run can get wrong.
//! - [`calibration`]: what a calibrated prediction stores ([`Calibration`]: the rule, the
//!   held-out residuals or scores, the scale) and the intervals of y it gives at any level.
//!   The rules that fit it, and the methods around another method, are `uqbench-posthoc`.
//! - [`parallel`]: [`par_map`], host work over the cores in a fixed order.
//!
//! Evaluation (summaries, figures, reports, scoring) and the Python package depend on this
//! crate, never on burn.

pub mod calibration;
pub mod error;
pub mod noise;
pub mod parallel;
pub mod prediction;
pub mod seed;
pub mod task;

pub use calibration::{Calibration, CalibrationRule, Jackknife, QuantileBand};
pub use error::MethodError;
pub use noise::{fixed_noise_sd, start_sigma2, KnownSigma, Tau, NOISE_PRIOR};
pub use parallel::par_map;
pub use prediction::{
    central_quantile, combine_members, mean_std, Extra, FactorJoint, Family, IntervalSetting,
    Member, MonteCarloErrors, Prediction, TMarginals,
};
pub use seed::{Rng, SeedPath};
pub use task::{
    run_each, run_warm_each, Compute, Features, Likelihood, Method, NoiseInfo, Replicas, SeedBase,
    SimdCap, Task, WarmStart, WarmState,
};
