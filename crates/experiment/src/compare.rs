//! Rankings with their confidence (issue 40 §7): every pair of methods compared repetition by
//! repetition, and a ranking whose ties are the pairs the data do not separate.
//!
//! The input is a run's `repetitions.csv` (or the same rows from `uqbench.score`): each
//! repetition's value of a region aggregate. Repetition r of every method saw the same
//! training data and noise, so a − b is taken per repetition (the paired design removes the
//! variation the repetitions share, which the two means' separate error bars include) and
//! [`uqbench_metrics::paired`] does the statistics. Within a setting the hypotheses "A and B
//! do not differ" over every unordered pair form one family, corrected by Holm's method; two
//! methods are *separated* when their adjusted p-value is at most 5%.
//!
//! The ranking: methods ordered by their mean (best first, by the metric's direction); a
//! method's rank is the range from 1 + the number of methods separated from it and better to
//! the number of methods less those separated from it and worse: every rank the data allow it,
//! so methods the data do not tell apart share ranks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::Serialize;
use uqbench_core::seed::splitmix64;
use uqbench_metrics::paired::{holm, paired, paired_signs, ALPHA};

use crate::bail;
use crate::error::{Context, ExperimentError, Result};
use crate::spec::{ExperimentSpec, ProblemDecl};
use crate::store::SPEC_FILE;
use crate::summary::{catalogue, names, ANCHOR, REPETITIONS_COLUMNS, REPETITIONS_CSV};

/// One repetition's value of one region aggregate (a row of `repetitions.csv`).
#[derive(Debug, Clone, PartialEq)]
pub struct RepRow {
    /// Canonical setting label (empty for a problem without settings).
    pub setting: String,
    /// Method name.
    pub method: String,
    /// Region (`all`, `in`, `gap`, `out`).
    pub region: String,
    /// Metric name.
    pub metric: String,
    /// Repetition index.
    pub repetition: u64,
    /// Its value (NaN where the repetition has none).
    pub value: f64,
}

/// Reads `repetitions.csv` text; `source` names it in errors.
pub fn read_repetitions(text: &str, source: &str) -> Result<Vec<RepRow>> {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let want = REPETITIONS_COLUMNS;
    let csv_error =
        |e: csv::Error| crate::error::ExperimentError::Invalid(format!("{source}: {e}"));
    let header: Vec<String> = reader
        .headers()
        .map_err(csv_error)?
        .iter()
        .map(String::from)
        .collect();
    if header != want {
        bail!(
            "{source}: columns {}; valid: {} (a run's repetitions.csv)",
            header.join(","),
            want.join(",")
        );
    }
    let mut rows = Vec::new();
    for (line, record) in reader.records().enumerate() {
        let record = record.map_err(csv_error)?;
        let field = |i: usize| record.get(i).unwrap_or_default().to_string();
        let repetition = field(4).parse::<u64>().map_err(|_| {
            crate::error::ExperimentError::Invalid(format!(
                "{source}, line {}: repetition {:?}; valid: 0, 1, 2, …",
                line + 2,
                field(4)
            ))
        })?;
        let value = match field(5).as_str() {
            "" => f64::NAN,
            v => v.parse::<f64>().map_err(|_| {
                crate::error::ExperimentError::Invalid(format!(
                    "{source}, line {}: value {v:?}; valid: a number, inf, -inf or empty",
                    line + 2
                ))
            })?,
        };
        rows.push(RepRow {
            setting: field(0),
            method: field(1),
            region: field(2),
            metric: field(3),
            repetition,
            value,
        });
    }
    Ok(rows)
}

/// The rows of a summary (what its `repetitions.csv` holds, without the round trip).
pub fn rows_of(summary: &crate::summary::Summary) -> Vec<RepRow> {
    summary
        .repetition_entries()
        .into_iter()
        .map(
            |(setting, method, region, metric, repetition, value)| RepRow {
                setting: setting.to_string(),
                method: method.to_string(),
                region: region.to_string(),
                metric: metric.to_string(),
                repetition,
                value,
            },
        )
        .collect()
}

