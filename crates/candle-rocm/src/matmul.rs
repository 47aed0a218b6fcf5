//! How a Candle matmul maps onto one column-major strided-batched GEMM.
//!
//! Candle asks for `dst[b] (m, n) = lhs[b] (m, k) x rhs[b] (k, n)`, row-major, with `lhs` and
//! `rhs` given by layouts (dims, strides, start offset). A row-major `(r, c)` matrix with row
//! stride `ld` is the column-major `(c, r)` matrix with leading dimension `ld`, so the row-major
//! product is the column-major `dst^T (n, m) = rhs^T (n, k) x lhs^T (k, m)`: GEMM's `A` is
//! `rhs`, its `B` is `lhs`, with `m' = n`, `n' = m`, `ldc = n`.
//!
//! Accepted layouts (a superset of candle's CUDA backend's `gemm_config`, never a layout it
//! would compute differently):
//! * each matrix is row-major (`col stride 1`, `row stride >= cols`) or column-major (`row
//!   stride 1`, `col stride >= rows`, i.e. a transposed view); a dim of size 1 may have any
//!   stride; a leading dimension larger than the matrix (a narrowed view) is fine;
//! * the batch dims (everything before the last two) collapse to one batch stride: size-1
//!   dims are ignored, the others must be nested (`stride[i] == stride[i + 1] * dim[i + 1]`),
//!   which includes a broadcast batch (all strides 0) and any number of batch dims.
//!
//! Anything else (e.g. a stride-0 row or column dim, a unit stride on a batch dim, or batch
//! dims that do not nest) is copied to a contiguous operand first ([`operands_needing_copy`]):
//! every layout Candle's CPU matmul computes works here too.

use candle_core::{Error, Layout, Result};
use rocblas_safe::{GemmConfig, Operation};

/// How one operand's matrix is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Storage {
    /// Row-major with this row stride.
    RowMajor(usize),
    /// Column-major (a transposed row-major matrix) with this column stride.
    ColMajor(usize),
}

/// The storage of an `(rows, cols)` matrix with these strides, if GEMM can read it.
fn matrix_storage(
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
) -> Option<Storage> {
    if rows == 0 || cols == 0 {
        // No element is read: any strides (candle gives 0 strides next to an empty dim).
        return Some(Storage::RowMajor(cols.max(1)));
    }
    if (col_stride == 1 || cols <= 1) && (rows <= 1 || row_stride >= cols.max(1)) {
        let ld = if rows <= 1 { cols.max(1) } else { row_stride };
        return Some(Storage::RowMajor(ld));
    }
    if (row_stride == 1 || rows <= 1) && (cols <= 1 || col_stride >= rows.max(1)) {
        let ld = if cols <= 1 { rows.max(1) } else { col_stride };
        return Some(Storage::ColMajor(ld));
    }
    None
}

/// The single stride between consecutive batch matrices, if the batch dims collapse to one
/// (`None` when they do not). With at most one batch matrix the stride is irrelevant: 0.
fn batch_stride(dims: &[usize], strides: &[usize]) -> Option<usize> {
    let kept: Vec<(usize, usize)> = dims
        .iter()
        .zip(strides)
        .filter(|(&d, _)| d != 1)
        .map(|(&d, &s)| (d, s))
        .collect();
    if kept.iter().any(|&(d, _)| d == 0) || kept.is_empty() {
        return Some(0);
    }
    for w in kept.windows(2) {
        let ((_, outer), (inner_dim, inner)) = (w[0], w[1]);
        if outer != inner.checked_mul(inner_dim)? {
            return None;
        }
    }
    kept.last().map(|&(_, s)| s)
}

/// One operand as GEMM reads it: its matrix storage and the stride between batch matrices.
fn operand(rows: usize, cols: usize, layout: &Layout) -> Option<(Storage, usize)> {
    let (dims, strides) = (layout.dims(), layout.stride());
    let r = dims.len();
    let storage = matrix_storage(rows, cols, strides[r - 2], strides[r - 1])?;
    let batch = batch_stride(&dims[..r - 2], &strides[..r - 2])?;
    Some((storage, batch))
}

