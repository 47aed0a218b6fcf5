//! Typed launch wrappers for the element-wise kernel families: unary (`unary`, `affine`
//! modules), binary and comparisons (`binary`), casts (`cast`), `where` (`ternary`) and fills /
//! 2-D copies (`fill`).
//!
//! Every wrapper validates its layouts before launching, and reports problems as
//! [`Error::Layout`] (ranks differ, a view too short for its strides, a destination of the wrong
//! length) or [`Error::Unsupported`] (no kernel for this op and dtype); it never panics and never
//! launches a kernel that could read or write out of bounds. An empty shape returns `Ok(())`
//! without launching anything.
//!
//! Operands are [`Strided`] views: the [`DeviceSlice`] starts at the layout's start offset and
//! `strides` are in elements (stride 0 broadcasts). Outputs are contiguous, except for
//! [`const_set`], which fills a strided destination in place.
//!
//! Launches are 1-D grid-stride loops: 256 threads per block, at most 16 blocks per
//! multiprocessor. When every operand is contiguous (`info` is null) and 16-byte aligned, the
//! kernels move 16 bytes per access; strided operands use 32-bit index math below 2^31
//! elements and 64-bit above.
//!
//! ## Semantics
//! The kernels follow Candle's CPU backend (candle-core 0.11), with these definitions where it
//! has none:
//! * f16/bf16 math runs in f32 and rounds once at the end (Candle rounds some composite ops, e.g.
//!   `gelu`, after every step: results may differ in the last bit);
//! * integer `neg` (signed types) and `sqr`, and integer add/sub/mul/affine, wrap on overflow;
//!   Candle's CPU backend has no integer `neg`/`sqr` (it panics);
//! * integer division never traps: `x / 0 == 0` and `MIN / -1 == MIN` (Candle panics);
//! * f64 -> f16/bf16 casts round correctly to nearest even (the `half` crate may round twice).

use hip_core::{
    DeviceBuffer, DeviceSlice, DeviceSliceMut, Function, KernelArg, KernelArgs, LaunchConfig,
    NullPtr, Stream,
};

use crate::dtype::KernelDType;
use crate::error::{Error, Result};
use crate::layout::{info_array, merge_dims};

/// Threads per block of every element-wise launch.
const BLOCK_SIZE: u32 = 256;
/// Grid-stride launches use at most this many blocks per multiprocessor.
const BLOCKS_PER_MULTIPROCESSOR: usize = 16;

/// Unary element-wise ops (module `unary`, kernels `u{name}_{dtype}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `e^x`.
    Exp,
    /// Natural logarithm.
    Log,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// Hyperbolic tangent.
    Tanh,
    /// `-x` (wrapping for signed integers; not for unsigned ones).
    Neg,
    /// `1 / x`.
    Recip,
    /// `x * x` (wrapping for integers).
    Sqr,
    /// Square root.
    Sqrt,
    /// Gelu, tanh approximation (0 on integers, as in Candle).
    Gelu,
    /// Gelu, exact (erf) form (0 on integers, as in Candle).
    GeluErf,
    /// Error function (0 on integers, as in Candle).
    Erf,
    /// `x * sigmoid(x)` (0 on integers, as in Candle).
    Silu,
    /// Absolute value (wrapping: `abs(MIN) == MIN` for signed integers).
    Abs,
    /// Round up (identity on integers).
    Ceil,
    /// Round down (identity on integers).
    Floor,
    /// Round half away from zero (identity on integers).
    Round,
    /// `max(x, 0)` (NaN -> 0).
    Relu,
    /// -1, 0 or 1 (NaN -> 0; 0 or 1 for unsigned integers).
    Sign,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
}

impl UnaryOp {
    /// Every unary op.
    pub const ALL: [UnaryOp; 20] = [
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tanh,
        UnaryOp::Neg,
        UnaryOp::Recip,
        UnaryOp::Sqr,
        UnaryOp::Sqrt,
        UnaryOp::Gelu,
        UnaryOp::GeluErf,
        UnaryOp::Erf,
        UnaryOp::Silu,
        UnaryOp::Abs,
        UnaryOp::Ceil,
        UnaryOp::Floor,
        UnaryOp::Round,
        UnaryOp::Relu,
        UnaryOp::Sign,
        UnaryOp::Sigmoid,
    ];

    /// The op's name, as in kernel names (`uexp_f32`, `ugelu_erf_bf16`).
    pub fn name(&self) -> &'static str {
        match self {
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Neg => "neg",
            UnaryOp::Recip => "recip",
            UnaryOp::Sqr => "sqr",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Gelu => "gelu",
            UnaryOp::GeluErf => "gelu_erf",
            UnaryOp::Erf => "erf",
            UnaryOp::Silu => "silu",
            UnaryOp::Abs => "abs",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Floor => "floor",
            UnaryOp::Round => "round",
            UnaryOp::Relu => "relu",
            UnaryOp::Sign => "sign",
            UnaryOp::Sigmoid => "sigmoid",
        }
    }

    /// Whether there is a kernel for this op on `dtype` (a [`KernelDType::NAME`]). Every op runs
    /// on the float types; integers have neg (signed only), sqr, abs, relu, sign, ceil, floor,
    /// round, and gelu, gelu_erf, erf, silu (which are 0 there, as in Candle's CPU backend).
    pub fn supports(&self, dtype: &str) -> bool {
        match dtype {
            "bf16" | "f16" | "f32" | "f64" => true,
            "u8" | "u32" | "i16" | "i32" | "i64" => match self {
                UnaryOp::Neg => !dtype.starts_with('u'),
                UnaryOp::Sqr
                | UnaryOp::Abs
                | UnaryOp::Relu
                | UnaryOp::Sign
                | UnaryOp::Ceil
                | UnaryOp::Floor
                | UnaryOp::Round
                | UnaryOp::Gelu
                | UnaryOp::GeluErf
                | UnaryOp::Erf
                | UnaryOp::Silu => true,
                UnaryOp::Exp
                | UnaryOp::Log
                | UnaryOp::Sin
                | UnaryOp::Cos
                | UnaryOp::Tanh
                | UnaryOp::Recip
                | UnaryOp::Sqrt
                | UnaryOp::Sigmoid => false,
            },
            _ => false,
        }
    }
}

