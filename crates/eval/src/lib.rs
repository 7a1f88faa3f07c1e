//! uqbench's evaluation, without burn: what `run`, `report`, `merge`, `score` and the Python
//! package share.
//!
//! - [`spec`]: experiment specs (the TOML files in `experiments/`), profiles, settings, the
//!   run's noise source;
//! - [`predict`]: a method's predictions for repetitions of a setting turned into its track's
//!   stored form, the same path for every method (the anchor included);
//! - [`summary`]: the stored repetition of each track and the metrics of spec §2, §4 and §8
//!   (per test input and per region, error bars over repetitions) and their files;
//! - [`store`]: atomic writes, the run directory's paths and its `run.json`.
//! - [`error`]: the crate's error type, `EvalError`.

pub mod error;
pub mod predict;
pub mod spec;
pub mod store;
pub mod summary;

pub use error::{Context, EvalError, Result};
