//! The Laplace approximation around a trained network (Daxberger et al. 2021, with
//! laplace-torch's conventions): one network per repetition trained to its MAP on the engine,
//! then on the host in f64 a Gaussian N(θ*, (GGN + δI)⁻¹) over a parameter subset and the
//! linearised (GLM) predictive f(x*) ~ N(f_θ*(x*), J*ᵀ Σ J*), with y ~ N(f, Jᵀ Σ J + σ²).
//!
//! - `subset = "last_layer"` (laplace-torch's default) or `"all"`; `hessian = "full"` (up to
//!   [`MAX_FULL`] parameters), `"kron"` (K-FAC: per layer A ⊗ G, eigendecomposed) or
//!   `"diag"`.
//! - `prior_precision`: δ ≥ 0 on every parameter of the subset (0 is the flat prior), or
//!   `"marglik"`: per repetition the δ that maximises laplace-torch's log marginal likelihood
//!   log p(D | θ*) − ½(log det(GGN + δI) − P log δ + δ‖θ*‖²).
//! - `noise_sd`: a number, `"known"` (the problem's σ(x), constant or not), or left out: the
//!   maximum-likelihood estimate sqrt(mean (y − f)²) of the MAP fit.
//! - `refine = true` (default): the last layer is replaced by the exact weighted ridge
//!   solution given the hidden layers, under the same δ and σ. The optimiser in f32 leaves
//!   the MAP approximate; a Laplace approximation expands around the exact mode. With
//!   `"marglik"` the refined MAP depends on δ and δ on the MAP: the two alternate until δ
//!   changes by less than 1e-4 between rounds (at most 30 rounds; `prior_precision_rounds`,
//!   and `prior_precision_converged` = 0 where the rounds ran out), and the posterior always
//!   uses the δ its MAP was refined under.
//! - The network trains with the optimiser's own weight decay (λ on the weights, as every
//!   engine method); δ is the Laplace prior, applied in the refinement and the posterior.

mod curvature;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::host_net::{Subset, TrainedNet};
use curvature::{KronLayer, Posterior};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::trainer::collect::{FinalWeights, Weights};
use uqbench_engine::trainer::{self, Resources, TrainOutput};

/// A fitted posterior: dense (full or diagonal) or Kronecker-factored with its δ.
enum Fitted {
    Dense(Posterior),
    Kron(Vec<KronLayer>, f64),
}
use uqbench_core::{
    Compute, Extra, FactorJoint, Likelihood, Method, MethodError, Prediction, Task, Tau,
};

/// The noise sd at the training and at the test inputs.
type Sigmas = (Vec<f64>, Vec<f64>);

/// The most parameters a full GGN may have (its Cholesky factor is P² f64s: 128 MiB here).
pub const MAX_FULL: usize = 4096;

/// The subset setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubsetSetting {
    /// The last layer.
    #[default]
    LastLayer,
    /// Every parameter.
    All,
}

/// The curvature's structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hessian {
    /// The full GGN.
    #[default]
    Full,
    /// Its diagonal.
    Diag,
    /// Per layer the Kronecker product of two small factors (K-FAC).
    Kron,
}

/// δ: a number or `"marglik"`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PriorPrecision {
    /// A fixed δ ≥ 0.
    Value(f64),
    /// Fitted per repetition.
    Fitted(Marglik),
}

/// The string `"marglik"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Marglik {
    /// Maximise the marginal likelihood.
    #[serde(rename = "marglik")]
    Marglik,
}

/// Laplace's own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LaplaceSettings {
    /// Which parameters.
    pub subset: SubsetSetting,
    /// Full or diagonal GGN.
    pub hessian: Hessian,
    /// δ.
    pub prior_precision: PriorPrecision,
    /// σ of the likelihood; estimated when left out.
    pub noise_sd: Option<Tau>,
    /// Solve the last layer exactly before the approximation (regression).
    pub refine: bool,
    /// Draws of the linearised logits per test input on the classification track (100).
    pub samples: usize,
}

impl Default for LaplaceSettings {
    fn default() -> Self {
        LaplaceSettings {
            subset: SubsetSetting::LastLayer,
            hessian: Hessian::Full,
            prior_precision: PriorPrecision::Fitted(Marglik::Marglik),
            noise_sd: None,
            refine: true,
            samples: 100,
        }
    }
}

