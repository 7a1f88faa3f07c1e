//! Vectorisable f32 `exp` and `ln` for the host loops: branch-free polynomials (Cephes'
//! `expf` and `logf`, Moshier 1989), within about two ulps of the correctly rounded values on
//! their domains, in a form the compiler turns into vector code (the standard library's are
//! scalar calls). The host twins of the tensor layers use them where a tensor operation
//! computes `exp` or `log` per element (concrete dropout's relaxed mask): the two executions
//! then differ by an ulp there, which is within the floating-point order they differ by
//! anyway (equal in distribution, `cpu/trainer.rs`).

/// e^x in f32 (x clamped to ±88.37: e^x is then finite and normal).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two: C1 exact in few bits, C2 the rest.
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    let x = x.clamp(-88.37, 88.37);
    // n = round(x·log₂e) by truncation corrected for negatives (vectorises, unlike floor).
    let t = x * LOG2E + 0.5;
    let mut n = t as i32;
    if (n as f32) > t {
        n -= 1;
    }
    let nf = n as f32;
    let r = x - nf * C1 - nf * C2;
    let z = r * r;
    let p = ((((1.987_569_2e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 5.000_000_1e-1;
    let y = p * z + r + 1.0;
    y * f32::from_bits(((n + 127) as u32) << 23)
}

/// ln x in f32 for finite x > 0 (normal numbers).
#[inline(always)]
pub fn ln(x: f32) -> f32 {
    const SQRT_HALF: f32 = std::f32::consts::FRAC_1_SQRT_2;
    let bits = x.to_bits();
    // x = m·2^e with m in [0.5, 1).
    let mut e = ((bits >> 23) & 0xff) as i32 - 126;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    // m in [√½, √2) around 1: m − 1 small.
    if m < SQRT_HALF {
        e -= 1;
        m = m + m - 1.0;
    } else {
        m -= 1.0;
    }
    let ef = e as f32;
    let z = m * m;
    let mut y = ((((((((7.037_683_6e-2 * m - 1.151_461e-1) * m + 1.167_699_9e-1) * m
        - 1.242_014_1e-1)
        * m
        + 1.424_932_3e-1)
        * m
        - 1.666_805_8e-1)
        * m
        + 2.000_071_5e-1)
        * m
        - 2.499_999_4e-1)
        * m
        + 3.333_333_1e-1)
        * m
        * z;
    y += -2.121_944_4e-4 * ef;
    y += -0.5 * z;
    m + y + 0.693_359_4 * ef
}

/// cos(2πv) for v in [0, 1] in f32, branch-free: with t = v − ½, cos(2πv) = −cos(2πt), and
/// for a = |t| ∈ [0, ½], cos(2πa) = ±cos(2πb) with b = min(a, ½ − a) ∈ [0, ¼] (the sign −
/// where a > ¼), a Taylor polynomial to x¹² on x = 2πb ∈ [0, π/2] (truncation below 6e-9).
/// Box–Muller's angle on the host ([`crate::device_rng::HostStream::normal`]).
#[inline(always)]
pub fn cos_2pi(v: f32) -> f32 {
    let a = (v - 0.5).abs();
    let far = a > 0.25;
    let b = if far { 0.5 - a } else { a };
    let x = std::f32::consts::TAU * b;
    let z = x * x;
    let c = ((((((z * (1.0 / 479_001_600.0) - 1.0 / 3_628_800.0) * z + 1.0 / 40_320.0) * z
        - 1.0 / 720.0)
        * z
        + 1.0 / 24.0)
        * z
        - 0.5)
        * z)
        + 1.0;
    if far {
        c
    } else {
        -c
    }
}

/// The logistic function 1/(1 + e^{−x}).
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cos_2pi_matches_the_standard_library() {
        for k in 0..=10_000 {
            let v = k as f32 / 10_000.0;
            let want = (f64::from(v) * std::f64::consts::TAU).cos();
            assert!((f64::from(cos_2pi(v)) - want).abs() < 3e-7, "cos(2π·{v})");
        }
    }

    /// The distance between two f32 in units in the last place.
    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn exp_and_ln_are_within_a_few_ulps_of_the_standard_library() {
        // Against f64's correctly rounded values, over the ranges the layers use: exp on
        // [−87, 87], ln on (1e-30, 1e30) and on the uniforms (0, 1) of the relaxed masks.
        let mut worst = (0u32, 0u32);
        for i in 0..200_001 {
            let x = -87.0 + 174.0 * i as f32 / 200_000.0;
            let want = (f64::from(x)).exp() as f32;
            worst.0 = worst.0.max(ulps(exp(x), want));
        }
        for i in 1..200_001 {
            let x = (10f64).powf(-30.0 + 60.0 * f64::from(i) / 200_000.0) as f32;
            let want = (f64::from(x)).ln() as f32;
            if want.abs() > 1e-3 {
                worst.1 = worst.1.max(ulps(ln(x), want));
            }
            let u = i as f32 / 200_001.0;
            let want = (f64::from(u)).ln() as f32;
            if want.abs() > 1e-3 {
                worst.1 = worst.1.max(ulps(ln(u), want));
            }
        }
        assert!(
            worst.0 <= 3 && worst.1 <= 3,
            "exp {} ulps, ln {} ulps",
            worst.0,
            worst.1
        );
        // Near 1, ln is small: an absolute error bound instead.
        for i in 0..1000 {
            let x = 0.999 + 0.002 * i as f32 / 1000.0;
            assert!((ln(x) - x.ln()).abs() < 1e-7, "{x}");
        }
    }
}
