//! The headline analysis of the decision track (spec §12, [`crate::decision`]): across methods, does a method's quality on the standard
//! track predict its decisions? For every setting that a decision run and a standard-track
//! run share, the Spearman rank correlation across the methods in both (the exact posterior,
//! `BLR`, among them: the exact sampler and the anchor) between the decision score (`regret`,
//! or `al_auc` for active learning) and each of `joint_kl_10`, `kl_anchor` (marginal),
//! `coverage_error` (|coverage of f by the 95% interval − 0.95|) and `crps`, with a
//! percentile bootstrap interval.
//!
//! The bootstrap resamples repetitions: the decision run's and the standard run's
//! independently (they are different data sets), each with one set of indices for all of its
//! methods (its methods saw the same data, so they stay paired), and recomputes every
//! method's means and ρ. The Neural Testbed's claim (Osband et al. 2022) is that the joint
//! score ranks agents as their decisions do and the marginal one does not: ρ(regret,
//! joint_kl_10) near 1 with ρ(regret, kl_anchor) lower.

use std::collections::BTreeMap;

use serde::Serialize;
use uqbench_core::Rng;
use uqbench_metrics::regression::quantile_sorted;

use crate::bail;
use crate::compare::RepRow;
use crate::error::Result;
use crate::summary::names::{self as n, ALL};

/// The standard track's scores the decisions are ranked against, lower is better for each.
pub const AGAINST: [&str; 4] = ["joint_kl_10", n::KL_ANCHOR, "coverage_error", n::CRPS];

/// The nominal level of `coverage` (spec §2: the 95% interval of f).
const COVERAGE_LEVEL: f64 = 0.95;

/// Bootstrap resamples of the interval.
pub const BOOTSTRAP: usize = 2000;

/// One rank correlation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankCorrelation {
    /// The setting's label.
    pub setting: String,
    /// The decision score (`regret` or `al_auc`).
    pub decision: String,
    /// The standard track's score.
    pub against: String,
    /// The methods ranked (in both runs, with values).
    pub methods: Vec<String>,
    /// Spearman's ρ on the full data.
    pub rho: f64,
    /// The 2.5% and 97.5% bootstrap percentiles of ρ.
    pub lower: f64,
    /// See `lower`.
    pub upper: f64,
}

/// Ranks with ties sharing their average rank (1-based).
pub fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

/// Spearman's ρ: Pearson's correlation of the ranks; NaN when either side is constant.
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let m = ra.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / m, rb.iter().sum::<f64>() / m);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    sab / (saa * sbb).sqrt()
}

/// Per method, its values by repetition for one (setting, metric) of region `all`.
type PerMethod = BTreeMap<String, BTreeMap<u64, f64>>;

fn per_method(rows: &[RepRow], setting: &str, metric: &str) -> PerMethod {
    let mut out = PerMethod::new();
    for r in rows {
        if r.setting == setting && r.region == ALL && r.metric == metric && !r.value.is_nan() {
            out.entry(r.method.clone())
                .or_default()
                .insert(r.repetition, r.value);
        }
    }
    out
}

/// The mean of `values` over the repetitions `reps` (those it has).
fn mean_at(values: &BTreeMap<u64, f64>, reps: &[u64]) -> f64 {
    let v: Vec<f64> = reps.iter().filter_map(|r| values.get(r).copied()).collect();
    v.iter().sum::<f64>() / v.len() as f64
}

/// A method's standard-track score from its per-repetition values: their mean, or for
/// `coverage_error` |mean coverage − 0.95|.
fn score(against: &str, values: &BTreeMap<u64, f64>, reps: &[u64]) -> f64 {
    let m = mean_at(values, reps);
    if against == "coverage_error" {
        (m - COVERAGE_LEVEL).abs()
    } else {
        m
    }
}

/// The rank correlations of the decision run's `decisions` rows (score `main`) with the
/// standard run's `standard` rows, per shared setting and score of [`AGAINST`]; `seed` fixes
/// the bootstrap. A setting or score with fewer than three methods in both is left out (ρ
/// over two points is ±1 by construction); no shared setting is an error.
pub fn rank_correlations(
    decisions: &[RepRow],
    standard: &[RepRow],
    main: &str,
    seed: u64,
) -> Result<Vec<RankCorrelation>> {
    let mut settings: Vec<String> = decisions.iter().map(|r| r.setting.clone()).collect();
    settings.sort();
    settings.dedup();
    settings.retain(|s| standard.iter().any(|r| &r.setting == s));
    if settings.is_empty() {
        bail!(
            "the decision run and the standard run share no setting; valid: runs of the same \
             problem and sweep (e.g. uqbench decide SPEC and uqbench run SPEC --profile standard)"
        );
    }
    let mut out = Vec::new();
    for setting in &settings {
        let dec = per_method(decisions, setting, main);
        for against in AGAINST {
            let metric = if against == "coverage_error" {
                n::COVERAGE
            } else {
                against
            };
            let std = per_method(standard, setting, metric);
            let methods: Vec<String> = (dec.keys())
                .filter(|m| std.contains_key(*m))
                .cloned()
                .collect();
            if methods.len() < 3 {
                continue;
            }
            let reps = |p: &PerMethod| -> Vec<u64> {
                let mut r: Vec<u64> = methods.iter().flat_map(|m| p[m].keys().copied()).collect();
                r.sort_unstable();
                r.dedup();
                r
            };
            let (dec_reps, std_reps) = (reps(&dec), reps(&std));
            let rho_at = |dr: &[u64], sr: &[u64]| -> f64 {
                let a: Vec<f64> = methods.iter().map(|m| mean_at(&dec[m], dr)).collect();
                let b: Vec<f64> = methods
                    .iter()
                    .map(|m| score(against, &std[m], sr))
                    .collect();
                spearman(&a, &b)
            };
            let rho = rho_at(&dec_reps, &std_reps);
            let mut rng = Rng::new(seed ^ uqbench_core::seed::splitmix64(out.len() as u64));
            let resample = |r: &[u64], rng: &mut Rng| -> Vec<u64> {
                (0..r.len())
                    .map(|_| r[rng.below(r.len() as u64) as usize])
                    .collect()
            };
            let mut boot: Vec<f64> = (0..BOOTSTRAP)
                .map(|_| {
                    let dr = resample(&dec_reps, &mut rng);
                    let sr = resample(&std_reps, &mut rng);
                    rho_at(&dr, &sr)
                })
                .filter(|r| r.is_finite())
                .collect();
            boot.sort_by(f64::total_cmp);
            // The type-7 percentile of the replicates, as every other quantile of uqbench.
            let at = |q: f64| match boot.len() {
                0 => f64::NAN,
                _ => quantile_sorted(&boot, q),
            };
            out.push(RankCorrelation {
                setting: setting.clone(),
                decision: main.to_string(),
                against: against.to_string(),
                methods,
                rho,
                lower: at(0.025),
                upper: at(0.975),
            });
        }
    }
    Ok(out)
}
