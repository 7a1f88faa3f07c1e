//! MCMC convergence diagnostics of one scalar quantity from several chains, as Vehtari,
//! Gelman, Simpson, Carpenter & Bürkner (2021) define them and ArviZ and the R package
//! `posterior` compute them (spec §8):
//!
//! - split every chain into its first and last ⌊n/2⌋ draws (the middle draw of an odd chain is
//!   dropped), so that a trend within a chain shows up as disagreement between halves;
//! - rank-normalise the pooled draws: z = Φ⁻¹((r − 3/8)/(S + 1/4)), ranks averaged over ties;
//! - bulk R̂ from z; tail R̂ from the same on the folded draws |θ − median(θ)|; R̂ = the larger;
//! - bulk ESS from z; tail ESS = min of the ESS of the indicators 1{θ ≤ q₀.₀₅} and
//!   1{θ ≤ q₀.₉₅} (type-7 quantiles of the pooled, unsplit draws);
//! - the MCSE of the mean, sd(θ)/√ESS_mean with ESS_mean from the split (not rank-normalised)
//!   draws.
//!
//! The ESS uses the chains' autocovariances (by FFT, exact up to rounding) combined with
//! Stan's formula and truncated by Geyer's initial positive sequence made monotone, exactly as
//! ArviZ's `_ess` does; the tests compare every number with ArviZ 0.23.4.
//!
//! Also: the energy-based diagnostics of HMC (E-BFMI per chain, and Stan's rule for a
//! divergent transition).

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

use crate::error::{non_empty, MetricError};

mod nested;
pub use nested::{
    mcse_mean_sd, nested_certificate, nested_rhat, nested_threshold, null_rates, worst_nested_rhat,
    NestedCertificate, NullRates,
};

/// Stan's threshold on the energy error H(end) − H(start) of a trajectory above which (or
/// where it is not finite) the transition counts as divergent.
pub const DIVERGENCE_ENERGY: f64 = 1000.0;

/// E-BFMI below this flags a chain whose momentum resampling explores the energy poorly
/// (Betancourt 2016; Stan's and ArviZ's threshold).
pub const EBFMI_THRESHOLD: f64 = 0.3;

/// posteriordb's reference-posterior standard: R̂ below this ...
pub const REFERENCE_RHAT: f64 = 1.01;
/// ... and bulk and tail ESS above this, with no divergent transitions.
pub const REFERENCE_ESS: f64 = 400.0;

/// A sampler's reference grade for one data set: its R̂ at the worst input (`rhat`, the
/// certificate's own: classical or nested) below `threshold`, bulk and tail ESS at the worst
/// input above [`REFERENCE_ESS`], and not one divergent transition after warm-up (a divergence
/// says the sampler missed a region of the posterior, whatever the other numbers say).
pub fn reference_grade(
    rhat: f64,
    threshold: f64,
    ess_bulk: f64,
    ess_tail: f64,
    divergent: u64,
) -> bool {
    rhat < threshold && ess_bulk > REFERENCE_ESS && ess_tail > REFERENCE_ESS && divergent == 0
}

/// The diagnostics of one quantity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Diagnostics {
    /// max(bulk R̂, tail R̂).
    pub rhat: f64,
    /// Rank-normalised split-R̂.
    pub rhat_bulk: f64,
    /// Rank-normalised split-R̂ of the folded draws.
    pub rhat_tail: f64,
    /// Bulk effective sample size.
    pub ess_bulk: f64,
    /// Tail effective sample size (5% and 95% quantiles).
    pub ess_tail: f64,
    /// Monte-Carlo standard error of the mean.
    pub mcse_mean: f64,
}

impl Diagnostics {
    /// Whether the quantity meets posteriordb's reference standard on its own (R̂ < 1.01,
    /// bulk and tail ESS > 400; divergences are a property of the sampler, checked apart).
    pub fn reference_grade(&self) -> bool {
        self.rhat < REFERENCE_RHAT && self.ess_bulk > REFERENCE_ESS && self.ess_tail > REFERENCE_ESS
    }
}

