//! Noise settings shared by methods: the noise precision τ of the dropout methods and the
//! noise sd of the Bayesian methods and the GP (`noise_sd`), each a number or `"known"`.

use serde::{Deserialize, Serialize};

use crate::error::MethodError;
use crate::task::{Likelihood, Task};

/// The noise precision τ that scales the data term relative to the regularisers.
///
/// The per-point negative ELBO of a Gaussian likelihood with precision τ is
/// (τ/2)·mean (y − f)² + KL/N + const; divided by τ it is our ½·MSE data term plus KL/(τN).
/// So with the ½·MSE data term every regulariser that stands for a prior or a KL is weighted
/// by 1/(τN): concrete dropout's weight_reg = l²/(2τN) and dropout_reg = 1/(τN) (Gal's
/// reference pairs l²/(τN) and 2/(τN) with plain MSE, twice ours), variational dropout's KL
/// weight 1/(τN).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Tau {
    /// A given precision τ > 0 (default 1).
    Value(f64),
    /// `"known"`: τ = 1/σ² from the problem's known, constant σ.
    Known(KnownSigma),
}

/// The string `"known"` of [`Tau::Known`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KnownSigma {
    /// τ = 1/σ².
    #[serde(rename = "known")]
    Known,
}

impl Default for Tau {
    fn default() -> Self {
        Tau::Value(1.0)
    }
}

/// The fixed noise sd of a Bayesian network method (MFVI, HMC) from its `noise_sd` setting:
/// `None` when it is left out (the method `verb`s it: "learn", "sample"), the number, or the
/// problem's known σ. For labels there is no noise sd: setting one is an error, and the
/// method gets 1, which enters nothing (no noise parameter is learned, no Gibbs step runs).
pub fn fixed_noise_sd(
    method: &str,
    noise_sd: Option<Tau>,
    task: &Task<'_>,
    verb: &str,
) -> Result<Option<f64>, MethodError> {
    match (noise_sd, task.likelihood) {
        (None, Likelihood::Bernoulli) => Ok(Some(1.0)),
        (Some(t), Likelihood::Bernoulli) => Err(MethodError::invalid(
            format!("{method}.noise_sd"),
            format!("{t:?}"),
            "left out for a classification problem: a Bernoulli likelihood has no noise sd",
        )),
        (None, Likelihood::Gaussian) => Ok(None),
        (Some(Tau::Value(v)), Likelihood::Gaussian) => Ok(Some(v)),
        (Some(Tau::Known(KnownSigma::Known)), Likelihood::Gaussian) => {
            task.known_sigma.map(Some).ok_or_else(|| {
                MethodError::invalid(
                    format!("{method}.noise_sd"),
                    "\"known\"",
                    format!(
                        "a number, or left out to {verb} it: this problem's σ is not a known \
                         constant"
                    ),
                )
            })
        }
    }
}

/// The InvGamma(a₀, b₀) prior of σ² of every sampler that learns it (HMC's Gibbs step and
/// SG-MCMC's): a₀ = b₀ = 1, weak against N/2 and SSE/2.
pub const NOISE_PRIOR: (f64, f64) = (1.0, 1.0);

/// A chain's first σ² when σ is sampled (SG-MCMC's learned σ, HMC's Gibbs step): the
/// targets' variance, floored at 1e-6 so that constant targets still give a proper start.
pub fn start_sigma2(y: &[f32]) -> f64 {
    let n = y.len().max(1) as f64;
    let mean = y.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = y
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / n;
    var.max(1e-6)
}
