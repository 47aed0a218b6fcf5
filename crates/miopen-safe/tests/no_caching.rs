//! Tier 3: hip-core's no-caching mode (`HIP_CORE_NO_CACHING=1`, for memory checkers) under a
//! real driver, with a library convolution and its workspace on top.
//!
//! A test binary of its own: the variable is read when a device is first used, so the one test
//! of this process sets it before anything touches the GPU. `#[ignore = "needs a GPU"]`: run
//! with `cargo test -p miopen-safe --test no_caching -- --include-ignored`
//! (`HIP_PLATFORM=nvidia` on the NVIDIA test machine).

use hip_core::Device;
use miopen_safe::{ConvParams, Handle, TensorShape};

#[test]
#[ignore = "needs a GPU"]
fn every_buffer_is_its_own_device_allocation_and_convolutions_still_run() {
    // The only test of this binary, before any device exists: nothing reads the environment
    // concurrently.
    std::env::set_var("HIP_CORE_NO_CACHING", "1");
    let device = Device::new(0).unwrap_or_else(|e| panic!("no GPU: {e}"));
    assert!(
        !device.allocator().is_caching(),
        "HIP_CORE_NO_CACHING=1 was set before the device's first use"
    );
    let stream = device.create_stream().unwrap();

    // One device allocation of exactly the requested bytes, released on drop.
    let before = device.memory_stats();
    let a = stream.alloc::<f32>(1000).unwrap();
    let s1 = device.memory_stats();
    assert_eq!(s1.device_mallocs, before.device_mallocs + 1);
    assert_eq!(s1.reserved_bytes, before.reserved_bytes + 4000);
    assert_eq!(s1.allocated_bytes, before.allocated_bytes + 4000);
    let first = a.device_ptr();
    drop(a);
    let s2 = device.memory_stats();
    assert_eq!(s2.device_frees, s1.device_frees + 1);
    assert_eq!(
        (s2.reserved_bytes, s2.allocated_bytes),
        (before.reserved_bytes, before.allocated_bytes)
    );
    let b = stream.alloc::<f32>(1000).unwrap();
    println!("first {:#x}, second {:#x}", first.0, b.device_ptr().0);
    drop(b);

    // A 3x3 convolution with padding 1 of ones by ones: 4 at the corners, 6 on the edges, 9
    // inside; run twice (one algorithm search, then a cache hit of the handle).
    let handle = Handle::new(&stream).unwrap();
    let x = TensorShape::contiguous([1, 1, 4, 5]);
    let w = TensorShape::contiguous([1, 1, 3, 3]);
    let y = TensorShape::contiguous([1, 1, 4, 5]);
    let mut params = ConvParams::new(2);
    params.padding = vec![1, 1];
    let xd = stream.alloc_from_host(&[1.0f32; 20]).unwrap();
    let wd = stream.alloc_from_host(&[1.0f32; 9]).unwrap();
    let mut yd = stream.alloc_from_host(&[f32::NAN; 20]).unwrap();
    for _ in 0..2 {
        handle
            .conv_forward(
                &x,
                &xd.as_slice(),
                &w,
                &wd.as_slice(),
                &params,
                &y,
                &mut yd.as_mut_slice(),
            )
            .unwrap_or_else(|e| panic!("conv_forward: {e}"));
        let got = yd.to_host_vec().unwrap();
        let want: Vec<f32> = (0..4)
            .flat_map(|r| {
                (0..5).map(move |c| {
                    let rows = if r == 0 || r == 3 { 2.0 } else { 3.0 };
                    let cols = if c == 0 || c == 4 { 2.0 } else { 3.0 };
                    rows * cols
                })
            })
            .collect();
        // FFT and Winograd algorithms round even sums of ones.
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-4, "element {i}: {g}, expected {w}");
        }
    }
    assert_eq!(handle.find_calls(), 1);
    let stats = device.memory_stats();
    println!("{stats:?}");
    assert_eq!(stats.cache_hits, 0, "nothing is served from a cache");
    assert_eq!(
        stats.reserved_bytes, stats.allocated_bytes,
        "no memory is kept beyond the live buffers"
    );
    drop((xd, wd, yd, handle));
    let end = device.memory_stats();
    assert_eq!(
        (end.reserved_bytes, end.allocated_bytes),
        (before.reserved_bytes, before.allocated_bytes),
        "every buffer went back to the driver"
    );
    assert_eq!(
        end.device_mallocs - before.device_mallocs,
        end.device_frees - before.device_frees
    );
}
