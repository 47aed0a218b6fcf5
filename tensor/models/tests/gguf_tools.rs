//! GGUF tooling on the CPU, without network: random llama GGUF files written by
//! `write_random_llama_gguf`, requantized, truncated, loaded with candle-transformers'
//! quantized llama and decoded greedily; random qwen3moe files through candle-transformers'
//! quantized qwen3 MoE, whose experts run through candle-nn's `moe_gemm_gguf` (our Candle
//! patch's `QTensor::indexed_moe_forward` path off CUDA, checked against f64); the GGUF
//! tokenizer on a hand-made vocabulary.
//! The test on the real SmolLM2-135M-Instruct is #[ignore]d (it needs
//! scripts/fetch-smollm2.sh).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use candle_rocm_models::gguf_tools::{
    gguf_token_id, greedy_generate, load_gguf_tokenizer, load_quantized_llama,
    load_quantized_qwen3_moe, parse_ggml_dtype, read_gguf, read_gguf_tensors, requantize,
    smollm2_gguf, tokenizer_from_gguf_metadata, truncate_layers, write_random_llama_gguf,
    write_random_qwen3moe_gguf, RandomLlamaConfig, RandomQwen3MoeConfig,
};
use candle_transformers::models::quantized_llama::ModelWeights;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "candle-rocm-models-gguf-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }
    fn join(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Name -> (dtype, dims) of every tensor of a GGUF file.
fn tensor_types(path: &Path) -> BTreeMap<String, (GgmlDType, Vec<usize>)> {
    read_gguf(path)
        .expect("read gguf")
        .tensor_infos
        .iter()
        .map(|(n, i)| (n.clone(), (i.ggml_dtype, i.shape.dims().to_vec())))
        .collect()
}

/// Name -> dequantized f32 values of every tensor of a GGUF file.
fn dequantized(path: &Path) -> HashMap<String, Vec<f32>> {
    let (_, tensors) = read_gguf_tensors(path).expect("read tensors");
    tensors
        .into_iter()
        .map(|(n, t)| {
            let v = t
                .dequantize(&Device::Cpu)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1::<f32>())
                .expect("dequantize");
            (n, v)
        })
        .collect()
}

/// RMS of (a - b) over RMS of a.
fn relative_rms_error(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut num, mut den) = (0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (x as f64 - y as f64).powi(2);
        den += (x as f64).powi(2);
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

fn md_u32(path: &Path, key: &str) -> u32 {
    read_gguf(path).expect("read gguf").metadata[key]
        .to_u32()
        .expect("u32 metadata")
}

/// Greedy decoding without the KV cache: the whole sequence from position 0 at every step.
fn greedy_no_cache(model: &mut ModelWeights, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut all = prompt.to_vec();
    for _ in 0..n {
        let input = Tensor::new(all.as_slice(), &Device::Cpu)
            .and_then(|t| t.unsqueeze(0))
            .expect("input");
        let logits = model
            .forward(&input, 0)
            .and_then(|l| l.flatten_all())
            .and_then(|l| l.to_vec1::<f32>())
            .expect("forward");
        let next = logits
            .iter()
            .enumerate()
            .fold((0, f32::NEG_INFINITY), |best, (i, &x)| {
                if x > best.1 {
                    (i, x)
                } else {
                    best
                }
            })
            .0 as u32;
        all.push(next);
    }
    all[prompt.len()..].to_vec()
}

const PROMPT: [u32; 7] = [1, 17, 200, 45, 99, 3, 311];

#[test]
fn random_gguf_has_the_llama_layout() {
    let dir = TempDir::new("layout");
    let cfg = RandomLlamaConfig::tiny();
    let path = dir.join("tiny-q8_0.gguf");
    let bytes = write_random_llama_gguf(&path, &cfg, GgmlDType::Q8_0, 7).unwrap();
    assert_eq!(bytes, std::fs::metadata(&path).unwrap().len());

    let types = tensor_types(&path);
    assert_eq!(types.len(), 3 + 9 * cfg.num_layers);
    for (name, (dtype, dims)) in &types {
        let expected = if dims.len() == 1 {
            GgmlDType::F32
        } else {
            GgmlDType::Q8_0
        };
        assert_eq!(*dtype, expected, "{name}");
    }
    assert_eq!(types["token_embd.weight"].1, [512, 256]);
    assert_eq!(types["blk.1.attn_k.weight"].1, [128, 256]);
    assert_eq!(types["blk.0.ffn_down.weight"].1, [256, 512]);
    assert_eq!(md_u32(&path, "llama.block_count"), 2);
    assert_eq!(md_u32(&path, "llama.attention.head_count_kv"), 2);
    assert_eq!(md_u32(&path, "general.file_type"), 7);

    // Same seed, same file; another seed, other weights.
    let again = dir.join("again.gguf");
    write_random_llama_gguf(&again, &cfg, GgmlDType::Q8_0, 7).unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&again).unwrap()
    );
    write_random_llama_gguf(&again, &cfg, GgmlDType::Q8_0, 8).unwrap();
    assert_ne!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&again).unwrap()
    );

    // Rows that do not fit the block size are refused.
    let odd = RandomLlamaConfig {
        hidden_size: 96,
        num_heads: 3,
        num_kv_heads: 1,
        ..RandomLlamaConfig::tiny()
    };
    assert!(write_random_llama_gguf(&dir.join("odd.gguf"), &odd, GgmlDType::Q4K, 1).is_err());
}

