//! A downstream crate's own HIP kernel on candle-rocm storage:
//! `cargo run --release -p candle-rocm --example custom_kernel`
//!
//! The source goes through rocm-kernels' pipeline (its prelude prepended, compiled at run time
//! for the device and cached on disk), and the kernel runs on the storage's buffer on the
//! device's stream, ordered with every other op.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{CpuStorage, Layout};
use candle_rocm::{RocmDevice, RocmStorage, RocmStorageSlice};
use hip_core::LaunchConfig;

const SOURCE: &str = r#"
// x[i] = clamp(x[i], lo, hi); prelude types: f32, u64; RK_KERNEL = extern "C" __global__.
RK_KERNEL void clamp_f32(f32* x, u64 n, f32 lo, f32 hi) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x)
        x[i] = fminf(fmaxf(x[i], lo), hi);
}
"#;

/// Clamps `storage` (f32) in place to `[lo, hi]` with the custom kernel.
pub fn clamp_in_place(storage: &mut RocmStorage, lo: f32, hi: f32) -> candle_core::Result<()> {
    let device = storage.device().clone();
    let module = rocm_kernels::modules::custom_module(&device.hip_device(), "clamp", SOURCE)
        .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let clamp = module
        .function("clamp_f32")
        .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let RocmStorageSlice::F32(buf) = storage.as_slice_mut() else {
        return Err(candle_core::Error::Msg(
            "clamp_in_place needs f32 storage".into(),
        ));
    };
    let n = buf.len();
    if n == 0 {
        return Ok(());
    }
    // SAFETY: clamp_f32 takes (f32*, u64, f32, f32) and touches x[0..n) only; `buf` holds n
    // elements and the launch goes on the stream every op of this device uses.
    unsafe {
        clamp
            .builder(device.stream(), LaunchConfig::for_elements(n, 256))
            .arg(&mut *buf)
            .arg(n as u64)
            .arg(lo)
            .arg(hi)
            .launch()
    }
    .map_err(|e| candle_core::Error::Msg(e.to_string()))
}

#[allow(dead_code)]
fn main() -> candle_core::Result<()> {
    let device = match RocmDevice::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("custom_kernel: no GPU run possible: {e}");
            std::process::exit(1);
        }
    };
    let data: Vec<f32> = (-5..5).map(|i| i as f32).collect();
    let mut storage = device.storage_from_slice(&data)?;
    clamp_in_place(&mut storage, -2.0, 3.0)?;
    // Ordinary ops follow on the same stream.
    let doubled = storage.affine(&Layout::contiguous(data.len()), 2.0, 0.0)?;
    match doubled.to_cpu_storage()? {
        CpuStorage::F32(v) => {
            println!("clamp to [-2, 3] then x2: {v:?}");
            let expect: Vec<f32> = data.iter().map(|x| x.clamp(-2.0, 3.0) * 2.0).collect();
            assert_eq!(v, expect);
        }
        other => unreachable!("f32 storage came back as {:?}", other.dtype()),
    }
    Ok(())
}
