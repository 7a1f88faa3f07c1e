//! Summaries of per-repetition predictions: the metrics of spec §2 and §4 per test input and
//! method, aggregates per region, and their JSON and CSV files. Used by `run`, `score` and
//! `report` alike, so external predictions are summarised exactly like native ones.
//!
//! - `types`: what a run stores per repetition and what a summary holds, and the intervals
//!   of each predictive family (normal, Student t, empirical);
//! - `compute`: the metrics;
//! - `by_rep`: each repetition's value of every region aggregate (for paired comparisons);
//! - `empirical`: the intervals and CRPS of an empirical family from its draws;
//! - `distance`: W2 and KL from a method's predictive of f to the anchor's, per test input;
//! - `classify`: the classification track's stored repetition and its metrics against the
//!   exact P(y = 1 | x) (interval coverage and width, ECE, Brier, NLL, entropies, accuracy,
//!   AUC, referral curves, reliability diagram), in the same summary types;
//! - [`joint`]: the joint predictions' KL at τ inputs against the exact posterior and the
//!   data-generating distribution (spec §10), per repetition and region;
//! - [`names`]: the metric and region names, in one place;
//! - `regions`: each region's test inputs, shared or per repetition;
//! - `scalar`: a region aggregate or scalar with its standard error and its count of ±∞;
//! - `random`: the test inputs of a random-design setting (each repetition's own);
//! - `files`: summary.json, summary.csv, aggregate.csv and repetitions.csv.

mod by_rep;
pub mod catalogue;
mod classify;
mod compute;
mod distance;
mod empirical;
pub(crate) mod files;
mod grouped;
pub mod joint;
mod levels;
pub mod names;
mod random;
mod regions;
mod scalar;
mod types;

pub use by_rep::{RepetitionEntry, REPETITIONS_COLUMNS};
pub use classify::{
    referral_fractions, summarize_classification, test_labels, ClassRep, ECE_BINS, TEST_LABELS,
};
pub use compute::summarize_setting;
pub use distance::to_anchor;
pub use files::REPETITIONS_CSV;
pub use random::RANDOM;
pub use regions::regions;
pub use types::{
    empirical, level_name, with_coverage_level, AnchorRef, ByRepetition, NoiseSd, RepContext,
    RepInputs, RepResult, Scalar, SettingSummary, Summary, TestInfo, ANCHOR, UNDERFIT_FACTOR,
};
