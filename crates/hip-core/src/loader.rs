//! Opening vendor libraries at run time.
//!
//! A library is looked for under each directory of a search list (by default `$ROCM_PATH/lib`,
//! then `/opt/rocm/lib`), trying each soname in order, and finally by bare soname through the
//! system loader's path (`LD_LIBRARY_PATH`, `ld.so.cache`). When nothing opens, the error lists
//! every candidate that was tried and says how to fix it. rocblas-safe and miopen-safe use the
//! same loader.

use std::path::PathBuf;

use crate::error::{Error, Result};

/// What to load and where to look.
#[derive(Debug, Clone)]
pub struct LibrarySpec {
    /// Human description used in errors, e.g. `the HIP runtime (libamdhip64)`.
    pub description: &'static str,
    /// File names to try in order, e.g. `["libamdhip64.so.6", "libamdhip64.so.7", "libamdhip64.so"]`.
    pub sonames: &'static [&'static str],
    /// Directories to try before the system loader path, in order.
    pub dirs: Vec<PathBuf>,
    /// How to fix a missing library.
    pub hint: &'static str,
}

/// Hint for every ROCm library.
pub const ROCM_HINT: &str = "Install ROCm (https://rocm.docs.amd.com) or point ROCM_PATH at an existing installation (its lib/ directory must hold the library); on NVIDIA GPUs set HIP_PLATFORM=nvidia";

impl LibrarySpec {
    /// A ROCm library searched in `$ROCM_PATH/lib`, `/opt/rocm/lib`, then the loader path.
    pub fn rocm(description: &'static str, sonames: &'static [&'static str]) -> Self {
        LibrarySpec {
            description,
            sonames,
            dirs: rocm_lib_dirs(std::env::var_os("ROCM_PATH").map(PathBuf::from)),
            hint: ROCM_HINT,
        }
    }

    /// Every candidate, in the order they are tried: each directory × each soname, then each
    /// bare soname (resolved by the system loader).
    pub fn candidates(&self) -> Vec<String> {
        let mut out = Vec::new();
        for dir in &self.dirs {
            for name in self.sonames {
                out.push(dir.join(name).display().to_string());
            }
        }
        out.extend(self.sonames.iter().map(|s| s.to_string()));
        out
    }

    /// Opens the first candidate that loads.
    pub fn open(&self) -> Result<libloading::Library> {
        let mut last_error = String::new();
        let candidates = self.candidates();
        for candidate in &candidates {
            // An absolute candidate that does not exist is skipped without asking the loader,
            // so that `last_error` reports a real failure (e.g. a missing dependency).
            if candidate.starts_with('/') && !std::path::Path::new(candidate).exists() {
                continue;
            }
            // SAFETY: loading a vendor runtime library runs its initialisers; these libraries are
            // designed to be dlopen'ed by applications, and we call nothing until symbols resolve.
            match unsafe { libloading::Library::new(candidate) } {
                Ok(lib) => return Ok(lib),
                Err(e) => last_error = e.to_string(),
            }
        }
        Err(Error::LibraryNotFound {
            library: self.description.to_string(),
            searched: candidates,
            hint: self.hint.to_string(),
            last_error,
        })
    }
}

/// How to fix a missing CUDA toolkit library (NVRTC, cuBLAS, cuDNN) on the `nvidia` platform.
pub const CUDA_TOOLKIT_HINT: &str = "Install the CUDA toolkit (and cuDNN for convolutions), or point CUDA_PATH at an existing CUDA installation; on AMD GPUs set HIP_PLATFORM=amd";

impl LibrarySpec {
    /// A CUDA toolkit library (NVRTC, cuBLAS, cuDNN) searched in `lib64` of `$CUDA_PATH`,
    /// `$CUDA_HOME` and `/usr/local/cuda`, the toolkit's target directory, the distribution's
    /// library directory, then the loader path.
    pub fn cuda_toolkit(description: &'static str, sonames: &'static [&'static str]) -> Self {
        LibrarySpec {
            description,
            sonames,
            dirs: cuda_lib_dirs(
                std::env::var_os("CUDA_PATH").map(PathBuf::from),
                std::env::var_os("CUDA_HOME").map(PathBuf::from),
            ),
            hint: CUDA_TOOLKIT_HINT,
        }
    }
}

/// The directories searched for CUDA toolkit libraries, given `$CUDA_PATH` and `$CUDA_HOME`.
pub fn cuda_lib_dirs(cuda_path: Option<PathBuf>, cuda_home: Option<PathBuf>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let roots = [cuda_path, cuda_home, Some(PathBuf::from("/usr/local/cuda"))];
    for root in roots.into_iter().flatten() {
        let dir = root.join("lib64");
        if !root.as_os_str().is_empty() && !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"));
    dirs.push(PathBuf::from("/usr/lib/x86_64-linux-gnu"));
    dirs
}

/// The directories searched for ROCm libraries: `$ROCM_PATH/lib` (when set), `/opt/rocm/lib`.
pub fn rocm_lib_dirs(rocm_path: Option<PathBuf>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(p) = rocm_path.filter(|p| !p.as_os_str().is_empty()) {
        dirs.push(p.join("lib"));
    }
    let default = PathBuf::from("/opt/rocm/lib");
    if !dirs.contains(&default) {
        dirs.push(default);
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_order_is_rocm_path_then_opt_rocm_then_loader() {
        let spec = LibrarySpec {
            description: "the HIP runtime (libamdhip64)",
            sonames: &["libamdhip64.so.6", "libamdhip64.so.7"],
            dirs: rocm_lib_dirs(Some(PathBuf::from("/my/rocm"))),
            hint: ROCM_HINT,
        };
        assert_eq!(
            spec.candidates(),
            vec![
                "/my/rocm/lib/libamdhip64.so.6",
                "/my/rocm/lib/libamdhip64.so.7",
                "/opt/rocm/lib/libamdhip64.so.6",
                "/opt/rocm/lib/libamdhip64.so.7",
                "libamdhip64.so.6",
                "libamdhip64.so.7",
            ]
        );
    }

    #[test]
    fn missing_library_error_names_every_path_and_the_fix() {
        let spec = LibrarySpec {
            description: "the test library (libhipcore_does_not_exist)",
            sonames: &["libhipcore_does_not_exist.so.6"],
            dirs: rocm_lib_dirs(Some(PathBuf::from("/nonexistent/rocm"))),
            hint: ROCM_HINT,
        };
        let err = spec.open().unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::LibraryNotFound { .. }));
        assert!(
            msg.contains("/nonexistent/rocm/lib/libhipcore_does_not_exist.so.6"),
            "{msg}"
        );
        assert!(
            msg.contains("/opt/rocm/lib/libhipcore_does_not_exist.so.6"),
            "{msg}"
        );
        assert!(msg.contains("ROCM_PATH"), "{msg}");
        assert!(msg.contains("Install ROCm"), "{msg}");
    }

    #[test]
    fn empty_rocm_path_is_ignored() {
        assert_eq!(
            rocm_lib_dirs(Some(PathBuf::new())),
            vec![PathBuf::from("/opt/rocm/lib")]
        );
        assert_eq!(
            rocm_lib_dirs(Some(PathBuf::from("/opt/rocm"))),
            vec![PathBuf::from("/opt/rocm/lib")]
        );
    }
}
