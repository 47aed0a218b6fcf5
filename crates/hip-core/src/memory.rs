//! Device buffers, views, pinned host memory and copies.
//!
//! * [`DeviceBuffer<T>`] owns a block from the device's caching allocator. It remembers the
//!   stream it was allocated on; dropping it hands the block back in that stream's order (work
//!   already queued on the stream still sees valid memory), without any runtime call.
//! * [`DeviceSlice`] / [`DeviceSliceMut`] are borrowed views with an element offset.
//! * Synchronous copies run on the buffer's stream and return when done. Asynchronous copies take
//!   the host memory by value and give it back through a [`PendingCopy`], so the host memory
//!   cannot be freed or touched while the copy may still run.
//! * Work on one buffer from several streams is ordered with events, and the allocator is told
//!   about the other streams so that the block is not reused before their work is done.

use std::marker::PhantomData;
use std::mem::size_of;
use std::ops::{Bound, Deref, DerefMut, RangeBounds};

use crate::alloc::Allocation;
use crate::device::Device;
use crate::driver::DevicePtr;
use crate::error::{Error, Result, ResultExt};
use crate::event::Event;
use crate::stream::Stream;

/// Plain data that can live in device memory: `Copy`, no padding-sensitive invariants, and
/// every bit pattern is a valid value (so reading uninitialised or device-written bytes is sound).
///
/// # Safety
/// Implement only for types for which every bit pattern of `size_of::<Self>()` bytes is a valid
/// value and which contain no pointers or references.
pub unsafe trait DeviceRepr: Copy + Send + Sync + 'static {}

macro_rules! device_repr {
    ($($t:ty),*) => {$(
        // SAFETY: a primitive number type: every bit pattern is a valid value.
        unsafe impl DeviceRepr for $t {}
    )*};
}
device_repr!(
    u8,
    i8,
    u16,
    i16,
    u32,
    i32,
    u64,
    i64,
    usize,
    isize,
    f32,
    f64,
    half::f16,
    half::bf16
);

fn byte_len<T>(op: &'static str, len: usize) -> Result<usize> {
    len.checked_mul(size_of::<T>())
        .ok_or_else(|| Error::invalid(op, format!("{len} elements overflow the address space")))
}

fn resolve_range(
    op: &'static str,
    range: impl RangeBounds<usize>,
    len: usize,
) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start > end || end > len {
        return Err(Error::invalid(
            op,
            format!("range {start}..{end} is out of bounds for {len} elements"),
        ));
    }
    Ok((start, end - start))
}

fn check_same_len(op: &'static str, dst: usize, src: usize) -> Result<()> {
    if dst != src {
        return Err(Error::invalid(
            op,
            format!("destination holds {dst} elements but the source {src}"),
        ));
    }
    Ok(())
}

/// Ids of buffers: unique in the process, never reused.
static NEXT_BUFFER_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// What identifies a buffer's contents as hip-core can see them: the buffer (a process-unique
/// id, never reused, unlike its address) and how many mutable views of it have been taken. Two
/// equal keys mean the same buffer with no write through hip-core in between (writes through a
/// raw [`DevicePtr`] are invisible to it), so a result computed from the contents may be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContentKey {
    /// The buffer's id.
    pub buffer: u64,
    /// Mutable views taken of it so far.
    pub writes: u64,
}