/// The error candle gives for a layout its matmul cannot take.
fn striding_error(
    bmnk: (usize, usize, usize, usize),
    lhs_l: &Layout,
    rhs_l: &Layout,
    msg: &'static str,
) -> Error {
    Error::MatMulUnexpectedStriding(Box::new(candle_core::error::MatMulUnexpectedStriding {
        lhs_l: lhs_l.clone(),
        rhs_l: rhs_l.clone(),
        bmnk,
        msg,
    }))
}

/// Checks that the layouts' dims describe `lhs (b, m, k) x rhs (b, k, n)`.
fn check_dims(
    (b, m, n, k): (usize, usize, usize, usize),
    lhs_l: &Layout,
    rhs_l: &Layout,
) -> Result<()> {
    let striding = |msg| striding_error((b, m, n, k), lhs_l, rhs_l, msg);
    let (ld, rd) = (lhs_l.dims(), rhs_l.dims());
    if ld.len() < 2 || rd.len() < 2 {
        return Err(striding("matmul needs operands of rank 2 or more"));
    }
    let (lr, rr) = (ld.len(), rd.len());
    if ld[lr - 2..] != [m, k] || rd[rr - 2..] != [k, n] {
        return Err(striding(
            "the operands' last two dims are not (m, k) and (k, n)",
        ));
    }
    if ld[..lr - 2].iter().product::<usize>() != b || rd[..rr - 2].iter().product::<usize>() != b {
        return Err(striding(
            "the operands' batch dims do not multiply to the batch size",
        ));
    }
    Ok(())
}

/// Which operands one strided-batched GEMM cannot read as they are, `(lhs, rhs)`: those must
/// be copied to contiguous operands first (e.g. a unit stride on a batch dim, as mamba2's
/// scan makes, or batch dims that do not nest). Candle's CPU computes every such layout, so
/// the backend copies rather than refuses. Dims that do not describe the product are an error.
pub(crate) fn operands_needing_copy(
    bmnk: (usize, usize, usize, usize),
    lhs_l: &Layout,
    rhs_l: &Layout,
) -> Result<(bool, bool)> {
    check_dims(bmnk, lhs_l, rhs_l)?;
    let (_, m, n, k) = bmnk;
    Ok((
        operand(m, k, lhs_l).is_none(),
        operand(k, n, rhs_l).is_none(),
    ))
}

