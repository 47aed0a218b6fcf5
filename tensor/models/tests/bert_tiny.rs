//! Tier 1 (CPU, no downloads): the sentence-embedding pipeline on a tiny random BERT written to a
//! temporary directory (config.json, a WordPiece tokenizer.json, model.safetensors), plus the
//! pooling/mask/similarity helpers on hand-computed values.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_rocm_models::bert::{
    additive_attention_mask, cosine_similarity_matrix, cosine_similarity_rows, mean_pool_normalize,
    synthetic_batch, SentenceEmbedder,
};
use candle_rocm_models::{pick_device, Error};
use rand::SeedableRng;
use rand_distr::Distribution;
use serde_json::json;

const WORDS: &[&str] = &[
    "the", "cat", "dog", "sat", "on", "mat", "a", "red", "blue", "run", "##s", "fast", "slow",
    "bird", "sings", ".",
];
const HIDDEN: usize = 32;
const LAYERS: usize = 2;
const INTER: usize = 64;
const MAX_POS: usize = 16;

fn vocab_size() -> usize {
    4 + WORDS.len()
}

fn write_model(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let config = json!({
        "architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
        "vocab_size": vocab_size(), "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
        "num_attention_heads": 4, "intermediate_size": INTER, "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": MAX_POS,
        "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
        "pad_token_id": 0, "position_embedding_type": "absolute"
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();

    let mut vocab = serde_json::Map::new();
    for (i, t) in ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
        .iter()
        .chain(WORDS)
        .enumerate()
    {
        vocab.insert((*t).to_string(), json!(i));
    }
    let added: Vec<_> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({"id": i, "special": true, "content": t, "single_word": false,
                             "lstrip": false, "rstrip": false, "normalized": false})
        })
        .collect();
    let special = |id: &str, t: u32| json!({"SpecialToken": {"id": id, "type_id": t}});
    let seq = |id: &str, t: u32| json!({"Sequence": {"id": id, "type_id": t}});
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                       "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "TemplateProcessing",
            "single": [special("[CLS]", 0), seq("A", 0), special("[SEP]", 0)],
            "pair": [special("[CLS]", 0), seq("A", 0), special("[SEP]", 0), seq("B", 1), special("[SEP]", 1)],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();

    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let normal = rand_distr::Normal::new(0f32, 0.2).unwrap();
    let mut w = HashMap::new();
    let mut rand_t = |name: String, shape: &[usize]| {
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| normal.sample(&mut rng)).collect();
        w.insert(name, Tensor::from_vec(v, shape, &Device::Cpu).unwrap());
    };
    rand_t(
        "embeddings.word_embeddings.weight".into(),
        &[vocab_size(), HIDDEN],
    );
    rand_t(
        "embeddings.position_embeddings.weight".into(),
        &[MAX_POS, HIDDEN],
    );
    rand_t(
        "embeddings.token_type_embeddings.weight".into(),
        &[2, HIDDEN],
    );
    let mut norms = vec!["embeddings.LayerNorm".to_string()];
    for l in 0..LAYERS {
        let p = format!("encoder.layer.{l}");
        for m in [
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
        ] {
            rand_t(format!("{p}.{m}.weight"), &[HIDDEN, HIDDEN]);
            rand_t(format!("{p}.{m}.bias"), &[HIDDEN]);
        }
        rand_t(format!("{p}.intermediate.dense.weight"), &[INTER, HIDDEN]);
        rand_t(format!("{p}.intermediate.dense.bias"), &[INTER]);
        rand_t(format!("{p}.output.dense.weight"), &[HIDDEN, INTER]);
        rand_t(format!("{p}.output.dense.bias"), &[HIDDEN]);
        norms.push(format!("{p}.attention.output.LayerNorm"));
        norms.push(format!("{p}.output.LayerNorm"));
    }
    for n in norms {
        w.insert(
            format!("{n}.weight"),
            Tensor::ones(HIDDEN, DType::F32, &Device::Cpu).unwrap(),
        );
        w.insert(
            format!("{n}.bias"),
            Tensor::zeros(HIDDEN, DType::F32, &Device::Cpu).unwrap(),
        );
    }
    candle_core::safetensors::save(&w, dir.join("model.safetensors")).unwrap();
}

