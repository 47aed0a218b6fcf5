//! Zoo cases: encoder-decoder models (T5, Whisper).
//!
//! Decoder steps are teacher-forced with seeded tokens (never argmax), so every step sees the
//! same tokens on every device; each step's logits are an output.

use candle_core::{DType, Device, IndexOp, Result, Tensor};
use candle_transformers::models::{t5, whisper};

use crate::weights::{token_batch, value_batch, var_builder};
use crate::Case;

const FAMILY: &str = "encoder-decoder";

/// This family's cases.
pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "t5",
            family: FAMILY,
            batch: 2,
            dtypes: crate::ALL_FLOATS,
            run: t5,
        },
        Case {
            name: "whisper",
            family: FAMILY,
            batch: 2,
            dtypes: WHISPER_DTYPES,
            run: whisper,
        },
    ]
}

const T5_SEED: u64 = 0x7505;
const T5_SRC_TOKENS: u64 = 0x7505_0001;
const T5_TGT_TOKENS: u64 = 0x7505_0002;
const T5_VOCAB: usize = 64;

/// T5 (gated-GELU feed-forward, RMS-style layer norm, bucketed relative attention bias with
/// log-spaced buckets, untied lm head): a 2-layer encoder over 9 tokens, then a 2-layer
/// decoder (cross-attention, self-attention KV cache) fed one teacher-forced token per step for
/// 4 steps. Outputs: the encoder states, then each step's logits.
///
/// The decoder is fed one token at a time: a multi-token decoder prompt takes T5's causal-mask
/// path, whose `masked_fill` mixes an f32 `-inf` with the scores in `where_cond`, which fails
/// for f16/bf16 scores.
fn t5(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: t5::Config = serde_json::from_value(serde_json::json!({
        "vocab_size": T5_VOCAB,
        "d_model": 32,
        "d_kv": 8,
        "d_ff": 64,
        "num_layers": 2,
        "num_decoder_layers": 2,
        "num_heads": 4,
        "relative_attention_num_buckets": 8,
        "relative_attention_max_distance": 16,
        "dropout_rate": 0.0,
        "layer_norm_epsilon": 1e-6,
        "initializer_factor": 1.0,
        "feed_forward_proj": "gated-gelu",
        "tie_word_embeddings": false,
        "is_encoder_decoder": true,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0
    }))
    .map_err(candle_core::Error::wrap)?;
    let vb = var_builder(T5_SEED, dtype, device);
    let mut model = t5::T5ForConditionalGeneration::load(vb, &cfg)?;
    let src = token_batch(T5_SRC_TOKENS, elements, 9, T5_VOCAB, device)?;
    let tgt = token_batch(T5_TGT_TOKENS, elements, 4, T5_VOCAB, device)?;
    let encoded = model.encode(&src)?;
    let mut outputs = vec![encoded.clone()];
    for step in 0..tgt.dim(1)? {
        let token = tgt.narrow(1, step, 1)?.contiguous()?;
        outputs.push(model.decode(&token, &encoded)?);
    }
    Ok(outputs)
}

const WHISPER_SEED: u64 = 0x3415;
const WHISPER_MEL: u64 = 0x3415_0001;
const WHISPER_TOKENS: u64 = 0x3415_0002;
const WHISPER_VOCAB: usize = 64;
const WHISPER_MELS: usize = 16;
const WHISPER_FRAMES: usize = 32;

/// Whisper runs in f32 only: its audio encoder adds sinusoidal positions built in f32 to the
/// conv output, and its text decoder a causal mask built in f32 to the attention scores, both
/// of the model's dtype, which fails for f16/bf16.
const WHISPER_DTYPES: &[DType] = &[DType::F32];

/// Whisper: the audio encoder (two GELU conv1d, the second with stride 2, sinusoidal positions,
/// 2 pre-norm attention blocks) on a 16-mel x 32-frame input, then the 2-layer text decoder
/// (causal self-attention, cross-attention with its KV cache reused after the first step,
/// logits tied to the token embedding) over teacher-forced prefixes of 3, 4 and 5 tokens.
/// Outputs: the audio features, then each step's last-position logits.
fn whisper(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: whisper::Config = serde_json::from_value(serde_json::json!({
        "num_mel_bins": WHISPER_MELS,
        "max_source_positions": WHISPER_FRAMES / 2,
        "d_model": 32,
        "encoder_attention_heads": 4,
        "encoder_layers": 2,
        "vocab_size": WHISPER_VOCAB,
        "max_target_positions": 8,
        "decoder_attention_heads": 4,
        "decoder_layers": 2
    }))
    .map_err(candle_core::Error::wrap)?;
    let vb = var_builder(WHISPER_SEED, dtype, device);
    let mut model = whisper::model::Whisper::load(&vb, cfg)?;
    let mel = value_batch(
        WHISPER_MEL,
        elements,
        &[WHISPER_MELS, WHISPER_FRAMES],
        1.0,
        dtype,
        device,
    )?;
    let tokens = token_batch(WHISPER_TOKENS, elements, 5, WHISPER_VOCAB, device)?;
    let audio = model.encoder.forward(&mel, true)?;
    let mut outputs = vec![audio.clone()];
    for (step, len) in (3..=tokens.dim(1)?).enumerate() {
        let prefix = tokens.narrow(1, 0, len)?.contiguous()?;
        let ys = model.decoder.forward(&prefix, &audio, step == 0)?;
        let last = ys.i((.., len - 1..))?;
        outputs.push(model.decoder.final_linear(&last)?);
    }
    Ok(outputs)
}
