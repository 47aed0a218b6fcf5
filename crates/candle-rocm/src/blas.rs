//! The vendor libraries a [`RocmDevice`] uses: rocBLAS (cuBLAS on NVIDIA) for matmul and the
//! GEMM-based convolutions, MIOpen (cuDNN on NVIDIA) for library convolutions. Each handle is
//! created on first use, bound to the device's stream, and shared by the device's clones; a
//! library that fails to load is remembered as a typed error naming it.

use std::sync::OnceLock;

use candle_core::{DType, Layout, Result};
use hip_core::{DeviceBuffer, DeviceSlice};
use parking_lot::Mutex;
use rocblas_safe::GemmElement;
use rocm_kernels::elementwise::Strided;
use rocm_kernels::KernelDType;

use crate::conv::ConvPath;
use crate::device::RocmDevice;
use crate::error::{hip_err, kernel_err, RocmError};
use crate::matmul::{gemm_config, operands_needing_copy};

/// The per-device library handles and settings.
#[derive(Default)]
pub(crate) struct Libraries {
    blas: OnceLock<std::result::Result<rocblas_safe::Handle, String>>,
    dnn: OnceLock<std::result::Result<miopen_safe::Handle, String>>,
    conv_path: Mutex<Option<ConvPath>>,
}

impl RocmDevice {
    /// The device's rocBLAS handle, created on first use.
    pub(crate) fn blas(&self, op: &str) -> Result<&rocblas_safe::Handle> {
        self.libraries()
            .blas
            .get_or_init(|| rocblas_safe::Handle::new(self.stream()).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| RocmError::library(op, "rocBLAS", e).into())
    }

    /// The device's MIOpen handle, created on first use.
    pub(crate) fn dnn(&self, op: &str) -> Result<&miopen_safe::Handle> {
        self.libraries()
            .dnn
            .get_or_init(|| miopen_safe::Handle::new(self.stream()).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| RocmError::library(op, "MIOpen", e).into())
    }

    /// The device's rocBLAS (cuBLAS on NVIDIA) handle, bound to [`RocmDevice::stream`]: for
    /// calling the library directly on this backend's buffers, ordered with its ops. Created
    /// on first use; a library that cannot be loaded is a typed error naming it.
    pub fn blas_handle(&self) -> Result<&rocblas_safe::Handle> {
        self.blas("rocBLAS handle")
    }

    /// The device's MIOpen (cuDNN on NVIDIA) handle, bound to [`RocmDevice::stream`], with the
    /// algorithm cache the library convolution path fills. Created on first use.
    pub fn miopen_handle(&self) -> Result<&miopen_safe::Handle> {
        self.dnn("MIOpen handle")
    }

    /// Chooses how this device computes convolutions (see [`ConvPath`]); overrides the
    /// `CANDLE_ROCM_CONV` environment variable.
    pub fn set_conv_path(&self, path: ConvPath) {
        *self.libraries().conv_path.lock() = Some(path);
    }

    /// How this device computes convolutions: what [`RocmDevice::set_conv_path`] chose, else
    /// `CANDLE_ROCM_CONV`, else [`ConvPath::Auto`].
    pub fn conv_path(&self) -> Result<ConvPath> {
        if let Some(p) = *self.libraries().conv_path.lock() {
            return Ok(p);
        }
        ConvPath::from_env().map_err(Into::into)
    }

    /// Whether the library path can compute a convolution of `dtype` on this device.
    pub(crate) fn conv_library_available(&self, dtype: DType) -> bool {
        matches!(dtype, DType::F32 | DType::F16 | DType::BF16) && self.dnn("conv").is_ok()
    }

