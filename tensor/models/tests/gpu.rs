//! Tensor-level Candle on a ROCm device (`Device::new_rocm(0)`), against Candle's CPU backend:
//! device basics, candle-nn's fused ops on random inputs, a 125M-parameter llama-style decoder
//! (prefill + 32 greedy steps with its KV cache) and all-MiniLM-L6-v2 sentence embeddings, that
//! forward passes queue their work without making the host wait for the GPU
//! (`hip_core::thread_sync_count`), and the tensor-parallel decoder (`tp_llama`: one rank on one GPU,
//! and one rank per GPU when there are several) against the one-GPU decoder.
//!
//! Every test needs a GPU (`#[ignore = "needs a GPU"]`); the MiniLM test also needs the model
//! directory (`CANDLE_ROCM_MINILM_DIR`, with `model.f16.safetensors`: the GPU machine takes at
//! most 64 MiB per run, the f32 file is 87 MiB). On NVIDIA: `HIP_PLATFORM=nvidia`.

mod common;

use std::collections::HashMap;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, DeviceLocation, IndexOp, Module, Tensor, D};
use candle_nn::VarBuilder;
use candle_rocm::RocmDeviceExt;
use candle_rocm_models::bert::{cosine_similarity_rows, SentenceEmbedder, WEIGHTS_F16};
use candle_rocm_models::llama;
use candle_rocm_models::tp_llama;
use candle_transformers::models::bert::{BertEncoder, Config as BertConfig};

/// Tests that need the GPU to themselves (the launch profile is process-wide; so is the global
/// `hip_core::sync_count`) take this lock exclusively, every other test holds it shared (so
/// those still run in parallel).
static SYNC_COUNT: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    SYNC_COUNT.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    SYNC_COUNT.write().unwrap_or_else(|e| e.into_inner())
}

fn rocm() -> Device {
    Device::new_rocm(0).expect("a ROCm device (HIP_PLATFORM=nvidia on NVIDIA)")
}

/// Seeded host values in [-2, 2) (a small LCG: the test needs no RNG crate).
fn host_values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    let host = |t: &Tensor| {
        t.to_device(&Device::Cpu)
            .and_then(|t| t.to_dtype(DType::F32))
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .unwrap()
    };
    let (a, b) = (host(a), host(b));
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| {
            assert_eq!(x.is_nan(), y.is_nan(), "NaN in one result only");
            (x - y).abs()
        })
        .fold(0f32, f32::max)
}

#[test]
#[ignore = "needs a GPU"]
fn device_basics() {
    let _lock = shared();
    let dev = rocm();
    assert!(dev.is_rocm() && dev.is_ext() && !dev.is_cuda() && !dev.is_cpu());
    assert_eq!(
        dev.location(),
        DeviceLocation::Ext {
            backend: "rocm",
            gpu_id: 0
        }
    );
    assert!(dev.same_device(&dev.clone()));
    assert!(!dev.same_device(&Device::Cpu));
    assert_eq!(dev.as_rocm_device().unwrap().ordinal(), 0);
    assert!(Device::Cpu.as_rocm_device().is_err());

    let a = Tensor::new(&[[1f32, 2.], [3., 4.]], &dev).unwrap();
    assert!(format!("{a}").contains("rocm:0"), "{a}");
    let b = a.matmul(&a.t().unwrap()).unwrap();
    assert_eq!(b.device().location(), dev.location());
    assert_eq!(b.to_vec2::<f32>().unwrap(), [[5., 11.], [11., 25.]]);
    // CPU <-> ROCm, and ROCm -> ROCm (a second handle on the same GPU).
    let on_cpu = b.to_device(&Device::Cpu).unwrap();
    let back = on_cpu.to_device(&dev).unwrap();
    let other = back.to_device(&rocm()).unwrap();
    assert_eq!(other.to_vec2::<f32>().unwrap(), [[5., 11.], [11., 25.]]);
    // Transposed, narrowed views keep their layout across devices.
    let t = Tensor::arange(0u32, 12, &dev)
        .unwrap()
        .reshape((3, 4))
        .unwrap();
    let view = t.t().unwrap().narrow(0, 1, 2).unwrap();
    assert_eq!(
        view.to_device(&Device::Cpu)
            .unwrap()
            .to_vec2::<u32>()
            .unwrap(),
        [[1, 5, 9], [2, 6, 10]]
    );

    // Errors, never panics: device mismatch, a quantized shape that is not whole blocks, an
    // out-of-range index.
    let cpu = Tensor::new(&[1f32, 2.], &Device::Cpu).unwrap();
    let gpu = cpu.to_device(&dev).unwrap();
    let err = (&cpu + &gpu).unwrap_err().to_string();
    assert!(err.contains("device mismatch"), "{err}");
    let err = QTensor::quantize(
        &Tensor::zeros((32, 30), DType::F32, &dev).unwrap(),
        GgmlDType::Q8_0,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("block size"), "{err}");
    let ids = Tensor::new(&[0u32, 7], &dev).unwrap();
    let res = gpu.index_select(&ids, 0).and_then(|t| t.to_vec1::<f32>());
    assert!(res.is_err(), "index 7 of 2 must be an error: {res:?}");

    // Seeded random numbers repeat.
    dev.set_seed(7).unwrap();
    let r1 = Tensor::randn(0f32, 1., 1000, &dev)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    dev.set_seed(7).unwrap();
    let r2 = Tensor::randn(0f32, 1., 1000, &dev)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    assert_eq!(r1, r2);
}

