//! The first-use check of the matrix-instruction attention: before [`AttnKernel::Auto`] uses the
//! matrix-instruction kernels of a (device, dtype, head dim), it runs small known problems
//! on them and on the portable kernels and compares: a prefill (80 queries x 300 keys: two
//! query tiles of the AMD kernels, one partial, and one partial tile of NVIDIA's, whose first
//! key tiles every row sees whole) and decodes (one query row: 8 q heads on 2 kv heads against
//! 300 keys, split and merged, and against 50, one split; 64 q heads on 32 kv heads against
//! 1000 keys, where each warp of NVIDIA's matrix decode walks several tiles; elsewhere the
//! portable decode runs on both sides); causal, grouped heads, random inputs from fixed seeds.
//! A target without the kernels, or kernels that disagree, leave Auto on the portable path; a
//! disagreement prints one warning. Operand layouts of the matrix instructions were written
//! from the vendors' tables without AMD hardware to run them on, so a wrong fast path must
//! never give a user wrong answers silently.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use hip_core::Stream;

use super::{attention, AttnInput, AttnKernel, AttnOptions, AttnOutput, AttnShape};
use crate::dtype::KernelDType;
use crate::error::Result;

/// Verdicts by (device ordinal, dtype name, head dim).
type Verdicts = HashMap<(usize, &'static str, usize), bool>;

static VERDICTS: OnceLock<Mutex<Verdicts>> = OnceLock::new();
static WARNED: AtomicBool = AtomicBool::new(false);

/// Largest difference from the portable kernels that passes: a few units in the last place of
/// the output type after P is rounded to it (a wrong operand layout misses by O(0.1)).
fn tolerance(dtype: &str) -> f32 {
    if dtype == "bf16" {
        3e-2
    } else {
        1e-2
    }
}

/// The 16-bit float types with matrix-instruction kernels.
trait HalfFloat: KernelDType + Copy {
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
}

impl HalfFloat for half::bf16 {
    fn from_f32(x: f32) -> Self {
        half::bf16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
}

impl HalfFloat for half::f16 {
    fn from_f32(x: f32) -> Self {
        half::f16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
}

/// Whether Auto uses the matrix-instruction kernels of T and head dim `d` on the stream's
/// device (cached after the first call).
pub(super) fn verdict<T: KernelDType>(stream: &Stream, d: usize) -> Result<bool> {
    let key = (stream.device().ordinal(), T::NAME, d);
    let cache = VERDICTS.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(&v) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(v);
    }
    let v = match T::NAME {
        "bf16" => check::<half::bf16>(stream, d)?,
        "f16" => check::<half::f16>(stream, d)?,
        _ => false,
    };
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, v);
    Ok(v)
}

/// Deterministic inputs in [-1, 1) (a 64-bit LCG).
fn inputs(len: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The largest absolute difference (infinite where either side is not finite).
pub(super) fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            if x.is_finite() && y.is_finite() {
                (x - y).abs()
            } else {
                f32::INFINITY
            }
        })
        .fold(0.0, f32::max)
}

/// Runs the known problems on both kernel kinds; false where the matrix kernels are missing or
/// disagree.
fn check<T: HalfFloat>(stream: &Stream, d: usize) -> Result<bool> {
    // Prefill: 80 queries x 300 keys, 2 q heads on 1 kv head. Decode, one query row: 8 q heads
    // on 2 kv heads against 300 keys (a few splits, then the merge) and against 50 keys (one
    // split, which writes the output itself); 64 q heads on 32 kv heads against 1000 keys (few
    // splits for that many blocks: every warp of NVIDIA's matrix decode walks several tiles
    // through its ring).
    let problems = [
        (80, 300, 2, 1),
        (1, 300, 8, 2),
        (1, 50, 8, 2),
        (1, 1000, 64, 32),
    ];
    let mut worst = 0.0f32;
    for (seq_q, seq_k, heads_q, heads_kv) in problems {
        let shape = AttnShape {
            batch: 1,
            seq_q,
            seq_k,
            heads_q,
            heads_kv,
            head_dim: d,
        };
        match compare::<T>(stream, &shape)? {
            Some(diff) => worst = worst.max(diff),
            // No matrix-instruction kernels for this target: the portable path, silently.
            None => return Ok(false),
        }
    }
    let agree = worst <= tolerance(T::NAME);
    if !agree && !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "warning: rocm-kernels: the matrix-instruction attention kernels disagree with the \
             portable kernels on {} ({} head dim {d}: largest difference {worst}); fused \
             attention uses the portable kernels (slower, correct) on this device",
            stream.device().properties().arch_name,
            T::NAME,
        );
    }
    Ok(agree)
}

