//! Small GGUF models with seeded random weights, written on the CPU, for tests that must not
//! depend on a download: a llama-architecture model ([`write_random_llama_gguf`], candle-
//! transformers' `quantized_llama`) and a mixture-of-experts qwen3moe model
//! ([`write_random_qwen3moe_gguf`], `quantized_qwen3_moe`). The same seed gives the same file.

use std::path::Path;

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::SeedableRng;
use rand_distr::Distribution;

use crate::error::{invalid, Result};
use crate::gguf_tools::{can_quantize, llama_cpp_file_type, write_gguf};

/// Dimensions of a llama-architecture model written by [`write_random_llama_gguf`].
#[derive(Debug, Clone, PartialEq)]
pub struct RandomLlamaConfig {
    /// Vocabulary size (rows of `token_embd.weight` and `output.weight`).
    pub vocab_size: usize,
    /// Hidden size (`llama.embedding_length`).
    pub hidden_size: usize,
    /// MLP size (`llama.feed_forward_length`).
    pub intermediate_size: usize,
    /// Number of blocks (`llama.block_count`).
    pub num_layers: usize,
    /// Attention heads (`llama.attention.head_count`); must divide `hidden_size`.
    pub num_heads: usize,
    /// Key/value heads (`llama.attention.head_count_kv`); must divide `num_heads`.
    pub num_kv_heads: usize,
    /// `llama.context_length`.
    pub context_length: usize,
    /// `llama.attention.layer_norm_rms_epsilon`.
    pub rms_norm_eps: f32,
    /// `llama.rope.freq_base`.
    pub rope_freq_base: f32,
    /// Without `output.weight`: the output layer reuses `token_embd.weight`, as in SmolLM2.
    pub tie_embeddings: bool,
}

impl RandomLlamaConfig {
    /// A small model whose matrices all have rows of a multiple of 256 elements, so that every
    /// GGML type (k-quants included) applies: vocabulary 512, hidden 256, MLP 512, 2 blocks,
    /// 4 heads of 64 with 2 key/value heads, untied output.
    pub fn tiny() -> Self {
        Self {
            vocab_size: 512,
            hidden_size: 256,
            intermediate_size: 512,
            num_layers: 2,
            num_heads: 4,
            num_kv_heads: 2,
            context_length: 512,
            rms_norm_eps: 1e-5,
            rope_freq_base: 10000.0,
            tie_embeddings: false,
        }
    }

    /// Size of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }

    fn validate(&self) -> Result<()> {
        let c = self;
        if c.vocab_size == 0
            || c.hidden_size == 0
            || c.intermediate_size == 0
            || c.num_layers == 0
            || c.num_heads == 0
            || c.num_kv_heads == 0
            || c.context_length == 0
        {
            return Err(invalid(format!("random llama: zero dimension in {c:?}")));
        }
        if c.hidden_size % c.num_heads != 0 || c.num_heads % c.num_kv_heads != 0 {
            return Err(invalid(format!(
                "random llama: heads ({} / {} kv) do not divide hidden size {}",
                c.num_heads, c.num_kv_heads, c.hidden_size
            )));
        }
        if c.head_dim() % 2 != 0 {
            return Err(invalid(format!(
                "random llama: head size {} is odd (RoPE needs pairs)",
                c.head_dim()
            )));
        }
        Ok(())
    }

