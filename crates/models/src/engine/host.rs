//! The built-in network's training on the CPU: the same objective, initial weights,
//! resample and Adam as `chunk.rs`, with the forward and backward passes as loops over one
//! replica's points instead of batched tensor operations over a chunk. One replica's
//! parameters, Adam state and activations stay in cache through all its epochs, nothing is
//! allocated per step, and the loops run through [`crate::simd::dispatch`]. Two networks:
//!
//! - [`crate::fused::Net`] (feature-major) for layers of in·out ≤ 800
//!   ([`crate::mlp::MlpShape::host_sized`]): for [002]'s 1-W-1 networks a batched matrix
//!   product is in·out = W multiply-adds per point, too small for a gemm to pay for its
//!   packing and dispatch;
//! - [`crate::blocked::Net`] (point-major register tiles) above: E1–E3's 1-128-64-32-1 and
//!   `tcc`'s width 40, where burn's per-product packing, dispatch and fresh output tensors
//!   cost as much as the arithmetic on a chunk's small matrices (docs/performance.md).
//!
//! It takes the jobs that need nothing else ([`applies`]): full batches (of the data or of a
//! classic bootstrap resample) or EnsBS's mini-batches drawn with replacement (the device
//! stream's indices, computed on the host: `device_rng::below_host`), no stochastic layer, no SWA, the ½·MSE or the Bernoulli
//! (logit) head, with or without EnsAdvA's adversarial pass, on a CPU backend, unless
//! `UQBENCH_HOST_LOOPS=off` ([`crate::mlp::host_loops_allowed`]). The floating-point order
//! differs from the tensors', so from the same seeds the replicas end at nearby, not
//! identical, weights: equal in distribution (docs/performance.md compares them). A
//! replica's numbers still depend on nothing but its own seeds.

use std::ops::Range;

use burn::tensor::Device;

use super::chunk::PURPOSE_BATCH;
use super::job::Job;
use super::memory::{bytes_per_replica, largest_tensor_per_replica, Resources};
use super::pool::{ChunkOut, ChunkTrainer};
use super::settings::{Batching, TrainSettings};
use super::Head;
use crate::device_rng::{below_host, DeviceRng};
use crate::fused::{feature_major, HostNet, Net};
use crate::kernels::{adam_slice, AdamStep};
use crate::mlp::xavier_init;
use crate::simd;

/// Whether the host trainer takes this job (module docs).
pub(crate) fn applies(job: &Job<'_>, settings: &TrainSettings, res: &Resources) -> bool {
    !res.backend.is_gpu()
        && job.shape.d_out == 1
        && settings.dropout.is_none()
        && settings.swa.is_none()
        && matches!(settings.head(), Head::HalfMse | Head::BernoulliLogit)
        && matches!(
            settings.batching,
            Batching::Full | Batching::Resample { size: None } | Batching::WithReplacement { .. }
        )
        && crate::mlp::host_loops_allowed()
}

/// The host trainer for one job.
pub(crate) struct Trainer<'a> {
    pub job: &'a Job<'a>,
    pub settings: &'a TrainSettings,
    pub device: Device,
}

