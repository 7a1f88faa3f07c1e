//! The engine's host execution: every job the tensor execution (`engine/chunk.rs`) takes, with
//! the same objective, initial weights, batches, noise, Adam and collectors, as loops over one
//! replica's points instead of batched tensor operations over a chunk. One replica's
//! parameters, Adam state and activations stay in cache through all its epochs, nothing is
//! allocated per step, and the network's passes and Adam run through [`simd::dispatch_at`] at
//! the run's level (one dispatch per pass: each is a copy of the network's loops per
//! instruction set, so the training loop around them stays out of the copies).
//!
//! The network runs on a [`ReplicaNet`]: [`FeatureMajorNet`] for layers of in·out ≤ 800
//! ([`crate::mlp::MlpShape::host_sized`]: for [002]'s 1-W-1 networks a matrix product is
//! in·out = W multiply-adds per point, too small for a gemm to pay for its packing), and
//! [`PointMajorNet`]'s register tiles above (E1–E3's 1-128-64-32-1, `tcc`'s width 40). With a
//! stochastic layer the net runs its body ([`Part::Body`]: every layer but the last) and the
//! layer its host twin on the last one (`crate::stochastic`), its noise from the replica's own
//! stream exactly as the device draws it ([`HostStream`]).
//!
//! Batches, resamples and noise are the device's numbers; the floating-point order of the
//! sums differs from the tensors', so from the same seeds the replicas end at nearby, not
//! identical, weights: equal in distribution (the tests below compare the two executions
//! step for step; docs/performance.md compares whole runs). A replica's numbers depend on
//! nothing but its own seeds.

use std::ops::Range;
use std::sync::Arc;

use super::chunk::{
    s_slots, PURPOSE_BATCH, PURPOSE_FIT, PURPOSE_NOISE, PURPOSE_PREDICT, PURPOSE_UPDATE,
};
use super::collect::{self, Collected, Event, Want};
use super::memory::{bytes_per_replica, largest_tensor_per_replica, Resources};
use super::update::{HostSlots, HostUpdate};
use super::{host_chunk, Batching, ChunkOut, ChunkTrainer, HostChunk, Job, Layout, TrainSettings};
use crate::cpu::feature_major::feature_major;
use crate::cpu::kernels::AdamStep;
use crate::cpu::simd::{self, Lanes, Level};
use crate::cpu::{adam_at, backward_at, forward_at, offsets, Part, ReplicaNet};
use crate::device_rng::HostStream;
use crate::mlp::MlpShape;
use crate::stochastic::{HostCache, HostGrads, HostLast, StochasticLayer};

/// Whether the host execution takes the engine's jobs: on every CPU backend with the run's
/// host loops on.
pub(crate) fn applies(res: &Resources) -> bool {
    !res.backend.is_gpu() && res.host_loops
}

/// The host execution of one job.
pub(crate) struct HostTrainer<'a> {
    pub job: &'a Job<'a>,
    pub settings: &'a TrainSettings,
    /// The instruction set the loops run at.
    pub level: Level,
}

impl ChunkTrainer for HostTrainer<'_> {
    fn layout(&self) -> Layout {
        self.settings.layout(self.job)
    }

    fn bytes_per_replica(&self) -> usize {
        let (n, m) = self.points();
        bytes_per_replica(self.job.shape, self.settings, n, m)
    }

    fn largest_tensor_per_replica(&self) -> usize {
        let (n, m) = self.points();
        largest_tensor_per_replica(self.job.shape, self.settings, n, m)
    }

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, uqbench_core::MethodError> {
        Ok(host_chunk(self, range))
    }
}

impl HostChunk for HostTrainer<'_> {
    fn replica_net(&self) -> (&MlpShape, usize, Part) {
        let part = match self.settings.dropout {
            Some(_) => Part::Body,
            None => Part::Whole,
        };
        (self.job.shape, self.job.most_points(), part)
    }

    fn train_on<N: ReplicaNet>(&self, net: N, range: Range<usize>) -> ChunkOut {
        self.train_with(net, range)
    }
}

