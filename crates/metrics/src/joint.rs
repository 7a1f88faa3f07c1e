//! Joint predictive distributions of y at τ inputs, and the Kullback–Leibler divergence from
//! a reference joint to a method's (spec §10; Osband et al. 2022, Wen et al. 2021).
//!
//! A joint is one of:
//! - [`Joint::Gaussian`]: N(μ, C) with C = F·Fᵀ + diag(v): a low-rank factor F of the
//!   covariance of f and the noise variances v (the exact posterior with σ known, a GP, a
//!   linearised Laplace, the data-generating distribution with F empty);
//! - [`Joint::StudentT`]: the multivariate t with ν degrees of freedom, location μ and scale
//!   matrix F·Fᵀ + diag(v) (the exact posterior with σ's scale estimated);
//! - [`Joint::Mixture`]: (1/M)·Σ_m Π_i N(y_i; f_m,i, s²_m,i) (ensemble members, MC passes,
//!   posterior draws, each with its noise sd);
//! - [`Joint::Independent`]: Π_i p_i(y_i) with normal or t marginals (a method with marginals
//!   only).
//!
//! KL(P ‖ Q) = E_{y∼P}[log p(y) − log q(y)], in nats for the τ points together (not divided
//! by τ): the closed form when both are Gaussian, else a Monte Carlo average over draws of y
//! from P ([`kl`], with its standard error). P, the reference, is Gaussian or t. Everything is
//! f64; a covariance is factorised by Cholesky, never inverted.

use nalgebra::{Cholesky, DMatrix, DVector, Dyn};
use statrs::function::gamma::ln_gamma;

use crate::error::MetricError;

/// ln(2π).
const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// One normal or Student-t marginal: location, scale, degrees of freedom (`None`: normal).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Marginal {
    /// Location.
    pub mean: f64,
    /// Scale (the sd of a normal).
    pub scale: f64,
    /// Degrees of freedom of a t.
    pub dof: Option<f64>,
}

/// A joint predictive distribution of y at τ inputs.
#[derive(Debug, Clone, PartialEq)]
pub enum Joint {
    /// N(μ, F·Fᵀ + diag(v)).
    Gaussian {
        /// μ `[τ]`.
        mean: Vec<f64>,
        /// F `[τ, rank]`, row-major (empty for rank 0).
        factor: Vec<f64>,
        /// The columns of F.
        rank: usize,
        /// v `[τ]`.
        noise_var: Vec<f64>,
    },
    /// The multivariate t with `dof` degrees of freedom, location μ and scale matrix
    /// F·Fᵀ + diag(v).
    StudentT {
        /// μ `[τ]`.
        mean: Vec<f64>,
        /// F `[τ, rank]`, row-major.
        factor: Vec<f64>,
        /// The columns of F.
        rank: usize,
        /// v `[τ]`.
        noise_var: Vec<f64>,
        /// ν.
        dof: f64,
    },
    /// (1/M)·Σ_m Π_i N(y_i; f_m,i, s²_m,i): `draws` and `sd` `[M, τ]`, row-major.
    Mixture {
        /// f_m,i.
        draws: Vec<f64>,
        /// s_m,i.
        sd: Vec<f64>,
        /// τ.
        tau: usize,
    },
    /// Π_i p_i(y_i).
    Independent(Vec<Marginal>),
}

/// A Monte Carlo or exact estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The value.
    pub value: f64,
    /// Its Monte Carlo standard error (0 for a closed form).
    pub stderr: f64,
}

impl Estimate {
    /// The mean of per-draw values with its standard error sd/√S.
    pub fn of(values: &[f64]) -> Estimate {
        let s = values.len() as f64;
        let value = values.iter().sum::<f64>() / s;
        let var = values.iter().map(|v| (v - value).powi(2)).sum::<f64>() / (s - 1.0).max(1.0);
        Estimate {
            value,
            stderr: (var / s).sqrt(),
        }
    }
}

