//! Typed launch wrappers for fused attention (module `attention`): `softmax(Q K^T * scale + mask) V`
//! without materialising the scores, for prefill (query tiles, online softmax over key tiles),
//! decode (keys split across blocks, partial softmaxes merged: flash-decoding) and variable-length
//! batches (cumulative sequence offsets, as flash-attention's `varlen` takes them).
//!
//! Semantics (those of flash-attention 2): query row `i` of a sequence of `seq_q` queries against
//! `seq_k` keys sees key `j` when `i + seq_k - seq_q - window_left <= j <= i + seq_k - seq_q +
//! window_right` (bottom-right aligned; `None` is unbounded; causal is `window_right = Some(0)`).
//! An optional tanh softcap applies to the scaled scores, then the optional additive mask. Query
//! head `h` uses key/value head `h / (heads_q / heads_kv)` (grouped- and multi-query attention). A
//! row that sees no key (or only keys masked with -inf) is zeros, never NaN. Arithmetic is f32.
//!
//! Operands are addressed by element strides over (batch, sequence, head) with the head dim
//! contiguous, so `(b, s, h, d)` and `(b, h, s, d)` layouts and their views need no copy; base
//! pointers and strides must be multiples of 16 bytes (rows are read with 16-byte loads). Every
//! wrapper checks shapes, strides and extents against the slices before launching.

use hip_core::{DeviceSlice, DeviceSliceMut, KernelArg, KernelArgs, LaunchConfig, NullPtr, Stream};

use crate::dtype::{check_float, KernelDType};
use crate::elementwise::{check_operand, function, layout_err};
use crate::error::Result;
use crate::indexing::IndexErrorFlag;

mod selfcheck;

/// Why other dtypes are refused.
const FLOAT_REASON: &str = "fused attention takes f32, f16 or bf16 (f32 arithmetic)";
/// The kernel module.
const MODULE: &str = "attention";
/// Threads per block of every attention kernel.
const THREADS: u32 = 256;
/// The head dims with kernels.
pub const HEAD_DIMS: [usize; 6] = [32, 64, 80, 96, 128, 256];
/// Query rows up to which the split-key decode kernel is used (non-varlen).
pub const DECODE_MAX_SEQ_Q: usize = 8;
/// Queries (q heads sharing a kv head, times rows) one decode block carries: the decode kernels
/// come in these widths (`attn_decode_*_q{1,4,8}`).
const DECODE_QUERIES: [usize; 3] = [1, 4, 8];
/// Fewest keys per decode split.
const DECODE_MIN_KEYS_PER_SPLIT: usize = 128;
/// Decode blocks resident per multiprocessor (the NVIDIA build's register bound for the common
/// widths): the split count fills one wave of them, since every block is latency-bound on its
/// own loads and a second, partial wave would double the time of the first.
const DECODE_BLOCKS_PER_SM: usize = 2;
/// Most decode splits (`AT_MAX_SPLITS` in the source): a cap on the merge's work per row, since
/// more splits than blocks the GPU holds at once gain nothing.
const DECODE_MAX_SPLITS: usize = 256;
/// NVIDIA's matrix-instruction decode (`at_decode_nv`): warps per block (`AT_DN_WAVES`), keys
/// per warp tile (`AT_DN_KEYS`), tiles in each warp's ring (`AT_DN_STAGES`) and query slots per
/// block (`AT_DN_ROWS`).
const NV_DECODE_WAVES: usize = 4;
const NV_DECODE_KEYS: usize = 16;
const NV_DECODE_STAGES: usize = 2;
const NV_DECODE_ROWS: usize = 16;
/// Blocks of NVIDIA's matrix decode per multiprocessor that the split count aims at. Shared
/// memory and registers allow 3 at head dim 128 on an H100, but 2 were faster at 4k, 16k and
/// 64k keys (`tune_attention decode-sweep`, docs/attention.md): fewer splits to merge.
const NV_DECODE_BLOCKS_PER_SM: usize = 2;
/// Fewest keys per split of NVIDIA's matrix decode (its warps take 16-key tiles).
const NV_DECODE_MIN_KEYS_PER_SPLIT: usize = 64;
/// Head dims with matrix-instruction prefill kernels (f16 and bf16).
pub const MMA_HEAD_DIMS: [usize; 5] = [32, 64, 80, 96, 128];
/// Query rows per block of the matrix-instruction prefill (`AT_MMA_BM`: 4 waves x 16 rows).
const MMA_BLOCK_ROWS: usize = 64;
/// Waves per block of the matrix-instruction prefill (`AT_MMA_WAVES`).
const MMA_WAVES: u32 = 4;
/// NVIDIA's matrix-instruction prefill (`at_prefill_nv`): warps per block (`AT_NV_WAVES`), row
/// tiles of 16 per warp (`AT_NV_RT`) and keys per tile (`AT_NV_BN`).
const NV_WAVES: usize = 4;
const NV_ROW_TILES: usize = 2;
const NV_KEYS: usize = 64;
/// Most query or key rows NVIDIA's matrix-instruction prefill takes (it indexes rows with
/// 32-bit integers; longer sequences take the portable kernels).
const NV_MAX_ROWS: usize = 1 << 30;

/// Dynamic shared memory of NVIDIA's matrix-instruction prefill (`AT_NV_SHARED`): K and V tiles,
/// and the Q tile where a warp has several row tiles, rows padded by 16 bytes.
fn nv_prefill_shared_bytes(elem_bytes: usize, head_dim: usize) -> usize {
    let q_rows = if NV_ROW_TILES > 1 {
        16 * NV_ROW_TILES * NV_WAVES
    } else {
        0
    };
    (2 * NV_KEYS + q_rows) * (head_dim + 8) * elem_bytes
}

/// Dynamic shared memory of NVIDIA's matrix-instruction decode (`AT_DN_SHARED`): every warp's
/// ring of K and V tiles, rows padded by 16 bytes.
fn nv_decode_shared_bytes(elem_bytes: usize, head_dim: usize) -> usize {
    NV_DECODE_WAVES * NV_DECODE_STAGES * 2 * NV_DECODE_KEYS * (head_dim + 8) * elem_bytes
}

/// The problem's sizes. For variable-length batches, `seq_q`/`seq_k` are the longest sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnShape {
    /// Sequences in the batch.
    pub batch: usize,
    /// Query rows per sequence.
    pub seq_q: usize,
    /// Key/value rows per sequence.
    pub seq_k: usize,
    /// Query heads (a multiple of `heads_kv`).
    pub heads_q: usize,
    /// Key/value heads.
    pub heads_kv: usize,
    /// The head dim of queries, keys, values and output (one of [`HEAD_DIMS`]).
    pub head_dim: usize,
}