impl HostTrainer<'_> {
    /// [`ChunkTrainer::train_chunk`] on the network `net` (one per chunk).
    fn train_with<N: ReplicaNet>(&self, mut net: N, range: Range<usize>) -> ChunkOut {
        let job = self.job;
        let (d, n, m) = (job.shape.d_in, job.n_train(), job.n_test());
        let (passes, o) = (self.settings.mc_passes, job.shape.d_out);
        let rc = range.len();
        // The inputs feature-major: once, or once per target whose replicas are in the chunk
        // when the targets have inputs of their own (`Job::inputs`).
        let group = |at: usize| job.inputs.map_or(0, |_| job.replica_targets[at]);
        let mut inputs: Vec<Option<(Vec<f32>, Vec<f32>)>> =
            vec![None; job.inputs.map_or(1, |i| i.len())];
        let init = job.initial_weights(range.clone());
        let collectors = &self.settings.collectors;
        let mut out = ChunkOut {
            pred: vec![0.0; rc * passes * m * o],
            train_pred: vec![0.0; rc * n],
            objective: vec![0.0; rc],
            rates: if self.layout().rates {
                vec![0.0; rc]
            } else {
                Vec::new()
            },
            steps: (self.settings.epochs * self.settings.steps_per_epoch(n)) as u64,
            collected: collect::start_all(collectors, range.clone()),
            ..ChunkOut::default()
        };
        for r in 0..rc {
            let at = range.start + r;
            let (seed, id) = (job.stream_seeds[at], job.replica_ids[at]);
            let mut replica = Replica::new(self, &mut net, &init, r, (seed, id));
            replica.level = self.level;
            let y = &job.targets[job.replica_targets[at]];
            let (xt, xt_test) = &*inputs[group(at)].get_or_insert_with(|| {
                let t = job.replica_targets[at];
                (
                    feature_major(job.x_train_of(t), d),
                    feature_major(job.x_test_of(t), d),
                )
            });
            let states: Vec<&mut Box<dyn Collected>> =
                out.collected.iter_mut().map(|c| &mut c[r]).collect();
            let result = RunReplica {
                replica: &mut replica,
                data: (xt, y),
                x_test: xt_test,
                pred: &mut out.pred[r * passes * m * o..(r + 1) * passes * m * o],
                train: &mut out.train_pred[r * n..(r + 1) * n],
                states,
            }
            .run();
            out.objective[r] = f64::from(result);
            if let Some(rate) = out.rates.get_mut(r) {
                let layer = self.settings.dropout.as_ref().expect("a layer with a rate");
                *rate = layer.rate(f64::from(replica.phi[0]));
            }
        }
        out
    }
}

/// One replica's training state on the host: its parameters θ (the whole network's flat
/// layout) and φ (the stochastic layer's), their Adam moments, and scratch.
struct Replica<'t, 'n, N> {
    trainer: &'t HostTrainer<'t>,
    net: &'n mut N,
    theta: Vec<f32>,
    phi: Vec<f32>,
    /// Adam moments of θ and φ.
    m: (Vec<f32>, Vec<f32>),
    v: (Vec<f32>, Vec<f32>),
    /// Gradients of θ and φ, and the adversarial pass's.
    grad: (Vec<f32>, Vec<f32>),
    grad2: (Vec<f32>, Vec<f32>),
    /// (seed, identifier): the replica's streams.
    keys: (u64, u64),
    /// The stochastic layer, with its shape (k units in, o outputs).
    layer: Option<(Arc<dyn StochasticLayer>, usize, usize)>,
    /// Offsets of the last layer's W and b in θ, and of the weights' end (the biases follow).
    last: (usize, usize),
    n_weights: usize,
    /// Scratch: the net's outputs (the units, with a layer), the head's outputs, δ at them,
    /// δ at the units, noise, the layer's cache.
    h: Vec<f32>,
    out: Vec<f32>,
    delta: Vec<f32>,
    dh: Vec<f32>,
    noise: Vec<f32>,
    cache: HostCache,
    /// The instruction set of the network's passes and Adam.
    level: Level,
    /// The state of an update of the method's own ([`super::update`]).
    update: Option<Box<dyn HostUpdate>>,
    /// (in, out) per layer.
    layers: Vec<(usize, usize)>,
}

