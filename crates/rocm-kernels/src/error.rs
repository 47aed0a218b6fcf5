//! Errors of rocm-kernels.

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong when launching a kernel.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The runtime reported an error (launch, copy, allocation, compilation, ...).
    #[error(transparent)]
    Hip(#[from] hip_core::Error),
    /// The op is not available for this dtype (or combination of dtypes).
    #[error("{op} is not supported for {dtype}: {reason}")]
    Unsupported {
        /// The op, e.g. `unary exp`.
        op: String,
        /// The dtype(s), e.g. `u8` or `f16 -> f8e4m3`.
        dtype: String,
        /// Why.
        reason: String,
    },
    /// Shapes, strides or buffer lengths do not fit together.
    #[error("{op}: {reason}")]
    Layout {
        /// The op.
        op: String,
        /// What does not fit.
        reason: String,
    },
}
