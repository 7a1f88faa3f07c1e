//! The evaluation crate's error type, with the two helpers its code uses everywhere: `bail!`
//! (return an invalid-input or a run-directory error with a formatted message) and [`Context`]
//! (prefix an error with what was being done, as "context: cause", keeping the cause's kind).
//!
//! Every error has one [`ErrorKind`], the one a caller acts on: bad input (fix the spec, the
//! argument or the data: the message names the input, the value and what is valid), a run
//! directory that is not one or not complete, a file that cannot be read or written, or a
//! computation that failed on valid input. The Python package raises a distinct exception
//! type per kind (`uqbench.InvalidInputError` and `uqbench.RunDirectoryError`, both
//! `ValueError`s, `OSError`, `RuntimeError`).

use thiserror::Error;

/// What evaluating (reading a spec, summarising results, writing files) can get wrong.
/// Messages name the input, the bad value and what is valid.
#[derive(Debug, Error)]
pub enum ExperimentError {
    /// Bad input: a spec, a setting, an argument, predictions, metric inputs. The message names
    /// the input, the bad value and what is valid.
    #[error("{0}")]
    Invalid(String),
    /// A run directory that is not one, is not complete, or does not fit the runs it is read
    /// with.
    #[error("{0}")]
    RunDir(String),
    /// An error with what was being done in front of it.
    #[error("{context}: {cause}")]
    Context {
        /// What was being done.
        context: String,
        /// The cause (part of the message, not a separate source).
        cause: Box<ExperimentError>,
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

/// What kind of problem an [`ExperimentError`] is (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad input, named with its value and what is valid.
    InvalidInput,
    /// A run directory that is not one or not complete.
    RunDirectory,
    /// A file that cannot be read or written; the I/O error's own kind says which.
    Io(std::io::ErrorKind),
    /// A computation that failed on valid input, or an unavailable backend.
    Failed,
}

impl ExperimentError {
    /// The error's kind: a context's is its cause's.
    pub fn kind(&self) -> ErrorKind {
        use uqbench_core::MethodError as M;
        match self {
            ExperimentError::Invalid(_)
            | ExperimentError::Anchor(_)
            | ExperimentError::Metric(_) => ErrorKind::InvalidInput,
            ExperimentError::RunDir(_) => ErrorKind::RunDirectory,
            ExperimentError::Context { cause, .. } => cause.kind(),
            ExperimentError::Method(M::Invalid { .. } | M::UnknownBackend(_)) => {
                ErrorKind::InvalidInput
            }
            ExperimentError::Method(_) | ExperimentError::TomlSer(_) => ErrorKind::Failed,
            ExperimentError::Json(e) => match e.io_error_kind() {
                Some(kind) => ErrorKind::Io(kind),
                None => ErrorKind::InvalidInput,
            },
            ExperimentError::Io(e) => ErrorKind::Io(e.kind()),
            ExperimentError::TomlDe(_) => ErrorKind::InvalidInput,
        }
    }

    /// This error as a run-directory error, with `context` (the directory and what was read)
    /// in front of it: a file of a run that is missing or does not parse is the run's problem.
    pub fn in_run_dir(self, context: impl std::fmt::Display) -> ExperimentError {
        ExperimentError::RunDir(format!("{context}: {self}"))
    }
}

/// The crate's result type.
pub type Result<T, E = ExperimentError> = std::result::Result<T, E>;

/// Returns early with an [`ExperimentError::Invalid`] formatted like `format!`, or with
/// `bail!(run_dir: …)` an [`ExperimentError::RunDir`].
#[macro_export]
macro_rules! bail {
    (run_dir: $($arg:tt)*) => {
        return Err($crate::error::ExperimentError::RunDir(format!($($arg)*)))
    };
    ($($arg:tt)*) => {
        return Err($crate::error::ExperimentError::Invalid(format!($($arg)*)))
    };
}

/// Puts what was being done in front of an error.
pub trait Context<T> {
    /// With a fixed context.
    fn context<C: std::fmt::Display>(self, context: C) -> Result<T>;
    /// With a context computed only on error.
    fn with_context<C: std::fmt::Display, F: FnOnce() -> C>(self, f: F) -> Result<T>;
    /// As a run-directory error ([`ExperimentError::in_run_dir`]), with a context computed only on
    /// error.
    fn in_run_dir<C: std::fmt::Display, F: FnOnce() -> C>(self, f: F) -> Result<T>;
}

impl<T, E: Into<ExperimentError>> Context<T> for std::result::Result<T, E> {
    fn context<C: std::fmt::Display>(self, context: C) -> Result<T> {
        self.map_err(|e| ExperimentError::Context {
            context: context.to_string(),
            cause: Box::new(e.into()),
        })
    }

