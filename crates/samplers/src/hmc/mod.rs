//! A Bayesian neural network sampled by Hamiltonian Monte Carlo ([002]'s BNN-MCMC, the gold
//! standard), on the engine's trainer: chains × repetitions are the replicas, so every chain
//! of every data set runs in one tensor program.
//!
//! Target, per replica: p(θ, σ² | y) ∝ Π_n N(y_n | f_θ(x_n), σ²) · N(θ | 0, σ_p² I) · p(σ²),
//! with p(σ²) = InvGamma(a₀, b₀) (a₀ = b₀ = 1) unless σ is fixed (`noise_sd`). One iteration:
//! 1. HMC on θ given σ²: momenta ρ ~ N(0, I), `leapfrog_steps` leapfrog steps of size ε with
//!    the potential U(θ) = SSE(θ)/(2σ²) + ‖θ‖²/(2σ_p²) and its gradient from the network's
//!    hand-written backward pass ([`uqbench_engine::layers::linear_backward`]), then a Metropolis
//!    accept of the end point with probability min(1, e^{H₀ − H₁}), H = U + ½‖ρ‖², per
//!    replica on the device (a mask).
//! 2. Gibbs on σ² given θ: σ² ~ InvGamma(a₀ + N/2, b₀ + SSE/2) (conjugate), on the host from
//!    each replica's SSE.
//!
//! For labels (a classification task) the target is p(θ | y) ∝ Π_n Bernoulli(y_n |
//! sigmoid(f_θ(x_n))) · N(θ | 0, σ_p² I): U(θ) = Σ_n (softplus(f_n) − y_n·f_n) + ‖θ‖²/(2σ_p²)
//! with ∂U/∂f = sigmoid(f) − y, no σ and no Gibbs step; the draws are logits.
//!
//! With σ sampled, the leapfrog step is ε·σ for the current Gibbs draw of σ: where the data
//! dominate, U's curvature in θ is ≈ JᵀJ/σ², so the largest stable step grows with σ, and a
//! step adapted to the typical σ is unstable after a Gibbs draw of a small σ² (a conjugate
//! linear model with 6 points had 547 divergent transitions in 10 000 with one step for
//! every σ, and none with ε·σ). The step may depend on σ because σ stays fixed during the HMC
//! move on θ (a kernel for θ | σ with any σ-dependent step is still reversible for it); the
//! warm-up adapts ε, the step per unit σ, which `step_size` then reports.
//!
//! Every iteration jitters the step to ε·U(0.5, 1.5), so that no fixed trajectory length
//! resonates with the posterior. Warm-up: the first `warmup` iterations adapt each replica's ε by Nesterov dual averaging
//! toward an acceptance rate of `target_accept` (Hoffman & Gelman 2014, Algorithm 5:
//! γ = 0.05, t₀ = 10, κ = 0.75, μ = ln 10ε₀) and are discarded; sampling then uses the
//! averaged ε̄. With `metric = "diag"` (the default) the warm-up also adapts a diagonal
//! mass matrix in Stan's windows ([`adapt`]): momenta ρ ~ N(0, M), kinetic energy ½ρᵀM⁻¹ρ,
//! and each parameter moves on its own posterior scale (a linear model whose two weights'
//! posterior sds differ 1 000-fold: worst-input bulk ESS 99 with the identity, 1 475 with
//! it). A trajectory whose energy error H₁ − H₀ exceeds 1000 or is not finite is a
//! divergent transition (Stan's rule); it is counted after warm-up per repetition
//! (`divergent_transitions`). A proposal with a non-finite energy is rejected (the state is
//! selected, never blended, so no NaN leaks into it); a chain whose state itself becomes
//! non-finite makes its repetition diverged (left out of the metrics and counted, like any
//! divergence).
//!
//! Output per repetition: the `draws` of f(x*) of every chain pooled; the prediction is
//! their mean, the CI their empirical quantiles, and the PI of y the quantiles of the mixture
//! of N(f_s, σ_s²) over the draws s (each draw with its own σ draw); `noise_std` records the
//! mean σ draw. Diagnostics (spec §8, [`uqbench_metrics::mcmc`]): per test input the
//! rank-normalised R̂ = max(bulk, tail) and the bulk and tail ESS of f(x*), reported per
//! repetition at the worst input (`rhat_max`, `ess_bulk_min`, `ess_tail_min`), with
//! `rhat_flagged` = 1 where R̂ > `rhat_threshold` (1.01); E-BFMI per chain (`ebfmi_min`, and
//! `ebfmi_flagged`, the chains below 0.3); `divergent_transitions`; and `reference_grade` = 1
//! where the repetition meets posteriordb's standard (R̂ < 1.01, bulk and tail ESS > 400 at
//! every input, no divergent transitions). Also `accept_rate` and `step_size`.
//!
//! `algorithm = "chees"` is the many-chain reference ([`ensemble`]): a data set's chains run
//! in lockstep with their step, metric and (optionally, [`chees`]) trajectory length adapted
//! from all of them, in superchains certified by nested R̂ against a threshold calibrated on
//! its null (`nested_rhat_max`, `nested_rhat_threshold`), with unit moves
//! (`unit_sweeps`) and thinning (`thin`).
//!
//! Two options change the iteration, both on the host chains on every backend (no tensor
//! version): `marginalise_output` runs the θ move on the hidden layer with the output layer
//! integrated out and draws the output layer exactly ([`collapsed`]), and `temperatures`
//! runs K tempered rungs per chain with swaps between neighbours, the draws from the β = 1
//! rung ([`rungs`]). Both sample the same posterior; docs/quartic-002.md measures them.
//!
//! The chains' momenta and accept draws come from each replica's own host stream. Two
//! implementations run the same sampler from the same draws: on a CPU backend, for networks
//! whose layers are small ([`uqbench_engine::mlp::MlpShape::host_sized`]), `host.rs` (fused loops over one chain's points,
//! all of its iterations in cache, chain after chain; `uqbench bench hmc` measures it); on a
//! GPU, and for larger layers, `chain.rs` (tensor operations over every chain
//! of a chunk, momenta uploaded and H and SSE read back every iteration). Their
//! floating-point order differs, so from the same seeds they give results equal in
//! distribution, not bit for bit (docs/performance.md compares them).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use uqbench_metrics::mcmc::{self, EBFMI_THRESHOLD};

