//! The metrics of spec §2 and §4 from per-repetition results: per test input and method,
//! and aggregated per region.

use std::collections::BTreeMap;

use crate::bail;
use crate::error::Result;
use uqbench_anchor::Region;
use uqbench_core::Family;
use uqbench_metrics::coverage::{self, Intervals};

use super::names;
use super::types::{
    level_name, MethodSummary, PointMetric, RepResult, Scalar, SettingSummary, TestInfo, Which,
    ANCHOR, UNDERFIT_FACTOR,
};

/// Checks one method's repetitions against the test inputs: lengths always, and finite
/// predictions with non-negative uncertainties for the repetitions that enter the metrics.
fn validate(test: &TestInfo, reps: &[RepResult]) -> Result<()> {
    let m = test.truth.len();
    for r in reps {
        if r.mean.len() != m || r.std.len() != m {
            bail!(
                "repetition {}: {} predictions and {} uncertainties for {m} test inputs",
                r.repetition,
                r.mean.len(),
                r.std.len()
            );
        }
        for n in [&r.noise_std, &r.predictive_std].into_iter().flatten() {
            if n.len() != m {
                bail!(
                    "repetition {}: {} noise sds for {m} test inputs",
                    r.repetition,
                    n.len()
                );
            }
        }
        if let Family::StudentT { dof } = r.family {
            if !(dof.is_finite() && dof > 0.0) {
                bail!(
                    "repetition {}: Student-t degrees of freedom {dof}; valid: a positive number",
                    r.repetition
                );
            }
        }
        if r.diverged {
            continue;
        }
        for i in 0..m {
            if !r.mean[i].is_finite() {
                bail!(
                    "repetition {}, test input {i}: prediction {}; a repetition with non-finite \
                     predictions must be marked diverged",
                    r.repetition,
                    r.mean[i]
                );
            }
            if !(r.std[i].is_finite() && r.std[i] >= 0.0) {
                bail!(
                    "repetition {}, test input {i}: uncertainty {}; valid: a finite number ≥ 0",
                    r.repetition,
                    r.std[i]
                );
            }
        }
    }
    Ok(())
}

/// A proportion's value, [000]'s error bar and Wilson 95% bounds, from hits of k trials.
pub(super) fn proportions(hits: &[u64], k: usize) -> PointMetric {
    let mut out = PointMetric {
        lower: Some(Vec::with_capacity(hits.len())),
        upper: Some(Vec::with_capacity(hits.len())),
        ..Default::default()
    };
    for &h in hits {
        let p = coverage::proportion(h, k as u64, 0.95).expect("hits ≤ trials, k > 0");
        out.value.push(p.p);
        out.stderr.push(p.se);
        out.lower.as_mut().expect("set above").push(p.wilson.0);
        out.upper.as_mut().expect("set above").push(p.wilson.1);
    }
    out
}

/// Mean and standard error per test input of `per_rep[r][i]` over repetitions r.
pub(super) fn mean_se_per_point(per_rep: &[Vec<f64>], m: usize) -> PointMetric {
    let mut out = PointMetric::default();
    let mut column = vec![0.0; per_rep.len()];
    for i in 0..m {
        for (c, r) in column.iter_mut().zip(per_rep) {
            *c = r[i];
        }
        let s = coverage::mean_se(&column).expect("at least one repetition");
        out.value.push(s.mean);
        out.stderr.push(s.se);
    }
    out
}