#[test]
#[ignore = "needs a GPU"]
fn fused_ops_match_cpu() {
    let _lock = shared();
    let dev = rocm();
    let (b, h, t, d) = (2, 4, 37, 64);
    let x_cpu =
        Tensor::from_vec(host_values(b * h * t * d, 1), (b, h, t, d), &Device::Cpu).unwrap();
    let alpha_cpu = Tensor::from_vec(host_values(d, 2), d, &Device::Cpu).unwrap();
    let beta_cpu = Tensor::from_vec(host_values(d, 3), d, &Device::Cpu).unwrap();
    let cos_cpu = Tensor::from_vec(host_values(t * d / 2, 4), (t, d / 2), &Device::Cpu).unwrap();
    let sin_cpu = Tensor::from_vec(host_values(t * d / 2, 5), (t, d / 2), &Device::Cpu).unwrap();
    for (dtype, tol) in [
        (DType::F32, 1e-5f32),
        (DType::F16, 2e-2),
        (DType::BF16, 1e-1),
    ] {
        let on = |x: &Tensor, dev: &Device| x.to_dtype(dtype).unwrap().to_device(dev).unwrap();
        let run = |dev: &Device| -> Vec<(&'static str, Tensor)> {
            let x = on(&x_cpu, dev);
            let (alpha, beta) = (on(&alpha_cpu, dev), on(&beta_cpu, dev));
            let (cos, sin) = (on(&cos_cpu, dev), on(&sin_cpu, dev));
            let x_thd = x.transpose(1, 2).unwrap().contiguous().unwrap();
            vec![
                (
                    "softmax_last_dim",
                    candle_nn::ops::softmax_last_dim(&x).unwrap(),
                ),
                (
                    "softmax(D::Minus1)",
                    candle_nn::ops::softmax(&x, D::Minus1).unwrap(),
                ),
                (
                    "softmax(transposed, D::Minus1)",
                    candle_nn::ops::softmax(&x.t().unwrap(), D::Minus1).unwrap(),
                ),
                ("softmax(dim 2)", candle_nn::ops::softmax(&x, 2).unwrap()),
                (
                    "rms_norm",
                    candle_nn::ops::rms_norm(&x, &alpha, 1e-5).unwrap(),
                ),
                (
                    "layer_norm",
                    candle_nn::ops::layer_norm(&x, &alpha, &beta, 1e-5).unwrap(),
                ),
                ("rope", candle_nn::rotary_emb::rope(&x, &cos, &sin).unwrap()),
                (
                    "rope_i",
                    candle_nn::rotary_emb::rope_i(&x, &cos, &sin).unwrap(),
                ),
                (
                    "rope_thd",
                    candle_nn::rotary_emb::rope_thd(&x_thd, &cos, &sin).unwrap(),
                ),
                ("swiglu", candle_nn::ops::swiglu(&x).unwrap()),
                (
                    "swiglu(transposed)",
                    candle_nn::ops::swiglu(&x.transpose(1, 2).unwrap()).unwrap(),
                ),
                (
                    "add_rms_norm: sum",
                    candle_nn::ops::add_rms_norm(&x, &x_thd.transpose(1, 2).unwrap(), &alpha, 1e-5)
                        .unwrap()
                        .0,
                ),
                (
                    "add_rms_norm: norm",
                    candle_nn::ops::add_rms_norm(&x, &x.sqr().unwrap(), &alpha, 1e-5)
                        .unwrap()
                        .1,
                ),
                ("sigmoid", candle_nn::ops::sigmoid(&x).unwrap()),
                (
                    "sigmoid(transposed)",
                    candle_nn::ops::sigmoid(&x.t().unwrap()).unwrap(),
                ),
            ]
        };
        let (gpu, cpu) = (run(&dev), run(&Device::Cpu));
        for ((name, g), (_, c)) in gpu.iter().zip(&cpu) {
            assert_eq!(g.dims(), c.dims(), "{name} {dtype:?}");
            assert_eq!(g.dtype(), dtype, "{name}");
            let diff = max_abs_diff(g, c);
            // Relative to the largest CPU magnitude (the norms scale by alpha up to ~2 * |x| / rms).
            let scale = c
                .to_dtype(DType::F32)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
                .max(1.0);
            println!("{name:>20} {dtype:?}: max |gpu - cpu| {diff:.3e} (scale {scale:.2})");
            assert!(
                diff <= tol * scale,
                "{name} {dtype:?}: {diff} > {tol} * {scale}"
            );
        }
    }
    // arg_sort (asc/desc) of distinct values: exact.
    let v = Tensor::from_vec(host_values(5 * 300, 9), (5, 300), &Device::Cpu).unwrap();
    for asc in [true, false] {
        let g = v.to_device(&dev).unwrap().arg_sort_last_dim(asc).unwrap();
        let c = v.arg_sort_last_dim(asc).unwrap();
        assert_eq!(
            g.to_vec2::<u32>().unwrap(),
            c.to_vec2::<u32>().unwrap(),
            "asc={asc}"
        );
    }
    // Softmax rows sum to one on the device too (a reduction after the fused op).
    let s = candle_nn::ops::softmax_last_dim(&x_cpu.to_device(&dev).unwrap())
        .unwrap()
        .sum(D::Minus1)
        .unwrap()
        .i((0, 0))
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    assert!(s.iter().all(|v| (v - 1.0).abs() < 1e-5), "{s:?}");
}

/// candle-nn's generic `softmax` over the last dim takes the fused kernel on our device (one
/// launch, the Candle patch), other dims and gradient-tracked inputs the generic composition;
/// gradients through it match the CPU's.
#[test]
#[ignore = "needs a GPU"]
fn softmax_takes_the_fused_kernel_on_the_last_dim() {
    let _lock = exclusive();
    let dev = rocm();
    let x_cpu = Tensor::from_vec(host_values(3 * 5 * 33, 11), (3, 5, 33), &Device::Cpu).unwrap();
    let x = x_cpu.to_device(&dev).unwrap();
    let launched = |f: &dyn Fn() -> Tensor| {
        dev.synchronize().unwrap();
        hip_core::launch_profile_start_this_thread(false);
        let y = f();
        let p = hip_core::launch_profile_stop();
        y.to_vec3::<f32>().unwrap();
        p.iter().map(|k| k.name.clone()).collect::<Vec<_>>()
    };
    let last = launched(&|| candle_nn::ops::softmax(&x, D::Minus1).unwrap());
    assert!(
        last.len() == 1 && last[0].starts_with("softmax_") && last[0].ends_with("_f32"),
        "last dim: one fused softmax launch expected, got {last:?}"
    );
    let middle = launched(&|| candle_nn::ops::softmax(&x, 1).unwrap());
    assert!(
        middle.len() > 1 && !middle.iter().any(|n| n.starts_with("softmax_")),
        "dim 1: the generic composition expected, got {middle:?}"
    );
    // A tracked variable: the generic composition, whose backward pass exists.
    let grads = |dev: &Device| {
        let v = candle_core::Var::from_tensor(&x_cpu.to_device(dev).unwrap()).unwrap();
        let w = Tensor::from_vec(host_values(33, 12), 33, &Device::Cpu)
            .unwrap()
            .to_device(dev)
            .unwrap();
        let y = candle_nn::ops::softmax(v.as_tensor(), D::Minus1)
            .unwrap()
            .broadcast_mul(&w)
            .unwrap()
            .sum_all()
            .unwrap();
        let g = y.backward().unwrap();
        g.get(v.as_tensor())
            .unwrap()
            .to_device(&Device::Cpu)
            .unwrap()
    };
    let (g_gpu, g_cpu) = (grads(&dev), grads(&Device::Cpu));
    let diff = max_abs_diff(&g_gpu, &g_cpu);
    assert!(diff < 1e-6, "softmax gradient: max |gpu - cpu| {diff:e}");
}

