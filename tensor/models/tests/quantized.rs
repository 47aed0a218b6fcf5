//! Quantized GGUF models on a ROCm device (`Device::new_rocm(0)`) against Candle's CPU backend,
//! through candle-transformers' `quantized_llama` and `quantized_qwen3_moe`:
//!
//! * a random llama-architecture GGUF (rows of 256, so every block type applies) per GGML type:
//!   loading, the prompt's logits, and 16 decode steps with the KV cache, fed the CPU's tokens
//!   (teacher forcing, so that a near-tie cannot make the two runs diverge), each step's logits
//!   compared with the CPU's; the greedy tokens are compared as well;
//! * SmolLM2-135M-Instruct (Q4_1, from `scripts/fetch-smollm2.sh`; `CANDLE_ROCM_SMOLLM2_GGUF`
//!   names the file, e.g. the first layers of it written by `gguf_tool truncate`, since the GPU
//!   machine takes at most 64 MiB per run): greedy generation of 64 tokens for 3 prompts gives
//!   the CPU's tokens; the CPU reference computes with the dequantized weights in f32
//!   (`CANDLE_DEQUANTIZE_ALL`, the arithmetic of our kernels: f32 activations times exact
//!   dequantized weights), and the agreement with the CPU's own quantized-activation path is
//!   reported; the default 8-bit-activation kernel's tokens are reported beside both;
//!
//! (candle-transformers' `quantized_qwen3_moe` runs its experts through candle-nn's
//! `moe_gemm_gguf`, which Candle implements for CUDA only: the CPU cannot run it, so there is no
//! CPU reference for it; `indexed_moe_forward` itself is checked against f64 in candle-rocm's
//! conformance suite.)
//!
//! Every test needs a GPU (`#[ignore = "needs a GPU"]`). On NVIDIA: `HIP_PLATFORM=nvidia`.

use std::path::PathBuf;

use candle_core::quantized::GgmlDType;
use candle_core::{DType, Device, Tensor};
use candle_rocm::{QuantizedMatvec, RocmDeviceExt};
use candle_rocm_models::gguf_tools::{
    load_quantized_llama, write_random_llama_gguf, RandomLlamaConfig,
};
use candle_transformers::models::quantized_llama::ModelWeights;

fn rocm() -> Device {
    Device::new_rocm(0).expect("a ROCm device (HIP_PLATFORM=nvidia on NVIDIA)")
}

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "candle-rocm-quantized-{name}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn logits_f32(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .to_device(&Device::Cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// max |a - b| / max |b|.
fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b
        .iter()
        .fold(0f64, |m, &x| m.max((x as f64).abs()))
        .max(1e-6);
    a.iter()
        .zip(b)
        .map(|(&x, &y)| ((x - y) as f64).abs())
        .fold(
            0f64,
            |m, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
        )
        / scale
}

