//! The built-in network on the trainer: one chunk of replicas trained step by step (batches,
//! dropout noise, the adversarial pass, Adam), then its final objective, predictions and
//! training fit.

use std::cell::Cell;
use std::ops::Range;

use burn::tensor::{Device, Tensor};
use uqbench_anchor::seed::splitmix64;
use uqbench_anchor::Rng;

use super::batches;
use super::job::Job;
use super::memory::{bytes_per_replica, largest_tensor_per_replica};
use super::network::{download, upload, Network, State};
use super::pool::{ChunkOut, ChunkTrainer};
use super::settings::{Batching, TrainSettings};
use crate::dropout::Dropout;
use crate::error::ModelError;
use crate::kernels::AdamStep;
use crate::mlp::xavier_init;

/// The built-in network's trainer for one job.
pub(crate) struct Trainer<'a> {
    pub job: &'a Job<'a>,
    pub settings: &'a TrainSettings,
    pub device: Device,
    pub net: Network,
}

/// Host↔device transfers of one chunk, counted where they happen.
#[derive(Default)]
struct Transfers {
    uploads: Cell<u64>,
    reads: Cell<u64>,
}

impl Transfers {
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

    /// One pass's noise for the replicas' streams (drawn on the host and uploaded), or
    /// `None` without dropout.
    fn noise(&self, io: &Transfers, rngs: &mut [Rng], n: usize) -> Option<Tensor<3>> {
        self.settings.dropout.as_ref().map(|d| {
            io.uploads.set(io.uploads.get() + 1);
            d.draw(rngs, n, self.k(), self.job.shape.d_out, &self.device)
        })
    }

    /// One optimiser step on a batch: forward, head, backward (plus the adversarial pass on
    /// x' = x + ε·sign(∇ₓ loss) for EnsAdvA, whose loss adds to the step's), then Adam.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        io: &Transfers,
        s: &mut State,
        x: Tensor<3>,
        y: &Tensor<3>,
        eps: Option<&Tensor<3>>,
        t: u64,
        rngs: &mut [Rng],
    ) {
        let n = x.dims()[1];
        let (out, cache) = self.net.forward(s, x.clone(), self.noise(io, rngs, n));
        let delta = self.net.head.delta(out, y);
        let (mut grads, input_grad) = self.net.backward(s, &cache, delta, eps.is_some());
        if let (Some(eps), Some(gx)) = (eps, input_grad) {
            // ε per input dimension `[1, 1, d]`, uploaded once per chunk.
            let x_adv = x + gx.sign() * eps.clone();
            let (out2, cache2) = self.net.forward(s, x_adv, self.noise(io, rngs, n));
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
        let io = Transfers::default();
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
        let y_full = io.up(y_host.clone(), [rc, n, 1], dev);
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
            (io.up(xb, [rc, b, d], dev), io.up(yb, [rc, b, 1], dev))
        };

        let resampled = match self.settings.batching {
            Batching::Resample => Some(gather(&batches::with_replacement(&mut rngs, n, n))),
            _ => None,
        };

        let mut t = 0u64;
        for _ in 0..self.settings.epochs {
            match &self.settings.batching {
                Batching::Full => {
                    t += 1;
                    self.step(
                        &io,
                        &mut s,
                        x_full.clone(),
                        &y_full,
                        eps.as_ref(),
                        t,
                        &mut rngs,
                    );
                }
                Batching::Resample => {
                    let (xb, yb) = resampled.as_ref().expect("drawn above");
                    t += 1;
                    self.step(&io, &mut s, xb.clone(), yb, eps.as_ref(), t, &mut rngs);
                }
                Batching::WithReplacement { size, per_epoch } => {
                    for _ in 0..*per_epoch {
                        let (xb, yb) = gather(&batches::with_replacement(&mut rngs, n, *size));
                        t += 1;
                        self.step(&io, &mut s, xb, &yb, eps.as_ref(), t, &mut rngs);
                    }
                }
                Batching::Shuffled { size } => {
                    let perms = batches::permutations(&mut rngs, n);
                    for start in (0..n).step_by(*size) {
                        let end = (start + size).min(n);
                        let idx: Vec<Vec<usize>> =
                            perms.iter().map(|p| p[start..end].to_vec()).collect();
                        let (xb, yb) = gather(&idx);
                        t += 1;
                        self.step(&io, &mut s, xb, &yb, eps.as_ref(), t, &mut rngs);
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
        // from a prediction stream of each replica's own (splitmix64 of its stream seed).
        let x_test = io.up(job.x_test.to_vec(), [1, m, d], dev);
        let passes = self.settings.mc_passes;
        let dout = shape.d_out;
        let mut pred = vec![0.0f32; rc * passes * m * dout];
        let (h, _) = self.net.hidden(&s, x_test);
        let mut predict_rngs: Vec<Rng> = job.stream_seeds[range.clone()]
            .iter()
            .map(|&s| Rng::new(splitmix64(s)))
            .collect();
        for pass in 0..passes {
            let noise = self.noise(&io, &mut predict_rngs, m);
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
        // a stream of their own (splitmix64 twice), so the test predictions above do not
        // depend on it.
        let train_pred: Vec<f32> = match fitted {
            Some(out) => {
                let v = io.down(out);
                (0..rc * n).map(|i| v[i * dout]).collect()
            }
            None => {
                let (h, _) = self.net.hidden(&s, x_full);
                let mut fit_rngs: Vec<Rng> = job.stream_seeds[range.clone()]
                    .iter()
                    .map(|&s| Rng::new(splitmix64(splitmix64(s))))
                    .collect();
                let mut sum = vec![0.0f64; rc * n];
                for _ in 0..passes {
                    let noise = self.noise(&io, &mut fit_rngs, n);
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

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, ModelError> {
        Ok(self.run_chunk(range))
    }
}
