//! Decisions against the exact posterior (spec §12): a spec's `[decision]` section turns a
//! regression problem of uqbench into a sequential one, repetition by repetition, and scores
//! each policy's decisions against the exact posterior's.
//!
//! - [`env`]: a repetition's action set (K of the problem's test inputs, their features G
//!   and σ), the truth there, the reward stream every policy of the repetition shares, and
//!   the regret bookkeeping;
//! - [`exact`]: the anchor over the action set given an agent's data (normal, or Student t),
//!   its joint draws, and the greedy log-det batch;
//! - [`bandit`]: the [`bandit::Policy`] trait, the baselines (the exact Thompson sampler
//!   `BLR`, `Greedy`, `Random`, `Oracle`) and the loop;
//! - [`active`]: active learning on the same loop: the exact learner (`BLR`, log-det batch),
//!   `MaxVar`, `Random`, scored by RMSE and NLL after each step and `al_auc`;
//! - [`agent`]: a method of uqbench as an agent ([`agent::MethodAgent`]): retrained from
//!   scratch on its data at every step (or warm-started), Thompson sampling from its own joint or its log-det
//!   batch on its covariance;
//! - [`lockstep`]: a method's agents of every repetition stepped together, each step's
//!   trainings through one `run_tasks` (one engine job for the ensembles, ensemble+,
//!   SG-MCMC and the dropout family);
//! - [`results`]: the rows (`regret`, `regret_ratio`, `optimal_fraction`; `al_auc`,
//!   `al_auc_ratio`, `nll`), their means with standard errors, the mean curves, the files.
//!
//! Seeds: per repetition, purpose `decision/rewards` (the noise of every pull),
//! `decision/initial` (the initial pulls every policy shares) and `decision/<policy>` (a
//! policy's own draws), so a policy's run does not depend on which others ran.

pub mod active;
pub mod agent;
pub mod bandit;
pub mod env;
pub mod exact;
pub mod lockstep;
pub mod results;

use serde::{Deserialize, Serialize};
use uqbench_anchor::Problem;
use uqbench_core::SeedPath;

use crate::bail;
use crate::error::Result;
use bandit::{Policy, Schedule};
use env::{initial_actions, Environment};

/// What the decisions are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecisionKind {
    /// A bandit over the action set: maximise f, scored by regret.
    Bandit,
    /// Active learning over the pool: label the inputs that teach most, scored by RMSE.
    Active,
}

/// The `[decision]` section of a spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionSpec {
    /// `bandit` or `active`.
    pub kind: DecisionKind,
    /// Repetitions per setting (fresh noise, the same truth).
    pub repetitions: u64,
    /// The number K of actions (K test inputs evenly spaced through the test set); all of
    /// them when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actions: Option<usize>,
    /// The horizon: steps after the initial pulls.
    pub steps: usize,
    /// Actions per step.
    #[serde(default = "one")]
    pub batch: usize,
    /// Random pulls every policy starts from; at least the problem's features p (p + 1 when
    /// σ's scale is estimated), so that the exact posterior exists from the start. Default
    /// 2p.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial: Option<usize>,
    /// Methods of the spec (built-in kinds or `[methods.NAME]` tables) run as agents beside
    /// the baselines ([`agent`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// How an agent learns from a step's data.
    #[serde(default)]
    pub update: Update,
    /// Epochs of an agent's every update: every retraining (`retrain`), or every
    /// continuation after the first training (`warm`). Spec §3's 300 at c = 1 by default.
    #[serde(default = "default_update_epochs")]
    pub update_epochs: usize,
    /// `warm` only: the epochs of the first training, from scratch on the initial pulls
    /// (default `update_epochs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_epochs: Option<usize>,
}

/// How a method agent learns from the data of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Update {
    /// Trained from scratch on all its data (fresh initial weights and streams per fit): each
    /// step's agent is the method as the standard track runs it, on that step's data.
    #[default]
    Retrain,
    /// Trained from scratch on the initial pulls (`initial_epochs`), then at every step
    /// continued from its weights after the previous step for `update_epochs` on all its data
    /// so far (the method's [`uqbench_core::WarmStart`], as online neural bandits usually
    /// update). A warm-started network is not the method the standard track scores at that
    /// step's data (its training so far is the sum of its updates), which is the question
    /// the comparison with `retrain` answers (docs/decisions.md).
    Warm,
}

