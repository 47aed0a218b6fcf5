//! Tunes the matrix-instruction prefill (`attn_prefill_mma_bf16_d128`, `kernels/attention.hip`)
//! on the GPU at hand: the kernel is compiled at run time once per configuration of its
//! compile-time parameters (`AT_NV_*` on NVIDIA, `-D` style defines), launched on one causal or
//! full bf16 problem (batch 1, 32 heads x 128), checked against the portable kernel's output and
//! timed (TFLOP/s counts the multiply-adds of the visible half under a causal mask, as
//! flash-attention's benchmarks do). On NVIDIA it also runs the tile-abstraction kernel (AMD's
//! matrix prefill, `AttnKernel::Tiles`) through the library (CDNA's shape) and compiled in
//! RDNA's shape (`tiles_rdna_shape`), so that the loop structure RDNA compiles is checked on the
//! GPU at hand.
//!
//! ```sh
//! cargo run --release -p rocm-kernels --no-default-features --example tune_attention -- [SEQ [full]]
//! cargo run --release -p rocm-kernels --no-default-features --example tune_attention -- decode
//! cargo run --release -p rocm-kernels --no-default-features --example tune_attention -- decode-sweep
//! ```
//! `decode` instead times the split decode (one query row, 32 q / 8 kv heads x 128, bf16, KV
//! caches of 4k, 16k and 64k keys) per call and per kernel (events around each launch), beside a
//! device copy of the same bytes; `decode-sweep` compiles NVIDIA's matrix decode with other
//! `AT_DN_*` parameters and times each with several split counts (then the merge).

use std::error::Error;

use half::bf16;
use hip_core::{Device, LaunchConfig, NullPtr, Stream};
use rocm_kernels::attention::{
    self as at, AttnInput, AttnKernel, AttnOptions, AttnOutput, AttnShape,
};

mod tune_common;
use tune_common::{define_lines, define_of, time_ms, Lcg};

/// Launches per timing.
const REPS: usize = 20;
const HEADS: usize = 32;
const HEAD_DIM: usize = 128;
/// Query and key/value heads of the decode problems.
const DECODE_HEADS_Q: usize = 32;
const DECODE_HEADS_KV: usize = 8;

/// Compile-time parameter sets: (name, `NAME=VALUE` defines separated by spaces).
fn configs() -> Vec<(&'static str, &'static str)> {
    vec![
        ("default", ""),
        ("rt1", "AT_NV_RT=1 AT_NV_MIN_BLOCKS=2"),
        ("bn32", "AT_NV_BN=32"),
        ("w8bn32", "AT_NV_WAVES=8 AT_NV_BN=32"),
    ]
}

/// Largest absolute difference (NaN counts as infinite).
fn max_diff(a: &[bf16], b: &[bf16]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x.to_f32() - y.to_f32()).abs())
        .fold(
            0f32,
            |m, e| if e.is_nan() { f32::INFINITY } else { m.max(e) },
        )
}

/// The decode problem both decode modes time: one query row, 32 q / 8 kv heads x HEAD_DIM,
/// bf16, `sk` keys, seeded inputs.
struct DecodeProblem {
    shape: AttnShape,
    q: hip_core::DeviceBuffer<bf16>,
    k: hip_core::DeviceBuffer<bf16>,
    v: hip_core::DeviceBuffer<bf16>,
    o: hip_core::DeviceBuffer<bf16>,
    q_strides: [usize; 3],
    kv_strides: [usize; 3],
}

impl DecodeProblem {
    fn new(s: &Stream, sk: usize) -> Result<Self, Box<dyn Error>> {
        let (hq, hkv) = (DECODE_HEADS_Q, DECODE_HEADS_KV);
        let mut rng = Lcg(11);
        let mut host =
            |n: usize| -> Vec<bf16> { (0..n).map(|_| bf16::from_f32(rng.uniform())).collect() };
        Ok(DecodeProblem {
            shape: AttnShape {
                batch: 1,
                seq_q: 1,
                seq_k: sk,
                heads_q: hq,
                heads_kv: hkv,
                head_dim: HEAD_DIM,
            },
            q: s.alloc_from_host(&host(hq * HEAD_DIM))?,
            k: s.alloc_from_host(&host(sk * hkv * HEAD_DIM))?,
            v: s.alloc_from_host(&host(sk * hkv * HEAD_DIM))?,
            o: s.alloc::<bf16>(hq * HEAD_DIM)?,
            q_strides: [hq * HEAD_DIM, hq * HEAD_DIM, HEAD_DIM],
            kv_strides: [sk * hkv * HEAD_DIM, hkv * HEAD_DIM, HEAD_DIM],
        })
    }

