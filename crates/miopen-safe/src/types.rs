//! Element types and pooling modes.

use std::fmt;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `f32`.
    F32,
    /// IEEE half precision ([`half::f16`]).
    F16,
    /// bfloat16 ([`half::bf16`]).
    BF16,
    /// `f64`. MIOpen has no double-precision convolution or pooling kernels: every operation
    /// refuses it with [`Error::Unsupported`](crate::Error::Unsupported), on both platforms.
    F64,
}

impl DataType {
    /// Lower-case name: `f32`, `f16`, `bf16`, `f64`.
    pub fn name(self) -> &'static str {
        match self {
            DataType::F32 => "f32",
            DataType::F16 => "f16",
            DataType::BF16 => "bf16",
            DataType::F64 => "f64",
        }
    }

    /// Size of one element in bytes.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DataType::F32 => 4,
            DataType::F16 | DataType::BF16 => 2,
            DataType::F64 => 8,
        }
    }

    /// Whether convolutions (forward and backward-data) take this type: f32, f16 and bf16.
    pub fn supports_convolution(self) -> bool {
        !matches!(self, DataType::F64)
    }

    /// Whether pooling takes this type: f32 and f16 (MIOpen 3.4's pooling solvers take no
    /// other type).
    pub fn supports_pooling(self) -> bool {
        matches!(self, DataType::F32 | DataType::F16)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// An element type the library functions can be called with: `f32`, [`half::f16`],
/// [`half::bf16`] and `f64` (which every operation refuses with a typed error).
///
/// Sealed: the libraries read `DTYPE`-sized elements through the device pointers, so the Rust
/// type and `DTYPE` must agree; only this crate implements it.
pub trait ConvElement: hip_core::DeviceRepr + sealed::Sealed {
    /// The library data type of `Self`.
    const DTYPE: DataType;
}

impl ConvElement for f32 {
    const DTYPE: DataType = DataType::F32;
}
impl ConvElement for half::f16 {
    const DTYPE: DataType = DataType::F16;
}
impl ConvElement for half::bf16 {
    const DTYPE: DataType = DataType::BF16;
}
impl ConvElement for f64 {
    const DTYPE: DataType = DataType::F64;
}

/// How a pooling window is reduced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolMode {
    /// The largest element of the window (padding never wins).
    Max,
    /// The mean over the window's elements that lie inside the input (padding excluded:
    /// `miopenPoolingAverage`, `CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING`). Without padding,
    /// as in Candle's `avg_pool2d`, this is the sum over the window divided by its size.
    Average,
    /// The sum over the window divided by the full window size, padding included
    /// (`miopenPoolingAverageInclusive`, `CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING`;
    /// PyTorch's `count_include_pad=True`).
    AverageIncludePadding,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_sizes_match_the_rust_types() {
        assert_eq!(f32::DTYPE.size_in_bytes(), std::mem::size_of::<f32>());
        assert_eq!(
            half::f16::DTYPE.size_in_bytes(),
            std::mem::size_of::<half::f16>()
        );
        assert_eq!(
            half::bf16::DTYPE.size_in_bytes(),
            std::mem::size_of::<half::bf16>()
        );
        assert_eq!(f64::DTYPE.size_in_bytes(), std::mem::size_of::<f64>());
    }

    #[test]
    fn support_matrix() {
        assert!(DataType::F32.supports_convolution() && DataType::F32.supports_pooling());
        assert!(DataType::F16.supports_convolution() && DataType::F16.supports_pooling());
        assert!(DataType::BF16.supports_convolution() && !DataType::BF16.supports_pooling());
        assert!(!DataType::F64.supports_convolution() && !DataType::F64.supports_pooling());
        assert_eq!(DataType::BF16.to_string(), "bf16");
    }
}
