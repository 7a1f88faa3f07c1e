//! The anchor as a method: Bayesian linear regression with the flat prior on the problem's
//! features, exact, through the same [`Method`] trait as every other method. It needs the
//! task's features G (a problem linear in declared features) and σ(x); it trains nothing.

use std::collections::BTreeMap;

use uqbench_core::{Compute, Extra, FactorJoint, Family, Method, MethodError, Prediction, Task};

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
        exact(task, ANCHOR, None, progress)
    }
}

/// Bayesian linear regression under the Gaussian prior N(0, σ_p²) on the coefficients of the
/// features that vary over the training inputs (the intercept keeps the flat prior), σ known
/// ([`Anchor::with_gaussian_prior`]; where σ is known only up to scale, the flat fit's σ̂
/// plugged in: [`plug_in`]): the exact reference of the methods with that prior
/// (ensemble+ and SG-MCMC with `prior_sd`). Not the anchor: it is a method of the spec
/// (`kind = "BLRGaussian"`, `prior_sd`), scored against the anchor like every other.
#[derive(Debug, Clone)]
pub struct GaussianBlr {
    name: String,
    prior_sd: f64,
}

impl GaussianBlr {
    /// The method `name` with the prior sd σ_p.
    pub fn new(name: &str, prior_sd: f64) -> Result<GaussianBlr, MethodError> {
        if !(prior_sd.is_finite() && prior_sd > 0.0) {
            return Err(MethodError::invalid(
                format!("{name}.prior_sd"),
                prior_sd,
                "a positive number",
            ));
        }
        Ok(GaussianBlr {
            name: name.to_string(),
            prior_sd,
        })
    }
}

impl Method for GaussianBlr {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        1
    }

    fn cost(&self, n_train: usize, _epochs: usize) -> f64 {
        n_train as f64
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        Some(task.features?.p)
    }

    fn check(&self, task: &Task<'_>, _levels: &[f64]) -> Result<(), MethodError> {
        task.validate()?;
        features(task, &self.name).map(|_| ())
    }

    fn run(
        &self,
        task: &Task<'_>,
        _compute: &Compute,
        _keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        exact(task, &self.name, Some(self.prior_sd), progress)
    }
}

/// A posterior as a method's prediction: its mean, sd (normal, or Student t with its degrees
/// of freedom), Gaussian joint of rank p and training fit.
fn prediction(post: crate::posterior::Posterior, p: usize) -> Prediction {
    Prediction {
        family: match post.dof {
            None => Family::Normal,
            Some(dof) => Family::StudentT { dof },
        },
        mean: post.mean,
        std: post.std,
        extra: Extra::joint(Some(FactorJoint {
            factor: post.factor,
            rank: p,
        })),
        train_mean: Some(post.fitted),
        ..Prediction::default()
    }
}

/// The task's features, which an exact posterior needs.
fn features<'a>(task: &Task<'a>, name: &str) -> Result<uqbench_core::Features<'a>, MethodError> {
    task.features.ok_or_else(|| {
        MethodError::invalid(
            name,
            "a problem without declared features",
            "a problem linear in known features (a surrogate or classification problem \
             has no exact posterior)",
        )
    })
}

/// The Gaussian-prior posterior where σ is known only up to its scale (`sigma_known = false`):
/// per repetition, the scale from the flat-prior fit's residuals (the anchor's unbiased
/// σ̂² = RSS/(N − p), in units of σ(x)'s shape) is plugged in, and the posterior is the
/// Gaussian-prior one at that σ: normal given σ̂, not exact (σ's own uncertainty is not
/// integrated out, which the Gaussian prior's non-conjugacy would need). Recorded per
/// repetition as the scalar `plug_in_noise_scale`.
fn plug_in(
    task: &Task<'_>,
    name: &str,
    f: uqbench_core::Features<'_>,
    prior_sd: f64,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<Prediction>, MethodError> {
    let (seeds, noise) = (&task.seeds, &task.noise);
    let failed = |e: crate::error::AnchorError| MethodError::Failed(format!("{name}: {e}"));
    let flat = Anchor::from_features(
        f.p,
        f.train,
        noise.train,
        f.test,
        noise.test,
        false,
        &seeds.experiment,
        &seeds.setting,
    )
    .map_err(failed)?;
    task.y_train
        .iter()
        .enumerate()
        .map(|(k, y)| {
            let scale = flat.noise_scale(y).map_err(failed)?;
            let train: Vec<f64> = noise.train.iter().map(|s| s * scale).collect();
            let test: Vec<f64> = noise.test.iter().map(|s| s * scale).collect();
            let fit = Anchor::with_gaussian_prior(
                f.p,
                f.train,
                &train,
                f.test,
                &test,
                prior_sd,
                &seeds.experiment,
                &seeds.setting,
            )
            .map_err(failed)?;
            let post = fit.posterior(y).map_err(failed)?;
            progress(k + 1);
            Ok(Prediction {
                noise_std: Some(test),
                scalars: BTreeMap::from([("plug_in_noise_scale".to_string(), scale)]),
                ..prediction(post, f.p)
            })
        })
        .collect()
}

/// The exact posterior per repetition: flat prior (`prior_sd` `None`), or the Gaussian prior
/// with σ known (σ known up to scale: [`plug_in`]).
fn exact(
    task: &Task<'_>,
    name: &str,
    prior_sd: Option<f64>,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<Prediction>, MethodError> {
    task.validate()?;
    let f = features(task, name)?;
    let (seeds, noise) = (&task.seeds, &task.noise);
    let fit = match prior_sd {
        None => Anchor::from_features(
            f.p,
            f.train,
            noise.train,
            f.test,
            noise.test,
            noise.known,
            &seeds.experiment,
            &seeds.setting,
        ),
        Some(sd) if !noise.known => return plug_in(task, name, f, sd, progress),
        Some(sd) => Anchor::with_gaussian_prior(
            f.p,
            f.train,
            noise.train,
            f.test,
            noise.test,
            sd,
            &seeds.experiment,
            &seeds.setting,
        ),
    };
    let anchor = fit.map_err(|e| MethodError::Failed(e.to_string()))?;
    task.y_train
        .iter()
        .enumerate()
        .map(|(k, y)| {
            let post = anchor
                .posterior(y)
                .map_err(|e| MethodError::Failed(e.to_string()))?;
            progress(k + 1);
            Ok(Prediction {
                noise_std: (!noise.known).then(|| post.noise_std.clone()),
                noise_known: noise.known,
                ..prediction(post, f.p)
            })
        })
        .collect()
}
