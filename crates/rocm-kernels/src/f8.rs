//! Typed launch wrappers for the `f8` kernel module: f8e4m3 arithmetic (OCP e4m3fn, Candle's
//! `float8::F8E4M3`), with values stored as their bytes (`u8` buffers).
//!
//! Every op computes, bit for bit, what candle-core 0.11.1's CPU backend computes with the
//! `float8` 0.7 crate on x86_64 (see `kernels/f8.hip` for the rules): each f8 operation is one
//! f32 operation on the operands' exact values, rounded to f8 (nearest even, saturating at
//! ±448); composite ops (`gelu`, `silu`, `elu`, `affine`, the accumulations) round after every
//! step exactly as Candle's f8 formulas do; a NaN produced by an invalid operation (0/0, the
//! square root or logarithm of a negative number, a negative base to a non-integer power) is
//! x86's negative default NaN (byte `0xFF`), a NaN operand gives `0x7F`.
//!
//! * [`unary`]: every Candle unary op except sigmoid (Candle has no f8 sigmoid);
//! * [`affine`], [`powf`], [`elu`]: the `f64` parameters are rounded to f8 first, as Candle's
//!   `T::from_f64`;
//! * [`binary`] (add, sub, mul, div, minimum, maximum) and [`cmp`] (u8 output);
//! * [`scatter_add`] and [`index_add`]: the terms of one destination element are added in
//!   Candle's order (increasing along `dim`), one thread per destination column, so the
//!   rounded sums are Candle's; the destination must be contiguous (as Candle's CPU backend
//!   requires). Out-of-range indices are skipped and recorded in a caller-provided device
//!   record of [`ERR_WORDS`] `u32`s (zeroed by the caller), in the format of the `indexing`
//!   module's flag: decode it with [`IndexError::decode`](crate::indexing::IndexError::decode).
//!
//! Layouts follow [`crate::elementwise`]: strided inputs ([`Strided`], stride 0 broadcasts),
//! contiguous outputs, every view checked before a launch (a bad layout is
//! [`Error::Layout`](crate::Error::Layout)), nothing launched for an empty shape.

use hip_core::{DeviceBuffer, DeviceSliceMut, Stream};

use crate::dtype::KernelDType;
use crate::elementwise::{
    check_operand, function, launch_binary_like, launch_config, launch_unary_like, layout_err,
    numel, unsupported, BinaryOp, CmpOp, Scalar, Strided, UnaryOp,
};
use crate::error::Result;
use crate::indexing::IndexOp;
use crate::layout::is_contiguous;

/// The kernel module.
const MODULE: &str = "f8";
/// The dtype's name in kernel names (`uexp_f8e4m3`) and errors.
pub const DTYPE: &str = "f8e4m3";
/// Words of the out-of-range index record of [`scatter_add`] and [`index_add`].
pub const ERR_WORDS: usize = 8;

/// Whether [`unary`] has `op`: every unary op of Candle (all but [`UnaryOp::Sigmoid`], which
/// is not a Candle `UnaryOpT`).
pub fn supports_unary(op: UnaryOp) -> bool {
    op != UnaryOp::Sigmoid
}

/// Launches `kernel(numel, num_dims, info, inp, out, f64 scalars...)` of the `f8` module.
fn launch_map1(
    stream: &Stream,
    op: &str,
    kernel: &str,
    dims: &[usize],
    src: Strided<'_, u8>,
    dst: &mut DeviceSliceMut<'_, u8>,
    scalars: &[f64],
) -> Result<()> {
    let scalars: Vec<Scalar> = scalars.iter().map(|&v| Scalar::F64(v)).collect();
    launch_unary_like(stream, op, MODULE, kernel, dims, src, dst, &scalars)
}

