//! Runtime dispatch of the fused host loops (the flex kernels of `kernels.rs`, HMC's host
//! chains) to the widest instruction set the CPU has.
//!
//! The workspace is built for baseline x86-64 (SSE2: four f32 lanes) so that one binary runs
//! everywhere, and it forbids `unsafe`, which a hand-written `#[target_feature]` dispatch
//! needs. [`dispatch`] runs a closure through `pulp`'s AVX2 token instead (the `unsafe` lives
//! in `pulp`): the closure, marked `#[inline(always)]` together with everything it calls,
//! is compiled a second time with AVX2 and FMA enabled, and that copy runs where the CPU has
//! them.
//!
//! The two copies compute the same bits. Rust never contracts `a·b + c` into a fused
//! multiply-add by itself, IEEE-754 makes every lane of an element-wise operation (+, ·, /,
//! √) exact-rounded whatever the vector width, and every reduction in the dispatched loops
//! has its order written out (`hmc/host.rs`'s eight partial sums), so the wider registers
//! change the speed, not the result. `UQBENCH_SIMD=baseline` forces the baseline copy, to
//! compare the two (`docs/performance.md`); the tests check that both give the same bits.

use std::sync::OnceLock;

use pulp::NullaryFnOnce;

/// The instruction set a dispatched loop runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The build's baseline (SSE2 on x86-64).
    Baseline,
    /// AVX2 and FMA (x86-64-v3).
    Avx2,
}

/// The environment variable that forces [`Level::Baseline`] when set to `baseline`.
pub const SIMD_ENV: &str = "UQBENCH_SIMD";

/// The level [`dispatch`] uses: the CPU's best, unless [`SIMD_ENV`] says `baseline`. Read
/// once per process.
pub fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let forced = std::env::var(SIMD_ENV).is_ok_and(|v| v.eq_ignore_ascii_case("baseline"));
        if forced {
            Level::Baseline
        } else {
            best()
        }
    })
}

/// The widest level this CPU supports.
pub fn best() -> Level {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    if pulp::x86::V3::try_new().is_some() {
        return Level::Avx2;
    }
    Level::Baseline
}

/// Runs `f` at [`level`]. `f` is a struct whose `call` is `#[inline(always)]`, as are the
/// functions its hot loops call: code that is not inlined into it keeps the baseline. Not a
/// closure: rustc compiles a closure's body in a call shim of its own, which LLVM does not
/// inline into the AVX2 copy (measured: the closure version ran HMC at the baseline's speed,
/// its hot loop in SSE registers).
#[inline(always)]
pub fn dispatch<F: NullaryFnOnce>(f: F) -> F::Output {
    dispatch_at(level(), f)
}

/// Runs `f` at `level` where the CPU has it, at the baseline otherwise.
#[inline(always)]
pub fn dispatch_at<F: NullaryFnOnce>(level: Level, f: F) -> F::Output {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    if level == Level::Avx2 {
        if let Some(v3) = pulp::x86::V3::try_new() {
            return v3.vectorize(f);
        }
    }
    f.call()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Eight partial sums of a·b and an element-wise expression.
    struct Sums<'a> {
        a: &'a [f32],
        b: &'a [f32],
    }

    impl NullaryFnOnce for Sums<'_> {
        type Output = ([f32; 8], Vec<f32>);

        #[inline(always)]
        fn call(self) -> Self::Output {
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
        let (base, wide) = (run(Level::Baseline), run(Level::Avx2));
        assert_eq!(
            base.0.map(f32::to_bits),
            wide.0.map(f32::to_bits),
            "partial sums"
        );
        assert!(base
            .1
            .iter()
            .zip(&wide.1)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}
