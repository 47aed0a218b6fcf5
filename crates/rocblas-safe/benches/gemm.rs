//! GEMM through [`Handle::gemm`] against the same GEMM called directly through the library's
//! function table (rocBLAS on AMD, cuBLAS on NVIDIA), same handle, same buffers, same run.
//! On a GPU machine:
//! `cargo bench -p rocblas-safe --bench gemm -- --warm-up-time 1 --measurement-time 2`
//!
//! * `gemm/<dtype>_4096`: (4096 x 4096) x (4096 x 4096), f32, bf16, f16;
//! * `gemm/attn_<dtype>`: 32 x (2048 x 128) x (128 x 2048) (the scores of batched attention,
//!   `Q K^T`), bf16, f16.
//!
//! Criterion's throughput is in FLOP (`2 m n k batch`). Each case is timed by wall clock over
//! `iters` back-to-back GEMMs followed by one stream synchronization (so the wrapper's host cost
//! counts), and a summary at the end prints TFLOP/s for both and the ratio
//! `time(Handle::gemm) / time(direct)` (1.00 = no overhead), from the median sample of each.

#![allow(missing_docs)] // criterion generates undocumented items

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use half::{bf16, f16};
use hip_core::{Device, DeviceBuffer, Stream};
use rocblas_safe::__raw::RawLibrary;
use rocblas_safe::{GemmConfig, GemmDtype, GemmElement, Handle, Operation};

/// Seconds per GEMM of every sample, by `case/variant`.
static SAMPLES: Mutex<BTreeMap<String, Vec<f64>>> = Mutex::new(BTreeMap::new());

fn record(key: &str, total: Duration, iters: u64) {
    SAMPLES
        .lock()
        .unwrap()
        .entry(key.to_string())
        .or_default()
        .push(total.as_secs_f64() / iters as f64);
}

/// Inputs with a fixed pattern in [-1, 1] (not zeros: zeros can run faster).
fn input<T: GemmElement>(stream: &Stream, len: usize, from: fn(f32) -> T) -> DeviceBuffer<T> {
    let host: Vec<T> = (0..len)
        .map(|i| from(((i.wrapping_mul(2_654_435_761) % 2001) as f32 - 1000.0) / 1000.0))
        .collect();
    stream.alloc_from_host(&host).unwrap()
}