#[test]
fn greedy_generate_is_deterministic_and_matches_no_cache_decoding() {
    let dir = TempDir::new("greedy");
    let cpu = Device::Cpu;
    for (dtype, tie) in [
        (GgmlDType::F32, false),
        (GgmlDType::F32, true),
        (GgmlDType::Q4K, false),
    ] {
        let cfg = RandomLlamaConfig {
            tie_embeddings: tie,
            ..RandomLlamaConfig::tiny()
        };
        let path = dir.join(&format!("tiny-{dtype:?}-{tie}.gguf"));
        write_random_llama_gguf(&path, &cfg, dtype, 42).unwrap();
        assert_eq!(
            tensor_types(&path).contains_key("output.weight"),
            !tie,
            "{dtype:?} tie {tie}"
        );

        let mut model = load_quantized_llama(&path, &cpu).unwrap();
        let a = greedy_generate(&mut model, &PROMPT, 12, &cpu).unwrap();
        assert_eq!(a.len(), 12);
        assert!(a.iter().all(|&t| (t as usize) < cfg.vocab_size));
        // The same model again (position 0 clears the KV cache) and a fresh model.
        let b = greedy_generate(&mut model, &PROMPT, 12, &cpu).unwrap();
        let mut fresh = load_quantized_llama(&path, &cpu).unwrap();
        let c = greedy_generate(&mut fresh, &PROMPT, 12, &cpu).unwrap();
        assert_eq!(a, b, "{dtype:?} tie {tie}: second run differs");
        assert_eq!(a, c, "{dtype:?} tie {tie}: fresh model differs");
        // Untied, not a constant sequence: the blocks matter. (Tied to N(0, 1) embeddings,
        // a random model repeats the last token: e_i . e_i dominates the logits.)
        if !tie {
            assert!(
                a.iter().collect::<BTreeSet<_>>().len() > 1,
                "{dtype:?}: {a:?}"
            );
        }

        if dtype == GgmlDType::F32 {
            // The KV cache and index_pos give what recomputing the whole sequence gives.
            let reference = greedy_no_cache(&mut fresh, &PROMPT, 12);
            assert_eq!(a, reference, "tie {tie}: KV-cache decoding differs");
        }

        assert!(greedy_generate(&mut model, &PROMPT, 0, &cpu)
            .unwrap()
            .is_empty());
        assert_eq!(
            greedy_generate(&mut model, &PROMPT, 1, &cpu).unwrap(),
            a[..1].to_vec()
        );
        assert!(greedy_generate(&mut model, &[], 4, &cpu).is_err());
    }
}

