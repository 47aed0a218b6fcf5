//! # rocm-kernels: candle-rocm's HIP kernels
//!
//! * `kernels/*.hip`: portable HIP sources, one module per op family, written once for AMD
//!   (wavefront 32 or 64) and NVIDIA (through hip-core's NVRTC shim); `kernels/prelude.h` holds
//!   the shared dtype definitions and helpers and is prepended to every module.
//! * [`dtype`]: the element types kernels are instantiated for.
//! * [`layout`]: `SlicePtrOrNull` layout info (dims + per-operand strides, or null when every
//!   operand is contiguous).
//! * [`elementwise`]: typed launch wrappers for the element-wise families.
//!
//! Work in progress (the kernels/backend issue): the module loader (AOT bundle or JIT), the
//! bundle parser and `cargo xtask build-kernels` are being added.

pub mod bundle;
pub mod dtype;
pub mod elementwise;
pub mod error;
pub mod indexing;
pub mod layout;
pub mod modules;
pub mod nn;
pub mod pool;
pub mod random;
pub mod reduce;
pub mod sort;

pub use dtype::KernelDType;
pub use error::{Error, Result};