/// The same GEMM as `Handle::gemm` issues with the reduced-precision flags off, straight
/// through the function table (no validation, no conversion).
fn direct(handle: &Handle, cfg: &GemmConfig, dtype: GemmDtype, a: u64, b: u64, c: u64) {
    let (alpha, beta) = (1.0f32, 0.0f32);
    let (m, n, k) = (cfg.m as i32, cfg.n as i32, cfg.k as i32);
    let (lda, ldb, ldc) = (cfg.lda as i32, cfg.ldb as i32, cfg.ldc as i32);
    let (sa, sb, sc) = (
        cfg.stride_a as i64,
        cfg.stride_b as i64,
        cfg.stride_c as i64,
    );
    let batch = cfg.batch as i32;
    let status = handle
        .with_raw(|lib, h| match lib {
            RawLibrary::CuBlas(api) => {
                use cudarc::cublas::sys::{
                    cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t as Op, cudaDataType_t,
                };
                let op = |t: Operation| {
                    if t == Operation::None {
                        Op::CUBLAS_OP_N
                    } else {
                        Op::CUBLAS_OP_T
                    }
                };
                let (ta, tb) = (op(cfg.transa), op(cfg.transb));
                match dtype {
                    GemmDtype::F32 => {
                        let f = api.cublasSgemm_v2.expect("cublasSgemm_v2");
                        // SAFETY: `h` is the locked, live handle; a, b, c are device buffers of
                        // the packed sizes `cfg` describes; alpha/beta are host f32 values.
                        unsafe {
                            f(
                                h.cast(),
                                ta,
                                tb,
                                m,
                                n,
                                k,
                                &alpha,
                                a as *const f32,
                                lda,
                                b as *const f32,
                                ldb,
                                &beta,
                                c as *mut f32,
                                ldc,
                            )
                        }
                    }
                    _ => {
                        let t = if dtype == GemmDtype::F16 {
                            cudaDataType_t::CUDA_R_16F
                        } else {
                            cudaDataType_t::CUDA_R_16BF
                        };
                        let f = api
                            .cublasGemmStridedBatchedEx
                            .expect("cublasGemmStridedBatchedEx");
                        // SAFETY: as above, 16-bit elements, f32 compute (alpha/beta f32).
                        unsafe {
                            f(
                                h.cast(),
                                ta,
                                tb,
                                m,
                                n,
                                k,
                                (&alpha as *const f32).cast(),
                                a as *const _,
                                t,
                                lda,
                                sa,
                                b as *const _,
                                t,
                                ldb,
                                sb,
                                (&beta as *const f32).cast(),
                                c as *mut _,
                                t,
                                ldc,
                                sc,
                                batch,
                                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                                cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
                            )
                        }
                    }
                }
            }
            RawLibrary::RocBlas(t) => {
                use rocblas_safe::sys::rocblas as sys;
                let op = |o: Operation| {
                    if o == Operation::None {
                        sys::rocblas_operation_none
                    } else {
                        sys::rocblas_operation_transpose
                    }
                };
                let (ta, tb) = (op(cfg.transa), op(cfg.transb));
                match dtype {
                    GemmDtype::F32 => {
                        let f = t.rocblas_sgemm.as_ref().expect("rocblas_sgemm");
                        // SAFETY: as for cuBLAS above.
                        unsafe {
                            f(
                                h.cast(),
                                ta,
                                tb,
                                m,
                                n,
                                k,
                                &alpha,
                                a as *const f32,
                                lda,
                                b as *const f32,
                                ldb,
                                &beta,
                                c as *mut f32,
                                ldc,
                            ) as i32
                        }
                    }
                    _ => {
                        let dt = if dtype == GemmDtype::F16 {
                            sys::rocblas_datatype_f16_r
                        } else {
                            sys::rocblas_datatype_bf16_r
                        };
                        let f = t
                            .rocblas_gemm_strided_batched_ex
                            .as_ref()
                            .expect("rocblas_gemm_strided_batched_ex");
                        // SAFETY: as above; D = C.
                        unsafe {
                            f(
                                h.cast(),
                                ta,
                                tb,
                                m,
                                n,
                                k,
                                (&alpha as *const f32).cast(),
                                a as *const _,
                                dt,
                                lda,
                                sa,
                                b as *const _,
                                dt,
                                ldb,
                                sb,
                                (&beta as *const f32).cast(),
                                c as *const _,
                                dt,
                                ldc,
                                sc,
                                c as *mut _,
                                dt,
                                ldc,
                                sc,
                                batch,
                                sys::rocblas_datatype_f32_r,
                                sys::rocblas_gemm_algo_standard,
                                0,
                                sys::rocblas_gemm_flags_none,
                            ) as i32
                        }
                    }
                }
            }
        })
        .unwrap();
    assert_eq!(
        status, 0,
        "the direct GEMM call failed with status {status}"
    );
}

