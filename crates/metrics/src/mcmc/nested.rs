//! Nested R̂ for many short chains in superchains, the per-input Monte Carlo errors of a
//! sampler's mean and sd, and the certificate's null: how often perfectly mixed chains would
//! fail it.

use serde::{Deserialize, Serialize};

use super::{chains_at, reference_grade, worst_over_inputs, Diagnostics, MetricError};

/// Nested R̂ (Margossian, Hoffman, Sountsov, Riou-Durand, Vehtari & Gelman 2024, "Nested R̂:
/// assessing the convergence of Markov chain Monte Carlo when running many short chains",
/// eq. 3–5) of one quantity from `chains[c][draw]` grouped into `superchains` consecutive
/// groups of equal size (the chains of a group started from one point). With K groups of M
/// chains of N draws, the means θ̄.mk of chain m of group k, θ̄..k of group k and θ̄... of all:
///
/// - B̂ = (1/(K − 1)) Σ_k (θ̄..k − θ̄...)², the variance between groups;
/// - W̃_k = B̃_k + (1/M) Σ_m s²_mk, with B̃_k = (1/(M − 1)) Σ_m (θ̄.mk − θ̄..k)² (0 for M = 1)
///   and s²_mk the chain's own variance with divisor N − 1 (0 for N = 1);
/// - Ŵ = (1/K) Σ_k W̃_k, and nR̂ = √(1 + B̂/Ŵ).
///
/// Draws are used as they are (not split, not rank-normalised: the paper's definition). With
/// one chain per group it is the non-split R̂ with the variance estimators above.
pub fn nested_rhat(chains: &[Vec<f64>], superchains: usize) -> Result<f64, MetricError> {
    let (c, k) = (chains.len(), superchains);
    if k < 2 || c % k != 0 {
        return Err(MetricError::Invalid {
            what: "nested R̂: superchains".into(),
            value: k as f64,
            valid: format!("at least 2 groups dividing the {c} chains"),
        });
    }
    let n = chains[0].len();
    if n == 0 || chains.iter().any(|ch| ch.len() != n) {
        return Err(MetricError::Invalid {
            what: "nested R̂: draws per chain".into(),
            value: n as f64,
            valid: "at least 1, equal in every chain".into(),
        });
    }
    let m = c / k;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let var = |v: &[f64], mu: f64| {
        if v.len() < 2 {
            0.0
        } else {
            v.iter().map(|x| (x - mu).powi(2)).sum::<f64>() / (v.len() - 1) as f64
        }
    };
    let chain_means: Vec<f64> = chains.iter().map(|ch| mean(ch)).collect();
    let mut group_means = Vec::with_capacity(k);
    let mut within = 0.0;
    for g in 0..k {
        let means = &chain_means[g * m..(g + 1) * m];
        let mu = mean(means);
        group_means.push(mu);
        let own: f64 = (g * m..(g + 1) * m)
            .map(|i| var(&chains[i], chain_means[i]))
            .sum::<f64>()
            / m as f64;
        within += var(means, mu) + own;
    }
    within /= k as f64;
    let between = var(&group_means, mean(&group_means));
    Ok((1.0 + between / within).sqrt())
}

/// The largest nested R̂ over the `m` inputs of `rows` (chain-major draws, `t` per chain) with
/// `superchains` groups; +∞ where an input's value is not finite (no evidence of mixing).
pub fn worst_nested_rhat(rows: &[Vec<f64>], m: usize, t: usize, superchains: usize) -> f64 {
    (0..m)
        .map(|i| match nested_rhat(&chains_at(rows, i, t), superchains) {
            Ok(v) if v.is_finite() => v,
            _ => f64::INFINITY,
        })
        .fold(0.0, f64::max)
}

