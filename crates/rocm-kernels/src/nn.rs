//! Typed launch wrappers for the `nn` kernel family: candle-nn 0.11's fused ops `softmax_last_dim`,
//! `rms_norm`, `layer_norm`, `rope`, `rope_i`, `rope_thd` and `swiglu`, plus `add_rms_norm` (a
//! residual add fused with the next rms_norm) and `rope_kv` (a step's rope with its KV cache
//! append), for the float dtypes (bf16, f16, f32, f64; other dtypes are
//! [`Error::Unsupported`]).
//!
//! Operands are contiguous [`DeviceSlice`]s starting at the layout's start offset (candle-nn
//! requires contiguous inputs for all of these); the destination is contiguous and exactly as
//! long as the input's shape. Every wrapper validates sizes before launching
//! ([`Error::Layout`]) and launches nothing for an empty input.
//!
//! The row ops (softmax, rms_norm, layer_norm) run one block per row, threads striding over the
//! columns, warp shuffles + shared memory (warp-size generic), so rows of any length work.
//! Math runs in f32 for f16/bf16/f32 and in f64 for f64, rounded once.
//!
//! ## Semantics, and where they differ from candle-nn's CPU versions
//! * softmax: `exp(x - max) / sum(exp(x - max))` per row, the max ignoring NaNs (Rust's `max`);
//!   a NaN anywhere in a row makes the whole row NaN, as in Candle.
//! * rms_norm: `x / sqrt(mean(x^2) + eps) * alpha`, computed as `x * (1 / sqrt(..)) * alpha`
//!   (one division per row). candle-nn's CPU version has no f64; it is supported here (in f64).
//! * layer_norm: `(x - mean) / sqrt(var + eps) * alpha + beta`, biased variance computed in two
//!   passes (candle-nn's CPU version computes `E[x^2] - E[x]^2` in f32, which cancels when
//!   `|mean| >> std`). f64 is supported here (candle-nn's CPU version has none).
//! * rope / rope_i / rope_thd: as candle-nn, with tables `[t_cs, d/2]` (shared by the batch) or
//!   `[b, t_cs, d/2]` (one per batch element), `t <= t_cs`. For 3-D tables candle-nn offsets
//!   batch element `i` by `i * t * d/2` (the input's `t`, right only when `t_cs == t`); here the
//!   offset is `i * t_cs * d/2`, which is the same when `t_cs == t`.

use hip_core::{DeviceSlice, DeviceSliceMut, LaunchConfig, Stream};

use crate::dtype::KernelDType;
use crate::elementwise::layout_err;
use crate::error::{Error, Result};

/// Largest block of the row kernels.
const MAX_ROW_BLOCK: usize = 1024;
/// Elements per thread softmax and rms_norm keep in registers (`NN_CACHE` in kernels/nn.hip).
const ROW_CACHE: usize = 16;
/// Elements per thread `softmax_short_{T}` keeps in registers.
const SHORT_ROW_CACHE: usize = 4;
/// Threads per block when each row takes one warp (several rows per block).
const ROWS_BLOCK_THREADS: usize = 256;
/// Elements per thread layer_norm keeps in registers (`NN_CACHE_LN`).
const ROW_CACHE_LAYER_NORM: usize = 8;
/// Threads per block of the rope kernels.
const ROPE_BLOCK: u32 = 256;
/// Rope launches use at most this many blocks per multiprocessor.
const BLOCKS_PER_MULTIPROCESSOR: usize = 16;

fn float_only<T: KernelDType>(op: &str) -> Result<()> {
    if T::IS_FLOAT {
        Ok(())
    } else {
        Err(Error::Unsupported {
            op: op.to_string(),
            dtype: T::NAME.to_string(),
            reason: "only the float types have it (as in candle-nn)".into(),
        })
    }
}

fn checked_mul(op: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| layout_err(op, format!("{a} x {b} elements overflow usize")))
}

/// `what` holds at least `need` elements.
fn check_len(op: &str, what: &str, len: usize, need: usize) -> Result<()> {
    if len < need {
        return Err(layout_err(
            op,
            format!("{what} holds {len} elements but {need} are needed"),
        ));
    }
    Ok(())
}

