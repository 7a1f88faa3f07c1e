//! Stochastic-gradient MCMC (spec §11): SGLD (Welling & Teh 2011), SGHMC (Chen, Fox & Guestrin
//! 2014) and cyclical SG-MCMC (Zhang et al. 2020), the samplers Izmailov et al. (2021) held
//! against full-batch HMC. Each chain is one replica of the engine (repetitions × chains
//! trained as one job, on the host loops on a CPU and as tensors on a GPU; the decision
//! track's repetitions at a step too, `run_tasks`, each task's draws at its own test inputs)
//! whose Adam step is replaced by the dynamics' update ([`langevin`], the engine's `Update`,
//! where the updates, the scaling of the mini-batch gradient by N/B and the O(ε) bias are
//! derived); a collector evaluates the network in f64 at the test inputs at each draw epoch,
//! so a chain keeps its draws of f(x*), not its parameters.
//!
//! Target, per chain: p(θ | y) ∝ Π_n N(y_n | f_θ(x_n), σ²) · N(W | 0, σ_p² I) (labels: the
//! Bernoulli likelihood), σ known (`noise_sd`: "known" or a number, and the default where the
//! problem's σ is a known constant; the engine's L2 factor is λ = σ²/(N·σ_p²)) or learned
//! (`noise_sd = "learn"`, the default where it is not: p(θ, σ² | y) with HMC's InvGamma(1, 1)
//! prior on σ², each chain's σ² Gibbs-sampled at every epoch's end and its weights moved at
//! the current σ² with the step `step_size`·σ², as [`langevin`] derives; the PI is then
//! the mixture of N(f_s, σ_s²) over the draws, each with its chain's σ at that epoch, as
//! HMC's). Biases have a flat prior, as every L2 pull of the engine (see `BLRGaussian`, the
//! exact posterior under that prior).
//!
//! Draws: SGLD and SGHMC discard the first `burnin` fraction of the epochs and take `draws`
//! per chain, evenly spaced over the rest (one per epoch at most; unset, 100 or one per epoch
//! of that stage if it has fewer, at least 4); cyclical SG-MCMC takes them
//! evenly spaced over the epochs that end in a cycle's sampling stage. The prediction is the
//! draws' mean, the CI their empirical quantiles, the PI the mixture of N(f_s, σ²); the draws
//! are the method's joint. Diagnostics as HMC's: R̂ (max of bulk and tail) and bulk and tail
//! ESS at the worst test input (`rhat_max`, `ess_bulk_min`, `ess_tail_min`, `rhat_flagged`,
//! `reference_grade`; no divergences to count: nothing is rejected).

mod draws;
pub mod langevin;
mod noise;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::batched;
use crate::host_net;
use uqbench_core::noise::{fixed_noise_sd, Tau};
use uqbench_core::{
    par_map, run_each, Compute, Extra, Family, Likelihood, Method, MethodError, Prediction, Task,
};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::trainer::{self, Batching, Resources};
use uqbench_metrics::mcmc;

use draws::{ChainDraws, DrawCollector, Draws};
use langevin::{Dynamics, Langevin, StepSchedule};
use noise::LearnedNoise;
pub use noise::SgNoise;

/// Which SG-MCMC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SgKind {
    /// SGLD.
    Sgld,
    /// SGHMC.
    Sghmc,
    /// Cyclical SG-MCMC (with SGLD's or SGHMC's dynamics, `dynamics`).
    Cyclical,
    /// Preconditioned SGLD (Li et al. 2016).
    Psgld,
}

/// The dynamics of cyclical SG-MCMC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CyclicalDynamics {
    /// cSGLD.
    #[default]
    Sgld,
    /// cSGHMC.
    Sghmc,
}

