//! Quantiles of equally weighted mixtures of normals: the prediction intervals of y from
//! draws of f with Gaussian noise (one sd for all, or one per draw: HMC's and MFVI's σ draws),
//! which every method with draws of f stores at every test input and level.

use statrs::distribution::{ContinuousCDF, Normal};

use crate::regression::quantile_sorted;

/// The p-quantile of the equally weighted mixture of normals N(loc_i, sd²), by bisection on
/// its CDF to 1e-12 relative (the prediction interval of samples of f plus Gaussian noise);
/// `sd = 0` gives the type-7 sample quantile of `locs`.
pub fn normal_mixture_quantile(locs: &[f64], sd: f64, p: f64) -> f64 {
    assert!(!locs.is_empty() && p > 0.0 && p < 1.0 && sd >= 0.0);
    if sd == 0.0 {
        let mut sorted = locs.to_vec();
        sorted.sort_by(f64::total_cmp);
        return quantile_sorted(&sorted, p);
    }
    normal_mixture_quantile_sds(locs, &vec![sd; locs.len()], p)
}

/// The p-quantile of the equally weighted mixture of N(locs[i], sds[i]²), each component with
/// its own sd (all positive): Halley's method on the mixture's CDF F(x) − p with its density
/// and the density's slope as the derivatives, safeguarded by a bisection bracket (a step
/// that leaves the bracket is replaced by its midpoint), to a relative tolerance of 1e-12. F
/// is increasing and smooth, so Halley converges cubically from within a few steps; the
/// bracket makes every step safe. (Plain bisection needed about 45 CDF evaluations per
/// quantile, Newton about 6, Halley about 3, and about 2 since a step whose cubed size is
/// far below the tolerance ends the iteration without the evaluation that would confirm it:
/// the many-chain reference's 6 400–9 600 draws per repetition made these quantiles a large
/// part of its run.) Φ and φ come from [`crate::erfcx`], within 1e-15 of Φ; until 2026-12-02
/// statrs's `erfc`, whose error of up to 5e-11 (at erfc(0.5)) moved these quantiles by up to
/// about 5e-11.
pub fn normal_mixture_quantile_sds(locs: &[f64], sds: &[f64], p: f64) -> f64 {
    assert!(!locs.is_empty() && locs.len() == sds.len() && p > 0.0 && p < 1.0);
    assert!(sds.iter().all(|&s| s > 0.0 && s.is_finite()));
    let normal = Normal::standard();
    let k = locs.len() as f64;
    let root_2pi = (2.0 * std::f64::consts::PI).sqrt();
    let inverse: Vec<f64> = sds.iter().map(|s| 1.0 / s).collect();
    let narrowest = sds.iter().copied().fold(f64::INFINITY, f64::min);
    // F(x), F'(x) and F''(x): the mixture's CDF, density and the density's slope (each
    // component's φ'(z) = −zφ(z)); Φ(z) and φ(z) from one exponential ([`crate::erfcx`]),
    // within 1e-15 absolute, which moves the root by about 1e-15/F' (well inside the
    // tolerance below).
    let cdf_pdf = |x: f64| {
        let (mut f, mut d, mut d2) = (0.0, 0.0, 0.0);
        for (l, inv) in locs.iter().zip(&inverse) {
            let z = (x - l) * inv;
            let (cdf2, e) = crate::erfcx::double_cdf_and_density(z);
            f += cdf2;
            let e = e * inv;
            d += e;
            d2 -= z * e * inv;
        }
        (0.5 * f / k, d / (k * root_2pi), d2 / (k * root_2pi))
    };
    // Every component's p-quantile brackets the mixture's: at the smallest of them every
    // component's CDF is at most p, at the largest at least p. Widened by 1e-9 of the
    // spread, so that Φ⁻¹'s own rounding (statrs's, not the Φ above) cannot leave the root
    // just outside (a mixture of identical components has lo = hi = its root).
    let z = normal.inverse_cdf(p);
    let (lo, hi) = locs
        .iter()
        .zip(sds)
        .map(|(l, s)| l + z * s)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), q| {
            (a.min(q), b.max(q))
        });
    let margin = 1e-9 * (hi - lo + narrowest + lo.abs().max(hi.abs()));
    let (mut lo, mut hi) = (lo - margin, hi + margin);
    // Start at the moment-matched normal's quantile (the mixture's mean and variance), which
    // is close for the unimodal mixtures of posterior draws; the bracket keeps it inside.
    let mean = locs.iter().sum::<f64>() / k;
    let var = (locs.iter().zip(sds))
        .map(|(l, s)| (l - mean) * (l - mean) + s * s)
        .sum::<f64>()
        / k;
    let mut x = (mean + z * var.sqrt()).clamp(lo, hi);
    // The step before last: from the seventh iteration on, a Halley step that does not at
    // least halve it is replaced by the bracket's midpoint (the safeguard of Numerical
    // Recipes' `rtsafe`; the first six are free, so that the mixtures that converged in them
    // before keep their bits, and a step that grows while it climbs out of a tail is not cut
    // short). Without it a far component lets an early step overshoot onto F's plateau
    // between the modes, where F′ is tiny and every Halley step moves by a fraction of the
    // components' sd: 400 draws within 4σ of their bulk and one 85σ away (a chain's
    // excursion, 2026-12-04) ran out of the 200 iterations with x far from the root (a
    // 0.025-quantile above the 0.975-quantile: the test below). With it every two steps at
    // least halve the bracket or the step, so 200 iterations always reach the tolerance.
    let mut before_last = hi - lo;
    let mut last = before_last;
    for it in 0..200 {
        let (f, d, d2) = cdf_pdf(x);
        if f < p {
            lo = x;
        } else {
            hi = x;
        }
        // Halley's step (cubic convergence: about 3 evaluations from the moment-matched start).
        let g = f - p;
        let halley = x - 2.0 * g * d / (2.0 * d * d - g * d2);
        let is_halley = d > 0.0
            && halley > lo
            && halley < hi
            && (it < 6 || 2.0 * (halley - x).abs() <= before_last);
        let next = if is_halley { halley } else { 0.5 * (lo + hi) };
        let (step, tol) = ((next - x).abs(), 1e-12 * (1.0 + x.abs()));
        (before_last, last) = (last, step);
        // After a Halley step h the error is about A·h³, A = F‴/(6F′) − (F″/(2F′))², whose
        // two terms are of order 1/L² for L the length over which F′ changes: at most the
        // narrowest component's sd, and |F′/F″| where the density bends faster (between
        // separated components). So a step with h³ ≤ tol·L²/10 leaves the root within a tenth
        // of the tolerance, and the evaluation that would confirm it is skipped (about one in
        // three).
        let bend = (d2 / d).abs().max(1.0 / narrowest);
        let settled = is_halley && step * step * step * bend * bend <= 0.1 * tol;
        let done = step <= tol || hi - lo <= tol || settled;
        x = next;
        if done {
            break;
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_mixtures() {
        // A mixture of identical components is that normal: quantile μ + σ·Φ⁻¹(p).
        let q = normal_mixture_quantile(&[2.0, 2.0, 2.0], 0.5, 0.975);
        assert!((q - (2.0 + 0.5 * 1.959_963_984_540_054)).abs() < 1e-9);
        // Symmetric two-component mixture: the median is the midpoint, and the CDF at the
        // 0.9-quantile is 0.9.
        assert!(normal_mixture_quantile(&[-1.0, 1.0], 0.3, 0.5).abs() < 1e-9);
        let q = normal_mixture_quantile(&[-1.0, 1.0], 0.3, 0.9);
        let n = Normal::standard();
        let cdf = 0.5 * (n.cdf((q + 1.0) / 0.3) + n.cdf((q - 1.0) / 0.3));
        assert!((cdf - 0.9).abs() < 1e-9);
        // No noise: the sample quantile.
        assert!((normal_mixture_quantile(&[4.0, 1.0, 3.0, 2.0], 0.0, 0.5) - 2.5).abs() < 1e-15);
        // Components with their own sds: N(0, 1) and N(0, 3²) have the median 0, and the CDF
        // ½(Φ(q) + Φ(q/3)) is 0.95 at the 0.95-quantile (which lies between 1.645 and 4.935).
        let q = normal_mixture_quantile_sds(&[0.0, 0.0], &[1.0, 3.0], 0.95);
        assert!((0.5 * (n.cdf(q) + n.cdf(q / 3.0)) - 0.95).abs() < 1e-9 && q > 1.645 && q < 4.935);
        assert!(normal_mixture_quantile_sds(&[0.0, 0.0], &[1.0, 3.0], 0.5).abs() < 1e-9);
        // Distinct locations and sds, pairs kept (HMC's draws with their own σ): the mixture
        // CDF (1/S)·Σ Φ((q − μ_s)/σ_s) at each quantile is p. Pairing the locations with the
        // sds in another order gives another mixture, whose CDF at those q misses by > 1e-3.
        let (locs, sds) = ([-1.0, 0.5, 3.0, 0.2], [0.3, 1.0, 2.0, 0.05]);
        let cdf = |q: f64, sds: &[f64]| -> f64 {
            locs.iter()
                .zip(sds)
                .map(|(m, s)| n.cdf((q - m) / s))
                .sum::<f64>()
                / 4.0
        };
        let swapped = [2.0, 1.0, 0.3, 0.05];
        for p in [0.005, 0.025, 0.3, 0.5, 0.9, 0.975, 0.995] {
            let q = normal_mixture_quantile_sds(&locs, &sds, p);
            assert!(
                (cdf(q, &sds) - p).abs() < 1e-9,
                "p {p}: q {q}, CDF {}",
                cdf(q, &sds)
            );
            if p == 0.025 || p == 0.975 {
                assert!((cdf(q, &swapped) - p).abs() > 1e-3, "p {p}");
            }
        }
    }

    #[test]
    fn a_far_component_does_not_strand_the_iteration_on_a_plateau() {
        // The draws that broke a run (2026-12-04: pSGLD's 400 draws of f at one test input,
        // σ = 0.75), as stored in 8 bits (code, count; value c + code·h) with a fixed jitter
        // inside each code's step: a bulk near −0.2, a sparse left tail and one draw 85σ
        // away. The unguarded iteration overshot onto the plateau F ≈ 1 − 1/400 above the
        // bulk and ran out of its 200 iterations at x ≈ 16.9 for the 0.025-quantile (above
        // the 0.975-quantile). Checked: the quantile is where the mixture's CDF is p (to
        // 1e-9; the iteration's tolerance is 1e-12 relative), both ends inside the bulk.
        let (c, h) = (28.680_290_222_167_97, 0.266_042_977_571_487_4);
        let codes: [(i32, usize); 22] = [
            (-127, 1),
            (-118, 1),
            (-117, 1),
            (-116, 2),
            (-115, 5),
            (-114, 2),
            (-113, 10),
            (-112, 27),
            (-111, 41),
            (-110, 76),
            (-109, 84),
            (-108, 62),
            (-107, 35),
            (-106, 30),
            (-105, 9),
            (-104, 6),
            (-103, 3),
            (-102, 1),
            (-100, 1),
            (-98, 1),
            (-95, 1),
            (127, 1),
        ];
        let locs: Vec<f64> = (codes.iter())
            .flat_map(|&(q, k)| std::iter::repeat_n(q, k))
            .enumerate()
            .map(|(i, q)| {
                let jitter = ((i + 1) as f64 * (2f64.sqrt() - 1.0)).fract() - 0.5;
                c + (f64::from(q) + jitter) * h
            })
            .collect();
        assert_eq!(locs.len(), 400);
        let n = Normal::standard();
        let cdf = |q: f64| locs.iter().map(|m| n.cdf((q - m) / 0.75)).sum::<f64>() / 400.0;
        let lower = normal_mixture_quantile(&locs, 0.75, 0.025);
        let upper = normal_mixture_quantile(&locs, 0.75, 0.975);
        for (q, p) in [(lower, 0.025), (upper, 0.975)] {
            assert!((cdf(q) - p).abs() < 1e-9, "p {p}: q {q}, CDF {}", cdf(q));
        }
        assert!(
            lower < upper && lower > -4.0 && upper < 3.0,
            "{lower} {upper}"
        );
    }

    #[test]
    fn the_skipped_confirmation_leaves_the_root_within_the_tolerance() {
        // Mixtures where F′ bends fast (narrow components, separated modes, a wide spread):
        // the quantile against bisection on the same CDF to 1e-15, within a tenth of the
        // iteration's tolerance 1e-12·(1 + |q|) (what the skipped step's error bound promises;
        // a rule that stopped one Halley step early would miss by about the step, ≥ 1e-6).
        let cases: [(&[f64], &[f64]); 4] = [
            (&[-30.0, 0.1, 25.0], &[0.01, 2.0, 0.5]),
            (&[0.0, 0.0, 1e-3], &[1e-4, 1.0, 3.0]),
            (&[-1.0, 0.5, 3.0, 0.2], &[0.3, 1.0, 2.0, 0.05]),
            (
                &[100.0, 140.0, 90.0, 120.0, 95.0],
                &[20.0, 1.0, 1.0, 5.0, 1.0],
            ),
        ];
        for (locs, sds) in cases {
            let cdf = |x: f64| -> f64 {
                let sum: f64 = (locs.iter().zip(sds))
                    .map(|(l, s)| crate::erfcx::double_cdf_and_density((x - l) / s).0)
                    .sum();
                0.5 * sum / locs.len() as f64
            };
            for p in [
                0.005, 0.025, 0.05, 0.1, 0.15, 0.3, 0.5, 0.85, 0.9, 0.95, 0.975, 0.995,
            ] {
                let (mut lo, mut hi): (f64, f64) = (-1e3, 1e3);
                while hi - lo > 1e-15 * (1.0 + lo.abs()) {
                    let mid = 0.5 * (lo + hi);
                    if cdf(mid) < p {
                        lo = mid
                    } else {
                        hi = mid
                    }
                }
                let q = normal_mixture_quantile_sds(locs, sds, p);
                assert!(
                    (q - lo).abs() <= 1e-13 * (1.0 + lo.abs()),
                    "p {p}, mixture {locs:?} / {sds:?}: {q} against bisection's {lo}"
                );
            }
        }
    }
}
