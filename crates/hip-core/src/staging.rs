//! Small host-to-device uploads that never wait for the device: a per-device ring of pinned
//! host memory (see [`crate::Stream::alloc_from_host_async`]).
//!
//! # How an upload works
//! 1. Under the ring's lock, a *slot* (a span of one chunk of pinned memory, rounded up to
//!    [`SLOT_ALIGN`] bytes) is reserved: one that no queued copy still reads.
//! 2. The caller's bytes are copied into the slot with a plain host `memcpy`, so the caller's
//!    memory is free again when the upload returns.
//! 3. An asynchronous copy from the slot to the destination is queued on the stream, and an
//!    event is recorded on the stream right after it. The slot stays *busy* until that event
//!    has completed, i.e. until the copy has read it.
//!
//! # Reuse and growth
//! Each chunk is a ring: slots are handed out in order, and busy slots are retired from the
//! oldest on, when their event has completed (`hipEventQuery` / `cuEventQuery`: a query, never a
//! wait). Retiring is lazy: it only happens when the chunk the last slot came from has no room
//! left, so the common upload makes no query at all. When no chunk has room even after
//! retiring, the ring grows by another chunk of [`CHUNK_BYTES`] (pinned memory from the
//! runtime) instead of waiting. Growth is bounded by how far the host runs ahead of the device
//! (the runtimes bound their queues). Chunks are kept for the life of the device: freeing pinned
//! memory synchronises the device.
//!
//! Retiring goes oldest first even when slots of several streams are interleaved: a slot whose
//! copy is done but sits behind one that is not waits for it (or the ring grows). That only
//! delays reuse, never makes it early.
//!
//! The bookkeeping ([`RingState`]) knows nothing of the runtime: it deals in offsets and opaque
//! events, so that it is tested over fake events (see the tests at the end of this file).

use std::collections::VecDeque;

use parking_lot::Mutex;

use crate::driver::{DevicePtr, Driver, RawEvent, RawStream};
use crate::error::{Error, Result, ResultExt};

/// The largest upload that goes through the ring; larger ones take the synchronous path.
pub(crate) const MAX_STAGED_BYTES: usize = 64 << 10;
/// Size of one chunk of pinned memory.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;
/// Slots start at multiples of this many bytes (a cache line).
pub(crate) const SLOT_ALIGN: usize = 64;

// Every staged upload fits in a chunk of the default size.
const _: () = assert!(MAX_STAGED_BYTES <= CHUNK_BYTES);

/// A reserved span: `len` bytes at `offset` in chunk `chunk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    /// Index of the chunk.
    pub chunk: usize,
    /// Offset of the slot's first byte in the chunk.
    pub offset: usize,
    /// Length of the slot (the request rounded up to [`SLOT_ALIGN`]).
    pub len: usize,
}

/// A slot whose copy may still be reading it.
#[derive(Debug)]
struct Busy<E> {
    start: usize,
    end: usize,
    /// Completes when the copy has read the slot. `None`: unknown (the event could not be
    /// recorded nor the stream synchronised), so the slot is never reused.
    event: Option<E>,
}

/// One chunk of pinned memory used as a ring.
#[derive(Debug)]
struct Chunk<E> {
    /// Host address of the first byte (an integer, so that the bookkeeping holds no pointer).
    base: usize,
    size: usize,
    /// Busy slots, oldest first. Non-empty, with `tail` the start of the oldest and `head` the
    /// end of the newest (where the next slot goes if it fits), they occupy `[tail, head)` when
    /// that range does not wrap (`head > tail`), else `[tail, size) ∪ [0, head)`.
    busy: VecDeque<Busy<E>>,
}

