//! HMC's chains on the CPU: the same sampler as `chain.rs` (the same random draws in the same
//! order from each chain's stream, the same leapfrog, accept, Gibbs step and dual averaging),
//! with the potential and its gradient written as fused loops over one chain's points instead
//! of tensor operations. A chain's parameters, momenta and activations (a few kB for [002]'s
//! 1-W-1 networks) stay in cache through all its iterations, and nothing is allocated per
//! step; chains are independent, so a chunk runs them one after another on its worker thread.
//! On a GPU the tensor version runs (one kernel per operation over every chain of a chunk).
//!
//! Arithmetic is f32 like the device's; the potential, SSE and energies are summed in f64.
//! The floating-point order differs from the tensor version's, so chains follow other
//! trajectories from the same seeds: the results are equal in distribution, not bit for bit
//! (compared in docs/performance.md).

use std::ops::Range;

use uqbench_anchor::Rng;
use uqbench_metrics::mcmc;

use super::chain::{gamma_draw, ChainRecord, DualAveraging, HmcTrainer, PRIOR_A0, PRIOR_B0};
use crate::engine::ChunkOut;
use crate::mlp::xavier_init;
use uqbench_core::MethodError;

/// One chain's network: layer shapes, flat parameter layout W₀ … W_L then b₀ … b_L (the
/// order in which the tensor version draws momenta; W_l row-major `[in, out]`), and scratch
/// for every layer's activations, feature-major (`[width, points]`, so that every inner loop
/// runs over the points, contiguous and vectorised).
struct Net {
    /// (in, out) per layer.
    layers: Vec<(usize, usize)>,
    /// Offsets of W_l and b_l in the flat parameters.
    w_at: Vec<usize>,
    b_at: Vec<usize>,
    dim: usize,
    slope: f32,
    /// Per layer, its input `[in, points]` (layer 0: empty; the data is read in place).
    acts: Vec<Vec<f32>>,
    /// Pre-activations per layer `[out, points]`.
    pre: Vec<Vec<f32>>,
    /// δ buffers `[width, points]`, two alternating.
    delta: [Vec<f32>; 2],
}

/// y += a·x, element by element.
#[inline(always)]
fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// Σ a_i·b_i with eight interleaved partial sums, added in a fixed order: the same result
/// whatever the vector width the loop compiles to.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail
}

/// Σ a_i, as [`dot`] with ones.
#[inline(always)]
fn sum(a: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let ca = a.chunks_exact(8);
    let ra = ca.remainder();
    for x in ca {
        for i in 0..8 {
            acc[i] += x[i];
        }
    }
    let tail: f32 = ra.iter().sum();
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail
}

impl Net {
    fn new(layers: Vec<(usize, usize)>, slope: f64, points: usize) -> Net {
        let mut w_at = Vec::new();
        let mut at = 0;
        for &(i, o) in &layers {
            w_at.push(at);
            at += i * o;
        }
        let mut b_at = Vec::new();
        for &(_, o) in &layers {
            b_at.push(at);
            at += o;
        }
        let widest = layers.iter().map(|&(i, o)| i.max(o)).max().unwrap_or(1);
        Net {
            acts: (layers.iter().enumerate())
                .map(|(l, &(i, _))| {
                    if l == 0 {
                        Vec::new()
                    } else {
                        vec![0.0; points * i]
                    }
                })
                .collect(),
            pre: layers.iter().map(|&(_, o)| vec![0.0; points * o]).collect(),
            delta: [vec![0.0; points * widest], vec![0.0; points * widest]],
            layers,
            w_at,
            b_at,
            dim: at,
            slope: slope as f32,
        }
    }

    /// f at `n` points (`xt`: feature-major `[d, n]`) into `out` (`[n]`), keeping the
    /// activations.
    #[inline(always)]
    fn forward(&mut self, theta: &[f32], xt: &[f32], out: &mut [f32]) {
        let n = out.len();
        let last = self.layers.len() - 1;
        for (l, &(din, dout)) in self.layers.iter().enumerate() {
            let w = &theta[self.w_at[l]..self.w_at[l] + din * dout];
            let b = &theta[self.b_at[l]..self.b_at[l] + dout];
            let (before, after) = self.acts.split_at_mut(l + 1);
            let input: &[f32] = if l == 0 { xt } else { &before[l] };
            let z = &mut self.pre[l];
            let slope = self.slope;
            for j in 0..dout {
                let zj = &mut z[j * n..(j + 1) * n];
                if din == 1 && l < last {
                    // One input (a 1-D problem's first layer): z and φ(z) in one pass; the
                    // same numbers as the general loop (b + w·x, then φ).
                    let (bj, wj) = (b[j], w[j]);
                    let h = &mut after[0][j * n..(j + 1) * n];
                    for ((zv, hv), &xv) in zj.iter_mut().zip(h.iter_mut()).zip(&input[..n]) {
                        *zv = bj + wj * xv;
                        *hv = if *zv > 0.0 { *zv } else { slope * *zv };
                    }
                    continue;
                }
                zj.fill(b[j]);
                for k in 0..din {
                    axpy(zj, w[k * dout + j], &input[k * n..(k + 1) * n]);
                }
                if l < last {
                    for (h, &zv) in after[0][j * n..(j + 1) * n].iter_mut().zip(zj.iter()) {
                        *h = if zv > 0.0 { zv } else { slope * zv };
                    }
                }
            }
        }
        out.copy_from_slice(&self.pre[last][..n]);
    }

