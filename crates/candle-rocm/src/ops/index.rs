//! Indexing ops: `index_select`, `gather`, `scatter_set`, `scatter_add_set` and `index_add`,
//! ids of dtype u8/u32/i16/i32/i64. Values of every kernel dtype; f8e4m3 values move as their
//! bytes, and are accumulated in Candle's order by `rocm_kernels::f8`. An out-of-range index is
//! recorded in the device's index-error flag (see [`RocmDevice`]), except for f8e4m3
//! accumulation, which reports it at once.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{Error, Layout, Result};
use hip_core::DeviceBuffer;
use rocm_kernels::f8;
use rocm_kernels::KernelDType;

use crate::buffers::{view, view_mut};
use crate::device::RocmDevice;
use crate::error::{hip_err, kernel_err, RocmError};
use crate::ops::copy::copy_strided_src;
use crate::ops::dispatch::{f8_error, map_dtype};
use crate::storage::{RocmStorage, RocmStorageSlice};

/// Destination (mutable) and source of the same kernel dtype, for in-place ops.
macro_rules! with_dst_src {
    ($dst:expr, $src:expr, $op:expr, |$a:ident, $b:ident| $body:expr) => {
        match ($dst, $src) {
            (RocmStorageSlice::U8($a), RocmStorageSlice::U8($b)) => $body,
            (RocmStorageSlice::U32($a), RocmStorageSlice::U32($b)) => $body,
            (RocmStorageSlice::I16($a), RocmStorageSlice::I16($b)) => $body,
            (RocmStorageSlice::I32($a), RocmStorageSlice::I32($b)) => $body,
            (RocmStorageSlice::I64($a), RocmStorageSlice::I64($b)) => $body,
            (RocmStorageSlice::BF16($a), RocmStorageSlice::BF16($b)) => $body,
            (RocmStorageSlice::F16($a), RocmStorageSlice::F16($b)) => $body,
            (RocmStorageSlice::F32($a), RocmStorageSlice::F32($b)) => $body,
            (RocmStorageSlice::F64($a), RocmStorageSlice::F64($b)) => $body,
            (RocmStorageSlice::F8E4M3(_), RocmStorageSlice::F8E4M3(_)) => return Err(f8_error($op)),
            (l, r) => {
                return Err(Error::DTypeMismatchBinaryOp {
                    lhs: l.dtype(),
                    rhs: r.dtype(),
                    op: $op,
                }
                .bt())
            }
        }
    };
}

/// Binds the typed ids buffer (u8, u32, i16, i32, i64); other dtypes (f8e4m3 included) are
/// refused as `Unsupported`.
macro_rules! with_ids {
    ($ids:expr, $op:expr, |$i:ident| $body:expr) => {
        match $ids {
            RocmStorageSlice::U8($i) => $body,
            RocmStorageSlice::U32($i) => $body,
            RocmStorageSlice::I16($i) => $body,
            RocmStorageSlice::I32($i) => $body,
            RocmStorageSlice::I64($i) => $body,
            other => {
                return Err(RocmError::unsupported(
                    $op,
                    other.dtype(),
                    "indices must have an integer dtype (u8, u32, i16, i32, i64)",
                )
                .into())
            }
        }
    };
}

/// `index_select`/`gather` of `src` by `ids` into a new contiguous buffer of `out_elems`.
#[allow(clippy::too_many_arguments)]
fn gather_like<I: KernelDType, T: KernelDType>(
    dev: &RocmDevice,
    op: &str,
    select: bool,
    (src, src_l): (&DeviceBuffer<T>, &Layout),
    (ids, ids_l): (&DeviceBuffer<I>, &Layout),
    dim: usize,
    out_elems: usize,
) -> Result<DeviceBuffer<T>> {
    let flag = dev.index_flag()?;
    let mut out = dev.alloc::<T>(op, out_elems)?;
    let s = view(op, src, src_l)?;
    let i = view(op, ids, ids_l)?;
    let mut d = out.as_mut_slice();
    let stream = dev.stream();
    let r = if select {
        rocm_kernels::indexing::index_select(
            stream,
            s,
            src_l.dims(),
            i,
            ids_l.dims(),
            dim,
            &mut d,
            flag,
        )
    } else {
        rocm_kernels::indexing::gather(stream, s, src_l.dims(), i, ids_l.dims(), dim, &mut d, flag)
    };
    r.map_err(kernel_err(op))?;
    Ok(out)
}

/// Which in-place accumulation [`scatter_like_buf`] runs.
#[derive(Clone, Copy)]
enum ScatterKind {
    Set,
    Add,
    IndexAdd,
}

