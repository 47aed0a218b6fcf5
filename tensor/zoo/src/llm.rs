//! Zoo cases: decoder LLMs.
//!
//! Each case builds a small config (hidden 64, 2 layers, 4 heads, 2 KV heads where the model
//! has grouped-query attention, vocab 160) that keeps the model's distinctive ops, seeded
//! weights, then runs a 7-token prompt and 4 teacher-forced KV-cache decode steps
//! ([`crate::common::prompt_then_decode`]). Outputs: the prompt's last-position logits, then
//! each step's.

use candle_core::{DType, Device, Error, Result, Tensor};
use candle_transformers::models::{
    falcon, gemma, gemma2, llama, mistral, olmo, phi, phi3, qwen2, qwen3, stable_lm, starcoder2,
};

use crate::common::{decoder_case, prompt_then_decode};
use crate::weights::var_builder;
use crate::Case;

const FAMILY: &str = "decoder LLM";

/// Vocabulary of every case of this family.
const VOCAB: usize = 160;

/// This family's cases.
pub fn cases() -> Vec<Case> {
    let case = |name, run| decoder_case(name, FAMILY, run);
    vec![
        case("llama", llama),
        case("mistral", mistral),
        case("qwen2", qwen2),
        case("qwen3", qwen3),
        case("phi3", phi3),
        case("gemma", gemma),
        case("gemma2", gemma2),
        case("starcoder2", starcoder2),
        Case {
            batch: 1,
            ..case("falcon", falcon)
        },
        case("stable_lm", stable_lm),
        case("olmo", olmo),
        Case {
            dtypes: &[DType::F32],
            ..case("phi", phi)
        },
    ]
}

const LLAMA_SEED: u64 = 101;

/// llama: GQA 4/2, llama3 RoPE scaling (head_dim 16 puts frequencies in all three bands: kept,
/// smoothed, divided), SiLU-gated MLP, f32 attention with a u8 causal mask, KV cache.
fn llama(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: llama::LlamaConfig = serde_json::from_str(
        r#"{
            "hidden_size": 64, "intermediate_size": 128, "vocab_size": 160,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 64,
            "rope_scaling": {
                "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64, "rope_type": "llama3"
            },
            "tie_word_embeddings": false
        }"#,
    )
    .map_err(Error::wrap)?;
    let cfg = cfg.into_config(false);
    let model = llama::Llama::load(var_builder(LLAMA_SEED, dtype, device), &cfg)?;
    let mut cache = llama::Cache::new(true, dtype, &cfg, device)?;
    prompt_then_decode(LLAMA_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos, &mut cache)
    })
}

const MISTRAL_SEED: u64 = 102;

/// mistral: GQA 4/2, sliding-window causal mask (window 4 < the 7-token prompt), SiLU-gated
/// MLP, KV cache.
fn mistral(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: mistral::Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": null,
            "num_key_value_heads": 2, "hidden_act": "silu", "max_position_embeddings": 64,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "sliding_window": 4,
            "use_flash_attn": false
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model = mistral::Model::new(&cfg, var_builder(MISTRAL_SEED, dtype, device))?;
    prompt_then_decode(MISTRAL_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos)
    })
}

const QWEN2_SEED: u64 = 103;

/// qwen2: GQA 4/2 with q/k/v biases, RoPE theta 1e6, additive causal mask, separate lm_head
/// (`ModelForCausalLM`), KV cache.
fn qwen2(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: qwen2::Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 64, "sliding_window": 64, "max_window_layers": 2,
            "tie_word_embeddings": false, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
            "use_sliding_window": false, "hidden_act": "silu"
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model = qwen2::ModelForCausalLM::new(&cfg, var_builder(QWEN2_SEED, dtype, device))?;
    prompt_then_decode(QWEN2_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos)
    })
}

const QWEN3_SEED: u64 = 104;

