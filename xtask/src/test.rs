//! `cargo xtask test`: the project's test command.
//!
//! 1. `install-rocm` (see [`crate::rocm`]): a fresh machine gets the ROCm toolchain, a prepared
//!    one prints `ROCm prefix up to date`;
//! 2. tier 1: `cargo test --workspace --no-fail-fast` (tests that need a GPU are `#[ignore]`d and
//!    show as such);
//!    then `cargo xtask patch-candle` and the `tensor/` workspace's tests (Candle's own
//!    `test_device!` tests on Candle's CPU backend behind the `Device::Ext` hook, models on the
//!    CPU; `CANDLE_EXT_TEST_DEVICE=cpu`);
//! 3. tier 2: the steps of [`TIER2`], with the ROCm libraries (and, for the Debian packages, the
//!    `sid-run` loader they need as cargo's target runner);
//! 4. a summary. Every step runs even if an earlier one failed; the command fails if any did.
//!
//! Usage: `cargo xtask test [--no-rocm] [-- CARGO_TEST_ARGS...]`
//!
//! * `--no-rocm`: no install and no tier 2, for a quick tier-1 run;
//! * arguments after `--` go to tier 1's `cargo test --workspace` as they are, e.g.
//!   `cargo xtask test -- --release` or `cargo xtask test -- -- --include-ignored` (the GPU machine).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::rocm::{self, RocmEnv};

/// What a tier-2 step needs from the ROCm install.
#[derive(Clone, Copy)]
enum Needs {
    /// Loads the ROCm libraries: `ROCM_PATH`, `HIP_CORE_ROCM_LIB_DIR`, `HIP_PLATFORM=amd`, and
    /// the loader they need as cargo's target runner.
    Libraries,
    /// Runs the AMDGPU toolchain: the prefix's `bin/` (`hip-clang`, ...) first on `PATH`,
    /// `ROCM_PATH` and `HIP_DEVICE_LIB_PATH` (no runner: the xtask itself runs as it is).
    Toolchain,
}

/// One tier-2 step: `cargo <args>` from the workspace root.
struct Tier2Step {
    name: &'static str,
    cargo: &'static [&'static str],
    needs: Needs,
}

/// The tier-2 steps, in order. Add rocblas-safe / miopen-safe library tests here as
/// `Needs::Libraries` steps.
const TIER2: &[Tier2Step] = &[
    Tier2Step {
        name: "tier 2: hip-core against the ROCm libraries",
        cargo: &[
            "test",
            "-p",
            "hip-core",
            "--test",
            "rocm_libraries",
            "--",
            "--ignored",
            "--test-threads=1",
        ],
        needs: Needs::Libraries,
    },
    Tier2Step {
        name: "tier 2: rocblas-safe against the ROCm libraries",
        cargo: &[
            "test",
            "-p",
            "rocblas-safe",
            "--test",
            "rocm_libraries",
            "--",
            "--ignored",
            "--test-threads=1",
        ],
        needs: Needs::Libraries,
    },
    Tier2Step {
        name: "tier 2: miopen-safe against the ROCm libraries (host-only MIOpen calls)",
        cargo: &[
            "test",
            "-p",
            "miopen-safe",
            "--test",
            "rocm_libraries",
            "--",
            "--ignored",
            "--test-threads=1",
        ],
        needs: Needs::Libraries,
    },
    Tier2Step {
        name: "tier 2: rccl-safe's table against Debian's RCCL (symbol table only)",
        cargo: &[
            "test",
            "-p",
            "rccl-safe",
            "--test",
            "rocm_libraries",
            "--",
            "--ignored",
            "--test-threads=1",
        ],
        needs: Needs::Libraries,
    },
    Tier2Step {
        name: "tier 2: every kernel module JIT-compiles with hipRTC (gfx942, gfx1100)",
        cargo: &[
            "test",
            "-p",
            "rocm-kernels",
            "--test",
            "rocm_libraries",
            "--",
            "--ignored",
            "--nocapture",
        ],
        needs: Needs::Libraries,
    },
    Tier2Step {
        name: "tier 2: kernel bundles are fresh and every module compiles (up-to-date records for this compiler stand for a compile)",
        cargo: &["xtask", "build-kernels", "--check"],
        needs: Needs::Toolchain,
    },
];

enum Outcome {
    Passed,
    Failed(String),
    Skipped(String),
}

struct StepResult {
    name: String,
    outcome: Outcome,
    secs: f64,
}

