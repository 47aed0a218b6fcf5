//! Run-time compilation of HIP sources with NVRTC.
//!
//! HIP sources are compiled unchanged: `#include <hip/hip_runtime.h>`, `<hip/hip_fp16.h>` and
//! `<hip/hip_bf16.h>` resolve to small virtual headers of our own (NVRTC's `headers` /
//! `includeNames` arrays) that map the few HIP spellings CUDA lacks. The result is a CUBIN for the
//! requested `sm_XX` architecture.

use std::ffi::{c_char, c_int, CString};
use std::path::{Path, PathBuf};

use cudarc::nvrtc::sys::nvrtcProgram;

use super::api::{
    call, raw_call, NvrtcApi, NvrtcStatus, NVRTC_ERROR_INVALID_OPTION, NVRTC_SUCCESS,
};
use crate::error::{Error, Result};

/// `<hip/hip_runtime.h>` as NVRTC sees it.
pub(super) const HIP_RUNTIME_SHIM: &str = include_str!("../hip_nvrtc_shim.h");
/// `<hip/hip_fp16.h>` as NVRTC sees it.
pub(super) const HIP_FP16_SHIM: &str = include_str!("hip_fp16_shim.h");
/// `<hip/hip_bf16.h>` as NVRTC sees it.
pub(super) const HIP_BF16_SHIM: &str = include_str!("hip_bf16_shim.h");

/// The virtual headers: `(include name, contents)`.
pub(super) const VIRTUAL_HEADERS: [(&str, &str); 3] = [
    ("hip/hip_runtime.h", HIP_RUNTIME_SHIM),
    ("hip/hip_fp16.h", HIP_FP16_SHIM),
    ("hip/hip_bf16.h", HIP_BF16_SHIM),
];

/// CUDA toolkit include directories that exist on this machine, in search order: `include` (and
/// CUDA 13's `include/cccl`) under `$CUDA_PATH`, `$CUDA_HOME`, then `/usr/local/cuda`. NVRTC
/// brings most headers it needs; these are the fallback for `cuda_fp16.h`/`cuda_bf16.h`.
pub(super) fn cuda_include_dirs(
    cuda_path: Option<PathBuf>,
    cuda_home: Option<PathBuf>,
    exists: impl Fn(&Path) -> bool,
) -> Vec<PathBuf> {
    let roots = [cuda_path, cuda_home, Some(PathBuf::from("/usr/local/cuda"))];
    let mut dirs: Vec<PathBuf> = Vec::new();
    for root in roots.into_iter().flatten() {
        if root.as_os_str().is_empty() {
            continue;
        }
        for dir in [root.join("include"), root.join("include").join("cccl")] {
            if !dirs.contains(&dir) && exists(&dir) {
                dirs.push(dir);
            }
        }
    }
    dirs
}

/// The option that runs NVRTC's optimisation passes on all the machine's threads (NVRTC 12.1+):
/// a module of many kernels compiles about 4x faster on 16 cores (attention: 71 s -> 17 s on the
/// GPU machine), with semantically equivalent code (device functions must be `__forceinline__`
/// to stay inlined across the split; a few kernels measured up to 9% slower). Set
/// [`SPLIT_COMPILE_VAR`]`=0` to compile on one thread.
pub(super) const SPLIT_COMPILE: &str = "--split-compile=0";

/// Environment variable that turns [`SPLIT_COMPILE`] off when it is `0`.
pub const SPLIT_COMPILE_VAR: &str = "HIP_CORE_NVRTC_SPLIT_COMPILE";

/// The NVRTC options for one compilation: the architecture, device code by default, C++17 (unless
/// the caller picks a standard), parallel optimisation ([`SPLIT_COMPILE`], when `split` and the
/// caller does not set it), the caller's options, then the toolkit include directories (so that
/// the caller's own `-I` directories win).
pub(super) fn compile_options(
    arch: &str,
    user: &[String],
    include_dirs: &[PathBuf],
    split: bool,
) -> Vec<String> {
    let mut opts = vec![
        format!("--gpu-architecture={arch}"),
        "-default-device".to_string(),
    ];
    let picks_std = user
        .iter()
        .any(|o| o.starts_with("-std") || o.starts_with("--std"));
    if !picks_std {
        opts.push("--std=c++17".to_string());
    }
    let picks_split = user
        .iter()
        .any(|o| o.starts_with("-split-compile") || o.starts_with("--split-compile"));
    if split && !picks_split {
        opts.push(SPLIT_COMPILE.to_string());
    }
    opts.extend(user.iter().cloned());
    opts.extend(
        include_dirs
            .iter()
            .map(|d| format!("--include-path={}", d.display())),
    );
    opts
}

/// A C string for NVRTC, or [`Error::InvalidArgument`] if `s` holds a NUL byte.
fn c_string(what: &str, s: &str) -> Result<CString> {
    CString::new(s)
        .map_err(|_| Error::invalid("rtc_compile", format!("{what} contains a NUL byte")))
}

/// An NVRTC program, destroyed on drop.
struct Program<'a> {
    api: &'a NvrtcApi,
    handle: nvrtcProgram,
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: `handle` came from nvrtcCreateProgram and is destroyed exactly once, here.
        // A failure to free it cannot be reported from drop and leaks only the program.
        let _ = unsafe { raw_call!(self.api, nvrtcDestroyProgram(&mut self.handle)) };
    }
}

