//! The `amd` backend: rocBLAS (`librocblas`), through the bindings in [`crate::sys::rocblas`].
//!
//! The library is opened at run time; every function is looked up when it opens and checked at
//! each call, so a symbol that the installed rocBLAS lacks is an error from that call (a
//! [`hip_core::Error::MissingSymbol`] inside [`Error::Hip`]), never a panic.

use std::ffi::{c_char, c_void};

use hip_core::loader::LibrarySpec;

use super::{c_string, missing_symbol, Compute, GemmCall, MathMode, RawHandle, Scalar};
use crate::config::{GemmDtype, Operation};
use crate::error::{Error, Result};
use crate::sys::rocblas as sys;

/// How rocBLAS is named in errors.
pub const ROCBLAS: &str = "rocBLAS (librocblas)";
/// rocBLAS' file names: the ROCm 6 ABI first, then ROCm 7's, then the unversioned link.
pub const ROCBLAS_SONAMES: &[&str] = &["librocblas.so.4", "librocblas.so.5", "librocblas.so"];

/// Calls a rocBLAS function through the table `$lib`: `Ok(status)` or
/// [`hip_core::Error::MissingSymbol`]. Use inside an `unsafe` block whose `SAFETY` comment
/// covers the arguments.
macro_rules! rocblas_raw {
    ($lib:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match &$lib.$f {
            Ok(f) => Ok(f($($arg),*)),
            Err(_) => Err(missing_symbol(ROCBLAS, stringify!($f))),
        }
    };
}

/// As [`rocblas_raw!`], with a failure status turned into [`Error::Blas`] naming the call.
macro_rules! rocblas_call {
    ($self:expr, $f:ident($($arg:expr),* $(,)?)) => {
        rocblas_raw!($self.lib, $f($($arg),*))
            .and_then(|status| $self.check(stringify!($f), status))
    };
}

/// The opened rocBLAS library.
pub struct RocBlasLib {
    lib: sys::RocBlas,
}

/// Opens rocBLAS from `$ROCBLAS_LIB_DIR`, `$ROCM_PATH/lib`, `/opt/rocm/lib` or the loader path.
pub(crate) fn load() -> Result<RocBlasLib> {
    let spec = super::spec_with_env_dir(
        LibrarySpec::rocm(ROCBLAS, ROCBLAS_SONAMES),
        super::ROCBLAS_LIB_DIR_ENV,
    );
    let library = spec.open()?;
    // SAFETY: `from_library` only looks the table's symbols up (dlsym); it calls none of them.
    // The prototypes come from the ROCm 6.4 headers, whose ABI the accepted sonames share.
    let lib = unsafe { sys::RocBlas::from_library(library) }.map_err(|e| {
        Error::Hip(hip_core::Error::Platform(format!(
            "{ROCBLAS} loaded but its symbols could not be read: {e}"
        )))
    })?;
    Ok(RocBlasLib { lib })
}

/// The symbolic name of a `rocblas_status`.
pub fn status_name(status: u32) -> String {
    let name = match status {
        sys::rocblas_status_success => "rocblas_status_success",
        sys::rocblas_status_invalid_handle => "rocblas_status_invalid_handle",
        sys::rocblas_status_not_implemented => "rocblas_status_not_implemented",
        sys::rocblas_status_invalid_pointer => "rocblas_status_invalid_pointer",
        sys::rocblas_status_invalid_size => "rocblas_status_invalid_size",
        sys::rocblas_status_memory_error => "rocblas_status_memory_error",
        sys::rocblas_status_internal_error => "rocblas_status_internal_error",
        sys::rocblas_status_perf_degraded => "rocblas_status_perf_degraded",
        sys::rocblas_status_size_query_mismatch => "rocblas_status_size_query_mismatch",
        sys::rocblas_status_size_increased => "rocblas_status_size_increased",
        sys::rocblas_status_size_unchanged => "rocblas_status_size_unchanged",
        sys::rocblas_status_invalid_value => "rocblas_status_invalid_value",
        sys::rocblas_status_continue => "rocblas_status_continue",
        sys::rocblas_status_check_numerics_fail => "rocblas_status_check_numerics_fail",
        sys::rocblas_status_excluded_from_build => "rocblas_status_excluded_from_build",
        sys::rocblas_status_arch_mismatch => "rocblas_status_arch_mismatch",
        other => return format!("rocblas_status_unknown_{other}"),
    };
    name.to_string()
}

/// rocBLAS' value for a math mode (rocBLAS always reduces in the compute type).
pub(crate) fn native_math(mode: MathMode) -> u32 {
    match mode {
        MathMode::Default | MathMode::StrictReduction => sys::rocblas_default_math,
        MathMode::FastF32 => sys::rocblas_xf32_xdl_math_op,
    }
}

fn operation(op: Operation) -> sys::rocblas_operation {
    match op {
        Operation::None => sys::rocblas_operation_none,
        Operation::Transpose => sys::rocblas_operation_transpose,
    }
}

