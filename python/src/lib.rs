//! `uqbench._uqbench`: the native half of the Python package. It exposes a spec's problem (its
//! repetitions and anchor), the scoring of external predictions and every metric, computed by
//! the same Rust functions as the `uqbench` command (`uqbench-experiment`, `uqbench-anchor`), with
//! numpy arrays at the boundary (rust-numpy): arrays in are read where they lie (any strides,
//! so C and Fortran order alike; `uqbench/__init__.py` converts other dtypes to float64 first),
//! arrays out hand their Rust buffer to numpy without a copy. `uqbench/__init__.py` adds the
//! dataclasses and pandas DataFrames. Every error is raised as the exception of its kind
//! (`uqbench_experiment::ErrorKind`): `InvalidInputError` (a `ValueError` whose message names the
//! input, the value and what is valid), `RunDirectoryError` (a `ValueError`: a run directory
//! that is not one or not complete), `OSError` (`FileNotFoundError` for a missing file) or
//! `RuntimeError` (a computation that failed on valid input); nothing panics across the
//! boundary.

mod decide;

use std::collections::BTreeMap;
use std::path::Path;

use numpy::ndarray::{Array2, ArrayViewD, Axis};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArrayDyn};
use pyo3::create_exception;
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple};
use serde_json::Value;
use uqbench_anchor::{Anchor, Problem, Setting};
use uqbench_experiment::metrics::{compute, Input, Options};
use uqbench_experiment::score::{
    classification_rep, regression_rep, score_setting, External, JointScoring,
};
use uqbench_experiment::spec::ExperimentSpec;
use uqbench_experiment::summary::Summary;
use uqbench_experiment::{ErrorKind, ExperimentError, Stored, Track};

/// The interval levels `uqbench score` uses by default.
const DEFAULT_LEVELS: [f64; 4] = [0.95, 0.9, 0.8, 0.7];

create_exception!(
    _uqbench,
    InvalidInputError,
    PyValueError,
    "Bad input: the message names the input, the value and what is valid."
);
create_exception!(
    _uqbench,
    RunDirectoryError,
    PyValueError,
    "A run directory that is not one, is not complete, or does not fit the runs it is read with."
);

/// Bad input found here (a message naming the input, the value and what is valid).
fn value_error(e: impl std::fmt::Display) -> PyErr {
    InvalidInputError::new_err(e.to_string())
}

/// An error of the Rust crates, raised as the exception of its kind.
fn py_error(e: impl Into<ExperimentError>) -> PyErr {
    let e = e.into();
    let message = e.to_string();
    match e.kind() {
        ErrorKind::InvalidInput => InvalidInputError::new_err(message),
        ErrorKind::RunDirectory => RunDirectoryError::new_err(message),
        ErrorKind::Io(std::io::ErrorKind::NotFound) => PyFileNotFoundError::new_err(message),
        ErrorKind::Io(_) => PyOSError::new_err(message),
        ErrorKind::Failed => PyRuntimeError::new_err(message),
    }
}

/// A vector as a numpy array that owns the Vec's buffer (no copy).
fn vector<'py>(py: Python<'py>, v: Vec<f64>) -> Bound<'py, PyArray1<f64>> {
    PyArray1::from_vec(py, v)
}

/// A row-major `rows × cols` buffer as a 2-D numpy array (no copy).
fn matrix<'py>(
    py: Python<'py>,
    rows: usize,
    cols: usize,
    flat: Vec<f64>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    Ok(Array2::from_shape_vec((rows, cols), flat)
        .map_err(value_error)?
        .into_pyarray(py))
}

/// Nested rows as a 2-D numpy array.
fn rows_matrix<'py>(py: Python<'py>, rows: Vec<Vec<f64>>) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let cols = rows.first().map_or(0, Vec::len);
    let n = rows.len();
    matrix(py, n, cols, rows.into_iter().flatten().collect())
}

/// A float64 numpy array of any layout, read as its shape and its values in C order (the
/// view's logical order, whatever the strides).
fn read_array(v: &Bound<'_, PyAny>, key: &str) -> Result<(Vec<usize>, Vec<f64>), String> {
    let a = v.extract::<PyReadonlyArrayDyn<'_, f64>>().map_err(|_| {
        format!(
            "`{key}`: a {}; valid: a float64 numpy array",
            v.get_type()
                .name()
                .map_or_else(|_| "value".to_string(), |n| n.to_string())
        )
    })?;
    let view = a.as_array();
    Ok((view.shape().to_vec(), view.iter().copied().collect()))
}