#[test]
fn requantize_to_q4_0_q4k_q8_0() {
    let dir = TempDir::new("requantize");
    let cfg = RandomLlamaConfig::tiny();
    let src = dir.join("tiny-f32.gguf");
    write_random_llama_gguf(&src, &cfg, GgmlDType::F32, 3).unwrap();
    let source = dequantized(&src);
    let src_types = tensor_types(&src);
    let matrices = src_types.values().filter(|(_, d)| d.len() == 2).count();
    let vectors = src_types.len() - matrices;

    for (dtype, bound, file_type) in [
        (GgmlDType::Q4_0, 0.12, 2),
        (GgmlDType::Q4K, 0.12, 14),
        (GgmlDType::Q8_0, 0.01, 7),
    ] {
        let dst = dir.join(&format!("tiny-{dtype:?}.gguf"));
        let s = requantize(&src, &dst, dtype).unwrap();
        assert_eq!(s.tensors, src_types.len());
        assert_eq!(s.requantized, matrices, "{dtype:?}");
        assert_eq!(s.kept.len(), vectors, "{dtype:?}");
        assert!(s.kept.iter().all(|(_, t)| *t == GgmlDType::F32));
        assert_eq!(s.bytes_out, std::fs::metadata(&dst).unwrap().len());
        assert!(s.bytes_out < s.bytes_in / 3, "{dtype:?}: {s:?}");

        for (name, (t, dims)) in tensor_types(&dst) {
            assert_eq!(dims, src_types[&name].1, "{name}");
            let expected = if dims.len() == 1 {
                GgmlDType::F32
            } else {
                dtype
            };
            assert_eq!(t, expected, "{dtype:?} {name}");
        }
        let values = dequantized(&dst);
        let mut worst = 0f64;
        for (name, v) in &values {
            let err = relative_rms_error(&source[name], v);
            if src_types[name].1.len() == 1 {
                assert_eq!(err, 0.0, "{name} changed");
            }
            worst = worst.max(err);
        }
        assert!(worst < bound, "{dtype:?}: relative RMS error {worst}");
        assert!(worst > 0.0, "{dtype:?}: nothing was quantized");

        assert_eq!(md_u32(&dst, "llama.block_count"), 2);
        assert_eq!(md_u32(&dst, "llama.embedding_length"), 256);
        assert_eq!(md_u32(&dst, "general.file_type"), file_type);

        let mut model = load_quantized_llama(&dst, &Device::Cpu).unwrap();
        let tokens = greedy_generate(&mut model, &PROMPT, 5, &Device::Cpu).unwrap();
        assert_eq!(tokens.len(), 5);
    }

    // A Q8_0 file back to F32 is exact (Q8_0 values are representable), and requantizing
    // into the same type copies the tensors.
    let q8 = dir.join("tiny-Q8_0.gguf");
    let back = dir.join("back-f32.gguf");
    requantize(&q8, &back, GgmlDType::F32).unwrap();
    let q8_values = dequantized(&q8);
    for (name, v) in dequantized(&back) {
        assert_eq!(v, q8_values[&name], "{name}");
    }
    let same = dir.join("same-q8.gguf");
    let s = requantize(&q8, &same, GgmlDType::Q8_0).unwrap();
    assert_eq!(s.requantized, 0);
    assert_eq!(s.kept.len(), s.tensors);
    assert!(requantize(&q8, &q8, GgmlDType::Q4_0).is_err());
}