/// `scatter_set`/`scatter_add_set`/index_add's accumulation into `dst` (in place).
#[allow(clippy::too_many_arguments)]
fn scatter_like_buf<I: KernelDType, T: KernelDType>(
    dev: &RocmDevice,
    op: &str,
    kind: ScatterKind,
    (dst, dst_l): (&mut DeviceBuffer<T>, &Layout),
    (ids, ids_l): (&DeviceBuffer<I>, &Layout),
    (src, src_l): (&DeviceBuffer<T>, &Layout),
    dim: usize,
) -> Result<()> {
    use rocm_kernels::indexing as ix;
    let flag = dev.index_flag()?;
    let i = view(op, ids, ids_l)?;
    let s = view(op, src, src_l)?;
    let mut d = view_mut(op, dst, dst_l)?;
    let stream = dev.stream();
    let (dd, ds) = (dst_l.dims(), dst_l.stride());
    let (idd, sd) = (ids_l.dims(), src_l.dims());
    match kind {
        ScatterKind::Set => ix::scatter(stream, &mut d, dd, ds, i, idd, s, sd, dim, flag),
        ScatterKind::Add => ix::scatter_add(stream, &mut d, dd, ds, i, idd, s, sd, dim, flag),
        ScatterKind::IndexAdd => ix::index_add(stream, &mut d, dd, ds, i, idd, s, sd, dim, flag),
    }
    .map_err(kernel_err(op))
}

/// scatter_add_set (`index_add == false`) or index_add's accumulation for f8e4m3, in place and
/// in Candle's order (see `rocm_kernels::f8`). An out-of-range index is reported at once, as by
/// candle's CPU backend: the kernel records it in a small device record which is read back
/// here (one synchronization of the stream per call), and it becomes
/// [`candle_core::Error::InvalidIndex`] (a [`RocmError`] for a negative index).
#[allow(clippy::too_many_arguments)]
fn f8_accumulate<I: KernelDType>(
    dev: &RocmDevice,
    op: &str,
    index_add: bool,
    (dst, dst_l): (&mut DeviceBuffer<u8>, &Layout),
    (ids, ids_l): (&DeviceBuffer<I>, &Layout),
    (src, src_l): (&DeviceBuffer<u8>, &Layout),
    dim: usize,
) -> Result<()> {
    let stream = dev.stream();
    let mut err = stream
        .alloc_zeroed::<u32>(f8::ERR_WORDS)
        .map_err(hip_err(op))?;
    let i = view(op, ids, ids_l)?;
    let s = view(op, src, src_l)?;
    let mut d = view_mut(op, dst, dst_l)?;
    let (dd, ds) = (dst_l.dims(), dst_l.stride());
    let (idd, sd) = (ids_l.dims(), src_l.dims());
    let mut e = err.as_mut_slice();
    if index_add {
        f8::index_add(stream, &mut d, dd, ds, i, idd, s, sd, dim, &mut e)
    } else {
        f8::scatter_add(stream, &mut d, dd, ds, i, idd, s, sd, dim, &mut e)
    }
    .map_err(kernel_err(op))?;
    let words = err.to_host_vec().map_err(hip_err(op))?;
    let Some(e) = rocm_kernels::indexing::IndexError::decode(&words) else {
        return Ok(());
    };
    Err(crate::error::index_error(e))
}

/// `gather` of `x` (through `l`) by `ids` along `dim`: the output has the ids' shape.
pub(crate) fn gather(
    x: &RocmStorage,
    l: &Layout,
    ids: &RocmStorage,
    ids_l: &Layout,
    dim: usize,
) -> Result<RocmStorage> {
    let op = "gather";
    x.check_device(ids, op)?;
    let dev = x.device();
    let n = ids_l.shape().elem_count();
    // f8e4m3 values move as their bytes.
    if let RocmStorageSlice::F8E4M3(b) = x.as_slice() {
        let out = with_ids!(ids.as_slice(), op, |i| {
            gather_like(dev, op, false, (b, l), (i, ids_l), dim, n)
        })?;
        return Ok(x.wrap(RocmStorageSlice::F8E4M3(out)));
    }
    let slice = map_dtype!(x.as_slice(), op, |b| with_ids!(ids.as_slice(), op, |i| {
        gather_like(dev, op, false, (b, l), (i, ids_l), dim, n)
    }));
    Ok(x.wrap(slice))
}

