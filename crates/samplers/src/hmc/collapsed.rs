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
//! Arithmetic in f64 (the Gram matrix and its Cholesky factor need it); the move's state is
//! f32.

use uqbench_anchor::Rng;

use super::lanes64::{hsum, Unit, B, L};
use uqbench_engine::cpu::simd::Level;

/// `n` rounded up to a multiple of `k`.
fn round_up(n: usize, k: usize) -> usize {
    n.div_ceil(k) * k
}

/// Σ a_i b_i with eight partial sums (a fixed order that the compiler vectorises).
#[inline(always)]
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0f64; L];
    let (ca, cb) = (a.chunks_exact(L), b.chunks_exact(L));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..L {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f64 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    hsum(&acc) + tail
}

/// The collapsed potential's dimensions and scratch, for one chain. Every vector over the
/// training points is stored feature-major (`[features, np]`, the points padded with zeros
/// to a multiple of L), so that the inner loops run over the points, contiguous.
pub(crate) struct Collapsed {
    d: usize,
    w: usize,
    n: usize,
    /// The padded row length (a multiple of 2L: [`Unit::combine`]'s blocks).
    np: usize,
    /// The vector unit of the products over the points.
    unit: Unit,
    slope: f64,
    prior_prec: f64,
    /// The inputs `[d, np]` in f64, then the constant row (1 on the points, 0 on the padding):
    /// the rows against which ∂U/∂pre is summed to W₀'s gradient, then b₀'s (θ_h's order).
    x: Vec<f64>,
    /// Rows `[pp, np]`: the features Φᵀ (W hidden rows, then the constant 1), the targets y,
    /// zero rows up to a multiple of B.
    rows: Vec<f64>,
    /// Pre-activations `[W, np]`, 1 on the padding (where the leaky ReLU's derivative, a
    /// factor in the gradient, must then be 1).
    pre: Vec<f64>,
    /// The Gram matrix of (Φ, y) `[P + 1, P + 1]` (lower triangle): ΦᵀΦ, then yᵀΦ and yᵀy.
    gram: Vec<f64>,
    /// The P × P matrices' padded row length (a multiple of L, so that their row operations
    /// run in whole vectors).
    ps: usize,
    /// A's Cholesky factor as U = Lᵀ (A = UᵀU), its upper triangle in rows `[P, ps]`.
    chol: Vec<f64>,
    /// A⁻¹ `[P, ps]` and L⁻¹ `[P, ps]` (lower triangle).
    a_inv: Vec<f64>,
    l_inv: Vec<f64>,
    /// A⁻¹'s first W rows over σ², zero-padded to a multiple of B rows `[wp, P]`, and m
    /// padded alike: the gradient's coefficients.
    coef: Vec<f64>,
    m_pad: Vec<f64>,
    /// m, then Φᵀy.
    m: Vec<f64>,
    phi_y: Vec<f64>,
    /// Scratch over the points: α; the gradient's lanes of B units `[d + 1, B]`
    /// ([`Unit::combine`]).
    alpha: Vec<f64>,
    sums: Vec<[f64; L]>,
    /// The hidden layer θ_h in f64, and ∂U_lik/∂θ_h.
    h: Vec<f64>,
    gh: Vec<f64>,
    /// Whether `pre`, `rows` and `gram` hold θ_h = `h`'s (false until the first evaluation).
    gram_valid: bool,
    /// A unit j proposed by [`Collapsed::unit_neg_log_lik`] and not yet kept or restored:
    /// its weights and bias, its features and pre-activations (beside the state's, which stay
    /// in place until the proposal is kept: a rejected proposal copies nothing back), and the
    /// state's row j of the Gram matrix that the proposal's replaced.
    pending: Option<usize>,
    proposal: Vec<f64>,
    proposal_row: Vec<f64>,
    proposal_pre: Vec<f64>,
    saved_gram: Vec<f64>,
    /// The new row of the Gram matrix.
    gram_row: Vec<f64>,
    /// The unit moves' inverse (see [`Collapsed::begin_units`]): A⁻¹ `[P, ps]` at the state
    /// and 1/σ² `inv_s2_units`, with Q = bᵀA⁻¹b (b = Φᵀy) and ½ log det A; `units_valid`
    /// while they are the state's (a new θ_h from anywhere but a kept unit clears it).
    v: Vec<f64>,
    quad: f64,
    half_log_det: f64,
    inv_s2_units: f64,
    units_valid: bool,
    /// The pending proposal's Schur complement s′, Q′ and ½ log det A′, S⁻¹a′ (`t`, entry j
    /// unused), and whether it was scored by refactoring A′ instead (`exact`).
    proposed: (f64, f64, f64),
    t: Vec<f64>,
    exact: bool,
    /// The pending proposal's 1/σ².
    pending_s2: f64,
}

