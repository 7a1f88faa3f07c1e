//! Runtime dispatch of the fused host loops (the flex kernels of `kernels.rs`, HMC's host
//! chains) to the widest instruction set the CPU has.
//!
//! The workspace is built for baseline x86-64 (SSE2: four f32 lanes) so that one binary runs
//! everywhere, and it forbids `unsafe`, which a hand-written `#[target_feature]` dispatch
//! needs. [`dispatch`] runs an [`Op`] through `pulp`'s AVX2 token instead (the `unsafe` lives
//! in `pulp`): the operation, marked `#[inline(always)]` together with everything it calls,
//! is compiled a second time with AVX2 and FMA enabled, and that copy runs where the CPU has
//! them.
//!
//! The two copies compute the same bits. Rust never contracts `a·b + c` into a fused
//! multiply-add by itself, IEEE-754 makes every lane of an element-wise operation (+, ·, /,
//! √) exact-rounded whatever the vector width, and every reduction in the dispatched loops
//! has its order written out ([`dot`], [`sum`] and their [`Lanes`] versions: eight partial
//! sums added as one tree), so the wider registers change the speed, not the result.
//! `UQBENCH_SIMD=baseline` forces the baseline copy, to compare the two
//! (`docs/performance.md`); the tests check that both give the same bits. Where the CPU has
//! AVX-512 ([`Level::Avx512`]), a third copy is compiled for it: its element-wise loops
//! vectorise sixteen wide, the explicit reductions stay on AVX2's lanes, and `blocked.rs`'s
//! matrix products use AVX-512's (the same bits again); `UQBENCH_SIMD=avx2` leaves it out.

use uqbench_core::SimdCap;

#[cfg(target_arch = "x86_64")]
use pulp::x86::V4;
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
use pulp::{f32x8, x86::V3, NullaryFnOnce};

/// The instruction set a dispatched loop runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The build's baseline (SSE2 on x86-64).
    Baseline,
    /// AVX2 and FMA (x86-64-v3).
    Avx2,
    /// AVX-512 (x86-64-v4): the operation compiled for it, its explicit reductions on
    /// AVX2's lanes and the register-blocked products (`blocked.rs`) on AVX-512's.
    Avx512,
}

impl Level {
    /// The CPU's best level under `cap`.
    pub fn capped(cap: SimdCap) -> Level {
        match (cap, best()) {
            (SimdCap::Baseline, _) => Level::Baseline,
            (SimdCap::Avx2, Level::Avx512) => Level::Avx2,
            (_, best) => best,
        }
    }

    /// The cap that gives this level on this CPU ([`Level::capped`]'s inverse).
    pub fn cap(self) -> SimdCap {
        match self {
            Level::Baseline => SimdCap::Baseline,
            Level::Avx2 if best() == Level::Avx512 => SimdCap::Avx2,
            _ => SimdCap::Best,
        }
    }
}

/// The widest level this CPU supports.
pub fn best() -> Level {
    #[cfg(target_arch = "x86_64")]
    if V4::try_new().is_some() {
        return Level::Avx512;
    }
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    if V3::try_new().is_some() {
        return Level::Avx2;
    }
    Level::Baseline
}

/// The levels above the baseline that this CPU runs, for the tests that compare each with the
/// baseline bit for bit: [`dispatch_at`] runs a level the CPU lacks at the baseline, which
/// would compare the baseline with itself. Prints which levels are compared and which are
/// left out, and checks the detection against the standard library's.
pub fn levels_to_compare() -> Vec<Level> {
    let best = best();
    let ran: Vec<Level> = match best {
        Level::Baseline => vec![],
        Level::Avx2 => vec![Level::Avx2],
        Level::Avx512 => vec![Level::Avx2, Level::Avx512],
    };
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        assert_eq!(
            ran.contains(&Level::Avx2),
            avx2,
            "AVX2 detection disagrees with the standard library's"
        );
    }
    let left: Vec<Level> = [Level::Avx2, Level::Avx512]
        .into_iter()
        .filter(|l| !ran.contains(l))
        .collect();
    eprintln!("levels compared with the baseline: {ran:?}; not on this CPU: {left:?}");
    ran
}

