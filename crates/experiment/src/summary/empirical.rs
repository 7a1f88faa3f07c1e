//! The intervals and CRPS a repetition stores when no single formula gives them later: an
//! empirical predictive family's, from a method's draws (the CI from the draws' quantiles,
//! the PI from the mixture of N(draw, noise²)), and a Student t per input's
//! ([`per_input_t`]), in closed form.

use std::collections::BTreeMap;

use crate::bail;
use crate::error::Result;
use uqbench_core::{central_quantile, TMarginals};
use uqbench_metrics::mixture::{normal_mixture_quantile, normal_mixture_quantile_sds};
use uqbench_metrics::regression::{crps_sample, crps_student_t, quantile_sorted};

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

/// The intervals at `levels` and the CRPS of f against `truth` of a Student t at every test
/// input with its own degrees of freedom (`t`, location `mean`): CI mean ± t_{ν_i}·f_scale_i,
/// PI mean ± t_{ν_i}·y_scale_i, t_{ν_i} the central quantile of the standard t.
pub fn per_input_t(
    mean: &[f64],
    t: &TMarginals,
    levels: &[f64],
    truth: &[f64],
) -> Result<(BTreeMap<String, LevelBounds>, Vec<f64>)> {
    let m = truth.len();
    if [mean.len(), t.dof.len(), t.f_scale.len(), t.y_scale.len()]
        .iter()
        .any(|&l| l != m)
    {
        bail!(
            "t marginals: {} means, {} dofs, {} f scales, {} y scales; the problem has {m} test \
             inputs",
            mean.len(),
            t.dof.len(),
            t.f_scale.len(),
            t.y_scale.len()
        );
    }
    if let Some(i) = (0..m).find(|&i| {
        !(t.dof[i] > 0.0 && t.f_scale[i] > 0.0 && t.y_scale[i] > 0.0)
            || !(t.dof[i].is_finite() && t.f_scale[i].is_finite() && t.y_scale[i].is_finite())
    }) {
        bail!(
            "t marginal at test input {i}: dof {}, f scale {}, y scale {}; valid are positive, \
             finite numbers",
            t.dof[i],
            t.f_scale[i],
            t.y_scale[i]
        );
    }
    let intervals = levels
        .iter()
        .map(|&level| {
            let mut b = LevelBounds {
                ci_lower: Vec::with_capacity(m),
                ci_upper: Vec::with_capacity(m),
                pi_lower: Vec::with_capacity(m),
                pi_upper: Vec::with_capacity(m),
            };
            for i in 0..m {
                let q = central_quantile(level, Some(t.dof[i]));
                b.ci_lower.push(mean[i] - q * t.f_scale[i]);
                b.ci_upper.push(mean[i] + q * t.f_scale[i]);
                b.pi_lower.push(mean[i] - q * t.y_scale[i]);
                b.pi_upper.push(mean[i] + q * t.y_scale[i]);
            }
            (level_name(level), b)
        })
        .collect();
    // ν ≤ 1 has no finite mean and no CRPS.
    let crps = (0..m)
        .map(|i| match t.dof[i] {
            nu if nu > 1.0 => crps_student_t(&[mean[i]], &[t.f_scale[i]], nu, &[truth[i]]),
            _ => Ok(f64::NAN),
        })
        .collect::<std::result::Result<Vec<f64>, _>>()?;
    Ok((intervals, crps))
}

#[cfg(test)]
mod tests {
    use super::*;
    use statrs::distribution::{ContinuousCDF, StudentsT};

    /// Per input its own t: the ends are statrs' t quantiles times the input's scales, and
    /// the CRPS is ∫ (F(x) − 1{x ≥ y})² dx integrated numerically.
    #[test]
    fn a_t_per_input_gives_each_input_its_own_quantile_and_crps() {
        let t = TMarginals {
            dof: vec![3.0, 40.0],
            f_scale: vec![0.5, 2.0],
            y_scale: vec![1.0, 3.0],
        };
        let (mean, truth) = ([1.0, -2.0], [1.7, -2.5]);
        let (ints, crps) = per_input_t(&mean, &t, &[0.9], &truth).unwrap();
        let b = &ints["0.9"];
        for i in 0..2 {
            let q = StudentsT::new(0.0, 1.0, t.dof[i])
                .unwrap()
                .inverse_cdf(0.95);
            let want_ci = (mean[i] - q * t.f_scale[i], mean[i] + q * t.f_scale[i]);
            let want_pi = (mean[i] - q * t.y_scale[i], mean[i] + q * t.y_scale[i]);
            assert!((b.ci_lower[i] - want_ci.0).abs() < 1e-9, "{i}");
            assert!((b.ci_upper[i] - want_ci.1).abs() < 1e-9, "{i}");
            assert!((b.pi_lower[i] - want_pi.0).abs() < 1e-9, "{i}");
            assert!((b.pi_upper[i] - want_pi.1).abs() < 1e-9, "{i}");
            // Midpoint rule on [−400, 400] in steps of 0.001 (the t_3 tail beyond 400 scale
            // units adds < 1e-7).
            let dist = StudentsT::new(mean[i], t.f_scale[i], t.dof[i]).unwrap();
            let h = 1e-3;
            let numeric: f64 = (0..800_000)
                .map(|k| {
                    let x = -400.0 + (k as f64 + 0.5) * h;
                    let step = if x >= truth[i] { 1.0 } else { 0.0 };
                    (dist.cdf(x) - step).powi(2) * h
                })
                .sum();
            assert!(
                (crps[i] - numeric).abs() < 1e-5,
                "{i}: {} vs {numeric}",
                crps[i]
            );
        }
        // The t_3 interval is wider per unit scale than the t_40's.
        assert!(
            (b.ci_upper[0] - mean[0]) / t.f_scale[0] > (b.ci_upper[1] - mean[1]) / t.f_scale[1]
        );
    }

    #[test]
    fn a_bad_t_marginal_is_refused() {
        let t = TMarginals {
            dof: vec![3.0, 0.0],
            f_scale: vec![1.0, 1.0],
            y_scale: vec![1.0, 1.0],
        };
        let err = per_input_t(&[0.0, 0.0], &t, &[0.9], &[0.0, 0.0]).unwrap_err();
        assert!(err.to_string().contains("test input 1: dof 0"), "{err}");
        let err = per_input_t(&[0.0], &t, &[0.9], &[0.0, 0.0]).unwrap_err();
        assert!(err.to_string().contains("1 means"), "{err}");
    }
}
