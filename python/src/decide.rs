//! The decision track from Python (`uqbench.decide`): a user's agent, a callable
//! `choose(history, actions) -> index`, run on a repetition of a spec's `[decision]` section
//! beside the baselines (the exact Thompson sampler or the exact learner first), on the same
//! rewards and initial pulls, scored by the same bookkeeping as `uqbench decide`.

use std::cell::RefCell;
use std::rc::Rc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use uqbench_core::Rng;
use uqbench_experiment::decision::bandit::Policy;
use uqbench_experiment::decision::env::{Actions, Environment, History};
use uqbench_experiment::decision::{results, run_spec_repetition};
use uqbench_experiment::ExperimentError;

use crate::{matrix, py_error, value_error, vector, PyProblem};

/// The baselines' names, which an agent may not take.
const TAKEN: [&str; 5] = ["BLR", "Greedy", "Random", "Oracle", "MaxVar"];

/// A Python callable as a policy. An exception it raises is kept and re-raised as itself.
struct Agent<'py> {
    name: String,
    choose: Bound<'py, PyAny>,
    actions: Bound<'py, PyDict>,
    raised: Rc<RefCell<Option<PyErr>>>,
}

impl Agent<'_> {
    fn ask(&self, history: &Bound<'_, PyDict>, k: usize) -> Result<usize, String> {
        let out = self
            .choose
            .call1((history.clone(), self.actions.clone()))
            .map_err(|e| {
                let text = e.to_string();
                *self.raised.borrow_mut() = Some(e);
                text
            })?;
        out.extract::<usize>()
            .ok()
            .filter(|&a| a < k)
            .ok_or_else(|| {
                format!(
                    "agent {} chose {out}; valid: an action index 0 to {}",
                    self.name,
                    k - 1
                )
            })
    }
}

impl Policy for Agent<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    /// The batch: `choose` once per action, each time with the data before the step.
    fn choose(
        &mut self,
        actions: &Actions,
        history: &History,
        batch: usize,
        _rng: &mut Rng,
    ) -> uqbench_experiment::Result<Vec<usize>> {
        let py = self.choose.py();
        let h = PyDict::new(py);
        let set = |k: &str, v: Bound<'_, PyAny>| h.set_item(k, v).map_err(|e| e.to_string());
        let rows: Vec<f64> = (history.actions.iter())
            .flat_map(|&a| {
                actions.x[a * actions.d..(a + 1) * actions.d]
                    .iter()
                    .copied()
            })
            .collect();
        let x = matrix(py, history.len(), actions.d, rows).map_err(|e| e.to_string());
        let filled = x
            .and_then(|x| set("x", x.into_any()))
            .and_then(|()| {
                set(
                    "actions",
                    PyList::new(py, &history.actions)
                        .map_err(|e| e.to_string())?
                        .into_any(),
                )
            })
            .and_then(|()| set("rewards", vector(py, history.rewards.clone()).into_any()));
        filled.map_err(ExperimentError::Invalid)?;
        (0..batch)
            .map(|_| {
                self.ask(&h, actions.len())
                    .map_err(ExperimentError::Invalid)
            })
            .collect()
    }
}

/// What an agent sees of the action set: `x` `[K, d]`, `features` G `[K, p]`, `sigma` `[K]`,
/// `sigma_known`.
fn actions_dict<'py>(py: Python<'py>, a: &Actions) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("x", matrix(py, a.len(), a.d, a.x.clone())?)?;
    d.set_item("features", matrix(py, a.len(), a.p, a.g.clone())?)?;
    d.set_item("sigma", vector(py, a.sigma.clone()))?;
    d.set_item("sigma_known", a.sigma_known)?;
    Ok(d)
}

/// Repetition `repetition` of `problem`'s `[decision]` section: the baselines and, with
/// `choose`, the agent `name`. Returns (rows, curves) as lists of dicts: the rows of
/// `decisions.csv`, and per policy its curve (cumulative regret or RMSE after each step).
#[pyfunction]
#[pyo3(signature = (problem, repetition, choose=None, name="agent"))]
pub fn decide<'py>(
    py: Python<'py>,
    problem: &PyProblem,
    repetition: u64,
    choose: Option<Bound<'py, PyAny>>,
    name: &str,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let Some(decision) = problem.spec.decision.clone() else {
        return Err(value_error(format!(
            "problem {}: its spec has no [decision] section; valid: a spec with [decision] \
             (experiments/bandit.toml, experiments/active.toml)",
            problem.spec.name
        )));
    };
    decision.validate(&problem.problem).map_err(py_error)?;
    if TAKEN.contains(&name) || name.is_empty() || name.contains(',') {
        return Err(value_error(format!(
            "name: {name:?}; valid: a name without commas other than the baselines' ({})",
            TAKEN.join(", ")
        )));
    }
    let raised = Rc::new(RefCell::new(None));
    let mut own: Vec<Box<dyn Policy + '_>> = Vec::new();
    if let Some(choose) = choose {
        let here = problem
            .problem
            .at_repetition(repetition)
            .map_err(py_error)?;
        let env = Environment::from_problem(&here, decision.actions, 0).map_err(py_error)?;
        own.push(Box::new(Agent {
            name: name.to_string(),
            choose,
            actions: actions_dict(py, &env.actions)?,
            raised: Rc::clone(&raised),
        }));
    }
    let spec = (problem.spec.seed, problem.spec.name.as_str());
    let out = run_spec_repetition(spec, &decision, &problem.problem, repetition, own);
    if let Some(e) = raised.borrow_mut().take() {
        return Err(e);
    }
    let out = out.map_err(py_error)?;
    let label = problem.problem.setting.label();
    let rows = PyList::empty(py);
    for r in results::rows(decision.kind, &label, repetition, &out) {
        let d = PyDict::new(py);
        d.set_item("setting", &r.setting)?;
        d.set_item("policy", &r.policy)?;
        d.set_item("repetition", r.repetition)?;
        d.set_item("metric", r.metric)?;
        d.set_item("value", r.value)?;
        rows.append(d)?;
    }
    let curves = PyList::empty(py);
    for p in out {
        let d = PyDict::new(py);
        d.set_item("policy", &p.policy)?;
        d.set_item("curve", vector(py, p.curve))?;
        curves.append(d)?;
    }
    Ok((rows, curves))
}

/// The repetitions of `problem`'s `[decision]` section (None without one).
#[pyfunction]
pub fn decision_repetitions(problem: &PyProblem) -> Option<u64> {
    problem.spec.decision.as_ref().map(|d| d.repetitions)
}
