//! ChEES adaptation of the trajectory length from many chains at once (Hoffman, Radul &
//! Sountsov 2021, "An adaptive MCMC scheme for setting trajectory lengths in Hamiltonian Monte
//! Carlo", Algorithm 1), for the ensemble's chains (`ensemble.rs`).
//!
//! The criterion is the change in the chains' centred squared distance,
//! ChEES(T) = ¼ E[(‖θ' − E θ'‖² − ‖θ − E θ‖²)²], θ' the end of a trajectory of length T from
//! θ. With the jittered length t = u·T (u the iteration's jitter) and θ' moving with velocity
//! v' = M⁻¹p' at its end, ∂θ'/∂T = u·v', so an unbiased-in-the-limit estimate of its gradient
//! from C chains, each weighted by its acceptance probability α_c, is
//!
//!   ĝ = Σ_c α_c (‖θ'_c − θ̄'‖² − ‖θ_c − θ̄‖²) (θ'_c − θ̄')ᵀ u p'_c / Σ_c α_c,
//!
//! where θ̄ and θ̄' are the means over the chains of the starts and the proposals, and the
//! squared distances are in the metric's coordinates (θ_i/√m_i with M⁻¹ = diag(m), in which
//! the velocity is √m_i p_i, so the inner product is Σ_i (θ'_i − θ̄'_i) p'_i). The paper (and
//! TensorFlow Probability's `GradientBasedTrajectoryLengthAdaptation`, the reference
//! implementation) ascends with Adam on log T, β₁ = 0, β₂ = 0.95, learning rate 0.025; we use
//! the same, with T·ĝ as the gradient with respect to log T. The length is capped at `max_steps`
//! leapfrog steps of the current step size (TFP's `max_leapfrog_steps`), and sampling uses
//! the average of log T over the second half of the warm-up.
//!
//! Every iteration's steps are L = ⌈u·T/ε⌉ with u the base-2 van der Corput (Halton) sequence,
//! the same u for every chain of a rung (the paper's jitter: quasi-random lengths decorrelate
//! the trajectories from any period of the posterior).

/// The trajectory length's adaptation state.
#[derive(Debug, Clone)]
pub(crate) struct Chees {
    log_t: f64,
    /// Adam's second moment (β₁ = 0: no first moment).
    v: f64,
    updates: usize,
    /// Σ log T over the averaging half, and its count.
    sum_log_t: f64,
    averaged: usize,
}

/// Adam's β₂ and learning rate on log T (the reference implementation's defaults).
const BETA2: f64 = 0.95;
const RATE: f64 = 0.025;

impl Chees {
    /// Starting at trajectory length `t0`.
    pub(crate) fn new(t0: f64) -> Chees {
        Chees {
            log_t: t0.ln(),
            v: 0.0,
            updates: 0,
            sum_log_t: 0.0,
            averaged: 0,
        }
    }

    /// The current trajectory length T.
    pub(crate) fn length(&self) -> f64 {
        self.log_t.exp()
    }

    /// The length sampling uses: the mean of log T over the updates marked `average`, or the
    /// current one when none was.
    pub(crate) fn final_length(&self) -> f64 {
        if self.averaged == 0 {
            self.length()
        } else {
            (self.sum_log_t / self.averaged as f64).exp()
        }
    }

    /// One update from every chain's transition: its start `starts[c]`, its proposal
    /// `ends[c]` with end momenta `momenta[c]` (accepted or not), its acceptance probability
    /// `alphas[c]`, under the inverse metric `inv_mass`, at jitter `u`. The length stays at or
    /// under `cap`; `average` adds the result to the average that sampling uses.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn update(
        &mut self,
        starts: &[&[f32]],
        ends: &[&[f32]],
        momenta: &[&[f32]],
        alphas: &[f64],
        inv_mass: &[f32],
        u: f64,
        cap: f64,
        average: bool,
    ) {
        let g = gradient(starts, ends, momenta, alphas, inv_mass, u);
        if g.is_finite() {
            // d/d log T = T · d/dT.
            let g = g * self.length();
            self.updates += 1;
            self.v = BETA2 * self.v + (1.0 - BETA2) * g * g;
            let v_hat = self.v / (1.0 - BETA2.powi(self.updates as i32));
            self.log_t += RATE * g / (v_hat.sqrt() + 1e-12);
        }
        self.log_t = self.log_t.min(cap.ln());
        if average {
            self.sum_log_t += self.log_t;
            self.averaged += 1;
        }
    }
}

