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
//! (compared in docs/performance.md). A chain runs through [`simd::dispatch`]: compiled for
//! AVX2 where the CPU has it, with the same bits as the baseline build.

use std::ops::Range;

use uqbench_anchor::Rng;
use uqbench_metrics::mcmc;

use crate::hmc::chain::{ChainRecord, HmcTrainer};
use crate::hmc::collapsed::Collapsed;
use crate::hmc::nuts::{self, kinetic};
use uqbench_core::MethodError;
use uqbench_engine::cpu::feature_major::{feature_major, FeatureMajorNet};
use uqbench_engine::cpu::simd;
use uqbench_engine::mlp::xavier_init;
use uqbench_engine::trainer::ChunkOut;

/// One chain's state and what the potential needs.
pub(super) struct Chain<'a> {
    pub(super) net: FeatureMajorNet,
    /// The training inputs, feature-major `[d, n]`.
    pub(super) x: &'a [f32],
    /// The test inputs, feature-major `[d, m]`.
    pub(super) x_test: &'a [f32],
    pub(super) y: &'a [f32],
    f: Vec<f32>,
    delta: Vec<f32>,
    inv_p2: f64,
    bernoulli: bool,
    /// The instruction set the chain runs at (NUTS's potential is dispatched per call: its
    /// recursive tree is not inlined into the chain's dispatched copy).
    level: simd::Level,
    /// The potential of the hidden layer with the output layer integrated out, when
    /// `marginalise_output` is set: the move's state is then the hidden layer alone.
    pub(super) collapsed: Option<Collapsed>,
}

impl<'a> Chain<'a> {
    /// The scratch of a chain of `trainer`'s network on the feature-major inputs `x`, `x_test`
    /// with targets `y`, at instruction set `level` (with the collapsed potential's when the
    /// output layer is integrated out).
    pub(super) fn new(
        trainer: &HmcTrainer<'_>,
        x: &'a [f32],
        x_test: &'a [f32],
        y: &'a [f32],
        level: simd::Level,
    ) -> Chain<'a> {
        let c = trainer.config;
        let layers = trainer.shape.layers();
        let d = trainer.shape.d_in;
        let (n, m) = (y.len(), x_test.len() / d);
        let slope = trainer.shape.negative_slope;
        Chain {
            net: FeatureMajorNet::new(layers.clone(), slope, n.max(m)),
            x,
            x_test,
            y,
            f: vec![0.0; n],
            delta: vec![0.0; n],
            inv_p2: 1.0 / (c.prior_sd * c.prior_sd),
            bernoulli: trainer.bernoulli,
            level,
            collapsed: c
                .marginalise_output
                .then(|| Collapsed::new(d, layers[0].1, x, y, slope, c.prior_sd, level)),
        }
    }
}

impl Chain<'_> {
    /// U(θ) and the SSE (for labels: the NLL), with ∇U into `grad`, at 1/σ² `inv_s2`.
    #[inline(always)]
    pub(super) fn potential(&mut self, theta: &[f32], inv_s2: f64, grad: &mut [f32]) -> (f64, f64) {
        if let Some(col) = self.collapsed.as_mut() {
            // The SSE is the whole network's, set by the output layer's draw.
            return (col.potential(theta, inv_s2, grad), 0.0);
        }
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
            let sse = f64::from(self.net.lanes.dot(&self.delta, &self.delta));
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

/// One evaluation of the potential as an operation for [`simd::dispatch`] (NUTS's calls).
struct PotentialAt<'a, 'b> {
    chain: &'a mut Chain<'b>,
    q: &'a [f32],
    inv_s2: f64,
    g: &'a mut [f32],
}

impl simd::Op for PotentialAt<'_, '_> {
    type Output = (f64, f64);

    #[inline(always)]
    fn call(self, lanes: simd::Lanes) -> Self::Output {
        self.chain.net.lanes = lanes;
        self.chain.potential(self.q, self.inv_s2, self.g)
    }
}

/// One chain's run as an operation for [`simd::dispatch`] (a struct, not a closure: a
/// closure's body would be compiled in a call shim outside the AVX2 copy).
struct RunChain<'a, 'b, 'c> {
    trainer: &'a HmcTrainer<'b>,
    chain: &'a mut Chain<'c>,
    theta: &'a mut [f32],
    y: &'a [f32],
    stream: &'a mut Rng,
}

impl simd::Op for RunChain<'_, '_, '_> {
    type Output = (ChainRecord, f64, Vec<f32>, Vec<f32>);

    #[inline(always)]
    fn call(self, lanes: simd::Lanes) -> Self::Output {
        self.chain.net.lanes = lanes;
        (self.trainer).run_chain(self.chain, self.theta, self.y, self.stream)
    }
}