/// Binary element-wise ops (module `binary`, kernels `b{name}_{dtype}`), for all 9 dtypes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `lhs + rhs` (wrapping for integers).
    Add,
    /// `lhs - rhs` (wrapping for integers).
    Sub,
    /// `lhs * rhs` (wrapping for integers).
    Mul,
    /// `lhs / rhs`; for integers truncating, with `x / 0 == 0` and `MIN / -1 == MIN`.
    Div,
    /// `lhs > rhs ? rhs : lhs` (Candle's definition; with a NaN operand the result is `lhs`).
    Minimum,
    /// `lhs < rhs ? rhs : lhs`.
    Maximum,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 6] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Minimum,
        BinaryOp::Maximum,
    ];

    /// The op's name, as in kernel names (`badd_f32`).
    pub fn name(&self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Maximum => "maximum",
        }
    }
}

/// Comparisons (module `binary`, kernels `{name}_{dtype}`, u8 output: 1 or 0), for all 9
/// dtypes. IEEE semantics: NaN compares unequal to everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

impl CmpOp {
    /// Every comparison.
    pub const ALL: [CmpOp; 6] = [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];

    /// The op's name, as in kernel names (`lt_f32`).
    pub fn name(&self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
}

/// A strided read-only operand: the view starts at the layout's start offset; strides in
/// elements (0 broadcasts), one per dim.
#[derive(Clone, Copy)]
pub struct Strided<'a, T: KernelDType> {
    /// The elements, from the layout's start offset on.
    pub data: DeviceSlice<'a, T>,
    /// Strides in elements, one per dim.
    pub strides: &'a [usize],
}

impl<'a, T: KernelDType> Strided<'a, T> {
    /// An operand reading `data` with `strides`.
    pub fn new(data: DeviceSlice<'a, T>, strides: &'a [usize]) -> Self {
        Strided { data, strides }
    }
}

// ------------------------------------------------------------------------------------------
// Validation and launch plumbing
// ------------------------------------------------------------------------------------------

pub(crate) fn layout_err(op: &str, reason: impl Into<String>) -> Error {
    Error::Layout {
        op: op.to_string(),
        reason: reason.into(),
    }
}

pub(crate) fn unsupported(op: &str, dtype: &str, reason: impl Into<String>) -> Error {
    Error::Unsupported {
        op: op.to_string(),
        dtype: dtype.to_string(),
        reason: reason.into(),
    }
}

/// The element count of `dims`, or an error when it overflows `usize`.
pub(crate) fn numel(op: &str, dims: &[usize]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d)
            .ok_or_else(|| layout_err(op, format!("the shape {dims:?} overflows usize")))
    })
}

/// Checks that an operand with `strides` over `dims` stays inside a view of `len` elements.
pub(crate) fn check_operand(
    op: &str,
    what: &str,
    dims: &[usize],
    strides: &[usize],
    len: usize,
) -> Result<()> {
    if strides.len() != dims.len() {
        return Err(layout_err(
            op,
            format!(
                "{what} has {} strides {strides:?} for {} dims {dims:?}",
                strides.len(),
                dims.len()
            ),
        ));
    }
    if dims.contains(&0) {
        return Ok(());
    }
    let mut max_offset = 0usize;
    for (&d, &s) in dims.iter().zip(strides) {
        max_offset = (d - 1)
            .checked_mul(s)
            .and_then(|x| x.checked_add(max_offset))
            .ok_or_else(|| {
                layout_err(
                    op,
                    format!("{what}: strides {strides:?} over {dims:?} overflow usize"),
                )
            })?;
    }
    if max_offset >= len {
        return Err(layout_err(
            op,
            format!(
                "{what} reaches element {max_offset} with strides {strides:?} over {dims:?}, \
                 but its view holds {len} elements"
            ),
        ));
    }
    Ok(())
}

fn check_dst(op: &str, numel: usize, dst_len: usize) -> Result<()> {
    if dst_len != numel {
        return Err(layout_err(
            op,
            format!("the destination holds {dst_len} elements but the shape has {numel}"),
        ));
    }
    Ok(())
}

/// A 1-D grid-stride launch for `n` elements: `BLOCK_SIZE` threads per block, enough blocks
/// for `n` elements but at most `BLOCKS_PER_MULTIPROCESSOR` per multiprocessor (the kernels
/// loop), so that the total thread count stays far below 2^31.
pub(crate) fn launch_config(stream: &Stream, n: usize) -> LaunchConfig {
    let max_blocks = (multiprocessors(stream) * BLOCKS_PER_MULTIPROCESSOR).min(65_535);
    let blocks = n.div_ceil(BLOCK_SIZE as usize).clamp(1, max_blocks) as u32;
    LaunchConfig {
        grid: [blocks, 1, 1],
        block: [BLOCK_SIZE, 1, 1],
        shared_mem_bytes: 0,
    }
}

