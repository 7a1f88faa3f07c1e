//! MFVI's training on the CPU: the objective, the ε from each replica's stream in the same
//! order, and the Adam of the tensor route (`mod.rs`), with the local reparameterisation's
//! forward and backward passes written out as fused loops over one replica's points instead
//! of burn autodiff over tensors of a chunk of replicas. A replica's parameters and
//! activations (a few kB for [002]'s 1-W-1 networks) stay in cache through all its epochs,
//! nothing is allocated per step, and the loops run through [`simd::dispatch`].
//!
//! Per layer, for an input a (feature-major `[in, n]`), with σ² = e^{2ρ}:
//!   m_j = μ_b,j + Σ_k μ_W,kj·a_k,   v_j = σ²_b,j + Σ_k σ²_W,kj·a_k²,
//!   s_j = √v_j,   z_j = m_j + s_j·ε_j,   h_j = φ(z_j) (hidden layers),
//! and backward from δ_j = ∂L/∂z_j, with δv_j = δ_j·ε_j/(2·s_j):
//!   ∂L/∂μ_W,kj = Σ_p a_k·δ_j,   ∂L/∂ρ_W,kj = 2σ²_W,kj·Σ_p a_k²·δv_j,
//!   ∂L/∂μ_b,j = Σ_p δ_j,         ∂L/∂ρ_b,j = 2σ²_b,j·Σ_p δv_j,
//!   ∂L/∂a_k = Σ_j μ_W,kj·δ_j + 2a_k·Σ_j σ²_W,kj·δv_j.
//! The KL's gradient (divided by N, like the KL) is μ/σ_p² for a mean and σ²/σ_p² − 1 for
//! a log sd. The data term's δ at the output, per point: (f − y)·e^{−2s}/N for the Gaussian
//! likelihood (and ∂L/∂s = 1 − mean (f − y)²·e^{−2s} for a learned s), (σ(f) − y)/N for
//! labels.
//!
//! Arithmetic is f32 like the device's; the objective and the KL are summed in f64. The
//! floating-point order differs from autodiff's, so the replicas follow other trajectories
//! from the same seeds: the results are equal in distribution, not bit for bit (compared in
//! docs/performance.md; the gradient is checked against autodiff's in `mod.rs`'s tests).

use std::ops::Range;

use uqbench_anchor::Rng;

use super::net::{Layout, MfviNet};
use super::MfviTrainer;
use uqbench_core::MethodError;
use uqbench_engine::cpu::feature_major::feature_major;
use uqbench_engine::cpu::kernels::{adam_slice, AdamStep};
use uqbench_engine::cpu::simd;
use uqbench_engine::mlp::xavier_init;
use uqbench_engine::trainer::ChunkOut;

/// What the objective needs besides the network: one replica's data and the prior.
pub(crate) struct Objective<'a> {
    pub y: &'a [f32],
    pub inv_p2: f64,
    pub ln_prior_sd: f64,
    /// ln σ_n when fixed (unused when s is learned or for labels).
    pub fixed_log_noise: f64,
    pub bernoulli: bool,
}