impl HmcTrainer<'_> {
    /// [`uqbench_engine::trainer::ChunkTrainer::train_chunk`] on the host, chain by chain.
    pub(crate) fn train_chunk_host(
        &self,
        range: Range<usize>,
        level: simd::Level,
    ) -> Result<ChunkOut, MethodError> {
        let c = self.config;
        let rc = range.len();
        let (n, m) = (
            self.x_train.len() / self.shape.d_in,
            self.x_test.len() / self.shape.d_in,
        );
        let host = xavier_init(&self.shape, &self.init[range.clone()]);
        let layers = self.shape.layers();
        let d = self.shape.d_in;
        let (xt_train, xt_test) = (
            feature_major(&self.x_train, d),
            feature_major(&self.x_test, d),
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
            let mut chain = Chain::new(self, &xt_train, &xt_test, y, level);
            let mut stream = Rng::new(self.stream[rep]);
            // The whole chain compiled for the CPU's widest vectors (the same bits).
            let (record, u, draws_f, train_mean) = simd::dispatch_at(
                level,
                RunChain {
                    trainer: self,
                    chain: &mut chain,
                    theta: &mut theta,
                    y,
                    stream: &mut stream,
                },
            );
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
            collected: Vec::new(),
            pred,
            train_pred: train,
            objective,
            rates: Vec::new(),
            steps: ((c.warmup + c.draws) * c.leapfrog_steps) as u64,
            uploads: 0,
            reads: 0,
        })
    }
}

/// A chain's working vectors for the HMC move: the proposal's position, momenta and gradient.
pub(super) struct Buffers {
    /// After an HMC move: the proposal (the trajectory's end), accepted or not.
    pub(super) q: Vec<f32>,
    /// After an HMC move: the momenta at the trajectory's end.
    pub(super) p: Vec<f32>,
    g1: Vec<f32>,
}

impl Buffers {
    pub(super) fn new(dim: usize) -> Buffers {
        Buffers {
            q: vec![0.0; dim],
            p: vec![0.0; dim],
            g1: vec![0.0; dim],
        }
    }
}

/// What one move on θ did.
pub(super) struct Move {
    /// The energy H₀ at its start (fresh momenta).
    pub(super) h0: f64,
    /// Its acceptance probability (HMC) or statistic (NUTS), for the step's adaptation.
    pub(super) alpha: f64,
    /// 1 for an accepted HMC proposal, 0 for a rejected one; NUTS's acceptance statistic.
    pub(super) accepted: f64,
    /// Whether its trajectory diverged.
    pub(super) divergent: bool,
    /// Leapfrog steps taken.
    pub(super) leapfrogs: u64,
    /// Whether NUTS's tree reached its largest depth.
    pub(super) saturated: bool,
}

/// One NUTS transition of the chain at `here` = (θ, ∇U, U, SSE), which becomes the selected
/// state; the potential is dispatched at the chain's instruction set per call.
#[allow(clippy::too_many_arguments)]
pub(super) fn nuts_move(
    chain: &mut Chain<'_>,
    here: (&mut [f32], &mut [f32], &mut f64, &mut f64),
    step: f32,
    inv_mass: &[f32],
    inv_s2: f64,
    max_depth: usize,
    stream: &mut Rng,
    bufs: &mut Buffers,
) -> Move {
    let (theta, grad, u, sse) = here;
    let start = nuts::State {
        q: theta.to_vec(),
        p: std::mem::take(&mut bufs.p),
        g: grad.to_vec(),
        u: *u,
        sse: *sse,
    };
    let level = chain.level;
    let mut potential = |q: &[f32], g: &mut [f32]| {
        let op = PotentialAt {
            chain: &mut *chain,
            q,
            inv_s2,
            g,
        };
        simd::dispatch_at(level, op)
    };
    let (out, h0) = nuts::transition(start, &mut potential, inv_mass, step, max_depth, stream);
    let nuts::State {
        q,
        p,
        g,
        u: u1,
        sse: sse1,
    } = out.state;
    theta.copy_from_slice(&q);
    grad.copy_from_slice(&g);
    (*u, *sse) = (u1, sse1);
    bufs.p = p;
    Move {
        h0,
        alpha: out.accept_stat,
        accepted: out.accept_stat,
        divergent: out.divergent,
        leapfrogs: out.leapfrogs,
        saturated: out.depth == max_depth,
    }
}