    fn with_context<C: std::fmt::Display, F: FnOnce() -> C>(self, f: F) -> Result<T> {
        self.map_err(|e| ExperimentError::Context {
            context: f().to_string(),
            cause: Box::new(e.into()),
        })
    }

    fn in_run_dir<C: std::fmt::Display, F: FnOnce() -> C>(self, f: F) -> Result<T> {
        self.map_err(|e| e.into().in_run_dir(f()))
    }
}

impl<T> Context<T> for Option<T> {
    fn context<C: std::fmt::Display>(self, context: C) -> Result<T> {
        self.ok_or_else(|| ExperimentError::Invalid(context.to_string()))
    }

    fn with_context<C: std::fmt::Display, F: FnOnce() -> C>(self, f: F) -> Result<T> {
        self.ok_or_else(|| ExperimentError::Invalid(f().to_string()))
    }

    fn in_run_dir<C: std::fmt::Display, F: FnOnce() -> C>(self, f: F) -> Result<T> {
        self.ok_or_else(|| ExperimentError::RunDir(f().to_string()))
    }
}

impl ExperimentError {
    /// This error with `context` in front of it.
    pub fn context(self, context: impl std::fmt::Display) -> ExperimentError {
        ExperimentError::Context {
            context: context.to_string(),
            cause: Box::new(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid() -> Result<()> {
        crate::bail!("width = 2: not a sweep variable; valid: f_main")
    }

    fn run_dir() -> Result<()> {
        crate::bail!(run_dir: "runs/a is missing run.json")
    }

    #[test]
    fn every_error_has_the_kind_a_caller_acts_on_through_its_contexts() {
        assert_eq!(invalid().unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(run_dir().unwrap_err().kind(), ErrorKind::RunDirectory);
        // A context keeps its cause's kind and puts itself in front of the message.
        let e = run_dir().context("uqbench compare").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::RunDirectory);
        assert_eq!(e.to_string(), "uqbench compare: runs/a is missing run.json");
        let missing = std::fs::read_to_string("/no/such/file")
            .with_context(|| "cannot read spec file /no/such/file")
            .unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::Io(std::io::ErrorKind::NotFound));
        // A file of a run that does not parse is the run's problem.
        let bad = serde_json::from_str::<u32>("{")
            .in_run_dir(|| "runs/a/rep-000.json is not a repetition result")
            .unwrap_err();
        assert_eq!(bad.kind(), ErrorKind::RunDirectory);
        assert!(bad
            .to_string()
            .starts_with("runs/a/rep-000.json is not a repetition result: "));
        // The typed errors of the crates below: bad input, or a failure on valid input.
        let rank = ExperimentError::from(uqbench_core::MethodError::invalid(
            "members",
            0,
            "at least 1",
        ));
        assert_eq!(rank.kind(), ErrorKind::InvalidInput);
        let diverged = ExperimentError::from(uqbench_core::MethodError::Failed("NaN loss".into()));
        assert_eq!(diverged.kind(), ErrorKind::Failed);
        assert_eq!(
            None::<u8>.context("no metric").unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
    }
}
