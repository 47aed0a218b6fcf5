//! A decode step's residual add done by the quantized product before it (candle's
//! `QMatMul::ext_forward_add`, our Candle patch): `x W^T + residual` in one launch
//! (`rocm_kernels::quantized::matvec_int_staged_add`, or `matvec_int_staged_rounded_add` where
//! the row was rounded by its producer), the bits of the product followed by `add`. The next
//! norm then reads one row instead of two (quantized/normed.rs). Taken for one activation row
//! on a device whose matrix-vector kernel is the one-launch integer product, with
//! [`RocmDevice::set_norm_in_matvec`](crate::RocmDevice::set_norm_in_matvec) on; anything else
//! returns `None` and the caller runs the product and the add.

use candle_core::backend::BackendStorage;
use candle_core::{DType, Result, Shape};
use half::{bf16, f16};
use hip_core::DeviceBuffer;
use rocm_kernels::quantized::{self as qk, QuantType};

use super::{blocks_of, contiguous_view, normed::Operand, ActivationKey, Blocks, QRocmStorage};
use crate::storage::{FloatBuffer, RocmStorage};

impl QRocmStorage {
    /// `x (.., k) W^T + residual` for these weights of shape `self_shape` `(n, k)`, in one
    /// launch: `Some((sum, shape))`, or `None` where the fused kernel does not take these
    /// operands (see the module doc), for the caller to run [`QRocmStorage::matmul_t`] and
    /// the add.
    pub fn matmul_t_add(
        &self,
        self_shape: &Shape,
        x: Operand<'_>,
        residual: Operand<'_>,
    ) -> Result<Option<(RocmStorage, Shape)>> {
        let dev = &self.device;
        let Blocks::Quant(q) = blocks_of(self.dtype) else {
            return Ok(None);
        };
        let (n, k) = self_shape.dims2()?;
        let ((xs, xl), (rs, rl)) = (x, residual);
        let mut dims = xl.dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = n;
        }
        let on_this_device = |s: &RocmStorage| s.device().ordinal() == dev.ordinal();
        let usable = self.takes_one_row_fusion(q, (n, k), xl)
            && rl.dims() == dims.as_slice()
            && xs.dtype() == rs.dtype()
            && on_this_device(xs)
            && on_this_device(rs);
        if !usable {
            return Ok(None);
        }
        let args = (q, (n, k), x, residual);
        let out = match xs.dtype() {
            DType::F32 => self.added_typed::<f32>(args)?.map(f32::wrap),
            DType::F16 => self.added_typed::<f16>(args)?.map(f16::wrap),
            DType::BF16 => self.added_typed::<bf16>(args)?.map(bf16::wrap),
            _ => None,
        };
        Ok(out.map(|s| (RocmStorage::new(s, dev.clone()), Shape::from(dims))))
    }

    /// The fused launch for operands of dtype `T` (`None` where the row is not contiguous and
    /// 16-byte aligned or the residual not contiguous).
    fn added_typed<T: FloatBuffer>(
        &self,
        (q, (n, k), (xs, xl), (rs, rl)): (QuantType, (usize, usize), Operand<'_>, Operand<'_>),
    ) -> Result<Option<DeviceBuffer<T>>> {
        let op = "qmatmul (residual add)";
        let dev = &self.device;
        let (Some(xb), Some(rb)) = (T::buffer(xs.as_slice()), T::buffer(rs.as_slice())) else {
            return Ok(None);
        };
        let (Some(xv), Some(rv)) = (
            contiguous_view(op, xb, xl, 16)?,
            contiguous_view(op, rb, rl, 1)?,
        ) else {
            return Ok(None);
        };
        let key = ActivationKey {
            content: xb.content_key(),
            offset: xv.offset(),
            m: 1,
            k,
            dtype: T::NAME,
        };
        let mut y = dev.alloc::<T>(op, n)?;
        let w = self.blocks.as_slice();
        dev.note_integer_matvec();
        // A row that its producer already rounded (the decode step's swiglu): the product reads
        // that rounding, as `matmul_t` does.
        self.launch_staged(op, &w, |weights| match dev.rounded_activations(&key) {
            Some(r) => qk::matvec_int_staged_rounded_add(
                dev.stream(),
                q,
                weights,
                (n, k),
                &r.xq.as_slice(),
                &r.xds.as_slice(),
                &rv,
                &mut y.as_mut_slice(),
            ),
            None => qk::matvec_int_staged_add(
                dev.stream(),
                q,
                weights,
                (n, k),
                &xv,
                &rv,
                &mut y.as_mut_slice(),
            ),
        })?;
        Ok(Some(y))
    }
}
