//! Joint predictions of one repetition (spec §10): the KL from the exact posterior predictive
//! of y at τ test inputs to the method's (`joint_kl_T`), and from the data-generating
//! distribution to the method's (`env_kl_T`, the Neural Testbed's quantity), per region.
//!
//! Computed when a repetition is stored, from what the method returned in memory (its
//! draws, its Gaussian joint or its marginals), in full precision and without a second pass;
//! [`crate::draws`] writes the same draws or joint beside the repetition file (8 bits per
//! value by default), from which `uqbench draws` and `uqbench score` compute them again.
//!
//! Batches: for τ > 1, `batches` batches of τ inputs by dyadic sampling (κ anchors drawn
//! uniformly with replacement from the region's test inputs, then each of the τ inputs
//! uniformly from the anchors; Osband et al. 2022); for τ = 1 every test input of the region
//! once (the exact expectation over X, so that `joint_kl_1` is the mean of the marginal KLs).
//! Per batch: the closed form when both joints are Gaussian, else one draw of y from the
//! reference (for τ = 1, `batches / points` draws per input, at least two). The repetition's
//! value is the mean over batches, with its standard error (batches and Monte Carlo together)
//! stored beside it as `…_se`.

use std::collections::BTreeMap;

use nalgebra::DMatrix;
use serde::{Deserialize, Serialize};
use uqbench_anchor::Posterior;
use uqbench_core::{FactorJoint, Family, Prediction, Rng, SeedPath};
use uqbench_metrics::joint::{kl, Estimate, Joint, Marginal};

use super::grouped::{self, kl_gaussian, ln_mixture, Elliptic, Groups, Parts};

use crate::bail;
use crate::error::Result;

/// The purpose of the joint metrics' random draws (batches and y).
pub const JOINT_DRAWS: &str = "joint";

/// `run.joint_tau`, `run.joint_kappa`, `run.joint_batches`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JointSettings {
    /// The batch sizes τ.
    pub tau: Vec<usize>,
    /// Dyadic sampling's anchors κ.
    pub kappa: usize,
    /// Batches per repetition, region and τ.
    pub batches: usize,
}

impl JointSettings {
    /// An error naming the setting (`prefix` + `tau`, `kappa`, `batches`: `run.joint_` in a
    /// spec, empty in a metrics input) when τ is outside 1..=[`MAX_JOINT_TAU`] or κ or the
    /// batches are 0.
    pub fn check(&self, prefix: &str) -> Result<()> {
        if let Some(&t) = self
            .tau
            .iter()
            .find(|&&t| !(1..=MAX_JOINT_TAU).contains(&t))
        {
            bail!("{prefix}tau contains {t}: a batch holds 1 to {MAX_JOINT_TAU} test inputs");
        }
        if self.kappa == 0 || self.batches == 0 {
            bail!(
                "{prefix}kappa = {}, {prefix}batches = {}: both must be at least 1",
                self.kappa,
                self.batches
            );
        }
        Ok(())
    }
}

/// The largest τ: a batch's joint is factorised per batch.
pub const MAX_JOINT_TAU: usize = 1000;

impl Default for JointSettings {
    fn default() -> Self {
        JointSettings {
            tau: vec![1, 10],
            kappa: 2,
            batches: 1000,
        }
    }
}

/// The joint name of a metric at τ: `joint_kl_10`.
pub fn name(prefix: &str, tau: usize) -> String {
    format!("{prefix}_{tau}")
}

pub use super::names::{ENV_KL, JOINT_KL};

/// What a method's joint is made of, as the report states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JointKind {
    /// A Gaussian (or t) joint of f in closed form.
    Gaussian,
    /// Function draws (members, passes, posterior draws), each with its noise sd.
    Draws,
    /// Marginals only: scored with their product.
    Marginals,
}

impl JointKind {
    /// What a method's output gives its joint: its Gaussian joint, else (without per-input t
    /// marginals, which stand for themselves) its draws, else its marginals.
    pub fn of(out: &Prediction) -> JointKind {
        if out.extra.joint.is_some() {
            JointKind::Gaussian
        } else if out.extra.marginals_t.is_some() {
            JointKind::Marginals
        } else if out.samples.as_ref().is_some_and(|s| !s.is_empty()) {
            JointKind::Draws
        } else {
            JointKind::Marginals
        }
    }
}