impl Objective<'_> {
    /// The data term of the per-point negative ELBO at the output `f` (`mod.rs`'s objective,
    /// without the KL) and ∂L/∂s (0 for labels), with the gradient with respect to f into
    /// `delta`.
    #[inline(always)]
    fn data(&self, theta: &[f32], at: &Layout, f: &[f32], delta: &mut [f32]) -> (f64, f32) {
        let n = f.len();
        let inv_n = 1.0 / n as f64;
        if self.bernoulli {
            let mut nll = 0.0f64;
            for ((d, &fp), &yp) in delta.iter_mut().zip(f).zip(self.y) {
                let fp64 = f64::from(fp);
                let e = (-fp64.abs()).exp();
                nll += fp64.max(0.0) + e.ln_1p() - f64::from(yp) * fp64;
                let sigma = if fp64 >= 0.0 {
                    1.0 / (1.0 + e)
                } else {
                    e / (1.0 + e)
                };
                *d = ((sigma - f64::from(yp)) * inv_n) as f32;
            }
            return (nll * inv_n, 0.0);
        }
        let s = at.s.map_or(self.fixed_log_noise as f32, |i| theta[i]);
        let prec = (-2.0 * s).exp();
        for ((d, &fp), &yp) in delta.iter_mut().zip(f).zip(self.y) {
            *d = fp - yp;
        }
        let mse = f64::from(simd::dot(delta, delta)) * inv_n;
        let scale = prec * inv_n as f32;
        for d in delta.iter_mut() {
            *d *= scale;
        }
        let grad_s = 1.0 - (mse as f32) * prec;
        (0.5 * mse * f64::from(prec) + f64::from(s), grad_s)
    }

    /// KL(q ‖ p)/N, adding its gradient into `grad` when given.
    #[inline(always)]
    fn kl(&self, theta: &[f32], at: &Layout, n: usize, grad: Option<&mut [f32]>) -> f64 {
        let inv_n = 1.0 / n as f64;
        let mut kl = 0.0f64;
        let mut grad = grad;
        for la in &at.layers {
            for (mu, rho, len) in [
                (la.mu_w, la.rho_w, la.d_in * la.d_out),
                (la.mu_b, la.rho_b, la.d_out),
            ] {
                for i in 0..len {
                    let (m, r) = (f64::from(theta[mu + i]), f64::from(theta[rho + i]));
                    let var = (2.0 * r).exp();
                    kl += self.ln_prior_sd - r + (var + m * m) * 0.5 * self.inv_p2 - 0.5;
                    if let Some(g) = grad.as_deref_mut() {
                        g[mu + i] += (m * self.inv_p2 * inv_n) as f32;
                        g[rho + i] += ((var * self.inv_p2 - 1.0) * inv_n) as f32;
                    }
                }
            }
        }
        kl * inv_n
    }
}

