//! A counter-based random generator evaluated on the device: the engine's dropout noise and
//! bootstrap batches are computed where they are used, with no host work or upload inside
//! the epoch loop.
//!
//! Every number is a hash of (replica keys, draw counter, element index). A replica has two
//! 31-bit keys, uploaded once per chunk: key A is its identifier within the (setting, method)
//! job, (repetition·members + member)·8 + purpose, distinct between any two replicas and
//! streams by construction; key B hashes its seed and the stream's purpose, so the numbers
//! also depend on the experiment, setting and base seed. The counter names the draw (a step,
//! a pass) and the index is the element's position within the replica's tensor:
//!
//!   x = mix((mix(B ⊕ c) + index) mod 2³¹),   bits = mix(x ⊕ mix(A ⊕ c′)).
//!
//! For a fixed counter and element, mix(A ⊕ c′) is injective in A and the outer mix is a
//! bijection, so two replicas whose inner hashes x coincide (equal B, or B's offset by less
//! than the element count, which among 12 000 replicas happens often) still draw different
//! numbers: no two replicas of a job share a stream, however their seeds fall. (With key B
//! alone, 31 bits, two of 12 000 replicas would share a stream with probability 3%.)
//!
//! So a replica's numbers depend only on its own keys, never on its chunk, and the same keys
//! give the same numbers on every backend: the hash uses only integer operations whose low
//! 31 bits agree between the i32 (flex, wgpu) and i64 (ndarray) integer tensors (values are
//! kept in [0, 2³¹) by masking after every multiply, add and left shift, so right shifts are
//! logical and products agree in their low bits).

use std::cell::RefCell;
use std::collections::HashMap;

use burn::tensor::{Device, Int, Tensor, TensorData};
use uqbench_anchor::seed::splitmix64;

use crate::cpu::simd::{self, Level};

/// The 31-bit mask.
const M31: i32 = 0x7FFF_FFFF;
/// The multiplier of the integer hash (Mueller's 0x45d9f3b).
const MUL: i32 = 0x045D_9F3B;
/// Streams (purposes) per replica that key A keeps apart.
pub(crate) const PURPOSES: u64 = 8;
/// Replica identifiers must stay below this for key A to be injective in 31 bits.
pub(crate) const MAX_REPLICA_ID: u64 = (1 << 31) / PURPOSES;

/// The 31-bit integer hash, host version (for keys and tests).
pub(crate) fn mix_host(mut x: i64) -> i64 {
    let m = i64::from(M31);
    x &= m;
    x ^= x >> 16;
    x = (x * i64::from(MUL)) & m;
    x ^= x >> 16;
    x = (x * i64::from(MUL)) & m;
    x ^ (x >> 16)
}

/// The same hash on a device tensor of values in [0, 2³¹).
fn mix<const D: usize>(x: Tensor<D, Int>) -> Tensor<D, Int> {
    let x = x.clone().bitwise_xor(x.bitwise_right_shift_scalar(16));
    let x = x.mul_scalar(MUL).bitwise_and_scalar(M31);
    let x = x.clone().bitwise_xor(x.bitwise_right_shift_scalar(16));
    let x = x.mul_scalar(MUL).bitwise_and_scalar(M31);
    x.clone().bitwise_xor(x.bitwise_right_shift_scalar(16))
}

/// Key A of a replica's stream: its identifier and the purpose, injective (see the module).
pub(crate) fn key_a(id: u64, purpose: u64) -> i64 {
    debug_assert!(id < MAX_REPLICA_ID && purpose < PURPOSES);
    (id * PURPOSES + purpose) as i64
}

/// Key B of a replica's stream: 31 bits of its seed and the purpose.
pub(crate) fn key_b(seed: u64, purpose: u64) -> i64 {
    (splitmix64(seed ^ splitmix64(purpose)) >> 33) as i64
}

