//! The one error type of rocblas-safe.

use std::fmt;

/// Result alias used throughout rocblas-safe.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in rocblas-safe.
///
/// Library failures carry the BLAS library's own status name (`rocblas_status_invalid_size`,
/// `CUBLAS_STATUS_NOT_SUPPORTED`, ...). A missing library or symbol, and every HIP runtime error
/// (device, stream, memory), is the [`hip_core::Error`] inside [`Error::Hip`].
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A BLAS library call returned a failure status.
    #[error(
        "{call} failed with {name} ({code}): {message}{}",
        ContextSuffix(context)
    )]
    Blas {
        /// The library function, e.g. `rocblas_sgemm` or `cublasGemmStridedBatchedEx`.
        call: &'static str,
        /// The raw status code.
        code: i32,
        /// The status' symbolic name, e.g. `rocblas_status_invalid_size`.
        name: String,
        /// The library's description of the status.
        message: String,
        /// What was being done, if known.
        context: Option<String>,
    },
    /// An argument failed validation before any library call was made.
    #[error("invalid argument to {op}: {reason}")]
    InvalidArgument {
        /// The operation that rejected the argument, e.g. `gemm`.
        op: &'static str,
        /// Why.
        reason: String,
    },
    /// The operation exists but not for this data type or mode.
    #[error("{op} does not support {dtype}: {reason}")]
    Unsupported {
        /// The operation.
        op: &'static str,
        /// The data type (or mode) asked for.
        dtype: String,
        /// Why.
        reason: String,
    },
    /// rocBLAS has no GEMM kernels (Tensile library) for the device: rocBLAS itself would
    /// abort the process at the first GEMM, so no handle was created. See
    /// [`crate::tensile`].
    #[error(
        "rocBLAS has no GEMM kernels for {arch} in {} ({source_of_dir}): {problem}{}. rocBLAS \
         would abort the process at the first GEMM, so no handle was created. Fix: install \
         rocBLAS' Tensile kernels for {arch} there (`cargo xtask install-rocm` with \
         CANDLE_ROCM_TENSILE_ARCHS={arch}, if Debian's rocBLAS is built for {arch}; else a \
         rocBLAS that is, e.g. AMD's ROCm, through ROCM_PATH), or set ROCBLAS_TENSILE_LIBPATH \
         to a directory holding TensileLibrary_lazy_{arch}.dat and its *{arch}*co code \
         objects; see docs/rocblas.md",
        dir.display(),
        Available(available)
    )]
    MissingTensileKernels {
        /// The device's processor, as rocBLAS names its files (`gfx90a`).
        arch: String,
        /// The directory rocBLAS will read.
        dir: std::path::PathBuf,
        /// How that directory was chosen (`from $ROCBLAS_TENSILE_LIBPATH`, `next to the loaded
        /// librocblas in ...`).
        source_of_dir: String,
        /// What is wrong with it.
        problem: String,
        /// The architectures the directory has kernels for.
        available: Vec<String>,
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

    /// Attaches (or replaces) the description of what was being done to an [`Error::Blas`].
    pub fn context(mut self, what: impl Into<String>) -> Self {
        if let Error::Blas { context, .. } = &mut self {
            *context = Some(what.into());
        }
        self
    }

    /// The BLAS status name, for [`Error::Blas`].
    pub fn status_name(&self) -> Option<&str> {
        match self {
            Error::Blas { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// `; it has kernels for a, b only` (nothing when the list is empty).
struct Available<'a>(&'a Vec<String>);

impl fmt::Display for Available<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, "; it has kernels for {} only", self.0.join(", "))
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
    fn blas_error_names_call_status_and_context() {
        let e = Error::Blas {
            call: "rocblas_sgemm",
            code: 4,
            name: "rocblas_status_invalid_size".into(),
            message: "Invalid size argument".into(),
            context: None,
        }
        .context("a 3x4x5 f32 GEMM");
        let s = e.to_string();
        assert!(s.contains("rocblas_sgemm failed"), "{s}");
        assert!(s.contains("rocblas_status_invalid_size (4)"), "{s}");
        assert!(s.contains("while a 3x4x5 f32 GEMM"), "{s}");
        assert_eq!(e.status_name(), Some("rocblas_status_invalid_size"));
    }

    #[test]
    fn hip_errors_convert() {
        let e: Error = hip_core::Error::invalid("x", "y").into();
        assert!(matches!(e, Error::Hip(_)));
        assert_eq!(e.to_string(), "invalid argument to x: y");
    }
}
