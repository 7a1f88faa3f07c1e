//! Eight f64 lanes for the collapsed potential's products over the training points
//! ([`super::collapsed`]): one AVX-512 register, two AVX2 registers, or a plain array, with
//! the same bits (each lane multiplies, then adds: no fused multiply-add; the lanes are summed
//! in one fixed order). Auto-vectorisation gave two-lane registers for these f64 loops
//! (`perf annotate`), hence the explicit registers, as the engine's `point_major/product.rs`
//! does for f32.

#[cfg(target_arch = "x86_64")]
use pulp::{f64x4, f64x8, x86::V3, x86::V4};

use uqbench_engine::cpu::simd::Level;

/// Lanes per vector, and rows per register block.
pub(crate) const L: usize = 8;
pub(crate) const B: usize = 4;

/// A vector unit of eight f64 lanes.
pub(crate) trait Vector: Copy {
    type V: Copy;
    /// The register blocks that fit the unit's registers without spilling: the Gram matrix's
    /// blocks of `GRAM` × `GRAM` row pairs, and [`Unit::combine`]'s `STEP` vectors of points
    /// per row (AVX2's sixteen registers hold 2 × 2 pairs of two-register vectors, AVX-512's
    /// thirty-two 4 × 4; 4 × 4 on AVX2 spilled every accumulator to the stack each step,
    /// `perf annotate`). The blocking orders no sum differently: the same bits at every
    /// level.
    const GRAM: usize;
    const STEP: usize;
    fn splat(self, x: f64) -> Self::V;
    fn load(self, x: &[f64; L]) -> Self::V;
    /// acc + a·b, the product rounded first.
    fn mul_add(self, acc: Self::V, a: Self::V, b: Self::V) -> Self::V;
    /// g times the leaky ReLU's derivative at the pre-activations z: `slope` where z ≤ 0,
    /// 1 elsewhere (and where z is NaN), chosen lane by lane, not branched on.
    fn leaky(self, g: Self::V, z: Self::V, slope: Self::V) -> Self::V;
    fn array(self, v: Self::V) -> [f64; L];
}

/// The baseline's lanes.
#[derive(Clone, Copy)]
pub(crate) struct Plain;

impl Vector for Plain {
    type V = [f64; L];
    const GRAM: usize = 2;
    const STEP: usize = 1;

    #[inline(always)]
    fn splat(self, x: f64) -> [f64; L] {
        [x; L]
    }

    #[inline(always)]
    fn load(self, x: &[f64; L]) -> [f64; L] {
        *x
    }

    #[inline(always)]
    fn mul_add(self, acc: [f64; L], a: [f64; L], b: [f64; L]) -> [f64; L] {
        let mut out = acc;
        for i in 0..L {
            out[i] += a[i] * b[i];
        }
        out
    }

    #[inline(always)]
    fn leaky(self, g: [f64; L], z: [f64; L], slope: [f64; L]) -> [f64; L] {
        let mut out = g;
        for i in 0..L {
            out[i] *= if z[i] <= 0.0 { slope[i] } else { 1.0 };
        }
        out
    }

    #[inline(always)]
    fn array(self, v: [f64; L]) -> [f64; L] {
        v
    }
}

#[cfg(target_arch = "x86_64")]
impl Vector for V3 {
    type V = (f64x4, f64x4);
    const GRAM: usize = 2;
    const STEP: usize = 1;

    #[inline(always)]
    fn splat(self, x: f64) -> Self::V {
        (self.splat_f64x4(x), self.splat_f64x4(x))
    }

    #[inline(always)]
    fn load(self, x: &[f64; L]) -> Self::V {
        let [a, b]: [[f64; 4]; 2] = pulp::cast(*x);
        (pulp::cast(a), pulp::cast(b))
    }

