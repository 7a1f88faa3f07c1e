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

/// Eight points of row `r` of a `[rows, np]` array from point `c` on.
#[inline(always)]
fn at(a: &[f64], np: usize, r: usize, c: usize) -> &[f64; L] {
    a[r * np + c..r * np + c + L]
        .try_into()
        .expect("rows are padded to whole vectors")
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
            Unit::Plain => gram_lower(Plain, rows, np, q, out),
            #[cfg(target_arch = "x86_64")]
            Unit::V3(v) => gram_lower(v, rows, np, q, out),
            #[cfg(target_arch = "x86_64")]
            Unit::V4(v) => gram_lower(v, rows, np, q, out),
        }
    }

    /// `out[k] = Σ_i rows[j, i]·rows[k, i]` for the first `q` rows k of `rows` (`[pp, np]`,
    /// pp a multiple of B, zero-padded): one row of the Gram matrix, each loaded vector of row
    /// j serving B rows (a unit move's update, `collapsed.rs`).
    #[inline(always)]
    pub(crate) fn row_products(self, rows: &[f64], np: usize, j: usize, q: usize, out: &mut [f64]) {
        match self {
            Unit::Plain => row_products(Plain, rows, np, j, q, out),
            #[cfg(target_arch = "x86_64")]
            Unit::V3(v) => row_products(v, rows, np, j, q, out),
            #[cfg(target_arch = "x86_64")]
            Unit::V4(v) => row_products(v, rows, np, j, q, out),
        }
    }

    /// `out[t, ·] = init_t·first + Σ_k coef[t, k]·rows[k, ·]` for B rows t, k < `p`, over
    /// the `np` points (`coef` `[B, p]`, `rows` `[_, np]`, `out` `[B, np]`).
    #[inline(always)]
    pub(crate) fn combine(
        self,
        first: &[f64],
        init: &[f64; B],
        coef: &[f64],
        rows: &[f64],
        np: usize,
        out: &mut [f64],
    ) {
        match self {
            Unit::Plain => combine(Plain, first, init, coef, rows, np, out),
            #[cfg(target_arch = "x86_64")]
            Unit::V3(v) => combine(v, first, init, coef, rows, np, out),
            #[cfg(target_arch = "x86_64")]
            Unit::V4(v) => combine(v, first, init, coef, rows, np, out),
        }
    }
}

/// [`Unit::gram_lower`]: register blocks of B × B row pairs over eight points at a time, so
/// that each loaded vector serves B products and the B² sums run as independent chains.
#[inline(always)]
fn gram_lower<S: Vector>(s: S, rows: &[f64], np: usize, q: usize, out: &mut [f64]) {
    for j0 in (0..q).step_by(B) {
        for k0 in (0..=j0).step_by(B) {
            let mut acc = [s.splat(0.0); B * B];
            for c in (0..np).step_by(L) {
                // Loops, not `array::from_fn`: its closures are compiled outside the
                // dispatched copy, and the intrinsics in them become calls.
                let (mut a, mut b) = ([s.splat(0.0); B], [s.splat(0.0); B]);
                for t in 0..B {
                    a[t] = s.load(at(rows, np, j0 + t, c));
                    b[t] = s.load(at(rows, np, k0 + t, c));
                }
                for t in 0..B {
                    for u in 0..B {
                        acc[t * B + u] = s.mul_add(acc[t * B + u], a[t], b[u]);
                    }
                }
            }
            for t in 0..B {
                for u in 0..B {
                    let (j, k) = (j0 + t, k0 + u);
                    if j < q && k <= j {
                        out[j * q + k] = hsum(&s.array(acc[t * B + u]));
                    }
                }
            }
        }
    }
}

/// [`Unit::combine`]: B rows of accumulators over sixteen points (two vectors each, eight
/// independent chains), every loaded vector of a row serving B of them.
#[inline(always)]
fn combine<S: Vector>(
    s: S,
    first: &[f64],
    init: &[f64; B],
    coef: &[f64],
    rows: &[f64],
    np: usize,
    out: &mut [f64],
) {
    let p = coef.len() / B;
    for c in (0..np).step_by(2 * L) {
        let f = [s.load(at(first, np, 0, c)), s.load(at(first, np, 0, c + L))];
        let zero = s.splat(0.0);
        let mut acc = [[zero; 2]; B];
        for (acc_t, &v) in acc.iter_mut().zip(init) {
            let v = s.splat(v);
            acc_t[0] = s.mul_add(zero, v, f[0]);
            acc_t[1] = s.mul_add(zero, v, f[1]);
        }
        for k in 0..p {
            let r = [s.load(at(rows, np, k, c)), s.load(at(rows, np, k, c + L))];
            for (t, acc_t) in acc.iter_mut().enumerate() {
                let ck = s.splat(coef[t * p + k]);
                acc_t[0] = s.mul_add(acc_t[0], ck, r[0]);
                acc_t[1] = s.mul_add(acc_t[1], ck, r[1]);
            }
        }
        for (t, acc_t) in acc.iter().enumerate() {
            out[t * np + c..t * np + c + L].copy_from_slice(&s.array(acc_t[0]));
            out[t * np + c + L..t * np + c + 2 * L].copy_from_slice(&s.array(acc_t[1]));
        }
    }
}

/// [`Unit::row_products`]: B rows k at a time over eight points.
#[inline(always)]
fn row_products<S: Vector>(s: S, rows: &[f64], np: usize, j: usize, q: usize, out: &mut [f64]) {
    for k0 in (0..q).step_by(B) {
        let mut acc = [s.splat(0.0); B];
        for c in (0..np).step_by(L) {
            let a = s.load(at(rows, np, j, c));
            for t in 0..B {
                acc[t] = s.mul_add(acc[t], a, s.load(at(rows, np, k0 + t, c)));
            }
        }
        for t in 0..B.min(q - k0) {
            out[k0 + t] = hsum(&s.array(acc[t]));
        }
    }
}
