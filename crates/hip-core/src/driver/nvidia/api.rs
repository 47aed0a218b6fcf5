//! Our own function tables for the CUDA driver API and NVRTC.
//!
//! cudarc supplies the raw CUDA *types*; its functions are never called, because its loader
//! panics when a library or symbol is absent. Instead each table below holds the opened
//! [`libloading::Library`] and every function pointer we use, resolved once at load time. A
//! symbol the library lacks stays `None` and turns into [`Error::MissingSymbol`] when (and only
//! when) that function is called.
//!
//! Status codes are declared as plain `c_int` rather than cudarc's `CUresult`/`nvrtcResult` enums:
//! a newer driver may return a code those enums do not list, and receiving such a value as a Rust
//! enum would be undefined behaviour.

// Table fields carry the exact C symbol names.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uchar, c_uint, c_void, CStr};

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUevent, CUfunction,
    CUfunction_attribute, CUlaunchConfig, CUmodule, CUresult, CUstream,
};
use cudarc::nvrtc::sys::{nvrtcProgram, nvrtcResult};

use crate::error::{Error, Result};

/// A raw `CUresult`.
pub(super) type CuStatus = c_int;
/// A raw `nvrtcResult`.
pub(super) type NvrtcStatus = c_int;

/// `CUDA_SUCCESS`.
pub(super) const CUDA_SUCCESS: CuStatus = CUresult::CUDA_SUCCESS as CuStatus;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub(super) const CUDA_ERROR_OUT_OF_MEMORY: CuStatus =
    CUresult::CUDA_ERROR_OUT_OF_MEMORY as CuStatus;
/// `CUDA_ERROR_NOT_READY`.
pub(super) const CUDA_ERROR_NOT_READY: CuStatus = CUresult::CUDA_ERROR_NOT_READY as CuStatus;
/// `CUDA_ERROR_NO_DEVICE`.
pub(super) const CUDA_ERROR_NO_DEVICE: CuStatus = CUresult::CUDA_ERROR_NO_DEVICE as CuStatus;
/// `NVRTC_SUCCESS`.
pub(super) const NVRTC_SUCCESS: NvrtcStatus = nvrtcResult::NVRTC_SUCCESS as NvrtcStatus;
/// `NVRTC_ERROR_INVALID_OPTION`: an option this NVRTC does not know.
pub(super) const NVRTC_ERROR_INVALID_OPTION: NvrtcStatus =
    nvrtcResult::NVRTC_ERROR_INVALID_OPTION as NvrtcStatus;

/// One resolved (or absent) function of a table.
pub(super) struct Sym<F> {
    /// The symbol that was found, or the preferred name when none was.
    pub(super) name: &'static str,
    /// The function, if the library exports it.
    pub(super) f: Option<F>,
}

impl<F: Copy> Sym<F> {
    /// The function, or [`Error::MissingSymbol`] naming `library`.
    pub(super) fn get(&self, library: &str) -> Result<F> {
        self.f.ok_or_else(|| Error::MissingSymbol {
            library: library.to_string(),
            symbol: self.name,
        })
    }
}

