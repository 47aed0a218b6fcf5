//! Fused attention on [`RocmStorage`]: `softmax(q k^T * scale + mask) v` without materialising
//! the scores (rocm-kernels' `attention` family: tiled prefill with an online softmax, split-key
//! decode, variable-length batches). The Tensor-level API (`flash_attn`, `flash_attn_windowed`,
//! `flash_attn_varlen`, ...) and candle-nn's `sdpa` route sit on top of these (feature `tensor`).
//!
//! Operands may be strided in every dim but the head dim (views of a fused qkv projection, or
//! transposes, need no copy); a head dim that is not contiguous, or strides that are not
//! multiples of 16 bytes, are copied to a contiguous buffer first.

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout, Result, Shape};
use hip_core::{DeviceBuffer, DeviceSlice};
use rocm_kernels::attention::{
    self as kernels, AttnInput, AttnMask, AttnOptions, AttnOutput, AttnShape, Varlen,
};
use rocm_kernels::KernelDType;

use crate::device::RocmDevice;
use crate::error::{hip_err, kernel_err, RocmError};
use crate::storage::{RocmStorage, RocmStorageSlice};

pub use rocm_kernels::attention::HEAD_DIMS;

/// The memory order of 4-D attention operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnLayout {
    /// `(batch, seq, heads, head_dim)`: flash-attention's order.
    Bshd,
    /// `(batch, heads, seq, head_dim)`: candle-nn `sdpa`'s order.
    Bhsd,
}

impl AttnLayout {
    /// The (batch, seq, head) dims of a 4-D shape in this order.
    fn bsh(self, dims: &[usize]) -> [usize; 3] {
        match self {
            AttnLayout::Bshd => [dims[0], dims[1], dims[2]],
            AttnLayout::Bhsd => [dims[0], dims[2], dims[1]],
        }
    }

    /// The (batch, seq, head) strides of a 4-D stride list in this order.
    fn bsh_strides(self, s: &[usize]) -> [usize; 3] {
        match self {
            AttnLayout::Bshd => [s[0], s[1], s[2]],
            AttnLayout::Bhsd => [s[0], s[2], s[1]],
        }
    }

    /// The output shape for (batch, seq, heads, head_dim).
    fn shape(self, b: usize, s: usize, h: usize, d: usize) -> Shape {
        match self {
            AttnLayout::Bshd => Shape::from_dims(&[b, s, h, d]),
            AttnLayout::Bhsd => Shape::from_dims(&[b, h, s, d]),
        }
    }
}

/// The attention options beyond the operands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnParams {
    /// Multiplies `q k^T`.
    pub scale: f32,
    /// Tanh logit softcap (`None`: off).
    pub softcap: Option<f32>,
    /// Keys at most this far left of the (bottom-right aligned) diagonal (`None`: all).
    pub window_left: Option<usize>,
    /// Keys at most this far right of the diagonal (`None`: all; causal is `Some(0)`).
    pub window_right: Option<usize>,
}

impl AttnParams {
    fn options(&self) -> AttnOptions {
        AttnOptions {
            scale: self.scale,
            softcap: self.softcap,
            window_left: self.window_left,
            window_right: self.window_right,
        }
    }
}

/// An operand's buffer: borrowed when its layout suits the kernels, else a contiguous copy.
enum Operand<'a, T: KernelDType> {
    View(DeviceSlice<'a, T>, Vec<usize>),
    Copy(DeviceBuffer<T>, Vec<usize>),
}

impl<T: KernelDType> Operand<'_, T> {
    fn input(&self, strides3: impl Fn(&[usize]) -> [usize; 3]) -> AttnInput<'_, T> {
        match self {
            Operand::View(s, st) => AttnInput {
                data: *s,
                strides: strides3(st),
            },
            Operand::Copy(b, st) => AttnInput {
                data: b.as_slice(),
                strides: strides3(st),
            },
        }
    }
}

