//! `uqbench._uqbench`: the native half of the Python package. It exposes a spec's problem (its
//! repetitions and anchor), the scoring of external predictions and every metric, computed by
//! the same Rust functions as the `uqbench` command (`uqbench-eval`, `uqbench-anchor`), with
//! plain Python values at the boundary (lists, dicts, strings); `uqbench/__init__.py` turns
//! them into numpy arrays and pandas DataFrames. Every error is a `ValueError` whose message
//! names the input, the value and what is valid; nothing panics across the boundary.

use std::collections::BTreeMap;
use std::path::Path;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use uqbench_anchor::{Anchor, Problem, Setting};
use uqbench_eval::metrics::{compute, Input, Options};
use uqbench_eval::score::{
    classification_rep, regression_rep, score_setting, External, JointScoring,
};
use uqbench_eval::spec::ExperimentSpec;
use uqbench_eval::summary::Summary;
use uqbench_eval::{Stored, Track};

/// The interval levels `uqbench score` uses by default.
const DEFAULT_LEVELS: [f64; 4] = [0.95, 0.9, 0.8, 0.7];

fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// One setting of a spec's problem. Usable from any thread (nothing in it is tied to the one
/// that made it); its anchor fit is made once, on first use, and the long calls (the fit,
/// scoring, metrics) release the GIL.
#[pyclass(module = "uqbench._uqbench", name = "Problem")]
struct PyProblem {
    spec: ExperimentSpec,
    setting: Setting,
    problem: Problem,
    /// The anchor's fit (everything that does not depend on y), made on first use.
    fit: std::sync::OnceLock<Result<Anchor, String>>,
    /// The joint metrics' settings and seed (the spec's), for scoring.
    joint: Option<JointScoring>,
}

#[pymethods]
impl PyProblem {
    /// Reads `spec_path` with `profile` applied and resolves the setting given as
    /// {variable: value} (a variable not given takes its first sweep value).
    #[new]
    #[pyo3(signature = (spec_path, setting=None, profile=None))]
    fn new(
        spec_path: &str,
        setting: Option<BTreeMap<String, f64>>,
        profile: Option<&str>,
    ) -> PyResult<Self> {
        let spec =
            ExperimentSpec::load_profile(Path::new(spec_path), profile).map_err(value_error)?;
        let args: Vec<String> = setting
            .unwrap_or_default()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let setting = spec.parse_setting(&args).map_err(value_error)?;
        let problem = spec.resolve(&setting).map_err(value_error)?;
        Ok(PyProblem {
            fit: std::sync::OnceLock::new(),
            joint: JointScoring::of(&spec),
            spec,
            setting,
            problem,
        })
    }

    /// The experiment's name.
    #[getter]
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    /// The setting's label (`f_main=2`, or empty without a sweep).
    #[getter]
    fn setting(&self) -> String {
        self.setting.label()
    }

