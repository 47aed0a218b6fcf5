//! Opening vendor libraries at run time.
//!
//! A library is looked for under each directory of a search list, trying each soname in order,
//! and finally by bare soname through the system loader's path (`LD_LIBRARY_PATH`,
//! `ld.so.cache`). When nothing opens, the error lists every candidate that was tried and says
//! how to fix it. rocblas-safe and miopen-safe use the same loader.
//!
//! ROCm libraries ([`LibrarySpec::rocm`]) are searched in, in order ([`rocm_search_dirs`]):
//!
//! 1. `$ROCM_PATH/lib`; when `ROCM_PATH` is itself a directory of a ROCm Python wheel
//!    (`.../site-packages/_rocm_sdk_core`), the `lib/` of its sibling wheels too
//!    (`_rocm_sdk_libraries_*`, which hold rocBLAS and MIOpen);
//! 2. the ROCm wheels of every site-packages directory listed in `$ROCM_SITE_PACKAGES`
//!    (`:`-separated);
//! 3. `/opt/rocm/lib`;
//! 4. the ROCm wheels of the active Python environment (`$VIRTUAL_ENV`, then `$CONDA_PREFIX`:
//!    `lib/python3.*/site-packages`).
//!
//! ROCm 7's Python wheels (TheRock: `pip install "rocm[libraries]"`) put the libraries in
//! `site-packages/_rocm_sdk_core/lib/` (HIP runtime, hipRTC) and
//! `site-packages/_rocm_sdk_libraries*/lib/` (rocBLAS, MIOpen, ...), with versioned sonames only
//! (`libamdhip64.so.7`, `libhiprtc.so.7`, `librocblas.so.5`, `libMIOpen.so.1`): every spec lists
//! those names.

use std::path::{Path, PathBuf};

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
pub const ROCM_HINT: &str = "Install ROCm (https://rocm.docs.amd.com) or point ROCM_PATH at an existing installation (its lib/ directory must hold the library); for ROCm's Python wheels (pip install \"rocm[libraries]\") set ROCM_SITE_PACKAGES to their site-packages directory; on NVIDIA GPUs set HIP_PLATFORM=nvidia";

/// `$ROCM_SITE_PACKAGES`: `:`-separated Python site-packages directories searched for ROCm's
/// Python wheels (`_rocm_sdk_core/lib`, `_rocm_sdk_libraries*/lib`, `_rocm_sdk_devel/lib`).
pub const ROCM_SITE_PACKAGES_ENV: &str = "ROCM_SITE_PACKAGES";

/// The environment that decides where ROCm libraries are searched (see [`rocm_search_dirs`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RocmSearchEnv {
    /// `$ROCM_PATH`.
    pub rocm_path: Option<PathBuf>,
    /// `$ROCM_SITE_PACKAGES`, split at `:`.
    pub site_packages: Vec<PathBuf>,
    /// `$VIRTUAL_ENV` (an active Python virtual environment).
    pub virtual_env: Option<PathBuf>,
    /// `$CONDA_PREFIX` (an active conda environment).
    pub conda_prefix: Option<PathBuf>,
}

