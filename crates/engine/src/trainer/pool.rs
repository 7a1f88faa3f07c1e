//! The trainer's schedule, shared by every model: the job's replicas cut into chunks by the
//! memory plan, chunks run on worker threads (one after another on a GPU), progress after
//! every chunk, divergence judged per replica. A model provides [`ChunkTrainer`]: how many
//! bytes a replica needs and how to train a range of replicas. Both the hand-written network
//! ([`super::train`]) and burn-autodiff modules (`crate::autodiff`) run here, so they share the
//! chunking, threads, seeds (a replica's seeds are indexed by its position in the job, never
//! by its chunk) and progress reporting.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::collect::Collected;
use super::memory::{chunk_size, Resources};
use crate::cpu::feature_major::FeatureMajorNet;
use crate::cpu::{Part, PointMajorNet, ReplicaNet};
use crate::mlp::MlpShape;
use uqbench_core::{Member, MethodError};

/// The result of training every replica of a job.
#[derive(Debug)]
pub struct TrainOutput {
    /// Test predictions `[R, T, M, d_out]`, row-major: T prediction passes per replica.
    pub test_out: Vec<f32>,
    /// T.
    pub passes: usize,
    /// Mean prediction at the training inputs `[R, N]` per replica (over the T passes, drawn
    /// from a stream of their own so that the test predictions do not depend on them): the
    /// training fit that `train_mse` and `fit_ratio` report.
    pub train_pred: Vec<f32>,
    /// The dropout layer's rate per replica (p, or α for variational dropout).
    pub rates: Option<Vec<f64>>,
    /// The optimised objective per replica at the final parameters, on all N points: the
    /// data term with the stochastic layer at its expectation, plus the L2 term and the
    /// stochastic layer's regulariser (concrete dropout's, or variational dropout's KL).
    pub final_objective: Vec<f64>,
    /// Whether the replica's training diverged (a non-finite objective, rate or prediction).
    pub diverged: Vec<bool>,
    /// Replicas per chunk that were used.
    pub chunk: usize,
    /// Host↔device traffic, summed over chunks.
    pub transfers: Transfers,
    /// Per collector of the settings (in their order), every replica's collected state.
    pub collected: Vec<Vec<Box<dyn Collected>>>,
}

impl TrainOutput {
    /// Collector `c`'s state of every replica as its type `T` (see [`super::collect`]).
    ///
    /// # Panics
    /// When the settings had no collector `c` or its states are not `T`s: a method asks for
    /// the collectors it put in its settings.
    pub fn collected<T: 'static>(&self, c: usize) -> Vec<&T> {
        self.collected[c]
            .iter()
            .map(|s| {
                s.as_any()
                    .downcast_ref::<T>()
                    .expect("the collector's own state type")
            })
            .collect()
    }

    /// The output cut into consecutive parts of `counts` replicas each (summing to R), each
    /// the output of its replicas alone; `chunk` and `transfers` stay the whole job's in
    /// every part.
    pub fn split(mut self, counts: &[usize]) -> Vec<TrainOutput> {
        let r = self.diverged.len().max(1);
        let (per_test, per_train) = (self.test_out.len() / r, self.train_pred.len() / r);
        let mut start = 0;
        let mut out = Vec::with_capacity(counts.len());
        for &c in counts {
            let span = start..start + c;
            out.push(TrainOutput {
                test_out: self.test_out[span.start * per_test..span.end * per_test].to_vec(),
                passes: self.passes,
                train_pred: self.train_pred[span.start * per_train..span.end * per_train].to_vec(),
                rates: self.rates.as_ref().map(|v| v[span.clone()].to_vec()),
                final_objective: self.final_objective[span.clone()].to_vec(),
                diverged: self.diverged[span].to_vec(),
                chunk: self.chunk,
                transfers: self.transfers,
                // Each collector's states from the front: the parts come in replica order.
                collected: (self.collected.iter_mut())
                    .map(|states| states.drain(..c).collect())
                    .collect(),
            });
            start += c;
        }
        out
    }

    /// Replica `replica` as an ensemble member, for one output per point (`d_out` = 1): its
    /// T passes at the `m` test inputs, its fit at the `n` training inputs, its objective and
    /// whether it diverged.
    pub fn member(&self, replica: usize, m: usize, n: usize) -> Member<'_> {
        let t = self.passes;
        Member {
            passes: (0..t)
                .map(|pass| {
                    let start = (replica * t + pass) * m;
                    &self.test_out[start..start + m]
                })
                .collect(),
            train: &self.train_pred[replica * n..(replica + 1) * n],
            objective: self.final_objective[replica],
            diverged: self.diverged[replica],
        }
    }
}

