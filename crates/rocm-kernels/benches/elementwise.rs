//! Element-wise kernel throughput against the device's own copy bandwidth, measured in the same
//! run (criterion; bytes = bytes read + bytes written). On a GPU machine:
//! `cargo bench -p rocm-kernels --no-default-features --bench elementwise -- --warm-up-time 1 --measurement-time 2`
#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use half::bf16;
use hip_core::{Device, Event, Stream};
use rocm_kernels::elementwise::{self as ew, BinaryOp, Strided, UnaryOp};

/// 2^26 elements, as the kernels issue's targets are stated.
const N: usize = 1 << 26;

fn time_on_stream(d: Device, stream: &Stream, iters: u64, mut op: impl FnMut()) -> Duration {
    let start = Event::new(d, true).unwrap();
    let end = Event::new(d, true).unwrap();
    start.record(stream).unwrap();
    for _ in 0..iters {
        op();
    }
    end.record(stream).unwrap();
    end.synchronize().unwrap();
    Duration::from_secs_f64(start.elapsed_ms(&end).unwrap() as f64 * 1e-3)
}

fn elementwise(c: &mut Criterion) {
    let d = match Device::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rocm-kernels benches need a GPU: {e}");
            return;
        }
    };
    let s = d.create_stream().unwrap();
    let dims = [N];
    let strides = [1usize];
    let host: Vec<f32> = (0..N).map(|i| ((i % 1024) as f32) * 1e-3 - 0.5).collect();
    let x = s.alloc_from_host(&host).unwrap();
    let y = s.alloc_from_host(&host).unwrap();
    let mut out = s.alloc::<f32>(N).unwrap();
    let hb: Vec<bf16> = host.iter().map(|&v| bf16::from_f32(v)).collect();
    let xb = s.alloc_from_host(&hb).unwrap();
    let yb = s.alloc_from_host(&hb).unwrap();
    let mut outb = s.alloc::<bf16>(N).unwrap();
    let mut out16 = s.alloc::<half::f16>(N).unwrap();
    let f32_bytes = (N * 4) as u64;

    let mut g = c.benchmark_group("elementwise_2^26");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(2 * f32_bytes));
    g.bench_function("reference_copy_f32", |b| {
        b.iter_custom(|n| {
            time_on_stream(d, &s, n, || {
                out.as_mut_slice().copy_from_device(&x.as_slice()).unwrap()
            })
        })
    });
    for (name, op) in [("exp_f32", UnaryOp::Exp), ("gelu_f32", UnaryOp::Gelu)] {
        g.bench_function(name, |b| {
            b.iter_custom(|n| {
                time_on_stream(d, &s, n, || {
                    ew::unary(
                        &s,
                        op,
                        &dims,
                        Strided::new(x.as_slice(), &strides),
                        &mut out.as_mut_slice(),
                    )
                    .unwrap()
                })
            })
        });
    }
    g.bench_function("affine_f32", |b| {
        b.iter_custom(|n| {
            time_on_stream(d, &s, n, || {
                ew::affine(
                    &s,
                    &dims,
                    Strided::new(x.as_slice(), &strides),
                    &mut out.as_mut_slice(),
                    1.5,
                    0.25,
                )
                .unwrap()
            })
        })
    });
    g.throughput(Throughput::Bytes(3 * f32_bytes));
    g.bench_function("add_f32", |b| {
        b.iter_custom(|n| {
            time_on_stream(d, &s, n, || {
                ew::binary(
                    &s,
                    BinaryOp::Add,
                    &dims,
                    Strided::new(x.as_slice(), &strides),
                    Strided::new(y.as_slice(), &strides),
                    &mut out.as_mut_slice(),
                )
                .unwrap()
            })
        })
    });
    g.throughput(Throughput::Bytes(3 * f32_bytes / 2));
    g.bench_function("add_bf16", |b| {
        b.iter_custom(|n| {
            time_on_stream(d, &s, n, || {
                ew::binary(
                    &s,
                    BinaryOp::Add,
                    &dims,
                    Strided::new(xb.as_slice(), &strides),
                    Strided::new(yb.as_slice(), &strides),
                    &mut outb.as_mut_slice(),
                )
                .unwrap()
            })
        })
    });
    g.throughput(Throughput::Bytes(f32_bytes + f32_bytes / 2));
    g.bench_function("cast_f32_f16", |b| {
        b.iter_custom(|n| {
            time_on_stream(d, &s, n, || {
                ew::cast(
                    &s,
                    &dims,
                    Strided::new(x.as_slice(), &strides),
                    &mut out16.as_mut_slice(),
                )
                .unwrap()
            })
        })
    });
    // A transposed (non-contiguous) copy of a (4096, 8192) f32 matrix: (8192, 4096) strides (1, 8192).
    let tdims = [8192usize, 4096];
    let tstrides = [1usize, 8192];
    g.throughput(Throughput::Bytes(2 * (4096 * 8192 * 4) as u64));
    let xt = x.slice(0..4096 * 8192).unwrap();
    let mut outt = s.alloc::<f32>(4096 * 8192).unwrap();
    g.bench_function("transposed_copy_4096x8192_f32", |b| {
        b.iter_custom(|n| {
            time_on_stream(d, &s, n, || {
                ew::copy_strided(
                    &s,
                    &tdims,
                    Strided::new(xt, &tstrides),
                    &mut outt.as_mut_slice(),
                )
                .unwrap()
            })
        })
    });
    g.finish();
}