    /// ∇ of Σ_p δ_p·f(x_p) with respect to θ into `grad`, for δ at the output (`[n]`) and the
    /// activations of the last [`Net::forward`] at the same inputs `xt`.
    #[inline(always)]
    fn backward(&mut self, theta: &[f32], xt: &[f32], delta_out: &[f32], grad: &mut [f32]) {
        let n = delta_out.len();
        let mut cur = 0usize;
        self.delta[cur][..n].copy_from_slice(delta_out);
        for l in (0..self.layers.len()).rev() {
            let (din, dout) = self.layers[l];
            let w = &theta[self.w_at[l]..self.w_at[l] + din * dout];
            let [d0, d1] = &mut self.delta;
            let (dl, dprev) = if cur == 0 { (&*d0, d1) } else { (&*d1, d0) };
            let input: &[f32] = if l == 0 { xt } else { &self.acts[l] };
            let gw = &mut grad[self.w_at[l]..self.w_at[l] + din * dout];
            for k in 0..din {
                let a = &input[k * n..(k + 1) * n];
                for j in 0..dout {
                    gw[k * dout + j] = dot(a, &dl[j * n..(j + 1) * n]);
                }
            }
            let gb = &mut grad[self.b_at[l]..self.b_at[l] + dout];
            for (j, g) in gb.iter_mut().enumerate() {
                *g = sum(&dl[j * n..(j + 1) * n]);
            }
            if l > 0 {
                // δ at the previous layer's output, times φ'(z) of its pre-activation.
                let z = &self.pre[l - 1];
                let slope = self.slope;
                for k in 0..din {
                    let dk = &mut dprev[k * n..(k + 1) * n];
                    if dout == 1 {
                        // One output (the last layer): w·δ·φ'(z) in one pass, the same
                        // numbers as the general loop (0 + w·δ, then the mask).
                        let wk = w[k];
                        let (d0, zk) = (&dl[..n], &z[k * n..(k + 1) * n]);
                        for ((d, &dv), &zv) in dk.iter_mut().zip(d0).zip(zk) {
                            *d = wk * dv * if zv > 0.0 { 1.0 } else { slope };
                        }
                        continue;
                    }
                    dk.fill(0.0);
                    for j in 0..dout {
                        axpy(dk, w[k * dout + j], &dl[j * n..(j + 1) * n]);
                    }
                    for (d, &zv) in dk.iter_mut().zip(&z[k * n..(k + 1) * n]) {
                        *d *= if zv > 0.0 { 1.0 } else { slope };
                    }
                }
            }
            cur = 1 - cur;
        }
    }
}

/// One chain's state and what the potential needs.
struct Chain<'a> {
    net: Net,
    /// The training inputs, feature-major `[d, n]`.
    x: &'a [f32],
    /// The test inputs, feature-major `[d, m]`.
    x_test: &'a [f32],
    y: &'a [f32],
    f: Vec<f32>,
    delta: Vec<f32>,
    inv_p2: f64,
    bernoulli: bool,
}