/// `buf` seen through `layout` with a contiguous last dim and 16-byte aligned start and strides
/// (copied to a contiguous buffer otherwise).
fn operand<'a, T: KernelDType>(
    op: &str,
    dev: &RocmDevice,
    buf: &'a DeviceBuffer<T>,
    layout: &Layout,
) -> Result<Operand<'a, T>> {
    let vec = 16 / std::mem::size_of::<T>();
    let stride = layout.stride();
    let dims = layout.dims();
    let inner_ok = dims.last().is_none_or(|&d| d <= 1) || stride.last() == Some(&1);
    let aligned = layout.start_offset() % vec == 0
        && stride[..stride.len().saturating_sub(1)]
            .iter()
            .zip(dims)
            .all(|(s, d)| *d <= 1 || s % vec == 0);
    let whole = buf.as_slice();
    if inner_ok && aligned {
        let start = layout.start_offset();
        if start > whole.len() {
            return Err(RocmError::layout(
                op,
                format!(
                    "start offset {start} is past the operand's {} elements",
                    whole.len()
                ),
            )
            .into());
        }
        let view = whole.slice(start..).map_err(hip_err(op))?;
        // Size-1 dims may carry any stride: give them the natural one so the checks pass.
        let mut st = stride.to_vec();
        let mut natural = 1usize;
        for i in (0..dims.len()).rev() {
            if dims[i] <= 1 {
                st[i] = natural;
            }
            natural *= dims[i].max(1);
        }
        if let Some(l) = st.last_mut() {
            *l = 1;
        }
        Ok(Operand::View(view, st))
    } else {
        let copy = dev.contiguous_copy(op, &whole, layout)?;
        Ok(Operand::Copy(
            copy,
            Layout::contiguous(layout.shape()).stride().to_vec(),
        ))
    }
}

fn check_same_device(op: &str, a: &RocmStorage, b: &RocmStorage) -> Result<()> {
    a.check_device(b, leak_op(op))?;
    if a.dtype() != b.dtype() {
        return Err(candle_core::Error::DTypeMismatchBinaryOp {
            lhs: a.dtype(),
            rhs: b.dtype(),
            op: leak_op(op),
        }
        .bt());
    }
    Ok(())
}

/// The op names used here, as `&'static str` (candle's errors take static names).
fn leak_op(op: &str) -> &'static str {
    match op {
        "sdpa" => "sdpa",
        "flash_attn_varlen" => "flash_attn_varlen",
        _ => "flash_attn",
    }
}

fn dims4(op: &str, what: &str, l: &Layout) -> Result<[usize; 4]> {
    match l.dims() {
        &[a, b, c, d] => Ok([a, b, c, d]),
        other => {
            Err(RocmError::layout(op, format!("{what} must be 4-D, got shape {other:?}")).into())
        }
    }
}

fn dims3(op: &str, what: &str, l: &Layout) -> Result<[usize; 3]> {
    match l.dims() {
        &[a, b, c] => Ok([a, b, c]),
        other => Err(RocmError::layout(
            op,
            format!("{what} must be 3-D (tokens, heads, head_dim), got shape {other:?}"),
        )
        .into()),
    }
}

fn not_float(op: &str, dtype: DType) -> candle_core::Error {
    RocmError::unsupported(
        op,
        dtype,
        "fused attention takes f32, f16 or bf16 (f32 arithmetic)",
    )
    .into()
}

