//! Matrix-vector products of float weights (`kernels/gemv.hip`): the few activation rows of a
//! decode step times a Linear layer's row-major weight, `y (rows, n) = x (rows, k) . W^T`.
//!
//! A vendor GEMM for one row is correct but costs several plain launches of host time (its
//! heuristics and argument checks run on every call); a decode step makes one per Linear layer,
//! so candle-rocm sends products of up to [`GEMV_MAX_ROWS`] rows with a row-major weight here.

use hip_core::{DeviceSlice, DeviceSliceMut, LaunchConfig, Stream};

use crate::dtype::KernelDType;
use crate::elementwise::{function, layout_err, unsupported};
use crate::error::Result;

/// The kernel module.
const MODULE: &str = "gemv";

/// The most activation rows one launch takes.
pub const GEMV_MAX_ROWS: usize = 4;

/// Threads per block (several warps, one output column each).
const BLOCK: u32 = 256;

/// `y (rows, n) = x (rows, k) . W^T` for the row-major `(n, k)` weight `w` with row stride
/// `ldw >= k`; `x` holds `rows` contiguous rows of `k`, `y` is contiguous. f32, f16 and bf16,
/// summed in f32; `1 <= rows <=` [`GEMV_MAX_ROWS`].
pub fn gemv<T: KernelDType>(
    stream: &Stream,
    (rows, n, k): (usize, usize, usize),
    x: &DeviceSlice<'_, T>,
    (w, ldw): (&DeviceSlice<'_, T>, usize),
    y: &mut DeviceSliceMut<'_, T>,
) -> Result<()> {
    let op = "gemv";
    if !matches!(T::NAME, "f32" | "f16" | "bf16") {
        return Err(unsupported(
            op,
            T::NAME,
            "only f32, f16 and bf16 weights have it",
        ));
    }
    if rows == 0 || rows > GEMV_MAX_ROWS {
        return Err(layout_err(
            op,
            format!("{rows} activation rows (1 to {GEMV_MAX_ROWS} are taken)"),
        ));
    }
    if ldw < k {
        return Err(layout_err(
            op,
            format!("the weight's row stride {ldw} is below its row length {k}"),
        ));
    }
    // Checked: a huge stride must not wrap around to a small weight extent.
    let w_needed = if n == 0 {
        Some(0)
    } else {
        (n - 1).checked_mul(ldw).and_then(|e| e.checked_add(k))
    };
    let x_needed = rows.checked_mul(k);
    let y_needed = rows.checked_mul(n);
    if x_needed.is_none_or(|e| x.len() < e)
        || w_needed.is_none_or(|e| w.len() < e)
        || y_needed != Some(y.len())
    {
        return Err(layout_err(
            op,
            format!(
                "x holds {}, w {} and y {} elements, for ({rows}, {k}) x ({n}, {k} | stride \
                 {ldw})^T",
                x.len(),
                w.len(),
                y.len()
            ),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    if k == 0 {
        y.memset_async(0)?;
        return Ok(());
    }
    let fits = |v: usize| u32::try_from(v).ok().filter(|&v| v < i32::MAX as u32);
    let (Some(n32), Some(k32)) = (fits(n), fits(k)) else {
        return Err(layout_err(
            op,
            format!("n = {n} or k = {k} does not fit the kernel's 32-bit index"),
        ));
    };
    let warp = match stream.device().properties().warp_size {
        0 => 64,
        w => w as usize,
    };
    let columns_per_block = (BLOCK as usize / warp).max(1);
    let blocks = fits(n.div_ceil(columns_per_block))
        .ok_or_else(|| layout_err(op, format!("{n} output columns are too many")))?;
    let config = LaunchConfig {
        grid: [blocks, 1, 1],
        block: [BLOCK, 1, 1],
        shared_mem_bytes: 0,
    };
    let f = function(stream, MODULE, &format!("gemv_{}", T::NAME))?;
    // SAFETY: gemv_T takes (u32 rows, u32 n, u32 k, const T* x, const T* w, u64 ldw, T* y); it
    // reads x[0 .. rows k) and w[j ldw .. j ldw + k) for j < n (both within the checked
    // lengths) and writes y[0 .. rows n) (y's exact length); warps past n return at once.
    unsafe {
        f.builder(stream, config)
            .arg(rows as u32)
            .arg(n32)
            .arg(k32)
            .arg(*x)
            .arg(*w)
            .arg(ldw as u64)
            .arg(&mut *y)
            .launch()?
    };
    Ok(())
}
