//! The zoo: every case on the device under test against the CPU reference.
//!
//! - `zoo_on_rocm` (needs a GPU): every case in every dtype it lists on `Device::new_rocm(0)`,
//!   against the CPU f32 reference taken one batch element at a time. Prints one line per
//!   (case, dtype), writes the markdown table to `$CANDLE_ROCM_ZOO_REPORT` when set, and fails
//!   at the end with the list of failures (a panic or error in one case does not stop the
//!   others). `CANDLE_ROCM_ZOO_FILTER=name1,name2` runs a subset.
//! - `zoo_on_ext_cpu` (everywhere, CI): every case in f32 on Candle's CPU backend behind the
//!   `Device::Ext` hook against the plain CPU at the same batch: must be bit-identical.

use std::panic::{catch_unwind, AssertUnwindSafe};

use candle_core::{DType, Device};
use candle_rocm::RocmDeviceExt;
use candle_rocm_zoo::compare::{identical, judge, Verdict};
use candle_rocm_zoo::{all_cases, reference, run_full, Case};

fn selected() -> Vec<Case> {
    let filter = std::env::var("CANDLE_ROCM_ZOO_FILTER").ok();
    let names: Option<Vec<String>> = filter
        .as_deref()
        .map(|f| f.split(',').map(|s| s.trim().to_string()).collect());
    all_cases()
        .into_iter()
        .filter(|c| names.as_ref().is_none_or(|n| n.iter().any(|x| x == c.name)))
        .collect()
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".to_string())
}