/// When pSGLD's squared-gradient average V adapts (`precond_adapt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(try_from = "String", into = "String")]
pub enum PrecondAdapt {
    /// During the burn-in, G held after it: SGLD on a fixed metric, exact up to its O(ε)
    /// bias (the default; `langevin` module docs).
    #[default]
    Burnin,
    /// Every step, as Li et al. (2016) run it without their Γ term: adapts to curvature that
    /// changes while sampling, at a bias of up to √2 in the sd (measured: `langevin` docs).
    Always,
}

impl TryFrom<String> for PrecondAdapt {
    type Error = String;

    fn try_from(w: String) -> Result<PrecondAdapt, String> {
        match w.as_str() {
            "burnin" => Ok(PrecondAdapt::Burnin),
            "always" => Ok(PrecondAdapt::Always),
            _ => Err(format!(
                "precond_adapt = \"{w}\"; valid: \"burnin\" (V adapts in the burn-in, G held \
                 after it) or \"always\""
            )),
        }
    }
}

impl From<PrecondAdapt> for String {
    fn from(a: PrecondAdapt) -> String {
        match a {
            PrecondAdapt::Burnin => "burnin".into(),
            PrecondAdapt::Always => "always".into(),
        }
    }
}

/// SG-MCMC's own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SgMcmcSettings {
    /// Chains per repetition (4).
    pub chains: usize,
    /// The chains' length in epochs (passes over the data), like HMC's `warmup + draws` a
    /// sampler setting: `run.epochs` when unset.
    pub epochs: Option<usize>,
    /// ε (SGLD), η (SGHMC), or the cycles' ε₀; with σ learned, per unit σ² (the chain's step
    /// is ε·σ²). Left out, the step whose drift is a plain gradient step of `DRIFT` (2e-3; for
    /// the cycles, their peak) on the mean training loss: ε = 2·ℓ·σ²/N (SGLD), η = α·ℓ·σ²/N
    /// (SGHMC, whose velocity reaches η/α times the gradient), σ² = 1 where σ is learned or
    /// the likelihood is Bernoulli. What makes the dynamics diverge is ε·λ_max ≳ 4, λ_max the
    /// posterior precision's largest eigenvalue, which is N/σ² times the mean loss's
    /// curvature: a fixed ε diverges as N/σ² grows (N/σ² = 2 400 broke SGHMC at 1e-4), the
    /// scaled one does not. Measured on E1 quick: SGLD diverges from ℓ ≈ 0.05 (7 of 20
    /// repetitions), so 2e-3 leaves a factor 25; the cycles at ℓ₀ = 1e-2 diverged on E2
    /// (docs/methods.md).
    pub step_size: Option<f64>,
    /// SGHMC's friction α = 1 − momentum (0.1: Zhang et al.'s momentum 0.9).
    pub friction: f64,
    /// Prior sd σ_p of the weights (1, as HMC's).
    pub prior_sd: f64,
    /// Noise sd: `"known"`, a number, or `"learn"`; left out, `"known"` where the problem's
    /// σ is a known constant (and for labels), else `"learn"`.
    pub noise_sd: Option<SgNoise>,
    /// SGLD and SGHMC: the fraction of the epochs discarded as burn-in (0.5).
    pub burnin: f64,
    /// Draws per chain: when unset, 100 or one per epoch of the sampling stage if it has fewer
    /// (at least 4), so that the default runs at any length that gives 4 draws.
    pub draws: Option<usize>,
    /// Cyclical: cycles K (4).
    pub cycles: usize,
    /// Cyclical: the exploration fraction β of each cycle, without noise (0.8, Zhang et al.).
    pub exploration: f64,
    /// Cyclical: the dynamics (`sgld`, default, or `sghmc`).
    pub dynamics: CyclicalDynamics,
    /// pSGLD: the squared gradients' moving-average factor a (unset: 0.99, Li et al.'s).
    pub rms_decay: Option<f64>,
    /// pSGLD: λ added to √V in the preconditioner G = 1/(λ + √V) (unset: 1e-5, Li et al.'s).
    pub precond_floor: Option<f64>,
    /// pSGLD: when V adapts, `"burnin"` (unset) or `"always"` ([`PrecondAdapt`]).
    pub precond_adapt: Option<PrecondAdapt>,
    /// R̂ above which a repetition is flagged (1.01).
    pub rhat_threshold: f64,
}

