//! [`RocmDevice`]: candle's `BackendDevice` over a hip-core device.

use std::sync::Arc;

use candle_core::backend::BackendDevice;
use candle_core::{CpuStorage, CpuStorageRef, DType, DeviceLocation, Result, Shape, WithDType};
use hip_core::{DeviceBuffer, DeviceRepr, Stream};
use parking_lot::Mutex;

use crate::error::{hip_err, RocmError, DUMMY_REASON};
use crate::storage::{RocmStorage, RocmStorageSlice};

/// The seed a new device starts with (the same default as candle's CUDA backend).
pub const DEFAULT_SEED: u64 = 299_792_458;

/// A GPU as a Candle backend device.
///
/// Holds the hip-core device (whose caching allocator serves every buffer), the stream all of
/// this backend's work on the device is queued on (the device's default stream, shared by every
/// `RocmDevice` of the same ordinal, so that storages from different handles never need
/// cross-stream synchronisation), and the random-number seed. Cheap to clone: clones share the
/// seed.
#[derive(Clone)]
pub struct RocmDevice {
    device: hip_core::Device,
    stream: Stream,
    seed: Arc<Mutex<u64>>,
}

impl RocmDevice {
    /// The device with this ordinal (as [`BackendDevice::new`]).
    pub fn with_ordinal(ordinal: usize) -> Result<Self> {
        let device = hip_core::Device::new(ordinal).map_err(hip_err("opening the ROCm device"))?;
        Ok(Self::from_hip_device(device))
    }

    /// Wraps an already opened hip-core device.
    pub fn from_hip_device(device: hip_core::Device) -> Self {
        RocmDevice {
            stream: device.default_stream(),
            device,
            seed: Arc::new(Mutex::new(DEFAULT_SEED)),
        }
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.device.ordinal()
    }

    /// The underlying hip-core device.
    pub fn hip_device(&self) -> hip_core::Device {
        self.device
    }

    /// The stream this backend queues its work on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Allocates `len` elements on the backend's stream (contents unspecified).
    pub(crate) fn alloc<T: DeviceRepr>(&self, op: &str, len: usize) -> Result<DeviceBuffer<T>> {
        self.stream.alloc::<T>(len).map_err(hip_err(op))
    }

    fn alloc_zeroed<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        self.stream.alloc_zeroed::<T>(len).map_err(hip_err("zeros"))
    }

    fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        self.stream
            .alloc_from_host(data)
            .map_err(hip_err("copying host data to the device"))
    }

    fn storage(&self, slice: RocmStorageSlice) -> RocmStorage {
        RocmStorage::new(slice, self.clone())
    }

    fn upload_ref(&self, data: CpuStorageRef<'_>) -> Result<RocmStorage> {
        let slice = match data {
            CpuStorageRef::U8(v) => RocmStorageSlice::U8(self.upload(v)?),
            CpuStorageRef::U32(v) => RocmStorageSlice::U32(self.upload(v)?),
            CpuStorageRef::I16(v) => RocmStorageSlice::I16(self.upload(v)?),
            CpuStorageRef::I32(v) => RocmStorageSlice::I32(self.upload(v)?),
            CpuStorageRef::I64(v) => RocmStorageSlice::I64(self.upload(v)?),
            CpuStorageRef::BF16(v) => RocmStorageSlice::BF16(self.upload(v)?),
            CpuStorageRef::F16(v) => RocmStorageSlice::F16(self.upload(v)?),
            CpuStorageRef::F32(v) => RocmStorageSlice::F32(self.upload(v)?),
            CpuStorageRef::F64(v) => RocmStorageSlice::F64(self.upload(v)?),
            CpuStorageRef::F8E4M3(v) => {
                let bytes: Vec<u8> = v.iter().map(|x| x.to_bits()).collect();
                RocmStorageSlice::F8E4M3(self.upload(&bytes)?)
            }
            CpuStorageRef::F6E2M3(_) => return Err(dummy("copy to device", DType::F6E2M3)),
            CpuStorageRef::F6E3M2(_) => return Err(dummy("copy to device", DType::F6E3M2)),
            CpuStorageRef::F4(_) => return Err(dummy("copy to device", DType::F4)),
            CpuStorageRef::F8E8M0(_) => return Err(dummy("copy to device", DType::F8E8M0)),
        };
        Ok(self.storage(slice))
    }

    fn random_not_implemented(op: &str, dtype: DType) -> candle_core::Error {
        RocmError::not_implemented(
            op,
            dtype,
            "no random-number kernel exists yet on ROCm (tracked by the kernels issue); \
             generate on the CPU and copy with Tensor::to_device meanwhile",
        )
        .into()
    }
}

fn dummy(op: &str, dtype: DType) -> candle_core::Error {
    RocmError::unsupported(op, dtype, DUMMY_REASON).into()
}

fn to_cpu_ref(s: &CpuStorage) -> CpuStorageRef<'_> {
    match s {
        CpuStorage::U8(v) => CpuStorageRef::U8(v),
        CpuStorage::U32(v) => CpuStorageRef::U32(v),
        CpuStorage::I16(v) => CpuStorageRef::I16(v),
        CpuStorage::I32(v) => CpuStorageRef::I32(v),
        CpuStorage::I64(v) => CpuStorageRef::I64(v),
        CpuStorage::BF16(v) => CpuStorageRef::BF16(v),
        CpuStorage::F16(v) => CpuStorageRef::F16(v),
        CpuStorage::F32(v) => CpuStorageRef::F32(v),
        CpuStorage::F64(v) => CpuStorageRef::F64(v),
        CpuStorage::F8E4M3(v) => CpuStorageRef::F8E4M3(v),
        CpuStorage::F6E2M3(v) => CpuStorageRef::F6E2M3(v),
        CpuStorage::F6E3M2(v) => CpuStorageRef::F6E3M2(v),
        CpuStorage::F4(v) => CpuStorageRef::F4(v),
        CpuStorage::F8E8M0(v) => CpuStorageRef::F8E8M0(v),
    }
}

