//! The one error type of rccl-safe.

use std::time::Duration;

/// Result alias used throughout rccl-safe.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in rccl-safe.
///
/// Library failures carry NCCL's own result name (`ncclInvalidArgument`, ...), its description
/// (`ncclGetErrorString`) and, where the library has one, the detailed last error
/// (`ncclGetLastError`). A missing library or symbol, and every HIP runtime error, is the
/// [`hip_core::Error`] inside [`Error::Hip`].
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An RCCL/NCCL call returned a failure result (or a communicator reported one
    /// asynchronously).
    #[error(
        "{call} failed with {name} ({code}): {message}{}{}",
        Detail(last_error),
        ContextSuffix(context)
    )]
    Nccl {
        /// The library function, e.g. `ncclAllReduce`, or `ncclCommGetAsyncError` for an
        /// asynchronous failure.
        call: &'static str,
        /// The raw `ncclResult_t`.
        code: u32,
        /// The result's symbolic name, e.g. `ncclInvalidArgument`.
        name: String,
        /// The library's description of the result (`ncclGetErrorString`).
        message: String,
        /// The library's last error message (`ncclGetLastError`), when it has one.
        last_error: Option<String>,
        /// What was being done, if known.
        context: Option<String>,
    },
    /// An argument failed validation before any library call was made (a buffer too small for
    /// the count, a rank out of range, buffers of another device, ...).
    #[error("invalid argument to {op}: {reason}")]
    InvalidArgument {
        /// The operation that rejected the argument, e.g. `all_gather`.
        op: &'static str,
        /// Why.
        reason: String,
    },
    /// A communicator did not become ready in time (e.g. a rank that never joined the
    /// initialisation). The communicator was aborted.
    #[error(
        "{op} timed out after {:.1} s: {what}; the communicator was aborted",
        waited.as_secs_f64()
    )]
    Timeout {
        /// The operation that waited, e.g. `Comm::init_rank`.
        op: &'static str,
        /// How long it waited.
        waited: Duration,
        /// What it was waiting for.
        what: String,
    },
    /// A HIP runtime error, a missing library or a missing symbol (from hip-core's loader).
    #[error(transparent)]
    Hip(#[from] hip_core::Error),
}

impl Error {
    /// Builds an [`Error::InvalidArgument`].
    pub fn invalid(op: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            reason: reason.into(),
        }
    }

    /// Attaches (or replaces) the description of what was being done to an [`Error::Nccl`].
    pub fn context(mut self, what: impl Into<String>) -> Self {
        if let Error::Nccl { context, .. } = &mut self {
            *context = Some(what.into());
        }
        self
    }

    /// The NCCL result name, for [`Error::Nccl`].
    pub fn result_name(&self) -> Option<&str> {
        match self {
            Error::Nccl { name, .. } => Some(name),
            _ => None,
        }
    }

    /// Whether this is an [`Error::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }
}

/// `ncclResult_t` values (the same on every NCCL and RCCL release; `ncclInProgress` exists
/// since NCCL 2.14).
pub mod result {
    /// `ncclSuccess`.
    pub const SUCCESS: u32 = 0;
    /// `ncclUnhandledCudaError` (a HIP error in RCCL).
    pub const UNHANDLED_CUDA_ERROR: u32 = 1;
    /// `ncclSystemError`.
    pub const SYSTEM_ERROR: u32 = 2;
    /// `ncclInternalError`.
    pub const INTERNAL_ERROR: u32 = 3;
    /// `ncclInvalidArgument`.
    pub const INVALID_ARGUMENT: u32 = 4;
    /// `ncclInvalidUsage`.
    pub const INVALID_USAGE: u32 = 5;
    /// `ncclRemoteError`.
    pub const REMOTE_ERROR: u32 = 6;
    /// `ncclInProgress`: a non-blocking communicator's operation has not finished yet.
    pub const IN_PROGRESS: u32 = 7;
}

