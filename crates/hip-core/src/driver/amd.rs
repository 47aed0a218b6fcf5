//! The `amd` driver: the HIP runtime (`libamdhip64`) and hipRTC (`libhiprtc`), through the
//! bindings in [`crate::sys`].
//!
//! Both libraries are opened at run time. Every function is looked up when its library opens
//! and checked at each call: a symbol that the installed ROCm lacks is an
//! [`Error::MissingSymbol`] from that call, never a panic. hipRTC is opened on the first
//! run-time compilation only, so a ROCm installation without it still runs precompiled kernels.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::OnceLock;

use parking_lot::Mutex;

use super::{
    DeviceProperties, DevicePtr, Driver, FunctionAttributes, Platform, RawEvent, RawFunction,
    RawModule, RawStream,
};
use crate::error::{Error, Result};
use crate::loader::{rocm_search_dirs, LibrarySpec, RocmSearchEnv};
use crate::sys::{hip, hiprtc};

/// How the HIP runtime is named in errors.
pub(crate) const HIP_RUNTIME: &str = "the HIP runtime (libamdhip64)";
/// The HIP runtime's file names, newest supported ABI first after the one we were built against.
pub(crate) const HIP_SONAMES: &[&str] = &["libamdhip64.so.6", "libamdhip64.so.7", "libamdhip64.so"];
/// How hipRTC is named in errors.
pub(crate) const HIPRTC: &str = "hipRTC (libhiprtc)";
/// hipRTC's file names.
pub(crate) const HIPRTC_SONAMES: &[&str] = &["libhiprtc.so.6", "libhiprtc.so.7", "libhiprtc.so"];

/// Calls a HIP runtime function through the table of `$self.hip`.
///
/// `hip_call!(self, hipFoo(args..))` is a `Result<()>`: [`Error::MissingSymbol`] when the
/// library lacks `hipFoo`, [`Error::Api`] (with HIP's error name and message) when it returns
/// anything but `hipSuccess`. `hip_call!(@raw self, hipFoo(args..))` is a
/// `Result<hipError_t>` that leaves the code to the caller (for `hipErrorNotReady` and the like).
///
/// The call itself is unsafe: use the macro inside an `unsafe` block whose `SAFETY` comment
/// justifies the arguments.
macro_rules! hip_call {
    (@raw $self:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match &$self.hip.$f {
            Ok(f) => {
                let f = *f;
                Ok(f($($arg),*))
            }
            Err(_) => Err(missing_symbol(HIP_RUNTIME, stringify!($f))),
        }
    };
    ($self:expr, $f:ident($($arg:expr),* $(,)?)) => {
        hip_call!(@raw $self, $f($($arg),*)).and_then(|code| $self.check(stringify!($f), code))
    };
}

/// Calls a hipRTC function through the table `$rtc`; see [`hip_call!`]. `@raw` gives the
/// `hiprtcResult`; the plain form maps a failure to [`Error::Api`].
macro_rules! rtc_call {
    (@raw $rtc:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match &$rtc.$f {
            Ok(f) => {
                let f = *f;
                Ok(f($($arg),*))
            }
            Err(_) => Err(missing_symbol(HIPRTC, stringify!($f))),
        }
    };
    ($rtc:expr, $f:ident($($arg:expr),* $(,)?)) => {
        rtc_call!(@raw $rtc, $f($($arg),*)).and_then(|code| check_rtc($rtc, stringify!($f), code))
    };
}