    /// Every tensor of the model: name and shape (candle order: rows, then the row length),
    /// in the order they are written.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (h, f, v) = (self.hidden_size, self.intermediate_size, self.vocab_size);
        let kv = self.num_kv_heads * self.head_dim();
        let mut out = vec![("token_embd.weight".to_string(), vec![v, h])];
        for i in 0..self.num_layers {
            let p = format!("blk.{i}");
            out.push((format!("{p}.attn_norm.weight"), vec![h]));
            out.push((format!("{p}.attn_q.weight"), vec![h, h]));
            out.push((format!("{p}.attn_k.weight"), vec![kv, h]));
            out.push((format!("{p}.attn_v.weight"), vec![kv, h]));
            out.push((format!("{p}.attn_output.weight"), vec![h, h]));
            out.push((format!("{p}.ffn_norm.weight"), vec![h]));
            out.push((format!("{p}.ffn_gate.weight"), vec![f, h]));
            out.push((format!("{p}.ffn_up.weight"), vec![f, h]));
            out.push((format!("{p}.ffn_down.weight"), vec![h, f]));
        }
        out.push(("output_norm.weight".to_string(), vec![h]));
        if !self.tie_embeddings {
            out.push(("output.weight".to_string(), vec![v, h]));
        }
        out
    }

    /// The metadata quantized_llama reads, plus `general.name`, `llama.context_length`,
    /// `llama.vocab_size` and `general.file_type` for `dtype`.
    pub fn metadata(&self, dtype: GgmlDType) -> Vec<(String, Value)> {
        let u = |x: usize| Value::U32(x as u32);
        let mut md = vec![
            (
                "general.architecture".to_string(),
                Value::String("llama".into()),
            ),
            (
                "general.name".to_string(),
                Value::String("candle-rocm random llama".into()),
            ),
            ("llama.attention.head_count".to_string(), u(self.num_heads)),
            (
                "llama.attention.head_count_kv".to_string(),
                u(self.num_kv_heads),
            ),
            (
                "llama.attention.layer_norm_rms_epsilon".to_string(),
                Value::F32(self.rms_norm_eps),
            ),
            ("llama.block_count".to_string(), u(self.num_layers)),
            ("llama.context_length".to_string(), u(self.context_length)),
            ("llama.embedding_length".to_string(), u(self.hidden_size)),
            (
                "llama.feed_forward_length".to_string(),
                u(self.intermediate_size),
            ),
            ("llama.rope.dimension_count".to_string(), u(self.head_dim())),
            (
                "llama.rope.freq_base".to_string(),
                Value::F32(self.rope_freq_base),
            ),
            ("llama.vocab_size".to_string(), u(self.vocab_size)),
        ];
        if let Some(ft) = llama_cpp_file_type(dtype) {
            md.push(("general.file_type".to_string(), Value::U32(ft)));
        }
        md
    }
}

/// Writes to `path` a llama-architecture GGUF file of `cfg` with seeded random weights, every
/// matrix quantized to `dtype` on the CPU and the norm weights in F32, with the metadata of
/// [`RandomLlamaConfig::metadata`]. Returns the file's size in bytes.
///
/// Weights are drawn from a seeded `StdRng` in the order of
/// [`RandomLlamaConfig::tensor_shapes`]: the embedding from N(0, 1), each other matrix from
/// N(0, 1/row length) (activations of order one), norm weights from 1 + N(0, 0.1). The same
/// seed gives the same file. Every matrix row length must be a multiple of `dtype`'s block
/// size (256 for the k-quants), else this is an error.
pub fn write_random_llama_gguf(
    path: &Path,
    cfg: &RandomLlamaConfig,
    dtype: GgmlDType,
    seed: u64,
) -> Result<u64> {
    cfg.validate()?;
    let tensors = random_tensors("random llama", &cfg.tensor_shapes(), dtype, seed)?;
    write_gguf(path, &cfg.metadata(dtype), &tensors)
}

// ------------------------------------------------------------------------------------------
// Random qwen3moe GGUF files.

/// Dimensions of a qwen3moe-architecture model (candle-transformers'
/// [`quantized_qwen3_moe`](candle_transformers::models::quantized_qwen3_moe)) written by
/// [`write_random_qwen3moe_gguf`]: every block's MLP is a mixture of experts.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomQwen3MoeConfig {
    /// Vocabulary size (rows of `token_embd.weight` and `output.weight`).
    pub vocab_size: usize,
    /// Hidden size (`qwen3moe.embedding_length`).
    pub hidden_size: usize,
    /// Number of blocks (`qwen3moe.block_count`).
    pub num_layers: usize,
    /// Attention heads (`qwen3moe.attention.head_count`).
    pub num_heads: usize,
    /// Key/value heads (`qwen3moe.attention.head_count_kv`); must divide `num_heads`.
    pub num_kv_heads: usize,
    /// Size of one attention head (`qwen3moe.attention.key_length`); even.
    pub head_dim: usize,
    /// Experts per block (`qwen3moe.expert_count`).
    pub num_experts: usize,
    /// Experts each token uses (`qwen3moe.expert_used_count`), at most `num_experts`.
    pub experts_per_token: usize,
    /// Each expert's MLP size (`qwen3moe.expert_feed_forward_length`).
    pub expert_intermediate_size: usize,
    /// `qwen3moe.context_length`.
    pub context_length: usize,
    /// `qwen3moe.attention.layer_norm_rms_epsilon`.
    pub rms_norm_eps: f32,
    /// `qwen3moe.rope.freq_base`.
    pub rope_freq_base: f32,
}

