//! Information criteria from an ensemble's log-likelihoods ([001]): the negative WAIC (types
//! 1 and 2) and importance-sampling cross-validation, each with the standard error of its
//! mean over instances. All estimate the expected log predictive density on new data (higher
//! is better).

use serde::{Deserialize, Serialize};

use crate::error::{check_finite, non_empty, MetricError};

/// An estimate and its standard error of the mean over the n instances.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The estimate.
    pub value: f64,
    /// Standard error: sd of the per-instance terms / sqrt(n) (0 for n = 1).
    pub se: f64,
}

/// A table of log p(y_i | x_i, θ_j) for n instances (rows) and m ensemble members (columns).
#[derive(Debug, Clone, Copy)]
pub struct LogLikTable<'a> {
    /// Row-major values, n·m of them.
    pub values: &'a [f64],
    /// Number of members m (columns).
    pub members: usize,
}

impl LogLikTable<'_> {
    fn rows(&self) -> Result<std::slice::ChunksExact<'_, f64>, MetricError> {
        if self.members == 0 || !self.values.len().is_multiple_of(self.members) {
            return Err(MetricError::Invalid {
                what: "log-likelihood table".into(),
                value: self.values.len() as f64,
                valid: format!(
                    "a table of n × m values with m = {} ≥ 1 columns",
                    self.members
                ),
            });
        }
        non_empty("log-likelihood table", self.values.len())?;
        check_finite("log-likelihood table", self.values)?;
        Ok(self.values.chunks_exact(self.members))
    }
}

fn log_mean_exp(row: &[f64]) -> f64 {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    max + (row.iter().map(|v| (v - max).exp()).sum::<f64>() / row.len() as f64).ln()
}

fn estimate(terms: &[f64]) -> Estimate {
    let n = terms.len() as f64;
    let mean = terms.iter().sum::<f64>() / n;
    let se = if terms.len() > 1 {
        (terms.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / (n - 1.0) / n).sqrt()
    } else {
        0.0
    };
    Estimate { value: mean, se }
}

/// Which WAIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaicType {
    /// nWAIC₁ = mean_i [log mean_j p_ij − V̂_i], V̂_i the sample variance (m − 1) of log p_ij
    /// over members (Watanabe's recommendation; needs m ≥ 2).
    Waic1,
    /// nWAIC₂ = mean_i [2·mean_j log p_ij − log mean_j p_ij].
    Waic2,
}

/// The negative WAIC with its standard error.
pub fn negative_waic(table: LogLikTable<'_>, kind: WaicType) -> Result<Estimate, MetricError> {
    let rows = table.rows()?;
    if kind == WaicType::Waic1 && table.members < 2 {
        return Err(MetricError::Invalid {
            what: "members".into(),
            value: table.members as f64,
            valid: "WAIC type 1 needs at least 2 members for the variance term".into(),
        });
    }
    let terms: Vec<f64> = rows
        .map(|row| {
            let lme = log_mean_exp(row);
            let m = row.len() as f64;
            let mean = row.iter().sum::<f64>() / m;
            match kind {
                WaicType::Waic1 => {
                    let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (m - 1.0);
                    lme - var
                }
                WaicType::Waic2 => 2.0 * mean - lme,
            }
        })
        .collect();
    Ok(estimate(&terms))
}

/// Importance-sampling cross-validation: ISCV = −mean_i log mean_j 1/p_ij.
pub fn importance_sampling_cv(table: LogLikTable<'_>) -> Result<Estimate, MetricError> {
    let terms: Vec<f64> = table
        .rows()?
        .map(|row| {
            let neg: Vec<f64> = row.iter().map(|v| -v).collect();
            -log_mean_exp(&neg)
        })
        .collect();
    Ok(estimate(&terms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_members_reduce_to_the_log_likelihood() {
        // All members agree: log mean p = log p, V = 0, so nWAIC₁ = nWAIC₂ = ISCV = mean log p.
        let values = [-1.0, -1.0, -3.0, -3.0];
        let t = LogLikTable {
            values: &values,
            members: 2,
        };
        for kind in [WaicType::Waic1, WaicType::Waic2] {
            let w = negative_waic(t, kind).unwrap();
            assert!((w.value + 2.0).abs() < 1e-12);
            // Terms −1 and −3: sd √2, se = √2/√2 = 1.
            assert!((w.se - 1.0).abs() < 1e-12);
        }
        assert!((importance_sampling_cv(t).unwrap().value + 2.0).abs() < 1e-12);
    }

    #[test]
    fn disagreeing_members_by_hand() {
        // One instance, log p = (ln 0.5, ln 0.25).
        let values = [0.5f64.ln(), 0.25f64.ln()];
        let t = LogLikTable {
            values: &values,
            members: 2,
        };
        let lme = (0.375f64).ln();
        let mean = (0.5f64.ln() + 0.25f64.ln()) / 2.0;
        let var = 2.0 * (0.5f64.ln() - mean).powi(2); // m − 1 = 1
        assert!((negative_waic(t, WaicType::Waic1).unwrap().value - (lme - var)).abs() < 1e-12);
        assert!(
            (negative_waic(t, WaicType::Waic2).unwrap().value - (2.0 * mean - lme)).abs() < 1e-12
        );
        // ISCV: −log mean(1/0.5, 1/0.25) = −log 3.
        assert!((importance_sampling_cv(t).unwrap().value + 3f64.ln()).abs() < 1e-12);
        // Malformed tables.
        assert!(negative_waic(
            LogLikTable {
                values: &values,
                members: 3
            },
            WaicType::Waic2
        )
        .is_err());
        assert!(negative_waic(
            LogLikTable {
                values: &values[..1],
                members: 1
            },
            WaicType::Waic1
        )
        .is_err());
        assert!(importance_sampling_cv(LogLikTable {
            values: &[f64::NAN],
            members: 1
        })
        .is_err());
    }
}
