//! Stochastic-gradient MCMC's updates in place of Adam (spec §11): the engine's replicas become
//! chains, every chain of every repetition one replica of the job, on both executions. The
//! dynamics is the engine's [`Update`] (`uqbench_engine::trainer::update`): a host form per
//! chain ([`HostUpdate`]) and a tensor form per chunk ([`TensorUpdate`]).
//!
//! The engine's gradient g is that of its objective, mean_batch ℓ + (λ/2)‖W‖² (ℓ the head's
//! loss: ½·r² or the Bernoulli NLL), so with `scale` = N/σ² (N for labels) and λ = σ²/(N·σ_p²)
//! (1/(N·σ_p²) for labels), `scale`·g is the mini-batch estimate of ∇U, the gradient of the
//! negative log posterior U(θ) = Σ_n ℓ_n/σ² + ‖W‖²/(2σ_p²), its data term scaled by N/B
//! (Welling & Teh 2011). Biases are not pulled, as everywhere in the engine: their prior is
//! flat (what BLRGaussian's intercept has).
//!
//! - SGLD (Welling & Teh 2011, eq. 4): θ ← θ − (ε/2)·∇U + √ε·ξ, ξ ∼ N(0, I).
//! - SGHMC (Chen, Fox & Guestrin 2014, eq. 15, with β̂ = 0): v ← (1 − α)·v − η·∇U +
//!   √(2αη)·ξ, θ ← θ + v; η the learning rate (`step_size`), α the friction (1 − momentum).
//! - pSGLD (Li, Chen, Carlson & Carin 2016, Algorithm 1, without its Γ term, as their
//!   experiments run it): V ← a·V + (1 − a)·∇U ⊙ ∇U, G = 1 ⊘ (λ + √V),
//!   θ ← θ − (ε/2)·G ⊙ ∇U + √ε·√G ⊙ ξ; `rms_decay` a (0.99) and `floor` λ (1e-5) theirs. The
//!   squares are of ∇U itself, the full-data estimate, as BigBayes' SGMCMC.jl
//!   (`sgldrmsprop.jl`) squares its gradient of the log posterior, and V starts at the first
//!   step's ∇U ⊙ ∇U as there (Li et al. start at 0, which makes the first steps' G up to
//!   1/√(1 − a) = 10 times too large); Li et al. average the squared mean per-datum gradient,
//!   ∇U/N in effect, which only rescales ε by √N·… against this form. At a Gaussian target of
//!   precision H with exact gradients a mixing chain has E[∇U ⊙ ∇U] = diag(H·H⁻¹·H) = diag(H),
//!   so G settles near diag(H)^(−½): the curvatures a plain step must resolve at once,
//!   [λ_min, λ_max], become G-scaled ones whose spread is about its square root, and the
//!   weakly identified directions move √(λ_max/λ_min) times faster at the same stability.
//!   **V adapts during the burn-in only** (`adapt`, SG-MCMC's `burnin` fraction of the
//!   steps) and G is held after it: a departure from Li et al., who average throughout and
//!   drop the Γ term (G's dependence on θ) as O(1 − a). Measured, that is not small: where
//!   the chain relaxes slower than V's window of ~1/(1 − a) steps, V follows the chain, G ≈
//!   1/|∇U(θ)|, and without Γ the stationary law is p(θ)/G(θ) (the Fokker–Planck equation of
//!   dθ = −½G∇U dt + √G dW), which on a Gaussian coordinate puts the sd up to √2 times the
//!   posterior's: a 1-D Gaussian chain (numpy, 64 chains) read sd ratios 1.17–1.40 at
//!   precision 1 and ε = 1e-3…1.6e-2, a = 0.9 and 0.99; `experiments/limits.toml`'s linear
//!   network read 1.20 ± 0.04 at ε = 1e-3 and 1.07 ± 0.03 at 4e-3. With G held the chain is
//!   SGLD's on the fixed metric G, exact up to its O(ε) bias: the variance along an eigenvalue
//!   μ of G^½·H·G^½ inflated by 1/(1 − ε·μ/4) (the bias test's bound; the same 1-D chains
//!   read 0.99–1.05 with G held after half the run).
//! - Cyclical SG-MCMC (Zhang et al. 2020, eq. 1): ε_t = (ε₀/2)·(cos(π·r_t) + 1) with
//!   r_t = ((t − 1) mod ⌈T/K⌉)/⌈T/K⌉ over T steps and K cycles; steps with r_t below the
//!   exploration fraction β take no noise (the optimisation stage), the rest sample.
//!
//! The O(ε) bias (what the exact-limit test bounds): on a Gaussian target with precision
//! eigenvalue λ and exact gradients, SGLD's chain is a linear AR(1) whose stationary variance
//! is 1/(λ·(1 − ελ/4)) (from s = (1 − ελ/2)²·s + ε), and SGHMC's is
//! 1/(λ·(1 − ηλ/(2(2 − α)))) (the 2×2 Lyapunov equation of (θ, v)): both inflate the
//! variance by a factor 1 + O(ελ) and leave the mean exact.
//!
//! Step t's noise for parameter slot j (the weights of each layer, then their biases) is draw
//! t·S + j of the replica's Langevin stream, S the slots: the same numbers on the device and
//! on the host.
//!
//! σ learned ([`LearnedNoise`]): each chain carries its own σ², and its weights move on
//! U(θ | σ²), ∇U = (N/σ²)·(g + λW) with λ = σ²/(N·σ_p²), at the chain's current σ², with the
//! step ε·σ² (ε the `step_size`) as HMC's leapfrog step is ε·σ: the drift
//! ε·σ²·∇U = ε·N·(g + λW) and the bias, O(ε·σ²·λ_max) with λ_max ∝ N/σ², do not depend on σ,
//! and a chain that starts at a large σ² (the targets' variance) is not slowed by it. For each
//! σ² the update is the dynamics at that step, a kernel that leaves p(θ | σ², y) invariant up
//! to its O(ε) bias, so alternating it with the exact σ² | θ draw below samples the joint. At
//! the end of every epoch a Gibbs step draws σ² ∼ InvGamma(a₀ + N/2, b₀ + SSE/2), HMC's
//! conjugate step under HMC's InvGamma(1, 1) prior ([`NOISE_PRIOR`]), SSE the sum of squared
//! residuals over the epoch's batches (scaled to N points where an epoch does not visit each
//! point once). With full batches the epoch is
//! one step and SSE is the residuals at the chain's θ, so the step is HMC's exact
//! conditional; with shuffled mini-batches every point is visited once, each at the θ of its
//! batch's step, which within an epoch moves by O(ε): the same order as the dynamics' own
//! bias. Its draws come from the chain's own generator, seeded by (replica seed, identifier,
//! purpose `PURPOSE_SIGMA`), on the host in both executions: the same σ² on every backend.

