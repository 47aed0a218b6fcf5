//! Tunes the one-launch integer matrix-vector kernel (`qmatvec_s8_*`, see
//! `kernels/quantized.hip`) on the GPU at hand: the module's f32 variant is compiled at run time
//! once per configuration of its compile-time parameters (`QS_*`, `-D` style defines) and
//! launched with several grid sizes; each result is checked against the committed two-launch
//! kernel (`quantize_activations` + `matvec_int_rounded`) and timed beside a device copy of the
//! same bytes in the same run (throughput = the quantized weight bytes read, per launch).
//!
//! ```sh
//! cargo run --release -p rocm-kernels --no-default-features --example tune_qmatvec -- [ROWS N K [TYPE]]
//! ```
//! Prints one line per (type, configuration, blocks per multiprocessor); the committed defaults
//! are the configuration named `default`; `TUNE_CONFIGS=default,depth2` limits the run to those
//! configurations. `TYPE` (`q4k`, `q6k`, ...) limits the run to one type.
//! Consecutive launches read different copies of the weights (at least 256 MiB in all), so
//! that every launch streams its weights from memory, as a model's layers do, rather than
//! from the L2 cache that a 10 MB weight would otherwise stay in.

use std::error::Error;

use hip_core::{Device, LaunchConfig};
use rocm_kernels::quantized::{self as qk, QuantType};

mod tune_common;
use tune_common::{define_lines, define_of, time_ms, Lcg};

/// Launches per timing.
const REPS: usize = 200;

/// Byte offsets of a block's f16 scale fields (set to small finite values; the other bytes are
/// any quants).
fn f16_fields(q: QuantType) -> &'static [usize] {
    match q {
        QuantType::Q4_0 | QuantType::Q5_0 | QuantType::Q8_0 => &[0],
        QuantType::Q4_1 | QuantType::Q5_1 | QuantType::Q8_1 => &[0, 2],
        QuantType::Q4K | QuantType::Q5K => &[0, 2],
        QuantType::Q2K => &[80, 82],
        QuantType::Q3K => &[108],
        QuantType::Q6K => &[208],
        QuantType::Q8K => &[],
    }
}

fn random_blocks(q: QuantType, n: usize, k: usize, seed: u64) -> Vec<u8> {
    let mut rng = Lcg(seed);
    let blocks = n * k / q.block_elems();
    let mut out: Vec<u8> = (0..blocks * q.block_bytes())
        .map(|_| rng.next() as u8)
        .collect();
    for b in 0..blocks {
        for &f in f16_fields(q) {
            // 2^-8 .. 2^-7: finite, and the products stay far from overflow.
            let bits = 0x1C00u16 | (rng.next() as u16 & 0x3FF);
            let at = b * q.block_bytes() + f;
            out[at..at + 2].copy_from_slice(&bits.to_le_bytes());
        }
    }
    out
}

/// Compile-time parameter sets: (name, `NAME=VALUE` defines separated by spaces); the
/// environment variable `TUNE_CONFIGS` (names separated by commas) keeps only those named.
fn configs() -> Vec<(&'static str, &'static str)> {
    let all = vec![
        ("default", ""),
        ("depth2", "QS_DEPTH=2"),
        ("depth3", "QS_DEPTH=3"),
        ("round_batch16", "QS_ROUND_BATCH=16"),
        ("parts2", "QS_P_32=2 QS_P_Q5K=8 QS_P_Q6K=8"),
        ("q6k_parts16", "QS_P_Q6K=16"),
        ("stage_half", "QS_SB_32=64 QS_SB_8=32 QS_SB_K=8"),
        ("half_depth2", "QS_SB_32=64 QS_SB_8=32 QS_SB_K=8 QS_DEPTH=2"),
        ("stage_double", "QS_SB_32=256 QS_SB_8=128 QS_SB_K=32"),
        // k-quant stages dividing a 14336-column row (56 blocks) evenly: 4 x 14.
        ("stage_k14", "QS_SB_K=14"),
        ("min_blocks3", "QS_MIN_BLOCKS=3"),
        ("teams4", "QS_TEAMS=4"),
        ("k_parts4", "QS_P_K=4"),
        // q2k / q3k as before 2026-11-29 (8 parts, stages of 32 / 24 blocks).
        ("q23k_8parts", "QS_P_Q23K=8 QS_SB_Q2K=32 QS_SB_Q3K=24"),
        ("unroll2", "QS_UNROLL=2"),
        ("hold0", "QS_HOLD=0"),
        ("hold_mb1", "QS_MIN_BLOCKS=1"),
        ("hold_guarded", "QS_HOLD_FULL=0"),
    ];
    match std::env::var("TUNE_CONFIGS") {
        Ok(names) => {
            let keep: Vec<&str> = names.split(',').map(str::trim).collect();
            all.into_iter()
                .filter(|(name, _)| keep.contains(name))
                .collect()
        }
        Err(_) => all,
    }
}

