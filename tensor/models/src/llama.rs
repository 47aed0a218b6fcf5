//! A llama-style decoder (candle-transformers' [`Llama`]) with seeded random weights, and greedy
//! decoding with and without the KV cache.
//!
//! No llama checkpoint is needed: [`random_weights`] generates every tensor of a [`Config`] on
//! the target device from a seed, in a fixed order of names ([`weight_shapes`]). The same
//! tensors copied to the CPU ([`weights_to_device`]) build a CPU reference model, so a GPU run
//! can be compared with the CPU token by token and logit by logit.
//!
//! Weight names are those candle-transformers' `llama.rs` (and Hugging Face's Llama) expect:
//! `model.embed_tokens.weight`, `model.layers.{i}.self_attn.{q,k,v,o}_proj.weight`,
//! `model.layers.{i}.mlp.{gate,up,down}_proj.weight`,
//! `model.layers.{i}.{input,post_attention}_layernorm.weight`, `model.norm.weight`, and
//! `lm_head.weight` unless the embeddings are tied.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::llama::{Cache, Config, Llama};
use rand::SeedableRng;
use rand_distr::Distribution;

use crate::error::{invalid, Result};

/// Standard deviation of the token embeddings (Llama's `initializer_range`).
pub const EMBEDDING_STD: f64 = 0.02;

/// A ~125M-parameter llama-style configuration: vocab 32000, hidden 768, 12 layers, 12 query
/// heads, 4 key/value heads (grouped-query attention), SwiGLU width 2048, untied `lm_head`,
/// 1024 positions.
pub fn config_125m() -> Config {
    Config {
        hidden_size: 768,
        intermediate_size: 2048,
        vocab_size: 32000,
        num_hidden_layers: 12,
        num_attention_heads: 12,
        num_key_value_heads: 4,
        use_flash_attn: false,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        bos_token_id: Some(1),
        eos_token_id: None,
        rope_scaling: None,
        max_position_embeddings: 1024,
        tie_word_embeddings: false,
    }
}

/// A tiny configuration for fast tests (vocab 512, hidden 64, 2 layers, 4 heads, 2 kv heads).
pub fn config_tiny() -> Config {
    Config {
        hidden_size: 64,
        intermediate_size: 160,
        vocab_size: 512,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        use_flash_attn: false,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        bos_token_id: Some(1),
        eos_token_id: None,
        rope_scaling: None,
        max_position_embeddings: 128,
        tie_word_embeddings: false,
    }
}

/// How one weight is initialised.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// All ones (RMSNorm scales).
    Ones,
    /// Normal with mean 0 and this standard deviation.
    Normal(f64),
}

/// One weight of a configuration: name, shape, initialisation.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightSpec {
    /// Tensor name as candle-transformers' llama.rs loads it.
    pub name: String,
    /// Shape (`[out, in]` for linear layers).
    pub shape: Vec<usize>,
    /// Initialisation used by [`random_weights`].
    pub init: Init,
}

/// Checks that `cfg` describes a model candle-transformers' [`Llama`] can run without panicking.
pub fn validate_config(cfg: &Config) -> Result<()> {
    let fields = [
        ("hidden_size", cfg.hidden_size),
        ("intermediate_size", cfg.intermediate_size),
        ("vocab_size", cfg.vocab_size),
        ("num_hidden_layers", cfg.num_hidden_layers),
        ("num_attention_heads", cfg.num_attention_heads),
        ("num_key_value_heads", cfg.num_key_value_heads),
        ("max_position_embeddings", cfg.max_position_embeddings),
    ];
    if let Some((name, _)) = fields.iter().find(|(_, v)| *v == 0) {
        return Err(invalid(format!("llama config: {name} must be positive")));
    }
    if cfg.hidden_size % cfg.num_attention_heads != 0 {
        return Err(invalid(format!(
            "llama config: hidden_size {} is not a multiple of num_attention_heads {}",
            cfg.hidden_size, cfg.num_attention_heads
        )));
    }
    if cfg.num_attention_heads % cfg.num_key_value_heads != 0 {
        return Err(invalid(format!(
            "llama config: num_attention_heads {} is not a multiple of num_key_value_heads {}",
            cfg.num_attention_heads, cfg.num_key_value_heads
        )));
    }
    if (cfg.hidden_size / cfg.num_attention_heads) % 2 != 0 {
        return Err(invalid(format!(
            "llama config: head dim {} must be even for rotary embeddings",
            cfg.hidden_size / cfg.num_attention_heads
        )));
    }
    Ok(())
}