    /// One fused-attention call into `o`.
    fn run(&mut self, s: &Stream, opts: &AttnOptions) -> Result<(), Box<dyn Error>> {
        at::attention(
            s,
            &self.shape,
            opts,
            AttnInput {
                data: self.q.as_slice(),
                strides: self.q_strides,
            },
            AttnInput {
                data: self.k.as_slice(),
                strides: self.kv_strides,
            },
            AttnInput {
                data: self.v.as_slice(),
                strides: self.kv_strides,
            },
            None,
            AttnOutput {
                data: &mut self.o.as_mut_slice(),
                strides: self.q_strides,
            },
        )?;
        Ok(())
    }
}

/// The decode's time per call (back to back) and per kernel (hip-core's timed launch profile).
fn decode(d: Device, s: &Stream) -> Result<(), Box<dyn Error>> {
    const REPEAT: usize = 50;
    let hkv = DECODE_HEADS_KV;
    for sk in [4096usize, 16384, 65536] {
        let mut problem = DecodeProblem::new(s, sk)?;
        let opts = AttnOptions::new(0.088, true);
        let mut call = || problem.run(s, &opts).unwrap();
        let per_call = time_ms(d, s, REPS, &mut call)? * 1e3;
        // The host's time to queue the calls (the GPU is busy behind it: if this is the time
        // per call, the host is the bound).
        s.synchronize()?;
        let t = std::time::Instant::now();
        for _ in 0..REPS {
            call();
        }
        let host = t.elapsed().as_secs_f64() * 1e6 / REPS as f64;
        s.synchronize()?;
        // A copy moving the bytes the decode reads (half read, half written).
        let bytes = 2 * sk * hkv * HEAD_DIM * 2;
        let src = s.alloc::<u8>(bytes / 2)?;
        let mut dst = s.alloc::<u8>(bytes / 2)?;
        let copy = time_ms(d, s, REPS, || {
            dst.as_mut_slice()
                .copy_from_device(&src.as_slice())
                .unwrap()
        })? * 1e3;
        s.synchronize()?;
        hip_core::launch_profile_start(true);
        for _ in 0..REPEAT {
            call();
        }
        let profile = hip_core::launch_profile_stop();
        let kernels: Vec<String> = profile
            .iter()
            .map(|k| {
                format!(
                    "{} {:.2} us",
                    k.name,
                    k.gpu_ms.unwrap_or(f64::NAN) * 1e3 / REPEAT as f64
                )
            })
            .collect();
        println!(
            "decode {sk:6} keys: {per_call:7.2} us per call back to back ({:6.1} GB/s of KV; \
             host queues a call in {host:5.2} us); copy of the same bytes {copy:6.2} us; per \
             kernel (events): {}",
            bytes as f64 / per_call / 1e3,
            kernels.join(", ")
        );
    }
    Ok(())
}

