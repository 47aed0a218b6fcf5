//! Typed launch wrappers for GGML quantized blocks (module `quantized`): dequantization to
//! f32/f16/bf16, embedding rows, the quantized matrix-vector product (decode, up to
//! [`MATVEC_MAX_ROWS`] activation rows) and the indexed mixture-of-experts product.
//!
//! Blocks are raw GGML bytes ([`QuantType`] gives each type's block size in elements and bytes,
//! `kernels/quantized.hip` the layouts). Dequantization is bit-identical to candle-core's CPU
//! `to_float` (same f32 operations, same order, no FMA contraction). [`matvec`] and [`moe`]
//! accumulate `activation * dequantized weight` in f32 (no activation quantization) and round
//! the sum once to the activation dtype; [`matvec_int`] rounds the activations to 8 bits per
//! 32-element block and uses 4-byte integer dot products (see its module).
//!
//! Every wrapper validates before launching ([`Error::Layout`] for block buffers that are not a
//! whole number of blocks, shapes that disagree with the buffers, a `k` that is not a multiple
//! of the block size, misaligned activations; [`Error::Unsupported`] for an output dtype other
//! than f32/f16/bf16) and never launches a kernel that could read or write out of bounds. Ids
//! (embedding rows, experts) are read on the device: an out-of-range id is recorded in the
//! caller's [`IndexErrorFlag`] (ops [`QuantizedEmbedding`](crate::indexing::IndexOp::QuantizedEmbedding),
//! [`IndexedMoe`](crate::indexing::IndexOp::IndexedMoe)),
//! its output row is zeros, and nothing is read out of bounds.

use hip_core::{DeviceSlice, DeviceSliceMut, KernelArg, KernelArgs, LaunchConfig, Stream};

use crate::dtype::{check_float, KernelDType};
use crate::elementwise::{function, launch_config, layout_err, multiprocessors};
use crate::error::Result;
use crate::indexing::IndexErrorFlag;

mod int_matvec;
pub use int_matvec::{
    matvec_int, matvec_int_rounded, matvec_int_scratch, matvec_int_staged,
    matvec_int_staged_activation_bytes, matvec_int_staged_add, matvec_int_staged_fits,
    matvec_int_staged_normed, matvec_int_staged_rounded, matvec_int_staged_rounded_add,
    matvec_int_staged_shared_bytes, prefers_matvec_int_staged, quantize_activations,
    swiglu_rounded, NormedRow, StagedWeights,
};

/// Why other dtypes are refused.
const FLOAT_REASON: &str = "quantized kernels take and produce f32, f16 or bf16";
/// The kernel module.
const MODULE: &str = "quantized";
/// Threads per block of the matrix-vector launches (8 teams of 32 lanes).
const MATVEC_BLOCK: u32 = 256;
/// Output columns per matrix-vector block.
const MATVEC_COLS_PER_BLOCK: usize = 8;
/// The most activation rows one matrix-vector launch takes.
pub const MATVEC_MAX_ROWS: usize = 8;

/// A GGML block type with a device kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantType {
    /// 32 elements: f16 scale, 4-bit values.
    Q4_0,
    /// 32 elements: f16 scale and min, 4-bit values.
    Q4_1,
    /// 32 elements: f16 scale, 5-bit values.
    Q5_0,
    /// 32 elements: f16 scale and min, 5-bit values.
    Q5_1,
    /// 32 elements: f16 scale, 8-bit values.
    Q8_0,
    /// 32 elements: f16 scale and sum, 8-bit values.
    Q8_1,
    /// 256 elements: 2-bit values, 4-bit sub-block scales and mins.
    Q2K,
    /// 256 elements: 3-bit values, 6-bit sub-block scales.
    Q3K,
    /// 256 elements: 4-bit values, 6-bit sub-block scales and mins.
    Q4K,
    /// 256 elements: 5-bit values, 6-bit sub-block scales and mins.
    Q5K,
    /// 256 elements: 6-bit values, 8-bit sub-block scales.
    Q6K,
    /// 256 elements: f32 scale, 8-bit values, 16 partial sums.
    Q8K,
}

