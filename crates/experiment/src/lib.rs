//! An experiment of uqbench apart from its training, without burn: its spec (the TOML files in
//! `experiments/`), its methods' predictions as stored repetitions, its run directory, its
//! summaries and comparisons; what `run`, `report`, `merge`, `score`, `compare` and the Python
//! package share.
//!
//! - [`compare`]: every pair of methods compared repetition by repetition (paired t,
//!   bootstrap, Holm) and rankings whose ties the data do not separate;
//! - [`kinds`]: the catalogue of method kinds a spec may name (burn-free, for the Python
//!   package too);
//! - [`spec`]: experiment specs (the TOML files in `experiments/`), profiles, settings, the
//!   run's noise source;
//! - [`metrics`]: every metric of one input of predictions (`uqbench metrics`);
//! - [`predict`]: a method's predictions for repetitions of a setting turned into its track's
//!   stored form, the same path for every method (the anchor included);
//! - [`rank`]: the decision track's headline analysis: Spearman's ρ across methods between
//!   their decisions and their standard-track scores, with a bootstrap interval;
//! - [`score`]: predictions made elsewhere summarised like a native run's, the anchor
//!   alongside;
//! - [`summary`]: the stored repetition of each track and the metrics of spec §2, §4 and §8
//!   (per test input and per region, error bars over repetitions) and their files;
//! - [`track`]: the two tracks (regression, classification): each one's stored repetition,
//!   how an output becomes one, how it is read and summarised;
//! - [`decision`]: the decision track (spec §12): a problem as a bandit or an active-learning
//!   pool, the exact Thompson sampler and exact learner, the baselines, regret and `al_auc`;
//! - [`draws`]: a repetition's joint predictive on disk (`rep-NNN.draws`, 8 bits or f32 per
//!   value), written by a run, read by `uqbench draws` and the Python package;
//! - [`store`]: atomic writes, the run directory's paths and its `run.json`.
//! - [`error`]: the crate's error type, `ExperimentError`, and its [`ErrorKind`] (what a
//!   caller acts on: invalid input, a run directory, I/O, a failure).

pub mod compare;
pub mod decision;
pub mod draws;
pub mod error;
pub mod json;
pub mod kinds;
pub mod metrics;
pub mod predict;
pub mod rank;
pub mod score;
pub mod spec;
pub mod store;
pub mod summary;
pub mod track;

#[cfg(test)]
mod decision_agent_tests;
#[cfg(test)]
mod decision_tests;

pub use error::{Context, ErrorKind, ExperimentError, Result};
pub use track::{AggregateTables, ReportPlan, Stored, Track};