#[test]
fn requantize_keeps_rows_that_do_not_fit_the_block() {
    // SmolLM2's situation: rows of 576 fit 32-element blocks but not the 256 of k-quants.
    let dir = TempDir::new("requantize-odd");
    let cfg = RandomLlamaConfig {
        vocab_size: 256,
        hidden_size: 96,
        intermediate_size: 256,
        num_heads: 3,
        num_kv_heads: 1,
        ..RandomLlamaConfig::tiny()
    };
    let src = dir.join("odd-q8_0.gguf");
    write_random_llama_gguf(&src, &cfg, GgmlDType::Q8_0, 5).unwrap();
    let dst = dir.join("odd-q4k.gguf");
    let s = requantize(&src, &dst, GgmlDType::Q4K).unwrap();
    // Only ffn_down (rows of 256) becomes Q4K.
    assert_eq!(s.requantized, cfg.num_layers);
    for (name, (t, dims)) in tensor_types(&dst) {
        let expected = if name.ends_with("ffn_down.weight") {
            GgmlDType::Q4K
        } else if dims.len() == 1 {
            GgmlDType::F32
        } else {
            GgmlDType::Q8_0
        };
        assert_eq!(t, expected, "{name}");
    }
    let cpu = Device::Cpu;
    let mut model = load_quantized_llama(&dst, &cpu).unwrap();
    assert_eq!(
        greedy_generate(&mut model, &PROMPT[..3], 4, &cpu)
            .unwrap()
            .len(),
        4
    );
}

#[test]
fn truncate_layers_keeps_the_first_blocks() {
    let dir = TempDir::new("truncate");
    let cfg = RandomLlamaConfig {
        num_layers: 3,
        ..RandomLlamaConfig::tiny()
    };
    let src = dir.join("three.gguf");
    write_random_llama_gguf(&src, &cfg, GgmlDType::Q4_0, 11).unwrap();
    let dst = dir.join("one.gguf");
    let s = truncate_layers(&src, &dst, 1).unwrap();
    assert_eq!((s.layers_in, s.layers_out), (3, 1));
    assert_eq!((s.tensors_in, s.tensors_out), (3 + 27, 3 + 9));

    assert_eq!(md_u32(&dst, "llama.block_count"), 1);
    assert_eq!(md_u32(&dst, "llama.embedding_length"), 256);
    let one = RandomLlamaConfig {
        num_layers: 1,
        ..cfg.clone()
    };
    let expected: BTreeSet<String> = one.tensor_shapes().into_iter().map(|(n, _)| n).collect();
    let got: BTreeSet<String> = tensor_types(&dst).into_keys().collect();
    assert_eq!(got, expected);
    // The kept tensors are byte-identical.
    let (_, a) = read_gguf_tensors(&src).unwrap();
    let (_, b) = read_gguf_tensors(&dst).unwrap();
    let a: HashMap<_, _> = a.into_iter().collect();
    for (name, t) in &b {
        assert_eq!(t.dtype(), a[name].dtype(), "{name}");
        assert_eq!(t.data().unwrap(), a[name].data().unwrap(), "{name}");
    }

    let cpu = Device::Cpu;
    let mut model = load_quantized_llama(&dst, &cpu).unwrap();
    assert_eq!(
        greedy_generate(&mut model, &PROMPT, 3, &cpu).unwrap().len(),
        3
    );

    assert!(truncate_layers(&src, &dir.join("zero.gguf"), 0).is_err());
    assert!(truncate_layers(&src, &dir.join("four.gguf"), 4).is_err());
    let all = dir.join("all.gguf");
    assert_eq!(truncate_layers(&src, &all, 3).unwrap().tensors_out, 30);
}