/// qwen3: per-head q/k RMSNorm, head_dim 32 (attention width 128 != hidden 64), GQA 4/2, tied
/// embeddings, `ConcatKvCache`. On `Device::Cpu` the model takes candle-nn's CPU flash
/// attention; on any other device (`Device::Ext` included) matmul attention with an additive
/// mask.
fn qwen3(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: qwen3::Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 32,
            "attention_bias": false, "num_key_value_heads": 2, "max_position_embeddings": 64,
            "sliding_window": null, "max_window_layers": 2, "tie_word_embeddings": true,
            "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "use_sliding_window": false,
            "hidden_act": "silu"
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model = qwen3::ModelForCausalLM::new(&cfg, var_builder(QWEN3_SEED, dtype, device))?;
    prompt_then_decode(QWEN3_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos)
    })
}

const PHI3_SEED: u64 = 105;

/// phi3: fused qkv and gate_up projections, partial rotary (factor 0.5) with longrope scaling
/// (original context 8, so decode steps 1-3 use the long factors), GQA 4/2, KV cache.
fn phi3(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: phi3::Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "hidden_act": "silu", "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "bos_token_id": 1, "eos_token_id": 2,
            "rope_scaling": {
                "short_factor": [1.0, 1.1, 1.3, 1.7],
                "long_factor": [1.0, 2.0, 4.5, 9.0],
                "type": "longrope"
            },
            "max_position_embeddings": 32, "original_max_position_embeddings": 8,
            "partial_rotary_factor": 0.5, "tie_word_embeddings": false
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model = phi3::Model::new(&cfg, var_builder(PHI3_SEED, dtype, device))?;
    prompt_then_decode(PHI3_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos)
    })
}

const GEMMA_SEED: u64 = 106;

/// gemma: multi-query attention (1 KV head), head_dim 24 (attention width 96 != hidden 64),
/// `1 + weight` RMSNorm computed in f32, sqrt(hidden) embedding scale, GeLU (tanh) gated MLP,
/// tied lm_head, KV cache.
fn gemma(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: gemma::Config = serde_json::from_str(
        r#"{
            "attention_bias": false, "head_dim": 24, "hidden_act": null,
            "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 64,
            "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 2,
            "num_key_value_heads": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "vocab_size": 160, "max_position_embeddings": 64
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model = gemma::Model::new(false, &cfg, var_builder(GEMMA_SEED, dtype, device))?;
    prompt_then_decode(GEMMA_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos)
    })
}

const GEMMA2_SEED: u64 = 107;

/// gemma2: attention-logit and final-logit tanh softcapping (caps 5 and 10, low enough to bend
/// the random logits), sliding-window mask (window 4), pre/post norms around attention and
/// MLP, GQA 4/2, tied lm_head, KV cache.
fn gemma2(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: gemma2::Config = serde_json::from_str(
        r#"{
            "attention_bias": false, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
            "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0, "vocab_size": 160, "final_logit_softcapping": 10.0,
            "attn_logit_softcapping": 5.0, "query_pre_attn_scalar": 16, "sliding_window": 4,
            "max_position_embeddings": 64
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model = gemma2::Model::new(false, &cfg, var_builder(GEMMA2_SEED, dtype, device))?;
    prompt_then_decode(GEMMA2_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos)
    })
}

const STARCODER2_SEED: u64 = 108;

/// starcoder2: LayerNorm with biases, biased projections, rotate-half RoPE, plain GeLU (tanh)
/// MLP, sliding-window mask (window 4), GQA 4/2, tied lm_head, KV cache.
fn starcoder2(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: starcoder2::Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "hidden_act": "gelu_pytorch_tanh", "max_position_embeddings": 64,
            "norm_epsilon": 1e-5, "rope_theta": 100000.0, "use_bias": true,
            "sliding_window": 4
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model = starcoder2::Model::new(&cfg, var_builder(STARCODER2_SEED, dtype, device))?;
    prompt_then_decode(STARCODER2_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos)
    })
}