/// An operation [`dispatch`] runs: like `pulp`'s `NullaryFnOnce`, with the [`Lanes`] its
/// reductions run on. `call` must be `#[inline(always)]`, as must the functions its hot loops
/// call: code that is not inlined into it keeps the baseline. A struct, not a closure: rustc
/// compiles a closure's body in a call shim of its own, which LLVM does not inline into the
/// AVX2 copy (measured: the closure version ran HMC at the baseline's speed, its hot loop in
/// SSE registers).
pub trait Op {
    /// What the operation returns.
    type Output;
    /// Runs the operation, its reductions on `lanes`.
    fn call(self, lanes: Lanes) -> Self::Output;
}

/// An [`Op`] with the lanes it runs on (holding the AVX2 token), for `pulp`'s `vectorize`.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
struct OnV3<F>(F, Lanes);

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
impl<F: Op> NullaryFnOnce for OnV3<F> {
    type Output = F::Output;

    #[inline(always)]
    fn call(self) -> F::Output {
        self.0.call(self.1)
    }
}

/// Runs `f` at the CPU's best level (what code without a run's settings uses: tests, and
/// the flex kernels, whose bits are the same at every level).
#[inline(always)]
pub fn dispatch<F: Op>(f: F) -> F::Output {
    dispatch_at(best(), f)
}

/// Runs `f` at `level` where the CPU has it, at the baseline otherwise.
#[inline(always)]
pub fn dispatch_at<F: Op>(level: Level, f: F) -> F::Output {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    if level != Level::Baseline {
        if let Some(v3) = V3::try_new() {
            // AVX-512: the whole operation compiled for it (its element-wise loops vectorise
            // sixteen wide), the explicit reductions on AVX2's lanes, the products on its own.
            #[cfg(target_arch = "x86_64")]
            if let (Level::Avx512, Some(v4)) = (level, V4::try_new()) {
                let lanes = Lanes {
                    v3: Some(v3),
                    v4: Some(v4),
                };
                return v4.vectorize(OnV3(f, lanes));
            }
            let lanes = Lanes {
                v3: Some(v3),
                #[cfg(target_arch = "x86_64")]
                v4: None,
            };
            return v3.vectorize(OnV3(f, lanes));
        }
    }
    f.call(Lanes::BASELINE)
}

/// The vector unit a dispatched operation's reductions run on: eight-lane AVX2 registers
/// inside [`dispatch`]'s AVX2 copy, plain arrays otherwise. Auto-vectorisation handles the
/// element-wise loops, but not a reduction whose order is written out: LLVM compiled the
/// eight partial sums of [`dot`] to four-lane registers and lane shuffles (perf annotate, HMC's
/// backward pass). Here the eight partial sums are one register, and [`Lanes::dot_rows`]
/// keeps four of them in flight (four independent dependency chains instead of one). Every
/// method gives the same bits as [`dot`] and [`sum`]: each partial sum adds the same products
/// in the same order, and the final additions are the same tree.
#[derive(Clone, Copy)]
pub struct Lanes {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    v3: Option<V3>,
    /// AVX-512, for the register-blocked products only.
    #[cfg(target_arch = "x86_64")]
    v4: Option<V4>,
}

impl Lanes {
    /// Plain arrays, whatever the CPU.
    pub const BASELINE: Lanes = Lanes {
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        v3: None,
        #[cfg(target_arch = "x86_64")]
        v4: None,
    };

    /// The AVX2 token inside [`dispatch`]'s AVX2 copy (for kernels with their own lanes,
    /// `blocked.rs`).
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    #[inline(always)]
    pub(crate) fn v3(self) -> Option<V3> {
        self.v3
    }

