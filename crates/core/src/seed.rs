//! Seed derivation and the portable random number generator behind every draw in uqbench.
//!
//! Every random draw in the workspace takes its seed from one derivation,
//! `(base seed, experiment, setting, repetition, member, purpose) → u64`
//! ([`SeedPath::seed`]), and turns it into numbers with [`Rng`] (xoshiro256++ seeded through
//! SplitMix64). Both are written out here, with no dependency whose output could change
//! between versions, so the same spec gives the same numbers on every machine and with every
//! backend (up to the platform's `ln`/`sin`/`cos`, which are correctly rounded or nearly so on
//! every target we build for).

/// The purposes a seed is drawn for. Distinct purposes give independent streams.
pub mod purpose {
    /// Training inputs of a problem (drawn once per setting).
    pub const TRAIN_DESIGN: &str = "train-design";
    /// Test inputs of a problem, when the design is random.
    pub const TEST_DESIGN: &str = "test-design";
    /// Validation inputs of a problem, when the design is random.
    pub const VALIDATION_DESIGN: &str = "validation-design";
    /// The problem's parameters γ, when drawn at random.
    pub const GAMMA: &str = "gamma";
    /// Noise on the training targets of one repetition.
    pub const NOISE: &str = "noise";
    /// Noise on the validation targets of one repetition.
    pub const VALIDATION_NOISE: &str = "validation-noise";
    /// The split of a surrogate problem's rows into training, validation and test parts.
    pub const SPLIT: &str = "split";
    /// The random forest that is a surrogate problem's f.
    pub const FOREST_MEAN: &str = "forest-mean";
    /// The random forest that is a surrogate problem's σ²(x).
    pub const FOREST_VARIANCE: &str = "forest-variance";
}

/// Where in an experiment a random draw happens. [`SeedPath::seed`] maps it to a u64.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedPath<'a> {
    /// The experiment's base seed (from its spec).
    pub base: u64,
    /// The experiment's name.
    pub experiment: &'a str,
    /// The setting's canonical label, e.g. `f_main=2` (empty when there is no sweep).
    pub setting: &'a str,
    /// Repetition index (0 for draws made once per setting).
    pub repetition: u64,
    /// Ensemble member or replica index within a repetition (0 when not applicable).
    pub member: u64,
    /// What the numbers are for; see [`purpose`].
    pub purpose: &'a str,
}

impl SeedPath<'_> {
    /// The derived seed: FNV-1a over the length-prefixed fields, finished by SplitMix64.
    pub fn seed(&self) -> u64 {
        let mut h = Fnv::new();
        h.u64(self.base);
        h.str(self.experiment);
        h.str(self.setting);
        h.u64(self.repetition);
        h.u64(self.member);
        h.str(self.purpose);
        splitmix64(h.0)
    }

    /// A generator seeded from this path.
    pub fn rng(&self) -> Rng {
        Rng::new(self.seed())
    }
}

struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn byte(&mut self, b: u8) {
        self.0 ^= u64::from(b);
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
    }

    fn u64(&mut self, v: u64) {
        for b in v.to_le_bytes() {
            self.byte(b);
        }
    }

    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        for b in s.bytes() {
            self.byte(b);
        }
    }
}

/// SplitMix64's output function: a bijective 64-bit mixer.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// xoshiro256++ (Blackman & Vigna), seeded from a u64 through SplitMix64.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
    spare_normal: Option<f64>,
}

