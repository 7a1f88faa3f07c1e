//! Scoring predictions made elsewhere (`uqbench score`, the Python package): a method's
//! stored repetitions of one setting, summarised exactly like a native run's, with the anchor
//! alongside where the problem has one.

use std::collections::BTreeMap;

use uqbench_anchor::{Blr, Problem, Setting, ANCHOR};
use uqbench_core::{Compute, Family};

use crate::bail;
use crate::error::Result;
use crate::predict::{label_source, predict};
use crate::spec::ExperimentSpec;
use crate::summary::{self, ClassRep, RepResult, SettingSummary, TestInfo};
use crate::track::{Stored, Track};

/// Summarises `method`'s repetitions `external` (repetition k at index k, in its track's
/// stored form) of `setting`, at interval `levels`, with the anchor computed for the same
/// repetitions through the same path as in a run.
pub fn score_setting(
    spec: &ExperimentSpec,
    setting: &Setting,
    problem: &Problem,
    method: &str,
    external: Vec<Stored>,
    levels: &[f64],
) -> Result<SettingSummary> {
    if method == ANCHOR {
        bail!("method name {ANCHOR}: that name is the anchor's; choose another");
    }
    let track = Track::of(problem);
    let reps: Vec<u64> = (0..external.len() as u64).collect();
    let mut methods = BTreeMap::new();
    if problem.linear().is_some() {
        let anchor = predict(
            spec,
            setting,
            problem,
            &Blr,
            &reps,
            &Compute::host(),
            &|_| {},
        )?;
        methods.insert(ANCHOR.to_string(), anchor);
    }
    methods.insert(method.to_string(), external);
    let labels = label_source(spec, problem);
    track.summarize_setting(
        &setting.label(),
        TestInfo::of(problem),
        methods,
        levels,
        &labels,
    )
}

/// One repetition's predictions of a regression problem, made elsewhere.
#[derive(Debug, Clone, PartialEq)]
pub enum External {
    /// A normal predictive distribution of f per test input, optionally with the noise sd of
    /// y (the problem's σ(x) otherwise).
    Gaussian {
        /// Prediction of f.
        mean: Vec<f64>,
        /// Its standard deviation.
        std: Vec<f64>,
        /// The noise sd of y, when the method has one.
        noise_std: Option<Vec<f64>>,
    },
    /// Draws of f per test input (`samples[i]`: the draws at input i): an empirical
    /// predictive distribution, intervals from their quantiles.
    Samples(Vec<Vec<f64>>),
}

/// Mean and sample standard deviation (n − 1) of each test input's draws.
fn from_samples(samples: &[Vec<f64>]) -> Result<(Vec<f64>, Vec<f64>)> {
    let mut mean = Vec::with_capacity(samples.len());
    let mut std = Vec::with_capacity(samples.len());
    for (i, s) in samples.iter().enumerate() {
        if s.len() < 2 {
            bail!(
                "samples[{i}] has {} draws; at least 2 are needed for a std",
                s.len()
            );
        }
        if let Some(v) = s.iter().find(|v| !v.is_finite()) {
            bail!("samples[{i}] holds {v}: draws must be finite");
        }
        let n = s.len() as f64;
        let m = s.iter().sum::<f64>() / n;
        mean.push(m);
        std.push((s.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt());
    }
    Ok((mean, std))
}

/// Repetition `rep` of external regression predictions for `problem`, checked against its
/// test inputs, in stored form with intervals at `levels` (and 0.95).
pub fn regression_rep(
    rep: u64,
    prediction: External,
    problem: &Problem,
    levels: &[f64],
) -> Result<RepResult> {
    let m = problem.test.truth.len();
    let (mean, std, noise_std, samples) = match prediction {
        External::Gaussian {
            mean,
            std,
            noise_std,
        } => (mean, std, noise_std, None),
        External::Samples(draws) => {
            if draws.len() != m {
                bail!(
                    "samples for {} test inputs, but the problem has {m} (one row of draws per \
                     test input, in test order)",
                    draws.len()
                );
            }
            let (mean, std) = from_samples(&draws)?;
            (mean, std, None, Some(draws))
        }
    };
    if mean.len() != m || std.len() != m {
        bail!(
            "{} means and {} stds, but the problem has {m} test inputs (one per test input, in \
             test order)",
            mean.len(),
            std.len()
        );
    }
    if let Some((i, v)) = mean.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        bail!("mean[{i}] = {v}: predictions must be finite");
    }
    if let Some((i, v)) = std
        .iter()
        .enumerate()
        .find(|(_, v)| !(v.is_finite() && **v >= 0.0))
    {
        bail!("std[{i}] = {v}: a standard deviation must be finite and ≥ 0");
    }
    if let Some(n) = &noise_std {
        if n.len() != m || n.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
            bail!("noise_std needs {m} finite values ≥ 0");
        }
    }
    let (family, intervals, crps) = match &samples {
        Some(columns) => {
            let (intervals, crps) = summary::empirical(
                columns,
                summary::NoiseSd::PerPoint(noise_std.as_deref().unwrap_or(&problem.test.sigma)),
                &summary::with_coverage_level(levels),
                &problem.test.truth,
            )?;
            (Family::Empirical, intervals, Some(crps))
        }
        None => (Family::Normal, BTreeMap::new(), None),
    };
    // The distance to the exact posterior of the same repetition, where the problem has one.
    let posterior = problem
        .linear()
        .and_then(|_| uqbench_anchor::Anchor::fit(problem).ok())
        .and_then(|a| a.posterior(&problem.draw(rep).train_y).ok());
    let (w2_anchor, kl_anchor) = match &posterior {
        Some(p) => {
            let as_prediction = uqbench_core::Prediction {
                mean: mean.clone(),
                std: std.clone(),
                family,
                ..Default::default()
            };
            let anchor = summary::AnchorRef {
                mean: &p.mean,
                std: &p.std,
                dof: p.dof,
            };
            let (w, k) = summary::to_anchor(&as_prediction, samples.as_deref(), &anchor);
            (Some(w), k)
        }
        None => (None, None),
    };
    Ok(RepResult {
        repetition: rep,
        mean,
        std,
        noise_std,
        predictive_std: None,
        family,
        intervals,
        calibrated_pi: BTreeMap::new(),
        w2_anchor,
        kl_anchor,
        crps,
        scalars: BTreeMap::new(),
        diverged: false,
    })
}

/// Repetition `rep` of external classification predictions for `problem`: per test input one
/// P(y = 1 | x), or the draws (members', passes') of it, checked and in stored form with
/// intervals at `levels`.
pub fn classification_rep(
    rep: u64,
    per_input: Vec<Vec<f64>>,
    problem: &Problem,
    levels: &[f64],
) -> Result<ClassRep> {
    let m = problem.test.truth.len();
    if per_input.len() != m {
        bail!(
            "predictions for {} test inputs, but the problem has {m} (one per test input, in \
             test order)",
            per_input.len()
        );
    }
    let t = per_input[0].len();
    for (i, d) in per_input.iter().enumerate() {
        if d.is_empty() || d.len() != t {
            bail!(
                "test input {i} has {} draws, test input 0 has {t}; every input needs the \
                 same number, at least one",
                d.len()
            );
        }
        if let Some(p) = d.iter().find(|p| !(0.0..=1.0).contains(*p)) {
            bail!("test input {i}: probability {p}; valid: a number in [0, 1]");
        }
    }
    let draws: Vec<Vec<f64>> = (0..t)
        .map(|k| per_input.iter().map(|d| d[k]).collect())
        .collect();
    ClassRep::from_draws(rep, &draws, levels, BTreeMap::new(), false)
}