/// Host↔device traffic of a job, summed over its chunks: what a GPU waits on. Training that
/// keeps the device busy uploads and reads a number of tensors per chunk that does not grow
/// with the epochs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Chunks run.
    pub chunks: u64,
    /// Optimiser steps, summed over chunks.
    pub steps: u64,
    /// Host→device uploads.
    pub uploads: u64,
    /// Device→host reads.
    pub reads: u64,
}

/// A chunk's result, for replicas `range` of the job.
#[derive(Debug, Default)]
pub struct ChunkOut {
    /// Test predictions `[rc, T, M, d_out]`.
    pub pred: Vec<f32>,
    /// Mean predictions at the training inputs `[rc, N]`.
    pub train_pred: Vec<f32>,
    /// The optimised objective per replica at the final parameters.
    pub objective: Vec<f64>,
    /// The stochastic layer's rate per replica, or empty.
    pub rates: Vec<f64>,
    /// Optimiser steps the chunk took (each a step of all its replicas).
    pub steps: u64,
    /// Host→device uploads the chunk made (tensors created from host data), counted where
    /// they happen; 0 where a model does not count.
    pub uploads: u64,
    /// Device→host reads the chunk made.
    pub reads: u64,
    /// Per collector, every replica of the chunk's collected state (empty without
    /// collectors).
    pub collected: Vec<Vec<Box<dyn Collected>>>,
}

/// The chunks' collected states `(first replica, [collector][replica])` joined in replica
/// order: `[collector][replica of the job]`.
fn gather_collected(
    parts: &mut [(usize, Vec<Vec<Box<dyn Collected>>>)],
) -> Vec<Vec<Box<dyn Collected>>> {
    parts.sort_by_key(|(start, _)| *start);
    let collectors = parts.first().map_or(0, |(_, c)| c.len());
    let mut out: Vec<Vec<Box<dyn Collected>>> = (0..collectors).map(|_| Vec::new()).collect();
    for (_, part) in parts.iter_mut() {
        for (all, chunk) in out.iter_mut().zip(part.iter_mut()) {
            all.append(chunk);
        }
    }
    out
}

/// The shape of a job's results, what the scheduler lays out: [`super::Job::layout`] gives it
/// for a model on a job's replicas and points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Replicas R.
    pub replicas: usize,
    /// Training points N.
    pub n_train: usize,
    /// Test points M.
    pub n_test: usize,
    /// Outputs per test point.
    pub outputs: usize,
    /// Prediction passes T per replica.
    pub passes: usize,
    /// Whether the model reports a rate per replica ([`ChunkOut::rates`]).
    pub rates: bool,
}

/// A model the trainer can run chunk by chunk: its [`Layout`], its memory per replica, and
/// the training of a range of replicas.
pub trait ChunkTrainer: Sync {
    /// What the job's results look like (for a model on a [`super::Job`]:
    /// `job.layout(outputs, passes)`).
    fn layout(&self) -> Layout;
    /// Training points N and test points M, from the layout.
    fn points(&self) -> (usize, usize) {
        let l = self.layout();
        (l.n_train, l.n_test)
    }
    /// Device bytes one replica needs during training and prediction (the memory plan).
    fn bytes_per_replica(&self) -> usize;
    /// Bytes per replica a training step touches, which sizes a CPU chunk to the cache; by
    /// default all of [`ChunkTrainer::bytes_per_replica`].
    fn step_bytes_per_replica(&self) -> usize {
        self.bytes_per_replica()
    }
    /// Bytes per replica of the model's largest single tensor (the device's binding cap
    /// limits a chunk by it); by default all of [`ChunkTrainer::bytes_per_replica`].
    fn largest_tensor_per_replica(&self) -> usize {
        self.bytes_per_replica()
    }
    /// Trains replicas `range` of the job and predicts; a replica's numbers must not depend
    /// on which other replicas share its chunk.
    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, MethodError>;
}