impl QuantType {
    /// Every block type.
    pub const ALL: [QuantType; 12] = [
        QuantType::Q4_0,
        QuantType::Q4_1,
        QuantType::Q5_0,
        QuantType::Q5_1,
        QuantType::Q8_0,
        QuantType::Q8_1,
        QuantType::Q2K,
        QuantType::Q3K,
        QuantType::Q4K,
        QuantType::Q5K,
        QuantType::Q6K,
        QuantType::Q8K,
    ];

    /// The name in kernel names (`dequantize_q4k_f32`).
    pub fn name(self) -> &'static str {
        match self {
            QuantType::Q4_0 => "q4_0",
            QuantType::Q4_1 => "q4_1",
            QuantType::Q5_0 => "q5_0",
            QuantType::Q5_1 => "q5_1",
            QuantType::Q8_0 => "q8_0",
            QuantType::Q8_1 => "q8_1",
            QuantType::Q2K => "q2k",
            QuantType::Q3K => "q3k",
            QuantType::Q4K => "q4k",
            QuantType::Q5K => "q5k",
            QuantType::Q6K => "q6k",
            QuantType::Q8K => "q8k",
        }
    }

    /// Elements per block.
    pub fn block_elems(self) -> usize {
        match self {
            QuantType::Q4_0
            | QuantType::Q4_1
            | QuantType::Q5_0
            | QuantType::Q5_1
            | QuantType::Q8_0
            | QuantType::Q8_1 => 32,
            _ => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantType::Q4_0 => 18,
            QuantType::Q4_1 => 20,
            QuantType::Q5_0 => 22,
            QuantType::Q5_1 => 24,
            QuantType::Q8_0 => 34,
            QuantType::Q8_1 => 36,
            QuantType::Q2K => 84,
            QuantType::Q3K => 110,
            QuantType::Q4K => 144,
            QuantType::Q5K => 176,
            QuantType::Q6K => 210,
            QuantType::Q8K => 292,
        }
    }

    /// The bytes of a row of `k` elements, or an error when `k` is not a multiple of the block.
    pub fn row_bytes(self, op: &str, k: usize) -> Result<usize> {
        if k % self.block_elems() != 0 {
            return Err(layout_err(
                op,
                format!(
                    "a row of {k} elements is not a whole number of {} blocks ({} elements each)",
                    self.name(),
                    self.block_elems()
                ),
            ));
        }
        Ok(k / self.block_elems() * self.block_bytes())
    }

    /// The element count of `bytes` of blocks, or an error when they are not whole blocks.
    pub fn elems_of(self, op: &str, bytes: usize) -> Result<usize> {
        if bytes % self.block_bytes() != 0 {
            return Err(layout_err(
                op,
                format!(
                    "{bytes} bytes are not a whole number of {} blocks ({} bytes each)",
                    self.name(),
                    self.block_bytes()
                ),
            ));
        }
        Ok(bytes / self.block_bytes() * self.block_elems())
    }
}

/// A scalar kernel argument.
#[derive(Debug, Clone, Copy)]
enum Arg {
    U64(usize),
    U32(u32),
}

impl KernelArg for Arg {
    fn push_arg(&self, args: &mut KernelArgs, _stream: &Stream) -> hip_core::Result<()> {
        match *self {
            Arg::U64(v) => args.push(v as u64),
            Arg::U32(v) => args.push(v),
        }
        Ok(())
    }
}

/// `v` as a u32 kernel argument, or an error naming `what`.
fn u32_arg(op: &str, what: &str, v: usize) -> Result<Arg> {
    u32_of(op, what, v).map(Arg::U32)
}

/// `v` as a u32 below 2^31 (a kernel's 32-bit index or a grid size), or an error naming `what`.
fn u32_of(op: &str, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v)
        .ok()
        .filter(|&v| v < i32::MAX as u32)
        .ok_or_else(|| {
            layout_err(
                op,
                format!("{what} = {v} does not fit the kernel's 32-bit index"),
            )
        })
}

