//! Quantized GGUF models on a ROCm device (`Device::new_rocm(0)`) against Candle's CPU backend,
//! through candle-transformers' `quantized_llama` and `quantized_qwen3_moe`:
//!
//! * a random llama-architecture GGUF (rows of 256, so every block type applies) per GGML type:
//!   loading, the prompt's logits, and 16 decode steps with the KV cache, fed the CPU's tokens
//!   (teacher forcing, so that a near-tie cannot make the runs diverge); each step's logits on
//!   the GPU and on the CPU's quantized path are compared with the CPU running the dequantized
//!   weights in f32 (the exact model): the GPU's error must stay within 1.5x the CPU's own;
//! * SmolLM2-135M-Instruct (Q4_1, from `scripts/fetch-smollm2.sh`; `CANDLE_ROCM_SMOLLM2_GGUF`
//!   names the file, e.g. the first layers of it written by `gguf_tool truncate`, since the GPU
//!   machine takes at most 64 MiB per run): greedy generation of 64 tokens for 3 prompts gives
//!   the CPU's tokens; the CPU reference computes with the dequantized weights in f32
//!   (`CANDLE_DEQUANTIZE_ALL`, the arithmetic of our kernels: f32 activations times exact
//!   dequantized weights), and the agreement with the CPU's own quantized-activation path is
//!   reported; the default 8-bit-activation kernel's tokens are reported beside both;
//! * decode steps take the fused attention (candle-nn's `sdpa`, routed to our kernels by the
//!   Candle patch) where our kernels have the head dim and the unfused path where not, both
//!   matching the CPU;
//! * truncated and corrupt GGUF files, and blocks that do not match their shape, are errors.
//!
//! * a random qwen3moe GGUF (every block's MLP 8 experts, 2 used per token) per GGML type,
//!   through `quantized_qwen3_moe`: its experts go through candle-nn's `moe_gemm_gguf`, which
//!   Candle implements for CUDA only and our Candle patch runs on other devices through
//!   `QTensor::indexed_moe_forward` (on the CPU: each expert's rows through the CPU's quantized
//!   matmul; on ours: one `qmoe_*` launch); with the float kernels the logits match the exact
//!   model (the same file with every weight dequantized to F32) within f32 rounding, with the
//!   default 8-bit activations the errors are reported (a top-2-of-8 expert choice is moved by
//!   any rounding where two router scores are close, on the CPU's 8-bit path as on ours).
//!
//! Every test needs a GPU (`#[ignore = "needs a GPU"]`). On NVIDIA: `HIP_PLATFORM=nvidia`.

use std::path::PathBuf;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use candle_rocm::{QuantizedMatvec, RocmDeviceExt};
use candle_rocm_models::gguf_tools::{
    load_quantized_llama, load_quantized_qwen3_moe, requantize, write_random_llama_gguf,
    write_random_qwen3moe_gguf, RandomLlamaConfig, RandomQwen3MoeConfig,
};
use candle_transformers::models::quantized_llama::ModelWeights;
use candle_transformers::models::quantized_qwen3_moe::GGUFQWenMoE;

/// Serialises this file's tests: one of them counts launches by kernel name, which are
/// process-wide.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

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

/// The worst relative logit errors of one teacher-forced run.
struct Forced {
    /// The GPU against the CPU's quantized path.
    gpu_vs_cpu: f64,
    /// The GPU against the dequantized weights in f32 (exact weights).
    gpu_vs_exact: f64,
    /// The CPU's quantized path against the same.
    cpu_vs_exact: f64,
    /// The CPU's greedy tokens (fed to all three models).
    cpu_tokens: Vec<u32>,
    /// The GPU's own argmax at each step.
    gpu_tokens: Vec<u32>,
}

impl Forced {
    /// One report line: the worst errors and how often the GPU's argmax is the CPU's token.
    fn summary(&self, label: &str, exact: &str) -> String {
        let agree = self
            .cpu_tokens
            .iter()
            .zip(&self.gpu_tokens)
            .filter(|(a, b)| a == b)
            .count();
        format!(
            "{label}: worst relative logit error against the exact ({exact}) model: GPU {:.2e}, \
             CPU {:.2e}; GPU against CPU {:.2e}; argmax agrees {agree}/{}",
            self.gpu_vs_exact,
            self.cpu_vs_exact,
            self.gpu_vs_cpu,
            self.cpu_tokens.len()
        )
    }
}

/// The GGML block types of the random models (every quantized type Candle writes to GGUF).
const BLOCK_TYPES: [GgmlDType; 10] = [
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
];