impl<E> Chunk<E> {
    /// Where a slot of `len` bytes fits without overlapping a busy one.
    fn fit(&self, len: usize) -> Option<usize> {
        let (Some(oldest), Some(newest)) = (self.busy.front(), self.busy.back()) else {
            return (len <= self.size).then_some(0);
        };
        let (tail, head) = (oldest.start, newest.end);
        if head > tail {
            // Busy: [tail, head). Free: [head, size), then [0, tail) after wrapping.
            if len <= self.size - head {
                Some(head)
            } else if len <= tail {
                Some(0)
            } else {
                None
            }
        } else {
            // Wrapped. Busy: [tail, size) and [0, head). Free: [head, tail).
            (len <= tail - head).then_some(head)
        }
    }

    /// Retires busy slots from the oldest on while their event has completed.
    fn retire(&mut self, done: &mut dyn FnMut(&E) -> bool, free_events: &mut Vec<E>) {
        while let Some(front) = self.busy.front() {
            match &front.event {
                Some(event) if done(event) => {}
                _ => break,
            }
            if let Some(Busy {
                event: Some(event), ..
            }) = self.busy.pop_front()
            {
                free_events.push(event);
            }
        }
    }
}

/// The ring's bookkeeping: chunks, busy slots and a pool of reusable events. `E` is the event
/// handle type (`RawEvent` for real, a number in the tests).
#[derive(Debug)]
pub(crate) struct RingState<E> {
    chunks: Vec<Chunk<E>>,
    /// The chunk the last slot came from, tried first.
    current: usize,
    /// Events whose slots were retired: completed, ready to be recorded again.
    free_events: Vec<E>,
}

impl<E> Default for RingState<E> {
    fn default() -> Self {
        RingState {
            chunks: Vec::new(),
            current: 0,
            free_events: Vec::new(),
        }
    }
}

/// `bytes` rounded up to [`SLOT_ALIGN`] (`None` on overflow).
fn slot_len(bytes: usize) -> Option<usize> {
    bytes.checked_next_multiple_of(SLOT_ALIGN)
}

/// The size of a new chunk that must hold a slot of `bytes`.
pub(crate) fn chunk_size_for(bytes: usize) -> Option<usize> {
    slot_len(bytes).map(|len| len.max(CHUNK_BYTES))
}

impl<E> RingState<E> {
    /// Reserves a slot of `bytes` (> 0) that overlaps no busy slot, or `None` when no chunk has
    /// room (add one with [`RingState::add_chunk`]). `done` says whether an event has
    /// completed; it is only asked when the current chunk has no room. The slot is not busy
    /// until [`RingState::commit`]: hold the state's lock from here to there.
    pub(crate) fn reserve(
        &mut self,
        bytes: usize,
        done: &mut dyn FnMut(&E) -> bool,
    ) -> Option<Slot> {
        let len = slot_len(bytes.max(1))?;
        let slot = |chunk, offset| Slot { chunk, offset, len };
        if let Some(offset) = self.chunks.get(self.current).and_then(|c| c.fit(len)) {
            return Some(slot(self.current, offset));
        }
        let n = self.chunks.len();
        for k in 0..n {
            let i = (self.current + k) % n;
            let chunk = &mut self.chunks[i];
            chunk.retire(done, &mut self.free_events);
            if let Some(offset) = chunk.fit(len) {
                self.current = i;
                return Some(slot(i, offset));
            }
        }
        None
    }

    /// Adds a chunk of `size` bytes at host address `base`; it becomes the current chunk.
    pub(crate) fn add_chunk(&mut self, base: usize, size: usize) -> usize {
        self.chunks.push(Chunk {
            base,
            size,
            busy: VecDeque::new(),
        });
        self.current = self.chunks.len() - 1;
        self.current
    }

    /// Host address of the first byte of `slot`.
    pub(crate) fn address(&self, slot: Slot) -> Option<usize> {
        self.chunks.get(slot.chunk).map(|c| c.base + slot.offset)
    }

    /// Marks `slot` (just reserved) busy until `event` completes; `None`: forever.
    pub(crate) fn commit(&mut self, slot: Slot, event: Option<E>) {
        if let Some(chunk) = self.chunks.get_mut(slot.chunk) {
            chunk.busy.push_back(Busy {
                start: slot.offset,
                end: slot.offset + slot.len,
                event,
            });
        }
    }

