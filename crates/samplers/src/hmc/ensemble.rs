//! The many-chain reference sampler (`algorithm = "chees"`): every chain of one data set runs
//! in lockstep, so that the step size, the trajectory length and the metric are adapted from
//! all of them at once, and the chains come in superchains for nested R̂.
//!
//! One repetition's C chains form K superchains of C/K chains; the chains of a superchain
//! start from one draw of the prior (the hidden layer's, with the output layer integrated
//! out; every weight's otherwise), so that nested R̂ (Margossian et al. 2024) can tell whether
//! the chains forgot where they started. Every iteration, per tempered rung (one without
//! tempering):
//!
//! 1. **HMC on θ** with the rung's shared step ε (times the chain's σ when σ is sampled, as the
//!    single chains do) and L = ⌈u_t·T/ε⌉ leapfrog steps, u_t the iteration's quasi-random
//!    jitter and T the shared trajectory length ([`super::chees`]);
//! 2. **unit moves** (`unit_sweeps`; `hot_unit_sweeps` on the rungs above the cold one; with
//!    the output layer integrated out): for each hidden unit j in turn, an independence
//!    proposal of its input weights and bias from their prior,
//!    accepted with probability min(1, p(y | θ_h', σ²)^β / p(y | θ_h, σ²)^β) (the prior is the
//!    proposal, so it cancels; the likelihood is the collapsed one, the output layer
//!    integrated out, at the rung's β). The target conditional of unit j is ∝ prior ×
//!    likelihood, so each proposal is a Metropolis–Hastings step that leaves p(θ_h | σ², y)^β
//!    invariant. Why they matter: with the output layer integrated out, a unit whose kink lies
//!    where no data pin it (outside the data, or in [002]'s gap, where any kink position is
//!    nearly in the span of the other features) is free up to its prior, and f between the
//!    data (the gap) moves with it; HMC's step is set by the pinned units' narrow directions,
//!    about 10³ times narrower, so a trajectory crosses a free unit's range in ~10³ steps
//!    (docs/quartic-002.md), while one proposal from the prior replaces it whole;
//! 3. the output layer's exact draw and σ²'s Gibbs step, as the single chains do.
//!
//! Then neighbouring rungs of each chain swap (parallel tempering, [`super::rungs`]).
//!
//! During the warm-up, after every iteration: the step by dual averaging toward
//! `target_accept`, on the harmonic mean of the chains' acceptance probabilities (TensorFlow
//! Probability's reduction for many chains: one chain about to diverge pulls the step down);
//! the trajectory length by ChEES; the metric (`metric = "diag"`) as the variance over chains
//! and iterations of Stan's slow windows, pooled over the chains. Sampling uses the averaged
//! step and length.
//!
//! The chains of a repetition run one after another within each iteration on one thread
//! (the collapsed potential's scratch is shared; each chain's state is a few hundred bytes);
//! repetitions run on the worker threads. Every chain draws from its own stream, so a
//! repetition's draws do not depend on the others'.

use std::ops::Range;

use uqbench_anchor::Rng;

use super::adapt::{DualAveraging, Welford, Windows};
use super::chain::{start_s2, ChainRecord, HmcTrainer};
use super::chees::{halton, Chees};
use super::host::{hmc_move, Buffers, Chain};
use super::rungs::{ladder, swap_neighbours, State};
use super::{HmcSettings, Trajectory};
use uqbench_core::MethodError;
use uqbench_engine::cpu::feature_major::feature_major;
use uqbench_engine::cpu::simd;
use uqbench_engine::trainer::{ChunkOut, ChunkTrainer, Layout, TrainOutput};
use uqbench_metrics::mcmc;

impl HmcSettings {
    /// Sweeps of unit moves on rung `k` (0: the cold one, whose draws are kept).
    pub(crate) fn sweeps_on(&self, k: usize) -> usize {
        match k {
            0 => self.unit_sweeps,
            _ => self.hot_unit_sweeps.unwrap_or(self.unit_sweeps),
        }
    }