/// The symbolic name of an `ncclResult_t`.
pub fn result_name(code: u32) -> String {
    let name = match code {
        result::SUCCESS => "ncclSuccess",
        result::UNHANDLED_CUDA_ERROR => "ncclUnhandledCudaError",
        result::SYSTEM_ERROR => "ncclSystemError",
        result::INTERNAL_ERROR => "ncclInternalError",
        result::INVALID_ARGUMENT => "ncclInvalidArgument",
        result::INVALID_USAGE => "ncclInvalidUsage",
        result::REMOTE_ERROR => "ncclRemoteError",
        result::IN_PROGRESS => "ncclInProgress",
        other => return format!("ncclResult_{other}"),
    };
    name.to_string()
}

/// `; last error: ...` (nothing when absent or empty).
struct Detail<'a>(&'a Option<String>);

impl std::fmt::Display for Detail<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_deref().map(str::trim) {
            Some(d) if !d.is_empty() => write!(f, "; last error: {d}"),
            _ => Ok(()),
        }
    }
}

struct ContextSuffix<'a>(&'a Option<String>);

impl std::fmt::Display for ContextSuffix<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
    fn nccl_error_names_call_result_detail_and_context() {
        let e = Error::Nccl {
            call: "ncclAllReduce",
            code: result::INVALID_ARGUMENT,
            name: result_name(result::INVALID_ARGUMENT),
            message: "invalid argument".into(),
            last_error: Some(
                "AllReduce : invalid root 3 (root should be in the 0..1 range)\n".into(),
            ),
            context: None,
        }
        .context("an all-reduce of 4 f32");
        let s = e.to_string();
        assert!(
            s.contains("ncclAllReduce failed with ncclInvalidArgument (4)"),
            "{s}"
        );
        assert!(s.contains("last error: AllReduce : invalid root 3"), "{s}");
        assert!(s.ends_with("(while an all-reduce of 4 f32)"), "{s}");
        assert_eq!(e.result_name(), Some("ncclInvalidArgument"));
    }

    #[test]
    fn empty_last_error_is_left_out() {
        let e = Error::Nccl {
            call: "ncclGroupEnd",
            code: result::SYSTEM_ERROR,
            name: result_name(result::SYSTEM_ERROR),
            message: "unhandled system error".into(),
            last_error: Some("  ".into()),
            context: None,
        };
        assert_eq!(
            e.to_string(),
            "ncclGroupEnd failed with ncclSystemError (2): unhandled system error"
        );
    }

    #[test]
    fn every_result_has_its_name() {
        let names: Vec<String> = (0..8).map(result_name).collect();
        assert_eq!(
            names,
            [
                "ncclSuccess",
                "ncclUnhandledCudaError",
                "ncclSystemError",
                "ncclInternalError",
                "ncclInvalidArgument",
                "ncclInvalidUsage",
                "ncclRemoteError",
                "ncclInProgress"
            ]
        );
        assert_eq!(result_name(42), "ncclResult_42");
        // The bindings agree where the header has the value.
        assert_eq!(crate::sys::rccl::ncclSuccess, result::SUCCESS);
        assert_eq!(crate::sys::rccl::ncclRemoteError, result::REMOTE_ERROR);
    }

    #[test]
    fn timeout_says_what_and_how_long() {
        let e = Error::Timeout {
            op: "Comm::init_rank",
            waited: Duration::from_millis(3000),
            what: "rank 0 of 2 waited for the other ranks to join".into(),
        };
        assert!(e.is_timeout());
        assert_eq!(
            e.to_string(),
            "Comm::init_rank timed out after 3.0 s: rank 0 of 2 waited for the other ranks to \
             join; the communicator was aborted"
        );
    }

    #[test]
    fn hip_errors_convert() {
        let e: Error = hip_core::Error::invalid("x", "y").into();
        assert!(matches!(e, Error::Hip(_)));
    }
}