/// The draw counter's two 31-bit keys (c for key B's chain, c′ for key A's).
fn counter_keys(counter: u64) -> (i64, i64) {
    (
        mix_host(splitmix64(counter) as i64 >> 1),
        mix_host(splitmix64(counter ^ 0x5851_F42D_4C95_7F2D) as i64 >> 1),
    )
}

/// The host version of one element's 31 bits, element by element (the tests' reference).
#[cfg(test)]
pub(crate) fn bits_host(seed: u64, id: u64, purpose: u64, counter: u64, index: i64) -> i64 {
    let (c, c2) = counter_keys(counter);
    let base = mix_host(key_b(seed, purpose) ^ c);
    let x = mix_host((base + index) & i64::from(M31));
    mix_host(x ^ mix_host(key_a(id, purpose) ^ c2))
}

/// [`mix_host`] on u32 values in [0, 2³¹): the same bits (a product's low 31 bits do not
/// depend on the width it is computed in), in a form the compiler vectorises.
#[inline(always)]
fn mix32(mut x: u32) -> u32 {
    const M: u32 = M31 as u32;
    x ^= x >> 16;
    x = x.wrapping_mul(MUL as u32) & M;
    x ^= x >> 16;
    x = x.wrapping_mul(MUL as u32) & M;
    x ^ (x >> 16)
}

/// One replica's stream of one purpose on the host: the numbers [`DeviceRng`] computes for it
/// on the device, element for element (the host execution's noise and mini-batches,
/// `cpu/trainer.rs`). Integer bits and uniforms are exact on both; normals go through f32
/// `ln` and `cos` (on the host `cpu::math`'s vectorisable ones), whose last bits may differ
/// between the host's and a backend's. The hash
/// loops run at the stream's instruction set ([`HostStream::at`]).
#[derive(Debug, Clone, Copy)]
pub struct HostStream {
    key_a: i64,
    key_b: i64,
    level: Level,
}

/// The hash of a draw's elements as an operation for [`simd::dispatch_at`]: 31 bits per
/// element, or the uniform (b + ½)·2⁻²⁴ of 24 of them.
struct Hash<'a> {
    base: u32,
    a: u32,
    out: HashOut<'a>,
}

enum HashOut<'a> {
    Bits(&'a mut [u32]),
    Uniform(&'a mut [f32]),
}

impl simd::Op for Hash<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self, _: simd::Lanes) {
        let (base, a) = (self.base, self.a);
        let bits = |i: usize| mix32(mix32(base.wrapping_add(i as u32) & M31 as u32) ^ a);
        match self.out {
            HashOut::Bits(out) => {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = bits(i);
                }
            }
            HashOut::Uniform(out) => {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = ((bits(i) >> 7) as f32 + 0.5) * (1.0 / 16_777_216.0);
                }
            }
        }
    }
}

impl HostStream {
    /// The stream of the replica with this seed and identifier, for `purpose`.
    pub fn new(seed: u64, id: u64, purpose: u64) -> HostStream {
        HostStream {
            key_a: key_a(id, purpose),
            key_b: key_b(seed, purpose),
            level: Level::Baseline,
        }
    }

    /// The same stream, its loops at `level` (the same numbers at every level).
    pub fn at(self, level: Level) -> HostStream {
        HostStream { level, ..self }
    }

    /// The per-draw keys: the inner chain's base and the outer xor (see the module).
    fn keys(&self, counter: u64) -> (u32, u32) {
        let (c, c2) = counter_keys(counter);
        (
            mix_host(self.key_b ^ c) as u32,
            mix_host(self.key_a ^ c2) as u32,
        )
    }

    /// 31 random bits per element of draw `counter` into `out` (elements 0, 1, … of the
    /// replica's tensor, row-major): [`DeviceRng::bits`].
    pub fn bits(&self, counter: u64, out: &mut [u32]) {
        let (base, a) = self.keys(counter);
        let out = HashOut::Bits(out);
        simd::dispatch_at(self.level, Hash { base, a, out });
    }