    /// The first of `unit_sweeps` and `hot_unit_sweeps` that asks for unit moves: its key and
    /// sweeps.
    pub(crate) fn any_sweeps(&self) -> Option<(&'static str, usize)> {
        [
            ("unit_sweeps", self.unit_sweeps),
            ("hot_unit_sweeps", self.sweeps_on(1)),
        ]
        .into_iter()
        .find(|s| s.1 > 0)
    }
}

/// The chains of every repetition of a block, a repetition at a time.
pub(crate) struct EnsembleTrainer<'a> {
    /// The chains' data, seeds (per chain: repetition-major) and records.
    pub(crate) chains: HmcTrainer<'a>,
    /// Repetitions in the block.
    pub(crate) reps: usize,
    /// The instruction set of the host loops.
    pub(crate) level: simd::Level,
}

/// One chain: its rungs, its stream, what it records.
struct Walker {
    rungs: Vec<State>,
    stream: Rng,
    record: ChainRecord,
    /// `[draws, M]`.
    draws: Vec<f32>,
    train_sum: Vec<f64>,
    /// The draws `train_sum` adds up (every kept draw, those a doubling dropped included).
    kept: usize,
    failed: bool,
}

impl Walker {
    /// Keeps draw `s` of the cold rung: f at the test inputs and σ, and adds its fit at the
    /// training inputs to the running sum (`theta`, `f_test`, `f_train`: scratch).
    #[inline(always)]
    fn keep(
        &mut self,
        s: usize,
        chain: &mut Chain<'_>,
        theta: &mut [f32],
        (f_test, f_train): (&mut [f32], &mut [f32]),
    ) {
        let m = f_test.len();
        let cold = &self.rungs[0];
        cold.network(chain, theta);
        chain.net.forward(theta, chain.x_test, f_test);
        self.draws[s * m..(s + 1) * m].copy_from_slice(f_test);
        self.record.sigma.push(cold.s2.sqrt());
        chain.net.forward(theta, chain.x, f_train);
        for (acc, &v) in self.train_sum.iter_mut().zip(f_train.iter()) {
            *acc += f64::from(v);
        }
        self.kept += 1;
    }

    /// Before a doubling: keeps every other draw (the second of each pair, so that the
    /// kept draws sit every 2·`thin` iterations, as the doubled stage's will) in the first
    /// half of the slots, with their σ and energy.
    fn halve(&mut self, m: usize) {
        let half = self.draws.len() / m / 2;
        for s in 0..half {
            self.draws
                .copy_within((2 * s + 1) * m..(2 * s + 2) * m, s * m);
        }
        for v in [&mut self.record.sigma, &mut self.record.energy] {
            *v = v.iter().skip(1).step_by(2).copied().collect();
        }
    }
}

/// The iterations' schedule: the warm-up, then a sampling stage of `draws × thin` iterations
/// that keeps every `thin`-th state, and each doubling a stage as long as all sampling so far
/// at twice the thinning, whose `draws / 2` kept states fill the second half of the slots
/// (the first half holds every other earlier draw: [`Walker::halve`]).
struct Schedule {
    warmup: usize,
    draws: usize,
    thin: usize,
    /// The current stage's first iteration, the slot of its first kept state, and the
    /// iteration after its last.
    start: usize,
    first_slot: usize,
    end: usize,
    doublings: usize,
}

impl Schedule {
    fn new(warmup: usize, draws: usize, thin: usize) -> Schedule {
        Schedule {
            warmup,
            draws,
            thin,
            start: warmup,
            first_slot: 0,
            end: warmup + draws * thin,
            doublings: 0,
        }
    }

    /// The slot iteration `it` keeps its state in, if it keeps it.
    fn slot(&self, it: usize) -> Option<usize> {
        let j = it.checked_sub(self.start)?;
        ((j + 1) % self.thin == 0).then_some(self.first_slot + j / self.thin)
    }

