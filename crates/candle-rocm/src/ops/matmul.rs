//! `matmul`'s dtype dispatch: f32, f64, f16 and bf16 operands handed to
//! [`RocmDevice::gemm`](crate::RocmDevice) (one strided-batched GEMM on rocBLAS/cuBLAS; the
//! layout planning lives in `crate::matmul`, the library call in `crate::blas`).

use candle_core::backend::BackendStorage;
use candle_core::{Error, Layout, Result};

use crate::error::RocmError;
use crate::storage::{RocmStorage, RocmStorageSlice};

/// `lhs x rhs` for candle's `(b, m, n, k)`, into a new contiguous `(b, m, n)` storage.
pub(crate) fn matmul(
    lhs: &RocmStorage,
    rhs: &RocmStorage,
    bmnk: (usize, usize, usize, usize),
    lhs_l: &Layout,
    rhs_l: &Layout,
) -> Result<RocmStorage> {
    let op = "matmul";
    lhs.check_device(rhs, op)?;
    let dev = lhs.device();
    let n = bmnk.0 * bmnk.1 * bmnk.2;
    macro_rules! gemm {
        ($a:expr, $b:expr) => {{
            let mut out = dev.alloc(op, n)?;
            dev.matmul_product(
                op,
                bmnk,
                (&$a.as_slice(), lhs_l),
                (&$b.as_slice(), rhs_l),
                &mut out,
            )?;
            out
        }};
    }
    let slice = match (lhs.as_slice(), rhs.as_slice()) {
        (RocmStorageSlice::F32(a), RocmStorageSlice::F32(b)) => RocmStorageSlice::F32(gemm!(a, b)),
        (RocmStorageSlice::F64(a), RocmStorageSlice::F64(b)) => RocmStorageSlice::F64(gemm!(a, b)),
        (RocmStorageSlice::F16(a), RocmStorageSlice::F16(b)) => RocmStorageSlice::F16(gemm!(a, b)),
        (RocmStorageSlice::BF16(a), RocmStorageSlice::BF16(b)) => {
            RocmStorageSlice::BF16(gemm!(a, b))
        }
        (l, r) if l.dtype() != r.dtype() => {
            return Err(Error::DTypeMismatchBinaryOp {
                lhs: l.dtype(),
                rhs: r.dtype(),
                op,
            }
            .bt())
        }
        (l, _) => {
            return Err(RocmError::unsupported(
                op,
                l.dtype(),
                "matmul runs on the vendor BLAS, which multiplies f32, f64, f16 and bf16 only",
            )
            .into())
        }
    };
    Ok(lhs.wrap(slice))
}
