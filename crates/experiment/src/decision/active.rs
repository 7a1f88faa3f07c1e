//! Active learning (spec §12): the pool is the action set; each step a learner picks a batch
//! of inputs to be labelled (y drawn from the model, the same noise stream as the bandit's),
//! and after each step its predictions at the pool are scored against the truth f: the RMSE
//! of the mean, and the NLL of f under the predictive of f (normal, or Student t when σ's
//! scale is estimated). `al_auc` is the mean RMSE over the steps.
//!
//! The built-in learners predict with the exact posterior given their labels and differ in
//! what they label: the exact learner (`BLR`) picks the batch greedily by log-det information
//! gain on the anchor's covariance ([`greedy_logdet`]; for a batch of one, the largest
//! predictive variance), `MaxVar` the batch's every input by the largest predictive variance
//! alone (no joint: it may pick one input twice), `Random` uniformly. None of these choices
//! depends on y when σ is known: the exact learner's labels are a design, as spec §12 says.

use statrs::distribution::{Continuous, Normal, StudentsT};
use uqbench_core::Rng;

use super::bandit::{play, Policy, Schedule};
use super::env::{Actions, Environment, History};
use super::exact::{argmax, greedy_logdet, ExactPosterior};
use crate::error::Result;

/// The exact active learner: the batch by greedy log-det gain on the anchor's covariance.
#[derive(Debug, Default)]
pub struct ExactLearner;

impl Policy for ExactLearner {
    fn name(&self) -> &str {
        "BLR"
    }

    fn choose(
        &mut self,
        actions: &Actions,
        history: &History,
        batch: usize,
        _: &mut Rng,
    ) -> Result<Vec<usize>> {
        let post = ExactPosterior::fit(actions, history, "the exact active learner")?;
        Ok(greedy_logdet(
            actions.len(),
            |a, b| post.cov(a, b),
            &post.noise_std,
            batch,
        ))
    }
}

/// The largest predictive variance of y, for every input of the batch.
#[derive(Debug, Default)]
pub struct MaxVariance;

impl Policy for MaxVariance {
    fn name(&self) -> &str {
        "MaxVar"
    }

    fn choose(
        &mut self,
        actions: &Actions,
        history: &History,
        batch: usize,
        _: &mut Rng,
    ) -> Result<Vec<usize>> {
        let post = ExactPosterior::fit(actions, history, "the max-variance learner")?;
        let var: Vec<f64> = (post.variance().iter().zip(&post.noise_std))
            .map(|(v, s)| v + s * s)
            .collect();
        Ok(vec![argmax(&var); batch])
    }
}

/// The scores of one learner on one repetition, after each step.
#[derive(Debug, Clone, PartialEq)]
pub struct Learning {
    /// The RMSE of the predictive mean against f over the pool.
    pub rmse: Vec<f64>,
    /// The mean NLL of f under the predictive of f.
    pub nll: Vec<f64>,
}

impl Learning {
    /// `al_auc`: the mean RMSE over the steps (the area under the RMSE-vs-labels curve per
    /// step).
    pub fn auc(&self) -> f64 {
        self.rmse.iter().sum::<f64>() / self.rmse.len().max(1) as f64
    }
}

/// The RMSE and mean NLL of `post` against the truth `f`.
pub fn score(post: &ExactPosterior, f: &[f64]) -> (f64, f64) {
    let var = post.variance();
    let mut sse = 0.0;
    let mut nll = 0.0;
    for ((m, v), f) in post.mean.iter().zip(&var).zip(f) {
        sse += (m - f) * (m - f);
        let sd = v.sqrt();
        nll -= match post.dof {
            Some(nu) => StudentsT::new(*m, sd, nu).map_or(f64::NEG_INFINITY, |t| t.ln_pdf(*f)),
            None => Normal::new(*m, sd).map_or(f64::NEG_INFINITY, |n| n.ln_pdf(*f)),
        };
    }
    let n = f.len() as f64;
    ((sse / n).sqrt(), nll / n)
}

/// Runs `learner` on `env` from the shared `initial` labels; the predictions after each step
/// are the exact posterior's given the labels so far.
pub fn run(
    env: &Environment,
    schedule: Schedule,
    initial: &[usize],
    learner: &mut dyn Policy,
    seed: u64,
) -> Result<(History, Learning)> {
    let mut learning = Learning {
        rmse: Vec::with_capacity(schedule.steps),
        nll: Vec::with_capacity(schedule.steps),
    };
    let (_, history) = play(env, schedule, initial, learner, seed, &mut |h| {
        learning.add(env, h)
    })?;
    Ok((history, learning))
}

impl Learning {
    /// The scores after a step whose labels are `history`: the exact posterior's given them.
    pub(crate) fn add(&mut self, env: &Environment, history: &History) -> Result<()> {
        let post = ExactPosterior::fit(&env.actions, history, "the active learner's predictions")?;
        let (rmse, nll) = score(&post, &env.truth);
        self.rmse.push(rmse);
        self.nll.push(nll);
        Ok(())
    }
}
