//! The batched training engine: R replicas of a network trained as one tensor program.
//!
//! Every replica has its own weights (`[R, in, out]`), its own targets and its own random
//! streams; the loss is the sum of per-replica losses and Adam is per element, so replica i
//! trained in a batch of R computes exactly what it computes alone. Replicas are split into
//! chunks (by a memory budget, and on the CPU also to keep a chunk's working set in cache);
//! chunks run one after another on a GPU and on parallel threads on the CPU. None of this
//! changes a replica's numbers.
//!
//! One concern per file:
//! - [`settings`]: the optimiser, batching and stochastic-layer settings of a job;
//! - [`job`]: the job's data and the replicas' seeds;
//! - `tasks`: several tasks' trainings, each with its own inputs, as one job
//!   ([`train_tasks`]: the decision track's repetitions batched);
//! - [`memory`]: the resources, and the memory plan that cuts replicas into chunks;
//! - [`pool`]: the trainer's schedule for any model ([`ChunkTrainer`], its [`Layout`]):
//!   chunks on worker threads, progress, divergence per replica; burn-autodiff modules and the
//!   methods' own networks run on it too;
//! - `network`: the built-in network's forward, hand-written backward, objective and Adam step;
//! - [`head`]: the loss on the output and its gradient, as a trait ([`Head`]) with the
//!   likelihoods' heads (½·MSE, Gaussian NLL, Bernoulli logit) and [`head::check`], which a
//!   method's own head passes;
//! - [`update`]: a method's own update in place of Adam (the [`Update`] trait, with its host
//!   and tensor forms: SG-MCMC's Langevin dynamics is one);
//! - [`collect`]: training by-products as collectors (a method brings its own);
//! - `chunk`: the built-in network's training of one chunk;
//! - `host`: the same on the CPU, as fused loops over one replica's points on `crate::cpu`'s
//!   networks;
//! - [`ops`]: counting the tensor operations a run issues, in burn's fusion server (GPU);
//! - `probe` (tests): the objective's gradient against finite differences.
//!
//! What is specific to one method lives with it in `uqbench-models` or `uqbench-samplers`:
//! its head (β-NLL, the evidential head, the pinball head), its collector (SWAG's moments), and
//! a network of its own with its host trainer (the epinet's, BatchEnsemble's), built on the
//! public host blocks (`crate::cpu`: [`crate::cpu::ReplicaNet`] and the dispatched
//! `forward_at`, `backward_at`, `adam_at`; [`crate::device_rng::HostStream`]; [`run_chunks`]).
//!
//! Per replica the built-in objective is MATLAB's (the reference implementation of [000]):
//! ½·mean_n (f(x_n) − y_n)² + (λ/2)·Σ‖W‖², with λ on weights only (biases are not
//! regularised), optimised by Adam, plus the stochastic layer's regulariser.

pub mod agree;
pub(crate) mod chunk;
pub mod collect;
pub mod head;
mod host;
pub mod job;
pub mod memory;
pub(crate) mod network;
pub mod ops;
pub mod pool;
#[cfg(test)]
mod probe;
pub mod settings;
mod tasks;
pub mod update;

pub use chunk::{PURPOSE_FIT, PURPOSE_NOISE, PURPOSE_PREDICT};
pub use head::{BernoulliLogit, GaussianNll, HalfMse, Head};
pub use job::{Inputs, Job};
pub use memory::{
    bytes_per_replica, chunk_size, largest_tensor_per_replica, Resources, CPU_CHUNK_BYTES,
    DEVICE_MEMORY_FRACTION, WGPU_MAX_BINDING,
};
pub use network::{try_download, upload};
pub use ops::OpCounts;
pub use pool::{
    host_chunk, run_chunks, ChunkOut, ChunkTrainer, HostChunk, Layout, TrainOutput, Transfers,
};
pub use settings::{Batching, LrSwitch, TrainSettings};
pub use tasks::train_tasks;
pub use update::{HostSlot, HostSlots, HostUpdate, TensorSlot, TensorUpdate, Update};

use crate::mlp::{HostWeights, MlpShape};
use uqbench_core::{MethodError, Task};

/// Whether [`train`] runs on the CPU's host execution (`crate::cpu::trainer`: loops per
/// replica) rather than as batched tensors on the backend: on every CPU backend, unless the
/// run's host settings turn the loops off.
pub fn trains_on_host(res: &Resources) -> bool {
    host::applies(res)
}

