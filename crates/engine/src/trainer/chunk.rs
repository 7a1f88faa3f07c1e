//! The built-in network on the trainer: one chunk of replicas trained step by step (batches,
//! dropout noise, the adversarial pass, Adam), then its final objective, predictions and
//! training fit. Nothing inside the epoch loop runs on the host: noise and mini-batch indices
//! come from [`DeviceRng`] and batches are gathered on the device; the data, the keys and ε
//! are uploaded once per chunk.

use std::cell::Cell;
use std::ops::Range;

use burn::tensor::{Device, Int, Tensor};

use super::collect::{self, Collected, Event, Want};
use super::job::Job;
use super::memory::{bytes_per_replica, largest_tensor_per_replica};
use super::network::{download, upload, Network, State};
use super::pool::{ChunkOut, ChunkTrainer, Layout};
use super::settings::{Batching, TrainSettings};
use crate::cpu::kernels::AdamStep;
use crate::device_rng::DeviceRng;
use uqbench_core::MethodError;

/// The purposes of a replica's device streams (see [`DeviceRng::new`]).
/// The training noise (dropout masks; an epinet's training indices).
pub const PURPOSE_NOISE: u64 = 1;
pub(crate) const PURPOSE_BATCH: u64 = 2;
/// The prediction passes at the test inputs.
pub const PURPOSE_PREDICT: u64 = 3;
/// The passes at the training inputs (the training fit).
pub const PURPOSE_FIT: u64 = 4;
/// The normals of an update of the method's own ([`super::update`]).
pub(crate) const PURPOSE_UPDATE: u64 = 5;

/// The parameter slots an update draws normals for per step: every layer's weights and biases.
pub(crate) fn s_slots(job: &Job<'_>) -> u64 {
    2 * job.shape.layers().len() as u64
}

/// The built-in network's tensor execution for one job.
pub(crate) struct TensorTrainer<'a> {
    pub job: &'a Job<'a>,
    pub settings: &'a TrainSettings,
    pub device: Device,
    pub net: Network<'a>,
}

/// Host↔device transfers of one chunk, counted where they happen (summed into
/// [`super::pool::Transfers`]).
#[derive(Default)]
struct ChunkIo {
    uploads: Cell<u64>,
    reads: Cell<u64>,
}

impl ChunkIo {
    /// Replicas `range`'s training (or `test`) inputs on the device ([`Job::chunk_inputs`]).
    fn up_inputs(
        &self,
        job: &Job<'_>,
        range: &Range<usize>,
        test: bool,
        device: &Device,
    ) -> Tensor<3> {
        let (values, shape) = job.chunk_inputs(range, test);
        self.up(values, shape, device)
    }

    fn up(&self, values: Vec<f32>, shape: [usize; 3], device: &Device) -> Tensor<3> {
        self.uploads.set(self.uploads.get() + 1);
        upload(values, shape, device)
    }

    fn down(&self, t: Tensor<3>) -> Vec<f32> {
        self.reads.set(self.reads.get() + 1);
        download(t)
    }
}

impl<'a> TensorTrainer<'a> {
    /// The stochastic layer's input width K (the last hidden width).
    fn k(&self) -> usize {
        *self.job.shape.hidden.last().unwrap_or(&self.job.shape.d_in)
    }

    /// Draw `counter` of the replicas' noise, computed on the device, or `None` without
    /// dropout.
    fn noise(&self, rng: Option<&DeviceRng>, counter: u64, n: usize) -> Option<Tensor<3>> {
        let (d, rng) = (self.settings.dropout.as_ref()?, rng?);
        Some(d.draw(
            rng,
            counter,
            n,
            d.noise_width(self.k(), self.job.shape.d_out),
        ))
    }