/// A typed, owned allocation of device memory.
pub struct DeviceBuffer<T: DeviceRepr> {
    allocation: Option<Allocation>,
    len: usize,
    stream: Stream,
    id: u64,
    writes: u64,
    _marker: PhantomData<T>,
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Allocates `len` elements on `stream` (contents unspecified).
    pub fn new(stream: &Stream, len: usize) -> Result<Self> {
        let bytes = byte_len::<T>("DeviceBuffer::new", len)?;
        let allocation = stream.device().allocator().allocate(bytes, stream.key())?;
        Ok(DeviceBuffer {
            allocation: Some(allocation),
            len,
            stream: stream.clone(),
            id: NEXT_BUFFER_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            writes: 0,
            _marker: PhantomData,
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// The device the memory lives on.
    pub fn device(&self) -> Device {
        self.stream.device()
    }

    /// The stream the buffer was allocated on (the stream its own copies run on).
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Device address of the first element (null for an empty buffer).
    pub fn device_ptr(&self) -> DevicePtr {
        self.allocation
            .as_ref()
            .map(|a| a.ptr)
            .unwrap_or(DevicePtr::NULL)
    }

    /// A view of the whole buffer.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice {
            buf: self,
            offset: 0,
            len: self.len,
        }
    }

    /// The [`ContentKey`] of the buffer's current contents.
    pub fn content_key(&self) -> ContentKey {
        ContentKey {
            buffer: self.id,
            writes: self.writes,
        }
    }

    /// A mutable view of the whole buffer.
    pub fn as_mut_slice(&mut self) -> DeviceSliceMut<'_, T> {
        self.writes += 1;
        let len = self.len;
        DeviceSliceMut {
            buf: self,
            offset: 0,
            len,
        }
    }

    /// A view of `range` (in elements).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'_, T>> {
        self.as_slice().slice(range)
    }

    /// A mutable view of `range` (in elements).
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceSliceMut<'_, T>> {
        let (offset, len) = resolve_range("DeviceBuffer::slice_mut", range, self.len)?;
        self.writes += 1;
        Ok(DeviceSliceMut {
            buf: self,
            offset,
            len,
        })
    }

    /// Copies the buffer to a new host vector (waits for the buffer's stream).
    pub fn to_host_vec(&self) -> Result<Vec<T>> {
        self.as_slice().to_host_vec()
    }

    /// Copies `src` into the buffer (same length); returns when done.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        self.as_mut_slice().copy_from_host(src)
    }

    /// Copies the buffer into `dst` (same length); returns when done.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.as_slice().copy_to_host(dst)
    }

    /// A new buffer on `stream` (any device) holding a copy of this one, queued on `stream`.
    pub fn copy_to(&self, stream: &Stream) -> Result<DeviceBuffer<T>> {
        let mut out = DeviceBuffer::new(stream, self.len)?;
        out.as_mut_slice().copy_from_device(&self.as_slice())?;
        Ok(out)
    }

    /// A new buffer on the same stream holding a copy of this one.
    pub fn try_clone(&self) -> Result<DeviceBuffer<T>> {
        self.copy_to(&self.stream)
    }

    /// Tells the allocator that work queued on `stream` uses this buffer, so that after the buffer
    /// is dropped its memory is not reused before that work has finished. Kernel launches and
    /// copies through hip-core do this themselves.
    pub fn record_stream(&self, stream: &Stream) {
        if stream.id() != self.stream.id() {
            if let Some(a) = &self.allocation {
                self.device().allocator().record_stream(a, stream.key());
            }
        }
    }
}

impl<T: DeviceRepr> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if let Some(a) = self.allocation.take() {
            self.stream.device().allocator().free(a);
        }
    }
}

impl<T: DeviceRepr> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("type", &std::any::type_name::<T>())
            .field("len", &self.len)
            .field("device", &self.device().ordinal())
            .field("ptr", &self.device_ptr())
            .finish()
    }
}

/// A borrowed view of part of a [`DeviceBuffer`].
#[derive(Clone, Copy)]
pub struct DeviceSlice<'a, T: DeviceRepr> {
    buf: &'a DeviceBuffer<T>,
    offset: usize,
    len: usize,
}

/// A mutable borrowed view of part of a [`DeviceBuffer`].
pub struct DeviceSliceMut<'a, T: DeviceRepr> {
    buf: &'a mut DeviceBuffer<T>,
    offset: usize,
    len: usize,
}