/// Runs the prompt then `steps` decode steps on both models, feeding both the CPU's greedy
/// tokens; returns the worst relative logit error and the GPU's own argmax at each step.
fn teacher_forced(
    cpu: &mut ModelWeights,
    gpu: &mut ModelWeights,
    prompt: &[u32],
    steps: usize,
) -> (f64, Vec<u32>, Vec<u32>) {
    let dev = rocm();
    let mut worst = 0f64;
    let (mut cpu_tokens, mut gpu_tokens) = (Vec::new(), Vec::new());
    let mut input = prompt.to_vec();
    let mut pos = 0;
    for _ in 0..=steps {
        let xc = Tensor::new(input.as_slice(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let xg = Tensor::new(input.as_slice(), &dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let lc = logits_f32(&cpu.forward(&xc, pos).unwrap());
        let lg = logits_f32(&gpu.forward(&xg, pos).unwrap());
        worst = worst.max(rel_err(&lg, &lc));
        let (tc, tg) = (argmax(&lc), argmax(&lg));
        cpu_tokens.push(tc);
        gpu_tokens.push(tg);
        pos += input.len();
        input = vec![tc];
    }
    (worst, cpu_tokens, gpu_tokens)
}

#[test]
#[ignore = "needs a GPU"]
fn random_llama_gguf_matches_the_cpu_for_every_block_type() {
    let dir = tmp_dir("llama");
    let cfg = RandomLlamaConfig::tiny();
    let prompt: Vec<u32> = vec![1, 17, 300, 42, 99, 5, 511];
    let mut report = Vec::new();
    for dtype in [
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q5_1,
        GgmlDType::Q8_0,
        GgmlDType::Q2K,
        GgmlDType::Q3K,
        GgmlDType::Q4K,
        GgmlDType::Q5K,
        GgmlDType::Q6K,
        GgmlDType::F16,
    ] {
        let path = dir.join(format!("{dtype:?}.gguf"));
        write_random_llama_gguf(&path, &cfg, dtype, 11).unwrap();
        let mut cpu = load_quantized_llama(&path, &Device::Cpu).unwrap();
        let mut gpu = load_quantized_llama(&path, &rocm()).unwrap();
        let (err, ct, gt) = teacher_forced(&mut cpu, &mut gpu, &prompt, 16);
        let agree = ct.iter().zip(&gt).filter(|(a, b)| a == b).count();
        report.push(format!(
            "{dtype:?}: worst relative logit error {err:.2e}, argmax agrees {agree}/{}",
            ct.len()
        ));
        // The CPU quantizes activations to 8 bits (its error against exact math is ~1e-2 of
        // the logits' range); so does our default matrix-vector kernel (32-element blocks with
        // f32 scales, where the CPU uses q8_0/q8_K), and the prompt's GEMM path is f32.
        assert!(
            err < 3e-2,
            "{dtype:?}: relative logit error {err:.3e}\n{report:#?}"
        );
    }
    println!("{}", report.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The SmolLM2 GGUF: `CANDLE_ROCM_SMOLLM2_GGUF`, else the fetched model's directory.
fn smollm2_path() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("CANDLE_ROCM_SMOLLM2_GGUF") {
        return Some(PathBuf::from(p));
    }
    candle_rocm_models::gguf_tools::smollm2_gguf()
}

const PROMPTS: [&str; 3] = [
    "What is the capital of France?",
    "Write a haiku about GPUs.",
    "Explain in one sentence why the sky is blue.",
];

/// Loads the CPU reference model in a thread of its own with `CANDLE_DEQUANTIZE_ALL` set (it is
/// read once per thread by candle's `QMatMul`), so that the CPU computes with the dequantized
/// weights in f32; the thread generates the tokens of every prompt.
fn cpu_tokens(
    path: &std::path::Path,
    prompts: &[Vec<u32>],
    n: usize,
    dequantize_all: bool,
) -> Vec<Vec<u32>> {
    let path = path.to_path_buf();
    let prompts = prompts.to_vec();
    std::thread::spawn(move || {
        if dequantize_all {
            std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1");
        }
        let mut m = load_quantized_llama(&path, &Device::Cpu).unwrap();
        if dequantize_all {
            std::env::remove_var("CANDLE_DEQUANTIZE_ALL");
        }
        prompts
            .iter()
            .map(|p| {
                candle_rocm_models::gguf_tools::greedy_generate(&mut m, p, n, &Device::Cpu).unwrap()
            })
            .collect()
    })
    .join()
    .unwrap()
}

#[test]
#[ignore = "needs a GPU"]
fn smollm2_generates_the_cpu_tokens() {
    let Some(path) = smollm2_path() else {
        panic!("SmolLM2 not found: run scripts/fetch-smollm2.sh or set CANDLE_ROCM_SMOLLM2_GGUF");
    };
    let tok = candle_rocm_models::gguf_tools::load_gguf_tokenizer(&path).unwrap();
    let prompts: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| {
            let text = format!("<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n");
            tok.encode(text, false).unwrap().get_ids().to_vec()
        })
        .collect();
    let n = 64;
    let want = cpu_tokens(&path, &prompts, n, true);
    let cpu_q8 = cpu_tokens(&path, &prompts, n, false);
    let dev = rocm();
    // The float matrix-vector kernel: the CPU reference's arithmetic (dequantized weights times
    // f32 activations), so the tokens must agree exactly.
    dev.as_rocm_device()
        .unwrap()
        .set_quantized_matvec(QuantizedMatvec::FloatActivations);
    let mut gpu = load_quantized_llama(&path, &dev).unwrap();
    for (i, p) in prompts.iter().enumerate() {
        let got = candle_rocm_models::gguf_tools::greedy_generate(&mut gpu, p, n, &dev).unwrap();
        let same_q8 = got
            .iter()
            .zip(&cpu_q8[i])
            .take_while(|(a, b)| a == b)
            .count();
        println!(
            "prompt {i}: {:?}\n  gpu: {:?}\n  identical to the CPU (f32 weights) for {} of {n} \
             tokens, to the CPU's q8-activation path for its first {same_q8}",
            PROMPTS[i],
            tok.decode(&got, false).unwrap_or_default(),
            got.iter().zip(&want[i]).take_while(|(a, b)| a == b).count(),
        );
        assert_eq!(got, want[i], "prompt {i}: GPU tokens differ from the CPU's");
    }
    // The default 8-bit-activation kernel: reported beside both CPU paths (its rounding is its
    // own, so near-ties may go either way; its arithmetic is checked in the conformance suite).
    let dev8 = rocm();
    let mut gpu8 = load_quantized_llama(&path, &dev8).unwrap();
    for (i, p) in prompts.iter().enumerate() {
        let got = candle_rocm_models::gguf_tools::greedy_generate(&mut gpu8, p, n, &dev8).unwrap();
        let lead = |r: &[u32]| got.iter().zip(r).take_while(|(a, b)| a == b).count();
        println!(
            "prompt {i}, 8-bit activations: {:?}\n  identical to the CPU (f32 weights) for {} of \
             {n} tokens, to the CPU's q8-activation path for {}",
            tok.decode(&got, false).unwrap_or_default(),
            lead(&want[i]),
            lead(&cpu_q8[i]),
        );
    }
}
