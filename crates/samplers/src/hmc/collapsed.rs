//! HMC with the output layer integrated out (`marginalise_output = true`): for a network of
//! one hidden layer and a Gaussian likelihood, f(x) = Σ_j a_j h_j(x) + c is linear in the
//! output layer (a, c), whose prior N(0, σ_p² I) is conjugate. Given the hidden layer
//! θ_h = (W₀, b₀) and σ², the features Φ = [h(x_n)ᵀ, 1] (N × P, P = W + 1) make the model a
//! Bayesian linear regression, and
//!
//! - the output layer's conditional is exact: (a, c) | θ_h, σ², y ~ N(m, A⁻¹) with
//!   A = ΦᵀΦ/σ² + I/σ_p², m = A⁻¹Φᵀy/σ²;
//! - θ_h's marginal likelihood is closed-form: −log p(y | θ_h, σ²) = ½(yᵀy − yᵀΦm)/σ² +
//!   ½ log det A + terms free of θ_h (the weight-space form of N(y | 0, σ²I + σ_p²ΦΦᵀ)).
//!
//! The θ move (HMC or NUTS) then runs on θ_h alone with the potential
//! U(θ_h) = ½(yᵀy − yᵀΦm)/σ² + Σ_p log L_pp + ‖θ_h‖²/(2σ_p²) (L the Cholesky factor of A), and
//! the iteration continues with an exact draw of (a, c) and σ²'s Gibbs step given the whole
//! network. The composition leaves p(θ, σ² | y) invariant: the θ_h move leaves p(θ_h | σ², y)
//! invariant and (a, c) is drawn from its exact conditional, so the pair leaves
//! p(θ_h, a, c | σ², y) invariant; σ² | θ is the usual conjugate step. The target is the same
//! posterior as the plain sampler's; what changes is its geometry: the output layer, whose
//! directions are the worst conditioned (many near-collinear features, each free along the
//! others' null space, and the ridges of the rescaling symmetry h_j·a_j), is no longer moved
//! by the leapfrog (docs/quartic-002.md measures the effect).
//!
//! Gradient (derivation): with C = σ²I + σ_p²ΦΦᵀ, ∂ log N(y | 0, C)/∂Φ =
//! C⁻¹yyᵀC⁻¹Φσ_p² − C⁻¹Φσ_p². By the push-through identity C⁻¹Φσ_p² = ΦA⁻¹/σ², and
//! C⁻¹y = (y − Φm)/σ² =: α, σ_p²ΦᵀC⁻¹y = m, so ∂U/∂Φ = ΦA⁻¹/σ² − α mᵀ. Its first W columns
//! go back through the leaky ReLU to W₀ and b₀ (the last column is the constant 1).
//!
//! Arithmetic in f64 (the Gram matrix and its Cholesky factor need it); θ_h is the move's
//! f32 state.

use uqbench_anchor::Rng;

/// Σ a_i b_i with eight partial sums (a fixed order that the compiler vectorises).
#[inline(always)]
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0f64; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f64 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f64>() + tail
}

/// y += c·x.
#[inline(always)]
fn axpy(y: &mut [f64], c: f64, x: &[f64]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += c * xi;
    }
}

/// The collapsed potential's dimensions and scratch, for one chain. Every vector over the
/// training points is stored feature-major (`[features, n]`), so that the inner loops run
/// over the points, contiguous.
pub(crate) struct Collapsed {
    d: usize,
    w: usize,
    n: usize,
    slope: f64,
    prior_prec: f64,
    /// The inputs `[d, n]` and targets in f64.
    x: Vec<f64>,
    y: Vec<f64>,
    /// Features Φᵀ `[P, n]`, the last row 1.
    phi: Vec<f64>,
    /// Pre-activations `[W, n]`.
    pre: Vec<f64>,
    /// A's lower Cholesky factor `[P, P]` (row-major).
    chol: Vec<f64>,
    /// A⁻¹ `[P, P]` and L⁻¹ `[P, P]`.
    a_inv: Vec<f64>,
    l_inv: Vec<f64>,
    /// m, then Φᵀy.
    m: Vec<f64>,
    phi_y: Vec<f64>,
    /// Scratch over the points: the fit Φm, α, ∂U/∂pre of one unit.
    fit: Vec<f64>,
    alpha: Vec<f64>,
    g: Vec<f64>,
    yy: f64,
}