/// The largest difference between the portable and the matrix-instruction kernels on one
/// causal problem (random inputs from fixed seeds), or None where the matrix kernels refuse it.
fn compare<T: HalfFloat>(stream: &Stream, shape: &AttnShape) -> Result<Option<f32>> {
    let (d, hq, hkv) = (shape.head_dim, shape.heads_q, shape.heads_kv);
    let to_t = |v: Vec<f32>| v.into_iter().map(T::from_f32).collect::<Vec<T>>();
    let q = stream.alloc_from_host(&to_t(inputs(shape.seq_q * hq * d, 1)))?;
    let k = stream.alloc_from_host(&to_t(inputs(shape.seq_k * hkv * d, 2)))?;
    let v = stream.alloc_from_host(&to_t(inputs(shape.seq_k * hkv * d, 3)))?;
    let q_strides = [shape.seq_q * hq * d, hq * d, d];
    let kv_strides = [shape.seq_k * hkv * d, hkv * d, d];
    let mut outputs = Vec::with_capacity(2);
    for kernel in [AttnKernel::Portable, AttnKernel::Matrix] {
        let opts = AttnOptions {
            kernel,
            ..AttnOptions::new(1.0 / (d as f32).sqrt(), true)
        };
        let mut out = stream.alloc::<T>(shape.seq_q * hq * d)?;
        let run = attention::<T>(
            stream,
            shape,
            &opts,
            AttnInput {
                data: q.as_slice(),
                strides: q_strides,
            },
            AttnInput {
                data: k.as_slice(),
                strides: kv_strides,
            },
            AttnInput {
                data: v.as_slice(),
                strides: kv_strides,
            },
            None,
            AttnOutput {
                data: &mut out.as_mut_slice(),
                strides: q_strides,
            },
        );
        match (kernel, run) {
            (_, Ok(())) => {}
            (AttnKernel::Matrix, Err(_)) => return Ok(None),
            (_, Err(e)) => return Err(e),
        }
        outputs.push(
            out.to_host_vec()?
                .into_iter()
                .map(T::to_f32)
                .collect::<Vec<f32>>(),
        );
    }
    Ok(Some(max_difference(&outputs[0], &outputs[1])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disagreement_or_a_nan_fails_the_check() {
        let a = [0.5f32, -0.25, 0.125];
        assert_eq!(max_difference(&a, &a), 0.0);
        let off = [0.5f32, -0.25, 0.4];
        assert!(max_difference(&a, &off) > tolerance("bf16"));
        let nan = [0.5f32, f32::NAN, 0.125];
        assert_eq!(max_difference(&a, &nan), f32::INFINITY);
        assert_eq!(max_difference(&a, &a[..2]), f32::INFINITY);
        let close = [0.5f32 + 1e-3, -0.25, 0.125];
        assert!(max_difference(&a, &close) <= tolerance("f16"));
    }

    #[test]
    fn inputs_are_deterministic_and_in_range() {
        let x = inputs(1000, 7);
        assert_eq!(x, inputs(1000, 7));
        assert_ne!(x, inputs(1000, 8));
        assert!(x.iter().all(|v| (-1.0..1.0).contains(v)));
    }
}
