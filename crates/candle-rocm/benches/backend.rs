//! candle-rocm through candle's backend traits, beside a reference measured in the same run:
//!
//! * `host_overhead`: one 1-element `add` end to end through `BackendStorage::binary_impl`
//!   (validation, output allocation from the caching allocator, launch), host time per op,
//!   beside an empty `synchronize` of the device, and its parts alone (`part_*`: a cached
//!   allocation, the kernel lookup, the bare launch through hip-core, the rocm-kernels wrapper
//!   into an existing output);
//! * `matmul`: (4096 x 4096) x (4096 x 4096) in f32/bf16/f16 and the batched attention shape
//!   32 x (2048 x 128) x (128 x 2048) in bf16/f16 through `BackendStorage::matmul`, beside the
//!   same GEMM called directly through rocblas-safe (throughput = FLOPs, 2 m n k per matrix).
//!
//! * `conv2d_resnet50`: a ResNet-50 layer (batch 32, 64 -> 64 channels, 56 x 56, 3 x 3,
//!   padding 1) in f32 and f16 through `RocmStorage::conv2d_with` on the library path and on the
//!   im2col path, beside the same convolution called directly through miopen-safe on the
//!   device's own handle (so both use the algorithm one find step chose).
//!
//! On a GPU machine: `cargo bench -p candle-rocm --no-default-features --bench backend -- --warm-up-time 1 --measurement-time 2`
#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::time::Instant;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{DType, Layout, Shape};
use candle_rocm::{RocmDevice, RocmStorage, RocmStorageSlice};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hip_core::DeviceBuffer;
use rocblas_safe::{GemmConfig, GemmElement, Operation};

mod common;
use common::{device, gpu_time};

fn host_overhead(c: &mut Criterion) {
    let Some(dev) = device() else { return };
    let a = dev.storage_from_slice(&[1.5f32]).unwrap();
    let b = dev.storage_from_slice(&[2.5f32]).unwrap();
    let l = Layout::contiguous(1);
    let mut g = c.benchmark_group("host_overhead");
    g.sample_size(50);
    g.bench_function("reference_synchronize", |bch| {
        bch.iter_custom(|n| {
            let t = Instant::now();
            for _ in 0..n {
                dev.synchronize().unwrap();
            }
            t.elapsed()
        })
    });
    g.bench_function("add_1_element_f32", |bch| {
        bch.iter_custom(|n| {
            dev.synchronize().unwrap();
            let t = Instant::now();
            for _ in 0..n {
                let out = a.binary_impl::<candle_core::op::Add>(&b, &l, &l).unwrap();
                std::hint::black_box(out);
            }
            let host = t.elapsed();
            dev.synchronize().unwrap();
            host
        })
    });
    // Where the time goes: the pieces of the op above, each alone (host time per call).
    let stream = dev.stream();
    let device = stream.device();
    let (ab, bb) = (buffer::<f32>(&a), buffer::<f32>(&b));
    let mut host_per = |name: &str, mut op: Box<dyn FnMut() + '_>| {
        g.bench_function(name, |bch| {
            bch.iter_custom(|n| {
                dev.synchronize().unwrap();
                let t = Instant::now();
                for _ in 0..n {
                    op();
                }
                let host = t.elapsed();
                dev.synchronize().unwrap();
                host
            })
        });
    };
    host_per(
        "part_alloc_free_1_f32",
        Box::new(|| {
            std::hint::black_box(stream.alloc::<f32>(1).unwrap());
        }),
    );
    host_per(
        "part_kernel_lookup",
        Box::new(|| {
            std::hint::black_box(
                rocm_kernels::modules::function(&device, "binary", "badd_f32").unwrap(),
            );
        }),
    );
    let f = rocm_kernels::modules::function(&device, "binary", "badd_f32").unwrap();
    let mut raw_out = stream.alloc::<f32>(1).unwrap();
    host_per(
        "part_raw_launch",
        Box::new(move || {
            let config = hip_core::LaunchConfig {
                grid: [1, 1, 1],
                block: [64, 1, 1],
                shared_mem_bytes: 0,
            };
            // SAFETY: badd_f32 takes (u64 numel, u64 num_dims, const u64* info, const f32* lhs,
            // const f32* rhs, f32* out); with numel 1 and a null info it reads lhs[0], rhs[0]
            // and writes out[0], all one-element buffers alive until the device synchronizes
            // after the timed loop.
            unsafe {
                f.builder(stream, config)
                    .arg(1u64)
                    .arg(1u64)
                    .arg(hip_core::NullPtr)
                    .arg(ab.as_slice())
                    .arg(bb.as_slice())
                    .arg(&mut raw_out.as_mut_slice())
                    .launch()
                    .unwrap();
            }
        }),
    );
    let mut out = stream.alloc::<f32>(1).unwrap();
    host_per(
        "part_kernel_wrapper_into_existing_output",
        Box::new(move || {
            rocm_kernels::elementwise::binary(
                stream,
                rocm_kernels::elementwise::BinaryOp::Add,
                &[1],
                rocm_kernels::elementwise::Strided::new(ab.as_slice(), &[1]),
                rocm_kernels::elementwise::Strided::new(bb.as_slice(), &[1]),
                &mut out.as_mut_slice(),
            )
            .unwrap();
        }),
    );
    g.finish();
}