    #[inline(always)]
    fn mul_add(self, acc: Self::V, a: Self::V, b: Self::V) -> Self::V {
        (
            self.add_f64x4(acc.0, self.mul_f64x4(a.0, b.0)),
            self.add_f64x4(acc.1, self.mul_f64x4(a.1, b.1)),
        )
    }

    #[inline(always)]
    fn leaky(self, g: Self::V, z: Self::V, slope: Self::V) -> Self::V {
        // `_CMP_LE_OQ`: false where z is NaN, as the scalar `z <= 0.0`.
        let (zero, one) = (self.splat_f64x4(0.0), self.splat_f64x4(1.0));
        let f0 = self.select_f64x4(self.cmp_le_f64x4(z.0, zero), slope.0, one);
        let f1 = self.select_f64x4(self.cmp_le_f64x4(z.1, zero), slope.1, one);
        (self.mul_f64x4(g.0, f0), self.mul_f64x4(g.1, f1))
    }

    #[inline(always)]
    fn array(self, v: Self::V) -> [f64; L] {
        let halves: [[f64; 4]; 2] = [pulp::cast(v.0), pulp::cast(v.1)];
        pulp::cast(halves)
    }
}

#[cfg(target_arch = "x86_64")]
impl Vector for V4 {
    type V = f64x8;
    const GRAM: usize = 4;
    const STEP: usize = 2;

    #[inline(always)]
    fn splat(self, x: f64) -> f64x8 {
        self.splat_f64x8(x)
    }

    #[inline(always)]
    fn load(self, x: &[f64; L]) -> f64x8 {
        pulp::cast(*x)
    }

    #[inline(always)]
    fn mul_add(self, acc: f64x8, a: f64x8, b: f64x8) -> f64x8 {
        self.add_f64x8(acc, self.mul_f64x8(a, b))
    }

    #[inline(always)]
    fn leaky(self, g: f64x8, z: f64x8, slope: f64x8) -> f64x8 {
        let mask = self.cmp_le_f64x8(z, self.splat_f64x8(0.0));
        self.mul_f64x8(g, self.select_f64x8(mask, slope, self.splat_f64x8(1.0)))
    }

    #[inline(always)]
    fn array(self, v: f64x8) -> [f64; L] {
        pulp::cast(v)
    }
}

/// The eight lanes' sum in a fixed order.
#[inline(always)]
pub(crate) fn hsum(v: &[f64; L]) -> f64 {
    ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]))
}

/// The vector unit of a chain's level.
#[derive(Clone, Copy)]
pub(crate) enum Unit {
    Plain,
    #[cfg(target_arch = "x86_64")]
    V3(V3),
    #[cfg(target_arch = "x86_64")]
    V4(V4),
}

impl Unit {
    /// The widest unit `level` allows where the CPU has it.
    pub(crate) fn at(level: Level) -> Unit {
        #[cfg(target_arch = "x86_64")]
        {
            if level == Level::Avx512 {
                if let Some(v4) = V4::try_new() {
                    return Unit::V4(v4);
                }
            }
            if level != Level::Baseline {
                if let Some(v3) = V3::try_new() {
                    return Unit::V3(v3);
                }
            }
        }
        let _ = level;
        Unit::Plain
    }

    /// The lower triangle of the Gram matrix of the first `q` rows of `rows` (`[pp, np]`,
    /// pp a multiple of B, np of L, zero-padded) into `out` (`[q, q]`, row-major).
    #[inline(always)]
    pub(crate) fn gram_lower(self, rows: &[f64], np: usize, q: usize, out: &mut [f64]) {
        match self {
            Unit::Plain => gram_lower::<_, { Plain::GRAM }>(Plain, rows, np, q, out),
            #[cfg(target_arch = "x86_64")]
            Unit::V3(v) => gram_lower::<_, { V3::GRAM }>(v, rows, np, q, out),
            #[cfg(target_arch = "x86_64")]
            Unit::V4(v) => gram_lower::<_, { V4::GRAM }>(v, rows, np, q, out),
        }
    }