use burn::tensor::{Device, Tensor};

pub use super::noise::LearnedNoise;
use super::noise::NoiseChain;
use uqbench_core::MethodError;
use uqbench_engine::trainer::{
    HostSlots, HostUpdate, TensorSlot, TensorUpdate, TrainSettings, Update,
};

/// The chains' σ² in a chunk of the tensor execution: each chain's [`NoiseChain`], the
/// epoch's squared residuals summed on the device (`[R, 1, 1]`), and N/σ²_r and
/// σ²_r/(N·σ_p²) as `[R, 1, 1]` tensors, uploaded once per epoch after the Gibbs step.
struct ChainNoises {
    /// The chains.
    pub chains: Vec<NoiseChain>,
    sse: Option<Tensor<3>>,
    count: usize,
    /// σ²_r/(N·σ_p²).
    pub decay: Tensor<3>,
    /// σ_r, the factor on the chain's noise.
    pub sigma: Tensor<3>,
}

impl ChainNoises {
    /// The chains, their factors uploaded by `upload`.
    fn new(
        l: &Langevin,
        chains: Vec<NoiseChain>,
        upload: &mut dyn FnMut(Vec<f32>, [usize; 3]) -> Tensor<3>,
    ) -> ChainNoises {
        let (decay, sigma) = Self::factors(l, &chains, upload);
        ChainNoises {
            chains,
            sse: None,
            count: 0,
            decay,
            sigma,
        }
    }

