//! Unmanaged device memory, bypassing the caching allocator.
//!
//! For interoperating with other libraries and for measuring the allocator against the runtime
//! (`hipMalloc` / `hipFree`, `cuMemAlloc` / `cuMemFree` on NVIDIA). Prefer [`crate::DeviceBuffer`].

use crate::device::Device;
use crate::driver::DevicePtr;
use crate::error::{Error, Result};

/// Allocates `bytes` (> 0) directly from the runtime on `device`.
pub fn device_malloc(device: &Device, bytes: usize) -> Result<DevicePtr> {
    if bytes == 0 {
        return Err(Error::invalid("raw::device_malloc", "zero bytes requested"));
    }
    device.make_current()?;
    device.driver().malloc(bytes)
}

/// Frees memory from [`device_malloc`].
///
/// # Safety
/// `ptr` came from [`device_malloc`] on `device`, is freed once, and no queued work uses it.
pub unsafe fn device_free(device: &Device, ptr: DevicePtr) -> Result<()> {
    device.make_current()?;
    // SAFETY: forwarded contract.
    unsafe { device.driver().free(ptr) }
}