/// Fused attention over fixed-length sequences in `order`: q `(b, sq, hq, d)` (or `(b, hq, sq,
/// d)`), k and v `(b, sk, hkv, d)`; an optional additive mask (q's dtype) broadcastable to
/// `(b, hq, sq, sk)`. Returns the contiguous output in q's order and shape.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    op: &str,
    order: AttnLayout,
    (q, ql): (&RocmStorage, &Layout),
    (k, kl): (&RocmStorage, &Layout),
    (v, vl): (&RocmStorage, &Layout),
    mask: Option<(&RocmStorage, &Layout)>,
    params: &AttnParams,
) -> Result<(RocmStorage, Shape)> {
    check_same_device(op, q, k)?;
    check_same_device(op, q, v)?;
    let (qd, kd, vd) = (
        dims4(op, "q", ql)?,
        dims4(op, "k", kl)?,
        dims4(op, "v", vl)?,
    );
    let [b, sq, hq] = order.bsh(&qd);
    let [kb, sk, hkv] = order.bsh(&kd);
    let d = qd[3];
    if kb != b || order.bsh(&vd) != [kb, sk, hkv] || kd[3] != d || vd[3] != d {
        return Err(RocmError::layout(
            op,
            format!(
                "q {qd:?}, k {kd:?} and v {vd:?} disagree (batch, key/value rows and heads of k \
                 and v must match, and every head dim must equal q's)"
            ),
        )
        .into());
    }
    let shape = AttnShape {
        batch: b,
        seq_q: sq,
        seq_k: sk,
        heads_q: hq,
        heads_kv: hkv,
        head_dim: d,
    };
    let mask_layout = match mask {
        None => None,
        Some((m, ml)) => {
            check_same_device(op, q, m)?;
            let full = Shape::from_dims(&[b, hq, sq, sk]);
            let bl = ml.broadcast_as(full.clone()).map_err(|_| {
                candle_core::Error::from(RocmError::layout(
                    op,
                    format!(
                        "the mask of shape {:?} does not broadcast to (batch, q heads, q rows, \
                         k rows) = {:?}",
                        ml.dims(),
                        full.dims()
                    ),
                ))
            })?;
            Some((m, bl))
        }
    };
    let dev = q.device().clone();
    let out_shape = order.shape(b, sq, hq, d);
    let out_strides = Layout::contiguous(&out_shape).stride().to_vec();
    let n = out_shape.elem_count();
    macro_rules! run {
        ($variant:ident) => {{
            let (
                RocmStorageSlice::$variant(qb),
                RocmStorageSlice::$variant(kb),
                RocmStorageSlice::$variant(vb),
            ) = (q.as_slice(), k.as_slice(), v.as_slice())
            else {
                return Err(not_float(op, q.dtype()));
            };
            let qo = operand(op, &dev, qb, ql)?;
            let ko = operand(op, &dev, kb, kl)?;
            let vo = operand(op, &dev, vb, vl)?;
            let mask_arg = match &mask_layout {
                None => None,
                Some((m, bl)) => {
                    let RocmStorageSlice::$variant(mb) = m.as_slice() else {
                        return Err(not_float(op, m.dtype()));
                    };
                    let whole = mb.as_slice();
                    let start = bl.start_offset();
                    let data = whole.slice(start.min(whole.len())..).map_err(hip_err(op))?;
                    let s = bl.stride();
                    Some(AttnMask {
                        data,
                        strides: [s[0], s[1], s[2], s[3]],
                    })
                }
            };
            let mut out = dev.alloc(op, n)?;
            let mut out_slice = out.as_mut_slice();
            kernels::attention(
                dev.stream(),
                &shape,
                &params.options(),
                qo.input(|s| order.bsh_strides(s)),
                ko.input(|s| order.bsh_strides(s)),
                vo.input(|s| order.bsh_strides(s)),
                mask_arg,
                AttnOutput {
                    data: &mut out_slice,
                    strides: order.bsh_strides(&out_strides),
                },
            )
            .map_err(kernel_err(op))?;
            RocmStorageSlice::$variant(out)
        }};
    }
    let slice = match q.dtype() {
        DType::BF16 => run!(BF16),
        DType::F16 => run!(F16),
        DType::F32 => run!(F32),
        other => return Err(not_float(op, other)),
    };
    Ok((RocmStorage::new(slice, dev), out_shape))
}

