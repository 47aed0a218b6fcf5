//! [`RocmDevice`]: candle's `BackendDevice` over a hip-core device.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use candle_core::backend::BackendDevice;
use candle_core::{CpuStorage, CpuStorageRef, DType, DeviceLocation, Result, Shape, WithDType};
use hip_core::{DeviceBuffer, DeviceRepr, Stream};
use parking_lot::Mutex;

use rocm_kernels::indexing::IndexErrorFlag;
use rocm_kernels::KernelDType;

use crate::error::{hip_err, kernel_err, RocmError, DUMMY_REASON};
use crate::quantized::{ActivationKey, QuantizedGemmPlan, QuantizedMatvec, RoundedActivations};
use crate::storage::{RocmStorage, RocmStorageSlice};

/// The seed a new device starts with (the same default as candle's CUDA backend).
pub const DEFAULT_SEED: u64 = 299_792_458;

/// A GPU as a Candle backend device.
///
/// Holds the hip-core device (whose caching allocator serves every buffer), the stream all of
/// this backend's work on the device is queued on (the device's default stream, shared by every
/// `RocmDevice` of the same ordinal, so that storages from different handles never need
/// cross-stream synchronisation), the random-number seed and offset, and the error flag of the
/// indexing kernels. Cheap to clone: clones share the seed, the offset and the flag.
///
/// ## Out-of-range indices
/// The indexing kernels (index_select, gather, scatter_set, scatter_add_set, index_add) cannot
/// fail a launch: an out-of-range index is skipped (nothing read or written out of bounds) and
/// recorded in a device-side [`IndexErrorFlag`] owned by the device (created on the first
/// indexing op, bound to the device's stream, first error wins). `to_cpu_storage` and
/// `synchronize` read and clear that flag first, and a recorded error becomes candle's
/// [`candle_core::Error::InvalidIndex`] `{ op, index, size }` (`op` is the kernel's name:
/// `index_select`, `gather`, `scatter`, `scatter_add`, `index_add`), or, for a negative index
/// (which `InvalidIndex`'s `usize` cannot hold), a [`RocmError::Layout`] naming the op, index
/// and size. The error is reported once, by the first host read or synchronization after it;
/// later ops run normally. The flag belongs to the device, not to a thread: when several host
/// threads share a device, the error goes to whichever of them reads or synchronizes next.
///
/// ## Random numbers
/// `rand_uniform`/`rand_normal` draw from a counter-based generator (Philox4x32-10): element `i`
/// of a call is stream index `offset + i` under the device's seed, and every call advances the
/// shared offset by its element count, so successive calls give fresh numbers and
/// [`set_seed`](BackendDevice::set_seed) (which also resets the offset to 0) reproduces a
/// sequence.
/// Cloning shares the device (one reference count: Candle asks a storage for its device
/// several times per op).
#[derive(Clone)]
pub struct RocmDevice {
    state: Arc<DeviceState>,
}

