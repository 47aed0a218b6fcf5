//! Typed launch wrappers for the `indexing` kernel family: `index_select`, `gather`, `scatter`
//! (set), `scatter_add` and `index_add`, for index dtypes `I` in u8, u32, i16, i32, i64 and data
//! dtypes `T` all 9 (kernels `{op}_{I}_{T}`).
//!
//! Shapes follow Candle (candle-core 0.11.1, `Tensor::{index_select, gather, scatter_set,
//! scatter_add_set, index_add}`); every wrapper checks them, and every view against its
//! strides, before launching, and reports problems as [`Error::Layout`] (or
//! [`Error::Unsupported`] for a float index dtype); an empty iteration shape launches nothing.
//! Operands are [`Strided`] views (the slice starts at the layout's start offset, strides in
//! elements, 0 broadcasts): every read operand may be strided, and so may the destination of the
//! in-place ops. Outputs of `index_select`/`gather` are contiguous.
//!
//! ## Index values
//! As on Candle's CPU and CUDA backends, the largest value of the index type (`u8::MAX`,
//! `u32::MAX`, `i16::MAX`, `i32::MAX`, `i64::MAX`) means "no index": `index_select`/`gather`
//! write 0 there, `scatter`/`scatter_add`/`index_add` leave the destination alone. Any other
//! index outside `0..size` (negative ones included) is skipped the same way, so nothing is ever
//! read or written out of bounds, and is recorded in an [`IndexErrorFlag`] (the first one wins):
//! Candle's CPU backend fails the op with `InvalidIndex` instead. The device cannot fail a
//! launch, so the error surfaces when the caller checks the flag: [`IndexErrorFlag::check`]
//! (or [`IndexErrorFlag::take`]) must run before any result of an indexing op is trusted, i.e.
//! at the latest when data is read back to the host or the stream is synchronized
//! (candle-rocm does both there).
//!
//! ## Semantics beyond Candle's CPU backend
//! * i16 and i32 ids work for every op (the CPU backend refuses them for index_select, gather
//!   and scatter); non-contiguous operands work everywhere (the CPU backend requires contiguous
//!   ones except for index_select's ids).
//! * `gather` with ids smaller than the source in a dim other than `dim` reads by coordinates
//!   (`out[.., i, ..] = src[.., ids[.., i, ..], ..]`, PyTorch's definition); Candle's CPU backend
//!   reinterprets flat offsets there and agrees only when the shapes match outside `dim`.
//! * `scatter` with several ids naming the same destination element keeps the last one along
//!   `dim`, as Candle's CPU and CUDA backends do (one thread walks each fiber along `dim`).
//! * `scatter_add`/`index_add` accumulate with atomics: integer sums wrap; float sums are
//!   rounded in an unspecified order (f16/bf16 after every addition, like the CPU backend).

use hip_core::{DeviceBuffer, DeviceSliceMut, KernelArg, KernelArgs, Stream};
use parking_lot::Mutex;

use crate::dtype::KernelDType;
use crate::elementwise::{
    check_operand, function, launch_config, layout_err, numel, unsupported, InfoArg, Strided,
};
use crate::error::{Error, Result};
use crate::layout::is_contiguous;

/// The kernel module.
const MODULE: &str = "indexing";
/// Words in the device-side error record (see [`IndexErrorFlag`]).
const FLAG_WORDS: usize = 8;

/// The indexing ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexOp {
    /// [`index_select`].
    IndexSelect,
    /// [`gather`].
    Gather,
    /// [`scatter`] (set).
    Scatter,
    /// [`scatter_add`].
    ScatterAdd,
    /// [`index_add`].
    IndexAdd,
    /// [`crate::quantized::embedding`] (an embedding row id).
    QuantizedEmbedding,
    /// [`crate::quantized::moe`] (an expert id).
    IndexedMoe,
    /// [`crate::attention::attention_varlen`] (a cumulative sequence offset).
    AttentionSeqlens,
}