fn invalid(what: &str, value: f64, valid: &str) -> MetricError {
    MetricError::Invalid {
        what: what.to_string(),
        value,
        valid: valid.to_string(),
    }
}

/// F·Fᵀ + diag(v) as a dense matrix.
fn dense(factor: &[f64], rank: usize, noise_var: &[f64]) -> DMatrix<f64> {
    let tau = noise_var.len();
    let mut c = if rank == 0 {
        DMatrix::zeros(tau, tau)
    } else {
        let f = DMatrix::from_row_slice(tau, rank, factor);
        &f * f.transpose()
    };
    for (i, v) in noise_var.iter().enumerate() {
        c[(i, i)] += v;
    }
    c
}

/// The Cholesky factor of a covariance, or an error naming it.
fn cholesky(c: DMatrix<f64>, what: &str) -> Result<Cholesky<f64, Dyn>, MetricError> {
    let tau = c.nrows() as f64;
    c.cholesky().ok_or_else(|| {
        invalid(
            what,
            tau,
            "a positive definite τ × τ matrix (every noise variance > 0)",
        )
    })
}

fn log_det(chol: &Cholesky<f64, Dyn>) -> f64 {
    2.0 * chol
        .l_dirty()
        .diagonal()
        .iter()
        .map(|d| d.ln())
        .sum::<f64>()
}

/// A joint made ready to evaluate log densities (and, for a reference, to draw from).
enum Prepared<'a> {
    /// Gaussian (`dof = None`) or t: μ, the Cholesky factor of the covariance or scale, its
    /// log-determinant.
    Elliptic {
        mean: DVector<f64>,
        l: DMatrix<f64>,
        log_det: f64,
        dof: Option<f64>,
    },
    /// Draws, 1/s and Σ_i ln s per row.
    Mixture {
        draws: &'a [f64],
        inv_sd: Vec<f64>,
        ln_sd: Vec<f64>,
        tau: usize,
    },
    Independent(&'a [Marginal]),
}

impl Joint {
    /// τ.
    pub fn tau(&self) -> usize {
        match self {
            Joint::Gaussian { mean, .. } | Joint::StudentT { mean, .. } => mean.len(),
            Joint::Mixture { tau, .. } => *tau,
            Joint::Independent(m) => m.len(),
        }
    }

    fn check(&self) -> Result<(), MetricError> {
        let bad = |v: &[f64]| v.iter().any(|x| !x.is_finite());
        match self {
            Joint::Gaussian {
                mean,
                factor,
                rank,
                noise_var,
            }
            | Joint::StudentT {
                mean,
                factor,
                rank,
                noise_var,
                ..
            } => {
                if factor.len() != mean.len() * rank || noise_var.len() != mean.len() {
                    return Err(MetricError::Length {
                        what: "joint: factor [τ, rank] and noise variances [τ] against the mean"
                            .into(),
                        left: factor.len() + noise_var.len(),
                        right: mean.len() * (rank + 1),
                    });
                }
                if bad(mean) || bad(factor) || bad(noise_var) {
                    return Err(invalid(
                        "joint mean, factor or noise variance",
                        f64::NAN,
                        "finite",
                    ));
                }
            }
            Joint::Mixture { draws, sd, tau } => {
                if draws.len() != sd.len()
                    || *tau == 0
                    || draws.len() % tau != 0
                    || draws.is_empty()
                {
                    return Err(MetricError::Length {
                        what: "joint mixture: draws and noise sds, [M, τ] each".into(),
                        left: draws.len(),
                        right: sd.len(),
                    });
                }
                if bad(draws) {
                    return Err(invalid("joint draws", f64::NAN, "finite"));
                }
                if let Some(&s) = sd.iter().find(|s| !(**s > 0.0 && s.is_finite())) {
                    return Err(invalid("joint mixture noise sd", s, "finite and > 0"));
                }
            }
            Joint::Independent(m) => {
                if let Some(x) = m.iter().find(|x| !(x.scale > 0.0 && x.mean.is_finite())) {
                    return Err(invalid("joint marginal scale", x.scale, "finite and > 0"));
                }
            }
        }
        Ok(())
    }