impl MfviTrainer<'_> {
    /// [`uqbench_engine::trainer::ChunkTrainer::train_chunk`] on the host, replica by replica.
    pub(crate) fn train_chunk_host(
        &self,
        range: Range<usize>,
        level: simd::Level,
    ) -> Result<ChunkOut, MethodError> {
        let c = self.config;
        let rc = range.len();
        let d = self.shape.d_in;
        let (n, m) = (self.x_train.len() / d, self.x_test.len() / d);
        let (xt, xt_test) = (
            feature_major(&self.x_train, d),
            feature_major(&self.x_test, d),
        );
        let host = xavier_init(&self.shape, &self.init[range.clone()]);
        let at = Layout::new(&self.shape.layers(), self.noise.is_none());
        let t = c.samples;
        let mut out = ChunkOut {
            collected: Vec::new(),
            pred: vec![0.0; rc * t * m],
            train_pred: vec![0.0; rc * n],
            objective: vec![0.0; rc],
            rates: vec![0.0; rc],
            steps: self.epochs as u64,
            uploads: 0,
            reads: 0,
        };
        for r in 0..rc {
            let rep = range.start + r;
            // μ from the replica's Xavier draws, ρ at ln(init_sd), s at ln σ_n's start.
            let mut theta = vec![0.0f32; at.dim];
            for (l, la) in at.layers.iter().enumerate() {
                let (i, o) = (la.d_in, la.d_out);
                theta[la.mu_w..la.mu_w + i * o]
                    .copy_from_slice(&host.layers[l].0[r * i * o..(r + 1) * i * o]);
                theta[la.mu_b..la.mu_b + o].copy_from_slice(&host.layers[l].1[r * o..(r + 1) * o]);
                theta[la.rho_w..la.rho_w + i * o].fill(c.init_sd.ln() as f32);
                theta[la.rho_b..la.rho_b + o].fill(c.init_sd.ln() as f32);
            }
            if let Some(s) = at.s {
                theta[s] = self.noise_init[rep].ln() as f32;
            }
            let objective = Objective {
                y: &self.y[rep * n..(rep + 1) * n],
                inv_p2: 1.0 / (c.prior_sd * c.prior_sd),
                ln_prior_sd: c.prior_sd.ln(),
                fixed_log_noise: self.noise.unwrap_or(1.0).ln(),
                bernoulli: self.bernoulli,
            };
            let mut net = MfviNet::new(at.clone(), self.shape.negative_slope, n.max(m));
            let mut stream = Rng::new(self.stream[rep]);
            let pred = &mut out.pred[r * t * m..(r + 1) * t * m];
            let train = &mut out.train_pred[r * n..(r + 1) * n];
            out.objective[r] = simd::dispatch_at(
                level,
                RunMfviReplica {
                    trainer: self,
                    net: &mut net,
                    objective: &objective,
                    theta: &mut theta,
                    stream: &mut stream,
                    x: (&xt, &xt_test),
                    pred,
                    train,
                },
            );
            let s =
                at.s.map_or(self.noise.unwrap_or(1.0).ln(), |i| f64::from(theta[i]));
            out.rates[r] = f64::from(s.exp() as f32);
        }
        Ok(out)
    }

    /// The epochs of one replica: a sampled pass, the gradient, an Adam step.
    #[inline(always)]
    fn train_replica(
        &self,
        net: &mut MfviNet,
        objective: &Objective<'_>,
        theta: &mut [f32],
        stream: &mut Rng,
        xt: &[f32],
    ) {
        let c = self.config;
        let n = objective.y.len();
        let dim = theta.len();
        let (mut mom, mut vel, mut grad) = (vec![0.0f32; dim], vec![0.0f32; dim], vec![0.0; dim]);
        let (mut f, mut delta) = (vec![0.0f32; n], vec![0.0f32; n]);
        for t in 1..=self.epochs as u64 {
            net.draw(stream, n);
            net.forward(theta, xt, &mut f, true);
            let (_, grad_s) = objective.data(theta, &net.at, &f, &mut delta);
            net.backward(theta, xt, &delta, &mut grad);
            if let Some(s) = net.at.s {
                grad[s] = grad_s;
            }
            objective.kl(theta, &net.at, n, Some(&mut grad));
            let step = AdamStep::new(
                c.optim.lr,
                c.optim.beta1,
                c.optim.beta2,
                c.optim.eps,
                t,
                0.0,
            );
            adam_slice(theta, &mut mom, &mut vel, &grad, &step);
        }
    }
}

/// One replica's training and [`finish`] as an operation for [`simd::dispatch`] (a struct,
/// not a closure: a closure's body would be compiled in a call shim outside the AVX2 copy).
struct RunMfviReplica<'a, 'b> {
    trainer: &'a MfviTrainer<'b>,
    net: &'a mut MfviNet,
    objective: &'a Objective<'a>,
    theta: &'a mut [f32],
    stream: &'a mut Rng,
    x: (&'a [f32], &'a [f32]),
    pred: &'a mut [f32],
    train: &'a mut [f32],
}

impl simd::Op for RunMfviReplica<'_, '_> {
    type Output = f64;

    #[inline(always)]
    fn call(self, lanes: simd::Lanes) -> f64 {
        let (net, objective, stream) = (self.net, self.objective, self.stream);
        net.lanes = lanes;
        (self.trainer).train_replica(net, objective, self.theta, stream, self.x.0);
        finish(
            net, objective, self.theta, stream, self.x, self.pred, self.train,
        )
    }
}