/// Summarises one method's repetitions at one setting. `anchor_uncertainty` is the anchor's
/// mean uncertainty per test input (for the ratio metric); `None` for the anchor itself.
pub fn summarize_method(
    test: &TestInfo,
    reps: &[RepResult],
    levels: &[f64],
    anchor_uncertainty: Option<&[f64]>,
) -> Result<MethodSummary> {
    validate(test, reps)?;
    let m = test.truth.len();
    let diverged: Vec<u64> = reps
        .iter()
        .filter(|r| r.diverged)
        .map(|r| r.repetition)
        .collect();
    let ok: Vec<&RepResult> = reps.iter().filter(|r| !r.diverged).collect();
    let k = ok.len();
    let mut points: BTreeMap<String, PointMetric> = BTreeMap::new();
    let mut aggregate: BTreeMap<String, BTreeMap<String, Scalar>> = BTreeMap::new();
    let mut per_repetition: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    if k == 0 {
        return Ok(MethodSummary {
            repetitions: 0,
            diverged,
            points,
            aggregate,
            flags: Vec::new(),
            per_repetition: BTreeMap::new(),
        });
    }
    let in_context = |r: &RepResult, e: crate::error::EvalError| {
        e.context(format!("repetition {}", r.repetition))
    };
    // Every quantity below is first computed per repetition and test input (`[r][i]`); a
    // per-point metric is its mean over repetitions, a region aggregate the mean over
    // repetitions of each repetition's mean over the region's points, and every standard
    // error is over the K independent repetitions (spec §8).
    let deviation: Vec<Vec<f64>> = ok
        .iter()
        .map(|r| {
            r.mean
                .iter()
                .zip(&test.truth)
                .map(|(p, t)| (p - t).abs())
                .collect()
        })
        .collect();
    let uncertainty: Vec<Vec<f64>> = ok.iter().map(|r| r.std.clone()).collect();
    let mut covered = Vec::with_capacity(k);
    let mut crps = Vec::with_capacity(k);
    for r in &ok {
        let (lo, hi) = r.coverage_interval().map_err(|e| in_context(r, e))?;
        covered.push(
            (0..m)
                .map(|i| f64::from(u8::from(lo[i] < test.truth[i] && test.truth[i] < hi[i])))
                .collect::<Vec<f64>>(),
        );
        crps.push(r.crps(&test.truth).map_err(|e| in_context(r, e))?);
    }
    let hits: Vec<u64> = (0..m)
        .map(|i| covered.iter().filter(|c| c[i] > 0.5).count() as u64)
        .collect();
    let rmse = PointMetric {
        value: (0..m)
            .map(|i| (deviation.iter().map(|d| d[i] * d[i]).sum::<f64>() / k as f64).sqrt())
            .collect(),
        stderr: vec![f64::NAN; m],
        ..Default::default()
    };
    let unc = mean_se_per_point(&uncertainty, m);
    if let Some(anchor) = anchor_uncertainty {
        let ratio = PointMetric {
            value: unc.value.iter().zip(anchor).map(|(u, a)| u / a).collect(),
            stderr: unc.stderr.iter().zip(anchor).map(|(s, a)| s / a).collect(),
            ..Default::default()
        };
        points.insert(names::UNCERTAINTY_RATIO.into(), ratio);
    }
    let regs = regions(test);
    let mut per_point: Vec<(String, Vec<Vec<f64>>)> = vec![
        (names::DEVIATION.into(), deviation),
        (names::UNCERTAINTY.into(), uncertainty),
        (names::CRPS.into(), crps),
    ];

    // Pointwise coverage fractions of [004] and widths, per level.
    for &level in levels {
        let name = level_name(level);
        let mut ci = Vec::with_capacity(k);
        let mut pi = Vec::with_capacity(k);
        for r in &ok {
            ci.push(
                r.interval(level, Which::Ci, &test.sigma)
                    .map_err(|e| in_context(r, e))?,
            );
            pi.push(
                r.interval(level, Which::Pi, &test.sigma)
                    .map_err(|e| in_context(r, e))?,
            );
        }
        let widths = |v: &[(Vec<f64>, Vec<f64>)]| -> Vec<Vec<f64>> {
            v.iter()
                .map(|(l, u)| u.iter().zip(l).map(|(u, l)| u - l).collect())
                .collect()
        };
        // Per repetition: whether its CI covers f (0/1), and the probability that its PI
        // covers a new y (exact from the known noise).
        let mut cicf_r = Vec::with_capacity(k);
        let mut picf_r = Vec::with_capacity(k);
        for ((cl, cu), (pl, pu)) in ci.iter().zip(&pi) {
            cicf_r.push(coverage::cicf(
                &[Intervals {
                    lower: cl,
                    upper: cu,
                }],
                &test.truth,
            )?);
            picf_r.push(coverage::picf(
                &[Intervals {
                    lower: pl,
                    upper: pu,
                }],
                &test.truth,
                &test.sigma,
            )?);
        }
        // Each repetition's marginal coverage over all test inputs ([004]'s histograms).
        let over_points = |v: &[Vec<f64>]| -> Vec<f64> {
            v.iter().map(|r| r.iter().sum::<f64>() / m as f64).collect()
        };
        per_repetition.insert(format!("{}_{name}", names::CICP), over_points(&cicf_r));
        per_repetition.insert(format!("{}_{name}", names::PICP), over_points(&picf_r));
        let cicf_hits: Vec<u64> = (0..m)
            .map(|i| cicf_r.iter().filter(|c| c[i] > 0.5).count() as u64)
            .collect();
        points.insert(
            format!("{}_{name}", names::CICF),
            proportions(&cicf_hits, k),
        );
        points.insert(
            format!("{}_{name}", names::PICF),
            mean_se_per_point(&picf_r, m),
        );
        let cicf = points[&format!("{}_{name}", names::CICF)].value.clone();
        let picf = points[&format!("{}_{name}", names::PICF)].value.clone();
        for (region, idx) in &regs {
            let entry = aggregate.entry((*region).to_string()).or_default();
            entry.insert(
                format!("{}_{name}", names::CICF_BRIER),
                brier_over_reps(&cicf_r, &cicf, idx, level)?,
            );
            entry.insert(
                format!("{}_{name}", names::PICF_BRIER),
                brier_over_reps(&picf_r, &picf, idx, level)?,
            );
            // Marginal coverage of the region: each repetition's fraction of the region
            // covered (CICP) or its mean PI coverage probability (PICP), over repetitions.
            entry.insert(
                format!("{}_{name}", names::CICP),
                region_aggregate(&cicf_r, idx),
            );
            entry.insert(
                format!("{}_{name}", names::PICP),
                region_aggregate(&picf_r, idx),
            );
        }
        per_point.push((format!("{}_{name}", names::WIDTH), widths(&ci)));
        per_point.push((format!("{}_{name}", names::PI_WIDTH), widths(&pi)));
    }

    for (region, idx) in &regs {
        let entry = aggregate.entry((*region).to_string()).or_default();
        for (name, v) in &per_point {
            entry.insert(name.clone(), region_aggregate(v, idx));
        }
        entry.insert(names::COVERAGE.into(), region_aggregate(&covered, idx));
        entry.insert(names::POINTS.into(), Scalar::bare(idx.len() as f64));
        if let Some(ratio) = points.get(names::UNCERTAINTY_RATIO) {
            // The median, not the mean: where every feature vanishes the anchor is certain
            // and the ratio unbounded (E1: where f_main·x ∈ {…, −5, 10, 25, …}, e.g.
            // x = −5 at f_main = 1 or x = 2 at f_main = 5).
            entry.insert(
                names::UNCERTAINTY_RATIO.into(),
                Scalar::bare(median(
                    &idx.iter().map(|&i| ratio.value[i]).collect::<Vec<_>>(),
                )),
            );
        }
    }
    for (name, v) in per_point {
        points.insert(name, mean_se_per_point(&v, m));
    }
    points.insert(names::COVERAGE.into(), proportions(&hits, k));
    points.insert(names::RMSE.into(), rmse);
    // Per-repetition scalars (learned rates, objectives, training fit): mean and standard error
    // over the repetitions that entered the metrics.
    let mut names: Vec<&String> = ok.iter().flat_map(|r| r.scalars.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let v: Vec<f64> = ok
            .iter()
            .filter_map(|r| r.scalars.get(name).copied())
            .filter(|v| !v.is_nan())
            .collect();
        let Ok(s) = coverage::mean_se(&v) else {
            continue;
        };
        aggregate
            .entry(names::ALL.into())
            .or_default()
            .insert(name.clone(), Scalar::with_se(s.mean, s.se));
    }

    Ok(MethodSummary {
        repetitions: k,
        diverged,
        points,
        aggregate,
        flags: Vec::new(),
        per_repetition,
    })
}