impl Collapsed {
    /// For a 1-W-1 network on `d` inputs (feature-major `x`, `[d, n]`), targets `y`, leaky-ReLU
    /// `slope` and prior sd `prior_sd`.
    pub(crate) fn new(
        d: usize,
        w: usize,
        x: &[f32],
        y: &[f32],
        slope: f64,
        prior_sd: f64,
    ) -> Collapsed {
        let (n, p) = (y.len(), w + 1);
        let y: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
        let mut phi = vec![0.0; p * n];
        phi[w * n..].fill(1.0);
        Collapsed {
            d,
            w,
            n,
            slope,
            prior_prec: 1.0 / (prior_sd * prior_sd),
            x: x.iter().map(|&v| f64::from(v)).collect(),
            yy: dot(&y, &y),
            y,
            phi,
            pre: vec![0.0; w * n],
            chol: vec![0.0; p * p],
            a_inv: vec![0.0; p * p],
            l_inv: vec![0.0; p * p],
            m: vec![0.0; p],
            phi_y: vec![0.0; p],
            fit: vec![0.0; n],
            alpha: vec![0.0; n],
            g: vec![0.0; n],
        }
    }

    /// θ_h's length: W₀ `[d, W]` row-major, then b₀ `[W]`.
    pub(crate) fn dim(&self) -> usize {
        (self.d + 1) * self.w
    }

    /// A whole network's flat parameters from θ_h and the output layer (a, c).
    pub(crate) fn network(&self, h: &[f32], out: &[f64], theta: &mut [f32]) {
        let (dw, w) = (self.d * self.w, self.w);
        theta[..dw].copy_from_slice(&h[..dw]);
        for j in 0..w {
            theta[dw + j] = out[j] as f32;
        }
        theta[dw + w..dw + 2 * w].copy_from_slice(&h[dw..]);
        theta[dw + 2 * w] = out[w] as f32;
    }

    /// Φ, A's factor, m at θ_h and 1/σ² `inv_s2`; false where A is not numerically positive
    /// definite (or a feature is not finite).
    #[inline(always)]
    fn factor(&mut self, h: &[f32], inv_s2: f64) -> bool {
        let (d, w, n, p) = (self.d, self.w, self.n, self.w + 1);
        let (w0, b0) = h.split_at(d * w);
        for j in 0..w {
            let pre = &mut self.pre[j * n..(j + 1) * n];
            pre.fill(f64::from(b0[j]));
            for a in 0..d {
                axpy(pre, f64::from(w0[a * w + j]), &self.x[a * n..(a + 1) * n]);
            }
            for (f, &z) in self.phi[j * n..(j + 1) * n].iter_mut().zip(pre.iter()) {
                *f = if z > 0.0 { z } else { self.slope * z };
            }
        }
        // A = ΦᵀΦ/σ² + I/σ_p² (lower triangle), Φᵀy.
        let a = &mut self.chol;
        for j in 0..p {
            let row_j = &self.phi[j * n..(j + 1) * n];
            self.phi_y[j] = dot(row_j, &self.y);
            for k in 0..=j {
                a[j * p + k] = dot(row_j, &self.phi[k * n..(k + 1) * n]) * inv_s2;
            }
            a[j * p + j] += self.prior_prec;
        }
        // In-place Cholesky, A = LLᵀ.
        for j in 0..p {
            let mut s = a[j * p + j];
            for k in 0..j {
                s -= a[j * p + k] * a[j * p + k];
            }
            if !(s > 0.0 && s.is_finite()) {
                return false;
            }
            let l = s.sqrt();
            a[j * p + j] = l;
            for i in j + 1..p {
                let mut s = a[i * p + j];
                for k in 0..j {
                    s -= a[i * p + k] * a[j * p + k];
                }
                a[i * p + j] = s / l;
            }
        }
        // m = A⁻¹Φᵀy/σ²: forward then backward substitution.
        for j in 0..p {
            let mut s = self.phi_y[j] * inv_s2;
            for k in 0..j {
                s -= a[j * p + k] * self.m[k];
            }
            self.m[j] = s / a[j * p + j];
        }
        for j in (0..p).rev() {
            let mut s = self.m[j];
            for k in j + 1..p {
                s -= a[k * p + j] * self.m[k];
            }
            self.m[j] = s / a[j * p + j];
        }
        true
    }

