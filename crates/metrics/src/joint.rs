//! Joint predictive distributions of y at τ inputs, and the Kullback–Leibler divergence from
//! a reference joint to a method's (spec §10; Osband et al. 2022, Wen et al. 2021).
//!
//! A joint is one of:
//! - [`Joint::Gaussian`]: N(μ, C) with C = F·Fᵀ + diag(v) (a low-rank factor F of the
//!   covariance of f and the noise variances v; the exact posterior with σ known, a GP, a
//!   linearised Laplace);
//! - [`Joint::StudentT`]: the multivariate t with ν degrees of freedom, location μ and scale
//!   matrix F·Fᵀ + diag(v) (the exact posterior with σ's scale estimated);
//! - [`Joint::Mixture`]: (1/M)·Σ_m Π_i N(y_i; f_m,i, s²_m,i) (ensemble members, MC passes,
//!   posterior draws, each with its noise sd);
//! - [`Joint::Independent`]: Π_i p_i(y_i) with normal or t marginals (a method with marginals
//!   only).
//!
//! KL(P ‖ Q) = E_{y∼P}[log p(y) − log q(y)], in nats for the τ points together: the closed
//! form when both are Gaussian, else a Monte Carlo average over draws of y from P with its
//! standard error. Everything is f64.

use nalgebra::{DMatrix, DVector};
use statrs::function::gamma::ln_gamma;

use crate::MetricError;

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
    /// N(μ, F·Fᵀ + diag(v)), F `[τ, r]` row-major.
    Gaussian {
        /// μ `[τ]`.
        mean: Vec<f64>,
        /// F `[τ, r]`, row-major.
        factor: Vec<f64>,
        /// Its columns r.
        rank: usize,
        /// v `[τ]`.
        noise_var: Vec<f64>,
    },
    /// The multivariate t with `dof` degrees of freedom, location μ and scale matrix
    /// F·Fᵀ + diag(v).
    StudentT {
        /// μ `[τ]`.
        mean: Vec<f64>,
        /// F `[τ, r]`, row-major.
        factor: Vec<f64>,
        /// Its columns r.
        rank: usize,
        /// v `[τ]`.
        noise_var: Vec<f64>,
        /// ν.
        dof: f64,
    },
    /// (1/M)·Σ_m Π_i N(y_i; f_m,i, s²_m,i): `draws` `[M, τ]` and `sd` `[M, τ]`, row-major.
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

/// A dense covariance (or scale) matrix from its factor and diagonal.
fn dense(factor: &[f64], rank: usize, noise_var: &[f64]) -> DMatrix<f64> {
    let tau = noise_var.len();
    let f = DMatrix::from_row_slice(tau, rank, factor);
    let mut c = if rank == 0 {
        DMatrix::zeros(tau, tau)
    } else {
        &f * f.transpose()
    };
    for i in 0..tau {
        c[(i, i)] += noise_var[i];
    }
    c
}

/// The Cholesky factor of a covariance, or an error naming it.
fn cholesky(c: DMatrix<f64>, what: &str) -> Result<nalgebra::Cholesky<f64, nalgebra::Dyn>, MetricError> {
    let tau = c.nrows();
    c.cholesky().ok_or_else(|| {
        MetricError::invalid(what, format!("a {tau} × {tau} matrix"), "positive definite")
    })
}

const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// What a joint needs to evaluate log densities fast.
enum Prepared {
    Gaussian {
        mean: DVector<f64>,
        chol: nalgebra::Cholesky<f64, nalgebra::Dyn>,
        log_det: f64,
    },
    StudentT {
        mean: DVector<f64>,
        chol: nalgebra::Cholesky<f64, nalgebra::Dyn>,
        log_det: f64,
        dof: f64,
    },
    Mixture {
        draws: Vec<f64>,
        sd: Vec<f64>,
        tau: usize,
    },
    Independent(Vec<Marginal>),
}