/// What a [`RocmDevice`] and its clones share.
struct DeviceState {
    device: hip_core::Device,
    stream: Stream,
    seed: Mutex<u64>,
    rng_offset: AtomicU64,
    index_flag: OnceLock<IndexErrorFlag>,
    libraries: crate::blas::Libraries,
    /// The quantized matrix-vector kernel ([`QuantizedMatvec`] as its `u8` code).
    matvec_kind: AtomicU8,
    /// How quantized prefill products are split.
    qgemm_plan: Mutex<QuantizedGemmPlan>,
    /// A second stream for work that overlaps the main stream's (created on first use; ordered
    /// against the main stream by events only).
    side_stream: OnceLock<std::result::Result<Stream, String>>,
    /// The last activations rounded for the integer matrix-vector product, for the next
    /// product of the same contents (quantized/activations.rs).
    rounded_activations: Mutex<Option<Arc<RoundedActivations>>>,
    /// Whether a one-launch integer matrix-vector product has run here: only then does a
    /// one-row swiglu also round its result for the next product (fused.rs), so that models
    /// without quantized weights never load the quantized kernels for it.
    ran_integer_matvec: AtomicBool,
    /// Whether a one-row residual add and rms_norm run inside the product that reads them
    /// (`QMatMul::ext_rms_norm_forward`, quantized/normed.rs).
    norm_in_matvec: AtomicBool,
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
            state: Arc::new(DeviceState {
                stream: device.default_stream(),
                device,
                seed: Mutex::new(DEFAULT_SEED),
                rng_offset: AtomicU64::new(0),
                index_flag: OnceLock::new(),
                libraries: Default::default(),
                matvec_kind: AtomicU8::new(QuantizedMatvec::default().code()),
                qgemm_plan: Default::default(),
                side_stream: OnceLock::new(),
                rounded_activations: Mutex::new(None),
                ran_integer_matvec: AtomicBool::new(false),
                norm_in_matvec: AtomicBool::new(true),
            }),
        }
    }

    /// Chooses the matrix-vector kernel of quantized matmuls with up to
    /// [`MATVEC_MAX_ROWS`](rocm_kernels::quantized::MATVEC_MAX_ROWS) activation rows on this
    /// device and its clones (every tensor on it); prefill always dequantizes and runs a GEMM.
    pub fn set_quantized_matvec(&self, kind: QuantizedMatvec) {
        self.state.matvec_kind.store(kind.code(), Ordering::Relaxed);
    }

    /// The current [`QuantizedMatvec`] choice of this device.
    pub fn quantized_matvec(&self) -> QuantizedMatvec {
        QuantizedMatvec::from_code(self.state.matvec_kind.load(Ordering::Relaxed))
    }

    /// Whether one activation row's residual add and rms_norm run inside the quantized product
    /// that reads the norm (candle's `QMatMul::ext_rms_norm_forward`, one launch instead of two;
    /// on by default), on this device and its clones. Off, the caller runs them as separate ops.
    pub fn set_norm_in_matvec(&self, on: bool) {
        self.state.norm_in_matvec.store(on, Ordering::Relaxed);
    }

    /// See [`RocmDevice::set_norm_in_matvec`].
    pub fn norm_in_matvec(&self) -> bool {
        self.state.norm_in_matvec.load(Ordering::Relaxed)
    }

    /// Chooses how quantized matmuls with more than
    /// [`MATVEC_MAX_ROWS`](rocm_kernels::quantized::MATVEC_MAX_ROWS) activation rows are split
    /// into dequantize + GEMM chunks on this device and its clones.
    pub fn set_quantized_gemm_plan(&self, plan: QuantizedGemmPlan) {
        *self.state.qgemm_plan.lock() = plan;
    }

    /// The current [`QuantizedGemmPlan`] of this device.
    pub fn quantized_gemm_plan(&self) -> QuantizedGemmPlan {
        *self.state.qgemm_plan.lock()
    }

    /// The device's side stream (created on first use), for work that overlaps the main
    /// stream's; callers order it against [`RocmDevice::stream`] with events.
    pub(crate) fn side_stream(&self, op: &str) -> Result<Stream> {
        self.state
            .side_stream
            .get_or_init(|| self.state.device.create_stream().map_err(|e| e.to_string()))
            .clone()
            .map_err(|e| RocmError::library(op, "HIP (creating a side stream)", e).into())
    }

    /// The kept rounded activations when they were computed from exactly `key`.
    pub(crate) fn rounded_activations(
        &self,
        key: &ActivationKey,
    ) -> Option<Arc<RoundedActivations>> {
        self.state
            .rounded_activations
            .lock()
            .as_ref()
            .filter(|r| r.key == Some(*key))
            .cloned()
    }

    /// Records that a one-launch integer matrix-vector product ran on this device.
    pub(crate) fn note_integer_matvec(&self) {
        self.state.ran_integer_matvec.store(true, Ordering::Relaxed);
    }

    /// Whether a one-launch integer matrix-vector product has run on this device.
    pub(crate) fn has_run_integer_matvec(&self) -> bool {
        self.state.ran_integer_matvec.load(Ordering::Relaxed)
    }

    /// Keeps `rounded` for the next product of the same activations (replacing the last).
    pub(crate) fn keep_rounded_activations(&self, rounded: Arc<RoundedActivations>) {
        *self.state.rounded_activations.lock() = Some(rounded);
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.state.device.ordinal()
    }

    /// The underlying hip-core device.
    pub fn hip_device(&self) -> hip_core::Device {
        self.state.device
    }

    /// The device's vendor-library handles and settings.
    pub(crate) fn libraries(&self) -> &crate::blas::Libraries {
        &self.state.libraries
    }

    /// The stream this backend queues its work on.
    pub fn stream(&self) -> &Stream {
        &self.state.stream
    }

    /// Allocates `len` elements on the backend's stream (contents unspecified).
    pub(crate) fn alloc<T: DeviceRepr>(&self, op: &str, len: usize) -> Result<DeviceBuffer<T>> {
        self.state.stream.alloc::<T>(len).map_err(hip_err(op))
    }

    fn alloc_zeroed<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        self.state
            .stream
            .alloc_zeroed::<T>(len)
            .map_err(hip_err("zeros"))
    }

    /// A device copy of host data, ordered on the backend's stream. Small data (masks, scalars,
    /// ids: up to [`Stream::MAX_ASYNC_UPLOAD_BYTES`]) goes through hip-core's pinned staging
    /// ring without making the host wait for the GPU; larger data is copied synchronously.
    pub(crate) fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        self.state
            .stream
            .alloc_from_host_async(data)
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

    /// The indexing kernels' error flag on the backend's stream (created on first use).
    pub(crate) fn index_flag(&self) -> Result<&IndexErrorFlag> {
        if let Some(flag) = self.state.index_flag.get() {
            return Ok(flag);
        }
        let flag =
            IndexErrorFlag::new(&self.state.stream).map_err(kernel_err("indexing error flag"))?;
        // Another clone may have won the race; either flag is bound to the same stream.
        let _ = self.state.index_flag.set(flag);
        match self.state.index_flag.get() {
            Some(flag) => Ok(flag),
            None => {
                Err(RocmError::layout("indexing error flag", "could not be initialised").into())
            }
        }
    }

    /// Reads and clears the indexing kernels' error flag (waiting for the stream when the flag
    /// exists): a recorded out-of-range index becomes a typed error naming the op, the index and
    /// the dim size (see the type's docs). Called by `to_cpu_storage` and `synchronize`.
    pub fn check_index_errors(&self) -> Result<()> {
        let Some(flag) = self.state.index_flag.get() else {
            return Ok(());
        };
        let Some(e) = flag
            .take()
            .map_err(kernel_err("checking the indexing error flag"))?
        else {
            return Ok(());
        };
        Err(crate::error::index_error(e))
    }

    /// Fills a new buffer of `n` elements with `fill(stream, dst, seed, offset)`, advancing the
    /// device's random offset by `n`.
    fn random_buf<T: KernelDType>(
        &self,
        op: &str,
        n: usize,
        fill: impl FnOnce(
            &Stream,
            &mut hip_core::DeviceSliceMut<'_, T>,
            u64,
            u64,
        ) -> rocm_kernels::Result<()>,
    ) -> Result<DeviceBuffer<T>> {
        let mut out = self.alloc::<T>(op, n)?;
        let seed = *self.state.seed.lock();
        let offset = self.state.rng_offset.fetch_add(n as u64, Ordering::Relaxed);
        fill(&self.state.stream, &mut out.as_mut_slice(), seed, offset).map_err(kernel_err(op))?;
        Ok(out)
    }

    fn random(&self, op: &str, shape: &Shape, dtype: DType, a: f64, b: f64) -> Result<RocmStorage> {
        use rocm_kernels::random::{rand_normal, rand_uniform};
        let n = shape.elem_count();
        let normal = op == "rand_normal";
        macro_rules! gen {
            ($variant:ident, $t:ty) => {
                RocmStorageSlice::$variant(self.random_buf::<$t>(op, n, |s, d, seed, off| {
                    if normal {
                        rand_normal(s, d, seed, off, a, b)
                    } else {
                        rand_uniform(s, d, seed, off, a, b)
                    }
                })?)
            };
        }
        let slice = match dtype {
            DType::U8 => gen!(U8, u8),
            DType::U32 => gen!(U32, u32),
            DType::I16 => gen!(I16, i16),
            DType::I32 => gen!(I32, i32),
            DType::I64 => gen!(I64, i64),
            DType::BF16 => gen!(BF16, half::bf16),
            DType::F16 => gen!(F16, half::f16),
            DType::F32 => gen!(F32, f32),
            DType::F64 => gen!(F64, f64),
            DType::F8E4M3 => {
                return Err(RocmError::not_implemented(
                    op,
                    dtype,
                    "random numbers are generated in bf16, f16, f32 and f64 on ROCm; draw f32 \
                     and cast to f8e4m3",
                )
                .into())
            }
            other => return Err(dummy(op, other)),
        };
        Ok(self.storage(slice))
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
            self.state.device.properties().name,
            self.state.device.arch()
        )
    }
}