    fn double(&mut self) {
        self.thin *= 2;
        self.start = self.end;
        self.first_slot = self.draws / 2;
        self.end = self.start + self.first_slot * self.thin;
        self.doublings += 1;
    }
}

/// A rung's adaptation, shared by every chain.
struct Shared {
    adapt: DualAveraging,
    length: Chees,
    inv_mass: Vec<f32>,
    window: Welford,
}

/// One chain's result: its record, its final potential (NaN if it failed), its draws of f at
/// the test inputs `[draws, M]` and its mean f at the training inputs.
type ChainResult = (ChainRecord, f64, Vec<f32>, Vec<f32>);

impl ChunkTrainer for EnsembleTrainer<'_> {
    fn layout(&self) -> Layout {
        let (n_train, n_test) = self.chains.points();
        Layout {
            replicas: self.reps,
            n_train,
            n_test,
            outputs: 1,
            passes: self.chains.config.chains * self.chains.config.draws,
            rates: false,
        }
    }

    fn bytes_per_replica(&self) -> usize {
        self.chains.config.chains * self.chains.bytes_per_replica()
    }

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, MethodError> {
        let c = self.chains.config;
        let (n, m) = self.points();
        let d = self.chains.shape.d_in;
        let (xt_train, xt_test) = (
            feature_major(&self.chains.x_train, d),
            feature_major(&self.chains.x_test, d),
        );
        let per = c.chains * c.draws * m;
        let mut pred = vec![0.0f32; range.len() * per];
        let mut train = vec![0.0f32; range.len() * n];
        let mut objective = vec![0.0f64; range.len()];
        for (i, rep) in range.clone().enumerate() {
            let first = rep * c.chains;
            let y = &self.chains.y[first * n..(first + 1) * n];
            let mut chain = Chain::new(&self.chains, &xt_train, &xt_test, y, self.level);
            let results = simd::dispatch_at(
                self.level,
                RunEnsemble {
                    trainer: self,
                    chain: &mut chain,
                    first,
                    y,
                },
            );
            let mut all = self.chains.records.lock().expect("no panics holding it");
            let mut u_sum = 0.0;
            for (k, (record, u, draws, train_mean)) in results.into_iter().enumerate() {
                pred[i * per + k * c.draws * m..i * per + (k + 1) * c.draws * m]
                    .copy_from_slice(&draws);
                for (t, v) in train[i * n..(i + 1) * n].iter_mut().zip(&train_mean) {
                    *t += v / c.chains as f32;
                }
                u_sum += u;
                all[first + k] = record;
            }
            objective[i] = u_sum / (c.chains * n) as f64;
        }
        Ok(ChunkOut {
            collected: Vec::new(),
            pred,
            train_pred: train,
            objective,
            rates: Vec::new(),
            steps: (c.warmup + c.draws * c.thin) as u64,
            uploads: 0,
            reads: 0,
        })
    }
}

/// One repetition's ensemble as an operation for [`simd::dispatch`].
struct RunEnsemble<'a, 'b, 'c> {
    trainer: &'a EnsembleTrainer<'b>,
    chain: &'a mut Chain<'c>,
    /// The repetition's first chain in the job.
    first: usize,
    y: &'a [f32],
}

impl simd::Op for RunEnsemble<'_, '_, '_> {
    type Output = Vec<ChainResult>;

    #[inline(always)]
    fn call(self, lanes: simd::Lanes) -> Self::Output {
        self.chain.net.lanes = lanes;
        self.trainer.run(self.chain, self.first, self.y)
    }
}

