//! Quantized matrix-matrix products (prefill): the weights dequantized to the activation dtype in
//! chunks of whole rows, each chunk multiplied by one rocBLAS (cuBLAS) GEMM into its columns of
//! the output.
//!
//! Chunking bounds the temporary (one chunk, or two when overlapped, instead of the whole
//! dequantized matrix). With [`QuantizedGemmPlan::overlap`] the chunks are dequantized on the
//! device's side stream while the GEMMs run on the main stream, ordered by events (no host
//! waits), so that the memory-bound dequantization of chunk `i + 1` can run beside the
//! compute-bound GEMM of chunk `i`. On an H100 neither small chunks (which could stay in the
//! last-level cache) nor overlap beat one whole-matrix GEMM (docs/quantized.md): the default
//! only splits matrices larger than 256 MiB dequantized.

use candle_core::Result;
use hip_core::{DeviceBuffer, DeviceSlice, Event};
use rocblas_safe::{GemmConfig, GemmElement, Operation};
use rocm_kernels::quantized::{self as qk, QuantType};
use rocm_kernels::KernelDType;

use crate::error::{hip_err, kernel_err, RocmError};
use crate::RocmDevice;

/// How quantized matmuls with more rows than the matrix-vector kernels take are split (see
/// [`RocmDevice::set_quantized_gemm_plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantizedGemmPlan {
    /// The most bytes of dequantized weights per chunk (rounded down to whole rows, and to a
    /// multiple of 128 rows where a chunk holds more; at least one row). `0`: the whole matrix
    /// as one chunk.
    pub chunk_bytes: usize,
    /// Dequantize the next chunk on the device's side stream while the GEMM of the current one
    /// runs on the main stream.
    pub overlap: bool,
}

impl Default for QuantizedGemmPlan {
    /// Chunks of at most 256 MiB, one stream: a layer matrix of an 8B model (117 MB in f16) is
    /// one chunk, since narrower GEMMs were slower than the whole one on the GPU machine and
    /// overlapping gained nothing there (docs/quantized.md); a large output layer (128256 x 4096
    /// is 1 GiB in f16) is split, which bounds the temporary.
    fn default() -> Self {
        QuantizedGemmPlan {
            chunk_bytes: 256 << 20,
            overlap: false,
        }
    }
}

impl QuantizedGemmPlan {
    /// Rows of an `(n, k)` weight per chunk, for elements of `elem_bytes` bytes.
    pub fn chunk_rows(&self, n: usize, k: usize, elem_bytes: usize) -> usize {
        let row_bytes = (k * elem_bytes).max(1);
        if self.chunk_bytes == 0 {
            return n.max(1);
        }
        let rows = self.chunk_bytes / row_bytes;
        let rows = if rows >= 256 { rows / 128 * 128 } else { rows };
        rows.clamp(1, n.max(1))
    }
}

/// `out (m, n) = x (m, k) x W^T` for the quantized `(n, k)` weights `blocks` of type `q`; `xs`
/// holds `x` contiguous from its first element.
pub(crate) fn gemm_dequantized<T: KernelDType + GemmElement>(
    dev: &RocmDevice,
    op: &str,
    q: QuantType,
    blocks: &DeviceBuffer<u8>,
    (m, n, k): (usize, usize, usize),
    xs: &DeviceSlice<'_, T>,
    out: &mut DeviceBuffer<T>,
) -> Result<()> {
    let plan = dev.quantized_gemm_plan();
    let rows = plan.chunk_rows(n, k, std::mem::size_of::<T>());
    let row_bytes = q.row_bytes(op, k).map_err(kernel_err(op))?;
    let chunks = n.div_ceil(rows);
    // Overlap needs a second chunk to overlap with.
    let side = if plan.overlap && chunks > 1 {
        Some(dev.side_stream(op)?)
    } else {
        None
    };
    let main = dev.stream();
    let deq_stream = side.as_ref().unwrap_or(main);
    // One buffer when the chunks follow each other on one stream, two (alternating) when they
    // are dequantized ahead on the side stream. They are freed on the main stream, which waits
    // for every dequantization before its GEMM.
    let n_bufs = if side.is_some() { 2 } else { 1 };
    let mut bufs = (0..n_bufs)
        .map(|_| dev.alloc::<T>(op, rows.min(n) * k))
        .collect::<Result<Vec<_>>>()?;
    if let Some(side) = &side {
        // The buffers may have been freed by work still queued on the main stream.
        side.wait_for(main).map_err(hip_err(op))?;
    }
    // `gemm_done[b]`: the GEMM that last read buffer `b` (the side stream waits for it before
    // overwriting the buffer).
    let mut gemm_done: Vec<Option<Event>> = (0..n_bufs).map(|_| None).collect();
    let blas = dev.blas(op)?;
    for c in 0..chunks {
        let r0 = c * rows;
        let r = rows.min(n - r0);
        let b = c % n_bufs;
        if let (Some(side), Some(done)) = (&side, &gemm_done[b]) {
            side.wait_event(done).map_err(hip_err(op))?;
        }
        let src = blocks
            .slice(r0 * row_bytes..(r0 + r) * row_bytes)
            .map_err(hip_err(op))?;
        let mut dst = bufs[b].slice_mut(0..r * k).map_err(hip_err(op))?;
        qk::dequantize(deq_stream, q, &src, &mut dst).map_err(kernel_err(op))?;
        if let Some(side) = &side {
            let ready = side.record_event().map_err(hip_err(op))?;
            main.wait_event(&ready).map_err(hip_err(op))?;
        }
        // Column-major view: C (n x m, ldc n) rows r0..r0+r = A^T (r x k, stored k x r) x B
        // (k x m, x's rows).
        let cfg = GemmConfig {
            transa: Operation::Transpose,
            transb: Operation::None,
            m: r,
            n: m,
            k,
            lda: k,
            ldb: k,
            ldc: n,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
            batch: 1,
        };
        let a = bufs[b].slice(0..r * k).map_err(hip_err(op))?;
        let mut c_view = out.slice_mut(r0..).map_err(hip_err(op))?;
        blas.gemm(&cfg, 1.0, &a, xs, 0.0, &mut c_view)
            .map_err(|e| RocmError::library(op, "rocBLAS", e))?;
        if side.is_some() && c + n_bufs < chunks {
            gemm_done[b] = Some(main.record_event().map_err(hip_err(op))?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::QuantizedGemmPlan;

    fn plan(chunk_bytes: usize) -> QuantizedGemmPlan {
        QuantizedGemmPlan {
            chunk_bytes,
            overlap: true,
        }
    }

    #[test]
    fn chunk_rows_are_whole_rows_within_the_budget() {
        // 16 MiB of f16 rows of 4096: 2048 rows (a multiple of 128 already).
        assert_eq!(plan(16 << 20).chunk_rows(14336, 4096, 2), 2048);
        // 3 MB of f32 rows of 4096 = 183 rows: below 256, kept as is.
        assert_eq!(plan(3_000_000).chunk_rows(14336, 4096, 4), 183);
        // 5 MB of f16 rows of 4096 = 610 rows: rounded down to 512.
        assert_eq!(plan(5_000_000).chunk_rows(14336, 4096, 2), 512);
        // Less than a row: one row. More than the matrix: the matrix.
        assert_eq!(plan(10).chunk_rows(37, 256, 2), 1);
        assert_eq!(plan(1 << 30).chunk_rows(37, 256, 2), 37);
        // 0: the whole matrix.
        assert_eq!(plan(0).chunk_rows(14336, 4096, 2), 14336);
        assert_eq!(plan(0).chunk_rows(0, 4096, 2), 1);
    }
}
