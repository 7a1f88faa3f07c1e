//! SG-MCMC's noise sd: the spec's setting ([`SgNoise`]) and, where σ is learned, each
//! chain's σ² and its Gibbs step ([`NoiseChain`]; the dynamics that use it, and why the
//! step is the conjugate InvGamma draw, are in [`super::langevin`]).

use serde::{Deserialize, Serialize};

use uqbench_core::noise::Tau;
use uqbench_core::seed::splitmix64;
use uqbench_core::{start_sigma2, Rng, NOISE_PRIOR};

/// SG-MCMC's noise sd: a number, `"known"` or `"learn"` (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "NoiseWord", into = "NoiseWord")]
pub enum SgNoise {
    /// Fixed: a number, or the problem's known σ.
    Fixed(Tau),
    /// σ² sampled with the weights.
    Learn,
}

/// [`SgNoise`] as written in a spec.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum NoiseWord {
    Number(f64),
    Word(String),
}

impl TryFrom<NoiseWord> for SgNoise {
    type Error = String;

    fn try_from(w: NoiseWord) -> Result<SgNoise, String> {
        match w {
            NoiseWord::Number(v) => Ok(SgNoise::Fixed(Tau::Value(v))),
            NoiseWord::Word(w) if w == "known" => {
                Ok(SgNoise::Fixed(Tau::Known(uqbench_core::KnownSigma::Known)))
            }
            NoiseWord::Word(w) if w == "learn" => Ok(SgNoise::Learn),
            NoiseWord::Word(w) => Err(format!(
                "noise_sd = \"{w}\"; valid: a number, \"known\" or \"learn\""
            )),
        }
    }
}

impl From<SgNoise> for NoiseWord {
    fn from(n: SgNoise) -> NoiseWord {
        match n {
            SgNoise::Fixed(Tau::Value(v)) => NoiseWord::Number(v),
            SgNoise::Fixed(Tau::Known(_)) => NoiseWord::Word("known".into()),
            SgNoise::Learn => NoiseWord::Word("learn".into()),
        }
    }
}

/// The purpose that keys a chain's σ² generator (apart from the device streams' 1–5).
const PURPOSE_SIGMA: u64 = 6;

/// σ² learned by the chains (module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LearnedNoise {
    /// N, the training points.
    pub n: usize,
    /// The weights' prior precision 1/σ_p².
    pub prior_precision: f64,
}

/// One chain's σ² and its epoch's running sum of squared residuals.
#[derive(Debug, Clone)]
pub(super) struct NoiseChain {
    /// The current σ².
    pub sigma2: f64,
    sse: f64,
    count: usize,
    rng: Rng,
}

impl NoiseChain {
    /// The chain of the replica with this seed and identifier, starting at its targets'
    /// variance (HMC's start).
    pub(super) fn new(seed: u64, id: u64, y: &[f32]) -> NoiseChain {
        NoiseChain {
            sigma2: start_sigma2(y),
            sse: 0.0,
            count: 0,
            rng: Rng::new(splitmix64(
                seed ^ splitmix64(id.wrapping_mul(8).wrapping_add(PURPOSE_SIGMA)),
            )),
        }
    }

    /// Adds a batch's sum of squared residuals over `count` points.
    pub(super) fn add(&mut self, sse: f64, count: usize) {
        self.sse += sse;
        self.count += count;
    }

    /// Adds a batch's residuals: its outputs `f` at the step's θ against its targets `y`.
    pub(super) fn add_residuals(&mut self, f: &[f32], y: &[f32]) {
        let sse = f
            .iter()
            .zip(y)
            .map(|(&f, &y)| f64::from(f - y).powi(2))
            .sum();
        self.add(sse, y.len());
    }

    /// The epoch's Gibbs step for N points, then a fresh sum.
    pub(super) fn gibbs(&mut self, n: usize) {
        if self.count > 0 {
            let (a0, b0) = NOISE_PRIOR;
            let sse = self.sse * n as f64 / self.count as f64;
            // InvGamma(shape, rate) = rate / Gamma(shape, 1).
            self.sigma2 = (b0 + 0.5 * sse) / self.rng.gamma(a0 + 0.5 * n as f64);
        }
        self.sse = 0.0;
        self.count = 0;
    }
}
