//! The metrics of spec §2 and §4 from per-repetition results: per test input and method,
//! and aggregated per region.

use std::collections::BTreeMap;

use crate::bail;
use crate::error::Result;
use uqbench_core::Family;
use uqbench_metrics::coverage::{self, Intervals};

use super::joint::JointMetrics;
use super::names;
use super::regions::{points_of, region_points, RegionPoints};
use super::types::{
    level_name, ByRepetition, MethodSummary, PointMetric, RepResult, Scalar, SettingSummary,
    TestInfo, Which, ANCHOR, UNDERFIT_FACTOR,
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
        // One trial has no spread to measure: no error bar (empty), not 0.
        out.stderr.push(if k < 2 { f64::NAN } else { p.se });
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
    if k == 0 {
        return Ok(MethodSummary::empty(diverged, Vec::new()));
    }
    let mut points: BTreeMap<String, PointMetric> = BTreeMap::new();
    // Every quantity below is first computed per repetition and test input (`[r][i]`); a
    // per-point metric is its mean over repetitions, a region aggregate the mean over
    // repetitions of each repetition's mean over the region's points, and every standard
    // error is over the K independent repetitions (spec §8).
    let (deviation, covered, crps) = per_repetition_errors(test, &ok)?;
    let uncertainty: Vec<Vec<f64>> = ok.iter().map(|r| r.std.clone()).collect();
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
    let regs = region_points(test, &ok)?;
    let mut per_point: Vec<(String, Vec<Vec<f64>>)> = vec![
        (names::DEVIATION.into(), deviation),
        (names::UNCERTAINTY.into(), uncertainty),
        (names::CRPS.into(), crps),
    ];
    // The distances to the anchor, where every repetition has them.
    type Field = fn(&RepResult) -> &Option<Vec<f64>>;
    let fields: [(&str, Field); 2] = [
        (names::W2_ANCHOR, |r| &r.w2_anchor),
        (names::KL_ANCHOR, |r| &r.kl_anchor),
    ];
    for (name, field) in fields {
        if let Some(v) = ok
            .iter()
            .map(|r| field(r).clone())
            .collect::<Option<Vec<_>>>()
        {
            per_point.push((name.into(), v));
        }
    }

    // Pointwise coverage fractions of [004] and widths, per level.
    let mut acc = Acc {
        points,
        aggregate: BTreeMap::new(),
        per_repetition: BTreeMap::new(),
        per_point,
        by: ByRepetition::new(ok.iter().map(|r| r.repetition).collect()),
    };
    for &level in levels {
        level_metrics(test, &ok, level, &regs, &mut acc)?;
    }
    let Acc {
        mut points,
        mut aggregate,
        per_repetition,
        per_point,
        mut by,
    } = acc;

    region_aggregates(
        &regs,
        &per_point,
        &covered,
        &points,
        &mut aggregate,
        &mut by,
    );
    for (name, v) in per_point {
        points.insert(name, mean_se_per_point(&v, m));
    }
    points.insert(names::COVERAGE.into(), proportions(&hits, k));
    points.insert(names::RMSE.into(), rmse);
    insert_scalars(
        aggregate.entry(names::ALL.into()).or_default(),
        &ok,
        &mut by,
    );
    insert_joint(&mut aggregate, ok.iter().map(|r| &r.joint), &mut by);

    Ok(MethodSummary {
        repetitions: k,
        diverged,
        points,
        aggregate,
        flags: Vec::new(),
        per_repetition,
        joint_kind: ok.iter().find_map(|r| r.joint_kind),
        joint_of_base: ok.iter().any(|r| r.joint_of_base),
        by_repetition: by,
    })
}

