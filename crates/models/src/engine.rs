//! The batched training core: R independent replicas of the MLP trained as one tensor
//! program, forward and backward written out by hand with batched matrix products.
//!
//! Every replica has its own weights (`[R, in, out]`), its own targets and its own random
//! streams; the loss is the sum of per-replica losses and Adam is per element, so replica i
//! trained in a batch of R computes exactly what it computes alone. Replicas are split into
//! chunks (by a memory budget, and on the CPU also to keep a chunk's working set in cache);
//! chunks run one after another on a GPU and on parallel threads on the CPU. None of this
//! changes a replica's numbers.
//!
//! Per replica the objective is MATLAB's (the reference implementation of [000]):
//! ½·mean_n (f(x_n) − y_n)² + (λ/2)·Σ‖W‖², with λ on weights only (biases are not
//! regularised), optimised by Adam.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use burn::tensor::{Device, Tensor, TensorData};
use uqbench_anchor::Rng;

use crate::backend::BackendKind;
use crate::dropout::{self, Dropout, LastCache};
use crate::error::ModelError;
use crate::kernels::{self, AdamStep, KernelPath};
use crate::mlp::{xavier_init, MlpShape};

/// How each step's training points are chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum Batching {
    /// Every step uses all N points (one step per epoch).
    Full,
    /// Every epoch, the points in a fresh random order cut into mini-batches of `size`
    /// (the last may be smaller): ⌈N/size⌉ steps per epoch.
    Shuffled {
        /// Mini-batch size.
        size: usize,
    },
    /// Every epoch, `per_epoch` mini-batches of `size` points drawn with replacement
    /// ([000]'s EnsBS: size N/2, two per epoch).
    WithReplacement {
        /// Mini-batch size.
        size: usize,
        /// Mini-batches per epoch.
        per_epoch: usize,
    },
    /// One resample of N points with replacement per replica, drawn before training and
    /// then used full-batch (the classic bootstrap of [002]/[004]).
    Resample,
}

/// Optimisation settings shared by all replicas of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainSettings {
    /// Passes over the training data.
    pub epochs: usize,
    /// Adam learning rate.
    pub lr: f64,
    /// Adam β₁.
    pub beta1: f64,
    /// Adam β₂.
    pub beta2: f64,
    /// Adam ε (PyTorch's 1e-8; burn's default is 1e-5).
    pub eps: f64,
    /// L2 factor λ on the weights (spec §3: 1/N).
    pub weight_decay: f64,
    /// Point selection per step.
    pub batching: Batching,
    /// Adversarial training ([000] EnsAdvA): per input dimension the ε of
    /// x' = x + ε·sign(∇ₓ loss); the step's loss is loss(x) + loss(x').
    pub adversarial: Option<Vec<f64>>,
    /// A stochastic layer in front of the last linear layer (the dropout methods).
    pub dropout: Option<Dropout>,
    /// A two-output head (mean, log variance) trained with the Gaussian NLL; the network's
    /// `d_out` must be 2.
    pub heteroscedastic: bool,
    /// Stochastic forward passes at prediction (1 for deterministic networks).
    pub mc_passes: usize,
}

impl TrainSettings {
    /// Spec §3's optimiser for N training points: Adam(1e-2, 0.9, 0.999, 1e-8), λ = 1/N,
    /// full batch.
    pub fn paper(epochs: usize, n_train: usize) -> TrainSettings {
        TrainSettings {
            epochs,
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 1.0 / n_train as f64,
            batching: Batching::Full,
            adversarial: None,
            dropout: None,
            heteroscedastic: false,
            mc_passes: 1,
        }
    }

