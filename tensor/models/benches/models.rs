//! Tensor-level benchmarks on a ROCm device, each beside the same work on Candle's CPU backend
//! in the same run:
//!
//! * `tensor_op/add_1_elem`: host overhead of one Tensor op (a 1-element add; the GPU runs
//!   asynchronously, so this is the time the host spends per op);
//! * `bert_minilm_32x128/*`: all-MiniLM-L6-v2 embeddings of one batch of 32 x 128 tokens
//!   (throughput in embeddings/s; needs `CANDLE_ROCM_MINILM_DIR` with `model.f16.safetensors`,
//!   run in f32 and f16 on the GPU and in f32 on the CPU);
//! * `llama125m_decode/*`: one greedy decode step with the KV cache of the 125M-parameter
//!   llama-style model (throughput in tokens/s; the cache is refilled from a 16-token prompt
//!   every 64 steps, untimed), on the GPU with candle-transformers' unfused attention and with
//!   our fused attention (`use_flash_attn`, through candle-nn's `sdpa`).
//!
//! Without a GPU every group says so and is skipped. Short settings for the GPU machine:
//! `--warm-up-time 1 --measurement-time 2`.

#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use candle_rocm::RocmDeviceExt;
use candle_rocm_models::bert::{synthetic_batch, SentenceEmbedder, WEIGHTS_F16};
use candle_rocm_models::{llama, minilm_dir};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn gpu() -> Option<Device> {
    match Device::new_rocm(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("no ROCm device ({e}): skipping the GPU benchmarks");
            None
        }
    }
}

fn tensor_op(c: &mut Criterion) {
    let mut g = c.benchmark_group("tensor_op");
    let mut devices = vec![("cpu", Device::Cpu)];
    devices.extend(gpu().map(|d| ("rocm", d)));
    for (name, dev) in devices {
        let a = Tensor::new(&[1f32], &dev).unwrap();
        let b = Tensor::new(&[2f32], &dev).unwrap();
        g.bench_function(format!("add_1_elem/{name}"), |bench| {
            bench.iter(|| a.add(&b).unwrap());
            dev.synchronize().unwrap();
        });
    }
    g.finish();
}

fn bert(c: &mut Criterion) {
    let Some(dir) = minilm_dir() else {
        eprintln!("no all-MiniLM-L6-v2 directory (CANDLE_ROCM_MINILM_DIR): skipping bert");
        return;
    };
    let (batch, seq) = (32, 128);
    let mut g = c.benchmark_group("bert_minilm_32x128");
    g.throughput(Throughput::Elements(batch as u64));
    g.sample_size(10);
    let mut runs = vec![("cpu_f32", Device::Cpu, DType::F32)];
    if let Some(dev) = gpu() {
        runs.push(("rocm_f32", dev.clone(), DType::F32));
        runs.push(("rocm_f16", dev, DType::F16));
    }
    for (name, dev, dtype) in runs {
        let m = SentenceEmbedder::load(&dir, WEIGHTS_F16, dtype, &dev).unwrap();
        let (ids, mask) = synthetic_batch(batch, seq, &dev).unwrap();
        g.bench_function(name, |bench| {
            bench.iter(|| {
                // Embeddings to the host: the end of the work, as a user sees it.
                m.embed_batch_ids(&ids, &mask)
                    .unwrap()
                    .to_device(&Device::Cpu)
                    .unwrap()
            })
        });
    }
    g.finish();
}

fn llama_decode(c: &mut Criterion) {
    let cfg = llama::config_125m();
    let mut g = c.benchmark_group("llama125m_decode");
    g.throughput(Throughput::Elements(1));
    g.sample_size(10);
    let mut devices = vec![];
    let gpu = gpu();
    // Weights from the GPU when there is one (fast), copied to the CPU for the CPU run.
    let weights = llama::random_weights(&cfg, gpu.as_ref().unwrap_or(&Device::Cpu), 7).unwrap();
    if let Some(dev) = gpu {
        devices.push(("rocm_f32", dev.clone(), false));
        devices.push(("rocm_f32_fused_attention", dev, true));
    }
    devices.push(("cpu_f32", Device::Cpu, false));
    let prompt: Vec<u32> = (1..=16).collect();
    for (name, dev, fused) in devices {
        let w = llama::weights_to_device(&weights, &dev).unwrap();
        let cfg = candle_transformers::models::llama::Config {
            use_flash_attn: fused,
            ..cfg.clone()
        };
        let model = llama::build(&cfg, &w, DType::F32, &dev).unwrap();
        g.bench_function(name, |bench| {
            bench.iter_custom(|iters| decode_steps(&model, &prompt, iters))
        });
    }
    g.finish();
}

/// Time of `iters` decode steps with the KV cache, each reading its logits back to the host;
/// the prefill of `prompt` (every 64 steps, with a fresh cache) is not timed.
fn decode_steps(model: &llama::LlamaModel, prompt: &[u32], iters: u64) -> Duration {
    let dev = model.device().clone();
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(64);
        let mut cache = model.new_cache(true).unwrap();
        let ids = Tensor::new(prompt, &dev).unwrap().unsqueeze(0).unwrap();
        let logits = model.forward(&ids, 0, &mut cache).unwrap();
        let mut next = argmax(&logits);
        let start = Instant::now();
        for pos in prompt.len()..prompt.len() + n as usize {
            let ids = Tensor::new(&[next], &dev).unwrap().unsqueeze(0).unwrap();
            let logits = model.forward(&ids, pos, &mut cache).unwrap();
            next = argmax(&logits);
        }
        total += start.elapsed();
        left -= n;
    }
    total
}

fn argmax(logits: &Tensor) -> u32 {
    let v = logits
        .flatten_all()
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let (i, _) =
        v.iter().enumerate().fold(
            (0, f32::NEG_INFINITY),
            |acc, (i, &x)| if x > acc.1 { (i, x) } else { acc },
        );
    i as u32
}

criterion_group!(benches, tensor_op, bert, llama_decode);
criterion_main!(benches);
