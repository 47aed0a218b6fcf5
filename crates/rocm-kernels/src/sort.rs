//! Typed launch wrappers for the `sort` kernel family: arg-sort along the last dim
//! (`asort_asc_{T}`, `asort_desc_{T}`, all 9 dtypes), Candle's `Tensor::arg_sort_last_dim`.
//!
//! The input is a contiguous `(nrows, ncols)` matrix, the output the contiguous `u32` indices
//! that sort each row. Each row is sorted by one block with a bitonic network over the next
//! power of two of `ncols` held in shared memory (indices and values), so `ncols` is limited by
//! the shared memory one block may use: [`max_cols`] (4096 for 4- and 8-byte types, 8192 for 1-
//! and 2-byte ones with the 48 KiB budget every supported GPU offers); longer rows are
//! [`Error::Unsupported`](crate::Error::Unsupported).
//!
//! ## Order
//! Candle's CPU backend sorts with Rust's stable `sort_by` and `partial_cmp`: equal values keep
//! their index order, ascending and descending alike, and -0.0 equals 0.0. The kernels use a
//! strict total order on (value, index), which gives exactly that result. NaN: the CPU
//! comparator is not a total order with NaN (its result depends on the sort algorithm), so here
//! NaN is defined as larger than every number (last ascending, first descending, like PyTorch),
//! NaNs among themselves in index order.

use hip_core::{DeviceSlice, DeviceSliceMut, LaunchConfig, Stream};

use crate::dtype::KernelDType;
use crate::elementwise::{function, layout_err, unsupported};
use crate::error::Result;

/// The kernel module.
const MODULE: &str = "sort";
/// The shared memory one sort block may use: the default dynamic limit on NVIDIA GPUs, below
/// AMD's 64 KiB LDS.
pub const SHARED_MEMORY_BUDGET: usize = 48 * 1024;
/// The most threads per sort block.
const MAX_BLOCK: usize = 1024;
/// The fewest threads per sort block.
const MIN_BLOCK: usize = 64;

/// Shared memory bytes the kernel uses for a row padded to `ncols_pad` (a power of two)
/// elements of `elem_size` bytes: `ncols_pad` u32 indices padded to 8 bytes, then the values.
pub const fn shared_bytes(ncols_pad: usize, elem_size: usize) -> usize {
    8 * ncols_pad.div_ceil(2) + ncols_pad * elem_size
}

/// The longest row (a power of two) whose sort fits in `budget` bytes of shared memory.
pub const fn max_cols_within(elem_size: usize, budget: usize) -> usize {
    let mut n = 1usize;
    while shared_bytes(n * 2, elem_size) <= budget {
        n *= 2;
    }
    n
}

/// The longest row [`arg_sort`] takes for `T` on `stream`'s device.
pub fn max_cols<T: KernelDType>(stream: &Stream) -> usize {
    let budget = match stream.device().properties().shared_memory_per_block {
        0 => SHARED_MEMORY_BUDGET,
        n => n.min(SHARED_MEMORY_BUDGET),
    };
    max_cols_within(std::mem::size_of::<T>(), budget)
}

/// `dst = src.arg_sort_last_dim(ascending)`: for each of the `nrows` rows of the contiguous
/// `(nrows, ncols)` matrix `src` (the view from the layout's start offset, at least `nrows *
/// ncols` elements), the `ncols` indices of its elements in sorted order, into the contiguous
/// `dst` of exactly `nrows * ncols` u32s. Rows longer than [`max_cols`] are
/// [`crate::Error::Unsupported`].
pub fn arg_sort<T: KernelDType>(
    stream: &Stream,
    src: DeviceSlice<'_, T>,
    nrows: usize,
    ncols: usize,
    ascending: bool,
    dst: &mut DeviceSliceMut<'_, u32>,
) -> Result<()> {
    const OP: &str = "arg_sort";
    let n = nrows
        .checked_mul(ncols)
        .ok_or_else(|| layout_err(OP, format!("{nrows} x {ncols} overflows usize")))?;
    if src.len() < n {
        return Err(layout_err(
            OP,
            format!(
                "the source holds {} elements, fewer than {nrows} x {ncols}",
                src.len()
            ),
        ));
    }
    if dst.len() != n {
        return Err(layout_err(
            OP,
            format!(
                "the destination holds {} elements but the shape has {n}",
                dst.len()
            ),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    let limit = max_cols::<T>(stream);
    if ncols > limit {
        return Err(unsupported(
            OP,
            T::NAME,
            format!(
                "rows of {ncols} elements: the shared-memory bitonic sort takes at most {limit}"
            ),
        ));
    }
    let ncols_pad = ncols.next_power_of_two();
    let block = (ncols_pad / 2).clamp(MIN_BLOCK, MAX_BLOCK) as u32;
    let grid = nrows.min(65_535) as u32;
    let cfg = LaunchConfig {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_mem_bytes: shared_bytes(ncols_pad, std::mem::size_of::<T>()) as u32,
    };
    let dir = if ascending { "asc" } else { "desc" };
    let f = function(stream, MODULE, &format!("asort_{dir}_{}", T::NAME))?;
    // SAFETY: the kernel takes (const T* src, u32* out, u64 nrows, u32 ncols, u32 ncols_pad)
    // with ncols <= ncols_pad (a power of two, < 2^31 since ncols <= max_cols) and dynamic
    // shared memory of shared_bytes(ncols_pad) bytes, which it stays inside. It reads
    // src[0..nrows * ncols) (src.len() >= n, checked) and writes out[0..nrows * ncols),
    // n == dst.len().
    unsafe {
        f.builder(stream, cfg)
            .arg(src)
            .arg(&mut *dst)
            .arg(nrows as u64)
            .arg(ncols as u32)
            .arg(ncols_pad as u32)
            .launch()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(shared_bytes(1, 4), 12);
        assert_eq!(shared_bytes(4096, 8), 16384 + 32768);
        assert_eq!(max_cols_within(1, SHARED_MEMORY_BUDGET), 8192);
        assert_eq!(max_cols_within(2, SHARED_MEMORY_BUDGET), 8192);
        assert_eq!(max_cols_within(4, SHARED_MEMORY_BUDGET), 4096);
        assert_eq!(max_cols_within(8, SHARED_MEMORY_BUDGET), 4096);
        assert_eq!(max_cols_within(8, 64 * 1024), 4096);
        assert_eq!(max_cols_within(4, 64 * 1024), 8192);
        for size in [1, 2, 4, 8] {
            let n = max_cols_within(size, SHARED_MEMORY_BUDGET);
            assert!(n >= 1024, "at least 1024 columns for {size}-byte types");
            assert!(shared_bytes(n, size) <= SHARED_MEMORY_BUDGET);
            assert!(shared_bytes(2 * n, size) > SHARED_MEMORY_BUDGET);
        }
    }

    #[test]
    fn every_kernel_is_in_the_source() {
        let src = crate::modules::full_source(MODULE).expect("sort module");
        for t in [
            "u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64",
        ] {
            assert!(src.contains(&format!("RK_ASORT({t})")), "{t}");
        }
        assert!(src.contains("RK_KERNEL void asort_asc_##T("));
        assert!(src.contains("RK_KERNEL void asort_desc_##T("));
    }
}
