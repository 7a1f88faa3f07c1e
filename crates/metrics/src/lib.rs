//! Uncertainty metrics on plain f64 slices. No burn, no knowledge of which method produced
//! the numbers: predictions come in as means, standard deviations, intervals, samples or
//! class probabilities, and numbers come out.
//!
//! - [`coverage`]: pointwise deviation/uncertainty/coverage over repetitions (spec §2), binomial
//!   intervals (Wilson, Clopper–Pearson), CICF/PICF and their Brier scores (spec §4).
//! - [`regression`]: RMSE, MAE, Gaussian NLL, CRPS (closed form and samples), interval score,
//!   calibration curves and miscalibration area.
//! - [`classification`]: accuracy, Brier score and decomposition, NLL, ECE/RMSCE/SCE/ACE/TACE
//!   (one general calibration error), reliability diagrams, ensemble entropies.
//! - [`information`]: WAIC (types 1 and 2) and importance-sampling CV with standard errors.
//! - [`ranking`]: ROC AUC and referral curves.
//! - [`paired`]: paired comparisons of two methods over repetitions (t interval and test,
//!   paired bootstrap, minimum detectable difference) and Holm's correction.
//! - [`joint`]: joint predictive distributions of y at τ inputs and the KL between them
//!   (closed form for Gaussians, Monte Carlo otherwise, exact enumeration for labels; spec §10).
//! - [`erfcx`]: the scaled complementary error function, and Φ with φ from one exponential.
//! - [`mixture`]: quantiles of mixtures of normals (prediction intervals from draws).
//! - [`mcmc`]: rank-normalised split-R̂ (bulk, tail), bulk and tail ESS, MCSE, E-BFMI and
//!   divergent transitions (spec §8).

pub mod classification;
pub mod coverage;
pub mod distance;
pub mod erfcx;
pub mod error;
pub mod information;
pub mod joint;
pub mod mcmc;
pub mod mixture;
pub mod paired;
pub mod ranking;
pub mod regression;
mod rng;

pub use error::MetricError;