    /// `out = lhs x rhs` for candle's `(b, m, n, k)` and the operands' layouts (start offsets
    /// relative to the given slices), through one strided-batched GEMM. An operand whose
    /// layout GEMM cannot read is copied to a contiguous one first (stream-ordered, no host
    /// wait). `out` holds the contiguous `(b, m, n)` result.
    pub(crate) fn gemm<T: GemmElement + KernelDType>(
        &self,
        op: &str,
        bmnk: (usize, usize, usize, usize),
        (lhs, lhs_l): (&DeviceSlice<'_, T>, &Layout),
        (rhs, rhs_l): (&DeviceSlice<'_, T>, &Layout),
        out: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        let (b, m, n, k) = bmnk;
        let want = b * m * n;
        if out.len() != want {
            return Err(RocmError::layout(
                op,
                format!(
                    "the output holds {} elements, the product {want}",
                    out.len()
                ),
            )
            .into());
        }
        let (copy_lhs, copy_rhs) = operands_needing_copy(bmnk, lhs_l, rhs_l)?;
        let lhs_copy = if copy_lhs && want > 0 && k > 0 {
            Some(self.contiguous_copy(op, lhs, lhs_l)?)
        } else {
            None
        };
        let rhs_copy = if copy_rhs && want > 0 && k > 0 {
            Some(self.contiguous_copy(op, rhs, rhs_l)?)
        } else {
            None
        };
        let lhs_cl;
        let (lhs_view, lhs_l) = match &lhs_copy {
            Some(c) => {
                lhs_cl = Layout::contiguous(lhs_l.shape());
                (c.as_slice(), &lhs_cl)
            }
            None => (*lhs, lhs_l),
        };
        let rhs_cl;
        let (rhs_view, rhs_l) = match &rhs_copy {
            Some(c) => {
                rhs_cl = Layout::contiguous(rhs_l.shape());
                (c.as_slice(), &rhs_cl)
            }
            None => (*rhs, rhs_l),
        };
        if want == 0 {
            return Ok(());
        }
        if k == 0 {
            // An empty sum: zeros (no library call needed).
            return out.as_mut_slice().memset_async(0).map_err(hip_err(op));
        }
        let cfg = gemm_config(bmnk, lhs_l, rhs_l)?;
        let a = offset_view(op, &rhs_view, rhs_l)?;
        let bm = offset_view(op, &lhs_view, lhs_l)?;
        self.blas(op)?
            .gemm(&cfg, 1.0, &a, &bm, 0.0, &mut out.as_mut_slice())
            .map_err(|e| RocmError::library(op, "rocBLAS", e).into())
    }

    /// As [`RocmDevice::gemm`], for Candle's matmul: a decode-step Linear product (up to
    /// [`GEMV_MAX_ROWS`](rocm_kernels::gemv::GEMV_MAX_ROWS) rows times a row-major weight read
    /// transposed) takes the float matrix-vector kernel, one plain launch, instead of the
    /// vendor GEMM (see `gemv_shape`). Convolutions keep the GEMM: Candle's own conv tests
    /// compare results rounded to 4 decimals with the CPU's, which a different summation
    /// order can move across a rounding boundary.
    pub(crate) fn matmul_product<T: GemmElement + KernelDType>(
        &self,
        op: &str,
        bmnk: (usize, usize, usize, usize),
        (lhs, lhs_l): (&DeviceSlice<'_, T>, &Layout),
        (rhs, rhs_l): (&DeviceSlice<'_, T>, &Layout),
        out: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        let (_, _, n, k) = bmnk;
        // `gemv_shape` takes only layouts the kernel reads as they are: no copy first.
        if let Some((rows, ldw)) = gemv_shape::<T>(bmnk, lhs_l, rhs_l) {
            let x = offset_view(op, lhs, lhs_l)?;
            let w = offset_view(op, rhs, rhs_l)?;
            return rocm_kernels::gemv::gemv(
                self.stream(),
                (rows, n, k),
                &x,
                (&w, ldw),
                &mut out.as_mut_slice(),
            )
            .map_err(kernel_err(op));
        }
        self.gemm(op, bmnk, (lhs, lhs_l), (rhs, rhs_l), out)
    }

    /// The strided view `layout` of `slice` copied into a new contiguous buffer.
    pub(crate) fn contiguous_copy<T: KernelDType>(
        &self,
        op: &str,
        slice: &DeviceSlice<'_, T>,
        layout: &Layout,
    ) -> Result<DeviceBuffer<T>> {
        let n = layout.shape().elem_count();
        let mut out = self.alloc::<T>(op, n)?;
        if n == 0 {
            return Ok(out);
        }
        // The elements the view reaches (checked against the slice, as every op does).
        let range = crate::layout::layout_range(op, layout, slice.len())?.unwrap_or(0..0);
        let data = slice.slice(range).map_err(hip_err(op))?;
        rocm_kernels::elementwise::copy_strided(
            self.stream(),
            layout.dims(),
            Strided::new(data, layout.stride()),
            &mut out.as_mut_slice(),
        )
        .map_err(kernel_err(op))?;
        Ok(out)
    }
}

/// `CANDLE_ROCM_DECODE_GEMV=0` sends every product to the vendor GEMM (to compare the two).
const DECODE_GEMV_VAR: &str = "CANDLE_ROCM_DECODE_GEMV";

/// `Some((rows, ldw))` when the product is `rows <=` [`GEMV_MAX_ROWS`] activation rows stored
/// back to back times one row-major `(n, k)` weight with row stride `ldw`, read transposed and
/// shared by every batch entry (a Linear layer in a decode step), in f32, f16 or bf16: what
/// [`rocm_kernels::gemv::gemv`] computes in one plain launch.
///
/// [`GEMV_MAX_ROWS`]: rocm_kernels::gemv::GEMV_MAX_ROWS
fn gemv_shape<T: KernelDType>(
    (b, m, n, k): (usize, usize, usize, usize),
    lhs_l: &Layout,
    rhs_l: &Layout,
) -> Option<(usize, usize)> {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    let rows = b * m;
    if !matches!(T::NAME, "f32" | "f16" | "bf16")
        || rows == 0
        || rows > rocm_kernels::gemv::GEMV_MAX_ROWS
        || n == 0
        || k == 0
        || !lhs_l.is_contiguous()
        || !*ENABLED.get_or_init(|| std::env::var(DECODE_GEMV_VAR).map_or(true, |v| v != "0"))
    {
        return None;
    }
    let (dims, strides) = (rhs_l.dims(), rhs_l.stride());
    let r = dims.len();
    let shared = dims[..r - 2]
        .iter()
        .zip(&strides[..r - 2])
        .all(|(&d, &s)| d == 1 || s == 0);
    let k_contiguous = k == 1 || strides[r - 2] == 1;
    let ldw = if n == 1 { k } else { strides[r - 1] };
    (shared && k_contiguous && ldw >= k).then_some((rows, ldw))
}

/// `slice` from the layout's start offset on (the GEMM validates the extent).
fn offset_view<'a, T: GemmElement>(
    op: &str,
    slice: &DeviceSlice<'a, T>,
    layout: &Layout,
) -> Result<DeviceSlice<'a, T>> {
    slice.slice(layout.start_offset()..).map_err(|e| {
        RocmError::layout(
            op,
            format!(
                "start offset {} is past the operand's {} elements: {e}",
                layout.start_offset(),
                slice.len()
            ),
        )
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dims: &[usize], a: usize, b: usize) -> Layout {
        Layout::contiguous(dims).transpose(a, b).unwrap()
    }

    #[test]
    fn decode_linear_products_take_the_gemv_kernel() {
        // x (1, 64) . W^T for W (300, 64): one row, the weight's row stride 64.
        let x = Layout::contiguous((1, 64));
        let w = t(&[300, 64], 0, 1);
        assert_eq!(gemv_shape::<f32>((1, 1, 300, 64), &x, &w), Some((1, 64)));
        assert_eq!(
            gemv_shape::<half::bf16>((1, 1, 300, 64), &x, &w),
            Some((1, 64))
        );
        // Batch 2 x 2 rows against a weight broadcast over the batch (stride 0).
        let x = Layout::contiguous((2, 2, 64));
        let w = Layout::new((2, 64, 40).into(), vec![0, 1, 64], 0);
        assert_eq!(
            gemv_shape::<half::f16>((2, 2, 40, 64), &x, &w),
            Some((4, 64))
        );
        // A narrowed weight (row stride 72) at an offset.
        let w = Layout::new((64, 40).into(), vec![1, 72], 5);
        let x = Layout::contiguous((3, 64));
        assert_eq!(gemv_shape::<f32>((1, 3, 40, 64), &x, &w), Some((3, 72)));
    }

    #[test]
    fn other_products_keep_the_gemm() {
        let w = t(&[300, 64], 0, 1);
        // Five rows, f64, a transposed x, a row-major rhs, per-batch weights, empty products.
        assert_eq!(
            gemv_shape::<f32>((1, 5, 300, 64), &Layout::contiguous((5, 64)), &w),
            None
        );
        assert_eq!(
            gemv_shape::<f64>((1, 1, 300, 64), &Layout::contiguous((1, 64)), &w),
            None
        );
        assert_eq!(
            gemv_shape::<f32>((1, 2, 300, 64), &t(&[64, 2], 0, 1), &w),
            None
        );
        assert_eq!(
            gemv_shape::<f32>(
                (1, 1, 300, 64),
                &Layout::contiguous((1, 64)),
                &Layout::contiguous((64, 300))
            ),
            None
        );
        assert_eq!(
            gemv_shape::<f32>(
                (2, 1, 30, 64),
                &Layout::contiguous((2, 1, 64)),
                &t(&[2, 30, 64], 1, 2)
            ),
            None
        );
        assert_eq!(
            gemv_shape::<f32>((1, 1, 0, 64), &Layout::contiguous((1, 64)), &w),
            None
        );
    }
}