thread_local! {
    /// The device this thread last made current through [`AmdDriver::set_current`].
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The HIP runtime and (lazily) hipRTC.
pub(crate) struct AmdDriver {
    hip: hip::HipRuntime,
    /// Devices seen at load: the runtime fixes the set at `hipInit`.
    device_count: usize,
    /// Why there is no device, when `hipInit` said so.
    no_device: Option<String>,
    rtc: OnceLock<Result<hiprtc::HipRtc>>,
    /// A copy of every loaded image, kept until its module is unloaded: `hipModuleLoadData` takes
    /// no length and does not promise to be done with the bytes when it returns.
    images: Mutex<HashMap<usize, Box<[u8]>>>,
}

/// Opens the HIP runtime from `$ROCM_PATH/lib`, `/opt/rocm/lib` or the loader path and
/// initialises it. A runtime that loads but sees no GPU is a driver with zero devices.
pub(crate) fn load() -> Result<Box<dyn Driver>> {
    load_from(&LibrarySpec::rocm(HIP_RUNTIME, HIP_SONAMES)).map(|d| Box::new(d) as Box<dyn Driver>)
}

/// [`load`] from an explicit library spec.
pub(crate) fn load_from(spec: &LibrarySpec) -> Result<AmdDriver> {
    let library = spec.open()?;
    // SAFETY: `from_library` only looks the table's symbols up (dlsym); it calls none of them.
    // The function types come from the ROCm 6 headers, whose ABI the accepted sonames share.
    let hip = unsafe { hip::HipRuntime::from_library(library) }.map_err(|e| {
        Error::Platform(format!(
            "{HIP_RUNTIME} loaded but its symbols could not be read: {e}"
        ))
    })?;
    let mut driver = AmdDriver {
        hip,
        device_count: 0,
        no_device: None,
        rtc: OnceLock::new(),
        images: Mutex::new(HashMap::new()),
    };
    // SAFETY: hipInit takes a flags word that must be 0 and touches nothing of ours.
    let init = unsafe { hip_call!(@raw driver, hipInit(0)) }?;
    if is_no_device(init) {
        driver.no_device = Some(driver.error_for("hipInit", init).to_string());
        return Ok(driver);
    }
    driver.check("hipInit", init)?;
    let mut count: c_int = 0;
    // SAFETY: `count` is a valid out-pointer for the duration of the call.
    let code = unsafe { hip_call!(@raw driver, hipGetDeviceCount(&mut count)) }?;
    if is_no_device(code) {
        driver.no_device = Some(driver.error_for("hipGetDeviceCount", code).to_string());
        return Ok(driver);
    }
    driver.check("hipGetDeviceCount", code)?;
    driver.device_count = usize::try_from(count).unwrap_or(0);
    Ok(driver)
}

impl AmdDriver {
    /// `Ok` for `hipSuccess`, else the [`Error::Api`] for `call`.
    fn check(&self, call: &'static str, code: hip::hipError_t) -> Result<()> {
        if code == hip::hipSuccess {
            Ok(())
        } else {
            Err(self.error_for(call, code))
        }
    }

    /// The [`Error::Api`] for a failed `call`, named and described by the runtime itself.
    fn error_for(&self, call: &'static str, code: hip::hipError_t) -> Error {
        // SAFETY: both functions accept any error code and return a pointer to a static,
        // NUL-terminated string (or null), which is what `static_c_str` needs.
        let (name, message) = unsafe {
            (
                hip_call!(@raw self, hipGetErrorName(code))
                    .ok()
                    .and_then(|p| static_c_str(p)),
                hip_call!(@raw self, hipGetErrorString(code))
                    .ok()
                    .and_then(|p| static_c_str(p)),
            )
        };
        api_error(call, code, name, message)
    }

    fn check_ordinal(&self, ordinal: usize) -> Result<c_int> {
        if let Some(detail) = &self.no_device {
            return Err(Error::NoDevice {
                detail: detail.clone(),
            });
        }
        if ordinal >= self.device_count {
            return Err(Error::InvalidDevice {
                ordinal,
                count: self.device_count,
            });
        }
        c_int::try_from(ordinal).map_err(|_| Error::InvalidDevice {
            ordinal,
            count: self.device_count,
        })
    }

    /// hipRTC, opened on first use; an open failure is remembered and returned every time.
    fn rtc(&self) -> Result<&hiprtc::HipRtc> {
        self.rtc
            .get_or_init(|| {
                let library = LibrarySpec::rocm(HIPRTC, HIPRTC_SONAMES).open()?;
                // SAFETY: as for the HIP runtime: symbols are looked up, none is called.
                unsafe { hiprtc::HipRtc::from_library(library) }.map_err(|e| {
                    Error::Platform(format!(
                        "{HIPRTC} loaded but its symbols could not be read: {e}"
                    ))
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Returns `true`/`false` for `hipSuccess`/`hipErrorNotReady`, the error otherwise.
    fn ready(&self, call: &'static str, code: hip::hipError_t) -> Result<bool> {
        match query_result(code) {
            Some(ready) => Ok(ready),
            None => Err(self.error_for(call, code)),
        }
    }

    fn function_attribute(
        &self,
        function: RawFunction,
        attribute: hip::hipFunction_attribute,
    ) -> Result<c_int> {
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid out-pointer; the caller of `function_attributes` guarantees
        // `function` is a live function handle.
        unsafe {
            hip_call!(
                self,
                hipFuncGetAttribute(&mut value, attribute, function.0.cast())
            )
        }?;
        Ok(value)
    }
}

fn as_stream(s: RawStream) -> hip::hipStream_t {
    s.0.cast()
}

fn as_event(e: RawEvent) -> hip::hipEvent_t {
    e.0.cast()
}

fn dptr(p: DevicePtr) -> hip::hipDeviceptr_t {
    p.0 as usize as hip::hipDeviceptr_t
}

impl Driver for AmdDriver {
    fn platform(&self) -> Platform {
        Platform::Amd
    }

    fn runtime_version(&self) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: `v` is a valid out-pointer for the duration of the call.
        unsafe { hip_call!(self, hipRuntimeGetVersion(&mut v)) }?;
        Ok(v)
    }

    fn device_count(&self) -> Result<usize> {
        Ok(self.device_count)
    }

    fn device_properties(&self, ordinal: usize) -> Result<DeviceProperties> {
        let id = self.check_ordinal(ordinal)?;
        let mut p = hip::hipDeviceProp_tR0600::default();
        // SAFETY: `p` is a properly sized and aligned hipDeviceProp_tR0600 (the R0600 entry point
        // writes exactly that struct) and `id` is a valid ordinal.
        unsafe { hip_call!(self, hipGetDevicePropertiesR0600(&mut p, id)) }?;
        let u = |v: c_int| u32::try_from(v).unwrap_or(0);
        Ok(DeviceProperties {
            name: c_array_to_string(&p.name),
            arch_name: c_array_to_string(&p.gcnArchName),
            compute_capability: (p.major, p.minor),
            warp_size: u(p.warpSize),
            multiprocessor_count: u(p.multiProcessorCount),
            total_memory: p.totalGlobalMem,
            max_threads_per_block: u(p.maxThreadsPerBlock),
            max_block_dim: p.maxThreadsDim.map(u),
            max_grid_dim: p.maxGridSize.map(u),
            shared_memory_per_block: p.sharedMemPerBlock,
            pci_bus_id: p.pciBusID,
        })
    }

    fn set_current(&self, ordinal: usize) -> Result<()> {
        let id = self.check_ordinal(ordinal)?;
        if CURRENT.with(Cell::get) == Some(ordinal) {
            return Ok(());
        }
        // SAFETY: hipSetDevice takes a validated ordinal and nothing else.
        unsafe { hip_call!(self, hipSetDevice(id)) }?;
        CURRENT.with(|c| c.set(Some(ordinal)));
        Ok(())
    }

    fn device_synchronize(&self) -> Result<()> {
        crate::blocking::note_blocking_call();
        // SAFETY: no arguments.
        unsafe { hip_call!(self, hipDeviceSynchronize()) }
    }

    fn mem_get_info(&self) -> Result<(usize, usize)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both are valid out-pointers for the duration of the call.
        unsafe { hip_call!(self, hipMemGetInfo(&mut free, &mut total)) }?;
        Ok((free, total))
    }

    fn can_access_peer(&self, ordinal: usize, peer: usize) -> Result<bool> {
        let (a, b) = (self.check_ordinal(ordinal)?, self.check_ordinal(peer)?);
        let mut can: c_int = 0;
        // SAFETY: `can` is a valid out-pointer; both ordinals are validated.
        unsafe { hip_call!(self, hipDeviceCanAccessPeer(&mut can, a, b)) }?;
        Ok(can != 0)
    }

    fn malloc(&self, bytes: usize) -> Result<DevicePtr> {
        if bytes == 0 {
            return Err(Error::invalid("malloc", "cannot allocate 0 bytes"));
        }
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer for the duration of the call.
        unsafe { hip_call!(self, hipMalloc(&mut p, bytes)) }?;
        Ok(DevicePtr(p as usize as u64))
    }

    fn is_out_of_memory(&self, err: &Error) -> bool {
        is_hip_out_of_memory(err)
    }

    fn clear_last_error(&self) {
        // SAFETY: hipGetLastError takes no arguments; it returns (and resets) the calling
        // thread's last error, which is all we want. A runtime without it has nothing to clear.
        let _ = unsafe { hip_call!(@raw self, hipGetLastError()) };
    }

    unsafe fn free(&self, ptr: DevicePtr) -> Result<()> {
        // hipFree waits for the device (an implicit synchronisation).
        crate::blocking::note_blocking_call();
        // SAFETY: the caller guarantees `ptr` came from `malloc` and is no longer in use.
        unsafe { hip_call!(self, hipFree(dptr(ptr))) }
    }

    fn host_alloc(&self, bytes: usize) -> Result<*mut c_void> {
        if bytes == 0 {
            return Err(Error::invalid("host_alloc", "cannot allocate 0 bytes"));
        }
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer for the duration of the call.
        unsafe {
            hip_call!(
                self,
                hipHostMalloc(&mut p, bytes, hip::hipHostMallocDefault)
            )
        }?;
        Ok(p)
    }

    unsafe fn host_free(&self, ptr: *mut c_void) -> Result<()> {
        // hipHostFree waits for the device (an implicit synchronisation).
        crate::blocking::note_blocking_call();
        // SAFETY: the caller guarantees `ptr` came from `host_alloc` and is no longer in use.
        unsafe { hip_call!(self, hipHostFree(ptr)) }
    }

    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const c_void,
        bytes: usize,
        stream: RawStream,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: the caller guarantees both ranges and the stream; HIP only reads `src` (the
        // header's `void*` is not written through).
        unsafe {
            hip_call!(
                self,
                hipMemcpyHtoDAsync(dptr(dst), src.cast_mut(), bytes, as_stream(stream))
            )
        }
    }

    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut c_void,
        src: DevicePtr,
        bytes: usize,
        stream: RawStream,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: the caller guarantees both ranges and the stream.
        unsafe {
            hip_call!(
                self,
                hipMemcpyDtoHAsync(dst, dptr(src), bytes, as_stream(stream))
            )
        }
    }

    unsafe fn memcpy_dtod_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: RawStream,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: the caller guarantees both ranges and the stream.
        unsafe {
            hip_call!(
                self,
                hipMemcpyDtoDAsync(dptr(dst), dptr(src), bytes, as_stream(stream))
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
        stream: RawStream,
    ) -> Result<()> {
        let (d, s) = (
            self.check_ordinal(dst_device)?,
            self.check_ordinal(src_device)?,
        );
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: the caller guarantees both ranges (on the validated devices) and the stream.
        unsafe {
            hip_call!(
                self,
                hipMemcpyPeerAsync(
                    dptr(dst),
                    d,
                    dptr(src).cast_const(),
                    s,
                    bytes,
                    as_stream(stream)
                )
            )
        }
    }

    unsafe fn memset_async(
        &self,
        dst: DevicePtr,
        value: u8,
        bytes: usize,
        stream: RawStream,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: the caller guarantees the range and the stream.
        unsafe {
            hip_call!(
                self,
                hipMemsetD8Async(dptr(dst), value, bytes, as_stream(stream))
            )
        }
    }

    fn stream_create(&self) -> Result<RawStream> {
        let mut s: hip::hipStream_t = ptr::null_mut();
        // SAFETY: `s` is a valid out-pointer for the duration of the call.
        unsafe {
            hip_call!(
                self,
                hipStreamCreateWithFlags(&mut s, hip::hipStreamNonBlocking)
            )
        }?;
        Ok(RawStream(s.cast()))
    }

    unsafe fn stream_destroy(&self, stream: RawStream) -> Result<()> {
        // SAFETY: the caller guarantees the stream is live and not used afterwards.
        unsafe { hip_call!(self, hipStreamDestroy(as_stream(stream))) }
    }

    unsafe fn stream_synchronize(&self, stream: RawStream) -> Result<()> {
        crate::blocking::note_blocking_call();
        // SAFETY: the caller guarantees the stream is live.
        unsafe { hip_call!(self, hipStreamSynchronize(as_stream(stream))) }
    }

    unsafe fn stream_query(&self, stream: RawStream) -> Result<bool> {
        // SAFETY: the caller guarantees the stream is live.
        let code = unsafe { hip_call!(@raw self, hipStreamQuery(as_stream(stream))) }?;
        self.ready("hipStreamQuery", code)
    }

    unsafe fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()> {
        // SAFETY: the caller guarantees both handles are live; flags must be 0.
        unsafe {
            hip_call!(
                self,
                hipStreamWaitEvent(as_stream(stream), as_event(event), 0)
            )
        }
    }

    fn event_create(&self, timing: bool) -> Result<RawEvent> {
        let flags = if timing {
            hip::hipEventDefault
        } else {
            hip::hipEventDisableTiming
        };
        let mut e: hip::hipEvent_t = ptr::null_mut();
        // SAFETY: `e` is a valid out-pointer for the duration of the call.
        unsafe { hip_call!(self, hipEventCreateWithFlags(&mut e, flags)) }?;
        Ok(RawEvent(e.cast()))
    }

    unsafe fn event_destroy(&self, event: RawEvent) -> Result<()> {
        // SAFETY: the caller guarantees the event is live and not used afterwards.
        unsafe { hip_call!(self, hipEventDestroy(as_event(event))) }
    }

    unsafe fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()> {
        // SAFETY: the caller guarantees both handles are live.
        unsafe { hip_call!(self, hipEventRecord(as_event(event), as_stream(stream))) }
    }

    unsafe fn event_synchronize(&self, event: RawEvent) -> Result<()> {
        crate::blocking::note_blocking_call();
        // SAFETY: the caller guarantees the event is live.
        unsafe { hip_call!(self, hipEventSynchronize(as_event(event))) }
    }

    unsafe fn event_query(&self, event: RawEvent) -> Result<bool> {
        // SAFETY: the caller guarantees the event is live.
        let code = unsafe { hip_call!(@raw self, hipEventQuery(as_event(event))) }?;
        self.ready("hipEventQuery", code)
    }

    unsafe fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: `ms` is a valid out-pointer; the caller guarantees both events are live.
        unsafe {
            hip_call!(
                self,
                hipEventElapsedTime(&mut ms, as_event(start), as_event(end))
            )
        }?;
        Ok(ms)
    }

    fn module_load_data(&self, image: &[u8]) -> Result<RawModule> {
        check_code_object(image)?;
        let owned: Box<[u8]> = image.into();
        let mut m: hip::hipModule_t = ptr::null_mut();
        // SAFETY: `m` is a valid out-pointer; `owned` is a well-formed code object or offload
        // bundle (its headers were checked to lie within the buffer, since the call takes no
        // length) that stays alive, unmoved, until the module is unloaded.
        unsafe { hip_call!(self, hipModuleLoadData(&mut m, owned.as_ptr().cast())) }?;
        self.images.lock().insert(m as usize, owned);
        Ok(RawModule(m.cast()))
    }

    unsafe fn module_unload(&self, module: RawModule) -> Result<()> {
        // SAFETY: the caller guarantees the module is live and no queued launch uses it.
        let result = unsafe { hip_call!(self, hipModuleUnload(module.0.cast())) };
        if result.is_ok() {
            self.images.lock().remove(&(module.0 as usize));
        }
        result
    }

    unsafe fn module_get_function(&self, module: RawModule, name: &CStr) -> Result<RawFunction> {
        let mut f: hip::hipFunction_t = ptr::null_mut();
        // SAFETY: `f` is a valid out-pointer, `name` is NUL-terminated, and the caller guarantees
        // the module is live.
        unsafe {
            hip_call!(
                self,
                hipModuleGetFunction(&mut f, module.0.cast(), name.as_ptr())
            )
        }?;
        Ok(RawFunction(f.cast()))
    }

    unsafe fn function_allow_dynamic_shared(
        &self,
        _function: RawFunction,
        _bytes: u32,
    ) -> Result<()> {
        // No opt-in on AMD: a launch may ask for the device's LDS per workgroup, and one that
        // asks for more fails at launch with the runtime's error.
        Ok(())
    }

    unsafe fn function_attributes(&self, function: RawFunction) -> Result<FunctionAttributes> {
        let get = |a| self.function_attribute(function, a);
        let usize_of = |v: c_int| usize::try_from(v).unwrap_or(0);
        let u32_of = |v: c_int| u32::try_from(v).unwrap_or(0);
        Ok(FunctionAttributes {
            max_threads_per_block: u32_of(get(hip::HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?),
            num_regs: u32_of(get(hip::HIP_FUNC_ATTRIBUTE_NUM_REGS)?),
            shared_size_bytes: usize_of(get(hip::HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?),
            local_size_bytes: usize_of(get(hip::HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?),
            const_size_bytes: usize_of(get(hip::HIP_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)?),
        })
    }

    unsafe fn launch_kernel(
        &self,
        function: RawFunction,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        stream: RawStream,
        params: *mut *mut c_void,
        _overlap: bool,
    ) -> Result<()> {
        // HIP has no overlapped (programmatic) launch on AMD: an ordinary launch, which keeps
        // the stream's order and so meets every kernel's expectations.
        // SAFETY: the caller guarantees the function, the stream, the parameter array and
        // every pointer it leads to; `extra` is unused (null).
        unsafe {
            hip_call!(
                self,
                hipModuleLaunchKernel(
                    function.0.cast(),
                    grid[0],
                    grid[1],
                    grid[2],
                    block[0],
                    block[1],
                    block[2],
                    shared_mem_bytes,
                    as_stream(stream),
                    params,
                    ptr::null_mut(),
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
        let rtc = self.rtc()?;
        let nul = |what: &str| Error::invalid("rtc_compile", format!("{what} contains a NUL byte"));
        let c_source = CString::new(source).map_err(|_| nul("the source"))?;
        let c_name = CString::new(program).map_err(|_| nul("the program name"))?;
        let mut all = vec![format!("--offload-arch={arch}"), "-O3".to_string()];
        // hipRTC compiles with `-nogpuinc` and looks for the HIP headers under `$ROCM_PATH`
        // only: name the headers of the ROCm we loaded from (caller's `-I` options come first).
        all.extend(options.iter().cloned());
        if let Some(dir) = hip_include_dir(&rocm_search_dirs(&RocmSearchEnv::from_env())) {
            all.push(format!("-I{}", dir.display()));
        }
        let c_options = all
            .iter()
            .map(|o| CString::new(o.as_str()).map_err(|_| nul("an option")))
            .collect::<Result<Vec<_>>>()?;
        let mut option_ptrs: Vec<*const c_char> = c_options.iter().map(|o| o.as_ptr()).collect();
        let num_options = c_int::try_from(option_ptrs.len())
            .map_err(|_| Error::invalid("rtc_compile", "too many options"))?;

        let mut prog: hiprtc::hiprtcProgram = ptr::null_mut();
        // SAFETY: `prog` is a valid out-pointer; source and name are NUL-terminated and outlive
        // the call; no headers are passed (count 0, null arrays).
        unsafe {
            rtc_call!(
                rtc,
                hiprtcCreateProgram(
                    &mut prog,
                    c_source.as_ptr(),
                    c_name.as_ptr(),
                    0,
                    ptr::null_mut(),
                    ptr::null_mut(),
                )
            )
        }?;
        let program_guard = Program { rtc, prog };

        // SAFETY: `prog` is live; `option_ptrs` holds `num_options` NUL-terminated strings that
        // outlive the call (hipRTC does not write through the array).
        let code = unsafe {
            rtc_call!(@raw rtc, hiprtcCompileProgram(prog, num_options, option_ptrs.as_mut_ptr()))
        }?;
        if code != hiprtc::HIPRTC_SUCCESS {
            let log = program_guard.log().unwrap_or_default();
            let mut log = compile_failure_log(code, &rtc_error_name(rtc, code), &log);
            if let Some(hint) = missing_headers_hint(&log) {
                log = format!("{hint}\n{log}");
            }
            return Err(Error::Compile {
                program: program.to_string(),
                arch: arch.to_string(),
                log,
            });
        }

        let mut size = 0usize;
        // SAFETY: `prog` is live and compiled; `size` is a valid out-pointer.
        unsafe { rtc_call!(rtc, hiprtcGetCodeSize(prog, &mut size)) }?;
        let mut image = vec![0u8; size];
        if size > 0 {
            // SAFETY: `image` has exactly the `size` bytes hipRTC reported for the code.
            unsafe { rtc_call!(rtc, hiprtcGetCode(prog, image.as_mut_ptr().cast())) }?;
        }
        drop(program_guard);
        if image.is_empty() {
            return Err(Error::Compile {
                program: program.to_string(),
                arch: arch.to_string(),
                log: "hipRTC reported success but produced an empty code object".into(),
            });
        }
        Ok(image)
    }

    fn rtc_version(&self) -> Result<String> {
        let rtc = self.rtc()?;
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        // SAFETY: both are valid out-pointers for the duration of the call.
        unsafe { rtc_call!(rtc, hiprtcVersion(&mut major, &mut minor)) }?;
        Ok(format!("hiprtc {major}.{minor}"))
    }
}

/// A hipRTC program, destroyed on drop.
struct Program<'a> {
    rtc: &'a hiprtc::HipRtc,
    prog: hiprtc::hiprtcProgram,
}

impl Program<'_> {
    /// The compilation log, without its trailing NUL.
    fn log(&self) -> Result<String> {
        let mut size = 0usize;
        // SAFETY: `prog` is live; `size` is a valid out-pointer.
        unsafe { rtc_call!(self.rtc, hiprtcGetProgramLogSize(self.prog, &mut size)) }?;
        if size == 0 {
            return Ok(String::new());
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` has exactly the `size` bytes hipRTC reported for the log.
        unsafe {
            rtc_call!(
                self.rtc,
                hiprtcGetProgramLog(self.prog, buf.as_mut_ptr().cast())
            )
        }?;
        Ok(bytes_to_string(&buf))
    }
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: `prog` was created by hiprtcCreateProgram and is destroyed exactly once, here.
        // A failure to destroy only leaks the program.
        let _ = unsafe { rtc_call!(@raw self.rtc, hiprtcDestroyProgram(&mut self.prog)) };
    }
}

fn missing_symbol(library: &str, symbol: &'static str) -> Error {
    Error::MissingSymbol {
        library: library.to_string(),
        symbol,
    }
}

/// `Ok` for `HIPRTC_SUCCESS`, else an [`Error::Api`] named by hipRTC.
fn check_rtc(rtc: &hiprtc::HipRtc, call: &'static str, code: hiprtc::hiprtcResult) -> Result<()> {
    if code == hiprtc::HIPRTC_SUCCESS {
        return Ok(());
    }
    let name = rtc_error_name(rtc, code);
    Err(api_error(
        call,
        code,
        Some(name),
        Some(rtc_error_message(code).to_string()),
    ))
}

/// hipRTC's name for a result code (`HIPRTC_ERROR_...`).
fn rtc_error_name(rtc: &hiprtc::HipRtc, code: hiprtc::hiprtcResult) -> String {
    // SAFETY: hiprtcGetErrorString accepts any code and returns a pointer to a static,
    // NUL-terminated string (or null), which is what `static_c_str` needs.
    unsafe {
        rtc_call!(@raw rtc, hiprtcGetErrorString(code))
            .ok()
            .and_then(|p| static_c_str(p))
    }
    .unwrap_or_else(|| format!("hiprtcResult({code})"))
}

/// What a hipRTC result means (hipRTC only gives names).
fn rtc_error_message(code: hiprtc::hiprtcResult) -> &'static str {
    match code {
        hiprtc::HIPRTC_ERROR_OUT_OF_MEMORY => "out of memory",
        hiprtc::HIPRTC_ERROR_PROGRAM_CREATION_FAILURE => "failed to create the program",
        hiprtc::HIPRTC_ERROR_INVALID_INPUT => "invalid input",
        hiprtc::HIPRTC_ERROR_INVALID_PROGRAM => "invalid program",
        hiprtc::HIPRTC_ERROR_INVALID_OPTION => "invalid option",
        hiprtc::HIPRTC_ERROR_COMPILATION => "compilation failed",
        hiprtc::HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE => "a builtin operation failed",
        hiprtc::HIPRTC_ERROR_INTERNAL_ERROR => "internal error",
        hiprtc::HIPRTC_ERROR_LINKING => "linking failed",
        _ => "unknown hipRTC error",
    }
}

/// The log of a failed `hiprtcCompileProgram`: the compiler's own output, prefixed with the
/// result when it is not a plain compilation error (a bad option, say).
/// The first `include/` beside a ROCm library directory we search (`$ROCM_PATH/lib`, the ROCm
/// wheels, `/opt/rocm/lib`, ...) that holds `hip/hip_runtime.h`.
fn hip_include_dir(lib_dirs: &[std::path::PathBuf]) -> Option<std::path::PathBuf> {
    lib_dirs
        .iter()
        .filter_map(|lib| lib.parent().map(|root| root.join("include")))
        .find(|inc| inc.join("hip").join("hip_runtime.h").is_file())
}

/// One sentence for a compile log that shows the HIP headers missing (`'hip/...' file not
/// found`): which package provides them.
fn missing_headers_hint(log: &str) -> Option<String> {
    let missing = log
        .lines()
        .any(|l| l.contains("file not found") && (l.contains("'hip/") || l.contains("\"hip/")));
    missing.then(|| {
        "hipRTC cannot find the HIP headers (hip/hip_runtime.h): install them (ROCm: the \
         `hip-dev` / `rocm-hip-runtime-dev` package; Debian: `libamdhip64-dev`; `cargo xtask \
         install-rocm` installs them) or point ROCM_PATH at a ROCm with `include/hip`."
            .to_string()
    })
}

fn compile_failure_log(code: hiprtc::hiprtcResult, name: &str, log: &str) -> String {
    let log = log.trim_end();
    if code == hiprtc::HIPRTC_ERROR_COMPILATION && !log.is_empty() {
        log.to_string()
    } else if log.is_empty() {
        format!(
            "hiprtcCompileProgram returned {name} ({code}): {} (no log)",
            rtc_error_message(code)
        )
    } else {
        format!(
            "hiprtcCompileProgram returned {name} ({code}): {}\n{log}",
            rtc_error_message(code)
        )
    }
}

/// An [`Error::Api`] from a HIP or hipRTC code and the runtime's name and message for it.
fn api_error(
    call: &'static str,
    code: u32,
    name: Option<String>,
    message: Option<String>,
) -> Error {
    let name = name
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("hipError_t({code})"));
    let message = message
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "no description available".to_string());
    Error::Api {
        call,
        code: i32::try_from(code).unwrap_or(i32::MAX),
        name,
        message,
        context: None,
    }
}

/// Codes by which `hipInit`/`hipGetDeviceCount` say "no GPU here".
fn is_no_device(code: hip::hipError_t) -> bool {
    code == hip::hipErrorNoDevice || code == hip::hipErrorInvalidDevice
}

/// `Some(true)` for `hipSuccess`, `Some(false)` for `hipErrorNotReady`, else `None`.
fn query_result(code: hip::hipError_t) -> Option<bool> {
    match code {
        hip::hipSuccess => Some(true),
        hip::hipErrorNotReady => Some(false),
        _ => None,
    }
}

fn is_hip_out_of_memory(err: &Error) -> bool {
    matches!(err, Error::Api { code, .. } if i64::from(*code) == i64::from(hip::hipErrorOutOfMemory))
}

/// Copies a C string returned by the runtime; `None` for null.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that stays valid during the call.
unsafe fn static_c_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` is not null, and the caller guarantees it is a valid C string.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// A fixed-size C `char` array (NUL-terminated or full) as a `String`.
fn c_array_to_string(a: &[c_char]) -> String {
    let bytes: Vec<u8> = a.iter().map(|&c| c as u8).collect();
    bytes_to_string(&bytes)
}

fn bytes_to_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

const EM_AMDGPU: u16 = 224;
const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
const COMPRESSED_BUNDLE_MAGIC: &[u8] = b"CCOB";

/// Checks that `image` is an AMDGPU ELF code object or a clang offload bundle whose headers lie
/// within the buffer. `hipModuleLoadData` takes no length, so it must not be given bytes that
/// would make it read past the end.
fn check_code_object(image: &[u8]) -> Result<()> {
    let bad = |reason: String| Error::invalid("module_load_data", reason);
    let u16_at = |o: usize| {
        image
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |o: usize| {
        image
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    };
    let u64_at = |o: usize| {
        image
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let within = |offset: u64, size: u64| {
        offset
            .checked_add(size)
            .is_some_and(|end| end <= image.len() as u64)
    };
    if image.starts_with(b"\x7fELF") {
        if image.len() < 64 || image[4] != 2 || image[5] != 1 {
            return Err(bad("not a 64-bit little-endian ELF file".into()));
        }
        let machine = u16_at(18).unwrap_or(0);
        if machine != EM_AMDGPU {
            return Err(bad(format!(
                "ELF machine {machine} is not AMDGPU ({EM_AMDGPU}): not an AMD GPU code object"
            )));
        }
        let table = |off: usize, entsize: usize, num: usize| {
            let (o, e, n) = (u64_at(off), u16_at(entsize), u16_at(num));
            match (o, e, n) {
                (Some(o), Some(e), Some(n)) => n == 0 || within(o, u64::from(e) * u64::from(n)),
                _ => false,
            }
        };
        if !table(32, 54, 56) || !table(40, 58, 60) {
            return Err(bad(
                "truncated ELF code object (a header table lies past the end)".into(),
            ));
        }
        return Ok(());
    }
    if image.starts_with(BUNDLE_MAGIC) {
        let n = u64_at(24).ok_or_else(|| bad("truncated offload bundle".into()))?;
        let mut at = 32usize;
        for i in 0..n {
            let entry = (u64_at(at), u64_at(at + 8), u64_at(at + 16));
            let (Some(offset), Some(size), Some(triple_len)) = entry else {
                return Err(bad(format!("truncated offload bundle (entry {i})")));
            };
            if !within(offset, size) {
                return Err(bad(format!("offload bundle entry {i} lies past the end")));
            }
            at = usize::try_from(triple_len)
                .ok()
                .and_then(|t| at.checked_add(24)?.checked_add(t))
                .filter(|&a| a <= image.len())
                .ok_or_else(|| bad(format!("truncated offload bundle (entry {i})")))?;
        }
        return Ok(());
    }
    if image.starts_with(COMPRESSED_BUNDLE_MAGIC) {
        let version = u16_at(4).ok_or_else(|| bad("truncated compressed bundle".into()))?;
        let total = match version {
            1 => Some(20),
            2 => u32_at(8).map(u64::from),
            _ => u64_at(8),
        };
        return match total {
            Some(t) if t <= image.len() as u64 && image.len() >= 20 => Ok(()),
            _ => Err(bad("truncated compressed offload bundle".into())),
        };
    }
    let head: Vec<String> = image.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Err(bad(format!(
        "not an AMD GPU code object (ELF) or clang offload bundle ({} bytes starting {})",
        image.len(),
        head.join(" ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_error_keeps_runtime_name_and_message() {
        let e = api_error(
            "hipMalloc",
            hip::hipErrorOutOfMemory,
            Some("hipErrorOutOfMemory".into()),
            Some("out of memory".into()),
        );
        let s = e.to_string();
        assert!(
            s.contains("hipMalloc failed with hipErrorOutOfMemory (2): out of memory"),
            "{s}"
        );
        assert!(is_hip_out_of_memory(&e));
        assert_eq!(e.api_name(), Some("hipErrorOutOfMemory"));
    }

    #[test]
    fn api_error_without_runtime_strings_still_names_the_code() {
        let e = api_error("hipSetDevice", 101, None, Some(String::new()));
        let s = e.to_string();
        assert!(s.contains("hipError_t(101) (101)"), "{s}");
        assert!(s.contains("no description available"), "{s}");
        assert!(!is_hip_out_of_memory(&e));
    }

    #[test]
    fn out_of_memory_is_code_2_only() {
        assert!(!is_hip_out_of_memory(&Error::invalid("malloc", "x")));
        let other = api_error("hipMalloc", hip::hipErrorInvalidValue, None, None);
        assert!(!is_hip_out_of_memory(&other));
    }

    #[test]
    fn no_device_codes() {
        assert!(is_no_device(hip::hipErrorNoDevice));
        assert!(is_no_device(hip::hipErrorInvalidDevice));
        assert!(!is_no_device(hip::hipSuccess));
        assert!(!is_no_device(hip::hipErrorNotInitialized));
    }

    #[test]
    fn query_maps_not_ready_to_false() {
        assert_eq!(query_result(hip::hipSuccess), Some(true));
        assert_eq!(query_result(hip::hipErrorNotReady), Some(false));
        assert_eq!(query_result(hip::hipErrorInvalidHandle), None);
    }

    #[test]
    fn missing_symbol_names_library_and_function() {
        let e = missing_symbol(HIP_RUNTIME, "hipMemcpyPeerAsync");
        assert!(matches!(
            &e,
            Error::MissingSymbol {
                symbol: "hipMemcpyPeerAsync",
                ..
            }
        ));
        assert!(e.to_string().contains("libamdhip64"), "{e}");
    }

    #[test]
    fn hip_headers_are_found_beside_a_library_dir_and_their_absence_is_named() {
        let root = std::env::temp_dir().join(format!("hip-core-inc-{}", std::process::id()));
        let (with, without) = (root.join("with"), root.join("without"));
        std::fs::create_dir_all(with.join("include/hip")).unwrap();
        std::fs::create_dir_all(with.join("lib")).unwrap();
        std::fs::create_dir_all(without.join("lib")).unwrap();
        std::fs::write(with.join("include/hip/hip_runtime.h"), "").unwrap();
        let dirs = [without.join("lib"), with.join("lib")];
        assert_eq!(hip_include_dir(&dirs), Some(with.join("include")));
        assert_eq!(hip_include_dir(&dirs[..1]), None);
        std::fs::remove_dir_all(&root).unwrap();
        let log = "module.hip:3:10: fatal error: 'hip/hip_runtime.h' file not found";
        assert!(missing_headers_hint(log).unwrap().contains("hip-dev"));
        assert!(missing_headers_hint("error: use of undeclared identifier 'x'").is_none());
    }

    #[test]
    fn compile_failure_log_prefixes_non_compilation_errors() {
        let log = compile_failure_log(
            hiprtc::HIPRTC_ERROR_COMPILATION,
            "HIPRTC_ERROR_COMPILATION",
            "x.hip:1: error\n",
        );
        assert_eq!(log, "x.hip:1: error");
        let log = compile_failure_log(
            hiprtc::HIPRTC_ERROR_INVALID_OPTION,
            "HIPRTC_ERROR_INVALID_OPTION",
            "",
        );
        assert!(
            log.contains("HIPRTC_ERROR_INVALID_OPTION (5): invalid option (no log)"),
            "{log}"
        );
    }

    #[test]
    fn c_strings_stop_at_nul_or_the_end() {
        let mut a = [0 as c_char; 8];
        for (d, s) in a.iter_mut().zip(b"gfx942") {
            *d = *s as c_char;
        }
        assert_eq!(c_array_to_string(&a), "gfx942");
        let full = [b'a' as c_char; 4];
        assert_eq!(c_array_to_string(&full), "aaaa");
        // SAFETY: null, and a C string literal.
        unsafe {
            assert_eq!(static_c_str(ptr::null()), None);
            assert_eq!(
                static_c_str(c"hipSuccess".as_ptr()).as_deref(),
                Some("hipSuccess")
            );
        }
    }

    fn elf(machine: u16, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        v[..4].copy_from_slice(b"\x7fELF");
        v[4] = 2;
        v[5] = 1;
        v[18..20].copy_from_slice(&machine.to_le_bytes());
        v
    }

    #[test]
    fn code_object_checks() {
        assert!(check_code_object(&elf(EM_AMDGPU, 64)).is_ok());
        // x86-64 ELF
        let e = check_code_object(&elf(62, 64)).unwrap_err().to_string();
        assert!(e.contains("not AMDGPU"), "{e}");
        // a section header table past the end
        let mut t = elf(EM_AMDGPU, 64);
        t[40..48].copy_from_slice(&1000u64.to_le_bytes());
        t[58..60].copy_from_slice(&64u16.to_le_bytes());
        t[60..62].copy_from_slice(&3u16.to_le_bytes());
        assert!(check_code_object(&t).is_err());
        assert!(check_code_object(&elf(EM_AMDGPU, 40)).is_err());
        assert!(check_code_object(b"garbage!").is_err());
        assert!(check_code_object(&[]).is_err());

        // an offload bundle with one entry
        let mut b = BUNDLE_MAGIC.to_vec();
        b.extend(1u64.to_le_bytes());
        let triple = b"hipv4-amdgcn-amd-amdhsa--gfx942";
        let offset = (b.len() + 24 + triple.len()) as u64;
        b.extend(offset.to_le_bytes());
        b.extend(4u64.to_le_bytes());
        b.extend((triple.len() as u64).to_le_bytes());
        b.extend(triple);
        b.extend(b"code");
        assert!(check_code_object(&b).is_ok());
        b.truncate(b.len() - 1);
        assert!(check_code_object(&b).is_err());
    }
}
