//! Shared by the test binaries that use the real all-MiniLM-L6-v2 (`mod common;`): the float64
//! reference of tests/data/minilm_reference.json and the comparison against it.
#![allow(dead_code)]

use std::path::PathBuf;

use candle_core::{Device, Tensor};
use candle_rocm_models::bert::cosine_similarity_rows;
use candle_rocm_models::minilm_dir;

/// One reference sentence: Python `tokenizers` ids and the float64 NumPy embedding.
pub struct Row {
    pub sentence: String,
    pub ids: Vec<u32>,
    pub embedding: Vec<f32>,
}

/// The model directory, or a panic that says how to get it (tests that need it are #[ignore]d,
/// so this only runs when asked for).
pub fn dir() -> PathBuf {
    minilm_dir().unwrap_or_else(|| {
        panic!(
            "all-MiniLM-L6-v2 not found: run scripts/fetch-minilm.sh or set CANDLE_ROCM_MINILM_DIR"
        )
    })
}

/// tests/data/minilm_reference.json, embedded (the GPU machine has no source tree).
const REFERENCE_JSON: &str = include_str!("../data/minilm_reference.json");

/// The reference rows (scripts/minilm_reference.py).
pub fn reference() -> Vec<Row> {
    let v: serde_json::Value = serde_json::from_str(REFERENCE_JSON).expect("reference JSON");
    let nums = |x: &serde_json::Value| -> Vec<f64> {
        x.as_array()
            .expect("array")
            .iter()
            .map(|n| n.as_f64().expect("number"))
            .collect()
    };
    v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| Row {
            sentence: r["sentence"].as_str().expect("sentence").to_string(),
            ids: nums(&r["ids"]).into_iter().map(|x| x as u32).collect(),
            embedding: nums(&r["embedding"])
                .into_iter()
                .map(|x| x as f32)
                .collect(),
        })
        .collect()
}

pub fn sentences(rows: &[Row]) -> Vec<&str> {
    rows.iter().map(|r| r.sentence.as_str()).collect()
}

pub fn reference_tensor(rows: &[Row]) -> Tensor {
    let dim = rows[0].embedding.len();
    let flat: Vec<f32> = rows.iter().flat_map(|r| r.embedding.clone()).collect();
    Tensor::from_vec(flat, (rows.len(), dim), &Device::Cpu).expect("reference tensor")
}

/// Checks `emb` (any device) against the reference: per row cosine > `min_cos`,
/// max |diff| < `max_abs`, unit norm; prints one line per sentence.
pub fn check(emb: &Tensor, rows: &[Row], min_cos: f32, max_abs: f32, what: &str) {
    let cos = cosine_similarity_rows(emb, &reference_tensor(rows)).expect("cosine");
    let got = emb
        .to_device(&Device::Cpu)
        .and_then(|t| t.to_vec2::<f32>())
        .expect("embeddings to host");
    for ((r, c), g) in rows.iter().zip(&cos).zip(&got) {
        let diff = r
            .embedding
            .iter()
            .zip(g)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        let norm = g.iter().map(|x| x * x).sum::<f32>().sqrt();
        println!(
            "{what}: cos {c:.7} max|diff| {diff:.2e} |e| {norm:.6}  {}",
            r.sentence
        );
        assert!(
            *c > min_cos,
            "{what}: cosine {c} to the reference for {:?}",
            r.sentence
        );
        assert!(
            diff < max_abs,
            "{what}: max |diff| {diff} for {:?}",
            r.sentence
        );
        assert!((norm - 1.0).abs() < 1e-4, "{what}: norm {norm}");
    }
}