/// Checks the chains: at least two, each with at least 4 draws, all of equal length and finite.
fn check_chains(chains: &[Vec<f64>]) -> Result<usize, MetricError> {
    if chains.len() < 2 {
        return Err(MetricError::Invalid {
            what: "draws: chains".into(),
            value: chains.len() as f64,
            valid: "at least 2 chains (R̂ compares chains)".into(),
        });
    }
    let n = chains[0].len();
    for (c, chain) in chains.iter().enumerate() {
        if chain.len() != n {
            return Err(MetricError::Length {
                what: format!("draws: chain 0 and chain {c}"),
                left: n,
                right: chain.len(),
            });
        }
        if let Some((i, v)) = chain.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(MetricError::Invalid {
                what: format!("draws[{c}][{i}]"),
                value: *v,
                valid: "every draw must be finite".into(),
            });
        }
    }
    if n < 4 {
        return Err(MetricError::Invalid {
            what: "draws: draws per chain".into(),
            value: n as f64,
            valid: "at least 4 (split-R̂ halves each chain)".into(),
        });
    }
    Ok(n)
}

/// Every diagnostic of one quantity from its chains (`chains[c][draw]`).
pub fn diagnose(chains: &[Vec<f64>]) -> Result<Diagnostics, MetricError> {
    check_chains(chains)?;
    let split = split_chains(chains);
    // The pooled split draws sorted come with their ranks: the median, and the quantiles of
    // the unsplit draws, which are the same draws when the chains' length is even.
    let (z, sorted) = z_scale(&split);
    let rhat_bulk = rhat_raw(&z);
    let med = median_sorted(&sorted);
    let folded: Vec<Vec<f64>> = split
        .iter()
        .map(|c| c.iter().map(|v| (v - med).abs()).collect())
        .collect();
    let rhat_tail = rhat_raw(&z_scale(&folded).0);
    let ess_bulk = ess_raw(&z);
    let all_sorted = if chains[0].len() % 2 == 0 {
        sorted
    } else {
        let mut all: Vec<f64> = chains.iter().flatten().copied().collect();
        all.sort_unstable_by(f64::total_cmp);
        all
    };
    let ess_tail =
        ess_quantile(chains, &all_sorted, 0.05).min(ess_quantile(chains, &all_sorted, 0.95));
    let ess_mean = ess_raw(&split);
    let all: Vec<f64> = chains.iter().flatten().copied().collect();
    let s = all.len() as f64;
    let mean = all.iter().sum::<f64>() / s;
    let sd = (all.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (s - 1.0)).sqrt();
    Ok(Diagnostics {
        rhat: rhat_bulk.max(rhat_tail),
        rhat_bulk,
        rhat_tail,
        ess_bulk,
        ess_tail,
        mcse_mean: sd / ess_mean.sqrt(),
    })
}

/// E-BFMI of one chain from its energies at the start of every iteration (after the momenta
/// are resampled): Σₙ (Eₙ − Eₙ₋₁)² / Σₙ (Eₙ − Ē)², as Stan computes it.
pub fn ebfmi(energy: &[f64]) -> Result<f64, MetricError> {
    non_empty("energy", energy.len())?;
    let n = energy.len() as f64;
    let mean = energy.iter().sum::<f64>() / n;
    let num: f64 = energy.windows(2).map(|w| (w[1] - w[0]).powi(2)).sum();
    let den: f64 = energy.iter().map(|e| (e - mean).powi(2)).sum();
    Ok(if den > 0.0 { num / den } else { f64::NAN })
}

/// Whether a trajectory with energy error `dh` = H(end) − H(start) is a divergent transition
/// (Stan's rule: above [`DIVERGENCE_ENERGY`], or not finite).
pub fn is_divergent(dh: f64) -> bool {
    !dh.is_finite() || dh > DIVERGENCE_ENERGY
}

/// The first and last ⌊n/2⌋ draws of every chain, as separate chains.
fn split_chains(chains: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let n = chains[0].len();
    let half = n / 2;
    chains
        .iter()
        .map(|c| c[..half].to_vec())
        .chain(chains.iter().map(|c| c[n - half..].to_vec()))
        .collect()
}

/// The median of sorted values (the mean of the middle two for an even count).
fn median_sorted(s: &[f64]) -> f64 {
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        0.5 * (s[n / 2 - 1] + s[n / 2])
    }
}