/// The rows of every run, checked to come from the same data and not to repeat a method.
pub fn rows_of_runs(dirs: &[PathBuf]) -> Result<Vec<RepRow>> {
    if dirs.is_empty() {
        bail!("no run directory given; valid: one or more run directories");
    }
    let mut rows = Vec::new();
    let mut first: Option<(PathBuf, (u64, ProblemDecl))> = None;
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    for dir in dirs {
        let spec = ExperimentSpec::load(&dir.join(SPEC_FILE))
            .in_run_dir(|| format!("{} is not a run directory", dir.display()))?;
        // Repetition r of two runs saw the same data only if they drew it from the same seed
        // and problem.
        let data = (spec.seed, spec.problem);
        match &first {
            None => first = Some((dir.clone(), data)),
            Some((d0, data0)) if *data0 != data => bail!(
                run_dir: "{} and {} drew different data (seed or [problem] differ): their repetitions \
                 are not paired; valid: runs of one seed and problem",
                d0.display(),
                dir.display()
            ),
            Some(_) => {}
        }
        let path = dir.join(REPETITIONS_CSV);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            ExperimentError::RunDir(format!(
                "cannot read {}: {e}; a run written before `uqbench compare` existed gets it \
                 from `uqbench report {}`",
                path.display(),
                dir.display()
            ))
        })?;
        let mut run_rows = read_repetitions(&text, &path.display().to_string())?;
        // The anchor is in every run and the same in each (same data): the first run's.
        run_rows.retain(|r| {
            !(r.method == ANCHOR && seen.contains(&(r.setting.clone(), r.method.clone())))
        });
        let here: BTreeSet<(String, String)> = run_rows
            .iter()
            .map(|r| (r.setting.clone(), r.method.clone()))
            .collect();
        if let Some((s, m)) = here.intersection(&seen).next() {
            bail!(
                run_dir: "method {m} at setting {s:?} is in more than one of the runs ({}); valid: each \
                 method from one run (the anchor BLR is taken from the first)",
                dir.display()
            );
        }
        seen.extend(here);
        rows.extend(run_rows);
    }
    Ok(rows)
}

/// Which way a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Smaller is better (errors, distances, scores).
    Lower,
    /// Larger is better (accuracy, AUC).
    Higher,
}

/// The direction of a metric, or `None` for one without an order (coverage has a target,
/// not an order; an uncertainty or a width is neither good nor bad by itself; a method's own
/// scalar is not in the catalogue): the catalogue's [`catalogue::Better`].
pub fn direction(metric: &str) -> Option<Direction> {
    match catalogue::lookup(metric)?.better {
        catalogue::Better::Lower => Some(Direction::Lower),
        catalogue::Better::Higher => Some(Direction::Higher),
        catalogue::Better::Target | catalogue::Better::Neither => None,
    }
}

/// The metric compared when none is named: W2 to the exact posterior where the rows have it,
/// else the CRPS against the truth (a problem without an anchor), else the NLL of the labels
/// (classification), else a decision track's regret or `al_auc`.
pub fn default_metric(rows: &[RepRow]) -> Option<&'static str> {
    let has: BTreeSet<&str> = rows.iter().map(|r| r.metric.as_str()).collect();
    [
        names::W2_ANCHOR,
        names::CRPS,
        names::NLL,
        names::REGRET,
        names::AL_AUC,
    ]
    .into_iter()
    .find(|m| has.contains(m))
}

/// What to compare.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The metric (`None`: [`default_metric`]).
    pub metric: Option<String>,
    /// The region.
    pub region: String,
    /// One setting only (`None`: every setting).
    pub setting: Option<String>,
    /// Bootstrap resamples per pair.
    pub resamples: usize,
    /// The bootstrap's seed (each pair's stream is derived from it and the pair's names).
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            metric: None,
            region: names::ALL.to_string(),
            setting: None,
            resamples: 10_000,
            seed: 0,
        }
    }
}

