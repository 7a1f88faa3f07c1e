//! Several tasks' trainings as one job: the decision track's repetitions at one step, each
//! agent with the inputs it pulled, batched across repetitions × members like every engine
//! method (issue 57). Every task keeps its own standardisation, seeds and initial weights, so
//! a replica computes in the joint job what it computes in its task's own ([`super::train_task`]
//! and [`super::train_task_from`]: on the host execution to the bit, tested); what the batch
//! saves is the per-job cost (a GPU's dispatches and transfers per step, paid once for all
//! the repetitions instead of once each).

use std::collections::HashSet;

use super::Resources;
use super::{train, train_from, Inputs, Job, TrainOutput, TrainSettings, WarmWeights};
use crate::mlp::{xavier_init, HostWeights, MlpShape};
use uqbench_core::{MethodError, Task};

/// Every task's training of `members` replicas per repetition (seeds from `name`, the network
/// `shape` on the task's inputs standardised by its own moments when `standardize`, or by its
/// warm state's) as one job with inputs per target ([`Job::inputs`]), trained with `settings`
/// (the same for every task: the caller checks that its settings do not depend on what
/// differs between the tasks). `from`: `None` for fresh starts (as [`super::train_task`]), or
/// one warm state per task (`None` entries start afresh; as [`super::train_task_from`]), and
/// then every task's weights after the training come back beside its output. The tasks must
/// have the same numbers of training and test points and input dimensions, and distinct
/// repetitions (the replicas' identifiers key their device streams). `own_targets`: each
/// task's targets per replica in place of its data's (one per replica, in the task's replica
/// order: ensemble+'s targets shifted by each member's prior function), or `None`.
#[allow(clippy::too_many_arguments)]
pub fn train_tasks(
    tasks: &[Task<'_>],
    from: Option<&[Option<&WarmWeights>]>,
    own_targets: Option<&[Vec<Vec<f32>>]>,
    name: &str,
    members: usize,
    shape: &MlpShape,
    standardize: bool,
    settings: &TrainSettings,
    res: &Resources,
) -> Result<Vec<(TrainOutput, Option<WarmWeights>)>, MethodError> {
    let Some(first) = tasks.first() else {
        return Ok(Vec::new());
    };
    let counts = [
        ("warm states of a batched training", from.map(|f| f.len())),
        (
            "targets of a batched training",
            own_targets.map(|t| t.len()),
        ),
    ];
    for (what, count) in counts {
        if let Some(count) = count.filter(|&c| c != tasks.len()) {
            return Err(MethodError::invalid(
                what,
                count,
                format!("one per task ({})", tasks.len()),
            ));
        }
    }
    let mut parts = Parts::default();
    for (k, task) in tasks.iter().enumerate() {
        task.validate()?;
        let same =
            (task.d, task.n_train(), task.n_test()) == (first.d, first.n_train(), first.n_test());
        if !same {
            return Err(MethodError::invalid(
                format!("task {k} of a batched training"),
                format!(
                    "d = {}, N = {}, M = {}",
                    task.d,
                    task.n_train(),
                    task.n_test()
                ),
                format!(
                    "the first task's d = {}, N = {}, M = {}: one job's replicas share its shapes",
                    first.d,
                    first.n_train(),
                    first.n_test()
                ),
            ));
        }
        let warm = from.and_then(|f| f[k]);
        let own = own_targets.map(|t| &t[k][..]);
        parts.add(task, (name, members), shape, standardize, warm, own)?;
    }
    let job = Job {
        shape,
        x_train: &parts.inputs[0].x_train,
        targets: &parts.targets,
        replica_targets: &parts.replica_targets,
        init_seeds: &parts.init_seeds,
        stream_seeds: &parts.stream_seeds,
        replica_ids: &parts.ids,
        x_test: &parts.inputs[0].x_test,
        init: None,
        inputs: Some(&parts.inputs),
    };
    let counts: Vec<usize> = parts.spans.iter().map(|s| s.len()).collect();
    match from {
        None => {
            let out = train(&job, settings, res, &|_| {})?;
            Ok(out.split(&counts).into_iter().map(|o| (o, None)).collect())
        }
        Some(_) => {
            let init = HostWeights::concat(&parts.warm);
            let (out, weights) = train_from(&job, settings, res, Some(&init))?;
            Ok((out.split(&counts).into_iter())
                .zip(parts.spans.iter().zip(parts.moments))
                .map(|(o, (span, moments))| {
                    let weights = weights.select(span.clone());
                    (o, Some(WarmWeights { weights, moments }))
                })
                .collect())
        }
    }
}

/// The joint job's data, task by task.
#[derive(Default)]
struct Parts {
    targets: Vec<Vec<f32>>,
    inputs: Vec<Inputs>,
    replica_targets: Vec<usize>,
    init_seeds: Vec<u64>,
    stream_seeds: Vec<u64>,
    ids: Vec<u64>,
    seen: HashSet<u64>,
    /// Each task's replicas in the job.
    spans: Vec<std::ops::Range<usize>>,
    /// Each task's standardisation.
    moments: Vec<Option<Vec<(f64, f64)>>>,
    /// Each task's initial weights (a warm state's, or Xavier's from its seeds).
    warm: Vec<HostWeights>,
}

impl Parts {
    /// Task `task`'s targets, inputs and replicas (`members` per repetition, seeds from
    /// `name`) appended (`warm`: its warm state; `own`: its targets per replica).
    fn add(
        &mut self,
        task: &Task<'_>,
        (name, members): (&str, usize),
        shape: &MlpShape,
        standardize: bool,
        warm: Option<&WarmWeights>,
        own: Option<&[Vec<f32>]>,
    ) -> Result<(), MethodError> {
        let moments = WarmWeights::moments_for(warm, standardize, task);
        let (x_train, x_test) = task.inputs_f32_by(moments.as_deref());
        let mut replicas = task.replicas(name, members);
        if let Some(&id) = replicas.ids.iter().find(|id| !self.seen.insert(**id)) {
            return Err(MethodError::invalid(
                "replica identifier of a batched training",
                id,
                "distinct between the tasks: tasks of distinct repetitions",
            ));
        }
        let offset = self.targets.len();
        let targets = match own {
            None => task.y_train_f32(),
            Some(own) => {
                check_own_targets(own, replicas.ids.len(), task.n_train())?;
                replicas.targets = (0..own.len()).collect();
                own.to_vec()
            }
        };
        for y in targets {
            self.targets.push(y);
            self.inputs.push(Inputs {
                x_train: x_train.clone(),
                x_test: x_test.clone(),
            });
        }
        let start = self.replica_targets.len();
        (self.replica_targets).extend(replicas.targets.iter().map(|t| t + offset));
        self.init_seeds.extend_from_slice(&replicas.init);
        self.stream_seeds.extend_from_slice(&replicas.stream);
        self.ids.extend_from_slice(&replicas.ids);
        self.spans.push(start..self.replica_targets.len());
        self.warm.push(match warm {
            Some(w) => {
                w.weights.validate_shape(shape, replicas.init.len())?;
                w.weights.clone()
            }
            None => xavier_init(shape, &replicas.init),
        });
        self.moments.push(moments);
        Ok(())
    }
}

/// A task's own targets: one per replica, each of the task's N points, finite.
fn check_own_targets(own: &[Vec<f32>], replicas: usize, n: usize) -> Result<(), MethodError> {
    if own.len() != replicas {
        return Err(MethodError::invalid(
            "targets per replica of a batched task",
            own.len(),
            format!("one per replica ({replicas})"),
        ));
    }
    if let Some(t) = own.iter().find(|t| t.len() != n) {
        return Err(MethodError::invalid(
            "points of a replica's targets",
            t.len(),
            format!("the task's N = {n}"),
        ));
    }
    if own.iter().flatten().any(|v| !v.is_finite()) {
        return Err(MethodError::invalid(
            "a replica's targets",
            "a value that is not finite",
            "finite numbers",
        ));
    }
    Ok(())
}
