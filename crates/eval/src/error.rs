//! The evaluation crate's error type, with the two helpers its code uses everywhere: `bail!`
//! (return an error with a formatted message) and [`Context`] (prefix an error with what was
//! being done, as "context: cause").

use thiserror::Error;

/// What evaluating (reading a spec, summarising results, writing files) can get wrong.
/// Messages name the input, the bad value and what is valid.
#[derive(Debug, Error)]
pub enum EvalError {
    /// A message of this crate.
    #[error("{0}")]
    Message(String),
    /// An error with what was being done in front of it.
    #[error("{context}: {cause}")]
    Context {
        /// What was being done.
        context: String,
        /// The cause (part of the message, not a separate source).
        cause: Box<EvalError>,
    },
    /// A problem or the anchor.
    #[error(transparent)]
    Anchor(#[from] uqbench_anchor::AnchorError),
    /// A metric.
    #[error(transparent)]
    Metric(#[from] uqbench_metrics::MetricError),
    /// A method.
    #[error(transparent)]
    Method(#[from] uqbench_core::MethodError),
    /// JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A file.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// TOML that does not parse or does not fit.
    #[error(transparent)]
    TomlDe(#[from] toml::de::Error),
    /// TOML that cannot be written.
    #[error(transparent)]
    TomlSer(#[from] toml::ser::Error),
}

/// The crate's result type.
pub type Result<T, E = EvalError> = std::result::Result<T, E>;

/// Returns early with an [`EvalError::Message`] formatted like `format!`.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::EvalError::Message(format!($($arg)*)))
    };
}

/// Puts what was being done in front of an error.
pub trait Context<T> {
    /// With a fixed context.
    fn context<C: std::fmt::Display>(self, context: C) -> Result<T>;
    /// With a context computed only on error.
    fn with_context<C: std::fmt::Display, F: FnOnce() -> C>(self, f: F) -> Result<T>;
}

impl<T, E: Into<EvalError>> Context<T> for std::result::Result<T, E> {
    fn context<C: std::fmt::Display>(self, context: C) -> Result<T> {
        self.map_err(|e| EvalError::Context {
            context: context.to_string(),
            cause: Box::new(e.into()),
        })
    }

    fn with_context<C: std::fmt::Display, F: FnOnce() -> C>(self, f: F) -> Result<T> {
        self.map_err(|e| EvalError::Context {
            context: f().to_string(),
            cause: Box::new(e.into()),
        })
    }
}

impl<T> Context<T> for Option<T> {
    fn context<C: std::fmt::Display>(self, context: C) -> Result<T> {
        self.ok_or_else(|| EvalError::Message(context.to_string()))
    }

    fn with_context<C: std::fmt::Display, F: FnOnce() -> C>(self, f: F) -> Result<T> {
        self.ok_or_else(|| EvalError::Message(f().to_string()))
    }
}

impl EvalError {
    /// This error with `context` in front of it.
    pub fn context(self, context: impl std::fmt::Display) -> EvalError {
        EvalError::Context {
            context: context.to_string(),
            cause: Box::new(self),
        }
    }
}