/// The names the baselines take in results: no agent may take one.
pub const BASELINE_NAMES: &[&str] = &["BLR", "Greedy", "Random", "Oracle", "MaxVar"];

fn one() -> usize {
    1
}

fn default_update_epochs() -> usize {
    300
}

impl DecisionSpec {
    /// The initial pulls on a problem with `p` features.
    pub fn initial_pulls(&self, p: usize) -> usize {
        self.initial.unwrap_or(2 * p)
    }

    /// The steps and actions per step.
    pub fn schedule(&self) -> Schedule {
        Schedule {
            steps: self.steps,
            batch: self.batch,
        }
    }

    /// The epochs of an agent's first training (on the initial pulls).
    pub fn first_epochs(&self) -> usize {
        self.initial_epochs.unwrap_or(self.update_epochs)
    }

    /// Checks the section against `problem`, before anything runs.
    pub fn validate(&self, problem: &Problem) -> Result<()> {
        if self.repetitions == 0 {
            bail!("[decision] repetitions = 0; valid: at least 1");
        }
        if self.steps == 0 {
            bail!("[decision] steps = 0; valid: at least 1");
        }
        if self.batch == 0 {
            bail!("[decision] batch = 0; valid: at least 1");
        }
        if self.update_epochs == 0 {
            bail!("[decision] update_epochs = 0; valid: at least 1");
        }
        match (self.update, self.initial_epochs) {
            (_, Some(0)) => bail!("[decision] initial_epochs = 0; valid: at least 1"),
            (Update::Retrain, Some(e)) => bail!(
                "[decision] initial_epochs = {e} with update = \"retrain\"; valid: \
                 initial_epochs with update = \"warm\" only (every retraining takes \
                 update_epochs)"
            ),
            _ => {}
        }
        for (i, m) in self.methods.iter().enumerate() {
            if BASELINE_NAMES.contains(&m.as_str()) {
                bail!(
                    "[decision] methods: `{m}` is the name of a baseline policy; valid: a \
                     method table's name other than {}",
                    BASELINE_NAMES.join(", ")
                );
            }
            if self.methods[..i].contains(m) {
                bail!("[decision] methods: `{m}` listed twice; valid: each method once");
            }
        }
        let env = Environment::from_problem(problem, self.actions, 0)?;
        let p = env.actions.p;
        let need = p + usize::from(!problem.sigma_known);
        let initial = self.initial_pulls(p);
        if initial < need {
            bail!(
                "[decision] initial = {initial}: problem {} has p = {p} features{}; valid: at \
                 least {need}, so that the exact posterior exists from the first step",
                problem.display_name(),
                if problem.sigma_known {
                    ""
                } else {
                    " and estimates σ's scale"
                }
            );
        }
        if env.actions.len() < p {
            bail!(
                "[decision] actions = {}: fewer than the problem's p = {p} features, so no \
                 data on them identify γ; valid: at least {p}",
                env.actions.len()
            );
        }
        Ok(())
    }
}

/// One policy's results on one repetition.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyResult {
    /// The policy's name.
    pub policy: String,
    /// Bandit: cumulative regret after each step. Active: RMSE after each step.
    pub curve: Vec<f64>,
    /// Bandit: the share of actions on the optimal arm. Active: the mean NLL at the horizon.
    pub extra: f64,
}

/// The built-in policies of `kind`, the exact one first.
pub fn baselines<'a>(kind: DecisionKind, env: &Environment) -> Vec<Box<dyn Policy + 'a>> {
    match kind {
        DecisionKind::Bandit => vec![
            Box::new(bandit::ExactThompson),
            Box::new(bandit::Greedy),
            Box::new(bandit::Uniform),
            Box::new(bandit::Oracle {
                best: env.optimal(),
            }),
        ],
        DecisionKind::Active => vec![
            Box::new(active::ExactLearner),
            Box::new(active::MaxVariance),
            Box::new(bandit::Uniform),
        ],
    }
}

