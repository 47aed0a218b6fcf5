//! Quantized matmul ([`QRocmStorage::matmul_t`]) beside references measured in the same run:
//!
//! * `qmatvec_14336x4096_{type}`: one activation row (f32) times a 14336 x 4096 weight of
//!   Q4_0, Q4K, Q6K and Q8_0, throughput = the quantized weight bytes read, by the default
//!   8-bit-activation kernel (`candle_rocm_qmatvec`, activation rounding included) and the float
//!   kernel (`candle_rocm_qmatvec_float`); `candle_rocm_qmatvec_rotated`: the default kernel
//!   reading a different copy of the weights each launch (copies enough to exceed twice the
//!   H100's 50 MB L2, so that no launch finds its weights there); beside
//!   `reference_copy`, a device-to-device copy of a buffer of the same size (throughput = bytes
//!   read + bytes written, the usual copy-bandwidth convention);
//! * `qprefill_512x4096x14336_{type}`: 512 f16 activation rows times the same weights
//!   (dequantize to f16 + GEMM, whole time), throughput = 2 m n k FLOPs, with the device's
//!   default [`QuantizedGemmPlan`] (`candle_rocm_qmatmul`) and others (`plan_chunk_*`: chunk
//!   size, one stream or overlapped); beside `reference_f16_gemm`, the dense f16 GEMM of the
//!   same shape through candle-rocm's matmul;
//! * `qmoe_128x768x2048_{type}`: a decode step's expert product of a Qwen3-30B-A3B-shaped MoE
//!   layer (128 experts of 768 x 2048, one token, 8 experts used), f32, through
//!   [`QRocmStorage::indexed_moe_forward`] with 8-bit activations (`candle_rocm_qmoe`, the
//!   default) and float ones (`candle_rocm_qmoe_float`); each call takes the next 8 experts, so
//!   that the calls cycle through all 128 (113 MB in Q4K, more than the L2); throughput = the 8
//!   experts' bytes, beside `reference_copy` of as many bytes;
//! * `qmoe_prefill_512x8_128x768x2048_Q4K`: the same layer's expert product for a 512-token
//!   prompt (4096 (token, slot) pairs over all 128 experts), throughput the whole table's
//!   bytes, beside `reference_copy` of the table;
//! * `qdequantize_14336x4096_{type}`: the dequantization to f16 alone (`candle_rocm_dequantize_f16`,
//!   throughput = the blocks read + the f16 written) beside `reference_copy`, a copy that reads and
//!   writes as many bytes in all.
//!
//! On a GPU machine: `cargo bench -p candle-rocm --no-default-features --bench quantized -- --warm-up-time 1 --measurement-time 2`
#![allow(missing_docs)] // criterion_group! generates undocumented items

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Layout, Shape, Tensor};
use candle_rocm::{QRocmStorage, QuantizedGemmPlan, QuantizedMatvec, RocmDevice};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};

const N: usize = 14336;
const K: usize = 4096;
const TYPES: [GgmlDType; 4] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4K,
    GgmlDType::Q6K,
    GgmlDType::Q8_0,
];

mod common;
use common::{device, gpu_time};

/// Random weights quantized on the CPU (a few distinct rows repeated: quantizing 58M values
/// on the host would dominate the run), as blocks on the GPU.
fn weights(dev: &RocmDevice, dtype: GgmlDType) -> QRocmStorage {
    let rows = 64;
    let base = Tensor::rand(-1f32, 1f32, (rows, K), &Device::Cpu).unwrap();
    let q = QTensor::quantize(&base, dtype).unwrap();
    let data = q.data().unwrap();
    let mut all = Vec::with_capacity(data.len() * (N / rows));
    for _ in 0..N / rows {
        all.extend_from_slice(&data);
    }
    QRocmStorage::from_blocks(dev, dtype, &all).unwrap()
}

/// `reference_copy` in group `g`: a device-to-device copy of `bytes`, throughput the bytes read
/// and written (the usual copy-bandwidth convention).
fn bench_reference_copy(g: &mut BenchmarkGroup<'_, WallTime>, dev: &RocmDevice, bytes: usize) {
    let stream = dev.hip_device().default_stream();
    let src = stream.alloc::<u8>(bytes).unwrap();
    let mut dst = stream.alloc::<u8>(bytes).unwrap();
    g.throughput(Throughput::Bytes(2 * bytes as u64));
    g.bench_function("reference_copy", |b| {
        b.iter_custom(|it| {
            gpu_time(dev, it, || {
                dst.as_mut_slice()
                    .copy_from_device(&src.as_slice())
                    .unwrap()
            })
        })
    });
}

