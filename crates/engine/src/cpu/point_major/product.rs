//! The register-blocked product C = init + A·B and the transpose `blocked`'s network runs
//! on, in AVX-512, AVX2 or plain lanes with the same bits.

use crate::cpu::simd::Lanes;

#[cfg(target_arch = "x86_64")]
use pulp::{f32x16, x86::V4, NullaryFnOnce};
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
use pulp::{f32x8, x86::V3};

/// Rows of a register tile: 5 rows × 2 vectors = 10 accumulators, with the two loaded
/// vectors of B and the broadcast element 13 of AVX2's 16 registers. Fifty training points
/// (E1–E3) are ten tiles.
pub(super) const MR: usize = 5;

/// f32 lanes: AVX-512 or AVX2 registers, or a plain array, with the same element-wise
/// arithmetic.
trait Vector: Copy {
    /// Lanes per vector.
    const LANES: usize;
    type V: Copy;
    fn splat(self, x: f32) -> Self::V;
    fn load(self, x: &[f32]) -> Self::V;
    /// acc + a·b, fused (one rounding, IEEE 754's fusedMultiplyAdd: the same bits in every
    /// lane set, and half the instructions of a product and a sum).
    fn mul_add(self, acc: Self::V, a: Self::V, b: Self::V) -> Self::V;
    fn store(self, v: Self::V, out: &mut [f32]);
}

/// The baseline's lanes.
#[derive(Clone, Copy)]
struct Plain;

impl Vector for Plain {
    const LANES: usize = 8;
    type V = [f32; 8];

    #[inline(always)]
    fn splat(self, x: f32) -> [f32; 8] {
        [x; 8]
    }

    #[inline(always)]
    fn load(self, x: &[f32]) -> [f32; 8] {
        x[..8].try_into().expect("eight lanes")
    }

    #[inline(always)]
    fn mul_add(self, acc: [f32; 8], a: [f32; 8], b: [f32; 8]) -> [f32; 8] {
        let mut out = acc;
        for i in 0..8 {
            // Without an FMA unit (the baseline), a library call: correct, not fast.
            out[i] = a[i].mul_add(b[i], out[i]);
        }
        out
    }

    #[inline(always)]
    fn store(self, v: [f32; 8], out: &mut [f32]) {
        out[..8].copy_from_slice(&v);
    }
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
impl Vector for V3 {
    const LANES: usize = 8;
    type V = f32x8;

    #[inline(always)]
    fn splat(self, x: f32) -> f32x8 {
        self.splat_f32x8(x)
    }

    #[inline(always)]
    fn load(self, x: &[f32]) -> f32x8 {
        let x: [f32; 8] = x[..8].try_into().expect("eight lanes");
        pulp::cast(x)
    }

    #[inline(always)]
    fn mul_add(self, acc: f32x8, a: f32x8, b: f32x8) -> f32x8 {
        self.mul_add_f32x8(a, b, acc)
    }

    #[inline(always)]
    fn store(self, v: f32x8, out: &mut [f32]) {
        let v: [f32; 8] = pulp::cast(v);
        out[..8].copy_from_slice(&v);
    }
}

#[cfg(target_arch = "x86_64")]
impl Vector for V4 {
    const LANES: usize = 16;
    type V = f32x16;

    #[inline(always)]
    fn splat(self, x: f32) -> f32x16 {
        self.splat_f32x16(x)
    }

    #[inline(always)]
    fn load(self, x: &[f32]) -> f32x16 {
        let x: [f32; 16] = x[..16].try_into().expect("sixteen lanes");
        pulp::cast(x)
    }

    #[inline(always)]
    fn mul_add(self, acc: f32x16, a: f32x16, b: f32x16) -> f32x16 {
        self.mul_add_f32x16(a, b, acc)
    }

