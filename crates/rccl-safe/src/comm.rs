//! Communicators, groups and the collectives.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hip_core::{Device, DevicePtr, DeviceSlice, DeviceSliceMut, Stream};

use crate::error::{result, Error, Result};
use crate::library::{call_raw, library, Library};
use crate::sys::rccl as sys;
use crate::types::{NcclType, ReduceOp};

/// `NCCL_CONFIG_INITIALIZER`'s magic number.
const CONFIG_MAGIC: u32 = 0xcafe_beef;
/// The config layout we fill: NCCL 2.14's (`size`, `magic`, `version`, `blocking`). NCCL gives
/// every field newer than `version` its default.
const CONFIG_VERSION: u32 = 21400;
/// How long a communicator may take to initialise (and a non-blocking one to accept an
/// operation) unless [`CommConfig::timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The id that the ranks of one communicator share (`ncclUniqueId`, 128 bytes).
///
/// One rank creates it ([`UniqueId::new`], which also starts the library's bootstrap listener
/// in this process) and hands its bytes ([`UniqueId::as_bytes`]) to the others by any means
/// (a file, a socket, MPI), which rebuild it with [`UniqueId::from_bytes`].
#[derive(Clone, Copy)]
pub struct UniqueId(sys::ncclUniqueId);

impl UniqueId {
    /// Size of the id in bytes.
    pub const BYTES: usize = sys::NCCL_UNIQUE_ID_BYTES as usize;

    /// A new id (`ncclGetUniqueId`).
    pub fn new() -> Result<UniqueId> {
        let lib = library()?;
        let mut id = sys::ncclUniqueId::default();
        // SAFETY: `id` is a valid, writable ncclUniqueId.
        let st = unsafe { call_raw!(lib, ncclGetUniqueId(&mut id)) }?;
        lib.check("ncclGetUniqueId", st, None)?;
        Ok(UniqueId(id))
    }

    /// The id's bytes, to send to the other ranks.
    pub fn as_bytes(&self) -> [u8; Self::BYTES] {
        // `c_char` to `u8`: a reinterpretation of each byte.
        self.0.internal.map(|c| c as u8)
    }

    /// The id from bytes of [`UniqueId::as_bytes`] (exactly [`UniqueId::BYTES`] of them).
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId> {
        if bytes.len() != Self::BYTES {
            return Err(Error::invalid(
                "UniqueId::from_bytes",
                format!(
                    "an ncclUniqueId is {} bytes, got {}",
                    Self::BYTES,
                    bytes.len()
                ),
            ));
        }
        let mut id = sys::ncclUniqueId::default();
        for (d, s) in id.internal.iter_mut().zip(bytes) {
            // `u8` to `c_char`: a reinterpretation of each byte.
            *d = *s as std::ffi::c_char;
        }
        Ok(UniqueId(id))
    }
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex: String = self.as_bytes()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        write!(f, "UniqueId({hex}..)")
    }
}

impl PartialEq for UniqueId {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for UniqueId {}

/// How a communicator is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommConfig {
    /// Create it non-blocking (`ncclCommInitRankConfig` with `blocking = 0`) and wait for it
    /// here, polling `ncclCommGetAsyncError`, at most [`CommConfig::timeout`]: a rank that
    /// never joins is then an [`Error::Timeout`], not a hang. Default `true`. A library without
    /// `ncclCommInitRankConfig` (NCCL < 2.14, RCCL < 5.5) creates it blocking instead.
    pub non_blocking: bool,
    /// How long initialisation may take, and (for a non-blocking communicator) how long one
    /// operation may stay `ncclInProgress` before the communicator is aborted.
    pub timeout: Duration,
}

