//! A decode step's residual add and rms_norm done by the quantized product that reads the norm
//! (candle's `QMatMul::ext_rms_norm_forward`, our Candle patch): one launch
//! (`rocm_kernels::quantized::matvec_int_staged_normed`) instead of `add_rms_norm` and then the
//! product. Taken for one activation row whose operands are contiguous and 16-byte aligned, on
//! a device whose matrix-vector kernel is the one-launch integer product and with
//! [`RocmDevice::set_norm_in_matvec`](crate::RocmDevice::set_norm_in_matvec) on; anything else
//! returns `None` and the caller runs the ops one by one. The values are those of the separate
//! ops except the last bits of the norm, whose squares are summed in another order.

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout, Result, Shape};
use half::{bf16, f16};
use hip_core::{DeviceBuffer, DeviceSlice};
use rocm_kernels::quantized::{self as qk, NormedRow, QuantType};

use super::{blocks_of, contiguous_view, Blocks, QRocmStorage, QuantizedMatvec};
use crate::storage::{FloatBuffer, RocmStorage};

/// What [`QRocmStorage::rms_norm_matmul_t`] computes: the sum `x + residual` (`None` without a
/// residual), the product and the product's shape.
pub type NormedProduct = (Option<RocmStorage>, RocmStorage, Shape);

/// An operand and its layout.
pub(super) type Operand<'a> = (&'a RocmStorage, &'a Layout);

/// The sum (with a residual) and the product, as buffers.
type NormedBuffers<T> = (Option<DeviceBuffer<T>>, DeviceBuffer<T>);

impl QRocmStorage {
    /// `x + residual` (`x` alone without a residual) rms-normalised with `alpha` and `eps`,
    /// times these weights of shape `self_shape` `(n, k)`, in one launch: `Some((sum, product,
    /// product shape))`, or `None` where the fused kernel does not take these operands (see the
    /// module doc), for the caller to run `add_rms_norm` and [`QRocmStorage::matmul_t`].
    pub fn rms_norm_matmul_t(
        &self,
        self_shape: &Shape,
        x: Operand<'_>,
        residual: Option<Operand<'_>>,
        alpha: Operand<'_>,
        eps: f32,
    ) -> Result<Option<NormedProduct>> {
        let dev = &self.device;
        let Blocks::Quant(q) = blocks_of(self.dtype) else {
            return Ok(None);
        };
        let (n, k) = self_shape.dims2()?;
        let (xs, xl) = x;
        let on_this_device = |s: &RocmStorage| s.device().ordinal() == dev.ordinal();
        let usable = self.takes_one_row_fusion(q, (n, k), xl)
            && alpha.1.dims() == [k]
            && residual.is_none_or(|(r, rl)| rl.shape() == xl.shape() && on_this_device(r))
            && on_this_device(xs)
            && on_this_device(alpha.0);
        if !usable {
            return Ok(None);
        }
        let args = (q, (n, k), x, residual, alpha, eps);
        let out = match xs.dtype() {
            DType::F32 => self.normed_typed::<f32>(args)?.map(wrap),
            DType::F16 => self.normed_typed::<f16>(args)?.map(wrap),
            DType::BF16 => self.normed_typed::<bf16>(args)?.map(wrap),
            _ => None,
        };
        let mut dims = xl.dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = n;
        }
        Ok(out.map(|(sum, product)| {
            let storage = |s| RocmStorage::new(s, dev.clone());
            (sum.map(storage), storage(product), Shape::from(dims))
        }))
    }

    /// Whether the one-row fused products (the norm inside the product, the residual added by
    /// it) take a row of layout `x_layout` times these `(n, k)` weights: the device's switch
    /// on, the one-launch integer product chosen and fitting, one row of `k`, `n` and `k` not
    /// zero. The callers check their other operands.
    pub(super) fn takes_one_row_fusion(
        &self,
        q: QuantType,
        (n, k): (usize, usize),
        x_layout: &Layout,
    ) -> bool {
        let dev = &self.device;
        dev.norm_in_matvec()
            && dev.quantized_matvec() == QuantizedMatvec::Int8Activations
            && n > 0
            && k > 0
            && x_layout.dims().last() == Some(&k)
            && x_layout.shape().elem_count() == k
            && qk::prefers_matvec_int_staged(dev.stream(), q, 1, k)
    }

    /// The fused launch for operands of dtype `T` (`None` where one of them is of another
    /// dtype, not contiguous or not 16-byte aligned).
    #[allow(clippy::type_complexity)]
    fn normed_typed<T: FloatBuffer>(
        &self,
        (q, (n, k), x, residual, alpha, eps): (
            QuantType,
            (usize, usize),
            Operand<'_>,
            Option<Operand<'_>>,
            Operand<'_>,
            f32,
        ),
    ) -> Result<Option<NormedBuffers<T>>> {
        let op = "qmatmul (residual add and rms_norm)";
        let dev = &self.device;
        let (Some(xv), Some(av)) = (aligned_view::<T>(op, x)?, aligned_view::<T>(op, alpha)?)
        else {
            return Ok(None);
        };
        let rv = match residual {
            Some(r) => match aligned_view::<T>(op, r)? {
                Some(v) => Some(v),
                None => return Ok(None),
            },
            None => None,
        };
        let mut y = dev.alloc::<T>(op, n)?;
        let mut sum = match rv {
            Some(_) => Some(dev.alloc::<T>(op, k)?),
            None => None,
        };
        let mut sum_view = sum.as_mut().map(|s| s.as_mut_slice());
        let row = NormedRow {
            x: &xv,
            residual: rv.as_ref().zip(sum_view.as_mut()),
            alpha: &av,
            eps,
        };
        dev.note_integer_matvec();
        let blocks = self.blocks.as_slice();
        self.launch_staged(op, &blocks, |weights| {
            qk::matvec_int_staged_normed(
                dev.stream(),
                q,
                weights,
                (n, k),
                row,
                &mut y.as_mut_slice(),
            )
        })?;
        Ok(Some((sum, y)))
    }
}

/// The elements of an operand of dtype `T` as one 16-byte aligned view (`None` where it holds
/// another dtype, is not contiguous or not aligned).
fn aligned_view<'a, T: FloatBuffer>(
    op: &str,
    (s, l): Operand<'a>,
) -> Result<Option<DeviceSlice<'a, T>>> {
    match T::buffer(s.as_slice()) {
        Some(b) => contiguous_view(op, b, l, 16),
        None => Ok(None),
    }
}

/// Typed buffers as storage slices.
fn wrap<T: FloatBuffer>(
    (sum, y): NormedBuffers<T>,
) -> (
    Option<crate::storage::RocmStorageSlice>,
    crate::storage::RocmStorageSlice,
) {
    (sum.map(T::wrap), T::wrap(y))
}