/// A region's aggregate of a quantity given per repetition and test input (`v[r][i]`): the
/// mean over repetitions of each repetition's mean over the region's points `idx`, with its
/// standard error over the repetitions (sample sd, n − 1, over √K: the repetitions are
/// independent, the test inputs of one repetition are not), and the spread across the region's
/// points of the per-point means over repetitions as `points_sd` (descriptive only). NaN values
/// (an undefined quantity at a point) are left out of a repetition's mean.
pub(super) fn region_aggregate(v: &[Vec<f64>], idx: &[usize]) -> Scalar {
    let per_rep: Vec<f64> = v
        .iter()
        .filter_map(|r| {
            let vals: Vec<f64> = idx.iter().map(|&i| r[i]).filter(|x| !x.is_nan()).collect();
            (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64)
        })
        .collect();
    let Ok(s) = coverage::mean_se(&per_rep) else {
        return Scalar::bare(f64::NAN);
    };
    let point_means: Vec<f64> = idx
        .iter()
        .filter_map(|&i| {
            let col: Vec<f64> = v.iter().map(|r| r[i]).filter(|x| !x.is_nan()).collect();
            (!col.is_empty()).then(|| col.iter().sum::<f64>() / col.len() as f64)
        })
        .collect();
    Scalar {
        value: s.mean,
        stderr: if per_rep.len() > 1 { s.se } else { f64::NAN },
        points_sd: coverage::mean_se(&point_means)
            .ok()
            .filter(|_| point_means.len() > 1)
            .map(|p| p.se * (point_means.len() as f64).sqrt()),
    }
}