impl Default for SgMcmcSettings {
    fn default() -> Self {
        SgMcmcSettings {
            chains: 4,
            epochs: None,
            step_size: None,
            friction: 0.1,
            prior_sd: 1.0,
            noise_sd: None,
            burnin: 0.5,
            draws: None,
            cycles: 4,
            exploration: 0.8,
            dynamics: CyclicalDynamics::Sgld,
            rms_decay: None,
            precond_floor: None,
            precond_adapt: None,
            rhat_threshold: 1.01,
        }
    }
}

/// SG-MCMC's settings: the network, `batch_size` (32 unless set; the full batch when it is
/// N or more), and [`SgMcmcSettings`]; Adam's keys and `weight_decay` do not apply.
pub type SgMcmcConfig = MethodConfig<SgMcmcSettings>;

/// What [`SgMcmc::prepare`] decides before training.
struct Prepared {
    learn: bool,
    bernoulli: bool,
    sigma: f64,
    n: usize,
    settings: trainer::TrainSettings,
    /// The chains' dynamics (the settings' update).
    langevin: Langevin,
    epochs: Vec<usize>,
}

/// The default step's drift ℓ: a gradient step of ℓ on the mean training loss (SGLD, SGHMC).
pub const DRIFT: f64 = 2e-3;

/// pSGLD's step ε when `step_size` is unset. Its drift (ε/2)·G·∇U moves each parameter by
/// about ε/2 per step whatever the gradient's scale (G ≈ 1/|∇U|: RMSprop's step of ε/2), so
/// the default needs no scaling by N/σ²; measured on E1 (docs/agents.md, "pSGLD").
pub const PSGLD_STEP: f64 = 1e-3;

/// pSGLD's a and λ when unset: Li et al.'s (2016, §5).
pub const PSGLD_RMS_DECAY: f64 = 0.99;
/// See [`PSGLD_RMS_DECAY`].
pub const PSGLD_FLOOR: f64 = 1e-5;

/// Draws per chain when `draws` is unset and the sampling stage has as many epochs.
pub const DEFAULT_DRAWS: usize = 100;

/// The mini-batch size when none is set.
pub const DEFAULT_BATCH: usize = 32;

/// The method.
#[derive(Debug, Clone)]
pub struct SgMcmc {
    name: String,
    kind: SgKind,
    config: SgMcmcConfig,
}

