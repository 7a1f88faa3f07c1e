//! Summaries of per-repetition predictions: the metrics of spec §2 and §4 per test input and
//! method, aggregates per region, and their JSON and CSV files. Used by `run`, `score` and
//! `report` alike, so external predictions are summarised exactly like native ones.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uqbench_anchor::{central_quantile, Problem, Region};
use uqbench_metrics::coverage::{self, Intervals, PAPER_Z};
use uqbench_metrics::regression::crps_gaussian;

/// One method's predictions for one repetition at every test input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepResult {
    /// The repetition index.
    pub repetition: u64,
    /// Prediction of f(x*) (mean of the predictive distribution).
    pub mean: Vec<f64>,
    /// Uncertainty: std of the predictive distribution of f(x*) (epistemic).
    pub std: Vec<f64>,
    /// The method's own estimate of the noise sd at x* (aleatoric), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_std: Option<Vec<f64>>,
    /// Per-repetition scalars such as `learned_p`, `learned_alpha`, `final_loss`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scalars: BTreeMap<String, f64>,
    /// Whether training diverged (NaN or infinite loss); such repetitions are counted but
    /// left out of the metrics.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub diverged: bool,
}

/// Per-test-input metrics: `value` and `stderr` per point, and for proportions the Wilson
/// 95% interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PointMetric {
    /// One value per test input.
    pub value: Vec<f64>,
    /// Standard errors (NaN where not defined).
    pub stderr: Vec<f64>,
    /// Wilson 95% lower bounds, for proportions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower: Option<Vec<f64>>,
    /// Wilson 95% upper bounds, for proportions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upper: Option<Vec<f64>>,
}

/// A single number with its standard error.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scalar {
    /// The value.
    pub value: f64,
    /// Its standard error (NaN where not defined).
    pub stderr: f64,
}

/// Everything computed for one method at one setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodSummary {
    /// Repetitions that entered the metrics.
    pub repetitions: usize,
    /// Repetitions left out because training diverged.
    pub diverged: Vec<u64>,
    /// Metric name → per-point values.
    pub points: BTreeMap<String, PointMetric>,
    /// Region (`all`, `in`, `gap`, `out`) → metric name → aggregate.
    pub aggregate: BTreeMap<String, BTreeMap<String, Scalar>>,
}

/// The test inputs of one setting, as the summary reports them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestInfo {
    /// Coordinates, one row per test input.
    pub x: Vec<Vec<f64>>,
    /// Design coordinate (name, values) when the test design is 1-D-parametrised.
    pub coord: Option<(String, Vec<f64>)>,
    /// `in`, `gap` or `out`.
    pub region: Vec<Region>,
    /// Labels of report points.
    pub label: Vec<Option<String>>,
    /// The noise-free truth.
    pub truth: Vec<f64>,
    /// σ(x).
    pub sigma: Vec<f64>,
}

/// The summary of one setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettingSummary {
    /// Canonical setting label (`f_main=2`, or empty).
    pub setting: String,
    /// The test inputs.
    pub test: TestInfo,
    /// Method name → its summary.
    pub methods: BTreeMap<String, MethodSummary>,
}

/// The summary of a run: every setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Experiment name.
    pub experiment: String,
    /// Interval levels of the CICF/PICF/width metrics.
    pub levels: Vec<f64>,
    /// Per setting.
    pub settings: Vec<SettingSummary>,
}

/// The reference method's name.
pub const ANCHOR: &str = "BLR";

impl TestInfo {
    /// The test inputs of a resolved problem.
    pub fn of(problem: &Problem) -> TestInfo {
        TestInfo {
            x: problem.test.inputs.to_rows(),
            coord: problem.test.coord.clone(),
            region: problem.test.region.clone(),
            label: problem.test.label.clone(),
            truth: problem.test.truth.clone(),
            sigma: problem.test.sigma.clone(),
        }
    }
}

fn level_name(level: f64) -> String {
    format!("{level}")
}