/// Runs `cargo xtask test`.
pub fn run(args: &[String]) -> Result<(), String> {
    let (own, extra) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[][..]),
    };
    let mut no_rocm = false;
    for a in own {
        match a.as_str() {
            "--no-rocm" => no_rocm = true,
            "-h" | "--help" => {
                println!("usage: cargo xtask test [--no-rocm] [-- CARGO_TEST_ARGS...]");
                return Ok(());
            }
            other => {
                return Err(format!(
                    "unknown option `{other}`; try `cargo xtask test --help`"
                ))
            }
        }
    }

    let root = rocm::workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut results = Vec::new();

    // 1. the ROCm toolchain
    let mut env = None;
    if no_rocm {
        results.push(StepResult {
            name: "install ROCm".into(),
            outcome: Outcome::Skipped("--no-rocm".into()),
            secs: 0.0,
        });
    } else {
        banner("install ROCm: scripts/install-rocm.sh");
        let t = Instant::now();
        let outcome = match rocm::install(&[]) {
            Ok(e) => {
                env = Some(e);
                Outcome::Passed
            }
            Err(e) => Outcome::Failed(e),
        };
        results.push(StepResult {
            name: "install ROCm".into(),
            outcome,
            secs: t.elapsed().as_secs_f64(),
        });
    }

    // 2. tier 1
    // --no-fail-fast: every test binary runs, so that one failure does not hide the others
    let mut tier1: Vec<String> = vec!["test".into(), "--workspace".into(), "--no-fail-fast".into()];
    tier1.extend(extra.iter().cloned());
    let mut cmd = Command::new(&cargo);
    cmd.args(&tier1).current_dir(&root);
    results.push(run_step("tier 1: cargo test --workspace", &mut cmd, &tier1));

    // 2b. tier 1, Tensor level: Candle patched with our device hook (the `tensor/` workspace),
    // Candle's own device tests on its CPU backend behind the hook, the models on the CPU.
    let t = Instant::now();
    let patched = crate::candle_patch::patch_candle(&root, &root.join("target/patched-candle"));
    results.push(StepResult {
        name: "tier 1: cargo xtask patch-candle".into(),
        outcome: match &patched {
            Ok(()) => Outcome::Passed,
            Err(e) => Outcome::Failed(e.clone()),
        },
        secs: t.elapsed().as_secs_f64(),
    });
    let mut tensor: Vec<String> = vec![
        "test".into(),
        "--manifest-path".into(),
        "tensor/Cargo.toml".into(),
        "--workspace".into(),
        "--no-fail-fast".into(),
    ];
    tensor.extend(extra.iter().cloned());
    if patched.is_ok() {
        let mut cmd = Command::new(&cargo);
        cmd.args(&tensor)
            .current_dir(&root)
            .env("CANDLE_EXT_TEST_DEVICE", "cpu");
        results.push(run_step(
            "tier 1: tensor/ workspace (Candle's device tests on the CPU behind Device::Ext)",
            &mut cmd,
            &tensor,
        ));
    } else {
        results.push(StepResult {
            name: "tier 1: tensor/ workspace".into(),
            outcome: Outcome::Failed("the Candle patch did not apply".into()),
            secs: 0.0,
        });
    }

    // 3. tier 2
    let runner_var = runner_variable();
    for step in TIER2 {
        let Some(env) = env.as_ref() else {
            let outcome = if no_rocm {
                Outcome::Skipped("--no-rocm".into())
            } else {
                Outcome::Failed("no ROCm toolchain (the install step failed)".into())
            };
            results.push(StepResult {
                name: step.name.into(),
                outcome,
                secs: 0.0,
            });
            continue;
        };
        let mut cmd = Command::new(&cargo);
        cmd.args(step.cargo).current_dir(&root);
        apply_env(&mut cmd, env, step.needs, &runner_var);
        let args: Vec<String> = step.cargo.iter().map(|s| s.to_string()).collect();
        results.push(run_step(step.name, &mut cmd, &args));
    }

    // 4. summary
    println!("\n==> cargo xtask test: summary");
    for r in &results {
        let (tag, note) = match &r.outcome {
            Outcome::Passed => ("ok", String::new()),
            Outcome::Failed(why) => ("FAILED", format!(" ({why})")),
            Outcome::Skipped(why) => ("skipped", format!(" ({why})")),
        };
        println!("  {tag:<8} {:>7.1}s  {}{note}", r.secs, r.name);
    }
    let failed: Vec<&str> = results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Failed(_)))
        .map(|r| r.name.as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {} steps failed: {}",
            failed.len(),
            results.len(),
            failed.join("; ")
        ))
    }
}

fn banner(what: &str) {
    println!("\n==> {what}");
}

/// Runs one cargo command with inherited stdio.
fn run_step(name: &str, cmd: &mut Command, args: &[String]) -> StepResult {
    banner(&format!("{name}: cargo {}", args.join(" ")));
    let t = Instant::now();
    let outcome = match cmd.status() {
        Ok(s) if s.success() => Outcome::Passed,
        Ok(s) => Outcome::Failed(s.to_string()),
        Err(e) => Outcome::Failed(format!("could not run {:?}: {e}", cmd.get_program())),
    };
    StepResult {
        name: name.into(),
        outcome,
        secs: t.elapsed().as_secs_f64(),
    }
}

/// Sets what a tier-2 step needs from the ROCm install.
fn apply_env(cmd: &mut Command, env: &RocmEnv, needs: Needs, runner_var: &str) {
    cmd.env("ROCM_PATH", &env.rocm_path);
    match needs {
        Needs::Libraries => {
            cmd.env("HIP_CORE_ROCM_LIB_DIR", &env.lib_dir)
                .env("HIP_PLATFORM", "amd");
            if let Some(sid_run) = &env.sid_run {
                cmd.env(runner_var, sid_run);
            }
        }
        Needs::Toolchain => {
            let path = std::env::var_os("PATH").unwrap_or_default();
            let mut dirs = vec![env.bin_dir.clone()];
            dirs.extend(std::env::split_paths(&path));
            if let Ok(p) = std::env::join_paths(dirs) {
                cmd.env("PATH", p);
            }
            if let Some(d) = &env.device_lib_path {
                cmd.env("HIP_DEVICE_LIB_PATH", d);
            }
        }
    }
}

/// `CARGO_TARGET_<HOST TRIPLE>_RUNNER`, the host triple taken from `rustc -vV`.
fn runner_variable() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let host = Command::new(Path::new(&rustc))
        .arg("-vV")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        })
        .unwrap_or_else(|| "x86_64-unknown-linux-gnu".to_string());
    format!(
        "CARGO_TARGET_{}_RUNNER",
        host.to_uppercase().replace(['-', '.'], "_")
    )
}
