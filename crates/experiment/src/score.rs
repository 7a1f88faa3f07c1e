//! Scoring predictions made elsewhere (`uqbench score`, the Python package): a method's
//! stored repetitions of one setting, summarised exactly like a native run's, with the anchor
//! alongside where the problem has one.

use std::collections::BTreeMap;

use uqbench_anchor::{Anchor, Blr, Problem, Setting, ANCHOR};
use uqbench_core::{Compute, Extra, Family, Prediction, SeedPath};

use crate::bail;
use crate::error::Result;
use crate::predict::{label_source, predict};
use crate::spec::ExperimentSpec;
use crate::summary::joint::{factor_of, Exact, JointInput, JointSettings, JOINT_DRAWS};
use crate::summary::{self, ClassRep, RepContext, RepResult, SettingSummary, TestInfo};
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
        methods.insert(
            ANCHOR.to_string(),
            anchor.into_iter().map(|p| p.stored).collect(),
        );
    }
    methods.insert(method.to_string(), external);
    let labels = label_source(spec, problem);
    track.summarize_setting(
        &setting.label(),
        TestInfo::for_repetitions(problem, &reps)?,
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
        /// Its standard deviation (the square roots of `cov`'s diagonal when absent).
        std: Option<Vec<f64>>,
        /// The noise sd of y, when the method has one.
        noise_std: Option<Vec<f64>>,
        /// The covariance of f at the test inputs (`[M][M]`): a Gaussian joint, for the joint
        /// metrics; without it, the joint is the product of the marginals.
        cov: Option<Vec<Vec<f64>>>,
    },
    /// Draws of f per test input (`samples[i]`: the draws at input i): an empirical
    /// predictive distribution, intervals from their quantiles; a draw is one function (the
    /// same k across inputs), so the draws also give the joint.
    Samples {
        /// The draws, `[M][S]`.
        samples: Vec<Vec<f64>>,
        /// The noise sd of y that goes with each draw (`[S]`), when the method draws it.
        noise_std: Option<Vec<f64>>,
        /// The noise sd of y of each draw at each test input (`[M][S]`, like `samples`), when
        /// every draw has its own σ(x) (a mean–variance ensemble's members).
        sample_noise: Option<Vec<Vec<f64>>>,
    },
}

/// Checks external draws (`[M][S]`) and their noise sds for `m` test inputs: one row of
/// draws per input, `noise_std` one value > 0 per draw, `sample_noise` (`[M][S]`) one per draw
/// and input, not both; returns `sample_noise` as rows per draw (`[S][M]`).
fn check_samples(
    draws: &[Vec<f64>],
    noise_std: Option<&[f64]>,
    sample_noise: Option<Vec<Vec<f64>>>,
    m: usize,
) -> Result<Option<Vec<Vec<f64>>>> {
    if draws.len() != m {
        bail!(
            "samples for {} test inputs, but the problem has {m} (one row of draws per test \
             input, in test order)",
            draws.len()
        );
    }
    let s = draws.first().map_or(0, Vec::len);
    if let Some(n) = noise_std {
        if n.len() != s || n.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
            bail!(
                "noise_std with samples: {} values; valid: one finite value > 0 per draw ({s})",
                n.len()
            );
        }
    }
    let Some(n) = sample_noise else {
        return Ok(None);
    };
    let bad = n.len() != m
        || n.iter()
            .any(|r| r.len() != s || r.iter().any(|v| !(v.is_finite() && *v > 0.0)));
    if bad {
        bail!(
            "sample_noise with samples: valid: one row per test input ({m}) of one finite value \
             > 0 per draw ({s})"
        );
    }
    if noise_std.is_some() {
        bail!("noise_std (per draw) and sample_noise (per draw and input): give one");
    }
    Ok(Some(transpose(&n)))
}

/// `[M][S]` (one row per test input) as `[S][M]` (one row per draw), as methods return draws.
fn transpose(cols: &[Vec<f64>]) -> Vec<Vec<f64>> {
    (0..cols[0].len())
        .map(|k| cols.iter().map(|c| c[k]).collect())
        .collect()
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

/// The joint metrics of scored predictions: the settings, and the seed of the run they
/// stand in for (the spec's seed and name), so that a scored repetition draws the same
/// batches and y as a native one.
#[derive(Debug, Clone)]
pub struct JointScoring {
    /// τ, κ, batches.
    pub settings: JointSettings,
    /// The spec's seed.
    pub base: u64,
    /// The spec's name.
    pub experiment: String,
}

impl JointScoring {
    /// The joint metrics' input for repetition `rep` of `problem`, seeded as its run would be.
    fn input<'a>(
        &'a self,
        rep: u64,
        label: &'a str,
        regions: &'a [(&'static str, Vec<usize>)],
        exact: Option<Exact<'a>>,
    ) -> JointInput<'a> {
        JointInput {
            settings: &self.settings,
            seed: SeedPath {
                base: self.base,
                experiment: &self.experiment,
                setting: label,
                repetition: rep,
                member: 0,
                purpose: JOINT_DRAWS,
            },
            regions,
            exact,
        }
    }

    /// The spec's joint settings (its `[run]`'s, else the defaults).
    pub fn of(spec: &ExperimentSpec) -> Option<JointScoring> {
        let settings = spec.joint_settings()?;
        Some(JointScoring {
            settings,
            base: spec.seed,
            experiment: spec.name.clone(),
        })
    }
}

/// The square roots of a covariance matrix's diagonal (NaN where a row is too short).
fn diagonal_sd(cov: &[Vec<f64>]) -> Vec<f64> {
    cov.iter()
        .enumerate()
        .map(|(i, r)| r.get(i).copied().unwrap_or(f64::NAN).max(0.0).sqrt())
        .collect()
}