/// `dst = op(src)` element-wise over `dims` (f8e4m3 bytes in and out; `dst` contiguous).
/// [`UnaryOp::Sigmoid`] is refused (see [`supports_unary`]).
pub fn unary(
    stream: &Stream,
    op: UnaryOp,
    dims: &[usize],
    src: Strided<'_, u8>,
    dst: &mut DeviceSliceMut<'_, u8>,
) -> Result<()> {
    let op_name = format!("unary {}", op.name());
    if !supports_unary(op) {
        return Err(unsupported(
            &op_name,
            DTYPE,
            "Candle defines no f8e4m3 version of this op",
        ));
    }
    let kernel = format!("u{}_{DTYPE}", op.name());
    launch_map1(stream, &op_name, &kernel, dims, src, dst, &[])
}

/// `dst = src * mul + add`, two f8 operations (`mul` and `add` rounded to f8 first).
pub fn affine(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, u8>,
    dst: &mut DeviceSliceMut<'_, u8>,
    mul: f64,
    add: f64,
) -> Result<()> {
    let kernel = format!("affine_{DTYPE}");
    launch_map1(stream, "affine", &kernel, dims, src, dst, &[mul, add])
}

/// `dst = src ^ exponent` (the exponent rounded to f8 first; C's `pow` special cases).
pub fn powf(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, u8>,
    dst: &mut DeviceSliceMut<'_, u8>,
    exponent: f64,
) -> Result<()> {
    let kernel = format!("powf_{DTYPE}");
    launch_map1(stream, "powf", &kernel, dims, src, dst, &[exponent])
}

/// `dst = src` where its sign bit is clear, else `(exp(src) - 1) * alpha` (three f8
/// operations; `alpha` rounded to f8 first).
pub fn elu(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, u8>,
    dst: &mut DeviceSliceMut<'_, u8>,
    alpha: f64,
) -> Result<()> {
    let kernel = format!("elu_{DTYPE}");
    launch_map1(stream, "elu", &kernel, dims, src, dst, &[alpha])
}

/// `dst = op(lhs, rhs)` element-wise over `dims`; `dst` is contiguous.
pub fn binary(
    stream: &Stream,
    op: BinaryOp,
    dims: &[usize],
    lhs: Strided<'_, u8>,
    rhs: Strided<'_, u8>,
    dst: &mut DeviceSliceMut<'_, u8>,
) -> Result<()> {
    let op_name = format!("binary {}", op.name());
    let kernel = format!("b{}_{DTYPE}", op.name());
    launch_binary_like(stream, &op_name, MODULE, &kernel, dims, lhs, rhs, dst)
}

/// `dst = op(lhs, rhs) as u8` (1 or 0) element-wise over `dims`: float8's comparisons (NaN
/// compares false, `ne` true; -0 equals +0).
pub fn cmp(
    stream: &Stream,
    op: CmpOp,
    dims: &[usize],
    lhs: Strided<'_, u8>,
    rhs: Strided<'_, u8>,
    dst: &mut DeviceSliceMut<'_, u8>,
) -> Result<()> {
    let op_name = format!("cmp {}", op.name());
    let kernel = format!("{}_{DTYPE}", op.name());
    launch_binary_like(stream, &op_name, MODULE, &kernel, dims, lhs, rhs, dst)
}

// ------------------------------------------------------------------------------------------
// Ordered accumulations
// ------------------------------------------------------------------------------------------

