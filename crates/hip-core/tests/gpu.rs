//! Tier 3: hip-core on a real GPU. Every test here is `#[ignore = "needs a GPU"]`; run with
//! `cargo test -p hip-core --test gpu -- --include-ignored` (`HIP_PLATFORM=nvidia` on an NVIDIA
//! card, `HIP_PLATFORM=amd` or nothing on an AMD card).

#[path = "../examples/hello_gpu.rs"]
mod hello_gpu;

use std::sync::Arc;

use hip_core::{
    Device, DeviceBuffer, Error, Event, Function, LaunchConfig, Module, PinnedHostBuffer, Stream,
};

const KERNELS: &str = r#"
#include <hip/hip_runtime.h>

extern "C" __global__ void fill_u32(unsigned* out, unsigned value, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}

// Spins for about `cycles` clock ticks per thread, then writes out[i] = in[i] + 1.
extern "C" __global__ void slow_add_one(const unsigned* in, unsigned* out, unsigned long long n,
                                        long long cycles) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long start = clock64();
    while (clock64() - start < cycles) { }
    if (i < n) out[i] = in[i] + 1u;
}

// Block b writes its `n` u32 of dynamic shared memory with b * n + i, then out[b * n + i] reads
// them back reversed within the block (every shared byte written and read).
extern "C" __global__ void shared_reverse(unsigned* out, unsigned n) {
    HIP_DYNAMIC_SHARED(unsigned, buf)
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) buf[i] = blockIdx.x * n + i;
    __syncthreads();
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x)
        out[blockIdx.x * n + i] = buf[n - 1 - i];
}

extern "C" __global__ void scale_f32(float* x, float a, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"#;

/// Tests share device 0 and its allocator. The one that checks exact allocator statistics takes
/// this lock exclusively; every other test holds it shared, so they still run in parallel.
static DEVICE_STATS: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    DEVICE_STATS.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    DEVICE_STATS.write().unwrap_or_else(|e| e.into_inner())
}

fn device() -> Device {
    Device::new(0).expect("a GPU is required for this test")
}

fn kernels(device: &Device) -> Module {
    device
        .compile("gpu_tests", KERNELS, &[])
        .expect("compile the test kernels")
}

fn launch_fill(f: &Function, stream: &Stream, out: &mut DeviceBuffer<u32>, value: u32) {
    let n = out.len();
    // SAFETY: fill_u32 takes (unsigned*, unsigned, unsigned long long) and writes out[0..n).
    unsafe {
        f.builder(stream, LaunchConfig::for_elements(n, 256))
            .arg(out)
            .arg(value)
            .arg(n as u64)
            .launch()
            .unwrap();
    }
}

#[test]
#[ignore = "needs a GPU"]
fn dynamic_shared_memory_beyond_48_kib_once_allowed() {
    let _g = shared();
    let d = device();
    let s = d.default_stream();
    let f = kernels(&d).function("shared_reverse").unwrap();
    // 64 KiB: above NVIDIA's default per-block limit, within AMD's LDS per workgroup.
    let words = 16 * 1024u32;
    let bytes = words * 4;
    let blocks = 3u32;
    let mut out = s.alloc::<u32>((blocks * words) as usize).unwrap();
    let config = LaunchConfig {
        grid: [blocks, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: bytes,
    };
    let limit = d.properties().shared_memory_per_block;
    if (bytes as usize) > limit {
        // Before the opt-in the launch is refused with the limit named.
        let e = f
            .builder(&s, config)
            .arg(&mut out)
            .arg(words)
            .validate()
            .unwrap_err();
        assert!(
            e.to_string().contains("shared memory per block exceed"),
            "{e}"
        );
    }
    f.allow_dynamic_shared(bytes).unwrap();
    // SAFETY: shared_reverse takes (unsigned*, unsigned) and writes out[0..blocks * n) with
    // `n` u32 of dynamic shared memory per block.
    unsafe {
        f.builder(&s, config)
            .arg(&mut out)
            .arg(words)
            .launch()
            .unwrap()
    };
    let got = out.to_host_vec().unwrap();
    for b in 0..blocks {
        for i in 0..words {
            let want = b * words + (words - 1 - i);
            assert_eq!(got[(b * words + i) as usize], want, "block {b}, word {i}");
        }
    }
    // A bound far past any device's shared memory is an error, not a fault.
    assert!(f.allow_dynamic_shared(u32::MAX / 2).is_err());
}

/// Deterministic pseudo-random data (fixed seed, printed on failure by the callers' messages).
fn pattern_u32(n: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u32
        })
        .collect()
}