/// Rank normalisation of the pooled draws: Φ⁻¹((r − 3/8)/(S + 1/4)) with average ranks for
/// ties, in the chains' shape; and the pooled draws sorted.
fn z_scale(chains: &[Vec<f64>]) -> (Vec<Vec<f64>>, Vec<f64>) {
    let mut order: Vec<(f64, u32)> = (chains.iter().flatten())
        .zip(0u32..)
        .map(|(&v, k)| (v, k))
        .collect();
    let s = order.len();
    // Ties share their average rank, so the order within a tie does not matter.
    order.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    let normal = Normal::standard();
    let table = rank_normal_scores(s);
    let mut z = vec![0.0; s];
    let mut i = 0;
    while i < s {
        let mut j = i;
        while j + 1 < s && order[j + 1].0 == order[i].0 {
            j += 1;
        }
        // Ranks are 1-based: positions i..=j share the average (i + j)/2 + 1; an untied
        // rank's score is the table's (the same number).
        let score = if i == j {
            table[i]
        } else {
            let r = (i + j) as f64 / 2.0 + 1.0;
            normal.inverse_cdf((r - 0.375) / (s as f64 + 0.25))
        };
        for &(_, k) in &order[i..=j] {
            z[k as usize] = score;
        }
        i = j + 1;
    }
    let n = chains[0].len();
    let z = z.chunks(n).map(<[f64]>::to_vec).collect();
    (z, order.into_iter().map(|(v, _)| v).collect())
}

/// Φ⁻¹((r − 3/8)/(S + 1/4)) for the ranks r = 1, …, S, computed once per S and thread (a
/// sampler's diagnostics rank thousands of draws at every one of ~200 inputs, twice, and Φ⁻¹
/// was a fifth of their time).
fn rank_normal_scores(s: usize) -> std::rc::Rc<[f64]> {
    use std::cell::RefCell;
    use std::rc::Rc;
    thread_local! {
        static TABLE: RefCell<Option<Rc<[f64]>>> = const { RefCell::new(None) };
    }
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        match &*t {
            Some(table) if table.len() == s => Rc::clone(table),
            _ => {
                let normal = Normal::standard();
                let table: Rc<[f64]> = (0..s)
                    .map(|i| normal.inverse_cdf(((i + 1) as f64 - 0.375) / (s as f64 + 0.25)))
                    .collect();
                *t = Some(Rc::clone(&table));
                table
            }
        }
    })
}

/// Mean and variance with denominator `n − ddof`.
fn moments(v: &[f64], ddof: f64) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    (
        mean,
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - ddof),
    )
}

/// Split-R̂ of chains as given (already split and, for the rank versions, normalised):
/// sqrt((B/W + n − 1)/n) with B = n·var(chain means), W = mean within-chain variance.
fn rhat_raw(chains: &[Vec<f64>]) -> f64 {
    let n = chains[0].len() as f64;
    let stats: Vec<(f64, f64)> = chains.iter().map(|c| moments(c, 1.0)).collect();
    let means: Vec<f64> = stats.iter().map(|s| s.0).collect();
    let b = n * moments(&means, 1.0).1;
    let w = stats.iter().map(|s| s.1).sum::<f64>() / stats.len() as f64;
    ((b / w + n - 1.0) / n).sqrt()
}

