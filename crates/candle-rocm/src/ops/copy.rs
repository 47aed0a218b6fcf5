//! Copies and fills: `try_clone` (the whole buffer), `copy_strided_src` (a strided view into a
//! contiguous destination range), `copy2d` (rows of a 2-D block) and `const_set` (a scalar
//! into a strided view), for every storage dtype (f8e4m3 as bytes).

use candle_core::backend::BackendStorage;
use candle_core::scalar::Scalar;
use candle_core::{Error, Layout, Result};
use hip_core::DeviceBuffer;
use rocm_kernels::elementwise as ew;
use rocm_kernels::KernelDType;

use crate::buffers::{view, view_mut};
use crate::device::RocmDevice;
use crate::error::{hip_err, kernel_err, RocmError};
use crate::layout::{copy2d_ranges, Copy2dSpec};
use crate::storage::{RocmStorage, RocmStorageSlice};

/// Same dtype on both sides, any storage variant (f8e4m3 as bytes): for copies.
macro_rules! with_same_buffers {
    // Two sources and two destinations of one dtype (the caller has checked the dtypes).
    ($s0:expr, $d0:expr, $s1:expr, $d1:expr, |$a:ident, $b:ident, $c:ident, $e:ident| $body:expr) => {
        match ($s0, $d0, $s1, $d1) {
            (
                RocmStorageSlice::U8($a),
                RocmStorageSlice::U8($b),
                RocmStorageSlice::U8($c),
                RocmStorageSlice::U8($e),
            )
            | (
                RocmStorageSlice::F8E4M3($a),
                RocmStorageSlice::F8E4M3($b),
                RocmStorageSlice::F8E4M3($c),
                RocmStorageSlice::F8E4M3($e),
            ) => $body,
            with_same_buffers!(@four U32, $a, $b, $c, $e) => $body,
            with_same_buffers!(@four I16, $a, $b, $c, $e) => $body,
            with_same_buffers!(@four I32, $a, $b, $c, $e) => $body,
            with_same_buffers!(@four I64, $a, $b, $c, $e) => $body,
            with_same_buffers!(@four BF16, $a, $b, $c, $e) => $body,
            with_same_buffers!(@four F16, $a, $b, $c, $e) => $body,
            with_same_buffers!(@four F32, $a, $b, $c, $e) => $body,
            with_same_buffers!(@four F64, $a, $b, $c, $e) => $body,
            _ => unreachable!("the caller checked that the four dtypes agree"),
        }
    };
    (@four $v:ident, $a:ident, $b:ident, $c:ident, $e:ident) => {
        (
            RocmStorageSlice::$v($a),
            RocmStorageSlice::$v($b),
            RocmStorageSlice::$v($c),
            RocmStorageSlice::$v($e),
        )
    };
    ($src:expr, $dst:expr, $op:expr, |$a:ident, $b:ident| $body:expr) => {
        match ($src, $dst) {
            (RocmStorageSlice::U8($a), RocmStorageSlice::U8($b))
            | (RocmStorageSlice::F8E4M3($a), RocmStorageSlice::F8E4M3($b)) => $body,
            (RocmStorageSlice::U32($a), RocmStorageSlice::U32($b)) => $body,
            (RocmStorageSlice::I16($a), RocmStorageSlice::I16($b)) => $body,
            (RocmStorageSlice::I32($a), RocmStorageSlice::I32($b)) => $body,
            (RocmStorageSlice::I64($a), RocmStorageSlice::I64($b)) => $body,
            (RocmStorageSlice::BF16($a), RocmStorageSlice::BF16($b)) => $body,
            (RocmStorageSlice::F16($a), RocmStorageSlice::F16($b)) => $body,
            (RocmStorageSlice::F32($a), RocmStorageSlice::F32($b)) => $body,
            (RocmStorageSlice::F64($a), RocmStorageSlice::F64($b)) => $body,
            (s, d) => {
                return Err(Error::DTypeMismatchBinaryOp {
                    lhs: s.dtype(),
                    rhs: d.dtype(),
                    op: $op,
                }
                .bt())
            }
        }
    };
}

