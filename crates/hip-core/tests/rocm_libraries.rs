//! Tier-2 tests: against the real ROCm libraries, on a machine without an AMD GPU.
//!
//! The tests marked `#[ignore]` need the ROCm 6.4 libraries; `cargo xtask test` runs them with
//! `--ignored`, under the loader that those libraries need. They read:
//!
//! * `HIP_CORE_ROCM_LIB_DIR`, else `$ROCM_PATH/lib`, else `/opt/rocm/lib`: the directory holding
//!   `libamdhip64.so.6` and `libhiprtc.so.6` (the symbol-table tests read the files there);
//! * `ROCM_PATH`, as hip-core itself does, to open the libraries (the driver tests);
//! * `HIP_PLATFORM`: unset or `amd` (the driver tests check that the AMD platform was chosen).
//!
//! The symbol-table tests parse the ELF files and need no special loader; the driver tests
//! `dlopen` the libraries, so the test binary must run under a loader that can (on the Debian
//! packages built for a newer glibc: `/opt/rocm-deb/bin/sid-run`).
//!
//! `missing_runtime_is_library_not_found_naming_every_path` needs no ROCm and runs everywhere.

use std::path::PathBuf;
use std::process::Command;

use object::read::elf::{ElfFile64, FileHeader};
use object::{Object, ObjectSymbol};

#[allow(dead_code)] // shared with other crates' tier-2 tests; not every helper is used here
#[path = "support/rocm_libs.rs"]
mod rocm_libs;
use rocm_libs::{assert_amd_platform, assert_exports};

const HIP_SONAMES: &[&str] = &["libamdhip64.so.6", "libamdhip64.so.7", "libamdhip64.so"];
const HIPRTC_SONAMES: &[&str] = &["libhiprtc.so.6", "libhiprtc.so.7", "libhiprtc.so"];

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn hip_runtime_exports_every_function_of_the_table() {
    assert_exports(HIP_SONAMES, hip_core::sys::hip::FUNCTIONS);
}

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn hiprtc_exports_every_function_of_the_table() {
    assert_exports(HIPRTC_SONAMES, hip_core::sys::hiprtc::FUNCTIONS);
}

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn without_a_gpu_init_reports_no_device_cleanly() {
    assert_amd_platform();
    let count = hip_core::device_count().expect("device_count with no GPU must be Ok(0)");
    if count > 0 {
        println!("{count} AMD GPU(s) present: this test is for machines without one");
        return;
    }
    match hip_core::Device::new(0) {
        Err(e @ hip_core::Error::NoDevice { .. }) => println!("Device::new(0): {e}"),
        Err(e) => panic!("expected Error::NoDevice, got {e:?}"),
        Ok(_) => panic!("Device::new(0) succeeded with device_count() == 0"),
    }
    match hip_core::Device::new(3) {
        Err(hip_core::Error::NoDevice { .. }) => {}
        other => panic!(
            "expected Error::NoDevice for ordinal 3, got {:?}",
            other.err()
        ),
    }
}

const EF_AMDGPU_MACH: u32 = 0x0ff;
const EF_AMDGPU_MACH_AMDGCN_GFX942: u32 = 0x04c;
const EF_AMDGPU_MACH_AMDGCN_GFX1100: u32 = 0x041;

