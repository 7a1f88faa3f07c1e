//! The Laplace approximation's linear algebra on the host, in f64: the trained network
//! ([`HostNet`], from the engine's weights), its Jacobians with respect to a parameter subset,
//! the generalised Gauss–Newton matrix (GGN) of the Gaussian likelihood, the posterior
//! precision GGN + δ·I, the linearised predictive variance and the log marginal likelihood
//! (laplace-torch's conventions, Daxberger et al. 2021).
//!
//! For a Gaussian likelihood with noise sd σ_i the GGN is Σ_i J_i J_iᵀ / σ_i², J_i = ∂f(x_i)/∂θ:
//! for a network linear in θ (the last layer; every parameter of a network without hidden
//! layers) it is the exact Hessian of the negative log likelihood.

use nalgebra::{DMatrix, DVector};

use uqbench_core::MethodError;

/// A trained network on the host: per layer W `[in, out]` (row-major) and b `[out]`.
pub struct HostNet {
    pub dims: Vec<usize>,
    pub w: Vec<Vec<f64>>,
    pub b: Vec<Vec<f64>>,
    pub slope: f64,
}

/// Which parameters the approximation covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subset {
    /// The last layer's weights and bias.
    LastLayer,
    /// Every weight and bias.
    All,
}

impl HostNet {
    /// The engine's flat parameters of one replica (layer by layer W then b) for a network of
    /// widths `dims` (input, hidden…, 1).
    pub fn from_flat(flat: &[f32], dims: &[usize], slope: f64) -> HostNet {
        let (mut w, mut b, mut at) = (Vec::new(), Vec::new(), 0);
        for l in 0..dims.len() - 1 {
            let (i, o) = (dims[l], dims[l + 1]);
            w.push(flat[at..at + i * o].iter().map(|&v| f64::from(v)).collect());
            at += i * o;
            b.push(flat[at..at + o].iter().map(|&v| f64::from(v)).collect());
            at += o;
        }
        HostNet {
            dims: dims.to_vec(),
            w,
            b,
            slope,
        }
    }

    /// Parameters in the subset.
    pub fn count(&self, subset: Subset) -> usize {
        let layers = self.dims.len() - 1;
        let from = if subset == Subset::LastLayer {
            layers - 1
        } else {
            0
        };
        (from..layers)
            .map(|l| self.dims[l] * self.dims[l + 1] + self.dims[l + 1])
            .sum()
    }

    /// The subset's parameters as one vector, in [`HostNet::jacobian`]'s order.
    pub fn params(&self, subset: Subset) -> Vec<f64> {
        let layers = self.dims.len() - 1;
        let from = if subset == Subset::LastLayer {
            layers - 1
        } else {
            0
        };
        (from..layers)
            .flat_map(|l| self.w[l].iter().chain(&self.b[l]).copied())
            .collect()
    }

    /// The output f(x) and its gradient with respect to the subset's parameters (layer by
    /// layer W row-major then b) at input `x`.
    pub fn jacobian(&self, x: &[f64], subset: Subset) -> (f64, Vec<f64>) {
        let layers = self.dims.len() - 1;
        // Forward: the activations entering each layer and the pre-activations of hidden ones.
        let mut acts: Vec<Vec<f64>> = vec![x.to_vec()];
        let mut pre: Vec<Vec<f64>> = Vec::new();
        for l in 0..layers {
            let (i, o) = (self.dims[l], self.dims[l + 1]);
            let h = &acts[l];
            let mut z = self.b[l].clone();
            for (a, row) in h.iter().zip(self.w[l].chunks(o)) {
                for (zj, wj) in z.iter_mut().zip(row) {
                    *zj += a * wj;
                }
            }
            debug_assert_eq!(h.len(), i);
            if l + 1 < layers {
                let act = z
                    .iter()
                    .map(|&v| if v > 0.0 { v } else { self.slope * v })
                    .collect();
                pre.push(z);
                acts.push(act);
            } else {
                pre.push(z);
            }
        }
        let f = pre[layers - 1][0];
        // Backward: δ_l = ∂f/∂z_l; ∂f/∂W_l = h_{l−1} ⊗ δ_l, ∂f/∂b_l = δ_l.
        let from = if subset == Subset::LastLayer {
            layers - 1
        } else {
            0
        };
        let mut blocks: Vec<Vec<f64>> = Vec::with_capacity(layers - from);
        let mut delta = vec![1.0];
        for l in (from..layers).rev() {
            let o = self.dims[l + 1];
            let mut g = Vec::with_capacity(acts[l].len() * o + o);
            for a in &acts[l] {
                g.extend(delta.iter().map(|d| a * d));
            }
            g.extend_from_slice(&delta);
            blocks.push(g);
            if l > from {
                // δ_{l−1} = (W_l δ_l) ⊙ leaky'(z_{l−1}).
                let i = self.dims[l];
                delta = (0..i)
                    .map(|r| {
                        let s: f64 = self.w[l][r * o..(r + 1) * o]
                            .iter()
                            .zip(&delta)
                            .map(|(w, d)| w * d)
                            .sum();
                        if pre[l - 1][r] > 0.0 {
                            s
                        } else {
                            self.slope * s
                        }
                    })
                    .collect();
            }
        }
        blocks.reverse();
        (f, blocks.concat())
    }

