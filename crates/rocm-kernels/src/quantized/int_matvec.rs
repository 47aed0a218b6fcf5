//! The integer matrix-vector product (decode): activations rounded to 8 bits per 32-element
//! block (`quantize_q8x_*`), then 4-byte integer dot products with the weights' small integers
//! (`qmatvec_i8_*`: `__dp4a` on NVIDIA, `sdot4`/`sudot4` on AMD, a portable fallback
//! elsewhere). The result is the dequantized weights times the rounded activations
//! `x' = d * rint(x / d)`, `d = amax / 127` per block, with f32 scaling and sums.

use hip_core::{DeviceSlice, DeviceSliceMut, LaunchConfig, NullPtr, Stream};

use super::{
    check_aligned, check_matvec_shapes, matvec_is_trivial, u32_arg, u32_of, QuantType,
    FLOAT_REASON, MODULE,
};
use crate::dtype::{check_float, KernelDType};
use crate::elementwise::{function, layout_err};
use crate::error::{Error, Result};

/// Threads per block of the integer product (`QI_BLOCK`).
const BLOCK: u32 = 128;
/// Output columns per block (`QI_CPB`).
const COLS_PER_BLOCK: usize = 2;
/// Threads per block of the activation quantization.
const QUANTIZE_BLOCK: u32 = 256;

impl QuantType {
    /// Whether [`matvec_int`] covers this type (every type but Q8K, an activation format that
    /// takes the float matrix-vector kernel).
    pub fn has_int_matvec(self) -> bool {
        self != QuantType::Q8K
    }
}

/// A launch of `blocks` blocks of `threads` threads in one dimension, or an error naming `what`
/// when the grid does not fit.
fn config_1d(op: &str, what: &str, blocks: usize, threads: u32) -> Result<LaunchConfig> {
    Ok(LaunchConfig {
        grid: [u32_of(op, what, blocks)?, 1, 1],
        block: [threads, 1, 1],
        shared_mem_bytes: 0,
    })
}

/// The scratch [`matvec_int`] needs for `m` rows of `k` activations: `(bytes of rounded
/// activations, f32s of block factors)` = `(m k, m k / 16)`.
pub fn matvec_int_scratch(m: usize, k: usize) -> (usize, usize) {
    (m * k, m * k / 16)
}

/// Checks the scratch of `m` rows of `k` rounded activations.
fn check_scratch(op: &str, (m, k): (usize, usize), xq_len: usize, xds_len: usize) -> Result<()> {
    let (q_len, ds_len) = matvec_int_scratch(m, k);
    if xq_len != q_len || xds_len != ds_len {
        return Err(layout_err(
            op,
            format!(
                "the activation scratch holds {xq_len} bytes and {xds_len} factors, ({m}, {k}) \
                 needs {q_len} and {ds_len}"
            ),
        ));
    }
    Ok(())
}

/// Rounds the contiguous, 16-byte aligned activations `x` (`m` rows of `k`, `k` a multiple of
/// 32) to 8 bits per 32-element block: `xq` the signed bytes, `xds` the f32 pairs
/// `(d, d * sum q)` per block (sizes from [`matvec_int_scratch`], 16-byte aligned), as
/// [`matvec_int_rounded`] reads them. One launch.
pub fn quantize_activations<I: KernelDType>(
    stream: &Stream,
    (m, k): (usize, usize),
    x: &DeviceSlice<'_, I>,
    xq: &mut DeviceSliceMut<'_, u8>,
    xds: &mut DeviceSliceMut<'_, f32>,
) -> Result<()> {
    let op = "quantize activations";
    check_float::<I>(op, FLOAT_REASON)?;
    if k % 32 != 0 || x.len() != m * k {
        return Err(layout_err(
            op,
            format!(
                "({m}, {k}) activations need k a multiple of 32 and {} elements, got {}",
                m * k,
                x.len()
            ),
        ));
    }
    check_scratch(op, (m, k), xq.len(), xds.len())?;
    if m * k == 0 {
        return Ok(());
    }
    check_aligned(op, "the activations", x.device_ptr())?;
    check_aligned(op, "the rounded activations", xq.device_ptr())?;
    check_aligned(op, "the activation factors", xds.device_ptr())?;
    // Activations -> (q, (d, d * sum q)) per 32-element block.
    let groups = m * k / 4;
    let quantize = function(stream, MODULE, &format!("quantize_q8x_{}", I::NAME))?;
    let cfg = config_1d(
        op,
        "quantize blocks",
        groups.div_ceil(QUANTIZE_BLOCK as usize),
        QUANTIZE_BLOCK,
    )?;
    let builder = quantize
        .builder(stream, cfg)
        .arg(u32_arg(op, "groups", groups)?)
        .arg(*x)
        .arg(&mut *xq);
    // SAFETY: (u32 groups, const I* x, i8* q, float2* ds): threads below `groups` read x[4 g ..
    // 4 g + 4) (x holds m k = 4 groups elements, checked) and write q's int g (q holds m k bytes)
    // and ds[g / 8] (ds holds m k / 32 float2 = m k / 16 f32s, checked); the rest only shuffle.
    unsafe { builder.arg(&mut *xds).launch()? };
    Ok(())
}

