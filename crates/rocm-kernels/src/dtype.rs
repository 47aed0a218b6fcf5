//! The element types kernels are instantiated for.

use hip_core::DeviceRepr;

/// An element type with kernels: its name is the suffix of kernel names (`uexp_f32`,
/// `cast_f16_f32`).
pub trait KernelDType: DeviceRepr {
    /// Kernel-name suffix: `u8`, `u32`, `i16`, `i32`, `i64`, `bf16`, `f16`, `f32`, `f64`.
    const NAME: &'static str;
    /// Whether the type is a floating-point type.
    const IS_FLOAT: bool;
}

macro_rules! kernel_dtype {
    ($($t:ty => $name:literal, $float:literal;)*) => {$(
        impl KernelDType for $t {
            const NAME: &'static str = $name;
            const IS_FLOAT: bool = $float;
        }
    )*};
}

kernel_dtype! {
    u8 => "u8", false;
    u32 => "u32", false;
    i16 => "i16", false;
    i32 => "i32", false;
    i64 => "i64", false;
    half::bf16 => "bf16", true;
    half::f16 => "f16", true;
    f32 => "f32", true;
    f64 => "f64", true;
}

/// Fails with [`crate::Error::Unsupported`] (naming `op`, the dtype and `reason`) unless `T` is
/// f32, f16 or bf16: the float types of the kernels that compute in f32 (quantized, attention).
pub(crate) fn check_float<T: KernelDType>(op: &str, reason: &str) -> crate::Result<()> {
    match T::NAME {
        "f32" | "f16" | "bf16" => Ok(()),
        other => Err(crate::elementwise::unsupported(op, other, reason)),
    }
}