/// The shape checks of both accumulations: integer ids, `dim` in range, `dst_dims` equal to
/// `src_dims` outside `dim`, a contiguous destination (columns must not share elements), an
/// error record of at least [`ERR_WORDS`] words.
fn check_accumulation<I: KernelDType>(
    op: &str,
    dst_dims: &[usize],
    dst_strides: &[usize],
    src_dims: &[usize],
    dim: usize,
    err_len: usize,
) -> Result<()> {
    if I::IS_FLOAT {
        return Err(unsupported(
            op,
            &format!("{} ids", I::NAME),
            "ids are integer tensors (u8, u32, i16, i32, i64)",
        ));
    }
    if dim >= dst_dims.len() {
        return Err(layout_err(
            op,
            format!("dim {dim} is out of range for the shape {dst_dims:?}"),
        ));
    }
    let same_but_dim = dst_dims.len() == src_dims.len()
        && dst_dims
            .iter()
            .zip(src_dims)
            .enumerate()
            .all(|(i, (a, b))| i == dim || a == b);
    if !same_but_dim {
        return Err(layout_err(
            op,
            format!(
                "destination and source: the shapes {dst_dims:?} and {src_dims:?} must agree \
                 except along dim {dim}"
            ),
        ));
    }
    if !is_contiguous(dst_dims, dst_strides) {
        return Err(layout_err(
            op,
            format!(
                "f8e4m3 accumulation needs a contiguous destination (as Candle's CPU backend), \
                 got strides {dst_strides:?} for {dst_dims:?}"
            ),
        ));
    }
    if err_len < ERR_WORDS {
        return Err(layout_err(
            op,
            format!("the error record holds {err_len} words, {ERR_WORDS} are needed"),
        ));
    }
    Ok(())
}

/// The column shape of an accumulation over `dims` along `dim` (`dim`'s entry set to 1) and
/// the destination strides with `dim`'s entry 0 (the index supplies that part).
fn columns(dims: &[usize], dst_strides: &[usize], dim: usize) -> (Vec<usize>, Vec<usize>) {
    let mut cols = dims.to_vec();
    cols[dim] = 1;
    let mut rest = dst_strides.to_vec();
    rest[dim] = 0;
    (cols, rest)
}

/// `dims ++ strides...` on the device (always: the kernels walk columns, so there is no
/// contiguous fast path).
fn column_info(stream: &Stream, dims: &[usize], strides: &[&[usize]]) -> Result<DeviceBuffer<u64>> {
    let mut info: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
    for s in strides {
        info.extend(s.iter().map(|&x| x as u64));
    }
    Ok(stream.alloc_from_host_async(&info)?)
}

/// In place, `dst.scatter_add_set(ids, src, dim)` for f8e4m3: `dst[.., ids[.., i, ..], ..] +=
/// src[.., i, ..]`, the terms of each destination element added in increasing `i` (Candle's
/// order), each addition rounded to f8.
///
/// * `dst`: contiguous (`dst_dims`, `dst_strides` its contiguous strides), updated in place;
/// * `ids`, `src`: strided, `ids_dims == src_dims`, equal to `dst_dims` outside `dim`;
/// * `err`: at least [`ERR_WORDS`] words, zeroed before the first launch: an out-of-range
///   index is skipped and recorded there (op [`IndexOp::ScatterAdd`]); the index type's
///   largest value is skipped silently, as in Candle.
#[allow(clippy::too_many_arguments)]
pub fn scatter_add<I: KernelDType>(
    stream: &Stream,
    dst: &mut DeviceSliceMut<'_, u8>,
    dst_dims: &[usize],
    dst_strides: &[usize],
    ids: Strided<'_, I>,
    ids_dims: &[usize],
    src: Strided<'_, u8>,
    src_dims: &[usize],
    dim: usize,
    err: &mut DeviceSliceMut<'_, u32>,
) -> Result<()> {
    let op = IndexOp::ScatterAdd.name();
    check_accumulation::<I>(op, dst_dims, dst_strides, src_dims, dim, err.len())?;
    if ids_dims != src_dims {
        return Err(layout_err(
            op,
            format!("the ids' shape {ids_dims:?} must equal the source's {src_dims:?}"),
        ));
    }
    numel(op, dst_dims)?;
    check_operand(op, "the destination", dst_dims, dst_strides, dst.len())?;
    check_operand(op, "the ids", ids_dims, ids.strides, ids.data.len())?;
    check_operand(op, "the source", src_dims, src.strides, src.data.len())?;
    if numel(op, src_dims)? == 0 {
        return Ok(());
    }
    let (cols, dst_rest) = columns(src_dims, dst_strides, dim);
    let n_cols = numel(op, &cols)?;
    let info = column_info(stream, &cols, &[ids.strides, src.strides, &dst_rest])?;
    let f = function(stream, MODULE, &format!("{op}_{}_{DTYPE}", I::NAME))?;
    // SAFETY: the kernel takes (u64 n_cols, u64 num_dims, const u64* info, const I* ids,
    // const u8* src, u8* dst, u64 ids_dim, u64 ids_dim_stride, u64 src_dim_stride, u64 dst_dim,
    // u64 dst_dim_stride, u32* err). It reads info[0..num_dims * 4) (that buffer, alive until
    // the launch is queued); for each column (coordinates within src_dims, `dim` 0) and j <
    // src_dims[dim] it reads ids and src at coordinates within their checked dims (inside
    // their views); it writes dst only for indices in 0..dst_dims[dim] at coordinates within
    // dst_dims (equal to src_dims outside dim, checked), i.e. inside dst's checked extent, and
    // err[0..5) (err.len() >= ERR_WORDS, checked). Columns touch disjoint dst elements (dst is
    // contiguous, checked), so no two threads write one byte.
    unsafe {
        f.builder(stream, launch_config(stream, n_cols))
            .arg(n_cols as u64)
            .arg(cols.len() as u64)
            .arg(&info)
            .arg(ids.data)
            .arg(src.data)
            .arg(&mut *dst)
            .arg(src_dims[dim] as u64)
            .arg(ids.strides[dim] as u64)
            .arg(src.strides[dim] as u64)
            .arg(dst_dims[dim] as u64)
            .arg(dst_strides[dim] as u64)
            .arg(&mut *err)
            .launch()?;
    }
    drop(info);
    Ok(())
}

