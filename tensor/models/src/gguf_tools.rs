//! Quantized GGUF language models: file tooling on the CPU and greedy generation on any device.
//!
//! - [`requantize`]: dequantize every weight matrix of a GGUF file and quantize it again to
//!   another [`GgmlDType`] with candle's CPU quantizer (norms and matrices whose rows do not
//!   fit the type's block size are kept as they are).
//! - [`truncate_layers`]: keep the first `n` transformer blocks of a model.
//! - [`write_random_llama_gguf`] and [`write_random_qwen3moe_gguf`] (from [`crate::random_gguf`]):
//!   small GGUF models with seeded random weights, for tests that must not depend on a download.
//! - [`load_quantized_llama`] and [`greedy_generate`]: candle-transformers'
//!   [`quantized_llama`](candle_transformers::models::quantized_llama) model on a device and
//!   argmax decoding with its KV cache.
//! - [`tokenizer_from_gguf_metadata`]: the byte-level BPE tokenizer that GPT-2-style GGUF files
//!   (SmolLM2 among them) carry in their metadata, as a `tokenizers` [`Tokenizer`].
//!
//! The real model used end to end is SmolLM2-135M-Instruct in Q4_1, fetched by
//! `scripts/fetch-smollm2.sh` (see [`smollm2_gguf`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Content, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use candle_transformers::models::quantized_llama::{ModelWeights, MAX_SEQ_LEN};
use candle_transformers::models::quantized_qwen3_moe::GGUFQWenMoE;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, PreTokenizerWrapper, Tokenizer};

use crate::error::{invalid, Error, Result};
pub use crate::random_gguf::{
    write_random_llama_gguf, write_random_qwen3moe_gguf, RandomLlamaConfig, RandomQwen3MoeConfig,
};

/// Environment variable naming the SmolLM2-135M-Instruct directory for tests and examples.
pub const SMOLLM2_DIR_ENV: &str = "CANDLE_ROCM_SMOLLM2_DIR";

/// The GGUF file that `scripts/fetch-smollm2.sh` puts in the SmolLM2 directory.
pub const SMOLLM2_GGUF_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The SmolLM2-135M-Instruct GGUF: [`SMOLLM2_GGUF_FILE`] in `$CANDLE_ROCM_SMOLLM2_DIR`, else in
/// `$HOME/.cache/candle-rocm/smollm2-135m-instruct` (where `scripts/fetch-smollm2.sh` puts it),
/// if that file exists.
pub fn smollm2_gguf() -> Option<PathBuf> {
    let dir = match std::env::var_os(SMOLLM2_DIR_ENV) {
        Some(d) => PathBuf::from(d),
        None => default_smollm2_dir()?,
    };
    let file = dir.join(SMOLLM2_GGUF_FILE);
    file.is_file().then_some(file)
}

/// `$HOME/.cache/candle-rocm/smollm2-135m-instruct`, the default of `scripts/fetch-smollm2.sh`.
pub fn default_smollm2_dir() -> Option<PathBuf> {
    Some(PathBuf::from(std::env::var_os("HOME")?).join(".cache/candle-rocm/smollm2-135m-instruct"))
}

// ------------------------------------------------------------------------------------------
// Reading and writing GGUF files.

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { path, source }
}

fn load_err(path: &Path) -> impl FnOnce(candle_core::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Load { path, source }
}

fn open_gguf(path: &Path) -> Result<(Content, BufReader<File>)> {
    let file = File::open(path).map_err(io_err(path))?;
    let mut reader = BufReader::new(file);
    let content = Content::read(&mut reader).map_err(load_err(path))?;
    Ok((content, reader))
}

/// GGUF metadata: key to value.
pub type GgufMetadata = HashMap<String, Value>;

/// A tensor of a GGUF file with its name.
pub type NamedQTensor = (String, QTensor);

/// Reads the header of the GGUF file `path`: its metadata and tensor descriptions (no tensor
/// data).
pub fn read_gguf(path: &Path) -> Result<Content> {
    Ok(open_gguf(path)?.0)
}

