//! Tensor-parallel decode throughput: the ~125M llama-style decoder greedy-decoding on one GPU
//! (candle-transformers' model, `llama::generate`), then split over 1 rank and over N ranks
//! (`tp_llama::generate_tp`, one GPU per rank, RCCL/NCCL all-reduces), with tokens/s of each
//! and whether the tokens agree.
//!
//! Usage: cargo run --release --example tp_decode -- [RANKS] [STEPS] [f32|f16|bf16]
//! Defaults: every GPU, 64 steps, f32. The 125M configuration has 12 heads and 4 kv heads, so
//! it splits over 1, 2 or 4 ranks; for other counts a variant with 16 heads and 8 kv heads
//! (head dim 48) is used when it splits (8 ranks). Weights are generated on GPU 0 (seed 42);
//! every run is preceded by a short warm-up (kernel compilation, allocator). On NVIDIA:
//! `HIP_PLATFORM=nvidia` (NCCL from the CUDA toolkit or PyTorch's wheel).

use anyhow::{bail, Context};
use candle_core::{DType, Device};
use candle_rocm::RocmDeviceExt;
use candle_rocm_models::bench::synthetic_prompt;
use candle_rocm_models::llama::{build, config_125m, generate, random_weights};
use candle_rocm_models::tp_llama::{generate_tp, plan, TpGeneration};
use candle_transformers::models::llama::Config;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let count = hip_core::device_count()
        .context("tp_decode needs ROCm GPUs (HIP_PLATFORM=nvidia on NVIDIA)")?;
    if count == 0 {
        bail!("no GPU found: tp_decode needs at least one");
    }
    let ranks: usize = match args.first() {
        Some(s) => s.parse().context("RANKS must be a number")?,
        None => count,
    };
    if ranks == 0 || ranks > count {
        bail!("{ranks} ranks asked for, {count} GPU(s) present");
    }
    let steps: usize = args
        .get(1)
        .map(|s| s.parse())
        .transpose()
        .context("STEPS must be a number")?
        .unwrap_or(64);
    let dtype = match args.get(2).map(String::as_str).unwrap_or("f32") {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        other => bail!("unknown dtype {other:?} (f32, f16 or bf16)"),
    };
    let base = config_125m();
    let wide = Config {
        num_attention_heads: 16,
        num_key_value_heads: 8,
        ..base.clone()
    };
    let cfg = match (plan(&base, ranks), plan(&wide, ranks)) {
        (Ok(_), _) => base,
        (Err(_), Ok(_)) => wide,
        (Err(e), Err(_)) => bail!("the 125M decoder does not split over {ranks} ranks: {e}"),
    };
    println!(
        "config: hidden {}, {} layers, {} heads / {} kv heads, mlp {}, vocab {}; {dtype:?}; \
         {steps} steps; {count} GPU(s), {ranks} rank(s)",
        cfg.hidden_size,
        cfg.num_hidden_layers,
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.intermediate_size,
        cfg.vocab_size
    );

    let devices: Vec<Device> = (0..ranks)
        .map(Device::new_rocm)
        .collect::<candle_core::Result<_>>()?;
    let weights = random_weights(&cfg, &devices[0], 42)?;
    let prompt = synthetic_prompt(16, cfg.vocab_size)?;

    let one = build(&cfg, &weights, dtype, &devices[0])?;
    generate(&one, &prompt, 2, true)?; // warm-up
    let g = generate(&one, &prompt, steps, true)?;
    drop(one);
    println!(
        "{:<28} prefill {:>10.2?}  decode {:>8.1} tokens/s",
        "one GPU (llama::generate)",
        g.prefill,
        g.decode_tokens_per_sec()
    );

    let mut rank_counts = vec![1];
    if ranks > 1 {
        rank_counts.push(ranks);
    }
    let mut one_rank: Option<f64> = None;
    for n in rank_counts {
        let devs = &devices[..n];
        generate_tp(devs, &cfg, &weights, dtype, &prompt, 2)?; // warm-up
        let tp: TpGeneration = generate_tp(devs, &cfg, &weights, dtype, &prompt, steps)?;
        let rate = tp.decode_tokens_per_sec();
        let speedup = one_rank
            .map(|r| format!("  x{:.2} vs 1 rank", rate / r))
            .unwrap_or_default();
        one_rank.get_or_insert(rate);
        println!(
            "{:<28} prefill {:>10.2?}  decode {:>8.1} tokens/s{speedup}  (build {:.2?}; tokens {} the one-GPU model's)",
            format!("tensor parallel, {n} rank(s)"),
            tp.prefill,
            rate,
            tp.build,
            if tp.tokens == g.tokens { "equal to" } else { "DIFFER from" }
        );
    }
    Ok(())
}
