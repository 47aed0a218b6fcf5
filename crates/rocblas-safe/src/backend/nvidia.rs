//! The `nvidia` backend: a thin adapter over cuBLAS (`libcublas`), so that the safe layer and
//! everything above it run (and are tested) on NVIDIA GPUs too.
//!
//! cudarc supplies the raw cuBLAS *types*; its functions are never called, because its loader
//! panics when a library or symbol is absent. Our own table below holds the opened library and
//! every function pointer we use, resolved once; a symbol the library lacks stays `None` and is
//! an error when (and only when) that function is called. Status codes and math modes are plain
//! integers, not cudarc's enums: a newer cuBLAS may return a code those enums do not list, and
//! math modes are bit flags (`CUBLAS_TF32_TENSOR_OP_MATH | CUBLAS_MATH_DISALLOW_...`) that no
//! enum variant spells.
//!
//! No logic lives here that the AMD backend lacks: the mapping is one call per rocBLAS call.

// Table fields carry the exact C symbol names.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_longlong, c_uint, c_void};

use cudarc::cublas::sys::{
    cublasAtomicsMode_t, cublasComputeType_t, cublasGemmAlgo_t, cublasHandle_t, cublasMath_t,
    cublasOperation_t, cublasPointerMode_t, cublasStatus_t, cudaDataType_t, cudaStream_t,
    libraryPropertyType_t,
};
use hip_core::loader::LibrarySpec;

use super::{c_string, missing_symbol, Compute, GemmCall, MathMode, RawHandle, Scalar};
use crate::config::{GemmDtype, Operation};
use crate::error::{Error, Result};

/// How cuBLAS is named in errors.
pub const CUBLAS: &str = "cuBLAS (libcublas)";
/// cuBLAS' file names: CUDA 13, CUDA 12, the unversioned link.
pub const CUBLAS_SONAMES: &[&str] = &["libcublas.so.13", "libcublas.so.12", "libcublas.so"];

/// A raw `cublasStatus_t`.
pub type CublasStatus = c_int;

const SUCCESS: CublasStatus = cublasStatus_t::CUBLAS_STATUS_SUCCESS as CublasStatus;

/// Declares the function table: one `Option<fn>` per function plus the library that owns them.
macro_rules! cublas_table {
    ($( $field:ident : fn( $( $arg:ty ),* $(,)? ) -> $ret:ty; )*) => {
        /// The cuBLAS functions the adapter uses, each `None` when the library lacks it.
        pub struct CublasApi {
            $(
                #[allow(missing_docs)]
                pub $field: Option<unsafe extern "C" fn($($arg),*) -> $ret>,
            )*
            /// Keeps every function pointer above valid; never unloaded while the table lives.
            _lib: libloading::Library,
        }

        /// The names of [`CublasApi`]'s functions, in table order.
        pub const CUBLAS_FUNCTIONS: &[&str] = &[$(stringify!($field)),*];

        impl CublasApi {
            fn new(lib: libloading::Library) -> Self {
                $(
                    // SAFETY: each prototype is the one in cublas_api.h (as cudarc's `sys`
                    // declares it), with the status widened to the `int` it is in C and math
                    // modes as `unsigned`; the pointer lives in the same struct as `lib`, which
                    // keeps it valid.
                    let $field = unsafe {
                        lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(
                            concat!(stringify!($field), "\0").as_bytes(),
                        )
                    }
                    .ok()
                    .map(|s| *s);
                )*
                CublasApi { $($field,)* _lib: lib }
            }
        }
    };
}