    /// One optimiser step on a batch: forward, head, backward (plus the adversarial pass on
    /// x' = x + ε·sign(∇ₓ loss) for EnsAdvA, whose loss adds to the step's), then Adam.
    /// Step t's noise is draw 2t of the noise stream (2t + 1 for the adversarial pass); `lr` is
    /// the epoch's learning rate.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        s: &mut State,
        x: Tensor<3>,
        y: &Tensor<3>,
        eps: Option<&Tensor<3>>,
        t: u64,
        lr: f64,
        data: &ChunkData<'_>,
    ) {
        let rng = data.noise_rng.as_ref();
        let n = x.dims()[1];
        let (out, cache) = self.net.forward(s, x.clone(), self.noise(rng, 2 * t, n));
        if let Some(update) = s.update.as_mut() {
            // The batch at the step's θ (SG-MCMC's residuals, for the epoch's Gibbs step).
            update.batch(&out, y);
        }
        let delta = self.net.head.delta(out, y);
        let (mut grads, input_grad) = self.net.backward(s, &cache, delta, eps.is_some());
        if let (Some(eps), Some(gx)) = (eps, input_grad) {
            // ε per input dimension `[1, 1, d]`, uploaded once per chunk.
            let x_adv = x + gx.sign() * eps.clone();
            let (out2, cache2) = self.net.forward(s, x_adv, self.noise(rng, 2 * t + 1, n));
            let delta2 = self.net.head.delta(out2, y);
            let (g2, _) = self.net.backward(s, &cache2, delta2, false);
            grads.add(g2);
        }
        let st = self.settings;
        if let Some(urng) = data.update_rng.as_ref() {
            let total = (st.epochs * st.steps_per_epoch(self.job.n_train())) as u64;
            s.update_step(grads, st.weight_decay, (t, total), &|slot, [a, b]| {
                urng.normal(t * s_slots(self.job) + slot, a, b)
            });
            return;
        }
        let step = AdamStep::new(lr, st.beta1, st.beta2, st.eps, t, st.weight_decay);
        s.adam_step(grads, self.net.path, &step);
    }

    /// Trains replicas `range` of the job, then predicts the test inputs.
    fn run_chunk(&self, range: Range<usize>) -> ChunkOut {
        let io = ChunkIo::default();
        let (mut s, data) = self.prepare(range, &io);
        let mut collected = collect::start_all(&self.settings.collectors, data.range.clone());
        let steps = self.train_steps(&mut s, &data, &io, &mut collected);

        // Final objective on all N points with the dropout layer at its expectation, on the
        // device in f32 like the training loss itself: an overflow or NaN there is what
        // divergence means.
        let (out, _) = self.net.forward(&s, data.x_full.clone(), None);
        let fitted = (self.settings.dropout.is_none()).then(|| out.clone());
        let objective = self
            .net
            .objective(&s, out, &data.y_full, self.settings.weight_decay);
        let objective: Vec<f64> = io.down(objective).into_iter().map(f64::from).collect();
        // The reported rate: from the first element of the layer's first parameter slot.
        let rates: Vec<f64> = match (&self.settings.dropout, s.params.first()) {
            (Some(layer), Some(p)) if layer.rate_name().is_some() => io
                .down(p.clone().slice([0..data.rc, 0..1, 0..1]))
                .into_iter()
                .map(|v| layer.rate(f64::from(v)))
                .collect(),
            _ => Vec::new(),
        };
        let pred = self.predict(&s, &data, &io);
        let train_pred = self.training_fit(&s, &data, fitted, &io);
        self.observe(&s, &io, &mut collected, Want::Final);
        ChunkOut {
            collected,
            pred,
            train_pred,
            objective,
            rates,
            steps,
            uploads: io.uploads.get(),
            reads: io.reads.get(),
        }
    }

    /// Shows every replica's parameters to the collectors that want `want` (an epoch's end or
    /// the final parameters), reading them back only then.
    fn observe(
        &self,
        s: &State,
        io: &ChunkIo,
        collected: &mut [Vec<Box<dyn Collected>>],
        want: Want,
    ) {
        let collectors = &self.settings.collectors;
        if !collect::any_wants(collectors, want) {
            return;
        }
        let rc = s.w[0].dims()[0];
        for (r, params) in self.weights(s, rc, io).iter().enumerate() {
            let noise_sd = s.update.as_ref().and_then(|u| u.noise_sd(r));
            let event = match want {
                Want::Epoch(epoch) => Event::Epoch {
                    epoch,
                    params,
                    noise_sd,
                },
                _ => Event::Final { params },
            };
            collect::observe_all(collectors, collected, r, want, &event);
        }
    }

    /// Every replica's parameters, layer by layer its weights `[in, out]` then its biases.
    fn weights(&self, s: &State, rc: usize, io: &ChunkIo) -> Vec<Vec<f32>> {
        let mut out = vec![Vec::new(); rc];
        for (w, b) in s.w.iter().zip(&s.b) {
            for t in [w, b] {
                let host = io.down(t.clone());
                let per = host.len() / rc;
                for (k, slot) in out.iter_mut().enumerate() {
                    slot.extend_from_slice(&host[k * per..(k + 1) * per]);
                }
            }
        }
        out
    }

    /// Uploads a chunk's data and keys its noise stream: the state at its initial values and
    /// what the steps and the predictions read.
    fn prepare(&self, range: Range<usize>, io: &ChunkIo) -> (State, ChunkData<'a>) {
        let job = self.job;
        let shape = job.shape;
        let rc = range.len();
        let (d, n) = (shape.d_in, job.n_train());
        let dev = &self.device;
        let host = job.initial_weights(range.clone());
        let slots = match &self.settings.dropout {
            Some(layer) => layer.params(self.k(), shape.d_out),
            None => Vec::new(),
        };
        let mut s = State::new(&host, &shape.layers(), &slots, true, dev);
        // The initial weights and biases (the stochastic layer's parameters and the moments are
        // made on the device).
        io.uploads.set(2 * shape.layers().len() as u64);
        let eps = self
            .settings
            .adversarial
            .as_ref()
            .map(|eps| io.up(eps.iter().map(|&e| e as f32).collect(), [1, 1, d], dev));

        // Per-replica targets [rc, N, 1] and the shared inputs [1, N, d] (each replica's
        // target's own [rc, N, d] when the targets have inputs of their own).
        let mut y_host = Vec::with_capacity(rc * n);
        for r in range.clone() {
            y_host.extend_from_slice(&job.targets[job.replica_targets[r]]);
        }
        if let Some(u) = &self.settings.update {
            let keys: Vec<(u64, u64)> = (range.clone())
                .map(|r| (job.stream_seeds[r], job.replica_ids[r]))
                .collect();
            s.update = Some(u.tensor(&keys, &y_host, dev, &mut |v, shape| io.up(v, shape, dev)));
        }
        let x_full = io.up_inputs(job, &range, false, dev);
        let y_full = io.up(y_host, [rc, n, 1], dev);
        // The replicas' streams, keyed on the device (one upload each): the training noise
        // here, the mini-batch draws and the prediction passes' noise where they are used.
        let seeds = &job.stream_seeds[range.clone()];
        let ids = &job.replica_ids[range.clone()];
        let noise_rng = self.settings.dropout.as_ref().map(|_| {
            io.uploads.set(io.uploads.get() + 2);
            DeviceRng::new(seeds, ids, PURPOSE_NOISE, dev)
        });
        let update_rng = self.settings.update.as_ref().map(|_| {
            io.uploads.set(io.uploads.get() + 2);
            DeviceRng::new(seeds, ids, PURPOSE_UPDATE, dev)
        });
        let data = ChunkData {
            rc,
            range: range.clone(),
            x_full,
            y_full,
            eps,
            noise_rng,
            update_rng,
            seeds,
            ids,
        };
        (s, data)
    }

    /// The epochs: every batching scheme's steps. Returns the number of steps.
    fn train_steps(
        &self,
        s: &mut State,
        data: &ChunkData<'_>,
        io: &ChunkIo,
        collected: &mut [Vec<Box<dyn Collected>>],
    ) -> u64 {
        let (rc, n, d) = (data.rc, self.job.n_train(), self.job.shape.d_in);
        let dev = &self.device;
        let (x_full, y_full, eps) = (&data.x_full, &data.y_full, data.eps.as_ref());
        // The mini-batch stream (two uploads: its keys).
        let batch_rng = (!matches!(self.settings.batching, Batching::Full)).then(|| {
            io.uploads.set(io.uploads.get() + 2);
            DeviceRng::new(data.seeds, data.ids, PURPOSE_BATCH, dev)
        });
        let own_x = self.job.inputs.is_some();
        let x_rows = x_full.clone().reshape([x_full.dims()[0] * n, d]);
        let y_flat = y_full.clone().reshape([rc * n]);
        // Row offsets of the replicas in `y_flat` (and in `x_rows` with inputs per target),
        // `[rc, 1]`.
        let offsets = Tensor::<1, Int>::arange(0..rc as i64, dev)
            .mul_scalar(n as i64)
            .reshape([rc, 1]);
        // A batch from per-replica indices `[rc, b]`, gathered on the device.
        let gather = |idx: Tensor<2, Int>| -> (Tensor<3>, Tensor<3>) {
            let b = idx.dims()[1];
            let rows = (offsets.clone().cast(idx.dtype()) + idx.clone()).reshape([rc * b]);
            let xb = match own_x {
                true => x_rows.clone().select(0, rows.clone()),
                false => x_rows.clone().select(0, idx.reshape([rc * b])),
            };
            let yb = y_flat.clone().select(0, rows);
            (xb.reshape([rc, b, d]), yb.reshape([rc, b, 1]))
        };
        // The classic bootstrap's resample, per replica: indices into the N points `[rc, N]`
        // (draw 0 of the batch stream; later draws are the epochs' orders).
        let resample = match self.settings.batching {
            Batching::Resample { .. } => Some(batch_rng.as_ref().expect("batching").below(0, n, n)),
            _ => None,
        };
        let collectors = &self.settings.collectors;
        if let (Some(idx), true) = (&resample, collect::any_wants(collectors, Want::Resample)) {
            io.reads.set(io.reads.get() + 1);
            let flat: Vec<u32> = (idx.clone().into_data().convert::<i64>().iter::<i64>())
                .map(|v| v as u32)
                .collect();
            for (r, idx) in flat.chunks(n).enumerate() {
                let event = Event::Resample(idx);
                collect::observe_all(collectors, collected, r, Want::Resample, &event);
            }
        }
        let resampled = match self.settings.batching {
            Batching::Resample { size: None } => {
                Some(gather(resample.clone().expect("drawn above")))
            }
            _ => None,
        };

        let mut t = 0u64;
        for epoch in 0..self.settings.epochs as u64 {
            let lr = self.settings.lr_at(epoch as usize);
            match &self.settings.batching {
                Batching::Full => {
                    t += 1;
                    self.step(s, x_full.clone(), y_full, eps, t, lr, data);
                }
                Batching::Resample { size: None } => {
                    let (xb, yb) = resampled.as_ref().expect("drawn above");
                    t += 1;
                    self.step(s, xb.clone(), yb, eps, t, lr, data);
                }
                Batching::Resample { size: Some(size) } => {
                    // The resample in a fresh order every epoch (draw epoch + 1: draw 0 made
                    // the resample), cut into mini-batches.
                    let order = batch_rng
                        .as_ref()
                        .expect("batching")
                        .permutation(epoch + 1, n);
                    let idx = resample.clone().expect("drawn above").gather(1, order);
                    for start in (0..n).step_by(*size) {
                        let end = (start + size).min(n);
                        let (xb, yb) = gather(idx.clone().slice([0..rc, start..end]));
                        t += 1;
                        self.step(s, xb, &yb, eps, t, lr, data);
                    }
                }
                Batching::WithReplacement { size, per_epoch } => {
                    for _ in 0..*per_epoch {
                        t += 1;
                        let idx = batch_rng.as_ref().expect("batching").below(t, n, *size);
                        let (xb, yb) = gather(idx);
                        self.step(s, xb, &yb, eps, t, lr, data);
                    }
                }
                Batching::Shuffled { size } => {
                    let perm = batch_rng.as_ref().expect("batching").permutation(epoch, n);
                    for start in (0..n).step_by(*size) {
                        let end = (start + size).min(n);
                        let (xb, yb) = gather(perm.clone().slice([0..rc, start..end]));
                        t += 1;
                        self.step(s, xb, &yb, eps, t, lr, data);
                    }
                }
            }
            if let Some(update) = s.update.as_mut() {
                // SG-MCMC's: one read (the residual sums), two uploads (the chains' factors).
                update.epoch_end(n, &mut |t| io.down(t), &mut |v, shape| io.up(v, shape, dev));
            }
            self.observe(s, io, collected, Want::Epoch(epoch as usize));
        }

        t
    }

    /// T passes at the test inputs: the hidden layers once, then the (stochastic) last
    /// layer, from a prediction stream of each replica's own. `[rc, T, M, d_out]`.
    fn predict(&self, s: &State, data: &ChunkData<'_>, io: &ChunkIo) -> Vec<f32> {
        let (rc, m) = (data.rc, self.job.n_test());
        let dev = &self.device;
        let job = self.job;
        let x_test = io.up_inputs(job, &data.range, true, dev);
        let passes = self.settings.mc_passes;
        let dout = self.job.shape.d_out;
        let mut pred = vec![0.0f32; rc * passes * m * dout];
        let (h, _) = self.net.hidden(s, x_test);
        let predict_rng = self.settings.dropout.as_ref().map(|_| {
            io.uploads.set(io.uploads.get() + 2);
            DeviceRng::new(data.seeds, data.ids, PURPOSE_PREDICT, dev)
        });
        for pass in 0..passes {
            let noise = predict_rng
                .as_ref()
                .and_then(|g| self.noise(Some(g), pass as u64, m));
            let (out, _) = self.net.last(s, h.clone(), noise);
            let values = io.down(out);
            for k in 0..rc {
                let dst = ((k * passes + pass) * m) * dout;
                pred[dst..dst + m * dout]
                    .copy_from_slice(&values[k * m * dout..(k + 1) * m * dout]);
            }
        }
        pred
    }

    /// The mean prediction at the training inputs (the training fit) `[rc, N]`: without a
    /// stochastic layer the deterministic forward pass `fitted`; with one, the mean of T
    /// passes drawn from a stream of their own, so the test predictions do not depend on it.
    fn training_fit(
        &self,
        s: &State,
        data: &ChunkData<'_>,
        fitted: Option<Tensor<3>>,
        io: &ChunkIo,
    ) -> Vec<f32> {
        let (rc, n) = (data.rc, self.job.n_train());
        let (dout, passes) = (self.job.shape.d_out, self.settings.mc_passes);
        match fitted {
            Some(out) => {
                let v = io.down(out);
                (0..rc * n).map(|i| v[i * dout]).collect()
            }
            None => {
                let (h, _) = self.net.hidden(s, data.x_full.clone());
                io.uploads.set(io.uploads.get() + 2);
                let fit_rng = DeviceRng::new(data.seeds, data.ids, PURPOSE_FIT, &self.device);
                let mut sum = vec![0.0f64; rc * n];
                for pass in 0..passes {
                    let noise = self.noise(Some(&fit_rng), pass as u64, n);
                    let (out, _) = self.net.last(s, h.clone(), noise);
                    for (acc, v) in sum.iter_mut().zip(io.down(out).iter().step_by(dout)) {
                        *acc += f64::from(*v);
                    }
                }
                sum.iter().map(|v| (v / passes as f64) as f32).collect()
            }
        }
    }
}