impl<'a, T: DeviceRepr> DeviceSlice<'a, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when the view holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the view's first element in its buffer, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The buffer this view borrows.
    pub fn buffer(&self) -> &'a DeviceBuffer<T> {
        self.buf
    }

    /// Device address of the view's first element.
    pub fn device_ptr(&self) -> DevicePtr {
        self.buf
            .device_ptr()
            .byte_offset(self.offset * size_of::<T>())
    }

    /// A sub-view of `range`, relative to this view.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'a, T>> {
        let (offset, len) = resolve_range("DeviceSlice::slice", range, self.len)?;
        Ok(DeviceSlice {
            buf: self.buf,
            offset: self.offset + offset,
            len,
        })
    }

    /// Copies the view into `dst` (same length) on the buffer's stream and waits.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        check_same_len("DeviceSlice::copy_to_host", dst.len(), self.len)?;
        // SAFETY: `dst` is a writable host slice of exactly `len` elements.
        unsafe { self.copy_to_host_raw(dst.as_mut_ptr()) }
    }

    /// Copies the view into a new host vector.
    pub fn to_host_vec(&self) -> Result<Vec<T>> {
        let mut v: Vec<T> = Vec::with_capacity(self.len);
        // SAFETY: `v` has capacity for `len` elements.
        unsafe { self.copy_to_host_raw(v.as_mut_ptr())? };
        // SAFETY: the synchronized copy initialised all `len` elements, and `T: DeviceRepr`
        // accepts any bit pattern.
        unsafe { v.set_len(self.len) };
        Ok(v)
    }

    /// Copies the view to `dst` on the buffer's stream and waits for the stream.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` elements.
    unsafe fn copy_to_host_raw(&self, dst: *mut T) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let stream = &self.buf.stream;
        let device = stream.device();
        device.make_current()?;
        let bytes = self.len * size_of::<T>();
        // SAFETY: the source range lies inside the live allocation; the caller guarantees `dst`
        // takes `bytes`, and we wait for the stream before returning.
        unsafe {
            device
                .driver()
                .memcpy_dtoh_async(dst.cast(), self.device_ptr(), bytes, stream.raw())
        }
        .context(|| format!("copying {bytes} bytes from device {}", device.ordinal()))?;
        stream.synchronize()
    }

    fn note_use_on(&self, stream: &Stream) {
        self.buf.record_stream(stream);
    }
}