    /// The last hidden layer's output (the input for a network without hidden layers).
    pub fn last_hidden(&self, x: &[f64]) -> Vec<f64> {
        let layers = self.dims.len() - 1;
        let mut h = x.to_vec();
        for l in 0..layers - 1 {
            let o = self.dims[l + 1];
            let mut z = self.b[l].clone();
            for (a, row) in h.iter().zip(self.w[l].chunks(o)) {
                for (zj, wj) in z.iter_mut().zip(row) {
                    *zj += a * wj;
                }
            }
            h = z
                .into_iter()
                .map(|v| if v > 0.0 { v } else { self.slope * v })
                .collect();
        }
        h
    }

    /// Replaces the last layer by the exact minimiser of Σ (y_i − f(x_i))²/(2σ_i²) + δ/2·‖θ_L‖²
    /// given the hidden layers (a weighted ridge solve): the MAP found precisely where the
    /// optimiser in f32 leaves it approximate.
    pub fn solve_last_layer(
        &mut self,
        x: &[Vec<f64>],
        y: &[f64],
        sigma: &[f64],
        delta: f64,
    ) -> Result<(), MethodError> {
        let k = *self
            .dims
            .last()
            .map(|_| &self.dims[self.dims.len() - 2])
            .unwrap();
        let n = x.len();
        let mut a = DMatrix::<f64>::zeros(n, k + 1);
        let mut rhs = DVector::<f64>::zeros(n);
        for (i, xi) in x.iter().enumerate() {
            let h = self.last_hidden(xi);
            for (j, v) in h.iter().enumerate() {
                a[(i, j)] = v / sigma[i];
            }
            a[(i, k)] = 1.0 / sigma[i];
            rhs[i] = y[i] / sigma[i];
        }
        let mut normal = a.transpose() * &a;
        for j in 0..=k {
            normal[(j, j)] += delta;
        }
        let beta = normal
            .cholesky()
            .ok_or_else(|| singular("the last layer's normal equations", k + 1))?
            .solve(&(a.transpose() * rhs));
        let last = self.w.len() - 1;
        self.w[last] = beta.iter().take(k).copied().collect();
        self.b[last] = vec![beta[k]];
        Ok(())
    }
}

fn singular(what: &str, p: usize) -> MethodError {
    MethodError::Failed(format!(
        "Laplace: {what} ({p} parameters) are singular: the training data do not determine \
         every parameter under a flat prior (prior_precision = 0); use a positive \
         prior_precision or \"marglik\""
    ))
}

/// The GGN Σ_i J_i J_iᵀ/σ_i² of the subset over the training inputs (`jac`: one row per
/// point).
pub fn ggn(jac: &[Vec<f64>], sigma: &[f64]) -> DMatrix<f64> {
    let (n, p) = (jac.len(), jac[0].len());
    let mut j = DMatrix::<f64>::zeros(n, p);
    for (i, row) in jac.iter().enumerate() {
        for (c, v) in row.iter().enumerate() {
            j[(i, c)] = v / sigma[i];
        }
    }
    j.transpose() * j
}

/// The posterior of the subset's parameters, N(θ*, (GGN + δI)⁻¹), full or diagonal.
pub enum Posterior {
    /// The Cholesky factor L of the precision.
    Full(DMatrix<f64>),
    /// The diagonal of the precision.
    Diag(Vec<f64>),
}

impl Posterior {
    /// From the GGN and the prior precision δ.
    pub fn new(ggn: &DMatrix<f64>, delta: f64, diag: bool) -> Result<Posterior, MethodError> {
        let p = ggn.nrows();
        if diag {
            let d: Vec<f64> = (0..p).map(|i| ggn[(i, i)] + delta).collect();
            if d.iter().any(|v| v.is_nan() || *v <= 0.0) {
                return Err(singular("the diagonal posterior precision", p));
            }
            return Ok(Posterior::Diag(d));
        }
        let mut h = ggn.clone();
        for i in 0..p {
            h[(i, i)] += delta;
        }
        // A precision whose smallest eigenvalue is below 1e-10 of its largest is singular for
        // our purposes: its inverse would be noise.
        let scale = (0..p).map(|i| h[(i, i)]).fold(0.0, f64::max);
        let chol = h
            .cholesky()
            .ok_or_else(|| singular("the posterior precision", p))?;
        let l = chol.l();
        let min_pivot = (0..p)
            .map(|i| l[(i, i)] * l[(i, i)])
            .fold(f64::INFINITY, f64::min);
        if min_pivot < 1e-12 * scale {
            return Err(singular("the posterior precision", p));
        }
        Ok(Posterior::Full(l))
    }

