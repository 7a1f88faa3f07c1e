//! A method of uqbench as a decision agent (spec §12): at every step it is trained on the
//! agent's data so far (the pulled actions' inputs and their rewards), from scratch (`update =
//! "retrain"`) or from the state its last training left (`update = "warm"`, the method's
//! [`uqbench_core::WarmStart`]), and its predictive distribution over the action set decides.
//!
//! - Bandit: Thompson sampling, one draw of f over the whole action set per action of the
//!   batch, act argmax. The draw is the method's own joint ([`JointKind::of`], as the joint
//!   metrics read it): a closed-form Gaussian (or t) joint (Laplace, SWAG, MFVI's
//!   linearised joints) as mean + F·z (× √(ν/χ²_ν) for a t); draws (ensembles by member,
//!   the epinet by index, dropout by mask, SG-MCMC and HMC by posterior draw) as one of them
//!   uniformly; a method with marginals only (DER's per-input t's) as independent draws from
//!   its marginals, so its "Thompson sampling" knows nothing of how f covaries between
//!   actions, and the docs say so.
//! - Active learning: the batch by greedy log-det gain ([`greedy_logdet`]) on the method's
//!   covariance of f over the pool (the joint's F·Fᵀ, the draws' sample covariance, or its
//!   marginal variances) plus its noise variance; for a batch of one, its largest predictive
//!   variance.
//!
//! A method whose predictive is intervals of y alone (conformal and recalibrated wrappers,
//! quantile bands) has no distribution of f to draw from; `uqbench check` refuses it as an
//! agent with that reason.
//!
//! Divergence: a training whose predictions are not finite (a method's `diverged`) ends the
//! agent's run on that repetition; its results there are NaN, left out of its means (their
//! `n` says how many remain) as a diverged repetition is on the standard track, and
//! `uqbench decide` says how many repetitions each agent lost. One diverged repetition does
//! not end a run of hours.
//!
//! Seeds: the training of repetition r after n pulls is the method's on a task whose setting
//! label is `<setting>/decision/<method>/n<n>` and whose one repetition is r, so every fit has
//! its own initial weights and streams, the same whichever other repetitions ran.

use uqbench_core::{
    Compute, Family, Features, Likelihood, Method, NoiseInfo, Prediction, Rng, SeedBase, Task,
    WarmState,
};

use super::bandit::Policy;
use super::env::{Actions, History};
use super::exact::{argmax, greedy_logdet};
use super::DecisionKind;
use crate::bail;
use crate::error::Result;
use crate::summary::joint::JointKind;

/// Where an agent's fits sit: the experiment's base seed and name, the setting's label and the
/// repetition.
#[derive(Debug, Clone)]
pub struct AgentSeeds {
    /// The experiment's base seed.
    pub base: u64,
    /// The experiment's name.
    pub experiment: String,
    /// The setting's label.
    pub setting: String,
    /// The repetition.
    pub repetition: u64,
}

/// A method of uqbench as a bandit or active-learning agent (module docs).
pub struct MethodAgent<'a> {
    /// The method, built for the setting.
    pub method: &'a dyn Method,
    /// Where it trains.
    pub compute: &'a Compute,
    /// Epochs of every retraining, or of every continuation of a warm start.
    pub epochs: usize,
    /// `update = "warm"`: the epochs of the first training, and the state the last training
    /// left (`None` before the first).
    pub warm: Option<(usize, Option<WarmState>)>,
    /// Bandit (Thompson sampling) or active learning (log-det batch).
    pub kind: DecisionKind,
    /// Its fits' seeds.
    pub seeds: AgentSeeds,
    /// Whether a training diverged on this repetition: the agent stops training and its
    /// results are left out of its metrics (module docs).
    pub diverged: bool,
}

