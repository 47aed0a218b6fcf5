//! The crate's error type.

use std::fmt;
use std::path::PathBuf;

/// Errors of this crate: every failure is reported, nothing panics on bad input.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A tensor operation failed (on whichever device it ran).
    Candle(candle_core::Error),
    /// Building a model from a weights file failed (missing tensor, wrong shape, or a device
    /// error while moving the weights).
    Load {
        /// The weights file.
        path: PathBuf,
        /// candle's error.
        source: candle_core::Error,
    },
    /// Loading the tokenizer or encoding text failed.
    Tokenizer {
        /// What was being done (file name or operation).
        context: String,
        /// The tokenizers crate's error.
        source: tokenizers::Error,
    },
    /// Reading or writing a file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A JSON file could not be parsed into the expected configuration.
    Json {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// A safetensors file could not be read or written.
    Safetensors {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: safetensors::SafeTensorError,
    },
    /// An argument is out of range or inconsistent (the message says which and why).
    InvalidInput(String),
    /// `pick_device` was given a name it does not know.
    UnknownDevice(String),
    /// A tensor-parallel split that is not even: `what` (e.g. `num_attention_heads`) of
    /// `size` does not divide over `nranks` ranks.
    UnevenSplit {
        /// What is split (a configuration field).
        what: &'static str,
        /// Its size.
        size: usize,
        /// The number of ranks.
        nranks: usize,
    },
    /// A rank of a tensor-parallel run did not finish: it panicked, or it stopped because
    /// another rank failed (`reason` says which), or it waited longer than allowed.
    RankFailed {
        /// The rank that reports it.
        rank: usize,
        /// What happened.
        reason: String,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Candle(e) => write!(f, "candle: {e}"),
            Error::Load { path, source } => write!(f, "loading {}: {source}", path.display()),
            Error::Tokenizer { context, source } => write!(f, "tokenizer ({context}): {source}"),
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Json { path, source } => write!(f, "{}: invalid JSON: {source}", path.display()),
            Error::Safetensors { path, source } => {
                write!(f, "{}: safetensors: {source}", path.display())
            }
            Error::InvalidInput(msg) => write!(f, "invalid input: {msg}"),
            Error::UnevenSplit { what, size, nranks } => write!(
                f,
                "tensor parallelism: {what} = {size} does not split evenly over {nranks} ranks"
            ),
            Error::RankFailed { rank, reason } => {
                write!(f, "tensor-parallel rank {rank}: {reason}")
            }
            Error::UnknownDevice(name) => write!(
                f,
                "unknown device {name:?}: this build supports {}",
                crate::device::SUPPORTED_DEVICES.join(", ")
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Candle(e) => Some(e),
            Error::Load { source, .. } => Some(source),
            Error::Tokenizer { source, .. } => Some(source.as_ref()),
            Error::Io { source, .. } => Some(source),
            Error::Json { source, .. } => Some(source),
            Error::Safetensors { source, .. } => Some(source),
            Error::InvalidInput(_)
            | Error::UnknownDevice(_)
            | Error::UnevenSplit { .. }
            | Error::RankFailed { .. } => None,
        }
    }
}

impl From<candle_core::Error> for Error {
    fn from(e: candle_core::Error) -> Self {
        Error::Candle(e)
    }
}

/// Shorthand for an [`Error::InvalidInput`].
pub(crate) fn invalid(msg: impl Into<String>) -> Error {
    Error::InvalidInput(msg.into())
}
