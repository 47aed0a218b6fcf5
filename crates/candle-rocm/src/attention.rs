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
use half::{bf16, f16};
use hip_core::{DeviceBuffer, DeviceSlice};
use rocm_kernels::attention::{
    self as kernels, AttnInput, AttnMask, AttnOutput, AttnShape, Varlen,
};
use rocm_kernels::KernelDType;

use crate::device::RocmDevice;
use crate::error::{hip_err, kernel_err, RocmError};
use crate::storage::{FloatBuffer, RocmStorage, RocmStorageSlice};

/// Scale, softcap and window (rocm-kernels' options, used as they are).
pub use rocm_kernels::attention::{
    matrix_prefill_verdict, AttnKernel, AttnOptions, HEAD_DIMS, MMA_HEAD_DIMS,
};

/// The memory order of 4-D attention operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnLayout {
    /// `(batch, seq, heads, head_dim)`: flash-attention's order.
    Bshd,
    /// `(batch, heads, seq, head_dim)`: candle-nn `sdpa`'s order.
    Bhsd,
}

impl AttnLayout {
    /// The (batch, seq, head) entries of a 4-D list of dims or strides in this order.
    fn bsh(self, dims: &[usize]) -> [usize; 3] {
        match self {
            AttnLayout::Bshd => [dims[0], dims[1], dims[2]],
            AttnLayout::Bhsd => [dims[0], dims[2], dims[1]],
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

/// The buffer of `s`, which must hold `T`.
fn typed<'a, T: FloatBuffer>(op: &str, s: &'a RocmStorage) -> Result<&'a DeviceBuffer<T>> {
    T::buffer(s.as_slice()).ok_or_else(|| not_float(op, s.dtype()))
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
pub fn attention(
    op: &'static str,
    order: AttnLayout,
    (q, ql): (&RocmStorage, &Layout),
    (k, kl): (&RocmStorage, &Layout),
    (v, vl): (&RocmStorage, &Layout),
    mask: Option<(&RocmStorage, &Layout)>,
    options: &AttnOptions,
) -> Result<(RocmStorage, Shape)> {
    q.check_operand(k, op)?;
    q.check_operand(v, op)?;
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
    let mask = match mask {
        None => None,
        Some((m, ml)) => {
            q.check_operand(m, op)?;
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
    let problem = Fixed {
        op,
        order,
        shape: AttnShape {
            batch: b,
            seq_q: sq,
            seq_k: sk,
            heads_q: hq,
            heads_kv: hkv,
            head_dim: d,
        },
        options,
        q: (q, ql),
        k: (k, kl),
        v: (v, vl),
        mask,
    };
    let slice = match q.dtype() {
        DType::BF16 => problem.run::<bf16>()?,
        DType::F16 => problem.run::<f16>()?,
        DType::F32 => problem.run::<f32>()?,
        other => return Err(not_float(op, other)),
    };
    Ok((
        RocmStorage::new(slice, q.device().clone()),
        order.shape(b, sq, hq, d),
    ))
}

/// A validated fixed-length problem.
struct Fixed<'a> {
    op: &'static str,
    order: AttnLayout,
    shape: AttnShape,
    options: &'a AttnOptions,
    q: (&'a RocmStorage, &'a Layout),
    k: (&'a RocmStorage, &'a Layout),
    v: (&'a RocmStorage, &'a Layout),
    /// The mask and its layout broadcast to (b, hq, sq, sk).
    mask: Option<(&'a RocmStorage, Layout)>,
}

impl Fixed<'_> {
    fn run<T: FloatBuffer>(&self) -> Result<RocmStorageSlice> {
        let (op, order, sh) = (self.op, self.order, &self.shape);
        let dev = self.q.0.device();
        let qo = operand(op, dev, typed::<T>(op, self.q.0)?, self.q.1)?;
        let ko = operand(op, dev, typed::<T>(op, self.k.0)?, self.k.1)?;
        let vo = operand(op, dev, typed::<T>(op, self.v.0)?, self.v.1)?;
        let mask = match &self.mask {
            None => None,
            Some((m, bl)) => {
                let whole = typed::<T>(op, m)?.as_slice();
                let start = bl.start_offset().min(whole.len());
                let s = bl.stride();
                Some(AttnMask {
                    data: whole.slice(start..).map_err(hip_err(op))?,
                    strides: [s[0], s[1], s[2], s[3]],
                })
            }
        };
        let out_shape = order.shape(sh.batch, sh.seq_q, sh.heads_q, sh.head_dim);
        let mut out = dev.alloc::<T>(op, out_shape.elem_count())?;
        kernels::attention(
            dev.stream(),
            sh,
            self.options,
            qo.input(|s| order.bsh(s)),
            ko.input(|s| order.bsh(s)),
            vo.input(|s| order.bsh(s)),
            mask,
            AttnOutput {
                data: &mut out.as_mut_slice(),
                strides: order.bsh(Layout::contiguous(&out_shape).stride()),
            },
        )
        .map_err(kernel_err(op))?;
        Ok(T::wrap(out))
    }
}

/// Fused attention over a variable-length batch: q `(total_q, hq, d)`, k and v `(total_k, hkv,
/// d)`, `seqlens_q`/`seqlens_k` u32 cumulative offsets (`batch + 1` each, read on the device: bad
/// offsets are a typed error at the next host read or synchronisation). `max_seqlen_q`/`_k` size
/// the launch (longer sequences are still computed whole). Returns `(total_q, hq, d)`.
pub fn attention_varlen(
    (q, ql): (&RocmStorage, &Layout),
    (k, kl): (&RocmStorage, &Layout),
    (v, vl): (&RocmStorage, &Layout),
    (cu_q, cu_ql): (&RocmStorage, &Layout),
    (cu_k, cu_kl): (&RocmStorage, &Layout),
    (max_seqlen_q, max_seqlen_k): (usize, usize),
    options: &AttnOptions,
) -> Result<(RocmStorage, Shape)> {
    let op = "flash_attn_varlen";
    q.check_operand(k, op)?;
    q.check_operand(v, op)?;
    q.check_device(cu_q, op)?;
    q.check_device(cu_k, op)?;
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
    let problem = Packed {
        shape: AttnShape {
            batch: cq.len() - 1,
            seq_q: max_seqlen_q,
            seq_k: max_seqlen_k,
            heads_q: hq,
            heads_kv: hkv,
            head_dim: d,
        },
        options,
        q: (q, ql),
        k: (k, kl),
        v: (v, vl),
        offsets: Varlen {
            cu_q: cq,
            cu_k: ck,
            total_q: tq,
            total_k: tk,
        },
    };
    let slice = match q.dtype() {
        DType::BF16 => problem.run::<bf16>()?,
        DType::F16 => problem.run::<f16>()?,
        DType::F32 => problem.run::<f32>()?,
        other => return Err(not_float(op, other)),
    };
    Ok((
        RocmStorage::new(slice, q.device().clone()),
        Shape::from_dims(&[tq, hq, d]),
    ))
}

/// A validated variable-length problem.
struct Packed<'a> {
    shape: AttnShape,
    options: &'a AttnOptions,
    q: (&'a RocmStorage, &'a Layout),
    k: (&'a RocmStorage, &'a Layout),
    v: (&'a RocmStorage, &'a Layout),
    offsets: Varlen<'a>,
}

impl Packed<'_> {
    fn run<T: FloatBuffer>(&self) -> Result<RocmStorageSlice> {
        let op = "flash_attn_varlen";
        let dev = self.q.0.device();
        let flag = dev.index_flag()?;
        // (tokens, heads, d): no batch dim, sequences are packed along the tokens.
        let packed = |s: &[usize]| [0, s[0], s[1]];
        let qo = operand(op, dev, typed::<T>(op, self.q.0)?, self.q.1)?;
        let ko = operand(op, dev, typed::<T>(op, self.k.0)?, self.k.1)?;
        let vo = operand(op, dev, typed::<T>(op, self.v.0)?, self.v.1)?;
        let (hq, d) = (self.shape.heads_q, self.shape.head_dim);
        let mut out = dev.alloc::<T>(op, self.offsets.total_q * hq * d)?;
        kernels::attention_varlen(
            dev.stream(),
            &self.shape,
            self.options,
            qo.input(packed),
            ko.input(packed),
            vo.input(packed),
            self.offsets,
            AttnOutput {
                data: &mut out.as_mut_slice(),
                strides: [0, hq * d, d],
            },
            flag,
        )
        .map_err(kernel_err(op))?;
        Ok(T::wrap(out))
    }
}

/// The u32 cumulative offsets of a varlen batch: a contiguous 1-D tensor, read in place.
fn offsets<'a>(
    op: &str,
    s: &'a RocmStorage,
    l: &Layout,
    what: &str,
) -> Result<DeviceSlice<'a, u32>> {
    let RocmStorageSlice::U32(buf) = s.as_slice() else {
        return Err(RocmError::unsupported(op, s.dtype(), "sequence offsets must be u32").into());
    };
    if l.dims().len() != 1 {
        return Err(RocmError::layout(
            op,
            format!("{what} must be a 1-D u32 tensor, got shape {:?}", l.dims()),
        )
        .into());
    }
    crate::fused::contiguous(op, buf, l)
}