    #[inline(always)]
    fn store(self, v: f32x16, out: &mut [f32]) {
        let v: [f32; 16] = pulp::cast(v);
        out[..16].copy_from_slice(&v);
    }
}

/// A product's columns from 0 in AVX-512 registers (32 and 16 at a time), the rest in AVX2's:
/// the nested AVX-512 copy of [`Product::run`].
#[cfg(target_arch = "x86_64")]
struct OnV4<'a, 'b> {
    product: &'a Product<'b>,
    v4: V4,
    c: &'a mut [f32],
}

#[cfg(target_arch = "x86_64")]
impl NullaryFnOnce for OnV4<'_, '_> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let (p, v4) = (self.product, self.v4);
        let c = &mut self.c[..p.m * p.n];
        let mut j = 0;
        while j + 32 <= p.n {
            p.columns::<V4, 2>(v4, j, c);
            j += 32;
        }
        if j + 16 <= p.n {
            p.columns::<V4, 1>(v4, j, c);
            j += 16;
        }
        p.run_from(*v4, j, c);
    }
}

/// How A of a product is stored.
#[derive(Clone, Copy)]
pub(super) enum Layout {
    /// A(i, k) = a[i·ld + k]: row-major (activations times weights).
    Rows(usize),
    /// A(i, k) = a[k·ld + i]: the transpose of a row-major matrix (activationsᵀ times δ).
    Cols(usize),
}

/// C = init + A·B for C `[m, n]` row-major, B `[k, n]` row-major, A by `layout`; init the
/// row `bias` (`[n]`) or zero. Every C_ij adds init, then A_i0·B_0j, A_i1·B_1j, … in that
/// order.
pub(super) struct Product<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: &'a [f32],
    pub layout: Layout,
    pub b: &'a [f32],
    pub bias: Option<&'a [f32]>,
}