impl<'a, T: DeviceRepr> DeviceSliceMut<'a, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when the view holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the view's first element in its buffer, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Device address of the view's first element.
    pub fn device_ptr(&self) -> DevicePtr {
        self.buf
            .device_ptr()
            .byte_offset(self.offset * size_of::<T>())
    }

    /// The stream of the buffer this view borrows.
    pub fn stream(&self) -> &Stream {
        &self.buf.stream
    }

    /// A read-only view of the same range.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice {
            buf: self.buf,
            offset: self.offset,
            len: self.len,
        }
    }

    /// A mutable sub-view of `range`, relative to this view.
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceSliceMut<'_, T>> {
        let (offset, len) = resolve_range("DeviceSliceMut::slice_mut", range, self.len)?;
        Ok(DeviceSliceMut {
            offset: self.offset + offset,
            len,
            buf: self.buf,
        })
    }

    /// Copies `src` (same length) into the view on the buffer's stream and waits.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        check_same_len("DeviceSliceMut::copy_from_host", self.len, src.len())?;
        if self.len == 0 {
            return Ok(());
        }
        let stream = self.buf.stream.clone();
        let device = stream.device();
        device.make_current()?;
        let bytes = self.len * size_of::<T>();
        // SAFETY: the destination range lies inside the live allocation; `src` is a host slice of
        // the same byte length, borrowed until the stream is synchronized below.
        unsafe {
            device.driver().memcpy_htod_async(
                self.device_ptr(),
                src.as_ptr().cast(),
                bytes,
                stream.raw(),
            )
        }
        .context(|| format!("copying {bytes} bytes to device {}", device.ordinal()))?;
        stream.synchronize()
    }

    /// Copies `src` (same length, any device) into the view. The copy is queued on this
    /// buffer's stream after the work already queued on `src`'s stream; it does not block the host.
    pub fn copy_from_device(&mut self, src: &DeviceSlice<'_, T>) -> Result<()> {
        check_same_len("DeviceSliceMut::copy_from_device", self.len, src.len())?;
        if self.len == 0 {
            return Ok(());
        }
        let stream = self.buf.stream.clone();
        let src_stream = &src.buf.stream;
        let device = stream.device();
        stream.wait_for(src_stream)?;
        src.note_use_on(&stream);
        device.make_current()?;
        let bytes = self.len * size_of::<T>();
        let src_device = src_stream.device();
        if src_device == device {
            // SAFETY: both ranges lie inside live allocations of this device, which stay valid
            // until the copy is done (stream order for ours, record_stream for the source).
            unsafe {
                device.driver().memcpy_dtod_async(
                    self.device_ptr(),
                    src.device_ptr(),
                    bytes,
                    stream.raw(),
                )
            }
            .context(|| format!("copying {bytes} bytes on device {}", device.ordinal()))
        } else {
            // SAFETY: as above, with the source on `src_device`.
            unsafe {
                device.driver().memcpy_peer_async(
                    self.device_ptr(),
                    device.ordinal(),
                    src.device_ptr(),
                    src_device.ordinal(),
                    bytes,
                    stream.raw(),
                )
            }
            .context(|| {
                format!(
                    "copying {bytes} bytes from device {} to device {}",
                    src_device.ordinal(),
                    device.ordinal()
                )
            })
        }
    }

    /// Sets every byte of the view to `value`, queued on the buffer's stream.
    pub fn memset_async(&mut self, value: u8) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let stream = &self.buf.stream;
        let device = stream.device();
        device.make_current()?;
        let bytes = self.len * size_of::<T>();
        // SAFETY: the range lies inside the live allocation.
        unsafe {
            device
                .driver()
                .memset_async(self.device_ptr(), value, bytes, stream.raw())
        }
        .context(|| format!("filling {bytes} bytes on device {}", device.ordinal()))
    }

    fn note_use_on(&self, stream: &Stream) {
        self.buf.record_stream(stream);
    }
}

/// Page-locked (pinned) host memory: faster copies, and truly asynchronous ones.
/// Zero-initialised; dereferences to `[T]`.
pub struct PinnedHostBuffer<T: DeviceRepr> {
    ptr: *mut T,
    len: usize,
    device: Device,
}

// SAFETY: the buffer owns its memory exclusively, like a `Box<[T]>` of `Send + Sync` data.
unsafe impl<T: DeviceRepr> Send for PinnedHostBuffer<T> {}
// SAFETY: shared access only hands out `&[T]`.
unsafe impl<T: DeviceRepr> Sync for PinnedHostBuffer<T> {}

impl<T: DeviceRepr> PinnedHostBuffer<T> {
    /// `len` zeroed elements of pinned memory, registered with `device`'s runtime.
    pub fn new(device: Device, len: usize) -> Result<Self> {
        let bytes = byte_len::<T>("PinnedHostBuffer::new", len)?;
        if bytes == 0 {
            return Ok(PinnedHostBuffer {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len,
                device,
            });
        }
        device.make_current()?;
        let ptr = device
            .driver()
            .host_alloc(bytes)
            .context(|| format!("allocating {bytes} bytes of pinned host memory"))?
            .cast::<T>();
        // SAFETY: `ptr` points to `bytes` freshly allocated, writable host bytes.
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, bytes) };
        Ok(PinnedHostBuffer { ptr, len, device })
    }

    /// Pinned memory holding a copy of `data`.
    pub fn from_slice(device: Device, data: &[T]) -> Result<Self> {
        let mut b = Self::new(device, data.len())?;
        b.copy_from_slice(data);
        Ok(b)
    }
}

