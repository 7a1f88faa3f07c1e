//! HMC's chains on the engine's trainer: the network's potential and its gradient, one
//! iteration (jittered leapfrog, Metropolis accept by a device-side select, the Gibbs step for
//! σ²), dual-averaging warm-up, and what each chain records. The sampler's description is in
//! the module above (`hmc/mod.rs`).

use std::ops::Range;
use std::sync::Mutex;

use burn::tensor::{Device, Tensor};
use uqbench_anchor::Rng;
use uqbench_metrics::mcmc;

use super::adapt::{DualAveraging, Welford, Windows};
use super::HmcConfig;
use uqbench_core::MethodError;
use uqbench_engine::cpu::kernels::KernelPath;
use uqbench_engine::mlp::{xavier_init, MlpShape};
use uqbench_engine::stack::Stack;
use uqbench_engine::trainer::{
    try_download, upload, BernoulliLogit, ChunkOut, ChunkTrainer, Head, Layout,
};

/// InvGamma(a₀, b₀) prior on σ² (a₀ = b₀ = 1), SG-MCMC's when it learns σ.
pub(crate) const PRIOR_A0: f64 = uqbench_core::NOISE_PRIOR.0;
pub(crate) const PRIOR_B0: f64 = uqbench_core::NOISE_PRIOR.1;

/// A chain's first σ²: the fixed noise's, or the targets' variance (then Gibbs-sampled).
pub(crate) fn start_s2(noise: Option<f64>, y: &[f32]) -> f64 {
    match noise {
        Some(s) => s * s,
        None => uqbench_core::start_sigma2(y),
    }
}

/// What one chain records besides its draws of f: divergent transitions after warm-up, its
/// acceptance rate after warm-up, its adapted step size, its energy H₀ at the start of every
/// sampling iteration (after the momenta are drawn; for the E-BFMI), and its σ draw at every
/// sampling iteration (the noise of its draw of y).
#[derive(Debug, Clone, Default)]
pub(crate) struct ChainRecord {
    pub divergent: u64,
    /// Leapfrog steps (gradient evaluations) of every iteration, warm-up included (NUTS's
    /// vary).
    pub leapfrogs: u64,
    /// NUTS's transitions after warm-up whose tree reached `max_tree_depth`.
    pub saturated: u64,
    pub accept_rate: f64,
    pub step_size: f64,
    pub energy: Vec<f64>,
    pub sigma: Vec<f64>,
    /// The warm-up's final inverse mass (diagonal metric) of the host chain's β = 1 rung; empty
    /// from the tensor chains.
    pub inv_mass: Vec<f32>,
    /// Parallel tempering's swap proposals between neighbouring rungs, and those accepted.
    pub swaps_tried: u64,
    pub swaps_accepted: u64,
    /// The ensemble's unit moves (`ensemble.rs`): proposals made and accepted, every rung
    /// and iteration.
    pub units_tried: u64,
    pub units_accepted: u64,
    /// The ensemble's adapted trajectory length (ChEES), in units of the step per unit σ.
    pub trajectory_length: f64,
    /// The ensemble's sampling iterations after warm-up (0: `draws × thin`, no doubling),
    /// and the doublings of its sampling stage (`doublings`).
    pub iterations: u64,
    pub doublings: u64,
}

/// The BNN's parameters for a chunk: per layer W `[R, in, out]` and b `[R, 1, out]`.
#[derive(Clone)]
pub(crate) struct Params {
    pub(crate) w: Vec<Tensor<3>>,
    pub(crate) b: Vec<Tensor<3>>,
}

impl Params {
    fn map2(&self, other: &Params, f: impl Fn(Tensor<3>, Tensor<3>) -> Tensor<3>) -> Params {
        Params {
            w: self
                .w
                .iter()
                .zip(&other.w)
                .map(|(a, b)| f(a.clone(), b.clone()))
                .collect(),
            b: self
                .b
                .iter()
                .zip(&other.b)
                .map(|(a, b)| f(a.clone(), b.clone()))
                .collect(),
        }
    }