fn check_dst(op: &str, len: usize, numel: usize) -> Result<()> {
    if len != numel {
        return Err(layout_err(
            op,
            format!("the destination holds {len} elements but the input has {numel}"),
        ));
    }
    Ok(())
}

/// The device's warp (wavefront) size; 64 when the device does not say.
fn warp_size(stream: &Stream) -> usize {
    match stream.device().properties().warp_size {
        0 => 64,
        w => w as usize,
    }
}

/// One block per row (grid-stride over rows): a power-of-two block, a multiple of the warp
/// size, about one thread per `per_thread` columns, and at most what the kernel can be launched
/// with (`max_threads`, which its register use may bring below 1024); a row of one warp shares
/// its block with other rows (blockDim.y of them).
fn row_config(
    stream: &Stream,
    rows: usize,
    cols: usize,
    per_thread: usize,
    max_threads: u32,
) -> LaunchConfig {
    let warp = warp_size(stream);
    // The largest power of two the kernel allows (never below one warp).
    let limit = crate::elementwise::launchable_block(max_threads, MAX_ROW_BLOCK)
        .min(MAX_ROW_BLOCK)
        .max(warp);
    // About `per_thread` elements per thread: rows up to `per_thread` * threads columns are
    // then held in registers (one read); longer rows take the block-strided loops.
    let threads = cols
        .div_ceil(per_thread)
        .next_power_of_two()
        .clamp(warp, limit);
    // A row that one warp covers: several rows (warps) per block, for occupancy (blocks of a
    // single warp would leave half of an SM's warp slots empty).
    let rows_per_block = if threads == warp {
        (ROWS_BLOCK_THREADS / warp).clamp(1, limit / warp)
    } else {
        1
    };
    LaunchConfig {
        grid: [rows.div_ceil(rows_per_block).min(65_535) as u32, 1, 1],
        block: [threads as u32, rows_per_block as u32, 1],
        shared_mem_bytes: 0,
    }
}

/// Validates a row op; `None` when there is nothing to do.
fn prepare_rows<T: KernelDType>(
    op: &str,
    src: &DeviceSlice<'_, T>,
    dst: &DeviceSliceMut<'_, T>,
    rows: usize,
    cols: usize,
) -> Result<Option<usize>> {
    float_only::<T>(op)?;
    let n = checked_mul(op, rows, cols)?;
    check_len(op, "the input", src.len(), n)?;
    check_dst(op, dst.len(), n)?;
    Ok((n != 0).then_some(n))
}

/// Softmax over the last dim of a contiguous `[rows, cols]` input (candle-nn's
/// `softmax_last_dim`): `dst[r, c] = exp(src[r, c] - max_r) / sum_c exp(src[r, c] - max_r)`.
pub fn softmax_last_dim<T: KernelDType>(
    stream: &Stream,
    src: &DeviceSlice<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    rows: usize,
    cols: usize,
) -> Result<()> {
    const OP: &str = "softmax_last_dim";
    if prepare_rows(OP, src, dst, rows, cols)?.is_none() {
        return Ok(());
    }
    // Rows one warp covers with 4 elements per thread take the short-row kernel (4 cached
    // elements per thread instead of 16: fewer registers, more warps in flight).
    let short = cols <= SHORT_ROW_CACHE * warp_size(stream);
    let (kernel, per_thread) = if short {
        (format!("softmax_short_{}", T::NAME), SHORT_ROW_CACHE)
    } else {
        (format!("softmax_{}", T::NAME), ROW_CACHE)
    };
    let f = crate::modules::function(&stream.device(), "nn", &kernel)?;
    // SAFETY: the kernel takes (const T* x, T* out, u64 rows, u64 cols), reads x[0..rows * cols)
    // (<= src.len(), checked) and writes out[0..rows * cols) (== dst.len()); blocks are
    // multiples of the warp size, as its shuffles need.
    unsafe {
        f.builder(
            stream,
            row_config(
                stream,
                rows,
                cols,
                per_thread,
                f.attributes().max_threads_per_block,
            ),
        )
        .arg(src)
        .arg(&mut *dst)
        .arg(rows as u64)
        .arg(cols as u64)
        .launch()?;
    }
    Ok(())
}

