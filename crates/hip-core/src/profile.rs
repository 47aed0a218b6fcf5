//! A launch profile: the kernels this process launches through hip-core, counted by name and,
//! on request, timed on the GPU. A debugging aid for finding what an operation launches and
//! where its GPU time goes: process-wide (every thread's launches) or a thread's own (its
//! launches only, beside other threads' profiles: tests). Off by default (two relaxed atomic
//! loads per launch); while on it takes a lock per launch (timed: two events per launch as well).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::event::Event;
use crate::stream::Stream;

/// The launches of one kernel in a profile.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelProfile {
    /// The kernel's name.
    pub name: String,
    /// How many times it was launched.
    pub launches: u64,
    /// The GPU time of those launches in milliseconds (from an event recorded before each
    /// launch to one recorded after it), when the profile is timed and every event worked.
    pub gpu_ms: Option<f64>,
}

/// Off, counting launches, or counting and timing them: the process-wide profile.
static STATE: AtomicU8 = AtomicU8::new(OFF);
const OFF: u8 = 0;
const COUNTING: u8 = 1;
const TIMED: u8 = 2;

/// Threads with a profile of their own (`launch_profile_start_this_thread`).
static THREAD_PROFILES: AtomicUsize = AtomicUsize::new(0);

#[derive(Default)]
struct Profile {
    timed: bool,
    counts: HashMap<String, u64>,
    /// (kernel, start, end) of each timed launch, in launch order.
    events: Vec<(String, Event, Event)>,
    /// Kernels with a launch whose events could not be created or recorded.
    untimed: Vec<String>,
}

impl Profile {
    fn new(timed: bool) -> Self {
        Profile {
            timed,
            ..Profile::default()
        }
    }

    /// Counts a launch of `name`; a timed profile takes its events (when the launch has them
    /// and no other profile took them first).
    fn record(&mut self, name: &str, events: &mut Option<(Event, Event)>) {
        *self.counts.entry(name.to_string()).or_default() += 1;
        if self.timed {
            match events.take() {
                Some((start, end)) => self.events.push((name.to_string(), start, end)),
                None => self.untimed.push(name.to_string()),
            }
        }
    }

    /// The launches by kernel, most GPU time (then most launches) first, waiting for the
    /// timed launches' events.
    fn finish(self) -> Vec<KernelProfile> {
        let mut times: HashMap<String, f64> = HashMap::new();
        let mut failed: Vec<String> = self.untimed;
        for (name, start, end) in &self.events {
            let elapsed = end.synchronize().and_then(|_| start.elapsed_ms(end));
            match elapsed {
                Ok(ms) => *times.entry(name.clone()).or_default() += f64::from(ms),
                Err(_) => failed.push(name.clone()),
            }
        }
        let timed = self.timed;
        let mut out: Vec<KernelProfile> = self
            .counts
            .into_iter()
            .map(|(name, launches)| {
                let gpu_ms = (timed && !failed.contains(&name))
                    .then(|| times.get(&name).copied().unwrap_or(0.0));
                KernelProfile {
                    name,
                    launches,
                    gpu_ms,
                }
            })
            .collect();
        out.sort_by(|a, b| {
            b.gpu_ms
                .unwrap_or(0.0)
                .total_cmp(&a.gpu_ms.unwrap_or(0.0))
                .then(b.launches.cmp(&a.launches))
                .then_with(|| a.name.cmp(&b.name))
        });
        out
    }
}

static PROFILE: Mutex<Option<Profile>> = Mutex::new(None);

/// A thread's own profile, when it has one. A thread that ends with its profile still on gives
/// its place in [`THREAD_PROFILES`] back, so that the launch path's off check stays exact.
struct ThreadProfile(Option<Profile>);