impl Options {
    /// These options comparing `metric`.
    pub fn with_metric(self, metric: &str) -> Options {
        Options {
            metric: Some(metric.to_string()),
            ..self
        }
    }
}

/// One ordered pair's comparison (the columns of `uqbench compare --json` and of Python's
/// `uqbench.compare`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairRecord {
    /// Setting label.
    pub setting: String,
    /// First method.
    pub method_a: String,
    /// Second method.
    pub method_b: String,
    /// Metric.
    pub metric: String,
    /// Region.
    pub region: String,
    /// Mean over the paired repetitions of a − b.
    pub diff: f64,
    /// Its standard error.
    pub stderr: f64,
    /// 95% paired t interval, lower end.
    pub t_low: f64,
    /// 95% paired t interval, upper end.
    pub t_high: f64,
    /// Two-sided paired t-test p-value.
    pub p_value: f64,
    /// Holm-adjusted p-value within the setting (every unordered pair one hypothesis).
    pub p_holm: f64,
    /// The share of paired-bootstrap resamples with a's mean below b's (not a probability).
    pub boot_share_a_lower: f64,
    /// Minimum detectable difference of the unadjusted test (5% two-sided, 80% power).
    pub mdd_unadjusted: f64,
    /// Repetitions paired (both with a value).
    pub k: usize,
    /// Of those, the repetitions in which a or b is ±∞ (an infinite KL or NLL: a result).
    /// When not 0, `p_value` is the exact sign test's ([`paired_signs`]: +∞ is worse than any
    /// number for a lower-is-better metric) and `diff` is ±∞ or undefined, with no interval,
    /// standard error, bootstrap share or detectable difference.
    pub infinite: usize,
}

/// One method's place in a setting's ranking.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankEntry {
    /// Method.
    pub method: String,
    /// Its best possible rank: 1 + the number of methods separated from it and better.
    pub rank: usize,
    /// Its worst possible rank: the number of methods less those separated from it and worse.
    pub rank_worst: usize,
    /// Mean over its repetitions.
    pub mean: f64,
    /// Its standard error (undefined where a repetition is ±∞).
    pub stderr: f64,
    /// Its repetitions with a value.
    pub k: usize,
    /// Of those, the repetitions whose value is ±∞ (then the mean is ±∞: +∞ ranks worst for a
    /// lower-is-better metric).
    pub infinite: usize,
    /// The methods the data do not separate from it (Holm-adjusted p > 5%).
    pub ties: Vec<String>,
}

/// A setting's ranking.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ranking {
    /// Setting label.
    pub setting: String,
    /// Best first.
    pub entries: Vec<RankEntry>,
}

/// The comparison of every pair of methods in every setting.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The metric compared.
    pub metric: String,
    /// The region.
    pub region: String,
    /// Which way is better (`None`: no ranking).
    pub direction: Option<Direction>,
    /// Every ordered pair, per setting.
    pub pairs: Vec<PairRecord>,
    /// Per setting, where the metric has a direction.
    pub rankings: Vec<Ranking>,
}