/// The many-chain reference's certificate of one data set (docs/quartic-002.md, "The
/// certificate and its null"): nested R̂ below [`nested_threshold`] at every input, bulk and
/// tail ESS above [`super::REFERENCE_ESS`] at every input, and no divergent transition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NestedCertificate {
    /// R̂ and ESS, each at its worst input.
    pub worst: Diagnostics,
    /// The largest nested R̂ over the inputs.
    pub nested_rhat: f64,
    /// Its threshold ([`nested_threshold`]).
    pub threshold: f64,
    /// Every part met.
    pub certified: bool,
}

/// The certificate of the chain-major draws `rows` (`t` per chain) at `m` inputs, in
/// `superchains` groups, after `divergent` divergent transitions.
pub fn nested_certificate(
    rows: &[Vec<f64>],
    m: usize,
    t: usize,
    superchains: usize,
    divergent: u64,
) -> NestedCertificate {
    let worst = worst_over_inputs(rows, m, t);
    let nested_rhat = worst_nested_rhat(rows, m, t, superchains);
    let threshold = nested_threshold(superchains, m);
    let certified = reference_grade(
        nested_rhat,
        threshold,
        worst.ess_bulk,
        worst.ess_tail,
        divergent,
    );
    NestedCertificate {
        worst,
        nested_rhat,
        threshold,
        certified,
    }
}

/// The reference certificate's threshold on nested R̂ with `superchains` groups (K) at the
/// worst of `inputs` (m) quantities: √(1 + (K/S)·q/(K − 1)), q the 1 − 0.01/m quantile of
/// χ²_{K−1} and S = 2 × [`super::REFERENCE_ESS`] = 800.
///
/// Derivation: for stationary chains whose superchains are independent, a superchain mean
/// has variance Var/S_k with S_k = S/K its share of the total ESS S, so B̂ ≈ (Var·K/S)·
/// χ²_{K−1}/(K − 1) and Ŵ ≈ Var: nR̂² − 1 ≈ (K/S)·χ²_{K−1}/(K − 1). The threshold is that
/// quantity's 1 − 0.01/m quantile at S = 800, so that chains which forgot their starts and
/// have an ESS of 800 at every input (the least at which the certificate's "ESS ≥ 400 at the
/// worst input" passes reliably: the worst of 181 estimates of a true 800 has a median of
/// about 460) fail it with probability at most 1% (Bonferroni over the inputs; correlated
/// inputs fail it less). `uqbench bench certificate` measures it by simulation: 1.01, the
/// classical R̂ threshold, needs an ESS of about 1 600 at every input with K = 8 (docs/
/// quartic-002.md, "The certificate's null").
pub fn nested_threshold(superchains: usize, inputs: usize) -> f64 {
    use statrs::distribution::{ChiSquared, ContinuousCDF};
    let k = superchains.max(2) as f64;
    let s = 2.0 * super::REFERENCE_ESS;
    let chi2 = ChiSquared::new(k - 1.0).expect("positive degrees of freedom");
    let q = chi2.inverse_cdf(1.0 - 0.01 / inputs.max(1) as f64);
    (1.0 + k / s * q / (k - 1.0)).sqrt()
}

/// The Monte Carlo standard errors of the mean and of the sd of one quantity from its chains,
/// as the R package `posterior` computes them (`mcse_mean`, `mcse_sd`): the mean's is
/// sd/√ESS with the ESS of the split (not rank-normalised) draws; the sd's is
/// sd·√(e·(1 − 1/S)^(S−1) − 1), the sd of a normal sample's sd with S the smaller ESS of the
/// split draws and of their squared deviations from the mean (≈ sd/√(2S) for large S).
pub fn mcse_mean_sd(chains: &[Vec<f64>]) -> Result<(f64, f64), MetricError> {
    super::check_chains(chains)?;
    let split = super::split_chains(chains);
    let all: Vec<f64> = chains.iter().flatten().copied().collect();
    let s = all.len() as f64;
    let mean = all.iter().sum::<f64>() / s;
    let sd = (all.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (s - 1.0)).sqrt();
    let squares: Vec<Vec<f64>> = split
        .iter()
        .map(|c| c.iter().map(|v| (v - mean).powi(2)).collect())
        .collect();
    let ess_mean = super::ess_raw(&split);
    let ess_sd = ess_mean.min(super::ess_raw(&squares));
    let mcse_sd = sd * (std::f64::consts::E * (1.0 - 1.0 / ess_sd).powf(ess_sd - 1.0) - 1.0).sqrt();
    Ok((sd / ess_mean.sqrt(), mcse_sd))
}

