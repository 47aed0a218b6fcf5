//! The caching device allocator.
//!
//! Modelled on PyTorch's `CUDACachingAllocator`: device memory is obtained from the runtime in
//! *segments*, carved into *blocks*, and cached when freed, so that steady-state allocation and
//! free make no runtime call at all (the hot path is a lock and a few hash-map updates: a parked
//! block of the request's size, else a `BTreeSet` look-up).
//!
//! # Policy
//!
//! * **Rounding.** A request is rounded up to a multiple of 512 bytes (the smallest block).
//!   A zero-byte request returns a null allocation that owns no block.
//! * **Pools.** Rounded sizes up to 1 MiB are served from the *small* pool, whose segments are
//!   2 MiB. Sizes up to 20 MiB are served from the *large* pool: below 10 MiB out of 20 MiB
//!   segments, from 10 MiB on out of a segment of the request rounded up to 2 MiB. Larger
//!   requests go to the *huge* pool, whose segments are the request rounded up to 2 MiB. A block
//!   only ever serves requests of its own pool. In particular a huge (over 20 MiB) cached block
//!   is never split for a small or medium request, so that big segments are not pinned by tiny
//!   buffers; remainders split off a huge block stay huge-only until they merge back.
//! * **Best fit and splitting.** A request takes the smallest free block of its pool that fits
//!   (a `BTreeSet` ordered by owner, size, address). The block is split when the remainder is
//!   worth keeping: at least 512 bytes in the small pool, more than 1 MiB in the large and huge
//!   pools (a smaller remainder stays inside the allocated block). When a block is freed it is
//!   merged with its free neighbours in the same segment.
//! * **Parked blocks.** A small-pool block freed by its own stream (no other stream used it) is
//!   first *parked*: kept whole, unmerged, in a list of its stream and exact size, and the next
//!   request of that size on that stream takes it back without a search, a split or a merge.
//!   A model's step allocates the same sizes every time, so this is the common path. At most
//!   64 MiB (`PARK_LIMIT`) are parked; parked blocks are merged like any freed block (unparked)
//!   before the allocator would ask the device for a new segment, and before it releases
//!   memory or retires a stream, so parking never makes it hold more memory than before.
//! * **Streams.** Every free block belongs to the stream that last used it (its `StreamKey::id`)
//!   and is only reused by allocations on that stream: stream order makes the reuse safe without
//!   waiting, so a free is immediate and makes no runtime call. A fresh segment belongs to the
//!   stream that asked for it. When a stream is retired (synchronised and destroyed) its free
//!   blocks become *unowned* and any stream may take them; allocations look at their own
//!   stream's blocks first, then at unowned ones. Free neighbours merge when they have the same
//!   owner (so memory given to every stream is never captured again by one).
//! * **Cross-stream use.** `CachingAllocator::record_stream` notes that another stream uses a
//!   block. At free, an event (from a pool of reusable events) is recorded on each such stream
//!   and the block is *pending* until all of them have completed. Pending blocks are polled only
//!   at the start of an allocation while some are pending, and resolved at every device
//!   synchronisation (out-of-memory path, [`CachingAllocator::empty_cache`], drop).
//! * **Out of memory.** When the runtime reports out-of-memory, the allocator synchronises the
//!   device (completing every pending block, which is reused if one now fits), releases every
//!   segment whose blocks are all free, and retries once; if that fails too the error is
//!   [`Error::OutOfMemory`] with the allocator's numbers. Other errors pass through unchanged.
//! * **Releasing.** [`CachingAllocator::empty_cache`] synchronises and releases every segment
//!   without live blocks; dropping the allocator does the same and destroys its events.
//!   Segments that still hold live blocks are never released.
//! * **No caching (debugging).** With `HIP_CORE_NO_CACHING=1` (or `CANDLE_ROCM_NO_CACHING=1`;
//!   see [`NO_CACHING_VARS`]), read once when the device's allocator is created, every request
//!   is a device allocation of exactly its size and every free a device free, so that memory
//!   checkers (`compute-sanitizer`) see each buffer's bounds and lifetime. There is no stream
//!   order to rely on then: a free first synchronises the device (all streams that may still
//!   use the memory), and frees the memory only if that succeeded (else at the next successful
//!   synchronisation). Statistics count as usual (one segment per live allocation, no cache
//!   hits). Slow by design.
//!
//! Errors in paths that cannot report them (free, drop) are ignored without losing the
//! bookkeeping: a segment whose release fails stays cached, and a block whose event cannot be
//! recorded is covered by a device synchronisation instead (at once, or if that fails too, the
//! next one that succeeds).

use std::collections::BTreeSet;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use parking_lot::Mutex;

use crate::driver::{DevicePtr, Driver, RawEvent, RawStream};
use crate::error::{Error, Result};

/// Smallest block, and the granularity of every block size.
const MIN_BLOCK_SIZE: usize = 512;
/// Largest rounded request served by the small pool.
const SMALL_SIZE: usize = 1 << 20;
/// Segment size of the small pool.
const SMALL_SEGMENT: usize = 2 << 20;
/// Segment size of the large pool for requests below [`MIN_LARGE_ALLOC`]; also the largest
/// request (and segment) of the large pool.
const LARGE_SEGMENT: usize = 20 << 20;
/// From this size on, a large request gets a segment of its own size (rounded).
const MIN_LARGE_ALLOC: usize = 10 << 20;
/// Rounding of dedicated segments.
const ROUND_LARGE: usize = 2 << 20;
/// Most bytes kept in parked blocks (freed small-pool blocks waiting, whole, for a request of
/// their exact size on their stream).
const PARK_LIMIT: usize = 64 << 20;

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
    /// Clears the runtime's per-thread "last error" after an out-of-memory the allocator
    /// handled (see [`Driver::clear_last_error`]).
    fn clear_last_error(&self);
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
    fn clear_last_error(&self) {
        self.driver.clear_last_error();
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
    /// Device allocation calls (`hipMalloc`) that succeeded.
    pub device_mallocs: u64,
    /// Device free calls (`hipFree`) that succeeded.
    pub device_frees: u64,
    /// Times an out-of-memory was answered by releasing the cache and retrying.
    pub oom_retries: u64,
    /// Freed blocks still waiting for other streams' work (see `record_stream`) before reuse.
    pub pending_blocks: usize,
    /// Bytes in those pending blocks (counted in `reserved_bytes`, not in `allocated_bytes`).
    pub pending_bytes: usize,
}

/// Rounds a request up to the block granularity; `None` on overflow.
fn round_size(bytes: usize) -> Option<usize> {
    let rounded = bytes.checked_next_multiple_of(MIN_BLOCK_SIZE)?;
    Some(rounded.max(MIN_BLOCK_SIZE))
}

/// The pools blocks are served from (a block belongs to its segment's pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pool {
    /// Rounded requests up to 1 MiB, 2 MiB segments.
    Small,
    /// Rounded requests up to 20 MiB, segments of at most 20 MiB.
    Large,
    /// Rounded requests over 20 MiB, dedicated segments.
    Huge,
}

impl Pool {
    /// The pool serving a rounded request.
    fn for_size(rounded: usize) -> Pool {
        if rounded <= SMALL_SIZE {
            Pool::Small
        } else if rounded <= LARGE_SEGMENT {
            Pool::Large
        } else {
            Pool::Huge
        }
    }

    fn index(self) -> usize {
        match self {
            Pool::Small => 0,
            Pool::Large => 1,
            Pool::Huge => 2,
        }
    }

    /// The segment to obtain from the device for a rounded request of this pool.
    fn segment_size(self, rounded: usize) -> Option<usize> {
        match self {
            Pool::Small => Some(SMALL_SEGMENT),
            Pool::Large if rounded < MIN_LARGE_ALLOC => Some(LARGE_SEGMENT),
            Pool::Large | Pool::Huge => rounded.checked_next_multiple_of(ROUND_LARGE),
        }
    }

    /// Whether a block with `remaining` bytes past the request is split.
    fn should_split(self, remaining: usize) -> bool {
        match self {
            Pool::Small => remaining >= MIN_BLOCK_SIZE,
            Pool::Large | Pool::Huge => remaining > SMALL_SIZE,
        }
    }
}

/// Which streams may take a free block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Owner {
    /// Only this stream (by id).
    Stream(u64),
    /// Any stream: no queued work can use the block.
    Unowned,
}

impl Owner {
    /// Whether free blocks of these owners may merge, and the owner of the result: only blocks of
    /// the same owner merge (merging an unowned block into a stream's block would take it away
    /// from the other streams).
    fn merge(self, other: Owner) -> Option<Owner> {
        (self == other).then_some(self)
    }
}

/// Key of a free block in its pool's set: best fit is the first key at or above
/// `(owner, size, 0)` with the same owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct FreeKey {
    owner: Owner,
    size: usize,
    ptr: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockState {
    /// Cached, in its pool's free set.
    Free,
    /// Handed out.
    Allocated,
    /// Freed, waiting for events on other streams.
    Pending,
    /// Freed by its own stream and parked whole for a request of its size on that stream (in
    /// `State::parked`; not merged, not in a free set; counted in its segment's `busy`).
    Parked,
}

/// A contiguous piece of a segment, keyed by its address.
#[derive(Debug)]
struct Block {
    size: usize,
    /// Base address of the segment (also the address of its first block).
    segment: u64,
    prev: Option<u64>,
    next: Option<u64>,
    state: BlockState,
    /// For a free block: who may take it. For a live or pending one: the allocating stream.
    owner: Owner,
    /// Other streams that used the block while it was allocated.
    stream_uses: Vec<StreamKey>,
    /// Outstanding entries of `State::pending` for this block.
    pending_events: usize,
}

/// Memory obtained with one device allocation.
#[derive(Debug)]
struct Segment {
    size: usize,
    pool: Pool,
    /// Blocks of this segment that are not free (allocated, pending or parked).
    busy: usize,
}

/// A pending block waiting for one event; `None` waits for the next device synchronisation
/// (used when an event could not be recorded).
#[derive(Debug)]
struct PendingEvent {
    event: Option<RawEvent>,
    block: u64,
}