fn datatype(dtype: GemmDtype) -> sys::rocblas_datatype {
    match dtype {
        GemmDtype::F16 => sys::rocblas_datatype_f16_r,
        GemmDtype::BF16 => sys::rocblas_datatype_bf16_r,
        GemmDtype::F32 => sys::rocblas_datatype_f32_r,
        GemmDtype::F64 => sys::rocblas_datatype_f64_r,
    }
}

fn compute_datatype(compute: Compute) -> sys::rocblas_datatype {
    match compute {
        Compute::F16 => sys::rocblas_datatype_f16_r,
        Compute::F32 => sys::rocblas_datatype_f32_r,
        Compute::F64 => sys::rocblas_datatype_f64_r,
    }
}

impl RocBlasLib {
    /// The function table, for the benchmark's direct calls.
    pub fn table(&self) -> &sys::RocBlas {
        &self.lib
    }

    /// `Ok` for `rocblas_status_success`, else the [`Error::Blas`] for `call`.
    fn check(&self, call: &'static str, status: sys::rocblas_status) -> Result<()> {
        if status == sys::rocblas_status_success {
            return Ok(());
        }
        // SAFETY: rocblas_status_to_string takes any status value and returns a static string.
        let message = unsafe { rocblas_raw!(self.lib, rocblas_status_to_string(status)) }
            .ok()
            // SAFETY: the library returns a static NUL-terminated string (or null).
            .and_then(|p| unsafe { c_string(p) })
            .unwrap_or_else(|| "(rocblas_status_to_string is unavailable)".to_string());
        Err(Error::Blas {
            call,
            code: status as i32,
            name: status_name(status),
            message,
            context: None,
        })
    }

    pub(crate) fn version(&self) -> Result<String> {
        let mut len = 0usize;
        // SAFETY: `len` is a valid out-pointer for the call.
        unsafe { rocblas_call!(self, rocblas_get_version_string_size(&mut len)) }?;
        let mut buf = vec![0u8; len.max(1) + 1];
        // SAFETY: `buf` holds `buf.len()` writable bytes, at least the size the library asked for.
        unsafe {
            rocblas_call!(
                self,
                rocblas_get_version_string(buf.as_mut_ptr().cast::<c_char>(), buf.len())
            )
        }?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }

    /// # Safety
    /// See [`super::Backend::create`].
    pub(crate) unsafe fn create(&self, stream: *mut c_void) -> Result<RawHandle> {
        let mut h: sys::rocblas_handle = std::ptr::null_mut();
        // SAFETY: `h` is a valid out-pointer; rocBLAS binds the handle to the current device.
        unsafe { rocblas_call!(self, rocblas_create_handle(&mut h)) }?;
        let raw = RawHandle(h.cast());
        let setup = || -> Result<()> {
            // SAFETY: `h` is the live handle just created; the caller guarantees `stream` is a live
            // hipStream_t of the current device that outlives the handle.
            unsafe { rocblas_call!(self, rocblas_set_stream(h, stream.cast())) }?;
            // SAFETY: as above; host pointer mode: alpha and beta are read from host memory.
            unsafe {
                rocblas_call!(
                    self,
                    rocblas_set_pointer_mode(h, sys::rocblas_pointer_mode_host)
                )
            }
        };
        if let Err(e) = setup() {
            // SAFETY: the handle was created above and is not used after this.
            let _ = unsafe { self.destroy(raw) };
            return Err(e);
        }
        Ok(raw)
    }

