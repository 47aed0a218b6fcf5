//! Zoo cases: state-space and recurrent decoders.
//!
//! Small configs (d_model 64, vocab 160) run on the same seeded tokens as the other decoders
//! ([`crate::common`]): a 7-token prompt, then 4 teacher-forced steps through the model's
//! recurrent state. Mamba and RWKV v6 only take one token at a time, so their prompts are fed
//! token by token (same tokens, same outputs: all prompt positions' logits, then each step's).

use candle_core::{DType, Device, Error, Result, Tensor};
use candle_transformers::models::{mamba, mamba2, recurrent_gemma, rwkv_v6};

use crate::common::{decoder_case, prompt, prompt_then_decode, step_tokens, token_by_token};
use crate::common::{DECODE_STEPS, PROMPT_LEN};
use crate::weights::var_builder;
use crate::Case;

const FAMILY: &str = "state space / recurrent";

/// Vocabulary of every case of this family (a multiple of 16, so no padding of the vocab).
const VOCAB: usize = 160;

/// This family's cases.
pub fn cases() -> Vec<Case> {
    vec![
        Case {
            batch: 1,
            ..decoder_case("mamba", FAMILY, mamba)
        },
        decoder_case("mamba2", FAMILY, mamba2),
        decoder_case("recurrent_gemma", FAMILY, recurrent_gemma),
        Case {
            batch: 1,
            dtypes: &[DType::F32],
            ..decoder_case("rwkv_v6", FAMILY, rwkv_v6)
        },
    ]
}

const MAMBA_SEED: u64 = 301;

/// mamba (batch 1): selective scan (softplus dt, exp(dt * A) decay, B/C projections), depthwise
/// causal conv over a 4-token ring buffer, SiLU gating, tied lm_head; the API decodes one token
/// at a time, so the prompt goes through `State` token by token. Outputs: the logits of all 7
/// prompt positions `(batch, 7, vocab)`, then each step's `(batch, vocab)`. Batch 1 because
/// candle-transformers' `MambaBlock::forward` broadcasts B `(batch, d_state)` straight to
/// `(batch, d_inner, d_state)`, which only works for batch 1.
fn mamba(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: mamba::Config = serde_json::from_str(
        r#"{ "d_model": 64, "n_layer": 2, "vocab_size": 160, "pad_vocab_size_multiple": 16 }"#,
    )
    .map_err(Error::wrap)?;
    let model = mamba::Model::new(&cfg, var_builder(MAMBA_SEED, dtype, device))?;
    let mut state = mamba::State::new(elements.len(), &cfg, dtype, device)?;
    let tokens = token_by_token(MAMBA_SEED, elements, VOCAB, device)?;
    let mut logits = tokens
        .iter()
        .map(|t| model.forward(t, &mut state))
        .collect::<Result<Vec<_>>>()?;
    let steps = logits.split_off(PROMPT_LEN);
    let mut outputs = vec![Tensor::stack(&logits, 1)?];
    outputs.extend(steps);
    Ok(outputs)
}

const MAMBA2_SEED: u64 = 302;

/// mamba2: chunked SSD prefill (chunk 4 over the 7-token prompt: one padded chunk plus the
/// inter-chunk state recurrence, segsum/cumsum/tril masks), grouped B/C (2 groups, 8 heads of
/// 16), depthwise conv1d, gated RMSNorm, then 4 single-token `State` steps. Outputs: the
/// prefill logits of all positions `(batch, 7, vocab)`, then each step's `(batch, vocab)`.
fn mamba2(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: mamba2::Config = serde_json::from_str(
        r#"{
            "d_model": 64, "n_layer": 2, "vocab_size": 160, "d_state": 16, "expand": 2,
            "headdim": 16, "ngroups": 2, "pad_vocab_size_multiple": 16
        }"#,
    )
    .map_err(Error::wrap)?;
    let model = mamba2::Model::new(&cfg, var_builder(MAMBA2_SEED, dtype, device))?;
    let mut state = mamba2::State::new(elements.len(), &cfg, dtype, device)?;
    let prompt = prompt(MAMBA2_SEED, elements, VOCAB, device)?;
    let mut outputs = vec![model.forward_prefill(&prompt, &mut state, 4)?];
    for step in 0..DECODE_STEPS {
        let tokens = step_tokens(MAMBA2_SEED, step, elements, VOCAB, device)?.squeeze(1)?;
        outputs.push(model.forward(&tokens, &mut state)?);
    }
    Ok(outputs)
}

const RECURRENT_GEMMA_SEED: u64 = 303;

/// recurrent_gemma: RG-LRU recurrent blocks (block-diagonal input/recurrent gates, sqrt(1-a^2)
/// normalisation, f32 scan) with a depthwise conv1d state, then a local MQA attention block with
/// half-rotary RoPE (pattern recurrent, recurrent, attention), `1 + weight` RMSNorm, final
/// logit softcapping, KV cache and recurrent state across 4 decode steps.
fn recurrent_gemma(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: recurrent_gemma::Config = serde_json::from_str(
        r#"{
            "num_hidden_layers": 3, "vocab_size": 160, "hidden_size": 64,
            "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 1,
            "head_dim": 16, "lru_width": 64, "attention_window_size": 16,
            "conv1d_width": 4, "logits_soft_cap": 30.0, "hidden_activation": "gelu_pytorch_tanh",
            "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "block_types": ["recurrent", "recurrent", "attention"], "attention_bias": false,
            "max_seq_len": 64
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model =
        recurrent_gemma::Model::new(&cfg, var_builder(RECURRENT_GEMMA_SEED, dtype, device))?;
    prompt_then_decode(
        RECURRENT_GEMMA_SEED,
        elements,
        VOCAB,
        device,
        |tokens, pos| model.forward(tokens, pos),
    )
}

const RWKV_V6_SEED: u64 = 304;

/// rwkv_v6 (batch 1, f32 only): token shift with data-dependent LoRA time-mix (5 mixes), LoRA
/// data-dependent decay exp(-exp(w)), per-head WKV recurrence with the `time_faaaa` bonus,
/// GroupNorm over heads, SiLU output gate, squared-ReLU channel mix; the prompt goes through
/// `State` token by token. Outputs: the logits of all 7 prompt positions `(1, 7, vocab)`, then
/// each step's `(1, 1, vocab)`. Batch 1 and one token per call because its decay reshape
/// `(b, t, hidden) -> (heads, b * t * head_size, 1)` only lines up with the state for b = t =
/// 1; f32 only because `rwkv_v5::State` is always f32 and the time-mix subtracts it from the
/// activations.
fn rwkv_v6(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: rwkv_v6::Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "hidden_size": 64, "num_hidden_layers": 2,
            "attention_hidden_size": 64, "num_attention_heads": 16, "head_size": 16,
            "intermediate_size": 224, "layer_norm_epsilon": 1e-5, "rescale_every": 6
        }"#,
    )
    .map_err(Error::wrap)?;
    let model = rwkv_v6::Model::new(&cfg, var_builder(RWKV_V6_SEED, dtype, device))?;
    let mut state = rwkv_v6::State::new(elements.len(), &cfg, device)?;
    let tokens = token_by_token(RWKV_V6_SEED, elements, VOCAB, device)?;
    let mut logits = tokens
        .iter()
        .map(|t| model.forward(&t.unsqueeze(1)?, &mut state))
        .collect::<Result<Vec<_>>>()?;
    let steps = logits.split_off(PROMPT_LEN);
    let mut outputs = vec![Tensor::cat(&logits, 1)?];
    outputs.extend(steps);
    Ok(outputs)
}
