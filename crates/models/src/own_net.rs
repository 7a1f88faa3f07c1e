//! What the methods with a network of their own share around their trainer (the epinet,
//! BatchEnsemble: one engine replica per repetition, a `ChunkTrainer` of their own): the
//! engine's job for a task or for several as one (the decision track's repetitions at a step,
//! each replica on its task's inputs), their `run` and `run_tasks`, per-repetition seeds, and
//! one prediction per repetition from the replica's passes.

use crate::batched::same_shape;
use uqbench_core::{
    combine_members, run_each, Compute, Family, Method, MethodError, Prediction, Replicas, Task,
};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::mlp::MlpShape;
use uqbench_engine::trainer::{Inputs, Job, TrainOutput, TrainSettings};

/// The data of one task, or of several trained as one job (the decision track's repetitions
/// at one step, each with the inputs it pulled), in the engine's form for one replica per
/// repetition.
pub struct OwnNetJob {
    /// The network (one output).
    pub shape: MlpShape,
    /// The optimiser's settings for the tasks' epochs and likelihood.
    pub settings: TrainSettings,
    /// Per task, its training and test inputs, row-major, standardised (by the task's own
    /// moments) as the network asks.
    pub inputs: Vec<Inputs>,
    /// Per task, its replicas (repetitions) in the job, in order.
    pub counts: Vec<usize>,
    replicas: Replicas,
    targets: Vec<Vec<f32>>,
    /// Per target, its task's inputs, where there are several tasks.
    per_target: Option<Vec<Inputs>>,
}

impl OwnNetJob {
    /// The job of method `name` with `config`'s network and optimiser on `task`.
    pub fn new<S>(task: &Task<'_>, name: &str, config: &MethodConfig<S>) -> OwnNetJob {
        Self::of_tasks(std::slice::from_ref(task), name, config)
    }

    /// The tasks' data as one job: each task's replicas with its own inputs, targets and
    /// seeds, so that a replica trains in the joint job as in its task's own ([`Job::inputs`]
    /// where there are several tasks). The caller checks that the tasks agree in what the
    /// settings read ([`crate::batched::same_shape`], as [`run_together`] does); each
    /// replica's streams are keyed on its own task's seeds, so its numbers do not depend on
    /// the other tasks in the job.
    pub fn of_tasks<S>(tasks: &[Task<'_>], name: &str, config: &MethodConfig<S>) -> OwnNetJob {
        let first = &tasks[0];
        let mut replicas = Replicas {
            targets: Vec::new(),
            init: Vec::new(),
            stream: Vec::new(),
            ids: Vec::new(),
        };
        let (mut targets, mut inputs, mut counts) = (Vec::new(), Vec::new(), Vec::new());
        let mut per_target = Vec::new();
        for task in tasks {
            let (x_train, x_test) = task.inputs_f32(config.net.standardize);
            let own = Inputs { x_train, x_test };
            if tasks.len() > 1 {
                per_target.extend(std::iter::repeat_n(own.clone(), task.repetitions.len()));
            }
            inputs.push(own);
            let own = task.replicas(name, 1);
            let offset = targets.len();
            replicas
                .targets
                .extend(own.targets.iter().map(|t| t + offset));
            replicas.init.extend(own.init);
            replicas.stream.extend(own.stream);
            replicas.ids.extend(own.ids);
            counts.push(own.targets.len());
            targets.extend(task.y_train_f32());
        }
        OwnNetJob {
            shape: config.net.shape(first.d, 1),
            settings: TrainSettings {
                likelihood: first.likelihood,
                ..config.optim.settings(first.epochs, first.n_train())
            },
            inputs,
            counts,
            replicas,
            targets,
            per_target: (tasks.len() > 1).then_some(per_target),
        }
    }

    /// The engine's job: the first task's inputs as the job's (its shapes), and every
    /// target's own where there are several tasks.
    pub fn job(&self) -> Job<'_> {
        Job {
            shape: &self.shape,
            x_train: &self.inputs[0].x_train,
            targets: &self.targets,
            replica_targets: &self.replicas.targets,
            init_seeds: &self.replicas.init,
            stream_seeds: &self.replicas.stream,
            replica_ids: &self.replicas.ids,
            x_test: &self.inputs[0].x_test,
            init: None,
            inputs: self.per_target.as_deref(),
        }
    }
}

