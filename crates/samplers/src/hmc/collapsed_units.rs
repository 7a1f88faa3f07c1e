//! The unit moves' side of [`Collapsed`] (`ensemble.rs`'s `unit_moves`): a proposal for one
//! hidden unit changes one row of Φᵀ and one row and column of A, so it is scored through A's
//! Schur complement in that unit from A⁻¹, kept up to date by blocks as proposals are kept,
//! instead of factoring A again (O(P²) instead of O(P³) per proposal, no chain of divisions
//! and square roots).

use super::{features, Collapsed};

impl Collapsed {
    /// Starts the unit moves at θ_h `z` and 1/σ² `inv_s2`: A is factored and inverted once,
    /// and each proposal is then scored through A's Schur complement in the proposal's unit
    /// ([`Collapsed::unit_neg_log_lik`]). Returns the state's −log p(y | θ_h, σ²) (as
    /// [`Collapsed::neg_log_lik`]); +∞ where A cannot be factored (the proposals are then
    /// scored by refactoring, as without the inverse).
    #[inline(always)]
    pub(crate) fn begin_units(&mut self, z: &[f32], inv_s2: f64) -> f64 {
        if !self.factor(z, inv_s2) {
            return f64::INFINITY;
        }
        let sums = self.units_inverse(inv_s2);
        self.lik(sums, inv_s2)
    }

    /// The unit moves' inverse, Q and ½ log det A from the state's fresh factor; returns the
    /// fit and ½ log det A ([`Collapsed::fit_log_det`]).
    #[inline(always)]
    fn units_inverse(&mut self, inv_s2: f64) -> (f64, f64) {
        self.invert();
        self.v.copy_from_slice(&self.a_inv);
        // Q = bᵀA⁻¹b = bᵀm/σ⁻² (m = A⁻¹b/σ²).
        let (fit, half_log_det) = self.fit_log_det();
        self.quad = fit / inv_s2;
        self.half_log_det = half_log_det;
        self.inv_s2_units = inv_s2;
        self.units_valid = true;
        (fit, half_log_det)
    }

    /// −log p(y | θ_h, σ²) (as [`Collapsed::neg_log_lik`]) at the state with hidden unit j's
    /// input weights and bias replaced by `unit` (`d` weights, then the bias): only the
    /// proposal's row of Φᵀ and its row of the Gram matrix are computed (O(N·P) instead of
    /// O(N·P²)). After [`Collapsed::begin_units`], the value comes from A's Schur complement
    /// in unit j ([`Collapsed::schur`], O(P²): no factorisation); otherwise, or where the
    /// complement is too small to trust, A′ is factored. The proposal is pending until
    /// [`Collapsed::keep_unit`] or [`Collapsed::restore_unit`]; +∞ where A′ cannot be
    /// factored.
    #[inline(always)]
    pub(crate) fn unit_neg_log_lik(&mut self, j: usize, unit: &[f32], inv_s2: f64) -> f64 {
        debug_assert!(
            self.gram_valid,
            "a unit's update needs the state's Gram matrix"
        );
        let (n, np, q) = (self.n, self.np, self.w + 2);
        for (p, &u) in self.proposal.iter_mut().zip(unit) {
            *p = f64::from(u);
        }
        let (weights, bias) = self.proposal.split_at(self.d);
        // The padding of the proposal's row stays zero.
        features(
            (self.unit, &self.x[..self.d * np], np, n, self.slope),
            (weights, 1, bias[0]),
            &mut self.proposal_pre[..n],
            &mut self.proposal_row[..n],
        );
        self.unit
            .row_products(&self.proposal_row, &self.rows, np, j, q, &mut self.gram_row);
        self.pending = Some(j);
        self.pending_s2 = inv_s2;
        if self.units_valid && self.inv_s2_units == inv_s2 {
            if let Some(nll) = self.schur(j, inv_s2) {
                self.exact = false;
                return nll;
            }
        }
        self.exact = true;
        for (k, &g) in self.gram_row[..q].iter().enumerate() {
            let (r, c) = (j.max(k), j.min(k));
            self.saved_gram[k] = self.gram[r * q + c];
            self.gram[r * q + c] = g;
        }
        if !self.factor_gram(inv_s2) {
            return f64::INFINITY;
        }
        self.nll(inv_s2)
    }