/// The ESS of 1{θ ≤ q_p}, q_p the type-7 quantile of all draws (`all`: them sorted).
fn ess_quantile(chains: &[Vec<f64>], all: &[f64], p: f64) -> f64 {
    let h = (all.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let q = all[lo] + (h - lo as f64) * (all[(lo + 1).min(all.len() - 1)] - all[lo]);
    let indicator: Vec<Vec<f64>> = chains
        .iter()
        .map(|c| c.iter().map(|&v| if v <= q { 1.0 } else { 0.0 }).collect())
        .collect();
    ess_raw(&split_chains(&indicator))
}

/// The ESS of chains as given (ArviZ's `_ess`): autocorrelations by Stan's formula, summed in
/// pairs while the pair sums stay positive (Geyer's initial positive sequence), made monotone,
/// τ = −1 + 2Σρ̂ (+ the last even term), ESS = S/max(τ, 1/log₁₀ S).
fn ess_raw(chains: &[Vec<f64>]) -> f64 {
    let (c, n) = (chains.len(), chains[0].len());
    let s = (c * n) as f64;
    let (lo, hi) = chains
        .iter()
        .flatten()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    // numpy's float resolution, 1e-15: constant draws give ESS = S.
    if hi - lo < 1e-15 {
        return s;
    }
    let lags = LagMeans::new(chains);
    let lag_mean = |t: usize| lags.at(t);
    let nf = n as f64;
    let mean_var = lag_mean(0) * nf / (nf - 1.0);
    let mut var_plus = mean_var * (nf - 1.0) / nf;
    if c > 1 {
        let means: Vec<f64> = chains.iter().map(|ch| moments(ch, 1.0).0).collect();
        var_plus += moments(&means, 1.0).1;
    }
    let rho = |t: usize| 1.0 - (mean_var - lag_mean(t)) / var_plus;
    let mut rho_t = vec![0.0; n];
    let mut even = 1.0;
    rho_t[0] = even;
    let mut odd = rho(1);
    rho_t[1] = odd;
    let mut t = 1;
    while t + 3 < n && even + odd > 0.0 {
        even = rho(t + 1);
        odd = rho(t + 2);
        if even + odd >= 0.0 {
            rho_t[t + 1] = even;
            rho_t[t + 2] = odd;
        }
        t += 2;
    }
    // max_t = t − 2 may be −1 (ArviZ's Python indexing wraps then; it cannot here, since the
    // loop above runs at least once whenever n > 4 and ρ̂₀ + ρ̂₁ > 0).
    let max_t = t as isize - 2;
    if even > 0.0 && max_t + 1 >= 0 {
        rho_t[(max_t + 1) as usize] = even;
    }
    let mut t = 1isize;
    while t <= max_t - 2 {
        let (a, b) = ((t + 1) as usize, (t + 2) as usize);
        let (p, q) = ((t - 1) as usize, t as usize);
        if rho_t[a] + rho_t[b] > rho_t[p] + rho_t[q] {
            rho_t[a] = (rho_t[p] + rho_t[q]) / 2.0;
            rho_t[b] = rho_t[a];
        }
        t += 2;
    }
    let upto = (max_t + 1).max(0) as usize;
    let mut tau = -1.0 + 2.0 * rho_t[..upto.min(n)].iter().sum::<f64>();
    if upto < n {
        tau += rho_t[upto];
    }
    let tau = tau.max(1.0 / s.log10());
    if rho_t.iter().any(|v| v.is_nan()) {
        return f64::NAN;
    }
    s / tau
}

/// The chains' mean autocovariance at lag t, (1/C) Σ_c Σₖ (xₖ − x̄)(xₖ₊ₜ − x̄)/n, computed when
/// asked: directly for the first [`LagMeans::DIRECT`] lags (the ESS of well-mixed chains stops
/// after a few, and many short chains made the FFT of every chain at every lag the cost of a
/// many-chain sampler's diagnostics), by FFT of every chain beyond (one pass, then cached).
/// The two agree to rounding.
struct LagMeans<'a> {
    centred: Vec<Vec<f64>>,
    cache: std::cell::RefCell<Vec<f64>>,
    fft: std::cell::OnceCell<Vec<f64>>,
    chains: &'a [Vec<f64>],
}

impl<'a> LagMeans<'a> {
    const DIRECT: usize = 48;