/// Scale, softcap and window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnOptions {
    /// Multiplies `Q K^T` (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
    /// `cap * tanh(s / cap)` on the scaled scores (gemma2's logit softcapping), when set (> 0).
    pub softcap: Option<f32>,
    /// Keys at most this far left of the diagonal are seen (`None`: all).
    pub window_left: Option<usize>,
    /// Keys at most this far right of the diagonal are seen (`None`: all; causal is `Some(0)`).
    pub window_right: Option<usize>,
    /// Which prefill kernels run (decode, up to [`DECODE_MAX_SEQ_Q`] query rows, has one kind).
    pub kernel: AttnKernel,
}

/// The kernel family. Prefill has matrix-instruction kernels on every target with the
/// instructions; decode (up to [`DECODE_MAX_SEQ_Q`] query rows) on NVIDIA sm_80+ only, and
/// elsewhere every choice decodes with the portable kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttnKernel {
    /// The matrix-instruction kernels where the device has them (MFMA on CDNA2/3, WMMA on
    /// RDNA3/4, mma on NVIDIA sm_80+), for f16/bf16 and [`MMA_HEAD_DIMS`], once they agree with
    /// the portable kernels on small problems at first use on the device (see
    /// [`matrix_prefill_verdict`]); otherwise the portable kernels.
    #[default]
    Auto,
    /// The portable kernels (every target, dtype and head dim).
    Portable,
    /// The matrix-instruction kernels without the first-use check; for prefill an error where
    /// there are none.
    Matrix,
    /// The tile-abstraction matrix kernels (`at_prefill_mma`) without the first-use check: on
    /// AMD the same kernels as [`AttnKernel::Matrix`]; on NVIDIA, where `Matrix` runs a kernel
    /// written for `mma.sync` alone, the AMD kernels' algorithm compiled for `mma.sync`, so that
    /// the GPUs at hand run it too (the test suite does). An error where there are none. Decode
    /// takes the portable kernels.
    Tiles,
}

impl AttnOptions {
    /// Plain (optionally causal) attention with `scale`.
    pub fn new(scale: f32, causal: bool) -> Self {
        AttnOptions {
            scale,
            softcap: None,
            window_left: None,
            window_right: causal.then_some(0),
            kernel: AttnKernel::Auto,
        }
    }
}

/// One operand: its elements and their strides over (batch, sequence, head); the head dim is
/// contiguous. For variable-length batches the batch stride is ignored (sequences are packed
/// along the sequence dim).
#[derive(Clone, Copy)]
pub struct AttnInput<'a, T: hip_core::DeviceRepr> {
    /// The elements (already offset to the operand's first element).
    pub data: DeviceSlice<'a, T>,
    /// Element strides of (batch, sequence, head).
    pub strides: [usize; 3],
}

/// The output operand (same addressing as [`AttnInput`]).
pub struct AttnOutput<'s, 'a, T: hip_core::DeviceRepr> {
    /// The elements.
    pub data: &'s mut DeviceSliceMut<'a, T>,
    /// Element strides of (batch, sequence, head).
    pub strides: [usize; 3],
}

/// An additive mask over (batch, query head, query row, key row), broadcast with zero strides.
#[derive(Clone, Copy)]
pub struct AttnMask<'a, T: hip_core::DeviceRepr> {
    /// The elements.
    pub data: DeviceSlice<'a, T>,
    /// Element strides of (batch, query head, query row, key row); 0 broadcasts.
    pub strides: [usize; 4],
}

/// Cumulative sequence offsets of a variable-length batch (`batch + 1` entries each, read on the
/// device; bad offsets are recorded in the caller's [`IndexErrorFlag`]).
#[derive(Clone, Copy)]
pub struct Varlen<'a> {
    /// Query offsets: sequence `b` is rows `cu_q[b] .. cu_q[b + 1]` of q and the output.
    pub cu_q: DeviceSlice<'a, u32>,
    /// Key offsets: sequence `b` is rows `cu_k[b] .. cu_k[b + 1]` of k and v.
    pub cu_k: DeviceSlice<'a, u32>,
    /// Rows of q and the output.
    pub total_q: usize,
    /// Rows of k and v.
    pub total_k: usize,
}

/// The kernels' parameter struct (`AttnParams` in attention.hip).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Params {
    q: [i64; 3],
    k: [i64; 3],
    v: [i64; 3],
    o: [i64; 3],
    m: [i64; 4],
    batch: i64,
    sq: i64,
    sk: i64,
    hq: i64,
    hkv: i64,
    total_q: i64,
    total_k: i64,
    window_left: i64,
    window_right: i64,
    splits_rows: i64,
    reserved: i64,
    scale: f32,
    softcap: f32,
}

#[derive(Clone, Copy)]
struct ParamsArg(Params);

impl KernelArg for ParamsArg {
    fn push_arg(&self, args: &mut KernelArgs, _stream: &Stream) -> hip_core::Result<()> {
        // SAFETY: `Params` is `#[repr(C)]`: 27 i64 then 2 f32, no padding; the kernels take
        // `AttnParams` (the same fields in the same order) by value at this position.
        unsafe { args.push_raw(self.0) }
    }
}

/// The prefill kernels' first argument (`AttnParams`) for `shape` and `opts`, with q, k, v and
/// the output at `strides` (element strides over (batch, rows, heads) each), no mask, fixed
/// lengths: for tools that launch their own builds of the kernels (`examples/tune_attention.rs`).
/// The other arguments follow it in the kernels' order: q, k, v, mask, cu_q, cu_k, out, err.
pub fn prefill_kernel_params(
    shape: &AttnShape,
    opts: &AttnOptions,
    strides: [[usize; 3]; 4],
) -> Result<impl KernelArg + Copy> {
    prefill_params(shape, opts, strides)
}

/// [`prefill_kernel_params`], as our own type.
fn prefill_params(
    shape: &AttnShape,
    opts: &AttnOptions,
    strides: [[usize; 3]; 4],
) -> Result<ParamsArg> {
    let op = "prefill_kernel_params";
    let mut p = params(op, shape, opts, shape.seq_q.saturating_add(shape.seq_k))?;
    for (dst, src) in [&mut p.q, &mut p.k, &mut p.v, &mut p.o]
        .into_iter()
        .zip(strides)
    {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = to_i64(op, "stride", s)?;
        }
    }
    p.total_q = p.sq;
    p.total_k = p.sk;
    Ok(ParamsArg(p))
}