impl Default for CommConfig {
    fn default() -> Self {
        CommConfig {
            non_blocking: true,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl CommConfig {
    /// The default config with another timeout.
    pub fn with_timeout(timeout: Duration) -> Self {
        CommConfig {
            timeout,
            ..CommConfig::default()
        }
    }

    /// A blocking communicator (`ncclCommInitRank`): no timeout, as NCCL's classic API.
    pub fn blocking() -> Self {
        CommConfig {
            non_blocking: false,
            ..CommConfig::default()
        }
    }
}

/// The shared part of a communicator: the handle and what describes it.
struct CommInner {
    /// The handle; null once aborted.
    raw: AtomicPtr<sys::ncclComm>,
    lib: &'static Library,
    device: Device,
    rank: usize,
    nranks: usize,
    non_blocking: bool,
    timeout: Duration,
}

// SAFETY: the handle is an opaque token of the library, which allows a communicator to be used
// from any thread (one at a time). `Comm` is `Send` and not `Sync`, so one thread uses it at a
// time; the only other holder of a `CommInner` is the thread-local list of the group open on
// the thread that used it (see `Group`), which only polls it from that same thread.
unsafe impl Send for CommInner {}
// SAFETY: as above: every use of the handle happens on the thread that holds the `Comm` (or
// the group's list of that same thread).
unsafe impl Sync for CommInner {}

impl CommInner {
    fn handle(&self, op: &'static str) -> Result<sys::ncclComm_t> {
        let raw = self.raw.load(Ordering::Acquire);
        if raw.is_null() {
            return Err(Error::invalid(
                op,
                "the communicator was aborted after an error or a timeout",
            ));
        }
        Ok(raw)
    }

    /// Aborts the communicator (`ncclCommAbort`); later operations fail.
    fn abort(&self) {
        let raw = self.raw.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !raw.is_null() {
            let _ = self.device.make_current();
            // SAFETY: `raw` was live and is aborted once (the swap took it); nobody uses it
            // afterwards.
            let _ = unsafe { call_raw!(self.lib, ncclCommAbort(raw)) };
        }
    }

    /// Waits until a non-blocking communicator has no operation in progress:
    /// `ncclCommGetAsyncError` is polled until it reports `ncclSuccess` (`Ok`), an error (the
    /// error; the communicator is aborted) or [`CommConfig::timeout`] passes
    /// ([`Error::Timeout`]; the communicator is aborted).
    fn wait_ready(&self, op: &'static str, what: &dyn Fn() -> String) -> Result<()> {
        let start = Instant::now();
        let mut pause = Duration::from_micros(20);
        loop {
            let raw = self.handle(op)?;
            let mut state = result::IN_PROGRESS;
            // SAFETY: `raw` is live; `state` is a valid out-pointer.
            let st = unsafe { call_raw!(self.lib, ncclCommGetAsyncError(raw, &mut state)) }?;
            if let Err(e) = self.lib.check("ncclCommGetAsyncError", st, Some(raw)) {
                self.abort();
                return Err(e.context(what()));
            }
            match state {
                result::SUCCESS => return Ok(()),
                result::IN_PROGRESS => {}
                failure => {
                    let e = self
                        .lib
                        .error("ncclCommGetAsyncError", failure, Some(raw))
                        .context(what());
                    self.abort();
                    return Err(e);
                }
            }
            let waited = start.elapsed();
            if waited >= self.timeout {
                self.abort();
                return Err(Error::Timeout {
                    op,
                    waited,
                    what: what(),
                });
            }
            std::thread::sleep(pause.min(self.timeout - waited));
            pause = (pause * 2).min(Duration::from_millis(2));
        }
    }

    /// Handles the result of a call on this communicator: `ncclInProgress` (a non-blocking
    /// communicator still working) is waited for, unless a group is open (then the group's end
    /// waits).
    fn finish(
        self: &Arc<Self>,
        call: &'static str,
        status: u32,
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        let raw = self.handle(call)?;
        let in_group = group_note(self);
        match status {
            result::SUCCESS => Ok(()),
            result::IN_PROGRESS if in_group => Ok(()),
            result::IN_PROGRESS => self.wait_ready(call, what),
            failure => Err(self.lib.error(call, failure, Some(raw)).context(what())),
        }
    }
}

impl Drop for CommInner {
    fn drop(&mut self) {
        let raw = self.raw.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if raw.is_null() {
            return;
        }
        let _ = self.device.make_current();
        // SAFETY: `raw` is live and destroyed once; nothing uses it afterwards (this is the
        // last holder). ncclCommDestroy waits for the communicator's queued work itself.
        let destroyed = unsafe { call_raw!(self.lib, ncclCommDestroy(raw)) };
        if !matches!(destroyed, Ok(result::SUCCESS) | Ok(result::IN_PROGRESS)) {
            // SAFETY: as above; destroy failed, so the handle is still ours to abort.
            let _ = unsafe { call_raw!(self.lib, ncclCommAbort(raw)) };
        }
    }
}

/// One rank of a communicator: a device, its rank among `nranks`, and the stream its
/// operations are queued on.
///
/// Operations are stream-ordered and never block the host on the GPU: they are queued on
/// [`Comm::stream`] (by default the device's default stream, which hip-core's buffers and
/// candle-rocm use) after the work already queued on the streams of the buffers they read or
/// write, and that work's streams wait for them in turn (events; nothing happens when the
/// streams are the same). Arguments are validated before the library is called (lengths
/// against the counts, buffers on the communicator's device, ranks in range): a bad one is an
/// [`Error::InvalidArgument`], never an out-of-bounds access by the library.
///
/// `Send`, not `Sync`: NCCL communicators may move between threads but not be used by two at
/// once. Dropping a communicator destroys it (`ncclCommDestroy`, which waits for its queued
/// work).
pub struct Comm {
    inner: Arc<CommInner>,
    stream: Stream,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.inner.rank)
            .field("nranks", &self.inner.nranks)
            .field("device", &self.inner.device.ordinal())
            .field("non_blocking", &self.inner.non_blocking)
            .finish()
    }
}

fn to_c_int(op: &'static str, what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::invalid(op, format!("{what} {v} does not fit a C int")))
}

impl Comm {
    /// Rank `rank` of an `nranks`-rank communicator on `device`, all ranks sharing `id`
    /// (`ncclCommInitRankConfig`, or `ncclCommInitRank` for a blocking config). Every rank must
    /// call this (in its own process, or inside a [`Group`] for several devices of one
    /// process: [`Comm::init_devices`]). Outside a group it returns once the communicator is
    /// ready; a rank that does not join within [`CommConfig::timeout`] makes it an
    /// [`Error::Timeout`] (non-blocking config).
    pub fn init_rank(
        device: Device,
        id: &UniqueId,
        rank: usize,
        nranks: usize,
        config: CommConfig,
    ) -> Result<Comm> {
        const OP: &str = "Comm::init_rank";
        if nranks == 0 || rank >= nranks {
            return Err(Error::invalid(
                OP,
                format!("rank {rank} is not in 0..{nranks}"),
            ));
        }
        let c_nranks = to_c_int(OP, "nranks", nranks)?;
        let c_rank = to_c_int(OP, "rank", rank)?;
        let lib = library()?;
        device.make_current()?;
        let non_blocking = config.non_blocking && lib.table().ncclCommInitRankConfig.is_ok();
        let mut raw: sys::ncclComm_t = std::ptr::null_mut();
        let (call, status) = if non_blocking {
            // Only the 2.14 fields, whatever header the bindings came from: NCCL copies `size`
            // bytes and defaults the rest. (A newer header's struct has more fields, hence the
            // update syntax, which the committed 2.14 layout does not need.)
            #[allow(clippy::needless_update)]
            let mut cfg = sys::ncclConfig_t {
                size: std::mem::offset_of!(sys::ncclConfig_t, blocking) + size_of::<i32>(),
                magic: CONFIG_MAGIC,
                version: CONFIG_VERSION,
                blocking: 0,
                ..Default::default()
            };
            // SAFETY: `raw` and `cfg` are valid for the call (NCCL copies the config); `id` is
            // a 128-byte value.
            let st = unsafe {
                call_raw!(
                    lib,
                    ncclCommInitRankConfig(&mut raw, c_nranks, id.0, c_rank, &mut cfg)
                )
            }?;
            ("ncclCommInitRankConfig", st)
        } else {
            // SAFETY: `raw` is a valid out-pointer; `id` is a 128-byte value.
            let st = unsafe { call_raw!(lib, ncclCommInitRank(&mut raw, c_nranks, id.0, c_rank)) }?;
            ("ncclCommInitRank", st)
        };
        let what = || {
            format!(
                "initialising rank {rank} of {nranks} on device {}",
                device.ordinal()
            )
        };
        if raw.is_null() {
            let status = if status == result::SUCCESS {
                result::INTERNAL_ERROR
            } else {
                status
            };
            return Err(lib.error(call, status, None).context(what()));
        }
        let inner = Arc::new(CommInner {
            raw: AtomicPtr::new(raw),
            lib,
            device,
            rank,
            nranks,
            non_blocking,
            timeout: config.timeout,
        });
        if status != result::SUCCESS && status != result::IN_PROGRESS {
            let e = lib.error(call, status, Some(raw)).context(what());
            inner.abort();
            return Err(e);
        }
        if !group_note(&inner) && non_blocking {
            inner.wait_ready(OP, &|| {
                format!(
                    "rank {rank} of {nranks} (device {}) waited for the other ranks to join",
                    device.ordinal()
                )
            })?;
        }
        Ok(Comm {
            inner,
            stream: device.default_stream(),
            _not_sync: PhantomData,
        })
    }