impl IndexOp {
    /// Every op.
    pub const ALL: [IndexOp; 8] = [
        IndexOp::IndexSelect,
        IndexOp::Gather,
        IndexOp::Scatter,
        IndexOp::ScatterAdd,
        IndexOp::IndexAdd,
        IndexOp::QuantizedEmbedding,
        IndexOp::IndexedMoe,
        IndexOp::AttentionSeqlens,
    ];

    /// The op's name, as in kernel names (`index_select_u32_f32`).
    pub fn name(&self) -> &'static str {
        match self {
            IndexOp::IndexSelect => "index_select",
            IndexOp::Gather => "gather",
            IndexOp::Scatter => "scatter",
            IndexOp::ScatterAdd => "scatter_add",
            IndexOp::IndexAdd => "index_add",
            IndexOp::QuantizedEmbedding => "qembedding",
            IndexOp::IndexedMoe => "indexed_moe_forward",
            IndexOp::AttentionSeqlens => "flash_attn_varlen",
        }
    }

    /// The code the kernels record in the error flag (`IX_ERR_*` in `indexing.hip`,
    /// `QK_ERR_*` in `quantized.hip`, `AT_ERR_*` in `attention.hip`).
    pub fn code(&self) -> u32 {
        match self {
            IndexOp::IndexSelect => 1,
            IndexOp::Gather => 2,
            IndexOp::Scatter => 3,
            IndexOp::ScatterAdd => 4,
            IndexOp::IndexAdd => 5,
            IndexOp::QuantizedEmbedding => 6,
            IndexOp::IndexedMoe => 7,
            IndexOp::AttentionSeqlens => 8,
        }
    }

    /// The op recorded with `code`.
    pub fn from_code(code: u32) -> Option<IndexOp> {
        IndexOp::ALL.into_iter().find(|op| op.code() == code)
    }
}

/// An out-of-range index found by a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexError {
    /// The op that met it.
    pub op: IndexOp,
    /// The index (negative ones as they were; unsigned ones zero-extended).
    pub index: i64,
    /// The size of the indexed dim.
    pub size: u64,
}

impl IndexError {
    /// Decodes the device record (`err[0]` op code, `err[1..3)` index, `err[3..5)` size);
    /// `None` when no error was recorded.
    pub fn decode(words: &[u32]) -> Option<IndexError> {
        let w = |i: usize| words.get(i).copied().unwrap_or(0) as u64;
        if w(0) == 0 {
            return None;
        }
        let op = IndexOp::from_code(w(0) as u32)?;
        Some(IndexError {
            op,
            index: (w(1) | (w(2) << 32)) as i64,
            size: w(3) | (w(4) << 32),
        })
    }

    /// As a typed [`Error::Layout`] naming the op.
    pub fn to_error(&self) -> Error {
        if self.op == IndexOp::AttentionSeqlens {
            return Error::Layout {
                op: self.op.name().to_string(),
                reason: format!(
                    "the cumulative sequence offset {} decreases or passes the {} packed rows \
                     (found on the device; that sequence was skipped)",
                    self.index, self.size
                ),
            };
        }
        Error::Layout {
            op: self.op.name().to_string(),
            reason: format!(
                "index {} is out of range for a dimension of size {} (found on the device; \
                 the element was skipped)",
                self.index, self.size
            ),
        }
    }
}

/// A device-side error record for out-of-range indices: a small `u32` buffer that the indexing
/// kernels set (atomically, first error wins) instead of reading or writing out of bounds.
///
/// One flag per stream: it is bound to the stream it was created on, and the wrappers refuse
/// launches on another stream (the flag's reads are ordered on its own stream only). Errors
/// accumulate across launches until [`check`](Self::check) or [`take`](Self::take) reads the
/// record (waiting for the stream) and clears it; call one of them before trusting the results
/// of indexing ops, i.e. no later than the next host read or synchronization.
pub struct IndexErrorFlag {
    buf: Mutex<DeviceBuffer<u32>>,
    stream_id: u64,
}

impl std::fmt::Debug for IndexErrorFlag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexErrorFlag")
            .field("stream_id", &self.stream_id)
            .finish()
    }
}

