//! `uqbench metrics`: every applicable metric of a JSON file of predictions.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;
use uqbench_experiment::metrics::{compute, Input, Options};

/// Arguments of `uqbench metrics`.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Input JSON: {"kind": "regression", "mean": [..], "std": [..], "y": [..], "samples":
    /// [[..], ..]}, {"kind": "classification", "probs": [[..], ..], "labels": [..]} or
    /// {"kind": "draws", "draws": [[..chain 0..], [..chain 1..], ..]} (MCMC diagnostics), or
    /// {"kind": "joint", "samples" | "mean" with "cov" or "std", "sigma", "exact_mean" and
    /// "exact_cov" and/or "truth"[, "tau", "kappa", "batches", "seed"]} (joint predictions,
    /// docs/metrics.md).
    #[arg(long, required_unless_present = "catalogue")]
    pub input: Option<PathBuf>,
    /// Print the catalogue of the metrics a run computes instead (name, track, index,
    /// direction, where it is computed, report column, figures), as JSON.
    #[arg(long, conflicts_with = "input")]
    pub catalogue: bool,
    /// Bins of the classification calibration errors (equal width for ECE/RMSCE/SCE, equal
    /// mass for ACE/TACE).
    #[arg(long, default_value_t = 15)]
    pub bins: usize,
    /// Interval levels for regression coverage, width and interval score (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "0.95,0.9,0.8,0.7")]
    pub levels: Vec<f64>,
    /// Probability threshold of the thresholded adaptive calibration error (TACE).
    #[arg(long, default_value_t = 0.01)]
    pub tace_threshold: f64,
}

/// Runs `uqbench metrics`.
pub fn run(args: &MetricsArgs) -> Result<()> {
    let Some(path) = &args.input else {
        let list = serde_json::to_value(uqbench_experiment::summary::catalogue::METRICS)?;
        outln!("{list}");
        return Ok(());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read metrics input {}", path.display()))?;
    let input: Input = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a metrics input: expected {{\"kind\": \"regression\", \"mean\", \"std\", \"y\"[, \
             \"samples\"]}}, {{\"kind\": \"classification\", \"probs\", \"labels\"}} or \
             {{\"kind\": \"draws\", \"draws\": [[chain 0], [chain 1], ..]}} or {{\"kind\": \"joint\", \
             ..}} (docs/metrics.md)",
            path.display()
        )
    })?;
    let out = compute(
        &input,
        &Options {
            bins: args.bins,
            levels: args.levels.clone(),
            tace_threshold: args.tace_threshold,
        },
    )?;
    outln!("{}", Value::Object(out));
    Ok(())
}
