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
}
