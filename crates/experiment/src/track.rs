//! The two tracks a problem's results take: regression (a predictive distribution of f and y
//! per test input, judged against the truth and the anchor) and classification (draws of
//! P(y = 1 | x), judged against the exact probability and fresh labels). A track owns its
//! stored repetition ([`Stored`]), how a method's output becomes one, how it is read back and
//! how a setting's repetitions are summarised; the runner, `report` and `score` go through it
//! once instead of branching on the problem.

use std::collections::BTreeMap;
use std::path::Path;

use uqbench_anchor::{logistic, Problem, ProblemKind};
use uqbench_core::Prediction;

use crate::error::{Context, Result};
use crate::store::read_json;
use crate::summary::{self, names, ClassRep, RepContext, RepResult, SettingSummary, TestInfo};

/// A problem's track.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
            Stored::Regression(r) => crate::json::to_string(r)?,
            Stored::Classification(r) => crate::json::to_string(r)?,
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

/// How `report.md` presents a track's results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportPlan {
    /// Whether the report states the noise source of methods without a noise model (the
    /// prediction intervals of y need one).
    pub states_noise: bool,
    /// The aggregate tables.
    pub aggregates: AggregateTables,
    /// The metrics the report ranks methods by ("which differences are real"), where the run
    /// has them.
    pub ranked: [&'static str; 2],
}

/// The aggregate tables of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateTables {
    /// One table per setting: coverage per region, deviation, uncertainty and their ratios to
    /// the anchor's, fit, CICF Brier, W2, the learned rate.
    Regression,
    /// One table per setting against the exact P(y = 1 | x) and fresh labels.
    Classification,
}

impl Track {
    /// The figures of one setting that apply to the track, by their names in the figures'
    /// table (the rest of a run's figures are against the swept variables).
    pub fn setting_figures(self) -> &'static [&'static str] {
        match self {
            Track::Regression => &[
                "bands",
                "heatmaps",
                "coverage_along",
                "coverage_histograms",
                "distance_along",
                "joint",
            ],
            Track::Classification => &["joint", "classification"],
        }
    }

    /// The metrics of the figure of region aggregates against a swept variable, with the
    /// level of those that have one (drawn as the nominal line): regression's deviation,
    /// uncertainty, coverage, CICP and width; classification's coverage of P, width, ECE and
    /// |P̂ − P|. `level` is the run's first level.
    pub fn against_metrics(self, level: Option<f64>) -> Vec<(String, Option<f64>)> {
        let mut out: Vec<(String, Option<f64>)> = Vec::new();
        let levelled = |out: &mut Vec<(String, Option<f64>)>, coverage: &str| {
            if let Some(l) = level {
                out.push((names::at(coverage, l), Some(l)));
                out.push((names::at(names::WIDTH, l), None));
            }
        };
        match self {
            Track::Regression => {
                out.push((names::DEVIATION.into(), None));
                out.push((names::UNCERTAINTY.into(), None));
                out.push((names::COVERAGE.into(), Some(0.95)));
                levelled(&mut out, names::CICP);
            }
            Track::Classification => {
                // [002] Fig. 7–9: coverage of P(y = 1 | x) by the interval, its width, ECE;
                // and the mean |P̂ − P|.
                levelled(&mut out, names::COVERAGE_AT);
                out.push((names::ECE.into(), None));
                out.push((names::ABS_ERROR.into(), None));
            }
        }
        out
    }

    /// The distance to the exact posterior drawn against a swept variable, where the track
    /// has one.
    pub fn distance_metric(self) -> Option<&'static str> {
        match self {
            Track::Regression => Some(names::W2_ANCHOR),
            Track::Classification => None,
        }
    }

    /// The joint metric drawn against a swept variable: KL from the exact posterior
    /// predictive (regression) or from the labels' distribution (classification).
    pub fn joint_metric(self) -> &'static str {
        match self {
            Track::Regression => names::JOINT_KL,
            Track::Classification => names::ENV_KL,
        }
    }

    /// How the report presents the track.
    pub fn report(self) -> ReportPlan {
        match self {
            Track::Regression => ReportPlan {
                states_noise: true,
                aggregates: AggregateTables::Regression,
                ranked: [names::W2_ANCHOR, names::CRPS],
            },
            Track::Classification => ReportPlan {
                states_noise: false,
                aggregates: AggregateTables::Classification,
                ranked: [names::NLL, names::ABS_ERROR],
            },
        }
    }

    /// The track of a resolved problem.
    pub fn of(problem: &Problem) -> Track {
        Track::of_kind(problem.kind())
    }

    /// The track of a problem kind, declared or resolved: the one place that maps the one to
    /// the other.
    pub fn of_kind(kind: ProblemKind) -> Track {
        match kind {
            ProblemKind::Linear | ProblemKind::Surrogate => Track::Regression,
            ProblemKind::Classification => Track::Classification,
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