/// candle-nn's `moe_gemm_gguf` off CUDA (our patch: `QTensor::indexed_moe_forward`, on the CPU
/// each expert's rows through the CPU's quantized matmul): with F32 experts, whose CPU product
/// is exact f32, every (token, slot) row equals the f64 product with the expert the router
/// chose, for the gate/up form (one input row per token) and the down form (one per slot,
/// scaled by the slot's weight); the expert ids come sorted, as `FusedMoeGGUF` passes them.
#[test]
fn moe_gemm_gguf_matches_f64_off_cuda() {
    let (experts, n, k, tokens, topk) = (5, 24, 64, 4, 3);
    let det = |i: usize, salt: usize| (((i * 7919 + salt * 104_729) % 1999) as f32 / 999.5) - 1.0;
    let w: Vec<f32> = (0..experts * n * k).map(|i| det(i, 1)).collect();
    let wq = QTensor::quantize(
        &Tensor::from_vec(w.clone(), (experts, n, k), &Device::Cpu).unwrap(),
        GgmlDType::F32,
    )
    .unwrap();
    let ids: Vec<u32> = vec![4, 0, 2, 1, 3, 0, 2, 2, 4, 0, 1, 3];
    let (experts_ids, sorted_token_ids) = Tensor::new(ids.as_slice(), &Device::Cpu)
        .unwrap()
        .sort_last_dim(true)
        .unwrap();
    let x1: Vec<f32> = (0..tokens * k).map(|i| det(i, 2)).collect();
    let xs: Vec<f32> = (0..tokens * topk * k).map(|i| det(i, 3)).collect();
    let scale: Vec<f32> = (0..tokens * topk).map(|i| 0.25 + det(i, 4).abs()).collect();
    let dot = |e: usize, row: usize, x: &[f32]| -> Vec<f64> {
        (0..n)
            .map(|j| {
                (0..k)
                    .map(|c| w[(e * n + j) * k + c] as f64 * x[row * k + c] as f64)
                    .sum()
            })
            .collect()
    };
    for down in [false, true] {
        let (input, weights) = if down {
            let s = Tensor::from_vec(scale.clone(), (tokens, topk), &Device::Cpu).unwrap();
            (
                Tensor::from_vec(xs.clone(), (tokens * topk, k), &Device::Cpu).unwrap(),
                Some(s),
            )
        } else {
            (
                Tensor::from_vec(x1.clone(), (tokens, k), &Device::Cpu).unwrap(),
                None,
            )
        };
        let y = candle_nn::moe::moe_gemm_gguf(
            &input,
            &wq,
            &weights,
            &sorted_token_ids,
            &experts_ids,
            topk,
            false,
            DType::F32,
        )
        .unwrap();
        assert_eq!(y.dims(), &[tokens * topk, n]);
        let y: Vec<Vec<f32>> = y.to_vec2().unwrap();
        for (r, row) in y.iter().enumerate() {
            let e = ids[r] as usize;
            let want = if down {
                dot(e, r, &xs).iter().map(|v| v * scale[r] as f64).collect()
            } else {
                dot(e, r / topk, &x1)
            };
            for (j, (&got, want)) in row.iter().zip(&want).enumerate() {
                assert!(
                    (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "down={down} row {r} (expert {e}) column {j}: {got} against {want}"
                );
            }
        }
    }
    // Ids that do not match the rows are errors, not panics.
    let short = Tensor::new(&[0u32, 1], &Device::Cpu).unwrap();
    let x = Tensor::from_vec(x1.clone(), (tokens, k), &Device::Cpu).unwrap();
    assert!(
        candle_nn::moe::moe_gemm_gguf(&x, &wq, &None, &short, &short, topk, false, DType::F32)
            .is_err()
    );
}

/// A random qwen3moe GGUF has the layout candle-transformers' quantized qwen3 MoE reads; on the
/// CPU the Q8_0 model's logits stay close to the same model dequantized to F32, and decoding
/// is deterministic.
#[test]
fn random_qwen3moe_gguf_runs_on_the_cpu() {
    let dir = TempDir::new("qwen3moe");
    let cfg = RandomQwen3MoeConfig::tiny();
    let path = dir.join("q8_0.gguf");
    write_random_qwen3moe_gguf(&path, &cfg, GgmlDType::Q8_0, 5).unwrap();
    let types = tensor_types(&path);
    assert_eq!(types.len(), cfg.tensor_shapes().len());
    assert_eq!(
        types["blk.1.ffn_down_exps.weight"],
        (GgmlDType::Q8_0, vec![8, 256, 256])
    );
    assert_eq!(types["blk.0.ffn_gate_inp.weight"].0, GgmlDType::F32);
    let exact_path = dir.join("f32.gguf");
    requantize(&path, &exact_path, GgmlDType::F32).unwrap();
    let prompt = Tensor::new(&[[3u32, 200, 17, 88, 401]], &Device::Cpu).unwrap();
    let logits = |p: &Path| -> Vec<f32> {
        let mut m = load_quantized_qwen3_moe(p, &Device::Cpu, DType::F32).unwrap();
        let l = m.forward(&prompt, 0).unwrap();
        let next = Tensor::new(&[[7u32]], &Device::Cpu).unwrap();
        let l2 = m.forward(&next, 5).unwrap();
        [l, l2]
            .iter()
            .flat_map(|l| l.flatten_all().unwrap().to_vec1::<f32>().unwrap())
            .collect()
    };
    let (q, exact) = (logits(&path), logits(&exact_path));
    assert_eq!(q.len(), 2 * cfg.vocab_size);
    assert!(q.iter().all(|v| v.is_finite()));
    let err = relative_rms_error(&q, &exact);
    assert!(err < 0.05, "Q8_0 against F32: relative rms error {err}");
    assert_eq!(q, logits(&path), "the CPU model is deterministic");
}

#[test]
fn parse_ggml_dtype_names() {
    assert_eq!(parse_ggml_dtype("q4_0").unwrap(), GgmlDType::Q4_0);
    assert_eq!(parse_ggml_dtype("Q4K").unwrap(), GgmlDType::Q4K);
    assert_eq!(parse_ggml_dtype("q4_k").unwrap(), GgmlDType::Q4K);
    assert_eq!(parse_ggml_dtype("q6_K").unwrap(), GgmlDType::Q6K);
    assert_eq!(parse_ggml_dtype("F16").unwrap(), GgmlDType::F16);
    assert!(parse_ggml_dtype("q3").is_err());
}

/// GPT-2's byte-to-character map: printable bytes map to themselves, the others to U+0100 on.
fn byte_chars() -> Vec<char> {
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32).collect();
    printable.extend(0xA1..=0xAC);
    printable.extend(0xAE..=0xFF);
    let mut extra = 0;
    (0u32..256)
        .map(|b| {
            if printable.contains(&b) {
                char::from_u32(b).unwrap()
            } else {
                extra += 1;
                char::from_u32(255 + extra).unwrap()
            }
        })
        .collect()
}