/// Fused attention over a variable-length batch: q `(total_q, hq, d)`, k and v `(total_k, hkv,
/// d)`, `seqlens_q`/`seqlens_k` u32 cumulative offsets (`batch + 1` each, read on the device: bad
/// offsets are a typed error at the next host read or synchronisation). `max_seqlen_q`/`_k` size
/// the launch (longer sequences are still computed whole). Returns `(total_q, hq, d)`.
#[allow(clippy::too_many_arguments)]
pub fn attention_varlen(
    (q, ql): (&RocmStorage, &Layout),
    (k, kl): (&RocmStorage, &Layout),
    (v, vl): (&RocmStorage, &Layout),
    (cu_q, cu_ql): (&RocmStorage, &Layout),
    (cu_k, cu_kl): (&RocmStorage, &Layout),
    (max_seqlen_q, max_seqlen_k): (usize, usize),
    params: &AttnParams,
) -> Result<(RocmStorage, Shape)> {
    let op = "flash_attn_varlen";
    check_same_device(op, q, k)?;
    check_same_device(op, q, v)?;
    q.check_device(cu_q, leak_op(op))?;
    q.check_device(cu_k, leak_op(op))?;
    let (qd, kd, vd) = (
        dims3(op, "q", ql)?,
        dims3(op, "k", kl)?,
        dims3(op, "v", vl)?,
    );
    let [tq, hq, d] = qd;
    let [tk, hkv, _] = kd;
    if vd != kd || kd[2] != d {
        return Err(RocmError::layout(
            op,
            format!(
                "q {qd:?}, k {kd:?} and v {vd:?} disagree (k and v must match, head dims equal)"
            ),
        )
        .into());
    }
    let cq = offsets(op, cu_q, cu_ql, "seqlens_q")?;
    let ck = offsets(op, cu_k, cu_kl, "seqlens_k")?;
    if cq.len() != ck.len() || cq.is_empty() {
        return Err(RocmError::layout(
            op,
            format!(
                "seqlens_q ({}) and seqlens_k ({}) must both hold batch + 1 >= 1 offsets",
                cq.len(),
                ck.len()
            ),
        )
        .into());
    }
    let shape = AttnShape {
        batch: cq.len() - 1,
        seq_q: max_seqlen_q,
        seq_k: max_seqlen_k,
        heads_q: hq,
        heads_kv: hkv,
        head_dim: d,
    };
    let dev = q.device().clone();
    let flag = dev.index_flag()?;
    let out_shape = Shape::from_dims(&[tq, hq, d]);
    let n = out_shape.elem_count();
    let packed = |s: &[usize]| [0, s[0], s[1]];
    macro_rules! run {
        ($variant:ident) => {{
            let (
                RocmStorageSlice::$variant(qb),
                RocmStorageSlice::$variant(kb),
                RocmStorageSlice::$variant(vb),
            ) = (q.as_slice(), k.as_slice(), v.as_slice())
            else {
                return Err(not_float(op, q.dtype()));
            };
            let qo = operand(op, &dev, qb, ql)?;
            let ko = operand(op, &dev, kb, kl)?;
            let vo = operand(op, &dev, vb, vl)?;
            let mut out = dev.alloc(op, n)?;
            let mut out_slice = out.as_mut_slice();
            kernels::attention_varlen(
                dev.stream(),
                &shape,
                &params.options(),
                qo.input(packed),
                ko.input(packed),
                vo.input(packed),
                Varlen {
                    cu_q: cq,
                    cu_k: ck,
                    total_q: tq,
                    total_k: tk,
                },
                AttnOutput {
                    data: &mut out_slice,
                    strides: [0, hq * d, d],
                },
                flag,
            )
            .map_err(kernel_err(op))?;
            RocmStorageSlice::$variant(out)
        }};
    }
    let slice = match q.dtype() {
        DType::BF16 => run!(BF16),
        DType::F16 => run!(F16),
        DType::F32 => run!(F32),
        other => return Err(not_float(op, other)),
    };
    Ok((RocmStorage::new(slice, dev), out_shape))
}

/// The u32 cumulative offsets of a varlen batch: a contiguous 1-D tensor.
fn offsets<'a>(
    op: &str,
    s: &'a RocmStorage,
    l: &Layout,
    what: &str,
) -> Result<DeviceSlice<'a, u32>> {
    let RocmStorageSlice::U32(buf) = s.as_slice() else {
        return Err(RocmError::unsupported(op, s.dtype(), "sequence offsets must be u32").into());
    };
    if l.dims().len() != 1 || !l.is_contiguous() {
        return Err(RocmError::layout(
            op,
            format!(
                "{what} must be a contiguous 1-D u32 tensor, got shape {:?}",
                l.dims()
            ),
        )
        .into());
    }
    let start = l.start_offset();
    let n = l.dims()[0];
    if start + n > buf.len() {
        return Err(RocmError::layout(op, format!("{what} reaches past its buffer")).into());
    }
    buf.slice(start..start + n).map_err(hip_err(op))
}
