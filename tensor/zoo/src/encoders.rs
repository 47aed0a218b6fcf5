//! Zoo cases: text and image encoders (BERT, ModernBERT, CLIP, SigLIP).

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_transformers::models::{bert, clip, modernbert, siglip};

use crate::weights::{token_batch, value_batch, var_builder};
use crate::Case;

const FAMILY: &str = "encoder";

/// Dtypes of the BERT-style cases: f32 only (see each case's docs).
const F32_ONLY: &[DType] = &[DType::F32];

/// This family's cases.
pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "bert",
            family: FAMILY,
            batch: 2,
            dtypes: F32_ONLY,
            run: bert,
        },
        Case {
            name: "modernbert",
            family: FAMILY,
            batch: 2,
            dtypes: F32_ONLY,
            run: modernbert,
        },
        Case {
            name: "clip",
            family: FAMILY,
            batch: 2,
            dtypes: crate::ALL_FLOATS,
            run: clip,
        },
        Case {
            name: "siglip",
            family: FAMILY,
            batch: 2,
            dtypes: crate::ALL_FLOATS,
            run: siglip,
        },
    ]
}

/// A `(elements.len(), len)` u32 attention mask: 1 for kept tokens, 0 for padding. Element `e`
/// pads its last `(3 * e) % 5` positions (element 0 none, element 1 three), the same whichever
/// elements a run takes together.
fn padding_mask(elements: &[usize], len: usize, device: &Device) -> Result<Tensor> {
    let mask: Vec<u32> = elements
        .iter()
        .flat_map(|&e| {
            let pad = (3 * e) % 5;
            (0..len).map(move |i| u32::from(i + pad < len))
        })
        .collect();
    Tensor::from_vec(mask, (elements.len(), len), device)
}

const BERT_SEED: u64 = 0xbe27;
const BERT_TOKENS: u64 = 0xbe27_0001;
const BERT_TYPES: u64 = 0xbe27_0002;
const BERT_VOCAB: usize = 64;
const BERT_LEN: usize = 12;

/// BERT for masked LM: word + position + token-type embeddings, 2 post-norm layers (erf GELU),
/// a padding attention mask that differs per element, and the MLM head (dense, GELU, layer
/// norm, vocab projection) over 12 tokens.
///
/// f32 only: BERT's extended attention mask is `(1 - mask) * f32::MIN` in the model's dtype;
/// `f32::MIN` becomes `-inf` in f16 and bf16, and `0 * -inf` makes every score NaN.
fn bert(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: bert::Config = serde_json::from_value(serde_json::json!({
        "vocab_size": BERT_VOCAB,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "max_position_embeddings": 16,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "classifier_dropout": null,
        "model_type": "bert"
    }))
    .map_err(candle_core::Error::wrap)?;
    let vb = var_builder(BERT_SEED, dtype, device);
    let model = bert::BertForMaskedLM::load(vb, &cfg)?;
    let ids = token_batch(BERT_TOKENS, elements, BERT_LEN, BERT_VOCAB, device)?;
    let types = token_batch(BERT_TYPES, elements, BERT_LEN, 2, device)?;
    let mask = padding_mask(elements, BERT_LEN, device)?;
    Ok(vec![model.forward(&ids, &types, Some(&mask))?])
}

const MODERNBERT_SEED: u64 = 0x30de;
const MODERNBERT_TOKENS: u64 = 0x30de_0001;
const MODERNBERT_VOCAB: usize = 64;
const MODERNBERT_LEN: usize = 12;

/// ModernBERT for masked LM: rotary embeddings (global and local theta), a global-attention
/// layer and a sliding-window (local, window 4) layer, GeGLU MLPs, bias-free layer norms, a
/// padding mask that differs per element, and the tied-embedding decoder head, over 12 tokens.
///
/// f32 only: the global padding mask and the local window mask are built in f32 and added to
/// the attention scores of the model's dtype, which fails for f16/bf16.
fn modernbert(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: modernbert::Config = serde_json::from_value(serde_json::json!({
        "vocab_size": MODERNBERT_VOCAB,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 48,
        "max_position_embeddings": 16,
        "layer_norm_eps": 1e-5,
        "pad_token_id": 0,
        "global_attn_every_n_layers": 2,
        "global_rope_theta": 160000.0,
        "local_attention": 4,
        "local_rope_theta": 10000.0
    }))
    .map_err(candle_core::Error::wrap)?;
    let vb = var_builder(MODERNBERT_SEED, dtype, device);
    let model = modernbert::ModernBertForMaskedLM::load(vb, &cfg)?;
    let ids = token_batch(
        MODERNBERT_TOKENS,
        elements,
        MODERNBERT_LEN,
        MODERNBERT_VOCAB,
        device,
    )?;
    let mask = padding_mask(elements, MODERNBERT_LEN, device)?;
    Ok(vec![model.forward(&ids, &mask)?])
}