    /// U(θ_h) at 1/σ² `inv_s2` (see the module docs), with ∇U into `grad`; +∞ where A cannot
    /// be factored (the move rejects it).
    #[inline(always)]
    pub(crate) fn potential(&mut self, h: &[f32], inv_s2: f64, grad: &mut [f32]) -> f64 {
        if !self.factor(h, inv_s2) {
            grad.fill(0.0);
            return f64::INFINITY;
        }
        let (d, w, n, p) = (self.d, self.w, self.n, self.w + 1);
        let l = &self.chol;
        let fit: f64 = self.phi_y.iter().zip(&self.m).map(|(a, b)| a * b).sum();
        let log_det: f64 = (0..p).map(|j| l[j * p + j].ln()).sum();
        // A⁻¹ = L⁻ᵀL⁻¹, with L⁻¹ column by column.
        let (a_inv, l_inv) = (&mut self.a_inv, &mut self.l_inv);
        l_inv.fill(0.0);
        for c in 0..p {
            for i in c..p {
                let mut s = if i == c { 1.0 } else { 0.0 };
                for k in c..i {
                    s -= l[i * p + k] * l_inv[k * p + c];
                }
                l_inv[i * p + c] = s / l[i * p + i];
            }
        }
        for j in 0..p {
            for k in 0..=j {
                let s: f64 = (j..p).map(|i| l_inv[i * p + j] * l_inv[i * p + k]).sum();
                a_inv[j * p + k] = s;
                a_inv[k * p + j] = s;
            }
        }
        // α = (y − Φm)/σ².
        self.fit.fill(0.0);
        for k in 0..p {
            axpy(&mut self.fit, self.m[k], &self.phi[k * n..(k + 1) * n]);
        }
        for ((a, &y), &f) in self.alpha.iter_mut().zip(&self.y).zip(&self.fit) {
            *a = (y - f) * inv_s2;
        }
        // ∂U/∂Φ_{ij} = (ΦA⁻¹)_{ij}/σ² − α_i m_j for the hidden columns j < W, through the
        // leaky ReLU to W₀ and b₀.
        let (gw, gb) = grad.split_at_mut(d * w);
        for j in 0..w {
            let g = &mut self.g;
            for (gi, &ai) in g.iter_mut().zip(&self.alpha) {
                *gi = -ai * self.m[j];
            }
            for k in 0..p {
                axpy(g, a_inv[k * p + j] * inv_s2, &self.phi[k * n..(k + 1) * n]);
            }
            for (gi, &z) in g.iter_mut().zip(&self.pre[j * n..(j + 1) * n]) {
                if z <= 0.0 {
                    *gi *= self.slope;
                }
            }
            gb[j] = g.iter().sum::<f64>() as f32;
            for a in 0..d {
                gw[a * w + j] = dot(&self.x[a * n..(a + 1) * n], g) as f32;
            }
        }
        let mut prior = 0.0;
        for (g, &t) in grad.iter_mut().zip(h) {
            let t = f64::from(t);
            prior += t * t;
            *g += (t * self.prior_prec) as f32;
        }
        0.5 * (self.yy - fit) * inv_s2 + log_det + 0.5 * self.prior_prec * prior
    }