/// The stream's device's multiprocessors (compute units on AMD), or 64 where the runtime
/// reports 0.
pub(crate) fn multiprocessors(stream: &Stream) -> usize {
    match stream.device().properties().multiprocessor_count {
        0 => 64,
        n => n as usize,
    }
}

/// The largest power-of-two block a kernel can be launched with: its `max_threads_per_block`
/// attribute rounded down (which its register use may bring below 1024), or `unknown` when
/// the runtime reports 0.
pub(crate) fn launchable_block(max_threads_per_block: u32, unknown: usize) -> usize {
    match max_threads_per_block as usize {
        0 => unknown,
        m => 1usize << (usize::BITS - 1 - m.leading_zeros()),
    }
}

pub(crate) fn function(stream: &Stream, module: &str, kernel: &str) -> Result<Function> {
    crate::modules::function(&stream.device(), module, kernel)
}

/// A kernel's `num_dims` and its layout info on the device (`None`: every operand contiguous).
type DeviceInfo = (u64, Option<DeviceBuffer<u64>>);

/// The layout info of `dims` with its dims merged ([`merge_dims`]): the kernel's `num_dims`
/// and the info on the device, or `None` when every operand is contiguous.
fn device_info(stream: &Stream, dims: &[usize], strides: &[&[usize]]) -> Result<DeviceInfo> {
    let (dims, strides) = merge_dims(dims, strides);
    let strides: Vec<&[usize]> = strides.iter().map(Vec::as_slice).collect();
    let info = match info_array(&dims, &strides) {
        Some(info) => Some(stream.alloc_from_host_async(&info)?),
        None => None,
    };
    Ok((dims.len() as u64, info))
}

/// The `info` kernel argument: the device buffer, or a null pointer.
pub(crate) struct InfoArg<'a>(pub(crate) Option<&'a DeviceBuffer<u64>>);

impl KernelArg for InfoArg<'_> {
    fn push_arg(&self, args: &mut KernelArgs, stream: &Stream) -> hip_core::Result<()> {
        match self.0 {
            Some(buf) => KernelArg::push_arg(&buf, args, stream),
            None => NullPtr.push_arg(args, stream),
        }
    }
}

/// A scalar kernel argument of a kernel's element type, converted from `f64` the way Candle
/// does (`T::from_f64`: Rust `as` for integers and f32, the `half` crate for f16/bf16).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    U8(u8),
    U32(u32),
    I16(i16),
    I32(i32),
    I64(i64),
    BF16(half::bf16),
    F16(half::f16),
    F32(f32),
    F64(f64),
}

impl Scalar {
    fn from_f64(dtype: &str, v: f64) -> Option<Scalar> {
        Some(match dtype {
            "u8" => Scalar::U8(v as u8),
            "u32" => Scalar::U32(v as u32),
            "i16" => Scalar::I16(v as i16),
            "i32" => Scalar::I32(v as i32),
            "i64" => Scalar::I64(v as i64),
            "bf16" => Scalar::BF16(half::bf16::from_f64(v)),
            "f16" => Scalar::F16(half::f16::from_f64(v)),
            "f32" => Scalar::F32(v as f32),
            "f64" => Scalar::F64(v),
            _ => return None,
        })
    }
}

impl KernelArg for Scalar {
    fn push_arg(&self, args: &mut KernelArgs, _stream: &Stream) -> hip_core::Result<()> {
        match *self {
            Scalar::U8(v) => args.push(v),
            Scalar::U32(v) => args.push(v),
            Scalar::I16(v) => args.push(v),
            Scalar::I32(v) => args.push(v),
            Scalar::I64(v) => args.push(v),
            Scalar::BF16(v) => args.push(v),
            Scalar::F16(v) => args.push(v),
            Scalar::F32(v) => args.push(v),
            Scalar::F64(v) => args.push(v),
        }
        Ok(())
    }
}

/// Checks a one-input op writing a contiguous `dst`; `None` when there is nothing to do.
fn prepare_unary<T: KernelDType, D: KernelDType>(
    stream: &Stream,
    op: &str,
    dims: &[usize],
    src: &Strided<'_, T>,
    dst: &DeviceSliceMut<'_, D>,
) -> Result<Option<(usize, DeviceInfo)>> {
    let n = numel(op, dims)?;
    check_operand(op, "the input", dims, src.strides, src.data.len())?;
    check_dst(op, n, dst.len())?;
    if n == 0 {
        return Ok(None);
    }
    Ok(Some((n, device_info(stream, dims, &[src.strides])?)))
}

