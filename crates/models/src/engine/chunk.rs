//! The built-in network on the trainer: one chunk of replicas trained step by step (batches,
//! dropout noise, the adversarial pass, Adam), then its final objective, predictions and
//! training fit. Nothing inside the epoch loop runs on the host: noise and mini-batch indices
//! come from [`DeviceRng`] and batches are gathered on the device; the data, the keys and ε
//! are uploaded once per chunk.

use std::cell::Cell;
use std::ops::Range;

use burn::tensor::{Device, Int, Tensor};

use super::device_rng::DeviceRng;
use super::job::Job;
use super::memory::{bytes_per_replica, largest_tensor_per_replica};
use super::network::{download, upload, Network, State};
use super::pool::{ChunkOut, ChunkTrainer};
use super::settings::{Batching, TrainSettings};
use crate::dropout::Dropout;
use crate::kernels::AdamStep;
use crate::mlp::xavier_init;
use uqbench_core::MethodError;

/// The purposes of a replica's device streams (see [`DeviceRng::new`]).
const PURPOSE_NOISE: u64 = 1;
const PURPOSE_BATCH: u64 = 2;
const PURPOSE_PREDICT: u64 = 3;
const PURPOSE_FIT: u64 = 4;

/// The built-in network's trainer for one job.
pub(crate) struct Trainer<'a> {
    pub job: &'a Job<'a>,
    pub settings: &'a TrainSettings,
    pub device: Device,
    pub net: Network,
}

/// Host↔device transfers of one chunk, counted where they happen (summed into
/// [`super::pool::Transfers`]).
#[derive(Default)]
struct ChunkIo {
    uploads: Cell<u64>,
    reads: Cell<u64>,
}

impl ChunkIo {
    fn up(&self, values: Vec<f32>, shape: [usize; 3], device: &Device) -> Tensor<3> {
        self.uploads.set(self.uploads.get() + 1);
        upload(values, shape, device)
    }

    fn down(&self, t: Tensor<3>) -> Vec<f32> {
        self.reads.set(self.reads.get() + 1);
        download(t)
    }
}