    fn factors(
        l: &Langevin,
        chains: &[NoiseChain],
        upload: &mut dyn FnMut(Vec<f32>, [usize; 3]) -> Tensor<3>,
    ) -> (Tensor<3>, Tensor<3>) {
        let r = chains.len();
        let (decay, sigma): (Vec<f32>, Vec<f32>) = chains
            .iter()
            .map(|c| {
                let f = l.factors(Some(c.sigma2), 0.0);
                (f.decay as f32, f.noise as f32)
            })
            .unzip();
        (upload(decay, [r, 1, 1]), upload(sigma, [r, 1, 1]))
    }

    /// Adds a batch's residuals `[R, b, 1]`.
    fn add(&mut self, residual: Tensor<3>) {
        self.count += residual.dims()[1];
        let sse = (residual.clone() * residual).sum_dim(1);
        self.sse = Some(match self.sse.take() {
            Some(acc) => acc + sse,
            None => sse,
        });
    }

    /// The epoch's Gibbs step for N points (the sums read back once, by `read`), then the
    /// factors at the new σ².
    fn epoch_end(
        &mut self,
        l: &Langevin,
        n: usize,
        read: &mut dyn FnMut(Tensor<3>) -> Vec<f32>,
        upload: &mut dyn FnMut(Vec<f32>, [usize; 3]) -> Tensor<3>,
    ) {
        let Some(sse) = self.sse.take() else {
            return;
        };
        for (chain, &v) in self.chains.iter_mut().zip(&read(sse)) {
            chain.add(f64::from(v), self.count);
            chain.gibbs(n);
        }
        self.count = 0;
        (self.decay, self.sigma) = Self::factors(l, &self.chains, upload);
    }
}

/// A chain's factors in one step: ∇U·(its step / ε) = `scale`·(g + `decay`·W) and its
/// normals times `noise` ([`Langevin::factors`]).
#[derive(Debug, Clone, Copy, PartialEq)]
struct ChainFactors {
    pub scale: f64,
    pub decay: f64,
    pub noise: f64,
}

/// The factors of one step on tensors: the job's, or each chain's `[R, 1, 1]` at its σ².
enum Factors<'a> {
    /// `scale` and the slot's λ.
    Fixed(f64),
    /// For a weight slot σ²_r/(N·σ_p²), and σ_r on the noise (`scale` is N).
    PerChain {
        decay: Option<&'a Tensor<3>>,
        sigma: &'a Tensor<3>,
    },
}

/// The dynamics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dynamics {
    /// Stochastic-gradient Langevin dynamics.
    Sgld,
    /// Stochastic-gradient Hamiltonian Monte Carlo with friction α in (0, 1].
    Sghmc {
        /// α = 1 − momentum.
        friction: f64,
    },
    /// Preconditioned SGLD (RMSprop's diagonal preconditioner; module docs).
    Psgld {
        /// a, the squared gradients' moving-average factor, in [0, 1).
        rms_decay: f64,
        /// λ > 0, added to √V.
        floor: f64,
        /// The fraction of the run's steps in which V adapts (the burn-in); G is held fixed
        /// after it.
        adapt: f64,
    },
}

/// How the step size moves over the T steps of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepSchedule {
    /// ε every step.
    Constant,
    /// Zhang et al.'s cosine cycles: `cycles` of them, the first `exploration` fraction of
    /// each without noise.
    Cyclical {
        /// K.
        cycles: usize,
        /// β in [0, 1).
        exploration: f64,
    },
}