    /// Uniforms in (0, 1), (b + ½)·2⁻²⁴ from 24 of the bits: [`DeviceRng::uniform`], exactly.
    pub fn uniform(&self, counter: u64, out: &mut [f32]) {
        let (base, a) = self.keys(counter);
        let out = HashOut::Uniform(out);
        simd::dispatch_at(self.level, Hash { base, a, out });
    }

    /// Standard normals by Box–Muller from the uniforms of draws 2c and 2c + 1:
    /// [`DeviceRng::normal`].
    pub fn normal(&self, counter: u64, out: &mut [f32]) {
        let mut u2 = vec![0.0f32; out.len()];
        self.uniform(2 * counter, out);
        self.uniform(2 * counter + 1, &mut u2);
        // The vectorisable ln and cos(2π·) of `cpu::math` (within an ulp or two of the
        // standard library's scalar calls, which cost most of a Langevin step's noise).
        for (o, &v) in out.iter_mut().zip(&u2) {
            *o = (crate::cpu::math::ln(*o) * -2.0).sqrt() * crate::cpu::math::cos_2pi(v);
        }
    }

    /// `out.len()` indices below n, with replacement: [`DeviceRng::below`], exactly (the
    /// uniform times n in f32, floored and clamped: every step exactly rounded in IEEE f32 on
    /// both).
    pub fn below(&self, counter: u64, n: usize, out: &mut [usize]) {
        let mut u = vec![0.0f32; out.len()];
        self.uniform(counter, &mut u);
        for (o, &v) in out.iter_mut().zip(&u) {
            *o = ((v * n as f32).floor() as usize).min(n - 1);
        }
    }

    /// A uniformly random permutation of 0..n: [`DeviceRng::permutation`], the order of n
    /// random 31-bit keys (equal keys, about one pair in 2³¹/n², in index order).
    pub fn permutation(&self, counter: u64, n: usize) -> Vec<usize> {
        let mut bits = vec![0u32; n];
        self.bits(counter, &mut bits);
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| (bits[i], i));
        order
    }
}

/// One stream per replica of a chunk, on the device.
pub struct DeviceRng {
    /// Per replica, key A `[R, 1, 1]`.
    keys_a: Tensor<3, Int>,
    /// Per replica, key B `[R, 1, 1]`.
    keys_b: Tensor<3, Int>,
    device: Device,
    /// Element indices `[1, n, k]` per shape, made once.
    indices: RefCell<HashMap<(usize, usize), Tensor<3, Int>>>,
}

impl DeviceRng {
    /// The streams of replicas with these seeds and identifiers (unique within the job: see
    /// the module) for one purpose (a small number below [`PURPOSES`] naming the stream:
    /// noise, prediction noise, batches). Uploads the keys once.
    pub fn new(seeds: &[u64], ids: &[u64], purpose: u64, device: &Device) -> DeviceRng {
        let up =
            |keys: Vec<i32>| Tensor::from_data(TensorData::new(keys, [seeds.len(), 1, 1]), device);
        DeviceRng {
            keys_a: up(ids.iter().map(|&id| key_a(id, purpose) as i32).collect()),
            keys_b: up(seeds.iter().map(|&s| key_b(s, purpose) as i32).collect()),
            device: device.clone(),
            indices: RefCell::new(HashMap::new()),
        }
    }

    fn index(&self, n: usize, k: usize) -> Tensor<3, Int> {
        self.indices
            .borrow_mut()
            .entry((n, k))
            .or_insert_with(|| {
                Tensor::<1, Int>::arange(0..(n * k) as i64, &self.device)
                    .cast(self.keys_b.dtype())
                    .reshape([1, n, k])
            })
            .clone()
    }

