//! Streams: ordered queues of device work.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::alloc::StreamKey;
use crate::device::Device;
use crate::driver::RawStream;
use crate::error::{Result, ResultExt};
use crate::event::Event;
use crate::memory::{DeviceBuffer, DeviceRepr};

static NEXT_STREAM_ID: AtomicU64 = AtomicU64::new(1);

/// A non-blocking stream on one device.
///
/// Clones share the same underlying stream (reference counted); it is synchronized and destroyed
/// once, when the last clone and the last buffer allocated on it are gone. `Send + Sync`: HIP
/// streams may be used from any thread.
#[derive(Clone)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

struct StreamInner {
    device: Device,
    raw: RawStream,
    id: u64,
}

impl Stream {
    pub(crate) fn new(device: Device) -> Result<Stream> {
        device.make_current()?;
        let raw = device
            .driver()
            .stream_create()
            .context(|| format!("creating a stream on device {}", device.ordinal()))?;
        Ok(Stream {
            inner: Arc::new(StreamInner {
                device,
                raw,
                id: NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed),
            }),
        })
    }

    /// The device this stream belongs to.
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// A process-unique id (never reused, unlike the runtime's handle).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    pub(crate) fn raw(&self) -> RawStream {
        self.inner.raw
    }

    pub(crate) fn key(&self) -> StreamKey {
        StreamKey {
            id: self.inner.id,
            raw: self.inner.raw,
        }
    }

    /// The raw `hipStream_t` (or `CUstream` on NVIDIA), for interoperating with other libraries.
    /// It stays valid while this stream (or a clone) is alive.
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.inner.raw.0
    }

    /// Blocks until all work queued on this stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.device().make_current()?;
        // SAFETY: the stream is alive while `self` is.
        unsafe { self.device().driver().stream_synchronize(self.raw()) }.context(|| {
            format!(
                "synchronizing a stream of device {}",
                self.device().ordinal()
            )
        })
    }

    /// `true` when all work queued on this stream has finished.
    pub fn query(&self) -> Result<bool> {
        self.device().make_current()?;
        // SAFETY: the stream is alive while `self` is.
        unsafe { self.device().driver().stream_query(self.raw()) }
    }

    /// Makes all work queued on this stream from now on wait until `event` has completed.
    /// The event may belong to another stream, also of another device.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.device().make_current()?;
        // SAFETY: both handles are alive while `self` and `event` are.
        unsafe {
            self.device()
                .driver()
                .stream_wait_event(self.raw(), event.raw())
        }
    }

    /// Makes work queued on this stream from now on wait for the work queued on `other` so far.
    pub fn wait_for(&self, other: &Stream) -> Result<()> {
        if other.id() == self.id() {
            return Ok(());
        }
        let event = Event::new(other.device(), false)?;
        event.record(other)?;
        self.wait_event(&event)
    }

    /// Records a new event (without timing) on this stream.
    pub fn record_event(&self) -> Result<Event> {
        let event = Event::new(self.device(), false)?;
        event.record(self)?;
        Ok(event)
    }

    /// Allocates `len` elements on this stream. The contents are unspecified (whatever the
    /// memory held before; `T` is plain data, so any bytes are a valid value).
    pub fn alloc<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::new(self, len)
    }

    /// Allocates `len` zeroed elements on this stream.
    pub fn alloc_zeroed<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let mut b = DeviceBuffer::new(self, len)?;
        b.as_mut_slice().memset_async(0)?;
        Ok(b)
    }

    /// Allocates a buffer on this stream holding a copy of `data` (returns once copied).
    pub fn alloc_from_host<T: DeviceRepr>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let mut b = DeviceBuffer::new(self, data.len())?;
        b.copy_from_host(data)?;
        Ok(b)
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Self) -> bool {
        self.inner.id == other.inner.id
    }
}

impl Eq for Stream {}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.inner.device.ordinal())
            .field("id", &self.inner.id)
            .finish()
    }
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        let driver = self.device.driver();
        if self.device.make_current().is_err() {
            return;
        }
        // SAFETY: this is the last reference to the stream; we wait for its work, tell the
        // allocator its cached blocks are free of pending work, then destroy it exactly once.
        unsafe {
            let _ = driver.stream_synchronize(self.raw);
            self.device.allocator().stream_retired(self.id);
            let _ = driver.stream_destroy(self.raw);
        }
    }
}