impl<'t, 'n, N: ReplicaNet> Replica<'t, 'n, N> {
    /// Replica `r` of `init` (a chunk's initial weights), with its stream keys.
    fn new(
        trainer: &'t HostTrainer<'t>,
        net: &'n mut N,
        init: &crate::mlp::HostWeights,
        r: usize,
        keys: (u64, u64),
    ) -> Self {
        let shape = trainer.job.shape;
        let layers = shape.layers();
        let (w_at, b_at, dim) = offsets(&layers);
        // θ: the replica's Xavier weights, layer by layer, then its biases (zero).
        let mut theta: Vec<f32> = Vec::with_capacity(dim);
        for (l, &(i, o)) in layers.iter().enumerate() {
            theta.extend_from_slice(&init.layers[l].0[r * i * o..(r + 1) * i * o]);
        }
        for (l, &(_, o)) in layers.iter().enumerate() {
            theta.extend_from_slice(&init.layers[l].1[r * o..(r + 1) * o]);
        }
        let (k, o) = *layers.last().expect("a layer");
        let layer = trainer.settings.dropout.clone().map(|l| (l, k, o));
        let phi: Vec<f32> = match &layer {
            Some((l, ..)) => (l.params(k, o).iter())
                .flat_map(|s| std::iter::repeat_n(s.init as f32, s.dims[0] * s.dims[1]))
                .collect(),
            None => Vec::new(),
        };
        let points = trainer.job.n_train().max(trainer.job.n_test());
        let width = layer.as_ref().map_or(0, |(l, k, o)| l.noise_width(*k, *o));
        let zeros = |len: usize| (vec![0.0f32; dim], vec![0.0f32; len]);
        Replica {
            trainer,
            net,
            m: zeros(phi.len()),
            v: zeros(phi.len()),
            grad: zeros(phi.len()),
            grad2: zeros(phi.len()),
            theta,
            phi,
            keys,
            layer,
            last: (w_at[layers.len() - 1], b_at[layers.len() - 1]),
            n_weights: b_at[0],
            h: vec![0.0; points * k],
            out: vec![0.0; points * o],
            delta: vec![0.0; points * o],
            dh: vec![0.0; points * k],
            noise: vec![0.0; points * width],
            cache: HostCache::default(),
            level: Level::Baseline,
            update: None,
            layers,
        }
    }

    /// The replica's stream of `purpose`, at the run's instruction set.
    fn stream(&self, purpose: u64) -> HostStream {
        HostStream::new(self.keys.0, self.keys.1, purpose).at(self.level)
    }

    /// The outputs at the `n` points of `x` (feature-major) into `self.out[..n·o]`: the whole
    /// net, or its body and the last layer, with the noise of draw `noise` of stream `purpose`
    /// (the layer's expectation, the plain linear layer, when `None`).
    fn forward(&mut self, x: &[f32], n: usize, noise: Option<(u64, u64)>) {
        self.body(x, n);
        self.last_layer(n, noise);
    }

    /// The whole net's outputs into `self.out`, or with a stochastic layer the body's units
    /// into `self.h`, at the `n` points of `x`.
    fn body(&mut self, x: &[f32], n: usize) {
        match &self.layer {
            None => {
                let o = self.trainer.job.shape.d_out;
                forward_at(self.level, self.net, &self.theta, x, &mut self.out[..n * o]);
            }
            Some((_, k, _)) => {
                let k = *k;
                forward_at(self.level, self.net, &self.theta, x, &mut self.h[..n * k]);
            }
        }
    }

    /// With a stochastic layer, the last layer on the units of the last [`Replica::body`]
    /// into `self.out`: with the noise of draw `noise` = (purpose, counter) of the replica's
    /// streams, or at the layer's expectation (the plain linear layer) without. Nothing
    /// without a stochastic layer (the body gave the outputs).
    fn last_layer(&mut self, n: usize, noise: Option<(u64, u64)>) {
        let Some((layer, k, o)) = self.layer.clone() else {
            return;
        };
        let (wl, bl) = self.last;
        let last = HostLast {
            h: &self.h[..n * k],
            w: &self.theta[wl..wl + k * o],
            b: &self.theta[bl..bl + o],
            params: &self.phi,
            k,
            o,
            level: self.level,
        };
        match noise {
            Some((purpose, counter)) => {
                let stream = HostStream::new(self.keys.0, self.keys.1, purpose).at(self.level);
                let width = layer.noise_width(k, o);
                let noise = &mut self.noise[..n * width];
                layer.draw_host(&stream, counter, noise);
                layer.forward_host(&last, noise, &mut self.out[..n * o], &mut self.cache);
            }
            None => {
                let out = &mut self.out[..n * o];
                crate::stochastic::linear_host(last.h, last.w, last.b, out)
            }
        }
    }