pub use adapt::Metric;
use chain::{ChainRecord, HmcTrainer};
use ensemble::{per_chain, EnsembleTrainer};
use uqbench_core::noise::{fixed_noise_sd, Tau};
use uqbench_core::MethodError;
use uqbench_core::{
    Compute, Extra, Family, Likelihood, Method, MonteCarloErrors, Prediction, Task,
};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::trainer::{run_chunks, Resources, TrainOutput};

mod adapt;
pub(crate) mod chain;
mod chees;
mod collapsed;
mod ensemble;
mod host;
mod lanes64;
mod nuts;
mod rungs;

/// HMC's own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HmcSettings {
    /// Chains per repetition (4).
    pub chains: usize,
    /// Warm-up iterations per chain, discarded (1000).
    pub warmup: usize,
    /// Draws per chain after warm-up (1000).
    pub draws: usize,
    /// Leapfrog steps per iteration (20).
    pub leapfrog_steps: usize,
    /// Initial step size ε₀ (0.01), adapted during warm-up.
    pub step_size: f64,
    /// Target acceptance rate of the adaptation (0.8).
    pub target_accept: f64,
    /// Prior sd σ_p of every weight and bias (1).
    pub prior_sd: f64,
    /// Noise sd: sampled (Gibbs, InvGamma(1, 1) prior on σ²) when left out, a number, or
    /// `"known"`.
    pub noise_sd: Option<Tau>,
    /// R̂ above which a repetition is flagged (1.01).
    pub rhat_threshold: f64,
    /// Jitter every iteration's step to ε·U(0.5, 1.5) (true; see the module docs). `false`
    /// keeps ε fixed, as `uqbench bench hmc` and its JAX peer do.
    pub jitter: bool,
    /// The warm-up's mass matrix: `"diag"` (adapted in Stan's windows, the default) or
    /// `"unit"` (the identity).
    pub metric: Metric,
    /// The move on θ: `"hmc"` (`leapfrog_steps` steps, the default) or `"nuts"` (the No-U-Turn
    /// sampler, trajectories of up to 2^`max_tree_depth` steps; host chains on every backend).
    pub algorithm: Algorithm,
    /// NUTS's largest tree depth (10, Stan's).
    pub max_tree_depth: usize,
    /// Integrate the output layer out ([`collapsed`]): the θ move runs on the hidden layer
    /// with the output layer's conjugate Gaussian marginalised, and every iteration draws the
    /// output layer exactly (false; one hidden layer and a Gaussian likelihood).
    pub marginalise_output: bool,
    /// Parallel tempering ([`rungs`]): rungs per chain at inverse temperatures
    /// β_k = `beta_min`^(k/(K−1)) on the likelihood, with swaps between neighbours; the draws
    /// come from the β = 1 rung (1: no tempering).
    pub temperatures: usize,
    /// The hottest rung's inverse temperature (0.05).
    pub beta_min: f64,
    /// Superchains for nested R̂ (`algorithm = "chees"`): the chains come in this many groups
    /// of `chains / superchains`, each group from one starting point (0: every chain its own,
    /// which makes nested R̂ the plain one).
    pub superchains: usize,
    /// Sweeps of unit moves per iteration (`algorithm = "chees"` with `marginalise_output`):
    /// in each, every hidden unit's input weights and bias are proposed from their prior and
    /// accepted by the collapsed likelihood's ratio ([`ensemble`]) (0: none).
    pub unit_sweeps: usize,
    /// Sweeps of unit moves on the tempered rungs (β < 1), whose states are not kept but
    /// swapped down to the cold rung (unset: `unit_sweeps`; no effect without tempering).
    /// Fewer there make an iteration cheaper but mix worse: the hot rungs' unit moves carry
    /// most of the kinks' reallocation (docs/quartic-002.md, width 5: 1 instead of 4 took
    /// 0.72× the time per iteration and certified fewer data sets after more doublings).
    pub hot_unit_sweeps: Option<usize>,
    /// Iterations per kept draw (`algorithm = "chees"`): sampling runs `draws × thin`
    /// iterations and keeps every `thin`-th, so that the draws' storage and scoring cost stay
    /// those of `draws` while the chains run longer (1).
    pub thin: usize,
    /// Doublings of the sampling stage while a repetition is not certified (`algorithm =
    /// "chees"`, even `draws`; [`ensemble`]): after `draws × thin` iterations, if the
    /// certificate fails on R̂ or ESS (not on a divergence), the chains run as long again
    /// at twice the thinning, up to this many times (0).
    pub doublings: usize,
    /// The ensemble's trajectory length (`algorithm = "chees"`): `"chees"` (adapted, capped at
    /// 2^`max_tree_depth` steps) or `"fixed"` (⌈2u·`leapfrog_steps`⌉ steps, u the
    /// iteration's jitter in (0, 1]: `leapfrog_steps` on average).
    pub trajectory: Trajectory,
}

