//! The anchor as a method: Bayesian linear regression with the flat prior on the problem's
//! features, exact, through the same [`Method`] trait as every other method. It needs the
//! task's features G (a problem linear in declared features) and σ(x); it trains nothing.

use std::collections::BTreeMap;

use uqbench_core::{Compute, Family, FactorJoint, Method, MethodError, Prediction, Task};

use crate::posterior::Anchor;

/// The anchor's name in specs and results.
pub const ANCHOR: &str = "BLR";

/// The anchor (BLR): the exact posterior of f(x*) per repetition, normal with σ known,
/// Student t with N − p degrees of freedom when only σ's shape is known.
#[derive(Debug, Clone, Default)]
pub struct Blr;

impl Method for Blr {
    fn name(&self) -> &str {
        ANCHOR
    }

    fn replicas_per_repetition(&self) -> usize {
        1
    }

    fn cost(&self, n_train: usize, _epochs: usize) -> f64 {
        // One least-squares solve; nothing trains.
        n_train as f64
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        Some(task.features?.p)
    }

    fn run(
        &self,
        task: &Task<'_>,
        _compute: &Compute,
        _keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        task.validate()?;
        let f = task.features.ok_or_else(|| {
            MethodError::invalid(
                ANCHOR,
                "a problem without declared features",
                "a problem linear in known features (a surrogate or classification problem \
                 has no anchor)",
            )
        })?;
        let anchor = Anchor::from_features(
            f.p,
            f.train,
            task.noise.train,
            f.test,
            task.noise.test,
            task.noise.known,
            &task.seeds.experiment,
            &task.seeds.setting,
        )
        .map_err(|e| MethodError::Failed(e.to_string()))?;
        task.y_train
            .iter()
            .enumerate()
            .map(|(k, y)| {
                let post = anchor
                    .posterior(y)
                    .map_err(|e| MethodError::Failed(e.to_string()))?;
                progress(k + 1);
                Ok(Prediction {
                    noise_std: (!task.noise.known).then(|| post.noise_std.clone()),
                    noise_known: task.noise.known,
                    family: match post.dof {
                        None => Family::Normal,
                        Some(dof) => Family::StudentT { dof },
                    },
                    mean: post.mean,
                    std: post.std,
                    joint: Some(FactorJoint {
                        factor: post.factor,
                        rank: f.p,
                    }),
                    train_mean: Some(post.fitted),
                    scalars: BTreeMap::new(),
                    ..Prediction::default()
                })
            })
            .collect()
    }
}
