//! Fused ops for candle-nn's custom ops (softmax over the last dim, rms_norm, add_rms_norm,
//! swiglu, layer_norm, rope / rope_i / rope_thd), callable on [`RocmStorage`]: until the Tensor issue's hook routes
//! candle-nn's custom ops here, these are the storage-level entry points. Float dtypes (bf16,
//! f16, f32, f64); inputs must be contiguous (as candle-nn's own GPU versions require). Also
//! candle-core's `arg_sort_last_dim` custom op ([`RocmStorage::arg_sort_last_dim`], every
//! kernel dtype).

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout, Result, Shape};
use hip_core::{DeviceBuffer, DeviceSlice};
use rocm_kernels::nn::RopeKind;
use rocm_kernels::KernelDType;

use crate::device::RocmDevice;
use crate::error::{hip_err, kernel_err, RocmError};
use crate::quantized::{ActivationKey, QuantizedMatvec, RoundedActivations};
use crate::storage::{RocmStorage, RocmStorageSlice};

/// The contiguous elements of `layout` in `buf`.
pub(crate) fn contiguous<'a, T: KernelDType>(
    op: &str,
    buf: &'a DeviceBuffer<T>,
    layout: &Layout,
) -> Result<DeviceSlice<'a, T>> {
    if !layout.is_contiguous() {
        return Err(RocmError::layout(op, "the input must be contiguous").into());
    }
    let start = layout.start_offset();
    let n = layout.shape().elem_count();
    if start.checked_add(n).is_none_or(|end| end > buf.len()) {
        return Err(RocmError::layout(
            op,
            format!(
                "the layout reaches element {start} + {n} of a {}-element buffer",
                buf.len()
            ),
        )
        .into());
    }
    buf.slice(start..start + n).map_err(hip_err(op))
}

/// Fails unless a rope's cos and sin tables have one shape.
pub(crate) fn check_rope_tables(op: &str, cos: &Layout, sin: &Layout) -> Result<()> {
    if cos.dims() == sin.dims() {
        return Ok(());
    }
    Err(RocmError::layout(
        op,
        format!(
            "cos {:?} and sin {:?} tables differ in shape",
            cos.dims(),
            sin.dims()
        ),
    )
    .into())
}

/// Binds the float buffers of `$storages` (all of `$first`'s dtype) and wraps the new buffer.
macro_rules! float_op {
    ($op:expr, $first:expr, [$($other:expr),*], |$($b:ident),+| $body:expr) => {{
        let first: &RocmStorage = $first;
        $(
            if $other.dtype() != first.dtype() {
                return Err(candle_core::Error::DTypeMismatchBinaryOp {
                    lhs: first.dtype(),
                    rhs: $other.dtype(),
                    op: $op,
                }
                .bt());
            }
        )*
        match ($first.as_slice(), $($other.as_slice()),*) {
            float_op!(@arm BF16, $($b),+) => RocmStorageSlice::BF16($body?),
            float_op!(@arm F16, $($b),+) => RocmStorageSlice::F16($body?),
            float_op!(@arm F32, $($b),+) => RocmStorageSlice::F32($body?),
            float_op!(@arm F64, $($b),+) => RocmStorageSlice::F64($body?),
            _ => return Err(not_float($op, first.dtype())),
        }
    }};
    (@arm $variant:ident, $($b:ident),+) => {
        ($(RocmStorageSlice::$variant($b),)+)
    };
}