fn qmatvec(c: &mut Criterion) {
    let Some(dev) = device() else { return };
    let x = dev
        .rand_uniform(&Shape::from((1, K)), DType::F32, -1.0, 1.0)
        .unwrap();
    let xl = Layout::contiguous((1, K));
    let wshape = Shape::from((N, K));
    for dtype in TYPES {
        let w = weights(&dev, dtype);
        let bytes = w.storage_size_in_bytes();
        let mut g = c.benchmark_group(format!("qmatvec_{N}x{K}_{dtype:?}"));
        g.sample_size(20);
        bench_reference_copy(&mut g, &dev, bytes);
        g.throughput(Throughput::Bytes(bytes as u64));
        for (name, kind) in [
            ("candle_rocm_qmatvec", QuantizedMatvec::Int8Activations),
            (
                "candle_rocm_qmatvec_float",
                QuantizedMatvec::FloatActivations,
            ),
        ] {
            dev.set_quantized_matvec(kind);
            g.bench_function(name, |b| {
                b.iter_custom(|it| {
                    gpu_time(&dev, it, || {
                        std::hint::black_box(w.matmul_t(&wshape, &x, &xl).unwrap());
                    })
                })
            });
        }
        dev.set_quantized_matvec(QuantizedMatvec::Int8Activations);
        let copies: Vec<QRocmStorage> = (0..(100usize << 20).div_ceil(bytes).max(2))
            .map(|_| weights(&dev, dtype))
            .collect();
        let mut next = 0usize;
        g.bench_function("candle_rocm_qmatvec_rotated", |b| {
            b.iter_custom(|it| {
                gpu_time(&dev, it, || {
                    next = (next + 1) % copies.len();
                    std::hint::black_box(copies[next].matmul_t(&wshape, &x, &xl).unwrap());
                })
            })
        });
        drop(copies);
        g.finish();
    }
}

fn qprefill(c: &mut Criterion) {
    let Some(dev) = device() else { return };
    let m = 512;
    let x = dev
        .rand_uniform(&Shape::from((m, K)), DType::F16, -1.0, 1.0)
        .unwrap();
    let xl = Layout::contiguous((m, K));
    let wshape = Shape::from((N, K));
    let dense = dev
        .rand_uniform(&Shape::from((N, K)), DType::F16, -1.0, 1.0)
        .unwrap();
    // (m, k) x (k, n) with the (n, k) weights read transposed, as QMatMul's dense path does.
    let wt = Layout::new(Shape::from((K, N)), vec![1, K], 0);
    for dtype in TYPES {
        let w = weights(&dev, dtype);
        qdequantize(c, &dev, &w, dtype);
        let mut g = c.benchmark_group(format!("qprefill_{m}x{K}x{N}_{dtype:?}"));
        g.sample_size(10);
        g.throughput(Throughput::Elements((2 * m * N * K) as u64));
        g.bench_function("reference_f16_gemm", |b| {
            b.iter_custom(|it| {
                gpu_time(&dev, it, || {
                    std::hint::black_box(x.matmul(&dense, (1, m, N, K), &xl, &wt).unwrap());
                })
            })
        });
        g.bench_function("candle_rocm_qmatmul", |b| {
            b.iter_custom(|it| {
                gpu_time(&dev, it, || {
                    std::hint::black_box(w.matmul_t(&wshape, &x, &xl).unwrap());
                })
            })
        });
        // Other chunk plans: the whole matrix at once (the path before chunking) for every type,
        // a sweep for Q4K.
        let mut plans = vec![(0, false)];
        if dtype == GgmlDType::Q4K {
            for mib in [8, 16, 32] {
                plans.extend([(mib << 20, false), (mib << 20, true)]);
            }
        }
        let default_plan = dev.quantized_gemm_plan();
        for (chunk_bytes, overlap) in plans {
            dev.set_quantized_gemm_plan(QuantizedGemmPlan {
                chunk_bytes,
                overlap,
            });
            let name = format!(
                "plan_chunk_{}MiB_{}",
                chunk_bytes >> 20,
                if overlap { "overlap" } else { "one_stream" }
            );
            g.bench_function(name, |b| {
                b.iter_custom(|it| {
                    gpu_time(&dev, it, || {
                        std::hint::black_box(w.matmul_t(&wshape, &x, &xl).unwrap());
                    })
                })
            });
        }
        dev.set_quantized_gemm_plan(default_plan);
        g.finish();
    }
}