/// Settings of the Laplace approximation: the network, its optimiser and [`LaplaceSettings`].
pub type LaplaceConfig = MethodConfig<LaplaceSettings>;

/// The method.
#[derive(Debug, Clone)]
pub struct Laplace {
    name: String,
    config: LaplaceConfig,
}

impl Laplace {
    /// Checks the settings up front.
    pub fn new(name: &str, config: LaplaceConfig) -> Result<Laplace, MethodError> {
        config.net.shape(1, 1).validate()?;
        if let PriorPrecision::Value(d) = config.prior_precision {
            MethodError::non_negative(&format!("{name}.prior_precision"), d)?;
        }
        if config.samples < 2 {
            return Err(MethodError::invalid(
                format!("{name}.samples"),
                config.samples,
                "at least 2 draws of the linearised logits",
            ));
        }
        if let Some(Tau::Value(s)) = config.noise_sd {
            MethodError::positive(&format!("{name}.noise_sd"), s)?;
        }
        Ok(Laplace {
            name: name.to_string(),
            config,
        })
    }

    /// The noise sd at the training and test inputs, when fixed by the settings.
    fn fixed_sigma(&self, task: &Task<'_>) -> Result<Option<Sigmas>, MethodError> {
        let (n, m) = (task.n_train(), task.n_test());
        if task.likelihood == Likelihood::Bernoulli {
            return match self.config.noise_sd {
                // Labels have no noise sd: the curvature is the logistic's.
                None => Ok(Some((vec![1.0; n], vec![1.0; m]))),
                Some(t) => Err(MethodError::invalid(
                    format!("{}.noise_sd", self.name),
                    format!("{t:?}"),
                    "left out for a classification problem: a Bernoulli likelihood has no \
                     noise sd",
                )),
            };
        }
        match self.config.noise_sd {
            None => Ok(None),
            Some(Tau::Value(s)) => Ok(Some((vec![s; n], vec![s; m]))),
            Some(Tau::Known(_)) if task.noise.known && task.noise.train.len() == n => {
                Ok(Some((task.noise.train.to_vec(), task.noise.test.to_vec())))
            }
            Some(Tau::Known(_)) => Err(MethodError::invalid(
                format!("{}.noise_sd", self.name),
                "\"known\"",
                "a number, or left out to estimate it: this problem does not declare σ known",
            )),
        }
    }
}

impl Method for Laplace {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        1
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        Some(self.config.net.shape(task.d, 1).parameters())
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        _keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        let c = &self.config;
        let shape = c.net.shape(task.d, 1);
        let mut dims = vec![task.d];
        dims.extend(&c.net.hidden);
        dims.push(1);
        let subset = match c.subset {
            SubsetSetting::LastLayer => Subset::LastLayer,
            SubsetSetting::All => Subset::All,
        };
        let probe =
            TrainedNet::from_flat(&vec![0.0; count_all(&dims)], &dims, c.net.negative_slope);
        let p = probe.count(subset);
        if c.hessian == Hessian::Full && p > MAX_FULL {
            return Err(MethodError::invalid(
                format!("{}.hessian", self.name),
                format!("\"full\" over {p} parameters"),
                format!(
                    "\"diag\", or subset = \"last_layer\": a full GGN is limited to {MAX_FULL} \
                     parameters"
                ),
            ));
        }
        let settings = uqbench_engine::trainer::TrainSettings {
            collectors: vec![Arc::new(FinalWeights)],
            likelihood: task.likelihood,
            ..c.optim.settings(task.epochs, task.n_train())
        };
        let resources = &Resources::of(compute)?;
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
        let inputs = host_inputs(task, c.net.standardize);
        let sigma = self.fixed_sigma(task)?;
        let per_rep = |k: usize| -> Result<Prediction, MethodError> {
            self.repetition(task, &out, k, &dims, subset, &inputs, sigma.as_ref())
        };
        uqbench_core::par_map(task.repetitions.len(), per_rep)
            .into_iter()
            .collect()
    }
}

