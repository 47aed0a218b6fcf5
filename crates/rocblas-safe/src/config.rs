//! GEMM descriptions and their validation (pure logic, no library call).

use crate::error::{Error, Result};

/// Whether an operand is used as stored or transposed (`op(X) = X` or `X^T`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `op(X) = X`.
    None,
    /// `op(X) = X^T`.
    Transpose,
}

impl Operation {
    /// `true` for [`Operation::Transpose`].
    pub fn is_transposed(self) -> bool {
        self == Operation::Transpose
    }
}

/// The element type of a GEMM (A, B and C share it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GemmDtype {
    /// `f32`, computed in f32 (see [`crate::set_gemm_reduced_precision_f32`]).
    F32,
    /// `f64`, computed in f64.
    F64,
    /// `half::f16`, accumulated in f32 (see [`crate::set_gemm_reduced_precision_f16`]).
    F16,
    /// `half::bf16`, accumulated in f32 (see [`crate::set_gemm_reduced_precision_bf16`]).
    BF16,
}

impl GemmDtype {
    /// The name as Candle spells it (`f32`, `f64`, `f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            GemmDtype::F32 => "f32",
            GemmDtype::F64 => "f64",
            GemmDtype::F16 => "f16",
            GemmDtype::BF16 => "bf16",
        }
    }

    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            GemmDtype::F32 => 4,
            GemmDtype::F64 => 8,
            GemmDtype::F16 | GemmDtype::BF16 => 2,
        }
    }
}

impl std::fmt::Display for GemmDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// An element type the GEMM supports: `f32`, `f64`, `half::f16`, `half::bf16`.
///
/// Sealed: the library reads `DTYPE`-sized elements through the buffers' pointers, so a foreign
/// implementation with a mismatched `DTYPE` could read out of bounds.
pub trait GemmElement: hip_core::DeviceRepr + sealed::Sealed {
    /// The matching [`GemmDtype`].
    const DTYPE: GemmDtype;
}

impl GemmElement for f32 {
    const DTYPE: GemmDtype = GemmDtype::F32;
}
impl GemmElement for f64 {
    const DTYPE: GemmDtype = GemmDtype::F64;
}
impl GemmElement for half::f16 {
    const DTYPE: GemmDtype = GemmDtype::F16;
}
impl GemmElement for half::bf16 {
    const DTYPE: GemmDtype = GemmDtype::BF16;
}

/// Column-major strided-batched GEMM shape (elements, not bytes):
/// `C[i] = alpha * op(A[i]) * op(B[i]) + beta * C[i]` for `i in 0..batch`, where `op(A[i])` is
/// `m x k`, `op(B[i])` is `k x n` and `C[i]` is `m x n`.
///
/// * `A[i]` starts at element `i * stride_a` of A's slice and is stored column-major with leading
///   dimension `lda`: `m x k` when `transa` is [`Operation::None`], `k x m` when transposed
///   (likewise `B[i]`, `n x k` or `k x n`, and `C[i]`, always `m x n`).
/// * `stride_a = 0` (or `stride_b = 0`) uses one matrix for every batch entry (broadcast).
///   C cannot be broadcast: with `batch > 1`, `stride_c` must be at least C's footprint
///   `(n - 1) * ldc + m`, so that no two results overlap.
/// * `m`, `n` or `batch` zero: nothing to compute, no library call. `k` zero: `C = beta * C`
///   (`beta = 0` writes zeros, whatever C held, NaN included).
///
/// [`GemmConfig::validate`] checks all of it before anything is queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmConfig {
    /// `op` applied to A.
    pub transa: Operation,
    /// `op` applied to B.
    pub transb: Operation,
    /// Rows of `op(A)` and of C.
    pub m: usize,
    /// Columns of `op(B)` and of C.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Leading dimension (column stride) of the stored A.
    pub lda: usize,
    /// Leading dimension of the stored B.
    pub ldb: usize,
    /// Leading dimension of C.
    pub ldc: usize,
    /// Elements from one A matrix to the next (0: the same A for every batch entry).
    pub stride_a: usize,
    /// Elements from one B matrix to the next (0: the same B for every batch entry).
    pub stride_b: usize,
    /// Elements from one C matrix to the next.
    pub stride_c: usize,
    /// Number of GEMMs.
    pub batch: usize,
}