fn log_det(chol: &nalgebra::Cholesky<f64, nalgebra::Dyn>) -> f64 {
    2.0 * chol.l_dirty().diagonal().iter().map(|d| d.ln()).sum::<f64>()
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

    fn prepare(&self) -> Result<Prepared, MetricError> {
        Ok(match self {
            Joint::Gaussian {
                mean,
                factor,
                rank,
                noise_var,
            } => {
                let chol = cholesky(dense(factor, *rank, noise_var), "joint covariance")?;
                Prepared::Gaussian {
                    mean: DVector::from_column_slice(mean),
                    log_det: log_det(&chol),
                    chol,
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
                Prepared::StudentT {
                    mean: DVector::from_column_slice(mean),
                    log_det: log_det(&chol),
                    chol,
                    dof: *dof,
                }
            }
            Joint::Mixture { draws, sd, tau } => Prepared::Mixture {
                draws: draws.clone(),
                sd: sd.clone(),
                tau: *tau,
            },
            Joint::Independent(m) => Prepared::Independent(m.clone()),
        })
    }
}

impl Prepared {
    /// log density at y.
    fn ln_pdf(&self, y: &[f64]) -> f64 {
        match self {
            Prepared::Gaussian {
                mean,
                chol,
                log_det,
            } => {
                let r = DVector::from_column_slice(y) - mean;
                let z = chol.l_dirty().solve_lower_triangular(&r).expect("a Cholesky factor");
                -0.5 * (z.norm_squared() + log_det + y.len() as f64 * LN_2PI)
            }
            Prepared::StudentT {
                mean,
                chol,
                log_det,
                dof,
            } => {
                let tau = y.len() as f64;
                let r = DVector::from_column_slice(y) - mean;
                let z = chol.l_dirty().solve_lower_triangular(&r).expect("a Cholesky factor");
                ln_gamma((dof + tau) / 2.0)
                    - ln_gamma(dof / 2.0)
                    - 0.5 * tau * (dof * std::f64::consts::PI).ln()
                    - 0.5 * log_det
                    - 0.5 * (dof + tau) * (z.norm_squared() / dof).ln_1p()
            }
            Prepared::Mixture { draws, sd, tau } => {
                let terms: Vec<f64> = (draws.chunks_exact(*tau).zip(sd.chunks_exact(*tau)))
                    .map(|(f, s)| {
                        (y.iter().zip(f).zip(s))
                            .map(|((&yi, &fi), &si)| {
                                let z = (yi - fi) / si;
                                -0.5 * (z * z + LN_2PI) - si.ln()
                            })
                            .sum::<f64>()
                    })
                    .collect();
                log_mean_exp(&terms)
            }
            Prepared::Independent(marginals) => {
                (y.iter().zip(marginals)).map(|(&yi, m)| ln_marginal(yi, m)).sum()
            }
        }
    }
}

/// log of the mean of exp(terms), stably.
pub fn log_mean_exp(terms: &[f64]) -> f64 {
    let max = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return max;
    }
    let sum: f64 = terms.iter().map(|t| (t - max).exp()).sum();
    max + (sum / terms.len() as f64).ln()
}