/// The decode kernels' first argument (`AttnParams`) for `shape` and `opts`, as
/// [`prefill_kernel_params`] (the other arguments: q, k, v, mask, out, part; then the merge's
/// (params, splits, part, out)), with the partial buffers' row count set.
pub fn decode_kernel_params(
    shape: &AttnShape,
    opts: &AttnOptions,
    strides: [[usize; 3]; 4],
) -> Result<impl KernelArg + Copy> {
    let ParamsArg(mut p) = prefill_params(shape, opts, strides)?;
    let op = "decode_kernel_params";
    let rows = shape
        .batch
        .checked_mul(shape.heads_q)
        .and_then(|x| x.checked_mul(shape.seq_q))
        .ok_or_else(|| layout_err(op, "batch x heads x query rows overflows usize"))?;
    p.splits_rows = to_i64(op, "rows", rows)?;
    Ok(ParamsArg(p))
}

/// A device pointer or null.
struct OptArg<'a, T: hip_core::DeviceRepr>(Option<DeviceSlice<'a, T>>);

impl<T: hip_core::DeviceRepr> KernelArg for OptArg<'_, T> {
    fn push_arg(&self, args: &mut KernelArgs, stream: &Stream) -> hip_core::Result<()> {
        match &self.0 {
            Some(s) => s.push_arg(args, stream),
            None => NullPtr.push_arg(args, stream),
        }
    }
}

/// The prefill kernels' (query rows, key rows) per tile: mirrors the instantiations in
/// attention.hip (the kernel strides over query tiles, so a mismatch costs time, not results).
fn prefill_tile(elem_bytes: usize, head_dim: usize) -> (usize, usize) {
    match (elem_bytes, head_dim) {
        (2, 32 | 64 | 80) => (64, 64),
        (2, 96 | 128) => (64, 32),
        (2, _) => (32, 32),
        (_, 32) => (64, 64),
        (_, 64) => (64, 32),
        (_, 256) => (16, 16),
        _ => (32, 32),
    }
}

fn to_i64(op: &str, what: &str, v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| layout_err(op, format!("{what} = {v} does not fit in i64")))
}

/// One operand as the checks see it: its slice, strides over (batch, rows, heads) and extent.
struct Extent {
    what: &'static str,
    ptr: hip_core::DevicePtr,
    len: usize,
    strides: [usize; 3],
    rows: usize,
    heads: usize,
}

impl Extent {
    /// Checks a 16-byte aligned base and strides and that every element of `batch` x rows x
    /// heads x `head_dim` lies inside the slice; returns the strides as the kernels take them.
    fn check(
        &self,
        op: &str,
        batch: usize,
        elem_bytes: usize,
        head_dim: usize,
    ) -> Result<[i64; 3]> {
        let (what, strides) = (self.what, self.strides);
        let vec = 16 / elem_bytes;
        if self.ptr.0 % 16 != 0 || strides.iter().any(|s| s % vec != 0) {
            return Err(layout_err(
                op,
                format!(
                    "{what} must start 16-byte aligned with strides that are multiples of {vec} \
                     elements, got strides {strides:?} (make it contiguous first)"
                ),
            ));
        }
        check_operand(
            op,
            what,
            &[batch, self.rows, self.heads, head_dim],
            &[strides[0], strides[1], strides[2], 1],
            self.len,
        )?;
        Ok([
            to_i64(op, "stride", strides[0])?,
            to_i64(op, "stride", strides[1])?,
            to_i64(op, "stride", strides[2])?,
        ])
    }
}

/// [`Extent::check`] of q, k, v and the output, in that order: q and the output span `rows_q`
/// rows of `heads_q` heads, k and v `rows_k` rows of `heads_kv`. Packed (varlen) operands are
/// one batch whose batch stride is ignored.
#[allow(clippy::too_many_arguments)]
fn check_operands<T: hip_core::DeviceRepr>(
    op: &str,
    shape: &AttnShape,
    (rows_q, rows_k): (usize, usize),
    packed: bool,
    q: &AttnInput<'_, T>,
    k: &AttnInput<'_, T>,
    v: &AttnInput<'_, T>,
    out: &AttnOutput<'_, '_, T>,
) -> Result<[[i64; 3]; 4]> {
    let batch = if packed { 1 } else { shape.batch };
    let strides_of = |s: [usize; 3]| if packed { [0, s[1], s[2]] } else { s };
    let input = |what, x: &AttnInput<'_, T>, rows, heads| Extent {
        what,
        ptr: x.data.device_ptr(),
        len: x.data.len(),
        strides: strides_of(x.strides),
        rows,
        heads,
    };
    let extents = [
        input("q", q, rows_q, shape.heads_q),
        input("k", k, rows_k, shape.heads_kv),
        input("v", v, rows_k, shape.heads_kv),
        Extent {
            what: "the output",
            ptr: out.data.device_ptr(),
            len: out.data.len(),
            strides: strides_of(out.strides),
            rows: rows_q,
            heads: shape.heads_q,
        },
    ];
    let mut strides = [[0i64; 3]; 4];
    for (s, e) in strides.iter_mut().zip(extents) {
        *s = e.check(op, batch, std::mem::size_of::<T>(), shape.head_dim)?;
    }
    Ok(strides)
}

/// Validates the problem (everything but the operands' extents) and builds the parameters.
/// `reach`: at least the longest sequence's query rows plus keys (windows are clamped to it).
fn params(op: &str, shape: &AttnShape, opts: &AttnOptions, reach: usize) -> Result<Params> {
    if !HEAD_DIMS.contains(&shape.head_dim) {
        return Err(layout_err(
            op,
            format!(
                "head dim {} has no kernel (supported: {HEAD_DIMS:?})",
                shape.head_dim
            ),
        ));
    }
    if shape.heads_kv == 0 || shape.heads_q % shape.heads_kv != 0 {
        return Err(layout_err(
            op,
            format!(
                "{} query heads are not a multiple of {} key/value heads",
                shape.heads_q, shape.heads_kv
            ),
        ));
    }
    let softcap = match opts.softcap {
        None => 0.0,
        Some(c) if c.is_finite() && c > 0.0 => c,
        Some(c) => {
            return Err(layout_err(
                op,
                format!("the softcap must be finite and positive, got {c}"),
            ))
        }
    };
    if !opts.scale.is_finite() {
        return Err(layout_err(
            op,
            format!("the softmax scale must be finite, got {}", opts.scale),
        ));
    }
    // A window of a sequence's query rows + keys or more reaches every key from every query row
    // (the first allowed key, i + (seq_k - seq_q) - window_left, is then below 0, the last at
    // or above seq_k), so larger windows are clamped to `reach`: the kernels' key bounds then
    // stay far from i64's range (a window near i64::MAX would overflow them).
    let window = |w: Option<usize>, what: &str| match w {
        None => Ok(-1),
        Some(w) => to_i64(op, what, w.min(reach)),
    };
    Ok(Params {
        batch: to_i64(op, "batch", shape.batch)?,
        sq: to_i64(op, "seq_q", shape.seq_q)?,
        sk: to_i64(op, "seq_k", shape.seq_k)?,
        hq: to_i64(op, "heads_q", shape.heads_q)?,
        hkv: to_i64(op, "heads_kv", shape.heads_kv)?,
        window_left: window(opts.window_left, "window_left")?,
        window_right: window(opts.window_right, "window_right")?,
        scale: opts.scale,
        softcap,
        ..Params::default()
    })
}