impl<T: DeviceRepr> Deref for PinnedHostBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` is valid for `len` initialised elements (zeroed at allocation), or
        // dangling-but-aligned with `len == 0`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: DeviceRepr> DerefMut for PinnedHostBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T: DeviceRepr> Drop for PinnedHostBuffer<T> {
    fn drop(&mut self) {
        if self.len == 0 || size_of::<T>() == 0 {
            return;
        }
        if self.device.make_current().is_ok() {
            // SAFETY: `ptr` came from `host_alloc`; owners of pending copies hold the buffer by
            // value inside a `PendingCopy`, so no queued copy can still use it here.
            let _ = unsafe { self.device.driver().host_free(self.ptr.cast()) };
        }
    }
}

/// Host memory an asynchronous copy can read from while it owns it.
pub trait HostSource<T>: Send + 'static {
    /// The elements to copy.
    fn host_slice(&self) -> &[T];
}

/// Host memory an asynchronous copy can write into while it owns it.
pub trait HostSink<T>: Send + 'static {
    /// Where to copy to.
    fn host_slice_mut(&mut self) -> &mut [T];
}

impl<T: DeviceRepr> HostSource<T> for Vec<T> {
    fn host_slice(&self) -> &[T] {
        self
    }
}
impl<T: DeviceRepr> HostSource<T> for Box<[T]> {
    fn host_slice(&self) -> &[T] {
        self
    }
}
impl<T: DeviceRepr> HostSource<T> for std::sync::Arc<[T]> {
    fn host_slice(&self) -> &[T] {
        self
    }
}
impl<T: DeviceRepr> HostSource<T> for PinnedHostBuffer<T> {
    fn host_slice(&self) -> &[T] {
        self
    }
}
impl<T: DeviceRepr> HostSink<T> for Vec<T> {
    fn host_slice_mut(&mut self) -> &mut [T] {
        self
    }
}
impl<T: DeviceRepr> HostSink<T> for Box<[T]> {
    fn host_slice_mut(&mut self) -> &mut [T] {
        self
    }
}
impl<T: DeviceRepr> HostSink<T> for PinnedHostBuffer<T> {
    fn host_slice_mut(&mut self) -> &mut [T] {
        self
    }
}

/// An asynchronous copy in flight. It owns the host memory until the copy has finished:
/// [`PendingCopy::wait`] hands it back; dropping the `PendingCopy` waits first.
#[must_use = "dropping a PendingCopy blocks until the copy has finished"]
pub struct PendingCopy<H: Send + 'static> {
    host: Option<H>,
    event: Option<Event>,
}

impl<H: Send + 'static> PendingCopy<H> {
    /// `true` when the copy has finished.
    pub fn is_complete(&self) -> Result<bool> {
        match &self.event {
            Some(e) => e.query(),
            None => Ok(true),
        }
    }

    /// Waits for the copy and returns the host memory.
    pub fn wait(mut self) -> Result<H> {
        if let Some(e) = &self.event {
            e.synchronize()?;
        }
        self.event = None;
        Ok(self
            .host
            .take()
            .expect("PendingCopy holds its host memory until waited"))
    }
}

impl<H: Send + 'static> Drop for PendingCopy<H> {
    fn drop(&mut self) {
        if let (Some(host), Some(event)) = (self.host.take(), self.event.take()) {
            if event.synchronize().is_err() {
                // The runtime could not confirm the copy finished: leak the host memory rather
                // than free memory a DMA engine might still touch.
                std::mem::forget(host);
            }
        }
    }
}

impl Stream {
    /// Queues a copy of `src` into `dst` (same length) on this stream, after the work already
    /// queued on `dst`'s own stream. `src` is owned by the returned [`PendingCopy`] until the copy
    /// has finished. With [`PinnedHostBuffer`] memory the copy overlaps with host work; from
    /// pageable memory (`Vec`, `Box<[T]>`, `Arc<[T]>`) the runtime may perform it synchronously
    /// with respect to the host (not counted by [`crate::sync_count`]). Small uploads that must
    /// not wait: [`Stream::alloc_from_host_async`].
    pub fn copy_to_device_async<T: DeviceRepr, H: HostSource<T>>(
        &self,
        src: H,
        dst: &mut DeviceSliceMut<'_, T>,
    ) -> Result<PendingCopy<H>> {
        let n = src.host_slice().len();
        let bytes = std::mem::size_of_val(src.host_slice());
        check_same_len("Stream::copy_to_device_async", dst.len(), n)?;
        self.check_device("Stream::copy_to_device_async", dst.stream().device())?;
        self.wait_for(dst.stream())?;
        dst.note_use_on(self);
        if bytes > 0 {
            self.device().make_current()?;
            // SAFETY: the destination lies in a live allocation recorded for this stream; the
            // source memory is owned by the PendingCopy until the event below has completed.
            unsafe {
                self.device().driver().memcpy_htod_async(
                    dst.device_ptr(),
                    src.host_slice().as_ptr().cast(),
                    bytes,
                    self.raw(),
                )
            }
            .context(|| format!("queueing a {bytes}-byte copy to the device"))?;
        }
        Ok(PendingCopy {
            host: Some(src),
            event: Some(self.record_event()?),
        })
    }

    /// Queues a copy of `src` into `dst` (same length) on this stream, after the work already
    /// queued on `src`'s stream. `dst` comes back from [`PendingCopy::wait`] holding the data.
    /// Into pageable memory (`Vec`, `Box<[T]>`) the runtime may perform the copy synchronously
    /// with respect to the host; use a [`PinnedHostBuffer`] to overlap it with host work.
    pub fn copy_to_host_async<T: DeviceRepr, H: HostSink<T>>(
        &self,
        src: &DeviceSlice<'_, T>,
        mut dst: H,
    ) -> Result<PendingCopy<H>> {
        let n = dst.host_slice_mut().len();
        let bytes = std::mem::size_of_val(dst.host_slice_mut());
        check_same_len("Stream::copy_to_host_async", n, src.len())?;
        self.check_device("Stream::copy_to_host_async", src.buf.device())?;
        self.wait_for(&src.buf.stream)?;
        src.note_use_on(self);
        if bytes > 0 {
            self.device().make_current()?;
            // SAFETY: the source lies in a live allocation recorded for this stream; the host
            // memory is owned by the PendingCopy until the event below has completed.
            unsafe {
                self.device().driver().memcpy_dtoh_async(
                    dst.host_slice_mut().as_mut_ptr().cast(),
                    src.device_ptr(),
                    bytes,
                    self.raw(),
                )
            }
            .context(|| format!("queueing a {bytes}-byte copy to the host"))?;
        }
        Ok(PendingCopy {
            host: Some(dst),
            event: Some(self.record_event()?),
        })
    }

    fn check_device(&self, op: &'static str, other: Device) -> Result<()> {
        if other != self.device() {
            return Err(Error::invalid(
                op,
                format!(
                    "the buffer is on device {} but the stream on device {}",
                    other.ordinal(),
                    self.device().ordinal()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_and_reject_out_of_bounds() {
        assert_eq!(resolve_range("t", .., 10).unwrap(), (0, 10));
        assert_eq!(resolve_range("t", 2..5, 10).unwrap(), (2, 3));
        assert_eq!(resolve_range("t", 2..=5, 10).unwrap(), (2, 4));
        assert_eq!(resolve_range("t", 10.., 10).unwrap(), (10, 0));
        let e = resolve_range("t", 3..11, 10).unwrap_err().to_string();
        assert!(e.contains("3..11") && e.contains("10 elements"), "{e}");
        #[allow(clippy::reversed_empty_ranges)]
        let r = resolve_range("t", 5..3, 10);
        assert!(r.is_err());
    }

    #[test]
    fn byte_length_overflow_is_an_error() {
        assert!(byte_len::<u64>("t", usize::MAX / 4).is_err());
        assert_eq!(byte_len::<u32>("t", 3).unwrap(), 12);
    }
}
