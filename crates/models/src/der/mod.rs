//! Deep evidential regression (Amini, Schwarting, Soleimany & Rus 2020), spec §11: one
//! network per repetition with a Normal–Inverse-Gamma head (γ, ν, α, β), trained on the NIG
//! negative log-likelihood plus λ·|y − γ|·(2ν + α) (its own head, [`nig::Evidential`], whose
//! module states the reference implementation's link and loss).
//!
//! Its claims, reported as it makes them: the prediction γ; the "aleatoric" variance
//! E[σ²] = β/(α − 1) as the noise sd (`noise_std`); the "epistemic" variance
//! Var[μ] = β/(ν(α − 1)) as the uncertainty of f (`std`), which the report sets beside the
//! exact posterior's sd like every method's. Its predictive of y is Student t with 2α degrees
//! of freedom, location γ and scale² β(1 + ν)/(να), and of μ the t with the same degrees of
//! freedom and scale² β/(να). The degrees of freedom differ between inputs: the family
//! [`Family::StudentTPerInput`] carries them with both scales ([`TMarginals`]), and its CI,
//! PI and CRPS are those t's in closed form. Its joint (spec §10) is their product. `draws`
//! draws of the NIG itself (σ²_s ∼ InvGamma(α, β), μ_s ∼ N(γ, σ²_s/ν) at every input,
//! independently between inputs: the NIG has no joint) give only its W2 to the exact
//! posterior, which has no closed form between a t of per-input ν and the anchor's marginal.

pub mod nig;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use nig::Evidential;
use uqbench_core::{
    Compute, Extra, Family, Method, MethodError, Prediction, Rng, TMarginals, Task,
};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::trainer::{self, Resources};

/// DER's own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DerSettings {
    /// λ, the evidential regulariser's coefficient (0.01, the reference's regression example).
    pub lambda: f64,
    /// Draws of the NIG per input for W2 to the anchor (1 000: a block of 20 repetitions at
    /// M = 1 000 test inputs then holds 160 MB of draws until stored); the intervals are the
    /// exact t's.
    pub draws: usize,
}

impl Default for DerSettings {
    fn default() -> Self {
        DerSettings {
            lambda: 0.01,
            draws: 1000,
        }
    }
}

/// DER's settings: network, optimiser and [`DerSettings`].
pub type DerConfig = MethodConfig<DerSettings>;

/// The method.
#[derive(Debug, Clone)]
pub struct Der {
    name: String,
    config: DerConfig,
    head: Evidential,
}

impl Der {
    /// Checks the settings up front.
    pub fn new(name: &str, config: DerConfig) -> Result<Der, MethodError> {
        let head = Evidential::new(config.lambda).ok_or_else(|| {
            MethodError::invalid(
                format!("{name}.lambda"),
                config.lambda,
                "a number in [0, 1000]",
            )
        })?;
        if config.draws < 100 {
            return Err(MethodError::invalid(
                format!("{name}.draws"),
                config.draws,
                "at least 100: the intervals are the draws' quantiles",
            ));
        }
        config.net.shape(1, 4).validate()?;
        Ok(Der {
            name: name.to_string(),
            config,
            head,
        })
    }
}

impl Method for Der {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        1
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        Some(self.config.net.shape(task.d, 4).parameters())
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        _keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        task.validate()?;
        task.require_gaussian(&self.name)?;
        let c = &self.config;
        let resources = &Resources::of(compute)?;
        let (n, m) = (task.n_train(), task.n_test());
        let settings = trainer::TrainSettings {
            own_head: Some(Arc::new(self.head)),
            likelihood: task.likelihood,
            ..c.optim.settings(task.epochs, n)
        };
        let shape = c.net.shape(task.d, 4);
        let out = trainer::train_task(
            task,
            &self.name,
            1,
            &shape,
            c.net.standardize,
            &settings,
            resources,
            progress,
        )?;
        let purpose = format!("{}/draws", self.name);
        Ok(task
            .repetitions
            .iter()
            .enumerate()
            .map(|(k, &rep)| {
                let nig: Vec<[f64; 4]> = out.test_out[k * m * 4..(k + 1) * m * 4]
                    .chunks_exact(4)
                    .map(nig::link_f64)
                    .collect();
                let mut rng = Rng::new(task.seeds.seed(rep, 0, &purpose));
                self.repetition(
                    &nig,
                    out.diverged[k],
                    &mut rng,
                    &out.train_pred[k * n..(k + 1) * n],
                )
            })
            .collect())
    }
}

impl Der {
    /// One repetition from its NIG (γ, ν, α − 1, β) at the test inputs (module docs). A
    /// repetition whose ν, α − 1 or β underflowed to 0 (infinite variances) counts as
    /// diverged.
    fn repetition(
        &self,
        nig: &[[f64; 4]],
        diverged: bool,
        rng: &mut Rng,
        train: &[f32],
    ) -> Prediction {
        let s = self.config.draws;
        let finite = nig
            .iter()
            .all(|v| v.iter().all(|x| x.is_finite()) && v[1] > 0.0 && v[2] > 0.0 && v[3] > 0.0);
        let diverged = diverged || !finite;
        let mut samples = vec![Vec::new(); s];
        let (mut epistemic, mut aleatoric) = (Vec::new(), Vec::new());
        for &[gamma, nu, alpha_m1, beta] in nig {
            let alpha = 1.0 + alpha_m1;
            epistemic.push(beta / (nu * alpha_m1));
            aleatoric.push(beta / alpha_m1);
            if !finite {
                continue;
            }
            for row in samples.iter_mut() {
                // σ² = β/G, G ∼ Gamma(α, 1): InvGamma(α, β).
                let var = beta / rng.gamma(alpha);
                row.push(gamma + (var / nu).sqrt() * rng.normal());
            }
        }
        // Its marginals per input: f (its μ) is t with 2α dof, location γ and scale²
        // β/(να); a new y the same t with scale² β(1 + ν)/(να).
        let marginals_t = TMarginals {
            dof: nig.iter().map(|v| 2.0 * (1.0 + v[2])).collect(),
            f_scale: nig
                .iter()
                .map(|&[_, nu, alpha_m1, beta]| (beta / (nu * (1.0 + alpha_m1))).sqrt())
                .collect(),
            y_scale: nig
                .iter()
                .map(|&[_, nu, alpha_m1, beta]| {
                    (beta * (1.0 + nu) / (nu * (1.0 + alpha_m1))).sqrt()
                })
                .collect(),
        };
        let mut p = Prediction {
            extra: Extra {
                marginals_t: Some(marginals_t),
                ..Extra::default()
            },
            mean: nig.iter().map(|v| v[0]).collect(),
            std: epistemic.iter().map(|v| v.sqrt()).collect(),
            noise_std: Some(aleatoric.iter().map(|v| v.sqrt()).collect()),
            family: Family::StudentTPerInput,
            // A diverged repetition is left out of the metrics: no draws.
            samples: finite.then_some(samples),
            train_mean: Some(train.iter().map(|&v| f64::from(v)).collect()),
            diverged,
            ..Prediction::default()
        };
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        p.scalars
            .insert("evidential_epistemic_var".into(), mean(&epistemic));
        p.scalars
            .insert("evidential_aleatoric_var".into(), mean(&aleatoric));
        p.scalars.insert(
            "evidential_alpha".into(),
            mean(&nig.iter().map(|v| 1.0 + v[2]).collect::<Vec<_>>()),
        );
        p.scalars.insert(
            "evidential_nu".into(),
            mean(&nig.iter().map(|v| v[1]).collect::<Vec<_>>()),
        );
        p
    }
}