/// One HMC move of the chain at `here` = (θ, ∇U, U, SSE), updated in place when accepted:
/// momenta ρ ∼ N(0, M), `steps` leapfrog steps of size `step`, a Metropolis accept.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn hmc_move(
    steps: usize,
    chain: &mut Chain<'_>,
    here: (&mut [f32], &mut [f32], &mut f64, &mut f64),
    step: f32,
    inv_mass: &[f32],
    inv_s2: f64,
    stream: &mut Rng,
    bufs: &mut Buffers,
) -> Move {
    let (theta, grad, u, sse) = here;
    let Buffers { q, p, g1 } = bufs;
    let half = 0.5 * step;
    for (pi, &mi) in p.iter_mut().zip(inv_mass) {
        *pi = (stream.normal() / f64::from(mi).sqrt()) as f32;
    }
    let k0 = kinetic(p, inv_mass);
    q.copy_from_slice(theta);
    for (pi, &gi) in p.iter_mut().zip(grad.iter()) {
        *pi -= gi * half;
    }
    let (mut u1, mut sse1) = (*u, *sse);
    g1.copy_from_slice(grad);
    for l in 0..steps {
        for ((qi, &pi), &mi) in q.iter_mut().zip(p.iter()).zip(inv_mass) {
            *qi += pi * mi * step;
        }
        (u1, sse1) = chain.potential(q, inv_s2, g1);
        let scale = if l + 1 < steps { step } else { half };
        for (pi, &gi) in p.iter_mut().zip(g1.iter()) {
            *pi -= gi * scale;
        }
    }
    let k1 = kinetic(p, inv_mass);
    let h0 = *u + k0;
    let dh = h0 - (u1 + k1);
    let alpha = if dh.is_finite() {
        dh.min(0.0).exp()
    } else {
        0.0
    };
    let accept = stream.uniform() < alpha;
    if accept {
        theta.copy_from_slice(q);
        grad.copy_from_slice(g1);
        (*u, *sse) = (u1, sse1);
    }
    Move {
        h0,
        alpha,
        accepted: if accept { 1.0 } else { 0.0 },
        divergent: mcmc::is_divergent(-dh),
        leapfrogs: steps as u64,
        saturated: false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use burn::tensor::{Device, Tensor, TensorData};

    use super::*;
    use crate::hmc::chain::Params;
    use crate::hmc::{HmcConfig, HmcSettings};
    use uqbench_engine::mlp::MlpShape;

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
                host: None,
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
                net: FeatureMajorNet::new(layers.clone(), 0.01, n),
                x: &xt,
                x_test: &xt,
                y: &y,
                f: vec![0.0; n],
                delta: vec![0.0; n],
                inv_p2: 1.0 / (1.5 * 1.5),
                bernoulli,
                level: simd::Level::Baseline,
                collapsed: None,
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

    #[test]
    fn both_instruction_sets_give_the_same_bits() {
        // [002]'s 1-20-1 network on 203 points (so that the eight-lane sums and their tails
        // both run) and a 2-9-7-1 one, both likelihoods: the potential, the SSE and every
        // gradient entry at the baseline and at AVX2 (`uqbench_engine::cpu::simd`) agree bit for bit.
        let net = |d_in: usize, hidden: Vec<usize>| MlpShape {
            d_in,
            hidden,
            d_out: 1,
            negative_slope: 0.01,
        };
        for (shape, n) in [(net(1, vec![20]), 203), (net(2, vec![9, 7]), 61)] {
            let mut rng = Rng::new(11);
            let d = shape.d_in;
            let xt: Vec<f32> = (0..n * d)
                .map(|_| rng.uniform_in(-2.0, 2.5) as f32)
                .collect();
            let host_w = xavier_init(&shape, &[3]);
            let mut theta: Vec<f32> = host_w.layers.iter().flat_map(|(w, _)| w.clone()).collect();
            theta.extend(host_w.layers.iter().flat_map(|(_, b)| b.clone()));
            for bernoulli in [false, true] {
                let y: Vec<f32> = (0..n)
                    .map(|i| {
                        if bernoulli {
                            (i % 3 == 0) as u8 as f32
                        } else {
                            rng.normal() as f32
                        }
                    })
                    .collect();
                let run = |level: simd::Level| {
                    let mut chain = Chain {
                        net: FeatureMajorNet::new(shape.layers(), 0.01, n),
                        x: &xt,
                        x_test: &xt,
                        y: &y,
                        f: vec![0.0; n],
                        delta: vec![0.0; n],
                        inv_p2: 0.01,
                        bernoulli,
                        level,
                        collapsed: None,
                    };
                    let mut grad = vec![0.0f32; chain.net.dim];
                    // The potential at 1/σ² = 1.7, dispatched as NUTS's calls are.
                    let (u, sse) = simd::dispatch_at(
                        level,
                        PotentialAt {
                            chain: &mut chain,
                            q: &theta,
                            inv_s2: 1.7,
                            g: &mut grad,
                        },
                    );
                    let mut bits = vec![u.to_bits(), sse.to_bits()];
                    bits.extend(grad.iter().map(|g| u64::from(g.to_bits())));
                    bits
                };
                let base = run(simd::Level::Baseline);
                for level in simd::levels_to_compare() {
                    assert_eq!(
                        base,
                        run(level),
                        "{:?}, bernoulli {bernoulli}, {level:?}",
                        shape.hidden
                    );
                }
            }
        }
    }
}