    /// One pass's gradients at the batch `x` (feature-major), `y`, with step noise draw
    /// `counter`, into `grad` (θ's, φ's; the second set for the adversarial pass), and with
    /// `gx` ∇ₓ of the loss.
    fn pass(&mut self, x: &[f32], y: &[f32], counter: u64, second: bool, gx: Option<&mut [f32]>) {
        let n = y.len();
        let head = self.trainer.settings.head();
        self.forward(x, n, Some((PURPOSE_NOISE, counter)));
        let o = self.trainer.job.shape.d_out;
        head.delta_host(&self.out[..n * o], y, &mut self.delta[..n * o]);
        let (grad, gphi) = if second {
            (&mut self.grad2.0, &mut self.grad2.1)
        } else {
            (&mut self.grad.0, &mut self.grad.1)
        };
        let Some((layer, k, o)) = self.layer.clone() else {
            let delta = &self.delta[..n * o];
            backward_at(self.level, self.net, &self.theta, x, delta, grad, gx);
            return;
        };
        let (wl, bl) = self.last;
        let last = HostLast {
            h: &self.h[..n * k],
            w: &self.theta[wl..wl + k * o],
            b: &self.theta[bl..bl + o],
            params: &self.phi,
            k,
            o,
            level: self.level,
        };
        let width = layer.noise_width(k, o);
        {
            let (before, biases) = grad.split_at_mut(bl);
            let mut g = HostGrads {
                gw: &mut before[wl..wl + k * o],
                gb: &mut biases[..o],
                dh: &mut self.dh[..n * k],
                gparams: gphi,
            };
            let noise = &self.noise[..n * width];
            layer.backward_host(&last, noise, &self.cache, &self.delta[..n * o], &mut g);
            layer.regularize_host(last.w, k, &self.phi, g.gw, g.gparams);
        }
        backward_at(
            self.level,
            self.net,
            &self.theta,
            x,
            &self.dh[..n * k],
            grad,
            gx,
        );
    }