    /// One communicator per device of this process, device `i` being rank `i` of
    /// `devices.len()` (a fresh [`UniqueId`]): [`Comm::init_devices`] in one group.
    pub fn init_all(devices: &[Device], config: CommConfig) -> Result<Vec<Comm>> {
        let id = UniqueId::new()?;
        let ranks: Vec<(Device, usize)> =
            devices.iter().enumerate().map(|(i, d)| (*d, i)).collect();
        Self::init_devices(&id, devices.len(), &ranks, config)
    }

    /// The ranks `ranks` (device, rank) of an `nranks`-rank communicator, created by this
    /// process in one [`Group`] (as NCCL requires when one thread initialises several ranks),
    /// then waited for together, at most [`CommConfig::timeout`].
    pub fn init_devices(
        id: &UniqueId,
        nranks: usize,
        ranks: &[(Device, usize)],
        config: CommConfig,
    ) -> Result<Vec<Comm>> {
        const OP: &str = "Comm::init_devices";
        if ranks.is_empty() {
            return Err(Error::invalid(OP, "no ranks to initialise"));
        }
        for (i, (d, r)) in ranks.iter().enumerate() {
            if ranks[..i]
                .iter()
                .any(|(e, s)| e.ordinal() == d.ordinal() || s == r)
            {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "device {} / rank {r} appears twice (NCCL allows one rank per device)",
                        d.ordinal()
                    ),
                ));
            }
        }
        let group = Group::start()?;
        let mut comms = Vec::with_capacity(ranks.len());
        for (device, rank) in ranks {
            match Comm::init_rank(*device, id, *rank, nranks, config) {
                Ok(c) => comms.push(c),
                Err(e) => {
                    // Ends the group (its error, if any, is less telling than this one).
                    drop(group);
                    return Err(e);
                }
            }
        }
        group.end()?;
        if let Some(first) = ranks.first() {
            first.0.make_current()?;
        }
        Ok(comms)
    }

    /// This communicator's rank.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// The number of ranks.
    pub fn nranks(&self) -> usize {
        self.inner.nranks
    }

    /// The device of this rank.
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// The raw `ncclComm_t` (null once aborted), for calling the library directly beside this
    /// wrapper, e.g. to measure what the wrapper costs. Using it is `unsafe` at the call site;
    /// it stays valid while `self` lives and is not aborted.
    pub fn as_raw(&self) -> sys::ncclComm_t {
        self.inner.raw.load(Ordering::Acquire)
    }

    /// Whether the communicator was created non-blocking (its init could time out).
    pub fn is_non_blocking(&self) -> bool {
        self.inner.non_blocking
    }

    /// The stream operations are queued on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Queues later operations on `stream` (a stream of this communicator's device).
    pub fn set_stream(&mut self, stream: Stream) -> Result<()> {
        if stream.device().ordinal() != self.inner.device.ordinal() {
            return Err(Error::invalid(
                "Comm::set_stream",
                format!(
                    "the stream belongs to device {}, the communicator to device {}",
                    stream.device().ordinal(),
                    self.inner.device.ordinal()
                ),
            ));
        }
        self.stream = stream;
        Ok(())
    }

    /// The library's view of the communicator: `(rank, nranks, device ordinal)` from
    /// `ncclCommUserRank`, `ncclCommCount` and `ncclCommCuDevice`.
    pub fn query(&self) -> Result<(usize, usize, usize)> {
        let raw = self.inner.handle("Comm::query")?;
        let lib = self.inner.lib;
        let (mut rank, mut count, mut dev) = (-1, -1, -1);
        // SAFETY: `raw` is live; the out-pointers are valid.
        let st = unsafe { call_raw!(lib, ncclCommUserRank(raw, &mut rank)) }?;
        lib.check("ncclCommUserRank", st, Some(raw))?;
        // SAFETY: as above.
        let st = unsafe { call_raw!(lib, ncclCommCount(raw, &mut count)) }?;
        lib.check("ncclCommCount", st, Some(raw))?;
        // SAFETY: as above.
        let st = unsafe { call_raw!(lib, ncclCommCuDevice(raw, &mut dev)) }?;
        lib.check("ncclCommCuDevice", st, Some(raw))?;
        let u = |v: i32| usize::try_from(v).unwrap_or(usize::MAX);
        Ok((u(rank), u(count), u(dev)))
    }

    /// The communicator's asynchronous error state (`ncclCommGetAsyncError`): `Ok` when
    /// healthy (or still working), else the error. Check it when an operation seems stuck: a
    /// failed peer is reported here, not by the call that queued the operation.
    pub fn check_async_error(&self) -> Result<()> {
        let raw = self.inner.handle("Comm::check_async_error")?;
        let lib = self.inner.lib;
        let mut state = result::SUCCESS;
        // SAFETY: `raw` is live; `state` is a valid out-pointer.
        let st = unsafe { call_raw!(lib, ncclCommGetAsyncError(raw, &mut state)) }?;
        lib.check("ncclCommGetAsyncError", st, Some(raw))?;
        match state {
            result::SUCCESS | result::IN_PROGRESS => Ok(()),
            failure => Err(lib.error("ncclCommGetAsyncError", failure, Some(raw))),
        }
    }

    /// Aborts the communicator (`ncclCommAbort`): queued operations are cancelled, peers see
    /// errors. For recovering from a failed or stuck peer.
    pub fn abort(self) {
        self.inner.abort();
    }

    /// The library's operation for `op`. On one rank, `Avg` is sent as `Sum` (the same
    /// result: the input itself): NCCL's one-rank kernel for averages (`oneRankReduce`, also
    /// used by RCCL) leaves the last `count % blocks` elements unwritten before NCCL 2.29.7
    /// (NVIDIA/nccl#1950; RCCL's port of the fix: ROCm/rocm-systems#7711). Found by
    /// tests/gpu.rs on NCCL 2.28.3 (f64, 4099 elements).
    fn raw_op(&self, op: ReduceOp) -> sys::ncclRedOp_t {
        if self.inner.nranks == 1 && op == ReduceOp::Avg {
            ReduceOp::Sum.raw()
        } else {
            op.raw()
        }
    }

    // ------------------------------------------------------------------------------- checks

    fn check_buffer<T: NcclType>(
        &self,
        op: &'static str,
        what: &str,
        buf: &DeviceSlice<'_, T>,
    ) -> Result<()> {
        let dev = buf.buffer().device().ordinal();
        if dev != self.inner.device.ordinal() {
            return Err(Error::invalid(
                op,
                format!(
                    "the {what} buffer is on device {dev}, rank {} of this communicator on \
                     device {}",
                    self.inner.rank,
                    self.inner.device.ordinal()
                ),
            ));
        }
        Ok(())
    }

    fn check_len(op: &'static str, what: &str, len: usize, expected: usize) -> Result<()> {
        if len != expected {
            return Err(Error::invalid(
                op,
                format!("the {what} buffer holds {len} elements, the operation needs {expected}"),
            ));
        }
        Ok(())
    }

    fn check_rank(&self, op: &'static str, what: &str, r: usize) -> Result<i32> {
        if r >= self.inner.nranks {
            return Err(Error::invalid(
                op,
                format!("{what} {r} is not in 0..{}", self.inner.nranks),
            ));
        }
        to_c_int(op, what, r)
    }

    /// Orders the comm stream after the buffers' streams and records its use of them.
    fn before(&self, bufs: &[&Stream]) -> Result<()> {
        for s in bufs {
            self.stream.wait_for(s)?;
        }
        Ok(())
    }

    /// Orders the buffers' streams after the work just queued on the comm stream.
    fn after(&self, bufs: &[&Stream]) -> Result<()> {
        for s in bufs {
            s.wait_for(&self.stream)?;
        }
        Ok(())
    }

    /// Runs one queued operation: device current, stream ordering, the call, its result.
    fn run(
        &self,
        call: &'static str,
        streams: &[&Stream],
        what: &dyn Fn() -> String,
        f: impl FnOnce(&Library, sys::ncclComm_t, sys::hipStream_t) -> Result<u32>,
    ) -> Result<()> {
        let raw = self.inner.handle(call)?;
        self.inner.device.make_current()?;
        self.before(streams)?;
        let status = f(self.inner.lib, raw, self.stream.as_raw().cast())?;
        self.inner.finish(call, status, what)?;
        self.after(streams)
    }

    // ----------------------------------------------------------------------- collectives

    /// `recv = op(send of every rank)` (`ncclAllReduce`); `send` and `recv` have the same
    /// length.
    pub fn all_reduce<T: NcclType>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
        op: ReduceOp,
    ) -> Result<()> {
        const OP: &str = "all_reduce";
        self.check_buffer(OP, "send", send)?;
        self.check_buffer(OP, "receive", &recv.as_slice())?;
        Self::check_len(OP, "receive", recv.len(), send.len())?;
        let (n, sp, rp) = (send.len(), send.device_ptr(), recv.device_ptr());
        let streams = [send.buffer().stream(), recv.stream()];
        let what = || format!("an all-reduce ({}) of {n} {}", op.name(), T::NAME);
        self.run("ncclAllReduce", &streams, &what, |lib, comm, stream| {
            // SAFETY: both ranges (n elements of T) lie in live buffers of the communicator's
            // device that stay allocated until the stream's work is done (stream order and
            // record_stream via wait_for); the type is T's NCCL type.
            unsafe {
                call_raw!(
                    lib,
                    ncclAllReduce(
                        ptr(sp),
                        ptr_mut(rp),
                        n,
                        T::DATA_TYPE,
                        self.raw_op(op),
                        comm,
                        stream
                    )
                )
            }
        })?;
        send.buffer().record_stream(&self.stream);
        recv.as_slice().buffer().record_stream(&self.stream);
        Ok(())
    }

    /// In-place [`Comm::all_reduce`].
    pub fn all_reduce_in_place<T: NcclType>(
        &self,
        buf: &mut DeviceSliceMut<'_, T>,
        op: ReduceOp,
    ) -> Result<()> {
        const OP: &str = "all_reduce_in_place";
        self.check_buffer(OP, "data", &buf.as_slice())?;
        let (n, p) = (buf.len(), buf.device_ptr());
        let streams = [buf.stream()];
        let what = || format!("an in-place all-reduce ({}) of {n} {}", op.name(), T::NAME);
        self.run("ncclAllReduce", &streams, &what, |lib, comm, stream| {
            // SAFETY: the range lies in a live buffer of the communicator's device (see
            // all_reduce); NCCL allows sendbuff == recvbuff.
            unsafe {
                call_raw!(
                    lib,
                    ncclAllReduce(
                        ptr(p),
                        ptr_mut(p),
                        n,
                        T::DATA_TYPE,
                        self.raw_op(op),
                        comm,
                        stream
                    )
                )
            }
        })?;
        buf.as_slice().buffer().record_stream(&self.stream);
        Ok(())
    }

    /// `recv = root's send` on every rank (`ncclBroadcast`). `send` is read on the root only
    /// (other ranks pass `None`; the root must pass it, of `recv`'s length).
    pub fn broadcast<T: NcclType>(
        &self,
        send: Option<&DeviceSlice<'_, T>>,
        recv: &mut DeviceSliceMut<'_, T>,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "broadcast";
        let c_root = self.check_rank(OP, "root", root)?;
        self.check_buffer(OP, "receive", &recv.as_slice())?;
        let n = recv.len();
        let sp = match send {
            Some(s) => {
                self.check_buffer(OP, "send", s)?;
                Self::check_len(OP, "send", s.len(), n)?;
                s.device_ptr()
            }
            None if self.inner.rank == root => {
                return Err(Error::invalid(
                    OP,
                    "the root rank must pass the data to send",
                ))
            }
            None => DevicePtr::NULL,
        };
        let rp = recv.device_ptr();
        let mut streams = vec![recv.stream()];
        if let Some(s) = send {
            streams.push(s.buffer().stream());
        }
        let what = || format!("a broadcast of {n} {} from rank {root}", T::NAME);
        self.run("ncclBroadcast", &streams, &what, |lib, comm, stream| {
            // SAFETY: the ranges (n elements) lie in live buffers of the communicator's device;
            // a null send pointer is only passed on non-root ranks, where NCCL ignores it.
            unsafe {
                call_raw!(
                    lib,
                    ncclBroadcast(ptr(sp), ptr_mut(rp), n, T::DATA_TYPE, c_root, comm, stream)
                )
            }
        })?;
        if let Some(s) = send {
            s.buffer().record_stream(&self.stream);
        }
        recv.as_slice().buffer().record_stream(&self.stream);
        Ok(())
    }

    /// In-place [`Comm::broadcast`]: the root's `buf` is sent, every other rank's overwritten.
    pub fn broadcast_in_place<T: NcclType>(
        &self,
        buf: &mut DeviceSliceMut<'_, T>,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "broadcast_in_place";
        let c_root = self.check_rank(OP, "root", root)?;
        self.check_buffer(OP, "data", &buf.as_slice())?;
        let (n, p) = (buf.len(), buf.device_ptr());
        let streams = [buf.stream()];
        let what = || format!("an in-place broadcast of {n} {} from rank {root}", T::NAME);
        self.run("ncclBroadcast", &streams, &what, |lib, comm, stream| {
            // SAFETY: the range lies in a live buffer of the communicator's device.
            unsafe {
                call_raw!(
                    lib,
                    ncclBroadcast(ptr(p), ptr_mut(p), n, T::DATA_TYPE, c_root, comm, stream)
                )
            }
        })?;
        buf.as_slice().buffer().record_stream(&self.stream);
        Ok(())
    }

    /// `recv = op(send of every rank)` on the root only (`ncclReduce`): the root passes `recv`
    /// (of `send`'s length), the others `None`.
    pub fn reduce<T: NcclType>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: Option<&mut DeviceSliceMut<'_, T>>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        const OP: &str = "reduce";
        let c_root = self.check_rank(OP, "root", root)?;
        self.check_buffer(OP, "send", send)?;
        let n = send.len();
        let (rp, rstream) = match &recv {
            Some(r) => {
                self.check_buffer(OP, "receive", &r.as_slice())?;
                Self::check_len(OP, "receive", r.len(), n)?;
                (r.device_ptr(), Some(r.stream().clone()))
            }
            None if self.inner.rank == root => {
                return Err(Error::invalid(
                    OP,
                    "the root rank must pass a receive buffer",
                ))
            }
            None => (DevicePtr::NULL, None),
        };
        let sp = send.device_ptr();
        let mut streams = vec![send.buffer().stream()];
        if let Some(s) = &rstream {
            streams.push(s);
        }
        let what = || format!("a reduce ({}) of {n} {} to rank {root}", op.name(), T::NAME);
        self.run("ncclReduce", &streams, &what, |lib, comm, stream| {
            // SAFETY: the ranges (n elements) lie in live buffers of the communicator's device;
            // a null receive pointer is only passed on non-root ranks, where NCCL ignores it.
            unsafe {
                call_raw!(
                    lib,
                    ncclReduce(
                        ptr(sp),
                        ptr_mut(rp),
                        n,
                        T::DATA_TYPE,
                        self.raw_op(op),
                        c_root,
                        comm,
                        stream
                    )
                )
            }
        })?;
        send.buffer().record_stream(&self.stream);
        if let Some(r) = &recv {
            r.as_slice().buffer().record_stream(&self.stream);
        }
        Ok(())
    }

    /// `recv = [send of rank 0, send of rank 1, ...]` (`ncclAllGather`): `recv` holds
    /// `nranks * send.len()` elements.
    pub fn all_gather<T: NcclType>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
    ) -> Result<()> {
        const OP: &str = "all_gather";
        self.check_buffer(OP, "send", send)?;
        self.check_buffer(OP, "receive", &recv.as_slice())?;
        let n = send.len();
        let total = n.checked_mul(self.inner.nranks).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("{n} elements x {} ranks overflow", self.inner.nranks),
            )
        })?;
        Self::check_len(OP, "receive", recv.len(), total)?;
        let (sp, rp) = (send.device_ptr(), recv.device_ptr());
        let streams = [send.buffer().stream(), recv.stream()];
        let what = || format!("an all-gather of {n} {} per rank", T::NAME);
        self.run("ncclAllGather", &streams, &what, |lib, comm, stream| {
            // SAFETY: send holds n and recv n * nranks elements of live buffers of the
            // communicator's device.
            unsafe {
                call_raw!(
                    lib,
                    ncclAllGather(ptr(sp), ptr_mut(rp), n, T::DATA_TYPE, comm, stream)
                )
            }
        })?;
        send.buffer().record_stream(&self.stream);
        recv.as_slice().buffer().record_stream(&self.stream);
        Ok(())
    }

    /// `recv = block `rank` of op(send of every rank)` (`ncclReduceScatter`): `send` holds
    /// `nranks * recv.len()` elements.
    pub fn reduce_scatter<T: NcclType>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
        op: ReduceOp,
    ) -> Result<()> {
        const OP: &str = "reduce_scatter";
        self.check_buffer(OP, "send", send)?;
        self.check_buffer(OP, "receive", &recv.as_slice())?;
        let n = recv.len();
        let total = n.checked_mul(self.inner.nranks).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("{n} elements x {} ranks overflow", self.inner.nranks),
            )
        })?;
        Self::check_len(OP, "send", send.len(), total)?;
        let (sp, rp) = (send.device_ptr(), recv.device_ptr());
        let streams = [send.buffer().stream(), recv.stream()];
        let what = || {
            format!(
                "a reduce-scatter ({}) of {n} {} per rank",
                op.name(),
                T::NAME
            )
        };
        self.run("ncclReduceScatter", &streams, &what, |lib, comm, stream| {
            // SAFETY: send holds n * nranks and recv n elements of live buffers of the
            // communicator's device.
            unsafe {
                call_raw!(
                    lib,
                    ncclReduceScatter(
                        ptr(sp),
                        ptr_mut(rp),
                        n,
                        T::DATA_TYPE,
                        self.raw_op(op),
                        comm,
                        stream
                    )
                )
            }
        })?;
        send.buffer().record_stream(&self.stream);
        recv.as_slice().buffer().record_stream(&self.stream);
        Ok(())
    }

    /// Sends `buf` to rank `peer` (`ncclSend`), which must post a matching [`Comm::recv`].
    /// Point-to-point operations with each other (or with oneself) belong in one [`Group`].
    pub fn send<T: NcclType>(&self, buf: &DeviceSlice<'_, T>, peer: usize) -> Result<()> {
        const OP: &str = "send";
        let c_peer = self.check_rank(OP, "peer", peer)?;
        self.check_buffer(OP, "send", buf)?;
        let (n, p) = (buf.len(), buf.device_ptr());
        let streams = [buf.buffer().stream()];
        let what = || format!("sending {n} {} to rank {peer}", T::NAME);
        self.run("ncclSend", &streams, &what, |lib, comm, stream| {
            // SAFETY: the range (n elements) lies in a live buffer of the communicator's device.
            unsafe { call_raw!(lib, ncclSend(ptr(p), n, T::DATA_TYPE, c_peer, comm, stream)) }
        })?;
        buf.buffer().record_stream(&self.stream);
        Ok(())
    }

    /// Receives `buf.len()` elements from rank `peer` into `buf` (`ncclRecv`).
    pub fn recv<T: NcclType>(&self, buf: &mut DeviceSliceMut<'_, T>, peer: usize) -> Result<()> {
        const OP: &str = "recv";
        let c_peer = self.check_rank(OP, "peer", peer)?;
        self.check_buffer(OP, "receive", &buf.as_slice())?;
        let (n, p) = (buf.len(), buf.device_ptr());
        let streams = [buf.stream()];
        let what = || format!("receiving {n} {} from rank {peer}", T::NAME);
        self.run("ncclRecv", &streams, &what, |lib, comm, stream| {
            // SAFETY: the range (n elements) lies in a live buffer of the communicator's device.
            unsafe {
                call_raw!(
                    lib,
                    ncclRecv(ptr_mut(p), n, T::DATA_TYPE, c_peer, comm, stream)
                )
            }
        })?;
        buf.as_slice().buffer().record_stream(&self.stream);
        Ok(())
    }
}