fn strings(v: &[&str]) -> Value {
    Value::Array(v.iter().map(|s| Value::String(s.to_string())).collect())
}

/// A small SmolLM-like vocabulary: 2 control tokens, the 256 byte characters, merged tokens.
fn toy_tokenizer_metadata(pre: &str) -> HashMap<String, Value> {
    let chars: Vec<String> = byte_chars().iter().map(|c| c.to_string()).collect();
    let mut tokens: Vec<&str> = vec!["<|im_start|>", "<|im_end|>"];
    tokens.extend(chars.iter().map(String::as_str));
    tokens.extend(["he", "ll", "hell", "hello", "Ġw", "Ġwor", "12", "or"]);
    let merges = [
        "h e", "l l", "he ll", "hell o", "Ġ w", "Ġw or", "o r", "1 2",
    ];
    let mut types = vec![Value::I32(3), Value::I32(3)];
    types.extend((2..tokens.len()).map(|_| Value::I32(1)));
    HashMap::from([
        (
            "tokenizer.ggml.model".to_string(),
            Value::String("gpt2".into()),
        ),
        ("tokenizer.ggml.pre".to_string(), Value::String(pre.into())),
        ("tokenizer.ggml.tokens".to_string(), strings(&tokens)),
        ("tokenizer.ggml.merges".to_string(), strings(&merges)),
        ("tokenizer.ggml.token_type".to_string(), Value::Array(types)),
        ("tokenizer.ggml.eos_token_id".to_string(), Value::U32(1)),
    ])
}

