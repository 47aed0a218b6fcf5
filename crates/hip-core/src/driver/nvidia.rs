//! The `nvidia` platform: a thin adapter from the [`Driver`] interface to the CUDA driver API
//! (`libcuda`) and NVRTC (`libnvrtc`).
//!
//! * Both libraries are opened at run time through our own function tables ([`api`]), using
//!   cudarc's raw CUDA types only; a missing library is [`Error::LibraryNotFound`], a missing
//!   function is [`Error::MissingSymbol`] when called, and nothing panics.
//! * Each device's *primary context* stands for the HIP device: it is retained on first use and
//!   kept for the life of the process, as the CUDA runtime does. [`Driver::set_current`] makes it
//!   current on the calling thread; a thread-local cache skips the driver call when it already is.
//! * NVRTC is loaded on the first [`Driver::rtc_compile`] / [`Driver::rtc_version`], so a machine
//!   without it can still load precompiled cubins. HIP sources compile unchanged ([`rtc`]).

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::PathBuf;
use std::sync::OnceLock;

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdevice_attribute, CUevent, CUevent_flags, CUfunction,
    CUfunction_attribute, CUlaunchAttribute, CUlaunchAttributeID, CUlaunchAttributeValue,
    CUlaunchConfig, CUmodule, CUstream, CUstream_flags,
};
use parking_lot::Mutex;

use super::{
    DeviceProperties, DevicePtr, Driver, FunctionAttributes, Platform, RawEvent, RawFunction,
    RawModule, RawStream,
};
use crate::error::{Error, Result};
use crate::loader::LibrarySpec;

mod api;
mod rtc;

use api::{
    call, raw_call, CudaApi, NvrtcApi, CUDA_ERROR_NOT_READY, CUDA_ERROR_NO_DEVICE,
    CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
};

/// How to fix a missing CUDA library.
pub(crate) const CUDA_HINT: &str = "Install the NVIDIA driver (libcuda) and the CUDA toolkit (libnvrtc), or point CUDA_PATH at an existing CUDA installation; on AMD GPUs set HIP_PLATFORM=amd";

const CUDA_DESCRIPTION: &str = "the CUDA driver (libcuda)";
const NVRTC_DESCRIPTION: &str = "the CUDA run-time compiler (libnvrtc)";

/// Where `libcuda` is looked for: the common driver directories, then the loader path.
fn cuda_spec() -> LibrarySpec {
    LibrarySpec {
        description: CUDA_DESCRIPTION,
        sonames: &["libcuda.so.1", "libcuda.so"],
        dirs: vec![
            PathBuf::from("/usr/lib/x86_64-linux-gnu"),
            PathBuf::from("/usr/local/nvidia/lib64"),
            PathBuf::from("/usr/lib64"),
        ],
        hint: CUDA_HINT,
    }
}

/// Where `libnvrtc` is looked for: `lib64` of `$CUDA_PATH`, `$CUDA_HOME`, `/usr/local/cuda`,
/// then the toolkit's target directory, then the loader path.
fn nvrtc_spec(cuda_path: Option<PathBuf>, cuda_home: Option<PathBuf>) -> LibrarySpec {
    LibrarySpec {
        description: NVRTC_DESCRIPTION,
        sonames: &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
        dirs: crate::loader::cuda_lib_dirs(cuda_path, cuda_home),
        hint: CUDA_HINT,
    }
}