/// `y (m, n) = x' (m, k) . W^T` for the `(n, k)` weights `w` in blocks of `q`, where `x'` is `x`
/// rounded to 8 bits per 32-element block; `1 <= m <=` [`super::MATVEC_MAX_ROWS`]. `x` and `y`
/// are contiguous, `x` 16-byte aligned; `xq` and `xds` are scratch of the sizes
/// [`matvec_int_scratch`] gives, 16-byte aligned. Two launches: [`quantize_activations`], then
/// [`matvec_int_rounded`].
#[allow(clippy::too_many_arguments)]
pub fn matvec_int<I: KernelDType>(
    stream: &Stream,
    q: QuantType,
    w: &DeviceSlice<'_, u8>,
    (m, n, k): (usize, usize, usize),
    x: &DeviceSlice<'_, I>,
    xq: &mut DeviceSliceMut<'_, u8>,
    xds: &mut DeviceSliceMut<'_, f32>,
    y: &mut DeviceSliceMut<'_, I>,
) -> Result<()> {
    // The whole product is checked before anything is queued.
    let op = "qmatvec";
    check_int_product::<I>(
        op,
        q,
        w,
        (m, n, k),
        (x.len(), y.len()),
        (xq.len(), xds.len()),
    )?;
    if matvec_is_trivial((n, k), y)? {
        return Ok(());
    }
    quantize_activations(stream, (m, k), x, xq, xds)?;
    matvec_int_rounded(stream, q, w, (m, n, k), &xq.as_slice(), &xds.as_slice(), y)
}

/// Checks an integer product: a float activation dtype, a block type with an integer kernel,
/// the weights', activations' and output's sizes and the rounded activations' scratch.
fn check_int_product<I: KernelDType>(
    op: &str,
    q: QuantType,
    w: &DeviceSlice<'_, u8>,
    (m, n, k): (usize, usize, usize),
    (x_len, y_len): (usize, usize),
    (xq_len, xds_len): (usize, usize),
) -> Result<()> {
    check_float::<I>(op, FLOAT_REASON)?;
    check_int_type(q)?;
    check_matvec_shapes(op, q, w, (m, n, k), x_len, y_len)?;
    check_scratch(op, (m, k), xq_len, xds_len)
}

fn check_int_type(q: QuantType) -> Result<()> {
    if !q.has_int_matvec() {
        return Err(Error::Unsupported {
            op: "qmatvec (8-bit activations)".into(),
            dtype: q.name().into(),
            reason: "no integer kernel for this block type; use the float matrix-vector product"
                .into(),
        });
    }
    Ok(())
}

/// The product of [`matvec_int`] from activations already rounded by [`quantize_activations`]
/// (`xq`, `xds` for `m` rows of `k`): one launch. Several products with the same activations
/// (a layer's q, k and v projections) round them once.
#[allow(clippy::too_many_arguments)]
pub fn matvec_int_rounded<I: KernelDType>(
    stream: &Stream,
    q: QuantType,
    w: &DeviceSlice<'_, u8>,
    (m, n, k): (usize, usize, usize),
    xq: &DeviceSlice<'_, u8>,
    xds: &DeviceSlice<'_, f32>,
    y: &mut DeviceSliceMut<'_, I>,
) -> Result<()> {
    let op = "qmatvec";
    check_int_product::<I>(op, q, w, (m, n, k), (m * k, y.len()), (xq.len(), xds.len()))?;
    if matvec_is_trivial((n, k), y)? {
        return Ok(());
    }
    let cfg = config_1d(op, "blocks", n.div_ceil(COLS_PER_BLOCK), BLOCK)?;
    let kernel = format!("qmatvec_i8_{}_{}", q.name(), I::NAME);
    launch_rounded_product(
        stream,
        op,
        &kernel,
        cfg,
        w,
        (m, n, k),
        (xq, xds),
        y,
        Epilogue::None,
        false, // qmatvec_i8_* does not wait for the previous kernel
    )
}

/// The weight blocks of a staged product, and whether the launch may overlap the kernel queued
/// just before it on the stream. The staged kernels load their first weights before they wait
/// for that kernel (`rk_wait_previous`), so they may only overlap it when it does not write the
/// blocks: an overlapped launch (NVIDIA sm_90+, see `hip_core::LaunchBuilder::overlap_previous`)
/// then streams weights while that kernel still runs.
#[derive(Clone, Copy)]
pub struct StagedWeights<'s, 'a> {
    /// The blocks: `n` rows of `k / QK` blocks each.
    pub blocks: &'s DeviceSlice<'a, u8>,
    /// `true` when the blocks were written before the last kernel now queued on the stream
    /// (an uploaded or long-quantized weight), so that the launch may overlap that kernel, for
    /// every block type. Measured on an H100 (criterion `qmatvec_14336x4096_*`, each launch
    /// reading its own copy of the weights, back to back): overlapped launches read 83.9% of the
    /// copy bandwidth for Q4_0 (75% not overlapped), 76-81% for Q4K (74%), 92% for Q8_0 (85%).
    /// Q6K lost with overlap (58% against 70%) until its activations stopped sharing
    /// shared-memory banks (`qs_apad`); since then it gains too (H200: 76% against 65% at
    /// 14336 x 4096, 62% against 56% at 4096 x 14336; docs/quantized.md).
    pub written_earlier: bool,
}