    /// A completed event to record again, if one is pooled.
    pub(crate) fn take_event(&mut self) -> Option<E> {
        self.free_events.pop()
    }

    /// Returns an event that was taken but not used (it was not recorded since it completed).
    pub(crate) fn put_event(&mut self, event: E) {
        self.free_events.push(event);
    }

    /// Number of chunks.
    pub(crate) fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// Removes everything: each chunk's base and the events of its busy slots (`None` for a
    /// slot that is never to be reused), then the pooled events.
    #[allow(clippy::type_complexity)]
    fn take_all(&mut self) -> (Vec<(usize, Vec<Option<E>>)>, Vec<E>) {
        let chunks = self
            .chunks
            .drain(..)
            .map(|c| (c.base, c.busy.into_iter().map(|b| b.event).collect()))
            .collect();
        self.current = 0;
        (chunks, std::mem::take(&mut self.free_events))
    }

    /// The busy slots as `(chunk, start, end)`, for tests.
    #[cfg(test)]
    fn busy_spans(&self) -> Vec<(usize, usize, usize)> {
        self.chunks
            .iter()
            .enumerate()
            .flat_map(|(i, c)| c.busy.iter().map(move |b| (i, b.start, b.end)))
            .collect()
    }
}

/// The per-device ring of pinned host memory behind [`crate::Stream::alloc_from_host_async`].
pub(crate) struct StagingRing {
    driver: &'static dyn Driver,
    ordinal: usize,
    state: Mutex<RingState<RawEvent>>,
}

impl std::fmt::Debug for StagingRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagingRing")
            .field("device", &self.ordinal)
            .field("chunks", &self.state.lock().chunk_count())
            .finish()
    }
}

impl StagingRing {
    /// An empty ring for device `ordinal` (chunks are allocated on first use).
    pub(crate) fn new(driver: &'static dyn Driver, ordinal: usize) -> Self {
        StagingRing {
            driver,
            ordinal,
            state: Mutex::new(RingState::default()),
        }
    }

