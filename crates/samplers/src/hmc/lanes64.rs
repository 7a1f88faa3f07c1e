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

    /// `out[t, ·] = init_t·first + Σ_k coef[t, k]·rows[k, ·]` for the first `used` ≤ B rows
    /// t, k < `p`, over the `np` points (`coef` `[B, p]`, `rows` `[_, np]`, `out` `[B, np]`;
    /// rows t ≥ `used` of `out` are left as they are: a network's last block of units need
    /// not fill B, and width 5's second block would compute three rows for nothing).
    #[inline(always)]
    pub(crate) fn combine(
        self,
        (first, init): (&[f64], &[f64; B]),
        coef: &[f64],
        (rows, np): (&[f64], usize),
        used: usize,
        out: &mut [f64],
    ) {
        match self {
            Unit::Plain => combine_rows::<_, { Plain::STEP }>(
                Plain,
                (first, init),
                coef,
                (rows, np),
                used,
                out,
            ),
            #[cfg(target_arch = "x86_64")]
            Unit::V3(v) => {
                combine_rows::<_, { V3::STEP }>(v, (first, init), coef, (rows, np), used, out)
            }
            #[cfg(target_arch = "x86_64")]
            Unit::V4(v) => {
                combine_rows::<_, { V4::STEP }>(v, (first, init), coef, (rows, np), used, out)
            }
        }
    }

    /// Σ a_i b_i over the common length with the bits of `collapsed.rs`'s `dot` (eight
    /// partial sums, one per lane, over the whole vectors, summed by [`hsum`], then the
    /// tail's products): in the unit's registers, where the compiler's own vectorisation of
    /// that loop used two-lane ones.
    #[inline(always)]
    pub(crate) fn dot(self, a: &[f64], b: &[f64]) -> f64 {
        match self {
            Unit::Plain => dot(Plain, a, b),
            #[cfg(target_arch = "x86_64")]
            Unit::V3(v) => dot(v, a, b),
            #[cfg(target_arch = "x86_64")]
            Unit::V4(v) => dot(v, a, b),
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

/// [`Unit::dot`].
#[inline(always)]
fn dot<S: Vector>(s: S, a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let ((va, ta), (vb, tb)) = (a[..n].as_chunks::<L>(), b[..n].as_chunks::<L>());
    let mut acc = s.splat(0.0);
    for (x, y) in va.iter().zip(vb) {
        acc = s.mul_add(acc, s.load(x), s.load(y));
    }
    let tail: f64 = ta.iter().zip(tb).map(|(x, y)| x * y).sum();
    hsum(&s.array(acc)) + tail
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

/// [`Unit::combine`] for `used` rows: the block's size as a constant, so that its loops
/// unroll into registers.
#[inline(always)]
fn combine_rows<S: Vector, const V: usize>(
    s: S,
    head: (&[f64], &[f64; B]),
    coef: &[f64],
    rows: (&[f64], usize),
    used: usize,
    out: &mut [f64],
) {
    match used {
        1 => combine::<S, V, 1>(s, head, coef, rows, out),
        2 => combine::<S, V, 2>(s, head, coef, rows, out),
        3 => combine::<S, V, 3>(s, head, coef, rows, out),
        _ => combine::<S, V, B>(s, head, coef, rows, out),
    }
}

/// [`Unit::combine`]: R rows of accumulators over V vectors of points (R·V independent
/// chains), every loaded vector of a row serving R of them.
#[inline(always)]
fn combine<S: Vector, const V: usize, const R: usize>(
    s: S,
    (first, init): (&[f64], &[f64; B]),
    coef: &[f64],
    (rows, np): (&[f64], usize),
    out: &mut [f64],
) {
    let p = coef.len() / B;
    let nv = np / L;
    let first = vectors(first, np, 0);
    // Every row's vectors from one slice: a row's vector c is `all[k * nv + c]`, without
    // re-slicing the row at every step.
    let all = &rows.as_chunks::<L>().0[..p * nv];
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
        for (t, acc_t) in acc.iter().enumerate() {
            for (v, &a) in acc_t.iter().enumerate() {
                let at = t * np + (c + v) * L;
                out[at..at + L].copy_from_slice(&s.array(a));
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
