//! Stochastic-gradient MCMC's updates in place of Adam (spec §11): the engine's replicas become
//! chains, every chain of every repetition one replica of the job, on both executions.
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

use burn::tensor::Tensor;

use uqbench_core::MethodError;

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

/// SG-MCMC's settings for a job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Langevin {
    /// The dynamics.
    pub dynamics: Dynamics,
    /// ε (SGLD) or η (SGHMC); the cycles' ε₀.
    pub step_size: f64,
    /// The schedule.
    pub schedule: StepSchedule,
    /// The factor that turns the engine's gradient into ∇U: N/σ² (N for labels).
    pub scale: f64,
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

    /// Whether the settings make sense.
    pub fn validate(&self) -> Result<(), MethodError> {
        MethodError::positive("step_size", self.step_size)?;
        MethodError::positive("Langevin scale (N/σ²)", self.scale)?;
        if let Dynamics::Sghmc { friction } = self.dynamics {
            if !(friction > 0.0 && friction <= 1.0) {
                return Err(MethodError::invalid(
                    "friction",
                    friction,
                    "a number in (0, 1]",
                ));
            }
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

    /// One slot's update on the host: parameters `p`, momenta `v` (SGHMC), the engine's
    /// gradient `g` without the pull, the slot's L2 factor `decay`, and the step's normals
    /// (`None` in an exploration step).
    pub(crate) fn update_host(
        &self,
        p: &mut [f32],
        v: &mut [f32],
        g: &[f32],
        decay: f64,
        eps: f64,
        noise: Option<&[f32]>,
    ) {
        let (scale, decay) = (self.scale as f32, decay as f32);
        let xi = |i: usize| noise.map_or(0.0, |z| z[i]);
        match self.dynamics {
            Dynamics::Sgld => {
                let (half, sd) = ((0.5 * eps) as f32, eps.sqrt() as f32);
                for (i, (p, &g)) in p.iter_mut().zip(g).enumerate() {
                    let grad_u = scale * (g + decay * *p);
                    *p += -half * grad_u + sd * xi(i);
                }
            }
            Dynamics::Sghmc { friction } => {
                let (keep, eta) = ((1.0 - friction) as f32, eps as f32);
                let sd = (2.0 * friction * eps).sqrt() as f32;
                for (i, ((p, v), &g)) in p.iter_mut().zip(v.iter_mut()).zip(g).enumerate() {
                    let grad_u = scale * (g + decay * *p);
                    *v = keep * *v - eta * grad_u + sd * xi(i);
                    *p += *v;
                }
            }
        }
    }

    /// The same update on tensors: the new parameters and momenta.
    pub(crate) fn update_tensor(
        &self,
        p: Tensor<3>,
        v: Tensor<3>,
        g: Tensor<3>,
        decay: f64,
        eps: f64,
        noise: Option<Tensor<3>>,
    ) -> (Tensor<3>, Tensor<3>) {
        let grad_u = if decay == 0.0 {
            g.mul_scalar(self.scale)
        } else {
            (g + p.clone().mul_scalar(decay)).mul_scalar(self.scale)
        };
        match self.dynamics {
            Dynamics::Sgld => {
                let mut next = p - grad_u.mul_scalar(0.5 * eps);
                if let Some(z) = noise {
                    next = next + z.mul_scalar(eps.sqrt());
                }
                (next, v)
            }
            Dynamics::Sghmc { friction } => {
                let mut next_v = v.mul_scalar(1.0 - friction) - grad_u.mul_scalar(eps);
                if let Some(z) = noise {
                    next_v = next_v + z.mul_scalar((2.0 * friction * eps).sqrt());
                }
                (p + next_v.clone(), next_v)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cyclical_schedule_follows_zhang_et_al() {
        let l = Langevin {
            dynamics: Dynamics::Sgld,
            step_size: 0.4,
            schedule: StepSchedule::Cyclical {
                cycles: 4,
                exploration: 0.5,
            },
            scale: 1.0,
        };
        // T = 100, K = 4: cycles of 25 steps; step 1 starts a cycle at ε₀, step 26 the next.
        assert_eq!(l.at(1, 100), (0.4, false));
        assert_eq!(l.at(26, 100), (0.4, false));
        let (mid, noisy) = l.at(13, 100); // r = 12/25 < ½: still exploring
        assert!((mid - 0.2 * ((std::f64::consts::PI * 0.48).cos() + 1.0)).abs() < 1e-12);
        assert!(!noisy);
        assert!(l.at(14, 100).1, "r = 13/25 ≥ ½ samples");
        assert!(l.at(25, 100).0 < 0.01 && l.at(25, 100).1);
    }
}