fn grid_dim(op: &str, what: &str, v: usize, max: usize) -> Result<u32> {
    if v > max {
        return Err(layout_err(
            op,
            format!("{what} = {v} exceeds one launch's {max}"),
        ));
    }
    Ok(v as u32)
}

/// Fused attention over fixed-length sequences: `out = softmax(q k^T * scale + mask) v` per
/// (batch, query head). `q` and `out` are (batch, seq_q, heads_q, head_dim) through their strides,
/// `k` and `v` (batch, seq_k, heads_kv, head_dim); the mask (q's dtype) broadcasts to (batch,
/// heads_q, seq_q, seq_k). Up to [`DECODE_MAX_SEQ_Q`] query rows take the split-key decode path.
#[allow(clippy::too_many_arguments)]
pub fn attention<T: KernelDType>(
    stream: &Stream,
    shape: &AttnShape,
    opts: &AttnOptions,
    q: AttnInput<'_, T>,
    k: AttnInput<'_, T>,
    v: AttnInput<'_, T>,
    mask: Option<AttnMask<'_, T>>,
    out: AttnOutput<'_, '_, T>,
) -> Result<()> {
    let op = "flash_attn";
    check_float::<T>(op, FLOAT_REASON)?;
    let mut p = params(op, shape, opts, shape.seq_q.saturating_add(shape.seq_k))?;
    let es = std::mem::size_of::<T>();
    let d = shape.head_dim;
    let (b, sq, sk) = (shape.batch, shape.seq_q, shape.seq_k);
    [p.q, p.k, p.v, p.o] = check_operands(op, shape, (sq, sk), false, &q, &k, &v, &out)?;
    if let Some(m) = &mask {
        check_operand(
            op,
            "the mask",
            &[b, shape.heads_q, sq, sk],
            &m.strides,
            m.data.len(),
        )?;
        for (pm, s) in p.m.iter_mut().zip(m.strides) {
            *pm = to_i64(op, "stride", s)?;
        }
    }
    p.total_q = p.sq;
    p.total_k = p.sk;
    if b == 0 || sq == 0 || shape.heads_q == 0 {
        return Ok(());
    }
    let mask_arg = OptArg(mask.map(|m| m.data));
    if sq <= DECODE_MAX_SEQ_Q {
        return decode(stream, shape, p, opts.kernel, q, k, v, mask_arg, out);
    }
    let kind = prefill_kind::<T>(stream, op, opts.kernel, d, sq.max(sk))?;
    let no_cu = OptArg::<u32>(None);
    let launch = PrefillLaunch {
        op,
        kind,
        elem_bytes: es,
        d,
        seq_q: sq,
        heads_q: shape.heads_q,
        nvidia: stream.device().platform() == hip_core::Platform::Nvidia,
        batch: b,
    };
    let f = launch.function::<T>(stream)?;
    let builder = f
        .builder(stream, launch.config(stream)?)
        .arg(ParamsArg(p))
        .arg(q.data)
        .arg(k.data)
        .arg(v.data)
        .arg(mask_arg)
        .arg(no_cu)
        .arg(OptArg::<u32>(None))
        .arg(&mut *out.data);
    // SAFETY: (AttnParams p, const T* q, k, v, mask, const u32* cu_q, cu_k, T* o, u32* err), the
    // same for both kernel kinds: every element the kernel reads or writes lies within the
    // (batch, rows, heads, head_dim) extents checked above for each operand and the mask;
    // without offsets the error record is never touched (null).
    unsafe { builder.arg(NullPtr).launch()? };
    Ok(())
}

/// The prefill kernels `choice` selects for T and head dim `d` on the stream's device, for
/// sequences of up to `rows` query or key rows (NVIDIA's matrix-instruction kernels index rows
/// with 32-bit integers: longer ones take the portable kernels).
fn prefill_kind<T: KernelDType>(
    stream: &Stream,
    op: &str,
    choice: AttnKernel,
    d: usize,
    rows: usize,
) -> Result<PrefillKind> {
    let nvidia = stream.device().platform() == hip_core::Platform::Nvidia;
    if nvidia && rows > NV_MAX_ROWS && choice == AttnKernel::Matrix {
        // (The tile kernels index rows with 64-bit integers.)
        return Err(layout_err(
            op,
            format!(
                "the matrix-instruction kernels take at most {NV_MAX_ROWS} query or key rows, \
                 got {rows}"
            ),
        ));
    }
    let exist = has_matrix_kernels::<T>(d);
    match choice {
        AttnKernel::Portable => Ok(PrefillKind::Portable),
        AttnKernel::Auto if !exist || (nvidia && rows > NV_MAX_ROWS) => Ok(PrefillKind::Portable),
        AttnKernel::Auto => Ok(if selfcheck::verdict::<T>(stream, d)? {
            PrefillKind::Matrix
        } else {
            PrefillKind::Portable
        }),
        AttnKernel::Matrix | AttnKernel::Tiles if !exist => Err(layout_err(
            op,
            format!(
                "the matrix-instruction kernels take f16 or bf16 with head dims \
                 {MMA_HEAD_DIMS:?}, got {} with head dim {d}",
                T::NAME
            ),
        )),
        AttnKernel::Matrix => Ok(PrefillKind::Matrix),
        AttnKernel::Tiles => Ok(PrefillKind::Tiles),
    }
}

/// Whether the matrix-instruction kernels of T (f16 or bf16) and head dim `d` (prefill, and
/// decode on NVIDIA) are used on the stream's device by [`AttnKernel::Auto`]: false where the
/// target has no such kernels or where they disagreed with the portable kernels on small known
/// problems (a prefill and a decode), run once per (device, dtype, head dim) at first use (one
/// warning, to stderr, names the difference). The check synchronises the stream.
pub fn matrix_prefill_verdict<T: KernelDType>(stream: &Stream, head_dim: usize) -> Result<bool> {
    if !has_matrix_kernels::<T>(head_dim) {
        return Ok(false);
    }
    selfcheck::verdict::<T>(stream, head_dim)
}

/// Whether matrix-instruction prefill kernels exist for T and head dim `d` (f16/bf16 and
/// [`MMA_HEAD_DIMS`]; whether the target has them is the module's business).
fn has_matrix_kernels<T: KernelDType>(d: usize) -> bool {
    T::NAME != "f32" && MMA_HEAD_DIMS.contains(&d)
}

/// The two prefill kernel kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PrefillKind {
    Portable,
    Matrix,
    Tiles,
}