/// Reads the GGUF file `path` completely: its metadata and every tensor on the CPU, in the
/// order of the tensors' data in the file.
pub fn read_gguf_tensors(path: &Path) -> Result<(GgufMetadata, Vec<NamedQTensor>)> {
    let (content, mut reader) = open_gguf(path)?;
    let mut names: Vec<(&String, u64)> = content
        .tensor_infos
        .iter()
        .map(|(name, info)| (name, info.offset))
        .collect();
    names.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    let mut tensors = Vec::with_capacity(names.len());
    for (name, _) in names {
        let t = content
            .tensor(&mut reader, name, &Device::Cpu)
            .map_err(load_err(path))?;
        tensors.push((name.clone(), t));
    }
    Ok((content.metadata, tensors))
}

/// The metadata of `metadata` in the order they are written: `general.architecture` first,
/// then by key. `general.alignment` is dropped: candle's writer always aligns to 32 bytes,
/// the GGUF default.
pub fn ordered_metadata(metadata: HashMap<String, Value>) -> Vec<(String, Value)> {
    let mut md: Vec<(String, Value)> = metadata
        .into_iter()
        .filter(|(k, _)| k != "general.alignment")
        .collect();
    md.sort_by(|a, b| {
        let first = |k: &str| k != "general.architecture";
        first(&a.0).cmp(&first(&b.0)).then_with(|| a.0.cmp(&b.0))
    });
    md
}

