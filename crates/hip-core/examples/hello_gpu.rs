//! hip-core's first-contact demo: lists the GPUs, JIT-compiles a small HIP kernel for the first
//! one, runs it on 16 Mi elements, checks the result on the host and prints the timing.
//!
//! ```text
//! cargo run --release -p hip-core --example hello_gpu
//! ```
//! Without a GPU or without ROCm/CUDA it exits with status 1 and one sentence saying why.

use std::time::Instant;

use hip_core::{Device, Event, LaunchConfig, Result};

/// `y = a * x + y`, then a per-block sum of `y` through a warp-size-generic shuffle reduction.
const SOURCE: &str = r#"
#include <hip/hip_runtime.h>

extern "C" __global__ void saxpy(const float* x, float* y, float a, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void block_sum(const float* y, float* partial, unsigned long long n) {
    __shared__ float warp_sums[64];
    float v = 0.0f;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        v += y[i];
    for (int offset = warpSize / 2; offset > 0; offset /= 2) v += __shfl_xor(v, offset);
    int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < (int)(blockDim.x + warpSize - 1) / warpSize; ++w) s += warp_sums[w];
        partial[blockIdx.x] = s;
    }
}
"#;

/// What the demo measured.
#[derive(Debug)]
pub struct Report {
    /// The device the kernels ran on.
    pub device: String,
    /// Elements processed.
    pub elements: usize,
    /// Whether the run-time compilation came from the disk cache.
    pub compile_from_cache: bool,
    /// Compile (or cache load) + module load time in milliseconds.
    pub compile_ms: f64,
    /// saxpy kernel time in milliseconds (device events).
    pub saxpy_ms: f32,
    /// Largest absolute error of y against the host computation.
    pub max_abs_error: f32,
    /// Relative error of the device sum against an f64 host sum.
    pub sum_rel_error: f64,
}

/// Lists devices, compiles, runs and checks. Returns the report, or the first error.
pub fn run(verbose: bool) -> Result<Report> {
    let devices = Device::all()?;
    if devices.is_empty() {
        return Err(hip_core::Error::NoDevice {
            detail: format!("the {} runtime reports no GPU", hip_core::platform()?),
        });
    }
    if verbose {
        println!("platform: {}", hip_core::platform()?);
        for d in &devices {
            let p = d.properties();
            let (free, total) = d.memory_info()?;
            println!(
                "device {}: {} | arch {} | compute capability {}.{} | warp size {} | {} multiprocessors | \
                 {:.1} GiB total, {:.1} GiB free | max {} threads/block | {} KiB shared/block",
                d.ordinal(),
                p.name,
                p.arch_name,
                p.compute_capability.0,
                p.compute_capability.1,
                p.warp_size,
                p.multiprocessor_count,
                total as f64 / (1u64 << 30) as f64,
                free as f64 / (1u64 << 30) as f64,
                p.max_threads_per_block,
                p.shared_memory_per_block / 1024
            );
        }
    }

    let device = devices[0];
    let stream = device.create_stream()?;
    let t0 = Instant::now();
    let image = hip_core::rtc::compile("hello_gpu", SOURCE, device.arch(), &[])?;
    let module = device.load_module(&image.image)?;
    let saxpy = module.function("saxpy")?;
    let block_sum = module.function("block_sum")?;
    let compile_ms = t0.elapsed().as_secs_f64() * 1e3;

    let n: usize = 1 << 24;
    let a = 1.5f32;
    let x_host: Vec<f32> = (0..n).map(|i| ((i % 1000) as f32) * 1e-3).collect();
    let y_host: Vec<f32> = (0..n).map(|i| ((i % 7) as f32) - 3.0).collect();
    let x = stream.alloc_from_host(&x_host)?;
    let mut y = stream.alloc_from_host(&y_host)?;

    let threads = 256u32;
    let blocks = (device.properties().multiprocessor_count * 8).max(1);
    let config = LaunchConfig {
        grid: [blocks, 1, 1],
        block: [threads, 1, 1],
        shared_mem_bytes: 0,
    };
    let start = Event::new(device, true)?;
    let end = Event::new(device, true)?;
    start.record(&stream)?;
    // SAFETY: saxpy takes (const float*, float*, float, unsigned long long) and touches
    // x[0..n), y[0..n) only; both buffers hold n elements.
    unsafe {
        saxpy
            .builder(&stream, config)
            .arg(&x)
            .arg(&mut y)
            .arg(a)
            .arg(n as u64)
            .launch()?;
    }
    end.record(&stream)?;
    let mut partial = stream.alloc::<f32>(blocks as usize)?;
    // SAFETY: block_sum takes (const float*, float*, unsigned long long), reads y[0..n) and
    // writes partial[blockIdx.x] for blockIdx.x < blocks; 256 threads use 256/warpSize <= 64
    // warp slots of shared memory.
    unsafe {
        block_sum
            .builder(&stream, config)
            .arg(&y)
            .arg(&mut partial)
            .arg(n as u64)
            .launch()?;
    }
    let y_dev = y.to_host_vec()?;
    let partial_host = partial.to_host_vec()?;
    let saxpy_ms = start.elapsed_ms(&end)?;

    let mut max_abs_error = 0.0f32;
    let mut exact_sum = 0.0f64;
    for i in 0..n {
        let expect = a * x_host[i] + y_host[i];
        max_abs_error = max_abs_error.max((expect - y_dev[i]).abs());
        exact_sum += expect as f64;
    }
    let device_sum: f64 = partial_host.iter().map(|&v| v as f64).sum();
    let sum_rel_error = (device_sum - exact_sum).abs() / exact_sum.abs().max(1.0);

    let report = Report {
        device: format!("{} ({})", device.properties().name, device.arch()),
        elements: n,
        compile_from_cache: image.from_cache,
        compile_ms,
        saxpy_ms,
        max_abs_error,
        sum_rel_error,
    };
    if max_abs_error > 1e-5 || sum_rel_error > 1e-4 {
        return Err(hip_core::Error::invalid(
            "hello_gpu check",
            format!("the GPU result is wrong: {report:?}"),
        ));
    }
    Ok(report)
}

#[allow(dead_code)]
fn main() {
    match run(true) {
        Ok(r) => {
            let gbs = (3 * r.elements * 4) as f64 / (r.saxpy_ms as f64 * 1e-3) / 1e9;
            println!(
                "{} | JIT compile{}: {:.1} ms | saxpy on {} elements: {:.3} ms ({:.0} GB/s) | max error {:.1e} | sum rel. error {:.1e} | OK",
                r.device,
                if r.compile_from_cache { " (disk cache hit)" } else { "" },
                r.compile_ms,
                r.elements,
                r.saxpy_ms,
                gbs,
                r.max_abs_error,
                r.sum_rel_error
            );
        }
        Err(e) => {
            eprintln!("hello_gpu: no GPU run possible: {e}");
            std::process::exit(1);
        }
    }
}