/// One prefill launch's kernel and grid.
struct PrefillLaunch<'a> {
    op: &'a str,
    kind: PrefillKind,
    elem_bytes: usize,
    d: usize,
    seq_q: usize,
    heads_q: usize,
    batch: usize,
    /// The device is NVIDIA's (its `Matrix` kernels are `at_prefill_nv`).
    nvidia: bool,
}

impl PrefillLaunch<'_> {
    fn name(&self, dtype: &str) -> String {
        match self.kind {
            PrefillKind::Portable => format!("attn_prefill_{dtype}_d{}", self.d),
            PrefillKind::Matrix => format!("attn_prefill_mma_{dtype}_d{}", self.d),
            PrefillKind::Tiles if self.nvidia => format!("attn_prefill_tiles_{dtype}_d{}", self.d),
            PrefillKind::Tiles => format!("attn_prefill_mma_{dtype}_d{}", self.d),
        }
    }

    /// The kernel, allowed the dynamic shared memory its launch asks for.
    fn function<T: KernelDType>(&self, stream: &Stream) -> Result<hip_core::Function> {
        let f = function(stream, MODULE, &self.name(T::NAME))?;
        let shared = self.shared_bytes();
        if shared > 0 {
            f.allow_dynamic_shared(shared as u32)?;
        }
        Ok(f)
    }

    /// Dynamic shared memory per block: NVIDIA's matrix-instruction kernels take theirs at
    /// launch; the others declare theirs statically.
    fn shared_bytes(&self) -> usize {
        if self.kind == PrefillKind::Matrix && self.nvidia {
            nv_prefill_shared_bytes(self.elem_bytes, self.d)
        } else {
            0
        }
    }

    fn config(&self, stream: &Stream) -> Result<LaunchConfig> {
        let (rows, threads) = match self.kind {
            PrefillKind::Portable => (prefill_tile(self.elem_bytes, self.d).0, THREADS),
            PrefillKind::Matrix if self.nvidia => {
                (16 * NV_ROW_TILES * NV_WAVES, 32 * NV_WAVES as u32)
            }
            PrefillKind::Matrix | PrefillKind::Tiles => {
                let wave = stream.device().properties().warp_size.max(1);
                (MMA_BLOCK_ROWS, MMA_WAVES * wave)
            }
        };
        Ok(LaunchConfig {
            grid: [
                grid_dim(
                    self.op,
                    "query tiles",
                    self.seq_q.max(1).div_ceil(rows),
                    i32::MAX as usize,
                )?,
                grid_dim(self.op, "query heads", self.heads_q, 65_535)?,
                grid_dim(self.op, "batch", self.batch, 65_535)?,
            ],
            block: [threads, 1, 1],
            shared_mem_bytes: self.shared_bytes() as u32,
        })
    }
}

/// The narrowest decode kernel width that carries `queries` (q heads of a kv head x rows) in one
/// block, or the widest (several blocks, "slices", share the kv head).
fn decode_queries(queries: usize) -> usize {
    DECODE_QUERIES
        .into_iter()
        .find(|&w| w >= queries)
        .unwrap_or(DECODE_QUERIES[DECODE_QUERIES.len() - 1])
}

/// A decode launch's shape: the kernel width, the blocks per kv head ("slices") and the key
/// splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DecodeGrid {
    nq: usize,
    slices: usize,
    splits: usize,
}

/// The decode grid for `kv_heads` (batch x kv heads) each carrying `queries` query rows x q
/// heads, over `keys` keys, on `sms` multiprocessors. Keys are split until the grid holds
/// about DECODE_BLOCKS_PER_SM blocks per multiprocessor (splits of at least
/// DECODE_MIN_KEYS_PER_SPLIT keys). The widest kernel reads every key once for all its queries,
/// but where even split keys leave the GPU mostly idle (short caches: a block's time is then
/// its instructions' latency, which grows with its queries), narrower kernels that spread
/// the queries over more blocks are taken, down to one query per block.
fn decode_grid(kv_heads: usize, queries: usize, keys: usize, sms: usize) -> DecodeGrid {
    let grid = |nq: usize| {
        let grid = split_grid(
            kv_heads,
            queries,
            nq,
            keys,
            DECODE_BLOCKS_PER_SM * sms,
            DECODE_MIN_KEYS_PER_SPLIT,
        );
        (grid, kv_heads.saturating_mul(grid.slices * grid.splits))
    };
    // The widest width that fills the GPU, else the narrowest.
    let widest = decode_queries(queries);
    DECODE_QUERIES
        .into_iter()
        .rev()
        .filter(|&w| w <= widest)
        .map(grid)
        .find(|&(_, total)| total >= sms)
        .unwrap_or_else(|| grid(DECODE_QUERIES[0]))
        .0
}

/// The grid of NVIDIA's matrix decode: 16 query slots a block, keys split until the grid holds
/// NV_DECODE_BLOCKS_PER_SM blocks per multiprocessor (at least NV_DECODE_MIN_KEYS_PER_SPLIT
/// keys a split).
fn nv_decode_grid(kv_heads: usize, queries: usize, keys: usize, sms: usize) -> DecodeGrid {
    split_grid(
        kv_heads,
        queries,
        NV_DECODE_ROWS,
        keys,
        NV_DECODE_BLOCKS_PER_SM * sms,
        NV_DECODE_MIN_KEYS_PER_SPLIT,
    )
}

/// Blocks of `nq` queries over `queries` per kv head ("slices"), and key splits until the grid
/// holds about `blocks_wanted` blocks (splits of at least `min_keys` keys, at most
/// DECODE_MAX_SPLITS).
fn split_grid(
    kv_heads: usize,
    queries: usize,
    nq: usize,
    keys: usize,
    blocks_wanted: usize,
    min_keys: usize,
) -> DecodeGrid {
    let slices = queries.div_ceil(nq);
    let blocks = kv_heads.saturating_mul(slices);
    // Rounded down: a block past the wave would run alone after it, at the cost of a wave.
    let splits = (blocks_wanted / blocks.max(1))
        .min(keys.div_ceil(min_keys))
        .clamp(1, DECODE_MAX_SPLITS);
    DecodeGrid { nq, slices, splits }
}

