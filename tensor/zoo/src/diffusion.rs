//! Zoo cases: diffusion models (the Stable Diffusion VAE and UNet).

use candle_core::{DType, Device, Result, Tensor};
use candle_transformers::models::stable_diffusion::{unet_2d, unet_2d_blocks, vae};

use crate::weights::{value_batch, var_builder};
use crate::Case;

const FAMILY: &str = "diffusion";

/// This family's cases.
pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "sd-vae",
            family: FAMILY,
            batch: 2,
            dtypes: crate::ALL_FLOATS,
            run: sd_vae,
        },
        Case {
            name: "sd-unet",
            family: FAMILY,
            batch: 2,
            dtypes: crate::ALL_FLOATS,
            run: sd_unet,
        },
    ]
}

const VAE_SEED: u64 = 0x5dae;
const VAE_LATENTS: u64 = 0x5dae_0001;
const VAE_FEATURES: u64 = 0x5dae_0002;
const VAE_GROUPS: usize = 8;

/// Stable Diffusion's KL VAE with 2 levels (16 and 32 channels, group norm in 8 groups):
/// `AutoEncoderKL::decode` of 4-channel 8x8 latents to 16x16 images (post-quant 1x1 conv,
/// resnet blocks, mid-block single-head self-attention, nearest 2x upsampling); and the
/// encoder's own blocks under the encoder's variable names: a `DownEncoderBlock2D` with its
/// asymmetrically padded stride-2 downsampler, a second one without, and the `UNetMidBlock2D`
/// (resnet, attention, resnet), on 16-channel 16x16 feature maps.
///
/// `AutoEncoderKL::encode` itself is not compared: it returns a `DiagonalGaussianDistribution`
/// whose mean and std are private and whose only accessor, `sample`, adds device-RNG noise.
///
/// A whole-batch CPU run hits candle-core 0.11.1's matmul batch fold: the mid-block
/// `AttentionBlock` applies its q/k/v `Linear`s to `group_norm(x).reshape(..).transpose(1, 2)`,
/// a transposed view with batch stride `m * k`, so element 1 comes out wrong.
fn sd_vae(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg = vae::AutoEncoderKLConfig {
        block_out_channels: vec![16, 32],
        layers_per_block: 1,
        latent_channels: 4,
        norm_num_groups: VAE_GROUPS,
        use_quant_conv: true,
        use_post_quant_conv: true,
    };
    let vb = var_builder(VAE_SEED, dtype, device);
    let model = vae::AutoEncoderKL::new(vb.clone(), 3, 3, cfg)?;
    let latents = value_batch(VAE_LATENTS, elements, &[4, 8, 8], 1.0, dtype, device)?;
    let decoded = model.decode(&latents)?;

    let down_cfg = |add_downsample| unet_2d_blocks::DownEncoderBlock2DConfig {
        num_layers: 1,
        resnet_eps: 1e-6,
        resnet_groups: VAE_GROUPS,
        add_downsample,
        downsample_padding: 0,
        ..Default::default()
    };
    let down0 = unet_2d_blocks::DownEncoderBlock2D::new(
        vb.pp("encoder.down_blocks.0"),
        16,
        16,
        down_cfg(true),
    )?;
    let down1 = unet_2d_blocks::DownEncoderBlock2D::new(
        vb.pp("encoder.down_blocks.1"),
        16,
        32,
        down_cfg(false),
    )?;
    let mid = unet_2d_blocks::UNetMidBlock2D::new(
        vb.pp("encoder.mid_block"),
        32,
        None,
        unet_2d_blocks::UNetMidBlock2DConfig {
            resnet_eps: 1e-6,
            output_scale_factor: 1.,
            attn_num_head_channels: None,
            resnet_groups: Some(VAE_GROUPS),
            ..Default::default()
        },
    )?;
    let features = value_batch(VAE_FEATURES, elements, &[16, 16, 16], 1.0, dtype, device)?;
    let encoded = mid.forward(&features.apply(&down0)?.apply(&down1)?, None)?;
    Ok(vec![decoded, encoded])
}

const UNET_SEED: u64 = 0x0e7;
const UNET_LATENTS: u64 = 0x0e7_0001;
const UNET_CONTEXT: u64 = 0x0e7_0002;
const UNET_CONTEXT_DIM: usize = 32;

/// The diffusion timestep. Small on purpose: the sinusoidal embedding multiplies it by the
/// frequencies in the model's dtype, so at f16 a timestep near 1000 would carry phase errors of
/// a quarter radian (a property of the model, not of a backend).
const UNET_TIMESTEP: f64 = 21.0;

/// `UNet2DConditionModel` at a tiny config: 4-channel 8x8 latents, sinusoidal timestep
/// embedding and MLP, a cross-attention down block (32 channels, 4 heads, linear projections,
/// GEGLU feed-forward, cross-attention to 8 seeded context tokens of width 32) and a plain
/// down block (64 channels), the cross-attention mid block (8 heads), the mirrored up blocks
/// with skip concatenation and nearest upsampling, group norm in 8 groups. Output: the
/// predicted noise.
fn sd_unet(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg = unet_2d::UNet2DConditionModelConfig {
        blocks: vec![
            unet_2d::BlockConfig {
                out_channels: 32,
                use_cross_attn: Some(1),
                attention_head_dim: 4,
            },
            unet_2d::BlockConfig {
                out_channels: 64,
                use_cross_attn: None,
                attention_head_dim: 8,
            },
        ],
        layers_per_block: 1,
        norm_num_groups: 8,
        cross_attention_dim: UNET_CONTEXT_DIM,
        use_linear_projection: true,
        ..Default::default()
    };
    let vb = var_builder(UNET_SEED, dtype, device);
    let model = unet_2d::UNet2DConditionModel::new(vb, 4, 4, false, cfg)?;
    let latents = value_batch(UNET_LATENTS, elements, &[4, 8, 8], 1.0, dtype, device)?;
    let context = value_batch(
        UNET_CONTEXT,
        elements,
        &[8, UNET_CONTEXT_DIM],
        1.0,
        dtype,
        device,
    )?;
    Ok(vec![model.forward(&latents, UNET_TIMESTEP, &context)?])
}
