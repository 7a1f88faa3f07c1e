//! What the methods with a network of their own share around their trainer (the epinet,
//! BatchEnsemble: one engine replica per repetition, a `ChunkTrainer` of their own): the
//! engine's job for a task, per-repetition seeds, and one prediction per repetition from the
//! replica's passes.

use uqbench_core::{combine_members, Family, Prediction, Replicas, Task};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::mlp::MlpShape;
use uqbench_engine::trainer::{Job, TrainOutput, TrainSettings};

/// A task's data in the engine's form for one replica per repetition.
pub struct OwnNetJob {
    /// The network (one output).
    pub shape: MlpShape,
    /// The optimiser's settings for the task's epochs and likelihood.
    pub settings: TrainSettings,
    /// Training and test inputs, row-major, standardised as the network asks.
    pub x_train: Vec<f32>,
    /// Test inputs.
    pub x_test: Vec<f32>,
    replicas: Replicas,
    targets: Vec<Vec<f32>>,
}

impl OwnNetJob {
    /// The job of method `name` with `config`'s network and optimiser on `task`.
    pub fn new<S>(task: &Task<'_>, name: &str, config: &MethodConfig<S>) -> OwnNetJob {
        let (x_train, x_test) = task.inputs_f32(config.net.standardize);
        OwnNetJob {
            shape: config.net.shape(task.d, 1),
            settings: TrainSettings {
                likelihood: task.likelihood,
                ..config.optim.settings(task.epochs, task.n_train())
            },
            x_train,
            x_test,
            replicas: task.replicas(name, 1),
            targets: task.y_train_f32(),
        }
    }

    /// The engine's job.
    pub fn job(&self) -> Job<'_> {
        Job {
            shape: &self.shape,
            x_train: &self.x_train,
            targets: &self.targets,
            replica_targets: &self.replicas.targets,
            init_seeds: &self.replicas.init,
            stream_seeds: &self.replicas.stream,
            replica_ids: &self.replicas.ids,
            x_test: &self.x_test,
            init: None,
            inputs: None,
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
