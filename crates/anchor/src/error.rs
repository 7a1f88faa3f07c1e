//! The anchor crate's error type.

use thiserror::Error;

/// Everything that can go wrong while resolving a problem or computing its anchor.
///
/// Every message names the offending input, its value and what would be valid.
#[derive(Debug, Error)]
pub enum AnchorError {
    /// An expression string could not be parsed or evaluated.
    #[error("expression `{expr}`: {message}")]
    Expression {
        /// The expression's text.
        expr: String,
        /// What is wrong with it.
        message: String,
    },
    /// A spec field has a value outside its valid range.
    #[error("{field} = {value}: {valid}")]
    InvalidValue {
        /// Where the value sits in the spec, e.g. `problem.train.n`.
        field: String,
        /// The offending value as written or evaluated.
        value: String,
        /// What would be valid.
        valid: String,
    },
    /// The training design does not determine the parameters.
    #[error(
        "problem `{problem}`{setting}: the training design is rank deficient: rank {rank} of \
         p = {p} features with N = {n} training points{detail}; use more or more varied \
         training inputs, or fewer or independent features"
    )]
    RankDeficient {
        /// Problem (experiment) name.
        problem: String,
        /// The setting, formatted as ` (setting f_main=2)` or empty.
        setting: String,
        /// Numerical rank of the (column-scaled) design matrix.
        rank: usize,
        /// Number of features.
        p: usize,
        /// Number of training points.
        n: usize,
        /// Extra detail (condition number, or N < p).
        detail: String,
    },
    /// Data passed to the anchor do not fit the problem.
    #[error("{what}: expected {expected}, got {got}")]
    Shape {
        /// Which input.
        what: String,
        /// Expected size.
        expected: usize,
        /// Actual size.
        got: usize,
    },
}

impl AnchorError {
    /// Shorthand for [`AnchorError::InvalidValue`].
    pub fn invalid(
        field: impl Into<String>,
        value: impl std::fmt::Display,
        valid: impl Into<String>,
    ) -> Self {
        AnchorError::InvalidValue {
            field: field.into(),
            value: value.to_string(),
            valid: valid.into(),
        }
    }
}