impl Chain<'_> {
    /// U(θ) and the SSE (for labels: the NLL), with ∇U into `grad`, at 1/σ² `inv_s2`.
    fn potential(&mut self, theta: &[f32], inv_s2: f64, grad: &mut [f32]) -> (f64, f64) {
        let mut f = std::mem::take(&mut self.f);
        self.net.forward(theta, self.x, &mut f);
        let mut data = 0.0f64;
        let sse = if self.bernoulli {
            for ((d, &fp), &yp) in self.delta.iter_mut().zip(&f).zip(self.y) {
                // softplus(f) − y·f, and ∂/∂f = σ(f) − y, from one exponential
                // e = exp(−|f|): softplus = max(f, 0) + log(1 + e), σ(f) = 1/(1 + e) for
                // f ≥ 0 and e/(1 + e) below.
                let fp = f64::from(fp);
                let e = (-fp.abs()).exp();
                data += fp.max(0.0) + e.ln_1p() - f64::from(yp) * fp;
                let sigma = if fp >= 0.0 {
                    1.0 / (1.0 + e)
                } else {
                    e / (1.0 + e)
                };
                // A confidently right logit leaves |σ − y| below f32's normal range; kept, it
                // would make every product of the backward pass subnormal (tens of times
                // slower on x86). It contributes nothing representable: flushed to 0.
                let v = (sigma - f64::from(yp)) as f32;
                *d = if v.abs() < f32::MIN_POSITIVE { 0.0 } else { v };
            }
            data
        } else {
            // Residuals r = f − y, SSE = Σ r² (f32, eight partial sums), δ = r/σ².
            for ((d, &fp), &yp) in self.delta.iter_mut().zip(&f).zip(self.y) {
                *d = fp - yp;
            }
            let sse = f64::from(dot(&self.delta, &self.delta));
            let inv = inv_s2 as f32;
            for d in self.delta.iter_mut() {
                *d *= inv;
            }
            data = 0.5 * sse * inv_s2;
            sse
        };
        self.f = f;
        let delta = std::mem::take(&mut self.delta);
        self.net.backward(theta, self.x, &delta, grad);
        self.delta = delta;
        let mut prior = 0.0f64;
        for (g, &t) in grad.iter_mut().zip(theta) {
            prior += f64::from(t) * f64::from(t);
            *g += (f64::from(t) * self.inv_p2) as f32;
        }
        (data + 0.5 * self.inv_p2 * prior, sse)
    }
}