    /// One optimiser step on the batch `x` (feature-major), `y`: the pass, plus EnsAdvA's
    /// pass at x' = x + ε·sign(∇ₓ loss) (its loss adds to the step's), then Adam at `lr` with λ
    /// on the weights. Step t's noise is draw 2t of the noise stream, 2t + 1 for the
    /// adversarial pass (as `chunk.rs`). One call site of [`Replica::pass`] (each is a copy
    /// of the whole network per instruction set).
    fn step(&mut self, x: &[f32], y: &[f32], t: u64, lr: f64, adv: &mut Option<Adversarial>) {
        let n = y.len();
        let d = x.len() / n;
        let passes = if adv.is_some() { 2 } else { 1 };
        for second in 0..passes {
            // The second pass at x', the first with ∇ₓ when there is a second.
            let (input, gx): (&[f32], Option<&mut [f32]>) = match (second, adv.as_mut()) {
                (1, Some(a)) => (&a.x_adv[..d * n], None),
                (_, Some(a)) => (x, Some(&mut a.gx[..d * n])),
                _ => (x, None),
            };
            self.pass(input, y, 2 * t + second as u64, second == 1, gx);
            if let (0, Some(a)) = (second, adv.as_mut()) {
                let (gx, x_adv) = (&a.gx[..d * n], &mut a.x_adv[..d * n]);
                // x' = x + sign(∇ₓ)·ε_k (burn's sign: 0 at 0), per input dimension k.
                for (k, ((xa, g), xk)) in (x_adv.chunks_exact_mut(n))
                    .zip(gx.chunks_exact(n))
                    .zip(x.chunks_exact(n))
                    .enumerate()
                {
                    for ((xa, &g), &xv) in xa.iter_mut().zip(g).zip(xk) {
                        let sign = f32::from(u8::from(g > 0.0)) - f32::from(u8::from(g < 0.0));
                        *xa = xv + sign * a.eps[k];
                    }
                }
            }
        }
        if passes == 2 {
            for (g, &g2) in self.grad.0.iter_mut().zip(&self.grad2.0) {
                *g += g2;
            }
            for (g, &g2) in self.grad.1.iter_mut().zip(&self.grad2.1) {
                *g += g2;
            }
        }
        let st = self.trainer.settings;
        if let Some(update) = self.update.as_mut() {
            let o = self.trainer.job.shape.d_out;
            update.batch(&self.out[..n * o], y);
            self.update_step(t);
            return;
        }
        let weights = AdamStep::new(lr, st.beta1, st.beta2, st.eps, t, st.weight_decay);
        let plain = AdamStep {
            weight_decay: 0.0,
            ..weights
        };
        let nw = self.n_weights;
        let (pw, pb) = self.theta.split_at_mut(nw);
        let (mw, mb) = self.m.0.split_at_mut(nw);
        let (vw, vb) = self.v.0.split_at_mut(nw);
        let (gw, gb) = self.grad.0.split_at(nw);
        adam_at(self.level, pw, mw, vw, gw, &weights);
        adam_at(self.level, pb, mb, vb, gb, &plain);
        let (phi, gphi) = (&mut self.phi, &self.grad.1);
        adam_at(self.level, phi, &mut self.m.1, &mut self.v.1, gphi, &plain);
    }

    /// The update's step t in place of Adam ([`super::update`]): every layer's weights, then
    /// its biases (consecutive in θ), each with its gradient and Adam's first moments as its
    /// second buffer; slot j's normals are draw t·S + j of the update's stream.
    fn update_step(&mut self, t: u64) {
        let st = self.trainer.settings;
        let job = self.trainer.job;
        let total = (st.epochs * st.steps_per_epoch(job.n_train())) as u64;
        let stream = self.stream(PURPOSE_UPDATE);
        let per_step = s_slots(job);
        let slots = HostSlots::new(
            &mut self.theta,
            &mut self.m.0,
            &self.grad.0,
            &self.layers,
            st.weight_decay,
        );
        let update = self.update.as_mut().expect("an update's step");
        update.step(t, total, slots, &mut |j, z| {
            stream.normal(t * per_step + j, z)
        });
    }

    /// The parameters layer by layer, W then b ([`Event`]'s layout).
    fn params_by_layer(&self) -> Vec<f32> {
        let layers = self.trainer.job.shape.layers();
        let (w_at, b_at, dim) = offsets(&layers);
        let mut flat = Vec::with_capacity(dim);
        for (l, &(i, o)) in layers.iter().enumerate() {
            flat.extend_from_slice(&self.theta[w_at[l]..w_at[l] + i * o]);
            flat.extend_from_slice(&self.theta[b_at[l]..b_at[l] + o]);
        }
        flat
    }
}

/// EnsAdvA's scratch: ε per input dimension, ∇ₓ and x' (feature-major).
struct Adversarial {
    eps: Vec<f32>,
    gx: Vec<f32>,
    x_adv: Vec<f32>,
}

/// One replica's training, fit and predictions. [`RunReplica::run`] returns the final
/// objective, in f32 like the device's.
struct RunReplica<'a, 'r, 't, 'n, N> {
    replica: &'a mut Replica<'t, 'n, N>,
    /// All training inputs (feature-major) and the replica's targets.
    data: (&'a [f32], &'a [f32]),
    /// The test inputs, feature-major.
    x_test: &'a [f32],
    /// `[T, M, o]`.
    pred: &'a mut [f32],
    /// `[N]`.
    train: &'a mut [f32],
    /// The replica's state per collector.
    states: Vec<&'r mut Box<dyn Collected>>,
}

impl<N: ReplicaNet> RunReplica<'_, '_, '_, '_, N> {
    /// Trains, fits and predicts; returns the final objective.
    fn run(mut self) -> f32 {
        self.train_epochs();
        self.finish()
    }