/// RMS norm of each row of a contiguous `[rows, cols]` input (candle-nn's `rms_norm`, `alpha`
/// of `cols` elements): `dst = src / sqrt(mean(src^2) + eps) * alpha`.
pub fn rms_norm<T: KernelDType>(
    stream: &Stream,
    src: &DeviceSlice<'_, T>,
    alpha: &DeviceSlice<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    rows: usize,
    cols: usize,
    eps: f32,
) -> Result<()> {
    const OP: &str = "rms_norm";
    if prepare_rows(OP, src, dst, rows, cols)?.is_none() {
        return Ok(());
    }
    check_len(OP, "alpha", alpha.len(), cols)?;
    let f = crate::modules::function(&stream.device(), "nn", &format!("rms_norm_{}", T::NAME))?;
    // SAFETY: the kernel takes (const T* x, const T* alpha, T* out, u64 rows, u64 cols,
    // float eps); it reads x[0..rows * cols) and alpha[0..cols) (checked against the view
    // lengths) and writes out[0..rows * cols) (== dst.len()); warp-multiple blocks.
    unsafe {
        f.builder(
            stream,
            row_config(
                stream,
                rows,
                cols,
                ROW_CACHE,
                f.attributes().max_threads_per_block,
            ),
        )
        // The kernel waits for the previous kernels before touching memory (nn_rms_norm).
        .overlap_previous(true)
        .arg(src)
        .arg(alpha)
        .arg(&mut *dst)
        .arg(rows as u64)
        .arg(cols as u64)
        .arg(eps)
        .launch()?;
    }
    Ok(())
}

/// Residual add and RMS norm in one pass (a pre-norm transformer's `x + residual` followed by the
/// next `rms_norm`), over contiguous `[rows, cols]` operands: `dst` holds `2 * rows * cols`
/// elements, first `sum = src + residual` (rounded to `T`, as candle's `add`), then
/// `sum / sqrt(mean(sum^2) + eps) * alpha`.
#[allow(clippy::too_many_arguments)]
pub fn add_rms_norm<T: KernelDType>(
    stream: &Stream,
    src: &DeviceSlice<'_, T>,
    residual: &DeviceSlice<'_, T>,
    alpha: &DeviceSlice<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    rows: usize,
    cols: usize,
    eps: f32,
) -> Result<()> {
    const OP: &str = "add_rms_norm";
    float_only::<T>(OP)?;
    let n = checked_mul(OP, rows, cols)?;
    check_len(OP, "the input", src.len(), n)?;
    check_len(OP, "the residual", residual.len(), n)?;
    check_dst(OP, dst.len(), checked_mul(OP, n, 2)?)?;
    check_len(OP, "alpha", alpha.len(), cols)?;
    if n == 0 {
        return Ok(());
    }
    let f = crate::modules::function(&stream.device(), "nn", &format!("add_rms_norm_{}", T::NAME))?;
    // SAFETY: the kernel takes (const T* x, const T* r, const T* alpha, T* sum_out, u64 rows,
    // u64 cols, float eps); it reads x and r [0..rows * cols) and alpha[0..cols) (checked
    // against the view lengths) and writes sum_out[0..2 * rows * cols) (== dst.len());
    // warp-multiple blocks.
    unsafe {
        f.builder(
            stream,
            row_config(
                stream,
                rows,
                cols,
                ROW_CACHE,
                f.attributes().max_threads_per_block,
            ),
        )
        // The kernel waits for the previous kernels before touching memory (nn_rms_norm).
        .overlap_previous(true)
        .arg(src)
        .arg(residual)
        .arg(alpha)
        .arg(&mut *dst)
        .arg(rows as u64)
        .arg(cols as u64)
        .arg(eps)
        .launch()?;
    }
    Ok(())
}