impl Collapsed {
    /// For a 1-W-1 network on `d` inputs (feature-major `x`, `[d, n]`), targets `y`, leaky-ReLU
    /// `slope` and prior sd `prior_sd`; the products over the points run on `level`'s vector
    /// unit (the same bits at every level).
    pub(crate) fn new(
        d: usize,
        w: usize,
        x: &[f32],
        y: &[f32],
        slope: f64,
        prior_sd: f64,
        level: Level,
    ) -> Collapsed {
        let (n, p) = (y.len(), w + 1);
        let np = round_up(n, 2 * L);
        let (pp, wp, ps) = (round_up(p + 1, B), round_up(w, B), round_up(p, L));
        let mut rows = vec![0.0; pp * np];
        rows[w * np..w * np + n].fill(1.0);
        for (r, &v) in rows[p * np..].iter_mut().zip(y) {
            *r = f64::from(v);
        }
        let mut xp = vec![0.0; (d + 1) * np];
        for a in 0..d {
            for (t, &v) in xp[a * np..].iter_mut().zip(&x[a * n..(a + 1) * n]) {
                *t = f64::from(v);
            }
        }
        xp[d * np..d * np + n].fill(1.0);
        // The pre-activations' padding stays 1 (features write the points only).
        let mut pre = vec![1.0; w * np];
        for row in pre.chunks_exact_mut(np) {
            row[..n].fill(0.0);
        }
        Collapsed {
            d,
            w,
            n,
            np,
            unit: Unit::at(level),
            slope,
            prior_prec: 1.0 / (prior_sd * prior_sd),
            x: xp,
            rows,
            pre,
            gram: vec![0.0; (p + 1) * (p + 1)],
            ps,
            chol: vec![0.0; p * ps],
            a_inv: vec![0.0; p * ps],
            l_inv: vec![0.0; p * ps],
            coef: vec![0.0; wp * p],
            m_pad: vec![0.0; wp],
            m: vec![0.0; p],
            phi_y: vec![0.0; p],
            alpha: vec![0.0; np],
            sums: vec![[0.0; L]; (d + 1) * B],
            h: vec![0.0; (d + 1) * w],
            gh: vec![0.0; (d + 1) * w],
            gram_valid: false,
            pending: None,
            proposal: vec![0.0; d + 1],
            proposal_row: vec![0.0; np],
            proposal_pre: vec![1.0; np],
            saved_gram: vec![0.0; p + 1],
            gram_row: vec![0.0; pp],
            v: vec![0.0; p * ps],
            quad: 0.0,
            half_log_det: 0.0,
            inv_s2_units: 0.0,
            units_valid: false,
            proposed: (0.0, 0.0, 0.0),
            t: vec![0.0; p],
            exact: true,
            pending_s2: 0.0,
        }
    }

    /// θ_h's length: W₀ `[d, W]` row-major, then b₀ `[W]`.
    pub(crate) fn dim(&self) -> usize {
        (self.d + 1) * self.w
    }

