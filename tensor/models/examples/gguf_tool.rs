//! GGUF file tooling on the CPU.
//!
//! Usage: cargo run --release --example gguf_tool -- COMMAND ...
//!
//! - `inspect FILE`: metadata (arrays summarised), tensors (name, shape, type) and a count of
//!   the tensor types.
//! - `requantize SRC DST TYPE`: every weight matrix converted to TYPE (f32, f16, bf16, q4_0,
//!   q4_1, q5_0, q5_1, q8_0, q2k, q3k, q4k, q5k, q6k, ...); norms and matrices whose rows do
//!   not fit TYPE's block size are kept.
//! - `truncate SRC DST N`: only the first N blocks of the model.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context};
use candle_core::quantized::gguf_file::Value;
use candle_rocm_models::gguf_tools::{parse_ggml_dtype, read_gguf, requantize, truncate_layers};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["inspect", file] => inspect(Path::new(file)),
        ["requantize", src, dst, ty] => {
            let dtype = parse_ggml_dtype(ty)?;
            let s = requantize(Path::new(src), Path::new(dst), dtype)?;
            println!(
                "{dst}: {} tensors, {} requantized to {dtype:?}, {} kept; {:.1} MiB -> {:.1} MiB",
                s.tensors,
                s.requantized,
                s.kept.len(),
                s.bytes_in as f64 / (1 << 20) as f64,
                s.bytes_out as f64 / (1 << 20) as f64
            );
            let mut kept: BTreeMap<String, usize> = BTreeMap::new();
            for (_, t) in &s.kept {
                *kept.entry(format!("{t:?}")).or_default() += 1;
            }
            if !kept.is_empty() {
                println!("kept unchanged, by type: {kept:?}");
            }
            Ok(())
        }
        ["truncate", src, dst, n] => {
            let n: usize = n.parse().context("N must be a number of blocks")?;
            let s = truncate_layers(Path::new(src), Path::new(dst), n)?;
            println!(
                "{dst}: {} of {} blocks, {} of {} tensors, {:.1} MiB",
                s.layers_out,
                s.layers_in,
                s.tensors_out,
                s.tensors_in,
                s.bytes_out as f64 / (1 << 20) as f64
            );
            Ok(())
        }
        _ => bail!("usage: gguf_tool inspect FILE | requantize SRC DST TYPE | truncate SRC DST N"),
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::Array(items) => {
            let first: Vec<String> = items.iter().take(4).map(show).collect();
            format!("[{} items: {}, ...]", items.len(), first.join(", "))
        }
        Value::String(s) if s.len() > 80 => {
            let cut: String = s.chars().take(80).collect();
            format!("{cut:?}... ({} bytes)", s.len())
        }
        Value::String(s) => format!("{s:?}"),
        other => format!("{other:?}"),
    }
}

fn inspect(path: &Path) -> anyhow::Result<()> {
    let content = read_gguf(path)?;
    println!("{}: {:?}", path.display(), content.magic);
    let metadata: BTreeMap<_, _> = content.metadata.iter().collect();
    println!("metadata ({} keys):", metadata.len());
    for (k, v) in metadata {
        println!("  {k} = {}", show(v));
    }
    let mut tensors: Vec<_> = content.tensor_infos.iter().collect();
    tensors.sort_by_key(|(_, info)| info.offset);
    println!("tensors ({}):", tensors.len());
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (name, info) in &tensors {
        println!("  {name} {:?} {:?}", info.shape.dims(), info.ggml_dtype);
        let e = counts.entry(format!("{:?}", info.ggml_dtype)).or_default();
        e.0 += 1;
        e.1 += info.shape.elem_count();
    }
    for (ty, (n, elems)) in counts {
        println!("{ty}: {n} tensors, {elems} elements");
    }
    Ok(())
}
