//! Zoo cases: audio models (EnCodec).

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_transformers::models::encodec;

use crate::weights::{token_batch, value_batch, var_builder};
use crate::Case;

const FAMILY: &str = "audio";

/// This family's cases.
pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "encodec",
        family: FAMILY,
        batch: 2,
        dtypes: crate::ALL_FLOATS,
        run: encodec,
    }]
}

const ENCODEC_SEED: u64 = 0xec0d;
const ENCODEC_AUDIO: u64 = 0xec0d_0001;
const ENCODEC_CODES: u64 = 0xec0d_0002;
const ENCODEC_LSTM_IN: u64 = 0xec0d_0003;
const ENCODEC_UP4_IN: u64 = 0xec0d_0004;
const ENCODEC_UP2_IN: u64 = 0xec0d_0005;
const ENCODEC_RESNET_IN: u64 = 0xec0d_0006;
const ENCODEC_DOWN2_IN: u64 = 0xec0d_0007;
const ENCODEC_DOWN4_IN: u64 = 0xec0d_0008;
const ENCODEC_SAMPLES: usize = 64;
const ENCODEC_CODEBOOK: usize = 64;

/// EnCodec with up-sampling ratios [4, 2] (hop 8), 8 base filters, a 32-wide latent and 2
/// residual quantizers: the encoder (causal weight-norm conv1d with replicate padding, ELU
/// resnet blocks with conv shortcuts, stride-2 and stride-4 down-sampling convs, a 2-layer
/// LSTM with residual, final conv) on 64 samples of mono audio; `Model::decode` of seeded
/// codes (codebook lookups summed over quantizers, the decoder's conv1d, 2-layer LSTM, weight-
/// norm conv_transpose1d with strides 4 and 2, resnet blocks); and, under the models' own
/// variable names, single layers applied directly to seeded inputs: the decoder's 2-layer
/// LSTM and its two weight-norm conv_transpose1d layers (stride 4, kernel 8; stride 2,
/// kernel 4), the encoder's first resnet block and its two down-sampling convs (stride 2,
/// kernel 4; stride 4, kernel 8).
///
/// Outputs: the encoder's latents, the decoded audio, then the single layers' outputs in the
/// order above. The single layers are there because the weight-norm gains (`weight_g`, asked
/// for through `vb.get` with no init hint, so about N(0, 0.1^2)) scale each conv's signal by
/// about 0.1: through the whole encoder or decoder the output is all biases (the two
/// elements' latents and decoded audio agree to 1e-3), and even a completely wrong
/// conv_transpose1d moves the decoded audio by only ~2e-4. Encoding to codes (an argmin over
/// codebook distances) is not an output: a tie-level difference would flip a code.
fn encodec(device: &Device, dtype: DType, elements: &[usize]) -> Result<Vec<Tensor>> {
    let cfg: encodec::Config = serde_json::from_value(serde_json::json!({
        // frame rate 800 / 8 = 100 Hz; 1000 * 2.0 / (100 * 10) = 2 quantizers.
        "target_bandwidths": [1.0, 2.0],
        "sampling_rate": 800,
        "audio_channels": 1,
        "normalize": false,
        "chunk_length_s": null,
        "overlap": null,
        "hidden_size": 32,
        "num_filters": 8,
        "num_residual_layers": 1,
        "upsampling_ratios": [4, 2],
        "norm_type": "WeightNorm",
        "kernel_size": 7,
        "last_kernel_size": 7,
        "residual_kernel_size": 3,
        "dilation_growth_rate": 2,
        "use_causal_conv": true,
        "pad_mode": "Replicate",
        "compress": 2,
        "num_lstm_layers": 2,
        "trim_right_ratio": 1.0,
        "codebook_size": ENCODEC_CODEBOOK,
        "codebook_dim": null,
        "use_conv_shortcut": true
    }))
    .map_err(candle_core::Error::wrap)?;
    let vb = var_builder(ENCODEC_SEED, dtype, device);
    let encoder = encodec::Encoder::new(&cfg, vb.pp("encoder"))?;
    let model = encodec::Model::new(&cfg, vb.clone())?;
    let audio = value_batch(
        ENCODEC_AUDIO,
        elements,
        &[1, ENCODEC_SAMPLES],
        1.0,
        dtype,
        device,
    )?;
    let latents = encoder.forward(&audio)?;
    let frames = ENCODEC_SAMPLES / 8;
    let codes = token_batch(
        ENCODEC_CODES,
        elements,
        2 * frames,
        ENCODEC_CODEBOOK,
        device,
    )?
    .reshape((elements.len(), 2, frames))?;
    let decoded = model.decode(&codes)?;

    // The decoder's LSTM (layers.1) and up-sampling convs (layers.3 and layers.6), directly.
    let lstm = encodec::EncodecLSTM::new(32, &cfg, vb.pp("decoder.layers.1"))?;
    let lstm_in = value_batch(ENCODEC_LSTM_IN, elements, &[32, frames], 1.0, dtype, device)?;
    let lstm_out = lstm.forward(&lstm_in)?;
    let up = |layer: &str, c_in, c_out, ratio: usize| {
        let cfg = candle_nn::ConvTranspose1dConfig {
            stride: ratio,
            ..Default::default()
        };
        encodec::conv_transpose1d_weight_norm(c_in, c_out, 2 * ratio, true, cfg, vb.pp(layer))
    };
    let up4 = up("decoder.layers.3.conv", 32, 16, 4)?;
    let up2 = up("decoder.layers.6.conv", 16, 8, 2)?;
    let up4_in = value_batch(ENCODEC_UP4_IN, elements, &[32, frames], 1.0, dtype, device)?;
    let up2_in = value_batch(
        ENCODEC_UP2_IN,
        elements,
        &[16, 4 * frames],
        1.0,
        dtype,
        device,
    )?;
    let up4_out = up4_in.apply(&up4)?;
    let up2_out = up2_in.apply(&up2)?;

    // The encoder's first resnet block (layers.1) and its stride-2 and stride-4 down-sampling
    // convs (layers.3 and layers.6), directly.
    let resnet = encodec::EncodecResnetBlock::new(8, (1, 1), &cfg, vb.pp("encoder.layers.1"))?;
    let down2 = encodec::EncodecConv1d::new(8, 16, 4, 2, 1, &cfg, vb.pp("encoder.layers.3"))?;
    let down4 = encodec::EncodecConv1d::new(16, 32, 8, 4, 1, &cfg, vb.pp("encoder.layers.6"))?;
    let resnet_in = value_batch(
        ENCODEC_RESNET_IN,
        elements,
        &[8, ENCODEC_SAMPLES],
        1.0,
        dtype,
        device,
    )?;
    let down2_in = value_batch(
        ENCODEC_DOWN2_IN,
        elements,
        &[8, ENCODEC_SAMPLES],
        1.0,
        dtype,
        device,
    )?;
    let down4_in = value_batch(
        ENCODEC_DOWN4_IN,
        elements,
        &[16, ENCODEC_SAMPLES / 2],
        1.0,
        dtype,
        device,
    )?;
    let resnet_out = resnet.forward(&resnet_in)?;
    let down2_out = down2.forward(&down2_in)?;
    let down4_out = down4.forward(&down4_in)?;
    Ok(vec![
        latents, decoded, lstm_out, up4_out, up2_out, resnet_out, down2_out, down4_out,
    ])
}
