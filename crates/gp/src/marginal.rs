//! The log marginal likelihood of the GP and its analytic gradient (see the crate docs), as
//! an argmin problem: the inputs, the covariance between two sets of points, the Cholesky fit
//! with its jitter, and the objective over the free hyper-parameters.

use argmin::core::{CostFunction, Gradient};
use nalgebra::{Cholesky, DMatrix, DVector, Dyn};
use serde::{Deserialize, Serialize};

/// The covariance function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kernel {
    /// ρ(r) = e^{−r} (Matérn ½), [002]'s choice.
    #[default]
    Exponential,
    /// ρ(r) = (1 + √3 r) e^{−√3 r}.
    Matern32,
    /// ρ(r) = (1 + √5 r + 5r²/3) e^{−√5 r}.
    Matern52,
    /// ρ(r) = e^{−r²/2}.
    SquaredExponential,
    /// s²·G(x)ᵀG(x′) with the problem's features G.
    Features,
}

impl Kernel {
    /// ρ(r) and −ρ′(r) for r ≥ 0 (stationary kernels).
    fn rho(self, r: f64) -> (f64, f64) {
        let (s3, s5) = (3f64.sqrt(), 5f64.sqrt());
        match self {
            Kernel::Exponential => {
                let e = (-r).exp();
                (e, e)
            }
            Kernel::Matern32 => {
                let e = (-s3 * r).exp();
                ((1.0 + s3 * r) * e, 3.0 * r * e)
            }
            Kernel::Matern52 => {
                let e = (-s5 * r).exp();
                (
                    (1.0 + s5 * r + 5.0 * r * r / 3.0) * e,
                    5.0 / 3.0 * r * (1.0 + s5 * r) * e,
                )
            }
            Kernel::SquaredExponential => {
                let e = (-0.5 * r * r).exp();
                (e, r * e)
            }
            Kernel::Features => unreachable!("the features kernel is not stationary"),
        }
    }
}

/// Index of each hyper-parameter in θ.
pub(crate) const S: usize = 0;
pub(crate) const L: usize = 1;
pub(crate) const N: usize = 2;
pub(crate) const C: usize = 3;
pub(crate) const NAMES: [&str; 4] = ["signal_sd", "length_scale", "noise_sd", "constant_sd"];
/// Sd of the log-normal hyper-priors, in log space.
pub(crate) const PRIOR_SD: f64 = 3.0;

/// Which hyper-parameters are free, their fixed values, and the centres of their priors.
pub(crate) struct Plan {
    pub(crate) free: [bool; 4],
    pub(crate) theta: [f64; 4],
    pub(crate) centre: [f64; 4],
}

/// Everything about the inputs a fit needs: the training inputs and, for the features
/// kernel, their features.
pub(crate) struct Inputs<'a> {
    pub(crate) d: usize,
    pub(crate) x: &'a [f64],
    pub(crate) features: Option<Vec<f64>>,
    pub(crate) p: usize,
}

impl Inputs<'_> {
    fn n(&self) -> usize {
        self.x.len() / self.d
    }
}

/// ∂K/∂log s and ∂K/∂log ℓ (without the constant and noise terms, handled in closed form).
type KernelGrads = (DMatrix<f64>, DMatrix<f64>);

/// Cross-covariance k(a_i, b_j) without noise, and (for the length-scale gradient) the
/// matrix s²·r·(−ρ′(r)).
pub(crate) fn cross(
    kernel: Kernel,
    theta: &[f64; 4],
    a: (&[f64], Option<&[f64]>),
    b: (&[f64], Option<&[f64]>),
    d: usize,
    p: usize,
    with_grad: bool,
) -> (DMatrix<f64>, Option<KernelGrads>) {
    let (s2, l, c2) = (
        (2.0 * theta[S]).exp(),
        theta[L].exp(),
        (2.0 * theta[C]).exp(),
    );
    let (na, nb) = match kernel {
        Kernel::Features => (
            a.1.expect("features").len() / p,
            b.1.expect("features").len() / p,
        ),
        _ => (a.0.len() / d, b.0.len() / d),
    };
    let mut k = DMatrix::zeros(na, nb);
    let mut grads = with_grad.then(|| (DMatrix::zeros(na, nb), DMatrix::zeros(na, nb)));
    // The covariance of a set with itself is symmetric, entry for entry ((u − v)² = (v − u)²
    // exactly): its lower triangle is computed and mirrored, half the exponentials.
    let same = std::ptr::eq(a.0, b.0) && a.1.map(<[f64]>::as_ptr) == b.1.map(<[f64]>::as_ptr);
    for i in 0..na {
        for j in 0..if same { i + 1 } else { nb } {
            // k(a_i, b_j), ∂/∂log s and ∂/∂log ℓ.
            let (kv, gsv, glv) = if kernel == Kernel::Features {
                let (ga, gb) = (
                    &a.1.unwrap()[i * p..(i + 1) * p],
                    &b.1.unwrap()[j * p..(j + 1) * p],
                );
                let dot: f64 = ga.iter().zip(gb).map(|(u, v)| u * v).sum();
                (s2 * dot, 2.0 * s2 * dot, 0.0)
            } else {
                let xa = &a.0[i * d..(i + 1) * d];
                let xb = &b.0[j * d..(j + 1) * d];
                let r = xa
                    .iter()
                    .zip(xb)
                    .map(|(u, v)| (u - v) * (u - v))
                    .sum::<f64>()
                    .sqrt()
                    / l;
                let (rho, minus_drho) = kernel.rho(r);
                (c2 + s2 * rho, 2.0 * s2 * rho, s2 * r * minus_drho)
            };
            let at = if same && j < i {
                &[(i, j), (j, i)][..]
            } else {
                &[(i, j)][..]
            };
            for &ij in at {
                k[ij] = kv;
                if let Some((gs, gl)) = grads.as_mut() {
                    gs[ij] = gsv;
                    gl[ij] = glv;
                }
            }
        }
    }
    (k, grads)
}