#[test]
fn gguf_tokenizer_from_metadata() {
    let md = toy_tokenizer_metadata("smollm");
    let tok = tokenizer_from_gguf_metadata(&md).unwrap();
    let id = |s: &str| {
        tok.token_to_id(s)
            .unwrap_or_else(|| panic!("no token {s:?}"))
    };
    let enc = |s: &str| tok.encode(s, false).unwrap().get_ids().to_vec();

    assert_eq!(id("<|im_start|>"), 0);
    assert_eq!(id("hello"), 2 + 256 + 3);
    assert_eq!(gguf_token_id(&md, "eos"), Some(1));
    assert_eq!(gguf_token_id(&md, "bos"), None);

    assert_eq!(
        enc("hello world"),
        [id("hello"), id("Ġwor"), id("l"), id("d")]
    );
    // Control tokens are split off before pre-tokenization; newlines are byte tokens.
    assert_eq!(
        enc("<|im_start|>hello\n<|im_end|>"),
        [0, id("hello"), id("Ċ"), 1]
    );
    // smollm splits digits one by one: the merge "1 2" never applies.
    assert_eq!(enc("x12"), [id("x"), id("1"), id("2")]);
    let gpt2 = tokenizer_from_gguf_metadata(&toy_tokenizer_metadata("gpt-2")).unwrap();
    assert_eq!(
        gpt2.encode("x12", false).unwrap().get_ids(),
        [id("x"), id("12")]
    );

    // Byte-level round trip, special tokens skipped on request.
    let text = "<|im_start|>héllo wörld 12\t!<|im_end|>";
    let ids = enc(text);
    assert_eq!(tok.decode(&ids, false).unwrap(), text);
    assert_eq!(tok.decode(&ids, true).unwrap(), "héllo wörld 12\t!");
    let mut stream = tok.decode_stream(true);
    let mut streamed = String::new();
    for &i in &ids {
        if let Some(piece) = stream.step(i).unwrap() {
            streamed.push_str(&piece);
        }
    }
    assert_eq!(streamed, "héllo wörld 12\t!");

    assert!(tokenizer_from_gguf_metadata(&toy_tokenizer_metadata("llama-bpe")).is_err());
    let mut spm = toy_tokenizer_metadata("smollm");
    spm.insert("tokenizer.ggml.model".into(), Value::String("llama".into()));
    assert!(tokenizer_from_gguf_metadata(&spm).is_err());
}

/// The real SmolLM2-135M-Instruct (scripts/fetch-smollm2.sh): the tokenizer from its metadata
/// and a greedy answer on the CPU.
#[test]
#[ignore = "needs SmolLM2-135M-Instruct: scripts/fetch-smollm2.sh"]
fn smollm2_answers_on_the_cpu() {
    let path = smollm2_gguf().expect("SmolLM2 GGUF not found: run scripts/fetch-smollm2.sh");
    let tok = load_gguf_tokenizer(&path).unwrap();
    assert_eq!(tok.get_vocab_size(true), 49152);
    let prompt =
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let ids = tok.encode(prompt, false).unwrap().get_ids().to_vec();
    assert_eq!(ids[0], 1, "<|im_start|> is token 1");
    assert_eq!(tok.decode(&ids, false).unwrap(), prompt);

    let cpu = Device::Cpu;
    let mut model = load_quantized_llama(&path, &cpu).unwrap();
    let out = greedy_generate(&mut model, &ids, 16, &cpu).unwrap();
    let text = tok.decode(&out, true).unwrap();
    assert!(text.contains("Paris"), "answer: {text:?}");
}