/// The log-likelihood of the targets at the fit `f`, and per point the sd whose inverse square
/// weighs its row of the GGN: 1/σᵢ² for a Gaussian likelihood, the logistic's curvature
/// pᵢ(1 − pᵢ) for labels (floored at 1e-12).
fn likelihood_terms(
    likelihood: Likelihood,
    f: &[f64],
    y: &[f64],
    sigma: &[f64],
) -> (f64, Vec<f64>) {
    match likelihood {
        Likelihood::Gaussian => (
            f.iter()
                .zip(y)
                .zip(sigma)
                .map(|((f, y), s)| {
                    -0.5 * ((y - f) / s).powi(2) - s.ln() - 0.5 * std::f64::consts::TAU.ln()
                })
                .sum(),
            sigma.to_vec(),
        ),
        Likelihood::Bernoulli => {
            // log σ(f) = −softplus(−f), log(1 − σ(f)) = −softplus(f).
            let softplus = |v: f64| v.max(0.0) + (-v.abs()).exp().ln_1p();
            let ll = f
                .iter()
                .zip(y)
                .map(|(f, y)| -y * softplus(-f) - (1.0 - y) * softplus(*f))
                .sum();
            let sd = f
                .iter()
                .map(|f| {
                    let p = 1.0 / (1.0 + (-f).exp());
                    1.0 / (p * (1.0 - p)).max(1e-12).sqrt()
                })
                .collect();
            (ll, sd)
        }
    }
}

/// The GGN over the training inputs `x`: dense from the Jacobians, or per layer from their
/// Kronecker factors, each point weighted by 1/sd².
#[allow(clippy::type_complexity)]
fn build_ggn(
    net: &TrainedNet,
    x: &[Vec<f64>],
    subset: Subset,
    sd: &[f64],
    kron: bool,
) -> (Option<nalgebra::DMatrix<f64>>, Option<Vec<KronLayer>>) {
    if kron {
        let factors: Vec<_> = x.iter().map(|xi| net.factors(xi, subset).1).collect();
        let w: Vec<f64> = sd.iter().map(|s| 1.0 / (s * s)).collect();
        (None, Some(curvature::kron(&factors, &w)))
    } else {
        let jac: Vec<Vec<f64>> = x.iter().map(|xi| net.jacobian(xi, subset).1).collect();
        (Some(curvature::ggn(&jac, sd)), None)
    }
}

/// The linearised predictive of f at the test inputs: the MAP's output, the variances and the
/// joint's factor F with Cov f = F Fᵀ (spec §10), for the dense, diagonal and Kronecker
/// posteriors alike.
fn linearised(
    posterior: &Fitted,
    net: &TrainedNet,
    x_test: &[Vec<f64>],
    subset: Subset,
) -> Result<(Vec<f64>, Vec<f64>, FactorJoint), MethodError> {
    let (mean, (factor, rank)) = match posterior {
        Fitted::Dense(p) => {
            let (mean, jac): (Vec<f64>, Vec<Vec<f64>>) =
                x_test.iter().map(|xi| net.jacobian(xi, subset)).unzip();
            (mean, p.factor(&jac))
        }
        Fitted::Kron(layers, d) => {
            let (mean, factors): (Vec<f64>, Vec<_>) =
                x_test.iter().map(|xi| net.factors(xi, subset)).unzip();
            (mean, curvature::kron_factor(layers, *d, &factors)?)
        }
    };
    // Each row's squared norm is its test input's linearised variance.
    let var = factor
        .chunks(rank.max(1))
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect();
    Ok((mean, var, FactorJoint { factor, rank }))
}

fn count_all(dims: &[usize]) -> usize {
    dims.windows(2).map(|w| w[0] * w[1] + w[1]).sum()
}

/// The network's inputs in f64, standardised as the engine standardises them.
fn host_inputs(task: &Task<'_>, standardize: bool) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let moments = standardize.then(|| task.input_moments());
    let rows = |x: &[f64]| -> Vec<Vec<f64>> {
        x.chunks(task.d)
            .map(|r| {
                r.iter()
                    .enumerate()
                    .map(|(j, &v)| match &moments {
                        Some(m) => (v - m[j].0) / m[j].1,
                        None => v,
                    })
                    .collect()
            })
            .collect()
    };
    (rows(task.x_train), rows(task.x_test))
}

/// The relative change of δ between two rounds below which the evidence's δ counts as a
/// fixed point of refine-then-fit.
const PRIOR_PRECISION_TOL: f64 = 1e-4;
/// At most this many evidence fits per repetition.
const MAX_PRIOR_ROUNDS: usize = 30;

