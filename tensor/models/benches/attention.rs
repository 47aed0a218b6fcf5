//! Fused attention on a ROCm device, each figure beside a reference measured in the same run:
//!
//! * `attention_prefill_4096/{fused,unfused}`: batch 1, 32 heads x 128, causal, bf16, 4096 tokens
//!   (throughput in FLOP/s, counting the causal half: 2 * 2 * s^2 * d * heads / 2); `unfused` is
//!   matmul + masked softmax + matmul, as Candle models compute attention without a fused op.
//!   PyTorch's `F.scaled_dot_product_attention` on the same GPU is measured by
//!   `benches/attention_torch.py` in the same GPU run.
//! * `attention_decode/{4096,16384,65536}`: one query token, 32 q heads / 8 kv heads x 128, bf16
//!   (throughput in bytes/s of K and V read), beside `copy_bandwidth/1GiB` (a device copy of
//!   1 GiB: bytes read + written per second).
//! * Peak memory of a prefill (printed, from the caching allocator's statistics): fused at 8k and
//!   32k tokens, unfused at 8k.
//!
//! Without a GPU every group says so and is skipped. Short settings for the GPU machine:
//! `--warm-up-time 1 --measurement-time 2`.

#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor, D};
use candle_rocm::flash_attn::flash_attn;
use candle_rocm::RocmDeviceExt;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn gpu() -> Option<Device> {
    match Device::new_rocm(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("no ROCm device ({e}): skipping the attention benchmarks");
            None
        }
    }
}

fn randn(dims: &[usize], dev: &Device) -> Tensor {
    Tensor::randn(0f32, 1.0, dims, dev)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap()
}

/// Times `iters` runs of `f` to completion (the device is synchronised at both ends).
fn timed(dev: &Device, iters: u64, mut f: impl FnMut()) -> Duration {
    dev.synchronize().unwrap();
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    dev.synchronize().unwrap();
    start.elapsed()
}

/// matmul + causal mask + softmax + matmul, q/k/v `(b, h, s, d)` (kv heads already repeated).
fn unfused(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, scale: f64) -> Tensor {
    let att = (q.matmul(&k.t().unwrap()).unwrap() * scale).unwrap();
    let att = att.broadcast_add(mask).unwrap();
    let att = candle_nn::ops::softmax_last_dim(&att).unwrap();
    att.matmul(v).unwrap()
}

