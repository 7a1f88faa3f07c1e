//! Summaries of per-repetition predictions: the metrics of spec §2 and §4 per test input and
//! method, aggregates per region, and their JSON and CSV files. Used by `run`, `score` and
//! `report` alike, so external predictions are summarised exactly like native ones.
//!
//! - `types`: what a run stores per repetition and what a summary holds, and the intervals
//!   of each predictive family (normal, Student t, empirical);
//! - `compute`: the metrics;
//! - `files`: summary.json, summary.csv and aggregate.csv.

mod compute;
mod files;
mod types;

pub use compute::{anchor_rep, summarize_setting};
pub use types::{
    empirical, level_name, with_coverage_level, RepContext, RepResult, Scalar, SettingSummary,
    Summary, TestInfo, ANCHOR, UNDERFIT_FACTOR,
};