/// After training, in the tensor route's order of draws: the objective at the final
/// parameters (one sampled pass, the quantity optimised; returned), T sampled passes at the
/// test inputs into `pred` `[T, M]`, and the mean-weights fit at the training inputs into
/// `train`.
#[inline(always)]
fn finish(
    net: &mut MfviNet,
    objective: &Objective<'_>,
    theta: &[f32],
    stream: &mut Rng,
    (xt, xt_test): (&[f32], &[f32]),
    pred: &mut [f32],
    train: &mut [f32],
) -> f64 {
    let n = train.len();
    let (mut f, mut delta) = (vec![0.0f32; n], vec![0.0f32; n]);
    net.draw(stream, n);
    net.forward(theta, xt, &mut f, true);
    let (data, _) = objective.data(theta, &net.at, &f, &mut delta);
    let value = data + objective.kl(theta, &net.at, n, None);
    let m = xt_test.len() / (xt.len() / n);
    for pass in pred.chunks_exact_mut(m) {
        net.draw(stream, m);
        net.forward(theta, xt_test, pass, true);
    }
    net.forward(theta, xt, train, false);
    value
}

#[cfg(test)]
mod tests {
    use burn::module::Param;
    use burn::tensor::{Device, Tensor, TensorData};

    use super::*;
    use crate::mfvi::{BayesLinear, BayesNet, MfviConfig, MfviSettings};
    use uqbench_engine::cpu::kernels::KernelPath;
    use uqbench_engine::layers::LeakyRelu;
    use uqbench_engine::mlp::MlpShape;

