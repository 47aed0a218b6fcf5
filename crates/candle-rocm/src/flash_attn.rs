//! candle-flash-attn's API on ROCm tensors: the same functions, shapes and semantics, so that a
//! model switches by changing one import (`use candle_rocm::flash_attn::*`, or the same names
//! at the crate root: `candle_rocm::flash_attn(q, k, v, softmax_scale, causal)`).
//!
//! * q `(batch, seq_q, heads_q, head_dim)`, k and v `(batch, seq_k, heads_kv, head_dim)`, output
//!   like q; `heads_q` a multiple of `heads_kv` (grouped- and multi-query attention without
//!   repeating k and v); head dims [`HEAD_DIMS`](crate::attention::HEAD_DIMS); f32, f16, bf16.
//! * Causal masking and windows are aligned to the bottom-right corner (flash-attention 2):
//!   with `seq_q < seq_k` the queries are the last `seq_q` positions.
//! * Varlen: q `(total_q, heads_q, head_dim)`, k and v `(total_k, heads_kv, head_dim)`,
//!   `seqlens_q`/`seqlens_k` the u32 cumulative offsets (`batch + 1`).
//!
//! Every function runs one fused kernel (see [`crate::attention`]); the CPU has none, so a CPU
//! tensor is an error naming the op. No gradients (`apply_op3_no_bwd`).

use candle_core::ext::ExtStorage;
use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Storage, Tensor};

use crate::attention::{attention, attention_varlen, AttnKernel, AttnLayout, AttnOptions};
use crate::error::RocmError;
use crate::tensor::rocm_operand;

fn no_cpu(op: &str) -> candle_core::Error {
    RocmError::layout(
        op,
        "fused attention runs on ROCm devices (Device::new_rocm); the CPU has no implementation",
    )
    .into()
}

struct FlashAttn {
    options: AttnOptions,
}

impl CustomOp3 for FlashAttn {
    fn name(&self) -> &'static str {
        "flash-attn"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        Err(no_cpu("flash_attn"))
    }

    fn ext_fwd(
        &self,
        q: &ExtStorage,
        ql: &Layout,
        k: &ExtStorage,
        kl: &Layout,
        v: &ExtStorage,
        vl: &Layout,
    ) -> Result<(ExtStorage, Shape)> {
        let op = "flash_attn";
        let (out, shape) = attention(
            op,
            AttnLayout::Bshd,
            (rocm_operand(op, q)?, ql),
            (rocm_operand(op, k)?, kl),
            (rocm_operand(op, v)?, vl),
            None,
            &self.options,
        )?;
        Ok((ExtStorage::new(out), shape))
    }
}

struct FlashAttnVarLen {
    options: AttnOptions,
    seqlens_q: Tensor,
    seqlens_k: Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
}

impl CustomOp3 for FlashAttnVarLen {
    fn name(&self) -> &'static str {
        "flash-attn-varlen"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        Err(no_cpu("flash_attn_varlen"))
    }

    fn ext_fwd(
        &self,
        q: &ExtStorage,
        ql: &Layout,
        k: &ExtStorage,
        kl: &Layout,
        v: &ExtStorage,
        vl: &Layout,
    ) -> Result<(ExtStorage, Shape)> {
        let op = "flash_attn_varlen";
        let (sq, sql) = self.seqlens_q.storage_and_layout();
        let (sk, skl) = self.seqlens_k.storage_and_layout();
        let (Storage::Ext(sq), Storage::Ext(sk)) = (&*sq, &*sk) else {
            return Err(RocmError::layout(
                op,
                "seqlens_q and seqlens_k must be on the ROCm device of q",
            )
            .into());
        };
        let (out, shape) = attention_varlen(
            (rocm_operand(op, q)?, ql),
            (rocm_operand(op, k)?, kl),
            (rocm_operand(op, v)?, vl),
            (rocm_operand(op, sq)?, sql),
            (rocm_operand(op, sk)?, skl),
            (self.max_seqlen_q, self.max_seqlen_k),
            &self.options,
        )?;
        Ok((ExtStorage::new(out), shape))
    }
}

/// Flash attention: `softmax(q k^T * softmax_scale) v`, causal or not.
pub fn flash_attn(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    flash_attn_windowed(q, k, v, softmax_scale, None, causal.then_some(0))
}

/// Flash attention with a sliding window: key `j` is seen by query `i` when `i - window_size_left
/// <= j <= i + window_size_right` (diagonal bottom-right aligned; `None` is unbounded; causal is
/// `window_size_right = Some(0)`).
pub fn flash_attn_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    flash_attn_windowed_softcap(
        q,
        k,
        v,
        softmax_scale,
        window_size_left,
        window_size_right,
        0.0,
    )
}

/// [`flash_attn_windowed`] with gemma2's logit softcapping: `cap * tanh(s / cap)` on the scaled
/// scores (`softcap <= 0` turns it off, as in candle-flash-attn).
pub fn flash_attn_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let op = FlashAttn {
        options: AttnOptions {
            scale: softmax_scale,
            softcap: (softcap > 0.0).then_some(softcap),
            window_left: window_size_left,
            window_right: window_size_right,
            kernel: AttnKernel::Auto,
        },
    };
    q.apply_op3_no_bwd(k, v, &op)
}

/// Flash attention over a variable-length batch (sequences packed along dim 0).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    flash_attn_varlen_windowed(
        q,
        k,
        v,
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale,
        None,
        causal.then_some(0),
    )
}

/// [`flash_attn_varlen`] with a sliding window (see [`flash_attn_windowed`]).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let op = FlashAttnVarLen {
        options: AttnOptions {
            scale: softmax_scale,
            softcap: None,
            window_left: window_size_left,
            window_right: window_size_right,
            kernel: AttnKernel::Auto,
        },
        seqlens_q: seqlens_q.clone(),
        seqlens_k: seqlens_k.clone(),
        max_seqlen_q,
        max_seqlen_k,
    };
    q.apply_op3_no_bwd(k, v, &op)
}