    /// Checks the settings against the number of training points and the network.
    pub fn validate(&self, n_train: usize, shape: &MlpShape) -> Result<(), ModelError> {
        let d_in = shape.d_in;
        if self.mc_passes == 0 {
            return Err(ModelError::invalid("prediction passes T", 0, "at least 1"));
        }
        if self.dropout.is_none() && self.mc_passes != 1 {
            return Err(ModelError::invalid(
                "prediction passes T",
                self.mc_passes,
                "1: a network without a stochastic layer gives the same prediction every pass",
            ));
        }
        if let Some(d) = &self.dropout {
            d.validate()?;
        }
        let want = if self.heteroscedastic { 2 } else { 1 };
        if shape.d_out != want {
            return Err(ModelError::invalid(
                "network outputs",
                shape.d_out,
                format!(
                    "{want} for a {} head",
                    if self.heteroscedastic {
                        "heteroscedastic (mean, log variance)"
                    } else {
                        "mean-only"
                    }
                ),
            ));
        }
        if self.epochs == 0 {
            return Err(ModelError::invalid("epochs", 0, "at least 1"));
        }
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(ModelError::invalid(name, v, "a positive number"))
            }
        };
        positive("lr", self.lr)?;
        positive("eps", self.eps)?;
        for (name, b) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&b) {
                return Err(ModelError::invalid(name, b, "a number in [0, 1)"));
            }
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(ModelError::invalid(
                "weight_decay",
                self.weight_decay,
                "a number ≥ 0",
            ));
        }
        match &self.batching {
            Batching::Shuffled { size } | Batching::WithReplacement { size, .. }
                if *size == 0 || *size > n_train =>
            {
                return Err(ModelError::invalid(
                    "batch size",
                    size,
                    format!("between 1 and the number of training points, {n_train}"),
                ))
            }
            Batching::WithReplacement { per_epoch: 0, .. } => {
                return Err(ModelError::invalid("batches per epoch", 0, "at least 1"))
            }
            _ => {}
        }
        if let Some(eps) = &self.adversarial {
            if eps.len() != d_in || eps.iter().any(|e| !(e.is_finite() && *e >= 0.0)) {
                return Err(ModelError::invalid(
                    "adversarial epsilon",
                    format!("{eps:?}"),
                    format!("{d_in} finite values ≥ 0, one per input dimension"),
                ));
            }
        }
        Ok(())
    }

    /// Optimiser steps per epoch.
    pub fn steps_per_epoch(&self, n_train: usize) -> usize {
        match self.batching {
            Batching::Full | Batching::Resample => 1,
            Batching::Shuffled { size } => n_train.div_ceil(size),
            Batching::WithReplacement { per_epoch, .. } => per_epoch,
        }
    }
}

/// Everything a training job needs: the shared inputs, per-repetition targets and the
/// replicas' seeds.
#[derive(Debug, Clone)]
pub struct Job<'a> {
    /// The network.
    pub shape: &'a MlpShape,
    /// Training inputs, row-major `[N, d]`, shared by all replicas.
    pub x_train: &'a [f32],
    /// Training targets per repetition, each of length N.
    pub targets: &'a [Vec<f32>],
    /// For every replica, the index of its targets in `targets`.
    pub replica_targets: &'a [usize],
    /// For every replica, the seed of its initial weights.
    pub init_seeds: &'a [u64],
    /// For every replica, the seed of its stream of mini-batch (or resample) and dropout
    /// draws.
    pub stream_seeds: &'a [u64],
    /// Test inputs, row-major `[M, d]`.
    pub x_test: &'a [f32],
}

impl Job<'_> {
    fn n_train(&self) -> usize {
        self.x_train.len() / self.shape.d_in
    }

    fn n_test(&self) -> usize {
        self.x_test.len() / self.shape.d_in
    }

    fn replicas(&self) -> usize {
        self.replica_targets.len()
    }

    fn validate(&self) -> Result<(), ModelError> {
        self.shape.validate()?;
        let d = self.shape.d_in;
        if self.x_train.is_empty() || !self.x_train.len().is_multiple_of(d) {
            return Err(ModelError::invalid(
                "training inputs",
                self.x_train.len(),
                format!("N·d values with d = {d}, N ≥ 1"),
            ));
        }
        if self.x_test.is_empty() || !self.x_test.len().is_multiple_of(d) {
            return Err(ModelError::invalid(
                "test inputs",
                self.x_test.len(),
                format!("M·d values with d = {d}, M ≥ 1"),
            ));
        }
        let n = self.n_train();
        if let Some((i, t)) = self.targets.iter().enumerate().find(|(_, t)| t.len() != n) {
            return Err(ModelError::invalid(
                format!("targets[{i}]"),
                format!("{} values", t.len()),
                format!("N = {n} values"),
            ));
        }
        let r = self.replicas();
        if r == 0 {
            return Err(ModelError::invalid("replicas", 0, "at least 1"));
        }
        if self.init_seeds.len() != r || self.stream_seeds.len() != r {
            return Err(ModelError::invalid(
                "replica seeds",
                format!(
                    "{} init and {} stream seeds",
                    self.init_seeds.len(),
                    self.stream_seeds.len()
                ),
                format!("one of each per replica ({r})"),
            ));
        }
        if let Some(&t) = self
            .replica_targets
            .iter()
            .find(|&&t| t >= self.targets.len())
        {
            return Err(ModelError::invalid(
                "replica target index",
                t,
                format!("an index below {}", self.targets.len()),
            ));
        }
        for (name, v) in [
            ("training inputs", self.x_train),
            ("test inputs", self.x_test),
        ] {
            if v.iter().any(|x| !x.is_finite()) {
                return Err(ModelError::invalid(
                    name,
                    "a non-finite value",
                    "finite numbers",
                ));
            }
        }
        if self.targets.iter().flatten().any(|y| !y.is_finite()) {
            return Err(ModelError::invalid(
                "training targets",
                "a non-finite value",
                "finite numbers",
            ));
        }
        Ok(())
    }
}