    /// `out[k] = Σ_i a_i·r_k[i]` for the first `q` rows k of `rows` (`[pp, np]`, pp a
    /// multiple of B, zero-padded) with row j replaced by `a` (`np` points): row j of the Gram
    /// matrix of the rows with row j replaced, each loaded vector of `a` serving B rows (a
    /// unit move's update, `collapsed.rs`, which keeps the proposal beside the state's rows).
    #[inline(always)]
    pub(crate) fn row_products(
        self,
        a: &[f64],
        rows: &[f64],
        np: usize,
        j: usize,
        q: usize,
        out: &mut [f64],
    ) {
        match self {
            Unit::Plain => row_products(Plain, a, (rows, np), (j, q), out),
            #[cfg(target_arch = "x86_64")]
            Unit::V3(v) => row_products(v, a, (rows, np), (j, q), out),
            #[cfg(target_arch = "x86_64")]
            Unit::V4(v) => row_products(v, a, (rows, np), (j, q), out),
        }
    }

    /// The collapsed gradient's last steps for the first `used` ≤ B units t of a block, in one
    /// pass over the `np` points: g_t = init_t·first + Σ_k coef[t, k]·rows[k, ·] (k < `p`;
    /// `coef` `[B, p]`, `rows` `[_, np]`), times the leaky ReLU's derivative at the units'
    /// pre-activations `pre` (`[used, np]`, 1 on the padding: a factor of 1) with `slope`, and
    /// reduced against every row r of `reduce` (`[k, np]`): `sums[r·B + t]` holds the eight
    /// lanes of Σ_i g_t[i]·reduce[r, i], accumulated over the vectors in order, so that their
    /// [`hsum`] has the bits of the eight-lane dot product of a stored g_t and the row (no g
    /// is stored: the gradient's rows are computed, scaled and summed while in registers).
    #[inline(always)]
    pub(crate) fn combine(
        self,
        (first, init): (&[f64], &[f64; B]),
        (coef, rows, np): (&[f64], &[f64], usize),
        (pre, slope): (&[f64], f64),
        (reduce, sums): (&[f64], &mut [[f64; L]]),
        used: usize,
    ) {
        let args = (
            (first, init),
            (coef, rows, np),
            (pre, slope),
            (reduce, sums),
        );
        match self {
            Unit::Plain => combine_rows::<_, { Plain::STEP }>(Plain, args, used),
            #[cfg(target_arch = "x86_64")]
            Unit::V3(v) => combine_rows::<_, { V3::STEP }>(v, args, used),
            #[cfg(target_arch = "x86_64")]
            Unit::V4(v) => combine_rows::<_, { V4::STEP }>(v, args, used),
        }
    }

    /// α = (y − Σ_k m_k·rows[k, ·])·`inv_s2` over the `np` points (`rows` `[_, np]`, k <
    /// `m.len()`; `y` and `alpha` `np` long): the fit accumulated in a register in k's order,
    /// the bits of [`Unit::axpy`] into a zeroed row, without storing and reloading that row
    /// once per feature.
    #[inline(always)]
    pub(crate) fn residual(
        self,
        m: &[f64],
        (rows, np): (&[f64], usize),
        (y, inv_s2): (&[f64], f64),
        alpha: &mut [f64],
    ) {
        match self {
            Unit::Plain => residual(Plain, m, (rows, np), (y, inv_s2), alpha),
            #[cfg(target_arch = "x86_64")]
            Unit::V3(v) => residual(v, m, (rows, np), (y, inv_s2), alpha),
            #[cfg(target_arch = "x86_64")]
            Unit::V4(v) => residual(v, m, (rows, np), (y, inv_s2), alpha),
        }
    }

