//! # rocm-kernels: candle-rocm's HIP kernels
//!
//! * `kernels/*.hip`: portable HIP sources, one module per op family, written once for AMD
//!   (wavefront 32 or 64) and NVIDIA (through hip-core's NVRTC shim); `kernels/prelude.h` holds
//!   the shared dtype definitions and helpers and is prepended to every module.
//! * [`dtype`]: the element types kernels are instantiated for.
//! * [`layout`]: `SlicePtrOrNull` layout info (dims + per-operand strides, or null when every
//!   operand is contiguous).
//! * [`modules`]: loading a module onto a device: on AMD the matching code object from the
//!   committed multi-arch bundle (`bundles/*.hipfb.gz`, built by `cargo xtask build-kernels`,
//!   embedded with the default `aot` feature) when it is fresh for the source; otherwise (NVIDIA,
//!   an uncovered architecture, a stale bundle, `ROCM_KERNELS_JIT=1`) run-time compilation
//!   through hip-core's disk cache, of the kernel's one-dtype [`jit_variant`] of the module.
//! * [`bundle`]: our own parser of clang offload bundles and the target-ID matching rule.
//! * [`elementwise`]: typed launch wrappers for the element-wise families (unary, affine,
//!   binary/cmp, cast, where, fill/copy).
//! * [`f8`]: f8e4m3 arithmetic on byte buffers (unary ops, affine, powf, elu, binary ops,
//!   comparisons, ordered scatter_add/index_add), bit for bit as Candle's CPU backend.
//!
//! * [`reduce`], [`nn`] (softmax, rms_norm, layer_norm, rope), [`indexing`], [`sort`],
//!   [`pool`] (pooling and upsampling), [`random`] (Philox), [`conv`] (im2col/col2im for the
//!   GEMM-based convolution path), [`quantized`] (GGML blocks: dequantize, embedding rows,
//!   matrix-vector and mixture-of-experts products), [`gemv`] (float-weight matrix-vector
//!   products for decode steps), [`attention`] (fused attention: prefill,
//!   split-key decode, variable-length batches): the other families.

pub mod attention;
pub mod bundle;
pub mod conv;
pub mod dtype;
pub mod elementwise;
pub mod error;
pub mod f8;
pub mod gemv;
pub mod indexing;
pub mod jit_variant;
pub mod layout;
pub mod modules;
pub mod nn;
pub mod pool;
pub mod quantized;
pub mod random;
pub mod reduce;
pub mod sort;

pub use dtype::KernelDType;
pub use error::{Error, Result};