/// In place, the accumulation of `index_add` for f8e4m3: `dst[.., ids[i], ..] += src[.., i,
/// ..]`, the terms of each destination element added in increasing `i` (Candle's order), each
/// addition rounded to f8. (Candle's `index_add` returns `self` plus this: copy `self` into
/// `dst` first.)
///
/// * `dst`: contiguous (`dst_dims`, `dst_strides`), updated in place;
/// * `ids`: strided, 1-D, `ids_dims == [src_dims[dim]]`;
/// * `src`: strided, `src_dims`, equal to `dst_dims` outside `dim`;
/// * `err`: as for [`scatter_add`] (op [`IndexOp::IndexAdd`]).
#[allow(clippy::too_many_arguments)]
pub fn index_add<I: KernelDType>(
    stream: &Stream,
    dst: &mut DeviceSliceMut<'_, u8>,
    dst_dims: &[usize],
    dst_strides: &[usize],
    ids: Strided<'_, I>,
    ids_dims: &[usize],
    src: Strided<'_, u8>,
    src_dims: &[usize],
    dim: usize,
    err: &mut DeviceSliceMut<'_, u32>,
) -> Result<()> {
    let op = IndexOp::IndexAdd.name();
    check_accumulation::<I>(op, dst_dims, dst_strides, src_dims, dim, err.len())?;
    if ids_dims != [src_dims[dim]] {
        return Err(layout_err(
            op,
            format!(
                "the ids must be 1-D with the source's size {} along dim {dim}, got the shape \
                 {ids_dims:?}",
                src_dims[dim]
            ),
        ));
    }
    numel(op, dst_dims)?;
    check_operand(op, "the destination", dst_dims, dst_strides, dst.len())?;
    check_operand(op, "the ids", ids_dims, ids.strides, ids.data.len())?;
    check_operand(op, "the source", src_dims, src.strides, src.data.len())?;
    if numel(op, src_dims)? == 0 {
        return Ok(());
    }
    let (cols, dst_rest) = columns(src_dims, dst_strides, dim);
    let n_cols = numel(op, &cols)?;
    let info = column_info(stream, &cols, &[src.strides, &dst_rest])?;
    let f = function(stream, MODULE, &format!("{op}_{}_{DTYPE}", I::NAME))?;
    // SAFETY: the kernel takes (u64 n_cols, u64 num_dims, const u64* info, const I* ids,
    // const u8* src, u8* dst, u64 n_ids, u64 ids_stride, u64 src_dim_stride, u64 dst_dim,
    // u64 dst_dim_stride, u32* err). It reads info[0..num_dims * 3) (alive until queued); ids
    // at j * ids_stride and src at coordinates within src_dims, for j < n_ids = src_dims[dim]
    // (inside their checked views); it writes dst only for indices in 0..dst_dims[dim] at
    // coordinates within dst_dims (equal to src_dims outside dim, checked), and err[0..5)
    // (err.len() >= ERR_WORDS). Columns touch disjoint dst elements (dst contiguous).
    unsafe {
        f.builder(stream, launch_config(stream, n_cols))
            .arg(n_cols as u64)
            .arg(cols.len() as u64)
            .arg(&info)
            .arg(ids.data)
            .arg(src.data)
            .arg(&mut *dst)
            .arg(src_dims[dim] as u64)
            .arg(ids.strides[0] as u64)
            .arg(src.strides[dim] as u64)
            .arg(dst_dims[dim] as u64)
            .arg(dst_strides[dim] as u64)
            .arg(&mut *err)
            .launch()?;
    }
    drop(info);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_is_in_the_source() {
        let src = crate::modules::full_source(MODULE).expect("f8 module");
        for op in UnaryOp::ALL {
            assert_eq!(
                src.contains(&format!("F8_UNARY({})\n", op.name())),
                supports_unary(op),
                "{op:?}"
            );
        }
        for op in BinaryOp::ALL {
            assert!(
                src.contains(&format!("F8_BINARY(b{}, ", op.name())),
                "{op:?}"
            );
        }
        for op in CmpOp::ALL {
            assert!(
                src.contains(&format!("F8_BINARY({}, ", op.name())),
                "{op:?}"
            );
        }
        for k in ["affine", "powf", "elu"] {
            assert!(src.contains(&format!("RK_KERNEL void {k}_f8e4m3(")), "{k}");
        }
        for i in ["u8", "u32", "i16", "i32", "i64"] {
            assert!(src.contains(&format!("F8_INDEXING({i})")), "{i}");
        }
        for op in [IndexOp::ScatterAdd, IndexOp::IndexAdd] {
            assert!(
                src.contains(&format!(
                    "#define F8_ERR_{} {}u",
                    op.name().to_uppercase(),
                    op.code()
                )),
                "{op:?}: the code differs from the indexing module's"
            );
        }
        // The conversions are shared with `cast` through the prelude, not copied.
        assert_eq!(src.matches("u8 rk_f64_to_e4m3(double x)").count(), 1);
        let cast = crate::modules::full_source("cast").expect("cast module");
        assert_eq!(cast.matches("u8 rk_f64_to_e4m3(double x)").count(), 1);
    }

    #[test]
    fn accumulation_checks() {
        let op = "t";
        assert!(check_accumulation::<u32>(op, &[2, 3], &[3, 1], &[2, 5], 1, 8).is_ok());
        assert!(check_accumulation::<f32>(op, &[2, 3], &[3, 1], &[2, 5], 1, 8).is_err());
        assert!(check_accumulation::<u32>(op, &[2, 3], &[3, 1], &[2, 5], 2, 8).is_err());
        assert!(check_accumulation::<u32>(op, &[2, 3], &[3, 1], &[4, 3], 1, 8).is_err());
        // A transposed or broadcast destination would share elements between columns.
        assert!(check_accumulation::<u32>(op, &[2, 3], &[1, 2], &[2, 5], 1, 8).is_err());
        assert!(check_accumulation::<u32>(op, &[2, 3], &[0, 1], &[2, 5], 1, 8).is_err());
        assert!(check_accumulation::<i64>(op, &[2, 3], &[3, 1], &[2, 5], 1, 4).is_err());
        let (cols, rest) = columns(&[2, 5, 4], &[12, 4, 1], 1);
        assert_eq!((cols, rest), (vec![2, 1, 4], vec![12, 0, 1]));
    }
}