impl EnsembleTrainer<'_> {
    /// A superchain's starting state from the seed `seed`: the hidden layer's prior draw with
    /// the output layer integrated out, else every weight and bias from its prior N(0, σ_p²).
    fn start(&self, chain: &Chain<'_>, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        match &chain.collapsed {
            Some(col) => col.prior_draw(&mut rng),
            None => {
                let sd = self.chains.config.prior_sd;
                (0..chain.net.dim)
                    .map(|_| (sd * rng.normal()) as f32)
                    .collect()
            }
        }
    }

    /// Every iteration of one repetition's chains (see the module docs), from its first
    /// chain's index `first` in the job, with targets `y`.
    #[inline(always)]
    fn run(&self, chain: &mut Chain<'_>, first: usize, y: &[f32]) -> Vec<ChainResult> {
        let t = &self.chains;
        let c = t.config;
        let (n, m) = (y.len(), t.x_test.len() / t.shape.d_in);
        let betas = ladder(c.temperatures, c.beta_min);
        let mut walkers = self.walkers(chain, first, y, &betas, m);
        let dim = walkers[0].rungs[0].q.len();
        let windows = Windows::new(c.warmup, c.metric);
        let t0 = c.step_size * c.leapfrog_steps as f64;
        let mut shared: Vec<Shared> = betas
            .iter()
            .map(|_| Shared {
                adapt: DualAveraging::new(c.step_size, 1),
                length: Chees::new(t0),
                inv_mass: vec![1.0; dim],
                window: Welford::new(dim),
            })
            .collect();
        let cap = (1usize << c.max_tree_depth) as f64;
        let mut bufs = Buffers::new(dim);
        let mut ends = vec![vec![0.0f32; dim]; c.chains];
        let mut moms = vec![vec![0.0f32; dim]; c.chains];
        let mut starts = vec![vec![0.0f32; dim]; c.chains];
        let mut alphas = vec![0.0f64; c.chains];
        let mut theta = vec![0.0f32; chain.net.dim];
        let (mut f_test, mut f_train) = (vec![0.0f32; m], vec![0.0f32; n]);
        let mut accepted = vec![0.0f64; c.chains];
        let mut plan = Schedule::new(c.warmup, c.draws, c.thin);
        let mut it = 0;
        loop {
            if it == plan.end && !self.double(&mut plan, &mut walkers, m) {
                break;
            }
            let (warm, u) = (it < c.warmup, halton(it));
            // The slot of a sampling iteration whose state is kept (every `thin`-th).
            let kept = plan.slot(it);
            for (k, sh) in shared.iter_mut().enumerate() {
                let eps = sh.adapt.eps[0];
                let length = if warm {
                    sh.length.length()
                } else {
                    sh.length.final_length()
                };
                let steps = match c.trajectory {
                    Trajectory::Chees => (u * length / eps).ceil(),
                    Trajectory::Fixed => (2.0 * u * c.leapfrog_steps as f64).ceil(),
                }
                .clamp(1.0, cap) as usize;
                for (ch, w) in walkers.iter_mut().enumerate() {
                    let rung = &mut w.rungs[k];
                    starts[ch].copy_from_slice(&rung.q);
                    let step = eps
                        * if t.noise.is_none() {
                            rung.s2.sqrt()
                        } else {
                            1.0
                        };
                    let inv = rung.inv_s2();
                    let here = rung.here();
                    let mv = hmc_move(
                        steps,
                        chain,
                        here,
                        step as f32,
                        &sh.inv_mass,
                        inv,
                        &mut w.stream,
                        &mut bufs,
                    );
                    ends[ch].copy_from_slice(&bufs.q);
                    moms[ch].copy_from_slice(&bufs.p);
                    alphas[ch] = mv.alpha;
                    let mut nll = None;
                    for _ in 0..c.sweeps_on(k) {
                        let (tried, took, at) = unit_moves(chain, rung, &mut w.stream, nll);
                        nll = Some(at);
                        w.record.units_tried += tried;
                        w.record.units_accepted += took;
                        if took > 0 && t.noise.is_some() {
                            rung.refresh(chain);
                        }
                    }
                    w.failed |= !rung.draw_output(chain, &mut w.stream);
                    t.gibbs_sigma(chain, rung, n, &mut w.stream);
                    w.record.leapfrogs += mv.leapfrogs;
                    if k == 0 && !warm {
                        if kept.is_some() {
                            w.record.energy.push(mv.h0);
                        }
                        w.record.divergent += u64::from(mv.divergent);
                        accepted[ch] += mv.accepted;
                    }
                }
                if warm {
                    self.adapt(sh, it, u, cap, (&starts, &ends, &moms, &alphas));
                    if windows.collects(it) {
                        for w in &walkers {
                            sh.window.push(&w.rungs[k].q);
                        }
                        if windows.ends(it) {
                            sh.inv_mass = sh.window.take_inverse_mass();
                            sh.adapt.restart();
                        }
                    }
                }
            }
            for w in &mut walkers {
                if w.rungs.len() > 1 {
                    swap_neighbours(&mut w.rungs, it, n, chain, &mut w.stream, &mut w.record);
                }
                if let Some(slot) = kept {
                    w.keep(slot, chain, &mut theta, (&mut f_test, &mut f_train));
                }
            }
            it += 1;
        }
        self.results(walkers, accepted, &shared[0], &plan)
    }

    /// At the end of a sampling stage: doubles it (see [`Schedule`]) while the certificate
    /// fails on what more draws can mend and doublings are left; whether it did.
    fn double(&self, plan: &mut Schedule, walkers: &mut [Walker], m: usize) -> bool {
        if plan.doublings == self.chains.config.doublings || !self.extend(walkers, m) {
            return false;
        }
        plan.double();
        for w in walkers {
            w.halve(m);
        }
        true
    }

    /// Whether a repetition's chains, at the end of a sampling stage, are worth doubling: not
    /// failed, without a divergent transition (more draws cannot undo one), and not
    /// certified (its nested R̂ or ESS at some input short of the certificate).
    fn extend(&self, walkers: &[Walker], m: usize) -> bool {
        let c = self.chains.config;
        if walkers.iter().any(|w| w.failed) {
            return false;
        }
        let divergent: u64 = walkers.iter().map(|w| w.record.divergent).sum();
        if divergent > 0 {
            return false;
        }
        let rows: Vec<Vec<f64>> = walkers
            .iter()
            .flat_map(|w| w.draws.chunks(m))
            .map(|row| row.iter().map(|&v| f64::from(v)).collect())
            .collect();
        !mcmc::nested_certificate(&rows, m, c.draws, c.superchains, 0).certified
    }

    /// The repetition's walkers, one per chain, each with its rungs at the start of its
    /// superchain (a prior draw per superchain, from its first chain's seed), σ² at its start
    /// and the output layer drawn.
    #[inline(always)]
    fn walkers(
        &self,
        chain: &mut Chain<'_>,
        first: usize,
        y: &[f32],
        betas: &[f64],
        m: usize,
    ) -> Vec<Walker> {
        let t = &self.chains;
        let c = t.config;
        let per_super = c.chains / c.superchains.max(1);
        let out_len = t.shape.layers().last().map_or(0, |&(i, _)| i + 1);
        let s2 = start_s2(t.noise, y);
        let mut walkers: Vec<Walker> = Vec::with_capacity(c.chains);
        let mut start = Vec::new();
        for k in 0..c.chains {
            if k % per_super == 0 {
                start = self.start(chain, t.init[first + k]);
            }
            let mut w = Walker {
                rungs: betas
                    .iter()
                    .map(|&beta| State::new(beta, start.clone(), s2, out_len))
                    .collect(),
                stream: Rng::new(t.stream[first + k]),
                record: ChainRecord {
                    energy: Vec::with_capacity(c.draws),
                    sigma: Vec::with_capacity(c.draws),
                    ..ChainRecord::default()
                },
                draws: vec![0.0; c.draws * m],
                train_sum: vec![0.0; y.len()],
                kept: 0,
                failed: false,
            };
            for rung in &mut w.rungs {
                rung.refresh(chain);
                w.failed |= !rung.draw_output(chain, &mut w.stream);
            }
            walkers.push(w);
        }
        walkers
    }

    /// Every chain's result: its record with the shared step, length and metric of the cold
    /// rung (`cold`), its acceptance over the sampling iterations from `accepted`, its draws
    /// and its mean fit at the training inputs.
    fn results(
        &self,
        walkers: Vec<Walker>,
        accepted: Vec<f64>,
        cold: &Shared,
        plan: &Schedule,
    ) -> Vec<ChainResult> {
        let (eps, length) = (cold.adapt.eps[0], cold.length.final_length());
        let sampled = plan.end - plan.warmup;
        walkers
            .into_iter()
            .zip(accepted)
            .map(|(mut w, acc)| {
                w.record.accept_rate = acc / sampled as f64;
                w.record.step_size = eps;
                w.record.trajectory_length = length;
                w.record.inv_mass = cold.inv_mass.clone();
                w.record.iterations = sampled as u64;
                w.record.doublings = plan.doublings as u64;
                let train_mean = (w.train_sum.iter())
                    .map(|v| (v / w.kept as f64) as f32)
                    .collect();
                let u = if w.failed { f64::NAN } else { w.rungs[0].u };
                (w.record, u, w.draws, train_mean)
            })
            .collect()
    }

    /// The warm-up's shared updates after iteration `it` (jitter `u`, at most `cap` steps):
    /// the step by dual averaging on the harmonic mean of the acceptance probabilities, the
    /// trajectory length by ChEES from every chain's `(start, end, end momenta, α)`.
    fn adapt(
        &self,
        sh: &mut Shared,
        it: usize,
        u: f64,
        cap: f64,
        (starts, ends, moms, alphas): (&[Vec<f32>], &[Vec<f32>], &[Vec<f32>], &[f64]),
    ) {
        let c = self.chains.config;
        // The harmonic mean, with a floor so that one zero does not make it undefined.
        let harmonic = alphas.len() as f64 / alphas.iter().map(|a| 1.0 / a.max(1e-10)).sum::<f64>();
        let eps = sh.adapt.eps[0];
        sh.length.update(
            &refs(starts),
            &refs(ends),
            &refs(moms),
            alphas,
            &sh.inv_mass,
            u,
            cap * eps,
            2 * it >= c.warmup,
        );
        sh.adapt
            .update(&[harmonic], c.target_accept, it + 1 == c.warmup);
    }
}