/// A causal language model: the logits of the last position of one sequence.
trait CausalLm {
    fn logits(&mut self, input: &Tensor, pos: usize) -> Tensor;
}

impl CausalLm for ModelWeights {
    fn logits(&mut self, input: &Tensor, pos: usize) -> Tensor {
        self.forward(input, pos).unwrap()
    }
}

impl CausalLm for GGUFQWenMoE {
    fn logits(&mut self, input: &Tensor, pos: usize) -> Tensor {
        self.forward(input, pos).unwrap()
    }
}

/// Runs the prompt then `steps` decode steps on the three models, feeding all of them the CPU's
/// greedy tokens (teacher forcing, so that a near-tie cannot make the runs diverge).
fn teacher_forced<M: CausalLm>(
    cpu: &mut M,
    exact: &mut M,
    gpu: &mut M,
    prompt: &[u32],
    steps: usize,
) -> Forced {
    let dev = rocm();
    let mut f = Forced {
        gpu_vs_cpu: 0.0,
        gpu_vs_exact: 0.0,
        cpu_vs_exact: 0.0,
        cpu_tokens: Vec::new(),
        gpu_tokens: Vec::new(),
    };
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
        let lc = logits_f32(&cpu.logits(&xc, pos));
        let le = logits_f32(&exact.logits(&xc, pos));
        let lg = logits_f32(&gpu.logits(&xg, pos));
        f.gpu_vs_cpu = f.gpu_vs_cpu.max(rel_err(&lg, &lc));
        f.gpu_vs_exact = f.gpu_vs_exact.max(rel_err(&lg, &le));
        f.cpu_vs_exact = f.cpu_vs_exact.max(rel_err(&lc, &le));
        let (tc, tg) = (argmax(&lc), argmax(&lg));
        f.cpu_tokens.push(tc);
        f.gpu_tokens.push(tg);
        pos += input.len();
        input = vec![tc];
    }
    f
}

/// The model on the CPU with every weight dequantized to f32 (`CANDLE_DEQUANTIZE_ALL`, read once
/// per thread by candle's `QMatMul` when it is built: loaded in a thread of its own): the exact
/// arithmetic of the dequantized weights.
fn cpu_exact_model(path: &std::path::Path) -> ModelWeights {
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1");
        let m = load_quantized_llama(&path, &Device::Cpu).unwrap();
        std::env::remove_var("CANDLE_DEQUANTIZE_ALL");
        m
    })
    .join()
    .unwrap()
}

