//! A counter-based random generator evaluated on the device: the engine's dropout noise and
//! bootstrap batches are computed where they are used, with no host work or upload inside
//! the epoch loop.
//!
//! Every number is a hash of (replica key, draw counter, element index): the replica key comes
//! from the replica's seed and the stream's purpose (uploaded once per chunk), the counter
//! names the draw (a step, a pass), and the index is the element's position within the
//! replica's tensor. So a replica's numbers do not depend on its chunk, and the same seed
//! gives the same numbers on every backend: the hash uses only integer operations whose low
//! 31 bits agree between the i32 (flex, wgpu) and i64 (ndarray) integer tensors (values are
//! kept in [0, 2³¹) by masking after every multiply, add and left shift, so right shifts are
//! logical and products agree in their low bits).

use std::cell::RefCell;
use std::collections::HashMap;

use burn::tensor::{Device, Int, Tensor, TensorData};
use uqbench_anchor::seed::splitmix64;

/// The 31-bit mask.
const M31: i32 = 0x7FFF_FFFF;
/// The multiplier of the integer hash (Mueller's 0x45d9f3b).
const MUL: i32 = 0x045D_9F3B;

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

/// One stream per replica of a chunk, on the device.
pub(crate) struct DeviceRng {
    /// Per replica, its 31-bit key `[R, 1, 1]`.
    keys: Tensor<3, Int>,
    device: Device,
    /// Element indices `[1, n, k]` per shape, made once.
    indices: RefCell<HashMap<(usize, usize), Tensor<3, Int>>>,
}

impl DeviceRng {
    /// The streams of replicas with these seeds for one purpose (a small number naming the
    /// stream: noise, prediction noise, batches). Uploads the keys: one upload.
    pub fn new(seeds: &[u64], purpose: u64, device: &Device) -> DeviceRng {
        let keys: Vec<i32> = seeds
            .iter()
            .map(|&s| (splitmix64(s ^ splitmix64(purpose)) >> 33) as i32)
            .collect();
        DeviceRng {
            keys: Tensor::from_data(TensorData::new(keys, [seeds.len(), 1, 1]), device),
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
                    .cast(self.keys.dtype())
                    .reshape([1, n, k])
            })
            .clone()
    }

    /// 31 random bits per element `[R, n, k]` for draw `counter`.
    pub fn bits(&self, counter: u64, n: usize, k: usize) -> Tensor<3, Int> {
        let c = mix_host(splitmix64(counter) as i64 >> 1) as i32;
        let key = mix(self.keys.clone().bitwise_xor_scalar(c));
        mix((key + self.index(n, k)).bitwise_and_scalar(M31))
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
        let r = self.keys.dims()[0];
        let u = self.uniform(counter, size, 1).reshape([r, size]);
        u.mul_scalar(n as f64).floor().int().clamp(0, n as i64 - 1)
    }

    /// Per replica, a uniformly random permutation of 0..n `[R, n]`: the order of n random
    /// 31-bit keys.
    pub fn permutation(&self, counter: u64, n: usize) -> Tensor<2, Int> {
        let r = self.keys.dims()[0];
        self.bits(counter, n, 1).reshape([r, n]).argsort(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{open_device, BackendKind};

    fn host_bits(seed: u64, purpose: u64, counter: u64, index: i64) -> i64 {
        let key = (splitmix64(seed ^ splitmix64(purpose)) >> 33) as i64;
        let c = mix_host(splitmix64(counter) as i64 >> 1);
        let k = mix_host(key ^ c);
        mix_host((k + index) & i64::from(M31))
    }

    #[test]
    fn every_backend_computes_the_host_hash_and_chunks_do_not_matter() {
        crate::backend::allow_software_gpu();
        let seeds = [3u64, u64::MAX, 1 << 40];
        for kind in BackendKind::ALL {
            let device = open_device(*kind).unwrap();
            let rng = DeviceRng::new(&seeds, 7, &device);
            let bits: Vec<i64> = rng
                .bits(11, 4, 5)
                .into_data()
                .convert::<i64>()
                .iter::<i64>()
                .collect();
            for (r, &seed) in seeds.iter().enumerate() {
                for i in 0..20 {
                    assert_eq!(
                        bits[r * 20 + i],
                        host_bits(seed, 7, 11, i as i64),
                        "{kind} r{r} i{i}"
                    );
                }
            }
            // The second replica alone draws what it draws in the batch.
            let alone = DeviceRng::new(&seeds[1..2], 7, &device)
                .bits(11, 4, 5)
                .into_data()
                .convert::<i64>()
                .iter::<i64>()
                .collect::<Vec<_>>();
            assert_eq!(alone, bits[20..40]);
        }
    }

    #[test]
    fn uniforms_normals_and_indices_have_their_distributions() {
        // 2 replicas × 20 000 draws: the uniform mean is ½ ± 1/√(12·40 000) = 0.0014 (sd), the
        // normal's mean 0 ± 0.005 and variance 1 ± √(2/40 000) = 0.007; checked at 5 sd. Every
        // index is in range and a permutation holds each index once.
        let device = Device::flex();
        let rng = DeviceRng::new(&[1, 2], 0, &device);
        let u: Vec<f32> = rng.uniform(0, 200, 100).into_data().iter::<f32>().collect();
        assert!(u.iter().all(|&v| v > 0.0 && v < 1.0));
        let mean = u.iter().map(|&v| f64::from(v)).sum::<f64>() / u.len() as f64;
        assert!((mean - 0.5).abs() < 5.0 * 0.0014, "{mean}");
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
