//! candle-rocm's typed error, and how it travels inside [`candle_core::Error`].
//!
//! Every failure of this backend is a [`RocmError`] naming the op and the dtype(s). The backend
//! traits return `candle_core::Result`, so a `RocmError` is boxed into candle's
//! [`candle_core::Error::Cuda`] variant: in candle-core 0.11.1 it is the only variant that
//! carries a boxed `std::error::Error` (so the typed error can be recovered with
//! [`RocmError::from_candle`]) and it displays its content unchanged. (candle's `Device` enum is
//! closed in 0.11.1, which is also why [`crate::RocmDevice`] reports a `Cuda` location; the
//! Tensor-level patch gives ROCm its own variants.)
//!
//! Operand mismatches that candle itself has a variant for are reported with that variant:
//! [`candle_core::Error::DTypeMismatchBinaryOp`], [`candle_core::Error::DeviceMismatchBinaryOp`],
//! [`candle_core::Error::ShapeMismatchBinaryOp`].

use candle_core::DType;

/// Why an op refuses f8e4m3 although storage supports it.
pub(crate) const F8_REASON: &str = "f8e4m3 tensors are stored as bytes on ROCm and support host \
     transfers, copies, const_set, where_cond, casts to and from every dtype, the indexing ops \
     and element-wise arithmetic (unary ops, affine, powf, elu, binary ops, comparisons, \
     scatter_add_set, index_add, bit for bit as candle's CPU backend); reductions, matmul, \
     convolutions, pooling, upsampling, random numbers, sorting and the fused ops have no \
     f8e4m3 kernels: cast to f16/bf16/f32 first";

/// Why the 4/6-bit and f8e8m0 formats are refused everywhere.
pub(crate) const DUMMY_REASON: &str = "candle stores this format as opaque bytes with no \
     arithmetic defined; the ROCm backend has no storage for it";

/// A failure of the ROCm backend.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RocmError {
    /// The op exists in Candle but has no ROCm implementation yet (for this dtype).
    #[error("{op} is not implemented yet on ROCm for {dtype}: {reason}")]
    NotImplemented {
        /// The op, e.g. `reduce sum` or `matmul`.
        op: String,
        /// The dtype(s), e.g. `f32` or `u8 -> f8e4m3`.
        dtype: String,
        /// Why, and where the work is tracked.
        reason: String,
    },
    /// The op is not defined for this dtype (as in candle's own backends), or the kernels
    /// refuse the combination.
    #[error("{op} is not supported on ROCm for {dtype}: {reason}")]
    Unsupported {
        /// The op.
        op: String,
        /// The dtype(s).
        dtype: String,
        /// Why.
        reason: String,
    },
    /// Shapes, strides, offsets or buffer lengths do not fit together.
    #[error("{op}: invalid layout: {reason}")]
    Layout {
        /// The op.
        op: String,
        /// What does not fit.
        reason: String,
    },
    /// A vendor library (rocBLAS/cuBLAS, MIOpen/cuDNN) failed or could not be loaded.
    #[error("{op}: {library}: {reason}")]
    Library {
        /// The op being run.
        op: String,
        /// The library, e.g. `rocBLAS` or `MIOpen`.
        library: String,
        /// The library's error (status name and message), or why it is unavailable.
        reason: String,
    },
    /// The HIP runtime failed (allocation, copy, launch, module loading, compilation, ...).
    #[error("{op}: {source}")]
    Hip {
        /// The op being run.
        op: String,
        /// The runtime's error (boxed: it is large).
        #[source]
        source: Box<hip_core::Error>,
    },
}

impl RocmError {
    /// [`RocmError::NotImplemented`] for `op` on `dtype`.
    pub fn not_implemented(op: impl Into<String>, dtype: DType, reason: impl Into<String>) -> Self {
        RocmError::NotImplemented {
            op: op.into(),
            dtype: dtype.as_str().to_string(),
            reason: reason.into(),
        }
    }

    /// [`RocmError::Unsupported`] for `op` on `dtype`.
    pub fn unsupported(op: impl Into<String>, dtype: DType, reason: impl Into<String>) -> Self {
        RocmError::Unsupported {
            op: op.into(),
            dtype: dtype.as_str().to_string(),
            reason: reason.into(),
        }
    }

    /// [`RocmError::Layout`] for `op`.
    pub fn layout(op: impl Into<String>, reason: impl Into<String>) -> Self {
        RocmError::Layout {
            op: op.into(),
            reason: reason.into(),
        }
    }

    /// [`RocmError::Library`] for `op`.
    pub fn library(
        op: impl Into<String>,
        library: impl Into<String>,
        reason: impl std::fmt::Display,
    ) -> Self {
        RocmError::Library {
            op: op.into(),
            library: library.into(),
            reason: reason.to_string(),
        }
    }

    /// A hip-core error raised while running `op`.
    pub fn hip(op: impl Into<String>, source: hip_core::Error) -> Self {
        RocmError::Hip {
            op: op.into(),
            source: Box::new(source),
        }
    }