impl IndexErrorFlag {
    /// A cleared flag on `stream`.
    pub fn new(stream: &Stream) -> Result<Self> {
        Ok(IndexErrorFlag {
            buf: Mutex::new(stream.alloc_zeroed::<u32>(FLAG_WORDS)?),
            stream_id: stream.id(),
        })
    }

    /// The id of the stream the flag is bound to.
    pub fn stream_id(&self) -> u64 {
        self.stream_id
    }

    /// Waits for the flag's stream, returns the first recorded error (if any) and clears the
    /// record (stream-ordered, before any later launch).
    pub fn take(&self) -> Result<Option<IndexError>> {
        let mut buf = self.buf.lock();
        let words = buf.to_host_vec()?;
        if words[0] == 0 {
            return Ok(None);
        }
        buf.as_mut_slice().memset_async(0)?;
        match IndexError::decode(&words) {
            Some(e) => Ok(Some(e)),
            None => Err(Error::Layout {
                op: "indexing".into(),
                reason: format!("the error flag holds an unknown record {words:?}"),
            }),
        }
    }

    /// [`take`](Self::take), with a recorded error as an [`Error::Layout`] naming the op.
    pub fn check(&self) -> Result<()> {
        match self.take()? {
            Some(e) => Err(e.to_error()),
            None => Ok(()),
        }
    }

    pub(crate) fn arg(&self, op: &str, stream: &Stream) -> Result<FlagArg<'_>> {
        if stream.id() != self.stream_id {
            return Err(layout_err(
                op,
                format!(
                    "the error flag belongs to stream {}, not to the launch's stream {}",
                    self.stream_id,
                    stream.id()
                ),
            ));
        }
        Ok(FlagArg(self.buf.lock()))
    }
}

/// The flag's buffer as a kernel argument, locked for the launch.
pub(crate) struct FlagArg<'a>(parking_lot::MutexGuard<'a, DeviceBuffer<u32>>);

impl KernelArg for FlagArg<'_> {
    fn push_arg(&self, args: &mut KernelArgs, stream: &Stream) -> hip_core::Result<()> {
        KernelArg::push_arg(&&*self.0, args, stream)
    }
}

// ------------------------------------------------------------------------------------------
// Validation and launch plumbing (shared with the `sort` wrappers)
// ------------------------------------------------------------------------------------------

// The helpers themselves live in `elementwise` (one copy for every family).

fn check_ids_dtype<I: KernelDType>(op: &str) -> Result<()> {
    if I::IS_FLOAT {
        return Err(unsupported(
            op,
            &format!("{} ids", I::NAME),
            "ids are integer tensors (u8, u32, i16, i32, i64)",
        ));
    }
    Ok(())
}

fn check_dim(op: &str, dim: usize, dims: &[usize]) -> Result<()> {
    if dim >= dims.len() {
        return Err(layout_err(
            op,
            format!("dim {dim} is out of range for the shape {dims:?}"),
        ));
    }
    Ok(())
}

/// Checks that `b` has the dims of `a` except along `dim` (same rank).
fn check_same_but_dim(op: &str, what: &str, a: &[usize], b: &[usize], dim: usize) -> Result<()> {
    let ok = a.len() == b.len()
        && a.iter()
            .zip(b)
            .enumerate()
            .all(|(i, (x, y))| i == dim || x == y);
    if !ok {
        return Err(layout_err(
            op,
            format!("{what}: the shapes {a:?} and {b:?} must agree except along dim {dim}"),
        ));
    }
    Ok(())
}

fn check_dst_len(op: &str, numel: usize, dst_len: usize) -> Result<()> {
    if dst_len != numel {
        return Err(layout_err(
            op,
            format!("the destination holds {dst_len} elements but the shape has {numel}"),
        ));
    }
    Ok(())
}

/// `strides` with the entry of `dim` set to 0 (the index supplies that part of the offset).
fn without_dim(strides: &[usize], dim: usize) -> Vec<usize> {
    let mut s = strides.to_vec();
    s[dim] = 0;
    s
}