/// Dequantizes `blocks` (whole blocks of `q`) into `dst` (exactly their element count).
pub fn dequantize<O: KernelDType>(
    stream: &Stream,
    q: QuantType,
    blocks: &DeviceSlice<'_, u8>,
    dst: &mut DeviceSliceMut<'_, O>,
) -> Result<()> {
    let op = "dequantize";
    check_float::<O>(op, FLOAT_REASON)?;
    let n = q.elems_of(op, blocks.len())?;
    if dst.len() != n {
        return Err(layout_err(
            op,
            format!(
                "{} bytes of {} blocks hold {n} elements, the destination {}",
                blocks.len(),
                q.name(),
                dst.len()
            ),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    let block_align = block_alignment(q.block_bytes());
    if blocks.device_ptr().0 % block_align as u64 != 0 {
        return Err(layout_err(
            op,
            format!(
                "{} blocks must start {block_align}-byte aligned (as a whole block of an \
                 aligned buffer does)",
                q.name()
            ),
        ));
    }
    check_aligned(op, "the destination", dst.device_ptr())?;
    let groups = n / 8;
    // The 256-element types: a block for every tile up to 8 of 256 threads a multiprocessor
    // (as many as an sm_80/sm_90 multiprocessor or a CDNA compute unit holds at once), which
    // stride over the rest, loading each next tile while they decode the current one. The
    // 32-element types: a block for every tile (their tiles hold 224-448 blocks). Measured on
    // an H200 (docs/quantized.md): striding was faster for Q4K (0.7%) and Q6K (6.4%), slower
    // for Q4_0 (4.7%) and Q8_0 (5.6%, and 6% in an earlier run); a grid that gives every block
    // the same number of tiles was 0.2-2.4% slower than the striding grid for every type.
    let tiles = (n / q.block_elems()).div_ceil(dequantize_tile_blocks(q));
    let grid = match q.block_elems() {
        32 => tiles,
        _ => tiles.min(dequantize_resident_blocks(stream)),
    }
    .min(u16::MAX as usize);
    let f = function(
        stream,
        MODULE,
        &format!("dequantize_{}_{}", q.name(), O::NAME),
    )?;
    let config = LaunchConfig {
        grid: [grid as u32, 1, 1],
        block: [DEQUANTIZE_THREADS, 1, 1],
        shared_mem_bytes: 0,
    };
    let builder = f.builder(stream, config).arg(Arg::U64(groups)).arg(*blocks);
    // SAFETY: (u64 groups, const u8* blocks, O* dst) is the kernel's signature, launched with
    // its QK_DEQ_THREADS threads a block (any grid: it strides over the tiles); it reads the
    // `groups * 8 / QK` whole blocks of `blocks` (checked above to be exactly its length,
    // aligned as its loads need) and writes dst[0 .. groups * 8) = dst's length (checked, 16-byte
    // aligned for its 16-byte stores).
    unsafe { builder.arg(&mut *dst).launch()? };
    Ok(())
}

/// The most blocks [`dequantize`] launches for the 256-element types: 8 of its 256 threads a
/// multiprocessor (up to as many as one holds at once). With more tiles than this, each block
/// strides over several (the 32-element types stride only beyond 65535 tiles).
pub fn dequantize_resident_blocks(stream: &Stream) -> usize {
    multiprocessors(stream) * 8
}

/// Threads a block of the dequantization kernels (the kernels' `QK_DEQ_THREADS`).
const DEQUANTIZE_THREADS: u32 = 256;

/// Blocks of `q` that one thread block of the dequantization kernels copies to shared memory and
/// decodes at a time: the kernels' `qk_deq_tile<Q>::BLOCKS`, a multiple of 8 blocks within
/// `QK_DEQ_TILE_BYTES` (8192).
pub fn dequantize_tile_blocks(q: QuantType) -> usize {
    8192 / (8 * q.block_bytes()) * 8
}

/// The largest power of two up to 16 that divides `bytes`: the alignment of a whole block in a
/// 16-byte-aligned buffer, which is what the kernels' loads of a block's fields assume.
fn block_alignment(bytes: usize) -> usize {
    1 << bytes.trailing_zeros().min(4)
}

/// The element type of an F32/F16/BF16 "quantized" tensor (plain elements, no blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlainType {
    /// f32.
    F32,
    /// f16.
    F16,
    /// bf16.
    BF16,
}

impl PlainType {
    /// The name in kernel names.
    pub fn name(self) -> &'static str {
        match self {
            PlainType::F32 => "f32",
            PlainType::F16 => "f16",
            PlainType::BF16 => "bf16",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            PlainType::F32 => 4,
            PlainType::F16 | PlainType::BF16 => 2,
        }
    }
}

/// Converts the first `dst.len()` elements of `src` (raw bytes of `s` elements, starting at an
/// address aligned to the element size) into `dst`.
pub fn dequantize_plain<O: KernelDType>(
    stream: &Stream,
    s: PlainType,
    src: &DeviceSlice<'_, u8>,
    dst: &mut DeviceSliceMut<'_, O>,
) -> Result<()> {
    let op = "dequantize";
    check_float::<O>(op, FLOAT_REASON)?;
    let n = dst.len();
    if n.checked_mul(s.size()).is_none_or(|b| b > src.len()) {
        return Err(layout_err(
            op,
            format!(
                "{n} {} elements requested, the source holds {} bytes",
                s.name(),
                src.len()
            ),
        ));
    }
    if src.device_ptr().0 % s.size() as u64 != 0 {
        return Err(layout_err(
            op,
            "the source is not aligned to its element size",
        ));
    }
    if n == 0 {
        return Ok(());
    }
    let f = function(
        stream,
        MODULE,
        &format!("dequantize_plain_{}_{}", s.name(), O::NAME),
    )?;
    let builder = f
        .builder(stream, launch_config(stream, n))
        .arg(Arg::U64(n))
        .arg(*src);
    // SAFETY: (u64 n, const u8* src, O* dst): the kernel reads n elements of `s` from src (n x
    // size bytes, within src, aligned: checked) and writes dst[0 .. n) (dst's length).
    unsafe { builder.arg(&mut *dst).launch()? };
    Ok(())
}

/// `dst[r] = table[ids[r]]` dequantized, for the `(rows, hidden)` table in `blocks`; `dst` holds
/// `ids.len() * hidden` elements. Out-of-range ids are recorded in `flag` (their rows are zeros).
pub fn embedding<O: KernelDType>(
    stream: &Stream,
    q: QuantType,
    blocks: &DeviceSlice<'_, u8>,
    (rows, hidden): (usize, usize),
    ids: &DeviceSlice<'_, u32>,
    dst: &mut DeviceSliceMut<'_, O>,
    flag: &IndexErrorFlag,
) -> Result<()> {
    let op = "qembedding";
    check_float::<O>(op, FLOAT_REASON)?;
    let row_bytes = q.row_bytes(op, hidden)?;
    if rows.checked_mul(row_bytes) != Some(blocks.len()) {
        return Err(layout_err(
            op,
            format!(
                "a ({rows}, {hidden}) {} table needs {} bytes, the blocks hold {}",
                q.name(),
                rows.saturating_mul(row_bytes),
                blocks.len()
            ),
        ));
    }
    if ids.len().checked_mul(hidden) != Some(dst.len()) {
        return Err(layout_err(
            op,
            format!(
                "{} ids of {hidden} elements, the destination holds {}",
                ids.len(),
                dst.len()
            ),
        ));
    }
    if dst.is_empty() {
        return Ok(());
    }
    check_aligned(op, "the blocks", blocks.device_ptr())?;
    check_aligned(op, "the destination", dst.device_ptr())?;
    let groups = dst.len() / 8;
    let flag_arg = flag.arg(op, stream)?;
    let f = function(
        stream,
        MODULE,
        &format!("qembedding_{}_{}", q.name(), O::NAME),
    )?;
    let builder = f
        .builder(stream, launch_config(stream, groups))
        .arg(Arg::U64(groups))
        .arg(Arg::U64(hidden / 8))
        .arg(Arg::U64(rows))
        .arg(*ids)
        .arg(*blocks)
        .arg(&mut *dst);
    // SAFETY: (u64 groups, u64 groups_per_row, u64 rows, const u32* ids, const u8* blocks,
    // O* dst, u32* err): the kernel reads ids[0 .. groups / groups_per_row) = ids (checked),
    // table rows below `rows` only (the blocks hold exactly rows x row_bytes, checked), writes
    // dst[0 .. groups * 8) = dst (checked) and the 8-word error record.
    unsafe { builder.arg(flag_arg).launch()? };
    Ok(())
}

/// The launch shape of a matrix-vector product over `n` output columns and `ys` rows of pairs.
fn matvec_config(n: usize, ys: usize) -> Result<LaunchConfig> {
    let blocks = n.div_ceil(MATVEC_COLS_PER_BLOCK);
    let op = "qmatvec";
    let gx = u32::try_from(blocks)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or_else(|| layout_err(op, format!("{n} output columns are too many")))?;
    let gy = u32::try_from(ys)
        .ok()
        .filter(|&y| y <= 65_535)
        .ok_or_else(|| {
            layout_err(
                op,
                format!("{ys} (token, expert) pairs exceed one launch's 65535"),
            )
        })?;
    Ok(LaunchConfig {
        grid: [gx, gy, 1],
        block: [MATVEC_BLOCK, 1, 1],
        shared_mem_bytes: 0,
    })
}

/// Checks that `what` (a device address) is 16-byte aligned: the kernels read blocks, activations
/// and write dequantized groups with 8- and 16-byte accesses.
fn check_aligned(op: &str, what: &str, ptr: hip_core::DevicePtr) -> Result<()> {
    if ptr.0 % 16 != 0 {
        return Err(layout_err(
            op,
            format!("{what} must start 16-byte aligned (copy them to a fresh buffer)"),
        ));
    }
    Ok(())
}

/// Checks a matrix-vector product's row count, weight bytes and activation/output lengths.
fn check_matvec_shapes(
    op: &str,
    q: QuantType,
    w: &DeviceSlice<'_, u8>,
    (m, n, k): (usize, usize, usize),
    x_len: usize,
    y_len: usize,
) -> Result<()> {
    if m == 0 || m > MATVEC_MAX_ROWS {
        return Err(layout_err(
            op,
            format!("takes 1 to {MATVEC_MAX_ROWS} activation rows, got {m}"),
        ));
    }
    let row_bytes = q.row_bytes(op, k)?;
    if n.checked_mul(row_bytes) != Some(w.len()) {
        return Err(layout_err(
            op,
            format!(
                "({n}, {k}) {} weights need {} bytes, the blocks hold {}",
                q.name(),
                n.saturating_mul(row_bytes),
                w.len()
            ),
        ));
    }
    if x_len != m * k || y_len != m * n {
        return Err(layout_err(
            op,
            format!(
                "x holds {} elements and y {}, for ({m}, {k}) x ({n}, {k})^T",
                x_len, y_len
            ),
        ));
    }
    Ok(())
}

/// Finishes a matrix-vector product that needs no kernel: nothing to write (`n == 0`) or zeros
/// (`k == 0`). Returns whether it did.
fn matvec_is_trivial<I: KernelDType>(
    (n, k): (usize, usize),
    y: &mut DeviceSliceMut<'_, I>,
) -> Result<bool> {
    if n == 0 {
        return Ok(true);
    }
    if k == 0 {
        y.memset_async(0)?;
        return Ok(true);
    }
    Ok(false)
}

/// `y (m, n) = x (m, k) . W^T` for the `(n, k)` weights `w` in blocks of `q`, `1 <= m <=`
/// [`MATVEC_MAX_ROWS`]; `x` and `y` are contiguous, `x` 16-byte aligned.
pub fn matvec<I: KernelDType>(
    stream: &Stream,
    q: QuantType,
    w: &DeviceSlice<'_, u8>,
    (m, n, k): (usize, usize, usize),
    x: &DeviceSlice<'_, I>,
    y: &mut DeviceSliceMut<'_, I>,
) -> Result<()> {
    let op = "qmatvec";
    check_float::<I>(op, FLOAT_REASON)?;
    check_matvec_shapes(op, q, w, (m, n, k), x.len(), y.len())?;
    if matvec_is_trivial((n, k), y)? {
        return Ok(());
    }
    check_aligned(op, "the weight blocks", w.device_ptr())?;
    check_aligned(op, "the activations", x.device_ptr())?;
    let args = [
        u32_arg(op, "m", m)?,
        u32_arg(op, "n", n)?,
        u32_arg(op, "k", k)?,
    ];
    let f = function(stream, MODULE, &format!("qmatvec_{}_{}", q.name(), I::NAME))?;
    let mut builder = f.builder(stream, matvec_config(n, 1)?);
    for a in args {
        builder = builder.arg(a);
    }
    let builder = builder.arg(*w).arg(*x);
    // SAFETY: (u32 m, u32 n, u32 k, const u8* w, const I* x, I* y): the kernel reads the n
    // weight rows of row_bytes (w's exact length, checked), x[0 .. m k) (checked, aligned) and
    // writes y[0 .. m n) (checked); teams past n return before touching memory.
    unsafe { builder.arg(&mut *y).launch()? };
    Ok(())
}

/// The arithmetic of [`moe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeActivations {
    /// f32 activations times the dequantized weights (the exact product, rounded once).
    Float,
    /// Activations rounded to 8 bits per 32, integer dot products (as the decode step's
    /// products), where [`moe_takes_int8`]; [`MoeActivations::Float`] elsewhere.
    Int8,
}