impl Trainer<'_> {
    /// Per replica of `range`, its classic bootstrap resample (N indices), drawn on the
    /// device exactly as `chunk.rs` draws it; `None` without one.
    fn resamples(&self, range: Range<usize>) -> Option<Vec<Vec<usize>>> {
        if !matches!(self.settings.batching, Batching::Resample { .. }) {
            return None;
        }
        let n = self.job.n_train();
        let rng = DeviceRng::new(
            &self.job.stream_seeds[range.clone()],
            &self.job.replica_ids[range],
            PURPOSE_BATCH,
            &self.device,
        );
        let flat: Vec<i64> = (rng.below(0, n, n).into_data().convert::<i64>())
            .iter::<i64>()
            .collect();
        Some(
            flat.chunks(n)
                .map(|r| r.iter().map(|&i| i as usize).collect())
                .collect(),
        )
    }

    /// One replica's epochs: steps on its (resampled) data `xt` (feature-major) or on
    /// mini-batches drawn from it (EnsBS, from the replica's batch stream `stream`),
    /// `y`, with Adam and λ on the weights (the first `n_weights` entries of θ). With EnsAdvA's
    /// ε, each step adds the gradient at x' = x + ε·sign(∇ₓ loss) to the one at x, as
    /// `chunk.rs`'s step does.
    #[inline(always)]
    fn train_replica<N: HostNet>(
        &self,
        net: &mut N,
        theta: &mut [f32],
        xt: &[f32],
        y: &[f32],
        n_weights: usize,
        stream: (u64, u64),
    ) {
        let st = self.settings;
        let head = st.head();
        let dim = theta.len();
        // Mini-batches drawn with replacement (EnsBS): `size` points per step, `per_epoch`
        // steps per epoch, draw t's indices from the replica's batch stream exactly as
        // `chunk.rs` draws them on the device (`below_host`); else one full batch.
        let (per_epoch, n) = match st.batching {
            Batching::WithReplacement { size, per_epoch } => (per_epoch, size),
            _ => (1, y.len()),
        };
        let d = xt.len() / y.len();
        let mut batch = matches!(st.batching, Batching::WithReplacement { .. })
            .then(|| (vec![0usize; n], vec![0.0f32; d * n], vec![0.0f32; n]));
        let (mut m, mut v, mut grad) = (vec![0.0f32; dim], vec![0.0f32; dim], vec![0.0f32; dim]);
        let (mut f, mut delta) = (vec![0.0f32; n], vec![0.0f32; n]);
        // ε per input dimension, ∇ₓ, x' (feature-major) and the second pass's gradient.
        let mut adversarial = st.adversarial.as_ref().map(|eps| {
            let eps: Vec<f32> = eps.iter().map(|&e| e as f32).collect();
            (
                eps,
                vec![0.0f32; d * n],
                vec![0.0f32; d * n],
                vec![0.0f32; dim],
            )
        });
        for t in 1..=(st.epochs * per_epoch) as u64 {
            let (xt, y): (&[f32], &[f32]) = match batch.as_mut() {
                Some((idx, xb, yb)) => {
                    below_host((stream.0, stream.1, PURPOSE_BATCH), t, y.len(), idx);
                    for (xk, xbk) in xt.chunks_exact(y.len()).zip(xb.chunks_exact_mut(n)) {
                        for (o, &p) in xbk.iter_mut().zip(idx.iter()) {
                            *o = xk[p];
                        }
                    }
                    for (o, &p) in yb.iter_mut().zip(idx.iter()) {
                        *o = y[p];
                    }
                    (xb, yb)
                }
                None => (xt, y),
            };
            net.forward(theta, xt, &mut f);
            head_delta(head, &f, y, &mut delta);
            net.backward(theta, xt, &delta, &mut grad);
            if let Some((eps, gx, x_adv, grad2)) = adversarial.as_mut() {
                net.input_gradient(theta, gx);
                // x' = x + sign(∇ₓ)·ε_k (burn's sign: 0 at 0), per input dimension k.
                for (k, ((xa, g), x)) in (x_adv.chunks_exact_mut(n))
                    .zip(gx.chunks_exact(n))
                    .zip(xt.chunks_exact(n))
                    .enumerate()
                {
                    for ((xa, &g), &x) in xa.iter_mut().zip(g).zip(x) {
                        let sign = if g > 0.0 {
                            1.0
                        } else if g < 0.0 {
                            -1.0
                        } else {
                            0.0
                        };
                        *xa = x + sign * eps[k];
                    }
                }
                net.forward(theta, x_adv, &mut f);
                head_delta(head, &f, y, &mut delta);
                net.backward(theta, x_adv, &delta, grad2);
                for (g, &g2) in grad.iter_mut().zip(grad2.iter()) {
                    *g += g2;
                }
            }
            let weights = AdamStep::new(st.lr, st.beta1, st.beta2, st.eps, t, st.weight_decay);
            let biases = AdamStep {
                weight_decay: 0.0,
                ..weights
            };
            let (pw, pb) = theta.split_at_mut(n_weights);
            let (mw, mb) = m.split_at_mut(n_weights);
            let (vw, vb) = v.split_at_mut(n_weights);
            let (gw, gb) = grad.split_at(n_weights);
            adam_slice(pw, mw, vw, gw, &weights);
            adam_slice(pb, mb, vb, gb, &biases);
        }
    }
}

