//! Zoo cases: mixture-of-experts decoders.
//!
//! Small configs (hidden 64, 2 layers, 4 heads with 2 KV heads, vocab 160) whose sparse MoE
//! blocks route every token to its top-2 experts; a 7-token prompt, then 4 teacher-forced
//! KV-cache decode steps ([`crate::common::prompt_then_decode`]). Outputs: the prompt's
//! last-position logits, then each step's.
//!
//! Routing is a discrete choice made on the host from the router's softmax: a run in a lower
//! precision can pick another expert where two router probabilities nearly tie.

use candle_core::{DType, Device, Error, Result, Tensor};
use candle_transformers::models::{deepseek2, mixtral, qwen2_moe, qwen3_moe};

use crate::common::{decoder_case, prompt_then_decode};
use crate::weights::var_builder;
use crate::Case;

const FAMILY: &str = "mixture of experts";

/// Vocabulary of every case of this family.
const VOCAB: usize = 160;

/// This family's cases.
pub fn cases() -> Vec<Case> {
    vec![
        Case {
            dtypes: &[DType::F32],
            ..decoder_case("mixtral", FAMILY, mixtral)
        },
        decoder_case("qwen3_moe", FAMILY, qwen3_moe),
        decoder_case("qwen2_moe", FAMILY, qwen2_moe),
        decoder_case("deepseek2", FAMILY, deepseek2),
    ]
}

const MIXTRAL_SEED: u64 = 201;

/// mixtral (f32 only): sparse MoE with 4 SiLU-gated experts, top-2 routing renormalised over
/// the chosen two (index_select / index_add per expert), sliding-window mask (window 4), GQA
/// 4/2, KV cache. f32 only because candle-transformers' `SparseMoeBlock` multiplies the expert
/// outputs by routing weights it always builds in f32 (`broadcast_mul` of f16/bf16 by f32
/// fails: "dtype mismatch in mul").
fn mixtral(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: mixtral::Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "hidden_act": "silu", "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
            "rope_theta": 1000000.0, "sliding_window": 4, "num_experts_per_tok": 2,
            "num_local_experts": 4, "use_flash_attn": false
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model = mixtral::Model::new(&cfg, var_builder(MIXTRAL_SEED, dtype, device))?;
    prompt_then_decode(MIXTRAL_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos)
    })
}

const QWEN3_MOE_SEED: u64 = 202;

/// qwen3_moe: 8 experts with top-2 routing by `arg_sort_last_dim` + `gather`, normalised top-k
/// probabilities, layer 0 a dense MLP and layer 1 sparse (`decoder_sparse_step` 2), qwen3
/// attention (q/k RMSNorm, head_dim 32, GQA 4/2; CPU flash attention on `Device::Cpu` only),
/// KV cache.
fn qwen3_moe(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: qwen3_moe::Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 32,
            "attention_bias": false, "num_key_value_heads": 2, "max_position_embeddings": 64,
            "sliding_window": null, "max_window_layers": 2, "tie_word_embeddings": false,
            "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "use_sliding_window": false,
            "hidden_act": "silu", "decoder_sparse_step": 2, "moe_intermediate_size": 32,
            "num_experts_per_tok": 2, "num_experts": 8, "norm_topk_prob": true
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model =
        qwen3_moe::ModelForCausalLM::new(&cfg, var_builder(QWEN3_MOE_SEED, dtype, device))?;
    prompt_then_decode(QWEN3_MOE_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos)
    })
}

const QWEN2_MOE_SEED: u64 = 203;

/// qwen2_moe: 8 experts with top-4 routing by `arg_sort_last_dim` + `gather`, un-normalised
/// top-k probabilities, a shared expert behind a sigmoid gate, every layer sparse, q/k/v
/// biases, GQA 4/2, KV cache.
fn qwen2_moe(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: qwen2_moe::Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 64, "sliding_window": 64, "max_window_layers": 2,
            "tie_word_embeddings": false, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
            "use_sliding_window": false, "hidden_act": "silu", "decoder_sparse_step": 1,
            "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64,
            "num_experts_per_tok": 4, "num_experts": 8, "norm_topk_prob": false
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model = qwen2_moe::Model::new(&cfg, var_builder(QWEN2_MOE_SEED, dtype, device))?;
    prompt_then_decode(QWEN2_MOE_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos)
    })
}

const DEEPSEEK2_SEED: u64 = 204;

/// deepseek2: multi-head latent attention (LoRA-compressed q with its RMSNorm, compressed kv
/// with a shared rope key, nope/rope head split, interleaved `rope_i`), YaRN RoPE scaling with
/// mscale folded into the softmax scale, layer 0 dense then a MoE layer of 8 routed experts
/// (greedy top-2 in f32 via `topk_unsorted`, routed scaling 1.5, host-side `nonzero`/`bincount`
/// dispatch) plus a shared expert, KV cache.
fn deepseek2(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: deepseek2::DeepSeekV2Config = serde_json::from_str(
        r#"{
            "vocab_size": 160, "hidden_size": 64, "intermediate_size": 128,
            "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "n_shared_experts": 1, "n_routed_experts": 8, "routed_scaling_factor": 1.5,
            "topk_method": "greedy", "num_experts_per_tok": 2, "moe_layer_freq": 1,
            "first_k_dense_replace": 1, "norm_topk_prob": false, "scoring_func": "softmax",
            "hidden_act": "silu", "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": false, "rope_theta": 10000.0,
            "rope_scaling": {
                "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0,
                "mscale": 1.0, "mscale_all_dim": 0.707, "factor": 4.0, "type": "yarn"
            },
            "attention_bias": false, "q_lora_rank": 48, "qk_rope_head_dim": 8,
            "kv_lora_rank": 32, "v_head_dim": 16, "qk_nope_head_dim": 16, "n_group": 1,
            "topk_group": 1
        }"#,
    )
    .map_err(Error::wrap)?;
    let mut model = deepseek2::DeepSeekV2::new(&cfg, var_builder(DEEPSEEK2_SEED, dtype, device))?;
    prompt_then_decode(DEEPSEEK2_SEED, elements, VOCAB, device, |tokens, pos| {
        model.forward(tokens, pos)
    })
}