    /// The linearised predictive variance Jᵀ Σ J at every row of `jac`.
    pub fn variances(&self, jac: &[Vec<f64>]) -> Vec<f64> {
        match self {
            Posterior::Diag(d) => jac
                .iter()
                .map(|j| j.iter().zip(d).map(|(v, h)| v * v / h).sum())
                .collect(),
            Posterior::Full(l) => {
                let (m, p) = (jac.len(), l.nrows());
                let mut rhs = DMatrix::<f64>::zeros(p, m);
                for (i, row) in jac.iter().enumerate() {
                    for (c, v) in row.iter().enumerate() {
                        rhs[(c, i)] = *v;
                    }
                }
                let v = l
                    .solve_lower_triangular(&rhs)
                    .expect("a Cholesky factor has a nonzero diagonal");
                (0..m).map(|i| v.column(i).norm_squared()).collect()
            }
        }
    }
}

/// The eigenvalues of the GGN (its diagonal for the diagonal approximation): what the log
/// marginal likelihood needs at every δ.
pub fn spectrum(ggn: &DMatrix<f64>, diag: bool) -> Vec<f64> {
    if diag {
        (0..ggn.nrows()).map(|i| ggn[(i, i)]).collect()
    } else {
        ggn.clone()
            .symmetric_eigen()
            .eigenvalues
            .iter()
            .map(|v| v.max(0.0))
            .collect()
    }
}

/// laplace-torch's log marginal likelihood at prior precision δ:
/// log p(D | θ*) − ½·(log det(GGN + δI) − P·log δ + δ·‖θ*‖²).
pub fn log_marginal_likelihood(log_lik: f64, spectrum: &[f64], theta_sq: f64, delta: f64) -> f64 {
    let p = spectrum.len() as f64;
    let log_det_post: f64 = spectrum.iter().map(|e| (e + delta).ln()).sum();
    log_lik - 0.5 * (log_det_post - p * delta.ln() + delta * theta_sq)
}

/// The δ that maximises the log marginal likelihood, by golden-section search in log δ over
/// [1e-8, 1e8] after a grid of 33 points brackets the maximum (the function is smooth and, in
/// log δ, unimodal in practice; the grid guards against a poor start).
pub fn fit_prior_precision(log_lik: f64, spectrum: &[f64], theta_sq: f64) -> f64 {
    let f = |t: f64| log_marginal_likelihood(log_lik, spectrum, theta_sq, t.exp());
    let (lo, hi) = ((1e-8f64).ln(), (1e8f64).ln());
    let grid: Vec<f64> = (0..33).map(|i| lo + (hi - lo) * i as f64 / 32.0).collect();
    let best = (0..grid.len())
        .max_by(|&a, &b| f(grid[a]).total_cmp(&f(grid[b])))
        .expect("a non-empty grid");
    let (mut a, mut b) = (
        grid[best.saturating_sub(1)],
        grid[(best + 1).min(grid.len() - 1)],
    );
    let g = (5f64.sqrt() - 1.0) / 2.0;
    for _ in 0..80 {
        let (c, d) = (b - g * (b - a), a + g * (b - a));
        if f(c) > f(d) {
            b = d;
        } else {
            a = c;
        }
    }
    ((a + b) / 2.0).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net() -> HostNet {
        // 2-3-1 with slope 0.1.
        HostNet {
            dims: vec![2, 3, 1],
            w: vec![vec![0.5, -1.0, 0.3, 0.2, 0.7, -0.4], vec![1.5, -0.5, 0.8]],
            b: vec![vec![0.1, 0.2, -0.3], vec![0.05]],
            slope: 0.1,
        }
    }

    #[test]
    fn jacobian_matches_finite_differences() {
        let x = [0.3, -0.8];
        let base = net();
        let (f0, j) = base.jacobian(&x, Subset::All);
        assert_eq!(j.len(), base.count(Subset::All));
        let h = 1e-6;
        let mut k = 0;
        for l in 0..2 {
            for which in 0..2 {
                let len = if which == 0 {
                    base.w[l].len()
                } else {
                    base.b[l].len()
                };
                for e in 0..len {
                    let mut p = net();
                    let slot = if which == 0 {
                        &mut p.w[l][e]
                    } else {
                        &mut p.b[l][e]
                    };
                    *slot += h;
                    let (f1, _) = p.jacobian(&x, Subset::All);
                    assert!(((f1 - f0) / h - j[k]).abs() < 1e-5, "param {k}");
                    k += 1;
                }
            }
        }
        let (_, last) = base.jacobian(&x, Subset::LastLayer);
        assert_eq!(last, j[j.len() - 4..].to_vec());
    }

    #[test]
    fn prior_precision_maximises_the_evidence_of_a_conjugate_model() {
        // One parameter, GGN eigenvalue e, θ*² = t: the evidence's optimum in δ solves
        // d/dδ [−log(e + δ) + log δ − δ t] = 0, i.e. 1/δ − 1/(e + δ) = t.
        let (e, t) = (50.0, 0.04);
        let d = fit_prior_precision(0.0, &[e], t);
        assert!((1.0 / d - 1.0 / (e + d) - t).abs() < 1e-8, "{d}");
    }
}