impl HmcTrainer<'_> {
    /// [`crate::engine::ChunkTrainer::train_chunk`] on the host, chain by chain.
    pub(super) fn train_chunk_host(&self, range: Range<usize>) -> Result<ChunkOut, MethodError> {
        let c = self.config;
        let rc = range.len();
        let (n, m) = (
            self.x_train.len() / self.shape.d_in,
            self.x_test.len() / self.shape.d_in,
        );
        let host = xavier_init(&self.shape, &self.init[range.clone()]);
        let layers = self.shape.layers();
        let d = self.shape.d_in;
        let feature_major = |x: &[f32], points: usize| -> Vec<f32> {
            (0..d * points)
                .map(|i| x[(i % points) * d + i / points])
                .collect()
        };
        let (xt_train, xt_test) = (
            feature_major(&self.x_train, n),
            feature_major(&self.x_test, m),
        );
        let mut pred = vec![0.0f32; rc * c.draws * m];
        let mut train = vec![0.0f32; rc * n];
        let mut objective = vec![0.0f64; rc];
        let mut records = Vec::with_capacity(rc);
        for r in 0..rc {
            // θ₀ from the replica's Xavier draws, in the flat layout.
            let mut theta: Vec<f32> = Vec::new();
            for (l, &(i, o)) in layers.iter().enumerate() {
                theta.extend_from_slice(&host.layers[l].0[r * i * o..(r + 1) * i * o]);
            }
            for (l, &(_, o)) in layers.iter().enumerate() {
                theta.extend_from_slice(&host.layers[l].1[r * o..(r + 1) * o]);
            }
            let rep = range.start + r;
            let y = &self.y[rep * n..(rep + 1) * n];
            let mut chain = Chain {
                net: Net::new(layers.clone(), self.shape.negative_slope, n.max(m)),
                x: &xt_train,
                x_test: &xt_test,
                y,
                f: vec![0.0; n],
                delta: vec![0.0; n],
                inv_p2: 1.0 / (c.prior_sd * c.prior_sd),
                bernoulli: self.bernoulli,
            };
            let mut stream = Rng::new(self.stream[rep]);
            let (record, u, draws_f, train_mean) =
                self.run_chain(&mut chain, &mut theta, y, &mut stream);
            pred[r * c.draws * m..(r + 1) * c.draws * m].copy_from_slice(&draws_f);
            train[r * n..(r + 1) * n].copy_from_slice(&train_mean);
            objective[r] = u / n as f64;
            records.push(record);
        }
        {
            let mut all = self.records.lock().expect("no panics while holding it");
            for (r, record) in records.into_iter().enumerate() {
                all[range.start + r] = record;
            }
        }
        Ok(ChunkOut {
            weights: Vec::new(),
            swa: Vec::new(),
            resamples: Vec::new(),
            pred,
            train_pred: train,
            objective,
            rates: Vec::new(),
            steps: ((c.warmup + c.draws) * c.leapfrog_steps) as u64,
            uploads: 0,
            reads: 0,
        })
    }

    /// Every iteration of one chain: its record, its final potential, its draws of f at the
    /// test inputs `[draws, M]` and its mean f at the training inputs.
    fn run_chain(
        &self,
        chain: &mut Chain<'_>,
        theta: &mut [f32],
        y: &[f32],
        stream: &mut Rng,
    ) -> (ChainRecord, f64, Vec<f32>, Vec<f32>) {
        let c = self.config;
        let (n, m) = (y.len(), self.x_test.len() / self.shape.d_in);
        let dim = chain.net.dim;
        // σ² fixed, or starting at the targets' variance and then Gibbs-sampled.
        let mut s2 = match self.noise {
            Some(s) => s * s,
            None => {
                let mean = y.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
                (y.iter()
                    .map(|&v| (f64::from(v) - mean).powi(2))
                    .sum::<f64>()
                    / n as f64)
                    .max(1e-6)
            }
        };
        let inv = |s2: f64| f64::from((1.0 / s2) as f32);
        let mut grad = vec![0.0f32; dim];
        let (mut u, mut sse) = chain.potential(theta, inv(s2), &mut grad);
        let (mut q, mut p, mut g1) = (vec![0.0f32; dim], vec![0.0f32; dim], vec![0.0f32; dim]);
        let mut adapt = DualAveraging::new(c.step_size, 1);
        let mut record = ChainRecord {
            energy: Vec::with_capacity(c.draws),
            sigma: Vec::with_capacity(c.draws),
            ..ChainRecord::default()
        };
        let mut accepted = 0u64;
        let mut draws = vec![0.0f32; c.draws * m];
        let mut train_sum = vec![0.0f64; n];
        let mut f_test = vec![0.0f32; m];
        let mut f_train = vec![0.0f32; n];
        for it in 0..c.warmup + c.draws {
            let sampling = it >= c.warmup;
            let eps = adapt.eps[0];
            let step = (if c.jitter {
                eps * (0.5 + stream.uniform())
            } else {
                eps
            }) as f32;
            let half = 0.5 * step;
            let mut k0 = 0.0f64;
            for pi in p.iter_mut() {
                *pi = stream.normal() as f32;
                k0 += f64::from(*pi) * f64::from(*pi);
            }
            k0 *= 0.5;
            q.copy_from_slice(theta);
            for (pi, &gi) in p.iter_mut().zip(&grad) {
                *pi -= gi * half;
            }
            let (mut u1, mut sse1) = (u, sse);
            g1.copy_from_slice(&grad);
            for l in 0..c.leapfrog_steps {
                for (qi, &pi) in q.iter_mut().zip(&p) {
                    *qi += pi * step;
                }
                (u1, sse1) = chain.potential(&q, inv(s2), &mut g1);
                let scale = if l + 1 < c.leapfrog_steps { step } else { half };
                for (pi, &gi) in p.iter_mut().zip(&g1) {
                    *pi -= gi * scale;
                }
            }
            let k1 = 0.5 * p.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>();
            let h0 = u + k0;
            let dh = h0 - (u1 + k1);
            let alpha = if dh.is_finite() {
                dh.min(0.0).exp()
            } else {
                0.0
            };
            if sampling {
                record.energy.push(h0);
                if mcmc::is_divergent(-dh) {
                    record.divergent += 1;
                }
            }
            if stream.uniform() < alpha {
                if sampling {
                    accepted += 1;
                }
                theta.copy_from_slice(&q);
                grad.copy_from_slice(&g1);
                (u, sse) = (u1, sse1);
            }
            if !sampling {
                adapt.update(it, &[alpha], c.target_accept, c.warmup);
            }
            if self.noise.is_none() {
                let shape = PRIOR_A0 + n as f64 / 2.0;
                let rate = PRIOR_B0 + sse / 2.0;
                s2 = rate / gamma_draw(stream, shape);
                (u, sse) = chain.potential(theta, inv(s2), &mut grad);
            }
            if sampling {
                let s = it - c.warmup;
                chain.net.forward(theta, chain.x_test, &mut f_test);
                draws[s * m..(s + 1) * m].copy_from_slice(&f_test);
                record.sigma.push(s2.sqrt());
                chain.net.forward(theta, chain.x, &mut f_train);
                for (acc, &v) in train_sum.iter_mut().zip(&f_train) {
                    *acc += f64::from(v);
                }
            }
        }
        record.accept_rate = accepted as f64 / c.draws as f64;
        record.step_size = adapt.eps[0];
        let train_mean = train_sum
            .iter()
            .map(|v| (v / c.draws as f64) as f32)
            .collect();
        // A state that became non-finite shows in its potential: the chain diverged.
        (record, u, draws, train_mean)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use burn::tensor::{Device, Tensor, TensorData};

    use super::super::chain::Params;
    use super::super::{HmcConfig, HmcSettings};
    use super::*;
    use crate::mlp::MlpShape;

    #[test]
    fn the_host_potential_is_the_tensor_potential() {
        // A 2-5-3-1 network (two hidden layers, so the backward recurrence runs through a
        // hidden layer), 7 points, both likelihoods: U, the SSE (NLL) and every gradient entry
        // of the fused host loops against the tensor version (`chain.rs`, itself tested
        // against autodiff through `linear_backward`) at f32 rounding, 1e-4 relative.
        let shape = MlpShape {
            d_in: 2,
            hidden: vec![5, 3],
            d_out: 1,
            negative_slope: 0.01,
        };
        let mut rng = Rng::new(9);
        let (n, d) = (7, 2);
        let x: Vec<f32> = (0..n * d)
            .map(|_| rng.uniform_in(-2.0, 2.0) as f32)
            .collect();
        let host_w = xavier_init(&shape, &[5]);
        let layers = shape.layers();
        let dev = Device::flex();
        let t3 = |v: Vec<f32>, s: [usize; 3]| Tensor::<3>::from_data(TensorData::new(v, s), &dev);
        let params = Params {
            w: (host_w.layers.iter().zip(&layers))
                .map(|((w, _), &(i, o))| t3(w.clone(), [1, i, o]))
                .collect(),
            b: (layers.iter())
                .map(|&(_, o)| t3((0..o).map(|k| 0.1 * k as f32 - 0.2).collect(), [1, 1, o]))
                .collect(),
        };
        let mut theta: Vec<f32> = host_w.layers.iter().flat_map(|(w, _)| w.clone()).collect();
        for &(_, o) in &layers {
            theta.extend((0..o).map(|k| 0.1 * k as f32 - 0.2));
        }
        for bernoulli in [false, true] {
            let y: Vec<f32> = (0..n)
                .map(|i| {
                    if bernoulli {
                        (i % 2) as f32
                    } else {
                        rng.normal() as f32
                    }
                })
                .collect();
            let config = HmcConfig {
                own: HmcSettings {
                    prior_sd: 1.5,
                    ..HmcSettings::default()
                },
                ..HmcConfig::default()
            };
            let trainer = HmcTrainer {
                config: &config,
                shape: shape.clone(),
                x_train: x.clone(),
                x_test: x.clone(),
                y: y.clone(),
                init: &[5],
                stream: &[6],
                noise: None,
                device: dev.clone(),
                records: Mutex::new(Vec::new()),
                bernoulli,
                host: false,
            };
            let inv_s2 = 1.0f64 / 0.49;
            let (u, sse, grad) = trainer.potential(
                &params,
                &t3(x.clone(), [1, n, d]),
                &t3(y.clone(), [1, n, 1]),
                &t3(vec![inv_s2 as f32], [1, 1, 1]),
            );
            let read = |t: Tensor<3>| t.into_data().try_into_vec_as::<f32>().unwrap();
            let mut want: Vec<f32> = grad.w.into_iter().flat_map(read).collect();
            want.extend(grad.b.into_iter().flat_map(read));
            let xt: Vec<f32> = (0..d * n).map(|i| x[(i % n) * d + i / n]).collect();
            let mut chain = Chain {
                net: Net::new(layers.clone(), 0.01, n),
                x: &xt,
                x_test: &xt,
                y: &y,
                f: vec![0.0; n],
                delta: vec![0.0; n],
                inv_p2: 1.0 / (1.5 * 1.5),
                bernoulli,
            };
            let mut got = vec![0.0f32; chain.net.dim];
            let (hu, hsse) = chain.potential(&theta, f64::from(inv_s2 as f32), &mut got);
            let close = |a: f64, b: f64, what: &str| {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{bernoulli} {what}: {a} vs {b}"
                );
            };
            close(hu, f64::from(read(u)[0]), "U");
            close(hsse, f64::from(read(sse)[0]), "SSE");
            assert_eq!(got.len(), want.len());
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                close(f64::from(*a), f64::from(*b), &format!("∂U/∂θ[{i}]"));
            }
        }
    }
}