#[test]
#[ignore = "needs a GPU"]
fn llama_125m_greedy_decode_matches_cpu() {
    let _lock = shared();
    let dev = rocm();
    let cfg = llama::config_125m();
    let params = llama::param_count(&cfg).unwrap();
    assert!(params >= 100_000_000, "{params}");
    // Weights generated on the GPU (seeded), the same values copied to the CPU for the reference.
    let weights = llama::random_weights(&cfg, &dev, 1234).unwrap();
    let cpu_weights = llama::weights_to_device(&weights, &Device::Cpu).unwrap();
    let gpu_model = llama::build(&cfg, &weights, DType::F32, &dev).unwrap();
    let cpu_model = llama::build(&cfg, &cpu_weights, DType::F32, &Device::Cpu).unwrap();
    let prompt: Vec<u32> = vec![1, 450, 4996, 17354, 1701, 432, 17204, 975];
    let steps = 32;
    let gpu = llama::generate(&gpu_model, &prompt, steps, true).unwrap();
    let cpu = llama::generate(&cpu_model, &prompt, steps, true).unwrap();
    let mut worst = 0f32;
    for (step, (g, c)) in gpu.logits.iter().zip(&cpu.logits).enumerate() {
        let d = max_abs_diff(g, c);
        worst = worst.max(d);
        if step < 2 || step == steps - 1 {
            println!("step {step}: max |logit gpu - cpu| {d:.3e}");
        }
    }
    println!(
        "llama {params} params: gpu tokens {:?}\n  cpu tokens {:?}\n  largest logit difference over {steps} steps: {worst:.3e}; \
         gpu prefill {:?}, decode {:?}; cpu prefill {:?}, decode {:?}",
        gpu.tokens, cpu.tokens, gpu.prefill, gpu.decode, cpu.prefill, cpu.decode
    );
    assert_eq!(gpu.tokens.len(), steps);
    assert_eq!(gpu.tokens, cpu.tokens);
    assert!(worst < 1e-2, "largest logit difference {worst}");
}

#[test]
#[ignore = "needs a GPU"]
fn minilm_embeddings_match_cpu() {
    let _lock = shared();
    let dir = common::dir();
    let rows = common::reference();
    let sentences = common::sentences(&rows);
    let dev = rocm();
    // The CPU reference runs the same f16 weights in f32.
    let cpu = SentenceEmbedder::load(&dir, WEIGHTS_F16, DType::F32, &Device::Cpu)
        .unwrap()
        .embed(&sentences)
        .unwrap();
    for (dtype, min_cos) in [(DType::F32, 0.9999f32), (DType::F16, 0.999)] {
        let m = SentenceEmbedder::load(&dir, WEIGHTS_F16, dtype, &dev).unwrap();
        let gpu = m.embed(&sentences).unwrap();
        assert_eq!(gpu.device().location(), dev.location());
        let cos = cosine_similarity_rows(&gpu, &cpu).unwrap();
        let lowest = cos.iter().copied().fold(f32::INFINITY, f32::min);
        println!(
            "MiniLM {dtype:?} on rocm vs CPU f32 (f16 weights), {} sentences: lowest cosine {lowest:.7}, max |diff| {:.2e}",
            cos.len(),
            max_abs_diff(&gpu, &cpu)
        );
        assert!(lowest >= min_cos, "{dtype:?}: cosine {lowest} < {min_cos}");
        if dtype == DType::F32 {
            // And against the float64 reference of the f32 weights (f16 rounding of the weights).
            common::check(&gpu, &rows, 0.99999, 5e-4, "rocm f32 vs float64 reference");
        }
    }
}

/// Whether the device caches freed memory. With `HIP_CORE_NO_CACHING=1` (the mode for memory
/// checkers) every free is a raw free after a device synchronisation, so counting waits over a
/// forward pass means nothing: the wait-counting tests then say so and check nothing.
fn caching_allocator() -> bool {
    let caching = hip_core::Device::new(0)
        .map(|d| d.allocator().is_caching())
        .unwrap_or(true);
    if !caching {
        println!(
            "no-caching mode (HIP_CORE_NO_CACHING): every free waits; wait counts not checked"
        );
    }
    caching
}

/// Prefill of `prompt` (`u32 [1, seq]` on the model's device), then `steps` decode steps with
/// the KV cache, each feeding the argmax of the previous logits, taken on the device: nothing is
/// read back to the host. Returns the chosen tokens (`u32 [1, 1]` each, on the device), the
/// logits of the last step, and `hip_core::thread_sync_count()` before the prefill, after it
/// and after the decode steps.
fn greedy_on_device(
    model: &llama::LlamaModel,
    prompt: &Tensor,
    steps: usize,
) -> (Vec<Tensor>, Tensor, [u64; 3]) {
    let mut cache = model.new_cache(true).unwrap();
    let start = hip_core::thread_sync_count();
    let mut logits = model.forward(prompt, 0, &mut cache).unwrap();
    let prefilled = hip_core::thread_sync_count();
    let seq = prompt.dim(1).unwrap();
    let mut tokens = Vec::with_capacity(steps);
    for pos in seq..seq + steps {
        let next = logits.argmax_keepdim(D::Minus1).unwrap();
        logits = model.forward(&next, pos, &mut cache).unwrap();
        tokens.push(next);
    }
    let decoded = hip_core::thread_sync_count();
    (tokens, logits, [start, prefilled, decoded])
}

/// The 125M llama decoder's forward passes (prefill of 8 tokens, then 6 steps with the KV
/// cache) make no host-blocking call: the strided copies, broadcasts and reductions upload their
/// layout info without waiting (`Stream::alloc_from_host_async`), and so does the host data
/// the model uploads itself (candle-transformers' `masked_fill` makes a
/// `Tensor::new(f32::NEG_INFINITY)` per layer, the causal mask is built on the host once per
/// cache): candle-rocm stages uploads of up to 64 KiB.
#[test]
#[ignore = "needs a GPU"]
fn llama_forward_passes_never_wait_for_the_gpu() {
    let _lock = exclusive();
    if !caching_allocator() {
        return;
    }
    let dev = rocm();
    let cfg = llama::config_125m();
    let weights = llama::random_weights(&cfg, &dev, 77).unwrap();
    let model = llama::build(&cfg, &weights, DType::F32, &dev).unwrap();
    drop(weights);
    let prompt_ids: Vec<u32> = vec![1, 450, 4996, 17354, 1701, 432, 17204, 975];
    let prompt = Tensor::new(prompt_ids.as_slice(), &dev)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let steps = 6;
    // A first run loads the kernels and the BLAS handle and warms the allocator and the ring.
    let _ = greedy_on_device(&model, &prompt, steps);
    let (tokens, last_logits, [start, prefilled, decoded]) =
        greedy_on_device(&model, &prompt, steps);
    let (prefill_waits, decode_waits) = (prefilled - start, decoded - prefilled);
    println!(
        "llama 125M: host-blocking calls in the prefill of {} tokens: {prefill_waits} \
         (host uploads of the model: {} masked_fill scalars + 1 causal mask), \
         in {steps} decode steps: {decode_waits}",
        prompt_ids.len(),
        cfg.num_hidden_layers
    );
    assert_eq!(decode_waits, 0, "the decode steps waited for the GPU");
    assert_eq!(prefill_waits, 0, "the prefill waited for the GPU");

    // Only now read the results: the device-side greedy decode is the host-side one.
    let mut ours: Vec<u32> = tokens
        .iter()
        .map(|t| t.flatten_all().unwrap().to_vec1::<u32>().unwrap()[0])
        .collect();
    ours.push(
        last_logits
            .argmax(D::Minus1)
            .unwrap()
            .to_vec1::<u32>()
            .unwrap()[0],
    );
    let reference = llama::generate(&model, &prompt_ids, steps + 1, true).unwrap();
    assert_eq!(ours, reference.tokens);
}

