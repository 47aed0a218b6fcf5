//! Quantized (GGML) tensors on the device: [`QRocmStorage`] holds a tensor's raw GGML blocks in
//! device memory and runs candle's quantized operations on them with the `rocm_kernels::quantized`
//! kernels.
//!
//! * **Types**: every [`GgmlDType`] of candle-core 0.11 (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
//!   Q8_0, Q8_1, Q2K, Q3K, Q4K, Q5K, Q6K, Q8K). Blocks are stored exactly as in a GGUF file.
//! * **Dequantize** (f32, f16, bf16): on the device, bit-identical to candle's CPU `to_float`.
//! * **Quantize**: through candle's CPU quantizer (its algorithm is the definition of each
//!   format), then uploaded: bit-identical to the CPU by construction.
//! * **`matmul_t`** (`QMatMul::forward`, `x (.., k) x W^T` for `W (n, k)`): up to
//!   [`MATVEC_MAX_ROWS`] activation rows go to a quantized matrix-vector kernel; more rows
//!   dequantize the weights to the activation dtype in chunks of rows (256 MiB by default),
//!   each multiplied by a rocBLAS (cuBLAS) GEMM ([`RocmDevice::set_quantized_gemm_plan`],
//!   [`QuantizedGemmPlan`]). Inputs
//!   f32, f16 and bf16; the output has the input's dtype, as on candle's CUDA backend. The
//!   matrix-vector kernel is chosen per device ([`RocmDevice::set_quantized_matvec`]): by default
//!   [`QuantizedMatvec::Int8Activations`] (activations rounded to 8 bits per 32 elements, integer
//!   dot products, as candle's CPU and CUDA quantized paths do) for every type but Q8K;
//!   [`QuantizedMatvec::FloatActivations`] (weights dequantized in registers, f32 products: the
//!   exact product of the dequantized weights) for Q8K and on request.
//! * **Embedding** rows and the **indexed mixture-of-experts** product read their ids on the
//!   device; an out-of-range id becomes a typed error at the next host read or synchronization
//!   (the device's indexing error flag, see [`RocmDevice`]). The MoE product follows the
//!   device's choice: 8-bit activations by default (each (token, slot) pair through the staged
//!   one-row integer product; a prompt's many pairs sorted by expert on the device and taken up
//!   to 8 of one expert at once), f32 activations with `FloatActivations` and for Q8K.
//!
//! Nothing here waits for the GPU except [`QRocmStorage::data`] and the quantize paths (which
//! read the source on the host).

use candle_core::backend::BackendStorage;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{CpuStorage, DType, Device, Layout, Result, Shape, Tensor};
use half::{bf16, f16};
use hip_core::{DeviceBuffer, DeviceSlice};
use rocblas_safe::GemmElement;
use rocm_kernels::quantized::{self as qk, PlainType, QuantType, MATVEC_MAX_ROWS};
use rocm_kernels::KernelDType;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{hip_err, kernel_err, RocmError};
use crate::storage::{RocmStorage, RocmStorageSlice};
use crate::RocmDevice;

mod activations;
mod normed;
mod prefill;
mod residual;

pub(crate) use activations::{ActivationKey, RoundedActivations};
pub use normed::NormedProduct;
pub use prefill::QuantizedGemmPlan;

/// Which kernel multiplies quantized weights with up to [`MATVEC_MAX_ROWS`] activation rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuantizedMatvec {
    /// Activations rounded to 8 bits per 32-element block, 4-byte integer dot products (2x or
    /// more faster; the error of the activations' rounding, like candle's CPU and CUDA paths),
    /// in one launch: each block of the kernel rounds the activations into its shared memory
    /// and streams the weights with 16-byte loads. Where the rounded rows do not fit a block's
    /// shared memory, and for Q6K with more than one row (where it is slower), as
    /// [`QuantizedMatvec::Int8RoundedOnce`]. Q8K weights take the float kernel.
    #[default]
    Int8Activations,
    /// The same products in two launches: the activations rounded by a launch of their own and
    /// kept for the next product of the same contents (a layer's q, k and v projections round
    /// them once), then the product.
    Int8RoundedOnce,
    /// Weights dequantized in registers, f32 activations, products and sums: the exact product
    /// of the dequantized weights (one rounding to the output dtype).
    FloatActivations,
}

