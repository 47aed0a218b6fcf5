//! Helpers shared by the tuning tools (`tune_qmatvec`, `tune_attention`): a seeded generator,
//! back-to-back timing with events, and `NAME=VALUE` compile-time parameter sets.

use std::error::Error;

use hip_core::{Device, Event, Stream};

/// A small deterministic generator (no dependency for a tuning tool).
pub struct Lcg(pub u64);

impl Lcg {
    /// The next 31 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// Uniform in [-1, 1).
    #[allow(dead_code)] // not every tool draws floats
    pub fn uniform(&mut self) -> f32 {
        (self.next() >> 7) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// Milliseconds per call of `op`, over `reps` calls queued back to back (after one warm-up call).
pub fn time_ms(
    d: Device,
    s: &Stream,
    reps: usize,
    mut op: impl FnMut(),
) -> Result<f64, Box<dyn Error>> {
    op();
    let start = Event::new(d, true)?;
    let end = Event::new(d, true)?;
    start.record(s)?;
    for _ in 0..reps {
        op();
    }
    end.record(s)?;
    end.synchronize()?;
    Ok(start.elapsed_ms(&end)? as f64 / reps as f64)
}

/// The value of define `name` in `defines` (`NAME=VALUE` separated by spaces), or `default`.
pub fn define_of(defines: &str, name: &str, default: usize) -> usize {
    defines
        .split(' ')
        .filter_map(|d| d.split_once('='))
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(default)
}

/// The defines as source lines (`~` in a value is a space).
pub fn define_lines(defines: &str) -> String {
    defines
        .split(' ')
        .filter_map(|d| d.split_once('='))
        .map(|(n, v)| format!("#define {n} {}\n", v.replace('~', " ")))
        .collect()
}