/// A MiniLM-sized BERT encoder (6 layers, hidden 384, 12 heads, random weights) over a padded
/// batch makes no host-blocking call: embeddings, layer norms, attention (head transposes,
/// broadcast mask, softmax) and pooling. The inputs are uploaded before the count is taken.
/// The result matches the same weights on the CPU.
#[test]
#[ignore = "needs a GPU"]
fn bert_encoder_forward_never_waits_for_the_gpu() {
    let _lock = exclusive();
    let dev = rocm();
    if !caching_allocator() {
        return;
    }
    let cfg = BertConfig {
        vocab_size: 30522,
        hidden_size: 384,
        num_hidden_layers: 6,
        num_attention_heads: 12,
        intermediate_size: 1536,
        max_position_embeddings: 512,
        ..BertConfig::default()
    };
    let h = cfg.hidden_size;
    struct Encoder {
        words: candle_nn::Embedding,
        positions: candle_nn::Embedding,
        norm: candle_nn::LayerNorm,
        encoder: BertEncoder,
    }
    let load = |vb: VarBuilder| Encoder {
        words: candle_nn::embedding(cfg.vocab_size, h, vb.pp("words")).unwrap(),
        positions: candle_nn::embedding(cfg.max_position_embeddings, h, vb.pp("positions"))
            .unwrap(),
        norm: candle_nn::layer_norm(h, cfg.layer_norm_eps, vb.pp("norm")).unwrap(),
        encoder: BertEncoder::load(vb.pp("encoder"), &cfg).unwrap(),
    };
    // Mean over the unmasked positions of the encoder's output: f32 [n, hidden].
    let forward = |m: &Encoder, ids: &Tensor, pos: &Tensor, add_mask: &Tensor, keep: &Tensor| {
        let x = m
            .words
            .forward(ids)
            .unwrap()
            .broadcast_add(&m.positions.forward(pos).unwrap())
            .unwrap();
        let x = m.norm.forward(&x).unwrap();
        let hidden = m.encoder.forward(&x, add_mask).unwrap();
        let summed = hidden.broadcast_mul(keep).unwrap().sum(1).unwrap();
        summed.broadcast_div(&keep.sum(1).unwrap()).unwrap()
    };
    // Random weights generated on the GPU; the same values on the CPU for the reference. The
    // models get plain tensors, not the map's variables: a variable tracks gradients, which
    // keeps attention on the composition (the fused op has no backward).
    let varmap = candle_nn::VarMap::new();
    let tracked = load(VarBuilder::from_varmap(&varmap, DType::F32, &dev));
    let weights_on = |d: &Device| -> HashMap<String, Tensor> {
        varmap
            .data()
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().detach().to_device(d).unwrap()))
            .collect()
    };
    let gpu = load(VarBuilder::from_tensors(weights_on(&dev), DType::F32, &dev));
    let cpu = load(VarBuilder::from_tensors(
        weights_on(&Device::Cpu),
        DType::F32,
        &Device::Cpu,
    ));

    // Two sentences of 16 positions, the second padded after 11 tokens.
    let (n, seq, len1) = (2usize, 16usize, 11usize);
    let ids: Vec<u32> = (0..n * seq)
        .map(|i| (101 + 997 * i as u32) % 30522)
        .collect();
    let keep: Vec<f32> = (0..n * seq)
        .map(|i| {
            if i / seq == 1 && i % seq >= len1 {
                0.0
            } else {
                1.0
            }
        })
        .collect();
    let add_mask: Vec<f32> = keep.iter().map(|&k| (1.0 - k) * -1e9).collect();
    let inputs = |d: &Device| {
        (
            Tensor::from_vec(ids.clone(), (n, seq), d).unwrap(),
            Tensor::arange(0u32, seq as u32, d).unwrap(),
            Tensor::from_vec(add_mask.clone(), (n, 1, 1, seq), d).unwrap(),
            Tensor::from_vec(keep.clone(), (n, seq, 1), d).unwrap(),
        )
    };
    let (g_ids, g_pos, g_add, g_keep) = inputs(&dev);
    // Warm-up: kernels, BLAS handle, allocator, staging ring.
    let _ = forward(&gpu, &g_ids, &g_pos, &g_add, &g_keep);
    let before = hip_core::thread_sync_count();
    let first = forward(&gpu, &g_ids, &g_pos, &g_add, &g_keep);
    let second = forward(&gpu, &g_ids, &g_pos, &g_add, &g_keep);
    let waits = hip_core::thread_sync_count() - before;
    println!(
        "BERT encoder (6 x 384, batch 2 x 16): host-blocking calls in 2 forward passes: {waits}"
    );
    assert_eq!(waits, 0, "the encoder's forward passes waited for the GPU");

    // The attention of each layer is one fused launch (our candle-transformers patch: BERT's
    // self-attention through candle-nn's sdpa on ext devices, after one q/k/v product), with
    // no softmax.
    dev.synchronize().unwrap();
    hip_core::launch_profile_start_this_thread(false);
    let profiled = forward(&gpu, &g_ids, &g_pos, &g_add, &g_keep);
    let profile = hip_core::launch_profile_stop();
    let launches = |prefix: &str| hip_core::launches_with_prefix(&profile, prefix);
    let names: Vec<_> = profile.iter().map(|k| (&k.name, k.launches)).collect();
    assert_eq!(
        launches("attn_prefill_"),
        cfg.num_hidden_layers as u64,
        "one fused attention per layer: {names:?}"
    );
    assert_eq!(launches("softmax_"), 0, "no unfused softmax: {names:?}");
    // One product for q, k and v (their weights joined at load time), then o and the two of
    // the feed-forward block: 4 GEMMs per layer.
    assert_eq!(
        launches("gemm_"),
        4 * cfg.num_hidden_layers as u64,
        "GEMMs per forward pass: {names:?}"
    );
    // With the map's variables (gradients tracked) attention stays the composition.
    dev.synchronize().unwrap();
    hip_core::launch_profile_start_this_thread(false);
    let composed = forward(&tracked, &g_ids, &g_pos, &g_add, &g_keep);
    let tracked_profile = hip_core::launch_profile_stop();
    assert_eq!(
        hip_core::launches_with_prefix(&tracked_profile, "attn_prefill_"),
        0,
        "tracked weights must keep the composition"
    );

    let (c_ids, c_pos, c_add, c_keep) = inputs(&Device::Cpu);
    let reference = forward(&cpu, &c_ids, &c_pos, &c_add, &c_keep);
    let (d1, d2, d3, d4) = (
        max_abs_diff(&first, &reference),
        max_abs_diff(&second, &reference),
        max_abs_diff(&profiled, &reference),
        max_abs_diff(&composed, &reference),
    );
    println!("BERT encoder: max |gpu - cpu| {d1:.3e} (fused attention), {d4:.3e} (composed)");
    assert!(
        d1 < 1e-3 && d2 < 1e-3 && d3 < 1e-3 && d4 < 1e-3,
        "max |gpu - cpu|: first pass {d1}, second {d2}, profiled {d3}, composed {d4}"
    );
}