/// The result of one evaluation of the (negative log) marginal likelihood.
pub(crate) struct Eval {
    /// −log p(y | θ) (without the hyper-prior).
    pub(crate) nlml: f64,
    /// Its gradient in θ.
    pub(crate) grad: [f64; 4],
    pub(crate) chol: Cholesky<f64, Dyn>,
    pub(crate) alpha: DVector<f64>,
}

pub(crate) fn evaluate(
    kernel: Kernel,
    theta: &[f64; 4],
    inputs: &Inputs<'_>,
    y: &DVector<f64>,
    with_grad: bool,
) -> Option<Eval> {
    let n = inputs.n();
    let f = inputs.features.as_deref();
    let (mut k, grads) = cross(
        kernel,
        theta,
        (inputs.x, f),
        (inputs.x, f),
        inputs.d,
        inputs.p,
        with_grad,
    );
    let noise2 = (2.0 * theta[N]).exp();
    for i in 0..n {
        k[(i, i)] += noise2;
    }
    let chol = match Cholesky::new(k.clone()) {
        Some(c) => c,
        None => {
            let scale = k.diagonal().mean().abs().max(f64::MIN_POSITIVE);
            (0..7).find_map(|e| {
                let mut kj = k.clone();
                let jitter = scale * 10f64.powi(-10 + e);
                for i in 0..n {
                    kj[(i, i)] += jitter;
                }
                Cholesky::new(kj)
            })?
        }
    };
    let alpha = chol.solve(y);
    let log_det_half: f64 = chol.l_dirty().diagonal().iter().map(|v| v.ln()).sum();
    let nlml =
        0.5 * y.dot(&alpha) + log_det_half + 0.5 * n as f64 * (2.0 * std::f64::consts::PI).ln();
    let mut grad = [0.0; 4];
    if let Some((gs, gl)) = grads {
        // ½ tr((ααᵀ − K⁻¹) ∂K) = ½ (αᵀ ∂K α − tr(K⁻¹ ∂K)); K⁻¹ = L⁻ᵀL⁻¹.
        let k_inv = inverse_from_cholesky(chol.l_dirty());
        let term = |dk: &DMatrix<f64>| -> f64 {
            let quad = alpha.dot(&(dk * &alpha));
            let trace: f64 = k_inv.component_mul(dk).sum();
            -0.5 * (quad - trace)
        };
        grad[S] = term(&gs);
        if kernel != Kernel::Features {
            grad[L] = term(&gl);
            let c2 = (2.0 * theta[C]).exp();
            // ∂K/∂log c = 2c²·11ᵀ: αᵀ∂Kα = 2c²(Σα)², tr(K⁻¹∂K) = 2c²·Σ_ij K⁻¹_ij.
            grad[C] = -0.5 * (2.0 * c2 * alpha.sum().powi(2) - 2.0 * c2 * k_inv.sum());
        }
        // ∂K/∂log σ_n = 2σ_n² I.
        grad[N] = -0.5 * (2.0 * noise2 * alpha.norm_squared() - 2.0 * noise2 * k_inv.trace());
    }
    Some(Eval {
        nlml,
        grad,
        chol,
        alpha,
    })
}