/// Writes a GGUF file (version 2, candle's writer) with `metadata` and `tensors` in the given
/// orders. The file is written next to `dst` under a temporary name and renamed into place.
/// Returns the size of the written file in bytes.
pub fn write_gguf(
    dst: &Path,
    metadata: &[(String, Value)],
    tensors: &[(String, QTensor)],
) -> Result<u64> {
    let file_name = dst
        .file_name()
        .ok_or_else(|| invalid(format!("write_gguf: {} is not a file path", dst.display())))?;
    let tmp = dst.with_file_name(format!(
        ".{}.tmp{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> Result<u64> {
        let file = File::create(&tmp).map_err(io_err(&tmp))?;
        let mut w = BufWriter::new(file);
        let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
        gguf_file::write(&mut w, &md, &ts).map_err(load_err(dst))?;
        let file = w.into_inner().map_err(|e| Error::Io {
            path: tmp.clone(),
            source: e.into_error(),
        })?;
        file.sync_all().map_err(io_err(&tmp))?;
        let len = file.metadata().map_err(io_err(&tmp))?.len();
        drop(file);
        std::fs::rename(&tmp, dst).map_err(io_err(dst))?;
        Ok(len)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn file_len(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path).map_err(io_err(path))?.len())
}

fn check_distinct(what: &str, src: &Path, dst: &Path) -> Result<()> {
    if src == dst {
        return Err(invalid(format!(
            "{what}: source and destination are both {}",
            src.display()
        )));
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Requantization.

/// Parses a GGML type name, case-insensitively: `f32`, `f16`, `bf16`, `q4_0`, `q4_1`, `q5_0`,
/// `q5_1`, `q8_0`, `q8_1`, `q2k`, `q3k`, `q4k`, `q5k`, `q6k`, `q8k` (the k-quants also as
/// `q4_k` etc.).
pub fn parse_ggml_dtype(name: &str) -> Result<GgmlDType> {
    let n = name.trim().to_ascii_lowercase().replace("_k", "k");
    Ok(match n.as_str() {
        "f32" => GgmlDType::F32,
        "f16" => GgmlDType::F16,
        "bf16" => GgmlDType::BF16,
        "q4_0" => GgmlDType::Q4_0,
        "q4_1" => GgmlDType::Q4_1,
        "q5_0" => GgmlDType::Q5_0,
        "q5_1" => GgmlDType::Q5_1,
        "q8_0" => GgmlDType::Q8_0,
        "q8_1" => GgmlDType::Q8_1,
        "q2k" => GgmlDType::Q2K,
        "q3k" => GgmlDType::Q3K,
        "q4k" => GgmlDType::Q4K,
        "q5k" => GgmlDType::Q5K,
        "q6k" => GgmlDType::Q6K,
        "q8k" => GgmlDType::Q8K,
        _ => {
            return Err(invalid(format!(
                "unknown GGML type {name:?} (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, \
                 q2k, q3k, q4k, q5k, q6k, q8k)"
            )))
        }
    })
}

/// llama.cpp's `general.file_type` for a file whose weight matrices are mostly `dtype` (the
/// "_S" variant for k-quants), or `None` where llama.cpp has no such file type.
pub fn llama_cpp_file_type(dtype: GgmlDType) -> Option<u32> {
    Some(match dtype {
        GgmlDType::F32 => 0,
        GgmlDType::F16 => 1,
        GgmlDType::Q4_0 => 2,
        GgmlDType::Q4_1 => 3,
        GgmlDType::Q8_0 => 7,
        GgmlDType::Q5_0 => 8,
        GgmlDType::Q5_1 => 9,
        GgmlDType::Q2K => 10,
        GgmlDType::Q3K => 11,
        GgmlDType::Q4K => 14,
        GgmlDType::Q5K => 16,
        GgmlDType::Q6K => 18,
        GgmlDType::BF16 => 32,
        GgmlDType::Q8_1 | GgmlDType::Q8K => return None,
    })
}

/// Whether [`requantize`] converts a tensor of shape `dims` to `dtype`: a matrix (rank 2 or
/// more) whose last dimension is a multiple of the type's block size.
pub fn can_quantize(dims: &[usize], dtype: GgmlDType) -> bool {
    dims.len() >= 2 && dims[dims.len() - 1] % dtype.block_size() == 0
}

/// What [`requantize`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequantizeSummary {
    /// Tensors written (all of the source's).
    pub tensors: usize,
    /// Tensors dequantized and quantized to the target type.
    pub requantized: usize,
    /// Tensors written unchanged, with their type: vectors (norms), matrices whose last
    /// dimension is not a multiple of the target's block size, and tensors already of the
    /// target type.
    pub kept: Vec<(String, GgmlDType)>,
    /// Size of the source file in bytes.
    pub bytes_in: u64,
    /// Size of the written file in bytes.
    pub bytes_out: u64,
}

/// Reads the GGUF file `src`, converts every weight matrix to `dtype` and writes the result to
/// `dst`, all on the CPU.
///
/// Each matrix (rank >= 2) whose last dimension is a multiple of `dtype`'s block size and whose
/// type is not already `dtype` is dequantized to f32 and quantized with
/// [`QTensor::quantize`]. Vectors (norm weights), matrices that do not fit the block size
/// (e.g. rows of 576 for the 256-element k-quant blocks) and tensors already of type `dtype`
/// are copied unchanged. All metadata are copied; `general.file_type` is set to llama.cpp's
/// value for `dtype` (removed where it has none).
pub fn requantize(src: &Path, dst: &Path, dtype: GgmlDType) -> Result<RequantizeSummary> {
    check_distinct("requantize", src, dst)?;
    let bytes_in = file_len(src)?;
    let (mut metadata, tensors) = read_gguf_tensors(src)?;
    let mut requantized = 0;
    let mut kept = Vec::new();
    let mut out = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        if t.dtype() != dtype && can_quantize(t.shape().dims(), dtype) {
            let f = t.dequantize(&Device::Cpu)?;
            let q = QTensor::quantize(&f, dtype).map_err(load_err(src))?;
            requantized += 1;
            out.push((name, q));
        } else {
            kept.push((name.clone(), t.dtype()));
            out.push((name, t));
        }
    }
    match llama_cpp_file_type(dtype) {
        Some(ft) => {
            metadata.insert("general.file_type".to_string(), Value::U32(ft));
        }
        None => {
            metadata.remove("general.file_type");
        }
    }
    let tensors = out.len();
    let bytes_out = write_gguf(dst, &ordered_metadata(metadata), &out)?;
    Ok(RequantizeSummary {
        tensors,
        requantized,
        kept,
        bytes_in,
        bytes_out,
    })
}

// ------------------------------------------------------------------------------------------
// Layer truncation.

/// What [`truncate_layers`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruncateSummary {
    /// `{arch}.block_count` of the source.
    pub layers_in: usize,
    /// `{arch}.block_count` of the result.
    pub layers_out: usize,
    /// Tensors in the source.
    pub tensors_in: usize,
    /// Tensors written.
    pub tensors_out: usize,
    /// Size of the written file in bytes.
    pub bytes_out: u64,
}