    /// An exact draw of the output layer (a, c) | θ_h, σ², y into `out` (P values), and the
    /// whole network's SSE; `None` where A cannot be factored.
    #[inline(always)]
    pub(crate) fn draw_output(
        &mut self,
        h: &[f32],
        inv_s2: f64,
        stream: &mut Rng,
        out: &mut [f64],
    ) -> Option<f64> {
        if !self.factor(h, inv_s2) {
            return None;
        }
        let (n, p) = (self.n, self.w + 1);
        // out = m + L⁻ᵀz, z ~ N(0, I): back substitution Lᵀv = z.
        let z: Vec<f64> = (0..p).map(|_| stream.normal()).collect();
        let l = &self.chol;
        for j in (0..p).rev() {
            let mut s = z[j];
            for k in j + 1..p {
                s -= l[k * p + j] * out[k];
            }
            out[j] = s / l[j * p + j];
        }
        for (o, &m) in out.iter_mut().zip(&self.m) {
            *o += m;
        }
        self.fit.fill(0.0);
        for (&o, row) in out.iter().zip(self.phi.chunks_exact(n)) {
            axpy(&mut self.fit, o, row);
        }
        Some(
            self.y
                .iter()
                .zip(&self.fit)
                .map(|(y, f)| (y - f) * (y - f))
                .sum(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2-input, 3-unit problem with targets from a fixed network plus noise.
    fn problem() -> (Vec<f32>, Vec<f32>, usize) {
        let n = 40;
        let mut rng = Rng::new(7);
        // Feature-major [d, n].
        let x: Vec<f32> = (0..2 * n)
            .map(|_| rng.uniform_in(-2.0, 2.0) as f32)
            .collect();
        let y = (0..n)
            .map(|i| {
                let (a, b) = (f64::from(x[i]), f64::from(x[n + i]));
                (3.0 * a.max(0.1 * a) - 2.0 * (b - 0.5).abs() + 0.3 * rng.normal()) as f32
            })
            .collect();
        (x, y, n)
    }

    #[test]
    fn the_gradient_is_the_potentials_derivative() {
        // Central differences in f64 of U at a point with kinks away from the data's
        // points: the analytic gradient agrees to 1e-3 relative (f32 state, h = 1e-3).
        let (x, y, _) = problem();
        let mut col = Collapsed::new(2, 3, &x, &y, 0.01, 10.0);
        let h: Vec<f32> = vec![0.8, -1.1, 0.4, 0.3, 0.9, -0.7, 0.25, -0.35, 0.6];
        let mut grad = vec![0.0f32; col.dim()];
        let inv_s2 = 1.0 / 0.09;
        col.potential(&h, inv_s2, &mut grad);
        let mut scratch = vec![0.0f32; col.dim()];
        for i in 0..h.len() {
            let step = 1e-3f32;
            let (mut up, mut down) = (h.clone(), h.clone());
            up[i] += step;
            down[i] -= step;
            let fd = (col.potential(&up, inv_s2, &mut scratch)
                - col.potential(&down, inv_s2, &mut scratch))
                / (f64::from(up[i]) - f64::from(down[i]));
            let g = f64::from(grad[i]);
            assert!(
                (g - fd).abs() <= 1e-3 * fd.abs().max(1.0),
                "parameter {i}: analytic {g}, central difference {fd}"
            );
        }
    }

    #[test]
    fn the_potential_is_the_marginal_likelihood() {
        // U − ‖θ_h‖²/(2σ_p²) against −log N(y | 0, σ²I + σ_p²ΦΦᵀ) computed directly (dense
        // N × N Cholesky), up to the θ_h-free constant ½(N log 2πσ² + P log σ_p²) − … : the
        // difference between two hidden layers is the same both ways.
        let (x, y, n) = problem();
        let (sp2, s2) = (100.0f64, 0.09f64);
        let mut col = Collapsed::new(2, 3, &x, &y, 0.01, sp2.sqrt());
        let direct = |col: &mut Collapsed, h: &[f32]| {
            let p = 4;
            assert!(col.factor(h, 1.0 / s2));
            let mut c = nalgebra::DMatrix::<f64>::zeros(n, n);
            for i in 0..n {
                for j in 0..n {
                    let dot: f64 = (0..p)
                        .map(|k| col.phi[k * n + i] * col.phi[k * n + j])
                        .sum();
                    c[(i, j)] = sp2 * dot + if i == j { s2 } else { 0.0 };
                }
            }
            let yv = nalgebra::DVector::from_iterator(n, y.iter().map(|&v| f64::from(v)));
            let chol = c.cholesky().expect("positive definite");
            let quad = yv.dot(&chol.solve(&yv));
            let log_det: f64 = chol.l().diagonal().iter().map(|v| 2.0 * v.ln()).sum();
            0.5 * quad + 0.5 * log_det
        };
        let prior = |h: &[f32]| h.iter().map(|&t| f64::from(t).powi(2)).sum::<f64>() / (2.0 * sp2);
        let h1: Vec<f32> = vec![0.8, -1.1, 0.4, 0.3, 0.9, -0.7, 0.25, -0.35, 0.6];
        let h2: Vec<f32> = vec![-0.5, 0.7, 1.2, 1.3, -0.2, 0.4, -0.6, 0.1, 0.0];
        let mut g = vec![0.0f32; 9];
        let u1 = col.potential(&h1, 1.0 / s2, &mut g) - prior(&h1);
        let u2 = col.potential(&h2, 1.0 / s2, &mut g) - prior(&h2);
        let (d1, d2) = (direct(&mut col, &h1), direct(&mut col, &h2));
        assert!(
            ((u1 - u2) - (d1 - d2)).abs() < 1e-8 * d1.abs().max(1.0),
            "U difference {} against the direct {}",
            u1 - u2,
            d1 - d2
        );
    }

    #[test]
    fn the_output_layers_draws_have_the_conditional_moments() {
        // 4 000 draws of (a, c) | θ_h: their mean within 4 standard errors of m per
        // coordinate (sd of a mean of 4 000: √(A⁻¹_jj/4000)), their variance within 15% of A⁻¹'s
        // diagonal (the sd of a sample variance of 4 000 normals is 2.2%: 15% is 6.7 of them).
        let (x, y, _) = problem();
        let mut col = Collapsed::new(2, 3, &x, &y, 0.01, 10.0);
        let h: Vec<f32> = vec![0.8, -1.1, 0.4, 0.3, 0.9, -0.7, 0.25, -0.35, 0.6];
        let inv_s2 = 1.0 / 0.09;
        let mut g = vec![0.0f32; 9];
        col.potential(&h, inv_s2, &mut g);
        let (m, a_inv) = (col.m.clone(), col.a_inv.clone());
        let mut rng = Rng::new(3);
        let (draws, p) = (4000, 4);
        let mut out = vec![0.0; p];
        let mut sum = vec![0.0; p];
        let mut sq = vec![0.0; p];
        for _ in 0..draws {
            col.draw_output(&h, inv_s2, &mut rng, &mut out)
                .expect("factors");
            for j in 0..p {
                sum[j] += out[j];
                sq[j] += (out[j] - m[j]).powi(2);
            }
        }
        for j in 0..p {
            let (mean, var) = (sum[j] / draws as f64, sq[j] / draws as f64);
            let v = a_inv[j * p + j];
            assert!(
                (mean - m[j]).abs() < 4.0 * (v / draws as f64).sqrt(),
                "{j}: {mean} vs {}",
                m[j]
            );
            assert!((var / v - 1.0).abs() < 0.15, "{j}: variance {var} vs {v}");
        }
    }
}