/// NVIDIA's matrix decode (`attn_decode_nv_bf16_d128`) compiled with other `AT_DN_*`
/// parameters and launched with other split counts (then the committed merge), each output
/// checked against the portable decode's and timed per call.
fn decode_sweep(d: Device, s: &Stream) -> Result<(), Box<dyn Error>> {
    let (hq, hkv) = (DECODE_HEADS_Q, DECODE_HEADS_KV);
    let configs = [
        ("committed", ""),
        ("no_hints", "AT_DN_CP_HINT=0"),
        ("evict1st", "AT_DN_CP_HINT=1"),
        ("l2_256b", "AT_DN_CP_HINT=2"),
        ("w4k16s3", "AT_DN_STAGES=3"),
        ("w2k16s4", "AT_DN_WAVES=2 AT_DN_STAGES=4"),
        ("w8k16s2", "AT_DN_WAVES=8"),
        ("w4k16s4", "AT_DN_STAGES=4"),
        ("w8k16s3", "AT_DN_WAVES=8 AT_DN_STAGES=3"),
    ];
    let source = rocm_kernels::modules::variant_full_source("attention", "bf16")
        .ok_or("no attention module source")?;
    let source: String = source
        .split_inclusive('\n')
        .map(|l| {
            let inst = l.starts_with("AT_PREFILL")
                || l.starts_with("AT_DECODE(")
                || l.starts_with("AT_DECODE_NV(");
            let keep = l.starts_with("AT_DECODE_NV(bf16, bf16, 128)")
                || l.starts_with("AT_DECODE(bf16, bf16, 128)");
            if inst && !keep {
                "\n"
            } else {
                l
            }
        })
        .collect();
    let mut modules = Vec::new();
    for (name, defines) in configs {
        if let Some(m) = compile_config(d, &format!("tune_dec_{name}"), defines, &source) {
            modules.push((name, defines, m));
        }
    }
    for sk in [4096usize, 16384, 65536] {
        let opts = AttnOptions::new(0.088, true);
        let DecodeProblem {
            shape,
            q,
            k,
            v,
            mut o,
            q_strides,
            kv_strides,
        } = {
            let mut problem = DecodeProblem::new(s, sk)?;
            problem.run(
                s,
                &AttnOptions {
                    kernel: AttnKernel::Portable,
                    ..opts
                },
            )?;
            problem
        };
        let want = o.to_host_vec()?;
        let p = at::decode_kernel_params(
            &shape,
            &opts,
            [q_strides, kv_strides, kv_strides, q_strides],
        )?;
        let bytes = 2 * sk * hkv * HEAD_DIM * 2;
        for (name, defines, module) in &modules {
            let f = module.function("attn_decode_nv_bf16_d128")?;
            let merge = module.function("attn_merge_bf16_d128")?;
            let waves = define_of(defines, "AT_DN_WAVES", 4);
            let keys = define_of(defines, "AT_DN_KEYS", 16);
            let stages = define_of(defines, "AT_DN_STAGES", 2);
            // AT_DN_SHARED in attention.hip.
            let shared = (waves * stages * 2 * keys * (HEAD_DIM + 8) * 2) as u32;
            if let Err(e) = f.allow_dynamic_shared(shared) {
                println!("{name}: {shared} bytes of shared memory refused: {e}");
                continue;
            }
            let mut line = format!(
                "decode {sk:6} keys {name} ({} regs):",
                f.attributes().num_regs
            );
            for splits in [16usize, 24, 32, 33, 48, 49, 64, 96, 128] {
                if splits * 32 > sk {
                    continue;
                }
                let mut part = s.alloc::<f32>(splits * hq * (HEAD_DIM + 2))?;
                o.as_mut_slice().memset_async(0xFF)?;
                let mut launch = || {
                    let cfg = LaunchConfig {
                        grid: [splits as u32, hkv as u32, 1],
                        block: [32 * waves as u32, 1, 1],
                        shared_mem_bytes: shared,
                    };
                    let mut out = o.as_mut_slice();
                    let b = f
                        .builder(s, cfg)
                        .arg(p)
                        .arg(q.as_slice())
                        .arg(k.as_slice())
                        .arg(v.as_slice())
                        .arg(NullPtr)
                        .arg(&mut out)
                        .arg(&mut part);
                    // SAFETY: the kernel's contract (kernels/attention.hip): q, k, v and o at
                    // the strides in `p`, no mask, `part` holding splits x rows x (128 + 2)
                    // floats.
                    unsafe { b.launch().unwrap() };
                    let cfg = LaunchConfig {
                        grid: [hq as u32, 1, 1],
                        block: [256, 1, 1],
                        shared_mem_bytes: 0,
                    };
                    let b = merge
                        .builder(s, cfg)
                        .arg(p)
                        .arg(splits as i64)
                        .arg(&part)
                        .arg(&mut out);
                    // SAFETY: the merge's contract: one block per output row, `part` as above.
                    unsafe { b.launch().unwrap() };
                };
                let us = time_ms(d, s, REPS, &mut launch)? * 1e3;
                let err = max_diff(&o.to_host_vec()?, &want);
                line += &format!(
                    " {splits}: {us:.2} us ({:.0} GB/s{})",
                    bytes as f64 / us / 1e3,
                    if err > 2e-2 { ", WRONG" } else { "" }
                );
            }
            println!("{line}");
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seq: usize = match args.first().map(String::as_str) {
        None | Some("decode" | "decode-sweep") => 4096,
        Some(a) => a.parse()?,
    };
    let causal = args.get(1).map(|a| a != "full").unwrap_or(true);
    let d = match Device::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tune_attention needs a GPU: {e}");
            return Ok(());
        }
    };
    let s = d.default_stream();
    if args.first().is_some_and(|a| a == "decode") {
        return decode(d, &s);
    }
    if args.first().is_some_and(|a| a == "decode-sweep") {
        return decode_sweep(d, &s);
    }
    println!(
        "{} ({}); b1 x {seq} x {HEADS} heads x {HEAD_DIM}, bf16, {}",
        d.properties().name,
        d.arch(),
        if causal { "causal" } else { "full" }
    );
    let n = seq * HEADS * HEAD_DIM;
    let mut rng = Lcg(7);
    let mut host = |scale: f32| -> Vec<bf16> {
        (0..n)
            .map(|_| bf16::from_f32(rng.uniform() * scale))
            .collect()
    };
    let (hq, hk, hv) = (host(1.0), host(1.0), host(1.0));
    let (q, k, v) = (
        s.alloc_from_host(&hq)?,
        s.alloc_from_host(&hk)?,
        s.alloc_from_host(&hv)?,
    );
    let mut o = s.alloc::<bf16>(n)?;
    let strides = [n, HEADS * HEAD_DIM, HEAD_DIM];
    let shape = AttnShape {
        batch: 1,
        seq_q: seq,
        seq_k: seq,
        heads_q: HEADS,
        heads_kv: HEADS,
        head_dim: HEAD_DIM,
    };
    let scale = 1.0 / (HEAD_DIM as f32).sqrt();
    let flops = 4.0 * (seq * seq * HEADS * HEAD_DIM) as f64 * if causal { 0.5 } else { 1.0 };
    let run = |kernel: AttnKernel, o: &mut hip_core::DeviceBuffer<bf16>| {
        let opts = AttnOptions {
            kernel,
            ..AttnOptions::new(scale, causal)
        };
        at::attention(
            &s,
            &shape,
            &opts,
            AttnInput {
                data: q.as_slice(),
                strides,
            },
            AttnInput {
                data: k.as_slice(),
                strides,
            },
            AttnInput {
                data: v.as_slice(),
                strides,
            },
            None,
            AttnOutput {
                data: &mut o.as_mut_slice(),
                strides,
            },
        )
        .unwrap();
    };
    let mut reference = s.alloc::<bf16>(n)?;
    run(AttnKernel::Portable, &mut reference);
    let want = reference.to_host_vec()?;
    for (name, kernel) in [
        ("portable", AttnKernel::Portable),
        ("committed", AttnKernel::Matrix),
        ("tiles", AttnKernel::Tiles),
    ] {
        let ms = time_ms(d, &s, REPS, || run(kernel, &mut o))?;
        let err = max_diff(&o.to_host_vec()?, &want);
        println!(
            "{name:9} {:8.3} ms {:6.1} TFLOP/s (max difference to portable {err:.2e})",
            ms,
            flops / ms / 1e9
        );
    }

    let source = rocm_kernels::modules::variant_full_source("attention", "bf16")
        .ok_or("no attention module source")?;
    // Only the tuned kernel's instantiation line stays (faster compiles).
    let source: String = source
        .split_inclusive('\n')
        .map(|l| {
            let inst = l.starts_with("AT_PREFILL(")
                || l.starts_with("AT_DECODE(")
                || l.starts_with("AT_PREFILL_MMA(")
                || l.starts_with("AT_PREFILL_TILES(");
            if inst
                && !l.starts_with("AT_PREFILL_MMA(bf16, bf16, 128,")
                && !l.starts_with("AT_PREFILL_TILES(bf16, bf16, 128,")
            {
                "\n"
            } else {
                l
            }
        })
        .collect();
    let operand = [n, HEADS * HEAD_DIM, HEAD_DIM];
    let p = at::prefill_kernel_params(&shape, &AttnOptions::new(scale, causal), [operand; 4])?;
    let mut jobs: Vec<PrefillJob> = configs()
        .into_iter()
        .map(|(name, defines)| PrefillJob::nvidia(name, defines))
        .collect();
    if d.platform() == hip_core::Platform::Nvidia {
        // The tile-abstraction kernel (AMD's matrix prefill, `attn_prefill_tiles_*` on NVIDIA) in
        // RDNA's shape: Q in shared memory, read one head-dim step at a time, 32 keys a tile (its
        // CDNA shape is the `tiles` line above). The instructions are mma.sync's, so this checks
        // RDNA's loop structure, not its WMMA.
        jobs.push(PrefillJob {
            name: "tiles_rdna_shape",
            defines: "AT_MMA_Q_SHARED=1 AT_MMA_BN=32",
            kernel: "attn_prefill_tiles_bf16_d128",
            rows: 64, // AT_MMA_BM: 4 waves of 16 rows
            threads: 128,
            shared: 0,
        });
    }
    for job in &jobs {
        let name = job.name;
        let t = std::time::Instant::now();
        let Some(module) = compile_config(d, &format!("tune_attn_{name}"), job.defines, &source)
        else {
            continue;
        };
        let f = module.function(job.kernel)?;
        let a = f.attributes();
        if job.shared > 0 {
            if let Err(e) = f.allow_dynamic_shared(job.shared) {
                println!("{name}: {} bytes of shared memory refused: {e}", job.shared);
                continue;
            }
        }
        let cfg = LaunchConfig {
            grid: [seq.div_ceil(job.rows) as u32, HEADS as u32, 1],
            block: [job.threads, 1, 1],
            shared_mem_bytes: job.shared,
        };
        o.as_mut_slice().memset_async(0xFF)?;
        let mut launch = || {
            let mut out = o.as_mut_slice();
            let b = f
                .builder(&s, cfg)
                .arg(p)
                .arg(q.as_slice())
                .arg(k.as_slice())
                .arg(v.as_slice())
                .arg(NullPtr)
                .arg(NullPtr)
                .arg(NullPtr)
                .arg(&mut out);
            // SAFETY: the kernel's contract (kernels/attention.hip), in the order
            // `prefill_kernel_params` documents: q, k, v and o hold 1 x seq x HEADS x HEAD_DIM
            // elements at the strides in `p`; no mask, no offsets (so the error record is never
            // touched); `cfg` is the job's block shape with the shared memory it was allowed.
            unsafe { b.arg(NullPtr).launch().unwrap() };
        };
        let ms = time_ms(d, &s, REPS, &mut launch)?;
        let err = max_diff(&o.to_host_vec()?, &want);
        println!(
            "{name:16} {:8.3} ms {:6.1} TFLOP/s (max difference to portable {err:.2e}; {} registers, {} local bytes, compiled in {:.1}s)",
            ms,
            flops / ms / 1e9,
            a.num_regs,
            a.local_size_bytes,
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// `source` compiled at run time as module `program` with `defines` (`NAME=VALUE` separated by
/// spaces) in front; `None`, after printing why, where it does not compile.
fn compile_config(
    d: Device,
    program: &str,
    defines: &str,
    source: &str,
) -> Option<hip_core::Module> {
    match d.compile(
        program,
        &format!("{}{source}", define_lines(defines)),
        &rocm_kernels::modules::compile_options(),
    ) {
        Ok(m) => Some(m),
        Err(e) => {
            println!("{program}: compile failed: {e}");
            None
        }
    }
}

/// One compiled prefill configuration to time: its defines, the kernel it launches and that
/// kernel's launch shape (query rows and threads a block, dynamic shared memory).
struct PrefillJob {
    name: &'static str,
    defines: &'static str,
    kernel: &'static str,
    rows: usize,
    threads: u32,
    shared: u32,
}

impl PrefillJob {
    /// NVIDIA's matrix prefill with the `AT_NV_*` parameters in `defines`.
    fn nvidia(name: &'static str, defines: &'static str) -> Self {
        let waves = define_of(defines, "AT_NV_WAVES", 4);
        let row_tiles = define_of(defines, "AT_NV_RT", 2);
        let keys = define_of(defines, "AT_NV_BN", 64);
        let rows = 16 * row_tiles * waves;
        PrefillJob {
            name,
            defines,
            kernel: "attn_prefill_mma_bf16_d128",
            rows,
            threads: 32 * waves as u32,
            // AT_NV_SHARED in attention.hip.
            shared: ((2 * keys + if row_tiles > 1 { rows } else { 0 }) * (HEAD_DIM + 8) * 2) as u32,
        }
    }
}