/// The unit moves of one rung's state (see the module docs): each hidden unit's input weights
/// and bias proposed from their prior in turn and accepted by the collapsed likelihood's ratio
/// at the rung's temperature, from the state's collapsed −log-likelihood `here` where the
/// previous sweep returned it (computed otherwise, with the inverse through which the sweeps'
/// proposals are scored: `Collapsed::begin_units`). Returns the proposals made and
/// accepted, and the state's −log-likelihood at the end (nothing between two sweeps changes
/// the state or σ², so the next sweep starts from it and from the inverse its accepted
/// proposals kept up to date). U and ∇U at the state are stale after an accepted proposal
/// (the caller refreshes them).
#[inline(always)]
fn unit_moves(
    chain: &mut Chain<'_>,
    rung: &mut State,
    stream: &mut Rng,
    here: Option<f64>,
) -> (u64, u64, f64) {
    let inv = rung.inv_s2();
    let col = chain
        .collapsed
        .as_mut()
        .expect("unit moves need the output layer integrated out (checked up front)");
    let ((w, d), sd) = (col.units(), col.prior_sd());
    // A match, not `unwrap_or_else`: a closure may be compiled outside the dispatched copy.
    let mut here = match here {
        Some(v) => v,
        None => col.begin_units(&rung.q, inv),
    };
    let mut unit = vec![0.0f32; d + 1];
    let mut took = 0;
    for j in 0..w {
        for u in unit.iter_mut() {
            *u = (sd * stream.normal()) as f32;
        }
        // θ_h is W₀ `[d, W]` row-major, then b₀ `[W]`: unit j's entries are j, W + j, …
        let there = col.unit_neg_log_lik(j, &unit, inv);
        let log_u = stream.uniform().ln();
        if there.is_finite() && log_u < here - there {
            col.keep_unit();
            for (a, &u) in unit.iter().enumerate() {
                rung.q[a * w + j] = u;
            }
            here = there;
            took += 1;
        } else {
            col.restore_unit();
        }
    }
    (w as u64, took, here)
}