    fn prepare(&self) -> Result<Prepared<'_>, MetricError> {
        self.check()?;
        Ok(match self {
            Joint::Gaussian {
                mean,
                factor,
                rank,
                noise_var,
            } => {
                let chol = cholesky(dense(factor, *rank, noise_var), "joint covariance")?;
                Prepared::Elliptic {
                    mean: DVector::from_column_slice(mean),
                    log_det: log_det(&chol),
                    l: chol.unpack(),
                    dof: None,
                }
            }
            Joint::StudentT {
                mean,
                factor,
                rank,
                noise_var,
                dof,
            } => {
                let chol = cholesky(dense(factor, *rank, noise_var), "joint scale matrix")?;
                Prepared::Elliptic {
                    mean: DVector::from_column_slice(mean),
                    log_det: log_det(&chol),
                    l: chol.unpack(),
                    dof: Some(*dof),
                }
            }
            Joint::Mixture { draws, sd, tau } => Prepared::Mixture {
                draws,
                inv_sd: sd.iter().map(|s| 1.0 / s).collect(),
                ln_sd: sd
                    .chunks_exact(*tau)
                    .map(|r| r.iter().map(|s| s.ln()).sum())
                    .collect(),
                tau: *tau,
            },
            Joint::Independent(m) => Prepared::Independent(m),
        })
    }
}

impl Prepared<'_> {
    /// log density at y.
    fn ln_pdf(&self, y: &[f64]) -> f64 {
        match self {
            Prepared::Elliptic {
                mean,
                l,
                log_det,
                dof,
            } => {
                let tau = y.len() as f64;
                let r = DVector::from_column_slice(y) - mean;
                let q = l
                    .solve_lower_triangular(&r)
                    .expect("a Cholesky factor")
                    .norm_squared();
                match dof {
                    None => -0.5 * (q + log_det + tau * LN_2PI),
                    Some(nu) => {
                        ln_gamma((nu + tau) / 2.0)
                            - ln_gamma(nu / 2.0)
                            - 0.5 * tau * (nu * std::f64::consts::PI).ln()
                            - 0.5 * log_det
                            - 0.5 * (nu + tau) * (q / nu).ln_1p()
                    }
                }
            }
            Prepared::Mixture {
                draws,
                inv_sd,
                ln_sd,
                tau,
            } => {
                let constant = -0.5 * *tau as f64 * LN_2PI;
                let terms: Vec<f64> = (draws.chunks_exact(*tau).zip(inv_sd.chunks_exact(*tau)))
                    .zip(ln_sd)
                    .map(|((f, w), ln_s)| {
                        let q: f64 = (y.iter().zip(f).zip(w))
                            .map(|((&yi, &fi), &wi)| {
                                let z = (yi - fi) * wi;
                                z * z
                            })
                            .sum();
                        constant - 0.5 * q - ln_s
                    })
                    .collect();
                log_mean_exp(&terms)
            }
            Prepared::Independent(marginals) => (y.iter().zip(marginals.iter()))
                .map(|(&yi, m)| ln_marginal(yi, m))
                .sum(),
        }
    }

    /// y = μ + L·z (·√(ν/χ²) for a t), from τ standard normals `z` and one χ²_ν draw.
    fn draw(&self, z: &[f64], chi2: f64) -> Vec<f64> {
        let Prepared::Elliptic { mean, l, dof, .. } = self else {
            unreachable!("a reference joint is Gaussian or t: checked by kl")
        };
        let scale = dof.map_or(1.0, |nu| (nu / chi2).sqrt());
        (mean + l * DVector::from_column_slice(z) * scale)
            .as_slice()
            .to_vec()
    }
}

