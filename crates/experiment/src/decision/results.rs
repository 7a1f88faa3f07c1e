//! The decision track's results: one row per (setting, policy, repetition, metric), their
//! means with standard errors over repetitions, and each policy's mean curve with its band.
//!
//! Metrics (lower is better for all but `optimal_fraction`):
//! - bandit: `regret` (cumulative at the horizon), `regret_ratio` (regret / the exact
//!   Thompson sampler's on the same repetition: 1 when both are 0, +inf when only the
//!   sampler's is), `optimal_fraction` (higher is better);
//! - active: `al_auc` (mean RMSE of the mean against f over the steps), `al_auc_ratio` (/ the
//!   exact learner's), `al_nll` (mean NLL of f at the horizon).
//!
//! The metric catalogue lists them with their directions (`summary::catalogue`, track
//! `decision`), and `repetitions.csv` holds the rows in the standard track's layout (region
//! `all`), so `uqbench compare` and Python's `uqbench.compare` pair policies as they pair
//! methods.
//!
//! Aggregated over repetitions, a ratio is the **ratio of the means** (mean regret / the exact
//! policy's mean regret) with its delta-method standard error over the paired repetitions,
//! not the mean of the per-repetition ratios: on a finite action set the exact sampler's
//! regret is often exactly 0 (it never leaves the best arm), where a per-repetition ratio is
//! +inf and its mean says nothing.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::{DecisionKind, PolicyResult};
use crate::error::Result;
use crate::store::write_atomic;
use crate::summary::files::num;
use crate::summary::names::{self as n, ALL};
use crate::summary::{REPETITIONS_COLUMNS, REPETITIONS_CSV};

/// The exact policy's name on both tracks (the anchor's).
pub const EXACT: &str = "BLR";

/// One value of one policy on one repetition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The setting's label.
    pub setting: String,
    /// The policy.
    pub policy: String,
    /// The repetition.
    pub repetition: u64,
    /// The metric's name.
    pub metric: &'static str,
    /// Its value.
    pub value: f64,
}

/// A / the exact policy's B: 1 when both are 0, +inf when only B is.
fn ratio(a: f64, b: f64) -> f64 {
    match (a, b) {
        (a, b) if a == 0.0 && b == 0.0 => 1.0,
        (_, b) if b == 0.0 => f64::INFINITY,
        (a, b) => a / b,
    }
}

/// The rows of one repetition's results.
pub fn rows(
    kind: DecisionKind,
    setting: &str,
    repetition: u64,
    results: &[PolicyResult],
) -> Vec<Row> {
    let score = |r: &PolicyResult| match kind {
        DecisionKind::Bandit => r.curve.last().copied().unwrap_or(0.0),
        DecisionKind::Active => r.curve.iter().sum::<f64>() / r.curve.len().max(1) as f64,
    };
    let exact = results.iter().find(|r| r.policy == EXACT).map(score);
    let (main, relative, extra) = match kind {
        DecisionKind::Bandit => (n::REGRET, n::REGRET_RATIO, n::OPTIMAL_FRACTION),
        DecisionKind::Active => (n::AL_AUC, n::AL_AUC_RATIO, n::AL_NLL),
    };
    let mut out = Vec::new();
    for r in results {
        let row = |metric, value| Row {
            setting: setting.to_string(),
            policy: r.policy.clone(),
            repetition,
            metric,
            value,
        };
        let s = score(r);
        out.push(row(main, s));
        if let Some(e) = exact {
            out.push(row(relative, ratio(s, e)));
        }
        out.push(row(extra, r.extra));
    }
    out
}

/// The mean and its standard error over the finite values (`n` of them); an infinite value
/// makes the mean infinite, as in every summary of uqbench.
pub fn mean_se(values: &[f64]) -> (f64, f64, usize) {
    if values.iter().any(|v| v.is_infinite()) {
        let sum: f64 = values.iter().filter(|v| v.is_infinite()).sum();
        return (sum, f64::NAN, values.len());
    }
    let v: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    match uqbench_metrics::coverage::mean_se(&v) {
        Ok(m) => (m.mean, m.se, v.len()),
        Err(_) => (f64::NAN, f64::NAN, 0),
    }
}

/// One policy's mean curve over repetitions at one setting, with its standard error per step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Curve {
    /// The setting's label.
    pub setting: String,
    /// The policy.
    pub policy: String,
    /// The mean after each step.
    pub mean: Vec<f64>,
    /// Its standard error over repetitions.
    pub se: Vec<f64>,
}