    /// y += c·x over the common length (each product rounded, then added: the bits of the
    /// scalar loop), in the unit's registers.
    #[inline(always)]
    pub(crate) fn axpy(self, y: &mut [f64], c: f64, x: &[f64]) {
        match self {
            Unit::Plain => axpy(Plain, y, c, x),
            #[cfg(target_arch = "x86_64")]
            Unit::V3(v) => axpy(v, y, c, x),
            #[cfg(target_arch = "x86_64")]
            Unit::V4(v) => axpy(v, y, c, x),
        }
    }
}

/// [`Unit::residual`].
#[inline(always)]
fn residual<S: Vector>(
    s: S,
    m: &[f64],
    (rows, np): (&[f64], usize),
    (y, inv_s2): (&[f64], f64),
    alpha: &mut [f64],
) {
    let (nv, p) = (np / L, m.len());
    let all = &rows.as_chunks::<L>().0[..p * nv];
    let y = vectors(y, np, 0);
    let out = &mut alpha[..np].as_chunks_mut::<L>().0[..nv];
    for (c, (out, y)) in out.iter_mut().zip(y).enumerate() {
        let mut acc = s.splat(0.0);
        for (k, &mk) in m.iter().enumerate() {
            acc = s.mul_add(acc, s.splat(mk), s.load(&all[k * nv + c]));
        }
        let fit = s.array(acc);
        for i in 0..L {
            out[i] = (y[i] - fit[i]) * inv_s2;
        }
    }
}

/// [`Unit::axpy`].
#[inline(always)]
fn axpy<S: Vector>(s: S, y: &mut [f64], c: f64, x: &[f64]) {
    let n = y.len().min(x.len());
    let ((vy, ty), (vx, tx)) = (y[..n].as_chunks_mut::<L>(), x[..n].as_chunks::<L>());
    let cv = s.splat(c);
    for (a, b) in vy.iter_mut().zip(vx) {
        *a = s.array(s.mul_add(s.load(a), cv, s.load(b)));
    }
    for (a, &b) in ty.iter_mut().zip(tx) {
        *a += c * b;
    }
}

/// Row `k` of a `[rows, np]` array as its `n` = np / L vectors (cut to exactly `n`, so that a
/// loop over `0..n` carries no range checks).
#[inline(always)]
fn vectors(a: &[f64], np: usize, k: usize) -> &[[f64; L]] {
    &a[k * np..(k + 1) * np].as_chunks::<L>().0[..np / L]
}

/// [`Unit::gram_lower`]: register blocks of G × G row pairs over eight points at a time, so
/// that each loaded vector serves G products and the G² sums run as independent chains.
#[inline(always)]
fn gram_lower<S: Vector, const G: usize>(s: S, rows: &[f64], np: usize, q: usize, out: &mut [f64]) {
    let n = np / L;
    for j0 in (0..q).step_by(G) {
        let mut a: [&[[f64; L]]; G] = [&[]; G];
        for (t, a_t) in a.iter_mut().enumerate() {
            *a_t = vectors(rows, np, j0 + t);
        }
        for k0 in (0..=j0).step_by(G) {
            let mut b: [&[[f64; L]]; G] = [&[]; G];
            for (u, b_u) in b.iter_mut().enumerate() {
                *b_u = vectors(rows, np, k0 + u);
            }
            let mut acc = [[s.splat(0.0); G]; G];
            for c in 0..n {
                // Loops, not `array::from_fn`: its closures are compiled outside the
                // dispatched copy, and the intrinsics in them become calls.
                let (mut va, mut vb) = ([s.splat(0.0); G], [s.splat(0.0); G]);
                for t in 0..G {
                    va[t] = s.load(&a[t][c]);
                    vb[t] = s.load(&b[t][c]);
                }
                for t in 0..G {
                    for u in 0..G {
                        acc[t][u] = s.mul_add(acc[t][u], va[t], vb[u]);
                    }
                }
            }
            for t in 0..G {
                for u in 0..G {
                    let (j, k) = (j0 + t, k0 + u);
                    if j < q && k <= j {
                        out[j * q + k] = hsum(&s.array(acc[t][u]));
                    }
                }
            }
        }
    }
}