/// log density of one normal or t marginal.
fn ln_marginal(y: f64, m: &Marginal) -> f64 {
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

/// KL(N(μ₀, S₀) ‖ N(μ₁, S₁)) = ½[tr(S₁⁻¹S₀) + (μ₁ − μ₀)ᵀS₁⁻¹(μ₁ − μ₀) − τ + log|S₁|/|S₀|].
pub fn kl_gaussian(p: &Joint, q: &Joint) -> Result<f64, MetricError> {
    let (Joint::Gaussian { mean: m0, factor: f0, rank: r0, noise_var: v0 },
         Joint::Gaussian { mean: m1, factor: f1, rank: r1, noise_var: v1 }) = (p, q) else {
        return Err(MetricError::invalid("joints", "not both Gaussian", "two Gaussian joints"));
    };
    let tau = m0.len();
    let s0 = dense(f0, *r0, v0);
    let c0 = cholesky(s0.clone(), "joint covariance")?;
    let c1 = cholesky(dense(f1, *r1, v1), "joint covariance")?;
    let trace = c1.solve(&s0).trace();
    let d = DVector::from_column_slice(m1) - DVector::from_column_slice(m0);
    let z = c1.l_dirty().solve_lower_triangular(&d).expect("a Cholesky factor");
    Ok(0.5 * (trace + z.norm_squared() - tau as f64 + log_det(&c1) - log_det(&c0)))
}

/// Draws y from P with standard normals `z` (`[S, τ]` for Gaussian and t joints; a t also
/// takes one χ²_ν draw per sample in `chi2`): y = μ + L·z (·√(ν/χ²) for a t).
fn draw(p: &Prepared, z: &[f64], chi2: f64) -> Vec<f64> {
    match p {
        Prepared::Gaussian { mean, chol, .. } => {
            (mean + chol.l_dirty().lower_triangle() * DVector::from_column_slice(z)).as_slice().to_vec()
        }
        Prepared::StudentT { mean, chol, dof, .. } => {
            let scale = (dof / chi2).sqrt();
            (mean + chol.l_dirty().lower_triangle() * DVector::from_column_slice(z) * scale)
                .as_slice()
                .to_vec()
        }
        _ => unreachable!("draws come from the reference's Gaussian or t joint"),
    }
}

/// KL(P ‖ Q) by Monte Carlo over y ∼ P, P Gaussian or t: `z` holds S·τ standard normals and
/// `chi2` S χ²_ν draws (for a t P; ignored otherwise). Closed form when both are Gaussian.
pub fn kl(p: &Joint, q: &Joint, z: &[f64], chi2: &[f64]) -> Result<Estimate, MetricError> {
    if let (Joint::Gaussian { .. }, Joint::Gaussian { .. }) = (p, q) {
        return Ok(Estimate {
            value: kl_gaussian(p, q)?,
            stderr: 0.0,
        });
    }
    if p == q {
        return Ok(Estimate {
            value: 0.0,
            stderr: 0.0,
        });
    }
    let tau = p.tau();
    if q.tau() != tau {
        return Err(MetricError::invalid("joints' τ", format!("{} and {}", tau, q.tau()), "equal"));
    }
    let (pp, qq) = (p.prepare()?, q.prepare()?);
    let samples = z.len() / tau.max(1);
    let values: Vec<f64> = (0..samples)
        .map(|s| {
            let y = draw(&pp, &z[s * tau..(s + 1) * tau], chi2.get(s).copied().unwrap_or(1.0));
            pp.ln_pdf(&y) - qq.ln_pdf(&y)
        })
        .collect();
    let mean = values.iter().sum::<f64>() / samples as f64;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (samples as f64 - 1.0).max(1.0);
    Ok(Estimate {
        value: mean,
        stderr: (var / samples as f64).sqrt(),
    })
}

/// The environment KL of a classification joint at τ inputs: KL(Π_i Bern(p_i) ‖ q) with q the
/// method's mixture (1/M)·Σ_m Π_i Bern(q_m,i) (`q`: `[M, τ]` probabilities), exactly by
/// enumerating the 2^τ label vectors.
pub fn kl_bernoulli_exact(p: &[f64], q: &[f64]) -> Result<f64, MetricError> {
    let tau = p.len();
    if tau > 20 {
        return Err(MetricError::invalid("τ", tau, "at most 20 for enumeration"));
    }
    let clip = |v: f64| v.clamp(1e-12, 1.0 - 1e-12);
    let mut total = 0.0;
    for labels in 0u32..(1 << tau) {
        let bit = |i: usize| labels >> i & 1 == 1;
        let ln_p: f64 = (0..tau)
            .map(|i| if bit(i) { clip(p[i]).ln() } else { (1.0 - clip(p[i])).ln() })
            .sum();
        let terms: Vec<f64> = q
            .chunks_exact(tau)
            .map(|qm| {
                (0..tau)
                    .map(|i| if bit(i) { clip(qm[i]).ln() } else { (1.0 - clip(qm[i])).ln() })
                    .sum()
            })
            .collect();
        total += ln_p.exp() * (ln_p - log_mean_exp(&terms));
    }
    Ok(total)
}

/// The same by Monte Carlo over label vectors drawn from P with uniforms `u` (`[S, τ]`).
pub fn kl_bernoulli_mc(p: &[f64], q: &[f64], u: &[f64]) -> Estimate {
    let tau = p.len();
    let clip = |v: f64| v.clamp(1e-12, 1.0 - 1e-12);
    let values: Vec<f64> = u
        .chunks_exact(tau)
        .map(|us| {
            let labels: Vec<bool> = us.iter().zip(p).map(|(&ui, &pi)| ui < pi).collect();
            let ln = |probs: &[f64]| -> f64 {
                (probs.iter().zip(&labels))
                    .map(|(&v, &l)| if l { clip(v).ln() } else { (1.0 - clip(v)).ln() })
                    .sum()
            };
            let terms: Vec<f64> = q.chunks_exact(tau).map(ln).collect();
            ln(p) - log_mean_exp(&terms)
        })
        .collect();
    let s = values.len() as f64;
    let mean = values.iter().sum::<f64>() / s;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (s - 1.0).max(1.0);
    Estimate {
        value: mean,
        stderr: (var / s).sqrt(),
    }
}