/// The ChEES gradient estimate ĝ of the module docs (with respect to T); NaN when no chain
/// has a positive acceptance probability.
fn gradient(
    starts: &[&[f32]],
    ends: &[&[f32]],
    momenta: &[&[f32]],
    alphas: &[f64],
    inv_mass: &[f32],
    u: f64,
) -> f64 {
    let dim = inv_mass.len();
    let chains = starts.len() as f64;
    let mean = |rows: &[&[f32]]| -> Vec<f64> {
        let mut m = vec![0.0f64; dim];
        for r in rows {
            for (a, &v) in m.iter_mut().zip(r.iter()) {
                *a += f64::from(v);
            }
        }
        m.iter().map(|v| v / chains).collect()
    };
    let (m0, m1) = (mean(starts), mean(ends));
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for c in 0..starts.len() {
        let (mut d0, mut d1, mut dot) = (0.0f64, 0.0f64, 0.0f64);
        for i in 0..dim {
            let w = 1.0 / f64::from(inv_mass[i]);
            let a = f64::from(starts[c][i]) - m0[i];
            let b = f64::from(ends[c][i]) - m1[i];
            d0 += a * a * w;
            d1 += b * b * w;
            dot += b * f64::from(momenta[c][i]);
        }
        let g = (d1 - d0) * dot * u;
        let alpha = alphas[c];
        if g.is_finite() && alpha > 0.0 {
            num += alpha * g;
            den += alpha;
        }
    }
    if den > 0.0 {
        num / den
    } else {
        f64::NAN
    }
}

/// The base-2 van der Corput sequence at `i` (i ≥ 0), in (0, 1]: 1, ½, ¼, ¾, ⅛, …
pub(crate) fn halton(i: usize) -> f64 {
    let (mut r, mut f, mut k) = (0.0, 0.5, i + 1);
    while k > 0 {
        r += f * (k & 1) as f64;
        k >>= 1;
        f *= 0.5;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halton_fills_the_unit_interval() {
        assert_eq!(
            (0..7).map(halton).collect::<Vec<_>>(),
            vec![0.5, 0.25, 0.75, 0.125, 0.625, 0.375, 0.875]
        );
        // Every prefix of length 2^k − 1 is the grid j/2^k.
        let mut v: Vec<f64> = (0..15).map(halton).collect();
        v.sort_by(f64::total_cmp);
        for (j, x) in v.iter().enumerate() {
            assert_eq!(*x, (j + 1) as f64 / 16.0);
        }
    }

    #[test]
    fn the_gradient_points_to_the_half_period_of_a_harmonic_oscillator() {
        // Chains at exact draws of N(0, I₂) with exact Hamiltonian flow (θ' = θ cos t + p sin t,
        // p' = −θ sin t + p cos t, α = 1): the centred squared distance after time t changes
        // by ‖θ'‖² − ‖θ‖², largest in variance at t = π/2 (a quarter period, where θ' is
        // independent of θ) and zero at t = π. So ĝ > 0 for t < π/2 and ĝ < 0 between π/2
        // and π. Its expectation is d/dt ChEES(t) = d/dt 2 sin²t = 2 sin 2t in two dimensions:
        // +2.0 at t = 0.8 and −2.0 at t = 2.3; one chain's term has an sd of about 5, so 4 000
        // chains give a standard error of about 0.08, and the bound 0.1 sits 20 of them away.
        let mut rng = uqbench_anchor::Rng::new(3);
        let n = 4000;
        let states: Vec<[f32; 2]> = (0..n)
            .map(|_| [rng.normal() as f32, rng.normal() as f32])
            .collect();
        let moms: Vec<[f32; 2]> = (0..n)
            .map(|_| [rng.normal() as f32, rng.normal() as f32])
            .collect();
        for (t, sign) in [(0.8f64, 1.0), (2.3, -1.0)] {
            let (s, c) = (t.sin() as f32, t.cos() as f32);
            let ends: Vec<[f32; 2]> = states
                .iter()
                .zip(&moms)
                .map(|(q, p)| [q[0] * c + p[0] * s, q[1] * c + p[1] * s])
                .collect();
            let end_p: Vec<[f32; 2]> = states
                .iter()
                .zip(&moms)
                .map(|(q, p)| [-q[0] * s + p[0] * c, -q[1] * s + p[1] * c])
                .collect();
            let starts: Vec<&[f32]> = states.iter().map(|v| &v[..]).collect();
            let e: Vec<&[f32]> = ends.iter().map(|v| &v[..]).collect();
            let m: Vec<&[f32]> = end_p.iter().map(|v| &v[..]).collect();
            let g = gradient(&starts, &e, &m, &vec![1.0; n], &[1.0, 1.0], 1.0);
            assert!(g * sign > 0.1, "t = {t}: ĝ = {g}");
        }
    }

    #[test]
    fn the_length_stays_under_its_cap_and_averages_the_second_half() {
        let mut ch = Chees::new(1.0);
        let starts: Vec<&[f32]> = vec![&[0.0], &[1.0]];
        let ends: Vec<&[f32]> = vec![&[-3.0], &[3.0]];
        let moms: Vec<&[f32]> = vec![&[-1.0], &[1.0]];
        // The distance grows with the trajectory: ĝ > 0, T rises until the cap of 2.
        for i in 0..200 {
            ch.update(
                &starts,
                &ends,
                &moms,
                &[1.0, 1.0],
                &[1.0],
                1.0,
                2.0,
                i >= 100,
            );
            assert!(ch.length() <= 2.0 + 1e-12);
        }
        assert!((ch.length() - 2.0).abs() < 1e-9);
        assert!((ch.final_length() - 2.0).abs() < 1e-9);
    }
}
