//! # hip-core: a safe HIP runtime for Rust
//!
//! hip-core is the foundation of the candle-rocm workspace and is useful on its own for raw GPU
//! work. It gives safe, RAII access to the HIP runtime: devices and their properties, streams and
//! events, typed device buffers with stream-ordered frees from a caching allocator, pinned host
//! memory, copies, modules and kernel launch, and run-time compilation with an on-disk cache.
//!
//! ## Two platforms, one API
//! The vendor libraries are opened at run time, so building needs neither ROCm nor CUDA nor
//! libclang. The platform is picked once per process:
//!
//! * `amd`: `libamdhip64` and `libhiprtc` (ROCm), through hip-core's own bindgen bindings;
//! * `nvidia`: the CUDA driver API and NVRTC, through a thin adapter, so that the same safe
//!   layer, allocator and kernels run on NVIDIA GPUs too.
//!
//! `HIP_PLATFORM=amd|nvidia` forces one; otherwise AMD is tried first. A missing library is an
//! [`Error::LibraryNotFound`] that lists every path searched; nothing panics.
//!
//! ## Example
//! ```no_run
//! use hip_core::{Device, LaunchConfig};
//!
//! # fn main() -> hip_core::Result<()> {
//! let device = Device::new(0)?;
//! let stream = device.default_stream();
//! let module = device.compile(
//!     "scale",
//!     r#"#include <hip/hip_runtime.h>
//!        extern "C" __global__ void scale(float* x, float a, unsigned n) {
//!            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
//!            if (i < n) x[i] *= a;
//!        }"#,
//!     &[],
//! )?;
//! let scale = module.function("scale")?;
//! let mut x = stream.alloc_from_host(&[1.0f32, 2.0, 3.0])?;
//! let n = x.len() as u32;
//! // SAFETY: `scale` takes (float*, float, unsigned) and touches x[0..n) only.
//! unsafe {
//!     scale
//!         .builder(&stream, LaunchConfig::for_elements(n as usize, 256))
//!         .arg(&mut x)
//!         .arg(2.0f32)
//!         .arg(n)
//!         .launch()?;
//! }
//! assert_eq!(x.to_host_vec()?, vec![2.0, 4.0, 6.0]);
//! # Ok(())
//! # }
//! ```

pub mod alloc;
mod blocking;
pub mod device;
pub mod driver;
pub mod error;
pub mod event;
pub mod launch;
pub mod loader;
pub mod memory;
pub mod module;
pub mod profile;
pub mod raw;
pub mod rtc;
mod staging;
pub mod stream;
pub mod sys;

pub use alloc::AllocatorStats;
pub use blocking::{sync_count, thread_sync_count};
pub use device::{current_device, device_count, set_current_device, Device};
pub use driver::{platform, DeviceProperties, DevicePtr, FunctionAttributes, Platform};
pub use error::{Error, Result, ResultExt};
pub use event::Event;
pub use launch::{launch_count, overlapped_launches, set_overlapped_launches};
pub use launch::{KernelArg, KernelArgs, LaunchBuilder, LaunchConfig, NullPtr};
pub use memory::{
    ContentKey, DeviceBuffer, DeviceRepr, DeviceSlice, DeviceSliceMut, HostSink, HostSource,
    PendingCopy, PinnedHostBuffer,
};
pub use module::{Function, Module};
pub use profile::{
    launch_profile_start, launch_profile_start_this_thread, launch_profile_stop,
    launches_with_prefix, KernelProfile,
};
pub use stream::Stream;
