//! The Laplace approximation's linear algebra on the host, in f64 (the trained network and its
//! Jacobians are [`crate::host_net`]): the generalised Gauss–Newton matrix (GGN) of the Gaussian likelihood, the posterior
//! precision GGN + δ·I, the linearised predictive variance and the log marginal likelihood
//! (laplace-torch's conventions, Daxberger et al. 2021).
//!
//! For a Gaussian likelihood with noise sd σ_i the GGN is Σ_i J_i J_iᵀ / σ_i², J_i = ∂f(x_i)/∂θ:
//! for a network linear in θ (the last layer; every parameter of a network without hidden
//! layers) it is the exact Hessian of the negative log likelihood.

use nalgebra::{DMatrix, DVector};

use crate::host_net::LayerFactors;

use uqbench_core::MethodError;

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

/// One layer's Kronecker-factored GGN (K-FAC; Ritter et al. 2018, laplace-torch's `kron`):
/// A ⊗ G with A = Σₙ āₙāₙᵀ/N over the layer's augmented inputs ā = [a; 1] and
/// G = Σₙ wₙ δₙδₙᵀ over its output gradients δ = ∂f/∂z, wₙ the point's likelihood curvature
/// (1/σₙ², or p(1 − p)); both eigendecomposed, so A ⊗ G + δI has the eigenvalues λᵃᵢλᵍⱼ + δ.
/// Exact where A ⊗ G is: a single linear layer with one output.
pub struct KronLayer {
    qa: DMatrix<f64>,
    la: Vec<f64>,
    qg: DMatrix<f64>,
    lg: Vec<f64>,
}

/// The Kronecker factors of every layer from the per-point factors (a, δ) of
/// `TrainedNet::factors` and the points' curvature weights.
pub fn kron(factors: &[Vec<LayerFactors>], weights: &[f64]) -> Vec<KronLayer> {
    let n = factors.len() as f64;
    let layers = factors[0].len();
    (0..layers)
        .map(|l| {
            let (ia, og) = (factors[0][l].0.len() + 1, factors[0][l].1.len());
            let mut a = DMatrix::<f64>::zeros(ia, ia);
            let mut g = DMatrix::<f64>::zeros(og, og);
            for (point, w) in factors.iter().zip(weights) {
                let (x, d) = &point[l];
                let xa = DVector::from_iterator(ia, x.iter().copied().chain([1.0]));
                let dv = DVector::from_column_slice(d);
                a += &xa * xa.transpose() / n;
                g += &dv * dv.transpose() * *w;
            }
            let ea = a.symmetric_eigen();
            let eg = g.symmetric_eigen();
            KronLayer {
                la: ea.eigenvalues.iter().map(|v| v.max(0.0)).collect(),
                qa: ea.eigenvectors,
                lg: eg.eigenvalues.iter().map(|v| v.max(0.0)).collect(),
                qg: eg.eigenvectors,
            }
        })
        .collect()
}

/// The eigenvalues of the Kronecker-factored GGN: every λᵃᵢλᵍⱼ of every layer.
pub fn kron_spectrum(layers: &[KronLayer]) -> Vec<f64> {
    layers
        .iter()
        .flat_map(|k| {
            k.la.iter()
                .flat_map(move |a| k.lg.iter().map(move |g| a * g))
        })
        .collect()
}

