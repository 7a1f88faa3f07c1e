//! An ensemble of MC-dropout networks ([003]'s "ensemble of MC dropout"): M members, each
//! with Bernoulli dropout on its last hidden layer, T passes per member at prediction; the
//! prediction and uncertainty are the mean and std over all M·T passes.
//!
//! This file is the "add your own method" example of docs/methods.md: a whole method at engine speed
//! in one file. Its parts: the settings ([`EnsMcdSettings`], read from the spec's
//! `[methods.NAME]` table), the checks ([`EnsMcd::new`]), and the run: the engine's
//! [`TrainSettings`] with a stochastic layer ([`Bernoulli`]; a layer of your own is one file
//! in `uqbench_engine::stochastic`), [`trainer::train_task`] for the replica layout (M replicas per
//! repetition), and [`combine_members`] for the ensemble. Plus one line in the registry
//! (`KINDS` in `crates/methods/src/lib.rs`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use uqbench_core::{combine_members, Compute, Family, Method, MethodError, Prediction, Task};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::stochastic::{Bernoulli, StochasticLayer};
use uqbench_engine::trainer::{self, Resources, TrainSettings};

/// The ensemble of MC-dropout networks' own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnsMcdSettings {
    /// Members M (10).
    pub members: usize,
    /// Drop rate p of every member (0.1).
    pub p: f64,
    /// Prediction passes T per member (20).
    pub passes: usize,
}

impl Default for EnsMcdSettings {
    fn default() -> Self {
        EnsMcdSettings {
            members: 10,
            p: 0.1,
            passes: 20,
        }
    }
}

/// Settings of the ensemble of MC-dropout networks: the shared network and optimiser (λ on
/// the weights, not the biases, as MATLAB) and [`EnsMcdSettings`].
pub type EnsMcdConfig = MethodConfig<EnsMcdSettings>;

/// The method.
#[derive(Debug, Clone)]
pub struct EnsMcd {
    name: String,
    config: EnsMcdConfig,
}

impl EnsMcd {
    /// Checks the settings up front.
    pub fn new(name: &str, config: EnsMcdConfig) -> Result<EnsMcd, MethodError> {
        if config.members == 0 || config.passes == 0 {
            return Err(MethodError::invalid(
                format!("{name}.members × passes"),
                format!("{} × {}", config.members, config.passes),
                "at least one member and one pass",
            ));
        }
        Bernoulli { p: config.p }.validate()?;
        config.net.shape(1, 1).validate()?;
        if config.net.hidden.is_empty() {
            return Err(MethodError::invalid(
                format!("{name}.hidden"),
                "[]",
                "at least one hidden layer to apply dropout to",
            ));
        }
        Ok(EnsMcd {
            name: name.to_string(),
            config,
        })
    }
}

impl Method for EnsMcd {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        self.config.members
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        Some(self.config.members * self.config.net.shape(task.d, 1).parameters())
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        let c = &self.config;
        let (n, m, members) = (task.n_train(), task.n_test(), c.members);
        let settings = TrainSettings {
            dropout: Some(Arc::new(Bernoulli { p: c.p })),
            likelihood: task.likelihood,
            mc_passes: c.passes,
            ..c.optim.settings(task.epochs, n)
        };
        let shape = c.net.shape(task.d, 1);
        let resources = &Resources::of(compute)?;
        let out = trainer::train_task(
            task,
            &self.name,
            members,
            &shape,
            c.net.standardize,
            &settings,
            resources,
            progress,
        )?;
        Ok((0..task.repetitions.len())
            .map(|rep| {
                let replicas = rep * members..(rep + 1) * members;
                let members: Vec<_> = replicas.map(|r| out.member(r, m, n)).collect();
                combine_members(&members, Family::Normal, keep_samples)
            })
            .collect())
    }
}