/// The dequantization alone (to f16, the prefill's first step), throughput = the blocks read +
/// the f16 written, beside a copy that reads and writes as many bytes in all.
fn qdequantize(c: &mut Criterion, dev: &RocmDevice, w: &QRocmStorage, dtype: GgmlDType) {
    let traffic = w.storage_size_in_bytes() + 2 * N * K;
    let mut g = c.benchmark_group(format!("qdequantize_{N}x{K}_{dtype:?}"));
    g.sample_size(10);
    bench_reference_copy(&mut g, dev, traffic / 2);
    g.throughput(Throughput::Bytes(traffic as u64));
    g.bench_function("candle_rocm_dequantize_f16", |b| {
        b.iter_custom(|it| {
            gpu_time(dev, it, || {
                std::hint::black_box(w.dequantize(N * K, DType::F16).unwrap());
            })
        })
    });
    g.finish();
}

fn qmoe(c: &mut Criterion) {
    let Some(dev) = device() else { return };
    let (experts, n, k, topk) = (128usize, 768usize, 2048usize, 8usize);
    let x = dev
        .rand_uniform(&Shape::from((1, 1, k)), DType::F32, -1.0, 1.0)
        .unwrap();
    let xl = Layout::contiguous((1, 1, k));
    let idl = Layout::contiguous((1, topk));
    let wshape = Shape::from((experts, n, k));
    // Call i takes experts 8i .. 8i + 8 (mod 128), spread over the table.
    let ids: Vec<_> = (0..experts / topk)
        .map(|i| {
            let set: Vec<u32> = (0..topk)
                .map(|j| ((i * topk + j * 17) % experts) as u32)
                .collect();
            dev.storage_from_slice(&set).unwrap()
        })
        .collect();
    for dtype in [GgmlDType::Q4K, GgmlDType::Q8_0] {
        let rows = 64;
        let base = Tensor::rand(-1f32, 1f32, (rows, k), &Device::Cpu).unwrap();
        let data = QTensor::quantize(&base, dtype)
            .unwrap()
            .data()
            .unwrap()
            .to_vec();
        let all = data.repeat(experts * n / rows);
        let w = QRocmStorage::from_blocks(&dev, dtype, &all).unwrap();
        let bytes = all.len() / experts * topk;
        let mut g = c.benchmark_group(format!("qmoe_{experts}x{n}x{k}_{dtype:?}"));
        g.sample_size(20);
        bench_reference_copy(&mut g, &dev, bytes);
        g.throughput(Throughput::Bytes(bytes as u64));
        for (name, kind) in [
            ("candle_rocm_qmoe", QuantizedMatvec::Int8Activations),
            ("candle_rocm_qmoe_float", QuantizedMatvec::FloatActivations),
        ] {
            dev.set_quantized_matvec(kind);
            let mut next = 0usize;
            g.bench_function(name, |b| {
                b.iter_custom(|it| {
                    gpu_time(&dev, it, || {
                        next = (next + 1) % ids.len();
                        std::hint::black_box(
                            w.indexed_moe_forward(&wshape, &x, &xl, &ids[next], &idl)
                                .unwrap(),
                        );
                    })
                })
            });
        }
        dev.set_quantized_matvec(QuantizedMatvec::Int8Activations);
        g.finish();
        if dtype == GgmlDType::Q4K {
            qmoe_prefill(c, &dev, &w, &wshape);
        }
    }
}

/// `qmoe_prefill_512x8_128x768x2048_Q4K`: a prompt's expert product (512 tokens, 8 experts each,
/// spread over all 128), throughput the whole expert table's bytes (what a product that reads
/// each expert once reads), beside a copy of the table.
fn qmoe_prefill(c: &mut Criterion, dev: &RocmDevice, w: &QRocmStorage, wshape: &Shape) {
    let (experts, _, k) = wshape.dims3().unwrap();
    let (tokens, topk) = (512usize, 8usize);
    let x = dev
        .rand_uniform(&Shape::from((tokens, 1, k)), DType::F32, -1.0, 1.0)
        .unwrap();
    let xl = Layout::contiguous((tokens, 1, k));
    let set: Vec<u32> = (0..tokens * topk)
        .map(|i| ((i * 37 + i / topk * 11) % experts) as u32)
        .collect();
    let ids = dev.storage_from_slice(&set).unwrap();
    let idl = Layout::contiguous((tokens, topk));
    let bytes = w.storage_size_in_bytes();
    let mut g = c.benchmark_group(format!(
        "qmoe_prefill_{tokens}x{topk}_{experts}x{}x{k}_{:?}",
        wshape.dims()[1],
        w.dtype()
    ));
    g.sample_size(10);
    bench_reference_copy(&mut g, dev, bytes);
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function("candle_rocm_qmoe", |b| {
        b.iter_custom(|it| {
            gpu_time(dev, it, || {
                std::hint::black_box(w.indexed_moe_forward(wshape, &x, &xl, &ids, &idl).unwrap());
            })
        })
    });
    g.finish();
}

criterion_group!(benches, qmatvec, qprefill, qmoe);
criterion_main!(benches);