impl SgMcmc {
    /// Checks the settings up front.
    pub fn new(name: &str, kind: SgKind, config: SgMcmcConfig) -> Result<SgMcmc, MethodError> {
        let c = &config;
        let bad = |key: &str, v: String, valid: &str| {
            Err(MethodError::invalid(format!("{name}.{key}"), v, valid))
        };
        if c.epochs == Some(0) {
            return bad("epochs", "0".into(), "at least 1, or unset for run.epochs");
        }
        if c.chains < 2 {
            return bad(
                "chains",
                c.chains.to_string(),
                "at least 2: R̂ compares chains",
            );
        }
        if let Some(d) = c.draws.filter(|&d| d < 4) {
            return bad(
                "draws",
                d.to_string(),
                "at least 4 (split-R̂ halves each chain), or unset to follow the epochs",
            );
        }
        if !(c.burnin >= 0.0 && c.burnin < 1.0) {
            return bad("burnin", c.burnin.to_string(), "a fraction in [0, 1)");
        }
        if !(c.prior_sd.is_finite() && c.prior_sd > 0.0) {
            return bad("prior_sd", c.prior_sd.to_string(), "a positive sd");
        }
        if let Some(s) = c.step_size.filter(|s| !(s.is_finite() && *s > 0.0)) {
            return bad(
                "step_size",
                s.to_string(),
                "a positive step, or unset for the step scaled to N/σ²",
            );
        }
        if let Some(wd) = c.optim.weight_decay {
            return bad(
                "weight_decay",
                wd.to_string(),
                "unset: the prior sets the L2 factor σ²/(N·σ_p²)",
            );
        }
        if kind != SgKind::Psgld {
            for (key, set) in [
                ("rms_decay", c.rms_decay),
                ("precond_floor", c.precond_floor),
            ] {
                if let Some(v) = set {
                    return bad(key, v.to_string(), "unset: only pSGLD has a preconditioner");
                }
            }
            if let Some(a) = c.precond_adapt {
                return bad(
                    "precond_adapt",
                    format!("{a:?}"),
                    "unset: only pSGLD has a preconditioner",
                );
            }
        }
        if c.rhat_threshold.is_nan() || c.rhat_threshold <= 1.0 {
            return bad("rhat_threshold", c.rhat_threshold.to_string(), "above 1");
        }
        let probe = SgMcmc {
            name: name.to_string(),
            kind,
            config: config.clone(),
        };
        probe.langevin(1.0, None, probe.step(1.0)).check()?;
        config.net.shape(1, 1).validate()?;
        Ok(probe)
    }

    /// The step: `step_size`, or the one whose drift is a gradient step of `DRIFT` on the
    /// mean loss (the cycles' peak), `scale` being N/σ² (N where σ is learned, per unit σ²,
    /// or for labels).
    fn step(&self, scale: f64) -> f64 {
        let c = &self.config;
        if let Some(step) = c.step_size {
            return step;
        }
        let sghmc = match self.kind {
            SgKind::Sgld => false,
            SgKind::Sghmc => true,
            SgKind::Cyclical => c.dynamics == CyclicalDynamics::Sghmc,
            SgKind::Psgld => return PSGLD_STEP,
        };
        // SGLD: θ moves by (ε/2)·scale·g; SGHMC: v settles at (η/α)·scale·g. The cycles' ε₀
        // is their peak, from which the step falls to 0.
        match sghmc {
            false => 2.0 * DRIFT / scale,
            true => c.friction * DRIFT / scale,
        }
    }

    /// The dynamics for ∇U = `scale`·g at `step`, or with σ² learned (`noise`) each chain's
    /// own factors (`Langevin::factors`).
    fn langevin(&self, scale: f64, noise: Option<LearnedNoise>, step: f64) -> Langevin {
        let c = &self.config;
        let sghmc = Dynamics::Sghmc {
            friction: c.friction,
        };
        let (dynamics, schedule) = match self.kind {
            SgKind::Sgld => (Dynamics::Sgld, StepSchedule::Constant),
            SgKind::Sghmc => (sghmc, StepSchedule::Constant),
            SgKind::Psgld => (
                Dynamics::Psgld {
                    rms_decay: c.rms_decay.unwrap_or(PSGLD_RMS_DECAY),
                    floor: c.precond_floor.unwrap_or(PSGLD_FLOOR),
                    adapt: match c.precond_adapt.unwrap_or_default() {
                        PrecondAdapt::Burnin => c.burnin,
                        PrecondAdapt::Always => 1.0,
                    },
                },
                StepSchedule::Constant,
            ),
            SgKind::Cyclical => (
                match c.dynamics {
                    CyclicalDynamics::Sgld => Dynamics::Sgld,
                    CyclicalDynamics::Sghmc => sghmc,
                },
                StepSchedule::Cyclical {
                    cycles: c.cycles,
                    exploration: c.exploration,
                },
            ),
        };
        Langevin {
            dynamics,
            step_size: step,
            schedule,
            scale,
            noise,
        }
    }

