//! Activations rounded to 8 bits for the integer matrix-vector product, kept for reuse.
//!
//! A transformer layer multiplies the same activations by several weights (q, k and v; gate and
//! up). The device keeps the last rounded activations with the [`ActivationKey`] of their
//! source, so that the next product of the same contents skips the rounding launch. The key
//! names the source buffer's contents exactly (hip-core's [`ContentKey`]: a never-reused buffer
//! id and its count of writes), the range read and the dtype: a freed and reallocated buffer,
//! a write into it, another range or dtype all miss.

use hip_core::{ContentKey, DeviceBuffer};

/// What a rounding was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ActivationKey {
    /// The source buffer's contents.
    pub content: ContentKey,
    /// First element of the rows read.
    pub offset: usize,
    /// Rows and row length.
    pub m: usize,
    pub k: usize,
    /// The source dtype's kernel name.
    pub dtype: &'static str,
}

/// Rounded activations (`xq`: signed bytes, `xds`: per-block factors) and their source (`None`:
/// a temporary copy, never reused).
pub(crate) struct RoundedActivations {
    pub key: Option<ActivationKey>,
    pub xq: DeviceBuffer<u8>,
    pub xds: DeviceBuffer<f32>,
}