impl<'s, 'a> StagedWeights<'s, 'a> {
    /// Blocks that the kernel queued just before may have written: no overlap.
    pub fn new(blocks: &'s DeviceSlice<'a, u8>) -> Self {
        StagedWeights {
            blocks,
            written_earlier: false,
        }
    }

    /// Blocks written before the last kernel now queued on the stream: the launch may overlap it.
    pub fn written_earlier(blocks: &'s DeviceSlice<'a, u8>) -> Self {
        StagedWeights {
            blocks,
            written_earlier: true,
        }
    }
}

/// The trailing argument of a product kernel: none (`qmatvec_i8_*`, the general staged
/// kernel), or the `add` of the one-row staged kernels, null or a residual of `n` elements.
#[derive(Clone, Copy)]
enum Epilogue<'s, 'a, I: KernelDType> {
    None,
    Add(Option<&'s DeviceSlice<'a, I>>),
}

impl<'s, 'a, I: KernelDType> Epilogue<'s, 'a, I> {
    /// Checks a residual's length against the `n` outputs.
    fn check(&self, op: &str, n: usize) -> Result<()> {
        if let Epilogue::Add(Some(r)) = self {
            if r.len() != n {
                return Err(layout_err(
                    op,
                    format!("the residual holds {} elements, the product {n}", r.len()),
                ));
            }
        }
        Ok(())
    }

    /// Appends the argument to a launch.
    fn push<'b>(self, builder: hip_core::LaunchBuilder<'b>) -> hip_core::LaunchBuilder<'b>
    where
        's: 'b,
        'a: 'b,
    {
        match self {
            Epilogue::None => builder,
            Epilogue::Add(Some(r)) => builder.arg(*r),
            Epilogue::Add(None) => builder.arg(NullPtr),
        }
    }
}

/// Launches `kernel`, an integer product of pre-rounded activations with the signature
/// `(u32 m, u32 n, u32 k, const u8* w, const i8* xq, const float2* xds, I* y)`, after checking
/// the pointers' alignment; the caller has checked the shapes and scratch sizes
/// ([`check_int_product`]) and chosen a grid the kernel accepts.
#[allow(clippy::too_many_arguments)]
fn launch_rounded_product<I: KernelDType>(
    stream: &Stream,
    op: &str,
    kernel: &str,
    cfg: LaunchConfig,
    w: &DeviceSlice<'_, u8>,
    (m, n, k): (usize, usize, usize),
    (xq, xds): (&DeviceSlice<'_, u8>, &DeviceSlice<'_, f32>),
    y: &mut DeviceSliceMut<'_, I>,
    epilogue: Epilogue<'_, '_, I>,
    overlap: bool,
) -> Result<()> {
    epilogue.check(op, n)?;
    check_aligned(op, "the weight blocks", w.device_ptr())?;
    check_aligned(op, "the rounded activations", xq.device_ptr())?;
    check_aligned(op, "the activation factors", xds.device_ptr())?;
    let f = function(stream, MODULE, kernel)?;
    let builder = f
        .builder(stream, cfg)
        .overlap_previous(overlap)
        .arg(u32_arg(op, "m", m)?)
        .arg(u32_arg(op, "n", n)?)
        .arg(u32_arg(op, "k", k)?)
        .arg(*w)
        .arg(*xq)
        .arg(*xds);
    // SAFETY: (u32 m, u32 n, u32 k, const u8* w, const i8* xq, const float2* xds, I* y), the
    // signature of qmatvec_i8_* (Epilogue::None), and of qmatvec_s8r_m1_* followed by `const I*
    // add` (Epilogue::Add): they read weight rows below n (w holds n rows, checked by the
    // caller; the staged kernel in 16-byte pieces no further than the last block's last byte),
    // xq[0 .. m k) and xds[0 .. m k / 32) pairs (the scratch sizes, checked by the caller;
    // 16-byte aligned, checked above), add[0 .. n) when not null (checked above), at most the
    // shared memory `cfg` gives, and write y[r n + c] for r < m, c < n (y holds m n, checked
    // by the caller).
    unsafe { epilogue.push(builder.arg(&mut *y)).launch()? };
    Ok(())
}

