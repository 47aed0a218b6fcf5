//! The one error type of miopen-safe.

use std::fmt;

use crate::types::DataType;

/// Result alias used throughout miopen-safe.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in miopen-safe.
///
/// Library failures carry the library's own status name (`miopenStatusBadParm`,
/// `CUDNN_STATUS_NOT_SUPPORTED`, ...); bad input is caught before any library call and named by
/// the operation that refused it.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error from hip-core: the HIP runtime, memory, a library that could not be loaded
    /// ([`hip_core::Error::LibraryNotFound`], listing every path tried) or a function the
    /// installed library lacks ([`hip_core::Error::MissingSymbol`]).
    #[error(transparent)]
    Hip(#[from] hip_core::Error),
    /// A MIOpen (or, on the `nvidia` platform, cuDNN) call returned a failure status.
    #[error(
        "{library} call {call} failed with {name} ({code}): {message}{}",
        ContextSuffix(context)
    )]
    Api {
        /// `MIOpen` or `cuDNN`.
        library: &'static str,
        /// The function, e.g. `miopenConvolutionForward`.
        call: &'static str,
        /// The raw status code.
        code: i32,
        /// The status' symbolic name, e.g. `miopenStatusBadParm`.
        name: String,
        /// What the status means.
        message: String,
        /// What miopen-safe was doing, if known.
        context: Option<String>,
    },
    /// An argument failed validation; no library call was made.
    #[error("invalid argument to {op}: {reason}")]
    InvalidArgument {
        /// The operation that rejected the argument, e.g. `Handle::conv_forward`.
        op: &'static str,
        /// Why.
        reason: String,
    },
    /// The operation is not available for this data type (on every platform: the `nvidia`
    /// adapter refuses what MIOpen cannot do, so that both platforms behave alike).
    #[error("{op} does not support {dtype}: {reason}")]
    Unsupported {
        /// The operation, e.g. `Handle::pooling_forward`.
        op: &'static str,
        /// The data type asked for.
        dtype: DataType,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// Builds an [`Error::InvalidArgument`].
    pub fn invalid(op: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            reason: reason.into(),
        }
    }

    /// Attaches (or replaces) the description of what was being done to an [`Error::Api`].
    pub fn context(mut self, what: impl Into<String>) -> Self {
        if let Error::Api { context, .. } = &mut self {
            *context = Some(what.into());
        }
        self
    }

    /// The library's status name, for [`Error::Api`].
    pub fn status_name(&self) -> Option<&str> {
        match self {
            Error::Api { name, .. } => Some(name),
            _ => None,
        }
    }
}

struct ContextSuffix<'a>(&'a Option<String>);

impl fmt::Display for ContextSuffix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(c) => write!(f, " (while {c})"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_error_names_library_call_status_and_context() {
        let e = Error::Api {
            library: "MIOpen",
            call: "miopenConvolutionForward",
            code: 3,
            name: "miopenStatusBadParm".into(),
            message: "incorrect parameter detected".into(),
            context: None,
        }
        .context("running a 2-d f16 convolution");
        let s = e.to_string();
        assert!(s.contains("MIOpen call miopenConvolutionForward"), "{s}");
        assert!(s.contains("miopenStatusBadParm (3)"), "{s}");
        assert!(s.contains("while running a 2-d f16 convolution"), "{s}");
        assert_eq!(e.status_name(), Some("miopenStatusBadParm"));
    }

    #[test]
    fn unsupported_names_op_and_dtype() {
        let e = Error::Unsupported {
            op: "Handle::pooling_forward",
            dtype: DataType::BF16,
            reason: "no kernel".into(),
        };
        let s = e.to_string();
        assert!(
            s.contains("Handle::pooling_forward") && s.contains("bf16"),
            "{s}"
        );
    }

    #[test]
    fn hip_errors_convert() {
        let e: Error = hip_core::Error::invalid("x", "y").into();
        assert!(matches!(e, Error::Hip(_)));
    }
}