#[test]
fn the_zoo_has_every_family() {
    let cases = all_cases();
    let mut names: Vec<&str> = cases.iter().map(|c| c.name).collect();
    names.sort();
    let before = names.len();
    names.dedup();
    assert_eq!(before, names.len(), "duplicate case names: {names:?}");
    for c in &cases {
        assert!(c.batch >= 1 && !c.dtypes.is_empty(), "{c:?}");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn zoo_on_rocm() {
    let dev = Device::new_rocm(0).expect("a ROCm device (HIP_PLATFORM=nvidia on NVIDIA)");
    let mut table = String::from(
        "| model | family | batch | dtype | verdict | max diff | cosine |\n|---|---|---|---|---|---|---|\n",
    );
    let mut failures = Vec::new();
    let (mut passed, mut total) = (0usize, 0usize);
    for case in selected() {
        let t0 = std::time::Instant::now();
        let reference = match catch_unwind(AssertUnwindSafe(|| reference(&case))) {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                failures.push(format!("{} (reference on the CPU): {e}", case.name));
                continue;
            }
            Err(p) => {
                failures.push(format!(
                    "{} (reference on the CPU) panicked: {}",
                    case.name,
                    panic_message(p)
                ));
                continue;
            }
        };
        for &dtype in case.dtypes {
            total += 1;
            let t1 = std::time::Instant::now();
            let got = catch_unwind(AssertUnwindSafe(|| run_full(&case, &dev, dtype)));
            let verdict = match got {
                Ok(Ok(got)) => judge(dtype, &got, &reference),
                Ok(Err(e)) => Err(e),
                Err(p) => Err(candle_core::Error::Msg(format!(
                    "panicked: {}",
                    panic_message(p)
                ))),
            };
            let (line, row) = match verdict {
                Ok(v @ Verdict { pass, .. }) => {
                    let word = if pass { "pass" } else { "FAIL" };
                    if pass {
                        passed += 1;
                    } else {
                        failures.push(format!("{} {dtype:?}: {v:?}", case.name));
                    }
                    (
                        format!(
                            "{word}  max diff {:.3e}  cosine {:.7}",
                            v.max_diff, v.cosine
                        ),
                        format!(
                            "| {} | {} | {} | {dtype:?} | {word} | {:.2e} | {:.7} |",
                            case.name, case.family, case.batch, v.max_diff, v.cosine
                        ),
                    )
                }
                Err(e) => {
                    failures.push(format!("{} {dtype:?}: error: {e}", case.name));
                    (
                        format!("ERROR {e}"),
                        format!(
                            "| {} | {} | {} | {dtype:?} | ERROR | - | - |",
                            case.name, case.family, case.batch
                        ),
                    )
                }
            };
            println!(
                "zoo {:<18} {:<5} {line}  ({:.1} s; reference {:.1} s)",
                case.name,
                format!("{dtype:?}"),
                t1.elapsed().as_secs_f64(),
                (t1 - t0).as_secs_f64()
            );
            table.push_str(&row);
            table.push('\n');
        }
    }
    println!("\n{table}");
    println!("zoo summary: {passed} passed, {} failed", total - passed);
    if let Some(path) = std::env::var_os("CANDLE_ROCM_ZOO_REPORT") {
        std::fs::write(&path, &table).expect("write the zoo report");
    }
    assert!(
        failures.is_empty(),
        "zoo failures:\n{}",
        failures.join("\n")
    );
}

/// Cases whose model code takes another path on `Device::Cpu` than on any other device
/// (candle-transformers' qwen3 attention uses candle-nn's CPU-only flash attention when
/// `device.is_cpu()`, plain matmul attention elsewhere, `Device::Ext` included): the ext run
/// cannot be bit-identical to the plain CPU, and is judged at the f32 thresholds instead.
const CPU_ONLY_PATHS: &[&str] = &["qwen3", "qwen3_moe"];

#[test]
fn zoo_on_ext_cpu() {
    let ext = Device::Ext(candle_core::ext::ExtDevice::cpu());
    let mut failures = Vec::new();
    for case in selected() {
        let result = catch_unwind(AssertUnwindSafe(|| -> candle_core::Result<bool> {
            let a = run_full(&case, &ext, DType::F32)?;
            let b = run_full(&case, &Device::Cpu, DType::F32)?;
            if CPU_ONLY_PATHS.contains(&case.name) {
                let v = judge(DType::F32, &a, &b)?;
                println!(
                    "zoo {:<18} ext cpu vs cpu (another attention path): max diff {:.3e} cosine {:.7}",
                    case.name, v.max_diff, v.cosine
                );
                return Ok(v.pass);
            }
            identical(&a, &b)
        }));
        match result {
            Ok(Ok(true)) => println!("zoo {:<18} ext cpu == cpu", case.name),
            Ok(Ok(false)) => failures.push(format!("{}: ext cpu differs from cpu", case.name)),
            Ok(Err(e)) => failures.push(format!("{}: {e}", case.name)),
            Err(p) => failures.push(format!("{}: panicked: {}", case.name, panic_message(p))),
        }
    }
    assert!(
        failures.is_empty(),
        "zoo failures:\n{}",
        failures.join("\n")
    );
}

/// Cases whose whole-batch CPU run hits candle-core 0.11.1's batch-fold bug in its CPU matmul
/// (a batch-broadcast rhs with a transposed lhs whose batch stride is `m * k`): their
/// whole-batch CPU output differs from the per-element reference, which is why the reference
/// takes one element at a time.
const CPU_BATCH_FOLD_AFFECTED: &[&str] = &["segformer", "encodec", "sd-vae"];

#[test]
fn cpu_whole_batch_matches_per_element_reference() {
    let mut failures = Vec::new();
    for case in selected() {
        let result = catch_unwind(AssertUnwindSafe(|| -> candle_core::Result<Verdict> {
            let whole = run_full(&case, &Device::Cpu, DType::F32)?;
            judge(DType::F32, &whole, &reference(&case)?)
        }));
        let affected = CPU_BATCH_FOLD_AFFECTED.contains(&case.name);
        match result {
            Ok(Ok(v)) => {
                println!(
                    "zoo {:<18} cpu whole batch vs per element: max diff {:.3e} cosine {:.7}{}",
                    case.name,
                    v.max_diff,
                    v.cosine,
                    if affected {
                        " (CPU batch-fold bug)"
                    } else {
                        ""
                    }
                );
                if !v.pass && !affected {
                    failures.push(format!("{}: {v:?}", case.name));
                }
            }
            Ok(Err(e)) => failures.push(format!("{}: {e}", case.name)),
            Err(p) => failures.push(format!("{}: panicked: {}", case.name, panic_message(p))),
        }
    }
    assert!(
        failures.is_empty(),
        "zoo failures:\n{}",
        failures.join("\n")
    );
}