fn causal_mask(s: usize, dev: &Device) -> Tensor {
    let m: Vec<f32> = (0..s * s)
        .map(|i| {
            if i % s > i / s {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    Tensor::from_vec(m, (s, s), dev)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap()
}

fn prefill(c: &mut Criterion) {
    let Some(dev) = gpu() else { return };
    let (h, d, s) = (32usize, 128usize, 4096usize);
    let q = randn(&[1, s, h, d], &dev);
    let k = randn(&[1, s, h, d], &dev);
    let v = randn(&[1, s, h, d], &dev);
    let scale = 1.0 / (d as f64).sqrt();
    let flops = 4 * s * s * d * h / 2;
    let mut g = c.benchmark_group("attention_prefill_4096");
    g.throughput(Throughput::Elements(flops as u64));
    g.sample_size(10);
    g.bench_function("fused", |b| {
        b.iter_custom(|iters| {
            timed(&dev, iters, || {
                flash_attn(&q, &k, &v, scale as f32, true).unwrap();
            })
        })
    });
    let (qt, kt, vt) = (
        q.transpose(1, 2).unwrap().contiguous().unwrap(),
        k.transpose(1, 2).unwrap().contiguous().unwrap(),
        v.transpose(1, 2).unwrap().contiguous().unwrap(),
    );
    let mask = causal_mask(s, &dev);
    g.bench_function("unfused", |b| {
        b.iter_custom(|iters| {
            timed(&dev, iters, || {
                unfused(&qt, &kt, &vt, &mask, scale);
            })
        })
    });
    g.finish();
}

fn decode(c: &mut Criterion) {
    let Some(dev) = gpu() else { return };
    let (hq, hkv, d) = (32usize, 8usize, 128usize);
    let mut g = c.benchmark_group("attention_decode");
    for sk in [4096usize, 16384, 65536] {
        let q = randn(&[1, 1, hq, d], &dev);
        let k = randn(&[1, sk, hkv, d], &dev);
        let v = randn(&[1, sk, hkv, d], &dev);
        g.throughput(Throughput::Bytes((2 * sk * hkv * d * 2) as u64));
        g.bench_function(format!("{sk}"), |b| {
            b.iter_custom(|iters| {
                timed(&dev, iters, || {
                    flash_attn(&q, &k, &v, 0.088, true).unwrap();
                })
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("copy_bandwidth");
    let n = 512 * 1024 * 1024; // bf16 elements: 1 GiB
    let x = Tensor::zeros(n, DType::BF16, &dev).unwrap();
    g.throughput(Throughput::Bytes((2 * 2 * n) as u64));
    g.bench_function("1GiB", |b| {
        b.iter_custom(|iters| {
            timed(&dev, iters, || {
                x.copy().unwrap();
            })
        })
    });
    // The ceiling at each decode size: a copy that reads as many bytes as the decode reads (half
    // the KV bytes read, as many written), launched the same way. Short transfers do not reach
    // the 1 GiB copy's rate: a launch and the first DRAM round trip are a fixed cost.
    for sk in [4096usize, 16384, 65536] {
        let kv = 2 * sk * 8 * 128; // bf16 elements of K and V (8 kv heads x 128)
        let x = Tensor::zeros(kv / 2, DType::BF16, &dev).unwrap();
        g.throughput(Throughput::Bytes((2 * kv) as u64));
        g.bench_function(format!("kv_bytes_{sk}"), |b| {
            b.iter_custom(|iters| {
                timed(&dev, iters, || {
                    x.copy().unwrap();
                })
            })
        });
    }
    g.finish();
}

/// Peak allocated bytes of `f` on the device (the allocator's statistics).
fn peak(dev: &Device, f: impl FnOnce() -> candle_core::Result<Tensor>) -> String {
    let hd = dev.as_rocm_device().unwrap().hip_device();
    let alloc = hd.allocator();
    dev.synchronize().unwrap();
    let before = alloc.stats().allocated_bytes;
    alloc.reset_peak_stats();
    let r = f().and_then(|t| t.sum_all()?.to_dtype(DType::F32)?.to_scalar::<f32>());
    dev.synchronize().unwrap();
    match r {
        Ok(_) => format!(
            "{:.1} MiB above the inputs",
            (alloc.stats().peak_allocated_bytes - before) as f64 / (1 << 20) as f64
        ),
        Err(e) => format!("failed: {e}"),
    }
}

fn memory(_c: &mut Criterion) {
    let Some(dev) = gpu() else { return };
    let (h, d) = (32usize, 128usize);
    for s in [8192usize, 32768] {
        let q = randn(&[1, s, h, d], &dev);
        let k = randn(&[1, s, h, d], &dev);
        let v = randn(&[1, s, h, d], &dev);
        let scale = 1.0 / (d as f64).sqrt();
        println!(
            "prefill memory, {s} tokens, 32 x 128, bf16: fused {}",
            peak(&dev, || flash_attn(&q, &k, &v, scale as f32, true))
        );
        if s == 8192 {
            let (qt, kt, vt) = (
                q.transpose(1, 2).unwrap().contiguous().unwrap(),
                k.transpose(1, 2).unwrap().contiguous().unwrap(),
                v.transpose(1, 2).unwrap().contiguous().unwrap(),
            );
            let mask = causal_mask(s, &dev);
            println!(
                "prefill memory, {s} tokens, 32 x 128, bf16: unfused {}",
                peak(&dev, || {
                    let att = (qt.matmul(&kt.t()?)? * scale)?;
                    let att = candle_nn::ops::softmax_last_dim(&att.broadcast_add(&mask)?)?;
                    att.matmul(&vt)?.sum(D::Minus1)
                })
            );
        }
    }
}

criterion_group!(benches, prefill, decode, memory);
criterion_main!(benches);
