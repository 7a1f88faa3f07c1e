//! What a method (its settings, its backend, its run) can get wrong.

use thiserror::Error;

/// Everything that can go wrong while opening a backend or training a method.
#[derive(Debug, Error)]
pub enum MethodError {
    /// A backend was asked for that this machine cannot provide.
    #[error("backend `{backend}` is unavailable: {reason}. {hint}")]
    BackendUnavailable {
        /// The backend's name.
        backend: String,
        /// Why it is unavailable.
        reason: String,
        /// What to do instead.
        hint: String,
    },
    /// A setting outside its valid range.
    #[error("{what} = {value}: {valid}")]
    Invalid {
        /// Which setting.
        what: String,
        /// Its value.
        value: String,
        /// What would be valid.
        valid: String,
    },
    /// A computation that failed for a reason its own crate states (the anchor's rank check).
    #[error("{0}")]
    Failed(String),
    /// A name that is not a backend.
    #[error("unknown backend `{0}`; valid: flex (default), ndarray, wgpu")]
    UnknownBackend(String),
}

impl MethodError {
    /// Shorthand for [`MethodError::Invalid`].
    pub fn invalid(
        what: impl Into<String>,
        value: impl std::fmt::Display,
        valid: impl Into<String>,
    ) -> Self {
        MethodError::Invalid {
            what: what.into(),
            value: value.to_string(),
            valid: valid.into(),
        }
    }

    /// `Ok` when `v` is finite and > 0, else [`MethodError::Invalid`] naming `what`.
    pub fn positive(what: &str, v: f64) -> Result<(), MethodError> {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(MethodError::invalid(what, v, "a positive number"))
        }
    }

    /// `Ok` when `v` is finite and ≥ 0, else [`MethodError::Invalid`] naming `what`.
    pub fn non_negative(what: &str, v: f64) -> Result<(), MethodError> {
        if v.is_finite() && v >= 0.0 {
            Ok(())
        } else {
            Err(MethodError::invalid(what, v, "a finite number ≥ 0"))
        }
    }

    /// `Ok` when `v` is a rate strictly between 0 and 1, else [`MethodError::Invalid`].
    pub fn rate(what: &str, v: f64) -> Result<(), MethodError> {
        if v > 0.0 && v < 1.0 {
            Ok(())
        } else {
            Err(MethodError::invalid(
                what,
                v,
                "a rate strictly between 0 and 1",
            ))
        }
    }
}
