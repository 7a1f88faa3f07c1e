//! Each repetition's value of every region aggregate, kept beside the aggregates so that two
//! methods can be compared repetition by repetition (`uqbench compare`, issue 40 §7):
//! repetition r of every method saw the same data, so their differences are paired.

use std::collections::BTreeMap;

use uqbench_metrics::coverage;

use super::types::{ByRepetition, Scalar, Summary};

impl ByRepetition {
    /// An empty table for these repetitions.
    pub(super) fn new(repetitions: Vec<u64>) -> ByRepetition {
        ByRepetition {
            repetitions,
            values: BTreeMap::new(),
        }
    }

    /// Records one value per repetition of `metric` in `region`; a length that does not match
    /// the repetitions is a bug in the summary, not an input error.
    pub(super) fn put(&mut self, region: &str, metric: &str, values: Vec<f64>) {
        debug_assert_eq!(values.len(), self.repetitions.len(), "{region}/{metric}");
        if values.len() == self.repetitions.len() {
            self.values
                .entry(region.to_string())
                .or_default()
                .insert(metric.to_string(), values);
        }
    }

    /// The region's aggregate of `v[r][i]` ([`region_aggregate`]), recording each
    /// repetition's mean over the region's points.
    pub(super) fn region(
        &mut self,
        region: &str,
        metric: &str,
        v: &[Vec<f64>],
        idx: Points<'_>,
    ) -> Scalar {
        self.put(region, metric, region_means(v, idx));
        region_aggregate(v, idx)
    }
}

/// A region's points in each repetition: the same in all (a fixed design), or each
/// repetition's own (a random design, where a test slot's point moves between regions).
#[derive(Debug, Clone, Copy)]
pub(super) enum Points<'a> {
    /// The same points in every repetition.
    Shared(&'a [usize]),
    /// Per repetition (in the order of the values), its own points.
    PerRep(&'a [Vec<usize>]),
}

impl<'a> Points<'a> {
    /// The points of the repetition at position `r`.
    pub(super) fn at(self, r: usize) -> &'a [usize] {
        match self {
            Points::Shared(idx) => idx,
            Points::PerRep(per) => &per[r],
        }
    }
}

/// The columns of `repetitions.csv`, one per field of a [`RepetitionEntry`].
pub const REPETITIONS_COLUMNS: [&str; 6] = [
    "setting",
    "method",
    "region",
    "metric",
    "repetition",
    "value",
];

/// One repetition's value of one region aggregate: setting, method, region, metric,
/// repetition, value (NaN where the repetition has none).
pub type RepetitionEntry<'a> = (&'a str, &'a str, &'a str, &'a str, u64, f64);

impl Summary {
    /// Every repetition's value of every region aggregate of every setting and method, in
    /// the order of `repetitions.csv`.
    pub fn repetition_entries(&self) -> Vec<RepetitionEntry<'_>> {
        let mut out = Vec::new();
        for s in &self.settings {
            for (method, ms) in &s.methods {
                let by = &ms.by_repetition;
                for (region, metrics) in &by.values {
                    for (metric, values) in metrics {
                        for (&r, &v) in by.repetitions.iter().zip(values) {
                            out.push((
                                s.setting.as_str(),
                                method.as_str(),
                                region.as_str(),
                                metric.as_str(),
                                r,
                                v,
                            ));
                        }
                    }
                }
            }
        }
        out
    }
}

/// Each repetition's mean over its points `idx` of `v[r][i]`, NaN values left out (NaN where
/// none is left).
pub(super) fn region_means(v: &[Vec<f64>], idx: Points<'_>) -> Vec<f64> {
    v.iter()
        .enumerate()
        .map(|(r, row)| {
            let vals: Vec<f64> = idx
                .at(r)
                .iter()
                .map(|&i| row[i])
                .filter(|x| !x.is_nan())
                .collect();
            if vals.is_empty() {
                f64::NAN
            } else {
                vals.iter().sum::<f64>() / vals.len() as f64
            }
        })
        .collect()
}

/// A region's aggregate of a quantity given per repetition and test input (`v[r][i]`): the
/// mean over repetitions of each repetition's mean over the region's points `idx`, with its
/// standard error over the repetitions (sample sd, n − 1, over √K: the repetitions are
/// independent, the test inputs of one repetition are not), and the spread across the region's
/// points of the per-point means over repetitions as `points_sd` (descriptive only; with a
/// random design a point is a test slot, pooled over the repetitions where it lies in the
/// region). NaN values (an undefined quantity at a point) are left out of a repetition's mean.
pub(super) fn region_aggregate(v: &[Vec<f64>], idx: Points<'_>) -> Scalar {
    let Some(over_reps) = Scalar::over_repetitions(&region_means(v, idx)) else {
        return Scalar::bare(f64::NAN);
    };
    let width = v.first().map_or(0, Vec::len);
    let (mut sum, mut count) = (vec![0.0; width], vec![0usize; width]);
    for (r, row) in v.iter().enumerate() {
        for &i in idx.at(r) {
            if !row[i].is_nan() {
                sum[i] += row[i];
                count[i] += 1;
            }
        }
    }
    let point_means: Vec<f64> = sum
        .iter()
        .zip(&count)
        .filter(|(_, &c)| c > 0)
        .map(|(s, &c)| s / c as f64)
        .collect();
    Scalar {
        points_sd: coverage::mean_se(&point_means)
            .ok()
            .filter(|_| point_means.len() > 1)
            .map(|p| p.se * (point_means.len() as f64).sqrt())
            .filter(|sd| !sd.is_nan()),
        ..over_reps
    }
}