    fn new(chains: &'a [Vec<f64>]) -> LagMeans<'a> {
        let centred = chains
            .iter()
            .map(|ch| {
                let mean = ch.iter().sum::<f64>() / ch.len() as f64;
                ch.iter().map(|v| v - mean).collect()
            })
            .collect();
        LagMeans {
            centred,
            cache: std::cell::RefCell::new(Vec::new()),
            fft: std::cell::OnceCell::new(),
            chains,
        }
    }

    fn at(&self, t: usize) -> f64 {
        if t >= Self::DIRECT {
            let all = self.fft.get_or_init(|| {
                let acov: Vec<Vec<f64>> = self.chains.iter().map(|ch| autocovariance(ch)).collect();
                let n = self.chains[0].len();
                (0..n)
                    .map(|l| acov.iter().map(|a| a[l]).sum::<f64>() / acov.len() as f64)
                    .collect()
            });
            return all[t];
        }
        let mut cache = self.cache.borrow_mut();
        while cache.len() <= t {
            let l = cache.len();
            let c = self.centred.len() as f64;
            let sum: f64 = (self.centred.iter())
                .map(|x| {
                    let n = x.len();
                    x[..n - l]
                        .iter()
                        .zip(&x[l..])
                        .map(|(a, b)| a * b)
                        .sum::<f64>()
                        / n as f64
                })
                .sum();
            cache.push(sum / c);
        }
        cache[t]
    }
}

/// Autocovariances of one chain at every lag, Σₖ (xₖ − x̄)(xₖ₊ₜ − x̄)/n, by FFT of the
/// zero-padded centred chain (padding to ≥ 2n makes the circular correlation linear).
fn autocovariance(x: &[f64]) -> Vec<f64> {
    let n = x.len();
    let mean = x.iter().sum::<f64>() / n as f64;
    let size = (2 * n).next_power_of_two();
    let mut re: Vec<f64> = x.iter().map(|v| v - mean).collect();
    re.resize(size, 0.0);
    let mut im = vec![0.0; size];
    fft(&mut re, &mut im, false);
    for (r, i) in re.iter_mut().zip(im.iter_mut()) {
        *r = *r * *r + *i * *i;
        *i = 0.0;
    }
    fft(&mut re, &mut im, true);
    re.truncate(n);
    for v in &mut re {
        *v /= size as f64 * n as f64;
    }
    re
}

/// In-place iterative radix-2 FFT of a power-of-two length (unnormalised; `inverse` conjugates
/// the twiddles).
fn fft(re: &mut [f64], im: &mut [f64], inverse: bool) {
    let n = re.len();
    let mut j = 0;
    for i in 1..n {
        let mut bit = n >> 1;
        while j & bit != 0 {
            j ^= bit;
            bit >>= 1;
        }
        j |= bit;
        if i < j {
            re.swap(i, j);
            im.swap(i, j);
        }
    }
    let twiddles = twiddles(n, inverse);
    let mut len = 2;
    while len <= n {
        // Stage `len`'s twiddles start at len/2 − 1 (see [`twiddles`]).
        let stage = &twiddles[len / 2 - 1..len - 1];
        for start in (0..n).step_by(len) {
            for (k, &(s, c)) in stage.iter().enumerate() {
                let (a, b) = (start + k, start + k + len / 2);
                let (xr, xi) = (re[b] * c - im[b] * s, re[b] * s + im[b] * c);
                re[b] = re[a] - xr;
                im[b] = im[a] - xi;
                re[a] += xr;
                im[a] += xi;
            }
        }
        len <<= 1;
    }
}

/// (sin, cos) of every stage's angles, shared.
type Twiddles = std::rc::Rc<[(f64, f64)]>;

/// Every stage's twiddles of a length-`n` transform, stage `len` (2, 4, …, n) at
/// `len/2 − 1 .. len − 1`: sin_cos(∓2πk/len) for k < len/2. Computed once per length and
/// direction and thread (an ESS runs thousands of transforms of one length; the sines and
/// cosines were a tenth of `bench hmc`'s time when computed per transform), the same values.
fn twiddles(n: usize, inverse: bool) -> Twiddles {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::rc::Rc;
    thread_local! {
        static TABLES: RefCell<HashMap<(usize, bool), Twiddles>> = RefCell::new(HashMap::new());
    }
    TABLES.with(|tables| {
        Rc::clone(tables.borrow_mut().entry((n, inverse)).or_insert_with(|| {
            let sign = if inverse { 1.0 } else { -1.0 };
            let mut all = Vec::with_capacity(n.saturating_sub(1));
            let mut len = 2;
            while len <= n {
                let ang = sign * 2.0 * std::f64::consts::PI / len as f64;
                all.extend((0..len / 2).map(|k| (ang * k as f64).sin_cos()));
                len <<= 1;
            }
            all.into()
        }))
    })
}

/// The draws at input `i` split by chain (`rows`: chain-major draws of f, t per chain, so
/// chain c's are rows c·t .. (c + 1)·t).
pub fn chains_at(rows: &[Vec<f64>], i: usize, t: usize) -> Vec<Vec<f64>> {
    let column: Vec<f64> = rows.iter().map(|r| r[i]).collect();
    column.chunks(t.max(1)).map(<[f64]>::to_vec).collect()
}

/// A sampler's diagnostics at its worst test input, each taken separately: the largest
/// R̂ and the smallest bulk and tail ESS over the inputs (`rows`: chain-major draws of f at the
/// m inputs, t per chain). An input whose draws are not finite counts as not mixed.
pub fn worst_over_inputs(rows: &[Vec<f64>], m: usize, t: usize) -> Diagnostics {
    let mut worst = Diagnostics {
        rhat: 0.0,
        rhat_bulk: 0.0,
        rhat_tail: 0.0,
        ess_bulk: f64::INFINITY,
        ess_tail: f64::INFINITY,
        mcse_mean: 0.0,
    };
    for i in 0..m {
        let per_chain = chains_at(rows, i, t);
        // A NaN (e.g. draws constant within every chain at an input) is no evidence of
        // mixing: it counts as the worst value, never skipped the way f64::max skips NaN.
        let high = |v: f64| if v.is_nan() { f64::INFINITY } else { v };
        let low = |v: f64| if v.is_nan() { 0.0 } else { v };
        match diagnose(&per_chain) {
            Ok(d) => {
                worst.rhat = worst.rhat.max(high(d.rhat));
                worst.rhat_bulk = worst.rhat_bulk.max(high(d.rhat_bulk));
                worst.rhat_tail = worst.rhat_tail.max(high(d.rhat_tail));
                worst.ess_bulk = worst.ess_bulk.min(low(d.ess_bulk));
                worst.ess_tail = worst.ess_tail.min(low(d.ess_tail));
                worst.mcse_mean = worst.mcse_mean.max(high(d.mcse_mean));
            }
            Err(_) => {
                worst.rhat = f64::INFINITY;
                worst.ess_bulk = 0.0;
                worst.ess_tail = 0.0;
            }
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_grade_needs_every_part() {
        // Good R̂ and ESS pass; each part alone fails it, one divergent transition included.
        assert!(reference_grade(1.005, 1.01, 900.0, 800.0, 0));
        assert!(!reference_grade(1.005, 1.01, 900.0, 800.0, 1));
        assert!(!reference_grade(1.02, 1.01, 900.0, 800.0, 0));
        assert!(!reference_grade(1.005, 1.01, 399.0, 800.0, 0));
        assert!(!reference_grade(1.005, 1.01, 900.0, 399.0, 0));
        // NaN diagnostics (a failed estimate) never certify.
        assert!(!reference_grade(f64::NAN, 1.01, 900.0, 800.0, 0));
    }

    /// A deterministic, portable stream for the fixed inputs below: x ↦ a multiplicative
    /// congruential generator's uniforms, turned into AR(1) chains.
    fn chains(c: usize, n: usize, phi: f64, shift: f64) -> Vec<Vec<f64>> {
        let mut state: u64 = 12345;
        let mut uniform = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        (0..c)
            .map(|k| {
                let mut v = 0.0;
                (0..n)
                    .map(|_| {
                        // A centred uniform with variance 1 as the innovation.
                        let e = (uniform() - 0.5) * 12f64.sqrt();
                        v = phi * v + e;
                        v + if k == 0 { shift } else { 0.0 }
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn direct_and_fft_autocovariances_agree() {
        let x = &chains(1, 37, 0.5, 0.0)[0];
        let fast = autocovariance(x);
        let mean = x.iter().sum::<f64>() / 37.0;
        for t in 0..37 {
            let direct: f64 = (0..37 - t)
                .map(|k| (x[k] - mean) * (x[k + t] - mean))
                .sum::<f64>()
                / 37.0;
            assert!((fast[t] - direct).abs() < 1e-12, "lag {t}");
        }
    }

    /// Reference values computed by ArviZ 0.23.4 (numpy 2.4.6, scipy 1.17.1, no numba) on the
    /// same inputs, written out by `python -c` with the generator above reimplemented in
    /// numpy: `az.rhat(x, method="rank")`, `az.rhat(x, method="z_scale")` (bulk),
    /// `az.rhat(x, method="folded")` (tail), `az.ess(x, method="bulk")`,
    /// `az.ess(x, method="tail")`, `az.mcse(x, method="mean")`, with x of shape
    /// (chains, draws). See `scripts/arviz_reference.py`.
    #[test]
    fn agrees_with_arviz() {
        #[rustfmt::skip]
        let cases: [(usize, usize, f64, f64, [f64; 6]); 5] = [
            (4, 1000, 0.0, 0.0, [0.9999131742518487, 0.9999030904907832, 0.9999131742518487, 3737.0628773565804, 3762.2719877496256, 0.016442217551120387]),
            (4, 1000, 0.9, 0.0, [1.0104759226088098, 1.0090105645917054, 1.0104759226088098, 193.14230602220513, 357.6713446791302, 0.17252114174774358]),
            (4, 101, 0.5, 0.8, [1.0661647288576503, 1.0661647288576503, 1.0084263376002296, 59.280981004377736, 126.64630833505068, 0.16011246502056262]),
            (2, 9, 0.3, 0.0, [1.4426869397813626, 0.9145284036262925, 1.4426869397813626, 19.265919722494797, 19.265919722494797, 0.22641746805282204]),
            (3, 400, 0.99, 2.0, [1.3726977402860305, 1.3726977402860305, 1.2102888494984771, 6.842791782492985, 23.597876077443996, 3.424264339130588]),
        ];
        for (c, n, phi, shift, expect) in cases {
            let d = diagnose(&chains(c, n, phi, shift)).unwrap();
            let got = [
                d.rhat,
                d.rhat_bulk,
                d.rhat_tail,
                d.ess_bulk,
                d.ess_tail,
                d.mcse_mean,
            ];
            for (k, (g, e)) in got.iter().zip(expect).enumerate() {
                let tol = if k < 3 { 1e-6 } else { 1e-3 };
                assert!(
                    ((g - e) / e).abs() < tol,
                    "case ({c}, {n}, {phi}, {shift}) value {k}: {g} vs ArviZ {e}"
                );
            }
        }
    }

    #[test]
    fn an_input_without_an_rhat_is_the_worst_not_skipped() {
        // Input 0 mixes (4 chains × 1 000 nearly independent draws); input 1 never moves, so
        // its R̂ is undefined (NaN). The worst over inputs must not be input 0's.
        let (c, t) = (4, 1000);
        let good = chains(c, t, 0.1, 0.0);
        let rows: Vec<Vec<f64>> = good.iter().flatten().map(|&x| vec![x, 3.0]).collect();
        let alone = worst_over_inputs(&rows.iter().map(|r| vec![r[0]]).collect::<Vec<_>>(), 1, t);
        assert!(alone.reference_grade(), "{alone:?}");
        let d = diagnose(&vec![vec![3.0; t]; c]);
        assert!(d.as_ref().map_or(true, |d| d.rhat.is_nan()), "{d:?}");
        let worst = worst_over_inputs(&rows, 2, t);
        assert_eq!(worst.rhat, f64::INFINITY, "{worst:?}");
        assert!(!worst.reference_grade());
    }

    #[test]
    fn bad_input_is_named() {
        let e = diagnose(&[vec![1.0; 10]]).unwrap_err().to_string();
        assert!(e.contains("at least 2 chains"), "{e}");
        let e = diagnose(&[vec![1.0; 10], vec![1.0; 9]])
            .unwrap_err()
            .to_string();
        assert!(e.contains("chain 1"), "{e}");
        let e = diagnose(&[vec![1.0, f64::NAN, 0.0, 1.0], vec![1.0; 4]])
            .unwrap_err()
            .to_string();
        assert!(e.contains("draws[0][1]"), "{e}");
        // Constant draws: ESS is the number of draws, as ArviZ returns.
        assert!(is_divergent(f64::NAN) && is_divergent(1000.5) && !is_divergent(999.0));
    }

    #[test]
    fn ebfmi_of_independent_and_sticky_energies() {
        // Independent energies: E[(Eₙ − Eₙ₋₁)²] = 2 Var, so E-BFMI ≈ 2; a random walk's
        // increments are small against its spread, so E-BFMI ≪ 0.3.
        let x = &chains(1, 4000, 0.0, 0.0)[0];
        let b = ebfmi(x).unwrap();
        // sd of the ratio for n = 4000 iid draws is about 2·sqrt(3/n)·… < 0.05; 0.15 is 3 sd.
        assert!((b - 2.0).abs() < 0.15, "{b}");
        let walk = &chains(1, 4000, 0.999, 0.0)[0];
        assert!(ebfmi(walk).unwrap() < EBFMI_THRESHOLD);
    }
}