/// A numpy array (or nested lists, strings, numbers, bools, None, dicts) as JSON, for the
/// metrics' serde input; `path` names the field in errors.
fn to_json(v: &Bound<'_, PyAny>, path: &str) -> Result<Value, String> {
    fn number(x: f64, path: &str) -> Result<Value, String> {
        serde_json::Number::from_f64(x)
            .map(Value::Number)
            .ok_or_else(|| format!("{path}: {x}; valid: finite numbers"))
    }
    fn nested(view: ArrayViewD<'_, f64>, path: &str) -> Result<Value, String> {
        match view.ndim() {
            0 => number(view.iter().next().copied().unwrap_or(f64::NAN), path),
            1 => view.iter().map(|&x| number(x, path)).collect(),
            _ => view
                .axis_iter(Axis(0))
                .map(|row| nested(row, path))
                .collect(),
        }
    }
    if v.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(a) = v.extract::<PyReadonlyArrayDyn<'_, f64>>() {
        return nested(a.as_array(), path);
    }
    if let Ok(a) = v.extract::<PyReadonlyArrayDyn<'_, i64>>() {
        return Ok(
            serde_json::to_value(a.as_array().iter().collect::<Vec<_>>())
                .map_err(|e| e.to_string())?,
        );
    }
    if v.is_instance_of::<PyString>() {
        return Ok(Value::String(
            v.extract::<String>().map_err(|e| e.to_string())?,
        ));
    }
    if v.is_instance_of::<PyBool>() {
        return Ok(Value::Bool(v.extract::<bool>().map_err(|e| e.to_string())?));
    }
    if let Ok(i) = v.extract::<i64>() {
        return Ok(Value::from(i));
    }
    if let Ok(x) = v.extract::<f64>() {
        return number(x, path);
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut out = serde_json::Map::new();
        for (k, x) in d.iter() {
            let k = k
                .extract::<String>()
                .map_err(|_| format!("{path}: a key that is not a string"))?;
            let sub = to_json(&x, &k)?;
            out.insert(k, sub);
        }
        return Ok(Value::Object(out));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut out = Vec::new();
        for x in v.try_iter().map_err(|e| e.to_string())? {
            out.push(to_json(&x.map_err(|e| e.to_string())?, path)?);
        }
        return Ok(Value::Array(out));
    }
    Err(format!(
        "{path}: a {}; valid: a float64 numpy array, a number, a string or a list",
        v.get_type()
            .name()
            .map_or_else(|_| "value".to_string(), |n| n.to_string())
    ))
}