/// Where and how to run.
#[derive(Debug, Clone)]
pub struct Resources {
    /// The backend.
    pub backend: BackendKind,
    /// Its (non-autodiff) device.
    pub device: Device,
    /// Worker threads for chunks (CPU backends; a GPU device uses one).
    pub threads: usize,
    /// Upper bound on the memory a chunk's tensors may take, in bytes.
    pub memory_budget: usize,
    /// Replicas per chunk; `None` chooses from the memory budget (and, on the CPU, from
    /// [`CPU_CHUNK_BYTES`], to keep a chunk's working set in cache).
    pub chunk: Option<usize>,
}

/// Working-set target of one chunk on a CPU backend, in bytes. A chunk's parameters, Adam
/// moments and activations are touched several times per step; keeping them within about one
/// core's L2 cache (1 MiB on the development machine) made training 1.8× faster than chunks
/// of 32 replicas (`uqbench bench train --chunk C` sweeps; see the README's benchmark
/// section).
pub const CPU_CHUNK_BYTES: usize = 3 << 19;

impl Resources {
    /// Defaults for a backend: all cores on the CPU, 2 GiB per chunk.
    pub fn new(backend: BackendKind, device: Device) -> Resources {
        let threads = if backend == BackendKind::Wgpu {
            1
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        };
        Resources {
            backend,
            device,
            threads,
            memory_budget: 2 << 30,
            chunk: None,
        }
    }

    fn kernel_path(&self) -> KernelPath {
        if self.backend == BackendKind::Flex {
            KernelPath::Flex
        } else {
            KernelPath::Tensor
        }
    }
}

/// The result of training every replica of a job.
#[derive(Debug, Clone, PartialEq)]
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
}

/// Bytes a chunk needs per replica: parameters with gradients and Adam moments, and the
/// activations of a step's forward and backward pass (and of the test forward pass).
pub fn bytes_per_replica(
    shape: &MlpShape,
    settings: &TrainSettings,
    n_train: usize,
    n_test: usize,
) -> usize {
    let params = shape.params_per_replica() * 5;
    let widths: usize = shape.hidden.iter().sum::<usize>() + shape.d_in + shape.d_out;
    let widest = shape
        .hidden
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(shape.d_in);
    let points = match &settings.batching {
        Batching::Full | Batching::Resample => n_train,
        Batching::Shuffled { size } | Batching::WithReplacement { size, .. } => *size,
    };
    let step = if settings.adversarial.is_some() { 2 } else { 1 };
    let activations = points * (widths * 2 + widest * 2) * step;
    let test = n_test * widest * 2 + n_test * shape.d_out * settings.mc_passes;
    4 * (params + activations.max(test) + points * (shape.d_in + 1))
}

/// Replicas per chunk for this job and these resources.
pub fn chunk_size(
    job_replicas: usize,
    per_replica: usize,
    res: &Resources,
) -> Result<usize, ModelError> {
    let fit = res.memory_budget / per_replica.max(1);
    if fit == 0 {
        return Err(ModelError::invalid(
            "memory budget",
            format!("{} MiB", res.memory_budget >> 20),
            format!(
                "at least {} MiB: one replica of this job needs that much",
                per_replica.div_ceil(1 << 20)
            ),
        ));
    }
    let chunk = match res.chunk {
        Some(c) => c,
        None if res.backend == BackendKind::Wgpu => usize::MAX,
        // Cache-sized, but never so large that a thread would sit idle.
        None => {
            (CPU_CHUNK_BYTES / per_replica.max(1)).min(job_replicas.div_ceil(res.threads.max(1)))
        }
    };
    Ok(chunk.min(fit).min(job_replicas).max(1))
}

/// One chunk's parameters and Adam moments on the device.
struct State {
    w: Vec<Tensor<3>>,
    b: Vec<Tensor<3>>,
    mw: Vec<Tensor<3>>,
    vw: Vec<Tensor<3>>,
    mb: Vec<Tensor<3>>,
    vb: Vec<Tensor<3>>,
    /// The dropout layer's learnable scalar per replica `[R, 1, 1]` with its Adam moments.
    param: Option<[Tensor<3>; 3]>,
}

struct Grads {
    w: Vec<Tensor<3>>,
    b: Vec<Tensor<3>>,
    param: Option<Tensor<3>>,
}

fn upload(values: Vec<f32>, shape: [usize; 3], device: &Device) -> Tensor<3> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

fn download(t: Tensor<3>) -> Vec<f32> {
    t.into_data().try_into_vec_as::<f32>().expect("float data")
}

/// Forward and backward passes of the batched MLP, with the optional stochastic layer in
/// front of the last linear layer.
#[derive(Debug, Clone)]
struct Net {
    path: KernelPath,
    slope: f64,
    dropout: Option<Dropout>,
    heteroscedastic: bool,
}

