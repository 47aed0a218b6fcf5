//! Tensor-level Candle on ROCm (feature `tensor`): `Device::new_rocm(ordinal)`.
//!
//! Needs Candle with our out-of-tree device hook (`candle_core::ext`, from
//! `cargo xtask patch-candle`, used through `[patch.crates-io]`; see docs/tensor-integration.md).
//! [`RocmDevice`] becomes a `Device::Ext` device named `"rocm"`: every tensor op reaches
//! [`RocmStorage`]'s `BackendStorage` methods, and candle's fused ops (candle-nn's softmax,
//! rms_norm, layer_norm, rope, rope_i, rope_thd, sigmoid; candle's `arg_sort_last_dim`) reach
//! our fused kernels through [`ExtBackendStorage::fused`].
//!
//! ```no_run
//! use candle_core::{Device, Tensor};
//! use candle_rocm::RocmDeviceExt;
//!
//! # fn main() -> candle_core::Result<()> {
//! let device = Device::new_rocm(0)?;
//! let a = Tensor::new(&[[1f32, 2.], [3., 4.]], &device)?;
//! let b = a.matmul(&a.t()?)?.to_device(&Device::Cpu)?;
//! assert_eq!(b.to_vec2::<f32>()?, [[5., 11.], [11., 25.]]);
//! # Ok(())
//! # }
//! ```

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::ext::{
    Copy2dArgs, ExtBackendDevice, ExtBackendStorage, ExtDevice, ExtQuantizedStorage, ExtStorage,
    FusedOp, RopeKvAppend,
};
use candle_core::quantized::GgmlDType;
use candle_core::{op, CpuStorage, DType, Device, Layout, Result, Shape, Tensor};

use crate::{QRocmStorage, RocmDevice, RocmError, RocmStorage};
use rocm_kernels::nn::RopeKind;

/// The backend name in `DeviceLocation::Ext { backend, .. }` and in error messages.
pub const BACKEND_NAME: &str = "rocm";

impl ExtBackendDevice for RocmDevice {
    const NAME: &'static str = BACKEND_NAME;

    fn ordinal(&self) -> usize {
        RocmDevice::ordinal(self)
    }

    fn qzeros(&self, elem_count: usize, dtype: GgmlDType) -> Result<Box<dyn ExtQuantizedStorage>> {
        Ok(Box::new(QRocmStorage::zeros(self, elem_count, dtype)?))
    }

    fn load_quantized(
        &self,
        dtype: GgmlDType,
        data: &[u8],
    ) -> Result<Box<dyn ExtQuantizedStorage>> {
        Ok(Box::new(QRocmStorage::from_blocks(self, dtype, data)?))
    }
}

/// The [`RocmStorage`] behind an ext storage, or a device-mismatch error naming `op`.
pub(crate) fn rocm_operand<'a>(op: &str, s: &'a ExtStorage) -> Result<&'a RocmStorage> {
    s.downcast_ref::<RocmStorage>().ok_or_else(|| {
        RocmError::layout(
            op,
            format!(
                "the operand is on {:?}, not on a ROCm device",
                s.device().location()
            ),
        )
        .into()
    })
}

impl ExtQuantizedStorage for QRocmStorage {
    fn dtype(&self) -> GgmlDType {
        QRocmStorage::dtype(self)
    }

    fn device(&self) -> Device {
        Device::Ext(ExtDevice::new(QRocmStorage::device(self).clone()))
    }

