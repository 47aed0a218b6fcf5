//! Low-level buffer helpers shared by the op families (`crate::ops`, [`crate::conv`]): the
//! checked strided views of a device buffer a kernel wrapper takes, and "run this kernel into a
//! new contiguous buffer" helpers. Nothing here knows about [`crate::RocmStorage`]: these work on
//! typed [`DeviceBuffer`]s and candle [`Layout`]s only.

use candle_core::{Layout, Result};
use hip_core::{DeviceBuffer, DeviceSliceMut, Stream};
use rocm_kernels::elementwise::{self as ew, Strided};
use rocm_kernels::KernelDType;

use crate::device::RocmDevice;
use crate::error::{hip_err, kernel_err};
use crate::layout::layout_range;

/// The strided view of `buf` described by `layout`: starts at the layout's start offset and
/// ends after the last element it can reach (checked against the buffer). A view without
/// elements is an empty slice (whatever its start offset), still handed to the kernel wrapper
/// so that a dtype it does not support is refused even for empty tensors.
pub(crate) fn view<'a, T: KernelDType>(
    op: &str,
    buf: &'a DeviceBuffer<T>,
    layout: &'a Layout,
) -> Result<Strided<'a, T>> {
    let range = layout_range(op, layout, buf.len())?.unwrap_or(0..0);
    Ok(Strided {
        data: buf.slice(range).map_err(hip_err(op))?,
        strides: layout.stride(),
    })
}

/// The strided, mutable view of `buf` described by `layout` (for in-place kernels).
pub(crate) fn view_mut<'a, T: KernelDType>(
    op: &str,
    buf: &'a mut DeviceBuffer<T>,
    layout: &Layout,
) -> Result<DeviceSliceMut<'a, T>> {
    let range = layout_range(op, layout, buf.len())?.unwrap_or(0..0);
    buf.slice_mut(range).map_err(hip_err(op))
}

/// Runs a one-input kernel into a new contiguous buffer of `layout`'s element count.
pub(crate) fn map1<T: KernelDType, O: KernelDType>(
    dev: &RocmDevice,
    op: &str,
    buf: &DeviceBuffer<T>,
    layout: &Layout,
    launch: impl FnOnce(
        &Stream,
        &[usize],
        Strided<'_, T>,
        &mut DeviceSliceMut<'_, O>,
    ) -> rocm_kernels::Result<()>,
) -> Result<DeviceBuffer<O>> {
    let mut out = dev.alloc::<O>(op, layout.shape().elem_count())?;
    let src = view(op, buf, layout)?;
    launch(dev.stream(), layout.dims(), src, &mut out.as_mut_slice()).map_err(kernel_err(op))?;
    Ok(out)
}

/// Runs a two-input kernel (same dims) into a new contiguous buffer.
pub(crate) fn map2<T: KernelDType, O: KernelDType>(
    dev: &RocmDevice,
    op: &str,
    (lhs, lhs_l): (&DeviceBuffer<T>, &Layout),
    (rhs, rhs_l): (&DeviceBuffer<T>, &Layout),
    launch: impl FnOnce(
        &Stream,
        &[usize],
        Strided<'_, T>,
        Strided<'_, T>,
        &mut DeviceSliceMut<'_, O>,
    ) -> rocm_kernels::Result<()>,
) -> Result<DeviceBuffer<O>> {
    let mut out = dev.alloc::<O>(op, lhs_l.shape().elem_count())?;
    let (l, r) = (view(op, lhs, lhs_l)?, view(op, rhs, rhs_l)?);
    launch(dev.stream(), lhs_l.dims(), l, r, &mut out.as_mut_slice()).map_err(kernel_err(op))?;
    Ok(out)
}

/// Copies the strided view of `buf` into a new contiguous buffer.
pub(crate) fn copy_view<T: KernelDType>(
    dev: &RocmDevice,
    op: &str,
    buf: &DeviceBuffer<T>,
    layout: &Layout,
) -> Result<DeviceBuffer<T>> {
    map1::<T, T>(dev, op, buf, layout, |s, d, src, dst| {
        ew::copy_strided(s, d, src, dst)
    })
}
