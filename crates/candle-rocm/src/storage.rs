//! [`RocmStorage`]: candle's `BackendStorage` over dtype-tagged hip-core device buffers.
//!
//! This module holds the storage types, their constructors and operand checks, and the
//! `BackendStorage` impl as a thin dispatch: each trait method forwards to its op family in
//! `crate::ops` (element-wise, reductions, indexing, copies, pooling, matmul) or
//! [`crate::conv`], which hold the dtype dispatch, the layout handling and the kernel calls.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::conv::{ParamsConv1D, ParamsConv2D, ParamsConvTranspose1D, ParamsConvTranspose2D};
use candle_core::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use candle_core::scalar::Scalar;
use candle_core::{CpuStorage, DType, Error, Layout, Result};
use half::{bf16, f16};
use hip_core::DeviceBuffer;
use rocm_kernels::KernelDType;

use crate::conv;
use crate::device::RocmDevice;
use crate::error::{hip_err, RocmError};
use crate::layout::Copy2dSpec;
use crate::ops::{copy, elementwise, index, matmul, pool, reduce};

/// A device buffer tagged with its Candle dtype.
///
/// `F8E4M3` is stored as its raw bytes (`DeviceBuffer<u8>`); the 4/6-bit formats and `F8E8M0`
/// have no device storage.
#[derive(Debug)]
#[non_exhaustive]
pub enum RocmStorageSlice {
    /// `u8`.
    U8(DeviceBuffer<u8>),
    /// `u32`.
    U32(DeviceBuffer<u32>),
    /// `i16`.
    I16(DeviceBuffer<i16>),
    /// `i32`.
    I32(DeviceBuffer<i32>),
    /// `i64`.
    I64(DeviceBuffer<i64>),
    /// `bf16`.
    BF16(DeviceBuffer<bf16>),
    /// `f16`.
    F16(DeviceBuffer<f16>),
    /// `f32`.
    F32(DeviceBuffer<f32>),
    /// `f64`.
    F64(DeviceBuffer<f64>),
    /// `f8e4m3`, as raw bytes.
    F8E4M3(DeviceBuffer<u8>),
}

impl RocmStorageSlice {
    /// The Candle dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Self::U8(_) => DType::U8,
            Self::U32(_) => DType::U32,
            Self::I16(_) => DType::I16,
            Self::I32(_) => DType::I32,
            Self::I64(_) => DType::I64,
            Self::BF16(_) => DType::BF16,
            Self::F16(_) => DType::F16,
            Self::F32(_) => DType::F32,
            Self::F64(_) => DType::F64,
            Self::F8E4M3(_) => DType::F8E4M3,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Self::U8(b) | Self::F8E4M3(b) => b.len(),
            Self::U32(b) => b.len(),
            Self::I16(b) => b.len(),
            Self::I32(b) => b.len(),
            Self::I64(b) => b.len(),
            Self::BF16(b) => b.len(),
            Self::F16(b) => b.len(),
            Self::F32(b) => b.len(),
            Self::F64(b) => b.len(),
        }
    }

    /// `true` when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Candle storage on a ROCm device: a dtype-tagged buffer and the device it lives on.
#[derive(Debug)]
pub struct RocmStorage {
    slice: RocmStorageSlice,
    device: RocmDevice,
}

impl RocmStorage {
    /// Storage from a buffer allocated on `device`'s stream.
    pub(crate) fn new(slice: RocmStorageSlice, device: RocmDevice) -> Self {
        RocmStorage { slice, device }
    }

    /// The typed buffer.
    pub fn as_slice(&self) -> &RocmStorageSlice {
        &self.slice
    }

    /// The typed buffer, mutably: for launching custom kernels on it (see
    /// `rocm_kernels::modules::custom_module` and the `custom_kernel` example). Launch them on
    /// the device's stream ([`RocmDevice::stream`]), which orders them with every other op.
    pub fn as_slice_mut(&mut self) -> &mut RocmStorageSlice {
        &mut self.slice
    }

