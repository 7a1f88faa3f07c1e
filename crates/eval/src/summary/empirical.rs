//! The intervals and sample CRPS of an empirical predictive family, from a method's draws:
//! the CI from the draws' quantiles, the PI from the mixture of N(draw, noise²).

use std::collections::BTreeMap;

use crate::bail;
use crate::error::Result;
use uqbench_metrics::regression::{
    crps_sample, normal_mixture_quantile, normal_mixture_quantile_sds, quantile_sorted,
};

use super::levels::{level_name, LevelBounds};

/// Rows per draw (as methods return their samples) turned into one column of draws per test
/// input.
pub fn columns_of(rows: &[Vec<f64>], m: usize) -> Result<Vec<Vec<f64>>> {
    if rows.is_empty() || rows.iter().any(|r| r.len() != m) {
        bail!(
            "samples: {} rows; every row needs one value per test input ({m})",
            rows.len()
        );
    }
    Ok((0..m)
        .map(|i| rows.iter().map(|r| r[i]).collect())
        .collect())
}

/// The noise sd of a new y around each draw of f.
#[derive(Debug, Clone, Copy)]
pub enum NoiseSd<'a> {
    /// One sd per test input, the same for every draw.
    PerPoint(&'a [f64]),
    /// One sd per draw (the same at every test input): a sampler's σ draws.
    PerDraw(&'a [f64]),
    /// One sd per draw and test input, rows as the draws' (`Prediction::sample_noise`): a
    /// mean–variance member's σ_m(x), an evidential draw's σ_s(x).
    PerDrawPoint(&'a [Vec<f64>]),
}

/// The empirical intervals at `levels` and the sample CRPS against `truth`, from the draws at
/// every test input (`columns[i]`): CI ends are type-7 quantiles of the draws, PI ends
/// quantiles of the mixture of N(draw, noise²) (each draw with its own noise sd for
/// [`NoiseSd::PerDraw`], and at each input for [`NoiseSd::PerDrawPoint`]).
pub fn empirical(
    columns: &[Vec<f64>],
    noise: NoiseSd<'_>,
    levels: &[f64],
    truth: &[f64],
) -> Result<(BTreeMap<String, LevelBounds>, Vec<f64>)> {
    let m = truth.len();
    if columns.len() != m {
        bail!(
            "samples for {} test inputs; the problem has {m}",
            columns.len()
        );
    }
    if let NoiseSd::PerDraw(sds) = noise {
        if let Some(c) = columns.iter().find(|c| c.len() != sds.len()) {
            bail!(
                "{} noise sds for {} draws: one per draw is needed",
                sds.len(),
                c.len()
            );
        }
        if let Some(s) = sds.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            bail!("noise sd of a draw {s}: valid is a positive, finite number");
        }
    }
    if let NoiseSd::PerDrawPoint(rows) = noise {
        let draws = columns.first().map_or(0, Vec::len);
        if rows.len() != draws || rows.iter().any(|r| r.len() != m) {
            bail!(
                "noise sds per draw and input: {} rows for {draws} draws; one row of {m} per \
                 draw is needed",
                rows.len()
            );
        }
        if let Some(s) = rows
            .iter()
            .flatten()
            .find(|s| !(s.is_finite() && **s > 0.0))
        {
            bail!("noise sd of a draw {s}: valid is a positive, finite number");
        }
    }
    let mut out: BTreeMap<String, LevelBounds> = levels
        .iter()
        .map(|&l| {
            (
                level_name(l),
                LevelBounds {
                    ci_lower: Vec::with_capacity(m),
                    ci_upper: Vec::with_capacity(m),
                    pi_lower: Vec::with_capacity(m),
                    pi_upper: Vec::with_capacity(m),
                },
            )
        })
        .collect();
    // Per test input (in parallel over the inputs; each is independent): its CRPS and, per
    // level, (CI lower, CI upper, PI lower, PI upper).
    type Bounds = (f64, Vec<(f64, f64, f64, f64)>);
    let per_point: Vec<Result<Bounds>> = uqbench_core::par_map(m, |i| {
        let column = &columns[i];
        if column.is_empty() || column.iter().any(|v| !v.is_finite()) {
            bail!("samples at test input {i}: empty, or a non-finite value");
        }
        let crps = crps_sample(column, truth[i])?;
        let mut sorted = column.clone();
        sorted.sort_by(f64::total_cmp);
        let bounds = levels
            .iter()
            .map(|&l| {
                let (lo, hi) = ((1.0 - l) / 2.0, (1.0 + l) / 2.0);
                let (pl, pu) = match noise {
                    NoiseSd::PerPoint(sd) => (
                        normal_mixture_quantile(&sorted, sd[i], lo),
                        normal_mixture_quantile(&sorted, sd[i], hi),
                    ),
                    NoiseSd::PerDraw(sds) => (
                        normal_mixture_quantile_sds(column, sds, lo),
                        normal_mixture_quantile_sds(column, sds, hi),
                    ),
                    NoiseSd::PerDrawPoint(rows) => {
                        let sds: Vec<f64> = rows.iter().map(|r| r[i]).collect();
                        (
                            normal_mixture_quantile_sds(column, &sds, lo),
                            normal_mixture_quantile_sds(column, &sds, hi),
                        )
                    }
                };
                (
                    quantile_sorted(&sorted, lo),
                    quantile_sorted(&sorted, hi),
                    pl,
                    pu,
                )
            })
            .collect();
        Ok((crps, bounds))
    });
    let mut crps = Vec::with_capacity(m);
    for point in per_point {
        let (c, bounds) = point?;
        crps.push(c);
        for (&l, (cl, cu, pl, pu)) in levels.iter().zip(bounds) {
            let b = out.get_mut(&level_name(l)).expect("inserted above");
            b.ci_lower.push(cl);
            b.ci_upper.push(cu);
            b.pi_lower.push(pl);
            b.pi_upper.push(pu);
        }
    }
    Ok((out, crps))
}