    /// A rocm-kernels error raised while running `op`, keeping its kind and message.
    pub fn kernel(op: impl Into<String>, err: rocm_kernels::Error) -> Self {
        let op = op.into();
        match err {
            rocm_kernels::Error::Hip(source) => RocmError::hip(op, source),
            rocm_kernels::Error::Unsupported {
                op: kop,
                dtype,
                reason,
            } => RocmError::Unsupported {
                op: if kop == op {
                    op
                } else {
                    format!("{op} ({kop})")
                },
                dtype,
                reason,
            },
            rocm_kernels::Error::Layout { op: kop, reason } => RocmError::Layout {
                op: if kop == op {
                    op
                } else {
                    format!("{op} ({kop})")
                },
                reason,
            },
            other => RocmError::Unsupported {
                op,
                dtype: "-".into(),
                reason: other.to_string(),
            },
        }
    }

    /// The `RocmError` inside a candle error, looking through backtrace, context and path
    /// wrappers. `None` when the error did not come from this backend.
    pub fn from_candle(err: &candle_core::Error) -> Option<&RocmError> {
        use candle_core::Error as E;
        match err {
            E::Cuda(inner) => inner.downcast_ref::<RocmError>(),
            E::WithBacktrace { inner, .. }
            | E::Context { inner, .. }
            | E::WithPath { inner, .. } => RocmError::from_candle(inner),
            _ => None,
        }
    }

    /// The op this error is about.
    pub fn op(&self) -> &str {
        match self {
            RocmError::NotImplemented { op, .. }
            | RocmError::Unsupported { op, .. }
            | RocmError::Layout { op, .. }
            | RocmError::Library { op, .. }
            | RocmError::Hip { op, .. } => op,
        }
    }
}

impl From<RocmError> for candle_core::Error {
    fn from(e: RocmError) -> Self {
        candle_core::Error::Cuda(Box::new(e)).bt()
    }
}

/// Shorthand: the candle error for a hip-core failure during `op`.
pub(crate) fn hip_err(op: &str) -> impl FnOnce(hip_core::Error) -> candle_core::Error + '_ {
    move |e| RocmError::hip(op, e).into()
}

/// Shorthand: the candle error for a rocm-kernels failure during `op`.
pub(crate) fn kernel_err(op: &str) -> impl FnOnce(rocm_kernels::Error) -> candle_core::Error + '_ {
    move |e| RocmError::kernel(op, e).into()
}

/// A device-recorded index error as candle reports one: [`candle_core::Error::InvalidIndex`]
/// `{ op, index, size }` for an index into a dim; a [`RocmError`] with the kernels' own message
/// for a negative index (which `InvalidIndex`'s `usize` cannot hold) and for records that are not
/// an index into a dim (varlen attention's cumulative offsets).
pub(crate) fn index_error(e: rocm_kernels::indexing::IndexError) -> candle_core::Error {
    use rocm_kernels::indexing::IndexOp;
    match (e.op, usize::try_from(e.index), usize::try_from(e.size)) {
        (IndexOp::AttentionSeqlens, _, _) | (_, Err(_), _) | (_, _, Err(_)) => {
            RocmError::kernel(e.op.name(), e.to_error()).into()
        }
        (_, Ok(index), Ok(size)) => candle_core::Error::InvalidIndex {
            op: e.op.name(),
            index,
            size,
        }
        .bt(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_implemented_names_op_dtype_and_reason() {
        let e: candle_core::Error =
            RocmError::not_implemented("reduce sum", DType::BF16, "kernel not implemented yet")
                .into();
        let s = e.to_string();
        assert!(s.contains("reduce sum"), "{s}");
        assert!(s.contains("bf16"), "{s}");
        assert!(s.contains("not implemented yet on ROCm"), "{s}");
        let back = RocmError::from_candle(&e).expect("typed error survives the conversion");
        assert!(matches!(back, RocmError::NotImplemented { .. }));
        assert_eq!(back.op(), "reduce sum");
    }

    #[test]
    fn typed_error_is_found_through_wrappers() {
        let e: candle_core::Error = RocmError::layout("copy2d", "out of bounds").into();
        let e = e.context("while doing something").with_path("/tmp/x");
        let back = RocmError::from_candle(&e).expect("found through Context and WithPath");
        assert!(matches!(back, RocmError::Layout { .. }));
        assert!(RocmError::from_candle(&candle_core::Error::Msg("x".into())).is_none());
    }

    #[test]
    fn kernel_errors_keep_kind_and_message() {
        let k = rocm_kernels::Error::Unsupported {
            op: "unary exp".into(),
            dtype: "u8".into(),
            reason: "integer exp has no meaning".into(),
        };
        let e = RocmError::kernel("unary exp", k);
        match &e {
            RocmError::Unsupported { op, dtype, reason } => {
                assert_eq!(op, "unary exp");
                assert_eq!(dtype, "u8");
                assert_eq!(reason, "integer exp has no meaning");
            }
            other => panic!("unexpected {other:?}"),
        }
        let k = rocm_kernels::Error::Layout {
            op: "binary add".into(),
            reason: "rank mismatch".into(),
        };
        let s = RocmError::kernel("badd", k).to_string();
        assert!(
            s.contains("badd (binary add)") && s.contains("rank mismatch"),
            "{s}"
        );
        let h = hip_core::Error::invalid("DeviceBuffer::new", "too big");
        let s = candle_core::Error::from(RocmError::kernel("affine", h.into())).to_string();
        assert!(s.contains("affine") && s.contains("too big"), "{s}");
    }
}