/// The block index of a tensor named `blk.{i}.…`, if it is one.
pub fn block_index(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("blk.")?;
    let (idx, _) = rest.split_once('.')?;
    idx.parse().ok()
}

fn architecture(metadata: &HashMap<String, Value>) -> Result<String> {
    metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .ok_or_else(|| invalid("GGUF metadata lack general.architecture"))
}

/// Writes to `dst` the model of the GGUF file `src` with only its first `n_layers` blocks: the
/// tensors `blk.{i}.*` with `i < n_layers` and every tensor outside the blocks (embedding,
/// final norm, output), unchanged, with `{arch}.block_count` (`llama.block_count` for llama
/// models) set to `n_layers` and all other metadata copied.
pub fn truncate_layers(src: &Path, dst: &Path, n_layers: usize) -> Result<TruncateSummary> {
    check_distinct("truncate_layers", src, dst)?;
    let (mut metadata, tensors) = read_gguf_tensors(src)?;
    let arch = architecture(&metadata)?;
    let key = format!("{arch}.block_count");
    let layers_in = metadata
        .get(&key)
        .ok_or_else(|| invalid(format!("truncate_layers: {} has no {key}", src.display())))?
        .to_u32()
        .map_err(load_err(src))? as usize;
    if n_layers == 0 || n_layers > layers_in {
        return Err(invalid(format!(
            "truncate_layers: cannot keep {n_layers} of the {layers_in} blocks of {}",
            src.display()
        )));
    }
    let n_out = u32::try_from(n_layers)
        .map_err(|_| invalid(format!("truncate_layers: {n_layers} blocks do not fit u32")))?;
    metadata.insert(key, Value::U32(n_out));
    let tensors_in = tensors.len();
    let kept: Vec<(String, QTensor)> = tensors
        .into_iter()
        .filter(|(name, _)| block_index(name).is_none_or(|i| i < n_layers))
        .collect();
    let tensors_out = kept.len();
    let bytes_out = write_gguf(dst, &ordered_metadata(metadata), &kept)?;
    Ok(TruncateSummary {
        layers_in,
        layers_out: n_layers,
        tensors_in,
        tensors_out,
        bytes_out,
    })
}

// ------------------------------------------------------------------------------------------
// The model and greedy generation.

/// Loads a llama-architecture GGUF file as candle-transformers' quantized llama
/// ([`ModelWeights::from_gguf`]) with its weights on `device`.
pub fn load_quantized_llama(path: &Path, device: &Device) -> Result<ModelWeights> {
    let (content, mut reader) = open_gguf(path)?;
    ModelWeights::from_gguf(content, &mut reader, device).map_err(load_err(path))
}

/// Loads a qwen3moe-architecture GGUF file as candle-transformers' quantized qwen3 MoE
/// ([`GGUFQWenMoE::from_gguf`]) with its weights on `device`, computing attention in `dtype`.
pub fn load_quantized_qwen3_moe(path: &Path, device: &Device, dtype: DType) -> Result<GGUFQWenMoE> {
    let (content, mut reader) = open_gguf(path)?;
    GGUFQWenMoE::from_gguf(content, &mut reader, device, dtype).map_err(load_err(path))
}

/// Greedy (argmax) generation of `n_new` tokens after `prompt_tokens`: the whole prompt in one
/// forward pass at position 0 (which also clears the model's KV cache), then each new token
/// alone at `index_pos` = the number of tokens before it. Returns the new tokens.
pub fn greedy_generate(
    model: &mut ModelWeights,
    prompt_tokens: &[u32],
    n_new: usize,
    device: &Device,
) -> Result<Vec<u32>> {
    greedy_generate_with(model, prompt_tokens, n_new, device, |_| true)
}