/// candle-nn's `swiglu` over a contiguous `[rows, 2 * half]` input: `dst[r, j] =
/// silu(src[r, j]) * src[r, half + j]`, `dst` being `[rows, half]`.
pub fn swiglu<T: KernelDType>(
    stream: &Stream,
    src: &DeviceSlice<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    rows: usize,
    half: usize,
) -> Result<()> {
    const OP: &str = "swiglu";
    float_only::<T>(OP)?;
    let n = checked_mul(OP, rows, half)?;
    check_len(OP, "the input", src.len(), checked_mul(OP, n, 2)?)?;
    check_dst(OP, dst.len(), n)?;
    if n == 0 {
        return Ok(());
    }
    let f = crate::modules::function(&stream.device(), "nn", &format!("swiglu_{}", T::NAME))?;
    // SAFETY: the kernel takes (const T* x, T* out, u64 rows, u64 half); it reads
    // x[0..rows * 2 * half) (checked) and writes out[0..rows * half) (== dst.len()),
    // grid-striding over the outputs.
    unsafe {
        f.builder(stream, crate::elementwise::launch_config(stream, n))
            .arg(src)
            .arg(&mut *dst)
            .arg(rows as u64)
            .arg(half as u64)
            .launch()?;
    }
    Ok(())
}

/// Layer norm of each row of a contiguous `[rows, cols]` input (candle-nn's `layer_norm`,
/// `alpha` and `beta` of `cols` elements):
/// `dst = (src - mean) / sqrt(var + eps) * alpha + beta` (biased variance).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm<T: KernelDType>(
    stream: &Stream,
    src: &DeviceSlice<'_, T>,
    alpha: &DeviceSlice<'_, T>,
    beta: &DeviceSlice<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    rows: usize,
    cols: usize,
    eps: f32,
) -> Result<()> {
    const OP: &str = "layer_norm";
    if prepare_rows(OP, src, dst, rows, cols)?.is_none() {
        return Ok(());
    }
    check_len(OP, "alpha", alpha.len(), cols)?;
    check_len(OP, "beta", beta.len(), cols)?;
    let f = crate::modules::function(&stream.device(), "nn", &format!("layer_norm_{}", T::NAME))?;
    // SAFETY: the kernel takes (const T* x, const T* alpha, const T* beta, T* out, u64 rows,
    // u64 cols, float eps); it reads x[0..rows * cols), alpha[0..cols), beta[0..cols) (checked)
    // and writes out[0..rows * cols) (== dst.len()); warp-multiple blocks.
    unsafe {
        f.builder(
            stream,
            row_config(
                stream,
                rows,
                cols,
                ROW_CACHE_LAYER_NORM,
                f.attributes().max_threads_per_block,
            ),
        )
        .arg(src)
        .arg(alpha)
        .arg(beta)
        .arg(&mut *dst)
        .arg(rows as u64)
        .arg(cols as u64)
        .arg(eps)
        .launch()?;
    }
    Ok(())
}

/// The rotary-embedding variants of candle-nn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RopeKind {
    /// `rope`: input `[b, h, t, d]`; pairs `(x[i], x[i + d/2])` for `i < d/2`.
    Rope,
    /// `rope_i`: input `[b, h, t, d]`; interleaved pairs `(x[2i], x[2i + 1])`.
    Interleaved,
    /// `rope_thd`: input `[b, t, h, d]`; pairs as `rope`.
    Thd,
}

impl RopeKind {
    /// The kernel-name prefix (`rope`, `rope_i`, `rope_thd`).
    pub fn name(&self) -> &'static str {
        match self {
            RopeKind::Rope => "rope",
            RopeKind::Interleaved => "rope_i",
            RopeKind::Thd => "rope_thd",
        }
    }
}