impl Laplace {
    /// Repetition `k`: refine, fit δ, and predict.
    #[allow(clippy::too_many_arguments)]
    fn repetition(
        &self,
        task: &Task<'_>,
        out: &TrainOutput,
        k: usize,
        dims: &[usize],
        subset: Subset,
        (x, x_test): &(Vec<Vec<f64>>, Vec<Vec<f64>>),
        sigma: Option<&Sigmas>,
    ) -> Result<Prediction, MethodError> {
        let (n, m) = (task.n_train(), task.n_test());
        let c = &self.config;
        if out.diverged[k] {
            return Ok(Prediction {
                mean: vec![f64::NAN; m],
                std: vec![f64::NAN; m],
                diverged: true,
                ..Prediction::default()
            });
        }
        let flat = &out.collected::<Weights>(0)[k].0;
        let mut net = TrainedNet::from_flat(flat, dims, c.net.negative_slope);
        let y = &task.y_train[k];
        // The output alone (the last layer's factors, no Jacobian vector).
        let fit = |net: &TrainedNet| -> Vec<f64> {
            x.iter()
                .map(|xi| net.factors(xi, Subset::LastLayer).0)
                .collect()
        };
        // σ at the training and test inputs: fixed, or the MAP fit's estimate (after refining).
        let sigmas = |net: &TrainedNet| -> Sigmas {
            match sigma {
                Some(s) => s.clone(),
                None => {
                    let s = ml_sd(&fit(net), y).max(1e-12);
                    (vec![s; n], vec![s; m])
                }
            }
        };
        let diag = c.hessian == Hessian::Diag;
        let kron = c.hessian == Hessian::Kron;
        let mut delta = match c.prior_precision {
            PriorPrecision::Value(d) => d,
            // The start of the evidence search: a weak prior.
            PriorPrecision::Fitted(_) => 1e-4,
        };
        let (mut s_train, mut s_test) = sigmas(&net);
        let bernoulli = task.likelihood == Likelihood::Bernoulli;
        // The logistic MAP has no closed form: for labels the optimiser's MAP stays.
        let refits = c.refine && !bernoulli;
        let fitted = matches!(c.prior_precision, PriorPrecision::Fitted(_));
        let (mut rounds, mut converged) = (0, !fitted);
        let (posterior, log_ml) = loop {
            if refits {
                (s_train, s_test) = refit_last_layer(&mut net, x, y, delta, &sigmas, s_train)?;
            }
            let f = fit(&net);
            let (log_lik, curvature_sd) = likelihood_terms(task.likelihood, &f, y, &s_train);
            let (dense, layers) = build_ggn(&net, x, subset, &curvature_sd, kron);
            let theta_sq: f64 = net.params(subset).iter().map(|v| v * v).sum();
            let spectrum = match (&dense, &layers) {
                (Some(g), _) => curvature::spectrum(g, diag),
                (None, Some(k)) => curvature::kron_spectrum(k),
                (None, None) => unreachable!("one of the two is built"),
            };
            if fitted && !converged {
                // The evidence's δ at this MAP. With refinement the MAP depends on δ, so the two
                // alternate until δ is a fixed point (MacKay's iteration): the posterior must
                // use the δ its MAP was refined under, never a δ fitted after the last refit.
                let next = curvature::fit_prior_precision(log_lik, &spectrum, theta_sq);
                rounds += 1;
                if !refits {
                    (delta, converged) = (next, true);
                } else if (next / delta - 1.0).abs() <= PRIOR_PRECISION_TOL {
                    converged = true;
                } else if rounds < MAX_PRIOR_ROUNDS {
                    delta = next;
                    continue;
                }
                // Out of rounds: δ stays the one this MAP was refined under (flagged below).
            }
            let lml = curvature::log_marginal_likelihood(log_lik, &spectrum, theta_sq, delta);
            let posterior = match (dense, layers) {
                (Some(g), _) => Fitted::Dense(Posterior::new(&g, delta, diag)?),
                (None, Some(k)) => Fitted::Kron(k, delta),
                (None, None) => unreachable!("one of the two is built"),
            };
            break (posterior, lml);
        };
        let (mean, variances, joint) = linearised(&posterior, &net, x_test, subset)?;
        let std: Vec<f64> = variances.iter().map(|v| v.sqrt()).collect();
        let samples = bernoulli.then(|| self.logit_draws(task, k, &mean, &std));
        let estimate = (sigma.is_none() && !bernoulli).then(|| s_train[0]);
        let mut pred = Prediction {
            noise_std: (!bernoulli).then_some(s_test),
            train_mean: Some(fit(&net)),
            extra: Extra::joint((!bernoulli).then_some(joint)),
            ..Prediction::normal(mean, std, samples)
        };
        let scalars = [
            ("prior_precision", Some(delta)),
            ("prior_precision_rounds", fitted.then_some(rounds as f64)),
            (
                "prior_precision_converged",
                fitted.then_some(f64::from(u8::from(converged))),
            ),
            ("ml_noise_sd", estimate),
            ("log_marginal_likelihood", Some(log_ml)),
            ("laplace_parameters", Some(net.count(subset) as f64)),
            ("final_objective", Some(out.final_objective[k])),
        ];
        pred.scalars.extend(
            scalars
                .into_iter()
                .filter_map(|(n, v)| Some((n.to_string(), v?))),
        );
        Ok(pred)
    }
}

