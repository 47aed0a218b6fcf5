//! Element-wise ops: every Candle unary op, the binary ops (with broadcasting through strides),
//! `affine`, `powf`, `elu`, comparisons, `where_cond` and `to_dtype` casts, for any layout.
//! f8e4m3 is computed bit for bit as candle's CPU backend computes it (`rocm_kernels::f8`),
//! selected and copied as bytes.

use candle_core::backend::BackendStorage;
use candle_core::op::{BinaryOpT, CmpOp, UnaryOpT};
use candle_core::{DType, Error, Layout, Result};
use half::{bf16, f16};
use hip_core::DeviceBuffer;
use rocm_kernels::elementwise as ew;
use rocm_kernels::f8;
use rocm_kernels::KernelDType;

use crate::buffers::{copy_view, map1, map2, view};
use crate::device::RocmDevice;
use crate::error::{kernel_err, RocmError};
use crate::ops::dispatch::{dummy_error, f8_error, map_dtype};
use crate::storage::{RocmStorage, RocmStorageSlice};

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

/// `x * mul + add` (every dtype; f8e4m3 as candle's CPU backend computes it).
pub(crate) fn affine(x: &RocmStorage, layout: &Layout, mul: f64, add: f64) -> Result<RocmStorage> {
    let op = "affine";
    let dev = x.device();
    if let RocmStorageSlice::F8E4M3(b) = x.as_slice() {
        let out = map1(dev, op, b, layout, |s, d, src, dst| {
            f8::affine(s, d, src, dst, mul, add)
        })?;
        return Ok(x.wrap(RocmStorageSlice::F8E4M3(out)));
    }
    let slice = map_dtype!(x.as_slice(), op, |b| map1(
        dev,
        op,
        b,
        layout,
        |s, d, src, dst| { ew::affine(s, d, src, dst, mul, add) }
    ));
    Ok(x.wrap(slice))
}

/// `x^e` (float dtypes).
pub(crate) fn powf(x: &RocmStorage, layout: &Layout, e: f64) -> Result<RocmStorage> {
    let op = "powf";
    let dev = x.device();
    let why = "powf is defined for float dtypes only (as in candle's CPU and CUDA backends)";
    if let RocmStorageSlice::F8E4M3(b) = x.as_slice() {
        let out = map1(dev, op, b, layout, |s, d, src, dst| {
            f8::powf(s, d, src, dst, e)
        })?;
        return Ok(x.wrap(RocmStorageSlice::F8E4M3(out)));
    }
    let slice = map_float!(x.as_slice(), op, why, |b| map1(
        dev,
        op,
        b,
        layout,
        |s, d, src, dst| { ew::powf(s, d, src, dst, e) }
    ));
    Ok(x.wrap(slice))
}

/// `elu(x, alpha)` (float dtypes).
pub(crate) fn elu(x: &RocmStorage, layout: &Layout, alpha: f64) -> Result<RocmStorage> {
    let op = "elu";
    let dev = x.device();
    let why = "elu is defined for float dtypes only (as in candle's CPU and CUDA backends)";
    if let RocmStorageSlice::F8E4M3(b) = x.as_slice() {
        let out = map1(dev, op, b, layout, |s, d, src, dst| {
            f8::elu(s, d, src, dst, alpha)
        })?;
        return Ok(x.wrap(RocmStorageSlice::F8E4M3(out)));
    }
    let slice = map_float!(x.as_slice(), op, why, |b| map1(
        dev,
        op,
        b,
        layout,
        |s, d, src, dst| { ew::elu(s, d, src, dst, alpha) }
    ));
    Ok(x.wrap(slice))
}

