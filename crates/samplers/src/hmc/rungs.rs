//! One host chain's iterations, with parallel tempering (`temperatures` = K > 1) and the
//! output layer integrated out (`marginalise_output`, [`super::collapsed`]).
//!
//! A chain holds K rungs at inverse temperatures β_k = `beta_min`^(k/(K−1)), k = 0 … K−1
//! (geometric, β₀ = 1). Rung k targets p_β(θ, σ²) ∝ p(y | θ, σ²)^β p(θ) p(σ²). Tempering a
//! Gaussian likelihood is a Gaussian likelihood of variance σ²/β up to a factor in σ²
//! alone: N(y | f, σ²)^β ∝ (σ²)^{−βN/2} exp(−β·SSE/(2σ²)). So every rung runs the same
//! iteration as an untempered chain with 1/σ² replaced by β/σ² in the θ move (and in the
//! output layer's exact draw), and σ²'s Gibbs step becomes InvGamma(a₀ + βN/2,
//! b₀ + β·SSE/2). Each rung adapts its own step and metric.
//!
//! After every iteration, neighbouring rungs propose to swap their states, the pairs (k, k+1)
//! with k even on even iterations and k odd on odd ones (the deterministic even–odd scheme of
//! Syed et al. 2022, which moves states across the ladder faster than random pairs). With
//! ℓ = log p(y | θ, σ²) = −(N/2) log σ² − SSE/(2σ²) (+ const), the swap is accepted with
//! probability min(1, exp((β_k − β_{k+1})(ℓ_{k+1} − ℓ_k))): the ratio of the product of both
//! rungs' targets after and before, the priors cancelling. Only rung 0 (β = 1) records draws,
//! energies and divergences; its chain is a Markov chain with the posterior as its stationary
//! law, and states found by the hot rungs (which cross the barriers between modes of f that
//! the cold rung's trajectories do not) reach it through the swaps.

use uqbench_anchor::Rng;

use super::adapt::{DualAveraging, Welford, Windows};
use super::chain::{start_s2, ChainRecord, HmcTrainer, PRIOR_A0, PRIOR_B0};
use super::host::{hmc_move, nuts_move, Buffers, Chain, Move};
use super::Algorithm;

/// The inverse temperatures of a ladder of `k` rungs down to `beta_min` (geometric).
pub(crate) fn ladder(k: usize, beta_min: f64) -> Vec<f64> {
    if k == 1 {
        return vec![1.0];
    }
    (0..k)
        .map(|i| beta_min.powf(i as f64 / (k - 1) as f64))
        .collect()
}

/// One rung's state: its inverse temperature, the move's position with its potential and
/// gradient, the whole network's SSE, σ² and the output layer's last draw.
pub(super) struct State {
    pub(super) beta: f64,
    /// The move's state: the whole network, or its hidden layer when the output layer is
    /// integrated out.
    pub(super) q: Vec<f32>,
    pub(super) grad: Vec<f32>,
    pub(super) u: f64,
    /// The whole network's SSE at the state.
    pub(super) sse: f64,
    pub(super) s2: f64,
    /// The output layer (a, c) drawn last (with the output layer integrated out).
    pub(super) out: Vec<f64>,
}

/// A single chain's adaptation of one rung: its own step and metric (the ensemble's chains
/// share theirs, `ensemble.rs`).
struct Adaptation {
    adapt: DualAveraging,
    inv_mass: Vec<f32>,
    window: Welford,
}

impl State {
    /// The move's state as `hmc_move` and the NUTS transition take it: (q, ∇U, U, SSE).
    pub(super) fn here(&mut self) -> (&mut [f32], &mut [f32], &mut f64, &mut f64) {
        (
            &mut self.q[..],
            &mut self.grad[..],
            &mut self.u,
            &mut self.sse,
        )
    }

    /// A rung at inverse temperature `beta` starting at `q` with σ² `s2` and an output layer of
    /// `out_len` values.
    pub(super) fn new(beta: f64, q: Vec<f32>, s2: f64, out_len: usize) -> State {
        let dim = q.len();
        State {
            beta,
            q,
            grad: vec![0.0; dim],
            u: 0.0,
            sse: 0.0,
            s2,
            out: vec![0.0; out_len],
        }
    }

    /// 1/σ² of this rung's θ move, β/σ² (through f32, as the plain chain's).
    pub(super) fn inv_s2(&self) -> f64 {
        f64::from((self.beta / self.s2) as f32)
    }