impl Product<'_> {
    #[inline(always)]
    fn a(&self, i: usize, k: usize) -> f32 {
        match self.layout {
            Layout::Rows(ld) => self.a[i * ld + k],
            Layout::Cols(ld) => self.a[k * ld + i],
        }
    }

    /// C = init + A·B into `c`, on the widest lanes `lanes` offer.
    #[inline(always)]
    pub fn run(&self, lanes: Lanes, c: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if let Some(v4) = lanes.v4() {
            return v4.vectorize(OnV4 {
                product: self,
                v4,
                c,
            });
        }
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if let Some(v3) = lanes.v3() {
            return self.run_from(v3, 0, c);
        }
        let _ = lanes;
        self.run_from(Plain, 0, c);
    }

    /// Columns j0 .. n: sixteen and eight at a time in `s`'s eight lanes, the rest scalar.
    #[inline(always)]
    fn run_from<S: Vector>(&self, s: S, j0: usize, c: &mut [f32]) {
        let c = &mut c[..self.m * self.n];
        let mut j = j0;
        while j + 16 <= self.n {
            self.columns::<S, 2>(s, j, c);
            j += 16;
        }
        if j + 8 <= self.n {
            self.columns::<S, 1>(s, j, c);
            j += 8;
        }
        if j < self.n {
            self.scalar_columns(j, c);
        }
    }

    /// Columns j0 .. j0 + LANES·NV of every row, MR rows at a time.
    #[inline(always)]
    fn columns<S: Vector, const NV: usize>(&self, s: S, j0: usize, c: &mut [f32]) {
        let mut i = 0;
        while i + MR <= self.m {
            self.tile::<S, MR, NV>(s, i, j0, c);
            i += MR;
        }
        match self.m - i {
            0 => {}
            1 => self.tile::<S, 1, NV>(s, i, j0, c),
            2 => self.tile::<S, 2, NV>(s, i, j0, c),
            3 => self.tile::<S, 3, NV>(s, i, j0, c),
            _ => self.tile::<S, 4, NV>(s, i, j0, c),
        }
    }

    /// Rows i0 .. i0 + R, columns j0 .. j0 + LANES·NV, in R·NV registers.
    #[inline(always)]
    fn tile<S: Vector, const R: usize, const NV: usize>(
        &self,
        s: S,
        i0: usize,
        j0: usize,
        c: &mut [f32],
    ) {
        match self.layout {
            Layout::Rows(ld) => self.tile_on::<S, R, NV, true>(s, i0, j0, ld, c),
            Layout::Cols(ld) => self.tile_on::<S, R, NV, false>(s, i0, j0, ld, c),
        }
    }

    /// [`Product::tile`] for one layout of A (`ROWS`: [`Layout::Rows`]).
    #[inline(always)]
    fn tile_on<S: Vector, const R: usize, const NV: usize, const ROWS: bool>(
        &self,
        s: S,
        i0: usize,
        j0: usize,
        ld: usize,
        c: &mut [f32],
    ) {
        let (n, kk) = (self.n, self.k);
        // A loop, not `array::from_fn`: a closure's body stays outside the AVX2 copy.
        let mut init = [s.splat(0.0); NV];
        if let Some(b) = self.bias {
            for v in 0..NV {
                init[v] = s.load(&b[j0 + S::LANES * v..]);
            }
        }
        let mut acc = [init; R];
        // The loop walks exact-size pieces (B's rows of n, Aᵀ's rows of ld, A's rows of k)
        // under one check before it, so the compiler proves every index in range and the
        // body is the loads and the fused multiply-adds alone (a range check per iteration
        // was four instructions and two branches beside ten FMAs; one-thread W1 took 0.87×
        // the time without it on a Zen 3: issue 61, docs/performance.md).
        let panel = S::LANES * NV;
        assert!(j0 + panel <= n, "a register tile past C's edge");
        let b = self.b[..kk * n].chunks_exact(n);
        if ROWS {
            let mut rows: [&[f32]; R] = [&[]; R];
            for r in 0..R {
                rows[r] = &self.a[(i0 + r) * ld..(i0 + r) * ld + kk];
            }
            for (k, row) in (0..kk).zip(b) {
                let row = &row[j0..j0 + panel];
                let mut bv = [s.splat(0.0); NV];
                for v in 0..NV {
                    bv[v] = s.load(&row[S::LANES * v..]);
                }
                for r in 0..R {
                    let a = s.splat(rows[r][k]);
                    for v in 0..NV {
                        acc[r][v] = s.mul_add(acc[r][v], a, bv[v]);
                    }
                }
            }
        } else {
            assert!(i0 + R <= ld, "a register tile past Aᵀ's edge");
            for (col, row) in self.a[..kk * ld].chunks_exact(ld).zip(b) {
                let (col, row) = (&col[i0..i0 + R], &row[j0..j0 + panel]);
                let mut bv = [s.splat(0.0); NV];
                for v in 0..NV {
                    bv[v] = s.load(&row[S::LANES * v..]);
                }
                for r in 0..R {
                    let a = s.splat(col[r]);
                    for v in 0..NV {
                        acc[r][v] = s.mul_add(acc[r][v], a, bv[v]);
                    }
                }
            }
        }
        for r in 0..R {
            let out = &mut c[(i0 + r) * n + j0..(i0 + r) * n + j0 + S::LANES * NV];
            for v in 0..NV {
                s.store(acc[r][v], &mut out[S::LANES * v..]);
            }
        }
    }

    /// The last n mod 8 columns, scalar, MR rows at a time (independent sums in flight).
    #[inline(always)]
    fn scalar_columns(&self, j0: usize, c: &mut [f32]) {
        let n = self.n;
        for j in j0..n {
            let init = self.bias.map_or(0.0, |b| b[j]);
            let mut i = 0;
            while i < self.m {
                let rows = MR.min(self.m - i);
                let mut acc = [init; MR];
                for k in 0..self.k {
                    let bkj = self.b[k * n + j];
                    for r in 0..rows {
                        // Inside the AVX2 and AVX-512 copies one `vfmadd`.
                        acc[r] = self.a(i + r, k).mul_add(bkj, acc[r]);
                    }
                }
                for r in 0..rows {
                    c[(i + r) * n + j] = acc[r];
                }
                i += rows;
            }
        }
    }
}

