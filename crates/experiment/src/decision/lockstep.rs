//! A method's agents on every repetition of a setting, stepped together: at each step every
//! repetition's agent is trained on its own data, all of them through one call of the method's
//! [`Method::run_tasks`] (or [`uqbench_core::WarmStart::run_warm_tasks`]): one engine job for
//! the ensembles, ensemble+, SG-MCMC and the dropout family on the built-in network, batched
//! across repetitions × members, which a GPU runs as one program per step instead of one per
//! repetition; the other methods' trainings spread over the cores as the repetitions did. Each
//! agent then decides on its own prediction with its own stream, so each repetition's result
//! is the one [`super::run_repetition`] gives it alone (tested), whichever other repetitions
//! ran.

use uqbench_anchor::Problem;
use uqbench_core::{Compute, Method, Prediction, SeedPath, WarmState};

use super::active::Learning;
use super::agent::{AgentData, MethodAgent};
use super::bandit::Play;
use super::env::Regret;
use super::{DecisionKind, DecisionSpec, Game, PolicyResult, Update};
use crate::error::Result;

/// `method` as the agent of every repetition of `problem` (one setting of the experiment
/// `(base seed, name)`) under `spec`: one result per repetition, in order, each what
/// [`super::run_repetition`] gives the agent on that repetition.
pub fn run_agents(
    spec: &DecisionSpec,
    problem: &Problem,
    (base, experiment): (u64, &str),
    method: &dyn Method,
    compute: &Compute,
) -> Result<Vec<PolicyResult>> {
    let label = problem.setting.label();
    let reps = (0..spec.repetitions)
        .map(|r| {
            let path = SeedPath {
                base,
                experiment,
                setting: &label,
                repetition: r,
                member: 0,
                purpose: "",
            };
            // As `run_spec_repetition`: a random design's repetition has its own actions.
            Game::new(spec, &*problem.at_repetition(r)?, &path)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut games: Vec<Play<'_>> = (reps.iter())
        .map(|g| {
            Play::new(
                &g.env,
                spec.schedule(),
                &g.initial,
                g.policy_seed(method.name()),
            )
        })
        .collect();
    let mut agents: Vec<MethodAgent<'_>> = (0..spec.repetitions)
        .map(|r| MethodAgent::of(method, compute, spec, (base, experiment), &label, r))
        .collect();
    let mut learning: Vec<Learning> = (0..reps.len())
        .map(|_| Learning {
            rmse: Vec::with_capacity(spec.steps),
            nll: Vec::with_capacity(spec.steps),
        })
        .collect();
    for _ in 0..spec.steps {
        let mut preds = fit_all(spec, method, compute, &reps, &games, &mut agents)?;
        for (k, game) in games.iter_mut().enumerate() {
            let batch = match agents[k].diverged {
                // Its results are left out: any valid action keeps the bookkeeping.
                true => vec![0; spec.batch],
                false => {
                    let pred = preds[k].take().flatten();
                    let actions = &reps[k].env.actions;
                    agents[k].decide(pred.as_ref(), actions, spec.batch, &mut game.rng)
                }
            };
            game.step(batch, method.name())?;
            if spec.kind == DecisionKind::Active {
                learning[k].add(&reps[k].env, &game.history)?;
            }
        }
    }
    Ok((games.into_iter().zip(&reps).zip(learning).zip(&agents))
        .map(|(((game, rep), learning), agent)| {
            let (curve, extra) = match spec.kind {
                DecisionKind::Bandit => {
                    let regret = Regret::of(&rep.env, &game.batches);
                    (regret.curve, regret.optimal_fraction)
                }
                DecisionKind::Active => {
                    let nll = learning.nll.last().copied().unwrap_or(f64::NAN);
                    (learning.rmse, nll)
                }
            };
            PolicyResult::of(method.name(), agent.diverged, curve, extra)
        })
        .collect())
}

/// Every live agent trained on its data so far, as one call of the method: its prediction
/// (`Some(None)` when its training diverged), `None` for an agent that diverged before.
fn fit_all(
    spec: &DecisionSpec,
    method: &dyn Method,
    compute: &Compute,
    reps: &[Game],
    games: &[Play<'_>],
    agents: &mut [MethodAgent<'_>],
) -> Result<Vec<Option<Option<Prediction>>>> {
    let live: Vec<usize> = (0..agents.len()).filter(|&k| !agents[k].diverged).collect();
    let data: Vec<AgentData> = (live.iter())
        .map(|&k| agents[k].data(&reps[k].env.actions, &games[k].history))
        .collect();
    let tasks: Vec<_> = (live.iter().zip(&data))
        .map(|(&k, d)| d.task(&reps[k].env.actions))
        .collect();
    let outs: Vec<Vec<Prediction>> = match spec.update {
        Update::Retrain => method.run_tasks(&tasks, compute, true)?,
        Update::Warm => {
            let Some(&first) = live.first() else {
                return Ok((0..agents.len()).map(|_| None).collect());
            };
            let warm = agents[first].warm_start()?;
            let from: Vec<Option<&WarmState>> = (live.iter())
                .map(|&k| agents[k].warm.as_ref().and_then(|(_, s)| s.as_ref()))
                .collect();
            let trained = warm.run_warm_tasks(&tasks, compute, true, &from)?;
            let (outs, states): (Vec<_>, Vec<_>) = trained.into_iter().unzip();
            for (&k, state) in live.iter().zip(states) {
                agents[k].keep_state(state);
            }
            outs
        }
    };
    if outs.len() != live.len() {
        crate::bail!(
            "agent {}: its method returned {} trainings for {} repetitions' tasks; valid: one \
             per task",
            method.name(),
            outs.len(),
            live.len()
        );
    }
    let mut preds: Vec<Option<Option<Prediction>>> = (0..agents.len()).map(|_| None).collect();
    for (&k, out) in live.iter().zip(outs) {
        preds[k] = Some(agents[k].accept(out)?);
    }
    Ok(preds)
}