    /// Copies `bytes` bytes from `src` into a slot of pinned memory and queues a copy from the
    /// slot to `dst` on `stream`, followed by an event that keeps the slot busy until the copy
    /// has read it. Never waits for the device (except on an error path: when the event cannot
    /// be recorded after the copy was queued, the stream is synchronised so that the slot can be
    /// reused). Returns when `src` is no longer needed.
    ///
    /// # Safety
    /// * `src` is valid for reads of `bytes` bytes for the duration of the call;
    /// * `dst..dst + bytes` is device memory of this ring's device that stays allocated until
    ///   the copy has run in `stream`'s order (a caching-allocator block allocated on `stream`
    ///   qualifies: its free is stream-ordered);
    /// * `stream` is a live stream of this ring's device, which is current on the calling
    ///   thread;
    /// * `0 < bytes <= MAX_STAGED_BYTES`.
    pub(crate) unsafe fn upload(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        stream: RawStream,
    ) -> Result<()> {
        let driver = self.driver;
        let mut done = |event: &RawEvent| {
            // SAFETY: every event in the ring is live: created here and destroyed only on drop.
            // An error is read as "not yet": the slot is then retired by a later query.
            unsafe { driver.event_query(*event) }.unwrap_or(false)
        };
        let mut st = self.state.lock();
        let slot = match st.reserve(bytes, &mut done) {
            Some(slot) => slot,
            None => {
                let size = chunk_size_for(bytes).ok_or_else(|| {
                    Error::invalid("alloc_from_host_async", "the upload size overflows")
                })?;
                let base = driver.host_alloc(size).context(|| {
                    format!(
                        "allocating {size} bytes of pinned staging memory for device {}",
                        self.ordinal
                    )
                })?;
                st.add_chunk(base as usize, size);
                st.reserve(bytes, &mut done).ok_or_else(|| {
                    Error::invalid("alloc_from_host_async", "a new staging chunk has no room")
                })?
            }
        };
        let staged = st
            .address(slot)
            .ok_or_else(|| Error::invalid("alloc_from_host_async", "staging slot out of range"))?
            as *mut u8;
        let event = match st.take_event() {
            Some(event) => event,
            None => driver
                .event_create(false)
                .context(|| "creating an event for the staging ring".to_string())?,
        };
        // SAFETY: `src` is readable for `bytes` (caller). `staged` points into a chunk of pinned
        // memory of at least `slot.offset + slot.len >= slot.offset + bytes` bytes that the ring
        // owns for the life of the device, and the slot is in no busy list: either never handed
        // out or retired after the event of the copy that last read it completed, so no queued
        // copy reads these bytes. The lock keeps other threads off the slot until it is
        // committed. Host memory owned by the caller and the ring's chunk cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(src, staged, bytes) };
        // SAFETY: `dst` is device memory that outlives the copy in stream order (caller); the
        // source is our slot, which stays alive (chunks are never freed while in use) and
        // unmodified until the event recorded below completes (it is busy until then).
        let queued = unsafe { driver.memcpy_htod_async(dst, staged.cast(), bytes, stream) }
            .context(|| {
                format!(
                    "queueing a {bytes}-byte staged copy to device {}",
                    self.ordinal
                )
            });
        if let Err(e) = queued {
            // Nothing was queued: the slot stays free and the event unused.
            st.put_event(event);
            return Err(e);
        }
        // SAFETY: the event is live (ours) and the stream is live (caller).
        let recorded = unsafe { driver.event_record(event, stream) }
            .context(|| "recording the event of a staged copy".to_string());
        match recorded {
            Ok(()) => {
                st.commit(slot, Some(event));
                Ok(())
            }
            Err(record_error) => {
                // SAFETY: the event is ours and is not used again.
                let _ = unsafe { driver.event_destroy(event) };
                // The copy is queued but nothing marks its end: wait for the stream instead.
                // SAFETY: the stream is live (caller).
                if unsafe { driver.stream_synchronize(stream) }.is_ok() {
                    // The copy has run: the slot is free again and the upload is complete.
                    Ok(())
                } else {
                    // The copy may still read the slot: never reuse it.
                    st.commit(slot, None);
                    Err(record_error)
                }
            }
        }
    }
}