/// Validates a rope call; returns the element count and the tables' batch stride.
#[allow(clippy::too_many_arguments)]
fn prepare_rope<T: KernelDType>(
    op: &str,
    kind: RopeKind,
    src_len: usize,
    cos_len: usize,
    sin_len: usize,
    dst_len: usize,
    dims: [usize; 4],
    table_dims: &[usize],
) -> Result<Option<(usize, usize)>> {
    float_only::<T>(op)?;
    let [b, n1, n2, d] = dims;
    let t = if kind == RopeKind::Thd { n1 } else { n2 };
    let n = [n1, n2, d]
        .iter()
        .try_fold(b, |acc, &x| checked_mul(op, acc, x))?;
    let (t_cs, half, batched) = match *table_dims {
        [t_cs, half] => (t_cs, half, false),
        [tb, t_cs, half] if tb == b => (t_cs, half, true),
        [tb, _, _] => {
            return Err(layout_err(
                op,
                format!("the tables' batch size {tb} is not the input's {b}"),
            ))
        }
        _ => {
            return Err(layout_err(
                op,
                format!("cos/sin must be [t, d/2] or [b, t, d/2], not {table_dims:?}"),
            ))
        }
    };
    if half.checked_mul(2) != Some(d) || t > t_cs {
        return Err(layout_err(
            op,
            format!(
                "input dims {dims:?} do not fit tables {table_dims:?} (need d = 2 * {half} and \
                 t <= {t_cs})"
            ),
        ));
    }
    let table_numel = table_dims
        .iter()
        .try_fold(1usize, |acc, &x| checked_mul(op, acc, x))?;
    check_len(op, "the input", src_len, n)?;
    check_len(op, "cos", cos_len, table_numel)?;
    check_len(op, "sin", sin_len, table_numel)?;
    check_dst(op, dst_len, n)?;
    if n == 0 {
        return Ok(None);
    }
    Ok(Some((n, if batched { t_cs * half } else { 0 })))
}

/// candle-nn's `rope` (non-interleaved) of a contiguous input `[b, h, t, d]` (`dims`, `d` even):
/// for each row of `d`, the pairs `(x1, x2) = (x[i], x[i + d/2])`, `i < d/2`, become
/// `(x1 cos - x2 sin, x1 sin + x2 cos)` with `cos`/`sin` at `[i_t, i]` of contiguous tables of
/// `table_dims` `[t_cs, d/2]` (shared by the batch) or `[b, t_cs, d/2]` (`t <= t_cs`).
#[allow(clippy::too_many_arguments)]
pub fn rope<T: KernelDType>(
    stream: &Stream,
    src: &DeviceSlice<'_, T>,
    cos: &DeviceSlice<'_, T>,
    sin: &DeviceSlice<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    dims: [usize; 4],
    table_dims: &[usize],
) -> Result<()> {
    rope_any(stream, RopeKind::Rope, src, cos, sin, dst, dims, table_dims)
}

/// candle-nn's `rope_i` (interleaved): as [`rope`] (input `[b, h, t, d]`) with the pairs
/// `(x[2i], x[2i + 1])`.
#[allow(clippy::too_many_arguments)]
pub fn rope_i<T: KernelDType>(
    stream: &Stream,
    src: &DeviceSlice<'_, T>,
    cos: &DeviceSlice<'_, T>,
    sin: &DeviceSlice<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    dims: [usize; 4],
    table_dims: &[usize],
) -> Result<()> {
    rope_any(
        stream,
        RopeKind::Interleaved,
        src,
        cos,
        sin,
        dst,
        dims,
        table_dims,
    )
}

/// candle-nn's `rope_thd`: as [`rope`] for an input `[b, t, h, d]` (`dims`).
#[allow(clippy::too_many_arguments)]
pub fn rope_thd<T: KernelDType>(
    stream: &Stream,
    src: &DeviceSlice<'_, T>,
    cos: &DeviceSlice<'_, T>,
    sin: &DeviceSlice<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    dims: [usize; 4],
    table_dims: &[usize],
) -> Result<()> {
    rope_any(stream, RopeKind::Thd, src, cos, sin, dst, dims, table_dims)
}