/// log of the mean of exp(terms), stably (−∞ when every term is).
pub fn log_mean_exp(terms: &[f64]) -> f64 {
    let max = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return max;
    }
    let sum: f64 = terms.iter().map(|t| (t - max).exp()).sum();
    max + (sum / terms.len() as f64).ln()
}

/// log density of one normal or t marginal.
pub fn ln_marginal(y: f64, m: &Marginal) -> f64 {
    let z = (y - m.mean) / m.scale;
    match m.dof {
        None => -0.5 * (z * z + LN_2PI) - m.scale.ln(),
        Some(nu) => {
            ln_gamma((nu + 1.0) / 2.0)
                - ln_gamma(nu / 2.0)
                - 0.5 * (nu * std::f64::consts::PI).ln()
                - m.scale.ln()
                - 0.5 * (nu + 1.0) * (z * z / nu).ln_1p()
        }
    }
}

/// KL(N(μ₀, S₀) ‖ N(μ₁, S₁)) = ½[tr(S₁⁻¹S₀) + (μ₁ − μ₀)ᵀS₁⁻¹(μ₁ − μ₀) − τ + ln(|S₁|/|S₀|)],
/// both joints Gaussian.
pub fn kl_gaussian(p: &Joint, q: &Joint) -> Result<f64, MetricError> {
    let (
        Joint::Gaussian {
            mean: m0,
            factor: f0,
            rank: r0,
            noise_var: v0,
        },
        Joint::Gaussian {
            mean: m1,
            factor: f1,
            rank: r1,
            noise_var: v1,
        },
    ) = (p, q)
    else {
        return Err(invalid(
            "kl_gaussian: joints",
            f64::NAN,
            "two Gaussian joints",
        ));
    };
    p.check()?;
    q.check()?;
    crate::error::same_len("joints' τ", m0.len(), m1.len())?;
    let tau = m0.len() as f64;
    let s0 = dense(f0, *r0, v0);
    let c0 = cholesky(s0.clone(), "reference covariance")?;
    let c1 = cholesky(dense(f1, *r1, v1), "method covariance")?;
    let trace = c1.solve(&s0).trace();
    let d = DVector::from_column_slice(m1) - DVector::from_column_slice(m0);
    let z = c1
        .l_dirty()
        .solve_lower_triangular(&d)
        .expect("a Cholesky factor");
    Ok(0.5 * (trace + z.norm_squared() - tau + log_det(&c1) - log_det(&c0)))
}

/// KL(P ‖ Q), P (the reference) Gaussian or t: the closed form when both are Gaussian (and 0
/// when they are equal); otherwise the Monte Carlo mean of ln p(y) − ln q(y) over the draws
/// y = μ + L·z_s (·√(ν/χ²_s) for a t), with its standard error. `z` holds S·τ standard normals
/// (S ≥ 1), `chi2` S draws of χ²_ν for a t reference (ignored otherwise).
pub fn kl(p: &Joint, q: &Joint, z: &[f64], chi2: &[f64]) -> Result<Estimate, MetricError> {
    if !matches!(p, Joint::Gaussian { .. } | Joint::StudentT { .. }) {
        return Err(invalid(
            "kl: the reference joint",
            f64::NAN,
            "Gaussian or Student t",
        ));
    }
    let tau = p.tau();
    crate::error::same_len("joints' τ", tau, q.tau())?;
    if p == q {
        return Ok(Estimate {
            value: 0.0,
            stderr: 0.0,
        });
    }
    if let (Joint::Gaussian { .. }, Joint::Gaussian { .. }) = (p, q) {
        return Ok(Estimate {
            value: kl_gaussian(p, q)?,
            stderr: 0.0,
        });
    }
    if tau == 0 || z.is_empty() || z.len() % tau != 0 {
        return Err(MetricError::Length {
            what: "kl: standard normals, S·τ of them".into(),
            left: z.len(),
            right: tau,
        });
    }
    let samples = z.len() / tau;
    if matches!(p, Joint::StudentT { .. }) {
        crate::error::same_len("kl: χ² draws, one per sample", chi2.len(), samples)?;
    }
    let (pp, qq) = (p.prepare()?, q.prepare()?);
    let values: Vec<f64> = (0..samples)
        .map(|s| {
            let y = pp.draw(
                &z[s * tau..(s + 1) * tau],
                chi2.get(s).copied().unwrap_or(1.0),
            );
            pp.ln_pdf(&y) - qq.ln_pdf(&y)
        })
        .collect();
    Ok(Estimate::of(&values))
}