/// Summarises one method's repetitions at one setting. `anchor_uncertainty` is the anchor's
/// mean uncertainty per test input (for the ratio metric); `None` for the anchor itself.
pub fn summarize_method(
    test: &TestInfo,
    reps: &[RepResult],
    levels: &[f64],
    anchor_uncertainty: Option<&[f64]>,
) -> Result<MethodSummary> {
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
        if let Some(n) = &r.noise_std {
            if n.len() != m {
                bail!(
                    "repetition {}: {} noise sds for {m} test inputs",
                    r.repetition,
                    n.len()
                );
            }
        }
    }
    let diverged: Vec<u64> = reps
        .iter()
        .filter(|r| r.diverged)
        .map(|r| r.repetition)
        .collect();
    let ok: Vec<&RepResult> = reps.iter().filter(|r| !r.diverged).collect();
    let k = ok.len();
    let mut points: BTreeMap<String, PointMetric> = BTreeMap::new();
    let mut aggregate: BTreeMap<String, BTreeMap<String, Scalar>> = BTreeMap::new();
    if k == 0 {
        return Ok(MethodSummary {
            repetitions: 0,
            diverged,
            points,
            aggregate,
        });
    }

    let mut dev = PointMetric::default();
    let mut unc = PointMetric::default();
    let mut cov = PointMetric {
        lower: Some(vec![]),
        upper: Some(vec![]),
        ..Default::default()
    };
    let mut crps = PointMetric::default();
    let mut rmse = PointMetric::default();
    for i in 0..m {
        let pred: Vec<f64> = ok.iter().map(|r| r.mean[i]).collect();
        let u: Vec<f64> = ok.iter().map(|r| r.std[i]).collect();
        let s = coverage::point_summary(&pred, &u, test.truth[i], PAPER_Z)
            .map_err(|e| anyhow::anyhow!("test input {i}: {e}"))?;
        dev.value.push(s.deviation.mean);
        dev.stderr.push(s.deviation.se);
        unc.value.push(s.uncertainty.mean);
        unc.stderr.push(s.uncertainty.se);
        cov.value.push(s.coverage.p);
        cov.stderr.push(s.coverage.se);
        cov.lower.as_mut().unwrap().push(s.coverage.wilson.0);
        cov.upper.as_mut().unwrap().push(s.coverage.wilson.1);
        let per_rep: Vec<f64> = (0..k)
            .map(|r| crps_gaussian(&[pred[r]], &[u[r]], &[test.truth[i]]).expect("validated above"))
            .collect();
        let c = coverage::mean_se(&per_rep).expect("k > 0");
        crps.value.push(c.mean);
        crps.stderr.push(c.se);
        let mse = pred
            .iter()
            .map(|p| (p - test.truth[i]).powi(2))
            .sum::<f64>()
            / k as f64;
        rmse.value.push(mse.sqrt());
        rmse.stderr.push(f64::NAN);
    }
    if let Some(anchor) = anchor_uncertainty {
        let ratio = PointMetric {
            value: unc.value.iter().zip(anchor).map(|(u, a)| u / a).collect(),
            stderr: unc.stderr.iter().zip(anchor).map(|(s, a)| s / a).collect(),
            ..Default::default()
        };
        points.insert("uncertainty_ratio".into(), ratio);
    }

    for &level in levels {
        let z = central_quantile(level, None);
        let ci: Vec<(Vec<f64>, Vec<f64>)> = ok
            .iter()
            .map(|r| {
                r.mean
                    .iter()
                    .zip(&r.std)
                    .map(|(m, s)| (m - z * s, m + z * s))
                    .unzip()
            })
            .collect();
        let pi: Vec<(Vec<f64>, Vec<f64>)> = ok
            .iter()
            .map(|r| {
                let noise = r.noise_std.as_deref().unwrap_or(&test.sigma);
                (0..m)
                    .map(|i| {
                        let half = z * (r.std[i].powi(2) + noise[i].powi(2)).sqrt();
                        (r.mean[i] - half, r.mean[i] + half)
                    })
                    .unzip()
            })
            .collect();
        let as_iv = |v: &[(Vec<f64>, Vec<f64>)]| -> Vec<Vec<f64>> {
            v.iter()
                .map(|(l, u)| u.iter().zip(l).map(|(u, l)| u - l).collect())
                .collect()
        };
        let ci_iv: Vec<Intervals<'_>> = ci
            .iter()
            .map(|(l, u)| Intervals { lower: l, upper: u })
            .collect();
        let pi_iv: Vec<Intervals<'_>> = pi
            .iter()
            .map(|(l, u)| Intervals { lower: l, upper: u })
            .collect();
        let cicf = coverage::cicf(&ci_iv, &test.truth)?;
        let picf = coverage::picf(&pi_iv, &test.truth, &test.sigma)?;
        let widths = as_iv(&ci);
        let width: Vec<f64> = (0..m)
            .map(|i| widths.iter().map(|w| w[i]).sum::<f64>() / k as f64)
            .collect();
        let name = level_name(level);
        let wilson = |p: &[f64]| -> (Vec<f64>, Vec<f64>) {
            p.iter()
                .map(|&p| {
                    let hits = (p * k as f64).round() as u64;
                    coverage::proportion(hits, k as u64, 0.95)
                        .expect("valid proportion")
                        .wilson
                })
                .unzip()
        };
        let (lo, hi) = wilson(&cicf);
        points.insert(
            format!("cicf_{name}"),
            PointMetric {
                stderr: cicf
                    .iter()
                    .map(|p| (p * (1.0 - p) / k as f64).sqrt())
                    .collect(),
                value: cicf.clone(),
                lower: Some(lo),
                upper: Some(hi),
            },
        );
        points.insert(
            format!("picf_{name}"),
            PointMetric {
                stderr: vec![f64::NAN; m],
                value: picf.clone(),
                ..Default::default()
            },
        );
        points.insert(
            format!("width_{name}"),
            PointMetric {
                value: width.clone(),
                stderr: vec![f64::NAN; m],
                ..Default::default()
            },
        );
        for (region, idx) in regions(test) {
            let pick = |v: &[f64]| -> Vec<f64> { idx.iter().map(|&i| v[i]).collect() };
            let entry = aggregate.entry(region.to_string()).or_default();
            let c = pick(&cicf);
            let p = pick(&picf);
            entry.insert(
                format!("cicf_brier_{name}"),
                Scalar {
                    value: coverage::coverage_brier(&c, level)?,
                    stderr: f64::NAN,
                },
            );
            entry.insert(
                format!("picf_brier_{name}"),
                Scalar {
                    value: coverage::coverage_brier(&p, level)?,
                    stderr: f64::NAN,
                },
            );
            entry.insert(format!("cicp_{name}"), mean_of(&c));
            entry.insert(format!("picp_{name}"), mean_of(&p));
            entry.insert(format!("width_{name}"), mean_of(&pick(&width)));
        }
    }

    for (region, idx) in regions(test) {
        let pick = |v: &[f64]| -> Vec<f64> { idx.iter().map(|&i| v[i]).collect() };
        let entry = aggregate.entry(region.to_string()).or_default();
        entry.insert("deviation".into(), mean_of(&pick(&dev.value)));
        entry.insert("uncertainty".into(), mean_of(&pick(&unc.value)));
        entry.insert("coverage".into(), mean_of(&pick(&cov.value)));
        entry.insert("crps".into(), mean_of(&pick(&crps.value)));
        entry.insert(
            "points".into(),
            Scalar {
                value: idx.len() as f64,
                stderr: f64::NAN,
            },
        );
        if let Some(ratio) = points.get("uncertainty_ratio") {
            // The median, not the mean: where every feature vanishes (E1 at x = 2 for integer
            // f_main) the anchor is certain and the ratio unbounded.
            entry.insert(
                "uncertainty_ratio".into(),
                Scalar {
                    value: median(&pick(&ratio.value)),
                    stderr: f64::NAN,
                },
            );
        }
    }
    // Per-repetition scalars (learned rates, losses): mean and standard error over repetitions.
    let mut names: Vec<&String> = ok.iter().flat_map(|r| r.scalars.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let v: Vec<f64> = ok
            .iter()
            .filter_map(|r| r.scalars.get(name).copied())
            .collect();
        let s = coverage::mean_se(&v).expect("at least one value");
        aggregate.entry("all".into()).or_default().insert(
            name.clone(),
            Scalar {
                value: s.mean,
                stderr: s.se,
            },
        );
    }

    points.insert("deviation".into(), dev);
    points.insert("uncertainty".into(), unc);
    points.insert("coverage".into(), cov);
    points.insert("crps".into(), crps);
    points.insert("rmse".into(), rmse);
    Ok(MethodSummary {
        repetitions: k,
        diverged,
        points,
        aggregate,
    })
}