/// `QS_TEAMS` of a configuration.
fn teams_of(defines: &str) -> usize {
    define_of(defines, "QS_TEAMS", 8)
}

/// Stage blocks of a configuration for `q` (mirrors the kernel's defaults).
fn stage_blocks(defines: &str, q: QuantType) -> usize {
    match q {
        QuantType::Q4_0 | QuantType::Q4_1 | QuantType::Q5_0 | QuantType::Q5_1 => {
            define_of(defines, "QS_SB_32", 128)
        }
        QuantType::Q8_0 | QuantType::Q8_1 => define_of(defines, "QS_SB_8", 64),
        QuantType::Q2K => define_of(defines, "QS_SB_Q2K", 16),
        QuantType::Q3K => define_of(defines, "QS_SB_Q3K", 16),
        _ => define_of(defines, "QS_SB_K", 16),
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let only = if args.len() == 4 { args.pop() } else { None };
    let args: Vec<usize> = args.iter().map(|a| a.parse()).collect::<Result<_, _>>()?;
    let (m, n, k) = match args.as_slice() {
        [] => (1, 14336, 4096),
        [m, n, k] => (*m, *n, *k),
        _ => return Err("usage: tune_qmatvec [ROWS N K [TYPE]]".into()),
    };
    let d = match Device::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tune_qmatvec needs a GPU: {e}");
            return Ok(());
        }
    };
    let s = d.default_stream();
    let sms = d.properties().multiprocessor_count as usize;
    println!(
        "{} ({}), {sms} multiprocessors; m = {m}, n = {n}, k = {k}",
        d.properties().name,
        d.arch()
    );
    let source = rocm_kernels::modules::variant_full_source("quantized", "f32")
        .ok_or("no quantized module source")?;
    // The configurations compile in parallel (one thread each).
    let modules = std::thread::scope(|scope| {
        let handles = configs()
            .into_iter()
            .map(|(name, defines)| {
                let source = &source;
                scope.spawn(move || {
                    let t = std::time::Instant::now();
                    let module = d.compile(
                        &format!("tune_{name}"),
                        &format!("{}{source}", define_lines(defines)),
                        &rocm_kernels::modules::compile_options(),
                    );
                    println!("compiled {name} in {:.1}s", t.elapsed().as_secs_f64());
                    (name, defines, module)
                })
            })
            .collect::<Vec<_>>();
        handles
            .into_iter()
            .map(|h| h.join().expect("a compile thread panicked"))
            .collect::<Vec<_>>()
    });
    let mut rng = Lcg(7);
    let xh: Vec<f32> = (0..m * k)
        .map(|_| (rng.next() % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let x = s.alloc_from_host(&xh)?;
    let types = [
        QuantType::Q4_0,
        QuantType::Q4K,
        QuantType::Q6K,
        QuantType::Q8_0,
        QuantType::Q5K,
        QuantType::Q4_1,
        QuantType::Q5_0,
        QuantType::Q5_1,
        QuantType::Q3K,
        QuantType::Q2K,
    ];
    for q in types {
        if only.as_deref().is_some_and(|t| t != q.name()) {
            continue;
        }
        let host_w = random_blocks(q, n, k, 11);
        let copies = (256usize << 20).div_ceil(host_w.len()).clamp(1, 64);
        let ws = (0..copies)
            .map(|_| s.alloc_from_host(&host_w))
            .collect::<Result<Vec<_>, _>>()?;
        let w = &ws[0];
        let bytes = w.len();
        let gbs = |ms: f64| bytes as f64 / (ms * 1e-3) / 1e9;
        // References: a copy of the same bytes, the two-launch kernel.
        let mut dst = s.alloc::<u8>(bytes)?;
        let mut next = 0usize;
        let mut rotate = || {
            next += 1;
            &ws[next % copies]
        };
        let copy_ms = time_ms(d, &s, REPS, || {
            dst.as_mut_slice()
                .copy_from_device(&rotate().as_slice())
                .unwrap()
        })?;
        let copy_gbs = 2.0 * gbs(copy_ms);
        let (ql, dl) = qk::matvec_int_scratch(m, k);
        let mut xq = s.alloc::<u8>(ql)?;
        let mut xds = s.alloc::<f32>(dl)?;
        let mut y_ref = s.alloc::<f32>(m * n)?;
        qk::quantize_activations(
            &s,
            (m, k),
            &x.as_slice(),
            &mut xq.as_mut_slice(),
            &mut xds.as_mut_slice(),
        )?;
        let two_ms = time_ms(d, &s, REPS, || {
            qk::matvec_int_rounded(
                &s,
                q,
                &rotate().as_slice(),
                (m, n, k),
                &xq.as_slice(),
                &xds.as_slice(),
                &mut y_ref.as_mut_slice(),
            )
            .unwrap()
        })?;
        let want = y_ref.to_host_vec()?;
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        // A launch's time, bytes read per second and fraction of the copy's rate.
        let rate = |ms: f64| {
            format!(
                "{:7.2} us {:7.1} GB/s {:5.1}%",
                ms * 1e3,
                gbs(ms),
                100.0 * gbs(ms) / copy_gbs
            )
        };
        println!(
            "{:5} copy {:7.1} GB/s | product alone (activations rounded before) {}",
            q.name(),
            copy_gbs,
            rate(two_ms)
        );
        let mut y = s.alloc::<f32>(m * n)?;
        let committed_ms = time_ms(d, &s, REPS, || {
            qk::matvec_int_staged(
                &s,
                q,
                qk::StagedWeights::written_earlier(&rotate().as_slice()),
                (m, n, k),
                &x.as_slice(),
                &mut y.as_mut_slice(),
            )
            .unwrap()
        })?;
        println!(
            "{:5} committed one-launch wrapper {}",
            q.name(),
            rate(committed_ms)
        );
        let staged = y.to_host_vec()?;
        if m == 1 {
            // The committed kernel reading activations rounded before (by a producer such as
            // the decode step's swiglu) instead of rounding them in every block.
            let rounded_ms = time_ms(d, &s, REPS, || {
                qk::matvec_int_staged_rounded(
                    &s,
                    q,
                    qk::StagedWeights::written_earlier(&rotate().as_slice()),
                    (m, n, k),
                    &xq.as_slice(),
                    &xds.as_slice(),
                    &mut y.as_mut_slice(),
                )
                .unwrap()
            })?;
            let same = y.to_host_vec()? == staged;
            println!(
                "{:5} committed, activations rounded before {} (the same bits as rounding in every block: {same})",
                q.name(),
                rate(rounded_ms)
            );
        }
        for (name, defines, module) in &modules {
            let module = match module {
                Ok(module) => module,
                Err(e) => {
                    println!("{:5} {name}: compile failed: {e}", q.name());
                    continue;
                }
            };
            let rows = if m == 1 { "m1_" } else { "" };
            let f = module.function(&format!("qmatvec_s8_{rows}{}_f32", q.name()))?;
            let teams = teams_of(defines);
            let a = f.attributes();
            println!(
                "{:5} {name}: {} registers, {} local bytes per thread",
                q.name(),
                a.num_regs,
                a.local_size_bytes
            );
            let sb = stage_blocks(defines, q);
            // The activations' padding depends on the type alone, not on the configuration.
            let act = qk::matvec_int_staged_activation_bytes(q, m, k);
            let shared = act + teams * (sb * q.block_bytes() + 14).div_ceil(16) * 16;
            if shared > d.properties().shared_memory_per_block {
                println!("{:5} {name}: {shared} shared bytes do not fit", q.name());
                continue;
            }
            for per_sm in [2usize, 3, 4, 8] {
                let blocks = n.div_ceil(teams).min(per_sm * sms);
                let cfg = LaunchConfig {
                    grid: [blocks as u32, 1, 1],
                    block: [teams as u32 * 32, 1, 1],
                    shared_mem_bytes: shared as u32,
                };
                y.as_mut_slice().memset_async(0xFF)?;
                let mut launch = || {
                    let w = rotate();
                    let b = f
                        .builder(&s, cfg)
                        .arg(m as u32)
                        .arg(n as u32)
                        .arg(k as u32)
                        .arg(w.as_slice())
                        .arg(x.as_slice());
                    let mut out = y.as_mut_slice();
                    let b = b.arg(&mut out);
                    // The one-row kernel's `add` (no residual).
                    let b = if m == 1 { b.arg(hip_core::NullPtr) } else { b };
                    // SAFETY: the kernel's contract (kernels/quantized.hip): w holds n rows of
                    // k / QK blocks, x m k f32s (16-byte aligned allocations), y m n f32s, a
                    // null `add` for the one-row kernel, `shared` bytes of dynamic shared
                    // memory as the kernel computes them.
                    unsafe { b.launch().unwrap() };
                };
                let ms = time_ms(d, &s, REPS, &mut launch)?;
                let got = y.to_host_vec()?;
                let err = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(
                        0f32,
                        |a, e| if e.is_nan() { f32::INFINITY } else { a.max(e) },
                    );
                println!(
                    "{:5} {name:13} {per_sm} blocks/SM: {:7.2} us {:7.1} GB/s {:5.1}% of copy (max error {:.1e} of |y| {:.2})",
                    q.name(),
                    ms * 1e3,
                    gbs(ms),
                    100.0 * gbs(ms) / copy_gbs,
                    err,
                    scale
                );
            }
        }
    }
    Ok(())
}
