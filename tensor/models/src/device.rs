//! Choosing the [`Device`] the models run on, by name (command lines, benchmarks, tests).

use candle_core::Device;
use candle_rocm::RocmDeviceExt;

use crate::error::{Error, Result};

/// Device names [`pick_device`] accepts in this build.
pub const SUPPORTED_DEVICES: &[&str] = &["cpu", "rocm", "rocm:N"];

/// The device called `name` (case-insensitive): `"cpu"`, `"rocm"` (GPU 0) or `"rocm:N"`.
///
/// Unknown names are an [`Error::UnknownDevice`] listing [`SUPPORTED_DEVICES`].
pub fn pick_device(name: &str) -> Result<Device> {
    match name.trim().to_ascii_lowercase().as_str() {
        "cpu" => Ok(Device::Cpu),
        "rocm" => Ok(Device::new_rocm(0)?),
        other => match other.strip_prefix("rocm:").map(str::parse::<usize>) {
            Some(Ok(ordinal)) => Ok(Device::new_rocm(ordinal)?),
            _ => Err(Error::UnknownDevice(name.to_string())),
        },
    }
}

/// Waits until all work queued on `device` has finished (a no-op on the CPU); used around timings.
pub fn synchronize(device: &Device) -> Result<()> {
    Ok(device.synchronize()?)
}