/// Whether [`moe`] with [`MoeActivations::Int8`] takes the integer product for `q` weights
/// with rows of `k`: a type with an integer kernel and a row that fits a block's shared memory.
pub fn moe_takes_int8(stream: &Stream, q: QuantType, k: usize) -> bool {
    int_matvec::matvec_int_staged_fits(stream, q, 1, k)
}

/// Pairs an expert, on average, from which [`moe`] groups them (fewer leave runs of one pair,
/// which the grouped kernel takes one after another).
const MOE_GROUP_PAIRS_PER_EXPERT: usize = 4;
/// Static shared memory of the grouped kernel (its four index arrays of 8).
const MOE_GROUP_STATIC_SHARED: usize = 4 * 4 * MATVEC_MAX_ROWS;

/// Whether [`moe`] with [`MoeActivations::Int8`] and an `order` scratch takes `pairs` (token,
/// slot) pairs over `experts` experts grouped by expert (`qmoe_s8g`: up to 8 pairs of one expert
/// multiplied at once, a prompt's case): at least 4 pairs an expert on average, a type with the
/// integer product, and 8 rows of `k` that fit a block's shared memory.
pub fn moe_groups_pairs(
    stream: &Stream,
    q: QuantType,
    (experts, k): (usize, usize),
    pairs: usize,
) -> bool {
    let limit = stream.device().properties().shared_memory_per_block;
    pairs >= MOE_GROUP_PAIRS_PER_EXPERT * experts.max(1)
        && moe_takes_int8(stream, q, k)
        && int_matvec::matvec_int_staged_shared_bytes(q, MATVEC_MAX_ROWS, k)
            + MOE_GROUP_STATIC_SHARED
            <= limit
}