/// The exact posterior of f at the test inputs of one repetition (from the anchor).
#[derive(Debug, Clone, Copy)]
pub struct Exact<'a> {
    /// Its mean.
    pub mean: &'a [f64],
    /// F `[M, rank]`: Cov f (a t's scale matrix) = F·Fᵀ.
    pub factor: &'a [f64],
    /// The columns of F.
    pub rank: usize,
    /// The noise sd (a t's noise scale) at every test input.
    pub noise_sd: &'a [f64],
    /// Degrees of freedom of a t posterior.
    pub dof: Option<f64>,
}

/// What the joint metrics of one repetition need besides the method's output.
#[derive(Debug, Clone)]
pub struct JointInput<'a> {
    /// τ, κ, batches.
    pub settings: &'a JointSettings,
    /// The repetition's seed path (its purpose is replaced by [`JOINT_DRAWS`]).
    pub seed: SeedPath<'a>,
    /// The regions' test inputs, `all` first.
    pub regions: &'a [(&'static str, Vec<usize>)],
    /// The exact posterior, where the problem has one.
    pub exact: Option<Exact<'a>>,
}

impl JointInput<'_> {
    /// The random stream of region `r`'s batches at τ: its own seed path, so that adding a
    /// region or a τ changes no other's draws.
    fn rng(&self, r: usize, tau: usize) -> Rng {
        SeedPath {
            member: (r * 1_000_000 + tau) as u64,
            purpose: JOINT_DRAWS,
            ..self.seed.clone()
        }
        .rng()
    }
}

/// One repetition's joint metrics: per region, `joint_kl_T`, `env_kl_T` and their `…_se`.
pub type JointMetrics = BTreeMap<String, BTreeMap<String, f64>>;

/// The batches of one region at one τ: input indices, `[B, τ]`.
fn batches(idx: &[usize], tau: usize, settings: &JointSettings, rng: &mut Rng) -> Vec<Vec<usize>> {
    if tau == 1 {
        let per = draws_per_input(settings, idx.len());
        return idx
            .iter()
            .flat_map(|&i| std::iter::repeat_n(vec![i], per))
            .collect();
    }
    (0..settings.batches)
        .map(|_| {
            let anchors: Vec<usize> = (0..settings.kappa.max(1))
                .map(|_| idx[rng.below(idx.len() as u64) as usize])
                .collect();
            (0..tau)
                .map(|_| anchors[rng.below(anchors.len() as u64) as usize])
                .collect()
        })
        .collect()
}

/// τ = 1's y draws per test input: `batches` spread over the region's inputs, and at least
/// two, so that a Monte Carlo estimate has a standard error also in a region with more inputs
/// than batches (one draw per input gave none, written as 0).
fn draws_per_input(settings: &JointSettings, points: usize) -> usize {
    (settings.batches / points.max(1)).max(2)
}

fn pick(v: &[f64], x: &[usize]) -> Vec<f64> {
    x.iter().map(|&i| v[i]).collect()
}

fn pick_rows(factor: &[f64], rank: usize, x: &[usize]) -> Vec<f64> {
    x.iter()
        .flat_map(|&i| factor[i * rank..(i + 1) * rank].iter().copied())
        .collect()
}

fn squares(v: Vec<f64>) -> Vec<f64> {
    v.into_iter().map(|s| s * s).collect()
}

