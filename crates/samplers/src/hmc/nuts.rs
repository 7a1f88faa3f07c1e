//! The No-U-Turn sampler's transition (Hoffman & Gelman 2014, in the form Stan runs it:
//! `base_nuts.hpp`, multinomial sampling with the generalised no-U-turn criterion), for one
//! chain on the host: `algorithm = "nuts"` of HMC.
//!
//! One transition from θ with momenta ρ ∼ N(0, M) doubles a trajectory of leapfrog steps,
//! each doubling in a random direction, until the trajectory turns back on itself or reaches
//! 2^`max_depth` steps:
//! - a subtree of depth d is two subtrees of depth d − 1 built one after the other; a state
//!   of energy H has weight e^{H₀ − H}; within a subtree the proposal is the second half's
//!   with probability w_second / (w_first + w_second) (uniform progressive sampling), and at
//!   the top a new subtree's proposal replaces the current sample with probability
//!   min(1, w_new / w_old) (biased progressive sampling, which favours the far end);
//! - the criterion: with ρ the sum of the momenta over a (sub)trajectory and ρ♯ = M⁻¹ρ at its
//!   two ends, both ρ♯_begin·ρ > 0 and ρ♯_end·ρ > 0 must hold; after every merge also across
//!   the merged halves, each extended by the other's adjacent momentum (Stan's extra checks,
//!   which catch U-turns a merge hides);
//! - a state with H − H₀ > 1000 or a non-finite H ends the transition as divergent (Stan's
//!   rule); the subtree it was in is discarded;
//! - the acceptance statistic for the step size's dual averaging is the mean of
//!   min(1, e^{H₀ − H}) over every state the transition visited.
//!
//! Floating point as the HMC host chains: positions, momenta and gradients in f32, energies
//! and the sums ρ in f64.

use uqbench_anchor::Rng;

/// A state of the trajectory: position, momentum, the gradient of U there, U and the SSE.
#[derive(Clone)]
pub(crate) struct State {
    pub(crate) q: Vec<f32>,
    pub(crate) p: Vec<f32>,
    pub(crate) g: Vec<f32>,
    pub(crate) u: f64,
    pub(crate) sse: f64,
}

/// What one transition did.
pub(crate) struct Outcome {
    /// The selected state (its momentum is not used again).
    pub(crate) state: State,
    /// The mean of min(1, e^{H₀ − H}) over the visited states.
    pub(crate) accept_stat: f64,
    /// Whether the trajectory diverged.
    pub(crate) divergent: bool,
    /// Leapfrog steps (gradient evaluations) taken.
    pub(crate) leapfrogs: u64,
    /// The number of doublings.
    pub(crate) depth: usize,
}

/// A finished subtree: its proposal, log of its summed weight, its summed momentum and the
/// momenta (and M⁻¹·momenta) at its end nearest the tree it extends and at its far end.
struct Subtree {
    propose: State,
    log_w: f64,
    rho: Vec<f64>,
    near_p: Vec<f64>,
    near_sharp: Vec<f64>,
    far_p: Vec<f64>,
    far_sharp: Vec<f64>,
}

/// Trajectory building for one transition.
struct Builder<'a, F> {
    potential: &'a mut F,
    inv_mass: &'a [f32],
    step: f32,
    h0: f64,
    rng: &'a mut Rng,
    leapfrogs: u64,
    sum_metro: f64,
    divergent: bool,
}

/// ρ♯_a·ρ > 0 and ρ♯_b·ρ > 0: the trajectory has not turned back at either end.
fn criterion(sharp_a: &[f64], sharp_b: &[f64], rho: &[f64]) -> bool {
    let dot = |a: &[f64]| a.iter().zip(rho).map(|(x, y)| x * y).sum::<f64>();
    dot(sharp_a) > 0.0 && dot(sharp_b) > 0.0
}