/// Repetition `repetition` of `problem` (one setting of the experiment `experiment` with base
/// seed `base`) under its `[decision]` section: the baselines, then `own` policies (a user's agent), each on the repetition's
/// shared rewards and initial pulls. What `uqbench decide` and the Python package run.
pub fn run_spec_repetition(
    (base, experiment): (u64, &str),
    decision: &DecisionSpec,
    problem: &Problem,
    repetition: u64,
    own: Vec<Box<dyn Policy + '_>>,
) -> Result<Vec<PolicyResult>> {
    let label = problem.setting.label();
    let seeds = SeedPath {
        base,
        experiment,
        setting: &label,
        repetition,
        member: 0,
        purpose: "",
    };
    // A random design's repetition has its own test inputs, so its own actions.
    let problem = problem.at_repetition(repetition)?;
    let env = Environment::from_problem(&problem, decision.actions, 0)?;
    let mut policies = baselines(decision.kind, &env);
    policies.extend(own);
    run_repetition(decision, &problem, &seeds, &mut policies)
}

/// Runs `policies` on repetition `seeds.repetition` of `problem` under `spec`.
pub fn run_repetition(
    spec: &DecisionSpec,
    problem: &Problem,
    seeds: &SeedPath<'_>,
    policies: &mut [Box<dyn Policy + '_>],
) -> Result<Vec<PolicyResult>> {
    let game = Game::new(spec, problem, seeds)?;
    let (env, initial, schedule) = (&game.env, &game.initial, spec.schedule());
    let mut out = Vec::with_capacity(policies.len());
    for policy in policies.iter_mut() {
        let own = game.policy_seed(policy.name());
        let (curve, extra) = match spec.kind {
            DecisionKind::Bandit => {
                let trace = bandit::run(env, schedule, initial, policy.as_mut(), own)?;
                (trace.regret.curve, trace.regret.optimal_fraction)
            }
            DecisionKind::Active => {
                let (_, learning) = active::run(env, schedule, initial, policy.as_mut(), own)?;
                let nll = learning.nll.last().copied().unwrap_or(f64::NAN);
                (learning.rmse, nll)
            }
        };
        out.push(PolicyResult::of(
            policy.name(),
            policy.diverged(),
            curve,
            extra,
        ));
    }
    Ok(out)
}

/// One repetition's game as every policy meets it: the environment (its actions, truth and
/// reward stream, seed `decision/rewards`) and the initial pulls (`decision/initial`), and
/// each policy's own stream (`decision/<policy>`).
pub(crate) struct Game {
    /// The environment.
    pub env: Environment,
    /// The initial pulls every policy shares.
    pub initial: Vec<usize>,
    /// The repetition's seed path (its purpose left empty).
    path: OwnedPath,
}

/// A [`SeedPath`] that owns its names.
struct OwnedPath(u64, String, String, u64);

impl OwnedPath {
    fn seed(&self, purpose: &str) -> u64 {
        SeedPath {
            base: self.0,
            experiment: &self.1,
            setting: &self.2,
            repetition: self.3,
            member: 0,
            purpose,
        }
        .seed()
    }
}

impl Game {
    /// Repetition `seeds.repetition` of `problem` (already at that repetition) under `spec`.
    pub fn new(spec: &DecisionSpec, problem: &Problem, seeds: &SeedPath<'_>) -> Result<Game> {
        let path = OwnedPath(
            seeds.base,
            seeds.experiment.to_string(),
            seeds.setting.to_string(),
            seeds.repetition,
        );
        let env = Environment::from_problem(problem, spec.actions, path.seed("decision/rewards"))?;
        let (k, pulls) = (env.actions.len(), spec.initial_pulls(env.actions.p));
        let initial = initial_actions(k, pulls, path.seed("decision/initial"));
        Ok(Game { env, initial, path })
    }

    /// Policy `name`'s own stream on this repetition.
    pub fn policy_seed(&self, name: &str) -> u64 {
        self.path.seed(&format!("decision/{name}"))
    }
}

impl PolicyResult {
    /// The result of policy `name` (NaN where it diverged: left out of its means).
    pub(crate) fn of(name: &str, diverged: bool, curve: Vec<f64>, extra: f64) -> PolicyResult {
        let policy = name.to_string();
        match diverged {
            true => PolicyResult {
                policy,
                curve: vec![f64::NAN; curve.len()],
                extra: f64::NAN,
            },
            false => PolicyResult {
                policy,
                curve,
                extra,
            },
        }
    }
}