    /// # Safety
    /// See [`super::Backend::destroy`].
    pub(crate) unsafe fn destroy(&self, h: RawHandle) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { rocblas_call!(self, rocblas_destroy_handle(h.0.cast())) }
    }

    /// # Safety
    /// See [`super::Backend::set_math`].
    pub(crate) unsafe fn set_math(&self, h: RawHandle, native: u32) -> Result<()> {
        // SAFETY: forwarded contract; `native` is a rocblas_math_mode from `native_math`.
        unsafe { rocblas_call!(self, rocblas_set_math_mode(h.0.cast(), native)) }
    }

    /// # Safety
    /// See [`super::Backend::fast_f32_active`].
    pub(crate) unsafe fn fast_f32_active(&self, h: RawHandle) -> Result<bool> {
        let mut mode: sys::rocblas_math_mode = sys::rocblas_default_math;
        // SAFETY: forwarded contract; `mode` is a valid out-pointer.
        unsafe { rocblas_call!(self, rocblas_get_math_mode(h.0.cast(), &mut mode)) }?;
        Ok(mode == sys::rocblas_xf32_xdl_math_op)
    }

    /// # Safety
    /// See [`super::Backend::gemm`].
    pub(crate) unsafe fn gemm(&self, h: RawHandle, call: &GemmCall) -> Result<()> {
        let s = &call.shape;
        let h: sys::rocblas_handle = h.0.cast();
        let (ta, tb) = (operation(s.transa), operation(s.transb));
        let alpha = call.alpha.as_ptr();
        let beta = call.beta.as_ptr();
        match (call.dtype, call.alpha, call.beta) {
            (GemmDtype::F32, Scalar::F32(_), Scalar::F32(_)) if s.batch == 1 => {
                // SAFETY: the caller validated the shape against the buffers (device memory of
                // the handle's device); alpha/beta are host f32 values alive for the call.
                unsafe {
                    rocblas_call!(
                        self,
                        rocblas_sgemm(
                            h,
                            ta,
                            tb,
                            s.m,
                            s.n,
                            s.k,
                            alpha.cast(),
                            call.a as *const f32,
                            s.lda,
                            call.b as *const f32,
                            s.ldb,
                            beta.cast(),
                            call.c as *mut f32,
                            s.ldc,
                        )
                    )
                }
            }
            (GemmDtype::F32, Scalar::F32(_), Scalar::F32(_)) => {
                // SAFETY: as above, for every batch entry.
                unsafe {
                    rocblas_call!(
                        self,
                        rocblas_sgemm_strided_batched(
                            h,
                            ta,
                            tb,
                            s.m,
                            s.n,
                            s.k,
                            alpha.cast(),
                            call.a as *const f32,
                            s.lda,
                            s.stride_a,
                            call.b as *const f32,
                            s.ldb,
                            s.stride_b,
                            beta.cast(),
                            call.c as *mut f32,
                            s.ldc,
                            s.stride_c,
                            s.batch,
                        )
                    )
                }
            }
            (GemmDtype::F64, Scalar::F64(_), Scalar::F64(_)) if s.batch == 1 => {
                // SAFETY: as for rocblas_sgemm, with f64 elements and scalars.
                unsafe {
                    rocblas_call!(
                        self,
                        rocblas_dgemm(
                            h,
                            ta,
                            tb,
                            s.m,
                            s.n,
                            s.k,
                            alpha.cast(),
                            call.a as *const f64,
                            s.lda,
                            call.b as *const f64,
                            s.ldb,
                            beta.cast(),
                            call.c as *mut f64,
                            s.ldc,
                        )
                    )
                }
            }
            (GemmDtype::F64, Scalar::F64(_), Scalar::F64(_)) => {
                // SAFETY: as above, for every batch entry.
                unsafe {
                    rocblas_call!(
                        self,
                        rocblas_dgemm_strided_batched(
                            h,
                            ta,
                            tb,
                            s.m,
                            s.n,
                            s.k,
                            alpha.cast(),
                            call.a as *const f64,
                            s.lda,
                            s.stride_a,
                            call.b as *const f64,
                            s.ldb,
                            s.stride_b,
                            beta.cast(),
                            call.c as *mut f64,
                            s.ldc,
                            s.stride_c,
                            s.batch,
                        )
                    )
                }
            }
            (GemmDtype::F16 | GemmDtype::BF16, _, _) => {
                let t = datatype(call.dtype);
                // SAFETY: as above; A, B, C and D (= C, same ld and stride, as rocBLAS requires
                // for in-place use) hold `t` elements; alpha/beta are host values of the compute
                // type, which `compute` names.
                unsafe {
                    rocblas_call!(
                        self,
                        rocblas_gemm_strided_batched_ex(
                            h,
                            ta,
                            tb,
                            s.m,
                            s.n,
                            s.k,
                            alpha,
                            call.a as *const c_void,
                            t,
                            s.lda,
                            s.stride_a,
                            call.b as *const c_void,
                            t,
                            s.ldb,
                            s.stride_b,
                            beta,
                            call.c as *const c_void,
                            t,
                            s.ldc,
                            s.stride_c,
                            call.c as *mut c_void,
                            t,
                            s.ldc,
                            s.stride_c,
                            s.batch,
                            compute_datatype(call.compute),
                            sys::rocblas_gemm_algo_standard,
                            0,
                            sys::rocblas_gemm_flags_none,
                        )
                    )
                }
            }
            (dtype, alpha, _) => Err(Error::Unsupported {
                op: "gemm",
                dtype: dtype.to_string(),
                reason: format!("internal error: scalar {alpha:?} does not match the data type"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_match_the_header() {
        assert_eq!(status_name(0), "rocblas_status_success");
        assert_eq!(status_name(4), "rocblas_status_invalid_size");
        assert_eq!(status_name(15), "rocblas_status_arch_mismatch");
        assert_eq!(status_name(99), "rocblas_status_unknown_99");
    }

    #[test]
    fn missing_rocblas_is_library_not_found() {
        let spec = LibrarySpec {
            description: ROCBLAS,
            sonames: &["librocblas_safe_does_not_exist.so.4"],
            dirs: vec!["/nonexistent/rocm/lib".into()],
            hint: hip_core::loader::ROCM_HINT,
        };
        let err = spec.open().unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, hip_core::Error::LibraryNotFound { .. }));
        assert!(msg.contains("rocBLAS (librocblas)"), "{msg}");
        assert!(msg.contains("/nonexistent/rocm/lib/librocblas_safe_does_not_exist.so.4"));
    }
}
