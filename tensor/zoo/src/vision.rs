//! Zoo cases: vision models (ViT, DINOv2, ResNet, ConvNeXt, EfficientNet, SegFormer).

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_transformers::models::{convnext, dinov2, efficientnet, resnet, segformer, vit};

use crate::weights::{value_batch, var_builder};
use crate::Case;

const FAMILY: &str = "vision";

/// This family's cases.
pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "vit",
            family: FAMILY,
            batch: 2,
            dtypes: crate::ALL_FLOATS,
            run: vit,
        },
        Case {
            name: "dinov2",
            family: FAMILY,
            batch: 1,
            dtypes: crate::ALL_FLOATS,
            run: dinov2,
        },
        Case {
            name: "resnet",
            family: FAMILY,
            batch: 2,
            dtypes: crate::ALL_FLOATS,
            run: resnet,
        },
        Case {
            name: "convnext",
            family: FAMILY,
            batch: 2,
            dtypes: crate::ALL_FLOATS,
            run: convnext,
        },
        Case {
            name: "efficientnet",
            family: FAMILY,
            batch: 2,
            dtypes: crate::ALL_FLOATS,
            run: efficientnet,
        },
        Case {
            name: "segformer",
            family: FAMILY,
            batch: 2,
            dtypes: crate::ALL_FLOATS,
            run: segformer,
        },
    ]
}

/// Seeded `(elements.len(), 3, size, size)` images, N(0, 1) per element.
fn images(
    stream: u64,
    elements: &[usize],
    size: usize,
    dtype: DType,
    dev: &Device,
) -> Result<Tensor> {
    value_batch(stream, elements, &[3, size, size], 1.0, dtype, dev)
}

const VIT_SEED: u64 = 0x0f17;
const VIT_PIXELS: u64 = 0x0f17_0001;
const VIT_IMAGE: usize = 32;
const VIT_PATCH: usize = 8;

/// ViT: 8x8 patch conv on 32x32 images, class token, learned positions, 2 pre-norm layers
/// (erf GELU), then the classifier on the class token; plus the same embeddings and encoder
/// through their public types for the full hidden states. Outputs: the logits, then the
/// hidden states.
///
/// The embeddings' mask-token path (`bool_masked_pos`) is not used: it multiplies the
/// `(batch, patches, hidden)` mask tokens by a `(batch, patches, 1)` mask without
/// broadcasting, which fails for any hidden size above 1.
fn vit(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: vit::Config = serde_json::from_value(serde_json::json!({
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
        "image_size": VIT_IMAGE,
        "patch_size": VIT_PATCH,
        "num_channels": 3,
        "qkv_bias": true
    }))
    .map_err(candle_core::Error::wrap)?;
    let vb = var_builder(VIT_SEED, dtype, device);
    let model = vit::Model::new(&cfg, 10, vb.clone())?;
    let pixels = images(VIT_PIXELS, elements, VIT_IMAGE, dtype, device)?;
    let logits = model.forward(&pixels)?;
    // The same embeddings and encoder (same variable names, hence the same weights).
    let embeddings = vit::Embeddings::new(&cfg, false, vb.pp("vit.embeddings"))?;
    let encoder = vit::Encoder::new(&cfg, vb.pp("vit.encoder"))?;
    let states = encoder.forward(&embeddings.forward(&pixels, None, false)?)?;
    Ok(vec![logits, states])
}

const DINOV2_SEED: u64 = 0xd1a0;
const DINOV2_PIXELS: u64 = 0xd1a0_0001;
const DINOV2_IMAGE: usize = 56;

/// DINOv2 (ViT with layer scale, fused qkv, tanh GELU MLP, the 37x37 position grid resized by
/// nearest upsampling to the 4x4 patches of a 56x56 image), 2 blocks of width 32: the
/// classifier on [class token, mean patch token]; plus `get_intermediate_layers` of both
/// blocks, normed and reshaped to feature maps (batch moved first).
///
/// Batch 1 only: `prepare_tokens_with_mask` concatenates the `(1, 1, dim)` class token with the
/// `(batch, patches, dim)` patch tokens without broadcasting it, which fails for batch > 1.
fn dinov2(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let vb = var_builder(DINOV2_SEED, dtype, device);
    let model = dinov2::DinoVisionTransformer::new(vb, 2, 32, 4)?;
    let pixels = images(DINOV2_PIXELS, elements, DINOV2_IMAGE, dtype, device)?;
    let logits = model.forward(&pixels)?;
    let layers = model
        .get_intermediate_layers(&pixels, &[0, 1], true, false, true)?
        .transpose(0, 1)?
        .contiguous()?;
    Ok(vec![logits, layers])
}