/// What a step does to pSGLD's squared-gradient average V.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Adapt {
    /// The run's first step: V = ∇U ⊙ ∇U.
    Start,
    /// A burn-in step: V ← a·V + (1 − a)·∇U ⊙ ∇U.
    Average,
    /// After the burn-in (and for the other dynamics): V, hence G, held.
    Hold,
}

/// SG-MCMC's settings for a job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Langevin {
    /// The dynamics.
    pub dynamics: Dynamics,
    /// ε (SGLD) or η (SGHMC); the cycles' ε₀.
    pub step_size: f64,
    /// The schedule.
    pub schedule: StepSchedule,
    /// The factor that turns the engine's gradient into ∇U: N/σ² (N for labels); with σ
    /// learned, each chain's N/σ²_r instead.
    pub scale: f64,
    /// σ² learned per chain (module docs), or `None` for the fixed `scale`.
    pub noise: Option<LearnedNoise>,
}

impl Langevin {
    /// The step size of step t (1-based) of `total`, and whether the step adds noise.
    pub fn at(&self, t: u64, total: u64) -> (f64, bool) {
        match self.schedule {
            StepSchedule::Constant => (self.step_size, true),
            StepSchedule::Cyclical {
                cycles,
                exploration,
            } => {
                let len = total.div_ceil(cycles.max(1) as u64).max(1);
                let r = ((t.max(1) - 1) % len) as f64 / len as f64;
                let eps = 0.5 * self.step_size * ((std::f64::consts::PI * r).cos() + 1.0);
                (eps, r >= exploration)
            }
        }
    }

    /// What step t (from 1) of `total` does to pSGLD's V: the first starts it, the steps up
    /// to the adaptation's end (⌊adapt·total⌋) average, the rest hold it.
    fn adapt(&self, t: u64, total: u64) -> Adapt {
        match self.dynamics {
            Dynamics::Psgld { .. } if t <= 1 => Adapt::Start,
            Dynamics::Psgld { adapt, .. } if (t as f64) <= (adapt * total as f64).floor() => {
                Adapt::Average
            }
            _ => Adapt::Hold,
        }
    }

    /// A chain's factors: the job's `scale` and `weight_decay` with noise 1; with σ² learned,
    /// its step is ε·σ² (module docs), so ε·σ²·∇U = ε·N·(g + λW) with λ = σ²/(N·σ_p²), and
    /// its normals √(ε·σ²)·ξ = √ε·σ·ξ: scale N, decay λ, noise σ.
    fn factors(&self, sigma2: Option<f64>, weight_decay: f64) -> ChainFactors {
        match (self.noise, sigma2) {
            (Some(l), Some(s2)) => ChainFactors {
                scale: l.n as f64,
                decay: s2 * l.prior_precision / l.n as f64,
                noise: s2.sqrt(),
            },
            _ => ChainFactors {
                scale: self.scale,
                decay: weight_decay,
                noise: 1.0,
            },
        }
    }

    /// Whether the dynamics' own settings make sense.
    pub fn check(&self) -> Result<(), MethodError> {
        MethodError::positive("step_size", self.step_size)?;
        MethodError::positive("Langevin scale (N/σ²)", self.scale)?;
        if let Some(l) = self.noise {
            MethodError::positive("the prior precision 1/σ_p²", l.prior_precision)?;
        }
        if let Dynamics::Sghmc { friction } = self.dynamics {
            if !(friction > 0.0 && friction <= 1.0) {
                return Err(MethodError::invalid(
                    "friction",
                    friction,
                    "a number in (0, 1]",
                ));
            }
        }
        if let Dynamics::Psgld {
            rms_decay,
            floor,
            adapt,
        } = self.dynamics
        {
            if !(0.0..=1.0).contains(&adapt) {
                return Err(MethodError::invalid(
                    "burnin (the preconditioner's adaptation)",
                    adapt,
                    "a fraction in [0, 1]",
                ));
            }
            if !(0.0..1.0).contains(&rms_decay) {
                return Err(MethodError::invalid(
                    "rms_decay",
                    rms_decay,
                    "a fraction in [0, 1)",
                ));
            }
            MethodError::positive("precond_floor", floor)?;
        }
        if let StepSchedule::Cyclical {
            cycles,
            exploration,
        } = self.schedule
        {
            if cycles == 0 {
                return Err(MethodError::invalid("cycles", 0, "at least 1"));
            }
            if !(0.0..1.0).contains(&exploration) {
                return Err(MethodError::invalid(
                    "exploration",
                    exploration,
                    "a fraction in [0, 1)",
                ));
            }
        }
        Ok(())
    }