/// `index_select` of `x` (through `l`) by the rank-1 `ids` along `dim`.
pub(crate) fn index_select(
    x: &RocmStorage,
    ids: &RocmStorage,
    l: &Layout,
    ids_l: &Layout,
    dim: usize,
) -> Result<RocmStorage> {
    let op = "index_select";
    x.check_device(ids, op)?;
    let dev = x.device();
    let mut out_dims = l.dims().to_vec();
    if let (Some(d), Some(&n_ids)) = (out_dims.get_mut(dim), ids_l.dims().first()) {
        *d = n_ids;
    }
    let n = out_dims.iter().product();
    // f8e4m3 values move as their bytes.
    if let RocmStorageSlice::F8E4M3(b) = x.as_slice() {
        let out = with_ids!(ids.as_slice(), op, |i| {
            gather_like(dev, op, true, (b, l), (i, ids_l), dim, n)
        })?;
        return Ok(x.wrap(RocmStorageSlice::F8E4M3(out)));
    }
    let slice = map_dtype!(x.as_slice(), op, |b| with_ids!(ids.as_slice(), op, |i| {
        gather_like(dev, op, true, (b, l), (i, ids_l), dim, n)
    }));
    Ok(x.wrap(slice))
}

/// `scatter_set`: `dst` (through `l`, in place) takes `src`'s values at `ids` along `dim`.
pub(crate) fn scatter_set(
    dst: &mut RocmStorage,
    l: &Layout,
    ids: &RocmStorage,
    ids_l: &Layout,
    src: &RocmStorage,
    src_l: &Layout,
    dim: usize,
) -> Result<()> {
    let op = "scatter_set";
    dst.check_device(ids, op)?;
    dst.check_operand(src, op)?;
    let dev = dst.device().clone();
    // f8e4m3 values move as their bytes.
    if let (RocmStorageSlice::F8E4M3(d), RocmStorageSlice::F8E4M3(s)) =
        (dst.as_slice_mut(), src.as_slice())
    {
        return with_ids!(ids.as_slice(), op, |i| scatter_like_buf(
            &dev,
            op,
            ScatterKind::Set,
            (d, l),
            (i, ids_l),
            (s, src_l),
            dim
        ));
    }
    with_dst_src!(dst.as_slice_mut(), src.as_slice(), op, |d, s| with_ids!(
        ids.as_slice(),
        op,
        |i| scatter_like_buf(
            &dev,
            op,
            ScatterKind::Set,
            (d, l),
            (i, ids_l),
            (s, src_l),
            dim
        )
    ))
}

/// `scatter_add_set`: `src`'s values accumulated into `dst` (through `l`, in place) at `ids`
/// along `dim`.
pub(crate) fn scatter_add_set(
    dst: &mut RocmStorage,
    l: &Layout,
    ids: &RocmStorage,
    ids_l: &Layout,
    src: &RocmStorage,
    src_l: &Layout,
    dim: usize,
) -> Result<()> {
    let op = "scatter_add_set";
    dst.check_device(ids, op)?;
    dst.check_operand(src, op)?;
    let dev = dst.device().clone();
    if let (RocmStorageSlice::F8E4M3(d), RocmStorageSlice::F8E4M3(s)) =
        (dst.as_slice_mut(), src.as_slice())
    {
        return with_ids!(ids.as_slice(), op, |i| f8_accumulate(
            &dev,
            op,
            false,
            (d, l),
            (i, ids_l),
            (s, src_l),
            dim
        ));
    }
    with_dst_src!(dst.as_slice_mut(), src.as_slice(), op, |d, s| with_ids!(
        ids.as_slice(),
        op,
        |i| scatter_like_buf(
            &dev,
            op,
            ScatterKind::Add,
            (d, l),
            (i, ids_l),
            (s, src_l),
            dim
        )
    ))
}

/// A new contiguous copy of `x` (through `l`) with `src` accumulated at `ids` along `dim`.
pub(crate) fn index_add(
    x: &RocmStorage,
    l: &Layout,
    ids: &RocmStorage,
    ids_l: &Layout,
    src: &RocmStorage,
    src_l: &Layout,
    dim: usize,
) -> Result<RocmStorage> {
    let op = "index_add";
    x.check_device(ids, op)?;
    x.check_operand(src, op)?;
    // SAFETY: every element of `out` is written by the copy below before anything reads it.
    let mut out = unsafe { x.device().alloc_uninit(l.shape(), x.dtype())? };
    copy_strided_src(x, &mut out, 0, l)?;
    let out_l = Layout::contiguous(l.shape());
    let dev = x.device().clone();
    if let (RocmStorageSlice::F8E4M3(d), RocmStorageSlice::F8E4M3(s)) =
        (out.as_slice_mut(), src.as_slice())
    {
        with_ids!(ids.as_slice(), op, |i| f8_accumulate(
            &dev,
            op,
            true,
            (d, &out_l),
            (i, ids_l),
            (s, src_l),
            dim
        ))?;
        return Ok(out);
    }
    with_dst_src!(out.as_slice_mut(), src.as_slice(), op, |d, s| with_ids!(
        ids.as_slice(),
        op,
        |i| scatter_like_buf(
            &dev,
            op,
            ScatterKind::IndexAdd,
            (d, &out_l),
            (i, ids_l),
            (s, src_l),
            dim
        )
    ))?;
    Ok(out)
}
