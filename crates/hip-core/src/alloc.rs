//! The caching device allocator.
//!
//! PLACEHOLDER INTERFACE (being replaced by the caching implementation): the public and crate
//! interface below is fixed; the body currently calls the driver for every allocation.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::driver::{DevicePtr, Driver, RawEvent, RawStream};
use crate::error::{Error, Result};

/// Identity of a stream for the allocator: a process-unique id (never reused) and its handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct StreamKey {
    /// Process-unique stream id (never reused, unlike handles).
    pub id: u64,
    /// The stream's handle, used to record events.
    pub raw: RawStream,
}

/// The runtime calls the allocator needs; implemented over a [`Driver`] and, in tests, by a fake.
pub(crate) trait AllocatorBackend: Send + Sync {
    /// Allocates device memory (the device is made current by the backend).
    fn malloc(&self, bytes: usize) -> Result<DevicePtr>;
    /// Whether `err` reports out-of-memory.
    fn is_out_of_memory(&self, err: &Error) -> bool;
    /// Frees device memory.
    ///
    /// # Safety
    /// `ptr` came from `malloc` of this backend and no queued work uses it.
    unsafe fn free(&self, ptr: DevicePtr) -> Result<()>;
    /// Waits for all work on the device.
    fn synchronize(&self) -> Result<()>;
    /// Creates an event without timing.
    fn event_create(&self) -> Result<RawEvent>;
    /// Records an event on a stream.
    ///
    /// # Safety
    /// Both handles are live.
    unsafe fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()>;
    /// Whether an event has completed.
    ///
    /// # Safety
    /// `event` is live.
    unsafe fn event_query(&self, event: RawEvent) -> Result<bool>;
    /// Destroys an event.
    ///
    /// # Safety
    /// `event` is live and unused afterwards.
    unsafe fn event_destroy(&self, event: RawEvent) -> Result<()>;
}

/// [`AllocatorBackend`] over a real driver, for one device.
pub(crate) struct DriverBackend {
    pub driver: &'static dyn Driver,
    pub ordinal: usize,
}

impl AllocatorBackend for DriverBackend {
    fn malloc(&self, bytes: usize) -> Result<DevicePtr> {
        self.driver.set_current(self.ordinal)?;
        self.driver.malloc(bytes)
    }
    fn is_out_of_memory(&self, err: &Error) -> bool {
        self.driver.is_out_of_memory(err)
    }
    unsafe fn free(&self, ptr: DevicePtr) -> Result<()> {
        self.driver.set_current(self.ordinal)?;
        // SAFETY: forwarded contract.
        unsafe { self.driver.free(ptr) }
    }
    fn synchronize(&self) -> Result<()> {
        self.driver.set_current(self.ordinal)?;
        self.driver.device_synchronize()
    }
    fn event_create(&self) -> Result<RawEvent> {
        self.driver.set_current(self.ordinal)?;
        self.driver.event_create(false)
    }
    unsafe fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.driver.event_record(event, stream) }
    }
    unsafe fn event_query(&self, event: RawEvent) -> Result<bool> {
        // SAFETY: forwarded contract.
        unsafe { self.driver.event_query(event) }
    }
    unsafe fn event_destroy(&self, event: RawEvent) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.driver.event_destroy(event) }
    }
}

/// A block handed out by the allocator. Give it back with [`CachingAllocator::free`].
#[derive(Debug)]
pub(crate) struct Allocation {
    /// Device address of the first byte (null for a zero-byte allocation).
    pub ptr: DevicePtr,
    /// Bytes requested.
    pub size: usize,
}

/// Allocator statistics, in bytes and counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AllocatorStats {
    /// Bytes in blocks handed out to live buffers (rounded block sizes).
    pub allocated_bytes: usize,
    /// Bytes obtained from the device (segments), in use or cached.
    pub reserved_bytes: usize,
    /// Highest `allocated_bytes` since creation or the last `reset_peak_stats`.
    pub peak_allocated_bytes: usize,
    /// Highest `reserved_bytes` since creation or the last `reset_peak_stats`.
    pub peak_reserved_bytes: usize,
    /// Live blocks handed out.
    pub active_blocks: usize,
    /// Segments obtained from the device and not yet released.
    pub segments: usize,
    /// Allocation requests served (including zero-byte ones).
    pub allocations: u64,
    /// Frees received.
    pub frees: u64,
    /// Requests served from the cache without a device call.
    pub cache_hits: u64,
    /// Device allocation calls (`hipMalloc`).
    pub device_mallocs: u64,
    /// Device free calls (`hipFree`).
    pub device_frees: u64,
    /// Times an out-of-memory was answered by releasing the cache and retrying.
    pub oom_retries: u64,
}

/// A per-device caching allocator.
pub struct CachingAllocator {
    device: usize,
    backend: Box<dyn AllocatorBackend>,
    allocated: AtomicUsize,
}

impl CachingAllocator {
    /// A new allocator for device `device` over `backend`.
    pub(crate) fn new(device: usize, backend: Box<dyn AllocatorBackend>) -> Self {
        CachingAllocator {
            device,
            backend,
            allocated: AtomicUsize::new(0),
        }
    }

    /// Allocates `bytes` for use on `stream`.
    pub(crate) fn allocate(&self, bytes: usize, stream: StreamKey) -> Result<Allocation> {
        let _ = stream;
        if bytes == 0 {
            return Ok(Allocation {
                ptr: DevicePtr::NULL,
                size: 0,
            });
        }
        let ptr = self.backend.malloc(bytes).map_err(|e| {
            if self.backend.is_out_of_memory(&e) {
                Error::OutOfMemory {
                    device: self.device,
                    requested: bytes,
                    reserved: 0,
                    allocated: self.allocated.load(Ordering::Relaxed),
                }
            } else {
                e
            }
        })?;
        self.allocated.fetch_add(bytes, Ordering::Relaxed);
        Ok(Allocation { ptr, size: bytes })
    }

    /// Returns a block; it becomes reusable in stream order on its allocating stream, and on
    /// other streams that used it (see [`CachingAllocator::record_stream`]) once their work is done.
    pub(crate) fn free(&self, allocation: Allocation) {
        if allocation.size == 0 {
            return;
        }
        let _ = self.backend.synchronize();
        // SAFETY: the allocation came from this backend; we synchronised, so no work uses it.
        let _ = unsafe { self.backend.free(allocation.ptr) };
        self.allocated.fetch_sub(allocation.size, Ordering::Relaxed);
    }

    /// Records that `allocation` is used by work queued on `stream` (other than its own).
    pub(crate) fn record_stream(&self, allocation: &Allocation, stream: StreamKey) {
        let _ = (allocation, stream);
    }

    /// Tells the allocator that a stream was synchronised and destroyed.
    pub(crate) fn stream_retired(&self, stream_id: u64) {
        let _ = stream_id;
    }

    /// Releases every cached, unused segment back to the device.
    pub fn empty_cache(&self) -> Result<()> {
        Ok(())
    }

    /// Current statistics.
    pub fn stats(&self) -> AllocatorStats {
        AllocatorStats {
            allocated_bytes: self.allocated.load(Ordering::Relaxed),
            ..Default::default()
        }
    }

    /// Resets the peak statistics to the current values.
    pub fn reset_peak_stats(&self) {}
}