/// `use_flash_attn` runs candle-transformers' attention through candle-nn's `sdpa` (our Candle
/// patch), i.e. candle-rocm's fused attention: a ROCm device and a head dim it has kernels for.
fn check_flash_attn(cfg: &Config, device: &Device) -> Result<()> {
    if !cfg.use_flash_attn {
        return Ok(());
    }
    use candle_rocm::RocmDeviceExt;
    let head_dim = cfg.hidden_size / cfg.num_attention_heads;
    if !device.is_rocm() {
        return Err(invalid(format!(
            "llama config: use_flash_attn needs fused attention, which runs on ROCm devices \
             (candle_rocm::flash_attn), not on {:?}; set it to false",
            device.location()
        )));
    }
    if !candle_rocm::attention::HEAD_DIMS.contains(&head_dim) {
        return Err(invalid(format!(
            "llama config: use_flash_attn: head dim {head_dim} has no fused kernel (supported: {:?})",
            candle_rocm::attention::HEAD_DIMS
        )));
    }
    Ok(())
}

/// Every weight of `cfg` in a fixed order (embeddings, then each layer, then final norm and
/// `lm_head`), with its shape and initialisation: linear weights `N(0, 1/sqrt(fan_in))`,
/// embeddings `N(0, 0.02)`, norms ones.
pub fn weight_shapes(cfg: &Config) -> Result<Vec<WeightSpec>> {
    validate_config(cfg)?;
    let h = cfg.hidden_size;
    let kv = (h / cfg.num_attention_heads) * cfg.num_key_value_heads;
    let i = cfg.intermediate_size;
    let spec = |name: String, shape: Vec<usize>, init: Init| WeightSpec { name, shape, init };
    let linear = |name: String, out: usize, inp: usize| {
        spec(
            name,
            vec![out, inp],
            Init::Normal(1.0 / (inp as f64).sqrt()),
        )
    };
    let mut specs = vec![spec(
        "model.embed_tokens.weight".into(),
        vec![cfg.vocab_size, h],
        Init::Normal(EMBEDDING_STD),
    )];
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        specs.push(linear(format!("{p}.self_attn.q_proj.weight"), h, h));
        specs.push(linear(format!("{p}.self_attn.k_proj.weight"), kv, h));
        specs.push(linear(format!("{p}.self_attn.v_proj.weight"), kv, h));
        specs.push(linear(format!("{p}.self_attn.o_proj.weight"), h, h));
        specs.push(linear(format!("{p}.mlp.gate_proj.weight"), i, h));
        specs.push(linear(format!("{p}.mlp.up_proj.weight"), i, h));
        specs.push(linear(format!("{p}.mlp.down_proj.weight"), h, i));
        specs.push(spec(
            format!("{p}.input_layernorm.weight"),
            vec![h],
            Init::Ones,
        ));
        specs.push(spec(
            format!("{p}.post_attention_layernorm.weight"),
            vec![h],
            Init::Ones,
        ));
    }
    specs.push(spec("model.norm.weight".into(), vec![h], Init::Ones));
    if !cfg.tie_word_embeddings {
        specs.push(linear("lm_head.weight".into(), cfg.vocab_size, h));
    }
    Ok(specs)
}

/// Number of parameters of `cfg` (a tied `lm_head` is counted once).
pub fn param_count(cfg: &Config) -> Result<usize> {
    Ok(weight_shapes(cfg)?
        .iter()
        .map(|s| s.shape.iter().product::<usize>())
        .sum())
}

/// Generates every weight of `cfg` as f32 on `device`, in the order of [`weight_shapes`].
///
/// On an accelerator the device's generator is seeded (`device.set_seed(seed)`) and each tensor
/// drawn with `Tensor::randn` on the device; candle's CPU generator cannot be seeded, so on the
/// CPU a seeded `StdRng` is used. The same seed therefore gives the same weights on the same
/// kind of device, not across kinds: to compare a device with the CPU, copy the device's
/// weights to the CPU with [`weights_to_device`].
pub fn random_weights(cfg: &Config, device: &Device, seed: u64) -> Result<HashMap<String, Tensor>> {
    let specs = weight_shapes(cfg)?;
    let mut out = HashMap::with_capacity(specs.len());
    match device {
        Device::Cpu => {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            for s in specs {
                let t = match s.init {
                    Init::Ones => Tensor::ones(s.shape.as_slice(), DType::F32, device)?,
                    Init::Normal(std) => {
                        let normal = rand_distr::Normal::new(0f32, std as f32).map_err(|e| {
                            invalid(format!("normal distribution with std {std}: {e}"))
                        })?;
                        let n = s.shape.iter().product::<usize>();
                        let data: Vec<f32> = (0..n).map(|_| normal.sample(&mut rng)).collect();
                        Tensor::from_vec(data, s.shape.as_slice(), device)?
                    }
                };
                out.insert(s.name, t);
            }
        }
        _ => {
            device.set_seed(seed)?;
            for s in specs {
                let t = match s.init {
                    Init::Ones => Tensor::ones(s.shape.as_slice(), DType::F32, device)?,
                    Init::Normal(std) => {
                        Tensor::randn(0f32, std as f32, s.shape.as_slice(), device)?
                    }
                };
                out.insert(s.name, t);
            }
        }
    }
    Ok(out)
}

