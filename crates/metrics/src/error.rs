//! The metrics crate's error type.

use thiserror::Error;

/// Invalid metric input. Messages name the input, the bad value and what is valid.
#[derive(Debug, Error, PartialEq)]
pub enum MetricError {
    /// Two inputs that must have the same length do not.
    #[error("{what}: lengths differ ({left} vs {right}); every input needs one entry per point")]
    Length {
        /// Which inputs.
        what: String,
        /// First length.
        left: usize,
        /// Second length.
        right: usize,
    },
    /// An input is empty where at least one entry is needed.
    #[error("{0}: empty input; at least one entry is needed")]
    Empty(String),
    /// A value outside its valid range.
    #[error("{what} = {value}: {valid}")]
    Invalid {
        /// Which input (with its index).
        what: String,
        /// The value.
        value: f64,
        /// What would be valid.
        valid: String,
    },
}

/// Checks that `a` and `b` have the same length.
pub(crate) fn same_len(what: &str, a: usize, b: usize) -> Result<(), MetricError> {
    if a != b {
        return Err(MetricError::Length {
            what: what.to_string(),
            left: a,
            right: b,
        });
    }
    Ok(())
}

/// Checks that `n > 0`.
pub(crate) fn non_empty(what: &str, n: usize) -> Result<(), MetricError> {
    if n == 0 {
        return Err(MetricError::Empty(what.to_string()));
    }
    Ok(())
}

/// Checks that every standard deviation is finite and non-negative.
pub(crate) fn check_std(what: &str, std: &[f64]) -> Result<(), MetricError> {
    for (i, &s) in std.iter().enumerate() {
        if !(s >= 0.0 && s.is_finite()) {
            return Err(MetricError::Invalid {
                what: format!("{what}[{i}]"),
                value: s,
                valid: "a standard deviation must be finite and ≥ 0".into(),
            });
        }
    }
    Ok(())
}

/// Checks that every value is finite.
pub(crate) fn check_finite(what: &str, v: &[f64]) -> Result<(), MetricError> {
    for (i, &x) in v.iter().enumerate() {
        if !x.is_finite() {
            return Err(MetricError::Invalid {
                what: format!("{what}[{i}]"),
                value: x,
                valid: "values must be finite".into(),
            });
        }
    }
    Ok(())
}

/// Checks an interval level α ∈ (0, 1).
pub(crate) fn check_level(level: f64) -> Result<(), MetricError> {
    if !(level > 0.0 && level < 1.0) {
        return Err(MetricError::Invalid {
            what: "level".into(),
            value: level,
            valid: "an interval level must lie strictly between 0 and 1 (e.g. 0.95)".into(),
        });
    }
    Ok(())
}