impl RandomQwen3MoeConfig {
    /// A small model whose matrices all have rows of a multiple of 256 elements, so that every
    /// GGML type (k-quants included) applies: vocabulary 512, hidden 256, 2 blocks, 4 heads of
    /// 64 with 2 key/value heads, 8 experts of 256 with 2 used per token.
    pub fn tiny() -> Self {
        Self {
            vocab_size: 512,
            hidden_size: 256,
            num_layers: 2,
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 64,
            num_experts: 8,
            experts_per_token: 2,
            expert_intermediate_size: 256,
            context_length: 512,
            rms_norm_eps: 1e-6,
            rope_freq_base: 1_000_000.0,
        }
    }

    fn validate(&self) -> Result<()> {
        let c = self;
        if [
            c.vocab_size,
            c.hidden_size,
            c.num_layers,
            c.num_heads,
            c.num_kv_heads,
            c.head_dim,
            c.num_experts,
            c.experts_per_token,
            c.expert_intermediate_size,
            c.context_length,
        ]
        .contains(&0)
        {
            return Err(invalid(format!("random qwen3moe: zero dimension in {c:?}")));
        }
        if c.num_heads % c.num_kv_heads != 0 || c.head_dim % 2 != 0 {
            return Err(invalid(format!(
                "random qwen3moe: {} kv heads do not divide {} heads, or head size {} is odd",
                c.num_kv_heads, c.num_heads, c.head_dim
            )));
        }
        if c.experts_per_token > c.num_experts {
            return Err(invalid(format!(
                "random qwen3moe: {} experts per token of {}",
                c.experts_per_token, c.num_experts
            )));
        }
        Ok(())
    }

    /// Every tensor of the model: name and shape (candle order: experts, rows, then the row
    /// length), in the order they are written.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (h, v, d) = (self.hidden_size, self.vocab_size, self.head_dim);
        let (q, kv) = (self.num_heads * d, self.num_kv_heads * d);
        let (e, f) = (self.num_experts, self.expert_intermediate_size);
        let mut out = vec![("token_embd.weight".to_string(), vec![v, h])];
        for i in 0..self.num_layers {
            let p = format!("blk.{i}");
            out.push((format!("{p}.attn_norm.weight"), vec![h]));
            out.push((format!("{p}.attn_q.weight"), vec![q, h]));
            out.push((format!("{p}.attn_k.weight"), vec![kv, h]));
            out.push((format!("{p}.attn_v.weight"), vec![kv, h]));
            out.push((format!("{p}.attn_q_norm.weight"), vec![d]));
            out.push((format!("{p}.attn_k_norm.weight"), vec![d]));
            out.push((format!("{p}.attn_output.weight"), vec![h, q]));
            out.push((format!("{p}.ffn_norm.weight"), vec![h]));
            out.push((format!("{p}.ffn_gate_inp.weight"), vec![e, h]));
            out.push((format!("{p}.ffn_gate_exps.weight"), vec![e, f, h]));
            out.push((format!("{p}.ffn_up_exps.weight"), vec![e, f, h]));
            out.push((format!("{p}.ffn_down_exps.weight"), vec![e, h, f]));
        }
        out.push(("output_norm.weight".to_string(), vec![h]));
        out.push(("output.weight".to_string(), vec![v, h]));
        out
    }

    /// The metadata quantized_qwen3_moe reads, plus `general.name`, `qwen3moe.vocab_size` and
    /// `general.file_type` for `dtype`.
    pub fn metadata(&self, dtype: GgmlDType) -> Vec<(String, Value)> {
        let u = |x: usize| Value::U32(x as u32);
        let key = |k: &str| format!("qwen3moe.{k}");
        let mut md = vec![
            (
                "general.architecture".to_string(),
                Value::String("qwen3moe".into()),
            ),
            (
                "general.name".to_string(),
                Value::String("candle-rocm random qwen3moe".into()),
            ),
            (key("attention.head_count"), u(self.num_heads)),
            (key("attention.head_count_kv"), u(self.num_kv_heads)),
            (key("attention.key_length"), u(self.head_dim)),
            (key("attention.value_length"), u(self.head_dim)),
            (
                key("attention.layer_norm_rms_epsilon"),
                Value::F32(self.rms_norm_eps),
            ),
            (key("block_count"), u(self.num_layers)),
            (key("context_length"), u(self.context_length)),
            (key("embedding_length"), u(self.hidden_size)),
            (key("expert_count"), u(self.num_experts)),
            (key("expert_used_count"), u(self.experts_per_token)),
            (
                key("expert_feed_forward_length"),
                u(self.expert_intermediate_size),
            ),
            (key("rope.freq_base"), Value::F32(self.rope_freq_base)),
            (key("vocab_size"), u(self.vocab_size)),
        ];
        if let Some(ft) = llama_cpp_file_type(dtype) {
            md.push(("general.file_type".to_string(), Value::U32(ft)));
        }
        md
    }
}

