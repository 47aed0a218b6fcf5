//! Devices: enumeration, properties, the current device, synchronization.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::alloc::{AllocatorStats, CachingAllocator, DriverBackend};
use crate::driver::{driver, DeviceProperties, Driver, Platform};
use crate::error::{Error, Result, ResultExt};
use crate::module::Module;
use crate::staging::StagingRing;
use crate::stream::Stream;

thread_local! {
    static CURRENT_DEVICE: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Number of GPUs visible to the selected platform (0 when the runtime loads but sees none).
pub fn device_count() -> Result<usize> {
    driver()?.device_count()
}

/// Makes device `ordinal` current on the calling thread (as `hipSetDevice` does).
pub fn set_current_device(ordinal: usize) -> Result<()> {
    Device::new(ordinal)?.make_current()
}

/// The calling thread's current device: the last one set on this thread, else 0.
pub fn current_device() -> usize {
    CURRENT_DEVICE.with(|c| c.get()).unwrap_or(0)
}

/// A GPU. Cheap to copy; one per ordinal per process, alive for the whole process.
///
/// A device owns its caching allocator, a default (non-blocking) stream and the ring of pinned
/// host memory that small uploads go through ([`Stream::alloc_from_host_async`]).
#[derive(Clone, Copy)]
pub struct Device {
    inner: &'static DeviceInner,
}

pub(crate) struct DeviceInner {
    ordinal: usize,
    properties: DeviceProperties,
    driver: &'static dyn Driver,
    allocator: CachingAllocator,
    staging: StagingRing,
    default_stream: OnceLock<Stream>,
}

static DEVICES: OnceLock<Mutex<HashMap<usize, &'static DeviceInner>>> = OnceLock::new();

impl Device {
    /// The device with this ordinal. Fails with [`Error::NoDevice`] when the runtime sees no GPU
    /// and [`Error::InvalidDevice`] when `ordinal` is out of range.
    pub fn new(ordinal: usize) -> Result<Device> {
        let devices = DEVICES.get_or_init(|| Mutex::new(HashMap::new()));
        let mut map = devices.lock();
        if let Some(inner) = map.get(&ordinal) {
            return Ok(Device { inner });
        }
        let driver = driver()?;
        let count = driver.device_count()?;
        if count == 0 {
            return Err(Error::NoDevice {
                detail: format!(
                    "the {} runtime loaded but reports no GPU (set HIP_PLATFORM to choose the other platform)",
                    driver.platform()
                ),
            });
        }
        if ordinal >= count {
            return Err(Error::InvalidDevice { ordinal, count });
        }
        let properties = driver
            .device_properties(ordinal)
            .context(|| format!("reading the properties of device {ordinal}"))?;
        let inner: &'static DeviceInner = Box::leak(Box::new(DeviceInner {
            ordinal,
            properties,
            driver,
            allocator: CachingAllocator::new(ordinal, Box::new(DriverBackend { driver, ordinal })),
            staging: StagingRing::new(driver, ordinal),
            default_stream: OnceLock::new(),
        }));
        let device = Device { inner };
        let stream = Stream::new(device)
            .context(|| format!("creating the default stream of device {ordinal}"))?;
        // The cell is new and unshared: setting it cannot fail.
        let _ = inner.default_stream.set(stream);
        map.insert(ordinal, inner);
        Ok(device)
    }

    /// Every visible device.
    pub fn all() -> Result<Vec<Device>> {
        (0..device_count()?).map(Device::new).collect()
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// The platform driving this device.
    pub fn platform(&self) -> Platform {
        self.inner.driver.platform()
    }

    /// Whether kernels launched on this device with
    /// [`LaunchBuilder::overlap_previous`](crate::LaunchBuilder::overlap_previous) can start
    /// before the previous kernel ends: NVIDIA devices of compute capability 9.0 and later
    /// (programmatic dependent launch). HIP offers no such launch on AMD devices.
    pub fn can_overlap_launches(&self) -> bool {
        self.platform() == Platform::Nvidia && self.inner.properties.compute_capability.0 >= 9
    }

    /// The device's properties.
    pub fn properties(&self) -> &DeviceProperties {
        &self.inner.properties
    }

    /// The architecture to compile for: `gcnArchName` on AMD (with target features), `sm_XY` on NVIDIA.
    pub fn arch(&self) -> &str {
        &self.inner.properties.arch_name
    }

    /// Makes this device current on the calling thread.
    pub fn make_current(&self) -> Result<()> {
        self.inner.driver.set_current(self.inner.ordinal)?;
        CURRENT_DEVICE.with(|c| c.set(Some(self.inner.ordinal)));
        Ok(())
    }

    /// Blocks until all work queued on this device has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.make_current()?;
        self.inner
            .driver
            .device_synchronize()
            .context(|| format!("synchronizing device {}", self.ordinal()))
    }

    /// `(free, total)` device memory in bytes, as the runtime reports it.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.make_current()?;
        self.inner.driver.mem_get_info()
    }

    /// Whether this device can read and write `peer`'s memory directly.
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool> {
        if peer.ordinal() == self.ordinal() {
            return Ok(true);
        }
        self.inner
            .driver
            .can_access_peer(self.ordinal(), peer.ordinal())
    }

    /// The device's default stream: a non-blocking stream created with the device.
    pub fn default_stream(&self) -> Stream {
        match self.inner.default_stream.get() {
            Some(s) => s.clone(),
            None => {
                unreachable!("Device::new sets the default stream before handing out the device")
            }
        }
    }

    /// A new non-blocking stream on this device.
    pub fn create_stream(&self) -> Result<Stream> {
        Stream::new(*self)
    }

    /// The device's caching allocator.
    pub fn allocator(&self) -> &CachingAllocator {
        &self.inner.allocator
    }

    /// The caching allocator's statistics.
    pub fn memory_stats(&self) -> AllocatorStats {
        self.inner.allocator.stats()
    }

    /// Releases the allocator's cached, unused memory back to the device.
    pub fn empty_cache(&self) -> Result<()> {
        self.inner.allocator.empty_cache()
    }

    /// Loads a code object (AMD) or cubin/PTX (NVIDIA) image.
    pub fn load_module(&self, image: &[u8]) -> Result<Module> {
        Module::load(*self, image)
    }

    /// Compiles `source` for this device with run-time compilation (hipRTC / NVRTC), through the
    /// on-disk cache, and loads it. `program` names it in errors.
    pub fn compile(&self, program: &str, source: &str, options: &[String]) -> Result<Module> {
        let image = crate::rtc::compile(program, source, self.arch(), options)?;
        self.load_module(&image.image)
    }

    pub(crate) fn driver(&self) -> &'static dyn Driver {
        self.inner.driver
    }

    /// The ring of pinned memory behind [`Stream::alloc_from_host_async`].
    pub(crate) fn staging(&self) -> &StagingRing {
        &self.inner.staging
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        self.inner.ordinal == other.inner.ordinal
    }
}

impl Eq for Device {}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("ordinal", &self.inner.ordinal)
            .field("name", &self.inner.properties.name)
            .field("arch", &self.inner.properties.arch_name)
            .finish()
    }
}