/// The split-key decode path and, with several splits, the merge.
#[allow(clippy::too_many_arguments)]
fn decode<T: KernelDType>(
    stream: &Stream,
    shape: &AttnShape,
    mut p: Params,
    choice: AttnKernel,
    q: AttnInput<'_, T>,
    k: AttnInput<'_, T>,
    v: AttnInput<'_, T>,
    mask: OptArg<'_, T>,
    out: AttnOutput<'_, '_, T>,
) -> Result<()> {
    let op = "flash_attn";
    let d = shape.head_dim;
    // The kernel walks a split's keys and indexes query rows and heads with 32-bit integers;
    // its key loop looks up to 128 keys past the one it reads, so keys stop short of i32::MAX.
    const MAX_KEYS: usize = i32::MAX as usize - 1024;
    if shape.seq_k > MAX_KEYS || shape.heads_q.saturating_mul(shape.seq_q) > i32::MAX as usize {
        return Err(layout_err(
            op,
            format!(
                "the decode path takes at most {MAX_KEYS} keys and {} query rows x heads (got {} \
                 keys, {} x {})",
                i32::MAX,
                shape.seq_k,
                shape.seq_q,
                shape.heads_q
            ),
        ));
    }
    let group = shape.heads_q / shape.heads_kv;
    let device = stream.device();
    let sms = device.properties().multiprocessor_count.max(1) as usize;
    // NVIDIA sm_80+ has a matrix-instruction decode for f16/bf16 (`Auto` once the first-use
    // check has passed, or `Matrix`) up to 2^30 keys (it counts a split's tiles in 32 bits);
    // `Portable`, `Tiles` and every other case take the portable decode.
    let matrix = device.platform() == hip_core::Platform::Nvidia
        && device.properties().compute_capability.0 >= 8
        && has_matrix_kernels::<T>(d)
        && shape.seq_k <= NV_MAX_ROWS
        && match choice {
            AttnKernel::Matrix => true,
            AttnKernel::Auto => selfcheck::verdict::<T>(stream, d)?,
            AttnKernel::Portable | AttnKernel::Tiles => false,
        };
    let overflow = || layout_err(op, "batch x heads x query rows overflows usize");
    let kv_heads = shape
        .batch
        .checked_mul(shape.heads_kv)
        .ok_or_else(overflow)?;
    let queries = shape.seq_q * group; // at most 8 x heads_q, checked above
    let rows = shape
        .batch
        .checked_mul(shape.heads_q * shape.seq_q)
        .ok_or_else(overflow)?;
    let DecodeGrid { nq, slices, splits } = if matrix {
        nv_decode_grid(kv_heads, queries, shape.seq_k, sms)
    } else {
        decode_grid(kv_heads, queries, shape.seq_k, sms)
    };
    p.splits_rows = to_i64(op, "rows", rows)?;
    let config = LaunchConfig {
        grid: [
            splits as u32,
            grid_dim(
                op,
                "kv heads x query slices",
                shape.heads_kv * slices,
                65_535,
            )?,
            grid_dim(op, "batch", shape.batch, 65_535)?,
        ],
        block: [
            if matrix {
                32 * NV_DECODE_WAVES as u32
            } else {
                THREADS
            },
            1,
            1,
        ],
        shared_mem_bytes: if matrix {
            nv_decode_shared_bytes(std::mem::size_of::<T>(), d) as u32
        } else {
            0
        },
    };
    let part_len = splits
        .checked_mul(rows)
        .and_then(|x| x.checked_mul(d + 2))
        .ok_or_else(|| layout_err(op, "the partial-sum buffer overflows usize"))?;
    let mut part = if splits > 1 {
        Some(stream.alloc::<f32>(part_len)?)
    } else {
        None
    };
    let f = if matrix {
        let f = function(stream, MODULE, &format!("attn_decode_nv_{}_d{d}", T::NAME))?;
        f.allow_dynamic_shared(config.shared_mem_bytes)?;
        f
    } else {
        function(
            stream,
            MODULE,
            &format!("attn_decode_{}_d{d}_q{nq}", T::NAME),
        )?
    };
    // The decode kernels wait for the previous kernels before touching memory
    // (rk_overlapped_entry), so the launch may overlap the previous kernel.
    let builder = f
        .builder(stream, config)
        .overlap_previous(true)
        .arg(ParamsArg(p))
        .arg(q.data)
        .arg(k.data)
        .arg(v.data)
        .arg(mask)
        .arg(&mut *out.data);
    // SAFETY: (AttnParams p, const T* q, k, v, mask, T* o, float* part): reads and writes stay
    // within the operand extents checked by `attention`; with one split the output is written
    // and `part` is unused (null), otherwise `part` holds splits x rows x (head_dim + 2) floats:
    // the partial sums of every (split, row) and their (max, sum) pairs. NVIDIA's matrix decode
    // (same arguments) has 128 threads and the dynamic shared memory `AT_DN_SHARED` allowed
    // above.
    match part.as_mut() {
        // SAFETY: as above, `buf` being the partial-sum buffer of the splits.
        Some(buf) => unsafe { builder.arg(&mut *buf).launch()? },
        // SAFETY: as above; one split writes the output and never touches `part` (null).
        None => unsafe { builder.arg(NullPtr).launch()? },
    }
    if let Some(buf) = part {
        let merge = function(stream, MODULE, &format!("attn_merge_{}_d{d}", T::NAME))?;
        let config = LaunchConfig {
            grid: [grid_dim(op, "rows", rows, i32::MAX as usize)?, 1, 1],
            block: [THREADS, 1, 1],
            shared_mem_bytes: 0,
        };
        // The merge waits for the decode kernel before touching memory (rk_overlapped_entry).
        let builder = merge
            .builder(stream, config)
            .overlap_previous(true)
            .arg(ParamsArg(p))
            .arg(splits as i64)
            .arg(&buf);
        // SAFETY: (AttnParams p, i64 splits, const float* part, T* o): one block of THREADS per
        // output row (rows = batch x heads_q x seq_q), any number of splits (it loops over
        // them); it reads the splits' partials written above and writes within the output's
        // checked extent.
        unsafe { builder.arg(&mut *out.data).launch()? };
    }
    Ok(())
}

