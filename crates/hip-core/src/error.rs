//! The one error type of hip-core.

use std::fmt;

/// Result alias used throughout hip-core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in hip-core.
///
/// Runtime API failures carry the API's own error name and message (`hipErrorOutOfMemory`,
/// `CUDA_ERROR_INVALID_VALUE`, ...) and, where the safe layer knows it, what was being done.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A runtime API call returned an error code.
    #[error(
        "{call} failed with {name} ({code}): {message}{}",
        ContextSuffix(context)
    )]
    Api {
        /// The API function, e.g. `hipMemcpyAsync` or `cuLaunchKernel`.
        call: &'static str,
        /// The raw error code.
        code: i32,
        /// The error's symbolic name, e.g. `hipErrorInvalidValue`.
        name: String,
        /// The runtime's description of the error.
        message: String,
        /// What the safe layer was doing, if known.
        context: Option<String>,
    },
    /// A shared library could not be opened from any of the places searched.
    #[error(
        "could not load {library}: tried {}. {hint}{}",
        searched.join(", "),
        LastError(last_error)
    )]
    LibraryNotFound {
        /// What was being loaded, e.g. `the HIP runtime (libamdhip64)`.
        library: String,
        /// Every path or name that was tried, in order.
        searched: Vec<String>,
        /// How to fix it.
        hint: String,
        /// The loader's message for the last attempt.
        last_error: String,
    },
    /// A loaded library lacks a function that was called.
    #[error("{library} does not export {symbol}: the installed version is too old or too new for this call")]
    MissingSymbol {
        /// The library that was searched.
        library: String,
        /// The missing function.
        symbol: &'static str,
    },
    /// The runtime loaded but reports no usable GPU.
    #[error("no GPU device found: {detail}")]
    NoDevice {
        /// What the runtime said.
        detail: String,
    },
    /// A device ordinal past the number of devices.
    #[error("device ordinal {ordinal} is out of range: {count} device(s) present")]
    InvalidDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices exist.
        count: usize,
    },
    /// The device ran out of memory, even after the allocator released its cache.
    #[error(
        "out of memory on device {device}: requested {requested} bytes; the caching allocator holds {reserved} bytes, {allocated} of them in use"
    )]
    OutOfMemory {
        /// Device ordinal.
        device: usize,
        /// Bytes requested.
        requested: usize,
        /// Bytes reserved by the caching allocator when the request failed.
        reserved: usize,
        /// Bytes handed out to live buffers when the request failed.
        allocated: usize,
    },
    /// An argument failed validation before any runtime call was made.
    #[error("invalid argument to {op}: {reason}")]
    InvalidArgument {
        /// The operation that rejected the argument.
        op: &'static str,
        /// Why.
        reason: String,
    },
    /// Run-time compilation (hipRTC or NVRTC) failed.
    #[error("run-time compilation of `{program}` for {arch} failed:\n{log}")]
    Compile {
        /// The program's name.
        program: String,
        /// The target architecture.
        arch: String,
        /// The compiler's log.
        log: String,
    },
    /// The selected platform is not known or not supported for this call.
    #[error("platform error: {0}")]
    Platform(String),
    /// A file-system operation failed (e.g. the compilation cache).
    #[error("I/O error while {context}: {message}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        message: String,
    },
}

impl Error {
    /// Attaches (or replaces) the description of what was being done to an [`Error::Api`].
    pub fn context(mut self, what: impl Into<String>) -> Self {
        if let Error::Api { context, .. } = &mut self {
            *context = Some(what.into());
        }
        self
    }

    /// Builds an [`Error::InvalidArgument`].
    pub fn invalid(op: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            reason: reason.into(),
        }
    }

    /// Builds an [`Error::Io`] from a `std::io::Error`.
    pub fn io(context: impl Into<String>, err: &std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            message: err.to_string(),
        }
    }

    /// The symbolic runtime error name, for [`Error::Api`].
    pub fn api_name(&self) -> Option<&str> {
        match self {
            Error::Api { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// Extension to attach context to a `Result`.
pub trait ResultExt<T> {
    /// Attaches a description of what was being done to an [`Error::Api`].
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> ResultExt<T> for Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| e.context(what()))
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

struct LastError<'a>(&'a str);

impl fmt::Display for LastError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, " (last loader error: {})", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_error_names_call_code_and_context() {
        let e = Error::Api {
            call: "hipMalloc",
            code: 2,
            name: "hipErrorOutOfMemory".into(),
            message: "out of memory".into(),
            context: None,
        }
        .context("allocating 64 bytes on device 0");
        let s = e.to_string();
        assert!(s.contains("hipMalloc"), "{s}");
        assert!(s.contains("hipErrorOutOfMemory (2)"), "{s}");
        assert!(s.contains("while allocating 64 bytes on device 0"), "{s}");
        assert_eq!(e.api_name(), Some("hipErrorOutOfMemory"));
    }
}