/// [`Unit::combine`]'s arguments.
type CombineArgs<'a> = (
    (&'a [f64], &'a [f64; B]),
    (&'a [f64], &'a [f64], usize),
    (&'a [f64], f64),
    (&'a [f64], &'a mut [[f64; L]]),
);

/// [`Unit::combine`] for `used` rows: the block's size as a constant, so that its loops
/// unroll into registers.
#[inline(always)]
fn combine_rows<S: Vector, const V: usize>(s: S, args: CombineArgs, used: usize) {
    match used {
        1 => combine::<S, V, 1>(s, args),
        2 => combine::<S, V, 2>(s, args),
        3 => combine::<S, V, 3>(s, args),
        _ => combine::<S, V, B>(s, args),
    }
}

/// [`Unit::combine`]: R rows of accumulators over V vectors of points (R·V independent
/// chains), every loaded vector of a row serving R of them; then each row's vectors scaled by
/// the leaky ReLU's derivative and added into the sums against the `reduce` rows.
#[inline(always)]
fn combine<S: Vector, const V: usize, const R: usize>(
    s: S,
    ((first, init), (coef, rows, np), (pre, slope), (reduce, sums)): CombineArgs,
) {
    let p = coef.len() / B;
    let nv = np / L;
    let first = vectors(first, np, 0);
    // Every row's vectors from one slice: a row's vector c is `all[k * nv + c]`, without
    // re-slicing the row at every step.
    let all = &rows.as_chunks::<L>().0[..p * nv];
    let pre = &pre.as_chunks::<L>().0[..R * nv];
    let nr = reduce.len() / np;
    let red = &reduce.as_chunks::<L>().0[..nr * nv];
    let sums = &mut sums[..nr * B];
    sums.fill([0.0; L]);
    let slope = s.splat(slope);
    for c in (0..nv).step_by(V) {
        let zero = s.splat(0.0);
        let mut f = [zero; V];
        for (v, f_v) in f.iter_mut().enumerate() {
            *f_v = s.load(&first[c + v]);
        }
        let mut acc = [[zero; V]; R];
        for (acc_t, &x) in acc.iter_mut().zip(init) {
            let x = s.splat(x);
            for v in 0..V {
                acc_t[v] = s.mul_add(zero, x, f[v]);
            }
        }
        for k in 0..p {
            let mut r = [zero; V];
            for (v, r_v) in r.iter_mut().enumerate() {
                *r_v = s.load(&all[k * nv + c + v]);
            }
            for (t, acc_t) in acc.iter_mut().enumerate() {
                let ck = s.splat(coef[t * p + k]);
                for v in 0..V {
                    acc_t[v] = s.mul_add(acc_t[v], ck, r[v]);
                }
            }
        }
        // The vectors in order (c, then c + 1 within a step): each sum's order is the
        // eight-lane dot product's.
        for v in 0..V {
            for (t, acc_t) in acc.iter().enumerate() {
                let g = s.leaky(acc_t[v], s.load(&pre[t * nv + c + v]), slope);
                for r in 0..nr {
                    let at = r * B + t;
                    let x = s.load(&red[r * nv + c + v]);
                    sums[at] = s.array(s.mul_add(s.load(&sums[at]), g, x));
                }
            }
        }
    }
}

