//! # candle-rocm: a Candle backend for AMD GPUs over HIP
//!
//! [`RocmDevice`] and [`RocmStorage`] implement candle-core 0.11.1's
//! [`BackendDevice`](candle_core::backend::BackendDevice) and
//! [`BackendStorage`](candle_core::backend::BackendStorage) over the workspace's own safe HIP
//! layer (hip-core: devices, streams, a caching allocator, typed buffers) and HIP kernels
//! (rocm-kernels). The same code runs on NVIDIA GPUs through hip-core's `nvidia` platform, which
//! is how it is tested.
//!
//! ## Status
//! * Implemented on the GPU: host transfers, zeros, copies (`copy_strided_src`, `copy2d`,
//!   `try_clone`), `const_set`, `affine`, `powf`, `elu`, every Candle unary op, the binary ops
//!   (add, sub, mul, div, minimum, maximum, with broadcasting through strides), comparisons,
//!   `to_dtype` between u8/u32/i16/i32/i64/bf16/f16/f32/f64, and `where_cond`, for any layout
//!   (transposed, narrowed with an offset, broadcast with stride 0, empty, rank 0).
//! * `f8e4m3` is stored as bytes and supports host transfers, copies, `const_set`,
//!   `where_cond`, `to_dtype` to and from every dtype, the indexing ops, and element-wise
//!   arithmetic computed bit for bit as candle's CPU backend (x86_64) computes it with the
//!   `float8` crate: every unary op, `affine`, `powf`, `elu`, the binary ops, comparisons,
//!   and `scatter_add_set`/`index_add` (terms added in candle's order; an out-of-range index
//!   is reported by the op itself). Reductions, matmul, convolutions, pooling, upsampling,
//!   random numbers, sorting and the fused ops return a typed error for f8e4m3. The 4/6-bit
//!   formats and `f8e8m0` have no device storage.
//! * Also on the GPU: reductions (sum, min, max over any dims; argmin, argmax over exactly one
//!   dim, other counts refused with `Error::OnlySingleDimension` as by candle's CPU backend),
//!   indexing (`index_select`, `gather`, `scatter_set`, `scatter_add_set`, `index_add`, ids
//!   u8/u32/i16/i32/i64; an out-of-range index is reported as a typed error by the next
//!   `to_cpu_storage` or `synchronize`, see [`RocmDevice`]), pooling (`avg_pool2d`,
//!   `max_pool2d`), upsampling (nearest 1-D/2-D, bilinear 2-D), random numbers
//!   (`rand_uniform`, `rand_normal`, float dtypes, seeded), and the fused ops and
//!   `arg_sort_last_dim` on [`RocmStorage`] (softmax, rms_norm, layer_norm, rope).
//! * `matmul` (f32, f64, f16, bf16) on rocBLAS (cuBLAS on NVIDIA): one strided-batched GEMM
//!   for every layout candle's CUDA backend accepts and more (see the `matmul` module docs);
//!   `conv1d`, `conv2d`, `conv_transpose1d`, `conv_transpose2d` on MIOpen (cuDNN on NVIDIA) or
//!   our im2col/col2im kernels + GEMM, selectable with [`ConvPath`] (see [`conv`]).
//! * Quantized GGML tensors of every `GgmlDType`: [`QRocmStorage`] (see [`quantized`]), behind
//!   Candle's `QTensor`/`QMatMul` with feature `tensor`.
//! * Fused attention ([`attention`]): flash-style prefill, split-key decode and variable-length
//!   batches; with feature `tensor`, candle-flash-attn's API (`flash_attn` module) and
//!   candle-nn's `ops::sdpa`.
//! * Not implemented yet, each returning a typed [`RocmError`] that names the op and dtype:
//!   f8e4m3 reductions, matmul, convolutions, pooling, upsampling, random numbers, sorting and
//!   fused ops.
//!
//! Nothing here panics on bad input: a layout that would read outside its buffer, a dtype or
//! device mismatch, or a runtime failure is an error.
//!
//! ## Tensor level: `Device::new_rocm(0)` (feature `tensor`)
//! candle-core 0.11.1's `Device`, `Storage` and `DeviceLocation` enums are closed: a `Tensor`
//! cannot hold a `RocmStorage` without a small, generic Candle patch (an out-of-tree device
//! hook, `Device::Ext`), which `cargo xtask patch-candle` applies to the registry sources and
//! a project uses through `[patch.crates-io]` (docs/tensor-integration.md). With it and the
//! `tensor` feature, `RocmDeviceExt` gives `Device::new_rocm(ordinal)`, every tensor op runs
//! here, and the device reports `DeviceLocation::Ext { backend: "rocm", gpu_id }`. Without the
//! feature the backend is used at the storage level, as below, and reports
//! `DeviceLocation::Cuda { gpu_id }` (see [`RocmDevice`]'s `location`).
//!
//! ## Example (storage level)
//! ```no_run
//! use candle_core::backend::{BackendDevice, BackendStorage};
//! use candle_core::{op, CpuStorage, Layout};
//! use candle_rocm::RocmDevice;
//!
//! # fn main() -> candle_core::Result<()> {
//! let device = RocmDevice::new(0)?;
//! let x = device.storage_from_slice(&[1f32, -2.0, 3.0, -4.0, 5.0, -6.0])?;
//! let layout = Layout::contiguous((2, 3));
//!
//! // relu(x) * 2 + 1, then read the (2, 3) result back.
//! let y = x.unary_impl::<op::Relu>(&layout)?;
//! let y = y.affine(&layout, 2.0, 1.0)?;
//! // The transposed view (3, 2) is handled through strides, without a copy of x.
//! let yt = y.to_dtype(&layout.transpose(0, 1)?, candle_core::DType::F16)?;
//! match y.to_cpu_storage()? {
//!     CpuStorage::F32(v) => assert_eq!(v, [3.0, 1.0, 7.0, 1.0, 11.0, 1.0]),
//!     _ => unreachable!(),
//! }
//! # let _ = yt;
//! // (2, 3) x (3, 2) through rocBLAS, the rhs a transposed view of y.
//! let p = y.matmul(&y, (1, 2, 2, 3), &layout, &layout.transpose(0, 1)?)?;
//! // Ops without a ROCm implementation fail with a typed error naming op and dtype.
//! let err = p.to_dtype(&Layout::contiguous((2, 2)), candle_core::DType::I16)?
//!     .matmul(&p, (1, 2, 2, 2), &Layout::contiguous((2, 2)), &Layout::contiguous((2, 2)))
//!     .unwrap_err();
//! assert!(candle_rocm::RocmError::from_candle(&err).is_some());
//! # Ok(())
//! # }
//! ```

pub mod attention;
mod blas;
mod buffers;
pub mod collective;
pub mod conv;
pub mod device;
pub mod error;
mod fused;
pub mod layout;
mod matmul;
mod ops;
pub mod quantized;
mod rope_kv;
pub mod storage;
#[cfg(feature = "tensor")]
pub mod tensor;

#[cfg(feature = "tensor")]
pub mod flash_attn;

pub use conv::{Conv2dSpec, ConvPath};
pub use device::RocmDevice;
pub use error::RocmError;
/// candle-flash-attn's functions at the crate root too (`candle_rocm::flash_attn(q, k, v,
/// softmax_scale, causal)`), so that a model switches by changing one import.
#[cfg(feature = "tensor")]
pub use flash_attn::{
    flash_attn, flash_attn_varlen, flash_attn_varlen_windowed, flash_attn_windowed,
    flash_attn_windowed_softcap,
};
pub use quantized::{QRocmStorage, QuantizedGemmPlan, QuantizedMatvec};
pub use rope_kv::RopeKvInputs;
pub use storage::{RocmStorage, RocmStorageSlice};
#[cfg(feature = "tensor")]
pub use tensor::RocmDeviceExt;