/// Borrowed rows.
fn refs(v: &[Vec<f32>]) -> Vec<&[f32]> {
    v.iter().map(|r| &r[..]).collect()
}

/// The ensemble's output (one replica per repetition: its chains' draws chain-major, the
/// chains' mean fit and objective) in the single chains' layout, one replica per chain:
/// the draws are already in that order, the rest is repeated per chain.
pub(super) fn per_chain(out: TrainOutput, chains: usize) -> TrainOutput {
    let n = out.train_pred.len() / out.final_objective.len().max(1);
    let repeat = |v: &[f64]| {
        v.iter()
            .flat_map(|&x| std::iter::repeat_n(x, chains))
            .collect()
    };
    TrainOutput {
        passes: out.passes / chains,
        train_pred: out
            .train_pred
            .chunks(n.max(1))
            .flat_map(|row| std::iter::repeat_n(row, chains).flatten().copied())
            .collect(),
        final_objective: repeat(&out.final_objective),
        diverged: out
            .diverged
            .iter()
            .flat_map(|&d| std::iter::repeat_n(d, chains))
            .collect(),
        ..out
    }
}

#[cfg(test)]
mod tests {
    use super::{ChainRecord, Rng, Schedule, Walker};

    #[test]
    fn a_doubled_stage_keeps_every_draw_at_the_new_thinning() {
        // Warm-up 3, 6 draws every 2nd iteration: kept at 4, 6, …, 14. A doubling halves them
        // (the second of each pair: 6, 10, 14, with their σ and energy) and keeps 3 more every
        // 4th iteration (18, 22, 26): the six slots' iterations are evenly spaced at the new
        // thinning and end with the stage. Each draw of f (2 inputs), σ and energy holds the
        // iteration that kept it.
        let m = 2;
        let mut w = Walker {
            rungs: Vec::new(),
            stream: Rng::new(0),
            record: ChainRecord::default(),
            draws: vec![0.0; 6 * m],
            train_sum: Vec::new(),
            kept: 0,
            failed: false,
        };
        let mut plan = Schedule::new(3, 6, 2);
        let keep = |w: &mut Walker, plan: &Schedule, from: usize| {
            for it in from..plan.end {
                if let Some(s) = plan.slot(it) {
                    w.draws[s * m..(s + 1) * m].fill(it as f32);
                    w.record.sigma.push(it as f64);
                    w.record.energy.push(it as f64);
                }
            }
        };
        keep(&mut w, &plan, 0);
        let at = |w: &Walker| w.draws.chunks(m).map(|c| c[0] as f64).collect::<Vec<_>>();
        assert_eq!(at(&w), [4.0, 6.0, 8.0, 10.0, 12.0, 14.0]);
        w.halve(m);
        plan.double();
        keep(&mut w, &plan, 15);
        let want = [6.0, 10.0, 14.0, 18.0, 22.0, 26.0];
        assert_eq!(at(&w), want);
        assert_eq!(w.record.sigma, want);
        assert_eq!(w.record.energy, want);
        assert!(w.draws.chunks(m).all(|c| c[0] == c[1]));
        assert_eq!((plan.end, plan.thin, plan.doublings), (27, 4, 1));
    }
}
