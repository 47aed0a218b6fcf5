//! Opening RCCL (AMD) or NCCL (NVIDIA) at run time, and calling through its table.
//!
//! Both libraries export the same C API under the same names (RCCL is a port of NCCL), so one
//! bindgen table ([`crate::sys::rccl::Rccl`]) serves both; which file is opened follows
//! [`hip_core::platform()`], since the streams and device pointers handed to the library are
//! that platform's. Every function is looked up when the library opens and checked at each
//! call: a function the installed release lacks (e.g. `ncclCommInitRankConfig` before NCCL
//! 2.14) is a [`hip_core::Error::MissingSymbol`] from that call, never a panic.

use std::ffi::{c_char, CStr};
use std::path::PathBuf;
use std::sync::OnceLock;

use hip_core::loader::LibrarySpec;
use hip_core::Platform;

use crate::error::{result, result_name, Error, Result};
use crate::sys::rccl as sys;

/// Calls a function of a [`Library`]'s table: `Ok(ncclResult_t)` or the missing-symbol error.
/// Use inside an `unsafe` block whose `SAFETY` comment covers the arguments.
macro_rules! call_raw {
    ($lib:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match &$lib.table().$f {
            Ok(f) => Ok(f($($arg),*)),
            Err(_) => Err($lib.missing(stringify!($f))),
        }
    };
}
pub(crate) use call_raw;

/// How RCCL is named in errors.
pub const RCCL: &str = "RCCL (librccl)";
/// How NCCL is named in errors.
pub const NCCL: &str = "NCCL (libnccl)";
/// RCCL's file names, in the order they are tried.
pub const RCCL_SONAMES: &[&str] = &["librccl.so.1", "librccl.so"];
/// NCCL's file names, in the order they are tried.
pub const NCCL_SONAMES: &[&str] = &["libnccl.so.2", "libnccl.so"];
/// `$RCCL_LIB_DIR`: a directory searched for RCCL before the usual ROCm places.
pub const RCCL_LIB_DIR_ENV: &str = "RCCL_LIB_DIR";
/// `$NCCL_LIB_DIR`: a directory searched for NCCL before the usual places.
pub const NCCL_LIB_DIR_ENV: &str = "NCCL_LIB_DIR";

/// How to fix a missing RCCL.
pub const RCCL_HINT: &str = "Install RCCL (AMD's ROCm `rccl` package, or Debian's librccl1), point ROCM_PATH at a ROCm install whose lib/ holds librccl.so.1, or set RCCL_LIB_DIR to the directory holding it; on NVIDIA GPUs set HIP_PLATFORM=nvidia (NCCL is used there)";
/// How to fix a missing NCCL.
pub const NCCL_HINT: &str = "Install NCCL (`pip install nvidia-nccl-cu12`, which PyTorch's CUDA wheels bring along, or NVIDIA's libnccl2 package), or set NCCL_LIB_DIR to the directory holding libnccl.so.2; on AMD GPUs set HIP_PLATFORM=amd (RCCL is used there)";

