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
    /// A name that is not a backend.
    #[error("unknown backend `{0}`; valid: flex (default), ndarray, wgpu")]
    UnknownBackend(String),
}