/// swiglu of `rows` rows of `2 half` (f32, f16 or bf16) with its result also rounded to 8 bits
/// per 32 elements (`rocm_kernels::quantized::swiglu_rounded`); the rounding is kept on the
/// device under the result's [`ActivationKey`], so that the integer product that multiplies
/// this result next reads it instead of rounding it again (`quantized.rs`).
fn swiglu_rounding<T: KernelDType>(
    dev: &RocmDevice,
    src: &DeviceSlice<'_, T>,
    rows: usize,
    half: usize,
) -> Result<DeviceBuffer<T>> {
    const OP: &str = "swiglu";
    let mut out = dev.alloc::<T>(OP, rows * half)?;
    let (q_len, ds_len) = rocm_kernels::quantized::matvec_int_scratch(rows, half);
    let mut xq = dev.alloc::<u8>(OP, q_len)?;
    let mut xds = dev.alloc::<f32>(OP, ds_len)?;
    rocm_kernels::quantized::swiglu_rounded(
        dev.stream(),
        src,
        &mut out.as_mut_slice(),
        &mut xq.as_mut_slice(),
        &mut xds.as_mut_slice(),
        rows,
        half,
    )
    .map_err(kernel_err(OP))?;
    // The key of the contents just written (after the write's mutable view).
    let key = ActivationKey {
        content: out.content_key(),
        offset: 0,
        m: rows,
        k: half,
        dtype: T::NAME,
    };
    dev.keep_rounded_activations(Arc::new(RoundedActivations {
        key: Some(key),
        xq,
        xds,
    }));
    Ok(out)
}

fn not_float(op: &str, dtype: DType) -> candle_core::Error {
    if dtype == DType::F8E4M3 {
        RocmError::not_implemented(
            op,
            dtype,
            "the fused ops compute bf16, f16, f32 and f64; cast f8e4m3 to one of them first",
        )
        .into()
    } else {
        RocmError::unsupported(op, dtype, "only float dtypes (bf16, f16, f32, f64) have it").into()
    }
}

/// `(rows, cols)` of a layout whose last dim is the row.
fn rows_cols(op: &str, layout: &Layout) -> Result<(usize, usize)> {
    let dims = layout.dims();
    let Some(&cols) = dims.last() else {
        return Err(RocmError::layout(op, "the input has rank 0; it needs a last dim").into());
    };
    Ok((dims[..dims.len() - 1].iter().product(), cols))
}

impl RocmStorage {
    /// Softmax over the last dim (candle-nn's `softmax_last_dim`), numerically stable.
    pub fn softmax_last_dim(&self, layout: &Layout) -> Result<Self> {
        const OP: &str = "softmax_last_dim";
        let (rows, cols) = rows_cols(OP, layout)?;
        let dev = self.device();
        let slice = float_op!(OP, self, [], |x| {
            let src = contiguous(OP, x, layout)?;
            let mut out = dev.alloc(OP, rows * cols)?;
            rocm_kernels::nn::softmax_last_dim(
                dev.stream(),
                &src,
                &mut out.as_mut_slice(),
                rows,
                cols,
            )
            .map_err(kernel_err(OP))
            .map(|()| out)
        });
        Ok(RocmStorage::new(slice, dev.clone()))
    }

    /// RMS norm over the last dim with a `[cols]` scale (candle-nn's `rms_norm`).
    pub fn rms_norm(
        &self,
        layout: &Layout,
        alpha: &Self,
        alpha_layout: &Layout,
        eps: f32,
    ) -> Result<Self> {
        const OP: &str = "rms_norm";
        let (rows, cols) = rows_cols(OP, layout)?;
        let dev = self.device();
        let slice = float_op!(OP, self, [alpha], |x, a| {
            let src = contiguous(OP, x, layout)?;
            let alpha = contiguous(OP, a, alpha_layout)?;
            let mut out = dev.alloc(OP, rows * cols)?;
            rocm_kernels::nn::rms_norm(
                dev.stream(),
                &src,
                &alpha,
                &mut out.as_mut_slice(),
                rows,
                cols,
                eps,
            )
            .map_err(kernel_err(OP))
            .map(|()| out)
        });
        Ok(RocmStorage::new(slice, dev.clone()))
    }