impl QuantizedMatvec {
    /// The device's stored code of this choice.
    pub(crate) fn code(self) -> u8 {
        match self {
            QuantizedMatvec::Int8Activations => 0,
            QuantizedMatvec::Int8RoundedOnce => 1,
            QuantizedMatvec::FloatActivations => 2,
        }
    }

    /// The choice of a stored code (only codes from [`QuantizedMatvec::code`] are stored).
    pub(crate) fn from_code(code: u8) -> QuantizedMatvec {
        match code {
            1 => QuantizedMatvec::Int8RoundedOnce,
            2 => QuantizedMatvec::FloatActivations,
            _ => QuantizedMatvec::Int8Activations,
        }
    }

    /// Whether this choice rounds the activations to 8 bits.
    pub fn rounds_activations(self) -> bool {
        self != QuantizedMatvec::FloatActivations
    }
}

/// How the blocks of a [`GgmlDType`] are read on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blocks {
    /// F32/F16/BF16: plain elements.
    Plain(PlainType),
    /// A block type of the quantized kernels.
    Quant(QuantType),
}

fn blocks_of(dtype: GgmlDType) -> Blocks {
    match dtype {
        GgmlDType::F32 => Blocks::Plain(PlainType::F32),
        GgmlDType::F16 => Blocks::Plain(PlainType::F16),
        GgmlDType::BF16 => Blocks::Plain(PlainType::BF16),
        GgmlDType::Q4_0 => Blocks::Quant(QuantType::Q4_0),
        GgmlDType::Q4_1 => Blocks::Quant(QuantType::Q4_1),
        GgmlDType::Q5_0 => Blocks::Quant(QuantType::Q5_0),
        GgmlDType::Q5_1 => Blocks::Quant(QuantType::Q5_1),
        GgmlDType::Q8_0 => Blocks::Quant(QuantType::Q8_0),
        GgmlDType::Q8_1 => Blocks::Quant(QuantType::Q8_1),
        GgmlDType::Q2K => Blocks::Quant(QuantType::Q2K),
        GgmlDType::Q3K => Blocks::Quant(QuantType::Q3K),
        GgmlDType::Q4K => Blocks::Quant(QuantType::Q4K),
        GgmlDType::Q5K => Blocks::Quant(QuantType::Q5K),
        GgmlDType::Q6K => Blocks::Quant(QuantType::Q6K),
        GgmlDType::Q8K => Blocks::Quant(QuantType::Q8K),
    }
}

fn layout_err(op: &str, reason: impl Into<String>) -> candle_core::Error {
    RocmError::layout(op, reason).into()
}

/// The raw GGML blocks of one quantized tensor on a ROCm device.
#[derive(Debug)]
pub struct QRocmStorage {
    blocks: DeviceBuffer<u8>,
    dtype: GgmlDType,
    device: RocmDevice,
    /// Whether a product has read `blocks` in stream order since they were written (uploaded or
    /// written by a kernel): later products may then overlap the kernel queued before them
    /// ([`qk::StagedWeights`]), since that kernel cannot be the one that wrote them.
    blocks_settled: AtomicBool,
}