#[test]
#[ignore = "needs a GPU"]
fn random_llama_gguf_matches_the_cpu_for_every_block_type() {
    let _serial = one_at_a_time();
    let dir = tmp_dir("llama");
    let cfg = RandomLlamaConfig::tiny();
    let prompt: Vec<u32> = vec![1, 17, 300, 42, 99, 5, 511];
    let mut report = Vec::new();
    for dtype in BLOCK_TYPES.into_iter().chain([GgmlDType::F16]) {
        let path = dir.join(format!("{dtype:?}.gguf"));
        write_random_llama_gguf(&path, &cfg, dtype, 11).unwrap();
        let mut cpu = load_quantized_llama(&path, &Device::Cpu).unwrap();
        let mut exact = cpu_exact_model(&path);
        let mut gpu = load_quantized_llama(&path, &rocm()).unwrap();
        let f = teacher_forced(&mut cpu, &mut exact, &mut gpu, &prompt, 16);
        report.push(f.summary(&format!("{dtype:?}"), "dequantized-weight"));
        // Both the CPU and our default matrix-vector kernel round the activations to 8 bits
        // (the CPU per 32 or 256 elements, q8_0/q8_K; ours per 32 with f32 scales), and the
        // prompt's GEMM path is f32: our error against the exact model must stay within the
        // CPU's own (x 1.5, as the conformance tests), plus a floor for the f32 sums.
        let bound = 1.5 * f.cpu_vs_exact + 1e-3;
        assert!(
            f.gpu_vs_exact <= bound,
            "{dtype:?}: relative logit error {:.3e} against the exact model, bound {bound:.3e}\n\
             {report:#?}",
            f.gpu_vs_exact
        );
    }
    println!("{}", report.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// candle-transformers' quantized qwen3 MoE, a random model per expert block type (the types
/// Candle's CUDA MoE kernels take, Q8_0 and Q2K-Q6K, and the rest), the prompt and 16 decode
/// steps teacher-forced as for the llama models, the exact model being the same file
/// dequantized to F32:
///
/// * with the float matrix-vector kernels (`FloatActivations`: the exact product of the
///   dequantized weights, the exact model's arithmetic) every step's logits match the exact
///   model's within f32 rounding: the routing, the experts' weights and the sorted ids'
///   round trip are right;
/// * with the default 8-bit activations the errors against the exact model and the CPU's
///   quantized path are reported, not bounded: a token's experts are the top 2 of 8 router
///   scores, a choice that rounding moves whenever two scores are close, and both the CPU's
///   8-bit path and ours round differently from the exact model (the 8-bit MoE product itself
///   is checked against f64 and the one-row product in candle-rocm's conformance suite);
/// * each decode step runs one `qmoe_*` launch per expert product (gate, up, down) and layer;
/// * an expert id out of range is an error naming the type and shape on the CPU and an error
///   at the next read on the GPU.
#[test]
#[ignore = "needs a GPU"]
fn random_qwen3_moe_gguf_matches_the_cpu_for_every_block_type() {
    let _serial = one_at_a_time();
    let dir = tmp_dir("qwen3moe");
    let cfg = RandomQwen3MoeConfig::tiny();
    let prompt: Vec<u32> = vec![3, 200, 17, 88, 401, 9, 256, 511];
    let dev = rocm();
    let rocm_dev = dev.as_rocm_device().unwrap();
    let mut report = Vec::new();
    for dtype in BLOCK_TYPES {
        let path = dir.join(format!("{dtype:?}.gguf"));
        let exact_path = dir.join(format!("{dtype:?}-f32.gguf"));
        write_random_qwen3moe_gguf(&path, &cfg, dtype, 13).unwrap();
        requantize(&path, &exact_path, GgmlDType::F32).unwrap();
        let load =
            |p: &std::path::Path, d: &Device| load_quantized_qwen3_moe(p, d, DType::F32).unwrap();
        for kind in [
            QuantizedMatvec::FloatActivations,
            QuantizedMatvec::Int8Activations,
        ] {
            rocm_dev.set_quantized_matvec(kind);
            let mut cpu = load(&path, &Device::Cpu);
            let mut exact = load(&exact_path, &Device::Cpu);
            let mut gpu = load(&path, &dev);
            let f = teacher_forced(&mut cpu, &mut exact, &mut gpu, &prompt, 16);
            report.push(f.summary(&format!("qwen3moe {dtype:?} {kind:?}"), "F32"));
            if kind == QuantizedMatvec::FloatActivations {
                assert!(
                    f.gpu_vs_exact <= 1e-4,
                    "qwen3moe {dtype:?}: relative logit error {:.3e} against the exact model \
                     with float activations\n{report:#?}",
                    f.gpu_vs_exact
                );
                continue;
            }
            // One more decode step, its launches counted: the experts' three products a layer.
            let x = Tensor::new(&[f.cpu_tokens[0]], &dev)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            hip_core::launch_profile_start_this_thread(false);
            let logits = gpu.forward(&x, prompt.len() + 17).unwrap();
            let profile = hip_core::launch_profile_stop();
            assert!(logits_f32(&logits).iter().all(|v| v.is_finite()));
            assert_eq!(
                (
                    hip_core::launches_with_prefix(&profile, "qmoe_"),
                    hip_core::launches_with_prefix(&profile, "qmoe_s8_")
                ),
                (3 * cfg.num_layers as u64, 3 * cfg.num_layers as u64),
                "qwen3moe {dtype:?}: launches {profile:?}"
            );
        }
    }
    rocm_dev.set_quantized_matvec(QuantizedMatvec::default());
    println!("{}", report.join("\n"));

    // An expert id out of range: the CPU's error names the type and shape; ours is reported
    // by the next read of the device, nothing written out of bounds.
    let w = QTensor::quantize(
        &Tensor::ones((4, 32, 256), DType::F32, &Device::Cpu).unwrap(),
        GgmlDType::Q4K,
    )
    .unwrap();
    let x = Tensor::ones((2, 1, 256), DType::F32, &Device::Cpu).unwrap();
    let ids = Tensor::new(&[[0u32, 1], [3, 4]], &Device::Cpu).unwrap();
    let err = w.indexed_moe_forward(&x, &ids).unwrap_err().to_string();
    assert!(
        err.contains("expert id 4") && err.contains("Q4K") && err.contains("[4, 32, 256]"),
        "{err}"
    );
    let dev = rocm();
    let wg = QTensor::quantize_onto(
        &Tensor::ones((4, 32, 256), DType::F32, &Device::Cpu).unwrap(),
        GgmlDType::Q4K,
        &dev,
    )
    .unwrap();
    let bad = wg
        .indexed_moe_forward(&x.to_device(&dev).unwrap(), &ids.to_device(&dev).unwrap())
        .and_then(|y| y.to_vec3::<f32>());
    assert!(
        bad.is_err(),
        "an expert id of 4 with 4 experts must be an error"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Decode steps (one query row) take the fused attention through candle-nn's `sdpa` where our
/// kernels have the head dim (64 here), and candle-transformers' unfused path where they do not
/// (16): both match the CPU as closely as the CPU matches the exact model.
#[test]
#[ignore = "needs a GPU"]
fn decode_attention_is_fused_where_sdpa_has_the_head_dim() {
    let _serial = one_at_a_time();
    let dir = tmp_dir("sdpa");
    let prompt: Vec<u32> = vec![1, 17, 300, 42, 99];
    for (heads, kv_heads, fused) in [(4, 2, true), (16, 8, false)] {
        let cfg = RandomLlamaConfig {
            num_heads: heads,
            num_kv_heads: kv_heads,
            ..RandomLlamaConfig::tiny()
        };
        let d = cfg.head_dim();
        let path = dir.join(format!("q8_d{d}.gguf"));
        write_random_llama_gguf(&path, &cfg, GgmlDType::Q8_0, 5).unwrap();
        let mut cpu = load_quantized_llama(&path, &Device::Cpu).unwrap();
        let mut exact = cpu_exact_model(&path);
        let mut gpu = load_quantized_llama(&path, &rocm()).unwrap();
        let f = teacher_forced(&mut cpu, &mut exact, &mut gpu, &prompt, 6);
        let bound = 1.5 * f.cpu_vs_exact + 1e-3;
        assert!(
            f.gpu_vs_exact <= bound,
            "head dim {d}: relative logit error {:.3e} against the exact model, bound {bound:.3e} \
             (the CPU's {:.3e})",
            f.gpu_vs_exact,
            f.cpu_vs_exact
        );
        // One more decode step, its launches counted by kernel name.
        let x = Tensor::new(&[f.cpu_tokens[0]], &rocm())
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        hip_core::launch_profile_start_this_thread(false);
        let logits = gpu.forward(&x, prompt.len() + 6).unwrap();
        let profile = hip_core::launch_profile_stop();
        logits_f32(&logits);
        let decode = hip_core::launches_with_prefix(&profile, "attn_decode_");
        let softmax = hip_core::launches_with_prefix(&profile, "softmax_");
        // Each matrix-vector product is one launch that rounds its activations itself, and on
        // ext devices the q, k and v projections are one weight, gate and up another (qkv, o,
        // gate-up and down per layer, then the output layer): no rounding launches. The
        // residual add and the norm before the q/k/v, gate/up and output products are done by
        // those products (`qmatvec_s8n_m1_*`; the first layer's norm has no residual), and the
        // down product reads the row its swiglu rounded (`qmatvec_s8r_m1_*`).
        let count = |prefix: &str| hip_core::launches_with_prefix(&profile, prefix);
        let layers = cfg.num_layers as u64;
        assert_eq!(
            (
                count("quantize_q8x_"),
                count("qmatvec_s8_"),
                count("qmatvec_s8n_m1_"),
                count("qmatvec_s8r_m1_")
            ),
            (0, layers, 2 * layers + 1, layers),
            "head dim {d}: one launch per product expected, launches {profile:?}"
        );
        // No norm launches of their own (they are in the products), gate and up meet in one
        // swiglu, q and k rotate in one rope.
        assert_eq!(
            [
                count("rms_norm_"),
                count("add_rms_norm_"),
                count("swiglu_"),
                count("rope_"),
                count("badd_") + count("usilu_") + count("bmul_"),
            ],
            [0, 0, layers, layers, 0],
            "head dim {d}: fused norms, swiglu and rope expected, launches {profile:?}"
        );
        // The KV cache is appended in place by the launch that rotates q and k, which writes
        // the layer's new k and v rows (`rope_i_kv_*`; a `Tensor::cat` of the whole cache took
        // two copies per tensor, a separate append one more launch), and nothing is copied.
        let copies = count("copy2d_") + count("ucopy_");
        if fused {
            assert_eq!(
                (decode, softmax, copies, count("rope_i_kv_")),
                (layers, 0, 0, layers),
                "head dim {d}: one fused decode and one rope + KV append per layer expected, \
                 launches {profile:?}"
            );
        } else {
            assert_eq!(
                (decode, softmax),
                (0, cfg.num_layers as u64),
                "head dim {d}: the unfused path expected, launches {profile:?}"
            );
        }
    }
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
    let _serial = one_at_a_time();
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

/// Where a GGUF file's tensor data starts, and where the data of its last transformer-block
/// tensor (one every llama model reads) ends.
fn gguf_data_end(path: &std::path::Path) -> (usize, usize) {
    let mut f = std::fs::File::open(path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    let start = content.tensor_data_offset as usize;
    let end = content
        .tensor_infos
        .iter()
        .filter(|(name, _)| name.starts_with("blk."))
        .map(|(_, t)| {
            let dtype = t.ggml_dtype;
            start
                + t.offset as usize
                + t.shape.elem_count() / dtype.block_size() * dtype.type_size()
        })
        .max()
        .unwrap();
    (start, end)
}

/// Truncated and corrupt GGUF files, and blocks that do not match their shape, are errors on
/// the device, never a panic or a fault: a random llama GGUF (Q4K) cut inside its header, its
/// metadata and tensor infos, at the start of its tensor data, inside it and one byte before
/// the end of its last block's tensor, and with its magic or its version overwritten, fails to
/// load onto the device (`load_quantized_llama`) while the intact file loads; blocks one block
/// short of their shape,
/// bytes that are not whole blocks and k-quant rows that are not a multiple of 256 are errors
/// naming the type or the shape.
#[test]
#[ignore = "needs a GPU"]
fn corrupt_gguf_and_mismatched_blocks_are_errors() {
    use candle_core::quantized::{QStorage, QTensor};
    use std::borrow::Cow;
    let _serial = one_at_a_time();
    let dir = tmp_dir("corrupt");
    let src = dir.join("q4k.gguf");
    write_random_llama_gguf(&src, &RandomLlamaConfig::tiny(), GgmlDType::Q4K, 3).unwrap();
    let bytes = std::fs::read(&src).unwrap();
    let (data_start, data_end) = gguf_data_end(&src);
    let dev = rocm();
    load_quantized_llama(&src, &dev).expect("the intact file loads");
    let load = |label: &str, contents: &[u8]| {
        let path = dir.join(format!("{label}.gguf"));
        std::fs::write(&path, contents).unwrap();
        let result = load_quantized_llama(&path, &dev);
        let err = match result {
            Ok(_) => panic!("{label}: the corrupt file loaded"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.starts_with(&format!("loading {}: ", path.display())),
            "{label}: the error names the file: {err}"
        );
    };
    for (label, cut) in [
        ("cut in the magic", 2),
        ("cut in the header", 12),
        ("cut in the metadata", data_start / 3),
        ("cut before the data", data_start - 1),
        ("cut at the data", data_start),
        ("cut in the data", (data_start + data_end) / 2),
        ("cut one byte short", data_end - 1),
    ] {
        load(label, &bytes[..cut]);
    }
    let mut bad_magic = bytes.clone();
    bad_magic[..4].copy_from_slice(b"GGXX");
    load("bad magic", &bad_magic);
    let mut bad_version = bytes.clone();
    bad_version[4..8].copy_from_slice(&99u32.to_le_bytes());
    load("bad version", &bad_version);

    // Blocks and shapes.
    let t = Tensor::randn(0f32, 1.0, (4, 256), &Device::Cpu).unwrap();
    let q = QTensor::quantize(&t, GgmlDType::Q4K).unwrap();
    let data = q.data().unwrap();
    let block = GgmlDType::Q4K.type_size();
    let short = QStorage::from_data(
        Cow::Borrowed(&data[..data.len() - block]),
        &dev,
        GgmlDType::Q4K,
    )
    .unwrap();
    let err = QTensor::new(short, (4, 256)).unwrap_err().to_string();
    assert!(
        err.contains("Q4K") && err.contains("[4, 256]"),
        "one block short: {err}"
    );
    let partial = QStorage::from_data(Cow::Borrowed(&data[..data.len() - 1]), &dev, GgmlDType::Q4K);
    let err = partial
        .err()
        .expect("bytes that are not whole blocks")
        .to_string();
    assert!(err.contains("Q4K"), "partial block: {err}");
    let narrow = Tensor::randn(0f32, 1.0, (3, 100), &dev).unwrap();
    let err = QTensor::quantize(&narrow, GgmlDType::Q4K)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("[3, 100]") && err.contains("256"),
        "rows of 100: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