    fn map(&self, mut f: impl FnMut(Tensor<3>) -> Tensor<3>) -> Params {
        Params {
            w: self.w.iter().map(|a| f(a.clone())).collect(),
            b: self.b.iter().map(|a| f(a.clone())).collect(),
        }
    }

    /// Σ of squares per replica `[R, 1, 1]`.
    fn norm2(&self) -> Tensor<3> {
        self.map(|t| t.square()).sum()
    }

    /// Σ of every entry per replica `[R, 1, 1]`.
    fn sum(&self) -> Tensor<3> {
        self.w
            .iter()
            .chain(&self.b)
            .map(|t| t.clone().sum_dim(2).sum_dim(1))
            .reduce(|a, b| a + b)
            .expect("at least one layer")
    }

    /// Every tensor, weights then biases, layer by layer.
    fn tensors(&self) -> impl Iterator<Item = &Tensor<3>> {
        self.w.iter().chain(&self.b)
    }

    /// Params of the same shapes from host values, one vector per tensor in
    /// [`Params::tensors`]' order.
    fn from_host(&self, values: Vec<Vec<f32>>, dev: &Device) -> Params {
        let mut it = values.into_iter();
        self.map(|t| upload(it.next().expect("one vector per tensor"), t.dims(), dev))
    }
}

/// The chains of one repetition block on the trainer.
pub(crate) struct HmcTrainer<'a> {
    pub config: &'a HmcConfig,
    pub shape: MlpShape,
    pub x_train: Vec<f32>,
    pub x_test: Vec<f32>,
    /// Targets `[R, N]`, replica-major.
    pub y: Vec<f32>,
    pub init: &'a [u64],
    pub stream: &'a [u64],
    /// A fixed noise sd, or `None` to sample σ² by Gibbs steps.
    pub noise: Option<f64>,
    pub device: Device,
    /// Per replica, written by the chunk that ran it.
    pub records: Mutex<Vec<ChainRecord>>,
    /// Labels: the Bernoulli likelihood of logits instead of the Gaussian one.
    pub bernoulli: bool,
    /// Run the chains on the host (`cpu/hmc.rs`: a CPU backend), at this instruction set,
    /// rather than as tensors.
    pub host: Option<uqbench_engine::cpu::simd::Level>,
}

/// A chunk's chains: the data on the device, the position θ with its potential U, SSE and
/// ∇U, and σ² per replica.
struct Chains {
    x: Tensor<3>,
    y: Tensor<3>,
    theta: Params,
    u: Tensor<3>,
    sse: Tensor<3>,
    grad: Params,
    s2: Vec<f64>,
    inv_s2: Tensor<3>,
    /// The diagonal inverse mass M⁻¹ per parameter (ones until the first slow window ends).
    inv_mass: Params,
}

/// What the sampling iterations record per replica of a chunk.
struct Draws {
    accepted: Vec<u64>,
    divergent: Vec<u64>,
    energy: Vec<Vec<f64>>,
    sigma: Vec<Vec<f64>>,
    /// `[R, draws, M]`.
    pred: Vec<f32>,
    /// Σ over draws of f at the training inputs.
    train_sum: Option<Tensor<3>>,
}

