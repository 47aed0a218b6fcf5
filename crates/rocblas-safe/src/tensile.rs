//! rocBLAS' GEMM kernels (its Tensile library): finding them and checking that they cover the
//! device *before* rocBLAS does.
//!
//! rocBLAS loads its Tensile library on the first GEMM of a device. When the files are missing,
//! or hold no kernels for the device's architecture, it prints `rocBLAS error: Cannot read
//! .../TensileLibrary.dat` and calls `abort()`: the process dies, and no Rust code can catch it.
//! [`Handle::new`](crate::Handle::new) therefore runs the same search rocBLAS will run and
//! refuses to create a handle, with [`Error::MissingTensileKernels`] naming the directory, the
//! architecture and the fix, when rocBLAS would abort.
//!
//! # The search (rocBLAS 4.4, ROCm 6.4, `library/src/tensile_host.cpp`; Debian's build)
//!
//! 1. The base directory: `$ROCBLAS_TENSILE_LIBPATH` when set; else, from the directory `L` of
//!    the loaded `librocblas`, the first of these that exists ([`base_candidates`]):
//!    `L/rocblas/<version>/library` (Debian's patch: `/usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library`),
//!    `L/../../Tensile/library`, `L/library`, `L/../rocblas/library`; else `L/rocblas/library`
//!    (AMD's packages: `/opt/rocm/lib/rocblas/library`).
//! 2. The directory: `<base>/<arch>` when that exists, else `<base>` ([`select_dir`]).
//! 3. The library file in it: `TensileLibrary_lazy_<arch>.dat`, else `TensileLibrary_<arch>.dat`,
//!    else `TensileLibrary.dat`; none readable is the abort.
//! 4. The code objects, `*<arch>*co` (`.co` and `.hsaco`), without `Experimental` ones and
//!    without those built for the other XNACK mode than the device's. rocBLAS only warns when
//!    there are none, and fails at the first GEMM that needs one; the check requires at least
//!    one.
//!
//! `<arch>` is the processor part of the device's `gcnArchName`, without its target features
//! (`gfx90a:sramecc+:xnack-` is `gfx90a`), as rocBLAS spells it. Steps 2 to 4 are pure functions
//! over a directory listing ([`check_files`]), tested without ROCm; [`check_arch`] runs them
//! against the real file system and the loaded rocBLAS.
//!
//! What the check cannot see: a library file that exists but is corrupt or was built for
//! another rocBLAS version (rocBLAS aborts with "Could not initialize Tensile library"), and
//! GEMM shapes whose kernels a complete directory still lacks (an error status, not an abort).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// `$ROCBLAS_TENSILE_LIBPATH`: rocBLAS' own variable naming its Tensile directory.
pub const TENSILE_LIBPATH_ENV: &str = "ROCBLAS_TENSILE_LIBPATH";

/// The directory rocBLAS uses when it cannot tell where `librocblas` was loaded from.
pub const DEFAULT_LIBRARY_DIR: &str = "/opt/rocm/lib";

/// An AMD GPU target as `gcnArchName` spells it: a processor and optional target features.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GfxTarget {
    /// The processor, e.g. `gfx90a`, `gfx942`, `gfx1100` (what rocBLAS names its files after).
    pub processor: String,
    /// XNACK: `Some(true)` for `xnack+`, `Some(false)` for `xnack-`, `None` when unspecified.
    pub xnack: Option<bool>,
    /// SRAM ECC: `Some(true)` for `sramecc+`, `Some(false)` for `sramecc-`, `None` when
    /// unspecified.
    pub sramecc: Option<bool>,
}

impl GfxTarget {
    /// Parses a `gcnArchName` (`gfx90a:sramecc+:xnack-`, `gfx1100`). Surrounding white space is
    /// ignored; unknown features are ignored (rocBLAS reads only XNACK).
    pub fn parse(arch: &str) -> GfxTarget {
        let mut parts = arch.trim().split(':');
        let processor = parts.next().unwrap_or_default().trim().to_string();
        let (mut xnack, mut sramecc) = (None, None);
        for feature in parts {
            match feature.trim() {
                "xnack+" => xnack = Some(true),
                "xnack-" => xnack = Some(false),
                "sramecc+" => sramecc = Some(true),
                "sramecc-" => sramecc = Some(false),
                _ => {}
            }
        }
        GfxTarget {
            processor,
            xnack,
            sramecc,
        }
    }
}

