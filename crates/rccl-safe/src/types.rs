//! Element types and reduction operations.

use half::{bf16, f16};
use hip_core::DeviceRepr;

use crate::sys::rccl as sys;

/// An element type the collectives move and reduce, with its `ncclDataType_t`.
///
/// # Safety
/// `DATA_TYPE` must be the NCCL type whose element size and representation are exactly
/// `Self`'s: the library reads and writes `count * size_of::<Self>()` bytes through it.
pub unsafe trait NcclType: DeviceRepr {
    /// The `ncclDataType_t`.
    const DATA_TYPE: sys::ncclDataType_t;
    /// The type's name, for messages (`f32`, `bf16`, ...).
    const NAME: &'static str;
}

macro_rules! nccl_type {
    ($($t:ty => $dt:ident, $name:literal;)*) => {$(
        // SAFETY: NCCL's type of the same size and representation (ncclDataType_t docs).
        unsafe impl NcclType for $t {
            const DATA_TYPE: sys::ncclDataType_t = sys::$dt;
            const NAME: &'static str = $name;
        }
    )*};
}

nccl_type! {
    i8 => ncclInt8, "i8";
    u8 => ncclUint8, "u8";
    i32 => ncclInt32, "i32";
    u32 => ncclUint32, "u32";
    i64 => ncclInt64, "i64";
    u64 => ncclUint64, "u64";
    f16 => ncclFloat16, "f16";
    bf16 => ncclBfloat16, "bf16";
    f32 => ncclFloat32, "f32";
    f64 => ncclFloat64, "f64";
}

/// A built-in reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Mean over the ranks (NCCL >= 2.10): the sum divided by the rank count (for integer
    /// types, NCCL's integer division).
    Avg,
}

impl ReduceOp {
    /// Every operation.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Avg,
    ];

    /// The `ncclRedOp_t`.
    pub fn raw(self) -> sys::ncclRedOp_t {
        match self {
            ReduceOp::Sum => sys::ncclSum,
            ReduceOp::Prod => sys::ncclProd,
            ReduceOp::Max => sys::ncclMax,
            ReduceOp::Min => sys::ncclMin,
            ReduceOp::Avg => sys::ncclAvg,
        }
    }

    /// `sum`, `prod`, `max`, `min` or `avg`.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Avg => "avg",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_types_are_nccls_values() {
        // The values of the NCCL C API (stable since NCCL 2.0; bf16 since 2.10).
        assert_eq!(<i8 as NcclType>::DATA_TYPE, 0);
        assert_eq!(<u8 as NcclType>::DATA_TYPE, 1);
        assert_eq!(<i32 as NcclType>::DATA_TYPE, 2);
        assert_eq!(<u32 as NcclType>::DATA_TYPE, 3);
        assert_eq!(<i64 as NcclType>::DATA_TYPE, 4);
        assert_eq!(<u64 as NcclType>::DATA_TYPE, 5);
        assert_eq!(<f16 as NcclType>::DATA_TYPE, 6);
        assert_eq!(<f32 as NcclType>::DATA_TYPE, 7);
        assert_eq!(<f64 as NcclType>::DATA_TYPE, 8);
        assert_eq!(<bf16 as NcclType>::DATA_TYPE, 9);
    }

    #[test]
    fn reduce_ops_are_nccls_values() {
        let raw: Vec<u32> = ReduceOp::ALL.iter().map(|o| o.raw()).collect();
        assert_eq!(raw, [0, 1, 2, 3, 4]);
        assert_eq!(ReduceOp::Avg.name(), "avg");
    }
}