    /// One slot's update on the host: parameters `p`, momenta `v` (SGHMC; pSGLD's V), the
    /// engine's gradient `g` without the pull, the chain's factors with the slot's L2 factor
    /// `decay` ([`Langevin::factors`]), what the step does to pSGLD's V ([`Adapt`]), and the
    /// step's normals (`None` in an exploration step).
    #[allow(clippy::too_many_arguments)]
    fn update_host(
        &self,
        p: &mut [f32],
        v: &mut [f32],
        g: &[f32],
        f: ChainFactors,
        eps: f64,
        adapt: Adapt,
        noise: Option<&[f32]>,
    ) {
        let (scale, decay) = (f.scale as f32, f.decay as f32);
        let xi = |i: usize| noise.map_or(0.0, |z| z[i]);
        match self.dynamics {
            Dynamics::Sgld => {
                let (half, sd) = ((0.5 * eps) as f32, (eps.sqrt() * f.noise) as f32);
                for (i, (p, &g)) in p.iter_mut().zip(g).enumerate() {
                    let grad_u = scale * (g + decay * *p);
                    *p += -half * grad_u + sd * xi(i);
                }
            }
            Dynamics::Sghmc { friction } => {
                let (keep, eta) = ((1.0 - friction) as f32, eps as f32);
                let sd = ((2.0 * friction * eps).sqrt() * f.noise) as f32;
                for (i, ((p, v), &g)) in p.iter_mut().zip(v.iter_mut()).zip(g).enumerate() {
                    let grad_u = scale * (g + decay * *p);
                    *v = keep * *v - eta * grad_u + sd * xi(i);
                    *p += *v;
                }
            }
            Dynamics::Psgld {
                rms_decay, floor, ..
            } => {
                // With σ learned, `grad_u` is σ²·∇U and the normals' factor σ (`factors`):
                // G computed from it is G/σ², so the drift (ε/2)·G·∇U and the noise
                // √(ε·G)·ξ are the chain's at its σ² exactly (module docs).
                let (half, sd) = ((0.5 * eps) as f32, (eps.sqrt() * f.noise) as f32);
                let (a, b, floor) = (rms_decay as f32, (1.0 - rms_decay) as f32, floor as f32);
                for (i, ((p, v), &g)) in p.iter_mut().zip(v.iter_mut()).zip(g).enumerate() {
                    let grad_u = scale * (g + decay * *p);
                    let sq = grad_u * grad_u;
                    match adapt {
                        Adapt::Start => *v = sq,
                        Adapt::Average => *v = a * *v + b * sq,
                        Adapt::Hold => {}
                    }
                    let pre = 1.0 / (v.sqrt() + floor);
                    *p += -half * (grad_u * pre) + sd * (xi(i) * pre.sqrt());
                }
            }
        }
    }