/// δ at the output for the outputs `f` and targets `y` of n points ([`Head::delta`]): ½·MSE
/// (f − y)/n, Bernoulli (σ(f) − y)/n.
#[inline(always)]
fn head_delta(head: Head, f: &[f32], y: &[f32], delta: &mut [f32]) {
    let inv_n = 1.0 / f.len() as f32;
    match head {
        Head::BernoulliLogit => {
            for ((d, &fp), &yp) in delta.iter_mut().zip(f).zip(y) {
                *d = (1.0 / (1.0 + (-fp).exp()) - yp) * inv_n;
            }
        }
        // ½·MSE, the only other head [`applies`] admits.
        _ => {
            for ((d, &fp), &yp) in delta.iter_mut().zip(f).zip(y) {
                *d = (fp - yp) * inv_n;
            }
        }
    }
}

/// The head's data term, averaged over the points ([`Head::value`]), in f32 like the
/// device's objective (`chunk.rs`): an overflow there is what divergence means. ½·MSE:
/// ½·mean (f − y)²; Bernoulli: mean softplus(f) − y·f, softplus(f) = max(f, 0) +
/// log(1 + e^{−|f|}).
fn head_value(head: Head, lanes: simd::Lanes, f: &[f32], y: &[f32]) -> f32 {
    let n = f.len() as f32;
    match head {
        Head::BernoulliLogit => {
            let terms: Vec<f32> = (f.iter().zip(y))
                .map(|(&fp, &yp)| fp.max(0.0) + (-fp.abs()).exp().ln_1p() - fp * yp)
                .collect();
            lanes.sum(&terms) / n
        }
        // ½·MSE, the only other head [`applies`] admits.
        _ => {
            let resid: Vec<f32> = f.iter().zip(y).map(|(&fp, &yp)| fp - yp).collect();
            0.5 * (lanes.dot(&resid, &resid) / n)
        }
    }
}

/// One replica's training, fit and predictions as an operation for [`simd::dispatch`] (a
/// struct, not a closure: a closure's body would be compiled in a call shim outside the AVX2
/// copy). Returns the head's data term of the fit at all N points, in f32.
struct RunReplica<'a, 'b, N> {
    trainer: &'a Trainer<'b>,
    net: &'a mut N,
    theta: &'a mut [f32],
    /// The (resampled) training data: inputs feature-major, targets.
    data: (&'a [f32], &'a [f32]),
    n_weights: usize,
    /// The replica's (stream seed, identifier): its mini-batch draws.
    stream: (u64, u64),
    /// All training inputs and the test inputs, feature-major.
    x: (&'a [f32], &'a [f32]),
    /// All training targets.
    y: &'a [f32],
    pred: &'a mut [f32],
    train: &'a mut [f32],
}

impl<N: HostNet> simd::Op for RunReplica<'_, '_, N> {
    type Output = f32;

    #[inline(always)]
    fn call(self, lanes: simd::Lanes) -> f32 {
        let (net, theta) = (self.net, self.theta);
        net.set_lanes(lanes);
        (self.trainer).train_replica(
            net,
            theta,
            self.data.0,
            self.data.1,
            self.n_weights,
            self.stream,
        );
        // The fit at all N points (the final objective's data term) and the test predictions,
        // every pass the same without a stochastic layer.
        net.forward(theta, self.x.0, self.train);
        let m = self.x.1.len() / (self.x.0.len() / self.train.len());
        let (first, rest) = self.pred.split_at_mut(m);
        net.forward(theta, self.x.1, first);
        for pass in rest.chunks_exact_mut(m) {
            pass.copy_from_slice(first);
        }
        head_value(self.trainer.settings.head(), lanes, self.train, self.y)
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
        (1, self.settings.mc_passes)
    }

