//! The machine's own f32 peaks, measured in the process (issue 61), so that a training rate
//! can be read as a fraction of what this CPU can do rather than of another machine's figure:
//!
//! - **The large product**: C = A·B with A `[2000, 256]`, B `[256, 512]` through the register
//!   tiles the host trainer's products use (`point_major`), one product per worker thread at
//!   once, the best of three timings of about 0.15 s each (one timing where a single product
//!   takes longer: the baseline level, whose fused multiply-add is a library call). B is not
//!   packed: its rows are 2 KiB apart, so a tile's column panel maps to few sets of an 8-way
//!   32 KiB level-1 cache and is reread from level 2 (docs/performance.md, 2026-11-29); on
//!   such machines this reads below the tiles' rate on the trainer's small operands.
//! - **The FMA-bound peak**: independent chains of fused multiply-adds held in registers (16
//!   chains of 16 lanes at AVX-512, 12 of 8 at AVX2: more than the two FMA ports × four cycles
//!   of latency that keep a core busy), on every worker thread. It is measured rather than
//!   computed from a clock, lanes and ports, so it needs no table of port counts and sees the
//!   clock the cores run at under this load; the best of three timings. The baseline level
//!   has none (`None`).
//!
//! Both run at the [`Level`] given (the run's `--simd` cap) on `threads` threads.

use std::sync::Barrier;
use std::time::Instant;

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
use pulp::x86::V3;
#[cfg(target_arch = "x86_64")]
use pulp::x86::V4;

use super::simd::{dispatch_at, Lanes, Level, Op};

/// The large product's shape (m, n, k).
pub const PRODUCT: (usize, usize, usize) = (2000, 512, 256);
/// Seconds a timing of the products aims at.
const TIMING: f64 = 0.15;
/// Timings, the best kept.
const TRIALS: usize = 3;
/// Iterations of the FMA chains per thread (each iteration one FMA per chain).
const FMA_ITERATIONS: u64 = 20_000_000;
/// Independent FMA chains in AVX-512 registers (16 lanes each) and in AVX2's (8 lanes).
const CHAINS_V4: usize = 16;
const CHAINS_V3: usize = 12;

/// What [`measure`] found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peak {
    /// The level measured at.
    pub level: Level,
    /// Worker threads.
    pub threads: usize,
    /// The large product's rate, GFLOP/s (2·m·n·k per product, all threads together).
    pub product_gflops: f64,
    /// The FMA-bound peak, GFLOP/s (2 per lane per fused multiply-add, all threads); `None`
    /// at the baseline level.
    pub fma_gflops: Option<f64>,
}

/// Measures both peaks at `level` on `threads` threads (about a second).
pub fn measure(level: Level, threads: usize) -> Peak {
    let threads = threads.max(1);
    let (m, n, k) = PRODUCT;
    let products = |count: usize| {
        move |_: usize| {
            let (a, b) = (
                (0..m * k).map(|i| (i % 97) as f32 * 0.01).collect(),
                (0..k * n).map(|i| (i % 89) as f32 * 0.01).collect(),
            );
            let c = vec![0.0f32; m * n];
            move || dispatch_at(level, Products { count, a, b, c })
        }
    };
    let one = on_threads(1, products(1));
    let count = ((TIMING / one) as usize).clamp(1, 64);
    let trials = if count == 1 { 1 } else { TRIALS };
    let flops = 2.0 * (m * n * k) as f64 * count as f64 * threads as f64;
    let best = (0..trials)
        .map(|_| on_threads(threads, products(count)))
        .fold(f64::INFINITY, f64::min);
    let fma_gflops = (level != Level::Baseline).then(|| {
        // The best of three, as for the product: one timing on a shared machine read half the
        // peak of the next (94.7 against 178 GFLOP/s on a two-core AMD EPYC, 2026-11-29).
        let per_thread = (0..TRIALS)
            .map(|_| {
                on_threads(threads, |t| {
                    move || dispatch_at(level, Chains { seed: t as f32 })
                })
            })
            .fold(f64::INFINITY, f64::min);
        // Flops per thread: chains × lanes × 2 per iteration, from the level actually run.
        let per_iteration = match level {
            Level::Avx512 => CHAINS_V4 * 16 * 2,
            _ => CHAINS_V3 * 8 * 2,
        } as f64;
        per_iteration * FMA_ITERATIONS as f64 * threads as f64 / per_thread / 1e9
    });
    Peak {
        level,
        threads,
        product_gflops: flops / best / 1e9,
        fma_gflops,
    }
}

