//! A repetition's sequential problem (spec §12): the action set an agent sees, the truth it
//! does not, the rewards of its pulls, and the regret bookkeeping.
//!
//! The agent sees [`Actions`]: the inputs, the problem's features G and noise sd σ at each, and
//! whether σ is known (what the anchor needs). The [`Environment`] adds the true mean f = Gᵀγ
//! at each action, which only the bookkeeping reads: regret is Σ_t (max_x f(x) − f(x_t)),
//! never the noisy y.
//!
//! The reward of slot j of step t is y = f(x) + σ(x)·ε_{t,j}, with ε_{t,j} the (t, j)-th
//! standard normal of the repetition's reward stream, whatever the action: every policy of a
//! repetition meets the same noise (common random numbers), so their regrets are paired.

use uqbench_anchor::Problem;
use uqbench_core::seed::splitmix64;
use uqbench_core::Rng;

use crate::bail;
use crate::error::{Context, Result};

/// What an agent sees of the action set.
#[derive(Debug, Clone)]
pub struct Actions {
    /// Input dimension.
    pub d: usize,
    /// The actions' inputs `[K, d]`, row-major.
    pub x: Vec<f64>,
    /// Features per action.
    pub p: usize,
    /// G at the actions `[K, p]`, row-major.
    pub g: Vec<f64>,
    /// The noise sd σ(x) at each action (its shape, when σ's scale is not known).
    pub sigma: Vec<f64>,
    /// Whether the problem declares σ known (else the anchor estimates its scale: Student t).
    pub sigma_known: bool,
}

impl Actions {
    /// The number of actions K.
    pub fn len(&self) -> usize {
        self.sigma.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.sigma.is_empty()
    }

    /// G's row of action `a`.
    pub fn features(&self, a: usize) -> &[f64] {
        &self.g[a * self.p..(a + 1) * self.p]
    }
}

/// One repetition's environment: the actions, the truth at them and the reward stream.
#[derive(Debug, Clone)]
pub struct Environment {
    /// What the agents see.
    pub actions: Actions,
    /// The true mean f at each action.
    pub truth: Vec<f64>,
    /// The seed of the reward stream.
    pub reward_seed: u64,
}

impl Environment {
    /// `k` test inputs of `problem`, evenly spaced through the test set (test input
    /// ⌊i·M/k⌋ for i < k: on a grid, a coarser grid over the same range; all of them when
    /// `None`), as actions, with the reward stream `reward_seed`. The problem must be linear
    /// in declared features (the anchor's kind); a surrogate or classification problem is
    /// refused with the reason.
    pub fn from_problem(problem: &Problem, k: Option<usize>, reward_seed: u64) -> Result<Self> {
        let Some((features, _)) = problem.linear() else {
            bail!(
                "[decision] on problem {}: it is not linear in declared features, so it has no \
                 exact posterior to decide with; valid: a problem with [problem] features",
                problem.display_name()
            );
        };
        let m = problem.test.truth.len();
        let k = k.unwrap_or(m);
        if k == 0 || k > m {
            bail!(
                "[decision] actions = {k}: problem {} has {m} test inputs; valid: 1 to {m}",
                problem.display_name()
            );
        }
        let d = problem.d();
        let p = features.p();
        let picks: Vec<usize> = (0..k).map(|i| i * m / k).collect();
        let x: Vec<f64> = (picks.iter())
            .flat_map(|&i| problem.test.inputs.row(i).iter().copied())
            .collect();
        let mut g = vec![0.0; k * p];
        for (row, out) in x.chunks(d).zip(g.chunks_mut(p)) {
            features.eval_into(row, out);
        }
        Ok(Environment {
            actions: Actions {
                d,
                x,
                p,
                g,
                sigma: picks.iter().map(|&i| problem.test.sigma[i]).collect(),
                sigma_known: problem.sigma_known,
            },
            truth: picks.iter().map(|&i| problem.test.truth[i]).collect(),
            reward_seed,
        })
    }

    /// The best mean max_x f(x).
    pub fn best(&self) -> f64 {
        self.truth.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    }

    /// The optimal action (the first of equal best means).
    pub fn optimal(&self) -> usize {
        let best = self.best();
        self.truth.iter().position(|&f| f == best).unwrap_or(0)
    }

    /// The reward of `action` in slot `slot` of step `step`: f + σ·ε_{step,slot}.
    pub fn reward(&self, step: usize, slot: usize, action: usize) -> f64 {
        let key = splitmix64(self.reward_seed ^ splitmix64(((step as u64) << 20) | slot as u64));
        let eps = Rng::new(key).normal();
        self.truth[action] + self.actions.sigma[action] * eps
    }
}

/// What an agent has seen: the actions it pulled and their rewards, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// The pulled actions.
    pub actions: Vec<usize>,
    /// Their rewards.
    pub rewards: Vec<f64>,
}

impl History {
    /// Records a pull.
    pub fn push(&mut self, action: usize, reward: f64) {
        self.actions.push(action);
        self.rewards.push(reward);
    }

    /// The number of pulls.
    pub fn len(&self) -> usize {
        self.actions.len()
    }

    /// Whether nothing was pulled.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }
}

/// The regret of one policy on one repetition.
#[derive(Debug, Clone, PartialEq)]
pub struct Regret {
    /// Cumulative regret after each step (its batch included): R_t = Σ_{s ≤ t} Σ_j
    /// (f* − f(x_{s,j})).
    pub curve: Vec<f64>,
    /// The share of the policy's actions (initial ones excluded) that are the optimal arm.
    pub optimal_fraction: f64,
}

impl Regret {
    /// The bookkeeping of `steps` batches of pulls (`actions[t]` the batch of step t) in
    /// `env`.
    pub fn of(env: &Environment, steps: &[Vec<usize>]) -> Regret {
        let best = env.best();
        let optimal = env.optimal();
        let (mut total, mut pulls, mut hits) = (0.0, 0usize, 0usize);
        let curve = steps
            .iter()
            .map(|batch| {
                for &a in batch {
                    total += best - env.truth[a];
                    pulls += 1;
                    hits += usize::from(env.truth[a] == env.truth[optimal]);
                }
                total
            })
            .collect();
        Regret {
            curve,
            optimal_fraction: if pulls == 0 {
                0.0
            } else {
                hits as f64 / pulls as f64
            },
        }
    }

    /// The regret at the horizon.
    pub fn total(&self) -> f64 {
        self.curve.last().copied().unwrap_or(0.0)
    }
}

/// `n` distinct actions of `k` drawn uniformly (all of them, then repeats, when n > k): the
/// initial pulls every policy of a repetition starts from.
pub fn initial_actions(k: usize, n: usize, seed: u64) -> Vec<usize> {
    let mut rng = Rng::new(seed);
    let mut order: Vec<usize> = (0..k).collect();
    // Fisher–Yates.
    for i in (1..k).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    (0..n).map(|i| order[i % k]).collect()
}

/// Checks that `a` is an action of `actions`, naming `who` chose it.
pub fn check_action(actions: &Actions, a: usize, who: &str) -> Result<usize> {
    (a < actions.len())
        .then_some(a)
        .with_context(|| format!("{who} chose action {a}; valid: 0 to {}", actions.len() - 1))
}