/// Teams of 32 lanes per block of the staged product (`QS_TEAMS`).
const STAGED_TEAMS: u32 = 8;
/// Blocks of the staged product launched per multiprocessor (the kernel loops over rows, so any
/// count is correct): measured on an H100 with `examples/tune_qmatvec.rs` (quantized.md), 2 for
/// one activation row (the `m1` kernels) and for Q5K and Q6K, 4 for the others.
fn staged_blocks_per_multiprocessor(q: QuantType, m: usize) -> usize {
    if m == 1 || matches!(q, QuantType::Q5K | QuantType::Q6K) {
        2
    } else {
        4
    }
}

/// Weight blocks per stage of the staged product (`QS_SB_*` in `kernels/quantized.hip`).
fn staged_stage_blocks(q: QuantType) -> usize {
    match q {
        QuantType::Q4_0 | QuantType::Q4_1 | QuantType::Q5_0 | QuantType::Q5_1 => 128,
        QuantType::Q8_0 | QuantType::Q8_1 => 64,
        QuantType::Q2K
        | QuantType::Q3K
        | QuantType::Q4K
        | QuantType::Q5K
        | QuantType::Q6K
        | QuantType::Q8K => 16,
    }
}

/// Bytes of padding the staged kernels put after every 128 rounded activations in shared memory
/// (each type's `SPAD` in `kernels/quantized.hip`, chosen so that the lanes of one load
/// instruction read distinct banks).
fn staged_activation_pad(q: QuantType) -> usize {
    match q {
        QuantType::Q4_0
        | QuantType::Q4_1
        | QuantType::Q5_0
        | QuantType::Q5_1
        | QuantType::Q8_0
        | QuantType::Q8_1
        | QuantType::Q5K => 16,
        QuantType::Q4K | QuantType::Q6K | QuantType::Q2K | QuantType::Q3K => 32,
        // No integer kernel.
        QuantType::Q8K => 0,
    }
}

/// The shared bytes a staged product of `q` weights keeps its `m` rows of `k` rounded
/// activations in (the kernel's `qs_act_bytes`): the signed bytes, padded, then the `m k / 32`
/// f32 pairs, rounded up to 16. The stages follow.
pub fn matvec_int_staged_activation_bytes(q: QuantType, m: usize, k: usize) -> usize {
    let row = k + staged_activation_pad(q) * k.div_ceil(128);
    (m * row + m * (k / 32) * 8).div_ceil(16) * 16
}

/// The dynamic shared memory of a staged product of `m` rows of `k` activations: the rounded
/// activations ([`matvec_int_staged_activation_bytes`]) and one stage per team.
pub fn matvec_int_staged_shared_bytes(q: QuantType, m: usize, k: usize) -> usize {
    // A stage starts up to 14 bytes past a 16-byte boundary (`qs_stage::CAP`).
    let stage = (staged_stage_blocks(q) * q.block_bytes() + 14).div_ceil(16) * 16;
    matvec_int_staged_activation_bytes(q, m, k) + STAGED_TEAMS as usize * stage
}

/// Whether [`matvec_int_staged`] takes `m` rows of `k` activations times `q` weights on the
/// stream's device: a type with an integer kernel and shared memory enough for a block.
pub fn matvec_int_staged_fits(stream: &Stream, q: QuantType, m: usize, k: usize) -> bool {
    q.has_int_matvec()
        && (1..=super::MATVEC_MAX_ROWS).contains(&m)
        && matvec_int_staged_shared_bytes(q, m, k)
            <= stream.device().properties().shared_memory_per_block
}

/// Whether [`matvec_int_staged`] is the faster integer product for this case: where it fits,
/// except Q6K with more than one activation row (measured on an H100: its general kernel at
/// m = 2 read 30% of the copy bandwidth against the two-launch product's 44%).
pub fn prefers_matvec_int_staged(stream: &Stream, q: QuantType, m: usize, k: usize) -> bool {
    matvec_int_staged_fits(stream, q, m, k) && !(q == QuantType::Q6K && m > 1)
}

/// The product of [`matvec_int`] (the same rounded activations and integer dot products) in
/// one launch: each block rounds the activations into its shared memory, then streams whole
/// weight rows with 16-byte loads. `x` and `w` 16-byte aligned, `x` and `y` contiguous;
/// an error (nothing queued) where [`matvec_int_staged_fits`] says no.
pub fn matvec_int_staged<I: KernelDType>(
    stream: &Stream,
    q: QuantType,
    w: StagedWeights<'_, '_>,
    (m, n, k): (usize, usize, usize),
    x: &DeviceSlice<'_, I>,
    y: &mut DeviceSliceMut<'_, I>,
) -> Result<()> {
    let epilogue = if m == 1 {
        Epilogue::Add(None)
    } else {
        Epilogue::None
    };
    staged_product(stream, q, w, (m, n, k), x, y, epilogue)
}