fn add(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// log(e^a + e^b).
fn log_sum_exp(a: f64, b: f64) -> f64 {
    let m = a.max(b);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + ((a - m).exp() + (b - m).exp()).ln()
}

/// The kinetic energy ½ Σ m·ρ² of momenta `p` under the inverse mass `inv_mass`.
#[inline(always)]
pub(crate) fn kinetic(p: &[f32], inv_mass: &[f32]) -> f64 {
    0.5 * p
        .iter()
        .zip(inv_mass)
        .map(|(&v, &mi)| f64::from(mi) * f64::from(v) * f64::from(v))
        .sum::<f64>()
}

impl<F: FnMut(&[f32], &mut [f32]) -> (f64, f64)> Builder<'_, F> {
    fn wide(p: &[f32]) -> Vec<f64> {
        p.iter().map(|&v| f64::from(v)).collect()
    }

    fn sharp(&self, p: &[f32]) -> Vec<f64> {
        p.iter()
            .zip(self.inv_mass)
            .map(|(&v, &m)| f64::from(v) * f64::from(m))
            .collect()
    }

    /// One leapfrog step of `z` in direction `dir` (±1).
    fn leapfrog(&mut self, z: &mut State, dir: f32) {
        let e = dir * self.step;
        for (pi, &gi) in z.p.iter_mut().zip(&z.g) {
            *pi -= 0.5 * e * gi;
        }
        for ((qi, &pi), &mi) in z.q.iter_mut().zip(&z.p).zip(self.inv_mass) {
            *qi += e * mi * pi;
        }
        (z.u, z.sse) = (self.potential)(&z.q, &mut z.g);
        for (pi, &gi) in z.p.iter_mut().zip(&z.g) {
            *pi -= 0.5 * e * gi;
        }
        self.leapfrogs += 1;
    }

    /// A subtree of 2^`depth` steps from the edge `z` (advanced in place) in direction
    /// `dir`; `None` when it diverged or turned back.
    fn build(&mut self, depth: usize, z: &mut State, dir: f32) -> Option<Subtree> {
        if depth == 0 {
            self.leapfrog(z, dir);
            let mut h = z.u + kinetic(&z.p, self.inv_mass);
            if !h.is_finite() {
                h = f64::INFINITY;
            }
            if h - self.h0 > uqbench_metrics::mcmc::DIVERGENCE_ENERGY {
                self.divergent = true;
                return None;
            }
            let log_w = self.h0 - h;
            self.sum_metro += log_w.min(0.0).exp();
            let (p, sharp) = (Self::wide(&z.p), self.sharp(&z.p));
            return Some(Subtree {
                propose: z.clone(),
                log_w,
                rho: p.clone(),
                near_p: p.clone(),
                near_sharp: sharp.clone(),
                far_p: p,
                far_sharp: sharp,
            });
        }
        let first = self.build(depth - 1, z, dir)?;
        let second = self.build(depth - 1, z, dir)?;
        let log_w = log_sum_exp(first.log_w, second.log_w);
        let take_second = self.rng.uniform() < (second.log_w - log_w).exp();
        let rho = add(&first.rho, &second.rho);
        let persist = criterion(&first.near_sharp, &second.far_sharp, &rho)
            && criterion(
                &first.near_sharp,
                &second.near_sharp,
                &add(&first.rho, &second.near_p),
            )
            && criterion(
                &first.far_sharp,
                &second.far_sharp,
                &add(&second.rho, &first.far_p),
            );
        if !persist {
            return None;
        }
        Some(Subtree {
            propose: if take_second {
                second.propose
            } else {
                first.propose
            },
            log_w,
            rho,
            near_p: first.near_p,
            near_sharp: first.near_sharp,
            far_p: second.far_p,
            far_sharp: second.far_sharp,
        })
    }
}