/// The ensemble's trajectory length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trajectory {
    /// Adapted by ChEES from every chain ([`chees`]).
    #[default]
    Chees,
    /// A fixed mean number of leapfrog steps, jittered.
    Fixed,
}

/// HMC's move on θ given σ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// A fixed number of leapfrog steps and a Metropolis accept.
    #[default]
    Hmc,
    /// The No-U-Turn sampler (Hoffman & Gelman 2014, as Stan runs it: [`nuts`]).
    Nuts,
    /// Many chains of one data set in lockstep ([`ensemble`]): jittered HMC whose step and
    /// trajectory length (ChEES, [`chees`]) are adapted from all chains at once, in
    /// superchains for nested R̂; host chains on every backend.
    Chees,
}

impl Default for HmcSettings {
    fn default() -> Self {
        HmcSettings {
            chains: 4,
            warmup: 1000,
            draws: 1000,
            leapfrog_steps: 20,
            step_size: 0.01,
            target_accept: 0.8,
            prior_sd: 1.0,
            noise_sd: None,
            rhat_threshold: 1.01,
            jitter: true,
            metric: Metric::Diag,
            algorithm: Algorithm::Hmc,
            max_tree_depth: 10,
            marginalise_output: false,
            temperatures: 1,
            beta_min: 0.05,
            superchains: 0,
            unit_sweeps: 0,
            hot_unit_sweeps: None,
            thin: 1,
            doublings: 0,
            trajectory: Trajectory::Chees,
        }
    }
}