/// A per-pair seed: the run's seed mixed with the setting and the two names (in sorted
/// order), so a pair's resamples do not depend on which other methods are compared.
fn pair_seed(seed: u64, setting: &str, a: &str, b: &str) -> u64 {
    // FNV-1a over the names, separated by a byte no name contains.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in [setting, a, b].join("\u{0}").bytes() {
        h = (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    splitmix64(seed ^ splitmix64(h))
}

/// Compares every pair of methods on `rows` as `opts` says.
pub fn compare(rows: &[RepRow], opts: &Options) -> Result<Comparison> {
    let metric = match &opts.metric {
        Some(m) => m.clone(),
        None => match default_metric(rows) {
            Some(m) => m.to_string(),
            None => bail!("no metric named and none of w2_anchor, crps, nll in the rows"),
        },
    };
    // Setting → method → repetition → value.
    let mut table: BTreeMap<&str, BTreeMap<&str, BTreeMap<u64, f64>>> = BTreeMap::new();
    let (mut metrics, mut regions, mut settings) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for r in rows {
        metrics.insert(r.metric.as_str());
        regions.insert(r.region.as_str());
        settings.insert(r.setting.as_str());
        let wanted = r.metric == metric
            && r.region == opts.region
            && opts.setting.as_ref().is_none_or(|s| *s == r.setting);
        if wanted {
            let slot = table
                .entry(&r.setting)
                .or_default()
                .entry(&r.method)
                .or_default();
            if slot.insert(r.repetition, r.value).is_some() {
                bail!(
                    "setting {:?}, method {}: repetition {} appears twice for {metric} in \
                     region {}; valid: one value per repetition (merge shards first)",
                    r.setting,
                    r.method,
                    r.repetition,
                    opts.region
                );
            }
        }
    }
    let list = |s: &BTreeSet<&str>| s.iter().cloned().collect::<Vec<_>>().join(", ");
    if !metrics.contains(metric.as_str()) {
        bail!(
            "metric {metric:?}: not in the rows; valid: {}",
            list(&metrics)
        );
    }
    if !regions.contains(opts.region.as_str()) {
        bail!(
            "region {:?}: not in the rows; valid: {}",
            opts.region,
            list(&regions)
        );
    }
    if let Some(s) = &opts.setting {
        if !settings.contains(s.as_str()) {
            bail!("setting {s:?}: not in the rows; valid: {}", list(&settings));
        }
    }
    if table.is_empty() {
        bail!("metric {metric} has no values in region {}", opts.region);
    }
    let dir = direction(&metric);
    let mut out = Comparison {
        metric: metric.clone(),
        region: opts.region.clone(),
        direction: dir,
        pairs: Vec::new(),
        rankings: Vec::new(),
    };
    for (setting, methods) in &table {
        let (pairs, ranking) = compare_setting(setting, methods, &metric, opts, dir)?;
        out.pairs.extend(pairs);
        out.rankings.extend(ranking);
    }
    Ok(out)
}

type Values<'a> = BTreeMap<&'a str, BTreeMap<u64, f64>>;

/// One setting: every unordered pair once (then mirrored), Holm over them, and the ranking.
fn compare_setting(
    setting: &str,
    methods: &Values<'_>,
    metric: &str,
    opts: &Options,
    dir: Option<Direction>,
) -> Result<(Vec<PairRecord>, Option<Ranking>)> {
    let names: Vec<&str> = methods.keys().copied().collect();
    let mut unordered = Vec::new();
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            let (va, vb): (Vec<f64>, Vec<f64>) = methods[a]
                .iter()
                .filter_map(|(r, &x)| Some((x, *methods[b].get(r)?)))
                .filter(|(x, y)| !x.is_nan() && !y.is_nan())
                .unzip();
            let infinite = va
                .iter()
                .zip(&vb)
                .filter(|(x, y)| x.is_infinite() || y.is_infinite())
                .count();
            let rec = if infinite > 0 {
                // A mean-based test cannot take ±∞: the sign test can (+∞ loses to any number).
                let p = paired_signs(&va, &vb)?;
                let n = f64::NAN;
                (p.diff, n, n, n, p.p_value, n, n)
            } else if va.len() >= 2 {
                let p = paired(
                    &va,
                    &vb,
                    opts.resamples,
                    pair_seed(opts.seed, setting, a, b),
                )?;
                (
                    p.diff,
                    p.stderr,
                    p.t_low,
                    p.t_high,
                    p.p_value,
                    p.boot_share_a_lower,
                    p.mdd_unadjusted,
                )
            } else {
                // Fewer than two paired repetitions: nothing to test (the record says k).
                let n = f64::NAN;
                (n, n, n, n, n, n, n)
            };
            unordered.push((*a, *b, rec, va.len(), infinite));
        }
    }
    let adjusted = holm(&unordered.iter().map(|u| u.2 .4).collect::<Vec<_>>());
    let mut pairs = Vec::new();
    let mut separated: BTreeSet<(&str, &str)> = BTreeSet::new();
    for ((a, b, (diff, se, lo, hi, p, prob, mdd_unadjusted), k, infinite), p_holm) in
        unordered.iter().zip(&adjusted)
    {
        if *p_holm <= ALPHA {
            separated.insert((a, b));
            separated.insert((b, a));
        }
        let record = |a: &str, b: &str, sign: f64, prob: f64, lo: f64, hi: f64| PairRecord {
            setting: setting.to_string(),
            method_a: a.to_string(),
            method_b: b.to_string(),
            metric: metric.to_string(),
            region: opts.region.clone(),
            diff: sign * diff,
            stderr: *se,
            t_low: lo,
            t_high: hi,
            p_value: *p,
            p_holm: *p_holm,
            boot_share_a_lower: prob,
            mdd_unadjusted: *mdd_unadjusted,
            k: *k,
            infinite: *infinite,
        };
        pairs.push(record(a, b, 1.0, *prob, *lo, *hi));
        pairs.push(record(b, a, -1.0, 1.0 - prob, -hi, -lo));
    }
    pairs.sort_by(|x, y| (&x.method_a, &x.method_b).cmp(&(&y.method_a, &y.method_b)));
    let ranking = dir.map(|d| rank(setting, methods, d, &separated));
    Ok((pairs, ranking))
}