/// What the backward pass needs from the forward pass.
struct Cache {
    /// The input of every layer (for the last layer with dropout: its input before noise).
    inputs: Vec<Tensor<3>>,
    last: Option<LastCache>,
}

impl Net {
    /// The hidden layers: the last hidden activation and every layer's input up to it.
    fn hidden(&self, s: &State, x: Tensor<3>) -> (Tensor<3>, Vec<Tensor<3>>) {
        let last = s.w.len() - 1;
        let mut inputs = Vec::with_capacity(s.w.len());
        let mut h = x;
        for l in 0..last {
            let z = h.clone().matmul(s.w[l].clone());
            inputs.push(h);
            h = kernels::bias_act(self.path, z, &s.b[l], self.slope, true);
        }
        (h, inputs)
    }

    /// The last layer: deterministic without noise, stochastic with it.
    fn last(
        &self,
        s: &State,
        h: Tensor<3>,
        noise: Option<Tensor<3>>,
    ) -> (Tensor<3>, Option<LastCache>) {
        let l = s.w.len() - 1;
        match (&self.dropout, noise) {
            (Some(dropout), Some(noise)) => {
                let param = s.param.as_ref().map(|p| &p[0]);
                let (out, cache) =
                    dropout::forward_last(dropout, h, &s.w[l], &s.b[l], param, noise);
                (out, Some(cache))
            }
            _ => {
                let z = h.matmul(s.w[l].clone());
                (
                    kernels::bias_act(self.path, z, &s.b[l], self.slope, false),
                    None,
                )
            }
        }
    }

    /// Forward pass keeping what the backward pass needs. Without `noise` the dropout
    /// layer is replaced by its expectation (the identity for all three kinds).
    ///
    /// # Shapes
    /// - `x`: `[1 or R, n, d]`, `noise`: from [`Dropout::draw`] → output `[R, n, d_out]`
    fn forward(&self, s: &State, x: Tensor<3>, noise: Option<Tensor<3>>) -> (Tensor<3>, Cache) {
        let (h, mut inputs) = self.hidden(s, x);
        inputs.push(h.clone());
        let (out, last) = self.last(s, h, noise);
        (out, Cache { inputs, last })
    }

    /// Backward pass from δ at the output; returns the gradients and, when asked, δ at the
    /// input.
    fn backward(
        &self,
        s: &State,
        cache: &Cache,
        mut delta: Tensor<3>,
        want_input: bool,
    ) -> (Grads, Option<Tensor<3>>) {
        let layers = s.w.len();
        let mut gw = vec![None; layers];
        let mut gb = vec![None; layers];
        let mut gparam = None;
        let mut input_grad = None;
        for l in (0..layers).rev() {
            let back = match (&cache.last, &self.dropout, l == layers - 1) {
                (Some(last), Some(dropout), true) => {
                    let mut g = dropout::backward_last(dropout, last, &s.w[l], delta.clone());
                    let param = s.param.as_ref().map(|p| &p[0]);
                    dropout::regularize(dropout, &s.w[l], param, &mut g);
                    gw[l] = Some(g.gw);
                    gb[l] = Some(g.gb);
                    gparam = g.gparam;
                    g.dh
                }
                _ => {
                    // A shared input [1, n, in] broadcasts against δ [R, n, out] to [R, in, out].
                    gw[l] = Some(
                        cache.inputs[l]
                            .clone()
                            .swap_dims(1, 2)
                            .matmul(delta.clone()),
                    );
                    gb[l] = Some(delta.clone().sum_dim(1));
                    if l == 0 && !want_input {
                        break;
                    }
                    delta.clone().matmul(s.w[l].clone().swap_dims(1, 2))
                }
            };
            if l == 0 {
                input_grad = want_input.then_some(back);
                break;
            }
            delta = kernels::leaky_backward(self.path, back, &cache.inputs[l], self.slope);
        }
        let grads = Grads {
            w: gw.into_iter().map(|g| g.expect("every layer")).collect(),
            b: gb.into_iter().map(|g| g.expect("every layer")).collect(),
            param: gparam,
        };
        (grads, input_grad)
    }

    /// The data term per replica `[R, 1, 1]`: ½·MSE, or for a heteroscedastic head (mean,
    /// log variance) the Gaussian NLL ½·log σ² + (y − μ)²/(2σ²) without its constant, both
    /// averaged over the n points.
    fn data_term(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        if self.heteroscedastic {
            let (mu, log_var) = split_head(out);
            let sq = (y.clone() - mu).square() * log_var.clone().neg().exp();
            (log_var + sq).mul_scalar(0.5).mean_dim(1)
        } else {
            (out - y.clone()).square().mean_dim(1).mul_scalar(0.5)
        }
    }

