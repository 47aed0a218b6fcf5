//! hip-core benchmarks (criterion). On a GPU machine:
//! `cargo bench -p hip-core --bench hip_core -- --warm-up-time 1 --measurement-time 2`
//!
//! * `alloc_free/*`: a cached allocate + free pair against raw `hipMalloc`/`hipFree`
//!   (`cuMemAlloc`/`cuMemFree` on NVIDIA), same sizes, same run;
//! * `copy/*`: host<->device (pinned and pageable) and device<->device bandwidth; the
//!   device-to-device figure (bytes read + written) is the reference the kernel benchmarks divide by.

#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hip_core::{Device, Event, PinnedHostBuffer};

fn gpu() -> Option<Device> {
    match Device::new(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("hip-core benches need a GPU: {e}");
            None
        }
    }
}

fn alloc_free(c: &mut Criterion) {
    let Some(d) = gpu() else { return };
    let stream = d.create_stream().unwrap();
    let mut g = c.benchmark_group("alloc_free");
    for &bytes in &[4usize << 10, 1 << 20, 64 << 20] {
        // Warm the cache with one block of this size.
        drop(stream.alloc::<u8>(bytes).unwrap());
        g.bench_with_input(BenchmarkId::new("cached", bytes), &bytes, |b, &bytes| {
            b.iter(|| drop(stream.alloc::<u8>(bytes).unwrap()))
        });
        g.bench_with_input(
            BenchmarkId::new("raw_runtime", bytes),
            &bytes,
            |b, &bytes| {
                b.iter(|| {
                    let p = hip_core::raw::device_malloc(&d, bytes).unwrap();
                    // SAFETY: `p` was just allocated on `d` and is unused.
                    unsafe { hip_core::raw::device_free(&d, p) }.unwrap();
                })
            },
        );
    }
    g.finish();
}

/// Times `iters` repetitions of `op` on `stream` with device events.
fn time_on_stream(
    d: Device,
    stream: &hip_core::Stream,
    iters: u64,
    mut op: impl FnMut(),
) -> Duration {
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

fn copies(c: &mut Criterion) {
    let Some(d) = gpu() else { return };
    let stream = d.create_stream().unwrap();
    let bytes = 256usize << 20;
    let n = bytes / 4;
    let mut g = c.benchmark_group("copy");
    g.sample_size(20);

    let src = stream.alloc_zeroed::<f32>(n).unwrap();
    let mut dst = stream.alloc::<f32>(n).unwrap();
    // Bytes read + written, as every kernel benchmark counts them.
    g.throughput(Throughput::Bytes(2 * bytes as u64));
    g.bench_function("device_to_device_256MiB", |b| {
        b.iter_custom(|iters| {
            time_on_stream(d, &stream, iters, || {
                dst.as_mut_slice()
                    .copy_from_device(&src.as_slice())
                    .unwrap()
            })
        })
    });

    g.throughput(Throughput::Bytes(bytes as u64));
    let mut pinned = Some(PinnedHostBuffer::<f32>::new(d, n).unwrap());
    g.bench_function("host_to_device_pinned_256MiB", |b| {
        b.iter(|| {
            let h = pinned.take().unwrap();
            let h = stream
                .copy_to_device_async(h, &mut dst.as_mut_slice())
                .unwrap()
                .wait()
                .unwrap();
            pinned = Some(h);
        })
    });
    g.bench_function("device_to_host_pinned_256MiB", |b| {
        b.iter(|| {
            let h = pinned.take().unwrap();
            let h = stream
                .copy_to_host_async(&src.as_slice(), h)
                .unwrap()
                .wait()
                .unwrap();
            pinned = Some(h);
        })
    });
    let mut pageable = vec![0f32; n];
    g.bench_function("host_to_device_pageable_256MiB", |b| {
        b.iter(|| dst.copy_from_host(&pageable).unwrap())
    });
    g.bench_function("device_to_host_pageable_256MiB", |b| {
        b.iter(|| src.copy_to_host(&mut pageable).unwrap())
    });
    g.finish();
}

criterion_group!(benches, alloc_free, copies);
criterion_main!(benches);