/// The grid of a rope launch: blocks of [`ROPE_BLOCK`] threads for `work` items (grid-stride,
/// at most [`BLOCKS_PER_MULTIPROCESSOR`] a multiprocessor), `grid_y` deep.
fn rope_config(stream: &Stream, work: usize, grid_y: u32) -> LaunchConfig {
    let sms = crate::elementwise::multiprocessors(stream);
    let max_blocks = (sms * BLOCKS_PER_MULTIPROCESSOR).min(65_535);
    let blocks = work.div_ceil(ROPE_BLOCK as usize).clamp(1, max_blocks) as u32;
    LaunchConfig {
        grid: [blocks, grid_y, 1],
        block: [ROPE_BLOCK, 1, 1],
        shared_mem_bytes: 0,
    }
}

/// [`rope`], [`rope_i`] or [`rope_thd`], chosen by `kind`.
#[allow(clippy::too_many_arguments)]
pub fn rope_any<T: KernelDType>(
    stream: &Stream,
    kind: RopeKind,
    src: &DeviceSlice<'_, T>,
    cos: &DeviceSlice<'_, T>,
    sin: &DeviceSlice<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    dims: [usize; 4],
    table_dims: &[usize],
) -> Result<()> {
    let op = kind.name();
    let Some((n, cs_stride_b)) = prepare_rope::<T>(
        op,
        kind,
        src.len(),
        cos.len(),
        sin.len(),
        dst.len(),
        dims,
        table_dims,
    )?
    else {
        return Ok(());
    };
    let device = stream.device();
    let config = rope_config(stream, n / 2, 1);
    let f = crate::modules::function(&device, "nn", &format!("{op}_{}", T::NAME))?;
    let [b, n1, n2, d] = dims;
    // SAFETY: the kernel takes (u64 b, u64 n1, u64 n2, u64 d, u64 cs_stride_b, const T* src,
    // const T* cos, const T* sin, T* dst); it reads and writes elements below b * n1 * n2 * d
    // (<= src.len(), == dst.len(), checked) and table elements below
    // (b - 1) * cs_stride_b + t * d/2 <= the tables' element count (checked against both views).
    unsafe {
        // The kernel waits for the previous kernels before touching memory (nn_rope).
        f.builder(stream, config)
            .overlap_previous(true)
            .arg(b as u64)
            .arg(n1 as u64)
            .arg(n2 as u64)
            .arg(d as u64)
            .arg(cs_stride_b as u64)
            .arg(src)
            .arg(cos)
            .arg(sin)
            .arg(&mut *dst)
            .launch()?;
    }
    Ok(())
}

/// Where [`rope_kv`] writes the rotated keys or the values of a step: the source's elements in
/// order, `row_len` at a time, into rows `row_stride` elements apart in `dst` (a KV cache's new
/// positions, as `Tensor::slice_set` along its sequence dim lays them out).
pub struct CacheRows<'s, 'a, T: KernelDType> {
    /// The cache, from its first element to write.
    pub dst: &'s mut DeviceSliceMut<'a, T>,
    /// Elements per row (the step's `t * d` for a `[b, heads, capacity, d]` cache).
    pub row_len: usize,
    /// Elements between rows (`capacity * d`).
    pub row_stride: usize,
}

impl<T: KernelDType> CacheRows<'_, '_, T> {
    /// Checks that `numel` source elements fit; returns the row count.
    fn check(&self, op: &str, what: &str, numel: usize) -> Result<usize> {
        if self.row_len == 0 || numel % self.row_len != 0 {
            return Err(layout_err(
                op,
                format!(
                    "{what}: rows of {} elements do not divide {numel}",
                    self.row_len
                ),
            ));
        }
        let rows = numel / self.row_len;
        if rows > 1 && self.row_stride < self.row_len {
            return Err(layout_err(
                op,
                format!(
                    "{what}: rows of {} elements overlap with a row stride of {}",
                    self.row_len, self.row_stride
                ),
            ));
        }
        let need = (rows - 1)
            .checked_mul(self.row_stride)
            .and_then(|x| x.checked_add(self.row_len))
            .ok_or_else(|| layout_err(op, format!("{what}: the rows' extent overflows usize")))?;
        check_len(op, what, self.dst.len(), need)?;
        Ok(rows)
    }
}