impl BackendDevice for RocmDevice {
    type Storage = RocmStorage;

    fn new(ordinal: usize) -> Result<Self> {
        Self::with_ordinal(ordinal)
    }

    /// With the `tensor` feature (patched Candle): `DeviceLocation::Ext { backend: "rocm",
    /// gpu_id: ordinal }`.
    ///
    /// Without it, `DeviceLocation::Cuda { gpu_id: ordinal }`: candle-core 0.11.1's
    /// `DeviceLocation` is a closed enum (`Cpu`, `Cuda`, `Metal`) with no variant for an
    /// out-of-tree device, and `Cuda` is the one that carries a GPU ordinal.
    fn location(&self) -> DeviceLocation {
        #[cfg(feature = "tensor")]
        return DeviceLocation::Ext {
            backend: crate::tensor::BACKEND_NAME,
            gpu_id: self.ordinal(),
        };
        #[cfg(not(feature = "tensor"))]
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

    /// Uniform values in `[lo, up)` (float dtypes; integers are a typed `Unsupported` error).
    fn rand_uniform(&self, shape: &Shape, dtype: DType, lo: f64, up: f64) -> Result<RocmStorage> {
        self.random("rand_uniform", shape, dtype, lo, up)
    }

    /// Normal values (float dtypes; integers are a typed `Unsupported` error).
    fn rand_normal(&self, shape: &Shape, dtype: DType, mean: f64, std: f64) -> Result<RocmStorage> {
        self.random("rand_normal", shape, dtype, mean, std)
    }

    /// Sets the seed and resets the random offset, so the same seed reproduces the same
    /// sequence of random tensors.
    fn set_seed(&self, seed: u64) -> Result<()> {
        let mut guard = self.state.seed.lock();
        *guard = seed;
        self.state.rng_offset.store(0, Ordering::Relaxed);
        Ok(())
    }

    fn get_current_seed(&self) -> Result<u64> {
        Ok(*self.state.seed.lock())
    }

    /// Waits for the stream, then reports an out-of-range index recorded by an indexing op
    /// since the last check (see the type's docs).
    fn synchronize(&self) -> Result<()> {
        self.state
            .stream
            .synchronize()
            .map_err(hip_err("synchronizing the ROCm device"))?;
        self.check_index_errors()
    }
}