/// ln p(y) of a joint at one y (e.g. to score held-out targets jointly).
pub fn ln_pdf(joint: &Joint, y: &[f64]) -> Result<f64, MetricError> {
    crate::error::same_len("y against the joint's τ", y.len(), joint.tau())?;
    Ok(joint.prepare()?.ln_pdf(y))
}

/// ln of the probability of labels `bits` under independent Bernoullis `p`.
fn ln_bernoulli(p: &[f64], bits: impl Fn(usize) -> bool) -> f64 {
    p.iter()
        .enumerate()
        .map(|(i, &pi)| {
            let pi = pi.clamp(1e-12, 1.0 - 1e-12);
            if bits(i) {
                pi.ln()
            } else {
                (-pi).ln_1p()
            }
        })
        .sum()
}

/// Labels above which [`kl_bernoulli`] switches from enumeration to Monte Carlo (spec §10).
pub const ENUMERATE_MAX_TAU: usize = 12;

/// The classification KL at τ inputs: KL(Π_i Bern(p_i) ‖ Q) with Q the method's mixture
/// (1/M)·Σ_m Π_i Bern(q_m,i) (`q` `[M, τ]` probabilities). Exact by enumerating the 2^τ label
/// vectors for τ ≤ [`ENUMERATE_MAX_TAU`]; above, the Monte Carlo mean over label vectors drawn
/// from P with the uniforms `u` (`[S, τ]`), with its standard error.
pub fn kl_bernoulli(p: &[f64], q: &[f64], u: &[f64]) -> Result<Estimate, MetricError> {
    let tau = p.len();
    if tau == 0 || q.is_empty() || q.len() % tau != 0 {
        return Err(MetricError::Length {
            what: "kl_bernoulli: method probabilities [M, τ] against τ".into(),
            left: q.len(),
            right: tau,
        });
    }
    if let Some(&v) = p.iter().chain(q).find(|v| !(0.0..=1.0).contains(*v)) {
        return Err(invalid("kl_bernoulli: a probability", v, "in [0, 1]"));
    }
    let ln_q = |bits: &dyn Fn(usize) -> bool| {
        let terms: Vec<f64> = q
            .chunks_exact(tau)
            .map(|qm| ln_bernoulli(qm, bits))
            .collect();
        log_mean_exp(&terms)
    };
    if tau <= ENUMERATE_MAX_TAU {
        let mut total = 0.0;
        for labels in 0u32..(1 << tau) {
            let bits = |i: usize| labels >> i & 1 == 1;
            let ln_p = ln_bernoulli(p, bits);
            total += ln_p.exp() * (ln_p - ln_q(&bits));
        }
        return Ok(Estimate {
            value: total,
            stderr: 0.0,
        });
    }
    if u.is_empty() || u.len() % tau != 0 {
        return Err(MetricError::Length {
            what: "kl_bernoulli: uniforms [S, τ] above the enumeration limit".into(),
            left: u.len(),
            right: tau,
        });
    }
    let values: Vec<f64> = u
        .chunks_exact(tau)
        .map(|us| {
            let bits = |i: usize| us[i] < p[i];
            ln_bernoulli(p, bits) - ln_q(&bits)
        })
        .collect();
    Ok(Estimate::of(&values))
}

#[cfg(test)]
#[path = "joint_tests.rs"]
mod tests;
