//! Writes an f16 copy of a safetensors checkpoint (same tensor names and metadata).
//!
//! Usage: cargo run --release --example make_f16 -- [MODEL_DIR | SRC DST]
//! With a directory (default: $CANDLE_ROCM_MINILM_DIR or ~/.cache/candle-rocm/all-minilm-l6-v2)
//! it converts MODEL_DIR/model.safetensors to MODEL_DIR/model.f16.safetensors.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use candle_core::DType;
use candle_rocm_models::bert::{WEIGHTS_F16, WEIGHTS_F32};
use candle_rocm_models::minilm_dir;
use candle_rocm_models::weights::convert_safetensors;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (src, dst) = match args.as_slice() {
        [] => {
            let dir = minilm_dir().context(
                "no model directory found: run scripts/fetch-minilm.sh or pass MODEL_DIR",
            )?;
            (dir.join(WEIGHTS_F32), dir.join(WEIGHTS_F16))
        }
        [dir] => {
            let dir = PathBuf::from(dir);
            (dir.join(WEIGHTS_F32), dir.join(WEIGHTS_F16))
        }
        [src, dst] => (PathBuf::from(src), PathBuf::from(dst)),
        _ => bail!("usage: make_f16 [MODEL_DIR | SRC DST]"),
    };
    let t = Instant::now();
    let s = convert_safetensors(&src, &dst, DType::F16)?;
    println!(
        "{} -> {}: {} tensors ({} converted to f16), {:.1} MiB -> {:.1} MiB in {:.2?}",
        src.display(),
        dst.display(),
        s.tensors,
        s.converted,
        s.bytes_in as f64 / (1 << 20) as f64,
        s.bytes_out as f64 / (1 << 20) as f64,
        t.elapsed()
    );
    println!("{}", dst.display());
    Ok(())
}