    /// The same update on tensors: the new parameters and momenta.
    #[allow(clippy::too_many_arguments)]
    fn update_tensor(
        &self,
        p: Tensor<3>,
        v: Tensor<3>,
        g: Tensor<3>,
        factors: Factors<'_>,
        eps: f64,
        adapt: Adapt,
        noise: Option<Tensor<3>>,
    ) -> (Tensor<3>, Tensor<3>) {
        let (grad_u, sigma) = match factors {
            Factors::Fixed(decay) if decay == 0.0 => (g.mul_scalar(self.scale), None),
            Factors::Fixed(decay) => (
                (g + p.clone().mul_scalar(decay)).mul_scalar(self.scale),
                None,
            ),
            Factors::PerChain { decay, sigma } => {
                let n = self.noise.map_or(self.scale, |l| l.n as f64);
                let g = match decay {
                    Some(d) => g + p.clone() * d.clone(),
                    None => g,
                };
                (g.mul_scalar(n), Some(sigma))
            }
        };
        // The normals times `sd`, and times each chain's σ when it learns σ.
        let scaled = |z: Tensor<3>, sd: f64| match sigma {
            Some(s) => z.mul_scalar(sd) * s.clone(),
            None => z.mul_scalar(sd),
        };
        match self.dynamics {
            Dynamics::Sgld => {
                let mut next = p - grad_u.mul_scalar(0.5 * eps);
                if let Some(z) = noise {
                    next = next + scaled(z, eps.sqrt());
                }
                (next, v)
            }
            Dynamics::Sghmc { friction } => {
                let mut next_v = v.mul_scalar(1.0 - friction) - grad_u.mul_scalar(eps);
                if let Some(z) = noise {
                    next_v = next_v + scaled(z, (2.0 * friction * eps).sqrt());
                }
                (p + next_v.clone(), next_v)
            }
            Dynamics::Psgld {
                rms_decay, floor, ..
            } => {
                let sq = || grad_u.clone() * grad_u.clone();
                let next_v = match adapt {
                    Adapt::Start => sq(),
                    Adapt::Average => v.mul_scalar(rms_decay) + sq().mul_scalar(1.0 - rms_decay),
                    Adapt::Hold => v,
                };
                let pre = next_v.clone().sqrt().add_scalar(floor).recip();
                let mut next = p - (grad_u * pre.clone()).mul_scalar(0.5 * eps);
                if let Some(z) = noise {
                    next = next + scaled(z * pre.sqrt(), eps.sqrt());
                }
                (next, next_v)
            }
        }
    }
}

impl Update for Langevin {
    /// The dynamics' own settings, and a job they can run: the plain network (no stochastic
    /// layer or adversarial pass: a chain's only noise is its Langevin noise), on a head whose
    /// loss scaled by N/σ² (N for labels) is the data's negative log-likelihood.
    fn validate(&self, settings: &TrainSettings) -> Result<(), MethodError> {
        self.check()?;
        if settings.dropout.is_some() || settings.adversarial.is_some() {
            return Err(MethodError::invalid(
                "SG-MCMC (langevin)",
                "with a stochastic layer or an adversarial pass",
                "the plain network: a chain's only noise is its Langevin noise",
            ));
        }
        if !settings.head().is_scaled_log_likelihood() {
            return Err(MethodError::invalid(
                "SG-MCMC (langevin) head",
                settings.head().describe(),
                "½·MSE or the Bernoulli logit: U(θ) is their loss scaled by N/σ² or N",
            ));
        }
        Ok(())
    }

    fn host(&self, (seed, id): (u64, u64), y: &[f32]) -> Box<dyn HostUpdate> {
        Box::new(HostChain {
            l: *self,
            noise: self.noise.map(|_| NoiseChain::new(seed, id, y)),
            z: Vec::new(),
        })
    }

    fn tensor(
        &self,
        keys: &[(u64, u64)],
        y: &[f32],
        _device: &Device,
        upload: &mut dyn FnMut(Vec<f32>, [usize; 3]) -> Tensor<3>,
    ) -> Box<dyn TensorUpdate> {
        let n = y.len() / keys.len().max(1);
        let noise = self.noise.map(|_| {
            let chains = (keys.iter().zip(y.chunks_exact(n.max(1))))
                .map(|(&(seed, id), y)| NoiseChain::new(seed, id, y))
                .collect();
            ChainNoises::new(self, chains, upload)
        });
        Box::new(TensorChains { l: *self, noise })
    }
}