/// The grouped launch of [`moe`] (shapes checked there): `ids` arg-sorted into `order` row by
/// row (rows of the sort's longest, a last shorter one apart), then `qmoe_s8g` over chunks of
/// 8 sorted pairs.
#[allow(clippy::too_many_arguments)]
fn moe_grouped<I: KernelDType>(
    stream: &Stream,
    q: QuantType,
    w: &DeviceSlice<'_, u8>,
    (n, k): (usize, usize),
    pairs: usize,
    args: [Arg; 6],
    ids: &DeviceSlice<'_, u32>,
    order: &mut DeviceSliceMut<'_, u32>,
    x: &DeviceSlice<'_, I>,
    y: &mut DeviceSliceMut<'_, I>,
    flag_arg: crate::indexing::FlagArg<'_>,
) -> Result<()> {
    let op = "indexed_moe_forward (grouped)";
    if order.len() != pairs {
        return Err(layout_err(
            op,
            format!("the order scratch holds {}, not {pairs}", order.len()),
        ));
    }
    let seg = pairs.min(crate::sort::max_cols::<u32>(stream));
    let full = pairs / seg * seg;
    crate::sort::arg_sort::<u32>(
        stream,
        ids.slice(..full)?,
        full / seg,
        seg,
        true,
        &mut order.slice_mut(..full)?,
    )?;
    if full < pairs {
        crate::sort::arg_sort::<u32>(
            stream,
            ids.slice(full..)?,
            1,
            pairs - full,
            true,
            &mut order.slice_mut(full..)?,
        )?;
    }
    let chunks = pairs.div_ceil(MATVEC_MAX_ROWS);
    let cfg = int_matvec::staged_moe_config(
        stream,
        op,
        q,
        (MATVEC_MAX_ROWS, n, k),
        matvec_config(n, chunks)?.grid[1],
        I::NAME,
    )?;
    let f = function(
        stream,
        MODULE,
        &format!("qmoe_s8g_{}_{}", q.name(), I::NAME),
    )?;
    let mut builder = f.builder(stream, cfg);
    for a in args {
        builder = builder.arg(a);
    }
    let builder = builder
        .arg(u32_arg(op, "segment", seg)?)
        .arg(*ids)
        .arg(order.as_slice())
        .arg(*w)
        .arg(*x)
        .arg(&mut *y);
    // SAFETY: (u32 pairs, topk, x_rows, n, k, experts, seg, const u32* ids, const u32* order,
    // const u8* w, const I* x, I* y, u32* err): order[0 .. pairs) holds, segment by segment,
    // indices below the segment's length (the sorts above), so every pair index is below
    // pairs; ids[0 .. pairs), expert rows below `experts` (out-of-range ids are skipped), x
    // rows below batch * x_rows and y[0 .. pairs n) are inside their buffers (checked by
    // `moe`); the shared memory is within the config's `shared` bytes for 8 rows of k plus the
    // kernel's static arrays (checked by `moe_groups_pairs`); the error record is the flag's.
    unsafe { builder.arg(flag_arg).launch()? };
    Ok(())
}