/// [`matvec_int_staged`] for one activation row with `residual` (`n` elements) added to the
/// product in the same launch: `y = x W^T + residual`, the bits of the product followed by
/// candle's `add` (a decode step's attention output or MLP added to the residual stream).
pub fn matvec_int_staged_add<I: KernelDType>(
    stream: &Stream,
    q: QuantType,
    w: StagedWeights<'_, '_>,
    (n, k): (usize, usize),
    x: &DeviceSlice<'_, I>,
    residual: &DeviceSlice<'_, I>,
    y: &mut DeviceSliceMut<'_, I>,
) -> Result<()> {
    staged_product(stream, q, w, (1, n, k), x, y, Epilogue::Add(Some(residual)))
}

/// The launch of [`matvec_int_staged`] and [`matvec_int_staged_add`].
fn staged_product<I: KernelDType>(
    stream: &Stream,
    q: QuantType,
    weights: StagedWeights<'_, '_>,
    (m, n, k): (usize, usize, usize),
    x: &DeviceSlice<'_, I>,
    y: &mut DeviceSliceMut<'_, I>,
    epilogue: Epilogue<'_, '_, I>,
) -> Result<()> {
    let op = "qmatvec (staged)";
    let w = weights.blocks;
    epilogue.check(op, n)?;
    check_float::<I>(op, FLOAT_REASON)?;
    check_int_type(q)?;
    check_matvec_shapes(op, q, w, (m, n, k), x.len(), y.len())?;
    if matvec_is_trivial((n, k), y)? {
        return Ok(());
    }
    // One activation row (a decode step) takes the kernel specialised for it.
    let rows = if m == 1 { "m1_" } else { "" };
    let kernel = format!("qmatvec_s8_{rows}{}_{}", q.name(), I::NAME);
    let (f, cfg) = staged_kernel::<I>(stream, op, q, (m, n, k), &kernel, w, x.device_ptr())?;
    let builder = f
        .builder(stream, cfg)
        .overlap_previous(weights.written_earlier)
        .arg(u32_arg(op, "m", m)?)
        .arg(u32_arg(op, "n", n)?)
        .arg(u32_arg(op, "k", k)?)
        .arg(*w)
        .arg(*x);
    // SAFETY: (u32 m, u32 n, u32 k, const u8* w, const I* x, I* y), followed for the m = 1
    // kernel by `const I* add` (the caller's epilogue: Add for m = 1, None otherwise): every
    // block reads x[0 .. m k) (x holds m k elements, checked, 16-byte aligned), weight rows
    // below n in 16-byte pieces no further than the last block's last byte (w holds n rows,
    // checked), add[0 .. n) when not null (checked), its shared memory within `shared` bytes
    // (the size this launch gives), and writes y[r n + c] for r < m, c < n (y holds m n,
    // checked).
    unsafe { epilogue.push(builder.arg(&mut *y)).launch()? };
    Ok(())
}

/// [`matvec_int_staged`] for one activation row already rounded (`xq`, `xds` as
/// [`quantize_activations`] or [`swiglu_rounded`] write them, sizes from
/// [`matvec_int_scratch`], 16-byte aligned): the same results, without every block rounding
/// the row again (measured on an H100: a 4096 x 14336 Q4K product took 21.47 µs with its row
/// rounded in each block, 17.09 µs reading it rounded before).
pub fn matvec_int_staged_rounded<I: KernelDType>(
    stream: &Stream,
    q: QuantType,
    w: StagedWeights<'_, '_>,
    (m, n, k): (usize, usize, usize),
    xq: &DeviceSlice<'_, u8>,
    xds: &DeviceSlice<'_, f32>,
    y: &mut DeviceSliceMut<'_, I>,
) -> Result<()> {
    staged_rounded_product(stream, q, w, (m, n, k), (xq, xds), y, None)
}

/// [`matvec_int_staged_rounded`] with `residual` (`n` elements) added to the product in the
/// same launch, as [`matvec_int_staged_add`].
#[allow(clippy::too_many_arguments)]
pub fn matvec_int_staged_rounded_add<I: KernelDType>(
    stream: &Stream,
    q: QuantType,
    w: StagedWeights<'_, '_>,
    (n, k): (usize, usize),
    xq: &DeviceSlice<'_, u8>,
    xds: &DeviceSlice<'_, f32>,
    residual: &DeviceSlice<'_, I>,
    y: &mut DeviceSliceMut<'_, I>,
) -> Result<()> {
    staged_rounded_product(stream, q, w, (1, n, k), (xq, xds), y, Some(residual))
}

/// The launch of [`matvec_int_staged_rounded`] and [`matvec_int_staged_rounded_add`].
fn staged_rounded_product<I: KernelDType>(
    stream: &Stream,
    q: QuantType,
    weights: StagedWeights<'_, '_>,
    (m, n, k): (usize, usize, usize),
    (xq, xds): (&DeviceSlice<'_, u8>, &DeviceSlice<'_, f32>),
    y: &mut DeviceSliceMut<'_, I>,
    residual: Option<&DeviceSlice<'_, I>>,
) -> Result<()> {
    let op = "qmatvec (staged, rounded activations)";
    let w = weights.blocks;
    if m != 1 {
        return Err(layout_err(
            op,
            format!("takes one activation row, got {m} (use matvec_int_staged)"),
        ));
    }
    check_int_product::<I>(op, q, w, (m, n, k), (m * k, y.len()), (xq.len(), xds.len()))?;
    if matvec_is_trivial((n, k), y)? {
        return Ok(());
    }
    let cfg = staged_config(stream, op, q, (m, n, k), "rounded")?;
    let kernel = format!("qmatvec_s8r_m1_{}_{}", q.name(), I::NAME);
    let epilogue = Epilogue::Add(residual);
    launch_rounded_product(
        stream,
        op,
        &kernel,
        cfg,
        w,
        (m, n, k),
        (xq, xds),
        y,
        epilogue,
        weights.written_earlier,
    )
}

