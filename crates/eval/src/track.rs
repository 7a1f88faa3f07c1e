//! The two tracks a problem's results take: regression (a predictive distribution of f and y
//! per test input, judged against the truth and the anchor) and classification (draws of
//! P(y = 1 | x), judged against the exact probability and fresh labels). A track owns its
//! stored repetition ([`Stored`]), how a method's output becomes one, how it is read back and
//! how a setting's repetitions are summarised; the runner, `report` and `score` go through it
//! once instead of branching on the problem.

use std::collections::BTreeMap;
use std::path::Path;

use uqbench_anchor::{logistic, Problem};
use uqbench_core::Prediction;

use crate::error::{Context, Result};
use crate::store::read_json;
use crate::summary::{self, ClassRep, RepContext, RepResult, SettingSummary, TestInfo};

/// A problem's track.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Track {
    /// Regression: targets with Gaussian noise, results [`RepResult`].
    Regression,
    /// Classification: labels 0/1, results [`ClassRep`].
    Classification,
}

/// One repetition's result in its track's stored form.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    /// A regression problem's.
    Regression(RepResult),
    /// A classification problem's.
    Classification(ClassRep),
}

impl Stored {
    /// The file's text.
    pub fn to_json(&self) -> Result<String> {
        Ok(match self {
            Stored::Regression(r) => serde_json::to_string(r)?,
            Stored::Classification(r) => serde_json::to_string(r)?,
        })
    }

    /// The regression result, if it is one.
    pub fn regression(self) -> Option<RepResult> {
        match self {
            Stored::Regression(r) => Some(r),
            Stored::Classification(_) => None,
        }
    }
}

impl Track {
    /// The track of a resolved problem.
    pub fn of(problem: &Problem) -> Track {
        if problem.classification().is_some() {
            Track::Classification
        } else {
            Track::Regression
        }
    }

    /// A method's output for repetition `rep` in stored form. Regression: the training fit's
    /// scalars and, for an empirical family, its intervals at every level from its samples.
    /// Classification: the draws (members × passes) are logits, turned into probabilities by
    /// the logistic function in f64 and reduced to their mean, intervals and mean entropy.
    pub fn store(self, rep: u64, out: Prediction, ctx: &RepContext<'_>) -> Result<Stored> {
        Ok(match self {
            Track::Regression => Stored::Regression(RepResult::from_output(rep, out, ctx)?),
            Track::Classification => {
                let samples = out.samples.context(
                    "a classification method must return its members' or passes' logits",
                )?;
                let draws: Vec<Vec<f64>> = samples
                    .iter()
                    .map(|row| row.iter().map(|&f| logistic(f)).collect())
                    .collect();
                let mut r =
                    ClassRep::from_draws(rep, &draws, ctx.levels, out.scalars, out.diverged)?;
                if let (Some(input), false) = (ctx.joint, r.diverged) {
                    r.joint = summary::joint::classification(&draws, ctx.truth, input)
                        .with_context(|| format!("repetition {rep}: joint metrics"))?;
                }
                Stored::Classification(r)
            }
        })
    }

    /// Reads a stored repetition; a missing file is an error that says how to complete the
    /// run.
    pub fn read(self, path: &Path) -> Result<Stored> {
        Ok(match self {
            Track::Regression => Stored::Regression(read_json(path)?),
            Track::Classification => Stored::Classification(read_json(path)?),
        })
    }

    /// Summarises one setting: every method's repetitions (all of this track's form). The
    /// regression track summarises the anchor first (its uncertainty and deviation are the
    /// references of the other methods); the classification track scores each method against
    /// the exact probability and the fresh test labels `labels(rep)`.
    pub fn summarize_setting(
        self,
        setting: &str,
        test: TestInfo,
        methods: BTreeMap<String, Vec<Stored>>,
        levels: &[f64],
        labels: &dyn Fn(u64) -> Vec<bool>,
    ) -> Result<SettingSummary> {
        match self {
            Track::Regression => {
                let methods: BTreeMap<String, Vec<RepResult>> = methods
                    .into_iter()
                    .map(|(m, reps)| (m, reps.into_iter().filter_map(Stored::regression).collect()))
                    .collect();
                summary::summarize_setting(setting, test, &methods, levels)
            }
            Track::Classification => {
                let mut out = BTreeMap::new();
                for (m, reps) in methods {
                    let reps: Vec<ClassRep> = reps
                        .into_iter()
                        .filter_map(|s| match s {
                            Stored::Classification(r) => Some(r),
                            Stored::Regression(_) => None,
                        })
                        .collect();
                    let s = summary::summarize_classification(&test, &reps, levels, labels)
                        .with_context(|| format!("method {m} at setting {setting}"))?;
                    out.insert(m, s);
                }
                Ok(SettingSummary {
                    setting: setting.to_string(),
                    test,
                    methods: out,
                })
            }
        }
    }
}
