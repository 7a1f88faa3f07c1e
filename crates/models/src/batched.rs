//! Several tasks of a method on the engine's built-in network trained as one job
//! ([`trainer::train_tasks`]: the decision track's repetitions at one step, batched across
//! repetitions × members), for the methods whose [`uqbench_core::Method::run_tasks`] and
//! [`uqbench_core::WarmStart::run_warm_tasks`] can share one: the ensembles and the dropout
//! family. Each method says when its tasks can (its optimiser settings must be the same for
//! every task) and how a task's output becomes its predictions.

use std::sync::Arc;

use uqbench_core::{Compute, Method, MethodError, Prediction, Task, WarmStart, WarmState};
use uqbench_engine::mlp::MlpShape;
use uqbench_engine::trainer::{self, Resources, TrainOutput, TrainSettings, WarmWeights};

/// What one job of every task shares: the method's name (its seeds), members per repetition,
/// the network, whether inputs are standardised, and the optimiser settings.
pub struct Shared<'m> {
    /// The method's name.
    pub name: &'m str,
    /// Replicas per repetition.
    pub members: usize,
    /// The network.
    pub shape: MlpShape,
    /// Whether each task's inputs are standardised (by its own moments, or its warm state's).
    pub standardize: bool,
    /// The settings every task trains with.
    pub settings: TrainSettings,
}

/// [`uqbench_core::Method::run_tasks`] of a method on the built-in network: every task
/// trained afresh as one job with `shared` (the method's [`Shared`] for the tasks, `None`
/// where they cannot share one: then each task's own `run`, side by side over the cores);
/// `predict` turns a task's output (trained with the given settings) into its predictions.
pub fn run_tasks(
    method: &(impl Method + ?Sized),
    tasks: &[Task<'_>],
    compute: &Compute,
    keep_samples: bool,
    shared: Option<Shared<'_>>,
    predict: impl Fn(&Task<'_>, &TrainOutput, &TrainSettings) -> Vec<Prediction>,
) -> Result<Vec<Vec<Prediction>>, MethodError> {
    let Some(shared) = shared else {
        return uqbench_core::run_each(method, tasks, compute, keep_samples);
    };
    Ok(train(tasks, compute, &shared, None)?
        .into_iter()
        .zip(tasks)
        .map(|((out, _), t)| predict(t, &out, &shared.settings))
        .collect())
}

/// [`uqbench_core::WarmStart::run_warm_tasks`] likewise: every task from its warm state
/// (`from[k]`, `None`: afresh) as one job, each with its state after the training.
pub fn run_warm_tasks(
    warm: &(impl WarmStart + ?Sized),
    tasks: &[Task<'_>],
    compute: &Compute,
    keep_samples: bool,
    from: &[Option<&WarmState>],
    shared: Option<Shared<'_>>,
    predict: impl Fn(&Task<'_>, &TrainOutput, &TrainSettings) -> Vec<Prediction>,
) -> Result<Vec<(Vec<Prediction>, WarmState)>, MethodError> {
    let Some(shared) = shared.filter(|_| from.len() == tasks.len()) else {
        return uqbench_core::run_warm_each(warm, tasks, compute, keep_samples, from);
    };
    let weights = (from.iter())
        .map(|f| WarmWeights::of(*f, shared.name))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(train(tasks, compute, &shared, Some(&weights))?
        .into_iter()
        .zip(tasks)
        .map(|((out, state), t)| {
            let state = state.expect("a warm training returns its weights");
            (
                predict(t, &out, &shared.settings),
                Arc::new(state) as WarmState,
            )
        })
        .collect())
}

fn train(
    tasks: &[Task<'_>],
    compute: &Compute,
    shared: &Shared<'_>,
    from: Option<&[Option<&WarmWeights>]>,
) -> Result<Vec<(TrainOutput, Option<WarmWeights>)>, MethodError> {
    let resources = &Resources::of(compute)?;
    trainer::train_tasks(
        tasks,
        from,
        None,
        shared.name,
        shared.members,
        &shared.shape,
        shared.standardize,
        &shared.settings,
        resources,
    )
}

/// Whether `tasks` agree in everything a method's settings may read of a task beyond
/// `extra` (its own: a noise precision, …): input dimension, points, epochs, likelihood;
/// and there are at least two.
pub fn same_shape<K: PartialEq>(tasks: &[Task<'_>], extra: impl Fn(&Task<'_>) -> K) -> bool {
    let key = |t: &Task<'_>| {
        (
            (t.d, t.n_train(), t.n_test(), t.epochs, t.likelihood),
            extra(t),
        )
    };
    tasks.len() > 1 && tasks.iter().all(|t| key(t) == key(&tasks[0]))
}
