//! Quantile regression networks (`QuantileRegression`), the base of CQR (Romano et al. 2019):
//! one network per member with K = 1 + 2L outputs, the median and for each of the L central
//! levels l the quantiles at (1 − l)/2 and (1 + l)/2, trained jointly on the summed pinball
//! loss ([`pinball::Pinball`], its head). The prediction is the median; the prediction
//! intervals are the quantile bands (members average each quantile; a band whose ends cross
//! at an input is reordered there). It makes no statement about f itself: its std of f is 0,
//! so its CI of f is the point prediction, and no KL to the anchor is defined.

pub mod pinball;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use pinball::{Pinball, MAX_QUANTILES};
use uqbench_core::{Compute, Extra, Family, Method, MethodError, Prediction, QuantileBand, Task};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::trainer::{self, Resources, TrainSettings};

/// The quantile network's own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuantileSettings {
    /// Members whose quantiles are averaged (1).
    pub members: usize,
    /// The central levels of the bands (at most 4). Left out in a spec, the run's interval
    /// levels and 0.95 (what the summaries score: `uqbench_methods::build_for` sets them);
    /// built without a spec, 0.5, 0.8, 0.9, 0.95.
    pub levels: Vec<f64>,
}

impl Default for QuantileSettings {
    fn default() -> Self {
        QuantileSettings {
            members: 1,
            levels: vec![0.5, 0.8, 0.9, 0.95],
        }
    }
}

/// Settings: the network, its optimiser and [`QuantileSettings`].
pub type QuantileConfig = MethodConfig<QuantileSettings>;

/// The method.
#[derive(Debug, Clone)]
pub struct QuantileNet {
    name: String,
    config: QuantileConfig,
    taus: Arc<Pinball>,
}

impl QuantileNet {
    /// Checks the settings up front.
    pub fn new(name: &str, config: QuantileConfig) -> Result<QuantileNet, MethodError> {
        config.net.shape(1, 1).validate()?;
        let mut taus = vec![0.5];
        for &l in &config.levels {
            taus.extend([(1.0 - l) / 2.0, (1.0 + l) / 2.0]);
        }
        let taus = Pinball::new(&taus)
            .filter(|_| config.members > 0)
            .ok_or_else(|| {
                MethodError::invalid(
                    format!("{name}.levels, members"),
                    format!("{:?}, {}", config.levels, config.members),
                    format!(
                        "1 to {} levels strictly between 0 and 1, and at least 1 member",
                        (MAX_QUANTILES - 1) / 2
                    ),
                )
            })?;
        Ok(QuantileNet {
            name: name.to_string(),
            config,
            taus: Arc::new(taus),
        })
    }
}

impl Method for QuantileNet {
    fn name(&self) -> &str {
        &self.name
    }

    fn band_levels(&self) -> Option<Vec<f64>> {
        Some(self.config.levels.clone())
    }

    fn replicas_per_repetition(&self) -> usize {
        self.config.members
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        let k = self.taus.levels().len();
        Some(self.config.members * self.config.net.shape(task.d, k).parameters())
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        _keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        task.require_gaussian(&self.name)?;
        let c = &self.config;
        let (n, m, members) = (task.n_train(), task.n_test(), c.members);
        let k = self.taus.levels().len();
        let settings = TrainSettings {
            own_head: Some(Arc::clone(&self.taus) as Arc<dyn trainer::Head>),
            ..c.optim.settings(task.epochs, n)
        };
        let shape = c.net.shape(task.d, k);
        let out = trainer::train_task(
            task,
            &self.name,
            members,
            &shape,
            c.net.standardize,
            &settings,
            &Resources::of(compute)?,
            progress,
        )?;
        Ok((0..task.repetitions.len())
            .map(|rep| {
                let replicas = rep * members..(rep + 1) * members;
                let diverged = replicas.clone().any(|r| out.diverged[r]);
                // Output j at test input i, averaged over the members.
                let q = |i: usize, j: usize| -> f64 {
                    replicas
                        .clone()
                        .map(|r| f64::from(out.test_out[(r * m + i) * k + j]))
                        .sum::<f64>()
                        / members as f64
                };
                let bands = c
                    .levels
                    .iter()
                    .enumerate()
                    .map(|(l, &level)| {
                        let (lower, upper) = (0..m)
                            .map(|i| {
                                let (a, b) = (q(i, 1 + 2 * l), q(i, 2 + 2 * l));
                                (a.min(b), a.max(b))
                            })
                            .unzip();
                        QuantileBand {
                            level,
                            lower,
                            upper,
                        }
                    })
                    .collect();
                let train_mean = (0..n)
                    .map(|i| {
                        replicas
                            .clone()
                            .map(|r| f64::from(out.train_pred[r * n + i]))
                            .sum::<f64>()
                            / members as f64
                    })
                    .collect();
                let mut p = Prediction {
                    mean: (0..m).map(|i| q(i, 0)).collect(),
                    std: vec![0.0; m],
                    family: Family::Normal,
                    extra: Extra {
                        quantiles: Some(bands),
                        ..Extra::default()
                    },
                    train_mean: Some(train_mean),
                    diverged,
                    ..Prediction::default()
                };
                let objective = replicas.map(|r| out.final_objective[r]).sum::<f64>();
                p.scalars
                    .insert("final_objective".into(), objective / members as f64);
                p
            })
            .collect())
    }
}