impl<'a> MethodAgent<'a> {
    /// `method` as the agent of `decision` on repetition `repetition` of the setting labelled
    /// `setting` of the experiment `(base seed, name)`.
    pub fn of(
        method: &'a dyn Method,
        compute: &'a Compute,
        decision: &super::DecisionSpec,
        (base, experiment): (u64, &str),
        setting: &str,
        repetition: u64,
    ) -> MethodAgent<'a> {
        MethodAgent {
            method,
            compute,
            epochs: decision.update_epochs,
            warm: (decision.update == super::Update::Warm)
                .then_some((decision.first_epochs(), None)),
            kind: decision.kind,
            seeds: AgentSeeds {
                base,
                experiment: experiment.to_string(),
                setting: setting.to_string(),
                repetition,
            },
            diverged: false,
        }
    }

    /// The epochs of the next training: a warm start's first, else `epochs`.
    pub fn next_epochs(&self) -> usize {
        match &self.warm {
            Some((first, None)) => *first,
            _ => self.epochs,
        }
    }

    /// `f` on the method's task for `history` ([`MethodAgent::data`]).
    pub fn with_task<T>(
        &self,
        actions: &Actions,
        history: &History,
        f: impl FnOnce(&Task<'_>) -> T,
    ) -> T {
        f(&self.data(actions, history).task(actions))
    }

    /// The agent's training data for `history`: the pulled actions' inputs (and features, σ)
    /// as training data, their rewards as the one repetition's targets, the action set as
    /// test inputs, [`MethodAgent::next_epochs`] of training.
    pub fn data(&self, actions: &Actions, history: &History) -> AgentData {
        let (d, p) = (actions.d, actions.p);
        let rows = |v: &[f64], w: usize| -> Vec<f64> {
            (history.actions.iter())
                .flat_map(|&a| v[a * w..(a + 1) * w].iter().copied())
                .collect()
        };
        let constant = actions.sigma.windows(2).all(|w| w[0] == w[1]);
        AgentData {
            x_train: rows(&actions.x, d),
            g_train: rows(&actions.g, p),
            sigma_train: rows(&actions.sigma, 1),
            y: vec![history.rewards.clone()],
            repetition: [self.seeds.repetition],
            epochs: self.next_epochs(),
            known_sigma: (actions.sigma_known && constant).then(|| actions.sigma[0]),
            seeds: SeedBase {
                base: self.seeds.base,
                experiment: self.seeds.experiment.clone(),
                setting: format!(
                    "{}/decision/{}/n{}",
                    self.seeds.setting,
                    self.method.name(),
                    history.len()
                ),
            },
        }
    }

    /// The method trained on `history` (from scratch, or from the last training's state with
    /// `update = "warm"`): its prediction of f at every action, `None` when the training
    /// diverged (non-finite predictions).
    pub fn fit(&mut self, actions: &Actions, history: &History) -> Result<Option<Prediction>> {
        let out = match &self.warm {
            None => self.with_task(actions, history, |t| {
                self.method.run(t, self.compute, true, &|_| {})
            })?,
            Some((_, from)) => {
                let warm = self.warm_start()?;
                let (out, state) = self.with_task(actions, history, |t| {
                    warm.run_warm(t, self.compute, true, from.as_ref())
                })?;
                self.keep_state(state);
                out
            }
        };
        self.accept(out)
    }

    /// The method's warm start, or the error that it has none.
    pub fn warm_start(&self) -> Result<&'a dyn uqbench_core::WarmStart> {
        match self.method.warm_start() {
            Some(w) => Ok(w),
            None => bail!(
                "agent {}: update = \"warm\", but the method has no warm start; valid: update = \
                 \"retrain\"",
                self.method.name()
            ),
        }
    }

    /// The state a warm-started training left, for the next to continue from.
    pub fn keep_state(&mut self, state: WarmState) {
        if let Some((_, from)) = &mut self.warm {
            *from = Some(state);
        }
    }

    /// The repetition's prediction from a training's output `out`, `None` when it diverged.
    pub fn accept(&self, mut out: Vec<Prediction>) -> Result<Option<Prediction>> {
        let Some(pred) = out.pop() else {
            bail!(
                "agent {}: its method returned no prediction for the repetition",
                self.method.name()
            );
        };
        let finite = pred.mean.iter().chain(&pred.std).all(|v| v.is_finite());
        Ok((!pred.diverged && finite).then_some(pred))
    }

    /// The batch the agent chooses on its prediction `pred` (`None`: its training diverged,
    /// and from then on it stops: module docs).
    pub fn decide(
        &mut self,
        pred: Option<&Prediction>,
        actions: &Actions,
        batch: usize,
        rng: &mut Rng,
    ) -> Vec<usize> {
        let Some(pred) = pred else {
            self.diverged = true;
            // Its results are left out: any valid action keeps the loop's bookkeeping.
            return vec![0; batch];
        };
        match self.kind {
            DecisionKind::Bandit => (0..batch)
                .map(|_| argmax(&thompson_draw(pred, rng)))
                .collect(),
            DecisionKind::Active => {
                let cov = Covariance::of(pred);
                let noise = noise_sd(pred, actions);
                greedy_logdet(actions.len(), |a, b| cov.at(a, b), &noise, batch)
            }
        }
    }
}

/// An agent's training data at one step, owned ([`MethodAgent::data`]).
#[derive(Debug, Clone)]
pub struct AgentData {
    x_train: Vec<f64>,
    g_train: Vec<f64>,
    sigma_train: Vec<f64>,
    y: Vec<Vec<f64>>,
    repetition: [u64; 1],
    epochs: usize,
    known_sigma: Option<f64>,
    seeds: SeedBase,
}

impl AgentData {
    /// The method's task on the data, the action set `actions` as its test inputs.
    pub fn task<'s>(&'s self, actions: &'s Actions) -> Task<'s> {
        Task {
            d: actions.d,
            x_train: &self.x_train,
            y_train: &self.y,
            repetitions: &self.repetition,
            x_test: &actions.x,
            epochs: self.epochs,
            known_sigma: self.known_sigma,
            seeds: self.seeds.clone(),
            features: Some(Features {
                p: actions.p,
                train: &self.g_train,
                test: &actions.g,
            }),
            noise: NoiseInfo {
                train: &self.sigma_train,
                test: &actions.sigma,
                known: actions.sigma_known,
            },
            likelihood: Likelihood::Gaussian,
        }
    }
}