impl GemmConfig {
    /// A single, tightly packed GEMM: `lda`, `ldb`, `ldc` are the stored row counts (at least 1)
    /// and the strides are the matrix sizes.
    pub fn packed(transa: Operation, transb: Operation, m: usize, n: usize, k: usize) -> Self {
        Self::packed_batched(transa, transb, m, n, k, 1)
    }

    /// `batch` tightly packed GEMMs stored one after the other (see [`GemmConfig::packed`]).
    pub fn packed_batched(
        transa: Operation,
        transb: Operation,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
    ) -> Self {
        let (ra, ca) = stored_shape(transa, m, k);
        let (rb, cb) = stored_shape(transb, k, n);
        GemmConfig {
            transa,
            transb,
            m,
            n,
            k,
            lda: ra.max(1),
            ldb: rb.max(1),
            ldc: m.max(1),
            stride_a: ra.saturating_mul(ca),
            stride_b: rb.saturating_mul(cb),
            stride_c: m.saturating_mul(n),
            batch,
        }
    }

    /// Checks the description against slices of `a_len`, `b_len` and `c_len` elements: every
    /// leading dimension covers its stored matrix (`ld >= max(1, rows)`), every element the
    /// description addresses (all batch entries) lies inside its slice, C's batch entries do not
    /// overlap, and every value fits the library's integer types (`i32` for sizes, leading
    /// dimensions and the batch count, `i64` for strides).
    pub fn validate(&self, a_len: usize, b_len: usize, c_len: usize) -> Result<()> {
        self.resolve(a_len, b_len, c_len).map(|_| ())
    }

    /// [`GemmConfig::validate`], returning the values as the library takes them.
    pub(crate) fn resolve(&self, a_len: usize, b_len: usize, c_len: usize) -> Result<Resolved> {
        let (ra, ca) = stored_shape(self.transa, self.m, self.k);
        let (rb, cb) = stored_shape(self.transb, self.k, self.n);
        check_ld("lda", self.lda, ra, "A", self.transa, "m x k")?;
        check_ld("ldb", self.ldb, rb, "B", self.transb, "k x n")?;
        check_ld("ldc", self.ldc, self.m, "C", Operation::None, "m x n")?;

        let need_a = required("A", ra, ca, self.lda, self.stride_a, self.batch)?;
        let need_b = required("B", rb, cb, self.ldb, self.stride_b, self.batch)?;
        let need_c = required("C", self.m, self.n, self.ldc, self.stride_c, self.batch)?;
        for (name, need, len) in [
            ("A", need_a, a_len),
            ("B", need_b, b_len),
            ("C", need_c, c_len),
        ] {
            if need > len {
                return Err(self.invalid(format!(
                    "{name} holds {len} elements but the GEMM addresses {need}"
                )));
            }
        }
        if self.batch > 1 && self.m > 0 && self.n > 0 {
            let footprint = extent(self.m, self.n, self.ldc).ok_or_else(|| overflow("C"))?;
            if self.stride_c < footprint {
                return Err(self.invalid(format!(
                    "stride_c = {} is smaller than C's footprint (n - 1) * ldc + m = {footprint}: \
                     the {} results would overlap (C cannot be broadcast)",
                    self.stride_c, self.batch
                )));
            }
        }

        Ok(Resolved {
            transa: self.transa,
            transb: self.transb,
            m: self.fit_i32("m", self.m)?,
            n: self.fit_i32("n", self.n)?,
            k: self.fit_i32("k", self.k)?,
            lda: self.fit_i32("lda", self.lda)?,
            ldb: self.fit_i32("ldb", self.ldb)?,
            ldc: self.fit_i32("ldc", self.ldc)?,
            stride_a: self.fit_i64("stride_a", self.stride_a)?,
            stride_b: self.fit_i64("stride_b", self.stride_b)?,
            stride_c: self.fit_i64("stride_c", self.stride_c)?,
            batch: self.fit_i32("batch", self.batch)?,
        })
    }

    /// `true` when there is nothing to compute (`m`, `n` or `batch` is zero).
    pub fn is_empty(&self) -> bool {
        self.m == 0 || self.n == 0 || self.batch == 0
    }