/// Trains every replica of `model` in chunks and gathers the outputs. `progress` is called
/// with the number of replicas finished so far, after every chunk.
pub fn run_chunks(
    model: &dyn ChunkTrainer,
    res: &Resources,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<TrainOutput, MethodError> {
    let Layout {
        replicas: r,
        n_train: n,
        n_test: m,
        outputs: dout,
        passes,
        rates: has_rates,
    } = model.layout();
    let chunk = chunk_size(
        r,
        model.bytes_per_replica(),
        model.step_bytes_per_replica(),
        model.largest_tensor_per_replica(),
        res,
    )?;
    let chunks: Vec<Range<usize>> = (0..r)
        .step_by(chunk)
        .map(|s| s..(s + chunk).min(r))
        .collect();
    let per_replica_out = passes * m * dout;
    let out = Mutex::new((
        vec![0.0f32; r * per_replica_out],
        vec![0.0f64; r],
        vec![f64::NAN; r],
        vec![0.0f32; r * n],
        None::<MethodError>,
        Vec::<(usize, Vec<Vec<Box<dyn Collected>>>)>::new(),
    ));
    let counts = Mutex::new(Transfers::default());
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let threads = res.threads.clamp(1, chunks.len());
    let work = || loop {
        let c = next.fetch_add(1, Ordering::SeqCst);
        let Some(range) = chunks.get(c).cloned() else {
            break;
        };
        let result = model.train_chunk(range.clone());
        {
            let mut guard = out.lock().expect("no panics while holding the lock");
            match result {
                Ok(chunk_out) => {
                    let mut c = counts.lock().expect("no panics while holding the lock");
                    c.chunks += 1;
                    c.steps += chunk_out.steps;
                    c.uploads += chunk_out.uploads;
                    c.reads += chunk_out.reads;
                    drop(c);
                    guard.0[range.start * per_replica_out..range.end * per_replica_out]
                        .copy_from_slice(&chunk_out.pred);
                    guard.1[range.clone()].copy_from_slice(&chunk_out.objective);
                    guard.3[range.start * n..range.end * n].copy_from_slice(&chunk_out.train_pred);
                    if !chunk_out.collected.is_empty() {
                        guard.5.push((range.start, chunk_out.collected));
                    }
                    if !chunk_out.rates.is_empty() {
                        guard.2[range.clone()].copy_from_slice(&chunk_out.rates);
                    }
                }
                Err(e) => {
                    guard.4.get_or_insert(e);
                    // Stop handing out chunks: the job has failed.
                    next.store(chunks.len(), Ordering::SeqCst);
                    break;
                }
            }
        }
        progress(done.fetch_add(range.len(), Ordering::SeqCst) + range.len());
    };
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(work);
            }
        });
    }
    let (test_out, final_objective, rates, train_pred, error, mut parts) =
        out.into_inner().expect("workers finished");
    if let Some(e) = error {
        return Err(e);
    }
    let diverged = (0..r)
        .map(|k| {
            !final_objective[k].is_finite()
                || (has_rates && !rates[k].is_finite())
                || test_out[k * per_replica_out..(k + 1) * per_replica_out]
                    .iter()
                    .any(|v| !v.is_finite())
                || train_pred[k * n..(k + 1) * n]
                    .iter()
                    .any(|v| !v.is_finite())
        })
        .collect();
    Ok(TrainOutput {
        test_out,
        passes,
        train_pred,
        final_objective,
        rates: has_rates.then_some(rates),
        diverged,
        chunk,
        transfers: counts.into_inner().expect("workers finished"),
        collected: gather_collected(&mut parts),
    })
}

/// A host trainer's chunk on one replica network of the host, in the layout that fits its
/// shape: what the engine's host trainer and the host trainers of networks of their own
/// (`uqbench_models`' `batch_ensemble/host.rs`, `epinet/host.rs`) run; their
/// `ChunkTrainer::train_chunk` is `Ok(host_chunk(self, range))`.
pub trait HostChunk: Sync {
    /// The network the chunks run on: its shape, the most points a pass takes, and the part.
    fn replica_net(&self) -> (&MlpShape, usize, Part);
    /// Trains replicas `range` of the job on `net` (one per chunk) and predicts.
    fn train_on<N: ReplicaNet>(&self, net: N, range: Range<usize>) -> ChunkOut;
}

/// Runs [`HostChunk::train_on`] on the network of [`HostChunk::replica_net`]: the
/// feature-major loops for networks whose every layer is small ([`MlpShape::host_sized`]:
/// [002]'s 1-W-1 networks), the point-major register tiles otherwise (E1–E3's networks).
pub fn host_chunk<T: HostChunk>(trainer: &T, range: Range<usize>) -> ChunkOut {
    let (shape, points, part) = trainer.replica_net();
    let (layers, slope) = (shape.layers(), shape.negative_slope);
    if shape.host_sized() {
        trainer.train_on(FeatureMajorNet::part(layers, slope, points, part), range)
    } else {
        trainer.train_on(PointMajorNet::new(layers, slope, points, part), range)
    }
}