const CLIP_SEED: u64 = 0xc11b;
const CLIP_TOKENS: u64 = 0xc11b_0001;
const CLIP_PIXELS: u64 = 0xc11b_0002;
const CLIP_VOCAB: usize = 64;
const CLIP_LEN: usize = 10;
const CLIP_IMAGE: usize = 32;

/// CLIP, both towers: the text transformer (causal mask, QuickGELU, attention in f32, pooled at
/// the argmax token) and the vision transformer (8x8 patch conv, class token, pre-norm) on
/// 32x32 images, each through its projection; plus the text tower's full sequence output with
/// `mask_after` (positions past 6 masked) and the vision tower's last hidden states.
/// Outputs: text features, image features, text sequence states, vision hidden states.
fn clip(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let text_config = clip::text_model::ClipTextConfig {
        vocab_size: CLIP_VOCAB,
        embed_dim: 32,
        activation: clip::text_model::Activation::QuickGelu,
        intermediate_size: 64,
        max_position_embeddings: 16,
        pad_with: None,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        projection_dim: 16,
    };
    let vision_config = clip::vision_model::ClipVisionConfig {
        embed_dim: 32,
        activation: clip::text_model::Activation::QuickGelu,
        intermediate_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        projection_dim: 16,
        num_channels: 3,
        image_size: CLIP_IMAGE,
        patch_size: 8,
    };
    let cfg = clip::ClipConfig {
        text_config,
        vision_config,
        logit_scale_init_value: 2.6592,
        image_size: CLIP_IMAGE,
    };
    let vb = var_builder(CLIP_SEED, dtype, device);
    let model = clip::ClipModel::new(vb.clone(), &cfg)?;
    let ids = token_batch(CLIP_TOKENS, elements, CLIP_LEN, CLIP_VOCAB, device)?;
    let pixels = value_batch(
        CLIP_PIXELS,
        elements,
        &[3, CLIP_IMAGE, CLIP_IMAGE],
        1.0,
        dtype,
        device,
    )?;
    let text_features = model.get_text_features(&ids)?;
    let image_features = model.get_image_features(&pixels)?;
    // The same towers (same variable names, hence the same weights), through their own APIs.
    let text = clip::text_model::ClipTextTransformer::new(vb.pp("text_model"), &cfg.text_config)?;
    let text_states = text.forward_with_mask(&ids, 6)?;
    let vision =
        clip::vision_model::ClipVisionTransformer::new(vb.pp("vision_model"), &cfg.vision_config)?;
    let hidden = vision.output_hidden_states(&pixels)?;
    let last_hidden = hidden[hidden.len() - 2].clone();
    Ok(vec![
        text_features,
        image_features,
        text_states,
        last_hidden,
    ])
}

const SIGLIP_SEED: u64 = 0x5161;
const SIGLIP_TOKENS: u64 = 0x5161_0001;
const SIGLIP_PIXELS: u64 = 0x5161_0002;
const SIGLIP_VOCAB: usize = 64;
const SIGLIP_LEN: usize = 12;
const SIGLIP_IMAGE: usize = 32;

/// SigLIP, both towers: the text transformer (tanh GELU, last-token pooling, linear head) and
/// the vision transformer (8x8 patch conv with 2-D position embeddings on 32x32 images, no
/// class token) with its multi-head attention pooling head (learned probe, fused in-proj).
/// Outputs: text features, image features, and the vision tower's un-pooled states.
fn siglip(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: siglip::Config = serde_json::from_value(serde_json::json!({
        "text_config": {
            "vocab_size": SIGLIP_VOCAB,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 16
        },
        "vision_config": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": SIGLIP_IMAGE,
            "patch_size": 8
        }
    }))
    .map_err(candle_core::Error::wrap)?;
    let vb = var_builder(SIGLIP_SEED, dtype, device);
    let model = siglip::Model::new(&cfg, vb.clone())?;
    let ids = token_batch(SIGLIP_TOKENS, elements, SIGLIP_LEN, SIGLIP_VOCAB, device)?;
    let pixels = value_batch(
        SIGLIP_PIXELS,
        elements,
        &[3, SIGLIP_IMAGE, SIGLIP_IMAGE],
        1.0,
        dtype,
        device,
    )?;
    let text_features = model.get_text_features(&ids)?;
    let image_features = model.get_image_features(&pixels)?;
    // The vision tower without its pooling head (same variable names, same weights).
    let vision = siglip::VisionModel::new(&cfg.vision_config, false, vb.pp("vision_model"))?;
    let states = vision.forward(&pixels)?;
    Ok(vec![text_features, image_features, states])
}