    /// U and ∇U (and, for the whole network, the SSE) at the state.
    #[inline(always)]
    pub(super) fn refresh(&mut self, chain: &mut Chain<'_>) {
        let inv = self.inv_s2();
        let (u, sse) = chain.potential(&self.q, inv, &mut self.grad);
        self.u = u;
        if chain.collapsed.is_none() {
            self.sse = sse;
        }
    }

    /// ℓ = −(N/2) log σ² − SSE/(2σ²), the untempered log-likelihood of the state.
    fn log_lik(&self, n: usize) -> f64 {
        -0.5 * n as f64 * self.s2.ln() - 0.5 * self.sse / self.s2
    }

    /// The exact draw of the output layer (with it integrated out), which sets the SSE; false
    /// where the features' Gram matrix cannot be factored.
    #[inline(always)]
    pub(super) fn draw_output(&mut self, chain: &mut Chain<'_>, stream: &mut Rng) -> bool {
        let inv = self.inv_s2();
        let Some(col) = chain.collapsed.as_mut() else {
            return true;
        };
        match col.draw_output(&self.q, inv, stream, &mut self.out) {
            Some(sse) => {
                self.sse = sse;
                true
            }
            None => false,
        }
    }

    /// The whole network's flat parameters at the state into `theta`.
    pub(super) fn network(&self, chain: &Chain<'_>, theta: &mut [f32]) {
        match &chain.collapsed {
            Some(col) => col.network(&self.q, &self.out, theta),
            None => theta.copy_from_slice(&self.q),
        }
    }
}