/// Copies every tensor of `weights` to `device` (e.g. a GPU model's weights to the CPU for a
/// reference run).
pub fn weights_to_device(
    weights: &HashMap<String, Tensor>,
    device: &Device,
) -> Result<HashMap<String, Tensor>> {
    weights
        .iter()
        .map(|(k, t)| Ok((k.clone(), t.to_device(device)?)))
        .collect()
}

/// A built llama model with its configuration, dtype and device.
#[derive(Debug, Clone)]
pub struct LlamaModel {
    model: Llama,
    config: Config,
    dtype: DType,
    device: Device,
}

impl LlamaModel {
    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The dtype of weights and activations (attention scores are computed in f32).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Logits (f32 `[batch, vocab]`) of the last position of `tokens` (`u32 [batch, seq]`)
    /// placed at positions `index_pos..`, updating `cache` (candle-transformers' semantics).
    pub fn forward(&self, tokens: &Tensor, index_pos: usize, cache: &mut Cache) -> Result<Tensor> {
        Ok(self.model.forward(tokens, index_pos, cache)?)
    }

    /// A fresh cache for this model (`use_kv_cache` selects whether keys/values are kept).
    pub fn new_cache(&self, use_kv_cache: bool) -> Result<Cache> {
        Ok(Cache::new(
            use_kv_cache,
            self.dtype,
            &self.config,
            &self.device,
        )?)
    }
}

/// Builds the model of `cfg` from `weights` (as [`random_weights`] makes, on any device, any
/// float dtype) in `dtype` on `device`.
///
/// Every expected tensor is checked (present, right shape) and converted to `device`/`dtype`
/// before candle-transformers' `Llama::load` sees it, since that function panics (`unwrap`)
/// when a layer fails to load.
pub fn build(
    cfg: &Config,
    weights: &HashMap<String, Tensor>,
    dtype: DType,
    device: &Device,
) -> Result<LlamaModel> {
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(invalid(format!(
            "llama::build: dtype {dtype:?} is not supported (use f32, f16 or bf16)"
        )));
    }
    check_flash_attn(cfg, device)?;
    let specs = weight_shapes(cfg)?;
    let mut converted = HashMap::with_capacity(specs.len());
    for s in &specs {
        let t = weights
            .get(&s.name)
            .ok_or_else(|| invalid(format!("llama::build: missing weight {}", s.name)))?;
        if t.dims() != s.shape.as_slice() {
            return Err(invalid(format!(
                "llama::build: {} has shape {:?}, the config needs {:?}",
                s.name,
                t.dims(),
                s.shape
            )));
        }
        if !t.dtype().is_float() {
            return Err(invalid(format!(
                "llama::build: {} has non-float dtype {:?}",
                s.name,
                t.dtype()
            )));
        }
        converted.insert(s.name.clone(), t.to_device(device)?.to_dtype(dtype)?);
    }
    let vb = VarBuilder::from_tensors(converted, dtype, device);
    let model = Llama::load(vb, cfg)?;
    Ok(LlamaModel {
        model,
        config: cfg.clone(),
        dtype,
        device: device.clone(),
    })
}

/// The result of a greedy decode with its timings.
#[derive(Debug, Clone)]
pub struct Generation {
    /// The generated tokens (the prompt excluded).
    pub tokens: Vec<u32>,
    /// For each generated token, the logits it was chosen from: f32 `[vocab]` on the CPU.
    pub logits: Vec<Tensor>,
    /// Time of the first step (the prompt's forward pass, logits copied to the host).
    pub prefill: Duration,
    /// Time of the remaining steps (one token each).
    pub decode: Duration,
}

impl Generation {
    /// Tokens per second of the one-token steps (0 when there were none).
    pub fn decode_tokens_per_sec(&self) -> f64 {
        decode_tokens_per_sec(self.tokens.len(), self.decode)
    }
}

/// The largest absolute difference between two generations' logits, step by step (steps past
/// the shorter one are ignored): how far apart two ways of running the same model drift.
pub fn largest_logit_difference(a: &[Tensor], b: &[Tensor]) -> Result<f32> {
    let mut worst = 0f32;
    for (x, y) in a.iter().zip(b) {
        let d = (x - y)?
            .abs()?
            .max_all()?
            .to_dtype(DType::F32)?
            .to_scalar::<f32>()?;
        worst = worst.max(d);
    }
    Ok(worst)
}

