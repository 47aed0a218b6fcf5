//! A step's rotary embedding fused with its KV cache append ([`RocmStorage::rope_kv_append`]):
//! the query and key heads rotated, the rotated keys and the values written into the caches,
//! in one launch (`rocm_kernels::nn::rope_kv`). candle's `Tensor::rope_kv_append` (our patch)
//! reaches it through `ExtBackendStorage::rope_kv_append`.

use candle_core::backend::BackendStorage;
use candle_core::{Layout, Result, Shape};
use hip_core::DeviceBuffer;
use rocm_kernels::nn::{CacheRows, RopeKind, RopeKvDims};
use rocm_kernels::KernelDType;

use crate::device::RocmDevice;
use crate::error::{hip_err, kernel_err, RocmError};
use crate::fused::{check_rope_tables, contiguous};
use crate::layout::Copy2dSpec;
use crate::storage::{RocmStorage, RocmStorageSlice};

/// The operands that [`RocmStorage::rope_kv_append`] reads besides its `qk`.
#[derive(Debug, Clone, Copy)]
pub struct RopeKvInputs<'a> {
    /// `rope` or `rope_i` (`rope_thd` is an `Unsupported` error).
    pub kind: RopeKind,
    /// The cos table (`[t_cs, d/2]` or `[b, t_cs, d/2]`, contiguous).
    pub cos: (&'a RocmStorage, &'a Layout),
    /// The sin table, as `cos`.
    pub sin: (&'a RocmStorage, &'a Layout),
    /// Query heads; the rest of `qk`'s heads are key heads.
    pub q_heads: usize,
    /// The step's values `(b, kv_heads, t, d)`, contiguous.
    pub v: (&'a RocmStorage, &'a Layout),
    /// Where the rotated keys go in the key cache (rows of a contiguous source: `src_o` 0,
    /// `src_s == d2`).
    pub k_rows: Copy2dSpec,
    /// Where the values go in the value cache, as `k_rows`.
    pub v_rows: Copy2dSpec,
}

impl RocmStorage {
    /// Rotates `self` (`qk`: `(b, q_heads + kv_heads, t, d)`, contiguous, through `layout`) as
    /// candle-nn's `rope` / `rope_i` do, writes the rotated key heads into `k_cache` and the
    /// values into `v_cache` as `inputs` says, and returns the rotated query heads
    /// `(b, q_heads, t, d)`: one launch. Float dtypes; every operand of one dtype and device.
    pub fn rope_kv_append(
        &self,
        layout: &Layout,
        inputs: RopeKvInputs<'_>,
        k_cache: &mut Self,
        v_cache: &mut Self,
    ) -> Result<(Self, Shape)> {
        let op = match inputs.kind {
            RopeKind::Interleaved => "rope_i_kv",
            _ => "rope_kv",
        };
        let (b, heads, t, d) = layout.shape().dims4()?;
        if inputs.q_heads == 0 || inputs.q_heads >= heads {
            return Err(RocmError::layout(
                op,
                format!("{} query heads of the input's {heads}", inputs.q_heads),
            )
            .into());
        }
        let (cos, cos_layout) = inputs.cos;
        let (sin, sin_layout) = inputs.sin;
        let (v, v_layout) = inputs.v;
        check_rope_tables(op, cos_layout, sin_layout)?;
        let kv_heads = heads - inputs.q_heads;
        if v_layout.dims() != [b, kv_heads, t, d] {
            return Err(RocmError::layout(
                op,
                format!(
                    "values of shape {:?}, expected {:?}",
                    v_layout.dims(),
                    [b, kv_heads, t, d]
                ),
            )
            .into());
        }
        for (what, rows) in [("key", inputs.k_rows), ("value", inputs.v_rows)] {
            if rows.src_o != 0 || rows.src_s != rows.d2 {
                return Err(RocmError::layout(
                    op,
                    format!("the {what} rows must come from a contiguous source: {rows:?}"),
                )
                .into());
            }
        }
        for other in [cos, sin, v] {
            self.check_operand(other, op)?;
        }
        self.check_operand(k_cache, op)?;
        self.check_operand(v_cache, op)?;
        let dims = RopeKvDims {
            batch: b,
            q_heads: inputs.q_heads,
            kv_heads,
            t,
            head_dim: d,
        };
        let dev = self.device().clone();
        let call = Call {
            dev: &dev,
            op,
            layout,
            inputs: &inputs,
            dims,
        };
        let out = match (
            self.as_slice(),
            cos.as_slice(),
            sin.as_slice(),
            v.as_slice(),
            k_cache.as_slice_mut(),
            v_cache.as_slice_mut(),
        ) {
            (
                RocmStorageSlice::BF16(x),
                RocmStorageSlice::BF16(c),
                RocmStorageSlice::BF16(s),
                RocmStorageSlice::BF16(v),
                RocmStorageSlice::BF16(kd),
                RocmStorageSlice::BF16(vd),
            ) => RocmStorageSlice::BF16(call.run(x, c, s, v, kd, vd)?),
            (
                RocmStorageSlice::F16(x),
                RocmStorageSlice::F16(c),
                RocmStorageSlice::F16(s),
                RocmStorageSlice::F16(v),
                RocmStorageSlice::F16(kd),
                RocmStorageSlice::F16(vd),
            ) => RocmStorageSlice::F16(call.run(x, c, s, v, kd, vd)?),
            (
                RocmStorageSlice::F32(x),
                RocmStorageSlice::F32(c),
                RocmStorageSlice::F32(s),
                RocmStorageSlice::F32(v),
                RocmStorageSlice::F32(kd),
                RocmStorageSlice::F32(vd),
            ) => RocmStorageSlice::F32(call.run(x, c, s, v, kd, vd)?),
            (
                RocmStorageSlice::F64(x),
                RocmStorageSlice::F64(c),
                RocmStorageSlice::F64(s),
                RocmStorageSlice::F64(v),
                RocmStorageSlice::F64(kd),
                RocmStorageSlice::F64(vd),
            ) => RocmStorageSlice::F64(call.run(x, c, s, v, kd, vd)?),
            _ => {
                return Err(RocmError::not_implemented(
                    op,
                    self.dtype(),
                    "every operand must have one float dtype",
                )
                .into())
            }
        };
        Ok((
            RocmStorage::new(out, dev),
            Shape::from_dims(&[b, inputs.q_heads, t, d]),
        ))
    }
}