impl HmcTrainer<'_> {
    /// Every iteration of one chain (see the module docs): its record, its final potential,
    /// its draws of f at the test inputs `[draws, M]` and its mean f at the training inputs.
    /// Inlined into the chain's dispatched operation, with the potential.
    #[inline(always)]
    pub(super) fn run_chain(
        &self,
        chain: &mut Chain<'_>,
        theta: &mut [f32],
        y: &[f32],
        stream: &mut Rng,
    ) -> (ChainRecord, f64, Vec<f32>, Vec<f32>) {
        let c = self.config;
        let (n, m) = (y.len(), self.x_test.len() / self.shape.d_in);
        let start = match &chain.collapsed {
            // The hidden layer from its prior: dispersed starts (the output layer needs none).
            Some(col) => col.prior_draw(stream),
            None => theta.to_vec(),
        };
        let dim = start.len();
        let out_len = self.shape.layers().last().map_or(0, |&(i, _)| i + 1);
        let windows = Windows::new(c.warmup, c.metric);
        let s2 = start_s2(self.noise, y);
        let mut rungs: Vec<State> = ladder(c.temperatures, c.beta_min)
            .into_iter()
            .map(|beta| State::new(beta, start.clone(), s2, out_len))
            .collect();
        let mut adapt: Vec<Adaptation> = (0..rungs.len())
            .map(|_| Adaptation {
                adapt: DualAveraging::new(c.step_size, 1),
                inv_mass: vec![1.0; dim],
                window: Welford::new(dim),
            })
            .collect();
        let mut bufs = Buffers::new(dim);
        let mut record = ChainRecord {
            energy: Vec::with_capacity(c.draws),
            sigma: Vec::with_capacity(c.draws),
            ..ChainRecord::default()
        };
        let mut failed = false;
        for rung in &mut rungs {
            rung.refresh(chain);
            failed |= !rung.draw_output(chain, stream);
        }
        let mut accepted = 0.0f64;
        let mut draws = vec![0.0f32; c.draws * m];
        let mut train_sum = vec![0.0f64; n];
        let mut f_test = vec![0.0f32; m];
        let mut f_train = vec![0.0f32; n];
        for it in 0..c.warmup + c.draws {
            let sampling = it >= c.warmup;
            for (k, (rung, ad)) in rungs.iter_mut().zip(&mut adapt).enumerate() {
                let mv = self.iterate(chain, rung, ad, it, &windows, stream, &mut bufs);
                failed |= !rung.draw_output(chain, stream);
                self.gibbs_sigma(chain, rung, n, stream);
                record.leapfrogs += mv.leapfrogs;
                if k == 0 && sampling {
                    record.energy.push(mv.h0);
                    record.divergent += u64::from(mv.divergent);
                    record.saturated += u64::from(mv.saturated);
                    accepted += mv.accepted;
                }
            }
            if rungs.len() > 1 {
                swap_neighbours(&mut rungs, it, n, chain, stream, &mut record);
            }
            if sampling {
                let s = it - c.warmup;
                let cold = &rungs[0];
                cold.network(chain, theta);
                chain.net.forward(theta, chain.x_test, &mut f_test);
                draws[s * m..(s + 1) * m].copy_from_slice(&f_test);
                record.sigma.push(cold.s2.sqrt());
                chain.net.forward(theta, chain.x, &mut f_train);
                for (acc, &v) in train_sum.iter_mut().zip(&f_train) {
                    *acc += f64::from(v);
                }
            }
        }
        record.accept_rate = accepted / c.draws as f64;
        record.step_size = adapt[0].adapt.eps[0];
        record.inv_mass = adapt[0].inv_mass.clone();
        let train_mean = train_sum
            .iter()
            .map(|v| (v / c.draws as f64) as f32)
            .collect();
        // A state that became non-finite shows in its potential: the chain diverged.
        let u = if failed { f64::NAN } else { rungs[0].u };
        (record, u, draws, train_mean)
    }

    /// One rung's θ move at iteration `it`, with the warm-up's step and metric adaptation.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn iterate(
        &self,
        chain: &mut Chain<'_>,
        rung: &mut State,
        ad: &mut Adaptation,
        it: usize,
        windows: &Windows,
        stream: &mut Rng,
        bufs: &mut Buffers,
    ) -> Move {
        let c = self.config;
        // The step scales with σ when σ is sampled (the module's doc says why).
        let eps = ad.adapt.eps[0]
            * if self.noise.is_none() {
                rung.s2.sqrt()
            } else {
                1.0
            };
        let inv = rung.inv_s2();
        let here = rung.here();
        let mv = match c.algorithm {
            Algorithm::Hmc | Algorithm::Chees => {
                let step = (if c.jitter {
                    eps * (0.5 + stream.uniform())
                } else {
                    eps
                }) as f32;
                let steps = c.leapfrog_steps;
                hmc_move(steps, chain, here, step, &ad.inv_mass, inv, stream, bufs)
            }
            Algorithm::Nuts => {
                let depth = c.max_tree_depth;
                nuts_move(
                    chain,
                    here,
                    eps as f32,
                    &ad.inv_mass,
                    inv,
                    depth,
                    stream,
                    bufs,
                )
            }
        };
        if it < c.warmup {
            ad.adapt
                .update(&[mv.alpha], c.target_accept, it + 1 == c.warmup);
        }
        if windows.collects(it) {
            ad.window.push(&rung.q);
            if windows.ends(it) {
                ad.inv_mass = ad.window.take_inverse_mass();
                ad.adapt.restart();
            }
        }
        mv
    }

    /// σ²'s Gibbs step at the rung's temperature, InvGamma(a₀ + βN/2, b₀ + β·SSE/2), and U, ∇U
    /// at the new σ²; nothing with σ fixed (U does not depend on the output layer's draw).
    #[inline(always)]
    pub(super) fn gibbs_sigma(
        &self,
        chain: &mut Chain<'_>,
        rung: &mut State,
        n: usize,
        stream: &mut Rng,
    ) {
        if self.noise.is_some() {
            return;
        }
        let shape = PRIOR_A0 + rung.beta * n as f64 / 2.0;
        let rate = PRIOR_B0 + rung.beta * rung.sse / 2.0;
        rung.s2 = rate / stream.gamma(shape);
        rung.refresh(chain);
    }
}

/// The swaps between neighbouring rungs after iteration `it` (see the module docs); the
/// swapped rungs' potentials are recomputed at their own temperatures.
#[inline(always)]
pub(super) fn swap_neighbours(
    rungs: &mut [State],
    it: usize,
    n: usize,
    chain: &mut Chain<'_>,
    stream: &mut Rng,
    record: &mut ChainRecord,
) {
    let mut k = it % 2;
    while k + 1 < rungs.len() {
        let (lo, hi) = rungs.split_at_mut(k + 1);
        let (a, b) = (&mut lo[k], &mut hi[0]);
        let log_ratio = (a.beta - b.beta) * (b.log_lik(n) - a.log_lik(n));
        record.swaps_tried += 1;
        if log_ratio.is_finite() && stream.uniform().ln() < log_ratio {
            record.swaps_accepted += 1;
            std::mem::swap(&mut a.q, &mut b.q);
            std::mem::swap(&mut a.sse, &mut b.sse);
            std::mem::swap(&mut a.s2, &mut b.s2);
            std::mem::swap(&mut a.out, &mut b.out);
            a.refresh(chain);
            b.refresh(chain);
        }
        k += 2;
    }
}