/// The ranking of one setting's methods by mean, ties from `separated`.
fn rank(
    setting: &str,
    methods: &Values<'_>,
    dir: Direction,
    separated: &BTreeSet<(&str, &str)>,
) -> Ranking {
    let mut entries: Vec<RankEntry> = methods
        .iter()
        .map(|(m, v)| {
            // ±∞ is a value (the mean is then ±∞, ranked by it), NaN is none.
            let x: Vec<f64> = v.values().copied().filter(|x| !x.is_nan()).collect();
            let s = crate::summary::Scalar::over_repetitions(&x);
            RankEntry {
                method: m.to_string(),
                rank: 0,
                rank_worst: 0,
                mean: s.map_or(f64::NAN, |s| s.value),
                stderr: s.map_or(f64::NAN, |s| s.stderr),
                k: x.len(),
                infinite: x.iter().filter(|x| x.is_infinite()).count(),
                ties: Vec::new(),
            }
        })
        .collect();
    let key = |e: &RankEntry| match dir {
        Direction::Lower => e.mean,
        Direction::Higher => -e.mean,
    };
    // NaN means (no values) last.
    entries.sort_by(|a, b| {
        (key(a).is_nan(), key(a))
            .partial_cmp(&(key(b).is_nan(), key(b)))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let order: Vec<String> = entries.iter().map(|e| e.method.clone()).collect();
    for (i, e) in entries.iter_mut().enumerate() {
        let me = e.method.as_str();
        let better_and_separated = order[..i]
            .iter()
            .filter(|o| separated.contains(&(o.as_str(), me)))
            .count();
        let worse_and_separated = order[i + 1..]
            .iter()
            .filter(|o| separated.contains(&(o.as_str(), me)))
            .count();
        e.rank = 1 + better_and_separated;
        e.rank_worst = order.len() - worse_and_separated;
        e.ties = order
            .iter()
            .filter(|o| o.as_str() != me && !separated.contains(&(o.as_str(), me)))
            .cloned()
            .collect();
    }
    Ranking {
        setting: setting.to_string(),
        entries,
    }
}

#[cfg(test)]
#[path = "compare_tests.rs"]
mod tests;