/// [`greedy_generate`] calling `on_token` with each new token as soon as it is known; when
/// `on_token` returns `false` (e.g. for an end-of-sequence token) generation stops after that
/// token, which is included in the result.
///
/// The argmax is taken on the host (first index on ties); a non-finite logit is an error.
pub fn greedy_generate_with(
    model: &mut ModelWeights,
    prompt_tokens: &[u32],
    n_new: usize,
    device: &Device,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<Vec<u32>> {
    if prompt_tokens.is_empty() {
        return Err(invalid("greedy_generate: empty prompt"));
    }
    let positions = prompt_tokens.len() + n_new.saturating_sub(1);
    if positions > MAX_SEQ_LEN {
        return Err(invalid(format!(
            "greedy_generate: {} prompt tokens + {n_new} new tokens need {positions} positions, \
             the model has {MAX_SEQ_LEN}",
            prompt_tokens.len()
        )));
    }
    let mut out = Vec::with_capacity(n_new);
    if n_new == 0 {
        return Ok(out);
    }
    let input = Tensor::new(prompt_tokens, device)?.unsqueeze(0)?;
    let mut logits = model.forward(&input, 0)?;
    let mut index_pos = prompt_tokens.len();
    loop {
        let next = crate::llama::host_argmax(&logits, out.len(), "greedy_generate")?;
        out.push(next);
        if !on_token(next) || out.len() == n_new {
            return Ok(out);
        }
        let input = Tensor::new(&[next], device)?.unsqueeze(0)?;
        logits = model.forward(&input, index_pos)?;
        index_pos += 1;
    }
}

// ------------------------------------------------------------------------------------------
// The tokenizer from GGUF metadata.

fn md_str<'a>(md: &'a HashMap<String, Value>, key: &str) -> Result<&'a str> {
    md.get(key)
        .ok_or_else(|| invalid(format!("GGUF metadata lack {key}")))?
        .to_string()
        .map(String::as_str)
        .map_err(|e| invalid(format!("GGUF metadata {key}: {e}")))
}

fn md_strings<'a>(md: &'a HashMap<String, Value>, key: &str) -> Result<Vec<&'a str>> {
    let values = md
        .get(key)
        .ok_or_else(|| invalid(format!("GGUF metadata lack {key}")))?
        .to_vec()
        .map_err(|e| invalid(format!("GGUF metadata {key}: {e}")))?;
    values
        .iter()
        .map(|v| {
            v.to_string()
                .map(String::as_str)
                .map_err(|e| invalid(format!("GGUF metadata {key}: {e}")))
        })
        .collect()
}

/// The token id stored under `tokenizer.ggml.{which}_token_id` (`which` = `bos`, `eos`,
/// `padding`, `unknown`), if any.
pub fn gguf_token_id(md: &HashMap<String, Value>, which: &str) -> Option<u32> {
    md.get(&format!("tokenizer.ggml.{which}_token_id"))?
        .to_u32()
        .ok()
}