/// HMC's settings: the network (`hidden`, `negative_slope`, `standardize`) and
/// [`HmcSettings`]; the optimiser keys do not apply.
pub type HmcConfig = MethodConfig<HmcSettings>;

/// The method.
#[derive(Debug, Clone)]
pub struct Hmc {
    name: String,
    config: HmcConfig,
}

impl Hmc {
    /// Checks the settings up front.
    pub fn new(name: &str, config: HmcConfig) -> Result<Hmc, MethodError> {
        let c = &config;
        let bad = |key: &str, v: String, valid: &str| {
            Err(MethodError::invalid(format!("{name}.{key}"), v, valid))
        };
        if !(c.step_size.is_finite() && c.step_size > 0.0) {
            return bad("step_size", c.step_size.to_string(), "a positive step size");
        }
        if !(c.prior_sd.is_finite() && c.prior_sd > 0.0) {
            return bad("prior_sd", c.prior_sd.to_string(), "a positive prior sd");
        }
        if let Some(Tau::Value(v)) = c.noise_sd {
            if !(v.is_finite() && v > 0.0) {
                return bad(
                    "noise_sd",
                    v.to_string(),
                    "a positive sd, \"known\", or left out",
                );
            }
        }
        if c.chains < 2 {
            return bad(
                "chains",
                c.chains.to_string(),
                "at least 2: split-R̂ compares chains",
            );
        }
        if c.draws < 4 || c.leapfrog_steps == 0 {
            return bad(
                "draws / leapfrog_steps",
                format!("{} / {}", c.draws, c.leapfrog_steps),
                "at least 4 draws (split-R̂ halves each chain) and 1 leapfrog step",
            );
        }
        if !(c.target_accept > 0.0 && c.target_accept < 1.0) {
            return bad(
                "target_accept",
                c.target_accept.to_string(),
                "a rate strictly between 0 and 1",
            );
        }
        if c.algorithm != Algorithm::Hmc && !(1..=20).contains(&c.max_tree_depth) {
            return bad(
                "max_tree_depth",
                c.max_tree_depth.to_string(),
                "a depth from 1 to 20 (2^depth leapfrog steps at most)",
            );
        }
        if c.algorithm == Algorithm::Chees
            && !(c.superchains >= 2 && c.superchains <= c.chains && c.chains % c.superchains == 0)
        {
            return bad(
                "superchains",
                format!("{} with chains = {}", c.superchains, c.chains),
                "from 2 to `chains`, dividing it (nested R̂ compares superchains of equal size)",
            );
        }
        if c.thin == 0 || (c.thin > 1 && c.algorithm != Algorithm::Chees) {
            return bad(
                "thin",
                format!("{} with algorithm = {:?}", c.thin, c.algorithm),
                "at least 1; above 1 with algorithm = \"chees\" only",
            );
        }
        if c.doublings > 6
            || (c.doublings > 0 && !(c.algorithm == Algorithm::Chees && c.draws % 2 == 0))
        {
            return bad(
                "doublings",
                format!(
                    "{} with algorithm = {:?}, draws = {}",
                    c.doublings, c.algorithm, c.draws
                ),
                "from 0 to 6 (64× the sampling); above 0 with algorithm = \"chees\" and an even \
                 number of draws (a doubling keeps every other draw)",
            );
        }
        let collapsed_chees = c.algorithm == Algorithm::Chees && c.marginalise_output;
        if let Some((key, n)) = c.any_sweeps().filter(|_| !collapsed_chees) {
            return bad(
                key,
                format!(
                    "{n} with algorithm = {:?}, marginalise_output = {}",
                    c.algorithm, c.marginalise_output
                ),
                "algorithm = \"chees\" and marginalise_output = true (the moves propose a unit \
                 under the collapsed likelihood)",
            );
        }
        if c.temperatures == 0 || c.temperatures > 64 {
            return bad(
                "temperatures",
                c.temperatures.to_string(),
                "from 1 (no tempering) to 64 rungs per chain",
            );
        }
        if !(c.beta_min > 0.0 && c.beta_min < 1.0) {
            return bad(
                "beta_min",
                c.beta_min.to_string(),
                "an inverse temperature strictly between 0 and 1",
            );
        }
        if c.marginalise_output && c.net.hidden.len() != 1 {
            return bad(
                "marginalise_output",
                format!("true with hidden = {:?}", c.net.hidden),
                "one hidden layer (the output layer's conjugacy needs f linear in it given the rest)",
            );
        }
        if c.rhat_threshold.is_nan() || c.rhat_threshold <= 1.0 {
            return bad("rhat_threshold", c.rhat_threshold.to_string(), "above 1");
        }
        config.net.shape(1, 1).validate()?;
        Ok(Hmc {
            name: name.to_string(),
            config,
        })
    }
}