impl std::fmt::Debug for RocmDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RocmDevice({}, {}, {})",
            self.ordinal(),
            self.device.properties().name,
            self.device.arch()
        )
    }
}

impl BackendDevice for RocmDevice {
    type Storage = RocmStorage;

    fn new(ordinal: usize) -> Result<Self> {
        Self::with_ordinal(ordinal)
    }

    /// `DeviceLocation::Cuda { gpu_id: ordinal }`.
    ///
    /// candle-core 0.11.1's `DeviceLocation` is a closed enum (`Cpu`, `Cuda`, `Metal`) with no
    /// variant for ROCm, and `Cuda` is the one that carries a GPU ordinal. The Tensor-level
    /// patch (a later issue) adds a ROCm variant; until then this is what callers see.
    fn location(&self) -> DeviceLocation {
        DeviceLocation::Cuda {
            gpu_id: self.ordinal(),
        }
    }

    fn same_device(&self, other: &Self) -> bool {
        self.ordinal() == other.ordinal()
    }

    fn zeros_impl(&self, shape: &Shape, dtype: DType) -> Result<RocmStorage> {
        let n = shape.elem_count();
        let slice = match dtype {
            DType::U8 => RocmStorageSlice::U8(self.alloc_zeroed(n)?),
            DType::U32 => RocmStorageSlice::U32(self.alloc_zeroed(n)?),
            DType::I16 => RocmStorageSlice::I16(self.alloc_zeroed(n)?),
            DType::I32 => RocmStorageSlice::I32(self.alloc_zeroed(n)?),
            DType::I64 => RocmStorageSlice::I64(self.alloc_zeroed(n)?),
            DType::BF16 => RocmStorageSlice::BF16(self.alloc_zeroed(n)?),
            DType::F16 => RocmStorageSlice::F16(self.alloc_zeroed(n)?),
            DType::F32 => RocmStorageSlice::F32(self.alloc_zeroed(n)?),
            DType::F64 => RocmStorageSlice::F64(self.alloc_zeroed(n)?),
            // All-zero bits are +0.0 in f8e4m3.
            DType::F8E4M3 => RocmStorageSlice::F8E4M3(self.alloc_zeroed(n)?),
            other => return Err(dummy("zeros", other)),
        };
        Ok(self.storage(slice))
    }

    unsafe fn alloc_uninit(&self, shape: &Shape, dtype: DType) -> Result<RocmStorage> {
        // Device memory of plain-data types: any bytes are a valid value, so this is safe on
        // our side; candle's contract is only that the caller writes the data before reading it.
        let n = shape.elem_count();
        let op = "alloc_uninit";
        let slice = match dtype {
            DType::U8 => RocmStorageSlice::U8(self.alloc(op, n)?),
            DType::U32 => RocmStorageSlice::U32(self.alloc(op, n)?),
            DType::I16 => RocmStorageSlice::I16(self.alloc(op, n)?),
            DType::I32 => RocmStorageSlice::I32(self.alloc(op, n)?),
            DType::I64 => RocmStorageSlice::I64(self.alloc(op, n)?),
            DType::BF16 => RocmStorageSlice::BF16(self.alloc(op, n)?),
            DType::F16 => RocmStorageSlice::F16(self.alloc(op, n)?),
            DType::F32 => RocmStorageSlice::F32(self.alloc(op, n)?),
            DType::F64 => RocmStorageSlice::F64(self.alloc(op, n)?),
            DType::F8E4M3 => RocmStorageSlice::F8E4M3(self.alloc(op, n)?),
            other => return Err(dummy(op, other)),
        };
        Ok(self.storage(slice))
    }

    fn storage_from_slice<T: WithDType>(&self, data: &[T]) -> Result<RocmStorage> {
        self.upload_ref(T::cpu_storage_ref(data))
    }

    fn storage_from_cpu_storage(&self, s: &CpuStorage) -> Result<RocmStorage> {
        self.upload_ref(to_cpu_ref(s))
    }

    fn storage_from_cpu_storage_owned(&self, s: CpuStorage) -> Result<RocmStorage> {
        self.upload_ref(to_cpu_ref(&s))
    }

    fn rand_uniform(&self, _: &Shape, dtype: DType, _: f64, _: f64) -> Result<RocmStorage> {
        Err(Self::random_not_implemented("rand_uniform", dtype))
    }

    fn rand_normal(&self, _: &Shape, dtype: DType, _: f64, _: f64) -> Result<RocmStorage> {
        Err(Self::random_not_implemented("rand_normal", dtype))
    }

    fn set_seed(&self, seed: u64) -> Result<()> {
        *self.seed.lock() = seed;
        Ok(())
    }

    fn get_current_seed(&self) -> Result<u64> {
        Ok(*self.seed.lock())
    }

    fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(hip_err("synchronizing the ROCm device"))
    }
}
