//! Helpers shared by candle-rocm's benches (included with `#[path]`).

use std::time::Duration;

use candle_core::backend::BackendDevice;
use candle_rocm::RocmDevice;
use hip_core::Event;

/// GPU 0, or `None` (with a message) on a machine without one.
pub fn device() -> Option<RocmDevice> {
    match RocmDevice::new(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("candle-rocm benches need a GPU: {e}");
            None
        }
    }
}

/// GPU time of `iters` calls of `op` queued on the device's stream.
pub fn gpu_time(dev: &RocmDevice, iters: u64, mut op: impl FnMut()) -> Duration {
    let d = dev.hip_device();
    let start = Event::new(d, true).unwrap();
    let end = Event::new(d, true).unwrap();
    start.record(dev.stream()).unwrap();
    for _ in 0..iters {
        op();
    }
    end.record(dev.stream()).unwrap();
    end.synchronize().unwrap();
    Duration::from_secs_f64(start.elapsed_ms(&end).unwrap() as f64 * 1e-3)
}