    /// A residual add and the rms_norm of the sum (candle-nn's `add_rms_norm`): `x` and
    /// `residual` of one shape `s`, `alpha` of the last dim; the result has shape `(2, s...)`,
    /// the sum (rounded to the dtype, as `add`) then its norm.
    #[allow(clippy::too_many_arguments)]
    pub fn add_rms_norm(
        &self,
        layout: &Layout,
        residual: &Self,
        residual_layout: &Layout,
        alpha: &Self,
        alpha_layout: &Layout,
        eps: f32,
    ) -> Result<(Self, Shape)> {
        const OP: &str = "add_rms_norm";
        if layout.shape() != residual_layout.shape() {
            return Err(RocmError::layout(
                OP,
                format!(
                    "x has shape {:?} but the residual {:?}",
                    layout.dims(),
                    residual_layout.dims()
                ),
            )
            .into());
        }
        let (rows, cols) = rows_cols(OP, layout)?;
        if alpha_layout.dims() != [cols] {
            return Err(RocmError::layout(
                OP,
                format!("alpha has shape {:?}, not [{cols}]", alpha_layout.dims()),
            )
            .into());
        }
        let dev = self.device();
        let slice = float_op!(OP, self, [residual, alpha], |x, r, a| {
            let src = contiguous(OP, x, layout)?;
            let res = contiguous(OP, r, residual_layout)?;
            let alpha = contiguous(OP, a, alpha_layout)?;
            let mut out = dev.alloc(OP, 2 * rows * cols)?;
            rocm_kernels::nn::add_rms_norm(
                dev.stream(),
                &src,
                &res,
                &alpha,
                &mut out.as_mut_slice(),
                rows,
                cols,
                eps,
            )
            .map_err(kernel_err(OP))
            .map(|()| out)
        });
        let mut dims = vec![2];
        dims.extend_from_slice(layout.dims());
        Ok((RocmStorage::new(slice, dev.clone()), Shape::from(dims)))
    }