    /// `2 * m * n * k * batch`, the floating-point operations of the multiply-accumulate.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64 * self.batch as f64
    }

    fn invalid(&self, reason: String) -> Error {
        Error::invalid("gemm", format!("{reason} ({self:?})"))
    }

    fn fit_i32(&self, name: &str, v: usize) -> Result<i32> {
        i32::try_from(v).map_err(|_| {
            self.invalid(format!(
                "{name} = {v} does not fit the library's 32-bit integer (max {})",
                i32::MAX
            ))
        })
    }

    fn fit_i64(&self, name: &str, v: usize) -> Result<i64> {
        i64::try_from(v).map_err(|_| {
            self.invalid(format!(
                "{name} = {v} does not fit the library's 64-bit stride"
            ))
        })
    }
}

/// The stored shape `(rows, cols)` of an operand whose `op` is `rows_op x cols_op`.
fn stored_shape(op: Operation, rows_op: usize, cols_op: usize) -> (usize, usize) {
    match op {
        Operation::None => (rows_op, cols_op),
        Operation::Transpose => (cols_op, rows_op),
    }
}

fn check_ld(
    name: &str,
    ld: usize,
    rows: usize,
    matrix: &str,
    op: Operation,
    shape: &str,
) -> Result<()> {
    let min = rows.max(1);
    if ld < min {
        let how = if op.is_transposed() {
            format!("op({matrix}) = {matrix}^T is {shape}, so {matrix} is stored with {rows} rows")
        } else {
            format!("{matrix} is {shape}, stored with {rows} rows")
        };
        return Err(Error::invalid(
            "gemm",
            format!("{name} = {ld} is smaller than max(1, rows) = {min}: {how}"),
        ));
    }
    Ok(())
}

/// Elements spanned by one stored `rows x cols` matrix: `(cols - 1) * ld + rows` (0 when empty).
fn extent(rows: usize, cols: usize, ld: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (cols - 1).checked_mul(ld)?.checked_add(rows)
}

/// Elements a slice must hold for `batch` matrices `stride` apart.
fn required(
    name: &str,
    rows: usize,
    cols: usize,
    ld: usize,
    stride: usize,
    batch: usize,
) -> Result<usize> {
    let e = extent(rows, cols, ld).ok_or_else(|| overflow(name))?;
    if e == 0 || batch == 0 {
        return Ok(0);
    }
    (batch - 1)
        .checked_mul(stride)
        .and_then(|x| x.checked_add(e))
        .ok_or_else(|| overflow(name))
}

fn overflow(name: &str) -> Error {
    Error::invalid(
        "gemm",
        format!("the extent of {name} overflows the address space"),
    )
}

/// A validated GEMM in the library's integer types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub(crate) transa: Operation,
    pub(crate) transb: Operation,
    pub(crate) m: i32,
    pub(crate) n: i32,
    pub(crate) k: i32,
    pub(crate) lda: i32,
    pub(crate) ldb: i32,
    pub(crate) ldc: i32,
    pub(crate) stride_a: i64,
    pub(crate) stride_b: i64,
    pub(crate) stride_c: i64,
    pub(crate) batch: i32,
}

#[cfg(test)]
mod tests {
    use super::Operation::{None as N, Transpose as T};
    use super::*;

    fn cfg(transa: Operation, transb: Operation, m: usize, n: usize, k: usize) -> GemmConfig {
        GemmConfig::packed(transa, transb, m, n, k)
    }

