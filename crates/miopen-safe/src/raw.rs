//! The raw function tables, for calling the libraries directly (interoperability, and the
//! benchmarks' reference measurements). Everything here is `unsafe` to call; prefer [`Handle`](crate::Handle).
//!
//! * [`miopen`]: the MIOpen table ([`crate::sys::miopen::MIOpen`], bindgen's dynamic-loading
//!   form), opened from `$ROCM_PATH/lib`, `/opt/rocm/lib` or the loader path;
//! * [`cudnn`]: the cuDNN table ([`Cudnn`]) of the `nvidia` adapter, opened from
//!   `$CUDNN_PATH`, the CUDA toolkit directories or the loader path.
//!
//! Both are opened once per process; a failure is remembered and returned again.

pub use crate::backend::amd::SONAMES as MIOPEN_SONAMES;
pub use crate::backend::nvidia::{AlgoPerf, Cudnn, CUDNN_FUNCTIONS, SONAMES as CUDNN_SONAMES};

/// The MIOpen function table.
pub fn miopen() -> crate::Result<&'static crate::sys::miopen::MIOpen> {
    crate::backend::amd::api()
}

/// The cuDNN function table of the `nvidia` adapter.
pub fn cudnn() -> crate::Result<&'static Cudnn> {
    crate::backend::nvidia::api()
}