/// Trains every replica of `job` on the built-in network and predicts the test inputs.
/// `progress` is called with the number of replicas finished so far, after every chunk.
pub fn train(
    job: &Job<'_>,
    settings: &TrainSettings,
    res: &Resources,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<TrainOutput, MethodError> {
    settings.check_job(job)?;
    if trains_on_host(res) {
        let trainer = host::HostTrainer {
            job,
            settings,
            level: res.simd,
        };
        return run_chunks(&trainer, res, progress);
    }
    let trainer = chunk::TensorTrainer {
        job,
        settings,
        device: res.device.clone(),
        net: network::Network {
            path: res.kernel_path(),
            slope: job.shape.negative_slope,
            dropout: settings.dropout.clone(),
            head: settings.head(),
        },
    };
    run_chunks(&trainer, res, progress)
}

/// The replica layout of a method on the built-in network: `members` replicas per repetition
/// of `task` (repetition-major, each with the seeds `Task::replicas` derives from `name`), the
/// network `shape` on the task's inputs (standardised when `standardize`), trained with
/// `settings`. Read a member back with [`TrainOutput::member`].
#[allow(clippy::too_many_arguments)]
pub fn train_task(
    task: &Task<'_>,
    name: &str,
    members: usize,
    shape: &MlpShape,
    standardize: bool,
    settings: &TrainSettings,
    res: &Resources,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<TrainOutput, MethodError> {
    let moments = standardize.then(|| task.input_moments());
    with_task_job(task, name, members, shape, moments.as_deref(), |job| {
        train(job, settings, res, progress)
    })
}

/// `f` on the job of `members` replicas per repetition of `task` (seeds from `name`), the
/// network `shape` on the task's inputs standardised by `moments` when given.
fn with_task_job<T>(
    task: &Task<'_>,
    name: &str,
    members: usize,
    shape: &MlpShape,
    moments: Option<&[(f64, f64)]>,
    f: impl FnOnce(&Job<'_>) -> Result<T, MethodError>,
) -> Result<T, MethodError> {
    task.validate()?;
    let replicas = task.replicas(name, members);
    let (x_train, x_test) = task.inputs_f32_by(moments);
    let targets = task.y_train_f32();
    f(&Job {
        shape,
        x_train: &x_train,
        targets: &targets,
        replica_targets: &replicas.targets,
        init_seeds: &replicas.init,
        stream_seeds: &replicas.stream,
        replica_ids: &replicas.ids,
        x_test: &x_test,
        init: None,
        inputs: None,
    })
}

/// Where a warm-started training of the built-in network begins: every replica's weights
/// after the previous training, and the (mean, sd) per input dimension that training
/// standardised its inputs by, so that the network continues on the scale of x it learned
/// (a later task's own moments would move every input under the trained weights).
#[derive(Debug, Clone, PartialEq)]
pub struct WarmWeights {
    /// The replicas' weights, in the task's replica order.
    pub weights: HostWeights,
    /// The standardisation, when the inputs are standardised.
    pub moments: Option<Vec<(f64, f64)>>,
}

impl WarmWeights {
    /// The standardisation a training of `task` from `warm` uses: the warm state's (the scale
    /// its weights learned), else the task's own moments when `standardize`.
    pub fn moments_for(
        warm: Option<&WarmWeights>,
        standardize: bool,
        task: &Task<'_>,
    ) -> Option<Vec<(f64, f64)>> {
        match warm {
            Some(w) => w.moments.clone(),
            None => standardize.then(|| task.input_moments()),
        }
    }

    /// The weights in a method's warm state (`None` for a fresh start): an error naming
    /// `method` when the state is another method's.
    pub fn of<'s>(
        state: Option<&'s uqbench_core::WarmState>,
        method: &str,
    ) -> Result<Option<&'s WarmWeights>, MethodError> {
        state
            .map(|s| {
                s.downcast_ref::<WarmWeights>().ok_or_else(|| {
                    MethodError::invalid(
                        format!("{method}'s warm start"),
                        "a state of another method",
                        "the state this method returned",
                    )
                })
            })
            .transpose()
    }
}

/// [`train_task`] from `from` (a fresh start, as `train_task`, when `None`), returning beside
/// the output the replicas' weights after it (read by a [`collect::FinalWeights`] collector
/// appended to the settings' own, whose states are left out of the output's `collected`). The
/// inputs are standardised by `from`'s moments when it has some, else by the task's. A replica
/// whose weights in `from` are not finite (its training diverged) starts afresh from Xavier's
/// weights of its seed.
#[allow(clippy::too_many_arguments)]
pub fn train_task_from(
    task: &Task<'_>,
    name: &str,
    members: usize,
    shape: &MlpShape,
    standardize: bool,
    settings: &TrainSettings,
    res: &Resources,
    from: Option<&WarmWeights>,
) -> Result<(TrainOutput, WarmWeights), MethodError> {
    let moments = WarmWeights::moments_for(from, standardize, task);
    let (out, weights) = with_task_job(task, name, members, shape, moments.as_deref(), |job| {
        train_from(job, settings, res, from.map(|w| &w.weights))
    })?;
    Ok((out, WarmWeights { weights, moments }))
}

/// [`train`] from the weights `from` (every replica's, in the job's order; Xavier's from the
/// job's seeds when `None`), returning beside the output the replicas' weights after it (read
/// by a [`collect::FinalWeights`] collector appended to the settings' own, whose states are
/// left out of the output's `collected`). A replica whose weights in `from` are not finite
/// (its training diverged) starts afresh from Xavier's weights of its seed.
pub fn train_from(
    job: &Job<'_>,
    settings: &TrainSettings,
    res: &Resources,
    from: Option<&HostWeights>,
) -> Result<(TrainOutput, HostWeights), MethodError> {
    let init = match from {
        Some(w) => {
            w.validate_shape(job.shape, job.replicas())?;
            Some(w.finite_or_fresh(job.shape, job.init_seeds))
        }
        None => None,
    };
    let job = Job {
        init: init.as_ref().or(job.init),
        ..job.clone()
    };
    let mut with_final = settings.clone();
    with_final
        .collectors
        .push(std::sync::Arc::new(collect::FinalWeights));
    let mut out = train(&job, &with_final, res, &|_| {})?;
    let finals = out
        .collected
        .pop()
        .expect("the FinalWeights collector's states");
    let flats: Vec<&[f32]> = (finals.iter())
        .map(|c| match c.as_any().downcast_ref::<collect::Weights>() {
            Some(w) => &w.0[..],
            None => &[],
        })
        .collect();
    Ok((out, HostWeights::from_flat(job.shape, &flats)?))
}
