//! Events: markers in a stream's work, for ordering across streams and for timing.

use crate::device::Device;
use crate::driver::RawEvent;
use crate::error::{Result, ResultExt};
use crate::stream::Stream;

/// An event. Record it on a stream, then wait for it (on the host or from another stream) or
/// measure the time between two recorded events. Destroyed on drop; not `Clone` (wrap it in an
/// `Arc` to share). `Send + Sync`.
pub struct Event {
    device: Device,
    raw: RawEvent,
    timing: bool,
}

impl Event {
    /// A new event on `device`; `timing` enables [`Event::elapsed_ms`] (timing events are a
    /// little more expensive to record).
    pub fn new(device: Device, timing: bool) -> Result<Event> {
        device.make_current()?;
        let raw = device.driver().event_create(timing)?;
        Ok(Event {
            device,
            raw,
            timing,
        })
    }

    pub(crate) fn raw(&self) -> RawEvent {
        self.raw
    }

    /// The device the event belongs to.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Records the event at the current end of `stream`'s queued work.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        if stream.device() != self.device {
            return Err(crate::Error::invalid(
                "Event::record",
                format!(
                    "the event belongs to device {} but the stream to device {}",
                    self.device.ordinal(),
                    stream.device().ordinal()
                ),
            ));
        }
        self.device.make_current()?;
        // SAFETY: both handles are alive while `self` and `stream` are.
        unsafe { self.device.driver().event_record(self.raw, stream.raw()) }
    }

    /// Blocks until the work recorded before the event has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.device.make_current()?;
        // SAFETY: the event is alive while `self` is.
        unsafe { self.device.driver().event_synchronize(self.raw) }
            .context(|| "waiting for an event".to_string())
    }

    /// `true` when the work recorded before the event has finished (or it was never recorded).
    pub fn query(&self) -> Result<bool> {
        self.device.make_current()?;
        // SAFETY: the event is alive while `self` is.
        unsafe { self.device.driver().event_query(self.raw) }
    }

    /// Milliseconds from `self` to `end`; both must be timing events, recorded and completed.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        if !self.timing || !end.timing {
            return Err(crate::Error::invalid(
                "Event::elapsed_ms",
                "both events must be created with timing enabled",
            ));
        }
        self.device.make_current()?;
        // SAFETY: both events are alive while `self` and `end` are.
        unsafe { self.device.driver().event_elapsed_ms(self.raw, end.raw) }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.device.make_current().is_ok() {
            // SAFETY: `self` owns the event and drops it exactly once; the runtime defers the
            // release of an event that is still pending.
            let _ = unsafe { self.device.driver().event_destroy(self.raw) };
        }
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("device", &self.device.ordinal())
            .field("timing", &self.timing)
            .finish()
    }
}