    /// What `run` decides before training, with every configuration error it can give: σ's
    /// treatment (learned where `noise_sd` says so, or where it is left out and the problem's
    /// σ is not a known constant), the engine's settings, the draw epochs.
    fn prepare(&self, task: &Task<'_>) -> Result<Prepared, MethodError> {
        task.validate()?;
        let c = &self.config;
        let n = task.n_train();
        let bernoulli = task.likelihood == Likelihood::Bernoulli;
        let learn = match c.noise_sd {
            Some(SgNoise::Learn) => true,
            None => !bernoulli && task.known_sigma.is_none(),
            Some(SgNoise::Fixed(_)) => false,
        };
        if learn && bernoulli {
            return Err(MethodError::invalid(
                format!("{}.noise_sd", self.name),
                "\"learn\"",
                "left out for a classification problem: its Bernoulli likelihood has no noise sd \
                 to learn",
            ));
        }
        let noise = match c.noise_sd {
            Some(SgNoise::Fixed(t)) => Some(t),
            _ => (!bernoulli).then_some(Tau::Known(uqbench_core::KnownSigma::Known)),
        };
        // With σ learned, σ = 1 in `scale` and λ: the dynamics use each chain's σ² instead,
        // and λ only enters the reported final objective.
        let sigma = match learn {
            true => 1.0,
            false => fixed_noise_sd(&self.name, noise, task, "learn")?.unwrap_or(1.0),
        };
        let (scale, lambda) = (
            n as f64 / (sigma * sigma),
            sigma * sigma / (n as f64 * c.prior_sd * c.prior_sd),
        );
        let learned = learn.then(|| LearnedNoise {
            n,
            prior_precision: 1.0 / (c.prior_sd * c.prior_sd),
        });
        let batch = c.optim.batch_size.unwrap_or(DEFAULT_BATCH);
        let langevin = self.langevin(scale, learned, self.step(scale));
        let settings = trainer::TrainSettings {
            weight_decay: lambda,
            likelihood: task.likelihood,
            batching: if batch < n {
                Batching::Shuffled { size: batch }
            } else {
                Batching::Full
            },
            update: Some(Arc::new(langevin)),
            ..c.optim.settings(c.epochs.unwrap_or(task.epochs), n)
        };
        let epochs = self.draw_epochs(&settings, &langevin, n)?;
        Ok(Prepared {
            learn,
            bernoulli,
            sigma,
            n,
            settings,
            langevin,
            epochs,
        })
    }

    /// The epochs (0-based) whose end gives a draw (module docs).
    fn draw_epochs(
        &self,
        settings: &trainer::TrainSettings,
        l: &Langevin,
        n: usize,
    ) -> Result<Vec<usize>, MethodError> {
        let c = &self.config;
        let epochs = settings.epochs;
        let spe = settings.steps_per_epoch(n) as u64;
        let total = epochs as u64 * spe;
        let eligible: Vec<usize> = match self.kind {
            SgKind::Cyclical => (0..epochs)
                .filter(|&e| l.at((e as u64 + 1) * spe, total).1)
                .collect(),
            _ => ((c.burnin * epochs as f64).floor() as usize..epochs).collect(),
        };
        let k = eligible.len();
        let draws = c.draws.unwrap_or(DEFAULT_DRAWS.min(k));
        if let Some(d) = c.draws.filter(|&d| d > k) {
            return Err(MethodError::invalid(
                format!("{}.draws", self.name),
                d,
                format!(
                    "at most {k} here: one draw per epoch of the sampling stage ({epochs} epochs \
                     in all); raise the epochs (`epochs` or run.epochs) or lower draws"
                ),
            ));
        }
        if draws < 4 {
            return Err(MethodError::invalid(
                format!("{}.epochs", self.name),
                epochs,
                format!(
                    "enough for 4 draws: {k} epochs end in the sampling stage here (one draw \
                     each), and split-R̂ needs at least 4 per chain; raise `epochs` or run.epochs"
                ),
            ));
        }
        // Evenly spaced, ending at the last eligible epoch.
        Ok((1..=draws).map(|j| eligible[j * k / draws - 1]).collect())
    }
}