/// Everything behind the allocator's lock.
#[derive(Debug, Default)]
struct State {
    blocks: HashMap<u64, Block>,
    segments: HashMap<u64, Segment>,
    free: [BTreeSet<FreeKey>; 3],
    /// Parked blocks by (stream id, size): the addresses, last parked last.
    parked: HashMap<(u64, usize), Vec<u64>>,
    /// Bytes in parked blocks.
    parked_bytes: usize,
    pending: Vec<PendingEvent>,
    event_pool: Vec<RawEvent>,
    /// Retired streams that still had live or pending blocks (owning or using) when retired.
    retired: HashSet<u64>,
    stats: AllocatorStats,
    /// No-caching mode: live device allocations, address to size.
    raw: HashMap<u64, usize>,
    /// No-caching mode: freed allocations whose device free waits for a successful
    /// synchronisation (address, size).
    raw_deferred: Vec<(u64, usize)>,
}

impl State {
    /// The best-fitting free block of `pool` owned by `owner`.
    fn find_free(&self, pool: Pool, owner: Owner, size: usize) -> Option<FreeKey> {
        let lo = FreeKey {
            owner,
            size,
            ptr: 0,
        };
        let hi = FreeKey {
            owner,
            size: usize::MAX,
            ptr: u64::MAX,
        };
        self.free[pool.index()].range(lo..=hi).next().copied()
    }

    /// Serves a rounded request from the cache: the stream's own blocks first, then unowned.
    fn take_cached(&mut self, pool: Pool, size: usize, stream: u64) -> Option<u64> {
        let key = self
            .find_free(pool, Owner::Stream(stream), size)
            .or_else(|| self.find_free(pool, Owner::Unowned, size))?;
        self.take_block(pool, key, size, stream)
    }

    /// Hands out the free block `key` for `size` bytes on `stream`, splitting off the rest.
    fn take_block(&mut self, pool: Pool, key: FreeKey, size: usize, stream: u64) -> Option<u64> {
        let remaining = key.size.checked_sub(size)?;
        if !self.free[pool.index()].remove(&key) {
            return None;
        }
        let block = self.blocks.get_mut(&key.ptr)?;
        let segment = block.segment;
        if pool.should_split(remaining) {
            let rest = key.ptr + size as u64;
            let next = block.next;
            block.size = size;
            block.next = Some(rest);
            if let Some(n) = next.and_then(|n| self.blocks.get_mut(&n)) {
                n.prev = Some(rest);
            }
            self.blocks.insert(
                rest,
                Block {
                    size: remaining,
                    segment,
                    prev: Some(key.ptr),
                    next,
                    state: BlockState::Free,
                    owner: key.owner,
                    stream_uses: Vec::new(),
                    pending_events: 0,
                },
            );
            self.free[pool.index()].insert(FreeKey {
                owner: key.owner,
                size: remaining,
                ptr: rest,
            });
        }
        let block = self.blocks.get_mut(&key.ptr)?;
        block.state = BlockState::Allocated;
        block.owner = Owner::Stream(stream);
        block.stream_uses.clear();
        let block_size = block.size;
        if let Some(seg) = self.segments.get_mut(&segment) {
            seg.busy += 1;
        }
        let stats = &mut self.stats;
        stats.allocated_bytes += block_size;
        stats.peak_allocated_bytes = stats.peak_allocated_bytes.max(stats.allocated_bytes);
        stats.active_blocks += 1;
        Some(key.ptr)
    }

    /// Parks the allocated small-pool block `ptr` of a live stream, just freed by that stream
    /// with no other stream's use to wait for; `false` (nothing changed) where it is not
    /// parked: a large or huge block, a retired stream, or the parked bytes at their limit.
    fn park(&mut self, ptr: u64) -> bool {
        let Some(block) = self.blocks.get_mut(&ptr) else {
            return false;
        };
        // Allocated small-pool blocks are the rounded request (at most SMALL_SIZE): the other
        // pools hand out blocks larger than that.
        let Owner::Stream(id) = block.owner else {
            return false;
        };
        if block.state != BlockState::Allocated
            || block.size > SMALL_SIZE
            || self.parked_bytes + block.size > PARK_LIMIT
            || self.retired.contains(&id)
        {
            return false;
        }
        block.state = BlockState::Parked;
        block.stream_uses.clear();
        let size = block.size;
        self.parked_bytes += size;
        self.parked.entry((id, size)).or_default().push(ptr);
        true
    }

    /// Takes back a parked block of exactly `size` bytes of `stream` for that stream.
    fn take_parked(&mut self, size: usize, stream: u64) -> Option<u64> {
        let ptr = self.parked.get_mut(&(stream, size))?.pop()?;
        let block = self.blocks.get_mut(&ptr)?;
        block.state = BlockState::Allocated;
        self.parked_bytes -= size;
        let stats = &mut self.stats;
        stats.allocated_bytes += size;
        stats.peak_allocated_bytes = stats.peak_allocated_bytes.max(stats.allocated_bytes);
        stats.active_blocks += 1;
        Some(ptr)
    }

    /// Frees every parked block as any freed block is (merged with its free neighbours).
    fn unpark_all(&mut self) {
        if self.parked_bytes == 0 {
            return;
        }
        for (_, ptrs) in std::mem::take(&mut self.parked) {
            for ptr in ptrs {
                self.release_block(ptr);
            }
        }
        self.parked_bytes = 0;
    }

    /// Adds a fresh segment, as one free block owned by `stream`; returns its free key.
    fn add_segment(&mut self, base: u64, size: usize, pool: Pool, stream: u64) -> FreeKey {
        let owner = Owner::Stream(stream);
        self.segments.insert(
            base,
            Segment {
                size,
                pool,
                busy: 0,
            },
        );
        self.blocks.insert(
            base,
            Block {
                size,
                segment: base,
                prev: None,
                next: None,
                state: BlockState::Free,
                owner,
                stream_uses: Vec::new(),
                pending_events: 0,
            },
        );
        let key = FreeKey {
            owner,
            size,
            ptr: base,
        };
        self.free[pool.index()].insert(key);
        let stats = &mut self.stats;
        stats.reserved_bytes += size;
        stats.peak_reserved_bytes = stats.peak_reserved_bytes.max(stats.reserved_bytes);
        stats.segments += 1;
        stats.device_mallocs += 1;
        key
    }

    /// The owner a block gets when it becomes free after being used by `owner`.
    fn owner_when_freed(&self, owner: Owner) -> Owner {
        match owner {
            Owner::Stream(id) if self.retired.contains(&id) => Owner::Unowned,
            o => o,
        }
    }

    /// Makes an allocated or pending block free: merges it and puts it in its pool's set.
    fn release_block(&mut self, ptr: u64) {
        let Some(block) = self.blocks.get(&ptr) else {
            return;
        };
        let (was, size, segment, owner) = (block.state, block.size, block.segment, block.owner);
        if was == BlockState::Free {
            return;
        }
        let owner = self.owner_when_freed(owner);
        if let Some(block) = self.blocks.get_mut(&ptr) {
            block.state = BlockState::Free;
            block.owner = owner;
            block.pending_events = 0;
            block.stream_uses.clear();
        }
        if was == BlockState::Pending {
            self.stats.pending_blocks = self.stats.pending_blocks.saturating_sub(1);
            self.stats.pending_bytes = self.stats.pending_bytes.saturating_sub(size);
        }
        let Some(seg) = self.segments.get_mut(&segment) else {
            return;
        };
        seg.busy = seg.busy.saturating_sub(1);
        let pool = seg.pool;
        self.merge_and_insert(pool, ptr);
    }

    /// Merges the free block at `ptr` (not in any free set) with its free neighbours and inserts
    /// the result into the free set of `pool`.
    fn merge_and_insert(&mut self, pool: Pool, mut ptr: u64) {
        let set = pool.index();
        // Absorb the next block.
        if let Some(block) = self.blocks.get(&ptr) {
            if let Some(n) = block.next {
                if let Some(nb) = self.blocks.get(&n) {
                    if let (BlockState::Free, Some(owner)) = (nb.state, block.owner.merge(nb.owner))
                    {
                        self.free[set].remove(&FreeKey {
                            owner: nb.owner,
                            size: nb.size,
                            ptr: n,
                        });
                        let (nsize, nnext) = (nb.size, nb.next);
                        self.blocks.remove(&n);
                        if let Some(b) = self.blocks.get_mut(&ptr) {
                            b.size += nsize;
                            b.next = nnext;
                            b.owner = owner;
                        }
                        if let Some(nn) = nnext.and_then(|nn| self.blocks.get_mut(&nn)) {
                            nn.prev = Some(ptr);
                        }
                    }
                }
            }
        }
        // Be absorbed by the previous block.
        if let Some(block) = self.blocks.get(&ptr) {
            if let Some(p) = block.prev {
                if let Some(pb) = self.blocks.get(&p) {
                    if let (BlockState::Free, Some(owner)) = (pb.state, pb.owner.merge(block.owner))
                    {
                        self.free[set].remove(&FreeKey {
                            owner: pb.owner,
                            size: pb.size,
                            ptr: p,
                        });
                        let (size, next) = (block.size, block.next);
                        self.blocks.remove(&ptr);
                        if let Some(b) = self.blocks.get_mut(&p) {
                            b.size += size;
                            b.next = next;
                            b.owner = owner;
                        }
                        if let Some(nb) = next.and_then(|n| self.blocks.get_mut(&n)) {
                            nb.prev = Some(p);
                        }
                        ptr = p;
                    }
                }
            }
        }
        if let Some(block) = self.blocks.get(&ptr) {
            self.free[set].insert(FreeKey {
                owner: block.owner,
                size: block.size,
                ptr,
            });
        }
    }

    /// One event of a pending block has completed (or the device was synchronised).
    fn event_done(&mut self, ptr: u64) {
        let Some(block) = self.blocks.get_mut(&ptr) else {
            return;
        };
        block.pending_events = block.pending_events.saturating_sub(1);
        if block.pending_events == 0 && block.state == BlockState::Pending {
            self.release_block(ptr);
        }
    }

    /// Polls the pending events; completed ones free their blocks.
    fn process_events(&mut self, backend: &dyn AllocatorBackend) {
        let pending = std::mem::take(&mut self.pending);
        let mut done = Vec::new();
        for p in pending {
            let complete = match p.event {
                // SAFETY: the event is owned by this allocator and alive until destroyed.
                Some(event) => unsafe { backend.event_query(event) }.unwrap_or(false),
                None => false,
            };
            if complete {
                done.push(p);
            } else {
                self.pending.push(p);
            }
        }
        for p in done {
            self.event_pool.extend(p.event);
            self.event_done(p.block);
        }
    }

    /// The device was synchronised: every pending block can be freed.
    fn on_synchronized(&mut self) {
        for p in std::mem::take(&mut self.pending) {
            self.event_pool.extend(p.event);
            self.event_done(p.block);
        }
    }