/// Mean over test inputs, with the standard error of that mean treating inputs as a sample
/// (inputs are correlated, so read it as descriptive).
fn mean_of(v: &[f64]) -> Scalar {
    match coverage::mean_se(v) {
        Ok(s) => Scalar {
            value: s.mean,
            stderr: s.se,
        },
        Err(_) => Scalar {
            value: f64::NAN,
            stderr: f64::NAN,
        },
    }
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

/// Index sets per region: `all`, then each region that occurs.
fn regions(test: &TestInfo) -> Vec<(&'static str, Vec<usize>)> {
    let mut out = vec![("all", (0..test.truth.len()).collect::<Vec<_>>())];
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

/// Summarises one setting: the anchor first (its uncertainty is the ratio's denominator),
/// then every other method.
pub fn summarize_setting(
    setting: &str,
    test: TestInfo,
    methods: &BTreeMap<String, Vec<RepResult>>,
    levels: &[f64],
) -> Result<SettingSummary> {
    let mut out = BTreeMap::new();
    let anchor_unc: Option<Vec<f64>> = match methods.get(ANCHOR) {
        Some(reps) => {
            let s = summarize_method(&test, reps, levels, None)?;
            let u = s.points.get("uncertainty").map(|p| p.value.clone());
            out.insert(ANCHOR.to_string(), s);
            u
        }
        None => None,
    };
    for (name, reps) in methods {
        if name == ANCHOR {
            continue;
        }
        let s = summarize_method(&test, reps, levels, anchor_unc.as_deref())
            .map_err(|e| e.context(format!("method {name}")))?;
        out.insert(name.clone(), s);
    }
    Ok(SettingSummary {
        setting: setting.to_string(),
        test,
        methods: out,
    })
}

fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        String::new()
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

impl Summary {
    /// The long-format per-point CSV: one row per setting × method × test input × metric.
    pub fn points_csv(&self) -> String {
        let d = self
            .settings
            .iter()
            .flat_map(|s| s.test.x.first().map(Vec::len))
            .max()
            .unwrap_or(1);
        let mut out = String::from("setting,method,point");
        for j in 1..=d {
            let _ = write!(out, ",x{j}");
        }
        out.push_str(",coord,region,label,metric,value,stderr,lower,upper\n");
        for s in &self.settings {
            for (method, ms) in &s.methods {
                for (metric, pm) in &ms.points {
                    for i in 0..pm.value.len() {
                        let _ = write!(out, "{},{},{i}", csv_field(&s.setting), csv_field(method));
                        for j in 0..d {
                            out.push(',');
                            if let Some(v) = s.test.x[i].get(j) {
                                out.push_str(&num(*v));
                            }
                        }
                        let coord = s
                            .test
                            .coord
                            .as_ref()
                            .map(|(_, v)| num(v[i]))
                            .unwrap_or_default();
                        let label = s.test.label[i]
                            .as_deref()
                            .map(csv_field)
                            .unwrap_or_default();
                        let bound = |b: &Option<Vec<f64>>| {
                            b.as_ref().map(|b| num(b[i])).unwrap_or_default()
                        };
                        let _ = writeln!(
                            out,
                            ",{coord},{},{label},{metric},{},{},{},{}",
                            s.test.region[i].as_str(),
                            num(pm.value[i]),
                            num(pm.stderr[i]),
                            bound(&pm.lower),
                            bound(&pm.upper),
                        );
                    }
                }
            }
        }
        out
    }

    /// The aggregate CSV: one row per setting × method × region × metric.
    pub fn aggregate_csv(&self) -> String {
        let mut out = String::from("setting,method,region,metric,value,stderr\n");
        for s in &self.settings {
            for (method, ms) in &s.methods {
                for (region, metrics) in &ms.aggregate {
                    for (metric, v) in metrics {
                        let _ = writeln!(
                            out,
                            "{},{},{region},{metric},{},{}",
                            csv_field(&s.setting),
                            csv_field(method),
                            num(v.value),
                            num(v.stderr)
                        );
                    }
                }
                let _ = writeln!(
                    out,
                    "{},{},all,diverged,{},",
                    csv_field(&s.setting),
                    csv_field(method),
                    ms.diverged.len()
                );
            }
        }
        out
    }

    /// The summary as JSON (non-finite numbers become null).
    pub fn to_json(&self) -> Value {
        json!(self)
    }
}

/// The anchor's result for repetition `rep`, in the same form as a method's.
pub fn anchor_rep(
    problem: &Problem,
    anchor: &uqbench_anchor::Anchor,
    rep: u64,
) -> Result<RepResult> {
    let post = anchor.posterior(&problem.draw(rep).train_y)?;
    Ok(RepResult {
        repetition: rep,
        noise_std: (!problem.sigma_known).then(|| post.noise_std.clone()),
        mean: post.mean,
        std: post.std,
        scalars: BTreeMap::new(),
        diverged: false,
    })
}

impl Summary {
    /// Writes summary.json, summary.csv (per test input) and aggregate.csv (per region) into
    /// `dir`, each atomically.
    pub fn write(&self, dir: &std::path::Path) -> Result<()> {
        for level in &self.levels {
            if !(*level > 0.0 && *level < 1.0) {
                bail!("level {level}: interval levels lie strictly between 0 and 1");
            }
        }
        crate::store::write_atomic(
            &dir.join("summary.json"),
            serde_json::to_string(&self.to_json())?.as_bytes(),
        )?;
        crate::store::write_atomic(&dir.join("summary.csv"), self.points_csv().as_bytes())?;
        crate::store::write_atomic(&dir.join("aggregate.csv"), self.aggregate_csv().as_bytes())?;
        Ok(())
    }
}