    fn reason(r: Result<()>) -> String {
        match r {
            Err(Error::InvalidArgument { op, reason }) => {
                assert_eq!(op, "gemm");
                reason
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn packed_single_gemms_are_accepted_for_every_transpose() {
        for (ta, tb) in [(N, N), (N, T), (T, N), (T, T)] {
            for (m, n, k) in [(1, 1, 1), (7, 1, 129), (1, 7, 1), (129, 1000, 7), (3, 5, 2)] {
                let c = cfg(ta, tb, m, n, k);
                c.validate(m * k, k * n, m * n)
                    .unwrap_or_else(|e| panic!("{c:?}: {e}"));
                let r = c.resolve(m * k, k * n, m * n).unwrap();
                assert_eq!((r.m, r.n, r.k), (m as i32, n as i32, k as i32));
            }
        }
    }

    #[test]
    fn packed_uses_stored_rows_as_leading_dimension() {
        let c = cfg(T, N, 3, 5, 2);
        assert_eq!((c.lda, c.ldb, c.ldc), (2, 2, 3));
        assert_eq!((c.stride_a, c.stride_b, c.stride_c), (6, 10, 15));
        let c = cfg(N, T, 3, 5, 2);
        assert_eq!((c.lda, c.ldb, c.ldc), (3, 5, 3));
        let c = cfg(N, N, 0, 0, 0);
        assert_eq!((c.lda, c.ldb, c.ldc), (1, 1, 1));
    }

    #[test]
    fn k_one_and_n_one_shapes() {
        // Outer product: k = 1.
        let c = cfg(N, N, 4, 6, 1);
        c.validate(4, 6, 24).unwrap();
        assert!(reason(c.validate(3, 6, 24)).contains("A holds 3 elements"));
        // Matrix-vector: n = 1, B transposed is a 1 x k row stored with ldb >= 1.
        let c = cfg(N, T, 4, 1, 5);
        assert_eq!(c.ldb, 1);
        c.validate(20, 5, 4).unwrap();
        assert!(
            reason(c.validate(20, 4, 4)).contains("B holds 4 elements but the GEMM addresses 5")
        );
    }

    #[test]
    fn leading_dimension_too_small_is_rejected() {
        let mut c = cfg(N, N, 4, 3, 2);
        c.lda = 3;
        let r = reason(c.validate(100, 100, 100));
        assert!(
            r.contains("lda = 3 is smaller than max(1, rows) = 4"),
            "{r}"
        );
        let mut c = cfg(T, N, 4, 3, 2);
        c.lda = 1; // stored A is 2 x 4
        let r = reason(c.validate(100, 100, 100));
        assert!(r.contains("lda = 1") && r.contains("A^T"), "{r}");
        let mut c = cfg(N, T, 4, 3, 2);
        c.ldb = 2; // stored B is 3 x 2
        assert!(reason(c.validate(100, 100, 100)).contains("ldb = 2"));
        let mut c = cfg(N, N, 4, 3, 2);
        c.ldc = 3;
        assert!(reason(c.validate(100, 100, 100)).contains("ldc = 3"));
        // ld 0 is never valid, even for empty matrices.
        let mut c = cfg(N, N, 0, 3, 2);
        c.ldc = 0;
        assert!(
            reason(c.validate(100, 100, 100)).contains("ldc = 0 is smaller than max(1, rows) = 1")
        );
    }

    #[test]
    fn larger_leading_dimensions_extend_the_footprint() {
        let mut c = cfg(N, N, 4, 3, 2);
        c.lda = 10; // A: 2 columns of 4, 10 apart: 14 elements
        c.ldc = 6; // C: 3 columns of 4, 6 apart: 16 elements
        c.validate(14, 6, 16).unwrap();
        assert!(
            reason(c.validate(13, 6, 16)).contains("A holds 13 elements but the GEMM addresses 14")
        );
        assert!(reason(c.validate(14, 6, 15)).contains("C holds 15"));
    }

    #[test]
    fn the_last_batch_entry_must_fit() {
        let c = GemmConfig::packed_batched(N, N, 2, 3, 4, 5);
        c.validate(5 * 8, 5 * 12, 5 * 6).unwrap();
        assert!(reason(c.validate(5 * 8 - 1, 5 * 12, 5 * 6))
            .contains("A holds 39 elements but the GEMM addresses 40"));
        assert!(reason(c.validate(5 * 8, 5 * 12 - 1, 5 * 6)).contains("B holds 59"));
        assert!(reason(c.validate(5 * 8, 5 * 12, 5 * 6 - 1)).contains("C holds 29"));
        // Padding after the last matrix is not needed: the last entry needs only its extent.
        let mut c = c;
        c.stride_a = 100;
        c.validate(4 * 100 + 8, 60, 30).unwrap();
        assert!(reason(c.validate(4 * 100 + 7, 60, 30)).contains("A holds 407"));
    }

    #[test]
    fn stride_zero_broadcasts_inputs_but_not_c() {
        let mut c = GemmConfig::packed_batched(N, T, 3, 4, 5, 6);
        c.stride_a = 0;
        c.validate(15, 6 * 20, 6 * 12).unwrap();
        c.stride_b = 0;
        c.validate(15, 20, 6 * 12).unwrap();
        c.stride_c = 0;
        let r = reason(c.validate(15, 20, 6 * 12));
        assert!(r.contains("C cannot be broadcast"), "{r}");
        // Overlapping C entries are rejected too.
        c.stride_c = 11;
        assert!(
            reason(c.validate(15, 20, 100)).contains("stride_c = 11 is smaller than C's footprint")
        );
        // With ldc > m, C's footprint is (n - 1) * ldc + m.
        c.ldc = 5;
        c.stride_c = 18;
        c.validate(15, 20, 5 * 18 + 18).unwrap();
        c.stride_c = 17;
        assert!(reason(c.validate(15, 20, 1000)).contains("footprint (n - 1) * ldc + m = 18"));
        // A single GEMM may use any C stride, 0 included.
        let mut one = GemmConfig::packed(N, N, 3, 4, 5);
        one.stride_c = 0;
        one.validate(15, 20, 12).unwrap();
    }

    #[test]
    fn empty_gemms_need_no_memory() {
        for (m, n, k, batch) in [(0, 4, 5, 2), (3, 0, 5, 2), (3, 4, 5, 0)] {
            let c = GemmConfig::packed_batched(N, N, m, n, k, batch);
            assert!(c.is_empty());
            // Only the operands that are empty themselves need no memory.
            let need_a = if batch == 0 { 0 } else { batch * m * k };
            let need_b = if batch == 0 { 0 } else { batch * k * n };
            c.validate(need_a, need_b, 0).unwrap();
        }
        // k = 0: A and B are empty, C is scaled by beta, so C must be there.
        let c = GemmConfig::packed_batched(T, N, 3, 4, 0, 2);
        assert!(!c.is_empty());
        assert_eq!(c.lda, 1);
        c.validate(0, 0, 24).unwrap();
        assert!(reason(c.validate(0, 0, 23)).contains("C holds 23"));
    }

    #[test]
    fn values_past_i32_are_rejected() {
        let big = i32::MAX as usize + 1;
        let mut c = GemmConfig::packed(N, N, 1, 1, 1);
        c.lda = big;
        let r = reason(c.validate(1, 1, 1));
        assert!(r.contains("lda = 2147483648 does not fit"), "{r}");
        let mut c = GemmConfig::packed_batched(N, N, 1, 1, 1, big);
        c.stride_a = 0;
        c.stride_b = 0;
        let r = reason(c.validate(1, 1, big));
        assert!(r.contains("batch = 2147483648 does not fit"), "{r}");
        let c = GemmConfig::packed(N, N, big, 1, 1);
        let r = reason(c.validate(big, 1, big));
        assert!(r.contains("m = 2147483648 does not fit"), "{r}");
        // The largest values that fit are accepted (nothing is allocated).
        let c = GemmConfig::packed(N, N, i32::MAX as usize, 1, 1);
        c.validate(i32::MAX as usize, 1, i32::MAX as usize).unwrap();
    }

    #[test]
    fn overflowing_extents_are_errors_not_panics() {
        let mut c = GemmConfig::packed_batched(N, N, 2, 2, 2, 3);
        c.stride_a = usize::MAX / 2;
        let r = reason(c.validate(usize::MAX, usize::MAX, usize::MAX));
        assert!(r.contains("overflows"), "{r}");
        let mut c = GemmConfig::packed(N, N, 2, 3, 2);
        c.ldc = usize::MAX;
        let r = reason(c.validate(100, 100, usize::MAX));
        assert!(r.contains("overflows"), "{r}");
    }

    #[test]
    fn strides_past_i64_are_rejected() {
        let mut c = GemmConfig::packed_batched(N, N, 1, 1, 1, 1);
        c.stride_b = i64::MAX as usize + 1;
        let r = reason(c.validate(1, 1, 1));
        assert!(r.contains("stride_b"), "{r}");
    }

    #[test]
    fn flops_count_multiply_and_add() {
        let c = GemmConfig::packed_batched(N, N, 2, 3, 4, 5);
        assert_eq!(c.flops(), 240.0);
    }
}