    /// 31 random bits per element `[R, n, k]` for draw `counter`.
    pub fn bits(&self, counter: u64, n: usize, k: usize) -> Tensor<3, Int> {
        let (c, c2) = counter_keys(counter);
        let base = mix(self.keys_b.clone().bitwise_xor_scalar(c as i32));
        let x = mix((base + self.index(n, k)).bitwise_and_scalar(M31));
        let a = mix(self.keys_a.clone().bitwise_xor_scalar(c2 as i32));
        let dims = x.dims();
        mix(x.bitwise_xor(a.expand(dims)))
    }

    /// Uniforms in (0, 1) `[R, n, k]`: 24 bits, (b + ½)·2⁻²⁴, so never 0 or 1.
    pub fn uniform(&self, counter: u64, n: usize, k: usize) -> Tensor<3> {
        self.bits(counter, n, k)
            .bitwise_right_shift_scalar(7)
            .float()
            .add_scalar(0.5)
            .mul_scalar(1.0 / 16_777_216.0)
    }

    /// Standard normals `[R, n, k]` by Box–Muller from the uniforms of draws 2c and 2c + 1.
    pub fn normal(&self, counter: u64, n: usize, k: usize) -> Tensor<3> {
        let u1 = self.uniform(2 * counter, n, k);
        let u2 = self.uniform(2 * counter + 1, n, k);
        u1.log().mul_scalar(-2.0).sqrt() * u2.mul_scalar(2.0 * std::f64::consts::PI).cos()
    }

    /// Per replica, `size` indices below `n` `[R, size]` (with replacement).
    pub fn below(&self, counter: u64, n: usize, size: usize) -> Tensor<2, Int> {
        let r = self.keys_b.dims()[0];
        let u = self.uniform(counter, size, 1).reshape([r, size]);
        u.mul_scalar(n as f64).floor().int().clamp(0, n as i64 - 1)
    }