/// The residual add and rms_norm that feed a decode step's product, done by the product:
/// [`NormedRow::x`] plus [`NormedRow::residual`] (rounded to `I`, written to
/// [`NormedRow::sum`]), rms-normalised with `alpha` and `eps`, rounded to `I` and then to 8
/// bits as [`matvec_int_staged`] rounds its row. Without a residual the row is `x`'s norm and
/// no sum is written.
pub struct NormedRow<'s, 'a, I: KernelDType> {
    /// The row (k elements).
    pub x: &'s DeviceSlice<'a, I>,
    /// Added to `x` before the norm, with `sum` receiving the result; both or neither.
    pub residual: Option<(&'s DeviceSlice<'a, I>, &'s mut DeviceSliceMut<'a, I>)>,
    /// The norm's weights (k elements).
    pub alpha: &'s DeviceSlice<'a, I>,
    /// Added to the mean of squares.
    pub eps: f32,
}

/// One activation row's residual add and rms_norm, then its product with `n` rows of `q`
/// weights, in one launch (`qmatvec_s8n_m1_*`): `y = rms_norm(x + residual, alpha, eps) W^T`
/// and `sum = x + residual`, candle-nn's `add_rms_norm` followed by [`matvec_int_staged`]. Every
/// block computes the norm (the row is read from L2 by each), so a decode step saves the norm's
/// launch. `n` and `k` non-zero. The values are those of `crate::nn::add_rms_norm` (`crate::nn::rms_norm` without a
/// residual) except the last bits of the norm, whose squares are summed in another order. Every
/// operand 16-byte aligned; an error (nothing queued) where [`matvec_int_staged_fits`] says no.
pub fn matvec_int_staged_normed<I: KernelDType>(
    stream: &Stream,
    q: QuantType,
    weights: StagedWeights<'_, '_>,
    (n, k): (usize, usize),
    row: NormedRow<'_, '_, I>,
    y: &mut DeviceSliceMut<'_, I>,
) -> Result<()> {
    let op = "qmatvec (staged, residual add and rms_norm)";
    let w = weights.blocks;
    check_float::<I>(op, FLOAT_REASON)?;
    check_int_type(q)?;
    check_matvec_shapes(op, q, w, (1, n, k), row.x.len(), y.len())?;
    let lengths = [
        ("alpha", row.alpha.len()),
        (
            "the residual",
            row.residual.as_ref().map_or(k, |(r, _)| r.len()),
        ),
        ("the sum", row.residual.as_ref().map_or(k, |(_, s)| s.len())),
    ];
    for (what, len) in lengths {
        if len != k {
            return Err(layout_err(
                op,
                format!("{what} holds {len} elements, the row {k}"),
            ));
        }
    }
    if n == 0 || k == 0 {
        return Err(layout_err(
            op,
            format!("takes a non-empty row and weights, got n = {n}, k = {k} (run the ops apart)"),
        ));
    }
    let kernel = format!("qmatvec_s8n_m1_{}_{}", q.name(), I::NAME);
    let (f, cfg) = staged_kernel::<I>(stream, op, q, (1, n, k), &kernel, w, row.x.device_ptr())?;
    check_aligned(op, "alpha", row.alpha.device_ptr())?;
    if let Some((r, sum)) = &row.residual {
        check_aligned(op, "the residual", r.device_ptr())?;
        check_aligned(op, "the sum", sum.device_ptr())?;
    }
    let builder = f
        .builder(stream, cfg)
        .overlap_previous(weights.written_earlier)
        .arg(u32_arg(op, "n", n)?)
        .arg(u32_arg(op, "k", k)?)
        .arg(*w)
        .arg(*row.x);
    let builder = match &row.residual {
        Some((r, _)) => builder.arg(**r),
        None => builder.arg(NullPtr),
    };
    let builder = builder.arg(*row.alpha).arg(row.eps);
    let builder = match row.residual {
        Some((_, sum)) => builder.arg(&mut *sum),
        None => builder.arg(NullPtr),
    };
    // SAFETY: (u32 n, u32 k, const u8* w, const I* x, const I* r, const I* alpha, float eps,
    // I* sum, I* y): every block reads x, alpha and r (null without a residual) [0 .. k) (each
    // holds k elements, checked, 16-byte aligned), weight rows below n in 16-byte pieces no
    // further than the last block's last byte (w holds n rows, checked), its shared memory
    // within the size this launch gives; block 0 writes sum[0 .. k) (k elements, checked; null
    // without a residual) and the teams write y[c] for c < n (y holds n, checked).
    unsafe { builder.arg(&mut *y).launch()? };
    Ok(())
}