/// Launches a kernel `(numel, num_dims, info, inp, out, scalars...)` of module `module`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_unary_like<S: KernelDType, D: KernelDType>(
    stream: &Stream,
    op: &str,
    module: &str,
    kernel: &str,
    dims: &[usize],
    src: Strided<'_, S>,
    dst: &mut DeviceSliceMut<'_, D>,
    scalars: &[Scalar],
) -> Result<()> {
    let Some((n, (num_dims, info))) = prepare_unary(stream, op, dims, &src, dst)? else {
        return Ok(());
    };
    let f = function(stream, module, kernel)?;
    let mut builder = f
        .builder(stream, launch_config(stream, n))
        .arg(n as u64)
        .arg(num_dims)
        .arg(InfoArg(info.as_ref()))
        .arg(src.data)
        .arg(&mut *dst);
    for &s in scalars {
        builder = builder.arg(s);
    }
    // SAFETY: the kernel takes (u64 numel, u64 num_dims, const u64* info, const S* inp, D* out,
    // then one scalar of the element type per entry of `scalars`), which is what was pushed
    // (`scalars` are built for this dtype by the callers). It reads info[0..num_dims * 2) when
    // info is non-null (a buffer of exactly that size, alive until after the launch is queued,
    // then freed in stream order), inp at offsets below src.data.len() (checked by
    // prepare_unary: the largest reachable offset is < the view length) and writes out[0..n)
    // with n == dst.len().
    unsafe { builder.launch()? };
    drop(info);
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Public wrappers
// ------------------------------------------------------------------------------------------

/// `dst = op(src)` element-wise over `dims`; `dst` is contiguous with `numel(dims)` elements.
pub fn unary<T: KernelDType>(
    stream: &Stream,
    op: UnaryOp,
    dims: &[usize],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
) -> Result<()> {
    let op_name = format!("unary {}", op.name());
    if !op.supports(T::NAME) {
        return Err(unsupported(
            &op_name,
            T::NAME,
            "only the float types have it (Candle's CPU backend has no integer version either)",
        ));
    }
    let kernel = format!("u{}_{}", op.name(), T::NAME);
    launch_unary_like(stream, &op_name, "unary", &kernel, dims, src, dst, &[])
}

/// If `dims`/`strides` describe a batch of transposed contiguous matrices (after dropping size-1
/// dims: the last two have strides `(1, rows)`, and the leading ones step over whole
/// `rows * cols` blocks contiguously), returns `(batch, rows, cols)`.
fn as_batched_transpose(dims: &[usize], strides: &[usize]) -> Option<(usize, usize, usize)> {
    if dims.len() != strides.len() {
        return None;
    }
    let kept: Vec<(usize, usize)> = dims
        .iter()
        .zip(strides)
        .filter(|(&d, _)| d != 1)
        .map(|(&d, &s)| (d, s))
        .collect();
    let n = kept.len();
    if n < 2 {
        return None;
    }
    let ((rows, row_stride), (cols, col_stride)) = (kept[n - 2], kept[n - 1]);
    if row_stride != 1 || col_stride != rows {
        return None;
    }
    let mut expected = rows.checked_mul(cols)?;
    let mut batch = 1usize;
    for &(d, s) in kept[..n - 2].iter().rev() {
        if s != expected {
            return None;
        }
        expected = expected.checked_mul(d)?;
        batch *= d;
    }
    Some((batch, rows, cols))
}

/// Threads of one transpose tile: 32 x 8 (each thread moves 4 elements of a 32 x 32 tile).
const TRANSPOSE_BLOCK: [u32; 3] = [32, 8, 1];

/// The tiled transpose path of [`copy_strided`]: `Ok(false)` when the layout is not a batched
/// transpose (or too large for the grid), so that the generic path runs.
fn try_copy_transposed<T: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    src: &Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
) -> Result<bool> {
    if dims.contains(&0) {
        return Ok(false); // empty: the generic path validates and launches nothing
    }
    let Some((batch, rows, cols)) = as_batched_transpose(dims, src.strides) else {
        return Ok(false);
    };
    let (tiles_c, tiles_r) = (cols.div_ceil(32), rows.div_ceil(32));
    if batch > 65_535 || tiles_r > 65_535 || tiles_c > i32::MAX as usize {
        return Ok(false);
    }
    let n = batch * rows * cols;
    if dst.len() != n {
        return Err(layout_err(
            "copy_strided",
            format!(
                "the destination holds {} elements, the shape {n}",
                dst.len()
            ),
        ));
    }
    if src.data.len() < n {
        return Err(layout_err(
            "copy_strided",
            format!(
                "the source view holds {} elements but its layout reaches {n}",
                src.data.len()
            ),
        ));
    }
    let f = function(stream, "transpose", &format!("transpose2d_{}", T::NAME))?;
    let config = LaunchConfig {
        grid: [tiles_c as u32, tiles_r as u32, batch as u32],
        block: TRANSPOSE_BLOCK,
        shared_mem_bytes: 0,
    };
    // SAFETY: transpose2d takes (const T* src, T* dst, u64 rows, u64 cols) with the batch in
    // gridDim.z; it reads src[0..batch*rows*cols) (checked: <= the view length) and writes
    // dst[0..batch*rows*cols) (checked: == dst.len()), guarding every tile edge.
    unsafe {
        f.builder(stream, config)
            .arg(src.data)
            .arg(&mut *dst)
            .arg(rows as u64)
            .arg(cols as u64)
            .launch()?
    };
    Ok(true)
}

/// Copies the strided `src` into the contiguous `dst` (all dtypes). A batch of transposed
/// matrices takes a tiled shared-memory path (coalesced reads and writes).
pub fn copy_strided<T: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
) -> Result<()> {
    if try_copy_transposed(stream, dims, &src, dst)? {
        return Ok(());
    }
    let kernel = format!("ucopy_{}", T::NAME);
    launch_unary_like(
        stream,
        "copy_strided",
        "unary",
        &kernel,
        dims,
        src,
        dst,
        &[],
    )
}