    /// The gradient of [`Net::data_term`] at the output `[R, n, d_out]`.
    fn output_delta(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        let n = out.dims()[1];
        if self.heteroscedastic {
            let (mu, log_var) = split_head(out);
            let resid = y.clone() - mu;
            let inv = log_var.neg().exp();
            let d_mu = (resid.clone() * inv.clone()).neg().div_scalar(n as f64);
            let d_lv = (resid.square() * inv)
                .neg()
                .add_scalar(1.0)
                .mul_scalar(0.5)
                .div_scalar(n as f64);
            Tensor::cat(vec![d_mu, d_lv], 2)
        } else {
            (out - y.clone()).div_scalar(n as f64)
        }
    }
}

/// The two columns of a heteroscedastic head `[R, n, 2]`: mean and log variance, `[R, n, 1]`
/// each.
fn split_head(out: Tensor<3>) -> (Tensor<3>, Tensor<3>) {
    let [r, n, _] = out.dims();
    (
        out.clone().slice([0..r, 0..n, 0..1]),
        out.slice([0..r, 0..n, 1..2]),
    )
}

/// The per-chunk trainer.
struct Trainer<'a> {
    job: &'a Job<'a>,
    settings: &'a TrainSettings,
    device: Device,
    net: Net,
}

/// A chunk's result: predictions `[R, T, M, d_out]`, mean predictions at the training inputs
/// `[R, N]`, final objectives, learned rates.
struct ChunkOut {
    pred: Vec<f32>,
    train_pred: Vec<f32>,
    loss: Vec<f64>,
    rates: Vec<f64>,
}