/// The GEMM for `lhs (b, m, k) x rhs (b, k, n)` given candle's `(b, m, n, k)` and the two
/// layouts (whose start offsets the caller applies to the buffers). A layout GEMM cannot read
/// is candle's `MatMulUnexpectedStriding` (see [`operands_needing_copy`]).
pub(crate) fn gemm_config(
    (b, m, n, k): (usize, usize, usize, usize),
    lhs_l: &Layout,
    rhs_l: &Layout,
) -> Result<GemmConfig> {
    check_dims((b, m, n, k), lhs_l, rhs_l)?;
    let striding = |msg| striding_error((b, m, n, k), lhs_l, rhs_l, msg);
    let (lhs_storage, stride_b) = operand(m, k, lhs_l).ok_or_else(|| {
        striding("the lhs is neither row- nor column-major, or its batch dims do not collapse")
    })?;
    let (rhs_storage, stride_a) = operand(k, n, rhs_l).ok_or_else(|| {
        striding("the rhs is neither row- nor column-major, or its batch dims do not collapse")
    })?;
    let (transa, lda) = match rhs_storage {
        Storage::RowMajor(ld) => (Operation::None, ld),
        Storage::ColMajor(ld) => (Operation::Transpose, ld),
    };
    let (transb, ldb) = match lhs_storage {
        Storage::RowMajor(ld) => (Operation::None, ld),
        Storage::ColMajor(ld) => (Operation::Transpose, ld),
    };
    if b > 1 && stride_a == 0 && transb == Operation::None && stride_b == m * ldb {
        // The same rhs for every batch entry (a Linear layer's broadcast weight) and lhs rows
        // evenly spaced across batches: one GEMM of `b * m` rows, which the library runs far
        // better than `b` small ones (the output is contiguous either way).
        return Ok(GemmConfig {
            transa,
            transb,
            m: n,
            n: b * m,
            k,
            lda,
            ldb,
            ldc: n.max(1),
            stride_a: 0,
            stride_b: 0,
            stride_c: b * m * n,
            batch: 1,
        });
    }
    Ok(GemmConfig {
        transa,
        transb,
        m: n,
        n: m,
        k,
        lda,
        ldb,
        ldc: n.max(1),
        stride_a,
        stride_b,
        stride_c: m * n,
        batch: b,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Operation::{None as N, Transpose as T};

    fn layout(dims: &[usize], strides: &[usize], offset: usize) -> Layout {
        Layout::new(dims.into(), strides.to_vec(), offset)
    }

    fn cfg(bmnk: (usize, usize, usize, usize), l: &Layout, r: &Layout) -> Result<GemmConfig> {
        gemm_config(bmnk, l, r)
    }

    /// (transa, transb, lda, ldb, stride_a, stride_b)
    fn summary(c: &GemmConfig) -> (Operation, Operation, usize, usize, usize, usize) {
        (c.transa, c.transb, c.lda, c.ldb, c.stride_a, c.stride_b)
    }

    #[test]
    fn contiguous_rank2_to_rank4() {
        let c = cfg(
            (1, 3, 5, 4),
            &Layout::contiguous((3, 4)),
            &Layout::contiguous((4, 5)),
        )
        .unwrap();
        assert_eq!(
            (c.m, c.n, c.k, c.ldc, c.batch, c.stride_c),
            (5, 3, 4, 5, 1, 15)
        );
        assert_eq!(summary(&c), (N, N, 5, 4, 0, 0));
        let c = cfg(
            (2, 3, 5, 4),
            &Layout::contiguous((2, 3, 4)),
            &Layout::contiguous((2, 4, 5)),
        )
        .unwrap();
        assert_eq!(summary(&c), (N, N, 5, 4, 20, 12));
        let c = cfg(
            (6, 3, 5, 4),
            &Layout::contiguous((2, 3, 3, 4)),
            &Layout::contiguous((2, 3, 4, 5)),
        )
        .unwrap();
        assert_eq!(summary(&c), (N, N, 5, 4, 20, 12));
        assert_eq!((c.batch, c.stride_c), (6, 15));
    }

    #[test]
    fn transposed_operands() {
        // lhs (m, k) = transpose of a contiguous (k, m); rhs likewise.
        let lhs = Layout::contiguous((4, 3)).transpose(0, 1).unwrap();
        let rhs = Layout::contiguous((5, 4)).transpose(0, 1).unwrap();
        let c = cfg((1, 3, 5, 4), &lhs, &rhs).unwrap();
        assert_eq!(summary(&c), (T, T, 4, 3, 0, 0));
        let c = cfg((1, 3, 5, 4), &Layout::contiguous((3, 4)), &rhs).unwrap();
        assert_eq!(summary(&c), (T, N, 4, 4, 0, 0));
        let c = cfg((1, 3, 5, 4), &lhs, &Layout::contiguous((4, 5))).unwrap();
        assert_eq!(summary(&c), (N, T, 5, 3, 0, 0));
        // Batched transposed: (2, 4, 3) transposed to (2, 3, 4).
        let lhs = Layout::contiguous((2, 4, 3)).transpose(1, 2).unwrap();
        let c = cfg((2, 3, 5, 4), &lhs, &Layout::contiguous((2, 4, 5))).unwrap();
        assert_eq!(summary(&c), (N, T, 5, 3, 20, 12));
    }

    #[test]
    fn broadcast_batch_and_narrowed_views() {
        // rhs shared by every batch (stride 0), as `x.matmul(&w.broadcast_left(b))`.
        // With lhs rows evenly spaced across batches, one GEMM of all rows.
        let rhs = layout(&[3, 4, 5], &[0, 5, 1], 0);
        let c = cfg((3, 2, 5, 4), &Layout::contiguous((3, 2, 4)), &rhs).unwrap();
        assert_eq!(summary(&c), (N, N, 5, 4, 0, 0));
        assert_eq!((c.m, c.n, c.k, c.batch, c.ldc), (5, 6, 4, 1, 5));
        // Rows of a narrowed lhs (ld 10) evenly spaced too: still one GEMM.
        let lhs = layout(&[3, 2, 4], &[20, 10, 1], 1);
        let c = cfg((3, 2, 5, 4), &lhs, &rhs).unwrap();
        assert_eq!((c.n, c.ldb, c.batch), (6, 10, 1));
        // Batches further apart than their rows: one GEMM per batch entry.
        let lhs = layout(&[3, 2, 4], &[9, 4, 1], 0);
        let c = cfg((3, 2, 5, 4), &lhs, &rhs).unwrap();
        assert_eq!(summary(&c), (N, N, 5, 4, 0, 9));
        assert_eq!((c.n, c.batch), (2, 3));
        // A transposed lhs (column-major): one GEMM per batch entry.
        let lhs = Layout::contiguous((3, 4, 2)).transpose(1, 2).unwrap();
        let c = cfg((3, 2, 5, 4), &lhs, &rhs).unwrap();
        assert_eq!((c.transb, c.n, c.batch, c.stride_b), (T, 2, 3, 8));
        // Two broadcast batch dims.
        let rhs = layout(&[2, 3, 4, 5], &[0, 0, 5, 1], 7);
        let c = cfg((6, 2, 5, 4), &Layout::contiguous((2, 3, 2, 4)), &rhs).unwrap();
        assert_eq!((c.stride_a, c.n, c.batch), (0, 12, 1));
        // A narrowed lhs: (3, 4) columns 2..6 of a (3, 10) matrix: ld 10.
        let lhs = layout(&[3, 4], &[10, 1], 2);
        let c = cfg((1, 3, 5, 4), &lhs, &Layout::contiguous((4, 5))).unwrap();
        assert_eq!(summary(&c), (N, N, 5, 10, 0, 0));
        // Batch dims of rank 3 that nest.
        let lhs = Layout::contiguous((2, 2, 2, 3, 4));
        let rhs = Layout::contiguous((2, 2, 2, 4, 5));
        let c = cfg((8, 3, 5, 4), &lhs, &rhs).unwrap();
        assert_eq!(summary(&c), (N, N, 5, 4, 20, 12));
    }

    #[test]
    fn size_one_dims_take_any_stride() {
        // k == 1: an outer product, strides of the k dims are irrelevant.
        let lhs = layout(&[3, 1], &[1, 99], 0);
        let rhs = layout(&[1, 5], &[42, 1], 0);
        let c = cfg((1, 3, 5, 1), &lhs, &rhs).unwrap();
        assert_eq!((c.transa, c.lda), (N, 5));
        // n == 1: a matrix-vector product with a strided vector column is still a matrix.
        let rhs = layout(&[4, 1], &[1, 7], 0);
        let c = cfg((1, 3, 1, 4), &Layout::contiguous((3, 4)), &rhs).unwrap();
        assert_eq!((c.transa, c.lda, c.ldc), (N, 1, 1));
        // m == 1
        let lhs = layout(&[1, 4], &[13, 1], 0);
        let c = cfg((1, 1, 5, 4), &lhs, &Layout::contiguous((4, 5))).unwrap();
        assert_eq!((c.transb, c.ldb), (N, 4));
        // A size-1 batch dim with an odd stride is ignored.
        let lhs = layout(&[1, 2, 3, 4], &[1000, 12, 4, 1], 0);
        let c = cfg((2, 3, 5, 4), &lhs, &Layout::contiguous((1, 2, 4, 5))).unwrap();
        assert_eq!(c.stride_b, 12);
    }

    #[test]
    fn rejected_layouts() {
        let ok = Layout::contiguous((4, 5));
        let is_striding =
            |r: Result<GemmConfig>| matches!(r, Err(Error::MatMulUnexpectedStriding(_)));
        // A column broadcast (stride 0) inside the matrix.
        assert!(is_striding(cfg(
            (1, 3, 5, 4),
            &layout(&[3, 4], &[0, 1], 0),
            &ok
        )));
        // Neither dim contiguous (every other element).
        assert!(is_striding(cfg(
            (1, 3, 5, 4),
            &layout(&[3, 4], &[8, 2], 0),
            &ok
        )));
        // Overlapping rows (row stride smaller than the row).
        assert!(is_striding(cfg(
            (1, 3, 5, 4),
            &layout(&[3, 4], &[2, 1], 0),
            &ok
        )));
        // Batch dims that do not nest: a permuted batch.
        let lhs = Layout::contiguous((2, 3, 3, 4)).transpose(0, 1).unwrap();
        assert!(is_striding(cfg(
            (6, 3, 5, 4),
            &lhs,
            &Layout::contiguous((3, 2, 4, 5))
        )));
        // Wrong dims for (b, m, n, k), rank 1.
        assert!(is_striding(cfg(
            (1, 3, 5, 4),
            &Layout::contiguous((3, 5)),
            &ok
        )));
        assert!(is_striding(cfg(
            (2, 3, 5, 4),
            &Layout::contiguous((3, 4)),
            &ok
        )));
        assert!(is_striding(cfg((1, 1, 5, 4), &Layout::contiguous(4), &ok)));
    }

    #[test]
    fn layouts_gemm_cannot_read_are_copied_not_refused() {
        // mamba2's scan: a unit stride on the batch dim, neither matrix dim contiguous.
        let lhs = layout(&[2, 8, 4], &[1, 2, 16], 0);
        let rhs = Layout::contiguous((2, 4, 3));
        assert_eq!(
            operands_needing_copy((2, 8, 3, 4), &lhs, &rhs).unwrap(),
            (true, false)
        );
        assert!(gemm_config((2, 8, 3, 4), &lhs, &rhs).is_err());
        let c = gemm_config((2, 8, 3, 4), &Layout::contiguous((2, 8, 4)), &rhs).unwrap();
        assert_eq!((c.stride_a, c.stride_b), (12, 32));
        // A permuted batch on the rhs, a column broadcast on the lhs.
        let rhs = Layout::contiguous((3, 2, 4, 5)).transpose(0, 1).unwrap();
        let lhs = layout(&[2, 3, 2, 4], &[0, 0, 0, 1], 0);
        assert_eq!(
            operands_needing_copy((6, 2, 5, 4), &lhs, &rhs).unwrap(),
            (true, true)
        );
        // Layouts GEMM reads as they are need no copy: transposed, broadcast batch.
        let lhs = Layout::contiguous((2, 31, 71)).transpose(1, 2).unwrap();
        let rhs = layout(&[2, 31, 16], &[0, 1, 31], 0);
        assert_eq!(
            operands_needing_copy((2, 71, 16, 31), &lhs, &rhs).unwrap(),
            (false, false)
        );
        // Dims that do not describe the product stay an error.
        assert!(operands_needing_copy(
            (2, 8, 3, 4),
            &Layout::contiguous((2, 8, 5)),
            &Layout::contiguous((2, 4, 3))
        )
        .is_err());
    }

    #[test]
    fn empty_operands_take_any_strides() {
        // candle strides (2, 3, 0) as [0, 0, 1] and (2, 0, 4) as [0, 4, 1].
        let lhs = Layout::contiguous((2, 3, 0));
        let rhs = Layout::contiguous((2, 0, 4));
        let c = cfg((2, 3, 4, 0), &lhs, &rhs).unwrap();
        assert_eq!((c.m, c.n, c.k, c.batch), (4, 3, 0, 2));
        let c = cfg(
            (2, 0, 4, 3),
            &Layout::contiguous((2, 0, 3)),
            &Layout::contiguous((2, 3, 4)),
        );
        assert!(c.is_ok());
    }

    #[test]
    fn accepted_layouts_never_overlap_and_stay_in_bounds() {
        // Every accepted config passes rocblas-safe's own validation for buffers exactly as
        // long as the views' extents.
        let cases = [
            (
                Layout::contiguous((2, 3, 4)),
                Layout::contiguous((2, 4, 5)),
                (2, 3, 5, 4),
            ),
            (
                Layout::contiguous((2, 4, 3)).transpose(1, 2).unwrap(),
                layout(&[2, 4, 5], &[0, 1, 4], 0),
                (2, 3, 5, 4),
            ),
        ];
        for (l, r, bmnk) in cases {
            let c = cfg(bmnk, &l, &r).unwrap();
            let extent = |lay: &Layout| {
                lay.dims()
                    .iter()
                    .zip(lay.stride())
                    .map(|(d, s)| (d - 1) * s)
                    .sum::<usize>()
                    + 1
            };
            c.validate(extent(&r), extent(&l), bmnk.0 * bmnk.1 * bmnk.2)
                .unwrap_or_else(|e| panic!("{l:?} x {r:?}: {e}"));
        }
    }
}