/// [`Unit::row_products`]: B rows k at a time over eight points, every row cut to the same
/// whole vectors up front so that the loop carries no range checks (it runs once per unit
/// proposal).
#[inline(always)]
fn row_products<S: Vector>(
    s: S,
    a: &[f64],
    (rows, np): (&[f64], usize),
    (j, q): (usize, usize),
    out: &mut [f64],
) {
    let a = vectors(a, np, 0);
    let n = a.len();
    for k0 in (0..q).step_by(B) {
        let mut r: [&[[f64; L]]; B] = [a; B];
        for (t, r_t) in r.iter_mut().enumerate() {
            let k = k0 + t;
            if k != j {
                *r_t = vectors(rows, np, k);
            }
        }
        let mut acc = [s.splat(0.0); B];
        for c in 0..n {
            let x = s.load(&a[c]);
            for t in 0..B {
                acc[t] = s.mul_add(acc[t], x, s.load(&r[t][c]));
            }
        }
        for t in 0..B.min(q - k0) {
            out[k0 + t] = hsum(&s.array(acc[t]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fused pass of [`Unit::combine`] against its three passes spelled out: each row g_t
    /// stored (init_t·first, then the rows' products added in k's order), scaled by the leaky
    /// ReLU's derivative on the points, then its dot product with each reduce row: the same
    /// bits, for every block size and with a pre-activation that is exactly 0 and one that is
    /// NaN (both `z ≤ 0` cases of the scalar rule).
    #[test]
    fn the_fused_gradient_pass_is_the_three_passes() {
        let (np, p, nr, slope) = (32, 5, 3, 0.01);
        let mut rng = uqbench_anchor::Rng::new(11);
        let mut draw = |len: usize| -> Vec<f64> { (0..len).map(|_| rng.normal()).collect() };
        let (first, rows, reduce, coef) = (draw(np), draw(p * np), draw(nr * np), draw(B * p));
        let mut pre = draw(B * np);
        pre[3] = 0.0;
        pre[np + 5] = f64::NAN;
        let init = [0.7, -1.3, 0.2, 2.1];
        for used in 1..=B {
            for unit in [Unit::Plain, Unit::at(Level::Avx512)] {
                let mut sums = vec![[0.0; L]; nr * B];
                unit.combine(
                    (&first, &init),
                    (&coef, &rows, np),
                    (&pre[..used * np], slope),
                    (&reduce, &mut sums),
                    used,
                );
                for t in 0..used {
                    let g: Vec<f64> = (0..np)
                        .map(|i| {
                            let mut g = 0.0 + init[t] * first[i];
                            for k in 0..p {
                                g += coef[t * p + k] * rows[k * np + i];
                            }
                            g * if pre[t * np + i] <= 0.0 { slope } else { 1.0 }
                        })
                        .collect();
                    for r in 0..nr {
                        // The stored row's dot product as it was taken: eight lanes'
                        // partial sums over the vectors in order, then `hsum`.
                        let mut lanes = [0.0; L];
                        for (i, (&g, &x)) in g.iter().zip(&reduce[r * np..]).enumerate() {
                            lanes[i % L] += g * x;
                        }
                        let want = hsum(&lanes);
                        let got = hsum(&sums[r * B + t]);
                        assert_eq!(got.to_bits(), want.to_bits(), "used {used}, t {t}, r {r}");
                    }
                }
            }
        }
    }

    /// [`Unit::residual`] against the fit built by [`Unit::axpy`] into a zeroed row, then
    /// (y − fit)·c: the same bits.
    #[test]
    fn the_residual_is_the_axpy_fit() {
        let (np, p, c) = (24, 4, 1.0 / 0.09);
        let mut rng = uqbench_anchor::Rng::new(12);
        let mut draw = |len: usize| -> Vec<f64> { (0..len).map(|_| rng.normal()).collect() };
        let (m, rows, y) = (draw(p), draw(p * np), draw(np));
        for unit in [Unit::Plain, Unit::at(Level::Avx512)] {
            let mut fit = vec![0.0; np];
            for k in 0..p {
                unit.axpy(&mut fit, m[k], &rows[k * np..(k + 1) * np]);
            }
            let mut alpha = vec![0.0; np];
            unit.residual(&m, (&rows, np), (&y, c), &mut alpha);
            for i in 0..np {
                let want = (y[i] - fit[i]) * c;
                assert_eq!(alpha[i].to_bits(), want.to_bits(), "point {i}");
            }
        }
    }
}