    /// Storage over a buffer the caller filled (e.g. with a custom kernel). The buffer must
    /// belong to `device` and have been allocated on its stream ([`RocmDevice::stream`]), so
    /// that every later op is ordered after the work that wrote it.
    pub fn from_slice(slice: RocmStorageSlice, device: RocmDevice) -> Result<Self> {
        let stream = match &slice {
            RocmStorageSlice::U8(b) | RocmStorageSlice::F8E4M3(b) => b.stream(),
            RocmStorageSlice::U32(b) => b.stream(),
            RocmStorageSlice::I16(b) => b.stream(),
            RocmStorageSlice::I32(b) => b.stream(),
            RocmStorageSlice::I64(b) => b.stream(),
            RocmStorageSlice::BF16(b) => b.stream(),
            RocmStorageSlice::F16(b) => b.stream(),
            RocmStorageSlice::F32(b) => b.stream(),
            RocmStorageSlice::F64(b) => b.stream(),
        };
        if stream != device.stream() {
            return Err(Error::Msg(format!(
                "RocmStorage::from_slice: the buffer was allocated on {stream:?}, not on the \
                 stream of ROCm device {} ({:?})",
                device.ordinal(),
                device.stream()
            ))
            .bt());
        }
        Ok(RocmStorage::new(slice, device))
    }

    /// New storage over `slice` on the same device.
    pub(crate) fn wrap(&self, slice: RocmStorageSlice) -> Self {
        RocmStorage::new(slice, self.device.clone())
    }

    /// The typed buffer, mutably, and the device (borrowed together, for in-place ops).
    pub(crate) fn slice_and_device_mut(&mut self) -> (&mut RocmStorageSlice, &RocmDevice) {
        (&mut self.slice, &self.device)
    }

    /// Two `copy2d`s, `self` into `dst` as `first` says and `other` into `other_dst` as
    /// `second` says (candle's `Tensor::slice_set_pair`: a KV cache's new key and value rows),
    /// in one launch where the four storages share a dtype, as two copies otherwise.
    pub fn copy2d_pair(
        &self,
        dst: &mut Self,
        first: Copy2dSpec,
        other: &Self,
        other_dst: &mut Self,
        second: Copy2dSpec,
    ) -> Result<()> {
        copy::copy2d_pair((self, dst, first), (other, other_dst, second))
    }

    /// Fails unless `other` lives on the same device.
    pub(crate) fn check_device(&self, other: &Self, op: &'static str) -> Result<()> {
        if self.device.same_device(&other.device) {
            Ok(())
        } else {
            Err(Error::DeviceMismatchBinaryOp {
                lhs: self.device.location(),
                rhs: other.device.location(),
                op,
            }
            .bt())
        }
    }

    /// Fails unless `other` has the same dtype.
    pub(crate) fn check_dtype(&self, other: &Self, op: &'static str) -> Result<()> {
        if self.dtype() == other.dtype() {
            Ok(())
        } else {
            Err(Error::DTypeMismatchBinaryOp {
                lhs: self.dtype(),
                rhs: other.dtype(),
                op,
            }
            .bt())
        }
    }

    /// Fails unless `other` has the same device and dtype.
    pub(crate) fn check_operand(&self, other: &Self, op: &'static str) -> Result<()> {
        self.check_device(other, op)?;
        self.check_dtype(other, op)
    }

    /// The typed error for an op this backend has no kernel for (for this storage's dtype).
    pub(crate) fn not_implemented(&self, op: &str, reason: &str) -> Error {
        RocmError::not_implemented(op, self.dtype(), reason).into()
    }
}

fn to_host<T: KernelDType>(buf: &DeviceBuffer<T>) -> Result<Vec<T>> {
    buf.to_host_vec().map_err(hip_err("to_cpu_storage"))
}

impl BackendStorage for RocmStorage {
    type Device = RocmDevice;

    /// A copy of the whole buffer (the layout is not applied, as in candle's other backends).
    fn try_clone(&self, _: &Layout) -> Result<Self> {
        copy::try_clone(self)
    }

    fn dtype(&self) -> DType {
        self.slice.dtype()
    }

