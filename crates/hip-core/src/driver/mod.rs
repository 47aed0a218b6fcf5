//! The narrow driver interface under the safe layer, and platform selection.
//!
//! Everything in hip-core above this module is written once, against HIP semantics. A
//! [`Driver`] is one platform's implementation of the few runtime calls the safe layer needs:
//!
//! * [`amd`]: the HIP runtime (`libamdhip64`) and hipRTC, through our own bindgen bindings;
//! * [`nvidia`]: a thin adapter over the CUDA driver API and NVRTC, using cudarc's raw types.
//!
//! Handles cross this interface as opaque pointers ([`RawStream`], [`RawEvent`], ...). Every
//! function that takes a handle is `unsafe`: the caller (the safe layer) guarantees the handle is
//! live and belongs to this driver. All calls act on the calling thread's current device, which
//! the safe layer sets with [`Driver::set_current`] first.

use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

use crate::error::{Error, Result};

pub(crate) mod amd;
pub(crate) mod nvidia;

/// Which GPU platform hip-core drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Platform {
    /// AMD GPUs through the HIP runtime (ROCm).
    Amd,
    /// NVIDIA GPUs through the CUDA driver API.
    Nvidia,
}

impl Platform {
    /// The platform's name as `HIP_PLATFORM` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Platform::Amd => "amd",
            Platform::Nvidia => "nvidia",
        }
    }

    /// Parses a `HIP_PLATFORM` value (`amd`/`hcc`, `nvidia`/`nvcc`).
    pub fn parse(s: &str) -> Option<Platform> {
        match s.trim().to_ascii_lowercase().as_str() {
            "amd" | "hcc" => Some(Platform::Amd),
            "nvidia" | "nvcc" => Some(Platform::Nvidia),
            _ => None,
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

macro_rules! opaque_handle {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub(crate) struct $name(pub(crate) *mut c_void);
        // SAFETY: the handle is an opaque token owned by the runtime; the runtime APIs that take it
        // are thread-safe, and ownership/lifetime is managed by the safe wrapper that holds it.
        unsafe impl Send for $name {}
        // SAFETY: as above; sharing the token across threads does not by itself access anything.
        unsafe impl Sync for $name {}
    };
}

opaque_handle!(
    /// A `hipStream_t` / `CUstream`.
    RawStream
);
opaque_handle!(
    /// A `hipEvent_t` / `CUevent`.
    RawEvent
);
opaque_handle!(
    /// A `hipModule_t` / `CUmodule`.
    RawModule
);
opaque_handle!(
    /// A `hipFunction_t` / `CUfunction`.
    RawFunction
);

/// A device address (`hipDeviceptr_t` / `CUdeviceptr`) as an integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The null device pointer.
    pub const NULL: DevicePtr = DevicePtr(0);

    /// This address plus `bytes`.
    pub fn byte_offset(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0 + bytes as u64)
    }
}

/// What a device is, as reported by the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceProperties {
    /// Marketing name, e.g. `AMD Instinct MI300X` or `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Architecture name: `gcnArchName` on AMD (e.g. `gfx942:sramecc+:xnack-`), `sm_90` on NVIDIA.
    pub arch_name: String,
    /// Compute capability `(major, minor)` (on AMD, HIP's emulated value).
    pub compute_capability: (i32, i32),
    /// Threads per warp/wavefront (64 on CDNA, 32 or 64 on RDNA, 32 on NVIDIA).
    pub warp_size: u32,
    /// Number of multiprocessors / compute units.
    pub multiprocessor_count: u32,
    /// Total global memory in bytes.
    pub total_memory: usize,
    /// Maximum threads per block.
    pub max_threads_per_block: u32,
    /// Maximum block dimensions.
    pub max_block_dim: [u32; 3],
    /// Maximum grid dimensions.
    pub max_grid_dim: [u32; 3],
    /// Shared (LDS) memory available to one block, in bytes.
    pub shared_memory_per_block: usize,
    /// PCI bus id, for telling identical cards apart.
    pub pci_bus_id: i32,
}