fn buffer<T: GemmElement>(s: &RocmStorage) -> &DeviceBuffer<T> {
    // SAFETY-free downcast through the public enum.
    let any: &dyn std::any::Any = match s.as_slice() {
        RocmStorageSlice::F32(b) => b,
        RocmStorageSlice::F16(b) => b,
        RocmStorageSlice::BF16(b) => b,
        RocmStorageSlice::F64(b) => b,
        _ => panic!("not a float storage"),
    };
    any.downcast_ref::<DeviceBuffer<T>>().expect("dtype")
}

fn bench_matmul<T: GemmElement>(
    c: &mut Criterion,
    dev: &RocmDevice,
    dtype: DType,
    (b, m, n, k): (usize, usize, usize, usize),
    name: &str,
) {
    let lhs = dev
        .rand_uniform(&Shape::from((b, m, k)), dtype, -1.0, 1.0)
        .unwrap();
    let rhs = dev
        .rand_uniform(&Shape::from((b, k, n)), dtype, -1.0, 1.0)
        .unwrap();
    let (ll, rl) = (Layout::contiguous((b, m, k)), Layout::contiguous((b, k, n)));
    let handle = rocblas_safe::Handle::new(dev.stream()).unwrap();
    let cfg = GemmConfig {
        transa: Operation::None,
        transb: Operation::None,
        m: n,
        n: m,
        k,
        lda: n,
        ldb: k,
        ldc: n,
        stride_a: k * n,
        stride_b: m * k,
        stride_c: m * n,
        batch: b,
    };
    let mut out = dev
        .hip_device()
        .default_stream()
        .alloc::<T>(b * m * n)
        .unwrap();
    let (a_buf, b_buf) = (buffer::<T>(&rhs), buffer::<T>(&lhs));
    let mut g = c.benchmark_group(format!("matmul_{name}"));
    g.sample_size(10);
    g.throughput(Throughput::Elements((2 * b * m * n * k) as u64));
    g.bench_function("reference_rocblas_safe_gemm", |bch| {
        bch.iter_custom(|it| {
            gpu_time(dev, it, || {
                handle
                    .gemm(
                        &cfg,
                        1.0,
                        &a_buf.as_slice(),
                        &b_buf.as_slice(),
                        0.0,
                        &mut out.as_mut_slice(),
                    )
                    .unwrap()
            })
        })
    });
    g.bench_function("candle_rocm_matmul", |bch| {
        bch.iter_custom(|it| {
            gpu_time(dev, it, || {
                std::hint::black_box(lhs.matmul(&rhs, (b, m, n, k), &ll, &rl).unwrap());
            })
        })
    });
    g.finish();
}