cublas_table! {
    cublasCreate_v2: fn(*mut cublasHandle_t) -> CublasStatus;
    cublasDestroy_v2: fn(cublasHandle_t) -> CublasStatus;
    cublasSetStream_v2: fn(cublasHandle_t, cudaStream_t) -> CublasStatus;
    cublasSetPointerMode_v2: fn(cublasHandle_t, cublasPointerMode_t) -> CublasStatus;
    cublasSetMathMode: fn(cublasHandle_t, c_uint) -> CublasStatus;
    cublasGetMathMode: fn(cublasHandle_t, *mut c_uint) -> CublasStatus;
    cublasSetAtomicsMode: fn(cublasHandle_t, c_int) -> CublasStatus;
    cublasGetAtomicsMode: fn(cublasHandle_t, *mut c_int) -> CublasStatus;
    cublasGetProperty: fn(libraryPropertyType_t, *mut c_int) -> CublasStatus;
    cublasGetStatusName: fn(CublasStatus) -> *const c_char;
    cublasGetStatusString: fn(CublasStatus) -> *const c_char;
    cublasSgemm_v2: fn(
        cublasHandle_t, cublasOperation_t, cublasOperation_t, c_int, c_int, c_int,
        *const f32, *const f32, c_int, *const f32, c_int, *const f32, *mut f32, c_int,
    ) -> CublasStatus;
    cublasDgemm_v2: fn(
        cublasHandle_t, cublasOperation_t, cublasOperation_t, c_int, c_int, c_int,
        *const f64, *const f64, c_int, *const f64, c_int, *const f64, *mut f64, c_int,
    ) -> CublasStatus;
    cublasSgemmStridedBatched: fn(
        cublasHandle_t, cublasOperation_t, cublasOperation_t, c_int, c_int, c_int,
        *const f32, *const f32, c_int, c_longlong, *const f32, c_int, c_longlong,
        *const f32, *mut f32, c_int, c_longlong, c_int,
    ) -> CublasStatus;
    cublasDgemmStridedBatched: fn(
        cublasHandle_t, cublasOperation_t, cublasOperation_t, c_int, c_int, c_int,
        *const f64, *const f64, c_int, c_longlong, *const f64, c_int, c_longlong,
        *const f64, *mut f64, c_int, c_longlong, c_int,
    ) -> CublasStatus;
    cublasGemmStridedBatchedEx: fn(
        cublasHandle_t, cublasOperation_t, cublasOperation_t, c_int, c_int, c_int,
        *const c_void, *const c_void, cudaDataType_t, c_int, c_longlong,
        *const c_void, cudaDataType_t, c_int, c_longlong,
        *const c_void, *mut c_void, cudaDataType_t, c_int, c_longlong,
        c_int, cublasComputeType_t, cublasGemmAlgo_t,
    ) -> CublasStatus;
}

/// Calls a function of the table: `Ok(status)` or [`hip_core::Error::MissingSymbol`]. Use
/// inside an `unsafe` block whose `SAFETY` comment covers the arguments.
macro_rules! cublas_raw {
    ($api:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $api.$f {
            Some(f) => Ok(f($($arg),*)),
            None => Err(missing_symbol(CUBLAS, stringify!($f))),
        }
    };
}

/// As [`cublas_raw!`], with a failure status turned into [`Error::Blas`] naming the call.
macro_rules! cublas_call {
    ($self:expr, $f:ident($($arg:expr),* $(,)?)) => {
        cublas_raw!($self.api, $f($($arg),*)).and_then(|status| $self.check(stringify!($f), status))
    };
}

/// The opened cuBLAS library.
pub struct CublasLib {
    api: CublasApi,
}

/// Opens cuBLAS from `$CUBLAS_LIB_DIR`, the CUDA toolkit's directories or the loader path.
pub(crate) fn load() -> Result<CublasLib> {
    let spec = super::spec_with_env_dir(
        LibrarySpec::cuda_toolkit(CUBLAS, CUBLAS_SONAMES),
        super::CUBLAS_LIB_DIR_ENV,
    );
    Ok(CublasLib {
        api: CublasApi::new(spec.open()?),
    })
}

/// The `CUBLAS_STATUS_*` name of a status (cuBLAS' own when it can say, see
/// [`CublasLib::check`]).
pub fn status_name(status: CublasStatus) -> String {
    use cublasStatus_t as S;
    let known = [
        S::CUBLAS_STATUS_SUCCESS,
        S::CUBLAS_STATUS_NOT_INITIALIZED,
        S::CUBLAS_STATUS_ALLOC_FAILED,
        S::CUBLAS_STATUS_INVALID_VALUE,
        S::CUBLAS_STATUS_ARCH_MISMATCH,
        S::CUBLAS_STATUS_MAPPING_ERROR,
        S::CUBLAS_STATUS_EXECUTION_FAILED,
        S::CUBLAS_STATUS_INTERNAL_ERROR,
        S::CUBLAS_STATUS_NOT_SUPPORTED,
        S::CUBLAS_STATUS_LICENSE_ERROR,
    ];
    known
        .iter()
        .find(|s| **s as CublasStatus == status)
        .map(|s| format!("{s:?}"))
        .unwrap_or_else(|| format!("CUBLAS_STATUS_UNKNOWN_{status}"))
}