/// `wt` (`[cols, rows]`) = the transpose of `w` (`[rows, cols]`), both row-major: values
/// moved, not computed. In AVX2 registers eight by eight (the usual unpack, shuffle and
/// 128-bit permute network), the edges element by element.
#[inline(always)]
pub(super) fn transpose(lanes: Lanes, w: &[f32], rows: usize, cols: usize, wt: &mut [f32]) {
    let (w, wt) = (&w[..rows * cols], &mut wt[..rows * cols]);
    let (mut r8, mut c8) = (0, 0);
    #[cfg(target_arch = "x86_64")]
    if let Some(v3) = lanes.v3() {
        (r8, c8) = (rows - rows % 8, cols - cols % 8);
        for i in (0..r8).step_by(8) {
            for j in (0..c8).step_by(8) {
                transpose8(v3, w, cols, i, j, wt, rows);
            }
        }
    }
    let _ = lanes;
    for i in 0..rows {
        let from = if i < r8 { c8 } else { 0 };
        for j in from..cols {
            wt[j * rows + i] = w[i * cols + j];
        }
    }
}

/// The 8 × 8 block of `w` (row length `ld`) at (i, j) into `wt` (row length `ldt`) at (j, i).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn transpose8(v3: V3, w: &[f32], ld: usize, i: usize, j: usize, wt: &mut [f32], ldt: usize) {
    use core::arch::x86_64::__m256;
    let avx = v3.avx;
    let mut r = [avx._mm256_setzero_ps(); 8];
    for (k, rk) in r.iter_mut().enumerate() {
        let row: [f32; 8] = w[(i + k) * ld + j..(i + k) * ld + j + 8]
            .try_into()
            .expect("eight");
        *rk = pulp::cast::<[f32; 8], __m256>(row);
    }
    // Pairs of rows interleaved, then pairs of pairs, then the 128-bit halves exchanged.
    let t = [
        avx._mm256_unpacklo_ps(r[0], r[1]),
        avx._mm256_unpackhi_ps(r[0], r[1]),
        avx._mm256_unpacklo_ps(r[2], r[3]),
        avx._mm256_unpackhi_ps(r[2], r[3]),
        avx._mm256_unpacklo_ps(r[4], r[5]),
        avx._mm256_unpackhi_ps(r[4], r[5]),
        avx._mm256_unpacklo_ps(r[6], r[7]),
        avx._mm256_unpackhi_ps(r[6], r[7]),
    ];
    let u = [
        avx._mm256_shuffle_ps::<0x44>(t[0], t[2]),
        avx._mm256_shuffle_ps::<0xEE>(t[0], t[2]),
        avx._mm256_shuffle_ps::<0x44>(t[1], t[3]),
        avx._mm256_shuffle_ps::<0xEE>(t[1], t[3]),
        avx._mm256_shuffle_ps::<0x44>(t[4], t[6]),
        avx._mm256_shuffle_ps::<0xEE>(t[4], t[6]),
        avx._mm256_shuffle_ps::<0x44>(t[5], t[7]),
        avx._mm256_shuffle_ps::<0xEE>(t[5], t[7]),
    ];
    let out = [
        avx._mm256_permute2f128_ps::<0x20>(u[0], u[4]),
        avx._mm256_permute2f128_ps::<0x20>(u[1], u[5]),
        avx._mm256_permute2f128_ps::<0x20>(u[2], u[6]),
        avx._mm256_permute2f128_ps::<0x20>(u[3], u[7]),
        avx._mm256_permute2f128_ps::<0x31>(u[0], u[4]),
        avx._mm256_permute2f128_ps::<0x31>(u[1], u[5]),
        avx._mm256_permute2f128_ps::<0x31>(u[2], u[6]),
        avx._mm256_permute2f128_ps::<0x31>(u[3], u[7]),
    ];
    for (k, ok) in out.iter().enumerate() {
        let col: [f32; 8] = pulp::cast(*ok);
        wt[(j + k) * ldt + i..(j + k) * ldt + i + 8].copy_from_slice(&col);
    }
}