impl Drop for ThreadProfile {
    fn drop(&mut self) {
        if self.0.is_some() {
            THREAD_PROFILES.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

thread_local! {
    /// This thread's own profile.
    static THREAD_PROFILE: RefCell<ThreadProfile> = const { RefCell::new(ThreadProfile(None)) };
}

fn profile() -> std::sync::MutexGuard<'static, Option<Profile>> {
    PROFILE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on this thread's profile, if it has one (and its thread-local state still exists).
fn with_thread_profile<R>(f: impl FnOnce(&mut Option<Profile>) -> R) -> Option<R> {
    if THREAD_PROFILES.load(Ordering::Relaxed) == 0 {
        return None;
    }
    THREAD_PROFILE
        .try_with(|p| p.try_borrow_mut().ok().map(|mut p| f(&mut p.0)))
        .ok()
        .flatten()
}

/// Starts a launch profile of every device and thread (restarting from zero when one is on).
/// With `timed`, each launch is bracketed by two timing events on its stream, read by
/// [`launch_profile_stop`].
pub fn launch_profile_start(timed: bool) {
    *profile() = Some(Profile::new(timed));
    STATE.store(if timed { TIMED } else { COUNTING }, Ordering::Relaxed);
}

/// Starts a launch profile of the calling thread's launches only (restarting this thread's
/// from zero when it has one): a test that counts what it launches, beside other tests of the
/// same process and their own profiles. [`launch_profile_stop`] on this thread ends it.
pub fn launch_profile_start_this_thread(timed: bool) {
    let started = THREAD_PROFILE.with(|p| p.borrow_mut().0.replace(Profile::new(timed)).is_none());
    if started {
        THREAD_PROFILES.fetch_add(1, Ordering::Relaxed);
    }
}

/// Launches, in `profile`, of the kernels whose names start with `prefix` (a kernel family:
/// `"qmatvec_s8_"` counts every type and dtype of it).
pub fn launches_with_prefix(profile: &[KernelProfile], prefix: &str) -> u64 {
    profile
        .iter()
        .filter(|k| k.name.starts_with(prefix))
        .map(|k| k.launches)
        .sum()
}

/// Stops the calling thread's own profile when it has one, else the process-wide one, and
/// returns the launches by kernel, most GPU time (then most launches) first. A timed profile
/// waits here for the GPU to finish the profiled launches.
pub fn launch_profile_stop() -> Vec<KernelProfile> {
    if let Some(p) = with_thread_profile(Option::take).flatten() {
        THREAD_PROFILES.fetch_sub(1, Ordering::Relaxed);
        return p.finish();
    }
    STATE.store(OFF, Ordering::Relaxed);
    profile().take().map(Profile::finish).unwrap_or_default()
}

pub(crate) fn is_on() -> bool {
    STATE.load(Ordering::Relaxed) != OFF || THREAD_PROFILES.load(Ordering::Relaxed) != 0
}

fn is_timed() -> bool {
    STATE.load(Ordering::Relaxed) == TIMED
        || with_thread_profile(|p| p.as_ref().is_some_and(|p| p.timed)).unwrap_or(false)
}

/// A timing event recorded on `stream` before a launch, when a profile that sees it is timed.
pub(crate) fn before_launch(stream: &Stream) -> Option<Event> {
    if !is_timed() {
        return None;
    }
    let e = Event::new(stream.device(), true).ok()?;
    e.record(stream).ok()?;
    Some(e)
}

/// Counts a launch of `name` on `stream` in this thread's profile and in the process-wide one
/// (and times it from `start`, when given, in the first timed one of them).
pub(crate) fn after_launch(name: &str, stream: &Stream, start: Option<Event>) {
    let end = start.as_ref().and_then(|_| {
        let e = Event::new(stream.device(), true).ok()?;
        e.record(stream).ok()?;
        Some(e)
    });
    record_launch(name, start.zip(end));
}

/// Counts a launch of `name` (with its timing events, if any) in this thread's profile and in
/// the process-wide one.
fn record_launch(name: &str, mut events: Option<(Event, Event)>) {
    with_thread_profile(|p| {
        if let Some(p) = p.as_mut() {
            p.record(name, &mut events);
        }
    });
    if STATE.load(Ordering::Relaxed) != OFF {
        if let Some(p) = profile().as_mut() {
            p.record(name, &mut events);
        }
    }
}

/// Runs `f`, which queues a vendor library's work (a GEMM, a convolution) on `stream`, as one
/// entry named `name` of the launch profile when one is on (timed like a launch); just runs `f`
/// otherwise. [`crate::launch_count`] does not count it.
pub fn library_call<T>(name: impl FnOnce() -> String, stream: &Stream, f: impl FnOnce() -> T) -> T {
    if !is_on() {
        return f();
    }
    let start = before_launch(stream);
    let out = f();
    after_launch(&name(), stream, start);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count of `name` in a finished profile.
    fn launches(profile: &[KernelProfile], name: &str) -> u64 {
        profile
            .iter()
            .find(|p| p.name == name)
            .map_or(0, |p| p.launches)
    }

    /// Threads' own profiles, on at the same time, count their own launches only and end on
    /// their own thread; the process-wide one, on beside them, counts every thread's. (The GPU
    /// test `a_thread_profile_counts_only_its_own_launches` does the same with real launches.)
    /// The tests here read the process-wide profile state: one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn thread_profiles_are_each_threads_own() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let together = std::sync::Arc::new(std::sync::Barrier::new(3));
        launch_profile_start(false);
        let threads: Vec<_> = (0..3u64)
            .map(|t| {
                let together = together.clone();
                std::thread::spawn(move || {
                    launch_profile_start_this_thread(false);
                    together.wait();
                    for _ in 0..=t {
                        record_launch("k", None);
                    }
                    together.wait();
                    let own = launch_profile_stop();
                    // Stopped: this thread's launches no longer count anywhere but the
                    // process-wide profile.
                    record_launch("after", None);
                    own
                })
            })
            .collect();
        for (t, h) in threads.into_iter().enumerate() {
            let own = h.join().unwrap();
            assert_eq!(launches(&own, "k"), t as u64 + 1, "thread {t}");
            assert_eq!(launches(&own, "after"), 0, "thread {t}");
            assert!(own.iter().all(|p| p.gpu_ms.is_none()));
        }
        record_launch("k", None);
        let all = launch_profile_stop();
        assert_eq!(launches(&all, "k"), 1 + 2 + 3 + 1);
        assert_eq!(launches(&all, "after"), 3);
        // Everything off: nothing is counted and a stop returns nothing.
        assert!(!is_on());
        record_launch("k", None);
        assert!(launch_profile_stop().is_empty());
    }

    /// A thread that ends with its own profile on leaves profiling off for everyone else.
    #[test]
    fn a_thread_ending_with_its_profile_on_turns_it_off() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        std::thread::spawn(|| {
            launch_profile_start_this_thread(true);
            record_launch("k", None);
            assert!(is_on());
        })
        .join()
        .unwrap();
        assert!(!is_on());
        assert_eq!(THREAD_PROFILES.load(Ordering::Relaxed), 0);
    }
}
