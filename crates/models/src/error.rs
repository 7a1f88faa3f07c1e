//! The models crate's error type.

use thiserror::Error;

/// Everything that can go wrong while opening a backend or training a method.
#[derive(Debug, Error)]
pub enum ModelError {
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
    /// A name that is not a backend.
    #[error("unknown backend `{0}`; valid: flex (default), ndarray, wgpu")]
    UnknownBackend(String),
}

impl ModelError {
    /// Shorthand for [`ModelError::Invalid`].
    pub fn invalid(
        what: impl Into<String>,
        value: impl std::fmt::Display,
        valid: impl Into<String>,
    ) -> Self {
        ModelError::Invalid {
            what: what.into(),
            value: value.to_string(),
            valid: valid.into(),
        }
    }
}