fn ptr(p: DevicePtr) -> *const std::ffi::c_void {
    p.0 as usize as *const std::ffi::c_void
}

fn ptr_mut(p: DevicePtr) -> *mut std::ffi::c_void {
    p.0 as usize as *mut std::ffi::c_void
}

// ------------------------------------------------------------------------------------ groups

thread_local! {
    /// The communicators used while a group is open on this thread (one list per nesting level
    /// is not needed: NCCL merges nested groups into the outermost one).
    static GROUP: RefCell<GroupState> = const { RefCell::new(GroupState { depth: 0, comms: Vec::new() }) };
}

struct GroupState {
    depth: usize,
    comms: Vec<Arc<CommInner>>,
}

/// Notes `comm` in the open group, if there is one: returns whether a group is open.
fn group_note(comm: &Arc<CommInner>) -> bool {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return false;
        }
        if !g.comms.iter().any(|c| Arc::ptr_eq(c, comm)) {
            g.comms.push(comm.clone());
        }
        true
    })
}

/// An open NCCL group (`ncclGroupStart` .. `ncclGroupEnd`): the operations queued while it is
/// open (on any communicator, e.g. one per device of this process, or a send and a receive
/// between the same ranks) are launched together when it ends. Needed for point-to-point
/// exchanges and for one thread driving several devices.
///
/// [`Group::end`] ends it and reports the result; a group dropped without `end` is ended too,
/// its error discarded. Groups nest (NCCL merges them into the outermost). Not `Send`: a group
/// belongs to the thread that opened it. For non-blocking communicators, `end` waits (at most
/// each communicator's timeout) until the group's operations have been queued.
#[must_use = "a group launches its operations when it ends"]
pub struct Group {
    ended: bool,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("ended", &self.ended).finish()
    }
}