/// Repetition `rep`'s view of `problem`, with its own anchor fit where it has its own inputs
/// (a random design) and `fit` asks for one; otherwise the problem's own fit serves.
pub fn own_inputs(
    problem: &Problem,
    rep: u64,
    fit: bool,
) -> Result<(std::borrow::Cow<'_, Problem>, Option<Anchor>)> {
    let own = problem.at_repetition(rep)?;
    let fitted = match &own {
        std::borrow::Cow::Owned(p) if fit => Some(Anchor::fit(p)?),
        _ => None,
    };
    Ok((own, fitted))
}

/// Both `std` and `cov` given: the marginals are scored from `std` and the joints from `cov`,
/// so they must describe one distribution. The variances must agree to a relative 1e-4
/// (predictions computed in f32 and written as decimals agree to ~1e-7; a real contradiction,
/// such as `std` of y beside `cov` of f, is off by far more).
fn std_agrees_with_cov(std: &[f64], cov: &[Vec<f64>]) -> Result<()> {
    for (i, s) in std.iter().enumerate() {
        let Some(c) = cov.get(i).and_then(|row| row.get(i)) else {
            return Ok(()); // the shape check (factor_of) names a short cov
        };
        let v = s * s;
        if !((v - c).abs() <= 1e-4 * v.abs().max(c.abs()) + 1e-300) {
            bail!(
                "std[{i}]² = {v} but cov[{i}][{i}] = {c}: `std` (the marginals) and `cov` (the \
                 joint) disagree; give one, or std = √diag(cov)"
            );
        }
    }
    Ok(())
}

/// Repetition `rep` of external regression predictions for `problem`, checked against its
/// test inputs, in stored form with intervals at `levels` (and 0.95), the distances to the
/// anchor and (with `joint`) the joint metrics: the same path as a native method's
/// ([`RepResult::from_output`]). `anchor` is the problem's anchor fit ([`Anchor::fit`], made
/// once per problem by the caller; None without an anchor): the repetition's exact posterior
/// comes from it.
pub fn regression_rep(
    rep: u64,
    prediction: External,
    problem: &Problem,
    anchor: Option<&Anchor>,
    levels: &[f64],
    joint: Option<&JointScoring>,
) -> Result<RepResult> {
    let (problem, own_fit) = own_inputs(problem, rep, anchor.is_some())?;
    let anchor = own_fit.as_ref().or(anchor);
    let problem = problem.as_ref();
    let m = problem.test.truth.len();
    let mut per_draw_input = None;
    let (mean, std, noise_std, samples, noise_samples, cov) = match prediction {
        External::Gaussian {
            mean,
            std,
            noise_std,
            cov,
        } => {
            let std = match (std, &cov) {
                (Some(s), Some(c)) => {
                    std_agrees_with_cov(&s, c)?;
                    s
                }
                (Some(s), None) => s,
                (None, Some(c)) => diagonal_sd(c),
                (None, None) => bail!("`std` or `cov` is needed with `mean`"),
            };
            (mean, std, noise_std, None, None, cov)
        }
        External::Samples {
            samples: draws,
            noise_std,
            sample_noise,
        } => {
            per_draw_input = check_samples(&draws, noise_std.as_deref(), sample_noise, m)?;
            let (mean, std) = from_samples(&draws)?;
            (mean, std, None, Some(draws), noise_std, None)
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
    let factor = cov.as_deref().map(|c| factor_of(c, m)).transpose()?;
    // Draws become rows (one per draw), as methods return them.
    let rows = samples.as_deref().map(transpose);
    let mut out = Prediction {
        family: if rows.is_some() {
            Family::Empirical
        } else {
            Family::Normal
        },
        mean,
        std,
        noise_std,
        samples: rows,
        extra: Extra::joint(factor),
        ..Default::default()
    };
    out.extra.noise_samples = noise_samples;
    out.extra.sample_noise = per_draw_input;
    // The exact posterior of the same repetition, where the problem has one.
    let train_y = problem.draw(rep).train_y;
    let posterior = anchor.and_then(|a| a.posterior(&train_y).ok());
    let regions = summary::regions(&TestInfo::of(problem));
    let label = problem.setting.label();
    let joint_input =
        joint.map(|j| j.input(rep, &label, &regions, posterior.as_ref().map(Exact::of)));
    let ctx = RepContext {
        anchor: posterior.as_ref().map(|p| summary::AnchorRef {
            mean: &p.mean,
            std: &p.std,
            dof: p.dof,
        }),
        joint: joint_input.as_ref(),
        levels,
        truth: &problem.test.truth,
        test_sigma: &problem.test.sigma,
        train_y: &train_y,
        train_sigma: &problem.train_sigma,
    };
    RepResult::from_output(rep, out, &ctx)
}

/// Repetition `rep` of external classification predictions for `problem`: per test input one
/// P(y = 1 | x), or the draws (members', passes') of it, checked and in stored form with
/// intervals at `levels`.
pub fn classification_rep(
    rep: u64,
    per_input: Vec<Vec<f64>>,
    problem: &Problem,
    levels: &[f64],
    joint: Option<&JointScoring>,
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
    let mut out = ClassRep::from_draws(rep, &draws, levels, BTreeMap::new(), false)?;
    if let Some(j) = joint {
        let regions = summary::regions(&TestInfo::of(problem));
        let label = problem.setting.label();
        let input = j.input(rep, &label, &regions, None);
        out.joint = summary::joint::classification(&draws, &problem.test.truth, &input)?;
    }
    Ok(out)
}