/// `dst = src * mul + add` (all dtypes; `mul` and `add` are converted to `T` first, like
/// Candle's `T::from_f64`; integers wrap on overflow).
pub fn affine<T: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    mul: f64,
    add: f64,
) -> Result<()> {
    let (Some(m), Some(a)) = (
        Scalar::from_f64(T::NAME, mul),
        Scalar::from_f64(T::NAME, add),
    ) else {
        return Err(unsupported("affine", T::NAME, "not a kernel dtype"));
    };
    let kernel = format!("affine_{}", T::NAME);
    launch_unary_like(stream, "affine", "affine", &kernel, dims, src, dst, &[m, a])
}

fn float_only<T: KernelDType>(op: &str) -> Result<()> {
    if T::IS_FLOAT {
        Ok(())
    } else {
        Err(unsupported(
            op,
            T::NAME,
            "only the float types have it (as in Candle's CPU backend)",
        ))
    }
}

/// `dst = src ^ exponent` (float dtypes; the exponent is rounded to `T` first, as in Candle).
pub fn powf<T: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    exponent: f64,
) -> Result<()> {
    float_only::<T>("powf")?;
    let e = Scalar::from_f64(T::NAME, exponent)
        .ok_or_else(|| unsupported("powf", T::NAME, "not a kernel dtype"))?;
    let kernel = format!("powf_{}", T::NAME);
    launch_unary_like(stream, "powf", "affine", &kernel, dims, src, dst, &[e])
}

/// `dst = src >= 0 ? src : alpha * (exp(src) - 1)` (float dtypes; `alpha` is rounded to `T`).
pub fn elu<T: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    alpha: f64,
) -> Result<()> {
    float_only::<T>("elu")?;
    let a = Scalar::from_f64(T::NAME, alpha)
        .ok_or_else(|| unsupported("elu", T::NAME, "not a kernel dtype"))?;
    let kernel = format!("elu_{}", T::NAME);
    launch_unary_like(stream, "elu", "affine", &kernel, dims, src, dst, &[a])
}

/// Launches a kernel `(numel, num_dims, info, lhs, rhs, out)` of module `module`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_binary_like<T: KernelDType, D: KernelDType>(
    stream: &Stream,
    op: &str,
    module: &str,
    kernel: &str,
    dims: &[usize],
    lhs: Strided<'_, T>,
    rhs: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, D>,
) -> Result<()> {
    let n = numel(op, dims)?;
    check_operand(op, "lhs", dims, lhs.strides, lhs.data.len())?;
    check_operand(op, "rhs", dims, rhs.strides, rhs.data.len())?;
    check_dst(op, n, dst.len())?;
    if n == 0 {
        return Ok(());
    }
    let (num_dims, info) = device_info(stream, dims, &[lhs.strides, rhs.strides])?;
    let f = function(stream, module, kernel)?;
    // SAFETY: the kernel takes (u64 numel, u64 num_dims, const u64* info, const T* lhs,
    // const T* rhs, D* out). It reads info[0..num_dims * 3) when info is non-null (exactly that
    // buffer, alive until the launch is queued, then freed in stream order), lhs and rhs at
    // offsets below their view lengths (checked above) and writes out[0..n), n == dst.len().
    unsafe {
        f.builder(stream, launch_config(stream, n))
            .arg(n as u64)
            .arg(num_dims)
            .arg(InfoArg(info.as_ref()))
            .arg(lhs.data)
            .arg(rhs.data)
            .arg(&mut *dst)
            .launch()?;
    }
    drop(info);
    Ok(())
}

/// `dst = op(lhs, rhs)` element-wise over `dims` (all dtypes); `dst` is contiguous.
pub fn binary<T: KernelDType>(
    stream: &Stream,
    op: BinaryOp,
    dims: &[usize],
    lhs: Strided<'_, T>,
    rhs: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
) -> Result<()> {
    let op_name = format!("binary {}", op.name());
    let kernel = format!("b{}_{}", op.name(), T::NAME);
    launch_binary_like(stream, &op_name, "binary", &kernel, dims, lhs, rhs, dst)
}

/// `dst = op(lhs, rhs) as u8` (1 or 0) element-wise over `dims` (all dtypes).
pub fn cmp<T: KernelDType>(
    stream: &Stream,
    op: CmpOp,
    dims: &[usize],
    lhs: Strided<'_, T>,
    rhs: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, u8>,
) -> Result<()> {
    let op_name = format!("cmp {}", op.name());
    let kernel = format!("{}_{}", op.name(), T::NAME);
    launch_binary_like(stream, &op_name, "binary", &kernel, dims, lhs, rhs, dst)
}

/// Converts the strided `src` into the contiguous `dst` (every pair of dtypes; same dtype is a
/// copy). Float -> integer saturates (NaN -> 0), integer -> integer wraps, as Rust's `as`.
pub fn cast<S: KernelDType, D: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, S>,
    dst: &mut DeviceSliceMut<'_, D>,
) -> Result<()> {
    let kernel = if S::NAME == D::NAME {
        format!("ucopy_{}", S::NAME)
    } else {
        format!("cast_{}_{}", S::NAME, D::NAME)
    };
    let module = if S::NAME == D::NAME { "unary" } else { "cast" };
    launch_unary_like(stream, "cast", module, &kernel, dims, src, dst, &[])
}