impl fmt::Display for GfxTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)?;
        let sign = |on: bool| if on { '+' } else { '-' };
        if let Some(on) = self.sramecc {
            write!(f, ":sramecc{}", sign(on))?;
        }
        if let Some(on) = self.xnack {
            write!(f, ":xnack{}", sign(on))?;
        }
        Ok(())
    }
}

/// How the Tensile base directory was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseSource {
    /// `$ROCBLAS_TENSILE_LIBPATH`.
    Env,
    /// Relative to the loaded `librocblas`, in this directory.
    Library(PathBuf),
    /// rocBLAS' built-in default (`/opt/rocm/lib`), the library's own place being unknown.
    Default,
}

impl fmt::Display for BaseSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BaseSource::Env => write!(f, "from ${TENSILE_LIBPATH_ENV}"),
            BaseSource::Library(dir) => {
                write!(f, "next to the loaded librocblas in {}", dir.display())
            }
            BaseSource::Default => write!(f, "rocBLAS' default, {DEFAULT_LIBRARY_DIR}"),
        }
    }
}

/// The Tensile base directory rocBLAS will use, and how it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensileBase {
    /// The directory (as rocBLAS builds it: a string concatenation, `..` kept).
    pub dir: PathBuf,
    /// How it was chosen.
    pub source: BaseSource,
    /// Every candidate looked at, in order (empty for [`BaseSource::Env`]).
    pub tried: Vec<PathBuf>,
}

/// `a + "/" + b`, as rocBLAS concatenates its paths (so `""` + `"/x"` is `/x`).
fn concat(a: &OsStr, b: &str) -> PathBuf {
    let mut s = OsString::from(a);
    s.push("/");
    s.push(b);
    PathBuf::from(s)
}

/// The base directories rocBLAS tries next to a library loaded from `library_dir`, in order;
/// the last is its fallback, used even when it does not exist. `version` is rocBLAS'
/// `major.minor.patch` (the directory Debian's build looks in first).
pub fn base_candidates(library_dir: &Path, version: Option<&str>) -> Vec<PathBuf> {
    let l = library_dir.as_os_str();
    let mut out = Vec::new();
    if let Some(v) = version.filter(|v| !v.is_empty()) {
        out.push(concat(l, &format!("rocblas/{v}/library")));
    }
    for rel in [
        "../../Tensile/library",
        "library",
        "../rocblas/library",
        "rocblas/library",
    ] {
        out.push(concat(l, rel));
    }
    out
}

/// The base directory rocBLAS will use: `env` (`$ROCBLAS_TENSILE_LIBPATH`, even when empty, as
/// rocBLAS takes it) when set, else the first existing candidate of [`base_candidates`] for
/// `library_dir` (or [`DEFAULT_LIBRARY_DIR`] when unknown), else the last candidate.
pub fn resolve_base(
    env: Option<&OsStr>,
    library_dir: Option<&Path>,
    version: Option<&str>,
    exists: &dyn Fn(&Path) -> bool,
) -> TensileBase {
    if let Some(env) = env {
        return TensileBase {
            dir: PathBuf::from(env),
            source: BaseSource::Env,
            tried: Vec::new(),
        };
    }
    let (lib, source) = match library_dir {
        Some(d) => (d.to_path_buf(), BaseSource::Library(d.to_path_buf())),
        None => (PathBuf::from(DEFAULT_LIBRARY_DIR), BaseSource::Default),
    };
    let tried = base_candidates(&lib, version);
    let dir = tried
        .iter()
        .find(|c| exists(c))
        .or(tried.last())
        .cloned()
        .unwrap_or(lib);
    TensileBase { dir, source, tried }
}

/// The directory rocBLAS reads for `processor`: `<base>/<processor>` when it is a directory,
/// else `base`.
pub fn select_dir(base: &Path, processor: &str, is_dir: &dyn Fn(&Path) -> bool) -> PathBuf {
    let sub = concat(base.as_os_str(), processor);
    if !processor.is_empty() && is_dir(&sub) {
        sub
    } else {
        base.to_path_buf()
    }
}