// ---------------------------------------------------------------------------------------------
// Fused attention: candle-flash-attn's API (`candle_rocm::flash_attn`), candle-nn's `sdpa` routed
// to the ROCm device, and the llama decoder with `use_flash_attn`.
// ---------------------------------------------------------------------------------------------

/// The unfused reference on the CPU in f64: q `(b, sq, hq, d)`, k/v `(b, sk, hkv, d)`, causal
/// and windows bottom-right aligned, an optional additive mask `(b, hq, sq, sk)`.
#[allow(clippy::too_many_arguments)]
fn unfused_cpu(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    window: (Option<usize>, Option<usize>),
    softcap: Option<f64>,
    mask: Option<&Tensor>,
) -> Tensor {
    let cpu = |t: &Tensor| {
        t.to_device(&Device::Cpu)
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap()
    };
    let (q, k, v) = (cpu(q), cpu(k), cpu(v));
    let (b, sq, hq, d) = q.dims4().unwrap();
    let (_, sk, hkv, _) = k.dims4().unwrap();
    let rep = |t: &Tensor| {
        // (b, s, hkv, d) -> (b, hq, s, d), each kv head repeated for its q heads.
        let t = t.transpose(1, 2).unwrap();
        let t = t
            .unsqueeze(2)
            .unwrap()
            .broadcast_as((b, hkv, hq / hkv, t.dim(2).unwrap(), d))
            .unwrap();
        t.reshape((b, hq, t.dim(3).unwrap(), d)).unwrap()
    };
    let (k, v) = (rep(&k), rep(&v));
    let q = q.transpose(1, 2).unwrap().contiguous().unwrap();
    let mut s = (q.matmul(&k.t().unwrap()).unwrap() * scale).unwrap();
    if let Some(c) = softcap {
        s = ((s / c).unwrap().tanh().unwrap() * c).unwrap();
    }
    if let Some(m) = mask {
        s = s.broadcast_add(&cpu(m)).unwrap();
    }
    let shift = sk as i64 - sq as i64;
    let allowed: Vec<f64> = (0..sq)
        .flat_map(|i| {
            (0..sk).map(move |j| {
                let (i, j) = (i as i64, j as i64);
                let lo = window.0.is_none_or(|w| j >= i + shift - w as i64);
                let hi = window.1.is_none_or(|w| j <= i + shift + w as i64);
                if lo && hi {
                    0.0
                } else {
                    f64::NEG_INFINITY
                }
            })
        })
        .collect();
    let allowed = Tensor::from_vec(allowed, (sq, sk), &Device::Cpu).unwrap();
    let s = s.broadcast_add(&allowed).unwrap();
    // Softmax that leaves fully masked rows at zero.
    let mx = s.max_keepdim(D::Minus1).unwrap();
    let finite_mx = mx
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap()
        .into_iter()
        .map(|x| if x.is_finite() { x } else { 0.0 })
        .collect::<Vec<_>>();
    let finite_mx = Tensor::from_vec(finite_mx, mx.shape(), &Device::Cpu).unwrap();
    let e = s.broadcast_sub(&finite_mx).unwrap().exp().unwrap();
    let den = e.sum_keepdim(D::Minus1).unwrap();
    let den_safe = den
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap()
        .into_iter()
        .map(|x| if x > 0.0 { x } else { 1.0 })
        .collect::<Vec<_>>();
    let den_safe = Tensor::from_vec(den_safe, den.shape(), &Device::Cpu).unwrap();
    let p = e.broadcast_div(&den_safe).unwrap();
    p.matmul(&v)
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .contiguous()
        .unwrap()
}

fn rand_tensor(dims: &[usize], seed: u64, dtype: DType, dev: &Device) -> Tensor {
    let n = dims.iter().product();
    let v: Vec<f32> = host_values(n, seed).into_iter().map(|x| x * 0.5).collect();
    Tensor::from_vec(v, dims, &Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
        .to_device(dev)
        .unwrap()
}

fn attn_tol(dtype: DType) -> f32 {
    match dtype {
        DType::BF16 => 2e-2,
        DType::F16 => 3e-3,
        _ => 1e-4,
    }
}

#[test]
#[ignore = "needs a GPU"]
fn flash_attn_api_matches_the_unfused_cpu_computation() {
    // The crate-root names, as a model switching from candle-flash-attn imports them.
    use candle_rocm::{
        flash_attn, flash_attn_varlen, flash_attn_windowed, flash_attn_windowed_softcap,
    };
    let _lock = shared();
    let dev = rocm();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (b, sq, sk, hq, hkv, d) in [
            (2, 50, 80, 8, 2, 64),
            (1, 1, 700, 8, 8, 128),
            (2, 33, 33, 4, 1, 96),
        ] {
            let q = rand_tensor(&[b, sq, hq, d], 1, dtype, &dev);
            let k = rand_tensor(&[b, sk, hkv, d], 2, dtype, &dev);
            let v = rand_tensor(&[b, sk, hkv, d], 3, dtype, &dev);
            let scale = 1.0 / (d as f64).sqrt();
            let cases: Vec<(&str, Tensor, Tensor)> = vec![
                (
                    "causal",
                    flash_attn(&q, &k, &v, scale as f32, true).unwrap(),
                    unfused_cpu(&q, &k, &v, scale, (None, Some(0)), None, None),
                ),
                (
                    "full",
                    flash_attn(&q, &k, &v, scale as f32, false).unwrap(),
                    unfused_cpu(&q, &k, &v, scale, (None, None), None, None),
                ),
                (
                    "window 8/0",
                    flash_attn_windowed(&q, &k, &v, scale as f32, Some(8), Some(0)).unwrap(),
                    unfused_cpu(&q, &k, &v, scale, (Some(8), Some(0)), None, None),
                ),
                (
                    "softcap",
                    flash_attn_windowed_softcap(&q, &k, &v, 1.0, None, Some(0), 3.0).unwrap(),
                    unfused_cpu(&q, &k, &v, 1.0, (None, Some(0)), Some(3.0), None),
                ),
            ];
            for (what, got, want) in cases {
                assert_eq!(got.dims(), &[b, sq, hq, d]);
                assert_eq!(got.dtype(), dtype);
                let diff = max_abs_diff(&got, &want);
                assert!(
                    diff < attn_tol(dtype),
                    "{dtype:?} {what} {:?}: {diff}",
                    (b, sq, sk, hq, hkv, d)
                );
            }
        }
        // Varlen: two sequences packed, against each one alone.
        let (hq, hkv, d) = (4, 2, 64);
        let lens = [(9usize, 20usize), (40, 40)];
        let qs: Vec<Tensor> = lens
            .iter()
            .enumerate()
            .map(|(i, l)| rand_tensor(&[1, l.0, hq, d], 10 + i as u64, dtype, &dev))
            .collect();
        let ks: Vec<Tensor> = lens
            .iter()
            .enumerate()
            .map(|(i, l)| rand_tensor(&[1, l.1, hkv, d], 20 + i as u64, dtype, &dev))
            .collect();
        let vs: Vec<Tensor> = lens
            .iter()
            .enumerate()
            .map(|(i, l)| rand_tensor(&[1, l.1, hkv, d], 30 + i as u64, dtype, &dev))
            .collect();
        let cat = |ts: &[Tensor]| {
            Tensor::cat(
                &ts.iter().map(|t| t.squeeze(0).unwrap()).collect::<Vec<_>>(),
                0,
            )
            .unwrap()
        };
        let seqlens_q = Tensor::new(&[0u32, 9, 49], &dev).unwrap();
        let seqlens_k = Tensor::new(&[0u32, 20, 60], &dev).unwrap();
        let scale = 0.125f32;
        let out = flash_attn_varlen(
            &cat(&qs),
            &cat(&ks),
            &cat(&vs),
            &seqlens_q,
            &seqlens_k,
            40,
            40,
            scale,
            true,
        )
        .unwrap();
        assert_eq!(out.dims(), &[49, hq, d]);
        let mut row = 0;
        for (i, l) in lens.iter().enumerate() {
            let want = unfused_cpu(
                &qs[i],
                &ks[i],
                &vs[i],
                scale as f64,
                (None, Some(0)),
                None,
                None,
            );
            let got = out.narrow(0, row, l.0).unwrap().unsqueeze(0).unwrap();
            let diff = max_abs_diff(&got, &want);
            assert!(
                diff < attn_tol(dtype),
                "{dtype:?} varlen sequence {i}: {diff}"
            );
            row += l.0;
        }
    }
    // On the CPU: an error naming the op, not a panic.
    let q = Tensor::zeros((1, 4, 2, 64), DType::F32, &Device::Cpu).unwrap();
    let e = flash_attn(&q, &q, &q, 1.0, true).unwrap_err().to_string();
    assert!(e.contains("flash_attn"), "{e}");
}

