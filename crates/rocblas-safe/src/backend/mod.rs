//! The narrow interface between the safe layer and one platform's BLAS library.
//!
//! [`Backend`] is chosen once per process from [`hip_core::platform()`]:
//!
//! * [`amd`]: rocBLAS (`librocblas`), through our own bindgen bindings ([`crate::sys::rocblas`]);
//! * [`nvidia`]: a thin adapter over cuBLAS (`libcublas`), typed with cudarc's raw `sys` types.
//!
//! Both implement the same few calls with rocBLAS semantics; the safe layer ([`crate::Handle`])
//! validates everything before it reaches them. Handles cross this interface as opaque
//! pointers, and every call that takes one is `unsafe`.

use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::OnceLock;

use hip_core::loader::LibrarySpec;
use hip_core::Platform;

use crate::config::{GemmDtype, Resolved};
use crate::error::{Error, Result};

pub mod amd;
pub mod nvidia;

/// A library handle (`rocblas_handle` / `cublasHandle_t`) as an opaque pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawHandle(pub(crate) *mut c_void);

// SAFETY: the handle is an opaque token; the safe layer only uses it under the Mutex of the
// `Handle` that owns it, so moving the token between threads never shares the library state.
unsafe impl Send for RawHandle {}

/// The scalar type the library computes (and reads alpha/beta) in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compute {
    /// f16 accumulation (the opt-in reduced-precision f16 mode).
    F16,
    /// f32 accumulation (f32, and f16/bf16 by default).
    F32,
    /// f64.
    F64,
}

/// alpha or beta in the compute type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    F16(half::f16),
    F32(f32),
    F64(f64),
}

impl Scalar {
    /// `v` converted to `compute` (round to nearest).
    pub(crate) fn new(v: f64, compute: Compute) -> Scalar {
        match compute {
            Compute::F16 => Scalar::F16(half::f16::from_f64(v)),
            // Rounding to the compute type is the conversion the contract promises.
            Compute::F32 => Scalar::F32(v as f32),
            Compute::F64 => Scalar::F64(v),
        }
    }

    /// A host pointer to the value (host pointer mode), valid while `self` is.
    pub(crate) fn as_ptr(&self) -> *const c_void {
        match self {
            Scalar::F16(v) => (v as *const half::f16).cast(),
            Scalar::F32(v) => (v as *const f32).cast(),
            Scalar::F64(v) => (v as *const f64).cast(),
        }
    }
}

/// A validated GEMM, ready for the library.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GemmCall {
    pub(crate) shape: Resolved,
    pub(crate) dtype: GemmDtype,
    pub(crate) compute: Compute,
    pub(crate) alpha: Scalar,
    pub(crate) beta: Scalar,
    /// Device addresses of the first element of A, B and C.
    pub(crate) a: u64,
    pub(crate) b: u64,
    pub(crate) c: u64,
    /// rocBLAS' alternate f16 kernels (`rocblas_gemm_flags_fp16_alt_impl`, gfx90a); the
    /// `nvidia` backend has no such thing and ignores it.
    pub(crate) fp16_alt_impl: bool,
}

/// The handle-wide math mode a GEMM wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MathMode {
    /// The library's default.
    Default,
    /// Reductions in the compute type only (cuBLAS' `DISALLOW_REDUCED_PRECISION_REDUCTION`;
    /// rocBLAS always works that way).
    StrictReduction,
    /// TF32 (cuBLAS) / XF32 (rocBLAS) for f32 inputs.
    FastF32,
}

/// One platform's BLAS library.
pub(crate) enum Backend {
    /// Boxed: bindgen's table is several hundred bytes.
    Amd(Box<amd::RocBlasLib>),
    Nvidia(nvidia::CublasLib),
}

/// `$ROCBLAS_LIB_DIR`: a directory searched for rocBLAS before the usual ROCm places.
pub const ROCBLAS_LIB_DIR_ENV: &str = "ROCBLAS_LIB_DIR";
/// `$CUBLAS_LIB_DIR`: a directory searched for cuBLAS before the usual CUDA places.
pub const CUBLAS_LIB_DIR_ENV: &str = "CUBLAS_LIB_DIR";

/// The search for a library, with `$env` (when set) searched first.
pub(crate) fn spec_with_env_dir(mut spec: LibrarySpec, env: &str) -> LibrarySpec {
    if let Some(dir) = std::env::var_os(env).filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        spec.dirs.retain(|d| d != &dir);
        spec.dirs.insert(0, dir);
    }
    spec
}

static BACKEND: OnceLock<Result<Backend>> = OnceLock::new();

/// The process' BLAS library for hip-core's platform, opened on first use.
pub(crate) fn backend() -> Result<&'static Backend> {
    BACKEND
        .get_or_init(|| match hip_core::platform()? {
            Platform::Amd => amd::load().map(|l| Backend::Amd(Box::new(l))),
            Platform::Nvidia => nvidia::load().map(Backend::Nvidia),
        })
        .as_ref()
        .map_err(Clone::clone)
}

impl Backend {
    /// The platform this library serves.
    pub(crate) fn platform(&self) -> Platform {
        match self {
            Backend::Amd(_) => Platform::Amd,
            Backend::Nvidia(_) => Platform::Nvidia,
        }
    }

    /// The library's version string.
    pub(crate) fn version(&self) -> Result<String> {
        match self {
            Backend::Amd(l) => l.version(),
            Backend::Nvidia(l) => l.version(),
        }
    }

    /// Creates a handle on the calling thread's current device, bound to `stream`, with host
    /// pointer mode.
    ///
    /// # Safety
    /// `stream` is a live stream of the current device (a `hipStream_t` / `CUstream`) and stays
    /// alive until the handle is destroyed.
    pub(crate) unsafe fn create(&self, stream: *mut c_void) -> Result<RawHandle> {
        match self {
            // SAFETY: forwarded contract.
            Backend::Amd(l) => unsafe { l.create(stream) },
            // SAFETY: forwarded contract.
            Backend::Nvidia(l) => unsafe { l.create(stream) },
        }
    }