/// The linearised joint of f under (A ⊗ G + δI)⁻¹ per layer at every test input, from its
/// factors: a factor F (`[m, rank]`, row-major, rank = Σ over layers of its parameter count)
/// with Cov f = F Fᵀ. Each layer's posterior covariance is (Qᵃ ⊗ Qᵍ) diag(1/(λᵃᵢλᵍⱼ + δ))
/// (Qᵃ ⊗ Qᵍ)ᵀ and the layers are independent, so F's row for a point is, layer after layer,
/// (qᵃᵢ·ā)(qᵍⱼ·δ)/√(λᵃᵢλᵍⱼ + δ) over the eigenpairs (i, j); its squared norm is the point's
/// linearised variance.
pub fn kron_factor(
    layers: &[KronLayer],
    delta: f64,
    factors: &[Vec<LayerFactors>],
) -> Result<(Vec<f64>, usize), MethodError> {
    if delta <= 0.0 {
        let spectrum = kron_spectrum(layers);
        let top = spectrum.iter().fold(0.0, |m: f64, x| x.max(m));
        if spectrum.iter().any(|v| *v <= 1e-12 * top) {
            return Err(singular(
                "the Kronecker-factored posterior precision",
                spectrum.len(),
            ));
        }
    }
    let rank: usize = layers.iter().map(|k| k.la.len() * k.lg.len()).sum();
    let mut out = Vec::with_capacity(factors.len() * rank);
    for point in factors {
        for (k, (x, d)) in layers.iter().zip(point) {
            let xa = DVector::from_iterator(k.la.len(), x.iter().copied().chain([1.0]));
            let pa = k.qa.transpose() * xa;
            let pg = k.qg.transpose() * DVector::from_column_slice(d);
            for (i, la) in k.la.iter().enumerate() {
                for (j, lg) in k.lg.iter().enumerate() {
                    out.push(pa[i] * pg[j] / (la * lg + delta).sqrt());
                }
            }
        }
    }
    Ok((out, rank))
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
        // In f64 a precision whose smallest pivot is below 1e-12 of its largest diagonal entry
        // is singular for our purposes. With the flat prior that means a direction the data do
        // not determine (an error); with a prior, δ is floored at 1e-12 of that scale, far below
        // any δ the evidence supports where the data inform the parameters.
        let scale = (0..p)
            .map(|i| ggn[(i, i)])
            .fold(0.0, f64::max)
            .max(f64::MIN_POSITIVE);
        let delta = if delta > 0.0 {
            delta.max(1e-12 * scale)
        } else {
            0.0
        };
        let mut h = ggn.clone();
        for i in 0..p {
            h[(i, i)] += delta;
        }
        let chol = h
            .cholesky()
            .ok_or_else(|| singular("the posterior precision", p))?;
        let l = chol.l();
        let min_pivot = (0..p)
            .map(|i| l[(i, i)] * l[(i, i)])
            .fold(f64::INFINITY, f64::min);
        if delta == 0.0 && min_pivot < 1e-12 * scale {
            return Err(singular("the posterior precision", p));
        }
        Ok(Posterior::Full(l))
    }

    /// The linearised joint of f at the rows of `jac`: a factor F (`[m, p]`, row-major) with
    /// Cov f = J Σ Jᵀ = F Fᵀ, F's row i = (L⁻¹ J_i)ᵀ (Σ = (L Lᵀ)⁻¹), or J_i / √h for the
    /// diagonal precision h; its rows' squared norms are the linearised variances Jᵀ Σ J.
    pub fn factor(&self, jac: &[Vec<f64>]) -> (Vec<f64>, usize) {
        match self {
            Posterior::Diag(d) => {
                let f = jac
                    .iter()
                    .flat_map(|j| j.iter().zip(d).map(|(v, h)| v / h.sqrt()))
                    .collect();
                (f, d.len())
            }
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
                // v = L⁻¹ Jᵀ is p × m, column-major: its storage, column after column, is F
                // row-major.
                (v.iter().copied().collect(), p)
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
        // Eigenvalues only (no vectors): the evidence needs no more, and the refine-then-fit
        // rounds call this once each.
        ggn.symmetric_eigenvalues()
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

    #[test]
    fn kron_is_exact_for_one_linear_layer() {
        // One linear layer with one output: the GGN Σ wₙ āₙāₙᵀ equals A ⊗ G with
        // A = Σ āāᵀ/N and G = Σ wₙ only when the weights are equal; here w = 4 (σ = 0.5).
        let factors: Vec<Vec<LayerFactors>> = [[0.3, -1.0], [1.2, 0.4], [-0.7, 0.9]]
            .iter()
            .map(|x| vec![(x.to_vec(), vec![1.0])])
            .collect();
        let w = [4.0; 3];
        let layers = kron(&factors, &w);
        let jac: Vec<Vec<f64>> = factors
            .iter()
            .map(|p| [p[0].0.clone(), vec![1.0]].concat())
            .collect();
        let full = ggn(&jac, &[0.5; 3]);
        // The joint at two test points: K-FAC's factor and the dense posterior's give the
        // same covariance F Fᵀ, entry by entry (variances and the covariance between them).
        let test = vec![
            vec![(vec![0.5, 0.5], vec![1.0])],
            vec![(vec![-1.5, 0.2], vec![1.0])],
        ];
        let (kf, kr) = kron_factor(&layers, 0.1, &test).unwrap();
        let (f, rank) = Posterior::new(&full, 0.1, false)
            .unwrap()
            .factor(&[vec![0.5, 0.5, 1.0], vec![-1.5, 0.2, 1.0]]);
        let cov = |f: &[f64], r: usize, i: usize, j: usize| -> f64 {
            f[i * r..(i + 1) * r]
                .iter()
                .zip(&f[j * r..(j + 1) * r])
                .map(|(a, b)| a * b)
                .sum()
        };
        for (i, j) in [(0, 0), (1, 1), (0, 1)] {
            let (k, d) = (cov(&kf, kr, i, j), cov(&f, rank, i, j));
            assert!(
                (k - d).abs() < 1e-10 * d.abs().max(1e-3),
                "({i}, {j}): {k} vs {d}"
            );
        }
        let mut a = kron_spectrum(&layers);
        let mut b = spectrum(&full, false);
        a.sort_by(f64::total_cmp);
        b.sort_by(f64::total_cmp);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-9 * b[2], "{a:?} vs {b:?}");
        }
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
