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

    /// Allocates a buffer on this stream holding a copy of `data`. Returns once the copy is
    /// done (it waits for the stream), so any stream may use the buffer at once. For small
    /// data used on this stream, [`Stream::alloc_from_host_async`] does not wait.
    pub fn alloc_from_host<T: DeviceRepr>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let mut b = DeviceBuffer::new(self, data.len())?;
        b.copy_from_host(data)?;
        Ok(b)
    }

    /// The largest upload (in bytes) that [`Stream::alloc_from_host_async`] stages without
    /// waiting; larger ones take the synchronous path of [`Stream::alloc_from_host`].
    pub const MAX_ASYNC_UPLOAD_BYTES: usize = crate::staging::MAX_STAGED_BYTES;

    /// Allocates a buffer on this stream and queues the copy of `data` into it, without waiting
    /// for the device: for small host data that kernels on this stream read next (layout info,
    /// index lists, scalars).
    ///
    /// `data` is copied into pinned host memory before the call returns, so the caller may reuse
    /// or drop it at once; the copy to the device runs in this stream's order. So:
    /// * work queued on this stream after the call sees the data;
    /// * work on another stream must first wait for this one ([`Stream::wait_for`]; copies
    ///   between buffers do that themselves), as for any other stream-ordered write.
    ///
    /// The pinned memory is a per-device ring of slots: a slot is reused once the event recorded
    /// after its copy has completed (checked with a query, never a wait), and when every slot is
    /// still busy the ring grows by another chunk instead of waiting. Above
    /// [`Stream::MAX_ASYNC_UPLOAD_BYTES`] (64 KiB) this is [`Stream::alloc_from_host`], which
    /// waits for the stream.
    pub fn alloc_from_host_async<T: DeviceRepr>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let bytes = std::mem::size_of_val(data);
        if bytes > Self::MAX_ASYNC_UPLOAD_BYTES {
            return self.alloc_from_host(data);
        }
        let buf = DeviceBuffer::new(self, data.len())?;
        if bytes == 0 {
            return Ok(buf);
        }
        let device = self.device();
        device.make_current()?;
        // SAFETY: `data` is a live host slice of `bytes` bytes, read only during the call (it is
        // copied into the ring's pinned memory). The destination is the whole of `buf`, a block
        // of this device's caching allocator allocated on this stream: it stays allocated in
        // this stream's order until after the copy, even if `buf` is dropped at once. The stream
        // is alive while `self` is, belongs to the ring's device, which was made current above,
        // and 0 < bytes <= MAX_STAGED_BYTES.
        unsafe {
            device
                .staging()
                .upload(buf.device_ptr(), data.as_ptr().cast(), bytes, self.raw())
        }?;
        Ok(buf)
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