    /// The AVX-512 token at [`Level::Avx512`] (`blocked.rs`'s products).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(crate) fn v4(self) -> Option<V4> {
        self.v4
    }

    /// Σ a_i·b_i: [`dot`]'s bits.
    #[inline(always)]
    pub fn dot(self, a: &[f32], b: &[f32]) -> f32 {
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if let Some(v3) = self.v3 {
            return dots_v3(v3, b, [a])[0];
        }
        dot(a, b)
    }

    /// Σ a_i: [`sum`]'s bits.
    #[inline(always)]
    pub fn sum(self, a: &[f32]) -> f32 {
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if let Some(v3) = self.v3 {
            return sums_v3(v3, [a])[0];
        }
        sum(a)
    }

    /// `out[i]` = [`dot`]`(rows_i, shared)` for the rows of `rows` (`[out.len(), n]`, n =
    /// `shared.len()`), four rows at a time.
    #[inline(always)]
    pub fn dot_rows(self, shared: &[f32], rows: &[f32], out: &mut [f32]) {
        self.rows(Some(shared), rows, shared.len(), out);
    }

    /// `out[i]` = [`sum`]`(rows_i)` for the rows of `rows` (`[out.len(), n]`), four at a
    /// time.
    #[inline(always)]
    pub fn sum_rows(self, rows: &[f32], n: usize, out: &mut [f32]) {
        self.rows(None, rows, n, out);
    }

    /// [`Lanes::dot_rows`] with `shared`, [`Lanes::sum_rows`] without.
    #[inline(always)]
    fn rows(self, shared: Option<&[f32]>, rows: &[f32], n: usize, out: &mut [f32]) {
        let rows = &rows[..out.len() * n];
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if let Some(v3) = self.v3 {
            let mut blocks = out.chunks_exact_mut(4);
            let mut at = 0;
            for o in &mut blocks {
                let r = |i: usize| &rows[(at + i) * n..(at + i + 1) * n];
                let four = [r(0), r(1), r(2), r(3)];
                o.copy_from_slice(&match shared {
                    Some(y) => dots_v3(v3, y, four),
                    None => sums_v3(v3, four),
                });
                at += 4;
            }
            for o in blocks.into_remainder() {
                let one = [&rows[at * n..(at + 1) * n]];
                *o = match shared {
                    Some(y) => dots_v3(v3, y, one),
                    None => sums_v3(v3, one),
                }[0];
                at += 1;
            }
            return;
        }
        for (o, row) in out.iter_mut().zip(rows.chunks_exact(n.max(1))) {
            *o = shared.map_or_else(|| sum(row), |y| dot(row, y));
        }
    }
}

/// The final additions of eight partial sums and the tail, the tree every reduction uses.
#[inline(always)]
fn tree(acc: [f32; 8], tail: f32) -> f32 {
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail
}

/// Σ a_i·b_i with eight interleaved partial sums (partial sum i adds the products at
/// i, i + 8, i + 16, …), the elements past the last multiple of eight summed in order
/// ("the tail"), added as one fixed tree (`tree`): the same result whatever the vector width.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    tree(acc, tail)
}

/// Σ a_i, as [`dot`] with ones.
#[inline(always)]
pub fn sum(a: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let ca = a.chunks_exact(8);
    let ra = ca.remainder();
    for x in ca {
        for i in 0..8 {
            acc[i] += x[i];
        }
    }
    let tail: f32 = ra.iter().sum();
    tree(acc, tail)
}

/// Eight floats from a slice of eight.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[inline(always)]
fn load(x: &[f32]) -> f32x8 {
    let x: [f32; 8] = x.try_into().expect("eight lanes");
    pulp::cast(x)
}

/// [`dot`]`(rows_i, shared)` for K rows of `shared.len()` at once, in AVX2 registers.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[inline(always)]
fn dots_v3<const K: usize>(v3: V3, shared: &[f32], rows: [&[f32]; K]) -> [f32; K] {
    let n = shared.len();
    let rows: [&[f32]; K] = rows.map(|r| &r[..n]);
    let body = n - n % 8;
    let mut acc = [v3.splat_f32x8(0.0); K];
    for c in (0..body).step_by(8) {
        let y = load(&shared[c..c + 8]);
        for i in 0..K {
            acc[i] = v3.add_f32x8(acc[i], v3.mul_f32x8(load(&rows[i][c..c + 8]), y));
        }
    }
    // A loop, not `array::from_fn`: its closure was not inlined into the AVX2 copy.
    let mut out = [0.0f32; K];
    for i in 0..K {
        let mut tail = 0.0f32;
        for (x, y) in rows[i][body..].iter().zip(&shared[body..]) {
            tail += x * y;
        }
        out[i] = tree(pulp::cast(acc[i]), tail);
    }
    out
}

