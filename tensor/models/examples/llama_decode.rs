//! Greedy decoding with a random-weight llama-style model: parameter count, tokens, tokens/s.
//!
//! Usage: cargo run --release --example llama_decode -- [DEVICE] [f32|f16|bf16] [STEPS] [125m|tiny] [fused]
//! Defaults: cpu, f32, 32 steps, the ~125M configuration, unfused attention (`fused`: through
//! candle-nn's `sdpa`, our fused attention; ROCm only). Weights are generated on DEVICE with
//! seed 42; a prompt of 8 deterministic tokens is decoded with the KV cache. Then one more
//! decode step runs with its kernel launches counted by name (`hip_core::launch_profile_*`).

use std::time::Instant;

use anyhow::bail;
use candle_core::DType;
use candle_rocm_models::bench::synthetic_prompt;
use candle_rocm_models::llama::{
    build, config_125m, config_tiny, generate, param_count, random_weights,
};
use candle_rocm_models::pick_device;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let device = pick_device(args.first().map(String::as_str).unwrap_or("cpu"))?;
    let dtype = match args.get(1).map(String::as_str).unwrap_or("f32") {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        other => bail!("unknown dtype {other:?} (f32, f16 or bf16)"),
    };
    let steps: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(32);
    let mut cfg = match args.get(3).map(String::as_str).unwrap_or("125m") {
        "125m" => config_125m(),
        "tiny" => config_tiny(),
        other => bail!("unknown config {other:?} (125m or tiny)"),
    };
    cfg.use_flash_attn = match args.get(4).map(String::as_str) {
        None | Some("unfused") => false,
        Some("fused") => true,
        Some(other) => bail!("unknown attention {other:?} (fused or unfused)"),
    };
    println!(
        "config: vocab {}, hidden {}, {} layers, {} heads / {} kv heads, mlp {}, tied lm_head: {}",
        cfg.vocab_size,
        cfg.hidden_size,
        cfg.num_hidden_layers,
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.intermediate_size,
        cfg.tie_word_embeddings
    );
    println!(
        "parameters: {} ({:.1} M)",
        param_count(&cfg)?,
        param_count(&cfg)? as f64 / 1e6
    );

    let t = Instant::now();
    let weights = random_weights(&cfg, &device, 42)?;
    let model = build(&cfg, &weights, dtype, &device)?;
    drop(weights);
    println!(
        "weights generated and model built on {:?} ({dtype:?}) in {:.2?}",
        device.location(),
        t.elapsed()
    );

    let prompt = synthetic_prompt(8, cfg.vocab_size)?;
    generate(&model, &prompt, 2, true)?; // warm-up
    let g = generate(&model, &prompt, steps, true)?;
    println!("prompt: {prompt:?}");
    println!("tokens: {:?}", g.tokens);
    println!(
        "prefill {:.2?} ({} tokens); decode {} tokens in {:.2?}: {:.2} tokens/s",
        g.prefill,
        prompt.len(),
        g.tokens.len().saturating_sub(1),
        g.decode,
        g.decode_tokens_per_sec()
    );

    // Two more decode steps after the prompt: one with its launches counted (and its host
    // time taken), one with its launches timed on the GPU.
    let mut cache = model.new_cache(true)?;
    let ids = candle_core::Tensor::new(prompt.as_slice(), &device)?.unsqueeze(0)?;
    model.forward(&ids, 0, &mut cache)?.to_vec2::<f32>()?;
    let next = candle_core::Tensor::new(&[prompt[0]], &device)?.unsqueeze(0)?;
    let launches = hip_core::launch_count();
    let h = Instant::now();
    let logits = model.forward(&next, prompt.len(), &mut cache)?;
    let host = h.elapsed();
    let launches = hip_core::launch_count() - launches;
    logits.to_vec2::<f32>()?;
    hip_core::launch_profile_start(true);
    let logits = model.forward(&next, prompt.len() + 1, &mut cache)?;
    let profile = hip_core::launch_profile_stop();
    logits.to_vec2::<f32>()?;
    println!(
        "one decode step: {launches} kernel launches, host time in forward {host:.2?}; by kernel \
         (the next step, timed):"
    );
    candle_rocm_models::bench::print_launch_profile(&profile);
    Ok(())
}