/// Every region's aggregates of the per-point metrics (means over repetitions of each
/// repetition's region mean, with their standard errors), coverage, point count and the
/// median uncertainty ratio.
fn region_aggregates(
    regs: &RegionPoints,
    per_point: &[(String, Vec<Vec<f64>>)],
    covered: &[Vec<f64>],
    points: &BTreeMap<String, PointMetric>,
    aggregate: &mut BTreeMap<String, BTreeMap<String, Scalar>>,
    by: &mut ByRepetition,
) {
    for (region, nominal, per) in regs {
        let idx = points_of(nominal, per);
        let entry = aggregate.entry((*region).to_string()).or_default();
        for (name, v) in per_point {
            entry.insert(name.clone(), by.region(region, name, v, idx));
        }
        entry.insert(
            names::COVERAGE.into(),
            by.region(region, names::COVERAGE, covered, idx),
        );
        // Points per repetition (with a random design, the mean over repetitions).
        let count = match per {
            Some(per) => per.iter().map(Vec::len).sum::<usize>() as f64 / per.len() as f64,
            None => nominal.len() as f64,
        };
        entry.insert(names::POINTS.into(), Scalar::bare(count));
        let idx = nominal;
        if let (Some(ratio), false) = (points.get(names::UNCERTAINTY_RATIO), idx.is_empty()) {
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
}

/// Per repetition and test input: |mean − f|, whether the coverage interval (95%) covers f
/// (0/1), and the CRPS against f.
#[allow(clippy::type_complexity)]
fn per_repetition_errors(
    test: &TestInfo,
    ok: &[&RepResult],
) -> Result<(Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<Vec<f64>>)> {
    let (m, k) = (test.truth.len(), ok.len());
    let in_context = |r: &RepResult, e: crate::error::ExperimentError| {
        e.context(format!("repetition {}", r.repetition))
    };
    let mut deviation = Vec::with_capacity(k);
    let mut covered = Vec::with_capacity(k);
    let mut crps = Vec::with_capacity(k);
    for r in ok {
        let truth = test.truth_of(r.repetition)?;
        deviation.push(
            r.mean
                .iter()
                .zip(truth)
                .map(|(p, t)| (p - t).abs())
                .collect::<Vec<f64>>(),
        );
        let (lo, hi) = r.coverage_interval().map_err(|e| in_context(r, e))?;
        covered.push(
            (0..m)
                .map(|i| f64::from(u8::from(lo[i] < truth[i] && truth[i] < hi[i])))
                .collect::<Vec<f64>>(),
        );
        crps.push(r.crps(truth).map_err(|e| in_context(r, e))?);
    }
    Ok((deviation, covered, crps))
}

/// What [`summarize_method`] accumulates: per-point metrics, region aggregates, per-repetition
/// values, and per-point values per repetition (`[r][i]`) still to be aggregated.
struct Acc {
    points: BTreeMap<String, PointMetric>,
    aggregate: BTreeMap<String, BTreeMap<String, Scalar>>,
    per_repetition: BTreeMap<String, Vec<f64>>,
    per_point: Vec<(String, Vec<Vec<f64>>)>,
    by: ByRepetition,
}

/// [004]'s pointwise coverage fractions (CICF of f, PICF of y), their Brier scores and the
/// marginal coverages per region, and the widths, at one level.
fn level_metrics(
    test: &TestInfo,
    ok: &[&RepResult],
    level: f64,
    regs: &RegionPoints,
    acc: &mut Acc,
) -> Result<()> {
    let (m, k) = (test.truth.len(), ok.len());
    let in_context = |r: &RepResult, e: crate::error::ExperimentError| {
        e.context(format!("repetition {}", r.repetition))
    };
    let name = level_name(level);
    let mut ci = Vec::with_capacity(k);
    let mut pi = Vec::with_capacity(k);
    for r in ok {
        let sigma = test.sigma_of(r.repetition)?;
        ci.push(
            r.interval(level, Which::Ci, sigma)
                .map_err(|e| in_context(r, e))?,
        );
        pi.push(
            r.interval(level, Which::Pi, sigma)
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
    for (((cl, cu), (pl, pu)), r) in ci.iter().zip(&pi).zip(ok) {
        let (truth, sigma) = (test.truth_of(r.repetition)?, test.sigma_of(r.repetition)?);
        cicf_r.push(coverage::cicf(
            &[Intervals {
                lower: cl,
                upper: cu,
            }],
            truth,
        )?);
        picf_r.push(coverage::picf(
            &[Intervals {
                lower: pl,
                upper: pu,
            }],
            truth,
            sigma,
        )?);
    }
    // Each repetition's marginal coverage over all test inputs ([004]'s histograms).
    let over_points = |v: &[Vec<f64>]| -> Vec<f64> {
        v.iter().map(|r| r.iter().sum::<f64>() / m as f64).collect()
    };
    acc.per_repetition
        .insert(format!("{}_{name}", names::CICP), over_points(&cicf_r));
    acc.per_repetition
        .insert(format!("{}_{name}", names::PICP), over_points(&picf_r));
    let cicf_hits: Vec<u64> = (0..m)
        .map(|i| cicf_r.iter().filter(|c| c[i] > 0.5).count() as u64)
        .collect();
    acc.points.insert(
        format!("{}_{name}", names::CICF),
        proportions(&cicf_hits, k),
    );
    acc.points.insert(
        format!("{}_{name}", names::PICF),
        mean_se_per_point(&picf_r, m),
    );
    let cicf = acc.points[&format!("{}_{name}", names::CICF)].value.clone();
    let picf = acc.points[&format!("{}_{name}", names::PICF)].value.clone();
    for (region, nominal, per) in regs {
        let idx = points_of(nominal, per);
        let entry = acc.aggregate.entry((*region).to_string()).or_default();
        // [004]'s Brier scores judge each point's coverage fraction over repetitions: they
        // need the same points in every repetition (not a random design's).
        if per.is_none() {
            entry.insert(
                format!("{}_{name}", names::CICF_BRIER),
                brier_over_reps(&cicf_r, &cicf, nominal, level)?,
            );
            entry.insert(
                format!("{}_{name}", names::PICF_BRIER),
                brier_over_reps(&picf_r, &picf, nominal, level)?,
            );
        }
        // Marginal coverage of the region: each repetition's fraction of the region
        // covered (CICP) or its mean PI coverage probability (PICP), over repetitions.
        entry.insert(
            format!("{}_{name}", names::CICP),
            acc.by
                .region(region, &format!("{}_{name}", names::CICP), &cicf_r, idx),
        );
        entry.insert(
            format!("{}_{name}", names::PICP),
            acc.by
                .region(region, &format!("{}_{name}", names::PICP), &picf_r, idx),
        );
    }
    acc.per_point
        .push((format!("{}_{name}", names::WIDTH), widths(&ci)));
    acc.per_point
        .push((format!("{}_{name}", names::PI_WIDTH), widths(&pi)));
    Ok(())
}

/// Per-repetition scalars (learned rates, objectives, training fit): mean and standard error
/// over the repetitions that entered the metrics.
fn insert_scalars(all: &mut BTreeMap<String, Scalar>, ok: &[&RepResult], by: &mut ByRepetition) {
    let mut names: Vec<&String> = ok.iter().flat_map(|r| r.scalars.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        by.put(
            names::ALL,
            name,
            ok.iter()
                .map(|r| r.scalars.get(name).copied().unwrap_or(f64::NAN))
                .collect(),
        );
        let v: Vec<f64> = ok
            .iter()
            .filter_map(|r| r.scalars.get(name).copied())
            .collect();
        if let Some(s) = Scalar::over_repetitions(&v) {
            all.insert(name.clone(), s);
        }
    }
}

/// The joint metrics (spec §10) per region: the mean and standard error over repetitions of
/// each repetition's value (its Monte Carlo error is part of the spread between repetitions);
/// each repetition's own `…_se` stays in its file.
pub(super) fn insert_joint<'a>(
    aggregate: &mut BTreeMap<String, BTreeMap<String, Scalar>>,
    reps: impl Iterator<Item = &'a JointMetrics> + Clone,
    by: &mut ByRepetition,
) {
    let mut keys: Vec<(String, String)> = reps
        .clone()
        .flat_map(|j| {
            j.iter().flat_map(|(region, m)| {
                m.keys()
                    .filter(|k| !k.ends_with("_se"))
                    .map(move |k| (region.clone(), k.clone()))
            })
        })
        .collect();
    keys.sort();
    keys.dedup();
    for (region, name) in keys {
        by.put(
            &region,
            &name,
            reps.clone()
                .map(|j| {
                    j.get(&region)
                        .and_then(|m| m.get(&name).copied())
                        .unwrap_or(f64::NAN)
                })
                .collect(),
        );
        let v: Vec<f64> = reps
            .clone()
            .filter_map(|j| j.get(&region)?.get(&name).copied())
            .collect();
        if let Some(s) = Scalar::over_repetitions(&v) {
            aggregate.entry(region).or_default().insert(name, s);
        }
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
        infinite: None,
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
    let flagged = count(names::RHAT_FLAGGED);
    if flagged > 0 {
        flags.push(format!(
            "{flagged} of {total} repetitions have chains that did not mix (R̂ = max(bulk, tail) \
             above the threshold; see rhat_max, ess_bulk_min, ess_tail_min)"
        ));
    }
    let low = count(names::EBFMI_FLAGGED);
    if low > 0 {
        flags.push(format!(
            "{low} of {total} repetitions have a chain with E-BFMI below 0.3 (ebfmi_min)"
        ));
    }
    let divergent = count(names::DIVERGENT_TRANSITIONS);
    if divergent > 0 {
        flags.push(format!(
            "{divergent} of {total} repetitions had divergent transitions after warm-up \
             (energy error above 1000)"
        ));
    }
    if has(names::REFERENCE_GRADE) {
        let good = count(names::REFERENCE_GRADE);
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
#[path = "compute_tests.rs"]
mod tests;