impl Group {
    /// `ncclGroupStart`.
    pub fn start() -> Result<Group> {
        let lib = library()?;
        // SAFETY: no arguments.
        let st = unsafe { call_raw!(lib, ncclGroupStart()) }?;
        lib.check("ncclGroupStart", st, None)?;
        GROUP.with(|g| g.borrow_mut().depth += 1);
        Ok(Group {
            ended: false,
            _not_send: PhantomData,
        })
    }

    /// `ncclGroupEnd`: launches the group's operations. With non-blocking communicators, waits
    /// (polling) until they have been queued.
    pub fn end(mut self) -> Result<()> {
        self.ended = true;
        Self::finish()
    }

    fn finish() -> Result<()> {
        let lib = library()?;
        let comms = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            g.depth = g.depth.saturating_sub(1);
            if g.depth == 0 {
                std::mem::take(&mut g.comms)
            } else {
                Vec::new()
            }
        });
        // SAFETY: no arguments; a group is open (started by this value).
        let st = unsafe { call_raw!(lib, ncclGroupEnd()) }?;
        match st {
            result::SUCCESS | result::IN_PROGRESS => {}
            failure => return Err(lib.error("ncclGroupEnd", failure, None)),
        }
        for c in comms.iter().filter(|c| c.non_blocking) {
            c.wait_ready("Group::end", &|| {
                format!(
                    "rank {} of {} (device {}) in a group",
                    c.rank,
                    c.nranks,
                    c.device.ordinal()
                )
            })?;
        }
        Ok(())
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.ended {
            let _ = Self::finish();
        }
    }
}