/// The indexed mixture-of-experts product: `w` holds `(experts, n, k)` weights; `ids` is
/// `(batch, topk)`, `x` is `(batch, x_rows, k)` with `x_rows` 1 or `topk`; `y` is
/// `(batch, topk, n)` with row `(b, t) = x[b, x_rows == 1 ? 0 : t] . W[ids[b, t]]^T`. An id of
/// `experts` or more is recorded in `flag` and its row is zeros.
///
/// `activations` picks the arithmetic: [`MoeActivations::Int8`] rounds each row to 8 bits and
/// takes the staged integer product of the one-row decode kernels (each pair's row gets the
/// bits [`matvec_int_staged`] gives it), where the type has one and a row fits a block's shared
/// memory ([`moe_takes_int8`]); otherwise, and for [`MoeActivations::Float`], f32 activations
/// times the dequantized weights.
#[allow(clippy::too_many_arguments)]
pub fn moe<I: KernelDType>(
    stream: &Stream,
    q: QuantType,
    w: &DeviceSlice<'_, u8>,
    (experts, n, k): (usize, usize, usize),
    ids: &DeviceSlice<'_, u32>,
    (batch, topk, x_rows): (usize, usize, usize),
    x: &DeviceSlice<'_, I>,
    y: &mut DeviceSliceMut<'_, I>,
    flag: &IndexErrorFlag,
    activations: MoeActivations,
    order: Option<&mut DeviceSliceMut<'_, u32>>,
) -> Result<()> {
    let op = "indexed_moe_forward";
    check_float::<I>(op, FLOAT_REASON)?;
    let row_bytes = q.row_bytes(op, k)?;
    if experts
        .checked_mul(n)
        .and_then(|r| r.checked_mul(row_bytes))
        != Some(w.len())
    {
        return Err(layout_err(
            op,
            format!(
                "({experts}, {n}, {k}) {} weights do not match {} bytes of blocks",
                q.name(),
                w.len()
            ),
        ));
    }
    if x_rows != 1 && x_rows != topk {
        return Err(layout_err(
            op,
            format!("x has {x_rows} rows per token, expected 1 or topk = {topk}"),
        ));
    }
    // Checked products: sizes that overflow match no buffer (and must not panic in debug).
    let pairs = batch.checked_mul(topk);
    let x_len = batch.checked_mul(x_rows).and_then(|r| r.checked_mul(k));
    let y_len = pairs.and_then(|p| p.checked_mul(n));
    let pairs = match pairs {
        Some(p) if ids.len() == p && x_len == Some(x.len()) && y_len == Some(y.len()) => p,
        _ => {
            return Err(layout_err(
                op,
                format!(
                    "ids hold {}, x {} and y {} elements for batch {batch}, topk {topk}, \
                     {x_rows} x row(s) of {k}, {n} outputs",
                    ids.len(),
                    x.len(),
                    y.len()
                ),
            ))
        }
    };
    if pairs == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        return y.memset_async(0).map_err(Into::into);
    }
    check_aligned(op, "the weight blocks", w.device_ptr())?;
    check_aligned(op, "the activations", x.device_ptr())?;
    let args = [
        u32_arg(op, "pairs", pairs)?,
        u32_arg(op, "topk", topk)?,
        u32_arg(op, "x rows", x_rows)?,
        u32_arg(op, "n", n)?,
        u32_arg(op, "k", k)?,
        u32_arg(op, "experts", experts)?,
    ];
    let flag_arg = flag.arg(op, stream)?;
    if let Some(order) = order {
        if activations == MoeActivations::Int8 && moe_groups_pairs(stream, q, (experts, k), pairs) {
            return moe_grouped(
                stream,
                q,
                w,
                (n, k),
                pairs,
                args,
                ids,
                order,
                x,
                y,
                flag_arg,
            );
        }
    }
    let int8 = activations == MoeActivations::Int8 && moe_takes_int8(stream, q, k);
    let (kernel, cfg) = if int8 {
        let pairs = matvec_config(n, pairs)?.grid[1];
        let cfg = int_matvec::staged_moe_config(stream, op, q, (1, n, k), pairs, I::NAME)?;
        (format!("qmoe_s8_{}_{}", q.name(), I::NAME), cfg)
    } else {
        (
            format!("qmoe_{}_{}", q.name(), I::NAME),
            matvec_config(n, pairs)?,
        )
    };
    let f = function(stream, MODULE, &kernel)?;
    let mut builder = f.builder(stream, cfg);
    for a in args {
        builder = builder.arg(a);
    }
    let builder = builder.arg(*ids).arg(*w).arg(*x).arg(&mut *y);
    // SAFETY: (u32 pairs, topk, x_rows, n, k, experts, const u32* ids, const u8* w, const I* x,
    // I* y, u32* err), both kernels: ids[0 .. pairs), expert rows below `experts` (out-of-range
    // ids are skipped), x rows below batch * x_rows and y[0 .. pairs n) are all inside their
    // buffers (checked above); the error record is the flag's 8 words. The staged kernel's
    // shared memory is within the `shared` bytes its config gives (a row of k, checked to fit),
    // and its 16-byte weight loads stop at the expert's last byte.
    unsafe { builder.arg(flag_arg).launch()? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dequantize_tiles_match_the_kernels() {
        let src = crate::modules::full_source("quantized").expect("quantized");
        assert!(src.contains("#define QK_DEQ_THREADS 256\n"));
        assert_eq!(DEQUANTIZE_THREADS, 256);
        assert!(src.contains("#define QK_DEQ_TILE_BYTES 8192\n"));
        assert!(src.contains("BLOCKS = QK_DEQ_TILE_BYTES / (8 * Q::BYTES) * 8,"));
        for q in QuantType::ALL {
            let blocks = dequantize_tile_blocks(q);
            assert!(blocks >= 8 && blocks % 8 == 0, "{q:?}: {blocks}");
            assert!(blocks * q.block_bytes() <= 8192, "{q:?}");
            assert_eq!(blocks * q.block_bytes() % 16, 0, "{q:?}");
        }
    }

    #[test]
    fn block_alignment_is_that_of_a_whole_block_in_an_aligned_buffer() {
        assert_eq!(block_alignment(18), 2);
        assert_eq!(block_alignment(20), 4);
        assert_eq!(block_alignment(24), 8);
        assert_eq!(block_alignment(144), 16);
        assert_eq!(block_alignment(176), 16);
        assert_eq!(block_alignment(292), 4);
    }
}
