//! `cargo xtask`: the workspace's automation, run as `cargo xtask <command>`.
//!
//! * `generate`: the README's first command (SmolLM2 text generation on the GPU, Tensor-level Candle);
//! * `demo`: sentence embeddings (all-MiniLM-L6-v2) on the GPU, checked against the CPU;
//! * `bindgen`: regenerate the committed FFI bindings from the ROCm headers;
//! * `build-kernels`: compile the HIP kernels into the committed multi-arch bundles (or `--check` them);
//! * `install-rocm`: install (or find) the ROCm headers, libraries and AMDGPU clang;
//! * `patch-candle`: Candle with our out-of-tree device hook, for the `tensor/` workspace;
//! * `test`: the project's test command (tier 1 everywhere, tier 2 with the ROCm libraries).

mod bindgen;
mod candle_patch;
mod demo;
mod generate;
mod kernels;
mod rocm;
mod test;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match args.split_first() {
        Some((c, r)) => (c.as_str(), r),
        None => ("help", &[][..]),
    };
    let result = match cmd {
        "bindgen" => bindgen::run(rest),
        "build-kernels" => kernels::run(rest),
        "install-rocm" => rocm::install(rest).map(|_| ()),
        "test" => test::run(rest),
        "patch-candle" => candle_patch::run(rest),
        "generate" => generate::run(rest),
        "demo" => demo::run(rest),
        "help" | "--help" | "-h" => {
            println!("usage: cargo xtask <generate | demo | bindgen | build-kernels | install-rocm | patch-candle | test> [args]");
            Ok(())
        }
        other => Err(format!(
            "unknown xtask command `{other}`; try `cargo xtask help`"
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {cmd}: {e}");
            ExitCode::FAILURE
        }
    }
}
