//! Shared by the tier-2 tests of hip-core, rocblas-safe and miopen-safe (each includes this file
//! with `#[path]`): where the real ROCm libraries are, which functions a library exports, and
//! whether hip-core chose the AMD platform.
//!
//! The library directory is `HIP_CORE_ROCM_LIB_DIR`, else `$ROCM_PATH/lib`, else
//! `/opt/rocm/lib`.

use std::path::{Path, PathBuf};

use object::read::elf::ElfFile64;
use object::{Object, ObjectSymbol};

/// The directory the tests take the ROCm libraries from.
pub fn rocm_lib_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("HIP_CORE_ROCM_LIB_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(p) = std::env::var_os("ROCM_PATH").filter(|p| !p.is_empty()) {
        return PathBuf::from(p).join("lib");
    }
    PathBuf::from("/opt/rocm/lib")
}

/// The first of `sonames` present in the library directory, with symlinks resolved.
pub fn find_library(sonames: &[&str]) -> PathBuf {
    let dir = rocm_lib_dir();
    for name in sonames {
        let path = dir.join(name);
        if path.exists() {
            return std::fs::canonicalize(&path)
                .unwrap_or_else(|e| panic!("resolving {}: {e}", path.display()));
        }
    }
    panic!(
        "{} holds none of {}: set HIP_CORE_ROCM_LIB_DIR (or ROCM_PATH, whose lib/ is used) to \
         the directory of the ROCm 6.4 libraries, e.g. ~/.cache/candle-rocm/rocm-deb/rocm/lib, \
         or run `cargo xtask test`",
        dir.display(),
        sonames.join(", ")
    );
}

/// The functions a shared library defines in its dynamic symbol table.
pub fn exported_functions(path: &Path) -> std::collections::HashSet<String> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let file = ElfFile64::<object::Endianness>::parse(&*data)
        .unwrap_or_else(|e| panic!("{} is not a 64-bit ELF file: {e}", path.display()));
    file.dynamic_symbols()
        .filter(|s| s.is_definition())
        .filter_map(|s| s.name().ok().map(str::to_string))
        .collect()
}

/// Asserts that the library found under `sonames` exports every one of `functions` (a
/// bindings table's `FUNCTIONS` list).
pub fn assert_exports(sonames: &[&str], functions: &[&str]) {
    let path = find_library(sonames);
    let exported = exported_functions(&path);
    let missing: Vec<&str> = functions
        .iter()
        .copied()
        .filter(|f| !exported.contains(*f))
        .collect();
    assert!(
        missing.is_empty(),
        "{} does not export {} (of the {} functions in the bindings' table)",
        path.display(),
        missing.join(", "),
        functions.len()
    );
    println!(
        "{}: all {} functions of the table are exported",
        path.display(),
        functions.len()
    );
}

/// Fails with the fix when the AMD platform was not chosen.
pub fn assert_amd_platform() {
    match hip_core::platform() {
        Ok(hip_core::Platform::Amd) => {}
        Ok(other) => panic!("hip-core chose the {other} platform; run with HIP_PLATFORM=amd"),
        Err(e) => panic!(
            "the HIP runtime did not load: {e}\n(ROCM_PATH={:?}; the test binary must run under a \
             loader that can open the ROCm libraries, e.g. the installer's bin/sid-run)",
            std::env::var_os("ROCM_PATH")
        ),
    }
}