/// A copy of the whole buffer (the layout is not applied, as in candle's other backends).
pub(crate) fn try_clone(x: &RocmStorage) -> Result<RocmStorage> {
    let op = "try_clone";
    let slice = match x.as_slice() {
        RocmStorageSlice::U8(b) => RocmStorageSlice::U8(b.try_clone().map_err(hip_err(op))?),
        RocmStorageSlice::U32(b) => RocmStorageSlice::U32(b.try_clone().map_err(hip_err(op))?),
        RocmStorageSlice::I16(b) => RocmStorageSlice::I16(b.try_clone().map_err(hip_err(op))?),
        RocmStorageSlice::I32(b) => RocmStorageSlice::I32(b.try_clone().map_err(hip_err(op))?),
        RocmStorageSlice::I64(b) => RocmStorageSlice::I64(b.try_clone().map_err(hip_err(op))?),
        RocmStorageSlice::BF16(b) => RocmStorageSlice::BF16(b.try_clone().map_err(hip_err(op))?),
        RocmStorageSlice::F16(b) => RocmStorageSlice::F16(b.try_clone().map_err(hip_err(op))?),
        RocmStorageSlice::F32(b) => RocmStorageSlice::F32(b.try_clone().map_err(hip_err(op))?),
        RocmStorageSlice::F64(b) => RocmStorageSlice::F64(b.try_clone().map_err(hip_err(op))?),
        RocmStorageSlice::F8E4M3(b) => {
            RocmStorageSlice::F8E4M3(b.try_clone().map_err(hip_err(op))?)
        }
    };
    Ok(x.wrap(slice))
}

fn const_set_buf<T: KernelDType>(
    dev: &RocmDevice,
    buf: &mut DeviceBuffer<T>,
    layout: &Layout,
    value: T,
) -> Result<()> {
    let op = "const_set";
    let mut dst = view_mut(op, buf, layout)?;
    ew::const_set(
        dev.stream(),
        layout.dims(),
        layout.stride(),
        &mut dst,
        value,
    )
    .map_err(kernel_err(op))
}

fn copy_strided_buf<T: KernelDType>(
    dev: &RocmDevice,
    src: &DeviceBuffer<T>,
    dst: &mut DeviceBuffer<T>,
    dst_offset: usize,
    src_l: &Layout,
) -> Result<()> {
    let op = "copy_strided_src";
    let n = src_l.shape().elem_count();
    let s = view(op, src, src_l)?;
    // Nothing is written for an empty source, wherever `dst_offset` points.
    let range = if n == 0 {
        0..0
    } else {
        let end = dst_offset
            .checked_add(n)
            .filter(|&e| e <= dst.len())
            .ok_or_else(|| {
                RocmError::layout(
                    op,
                    format!(
                        "{n} elements at destination offset {dst_offset} do not fit in {} \
                         elements",
                        dst.len()
                    ),
                )
            })?;
        dst_offset..end
    };
    let mut d = dst.slice_mut(range).map_err(hip_err(op))?;
    ew::copy_strided(dev.stream(), src_l.dims(), s, &mut d).map_err(kernel_err(op))
}

#[allow(clippy::too_many_arguments)]
fn copy2d_buf<T: KernelDType>(
    dev: &RocmDevice,
    src: &DeviceBuffer<T>,
    dst: &mut DeviceBuffer<T>,
    d1: usize,
    d2: usize,
    src_s: usize,
    dst_s: usize,
    src_o: usize,
    dst_o: usize,
) -> Result<()> {
    let op = "copy2d";
    let Some((sr, dr)) = copy2d_ranges(d1, d2, src_s, dst_s, src_o, dst_o, src.len(), dst.len())?
    else {
        return Ok(());
    };
    let s = src.slice(sr).map_err(hip_err(op))?;
    let mut d = dst.slice_mut(dr).map_err(hip_err(op))?;
    ew::copy2d(dev.stream(), &s, &mut d, d1, d2, src_s, dst_s).map_err(kernel_err(op))
}

/// Copies `src` (through `src_l`) into `dst`'s contiguous elements from `dst_offset` on.
pub(crate) fn copy_strided_src(
    src: &RocmStorage,
    dst: &mut RocmStorage,
    dst_offset: usize,
    src_l: &Layout,
) -> Result<()> {
    let op = "copy_strided_src";
    src.check_device(dst, op)?;
    let dev = src.device();
    with_same_buffers!(src.as_slice(), dst.as_slice_mut(), op, |s, d| {
        copy_strided_buf(dev, s, d, dst_offset, src_l)
    })
}

/// Copies `d1` rows of `d2` elements from `src` (rows `src_s` apart, from `src_o`) to `dst`
/// (rows `dst_s` apart, from `dst_o`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn copy2d(
    src: &RocmStorage,
    dst: &mut RocmStorage,
    d1: usize,
    d2: usize,
    src_s: usize,
    dst_s: usize,
    src_o: usize,
    dst_o: usize,
) -> Result<()> {
    let op = "copy2d";
    src.check_device(dst, op)?;
    let dev = src.device();
    with_same_buffers!(src.as_slice(), dst.as_slice_mut(), op, |s, d| {
        copy2d_buf(dev, s, d, d1, d2, src_s, dst_s, src_o, dst_o)
    })
}