#[test]
#[ignore = "needs a GPU"]
fn hello_gpu_example_runs_and_checks() {
    let _lock = shared();
    let r = hello_gpu::run(true).unwrap();
    println!("{r:?}");
    assert!(r.max_abs_error <= 1e-5 && r.sum_rel_error <= 1e-4);
}

/// A buffer's content key changes with every mutable view (so with every write through
/// hip-core), never with a read-only one, and differs between buffers, also when a new buffer
/// reuses a freed one's memory.
#[test]
#[ignore = "needs a GPU"]
fn content_keys_follow_writes_and_buffers() {
    let _lock = shared();
    let dev = device();
    let stream = dev.default_stream();
    let mut a = DeviceBuffer::<u32>::new(&stream, 64).unwrap();
    let k0 = a.content_key();
    let _ = a.as_slice();
    let _ = a.slice(0..8).unwrap();
    assert_eq!(a.content_key(), k0, "read-only views do not change the key");
    a.as_mut_slice().copy_from_host(&[7u32; 64]).unwrap();
    let k1 = a.content_key();
    assert_ne!(k1, k0);
    let _ = a.slice_mut(0..4).unwrap();
    assert_ne!(a.content_key(), k1);
    let id = a.content_key().buffer;
    drop(a);
    let b = DeviceBuffer::<u32>::new(&stream, 64).unwrap();
    assert_ne!(b.content_key().buffer, id, "ids are never reused");
}