impl Rng {
    /// A generator whose stream depends only on `seed`.
    pub fn new(seed: u64) -> Rng {
        // The SplitMix64 sequence started at `seed`: outputs mix(seed + (i + 1)·γ).
        let mut s = [0u64; 4];
        for (i, slot) in s.iter_mut().enumerate() {
            *slot = splitmix64(seed.wrapping_add((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        }
        Rng {
            s,
            spare_normal: None,
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[0]
            .wrapping_add(self.s[3])
            .rotate_left(23)
            .wrapping_add(self.s[0]);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform on [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform on the open interval (0, 1): never exactly 0, so `ln` is finite.
    pub fn uniform_open(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform on [low, high).
    pub fn uniform_in(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.uniform()
    }

    /// Uniform integer in 0..n (n > 0), without modulo bias (Lemire's method).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "Rng::below needs n > 0");
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            let low = m as u64;
            if low >= n.wrapping_neg() % n {
                return (m >> 64) as u64;
            }
        }
    }

    /// A Gamma(shape, 1) draw, shape ≥ 1 (Marsaglia & Tsang 2000): HMC's σ² Gibbs step and
    /// deep evidential regression's Inverse-Gamma draws.
    pub fn gamma(&mut self, shape: f64) -> f64 {
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let z = self.normal();
            let v = (1.0 + c * z).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.uniform_open();
            if u.ln() < 0.5 * z * z + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }

    /// Standard normal, by the Box–Muller transform (pairs; the second value is cached).
    pub fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare_normal.take() {
            return z;
        }
        let u1 = self.uniform_open();
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = std::f64::consts::TAU * u2;
        self.spare_normal = Some(r * theta.sin());
        r * theta.cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(rep: u64, purpose: &str) -> SeedPath<'_> {
        SeedPath {
            base: 7,
            experiment: "e1",
            setting: "f_main=1",
            repetition: rep,
            member: 0,
            purpose,
        }
    }

    #[test]
    fn seeds_differ_by_every_field_and_are_stable() {
        let a = path(0, purpose::NOISE).seed();
        assert_ne!(a, path(1, purpose::NOISE).seed());
        assert_ne!(a, path(0, purpose::GAMMA).seed());
        let mut p = path(0, purpose::NOISE);
        p.member = 1;
        assert_ne!(a, p.seed());
        p.member = 0;
        p.setting = "f_main=2";
        assert_ne!(a, p.seed());
        // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        let mut q = path(0, "c");
        q.setting = "ab";
        let mut r = path(0, "bc");
        r.setting = "a";
        assert_ne!(q.seed(), r.seed());
        // Results are reproducible across versions only if the derivation never changes:
        // these values were produced by this code and are pinned.
        let pinned = path(0, purpose::NOISE).seed();
        assert_eq!(pinned, 13_077_284_786_482_303_363);
        let mut rng = Rng::new(pinned);
        assert_eq!(rng.next_u64(), 656_424_721_268_259_679);
        assert_eq!(rng.normal(), -0.42726792120050006);
    }

    #[test]
    fn known_answer() {
        // xoshiro256++ reference: with state {1, 2, 3, 4} the first output is 41943041.
        let mut rng = Rng {
            s: [1, 2, 3, 4],
            spare_normal: None,
        };
        assert_eq!(rng.next_u64(), 41_943_041);
    }

    #[test]
    fn normal_moments_within_statistical_bounds() {
        // n = 200 000 draws: the sample mean has sd 1/sqrt(n) = 0.00224, so |mean| < 5 sd =
        // 0.0112; the sample variance has sd sqrt(2/n) = 0.00316, so |var - 1| < 0.0158.
        let mut rng = Rng::new(42);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        assert!(mean.abs() < 0.0112, "mean {mean}");
        assert!((var - 1.0).abs() < 0.0158, "var {var}");
        // P(Z < -1.96) = 0.025: binomial sd sqrt(0.025 * 0.975 / n) = 0.000349, 5 sd = 0.00175.
        let tail = xs.iter().filter(|&&x| x < -1.96).count() as f64 / n as f64;
        assert!((tail - 0.025).abs() < 0.00175, "tail {tail}");
    }

    #[test]
    fn below_is_uniform() {
        // 60 000 draws in 0..6: each count is Binomial(60000, 1/6), sd 91.3; allow 5 sd.
        let mut rng = Rng::new(3);
        let mut counts = [0u32; 6];
        for _ in 0..60_000 {
            counts[rng.below(6) as usize] += 1;
        }
        for c in counts {
            assert!((f64::from(c) - 10_000.0).abs() < 457.0, "{counts:?}");
        }
    }
}