/// On `threads` threads, `prepare(t)` (untimed: allocations) and then the work it returns,
/// started together; the wall seconds from the common start to the last one's end.
fn on_threads<W, R>(threads: usize, prepare: impl Fn(usize) -> W + Sync) -> f64
where
    W: FnOnce() -> R,
{
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, prepare) = (&barrier, &prepare);
                s.spawn(move || {
                    let work = prepare(t);
                    barrier.wait();
                    std::hint::black_box(work());
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        for h in handles {
            h.join().expect("a peak thread panicked");
        }
        start.elapsed().as_secs_f64()
    })
}

/// `count` large products C = A·B on one thread (its own matrices).
struct Products {
    count: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl Op for Products {
    type Output = f32;

    #[inline(always)]
    fn call(mut self, lanes: Lanes) -> f32 {
        let (m, n, _) = PRODUCT;
        let mut check = 0.0;
        for _ in 0..self.count {
            super::point_major::product(lanes, PRODUCT, &self.a, &self.b, &mut self.c);
            check += self.c[(m * n) / 2];
        }
        check
    }
}

/// Independent chains x ← x·b + a of fused multiply-adds (b < 1: the chains converge to
/// a/(1 − b), no overflow, no subnormals), returning their sum so none is optimised away.
struct Chains {
    seed: f32,
}

impl Op for Chains {
    type Output = f32;

    #[inline(always)]
    fn call(self, lanes: Lanes) -> f32 {
        let iterations = std::hint::black_box(FMA_ITERATIONS);
        #[cfg(target_arch = "x86_64")]
        if let Some(v4) = lanes.v4() {
            return chains_v4(v4, iterations, self.seed);
        }
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if let Some(v3) = lanes.v3() {
            return chains_v3(v3, iterations, self.seed);
        }
        let _ = (lanes, iterations);
        self.seed
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn chains_v4(v4: V4, iterations: u64, seed: f32) -> f32 {
    let (a, b) = (v4.splat_f32x16(seed + 0.5), v4.splat_f32x16(0.999));
    let mut acc: [pulp::f32x16; CHAINS_V4] = std::array::from_fn(|i| v4.splat_f32x16(i as f32));
    for _ in 0..iterations {
        for x in &mut acc {
            *x = v4.mul_add_f32x16(*x, b, a);
        }
    }
    acc.iter()
        .map(|x| pulp::cast::<_, [f32; 16]>(*x).iter().sum::<f32>())
        .sum()
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[inline(always)]
fn chains_v3(v3: V3, iterations: u64, seed: f32) -> f32 {
    let (a, b) = (v3.splat_f32x8(seed + 0.5), v3.splat_f32x8(0.999));
    let mut acc: [pulp::f32x8; CHAINS_V3] = std::array::from_fn(|i| v3.splat_f32x8(i as f32));
    for _ in 0..iterations {
        for x in &mut acc {
            *x = v3.mul_add_f32x8(*x, b, a);
        }
    }
    acc.iter()
        .map(|x| pulp::cast::<_, [f32; 8]>(*x).iter().sum::<f32>())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_large_product_is_the_product() {
        // The timed product computes A·B: checked against a plain triple loop on a corner.
        let (m, n, k) = (10, 48, 7);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 - 6.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 * 0.5).collect();
        let mut c = vec![0.0f32; m * n];
        struct One<'a>(&'a [f32], &'a [f32], &'a mut [f32], (usize, usize, usize));
        impl Op for One<'_> {
            type Output = ();
            #[inline(always)]
            fn call(self, lanes: Lanes) {
                super::super::point_major::product(lanes, self.3, self.0, self.1, self.2);
            }
        }
        dispatch_at(super::super::simd::best(), One(&a, &b, &mut c, (m, n, k)));
        for i in 0..m {
            for j in 0..n {
                // Small integers and halves: every sum is exact in f32.
                let want: f32 = (0..k).map(|q| a[i * k + q] * b[q * n + j]).sum();
                assert_eq!(c[i * n + j], want, "({i}, {j})");
            }
        }
    }

    #[test]
    fn the_peaks_are_positive_and_the_product_below_the_fma_bound() {
        let p = measure(super::super::simd::best(), 1);
        assert!(
            p.product_gflops > 0.0 && p.product_gflops.is_finite(),
            "{p:?}"
        );
        if let Some(fma) = p.fma_gflops {
            // A product cannot beat the fused multiply-adds it is made of (10% for timing
            // noise between the two measurements).
            assert!(p.product_gflops < 1.1 * fma, "{p:?}");
        }
    }
}