    /// Per replica, a uniformly random permutation of 0..n `[R, n]`: the order of n random
    /// 31-bit keys.
    pub fn permutation(&self, counter: u64, n: usize) -> Tensor<2, Int> {
        let r = self.keys_b.dims()[0];
        self.bits(counter, n, 1).reshape([r, n]).argsort(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{open_device, BackendKind};

    fn ints(t: Tensor<3, Int>) -> Vec<i64> {
        t.into_data().convert::<i64>().iter::<i64>().collect()
    }

    #[test]
    fn every_backend_computes_the_host_hash_and_chunks_do_not_matter() {
        let seeds = [3u64, u64::MAX, 1 << 40];
        let ids = [0u64, 17, 5];
        for kind in BackendKind::ALL {
            let device = open_device(*kind, true).unwrap();
            let rng = DeviceRng::new(&seeds, &ids, 7, &device);
            let bits = ints(rng.bits(11, 4, 5));
            for (r, (&seed, &id)) in seeds.iter().zip(&ids).enumerate() {
                for i in 0..20 {
                    assert_eq!(
                        bits[r * 20 + i],
                        bits_host(seed, id, 7, 11, i as i64),
                        "{kind} r{r} i{i}"
                    );
                }
            }
            // The second replica alone draws what it draws in the batch.
            let alone = ints(DeviceRng::new(&seeds[1..2], &ids[1..2], 7, &device).bits(11, 4, 5));
            assert_eq!(alone, bits[20..40]);
        }
    }

    #[test]
    fn the_host_draws_the_devices_indices() {
        // `below_host` must give the device's mini-batch indices exactly (the host trainer's
        // EnsBS steps use them in place of the tensor route's), for several replicas, draws
        // and sizes, n not a power of two.
        let (seeds, ids) = ([3u64, u64::MAX, 1 << 40, 77], [0u64, 17, 5, 1234]);
        let dev = open_device(BackendKind::Flex, true).unwrap();
        let rng = DeviceRng::new(&seeds, &ids, 2, &dev);
        for (counter, n, size) in [(1u64, 50, 25), (2, 50, 25), (917, 7, 40), (3, 1000, 13)] {
            let device = ints(rng.below(counter, n, size).reshape([seeds.len(), size, 1]));
            for r in 0..seeds.len() {
                let mut host = vec![0usize; size];
                HostStream::new(seeds[r], ids[r], 2).below(counter, n, &mut host);
                let want: Vec<usize> = device[r * size..(r + 1) * size]
                    .iter()
                    .map(|&v| v as usize)
                    .collect();
                assert_eq!(host, want, "replica {r}, draw {counter}, n {n}");
            }
        }
    }

    #[test]
    fn the_host_stream_draws_the_devices_numbers() {
        // The host execution's noise and mini-batch orders must be the device's: bits,
        // uniforms and permutations exactly; normals (through f32 ln and cos, whose last bit
        // may differ between implementations) within a few ulps.
        let (seeds, ids) = ([3u64, u64::MAX, 1 << 40], [0u64, 17, 5]);
        let dev = open_device(BackendKind::Flex, true).unwrap();
        let rng = DeviceRng::new(&seeds, &ids, 5, &dev);
        let floats = |t: Tensor<3>| -> Vec<f32> { t.into_data().iter::<f32>().collect() };
        let (uniform, normal) = (floats(rng.uniform(9, 7, 3)), floats(rng.normal(9, 7, 3)));
        let perm: Vec<i64> = (rng.permutation(4, 50).into_data().convert::<i64>())
            .iter::<i64>()
            .collect();
        for r in 0..3 {
            let host = HostStream::new(seeds[r], ids[r], 5);
            let mut u = vec![0.0f32; 21];
            host.uniform(9, &mut u);
            assert_eq!(u, uniform[r * 21..(r + 1) * 21], "uniforms, replica {r}");
            let mut z = vec![0.0f32; 21];
            host.normal(9, &mut z);
            for (a, b) in z.iter().zip(&normal[r * 21..(r + 1) * 21]) {
                assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "normal {a} vs {b}");
            }
            let want: Vec<usize> = perm[r * 50..(r + 1) * 50]
                .iter()
                .map(|&v| v as usize)
                .collect();
            assert_eq!(host.permutation(4, 50), want, "permutation, replica {r}");
        }
    }

    #[test]
    fn replicas_with_equal_seeds_still_draw_different_streams() {
        // Key B alone (31 bits) would give two replicas with equal seeds the same stream; key A
        // (their identifiers) keeps them apart at every element.
        let device = Device::flex();
        let rng = DeviceRng::new(&[9, 9, 9], &[0, 1, 2], 1, &device);
        let b = ints(rng.bits(0, 50, 32));
        let (r0, r1, r2) = (&b[..1600], &b[1600..3200], &b[3200..]);
        assert!(r0.iter().zip(r1).all(|(a, b)| a != b));
        assert!(r0.iter().zip(r2).all(|(a, b)| a != b));
    }

    /// 10⁶ uniforms of 1 000 replicas × 1 000 elements, for draw `counter`, as f64.
    fn million(rng: &DeviceRng, counter: u64) -> Vec<f64> {
        rng.uniform(counter, 1000, 1)
            .into_data()
            .iter::<f32>()
            .map(f64::from)
            .collect()
    }

    fn correlation(a: &[f64], b: &[f64]) -> f64 {
        let n = a.len() as f64;
        let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
        let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
        let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
        let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
        cov / (va * vb).sqrt()
    }

    #[test]
    fn the_stream_is_uniform_and_independent() {
        // 1 000 replicas that share one seed (the worst case for key B: their streams differ
        // through key A only), 1 000 elements each: 10⁶ draws per counter.
        let device = Device::flex();
        let seeds = vec![77u64; 1000];
        let ids: Vec<u64> = (0..1000).collect();
        let rng = DeviceRng::new(&seeds, &ids, 2, &device);
        let u = million(&rng, 0);
        assert!(u.iter().all(|&v| v > 0.0 && v < 1.0));
        // Uniformity: chi-square over 100 equal bins has 99 degrees of freedom (mean 99, sd
        // √198 = 14.1); 99 + 6 sd = 184 is exceeded with probability below 1e-6.
        let mut counts = [0u64; 100];
        for &v in &u {
            counts[((v * 100.0) as usize).min(99)] += 1;
        }
        let expected = u.len() as f64 / 100.0;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        assert!(chi2 < 184.0, "chi-square {chi2}");
        // Independence: a sample correlation of n independent pairs has sd 1/√n. Between
        // neighbouring replicas (pairs r, r + 1 at the same element: n = 999 000), between
        // elements (i, i + 1 within a replica: n = 999 000), and between draws (counters 0
        // and 1 at the same place: n = 10⁶). 6 sd ≈ 0.006: false alarms below 1e-8 each.
        let bound = 6.0 / 999_000f64.sqrt();
        let (a, b): (Vec<f64>, Vec<f64>) = (0..999)
            .flat_map(|r| (0..1000).map(move |i| (r * 1000 + i, (r + 1) * 1000 + i)))
            .map(|(x, y)| (u[x], u[y]))
            .unzip();
        let c = correlation(&a, &b);
        assert!(c.abs() < bound, "between replicas: {c}");
        let (a, b): (Vec<f64>, Vec<f64>) = (0..1000)
            .flat_map(|r| (0..999).map(move |i| (r * 1000 + i, r * 1000 + i + 1)))
            .map(|(x, y)| (u[x], u[y]))
            .unzip();
        let c = correlation(&a, &b);
        assert!(c.abs() < bound, "between elements: {c}");
        let next = million(&rng, 1);
        let c = correlation(&u, &next);
        assert!(c.abs() < bound, "between draws: {c}");
        // Between one replica's element i and its neighbour's element i + 1: a shifted-stream
        // overlap would show here.
        let (a, b): (Vec<f64>, Vec<f64>) = (0..999)
            .flat_map(|r| (0..999).map(move |i| (r * 1000 + i + 1, (r + 1) * 1000 + i)))
            .map(|(x, y)| (u[x], u[y]))
            .unzip();
        let c = correlation(&a, &b);
        assert!(c.abs() < 6.0 / (a.len() as f64).sqrt(), "shifted: {c}");
    }

    #[test]
    fn uniforms_normals_and_indices_have_their_distributions() {
        // 2 replicas × 20 000 draws: the normal's mean 0 ± 0.005 and variance 1 ± √(2/40 000)
        // = 0.007; checked at 5 sd. Every index is in range and a permutation holds each index
        // once.
        let device = Device::flex();
        let rng = DeviceRng::new(&[1, 2], &[0, 1], 0, &device);
        let z: Vec<f64> = rng
            .normal(1, 200, 100)
            .into_data()
            .iter::<f32>()
            .map(f64::from)
            .collect();
        let zm = z.iter().sum::<f64>() / z.len() as f64;
        let zv = z.iter().map(|v| (v - zm).powi(2)).sum::<f64>() / z.len() as f64;
        assert!(
            zm.abs() < 5.0 * 0.005 && (zv - 1.0).abs() < 5.0 * 0.007,
            "{zm} {zv}"
        );
        let idx: Vec<i64> = rng
            .below(2, 50, 1000)
            .into_data()
            .convert::<i64>()
            .iter::<i64>()
            .collect();
        assert!(idx.iter().all(|&i| (0..50).contains(&i)));
        let perm: Vec<i64> = rng
            .permutation(3, 50)
            .into_data()
            .convert::<i64>()
            .iter::<i64>()
            .collect();
        for row in perm.chunks(50) {
            let mut sorted = row.to_vec();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..50).collect::<Vec<i64>>());
        }
    }
}