/// Converts the strided `src` into f8e4m3 (OCP e4m3fn, Candle's `float8::F8E4M3`) bytes in the
/// contiguous `dst`, as Candle's CPU backend does: integers through `as f32`, then one
/// round-to-nearest-even step; NaN stays NaN (0x7F with its sign), magnitudes above 464 and
/// infinities saturate to +-448.
pub fn cast_to_f8e4m3<S: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, S>,
    dst: &mut DeviceSliceMut<'_, u8>,
) -> Result<()> {
    let kernel = format!("cast_{}_f8e4m3", S::NAME);
    launch_unary_like(stream, "cast", "cast", &kernel, dims, src, dst, &[])
}

/// Converts strided f8e4m3 bytes `src` into the contiguous `dst`: the exact value as f32, then
/// Candle's f32 conversion to `D` (integers saturate, NaN -> 0).
pub fn cast_from_f8e4m3<D: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, u8>,
    dst: &mut DeviceSliceMut<'_, D>,
) -> Result<()> {
    let kernel = format!("cast_f8e4m3_{}", D::NAME);
    launch_unary_like(stream, "cast", "cast", &kernel, dims, src, dst, &[])
}

/// `dst = cond != 0 ? on_true : on_false` element-wise over `dims` (`C` an integer dtype, `T`
/// any dtype); `dst` is contiguous.
pub fn where_cond<C: KernelDType, T: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    cond: Strided<'_, C>,
    on_true: Strided<'_, T>,
    on_false: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
) -> Result<()> {
    const OP: &str = "where_cond";
    if C::IS_FLOAT {
        return Err(unsupported(
            OP,
            &format!("{} condition", C::NAME),
            "conditions are integer tensors (u8, u32, i16, i32, i64)",
        ));
    }
    let n = numel(OP, dims)?;
    check_operand(OP, "the condition", dims, cond.strides, cond.data.len())?;
    check_operand(OP, "on_true", dims, on_true.strides, on_true.data.len())?;
    check_operand(OP, "on_false", dims, on_false.strides, on_false.data.len())?;
    check_dst(OP, n, dst.len())?;
    if n == 0 {
        return Ok(());
    }
    let (num_dims, info) = device_info(
        stream,
        dims,
        &[cond.strides, on_true.strides, on_false.strides],
    )?;
    let kernel = format!("where_{}_{}", C::NAME, T::NAME);
    let f = function(stream, "ternary", &kernel)?;
    // SAFETY: the kernel takes (u64 numel, u64 num_dims, const u64* info, const C* cond,
    // const T* on_true, const T* on_false, T* out). It reads info[0..num_dims * 4) when info is
    // non-null (exactly that buffer, alive until the launch is queued), each input at offsets
    // below its view length (checked above) and writes out[0..n), n == dst.len().
    unsafe {
        f.builder(stream, launch_config(stream, n))
            .arg(n as u64)
            .arg(num_dims)
            .arg(InfoArg(info.as_ref()))
            .arg(cond.data)
            .arg(on_true.data)
            .arg(on_false.data)
            .arg(&mut *dst)
            .launch()?;
    }
    drop(info);
    Ok(())
}

/// Sets every element of `dst` to `value`.
pub fn fill<T: KernelDType>(
    stream: &Stream,
    dst: &mut DeviceSliceMut<'_, T>,
    value: T,
) -> Result<()> {
    let n = dst.len();
    if n == 0 {
        return Ok(());
    }
    let f = function(stream, "fill", &format!("fill_{}", T::NAME))?;
    // SAFETY: the kernel takes (u64 numel, T* out, T value) and writes out[0..n), n ==
    // dst.len().
    unsafe {
        f.builder(stream, launch_config(stream, n))
            .arg(n as u64)
            .arg(&mut *dst)
            .arg(value)
            .launch()?;
    }
    Ok(())
}

/// Sets the elements of the strided destination (`dims`, `dst_strides`, starting at `dst`'s
/// first element) to `value`; the other elements of `dst` are left alone. The output is the
/// strided operand here (the one exception to contiguous outputs). With overlapping strides
/// (e.g. stride 0) the same element is written several times with the same value.
pub fn const_set<T: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    dst_strides: &[usize],
    dst: &mut DeviceSliceMut<'_, T>,
    value: T,
) -> Result<()> {
    const OP: &str = "const_set";
    let n = numel(OP, dims)?;
    check_operand(OP, "the destination", dims, dst_strides, dst.len())?;
    if n == 0 {
        return Ok(());
    }
    let (num_dims, info) = device_info(stream, dims, &[dst_strides])?;
    let f = function(stream, "fill", &format!("const_set_{}", T::NAME))?;
    // SAFETY: the kernel takes (u64 numel, u64 num_dims, const u64* info, T* out, T value). It
    // reads info[0..num_dims * 2) when info is non-null (exactly that buffer, alive until the
    // launch is queued) and writes out at offsets below dst.len() (checked above); when info is
    // null, dst is contiguous over dims and it writes out[0..n), n <= dst.len().
    unsafe {
        f.builder(stream, launch_config(stream, n))
            .arg(n as u64)
            .arg(num_dims)
            .arg(InfoArg(info.as_ref()))
            .arg(&mut *dst)
            .arg(value)
            .launch()?;
    }
    drop(info);
    Ok(())
}