impl<'a> Exact<'a> {
    /// The anchor's posterior of one repetition.
    pub fn of(p: &'a Posterior) -> Exact<'a> {
        Exact {
            mean: &p.mean,
            factor: &p.factor,
            rank: p.factor.len() / p.mean.len().max(1),
            noise_sd: &p.noise_std,
            dof: p.dof,
        }
    }

    fn at(&self, x: &[usize]) -> Joint {
        let (mean, factor) = (pick(self.mean, x), pick_rows(self.factor, self.rank, x));
        let noise_var = squares(pick(self.noise_sd, x));
        match self.dof {
            None => Joint::Gaussian {
                mean,
                factor,
                rank: self.rank,
                noise_var,
            },
            Some(dof) => Joint::StudentT {
                mean,
                factor,
                rank: self.rank,
                noise_var,
                dof,
            },
        }
    }
}

/// A method's predictive of y in the form its joint takes: the noise sd of a new y at every
/// test input comes from the method (`noise_sd`: its own, or the run's noise source).
pub struct MethodJoint<'a> {
    out: &'a Prediction,
    noise_sd: &'a [f64],
    /// What it is made of.
    pub kind: JointKind,
    /// Draws `[M, S]` (input-major) and their noise sds' inverses and logs, for the mixture.
    draws: Vec<f64>,
    draw_inv_sd: Vec<f64>,
    draw_ln_sd: Vec<f64>,
    /// The test inputs M.
    points: usize,
}

impl<'a> MethodJoint<'a> {
    /// The method's joint: its Gaussian joint, else its draws, else its marginals.
    pub fn new(out: &'a Prediction, noise_sd: &'a [f64]) -> MethodJoint<'a> {
        let kind = JointKind::of(out);
        let (mut draws, mut draw_inv_sd, mut draw_ln_sd) = (Vec::new(), Vec::new(), Vec::new());
        if kind == JointKind::Draws {
            let rows = out.samples.as_ref().expect("kind Draws");
            let m = rows[0].len();
            let all: Vec<usize> = (0..m).collect();
            // Input-major `[M, S]`, as `ln_mixture` reads them.
            let input_major = |v: &[f64]| -> Vec<f64> {
                (0..m)
                    .flat_map(|i| (0..rows.len()).map(move |k| v[k * m + i]))
                    .collect()
            };
            let flat: Vec<f64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
            draws = input_major(&flat);
            let sd = Self::sds(out, noise_sd, &all);
            draw_inv_sd = input_major(&sd.iter().map(|s| 1.0 / s).collect::<Vec<_>>());
            draw_ln_sd = input_major(&sd.iter().map(|s| s.ln()).collect::<Vec<_>>());
        }
        let points = match &out.samples {
            Some(rows) if kind == JointKind::Draws => rows[0].len(),
            _ => out.mean.len(),
        };
        MethodJoint {
            out,
            noise_sd,
            kind,
            draws,
            draw_inv_sd,
            draw_ln_sd,
            points,
        }
    }

    /// Its elliptical parts at distinct inputs `u`: its Gaussian (or t) joint, or its normal
    /// marginals as a diagonal Gaussian; `None` for draws and for t marginals.
    fn parts(&self, u: &[usize]) -> Option<Parts> {
        let out = self.out;
        let dof = match out.family {
            Family::StudentT { dof } => Some(dof),
            _ => None,
        };
        match self.kind {
            JointKind::Gaussian => {
                let j = out.extra.joint.as_ref().expect("kind Gaussian");
                Some(Parts {
                    mean: pick(&out.mean, u),
                    factor: pick_rows(&j.factor, j.rank, u),
                    rank: j.rank,
                    var: squares(pick(self.noise_sd, u)),
                    dof,
                })
            }
            JointKind::Marginals if dof.is_none() && out.extra.marginals_t.is_none() => {
                Some(Parts {
                    mean: pick(&out.mean, u),
                    factor: Vec::new(),
                    rank: 0,
                    var: u
                        .iter()
                        .map(|&i| match &out.extra.predictive_std {
                            Some(p) => p[i] * p[i],
                            None => out.std[i].powi(2) + self.noise_sd[i].powi(2),
                        })
                        .collect(),
                    dof: None,
                })
            }
            _ => None,
        }
    }

    /// The noise sd of every draw at inputs `x`, `[S, τ]`: each draw's own (σ_m(x)), its σ
    /// (HMC), or the method's noise sd.
    fn sds(out: &Prediction, noise_sd: &[f64], x: &[usize]) -> Vec<f64> {
        let rows = out.samples.as_ref().expect("kind Draws");
        match (&out.extra.sample_noise, &out.extra.noise_samples) {
            (Some(noise), _) => noise.iter().flat_map(|r| pick(r, x)).collect(),
            (None, Some(per_draw)) => per_draw
                .iter()
                .flat_map(|&s| std::iter::repeat_n(s, x.len()))
                .collect(),
            (None, None) => {
                let one = pick(noise_sd, x);
                rows.iter().flat_map(|_| one.iter().copied()).collect()
            }
        }
    }

    /// Its Student-t marginals at the τ inputs `x` as a product (the one joint that is not
    /// elliptical, so it is evaluated at y in full): each input's own t where the method gives
    /// them (`marginals_t`), else the family's ν with its predictive sd as the scale.
    fn t_marginals(&self, x: &[usize]) -> Joint {
        let out = self.out;
        let dof = match (&out.extra.marginals_t, out.family) {
            (Some(_), _) => None,
            (None, Family::StudentT { dof }) => Some(dof),
            (None, _) => unreachable!("parts are None only for draws and t marginals"),
        };
        if let Some(t) = &out.extra.marginals_t {
            return Joint::Independent(
                x.iter()
                    .map(|&i| Marginal {
                        mean: out.mean[i],
                        scale: t.y_scale[i],
                        dof: Some(t.dof[i]),
                    })
                    .collect(),
            );
        }
        Joint::Independent(
            x.iter()
                .map(|&i| Marginal {
                    mean: out.mean[i],
                    scale: match &out.extra.predictive_std {
                        Some(p) => p[i],
                        None => out.std[i].hypot(self.noise_sd[i]),
                    },
                    dof,
                })
                .collect(),
        )
    }
}

