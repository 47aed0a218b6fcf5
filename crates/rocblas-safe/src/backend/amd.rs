//! The `amd` backend: rocBLAS (`librocblas`), through the bindings in [`crate::sys::rocblas`].
//!
//! The library is opened at run time; every function is looked up when it opens and checked at
//! each call, so a symbol that the installed rocBLAS lacks is an error from that call (a
//! [`hip_core::Error::MissingSymbol`] inside [`Error::Hip`]), never a panic.

use std::ffi::{c_char, c_void};
use std::path::PathBuf;

use hip_core::loader::LibrarySpec;

use super::{c_string, missing_symbol, Compute, GemmCall, MathMode, RawHandle, Scalar};
use crate::config::{GemmDtype, Operation};
use crate::error::{Error, Result};
use crate::sys::rocblas as sys;
use crate::tensile::{self, TensileBase};

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

/// The `flags` argument of `rocblas_gemm_strided_batched_ex`: `rocblas_gemm_flags_fp16_alt_impl`
/// for an f16 GEMM that accumulates in f32 (rocBLAS' "HPA" kernels, the only ones with an
/// alternate implementation) when `fp16_alt_impl` asks for it, else none. bf16 never gets it:
/// rocBLAS documents the flag for f16 only, and bf16 has f32's exponent range, so the
/// subnormals gfx90a's matrix instructions flush are below 1.2e-38.
pub(crate) fn gemm_ex_flags(
    dtype: GemmDtype,
    compute: Compute,
    fp16_alt_impl: bool,
) -> sys::rocblas_gemm_flags {
    match (dtype, compute) {
        (GemmDtype::F16, Compute::F32) if fp16_alt_impl => sys::rocblas_gemm_flags_fp16_alt_impl,
        _ => sys::rocblas_gemm_flags_none,
    }
}

/// `Dl_info` (glibc, macOS): what `dladdr` reports about an address.
#[cfg(unix)]
#[repr(C)]
struct DlInfo {
    dli_fname: *const c_char,
    dli_fbase: *mut c_void,
    dli_sname: *const c_char,
    dli_saddr: *mut c_void,
}

#[cfg(unix)]
extern "C" {
    /// `int dladdr(const void *addr, Dl_info *info)`: the shared object holding `addr`.
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> std::ffi::c_int;
}

/// The file of the loaded shared object that holds `addr`, as the dynamic loader names it (the
/// path it was opened by; what rocBLAS' own `dl_iterate_phdr` search sees).
#[cfg(unix)]
fn shared_object_of(addr: *const c_void) -> Option<PathBuf> {
    let mut info = DlInfo {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: `info` is a valid, writable Dl_info; dladdr only reads `addr` as a number (it
    // looks it up in the loader's tables) and writes `info`.
    let found = unsafe { dladdr(addr, &mut info) };
    if found == 0 {
        return None;
    }
    // SAFETY: dli_fname is null or the loader's NUL-terminated name of a loaded object, valid
    // while the object stays loaded (it is: the caller holds the library).
    let name = unsafe { c_string(info.dli_fname) }?;
    Some(PathBuf::from(name)).filter(|p| p.is_absolute())
}

#[cfg(not(unix))]
fn shared_object_of(_addr: *const c_void) -> Option<PathBuf> {
    None
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

    /// The file this library was loaded from, as the dynamic loader names it.
    pub(crate) fn library_path(&self) -> Option<PathBuf> {
        let f = self.lib.rocblas_create_handle.as_ref().ok()?;
        shared_object_of(*f as *const c_void)
    }

    /// The Tensile base directory this rocBLAS will use ([`tensile::resolve_base`]):
    /// `$ROCBLAS_TENSILE_LIBPATH`, else the search next to the loaded library.
    pub(crate) fn tensile_base(&self) -> Result<TensileBase> {
        let env = std::env::var_os(tensile::TENSILE_LIBPATH_ENV);
        let dir = self
            .library_path()
            .and_then(|p| p.parent().map(|d| d.to_path_buf()));
        let version = self.version().ok().and_then(|v| tensile::short_version(&v));
        Ok(tensile::resolve_base(
            env.as_deref(),
            dir.as_deref(),
            version.as_deref(),
            &|p: &std::path::Path| p.exists(),
        ))
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
    /// See [`super::Backend::set_atomics`].
    pub(crate) unsafe fn set_atomics(&self, h: RawHandle, allowed: bool) -> Result<()> {
        let mode = if allowed {
            sys::rocblas_atomics_allowed
        } else {
            sys::rocblas_atomics_not_allowed
        };
        // SAFETY: forwarded contract; `mode` is a rocblas_atomics_mode value.
        unsafe { rocblas_call!(self, rocblas_set_atomics_mode(h.0.cast(), mode)) }
    }

    /// # Safety
    /// See [`super::Backend::atomics_allowed`].
    pub(crate) unsafe fn atomics_allowed(&self, h: RawHandle) -> Result<bool> {
        let mut mode: sys::rocblas_atomics_mode = sys::rocblas_atomics_allowed;
        // SAFETY: forwarded contract; `mode` is a valid out-pointer.
        unsafe { rocblas_call!(self, rocblas_get_atomics_mode(h.0.cast(), &mut mode)) }?;
        Ok(mode != sys::rocblas_atomics_not_allowed)
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
                            gemm_ex_flags(call.dtype, call.compute, call.fp16_alt_impl),
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
    fn only_f16_with_f32_accumulation_gets_the_alternate_implementation() {
        use sys::{rocblas_gemm_flags_fp16_alt_impl as ALT, rocblas_gemm_flags_none as NONE};
        assert_eq!(gemm_ex_flags(GemmDtype::F16, Compute::F32, true), ALT);
        assert_eq!(gemm_ex_flags(GemmDtype::F16, Compute::F32, false), NONE);
        // f16 accumulation (the reduced-precision opt-in) has no alternate kernels.
        assert_eq!(gemm_ex_flags(GemmDtype::F16, Compute::F16, true), NONE);
        assert_eq!(gemm_ex_flags(GemmDtype::BF16, Compute::F32, true), NONE);
        assert_eq!(gemm_ex_flags(GemmDtype::F32, Compute::F32, true), NONE);
        assert_eq!(gemm_ex_flags(GemmDtype::F64, Compute::F64, true), NONE);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn dladdr_names_the_object_of_an_address() {
        // A function of the C library, looked up as rocBLAS' are (dlsym): its object is libc.
        let this = libloading::os::unix::Library::this();
        // SAFETY: only the symbol's address is used, never called.
        let strlen = unsafe { this.get::<unsafe extern "C" fn()>(b"strlen\0") }.unwrap();
        let p = shared_object_of(*strlen as *const c_void).expect("dladdr found nothing");
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("libc"), "{p:?}");
        assert_eq!(shared_object_of(std::ptr::null()), None);
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
