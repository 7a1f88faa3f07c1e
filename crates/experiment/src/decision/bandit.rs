//! The bandit of spec §12 and its baseline policies: the exact Thompson sampler (`BLR`: one
//! joint draw of f from the anchor's posterior per decision, act argmax), greedy on the exact
//! posterior's mean (`Greedy`), uniform (`Random`) and the oracle arm (`Oracle`, regret 0: the
//! reference the regret is counted from).
//!
//! A run of one policy on one repetition: the `initial` pulls every policy of the repetition
//! shares (step 0), then `steps` steps of `batch` actions each, all chosen on the data before
//! the step; the rewards then join the data.

use uqbench_core::Rng;

use super::env::{check_action, Actions, Environment, History, Regret};
use super::exact::{argmax, ExactPosterior};
use crate::error::Result;

/// A policy: chooses a batch of actions from what it has seen.
pub trait Policy {
    /// Its name in results.
    fn name(&self) -> &str;
    /// `batch` actions given `history`, each an index into `actions`; `rng` is the policy's
    /// own stream on this repetition.
    fn choose(
        &mut self,
        actions: &Actions,
        history: &History,
        batch: usize,
        rng: &mut Rng,
    ) -> Result<Vec<usize>>;
    /// Whether the policy diverged on this repetition (a method agent whose training gave
    /// non-finite predictions): its results are then left out of its metrics, as a diverged
    /// repetition is on the standard track.
    fn diverged(&self) -> bool {
        false
    }
}

/// Thompson sampling from the exact posterior (the anchor, BLR): for each action of the
/// batch one joint draw f̃ over all actions, act argmax f̃.
#[derive(Debug, Default)]
pub struct ExactThompson;

impl Policy for ExactThompson {
    fn name(&self) -> &str {
        "BLR"
    }

    fn choose(
        &mut self,
        actions: &Actions,
        history: &History,
        batch: usize,
        rng: &mut Rng,
    ) -> Result<Vec<usize>> {
        let post = ExactPosterior::fit(actions, history, "the exact Thompson sampler")?;
        Ok((0..batch).map(|_| argmax(&post.draw(rng))).collect())
    }
}

/// Greedy on the exact posterior's mean: the whole batch on argmax m.
#[derive(Debug, Default)]
pub struct Greedy;

impl Policy for Greedy {
    fn name(&self) -> &str {
        "Greedy"
    }

    fn choose(
        &mut self,
        actions: &Actions,
        history: &History,
        batch: usize,
        _rng: &mut Rng,
    ) -> Result<Vec<usize>> {
        let post = ExactPosterior::fit(actions, history, "the greedy policy")?;
        Ok(vec![argmax(&post.mean); batch])
    }
}

/// Uniformly random actions.
#[derive(Debug, Default)]
pub struct Uniform;

impl Policy for Uniform {
    fn name(&self) -> &str {
        "Random"
    }

    fn choose(
        &mut self,
        actions: &Actions,
        _history: &History,
        batch: usize,
        rng: &mut Rng,
    ) -> Result<Vec<usize>> {
        let k = actions.len() as u64;
        Ok((0..batch).map(|_| rng.below(k) as usize).collect())
    }
}

/// The optimal arm every time (it knows f).
#[derive(Debug)]
pub struct Oracle {
    /// The optimal action.
    pub best: usize,
}

impl Policy for Oracle {
    fn name(&self) -> &str {
        "Oracle"
    }

    fn choose(
        &mut self,
        _: &Actions,
        _: &History,
        batch: usize,
        _: &mut Rng,
    ) -> Result<Vec<usize>> {
        Ok(vec![self.best; batch])
    }
}

/// The shape of a bandit run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Steps after the initial pulls (the horizon T).
    pub steps: usize,
    /// Actions per step.
    pub batch: usize,
}

/// One policy's run on one repetition.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// The batch of actions of each step.
    pub batches: Vec<Vec<usize>>,
    /// Everything the policy saw at the end (the initial pulls first).
    pub history: History,
    /// Its regret.
    pub regret: Regret,
}

/// Runs `policy` on `env` from the shared `initial` pulls (step 0), with its own stream
/// `policy_seed`.
pub fn run(
    env: &Environment,
    schedule: Schedule,
    initial: &[usize],
    policy: &mut dyn Policy,
    policy_seed: u64,
) -> Result<Trace> {
    let (batches, history) = play(env, schedule, initial, policy, policy_seed, &mut |_| Ok(()))?;
    let regret = Regret::of(env, &batches);
    Ok(Trace {
        batches,
        history,
        regret,
    })
}

/// The loop both tracks share: the initial pulls, then each step's batch chosen on the data
/// so far and rewarded; `after_step` sees the data after each step. Returns every step's
/// batch and the final data.
pub(crate) fn play(
    env: &Environment,
    schedule: Schedule,
    initial: &[usize],
    policy: &mut dyn Policy,
    policy_seed: u64,
    after_step: &mut dyn FnMut(&History) -> Result<()>,
) -> Result<(Vec<Vec<usize>>, History)> {
    let mut game = Play::new(env, schedule, initial, policy_seed);
    for _ in 1..=schedule.steps {
        let batch = policy.choose(&env.actions, &game.history, schedule.batch, &mut game.rng)?;
        game.step(batch, policy.name())?;
        after_step(&game.history)?;
    }
    Ok((game.batches, game.history))
}

/// One policy's game on one repetition, step by step ([`play`] runs it to the horizon; the
/// lockstep driver of the method agents steps every repetition's together).
pub(crate) struct Play<'e> {
    env: &'e Environment,
    schedule: Schedule,
    /// The data so far (the initial pulls first).
    pub history: History,
    /// The policy's own stream.
    pub rng: Rng,
    /// Every step's batch so far.
    pub batches: Vec<Vec<usize>>,
}

impl<'e> Play<'e> {
    /// The game after the shared `initial` pulls (step 0), the policy's stream from
    /// `policy_seed`.
    pub fn new(
        env: &'e Environment,
        schedule: Schedule,
        initial: &[usize],
        policy_seed: u64,
    ) -> Play<'e> {
        let mut history = History::default();
        for (j, &a) in initial.iter().enumerate() {
            history.push(a, env.reward(0, j, a));
        }
        Play {
            env,
            schedule,
            history,
            rng: Rng::new(policy_seed),
            batches: Vec::with_capacity(schedule.steps),
        }
    }

    /// The next step: `batch` (chosen by the policy `name` on the data so far) checked and
    /// rewarded.
    pub fn step(&mut self, batch: Vec<usize>, name: &str) -> Result<()> {
        let t = self.batches.len() + 1;
        if batch.len() != self.schedule.batch {
            crate::bail!(
                "policy {name} chose {} actions at step {t}; valid: batch = {}",
                batch.len(),
                self.schedule.batch
            );
        }
        for (j, &a) in batch.iter().enumerate() {
            let a = check_action(&self.env.actions, a, name)?;
            self.history.push(a, self.env.reward(t, j, a));
        }
        self.batches.push(batch);
        Ok(())
    }
}