    /// Releases every segment without allocated or pending blocks.
    ///
    /// The caller has synchronised the device, so no queued work uses a free block.
    fn release_free_segments(&mut self, backend: &dyn AllocatorBackend) {
        self.unpark_all();
        let deferred = std::mem::take(&mut self.raw_deferred);
        self.release_raw(backend, deferred);
        let idle: Vec<u64> = self
            .segments
            .iter()
            .filter(|(_, s)| s.busy == 0)
            .map(|(&base, _)| base)
            .collect();
        for base in idle {
            // SAFETY: the segment came from `backend.malloc`; none of its blocks is handed out or
            // pending, and the caller synchronised the device, so no queued work uses it.
            if unsafe { backend.free(DevicePtr(base)) }.is_err() {
                // Keep it cached (and counted); a later release may succeed.
                continue;
            }
            let Some(seg) = self.segments.remove(&base) else {
                continue;
            };
            let mut cursor = Some(base);
            while let Some(ptr) = cursor {
                let Some(block) = self.blocks.remove(&ptr) else {
                    break;
                };
                self.free[seg.pool.index()].remove(&FreeKey {
                    owner: block.owner,
                    size: block.size,
                    ptr,
                });
                cursor = block.next;
            }
            self.stats.reserved_bytes = self.stats.reserved_bytes.saturating_sub(seg.size);
            self.stats.segments = self.stats.segments.saturating_sub(1);
            self.stats.device_frees += 1;
        }
    }

    /// An event from the pool, or a new one.
    fn get_event(&mut self, backend: &dyn AllocatorBackend) -> Result<RawEvent> {
        match self.event_pool.pop() {
            Some(event) => Ok(event),
            None => backend.event_create(),
        }
    }

    /// Records an event on `stream` for the pending block `ptr`.
    fn record_event(&mut self, backend: &dyn AllocatorBackend, ptr: u64, stream: StreamKey) {
        let recorded = match self.get_event(backend) {
            // SAFETY: the event is ours and alive; the stream is alive: it is not retired
            // (checked by the caller) and it has work using this block.
            Ok(event) => match unsafe { backend.event_record(event, stream.raw) } {
                Ok(()) => Some(event),
                Err(_) => {
                    // SAFETY: the event is ours; it is dropped from the pool, so unused after.
                    let _ = unsafe { backend.event_destroy(event) };
                    None
                }
            },
            Err(_) => None,
        };
        let event = match recorded {
            Some(event) => Some(event),
            // No event: wait for the whole device instead; if even that fails, the block waits
            // for the next successful synchronisation.
            None if backend.synchronize().is_ok() => return,
            None => None,
        };
        self.pending.push(PendingEvent { event, block: ptr });
        if let Some(block) = self.blocks.get_mut(&ptr) {
            block.pending_events += 1;
        }
    }
}

/// A per-device caching allocator.
pub struct CachingAllocator {
    device: usize,
    backend: Box<dyn AllocatorBackend>,
    /// `false` in no-caching mode (see [`NO_CACHING_VARS`]).
    caching: bool,
    state: Mutex<State>,
}