/// What a Tensile directory holds for one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensileFiles {
    /// The library file rocBLAS will load (e.g. `TensileLibrary_lazy_gfx90a.dat`).
    pub library_file: String,
    /// Whether that is a lazy-loading library (kernels loaded on first use).
    pub lazy: bool,
    /// The code objects for the device (`*<arch>*co`, matching its XNACK mode), sorted.
    pub code_objects: Vec<String>,
}

/// Why a Tensile directory cannot serve a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensileProblem {
    /// The device reported no architecture name.
    NoArch,
    /// The directory does not exist.
    DirectoryMissing,
    /// The directory could not be listed.
    Unreadable(String),
    /// None of the library files rocBLAS looks for is there: rocBLAS would abort.
    NoLibraryFile {
        /// The names looked for, in rocBLAS' order.
        expected: Vec<String>,
    },
    /// The library file is there but no code object for the device is.
    NoCodeObjects {
        /// The library file that was found.
        library_file: String,
        /// The pattern the code objects must match.
        pattern: String,
    },
}

impl fmt::Display for TensileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TensileProblem::NoArch => f.write_str("the device reports no architecture name"),
            TensileProblem::DirectoryMissing => f.write_str("the directory does not exist"),
            TensileProblem::Unreadable(e) => write!(f, "the directory cannot be read ({e})"),
            TensileProblem::NoLibraryFile { expected } => {
                write!(f, "it holds none of {}", expected.join(", "))
            }
            TensileProblem::NoCodeObjects {
                library_file,
                pattern,
            } => write!(
                f,
                "it holds {library_file} but no code object matching {pattern}"
            ),
        }
    }
}

/// The library files rocBLAS looks for, in its order.
pub fn library_file_names(processor: &str) -> [String; 3] {
    [
        format!("TensileLibrary_lazy_{processor}.dat"),
        format!("TensileLibrary_{processor}.dat"),
        "TensileLibrary.dat".to_string(),
    ]
}

/// Whether `name` matches the shell pattern `*<processor>*co`, as `glob()` does (no leading
/// dot).
fn matches_code_object(name: &str, processor: &str) -> bool {
    if name.starts_with('.') || processor.is_empty() {
        return false;
    }
    match name.find(processor) {
        Some(i) => name[i + processor.len()..].ends_with("co"),
        None => false,
    }
}

/// Checks the listing `names` of the directory rocBLAS reads ([`select_dir`]) for `target`:
/// the library file rocBLAS will load and at least one code object for the device, as
/// described in the [module docs](self). Pure: the caller lists the directory.
pub fn check_files<S: AsRef<str>>(
    names: &[S],
    target: &GfxTarget,
) -> std::result::Result<TensileFiles, TensileProblem> {
    let p = target.processor.as_str();
    if p.is_empty() {
        return Err(TensileProblem::NoArch);
    }
    let expected = library_file_names(p);
    let has = |n: &str| names.iter().any(|x| x.as_ref() == n);
    let Some(library_file) = expected.iter().find(|n| has(n)).cloned() else {
        return Err(TensileProblem::NoLibraryFile {
            expected: expected.to_vec(),
        });
    };
    let skip = match target.xnack {
        Some(true) => Some("xnack-"),
        Some(false) => Some("xnack+"),
        None => None,
    };
    let mut code_objects: Vec<String> = names
        .iter()
        .map(|n| n.as_ref())
        .filter(|n| matches_code_object(n, p))
        .filter(|n| !n.contains("Experimental"))
        .filter(|n| skip.is_none_or(|s| !n.contains(s)))
        .map(str::to_string)
        .collect();
    if code_objects.is_empty() {
        return Err(TensileProblem::NoCodeObjects {
            library_file,
            pattern: format!("*{p}*co"),
        });
    }
    code_objects.sort();
    let lazy = library_file == expected[0];
    Ok(TensileFiles {
        library_file,
        lazy,
        code_objects,
    })
}