/// cuBLAS' value for a math mode.
pub(crate) fn native_math(mode: MathMode) -> u32 {
    match mode {
        MathMode::Default => cublasMath_t::CUBLAS_DEFAULT_MATH as u32,
        MathMode::StrictReduction => {
            cublasMath_t::CUBLAS_DEFAULT_MATH as u32
                | cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION as u32
        }
        MathMode::FastF32 => cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH as u32,
    }
}

fn operation(op: Operation) -> cublasOperation_t {
    match op {
        Operation::None => cublasOperation_t::CUBLAS_OP_N,
        Operation::Transpose => cublasOperation_t::CUBLAS_OP_T,
    }
}

fn compute_type(compute: Compute) -> cublasComputeType_t {
    match compute {
        Compute::F16 => cublasComputeType_t::CUBLAS_COMPUTE_16F,
        Compute::F32 => cublasComputeType_t::CUBLAS_COMPUTE_32F,
        Compute::F64 => cublasComputeType_t::CUBLAS_COMPUTE_64F,
    }
}

impl CublasLib {
    /// The function table, for the benchmark's direct calls.
    pub fn table(&self) -> &CublasApi {
        &self.api
    }

    /// `Ok` for `CUBLAS_STATUS_SUCCESS`, else the [`Error::Blas`] for `call`.
    fn check(&self, call: &'static str, status: CublasStatus) -> Result<()> {
        if status == SUCCESS {
            return Ok(());
        }
        // SAFETY: both functions take any status value and return a static string (or null).
        let name = unsafe { cublas_raw!(self.api, cublasGetStatusName(status)) }
            .ok()
            // SAFETY: a static NUL-terminated string or null.
            .and_then(|p| unsafe { c_string(p) })
            .unwrap_or_else(|| status_name(status));
        // SAFETY: as above.
        let message = unsafe { cublas_raw!(self.api, cublasGetStatusString(status)) }
            .ok()
            // SAFETY: a static NUL-terminated string or null.
            .and_then(|p| unsafe { c_string(p) })
            .unwrap_or_else(|| "(cublasGetStatusString is unavailable)".to_string());
        Err(Error::Blas {
            call,
            code: status,
            name,
            message,
            context: None,
        })
    }

    pub(crate) fn version(&self) -> Result<String> {
        let mut v = [0 as c_int; 3];
        for (i, p) in [
            libraryPropertyType_t::MAJOR_VERSION,
            libraryPropertyType_t::MINOR_VERSION,
            libraryPropertyType_t::PATCH_LEVEL,
        ]
        .into_iter()
        .enumerate()
        {
            // SAFETY: `v[i]` is a valid out-pointer; the call needs no handle or device.
            unsafe { cublas_call!(self, cublasGetProperty(p, &mut v[i])) }?;
        }
        Ok(format!("cuBLAS {}.{}.{}", v[0], v[1], v[2]))
    }