/// [`sum`] of K rows of equal length at once, in AVX2 registers.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[inline(always)]
fn sums_v3<const K: usize>(v3: V3, rows: [&[f32]; K]) -> [f32; K] {
    let n = rows[0].len();
    let rows: [&[f32]; K] = rows.map(|r| &r[..n]);
    let body = n - n % 8;
    let mut acc = [v3.splat_f32x8(0.0); K];
    for c in (0..body).step_by(8) {
        for i in 0..K {
            acc[i] = v3.add_f32x8(acc[i], load(&rows[i][c..c + 8]));
        }
    }
    let mut out = [0.0f32; K];
    for i in 0..K {
        let tail: f32 = rows[i][body..].iter().sum();
        out[i] = tree(pulp::cast(acc[i]), tail);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Eight partial sums of a·b and an element-wise expression.
    struct Sums<'a> {
        a: &'a [f32],
        b: &'a [f32],
    }

    impl Op for Sums<'_> {
        type Output = ([f32; 8], Vec<f32>);

        #[inline(always)]
        fn call(self, _: Lanes) -> Self::Output {
            let mut acc = [0.0f32; 8];
            for (x, y) in self.a.chunks_exact(8).zip(self.b.chunks_exact(8)) {
                for i in 0..8 {
                    acc[i] += x[i] * y[i];
                }
            }
            let v = (self.a.iter().zip(self.b))
                .map(|(x, y)| (x * y + 0.5).sqrt() / (y.abs() + 1e-3))
                .collect();
            (acc, v)
        }
    }

    #[test]
    fn both_levels_give_the_same_bits() {
        // A reduction with its order written out and element-wise arithmetic: the AVX2 copy
        // must reproduce the baseline's bits exactly (the module's claim), on inputs whose
        // sums are far from exact in f32.
        let a: Vec<f32> = (0..1003)
            .map(|i| ((i as f32) * 0.731).sin() * 1e3)
            .collect();
        let b: Vec<f32> = (0..1003).map(|i| ((i as f32) * 1.37).cos() / 7.0).collect();
        let run = |level: Level| dispatch_at(level, Sums { a: &a, b: &b });
        let base = run(Level::Baseline);
        for level in levels_to_compare() {
            let wide = run(level);
            assert_eq!(
                base.0.map(f32::to_bits),
                wide.0.map(f32::to_bits),
                "partial sums, {level:?}"
            );
            assert!(base
                .1
                .iter()
                .zip(&wide.1)
                .all(|(x, y)| x.to_bits() == y.to_bits()));
        }
    }

    /// Every [`Lanes`] reduction over `rows` × `n` with `shared`, as bits.
    struct Reductions<'a> {
        shared: &'a [f32],
        rows: &'a [f32],
        count: usize,
    }

    impl Op for Reductions<'_> {
        type Output = Vec<u32>;

        #[inline(always)]
        fn call(self, lanes: Lanes) -> Vec<u32> {
            let n = self.shared.len();
            let mut dots = vec![0.0f32; self.count];
            lanes.dot_rows(self.shared, self.rows, &mut dots);
            let mut sums = vec![0.0f32; self.count];
            lanes.sum_rows(self.rows, n, &mut sums);
            let row = |i: usize| &self.rows[i * n..(i + 1) * n];
            let singles =
                (0..self.count).flat_map(|i| [lanes.dot(row(i), self.shared), lanes.sum(row(i))]);
            (dots.into_iter().chain(sums).chain(singles))
                .map(f32::to_bits)
                .collect()
        }
    }

    #[test]
    fn lanes_reproduce_the_scalar_reductions() {
        // The AVX2 reductions (one and four rows at a time, with and without a tail) give
        // the bits of the scalar `dot` and `sum`, and so do the baseline's.
        for (n, count) in [(200, 20), (203, 9), (7, 5), (16, 1), (0, 3)] {
            let shared: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.731).sin() * 1e3).collect();
            let rows: Vec<f32> = (0..n * count)
                .map(|i| ((i as f32) * 1.37).cos() / 7.0)
                .collect();
            let row = |i: usize| &rows[i * n..(i + 1) * n];
            let mut want: Vec<u32> = (0..count).map(|i| dot(row(i), &shared).to_bits()).collect();
            want.extend((0..count).map(|i| sum(row(i)).to_bits()));
            want.extend(
                (0..count).flat_map(|i| [dot(row(i), &shared), sum(row(i))].map(f32::to_bits)),
            );
            for level in std::iter::once(Level::Baseline).chain(levels_to_compare()) {
                let got = dispatch_at(
                    level,
                    Reductions {
                        shared: &shared,
                        rows: &rows,
                        count,
                    },
                );
                assert_eq!(got, want, "n = {n}, rows = {count}, {level:?}");
            }
        }
    }
}