    fn has_rates(&self) -> bool {
        false
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

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, uqbench_core::MethodError> {
        let (shape, points) = (self.job.shape, self.job.n_train().max(self.job.n_test()));
        let (layers, slope) = (shape.layers(), shape.negative_slope);
        Ok(if shape.host_sized() {
            self.train_with(Net::new(layers, slope, points), range)
        } else {
            self.train_with(crate::blocked::Net::new(layers, slope, points), range)
        })
    }
}

impl Trainer<'_> {
    /// [`ChunkTrainer::train_chunk`] on the network `net`: [`Net`]'s feature-major loops for
    /// layers of in·out ≤ 800 ([`crate::mlp::MlpShape::host_sized`], where they were
    /// measured faster than tensors), [`crate::blocked::Net`]'s register tiles above.
    fn train_with<N: HostNet>(&self, mut net: N, range: Range<usize>) -> ChunkOut {
        let job = self.job;
        let (d, n, m) = (job.shape.d_in, job.n_train(), job.n_test());
        let passes = self.settings.mc_passes;
        let rc = range.len();
        let layers = job.shape.layers();
        let n_weights: usize = layers.iter().map(|&(i, o)| i * o).sum();
        let (xt, xt_test) = (feature_major(job.x_train, d), feature_major(job.x_test, d));
        let host = xavier_init(job.shape, &job.init_seeds[range.clone()]);
        let resamples = self.resamples(range.clone());
        let lambda = self.settings.weight_decay;
        let mut out = ChunkOut {
            pred: vec![0.0; rc * passes * m],
            train_pred: vec![0.0; rc * n],
            objective: vec![0.0; rc],
            steps: (self.settings.epochs
                * match self.settings.batching {
                    Batching::WithReplacement { per_epoch, .. } => per_epoch,
                    _ => 1,
                }) as u64,
            ..ChunkOut::default()
        };
        for r in 0..rc {
            // θ: the replica's Xavier weights, layer by layer, then its biases.
            let mut theta: Vec<f32> = Vec::with_capacity(net.dim());
            for (l, &(i, o)) in layers.iter().enumerate() {
                theta.extend_from_slice(&host.layers[l].0[r * i * o..(r + 1) * i * o]);
            }
            for (l, &(_, o)) in layers.iter().enumerate() {
                theta.extend_from_slice(&host.layers[l].1[r * o..(r + 1) * o]);
            }
            let y = &job.targets[job.replica_targets[range.start + r]];
            // The resample's inputs and targets, or the data.
            let resampled: Option<(Vec<f32>, Vec<f32>)> = resamples.as_ref().map(|idx| {
                (
                    (0..d)
                        .flat_map(|k| idx[r].iter().map(move |&p| (k, p)))
                        .map(|(k, p)| xt[k * n + p])
                        .collect(),
                    idx[r].iter().map(|&p| y[p]).collect(),
                )
            });
            let (xr, yr) = match &resampled {
                Some((xr, yr)) => (&xr[..], &yr[..]),
                None => (&xt[..], &y[..]),
            };
            let train = &mut out.train_pred[r * n..(r + 1) * n];
            let pred = &mut out.pred[r * passes * m..(r + 1) * passes * m];
            let data = simd::dispatch(RunReplica {
                trainer: self,
                net: &mut net,
                theta: &mut theta,
                data: (xr, yr),
                n_weights,
                stream: (
                    job.stream_seeds[range.start + r],
                    job.replica_ids[range.start + r],
                ),
                x: (&xt, &xt_test),
                y,
                pred,
                train,
            });
            let l2 = simd::dot(&theta[..n_weights], &theta[..n_weights]);
            out.objective[r] = f64::from(data + (0.5 * lambda) as f32 * l2);
            if self.settings.keep_weights {
                // Layer by layer its weights, then its biases (`TrainOutput::weights`).
                let (mut w_at, mut b_at, mut flat) = (0, n_weights, Vec::with_capacity(net.dim()));
                for &(i, o) in &layers {
                    flat.extend_from_slice(&theta[w_at..w_at + i * o]);
                    flat.extend_from_slice(&theta[b_at..b_at + o]);
                    (w_at, b_at) = (w_at + i * o, b_at + o);
                }
                out.weights.push(flat);
            }
        }
        if let (Some(idx), true) = (resamples, self.settings.keep_resample) {
            out.resamples = idx
                .into_iter()
                .map(|r| r.into_iter().map(|p| p as u32).collect())
                .collect();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use uqbench_anchor::Rng;
    use uqbench_core::Likelihood;

    use super::super::chunk;
    use super::super::network::Network;
    use super::*;
    use crate::kernels::KernelPath;
    use crate::mlp::MlpShape;

    #[test]
    fn the_host_trainer_follows_the_tensor_route() {
        // A network on 43 points, 8 epochs, three replicas, every job the host
        // trainer takes: ½·MSE and Bernoulli heads, full batch, the classic bootstrap
        // resample and EnsBS's mini-batches drawn with replacement, with and without EnsAdvA's
        // pass. From the same seeds both routes start at
        // the same weights and draw the same resample and mini-batches; they differ only in the floating-point
        // order of their sums (f32, about 1e-7 relative per operation), which eight Adam steps
        // of lr 1e-2 carry into the weights at well under 1e-4. A wrong gradient, head or
        // adversarial input moves a step by up to lr = 1e-2, a hundred times that.
        // Twice: a 2-6-4-1 network ([`Net`]'s feature-major loops) and a 2-30-37-1 one
        // (in·out = 1 110 > 800: `blocked.rs`'s register tiles, with every remainder: 30 and
        // 37 columns are 16 + 8 + 6 and 2·16 + 5, 43 points 8·5 + 3 rows).
        for hidden in [vec![6, 4], vec![30, 37]] {
            follows_the_tensor_route(hidden);
        }
    }

    fn follows_the_tensor_route(hidden: Vec<usize>) {
        let shape = MlpShape {
            d_in: 2,
            hidden,
            d_out: 1,
            negative_slope: 0.01,
        };
        let (n, m, d) = (43, 5, 2);
        let mut rng = Rng::new(11);
        let x: Vec<f32> = (0..n * d)
            .map(|_| rng.uniform_in(-2.0, 2.0) as f32)
            .collect();
        let x_test: Vec<f32> = (0..m * d)
            .map(|_| rng.uniform_in(-2.0, 2.0) as f32)
            .collect();
        let gaussian: Vec<f32> = (0..n)
            .map(|p| x[p * d] - 0.5 * x[p * d + 1] + 0.3 * rng.normal() as f32)
            .collect();
        let labels: Vec<f32> = (0..n)
            .map(|p| f32::from(u8::from(x[p * d] + 0.5 * rng.normal() as f32 > 0.0)))
            .collect();
        let dev = Device::flex();
        let res = Resources::new(crate::backend::BackendKind::Flex, dev.clone());
        for likelihood in [Likelihood::Gaussian, Likelihood::Bernoulli] {
            for batching in [
                Batching::Full,
                Batching::Resample { size: None },
                Batching::WithReplacement {
                    size: 20,
                    per_epoch: 2,
                },
            ] {
                for adversarial in [None, Some(vec![0.05, 0.1])] {
                    let targets = vec![match likelihood {
                        Likelihood::Gaussian => gaussian.clone(),
                        Likelihood::Bernoulli => labels.clone(),
                    }];
                    let job = Job {
                        shape: &shape,
                        x_train: &x,
                        targets: &targets,
                        replica_targets: &[0, 0, 0],
                        init_seeds: &[1, 2, 3],
                        stream_seeds: &[4, 5, 6],
                        replica_ids: &[0, 1, 2],
                        x_test: &x_test,
                    };
                    let settings = TrainSettings {
                        likelihood,
                        adversarial: adversarial.clone(),
                        keep_weights: true,
                        batching: batching.clone(),
                        ..TrainSettings::paper(8, n)
                    };
                    assert!(applies(&job, &settings, &res) || !crate::mlp::host_loops_allowed());
                    let host = Trainer {
                        job: &job,
                        settings: &settings,
                        device: dev.clone(),
                    }
                    .train_chunk(0..3)
                    .expect("host");
                    let tensor = chunk::Trainer {
                        job: &job,
                        settings: &settings,
                        device: dev.clone(),
                        net: Network {
                            path: KernelPath::Flex,
                            slope: shape.negative_slope,
                            dropout: None,
                            head: settings.head(),
                        },
                    }
                    .train_chunk(0..3)
                    .expect("tensor");
                    let case = format!(
                        "{:?}, {likelihood:?}, {batching:?}, {adversarial:?}",
                        shape.hidden
                    );
                    let close = |a: &[f32], b: &[f32], what: &str| {
                        assert_eq!(a.len(), b.len(), "{case}: {what}");
                        for (i, (u, v)) in a.iter().zip(b).enumerate() {
                            assert!((u - v).abs() <= 1e-4, "{case}: {what}[{i}] {u} vs {v}");
                        }
                    };
                    for r in 0..3 {
                        close(&host.weights[r], &tensor.weights[r], "weights");
                        let (h, t) = (host.objective[r], tensor.objective[r]);
                        assert!((h - t).abs() <= 1e-4 * t.abs(), "{case}: objective {h} {t}");
                    }
                    close(&host.pred, &tensor.pred, "predictions");
                    close(&host.train_pred, &tensor.train_pred, "fit");
                }
            }
        }
    }
}