impl Hmc {
    /// The task's configuration errors (the noise sd, the conjugate steps on labels) and the
    /// fixed noise sd, if any: what `run` and `check` share.
    fn checked_noise(&self, task: &Task<'_>) -> Result<Option<f64>, MethodError> {
        task.validate()?;
        let c = &self.config;
        let fixed_noise = fixed_noise_sd(&self.name, c.noise_sd, task, "sample")?;
        let bernoulli = task.likelihood == Likelihood::Bernoulli;
        if bernoulli && (c.marginalise_output || c.temperatures > 1) {
            return Err(MethodError::invalid(
                format!("{}.marginalise_output / temperatures", self.name),
                format!(
                    "{} / {} on a classification task",
                    c.marginalise_output, c.temperatures
                ),
                "false and 1 for labels: both need the Gaussian likelihood's conjugate steps",
            ));
        }
        Ok(fixed_noise)
    }
}

impl Method for Hmc {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        self.config.chains
    }

    fn cost(&self, n_train: usize, _epochs: usize) -> f64 {
        // Every iteration runs `leapfrog_steps` gradient evaluations per chain; NUTS's
        // trajectories are taken as 32 steps (depth 5) for balancing shards.
        let c = &self.config;
        // The ensemble's trajectories start at `leapfrog_steps` and are adapted; its unit moves
        // cost about a quarter of a gradient per unit and sweep (one row of the Gram matrix
        // and a factor of A), the sweeps averaged over the rungs.
        let sweeps =
            (c.unit_sweeps + (c.temperatures - 1) * c.sweeps_on(1)) as f64 / c.temperatures as f64;
        let steps = match c.algorithm {
            Algorithm::Hmc | Algorithm::Chees => c.leapfrog_steps,
            Algorithm::Nuts => 32,
        } as f64
            + sweeps * c.net.hidden.first().copied().unwrap_or(0) as f64 / 4.0;
        // Every rung runs the iteration; the collapsed gradient costs about (W + 1)/2 plain
        // ones (measured by `bench hmc --marginalise-output`: 9.7× at W = 20, 6.1× at W = 10).
        let collapsed = match (c.marginalise_output, c.net.hidden.first()) {
            (true, Some(&w)) => (w + 1) as f64 / 2.0,
            _ => 1.0,
        };
        (c.chains * c.temperatures * (c.warmup + c.draws * c.thin) * n_train) as f64
            * steps
            * collapsed
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        Some(self.config.net.shape(task.d, 1).parameters())
    }

    fn check(&self, task: &Task<'_>, _levels: &[f64]) -> Result<(), MethodError> {
        self.checked_noise(task).map(|_| ())
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        _keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        let resources = &Resources::of(compute)?;
        let fixed_noise = self.checked_noise(task)?;
        let c = &self.config;
        let replicas = task.replicas(&self.name, c.chains);
        let y = task.replica_targets_f32(&replicas);
        let (x_train, x_test) = task.inputs_f32(c.net.standardize);
        let shape = c.net.shape(task.d, 1);
        let bernoulli = task.likelihood == Likelihood::Bernoulli;
        // NUTS runs on the host chains on every backend: its trajectories differ in length
        // between chains, and no lockstep tensor version is built.
        let own_loops =
            c.algorithm == Algorithm::Nuts || c.marginalise_output || c.temperatures > 1;
        let host = (own_loops || resources.sampler_host_loops(&shape)).then_some(resources.simd);
        let trainer = HmcTrainer {
            config: c,
            shape,
            x_train,
            x_test,
            y,
            init: &replicas.init,
            stream: &replicas.stream,
            noise: fixed_noise,
            device: resources.device.clone(),
            records: Mutex::new(vec![ChainRecord::default(); replicas.init.len()]),
            bernoulli,
            host,
        };
        let (out, records) = if c.algorithm == Algorithm::Chees {
            // A repetition's chains run together: the repetitions are the scheduler's replicas,
            // one per chunk so that every worker thread takes repetitions.
            let ensemble = EnsembleTrainer {
                chains: trainer,
                reps: task.repetitions.len(),
                level: resources.simd,
            };
            let one = Resources {
                chunk: Some(1),
                ..resources.clone()
            };
            let chains = c.chains;
            let out = run_chunks(&ensemble, &one, &|reps| progress(reps * chains))?;
            let records = ensemble.chains.records.into_inner();
            (per_chain(out, chains), records)
        } else {
            let out = run_chunks(&trainer, resources, progress)?;
            (out, trainer.records.into_inner())
        };
        let records = records.expect("no panics while holding it");
        let (m, n, chains) = (task.n_test(), task.n_train(), c.chains);
        // Per repetition (in parallel over the repetitions, each independent): the pooled
        // draws, their moments and the diagnostics.
        let res = uqbench_core::par_map(task.repetitions.len(), |k| {
            let reps = k * chains..(k + 1) * chains;
            let records = &records[reps.clone()];
            self.repetition(&out, records, reps, (m, n), task.likelihood, fixed_noise)
        });
        Ok(res)
    }
}