impl Policy for MethodAgent<'_> {
    fn name(&self) -> &str {
        self.method.name()
    }

    fn diverged(&self) -> bool {
        self.diverged
    }

    fn choose(
        &mut self,
        actions: &Actions,
        history: &History,
        batch: usize,
        rng: &mut Rng,
    ) -> Result<Vec<usize>> {
        if self.diverged {
            // Its results are left out: any valid action keeps the loop's bookkeeping.
            return Ok(vec![0; batch]);
        }
        let pred = self.fit(actions, history)?;
        Ok(self.decide(pred.as_ref(), actions, batch, rng))
    }
}

/// A t's scale factor √(ν/χ²_ν) (χ²_ν = 2·Gamma(ν/2)).
fn t_scale(nu: f64, rng: &mut Rng) -> f64 {
    (nu / (2.0 * rng.gamma(nu / 2.0))).sqrt()
}

/// One draw of f over every action from the method's own joint (module docs).
pub fn thompson_draw(pred: &Prediction, rng: &mut Rng) -> Vec<f64> {
    match JointKind::of(pred) {
        JointKind::Gaussian => {
            let j = pred.extra.joint.as_ref().expect("kind Gaussian");
            let z: Vec<f64> = (0..j.rank).map(|_| rng.normal()).collect();
            let t = match pred.family {
                Family::StudentT { dof } => t_scale(dof, rng),
                _ => 1.0,
            };
            (pred.mean.iter().zip(j.factor.chunks(j.rank.max(1))))
                .map(|(m, row)| m + t * row.iter().zip(&z).map(|(f, z)| f * z).sum::<f64>())
                .collect()
        }
        JointKind::Draws => {
            let rows = pred.samples.as_ref().expect("kind Draws");
            rows[rng.below(rows.len() as u64) as usize].clone()
        }
        JointKind::Marginals => match &pred.extra.marginals_t {
            Some(t) => (pred.mean.iter().zip(&t.f_scale).zip(&t.dof))
                .map(|((m, s), &nu)| m + s * rng.normal() * t_scale(nu, rng))
                .collect(),
            None => {
                let nu = match pred.family {
                    Family::StudentT { dof } => Some(dof),
                    _ => None,
                };
                (pred.mean.iter().zip(&pred.std))
                    .map(|(m, s)| m + s * rng.normal() * nu.map_or(1.0, |nu| t_scale(nu, rng)))
                    .collect()
            }
        },
    }
}

/// The method's covariance (a t's scale matrix) of f over the pool.
enum Covariance {
    /// F·Fᵀ, F `[K, rank]`.
    Factor(Vec<f64>, usize),
    /// The draws' sample covariance: centred draws `[S, K]` over S − 1.
    Draws(Vec<Vec<f64>>),
    /// Marginal variances.
    Diagonal(Vec<f64>),
}

impl Covariance {
    fn of(pred: &Prediction) -> Covariance {
        match JointKind::of(pred) {
            JointKind::Gaussian => {
                let j = pred.extra.joint.as_ref().expect("kind Gaussian");
                Covariance::Factor(j.factor.clone(), j.rank)
            }
            JointKind::Draws => {
                let rows = pred.samples.as_ref().expect("kind Draws");
                let k = rows[0].len();
                let s = rows.len() as f64;
                let mean: Vec<f64> = (0..k)
                    .map(|i| rows.iter().map(|r| r[i]).sum::<f64>() / s)
                    .collect();
                let scale = 1.0 / (s - 1.0).max(1.0).sqrt();
                Covariance::Draws(
                    rows.iter()
                        .map(|r| r.iter().zip(&mean).map(|(v, m)| (v - m) * scale).collect())
                        .collect(),
                )
            }
            JointKind::Marginals => Covariance::Diagonal(match &pred.extra.marginals_t {
                Some(t) => t.f_scale.iter().map(|s| s * s).collect(),
                None => pred.std.iter().map(|s| s * s).collect(),
            }),
        }
    }

    fn at(&self, a: usize, b: usize) -> f64 {
        match self {
            Covariance::Factor(f, r) => (f[a * r..(a + 1) * r].iter())
                .zip(&f[b * r..(b + 1) * r])
                .map(|(x, y)| x * y)
                .sum(),
            Covariance::Draws(d) => d.iter().map(|row| row[a] * row[b]).sum(),
            Covariance::Diagonal(v) => {
                if a == b {
                    v[a]
                } else {
                    0.0
                }
            }
        }
    }
}

/// The method's noise sd at every action: its own estimate, else the problem's σ(x).
fn noise_sd(pred: &Prediction, actions: &Actions) -> Vec<f64> {
    match (&pred.noise_std, &pred.extra.sample_noise) {
        (Some(s), _) => s.clone(),
        (None, Some(rows)) if !rows.is_empty() => (0..actions.len())
            .map(|i| (rows.iter().map(|r| r[i] * r[i]).sum::<f64>() / rows.len() as f64).sqrt())
            .collect(),
        _ => actions.sigma.clone(),
    }
}