impl Trainer<'_> {
    /// The stochastic layer's input width K (the last hidden width).
    fn k(&self) -> usize {
        *self.job.shape.hidden.last().unwrap_or(&self.job.shape.d_in)
    }

    /// Draw `counter` of the replicas' noise, computed on the device, or `None` without
    /// dropout.
    fn noise(&self, rng: Option<&DeviceRng>, counter: u64, n: usize) -> Option<Tensor<3>> {
        let (d, rng) = (self.settings.dropout.as_ref()?, rng?);
        Some(d.draw_device(rng, counter, n, self.k(), self.job.shape.d_out))
    }

    /// One optimiser step on a batch: forward, head, backward (plus the adversarial pass on
    /// x' = x + ε·sign(∇ₓ loss) for EnsAdvA, whose loss adds to the step's), then Adam.
    /// Step t's noise is draw 2t of the noise stream (2t + 1 for the adversarial pass).
    fn step(
        &self,
        s: &mut State,
        x: Tensor<3>,
        y: &Tensor<3>,
        eps: Option<&Tensor<3>>,
        t: u64,
        rng: Option<&DeviceRng>,
    ) {
        let n = x.dims()[1];
        let (out, cache) = self.net.forward(s, x.clone(), self.noise(rng, 2 * t, n));
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
        let step = AdamStep::new(st.lr, st.beta1, st.beta2, st.eps, t, st.weight_decay);
        s.adam_step(grads, self.net.path, &step);
    }

    /// Trains replicas `range` of the job, then predicts the test inputs.
    fn run_chunk(&self, range: Range<usize>) -> ChunkOut {
        let job = self.job;
        let shape = job.shape;
        let rc = range.len();
        let (d, n, m) = (shape.d_in, job.n_train(), job.n_test());
        let dev = &self.device;
        let host = xavier_init(shape, &job.init_seeds[range.clone()]);
        let param = self
            .settings
            .dropout
            .as_ref()
            .and_then(Dropout::initial_param);
        let io = ChunkIo::default();
        let mut s = State::new(&host, &shape.layers(), param, true, dev);
        // The initial weights and biases (the scalar and the moments are made on the device).
        io.uploads.set(2 * shape.layers().len() as u64);
        let eps = self
            .settings
            .adversarial
            .as_ref()
            .map(|eps| io.up(eps.iter().map(|&e| e as f32).collect(), [1, 1, d], dev));

        // Per-replica targets [rc, N, 1] and the shared inputs [1, N, d].
        let mut y_host = Vec::with_capacity(rc * n);
        for r in range.clone() {
            y_host.extend_from_slice(&job.targets[job.replica_targets[r]]);
        }
        let x_full = io.up(job.x_train.to_vec(), [1, n, d], dev);
        let y_full = io.up(y_host, [rc, n, 1], dev);
        // The replicas' streams, keyed on the device (one upload each): the training noise,
        // the mini-batch draws, and (below) the prediction passes' noise.
        let seeds = &job.stream_seeds[range.clone()];
        let ids = &job.replica_ids[range.clone()];
        let noise_rng = self.settings.dropout.as_ref().map(|_| {
            io.uploads.set(io.uploads.get() + 2);
            DeviceRng::new(seeds, ids, PURPOSE_NOISE, dev)
        });
        let batch_rng = (!matches!(self.settings.batching, Batching::Full)).then(|| {
            io.uploads.set(io.uploads.get() + 2);
            DeviceRng::new(seeds, ids, PURPOSE_BATCH, dev)
        });
        let x_rows = x_full.clone().reshape([n, d]);
        let y_flat = y_full.clone().reshape([rc * n]);
        // Row offsets of the replicas in `y_flat`, `[rc, 1]`.
        let offsets = Tensor::<1, Int>::arange(0..rc as i64, dev)
            .mul_scalar(n as i64)
            .reshape([rc, 1]);
        // A batch from per-replica indices `[rc, b]`, gathered on the device.
        let gather = |idx: Tensor<2, Int>| -> (Tensor<3>, Tensor<3>) {
            let b = idx.dims()[1];
            let xb = x_rows.clone().select(0, idx.clone().reshape([rc * b]));
            let yb = y_flat.clone().select(
                0,
                (offsets.clone().cast(idx.dtype()) + idx).reshape([rc * b]),
            );
            (xb.reshape([rc, b, d]), yb.reshape([rc, b, 1]))
        };
        let rng = noise_rng.as_ref();

        // The classic bootstrap's resample, per replica: indices into the N points `[rc, N]`
        // (draw 0 of the batch stream; later draws are the epochs' orders).
        let resample = match self.settings.batching {
            Batching::Resample { .. } => Some(batch_rng.as_ref().expect("batching").below(0, n, n)),
            _ => None,
        };
        let resampled = match self.settings.batching {
            Batching::Resample { size: None } => {
                Some(gather(resample.clone().expect("drawn above")))
            }
            _ => None,
        };

        let mut t = 0u64;
        for epoch in 0..self.settings.epochs as u64 {
            match &self.settings.batching {
                Batching::Full => {
                    t += 1;
                    self.step(&mut s, x_full.clone(), &y_full, eps.as_ref(), t, rng);
                }
                Batching::Resample { size: None } => {
                    let (xb, yb) = resampled.as_ref().expect("drawn above");
                    t += 1;
                    self.step(&mut s, xb.clone(), yb, eps.as_ref(), t, rng);
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
                        self.step(&mut s, xb, &yb, eps.as_ref(), t, rng);
                    }
                }
                Batching::WithReplacement { size, per_epoch } => {
                    for _ in 0..*per_epoch {
                        t += 1;
                        let idx = batch_rng.as_ref().expect("batching").below(t, n, *size);
                        let (xb, yb) = gather(idx);
                        self.step(&mut s, xb, &yb, eps.as_ref(), t, rng);
                    }
                }
                Batching::Shuffled { size } => {
                    let perm = batch_rng.as_ref().expect("batching").permutation(epoch, n);
                    for start in (0..n).step_by(*size) {
                        let end = (start + size).min(n);
                        let (xb, yb) = gather(perm.clone().slice([0..rc, start..end]));
                        t += 1;
                        self.step(&mut s, xb, &yb, eps.as_ref(), t, rng);
                    }
                }
            }
        }

        // Final objective on all N points with the dropout layer at its expectation, on the
        // device in f32 like the training loss itself: an overflow or NaN there is what
        // divergence means.
        let (out, _) = self.net.forward(&s, x_full.clone(), None);
        let fitted = (self.settings.dropout.is_none()).then(|| out.clone());
        let objective = self
            .net
            .objective(&s, out, &y_full, self.settings.weight_decay);
        let objective: Vec<f64> = io.down(objective).into_iter().map(f64::from).collect();
        let rates: Vec<f64> = match (&self.settings.dropout, &s.param) {
            (Some(dropout), Some(p)) => io
                .down(p.clone())
                .into_iter()
                .map(|v| dropout.rate_of(f64::from(v)))
                .collect(),
            (Some(dropout), None) => vec![dropout.rate_of(0.0); rc],
            _ => Vec::new(),
        };

        // Predictions: the hidden layers once, then T passes of the (stochastic) last layer,
        // from a prediction stream of each replica's own.
        let x_test = io.up(job.x_test.to_vec(), [1, m, d], dev);
        let passes = self.settings.mc_passes;
        let dout = shape.d_out;
        let mut pred = vec![0.0f32; rc * passes * m * dout];
        let (h, _) = self.net.hidden(&s, x_test);
        let predict_rng = self.settings.dropout.as_ref().map(|_| {
            io.uploads.set(io.uploads.get() + 2);
            DeviceRng::new(seeds, ids, PURPOSE_PREDICT, dev)
        });
        for pass in 0..passes {
            let noise = predict_rng
                .as_ref()
                .and_then(|g| self.noise(Some(g), pass as u64, m));
            let (out, _) = self.net.last(&s, h.clone(), noise);
            let values = io.down(out);
            for k in 0..rc {
                let dst = ((k * passes + pass) * m) * dout;
                pred[dst..dst + m * dout]
                    .copy_from_slice(&values[k * m * dout..(k + 1) * m * dout]);
            }
        }

        // The mean prediction at the training inputs (the training fit): without a stochastic
        // layer the deterministic forward pass above; with one, the mean of T passes drawn from
        // a stream of their own, so the test predictions above do not
        // depend on it.
        let train_pred: Vec<f32> = match fitted {
            Some(out) => {
                let v = io.down(out);
                (0..rc * n).map(|i| v[i * dout]).collect()
            }
            None => {
                let (h, _) = self.net.hidden(&s, x_full);
                io.uploads.set(io.uploads.get() + 2);
                let fit_rng = DeviceRng::new(seeds, ids, PURPOSE_FIT, dev);
                let mut sum = vec![0.0f64; rc * n];
                for pass in 0..passes {
                    let noise = self.noise(Some(&fit_rng), pass as u64, n);
                    let (out, _) = self.net.last(&s, h.clone(), noise);
                    for (acc, v) in sum.iter_mut().zip(io.down(out).iter().step_by(dout)) {
                        *acc += f64::from(*v);
                    }
                }
                sum.iter().map(|v| (v / passes as f64) as f32).collect()
            }
        };
        ChunkOut {
            pred,
            train_pred,
            objective,
            rates,
            steps: t,
            uploads: io.uploads.get(),
            reads: io.reads.get(),
        }
    }
}

impl ChunkTrainer for Trainer<'_> {
    fn replicas(&self) -> usize {
        self.job.replicas()
    }

    fn points(&self) -> (usize, usize) {
        (self.job.n_train(), self.job.n_test())
    }

    fn outputs(&self) -> (usize, usize) {
        (self.job.shape.d_out, self.settings.mc_passes)
    }

    fn has_rates(&self) -> bool {
        self.settings.dropout.is_some()
    }

    fn bytes_per_replica(&self) -> usize {
        bytes_per_replica(
            self.job.shape,
            self.settings,
            self.job.n_train(),
            self.job.n_test(),
        )
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