impl QRocmStorage {
    /// Queues a staged product that reads `view` of the blocks: `launch` gets them as the
    /// product's [`qk::StagedWeights`] (the launch may overlap the kernel before it once a
    /// product has read the blocks in stream order, since that kernel cannot have written them),
    /// and once it has queued the product the blocks count as read. Errors name `op`.
    pub(crate) fn launch_staged<'s, 'a>(
        &self,
        op: &str,
        view: &'s DeviceSlice<'a, u8>,
        launch: impl FnOnce(qk::StagedWeights<'s, 'a>) -> rocm_kernels::error::Result<()>,
    ) -> Result<()> {
        let weights = if self.blocks_settled.load(Ordering::Relaxed) {
            qk::StagedWeights::written_earlier(view)
        } else {
            qk::StagedWeights::new(view)
        };
        launch(weights).map_err(kernel_err(op))?;
        // Queued on the device's stream, after whatever wrote the blocks.
        self.blocks_settled.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Zero-filled blocks for `elem_count` elements (a multiple of the block size).
    pub fn zeros(device: &RocmDevice, elem_count: usize, dtype: GgmlDType) -> Result<Self> {
        let op = "qzeros";
        if elem_count % dtype.block_size() != 0 {
            return Err(layout_err(
                op,
                format!(
                    "{elem_count} elements are not a whole number of {dtype:?} blocks of {}",
                    dtype.block_size()
                ),
            ));
        }
        let bytes = elem_count / dtype.block_size() * dtype.type_size();
        let blocks = device
            .stream()
            .alloc_zeroed::<u8>(bytes)
            .map_err(hip_err(op))?;
        Ok(QRocmStorage {
            blocks_settled: AtomicBool::new(false),
            blocks,
            dtype,
            device: device.clone(),
        })
    }

    /// The device copy of `data`, raw blocks of `dtype` (e.g. from a GGUF file); an error when
    /// `data` is not a whole number of blocks.
    pub fn from_blocks(device: &RocmDevice, dtype: GgmlDType, data: &[u8]) -> Result<Self> {
        let op = "load_quantized";
        if data.len() % dtype.type_size() != 0 {
            return Err(layout_err(
                op,
                format!(
                    "{} bytes are not a whole number of {dtype:?} blocks of {} bytes",
                    data.len(),
                    dtype.type_size()
                ),
            ));
        }
        Ok(QRocmStorage {
            blocks_settled: AtomicBool::new(false),
            blocks: device.upload(data)?,
            dtype,
            device: device.clone(),
        })
    }

    /// The GGML type.
    pub fn dtype(&self) -> GgmlDType {
        self.dtype
    }

    /// The device.
    pub fn device(&self) -> &RocmDevice {
        &self.device
    }

    /// The raw blocks on the device.
    pub fn blocks(&self) -> &DeviceBuffer<u8> {
        &self.blocks
    }

    /// The size of the blocks in bytes.
    pub fn storage_size_in_bytes(&self) -> usize {
        self.blocks.len()
    }

    /// The number of elements the blocks hold.
    pub fn elem_count(&self) -> usize {
        self.blocks.len() / self.dtype.type_size() * self.dtype.block_size()
    }

    /// The blocks copied to the host (waits for the device).
    pub fn data(&self) -> Result<Vec<u8>> {
        self.device.check_index_errors()?;
        self.blocks.to_host_vec().map_err(hip_err("quantized data"))
    }

    /// Quantizes host f32 data into the blocks with candle's CPU quantizer (bit-identical to
    /// `QTensor::quantize` on the CPU). With `imatrix`, `(weights, n_per_row)` as
    /// `QTensor::quantize_imatrix`.
    pub fn quantize_onto(
        &mut self,
        src: &CpuStorage,
        imatrix: Option<(&[f32], usize)>,
    ) -> Result<()> {
        let op = "quantize";
        let CpuStorage::F32(values) = src else {
            return Err(RocmError::unsupported(op, src.dtype(), "quantize takes f32 data").into());
        };
        let n = self.elem_count();
        if values.len() != n {
            return Err(layout_err(
                op,
                format!(
                    "the source holds {} elements, the {:?} storage {n}",
                    values.len(),
                    self.dtype
                ),
            ));
        }
        let cpu = match imatrix {
            None => {
                let t = Tensor::from_slice(values, n, &Device::Cpu)?;
                QTensor::quantize(&t, self.dtype)?
            }
            Some((weights, n_per_row)) => {
                if !matches!(
                    self.dtype,
                    GgmlDType::Q2K
                        | GgmlDType::Q3K
                        | GgmlDType::Q4K
                        | GgmlDType::Q5K
                        | GgmlDType::Q6K
                ) {
                    return Err(RocmError::not_implemented(
                        "quantize_imatrix",
                        DType::F32,
                        format!(
                            "candle's quantizer has no importance-matrix variant for {:?} (only \
                             Q2K, Q3K, Q4K, Q5K, Q6K)",
                            self.dtype
                        ),
                    )
                    .into());
                }
                if weights.len() != n_per_row {
                    return Err(layout_err(
                        op,
                        format!(
                            "{} importance weights for rows of {n_per_row}",
                            weights.len()
                        ),
                    ));
                }
                if n_per_row == 0 || n % n_per_row != 0 {
                    return Err(layout_err(
                        op,
                        format!("{n} elements are not whole rows of {n_per_row}"),
                    ));
                }
                let t = Tensor::from_slice(values, (n / n_per_row, n_per_row), &Device::Cpu)?;
                QTensor::quantize_imatrix(&t, weights, self.dtype)?
            }
        };
        let data = cpu.data()?;
        if data.len() != self.blocks.len() {
            return Err(layout_err(
                op,
                format!(
                    "the CPU quantizer wrote {} bytes, the storage holds {}",
                    data.len(),
                    self.blocks.len()
                ),
            ));
        }
        self.blocks = self.device.upload(&data)?;
        *self.blocks_settled.get_mut() = false;
        Ok(())
    }

    /// Quantizes device f32 data (read back to the host, see [`Self::quantize_onto`]).
    pub fn quantize(&mut self, src: &RocmStorage, imatrix: Option<(&[f32], usize)>) -> Result<()> {
        let host = src.to_cpu_storage()?;
        self.quantize_onto(&host, imatrix)
    }

    /// The first `elem_count` elements dequantized to `out` (f32, f16 or bf16).
    pub fn dequantize(&self, elem_count: usize, out: DType) -> Result<RocmStorage> {
        let op = "dequantize";
        let have = self.elem_count();
        if elem_count > have {
            return Err(layout_err(
                op,
                format!("{elem_count} elements requested, the blocks hold {have}"),
            ));
        }
        let slice = match out {
            DType::F32 => RocmStorageSlice::F32(self.dequantize_to::<f32>(elem_count)?),
            DType::F16 => RocmStorageSlice::F16(self.dequantize_to::<f16>(elem_count)?),
            DType::BF16 => RocmStorageSlice::BF16(self.dequantize_to::<bf16>(elem_count)?),
            other => {
                return Err(RocmError::unsupported(
                    op,
                    other,
                    "quantized tensors dequantize to f32, f16 or bf16",
                )
                .into())
            }
        };
        Ok(RocmStorage::new(slice, self.device.clone()))
    }

    /// The first `n` elements (a multiple of the block size, or all of them) as a new `O` buffer.
    fn dequantize_to<O: KernelDType>(&self, n: usize) -> Result<DeviceBuffer<O>> {
        let op = "dequantize";
        let mut out = self.device.alloc::<O>(op, n)?;
        let stream = self.device.stream();
        match blocks_of(self.dtype) {
            Blocks::Quant(q) => {
                if n % q.block_elems() != 0 {
                    return Err(layout_err(
                        op,
                        format!(
                            "{n} elements are not whole {:?} blocks of {}",
                            self.dtype,
                            q.block_elems()
                        ),
                    ));
                }
                let bytes = n / q.block_elems() * q.block_bytes();
                let src = self.blocks.slice(0..bytes).map_err(hip_err(op))?;
                qk::dequantize(stream, q, &src, &mut out.as_mut_slice())
            }
            Blocks::Plain(s) => plain::<O>(s, &self.blocks, &mut out),
        }
        .map_err(kernel_err(op))?;
        Ok(out)
    }

    /// `x (.., k) x W^T` for this storage as the `(n, k)` weights `self_shape`: the output has
    /// dims `(.., n)` and the dtype of `x` (f32, f16 or bf16).
    pub fn matmul_t(
        &self,
        self_shape: &Shape,
        x: &RocmStorage,
        x_layout: &Layout,
    ) -> Result<(RocmStorage, Shape)> {
        let op = "qmatmul";
        let (n, k) = self_shape.dims2()?;
        let dims = x_layout.dims();
        if dims.len() < 2 || dims[dims.len() - 1] != k {
            return Err(layout_err(
                op,
                format!(
                    "the input {:?} does not end in k = {k} (weights {self_shape:?}) or has rank < 2",
                    x_layout.shape()
                ),
            ));
        }
        if x.device().ordinal() != self.device.ordinal() {
            return Err(layout_err(
                op,
                format!(
                    "the input is on ROCm device {}, the weights on {}",
                    x.device().ordinal(),
                    self.device.ordinal()
                ),
            ));
        }
        let mut out_dims = dims.to_vec();
        out_dims[dims.len() - 1] = n;
        let out_shape = Shape::from(out_dims);
        let m = x_layout.shape().elem_count() / k.max(1);
        let slice = match x.as_slice() {
            RocmStorageSlice::F32(b) => {
                RocmStorageSlice::F32(self.matmul_typed(op, (m, n, k), b, x_layout)?)
            }
            RocmStorageSlice::F16(b) => {
                RocmStorageSlice::F16(self.matmul_typed(op, (m, n, k), b, x_layout)?)
            }
            RocmStorageSlice::BF16(b) => {
                RocmStorageSlice::BF16(self.matmul_typed(op, (m, n, k), b, x_layout)?)
            }
            other => {
                return Err(RocmError::unsupported(
                    op,
                    other.dtype(),
                    "quantized matmul takes f32, f16 or bf16 activations",
                )
                .into())
            }
        };
        Ok((RocmStorage::new(slice, self.device.clone()), out_shape))
    }

    fn matmul_typed<T: KernelDType + GemmElement>(
        &self,
        op: &str,
        (m, n, k): (usize, usize, usize),
        x: &DeviceBuffer<T>,
        x_layout: &Layout,
    ) -> Result<DeviceBuffer<T>> {
        let dev = &self.device;
        let mut out = dev.alloc::<T>(op, m * n)?;
        if m == 0 || n == 0 {
            return Ok(out);
        }
        match blocks_of(self.dtype) {
            Blocks::Quant(q) if m <= MATVEC_MAX_ROWS => {
                let copy;
                // The activations read in place can be named (their rounding reused, below); a
                // copy cannot.
                let (xs, key) = match contiguous_view(op, x, x_layout, 16)? {
                    Some(view) => {
                        let key = ActivationKey {
                            content: x.content_key(),
                            offset: view.offset(),
                            m,
                            k,
                            dtype: T::NAME,
                        };
                        (view, Some(key))
                    }
                    None => {
                        copy = dev.contiguous_copy(op, &x.as_slice(), x_layout)?;
                        (copy.as_slice(), None)
                    }
                };
                let w = self.blocks.as_slice();
                let kind = dev.quantized_matvec();
                // `prefers_matvec_int_staged` is false for types without an integer kernel.
                if kind == QuantizedMatvec::Int8Activations
                    && qk::prefers_matvec_int_staged(dev.stream(), q, m, k)
                {
                    dev.note_integer_matvec();
                    // One row that its producer already rounded (the decode step's swiglu,
                    // fused.rs): the product reads that rounding instead of redoing it.
                    let rounded = key
                        .filter(|_| m == 1)
                        .and_then(|key| dev.rounded_activations(&key));
                    self.launch_staged(op, &w, |weights| match rounded {
                        Some(r) => qk::matvec_int_staged_rounded(
                            dev.stream(),
                            q,
                            weights,
                            (m, n, k),
                            &r.xq.as_slice(),
                            &r.xds.as_slice(),
                            &mut out.as_mut_slice(),
                        ),
                        None => qk::matvec_int_staged(
                            dev.stream(),
                            q,
                            weights,
                            (m, n, k),
                            &xs,
                            &mut out.as_mut_slice(),
                        ),
                    })?;
                } else if q.has_int_matvec() && kind.rounds_activations() {
                    let rounded = match key.and_then(|key| dev.rounded_activations(&key)) {
                        Some(rounded) => rounded,
                        None => {
                            let (q_len, ds_len) = qk::matvec_int_scratch(m, k);
                            let mut xq = dev.alloc::<u8>(op, q_len)?;
                            let mut xds = dev.alloc::<f32>(op, ds_len)?;
                            qk::quantize_activations(
                                dev.stream(),
                                (m, k),
                                &xs,
                                &mut xq.as_mut_slice(),
                                &mut xds.as_mut_slice(),
                            )
                            .map_err(kernel_err(op))?;
                            let rounded = std::sync::Arc::new(RoundedActivations { key, xq, xds });
                            if key.is_some() {
                                dev.keep_rounded_activations(rounded.clone());
                            }
                            rounded
                        }
                    };
                    qk::matvec_int_rounded(
                        dev.stream(),
                        q,
                        &w,
                        (m, n, k),
                        &rounded.xq.as_slice(),
                        &rounded.xds.as_slice(),
                        &mut out.as_mut_slice(),
                    )
                    .map_err(kernel_err(op))?;
                } else {
                    qk::matvec(dev.stream(), q, &w, (m, n, k), &xs, &mut out.as_mut_slice())
                        .map_err(kernel_err(op))?;
                }
            }
            Blocks::Quant(q) => {
                // Prefill: the weights dequantized to T in chunks of rows, a GEMM per chunk.
                let copy;
                let xs = match contiguous_view(op, x, x_layout, 1)? {
                    Some(view) => view,
                    None => {
                        copy = dev.contiguous_copy(op, &x.as_slice(), x_layout)?;
                        copy.as_slice()
                    }
                };
                prefill::gemm_dequantized(dev, op, q, &self.blocks, (m, n, k), &xs, &mut out)?;
            }
            Blocks::Plain(_) => {
                // Plain weights converted to T, then one GEMM.
                let w = self.dequantize_to::<T>(n * k)?;
                let copy;
                let (xs, xl) = if x_layout.is_contiguous() {
                    let l = Layout::contiguous_with_offset((1, m, k), x_layout.start_offset());
                    (x.as_slice(), l)
                } else {
                    copy = dev.contiguous_copy(op, &x.as_slice(), x_layout)?;
                    (copy.as_slice(), Layout::contiguous((1, m, k)))
                };
                let wl = Layout::new(Shape::from((1, k, n)), vec![n * k, 1, k], 0);
                dev.gemm(op, (1, m, n, k), (&xs, &xl), (&w.as_slice(), &wl), &mut out)?;
            }
        }
        Ok(out)
    }

    /// `QTensor::embedding`: rows `ids` (u32) of the `(rows, hidden)` table as f32,
    /// `(ids.len(), hidden)`.
    pub fn embedding(
        &self,
        self_shape: &Shape,
        ids: &RocmStorage,
        ids_layout: &Layout,
    ) -> Result<RocmStorage> {
        let op = "qembedding";
        let (rows, hidden) = self_shape.dims2()?;
        let RocmStorageSlice::U32(ids_buf) = ids.as_slice() else {
            return Err(RocmError::unsupported(op, ids.dtype(), "embedding ids are u32").into());
        };
        let n_ids = ids_layout.shape().elem_count();
        let dev = &self.device;
        // The ids as one contiguous run: the given storage when its layout is contiguous, else
        // a copy.
        let ids_copy;
        let (ids_st, ids_l) = if ids_layout.is_contiguous() {
            (
                ids,
                Layout::contiguous_with_offset(n_ids, ids_layout.start_offset()),
            )
        } else {
            let c = dev.contiguous_copy(op, &ids_buf.as_slice(), ids_layout)?;
            ids_copy = RocmStorage::new(RocmStorageSlice::U32(c), dev.clone());
            (&ids_copy, Layout::contiguous(n_ids))
        };
        let q = match blocks_of(self.dtype) {
            Blocks::Quant(q) => q,
            Blocks::Plain(_) => {
                // Plain tables: dequantize, then the backend's index_select.
                let table = self.dequantize(rows * hidden, DType::F32)?;
                return table.index_select(ids_st, &Layout::contiguous((rows, hidden)), &ids_l, 0);
            }
        };
        let RocmStorageSlice::U32(ids_buf) = ids_st.as_slice() else {
            return Err(RocmError::unsupported(op, ids.dtype(), "embedding ids are u32").into());
        };
        let start = ids_l.start_offset();
        let ids_view = ids_buf.slice(start..start + n_ids).map_err(hip_err(op))?;
        let mut out = dev.alloc::<f32>(op, n_ids * hidden)?;
        qk::embedding(
            dev.stream(),
            q,
            &self.blocks.as_slice(),
            (rows, hidden),
            &ids_view,
            &mut out.as_mut_slice(),
            dev.index_flag()?,
        )
        .map_err(kernel_err(op))?;
        Ok(RocmStorage::new(RocmStorageSlice::F32(out), dev.clone()))
    }

    /// `QTensor::indexed_moe_forward`: `self_shape (experts, n, k)`, `x (batch, topk or 1, k)`,
    /// `ids (batch, topk)` u32; the result is `(batch, topk, n)` in the dtype of `x`. The
    /// activations are rounded to 8 bits (the decode products' integer arithmetic) unless the
    /// device takes [`QuantizedMatvec::FloatActivations`], and for types without an integer
    /// product (Q8K).
    pub fn indexed_moe_forward(
        &self,
        self_shape: &Shape,
        x: &RocmStorage,
        x_layout: &Layout,
        ids: &RocmStorage,
        ids_layout: &Layout,
    ) -> Result<(RocmStorage, Shape)> {
        let op = "indexed_moe_forward";
        let (experts, n, k) = self_shape.dims3()?;
        let (batch, x_rows, xk) = x_layout.shape().dims3()?;
        let (ib, topk) = ids_layout.shape().dims2()?;
        if xk != k || ib != batch || (x_rows != 1 && x_rows != topk) {
            return Err(layout_err(
                op,
                format!(
                    "x {:?} and ids {:?} do not fit weights {self_shape:?} (x must be (batch, \
                     topk or 1, k), ids (batch, topk))",
                    x_layout.shape(),
                    ids_layout.shape()
                ),
            ));
        }
        let Blocks::Quant(q) = blocks_of(self.dtype) else {
            return Err(RocmError::unsupported(
                op,
                DType::F32,
                format!(
                    "{:?} expert weights: dequantize them and use a plain matmul",
                    self.dtype
                ),
            )
            .into());
        };
        let RocmStorageSlice::U32(ids_buf) = ids.as_slice() else {
            return Err(RocmError::unsupported(op, ids.dtype(), "expert ids are u32").into());
        };
        let dev = &self.device;
        // Ids and activations as they are when contiguous (activations 16-byte aligned), else
        // copied.
        let ids_copy;
        let ids_view = match contiguous_view(op, ids_buf, ids_layout, 1)? {
            Some(v) => v,
            None => {
                ids_copy = dev.contiguous_copy(op, &ids_buf.as_slice(), ids_layout)?;
                ids_copy.as_slice()
            }
        };
        let out_shape = Shape::from((batch, topk, n));
        // The device's matrix-vector choice: 8-bit activations unless float ones were asked for.
        let activations = match dev.quantized_matvec() {
            QuantizedMatvec::FloatActivations => qk::MoeActivations::Float,
            QuantizedMatvec::Int8Activations | QuantizedMatvec::Int8RoundedOnce => {
                qk::MoeActivations::Int8
            }
        };
        macro_rules! run {
            ($b:expr) => {{
                let x_copy;
                let xs = match contiguous_view(op, $b, x_layout, 16)? {
                    Some(v) => v,
                    None => {
                        x_copy = dev.contiguous_copy(op, &$b.as_slice(), x_layout)?;
                        x_copy.as_slice()
                    }
                };
                let mut out = dev.alloc(op, batch * topk * n)?;
                // Many pairs (a prompt's) are grouped by expert, sorted into this scratch.
                let mut order = match activations {
                    qk::MoeActivations::Int8
                        if qk::moe_groups_pairs(dev.stream(), q, (experts, k), batch * topk) =>
                    {
                        Some(dev.alloc::<u32>(op, batch * topk)?)
                    }
                    _ => None,
                };
                qk::moe(
                    dev.stream(),
                    q,
                    &self.blocks.as_slice(),
                    (experts, n, k),
                    &ids_view,
                    (batch, topk, x_rows),
                    &xs,
                    &mut out.as_mut_slice(),
                    dev.index_flag()?,
                    activations,
                    order.as_mut().map(|o| o.as_mut_slice()).as_mut(),
                )
                .map_err(kernel_err(op))?;
                out
            }};
        }
        let slice = match x.as_slice() {
            RocmStorageSlice::F32(b) => RocmStorageSlice::F32(run!(b)),
            RocmStorageSlice::F16(b) => RocmStorageSlice::F16(run!(b)),
            RocmStorageSlice::BF16(b) => RocmStorageSlice::BF16(run!(b)),
            other => {
                return Err(RocmError::unsupported(
                    op,
                    other.dtype(),
                    "indexed_moe_forward takes f32, f16 or bf16 activations",
                )
                .into())
            }
        };
        Ok((RocmStorage::new(slice, dev.clone()), out_shape))
    }
}

/// Dequantizes the first `n` plain elements of `s` in `blocks` into `out`.
fn plain<O: KernelDType>(
    s: PlainType,
    blocks: &DeviceBuffer<u8>,
    out: &mut DeviceBuffer<O>,
) -> rocm_kernels::Result<()> {
    qk::dequantize_plain::<O>(
        blocks.stream(),
        s,
        &blocks.as_slice(),
        &mut out.as_mut_slice(),
    )
}

/// The elements of `layout` as one view of `buf`, when the layout is contiguous and its start
/// is `align`-byte aligned; `None` when they need a contiguous copy.
fn contiguous_view<'a, T: KernelDType>(
    op: &str,
    buf: &'a DeviceBuffer<T>,
    layout: &Layout,
    align: u64,
) -> Result<Option<DeviceSlice<'a, T>>> {
    if !layout.is_contiguous() {
        return Ok(None);
    }
    let start = layout.start_offset();
    let len = layout.shape().elem_count();
    let view = buf.slice(start..start + len).map_err(hip_err(op))?;
    Ok((view.device_ptr().0 % align == 0).then_some(view))
}