/// One [`RocmStorage::rope_kv_append`] call, run on the buffers of its dtype.
struct Call<'a> {
    dev: &'a RocmDevice,
    op: &'static str,
    layout: &'a Layout,
    inputs: &'a RopeKvInputs<'a>,
    dims: RopeKvDims,
}

impl Call<'_> {
    fn run<T: KernelDType>(
        &self,
        qk: &DeviceBuffer<T>,
        cos: &DeviceBuffer<T>,
        sin: &DeviceBuffer<T>,
        v: &DeviceBuffer<T>,
        k_cache: &mut DeviceBuffer<T>,
        v_cache: &mut DeviceBuffer<T>,
    ) -> Result<DeviceBuffer<T>> {
        let (op, inputs) = (self.op, self.inputs);
        let qk = contiguous(op, qk, self.layout)?;
        let cos_s = contiguous(op, cos, inputs.cos.1)?;
        let sin_s = contiguous(op, sin, inputs.sin.1)?;
        let v = contiguous(op, v, inputs.v.1)?;
        let RopeKvDims {
            batch,
            q_heads,
            t,
            head_dim,
            ..
        } = self.dims;
        let mut q = self.dev.alloc::<T>(op, batch * q_heads * t * head_dim)?;
        let mut k_dst = cache_rows(op, k_cache, inputs.k_rows)?;
        let mut v_dst = cache_rows(op, v_cache, inputs.v_rows)?;
        rocm_kernels::nn::rope_kv(
            self.dev.stream(),
            inputs.kind,
            &qk,
            &cos_s,
            &sin_s,
            inputs.cos.1.dims(),
            &mut q.as_mut_slice(),
            CacheRows {
                dst: &mut k_dst,
                row_len: inputs.k_rows.d2,
                row_stride: inputs.k_rows.dst_s,
            },
            &v,
            CacheRows {
                dst: &mut v_dst,
                row_len: inputs.v_rows.d2,
                row_stride: inputs.v_rows.dst_s,
            },
            self.dims,
        )
        .map_err(kernel_err(op))?;
        Ok(q)
    }
}

/// `buf`'s elements from `spec.dst_o` on (where the rows of `spec` start).
fn cache_rows<'a, T: KernelDType>(
    op: &str,
    buf: &'a mut DeviceBuffer<T>,
    spec: Copy2dSpec,
) -> Result<hip_core::DeviceSliceMut<'a, T>> {
    let len = buf.len();
    if spec.dst_o > len {
        return Err(RocmError::layout(
            op,
            format!("a cache of {len} elements has no element {}", spec.dst_o),
        )
        .into());
    }
    buf.slice_mut(spec.dst_o..len).map_err(hip_err(op))
}