impl Method for SgMcmc {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        self.config.chains
    }

    fn cost(&self, n_train: usize, epochs: usize) -> f64 {
        // One gradient per point and epoch per chain.
        (self.config.chains * self.config.epochs.unwrap_or(epochs) * n_train) as f64
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        Some(self.config.net.shape(task.d, 1).parameters())
    }

    fn check(&self, task: &Task<'_>, _levels: &[f64]) -> Result<(), MethodError> {
        self.prepare(task).map(|_| ())
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        _keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        let c = &self.config;
        let resources = &Resources::of(compute)?;
        let prepared = self.prepare(task)?;
        let settings = self.collecting(&prepared, &[task]);
        let out = trainer::train_task(
            task,
            &self.name,
            c.chains,
            &c.net.shape(task.d, 1),
            c.net.standardize,
            &settings,
            resources,
            progress,
        )?;
        Ok(self.predictions(task, &prepared, &out))
    }

    /// The tasks' chains as one engine job ([`trainer::train_tasks`], each task's draws
    /// evaluated at its own test inputs) when they agree in what [`SgMcmc::prepare`] decides
    /// (points, epochs, likelihood, σ and its treatment, hence the step and the draw epochs),
    /// else side by side.
    fn run_tasks(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
    ) -> Result<Vec<Vec<Prediction>>, MethodError> {
        let prepared = (tasks.iter())
            .map(|t| self.prepare(t))
            .collect::<Result<Vec<_>, _>>()?;
        let key = |p: &Prepared| {
            (
                p.learn,
                p.bernoulli,
                p.sigma.to_bits(),
                p.n,
                p.epochs.clone(),
            )
        };
        let agree = prepared.iter().all(|p| key(p) == key(&prepared[0]));
        if !(agree && batched::same_shape(tasks, |_| ())) {
            return run_each(self, tasks, compute, keep_samples);
        }
        let c = &self.config;
        let task_refs: Vec<&Task<'_>> = tasks.iter().collect();
        let trained = trainer::train_tasks(
            tasks,
            None,
            None,
            &self.name,
            c.chains,
            &c.net.shape(tasks[0].d, 1),
            c.net.standardize,
            &self.collecting(&prepared[0], &task_refs),
            &Resources::of(compute)?,
        )?;
        Ok((trained.into_iter().zip(tasks).zip(&prepared))
            .map(|(((out, _), t), p)| self.predictions(t, p, &out))
            .collect())
    }
}