/// Row-wise kernels: reductions over the last dim of (4096, 8192) and softmax / rms_norm over
/// (4096, 4096), f32. Bytes = input read + output written (+ alpha for rms_norm), each beside a
/// copy of the same input size in the same group.
fn rowwise(c: &mut Criterion) {
    use rocm_kernels::{nn, reduce};
    let d = match Device::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rocm-kernels benches need a GPU: {e}");
            return;
        }
    };
    let s = d.create_stream().unwrap();
    let (rows, cols) = (4096usize, 8192usize);
    let n = rows * cols;
    let host: Vec<f32> = (0..n)
        .map(|i| ((i * 7 % 1013) as f32) * 1e-3 - 0.5)
        .collect();
    let x = s.alloc_from_host(&host).unwrap();
    let mut copy_out = s.alloc::<f32>(n).unwrap();
    let mut red_out = s.alloc::<f32>(rows).unwrap();
    let dims = [rows, cols];
    let strides = [cols, 1usize];

    let mut g = c.benchmark_group("reduce_4096x8192_f32");
    g.sample_size(20);
    g.throughput(Throughput::Bytes((n * 4 + rows * 4) as u64));
    g.bench_function("reference_copy_f32", |b| {
        b.iter_custom(|it| {
            time_on_stream(d, &s, it, || {
                copy_out
                    .as_mut_slice()
                    .copy_from_device(&x.as_slice())
                    .unwrap()
            })
        })
    });
    for (name, op) in [
        ("sum_last_dim", reduce::ReduceOp::Sum),
        ("max_last_dim", reduce::ReduceOp::Max),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|it| {
                time_on_stream(d, &s, it, || {
                    reduce::reduce(
                        &s,
                        op,
                        &dims,
                        Strided::new(x.as_slice(), &strides),
                        &[1],
                        &mut red_out.as_mut_slice(),
                    )
                    .unwrap()
                })
            })
        });
    }
    g.finish();

    let (rows, cols) = (4096usize, 4096usize);
    let n = rows * cols;
    let xs = x.slice(0..n).unwrap();
    let alpha = s.alloc_from_host(&vec![1.5f32; cols]).unwrap();
    let mut out = s.alloc::<f32>(n).unwrap();
    let mut g = c.benchmark_group("rowwise_4096x4096_f32");
    g.sample_size(20);
    g.throughput(Throughput::Bytes((2 * n * 4) as u64));
    g.bench_function("reference_copy_f32", |b| {
        b.iter_custom(|it| {
            time_on_stream(d, &s, it, || {
                out.as_mut_slice().copy_from_device(&xs).unwrap()
            })
        })
    });
    g.bench_function("softmax_last_dim", |b| {
        b.iter_custom(|it| {
            time_on_stream(d, &s, it, || {
                nn::softmax_last_dim(&s, &xs, &mut out.as_mut_slice(), rows, cols).unwrap()
            })
        })
    });
    g.bench_function("rms_norm", |b| {
        b.iter_custom(|it| {
            time_on_stream(d, &s, it, || {
                nn::rms_norm(
                    &s,
                    &xs,
                    &alpha.as_slice(),
                    &mut out.as_mut_slice(),
                    rows,
                    cols,
                    1e-5,
                )
                .unwrap()
            })
        })
    });
    g.finish();
}

