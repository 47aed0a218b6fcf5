//! [`RocmStorage`]: candle's `BackendStorage` over dtype-tagged hip-core device buffers.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::conv::{ParamsConv1D, ParamsConv2D, ParamsConvTranspose1D, ParamsConvTranspose2D};
use candle_core::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use candle_core::scalar::Scalar;
use candle_core::{CpuStorage, DType, Error, Layout, Result};
use half::{bf16, f16};
use hip_core::{DeviceBuffer, DeviceSliceMut, Stream};
use rocm_kernels::elementwise::{self as ew, Strided};
use rocm_kernels::f8;
use rocm_kernels::KernelDType;

use crate::device::RocmDevice;
use crate::error::{hip_err, kernel_err, RocmError, DUMMY_REASON, F8_REASON};
use crate::layout::{copy2d_ranges, layout_range};

/// A device buffer tagged with its Candle dtype.
///
/// `F8E4M3` is stored as its raw bytes (`DeviceBuffer<u8>`); the 4/6-bit formats and `F8E8M0`
/// have no device storage.
#[derive(Debug)]
#[non_exhaustive]
pub enum RocmStorageSlice {
    /// `u8`.
    U8(DeviceBuffer<u8>),
    /// `u32`.
    U32(DeviceBuffer<u32>),
    /// `i16`.
    I16(DeviceBuffer<i16>),
    /// `i32`.
    I32(DeviceBuffer<i32>),
    /// `i64`.
    I64(DeviceBuffer<i64>),
    /// `bf16`.
    BF16(DeviceBuffer<bf16>),
    /// `f16`.
    F16(DeviceBuffer<f16>),
    /// `f32`.
    F32(DeviceBuffer<f32>),
    /// `f64`.
    F64(DeviceBuffer<f64>),
    /// `f8e4m3`, as raw bytes.
    F8E4M3(DeviceBuffer<u8>),
}

impl RocmStorageSlice {
    /// The Candle dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Self::U8(_) => DType::U8,
            Self::U32(_) => DType::U32,
            Self::I16(_) => DType::I16,
            Self::I32(_) => DType::I32,
            Self::I64(_) => DType::I64,
            Self::BF16(_) => DType::BF16,
            Self::F16(_) => DType::F16,
            Self::F32(_) => DType::F32,
            Self::F64(_) => DType::F64,
            Self::F8E4M3(_) => DType::F8E4M3,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Self::U8(b) | Self::F8E4M3(b) => b.len(),
            Self::U32(b) => b.len(),
            Self::I16(b) => b.len(),
            Self::I32(b) => b.len(),
            Self::I64(b) => b.len(),
            Self::BF16(b) => b.len(),
            Self::F16(b) => b.len(),
            Self::F32(b) => b.len(),
            Self::F64(b) => b.len(),
        }
    }

    /// `true` when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Candle storage on a ROCm device: a dtype-tagged buffer and the device it lives on.
#[derive(Debug)]
pub struct RocmStorage {
    slice: RocmStorageSlice,
    device: RocmDevice,
}

impl RocmStorage {
    /// Storage from a buffer allocated on `device`'s stream.
    pub(crate) fn new(slice: RocmStorageSlice, device: RocmDevice) -> Self {
        RocmStorage { slice, device }
    }

    /// The typed buffer.
    pub fn as_slice(&self) -> &RocmStorageSlice {
        &self.slice
    }

    /// The typed buffer, mutably: for launching custom kernels on it (see
    /// `rocm_kernels::modules::custom_module` and the `custom_kernel` example). Launch them on
    /// the device's stream ([`RocmDevice::stream`]), which orders them with every other op.
    pub fn as_slice_mut(&mut self) -> &mut RocmStorageSlice {
        &mut self.slice
    }

    /// Storage over a buffer the caller filled (e.g. with a custom kernel). The buffer must
    /// belong to `device` and have been allocated on its stream ([`RocmDevice::stream`]), so
    /// that every later op is ordered after the work that wrote it.
    pub fn from_slice(slice: RocmStorageSlice, device: RocmDevice) -> Result<Self> {
        let stream = match &slice {
            RocmStorageSlice::U8(b) | RocmStorageSlice::F8E4M3(b) => b.stream(),
            RocmStorageSlice::U32(b) => b.stream(),
            RocmStorageSlice::I16(b) => b.stream(),
            RocmStorageSlice::I32(b) => b.stream(),
            RocmStorageSlice::I64(b) => b.stream(),
            RocmStorageSlice::BF16(b) => b.stream(),
            RocmStorageSlice::F16(b) => b.stream(),
            RocmStorageSlice::F32(b) => b.stream(),
            RocmStorageSlice::F64(b) => b.stream(),
        };
        if stream != device.stream() {
            return Err(Error::Msg(format!(
                "RocmStorage::from_slice: the buffer was allocated on {stream:?}, not on the \
                 stream of ROCm device {} ({:?})",
                device.ordinal(),
                device.stream()
            ))
            .bt());
        }
        Ok(RocmStorage::new(slice, device))
    }

    fn wrap(&self, slice: RocmStorageSlice) -> Self {
        RocmStorage::new(slice, self.device.clone())
    }

    pub(crate) fn check_device(&self, other: &Self, op: &'static str) -> Result<()> {
        if self.device.same_device(&other.device) {
            Ok(())
        } else {
            Err(Error::DeviceMismatchBinaryOp {
                lhs: self.device.location(),
                rhs: other.device.location(),
                op,
            }
            .bt())
        }
    }

    fn check_dtype(&self, other: &Self, op: &'static str) -> Result<()> {
        if self.dtype() == other.dtype() {
            Ok(())
        } else {
            Err(Error::DTypeMismatchBinaryOp {
                lhs: self.dtype(),
                rhs: other.dtype(),
                op,
            }
            .bt())
        }
    }

    fn check_operand(&self, other: &Self, op: &'static str) -> Result<()> {
        self.check_device(other, op)?;
        self.check_dtype(other, op)
    }

    fn not_implemented(&self, op: &str, reason: &str) -> Error {
        RocmError::not_implemented(op, self.dtype(), reason).into()
    }
}

fn check_same_shape(lhs: &Layout, rhs: &Layout, op: &'static str) -> Result<()> {
    if lhs.dims() == rhs.dims() {
        Ok(())
    } else {
        Err(Error::ShapeMismatchBinaryOp {
            lhs: lhs.shape().clone(),
            rhs: rhs.shape().clone(),
            op,
        }
        .bt())
    }
}

fn f8_error(op: &str) -> Error {
    RocmError::not_implemented(op, DType::F8E4M3, F8_REASON).into()
}

