//! # rocblas-safe: safe rocBLAS GEMM over hip-core
//!
//! The BLAS layer of the candle-rocm workspace: a [`Handle`] bound to a [`hip_core::Stream`]
//! (RAII, `Send + Sync`) and one generic, validated, column-major GEMM,
//!
//! ```text
//! C[i] = alpha * op(A[i]) * op(B[i]) + beta * C[i]        for i in 0..batch
//! ```
//!
//! plain (`batch = 1`) and strided-batched, with broadcast inputs (stride 0), for `f32`, `f64`,
//! `half::f16` and `half::bf16` (the 16-bit types through `gemm_strided_batched_ex`,
//! accumulating in f32 unless [`set_gemm_reduced_precision_f16`] asks for f16).
//!
//! * **Validated before the call**: [`GemmConfig::validate`] checks leading dimensions, that
//!   every element the description addresses (every batch entry) lies inside its slice, that C is
//!   not broadcast, and that every value fits the library's integer types. A bad description is
//!   an [`Error::InvalidArgument`], never undefined behaviour.
//! * **Loaded at run time**: rocBLAS (`librocblas.so.4|.so.5|.so`) is searched in
//!   `$ROCBLAS_LIB_DIR`, `$ROCM_PATH/lib`, `/opt/rocm/lib` and the loader path, through our own
//!   bindgen bindings ([`sys::rocblas`]). A missing library or symbol is an error
//!   ([`Error::Hip`] with hip-core's `LibraryNotFound` / `MissingSymbol`), never a panic.
//! * **Two platforms**: on hip-core's `nvidia` platform the same API runs over cuBLAS
//!   (`libcublas.so.13|.12|.so`, searched in `$CUBLAS_LIB_DIR` and the CUDA toolkit's
//!   directories), a thin adapter with one cuBLAS call per rocBLAS call.
//! * **No abort, no surprise**: on AMD, [`Handle::new`] first checks that rocBLAS has GEMM
//!   kernels (its Tensile library) for the device, which rocBLAS would otherwise answer with
//!   `abort()` at the first GEMM ([`tensile`]); handles are deterministic (atomics off) unless
//!   asked otherwise ([`Handle::set_atomics_allowed`]).
//! * **Reduced precision, opt-in**: [`set_gemm_reduced_precision_f16`],
//!   [`set_gemm_reduced_precision_bf16`] and [`set_gemm_reduced_precision_f32`] mirror Candle's
//!   CUDA backend; see [`precision`] for what each does on each platform.
//!
//! See `docs/rocblas.md` for configuration and the environment variables.
//!
//! ## Example
//! ```no_run
//! use rocblas_safe::{GemmConfig, Handle, Operation};
//!
//! # fn main() -> rocblas_safe::Result<()> {
//! let device = hip_core::Device::new(0)?;
//! let stream = device.default_stream();
//! let blas = Handle::new(&stream)?;
//! // A is 2x3, B is 3x2 (column-major): C = A * B is 2x2.
//! let a = stream.alloc_from_host(&[1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0])?;
//! let b = stream.alloc_from_host(&[7.0f32, 9.0, 11.0, 8.0, 10.0, 12.0])?;
//! let mut c = stream.alloc::<f32>(4)?;
//! let cfg = GemmConfig::packed(Operation::None, Operation::None, 2, 2, 3);
//! blas.gemm(&cfg, 1.0, &a.as_slice(), &b.as_slice(), 0.0, &mut c.as_mut_slice())?;
//! assert_eq!(c.to_host_vec()?, vec![58.0, 139.0, 64.0, 154.0]);
//! # Ok(())
//! # }
//! ```

mod backend;
pub mod config;
pub mod error;
mod handle;
pub mod precision;
pub mod sys;
pub mod tensile;

pub use config::{GemmConfig, GemmDtype, GemmElement, Operation};
pub use error::{Error, Result};
pub use handle::Handle;
pub use precision::{
    gemm_reduced_precision_bf16, gemm_reduced_precision_f16, gemm_reduced_precision_f32,
    set_gemm_reduced_precision_bf16, set_gemm_reduced_precision_f16,
    set_gemm_reduced_precision_f32, ALLOW_ATOMICS_ENV, FP16_ALT_IMPL_ENV,
};
pub use tensile::{GfxTarget, TensileLibrary};

/// The environment variable naming a directory searched for rocBLAS first.
pub const ROCBLAS_LIB_DIR_ENV: &str = backend::ROCBLAS_LIB_DIR_ENV;
/// The environment variable naming a directory searched for cuBLAS first (`nvidia` platform).
pub const CUBLAS_LIB_DIR_ENV: &str = backend::CUBLAS_LIB_DIR_ENV;
/// rocBLAS' file names, in the order they are tried.
pub const ROCBLAS_SONAMES: &[&str] = backend::amd::ROCBLAS_SONAMES;
/// cuBLAS' file names, in the order they are tried (`nvidia` platform).
pub const CUBLAS_SONAMES: &[&str] = backend::nvidia::CUBLAS_SONAMES;

/// The BLAS library's version string: rocBLAS' own (e.g. `4.4.1.<hash>`) on AMD,
/// `cuBLAS <major>.<minor>.<patch>` on NVIDIA. Opens the library (and hip-core's platform) if
/// needed; needs no GPU.
pub fn library_version() -> Result<String> {
    backend::backend()?.version()
}

/// Raw access for the benchmark's direct-call reference; not part of the API.
#[doc(hidden)]
pub mod __raw {
    pub use crate::backend::nvidia::{CublasApi, CUBLAS_FUNCTIONS};
    pub use crate::handle::RawLibrary;

    /// The `rocblas_status` name of a status code.
    pub fn rocblas_status_name(status: u32) -> String {
        crate::backend::amd::status_name(status)
    }

    /// Opens rocBLAS and calls `rocblas_create_handle` with no device check: the tier-2 test of
    /// what rocBLAS does on a machine without a GPU. A created handle is destroyed at once.
    pub fn probe_create_handle() -> crate::Result<()> {
        let lib = crate::backend::amd::load()?;
        // SAFETY: a null stream is HIP's default stream, valid for any current device; the
        // handle is destroyed right away and used for nothing else.
        let h = unsafe { lib.create(std::ptr::null_mut()) }?;
        // SAFETY: created above, destroyed once.
        unsafe { lib.destroy(h) }
    }

    /// Calls `rocblas_set_atomics_mode` and `rocblas_get_atomics_mode` through the table with a
    /// null handle, which rocBLAS answers with `rocblas_status_invalid_handle` without touching
    /// anything: the tier-2 proof that the calls are wired (no GPU needed for it).
    pub fn probe_atomics_mode_null_handle() -> (crate::Result<()>, crate::Result<bool>) {
        match crate::backend::amd::load() {
            Ok(lib) => {
                let h = crate::backend::RawHandle(std::ptr::null_mut());
                // SAFETY: rocBLAS checks the handle for null before using it and returns
                // rocblas_status_invalid_handle; nothing is read or written through it.
                unsafe { (lib.set_atomics(h, false), lib.atomics_allowed(h)) }
            }
            Err(e) => (Err(e.clone()), Err(e)),
        }
    }
}