const FALCON_SEED: u64 = 109;

/// falcon (batch 1): multi-query attention with a fused qkv projection, parallel attention and
/// MLP branches off one LayerNorm, rotate-half RoPE, masked_fill causal mask, KV cache. Batch 1
/// because candle-transformers' multi-query path broadcasts the single KV head with
/// `broadcast_as((b * heads, ..))`, which only works for b = 1, and its multi-head path
/// (`multi_query: false`) needs `n_head_kv`, which `Config::validate` rejects.
fn falcon(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: falcon::Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
            "use_cache": true, "bos_token_id": 1, "eos_token_id": 2, "hidden_dropout": 0.0,
            "attention_dropout": 0.0, "n_head_kv": null, "alibi": false,
            "new_decoder_architecture": false, "multi_query": true, "parallel_attn": true,
            "bias": false
        }"#,
    )
    .map_err(Error::wrap)?;
    cfg.validate()?;
    let mut model = falcon::Falcon::load(var_builder(FALCON_SEED, dtype, device), cfg)?;
    // Falcon takes its offset from the length of its KV cache.
    prompt_then_decode(FALCON_SEED, elements, VOCAB, device, |tokens, _pos| {
        model.forward(tokens)
    })
}

const STABLE_LM_SEED: u64 = 110;

/// stable_lm: partial rotary (factor 0.25: 4 of 16 dims rotated), LayerNorm, qkv biases
/// (StableLM-2), GQA 4/2, SiLU-gated MLP, KV cache.
fn stable_lm(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: stable_lm::Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "intermediate_size": 128, "hidden_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "hidden_act": "silu", "partial_rotary_factor": 0.25, "rope_theta": 10000.0,
            "max_position_embeddings": 64, "layer_norm_eps": 1e-5, "use_cache": true,
            "use_qkv_bias": true, "use_flash_attn": false
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model = stable_lm::Model::new(&cfg, var_builder(STABLE_LM_SEED, dtype, device))?;
    prompt_then_decode(STABLE_LM_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos)
    })
}

const OLMO_SEED: u64 = 111;

/// olmo: non-parametric LayerNorm (weight fixed to ones, no bias), q/k/v clamped to +-1.5
/// (`clip_qkv`, low enough that the random activations get clipped), GQA 4/2, SiLU-gated MLP,
/// KV cache.
fn olmo(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: olmo::Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "hidden_size": 64, "intermediate_size": 128,
            "attention_bias": false, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "hidden_act": "silu", "max_position_embeddings": 64,
            "rope_theta": 10000.0, "tie_word_embeddings": false, "clip_qkv": 1.5
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model = olmo::Model::new(&cfg, var_builder(OLMO_SEED, dtype, device))?;
    prompt_then_decode(OLMO_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos)
    })
}

const PHI_SEED: u64 = 112;

/// phi (phi-2 style, f32 only): parallel attention and MLP off one LayerNorm, partial rotary (factor
/// 0.5) with f32 cos/sin tables, biased projections, GeLU-new MLP, f32 attention softmax with a
/// u8 causal mask, KV cache (offset taken from the cache length). No q/k LayerNorm: candle
/// applies its head_dim-wide norm before the head split, so `qk_layernorm` needs one head. f32
/// only: its cos/sin tables are always f32 and candle-nn's `rope` wants them in the dtype of
/// the activations ("unsupported dtype for rope F16 F32 F32").
fn phi(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: phi::Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": null,
            "hidden_act": "gelu_new", "max_position_embeddings": 64, "layer_norm_eps": 1e-5,
            "tie_word_embeddings": false, "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5, "qk_layernorm": false
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model = phi::Model::new(&cfg, var_builder(PHI_SEED, dtype, device))?;
    // phi takes its offset from the length of its KV cache.
    prompt_then_decode(PHI_SEED, elements, VOCAB, device, |tokens, _pos| {
        model.forward(tokens)
    })
}