fn dummy_error(op: &str, dtype: DType) -> Error {
    RocmError::unsupported(op, dtype, DUMMY_REASON).into()
}

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

/// Runs a one-input kernel into a new contiguous buffer of `layout`'s element count.
fn map1<T: KernelDType, O: KernelDType>(
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
fn map2<T: KernelDType, O: KernelDType>(
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

/// argmin/argmax of `buf` over `reduce_dims` into a new `u32` buffer of `out_elems` indices.
fn arg_reduce_into<T: KernelDType>(
    dev: &RocmDevice,
    op: &str,
    kernel_op: rocm_kernels::reduce::ReduceOp,
    buf: &DeviceBuffer<T>,
    layout: &Layout,
    reduce_dims: &[usize],
    out_elems: usize,
) -> Result<DeviceBuffer<u32>> {
    let mut out = dev.alloc::<u32>(op, out_elems)?;
    let src = view(op, buf, layout)?;
    rocm_kernels::reduce::arg_reduce(
        dev.stream(),
        kernel_op,
        layout.dims(),
        src,
        reduce_dims,
        &mut out.as_mut_slice(),
    )
    .map_err(kernel_err(op))?;
    Ok(out)
}

/// `match` over the kernel dtypes of a storage: binds the typed buffer and wraps the resulting
/// buffer in the same variant. `f8e4m3` is refused.
macro_rules! map_dtype {
    ($slice:expr, $op:expr, |$b:ident| $body:expr) => {
        match $slice {
            RocmStorageSlice::U8($b) => RocmStorageSlice::U8($body?),
            RocmStorageSlice::U32($b) => RocmStorageSlice::U32($body?),
            RocmStorageSlice::I16($b) => RocmStorageSlice::I16($body?),
            RocmStorageSlice::I32($b) => RocmStorageSlice::I32($body?),
            RocmStorageSlice::I64($b) => RocmStorageSlice::I64($body?),
            RocmStorageSlice::BF16($b) => RocmStorageSlice::BF16($body?),
            RocmStorageSlice::F16($b) => RocmStorageSlice::F16($body?),
            RocmStorageSlice::F32($b) => RocmStorageSlice::F32($body?),
            RocmStorageSlice::F64($b) => RocmStorageSlice::F64($body?),
            RocmStorageSlice::F8E4M3(_) => return Err(f8_error($op)),
        }
    };
}

/// As `map_dtype!` for float dtypes only; integers are refused as `Unsupported`.
macro_rules! map_float {
    ($slice:expr, $op:expr, $why:expr, |$b:ident| $body:expr) => {
        match $slice {
            RocmStorageSlice::BF16($b) => RocmStorageSlice::BF16($body?),
            RocmStorageSlice::F16($b) => RocmStorageSlice::F16($body?),
            RocmStorageSlice::F32($b) => RocmStorageSlice::F32($body?),
            RocmStorageSlice::F64($b) => RocmStorageSlice::F64($body?),
            RocmStorageSlice::F8E4M3(_) => return Err(f8_error($op)),
            other => return Err(RocmError::unsupported($op, other.dtype(), $why).into()),
        }
    };
}

/// Two operands of the same kernel dtype: binds both typed buffers; wraps the result in the
/// operands' variant.
macro_rules! map_dtype2 {
    ($lhs:expr, $rhs:expr, $op:expr, |$a:ident, $b:ident| $body:expr) => {
        match ($lhs, $rhs) {
            (RocmStorageSlice::U8($a), RocmStorageSlice::U8($b)) => RocmStorageSlice::U8($body?),
            (RocmStorageSlice::U32($a), RocmStorageSlice::U32($b)) => RocmStorageSlice::U32($body?),
            (RocmStorageSlice::I16($a), RocmStorageSlice::I16($b)) => RocmStorageSlice::I16($body?),
            (RocmStorageSlice::I32($a), RocmStorageSlice::I32($b)) => RocmStorageSlice::I32($body?),
            (RocmStorageSlice::I64($a), RocmStorageSlice::I64($b)) => RocmStorageSlice::I64($body?),
            (RocmStorageSlice::BF16($a), RocmStorageSlice::BF16($b)) => {
                RocmStorageSlice::BF16($body?)
            }
            (RocmStorageSlice::F16($a), RocmStorageSlice::F16($b)) => RocmStorageSlice::F16($body?),
            (RocmStorageSlice::F32($a), RocmStorageSlice::F32($b)) => RocmStorageSlice::F32($body?),
            (RocmStorageSlice::F64($a), RocmStorageSlice::F64($b)) => RocmStorageSlice::F64($body?),
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

/// Same dtype on both sides, any storage variant (f8e4m3 as bytes): for copies.
macro_rules! with_same_buffers {
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

/// Candle's unary op name (`UnaryOpT::NAME`) to the kernel op.
pub(crate) fn unary_op_from_name(name: &str) -> Option<ew::UnaryOp> {
    use ew::UnaryOp as U;
    Some(match name {
        "exp" => U::Exp,
        "log" => U::Log,
        "sin" => U::Sin,
        "cos" => U::Cos,
        "tanh" => U::Tanh,
        "neg" => U::Neg,
        "recip" => U::Recip,
        "sqr" => U::Sqr,
        "sqrt" => U::Sqrt,
        "gelu" => U::Gelu,
        "gelu_erf" => U::GeluErf,
        "erf" => U::Erf,
        "silu" => U::Silu,
        "abs" => U::Abs,
        "ceil" => U::Ceil,
        "floor" => U::Floor,
        "round" => U::Round,
        "relu" => U::Relu,
        "sign" => U::Sign,
        "sigmoid" => U::Sigmoid,
        _ => return None,
    })
}

/// Candle's binary op name (`BinaryOpT::NAME`) to the kernel op.
pub(crate) fn binary_op_from_name(name: &str) -> Option<ew::BinaryOp> {
    use ew::BinaryOp as B;
    Some(match name {
        "add" => B::Add,
        "sub" => B::Sub,
        "mul" => B::Mul,
        "div" => B::Div,
        "minimum" => B::Minimum,
        "maximum" => B::Maximum,
        _ => return None,
    })
}

/// Candle's comparison to the kernel's.
pub(crate) fn cmp_op(op: CmpOp) -> ew::CmpOp {
    match op {
        CmpOp::Eq => ew::CmpOp::Eq,
        CmpOp::Ne => ew::CmpOp::Ne,
        CmpOp::Lt => ew::CmpOp::Lt,
        CmpOp::Le => ew::CmpOp::Le,
        CmpOp::Gt => ew::CmpOp::Gt,
        CmpOp::Ge => ew::CmpOp::Ge,
    }
}

/// The name used in errors for a comparison.
pub(crate) fn cmp_name(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "cmp eq",
        CmpOp::Ne => "cmp ne",
        CmpOp::Lt => "cmp lt",
        CmpOp::Le => "cmp le",
        CmpOp::Gt => "cmp gt",
        CmpOp::Ge => "cmp ge",
    }
}

/// Casts `buf` (viewed through `layout`) to `dtype`.
fn cast_to<S: KernelDType>(
    dev: &RocmDevice,
    buf: &DeviceBuffer<S>,
    layout: &Layout,
    dtype: DType,
) -> Result<RocmStorageSlice> {
    let op = "to_dtype";
    macro_rules! cast {
        ($variant:ident, $t:ty) => {
            RocmStorageSlice::$variant(map1::<S, $t>(dev, op, buf, layout, |s, d, src, dst| {
                ew::cast(s, d, src, dst)
            })?)
        };
    }
    Ok(match dtype {
        DType::U8 => cast!(U8, u8),
        DType::U32 => cast!(U32, u32),
        DType::I16 => cast!(I16, i16),
        DType::I32 => cast!(I32, i32),
        DType::I64 => cast!(I64, i64),
        DType::BF16 => cast!(BF16, bf16),
        DType::F16 => cast!(F16, f16),
        DType::F32 => cast!(F32, f32),
        DType::F64 => cast!(F64, f64),
        DType::F8E4M3 => {
            RocmStorageSlice::F8E4M3(map1::<S, u8>(dev, op, buf, layout, |s, d, src, dst| {
                ew::cast_to_f8e4m3(s, d, src, dst)
            })?)
        }
        other => return Err(dummy_error(op, other)),
    })
}

/// Converts f8e4m3 bytes to `dtype` (see `rocm_kernels::elementwise::cast_from_f8e4m3`).
fn cast_from_f8(
    dev: &RocmDevice,
    buf: &DeviceBuffer<u8>,
    layout: &Layout,
    dtype: DType,
) -> Result<RocmStorageSlice> {
    let op = "to_dtype";
    macro_rules! cast {
        ($variant:ident, $t:ty) => {
            RocmStorageSlice::$variant(map1::<u8, $t>(dev, op, buf, layout, |s, d, src, dst| {
                ew::cast_from_f8e4m3(s, d, src, dst)
            })?)
        };
    }
    Ok(match dtype {
        DType::U8 => cast!(U8, u8),
        DType::U32 => cast!(U32, u32),
        DType::I16 => cast!(I16, i16),
        DType::I32 => cast!(I32, i32),
        DType::I64 => cast!(I64, i64),
        DType::BF16 => cast!(BF16, bf16),
        DType::F16 => cast!(F16, f16),
        DType::F32 => cast!(F32, f32),
        DType::F64 => cast!(F64, f64),
        other => return Err(dummy_error(op, other)),
    })
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

/// `where_cond` with a condition buffer of kernel dtype `C`; values of any storage variant
/// (f8e4m3 selected as bytes).
fn where_with<C: KernelDType>(
    dev: &RocmDevice,
    (cond, cond_l): (&DeviceBuffer<C>, &Layout),
    t: &RocmStorage,
    t_l: &Layout,
    f: &RocmStorage,
    f_l: &Layout,
) -> Result<RocmStorageSlice> {
    let op = "where_cond";
    fn run<C: KernelDType, T: KernelDType>(
        dev: &RocmDevice,
        (cond, cond_l): (&DeviceBuffer<C>, &Layout),
        (t, t_l): (&DeviceBuffer<T>, &Layout),
        (f, f_l): (&DeviceBuffer<T>, &Layout),
    ) -> Result<DeviceBuffer<T>> {
        let op = "where_cond";
        let mut out = dev.alloc::<T>(op, cond_l.shape().elem_count())?;
        let (c, tv, fv) = (
            view(op, cond, cond_l)?,
            view(op, t, t_l)?,
            view(op, f, f_l)?,
        );
        ew::where_cond(
            dev.stream(),
            cond_l.dims(),
            c,
            tv,
            fv,
            &mut out.as_mut_slice(),
        )
        .map_err(kernel_err(op))?;
        Ok(out)
    }
    let c = (cond, cond_l);
    Ok(match (&t.slice, &f.slice) {
        (RocmStorageSlice::U8(a), RocmStorageSlice::U8(b)) => {
            RocmStorageSlice::U8(run(dev, c, (a, t_l), (b, f_l))?)
        }
        (RocmStorageSlice::F8E4M3(a), RocmStorageSlice::F8E4M3(b)) => {
            RocmStorageSlice::F8E4M3(run(dev, c, (a, t_l), (b, f_l))?)
        }
        (RocmStorageSlice::U32(a), RocmStorageSlice::U32(b)) => {
            RocmStorageSlice::U32(run(dev, c, (a, t_l), (b, f_l))?)
        }
        (RocmStorageSlice::I16(a), RocmStorageSlice::I16(b)) => {
            RocmStorageSlice::I16(run(dev, c, (a, t_l), (b, f_l))?)
        }
        (RocmStorageSlice::I32(a), RocmStorageSlice::I32(b)) => {
            RocmStorageSlice::I32(run(dev, c, (a, t_l), (b, f_l))?)
        }
        (RocmStorageSlice::I64(a), RocmStorageSlice::I64(b)) => {
            RocmStorageSlice::I64(run(dev, c, (a, t_l), (b, f_l))?)
        }
        (RocmStorageSlice::BF16(a), RocmStorageSlice::BF16(b)) => {
            RocmStorageSlice::BF16(run(dev, c, (a, t_l), (b, f_l))?)
        }
        (RocmStorageSlice::F16(a), RocmStorageSlice::F16(b)) => {
            RocmStorageSlice::F16(run(dev, c, (a, t_l), (b, f_l))?)
        }
        (RocmStorageSlice::F32(a), RocmStorageSlice::F32(b)) => {
            RocmStorageSlice::F32(run(dev, c, (a, t_l), (b, f_l))?)
        }
        (RocmStorageSlice::F64(a), RocmStorageSlice::F64(b)) => {
            RocmStorageSlice::F64(run(dev, c, (a, t_l), (b, f_l))?)
        }
        (a, b) => {
            return Err(Error::DTypeMismatchBinaryOp {
                lhs: a.dtype(),
                rhs: b.dtype(),
                op,
            }
            .bt())
        }
    })
}

fn const_set_buf<T: KernelDType>(
    dev: &RocmDevice,
    buf: &mut DeviceBuffer<T>,
    layout: &Layout,
    value: T,
) -> Result<()> {
    let op = "const_set";
    let range = layout_range(op, layout, buf.len())?.unwrap_or(0..0);
    let mut dst = buf.slice_mut(range).map_err(hip_err(op))?;
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

/// The strided, mutable view of `buf` described by `layout` (for in-place kernels).
fn view_mut<'a, T: KernelDType>(
    op: &str,
    buf: &'a mut DeviceBuffer<T>,
    layout: &Layout,
) -> Result<DeviceSliceMut<'a, T>> {
    let range = layout_range(op, layout, buf.len())?.unwrap_or(0..0);
    buf.slice_mut(range).map_err(hip_err(op))
}

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
    match (usize::try_from(e.index), usize::try_from(e.size)) {
        (Ok(index), Ok(size)) => Err(Error::InvalidIndex {
            op: e.op.name(),
            index,
            size,
        }
        .bt()),
        _ => Err(RocmError::kernel(e.op.name(), e.to_error()).into()),
    }
}

fn to_host<T: KernelDType>(buf: &DeviceBuffer<T>) -> Result<Vec<T>> {
    buf.to_host_vec().map_err(hip_err("to_cpu_storage"))
}

impl BackendStorage for RocmStorage {
    type Device = RocmDevice;

    /// A copy of the whole buffer (the layout is not applied, as in candle's other backends).
    fn try_clone(&self, _: &Layout) -> Result<Self> {
        let op = "try_clone";
        let slice = match &self.slice {
            RocmStorageSlice::U8(b) => RocmStorageSlice::U8(b.try_clone().map_err(hip_err(op))?),
            RocmStorageSlice::U32(b) => RocmStorageSlice::U32(b.try_clone().map_err(hip_err(op))?),
            RocmStorageSlice::I16(b) => RocmStorageSlice::I16(b.try_clone().map_err(hip_err(op))?),
            RocmStorageSlice::I32(b) => RocmStorageSlice::I32(b.try_clone().map_err(hip_err(op))?),
            RocmStorageSlice::I64(b) => RocmStorageSlice::I64(b.try_clone().map_err(hip_err(op))?),
            RocmStorageSlice::BF16(b) => {
                RocmStorageSlice::BF16(b.try_clone().map_err(hip_err(op))?)
            }
            RocmStorageSlice::F16(b) => RocmStorageSlice::F16(b.try_clone().map_err(hip_err(op))?),
            RocmStorageSlice::F32(b) => RocmStorageSlice::F32(b.try_clone().map_err(hip_err(op))?),
            RocmStorageSlice::F64(b) => RocmStorageSlice::F64(b.try_clone().map_err(hip_err(op))?),
            RocmStorageSlice::F8E4M3(b) => {
                RocmStorageSlice::F8E4M3(b.try_clone().map_err(hip_err(op))?)
            }
        };
        Ok(self.wrap(slice))
    }

    fn dtype(&self) -> DType {
        self.slice.dtype()
    }

    fn device(&self) -> &RocmDevice {
        &self.device
    }

    /// Reports first an out-of-range index recorded by an indexing op since the last check
    /// (see [`RocmDevice`]'s docs), then copies the buffer to the host.
    fn to_cpu_storage(&self) -> Result<CpuStorage> {
        self.device.check_index_errors()?;
        Ok(match &self.slice {
            RocmStorageSlice::U8(b) => CpuStorage::U8(to_host(b)?),
            RocmStorageSlice::U32(b) => CpuStorage::U32(to_host(b)?),
            RocmStorageSlice::I16(b) => CpuStorage::I16(to_host(b)?),
            RocmStorageSlice::I32(b) => CpuStorage::I32(to_host(b)?),
            RocmStorageSlice::I64(b) => CpuStorage::I64(to_host(b)?),
            RocmStorageSlice::BF16(b) => CpuStorage::BF16(to_host(b)?),
            RocmStorageSlice::F16(b) => CpuStorage::F16(to_host(b)?),
            RocmStorageSlice::F32(b) => CpuStorage::F32(to_host(b)?),
            RocmStorageSlice::F64(b) => CpuStorage::F64(to_host(b)?),
            RocmStorageSlice::F8E4M3(b) => CpuStorage::F8E4M3(
                to_host(b)?
                    .into_iter()
                    .map(float8::F8E4M3::from_bits)
                    .collect(),
            ),
        })
    }

    fn affine(&self, layout: &Layout, mul: f64, add: f64) -> Result<Self> {
        let op = "affine";
        let dev = &self.device;
        if let RocmStorageSlice::F8E4M3(b) = &self.slice {
            let out = map1(dev, op, b, layout, |s, d, src, dst| {
                f8::affine(s, d, src, dst, mul, add)
            })?;
            return Ok(self.wrap(RocmStorageSlice::F8E4M3(out)));
        }
        let slice = map_dtype!(&self.slice, op, |b| map1(
            dev,
            op,
            b,
            layout,
            |s, d, src, dst| { ew::affine(s, d, src, dst, mul, add) }
        ));
        Ok(self.wrap(slice))
    }

    fn powf(&self, layout: &Layout, e: f64) -> Result<Self> {
        let op = "powf";
        let dev = &self.device;
        let why = "powf is defined for float dtypes only (as in candle's CPU and CUDA backends)";
        if let RocmStorageSlice::F8E4M3(b) = &self.slice {
            let out = map1(dev, op, b, layout, |s, d, src, dst| {
                f8::powf(s, d, src, dst, e)
            })?;
            return Ok(self.wrap(RocmStorageSlice::F8E4M3(out)));
        }
        let slice = map_float!(&self.slice, op, why, |b| map1(
            dev,
            op,
            b,
            layout,
            |s, d, src, dst| { ew::powf(s, d, src, dst, e) }
        ));
        Ok(self.wrap(slice))
    }

    fn elu(&self, layout: &Layout, alpha: f64) -> Result<Self> {
        let op = "elu";
        let dev = &self.device;
        let why = "elu is defined for float dtypes only (as in candle's CPU and CUDA backends)";
        if let RocmStorageSlice::F8E4M3(b) = &self.slice {
            let out = map1(dev, op, b, layout, |s, d, src, dst| {
                f8::elu(s, d, src, dst, alpha)
            })?;
            return Ok(self.wrap(RocmStorageSlice::F8E4M3(out)));
        }
        let slice = map_float!(&self.slice, op, why, |b| map1(
            dev,
            op,
            b,
            layout,
            |s, d, src, dst| { ew::elu(s, d, src, dst, alpha) }
        ));
        Ok(self.wrap(slice))
    }

    fn reduce_op(&self, op: ReduceOp, layout: &Layout, reduce_dims: &[usize]) -> Result<Self> {
        let (name, kernel_op) = match op {
            ReduceOp::Sum => ("reduce sum", rocm_kernels::reduce::ReduceOp::Sum),
            ReduceOp::Min => ("reduce min", rocm_kernels::reduce::ReduceOp::Min),
            ReduceOp::Max => ("reduce max", rocm_kernels::reduce::ReduceOp::Max),
            ReduceOp::ArgMin => ("reduce argmin", rocm_kernels::reduce::ReduceOp::ArgMin),
            ReduceOp::ArgMax => ("reduce argmax", rocm_kernels::reduce::ReduceOp::ArgMax),
        };
        // The output keeps every reduced dim as size 1 (Candle's convention), contiguous.
        let out_elems: usize = layout
            .dims()
            .iter()
            .enumerate()
            .map(|(i, &d)| if reduce_dims.contains(&i) { 1 } else { d })
            .product();
        let dev = &self.device;
        if kernel_op.returns_index() {
            let out = match &self.slice {
                RocmStorageSlice::U8(b) => {
                    arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
                }
                RocmStorageSlice::U32(b) => {
                    arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
                }
                RocmStorageSlice::I16(b) => {
                    arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
                }
                RocmStorageSlice::I32(b) => {
                    arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
                }
                RocmStorageSlice::I64(b) => {
                    arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
                }
                RocmStorageSlice::BF16(b) => {
                    arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
                }
                RocmStorageSlice::F16(b) => {
                    arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
                }
                RocmStorageSlice::F32(b) => {
                    arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
                }
                RocmStorageSlice::F64(b) => {
                    arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
                }
                RocmStorageSlice::F8E4M3(_) => return Err(f8_error(name)),
            }?;
            return Ok(self.wrap(RocmStorageSlice::U32(out)));
        }
        let slice = map_dtype!(&self.slice, name, |b| {
            let mut out = dev.alloc(name, out_elems)?;
            let src = view(name, b, layout)?;
            rocm_kernels::reduce::reduce(
                dev.stream(),
                kernel_op,
                layout.dims(),
                src,
                reduce_dims,
                &mut out.as_mut_slice(),
            )
            .map_err(kernel_err(name))
            .map(|()| out)
        });
        Ok(self.wrap(slice))
    }

    fn cmp(&self, op: CmpOp, rhs: &Self, lhs_l: &Layout, rhs_l: &Layout) -> Result<Self> {
        let name = cmp_name(op);
        self.check_operand(rhs, "cmp")?;
        check_same_shape(lhs_l, rhs_l, "cmp")?;
        let dev = &self.device;
        let kop = cmp_op(op);
        macro_rules! run {
            ($a:expr, $b:expr) => {
                map2::<_, u8>(dev, name, ($a, lhs_l), ($b, rhs_l), |s, d, l, r, dst| {
                    ew::cmp(s, kop, d, l, r, dst)
                })?
            };
        }
        let out = match (&self.slice, &rhs.slice) {
            (RocmStorageSlice::U8(a), RocmStorageSlice::U8(b)) => run!(a, b),
            (RocmStorageSlice::U32(a), RocmStorageSlice::U32(b)) => run!(a, b),
            (RocmStorageSlice::I16(a), RocmStorageSlice::I16(b)) => run!(a, b),
            (RocmStorageSlice::I32(a), RocmStorageSlice::I32(b)) => run!(a, b),
            (RocmStorageSlice::I64(a), RocmStorageSlice::I64(b)) => run!(a, b),
            (RocmStorageSlice::BF16(a), RocmStorageSlice::BF16(b)) => run!(a, b),
            (RocmStorageSlice::F16(a), RocmStorageSlice::F16(b)) => run!(a, b),
            (RocmStorageSlice::F32(a), RocmStorageSlice::F32(b)) => run!(a, b),
            (RocmStorageSlice::F64(a), RocmStorageSlice::F64(b)) => run!(a, b),
            (RocmStorageSlice::F8E4M3(a), RocmStorageSlice::F8E4M3(b)) => {
                map2::<_, u8>(dev, name, (a, lhs_l), (b, rhs_l), |s, d, l, r, dst| {
                    f8::cmp(s, kop, d, l, r, dst)
                })?
            }
            (l, r) => {
                return Err(Error::DTypeMismatchBinaryOp {
                    lhs: l.dtype(),
                    rhs: r.dtype(),
                    op: "cmp",
                }
                .bt())
            }
        };
        Ok(self.wrap(RocmStorageSlice::U8(out)))
    }

    fn to_dtype(&self, layout: &Layout, dtype: DType) -> Result<Self> {
        let dev = &self.device;
        let op = "to_dtype";
        let slice = match &self.slice {
            // Same dtype: a strided copy (f8e4m3 too, as bytes).
            RocmStorageSlice::F8E4M3(b) if dtype == DType::F8E4M3 => {
                RocmStorageSlice::F8E4M3(copy_view(dev, op, b, layout)?)
            }
            RocmStorageSlice::F8E4M3(b) => cast_from_f8(dev, b, layout, dtype)?,
            s if s.dtype() == dtype => {
                map_dtype!(s, op, |b| copy_view(dev, op, b, layout))
            }
            RocmStorageSlice::U8(b) => cast_to(dev, b, layout, dtype)?,
            RocmStorageSlice::U32(b) => cast_to(dev, b, layout, dtype)?,
            RocmStorageSlice::I16(b) => cast_to(dev, b, layout, dtype)?,
            RocmStorageSlice::I32(b) => cast_to(dev, b, layout, dtype)?,
            RocmStorageSlice::I64(b) => cast_to(dev, b, layout, dtype)?,
            RocmStorageSlice::BF16(b) => cast_to(dev, b, layout, dtype)?,
            RocmStorageSlice::F16(b) => cast_to(dev, b, layout, dtype)?,
            RocmStorageSlice::F32(b) => cast_to(dev, b, layout, dtype)?,
            RocmStorageSlice::F64(b) => cast_to(dev, b, layout, dtype)?,
        };
        Ok(self.wrap(slice))
    }

    fn unary_impl<B: UnaryOpT>(&self, layout: &Layout) -> Result<Self> {
        // Named as the kernel wrappers name it, so that their errors read "unary exp: ...".
        let name = format!("unary {}", B::NAME);
        let op = name.as_str();
        let Some(kop) = unary_op_from_name(B::NAME) else {
            return Err(self.not_implemented(op, "no ROCm kernel for this unary op"));
        };
        let dev = &self.device;
        if let RocmStorageSlice::F8E4M3(b) = &self.slice {
            let out = map1(dev, op, b, layout, |s, d, src, dst| {
                f8::unary(s, kop, d, src, dst)
            })?;
            return Ok(self.wrap(RocmStorageSlice::F8E4M3(out)));
        }
        let slice = map_dtype!(&self.slice, op, |b| map1(
            dev,
            op,
            b,
            layout,
            |s, d, src, dst| { ew::unary(s, kop, d, src, dst) }
        ));
        Ok(self.wrap(slice))
    }

    fn binary_impl<B: BinaryOpT>(
        &self,
        rhs: &Self,
        lhs_l: &Layout,
        rhs_l: &Layout,
    ) -> Result<Self> {
        let op = B::NAME;
        self.check_operand(rhs, op)?;
        check_same_shape(lhs_l, rhs_l, op)?;
        let Some(kop) = binary_op_from_name(op) else {
            return Err(
                self.not_implemented(&format!("binary {op}"), "no ROCm kernel for this binary op")
            );
        };
        let dev = &self.device;
        let label = format!("binary {op}");
        if let (RocmStorageSlice::F8E4M3(a), RocmStorageSlice::F8E4M3(b)) =
            (&self.slice, &rhs.slice)
        {
            let out = map2(dev, &label, (a, lhs_l), (b, rhs_l), |s, d, l, r, dst| {
                f8::binary(s, kop, d, l, r, dst)
            })?;
            return Ok(self.wrap(RocmStorageSlice::F8E4M3(out)));
        }
        let slice = map_dtype2!(&self.slice, &rhs.slice, op, |a, b| map2(
            dev,
            &label,
            (a, lhs_l),
            (b, rhs_l),
            |s, d, l, r, dst| ew::binary(s, kop, d, l, r, dst)
        ));
        Ok(self.wrap(slice))
    }

    fn where_cond(
        &self,
        layout: &Layout,
        t: &Self,
        t_l: &Layout,
        f: &Self,
        f_l: &Layout,
    ) -> Result<Self> {
        let op = "where_cond";
        self.check_device(t, op)?;
        self.check_device(f, op)?;
        t.check_dtype(f, op)?;
        check_same_shape(layout, t_l, op)?;
        check_same_shape(layout, f_l, op)?;
        let dev = &self.device;
        let slice = match &self.slice {
            RocmStorageSlice::U8(c) => where_with(dev, (c, layout), t, t_l, f, f_l)?,
            RocmStorageSlice::U32(c) => where_with(dev, (c, layout), t, t_l, f, f_l)?,
            RocmStorageSlice::I16(c) => where_with(dev, (c, layout), t, t_l, f, f_l)?,
            RocmStorageSlice::I32(c) => where_with(dev, (c, layout), t, t_l, f, f_l)?,
            RocmStorageSlice::I64(c) => where_with(dev, (c, layout), t, t_l, f, f_l)?,
            RocmStorageSlice::BF16(c) => where_with(dev, (c, layout), t, t_l, f, f_l)?,
            RocmStorageSlice::F16(c) => where_with(dev, (c, layout), t, t_l, f, f_l)?,
            RocmStorageSlice::F32(c) => where_with(dev, (c, layout), t, t_l, f, f_l)?,
            RocmStorageSlice::F64(c) => where_with(dev, (c, layout), t, t_l, f, f_l)?,
            RocmStorageSlice::F8E4M3(_) => return Err(f8_error("where_cond predicate")),
        };
        Ok(self.wrap(slice))
    }

    fn conv1d(
        &self,
        l: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ParamsConv1D,
    ) -> Result<Self> {
        let op = "conv1d";
        let spec = crate::conv::spec_1d(op, &format!("{params:?}"))?;
        self.conv_impl(op, false, l, kernel, kernel_l, &spec)
    }

    fn conv_transpose1d(
        &self,
        l: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ParamsConvTranspose1D,
    ) -> Result<Self> {
        let op = "conv_transpose1d";
        let spec = crate::conv::spec_1d(op, &format!("{params:?}"))?;
        self.conv_impl(op, true, l, kernel, kernel_l, &spec)
    }

    fn conv2d(
        &self,
        l: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ParamsConv2D,
    ) -> Result<Self> {
        let op = "conv2d";
        let spec = crate::conv::spec_2d(op, &format!("{params:?}"))?;
        self.conv_impl(op, false, l, kernel, kernel_l, &spec)
    }

    fn conv_transpose2d(
        &self,
        l: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ParamsConvTranspose2D,
    ) -> Result<Self> {
        let op = "conv_transpose2d";
        let spec = crate::conv::spec_2d(op, &format!("{params:?}"))?;
        self.conv_impl(op, true, l, kernel, kernel_l, &spec)
    }

    fn avg_pool2d(&self, layout: &Layout, k: (usize, usize), st: (usize, usize)) -> Result<Self> {
        let op = "avg_pool2d";
        let dev = &self.device;
        let dims =
            rocm_kernels::pool::pool2d_output_dims(layout.dims(), k, st).map_err(kernel_err(op))?;
        let n = dims.iter().product();
        let slice = map_dtype!(&self.slice, op, |b| map_out(
            dev,
            op,
            b,
            layout,
            n,
            |s, d, src, dst| rocm_kernels::pool::avg_pool2d(s, d, src, dst, k, st)
        ));
        Ok(self.wrap(slice))
    }

    fn max_pool2d(&self, layout: &Layout, k: (usize, usize), st: (usize, usize)) -> Result<Self> {
        let op = "max_pool2d";
        let dev = &self.device;
        let dims =
            rocm_kernels::pool::pool2d_output_dims(layout.dims(), k, st).map_err(kernel_err(op))?;
        let n = dims.iter().product();
        let slice = map_dtype!(&self.slice, op, |b| map_out(
            dev,
            op,
            b,
            layout,
            n,
            |s, d, src, dst| rocm_kernels::pool::max_pool2d(s, d, src, dst, k, st)
        ));
        Ok(self.wrap(slice))
    }

    fn upsample_nearest1d(&self, layout: &Layout, l_out: usize) -> Result<Self> {
        let op = "upsample_nearest1d";
        let dev = &self.device;
        let n = out_len(layout.dims(), 2, &[l_out]);
        let slice = map_dtype!(&self.slice, op, |b| map_out(
            dev,
            op,
            b,
            layout,
            n,
            |s, d, src, dst| rocm_kernels::pool::upsample_nearest1d(s, d, src, dst, l_out)
        ));
        Ok(self.wrap(slice))
    }

    fn upsample_nearest2d(&self, layout: &Layout, h_out: usize, w_out: usize) -> Result<Self> {
        let op = "upsample_nearest2d";
        let dev = &self.device;
        let n = out_len(layout.dims(), 2, &[h_out, w_out]);
        let slice = map_dtype!(&self.slice, op, |b| map_out(
            dev,
            op,
            b,
            layout,
            n,
            |s, d, src, dst| rocm_kernels::pool::upsample_nearest2d(s, d, src, dst, h_out, w_out)
        ));
        Ok(self.wrap(slice))
    }

    fn upsample_bilinear2d(
        &self,
        layout: &Layout,
        h_out: usize,
        w_out: usize,
        align_corners: bool,
        scale_h: Option<f64>,
        scale_w: Option<f64>,
    ) -> Result<Self> {
        let op = "upsample_bilinear2d";
        let dev = &self.device;
        let n = out_len(layout.dims(), 2, &[h_out, w_out]);
        let slice = map_dtype!(&self.slice, op, |b| map_out(
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
        Ok(self.wrap(slice))
    }

    fn gather(&self, l: &Layout, ids: &Self, ids_l: &Layout, dim: usize) -> Result<Self> {
        let op = "gather";
        self.check_device(ids, op)?;
        let dev = &self.device;
        let n = ids_l.shape().elem_count();
        // f8e4m3 values move as their bytes.
        if let RocmStorageSlice::F8E4M3(b) = &self.slice {
            let out = with_ids!(&ids.slice, op, |i| {
                gather_like(dev, op, false, (b, l), (i, ids_l), dim, n)
            })?;
            return Ok(self.wrap(RocmStorageSlice::F8E4M3(out)));
        }
        let slice = map_dtype!(&self.slice, op, |b| with_ids!(&ids.slice, op, |i| {
            gather_like(dev, op, false, (b, l), (i, ids_l), dim, n)
        }));
        Ok(self.wrap(slice))
    }

    fn scatter_set(
        &mut self,
        l: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<()> {
        let op = "scatter_set";
        self.check_device(ids, op)?;
        self.check_operand(src, op)?;
        let dev = self.device.clone();
        // f8e4m3 values move as their bytes.
        if let (RocmStorageSlice::F8E4M3(d), RocmStorageSlice::F8E4M3(s)) =
            (&mut self.slice, &src.slice)
        {
            return with_ids!(&ids.slice, op, |i| scatter_like_buf(
                &dev,
                op,
                ScatterKind::Set,
                (d, l),
                (i, ids_l),
                (s, src_l),
                dim
            ));
        }
        with_dst_src!(&mut self.slice, &src.slice, op, |d, s| with_ids!(
            &ids.slice,
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

    fn scatter_add_set(
        &mut self,
        l: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<()> {
        let op = "scatter_add_set";
        self.check_device(ids, op)?;
        self.check_operand(src, op)?;
        let dev = self.device.clone();
        if let (RocmStorageSlice::F8E4M3(d), RocmStorageSlice::F8E4M3(s)) =
            (&mut self.slice, &src.slice)
        {
            return with_ids!(&ids.slice, op, |i| f8_accumulate(
                &dev,
                op,
                false,
                (d, l),
                (i, ids_l),
                (s, src_l),
                dim
            ));
        }
        with_dst_src!(&mut self.slice, &src.slice, op, |d, s| with_ids!(
            &ids.slice,
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

    fn index_select(&self, ids: &Self, l: &Layout, ids_l: &Layout, dim: usize) -> Result<Self> {
        let op = "index_select";
        self.check_device(ids, op)?;
        let dev = &self.device;
        let mut out_dims = l.dims().to_vec();
        if let (Some(d), Some(&n_ids)) = (out_dims.get_mut(dim), ids_l.dims().first()) {
            *d = n_ids;
        }
        let n = out_dims.iter().product();
        // f8e4m3 values move as their bytes.
        if let RocmStorageSlice::F8E4M3(b) = &self.slice {
            let out = with_ids!(&ids.slice, op, |i| {
                gather_like(dev, op, true, (b, l), (i, ids_l), dim, n)
            })?;
            return Ok(self.wrap(RocmStorageSlice::F8E4M3(out)));
        }
        let slice = map_dtype!(&self.slice, op, |b| with_ids!(&ids.slice, op, |i| {
            gather_like(dev, op, true, (b, l), (i, ids_l), dim, n)
        }));
        Ok(self.wrap(slice))
    }

    /// A new contiguous copy of `self` (through `l`) with `src` accumulated at `ids` along `dim`.
    fn index_add(
        &self,
        l: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<Self> {
        let op = "index_add";
        self.check_device(ids, op)?;
        self.check_operand(src, op)?;
        // SAFETY: every element of `out` is written by the copy below before anything reads it.
        let mut out = unsafe { self.device.alloc_uninit(l.shape(), self.dtype())? };
        self.copy_strided_src(&mut out, 0, l)?;
        let out_l = Layout::contiguous(l.shape());
        let dev = self.device.clone();
        if let (RocmStorageSlice::F8E4M3(d), RocmStorageSlice::F8E4M3(s)) =
            (&mut out.slice, &src.slice)
        {
            with_ids!(&ids.slice, op, |i| f8_accumulate(
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
        with_dst_src!(&mut out.slice, &src.slice, op, |d, s| with_ids!(
            &ids.slice,
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

    fn matmul(
        &self,
        rhs: &Self,
        bmnk: (usize, usize, usize, usize),
        lhs_l: &Layout,
        rhs_l: &Layout,
    ) -> Result<Self> {
        let op = "matmul";
        self.check_device(rhs, op)?;
        let dev = &self.device;
        let n = bmnk.0 * bmnk.1 * bmnk.2;
        macro_rules! gemm {
            ($a:expr, $b:expr) => {{
                let mut out = dev.alloc(op, n)?;
                dev.gemm(
                    op,
                    bmnk,
                    (&$a.as_slice(), lhs_l),
                    (&$b.as_slice(), rhs_l),
                    &mut out,
                )?;
                out
            }};
        }
        let slice =
            match (&self.slice, &rhs.slice) {
                (RocmStorageSlice::F32(a), RocmStorageSlice::F32(b)) => {
                    RocmStorageSlice::F32(gemm!(a, b))
                }
                (RocmStorageSlice::F64(a), RocmStorageSlice::F64(b)) => {
                    RocmStorageSlice::F64(gemm!(a, b))
                }
                (RocmStorageSlice::F16(a), RocmStorageSlice::F16(b)) => {
                    RocmStorageSlice::F16(gemm!(a, b))
                }
                (RocmStorageSlice::BF16(a), RocmStorageSlice::BF16(b)) => {
                    RocmStorageSlice::BF16(gemm!(a, b))
                }
                (l, r) if l.dtype() != r.dtype() => {
                    return Err(Error::DTypeMismatchBinaryOp {
                        lhs: l.dtype(),
                        rhs: r.dtype(),
                        op,
                    }
                    .bt())
                }
                (l, _) => return Err(RocmError::unsupported(
                    op,
                    l.dtype(),
                    "matmul runs on the vendor BLAS, which multiplies f32, f64, f16 and bf16 only",
                )
                .into()),
            };
        Ok(self.wrap(slice))
    }

    fn copy_strided_src(&self, dst: &mut Self, dst_offset: usize, src_l: &Layout) -> Result<()> {
        let op = "copy_strided_src";
        self.check_device(dst, op)?;
        let dev = &self.device;
        with_same_buffers!(&self.slice, &mut dst.slice, op, |s, d| {
            copy_strided_buf(dev, s, d, dst_offset, src_l)
        })
    }

    fn copy2d(
        &self,
        dst: &mut Self,
        d1: usize,
        d2: usize,
        src_s: usize,
        dst_s: usize,
        src_o: usize,
        dst_o: usize,
    ) -> Result<()> {
        let op = "copy2d";
        self.check_device(dst, op)?;
        let dev = &self.device;
        with_same_buffers!(&self.slice, &mut dst.slice, op, |s, d| {
            copy2d_buf(dev, s, d, d1, d2, src_s, dst_s, src_o, dst_o)
        })
    }

    fn const_set(&mut self, value: Scalar, layout: &Layout) -> Result<()> {
        let dev = &self.device;
        match (&mut self.slice, value) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::op::{self as cop, BinaryOpT, UnaryOpT};

    fn unary_name<B: UnaryOpT>() -> &'static str {
        B::NAME
    }

    fn binary_name<B: BinaryOpT>() -> &'static str {
        B::NAME
    }

    #[test]
    fn every_candle_unary_op_maps_to_a_kernel_op() {
        use ew::UnaryOp as U;
        let pairs: &[(&str, U)] = &[
            (unary_name::<cop::Exp>(), U::Exp),
            (unary_name::<cop::Log>(), U::Log),
            (unary_name::<cop::Sin>(), U::Sin),
            (unary_name::<cop::Cos>(), U::Cos),
            (unary_name::<cop::Tanh>(), U::Tanh),
            (unary_name::<cop::Neg>(), U::Neg),
            (unary_name::<cop::Recip>(), U::Recip),
            (unary_name::<cop::Sqr>(), U::Sqr),
            (unary_name::<cop::Sqrt>(), U::Sqrt),
            (unary_name::<cop::Gelu>(), U::Gelu),
            (unary_name::<cop::GeluErf>(), U::GeluErf),
            (unary_name::<cop::Erf>(), U::Erf),
            (unary_name::<cop::Silu>(), U::Silu),
            (unary_name::<cop::Abs>(), U::Abs),
            (unary_name::<cop::Ceil>(), U::Ceil),
            (unary_name::<cop::Floor>(), U::Floor),
            (unary_name::<cop::Round>(), U::Round),
            (unary_name::<cop::Relu>(), U::Relu),
            (unary_name::<cop::Sign>(), U::Sign),
        ];
        for (name, expected) in pairs {
            let got = unary_op_from_name(name).unwrap_or_else(|| panic!("{name} unmapped"));
            assert_eq!(
                std::mem::discriminant(&got),
                std::mem::discriminant(expected),
                "{name}"
            );
        }
        assert!(unary_op_from_name("not_an_op").is_none());
    }

    #[test]
    fn every_candle_binary_op_maps_to_a_kernel_op() {
        use ew::BinaryOp as B;
        let pairs: &[(&str, B)] = &[
            (binary_name::<cop::Add>(), B::Add),
            (binary_name::<cop::Sub>(), B::Sub),
            (binary_name::<cop::Mul>(), B::Mul),
            (binary_name::<cop::Div>(), B::Div),
            (binary_name::<cop::Minimum>(), B::Minimum),
            (binary_name::<cop::Maximum>(), B::Maximum),
        ];
        for (name, expected) in pairs {
            let got = binary_op_from_name(name).unwrap_or_else(|| panic!("{name} unmapped"));
            assert_eq!(
                std::mem::discriminant(&got),
                std::mem::discriminant(expected),
                "{name}"
            );
        }
        assert!(binary_op_from_name("pow").is_none());
    }

    #[test]
    fn comparisons_map_one_to_one() {
        for (c, k, name) in [
            (CmpOp::Eq, ew::CmpOp::Eq, "cmp eq"),
            (CmpOp::Ne, ew::CmpOp::Ne, "cmp ne"),
            (CmpOp::Lt, ew::CmpOp::Lt, "cmp lt"),
            (CmpOp::Le, ew::CmpOp::Le, "cmp le"),
            (CmpOp::Gt, ew::CmpOp::Gt, "cmp gt"),
            (CmpOp::Ge, ew::CmpOp::Ge, "cmp ge"),
        ] {
            assert_eq!(
                std::mem::discriminant(&cmp_op(c)),
                std::mem::discriminant(&k)
            );
            assert_eq!(cmp_name(c), name);
        }
    }

    #[test]
    fn kernel_dtype_names_match_candle_dtype_names() {
        assert_eq!(u8::NAME, DType::U8.as_str());
        assert_eq!(u32::NAME, DType::U32.as_str());
        assert_eq!(i16::NAME, DType::I16.as_str());
        assert_eq!(i32::NAME, DType::I32.as_str());
        assert_eq!(i64::NAME, DType::I64.as_str());
        assert_eq!(bf16::NAME, DType::BF16.as_str());
        assert_eq!(f16::NAME, DType::F16.as_str());
        assert_eq!(f32::NAME, DType::F32.as_str());
        assert_eq!(f64::NAME, DType::F64.as_str());
    }

    #[test]
    fn f8_and_dummy_errors_name_op_and_dtype() {
        let s = f8_error("reduce sum").to_string();
        assert!(s.contains("reduce sum") && s.contains("f8e4m3"), "{s}");
        assert!(s.contains("not implemented yet on ROCm"), "{s}");
        let s = dummy_error("zeros", DType::F4).to_string();
        assert!(s.contains("zeros") && s.contains("f4"), "{s}");
    }
}