impl HmcTrainer<'_> {
    /// The chains' networks at `p` as the shared device MLP (tensor operations: the chains
    /// run as tensors where the host loops do not apply).
    fn stack<'p>(&self, p: &'p Params) -> Stack<'p> {
        Stack {
            w: &p.w,
            b: &p.b,
            slope: self.shape.negative_slope,
            path: KernelPath::Tensor,
        }
    }

    /// U per replica `[R, 1, 1]`, SSE per replica, and ∇U, at `p` with 1/σ² `inv_s2`.
    pub(crate) fn potential(
        &self,
        p: &Params,
        x: &Tensor<3>,
        y: &Tensor<3>,
        inv_s2: &Tensor<3>,
    ) -> (Tensor<3>, Tensor<3>, Params) {
        let inv_p2 = 1.0 / (self.config.prior_sd * self.config.prior_sd);
        let stack = self.stack(p);
        let (f, inputs) = stack.forward(x.clone());
        let n = f.dims()[1] as f64;
        let (sse, u, delta) = if self.bernoulli {
            // Labels: U = Σ_n (softplus(f_n) − y_n·f_n) + ‖θ‖²/(2σ_p²), the negative
            // log-likelihood of the logits, and ∂U/∂f = σ(f) − y; the head's mean form times n.
            // (The "SSE" slot carries the NLL; no Gibbs step reads it.)
            let nll = BernoulliLogit.value(f.clone(), y).mul_scalar(n);
            let delta = BernoulliLogit.delta(f, y).mul_scalar(n);
            let u = nll.clone() + p.norm2().mul_scalar(0.5 * inv_p2);
            (nll, u, delta)
        } else {
            let resid = f - y.clone();
            let sse = resid.clone().square().sum_dim(1);
            let u = sse.clone().mul(inv_s2.clone()).mul_scalar(0.5)
                + p.norm2().mul_scalar(0.5 * inv_p2);
            // δ at the output: ∂U/∂f = (f − y)/σ².
            (sse, u, resid.mul(inv_s2.clone()))
        };
        // The likelihood's gradient through the network, plus the prior's θ/σ_p².
        let g = stack.backward(&inputs, p.w.len(), delta, false);
        let prior = |g: Vec<Tensor<3>>, p: &[Tensor<3>]| -> Vec<Tensor<3>> {
            g.into_iter()
                .zip(p)
                .map(|(g, p)| g + p.clone().mul_scalar(inv_p2))
                .collect()
        };
        let grad = Params {
            w: prior(g.w, &p.w),
            b: prior(g.b, &p.b),
        };
        (u, sse, grad)
    }

    /// 1/σ² per replica on the device `[R, 1, 1]`.
    fn inv(&self, s2: &[f64]) -> Tensor<3> {
        let values = s2.iter().map(|v| (1.0 / v) as f32).collect();
        upload(values, [s2.len(), 1, 1], &self.device)
    }

    /// The chains of replicas `range` at their Xavier initialisation, σ² fixed or starting at
    /// the targets' variance.
    fn start(&self, range: Range<usize>) -> Chains {
        let rc = range.len();
        let (n, _) = self.points();
        let d = self.shape.d_in;
        let dev = &self.device;
        let layers = self.shape.layers();
        let host = xavier_init(&self.shape, &self.init[range.clone()]);
        let theta = Params {
            w: (host.layers.iter().zip(&layers))
                .map(|((w, _), &(i, o))| upload(w.clone(), [rc, i, o], dev))
                .collect(),
            b: (host.layers.iter().zip(&layers))
                .map(|((_, b), &(_, o))| upload(b.clone(), [rc, 1, o], dev))
                .collect(),
        };
        let x = upload(self.x_train.clone(), [1, n, d], dev);
        let targets = &self.y[range.start * n..range.end * n];
        let y = upload(targets.to_vec(), [rc, n, 1], dev);
        let s2: Vec<f64> = targets
            .chunks(n)
            .map(|yr| start_s2(self.noise, yr))
            .collect();
        let inv_s2 = self.inv(&s2);
        let (u, sse, grad) = self.potential(&theta, &x, &y, &inv_s2);
        let inv_mass = theta.map(|t| t.ones_like());
        Chains {
            x,
            y,
            theta,
            u,
            sse,
            grad,
            s2,
            inv_s2,
            inv_mass,
        }
    }

    /// One HMC transition of every chain on θ given σ²: jittered step, momenta, leapfrog,
    /// then the Metropolis accept by a device-side select. Returns each chain's acceptance
    /// probability; when `draws` is given (sampling), records energies, divergences and
    /// acceptances.
    fn transition(
        &self,
        st: &mut Chains,
        eps: &[f64],
        streams: &mut [Rng],
        mut draws: Option<&mut Draws>,
    ) -> Result<Vec<f64>, MethodError> {
        let (c, dev, rc) = (self.config, &self.device, eps.len());
        // Each iteration's step is ε·U(0.5, 1.5) from the replica's stream: a fixed ε·L can
        // sit near a multiple of a posterior direction's period, where HMC barely moves
        // (Neal 2011, §5.4.2.2); jittering it breaks that.
        // With σ sampled, the step is ε·σ (the module's doc says why).
        let sampled = self.noise.is_none();
        let jittered = (eps.iter().zip(streams.iter_mut()).zip(&st.s2))
            .map(|((&e, g), &s2)| {
                let e = if sampled { e * s2.sqrt() } else { e };
                (if c.jitter { e * (0.5 + g.uniform()) } else { e }) as f32
            })
            .collect();
        let step = upload(jittered, [rc, 1, 1], dev);
        // Momenta from each replica's stream.
        let momentum = st.theta.map(|t| {
            let [_, a, b] = t.dims();
            let mut v = Vec::with_capacity(rc * a * b);
            for g in streams.iter_mut() {
                for _ in 0..a * b {
                    v.push(g.normal() as f32);
                }
            }
            upload(v, [rc, a, b], dev)
        });
        // ρ ~ N(0, M): the standard normals over √m; kinetic energy ½ Σ m·ρ².
        let momentum = momentum.map2(&st.inv_mass, |z, m| z.div(m.sqrt()));
        let kinetic = |p: &Params| p.map2(&st.inv_mass, |p, m| p.square().mul(m)).sum();
        let k0 = kinetic(&momentum).mul_scalar(0.5);
        let half = step.clone().mul_scalar(0.5);
        let mut q = st.theta.clone();
        let mut p = momentum.map2(&st.grad, |p, g| p - g.mul(half.clone()));
        let (mut u1, mut sse1, mut g1) = (st.u.clone(), st.sse.clone(), st.grad.clone());
        for l in 0..c.leapfrog_steps {
            let velocity = p.map2(&st.inv_mass, |p, m| p.mul(m));
            q = q.map2(&velocity, |q, v| q + v.mul(step.clone()));
            (u1, sse1, g1) = self.potential(&q, &st.x, &st.y, &st.inv_s2);
            let scale = if l + 1 < c.leapfrog_steps {
                step.clone()
            } else {
                half.clone()
            };
            p = p.map2(&g1, |p, g| p - g.mul(scale.clone()));
        }
        let k1 = kinetic(&p).mul_scalar(0.5);
        // H₀ and H₀ − H₁ per replica, read back together.
        let h0 = st.u.clone() + k0;
        let both = download(Tensor::cat(vec![h0.clone(), h0 - (u1.clone() + k1)], 2))?;
        let mut accept = vec![0.0f32; rc];
        let mut alphas = vec![0.0; rc];
        for r in 0..rc {
            let dh = f64::from(both[2 * r + 1]);
            alphas[r] = if dh.is_finite() {
                dh.min(0.0).exp()
            } else {
                0.0
            };
            if let Some(d) = draws.as_deref_mut() {
                d.energy[r].push(f64::from(both[2 * r]));
                // The energy error H₁ − H₀ = −dh.
                if mcmc::is_divergent(-dh) {
                    d.divergent[r] += 1;
                }
            }
            if streams[r].uniform() < alphas[r] {
                accept[r] = 1.0;
                if let Some(d) = draws.as_deref_mut() {
                    d.accepted[r] += 1;
                }
            }
        }
        // Select, not blend: a rejected proposal may hold ±∞ or NaN, and NaN·0 is NaN.
        let mask = upload(accept, [rc, 1, 1], dev).greater_elem(0.5);
        let blend = |new: Tensor<3>, old: Tensor<3>| {
            let dims = old.dims();
            old.mask_where(mask.clone().expand(dims), new)
        };
        st.theta = q.map2(&st.theta, blend);
        st.grad = g1.map2(&st.grad, blend);
        st.u = blend(u1, st.u.clone());
        st.sse = blend(sse1, st.sse.clone());
        Ok(alphas)
    }

    /// The Gibbs step for σ²: σ² ~ InvGamma(a₀ + N/2, b₀ + SSE/2) per replica, then the
    /// potential at the new σ².
    fn gibbs(&self, st: &mut Chains, streams: &mut [Rng]) -> Result<(), MethodError> {
        let (n, _) = self.points();
        let sse_host = download(st.sse.clone())?;
        for (r, g) in streams.iter_mut().enumerate() {
            let shape = PRIOR_A0 + n as f64 / 2.0;
            let rate = PRIOR_B0 + f64::from(sse_host[r]) / 2.0;
            // InvGamma(shape, rate) = rate / Gamma(shape, 1).
            st.s2[r] = rate / g.gamma(shape);
        }
        st.inv_s2 = self.inv(&st.s2);
        (st.u, st.sse, st.grad) = self.potential(&st.theta, &st.x, &st.y, &st.inv_s2);
        Ok(())
    }

    /// Records sampling draw `s`: f at the test inputs, σ, and f at the training inputs.
    fn record(
        &self,
        st: &Chains,
        x_test: &Tensor<3>,
        s: usize,
        d: &mut Draws,
    ) -> Result<(), MethodError> {
        let (_, m) = self.points();
        let draws = self.config.draws;
        let (f, _) = self.stack(&st.theta).forward(x_test.clone());
        let values = download(f)?;
        for (r, sigma) in d.sigma.iter_mut().enumerate() {
            let dst = (r * draws + s) * m;
            d.pred[dst..dst + m].copy_from_slice(&values[r * m..(r + 1) * m]);
            sigma.push(st.s2[r].sqrt());
        }
        let (ft, _) = self.stack(&st.theta).forward(st.x.clone());
        d.train_sum = Some(match d.train_sum.take() {
            Some(t) => t + ft,
            None => ft,
        });
        Ok(())
    }
}