/// Copies `d1` rows of `d2` contiguous elements: `dst[r * dst_stride1 + c] = src[r *
/// src_stride1 + c]` (offsets relative to the views' first elements).
pub fn copy2d<T: KernelDType>(
    stream: &Stream,
    src: &DeviceSlice<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    d1: usize,
    d2: usize,
    src_stride1: usize,
    dst_stride1: usize,
) -> Result<()> {
    const OP: &str = "copy2d";
    let n = numel(OP, &[d1, d2])?;
    if n == 0 {
        return Ok(());
    }
    if d1 > 1 && dst_stride1 < d2 {
        return Err(layout_err(
            OP,
            format!("destination rows of {d2} elements overlap with a row stride of {dst_stride1}"),
        ));
    }
    check_operand(OP, "the source", &[d1, d2], &[src_stride1, 1], src.len())?;
    check_operand(
        OP,
        "the destination",
        &[d1, d2],
        &[dst_stride1, 1],
        dst.len(),
    )?;
    let f = function(stream, "fill", &format!("copy2d_{}", T::NAME))?;
    // SAFETY: the kernel takes (const T* src, T* dst, u64 d1, u64 d2, u64 src_s, u64 dst_s) and
    // touches src[r * src_s + c] and dst[r * dst_s + c] for r < d1, c < d2: the largest offsets,
    // (d1 - 1) * stride + d2 - 1, were checked against both view lengths above.
    unsafe {
        // The kernel waits for the previous kernels before touching memory (fl_copy2d).
        f.builder(stream, launch_config(stream, n))
            .overlap_previous(true)
            .arg(src)
            .arg(&mut *dst)
            .arg(d1 as u64)
            .arg(d2 as u64)
            .arg(src_stride1 as u64)
            .arg(dst_stride1 as u64)
            .launch()?;
    }
    Ok(())
}

/// One of the two copies of [`copy2d_pair`]: `d1` rows of `d2` contiguous elements from `src`
/// (rows `src_stride1` apart) to `dst` (rows `dst_stride1` apart).
pub struct Copy2d<'s, 'a, T: KernelDType> {
    /// The source view (offsets relative to its first element).
    pub src: &'s DeviceSlice<'a, T>,
    /// The destination view.
    pub dst: &'s mut DeviceSliceMut<'a, T>,
    /// Rows.
    pub d1: usize,
    /// Elements per row.
    pub d2: usize,
    /// Source row stride.
    pub src_stride1: usize,
    /// Destination row stride.
    pub dst_stride1: usize,
}

impl<T: KernelDType> Copy2d<'_, '_, T> {
    /// Checks the copy as [`copy2d`] does; its element count.
    fn check(&self, op: &str) -> Result<usize> {
        let n = numel(op, &[self.d1, self.d2])?;
        if n == 0 {
            return Ok(0);
        }
        if self.d1 > 1 && self.dst_stride1 < self.d2 {
            return Err(layout_err(
                op,
                format!(
                    "destination rows of {} elements overlap with a row stride of {}",
                    self.d2, self.dst_stride1
                ),
            ));
        }
        let dims = [self.d1, self.d2];
        check_operand(
            op,
            "the source",
            &dims,
            &[self.src_stride1, 1],
            self.src.len(),
        )?;
        check_operand(
            op,
            "the destination",
            &dims,
            &[self.dst_stride1, 1],
            self.dst.len(),
        )?;
        Ok(n)
    }
}

