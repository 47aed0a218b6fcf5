//! Throughput measurements (plain functions; criterion benches or examples call them).
//!
//! Each function runs one untimed warm-up first (kernel compilation, allocator caches), then
//! times the work including a copy of the result to the host, so that asynchronous devices are
//! measured to completion.

use std::time::{Duration, Instant};

use candle_core::Device;

use crate::bert::{synthetic_batch, SentenceEmbedder};
use crate::device::synchronize;
use crate::error::{invalid, Result};
use crate::llama::{generate, LlamaModel};

/// Items processed over a measured time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Throughput {
    /// Items (embeddings, tokens) processed in the timed part.
    pub items: usize,
    /// Wall time of the timed part.
    pub elapsed: Duration,
}

impl Throughput {
    /// Items per second.
    pub fn per_sec(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s == 0.0 {
            0.0
        } else {
            self.items as f64 / s
        }
    }
}

/// BERT sentence embeddings per second on fixed `batch x seq` token batches (the issue's
/// benchmark is 32 x 128), over `iterations` batches after one warm-up batch.
pub fn bert_embeddings_per_sec(
    embedder: &SentenceEmbedder,
    batch: usize,
    seq: usize,
    iterations: usize,
) -> Result<Throughput> {
    if iterations == 0 {
        return Err(invalid("bert_embeddings_per_sec: iterations must be >= 1"));
    }
    let (ids, mask) = synthetic_batch(batch, seq, embedder.device())?;
    embedder
        .embed_batch_ids(&ids, &mask)?
        .to_device(&Device::Cpu)?;
    synchronize(embedder.device())?;
    let start = Instant::now();
    for _ in 0..iterations {
        embedder
            .embed_batch_ids(&ids, &mask)?
            .to_device(&Device::Cpu)?;
    }
    synchronize(embedder.device())?;
    Ok(Throughput {
        items: batch * iterations,
        elapsed: start.elapsed(),
    })
}

/// Greedy decoding speed with the KV cache: `steps` tokens after a deterministic prompt of
/// `prompt_len` tokens. The result counts the one-token steps only (the prefill is excluded);
/// each step includes the copy of its logits to the host and the argmax there.
pub fn decode_tokens_per_sec(
    model: &LlamaModel,
    prompt_len: usize,
    steps: usize,
) -> Result<Throughput> {
    if steps < 2 {
        return Err(invalid(
            "decode_tokens_per_sec: need steps >= 2 (the first token comes from the prefill)",
        ));
    }
    let prompt = synthetic_prompt(prompt_len, model.config().vocab_size)?;
    generate(model, &prompt, 2, true)?;
    let g = generate(model, &prompt, steps, true)?;
    Ok(Throughput {
        items: g.tokens.len() - 1,
        elapsed: g.decode,
    })
}

/// A deterministic prompt of `len` token ids in `1..vocab` (starts with 1, the BOS id of the
/// built-in configurations).
pub fn synthetic_prompt(len: usize, vocab: usize) -> Result<Vec<u32>> {
    if len == 0 || vocab < 2 {
        return Err(invalid(format!(
            "synthetic_prompt: need len >= 1 and vocab >= 2, got {len} and {vocab}"
        )));
    }
    let vocab = u64::try_from(vocab).map_err(|_| invalid("synthetic_prompt: vocab too large"))?;
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut out = vec![1u32];
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.push((1 + state % (vocab - 1)) as u32);
    }
    Ok(out)
}

/// Prints a launch profile (`hip_core::launch_profile_stop`), one line per kernel or library
/// call: launches, GPU time (a timed profile; NaN otherwise), name; then the GPU time of all.
pub fn print_launch_profile(profile: &[hip_core::KernelProfile]) {
    let mut total = 0.0;
    for k in profile {
        total += k.gpu_ms.unwrap_or(0.0);
        println!(
            "  {:5} {:9.1} us  {}",
            k.launches,
            k.gpu_ms.unwrap_or(f64::NAN) * 1e3,
            k.name
        );
    }
    println!(
        "  GPU time of all launches and library calls: {:.1} us",
        total * 1e3
    );
}