const RESNET_SEED: u64 = 0x2e50;
const RESNET_PIXELS: u64 = 0x2e50_0001;

/// ResNet-18 without its classifier (the crate only offers the full-width presets): 7x7
/// stride-2 stem conv, batch norm, padded 3x3 max pool, 8 basic blocks with 1x1 stride-2
/// downsample shortcuts, global mean pool, on 20x20 images (odd 5x5 and 3x3 maps on the way:
/// padded stride-2 convs and pooling on odd sizes). Output: the 512 pooled features.
fn resnet(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let vb = var_builder(RESNET_SEED, dtype, device);
    let model = resnet::resnet18_no_final_layer(vb)?;
    let pixels = images(RESNET_PIXELS, elements, 20, dtype, device)?;
    Ok(vec![model.forward(&pixels)?])
}

const CONVNEXT_SEED: u64 = 0xc0de;
const CONVNEXT_PIXELS: u64 = 0xc0de_0001;

/// ConvNeXt-atto (the smallest preset; the config's fields are private) on 32x32 images:
/// 4x4 stride-4 patchify stem, channels-first layer norms, 7x7 depthwise convs, 1x1 conv MLPs
/// with erf GELU and global response normalisation, layer scale, 2x2 stride-2 downsampling,
/// the head's layer norm and classifier. Output: 16 logits. (32x32 is the smallest input: the
/// last stage's 2x2 stride-2 downsampling needs a 2x2 map.)
fn convnext(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let vb = var_builder(CONVNEXT_SEED, dtype, device);
    let model = convnext::convnext(&convnext::Config::atto(), 16, vb)?;
    let pixels = images(CONVNEXT_PIXELS, elements, 32, dtype, device)?;
    Ok(vec![model.forward(&pixels)?])
}

const EFFICIENTNET_SEED: u64 = 0xeff1;
const EFFICIENTNET_PIXELS: u64 = 0xeff1_0001;

/// EfficientNet-B0's first three MBConv stages (the crate's configs are presets; the model
/// takes any prefix of them) on 32x32 images: "same"-padded stride-2 stem, expansion and
/// projection 1x1 convs, depthwise 3x3 and 5x5 convs with stride 1 and 2, squeeze-excitation,
/// swish, batch norm, residuals, 1x1 head conv, mean pool and classifier. Output: 16 logits.
///
/// The images are N(0, 100^2): with random weights every swish, squeeze-excitation gate and
/// running-statistics batch norm shrinks the input-dependent part of the activations while
/// biases and offsets pile up, so at unit scale the logits barely depend on the image (the
/// two elements' logits differ by under 2e-3) and would hide a wrong kernel.
fn efficientnet(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let vb = var_builder(EFFICIENTNET_SEED, dtype, device);
    let stages: Vec<_> = efficientnet::MBConvConfig::b0()
        .into_iter()
        .take(3)
        .collect();
    let model = efficientnet::EfficientNet::new(vb, stages, 16)?;
    let pixels = value_batch(
        EFFICIENTNET_PIXELS,
        elements,
        &[3, 32, 32],
        100.0,
        dtype,
        device,
    )?;
    Ok(vec![model.forward(&pixels)?])
}

const SEGFORMER_SEED: u64 = 0x5e6f;
const SEGFORMER_PIXELS: u64 = 0x5e6f_0001;

/// SegFormer semantic segmentation on 64x64 images: 2 encoder blocks (overlapping 7x7/4 and
/// 3x3/2 patch embeddings, efficient self-attention with spatial-reduction ratios 4 and 2,
/// Mix-FFN with a depthwise 3x3 conv), then the all-MLP decode head (per-scale linear,
/// nearest upsampling, concat, 1x1 fuse conv, batch norm, classifier). Output: (5, 16, 16)
/// class maps.
fn segformer(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: segformer::Config = serde_json::from_value(serde_json::json!({
        "num_channels": 3,
        "num_encoder_blocks": 2,
        "depths": [1, 1],
        "sr_ratios": [4, 2],
        "hidden_sizes": [16, 32],
        "patch_sizes": [7, 3],
        "strides": [4, 2],
        "num_attention_heads": [1, 2],
        "mlp_ratios": [4, 4],
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-6,
        "decoder_hidden_size": 32
    }))
    .map_err(candle_core::Error::wrap)?;
    let vb = var_builder(SEGFORMER_SEED, dtype, device);
    let model = segformer::SemanticSegmentationModel::new(&cfg, 5, vb)?;
    let pixels = images(SEGFORMER_PIXELS, elements, 64, dtype, device)?;
    Ok(vec![model.forward(&pixels)?])
}