/// The mean curve of every policy from each repetition's results (`per_rep[r]`).
pub fn curves(setting: &str, per_rep: &[Vec<PolicyResult>]) -> Vec<Curve> {
    let Some(first) = per_rep.first() else {
        return Vec::new();
    };
    (first.iter().enumerate())
        .map(|(i, p)| {
            let steps = p.curve.len();
            let (mean, se) = (0..steps)
                .map(|t| {
                    let at: Vec<f64> = per_rep.iter().map(|r| r[i].curve[t]).collect();
                    let (m, s, _) = mean_se(&at);
                    (m, s)
                })
                .unzip();
            Curve {
                setting: setting.to_string(),
                policy: p.policy.clone(),
                mean,
                se,
            }
        })
        .collect()
}

/// Writes `decisions.csv` (every row), `decisions_aggregate.csv` (mean, se and n per setting,
/// policy and metric), `repetitions.csv` (the rows in `uqbench compare`'s layout: a policy
/// as its method, region `all`) and `curves.json` into `dir`, each atomically.
pub fn write(dir: &Path, rows: &[Row], curves: &[Curve]) -> Result<()> {
    let mut all = String::from("setting,policy,repetition,metric,value\n");
    for r in rows {
        let _ = writeln!(
            all,
            "{},{},{},{},{}",
            r.setting,
            r.policy,
            r.repetition,
            r.metric,
            num(r.value)
        );
    }
    write_atomic(&dir.join("decisions.csv"), all.as_bytes())?;
    let mut paired = REPETITIONS_COLUMNS.join(",") + "\n";
    for r in rows {
        let _ = writeln!(
            paired,
            "{},{},{ALL},{},{},{}",
            r.setting,
            r.policy,
            r.metric,
            r.repetition,
            num(r.value)
        );
    }
    write_atomic(&dir.join(REPETITIONS_CSV), paired.as_bytes())?;
    let mut agg = String::from("setting,policy,metric,mean,se,n\n");
    for (setting, policy, metric, (mean, se, n)) in aggregate(rows) {
        let _ = writeln!(
            agg,
            "{setting},{policy},{metric},{},{},{n}",
            num(mean),
            num(se)
        );
    }
    write_atomic(&dir.join("decisions_aggregate.csv"), agg.as_bytes())?;
    let json = crate::json::to_string_pretty(curves)?;
    write_atomic(&dir.join("curves.json"), json.as_bytes())
}

/// ā/b̄ of paired samples and its delta-method standard error:
/// Var(ā/b̄) ≈ (Var ā − 2r·Cov(ā, b̄) + r²·Var b̄)/b̄², r = ā/b̄, with the sample
/// (co)variances of the means.
pub fn ratio_of_means(a: &[f64], b: &[f64]) -> (f64, f64) {
    // The pairs where both have a value (a diverged agent's repetition has none).
    let (a, b): (Vec<f64>, Vec<f64>) = (a.iter().zip(b))
        .filter(|(x, y)| !x.is_nan() && !y.is_nan())
        .unzip();
    let n = a.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let nf = n as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / nf, b.iter().sum::<f64>() / nf);
    let r = ratio(ma, mb);
    if n < 2 || mb == 0.0 {
        return (r, f64::NAN);
    }
    let d = (nf - 1.0) * nf;
    let va = a.iter().map(|x| (x - ma).powi(2)).sum::<f64>() / d;
    let vb = b.iter().map(|x| (x - mb).powi(2)).sum::<f64>() / d;
    let cab = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - ma) * (y - mb))
        .sum::<f64>()
        / d;
    let var = (va - 2.0 * r * cab + r * r * vb) / (mb * mb);
    (r, var.max(0.0).sqrt())
}

/// The aggregate of one (setting, policy, metric): a ratio metric as the ratio of the means
/// of its main metric (module docs), anything else as [`mean_se`].
fn aggregate_one(rows: &[Row], setting: &str, policy: &str, metric: &str) -> (f64, f64, usize) {
    let values = |p: &str, m: &str| -> Vec<f64> {
        (rows.iter())
            .filter(|r| r.setting == setting && r.policy == p && r.metric == m)
            .map(|r| r.value)
            .collect()
    };
    match metric.strip_suffix("_ratio") {
        Some(main) => {
            let (a, b) = (values(policy, main), values(EXACT, main));
            let (r, se) = ratio_of_means(&a, &b);
            (r, se, a.iter().filter(|v| !v.is_nan()).count())
        }
        None => mean_se(&values(policy, metric)),
    }
}

/// Mean, se and n per (setting, policy, metric), in the rows' order of first appearance.
pub fn aggregate(rows: &[Row]) -> Vec<(String, String, &'static str, (f64, f64, usize))> {
    let mut keys: Vec<(String, String, &'static str)> = Vec::new();
    for r in rows {
        let k = (r.setting.clone(), r.policy.clone(), r.metric);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|(s, p, m)| {
            let stats = aggregate_one(rows, &s, &p, m);
            (s, p, m, stats)
        })
        .collect()
}