/// The architectures a Tensile listing has library files or directories for
/// (`TensileLibrary_lazy_<arch>.dat`, `TensileLibrary_<arch>.dat`, `<arch>/`), sorted, without
/// duplicates; for error messages.
pub fn available_archs<S: AsRef<str>>(names: &[S]) -> Vec<String> {
    let is_arch = |s: &str| {
        s.len() > 3
            && s.starts_with("gfx")
            && s[3..]
                .chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
    };
    let mut out: Vec<String> = names
        .iter()
        .map(|n| n.as_ref())
        .filter_map(|n| {
            let arch = n
                .strip_prefix("TensileLibrary_lazy_")
                .or_else(|| n.strip_prefix("TensileLibrary_"))
                .and_then(|r| r.strip_suffix(".dat"))
                .unwrap_or(n);
            is_arch(arch).then(|| arch.to_string())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A Tensile directory that serves a device: where, how it was found, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensileLibrary {
    /// The directory rocBLAS will read.
    pub dir: PathBuf,
    /// How its base directory was chosen.
    pub source: BaseSource,
    /// The files found for the device.
    pub files: TensileFiles,
}

/// The names in `dir` (files and directories), or why they cannot be read.
fn list_dir(dir: &Path) -> std::result::Result<Vec<String>, TensileProblem> {
    // rocBLAS builds "" + "/TensileLibrary..." for an empty directory: the root.
    let dir = if dir.as_os_str().is_empty() {
        Path::new("/")
    } else {
        dir
    };
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(TensileProblem::DirectoryMissing),
        Err(e) => Err(TensileProblem::Unreadable(e.to_string())),
    }
}

/// Runs the search and the check for `target` from an already resolved base directory, on
/// the real file system.
pub fn check_base(base: &TensileBase, target: &GfxTarget) -> Result<TensileLibrary> {
    let dir = select_dir(&base.dir, &target.processor, &|p: &Path| p.is_dir());
    let listing = list_dir(&dir);
    let result = listing
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|names| check_files(names, target));
    match result {
        Ok(files) => Ok(TensileLibrary {
            dir,
            source: base.source.clone(),
            files,
        }),
        Err(problem) => {
            // What the base directory does hold, to say which architectures are there.
            let mut available = listing.map(|n| available_archs(&n)).unwrap_or_default();
            if dir != base.dir {
                if let Ok(names) = list_dir(&base.dir) {
                    available.extend(available_archs(&names));
                    available.sort();
                    available.dedup();
                }
            }
            Err(Error::MissingTensileKernels {
                arch: target.processor.clone(),
                dir,
                source_of_dir: base.source.to_string(),
                problem: problem.to_string(),
                available,
            })
        }
    }
}

/// `major.minor.patch` of a rocBLAS version string (`4.4.1.` or `4.4.1.abcdef`), when it has
/// three numeric parts.
pub fn short_version(version: &str) -> Option<String> {
    let parts: Vec<&str> = version.split('.').take(3).collect();
    (parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())))
    .then(|| parts.join("."))
}

/// Checks that the rocBLAS this process uses has GEMM kernels for `arch` (a `gcnArchName`, e.g.
/// `gfx90a:sramecc+:xnack-`): runs rocBLAS' search from `$ROCBLAS_TENSILE_LIBPATH` or the
/// loaded library's directory, and [`check_files`] on what it finds. Opens rocBLAS if needed;
/// needs no GPU. [`Handle::new`](crate::Handle::new) calls this on the AMD platform; it is public
/// for a preflight check and for tests. On the `nvidia` platform there is nothing to check and
/// this is an [`Error::Unsupported`].
pub fn check_arch(arch: &str) -> Result<TensileLibrary> {
    match crate::backend::backend()? {
        crate::backend::Backend::Amd(lib) => {
            let base = lib.tensile_base()?;
            check_base(&base, &GfxTarget::parse(arch))
        }
        crate::backend::Backend::Nvidia(_) => Err(Error::Unsupported {
            op: "tensile::check_arch",
            dtype: "the nvidia platform".into(),
            reason: "cuBLAS has no Tensile library".into(),
        }),
    }
}