fn case<T: GemmElement>(
    c: &mut Criterion,
    stream: &Stream,
    handle: &Handle,
    name: &str,
    cfg: GemmConfig,
    from: fn(f32) -> T,
) {
    let a = input(
        stream,
        (cfg.batch - 1) * cfg.stride_a
            + cfg.lda
                * if cfg.transa == Operation::None {
                    cfg.k
                } else {
                    cfg.m
                },
        from,
    );
    let b = input(
        stream,
        (cfg.batch - 1) * cfg.stride_b
            + cfg.ldb
                * if cfg.transb == Operation::None {
                    cfg.n
                } else {
                    cfg.k
                },
        from,
    );
    let mut out = stream.alloc_zeroed::<T>(cfg.batch * cfg.stride_c).unwrap();
    cfg.validate(a.len(), b.len(), out.len()).unwrap();
    let (pa, pb, pc) = (a.device_ptr().0, b.device_ptr().0, out.device_ptr().0);

    let mut g = c.benchmark_group("gemm");
    g.sample_size(10);
    g.throughput(Throughput::Elements(cfg.flops() as u64));
    let key_h = format!("{name}/handle");
    g.bench_function(&key_h, |bch| {
        bch.iter_custom(|iters| {
            stream.synchronize().unwrap();
            let t = Instant::now();
            for _ in 0..iters {
                handle
                    .gemm(
                        &cfg,
                        1.0,
                        &a.as_slice(),
                        &b.as_slice(),
                        0.0,
                        &mut out.as_mut_slice(),
                    )
                    .unwrap();
            }
            stream.synchronize().unwrap();
            let d = t.elapsed();
            record(&key_h, d, iters);
            d
        })
    });
    let key_d = format!("{name}/direct");
    g.bench_function(&key_d, |bch| {
        bch.iter_custom(|iters| {
            stream.synchronize().unwrap();
            let t = Instant::now();
            for _ in 0..iters {
                direct(handle, &cfg, T::DTYPE, pa, pb, pc);
            }
            stream.synchronize().unwrap();
            let d = t.elapsed();
            record(&key_d, d, iters);
            d
        })
    });
    g.finish();
    SAMPLES
        .lock()
        .unwrap()
        .insert(format!("{name}/flops"), vec![cfg.flops()]);
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn summary() {
    let samples = SAMPLES.lock().unwrap();
    let names: Vec<&str> = samples
        .keys()
        .filter_map(|k| k.strip_suffix("/flops"))
        .collect();
    if names.is_empty() {
        return;
    }
    println!("\nGEMM summary (median sample; ratio = time(Handle::gemm) / time(direct call))");
    for name in names {
        let (Some(h), Some(d), Some(f)) = (
            samples.get(&format!("{name}/handle")),
            samples.get(&format!("{name}/direct")),
            samples.get(&format!("{name}/flops")),
        ) else {
            continue;
        };
        let (th, td, flops) = (median(h), median(d), f[0]);
        println!(
            "  {name:<10} Handle::gemm {:8.3} ms {:7.1} TFLOP/s | direct {:8.3} ms {:7.1} TFLOP/s | ratio {:.3}",
            th * 1e3,
            flops / th / 1e12,
            td * 1e3,
            flops / td / 1e12,
            th / td
        );
    }
}

fn benches(c: &mut Criterion) {
    let device = match Device::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rocblas-safe benches need a GPU: {e}");
            return;
        }
    };
    let stream = device.create_stream().unwrap();
    let handle = match Handle::new(&stream) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("rocblas-safe benches need the BLAS library: {e}");
            return;
        }
    };
    println!(
        "{} ({}), {}",
        device.properties().name,
        handle.platform(),
        rocblas_safe::library_version().unwrap_or_else(|e| e.to_string())
    );
    let (n, t) = (Operation::None, Operation::Transpose);
    let square = GemmConfig::packed(n, n, 4096, 4096, 4096);
    case::<f32>(c, &stream, &handle, "f32_4096", square, |x| x);
    case::<bf16>(c, &stream, &handle, "bf16_4096", square, bf16::from_f32);
    case::<f16>(c, &stream, &handle, "f16_4096", square, f16::from_f32);
    // Q K^T for 32 heads of 2048 tokens x 128: row-major (2048 x 128) x (128 x 2048), which is
    // column-major C^T = K Q^T, i.e. op(A) = K (stored 128 x 2048, transposed), op(B) = Q^T.
    let attn = GemmConfig::packed_batched(t, n, 2048, 2048, 128, 32);
    case::<bf16>(c, &stream, &handle, "attn_bf16", attn, bf16::from_f32);
    case::<f16>(c, &stream, &handle, "attn_f16", attn, f16::from_f32);
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
    summary();
}