/// Runs `f` inside a [`Group`]: `ncclGroupStart`, `f`, `ncclGroupEnd` (also when `f` fails;
/// then `f`'s error is returned).
pub fn group<R>(f: impl FnOnce() -> Result<R>) -> Result<R> {
    let g = Group::start()?;
    match f() {
        Ok(r) => {
            g.end()?;
            Ok(r)
        }
        Err(e) => {
            drop(g);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_size_covers_the_2_14_fields_only() {
        // size_t size; unsigned magic; unsigned version; int blocking.
        let size = std::mem::offset_of!(sys::ncclConfig_t, blocking) + size_of::<i32>();
        assert_eq!(size, 20);
        assert_eq!(std::mem::offset_of!(sys::ncclConfig_t, magic), 8);
        assert_eq!(std::mem::offset_of!(sys::ncclConfig_t, version), 12);
    }

    #[test]
    fn defaults() {
        let c = CommConfig::default();
        assert!(c.non_blocking);
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
        assert!(!CommConfig::blocking().non_blocking);
        assert_eq!(
            CommConfig::with_timeout(Duration::from_secs(3)).timeout,
            Duration::from_secs(3)
        );
    }

    #[test]
    fn unique_id_bytes_round_trip_and_wrong_lengths_are_refused() {
        let mut bytes = [0u8; UniqueId::BYTES];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i * 7 + 200) as u8;
        }
        let id = UniqueId::from_bytes(&bytes).unwrap();
        assert_eq!(id.as_bytes(), bytes);
        assert_eq!(UniqueId::from_bytes(&bytes).unwrap(), id);
        assert!(format!("{id:?}").starts_with("UniqueId(c8cfd6"));
        let e = UniqueId::from_bytes(&bytes[..100]).unwrap_err();
        assert!(e.to_string().contains("128 bytes, got 100"), "{e}");
    }
}