/// The Tensile base directory the rocBLAS of this process will use (see [`resolve_base`]).
/// Opens rocBLAS if needed; needs no GPU. An [`Error::Unsupported`] on the `nvidia` platform.
pub fn base_dir() -> Result<TensileBase> {
    match crate::backend::backend()? {
        crate::backend::Backend::Amd(lib) => lib.tensile_base(),
        crate::backend::Backend::Nvidia(_) => Err(Error::Unsupported {
            op: "tensile::base_dir",
            dtype: "the nvidia platform".into(),
            reason: "cuBLAS has no Tensile library".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> GfxTarget {
        GfxTarget::parse(s)
    }

    /// A slice of Debian's librocblas4 6.4.4 `rocblas/4.4.1/library` listing.
    const DEBIAN: &[&str] = &[
        "Kernels.so-000-gfx1030.hsaco",
        "Kernels.so-000-gfx90a-xnack+.hsaco",
        "Kernels.so-000-gfx90a-xnack-.hsaco",
        "TensileLibrary_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_CU104_gfx90a.co",
        "TensileLibrary_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_CU104_gfx90a.dat",
        "TensileLibrary_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback.dat",
        "TensileLibrary_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback_gfx1030.hsaco",
        "TensileLibrary_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback_gfx90a-xnack+.hsaco",
        "TensileLibrary_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback_gfx90a-xnack-.hsaco",
        "TensileLibrary_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_gfx1030.co",
        "TensileLibrary_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_gfx1030.dat",
        "TensileLibrary_lazy_gfx1030.dat",
        "TensileLibrary_lazy_gfx90a.dat",
    ];

    #[test]
    fn targets_parse_like_gcn_arch_name() {
        let g = t("gfx90a:sramecc+:xnack-");
        assert_eq!(g.processor, "gfx90a");
        assert_eq!((g.xnack, g.sramecc), (Some(false), Some(true)));
        assert_eq!(g.to_string(), "gfx90a:sramecc+:xnack-");
        let g = t(" gfx1100 ");
        assert_eq!(
            (g.processor.as_str(), g.xnack, g.sramecc),
            ("gfx1100", None, None)
        );
        assert_eq!(t("gfx942:xnack+:foo").xnack, Some(true));
        assert_eq!(t("").processor, "");
    }

    #[test]
    fn the_lazy_library_and_the_matching_code_objects_are_found() {
        let f = check_files(DEBIAN, &t("gfx90a:sramecc+:xnack-")).unwrap();
        assert_eq!(f.library_file, "TensileLibrary_lazy_gfx90a.dat");
        assert!(f.lazy);
        // The xnack+ builds are skipped for an xnack- device; the .dat files are not code objects.
        assert_eq!(
            f.code_objects,
            vec![
                "Kernels.so-000-gfx90a-xnack-.hsaco",
                "TensileLibrary_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_CU104_gfx90a.co",
                "TensileLibrary_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback_gfx90a-xnack-.hsaco",
            ]
        );
        // Unspecified XNACK: both builds count.
        assert_eq!(
            check_files(DEBIAN, &t("gfx90a"))
                .unwrap()
                .code_objects
                .len(),
            5
        );
        let f = check_files(DEBIAN, &t("gfx1030")).unwrap();
        assert_eq!(f.code_objects.len(), 3);
    }

    #[test]
    fn a_missing_arch_is_no_library_file() {
        let err = check_files(DEBIAN, &t("gfx942:sramecc+:xnack-")).unwrap_err();
        assert_eq!(
            err,
            TensileProblem::NoLibraryFile {
                expected: vec![
                    "TensileLibrary_lazy_gfx942.dat".into(),
                    "TensileLibrary_gfx942.dat".into(),
                    "TensileLibrary.dat".into()
                ]
            }
        );
        assert!(err.to_string().contains("TensileLibrary_lazy_gfx942.dat"));
        let empty: &[&str] = &[];
        assert!(matches!(
            check_files(empty, &t("gfx1100")),
            Err(TensileProblem::NoLibraryFile { .. })
        ));
        assert_eq!(check_files(DEBIAN, &t("")), Err(TensileProblem::NoArch));
    }

    #[test]
    fn library_files_are_taken_in_rocblas_order() {
        let names = [
            "TensileLibrary.dat",
            "TensileLibrary_gfx1100.dat",
            "TensileLibrary_lazy_gfx1100.dat",
            "x_gfx1100.co",
        ];
        let f = check_files(&names, &t("gfx1100")).unwrap();
        assert_eq!(
            (f.library_file.as_str(), f.lazy),
            ("TensileLibrary_lazy_gfx1100.dat", true)
        );
        let f = check_files(&names[..2], &t("gfx1100")).unwrap_err();
        assert!(matches!(f, TensileProblem::NoCodeObjects { .. }), "{f:?}");
        let f = check_files(
            &["TensileLibrary_gfx1100.dat", "a_gfx1100.hsaco"],
            &t("gfx1100"),
        )
        .unwrap();
        assert_eq!(
            (f.library_file.as_str(), f.lazy),
            ("TensileLibrary_gfx1100.dat", false)
        );
        // The monolithic library of old builds serves every arch that has code objects.
        let f = check_files(
            &["TensileLibrary.dat", "Kernels.so-000-gfx906.hsaco"],
            &t("gfx906"),
        )
        .unwrap();
        assert_eq!(f.library_file, "TensileLibrary.dat");
        assert!(matches!(
            check_files(
                &["TensileLibrary.dat", "Kernels.so-000-gfx906.hsaco"],
                &t("gfx908")
            ),
            Err(TensileProblem::NoCodeObjects { .. })
        ));
    }

    #[test]
    fn code_objects_match_like_glob() {
        assert!(matches_code_object("a_gfx90a.co", "gfx90a"));
        assert!(matches_code_object("gfx90a.hsaco", "gfx90a"));
        assert!(!matches_code_object(".hidden_gfx90a.co", "gfx90a"));
        assert!(!matches_code_object("a_gfx90a.dat", "gfx90a"));
        assert!(!matches_code_object("a_gfx908.co", "gfx90a"));
        // `*gfx90a*co` needs "co" after the processor, not overlapping it.
        assert!(!matches_code_object("gfx90co", "gfx90co"));
        let names = ["TensileLibrary_lazy_gfx90a.dat", "Experimental_gfx90a.co"];
        assert!(matches!(
            check_files(&names, &t("gfx90a")),
            Err(TensileProblem::NoCodeObjects { .. })
        ));
    }

    #[test]
    fn available_archs_come_from_library_files_and_arch_dirs() {
        assert_eq!(available_archs(DEBIAN), vec!["gfx1030", "gfx90a"]);
        assert_eq!(
            available_archs(&[
                "gfx942",
                "gfx90a",
                "TensileLibrary_gfx1100.dat",
                "library",
                "x.co"
            ]),
            vec!["gfx1100", "gfx90a", "gfx942"]
        );
    }

    #[test]
    fn base_candidates_follow_rocblas_order() {
        let c = base_candidates(Path::new("/usr/lib/x86_64-linux-gnu"), Some("4.4.1"));
        assert_eq!(
            c,
            vec![
                PathBuf::from("/usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/../../Tensile/library"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/library"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/../rocblas/library"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/rocblas/library"),
            ]
        );
        assert_eq!(base_candidates(Path::new("/opt/rocm/lib"), None).len(), 4);
    }

    #[test]
    fn the_base_is_the_env_else_the_first_existing_candidate_else_the_fallback() {
        let lib = Path::new("/opt/rocm/lib");
        let none = |_: &Path| false;
        let b = resolve_base(Some(OsStr::new("/my/tensile")), Some(lib), None, &none);
        assert_eq!(
            (b.dir, b.source),
            (PathBuf::from("/my/tensile"), BaseSource::Env)
        );
        let b = resolve_base(None, Some(lib), None, &none);
        assert_eq!(b.dir, PathBuf::from("/opt/rocm/lib/rocblas/library"));
        assert_eq!(b.source, BaseSource::Library(lib.to_path_buf()));
        assert_eq!(b.tried.len(), 4);
        let only = |p: &Path| p == Path::new("/opt/rocm/lib/library");
        assert_eq!(
            resolve_base(None, Some(lib), None, &only).dir,
            PathBuf::from("/opt/rocm/lib/library")
        );
        let debian = |p: &Path| p.ends_with("rocblas/4.4.1/library") || p.ends_with("library");
        assert_eq!(
            resolve_base(None, Some(lib), Some("4.4.1"), &debian).dir,
            PathBuf::from("/opt/rocm/lib/rocblas/4.4.1/library")
        );
        let b = resolve_base(None, None, None, &none);
        assert_eq!(b.source, BaseSource::Default);
        assert_eq!(b.dir, PathBuf::from("/opt/rocm/lib/rocblas/library"));
        // Set but empty: rocBLAS concatenates "" + "/<arch>", i.e. the root.
        let b = resolve_base(Some(OsStr::new("")), Some(lib), None, &none);
        assert_eq!(b.dir, PathBuf::new());
        assert_eq!(
            select_dir(&b.dir, "gfx90a", &|p: &Path| p == Path::new("/gfx90a")),
            PathBuf::from("/gfx90a")
        );
    }

    #[test]
    fn an_arch_subdirectory_is_preferred() {
        let base = Path::new("/t/library");
        let yes = |p: &Path| p == Path::new("/t/library/gfx942");
        assert_eq!(
            select_dir(base, "gfx942", &yes),
            PathBuf::from("/t/library/gfx942")
        );
        assert_eq!(
            select_dir(base, "gfx90a", &yes),
            PathBuf::from("/t/library")
        );
        assert_eq!(
            select_dir(base, "", &|_: &Path| true),
            PathBuf::from("/t/library")
        );
    }

    #[test]
    fn versions_shorten_to_major_minor_patch() {
        assert_eq!(short_version("4.4.1.").as_deref(), Some("4.4.1"));
        assert_eq!(short_version("4.4.1.3ad0a8e2").as_deref(), Some("4.4.1"));
        assert_eq!(short_version("5.0.0-rc1"), None);
        assert_eq!(short_version(""), None);
    }

    /// A fresh directory under the temp dir.
    fn temp_dir(tag: &str) -> PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let d = std::env::temp_dir().join(format!(
            "rocblas-safe-tensile-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn check_base_reads_the_file_system_and_names_the_fix() {
        let root = temp_dir("fs");
        let lib = root.join("lib");
        let library = lib.join("rocblas/library");
        std::fs::create_dir_all(library.join("gfx942")).unwrap();
        for f in [
            "TensileLibrary_lazy_gfx1100.dat",
            "TensileLibrary_Type_HH_gfx1100.co",
        ] {
            std::fs::write(library.join(f), b"").unwrap();
        }
        for f in ["TensileLibrary_lazy_gfx942.dat", "k_gfx942.co"] {
            std::fs::write(library.join("gfx942").join(f), b"").unwrap();
        }
        let base = resolve_base(None, Some(&lib), Some("4.4.1"), &|p: &Path| p.exists());
        assert_eq!(base.dir, lib.join("rocblas/library"));
        let ok = check_base(&base, &t("gfx1100")).unwrap();
        assert_eq!(ok.dir, library);
        assert_eq!(ok.files.library_file, "TensileLibrary_lazy_gfx1100.dat");
        // An arch subdirectory is read instead of the base.
        let ok = check_base(&base, &t("gfx942:sramecc+:xnack-")).unwrap();
        assert_eq!(ok.dir, library.join("gfx942"));
        let err = check_base(&base, &t("gfx90a:sramecc+:xnack-")).unwrap_err();
        match &err {
            Error::MissingTensileKernels {
                arch,
                dir,
                available,
                ..
            } => {
                assert_eq!(arch, "gfx90a");
                assert_eq!(dir, &library);
                assert_eq!(
                    available,
                    &vec!["gfx1100".to_string(), "gfx942".to_string()]
                );
            }
            other => panic!("{other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("gfx90a"), "{msg}");
        assert!(msg.contains(&library.display().to_string()), "{msg}");
        assert!(msg.contains("TensileLibrary_lazy_gfx90a.dat"), "{msg}");
        assert!(msg.contains(TENSILE_LIBPATH_ENV), "{msg}");
        assert!(msg.contains("CANDLE_ROCM_TENSILE_ARCHS"), "{msg}");
        assert!(msg.contains("gfx1100, gfx942"), "{msg}");
        // A directory that does not exist at all.
        let gone = TensileBase {
            dir: root.join("nowhere"),
            source: BaseSource::Env,
            tried: vec![],
        };
        let msg = check_base(&gone, &t("gfx90a")).unwrap_err().to_string();
        assert!(msg.contains("does not exist"), "{msg}");
        assert!(msg.contains("ROCBLAS_TENSILE_LIBPATH"), "{msg}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
