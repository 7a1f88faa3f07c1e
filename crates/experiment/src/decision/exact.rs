//! The exact posterior over an action set given an agent's data: the anchor (Bayesian linear
//! regression with a flat prior) fitted on the features of the pulled actions and their
//! rewards, predicting f at every action. What the exact Thompson sampler, the greedy
//! baseline and the exact active learner act on.
//!
//! Over the K actions f is jointly normal, mean m and covariance F·Fᵀ (F `[K, p]`, the
//! anchor's factor), when σ is known; when only σ's shape is known, f is jointly Student t
//! with ν = N − p degrees of freedom, location m and scale matrix F·Fᵀ (F carries the
//! estimated scale s). A draw is f̃ = m + F·z, z ∼ N(0, I_p), times √(ν/χ²_ν) in the t case
//! (one χ² per draw: the multivariate t, not p independent t's).

use uqbench_anchor::Anchor;
use uqbench_core::Rng;

use super::env::{Actions, History};
use crate::error::Result;

/// The exact posterior of f at every action.
#[derive(Debug, Clone)]
pub struct ExactPosterior {
    /// The posterior mean m of f at each action.
    pub mean: Vec<f64>,
    /// The factor F `[K, p]` (row-major) with Cov f = F·Fᵀ (the scale matrix for Student t).
    pub factor: Vec<f64>,
    /// Columns of F.
    pub p: usize,
    /// ν of the Student-t posterior; `None` when σ is known (normal).
    pub dof: Option<f64>,
    /// The noise sd at each action (σ(x), or its estimate s·σ(x)).
    pub noise_std: Vec<f64>,
}

impl ExactPosterior {
    /// The anchor over `actions` given `history`. A design that does not identify γ (fewer
    /// distinct pulls than features) is an error that names `who` and the rank.
    pub fn fit(actions: &Actions, history: &History, who: &str) -> Result<ExactPosterior> {
        let train_g: Vec<f64> = (history.actions.iter())
            .flat_map(|&a| actions.features(a).iter().copied())
            .collect();
        let train_sigma: Vec<f64> = history.actions.iter().map(|&a| actions.sigma[a]).collect();
        let anchor = Anchor::from_features(
            actions.p,
            &train_g,
            &train_sigma,
            &actions.g,
            &actions.sigma,
            actions.sigma_known,
            who,
            &format!(" after {} pulls", history.len()),
        )?;
        let post = anchor.posterior(&history.rewards)?;
        Ok(ExactPosterior {
            mean: post.mean,
            factor: post.factor,
            p: actions.p,
            dof: post.dof,
            noise_std: post.noise_std,
        })
    }

    /// One joint draw of f over all actions (module docs).
    pub fn draw(&self, rng: &mut Rng) -> Vec<f64> {
        let z: Vec<f64> = (0..self.p).map(|_| rng.normal()).collect();
        // √(ν/χ²_ν), χ²_ν = 2·Gamma(ν/2).
        let t = self
            .dof
            .map_or(1.0, |nu| (nu / (2.0 * rng.gamma(nu / 2.0))).sqrt());
        (self.mean.iter().zip(self.factor.chunks(self.p)))
            .map(|(m, row)| m + t * row.iter().zip(&z).map(|(f, z)| f * z).sum::<f64>())
            .collect()
    }

    /// The posterior (scale) covariance of f between actions `a` and `b`: F_a·F_b.
    pub fn cov(&self, a: usize, b: usize) -> f64 {
        let (ra, rb) = (self.row(a), self.row(b));
        ra.iter().zip(rb).map(|(x, y)| x * y).sum()
    }

    fn row(&self, a: usize) -> &[f64] {
        &self.factor[a * self.p..(a + 1) * self.p]
    }

    /// The posterior variance of f at each action (the t scale's square for Student t).
    pub fn variance(&self) -> Vec<f64> {
        (0..self.mean.len()).map(|a| self.cov(a, a)).collect()
    }
}

/// The index of the largest value (the first of ties).
pub fn argmax(v: &[f64]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// Greedy joint batch selection on a covariance: `batch` inputs, each the one that most
/// increases log det(K_B + diag σ²_B) (the information gain about f of labelling B with
/// Gaussian noise), i.e. the largest conditional predictive variance of y given the batch
/// chosen so far. `cov(a, b)` is f's covariance, `noise[a]` σ at a. The conditioning is
/// Schur complements on a K×K matrix, updated once per pick.
pub fn greedy_logdet(
    k: usize,
    cov: impl Fn(usize, usize) -> f64,
    noise: &[f64],
    batch: usize,
) -> Vec<usize> {
    let mut c: Vec<f64> = (0..k * k).map(|i| cov(i / k, i % k)).collect();
    let mut chosen = Vec::with_capacity(batch);
    for _ in 0..batch {
        // A repeated input is allowed: its second label still informs (the noise is fresh).
        let score: Vec<f64> = (0..k).map(|a| c[a * k + a] + noise[a] * noise[a]).collect();
        let x = argmax(&score);
        let denom = score[x];
        let col: Vec<f64> = (0..k).map(|a| c[a * k + x]).collect();
        for a in 0..k {
            for b in 0..k {
                c[a * k + b] -= col[a] * col[b] / denom;
            }
        }
        chosen.push(x);
    }
    chosen
}