/// How often the certificate fails chains that mix perfectly: `trials` replications of
/// `inputs` independent quantities, each drawn as `chains` stationary AR(1) chains of `draws`
/// draws with lag-one autocorrelation `rho` (x₀ ~ N(0, 1), x_t = ρx_{t−1} + √(1 − ρ²)ε_t, the
/// ε from `normal`), grouped into `superchains` for nested R̂. Independent inputs are the
/// worst case for a criterion taken at the worst input (correlated ones fail it less often).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NullRates {
    /// The share of trials whose largest nested R̂ is at or above the threshold asked for.
    pub nested_rhat: f64,
    /// The share of trials whose largest nested R̂ is at or above 1.01.
    pub nested_rhat_101: f64,
    /// The share whose largest rank-normalised split-R̂ (Vehtari et al.) is at or above 1.01.
    pub rhat: f64,
    /// The share whose smallest bulk or tail ESS is at or under 400.
    pub ess: f64,
    /// The share that fails the whole certificate (nested R̂ at the threshold, and ESS).
    pub certificate: f64,
    /// The 99th percentile over trials of the largest nested R̂.
    pub nested_rhat_q99: f64,
    /// The median over trials of the smallest bulk ESS.
    pub ess_bulk_median: f64,
    /// The median over trials of the smallest tail ESS.
    pub ess_tail_median: f64,
}