/// One seed per repetition of the task for `purpose`.
pub fn repetition_seeds(task: &Task<'_>, purpose: &str) -> Vec<u64> {
    task.repetitions
        .iter()
        .map(|&rep| task.seeds.seed(rep, 0, purpose))
        .collect()
}

/// Every repetition's prediction from its replica's passes (index samples, members), as one
/// member's.
pub fn per_repetition(
    out: &TrainOutput,
    task: &Task<'_>,
    family: Family,
    keep_samples: bool,
) -> Vec<Prediction> {
    let (m, n) = (task.n_test(), task.n_train());
    (0..task.repetitions.len())
        .map(|k| combine_members(&[out.member(k, m, n)], family, keep_samples))
        .collect()
}

/// A network of its own's [`uqbench_core::Method::run`]: `train` (its tasks as one job) on
/// the one task.
pub fn run_one(
    task: &Task<'_>,
    train: impl FnOnce(&[Task<'_>]) -> Result<Vec<Vec<Prediction>>, MethodError>,
) -> Result<Vec<Prediction>, MethodError> {
    task.validate()?;
    Ok(train(std::slice::from_ref(task))?.remove(0))
}

/// Its [`uqbench_core::Method::run_tasks`] (the decision track's repetitions at a step, each
/// with the inputs it pulled): `train` on all the tasks as one job when they agree in
/// shapes, epochs and likelihood, else each task's own `run`, side by side over the cores.
pub fn run_together(
    method: &(impl Method + ?Sized),
    tasks: &[Task<'_>],
    compute: &Compute,
    keep_samples: bool,
    train: impl FnOnce(&[Task<'_>]) -> Result<Vec<Vec<Prediction>>, MethodError>,
) -> Result<Vec<Vec<Prediction>>, MethodError> {
    if !same_shape(tasks, |_| ()) {
        return run_each(method, tasks, compute, keep_samples);
    }
    for task in tasks {
        task.validate()?;
    }
    train(tasks)
}

/// Every task's predictions, per repetition, from the output of their joint job
/// ([`OwnNetJob::of_tasks`]: `counts` replicas per task, in order).
pub fn per_task(
    out: TrainOutput,
    tasks: &[Task<'_>],
    counts: &[usize],
    family: Family,
    keep_samples: bool,
) -> Vec<Vec<Prediction>> {
    (out.split(counts).iter().zip(tasks))
        .map(|(o, task)| per_repetition(o, task, family, keep_samples))
        .collect()
}

/// Test support: the host loops' and the tensor route's outputs of one job agree within
/// 1e-4·(1 + |v|) (predictions, fit, objective), what eight Adam steps of lr 1e-2 leave of
/// f32's different summation orders (see the `the_host_loops_follow_the_tensor_route` tests).
#[cfg(test)]
pub(crate) fn assert_routes_agree(h: &TrainOutput, t: &TrainOutput, case: &str) {
    let close = |a: &[f32], b: &[f32], what: &str| {
        assert_eq!(a.len(), b.len(), "{case}: {what}");
        for (i, (u, v)) in a.iter().zip(b).enumerate() {
            assert!(
                (u - v).abs() <= 1e-4 * (1.0 + v.abs()),
                "{case}: {what}[{i}] {u} vs {v}"
            );
        }
    };
    close(&h.test_out, &t.test_out, "predictions");
    close(&h.train_pred, &t.train_pred, "fit");
    for (a, b) in h.final_objective.iter().zip(&t.final_objective) {
        assert!(
            (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "{case}: objective {a} vs {b}"
        );
    }
}