impl Hmc {
    /// One repetition's prediction from its chains (replicas `reps` of the job, with their
    /// `records`) at `(m, n)` test and training inputs: the pooled draws, their moments, the
    /// noise draws and the diagnostics.
    fn repetition(
        &self,
        out: &TrainOutput,
        records: &[ChainRecord],
        reps: Range<usize>,
        (m, n): (usize, usize),
        likelihood: Likelihood,
        fixed_noise: Option<f64>,
    ) -> Prediction {
        let (t, chains) = (self.config.draws, self.config.chains);
        let bernoulli = likelihood == Likelihood::Bernoulli;
        let diverged = reps.clone().any(|r| out.diverged[r]);
        // samples[chain][draw][point]
        let rows: Vec<Vec<f64>> = reps
            .clone()
            .flat_map(|r| (0..t).map(move |s| (r * t + s) * m))
            .map(|start| {
                out.test_out[start..start + m]
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect()
            })
            .collect();
        let (mean, std) = uqbench_core::mean_std(&rows);
        let train_mean: Vec<f64> = (0..n)
            .map(|i| {
                reps.clone()
                    .map(|r| f64::from(out.train_pred[r * n + i]))
                    .sum::<f64>()
                    / chains as f64
            })
            .collect();
        let mut scalars = BTreeMap::new();
        let divergent: u64 = records.iter().map(|c| c.divergent).sum();
        if !diverged {
            self.diagnostics(&rows, records, divergent, &mut scalars);
        }
        // Every draw's σ, in the order of the rows: chain-major, then draw.
        let sigma_draws: Vec<f64> = records
            .iter()
            .flat_map(|c| c.sigma.iter().copied())
            .collect();
        let noise = sigma_draws.iter().sum::<f64>() / sigma_draws.len() as f64;
        scalars.insert(
            "final_objective".into(),
            reps.clone().map(|r| out.final_objective[r]).sum::<f64>() / chains as f64,
        );
        if fixed_noise.is_none() {
            scalars.insert("sampled_noise_sd".into(), noise);
        }
        let per_chain_mean =
            |f: &dyn Fn(&ChainRecord) -> f64| records.iter().map(f).sum::<f64>() / chains as f64;
        scalars.insert("divergent_transitions".into(), divergent as f64);
        scalars.insert("accept_rate".into(), per_chain_mean(&|c| c.accept_rate));
        scalars.insert("step_size".into(), per_chain_mean(&|c| c.step_size));
        // Gradient evaluations per iteration, warm-up included.
        let sampling = |c: &ChainRecord| match c.iterations {
            0 => (t * self.config.thin) as f64,
            i => i as f64,
        };
        let iterations = self.config.warmup as f64 + per_chain_mean(&sampling);
        let leapfrogs = per_chain_mean(&|c| c.leapfrogs as f64) / iterations;
        scalars.insert("leapfrogs_per_iteration".into(), leapfrogs);
        if records.iter().all(|c| !c.inv_mass.is_empty()) {
            // What the warm-up left: the adapted inverse mass (the posterior variance estimate
            // per parameter of the move's state), averaged over the chains, at its extremes.
            let dim = records[0].inv_mass.len();
            let per_param: Vec<f64> = (0..dim)
                .map(|i| per_chain_mean(&|c| f64::from(c.inv_mass[i])))
                .collect();
            let (lo, hi) = per_param
                .iter()
                .fold((f64::INFINITY, 0.0f64), |(lo, hi), &v| {
                    (lo.min(v), hi.max(v))
                });
            scalars.insert("inv_mass_min".into(), lo);
            scalars.insert("inv_mass_max".into(), hi);
        }
        self.move_rates(records, &mut scalars);
        if self.config.algorithm == Algorithm::Nuts {
            // The share of draws whose trajectory stopped at the largest depth, not at a U-turn.
            let saturated: f64 = records.iter().map(|c| c.saturated as f64).sum();
            scalars.insert(
                "tree_depth_saturated".into(),
                saturated / (t * chains) as f64,
            );
        }
        let mcse = (!diverged).then(|| monte_carlo_errors(&rows, m, t));
        Prediction {
            mean,
            std,
            noise_std: (!bernoulli).then(|| vec![noise; m]),
            noise_known: false,
            family: Family::Empirical,
            samples: Some(rows),
            train_mean: Some(train_mean),
            scalars,
            diverged,
            extra: Extra {
                noise_samples: (!bernoulli).then_some(sigma_draws),
                mcse,
                ..Extra::default()
            },
        }
    }