/// [004]'s Brier score of a coverage fraction over the region `idx`, mean_i (CF(x_i) − level)²
/// with CF(x_i) the mean over repetitions of `per_rep[r][i]` (`cf`), and its jackknife standard
/// error over repetitions: the score is not a mean of per-repetition values, so its error bar
/// comes from leaving out one repetition at a time, sqrt((K − 1)/K · Σ_r (B₍₋ᵣ₎ − B̄)²), where
/// B₍₋ᵣ₎ uses CF₍₋ᵣ₎(x_i) = (K·CF(x_i) − per_rep[r][i])/(K − 1).
fn brier_over_reps(per_rep: &[Vec<f64>], cf: &[f64], idx: &[usize], level: f64) -> Result<Scalar> {
    let pick: Vec<f64> = idx.iter().map(|&i| cf[i]).collect();
    let value = coverage::coverage_brier(&pick, level)?;
    let k = per_rep.len() as f64;
    if per_rep.len() < 2 {
        return Ok(Scalar::bare(value));
    }
    let loo: Vec<f64> = per_rep
        .iter()
        .map(|r| {
            idx.iter()
                .map(|&i| ((k * cf[i] - r[i]) / (k - 1.0) - level).powi(2))
                .sum::<f64>()
                / idx.len() as f64
        })
        .collect();
    let mean = loo.iter().sum::<f64>() / k;
    let var = loo.iter().map(|b| (b - mean).powi(2)).sum::<f64>() * (k - 1.0) / k;
    Ok(Scalar {
        value,
        stderr: var.sqrt(),
        points_sd: None,
    })
}

/// The median (NaN for no values).
fn median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The flags of an MCMC method's repetitions (spec §8), from the scalars it reports per
/// repetition: chains that did not mix (`rhat_flagged`: R̂ above the method's threshold),
/// chains with a low E-BFMI (`ebfmi_flagged`), divergent transitions, and how many
/// repetitions meet posteriordb's reference standard (`reference_grade`). Methods without
/// these scalars get no flag.
pub(super) fn mixing_flag<'a>(
    scalars: impl Iterator<Item = &'a BTreeMap<String, f64>> + Clone,
    total: usize,
) -> Vec<String> {
    let count = |key: &str| {
        scalars
            .clone()
            .filter(|s| s.get(key).is_some_and(|v| *v > 0.0))
            .count()
    };
    let has = |key: &str| scalars.clone().any(|s| s.contains_key(key));
    let mut flags = Vec::new();
    let flagged = count("rhat_flagged");
    if flagged > 0 {
        flags.push(format!(
            "{flagged} of {total} repetitions have chains that did not mix (R̂ = max(bulk, tail) \
             above the threshold; see rhat_max, ess_bulk_min, ess_tail_min)"
        ));
    }
    let low = count("ebfmi_flagged");
    if low > 0 {
        flags.push(format!(
            "{low} of {total} repetitions have a chain with E-BFMI below 0.3 (ebfmi_min)"
        ));
    }
    let divergent = count("divergent_transitions");
    if divergent > 0 {
        flags.push(format!(
            "{divergent} of {total} repetitions had divergent transitions after warm-up \
             (energy error above 1000)"
        ));
    }
    if has("reference_grade") {
        let good = count("reference_grade");
        flags.push(format!(
            "{good} of {total} repetitions meet posteriordb's reference standard (R̂ < 1.01, bulk \
             and tail ESS > 400 at every test input, no divergent transitions){}",
            if good < total {
                "; the others' intervals are not reference-grade"
            } else {
                ""
            }
        ));
    }
    flags
}