#[test]
#[ignore = "needs a GPU"]
fn every_device_reports_sane_properties() {
    let _lock = shared();
    let n = hip_core::device_count().unwrap();
    assert!(n >= 1);
    for ordinal in 0..n {
        let d = Device::new(ordinal).unwrap();
        let p = d.properties();
        println!("{ordinal}: {p:?}");
        assert!(!p.name.is_empty());
        assert!(!p.arch_name.is_empty());
        assert!(
            p.warp_size == 32 || p.warp_size == 64,
            "warp size {}",
            p.warp_size
        );
        assert!(p.multiprocessor_count > 0);
        assert!(p.max_threads_per_block >= 256);
        assert!(p.shared_memory_per_block >= 16 * 1024);
        let (free, total) = d.memory_info().unwrap();
        assert!(free > 0 && free <= total && total as u64 <= p.total_memory as u64 + (1 << 30));
        d.synchronize().unwrap();
        hip_core::set_current_device(ordinal).unwrap();
        assert_eq!(hip_core::current_device(), ordinal);
    }
    match Device::new(n) {
        Err(Error::InvalidDevice { ordinal, count }) => assert_eq!((ordinal, count), (n, n)),
        other => panic!("expected InvalidDevice, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a GPU"]
fn copies_round_trip_for_every_size_pinned_and_pageable() {
    let _lock = shared();
    let d = device();
    let stream = d.create_stream().unwrap();
    for &n in &[0usize, 1, 1001, (64 << 20) / 4] {
        let seed = 0x5eed + n as u64;
        let host = pattern_u32(n, seed);
        // Pageable, synchronous.
        let mut buf = stream.alloc::<u32>(n).unwrap();
        buf.copy_from_host(&host).unwrap();
        assert!(
            buf.to_host_vec().unwrap() == host,
            "pageable round trip, n={n}, seed={seed}"
        );
        // Pinned, asynchronous both ways.
        let pinned = PinnedHostBuffer::from_slice(d, &host).unwrap();
        let mut buf2 = stream.alloc::<u32>(n).unwrap();
        let back = stream
            .copy_to_device_async(pinned, &mut buf2.as_mut_slice())
            .unwrap()
            .wait()
            .unwrap();
        assert!(back[..] == host[..]);
        let out = PinnedHostBuffer::<u32>::new(d, n).unwrap();
        let out = stream
            .copy_to_host_async(&buf2.as_slice(), out)
            .unwrap()
            .wait()
            .unwrap();
        assert!(out[..] == host[..], "pinned round trip, n={n}, seed={seed}");
        // Pageable, asynchronous (the Vec is owned by the pending copy).
        let mut buf3 = stream.alloc::<u32>(n).unwrap();
        let pending = stream
            .copy_to_device_async(host.clone(), &mut buf3.as_mut_slice())
            .unwrap();
        drop(pending); // waits
        let got = stream
            .copy_to_host_async(&buf3.as_slice(), vec![0u32; n])
            .unwrap()
            .wait()
            .unwrap();
        assert!(got == host, "pageable async round trip, n={n}");
        // Device to device, and views with offsets.
        let copy = buf.try_clone().unwrap();
        assert!(copy.to_host_vec().unwrap() == host);
        if n > 10 {
            let view = buf.slice(3..n - 2).unwrap();
            assert_eq!(view.to_host_vec().unwrap(), host[3..n - 2]);
            let mut dst = stream.alloc_zeroed::<u32>(n).unwrap();
            dst.slice_mut(1..n - 4)
                .unwrap()
                .copy_from_device(&view)
                .unwrap();
            let got = dst.to_host_vec().unwrap();
            assert_eq!(got[0], 0);
            assert_eq!(&got[1..n - 4], &host[3..n - 2]);
            assert_eq!(&got[n - 4..], &[0, 0, 0, 0]);
        }
    }
    // memset and length mismatches.
    let mut b = stream.alloc::<u32>(17).unwrap();
    b.as_mut_slice().memset_async(0xab).unwrap();
    assert_eq!(b.to_host_vec().unwrap(), vec![0xabab_abab; 17]);
    assert!(matches!(
        b.copy_from_host(&[1, 2, 3]),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(b.slice(10..18).is_err());
}

#[test]
#[ignore = "needs a GPU"]
fn stream_order_and_event_timing() {
    let _lock = shared();
    let d = device();
    let m = kernels(&d);
    let fill = m.function("fill_u32").unwrap();
    let stream = d.create_stream().unwrap();
    let mut buf = stream.alloc::<u32>(1 << 20).unwrap();
    let start = Event::new(d, true).unwrap();
    let end = Event::new(d, true).unwrap();
    start.record(&stream).unwrap();
    for v in 1..=20u32 {
        launch_fill(&fill, &stream, &mut buf, v);
    }
    end.record(&stream).unwrap();
    // The copy is queued after the 20 fills on the same stream: it must see the last value.
    assert!(buf.to_host_vec().unwrap().iter().all(|&x| x == 20));
    end.synchronize().unwrap();
    assert!(end.query().unwrap());
    let ms = start.elapsed_ms(&end).unwrap();
    println!("20 fills of 4 MiB: {ms:.3} ms");
    assert!(ms > 0.0 && ms < 10_000.0);
    let untimed = stream.record_event().unwrap();
    assert!(matches!(
        untimed.elapsed_ms(&end),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(stream.query().unwrap());
}

#[test]
#[ignore = "needs a GPU"]
fn two_streams_with_a_cross_stream_dependency() {
    let _lock = shared();
    let d = device();
    let m = kernels(&d);
    let fill = m.function("fill_u32").unwrap();
    let slow = m.function("slow_add_one").unwrap();
    let a = d.create_stream().unwrap();
    let b = d.create_stream().unwrap();
    let n = 1usize << 16;
    let mut x = a.alloc::<u32>(n).unwrap();
    let mut y = b.alloc::<u32>(n).unwrap();
    launch_fill(&fill, &b, &mut y, 0);
    b.synchronize().unwrap();
    launch_fill(&fill, &a, &mut x, 41);
    let mut z = a.alloc::<u32>(n).unwrap();
    // A slow kernel on `a` (tens of ms), then `b` waits for it and reads its output.
    // SAFETY: slow_add_one takes (const unsigned*, unsigned*, unsigned long long, long long)
    // and touches in/out[0..n).
    unsafe {
        slow.builder(&a, LaunchConfig::for_elements(n, 256))
            .arg(&x)
            .arg(&mut z)
            .arg(n as u64)
            .arg(20_000_000i64)
            .launch()
            .unwrap();
    }
    let done_on_a = a.record_event().unwrap();
    b.wait_event(&done_on_a).unwrap();
    y.as_mut_slice().copy_from_device(&z.as_slice()).unwrap();
    assert!(y.to_host_vec().unwrap().iter().all(|&v| v == 42));
    // Without the wait, `b` would have raced ahead: stream_wait_for covers the other order too.
    launch_fill(&fill, &b, &mut y, 7);
    a.wait_for(&b).unwrap();
    x.as_mut_slice().copy_from_device(&y.as_slice()).unwrap();
    assert!(x.to_host_vec().unwrap().iter().all(|&v| v == 7));
}

#[test]
#[ignore = "needs a GPU"]
fn allocator_reuses_cached_blocks_and_stats_add_up() {
    let _lock = exclusive();
    let d = device();
    if !d.allocator().is_caching() {
        println!("no-caching mode (HIP_CORE_NO_CACHING): nothing is reused; not checked");
        return;
    }
    let stream = d.create_stream().unwrap();
    let before = d.memory_stats();
    let first = stream.alloc::<f32>(1000).unwrap();
    let ptr = first.device_ptr();
    let s1 = d.memory_stats();
    assert_eq!(s1.active_blocks, before.active_blocks + 1);
    assert!(s1.allocated_bytes >= before.allocated_bytes + 4000);
    drop(first);
    let s2 = d.memory_stats();
    assert_eq!(s2.active_blocks, before.active_blocks);
    assert_eq!(s2.allocated_bytes, before.allocated_bytes);
    let again = stream.alloc::<f32>(1000).unwrap();
    let s3 = d.memory_stats();
    assert_eq!(
        again.device_ptr(),
        ptr,
        "the freed block is handed out again"
    );
    assert_eq!(
        s3.device_mallocs, s2.device_mallocs,
        "no new device allocation"
    );
    assert!(s3.cache_hits > s2.cache_hits);
    assert!(s3.reserved_bytes >= s3.allocated_bytes);
    assert!(s3.peak_allocated_bytes >= s3.allocated_bytes);
    drop(again);
    d.empty_cache().unwrap();
    let s4 = d.memory_stats();
    assert!(s4.reserved_bytes <= s3.reserved_bytes);
    println!("{s4:?}");
}

#[test]
#[ignore = "needs a GPU"]
fn out_of_memory_is_a_clean_error_and_the_device_stays_usable() {
    let _lock = shared();
    let d = device();
    let stream = d.create_stream().unwrap();
    let total = d.properties().total_memory;
    match stream.alloc::<u8>(total * 2) {
        Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, total * 2),
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    let b = stream.alloc_from_host(&[1u8, 2, 3]).unwrap();
    assert_eq!(b.to_host_vec().unwrap(), vec![1, 2, 3]);
}

#[test]
#[ignore = "needs a GPU"]
fn jit_compile_launch_and_disk_cache_hit() {
    let _lock = shared();
    let d = device();
    // A unique source, so that the first compile in this process is a cache miss.
    let nonce = format!(
        "// nonce {:?} {}\n",
        std::time::SystemTime::now(),
        std::process::id()
    );
    let source = format!("{nonce}{KERNELS}");
    let first = hip_core::rtc::compile("jit_test", &source, d.arch(), &[]).unwrap();
    assert!(!first.from_cache);
    let second = hip_core::rtc::compile("jit_test", &source, d.arch(), &[]).unwrap();
    assert!(second.from_cache, "second compile must hit the disk cache");
    assert_eq!(first.image, second.image);
    assert_eq!(first.key, second.key);
    let m = d.load_module(&second.image).unwrap();
    let scale = m.function("scale_f32").unwrap();
    println!("scale_f32 attributes: {:?}", scale.attributes());
    let stream = d.create_stream().unwrap();
    let host: Vec<f32> = (0..777).map(|i| i as f32 * 0.25 - 3.0).collect();
    let mut x = stream.alloc_from_host(&host).unwrap();
    // SAFETY: scale_f32 takes (float*, float, unsigned long long) and touches x[0..777).
    unsafe {
        scale
            .builder(&stream, LaunchConfig::for_elements(host.len(), 128))
            .arg(&mut x)
            .arg(-2.0f32)
            .arg(host.len() as u64)
            .launch()
            .unwrap();
    }
    let got = x.to_host_vec().unwrap();
    for (g, h) in got.iter().zip(&host) {
        assert_eq!(*g, h * -2.0);
    }
    // A compile error carries the compiler's log.
    match hip_core::rtc::compile(
        "broken",
        "extern \"C\" __global__ void k() { nope; }",
        d.arch(),
        &[],
    ) {
        Err(Error::Compile { log, .. }) => assert!(log.contains("nope"), "{log}"),
        other => panic!("expected a compile error, got {other:?}"),
    }
    assert!(m.function("no_such_kernel").is_err());
}

#[test]
#[ignore = "needs a GPU"]
fn invalid_launch_configuration_is_an_error() {
    let _lock = shared();
    let d = device();
    let m = kernels(&d);
    let fill = m.function("fill_u32").unwrap();
    let stream = d.create_stream().unwrap();
    let mut out = stream.alloc::<u32>(4096).unwrap();
    let too_many = LaunchConfig {
        grid: [1, 1, 1],
        // Each dimension is within its own limit, the product is not.
        block: [d.properties().max_threads_per_block, 2, 1],
        shared_mem_bytes: 0,
    };
    // SAFETY: the launch must be rejected before it runs; had it run, it writes out[0..4096).
    let r = unsafe {
        fill.builder(&stream, too_many)
            .arg(&mut out)
            .arg(1u32)
            .arg(4096u64)
            .launch()
    };
    let e = r.unwrap_err();
    println!("{e}");
    assert!(e.to_string().contains("threads per block exceed"), "{e}");
    let mut wide = too_many;
    wide.block = [d.properties().max_block_dim[0] + 1, 1, 1];
    // SAFETY: as above, rejected before it runs.
    let r = unsafe {
        fill.builder(&stream, wide)
            .arg(&mut out)
            .arg(1u32)
            .arg(4096u64)
            .launch()
    };
    assert!(r.unwrap_err().to_string().contains("block.x"));
    // The stream and device are fine afterwards.
    launch_fill(&fill, &stream, &mut out, 3);
    assert!(out.to_host_vec().unwrap().iter().all(|&v| v == 3));
}

#[test]
#[ignore = "needs a GPU"]
fn many_threads_at_once() {
    let _lock = shared();
    let d = device();
    let m = Arc::new(kernels(&d));
    let handles: Vec<_> = (0..8u32)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                let d = Device::new(0).unwrap();
                let stream = d.create_stream().unwrap();
                let fill = m.function("fill_u32").unwrap();
                for round in 0..50u32 {
                    let n = 1000 + (t as usize) * 17 + round as usize;
                    let mut b = stream.alloc::<u32>(n).unwrap();
                    launch_fill(&fill, &stream, &mut b, t * 1000 + round);
                    let v = b.to_host_vec().unwrap();
                    assert!(
                        v.iter().all(|&x| x == t * 1000 + round),
                        "thread {t} round {round}"
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = d.memory_stats();
    println!("{s:?}");
}

/// A thread's own profile counts its launches only, beside other threads' own profiles running
/// at the same time, while a process-wide profile counts every thread's (timed or not).
#[test]
#[ignore = "needs a GPU"]
fn a_thread_profile_counts_only_its_own_launches() {
    // The process-wide profile: no other test's launches may fall into it.
    let _lock = exclusive();
    let d = device();
    let m = Arc::new(kernels(&d));
    for timed in [false, true] {
        // Three threads, each with its own profile, launching t + 1 times while every other
        // thread's profile is on (the barriers), then a process-wide profile over all of them.
        let together = Arc::new(std::sync::Barrier::new(3));
        let threads: Vec<_> = (0..3usize)
            .map(|t| {
                let (m, together) = (m.clone(), together.clone());
                std::thread::spawn(move || {
                    let d = Device::new(0).unwrap();
                    let stream = d.create_stream().unwrap();
                    let fill = m.function("fill_u32").unwrap();
                    let mut b = stream.alloc::<u32>(1000).unwrap();
                    hip_core::launch_profile_start_this_thread(timed);
                    together.wait();
                    for _ in 0..=t {
                        launch_fill(&fill, &stream, &mut b, t as u32);
                    }
                    together.wait();
                    let own = hip_core::launch_profile_stop();
                    assert!(b.to_host_vec().unwrap().iter().all(|&v| v == t as u32));
                    own
                })
            })
            .collect();
        for (t, h) in threads.into_iter().enumerate() {
            let own = h.join().unwrap();
            assert_eq!(own.len(), 1, "timed {timed}, thread {t}: {own:?}");
            assert_eq!(own[0].name, "fill_u32");
            assert_eq!(own[0].launches, t as u64 + 1, "timed {timed}, thread {t}");
            assert_eq!(own[0].gpu_ms.is_some(), timed);
        }

        hip_core::launch_profile_start(timed);
        for t in 0..2u32 {
            let m = m.clone();
            std::thread::spawn(move || {
                let d = Device::new(0).unwrap();
                let stream = d.create_stream().unwrap();
                let mut b = stream.alloc::<u32>(1000).unwrap();
                launch_fill(&m.function("fill_u32").unwrap(), &stream, &mut b, t);
                stream.synchronize().unwrap();
            })
            .join()
            .unwrap();
        }
        let all = hip_core::launch_profile_stop();
        assert_eq!(all[0].launches, 2, "timed {timed}: every thread's launches");
        assert_eq!(all[0].gpu_ms.is_some(), timed);
    }
}

const OVERLAP_KERNELS: &str = r#"
#include <hip/hip_runtime.h>

#if defined(__HIP_PLATFORM_NVIDIA__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define OVERLAP_PTX 1
#endif

// Nanoseconds on NVIDIA (%globaltimer); 0 elsewhere (the test compares times on NVIDIA only).
__device__ unsigned long long now_ns() {
#if defined(__HIP_PLATFORM_NVIDIA__)
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#else
    return 0;
#endif
}

__device__ void wait_previous_then_release_next() {
#ifdef OVERLAP_PTX
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Spins for about `cycles` clock ticks, then writes out[i] = i + 1; t[0] gets the latest time
// a block finished.
extern "C" __global__ void slow_writer(unsigned* out, unsigned long long n, long long cycles,
                                       unsigned long long* t) {
    wait_previous_then_release_next();
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long start = clock64();
    while (clock64() - start < cycles) { }
    if (i < n) out[i] = (unsigned)i + 1u;
    __syncthreads();
    if (threadIdx.x == 0) atomicMax(&t[0], now_ns());
}

// Notes when it started (before waiting for the previous kernel: t[1] gets the earliest start
// of a block), then out[i] = in[i] * 2.
extern "C" __global__ void overlapped_double(const unsigned* in, unsigned* out,
                                             unsigned long long n, unsigned long long* t) {
    unsigned long long started = now_ns();
    wait_previous_then_release_next();
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2u;
    if (threadIdx.x == 0) atomicMin(&t[1], started);
}
"#;

/// A kernel launched with `overlap_previous` that waits for the previous kernel sees all of its
/// writes; where the device overlaps launches (NVIDIA sm_90+) it really starts before the
/// previous kernel ends, and without the request it never does.
#[test]
#[ignore = "needs a GPU"]
fn an_overlapped_launch_starts_early_and_still_sees_the_previous_kernels_writes() {
    let _lock = shared();
    let d = device();
    let m = d.compile("overlap_tests", OVERLAP_KERNELS, &[]).unwrap();
    let (writer, reader) = (
        m.function("slow_writer").unwrap(),
        m.function("overlapped_double").unwrap(),
    );
    let stream = d.create_stream().unwrap();
    let n = 8 * 256usize;
    let overlaps = d.can_overlap_launches() && hip_core::overlapped_launches();
    for overlap in [false, true] {
        let mut written = stream.alloc_from_host(&vec![0u32; n]).unwrap();
        let mut doubled = stream.alloc_from_host(&vec![7u32; n]).unwrap();
        let mut times = stream.alloc_from_host(&[0u64, u64::MAX]).unwrap();
        // SAFETY: slow_writer takes (unsigned*, unsigned long long, long long, unsigned long
        // long*) and writes out[0..n) and t[0]; overlapped_double takes (const unsigned*,
        // unsigned*, unsigned long long, unsigned long long*), waits for the previous kernel
        // before touching memory, reads in[0..n), writes out[0..n) and t[1].
        unsafe {
            writer
                .builder(&stream, LaunchConfig::for_elements(n, 256))
                .arg(&mut written)
                .arg(n as u64)
                .arg(20_000_000i64)
                .arg(&mut times)
                .launch()
                .unwrap();
            reader
                .builder(&stream, LaunchConfig::for_elements(n, 256))
                .overlap_previous(overlap)
                .arg(&written)
                .arg(&mut doubled)
                .arg(n as u64)
                .arg(&mut times)
                .launch()
                .unwrap();
        }
        let got = doubled.to_host_vec().unwrap();
        let want: Vec<u32> = (0..n as u32).map(|i| 2 * (i + 1)).collect();
        assert_eq!(got, want, "overlap {overlap}");
        let t = times.to_host_vec().unwrap();
        let (writer_end, reader_start) = (t[0], t[1]);
        println!(
            "overlap {overlap} (device overlaps: {overlaps}): the reader started {} ns before \
             the writer ended",
            writer_end as i128 - reader_start as i128
        );
        if d.platform() == hip_core::Platform::Nvidia {
            if overlap && overlaps {
                assert!(reader_start < writer_end, "{t:?}");
            } else {
                assert!(reader_start >= writer_end, "{t:?}");
            }
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn buffers_used_on_another_stream_are_not_reused_early() {
    let _lock = shared();
    let d = device();
    let m = kernels(&d);
    let fill = m.function("fill_u32").unwrap();
    let slow = m.function("slow_add_one").unwrap();
    let owner = d.create_stream().unwrap();
    let other = d.create_stream().unwrap();
    let n = 1usize << 16;
    let mut input = owner.alloc::<u32>(n).unwrap();
    launch_fill(&fill, &owner, &mut input, 99);
    other.wait_for(&owner).unwrap();
    let mut out = other.alloc::<u32>(n).unwrap();
    // The slow kernel on `other` reads `input` (allocated on `owner`), which we then drop.
    // SAFETY: as in two_streams_with_a_cross_stream_dependency.
    unsafe {
        slow.builder(&other, LaunchConfig::for_elements(n, 256))
            .arg(&input)
            .arg(&mut out)
            .arg(n as u64)
            .arg(20_000_000i64)
            .launch()
            .unwrap();
    }
    drop(input);
    // A new allocation on `owner` of the same size must not get the block while `other` reads it.
    let mut fresh = owner.alloc::<u32>(n).unwrap();
    launch_fill(&fill, &owner, &mut fresh, 5);
    assert!(out.to_host_vec().unwrap().iter().all(|&v| v == 100));
    assert!(fresh.to_host_vec().unwrap().iter().all(|&v| v == 5));
}

/// Needs two GPUs: on a one-GPU machine it fails; skip it there with `--skip two_devices`.
#[test]
#[ignore = "needs two GPUs"]
fn two_devices_copy_between_them() {
    let _lock = shared();
    let count = hip_core::device_count().unwrap();
    assert!(
        count >= 2,
        "this test needs two GPUs, found {count}: run with --skip two_devices"
    );
    let d0 = Device::new(0).unwrap();
    let d1 = Device::new(1).unwrap();
    let host = pattern_u32(1 << 20, 7);
    let a = d0.default_stream().alloc_from_host(&host).unwrap();
    let b = a.copy_to(&d1.default_stream()).unwrap();
    assert!(b.to_host_vec().unwrap() == host);
}

const PORTABILITY_KERNELS: &str = r#"
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bf16.h>

// y = 2x in f16 and in bf16, computed through f32.
extern "C" __global__ void double_f16(const __half* x, __half* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2half(2.0f * __half2float(x[i]));
}
extern "C" __global__ void double_bf16(const __hip_bfloat16* x, __hip_bfloat16* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16(2.0f * __bfloat162float(x[i]));
}
// Per warp: the number of lanes whose value is odd (ballot + popcount), whether any / all are
// odd, and the warp's sum through shfl_down and shfl_xor, written by lane 0 of each warp.
extern "C" __global__ void warp_ops(const unsigned* x, unsigned* out) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned v = x[i];
    unsigned long long odd = __ballot(v & 1u);
    int any_odd = __any(v & 1u);
    int all_odd = __all(v & 1u);
    unsigned s1 = v, s2 = v;
    for (int o = warpSize / 2; o > 0; o /= 2) { s1 += __shfl_down(s1, o); s2 += __shfl_xor(s2, o); }
    unsigned first = __shfl(v, 0);
    if (threadIdx.x % warpSize == 0) {
        unsigned w = i / warpSize;
        out[w * 6 + 0] = (unsigned)__popcll(odd);
        out[w * 6 + 1] = any_odd != 0;
        out[w * 6 + 2] = all_odd != 0;
        out[w * 6 + 3] = s1;
        out[w * 6 + 4] = s2;
        out[w * 6 + 5] = first;
    }
}
"#;

#[test]
#[ignore = "needs a GPU"]
fn half_precision_types_and_warp_intrinsics_are_portable() {
    let _lock = shared();
    use half::{bf16, f16};
    let d = device();
    let m = d.compile("portability", PORTABILITY_KERNELS, &[]).unwrap();
    let stream = d.create_stream().unwrap();
    let n = 1000usize;
    let cfg = LaunchConfig::for_elements(n, 128);
    let xf: Vec<f16> = (0..n)
        .map(|i| f16::from_f32(i as f32 * 0.01 - 5.0))
        .collect();
    let xb: Vec<bf16> = (0..n)
        .map(|i| bf16::from_f32(i as f32 * 0.37 - 100.0))
        .collect();
    let gf = stream.alloc_from_host(&xf).unwrap();
    let gb = stream.alloc_from_host(&xb).unwrap();
    let mut yf = stream.alloc::<f16>(n).unwrap();
    let mut yb = stream.alloc::<bf16>(n).unwrap();
    let (df, db) = (
        m.function("double_f16").unwrap(),
        m.function("double_bf16").unwrap(),
    );
    // SAFETY: (const T*, T*, unsigned) over n elements.
    unsafe {
        df.builder(&stream, cfg)
            .arg(&gf)
            .arg(&mut yf)
            .arg(n as u32)
            .launch()
            .unwrap();
        db.builder(&stream, cfg)
            .arg(&gb)
            .arg(&mut yb)
            .arg(n as u32)
            .launch()
            .unwrap();
    }
    let (yf, yb) = (yf.to_host_vec().unwrap(), yb.to_host_vec().unwrap());
    for i in 0..n {
        assert_eq!(yf[i], f16::from_f32(2.0 * xf[i].to_f32()), "f16 at {i}");
        assert_eq!(yb[i], bf16::from_f32(2.0 * xb[i].to_f32()), "bf16 at {i}");
    }

    let warp = d.properties().warp_size as usize;
    let warps = 8usize;
    let x = pattern_u32(warp * warps, 11);
    let x: Vec<u32> = x
        .iter()
        .enumerate()
        .map(|(i, v)| match i / warp {
            0 => v | 1,  // all odd
            1 => v & !1, // none odd
            _ => v % 1000,
        })
        .collect();
    let gx = stream.alloc_from_host(&x).unwrap();
    let mut out = stream.alloc::<u32>(warps * 6).unwrap();
    out.as_mut_slice().memset_async(0xff).unwrap();
    let f = m.function("warp_ops").unwrap();
    // SAFETY: (const unsigned*, unsigned*): reads warps*warp inputs, writes 6 per warp.
    unsafe {
        f.builder(
            &stream,
            LaunchConfig {
                grid: [warps as u32, 1, 1],
                block: [warp as u32, 1, 1],
                shared_mem_bytes: 0,
            },
        )
        .arg(&gx)
        .arg(&mut out)
        .launch()
        .unwrap();
    }
    let out = out.to_host_vec().unwrap();
    for w in 0..warps {
        let lanes = &x[w * warp..(w + 1) * warp];
        let odd = lanes.iter().filter(|&&v| v & 1 == 1).count() as u32;
        let sum = lanes.iter().fold(0u32, |a, &v| a.wrapping_add(v));
        let expect = [
            odd,
            (odd > 0) as u32,
            (odd == warp as u32) as u32,
            sum,
            sum,
            lanes[0],
        ];
        assert_eq!(
            &out[w * 6..w * 6 + 6],
            &expect,
            "warp {w} (warp size {warp})"
        );
    }
}

#[test]
#[ignore = "needs a GPU"]
fn small_uploads_never_wait_and_are_not_overwritten_while_queued() {
    // `sync_count` is process-wide: no other test may run meanwhile.
    let _lock = exclusive();
    let d = device();
    if !d.allocator().is_caching() {
        println!("no-caching mode (HIP_CORE_NO_CACHING): every free waits; not checked");
        return;
    }
    let m = kernels(&d);
    let slow = m.function("slow_add_one").unwrap();
    let stream = d.create_stream().unwrap();
    // Mostly layout-sized uploads (4 B to 2.8 KiB), and a few at the 64 KiB limit.
    let sizes: Vec<usize> = (0..4000)
        .map(|i| match i % 500 {
            7 => Stream::MAX_ASYNC_UPLOAD_BYTES / 4,
            _ => 1 + (i * 37) % 700,
        })
        .collect();
    let total: usize = sizes.iter().sum();
    let mut out = stream.alloc::<u32>(total).unwrap();
    let n = 1usize << 10;
    let src = stream.alloc_zeroed::<u32>(n).unwrap();
    let mut busy_out = stream.alloc::<u32>(n).unwrap();
    drop(stream.alloc_from_host_async(&[1u32]).unwrap());

    let before = hip_core::thread_sync_count();
    // Keep the device busy (a few hundred ms) so that the copies below stay queued while the
    // host stages more: their slots cannot be reused, the ring has to grow.
    // SAFETY: slow_add_one takes (const unsigned*, unsigned*, unsigned long long, long long)
    // and touches in/out[0..n).
    unsafe {
        slow.builder(&stream, LaunchConfig::for_elements(n, 256))
            .arg(&src)
            .arg(&mut busy_out)
            .arg(n as u64)
            .arg(1_000_000_000i64)
            .launch()
            .unwrap();
    }
    let mut offset = 0;
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern_u32(len, i as u64);
        let up = stream.alloc_from_host_async(&data).unwrap();
        out.slice_mut(offset..offset + len)
            .unwrap()
            .copy_from_device(&up.as_slice())
            .unwrap();
        offset += len;
        // `data` is freed and `up` goes back to the allocator (in stream order) right here.
    }
    let after = hip_core::thread_sync_count();
    let device_was_busy = !stream.query().unwrap();
    assert_eq!(after, before, "staging {} uploads waited", sizes.len());

    let host = out.to_host_vec().unwrap();
    let mut offset = 0;
    for (i, &len) in sizes.iter().enumerate() {
        assert!(
            host[offset..offset + len] == pattern_u32(len, i as u64)[..],
            "upload {i} ({len} elements at {offset}) was overwritten or lost"
        );
        offset += len;
    }
    assert!(busy_out.to_host_vec().unwrap().iter().all(|&v| v == 1));
    println!(
        "{} uploads ({} KiB) staged without a wait; device still busy afterwards: {device_was_busy}",
        sizes.len(),
        total * 4 / 1024
    );

    // The counter counts explicit waits and the synchronous fallback above 64 KiB.
    let before = hip_core::thread_sync_count();
    stream.synchronize().unwrap();
    assert_eq!(hip_core::thread_sync_count(), before + 1);
    let big = pattern_u32(Stream::MAX_ASYNC_UPLOAD_BYTES / 4 + 1, 99);
    let up = stream.alloc_from_host_async(&big).unwrap();
    assert_eq!(
        hip_core::thread_sync_count(),
        before + 2,
        "the fallback waits once"
    );
    assert_eq!(up.to_host_vec().unwrap(), big);
    assert!(stream.alloc_from_host_async::<u32>(&[]).unwrap().is_empty());
}