    /// The moves' own rates over the chains: tempering's accepted swaps, the unit moves'
    /// acceptance, ChEES's adapted trajectory length (with fixed trajectories there is none).
    fn move_rates(&self, records: &[ChainRecord], scalars: &mut BTreeMap<String, f64>) {
        let c = &self.config;
        let rate = |tried: u64, accepted: u64| accepted as f64 / tried.max(1) as f64;
        if c.temperatures > 1 {
            let tried = records.iter().map(|r| r.swaps_tried).sum();
            let accepted = records.iter().map(|r| r.swaps_accepted).sum();
            scalars.insert("swap_rate".into(), rate(tried, accepted));
        }
        if c.unit_sweeps > 0 || (c.temperatures > 1 && c.sweeps_on(1) > 0) {
            let tried = records.iter().map(|r| r.units_tried).sum();
            let accepted = records.iter().map(|r| r.units_accepted).sum();
            scalars.insert("unit_accept_rate".into(), rate(tried, accepted));
        }
        if c.doublings > 0 {
            let most = records.iter().map(|r| r.doublings).max().unwrap_or(0);
            scalars.insert("sampling_doublings".into(), most as f64);
        }
        if c.algorithm == Algorithm::Chees && c.trajectory == Trajectory::Chees {
            let mean = records.iter().map(|r| r.trajectory_length).sum::<f64>();
            scalars.insert("trajectory_length".into(), mean / records.len() as f64);
        }
    }