/// Two [`copy2d`]s in one launch (a KV cache's new key and value rows appended together). The
/// destinations are distinct buffers (they come from two `&mut` views).
pub fn copy2d_pair<T: KernelDType>(
    stream: &Stream,
    first: Copy2d<'_, '_, T>,
    second: Copy2d<'_, '_, T>,
) -> Result<()> {
    const OP: &str = "copy2d (pair)";
    let (n0, n1) = (first.check(OP)?, second.check(OP)?);
    if n0 == 0 || n1 == 0 {
        // At most one copy to do: the plain kernel.
        let (a, b) = (first, second);
        copy2d(
            stream,
            a.src,
            a.dst,
            a.d1,
            a.d2,
            a.src_stride1,
            a.dst_stride1,
        )?;
        return copy2d(
            stream,
            b.src,
            b.dst,
            b.d1,
            b.d2,
            b.src_stride1,
            b.dst_stride1,
        );
    }
    let f = function(stream, "fill", &format!("copy2d_pair_{}", T::NAME))?;
    let mut cfg = launch_config(stream, n0.max(n1));
    cfg.grid[1] = 2;
    // The kernel waits for the previous kernels before touching memory (fl_copy2d).
    let builder = f
        .builder(stream, cfg)
        .overlap_previous(true)
        .arg(first.src)
        .arg(&mut *first.dst)
        .arg(second.src)
        .arg(&mut *second.dst);
    let builder = [first.d1, first.d2, first.src_stride1, first.dst_stride1]
        .into_iter()
        .chain([second.d1, second.d2, second.src_stride1, second.dst_stride1])
        .fold(builder, |b, v| b.arg(v as u64));
    // SAFETY: the kernel takes (const T* src0, T* dst0, const T* src1, T* dst1, then d1, d2,
    // src_s, dst_s of each copy as u64); the blocks of grid y = 0 touch src0[r * src_s0 + c]
    // and dst0[r * dst_s0 + c] for r < d1_0, c < d2_0, those of y = 1 the same of copy 1: each
    // copy's largest offsets were checked against its views' lengths above.
    unsafe { builder.launch()? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_match_kernels() {
        let names: std::collections::HashSet<_> = UnaryOp::ALL.iter().map(|o| o.name()).collect();
        assert_eq!(names.len(), UnaryOp::ALL.len());
        assert_eq!(UnaryOp::GeluErf.name(), "gelu_erf");
        assert_eq!(BinaryOp::Minimum.name(), "minimum");
        assert_eq!(CmpOp::Ge.name(), "ge");
    }

    #[test]
    fn kernels_exist_in_the_sources() {
        let src = |m: &str| crate::modules::full_source(m).expect(m);
        let unary = src("unary");
        for op in UnaryOp::ALL {
            for dt in [
                "u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64",
            ] {
                let has_kernel = match dt {
                    "bf16" | "f16" | "f32" | "f64" => true,
                    _ if op == UnaryOp::Neg => {
                        unary.contains(&format!("RK_UNARY(neg, iop_neg, {dt})"))
                    }
                    _ => unary.contains(&format!("RK_UNARY({}, iop_", op.name())),
                };
                assert_eq!(op.supports(dt), has_kernel, "{op:?} {dt}");
            }
        }
        assert!(unary.contains("RK_UNARY(neg, iop_neg, i16)"));
        assert!(!UnaryOp::Neg.supports("u8") && !UnaryOp::Neg.supports("u32"));
        assert!(src("binary").contains("RK_CMP(ge, cop_ge, T)"));
        assert!(src("affine").contains("RK_ELU(bf16)"));
        assert!(src("cast").contains("RK_CAST_FROM(f64,"));
        assert!(src("ternary").contains("RK_WHERE_ALL(i64)"));
        assert!(src("fill").contains("RK_FILL(f64)"));
    }

    #[test]
    fn operand_bounds() {
        // 2x3 contiguous in 6 elements.
        assert!(check_operand("t", "x", &[2, 3], &[3, 1], 6).is_ok());
        assert!(check_operand("t", "x", &[2, 3], &[3, 1], 5).is_err());
        // Transposed and broadcast.
        assert!(check_operand("t", "x", &[3, 2], &[1, 3], 6).is_ok());
        assert!(check_operand("t", "x", &[4, 3], &[0, 1], 3).is_ok());
        assert!(check_operand("t", "x", &[4, 3], &[0, 1], 2).is_err());
        // Rank 0: one element.
        assert!(check_operand("t", "x", &[], &[], 1).is_ok());
        assert!(check_operand("t", "x", &[], &[], 0).is_err());
        // Empty shapes need no element.
        assert!(check_operand("t", "x", &[0, 3], &[3, 1], 0).is_ok());
        // Rank mismatch and overflow are errors, not panics.
        let e = check_operand("t", "x", &[2, 3], &[1], 6).unwrap_err();
        assert!(matches!(e, Error::Layout { .. }), "{e}");
        assert!(check_operand("t", "x", &[3, 2], &[usize::MAX, 1], usize::MAX).is_err());
        assert!(numel("t", &[usize::MAX, 2]).is_err());
        assert_eq!(numel("t", &[]).unwrap(), 1);
        assert_eq!(numel("t", &[4, 0, 2]).unwrap(), 0);
    }

    #[test]
    fn scalars_convert_like_candle() {
        assert_eq!(Scalar::from_f64("u8", 300.0), Some(Scalar::U8(255)));
        assert_eq!(Scalar::from_f64("u8", -3.0), Some(Scalar::U8(0)));
        assert_eq!(Scalar::from_f64("i16", f64::NAN), Some(Scalar::I16(0)));
        assert_eq!(Scalar::from_f64("i64", 2.9), Some(Scalar::I64(2)));
        assert_eq!(
            Scalar::from_f64("bf16", 1.5),
            Some(Scalar::BF16(half::bf16::from_f32(1.5)))
        );
        assert_eq!(Scalar::from_f64("f32", 0.1), Some(Scalar::F32(0.1f32)));
        assert_eq!(Scalar::from_f64("f8", 0.1), None);
    }

    #[test]
    fn batched_transposes_are_recognised() {
        // (4096, 8192) view of a contiguous (8192, 4096) matrix.
        assert_eq!(
            as_batched_transpose(&[4096, 8192], &[1, 4096]),
            Some((1, 4096, 8192))
        );
        // Size-1 dims anywhere are ignored; a contiguous batch in front is allowed.
        assert_eq!(
            as_batched_transpose(&[3, 1, 5, 7], &[35, 99, 1, 5]),
            Some((3, 5, 7))
        );
        assert_eq!(
            as_batched_transpose(&[2, 3, 5, 7], &[105, 35, 1, 5]),
            Some((6, 5, 7))
        );
        // Not transposes: contiguous, broadcast, padded, non-contiguous batch, rank mismatch.
        assert_eq!(as_batched_transpose(&[5, 7], &[7, 1]), None);
        assert_eq!(as_batched_transpose(&[5, 7], &[0, 5]), None);
        assert_eq!(as_batched_transpose(&[5, 7], &[1, 6]), None);
        assert_eq!(as_batched_transpose(&[2, 5, 7], &[70, 1, 5]), None);
        assert_eq!(as_batched_transpose(&[5, 7], &[1]), None);
        assert_eq!(as_batched_transpose(&[7], &[1]), None);
    }
}
