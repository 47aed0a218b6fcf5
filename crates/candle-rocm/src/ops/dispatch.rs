//! Dtype dispatch shared by the op families: [`map_dtype!`] over a storage's kernel dtypes, and
//! the errors for the dtypes an op has no kernel for.

use candle_core::{DType, Error};

use crate::error::{RocmError, DUMMY_REASON, F8_REASON};

/// The error of an op that has no f8e4m3 kernel (f8e4m3 storage exists: "not implemented").
pub(crate) fn f8_error(op: &str) -> Error {
    RocmError::not_implemented(op, DType::F8E4M3, F8_REASON).into()
}

/// The error for a dtype with no device storage at all (the 4/6-bit formats, f8e8m0).
pub(crate) fn dummy_error(op: &str, dtype: DType) -> Error {
    RocmError::unsupported(op, dtype, DUMMY_REASON).into()
}

/// `match` over the kernel dtypes of a storage: binds the typed buffer and wraps the resulting
/// buffer in the same variant. `f8e4m3` is refused.
macro_rules! map_dtype {
    ($slice:expr, $op:expr, |$b:ident| $body:expr) => {
        match $slice {
            $crate::storage::RocmStorageSlice::U8($b) => {
                $crate::storage::RocmStorageSlice::U8($body?)
            }
            $crate::storage::RocmStorageSlice::U32($b) => {
                $crate::storage::RocmStorageSlice::U32($body?)
            }
            $crate::storage::RocmStorageSlice::I16($b) => {
                $crate::storage::RocmStorageSlice::I16($body?)
            }
            $crate::storage::RocmStorageSlice::I32($b) => {
                $crate::storage::RocmStorageSlice::I32($body?)
            }
            $crate::storage::RocmStorageSlice::I64($b) => {
                $crate::storage::RocmStorageSlice::I64($body?)
            }
            $crate::storage::RocmStorageSlice::BF16($b) => {
                $crate::storage::RocmStorageSlice::BF16($body?)
            }
            $crate::storage::RocmStorageSlice::F16($b) => {
                $crate::storage::RocmStorageSlice::F16($body?)
            }
            $crate::storage::RocmStorageSlice::F32($b) => {
                $crate::storage::RocmStorageSlice::F32($body?)
            }
            $crate::storage::RocmStorageSlice::F64($b) => {
                $crate::storage::RocmStorageSlice::F64($body?)
            }
            $crate::storage::RocmStorageSlice::F8E4M3(_) => {
                return Err($crate::ops::dispatch::f8_error($op))
            }
        }
    };
}
pub(crate) use map_dtype;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f8_and_dummy_errors_name_op_and_dtype() {
        let s = f8_error("reduce sum").to_string();
        assert!(s.contains("reduce sum") && s.contains("f8e4m3"), "{s}");
        assert!(s.contains("not implemented yet on ROCm"), "{s}");
        let s = dummy_error("zeros", DType::F4).to_string();
        assert!(s.contains("zeros") && s.contains("f4"), "{s}");
    }
}