/// A chunk's data on the device and its replicas' stream keys.
struct ChunkData<'a> {
    /// Replicas in the chunk.
    rc: usize,
    /// Their indices in the job.
    range: Range<usize>,
    /// The shared training inputs `[1, N, d]`, or each replica's own `[rc, N, d]`.
    x_full: Tensor<3>,
    /// The replicas' targets `[rc, N, 1]`.
    y_full: Tensor<3>,
    /// EnsAdvA's ε per input dimension `[1, 1, d]`.
    eps: Option<Tensor<3>>,
    /// The training noise stream, with a stochastic layer.
    noise_rng: Option<DeviceRng>,
    /// The normals of an update of the method's own (SG-MCMC's).
    update_rng: Option<DeviceRng>,
    seeds: &'a [u64],
    ids: &'a [u64],
}

impl ChunkTrainer for TensorTrainer<'_> {
    fn layout(&self) -> Layout {
        self.settings.layout(self.job)
    }

    fn bytes_per_replica(&self) -> usize {
        bytes_per_replica(
            self.job.shape,
            self.settings,
            self.job.n_train(),
            self.job.n_test(),
        )
    }

    fn step_bytes_per_replica(&self) -> usize {
        bytes_per_replica(self.job.shape, self.settings, self.job.n_train(), 0)
    }

    fn largest_tensor_per_replica(&self) -> usize {
        largest_tensor_per_replica(
            self.job.shape,
            self.settings,
            self.job.n_train(),
            self.job.n_test(),
        )
    }

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, MethodError> {
        Ok(self.run_chunk(range))
    }
}