impl Program<'_> {
    /// The compilation log, trimmed; empty when NVRTC has none.
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: `handle` is a live program; `size` is a valid out-pointer.
        let sized = unsafe { call!(self.api, nvrtcGetProgramLogSize(self.handle, &mut size)) };
        if sized.is_err() || size == 0 {
            return String::new();
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds the `size` bytes (NUL included) that nvrtcGetProgramLogSize asked for.
        let read = unsafe {
            call!(
                self.api,
                nvrtcGetProgramLog(self.handle, buf.as_mut_ptr().cast::<c_char>())
            )
        };
        if read.is_err() {
            return String::new();
        }
        String::from_utf8_lossy(&buf)
            .trim_end_matches('\0')
            .trim()
            .to_string()
    }
}

/// Compiles `source` to a CUBIN for `arch` (e.g. `sm_90`).
pub(super) fn compile(
    api: &NvrtcApi,
    program: &str,
    source: &str,
    arch: &str,
    options: &[String],
) -> Result<Vec<u8>> {
    let c_source = c_string("the source", source)?;
    let c_name = c_string("the program name", program)?;
    let header_contents = VIRTUAL_HEADERS
        .iter()
        .map(|(_, text)| c_string("a virtual header", text))
        .collect::<Result<Vec<_>>>()?;
    let header_names = VIRTUAL_HEADERS
        .iter()
        .map(|(name, _)| c_string("a virtual header name", name))
        .collect::<Result<Vec<_>>>()?;
    let content_ptrs: Vec<*const c_char> = header_contents.iter().map(|s| s.as_ptr()).collect();
    let name_ptrs: Vec<*const c_char> = header_names.iter().map(|s| s.as_ptr()).collect();

    let include_dirs = cuda_include_dirs(
        std::env::var_os("CUDA_PATH").map(PathBuf::from),
        std::env::var_os("CUDA_HOME").map(PathBuf::from),
        Path::is_dir,
    );
    let compile_with = |split: bool| -> Result<(Program<'_>, NvrtcStatus, Vec<String>)> {
        let option_strings = compile_options(arch, options, &include_dirs, split);
        let opts = option_strings
            .iter()
            .map(|o| c_string("a compiler option", o))
            .collect::<Result<Vec<_>>>()?;
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|s| s.as_ptr()).collect();
        let mut handle: nvrtcProgram = std::ptr::null_mut();
        // SAFETY: every string is NUL-terminated and outlives the call (NVRTC copies them); the
        // two header arrays both hold `VIRTUAL_HEADERS.len()` pointers.
        unsafe {
            call!(
                api,
                nvrtcCreateProgram(
                    &mut handle,
                    c_source.as_ptr(),
                    c_name.as_ptr(),
                    content_ptrs.len() as c_int,
                    content_ptrs.as_ptr(),
                    name_ptrs.as_ptr(),
                )
            )
        }?;
        let prog = Program { api, handle };
        // SAFETY: `handle` is live; `opt_ptrs` holds `opt_ptrs.len()` NUL-terminated options
        // that outlive the call.
        let status: NvrtcStatus = unsafe {
            raw_call!(
                api,
                nvrtcCompileProgram(prog.handle, opt_ptrs.len() as c_int, opt_ptrs.as_ptr())
            )
        }?;
        Ok((prog, status, option_strings))
    };
    let split = std::env::var(SPLIT_COMPILE_VAR).map_or(true, |v| v.trim() != "0");
    let (mut prog, mut status, mut option_strings) = compile_with(split)?;
    if status == NVRTC_ERROR_INVALID_OPTION && option_strings.iter().any(|o| o == SPLIT_COMPILE) {
        // An NVRTC older than 12.1 does not know the option: compile on one thread.
        (prog, status, option_strings) = compile_with(false)?;
    }
    if status != NVRTC_SUCCESS {
        let mut log = prog.log();
        if !log.is_empty() {
            log.push('\n');
        }
        log.push_str(&format!(
            "nvrtcCompileProgram returned {} ({status}); options: {}",
            api.error_name(status),
            option_strings.join(" ")
        ));
        return Err(Error::Compile {
            program: program.to_string(),
            arch: arch.to_string(),
            log,
        });
    }

    let mut size = 0usize;
    // SAFETY: `handle` is a live, compiled program; `size` is a valid out-pointer.
    unsafe { call!(api, nvrtcGetCUBINSize(prog.handle, &mut size)) }?;
    if size == 0 {
        return Err(Error::Compile {
            program: program.to_string(),
            arch: arch.to_string(),
            log: format!(
                "NVRTC produced no CUBIN: `{arch}` is not a real GPU architecture (use sm_XX)"
            ),
        });
    }
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` holds the `size` bytes nvrtcGetCUBINSize reported.
    unsafe {
        call!(
            api,
            nvrtcGetCUBIN(prog.handle, cubin.as_mut_ptr().cast::<c_char>())
        )
    }?;
    Ok(cubin)
}

/// `"nvrtc MAJOR.MINOR (hip shim DIGEST)"`: the compiler's version plus a digest of the virtual
/// headers, so that compilation caches keyed on it are invalidated when the shim changes.
pub(super) fn version(api: &NvrtcApi) -> Result<String> {
    let (mut major, mut minor) = (0 as c_int, 0 as c_int);
    // SAFETY: two valid out-pointers.
    unsafe { call!(api, nvrtcVersion(&mut major, &mut minor)) }?;
    Ok(format!(
        "nvrtc {major}.{minor} (hip shim {})",
        shim_digest()
    ))
}

/// The first 8 hex digits of the SHA-256 of every virtual header's name and contents.
pub(super) fn shim_digest() -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for (name, text) in VIRTUAL_HEADERS {
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update((text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
    }
    hasher.finalize()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