/// Full reductions of 2^26 elements (one output): `sum` and `max` through `reduce::reduce`
/// (which splits into two passes where it may: f32 sums, integer min/max; f32 max stays in one
/// pass, see the reduce module docs), the same forced into one pass
/// (`reduce::reduce_single_pass`), and an i32 max over the same bytes (split), beside a
/// device-to-device copy of the same 2^26 f32 in the same group. Bytes: the copy counts read +
/// written (2 x 256 MiB), the reductions the input read + the 4-byte output written, so that
/// criterion's GB/s figures divide directly into the ratio to copy bandwidth.
fn reduce_all(c: &mut Criterion) {
    use rocm_kernels::reduce::{self, ReduceOp};
    let d = match Device::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rocm-kernels benches need a GPU: {e}");
            return;
        }
    };
    let s = d.create_stream().unwrap();
    let host: Vec<f32> = (0..N)
        .map(|i| ((i * 7 % 1013) as f32) * 1e-3 - 0.5)
        .collect();
    let x = s.alloc_from_host(&host).unwrap();
    let host_i: Vec<i32> = (0..N)
        .map(|i| (i * 7919 % 100_003) as i32 - 50_000)
        .collect();
    let xi = s.alloc_from_host(&host_i).unwrap();
    let mut copy_out = s.alloc::<f32>(N).unwrap();
    let mut out = s.alloc::<f32>(1).unwrap();
    let mut out_i = s.alloc::<i32>(1).unwrap();
    let dims = [N];
    let strides = [1usize];
    for (what, parts) in [
        (
            "sum f32",
            reduce::split_parts::<f32>(&d, ReduceOp::Sum, &dims, &strides, &[0]),
        ),
        (
            "max f32",
            reduce::split_parts::<f32>(&d, ReduceOp::Max, &dims, &strides, &[0]),
        ),
        (
            "max i32",
            reduce::split_parts::<i32>(&d, ReduceOp::Max, &dims, &strides, &[0]),
        ),
    ] {
        eprintln!(
            "reduce_all_2^26: {what} in {}",
            match parts.unwrap() {
                Some(g) => format!("two passes ({g} parts)"),
                None => "one pass".to_string(),
            }
        );
    }

    let mut g = c.benchmark_group("reduce_all_2^26_f32");
    g.sample_size(10);
    g.throughput(Throughput::Bytes((2 * N * 4) as u64));
    g.bench_function("reference_copy_f32", |b| {
        b.iter_custom(|it| {
            time_on_stream(d, &s, it, || {
                copy_out
                    .as_mut_slice()
                    .copy_from_device(&x.as_slice())
                    .unwrap()
            })
        })
    });
    g.throughput(Throughput::Bytes((N * 4 + 4) as u64));
    for (name, op, single) in [
        ("sum", ReduceOp::Sum, false),
        ("max", ReduceOp::Max, false),
        ("sum_single_pass", ReduceOp::Sum, true),
        ("max_single_pass", ReduceOp::Max, true),
    ] {
        let run = if single {
            reduce::reduce_single_pass::<f32>
        } else {
            reduce::reduce::<f32>
        };
        g.bench_function(name, |b| {
            b.iter_custom(|it| {
                time_on_stream(d, &s, it, || {
                    run(
                        &s,
                        op,
                        &dims,
                        Strided::new(x.as_slice(), &strides),
                        &[0],
                        &mut out.as_mut_slice(),
                    )
                    .unwrap()
                })
            })
        });
    }
    for (name, single) in [("max_i32", false), ("max_i32_single_pass", true)] {
        let run = if single {
            reduce::reduce_single_pass::<i32>
        } else {
            reduce::reduce::<i32>
        };
        g.bench_function(name, |b| {
            b.iter_custom(|it| {
                time_on_stream(d, &s, it, || {
                    run(
                        &s,
                        ReduceOp::Max,
                        &dims,
                        Strided::new(xi.as_slice(), &strides),
                        &[0],
                        &mut out_i.as_mut_slice(),
                    )
                    .unwrap()
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, elementwise, rowwise, reduce_all);
criterion_main!(benches);