/// K⁻¹ = L⁻ᵀL⁻¹ from the Cholesky factor L of K (only its lower triangle is read): L⁻¹ by
/// forward substitution on the identity's columns, skipping their leading zeros (n³/6
/// multiply-adds, against 2n³ for two full triangular solves with n right-hand sides), then one
/// matrix product. Profiled on quartic_gap's GP, the two solves took 58% of its fit.
///
/// The substitution runs column-oriented: once c_i is known, L_ki·c_i is added to the running
/// sum of every later k (an axpy down L's contiguous column i, which vectorises), rather than
/// row-oriented (a dot product along row k, whose sequential sum waited on each addition's
/// latency: a quarter of the GP's time). Each sum still adds its terms in the order i = j, j+1,
/// …, so L⁻¹ is the same either way.
fn inverse_from_cholesky(l: &DMatrix<f64>) -> DMatrix<f64> {
    let n = l.nrows();
    // Column-major: column i of L is the contiguous slice l[i·n .. (i + 1)·n].
    let l = l.as_slice();
    let mut inv = DMatrix::<f64>::zeros(n, n);
    let mut sums = vec![0.0; n];
    for j in 0..n {
        // Column j of L⁻¹ into `inv`: zero above j; c_j = 1/L_jj, c_i = −(Σ_{j≤m<i} L_im·c_m)/L_ii.
        let col = &mut inv.as_mut_slice()[j * n..(j + 1) * n];
        sums[j..].fill(0.0);
        for i in j..n {
            let c = if i == j {
                1.0 / l[j * n + j]
            } else {
                -sums[i] / l[i * n + i]
            };
            col[i] = c;
            for (s, &lk) in sums[i + 1..].iter_mut().zip(&l[i * n + i + 1..(i + 1) * n]) {
                *s += lk * c;
            }
        }
    }
    // K⁻¹ = L⁻ᵀL⁻¹, through the general product (nalgebra's blocked gemm).
    inv.transpose() * &inv
}

/// The objective argmin minimises: −log p(y | θ) − log p(θ) over the free components of θ.
pub(crate) struct Objective<'a> {
    pub(crate) kernel: Kernel,
    pub(crate) inputs: &'a Inputs<'a>,
    pub(crate) y: &'a DVector<f64>,
    pub(crate) plan: &'a Plan,
    pub(crate) free: &'a [usize],
}

impl Objective<'_> {
    fn theta(&self, x: &[f64]) -> [f64; 4] {
        let mut theta = self.plan.theta;
        for (v, &j) in x.iter().zip(self.free) {
            theta[j] = *v;
        }
        theta
    }

    fn value_and_gradient(
        &self,
        x: &[f64],
        with_grad: bool,
    ) -> Result<(f64, Vec<f64>), argmin::core::Error> {
        let theta = self.theta(x);
        let e = evaluate(self.kernel, &theta, self.inputs, self.y, with_grad).ok_or_else(|| {
            argmin::core::Error::msg("the covariance matrix is singular at these hyper-parameters")
        })?;
        let mut f = e.nlml;
        let mut g = vec![0.0; self.free.len()];
        for (i, &j) in self.free.iter().enumerate() {
            let z = (x[i] - self.plan.centre[j]) / PRIOR_SD;
            f += 0.5 * z * z;
            g[i] = e.grad[j] + z / PRIOR_SD;
        }
        Ok((f, g))
    }
}

impl CostFunction for Objective<'_> {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, x: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        Ok(self.value_and_gradient(x, false)?.0)
    }
}

impl Gradient for Objective<'_> {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;

    fn gradient(&self, x: &Vec<f64>) -> Result<Vec<f64>, argmin::core::Error> {
        Ok(self.value_and_gradient(x, true)?.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inverse_from_the_cholesky_factor_is_the_inverse() {
        // A random SPD matrix: K·K⁻¹ = I to 1e-10.
        let mut rng = uqbench_core::Rng::new(4);
        let a = DMatrix::from_fn(30, 30, |_, _| rng.normal());
        let k = &a * a.transpose() + DMatrix::identity(30, 30);
        let inv = inverse_from_cholesky(&Cholesky::new(k.clone()).unwrap().l());
        assert!((&k * inv - DMatrix::<f64>::identity(30, 30)).amax() < 1e-10);
    }
    use uqbench_core::Rng;

    #[test]
    fn the_marginal_likelihood_gradient_matches_finite_differences() {
        // 2-D inputs, every stationary kernel, θ away from any optimum. Central differences
        // with step h have error O(h²·f‴) ≈ 1e-8 here; the check allows 1e-5 relative.
        let mut rng = Rng::new(3);
        let x: Vec<f64> = (0..60).map(|_| rng.uniform_in(-2.0, 2.0)).collect();
        let y = DVector::from_iterator(
            30,
            x.chunks(2)
                .map(|p| (2.0 * p[0]).sin() + p[1] + 0.3 * rng.normal()),
        );
        let inputs = Inputs {
            d: 2,
            x: &x,
            features: None,
            p: 0,
        };
        let theta = [0.3, -0.2, -1.1, 0.4];
        for kernel in [
            Kernel::Exponential,
            Kernel::Matern32,
            Kernel::Matern52,
            Kernel::SquaredExponential,
        ] {
            let e = evaluate(kernel, &theta, &inputs, &y, true).unwrap();
            for j in 0..4 {
                let h = 1e-5;
                let (mut up, mut down) = (theta, theta);
                up[j] += h;
                down[j] -= h;
                let fd = (evaluate(kernel, &up, &inputs, &y, false).unwrap().nlml
                    - evaluate(kernel, &down, &inputs, &y, false).unwrap().nlml)
                    / (2.0 * h);
                assert!(
                    (e.grad[j] - fd).abs() <= 1e-5 * (1.0 + fd.abs()),
                    "{kernel:?} θ[{j}]: analytic {} vs {fd}",
                    e.grad[j]
                );
            }
        }
    }
}
