//! Pooling and upsampling over NCHW (NCL for 1-D) inputs of every kernel dtype: `avg_pool2d`,
//! `max_pool2d`, nearest upsampling (1-D, 2-D) and bilinear upsampling (2-D), into new
//! contiguous outputs.

use candle_core::backend::BackendStorage;
use candle_core::{Layout, Result};
use hip_core::{DeviceBuffer, DeviceSliceMut, Stream};
use rocm_kernels::elementwise::Strided;
use rocm_kernels::KernelDType;

use crate::buffers::view;
use crate::device::RocmDevice;
use crate::error::kernel_err;
use crate::ops::dispatch::map_dtype;
use crate::storage::RocmStorage;

/// Runs a one-input kernel into a new contiguous buffer of `out_len` elements.
fn map_out<T: KernelDType>(
    dev: &RocmDevice,
    op: &str,
    buf: &DeviceBuffer<T>,
    layout: &Layout,
    out_len: usize,
    launch: impl FnOnce(
        &Stream,
        &[usize],
        Strided<'_, T>,
        &mut DeviceSliceMut<'_, T>,
    ) -> rocm_kernels::Result<()>,
) -> Result<DeviceBuffer<T>> {
    let mut out = dev.alloc::<T>(op, out_len)?;
    let src = view(op, buf, layout)?;
    launch(dev.stream(), layout.dims(), src, &mut out.as_mut_slice()).map_err(kernel_err(op))?;
    Ok(out)
}

/// The element count of `dims[..lead]` times `rest` (0 when the rank is too small: the kernel
/// wrapper then reports the rank).
fn out_len(dims: &[usize], lead: usize, rest: &[usize]) -> usize {
    if dims.len() < lead {
        return 0;
    }
    dims[..lead].iter().product::<usize>() * rest.iter().product::<usize>()
}

/// Average pooling with kernel `k` and stride `st` (`(h, w)`).
pub(crate) fn avg_pool2d(
    x: &RocmStorage,
    layout: &Layout,
    k: (usize, usize),
    st: (usize, usize),
) -> Result<RocmStorage> {
    let op = "avg_pool2d";
    let dev = x.device();
    let dims =
        rocm_kernels::pool::pool2d_output_dims(layout.dims(), k, st).map_err(kernel_err(op))?;
    let n = dims.iter().product();
    let slice = map_dtype!(x.as_slice(), op, |b| map_out(
        dev,
        op,
        b,
        layout,
        n,
        |s, d, src, dst| rocm_kernels::pool::avg_pool2d(s, d, src, dst, k, st)
    ));
    Ok(x.wrap(slice))
}

/// Max pooling with kernel `k` and stride `st` (`(h, w)`).
pub(crate) fn max_pool2d(
    x: &RocmStorage,
    layout: &Layout,
    k: (usize, usize),
    st: (usize, usize),
) -> Result<RocmStorage> {
    let op = "max_pool2d";
    let dev = x.device();
    let dims =
        rocm_kernels::pool::pool2d_output_dims(layout.dims(), k, st).map_err(kernel_err(op))?;
    let n = dims.iter().product();
    let slice = map_dtype!(x.as_slice(), op, |b| map_out(
        dev,
        op,
        b,
        layout,
        n,
        |s, d, src, dst| rocm_kernels::pool::max_pool2d(s, d, src, dst, k, st)
    ));
    Ok(x.wrap(slice))
}

/// Nearest-neighbour upsampling of `(b, c, l)` to length `l_out`.
pub(crate) fn upsample_nearest1d(
    x: &RocmStorage,
    layout: &Layout,
    l_out: usize,
) -> Result<RocmStorage> {
    let op = "upsample_nearest1d";
    let dev = x.device();
    let n = out_len(layout.dims(), 2, &[l_out]);
    let slice = map_dtype!(x.as_slice(), op, |b| map_out(
        dev,
        op,
        b,
        layout,
        n,
        |s, d, src, dst| rocm_kernels::pool::upsample_nearest1d(s, d, src, dst, l_out)
    ));
    Ok(x.wrap(slice))
}

/// Nearest-neighbour upsampling of `(b, c, h, w)` to `(h_out, w_out)`.
pub(crate) fn upsample_nearest2d(
    x: &RocmStorage,
    layout: &Layout,
    h_out: usize,
    w_out: usize,
) -> Result<RocmStorage> {
    let op = "upsample_nearest2d";
    let dev = x.device();
    let n = out_len(layout.dims(), 2, &[h_out, w_out]);
    let slice = map_dtype!(x.as_slice(), op, |b| map_out(
        dev,
        op,
        b,
        layout,
        n,
        |s, d, src, dst| rocm_kernels::pool::upsample_nearest2d(s, d, src, dst, h_out, w_out)
    ));
    Ok(x.wrap(slice))
}

/// Bilinear upsampling of `(b, c, h, w)` to `(h_out, w_out)` (Candle's/PyTorch's conventions
/// for `align_corners` and the optional scales).
pub(crate) fn upsample_bilinear2d(
    x: &RocmStorage,
    layout: &Layout,
    h_out: usize,
    w_out: usize,
    align_corners: bool,
    scale_h: Option<f64>,
    scale_w: Option<f64>,
) -> Result<RocmStorage> {
    let op = "upsample_bilinear2d";
    let dev = x.device();
    let n = out_len(layout.dims(), 2, &[h_out, w_out]);
    let slice = map_dtype!(x.as_slice(), op, |b| map_out(
        dev,
        op,
        b,
        layout,
        n,
        |s, d, src, dst| rocm_kernels::pool::upsample_bilinear2d(
            s,
            d,
            src,
            dst,
            h_out,
            w_out,
            align_corners,
            scale_h,
            scale_w
        )
    ));
    Ok(x.wrap(slice))
}
