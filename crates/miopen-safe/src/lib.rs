//! # miopen-safe: safe MIOpen convolutions and pooling over hip-core
//!
//! A small, safe layer over the parts of MIOpen a Candle backend needs:
//!
//! * [`Handle`]: a `miopenHandle_t` bound to a hip-core [`Stream`](hip_core::Stream) (RAII,
//!   `Send + Sync`);
//! * convolution forward ([`Handle::conv_forward`]) and backward-data
//!   ([`Handle::conv_backward_data`], which is how a transposed convolution is computed), over 1
//!   to 3 spatial dims with padding, stride, dilation and groups, on f32, f16 and bf16;
//! * pooling forward ([`Handle::pooling_forward`]): max, average (padding excluded or included),
//!   on f32 and f16;
//! * on first use of a problem, one algorithm search (MIOpen's immediate mode by default, or
//!   its find step; cuDNN's find step), with the chosen algorithm cached in the handle per
//!   problem and direction ([`Handle::algorithm_stats`] counts the searches), and workspaces
//!   from hip-core's caching allocator;
//! * the output-size formulas in Rust ([`conv_forward_output_dims`],
//!   [`pool_forward_output_dims`]) and the library's own answer
//!   ([`library_conv_forward_output_dims`]), which needs no GPU.
//!
//! Every call is validated before the library is touched (ranks, channels and groups, the
//! output shape, strides, slice lengths, devices, data types); bad input is an
//! [`Error::InvalidArgument`], an unavailable data type an [`Error::Unsupported`] naming the
//! operation and type, a library failure an [`Error::Api`] with the library's status name.
//!
//! ## Two platforms
//! MIOpen is opened at run time (`libMIOpen.so.1|.so` from `$ROCM_PATH/lib`, `/opt/rocm/lib`,
//! the loader path) through our own bindgen table ([`sys::miopen`]); building needs neither
//! ROCm nor libclang. On hip-core's `nvidia` platform the same calls go to cuDNN 9 through a thin
//! adapter (`libcudnn.so.9`, searched in `$CUDNN_PATH` and the CUDA toolkit directories), so the
//! layer above is exercised on NVIDIA GPUs too. The adapter refuses what MIOpen cannot do, so
//! both platforms accept the same calls.
//!
//! ## Example
//! ```no_run
//! use miopen_safe::{ConvParams, Handle, TensorShape};
//!
//! # fn main() -> miopen_safe::Result<()> {
//! let device = hip_core::Device::new(0)?;
//! let stream = device.default_stream();
//! let handle = Handle::new(&stream)?;
//! let x = TensorShape::contiguous([1, 3, 8, 8]);
//! let w = TensorShape::contiguous([4, 3, 3, 3]);
//! let mut params = ConvParams::new(2);
//! params.padding = vec![1, 1];
//! let y = TensorShape::contiguous(miopen_safe::conv_forward_output_dims(&x.dims, &w.dims, &params)?);
//! let xd = stream.alloc_from_host(&vec![1.0f32; x.elem_count()])?;
//! let wd = stream.alloc_from_host(&vec![0.5f32; w.elem_count()])?;
//! let mut yd = stream.alloc::<f32>(y.elem_count())?;
//! handle.conv_forward(&x, &xd.as_slice(), &w, &wd.as_slice(), &params, &y, &mut yd.as_mut_slice())?;
//! let out = yd.to_host_vec()?;
//! assert_eq!(out[9], 13.5); // an interior output: 27 taps of 1 * 0.5
//! # Ok(())
//! # }
//! ```

mod backend;
pub mod error;
mod handle;
pub mod raw;
mod shape;
pub mod sys;
mod types;

pub use error::{Error, Result};
pub use handle::{workspace_limit, AlgorithmSearch, AlgorithmStats, ConvAlgorithm, Handle};
pub use shape::{
    contiguous_strides, conv_forward_output_dims, pool_forward_output_dims, ConvParams, TensorShape,
};
pub use types::{ConvElement, DataType, PoolMode};

/// The library's name and version: `MIOpen 3.4.0` on `amd`, `cuDNN 9.x.y` on `nvidia`. Needs
/// the library but no GPU.
pub fn library_version() -> Result<String> {
    backend::library_version(hip_core::platform()?)
}

/// The output shape of a convolution as the library computes it
/// (`miopenGetConvolutionNdForwardOutputDim`, `cudnnGetConvolutionNdForwardOutputDim` on
/// `nvidia`): a host-only call that needs the library but no GPU. The arguments are validated as
/// for [`conv_forward_output_dims`] first, whose answer this should equal.
pub fn library_conv_forward_output_dims(
    input: &[usize],
    weight: &[usize],
    params: &ConvParams,
) -> Result<Vec<usize>> {
    const OP: &str = "library_conv_forward_output_dims";
    let ours = shape::conv_output_dims(OP, "input", input, weight, params)?;
    let plan = shape::conv_plan(
        OP,
        DataType::F32,
        ("input", &TensorShape::contiguous(input)),
        &TensorShape::contiguous(weight),
        params,
        ("output", &TensorShape::contiguous(ours)),
    )?;
    let dims = backend::conv_output_dims(hip_core::platform()?, &plan.problem)?;
    from_library_dims(OP, dims, input.len())
}

/// The output shape of a pooling as the library computes it
/// (`miopenGetPoolingNdForwardOutputDim`, `cudnnGetPoolingNdForwardOutputDim` on `nvidia`):
/// host only, no GPU needed. Validated as for [`pool_forward_output_dims`] first.
pub fn library_pool_forward_output_dims(
    input: &[usize],
    window: &[usize],
    padding: &[usize],
    stride: &[usize],
) -> Result<Vec<usize>> {
    const OP: &str = "library_pool_forward_output_dims";
    let ours = shape::pool_output_dims(OP, input, window, padding, stride)?;
    let plan = shape::pool_plan(
        OP,
        DataType::F32,
        PoolMode::Max,
        window,
        padding,
        stride,
        &TensorShape::contiguous(input),
        &TensorShape::contiguous(ours),
    )?;
    let dims = backend::pool_output_dims(hip_core::platform()?, &plan.problem)?;
    from_library_dims(OP, dims, input.len())
}

/// Library dims back to the caller's rank (a 1-d problem ran with a unit height).
fn from_library_dims(op: &'static str, dims: Vec<i32>, rank: usize) -> Result<Vec<usize>> {
    let mut out = dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<Vec<usize>, _>>()
        .map_err(|_| Error::invalid(op, format!("the library returned negative dims {dims:?}")))?;
    if rank == 3 && out.len() == 4 && out[2] == 1 {
        out.remove(2);
    }
    if out.len() != rank {
        return Err(Error::invalid(
            op,
            format!("the library returned {dims:?} for a rank-{rank} problem"),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_dims_drop_the_unit_height_of_1d_problems() {
        assert_eq!(
            from_library_dims("t", vec![2, 5, 1, 9], 3).unwrap(),
            vec![2, 5, 9]
        );
        assert_eq!(
            from_library_dims("t", vec![2, 5, 3, 9], 4).unwrap(),
            vec![2, 5, 3, 9]
        );
        assert!(from_library_dims("t", vec![2, -5, 3, 9], 4).is_err());
        assert!(from_library_dims("t", vec![2, 5, 3], 4).is_err());
    }
}
