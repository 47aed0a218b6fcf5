//! Sentence embeddings with all-MiniLM-L6-v2: first values, similarity matrix, timings.
//!
//! Usage: cargo run --release --example bert_embeddings -- [MODEL_DIR] [f32|f16|bf16] [DEVICE]
//! MODEL_DIR defaults to $CANDLE_ROCM_MINILM_DIR or ~/.cache/candle-rocm/all-minilm-l6-v2
//! (scripts/fetch-minilm.sh). f16 reads model.f16.safetensors when present (see make_f16),
//! else converts model.safetensors while loading. DEVICE defaults to "cpu".

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use candle_core::DType;
use candle_rocm_models::bench::bert_embeddings_per_sec;
use candle_rocm_models::bert::{
    cosine_similarity_matrix, SentenceEmbedder, WEIGHTS_F16, WEIGHTS_F32,
};
use candle_rocm_models::{minilm_dir, pick_device};

const SENTENCES: &[&str] = &[
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
    "A man is playing a guitar.",
    "Someone is strumming a guitar.",
];

fn main() -> anyhow::Result<()> {
    let process_start = Instant::now();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = match args.first() {
        Some(d) => PathBuf::from(d),
        None => minilm_dir().context(
            "no model directory given and none found: run scripts/fetch-minilm.sh or set CANDLE_ROCM_MINILM_DIR",
        )?,
    };
    let dtype = match args.get(1).map(String::as_str).unwrap_or("f32") {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        other => bail!("unknown dtype {other:?} (f32, f16 or bf16)"),
    };
    let device_name = args.get(2).map(String::as_str).unwrap_or("cpu");
    let device = match pick_device(device_name) {
        Ok(d) => d,
        Err(e) if device_name.starts_with("rocm") => {
            // The first line only: candle errors may carry a backtrace after it.
            let e = e.to_string();
            let reason = e.lines().next().unwrap_or("").trim_end_matches('.');
            eprintln!(
                "no usable GPU for {device_name:?} ({reason}). This demo needs an AMD GPU with \
                 ROCm (or an NVIDIA GPU with CUDA and HIP_PLATFORM=nvidia); run it with DEVICE=cpu \
                 to use the CPU."
            );
            std::process::exit(1);
        }
        Err(e) => return Err(e.into()),
    };
    // f16 runs read the f16 copy when there is one; any run reads the f16 copy when it is the
    // only file (a directory prepared for a machine that takes at most 64 MiB).
    let has_f16 = dir.join(WEIGHTS_F16).is_file();
    let weights = if has_f16 && (dtype == DType::F16 || !dir.join(WEIGHTS_F32).is_file()) {
        WEIGHTS_F16
    } else {
        WEIGHTS_F32
    };

    let t = Instant::now();
    let model = SentenceEmbedder::load(&dir, weights, dtype, &device)?;
    println!(
        "loaded {} ({weights}, {dtype:?}) on {:?} in {:.2?}",
        dir.display(),
        device.location(),
        t.elapsed()
    );

    let t = Instant::now();
    let emb = model.embed(SENTENCES)?;
    let host = emb.to_device(&candle_core::Device::Cpu)?;
    let embed_time = t.elapsed();
    println!(
        "embeddings {:?} in {embed_time:.2?}; first embeddings {:.2?} after the program started \
         (device, weights, first use of every kernel)",
        host.dims(),
        process_start.elapsed()
    );
    for (s, row) in SENTENCES.iter().zip(host.to_vec2::<f32>()?) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        let head: Vec<String> = row.iter().take(5).map(|x| format!("{x:+.5}")).collect();
        println!("  [{}, ...] |e|={norm:.5}  {s}", head.join(", "));
    }
    println!("cosine similarity:");
    for (i, row) in cosine_similarity_matrix(&host, &host)?.iter().enumerate() {
        let cells: Vec<String> = row.iter().map(|x| format!("{x:6.3}")).collect();
        println!("  {} | {}", cells.join(" "), SENTENCES[i]);
    }

    if !device.is_cpu() {
        // The same model on Candle's CPU backend: how close the GPU's embeddings are.
        let cpu = SentenceEmbedder::load(&dir, weights, DType::F32, &candle_core::Device::Cpu)?
            .embed(SENTENCES)?;
        let cos = candle_rocm_models::bert::cosine_similarity_rows(&host, &cpu)?;
        let lowest = cos.iter().copied().fold(f32::INFINITY, f32::min);
        println!("cosine similarity to the CPU (f32) embeddings: lowest {lowest:.7}");
    }

    let (batch, seq, iters) = (32, 128, 3);
    let tp = bert_embeddings_per_sec(&model, batch, seq, iters)?;
    println!(
        "throughput: {:.1} embeddings/s ({batch} x {seq} tokens, {iters} batches, {:.3} s/batch)",
        tp.per_sec(),
        tp.elapsed.as_secs_f64() / iters as f64
    );
    if !device.is_cpu() {
        // One more batch with every kernel and library call timed on the GPU.
        let (ids, mask) = candle_rocm_models::bert::synthetic_batch(batch, seq, &device)?;
        device.synchronize()?;
        let t = Instant::now();
        hip_core::launch_profile_start(true);
        let emb = model.embed_batch_ids(&ids, &mask)?;
        let profile = hip_core::launch_profile_stop();
        emb.to_device(&candle_core::Device::Cpu)?;
        println!(
            "one batch, timed kernel by kernel ({:.2?} with the events):",
            t.elapsed()
        );
        candle_rocm_models::bench::print_launch_profile(&profile);
    }
    Ok(())
}