fn kernel_source(nonce: &str) -> String {
    format!(
        r#"#include <hip/hip_runtime.h>
// {nonce}
extern "C" __global__ void scale(float* x, float a, unsigned n) {{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}}
"#
    )
}

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn hiprtc_compiles_for_gfx942_and_gfx1100_without_a_gpu() {
    assert_amd_platform();
    // A fresh nonce makes every run a real compilation, not a cache hit; the cached file is
    // removed afterwards.
    let nonce = format!(
        "hip-core tier-2 test {} {:?}",
        std::process::id(),
        std::time::SystemTime::now()
    );
    let source = kernel_source(&nonce);
    for (arch, mach) in [
        ("gfx942", EF_AMDGPU_MACH_AMDGCN_GFX942),
        ("gfx942:sramecc+:xnack-", EF_AMDGPU_MACH_AMDGCN_GFX942),
        ("gfx1100", EF_AMDGPU_MACH_AMDGCN_GFX1100),
    ] {
        let compiled = hip_core::rtc::compile("scale", &source, arch, &[])
            .unwrap_or_else(|e| panic!("compiling for {arch}: {e}"));
        if let Some(dir) = hip_core::rtc::cache_dir() {
            let _ = std::fs::remove_file(dir.join(format!("{}.bin", compiled.key)));
        }
        assert!(!compiled.from_cache, "{arch}: came from the cache");
        let image = &compiled.image;
        let file = ElfFile64::<object::Endianness>::parse(&**image)
            .unwrap_or_else(|e| panic!("{arch}: the code object is not a 64-bit ELF file: {e}"));
        let header = file.elf_header();
        let endian = file.endian();
        assert_eq!(
            header.e_machine(endian),
            object::elf::EM_AMDGPU,
            "{arch}: not an AMDGPU code object"
        );
        assert_eq!(
            header.e_flags(endian) & EF_AMDGPU_MACH,
            mach,
            "{arch}: wrong target in e_flags {:#x}",
            header.e_flags(endian)
        );
        let symbols: Vec<String> = file
            .symbols()
            .filter_map(|s| s.name().ok().map(str::to_string))
            .collect();
        assert!(
            symbols.iter().any(|s| s == "scale") && symbols.iter().any(|s| s == "scale.kd"),
            "{arch}: no `scale` kernel (and descriptor) among {symbols:?}"
        );
        println!("{arch}: {} bytes of code object", image.len());
    }
}

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn hiprtc_reports_the_compiler_log() {
    assert_amd_platform();
    let source = kernel_source("broken").replace("x[i] *= a;", "x[i] *= not_declared;");
    match hip_core::rtc::compile("broken", &source, "gfx942", &[]) {
        Err(hip_core::Error::Compile { program, arch, log }) => {
            assert_eq!(program, "broken");
            assert_eq!(arch, "gfx942");
            assert!(log.contains("not_declared"), "{log}");
        }
        other => panic!("expected Error::Compile, got {:?}", other.map(|c| c.key)),
    }
}

/// Set in the child process of the test below.
const CHILD_ENV: &str = "HIP_CORE_TEST_MISSING_RUNTIME_CHILD";

/// The test executable. Under an explicit loader (`ld.so PROGRAM`, as `sid-run` does),
/// `current_exe` is the loader, so prefer `argv[0]` when it names a file.
fn test_executable() -> PathBuf {
    std::env::args_os()
        .next()
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| std::env::current_exe().ok())
        .expect("the test executable's path")
}

/// The driver is chosen once per process, so this runs the check in a child process: this same
/// test, with `HIP_PLATFORM=amd`, `ROCM_PATH` at an empty directory, and the system loader (no
/// ROCm on its path).
#[test]
fn missing_runtime_is_library_not_found_naming_every_path() {
    if std::env::var_os(CHILD_ENV).is_some() {
        match hip_core::platform() {
            Err(e) => println!("CHILD-ERROR: {e:?}\nCHILD-DISPLAY: {e}"),
            Ok(p) => println!("CHILD-LOADED: {p}"),
        }
        return;
    }
    let root = std::env::temp_dir().join(format!("hip-core-empty-rocm-{}", std::process::id()));
    std::fs::create_dir_all(root.join("lib")).expect("creating an empty ROCm directory");
    let out = Command::new(test_executable())
        .args([
            "--exact",
            "missing_runtime_is_library_not_found_naming_every_path",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .env("HIP_PLATFORM", "amd")
        .env("ROCM_PATH", &root)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("running the test executable");
    let _ = std::fs::remove_dir_all(&root);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    if stdout.contains("CHILD-LOADED") {
        println!(
            "skipped: a HIP runtime on the system loader's path loaded anyway (a system-wide \
             ROCm install):\n{stdout}"
        );
        return;
    }
    assert!(stdout.contains("CHILD-ERROR: LibraryNotFound"), "{stdout}");
    for path in [
        format!("{}/lib/libamdhip64.so.6", root.display()),
        "/opt/rocm/lib/libamdhip64.so.6".to_string(),
        "libamdhip64.so.6".to_string(),
    ] {
        assert!(
            stdout.contains(&path),
            "the error does not name {path}:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("ROCM_PATH"),
        "the error does not say how to fix it:\n{stdout}"
    );
}