/// One chain on the host: the dynamics, its σ² when learned, and the normals' scratch.
struct HostChain {
    l: Langevin,
    noise: Option<NoiseChain>,
    z: Vec<f32>,
}

impl HostUpdate for HostChain {
    fn batch(&mut self, out: &[f32], y: &[f32]) {
        if let Some(chain) = self.noise.as_mut() {
            chain.add_residuals(out, y);
        }
    }

    /// Every slot in turn: its factors at the chain's σ² (the weights pulled by λ, the biases
    /// not), and in a step with noise slot j's normals.
    fn step(
        &mut self,
        t: u64,
        total: u64,
        slots: HostSlots<'_>,
        normals: &mut dyn FnMut(u64, &mut [f32]),
    ) {
        let (eps, noisy) = self.l.at(t, total);
        let sigma2 = self.noise.as_ref().map(|c| c.sigma2);
        for (j, slot) in slots.enumerate() {
            let f = self.l.factors(sigma2, slot.weight_decay.unwrap_or(0.0));
            let decay = if slot.weight_decay.is_some() {
                f.decay
            } else {
                0.0
            };
            let len = slot.params.len();
            if self.z.len() < len {
                self.z.resize(len, 0.0);
            }
            let z = &mut self.z[..len];
            if noisy {
                normals(j as u64, z);
            }
            self.l.update_host(
                slot.params,
                slot.momenta,
                slot.grad,
                ChainFactors { decay, ..f },
                eps,
                self.l.adapt(t, total),
                noisy.then_some(&*z),
            );
        }
    }

    fn epoch_end(&mut self, n: usize) {
        if let Some(chain) = self.noise.as_mut() {
            chain.gibbs(n);
        }
    }

    fn noise_sd(&self) -> Option<f64> {
        self.noise.as_ref().map(|c| c.sigma2.sqrt())
    }
}

/// A chunk's chains on the device: the dynamics, and their σ² when learned.
struct TensorChains {
    l: Langevin,
    noise: Option<ChainNoises>,
}

impl TensorUpdate for TensorChains {
    fn batch(&mut self, out: &Tensor<3>, y: &Tensor<3>) {
        if let Some(chains) = self.noise.as_mut() {
            chains.add(out.clone() - y.clone());
        }
    }

    fn step(
        &mut self,
        t: u64,
        total: u64,
        slots: Vec<TensorSlot<'_>>,
        normals: &dyn Fn(u64, [usize; 2]) -> Tensor<3>,
    ) {
        let (eps, noisy) = self.l.at(t, total);
        for (j, slot) in slots.into_iter().enumerate() {
            let decay = slot.weight_decay.unwrap_or(0.0);
            let [_, rows, cols] = slot.params.dims();
            let z = noisy.then(|| normals(j as u64, [rows, cols]));
            let factors = match self.noise.as_ref() {
                Some(c) => Factors::PerChain {
                    decay: (decay != 0.0).then_some(&c.decay),
                    sigma: &c.sigma,
                },
                None => Factors::Fixed(decay),
            };
            let (p, v) = (slot.params.clone(), slot.momenta.clone());
            let adapt = self.l.adapt(t, total);
            let (np, nv) = self
                .l
                .update_tensor(p, v, slot.grad, factors, eps, adapt, z);
            (*slot.params, *slot.momenta) = (np, nv);
        }
    }

    fn epoch_end(
        &mut self,
        n: usize,
        read: &mut dyn FnMut(Tensor<3>) -> Vec<f32>,
        upload: &mut dyn FnMut(Vec<f32>, [usize; 3]) -> Tensor<3>,
    ) {
        if let Some(chains) = self.noise.as_mut() {
            chains.epoch_end(&self.l, n, read, upload);
        }
    }

    fn noise_sd(&self, r: usize) -> Option<f64> {
        self.noise.as_ref().map(|c| c.chains[r].sigma2.sqrt())
    }
}

#[cfg(test)]
#[path = "langevin_tests.rs"]
mod tests;