/// Tokens per second of the one-token steps of a generation of `tokens` tokens whose steps after
/// the first took `decode` (0 when there were none).
pub fn decode_tokens_per_sec(tokens: usize, decode: Duration) -> f64 {
    let steps = tokens.saturating_sub(1);
    let secs = decode.as_secs_f64();
    if steps == 0 || secs == 0.0 {
        0.0
    } else {
        steps as f64 / secs
    }
}

/// Greedy decoding of `steps` tokens after `prompt` with the KV cache: one forward pass over
/// the prompt (the prefill, which yields the first token), then one pass per further token at
/// `index_pos` = the number of tokens already seen, as in candle's llama example.
///
/// Returns the generated tokens and, for each, its logits (f32 `[vocab]` on the CPU). The argmax
/// is taken on the host (first index on ties); non-finite logits are an error.
pub fn greedy_decode(
    model: &LlamaModel,
    prompt_ids: &[u32],
    steps: usize,
) -> Result<(Vec<u32>, Vec<Tensor>)> {
    let g = generate(model, prompt_ids, steps, true)?;
    Ok((g.tokens, g.logits))
}

/// The reference for [`greedy_decode`]: every step recomputes the whole sequence from position
/// 0 without a KV cache.
pub fn greedy_decode_no_cache(
    model: &LlamaModel,
    prompt_ids: &[u32],
    steps: usize,
) -> Result<(Vec<u32>, Vec<Tensor>)> {
    let g = generate(model, prompt_ids, steps, false)?;
    Ok((g.tokens, g.logits))
}

/// Greedy decoding as [`greedy_decode`] (`use_kv_cache = true`) or
/// [`greedy_decode_no_cache`], with timings.
pub fn generate(
    model: &LlamaModel,
    prompt_ids: &[u32],
    steps: usize,
    use_kv_cache: bool,
) -> Result<Generation> {
    let cfg = &model.config;
    if prompt_ids.is_empty() {
        return Err(invalid("greedy decode: empty prompt"));
    }
    if let Some(bad) = prompt_ids.iter().find(|&&t| t as usize >= cfg.vocab_size) {
        return Err(invalid(format!(
            "greedy decode: prompt token {bad} is outside the vocabulary of {}",
            cfg.vocab_size
        )));
    }
    let positions = prompt_ids.len() + steps.saturating_sub(1);
    if positions > cfg.max_position_embeddings {
        return Err(invalid(format!(
            "greedy decode: {} prompt tokens + {steps} steps need {positions} positions, the model has {}",
            prompt_ids.len(),
            cfg.max_position_embeddings
        )));
    }
    let mut cache = model.new_cache(use_kv_cache)?;
    let mut all = prompt_ids.to_vec();
    let mut tokens = Vec::with_capacity(steps);
    let mut logits = Vec::with_capacity(steps);
    let mut index_pos = 0;
    let mut prefill = Duration::ZERO;
    let start = Instant::now();
    for step in 0..steps {
        // With the cache: the prompt once, then only the newest token at its position.
        // Without: the whole sequence from position 0 every time.
        let (ctx, pos) = if use_kv_cache && step > 0 {
            (&all[all.len() - 1..], index_pos)
        } else {
            (&all[..], 0)
        };
        let input = Tensor::new(ctx, &model.device)?.unsqueeze(0)?;
        let out = model.model.forward(&input, pos, &mut cache)?;
        index_pos += ctx.len();
        let row = out.squeeze(0)?.to_device(&Device::Cpu)?;
        let next = host_argmax(&row, step, "greedy decode")?;
        all.push(next);
        tokens.push(next);
        logits.push(row);
        if step == 0 {
            prefill = start.elapsed();
        }
    }
    let decode = start.elapsed().saturating_sub(prefill);
    Ok(Generation {
        tokens,
        logits,
        prefill,
        decode,
    })
}

/// The index of the largest logit of `row` (any shape, flattened; first on ties); non-finite
/// logits are an error naming `what` and the step.
pub(crate) fn host_argmax(row: &Tensor, step: usize, what: &str) -> Result<u32> {
    let v = row.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    let mut best: Option<(usize, f32)> = None;
    for (i, &x) in v.iter().enumerate() {
        if !x.is_finite() {
            return Err(invalid(format!("{what}: logit {i} at step {step} is {x}")));
        }
        if best.is_none_or(|(_, b)| x > b) {
            best = Some((i, x));
        }
    }
    let (i, _) = best.ok_or_else(|| invalid(format!("{what}: empty logits")))?;
    u32::try_from(i).map_err(|_| invalid(format!("{what}: token index {i} exceeds u32")))
}