    fn device(&self) -> &RocmDevice {
        &self.device
    }

    /// Reports first an out-of-range index recorded by an indexing op since the last check
    /// (see [`RocmDevice`]'s docs), then copies the buffer to the host.
    fn to_cpu_storage(&self) -> Result<CpuStorage> {
        self.device.check_index_errors()?;
        Ok(match &self.slice {
            RocmStorageSlice::U8(b) => CpuStorage::U8(to_host(b)?),
            RocmStorageSlice::U32(b) => CpuStorage::U32(to_host(b)?),
            RocmStorageSlice::I16(b) => CpuStorage::I16(to_host(b)?),
            RocmStorageSlice::I32(b) => CpuStorage::I32(to_host(b)?),
            RocmStorageSlice::I64(b) => CpuStorage::I64(to_host(b)?),
            RocmStorageSlice::BF16(b) => CpuStorage::BF16(to_host(b)?),
            RocmStorageSlice::F16(b) => CpuStorage::F16(to_host(b)?),
            RocmStorageSlice::F32(b) => CpuStorage::F32(to_host(b)?),
            RocmStorageSlice::F64(b) => CpuStorage::F64(to_host(b)?),
            RocmStorageSlice::F8E4M3(b) => CpuStorage::F8E4M3(
                to_host(b)?
                    .into_iter()
                    .map(float8::F8E4M3::from_bits)
                    .collect(),
            ),
        })
    }

    fn affine(&self, layout: &Layout, mul: f64, add: f64) -> Result<Self> {
        elementwise::affine(self, layout, mul, add)
    }

    fn powf(&self, layout: &Layout, e: f64) -> Result<Self> {
        elementwise::powf(self, layout, e)
    }

    fn elu(&self, layout: &Layout, alpha: f64) -> Result<Self> {
        elementwise::elu(self, layout, alpha)
    }

    /// argmin/argmax reduce exactly one dim, as on candle's CPU backend: any other number of
    /// dims is [`Error::OnlySingleDimension`], returned before anything is launched.
    fn reduce_op(&self, op: ReduceOp, layout: &Layout, reduce_dims: &[usize]) -> Result<Self> {
        reduce::reduce_op(self, op, layout, reduce_dims)
    }

    fn cmp(&self, op: CmpOp, rhs: &Self, lhs_l: &Layout, rhs_l: &Layout) -> Result<Self> {
        elementwise::cmp(op, self, rhs, lhs_l, rhs_l)
    }

    fn to_dtype(&self, layout: &Layout, dtype: DType) -> Result<Self> {
        elementwise::to_dtype(self, layout, dtype)
    }

    fn unary_impl<B: UnaryOpT>(&self, layout: &Layout) -> Result<Self> {
        elementwise::unary::<B>(self, layout)
    }

    fn binary_impl<B: BinaryOpT>(
        &self,
        rhs: &Self,
        lhs_l: &Layout,
        rhs_l: &Layout,
    ) -> Result<Self> {
        elementwise::binary::<B>(self, rhs, lhs_l, rhs_l)
    }

    fn where_cond(
        &self,
        layout: &Layout,
        t: &Self,
        t_l: &Layout,
        f: &Self,
        f_l: &Layout,
    ) -> Result<Self> {
        elementwise::where_cond(self, layout, t, t_l, f, f_l)
    }

    fn conv1d(
        &self,
        l: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ParamsConv1D,
    ) -> Result<Self> {
        conv::conv1d(self, l, kernel, kernel_l, params)
    }

    fn conv_transpose1d(
        &self,
        l: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ParamsConvTranspose1D,
    ) -> Result<Self> {
        conv::conv_transpose1d(self, l, kernel, kernel_l, params)
    }

    fn conv2d(
        &self,
        l: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ParamsConv2D,
    ) -> Result<Self> {
        conv::conv2d(self, l, kernel, kernel_l, params)
    }

    fn conv_transpose2d(
        &self,
        l: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ParamsConvTranspose2D,
    ) -> Result<Self> {
        conv::conv_transpose2d(self, l, kernel, kernel_l, params)
    }

