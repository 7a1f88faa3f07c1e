//! BatchEnsemble (Wen, Tran & Ba 2020, "BatchEnsemble: an alternative approach to efficient
//! ensemble and lifelong learning"), spec §11: M members that share one weight matrix per
//! layer, member m's weights W ∘ (r_m s_mᵀ) with rank-1 "fast weights" r_m (inputs) and s_m
//! (outputs) and a bias of its own, trained together as one network. Network and training:
//! [`net`].
//!
//! **The reference implementations' conventions** (the authors' `DenseBatchEnsemble` in
//! edward2 with uncertainty-baselines' training, and torch-uncertainty's `BatchLinear`), and
//! where uqbench departs from them:
//! - a layer computes ((x ∘ r_m) W) ∘ s_m + b_m: the vectorised form of x (W ∘ r_m s_mᵀ) + b_m
//!   (eq. 2 of the paper); every layer, the output layer included, is batch-ensembled;
//! - fast weights are drawn N(1, 0.5²) (uncertainty-baselines' `random_sign_init = -0.5`,
//!   torch-uncertainty's `normal_(mean=1.0, std=0.5)`): `fast_init_sd` 0.5; 0 gives unit
//!   fast weights, M copies of one network. Member biases start at zero (edward2's
//!   `ensemble_bias_initializer`; torch-uncertainty draws them uniform, uqbench's networks
//!   start their biases at zero);
//! - every member sees every training point (edward2's training tiles the batch M times) and
//!   the loss is the mean over members of each member's loss;
//! - the L2 term is on the shared weights only: uncertainty-baselines decays "kernel" and
//!   "bias" variables, not the fast weights; uqbench's networks decay weights, not biases,
//!   so λ/2·‖W‖² on the shared W once per ensemble;
//! - M = `members` 4 (the paper's ensemble size for its CIFAR and ImageNet results);
//! - departures, for uqbench's shared conventions: the shared weights' initialiser (Glorot,
//!   as every network here), leaky ReLU and the engine's Adam with the method's `lr` (the
//!   authors train their fast weights at half the learning rate, `fast_weight_lr_multiplier
//!   = 0.5`, with SGD and momentum; uqbench trains every parameter with one Adam);
//!   training is full-batch, `batch_size` is refused.
//!
//! Prediction: the M members' outputs at every test input, combined as an ensemble's (mean,
//! sd over members, intervals from `intervals`); each member is one function, so they are
//! the joint draws.

pub mod host;
pub mod net;

use serde::{Deserialize, Serialize};

use crate::own_net::{per_task, repetition_seeds, run_one, run_together, OwnNetJob};
use net::BatchParts;
use uqbench_core::{Compute, IntervalSetting, Method, MethodError, Prediction, Task};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::trainer::Resources;

/// BatchEnsemble's own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchEnsembleSettings {
    /// Members M sharing the weights (4).
    pub members: usize,
    /// The fast weights' initial sd around 1 (0.5; 0: unit fast weights, one network).
    pub fast_init_sd: f64,
    /// Intervals from mean ± z·std of the members (`normal`) or their quantiles.
    pub intervals: IntervalSetting,
}

impl Default for BatchEnsembleSettings {
    fn default() -> Self {
        BatchEnsembleSettings {
            members: 4,
            fast_init_sd: 0.5,
            intervals: IntervalSetting::Normal,
        }
    }
}

/// Settings of BatchEnsemble: the network, the optimiser and [`BatchEnsembleSettings`].
pub type BatchEnsembleConfig = MethodConfig<BatchEnsembleSettings>;

/// The method.
#[derive(Debug, Clone)]
pub struct BatchEnsemble {
    name: String,
    config: BatchEnsembleConfig,
}

impl BatchEnsemble {
    /// Checks the settings up front.
    pub fn new(name: &str, config: BatchEnsembleConfig) -> Result<BatchEnsemble, MethodError> {
        let c = &config;
        if c.members < 2 {
            return Err(MethodError::invalid(
                format!("{name}.members"),
                c.members,
                "at least 2: an ensemble's spread needs two members",
            ));
        }
        if !(c.fast_init_sd.is_finite() && c.fast_init_sd >= 0.0) {
            return Err(MethodError::invalid(
                format!("{name}.fast_init_sd"),
                c.fast_init_sd,
                "a number ≥ 0 (0: unit fast weights)",
            ));
        }
        if let Some(b) = c.optim.batch_size {
            return Err(MethodError::invalid(
                format!("{name}.batch_size"),
                b,
                "unset: BatchEnsemble trains on full batches",
            ));
        }
        c.net.shape(1, 1).validate()?;
        Ok(BatchEnsemble {
            name: name.to_string(),
            config,
        })
    }
}

impl Method for BatchEnsemble {
    fn name(&self) -> &str {
        &self.name
    }

    /// One engine replica per repetition: the M members are one network.
    fn replicas_per_repetition(&self) -> usize {
        1
    }

    /// M members' forward and backward passes per step.
    fn cost(&self, n_train: usize, epochs: usize) -> f64 {
        (self.config.members * epochs.max(1) * n_train) as f64
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        let shape = self.config.net.shape(task.d, 1);
        let fast: usize = shape.layers().iter().map(|&(i, o)| i + 2 * o).sum();
        let shared: usize = shape.layers().iter().map(|&(i, o)| i * o).sum();
        Some(shared + self.config.members * fast)
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        run_one(task, |tasks| {
            self.train(tasks, compute, keep_samples, progress)
        })
    }

    /// The tasks as one engine job when they can share one, else side by side.
    fn run_tasks(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
    ) -> Result<Vec<Vec<Prediction>>, MethodError> {
        run_together(self, tasks, compute, keep_samples, |tasks| {
            self.train(tasks, compute, keep_samples, &|_| {})
        })
    }
}

impl BatchEnsemble {
    /// Every task's repetitions trained as one job ([`OwnNetJob::of_tasks`]; the caller
    /// validated the tasks and checked that they can share one).
    fn train(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Vec<Prediction>>, MethodError> {
        let c = &self.config;
        let resources = &Resources::of(compute)?;
        let data = OwnNetJob::of_tasks(tasks, &self.name, c);
        let fast_seeds: Vec<u64> = (tasks.iter())
            .flat_map(|task| repetition_seeds(task, &format!("{}/fast", self.name)))
            .collect();
        let parts = BatchParts {
            members: c.members,
            fast_seeds: &fast_seeds,
            fast_init_sd: c.fast_init_sd,
        };
        let out = net::train(&data.job(), &parts, &data.settings, resources, progress)?;
        Ok(per_task(
            out,
            tasks,
            &data.counts,
            c.intervals.family(),
            keep_samples,
        ))
    }
}