/// Attributes of a loaded kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FunctionAttributes {
    /// The most threads per block this kernel can be launched with.
    pub max_threads_per_block: u32,
    /// Registers per thread.
    pub num_regs: u32,
    /// Static shared memory in bytes.
    pub shared_size_bytes: usize,
    /// Local (scratch) memory per thread in bytes.
    pub local_size_bytes: usize,
    /// Constant memory in bytes.
    pub const_size_bytes: usize,
}

/// One platform's runtime calls. See the module docs for the contract.
#[allow(dead_code)]
pub(crate) trait Driver: Send + Sync + 'static {
    /// Which platform this is.
    fn platform(&self) -> Platform;
    /// Runtime version as the runtime encodes it (HIP: `major*10_000_000 + minor*100_000 + patch`,
    /// CUDA: `major*1000 + minor*10`).
    fn runtime_version(&self) -> Result<i32>;
    /// Number of visible devices. Zero devices is `Ok(0)`, not an error.
    fn device_count(&self) -> Result<usize>;
    /// Properties of device `ordinal`.
    fn device_properties(&self, ordinal: usize) -> Result<DeviceProperties>;
    /// Makes device `ordinal` current on the calling thread.
    fn set_current(&self, ordinal: usize) -> Result<()>;
    /// Blocks until all work on the current device has finished.
    fn device_synchronize(&self) -> Result<()>;
    /// `(free, total)` bytes of the current device.
    fn mem_get_info(&self) -> Result<(usize, usize)>;
    /// Whether device `ordinal` can access memory of device `peer` directly.
    fn can_access_peer(&self, ordinal: usize, peer: usize) -> Result<bool>;

    /// Allocates `bytes` (> 0) of device memory on the current device. Out of memory is reported
    /// as an [`Error::Api`] whose name is the platform's out-of-memory code; use
    /// [`Driver::is_out_of_memory`] to recognise it.
    fn malloc(&self, bytes: usize) -> Result<DevicePtr>;
    /// Whether `err` is this platform's out-of-memory error.
    fn is_out_of_memory(&self, err: &Error) -> bool;
    /// Clears the calling thread's "last error" after a failure hip-core has handled itself
    /// (an out-of-memory answered by a retry, a code object the device rejected), so that
    /// code that checks it later (MIOpen, rocBLAS, the user's own HIP calls) does not see a
    /// stale error. Since HIP 7 a failed call's error stays set until `hipGetLastError` reads
    /// it, whatever succeeds in between (earlier HIP releases overwrote it at every call). AMD:
    /// `hipGetLastError`, its result discarded; NVIDIA: nothing (the CUDA driver API keeps no
    /// such state). Never fails.
    fn clear_last_error(&self);
    /// Frees device memory.
    ///
    /// # Safety
    /// `ptr` came from [`Driver::malloc`] and no queued work still uses it.
    unsafe fn free(&self, ptr: DevicePtr) -> Result<()>;
    /// Allocates `bytes` (> 0) of page-locked host memory.
    fn host_alloc(&self, bytes: usize) -> Result<*mut c_void>;
    /// Frees page-locked host memory.
    ///
    /// # Safety
    /// `ptr` came from [`Driver::host_alloc`] and no queued work still uses it.
    unsafe fn host_free(&self, ptr: *mut c_void) -> Result<()>;

    /// Queues a host-to-device copy on `stream`.
    ///
    /// # Safety
    /// `dst..dst+bytes` is live device memory, `src..src+bytes` is readable host memory that stays
    /// alive and unmodified until the copy has completed.
    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const c_void,
        bytes: usize,
        stream: RawStream,
    ) -> Result<()>;
    /// Queues a device-to-host copy on `stream`.
    ///
    /// # Safety
    /// `src..src+bytes` is live device memory, `dst..dst+bytes` is writable host memory that stays
    /// alive and is not read until the copy has completed.
    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut c_void,
        src: DevicePtr,
        bytes: usize,
        stream: RawStream,
    ) -> Result<()>;
    /// Queues a device-to-device copy (same device) on `stream`.
    ///
    /// # Safety
    /// Both ranges are live device memory of the current device.
    unsafe fn memcpy_dtod_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: RawStream,
    ) -> Result<()>;
    /// Queues a copy between two devices on `stream` (a stream of either device).
    ///
    /// # Safety
    /// `dst` is live memory of `dst_device`, `src` of `src_device`, both `bytes` long.
    unsafe fn memcpy_peer_async(
        &self,
        dst: DevicePtr,
        dst_device: usize,
        src: DevicePtr,
        src_device: usize,
        bytes: usize,
        stream: RawStream,
    ) -> Result<()>;
    /// Queues a byte fill on `stream`.
    ///
    /// # Safety
    /// `dst..dst+bytes` is live device memory.
    unsafe fn memset_async(
        &self,
        dst: DevicePtr,
        value: u8,
        bytes: usize,
        stream: RawStream,
    ) -> Result<()>;

    /// Creates a non-blocking stream on the current device.
    fn stream_create(&self) -> Result<RawStream>;
    /// Destroys a stream.
    ///
    /// # Safety
    /// `stream` is live and not used afterwards.
    unsafe fn stream_destroy(&self, stream: RawStream) -> Result<()>;
    /// Blocks until all work on `stream` has finished.
    ///
    /// # Safety
    /// `stream` is live.
    unsafe fn stream_synchronize(&self, stream: RawStream) -> Result<()>;
    /// `true` when all work on `stream` has finished.
    ///
    /// # Safety
    /// `stream` is live.
    unsafe fn stream_query(&self, stream: RawStream) -> Result<bool>;
    /// Makes future work on `stream` wait for `event`.
    ///
    /// # Safety
    /// Both handles are live.
    unsafe fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()>;

    /// Creates an event; `timing` enables [`Driver::event_elapsed_ms`].
    fn event_create(&self, timing: bool) -> Result<RawEvent>;
    /// Destroys an event.
    ///
    /// # Safety
    /// `event` is live and not used afterwards.
    unsafe fn event_destroy(&self, event: RawEvent) -> Result<()>;
    /// Records `event` on `stream`.
    ///
    /// # Safety
    /// Both handles are live.
    unsafe fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()>;
    /// Blocks until `event` has completed.
    ///
    /// # Safety
    /// `event` is live.
    unsafe fn event_synchronize(&self, event: RawEvent) -> Result<()>;
    /// `true` when `event` has completed (or was never recorded).
    ///
    /// # Safety
    /// `event` is live.
    unsafe fn event_query(&self, event: RawEvent) -> Result<bool>;
    /// Milliseconds between two completed, timing-enabled events.
    ///
    /// # Safety
    /// Both events are live.
    unsafe fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32>;

    /// Loads a code object (AMD) or cubin/PTX (NVIDIA) image into the current device.
    fn module_load_data(&self, image: &[u8]) -> Result<RawModule>;
    /// Unloads a module.
    ///
    /// # Safety
    /// `module` is live, and no queued launch uses its functions.
    unsafe fn module_unload(&self, module: RawModule) -> Result<()>;
    /// Looks up a kernel by name.
    ///
    /// # Safety
    /// `module` is live.
    unsafe fn module_get_function(&self, module: RawModule, name: &CStr) -> Result<RawFunction>;
    /// Reads a kernel's attributes.
    ///
    /// # Safety
    /// `function` is live.
    unsafe fn function_attributes(&self, function: RawFunction) -> Result<FunctionAttributes>;
    /// Lets launches of `function` ask for up to `bytes` of dynamic shared memory (NVIDIA:
    /// `cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)`, needed above 48 KiB; AMD has no such
    /// opt-in: a launch may ask for the device's LDS per workgroup directly).
    ///
    /// # Safety
    /// `function` is live.
    unsafe fn function_allow_dynamic_shared(&self, function: RawFunction, bytes: u32)
        -> Result<()>;
    /// Launches a kernel. With `overlap`, a driver that can (NVIDIA, compute capability 9.0+:
    /// programmatic dependent launch) lets the kernel start before the previous kernel on
    /// `stream` has finished; others launch it as usual.
    ///
    /// # Safety
    /// `function` is live; `params` points to one pointer per kernel parameter, each pointing at a
    /// value of exactly the parameter's type; every device pointer among them stays valid until
    /// the kernel has finished; the kernel does not access memory out of bounds. With `overlap`,
    /// every thread of the kernel waits for the previous kernels (`griddepcontrol.wait`) before
    /// it writes memory or reads memory that the previous kernel writes.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch_kernel(
        &self,
        function: RawFunction,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        stream: RawStream,
        params: *mut *mut c_void,
        overlap: bool,
    ) -> Result<()>;

    /// Compiles `source` for `arch` (e.g. `gfx942`, `sm_90`) with run-time compilation and returns
    /// a loadable image. `program` names the program in errors and logs.
    fn rtc_compile(
        &self,
        program: &str,
        source: &str,
        arch: &str,
        options: &[String],
    ) -> Result<Vec<u8>>;
    /// The run-time compiler's version, for cache keys.
    fn rtc_version(&self) -> Result<String>;
}

