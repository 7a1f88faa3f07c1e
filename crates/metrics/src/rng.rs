//! A tiny self-contained generator for the crate's Monte Carlo parts (the referral curve's
//! random baseline, the paired bootstrap), so this crate needs no RNG dependency.

/// SplitMix64 (Steele, Lea and Flood 2014): one 64-bit state, full period.
pub(crate) struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform index in 0..n (n ≥ 1), by Lemire's multiply-shift (bias below n/2⁶⁴).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}