/// One NUTS transition from `start` (its `p` is replaced by fresh momenta ρ ∼ N(0, M) from
/// `rng`) with leapfrog step `step` under the inverse mass `inv_mass`, at most 2^`max_depth`
/// steps; `potential(q, grad)` returns (U, SSE) and writes ∇U. Returns the outcome and the
/// starting energy H₀.
pub(crate) fn transition<F: FnMut(&[f32], &mut [f32]) -> (f64, f64)>(
    mut start: State,
    potential: &mut F,
    inv_mass: &[f32],
    step: f32,
    max_depth: usize,
    rng: &mut Rng,
) -> (Outcome, f64) {
    for (pi, &mi) in start.p.iter_mut().zip(inv_mass) {
        *pi = (rng.normal() / f64::from(mi).sqrt()) as f32;
    }
    let h0 = start.u + kinetic(&start.p, inv_mass);
    let mut b = Builder {
        potential,
        inv_mass,
        step,
        h0,
        rng,
        leapfrogs: 0,
        sum_metro: 0.0,
        divergent: false,
    };
    let p0 = Builder::<F>::wide(&start.p);
    let sharp0 = b.sharp(&start.p);
    // The tree's two edges, with their momenta (and M⁻¹·momenta), and its summed momentum.
    let (mut bwd, mut fwd) = (start.clone(), start.clone());
    let (mut bwd_p, mut bwd_sharp) = (p0.clone(), sharp0.clone());
    let (mut fwd_p, mut fwd_sharp) = (p0.clone(), sharp0);
    let mut rho = p0;
    let mut sample = start;
    let mut log_w = 0.0;
    let mut depth = 0;
    while depth < max_depth {
        let forward = b.rng.uniform() < 0.5;
        let sub = if forward {
            b.build(depth, &mut fwd, 1.0)
        } else {
            b.build(depth, &mut bwd, -1.0)
        };
        let Some(sub) = sub else { break };
        depth += 1;
        if sub.log_w > log_w || b.rng.uniform() < (sub.log_w - log_w).exp() {
            sample = sub.propose.clone();
        }
        log_w = log_sum_exp(log_w, sub.log_w);
        let total = add(&rho, &sub.rho);
        // The merged tree's ends, and the two halves' adjacent ends for the extra checks.
        let persist = if forward {
            let ok = criterion(&bwd_sharp, &sub.far_sharp, &total)
                && criterion(&bwd_sharp, &sub.near_sharp, &add(&rho, &sub.near_p))
                && criterion(&fwd_sharp, &sub.far_sharp, &add(&sub.rho, &fwd_p));
            (fwd_p, fwd_sharp) = (sub.far_p, sub.far_sharp);
            ok
        } else {
            let ok = criterion(&sub.far_sharp, &fwd_sharp, &total)
                && criterion(&sub.far_sharp, &bwd_sharp, &add(&sub.rho, &bwd_p))
                && criterion(&sub.near_sharp, &fwd_sharp, &add(&rho, &sub.near_p));
            (bwd_p, bwd_sharp) = (sub.far_p, sub.far_sharp);
            ok
        };
        rho = total;
        if !persist {
            break;
        }
    }
    let accept_stat = if b.leapfrogs == 0 {
        0.0
    } else {
        b.sum_metro / b.leapfrogs as f64
    };
    let outcome = Outcome {
        state: sample,
        accept_stat,
        divergent: b.divergent,
        leapfrogs: b.leapfrogs,
        depth,
    };
    (outcome, h0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// U and ∇U of N(0, diag(sd²)) in f32, SSE 0.
    fn gaussian(sd: &[f64]) -> impl FnMut(&[f32], &mut [f32]) -> (f64, f64) + '_ {
        move |q: &[f32], g: &mut [f32]| {
            let mut u = 0.0;
            for ((gi, &qi), &s) in g.iter_mut().zip(q).zip(sd) {
                let p = 1.0 / (s * s);
                u += 0.5 * f64::from(qi) * f64::from(qi) * p;
                *gi = (f64::from(qi) * p) as f32;
            }
            (u, 0.0)
        }
    }

    fn start(q: Vec<f32>, potential: &mut impl FnMut(&[f32], &mut [f32]) -> (f64, f64)) -> State {
        let mut g = vec![0.0; q.len()];
        let (u, sse) = potential(&q, &mut g);
        State {
            p: vec![0.0; q.len()],
            q,
            g,
            u,
            sse,
        }
    }

    /// A Gaussian whose scales differ 100-fold, under the identity metric: NUTS's trajectories
    /// lengthen until they turn, and its draws have the target's moments. 4 000 transitions,
    /// taken as four consecutive chains of 1 000 for ArviZ's diagnostics: the mean within 4 of
    /// its Monte-Carlo standard errors (`mcse_mean`, from the draws' own ESS), the variance
    /// within 4·√(2/ESS) relative (the standard error of a variance from ESS independent
    /// normal draws), with the bulk ESS as the ESS. The ESS must pass 200 (measured: 3 136 on
    /// the narrow coordinate, 385 on the wide one, whose trajectories stop at U-turns before
    /// crossing it), so that the bounds can fail: at ESS 200 the variance's is 40%.
    #[test]
    fn nuts_samples_a_badly_scaled_gaussian() {
        let sd = [0.1, 10.0];
        let mut potential = gaussian(&sd);
        let mut rng = Rng::new(17);
        let mut state = start(vec![1.0, -5.0], &mut potential);
        let inv_mass = [1.0f32, 1.0];
        let (mut sum, mut sq) = ([0.0f64; 2], [0.0f64; 2]);
        let (mut steps, mut accept, n) = (0u64, 0.0, 4000);
        let mut draws: [Vec<f64>; 2] = [Vec::with_capacity(n), Vec::with_capacity(n)];
        for it in 0..n + 200 {
            let (out, _) = transition(state, &mut potential, &inv_mass, 0.05, 12, &mut rng);
            assert!(!out.divergent);
            state = out.state;
            if it >= 200 {
                steps += out.leapfrogs;
                accept += out.accept_stat;
                for j in 0..2 {
                    let v = f64::from(state.q[j]);
                    sum[j] += v;
                    sq[j] += v * v;
                    draws[j].push(v);
                }
            }
        }
        for j in 0..2 {
            let chains: Vec<Vec<f64>> = draws[j].chunks(n / 4).map(<[f64]>::to_vec).collect();
            let d = uqbench_metrics::mcmc::diagnose(&chains).unwrap();
            assert!(d.ess_bulk > 200.0, "{j}: bulk ESS {}", d.ess_bulk);
            let mean = sum[j] / n as f64;
            let var = sq[j] / n as f64 - mean * mean;
            assert!(
                mean.abs() < 4.0 * d.mcse_mean,
                "{j}: mean {mean} (mcse {})",
                d.mcse_mean
            );
            let rel = var / (sd[j] * sd[j]) - 1.0;
            let bound = 4.0 * (2.0 / d.ess_bulk).sqrt();
            assert!(
                rel.abs() < bound,
                "{j}: variance {var} ({rel:+.3}, bound {bound:.3})"
            );
        }
        // Crossing the wide direction (sd 10) at steps of 0.05 takes hundreds of steps.
        let mean_steps = steps as f64 / n as f64;
        assert!(
            mean_steps > 100.0,
            "{mean_steps} leapfrog steps per transition"
        );
        assert!(
            (0.6..=1.0).contains(&(accept / n as f64)),
            "{}",
            accept / n as f64
        );
    }

    /// A step far beyond the stable one (2·sd) on a stiff Gaussian blows the energy up: the
    /// transition is divergent and stays where it was.
    #[test]
    fn a_step_that_must_diverge_is_flagged() {
        let sd = [0.01];
        let mut potential = gaussian(&sd);
        let mut rng = Rng::new(3);
        let state = start(vec![0.005], &mut potential);
        let (out, _) = transition(state, &mut potential, &[1.0], 1.0, 10, &mut rng);
        assert!(out.divergent);
        assert_eq!(
            out.state.q,
            vec![0.005],
            "the divergent subtree is not sampled"
        );
        assert_eq!(out.leapfrogs, 1);
    }
}
