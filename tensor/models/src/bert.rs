//! Sentence embeddings with a BERT encoder: all-MiniLM-L6-v2 as sentence-transformers runs it.
//!
//! The pipeline is the model's `modules.json`: the BERT encoder, mean pooling over the attention
//! mask, then L2 normalisation. Text is tokenized with the model's `tokenizer.json` (lower-cased
//! WordPiece), padded to the longest sentence of the batch and truncated to the model's
//! `max_seq_length` (`sentence_bert_config.json`, 256 for all-MiniLM-L6-v2).
//!
//! The encoder stack is candle-transformers' [`BertEncoder`]; the embedding layer and the
//! additive attention mask are built here. That is deliberate: candle-transformers'
//! `BertModel::forward` builds the mask as `(1 - mask) * f32::MIN` in the model's dtype, and in
//! f16 `f32::MIN` rounds to `-inf`, so every kept position becomes `0 * -inf = NaN`. Here the
//! mask uses the dtype's finite minimum (as Hugging Face's `torch.finfo(dtype).min`), so f16
//! and bf16 work as well as f32. The weights are the same tensors under the same names.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor, D};
use candle_nn::{Embedding, LayerNorm, Module, VarBuilder};
use candle_transformers::models::bert::{BertEncoder, Config, PositionEmbeddingType};
use tokenizers::{
    PaddingDirection, PaddingParams, PaddingStrategy, Tokenizer, TruncationDirection,
    TruncationParams, TruncationStrategy,
};

use crate::error::{invalid, Error, Result};

/// The file names `SentenceEmbedder::load` reads from a model directory (besides the weights).
pub const CONFIG_FILE: &str = "config.json";
/// Tokenizer file (Hugging Face `tokenizers` JSON).
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// Optional sentence-transformers file giving `max_seq_length`.
pub const SENTENCE_CONFIG_FILE: &str = "sentence_bert_config.json";
/// The f32 weights as shipped.
pub const WEIGHTS_F32: &str = "model.safetensors";
/// The f16 copy written by `make_f16`.
pub const WEIGHTS_F16: &str = "model.f16.safetensors";

/// A BERT sentence-embedding model with its tokenizer, on one device, in one dtype.
pub struct SentenceEmbedder {
    word_embeddings: Embedding,
    position_embeddings: Embedding,
    token_type_embeddings: Embedding,
    embeddings_norm: LayerNorm,
    encoder: BertEncoder,
    tokenizer: Tokenizer,
    config: Config,
    max_seq_len: usize,
    dtype: DType,
    device: Device,
}

impl SentenceEmbedder {
    /// Loads `config.json`, `tokenizer.json` and the safetensors file `weights_file` from `dir`
    /// (plus `sentence_bert_config.json` when present) and puts the weights on `device` in
    /// `dtype` (F32, F16 or BF16; the file may hold any float dtype, it is converted on `device`).
    ///
    /// Tensor names may carry a `bert.` prefix or none (all-MiniLM-L6-v2 has none).
    pub fn load(dir: &Path, weights_file: &str, dtype: DType, device: &Device) -> Result<Self> {
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(invalid(format!(
                "SentenceEmbedder::load: dtype {dtype:?} is not supported (use f32, f16 or bf16)"
            )));
        }
        let config_path = dir.join(CONFIG_FILE);
        let config: Config = read_json(&config_path)?;
        validate_config(&config, &config_path)?;

        let sentence_config_path = dir.join(SENTENCE_CONFIG_FILE);
        let max_seq_len = if sentence_config_path.exists() {
            let value: serde_json::Value = read_json(&sentence_config_path)?;
            match value
                .get("max_seq_length")
                .and_then(serde_json::Value::as_u64)
            {
                Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
                None => config.max_position_embeddings,
            }
        } else {
            config.max_position_embeddings
        }
        .min(config.max_position_embeddings);
        if max_seq_len < 2 {
            return Err(invalid(format!(
                "{}: max_seq_length {max_seq_len} leaves no room for [CLS] and [SEP]",
                sentence_config_path.display()
            )));
        }

        let tokenizer = load_tokenizer(&dir.join(TOKENIZER_FILE), &config, max_seq_len)?;

