//! The real all-MiniLM-L6-v2 on the CPU, against a float64 NumPy reference
//! (tests/data/minilm_reference.json, written by scripts/minilm_reference.py from the same
//! files) and against the similarities sentence-transformers publishes for this model.
//!
//! Needs the model files: `scripts/fetch-minilm.sh` (default ~/.cache/candle-rocm/all-minilm-l6-v2,
//! or set CANDLE_ROCM_MINILM_DIR), then `cargo test --release --test minilm -- --ignored`.
//! When asked to run without the files, the tests fail with that instruction.

mod common;

use candle_core::{DType, Device};
use candle_rocm_models::bench::bert_embeddings_per_sec;
use candle_rocm_models::bert::{synthetic_batch, SentenceEmbedder, WEIGHTS_F32};
use candle_rocm_models::weights::convert_safetensors;
use common::{check, dir, reference, sentences};

const NEEDS: &str =
    "needs the all-MiniLM-L6-v2 files: scripts/fetch-minilm.sh (or CANDLE_ROCM_MINILM_DIR)";

fn sim(e: &[Vec<f32>], i: usize, j: usize) -> f32 {
    e[i].iter().zip(&e[j]).map(|(a, b)| a * b).sum()
}

#[test]
#[ignore = "needs the all-MiniLM-L6-v2 files: scripts/fetch-minilm.sh"]
fn tokenizer_matches_python_tokenizers() {
    let rows = reference();
    let m = SentenceEmbedder::load(&dir(), WEIGHTS_F32, DType::F32, &Device::Cpu).expect(NEEDS);
    for r in &rows {
        assert_eq!(m.token_ids(&r.sentence).unwrap(), r.ids, "{:?}", r.sentence);
    }
}

#[test]
#[ignore = "needs the all-MiniLM-L6-v2 files: scripts/fetch-minilm.sh"]
fn f32_embeddings_match_the_float64_reference() {
    let rows = reference();
    let m = SentenceEmbedder::load(&dir(), WEIGHTS_F32, DType::F32, &Device::Cpu).expect(NEEDS);
    let emb = m.embed(&sentences(&rows)).unwrap();
    assert_eq!(emb.dims(), &[rows.len(), 384]);
    check(&emb, &rows, 0.999_999, 2e-6, "f32");

    let e = emb.to_vec2::<f32>().unwrap();
    let (guitar, strum, stocks, cat, kitten) = (0, 1, 2, 3, 4);
    println!(
        "paraphrases: guitar {:.4}, cat {:.4}; unrelated: guitar/stocks {:.4}, cat/stocks {:.4}",
        sim(&e, guitar, strum),
        sim(&e, cat, kitten),
        sim(&e, guitar, stocks),
        sim(&e, cat, stocks)
    );
    assert!(sim(&e, guitar, strum) > 0.6);
    assert!(sim(&e, cat, kitten) > 0.5);
    assert!(sim(&e, guitar, strum) > sim(&e, guitar, stocks) + 0.4);
    assert!(sim(&e, cat, kitten) > sim(&e, cat, stocks) + 0.4);
    // sentence-transformers' documentation, all-MiniLM-L6-v2: 0.6660, 0.1046, 0.1411.
    let doc = rows.len() - 3;
    for ((i, j), want) in [
        ((doc, doc + 1), 0.6660f32),
        ((doc, doc + 2), 0.1046),
        ((doc + 1, doc + 2), 0.1411),
    ] {
        let got = sim(&e, i, j);
        assert!(
            (got - want).abs() < 5e-4,
            "documented similarity {want}, got {got}"
        );
    }
}

#[test]
#[ignore = "needs the all-MiniLM-L6-v2 files: scripts/fetch-minilm.sh"]
fn f16_copy_and_half_precision_runs() {
    let rows = reference();
    let src = dir();
    // The f16 file as make_f16 writes it, in a scratch directory next to the real config.
    let tmp = std::env::temp_dir().join(format!(
        "candle-rocm-models-minilm-f16-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&tmp).unwrap();
    for f in ["config.json", "tokenizer.json", "sentence_bert_config.json"] {
        if src.join(f).is_file() {
            std::fs::copy(src.join(f), tmp.join(f)).unwrap();
        }
    }
    let s = convert_safetensors(
        &src.join(WEIGHTS_F32),
        &tmp.join("model.f16.safetensors"),
        DType::F16,
    )
    .unwrap();
    println!(
        "f16 copy: {} tensors, {} converted, {} -> {} bytes",
        s.tensors, s.converted, s.bytes_in, s.bytes_out
    );
    assert_eq!(
        s.tensors,
        s.converted + 1,
        "only position_ids (i64) stays as it is"
    );

    let m =
        SentenceEmbedder::load(&tmp, "model.f16.safetensors", DType::F16, &Device::Cpu).unwrap();
    check(
        &m.embed(&sentences(&rows)).unwrap(),
        &rows,
        0.99999,
        1e-3,
        "f16 file, f16",
    );
    let m =
        SentenceEmbedder::load(&tmp, "model.f16.safetensors", DType::F32, &Device::Cpu).unwrap();
    check(
        &m.embed(&sentences(&rows)).unwrap(),
        &rows,
        0.99999,
        5e-4,
        "f16 file, f32",
    );
    let m = SentenceEmbedder::load(&src, WEIGHTS_F32, DType::BF16, &Device::Cpu).unwrap();
    check(
        &m.embed(&sentences(&rows)).unwrap(),
        &rows,
        0.9995,
        5e-3,
        "f32 file, bf16",
    );
    std::fs::remove_dir_all(tmp).unwrap();
}

#[test]
#[ignore = "needs the all-MiniLM-L6-v2 files: scripts/fetch-minilm.sh"]
fn benchmark_batch_32_x_128() {
    let m = SentenceEmbedder::load(&dir(), WEIGHTS_F32, DType::F32, &Device::Cpu).expect(NEEDS);
    let (ids, mask) = synthetic_batch(32, 128, &Device::Cpu).unwrap();
    let e = m.embed_batch_ids(&ids, &mask).unwrap();
    assert_eq!(e.dims(), &[32, 384]);
    for row in e.to_vec2::<f32>().unwrap() {
        let n = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-4, "norm {n}");
    }
    let t = bert_embeddings_per_sec(&m, 32, 128, 2).unwrap();
    println!(
        "CPU f32: {:.1} embeddings/s at 32 x 128 tokens",
        t.per_sec()
    );
    assert!(t.per_sec() > 0.0);
}