/// Two `copy2d`s (a KV cache's new key and value rows): one launch where the four storages
/// share a dtype and a device, the two copies otherwise.
pub(crate) fn copy2d_pair(
    (src, dst, a): (&RocmStorage, &mut RocmStorage, Copy2dSpec),
    (other, other_dst, b): (&RocmStorage, &mut RocmStorage, Copy2dSpec),
) -> Result<()> {
    let op = "copy2d (pair)";
    src.check_device(dst, op)?;
    other.check_device(other_dst, op)?;
    src.check_device(other, op)?;
    let dtype = src.dtype();
    if [dst.dtype(), other.dtype(), other_dst.dtype()] != [dtype; 3] {
        copy2d(src, dst, a.d1, a.d2, a.src_s, a.dst_s, a.src_o, a.dst_o)?;
        return copy2d(
            other, other_dst, b.d1, b.d2, b.src_s, b.dst_s, b.src_o, b.dst_o,
        );
    }
    let dev = src.device();
    with_same_buffers!(
        src.as_slice(),
        dst.as_slice_mut(),
        other.as_slice(),
        other_dst.as_slice_mut(),
        |s0, d0, s1, d1| copy2d_pair_buf(dev, (s0, d0, a), (s1, d1, b))
    )
}

/// [`copy2d_pair`] on typed buffers.
fn copy2d_pair_buf<T: KernelDType>(
    dev: &RocmDevice,
    (src, dst, a): (&DeviceBuffer<T>, &mut DeviceBuffer<T>, Copy2dSpec),
    (other, other_dst, b): (&DeviceBuffer<T>, &mut DeviceBuffer<T>, Copy2dSpec),
) -> Result<()> {
    let op = "copy2d (pair)";
    let ranges = |c: Copy2dSpec, s: usize, d: usize| {
        copy2d_ranges(c.d1, c.d2, c.src_s, c.dst_s, c.src_o, c.dst_o, s, d)
    };
    let (ra, rb) = (
        ranges(a, src.len(), dst.len())?,
        ranges(b, other.len(), other_dst.len())?,
    );
    let (Some((sa, da)), Some((sb, db))) = (ra, rb) else {
        // At most one of them copies anything.
        copy2d_buf(
            dev, src, dst, a.d1, a.d2, a.src_s, a.dst_s, a.src_o, a.dst_o,
        )?;
        return copy2d_buf(
            dev, other, other_dst, b.d1, b.d2, b.src_s, b.dst_s, b.src_o, b.dst_o,
        );
    };
    let (s0, s1) = (
        src.slice(sa).map_err(hip_err(op))?,
        other.slice(sb).map_err(hip_err(op))?,
    );
    let mut d0 = dst.slice_mut(da).map_err(hip_err(op))?;
    let mut d1 = other_dst.slice_mut(db).map_err(hip_err(op))?;
    let copy = |src, dst, c: Copy2dSpec| ew::Copy2d {
        src,
        dst,
        d1: c.d1,
        d2: c.d2,
        src_stride1: c.src_s,
        dst_stride1: c.dst_s,
    };
    ew::copy2d_pair(dev.stream(), copy(&s0, &mut d0, a), copy(&s1, &mut d1, b))
        .map_err(kernel_err(op))
}

/// Sets every element of `x`'s view `layout` to `value` (of `x`'s dtype).
pub(crate) fn const_set(x: &mut RocmStorage, value: Scalar, layout: &Layout) -> Result<()> {
    let (slice, dev) = x.slice_and_device_mut();
    match (slice, value) {
        (RocmStorageSlice::U8(b), Scalar::U8(v)) => const_set_buf(dev, b, layout, v),
        (RocmStorageSlice::U32(b), Scalar::U32(v)) => const_set_buf(dev, b, layout, v),
        (RocmStorageSlice::I16(b), Scalar::I16(v)) => const_set_buf(dev, b, layout, v),
        (RocmStorageSlice::I32(b), Scalar::I32(v)) => const_set_buf(dev, b, layout, v),
        (RocmStorageSlice::I64(b), Scalar::I64(v)) => const_set_buf(dev, b, layout, v),
        (RocmStorageSlice::BF16(b), Scalar::BF16(v)) => const_set_buf(dev, b, layout, v),
        (RocmStorageSlice::F16(b), Scalar::F16(v)) => const_set_buf(dev, b, layout, v),
        (RocmStorageSlice::F32(b), Scalar::F32(v)) => const_set_buf(dev, b, layout, v),
        (RocmStorageSlice::F64(b), Scalar::F64(v)) => const_set_buf(dev, b, layout, v),
        (RocmStorageSlice::F8E4M3(b), Scalar::F8E4M3(v)) => {
            const_set_buf(dev, b, layout, v.to_bits())
        }
        (s, v) => Err(Error::UnexpectedDType {
            msg: "const_set: the scalar's dtype differs from the storage's",
            expected: s.dtype(),
            got: v.dtype(),
        }
        .bt()),
    }
}