impl Laplace {
    /// Labels: the linearised logits' draws of repetition `k`, which the classification track
    /// averages through the logistic (MC over the GLM predictive, laplace-torch's
    /// `link_approx="mc"`).
    fn logit_draws(&self, task: &Task<'_>, k: usize, mean: &[f64], std: &[f64]) -> Vec<Vec<f64>> {
        let purpose = format!("{}/predictive", self.name);
        let mut rng = uqbench_core::Rng::new(task.seeds.seed(task.repetitions[k], 0, &purpose));
        (0..self.config.samples)
            .map(|_| {
                mean.iter()
                    .zip(std)
                    .map(|(m, s)| m + s * rng.normal())
                    .collect()
            })
            .collect()
    }
}

/// Relative change of σ̂ below which the refit's σ is a fixed point.
const SIGMA_TOL: f64 = 1e-10;
/// At most this many refits per prior precision (the iteration contracts fast: σ̂ moves the
/// MAP only through the ridge penalty's weight δσ²).
const MAX_SIGMA_ROUNDS: usize = 200;

/// Refits the last layer (the exact MAP at prior precision `delta`) under σ `s_train`, then
/// σ from that fit (`sigmas`), until σ stops moving: with σ estimated and δ > 0 the MAP
/// minimises Σ r²/(2σ²) + δ‖θ‖²/2, which depends on σ, so a single refit would leave the
/// posterior built under a σ̂ other than the one its MAP was fitted under. With σ given (or
/// δ = 0) the first refit is the fixed point. Returns σ at the training and test inputs.
fn refit_last_layer(
    net: &mut TrainedNet,
    x: &[Vec<f64>],
    y: &[f64],
    delta: f64,
    sigmas: &dyn Fn(&TrainedNet) -> Sigmas,
    mut s_train: Vec<f64>,
) -> Result<Sigmas, MethodError> {
    for _ in 0..MAX_SIGMA_ROUNDS {
        net.solve_last_layer(x, y, &s_train, delta)?;
        let (next, s_test) = sigmas(net);
        let moved = next
            .iter()
            .zip(&s_train)
            .any(|(a, b)| (a / b - 1.0).abs() > SIGMA_TOL);
        if !moved {
            return Ok((next, s_test));
        }
        s_train = next;
    }
    // Out of rounds: one last refit under the latest σ, so that the MAP is that σ's.
    net.solve_last_layer(x, y, &s_train, delta)?;
    let (_, s_test) = sigmas(net);
    Ok((s_train, s_test))
}

/// The noise sd estimated where `noise_sd` is not given: the MAP fit's in-sample
/// maximum-likelihood residual sqrt(mean (y − f)²), biased low by the fit's effective degrees
/// of freedom (docs/posthoc.md measures it; recorded per repetition as `ml_noise_sd`).
fn ml_sd(f: &[f64], y: &[f64]) -> f64 {
    (f.iter().zip(y).map(|(f, y)| (y - f).powi(2)).sum::<f64>() / f.len() as f64).sqrt()
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