/// candle-nn's `swiglu` over contiguous `[rows, 2 half]` input (`dst[r, j] = silu(src[r, j]) *
/// src[r, half + j]`, the same bits as [`crate::nn::swiglu`]) and its result rounded as
/// [`quantize_activations`] rounds it (`xq`, `xds` for `rows` rows of `half`), in one launch:
/// the decode step's down product then takes [`matvec_int_staged_rounded`]. `half` a multiple
/// of 32; `xq` and `xds` 16-byte aligned.
pub fn swiglu_rounded<I: KernelDType>(
    stream: &Stream,
    src: &DeviceSlice<'_, I>,
    dst: &mut DeviceSliceMut<'_, I>,
    xq: &mut DeviceSliceMut<'_, u8>,
    xds: &mut DeviceSliceMut<'_, f32>,
    rows: usize,
    half: usize,
) -> Result<()> {
    let op = "swiglu (rounded)";
    check_float::<I>(op, FLOAT_REASON)?;
    let (n, n2) = rows
        .checked_mul(half)
        .and_then(|n| Some((n, n.checked_mul(2)?)))
        .ok_or_else(|| layout_err(op, format!("{rows} rows of 2 x {half} overflow")))?;
    if half % 32 != 0 || src.len() != n2 || dst.len() != n {
        return Err(layout_err(
            op,
            format!(
                "({rows}, 2 x {half}) input and ({rows}, {half}) output need half a multiple of \
                 32, {n2} and {n} elements, got {} and {}",
                src.len(),
                dst.len()
            ),
        ));
    }
    check_scratch(op, (rows, half), xq.len(), xds.len())?;
    if n == 0 {
        return Ok(());
    }
    check_aligned(op, "the rounded activations", xq.device_ptr())?;
    check_aligned(op, "the activation factors", xds.device_ptr())?;
    let groups = n / 4;
    let f = function(stream, MODULE, &format!("swiglu_q8x_{}", I::NAME))?;
    let cfg = config_1d(
        op,
        "blocks",
        groups.div_ceil(QUANTIZE_BLOCK as usize),
        QUANTIZE_BLOCK,
    )?;
    // The kernel waits for the previous kernels before touching memory (rk_overlapped_entry).
    let builder = f
        .builder(stream, cfg)
        .overlap_previous(true)
        .arg(u32_arg(op, "groups", groups)?)
        .arg(u32_arg(op, "half", half)?)
        .arg(*src)
        .arg(&mut *dst)
        .arg(&mut *xq);
    // SAFETY: (u32 groups, u32 half, const I* x, I* out, i8* q, float2* ds): thread g < groups
    // (rows half / 4) reads x[r 2 half + j .. + 4) and x[r 2 half + half + j .. + 4) for its
    // row r and column j < half (x holds 2 rows half, checked), writes out[4 g .. 4 g + 4)
    // (out holds rows half), q's int g and ds[g / 8] (the scratch sizes, checked); the rest
    // only shuffle.
    unsafe { builder.arg(&mut *xds).launch()? };
    Ok(())
}

/// The staged kernel `kernel` and its launch for `m` rows of `k` activations of dtype `I` (at
/// `x`) times `n` rows of `q` weights `w`, after checking that both start 16-byte aligned.
fn staged_kernel<I: KernelDType>(
    stream: &Stream,
    op: &str,
    q: QuantType,
    (m, n, k): (usize, usize, usize),
    kernel: &str,
    w: &DeviceSlice<'_, u8>,
    x: hip_core::DevicePtr,
) -> Result<(hip_core::Function, LaunchConfig)> {
    let cfg = staged_config(stream, op, q, (m, n, k), I::NAME)?;
    check_aligned(op, "the weight blocks", w.device_ptr())?;
    check_aligned(op, "the activations", x)?;
    Ok((function(stream, MODULE, kernel)?, cfg))
}

/// The launch of a staged product of `m` rows of `k` activations (`what` names them in errors)
/// times `n` rows of `q` weights: blocks per multiprocessor as measured, 8 teams a block, the
/// dynamic shared memory; an error where it does not fit a block.
fn staged_config(
    stream: &Stream,
    op: &str,
    q: QuantType,
    (m, n, k): (usize, usize, usize),
    what: &str,
) -> Result<LaunchConfig> {
    // k is a whole number of blocks (checked by the callers), so a multiple of 32.
    let shared = matvec_int_staged_shared_bytes(q, m, k);
    if !matvec_int_staged_fits(stream, q, m, k) {
        let limit = stream.device().properties().shared_memory_per_block;
        return Err(layout_err(
            op,
            format!(
                "{m} rows of {k} {what} activations need {shared} bytes of shared memory, a \
                 block has {limit} (use matvec_int)"
            ),
        ));
    }
    let sms = stream.device().properties().multiprocessor_count.max(1) as usize;
    let blocks = n
        .div_ceil(STAGED_TEAMS as usize)
        .min(sms * staged_blocks_per_multiprocessor(q, m));
    let mut cfg = config_1d(op, "blocks", blocks, STAGED_TEAMS * 32)?;
    cfg.shared_mem_bytes = u32_of(op, "shared bytes", shared)?;
    Ok(cfg)
}

