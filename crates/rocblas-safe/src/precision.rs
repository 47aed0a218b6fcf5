//! Process-wide opt-in reduced-precision GEMM modes, as Candle's CUDA backend exposes them.
//!
//! All three are off by default (full-precision accumulation, as PyTorch defaults to for
//! f16/bf16 reductions). They are read at each [`Handle::gemm`](crate::Handle::gemm) call.
//!
//! | flag | AMD (rocBLAS) | NVIDIA (cuBLAS) |
//! |---|---|---|
//! | `f16` on | compute type f16 (`rocblas_datatype_f16_r`) | `CUBLAS_COMPUTE_16F` |
//! | `f16` off | compute type f32 | `CUBLAS_COMPUTE_32F`, math mode `CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION` |
//! | `bf16` on | no effect: rocBLAS has no reduced-precision bf16 GEMM, it always accumulates in f32 | `CUBLAS_COMPUTE_32F` with cuBLAS' default math (reduced-precision split-K reductions allowed) |
//! | `bf16` off | compute type f32 | `CUBLAS_COMPUTE_32F`, math mode `CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION` |
//! | `f32` on | math mode `rocblas_xf32_xdl_math_op` requested; rocBLAS silently keeps the default math where its kernels for the device have no XF32 (XF32 is a CDNA3 / MI300, gfx94x, feature): see [`Handle::f32_fast_math_active`](crate::Handle::f32_fast_math_active) | math mode `CUBLAS_TF32_TENSOR_OP_MATH` (TF32 tensor cores) |
//! | `f32` off | `rocblas_default_math` | `CUBLAS_DEFAULT_MATH` |
//!
//! f64 GEMMs are always computed in f64.

use std::sync::atomic::{AtomicBool, Ordering};

static F16: AtomicBool = AtomicBool::new(false);
static BF16: AtomicBool = AtomicBool::new(false);
static F32: AtomicBool = AtomicBool::new(false);

/// Allows f16 GEMMs to accumulate in f16 (faster, less accurate). Off by default. Process-wide.
pub fn set_gemm_reduced_precision_f16(enabled: bool) {
    F16.store(enabled, Ordering::Relaxed);
}

/// Whether f16 GEMMs may accumulate in f16 (see [`set_gemm_reduced_precision_f16`]).
pub fn gemm_reduced_precision_f16() -> bool {
    F16.load(Ordering::Relaxed)
}

/// Allows bf16 GEMMs to use reduced-precision reductions where the library has them (cuBLAS;
/// rocBLAS has none, so this is a no-op on AMD). Off by default. Process-wide.
pub fn set_gemm_reduced_precision_bf16(enabled: bool) {
    BF16.store(enabled, Ordering::Relaxed);
}

/// Whether bf16 GEMMs may use reduced-precision reductions (see
/// [`set_gemm_reduced_precision_bf16`]).
pub fn gemm_reduced_precision_bf16() -> bool {
    BF16.load(Ordering::Relaxed)
}

/// Allows f32 GEMMs to use TF32-like fast math: TF32 tensor cores on NVIDIA, rocBLAS' XF32 math
/// mode on AMD where the device has it (CDNA3 / MI300, gfx94x; elsewhere rocBLAS keeps full f32,
/// which [`Handle::f32_fast_math_active`](crate::Handle::f32_fast_math_active) reports). Off by
/// default. Process-wide.
pub fn set_gemm_reduced_precision_f32(enabled: bool) {
    F32.store(enabled, Ordering::Relaxed);
}

/// Whether f32 GEMMs may use TF32-like fast math (see [`set_gemm_reduced_precision_f32`]).
pub fn gemm_reduced_precision_f32() -> bool {
    F32.load(Ordering::Relaxed)
}

/// `ROCBLAS_SAFE_ALLOW_ATOMICS=1`: new handles allow the library's GEMM algorithms that use
/// atomics (see [`Handle::set_atomics_allowed`](crate::Handle::set_atomics_allowed)); unset or
/// `0`, they are forbidden and GEMMs are deterministic.
pub const ALLOW_ATOMICS_ENV: &str = "ROCBLAS_SAFE_ALLOW_ATOMICS";

/// `ROCBLAS_SAFE_FP16_ALT_IMPL=1`: new handles use rocBLAS' alternate f16 kernels on gfx90a
/// (see [`Handle::set_fp16_alt_impl`](crate::Handle::set_fp16_alt_impl)); unset or `0`, they
/// do not.
pub const FP16_ALT_IMPL_ENV: &str = "ROCBLAS_SAFE_FP16_ALT_IMPL";

/// The value of a boolean environment variable: `1`, `true`, `yes` or `on` (any case) is true;
/// unset, empty and anything else is false.
pub(crate) fn env_flag(value: Option<&std::ffi::OsStr>) -> bool {
    value
        .and_then(|v| v.to_str())
        .map(|v| v.trim().to_ascii_lowercase())
        .is_some_and(|v| matches!(v.as_str(), "1" | "true" | "yes" | "on"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn env_flags_parse() {
        for on in ["1", "true", "TRUE", " yes ", "On"] {
            assert!(env_flag(Some(OsStr::new(on))), "{on}");
        }
        for off in ["0", "", "false", "no", "off", "2", "enable"] {
            assert!(!env_flag(Some(OsStr::new(off))), "{off}");
        }
        assert!(!env_flag(None));
    }
}