#[test]
#[ignore = "needs a GPU"]
fn sdpa_runs_fused_on_rocm() {
    let _lock = shared();
    let dev = rocm();
    for dtype in [DType::F32, DType::BF16] {
        // sdpa's order: (b, heads, seq, d); GQA without repeating k and v.
        let (b, sq, sk, hq, hkv, d) = (2, 24, 40, 8, 2, 128);
        let q = rand_tensor(&[b, hq, sq, d], 5, dtype, &dev);
        let k = rand_tensor(&[b, hkv, sk, d], 6, dtype, &dev);
        let v = rand_tensor(&[b, hkv, sk, d], 7, dtype, &dev);
        let mask = rand_tensor(&[b, 1, sq, sk], 8, dtype, &dev);
        let bshd = |t: &Tensor| t.transpose(1, 2).unwrap();
        let scale = 1.0 / (d as f64).sqrt();
        let got = candle_nn::ops::sdpa(&q, &k, &v, Some(&mask), true, scale as f32, 1.0).unwrap();
        assert_eq!(got.dims(), &[b, hq, sq, d]);
        let mask_full = mask.broadcast_as((b, hq, sq, sk)).unwrap();
        let want = unfused_cpu(
            &bshd(&q),
            &bshd(&k),
            &bshd(&v),
            scale,
            (None, Some(0)),
            None,
            Some(&mask_full),
        );
        let diff = max_abs_diff(&bshd(&got), &want);
        assert!(
            diff < attn_tol(dtype),
            "{dtype:?} sdpa causal + mask: {diff}"
        );
        // Softcapping (candle-nn's convention: 1.0 is off).
        let got = candle_nn::ops::sdpa(&q, &k, &v, None, false, 1.0, 4.0).unwrap();
        let want = unfused_cpu(
            &bshd(&q),
            &bshd(&k),
            &bshd(&v),
            1.0,
            (None, None),
            Some(4.0),
            None,
        );
        let diff = max_abs_diff(&bshd(&got), &want);
        assert!(diff < attn_tol(dtype), "{dtype:?} sdpa softcap: {diff}");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn llama_with_fused_attention_matches_unfused() {
    let _lock = exclusive(); // counts launches with the process-wide profile
    let dev = rocm();
    // Greedy tokens: the 125M decoder (head dim 64, GQA 12/4) with and without fused attention.
    let cfg = llama::config_125m();
    let fused_cfg = candle_transformers::models::llama::Config {
        use_flash_attn: true,
        ..cfg.clone()
    };
    let weights = llama::random_weights(&cfg, &dev, 99).unwrap();
    let plain = llama::build(&cfg, &weights, DType::F32, &dev).unwrap();
    let fused = llama::build(&fused_cfg, &weights, DType::F32, &dev).unwrap();
    let prompt: Vec<u32> = vec![1, 450, 4996, 17354, 1701, 432, 17204, 975, 29871, 13];
    let a = llama::generate(&plain, &prompt, 24, true).unwrap();
    let b = llama::generate(&fused, &prompt, 24, true).unwrap();
    let worst = llama::largest_logit_difference(&a.logits, &b.logits).unwrap();
    println!(
        "llama fused attention: tokens {:?}, largest logit difference {worst:.3e}",
        b.tokens
    );
    assert_eq!(a.tokens, b.tokens);
    assert!(worst < 1e-2, "{worst}");

    // A decode step: the fused decoder takes grouped-query attention as it is, so its only
    // `copy2d` launches are the KV-cache concatenations (2 per `Tensor::cat`, k and v per
    // layer); the unfused one adds `repeat_kv`'s copies (one per query head group). (The
    // second step is counted: the first concatenates the prompt's v, a strided view, which
    // takes the strided copy instead.)
    let copies_per_decode_step = |m: &llama::LlamaModel| {
        let mut cache = m.new_cache(true).unwrap();
        let ids = Tensor::new(prompt.as_slice(), &dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        m.forward(&ids, 0, &mut cache).unwrap();
        let next = Tensor::new(&[29871u32], &dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        m.forward(&next, prompt.len(), &mut cache).unwrap();
        hip_core::launch_profile_start_this_thread(false);
        let logits = m.forward(&next, prompt.len() + 1, &mut cache);
        let profile = hip_core::launch_profile_stop();
        logits.unwrap();
        profile
            .iter()
            .filter(|k| k.name.starts_with("copy2d"))
            .map(|k| k.launches)
            .sum::<u64>()
    };
    let layers = cfg.num_hidden_layers as u64;
    let n_rep = (cfg.num_attention_heads / cfg.num_key_value_heads) as u64;
    assert_eq!(copies_per_decode_step(&fused), 4 * layers);
    assert_eq!(copies_per_decode_step(&plain), (4 + 2 * n_rep) * layers);

    // Prefill of 2048 tokens (2 layers, 2048 positions) in bf16: last-position logits agree.
    let long = candle_transformers::models::llama::Config {
        num_hidden_layers: 2,
        max_position_embeddings: 2048,
        ..cfg.clone()
    };
    let weights = llama::random_weights(&long, &dev, 7).unwrap();
    let tokens: Vec<u32> = (0..2048u32).map(|i| (i * 7919 + 13) % 32000).collect();
    let ids = Tensor::new(tokens.as_slice(), &dev)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let mut logits = Vec::new();
    for flash in [false, true] {
        let c = candle_transformers::models::llama::Config {
            use_flash_attn: flash,
            ..long.clone()
        };
        let m = llama::build(&c, &weights, DType::BF16, &dev).unwrap();
        let mut cache = m.new_cache(true).unwrap();
        logits.push(m.forward(&ids, 0, &mut cache).unwrap());
    }
    let diff = max_abs_diff(&logits[0], &logits[1]);
    let scale = logits[0]
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    println!(
        "llama prefill 2048 bf16: largest logit difference {diff:.3e} (largest logit {scale:.3})"
    );
    assert!(diff <= 0.05 * scale.max(1.0), "{diff} vs {scale}");
}

/// The tensor-parallel decoder with one rank (an RCCL/NCCL communicator of one GPU) computes
/// the one-GPU decoder's function: same greedy tokens over 20 steps, logits of the prompt (and
/// of every later step) within f32 tolerance; bad device lists are typed errors.
#[test]
#[ignore = "needs a GPU"]
fn tp_llama_one_rank_matches_the_one_gpu_llama() {
    let _lock = shared();
    let dev = rocm();
    let cfg = llama::config_125m();
    let weights = llama::random_weights(&cfg, &dev, 2024).unwrap();
    let one = llama::build(&cfg, &weights, DType::F32, &dev).unwrap();
    let prompt: Vec<u32> = vec![1, 450, 4996, 17354, 1701, 432, 17204, 975];
    let steps = 20;
    let reference = llama::generate(&one, &prompt, steps, true).unwrap();
    let tp = tp_llama::generate_tp(
        std::slice::from_ref(&dev),
        &cfg,
        &weights,
        DType::F32,
        &prompt,
        steps,
    )
    .unwrap();
    let prompt_diff = max_abs_diff(&tp.logits[0], &reference.logits[0]);
    let worst = llama::largest_logit_difference(&tp.logits, &reference.logits).unwrap();
    println!(
        "tp_llama 1 rank: tokens {:?}\n  one-GPU llama tokens {:?}\n  prompt logits max |diff| \
         {prompt_diff:.3e}, over {steps} steps {worst:.3e}; decode {:.1} tokens/s (one-GPU llama \
         {:.1}), build {:?}",
        tp.tokens,
        reference.tokens,
        tp.decode_tokens_per_sec(),
        reference.decode_tokens_per_sec(),
        tp.build
    );
    assert_eq!(tp.nranks, 1);
    assert_eq!(tp.tokens.len(), steps);
    assert_eq!(tp.tokens, reference.tokens);
    assert!(prompt_diff < 1e-4, "prompt logits differ by {prompt_diff}");
    assert!(worst < 1e-3, "logits differ by {worst}");

    // Two ranks on one GPU, and a CPU rank next to a GPU rank: errors, not panics or hangs.
    let tiny = llama::config_tiny();
    let w = llama::random_weights(&tiny, &Device::Cpu, 1).unwrap();
    for devices in [vec![rocm(), rocm()], vec![rocm(), Device::Cpu]] {
        let r = tp_llama::generate_tp(&devices, &tiny, &w, DType::F32, &[1, 2, 3], 2);
        assert!(
            matches!(r, Err(candle_rocm_models::Error::InvalidInput(_))),
            "{r:?}"
        );
    }
}

/// One rank per GPU (as many as there are; 12 heads / 4 kv heads split over 2 or 4, or a
/// 16-head / 8-kv-head variant of the 125M decoder over 8): the same greedy tokens as the one-GPU
/// decoder over 24 steps. Returns early, saying so, with fewer than 2 GPUs.
#[test]
#[ignore = "needs a GPU"]
fn tp_llama_on_every_gpu_matches_one_gpu() {
    let _lock = shared();
    let count = hip_core::device_count().unwrap_or(0);
    if count < 2 {
        println!(
            "tp_llama_on_every_gpu_matches_one_gpu: {count} ROCm device(s), needs 2 or more: \
             nothing checked"
        );
        return;
    }
    let base = llama::config_125m();
    let wide = candle_transformers::models::llama::Config {
        num_attention_heads: 16,
        num_key_value_heads: 8,
        ..base.clone()
    };
    // The largest rank count up to `count` that one of the two configurations splits over.
    let (cfg, n) = (2..=count)
        .rev()
        .find_map(|n| {
            [&base, &wide]
                .into_iter()
                .find(|c| tp_llama::plan(c, n).is_ok())
                .map(|c| (c.clone(), n))
        })
        .expect("2 ranks split the 125M configuration");
    let devices: Vec<Device> = (0..n).map(|i| Device::new_rocm(i).unwrap()).collect();
    let weights = llama::random_weights(&cfg, &devices[0], 31).unwrap();
    let one = llama::build(&cfg, &weights, DType::F32, &devices[0]).unwrap();
    let prompt: Vec<u32> = vec![1, 450, 4996, 17354, 1701, 432, 17204, 975, 29871, 13];
    let steps = 24;
    let reference = llama::generate(&one, &prompt, steps, true).unwrap();
    let tp = tp_llama::generate_tp(&devices, &cfg, &weights, DType::F32, &prompt, steps).unwrap();
    let worst = llama::largest_logit_difference(&tp.logits, &reference.logits).unwrap();
    println!(
        "tp_llama {n} ranks of {count} GPUs ({} heads / {} kv heads): tokens {:?}\n  one-GPU tokens \
         {:?}\n  largest logit difference {worst:.3e}; decode {:.1} tokens/s on {n} GPUs, {:.1} on one",
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        tp.tokens,
        reference.tokens,
        tp.decode_tokens_per_sec(),
        reference.decode_tokens_per_sec()
    );
    assert_eq!(tp.nranks, n);
    assert_eq!(tp.tokens, reference.tokens);
    assert!(worst < 1e-2, "logits differ by {worst}");
}

/// candle-nn's `KvCache` on the device: every append (prompt-sized and one-row, across the
/// buffer's growth, f32 and bf16) gives the CPU's keys and values bit for bit, and a one-row
/// append is one launch for both (`copy2d_pair_*`, through `Tensor::slice_set_pair`); key and
/// value caches of different dtypes take two copies and still match.
#[test]
#[ignore = "needs a GPU"]
fn kv_cache_appends_keys_and_values_in_one_launch() {
    let _shared = shared();
    let dev = rocm();
    for (k_dtype, v_dtype) in [
        (DType::F32, DType::F32),
        (DType::BF16, DType::BF16),
        (DType::F32, DType::F16),
    ] {
        // Grows by 4 positions: the appends below cross that several times.
        let (mut gpu, mut cpu) = (
            candle_nn::kv_cache::KvCache::new(2, 4),
            candle_nn::kv_cache::KvCache::new(2, 4),
        );
        let (mut total, mut capacity) = (0, 0);
        for (step, rows) in [3usize, 1, 1, 2, 5, 1, 1].into_iter().enumerate() {
            // The buffer is made (or grown by a `Tensor::cat`) where the rows do not fit.
            let fits = total + rows <= capacity;
            while total + rows > capacity {
                capacity += 4;
            }
            let make = |seed: u64, dtype: DType| {
                Tensor::from_vec(
                    host_values(2 * 3 * rows * 8, seed),
                    (2, 3, rows, 8),
                    &Device::Cpu,
                )
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
            };
            let (k, v) = (
                make(2 * step as u64, k_dtype),
                make(2 * step as u64 + 1, v_dtype),
            );
            let (ck, cv) = cpu.append(&k, &v).unwrap();
            let (kd, vd) = (k.to_device(&dev).unwrap(), v.to_device(&dev).unwrap());
            hip_core::launch_profile_start_this_thread(false);
            let appended = gpu.append(&kd, &vd);
            let profile = hip_core::launch_profile_stop();
            let (gk, gv) = appended.unwrap();
            total += rows;
            for (label, g, c) in [("keys", &gk, &ck), ("values", &gv, &cv)] {
                assert_eq!(
                    g.dims(),
                    [2, 3, total, 8],
                    "{k_dtype:?}/{v_dtype:?} step {step}"
                );
                let bits = |t: &Tensor| {
                    t.to_dtype(DType::F32)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1::<f32>()
                        .unwrap()
                        .iter()
                        .map(|x| x.to_bits())
                        .collect::<Vec<_>>()
                };
                assert_eq!(
                    bits(g),
                    bits(c),
                    "{k_dtype:?}/{v_dtype:?} step {step}: {label} differ from the CPU's"
                );
            }
            let count = |prefix: &str| hip_core::launches_with_prefix(&profile, prefix);
            // Rows that fit the buffer: one launch for both (two where the dtypes differ).
            if fits {
                let pairs = count("copy2d_pair_");
                let singles = count("copy2d_") - pairs;
                let want = if k_dtype == v_dtype { (1, 0) } else { (0, 2) };
                assert_eq!(
                    (pairs, singles),
                    want,
                    "{k_dtype:?}/{v_dtype:?} step {step}: launches {profile:?}"
                );
            }
        }
    }
}

/// candle-nn's `KvCache::append_with_rope` on the device (one `rope_kv` launch a step through
/// `Tensor::rope_kv_append`) against the CPU (rope, then append): the rotated queries and every
/// key and value in the cache after each step, for prompt-sized and one-row steps across the
/// buffer's growth, both rotations (`rope_i`, `rope`), grouped-query heads, a batch of 2, the
/// q/k heads and the values taken from one q/k/v row as a model takes them (views with
/// offsets, transposed for steps of several positions) and tables narrowed at the position.
#[test]
#[ignore = "needs a GPU"]
fn kv_cache_append_with_rope_matches_cpu() {
    let _shared = shared();
    let dev = rocm();
    let (hq, hk, d, max_pos) = (4usize, 2usize, 8usize, 32usize);
    let table = |seed: u64, dtype: DType, device: &Device| {
        Tensor::from_vec(
            host_values(max_pos * d / 2, seed),
            (max_pos, d / 2),
            &Device::Cpu,
        )
        .and_then(|t| t.to_dtype(dtype))
        .and_then(|t| t.to_device(device))
        .unwrap()
    };
    for dtype in [DType::F32, DType::BF16, DType::F16, DType::F64] {
        // Largest difference from the CPU's rotation: a few units in the last place of values
        // up to ~3 (the CPU rounds f16/bf16 products to the type; the device computes in f32).
        let tol = match dtype {
            DType::BF16 => 6.25e-2,
            DType::F16 => 8e-3,
            DType::F64 => 1e-6,
            _ => 1e-5,
        };
        for (b, interleaved) in [(1usize, true), (2, true), (2, false), (1, false)] {
            let label = format!("{dtype:?} b={b} interleaved={interleaved}");
            let (mut gpu, mut cpu) = (
                candle_nn::kv_cache::KvCache::new(2, 4),
                candle_nn::kv_cache::KvCache::new(2, 4),
            );
            let (cos_c, sin_c) = (table(7, dtype, &Device::Cpu), table(8, dtype, &Device::Cpu));
            let (cos_g, sin_g) = (table(7, dtype, &dev), table(8, dtype, &dev));
            let (mut pos, mut capacity) = (0usize, 0usize);
            for (step, t) in [3usize, 1, 1, 2, 5, 1, 1].into_iter().enumerate() {
                let fits = pos + t <= capacity;
                while pos + t > capacity {
                    capacity += 4;
                }
                // One q/k/v row per position, as a fused q/k/v product gives it.
                let width = (hq + 2 * hk) * d;
                let qkv = Tensor::from_vec(
                    host_values(b * t * width, 100 + step as u64),
                    (b, t, width),
                    &Device::Cpu,
                )
                .and_then(|x| x.to_dtype(dtype))
                .unwrap();
                let split = |x: &Tensor| {
                    let heads = |start: usize, n: usize| {
                        x.narrow(2, start * d, n * d)
                            .and_then(|y| y.reshape((b, t, n, d)))
                            .and_then(|y| y.transpose(1, 2))
                            .unwrap()
                    };
                    (heads(0, hq + hk), heads(hq + hk, hk))
                };
                let (qk_c, v_c) = split(&qkv);
                let qkv_g = qkv.to_device(&dev).unwrap();
                let (qk_g, v_g) = split(&qkv_g);
                let narrow = |x: &Tensor| x.narrow(0, pos, t).unwrap();
                let (q_ref, k_ref, v_ref) = cpu
                    .append_with_rope(
                        &qk_c,
                        hq,
                        &v_c,
                        &narrow(&cos_c),
                        &narrow(&sin_c),
                        interleaved,
                    )
                    .unwrap();
                hip_core::launch_profile_start_this_thread(false);
                let out = gpu.append_with_rope(
                    &qk_g,
                    hq,
                    &v_g,
                    &narrow(&cos_g),
                    &narrow(&sin_g),
                    interleaved,
                );
                let profile = hip_core::launch_profile_stop();
                let (q, k, v) = out.unwrap();
                pos += t;
                assert_eq!(q.dims(), [b, hq, t, d], "{label} step {step}");
                assert_eq!(k.dims(), [b, hk, pos, d], "{label} step {step}");
                assert_eq!(v.dims(), [b, hk, pos, d], "{label} step {step}");
                for (what, g, c, tol) in [
                    ("queries", &q, &q_ref, tol),
                    ("keys", &k, &k_ref, tol),
                    ("values", &v, &v_ref, 0.0),
                ] {
                    let diff = max_abs_diff(g, c);
                    assert!(
                        diff <= tol,
                        "{label} step {step}: {what} differ from the CPU's by {diff}"
                    );
                }
                // The rotation and both caches' rows in one launch; a step of one position
                // that fits the buffer with one sequence (a decode step: the q/k and v views
                // are contiguous) launches nothing else.
                let count = |prefix: &str| hip_core::launches_with_prefix(&profile, prefix);
                let fused = count(if interleaved {
                    "rope_i_kv_"
                } else {
                    "rope_kv_"
                });
                assert_eq!(fused, 1, "{label} step {step}: launches {profile:?}");
                if fits && t == 1 && b == 1 {
                    assert_eq!(
                        profile.iter().map(|p| p.launches).sum::<u64>(),
                        1,
                        "{label} step {step}: launches {profile:?}"
                    );
                }
            }
        }
    }
}