impl ChunkTrainer for HmcTrainer<'_> {
    fn layout(&self) -> Layout {
        let d = self.shape.d_in;
        Layout {
            replicas: self.init.len(),
            n_train: self.x_train.len() / d,
            n_test: self.x_test.len() / d,
            outputs: 1,
            passes: self.config.draws,
            rates: false,
        }
    }

    fn bytes_per_replica(&self) -> usize {
        // Position, momentum, gradient and proposal (4 parameter copies), every layer's
        // activations, and the draws at the test inputs; twice for safety.
        let (n, m) = self.points();
        let widths: usize = self.shape.hidden.iter().sum::<usize>() + self.shape.d_in + 1;
        2 * 4 * (8 * self.shape.params_per_replica() + 2 * n.max(m) * widths + m)
    }

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, MethodError> {
        if let Some(level) = self.host {
            return self.train_chunk_host(range, level);
        }
        let c = self.config;
        let rc = range.len();
        let (n, m) = self.points();
        let mut streams: Vec<Rng> = self.stream[range.clone()]
            .iter()
            .map(|&s| Rng::new(s))
            .collect();
        let mut st = self.start(range.clone());
        let x_test = upload(self.x_test.clone(), [1, m, self.shape.d_in], &self.device);
        let mut adapt = DualAveraging::new(c.step_size, rc);
        let windows = Windows::new(c.warmup, c.metric);
        // Per tensor of θ, per replica, the window's running variance.
        let sizes: Vec<usize> = st
            .theta
            .tensors()
            .map(|t| t.dims()[1] * t.dims()[2])
            .collect();
        let mut window: Vec<Vec<Welford>> =
            sizes.iter().map(|&k| vec![Welford::new(k); rc]).collect();
        let mut draws = Draws {
            accepted: vec![0; rc],
            divergent: vec![0; rc],
            energy: vec![Vec::with_capacity(c.draws); rc],
            sigma: vec![Vec::with_capacity(c.draws); rc],
            pred: vec![0.0f32; rc * c.draws * m],
            train_sum: None,
        };
        for it in 0..c.warmup + c.draws {
            let sampling = it >= c.warmup;
            let record = sampling.then_some(&mut draws);
            let alphas = self.transition(&mut st, &adapt.eps, &mut streams, record)?;
            if !sampling {
                adapt.update(&alphas, c.target_accept, it + 1 == c.warmup);
            }
            if self.noise.is_none() {
                self.gibbs(&mut st, &mut streams)?;
            }
            if windows.collects(it) {
                self.collect(&st, &sizes, &mut window)?;
                if windows.ends(it) {
                    let values = (window.iter_mut().zip(&sizes))
                        .map(|(per_replica, &k)| {
                            let mut v = Vec::with_capacity(rc * k);
                            for w in per_replica.iter_mut() {
                                v.extend(w.take_inverse_mass());
                            }
                            v
                        })
                        .collect();
                    st.inv_mass = st.theta.from_host(values, &self.device);
                    adapt.restart();
                }
            }
            if sampling {
                self.record(&st, &x_test, it - c.warmup, &mut draws)?;
            }
        }
        let train_sum = draws.train_sum.take().expect("at least one draw");
        let train = download(train_sum.div_scalar(c.draws as f64))?;
        let u_host = download(st.u)?;
        {
            let mut records = self.records.lock().expect("no panics while holding it");
            let per_chain = draws.energy.into_iter().zip(draws.sigma).enumerate();
            for (r, (energy, sigma)) in per_chain {
                records[range.start + r] = ChainRecord {
                    divergent: draws.divergent[r],
                    accept_rate: draws.accepted[r] as f64 / c.draws as f64,
                    step_size: adapt.eps[r],
                    leapfrogs: ((c.warmup + c.draws) * c.leapfrog_steps) as u64,
                    saturated: 0,
                    energy,
                    sigma,
                    ..ChainRecord::default()
                };
            }
        }
        Ok(ChunkOut {
            collected: Vec::new(),
            pred: draws.pred,
            train_pred: train,
            // The final potential per data point (a chain whose state became non-finite is
            // diverged through it and its draws).
            objective: u_host.iter().map(|&v| f64::from(v) / n as f64).collect(),
            // σ travels in the chain records.
            rates: Vec::new(),
            steps: ((c.warmup + c.draws) * c.leapfrog_steps) as u64,
            // Not counted on this route (momenta are uploaded every iteration).
            uploads: 0,
            reads: 0,
        })
    }
}

