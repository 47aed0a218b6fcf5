//! A launch profile: the kernels this process launches through hip-core, counted by name and,
//! on request, timed on the GPU. A debugging aid for finding what an operation launches and
//! where its GPU time goes; off by default (one relaxed atomic load per launch), and while on it
//! takes a lock per launch (timed: two events per launch as well).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
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

/// Off, counting launches, or counting and timing them.
static STATE: AtomicU8 = AtomicU8::new(OFF);
const OFF: u8 = 0;
const COUNTING: u8 = 1;
const TIMED: u8 = 2;

#[derive(Default)]
struct Profile {
    /// Only this thread's launches are counted (`None`: every thread's).
    thread: Option<std::thread::ThreadId>,
    counts: HashMap<String, u64>,
    /// (kernel, start, end) of each timed launch, in launch order.
    events: Vec<(String, Event, Event)>,
    /// Kernels with a launch whose events could not be created or recorded.
    untimed: Vec<String>,
}

static PROFILE: Mutex<Option<Profile>> = Mutex::new(None);

fn profile() -> std::sync::MutexGuard<'static, Option<Profile>> {
    PROFILE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts a launch profile of every device and thread (restarting from zero when one is on).
/// With `timed`, each launch is bracketed by two timing events on its stream, read by
/// [`launch_profile_stop`].
pub fn launch_profile_start(timed: bool) {
    start(timed, None);
}

/// Starts a launch profile, as [`launch_profile_start`] does, of the calling thread's launches
/// only: a test that counts what it launches, beside other tests of the same process.
pub fn launch_profile_start_this_thread(timed: bool) {
    start(timed, Some(std::thread::current().id()));
}

fn start(timed: bool, thread: Option<std::thread::ThreadId>) {
    *profile() = Some(Profile {
        thread,
        ..Profile::default()
    });
    STATE.store(if timed { TIMED } else { COUNTING }, Ordering::Relaxed);
}

/// Whether profile `p` counts the calling thread's launches.
fn counts_this_thread(p: &Profile) -> bool {
    p.thread.is_none_or(|t| t == std::thread::current().id())
}

/// Stops the profile and returns the launches by kernel, most GPU time (then most launches)
/// first. A timed profile waits here for the GPU to finish the profiled launches.
pub fn launch_profile_stop() -> Vec<KernelProfile> {
    let timed = STATE.swap(OFF, Ordering::Relaxed) == TIMED;
    let Some(p) = profile().take() else {
        return Vec::new();
    };
    let mut times: HashMap<String, f64> = HashMap::new();
    let mut failed: Vec<String> = p.untimed;
    for (name, start, end) in &p.events {
        let elapsed = end.synchronize().and_then(|_| start.elapsed_ms(end));
        match elapsed {
            Ok(ms) => *times.entry(name.clone()).or_default() += f64::from(ms),
            Err(_) => failed.push(name.clone()),
        }
    }
    let mut out: Vec<KernelProfile> = p
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

pub(crate) fn is_on() -> bool {
    STATE.load(Ordering::Relaxed) != OFF
}

fn is_timed() -> bool {
    STATE.load(Ordering::Relaxed) == TIMED
}

/// A timing event recorded on `stream` before a launch, when the profile is timed.
pub(crate) fn before_launch(stream: &Stream) -> Option<Event> {
    if !is_timed() || !profile().as_ref().is_some_and(counts_this_thread) {
        return None;
    }
    let e = Event::new(stream.device(), true).ok()?;
    e.record(stream).ok()?;
    Some(e)
}

/// Counts a launch of `name` on `stream` (and times it from `start`, when given).
pub(crate) fn after_launch(name: &str, stream: &Stream, start: Option<Event>) {
    let end = start.as_ref().and_then(|_| {
        let e = Event::new(stream.device(), true).ok()?;
        e.record(stream).ok()?;
        Some(e)
    });
    let mut guard = profile();
    let Some(p) = guard.as_mut().filter(|p| counts_this_thread(p)) else {
        return;
    };
    *p.counts.entry(name.to_string()).or_default() += 1;
    if is_timed() {
        match (start, end) {
            (Some(s), Some(e)) => p.events.push((name.to_string(), s, e)),
            _ => p.untimed.push(name.to_string()),
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