/// The strided layout info (`dims ++ strides...`) on the device, or `None` for the contiguous
/// fast path.
fn device_info(
    stream: &Stream,
    fast: bool,
    dims: &[usize],
    strides: &[&[usize]],
) -> Result<Option<DeviceBuffer<u64>>> {
    if fast {
        return Ok(None);
    }
    let mut info = Vec::with_capacity(dims.len() * (1 + strides.len()));
    info.extend(dims.iter().map(|&d| d as u64));
    for s in strides {
        info.extend(s.iter().map(|&x| x as u64));
    }
    Ok(Some(stream.alloc_from_host_async(&info)?))
}

/// The geometry of one launch: the iteration shape's size along `dim` and the product of its
/// dims after `dim`.
struct Geometry {
    dim_size: usize,
    right: usize,
}

fn geometry(dims: &[usize], dim: usize) -> Geometry {
    Geometry {
        dim_size: dims[dim],
        right: dims[dim + 1..].iter().product(),
    }
}

// ------------------------------------------------------------------------------------------
// Public wrappers
// ------------------------------------------------------------------------------------------

/// `dst = src.index_select(ids, dim)`: `dst[.., i, ..] = src[.., ids[i], ..]`.
///
/// * `src`: strided, dims `src_dims`;
/// * `ids`: strided, 1-D (`ids_dims == [n_ids]`), integer;
/// * `dst`: contiguous, `src_dims` with `n_ids` at `dim`.
///
/// The skip value (and, flagged in `flag`, an out-of-range index) gives zeros.
#[allow(clippy::too_many_arguments)]
pub fn index_select<I: KernelDType, T: KernelDType>(
    stream: &Stream,
    src: Strided<'_, T>,
    src_dims: &[usize],
    ids: Strided<'_, I>,
    ids_dims: &[usize],
    dim: usize,
    dst: &mut DeviceSliceMut<'_, T>,
    flag: &IndexErrorFlag,
) -> Result<()> {
    const OP: &str = "index_select";
    check_ids_dtype::<I>(OP)?;
    check_dim(OP, dim, src_dims)?;
    let &[n_ids] = ids_dims else {
        return Err(layout_err(
            OP,
            format!("the ids must be 1-D, got the shape {ids_dims:?}"),
        ));
    };
    numel(OP, src_dims)?;
    check_operand(OP, "the source", src_dims, src.strides, src.data.len())?;
    check_operand(OP, "the ids", ids_dims, ids.strides, ids.data.len())?;
    let mut out_dims = src_dims.to_vec();
    out_dims[dim] = n_ids;
    let n = numel(OP, &out_dims)?;
    check_dst_len(OP, n, dst.len())?;
    if n == 0 {
        return Ok(());
    }
    let g = geometry(&out_dims, dim);
    let fast = is_contiguous(src_dims, src.strides);
    let src_rest = without_dim(src.strides, dim);
    let info = device_info(stream, fast, &out_dims, &[&src_rest])?;
    let flag_arg = flag.arg(OP, stream)?;
    let f = function(stream, MODULE, &format!("{OP}_{}_{}", I::NAME, T::NAME))?;
    // SAFETY: the kernel takes (u64 numel, u64 num_dims, const u64* info, const T* src,
    // const I* ids, T* out, u64 n_ids, u64 right, u64 src_dim, u64 src_dim_stride,
    // u64 ids_stride, u32* err). It reads info[0..num_dims * 2) when non-null (that buffer, alive
    // until the launch is queued, then freed in stream order); ids at j * ids_stride, j < n_ids
    // (inside the view, checked); src only for indices in 0..src_dim, at offsets inside the
    // view (the largest is the checked extent of src over src_dims); writes out[0..n),
    // n == dst.len(), and err[0..5) (FLAG_WORDS elements, locked for the launch).
    unsafe {
        f.builder(stream, launch_config(stream, n))
            .arg(n as u64)
            .arg(out_dims.len() as u64)
            .arg(InfoArg(info.as_ref()))
            .arg(src.data)
            .arg(ids.data)
            .arg(&mut *dst)
            .arg(g.dim_size as u64)
            .arg(g.right as u64)
            .arg(src_dims[dim] as u64)
            .arg(src.strides[dim] as u64)
            .arg(ids.strides[0] as u64)
            .arg(flag_arg)
            .launch()?;
    }
    drop(info);
    Ok(())
}