/// GGUF token type of control tokens (`tokenizer.ggml.token_type`).
const TOKEN_TYPE_CONTROL: i32 = 3;
/// GGUF token type of user-defined tokens.
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// Builds the tokenizer that a GPT-2-style GGUF file describes in its metadata
/// (`tokenizer.ggml.model` = `gpt2`): a byte-level BPE over `tokenizer.ggml.tokens` (id =
/// position) and `tokenizer.ggml.merges` (`"left right"`, by priority), with
///
/// - the pre-tokenizer named by `tokenizer.ggml.pre`: `smollm` (also `starcoder`, `refact`,
///   `codeshell`) splits digits one by one, then applies GPT-2's byte-level split; `gpt-2`
///   (also `mpt`, `olmo`) applies GPT-2's split only; other values are an error;
/// - control tokens (`tokenizer.ggml.token_type` = 3, e.g. `<|im_start|>`) as special added
///   tokens, found in the text before pre-tokenization and skipped by
///   `decode(.., skip_special_tokens = true)`; user-defined tokens (type 4) as non-special
///   added tokens;
/// - the byte-level decoder.
///
/// No BOS/EOS token is added when encoding (SmolLM2 sets `tokenizer.ggml.add_bos_token` to
/// false); see [`gguf_token_id`] for the ids.
pub fn tokenizer_from_gguf_metadata(md: &HashMap<String, Value>) -> Result<Tokenizer> {
    let model = md_str(md, "tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(invalid(format!(
            "GGUF tokenizer model {model:?} is not supported (only byte-level BPE, \"gpt2\")"
        )));
    }
    let pre = md
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.to_string().ok())
        .map(String::as_str)
        .unwrap_or("gpt-2");
    let split_digits = match pre {
        "smollm" | "starcoder" | "refact" | "codeshell" => true,
        "gpt-2" | "gpt2" | "mpt" | "olmo" => false,
        other => {
            return Err(invalid(format!(
                "GGUF pre-tokenizer {other:?} is not supported (smollm, starcoder, refact, \
                 codeshell, gpt-2, mpt, olmo)"
            )))
        }
    };
    let tokens = md_strings(md, "tokenizer.ggml.tokens")?;
    let merges = md_strings(md, "tokenizer.ggml.merges")?;
    let types: Vec<i32> = match md.get("tokenizer.ggml.token_type") {
        None => Vec::new(),
        Some(v) => v
            .to_vec()
            .map_err(|e| invalid(format!("GGUF metadata tokenizer.ggml.token_type: {e}")))?
            .iter()
            .map(|t| t.to_i32())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| invalid(format!("GGUF metadata tokenizer.ggml.token_type: {e}")))?,
    };
    if !types.is_empty() && types.len() != tokens.len() {
        return Err(invalid(format!(
            "GGUF metadata: {} token types for {} tokens",
            types.len(),
            tokens.len()
        )));
    }

    let mut vocab = Vocab::default();
    for (id, tok) in tokens.iter().enumerate() {
        let id = u32::try_from(id).map_err(|_| invalid("GGUF vocabulary exceeds u32 ids"))?;
        // On duplicates the first id wins, as in llama.cpp's token-to-id map.
        vocab.entry((*tok).to_string()).or_insert(id);
    }
    let merges = merges
        .iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| invalid(format!("GGUF merge {m:?} is not \"left right\"")))
        })
        .collect::<Result<Vec<_>>>()?;
    let tok_err = |context: &str| {
        let context = context.to_string();
        move |source| Error::Tokenizer { context, source }
    };
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(tok_err("GGUF BPE vocabulary and merges"))?;

    let mut tokenizer = Tokenizer::new(bpe);
    let byte_level = ByteLevel::new(false, true, true);
    let pre_tokenizer: PreTokenizerWrapper = if split_digits {
        Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into()
    } else {
        byte_level.into()
    };
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    tokenizer.with_decoder(Some(ByteLevel::default()));
    let added = |kind: i32, special: bool| -> Vec<AddedToken> {
        types
            .iter()
            .zip(&tokens)
            .filter(|(t, _)| **t == kind)
            .map(|(_, tok)| AddedToken::from(*tok, special).normalized(false))
            .collect()
    };
    tokenizer
        .add_special_tokens(added(TOKEN_TYPE_CONTROL, true))
        .map_err(tok_err("GGUF control tokens"))?;
    tokenizer
        .add_tokens(added(TOKEN_TYPE_USER_DEFINED, false))
        .map_err(tok_err("GGUF user-defined tokens"))?;
    Ok(tokenizer)
}

/// [`tokenizer_from_gguf_metadata`] of the GGUF file `path`.
pub fn load_gguf_tokenizer(path: &Path) -> Result<Tokenizer> {
    tokenizer_from_gguf_metadata(&read_gguf(path)?.metadata)
}