/// One draw of y's standard normals (τ) and, for a t reference, its χ²_ν (as a sum of ν
/// squared normals: ν = N − p, an integer for the anchor).
fn noise(rng: &mut Rng, tau: usize, dof: Option<f64>) -> (Vec<f64>, Vec<f64>) {
    let z = (0..tau).map(|_| rng.normal()).collect();
    let chi2 = dof
        .map(|nu| {
            vec![(0..nu.round().max(1.0) as usize)
                .map(|_| rng.normal().powi(2))
                .sum()]
        })
        .unwrap_or_default();
    (z, chi2)
}

/// Where a batch's reference joint comes from: the exact posterior predictive, or the
/// data-generating N(f(x), σ²(x)).
#[derive(Clone, Copy)]
enum Source<'a> {
    Exact(Exact<'a>),
    Env { truth: &'a [f64], sigma: &'a [f64] },
}

impl Source<'_> {
    /// Its parts at distinct inputs `u`.
    fn parts(&self, u: &[usize]) -> Parts {
        match self {
            Source::Exact(e) => Parts {
                mean: pick(e.mean, u),
                factor: pick_rows(e.factor, e.rank, u),
                rank: e.rank,
                var: squares(pick(e.noise_sd, u)),
                dof: e.dof,
            },
            Source::Env { truth, sigma } => Parts {
                mean: pick(truth, u),
                factor: Vec::new(),
                rank: 0,
                var: squares(pick(sigma, u)),
                dof: None,
            },
        }
    }

    /// Its joint at the τ inputs `x`, with its degrees of freedom.
    fn at(&self, x: &[usize]) -> (Joint, Option<f64>) {
        match self {
            Source::Exact(e) => (e.at(x), e.dof),
            Source::Env { truth, sigma } => (
                Joint::Gaussian {
                    mean: pick(truth, x),
                    factor: Vec::new(),
                    rank: 0,
                    noise_var: squares(pick(sigma, x)),
                },
                None,
            ),
        }
    }
}