    /// Shows `event` to the collectors that want `want`.
    fn observe(&mut self, want: Want, event: &Event<'_>) {
        let collectors = &self.replica.trainer.settings.collectors;
        for (c, s) in collectors.iter().zip(self.states.iter_mut()) {
            if c.wants(want) {
                s.observe(event);
            }
        }
    }

    /// Every epoch's steps, in every batching scheme, with the device's batches and resample.
    fn train_epochs(&mut self) {
        let st = self.replica.trainer.settings;
        let (xt, y) = self.data;
        let n = y.len();
        let d = xt.len() / n;
        let batch_stream = self.replica.stream(PURPOSE_BATCH);
        // The classic bootstrap's resample: draw 0 of the batch stream (later draws are the
        // epochs' orders).
        let resample: Option<Vec<usize>> =
            matches!(st.batching, Batching::Resample { .. }).then(|| {
                let mut idx = vec![0usize; n];
                batch_stream.below(0, n, &mut idx);
                idx
            });
        if let Some(idx) = &resample {
            if collect::any_wants(&st.collectors, Want::Resample) {
                let idx: Vec<u32> = idx.iter().map(|&p| p as u32).collect();
                self.observe(Want::Resample, &Event::Resample(&idx));
            }
        }
        // A batch gathered from the data by indices (inputs feature-major).
        let largest = match st.batching {
            Batching::WithReplacement { size, .. } => size.max(n),
            _ => n,
        };
        let (mut xb, mut yb) = (vec![0.0f32; d * largest], vec![0.0f32; largest]);
        let gather = |idx: &[usize], xb: &mut [f32], yb: &mut [f32]| {
            let b = idx.len();
            for (xk, xbk) in xt.chunks_exact(n).zip(xb.chunks_exact_mut(b)) {
                for (o, &p) in xbk.iter_mut().zip(idx) {
                    *o = xk[p];
                }
            }
            for (o, &p) in yb.iter_mut().zip(idx) {
                *o = y[p];
            }
        };
        if let (Some(idx), Batching::Resample { size: None }) = (&resample, &st.batching) {
            gather(idx, &mut xb[..d * n], &mut yb[..n]);
        }
        let mut adv = st.adversarial.as_ref().map(|eps| Adversarial {
            eps: eps.iter().map(|&e| e as f32).collect(),
            gx: vec![0.0; d * largest],
            x_adv: vec![0.0; d * largest],
        });
        let mut idx = vec![0usize; largest];
        let (seed, id) = self.replica.keys;
        self.replica.update = st.update.as_ref().map(|u| u.host((seed, id), y));
        let mut t = 0u64;
        for epoch in 0..st.epochs {
            let lr = st.lr_at(epoch);
            // The epoch's batches: index lists into the data, or `None` for the full data
            // (or the whole resample, gathered above).
            let order: Vec<usize> = match (&st.batching, &resample) {
                // The resample's mini-batches: a fresh order of the resample (draw epoch + 1).
                (Batching::Resample { size: Some(_) }, Some(res)) => {
                    (batch_stream.permutation(epoch as u64 + 1, n).iter())
                        .map(|&i| res[i])
                        .collect()
                }
                // Shuffled: a fresh order of the data every epoch (draw `epoch`).
                (Batching::Shuffled { .. }, _) => batch_stream.permutation(epoch as u64, n),
                _ => Vec::new(),
            };
            let (steps, size) = match st.batching {
                Batching::Full | Batching::Resample { size: None } => (1, n),
                Batching::WithReplacement { size, per_epoch } => (per_epoch, size),
                Batching::Shuffled { size } | Batching::Resample { size: Some(size) } => {
                    (n.div_ceil(size), size)
                }
            };
            for s in 0..steps {
                t += 1;
                let (x, yv): (&[f32], &[f32]) = match &st.batching {
                    Batching::Full => (xt, y),
                    Batching::Resample { size: None } => (&xb[..d * n], &yb[..n]),
                    Batching::WithReplacement { .. } => {
                        batch_stream.below(t, n, &mut idx[..size]);
                        gather(&idx[..size], &mut xb[..d * size], &mut yb[..size]);
                        (&xb[..d * size], &yb[..size])
                    }
                    _ => {
                        let batch = &order[s * size..((s + 1) * size).min(n)];
                        let b = batch.len();
                        gather(batch, &mut xb[..d * b], &mut yb[..b]);
                        (&xb[..d * b], &yb[..b])
                    }
                };
                self.replica.step(x, yv, t, lr, &mut adv);
            }
            if let Some(update) = self.replica.update.as_mut() {
                update.epoch_end(n);
            }
            if collect::any_wants(&st.collectors, Want::Epoch(epoch)) {
                let params = &self.replica.params_by_layer();
                let noise_sd = self.replica.update.as_ref().and_then(|u| u.noise_sd());
                let event = Event::Epoch {
                    epoch,
                    params,
                    noise_sd,
                };
                self.observe(Want::Epoch(epoch), &event);
            }
        }
    }