/// Fused attention over a variable-length batch: `q`/`out` are (total_q, heads_q, head_dim) and
/// `k`/`v` (total_k, heads_kv, head_dim) through their (sequence, head) strides (the batch
/// stride is ignored); sequence `b` spans rows `cu_q[b] .. cu_q[b + 1]` and `cu_k[b] ..
/// cu_k[b + 1]`. `shape.batch` is the number of sequences (`cu_q.len() - 1`). Offsets that
/// decrease or pass the totals are recorded in `flag` (that sequence is skipped).
#[allow(clippy::too_many_arguments)]
pub fn attention_varlen<T: KernelDType>(
    stream: &Stream,
    shape: &AttnShape,
    opts: &AttnOptions,
    q: AttnInput<'_, T>,
    k: AttnInput<'_, T>,
    v: AttnInput<'_, T>,
    offsets: Varlen<'_>,
    out: AttnOutput<'_, '_, T>,
    flag: &IndexErrorFlag,
) -> Result<()> {
    let op = "flash_attn_varlen";
    check_float::<T>(op, FLOAT_REASON)?;
    // A sequence's rows lie within the totals (offsets past them are flagged, not read).
    let reach = (shape.seq_q.max(offsets.total_q)).saturating_add(shape.seq_k.max(offsets.total_k));
    let mut p = params(op, shape, opts, reach)?;
    let es = std::mem::size_of::<T>();
    let d = shape.head_dim;
    if offsets.cu_q.len() != shape.batch + 1 || offsets.cu_k.len() != shape.batch + 1 {
        return Err(layout_err(
            op,
            format!(
                "{} sequences need {} offsets each, got {} (q) and {} (k)",
                shape.batch,
                shape.batch + 1,
                offsets.cu_q.len(),
                offsets.cu_k.len()
            ),
        ));
    }
    let (tq, tk) = (offsets.total_q, offsets.total_k);
    [p.q, p.k, p.v, p.o] = check_operands(op, shape, (tq, tk), true, &q, &k, &v, &out)?;
    p.total_q = to_i64(op, "total_q", tq)?;
    p.total_k = to_i64(op, "total_k", tk)?;
    if tq == 0 || shape.batch == 0 || shape.heads_q == 0 {
        return Ok(());
    }
    // Rows of sequences with bad offsets are not written: start from zeros.
    out.data.memset_async(0)?;
    // The grid's query tiles follow `seq_q` (the longest sequence): it counts as rows too.
    let rows = tq.max(tk).max(shape.seq_q).max(shape.seq_k);
    let kind = prefill_kind::<T>(stream, op, opts.kernel, d, rows)?;
    let launch = PrefillLaunch {
        op,
        kind,
        elem_bytes: es,
        d,
        seq_q: shape.seq_q,
        heads_q: shape.heads_q,
        nvidia: stream.device().platform() == hip_core::Platform::Nvidia,
        batch: shape.batch,
    };
    let flag_arg = flag.arg(op, stream)?;
    let f = launch.function::<T>(stream)?;
    let builder = f
        .builder(stream, launch.config(stream)?)
        .arg(ParamsArg(p))
        .arg(q.data)
        .arg(k.data)
        .arg(v.data)
        .arg(OptArg::<T>(None))
        .arg(offsets.cu_q)
        .arg(offsets.cu_k)
        .arg(&mut *out.data);
    // SAFETY: (AttnParams p, const T* q, k, v, mask (null), const u32* cu_q, cu_k, T* o,
    // u32* err): the kernel reads cu_q/cu_k[0 ..= batch] (lengths checked), and only uses
    // sequences whose offsets are non-decreasing and within total_q / total_k, whose rows lie in
    // the packed extents checked above (a stride over sequences longer than the grid's tiles is
    // covered by the kernel's own loop); bad offsets go to the 8-word error record.
    unsafe { builder.arg(flag_arg).launch()? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_wider_than_the_sequences_are_clamped() {
        let shape = AttnShape {
            batch: 1,
            seq_q: 7,
            seq_k: 100,
            heads_q: 4,
            heads_kv: 2,
            head_dim: 64,
        };
        let opts = |left, right| AttnOptions {
            window_left: left,
            window_right: right,
            ..AttnOptions::new(0.125, false)
        };
        let p = params("t", &shape, &opts(Some(usize::MAX), Some(5)), 107).unwrap();
        assert_eq!((p.window_left, p.window_right), (107, 5));
        let p = params("t", &shape, &opts(None, Some(1 << 62)), 107).unwrap();
        assert_eq!((p.window_left, p.window_right), (-1, 107));
    }

    #[test]
    fn params_match_the_kernel_struct() {
        // 27 i64 + 2 f32, no padding: the kernel's AttnParams.
        assert_eq!(std::mem::size_of::<Params>(), 27 * 8 + 8);
        let src = crate::modules::full_source(MODULE).expect("attention module");
        assert!(src.contains("float scale, softcap;"));
        assert!(src.contains("i64 splits_rows;"));
    }

    #[test]
    fn prefill_kernel_params_are_those_of_a_launch() {
        let shape = AttnShape {
            batch: 1,
            seq_q: 100,
            seq_k: 120,
            heads_q: 4,
            heads_kv: 2,
            head_dim: 64,
        };
        let opts = AttnOptions::new(0.125, true);
        let strides = [[0, 256, 64], [0, 128, 64], [0, 128, 64], [0, 256, 64]];
        let ParamsArg(p) = prefill_kernel_params(&shape, &opts, strides)
            .map(|a| {
                // The opaque argument is this module's ParamsArg.
                let any: &dyn std::any::Any = &a;
                *any.downcast_ref::<ParamsArg>().unwrap()
            })
            .unwrap();
        assert_eq!((p.q, p.k, p.o), ([0, 256, 64], [0, 128, 64], [0, 256, 64]));
        assert_eq!((p.sq, p.sk, p.total_q, p.total_k), (100, 120, 100, 120));
        assert_eq!((p.window_left, p.window_right, p.scale), (-1, 0, 0.125));
        let bad = AttnShape {
            head_dim: 48,
            ..shape
        };
        assert!(prefill_kernel_params(&bad, &opts, strides).is_err());
    }

    #[test]
    fn every_kernel_is_in_the_source() {
        let src = crate::modules::full_source(MODULE).expect("attention module");
        for t in ["bf16", "f16", "f32"] {
            for d in HEAD_DIMS {
                let es = if t == "f32" { 4 } else { 2 };
                let (bm, bn) = prefill_tile(es, d);
                assert!(
                    src.contains(&format!("AT_PREFILL({t}, {t}, {d}, {bm}, {bn})")),
                    "{t} d{d}: the tile differs from the kernel's"
                );
                assert!(
                    src.contains(&format!("AT_DECODE({t}, {t}, {d})")),
                    "{t} d{d}"
                );
                if t != "f32" && MMA_HEAD_DIMS.contains(&d) {
                    assert!(
                        src.contains(&format!("AT_PREFILL_MMA({t}, {t}, {d}, AT_MMA_BN)")),
                        "{t} d{d}: no matrix-instruction kernel"
                    );
                    assert!(
                        src.contains(&format!("AT_PREFILL_TILES({t}, {t}, {d}, AT_MMA_BN)")),
                        "{t} d{d}: no tile kernel for NVIDIA"
                    );
                }
            }
        }
        assert!(src.contains(&format!(
            "#define AT_ERR_VARLEN {}u",
            crate::indexing::IndexOp::AttentionSeqlens.code()
        )));
        for w in DECODE_QUERIES {
            assert!(src.contains(&format!("AT_DECODE_NQ(TN, T, D, {w})")));
        }
        assert!(src.contains(&format!("#define AT_MAX_SPLITS {DECODE_MAX_SPLITS}\n")));
        assert!(src.contains(&format!("#define AT_THREADS {THREADS}\n")));
        assert!(src.contains(&format!("#define AT_MMA_WAVES {MMA_WAVES}")));
        assert!(src.contains("#define AT_MMA_BM (16 * AT_MMA_WAVES)\n"));
        assert_eq!(MMA_BLOCK_ROWS, 16 * MMA_WAVES as usize);
        // NVIDIA's prefill: its defaults and shared memory formula.
        assert!(src.contains(&format!("#define AT_NV_WAVES {NV_WAVES}\n")));
        assert!(src.contains(&format!("#define AT_NV_RT {NV_ROW_TILES}\n")));
        assert!(src.contains(&format!("#define AT_NV_BN {NV_KEYS}\n")));
        assert!(src.contains(
            "((2 * (BN) + ((RT) > 1 ? 16 * (RT) * (WAVES) : 0)) * ((D) + 8) * (int)sizeof(T))"
        ));
        assert_eq!(nv_prefill_shared_bytes(2, 128), (2 * 64 + 128) * 136 * 2);
        // NVIDIA's decode: its defaults, kernels and shared memory formula.
        assert!(src.contains(&format!("#define AT_DN_WAVES {NV_DECODE_WAVES}\n")));
        assert!(src.contains(&format!("#define AT_DN_KEYS {NV_DECODE_KEYS}\n")));
        assert!(src.contains(&format!("#define AT_DN_STAGES {NV_DECODE_STAGES}\n")));
        assert!(src.contains(&format!("#define AT_DN_ROWS {NV_DECODE_ROWS}\n")));
        assert!(src.contains(
            "(AT_DN_WAVES * AT_DN_STAGES * 2 * AT_DN_KEYS * ((D) + 8) * (int)sizeof(T))"
        ));
        assert_eq!(nv_decode_shared_bytes(2, 128), 4 * 2 * 2 * 16 * 136 * 2);
        for d in MMA_HEAD_DIMS {
            assert!(src.contains(&format!("AT_DECODE_NV(bf16, bf16, {d})\n")));
            assert!(src.contains(&format!("AT_DECODE_NV(f16, f16, {d})\n")));
        }
    }

    #[test]
    fn nv_decode_grid_fills_two_blocks_per_multiprocessor() {
        // 8 kv heads of 4 queries: one 16-slot block each, 4k keys in 33 splits (264 blocks, 2
        // per multiprocessor), at least 64 keys a split.
        assert_eq!(
            nv_decode_grid(8, 4, 4096, 132),
            DecodeGrid {
                nq: 16,
                slices: 1,
                splits: 33
            }
        );
        // Rounded down: 3 kv heads would want 88 splits (264 blocks), not 89 (267).
        assert_eq!(nv_decode_grid(3, 4, 65536, 132).splits, 88);
        assert_eq!(nv_decode_grid(8, 4, 300, 132).splits, 5);
        // 32 queries per kv head: two slices.
        assert_eq!(nv_decode_grid(8, 32, 65536, 132).slices, 2);
        // At most 256 splits; at least one.
        assert_eq!(nv_decode_grid(1, 1, 1 << 20, 132).splits, 256);
        assert_eq!(nv_decode_grid(64, 4, 10, 132).splits, 1);
    }

    #[test]
    fn decode_grid_fills_the_gpu_or_spreads_the_queries() {
        // Long caches: the widest kernel, keys split to about 2 blocks per multiprocessor.
        assert_eq!(
            decode_grid(8, 4, 4096, 132),
            DecodeGrid {
                nq: 4,
                slices: 1,
                splits: 32
            }
        );
        assert_eq!(decode_grid(8, 4, 65536, 132).splits, 33);
        // A short cache cannot be split: one query per block, 4x the blocks.
        assert_eq!(
            decode_grid(8, 4, 80, 132),
            DecodeGrid {
                nq: 1,
                slices: 4,
                splits: 1
            }
        );
        // Enough blocks already: unchanged.
        assert_eq!(decode_grid(256, 4, 80, 132).nq, 4);
        // Eight queries per kv head, 300 keys: 8 x 3 splits with 8-wide blocks are too few,
        // 4-wide blocks give 2 slices x 8 x 3 = 48, still too few, so one query per block.
        assert_eq!(decode_grid(8, 8, 300, 132).nq, 1);
        assert_eq!(decode_grid(64, 8, 300, 132).nq, 8);
    }

    #[test]
    fn decode_width_is_the_narrowest_that_fits() {
        assert_eq!(decode_queries(1), 1);
        assert_eq!(decode_queries(2), 4);
        assert_eq!(decode_queries(4), 4);
        assert_eq!(decode_queries(5), 8);
        assert_eq!(decode_queries(64), 8);
    }

    #[test]
    fn bad_problems_are_errors() {
        let shape = AttnShape {
            batch: 1,
            seq_q: 4,
            seq_k: 4,
            heads_q: 6,
            heads_kv: 4,
            head_dim: 64,
        };
        let opts = AttnOptions::new(0.125, true);
        assert!(params("t", &shape, &opts, 0).is_err(), "6 heads over 4");
        let shape = AttnShape {
            heads_q: 8,
            head_dim: 72,
            ..shape
        };
        assert!(params("t", &shape, &opts, 0).is_err(), "head dim 72");
        let shape = AttnShape {
            head_dim: 128,
            ..shape
        };
        assert!(params("t", &shape, &opts, 0).is_ok());
        let bad = AttnOptions {
            softcap: Some(-1.0),
            ..opts
        };
        assert!(params("t", &shape, &bad, 0).is_err());
        let bad = AttnOptions {
            scale: f32::NAN,
            ..opts
        };
        assert!(params("t", &shape, &bad, 0).is_err());
    }

    #[test]
    fn operand_extents_are_checked() {
        let ext = |ptr: u64, len: usize, strides: [usize; 3], rows: usize| Extent {
            what: "q",
            ptr: hip_core::DevicePtr(ptr),
            len,
            strides,
            rows,
            heads: 2,
        };
        // (1, 4, 2) x 64 contiguous: 512 elements.
        assert!(ext(0x1000, 512, [512, 128, 64], 4)
            .check("t", 1, 2, 64)
            .is_ok());
        assert!(ext(0x1000, 511, [512, 128, 64], 4)
            .check("t", 1, 2, 64)
            .is_err());
        // Misaligned stride (not a multiple of 8 bf16 elements).
        assert!(ext(0x1000, 4096, [512, 130, 64], 4)
            .check("t", 1, 2, 64)
            .is_err());
        // Misaligned base.
        assert!(ext(0x1008, 512, [512, 128, 64], 4)
            .check("t", 1, 2, 64)
            .is_err());
        // Empty is fine.
        assert!(ext(0x1000, 0, [512, 128, 64], 0)
            .check("t", 1, 2, 64)
            .is_ok());
    }
}
