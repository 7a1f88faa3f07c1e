//! A region aggregate or scalar of a summary: a value with its standard error over
//! repetitions, and how many of them were ±∞.

use serde::{Deserialize, Serialize};

/// A single number with its standard error over repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scalar {
    /// The value.
    pub value: f64,
    /// Its standard error over the repetitions that entered the metrics (NaN where not
    /// defined).
    pub stderr: f64,
    /// For a region aggregate of a per-point metric: the sd across the region's test inputs of
    /// the per-point values, a descriptive spread (the inputs are not independent samples, so
    /// this is no standard error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points_sd: Option<f64>,
    /// For a mean over repetitions: how many of the repetitions that entered it were ±∞ (an
    /// infinite KL or NLL is a result, not a missing value: the mean is then ±∞ and its
    /// standard error undefined). `None` for a value that is no such mean; omitted from JSON
    /// when 0.
    #[serde(default, skip_serializing_if = "no_infinite")]
    pub infinite: Option<usize>,
}

fn no_infinite(n: &Option<usize>) -> bool {
    n.unwrap_or(0) == 0
}

impl Scalar {
    /// A value without a standard error.
    pub fn bare(value: f64) -> Scalar {
        Scalar {
            value,
            stderr: f64::NAN,
            points_sd: None,
            infinite: None,
        }
    }

    /// A mean with its standard error.
    pub fn with_se(value: f64, stderr: f64) -> Scalar {
        Scalar {
            value,
            stderr,
            points_sd: None,
            infinite: None,
        }
    }

    /// The mean over repetitions of `values` (NaN, "no value", left out; ±∞ kept and counted
    /// in [`Scalar::infinite`]) with its standard error (NaN with fewer than two values or
    /// any infinite one); `None` where no value is left.
    pub fn over_repetitions(values: &[f64]) -> Option<Scalar> {
        let v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
        let s = uqbench_metrics::coverage::mean_se(&v).ok()?;
        let infinite = v.iter().filter(|x| x.is_infinite()).count();
        Some(Scalar {
            value: s.mean,
            stderr: if v.len() > 1 && infinite == 0 {
                s.se
            } else {
                f64::NAN
            },
            points_sd: None,
            infinite: Some(infinite),
        })
    }
}