    fn avg_pool2d(&self, layout: &Layout, k: (usize, usize), st: (usize, usize)) -> Result<Self> {
        pool::avg_pool2d(self, layout, k, st)
    }

    fn max_pool2d(&self, layout: &Layout, k: (usize, usize), st: (usize, usize)) -> Result<Self> {
        pool::max_pool2d(self, layout, k, st)
    }

    fn upsample_nearest1d(&self, layout: &Layout, l_out: usize) -> Result<Self> {
        pool::upsample_nearest1d(self, layout, l_out)
    }

    fn upsample_nearest2d(&self, layout: &Layout, h_out: usize, w_out: usize) -> Result<Self> {
        pool::upsample_nearest2d(self, layout, h_out, w_out)
    }

    fn upsample_bilinear2d(
        &self,
        layout: &Layout,
        h_out: usize,
        w_out: usize,
        align_corners: bool,
        scale_h: Option<f64>,
        scale_w: Option<f64>,
    ) -> Result<Self> {
        pool::upsample_bilinear2d(self, layout, h_out, w_out, align_corners, scale_h, scale_w)
    }

    fn gather(&self, l: &Layout, ids: &Self, ids_l: &Layout, dim: usize) -> Result<Self> {
        index::gather(self, l, ids, ids_l, dim)
    }

    fn scatter_set(
        &mut self,
        l: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<()> {
        index::scatter_set(self, l, ids, ids_l, src, src_l, dim)
    }

    fn scatter_add_set(
        &mut self,
        l: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<()> {
        index::scatter_add_set(self, l, ids, ids_l, src, src_l, dim)
    }

    fn index_select(&self, ids: &Self, l: &Layout, ids_l: &Layout, dim: usize) -> Result<Self> {
        index::index_select(self, ids, l, ids_l, dim)
    }

    /// A new contiguous copy of `self` (through `l`) with `src` accumulated at `ids` along `dim`.
    fn index_add(
        &self,
        l: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<Self> {
        index::index_add(self, l, ids, ids_l, src, src_l, dim)
    }

    fn matmul(
        &self,
        rhs: &Self,
        bmnk: (usize, usize, usize, usize),
        lhs_l: &Layout,
        rhs_l: &Layout,
    ) -> Result<Self> {
        matmul::matmul(self, rhs, bmnk, lhs_l, rhs_l)
    }

    fn copy_strided_src(&self, dst: &mut Self, dst_offset: usize, src_l: &Layout) -> Result<()> {
        copy::copy_strided_src(self, dst, dst_offset, src_l)
    }

    fn copy2d(
        &self,
        dst: &mut Self,
        d1: usize,
        d2: usize,
        src_s: usize,
        dst_s: usize,
        src_o: usize,
        dst_o: usize,
    ) -> Result<()> {
        copy::copy2d(self, dst, d1, d2, src_s, dst_s, src_o, dst_o)
    }

    fn const_set(&mut self, value: Scalar, layout: &Layout) -> Result<()> {
        copy::const_set(self, value, layout)
    }
}

/// The storage dtypes of the kernels that take f32, f16 and bf16: their buffer in a
/// [`RocmStorageSlice`], and back.
pub(crate) trait FloatBuffer: KernelDType {
    /// The buffer of `s` when it holds this dtype.
    fn buffer(s: &RocmStorageSlice) -> Option<&DeviceBuffer<Self>>;
    /// `b` as a storage slice.
    fn wrap(b: DeviceBuffer<Self>) -> RocmStorageSlice;
}

macro_rules! float_buffer {
    ($($t:ty => $v:ident),*) => {$(
        impl FloatBuffer for $t {
            fn buffer(s: &RocmStorageSlice) -> Option<&DeviceBuffer<Self>> {
                match s {
                    RocmStorageSlice::$v(b) => Some(b),
                    _ => None,
                }
            }
            fn wrap(b: DeviceBuffer<Self>) -> RocmStorageSlice {
                RocmStorageSlice::$v(b)
            }
        }
    )*};
}
float_buffer!(bf16 => BF16, f16 => F16, f32 => F32);