impl Trainer<'_> {
    fn k(&self) -> usize {
        *self.job.shape.hidden.last().unwrap_or(&self.job.shape.d_in)
    }

    /// One pass's noise for the replicas' streams, or `None` without dropout.
    fn noise(&self, rngs: &mut [Rng], n: usize) -> Option<Tensor<3>> {
        self.settings
            .dropout
            .as_ref()
            .map(|d| d.draw(rngs, n, self.k(), self.job.shape.d_out, &self.device))
    }

    /// One optimiser step on a batch.
    fn step(&self, s: &mut State, x: Tensor<3>, y: &Tensor<3>, t: u64, rngs: &mut [Rng]) {
        let adversarial = self.settings.adversarial.as_ref();
        let n = x.dims()[1];
        let (out, cache) = self.net.forward(s, x.clone(), self.noise(rngs, n));
        let delta = self.net.output_delta(out, y);
        let (mut grads, input_grad) = self.net.backward(s, &cache, delta, adversarial.is_some());
        if let (Some(eps), Some(gx)) = (adversarial, input_grad) {
            // x' = x + ε·sign(∇ₓ loss), ε per input dimension; the loss on x' adds to the step.
            let d = eps.len();
            let eps_t = upload(
                eps.iter().map(|&e| e as f32).collect(),
                [1, 1, d],
                &self.device,
            );
            let x_adv = x + gx.sign() * eps_t;
            let (out2, cache2) = self.net.forward(s, x_adv, self.noise(rngs, n));
            let delta2 = self.net.output_delta(out2, y);
            let (g2, _) = self.net.backward(s, &cache2, delta2, false);
            for (a, b) in grads.w.iter_mut().zip(g2.w) {
                *a = a.clone() + b;
            }
            for (a, b) in grads.b.iter_mut().zip(g2.b) {
                *a = a.clone() + b;
            }
            if let (Some(a), Some(b)) = (grads.param.as_mut(), g2.param) {
                *a = a.clone() + b;
            }
        }
        let st = &self.settings;
        let wstep = AdamStep::new(st.lr, st.beta1, st.beta2, st.eps, t, st.weight_decay);
        let bstep = AdamStep {
            weight_decay: 0.0,
            ..wstep
        };
        for (l, g) in grads.w.into_iter().enumerate() {
            let (p, m, v) = kernels::adam(
                self.net.path,
                s.w[l].extract(),
                s.mw[l].extract(),
                s.vw[l].extract(),
                g,
                &wstep,
            );
            (s.w[l], s.mw[l], s.vw[l]) = (p, m, v);
        }
        for (l, g) in grads.b.into_iter().enumerate() {
            let (p, m, v) = kernels::adam(
                self.net.path,
                s.b[l].extract(),
                s.mb[l].extract(),
                s.vb[l].extract(),
                g,
                &bstep,
            );
            (s.b[l], s.mb[l], s.vb[l]) = (p, m, v);
        }
        if let (Some([p, m, v]), Some(g)) = (s.param.as_mut(), grads.param) {
            let (np, nm, nv) = kernels::adam(
                self.net.path,
                p.extract(),
                m.extract(),
                v.extract(),
                g,
                &bstep,
            );
            (*p, *m, *v) = (np, nm, nv);
        }
    }

    /// Trains replicas `range` of the job, then predicts the test inputs.
    fn run_chunk(&self, range: std::ops::Range<usize>) -> ChunkOut {
        let job = self.job;
        let shape = job.shape;
        let rc = range.len();
        let (d, n, m) = (shape.d_in, job.n_train(), job.n_test());
        let host = xavier_init(shape, &job.init_seeds[range.clone()]);
        let layers = shape.layers();
        let dev = &self.device;
        let zeros = |i: usize, o: usize| Tensor::<3>::zeros([rc, i, o], dev);
        let mut s = State {
            w: host
                .layers
                .iter()
                .zip(&layers)
                .map(|((w, _), &(i, o))| upload(w.clone(), [rc, i, o], dev))
                .collect(),
            b: host
                .layers
                .iter()
                .zip(&layers)
                .map(|((_, b), &(_, o))| upload(b.clone(), [rc, 1, o], dev))
                .collect(),
            mw: layers.iter().map(|&(i, o)| zeros(i, o)).collect(),
            vw: layers.iter().map(|&(i, o)| zeros(i, o)).collect(),
            mb: layers.iter().map(|&(_, o)| zeros(1, o)).collect(),
            vb: layers.iter().map(|&(_, o)| zeros(1, o)).collect(),
            param: self
                .settings
                .dropout
                .as_ref()
                .and_then(Dropout::initial_param)
                .map(|v| {
                    [
                        Tensor::<3>::full([rc, 1, 1], v, dev),
                        zeros(1, 1),
                        zeros(1, 1),
                    ]
                }),
        };

        // Per-replica targets [rc, N, 1] and the shared inputs [1, N, d].
        let mut y_host = Vec::with_capacity(rc * n);
        for r in range.clone() {
            y_host.extend_from_slice(&job.targets[job.replica_targets[r]]);
        }
        let x_full = upload(job.x_train.to_vec(), [1, n, d], dev);
        let y_full = upload(y_host.clone(), [rc, n, 1], dev);
        let mut rngs: Vec<Rng> = job.stream_seeds[range.clone()]
            .iter()
            .map(|&s| Rng::new(s))
            .collect();

        // Builds per-replica batches from per-replica index lists.
        let gather = |idx: &[Vec<usize>]| -> (Tensor<3>, Tensor<3>) {
            let b = idx[0].len();
            let mut xb = Vec::with_capacity(rc * b * d);
            let mut yb = Vec::with_capacity(rc * b);
            for (k, rows) in idx.iter().enumerate() {
                for &i in rows {
                    xb.extend_from_slice(&job.x_train[i * d..(i + 1) * d]);
                    yb.push(y_host[k * n + i]);
                }
            }
            (upload(xb, [rc, b, d], dev), upload(yb, [rc, b, 1], dev))
        };

        let resampled = match self.settings.batching {
            Batching::Resample => {
                let idx: Vec<Vec<usize>> = rngs
                    .iter_mut()
                    .map(|g| (0..n).map(|_| g.below(n as u64) as usize).collect())
                    .collect();
                Some(gather(&idx))
            }
            _ => None,
        };

        let mut t = 0u64;
        for _ in 0..self.settings.epochs {
            match &self.settings.batching {
                Batching::Full => {
                    t += 1;
                    self.step(&mut s, x_full.clone(), &y_full, t, &mut rngs);
                }
                Batching::Resample => {
                    let (xb, yb) = resampled.as_ref().expect("drawn above");
                    t += 1;
                    self.step(&mut s, xb.clone(), yb, t, &mut rngs);
                }
                Batching::WithReplacement { size, per_epoch } => {
                    for _ in 0..*per_epoch {
                        let idx: Vec<Vec<usize>> = rngs
                            .iter_mut()
                            .map(|g| (0..*size).map(|_| g.below(n as u64) as usize).collect())
                            .collect();
                        let (xb, yb) = gather(&idx);
                        t += 1;
                        self.step(&mut s, xb, &yb, t, &mut rngs);
                    }
                }
                Batching::Shuffled { size } => {
                    let perms: Vec<Vec<usize>> = rngs
                        .iter_mut()
                        .map(|g| {
                            let mut p: Vec<usize> = (0..n).collect();
                            for i in (1..n).rev() {
                                p.swap(i, g.below(i as u64 + 1) as usize);
                            }
                            p
                        })
                        .collect();
                    for start in (0..n).step_by(*size) {
                        let end = (start + size).min(n);
                        let idx: Vec<Vec<usize>> =
                            perms.iter().map(|p| p[start..end].to_vec()).collect();
                        let (xb, yb) = gather(&idx);
                        t += 1;
                        self.step(&mut s, xb, &yb, t, &mut rngs);
                    }
                }
            }
        }

        // Final objective on all N points with the dropout layer at its expectation, on the
        // device in f32 like the training loss itself: an overflow or NaN there is what
        // divergence means.
        let (out, _) = self.net.forward(&s, x_full.clone(), None);
        let fitted = (self.settings.dropout.is_none()).then(|| out.clone());
        let mut objective = self.net.data_term(out, &y_full);
        for w in &s.w {
            objective = objective
                + w.clone()
                    .square()
                    .sum_dim(2)
                    .sum_dim(1)
                    .mul_scalar(0.5 * self.settings.weight_decay);
        }
        if let Some(dropout) = &self.settings.dropout {
            if let Some(reg) = dropout::regularizer_value(
                dropout,
                &s.w[s.w.len() - 1],
                s.param.as_ref().map(|p| &p[0]),
            ) {
                objective = objective + reg;
            }
        }
        let loss: Vec<f64> = download(objective).into_iter().map(f64::from).collect();
        let rates: Vec<f64> = match (&self.settings.dropout, &s.param) {
            (Some(dropout), Some([p, _, _])) => download(p.clone())
                .into_iter()
                .map(|v| dropout.rate_of(f64::from(v)))
                .collect(),
            (Some(dropout), None) => vec![dropout.rate_of(0.0); rc],
            _ => Vec::new(),
        };

        // Predictions: the hidden layers once, then T passes of the (stochastic) last layer.
        let x_test = upload(job.x_test.to_vec(), [1, m, d], dev);
        let passes = self.settings.mc_passes;
        let dout = shape.d_out;
        let mut pred = vec![0.0f32; rc * passes * m * dout];
        let (h, _) = self.net.hidden(&s, x_test);
        let mut predict_rngs: Vec<Rng> = job.stream_seeds[range.clone()]
            .iter()
            .map(|&s| Rng::new(uqbench_anchor::seed::splitmix64(s)))
            .collect();
        for pass in 0..passes {
            let noise = self.noise(&mut predict_rngs, m);
            let (out, _) = self.net.last(&s, h.clone(), noise);
            let values = download(out);
            for k in 0..rc {
                let dst = ((k * passes + pass) * m) * dout;
                pred[dst..dst + m * dout]
                    .copy_from_slice(&values[k * m * dout..(k + 1) * m * dout]);
            }
        }

        // The mean prediction at the training inputs (the training fit): without a stochastic
        // layer the deterministic forward pass above; with one, the mean of T passes drawn from
        // a stream of their own, so the test predictions above do not depend on it.
        let train_pred: Vec<f32> = match fitted {
            Some(out) => {
                let v = download(out);
                (0..rc * n).map(|i| v[i * dout]).collect()
            }
            None => {
                let (h, _) = self.net.hidden(&s, x_full);
                let mut fit_rngs: Vec<Rng> = job.stream_seeds[range.clone()]
                    .iter()
                    .map(|&s| {
                        Rng::new(uqbench_anchor::seed::splitmix64(
                            uqbench_anchor::seed::splitmix64(s),
                        ))
                    })
                    .collect();
                let mut sum = vec![0.0f64; rc * n];
                for _ in 0..passes {
                    let noise = self.noise(&mut fit_rngs, n);
                    let (out, _) = self.net.last(&s, h.clone(), noise);
                    for (acc, v) in sum.iter_mut().zip(download(out).iter().step_by(dout)) {
                        *acc += f64::from(*v);
                    }
                }
                sum.iter().map(|v| (v / passes as f64) as f32).collect()
            }
        };
        ChunkOut {
            pred,
            train_pred,
            loss,
            rates,
        }
    }
}