/// `dst = src.gather(ids, dim)`: `dst[.., i, ..] = src[.., ids[.., i, ..], ..]` (coordinates
/// outside `dim` are the same in `dst`, `ids` and `src`).
///
/// * `src`: strided, dims `src_dims`;
/// * `ids`: strided, dims `ids_dims`, same rank, `ids_dims[d] <= src_dims[d]` for `d != dim`;
/// * `dst`: contiguous, `ids_dims`.
///
/// The skip value (and, flagged in `flag`, an out-of-range index) gives zeros.
#[allow(clippy::too_many_arguments)]
pub fn gather<I: KernelDType, T: KernelDType>(
    stream: &Stream,
    src: Strided<'_, T>,
    src_dims: &[usize],
    ids: Strided<'_, I>,
    ids_dims: &[usize],
    dim: usize,
    dst: &mut DeviceSliceMut<'_, T>,
    flag: &IndexErrorFlag,
) -> Result<()> {
    const OP: &str = "gather";
    check_ids_dtype::<I>(OP)?;
    check_dim(OP, dim, src_dims)?;
    let fits = ids_dims.len() == src_dims.len()
        && ids_dims
            .iter()
            .zip(src_dims)
            .enumerate()
            .all(|(i, (a, b))| i == dim || a <= b);
    if !fits {
        return Err(layout_err(
            OP,
            format!(
                "the ids' shape {ids_dims:?} must have the source's rank and fit in its \
                 shape {src_dims:?} outside dim {dim}"
            ),
        ));
    }
    numel(OP, src_dims)?;
    check_operand(OP, "the source", src_dims, src.strides, src.data.len())?;
    check_operand(OP, "the ids", ids_dims, ids.strides, ids.data.len())?;
    let n = numel(OP, ids_dims)?;
    check_dst_len(OP, n, dst.len())?;
    if n == 0 {
        return Ok(());
    }
    let g = geometry(ids_dims, dim);
    let same_shape = ids_dims
        .iter()
        .zip(src_dims)
        .enumerate()
        .all(|(i, (a, b))| i == dim || a == b);
    let fast =
        same_shape && is_contiguous(src_dims, src.strides) && is_contiguous(ids_dims, ids.strides);
    let src_rest = without_dim(src.strides, dim);
    let info = device_info(stream, fast, ids_dims, &[ids.strides, &src_rest])?;
    let flag_arg = flag.arg(OP, stream)?;
    let f = function(stream, MODULE, &format!("{OP}_{}_{}", I::NAME, T::NAME))?;
    // SAFETY: the kernel takes (u64 numel, u64 num_dims, const u64* info, const T* src,
    // const I* ids, T* out, u64 ids_dim, u64 right, u64 src_dim, u64 src_dim_stride, u32* err).
    // It reads info[0..num_dims * 3) when non-null (that buffer, alive until queued); ids at
    // offsets inside its checked extent; src only for indices in 0..src_dim at coordinates
    // within src_dims (ids_dims <= src_dims outside dim, checked), hence inside its checked
    // extent; writes out[0..n), n == dst.len(), and err[0..5).
    unsafe {
        f.builder(stream, launch_config(stream, n))
            .arg(n as u64)
            .arg(ids_dims.len() as u64)
            .arg(InfoArg(info.as_ref()))
            .arg(src.data)
            .arg(ids.data)
            .arg(&mut *dst)
            .arg(g.dim_size as u64)
            .arg(g.right as u64)
            .arg(src_dims[dim] as u64)
            .arg(src.strides[dim] as u64)
            .arg(flag_arg)
            .launch()?;
    }
    drop(info);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn scatter_like<I: KernelDType, T: KernelDType>(
    stream: &Stream,
    op: IndexOp,
    dst: &mut DeviceSliceMut<'_, T>,
    dst_dims: &[usize],
    dst_strides: &[usize],
    ids: Strided<'_, I>,
    ids_dims: &[usize],
    src: Strided<'_, T>,
    src_dims: &[usize],
    dim: usize,
    flag: &IndexErrorFlag,
) -> Result<()> {
    let name = op.name();
    check_ids_dtype::<I>(name)?;
    check_dim(name, dim, dst_dims)?;
    if ids_dims != src_dims {
        return Err(layout_err(
            name,
            format!("the ids' shape {ids_dims:?} must equal the source's {src_dims:?}"),
        ));
    }
    check_same_but_dim(name, "destination and source", dst_dims, src_dims, dim)?;
    numel(name, dst_dims)?;
    check_operand(name, "the destination", dst_dims, dst_strides, dst.len())?;
    check_operand(name, "the ids", ids_dims, ids.strides, ids.data.len())?;
    check_operand(name, "the source", src_dims, src.strides, src.data.len())?;
    let n = numel(name, src_dims)?;
    if n == 0 {
        return Ok(());
    }
    let g = geometry(src_dims, dim);
    let fast = is_contiguous(ids_dims, ids.strides)
        && is_contiguous(src_dims, src.strides)
        && is_contiguous(dst_dims, dst_strides);
    let dst_rest = without_dim(dst_strides, dim);
    let info = device_info(
        stream,
        fast,
        src_dims,
        &[ids.strides, src.strides, &dst_rest],
    )?;
    let flag_arg = flag.arg(name, stream)?;
    let f = function(stream, MODULE, &format!("{name}_{}_{}", I::NAME, T::NAME))?;
    // scatter (set) runs one thread per fiber along `dim` (in order: the last write wins), the
    // others one per element.
    let threads = match op {
        IndexOp::Scatter => n / g.dim_size,
        _ => n,
    };
    // SAFETY: the kernel takes (u64 numel, u64 num_dims, const u64* info, const I* ids,
    // const T* src, T* dst, u64 ids_dim, u64 right, u64 dst_dim, u64 dst_dim_stride, u32* err).
    // It reads info[0..num_dims * 4) when non-null (that buffer, alive until queued); ids and
    // src at offsets inside their checked extents (same dims); writes dst only for indices in
    // 0..dst_dim at coordinates within dst_dims (equal to src_dims outside dim, checked), i.e.
    // inside dst's checked extent, and err[0..5).
    unsafe {
        f.builder(stream, launch_config(stream, threads))
            .arg(n as u64)
            .arg(src_dims.len() as u64)
            .arg(InfoArg(info.as_ref()))
            .arg(ids.data)
            .arg(src.data)
            .arg(&mut *dst)
            .arg(g.dim_size as u64)
            .arg(g.right as u64)
            .arg(dst_dims[dim] as u64)
            .arg(dst_strides[dim] as u64)
            .arg(flag_arg)
            .launch()?;
    }
    drop(info);
    Ok(())
}

/// In place, `dst.scatter_set(ids, src, dim)`: `dst[.., ids[.., i, ..], ..] = src[.., i, ..]`.
///
/// * `dst`: strided (`dst_dims`, `dst_strides`; written in place);
/// * `ids`, `src`: strided, the same dims `ids_dims == src_dims`, equal to `dst_dims` outside
///   `dim`.
///
/// The skip value (and, flagged in `flag`, an out-of-range index) leaves `dst` alone; with
/// repeated indices the last one along `dim` wins (Candle's order).
#[allow(clippy::too_many_arguments)]
pub fn scatter<I: KernelDType, T: KernelDType>(
    stream: &Stream,
    dst: &mut DeviceSliceMut<'_, T>,
    dst_dims: &[usize],
    dst_strides: &[usize],
    ids: Strided<'_, I>,
    ids_dims: &[usize],
    src: Strided<'_, T>,
    src_dims: &[usize],
    dim: usize,
    flag: &IndexErrorFlag,
) -> Result<()> {
    scatter_like(
        stream,
        IndexOp::Scatter,
        dst,
        dst_dims,
        dst_strides,
        ids,
        ids_dims,
        src,
        src_dims,
        dim,
        flag,
    )
}

/// In place, `dst.scatter_add_set(ids, src, dim)`: `dst[.., ids[.., i, ..], ..] += src[.., i,
/// ..]`, shapes as [`scatter`]; accumulation is atomic (integers wrap; float rounding order
/// unspecified).
#[allow(clippy::too_many_arguments)]
pub fn scatter_add<I: KernelDType, T: KernelDType>(
    stream: &Stream,
    dst: &mut DeviceSliceMut<'_, T>,
    dst_dims: &[usize],
    dst_strides: &[usize],
    ids: Strided<'_, I>,
    ids_dims: &[usize],
    src: Strided<'_, T>,
    src_dims: &[usize],
    dim: usize,
    flag: &IndexErrorFlag,
) -> Result<()> {
    scatter_like(
        stream,
        IndexOp::ScatterAdd,
        dst,
        dst_dims,
        dst_strides,
        ids,
        ids_dims,
        src,
        src_dims,
        dim,
        flag,
    )
}

/// In place, the accumulation of `index_add`: `dst[.., ids[i], ..] += src[.., i, ..]`
/// (Candle's `index_add` returns `self` plus this: copy `self` into `dst` first).
///
/// * `dst`: strided (`dst_dims`, `dst_strides`; accumulated in place);
/// * `ids`: strided, 1-D, `ids_dims == [src_dims[dim]]`;
/// * `src`: strided, `src_dims`, equal to `dst_dims` outside `dim`.
///
/// Accumulation is atomic (integers wrap; float rounding order unspecified); the skip value
/// (and, flagged in `flag`, an out-of-range index) adds nothing.
#[allow(clippy::too_many_arguments)]
pub fn index_add<I: KernelDType, T: KernelDType>(
    stream: &Stream,
    dst: &mut DeviceSliceMut<'_, T>,
    dst_dims: &[usize],
    dst_strides: &[usize],
    ids: Strided<'_, I>,
    ids_dims: &[usize],
    src: Strided<'_, T>,
    src_dims: &[usize],
    dim: usize,
    flag: &IndexErrorFlag,
) -> Result<()> {
    const OP: &str = "index_add";
    check_ids_dtype::<I>(OP)?;
    check_dim(OP, dim, dst_dims)?;
    check_same_but_dim(OP, "destination and source", dst_dims, src_dims, dim)?;
    if ids_dims != [src_dims[dim]] {
        return Err(layout_err(
            OP,
            format!(
                "the ids must be 1-D with the source's size {} along dim {dim}, got the shape \
                 {ids_dims:?}",
                src_dims[dim]
            ),
        ));
    }
    numel(OP, dst_dims)?;
    check_operand(OP, "the destination", dst_dims, dst_strides, dst.len())?;
    check_operand(OP, "the ids", ids_dims, ids.strides, ids.data.len())?;
    check_operand(OP, "the source", src_dims, src.strides, src.data.len())?;
    let n = numel(OP, src_dims)?;
    if n == 0 {
        return Ok(());
    }
    let g = geometry(src_dims, dim);
    let fast = is_contiguous(src_dims, src.strides) && is_contiguous(dst_dims, dst_strides);
    let dst_rest = without_dim(dst_strides, dim);
    let info = device_info(stream, fast, src_dims, &[src.strides, &dst_rest])?;
    let flag_arg = flag.arg(OP, stream)?;
    let f = function(stream, MODULE, &format!("{OP}_{}_{}", I::NAME, T::NAME))?;
    // SAFETY: the kernel takes (u64 numel, u64 num_dims, const u64* info, const I* ids,
    // const T* src, T* dst, u64 n_ids, u64 right, u64 dst_dim, u64 dst_dim_stride,
    // u64 ids_stride, u32* err). It reads info[0..num_dims * 3) when non-null (alive until
    // queued); ids at j * ids_stride, j < n_ids, and src, inside their checked extents; writes
    // dst only for indices in 0..dst_dim at coordinates within dst_dims (equal to src_dims
    // outside dim, checked), i.e. inside dst's checked extent, and err[0..5).
    unsafe {
        f.builder(stream, launch_config(stream, n))
            .arg(n as u64)
            .arg(src_dims.len() as u64)
            .arg(InfoArg(info.as_ref()))
            .arg(ids.data)
            .arg(src.data)
            .arg(&mut *dst)
            .arg(g.dim_size as u64)
            .arg(g.right as u64)
            .arg(dst_dims[dim] as u64)
            .arg(dst_strides[dim] as u64)
            .arg(ids.strides[0] as u64)
            .arg(flag_arg)
            .launch()?;
    }
    drop(info);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDS: [&str; 5] = ["u8", "u32", "i16", "i32", "i64"];
    const DTYPES: [&str; 9] = [
        "u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64",
    ];

    #[test]
    fn every_kernel_is_in_the_source() {
        let src = crate::modules::full_source(MODULE).expect("indexing module");
        for i in IDS {
            assert!(src.contains(&format!("RK_INDEXING_ALL({i})")), "{i}");
        }
        for t in DTYPES {
            assert!(src.contains(&format!("RK_INDEXING(I, {t})")), "{t}");
        }
        let quantized = crate::modules::full_source("quantized").expect("quantized module");
        for op in IndexOp::ALL {
            // The quantized kernels record their ids in the same flag, under codes of their own.
            let quantized_code = match op {
                IndexOp::QuantizedEmbedding => Some("QK_ERR_EMBEDDING"),
                IndexOp::IndexedMoe => Some("QK_ERR_MOE"),
                _ => None,
            };
            if op == IndexOp::AttentionSeqlens {
                // Checked by the attention module's own test (AT_ERR_VARLEN).
                continue;
            }
            if let Some(name) = quantized_code {
                assert!(
                    quantized.contains(&format!("#define {name} {}u", op.code())),
                    "{op:?}: the code differs from the quantized kernels'"
                );
                continue;
            }
            assert!(
                src.contains(&format!("RK_KERNEL void {}_##I##_##T(", op.name())),
                "{op:?}"
            );
            assert!(
                src.contains(&format!(
                    "#define IX_ERR_{} {}u",
                    op.name().to_uppercase(),
                    op.code()
                )),
                "{op:?}: the code differs from the kernels'"
            );
        }
    }

    #[test]
    fn error_records_decode() {
        assert_eq!(IndexError::decode(&[0; 8]), None);
        let e = IndexError::decode(&[2, 0xffff_fffe, 0xffff_ffff, 7, 0, 0, 0, 0]).unwrap();
        assert_eq!(
            e,
            IndexError {
                op: IndexOp::Gather,
                index: -2,
                size: 7
            }
        );
        let e = IndexError::decode(&[5, 300, 0, 0, 1, 0, 0, 0]).unwrap();
        assert_eq!((e.op, e.index, e.size), (IndexOp::IndexAdd, 300, 1 << 32));
        match e.to_error() {
            Error::Layout { op, reason } => {
                assert_eq!(op, "index_add");
                assert!(reason.contains("index 300"), "{reason}");
            }
            other => panic!("{other}"),
        }
        assert_eq!(IndexError::decode(&[9, 0, 0, 0, 0]), None);
        for op in IndexOp::ALL {
            assert_eq!(IndexOp::from_code(op.code()), Some(op));
        }
    }

    #[test]
    fn shape_checks() {
        assert!(check_same_but_dim("t", "x", &[2, 3, 4], &[2, 5, 4], 1).is_ok());
        assert!(check_same_but_dim("t", "x", &[2, 3, 4], &[2, 5, 4], 0).is_err());
        assert!(check_same_but_dim("t", "x", &[2, 3], &[2, 3, 1], 0).is_err());
        assert!(check_dim("t", 2, &[1, 2]).is_err());
        assert!(check_dim("t", 0, &[]).is_err());
        assert_eq!(without_dim(&[12, 4, 1], 1), vec![12, 0, 1]);
        let g = geometry(&[2, 3, 4, 5], 1);
        assert_eq!((g.dim_size, g.right), (3, 20));
        assert!(check_ids_dtype::<f32>("t").is_err());
        assert!(check_ids_dtype::<i16>("t").is_ok());
    }
}