/// The sizes of a [`rope_kv`] step: `batch` sequences of `t` positions, `q_heads` query and
/// `kv_heads` key/value heads of `head_dim` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RopeKvDims {
    /// Sequences.
    pub batch: usize,
    /// Query heads.
    pub q_heads: usize,
    /// Key (and value) heads.
    pub kv_heads: usize,
    /// Positions of the step.
    pub t: usize,
    /// Elements per head (even).
    pub head_dim: usize,
}

/// Rotary embeddings over a step's query and key heads and the KV cache append of the rotated
/// keys and the values, in one launch (`kind`: [`RopeKind::Rope`] or
/// [`RopeKind::Interleaved`]; `rope_thd`'s layout is not a cache's). `qk` is contiguous
/// `[batch, q_heads + kv_heads, t, head_dim]`, rotated as [`rope_any`] rotates it (the same
/// tables, `[t_cs, d/2]` or `[batch, t_cs, d/2]`, and the same arithmetic); the rotated query
/// heads go to `q_out` (`[batch, q_heads, t, head_dim]`), the rotated key heads
/// (`[batch, kv_heads, t, head_dim]`) to `k`'s rows and `v` (contiguous, that shape) to
/// `v_rows`' rows. `k.row_len` must be a multiple of `head_dim`.
#[allow(clippy::too_many_arguments)]
pub fn rope_kv<T: KernelDType>(
    stream: &Stream,
    kind: RopeKind,
    qk: &DeviceSlice<'_, T>,
    cos: &DeviceSlice<'_, T>,
    sin: &DeviceSlice<'_, T>,
    table_dims: &[usize],
    q_out: &mut DeviceSliceMut<'_, T>,
    k: CacheRows<'_, '_, T>,
    v: &DeviceSlice<'_, T>,
    v_rows: CacheRows<'_, '_, T>,
    dims: RopeKvDims,
) -> Result<()> {
    let op = match kind {
        RopeKind::Rope => "rope_kv",
        RopeKind::Interleaved => "rope_i_kv",
        RopeKind::Thd => {
            return Err(Error::Unsupported {
                op: "rope_thd_kv".into(),
                dtype: T::NAME.to_string(),
                reason: "rope_thd's [b, t, h, d] layout is not a KV cache's [b, h, t, d]".into(),
            })
        }
    };
    let RopeKvDims {
        batch: b,
        q_heads: hq,
        kv_heads: hk,
        t,
        head_dim: d,
    } = dims;
    if hq == 0 || hk == 0 {
        return Err(layout_err(
            op,
            format!("needs query and key heads, not {hq} and {hk}"),
        ));
    }
    let heads = hq
        .checked_add(hk)
        .ok_or_else(|| layout_err(op, "the head count overflows usize"))?;
    let Some((n, cs_stride_b)) = prepare_rope::<T>(
        op,
        kind,
        qk.len(),
        cos.len(),
        sin.len(),
        qk.len(),
        [b, heads, t, d],
        table_dims,
    )?
    else {
        return Ok(());
    };
    let nq = [hq, t, d]
        .iter()
        .try_fold(b, |acc, &x| checked_mul(op, acc, x))?;
    let nkv = n - nq;
    check_dst(op, q_out.len(), nq)?;
    check_len(op, "v", v.len(), nkv)?;
    if k.row_len % d != 0 {
        return Err(layout_err(
            op,
            format!("key rows of {} elements split heads of {d}", k.row_len),
        ));
    }
    k.check(op, "the key cache", nkv)?;
    let v_d1 = v_rows.check(op, "the value cache", nkv)?;
    // Grid y = 0 rotates the n / 2 pairs, y = 1 copies the nkv values.
    let config = rope_config(stream, (n / 2).max(nkv), 2);
    let f = crate::modules::function(&stream.device(), "nn", &format!("{op}_{}", T::NAME))?;
    // SAFETY: the kernel takes (u64 b, hq, hk, t, d, cs_stride_b, const T* qk, const T* cos,
    // const T* sin, T* q_out, T* k_dst, u64 k_d2, u64 k_dst_s, const T* v, T* v_dst, u64 v_d1,
    // u64 v_d2, u64 v_dst_s). It reads qk below b (hq + hk) t d = n (== qk.len(), checked by
    // prepare_rope) and table elements below (b - 1) cs_stride_b + t d/2 (checked there); writes
    // q_out below b hq t d (== q_out.len()); writes key element e < n - nq at
    // (e / k_d2) k_dst_s + e % k_d2 <= (rows - 1) k_dst_s + k_d2 - 1 < k.dst.len(), reads v
    // below nkv <= v.len() and writes value rows the same way (CacheRows::check).
    unsafe {
        // The kernel waits for the previous kernels before touching memory (nn_rope_kv).
        f.builder(stream, config)
            .overlap_previous(true)
            .arg(b as u64)
            .arg(hq as u64)
            .arg(hk as u64)
            .arg(t as u64)
            .arg(d as u64)
            .arg(cs_stride_b as u64)
            .arg(qk)
            .arg(cos)
            .arg(sin)
            .arg(&mut *q_out)
            .arg(&mut *k.dst)
            .arg(k.row_len as u64)
            .arg(k.row_stride as u64)
            .arg(v)
            .arg(&mut *v_rows.dst)
            .arg(v_d1 as u64)
            .arg(v_rows.row_len as u64)
            .arg(v_rows.row_stride as u64)
            .launch()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prep(kind: RopeKind, dims: [usize; 4], table: &[usize]) -> Result<Option<(usize, usize)>> {
        let n: usize = dims.iter().product();
        let tn: usize = table.iter().product();
        prepare_rope::<f32>("rope", kind, n, tn, tn, n, dims, table)
    }

    #[test]
    fn rope_shapes() {
        assert_eq!(
            prep(RopeKind::Rope, [2, 3, 4, 8], &[4, 4]).unwrap(),
            Some((192, 0))
        );
        assert_eq!(
            prep(RopeKind::Rope, [2, 3, 4, 8], &[2, 6, 4]).unwrap(),
            Some((192, 24))
        );
        // rope_thd takes t from dims[1].
        assert!(prep(RopeKind::Thd, [2, 5, 3, 8], &[5, 4]).is_ok());
        assert!(prep(RopeKind::Thd, [2, 5, 3, 8], &[4, 4]).is_err());
        assert!(
            prep(RopeKind::Rope, [2, 3, 4, 8], &[3, 4]).is_err(),
            "t > t_cs"
        );
        assert!(prep(RopeKind::Rope, [2, 3, 4, 8], &[4, 3]).is_err(), "d/2");
        assert!(
            prep(RopeKind::Rope, [2, 3, 4, 7], &[4, 3]).is_err(),
            "odd d"
        );
        assert!(
            prep(RopeKind::Rope, [2, 3, 4, 8], &[3, 4, 4]).is_err(),
            "batch"
        );
        assert!(prep(RopeKind::Rope, [2, 3, 4, 8], &[4]).is_err(), "rank");
        assert_eq!(prep(RopeKind::Rope, [0, 3, 4, 8], &[4, 4]).unwrap(), None);
        let e = prepare_rope::<u32>("rope", RopeKind::Rope, 8, 4, 4, 8, [1, 1, 2, 4], &[2, 2]);
        assert!(matches!(e, Err(Error::Unsupported { .. })));
        let e = prepare_rope::<f32>("rope", RopeKind::Rope, 8, 3, 4, 8, [1, 1, 2, 4], &[2, 2]);
        assert!(matches!(e, Err(Error::Layout { .. })), "short cos");
    }

    #[test]
    fn kernels_exist_in_the_source() {
        let src = crate::modules::full_source("nn").expect("nn module");
        for k in [
            "softmax_##T",
            "rms_norm_##T",
            "layer_norm_##T",
            "rope_##T",
            "rope_i_##T",
            "rope_thd_##T",
        ] {
            assert!(src.contains(k), "{k}");
        }
        for dt in ["bf16", "f16", "f32", "f64"] {
            assert!(src.contains(&format!("RK_NN({dt})")), "{dt}");
        }
    }
}