fn matmul(c: &mut Criterion) {
    let Some(dev) = device() else { return };
    let square = (1, 4096, 4096, 4096);
    bench_matmul::<f32>(c, &dev, DType::F32, square, "4096_f32");
    bench_matmul::<half::bf16>(c, &dev, DType::BF16, square, "4096_bf16");
    bench_matmul::<half::f16>(c, &dev, DType::F16, square, "4096_f16");
    let attn = (32, 2048, 2048, 128);
    bench_matmul::<half::bf16>(
        c,
        &dev,
        DType::BF16,
        attn,
        "attention_32x2048x128x2048_bf16",
    );
    bench_matmul::<half::f16>(c, &dev, DType::F16, attn, "attention_32x2048x128x2048_f16");
}

fn bench_conv<T: GemmElement + miopen_safe::ConvElement>(
    c: &mut Criterion,
    dev: &RocmDevice,
    dtype: DType,
    name: &str,
) {
    use candle_rocm::{Conv2dSpec, ConvPath};
    let spec = Conv2dSpec {
        batch: 32,
        c_in: 64,
        c_out: 64,
        input: (56, 56),
        kernel: (3, 3),
        padding: (1, 1),
        stride: (1, 1),
        dilation: (1, 1),
        output_padding: (0, 0),
    };
    let (xl, wl) = (
        Layout::contiguous((32, 64, 56, 56)),
        Layout::contiguous((64, 64, 3, 3)),
    );
    let x = dev.rand_uniform(xl.shape(), dtype, -1.0, 1.0).unwrap();
    let w = dev.rand_uniform(wl.shape(), dtype, -1.0, 1.0).unwrap();
    // The device's own handle: the direct call and candle-rocm's library path then use the
    // algorithm the same find step chose, and the comparison measures only candle-rocm's
    // overhead.
    let handle = dev.miopen_handle().unwrap();
    let params = miopen_safe::ConvParams {
        padding: vec![1, 1],
        stride: vec![1, 1],
        dilation: vec![1, 1],
        groups: 1,
    };
    let xs = miopen_safe::TensorShape::contiguous(vec![32, 64, 56, 56]);
    let ws = miopen_safe::TensorShape::contiguous(vec![64, 64, 3, 3]);
    let ys = miopen_safe::TensorShape::contiguous(vec![32, 64, 56, 56]);
    let mut y = dev.stream().alloc::<T>(32 * 64 * 56 * 56).unwrap();
    let (xb, wb) = (buffer::<T>(&x), buffer::<T>(&w));
    let flops = 2u64 * 32 * 64 * 56 * 56 * 64 * 9;
    let mut g = c.benchmark_group(format!("conv2d_resnet50_{name}"));
    g.sample_size(10);
    g.throughput(Throughput::Elements(flops));
    g.bench_function("reference_miopen_safe_conv_forward", |bch| {
        bch.iter_custom(|it| {
            gpu_time(dev, it, || {
                handle
                    .conv_forward(
                        &xs,
                        &xb.as_slice(),
                        &ws,
                        &wb.as_slice(),
                        &params,
                        &ys,
                        &mut y.as_mut_slice(),
                    )
                    .unwrap()
            })
        })
    });
    for (path, label) in [
        (ConvPath::Library, "candle_rocm_conv2d_library"),
        (ConvPath::Im2col, "candle_rocm_conv2d_im2col"),
    ] {
        dev.set_conv_path(path);
        g.bench_function(label, |bch| {
            bch.iter_custom(|it| {
                gpu_time(dev, it, || {
                    std::hint::black_box(x.conv2d_with(&xl, &w, &wl, &spec).unwrap());
                })
            })
        });
    }
    dev.set_conv_path(ConvPath::Auto);
    g.finish();
    if let Ok(Some(a)) = handle.conv_forward_algorithm::<T>(&xs, &ws, &params, &ys) {
        println!(
            "conv2d_resnet50_{name}: algorithm {} ({} bytes of workspace)",
            a.name, a.workspace_bytes
        );
    }
}

fn conv(c: &mut Criterion) {
    let Some(dev) = device() else { return };
    bench_conv::<f32>(c, &dev, DType::F32, "f32");
    bench_conv::<half::f16>(c, &dev, DType::F16, "f16");
}

criterion_group!(benches, host_overhead, matmul, conv);
criterion_main!(benches);