    /// # Safety
    /// See [`super::Backend::create`].
    pub(crate) unsafe fn create(&self, stream: *mut c_void) -> Result<RawHandle> {
        let mut h: cublasHandle_t = std::ptr::null_mut();
        // SAFETY: `h` is a valid out-pointer; cuBLAS binds the handle to the current context.
        unsafe { cublas_call!(self, cublasCreate_v2(&mut h)) }?;
        let raw = RawHandle(h.cast());
        let setup = || -> Result<()> {
            // SAFETY: `h` is the live handle just created; the caller guarantees `stream` is a
            // live CUstream (= cudaStream_t) of the current context that outlives the handle.
            unsafe { cublas_call!(self, cublasSetStream_v2(h, stream.cast())) }?;
            // SAFETY: as above; host pointer mode: alpha and beta are read from host memory.
            unsafe {
                cublas_call!(
                    self,
                    cublasSetPointerMode_v2(h, cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST)
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
        unsafe { cublas_call!(self, cublasDestroy_v2(h.0.cast())) }
    }

    /// # Safety
    /// See [`super::Backend::set_math`].
    pub(crate) unsafe fn set_math(&self, h: RawHandle, native: u32) -> Result<()> {
        // SAFETY: forwarded contract; `native` is a cublasMath_t value from `native_math`.
        unsafe { cublas_call!(self, cublasSetMathMode(h.0.cast(), native)) }
    }

    /// # Safety
    /// See [`super::Backend::set_atomics`].
    pub(crate) unsafe fn set_atomics(&self, h: RawHandle, allowed: bool) -> Result<()> {
        let mode = if allowed {
            cublasAtomicsMode_t::CUBLAS_ATOMICS_ALLOWED
        } else {
            cublasAtomicsMode_t::CUBLAS_ATOMICS_NOT_ALLOWED
        } as c_int;
        // SAFETY: forwarded contract; `mode` is a cublasAtomicsMode_t value.
        unsafe { cublas_call!(self, cublasSetAtomicsMode(h.0.cast(), mode)) }
    }

    /// # Safety
    /// See [`super::Backend::atomics_allowed`].
    pub(crate) unsafe fn atomics_allowed(&self, h: RawHandle) -> Result<bool> {
        let mut mode: c_int = 0;
        // SAFETY: forwarded contract; `mode` is a valid out-pointer (the enum is an int in C).
        unsafe { cublas_call!(self, cublasGetAtomicsMode(h.0.cast(), &mut mode)) }?;
        Ok(mode != cublasAtomicsMode_t::CUBLAS_ATOMICS_NOT_ALLOWED as c_int)
    }

    /// # Safety
    /// See [`super::Backend::fast_f32_active`].
    pub(crate) unsafe fn fast_f32_active(&self, h: RawHandle) -> Result<bool> {
        let mut mode: c_uint = 0;
        // SAFETY: forwarded contract; `mode` is a valid out-pointer.
        unsafe { cublas_call!(self, cublasGetMathMode(h.0.cast(), &mut mode)) }?;
        Ok(mode & 0xf == cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH as c_uint)
    }

    /// # Safety
    /// See [`super::Backend::gemm`].
    pub(crate) unsafe fn gemm(&self, h: RawHandle, call: &GemmCall) -> Result<()> {
        let s = &call.shape;
        let h: cublasHandle_t = h.0.cast();
        let (ta, tb) = (operation(s.transa), operation(s.transb));
        let alpha = call.alpha.as_ptr();
        let beta = call.beta.as_ptr();
        match (call.dtype, call.alpha, call.beta) {
            (GemmDtype::F32, Scalar::F32(_), Scalar::F32(_)) if s.batch == 1 => {
                // SAFETY: the caller validated the shape against the buffers (device memory of
                // the handle's device); alpha/beta are host f32 values alive for the call.
                unsafe {
                    cublas_call!(
                        self,
                        cublasSgemm_v2(
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
                    cublas_call!(
                        self,
                        cublasSgemmStridedBatched(
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
                // SAFETY: as for cublasSgemm_v2, with f64 elements and scalars.
                unsafe {
                    cublas_call!(
                        self,
                        cublasDgemm_v2(
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
                    cublas_call!(
                        self,
                        cublasDgemmStridedBatched(
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
                let t = match call.dtype {
                    GemmDtype::F16 => cudaDataType_t::CUDA_R_16F,
                    _ => cudaDataType_t::CUDA_R_16BF,
                };
                // SAFETY: as above; A, B and C hold `t` elements; alpha/beta are host values of
                // the compute type, which `compute_type` names.
                unsafe {
                    cublas_call!(
                        self,
                        cublasGemmStridedBatchedEx(
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
                            call.c as *mut c_void,
                            t,
                            s.ldc,
                            s.stride_c,
                            s.batch,
                            compute_type(call.compute),
                            cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
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
        assert_eq!(status_name(0), "CUBLAS_STATUS_SUCCESS");
        assert_eq!(status_name(15), "CUBLAS_STATUS_NOT_SUPPORTED");
        assert_eq!(status_name(99), "CUBLAS_STATUS_UNKNOWN_99");
    }

    #[test]
    fn math_modes_are_cublas_flags() {
        assert_eq!(native_math(MathMode::Default), 0);
        assert_eq!(native_math(MathMode::StrictReduction), 16);
        assert_eq!(native_math(MathMode::FastF32), 3);
    }

    #[test]
    fn table_lists_every_function_once() {
        let mut names = CUBLAS_FUNCTIONS.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CUBLAS_FUNCTIONS.len());
        assert!(CUBLAS_FUNCTIONS.contains(&"cublasGemmStridedBatchedEx"));
    }
}