    #[test]
    fn the_host_gradient_is_autodiffs() {
        // A 2-6-4-1 network (a hidden layer between two others, so ∂L/∂a runs through one)
        // on 13 points, for a learned and a fixed noise sd and for labels: the objective and
        // every entry of its gradient from the hand-written loops against burn's autodiff of
        // the tensor route's objective (`MfviTrainer::objective`) with the same ε, to f32
        // rounding (1e-4 relative; the terms are sums of a few dozen products).
        let shape = MlpShape {
            d_in: 2,
            hidden: vec![6, 4],
            d_out: 1,
            negative_slope: 0.01,
        };
        let (n, d) = (13, 2);
        let mut rng = Rng::new(21);
        let x: Vec<f32> = (0..n * d)
            .map(|_| rng.uniform_in(-2.0, 2.0) as f32)
            .collect();
        let xt: Vec<f32> = (0..d * n).map(|i| x[(i % n) * d + i / n]).collect();
        let dev = Device::flex().autodiff();
        for (bernoulli, learned) in [(false, true), (false, false), (true, false)] {
            let y: Vec<f32> = (0..n)
                .map(|i| {
                    if bernoulli {
                        (i % 2) as f32
                    } else {
                        3.0 * rng.normal() as f32
                    }
                })
                .collect();
            let at = Layout::new(&shape.layers(), learned);
            let theta: Vec<f32> = (0..at.dim)
                .map(|i| {
                    let is_rho = at.layers.iter().any(|l| {
                        (l.rho_w..l.mu_b).contains(&i) || (l.rho_b..l.rho_b + l.d_out).contains(&i)
                    });
                    (if is_rho {
                        -1.5 + 0.3 * rng.normal()
                    } else {
                        0.7 * rng.normal()
                    }) as f32
                })
                .collect();
            let mut net = MfviNet::new(at.clone(), 0.01, n);
            net.draw(&mut rng, n);
            let objective = Objective {
                y: &y,
                inv_p2: 1.0 / (2.5 * 2.5),
                ln_prior_sd: 2.5f64.ln(),
                fixed_log_noise: 0.8f64.ln(),
                bernoulli,
            };
            let (mut f, mut delta, mut grad) = (vec![0.0; n], vec![0.0; n], vec![0.0; at.dim]);
            net.forward(&theta, &xt, &mut f, true);
            let (data, grad_s) = objective.data(&theta, &at, &f, &mut delta);
            net.backward(&theta, &xt, &delta, &mut grad);
            if let Some(s) = at.s {
                grad[s] = grad_s;
            }
            let value = data + objective.kl(&theta, &at, n, Some(&mut grad));

            // The same parameters and ε through the tensor route's objective and autodiff.
            let t3 = |v: Vec<f32>, s: [usize; 3]| {
                Param::from_tensor(Tensor::<3>::from_data(TensorData::new(v, s), &dev))
            };
            let part = |a: usize, len: usize| theta[a..a + len].to_vec();
            let model = BayesNet {
                layers: (at.layers.iter())
                    .map(|l| BayesLinear {
                        w_mu: t3(part(l.mu_w, l.d_in * l.d_out), [1, l.d_in, l.d_out]),
                        w_rho: t3(part(l.rho_w, l.d_in * l.d_out), [1, l.d_in, l.d_out]),
                        b_mu: t3(part(l.mu_b, l.d_out), [1, 1, l.d_out]),
                        b_rho: t3(part(l.rho_b, l.d_out), [1, 1, l.d_out]),
                    })
                    .collect(),
                activation: LeakyRelu { slope: 0.01 },
                log_noise: at.s.map(|s| t3(vec![theta[s]], [1, 1, 1])),
            };
            let eps: Vec<Tensor<3>> = (at.layers.iter().zip(&net.eps))
                .map(|(l, e)| {
                    let o = l.d_out;
                    let v: Vec<f32> = (0..n * o).map(|i| e[(i % o) * n + i / o]).collect();
                    Tensor::from_data(TensorData::new(v, [1, n, o]), &dev)
                })
                .collect();
            let config = MfviConfig {
                own: MfviSettings {
                    prior_sd: 2.5,
                    ..MfviSettings::default()
                },
                ..MfviConfig::default()
            };
            let trainer = MfviTrainer {
                config: &config,
                host: Some(uqbench_engine::cpu::simd::best()),
                shape: shape.clone(),
                x_train: x.clone(),
                x_test: x.clone(),
                y: y.clone(),
                init: &[1],
                stream: &[2],
                epochs: 1,
                noise: (!learned).then_some(0.8),
                noise_init: &[0.8],
                device: dev.clone(),
                path: KernelPath::Tensor,
                bernoulli,
            };
            let xs = Tensor::<3>::from_data(TensorData::new(x.clone(), [1, n, d]), &dev);
            let ys = Tensor::<3>::from_data(TensorData::new(y.clone(), [1, n, 1]), &dev);
            let out = model.forward(xs, Some(&eps));
            let loss = trainer.objective(&model, out, ys, &dev).sum();
            let host = |t: Tensor<3>| t.into_data().try_into_vec_as::<f32>().unwrap();
            let want_value = f64::from(
                (loss
                    .clone()
                    .inner()
                    .into_data()
                    .try_into_vec_as::<f32>()
                    .unwrap())[0],
            );
            let grads = loss.backward();
            let g = |p: &Param<Tensor<3>>| host(p.val().grad(&grads).expect("a gradient"));
            let mut want = vec![0.0f32; at.dim];
            for (l, layer) in at.layers.iter().zip(&model.layers) {
                let (i, o) = (l.d_in, l.d_out);
                want[l.mu_w..l.mu_w + i * o].copy_from_slice(&g(&layer.w_mu));
                want[l.rho_w..l.rho_w + i * o].copy_from_slice(&g(&layer.w_rho));
                want[l.mu_b..l.mu_b + o].copy_from_slice(&g(&layer.b_mu));
                want[l.rho_b..l.rho_b + o].copy_from_slice(&g(&layer.b_rho));
            }
            if let (Some(s), Some(p)) = (at.s, &model.log_noise) {
                want[s] = g(p)[0];
            }
            let close = |a: f64, b: f64, what: &str| {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "bernoulli {bernoulli}, learned {learned}, {what}: {a} vs {b}"
                );
            };
            close(value, want_value, "objective");
            for (i, (a, b)) in grad.iter().zip(&want).enumerate() {
                close(f64::from(*a), f64::from(*b), &format!("∂L/∂θ[{i}]"));
            }
        }
    }
}