/// Trains every replica of `job` and predicts the test inputs. `progress` is called with
/// the number of replicas finished so far, after every chunk.
pub fn train(
    job: &Job<'_>,
    settings: &TrainSettings,
    res: &Resources,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<TrainOutput, ModelError> {
    job.validate()?;
    settings.validate(job.n_train(), job.shape)?;
    let r = job.replicas();
    let (n, m) = (job.n_train(), job.n_test());
    let per = bytes_per_replica(job.shape, settings, n, m);
    let chunk = chunk_size(r, per, res)?;
    let chunks: Vec<std::ops::Range<usize>> = (0..r)
        .step_by(chunk)
        .map(|s| s..(s + chunk).min(r))
        .collect();
    let dout = job.shape.d_out;
    let passes = settings.mc_passes;
    let per_replica_out = passes * m * dout;
    let out = Mutex::new((
        vec![0.0f32; r * per_replica_out],
        vec![0.0f64; r],
        vec![f64::NAN; r],
        vec![0.0f32; r * n],
    ));
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let threads = res.threads.clamp(1, chunks.len());
    let trainer = Trainer {
        job,
        settings,
        device: res.device.clone(),
        net: Net {
            path: res.kernel_path(),
            slope: job.shape.negative_slope,
            dropout: settings.dropout.clone(),
            heteroscedastic: settings.heteroscedastic,
        },
    };
    let work = || loop {
        let c = next.fetch_add(1, Ordering::SeqCst);
        let Some(range) = chunks.get(c).cloned() else {
            break;
        };
        let chunk_out = trainer.run_chunk(range.clone());
        {
            let mut guard = out.lock().expect("no panics while holding the lock");
            guard.0[range.start * per_replica_out..range.end * per_replica_out]
                .copy_from_slice(&chunk_out.pred);
            guard.1[range.clone()].copy_from_slice(&chunk_out.loss);
            guard.3[range.start * n..range.end * n].copy_from_slice(&chunk_out.train_pred);
            if !chunk_out.rates.is_empty() {
                guard.2[range.clone()].copy_from_slice(&chunk_out.rates);
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
    let (test_out, final_objective, rates, train_pred) =
        out.into_inner().expect("workers finished");
    let has_rates = settings.dropout.is_some();
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
    })
}

/// What [`objective_and_gradient`] evaluates: the training objective of a step with fixed
/// noise.
#[derive(Debug, Clone, Default)]
pub struct Probe<'a> {
    /// The dropout layer, if any.
    pub dropout: Option<&'a Dropout>,
    /// Mean-and-log-variance head with the Gaussian NLL.
    pub heteroscedastic: bool,
    /// λ.
    pub weight_decay: f64,
    /// The dropout layer's learnable scalar per replica (θ or log α).
    pub param: Option<&'a [f32]>,
    /// The noise of the pass, as [`Dropout::draw`] lays it out.
    pub noise: Option<&'a [f32]>,
}

/// The training objective of every replica and its gradients with respect to the weights,
/// biases and the dropout layer's scalar, for host weights, inputs `x` (`[N, d]`),
/// per-replica targets `y` (`[R, N]`) and fixed noise. This is exactly what a training step
/// differentiates; it exists so that tests can check the hand-written backward passes
/// against finite differences.
pub fn objective_and_gradient(
    res: &Resources,
    shape: &MlpShape,
    weights: &crate::mlp::HostWeights,
    x: &[f32],
    y: &[f32],
    probe: &Probe<'_>,
) -> (Vec<f64>, crate::mlp::HostWeights, Option<Vec<f32>>) {
    let r = weights.replicas;
    let d = shape.d_in;
    let n = x.len() / d;
    let layers = shape.layers();
    let dev = &res.device;
    let k = *shape.hidden.last().unwrap_or(&d);
    let s = State {
        w: weights
            .layers
            .iter()
            .zip(&layers)
            .map(|((w, _), &(i, o))| upload(w.clone(), [r, i, o], dev))
            .collect(),
        b: weights
            .layers
            .iter()
            .zip(&layers)
            .map(|((_, b), &(_, o))| upload(b.clone(), [r, 1, o], dev))
            .collect(),
        mw: vec![],
        vw: vec![],
        mb: vec![],
        vb: vec![],
        param: probe.param.map(|p| {
            let t = upload(p.to_vec(), [r, 1, 1], dev);
            [t.clone(), t.clone(), t]
        }),
    };
    let net = Net {
        path: res.kernel_path(),
        slope: shape.negative_slope,
        dropout: probe.dropout.cloned(),
        heteroscedastic: probe.heteroscedastic,
    };
    let noise = probe.noise.map(|v| {
        let width = if matches!(probe.dropout, Some(Dropout::Variational { .. })) {
            shape.d_out
        } else {
            k
        };
        upload(v.to_vec(), [r, n, width], dev)
    });
    let yt = upload(y.to_vec(), [r, n, 1], dev);
    let (out, cache) = net.forward(&s, upload(x.to_vec(), [1, n, d], dev), noise);
    let delta = net.output_delta(out.clone(), &yt);
    let mut objective = net.data_term(out, &yt);
    for w in &s.w {
        objective = objective
            + w.clone()
                .square()
                .sum_dim(2)
                .sum_dim(1)
                .mul_scalar(0.5 * probe.weight_decay);
    }
    if let Some(dropout) = probe.dropout {
        if let Some(reg) = dropout::regularizer_value(
            dropout,
            &s.w[s.w.len() - 1],
            s.param.as_ref().map(|p| &p[0]),
        ) {
            objective = objective + reg;
        }
    }
    let (g, _) = net.backward(&s, &cache, delta, false);
    let grads =
        g.w.into_iter()
            .zip(g.b)
            .zip(&s.w)
            .map(|((gw, gb), w)| {
                (
                    download(gw + w.clone().mul_scalar(probe.weight_decay)),
                    download(gb),
                )
            })
            .collect();
    (
        download(objective).into_iter().map(f64::from).collect(),
        crate::mlp::HostWeights {
            replicas: r,
            layers: grads,
        },
        g.param.map(download),
    )
}