/// The comparison `op` of two same-shape operands into a `u8` mask.
pub(crate) fn cmp(
    op: CmpOp,
    lhs: &RocmStorage,
    rhs: &RocmStorage,
    lhs_l: &Layout,
    rhs_l: &Layout,
) -> Result<RocmStorage> {
    let name = cmp_name(op);
    lhs.check_operand(rhs, "cmp")?;
    check_same_shape(lhs_l, rhs_l, "cmp")?;
    let dev = lhs.device();
    let kop = cmp_op(op);
    macro_rules! run {
        ($a:expr, $b:expr) => {
            map2::<_, u8>(dev, name, ($a, lhs_l), ($b, rhs_l), |s, d, l, r, dst| {
                ew::cmp(s, kop, d, l, r, dst)
            })?
        };
    }
    let out = match (lhs.as_slice(), rhs.as_slice()) {
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
    Ok(lhs.wrap(RocmStorageSlice::U8(out)))
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

/// `x` (viewed through `layout`) as a new contiguous storage of `dtype`: a strided copy for
/// the same dtype (f8e4m3 too, as bytes), else a cast.
pub(crate) fn to_dtype(x: &RocmStorage, layout: &Layout, dtype: DType) -> Result<RocmStorage> {
    let dev = x.device();
    let op = "to_dtype";
    let slice = match x.as_slice() {
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
    Ok(x.wrap(slice))
}

/// The Candle unary op `B` (every kernel dtype and f8e4m3).
pub(crate) fn unary<B: UnaryOpT>(x: &RocmStorage, layout: &Layout) -> Result<RocmStorage> {
    // Named as the kernel wrappers name it, so that their errors read "unary exp: ...".
    let name = format!("unary {}", B::NAME);
    let op = name.as_str();
    let Some(kop) = unary_op_from_name(B::NAME) else {
        return Err(x.not_implemented(op, "no ROCm kernel for this unary op"));
    };
    let dev = x.device();
    if let RocmStorageSlice::F8E4M3(b) = x.as_slice() {
        let out = map1(dev, op, b, layout, |s, d, src, dst| {
            f8::unary(s, kop, d, src, dst)
        })?;
        return Ok(x.wrap(RocmStorageSlice::F8E4M3(out)));
    }
    let slice = map_dtype!(x.as_slice(), op, |b| map1(
        dev,
        op,
        b,
        layout,
        |s, d, src, dst| { ew::unary(s, kop, d, src, dst) }
    ));
    Ok(x.wrap(slice))
}

/// The Candle binary op `B` of two same-shape operands (broadcasting is in the strides).
pub(crate) fn binary<B: BinaryOpT>(
    lhs: &RocmStorage,
    rhs: &RocmStorage,
    lhs_l: &Layout,
    rhs_l: &Layout,
) -> Result<RocmStorage> {
    let op = B::NAME;
    lhs.check_operand(rhs, op)?;
    check_same_shape(lhs_l, rhs_l, op)?;
    let Some(kop) = binary_op_from_name(op) else {
        return Err(
            lhs.not_implemented(&format!("binary {op}"), "no ROCm kernel for this binary op")
        );
    };
    let dev = lhs.device();
    let label = format!("binary {op}");
    if let (RocmStorageSlice::F8E4M3(a), RocmStorageSlice::F8E4M3(b)) =
        (lhs.as_slice(), rhs.as_slice())
    {
        let out = map2(dev, &label, (a, lhs_l), (b, rhs_l), |s, d, l, r, dst| {
            f8::binary(s, kop, d, l, r, dst)
        })?;
        return Ok(lhs.wrap(RocmStorageSlice::F8E4M3(out)));
    }
    let slice = map_dtype2!(lhs.as_slice(), rhs.as_slice(), op, |a, b| map2(
        dev,
        &label,
        (a, lhs_l),
        (b, rhs_l),
        |s, d, l, r, dst| ew::binary(s, kop, d, l, r, dst)
    ));
    Ok(lhs.wrap(slice))
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
    Ok(match (t.as_slice(), f.as_slice()) {
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

/// `t` where `cond` is non-zero, else `f` (same shapes; the condition of any kernel dtype).
pub(crate) fn where_cond(
    cond: &RocmStorage,
    layout: &Layout,
    t: &RocmStorage,
    t_l: &Layout,
    f: &RocmStorage,
    f_l: &Layout,
) -> Result<RocmStorage> {
    let op = "where_cond";
    cond.check_device(t, op)?;
    cond.check_device(f, op)?;
    t.check_dtype(f, op)?;
    check_same_shape(layout, t_l, op)?;
    check_same_shape(layout, f_l, op)?;
    let dev = cond.device();
    let slice = match cond.as_slice() {
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
    Ok(cond.wrap(slice))
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
}