/// The mean over a region's batches of KL(reference ‖ method), with its standard error. At
/// τ = 1 the batches are every input `per_input` times: the mean over inputs is exact, and the
/// standard error is the Monte Carlo part alone (0 in closed form). Per batch, in its distinct
/// inputs ([`grouped`](super::grouped)): the closed form when both are Gaussian, else
/// ln p(y) − ln q(y) at one y drawn from the reference.
fn region_kl(
    batches: &[Vec<usize>],
    source: Source<'_>,
    method: &MethodJoint<'_>,
    per_input: Option<usize>,
    rng: &mut Rng,
) -> Result<Estimate> {
    let m = method.points;
    if method.kind == JointKind::Draws {
        // Each batch's y is drawn in batch order from the one stream (so the numbers do not
        // depend on the threads), then the mixtures over the draws, the cost, in parallel.
        let mut drawn = Vec::with_capacity(batches.len());
        for x in batches {
            let g = Groups::of(x);
            let p = Elliptic::new(&g, source.parts(&g.inputs))?;
            let y = p.draw(rng);
            let ln_p = p.ln_pdf(&y);
            drawn.push((g, y, ln_p));
        }
        let mix = (
            &method.draws[..],
            &method.draw_inv_sd[..],
            &method.draw_ln_sd[..],
        );
        let values = uqbench_core::par_map(drawn.len(), |b| {
            let (g, y, ln_p) = &drawn[b];
            ln_p - ln_mixture(g, y, mix, m)
        });
        return Ok(estimate(&values, per_input));
    }
    let mut values = Vec::with_capacity(batches.len());
    // A closed form of the previous batch, reused while τ = 1 repeats its input.
    let mut last: Option<(&[usize], f64)> = None;
    for x in batches {
        if let Some((_, v)) = last.filter(|(lx, _)| *lx == &x[..]) {
            values.push(v);
            continue;
        }
        let g = Groups::of(x);
        let p_parts = source.parts(&g.inputs);
        let value = match method.parts(&g.inputs) {
            Some(q_parts) if q_parts == p_parts => {
                last = Some((&x[..], 0.0));
                0.0
            }
            Some(q_parts) => {
                let (p, q) = (Elliptic::new(&g, p_parts)?, Elliptic::new(&g, q_parts)?);
                if p.gaussian() && q.gaussian() {
                    let v = kl_gaussian(&p, &q);
                    last = Some((&x[..], v));
                    v
                } else {
                    let y = p.draw(rng);
                    p.ln_pdf(&y) - q.ln_pdf(&y)
                }
            }
            // Student-t marginals only: their product is not elliptical; y in full.
            None => {
                let (p, dof) = source.at(x);
                let (z, chi2) = noise(rng, x.len(), dof);
                kl(&p, &method.t_marginals(x), &z, &chi2)?.value
            }
        };
        values.push(value);
    }
    Ok(estimate(&values, per_input))
}

/// The mean of the batches' values with its standard error; at τ = 1 (`per_input` batches of
/// each input) the mean over inputs of each input's mean, with the Monte Carlo part alone.
fn estimate(values: &[f64], per_input: Option<usize>) -> Estimate {
    match per_input {
        None => Estimate::of(values),
        Some(per) => {
            let groups: Vec<Estimate> = values.chunks_exact(per).map(Estimate::of).collect();
            let n = groups.len() as f64;
            Estimate {
                value: groups.iter().map(|g| g.value).sum::<f64>() / n,
                stderr: groups.iter().map(|g| g.stderr.powi(2)).sum::<f64>().sqrt() / n,
            }
        }
    }
}

/// One repetition's joint metrics, per region: `joint_kl_T` (against the exact posterior,
/// where there is one) and `env_kl_T` (against N(f(x), σ²(x))), with `…_se`.
pub fn regression(
    out: &Prediction,
    noise_sd: &[f64],
    truth: &[f64],
    sigma: &[f64],
    input: &JointInput<'_>,
) -> Result<(JointKind, JointMetrics)> {
    let method = MethodJoint::new(out, noise_sd);
    let env = Source::Env { truth, sigma };
    let exact = input.exact.map(Source::Exact);
    let mut metrics = JointMetrics::new();
    for (r, (region, idx)) in input.regions.iter().enumerate() {
        let entry = metrics.entry((*region).to_string()).or_default();
        for &tau in &input.settings.tau {
            let mut rng = input.rng(r, tau);
            let b = batches(idx, tau, input.settings, &mut rng);
            let per_input = (tau == 1).then(|| draws_per_input(input.settings, idx.len()));
            let mut put = |prefix: &str, e: Estimate| {
                entry.insert(name(prefix, tau), e.value);
                entry.insert(format!("{}_se", name(prefix, tau)), e.stderr);
            };
            if let Some(exact) = exact {
                put(
                    JOINT_KL,
                    region_kl(&b, exact, &method, per_input, &mut rng)?,
                );
            }
            put(ENV_KL, region_kl(&b, env, &method, per_input, &mut rng)?);
        }
    }
    Ok((method.kind, metrics))
}