/// JSON as Python values: objects as dicts, arrays as lists, numbers as int or float.
fn from_json<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into_pyobject(py)?.into_any(),
            None => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        // uqbench's JSON writes ±∞ (a result, such as an infinite KL) as "inf"/"-inf"
        // (`uqbench_experiment::json`); Python has floats for them.
        Value::String(s)
            if s == uqbench_experiment::json::INF || s == uqbench_experiment::json::NEG_INF =>
        {
            uqbench_experiment::json::read_number(v)
                .unwrap_or(f64::NAN)
                .into_pyobject(py)?
                .into_any()
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(a) => PyList::new(
            py,
            a.iter()
                .map(|x| from_json(py, x))
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any(),
        Value::Object(m) => {
            let d = PyDict::new(py);
            for (k, x) in m {
                d.set_item(k, from_json(py, x)?)?;
            }
            d.into_any()
        }
    })
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
        let spec = ExperimentSpec::load_profile(Path::new(spec_path), profile).map_err(py_error)?;
        let args: Vec<String> = setting
            .unwrap_or_default()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let setting = spec.parse_setting(&args).map_err(py_error)?;
        let problem = spec.resolve(&setting).map_err(py_error)?;
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

    /// Whether the anchor's fit (everything that does not depend on y) is made and kept: it
    /// is made on first use and reused by every repetition (the package's tests read it).
    #[getter]
    fn anchor_fitted(&self) -> bool {
        self.fit.get().is_some()
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
        // A random design's repetition has its own inputs.
        let p = self.problem.at_repetition(k).map_err(py_error)?;
        let p = p.as_ref();
        let draw = p.draw(k);
        let d = PyDict::new(py);
        let inputs = |x: &uqbench_anchor::Inputs| matrix(py, x.len(), x.d(), x.as_slice().to_vec());
        d.set_item("x_train", inputs(&p.train.inputs)?)?;
        d.set_item("y_train", vector(py, draw.train_y))?;
        d.set_item("x_test", inputs(&p.test.inputs)?)?;
        d.set_item("truth", vector(py, p.test.truth.clone()))?;
        d.set_item(
            "region",
            p.test.region.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
        )?;
        d.set_item("sigma", vector(py, p.test.sigma.clone()))?;
        d.set_item("train_truth", vector(py, p.train_truth.clone()))?;
        d.set_item("train_sigma", vector(py, p.train_sigma.clone()))?;
        match (&p.validation, draw.validation_y) {
            (Some((x, sigma, truth)), Some(y)) => {
                d.set_item("x_valid", inputs(x)?)?;
                d.set_item("y_valid", vector(py, y))?;
                d.set_item("valid_sigma", vector(py, sigma.clone()))?;
                d.set_item("valid_truth", vector(py, truth.clone()))?;
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
                // A random design's repetition k has its own inputs, so its own fit.
                let (own, own_fit) = uqbench_experiment::score::own_inputs(&self.problem, k, true)
                    .map_err(|e| e.to_string())?;
                let anchor = match &own_fit {
                    Some(a) => a,
                    None => self.fitted()?.ok_or(
                        "this problem has no anchor (a surrogate or classification problem)",
                    )?,
                };
                let post = anchor
                    .posterior(&own.draw(k).train_y)
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>((post, anchor.condition()))
            })
            .map_err(value_error)?;
        let d = PyDict::new(py);
        d.set_item("predictive_std", vector(py, post.predictive_std()))?;
        d.set_item("cov", rows_matrix(py, post.cov())?)?;
        d.set_item("mean", vector(py, post.mean))?;
        d.set_item("std", vector(py, post.std))?;
        d.set_item("noise_std", vector(py, post.noise_std))?;
        d.set_item("dof", post.dof)?;
        d.set_item("gamma_hat", vector(py, post.gamma_hat))?;
        d.set_item("condition", condition)?;
        Ok(Some(d))
    }

    /// Scores `predictions` (one dict per repetition 0..K−1, float64 arrays) of a method named
    /// `method` at interval `levels`: returns (summary.csv, aggregate.csv, summary.json,
    /// repetitions.csv) as `uqbench score` writes them (summary.json as a dict), with the
    /// anchor alongside. The arrays
    /// are read with the GIL held; everything after (the anchor, every repetition's metrics
    /// and the summary) runs without it.
    #[pyo3(signature = (predictions, method, levels=None))]
    fn score<'py>(
        &self,
        py: Python<'py>,
        predictions: Vec<Bound<'py, PyDict>>,
        method: &str,
        levels: Option<Vec<f64>>,
    ) -> PyResult<(String, String, Bound<'py, PyAny>, String)> {
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
        let read = predictions
            .iter()
            .enumerate()
            .map(|(k, d)| {
                self.read_prediction(track, d)
                    .map_err(|e| value_error(format!("predictions[{k}]: {e}")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let (points, aggregate, json, repetitions) = py
            .detach(|| {
                let anchor = self.fitted()?;
                let external = read
                    .into_iter()
                    .enumerate()
                    .map(|(k, p)| {
                        let rep = k as u64;
                        match p {
                            Read::Regression(p) => regression_rep(
                                rep,
                                p,
                                &self.problem,
                                anchor,
                                &levels,
                                self.joint.as_ref(),
                            )
                            .map(Stored::Regression),
                            Read::Classification(p) => classification_rep(
                                rep,
                                p,
                                &self.problem,
                                &levels,
                                self.joint.as_ref(),
                            )
                            .map(Stored::Classification),
                        }
                        .map_err(|e| format!("predictions[{k}]: {e}"))
                    })
                    .collect::<Result<Vec<_>, String>>()?;
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
                Ok::<_, String>((
                    summary.points_csv(),
                    summary.aggregate_csv(),
                    summary.to_json(),
                    summary.repetitions_csv(),
                ))
            })
            .map_err(value_error)?;
        Ok((points, aggregate, from_json(py, &json)?, repetitions))
    }
}

/// One repetition's predictions as read from Python, before scoring.
enum Read {
    /// A regression method's predictive.
    Regression(External),
    /// Per test input, the draws of P(y = 1 | x).
    Classification(Vec<Vec<f64>>),
}

impl PyProblem {
    /// One repetition's predictions, read from its dict of float64 arrays.
    fn read_prediction(&self, track: Track, d: &Bound<'_, PyDict>) -> Result<Read, String> {
        let keys: Vec<String> = d.keys().iter().map(|k| k.to_string()).collect::<Vec<_>>();
        let valid: &[&str] = match track {
            Track::Regression => &["mean", "std", "noise_std", "samples", "sample_noise", "cov"],
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
        let array = |key: &str| get(key).map(|v| read_array(&v, key)).transpose();
        let vector = |key: &str| -> Result<Option<Vec<f64>>, String> {
            match array(key)? {
                Some((shape, data)) if shape.len() == 1 => Ok(Some(data)),
                Some((shape, _)) => Err(format!(
                    "`{key}`: shape {shape:?}; valid: a 1-D array (one value per test input)"
                )),
                None => Ok(None),
            }
        };
        let rows = |shape: &[usize], data: Vec<f64>| -> Vec<Vec<f64>> {
            let cols = shape[1].max(1);
            data.chunks(cols).map(<[f64]>::to_vec).collect()
        };
        match track {
            Track::Regression => {
                let matrix = |key: &str, what: &str| -> Result<Option<Vec<Vec<f64>>>, String> {
                    match array(key)? {
                        Some((shape, data)) if shape.len() == 2 => Ok(Some(rows(&shape, data))),
                        Some((shape, _)) => Err(format!(
                            "`{key}`: shape {shape:?}; valid: a 2-D array ({what})"
                        )),
                        None => Ok(None),
                    }
                };
                let prediction = match matrix("samples", "test inputs × draws")? {
                    Some(samples) => {
                        if keys.iter().any(|k| {
                            !["samples", "noise_std", "sample_noise"].contains(&k.as_str())
                        }) {
                            return Err("`samples` comes alone or with `noise_std` (one per \
                                        draw) or `sample_noise` (test inputs × draws); mean \
                                        and std are taken from them"
                                .into());
                        }
                        External::Samples {
                            samples,
                            noise_std: vector("noise_std")?,
                            sample_noise: matrix("sample_noise", "test inputs × draws")?,
                        }
                    }
                    None => External::Gaussian {
                        mean: vector("mean")?
                            .ok_or("`mean` with `std` or `cov` is needed (or `samples`)")?,
                        std: vector("std")?,
                        noise_std: vector("noise_std")?,
                        cov: matrix("cov", "test inputs × test inputs")?,
                    },
                };
                Ok(Read::Regression(prediction))
            }
            Track::Classification => {
                let per_input: Vec<Vec<f64>> = match array("probs")?.ok_or("`probs` is needed")? {
                    (shape, data) if shape.len() == 2 => rows(&shape, data),
                    (shape, data) if shape.len() == 1 => {
                        data.into_iter().map(|p| vec![p]).collect()
                    }
                    (shape, _) => {
                        return Err(format!(
                            "`probs`: shape {shape:?}; valid: a 1-D (test inputs) or 2-D (test \
                             inputs × draws) array of probabilities"
                        ))
                    }
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
                Ok(Read::Classification(per_input))
            }
        }
    }

    /// The anchor's fit (everything that does not depend on y), made on first use; None for a
    /// problem without an anchor.
    fn fitted(&self) -> Result<Option<&Anchor>, String> {
        if self.problem.linear().is_none() || Track::of(&self.problem) != Track::Regression {
            return Ok(None);
        }
        self.fit
            .get_or_init(|| Anchor::fit(&self.problem).map_err(|e| e.to_string()))
            .as_ref()
            .map(Some)
            .map_err(Clone::clone)
    }
}

/// Every metric of one input (what `uqbench metrics --input` reads: a dict with `kind` and
/// float64 arrays) as the dict it prints.
#[pyfunction]
#[pyo3(signature = (input, bins=15, levels=None, tace_threshold=0.01))]
fn metrics<'py>(
    py: Python<'py>,
    input: &Bound<'py, PyDict>,
    bins: usize,
    levels: Option<Vec<f64>>,
    tace_threshold: f64,
) -> PyResult<Bound<'py, PyAny>> {
    let value = to_json(input.as_any(), "input").map_err(value_error)?;
    let input: Input = serde_json::from_value(value).map_err(py_error)?;
    let options = Options {
        bins,
        levels: levels.unwrap_or_else(|| DEFAULT_LEVELS.to_vec()),
        tace_threshold,
    };
    let out = py.detach(|| compute(&input, &options)).map_err(py_error)?;
    from_json(py, &Value::Object(out))
}

/// Every pair of methods compared repetition by repetition (what `uqbench compare` prints),
/// from `repetitions` (the text of one or more `repetitions.csv`, concatenated under one
/// header) or from run directories `runs` (checked to have drawn the same data). Returns the
/// comparison as a dict: `metric`, `region`, `direction`, `pairs` (one record per ordered
/// pair), `rankings`.
#[pyfunction]
#[pyo3(signature = (repetitions=None, runs=None, metric=None, region=None, setting=None, resamples=10_000, seed=0))]
#[allow(clippy::too_many_arguments)]
fn compare<'py>(
    py: Python<'py>,
    repetitions: Option<String>,
    runs: Option<Vec<std::path::PathBuf>>,
    metric: Option<String>,
    region: Option<String>,
    setting: Option<String>,
    resamples: usize,
    seed: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = uqbench_experiment::compare::Options {
        metric,
        region: region.unwrap_or_else(|| uqbench_experiment::summary::names::ALL.to_string()),
        setting,
        resamples,
        seed,
    };
    let out = py
        .detach(|| -> uqbench_experiment::Result<Value> {
            // Typed errors across the detach, so that a run directory's problem is raised as
            // RunDirectoryError.
            let rows = match (repetitions, runs) {
                (Some(text), None) => {
                    uqbench_experiment::compare::read_repetitions(&text, "repetitions")?
                }
                (None, Some(dirs)) => uqbench_experiment::compare::rows_of_runs(&dirs)?,
                _ => {
                    return Err(ExperimentError::Invalid(
                        "give repetitions or runs, not both".into(),
                    ))
                }
            };
            let c = uqbench_experiment::compare::compare(&rows, &opts)?;
            Ok(uqbench_experiment::json::to_value(&c)?)
        })
        .map_err(py_error)?;
    from_json(py, &out)
}

/// The metric catalogue (what `uqbench metrics --catalogue` prints): one dict per metric with
/// its `name`, `index` (`none`, `level`, `tau`, `fraction`, `bin`), track (`on`), `better`
/// (`lower`, `higher`, `target`, `neither`), where it is `computed`, its report `column`, the
/// `figures` that draw it and what it is (`about`).
#[pyfunction]
fn metric_catalogue<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    let list =
        serde_json::to_value(uqbench_experiment::summary::catalogue::METRICS).map_err(py_error)?;
    from_json(py, &list)
}

/// The native module.
/// The method kinds a spec may name: one dict per kind with its `name`, `room` (`exact`,
/// `network`, `sampler` or `post-hoc`) and a one-line `summary` (the registry's catalogue).
#[pyfunction]
fn method_kinds<'py>(py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
    uqbench_experiment::kinds::METHOD_KINDS
        .iter()
        .map(|k| {
            let d = PyDict::new(py);
            d.set_item("name", k.name)?;
            d.set_item("room", k.room)?;
            d.set_item("summary", k.summary)?;
            Ok(d)
        })
        .collect()
}

#[pymodule]
fn _uqbench(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProblem>()?;
    m.add_function(wrap_pyfunction!(method_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(metric_catalogue, m)?)?;
    m.add_function(wrap_pyfunction!(metrics, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(decide::decide, m)?)?;
    m.add_function(wrap_pyfunction!(decide::decision_repetitions, m)?)?;
    m.add("InvalidInputError", m.py().get_type::<InvalidInputError>())?;
    m.add("RunDirectoryError", m.py().get_type::<RunDirectoryError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