    /// The final objective at all N points (the layer at its expectation), the training fit
    /// and the test predictions (T passes); the final parameters to the collectors. Every
    /// forward pass from one call site, in that order.
    fn finish(&mut self) -> f32 {
        let (xt, y) = self.data;
        let n = y.len();
        let r = &mut *self.replica;
        let st = r.trainer.settings;
        let o = r.trainer.job.shape.d_out;
        let m = self.x_test.len() / (xt.len() / n);
        let (passes, stochastic) = (st.mc_passes, r.layer.is_some());
        // The passes: the objective's, then with a stochastic layer T at the training inputs
        // from a stream of their own (the fit: their mean), then T at the test inputs (one
        // without: every pass is the same).
        let fit_passes = if stochastic { passes } else { 0 };
        let test_passes = if stochastic { passes } else { 1 };
        let mut objective = 0.0f32;
        let mut fit = vec![0.0f64; if stochastic { n } else { 0 }];
        for e in 0..1 + fit_passes + test_passes {
            let (x, points, noise) = match e {
                0 => (xt, n, None),
                e if e <= fit_passes => (xt, n, Some((PURPOSE_FIT, (e - 1) as u64))),
                e => {
                    let pass = (e - 1 - fit_passes) as u64;
                    (
                        self.x_test,
                        m,
                        stochastic.then_some((PURPOSE_PREDICT, pass)),
                    )
                }
            };
            // The body once per set of inputs (the objective's pass leaves the training
            // inputs' units for the fit's passes), then the last layer per pass.
            if e == 0 || e == 1 + fit_passes {
                r.body(x, points);
            }
            r.last_layer(points, noise);
            let out = &r.out[..points * o];
            if e == 0 {
                // The data term and λ/2·‖W‖², their sums in the fixed order of [`Lanes`] (the
                // same bits at every level).
                objective = st.head().value_host(Lanes::BASELINE, out, y);
                let l2 = simd::dot(&r.theta[..r.n_weights], &r.theta[..r.n_weights]);
                objective += (0.5 * st.weight_decay) as f32 * l2;
                if let Some((layer, k, o)) = &r.layer {
                    let w = &r.theta[r.last.0..r.last.0 + k * o];
                    objective += layer.regularizer_host(w, *k, &r.phi).unwrap_or(0.0);
                } else {
                    // The fit: the deterministic outputs' first column.
                    for (f, row) in self.train.iter_mut().zip(out.chunks_exact(o)) {
                        *f = row[0];
                    }
                }
            } else if e <= fit_passes {
                for (acc, row) in fit.iter_mut().zip(out.chunks_exact(o)) {
                    *acc += f64::from(row[0]);
                }
            } else {
                let pass = e - 1 - fit_passes;
                let count = if stochastic { 1 } else { passes };
                for p in pass..pass + count {
                    self.pred[p * m * o..(p + 1) * m * o].copy_from_slice(out);
                }
            }
        }
        if stochastic {
            for (f, s) in self.train.iter_mut().zip(&fit) {
                *f = (s / passes as f64) as f32;
            }
        }
        if collect::any_wants(&st.collectors, Want::Final) {
            let params = self.replica.params_by_layer();
            self.observe(Want::Final, &Event::Final { params: &params });
        }
        objective
    }
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