/// The launch of `qmoe_s8` (m = 1) and `qmoe_s8g` (m = 8) for `pairs` grid rows (pairs, or
/// chunks of 8 pairs) of `m` rows of `k` activations times `n` rows of their experts' `q`
/// weights: the staged product's block, with the blocks a one-row product keeps resident (per
/// multiprocessor, as measured) shared by the grid rows, at least one and at most one team a
/// weight row per grid row; grid (that, pairs).
pub(super) fn staged_moe_config(
    stream: &Stream,
    op: &str,
    q: QuantType,
    (m, n, k): (usize, usize, usize),
    pairs: u32,
    what: &str,
) -> Result<LaunchConfig> {
    let mut cfg = staged_config(stream, op, q, (m, n, k), what)?;
    let sms = stream.device().properties().multiprocessor_count.max(1) as usize;
    let resident = sms * staged_blocks_per_multiprocessor(q, 1);
    let per_pair = resident
        .div_ceil(pairs.max(1) as usize)
        .min(n.div_ceil(STAGED_TEAMS as usize))
        .max(1);
    cfg.grid = [u32_of(op, "blocks", per_pair)?, pairs, 1];
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared-memory padding the wrappers allocate for is each type's `SPAD` in the kernel
    /// source: less would let a block write past its shared memory.
    #[test]
    fn staged_padding_matches_the_kernels() {
        let src = crate::modules::full_source("quantized").expect("quantized");
        let p32 = "PARTS = P, NI = 4 / P, SPAD = 16 };";
        for (q, pad, line) in [
            (QuantType::Q4_0, 16, format!("QK = 32, BYTES = 18, {p32}")),
            (QuantType::Q4_1, 16, format!("QK = 32, BYTES = 20, {p32}")),
            (QuantType::Q5_0, 16, format!("QK = 32, BYTES = 22, {p32}")),
            (QuantType::Q5_1, 16, format!("QK = 32, BYTES = 24, {p32}")),
            (QuantType::Q8_0, 16, "NI = 8 / P, SPAD = 16 };".to_string()),
            (QuantType::Q8_1, 16, "NI = 8 / P, SPAD = 16 };".to_string()),
            // qi_qk45: HB (Q5K) 16, Q4K 32.
            (QuantType::Q4K, 32, "SPAD = HB ? 16 : 32 };".to_string()),
            (QuantType::Q5K, 16, "SPAD = HB ? 16 : 32 };".to_string()),
            (
                QuantType::Q2K,
                32,
                "BYTES = 84, PARTS = P, LP = 64 / P, NI = LP / 4, SPAD = 32 };".to_string(),
            ),
            (
                QuantType::Q3K,
                32,
                "BYTES = 110, PARTS = P, LP = 64 / P, NI = LP / 4, SPAD = 32 };".to_string(),
            ),
            (
                QuantType::Q6K,
                32,
                "BYTES = 210, PARTS = P, LP = 64 / P, NI = LP / 4, SPAD = 32 };".to_string(),
            ),
        ] {
            assert!(
                src.contains(&line),
                "{q:?}: kernels/quantized.hip lacks `{line}`"
            );
            assert_eq!(staged_activation_pad(q), pad, "{q:?}");
        }
    }

    /// The stage sizes the wrappers allocate shared memory for are the kernels' (`QS_ALL`'s
    /// third argument, a number or a define's default): a larger stage in the kernel would
    /// write past the block's shared memory.
    #[test]
    fn staged_stage_blocks_match_the_kernels() {
        let src = crate::modules::full_source("quantized").expect("quantized");
        let default_of = |name: &str| -> usize {
            let prefix = format!("#define {name} ");
            let line = src
                .lines()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("no `{prefix}` in kernels/quantized.hip"));
            line[prefix.len()..].trim().parse().expect("a number")
        };
        // Every type with a staged kernel (Q8K has no integer product).
        for q in QuantType::ALL.into_iter().filter(|&q| q != QuantType::Q8K) {
            let prefix = format!("QS_ALL({}, ", q.name());
            let line = src
                .lines()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("no `{prefix}` in kernels/quantized.hip"));
            let sb = line.split(", ").nth(2).expect("QS_ALL's stage argument");
            let blocks = sb.parse::<usize>().unwrap_or_else(|_| default_of(sb));
            assert_eq!(staged_stage_blocks(q), blocks, "{q:?}: `{line}`");
        }
    }
}