impl Drop for StagingRing {
    fn drop(&mut self) {
        let driver = self.driver;
        if driver.set_current(self.ordinal).is_err() {
            // Cannot talk to the device: leak the chunks rather than free memory a copy may read.
            return;
        }
        let (chunks, free_events) = self.state.get_mut().take_all();
        for (base, events) in chunks {
            let mut all_done = true;
            for event in events {
                match event {
                    Some(event) => {
                        // SAFETY: the event is live and ours; it is destroyed right after (the
                        // runtime defers the release of a pending event).
                        unsafe {
                            all_done &= driver.event_query(event).unwrap_or(false);
                            let _ = driver.event_destroy(event);
                        }
                    }
                    None => all_done = false,
                }
            }
            if all_done {
                // SAFETY: `base` came from `host_alloc`, and every copy that read the chunk has
                // completed, so none still uses it.
                let _ = unsafe { driver.host_free(base as *mut std::ffi::c_void) };
            }
            // Otherwise a copy may still read the chunk: leak it.
        }
        for event in free_events {
            // SAFETY: a pooled event is live, ours and completed; it is not used again.
            let _ = unsafe { driver.event_destroy(event) };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// A ring over fake events (numbers): `done` holds the completed ones.
    struct Fake {
        ring: RingState<u32>,
        done: HashSet<u32>,
        next_event: u32,
        next_base: usize,
    }

    impl Fake {
        fn new() -> Self {
            Fake {
                ring: RingState::default(),
                done: HashSet::new(),
                next_event: 0,
                next_base: 0x10_0000,
            }
        }

        /// One upload: reserve (growing like `StagingRing::upload`), then commit with an event
        /// (a pooled one first, as the real ring does). Returns the slot and its event.
        fn upload(&mut self, bytes: usize) -> (Slot, u32) {
            let done = &self.done;
            let mut query = |e: &u32| done.contains(e);
            let slot = match self.ring.reserve(bytes, &mut query) {
                Some(slot) => slot,
                None => {
                    let size = chunk_size_for(bytes).unwrap();
                    self.ring.add_chunk(self.next_base, size);
                    self.next_base += size + 0x1000;
                    self.ring.reserve(bytes, &mut query).unwrap()
                }
            };
            let event = match self.ring.take_event() {
                Some(e) => {
                    // A pooled event completed; recording it again makes it pending.
                    assert!(self.done.remove(&e), "pooled event {e} had not completed");
                    e
                }
                None => {
                    self.next_event += 1;
                    self.next_event
                }
            };
            self.ring.commit(slot, Some(event));
            (slot, event)
        }
    }

    fn overlaps(a: (usize, usize, usize), b: (usize, usize, usize)) -> bool {
        a.0 == b.0 && a.1 < b.2 && b.1 < a.2
    }

    #[test]
    fn slot_lengths_round_up_and_chunks_fit_the_largest_upload() {
        assert_eq!(slot_len(1), Some(64));
        assert_eq!(slot_len(64), Some(64));
        assert_eq!(slot_len(65), Some(128));
        assert_eq!(slot_len(usize::MAX), None);
        assert_eq!(chunk_size_for(100), Some(CHUNK_BYTES));
        assert_eq!(chunk_size_for(CHUNK_BYTES + 1), Some(CHUNK_BYTES + 64));
    }

    #[test]
    fn consecutive_uploads_share_one_chunk_without_any_query() {
        let mut ring = RingState::<u32>::default();
        ring.add_chunk(0x1000, CHUNK_BYTES);
        let mut queries = 0;
        let mut never = |_: &u32| {
            queries += 1;
            false
        };
        let a = ring.reserve(100, &mut never).unwrap();
        ring.commit(a, Some(1));
        let b = ring.reserve(8, &mut never).unwrap();
        ring.commit(b, Some(2));
        assert_eq!(
            (a, b),
            (
                Slot {
                    chunk: 0,
                    offset: 0,
                    len: 128
                },
                Slot {
                    chunk: 0,
                    offset: 128,
                    len: 64
                }
            )
        );
        assert_eq!(ring.address(b), Some(0x1000 + 128));
        assert_eq!(queries, 0);
    }

    #[test]
    fn a_slot_is_reused_only_after_its_event_completed_and_the_ring_grows_meanwhile() {
        let mut f = Fake::new();
        // Fill the first chunk exactly: 16 slots of 64 KiB.
        let first: Vec<(Slot, u32)> = (0..16).map(|_| f.upload(MAX_STAGED_BYTES)).collect();
        assert!(first.iter().all(|(s, _)| s.chunk == 0));
        assert_eq!(f.ring.chunk_count(), 1);
        // Nothing completed: the next upload gets a new chunk instead of waiting.
        let (s, _) = f.upload(MAX_STAGED_BYTES);
        assert_eq!((s.chunk, s.offset), (1, 0));
        assert_eq!(f.ring.chunk_count(), 2);
        // Fill chunk 1 too; then the oldest slot of chunk 0 completes and is the one reused,
        // with its event.
        for _ in 1..16 {
            assert_eq!(f.upload(MAX_STAGED_BYTES).0.chunk, 1);
        }
        let (oldest, oldest_event) = first[0];
        f.done.insert(oldest_event);
        let (s, e) = f.upload(MAX_STAGED_BYTES);
        assert_eq!((s.chunk, s.offset), (oldest.chunk, oldest.offset));
        assert_eq!(e, oldest_event, "the completed event is recorded again");
        assert_eq!(f.ring.chunk_count(), 2);
    }

    #[test]
    fn retiring_goes_oldest_first() {
        let mut f = Fake::new();
        let slots: Vec<(Slot, u32)> = (0..16).map(|_| f.upload(MAX_STAGED_BYTES)).collect();
        // The second-oldest completed, the oldest not: its space is not reused (the ring grows).
        f.done.insert(slots[1].1);
        let (s, _) = f.upload(MAX_STAGED_BYTES);
        assert_eq!(s.chunk, 1);
        // Now the oldest completes too: both are retired, and chunk 0 is used again once the
        // current chunk (1) is full.
        f.done.insert(slots[0].1);
        for _ in 1..16 {
            assert_eq!(f.upload(MAX_STAGED_BYTES).0.chunk, 1);
        }
        let a = f.upload(MAX_STAGED_BYTES).0;
        let b = f.upload(MAX_STAGED_BYTES).0;
        assert_eq!((a.chunk, a.offset), (0, 0));
        assert_eq!((b.chunk, b.offset), (0, MAX_STAGED_BYTES));
        assert_eq!(f.ring.chunk_count(), 2);
    }

    #[test]
    fn a_slot_without_an_event_is_never_reused() {
        let mut ring = RingState::<u32>::default();
        ring.add_chunk(0x1000, CHUNK_BYTES);
        let mut always = |_: &u32| true;
        let poisoned = ring.reserve(CHUNK_BYTES / 2, &mut always).unwrap();
        ring.commit(poisoned, None);
        let other = ring.reserve(CHUNK_BYTES / 2, &mut always).unwrap();
        ring.commit(other, Some(7));
        assert_eq!(other.offset, CHUNK_BYTES / 2);
        // Everything that has an event has completed, yet the chunk stays full.
        assert_eq!(ring.reserve(64, &mut always), None);
    }

    #[test]
    fn an_idle_chunk_starts_over_at_offset_zero() {
        let mut ring = RingState::<u32>::default();
        ring.add_chunk(0x1000, CHUNK_BYTES);
        let mut never = |_: &u32| false;
        for e in 0..3 {
            let s = ring.reserve(1000, &mut never).unwrap();
            ring.commit(s, Some(e));
        }
        // Fill the rest so that the next reserve has to retire.
        let rest = CHUNK_BYTES - 3 * 1024;
        let s = ring.reserve(rest, &mut never).unwrap();
        ring.commit(s, Some(3));
        let mut always = |_: &u32| true;
        let s = ring.reserve(5000, &mut always).unwrap();
        assert_eq!(s.offset, 0);
        assert!(ring.busy_spans().is_empty());
        assert!(ring.take_event().is_some());
    }

    #[test]
    fn random_uploads_never_overlap_a_busy_slot() {
        // Uploads of random sizes; events complete in random order (as with several streams);
        // every new slot must lie inside its chunk and overlap no slot whose event has not
        // completed. Completion keeps up on average, so the ring must stay small.
        let mut f = Fake::new();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut pending: Vec<((usize, usize, usize), u32)> = Vec::new();
        for _ in 0..20_000 {
            let bytes = match next() % 10 {
                0 => 1 + (next() % MAX_STAGED_BYTES as u64) as usize,
                _ => 1 + (next() % 512) as usize,
            };
            let (slot, event) = f.upload(bytes);
            let span = (slot.chunk, slot.offset, slot.offset + slot.len);
            assert!(slot.len >= bytes && slot.offset % SLOT_ALIGN == 0);
            assert!(span.2 <= CHUNK_BYTES, "{span:?} ends past its chunk");
            for (busy, e) in &pending {
                assert!(
                    !overlaps(span, *busy),
                    "slot {span:?} overlaps {busy:?} whose event {e} is pending"
                );
            }
            pending.push((span, event));
            // Complete random pending events (not necessarily the oldest) until at most a
            // random number of them, below 64, is left in flight.
            let keep = (next() % 64) as usize;
            while pending.len() > keep {
                let i = (next() % pending.len() as u64) as usize;
                let (_, e) = pending.swap_remove(i);
                f.done.insert(e);
            }
        }
        let chunks = f.ring.chunk_count();
        assert!(chunks <= 16, "the ring grew to {chunks} chunks");
    }
}