/// The opened RCCL or NCCL library.
pub struct Library {
    table: sys::Rccl,
    platform: Platform,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

static LIBRARY: OnceLock<Result<Library>> = OnceLock::new();

/// The process' collectives library for hip-core's platform (RCCL on `amd`, NCCL on
/// `nvidia`), opened on first use.
pub fn library() -> Result<&'static Library> {
    LIBRARY
        .get_or_init(|| {
            let platform = hip_core::platform()?;
            Library::open(platform)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// `dir` first, then `spec`'s own directories.
fn with_dir_first(mut spec: LibrarySpec, dir: Option<PathBuf>) -> LibrarySpec {
    if let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty()) {
        spec.dirs.retain(|d| d != &dir);
        spec.dirs.insert(0, dir);
    }
    spec
}

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Where RCCL is searched: `$RCCL_LIB_DIR`, then hip-core's ROCm directories
/// (`$ROCM_PATH/lib`, the ROCm Python wheels, `/opt/rocm/lib`), then the loader path.
pub fn rccl_spec() -> LibrarySpec {
    let mut spec = LibrarySpec::rocm(RCCL, RCCL_SONAMES);
    spec.hint = RCCL_HINT;
    with_dir_first(spec, env_dir(RCCL_LIB_DIR_ENV))
}

/// Where NCCL is searched: `$NCCL_LIB_DIR`, the `nvidia/nccl/lib` directory of NVIDIA's NCCL
/// Python wheel in the Python environments found ([`python_nccl_dirs`]), the CUDA toolkit's
/// directories, then the loader path.
pub fn nccl_spec() -> LibrarySpec {
    let mut dirs = python_nccl_dirs(&python_prefixes());
    for d in hip_core::loader::cuda_lib_dirs(env_dir("CUDA_PATH"), env_dir("CUDA_HOME")) {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    let spec = LibrarySpec {
        description: NCCL,
        sonames: NCCL_SONAMES,
        dirs,
        hint: NCCL_HINT,
    };
    with_dir_first(spec, env_dir(NCCL_LIB_DIR_ENV))
}

/// The Python installation prefixes whose site-packages may hold NVIDIA's NCCL wheel, in
/// order: `$VIRTUAL_ENV`, `$CONDA_PREFIX`, `~/.local`, `~/.venv`, `./.venv`, `/usr/local`,
/// `/usr`, `/opt/conda`, then the virtual environments of applications under `/opt`
/// (`/opt/*/.venv`, `/opt/*/venv`, sorted), where images often install PyTorch.
pub fn python_prefixes() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let home = env_dir("HOME");
    let mut candidates: Vec<PathBuf> = [
        env_dir("VIRTUAL_ENV"),
        env_dir("CONDA_PREFIX"),
        home.as_ref().map(|h| h.join(".local")),
        home.as_ref().map(|h| h.join(".venv")),
        Some(PathBuf::from(".venv")),
    ]
    .into_iter()
    .flatten()
    .chain(["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from))
    .collect();
    if let Ok(entries) = std::fs::read_dir("/opt") {
        let mut apps: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        apps.sort();
        for app in apps {
            for venv in [".venv", "venv"] {
                let p = app.join(venv);
                if p.is_dir() {
                    candidates.push(p);
                }
            }
        }
    }
    for p in candidates {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// The `nvidia/nccl/lib` directories that exist under each prefix's
/// `lib/python3*/{site,dist}-packages` (and `lib/python3/dist-packages`, Debian's), in prefix
/// order, each prefix's Python versions sorted by name.
pub fn python_nccl_dirs(prefixes: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for prefix in prefixes {
        let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with("python3"))
            })
            .map(|e| e.path())
            .collect();
        pythons.sort();
        for py in pythons {
            for site in ["site-packages", "dist-packages"] {
                let dir = py.join(site).join("nvidia/nccl/lib");
                if dir.is_dir() && !out.contains(&dir) {
                    out.push(dir);
                }
            }
        }
    }
    out
}

impl Library {
    /// Opens the platform's library: RCCL ([`rccl_spec`]) or NCCL ([`nccl_spec`]).
    pub fn open(platform: Platform) -> Result<Library> {
        let spec = match platform {
            Platform::Amd => rccl_spec(),
            Platform::Nvidia => nccl_spec(),
        };
        Self::open_spec(&spec, platform)
    }

    /// Opens the first file of `spec` that loads.
    pub fn open_spec(spec: &LibrarySpec, platform: Platform) -> Result<Library> {
        let library = spec.open()?;
        // SAFETY: `from_library` only looks the table's symbols up (dlsym); it calls none of
        // them. The prototypes are NCCL's C API, which RCCL and NCCL share.
        let table = unsafe { sys::Rccl::from_library(library) }.map_err(|e| {
            Error::Hip(hip_core::Error::Platform(format!(
                "{} loaded but its symbols could not be read: {e}",
                spec.description
            )))
        })?;
        Ok(Library { table, platform })
    }

    /// The platform whose streams and pointers this library takes.
    pub fn platform(&self) -> Platform {
        self.platform
    }

    /// `RCCL (librccl)` or `NCCL (libnccl)`.
    pub fn name(&self) -> &'static str {
        match self.platform {
            Platform::Amd => RCCL,
            Platform::Nvidia => NCCL,
        }
    }

    /// The function table, for calls the safe layer does not wrap.
    pub fn table(&self) -> &sys::Rccl {
        &self.table
    }

    /// The library's version code (`ncclGetVersion`: `major * 10000 + minor * 100 + patch`
    /// since NCCL 2.9).
    pub fn version_code(&self) -> Result<i32> {
        let mut v = 0;
        // SAFETY: `v` is a valid, writable int.
        let st = unsafe { call_raw!(self, ncclGetVersion(&mut v)) }?;
        self.check("ncclGetVersion", st, None)?;
        Ok(v)
    }

    /// The version as `major.minor.patch`.
    pub fn version(&self) -> Result<String> {
        let (major, minor, patch) = split_version(self.version_code()?);
        Ok(format!("{major}.{minor}.{patch}"))
    }

    /// Whether the library has `name` (a function of [`crate::sys::rccl::FUNCTIONS`]).
    pub fn has(&self, name: &str) -> bool {
        match name {
            "ncclCommInitRankConfig" => self.table.ncclCommInitRankConfig.is_ok(),
            "ncclCommFinalize" => self.table.ncclCommFinalize.is_ok(),
            "ncclGetLastError" => self.table.ncclGetLastError.is_ok(),
            _ => crate::sys::rccl::FUNCTIONS.contains(&name),
        }
    }

    /// `ncclGetErrorString(code)`.
    pub fn error_string(&self, code: u32) -> String {
        let Ok(f) = &self.table.ncclGetErrorString else {
            return String::from("(ncclGetErrorString is missing)");
        };
        // SAFETY: ncclGetErrorString takes any value and returns a static string.
        let p = unsafe { f(code) };
        // SAFETY: null or a static NUL-terminated string of the library.
        unsafe { c_string(p) }.unwrap_or_default()
    }

    /// `ncclGetLastError(comm)`: the library's last error message (per thread; `comm` may be
    /// null), `None` when the library has no such function or the message is empty.
    ///
    /// # Safety
    /// `comm` is null or a live communicator of this library.
    pub(crate) unsafe fn last_error(&self, comm: sys::ncclComm_t) -> Option<String> {
        let f = self.table.ncclGetLastError.as_ref().ok()?;
        // SAFETY: the caller's contract; the returned string is the library's own.
        let p = unsafe { f(comm) };
        // SAFETY: null or a NUL-terminated string valid until the next NCCL call on this thread.
        unsafe { c_string(p) }.filter(|s| !s.trim().is_empty())
    }

    /// `Ok(())` for `ncclSuccess`, else [`Error::Nccl`] naming `call`, with the library's
    /// description and last error. `comm` (or null) is asked for the last error.
    pub(crate) fn check(
        &self,
        call: &'static str,
        status: u32,
        comm: Option<sys::ncclComm_t>,
    ) -> Result<()> {
        if status == result::SUCCESS {
            return Ok(());
        }
        Err(self.error(call, status, comm))
    }

    /// The [`Error::Nccl`] for a failure `status` of `call`.
    pub(crate) fn error(
        &self,
        call: &'static str,
        status: u32,
        comm: Option<sys::ncclComm_t>,
    ) -> Error {
        // SAFETY: `comm` comes from a live communicator (the callers pass their own) or is
        // null, which ncclGetLastError accepts.
        let last_error = unsafe { self.last_error(comm.unwrap_or(std::ptr::null_mut())) };
        Error::Nccl {
            call,
            code: status,
            name: result_name(status),
            message: self.error_string(status),
            last_error,
            context: None,
        }
    }

    /// The error for a function this library lacks.
    pub(crate) fn missing(&self, symbol: &'static str) -> Error {
        Error::Hip(hip_core::Error::MissingSymbol {
            library: self.name().to_string(),
            symbol,
        })
    }
}

/// `(major, minor, patch)` of an `ncclGetVersion` code (NCCL's two encodings: `X*1000 + Y*100
/// + Z` up to 2.8, `X*10000 + Y*100 + Z` since 2.9).
pub fn split_version(code: i32) -> (i32, i32, i32) {
    if code >= 10000 {
        (code / 10000, (code % 10000) / 100, code % 100)
    } else {
        (code / 1000, (code % 1000) / 100, code % 100)
    }
}

/// Reads a C string owned by the library into an owned `String`.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that stays valid during the call.
pub(crate) unsafe fn c_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh, empty directory under the system temp dir (removed by the caller).
    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rccl-safe-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn versions_split_in_both_encodings() {
        assert_eq!(split_version(21304), (2, 13, 4));
        assert_eq!(split_version(22203), (2, 22, 3));
        assert_eq!(split_version(2708), (2, 7, 8));
    }

    #[test]
    fn nccl_wheels_are_found_under_python_prefixes() {
        let root = temp_dir("wheels");
        let venv = root.join("venv");
        let usr = root.join("usr");
        for d in [
            "venv/lib/python3.12/site-packages/nvidia/nccl/lib",
            "venv/lib/python3.11/site-packages/numpy",
            "usr/lib/python3/dist-packages/nvidia/nccl/lib",
            "usr/lib/python3.10/site-packages/nvidia/nccl/lib",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let dirs = python_nccl_dirs(&[venv.clone(), root.join("missing"), usr.clone()]);
        assert_eq!(
            dirs,
            vec![
                venv.join("lib/python3.12/site-packages/nvidia/nccl/lib"),
                usr.join("lib/python3/dist-packages/nvidia/nccl/lib"),
                usr.join("lib/python3.10/site-packages/nvidia/nccl/lib"),
            ]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_missing_library_is_one_error_naming_the_search_and_the_fix() {
        let spec = with_dir_first(
            LibrarySpec {
                description: RCCL,
                sonames: &["librccl_safe_does_not_exist.so.1"],
                dirs: hip_core::loader::rocm_lib_dirs(Some(PathBuf::from("/nowhere/rocm"))),
                hint: RCCL_HINT,
            },
            Some(PathBuf::from("/my/rccl")),
        );
        let err = Library::open_spec(&spec, Platform::Amd).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::Hip(hip_core::Error::LibraryNotFound { library, .. }) if library == RCCL
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        for needle in [
            "/my/rccl/librccl_safe_does_not_exist.so.1",
            "/nowhere/rocm/lib/librccl_safe_does_not_exist.so.1",
            "/opt/rocm/lib/librccl_safe_does_not_exist.so.1",
            "RCCL_LIB_DIR",
            "HIP_PLATFORM=nvidia",
        ] {
            assert!(msg.contains(needle), "{needle} not in: {msg}");
        }
        // One sentence of hint, no line breaks.
        assert!(!msg.contains('\n'), "{msg}");
    }

    #[test]
    fn nccl_search_names_its_env_dir_first_and_the_cuda_dirs() {
        // Only this test sets the variable.
        std::env::set_var(NCCL_LIB_DIR_ENV, "/custom/nccl/lib");
        let spec = nccl_spec();
        std::env::remove_var(NCCL_LIB_DIR_ENV);
        assert_eq!(spec.dirs[0], PathBuf::from("/custom/nccl/lib"));
        assert!(spec
            .dirs
            .contains(&PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib")));
        assert_eq!(spec.sonames, NCCL_SONAMES);
        assert!(spec.hint.contains("nvidia-nccl-cu12"));
    }

    #[test]
    fn rccl_search_uses_the_rocm_dirs() {
        let spec = rccl_spec();
        assert!(spec.dirs.contains(&PathBuf::from("/opt/rocm/lib")));
        assert_eq!(spec.sonames, RCCL_SONAMES);
    }
}