impl RocmSearchEnv {
    /// The values of this process' environment.
    pub fn from_env() -> Self {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        RocmSearchEnv {
            rocm_path: var("ROCM_PATH"),
            site_packages: std::env::var_os(ROCM_SITE_PACKAGES_ENV)
                .map(|v| {
                    std::env::split_paths(&v)
                        .filter(|p| !p.as_os_str().is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            virtual_env: var("VIRTUAL_ENV"),
            conda_prefix: var("CONDA_PREFIX"),
        }
    }
}

impl LibrarySpec {
    /// A ROCm library searched in the directories of [`rocm_search_dirs`] (`$ROCM_PATH/lib`,
    /// the ROCm Python wheels of `$ROCM_SITE_PACKAGES`, `/opt/rocm/lib`, the active Python
    /// environment's ROCm wheels), then the loader path.
    pub fn rocm(description: &'static str, sonames: &'static [&'static str]) -> Self {
        LibrarySpec {
            description,
            sonames,
            dirs: rocm_search_dirs(&RocmSearchEnv::from_env()),
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

/// The directories searched for ROCm libraries without Python wheels: `$ROCM_PATH/lib` (when
/// set), `/opt/rocm/lib`.
pub fn rocm_lib_dirs(rocm_path: Option<PathBuf>) -> Vec<PathBuf> {
    rocm_search_dirs(&RocmSearchEnv {
        rocm_path,
        ..RocmSearchEnv::default()
    })
}

/// The directories searched for ROCm libraries, in order (each at most once):
///
/// 1. `$ROCM_PATH/lib`, and when `$ROCM_PATH` is a wheel directory inside a site-packages
///    (its name starts with `_rocm_sdk_`), the ROCm wheels of that site-packages;
/// 2. the ROCm wheels of each `$ROCM_SITE_PACKAGES` directory;
/// 3. `/opt/rocm/lib`;
/// 4. the ROCm wheels of `$VIRTUAL_ENV` and `$CONDA_PREFIX` (`lib/python3*/site-packages`).
///
/// The wheel directories are found by listing the file system ([`rocm_wheel_lib_dirs`]); a
/// directory that does not exist is simply not listed. `$ROCM_PATH/lib`, the
/// `$ROCM_SITE_PACKAGES` wheels and `/opt/rocm/lib` are listed whether or not they exist, so
/// that an error names them.
pub fn rocm_search_dirs(env: &RocmSearchEnv) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let push = |d: PathBuf, dirs: &mut Vec<PathBuf>| {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    };
    if let Some(p) = env.rocm_path.as_ref().filter(|p| !p.as_os_str().is_empty()) {
        push(p.join("lib"), &mut dirs);
        let in_wheel = p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(WHEEL_PREFIX));
        if let (true, Some(site)) = (in_wheel, p.parent()) {
            for d in rocm_wheel_lib_dirs(site) {
                push(d, &mut dirs);
            }
        }
    }
    for site in env
        .site_packages
        .iter()
        .filter(|p| !p.as_os_str().is_empty())
    {
        let found = rocm_wheel_lib_dirs(site);
        if found.is_empty() {
            // Named in the error even when absent: the user asked for this place.
            push(site.join("_rocm_sdk_core").join("lib"), &mut dirs);
        }
        for d in found {
            push(d, &mut dirs);
        }
    }
    push(PathBuf::from("/opt/rocm/lib"), &mut dirs);
    for prefix in [&env.virtual_env, &env.conda_prefix].into_iter().flatten() {
        for site in python_site_packages(prefix) {
            for d in rocm_wheel_lib_dirs(&site) {
                push(d, &mut dirs);
            }
        }
    }
    dirs
}

/// The name prefix of the directories ROCm's Python wheels install into site-packages.
const WHEEL_PREFIX: &str = "_rocm_sdk_";

/// The `lib/` directories of the ROCm Python wheels installed in `site_packages`:
/// `_rocm_sdk_core/lib` first (the HIP runtime and hipRTC), then `_rocm_sdk_libraries*/lib`
/// (rocBLAS, MIOpen, ...), then any other `_rocm_sdk_*/lib` (e.g. `_rocm_sdk_devel`), each
/// group sorted by name. Only directories that exist are returned; an unreadable
/// `site_packages` gives none.
pub fn rocm_wheel_lib_dirs(site_packages: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(site_packages) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(WHEEL_PREFIX))
        .collect();
    let rank = |n: &str| match n {
        "_rocm_sdk_core" => 0,
        n if n.starts_with("_rocm_sdk_libraries") => 1,
        _ => 2,
    };
    names.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
    names
        .into_iter()
        .map(|n| site_packages.join(n).join("lib"))
        .filter(|d| d.is_dir())
        .collect()
}

/// `<prefix>/lib/python3*/site-packages` directories that exist, sorted by name.
fn python_site_packages(prefix: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("python3"))
        })
        .map(|e| e.path().join("site-packages"))
        .filter(|d| d.is_dir())
        .collect();
    out.sort();
    out
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

    /// A fresh, empty directory under the system temp dir (removed by the caller).
    fn temp_dir(tag: &str) -> PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let d = std::env::temp_dir().join(format!(
            "hip-core-loader-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A TheRock-style site-packages: `_rocm_sdk_core/lib`, two library wheels, a devel wheel,
    /// an unrelated package and a `_rocm_sdk_*` directory without `lib/`.
    fn fake_site_packages(root: &Path) -> PathBuf {
        let site = root.join("lib/python3.12/site-packages");
        for d in [
            "_rocm_sdk_devel/lib",
            "_rocm_sdk_libraries_gfx94X_dcgpu/lib",
            "_rocm_sdk_core/lib",
            "_rocm_sdk_libraries_custom/lib",
            "numpy/core",
            "_rocm_sdk_no_lib",
        ] {
            std::fs::create_dir_all(site.join(d)).unwrap();
        }
        std::fs::write(site.join("_rocm_sdk_core/lib/libamdhip64.so.7"), b"").unwrap();
        site
    }

    #[test]
    fn wheel_dirs_are_core_then_libraries_then_the_rest() {
        let root = temp_dir("wheels");
        let site = fake_site_packages(&root);
        assert_eq!(
            rocm_wheel_lib_dirs(&site),
            vec![
                site.join("_rocm_sdk_core/lib"),
                site.join("_rocm_sdk_libraries_custom/lib"),
                site.join("_rocm_sdk_libraries_gfx94X_dcgpu/lib"),
                site.join("_rocm_sdk_devel/lib"),
            ]
        );
        assert!(rocm_wheel_lib_dirs(&root.join("missing")).is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn search_order_with_wheels() {
        let root = temp_dir("order");
        let venv = root.join("venv");
        let site = fake_site_packages(&venv);
        let explicit = fake_site_packages(&root.join("explicit"));
        let env = RocmSearchEnv {
            rocm_path: Some(PathBuf::from("/my/rocm")),
            site_packages: vec![explicit.clone(), root.join("nowhere")],
            virtual_env: Some(venv.clone()),
            conda_prefix: Some(root.join("no-conda")),
        };
        let dirs = rocm_search_dirs(&env);
        let mut expected = vec![PathBuf::from("/my/rocm/lib")];
        expected.extend(rocm_wheel_lib_dirs(&explicit));
        expected.push(root.join("nowhere/_rocm_sdk_core/lib"));
        expected.push(PathBuf::from("/opt/rocm/lib"));
        expected.extend(rocm_wheel_lib_dirs(&site));
        assert_eq!(dirs, expected);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn rocm_path_inside_a_wheel_adds_its_sibling_wheels() {
        let root = temp_dir("rocm-path-wheel");
        let site = fake_site_packages(&root);
        let core = site.join("_rocm_sdk_core");
        let dirs = rocm_search_dirs(&RocmSearchEnv {
            rocm_path: Some(core.clone()),
            ..RocmSearchEnv::default()
        });
        assert_eq!(dirs[0], core.join("lib"));
        assert_eq!(dirs[1], site.join("_rocm_sdk_libraries_custom/lib"));
        assert_eq!(dirs[2], site.join("_rocm_sdk_libraries_gfx94X_dcgpu/lib"));
        assert_eq!(dirs[3], site.join("_rocm_sdk_devel/lib"));
        assert_eq!(dirs[4], PathBuf::from("/opt/rocm/lib"));
        assert_eq!(dirs.len(), 5, "{dirs:?}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_library_in_a_wheel_is_found_and_a_missing_one_names_the_wheel_dirs() {
        let root = temp_dir("open");
        let site = fake_site_packages(&root);
        // A real shared object to open: the C library this test process already uses.
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib64/libc.so.6",
            "/lib64/libc.so.6",
        ]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists());
        let dirs = rocm_search_dirs(&RocmSearchEnv {
            site_packages: vec![site.clone()],
            ..RocmSearchEnv::default()
        });
        if let Some(libc) = libc {
            let dst = site.join("_rocm_sdk_libraries_custom/lib/libhipcore_wheel_test.so.5");
            std::fs::copy(libc, &dst).unwrap();
            let spec = LibrarySpec {
                description: "a wheel library",
                sonames: &["libhipcore_wheel_test.so.4", "libhipcore_wheel_test.so.5"],
                dirs: dirs.clone(),
                hint: ROCM_HINT,
            };
            assert!(spec.open().is_ok(), "{:?}", spec.candidates());
        }
        let spec = LibrarySpec {
            description: "the missing library (libhipcore_missing)",
            sonames: &["libhipcore_missing.so.7"],
            dirs,
            hint: ROCM_HINT,
        };
        let msg = spec.open().unwrap_err().to_string();
        for d in [
            "_rocm_sdk_core/lib",
            "_rocm_sdk_libraries_custom/lib",
            "_rocm_sdk_devel/lib",
        ] {
            let path = site.join(d).join("libhipcore_missing.so.7");
            assert!(msg.contains(&path.display().to_string()), "{msg}");
        }
        assert!(
            msg.contains("/opt/rocm/lib/libhipcore_missing.so.7"),
            "{msg}"
        );
        assert!(msg.contains("ROCM_SITE_PACKAGES"), "{msg}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_search_env_reads_the_site_packages_list() {
        // Only this test sets the variable; the others build their RocmSearchEnv by hand.
        std::env::set_var(ROCM_SITE_PACKAGES_ENV, "/a/site-packages::/b/site-packages");
        let env = RocmSearchEnv::from_env();
        std::env::remove_var(ROCM_SITE_PACKAGES_ENV);
        assert_eq!(
            env.site_packages,
            vec![
                PathBuf::from("/a/site-packages"),
                PathBuf::from("/b/site-packages")
            ]
        );
    }
}