    /// A starting hidden layer from its prior N(0, σ_p² I).
    pub(crate) fn prior_draw(&self, stream: &mut Rng) -> Vec<f32> {
        let sd = 1.0 / self.prior_prec.sqrt();
        (0..self.dim())
            .map(|_| (sd * stream.normal()) as f32)
            .collect()
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

    /// Φ, A's factor, m at θ_h `z` and 1/σ² `inv_s2`; false where A is not numerically
    /// positive definite (or a feature is not finite).
    #[inline(always)]
    fn factor(&mut self, z: &[f32], inv_s2: f64) -> bool {
        // Φ and the Gram matrix depend on θ_h alone: a new σ² at the same state (σ²'s Gibbs
        // step, the output layer's draw) reuses them.
        let same = self.gram_valid
            && self
                .h
                .iter()
                .zip(z)
                .all(|(h, &v)| h.to_bits() == f64::from(v).to_bits());
        if !same {
            for (h, &v) in self.h.iter_mut().zip(z) {
                *h = f64::from(v);
            }
            let (d, w, n, np) = (self.d, self.w, self.n, self.np);
            let (w0, b0) = self.h.split_at(d * w);
            for j in 0..w {
                let rows = j * np..j * np + n;
                features(
                    (self.unit, &self.x[..d * np], np, n, self.slope),
                    (&w0[j..], w, b0[j]),
                    &mut self.pre[rows.clone()],
                    &mut self.rows[rows],
                );
            }
            // The Gram matrix of (Φ, y): ΦᵀΦ, and Φᵀy in its last row.
            let (np, p) = (self.np, self.w + 1);
            self.unit.gram_lower(&self.rows, np, p + 1, &mut self.gram);
            self.gram_valid = true;
            self.units_valid = false;
        }
        self.factor_gram(inv_s2)
    }

    /// The factored state's fit bᵀm (b = Φᵀy) and ½ log det A = Σ_p log U_pp: the sums that
    /// [`Collapsed::nll`], the potential and the unit moves' inverse all need.
    #[inline(always)]
    fn fit_log_det(&self) -> (f64, f64) {
        let (p, ps, u) = (self.w + 1, self.ps, &self.chol);
        let fit: f64 = self.phi_y.iter().zip(&self.m).map(|(a, b)| a * b).sum();
        let log_det: f64 = (0..p).map(|j| u[j * ps + j].ln()).sum();
        (fit, log_det)
    }

    /// −log p(y | θ_h, σ²) up to terms free of θ_h from the state's fit and ½ log det A
    /// ([`Collapsed::fit_log_det`]).
    #[inline(always)]
    fn lik(&self, (fit, log_det): (f64, f64), inv_s2: f64) -> f64 {
        let q = self.w + 2;
        let yy = self.gram[q * q - 1];
        0.5 * (yy - fit) * inv_s2 + log_det
    }

    /// The factored state's −log p(y | θ_h, σ²) up to terms free of θ_h.
    #[inline(always)]
    fn nll(&self, inv_s2: f64) -> f64 {
        self.lik(self.fit_log_det(), inv_s2)
    }

    /// A's factor and m from the Gram matrix at 1/σ² `inv_s2`; false where A is not
    /// numerically positive definite.
    #[inline(always)]
    fn factor_gram(&mut self, inv_s2: f64) -> bool {
        let p = self.w + 1;
        // A = ΦᵀΦ/σ² + I/σ_p², both triangles.
        let ps = self.ps;
        let u = &mut self.chol;
        for j in 0..p {
            self.phi_y[j] = self.gram[p * (p + 1) + j];
            for k in 0..=j {
                let v = self.gram[j * (p + 1) + k] * inv_s2;
                u[j * ps + k] = v;
                u[k * ps + j] = v;
            }
            u[j * ps + j] += self.prior_prec;
        }
        // Cholesky, A = UᵀU, right-looking so that every operation is on whole rows (the
        // matrix is symmetric: row k is column k): row k divided by √(pivot) becomes U's row
        // k, and the rows below lose its outer product. Entries left of the diagonal are
        // left stale and never read.
        for k in 0..p {
            let pivot = u[k * ps + k];
            if !(pivot > 0.0 && pivot.is_finite()) {
                return false;
            }
            let l = pivot.sqrt();
            let (head, tail) = u.split_at_mut((k + 1) * ps);
            let row_k = &mut head[k * ps..];
            for v in row_k.iter_mut() {
                *v /= l;
            }
            for i in k + 1..p {
                let c = row_k[i];
                let row_i = &mut tail[(i - k - 1) * ps..(i - k) * ps];
                for (a, &b) in row_i.iter_mut().zip(row_k.iter()) {
                    *a -= c * b;
                }
            }
        }
        // m = A⁻¹Φᵀy/σ²: Uᵀv = Φᵀy/σ² by columns (row j of U updates the rest), then
        // Um = v by rows.
        for (m, &b) in self.m.iter_mut().zip(&self.phi_y) {
            *m = b * inv_s2;
        }
        for j in 0..p {
            let v = self.m[j] / u[j * ps + j];
            self.m[j] = v;
            for i in j + 1..p {
                self.m[i] -= u[j * ps + i] * v;
            }
        }
        for j in (0..p).rev() {
            let s = self.m[j] - dot(&u[j * ps + j + 1..j * ps + p], &self.m[j + 1..]);
            self.m[j] = s / u[j * ps + j];
        }
        true
    }

    /// U at θ_h `z` and 1/σ² `inv_s2` (see the module docs), with ∇U into `grad`; +∞
    /// where A cannot be factored (the move rejects it).
    #[inline(always)]
    pub(crate) fn potential(&mut self, z: &[f32], inv_s2: f64, grad: &mut [f32]) -> f64 {
        if !self.factor(z, inv_s2) {
            grad.fill(0.0);
            return f64::INFINITY;
        }
        let (d, w, np, p, ps) = (self.d, self.w, self.np, self.w + 1, self.ps);
        let lik = self.lik(self.fit_log_det(), inv_s2);
        self.invert();
        let a_inv = &self.a_inv;
        for j in 0..w {
            for k in 0..p {
                self.coef[j * p + k] = a_inv[j * ps + k] * inv_s2;
            }
            self.m_pad[j] = self.m[j];
        }
        // α = (y − Φm)/σ² (zero on the padding).
        let y = &self.rows[p * np..(p + 1) * np];
        self.unit
            .residual(&self.m, (&self.rows, np), (y, inv_s2), &mut self.alpha);
        // ∂U/∂Φ_{ij} = (ΦA⁻¹)_{ij}/σ² − α_i m_j for the hidden columns j < W, B units at a
        // time in registers over L points (each loaded block of features serves B units),
        // through the leaky ReLU (a factor, not a branch: the signs of the pre-activations are
        // as good as random to the branch predictor) and summed against the inputs and the
        // constant row to W₀'s and b₀'s entries, in the same pass.
        for j0 in (0..w).step_by(B) {
            let init: [f64; B] = std::array::from_fn(|t| -self.m_pad[j0 + t]);
            let used = B.min(w - j0);
            self.unit.combine(
                (&self.alpha, &init),
                (&self.coef[j0 * p..(j0 + B) * p], &self.rows, np),
                (&self.pre[j0 * np..(j0 + used) * np], self.slope),
                (&self.x, &mut self.sums),
                used,
            );
            // θ_h's entry of input a (the bias at a = d) for unit j is a·W + j.
            for a in 0..=d {
                for t in 0..used {
                    self.gh[a * w + j0 + t] = hsum(&self.sums[a * B + t]);
                }
            }
        }
        let mut prior = 0.0;
        for ((g, &gh), &t) in grad.iter_mut().zip(&self.gh).zip(&self.h) {
            prior += t * t;
            *g = (gh + t * self.prior_prec) as f32;
        }
        lik + 0.5 * self.prior_prec * prior
    }

    /// A⁻¹ (`a_inv`, both triangles) from the factor, through X = L⁻¹.
    #[inline(always)]
    fn invert(&mut self) {
        let (p, ps, u) = (self.w + 1, self.ps, &self.chol);
        // X = L⁻¹ by rows, LX = I with L = Uᵀ: X_j = (e_j − Σ_{k<j} L_jk X_k)/L_jj.
        let x = &mut self.l_inv;
        x.fill(0.0);
        for j in 0..p {
            let (done, rest) = x.split_at_mut(j * ps);
            let row = &mut rest[..ps];
            row[j] = 1.0;
            for k in 0..j {
                self.unit
                    .axpy(row, -u[k * ps + j], &done[k * ps..(k + 1) * ps]);
            }
            let l = u[j * ps + j];
            for v in row.iter_mut() {
                *v /= l;
            }
        }
        // A⁻¹ = XᵀX by rows: (A⁻¹)_j = Σ_{i ≥ j} X_ij X_i.
        let a_inv = &mut self.a_inv;
        a_inv.fill(0.0);
        for j in 0..p {
            let row = &mut a_inv[j * ps..(j + 1) * ps];
            for i in j..p {
                self.unit.axpy(row, x[i * ps + j], &x[i * ps..(i + 1) * ps]);
            }
        }
    }

    /// −log p(y | θ_h, σ²) at θ_h `z` and 1/σ² `inv_s2`, up to terms free of θ_h: the potential
    /// without its prior and without the gradient (the tests' whole evaluation, against which
    /// the unit moves' are held); +∞ where A cannot be factored.
    #[cfg(test)]
    pub(crate) fn neg_log_lik(&mut self, z: &[f32], inv_s2: f64) -> f64 {
        if !self.factor(z, inv_s2) {
            return f64::INFINITY;
        }
        self.nll(inv_s2)
    }

    /// Hidden units W and inputs d.
    pub(crate) fn units(&self) -> (usize, usize) {
        (self.w, self.d)
    }

    /// The prior sd of every weight.
    pub(crate) fn prior_sd(&self) -> f64 {
        1.0 / self.prior_prec.sqrt()
    }

    /// An exact draw of the output layer (a, c) | θ_h, σ², y into `out` (P values), and the
    /// whole network's SSE; `None` where A cannot be factored.
    #[inline(always)]
    pub(crate) fn draw_output(
        &mut self,
        z: &[f32],
        inv_s2: f64,
        stream: &mut Rng,
        out: &mut [f64],
    ) -> Option<f64> {
        if !self.factor(z, inv_s2) {
            return None;
        }
        let (np, p) = (self.np, self.w + 1);
        // out = m + L⁻ᵀz, z ~ N(0, I): back substitution Lᵀv = z.
        let z: Vec<f64> = (0..p).map(|_| stream.normal()).collect();
        let (ps, u) = (self.ps, &self.chol);
        for j in (0..p).rev() {
            let s = z[j] - dot(&u[j * ps + j + 1..j * ps + p], &out[j + 1..p]);
            out[j] = s / u[j * ps + j];
        }
        for (o, &m) in out.iter_mut().zip(&self.m) {
            *o += m;
        }
        // The residuals y − Φ(a, c) (α's scratch; times 1: the same bits).
        let y = &self.rows[p * np..(p + 1) * np];
        self.unit
            .residual(&out[..p], (&self.rows, np), (y, 1.0), &mut self.alpha);
        Some(self.alpha.iter().map(|r| r * r).sum())
    }
}

/// One hidden unit's pre-activations z = b + Σ_a w_a x_a and features φ(z) (the leaky ReLU of
/// slope `slope`) over the `n` points of the inputs `x` (`[d, np]`), the unit's input weights
/// read every `stride` entries of `weights` (a column of W₀ `[d, W]`, or a proposal's `d`
/// weights), then its bias.
#[inline(always)]
fn features(
    (unit, x, np, n, slope): (Unit, &[f64], usize, usize, f64),
    (weights, stride, bias): (&[f64], usize, f64),
    pre: &mut [f64],
    row: &mut [f64],
) {
    pre.fill(bias);
    for (a, xa) in x.chunks_exact(np).enumerate() {
        unit.axpy(pre, weights[a * stride], &xa[..n]);
    }
    for (f, &z) in row.iter_mut().zip(pre.iter()) {
        *f = if z > 0.0 { z } else { slope * z };
    }
}

// The unit moves' evaluation: A's Schur complement in one unit.
#[path = "collapsed_units.rs"]
mod units;

#[cfg(test)]
#[path = "collapsed_tests.rs"]
mod tests;