fn model_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "candle-rocm-models-bert-tiny-{tag}-{}",
        std::process::id()
    ));
    write_model(&dir);
    dir
}

fn rows(t: &Tensor) -> Vec<Vec<f32>> {
    t.to_device(&Device::Cpu).unwrap().to_vec2::<f32>().unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

const SENTENCES: &[&str] = &[
    "The cat sat.",
    "a red dog runs fast on the mat",
    "Bird",
    "the cat sat on the mat .",
];

#[test]
fn padding_does_not_change_embeddings_and_norms_are_one() {
    let dir = model_dir("pad");
    let m = SentenceEmbedder::load(&dir, "model.safetensors", DType::F32, &Device::Cpu).unwrap();
    assert_eq!(
        m.token_ids("The cat sat.").unwrap(),
        vec![2, 4, 5, 7, 19, 3]
    );
    assert_eq!(m.token_ids("runs").unwrap(), vec![2, 13, 14, 3]);
    let (ids, mask) = m.tokenize(SENTENCES).unwrap();
    assert_eq!(ids.dims(), &[4, 11]);
    assert_eq!(
        mask.to_vec2::<u32>().unwrap()[2],
        vec![1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    let batch = rows(&m.embed(SENTENCES).unwrap());
    assert_eq!(batch.len(), 4);
    for (i, s) in SENTENCES.iter().enumerate() {
        let alone = rows(&m.embed(&[s]).unwrap()).remove(0);
        assert!(
            max_diff(&alone, &batch[i]) < 1e-5,
            "{s}: padded and alone differ by {}",
            max_diff(&alone, &batch[i])
        );
        let norm = batch[i].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{s}: norm {norm}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn half_precision_follows_f32_without_nan() {
    let dir = model_dir("half");
    let reference = SentenceEmbedder::load(&dir, "model.safetensors", DType::F32, &Device::Cpu)
        .unwrap()
        .embed(SENTENCES)
        .unwrap();
    for dtype in [DType::F16, DType::BF16] {
        let m = SentenceEmbedder::load(&dir, "model.safetensors", dtype, &Device::Cpu).unwrap();
        let e = m.embed(SENTENCES).unwrap();
        assert_eq!(e.dtype(), DType::F32);
        let sims = cosine_similarity_rows(&e, &reference).unwrap();
        for (s, c) in SENTENCES.iter().zip(&sims) {
            assert!(
                c.is_finite() && *c > 0.995,
                "{dtype:?} {s}: cosine {c} to f32"
            );
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn long_input_is_truncated_and_batches_are_checked() {
    let dir = model_dir("trunc");
    let m = SentenceEmbedder::load(&dir, "model.safetensors", DType::F32, &Device::Cpu).unwrap();
    assert_eq!(m.max_seq_len(), MAX_POS);
    let long = "the cat sat on the mat ".repeat(10);
    let ids = m.token_ids(&long).unwrap();
    assert_eq!(ids.len(), MAX_POS);
    assert_eq!(ids.last(), Some(&3));
    let e = rows(&m.embed(&[long.as_str(), "dog"]).unwrap());
    assert!(e.iter().flatten().all(|x| x.is_finite()));

    let ids: Vec<u32> = (0..3 * MAX_POS)
        .map(|i| (i % vocab_size()) as u32)
        .collect();
    let ids = Tensor::from_vec(ids, (3, MAX_POS), &Device::Cpu).unwrap();
    let mask = Tensor::ones((3, MAX_POS), DType::U32, &Device::Cpu).unwrap();
    assert_eq!(m.embed_batch_ids(&ids, &mask).unwrap().dims(), &[3, HIDDEN]);
    let bad_mask = Tensor::ones((3, 5), DType::U32, &Device::Cpu).unwrap();
    assert!(matches!(
        m.embed_batch_ids(&ids, &bad_mask),
        Err(Error::InvalidInput(_))
    ));
    let f32_ids = ids.to_dtype(DType::F32).unwrap();
    assert!(matches!(
        m.embed_batch_ids(&f32_ids, &mask),
        Err(Error::InvalidInput(_))
    ));
    let (too_long, too_long_mask) = synthetic_batch(1, MAX_POS + 1, &Device::Cpu).unwrap();
    assert!(matches!(
        m.embed_batch_ids(&too_long, &too_long_mask),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(m.embed(&[]), Err(Error::InvalidInput(_))));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn loading_errors_name_the_file() {
    let dir = model_dir("errors");
    let missing = dir.join("nope");
    match SentenceEmbedder::load(&missing, "model.safetensors", DType::F32, &Device::Cpu) {
        Err(Error::Io { path, .. }) => assert!(path.ends_with("config.json")),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("loaded from a missing directory"),
    }
    match SentenceEmbedder::load(&dir, "absent.safetensors", DType::F32, &Device::Cpu) {
        Err(Error::Io { path, .. }) => assert!(path.ends_with("absent.safetensors")),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("loaded a missing weights file"),
    }
    assert!(matches!(
        SentenceEmbedder::load(&dir, "model.safetensors", DType::U8, &Device::Cpu),
        Err(Error::InvalidInput(_))
    ));
    // A checkpoint that does not match the config: an error naming the file, not a panic.
    let w = HashMap::from([(
        "embeddings.word_embeddings.weight".to_string(),
        Tensor::zeros((3, 3), DType::F32, &Device::Cpu).unwrap(),
    )]);
    candle_core::safetensors::save(&w, dir.join("wrong.safetensors")).unwrap();
    let e = SentenceEmbedder::load(&dir, "wrong.safetensors", DType::F32, &Device::Cpu)
        .err()
        .expect("wrong checkpoint loaded");
    assert!(e.to_string().contains("wrong.safetensors"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn mean_pooling_and_mask_on_known_values() {
    let hidden = Tensor::new(&[[[1f32, 0.], [3., 4.], [100., 100.]]], &Device::Cpu).unwrap();
    let mask = Tensor::new(&[[1u32, 1, 0]], &Device::Cpu).unwrap();
    let e = mean_pool_normalize(&hidden, &mask)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let s = std::f32::consts::FRAC_1_SQRT_2;
    assert!(max_diff(&e[0], &[s, s]) < 1e-7, "{e:?}");
    // An all-padding row gives a zero vector, not NaN.
    let zero = mean_pool_normalize(&hidden, &mask.zeros_like().unwrap()).unwrap();
    assert_eq!(zero.to_vec2::<f32>().unwrap(), vec![vec![0.0, 0.0]]);

    let m = Tensor::new(&[1u32, 0], &Device::Cpu).unwrap();
    let f16 = additive_attention_mask(&m, DType::F16)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    assert_eq!(f16.to_vec1::<f32>().unwrap(), vec![0.0, -65504.0]);
    let f32m = additive_attention_mask(&m, DType::F32).unwrap();
    assert_eq!(f32m.to_vec1::<f32>().unwrap(), vec![0.0, f32::MIN]);
}

#[test]
fn cosine_helpers() {
    let a = Tensor::new(&[[1f32, 0.], [1., 1.], [0., 0.]], &Device::Cpu).unwrap();
    let b = Tensor::new(&[[0f32, 2.], [2., 2.], [1., 0.]], &Device::Cpu).unwrap();
    assert_eq!(cosine_similarity_rows(&a, &b).unwrap(), vec![0.0, 1.0, 0.0]);
    let m = cosine_similarity_matrix(&a, &b).unwrap();
    assert_eq!(m.len(), 3);
    assert!((m[1][0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
    let c = Tensor::zeros((2, 2), DType::F32, &Device::Cpu).unwrap();
    assert!(matches!(
        cosine_similarity_rows(&a, &c),
        Err(Error::InvalidInput(_))
    ));
    let d = Tensor::zeros((2, 3), DType::F32, &Device::Cpu).unwrap();
    assert!(matches!(
        cosine_similarity_matrix(&a, &d),
        Err(Error::InvalidInput(_))
    ));
}

#[test]
fn device_names() {
    assert!(pick_device("cpu").unwrap().is_cpu());
    assert!(pick_device(" CPU ").unwrap().is_cpu());
    let e = pick_device("no-such-device").unwrap_err();
    assert!(matches!(e, Error::UnknownDevice(_)));
    assert!(e.to_string().contains("cpu"), "{e}");
}