    /// Destroys a handle.
    ///
    /// # Safety
    /// `h` came from [`Backend::create`], is destroyed once, and nobody uses it afterwards.
    pub(crate) unsafe fn destroy(&self, h: RawHandle) -> Result<()> {
        match self {
            // SAFETY: forwarded contract.
            Backend::Amd(l) => unsafe { l.destroy(h) },
            // SAFETY: forwarded contract.
            Backend::Nvidia(l) => unsafe { l.destroy(h) },
        }
    }

    /// The library's value for `mode`; equal values need no call to switch between.
    pub(crate) fn native_math(&self, mode: MathMode) -> u32 {
        match self {
            Backend::Amd(_) => amd::native_math(mode),
            Backend::Nvidia(_) => nvidia::native_math(mode),
        }
    }

    /// Sets the handle's math mode to a value from [`Backend::native_math`].
    ///
    /// # Safety
    /// `h` is a live handle of this library, used by no other thread during the call.
    pub(crate) unsafe fn set_math(&self, h: RawHandle, native: u32) -> Result<()> {
        match self {
            // SAFETY: forwarded contract.
            Backend::Amd(l) => unsafe { l.set_math(h, native) },
            // SAFETY: forwarded contract.
            Backend::Nvidia(l) => unsafe { l.set_math(h, native) },
        }
    }

    /// Allows or forbids the library's GEMM algorithms that use atomics (non-deterministic
    /// split-K reductions): `rocblas_set_atomics_mode` / `cublasSetAtomicsMode`.
    ///
    /// # Safety
    /// As [`Backend::set_math`].
    pub(crate) unsafe fn set_atomics(&self, h: RawHandle, allowed: bool) -> Result<()> {
        match self {
            // SAFETY: forwarded contract.
            Backend::Amd(l) => unsafe { l.set_atomics(h, allowed) },
            // SAFETY: forwarded contract.
            Backend::Nvidia(l) => unsafe { l.set_atomics(h, allowed) },
        }
    }

    /// Whether the handle allows atomics, read back from the library.
    ///
    /// # Safety
    /// As [`Backend::set_math`].
    pub(crate) unsafe fn atomics_allowed(&self, h: RawHandle) -> Result<bool> {
        match self {
            // SAFETY: forwarded contract.
            Backend::Amd(l) => unsafe { l.atomics_allowed(h) },
            // SAFETY: forwarded contract.
            Backend::Nvidia(l) => unsafe { l.atomics_allowed(h) },
        }
    }

    /// Whether the handle's current math mode is the fast f32 one (XF32 / TF32).
    ///
    /// # Safety
    /// As [`Backend::set_math`].
    pub(crate) unsafe fn fast_f32_active(&self, h: RawHandle) -> Result<bool> {
        match self {
            // SAFETY: forwarded contract.
            Backend::Amd(l) => unsafe { l.fast_f32_active(h) },
            // SAFETY: forwarded contract.
            Backend::Nvidia(l) => unsafe { l.fast_f32_active(h) },
        }
    }

    /// Queues the GEMM on the handle's stream.
    ///
    /// # Safety
    /// `h` is a live handle of this library, used by no other thread during the call, whose
    /// device is current; `call` was validated against the buffers its addresses point into
    /// (every element it addresses lies in live device memory of that device, which stays
    /// allocated until the queued work has finished), and `call.shape` describes a non-empty GEMM.
    pub(crate) unsafe fn gemm(&self, h: RawHandle, call: &GemmCall) -> Result<()> {
        match self {
            // SAFETY: forwarded contract.
            Backend::Amd(l) => unsafe { l.gemm(h, call) },
            // SAFETY: forwarded contract.
            Backend::Nvidia(l) => unsafe { l.gemm(h, call) },
        }
    }
}

/// Reads a C string owned by the library into an owned `String`.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that stays valid during the call.
pub(crate) unsafe fn c_string(p: *const std::ffi::c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    Some(
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// A missing function of a table, as hip-core reports it.
pub(crate) fn missing_symbol(library: &str, symbol: &'static str) -> Error {
    Error::Hip(hip_core::Error::MissingSymbol {
        library: library.to_string(),
        symbol,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_round_to_the_compute_type() {
        assert_eq!(Scalar::new(1.5, Compute::F32), Scalar::F32(1.5));
        assert_eq!(
            Scalar::new(0.1, Compute::F16),
            Scalar::F16(half::f16::from_f32(0.1))
        );
        assert_eq!(Scalar::new(0.1, Compute::F64), Scalar::F64(0.1));
    }

    #[test]
    fn env_dir_is_searched_first() {
        let spec = LibrarySpec {
            description: "x",
            sonames: &["libx.so.1"],
            dirs: vec![PathBuf::from("/a"), PathBuf::from("/b")],
            hint: "",
        };
        // The variable is read from the environment: use one no other test sets.
        std::env::set_var("ROCBLAS_SAFE_TEST_DIR_ENV", "/b");
        let spec = spec_with_env_dir(spec, "ROCBLAS_SAFE_TEST_DIR_ENV");
        assert_eq!(spec.dirs, vec![PathBuf::from("/b"), PathBuf::from("/a")]);
        std::env::remove_var("ROCBLAS_SAFE_TEST_DIR_ENV");
        let spec = spec_with_env_dir(spec, "ROCBLAS_SAFE_TEST_DIR_ENV");
        assert_eq!(spec.dirs, vec![PathBuf::from("/b"), PathBuf::from("/a")]);
    }
}