    /// The proposal's −log-likelihood through A's Schur complement in unit j. With V = A⁻¹,
    /// S = A without row and column j (the other units, which the proposal leaves alone),
    /// a′ and d′ the proposal's column of A′ off and on the diagonal, b = Φᵀy and b′ = Φ′ᵀy:
    /// S⁻¹ = V₋ⱼ₋ⱼ − v vᵀ/V_jj (v = V's column j without j), so t = S⁻¹a′ = (Va′)₋ⱼ −
    /// v (Va′)_j/V_jj; s′ = d′ − a′ᵀt (A′'s Schur complement, ≥ 1/σ_p² in exact arithmetic);
    /// det A′ = det S · s′ = det A · V_jj · s′; and b′ᵀA′⁻¹b′ = b₋ⱼᵀS⁻¹b₋ⱼ + (b′_j − tᵀb₋ⱼ)²/s′
    /// with b₋ⱼᵀS⁻¹b₋ⱼ = Q − (Vb)_j²/V_jj. `None` where s′ is not above 10⁻⁹ d′ (the
    /// subtraction would have lost the digits that matter: the caller refactors).
    #[inline(always)]
    fn schur(&mut self, j: usize, inv_s2: f64) -> Option<f64> {
        let (p, ps, q) = (self.w + 1, self.ps, self.w + 2);
        let (v, gram, row) = (&self.v, &self.gram, &self.gram_row);
        let vjj = v[j * ps + j];
        // A′'s column j: a′_k = g_k/σ² (k ≠ j), d′ = g_j/σ² + 1/σ_p²; b_k is the Gram
        // matrix's last row.
        let a = |k: usize| row[k] * inv_s2;
        let b = |k: usize| gram[p * q + k];
        let d_new = row[j] * inv_s2 + self.prior_prec;
        let (mut va_j, mut vb_j) = (0.0, 0.0);
        for k in 0..p {
            if k != j {
                va_j += v[j * ps + k] * a(k);
            }
            vb_j += v[j * ps + k] * b(k);
        }
        let (mut s_new, mut tb) = (d_new, 0.0);
        for i in 0..p {
            if i == j {
                continue;
            }
            let mut va_i = 0.0;
            for k in 0..p {
                if k != j {
                    va_i += v[i * ps + k] * a(k);
                }
            }
            let t = va_i - v[i * ps + j] * va_j / vjj;
            self.t[i] = t;
            s_new -= a(i) * t;
            tb += t * b(i);
        }
        if !(vjj > 0.0 && s_new > 1e-9 * d_new && s_new.is_finite()) {
            return None;
        }
        let r = row[p] - tb;
        let quad = self.quad - vb_j * vb_j / vjj + r * r / s_new;
        let half_log_det = self.half_log_det + 0.5 * (vjj.ln() + s_new.ln());
        self.proposed = (s_new, quad, half_log_det);
        let yy = gram[q * q - 1];
        Some(0.5 * (yy - quad * inv_s2) * inv_s2 + half_log_det)
    }

    /// Keeps the unit proposed last: its weights, features and pre-activations become the
    /// state's, and its row of the Gram matrix, with A⁻¹, Q and log det A updated by blocks
    /// where the proposal was scored through the Schur complement (from A′'s factor
    /// otherwise).
    pub(crate) fn keep_unit(&mut self) {
        let Some(j) = self.pending.take() else {
            return;
        };
        let (w, np) = (self.w, self.np);
        // θ_h is W₀ `[d, W]` row-major, then b₀ `[W]`: unit j's entries are j, W + j, …
        for (a, &v) in self.proposal.iter().enumerate() {
            self.h[a * w + j] = v;
        }
        self.rows[j * np..(j + 1) * np].copy_from_slice(&self.proposal_row);
        self.pre[j * np..(j + 1) * np].copy_from_slice(&self.proposal_pre);
        if self.exact {
            // The Gram matrix and the factor are already A′'s (a kept proposal was finite).
            let inv_s2 = self.pending_s2;
            self.units_inverse(inv_s2);
            return;
        }
        let (p, ps, q) = (w + 1, self.ps, w + 2);
        for (k, &g) in self.gram_row[..q].iter().enumerate() {
            let (r, c) = (j.max(k), j.min(k));
            self.gram[r * q + c] = g;
        }
        // A′⁻¹ by blocks: V′_jj = 1/s′, V′_ij = −t_i/s′, V′_ik = S⁻¹_ik + t_i t_k/s′ with
        // S⁻¹_ik = V_ik − V_ij V_kj/V_jj (i, k ≠ j). V's column j goes to the (spent)
        // Gram row's scratch first.
        let (s_new, quad, half_log_det) = self.proposed;
        let vjj = self.v[j * ps + j];
        for i in 0..p {
            self.gram_row[i] = self.v[i * ps + j];
        }
        let (col, t, v) = (&self.gram_row, &self.t, &mut self.v);
        for i in 0..p {
            if i == j {
                continue;
            }
            for k in 0..p {
                if k != j {
                    v[i * ps + k] += t[i] * t[k] / s_new - col[i] * col[k] / vjj;
                }
            }
            v[i * ps + j] = -t[i] / s_new;
            v[j * ps + i] = -t[i] / s_new;
        }
        v[j * ps + j] = 1.0 / s_new;
        self.quad = quad;
        self.half_log_det = half_log_det;
    }

    /// Drops the unit proposed last: where it was scored by refactoring, the state's row j of
    /// the Gram matrix is put back (its weights and features were never replaced); the factor
    /// of A is stale until the next evaluation.
    pub(crate) fn restore_unit(&mut self) {
        let Some(j) = self.pending.take() else {
            return;
        };
        if !self.exact {
            return;
        }
        let q = self.w + 2;
        for k in 0..q {
            let (r, c) = (j.max(k), j.min(k));
            self.gram[r * q + c] = self.saved_gram[k];
        }
    }
}