/// Index sets per region: `all`, then each region that occurs.
pub fn regions(test: &TestInfo) -> Vec<(&'static str, Vec<usize>)> {
    let mut out = vec![(names::ALL, (0..test.truth.len()).collect::<Vec<_>>())];
    for r in [Region::In, Region::Gap, Region::Out] {
        let idx: Vec<usize> = (0..test.truth.len())
            .filter(|&i| test.region[i] == r)
            .collect();
        if !idx.is_empty() {
            out.push((r.as_str(), idx));
        }
    }
    out
}

/// The region whose deviation judges the training fit: `in` where the test set has one,
/// else `all`.
fn fit_region(s: &MethodSummary) -> Option<&BTreeMap<String, Scalar>> {
    s.aggregate
        .get(names::IN)
        .or_else(|| s.aggregate.get(names::ALL))
}

/// Summarises one setting: the anchor first (its uncertainty is the ratio's denominator and its
/// deviation the floor of the underfit check), then every other method.
pub fn summarize_setting(
    setting: &str,
    test: TestInfo,
    methods: &BTreeMap<String, Vec<RepResult>>,
    levels: &[f64],
) -> Result<SettingSummary> {
    let mut out = BTreeMap::new();
    let anchor = match methods.get(ANCHOR) {
        Some(reps) => Some(summarize_method(&test, reps, levels, None)?),
        None => None,
    };
    let anchor_unc = anchor
        .as_ref()
        .and_then(|s| s.points.get(names::UNCERTAINTY).map(|p| p.value.clone()));
    let anchor_dev = anchor
        .as_ref()
        .and_then(fit_region)
        .and_then(|a| a.get(names::DEVIATION))
        .map(|s| s.value);
    for (name, reps) in methods {
        if name == ANCHOR {
            continue;
        }
        let mut s = summarize_method(&test, reps, levels, anchor_unc.as_deref())
            .map_err(|e| e.context(format!("method {name}")))?;
        let dev = fit_region(&s)
            .and_then(|a| a.get(names::DEVIATION))
            .map(|s| s.value);
        if let (Some(dev), Some(floor)) = (dev, anchor_dev) {
            let ratio = dev / floor;
            let region = if s.aggregate.contains_key(names::IN) {
                names::IN
            } else {
                names::ALL
            };
            s.aggregate
                .entry(region.to_string())
                .or_default()
                .insert(names::DEVIATION_RATIO.into(), Scalar::bare(ratio));
            if ratio > UNDERFIT_FACTOR {
                s.flags.push(format!(
                    "underfit: deviation ({region}) {ratio:.1}× the anchor's (flagged above \
                     {UNDERFIT_FACTOR}×)"
                ));
            }
        }
        s.flags.extend(mixing_flag(
            reps.iter().filter(|r| !r.diverged).map(|r| &r.scalars),
            reps.len(),
        ));
        if !s.diverged.is_empty() {
            s.flags.push(format!(
                "{} of {} repetitions diverged and are left out",
                s.diverged.len(),
                reps.len()
            ));
        }
        out.insert(name.clone(), s);
    }
    if let Some(a) = anchor {
        out.insert(ANCHOR.to_string(), a);
    }
    Ok(SettingSummary {
        setting: setting.to_string(),
        test,
        methods: out,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use uqbench_anchor::Region;
    use uqbench_core::Family;
    use uqbench_core::Method;

    use super::*;
    use crate::spec::ExperimentSpec;
    use crate::summary::types::Summary;

    fn rep(r: u64, mean: [f64; 2], std: [f64; 2]) -> RepResult {
        RepResult {
            repetition: r,
            mean: mean.to_vec(),
            std: std.to_vec(),
            noise_std: None,
            predictive_std: None,
            family: Family::Normal,
            intervals: BTreeMap::new(),
            crps: None,
            scalars: BTreeMap::from([("train_mse".to_string(), r as f64)]),
            diverged: false,
        }
    }

    fn two_points() -> TestInfo {
        TestInfo {
            x: vec![vec![0.0], vec![5.0]],
            coord: None,
            region: vec![Region::In, Region::Out],
            label: vec![None, None],
            truth: vec![0.0, 1.0],
            sigma: vec![1.0, 1.0],
        }
    }

    #[test]
    fn three_repetitions_at_two_points_by_hand() {
        let mut bad = rep(3, [f64::NAN, f64::NAN], [f64::NAN, f64::NAN]);
        bad.diverged = true;
        let reps = vec![
            rep(0, [0.5, 1.0], [0.5, 0.1]),
            rep(1, [-1.0, 2.0], [0.4, 0.2]),
            rep(2, [0.1, 0.7], [0.2, 0.3]),
            bad,
        ];
        let s = summarize_method(&two_points(), &reps, &[0.9], None).unwrap();
        assert_eq!((s.repetitions, s.diverged.clone()), (3, vec![3]));
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // Point 0: deviations 0.5, 1.0, 0.1 → mean 0.53333, sample variance 0.20333, se
        // sqrt(0.20333/3) = 0.260342.
        let dev = &s.points["deviation"];
        assert!(close(dev.value[0], 1.6 / 3.0) && close(dev.stderr[0], (0.61 / 9.0f64).sqrt()));
        // Coverage of ±1.96·std: point 0 covered by repetitions 0 (0.5 < 0.98) and 2 (0.1 <
        // 0.392), not 1 (1.0 ≥ 0.784); point 1 by 0 (0 < 0.196) and 2 (0.3 < 0.588).
        let cov = &s.points["coverage"];
        assert!(close(cov.value[0], 2.0 / 3.0) && close(cov.value[1], 2.0 / 3.0));
        assert!(close(cov.stderr[0], (2.0f64 / 27.0).sqrt()));
        // CICF at 0.9 (z = 1.644854): point 0 by repetitions 0 (0.5 ≤ 0.822) and 2 (0.1 ≤
        // 0.329); mean width 2·z·(0.5 + 0.4 + 0.2)/3 = 1.206226.
        assert!(close(s.points["cicf_0.9"].value[0], 2.0 / 3.0));
        let z = 1.644_853_626_951_472_2;
        assert!(close(s.points["width_0.9"].value[0], 2.0 * z * 1.1 / 3.0));
        // Each repetition's marginal CICP at 0.9 over both points: point 1 is covered by
        // repetitions 0 (0 ≤ 0.164) and 2 (0.3 ≤ 0.493), not 1 (1.0 > 0.329); so 1, 0, 1.
        assert_eq!(s.per_repetition["cicp_0.9"], vec![1.0, 0.0, 1.0]);
        // Aggregates: the mean deviation over both points, (0.53333 + 0.43333)/2; per region
        // `in` is point 0 alone; scalars are means over the three repetitions.
        assert!(close(
            s.aggregate["all"]["deviation"].value,
            (1.6 + 1.3) / 6.0
        ));
        assert!(close(s.aggregate["in"]["deviation"].value, 1.6 / 3.0));
        assert!(close(s.aggregate["all"]["train_mse"].value, 1.0));
        // The CSV carries the per-point value and the diverged count.
        let summary = Summary {
            experiment: "t".into(),
            levels: vec![0.9],
            settings: vec![SettingSummary {
                setting: "w=1".into(),
                test: two_points(),
                methods: BTreeMap::from([("M".to_string(), s)]),
            }],
        };
        let csv = summary.points_csv();
        assert!(csv.contains("w=1,M,,,,all,,diverged,1,,,\n"), "{csv}");
        assert!(
            csv.contains(&format!("w=1,M,0,0,,in,,deviation,{},", 1.6 / 3.0)),
            "{csv}"
        );
        assert!(summary.aggregate_csv().contains("w=1,M,all,diverged,1,,\n"));
    }

    #[test]
    fn region_error_bars_are_over_repetitions_by_hand() {
        // Four points (truth 0, 1, 2, 3; σ = 1), the first two `in`, the last two `out`, and
        // three repetitions.
        let test = TestInfo {
            x: (0..4).map(|i| vec![f64::from(i)]).collect(),
            coord: None,
            region: vec![Region::In, Region::In, Region::Out, Region::Out],
            label: vec![None; 4],
            truth: vec![0.0, 1.0, 2.0, 3.0],
            sigma: vec![1.0; 4],
        };
        let rep4 = |r: u64, mean: [f64; 4], std: [f64; 4]| RepResult {
            repetition: r,
            mean: mean.to_vec(),
            std: std.to_vec(),
            ..rep(r, [0.0; 2], [0.0; 2])
        };
        let reps = vec![
            rep4(0, [0.5, 1.0, 2.0, 4.0], [0.5; 4]),
            rep4(1, [-1.0, 1.5, 2.2, 3.0], [0.4; 4]),
            rep4(2, [0.1, 0.0, 2.5, 3.5], [0.2, 0.2, 1.0, 1.0]),
        ];
        let s = summarize_method(&test, &reps, &[0.9], None).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let se3 = |v: [f64; 3]| {
            let m = (v[0] + v[1] + v[2]) / 3.0;
            (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / 2.0 / 3.0).sqrt()
        };
        // Deviations: rep 0 [0.5, 0, 0, 1], rep 1 [1, 0.5, 0.2, 0], rep 2 [0.1, 1, 0.5, 0.5].
        // `in` per repetition: 0.25, 0.75, 0.55 → mean 0.516667, sd 0.251661, se 0.145297.
        let dev = s.aggregate["in"]["deviation"];
        assert!(close(dev.value, 1.55 / 3.0) && close(dev.stderr, 0.145_296_631_4));
        assert!(close(dev.stderr, se3([0.25, 0.75, 0.55])));
        // `all` per repetition: 0.375, 0.425, 0.525 → se of those.
        let dev = s.aggregate["all"]["deviation"];
        assert!(close(dev.value, 1.325 / 3.0) && close(dev.stderr, se3([0.375, 0.425, 0.525])));
        // The spread across the `in` points of their mean deviations, 0.53333 and 0.5, is
        // |difference|/√2 = 0.0235702: descriptive, and not the standard error.
        assert!(close(
            s.aggregate["in"]["deviation"].points_sd.unwrap(),
            0.1 / 3.0 / 2f64.sqrt()
        ));
        // Coverage of ±1.96·std (strict): rep 0 [1, 1, 1, 0], rep 1 [0, 1, 1, 1], rep 2
        // [1, 0, 1, 1]. `in` per repetition 1, ½, ½ → 2/3 with se sqrt(1/12/3) = 1/6; `all`
        // per repetition ¾ each → se 0 (the across-points "se" of the old code was 0.083).
        let cov = s.aggregate["in"]["coverage"];
        assert!(close(cov.value, 2.0 / 3.0) && close(cov.stderr, 1.0 / 6.0));
        let cov = s.aggregate["all"]["coverage"];
        assert!(close(cov.value, 0.75) && close(cov.stderr, 0.0));
        // Width at 0.9 in `in`: per repetition 2z·0.5, 2z·0.4, 2z·0.2.
        let z = 1.644_853_626_951_472_2;
        let w = s.aggregate["in"]["width_0.9"];
        assert!(
            close(w.value, 2.0 * z * 1.1 / 3.0) && close(w.stderr, 2.0 * z * se3([0.5, 0.4, 0.2]))
        );
        // CICF at 0.9 in `in` (half widths 0.822, 0.658, 0.329): rep 0 [1, 1], rep 1 [0, 1],
        // rep 2 [1, 0]; CF = (2/3, 2/3), Brier (2/3 − 0.9)² = 0.054444. Leaving out one
        // repetition: CF (½, ½) → 0.16, (1, ½) → 0.085, (½, 1) → 0.085; mean 0.11, jackknife
        // se sqrt(2/3 · (0.05² + 2·0.025²)) = 0.05.
        let b = s.aggregate["in"]["cicf_brier_0.9"];
        assert!(close(b.value, (2.0f64 / 3.0 - 0.9).powi(2)) && close(b.stderr, 0.05));
        // The region's CICP: per repetition 1, ½, ½ → 2/3 ± 1/6.
        let c = s.aggregate["in"]["cicp_0.9"];
        assert!(close(c.value, 2.0 / 3.0) && close(c.stderr, 1.0 / 6.0));
        // The CSV carries the spread in its own column.
        let summary = Summary {
            experiment: "t".into(),
            levels: vec![0.9],
            settings: vec![SettingSummary {
                setting: String::new(),
                test,
                methods: BTreeMap::from([("M".to_string(), s)]),
            }],
        };
        let csv = summary.aggregate_csv();
        assert!(csv.starts_with("setting,method,region,metric,value,stderr,points_sd\n"));
        let row: Vec<f64> = csv
            .lines()
            .find(|l| l.starts_with(",M,in,deviation,"))
            .expect("the row")
            .split(',')
            .skip(4)
            .map(|v| v.parse().unwrap())
            .collect();
        assert!(close(row[0], 1.55 / 3.0) && close(row[1], 0.145_296_631_4));
        assert!(close(row[2], 0.1 / 3.0 / 2f64.sqrt()), "{csv}");
    }

    #[test]
    fn a_non_finite_prediction_must_be_marked_diverged() {
        let reps = vec![rep(0, [f64::NAN, 1.0], [0.1, 0.1])];
        let e = summarize_method(&two_points(), &reps, &[0.9], None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("repetition 0, test input 0") && e.contains("diverged"),
            "{e}"
        );
    }

    #[test]
    fn the_student_t_anchor_covers_at_its_level() {
        // A quartic with N = 12 and σ unknown: 12 − 5 = 7 degrees of freedom. Normal quantiles
        // would cover f in P(|T₇| < 1.96) = 0.909 of the repetitions; t quantiles in 0.95.
        let spec = ExperimentSpec::from_toml_str(
            r#"
name = "t7"
seed = 3
[problem]
d = 1
sigma = 1
sigma_known = false
gamma = [0, 0.5, -8, -1, 2]
features = [{ kind = "polynomial", degree = 4 }]
train = { kind = "grid", n = 12, low = -2, high = 2.5 }
test = { kind = "grid", n = 9, low = -2, high = 2.5 }
"#,
            None,
        )
        .unwrap();
        let problem = spec.resolve(&Default::default()).unwrap();
        let k = 2000;
        let all: Vec<u64> = (0..k).collect();
        let data = problem.task_data(&all, false);
        let task = data.task(
            1,
            uqbench_core::SeedBase {
                base: 3,
                experiment: "t7".into(),
                setting: String::new(),
            },
        );
        let predictions = uqbench_anchor::Blr
            .run(&task, &uqbench_core::Compute::host(), false, &|_| {})
            .unwrap();
        let reps: Vec<RepResult> = predictions
            .into_iter()
            .zip(&data.y)
            .enumerate()
            .map(|(r, (o, y))| {
                RepResult::from_output(
                    r as u64,
                    o,
                    &crate::summary::RepContext {
                        levels: &[],
                        truth: &problem.test.truth,
                        test_sigma: &problem.test.sigma,
                        train_y: y,
                        train_sigma: &problem.train_sigma,
                    },
                )
                .unwrap()
            })
            .collect();
        assert_eq!(reps[0].family, Family::StudentT { dof: 7.0 });
        let test = TestInfo::of(&problem);
        let s = summarize_method(&test, &reps, &[0.95, 0.8], None).unwrap();
        // Each point's CICF over k = 2000 repetitions has sd sqrt(0.95·0.05/2000) = 0.00487
        // (0.0089 at 0.8); 9 points × 2 metrics per level: 4 sd keeps the family-wise false
        // alarm rate below 18 × 6.3e-5 ≈ 1e-3, and the normal-quantile error (0.041) is
        // 8 sd away.
        for (level, sd) in [(0.95, 0.00487), (0.8, 0.00894)] {
            let name = crate::summary::level_name(level);
            for metric in ["cicf", "picf"] {
                for (i, c) in s.points[&format!("{metric}_{name}")]
                    .value
                    .iter()
                    .enumerate()
                {
                    assert!(
                        (c - level).abs() < 4.0 * sd,
                        "{metric} {level} at point {i}: {c}"
                    );
                }
            }
        }
        // The training fit: E[RSS/σ²] = N − p, so fit_ratio averages 7/12 = 0.583; over
        // 2000 repetitions its sd is sqrt(2·7)/12/sqrt(2000) = 0.0070 (σ² estimated only
        // matters for the intervals, the ratio uses the true σ = 1).
        let fit = s.aggregate["all"]["fit_ratio"].value;
        assert!((fit - 7.0 / 12.0).abs() < 4.0 * 0.0070, "fit_ratio {fit}");
    }
}