impl SgMcmc {
    /// `prepared`'s settings with the draws' collector of `tasks` (their chains in order, one
    /// job): each task's network evaluated at its test inputs as it sees them.
    fn collecting(&self, prepared: &Prepared, tasks: &[&Task<'_>]) -> trainer::TrainSettings {
        let c = &self.config;
        let mut first = 0;
        let spans = (tasks.iter())
            .map(|task| {
                let (_, x_test) = task.inputs_f32(c.net.standardize);
                let chains = task.repetitions.len() * c.chains;
                let draws = Draws {
                    epochs: prepared.epochs.iter().copied().collect(),
                    x_test: Arc::new(host_net::inputs(&x_test, task.d)),
                    dims: c.net.shape(task.d, 1).widths(),
                    slope: c.net.negative_slope,
                };
                first += chains;
                (first - chains..first, Arc::new(draws))
            })
            .collect();
        let mut settings = prepared.settings.clone();
        settings.collectors = vec![Arc::new(DrawCollector(spans))];
        settings
    }

    /// A task's predictions from its chains' output (their draws, σ's when learned).
    fn predictions(
        &self,
        task: &Task<'_>,
        prepared: &Prepared,
        out: &trainer::TrainOutput,
    ) -> Vec<Prediction> {
        let p = prepared;
        let draws: Vec<&ChainDraws> = out.collected(0);
        let chains = self.config.chains;
        par_map(task.repetitions.len(), |k| {
            let reps = k * chains..(k + 1) * chains;
            // Chain-major rows: chain c's draws, in order.
            let rows: Vec<Vec<f64>> = reps
                .clone()
                .flat_map(|r| draws[r].rows.iter().cloned())
                .collect();
            let diverged = reps.clone().any(|r| out.diverged[r])
                || rows.iter().flatten().any(|v| !v.is_finite());
            let noise = match p.learn {
                true => Noise::Draws(reps.clone().flat_map(|r| draws[r].sigmas.clone()).collect()),
                false => Noise::Fixed((!p.bernoulli).then_some(p.sigma)),
            };
            let mut pred = self.repetition(rows, diverged, noise, out, reps, p.n);
            // The step the chains took (per unit σ² where σ is learned).
            pred.scalars
                .insert("step_size".into(), p.langevin.step_size);
            pred
        })
    }
}

/// A repetition's noise sd: fixed (`None` for labels), or each draw's (σ learned;
/// chain-major, as the rows).
enum Noise {
    Fixed(Option<f64>),
    Draws(Vec<f64>),
}

impl SgMcmc {
    /// One repetition's prediction from its chains' draws (chain-major `rows`).
    fn repetition(
        &self,
        rows: Vec<Vec<f64>>,
        diverged: bool,
        noise: Noise,
        out: &trainer::TrainOutput,
        reps: std::ops::Range<usize>,
        n: usize,
    ) -> Prediction {
        let c = &self.config;
        let m = rows.first().map_or(0, Vec::len);
        let (mean, std) = uqbench_core::mean_std(&rows);
        let train_mean: Vec<f64> = (0..n)
            .map(|i| {
                reps.clone()
                    .map(|r| f64::from(out.train_pred[r * n + i]))
                    .sum::<f64>()
                    / c.chains as f64
            })
            .collect();
        let mut scalars = BTreeMap::new();
        // Draws per chain (the rows are chain-major).
        let t = rows.len() / c.chains.max(1);
        if !diverged {
            let worst = mcmc::worst_over_inputs(&rows, m, t);
            scalars.insert("rhat_max".into(), worst.rhat);
            scalars.insert("ess_bulk_min".into(), worst.ess_bulk);
            scalars.insert("ess_tail_min".into(), worst.ess_tail);
            scalars.insert(
                "rhat_flagged".into(),
                f64::from(u8::from(worst.rhat > c.rhat_threshold)),
            );
            scalars.insert(
                "reference_grade".into(),
                f64::from(u8::from(worst.reference_grade())),
            );
        }
        let (noise_std, noise_samples) = match noise {
            Noise::Fixed(sigma) => (sigma.map(|s| vec![s; m]), None),
            Noise::Draws(sigmas) => {
                let mean = sigmas.iter().sum::<f64>() / sigmas.len().max(1) as f64;
                scalars.insert("sampled_noise_sd".into(), mean);
                if !diverged {
                    // σ's own R̂, over the chains' draws of it.
                    let rows: Vec<Vec<f64>> = sigmas.iter().map(|&s| vec![s]).collect();
                    let sigma = mcmc::worst_over_inputs(&rows, 1, t);
                    scalars.insert("rhat_noise_sd".into(), sigma.rhat);
                    scalars.insert("ess_noise_sd".into(), sigma.ess_bulk);
                }
                (Some(vec![mean; m]), Some(sigmas))
            }
        };
        Prediction {
            mean,
            std,
            noise_std,
            extra: Extra {
                noise_samples,
                ..Extra::default()
            },
            family: Family::Empirical,
            samples: Some(rows),
            train_mean: Some(train_mean),
            scalars,
            diverged,
            ..Prediction::default()
        }
    }
}