/// The architecture name NVRTC takes for a compute capability: `(9, 0)` → `sm_90`.
fn sm_arch(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// A retained primary context.
#[derive(Clone, Copy)]
struct Context(CUcontext);

// SAFETY: a CUcontext is an opaque driver handle; the driver API is thread-safe and a primary
// context may be made current on any thread.
unsafe impl Send for Context {}

thread_local! {
    /// The primary context this thread last made current through [`NvidiaDriver::set_current`]
    /// (as an address; 0 for none). Primary contexts are per device and per process, so the cache
    /// stays right across driver instances; nothing else in hip-core changes the current context.
    static CURRENT_CONTEXT: Cell<usize> = const { Cell::new(0) };
}

/// The CUDA driver API behind the [`Driver`] interface.
pub(crate) struct NvidiaDriver {
    cu: CudaApi,
    /// Devices visible to this process (0 when `cuInit` found none).
    device_count: usize,
    /// Primary contexts, retained on first use, one slot per ordinal.
    contexts: Mutex<Vec<Option<Context>>>,
    /// NVRTC, opened on first use.
    nvrtc: OnceLock<Result<NvrtcApi>>,
}

/// Opens `libcuda` and initialises the driver. `CUDA_ERROR_NO_DEVICE` is not an error: the
/// driver loads and reports zero devices.
pub(crate) fn load() -> Result<Box<dyn Driver>> {
    Ok(Box::new(NvidiaDriver::load(cuda_spec())?))
}

impl NvidiaDriver {
    fn load(spec: LibrarySpec) -> Result<NvidiaDriver> {
        let cu = CudaApi::new(spec.open()?, spec.description);
        // SAFETY: cuInit takes a flags word that must be 0.
        let status = unsafe { raw_call!(cu, cuInit(0)) }?;
        let device_count = if status == CUDA_ERROR_NO_DEVICE {
            0
        } else {
            cu.check(status, cu.cuInit.name)?;
            let mut count: c_int = 0;
            // SAFETY: `count` is a valid out-pointer; the driver is initialised.
            unsafe { call!(cu, cuDeviceGetCount(&mut count)) }?;
            usize::try_from(count).unwrap_or(0)
        };
        Ok(NvidiaDriver {
            cu,
            device_count,
            contexts: Mutex::new(vec![None; device_count]),
            nvrtc: OnceLock::new(),
        })
    }

    fn check_ordinal(&self, ordinal: usize) -> Result<()> {
        if ordinal < self.device_count {
            Ok(())
        } else {
            Err(Error::InvalidDevice {
                ordinal,
                count: self.device_count,
            })
        }
    }

    /// The `CUdevice` of a valid ordinal.
    fn device(&self, ordinal: usize) -> Result<CUdevice> {
        self.check_ordinal(ordinal)?;
        let mut dev: CUdevice = 0;
        // SAFETY: `dev` is a valid out-pointer and `ordinal` is below cuDeviceGetCount.
        unsafe { call!(self.cu, cuDeviceGet(&mut dev, ordinal as c_int)) }?;
        Ok(dev)
    }

    /// The primary context of `ordinal`, retained on first use.
    fn primary_context(&self, ordinal: usize) -> Result<CUcontext> {
        self.check_ordinal(ordinal)?;
        let mut contexts = self.contexts.lock();
        if let Some(ctx) = contexts[ordinal] {
            return Ok(ctx.0);
        }
        let dev = self.device(ordinal)?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer and `dev` a valid device. The retained reference is
        // never released: primary contexts live as long as the process.
        unsafe { call!(self.cu, cuDevicePrimaryCtxRetain(&mut ctx, dev)) }?;
        contexts[ordinal] = Some(Context(ctx));
        Ok(ctx)
    }

    fn attribute(&self, dev: CUdevice, attribute: CUdevice_attribute) -> Result<i32> {
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid out-pointer and `dev` a valid device.
        unsafe { call!(self.cu, cuDeviceGetAttribute(&mut value, attribute, dev)) }?;
        Ok(value)
    }

    /// `cuFuncGetAttribute` of a live function.
    ///
    /// # Safety
    /// `function` is a live `CUfunction`.
    unsafe fn function_attribute(
        &self,
        function: CUfunction,
        attribute: CUfunction_attribute,
    ) -> Result<i32> {
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid out-pointer; the caller guarantees `function` is live.
        unsafe { call!(self.cu, cuFuncGetAttribute(&mut value, attribute, function)) }?;
        Ok(value)
    }

    fn nvrtc(&self) -> Result<&NvrtcApi> {
        self.nvrtc
            .get_or_init(|| {
                let spec = nvrtc_spec(
                    std::env::var_os("CUDA_PATH").map(PathBuf::from),
                    std::env::var_os("CUDA_HOME").map(PathBuf::from),
                );
                Ok(NvrtcApi::new(spec.open()?, spec.description))
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// A non-negative driver integer as `u32` (negative values, which the driver never reports for
/// these attributes, become 0).
fn to_u32(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// A non-negative driver integer as `usize`.
fn to_usize(v: i32) -> usize {
    usize::try_from(v).unwrap_or(0)
}

/// Whether `err` is the CUDA driver's `CUDA_ERROR_OUT_OF_MEMORY` (not NVRTC's host-side one).
fn is_cuda_oom(err: &Error) -> bool {
    matches!(err, Error::Api { call, code, .. }
        if *code == CUDA_ERROR_OUT_OF_MEMORY && call.starts_with("cu"))
}

fn stream(s: RawStream) -> CUstream {
    s.0.cast()
}

fn event(e: RawEvent) -> CUevent {
    e.0.cast()
}

impl Driver for NvidiaDriver {
    fn platform(&self) -> Platform {
        Platform::Nvidia
    }

    fn runtime_version(&self) -> Result<i32> {
        let mut version: c_int = 0;
        // SAFETY: `version` is a valid out-pointer.
        unsafe { call!(self.cu, cuDriverGetVersion(&mut version)) }?;
        Ok(version)
    }

    fn device_count(&self) -> Result<usize> {
        Ok(self.device_count)
    }

    fn device_properties(&self, ordinal: usize) -> Result<DeviceProperties> {
        use CUdevice_attribute::*;
        let dev = self.device(ordinal)?;
        let mut name = [0 as c_char; 256];
        // SAFETY: `name` holds `name.len()` bytes; the driver writes a NUL-terminated string.
        unsafe {
            call!(
                self.cu,
                cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev)
            )
        }?;
        // The driver terminates the name; the last byte stays 0 in any case.
        name[name.len() - 1] = 0;
        // SAFETY: `name` is NUL-terminated (see above) and outlives the borrow.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut total_memory = 0usize;
        // SAFETY: `total_memory` is a valid out-pointer and `dev` a valid device.
        unsafe { call!(self.cu, cuDeviceTotalMem_v2(&mut total_memory, dev)) }?;
        let a = |attribute| self.attribute(dev, attribute);
        let compute_capability = (
            a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        Ok(DeviceProperties {
            name,
            arch_name: sm_arch(compute_capability.0, compute_capability.1),
            compute_capability,
            warp_size: to_u32(a(CU_DEVICE_ATTRIBUTE_WARP_SIZE)?),
            multiprocessor_count: to_u32(a(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?),
            total_memory,
            max_threads_per_block: to_u32(a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?),
            max_block_dim: [
                to_u32(a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?),
                to_u32(a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?),
                to_u32(a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?),
            ],
            max_grid_dim: [
                to_u32(a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?),
                to_u32(a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?),
                to_u32(a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?),
            ],
            shared_memory_per_block: to_usize(a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?),
            pci_bus_id: a(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        })
    }

    fn set_current(&self, ordinal: usize) -> Result<()> {
        let ctx = self.primary_context(ordinal)?;
        if CURRENT_CONTEXT.with(Cell::get) == ctx as usize {
            return Ok(());
        }
        // SAFETY: `ctx` is a retained primary context, never released.
        unsafe { call!(self.cu, cuCtxSetCurrent(ctx)) }?;
        CURRENT_CONTEXT.with(|c| c.set(ctx as usize));
        Ok(())
    }

    fn device_synchronize(&self) -> Result<()> {
        crate::blocking::note_blocking_call();
        // SAFETY: no arguments; acts on the current context.
        unsafe { call!(self.cu, cuCtxSynchronize()) }
    }

    fn mem_get_info(&self) -> Result<(usize, usize)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: two valid out-pointers.
        unsafe { call!(self.cu, cuMemGetInfo_v2(&mut free, &mut total)) }?;
        Ok((free, total))
    }

    fn can_access_peer(&self, ordinal: usize, peer: usize) -> Result<bool> {
        let dev = self.device(ordinal)?;
        let peer_dev = self.device(peer)?;
        // HIP answers 0 for a device and itself; CUDA would reject the pair.
        if ordinal == peer {
            return Ok(false);
        }
        let mut can: c_int = 0;
        // SAFETY: `can` is a valid out-pointer; both devices are valid.
        unsafe { call!(self.cu, cuDeviceCanAccessPeer(&mut can, dev, peer_dev)) }?;
        Ok(can != 0)
    }

    fn malloc(&self, bytes: usize) -> Result<DevicePtr> {
        let mut ptr = 0;
        // SAFETY: `ptr` is a valid out-pointer.
        unsafe { call!(self.cu, cuMemAlloc_v2(&mut ptr, bytes)) }?;
        Ok(DevicePtr(ptr))
    }

    fn is_out_of_memory(&self, err: &Error) -> bool {
        is_cuda_oom(err)
    }

    fn clear_last_error(&self) {
        // The CUDA driver API keeps no per-thread last error (cudaGetLastError is the runtime
        // API's), so there is nothing to clear.
    }

    unsafe fn free(&self, ptr: DevicePtr) -> Result<()> {
        // cuMemFree waits for the device (an implicit synchronisation).
        crate::blocking::note_blocking_call();
        // SAFETY: the caller guarantees `ptr` came from cuMemAlloc and is no longer in use.
        unsafe { call!(self.cu, cuMemFree_v2(ptr.0)) }
    }

    fn host_alloc(&self, bytes: usize) -> Result<*mut c_void> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer.
        unsafe { call!(self.cu, cuMemAllocHost_v2(&mut ptr, bytes)) }?;
        Ok(ptr)
    }

    unsafe fn host_free(&self, ptr: *mut c_void) -> Result<()> {
        // cuMemFreeHost waits for the device (an implicit synchronisation).
        crate::blocking::note_blocking_call();
        // SAFETY: the caller guarantees `ptr` came from cuMemAllocHost and is no longer in use.
        unsafe { call!(self.cu, cuMemFreeHost(ptr)) }
    }

    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const c_void,
        bytes: usize,
        s: RawStream,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges and the stream are valid until completion.
        unsafe { call!(self.cu, cuMemcpyHtoDAsync_v2(dst.0, src, bytes, stream(s))) }
    }

    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut c_void,
        src: DevicePtr,
        bytes: usize,
        s: RawStream,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges and the stream are valid until completion.
        unsafe { call!(self.cu, cuMemcpyDtoHAsync_v2(dst, src.0, bytes, stream(s))) }
    }

    unsafe fn memcpy_dtod_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        s: RawStream,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges and the stream are valid until completion.
        unsafe {
            call!(
                self.cu,
                cuMemcpyDtoDAsync_v2(dst.0, src.0, bytes, stream(s))
            )
        }
    }

    unsafe fn memcpy_peer_async(
        &self,
        dst: DevicePtr,
        dst_device: usize,
        src: DevicePtr,
        src_device: usize,
        bytes: usize,
        s: RawStream,
    ) -> Result<()> {
        let dst_ctx = self.primary_context(dst_device)?;
        let src_ctx = self.primary_context(src_device)?;
        // SAFETY: the contexts are retained primary contexts of the two devices; the caller
        // guarantees that the ranges belong to them and that the stream is live.
        unsafe {
            call!(
                self.cu,
                cuMemcpyPeerAsync(dst.0, dst_ctx, src.0, src_ctx, bytes, stream(s))
            )
        }
    }

    unsafe fn memset_async(
        &self,
        dst: DevicePtr,
        value: u8,
        bytes: usize,
        s: RawStream,
    ) -> Result<()> {
        // SAFETY: the caller guarantees the range and the stream are valid.
        unsafe { call!(self.cu, cuMemsetD8Async(dst.0, value, bytes, stream(s))) }
    }

    fn stream_create(&self) -> Result<RawStream> {
        let mut s: CUstream = std::ptr::null_mut();
        let flags = CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint;
        // SAFETY: `s` is a valid out-pointer.
        unsafe { call!(self.cu, cuStreamCreate(&mut s, flags)) }?;
        Ok(RawStream(s.cast()))
    }

    unsafe fn stream_destroy(&self, s: RawStream) -> Result<()> {
        // SAFETY: the caller guarantees `s` is live and unused afterwards.
        unsafe { call!(self.cu, cuStreamDestroy_v2(stream(s))) }
    }

    unsafe fn stream_synchronize(&self, s: RawStream) -> Result<()> {
        crate::blocking::note_blocking_call();
        // SAFETY: the caller guarantees `s` is live.
        unsafe { call!(self.cu, cuStreamSynchronize(stream(s))) }
    }

    unsafe fn stream_query(&self, s: RawStream) -> Result<bool> {
        // SAFETY: the caller guarantees `s` is live.
        let status = unsafe { raw_call!(self.cu, cuStreamQuery(stream(s))) }?;
        match status {
            CUDA_SUCCESS => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            _ => Err(self.cu.error(self.cu.cuStreamQuery.name, status)),
        }
    }

    unsafe fn stream_wait_event(&self, s: RawStream, e: RawEvent) -> Result<()> {
        // SAFETY: the caller guarantees both handles are live; flags must be 0.
        unsafe { call!(self.cu, cuStreamWaitEvent(stream(s), event(e), 0)) }
    }

    fn event_create(&self, timing: bool) -> Result<RawEvent> {
        let flags = if timing {
            CUevent_flags::CU_EVENT_DEFAULT
        } else {
            CUevent_flags::CU_EVENT_DISABLE_TIMING
        } as c_uint;
        let mut e: CUevent = std::ptr::null_mut();
        // SAFETY: `e` is a valid out-pointer.
        unsafe { call!(self.cu, cuEventCreate(&mut e, flags)) }?;
        Ok(RawEvent(e.cast()))
    }

    unsafe fn event_destroy(&self, e: RawEvent) -> Result<()> {
        // SAFETY: the caller guarantees `e` is live and unused afterwards.
        unsafe { call!(self.cu, cuEventDestroy_v2(event(e))) }
    }

    unsafe fn event_record(&self, e: RawEvent, s: RawStream) -> Result<()> {
        // SAFETY: the caller guarantees both handles are live.
        unsafe { call!(self.cu, cuEventRecord(event(e), stream(s))) }
    }

    unsafe fn event_synchronize(&self, e: RawEvent) -> Result<()> {
        crate::blocking::note_blocking_call();
        // SAFETY: the caller guarantees `e` is live.
        unsafe { call!(self.cu, cuEventSynchronize(event(e))) }
    }

    unsafe fn event_query(&self, e: RawEvent) -> Result<bool> {
        // SAFETY: the caller guarantees `e` is live.
        let status = unsafe { raw_call!(self.cu, cuEventQuery(event(e))) }?;
        match status {
            CUDA_SUCCESS => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            _ => Err(self.cu.error(self.cu.cuEventQuery.name, status)),
        }
    }

    unsafe fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: `ms` is a valid out-pointer; the caller guarantees both events are live.
        unsafe {
            call!(
                self.cu,
                cuEventElapsedTime_v2(&mut ms, event(start), event(end))
            )
        }?;
        Ok(ms)
    }

    fn module_load_data(&self, image: &[u8]) -> Result<RawModule> {
        if image.is_empty() {
            return Err(Error::invalid("module_load_data", "the image is empty"));
        }
        // A cubin or fatbin carries its own size; PTX is text that the driver reads up to a NUL,
        // so anything else gets a terminating NUL of its own.
        const ELF_MAGIC: &[u8] = b"\x7fELF";
        const FATBIN_MAGIC: &[u8] = &0xBA55_ED50u32.to_le_bytes();
        let owned;
        let bytes = if image.starts_with(ELF_MAGIC) || image.starts_with(FATBIN_MAGIC) {
            image
        } else {
            owned = [image, &[0u8]].concat();
            &owned[..]
        };
        let mut module: CUmodule = std::ptr::null_mut();
        // SAFETY: `module` is a valid out-pointer; `bytes` is a cubin/fatbin or NUL-terminated
        // text that stays alive for the call (the driver copies what it loads).
        unsafe {
            call!(
                self.cu,
                cuModuleLoadData(&mut module, bytes.as_ptr().cast::<c_void>())
            )
        }?;
        Ok(RawModule(module.cast()))
    }

    unsafe fn module_unload(&self, module: RawModule) -> Result<()> {
        // SAFETY: the caller guarantees `module` is live and no queued launch uses it.
        unsafe { call!(self.cu, cuModuleUnload(module.0.cast())) }
    }

    unsafe fn module_get_function(&self, module: RawModule, name: &CStr) -> Result<RawFunction> {
        let mut f: CUfunction = std::ptr::null_mut();
        // SAFETY: `f` is a valid out-pointer, `name` is NUL-terminated; the caller guarantees
        // `module` is live.
        unsafe {
            call!(
                self.cu,
                cuModuleGetFunction(&mut f, module.0.cast(), name.as_ptr())
            )
        }?;
        Ok(RawFunction(f.cast()))
    }

    unsafe fn function_allow_dynamic_shared(
        &self,
        function: RawFunction,
        bytes: u32,
    ) -> Result<()> {
        let bytes = c_int::try_from(bytes).map_err(|_| {
            Error::invalid(
                "Function::allow_dynamic_shared",
                format!("{bytes} bytes of shared memory"),
            )
        })?;
        // SAFETY: the caller guarantees `function` is live; the attribute takes a byte count.
        unsafe {
            call!(
                self.cu,
                cuFuncSetAttribute(
                    function.0.cast(),
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes
                )
            )
        }
    }

    unsafe fn function_attributes(&self, function: RawFunction) -> Result<FunctionAttributes> {
        use CUfunction_attribute::*;
        let f: CUfunction = function.0.cast();
        // SAFETY: the caller guarantees `function` is live.
        let a = |attribute| unsafe { self.function_attribute(f, attribute) };
        Ok(FunctionAttributes {
            max_threads_per_block: to_u32(a(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?),
            num_regs: to_u32(a(CU_FUNC_ATTRIBUTE_NUM_REGS)?),
            shared_size_bytes: to_usize(a(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?),
            local_size_bytes: to_usize(a(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?),
            const_size_bytes: to_usize(a(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)?),
        })
    }

    unsafe fn launch_kernel(
        &self,
        function: RawFunction,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        s: RawStream,
        params: *mut *mut c_void,
        overlap: bool,
    ) -> Result<()> {
        if overlap && self.cu.cuLaunchKernelEx.f.is_some() {
            let mut attribute = CUlaunchAttribute {
                id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                value: CUlaunchAttributeValue { pad: [0; 64] },
            };
            attribute.value.programmaticStreamSerializationAllowed = 1;
            let config = CUlaunchConfig {
                gridDimX: grid[0],
                gridDimY: grid[1],
                gridDimZ: grid[2],
                blockDimX: block[0],
                blockDimY: block[1],
                blockDimZ: block[2],
                sharedMemBytes: shared_mem_bytes,
                hStream: stream(s),
                attrs: &mut attribute,
                numAttrs: 1,
            };
            // SAFETY: as below; `config` and the attribute it points to outlive the call, and
            // the caller guarantees that the kernel waits for the previous kernels before it
            // touches what they write (the contract of an overlapped launch).
            return unsafe {
                call!(
                    self.cu,
                    cuLaunchKernelEx(&config, function.0.cast(), params, std::ptr::null_mut())
                )
            };
        }
        // SAFETY: the caller guarantees that `function` and the stream are live and that
        // `params` matches the kernel's parameters; `extra` is unused (null).
        unsafe {
            call!(
                self.cu,
                cuLaunchKernel(
                    function.0.cast(),
                    grid[0],
                    grid[1],
                    grid[2],
                    block[0],
                    block[1],
                    block[2],
                    shared_mem_bytes,
                    stream(s),
                    params,
                    std::ptr::null_mut(),
                )
            )
        }
    }

    fn rtc_compile(
        &self,
        program: &str,
        source: &str,
        arch: &str,
        options: &[String],
    ) -> Result<Vec<u8>> {
        rtc::compile(self.nvrtc()?, program, source, arch, options)
    }

    fn rtc_version(&self) -> Result<String> {
        rtc::version(self.nvrtc()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_name_from_compute_capability() {
        assert_eq!(sm_arch(9, 0), "sm_90");
        assert_eq!(sm_arch(8, 6), "sm_86");
        assert_eq!(sm_arch(10, 0), "sm_100");
        assert_eq!(sm_arch(12, 0), "sm_120");
    }

    #[test]
    fn error_names_fall_back_to_our_table() {
        assert_eq!(api::cuda_error_name(2), "CUDA_ERROR_OUT_OF_MEMORY");
        assert_eq!(api::cuda_error_name(600), "CUDA_ERROR_NOT_READY");
        assert_eq!(api::cuda_error_name(100), "CUDA_ERROR_NO_DEVICE");
        assert_eq!(api::cuda_error_name(0), "CUDA_SUCCESS");
        assert_eq!(
            api::cuda_error_name(12345),
            "CUDA_ERROR_UNKNOWN_CODE(12345)"
        );
        assert_eq!(api::nvrtc_error_name(6), "NVRTC_ERROR_COMPILATION");
        assert_eq!(api::nvrtc_error_name(-1), "NVRTC_ERROR_UNKNOWN_CODE(-1)");
        assert_eq!(
            api::status_message("CUDA_ERROR_OUT_OF_MEMORY", "CUDA_ERROR_"),
            "out of memory"
        );
        assert_eq!(
            api::status_message("NVRTC_ERROR_INVALID_OPTION", "NVRTC_ERROR_"),
            "invalid option"
        );
    }

    #[test]
    fn raw_codes_match_the_cuda_headers() {
        assert_eq!(CUDA_SUCCESS, 0);
        assert_eq!(CUDA_ERROR_OUT_OF_MEMORY, 2);
        assert_eq!(CUDA_ERROR_NO_DEVICE, 100);
        assert_eq!(CUDA_ERROR_NOT_READY, 600);
    }

    #[test]
    fn shim_maps_hip_spellings() {
        let rt = rtc::HIP_RUNTIME_SHIM;
        assert!(rt.contains("#define __HIP_PLATFORM_NVIDIA__ 1"));
        assert!(
            rt.contains("#define HIP_DYNAMIC_SHARED(type, name) extern __shared__ type name[];")
        );
        for (hip, cuda) in [
            ("__shfl(", "__shfl_sync("),
            ("__shfl_up(", "__shfl_up_sync("),
            ("__shfl_down(", "__shfl_down_sync("),
            ("__shfl_xor(", "__shfl_xor_sync("),
            ("__ballot(", "__ballot_sync("),
            ("__any(", "__any_sync("),
            ("__all(", "__all_sync("),
        ] {
            assert!(rt.contains(hip), "{hip} is not defined");
            assert!(rt.contains(cuda), "{hip} does not map to {cuda}");
        }
        assert!(rt.contains("0xffffffffu"));
        assert!(rtc::HIP_FP16_SHIM.contains("#include <cuda_fp16.h>"));
        assert!(rtc::HIP_FP16_SHIM.contains("typedef __half half;"));
        assert!(rtc::HIP_BF16_SHIM.contains("#include <cuda_bf16.h>"));
        assert!(rtc::HIP_BF16_SHIM.contains("typedef __nv_bfloat16 __hip_bfloat16;"));
        let digest = rtc::shim_digest();
        assert_eq!(digest.len(), 8);
        assert!(digest.chars().all(|c| c.is_ascii_hexdigit()), "{digest}");
        let names: Vec<&str> = rtc::VIRTUAL_HEADERS.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            ["hip/hip_runtime.h", "hip/hip_fp16.h", "hip/hip_bf16.h"]
        );
    }

    #[test]
    fn compile_options_add_arch_device_default_and_std() {
        let inc = [PathBuf::from("/usr/local/cuda/include")];
        let opts = rtc::compile_options("sm_90", &["-DN=4".to_string()], &inc, true);
        assert_eq!(
            opts,
            [
                "--gpu-architecture=sm_90",
                "-default-device",
                "--std=c++17",
                "--split-compile=0",
                "-DN=4",
                "--include-path=/usr/local/cuda/include",
            ]
        );
        let opts = rtc::compile_options("sm_80", &["--std=c++20".to_string()], &[], false);
        assert_eq!(
            opts,
            ["--gpu-architecture=sm_80", "-default-device", "--std=c++20"]
        );
        // A caller's own split-compile setting wins.
        let opts = rtc::compile_options("sm_90", &["--split-compile=4".to_string()], &[], true);
        assert_eq!(
            opts,
            [
                "--gpu-architecture=sm_90",
                "-default-device",
                "--std=c++17",
                "--split-compile=4",
            ]
        );
    }

    #[test]
    fn include_dirs_keep_order_dedup_and_skip_missing() {
        let dirs = rtc::cuda_include_dirs(
            Some(PathBuf::from("/opt/cuda")),
            Some(PathBuf::from("/usr/local/cuda")),
            |p| !p.starts_with("/opt/cuda/include/cccl"),
        );
        assert_eq!(
            dirs,
            [
                PathBuf::from("/opt/cuda/include"),
                PathBuf::from("/usr/local/cuda/include"),
                PathBuf::from("/usr/local/cuda/include/cccl"),
            ]
        );
        assert!(rtc::cuda_include_dirs(Some(PathBuf::new()), None, |_| false).is_empty());
    }

    #[test]
    fn nvrtc_search_order() {
        let spec = nvrtc_spec(Some(PathBuf::from("/my/cuda")), None);
        let c = spec.candidates();
        assert_eq!(c[0], "/my/cuda/lib64/libnvrtc.so.13");
        assert_eq!(c[1], "/my/cuda/lib64/libnvrtc.so.12");
        assert_eq!(c[3], "/usr/local/cuda/lib64/libnvrtc.so.13");
        assert!(c.contains(&"/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.12".to_string()));
        assert_eq!(
            c[c.len() - 3..],
            ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
        );
        // CUDA_HOME equal to the default is not searched twice.
        let spec = nvrtc_spec(None, Some(PathBuf::from("/usr/local/cuda")));
        assert_eq!(spec.dirs.len(), 3);
    }

    #[test]
    fn libcuda_search_ends_with_the_loader_path() {
        let c = cuda_spec().candidates();
        assert_eq!(c[0], "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
        assert_eq!(c[c.len() - 2..], ["libcuda.so.1", "libcuda.so"]);
    }

    /// Without libcuda (any machine without the NVIDIA driver), loading is a typed error naming
    /// what was searched; with it, the driver loads and counts devices. Never a panic.
    #[test]
    fn load_without_libcuda_is_library_not_found() {
        match load() {
            Err(e @ Error::LibraryNotFound { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("libcuda.so.1"), "{msg}");
                assert!(msg.contains("HIP_PLATFORM=amd"), "{msg}");
            }
            Ok(driver) => {
                assert_eq!(driver.platform(), Platform::Nvidia);
                assert!(driver.device_count().is_ok());
            }
            // A driver library that loads but fails to initialise (e.g. a stub) is an API error.
            Err(e @ Error::Api { .. }) => eprintln!("libcuda present but unusable: {e}"),
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    /// A library without the CUDA functions (libc) yields MissingSymbol errors, not panics.
    #[test]
    fn missing_symbols_are_errors() {
        // SAFETY: libc is already loaded in this process; opening it again runs no initialiser.
        let lib = match unsafe { libloading::Library::new("libc.so.6") } {
            Ok(lib) => lib,
            Err(_) => return, // not a glibc system
        };
        let cu = CudaApi::new(lib, "libc");
        let mut count = 0;
        // SAFETY: the symbol is absent, so nothing is called.
        let err = unsafe { call!(cu, cuDeviceGetCount(&mut count)) }.unwrap_err();
        assert!(
            matches!(
                err,
                Error::MissingSymbol {
                    symbol: "cuDeviceGetCount",
                    ..
                }
            ),
            "{err}"
        );
        // The preferred (CUDA 13) name is the one reported when neither name resolves.
        assert_eq!(cu.cuEventElapsedTime_v2.name, "cuEventElapsedTime_v2");
        // Error naming still works without cuGetErrorName.
        let e = cu.error("cuMemAlloc_v2", 2);
        assert_eq!(e.api_name(), Some("CUDA_ERROR_OUT_OF_MEMORY"));
        assert!(e.to_string().contains("out of memory"), "{e}");
    }

    #[test]
    fn out_of_memory_is_recognised() {
        let oom = Error::Api {
            call: "cuMemAlloc_v2",
            code: 2,
            name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
            message: "out of memory".into(),
            context: None,
        };
        let nvrtc_oom = Error::Api {
            call: "nvrtcCompileProgram",
            code: 1,
            name: "NVRTC_ERROR_OUT_OF_MEMORY".into(),
            message: "out of memory".into(),
            context: None,
        };
        assert!(is_cuda_oom(&oom));
        assert!(!is_cuda_oom(&nvrtc_oom));
        assert!(!is_cuda_oom(&Error::invalid("x", "y")));
    }
}