/// Writes to `path` a qwen3moe-architecture GGUF file of `cfg` with seeded random weights:
/// every matrix (the experts' included) quantized to `dtype` on the CPU, the norm weights and
/// the router (`ffn_gate_inp`, kept in F32 as llama.cpp keeps it) in F32, with the metadata of
/// [`RandomQwen3MoeConfig::metadata`]. Weights are drawn as [`write_random_llama_gguf`] draws
/// them, in the order of [`RandomQwen3MoeConfig::tensor_shapes`]. Returns the file's size in
/// bytes.
pub fn write_random_qwen3moe_gguf(
    path: &Path,
    cfg: &RandomQwen3MoeConfig,
    dtype: GgmlDType,
    seed: u64,
) -> Result<u64> {
    cfg.validate()?;
    let tensors = random_tensors("random qwen3moe", &cfg.tensor_shapes(), dtype, seed)?;
    write_gguf(path, &cfg.metadata(dtype), &tensors)
}

/// Seeded random weights for `shapes`, in their order: the embedding from N(0, 1), vectors
/// (norms) from 1 + N(0, 0.1) and kept in F32, as is the MoE router; every other matrix from
/// N(0, 1/row length), quantized to `dtype` (an error where its rows do not fit the block).
fn random_tensors(
    what: &str,
    shapes: &[(String, Vec<usize>)],
    dtype: GgmlDType,
    seed: u64,
) -> Result<Vec<(String, QTensor)>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut tensors = Vec::new();
    for (name, shape) in shapes {
        let n: usize = shape.iter().product();
        let (mean, std) = if shape.len() == 1 {
            (1.0, 0.1)
        } else if name == "token_embd.weight" {
            (0.0, 1.0)
        } else {
            (0.0, 1.0 / (shape[shape.len() - 1] as f32).sqrt())
        };
        let normal = rand_distr::Normal::new(mean, std)
            .map_err(|e| invalid(format!("{what}: normal({mean}, {std}): {e}")))?;
        let data: Vec<f32> = (0..n).map(|_| normal.sample(&mut rng)).collect();
        let t = Tensor::from_vec(data, shape.as_slice(), &Device::Cpu)?;
        let q = if shape.len() == 1 || name.ends_with("ffn_gate_inp.weight") {
            QTensor::quantize(&t, GgmlDType::F32)?
        } else if can_quantize(shape, dtype) {
            QTensor::quantize(&t, dtype)?
        } else {
            return Err(invalid(format!(
                "{what}: {name} {shape:?} has rows of {} elements, not a multiple of the \
                 {dtype:?} block size {}",
                shape[shape.len() - 1],
                dtype.block_size()
            )));
        };
        tensors.push((name.clone(), q));
    }
    Ok(tensors)
}