    /// The convergence diagnostics of a repetition that did not diverge (see the module
    /// docs): R̂ and ESS at the worst input, E-BFMI per chain, the reference-grade flag.
    fn diagnostics(
        &self,
        rows: &[Vec<f64>],
        records: &[ChainRecord],
        divergent: u64,
        scalars: &mut BTreeMap<String, f64>,
    ) {
        let c = &self.config;
        let m = rows.first().map_or(0, Vec::len);
        // Many short chains: the certificate's R̂ is nested R̂ over the superchains, against
        // the threshold calibrated on its null (plain R̂ of short chains exceeds 1.01 for
        // well-mixed chains: docs/quartic-002.md measures both criteria's null); otherwise
        // posteriordb's 1.01 certifies and `rhat_threshold` flags.
        let (worst, rhat, flag, grade) = if c.algorithm == Algorithm::Chees {
            let cert = mcmc::nested_certificate(rows, m, c.draws, c.superchains, divergent);
            scalars.insert("nested_rhat_max".into(), cert.nested_rhat);
            scalars.insert("nested_rhat_threshold".into(), cert.threshold);
            (cert.worst, cert.nested_rhat, cert.threshold, cert.certified)
        } else {
            let worst = mcmc::worst_over_inputs(rows, m, c.draws);
            let grade = mcmc::reference_grade(
                worst.rhat,
                mcmc::REFERENCE_RHAT,
                worst.ess_bulk,
                worst.ess_tail,
                divergent,
            );
            (worst, worst.rhat, c.rhat_threshold, grade)
        };
        scalars.insert("rhat_max".into(), worst.rhat);
        scalars.insert("ess_bulk_min".into(), worst.ess_bulk);
        scalars.insert("ess_tail_min".into(), worst.ess_tail);
        scalars.insert("rhat_flagged".into(), f64::from(u8::from(rhat > flag)));
        let ebfmi: Vec<f64> = records
            .iter()
            .map(|c| mcmc::ebfmi(&c.energy).unwrap_or(f64::NAN))
            .collect();
        scalars.insert(
            "ebfmi_min".into(),
            ebfmi.iter().copied().fold(f64::INFINITY, f64::min),
        );
        scalars.insert(
            "ebfmi_flagged".into(),
            ebfmi
                .iter()
                .filter(|&&b| b.is_nan() || b < EBFMI_THRESHOLD)
                .count() as f64,
        );
        scalars.insert("reference_grade".into(), f64::from(u8::from(grade)));
    }
}

/// The Monte Carlo standard errors of the predictive mean and sd of f at each of the `m` test
/// inputs from the chain-major draws `rows` (`t` per chain); +∞ where they cannot be
/// estimated.
fn monte_carlo_errors(rows: &[Vec<f64>], m: usize, t: usize) -> MonteCarloErrors {
    let (mean, sd) = (0..m)
        .map(|i| {
            mcmc::mcse_mean_sd(&mcmc::chains_at(rows, i, t))
                .unwrap_or((f64::INFINITY, f64::INFINITY))
        })
        .unzip();
    MonteCarloErrors { mean, sd }
}