/// One classification repetition's `env_kl_T` per region: the exact P(y = 1 | x) against the
/// method's mixture of its draws' Bernoullis (`draws` `[S][M]` probabilities), exact by
/// enumerating each batch's label counts ([`grouped::kl_bernoulli`]).
pub fn classification(
    draws: &[Vec<f64>],
    truth: &[f64],
    input: &JointInput<'_>,
) -> Result<JointMetrics> {
    let mut metrics = JointMetrics::new();
    let m = truth.len();
    let q = grouped::BernoulliDraws::new(draws.iter().flat_map(|d| d.iter().copied()).collect(), m);
    for (r, (region, idx)) in input.regions.iter().enumerate() {
        let entry = metrics.entry((*region).to_string()).or_default();
        for &tau in &input.settings.tau {
            let mut rng = input.rng(r, tau);
            // τ = 1: every input once (exact); else dyadic batches.
            let b = match tau {
                1 => idx.iter().map(|&i| vec![i]).collect(),
                _ => batches(idx, tau, input.settings, &mut rng),
            };
            let values: Vec<f64> = b
                .iter()
                .map(|x| grouped::kl_bernoulli(&Groups::of(x), truth, &q, &mut rng))
                .collect();
            // τ = 1 enumerates the inputs and their labels: exact.
            let mut e = Estimate::of(&values);
            if tau == 1 {
                e.stderr = 0.0;
            }
            entry.insert(name(ENV_KL, tau), e.value);
            entry.insert(format!("{}_se", name(ENV_KL, tau)), e.stderr);
        }
    }
    Ok(metrics)
}

/// A covariance `[M][M]` of f as a factor F with F·Fᵀ = C (eigenvectors scaled by √λ, negative
/// rounding eigenvalues set to 0), checked: square, symmetric, finite, positive semi-definite.
pub fn factor_of(cov: &[Vec<f64>], m: usize) -> Result<FactorJoint> {
    if cov.len() != m || cov.iter().any(|r| r.len() != m) {
        bail!(
            "cov: {} rows; valid: {m} × {m} (one row and column per test input)",
            cov.len()
        );
    }
    let c = DMatrix::from_fn(m, m, |i, j| cov[i][j]);
    if let Some(v) = c.iter().find(|v| !v.is_finite()) {
        bail!("cov holds {v}: a covariance must be finite");
    }
    let scale = c.diagonal().amax().max(f64::MIN_POSITIVE);
    for i in 0..m {
        for j in 0..i {
            if (c[(i, j)] - c[(j, i)]).abs() > 1e-9 * scale {
                bail!(
                    "cov[{i}][{j}] = {} ≠ cov[{j}][{i}] = {}: a covariance is symmetric",
                    c[(i, j)],
                    c[(j, i)]
                );
            }
        }
    }
    let eig = ((&c + c.transpose()) * 0.5).symmetric_eigen();
    if let Some(l) = eig.eigenvalues.iter().find(|&&l| l < -1e-8 * scale) {
        bail!("cov has the eigenvalue {l}: a covariance is positive semi-definite");
    }
    let factor = (0..m)
        .flat_map(|i| {
            let eig = &eig;
            (0..m).map(move |j| eig.eigenvectors[(i, j)] * eig.eigenvalues[j].max(0.0).sqrt())
        })
        .collect();
    Ok(FactorJoint { factor, rank: m })
}

#[cfg(test)]
#[path = "joint_tests.rs"]
mod tests;