impl HmcTrainer<'_> {
    /// Adds every replica's θ to its window's running variance (θ read back once per tensor).
    fn collect(
        &self,
        st: &Chains,
        sizes: &[usize],
        window: &mut [Vec<Welford>],
    ) -> Result<(), MethodError> {
        for ((t, &k), per_replica) in st.theta.tensors().zip(sizes).zip(window.iter_mut()) {
            let host = download(t.clone())?;
            for (w, values) in per_replica.iter_mut().zip(host.chunks(k)) {
                w.push(values);
            }
        }
        Ok(())
    }
}

fn download(t: Tensor<3>) -> Result<Vec<f32>, MethodError> {
    try_download(t, "HMC state")
}

#[cfg(test)]
mod tests {
    use super::*;
    use uqbench_engine::backend::{open_device, BackendKind};
    use uqbench_engine::mlp::MlpShape;
    use uqbench_engine::trainer::{run_chunks, Resources};

    #[test]
    fn the_tensor_sampler_recovers_a_conjugate_posterior() {
        // The tensor version (what a GPU runs; the CPU runs `host.rs` for small networks) on
        // f(x) = w·x + b, prior N(0, 1) on w and b, σ = 0.5 known, N = 40: the posterior of
        // f(x*) is N(φ*ᵀμ, φ*ᵀΛ⁻¹φ*) with Λ = ΦᵀΦ/σ² + I and μ = Λ⁻¹Φᵀy/σ² (a 2 × 2
        // solve by hand). 4 chains of 200 + 600 iterations; the draws' mean must be within
        // 5 Monte-Carlo standard errors (mcse_mean from the chains) and their sd within
        // 5/√(2·ESS) relative.
        let n = 40;
        let mut rng = Rng::new(4);
        let x: Vec<f64> = (0..n).map(|_| rng.uniform_in(-2.0, 2.0)).collect();
        let y: Vec<f64> = x
            .iter()
            .map(|&v| 0.7 * v + 0.2 + 0.5 * rng.normal())
            .collect();
        let (sxx, sx, sxy, sy) = (
            x.iter().map(|v| v * v).sum::<f64>() / 0.25 + 1.0,
            x.iter().sum::<f64>() / 0.25,
            x.iter().zip(&y).map(|(a, b)| a * b).sum::<f64>() / 0.25,
            y.iter().sum::<f64>() / 0.25,
        );
        let snn = n as f64 / 0.25 + 1.0;
        let det = sxx * snn - sx * sx;
        let cov = [[snn / det, -sx / det], [-sx / det, sxx / det]];
        let mu = [
            cov[0][0] * sxy + cov[0][1] * sy,
            cov[1][0] * sxy + cov[1][1] * sy,
        ];
        let x_test = [-1.5f64, 0.5];
        let config = HmcConfig {
            own: super::super::HmcSettings {
                chains: 4,
                warmup: 200,
                draws: 600,
                leapfrog_steps: 10,
                ..super::super::HmcSettings::default()
            },
            ..HmcConfig::default()
        };
        let shape = MlpShape {
            d_in: 1,
            hidden: vec![],
            d_out: 1,
            negative_slope: 0.01,
        };
        let device = open_device(BackendKind::Flex, true).unwrap();
        let trainer = HmcTrainer {
            config: &config,
            shape,
            x_train: x.iter().map(|&v| v as f32).collect(),
            x_test: x_test.iter().map(|&v| v as f32).collect(),
            y: (0..4).flat_map(|_| y.iter().map(|&v| v as f32)).collect(),
            init: &[11, 12, 13, 14],
            stream: &[21, 22, 23, 24],
            noise: Some(0.5),
            device: device.clone(),
            records: Mutex::new(vec![ChainRecord::default(); 4]),
            bernoulli: false,
            host: None,
        };
        let res = Resources::new(BackendKind::Flex, device);
        let out = run_chunks(&trainer, &res, &|_| {}).unwrap();
        for (i, &xs) in x_test.iter().enumerate() {
            let chains: Vec<Vec<f64>> = (0..4)
                .map(|r| {
                    (0..600)
                        .map(|s| f64::from(out.test_out[(r * 600 + s) * 2 + i]))
                        .collect()
                })
                .collect();
            let d = mcmc::diagnose(&chains).unwrap();
            let all: Vec<f64> = chains.concat();
            let mean = all.iter().sum::<f64>() / all.len() as f64;
            let sd = (all.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (all.len() - 1) as f64)
                .sqrt();
            let want_mean = mu[0] * xs + mu[1];
            let want_sd = (cov[0][0] * xs * xs + 2.0 * cov[0][1] * xs + cov[1][1]).sqrt();
            assert!(d.rhat < 1.05, "x* = {xs}: R̂ {}", d.rhat);
            assert!(
                (mean - want_mean).abs() < 5.0 * d.mcse_mean,
                "x* = {xs}: {mean} vs {want_mean} (MCSE {})",
                d.mcse_mean
            );
            assert!(
                (sd / want_sd - 1.0).abs() < 5.0 / (2.0 * d.ess_bulk).sqrt(),
                "x* = {xs}: sd {sd} vs {want_sd} (ESS {})",
                d.ess_bulk
            );
        }
    }

    #[test]
    fn the_gamma_sampler_has_its_mean() {
        let mut rng = Rng::new(5);
        // The Gamma sampler has mean shape (sd √(shape/n)): 20 000 draws of Gamma(3).
        let g: f64 = (0..20_000).map(|_| rng.gamma(3.0)).sum::<f64>() / 20_000.0;
        assert!((g - 3.0).abs() < 5.0 * (3.0f64 / 20_000.0).sqrt(), "{g}");
    }
}