static DRIVER: OnceLock<Result<&'static dyn Driver>> = OnceLock::new();

/// The process-wide driver, chosen once: `HIP_PLATFORM=amd|nvidia`, else AMD if the HIP runtime
/// loads and sees a device, else NVIDIA if the CUDA driver loads and sees a device, else the
/// first error (AMD's unless only NVIDIA's library was present).
pub(crate) fn driver() -> Result<&'static dyn Driver> {
    DRIVER.get_or_init(select_driver).clone()
}

fn load(platform: Platform) -> Result<&'static dyn Driver> {
    let d: Box<dyn Driver> = match platform {
        Platform::Amd => amd::load()?,
        Platform::Nvidia => nvidia::load()?,
    };
    Ok(Box::leak(d))
}

fn select_driver() -> Result<&'static dyn Driver> {
    if let Ok(v) = std::env::var("HIP_PLATFORM") {
        if !v.trim().is_empty() {
            return match Platform::parse(&v) {
                Some(p) => load(p),
                None => Err(Error::Platform(format!(
                    "HIP_PLATFORM={v:?} is not a platform; use `amd` or `nvidia`"
                ))),
            };
        }
    }
    let amd = load(Platform::Amd);
    if let Ok(d) = &amd {
        if d.device_count().unwrap_or(0) > 0 {
            return amd;
        }
    }
    let nvidia = load(Platform::Nvidia);
    if let Ok(d) = &nvidia {
        if d.device_count().unwrap_or(0) > 0 {
            return nvidia;
        }
    }
    match (amd, nvidia) {
        (Ok(d), _) => Ok(d),
        (Err(_), Ok(d)) => Ok(d),
        (Err(amd), Err(nvidia)) => Err(Error::NoDevice {
            detail: format!("no GPU runtime could be loaded. AMD: {amd}. NVIDIA: {nvidia}"),
        }),
    }
}

/// The platform hip-core uses in this process (loading it on first use).
pub fn platform() -> Result<Platform> {
    Ok(driver()?.platform())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_names_parse() {
        assert_eq!(Platform::parse("amd"), Some(Platform::Amd));
        assert_eq!(Platform::parse(" NVIDIA "), Some(Platform::Nvidia));
        assert_eq!(Platform::parse("nvcc"), Some(Platform::Nvidia));
        assert_eq!(Platform::parse("metal"), None);
    }
}