impl std::fmt::Debug for CachingAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachingAllocator")
            .field("device", &self.device)
            .field("caching", &self.caching)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl CachingAllocator {
    /// A new allocator for device `device` over `backend`; caching unless the environment
    /// asks for none ([`NO_CACHING_VARS`], read here, once per device).
    pub(crate) fn new(device: usize, backend: Box<dyn AllocatorBackend>) -> Self {
        let no_caching = no_caching_requested(|name| std::env::var(name).ok());
        Self::with_caching(device, backend, !no_caching)
    }

    /// A new allocator for device `device` over `backend`, caching or not.
    pub(crate) fn with_caching(
        device: usize,
        backend: Box<dyn AllocatorBackend>,
        caching: bool,
    ) -> Self {
        CachingAllocator {
            device,
            backend,
            caching,
            state: Mutex::new(State::default()),
        }
    }

    /// Whether freed memory is cached for reuse: `false` when `HIP_CORE_NO_CACHING` or
    /// `CANDLE_ROCM_NO_CACHING` was set when the device was first used (see
    /// [`NO_CACHING_VARS`]).
    pub fn is_caching(&self) -> bool {
        self.caching
    }

    fn out_of_memory(&self, state: &State, requested: usize) -> Error {
        Error::OutOfMemory {
            device: self.device,
            requested,
            reserved: state.stats.reserved_bytes,
            allocated: state.stats.allocated_bytes,
        }
    }

    /// Allocates `bytes` for use on `stream`.
    pub(crate) fn allocate(&self, bytes: usize, stream: StreamKey) -> Result<Allocation> {
        if !self.caching {
            return self.raw_allocate(bytes);
        }
        let mut st = self.state.lock();
        if bytes == 0 {
            st.stats.allocations += 1;
            return Ok(Allocation {
                ptr: DevicePtr::NULL,
                size: 0,
            });
        }
        let rounded = round_size(bytes);
        let (Some(rounded), Some(segment_size)) = (
            rounded,
            rounded.and_then(|r| Pool::for_size(r).segment_size(r)),
        ) else {
            return Err(self.out_of_memory(&st, bytes));
        };
        let pool = Pool::for_size(rounded);
        if !st.pending.is_empty() {
            st.process_events(&*self.backend);
        }
        let mut cached = st.take_parked(rounded, stream.id);
        if cached.is_none() {
            cached = st.take_cached(pool, rounded, stream.id);
        }
        if cached.is_none() && pool == Pool::Small && st.parked_bytes > 0 {
            // Before asking the device: the parked blocks (all of the small pool), merged, may
            // make room.
            st.unpark_all();
            cached = st.take_cached(pool, rounded, stream.id);
        }
        if let Some(ptr) = cached {
            st.stats.allocations += 1;
            st.stats.cache_hits += 1;
            return Ok(Allocation {
                ptr: DevicePtr(ptr),
                size: bytes,
            });
        }
        let base = match self.backend.malloc(segment_size) {
            Ok(base) => base,
            Err(e) if self.backend.is_out_of_memory(&e) => {
                // Handled here (release and retry, or Error::OutOfMemory): HIP 7 would keep
                // reporting the failed hipMalloc to whoever reads the last error next.
                self.backend.clear_last_error();
                self.backend.synchronize()?;
                st.on_synchronized();
                st.stats.oom_retries += 1;
                // Pending blocks freed by the synchronisation may fit now.
                if let Some(ptr) = st.take_cached(pool, rounded, stream.id) {
                    st.stats.allocations += 1;
                    st.stats.cache_hits += 1;
                    return Ok(Allocation {
                        ptr: DevicePtr(ptr),
                        size: bytes,
                    });
                }
                st.release_free_segments(&*self.backend);
                match self.backend.malloc(segment_size) {
                    Ok(base) => base,
                    Err(e) if self.backend.is_out_of_memory(&e) => {
                        self.backend.clear_last_error();
                        return Err(self.out_of_memory(&st, bytes));
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let key = st.add_segment(base.0, segment_size, pool, stream.id);
        match st.take_block(pool, key, rounded, stream.id) {
            Some(ptr) => {
                st.stats.allocations += 1;
                Ok(Allocation {
                    ptr: DevicePtr(ptr),
                    size: bytes,
                })
            }
            // Unreachable: the fresh segment fits the request. Keep it cached.
            None => Err(Error::invalid(
                "allocate",
                "caching allocator state is inconsistent",
            )),
        }
    }

    /// Returns a block; it becomes reusable in stream order on its allocating stream, and on
    /// other streams that used it (see [`CachingAllocator::record_stream`]) once their work is done.
    pub(crate) fn free(&self, allocation: Allocation) {
        if !self.caching {
            return self.raw_free(allocation);
        }
        let mut st = self.state.lock();
        st.stats.frees += 1;
        let ptr = allocation.ptr.0;
        if allocation.ptr == DevicePtr::NULL {
            return;
        }
        let Some(block) = st.blocks.get_mut(&ptr) else {
            return;
        };
        // Ignore a double free, or an allocation that does not describe this block.
        let fits = round_size(allocation.size).is_some_and(|r| r <= block.size);
        if block.state != BlockState::Allocated || !fits {
            return;
        }
        let uses = std::mem::take(&mut block.stream_uses);
        let (size, owner) = (block.size, block.owner);
        st.stats.allocated_bytes = st.stats.allocated_bytes.saturating_sub(size);
        st.stats.active_blocks = st.stats.active_blocks.saturating_sub(1);
        let uses: Vec<StreamKey> = uses
            .into_iter()
            .filter(|s| Owner::Stream(s.id) != owner && !st.retired.contains(&s.id))
            .collect();
        if uses.is_empty() {
            if !st.park(ptr) {
                st.release_block(ptr);
            }
            return;
        }
        if let Some(block) = st.blocks.get_mut(&ptr) {
            block.state = BlockState::Pending;
        }
        st.stats.pending_blocks += 1;
        st.stats.pending_bytes += size;
        for stream in uses {
            st.record_event(&*self.backend, ptr, stream);
        }
        let waiting = st.blocks.get(&ptr).map_or(0, |b| b.pending_events);
        if waiting == 0 {
            // Every stream was handled by a device synchronisation.
            st.release_block(ptr);
        }
    }

    /// Records that `allocation` is used by work queued on `stream` (other than its own).
    pub(crate) fn record_stream(&self, allocation: &Allocation, stream: StreamKey) {
        if allocation.ptr == DevicePtr::NULL {
            return;
        }
        let mut st = self.state.lock();
        let Some(block) = st.blocks.get_mut(&allocation.ptr.0) else {
            return;
        };
        if block.state == BlockState::Allocated
            && block.owner != Owner::Stream(stream.id)
            && !block.stream_uses.iter().any(|s| s.id == stream.id)
        {
            block.stream_uses.push(stream);
        }
    }

    /// Tells the allocator that a stream was synchronised and destroyed.
    pub(crate) fn stream_retired(&self, stream_id: u64) {
        let mut st = self.state.lock();
        st.unpark_all();
        let owner = Owner::Stream(stream_id);
        // Remember the id only while blocks still refer to it.
        if st.blocks.values().any(|b| {
            b.state != BlockState::Free
                && (b.owner == owner || b.stream_uses.iter().any(|s| s.id == stream_id))
        }) {
            st.retired.insert(stream_id);
        }
        for pool in [Pool::Small, Pool::Large, Pool::Huge] {
            let lo = FreeKey {
                owner,
                size: 0,
                ptr: 0,
            };
            let hi = FreeKey {
                owner,
                size: usize::MAX,
                ptr: u64::MAX,
            };
            let keys: Vec<FreeKey> = st.free[pool.index()].range(lo..=hi).copied().collect();
            for key in keys {
                // A block merged into an earlier one of this loop is gone from the set.
                if !st.free[pool.index()].remove(&key) {
                    continue;
                }
                if let Some(block) = st.blocks.get_mut(&key.ptr) {
                    block.owner = Owner::Unowned;
                }
                st.merge_and_insert(pool, key.ptr);
            }
        }
    }

    /// Releases every cached, unused segment back to the device.
    pub fn empty_cache(&self) -> Result<()> {
        let mut st = self.state.lock();
        self.backend.synchronize()?;
        st.on_synchronized();
        st.release_free_segments(&*self.backend);
        Ok(())
    }

    /// Current statistics.
    pub fn stats(&self) -> AllocatorStats {
        self.state.lock().stats
    }

    /// Resets the peak statistics to the current values.
    pub fn reset_peak_stats(&self) {
        let mut st = self.state.lock();
        st.stats.peak_allocated_bytes = st.stats.allocated_bytes;
        st.stats.peak_reserved_bytes = st.stats.reserved_bytes;
    }
}

/// Environment variables that turn the caching off for debugging, like PyTorch's
/// `PYTORCH_NO_CUDA_MEMORY_CACHING`: `1`, `true`, `yes` or `on` in either. `HIP_CORE_NO_CACHING`
/// is hip-core's own name; `CANDLE_ROCM_NO_CACHING` is accepted too, for users who know the
/// Candle backend above it. Read when a device's allocator is created (its first use).
pub const NO_CACHING_VARS: [&str; 2] = ["HIP_CORE_NO_CACHING", "CANDLE_ROCM_NO_CACHING"];

/// Whether one of [`NO_CACHING_VARS`], as `var` reads it, asks for no caching.
fn no_caching_requested(var: impl Fn(&str) -> Option<String>) -> bool {
    NO_CACHING_VARS.iter().any(|name| {
        var(name).is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        })
    })
}

/// No-caching mode.
impl CachingAllocator {
    /// One device allocation of exactly `bytes` (none for 0).
    fn raw_allocate(&self, bytes: usize) -> Result<Allocation> {
        let mut st = self.state.lock();
        if bytes == 0 {
            st.stats.allocations += 1;
            return Ok(Allocation {
                ptr: DevicePtr::NULL,
                size: 0,
            });
        }
        let ptr = match self.backend.malloc(bytes) {
            Ok(ptr) => ptr,
            Err(e) if self.backend.is_out_of_memory(&e) => {
                // Reported as Error::OutOfMemory: not left behind as the runtime's last error.
                self.backend.clear_last_error();
                return Err(self.out_of_memory(&st, bytes));
            }
            Err(e) => return Err(e),
        };
        st.raw.insert(ptr.0, bytes);
        let stats = &mut st.stats;
        stats.allocations += 1;
        stats.device_mallocs += 1;
        stats.segments += 1;
        stats.active_blocks += 1;
        stats.allocated_bytes += bytes;
        stats.reserved_bytes += bytes;
        stats.peak_allocated_bytes = stats.peak_allocated_bytes.max(stats.allocated_bytes);
        stats.peak_reserved_bytes = stats.peak_reserved_bytes.max(stats.reserved_bytes);
        Ok(Allocation { ptr, size: bytes })
    }

    /// Synchronises the device, then frees the allocation (and any earlier one still waiting
    /// for a synchronisation). Without a successful synchronisation the free waits.
    fn raw_free(&self, allocation: Allocation) {
        let size = {
            let mut st = self.state.lock();
            st.stats.frees += 1;
            // A null (zero-byte) allocation, a double free or a foreign address: nothing to do.
            let Some(size) = st.raw.remove(&allocation.ptr.0) else {
                return;
            };
            st.stats.allocated_bytes = st.stats.allocated_bytes.saturating_sub(size);
            st.stats.active_blocks = st.stats.active_blocks.saturating_sub(1);
            size
        };
        // Work queued on any stream may still use the memory: without the caching allocator's
        // stream order, it must be done before the memory goes back. Not under the lock, so
        // that other threads keep allocating meanwhile.
        let synchronized = self.backend.synchronize().is_ok();
        let mut st = self.state.lock();
        st.raw_deferred.push((allocation.ptr.0, size));
        if synchronized {
            let ready = std::mem::take(&mut st.raw_deferred);
            st.release_raw(&*self.backend, ready);
        }
    }
}

impl State {
    /// Frees no-caching allocations whose buffers are gone, after a device synchronisation;
    /// one whose free fails waits for the next synchronisation.
    fn release_raw(&mut self, backend: &dyn AllocatorBackend, allocations: Vec<(u64, usize)>) {
        for (ptr, size) in allocations {
            // SAFETY: `ptr` came from `backend.malloc` in no-caching mode and its buffer is
            // gone; the caller synchronised the device after that, so no queued work uses it.
            if unsafe { backend.free(DevicePtr(ptr)) }.is_err() {
                self.raw_deferred.push((ptr, size));
                continue;
            }
            self.stats.reserved_bytes = self.stats.reserved_bytes.saturating_sub(size);
            self.stats.segments = self.stats.segments.saturating_sub(1);
            self.stats.device_frees += 1;
        }
    }
}

impl Drop for CachingAllocator {
    fn drop(&mut self) {
        let backend = &*self.backend;
        let st = self.state.get_mut();
        if backend.synchronize().is_ok() {
            st.on_synchronized();
            // Segments with live blocks are left alone: their buffers may still be in use.
            st.release_free_segments(backend);
        }
        let events = st
            .event_pool
            .drain(..)
            .chain(st.pending.drain(..).filter_map(|p| p.event));
        for event in events {
            // SAFETY: the event is owned by the allocator and never used again (the runtime
            // defers the release of a recorded, incomplete event until it completes).
            let _ = unsafe { backend.event_destroy(event) };
        }
    }
}

#[cfg(test)]
impl State {
    /// Checks every structural invariant and the statistics against the blocks.
    fn check_invariants(&self) {
        let mut seen = 0usize;
        let (mut allocated, mut active, mut pending_blocks, mut pending_bytes) = (0, 0, 0, 0);
        let mut free_blocks = [0usize; 3];
        let mut reserved = 0;
        let (mut parked, mut parked_bytes) = (0usize, 0usize);
        for (&base, seg) in &self.segments {
            reserved += seg.size;
            let mut cursor = Some(base);
            let mut prev: Option<u64> = None;
            let (mut total, mut busy) = (0usize, 0usize);
            let mut prev_free_owner: Option<Owner> = None;
            while let Some(ptr) = cursor {
                let b = &self.blocks[&ptr];
                seen += 1;
                assert_eq!(b.segment, base, "block {ptr:#x} segment");
                assert_eq!(b.prev, prev, "block {ptr:#x} prev link");
                assert_eq!(ptr, base + total as u64, "blocks are contiguous");
                assert!(b.size >= MIN_BLOCK_SIZE && b.size % MIN_BLOCK_SIZE == 0);
                total += b.size;
                match b.state {
                    BlockState::Free => {
                        free_blocks[seg.pool.index()] += 1;
                        let key = FreeKey {
                            owner: b.owner,
                            size: b.size,
                            ptr,
                        };
                        assert!(
                            self.free[seg.pool.index()].contains(&key),
                            "{key:?} not in set"
                        );
                        assert_eq!(b.pending_events, 0);
                        if let Some(o) = prev_free_owner {
                            assert!(
                                o.merge(b.owner).is_none(),
                                "unmerged neighbours at {ptr:#x}"
                            );
                        }
                        prev_free_owner = Some(b.owner);
                    }
                    BlockState::Allocated => {
                        busy += 1;
                        allocated += b.size;
                        active += 1;
                        assert_eq!(b.pending_events, 0);
                        prev_free_owner = None;
                    }
                    BlockState::Parked => {
                        busy += 1;
                        parked += 1;
                        parked_bytes += b.size;
                        let Owner::Stream(id) = b.owner else {
                            panic!("parked block {ptr:#x} of no stream");
                        };
                        assert!(
                            self.parked
                                .get(&(id, b.size))
                                .is_some_and(|v| v.contains(&ptr)),
                            "parked block {ptr:#x} not in its list"
                        );
                        assert_eq!(b.pending_events, 0);
                        assert!(b.size <= SMALL_SIZE && seg.pool == Pool::Small);
                        prev_free_owner = None;
                    }
                    BlockState::Pending => {
                        busy += 1;
                        pending_blocks += 1;
                        pending_bytes += b.size;
                        let n = self.pending.iter().filter(|p| p.block == ptr).count();
                        assert_eq!(n, b.pending_events);
                        assert!(n > 0);
                        prev_free_owner = None;
                    }
                }
                prev = Some(ptr);
                cursor = b.next;
            }
            assert_eq!(total, seg.size, "segment {base:#x} size");
            assert_eq!(busy, seg.busy, "segment {base:#x} busy count");
        }
        assert_eq!(seen, self.blocks.len(), "orphan blocks");
        for (i, set) in self.free.iter().enumerate() {
            assert_eq!(set.len(), free_blocks[i], "free set {i} has stale keys");
        }
        for p in &self.pending {
            assert_eq!(self.blocks[&p.block].state, BlockState::Pending);
        }
        assert_eq!(
            self.parked.values().map(Vec::len).sum::<usize>(),
            parked,
            "parked lists"
        );
        assert_eq!(self.parked_bytes, parked_bytes);
        assert!(parked_bytes <= PARK_LIMIT);
        // No-caching mode: every live or deferred allocation is a segment of its own.
        for &size in self.raw.values() {
            (reserved, allocated, active) = (reserved + size, allocated + size, active + 1);
        }
        reserved += self
            .raw_deferred
            .iter()
            .map(|&(_, size)| size)
            .sum::<usize>();
        let s = &self.stats;
        assert_eq!(s.allocated_bytes, allocated);
        assert_eq!(s.active_blocks, active);
        assert_eq!(s.pending_blocks, pending_blocks);
        assert_eq!(s.pending_bytes, pending_bytes);
        assert_eq!(s.reserved_bytes, reserved);
        assert_eq!(
            s.segments,
            self.segments.len() + self.raw.len() + self.raw_deferred.len()
        );
        assert!(s.peak_allocated_bytes >= s.allocated_bytes);
        assert!(s.peak_reserved_bytes >= s.reserved_bytes);
        assert!(s.allocated_bytes + s.pending_bytes <= s.reserved_bytes);
    }
}

#[cfg(test)]
impl CachingAllocator {
    fn check(&self) {
        self.state.lock().check_invariants();
    }

    /// The size of the block at `ptr`.
    fn block_size(&self, ptr: DevicePtr) -> usize {
        self.state.lock().blocks[&ptr.0].size
    }

    /// Number of blocks in the segment at `base`.
    fn blocks_in_segment(&self, base: DevicePtr) -> usize {
        let st = self.state.lock();
        st.blocks.values().filter(|b| b.segment == base.0).count()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};
    use std::ffi::c_void;
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::*;

    const KIB: usize = 1 << 10;
    const MIB: usize = 1 << 20;

    #[derive(Debug, Default)]
    struct FakeState {
        next_addr: u64,
        capacity: usize,
        used: usize,
        live: BTreeMap<u64, usize>,
        fail_other: bool,
        malloc_calls: u64,
        mallocs_ok: u64,
        free_calls: u64,
        syncs: u64,
        event_creates: u64,
        event_records: u64,
        event_queries: u64,
        event_destroys: u64,
        /// Calls of `clear_last_error` (one per out-of-memory the allocator handled).
        last_error_clears: u64,
        /// Synchronisations fail (no-caching tests).
        fail_sync: bool,
        /// For each successful free: (address, synchronisations done before it).
        freed: Vec<(u64, u64)>,
        next_event: usize,
        /// Live events: completed?
        events: HashMap<usize, bool>,
        /// The stream each event was last recorded on.
        recorded_on: HashMap<usize, usize>,
    }

    /// A fake runtime: increasing addresses, a capacity, events the test completes.
    #[derive(Debug, Clone)]
    struct FakeBackend(Arc<Mutex<FakeState>>);

    impl FakeBackend {
        fn new(capacity: usize) -> Self {
            FakeBackend(Arc::new(Mutex::new(FakeState {
                next_addr: 0x7f00_0000_0000,
                capacity,
                next_event: 1,
                ..Default::default()
            })))
        }

        fn st(&self) -> parking_lot::MutexGuard<'_, FakeState> {
            self.0.lock()
        }

        /// Total number of backend calls of any kind.
        fn calls(&self) -> u64 {
            let s = self.st();
            s.malloc_calls
                + s.free_calls
                + s.syncs
                + s.event_creates
                + s.event_records
                + s.event_queries
                + s.event_destroys
        }

        fn complete_all_events(&self) {
            self.st().events.values_mut().for_each(|done| *done = true);
        }

        fn segment_sizes(&self) -> Vec<usize> {
            self.st().live.values().copied().collect()
        }
    }

    fn oom_error() -> Error {
        Error::Api {
            call: "hipMalloc",
            code: 2,
            name: "hipErrorOutOfMemory".into(),
            message: "out of memory".into(),
            context: None,
        }
    }

    fn event_id(event: RawEvent) -> usize {
        event.0.addr()
    }

    impl AllocatorBackend for FakeBackend {
        fn malloc(&self, bytes: usize) -> Result<DevicePtr> {
            let mut s = self.st();
            s.malloc_calls += 1;
            if s.fail_other {
                return Err(Error::invalid("hipMalloc", "injected failure"));
            }
            if s.used + bytes > s.capacity {
                return Err(oom_error());
            }
            let addr = s.next_addr;
            // Leave a gap so that separate segments are never adjacent.
            s.next_addr += (bytes + MIB) as u64;
            s.used += bytes;
            s.live.insert(addr, bytes);
            s.mallocs_ok += 1;
            Ok(DevicePtr(addr))
        }
        fn is_out_of_memory(&self, err: &Error) -> bool {
            err.api_name() == Some("hipErrorOutOfMemory")
        }
        fn clear_last_error(&self) {
            self.st().last_error_clears += 1;
        }
        unsafe fn free(&self, ptr: DevicePtr) -> Result<()> {
            let mut s = self.st();
            s.free_calls += 1;
            match s.live.remove(&ptr.0) {
                Some(size) => {
                    s.used -= size;
                    let syncs = s.syncs;
                    s.freed.push((ptr.0, syncs));
                    Ok(())
                }
                None => Err(Error::invalid("hipFree", "unknown pointer")),
            }
        }
        fn synchronize(&self) -> Result<()> {
            let mut s = self.st();
            if s.fail_sync {
                return Err(Error::invalid("hipDeviceSynchronize", "injected failure"));
            }
            s.syncs += 1;
            s.events.values_mut().for_each(|done| *done = true);
            Ok(())
        }
        fn event_create(&self) -> Result<RawEvent> {
            let mut s = self.st();
            s.event_creates += 1;
            let id = s.next_event;
            s.next_event += 1;
            s.events.insert(id, true);
            Ok(RawEvent(std::ptr::without_provenance_mut::<c_void>(id)))
        }
        unsafe fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()> {
            let mut s = self.st();
            s.event_records += 1;
            let id = event_id(event);
            assert!(s.events.contains_key(&id), "recording a dead event");
            s.events.insert(id, false);
            s.recorded_on.insert(id, stream.0.addr());
            Ok(())
        }
        unsafe fn event_query(&self, event: RawEvent) -> Result<bool> {
            let mut s = self.st();
            s.event_queries += 1;
            Ok(*s
                .events
                .get(&event_id(event))
                .expect("querying a dead event"))
        }
        unsafe fn event_destroy(&self, event: RawEvent) -> Result<()> {
            let mut s = self.st();
            s.event_destroys += 1;
            s.events
                .remove(&event_id(event))
                .expect("destroying a dead event");
            Ok(())
        }
    }

    fn stream(id: u64) -> StreamKey {
        StreamKey {
            id,
            raw: RawStream(std::ptr::without_provenance_mut::<c_void>(
                0x5000 + id as usize,
            )),
        }
    }

    fn setup(capacity: usize) -> (CachingAllocator, FakeBackend) {
        let fake = FakeBackend::new(capacity);
        let a = CachingAllocator::with_caching(0, Box::new(fake.clone()), true);
        (a, fake)
    }

    /// An allocator in no-caching mode over a fake.
    fn setup_no_caching(capacity: usize) -> (CachingAllocator, FakeBackend) {
        let fake = FakeBackend::new(capacity);
        let a = CachingAllocator::with_caching(0, Box::new(fake.clone()), false);
        (a, fake)
    }

    #[test]
    fn allocator_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<CachingAllocator>();
    }

    #[test]
    fn size_rounding_and_pool_choice() {
        assert_eq!(round_size(1), Some(512));
        assert_eq!(round_size(512), Some(512));
        assert_eq!(round_size(513), Some(1024));
        assert_eq!(round_size(usize::MAX), None);
        assert_eq!(Pool::for_size(MIB), Pool::Small);
        assert_eq!(Pool::for_size(MIB + 512), Pool::Large);
        assert_eq!(Pool::for_size(20 * MIB), Pool::Large);
        assert_eq!(Pool::for_size(20 * MIB + 512), Pool::Huge);
        assert_eq!(Pool::Small.segment_size(512), Some(2 * MIB));
        assert_eq!(Pool::Large.segment_size(MIB + 512), Some(20 * MIB));
        assert_eq!(Pool::Large.segment_size(10 * MIB - 512), Some(20 * MIB));
        assert_eq!(Pool::Large.segment_size(10 * MIB), Some(10 * MIB));
        assert_eq!(Pool::Large.segment_size(15 * MIB + 512), Some(16 * MIB));
        assert_eq!(Pool::Huge.segment_size(25 * MIB + 512), Some(26 * MIB));

        let (a, fake) = setup(usize::MAX);
        let s = stream(1);
        let x = a.allocate(1, s).unwrap();
        assert_eq!((x.size, a.block_size(x.ptr)), (1, 512));
        // 15 MiB: a dedicated 16 MiB segment; the 1 MiB remainder is not worth a split.
        let z = a.allocate(15 * MIB, s).unwrap();
        assert_eq!(a.block_size(z.ptr), 16 * MIB);
        let y = a.allocate(MIB + 1, s).unwrap();
        assert_eq!(a.block_size(y.ptr), MIB + 512);
        // 24 MiB + 1: a 26 MiB segment, split (the remainder is over 1 MiB).
        let w = a.allocate(24 * MIB + 1, s).unwrap();
        assert_eq!(a.block_size(w.ptr), 24 * MIB + 512);
        assert_eq!(
            fake.segment_sizes(),
            vec![2 * MIB, 16 * MIB, 20 * MIB, 26 * MIB]
        );
        let st = a.stats();
        assert_eq!(
            st.allocated_bytes,
            512 + MIB + 512 + 16 * MIB + 24 * MIB + 512
        );
        assert_eq!(st.reserved_bytes, 64 * MIB);
        assert_eq!(
            (st.segments, st.device_mallocs, st.active_blocks),
            (4, 4, 4)
        );
        // A medium request never carves the cached huge remainder (2 MiB - 512 bytes).
        let v = a.allocate(MIB + 512, s).unwrap();
        assert_eq!(a.stats().device_mallocs, 4);
        assert!(v.ptr.0 > y.ptr.0 && v.ptr.0 < y.ptr.0 + 20 * MIB as u64);
        // A small request never takes a large-pool block: a new 2 MiB segment after the first.
        let mut smalls = Vec::new();
        for _ in 0..4 {
            smalls.push(a.allocate(512 * KIB - 100, s).unwrap());
        }
        assert_eq!(a.stats().device_mallocs, 5);
        assert_eq!(fake.segment_sizes()[4], 2 * MIB);
        a.check();
        for b in [x, y, z, w, v].into_iter().chain(smalls) {
            a.free(b);
        }
        a.check();
    }

    #[test]
    fn splitting_and_remainder_reuse() {
        let (a, fake) = setup(usize::MAX);
        let s = stream(1);
        let x = a.allocate(1000, s).unwrap();
        let y = a.allocate(1000, s).unwrap();
        assert_eq!(y.ptr, x.ptr.byte_offset(1024));
        assert_eq!(fake.st().mallocs_ok, 1);
        assert_eq!(a.stats().cache_hits, 1);
        assert_eq!(a.blocks_in_segment(x.ptr), 3);

        let l1 = a.allocate(4 * MIB, s).unwrap();
        let l2 = a.allocate(8 * MIB, s).unwrap();
        let l3 = a.allocate(8 * MIB, s).unwrap();
        assert_eq!(l2.ptr, l1.ptr.byte_offset(4 * MIB));
        assert_eq!(l3.ptr, l1.ptr.byte_offset(12 * MIB));
        assert_eq!(fake.st().mallocs_ok, 2);
        assert_eq!(a.blocks_in_segment(l1.ptr), 3);
        // The segment is used up: the next large request needs a new one.
        let l4 = a.allocate(2 * MIB, s).unwrap();
        assert_eq!(fake.st().mallocs_ok, 3);
        // A remainder of exactly 1 MiB is not split off in the large pool.
        a.free(l3);
        let l5 = a.allocate(7 * MIB, s).unwrap();
        assert_eq!(l5.ptr, l1.ptr.byte_offset(12 * MIB));
        assert_eq!(a.block_size(l5.ptr), 8 * MIB);
        a.check();
        for b in [x, y, l1, l2, l4, l5] {
            a.free(b);
        }
        a.check();
        assert_eq!(a.stats().allocated_bytes, 0);
    }

    #[test]
    fn adjacent_frees_merge_back_into_one_block() {
        let (a, fake) = setup(usize::MAX);
        let s = stream(1);
        let parts: Vec<_> = (0..4).map(|_| a.allocate(5 * MIB, s).unwrap()).collect();
        let base = parts[0].ptr;
        assert_eq!(a.blocks_in_segment(base), 4);
        let mut parts = parts.into_iter();
        let (p0, p1, p2, p3) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        a.free(p0);
        a.free(p2);
        assert_eq!(a.blocks_in_segment(base), 4);
        a.free(p1); // merges with both neighbours
        assert_eq!(a.blocks_in_segment(base), 2);
        a.free(p3);
        assert_eq!(a.blocks_in_segment(base), 1);
        a.check();
        // The whole segment fits a full-size request without a new device allocation.
        let calls = fake.calls();
        let full = a.allocate(20 * MIB, s).unwrap();
        assert_eq!(full.ptr, base);
        assert_eq!(fake.calls(), calls);
        a.free(full);

        // In the small pool freed blocks are parked whole first (reused by requests of their
        // size), and merged when a request needs the room: freeing in another order, then
        // asking for a size no parked block has.
        let smalls: Vec<_> = (0..4).map(|_| a.allocate(512 * KIB, s).unwrap()).collect();
        let sbase = smalls[0].ptr;
        for b in smalls.into_iter().rev() {
            a.free(b);
        }
        assert_eq!(a.blocks_in_segment(sbase), 4);
        a.check();
        let again: Vec<_> = (0..4).map(|_| a.allocate(512 * KIB, s).unwrap()).collect();
        assert_eq!(fake.st().mallocs_ok, 2);
        assert_eq!(again[0].ptr, sbase); // the last parked is the first taken
        for b in again {
            a.free(b);
        }
        let calls = fake.calls();
        let mib = a.allocate(MIB, s).unwrap();
        assert_eq!(fake.calls(), calls);
        assert_eq!(mib.ptr, sbase);
        assert_eq!(a.blocks_in_segment(sbase), 2);
        a.free(mib);
        a.check();
    }

    #[test]
    fn parked_blocks_serve_their_stream_and_size_only_and_never_cost_a_segment() {
        let (a, fake) = setup(usize::MAX);
        let (s1, s2) = (stream(1), stream(2));
        let x = a.allocate(600 * KIB, s1).unwrap();
        let xp = x.ptr;
        a.free(x);
        assert_eq!(a.stats().allocated_bytes, 0);
        a.check();
        // Another size, another stream: not the parked block.
        let other_size = a.allocate(500 * KIB, s1).unwrap();
        assert_ne!(other_size.ptr, xp);
        let other_stream = a.allocate(600 * KIB, s2).unwrap();
        assert_ne!(other_stream.ptr, xp);
        // Its stream and size: the parked block, without a call.
        let calls = fake.calls();
        let hits = a.stats().cache_hits;
        let again = a.allocate(600 * KIB, s1).unwrap();
        assert_eq!(again.ptr, xp);
        assert_eq!(fake.calls(), calls);
        assert_eq!(a.stats().cache_hits, hits + 1);
        assert_eq!(a.stats().allocated_bytes, 1700 * KIB);
        a.check();
        // A double free of a parked block is ignored.
        let copy = Allocation {
            ptr: again.ptr,
            size: again.size,
        };
        a.free(again);
        a.free(copy);
        a.check();
        // Large blocks are not parked: freed, they merge at once.
        let big = a.allocate(4 * MIB, s1).unwrap();
        let base = big.ptr;
        a.free(big);
        assert_eq!(a.blocks_in_segment(base), 1);
        // A request that needs a new segment first merges the parked blocks: stream 1's small
        // segment (2 MiB: the parked 600 and 500 KiB, the rest, 948 KiB, free) then serves 1 MiB.
        a.free(other_size);
        let segments = a.stats().segments;
        let mib = a.allocate(MIB, s1).unwrap();
        assert_eq!(a.stats().segments, segments);
        assert_eq!(mib.ptr, xp);
        a.check();
        // A retired stream's parked blocks go to every stream.
        a.free(other_stream);
        a.stream_retired(2);
        a.check();
        let taken = a.allocate(600 * KIB, stream(3)).unwrap();
        assert_eq!(a.stats().segments, segments);
        a.check();
        for b in [mib, taken] {
            a.free(b);
        }
        a.empty_cache().unwrap();
        assert_eq!(a.stats().reserved_bytes, 0);
        a.check();
    }

    #[test]
    fn same_stream_reuse_makes_no_backend_call() {
        let (a, fake) = setup(usize::MAX);
        let s = stream(7);
        let sizes = [100, 4096, 300 * KIB, MIB, 3 * MIB, 12 * MIB, 40 * MIB];
        for &n in &sizes {
            let b = a.allocate(n, s).unwrap();
            a.free(b);
        }
        let calls = fake.calls();
        let before = a.stats();
        for round in 0..50 {
            let live: Vec<_> = sizes
                .iter()
                .map(|&n| a.allocate(n - round % 3, s).unwrap())
                .collect();
            for b in &live {
                a.record_stream(b, s); // own stream: nothing to do
            }
            for b in live {
                a.free(b);
            }
        }
        assert_eq!(fake.calls(), calls, "the hot path called the backend");
        let after = a.stats();
        assert_eq!(
            after.cache_hits - before.cache_hits,
            50 * sizes.len() as u64
        );
        assert_eq!(after.device_mallocs, before.device_mallocs);
        a.check();
    }

    #[test]
    fn a_block_freed_on_one_stream_is_not_reused_by_another() {
        let (a, fake) = setup(usize::MAX);
        let (s1, s2) = (stream(1), stream(2));
        let x = a.allocate(4096, s1).unwrap();
        let xp = x.ptr;
        a.free(x);
        let y = a.allocate(4096, s2).unwrap();
        assert_ne!(y.ptr, xp);
        assert_eq!(fake.st().mallocs_ok, 2);
        // Stream 1 still gets its own block back.
        let z = a.allocate(4096, s1).unwrap();
        assert_eq!(z.ptr, xp);
        a.free(y);
        a.free(z);
        a.check();
    }

    #[test]
    fn cross_stream_use_defers_reuse_until_the_event_completes() {
        let (a, fake) = setup(usize::MAX);
        let (s1, s2) = (stream(1), stream(2));
        let x = a.allocate(64 * KIB, s1).unwrap();
        let xp = x.ptr;
        a.record_stream(&x, s2);
        a.record_stream(&x, s2); // recorded once
        a.free(x);
        {
            let f = fake.st();
            assert_eq!((f.event_creates, f.event_records), (1, 1));
            assert_eq!(
                f.recorded_on.values().copied().collect::<Vec<_>>(),
                vec![0x5002]
            );
        }
        let st = a.stats();
        assert_eq!((st.pending_blocks, st.pending_bytes), (1, 64 * KIB));
        assert_eq!(st.allocated_bytes, 0);
        a.check();

        // Not reusable while stream 2's work may still run.
        let y = a.allocate(64 * KIB, s1).unwrap();
        let yp = y.ptr;
        assert_ne!(yp, xp);
        assert_eq!(fake.st().event_queries, 1);
        a.free(y); // parked: freed by its own stream, no other stream used it

        fake.complete_all_events();
        // The parked block serves the next request of its size; x's is free again after it.
        let y = a.allocate(64 * KIB, s1).unwrap();
        assert_eq!(y.ptr, yp);
        let z = a.allocate(64 * KIB, s1).unwrap();
        assert_eq!(z.ptr, xp);
        assert_eq!(a.stats().pending_blocks, 0);
        a.free(y);
        a.check();

        // The pending list is empty again: the hot path makes no call.
        let calls = fake.calls();
        a.free(z);
        let z = a.allocate(64 * KIB, s1).unwrap();
        assert_eq!(fake.calls(), calls);

        // The event is reused from the pool.
        a.record_stream(&z, s2);
        a.free(z);
        assert_eq!(fake.st().event_creates, 1);
        assert_eq!(fake.st().event_records, 2);

        // A retired stream needs no event.
        let w = a.allocate(64 * KIB, s1).unwrap();
        a.record_stream(&w, stream(3));
        a.stream_retired(3);
        let records = fake.st().event_records;
        a.free(w);
        assert_eq!(fake.st().event_records, records);
        a.check();

        drop(a);
        let f = fake.st();
        assert!(f.events.is_empty(), "events leaked: {:?}", f.events);
        assert!(f.live.is_empty());
    }

    #[test]
    fn retired_stream_blocks_go_to_any_stream() {
        let (a, fake) = setup(usize::MAX);
        let (s1, s2, s3) = (stream(1), stream(2), stream(3));
        let x = a.allocate(3 * MIB, s1).unwrap();
        let live = a.allocate(3 * MIB, s1).unwrap();
        let xp = x.ptr;
        a.free(x);
        let y = a.allocate(3 * MIB, s2).unwrap();
        assert_ne!(y.ptr, xp);
        assert_eq!(fake.st().mallocs_ok, 2);
        a.stream_retired(1);
        a.check();
        let calls = fake.calls();
        let z = a.allocate(3 * MIB, s3).unwrap();
        assert_eq!(z.ptr, xp);
        assert_eq!(fake.calls(), calls);
        // A block of the retired stream freed later is unowned too.
        let lp = live.ptr;
        a.free(live);
        a.free(z);
        a.check();
        let w = a.allocate(3 * MIB, stream(4)).unwrap();
        assert!(w.ptr == xp || w.ptr == lp);
        assert_eq!(fake.st().mallocs_ok, 2);
        a.free(w);
        a.free(y);
        a.check();
    }

    #[test]
    fn out_of_memory_releases_the_cache_and_retries() {
        let (a, fake) = setup(40 * MIB);
        let (s1, s2) = (stream(1), stream(2));
        let x = a.allocate(30 * MIB, s1).unwrap();
        a.free(x);
        // Stream 2 cannot use stream 1's cached block; the device is full until it is released.
        let y = a.allocate(30 * MIB, s2).unwrap();
        let st = a.stats();
        assert_eq!(st.oom_retries, 1);
        assert_eq!((st.device_mallocs, st.device_frees), (2, 1));
        assert_eq!((st.reserved_bytes, st.segments), (30 * MIB, 1));
        assert_eq!(fake.st().syncs, 1);
        assert_eq!(fake.st().malloc_calls, 3);
        // The handled out-of-memory does not stay behind as the runtime's last error.
        assert_eq!(fake.st().last_error_clears, 1);
        a.free(y);
        a.check();
    }

    #[test]
    fn out_of_memory_resolves_pending_blocks_before_retrying() {
        let (a, fake) = setup(40 * MIB);
        let (s1, s2) = (stream(1), stream(2));
        let x = a.allocate(30 * MIB, s1).unwrap();
        let xp = x.ptr;
        a.record_stream(&x, s2);
        a.free(x);
        // Pending: not reusable yet, and a new segment does not fit; the synchronisation
        // completes the event and the block is reused rather than released.
        let y = a.allocate(30 * MIB, s1).unwrap();
        assert_eq!(y.ptr, xp);
        let st = a.stats();
        assert_eq!(
            (st.oom_retries, st.device_frees, st.pending_blocks),
            (1, 0, 0)
        );
        let f = fake.st();
        assert_eq!((f.syncs, f.malloc_calls, f.last_error_clears), (1, 2, 1));
        drop(f);
        a.free(y);
        a.check();
    }

    #[test]
    fn out_of_memory_with_everything_live_reports_the_numbers() {
        let fake = FakeBackend::new(40 * MIB);
        let a = CachingAllocator::new(3, Box::new(fake.clone()));
        let s = stream(1);
        let x = a.allocate(30 * MIB, s).unwrap();
        let err = a.allocate(20 * MIB, s).unwrap_err();
        match err {
            Error::OutOfMemory {
                device,
                requested,
                reserved,
                allocated,
            } => {
                assert_eq!(device, 3);
                assert_eq!(requested, 20 * MIB);
                assert_eq!(reserved, 30 * MIB);
                assert_eq!(allocated, 30 * MIB);
            }
            other => panic!("unexpected error {other:?}"),
        }
        let st = a.stats();
        assert_eq!(st.oom_retries, 1);
        assert_eq!((st.allocations, st.active_blocks), (1, 1));
        assert_eq!(st.reserved_bytes, 30 * MIB);
        // Both failed hipMallocs (the first try and the retry) were cleared.
        assert_eq!(fake.st().last_error_clears, 2);
        // Other errors pass through unchanged, without a retry (and are the caller's to read).
        fake.st().fail_other = true;
        let err = a.allocate(MIB, s).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidArgument {
                    op: "hipMalloc",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(a.stats().oom_retries, 1);
        assert_eq!(fake.st().last_error_clears, 2);
        fake.st().fail_other = false;
        // A request that cannot even be rounded is out of memory.
        let err = a.allocate(usize::MAX - 3, s).unwrap_err();
        assert!(matches!(err, Error::OutOfMemory { .. }), "{err:?}");
        a.free(x);
        a.check();
    }

    #[test]
    fn empty_cache_releases_only_fully_free_segments() {
        let (a, fake) = setup(usize::MAX);
        let (s1, s2) = (stream(1), stream(2));
        let live = a.allocate(4096, s1).unwrap(); // small segment stays
        let cached = a.allocate(4096, s1).unwrap();
        a.free(cached);
        let big = a.allocate(5 * MIB, s1).unwrap(); // large segment, fully free
        a.free(big);
        let shared = a.allocate(40 * MIB, s1).unwrap(); // huge segment, pending
        a.record_stream(&shared, s2);
        a.free(shared);
        assert_eq!(a.stats().segments, 3);
        a.empty_cache().unwrap();
        let st = a.stats();
        assert_eq!((st.segments, st.reserved_bytes), (1, 2 * MIB));
        assert_eq!((st.device_frees, st.pending_blocks), (2, 0));
        assert_eq!(fake.segment_sizes(), vec![2 * MIB]);
        assert_eq!(st.allocated_bytes, 4096);
        a.check();
        a.free(live);
        a.empty_cache().unwrap();
        let st = a.stats();
        assert_eq!((st.segments, st.reserved_bytes, st.device_frees), (0, 0, 3));
        assert!(fake.st().live.is_empty());
        assert_eq!(st.peak_reserved_bytes, 62 * MIB);
        a.reset_peak_stats();
        assert_eq!(a.stats().peak_reserved_bytes, 0);
        a.check();
    }

    #[test]
    fn zero_byte_allocation() {
        let (a, fake) = setup(usize::MAX);
        let s = stream(1);
        let z = a.allocate(0, s).unwrap();
        assert_eq!((z.ptr, z.size), (DevicePtr::NULL, 0));
        a.record_stream(&z, stream(2));
        a.free(z);
        assert_eq!(fake.calls(), 0);
        let st = a.stats();
        assert_eq!((st.allocations, st.frees, st.active_blocks), (1, 1, 0));
        assert_eq!(
            (st.allocated_bytes, st.reserved_bytes, st.cache_hits),
            (0, 0, 0)
        );
        // A foreign pointer is ignored, not a panic.
        a.free(Allocation {
            ptr: DevicePtr(0x1234),
            size: 8,
        });
        assert_eq!(a.stats().frees, 2);
        // So is an allocation that does not match its block.
        let x = a.allocate(512, s).unwrap();
        a.free(Allocation {
            ptr: x.ptr,
            size: 4096,
        });
        assert_eq!(a.stats().active_blocks, 1);
        a.free(x);
        assert_eq!((a.stats().active_blocks, a.stats().frees), (0, 4));
        a.check();
    }

    #[test]
    fn drop_releases_the_cache_and_events() {
        let (a, fake) = setup(usize::MAX);
        let (s1, s2) = (stream(1), stream(2));
        for n in [100, 5 * MIB, 30 * MIB] {
            let x = a.allocate(n, s1).unwrap();
            a.record_stream(&x, s2);
            a.free(x);
        }
        assert_eq!(fake.st().live.len(), 3);
        drop(a);
        let f = fake.st();
        assert!(f.live.is_empty());
        assert!(f.events.is_empty());
        assert_eq!(f.event_destroys, f.event_creates);
    }

    #[test]
    fn concurrent_use_keeps_the_books() {
        let (a, fake) = setup(usize::MAX);
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let a = &a;
                scope.spawn(move || {
                    let s = stream(t + 1);
                    let mut rng = Lcg(t);
                    let mut live = Vec::new();
                    for _ in 0..500 {
                        if rng.below(2) == 0 || live.is_empty() {
                            let n = rng.below(3 * MIB as u64) as usize;
                            live.push(a.allocate(n, s).unwrap());
                        } else {
                            let i = rng.below(live.len() as u64) as usize;
                            let x = live.swap_remove(i);
                            a.record_stream(&x, stream((t + 1) % 4 + 1));
                            a.free(x);
                        }
                    }
                    for x in live {
                        a.free(x);
                    }
                });
            }
        });
        a.check();
        let st = a.stats();
        assert_eq!(st.allocations, st.frees);
        assert_eq!((st.allocated_bytes, st.active_blocks), (0, 0));
        a.empty_cache().unwrap();
        assert_eq!(a.stats().reserved_bytes, 0);
        assert!(fake.st().live.is_empty());
    }

    /// A fixed-seed LCG (Knuth's MMIX constants).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn random_sequence_matches_the_model() {
        let (a, fake) = setup(96 * MIB);
        let mut rng = Lcg(0x5eed);
        let mut streams: Vec<u64> = vec![1, 2, 3];
        let mut next_stream = 4;
        let mut max_pending = 0;
        // Model.
        let mut live: Vec<(Allocation, u64)> = Vec::new();
        let (mut allocations, mut frees, mut ooms, mut zero_sized) = (0u64, 0u64, 0u64, 0u64);
        let (mut peak_alloc, mut peak_res) = (0usize, 0usize);
        for step in 0..4000 {
            match rng.below(100) {
                0..=44 => {
                    let n = match rng.below(20) {
                        0 => 0,
                        1..=12 => rng.below(64 * KIB as u64) as usize + 1,
                        13..=16 => rng.below(MIB as u64) as usize + 1,
                        17..=18 => rng.below(12 * MIB as u64) as usize + MIB,
                        _ => rng.below(20 * MIB as u64) as usize + 20 * MIB,
                    };
                    let sid = streams[rng.below(streams.len() as u64) as usize];
                    match a.allocate(n, stream(sid)) {
                        Ok(x) => {
                            assert_eq!(x.size, n);
                            allocations += 1;
                            zero_sized += u64::from(n == 0);
                            live.push((x, sid));
                        }
                        Err(Error::OutOfMemory {
                            requested,
                            reserved,
                            allocated,
                            ..
                        }) => {
                            ooms += 1;
                            let st = a.stats();
                            assert_eq!(requested, n);
                            assert_eq!(
                                (reserved, allocated),
                                (st.reserved_bytes, st.allocated_bytes)
                            );
                        }
                        Err(e) => panic!("step {step}: {e:?}"),
                    }
                }
                45..=91 if !live.is_empty() => {
                    let i = rng.below(live.len() as u64) as usize;
                    let (x, _) = live.swap_remove(i);
                    a.free(x);
                    frees += 1;
                }
                92..=95 if !live.is_empty() => {
                    let i = rng.below(live.len() as u64) as usize;
                    let other = streams[rng.below(streams.len() as u64) as usize];
                    a.record_stream(&live[i].0, stream(other));
                }
                96 => fake.complete_all_events(),
                97 => a.empty_cache().unwrap(),
                98 => {
                    // A stream is retired once its own buffers are gone; start a new one.
                    let i = rng.below(streams.len() as u64) as usize;
                    let sid = streams[i];
                    let (mine, others): (Vec<_>, Vec<_>) =
                        live.drain(..).partition(|(_, s)| *s == sid);
                    live = others;
                    for (x, _) in mine {
                        a.free(x);
                        frees += 1;
                    }
                    a.stream_retired(sid);
                    streams[i] = next_stream;
                    next_stream += 1;
                }
                _ => {
                    a.reset_peak_stats();
                    let st = a.stats();
                    peak_alloc = st.allocated_bytes;
                    peak_res = st.reserved_bytes;
                }
            }
            a.check();
            let st = a.stats();
            let f = fake.st();
            peak_alloc = peak_alloc.max(st.allocated_bytes);
            peak_res = peak_res.max(st.reserved_bytes);
            max_pending = max_pending.max(st.pending_blocks);
            assert_eq!(st.allocations, allocations, "step {step}");
            assert_eq!(st.frees, frees);
            let blocks: Vec<_> = live.iter().filter(|(x, _)| x.size > 0).collect();
            assert_eq!(st.active_blocks, blocks.len());
            let block_bytes: usize = blocks.iter().map(|(x, _)| a.block_size(x.ptr)).sum();
            assert_eq!(st.allocated_bytes, block_bytes);
            for (x, _) in &blocks {
                let rounded = round_size(x.size).unwrap();
                let size = a.block_size(x.ptr);
                assert!(
                    size >= rounded && size - rounded <= MIB,
                    "{size} for {rounded}"
                );
            }
            assert_eq!(st.reserved_bytes, f.used);
            assert_eq!(st.segments, f.live.len());
            assert_eq!(st.device_mallocs, f.mallocs_ok);
            assert_eq!(st.device_frees, f.free_calls);
            // Every request was a zero-byte one, a cache hit or served by a new segment.
            assert_eq!(
                st.allocations,
                st.cache_hits + st.device_mallocs + zero_sized
            );
            // Every failed device allocation was followed by a retry or reported.
            assert_eq!(f.malloc_calls - f.mallocs_ok, st.oom_retries + ooms);
            // ... and each of those failures was cleared from the runtime's last error.
            assert_eq!(f.last_error_clears, f.malloc_calls - f.mallocs_ok);
            assert_eq!(st.peak_allocated_bytes, peak_alloc, "step {step}");
            assert_eq!(st.peak_reserved_bytes, peak_res, "step {step}");
            // Live blocks never overlap and lie inside device segments.
            let mut spans: Vec<(u64, u64)> = blocks
                .iter()
                .map(|(x, _)| (x.ptr.0, x.ptr.0 + a.block_size(x.ptr) as u64))
                .collect();
            spans.sort_unstable();
            for w in spans.windows(2) {
                assert!(w[0].1 <= w[1].0, "overlapping blocks {w:?}");
            }
            for (lo, hi) in spans {
                let (&base, &size) = f.live.range(..=lo).next_back().expect("outside segments");
                assert!(hi <= base + size as u64);
            }
        }
        // The sequence covers every path.
        let st = a.stats();
        assert!(ooms > 0 && st.oom_retries > ooms, "{ooms} {st:?}");
        assert!(
            max_pending > 1 && next_stream > 6 && st.cache_hits > 1000,
            "{max_pending} {next_stream} {st:?}"
        );
        assert!(st.device_frees > 10, "{st:?}");
        for (x, _) in live {
            a.free(x);
        }
        a.empty_cache().unwrap();
        let st = a.stats();
        assert_eq!(
            (st.allocated_bytes, st.reserved_bytes, st.segments),
            (0, 0, 0)
        );
        assert!(fake.st().live.is_empty());
        a.check();
    }

    #[test]
    fn no_caching_is_asked_for_by_either_variable() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(!no_caching_requested(env(&[])));
        assert!(no_caching_requested(env(&[("HIP_CORE_NO_CACHING", "1")])));
        assert!(no_caching_requested(env(&[(
            "CANDLE_ROCM_NO_CACHING",
            "1"
        )])));
        assert!(no_caching_requested(env(&[(
            "HIP_CORE_NO_CACHING",
            " True "
        )])));
        assert!(no_caching_requested(env(&[
            ("HIP_CORE_NO_CACHING", "0"),
            ("CANDLE_ROCM_NO_CACHING", "on"),
        ])));
        assert!(!no_caching_requested(env(&[("HIP_CORE_NO_CACHING", "0")])));
        assert!(!no_caching_requested(env(&[(
            "CANDLE_ROCM_NO_CACHING",
            ""
        )])));
        assert!(!no_caching_requested(env(&[(
            "PYTORCH_NO_CUDA_MEMORY_CACHING",
            "1"
        )])));
        let (a, _) = setup(MIB);
        let (b, _) = setup_no_caching(MIB);
        assert!(a.is_caching() && !b.is_caching());
    }

    #[test]
    fn no_caching_allocates_and_frees_each_buffer_on_the_device() {
        let (a, fake) = setup_no_caching(usize::MAX);
        let s = stream(1);
        // Exactly the requested bytes: no rounding, no segment to carve.
        let x = a.allocate(100, s).unwrap();
        let y = a.allocate(3 * MIB + 1, s).unwrap();
        assert_eq!(fake.segment_sizes(), vec![100, 3 * MIB + 1]);
        let st = a.stats();
        assert_eq!(
            (st.allocations, st.device_mallocs, st.cache_hits),
            (2, 2, 0)
        );
        assert_eq!((st.active_blocks, st.segments), (2, 2));
        assert_eq!(st.allocated_bytes, 3 * MIB + 101);
        assert_eq!(st.reserved_bytes, 3 * MIB + 101);
        a.check();
        // A free synchronises the device, then frees at once: nothing is cached.
        let x_ptr = x.ptr;
        a.free(x);
        assert_eq!(fake.st().freed, vec![(x_ptr.0, 1)]);
        assert_eq!(fake.segment_sizes(), vec![3 * MIB + 1]);
        let st = a.stats();
        assert_eq!((st.frees, st.device_frees, st.segments), (1, 1, 1));
        assert_eq!(
            (st.allocated_bytes, st.reserved_bytes),
            (3 * MIB + 1, 3 * MIB + 1)
        );
        assert_eq!(st.peak_reserved_bytes, 3 * MIB + 101);
        a.check();
        // The same request on the same stream is a new device allocation, never a reuse.
        let x2 = a.allocate(100, s).unwrap();
        assert_ne!(x2.ptr, x_ptr);
        let st = a.stats();
        assert_eq!((st.device_mallocs, st.cache_hits), (3, 0));
        // Another stream's use needs no event: the synchronisation at free covers every stream.
        a.record_stream(&x2, stream(2));
        a.stream_retired(2);
        a.free(x2);
        a.free(y);
        let f = fake.st();
        assert_eq!((f.event_creates, f.event_records), (0, 0));
        assert_eq!(f.syncs, 3);
        assert_eq!(
            f.freed.iter().map(|&(_, syncs)| syncs).collect::<Vec<_>>(),
            vec![1, 2, 3],
            "every free follows its own synchronisation"
        );
        assert!(f.live.is_empty());
        drop(f);
        let st = a.stats();
        assert_eq!((st.allocations, st.frees), (3, 3));
        assert_eq!((st.device_mallocs, st.device_frees), (3, 3));
        assert_eq!(
            (
                st.allocated_bytes,
                st.reserved_bytes,
                st.segments,
                st.active_blocks
            ),
            (0, 0, 0, 0)
        );
        a.check();
        // Zero bytes, double and foreign frees: no device call.
        let calls = fake.calls();
        let z = a.allocate(0, s).unwrap();
        assert_eq!(z.ptr, DevicePtr::NULL);
        a.free(z);
        a.free(Allocation {
            ptr: x_ptr,
            size: 100,
        });
        assert_eq!(fake.calls(), calls);
        a.check();
    }

    #[test]
    fn no_caching_frees_wait_for_a_successful_synchronisation() {
        let (a, fake) = setup_no_caching(usize::MAX);
        let s = stream(1);
        let x = a.allocate(4 * KIB, s).unwrap();
        let y = a.allocate(8 * KIB, s).unwrap();
        fake.st().fail_sync = true;
        a.free(x);
        // Not freed: queued work might still use it. Still reserved, no longer allocated.
        assert_eq!(fake.segment_sizes(), vec![4 * KIB, 8 * KIB]);
        let st = a.stats();
        assert_eq!((st.allocated_bytes, st.reserved_bytes), (8 * KIB, 12 * KIB));
        assert_eq!((st.active_blocks, st.segments, st.device_frees), (1, 2, 0));
        a.check();
        assert!(a.empty_cache().is_err());
        assert_eq!(fake.segment_sizes(), vec![4 * KIB, 8 * KIB]);
        fake.st().fail_sync = false;
        // The next free that synchronises releases both.
        a.free(y);
        assert!(fake.st().live.is_empty());
        let st = a.stats();
        assert_eq!((st.reserved_bytes, st.segments, st.device_frees), (0, 0, 2));
        a.check();
        // ... and so does empty_cache.
        let z = a.allocate(KIB, s).unwrap();
        fake.st().fail_sync = true;
        a.free(z);
        fake.st().fail_sync = false;
        assert_eq!(fake.segment_sizes(), vec![KIB]);
        a.empty_cache().unwrap();
        assert!(fake.st().live.is_empty());
        assert_eq!(a.stats().device_frees, 3);
        a.check();
    }

    #[test]
    fn no_caching_out_of_memory_is_reported_with_the_numbers() {
        let (a, fake) = setup_no_caching(MIB);
        let s = stream(1);
        let x = a.allocate(MIB / 2, s).unwrap();
        let err = a.allocate(MIB, s).unwrap_err();
        match err {
            Error::OutOfMemory {
                requested,
                reserved,
                allocated,
                ..
            } => assert_eq!((requested, reserved, allocated), (MIB, MIB / 2, MIB / 2)),
            e => panic!("{e:?}"),
        }
        let f = fake.st();
        // No cache to release, so no retry; the failure is cleared from the last error.
        assert_eq!((f.malloc_calls, f.syncs, f.last_error_clears), (2, 0, 1));
        drop(f);
        assert_eq!(a.stats().oom_retries, 0);
        a.free(x);
        a.check();
    }

    #[test]
    fn drop_in_no_caching_mode_frees_deferred_memory() {
        let (a, fake) = setup_no_caching(usize::MAX);
        let x = a.allocate(KIB, stream(1)).unwrap();
        fake.st().fail_sync = true;
        a.free(x);
        fake.st().fail_sync = false;
        drop(a);
        assert!(fake.st().live.is_empty());
    }
}