        let weights_path = dir.join(weights_file);
        let bytes = std::fs::read(&weights_path).map_err(|source| Error::Io {
            path: weights_path.clone(),
            source,
        })?;
        let tensors =
            candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(|source| {
                Error::Load {
                    path: weights_path.clone(),
                    source,
                }
            })?;
        drop(bytes);
        let prefixed = tensors.contains_key("bert.embeddings.word_embeddings.weight");
        let vb = VarBuilder::from_tensors(tensors, dtype, device);
        let vb = if prefixed { vb.pp("bert") } else { vb };
        Self::from_var_builder(vb, config, tokenizer, max_seq_len, dtype, device).map_err(|e| {
            match e {
                Error::Candle(source) => Error::Load {
                    path: weights_path.clone(),
                    source,
                },
                other => other,
            }
        })
    }

    fn from_var_builder(
        vb: VarBuilder,
        config: Config,
        tokenizer: Tokenizer,
        max_seq_len: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let h = config.hidden_size;
        let emb = vb.pp("embeddings");
        let word_embeddings =
            candle_nn::embedding(config.vocab_size, h, emb.pp("word_embeddings"))?;
        let position_embeddings = candle_nn::embedding(
            config.max_position_embeddings,
            h,
            emb.pp("position_embeddings"),
        )?;
        let token_type_embeddings =
            candle_nn::embedding(config.type_vocab_size, h, emb.pp("token_type_embeddings"))?;
        let embeddings_norm = candle_nn::layer_norm(h, config.layer_norm_eps, emb.pp("LayerNorm"))?;
        let encoder = BertEncoder::load(vb.pp("encoder"), &config)?;
        Ok(Self {
            word_embeddings,
            position_embeddings,
            token_type_embeddings,
            embeddings_norm,
            encoder,
            tokenizer,
            config,
            max_seq_len,
            dtype,
            device: device.clone(),
        })
    }

    /// The model configuration (`config.json`).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Embedding width (384 for all-MiniLM-L6-v2).
    pub fn hidden_size(&self) -> usize {
        self.config.hidden_size
    }

    /// Longest token sequence (special tokens included) a sentence is truncated to.
    pub fn max_seq_len(&self) -> usize {
        self.max_seq_len
    }

    /// The dtype the weights and activations use.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Token ids of one sentence with `[CLS]`/`[SEP]`, truncated, not padded.
    pub fn token_ids(&self, sentence: &str) -> Result<Vec<u32>> {
        // Batch-longest padding leaves a single sentence as it is.
        let encoding =
            self.tokenizer
                .encode(sentence, true)
                .map_err(|source| Error::Tokenizer {
                    context: "encode".into(),
                    source,
                })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Tokenizes a batch: `(ids, attention_mask)`, both `u32 [n, longest]` on the model's device.
    pub fn tokenize(&self, sentences: &[&str]) -> Result<(Tensor, Tensor)> {
        if sentences.is_empty() {
            return Err(invalid("SentenceEmbedder::tokenize: no sentences"));
        }
        let encodings = self
            .tokenizer
            .encode_batch(sentences.to_vec(), true)
            .map_err(|source| Error::Tokenizer {
                context: "encode_batch".into(),
                source,
            })?;
        let len = encodings.first().map_or(0, |e| e.get_ids().len());
        let mut ids = Vec::with_capacity(sentences.len() * len);
        let mut mask = Vec::with_capacity(sentences.len() * len);
        for e in &encodings {
            if e.get_ids().len() != len {
                return Err(invalid(format!(
                    "tokenizer returned rows of {} and {len} tokens despite batch padding",
                    e.get_ids().len()
                )));
            }
            ids.extend_from_slice(e.get_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let shape = (sentences.len(), len);
        Ok((
            Tensor::from_vec(ids, shape, &self.device)?,
            Tensor::from_vec(mask, shape, &self.device)?,
        ))
    }

    /// Sentence embeddings: f32 `[n, hidden]`, unit L2 norm, on the model's device.
    pub fn embed(&self, sentences: &[&str]) -> Result<Tensor> {
        let (ids, mask) = self.tokenize(sentences)?;
        self.embed_batch_ids(&ids, &mask)
    }

    /// Embeddings of an already tokenized batch: `ids` (u32 or i64) and `mask` (any dtype,
    /// 1 = token, 0 = padding), both `[n, seq]` on the model's device, `seq <=`
    /// `max_position_embeddings`. Returns f32 `[n, hidden]` with unit L2 norm.
    pub fn embed_batch_ids(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let hidden = self.hidden_states(ids, mask)?;
        mean_pool_normalize(&hidden, mask)
    }

    /// The encoder's last hidden state `[n, seq, hidden]` in the model's dtype (inputs as for
    /// [`Self::embed_batch_ids`]).
    pub fn hidden_states(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (n, seq) = self.check_batch(ids, mask)?;
        let words = self.word_embeddings.forward(ids)?;
        // Single-segment input: token_type_ids are all 0, i.e. row 0 of the table for every token.
        let token_type = self.token_type_embeddings.embeddings().get(0)?;
        let positions = Tensor::arange(0u32, seq as u32, &self.device)?;
        let positions = self.position_embeddings.forward(&positions)?;
        let x = words
            .broadcast_add(&token_type)?
            .broadcast_add(&positions)?;
        let x = self.embeddings_norm.forward(&x)?;
        let additive = additive_attention_mask(mask, self.dtype)?.reshape((n, 1, 1, seq))?;
        Ok(self.encoder.forward(&x, &additive)?)
    }

    fn check_batch(&self, ids: &Tensor, mask: &Tensor) -> Result<(usize, usize)> {
        let (n, seq) = ids.dims2().map_err(|_| {
            invalid(format!(
                "embed_batch_ids: ids must be [batch, seq], got {:?}",
                ids.dims()
            ))
        })?;
        if mask.dims() != ids.dims() {
            return Err(invalid(format!(
                "embed_batch_ids: mask shape {:?} differs from ids shape {:?}",
                mask.dims(),
                ids.dims()
            )));
        }
        if n == 0 || seq == 0 {
            return Err(invalid("embed_batch_ids: empty batch"));
        }
        if seq > self.config.max_position_embeddings {
            return Err(invalid(format!(
                "embed_batch_ids: {seq} tokens exceed max_position_embeddings {}",
                self.config.max_position_embeddings
            )));
        }
        if !matches!(ids.dtype(), DType::U32 | DType::I64) {
            return Err(invalid(format!(
                "embed_batch_ids: ids must be u32 or i64, got {:?}",
                ids.dtype()
            )));
        }
        for (what, t) in [("ids", ids), ("mask", mask)] {
            if !t.device().same_device(&self.device) {
                return Err(invalid(format!(
                    "embed_batch_ids: {what} is on {:?}, the model on {:?}",
                    t.device().location(),
                    self.device.location()
                )));
            }
        }
        Ok((n, seq))
    }
}

/// `(1 - mask) * min(dtype)`, `[n, seq]` in `dtype`: 0 where `mask` is 1, the dtype's finite
/// minimum where it is 0 (computed in f32 so that kept positions are exactly 0).
pub fn additive_attention_mask(mask: &Tensor, dtype: DType) -> Result<Tensor> {
    let min = match dtype {
        DType::F16 => f64::from(half_f16_min()),
        _ => f64::from(f32::MIN),
    };
    // mask * (-min) + min: 1 -> exactly 0, 0 -> min.
    Ok(mask
        .to_dtype(DType::F32)?
        .affine(-min, min)?
        .to_dtype(dtype)?)
}

/// Smallest finite f16 (-65504), as f32.
fn half_f16_min() -> f32 {
    -65504.0
}

/// Mean of `hidden [n, seq, h]` over the positions where `mask [n, seq]` is nonzero, then
/// divided by its L2 norm (sentence-transformers' `Pooling(mean)` + `Normalize`, with the same
/// clamps: token count >= 1e-9, norm >= 1e-12). Returns f32 `[n, h]`.
pub fn mean_pool_normalize(hidden: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let hidden = hidden.to_dtype(DType::F32)?;
    let mask = mask.to_dtype(DType::F32)?.unsqueeze(D::Minus1)?;
    let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
    let counts = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?;
    let pooled = summed.broadcast_div(&counts)?;
    let norms = pooled
        .sqr()?
        .sum_keepdim(D::Minus1)?
        .sqrt()?
        .clamp(1e-12f32, f32::MAX)?;
    Ok(pooled.broadcast_div(&norms)?)
}

/// Cosine similarity of each row of `a` with the same row of `b` (both `[n, d]`, any float
/// dtype and device), computed on the host in f64. A zero row has similarity 0.
pub fn cosine_similarity_rows(a: &Tensor, b: &Tensor) -> Result<Vec<f32>> {
    if a.dims() != b.dims() || a.rank() != 2 {
        return Err(invalid(format!(
            "cosine_similarity_rows: need two [n, d] tensors of one shape, got {:?} and {:?}",
            a.dims(),
            b.dims()
        )));
    }
    let a = host_rows(a)?;
    let b = host_rows(b)?;
    Ok(a.iter().zip(&b).map(|(x, y)| cosine(x, y)).collect())
}

/// Cosine similarity of every row of `a` with every row of `b` (`[n, d]` and `[m, d]`):
/// an `n x m` matrix, computed on the host in f64.
pub fn cosine_similarity_matrix(a: &Tensor, b: &Tensor) -> Result<Vec<Vec<f32>>> {
    if a.rank() != 2 || b.rank() != 2 || a.dim(1)? != b.dim(1)? {
        return Err(invalid(format!(
            "cosine_similarity_matrix: need [n, d] and [m, d], got {:?} and {:?}",
            a.dims(),
            b.dims()
        )));
    }
    let a = host_rows(a)?;
    let b = host_rows(b)?;
    Ok(a.iter()
        .map(|x| b.iter().map(|y| cosine(x, y)).collect())
        .collect())
}

fn host_rows(t: &Tensor) -> Result<Vec<Vec<f64>>> {
    Ok(t.to_device(&Device::Cpu)?
        .to_dtype(DType::F64)?
        .to_vec2::<f64>()?)
}

fn cosine(x: &[f64], y: &[f64]) -> f32 {
    let dot: f64 = x.iter().zip(y).map(|(a, b)| a * b).sum();
    let nx = x.iter().map(|a| a * a).sum::<f64>().sqrt();
    let ny = y.iter().map(|a| a * a).sum::<f64>().sqrt();
    if nx == 0.0 || ny == 0.0 {
        0.0
    } else {
        (dot / (nx * ny)) as f32
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| Error::Json {
        path: path.to_path_buf(),
        source,
    })
}

fn validate_config(config: &Config, path: &Path) -> Result<()> {
    let bad = |msg: String| Err(invalid(format!("{}: {msg}", path.display())));
    if config.hidden_size == 0 || config.num_attention_heads == 0 {
        return bad("hidden_size and num_attention_heads must be positive".into());
    }
    if config.hidden_size % config.num_attention_heads != 0 {
        return bad(format!(
            "hidden_size {} is not a multiple of num_attention_heads {}",
            config.hidden_size, config.num_attention_heads
        ));
    }
    if config.type_vocab_size == 0 || config.max_position_embeddings == 0 {
        return bad("type_vocab_size and max_position_embeddings must be positive".into());
    }
    if config.position_embedding_type != PositionEmbeddingType::Absolute {
        return bad("only absolute position embeddings are supported".into());
    }
    Ok(())
}

fn load_tokenizer(path: &PathBuf, config: &Config, max_seq_len: usize) -> Result<Tokenizer> {
    let mut tokenizer = Tokenizer::from_file(path).map_err(|source| Error::Tokenizer {
        context: path.display().to_string(),
        source,
    })?;
    let vocab = tokenizer.get_vocab_size(true);
    if vocab > config.vocab_size {
        return Err(invalid(format!(
            "{}: {vocab} tokens do not fit the model's vocab_size {}",
            path.display(),
            config.vocab_size
        )));
    }
    let pad_token = "[PAD]".to_string();
    let pad_id = tokenizer
        .token_to_id(&pad_token)
        .unwrap_or(config.pad_token_id as u32);
    tokenizer.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::BatchLongest,
        direction: PaddingDirection::Right,
        pad_to_multiple_of: None,
        pad_id,
        pad_type_id: 0,
        pad_token,
    }));
    tokenizer
        .with_truncation(Some(TruncationParams {
            direction: TruncationDirection::Right,
            max_length: max_seq_len,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
        }))
        .map_err(|source| Error::Tokenizer {
            context: format!("{}: truncation to {max_seq_len}", path.display()),
            source,
        })?;
    Ok(tokenizer)
}

/// Token ids and mask for a synthetic benchmark batch: `batch` rows of `seq` tokens
/// (`[CLS]`=101, deterministic word-piece ids in 1000..29000, `[SEP]`=102), mask all ones.
/// Returned on `device` as u32 `[batch, seq]`.
pub fn synthetic_batch(batch: usize, seq: usize, device: &Device) -> Result<(Tensor, Tensor)> {
    if batch == 0 || seq < 2 {
        return Err(invalid(format!(
            "synthetic_batch: need batch >= 1 and seq >= 2, got {batch} x {seq}"
        )));
    }
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut ids = Vec::with_capacity(batch * seq);
    for _ in 0..batch {
        ids.push(101u32);
        for _ in 1..seq - 1 {
            // xorshift64: a fixed, dependency-free sequence of ids.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ids.push(1000 + (state % 28_000) as u32);
        }
        ids.push(102);
    }
    let mask = vec![1u32; batch * seq];
    Ok((
        Tensor::from_vec(ids, (batch, seq), device)?,
        Tensor::from_vec(mask, (batch, seq), device)?,
    ))
}