/// The null rates of [`NullRates`] with nested R̂'s threshold `threshold`; `normal` gives
/// standard normal draws.
pub fn null_rates(
    (chains, superchains, draws): (usize, usize, usize),
    (rho, threshold): (f64, f64),
    inputs: usize,
    trials: usize,
    normal: &mut dyn FnMut() -> f64,
) -> Result<NullRates, MetricError> {
    if !(0.0..1.0).contains(&rho) || trials == 0 || inputs == 0 {
        return Err(MetricError::Invalid {
            what: "null simulation: rho / trials / inputs".into(),
            value: rho,
            valid: "an autocorrelation in [0, 1), at least one trial and one input".into(),
        });
    }
    let innovation = (1.0 - rho * rho).sqrt();
    let (mut fails, mut worst_n, mut bulk, mut tail) = ([0usize; 5], Vec::new(), vec![], vec![]);
    for _ in 0..trials {
        let (mut nested, mut rhat, mut eb, mut et) = (0.0f64, 0.0f64, f64::INFINITY, f64::INFINITY);
        for _ in 0..inputs {
            let sims: Vec<Vec<f64>> = (0..chains)
                .map(|_| {
                    let mut x = normal();
                    (0..draws)
                        .map(|_| {
                            let v = x;
                            x = rho * x + innovation * normal();
                            v
                        })
                        .collect()
                })
                .collect();
            nested = nested.max(nested_rhat(&sims, superchains)?);
            let d = super::diagnose(&sims)?;
            rhat = rhat.max(d.rhat);
            eb = eb.min(d.ess_bulk);
            et = et.min(d.ess_tail);
        }
        let ess_fail = eb <= super::REFERENCE_ESS || et <= super::REFERENCE_ESS;
        let nested_fail = nested >= threshold;
        fails[0] += usize::from(nested_fail);
        fails[4] += usize::from(nested >= super::REFERENCE_RHAT);
        fails[1] += usize::from(rhat >= super::REFERENCE_RHAT);
        fails[2] += usize::from(ess_fail);
        fails[3] += usize::from(nested_fail || ess_fail);
        worst_n.push(nested);
        bulk.push(eb);
        tail.push(et);
    }
    let share = |k: usize| fails[k] as f64 / trials as f64;
    let quantile = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p).round() as usize]
    };
    Ok(NullRates {
        nested_rhat: share(0),
        nested_rhat_101: share(4),
        rhat: share(1),
        ess: share(2),
        certificate: share(3),
        nested_rhat_q99: quantile(&mut worst_n, 0.99),
        ess_bulk_median: quantile(&mut bulk, 0.5),
        ess_tail_median: quantile(&mut tail, 0.5),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Standard normal draws by Box–Muller from a 64-bit LCG seeded by `seed` (the tests'
    /// own stream, independent of the crate's generators).
    fn normals(seed: u64) -> impl FnMut() -> f64 {
        let mut state = seed;
        move || {
            let mut u = || {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
            };
            let (a, b) = (u(), u());
            (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()
        }
    }

    #[test]
    fn nested_rhat_by_hand() {
        // Two superchains of two chains of two draws: chain means 1, 3 | 5, 7, each chain's
        // variance 2; B̃ = 2 within each superchain, so Ŵ = 2 + 2 = 4; the superchain means
        // 2 and 6 give B̂ = 8; nR̂ = √(1 + 8/4) = √3.
        let chains = vec![
            vec![0.0, 2.0],
            vec![2.0, 4.0],
            vec![4.0, 6.0],
            vec![6.0, 8.0],
        ];
        let v = nested_rhat(&chains, 2).unwrap();
        assert!((v - 3f64.sqrt()).abs() < 1e-12, "{v}");
        // One draw per chain: the chains' own variance is 0 and only B̃ remains (the paper's
        // N = 1 case): Ŵ = 2, B̂ = 8, nR̂ = √5.
        let single: Vec<Vec<f64>> = [1.0, 3.0, 5.0, 7.0].iter().map(|&x| vec![x]).collect();
        assert!((nested_rhat(&single, 2).unwrap() - 5f64.sqrt()).abs() < 1e-12);
        assert!(nested_rhat(&chains, 3).is_err());
        assert!(nested_rhat(&chains, 1).is_err());
    }

    #[test]
    fn nested_rhat_sees_a_superchain_that_did_not_forget_its_start() {
        // 16 superchains of 8 independent N(0, 1) chains of 100 draws: nR̂² − 1 is B̂/Ŵ with
        // B̂ ≈ 1/800 (a superchain mean's variance), so nR̂ ≈ 1.0006 with an sd of about
        // 0.0003 (B̂'s relative sd is √(2/15)): under 1.005. With one superchain shifted by 1
        // (its chains stuck near their start), B̂ gains ≈ 1/16 and nR̂ ≈ 1.03.
        let mut normal = normals(99);
        let mut chains: Vec<Vec<f64>> = (0..128)
            .map(|_| (0..100).map(|_| normal()).collect())
            .collect();
        let fine = nested_rhat(&chains, 16).unwrap();
        assert!(fine < 1.005, "{fine}");
        for ch in &mut chains[..8] {
            for v in ch.iter_mut() {
                *v += 1.0;
            }
        }
        let stuck = nested_rhat(&chains, 16).unwrap();
        assert!(stuck > 1.02, "{stuck}");
    }

    #[test]
    fn monte_carlo_errors_of_independent_draws() {
        // 8 chains of 500 independent N(0, 4) draws (S = 4 000): the mean's error is
        // 2/√4000 = 0.0316 and the sd's ≈ 2/√8000 = 0.0224. The ESS estimates scatter by a
        // few per cent around S; 15% bounds.
        let mut draw = normals(5);
        let mut normal = || 2.0 * draw();
        let chains: Vec<Vec<f64>> = (0..8)
            .map(|_| (0..500).map(|_| normal()).collect())
            .collect();
        let (m, s) = mcse_mean_sd(&chains).unwrap();
        assert!((m / 0.0316 - 1.0).abs() < 0.15, "{m}");
        assert!((s / 0.0224 - 1.0).abs() < 0.15, "{s}");
    }
}