    fn storage_size_in_bytes(&self) -> usize {
        QRocmStorage::storage_size_in_bytes(self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn quantize(&mut self, src: &ExtStorage) -> Result<()> {
        QRocmStorage::quantize(self, rocm_operand("quantize", src)?, None)
    }

    fn quantize_onto(&mut self, src: &CpuStorage) -> Result<()> {
        QRocmStorage::quantize_onto(self, src, None)
    }

    fn quantize_imatrix(
        &mut self,
        src: &ExtStorage,
        imatrix_weights: &[f32],
        n_per_row: usize,
    ) -> Result<()> {
        let src = rocm_operand("quantize_imatrix", src)?;
        QRocmStorage::quantize(self, src, Some((imatrix_weights, n_per_row)))
    }

    fn quantize_imatrix_onto(
        &mut self,
        src: &CpuStorage,
        imatrix_weights: &[f32],
        n_per_row: usize,
    ) -> Result<()> {
        QRocmStorage::quantize_onto(self, src, Some((imatrix_weights, n_per_row)))
    }

    fn dequantize(&self, elem_count: usize) -> Result<ExtStorage> {
        Ok(ExtStorage::new(QRocmStorage::dequantize(
            self,
            elem_count,
            DType::F32,
        )?))
    }

    fn dequantize_f16(&self, elem_count: usize) -> Result<ExtStorage> {
        Ok(ExtStorage::new(QRocmStorage::dequantize(
            self,
            elem_count,
            DType::F16,
        )?))
    }

    fn data(&self) -> Result<Vec<u8>> {
        QRocmStorage::data(self)
    }

    fn matmul_t(
        &self,
        self_shape: &Shape,
        x: &ExtStorage,
        x_layout: &Layout,
    ) -> Result<(ExtStorage, Shape)> {
        let x = rocm_operand("qmatmul", x)?;
        let (out, shape) = QRocmStorage::matmul_t(self, self_shape, x, x_layout)?;
        Ok((ExtStorage::new(out), shape))
    }

    fn embedding(
        &self,
        self_shape: &Shape,
        ids: &ExtStorage,
        ids_layout: &Layout,
    ) -> Result<ExtStorage> {
        let ids = rocm_operand("qembedding", ids)?;
        Ok(ExtStorage::new(QRocmStorage::embedding(
            self, self_shape, ids, ids_layout,
        )?))
    }

    fn indexed_moe_forward(
        &self,
        self_shape: &Shape,
        x: &ExtStorage,
        x_layout: &Layout,
        ids: &ExtStorage,
        ids_layout: &Layout,
    ) -> Result<(ExtStorage, Shape)> {
        let op = "indexed_moe_forward";
        let x = rocm_operand(op, x)?;
        let ids = rocm_operand(op, ids)?;
        let (out, shape) =
            QRocmStorage::indexed_moe_forward(self, self_shape, x, x_layout, ids, ids_layout)?;
        Ok((ExtStorage::new(out), shape))
    }

    fn matmul_t_add(
        &self,
        self_shape: &Shape,
        (x, x_layout): (&ExtStorage, &Layout),
        (residual, residual_layout): (&ExtStorage, &Layout),
    ) -> Result<Option<(ExtStorage, Shape)>> {
        let op = "qmatmul (residual add)";
        let fused = QRocmStorage::matmul_t_add(
            self,
            self_shape,
            (rocm_operand(op, x)?, x_layout),
            (rocm_operand(op, residual)?, residual_layout),
        )?;
        Ok(fused.map(|(sum, shape)| (ExtStorage::new(sum), shape)))
    }

    fn rms_norm_matmul_t(
        &self,
        self_shape: &Shape,
        (x, x_layout): (&ExtStorage, &Layout),
        residual: Option<(&ExtStorage, &Layout)>,
        (alpha, alpha_layout): (&ExtStorage, &Layout),
        eps: f32,
    ) -> Result<Option<(Option<ExtStorage>, ExtStorage, Shape)>> {
        let op = "qmatmul (residual add and rms_norm)";
        let residual = match residual {
            Some((r, l)) => Some((rocm_operand(op, r)?, l)),
            None => None,
        };
        let fused = QRocmStorage::rms_norm_matmul_t(
            self,
            self_shape,
            (rocm_operand(op, x)?, x_layout),
            residual,
            (rocm_operand(op, alpha)?, alpha_layout),
            eps,
        )?;
        Ok(fused.map(|(sum, product, shape)| {
            (sum.map(ExtStorage::new), ExtStorage::new(product), shape)
        }))
    }
}

/// candle's description of a 2-D copy as candle-rocm's.
fn copy2d_spec(c: Copy2dArgs) -> crate::layout::Copy2dSpec {
    crate::layout::Copy2dSpec {
        d1: c.d1,
        d2: c.d2,
        src_s: c.src_s,
        dst_s: c.dst_s,
        src_o: c.src_o,
        dst_o: c.dst_o,
    }
}

impl ExtBackendStorage for RocmStorage {
    fn copy2d_pair(
        &self,
        dst: &mut Self,
        first: Copy2dArgs,
        other: &Self,
        other_dst: &mut Self,
        second: Copy2dArgs,
    ) -> Result<()> {
        RocmStorage::copy2d_pair(
            self,
            dst,
            copy2d_spec(first),
            other,
            other_dst,
            copy2d_spec(second),
        )
    }

    fn rope_kv_append(
        &self,
        qk_layout: &Layout,
        args: RopeKvAppend<'_, Self>,
        k_dst: &mut Self,
        v_dst: &mut Self,
    ) -> Result<Option<(Self, Shape)>> {
        let kind = match args.op {
            FusedOp::Rope => RopeKind::Rope,
            FusedOp::RopeI => RopeKind::Interleaved,
            _ => return Ok(None),
        };
        let inputs = crate::RopeKvInputs {
            kind,
            cos: args.cos,
            sin: args.sin,
            q_heads: args.q_heads,
            v: args.v,
            k_rows: copy2d_spec(args.k_args),
            v_rows: copy2d_spec(args.v_args),
        };
        RocmStorage::rope_kv_append(self, qk_layout, inputs, k_dst, v_dst).map(Some)
    }

    fn fused(&self, op: &FusedOp, inputs: &[(&Self, &Layout)]) -> Result<(Self, Shape)> {
        let operand = |i: usize| {
            inputs.get(i).copied().ok_or_else(|| {
                candle_core::Error::from(RocmError::layout(
                    op.name(),
                    format!("expected more than {} inputs", inputs.len()),
                ))
            })
        };
        let (x, l) = operand(0)?;
        let shape = l.shape().clone();
        let out = match *op {
            FusedOp::SoftmaxLastDim => x.softmax_last_dim(l)?,
            FusedOp::RmsNorm { eps } => {
                let (a, al) = operand(1)?;
                x.rms_norm(l, a, al, eps)?
            }
            FusedOp::AddRmsNorm { eps } => {
                let (r, rl) = operand(1)?;
                let (a, al) = operand(2)?;
                return x.add_rms_norm(l, r, rl, a, al, eps);
            }
            FusedOp::SwiGlu => return x.swiglu(l),
            FusedOp::LayerNorm { eps } => {
                let (a, al) = operand(1)?;
                let (b, bl) = operand(2)?;
                x.layer_norm(l, a, al, b, bl, eps)?
            }
            FusedOp::Rope | FusedOp::RopeI | FusedOp::RopeThd => {
                let kind = match *op {
                    FusedOp::Rope => RopeKind::Rope,
                    FusedOp::RopeI => RopeKind::Interleaved,
                    _ => RopeKind::Thd,
                };
                let (c, cl) = operand(1)?;
                let (s, sl) = operand(2)?;
                x.rope(l, c, cl, s, sl, kind)?
            }
            FusedOp::ArgSortLastDim { ascending } => x.arg_sort_last_dim(l, ascending)?,
            FusedOp::Sigmoid => sigmoid(x, l)?,
            FusedOp::Sdpa {
                scale,
                softcapping,
                causal,
            } => {
                let options = crate::attention::AttnOptions {
                    scale,
                    // candle-nn's convention: 1.0 is no softcapping.
                    softcap: (softcapping != 1.0).then_some(softcapping),
                    window_left: None,
                    window_right: causal.then_some(0),
                    kernel: crate::attention::AttnKernel::Auto,
                };
                let mask = inputs.get(3).copied();
                return crate::attention::attention(
                    "sdpa",
                    crate::attention::AttnLayout::Bhsd,
                    (x, l),
                    operand(1)?,
                    operand(2)?,
                    mask,
                    &options,
                );
            }
            // `FusedOp` is non-exhaustive: an op added to Candle later is a typed error here.
            _ => {
                return Err(RocmError::unsupported(
                    op.name(),
                    BackendStorage::dtype(x),
                    "this fused op has no ROCm implementation",
                )
                .into())
            }
        };
        Ok((out, shape))
    }
}

/// `1 / (1 + exp(-x))`, as candle-nn's CPU version computes it (each step in the input dtype).
fn sigmoid(x: &RocmStorage, l: &Layout) -> Result<RocmStorage> {
    let neg = x.unary_impl::<op::Neg>(l)?;
    let contiguous = Layout::contiguous(l.shape());
    let exp = neg.unary_impl::<op::Exp>(&contiguous)?;
    let plus_one = exp.affine(&contiguous, 1.0, 1.0)?;
    plus_one.unary_impl::<op::Recip>(&contiguous)
}

/// `Device::new_rocm` and friends on candle's [`Device`].
pub trait RocmDeviceExt: Sized {
    /// The ROCm GPU with this ordinal as a candle device (`Device::Ext`, backend `"rocm"`).
    fn new_rocm(ordinal: usize) -> Result<Self>;
    /// The ROCm GPU with this ordinal when one can be opened, else the CPU.
    fn rocm_if_available(ordinal: usize) -> Result<Self>;
    /// Whether this is a ROCm device.
    fn is_rocm(&self) -> bool;
    /// The [`RocmDevice`] behind a ROCm device, or an error for any other device.
    fn as_rocm_device(&self) -> Result<&RocmDevice>;
}

impl RocmDeviceExt for Device {
    fn new_rocm(ordinal: usize) -> Result<Self> {
        Ok(Device::Ext(ExtDevice::new(RocmDevice::new(ordinal)?)))
    }

    fn rocm_if_available(ordinal: usize) -> Result<Self> {
        match RocmDevice::new(ordinal) {
            Ok(d) => Ok(Device::Ext(ExtDevice::new(d))),
            Err(_) => Ok(Device::Cpu),
        }
    }

    fn is_rocm(&self) -> bool {
        matches!(self, Device::Ext(d) if d.downcast_ref::<RocmDevice>().is_some())
    }

    fn as_rocm_device(&self) -> Result<&RocmDevice> {
        match self {
            Device::Ext(d) => d
                .downcast_ref::<RocmDevice>()
                .ok_or_else(|| not_rocm(self.location())),
            other => Err(not_rocm(other.location())),
        }
    }
}

fn not_rocm(location: candle_core::DeviceLocation) -> candle_core::Error {
    candle_core::Error::Msg(format!("expected a ROCm device, got {location:?}")).bt()
}

/// Runs `f` on the [`RocmStorage`] of a tensor on a ROCm device (with the tensor's layout), e.g.
/// to launch a custom kernel on its buffer; an error for tensors on other devices.
pub fn with_rocm_storage<R>(
    tensor: &Tensor,
    f: impl FnOnce(&RocmStorage, &Layout) -> Result<R>,
) -> Result<R> {
    let (storage, layout) = tensor.storage_and_layout();
    match &*storage {
        candle_core::Storage::Ext(s) => match s.downcast_ref::<RocmStorage>() {
            Some(s) => f(s, layout),
            None => Err(not_rocm(tensor.device().location())),
        },
        _ => Err(not_rocm(tensor.device().location())),
    }
}

/// A tensor on a ROCm device made from a [`RocmStorage`] (contiguous, of this shape).
pub fn tensor_from_rocm_storage(storage: RocmStorage, shape: impl Into<Shape>) -> Result<Tensor> {
    let shape = shape.into();
    let n = shape.elem_count();
    let len = storage.as_slice().len();
    if len < n {
        return Err(RocmError::layout(
            "tensor_from_rocm_storage",
            format!("the storage holds {len} elements, the shape {shape:?} needs {n}"),
        )
        .into());
    }
    Ok(Tensor::from_storage(
        candle_core::Storage::Ext(candle_core::ext::ExtStorage::new(storage)),
        shape,
        candle_core::op::BackpropOp::none(),
        false,
    ))
}