    /// `regression` or `classification`.
    #[getter]
    fn track(&self) -> &'static str {
        match Track::of(&self.problem) {
            Track::Regression => "regression",
            Track::Classification => "classification",
        }
    }

    /// The spec's repetitions per setting (`run.repetitions`), or None without a [run].
    #[getter]
    fn repetitions(&self) -> Option<u64> {
        self.spec.run.as_ref().map(|r| r.repetitions)
    }

    /// The spec's interval levels (`run.levels`), or `uqbench score`'s default.
    #[getter]
    fn levels(&self) -> Vec<f64> {
        self.spec
            .run
            .as_ref()
            .map_or_else(|| DEFAULT_LEVELS.to_vec(), |r| r.levels.clone())
    }

    /// Repetition `k`: the data a method gets and the truth it is judged by.
    fn repetition<'py>(&self, py: Python<'py>, k: u64) -> PyResult<Bound<'py, PyDict>> {
        let p = &self.problem;
        let draw = p.draw(k);
        let d = PyDict::new(py);
        d.set_item("x_train", p.train.inputs.to_rows())?;
        d.set_item("y_train", draw.train_y)?;
        d.set_item("x_test", p.test.inputs.to_rows())?;
        d.set_item("truth", p.test.truth.clone())?;
        d.set_item(
            "region",
            p.test
                .region
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>(),
        )?;
        d.set_item("sigma", p.test.sigma.clone())?;
        d.set_item("train_truth", p.train_truth.clone())?;
        d.set_item("train_sigma", p.train_sigma.clone())?;
        match (&p.validation, draw.validation_y) {
            (Some((x, sigma, truth)), Some(y)) => {
                d.set_item("x_valid", x.to_rows())?;
                d.set_item("y_valid", y)?;
                d.set_item("valid_sigma", sigma.clone())?;
                d.set_item("valid_truth", truth.clone())?;
            }
            _ => {
                for key in ["x_valid", "y_valid", "valid_sigma", "valid_truth"] {
                    d.set_item(key, py.None())?;
                }
            }
        }
        Ok(d)
    }

    /// The anchor's exact posterior for repetition `k`, as `uqbench anchor --json` prints it;
    /// None for a problem without one (a surrogate or classification problem).
    fn anchor<'py>(&self, py: Python<'py>, k: u64) -> PyResult<Option<Bound<'py, PyDict>>> {
        if self.problem.linear().is_none() {
            return Ok(None);
        }
        let (post, condition) = py
            .detach(|| {
                let anchor = self
                    .fit
                    .get_or_init(|| Anchor::fit(&self.problem).map_err(|e| e.to_string()))
                    .as_ref()
                    .map_err(|e| e.clone())?;
                let post = anchor
                    .posterior(&self.problem.draw(k).train_y)
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>((post, anchor.condition()))
            })
            .map_err(value_error)?;
        let d = PyDict::new(py);
        d.set_item("predictive_std", post.predictive_std())?;
        d.set_item("cov", post.cov())?;
        d.set_item("mean", post.mean)?;
        d.set_item("std", post.std)?;
        d.set_item("noise_std", post.noise_std)?;
        d.set_item("dof", post.dof)?;
        d.set_item("gamma_hat", post.gamma_hat)?;
        d.set_item("condition", condition)?;
        Ok(Some(d))
    }

    /// Scores `predictions` (one dict per repetition 0..K−1) of a method named `method` at
    /// interval `levels`: returns (summary.csv, aggregate.csv, summary.json) as
    /// `uqbench score` writes them, with the anchor alongside.
    #[pyo3(signature = (predictions, method, levels=None))]
    fn score(
        &self,
        predictions: Vec<Bound<'_, PyDict>>,
        method: &str,
        levels: Option<Vec<f64>>,
    ) -> PyResult<(String, String, String)> {
        let levels = levels.unwrap_or_else(|| DEFAULT_LEVELS.to_vec());
        if let Some(l) = levels.iter().find(|l| !(**l > 0.0 && **l < 1.0)) {
            return Err(value_error(format!(
                "levels: {l}; valid: interval levels strictly between 0 and 1"
            )));
        }
        if predictions.is_empty() {
            return Err(value_error(
                "predictions: an empty list; valid: one dict per repetition 0..K−1",
            ));
        }
        let track = Track::of(&self.problem);
        let external = predictions
            .iter()
            .enumerate()
            .map(|(k, d)| {
                self.stored(track, k as u64, d, &levels)
                    .map_err(|e| value_error(format!("predictions[{k}]: {e}")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        predictions[0]
            .py()
            .detach(|| {
                let setting = score_setting(
                    &self.spec,
                    &self.setting,
                    &self.problem,
                    method,
                    external,
                    &levels,
                )
                .map_err(|e| e.to_string())?;
                let summary = Summary {
                    experiment: self.spec.name.clone(),
                    levels,
                    settings: vec![setting],
                };
                let json = serde_json::to_string(&summary.to_json()).map_err(|e| e.to_string())?;
                Ok::<_, String>((summary.points_csv(), summary.aggregate_csv(), json))
            })
            .map_err(value_error)
    }
}

impl PyProblem {
    /// One repetition's predictions in their track's stored form.
    fn stored(
        &self,
        track: Track,
        k: u64,
        d: &Bound<'_, PyDict>,
        levels: &[f64],
    ) -> Result<Stored, String> {
        let keys: Vec<String> = d
            .keys()
            .iter()
            .map(|k| k.to_string())
            .collect::<Vec<_>>();
        let valid: &[&str] = match track {
            Track::Regression => &["mean", "std", "noise_std", "samples", "cov"],
            Track::Classification => &["probs"],
        };
        if let Some(bad) = keys.iter().find(|k| !valid.contains(&k.as_str())) {
            return Err(format!(
                "key `{bad}`; valid keys for a {} problem: {}",
                if track == Track::Regression {
                    "regression"
                } else {
                    "classification"
                },
                valid.join(", ")
            ));
        }
        let get = |key: &str| d.get_item(key).ok().flatten();
        let vector = |key: &str| -> Result<Option<Vec<f64>>, String> {
            get(key)
                .map(|v| {
                    v.extract::<Vec<f64>>().map_err(|_| {
                        format!("`{key}`: not a 1-D array of numbers (one per test input)")
                    })
                })
                .transpose()
        };
        match track {
            Track::Regression => {
                let matrix = |key: &str, what: &str| -> Result<Option<Vec<Vec<f64>>>, String> {
                    get(key)
                        .map(|v| {
                            v.extract::<Vec<Vec<f64>>>()
                                .map_err(|_| format!("`{key}`: not a 2-D array ({what})"))
                        })
                        .transpose()
                };
                let prediction = match matrix("samples", "test inputs × draws")? {
                    Some(samples) => {
                        if keys.iter().any(|k| k != "samples" && k != "noise_std") {
                            return Err("`samples` comes alone or with `noise_std` (one per \
                                        draw); mean and std are taken from them"
                                .into());
                        }
                        External::Samples { samples, noise_std: vector("noise_std")? }
                    }
                    None => External::Gaussian {
                        mean: vector("mean")?
                            .ok_or("`mean` with `std` or `cov` is needed (or `samples`)")?,
                        std: vector("std")?,
                        noise_std: vector("noise_std")?,
                        cov: matrix("cov", "test inputs × test inputs")?,
                    },
                };
                regression_rep(k, prediction, &self.problem, levels, self.joint.as_ref())
                    .map(Stored::Regression)
                    .map_err(|e| e.to_string())
            }
            Track::Classification => {
                let probs = get("probs").ok_or("`probs` is needed")?;
                let per_input: Vec<Vec<f64>> = match probs.extract::<Vec<Vec<f64>>>() {
                    Ok(draws) => draws,
                    Err(_) => probs
                        .extract::<Vec<f64>>()
                        .map_err(|_| {
                            "`probs`: not a 1-D (test inputs) or 2-D (test inputs × draws) \
                             array of probabilities"
                                .to_string()
                        })?
                        .into_iter()
                        .map(|p| vec![p])
                        .collect(),
                };
                if let Some((i, p)) = per_input
                    .iter()
                    .enumerate()
                    .find_map(|(i, d)| d.iter().find(|p| p.is_nan()).map(|p| (i, *p)))
                {
                    return Err(format!(
                        "probs at test input {i}: {p}; valid: a number in [0, 1]"
                    ));
                }
                classification_rep(k, per_input, &self.problem, levels, self.joint.as_ref())
                    .map(Stored::Classification)
                    .map_err(|e| e.to_string())
            }
        }
    }
}

/// Every metric of one input (the JSON `uqbench metrics --input` reads) as the JSON it prints.
#[pyfunction]
#[pyo3(signature = (input_json, bins=15, levels=None, tace_threshold=0.01))]
fn metrics(
    py: Python<'_>,
    input_json: &str,
    bins: usize,
    levels: Option<Vec<f64>>,
    tace_threshold: f64,
) -> PyResult<String> {
    let input: Input = serde_json::from_str(input_json).map_err(value_error)?;
    let options = Options {
        bins,
        levels: levels.unwrap_or_else(|| DEFAULT_LEVELS.to_vec()),
        tace_threshold,
    };
    let out = py
        .detach(|| compute(&input, &options).map_err(|e| e.to_string()))
        .map_err(value_error)?;
    Ok(serde_json::Value::Object(out).to_string())
}

/// The native module.
#[pymodule]
fn _uqbench(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProblem>()?;
    m.add_function(wrap_pyfunction!(metrics, m)?)?;
    Ok(())
}
