//! The process-wide count of host-blocking runtime calls (see [`sync_count`]).

use std::sync::atomic::{AtomicU64, Ordering};

static SYNC_COUNT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static THREAD_SYNC_COUNT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Records one host-blocking runtime call (called by the drivers).
pub(crate) fn note_blocking_call() {
    SYNC_COUNT.fetch_add(1, Ordering::Relaxed);
    THREAD_SYNC_COUNT.with(|c| c.set(c.get() + 1));
}

/// [`sync_count`] for the calling thread alone: the host-blocking runtime calls this thread has
/// made. Work running in parallel on other threads (other tests of a test binary) does not
/// move it, so "this code never waited for the GPU" can be asserted exactly.
pub fn thread_sync_count() -> u64 {
    THREAD_SYNC_COUNT.with(|c| c.get())
}

/// How many host-blocking runtime calls hip-core has made in this process so far, on every
/// thread and device. A debugging and testing aid: take the count before and after some work to
/// check that the work never made the host wait for the GPU (the difference is 0), e.g. that a
/// model's forward pass queues all its kernels without a round trip. The counter is
/// process-wide, so other threads' work counts too ([`thread_sync_count`] counts one thread).
///
/// The drivers increment it once per call, whether or not the call succeeds, in:
///
/// * stream, device and event synchronisation (`hipStreamSynchronize` / `cuStreamSynchronize`,
///   `hipDeviceSynchronize` / `cuCtxSynchronize`, `hipEventSynchronize` / `cuEventSynchronize`).
///   The synchronous host copies ([`crate::DeviceSliceMut::copy_from_host`],
///   [`crate::DeviceSlice::copy_to_host`], `to_host_vec`, [`crate::Stream::alloc_from_host`]),
///   [`crate::PendingCopy`]'s wait and drop, [`crate::Event::synchronize`], dropping the last
///   handle of a stream or a module, and the caching allocator's out-of-memory and
///   `empty_cache` paths all wait through these;
/// * freeing device memory and pinned host memory (`hipFree` / `cuMemFree`, `hipHostFree` /
///   `cuMemFreeHost`), which the runtimes perform after an implicit device synchronisation.
///
/// Work a driver may do synchronously inside a call that looks asynchronous is not counted: an
/// "asynchronous" copy from or to pageable host memory (a `Vec`, see
/// [`crate::Stream::copy_to_device_async`]) may wait inside the runtime. Small uploads that
/// must not wait go through [`crate::Stream::alloc_from_host_async`].
pub fn sync_count() -> u64 {
    SYNC_COUNT.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_only_grows() {
        let before = sync_count();
        note_blocking_call();
        note_blocking_call();
        // Other tests of this binary may count too, in parallel: at least our two.
        assert!(sync_count() >= before + 2);
        let mine = thread_sync_count();
        note_blocking_call();
        assert_eq!(thread_sync_count(), mine + 1);
    }
}