    /// candle-nn's `swiglu`: `silu(x[.., :h]) * x[.., h:]` for an even last dim `2h`; the
    /// result's last dim is `h`.
    pub fn swiglu(&self, layout: &Layout) -> Result<(Self, Shape)> {
        const OP: &str = "swiglu";
        let (rows, cols) = rows_cols(OP, layout)?;
        if cols % 2 != 0 {
            return Err(RocmError::layout(
                OP,
                format!("the last dim ({cols}) must be even: two halves"),
            )
            .into());
        }
        let half = cols / 2;
        let dev = self.device();
        // One row (a decode step's gated activations, which the down product multiplies next):
        // rounded for the integer product in the same launch, and kept for it to reuse, on a
        // device that runs such products (a model without quantized weights never does).
        let round = rows == 1
            && half % 32 == 0
            && half <= u32::MAX as usize
            && dev.quantized_matvec() == QuantizedMatvec::Int8Activations
            && dev.has_run_integer_matvec()
            && matches!(self.dtype(), DType::F32 | DType::F16 | DType::BF16);
        let slice = float_op!(OP, self, [], |x| {
            let src = contiguous(OP, x, layout)?;
            if round {
                swiglu_rounding(dev, &src, rows, half)
            } else {
                let mut out = dev.alloc(OP, rows * half)?;
                rocm_kernels::nn::swiglu(dev.stream(), &src, &mut out.as_mut_slice(), rows, half)
                    .map_err(kernel_err(OP))
                    .map(|()| out)
            }
        });
        let mut dims = layout.dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = half;
        }
        Ok((RocmStorage::new(slice, dev.clone()), Shape::from(dims)))
    }

    /// Layer norm over the last dim with `[cols]` scale and shift (candle-nn's `layer_norm`).
    #[allow(clippy::too_many_arguments)]
    pub fn layer_norm(
        &self,
        layout: &Layout,
        alpha: &Self,
        alpha_layout: &Layout,
        beta: &Self,
        beta_layout: &Layout,
        eps: f32,
    ) -> Result<Self> {
        const OP: &str = "layer_norm";
        let (rows, cols) = rows_cols(OP, layout)?;
        let dev = self.device();
        let slice = float_op!(OP, self, [alpha, beta], |x, a, b| {
            let src = contiguous(OP, x, layout)?;
            let alpha = contiguous(OP, a, alpha_layout)?;
            let beta = contiguous(OP, b, beta_layout)?;
            let mut out = dev.alloc(OP, rows * cols)?;
            rocm_kernels::nn::layer_norm(
                dev.stream(),
                &src,
                &alpha,
                &beta,
                &mut out.as_mut_slice(),
                rows,
                cols,
                eps,
            )
            .map_err(kernel_err(OP))
            .map(|()| out)
        });
        Ok(RocmStorage::new(slice, dev.clone()))
    }

    /// Rotary embeddings (candle-nn's `rope`, `rope_i`, `rope_thd`, chosen by `kind`): the input
    /// is `[b, h, t, d]` (`[b, t, h, d]` for `rope_thd`), the cos/sin tables `[t, d/2]` or
    /// `[b, t, d/2]`.
    #[allow(clippy::too_many_arguments)]
    pub fn rope(
        &self,
        layout: &Layout,
        cos: &Self,
        cos_layout: &Layout,
        sin: &Self,
        sin_layout: &Layout,
        kind: RopeKind,
    ) -> Result<Self> {
        let op = kind.name();
        let dims: [usize; 4] = layout.dims().try_into().map_err(|_| {
            candle_core::Error::from(RocmError::layout(
                op,
                format!("the input must have rank 4, not {:?}", layout.dims()),
            ))
        })?;
        check_rope_tables(op, cos_layout, sin_layout)?;
        let dev = self.device();
        let slice = float_op!(op, self, [cos, sin], |x, c, s| {
            let src = contiguous(op, x, layout)?;
            let cos = contiguous(op, c, cos_layout)?;
            let sin = contiguous(op, s, sin_layout)?;
            let mut out = dev.alloc(op, layout.shape().elem_count())?;
            rocm_kernels::nn::rope_any(
                dev.stream(),
                kind,
                &src,
                &cos,
                &sin,
                &mut out.as_mut_slice(),
                dims,
                cos_layout.dims(),
            )
            .map_err(kernel_err(op))
            .map(|()| out)
        });
        Ok(RocmStorage::new(slice, dev.clone()))
    }

    /// The indices (u32) that sort each row of the last dim, ascending or descending
    /// (candle-core's `arg_sort_last_dim` custom op). Contiguous input; every kernel dtype; rows
    /// longer than `rocm_kernels::sort::max_cols` are a typed `Unsupported` error.
    pub fn arg_sort_last_dim(&self, layout: &Layout, ascending: bool) -> Result<Self> {
        const OP: &str = "arg_sort";
        let (rows, cols) = rows_cols(OP, layout)?;
        let dev = self.device();
        fn run<T: KernelDType>(
            dev: &crate::RocmDevice,
            buf: &DeviceBuffer<T>,
            layout: &Layout,
            rows: usize,
            cols: usize,
            ascending: bool,
        ) -> Result<DeviceBuffer<u32>> {
            let src = contiguous(OP, buf, layout)?;
            let mut out = dev.alloc::<u32>(OP, rows * cols)?;
            rocm_kernels::sort::arg_sort(
                dev.stream(),
                src,
                rows,
                cols,
                ascending,
                &mut out.as_mut_slice(),
            )
            .map_err(kernel_err(OP))?;
            Ok(out)
        }
        let out = match self.as_slice() {
            RocmStorageSlice::U8(b) => run(dev, b, layout, rows, cols, ascending)?,
            RocmStorageSlice::U32(b) => run(dev, b, layout, rows, cols, ascending)?,
            RocmStorageSlice::I16(b) => run(dev, b, layout, rows, cols, ascending)?,
            RocmStorageSlice::I32(b) => run(dev, b, layout, rows, cols, ascending)?,
            RocmStorageSlice::I64(b) => run(dev, b, layout, rows, cols, ascending)?,
            RocmStorageSlice::BF16(b) => run(dev, b, layout, rows, cols, ascending)?,
            RocmStorageSlice::F16(b) => run(dev, b, layout, rows, cols, ascending)?,
            RocmStorageSlice::F32(b) => run(dev, b, layout, rows, cols, ascending)?,
            RocmStorageSlice::F64(b) => run(dev, b, layout, rows, cols, ascending)?,
            RocmStorageSlice::F8E4M3(_) => return Err(not_float(OP, DType::F8E4M3)),
        };
        Ok(RocmStorage::new(RocmStorageSlice::U32(out), dev.clone()))
    }
}