/// Looks `names` up in `lib`, in order, and keeps the first that resolves.
///
/// # Safety
/// `F` must be a function pointer type whose signature is the C prototype of every symbol in
/// `names`; the returned pointer is only valid while `lib` stays loaded.
unsafe fn resolve<F: Copy>(lib: &libloading::Library, names: &[&'static str]) -> Sym<F> {
    for &name in names {
        // SAFETY: the caller guarantees that `F` is the symbol's prototype.
        if let Ok(sym) = unsafe { lib.get::<F>(name.as_bytes()) } {
            return Sym {
                name,
                f: Some(*sym),
            };
        }
    }
    Sym {
        name: names[0],
        f: None,
    }
}

/// Declares a table: a struct with one [`Sym`] per function plus the library that owns them.
/// `name | fallback` tries `name` first, then `fallback`.
macro_rules! fn_table {
    (
        $(#[$meta:meta])*
        $vis:vis struct $table:ident {
            $( $field:ident $( | $alt:ident )* : fn( $( $arg:ty ),* $(,)? ) -> $ret:ty; )*
        }
    ) => {
        $(#[$meta])*
        $vis struct $table {
            /// The library, as named in errors.
            pub(super) library: &'static str,
            $( pub(super) $field: Sym<unsafe extern "C" fn($($arg),*) -> $ret>, )*
            /// Keeps every function pointer above valid; never unloaded while the table lives.
            _lib: libloading::Library,
        }

        impl $table {
            /// Resolves every function of the table in `lib`; an absent one stays `None`.
            pub(super) fn new(lib: libloading::Library, library: &'static str) -> Self {
                $(
                    // SAFETY: each prototype is copied from the CUDA headers (as cudarc's `sys`
                    // module declares them), with status enums widened to the `c_int` they are in
                    // C; the pointers live in the same struct as `lib`, which keeps them valid.
                    let $field = unsafe {
                        resolve(&lib, &[stringify!($field) $(, stringify!($alt))*])
                    };
                )*
                $table { library, $($field,)* _lib: lib }
            }
        }
    };
}

/// Calls a function of a table and returns its raw status: `Ok(code)`, or
/// [`Error::MissingSymbol`]. Must be used inside an `unsafe` block whose `SAFETY` comment covers
/// the call's arguments.
macro_rules! raw_call {
    ($api:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $api.$f.get($api.library) {
            Ok(f) => Ok(f($($arg),*)),
            Err(e) => Err(e),
        }
    };
}

/// Calls a function of a table and turns a failure status into an [`Error::Api`] naming the call.
/// Must be used inside an `unsafe` block whose `SAFETY` comment covers the call's arguments.
macro_rules! call {
    ($api:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $api.$f.get($api.library) {
            Ok(f) => $api.check(f($($arg),*), $api.$f.name),
            Err(e) => Err(e),
        }
    };
}

pub(super) use {call, raw_call};

fn_table! {
    /// The CUDA driver API functions the adapter uses (`libcuda`).
    pub(super) struct CudaApi {
        cuInit: fn(c_uint) -> CuStatus;
        cuDriverGetVersion: fn(*mut c_int) -> CuStatus;
        cuGetErrorName: fn(CuStatus, *mut *const c_char) -> CuStatus;
        cuGetErrorString: fn(CuStatus, *mut *const c_char) -> CuStatus;
        cuDeviceGetCount: fn(*mut c_int) -> CuStatus;
        cuDeviceGet: fn(*mut CUdevice, c_int) -> CuStatus;
        cuDeviceGetName: fn(*mut c_char, c_int, CUdevice) -> CuStatus;
        cuDeviceGetAttribute: fn(*mut c_int, CUdevice_attribute, CUdevice) -> CuStatus;
        cuDeviceTotalMem_v2: fn(*mut usize, CUdevice) -> CuStatus;
        cuDeviceCanAccessPeer: fn(*mut c_int, CUdevice, CUdevice) -> CuStatus;
        cuDevicePrimaryCtxRetain: fn(*mut CUcontext, CUdevice) -> CuStatus;
        cuCtxSetCurrent: fn(CUcontext) -> CuStatus;
        cuCtxSynchronize: fn() -> CuStatus;
        cuMemGetInfo_v2: fn(*mut usize, *mut usize) -> CuStatus;
        cuMemAlloc_v2: fn(*mut CUdeviceptr, usize) -> CuStatus;
        cuMemFree_v2: fn(CUdeviceptr) -> CuStatus;
        cuMemAllocHost_v2: fn(*mut *mut c_void, usize) -> CuStatus;
        cuMemFreeHost: fn(*mut c_void) -> CuStatus;
        cuMemcpyHtoDAsync_v2: fn(CUdeviceptr, *const c_void, usize, CUstream) -> CuStatus;
        cuMemcpyDtoHAsync_v2: fn(*mut c_void, CUdeviceptr, usize, CUstream) -> CuStatus;
        cuMemcpyDtoDAsync_v2: fn(CUdeviceptr, CUdeviceptr, usize, CUstream) -> CuStatus;
        cuMemcpyPeerAsync: fn(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, usize, CUstream)
            -> CuStatus;
        cuMemsetD8Async: fn(CUdeviceptr, c_uchar, usize, CUstream) -> CuStatus;
        cuStreamCreate: fn(*mut CUstream, c_uint) -> CuStatus;
        cuStreamDestroy_v2: fn(CUstream) -> CuStatus;
        cuStreamSynchronize: fn(CUstream) -> CuStatus;
        cuStreamQuery: fn(CUstream) -> CuStatus;
        cuStreamWaitEvent: fn(CUstream, CUevent, c_uint) -> CuStatus;
        cuEventCreate: fn(*mut CUevent, c_uint) -> CuStatus;
        cuEventDestroy_v2: fn(CUevent) -> CuStatus;
        cuEventRecord: fn(CUevent, CUstream) -> CuStatus;
        cuEventSynchronize: fn(CUevent) -> CuStatus;
        cuEventQuery: fn(CUevent) -> CuStatus;
        // CUDA 13 headers map cuEventElapsedTime to _v2 (added in 12.8); older drivers only
        // export the original.
        cuEventElapsedTime_v2 | cuEventElapsedTime: fn(*mut f32, CUevent, CUevent) -> CuStatus;
        cuModuleLoadData: fn(*mut CUmodule, *const c_void) -> CuStatus;
        cuModuleUnload: fn(CUmodule) -> CuStatus;
        cuModuleGetFunction: fn(*mut CUfunction, CUmodule, *const c_char) -> CuStatus;
        cuFuncGetAttribute: fn(*mut c_int, CUfunction_attribute, CUfunction) -> CuStatus;
        cuFuncSetAttribute: fn(CUfunction, CUfunction_attribute, c_int) -> CuStatus;
        cuLaunchKernel: fn(
            CUfunction,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            CUstream,
            *mut *mut c_void,
            *mut *mut c_void,
        ) -> CuStatus;
        // CUDA 12.0+: launches with attributes (overlapped launches).
        cuLaunchKernelEx: fn(*const CUlaunchConfig, CUfunction, *mut *mut c_void, *mut *mut c_void)
            -> CuStatus;
    }
}

impl CudaApi {
    /// `Ok(())` for `CUDA_SUCCESS`, else the [`Error::Api`] for `code` returned by `call`.
    pub(super) fn check(&self, code: CuStatus, call: &'static str) -> Result<()> {
        if code == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(self.error(call, code))
        }
    }

    /// The [`Error::Api`] for `code` returned by `call`, named by the driver itself.
    pub(super) fn error(&self, call: &'static str, code: CuStatus) -> Error {
        let name = self
            .describe(self.cuGetErrorName.f, code)
            .unwrap_or_else(|| cuda_error_name(code));
        let message = self
            .describe(self.cuGetErrorString.f, code)
            .unwrap_or_else(|| status_message(&name, "CUDA_ERROR_"));
        Error::Api {
            call,
            code,
            name,
            message,
            context: None,
        }
    }

    /// Runs `cuGetErrorName`/`cuGetErrorString` for `code`; `None` if absent or unknown.
    fn describe(
        &self,
        f: Option<unsafe extern "C" fn(CuStatus, *mut *const c_char) -> CuStatus>,
        code: CuStatus,
    ) -> Option<String> {
        let f = f?;
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: both functions take any status value and write a pointer to a static,
        // NUL-terminated string (or return an error for an unknown code).
        let rc = unsafe { f(code, &mut s) };
        if rc != CUDA_SUCCESS || s.is_null() {
            return None;
        }
        // SAFETY: on success `s` points to a static NUL-terminated string owned by the driver.
        Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
    }
}

fn_table! {
    /// The NVRTC functions the adapter uses (`libnvrtc`).
    pub(super) struct NvrtcApi {
        nvrtcVersion: fn(*mut c_int, *mut c_int) -> NvrtcStatus;
        nvrtcGetErrorString: fn(NvrtcStatus) -> *const c_char;
        nvrtcCreateProgram: fn(
            *mut nvrtcProgram,
            *const c_char,
            *const c_char,
            c_int,
            *const *const c_char,
            *const *const c_char,
        ) -> NvrtcStatus;
        nvrtcDestroyProgram: fn(*mut nvrtcProgram) -> NvrtcStatus;
        nvrtcCompileProgram: fn(nvrtcProgram, c_int, *const *const c_char) -> NvrtcStatus;
        nvrtcGetProgramLogSize: fn(nvrtcProgram, *mut usize) -> NvrtcStatus;
        nvrtcGetProgramLog: fn(nvrtcProgram, *mut c_char) -> NvrtcStatus;
        nvrtcGetCUBINSize: fn(nvrtcProgram, *mut usize) -> NvrtcStatus;
        nvrtcGetCUBIN: fn(nvrtcProgram, *mut c_char) -> NvrtcStatus;
    }
}

impl NvrtcApi {
    /// `Ok(())` for `NVRTC_SUCCESS`, else the [`Error::Api`] for `code` returned by `call`.
    pub(super) fn check(&self, code: NvrtcStatus, call: &'static str) -> Result<()> {
        if code == NVRTC_SUCCESS {
            Ok(())
        } else {
            Err(self.error(call, code))
        }
    }

    /// The [`Error::Api`] for `code` returned by `call`.
    pub(super) fn error(&self, call: &'static str, code: NvrtcStatus) -> Error {
        let name = self.error_name(code);
        let message = status_message(&name, "NVRTC_ERROR_");
        Error::Api {
            call,
            code,
            name,
            message,
            context: None,
        }
    }

    /// `nvrtcGetErrorString(code)` (which returns the symbolic name), or our own table.
    pub(super) fn error_name(&self, code: NvrtcStatus) -> String {
        if let Some(f) = self.nvrtcGetErrorString.f {
            // SAFETY: nvrtcGetErrorString takes any status and returns a static string or null.
            let s = unsafe { f(code) };
            if !s.is_null() {
                // SAFETY: a non-null result is a static NUL-terminated string owned by NVRTC.
                let name = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
                // NVRTC answers "NVRTC_ERROR unknown" for codes it does not know.
                if name.starts_with("NVRTC_") && !name.contains(' ') {
                    return name;
                }
            }
        }
        nvrtc_error_name(code)
    }
}

/// Maps the codes cudarc's enum lists to their names, checked against the enum at compile time.
macro_rules! status_names {
    ($code:expr, $enum:ident, $unknown:literal, [$($variant:ident),* $(,)?]) => {{
        let code = $code;
        $( if code == $enum::$variant as i32 { return stringify!($variant).to_string(); } )*
        format!(concat!($unknown, "({})"), code)
    }};
}

/// The symbolic name of a CUDA status, for when the driver cannot name it.
pub(super) fn cuda_error_name(code: CuStatus) -> String {
    status_names!(
        code,
        CUresult,
        "CUDA_ERROR_UNKNOWN_CODE",
        [
            CUDA_SUCCESS,
            CUDA_ERROR_INVALID_VALUE,
            CUDA_ERROR_OUT_OF_MEMORY,
            CUDA_ERROR_NOT_INITIALIZED,
            CUDA_ERROR_DEINITIALIZED,
            CUDA_ERROR_STUB_LIBRARY,
            CUDA_ERROR_NO_DEVICE,
            CUDA_ERROR_INVALID_DEVICE,
            CUDA_ERROR_INVALID_IMAGE,
            CUDA_ERROR_INVALID_CONTEXT,
            CUDA_ERROR_NO_BINARY_FOR_GPU,
            CUDA_ERROR_INVALID_PTX,
            CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
            CUDA_ERROR_INVALID_HANDLE,
            CUDA_ERROR_NOT_FOUND,
            CUDA_ERROR_NOT_READY,
            CUDA_ERROR_ILLEGAL_ADDRESS,
            CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
            CUDA_ERROR_LAUNCH_FAILED,
            CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
            CUDA_ERROR_NOT_SUPPORTED,
            CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
            CUDA_ERROR_UNKNOWN,
        ]
    )
}

/// The symbolic name of an NVRTC status, for when NVRTC cannot name it.
pub(super) fn nvrtc_error_name(code: NvrtcStatus) -> String {
    status_names!(
        code,
        nvrtcResult,
        "NVRTC_ERROR_UNKNOWN_CODE",
        [
            NVRTC_SUCCESS,
            NVRTC_ERROR_OUT_OF_MEMORY,
            NVRTC_ERROR_PROGRAM_CREATION_FAILURE,
            NVRTC_ERROR_INVALID_INPUT,
            NVRTC_ERROR_INVALID_PROGRAM,
            NVRTC_ERROR_INVALID_OPTION,
            NVRTC_ERROR_COMPILATION,
            NVRTC_ERROR_BUILTIN_OPERATION_FAILURE,
            NVRTC_ERROR_INTERNAL_ERROR,
        ]
    )
}

/// A readable message made from a status name: `CUDA_ERROR_OUT_OF_MEMORY` → `out of memory`.
pub(super) fn status_message(name: &str, prefix: &str) -> String {
    let stem = name.strip_prefix(prefix).unwrap_or(name);
    stem.to_ascii_lowercase().replace('_', " ")
}
