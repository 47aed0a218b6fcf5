//! Tier-2 tests: against the real rocBLAS library, on a machine without an AMD GPU.
//!
//! The tests marked `#[ignore]` need the ROCm 6.4 libraries; `cargo xtask test` runs them with
//! `--ignored`, under the loader that those libraries need. They read:
//!
//! * `HIP_CORE_ROCM_LIB_DIR`, else `$ROCM_PATH/lib`, else `/opt/rocm/lib`: the directory holding
//!   `librocblas.so.4` (the symbol-table test reads the file there);
//! * `ROCM_PATH`, as hip-core and rocblas-safe themselves do, to open the libraries;
//! * `HIP_PLATFORM`: unset or `amd` (the library tests check that the AMD platform was chosen).
//!
//! The symbol-table test parses the ELF file and needs no special loader; the others `dlopen`
//! the libraries, so the test binary must run under a loader that can (on the Debian packages
//! built for a newer glibc: `/opt/rocm-deb/bin/sid-run`).

#[allow(dead_code)] // shared with the other crates' tier-2 tests; not every helper is used here
#[path = "../../hip-core/tests/support/rocm_libs.rs"]
mod rocm_libs;
use rocm_libs::{assert_amd_platform, assert_exports, rocm_lib_dir};

use std::path::PathBuf;

use rocblas_safe::tensile::{self, BaseSource, TensileBase};
use rocblas_safe::{Error, GfxTarget};

/// Serializes the tests that read or set `ROCBLAS_TENSILE_LIBPATH` (a process-wide variable).
static TENSILE_ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lock_env() -> std::sync::MutexGuard<'static, ()> {
    TENSILE_ENV.lock().unwrap_or_else(|e| e.into_inner())
}

/// The real Tensile base directory of the installed rocBLAS, with `ROCBLAS_TENSILE_LIBPATH`
/// unset, and the architectures it has kernels for.
fn real_tensile() -> (TensileBase, Vec<String>) {
    assert_amd_platform();
    std::env::remove_var(tensile::TENSILE_LIBPATH_ENV);
    let base = tensile::base_dir().expect("the Tensile base directory");
    let names: Vec<String> = std::fs::read_dir(&base.dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    let archs = tensile::available_archs(&names);
    (base, archs)
}

/// A fresh directory under the temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rocblas-safe-tier2-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn rocblas_exports_every_function_of_the_table() {
    let functions = rocblas_safe::sys::rocblas::FUNCTIONS;
    for needed in [
        "rocblas_create_handle",
        "rocblas_destroy_handle",
        "rocblas_set_stream",
        "rocblas_set_pointer_mode",
        "rocblas_set_atomics_mode",
        "rocblas_get_atomics_mode",
        "rocblas_sgemm_strided_batched",
        "rocblas_dgemm_strided_batched",
        "rocblas_gemm_strided_batched_ex",
        "rocblas_status_to_string",
        "rocblas_get_version_string",
        "rocblas_get_version_string_size",
    ] {
        assert!(functions.contains(&needed), "the table lacks {needed}");
    }
    assert_exports(rocblas_safe::ROCBLAS_SONAMES, functions);
}

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn library_version_is_the_headers_major_minor() {
    assert_amd_platform();
    let version = rocblas_safe::library_version().expect("rocBLAS' version string");
    let expected = format!(
        "{}.{}.",
        rocblas_safe::sys::rocblas::ROCBLAS_VERSION_MAJOR,
        rocblas_safe::sys::rocblas::ROCBLAS_VERSION_MINOR
    );
    assert!(
        version.starts_with(&expected),
        "rocBLAS reports version {version:?}, the bindings were generated from {expected}x"
    );
    println!("rocBLAS {version}");
}

/// `rocblas_create_handle` with no GPU. rocBLAS 4.4 (ROCm 6.4) returns
/// `rocblas_status_internal_error` here (it cannot query the current device); what matters is a
/// status, cleanly turned into [`rocblas_safe::Error::Blas`], not an abort.
#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn without_a_gpu_create_handle_fails_cleanly() {
    assert_amd_platform();
    let count = hip_core::device_count().expect("device_count with no GPU must be Ok(0)");
    if count > 0 {
        println!("{count} AMD GPU(s) present: this test is for machines without one");
        return;
    }
    match rocblas_safe::__raw::probe_create_handle() {
        Err(e @ rocblas_safe::Error::Blas { call, code, .. }) => {
            assert_eq!(call, "rocblas_create_handle");
            assert_ne!(code, 0);
            let name = e.status_name().unwrap_or_default();
            assert!(
                name.starts_with("rocblas_status_") && !name.starts_with("rocblas_status_unknown"),
                "not a rocblas_status name: {e}"
            );
            assert!(
                e.to_string()
                    .contains("rocblas_create_handle failed with rocblas_status_"),
                "{e}"
            );
            println!("without a GPU: {e}");
        }
        Err(e) => panic!("expected Error::Blas from rocblas_create_handle, got {e:?}"),
        Ok(()) => panic!("rocblas_create_handle succeeded without a GPU"),
    }
    // The safe path stops earlier, at the device: no stream, so no handle.
    match hip_core::Device::new(0) {
        Err(hip_core::Error::NoDevice { .. }) => {}
        other => panic!("expected NoDevice, got {:?}", other.err()),
    }
}

/// Where rocBLAS will look for its GEMM kernels: found from the loaded library (dladdr), with
/// Debian's versioned directory (`rocblas/4.4.1/library`) when the installer put kernels there.
#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn the_tensile_directory_is_found_next_to_the_loaded_library() {
    let _env = lock_env();
    let (base, archs) = real_tensile();
    let lib_dir = std::fs::canonicalize(rocm_lib_dir()).unwrap();
    let BaseSource::Library(dir) = &base.source else {
        panic!(
            "expected the directory of the loaded librocblas, got {:?}",
            base.source
        );
    };
    assert_eq!(
        std::fs::canonicalize(dir).unwrap(),
        lib_dir,
        "rocBLAS was loaded from another directory than the one under test"
    );
    // Debian's rocBLAS looks in <lib>/rocblas/<version>/library first (its own patch).
    let version = tensile::short_version(&rocblas_safe::library_version().unwrap()).unwrap();
    assert_eq!(
        base.tried[0],
        dir.join(format!("rocblas/{version}/library"))
    );
    if !archs.is_empty() {
        assert_eq!(
            base.dir, base.tried[0],
            "kernels installed, but not where Debian looks"
        );
    }
    println!(
        "Tensile base: {} ({}); kernels for: {archs:?}",
        base.dir.display(),
        base.source
    );
}

/// With the Tensile files the installer unpacked (CANDLE_ROCM_TENSILE_ARCHS, default `auto`
/// includes gfx1010): every architecture there passes the check, through the real search.
#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn every_installed_architecture_passes_the_check() {
    let _env = lock_env();
    let (base, archs) = real_tensile();
    assert!(
        !archs.is_empty(),
        "{} has no rocBLAS Tensile kernels for any architecture; re-run `cargo xtask \
         install-rocm` with CANDLE_ROCM_TENSILE_ARCHS=auto (the default: gfx1010 plus this \
         machine's GPUs) or a list",
        base.dir.display()
    );
    for arch in &archs {
        for spelled in [
            arch.clone(),
            format!("{arch}:sramecc+:xnack-"),
            format!("{arch}:xnack+"),
        ] {
            let ok = tensile::check_arch(&spelled).unwrap_or_else(|e| panic!("{spelled}: {e}"));
            assert_eq!(
                ok.files.library_file,
                format!("TensileLibrary_lazy_{arch}.dat")
            );
            assert!(ok.files.lazy && !ok.files.code_objects.is_empty());
            assert_eq!(ok.dir, base.dir);
        }
        println!(
            "{arch}: {} code objects in {}",
            tensile::check_arch(arch).unwrap().files.code_objects.len(),
            base.dir.display()
        );
    }
}

/// An architecture the directory lacks (gfx942: Debian's rocBLAS 6.4 is not built for MI300 at
/// all) is the typed error naming the directory, the architecture and the fix, never an abort.
#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn an_architecture_the_directory_lacks_is_a_typed_error() {
    let _env = lock_env();
    let (base, archs) = real_tensile();
    let err = tensile::check_arch("gfx942:sramecc+:xnack-").unwrap_err();
    match &err {
        Error::MissingTensileKernels {
            arch,
            dir,
            available,
            ..
        } => {
            assert_eq!(arch, "gfx942");
            assert_eq!(dir, &base.dir);
            assert_eq!(available, &archs);
        }
        other => panic!("expected MissingTensileKernels, got {other:?}"),
    }
    let msg = err.to_string();
    for needle in [
        "gfx942",
        &base.dir.display().to_string(),
        "TensileLibrary_lazy_gfx942.dat",
        "ROCBLAS_TENSILE_LIBPATH",
        "CANDLE_ROCM_TENSILE_ARCHS",
        "abort",
    ] {
        assert!(msg.contains(needle), "{needle:?} missing from: {msg}");
    }
    println!("{msg}");
}

/// `ROCBLAS_TENSILE_LIBPATH`, as rocBLAS reads it: a copy of one architecture's real files
/// passes; the same directory without its code objects, an empty directory and a missing one
/// are typed errors that say the directory came from the variable.
#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn tensile_libpath_is_honoured_and_checked() {
    let _env = lock_env();
    let (base, archs) = real_tensile();
    let arch = archs
        .first()
        .expect("no installed architecture (see the test above)")
        .clone();
    let target = GfxTarget::parse(&arch);
    let copy = temp_dir("libpath");
    let mut copied = 0;
    for e in std::fs::read_dir(&base.dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if name.contains(&arch) || name.ends_with("_fallback.dat") {
            std::fs::copy(e.path(), copy.join(&name)).unwrap();
            copied += 1;
        }
    }
    assert!(copied > 2, "{copied} files copied for {arch}");
    std::env::set_var(tensile::TENSILE_LIBPATH_ENV, &copy);
    let result = std::panic::catch_unwind(|| {
        let b = tensile::base_dir().unwrap();
        assert_eq!((&b.dir, &b.source), (&copy, &BaseSource::Env));
        let ok = tensile::check_arch(&arch).unwrap();
        assert_eq!(ok.dir, copy);
        // The code objects gone: rocBLAS would only warn, then fail at a GEMM; we refuse.
        for e in std::fs::read_dir(&copy).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "co" || x == "hsaco") {
                std::fs::remove_file(p).unwrap();
            }
        }
        let msg = tensile::check_arch(&arch).unwrap_err().to_string();
        assert!(msg.contains("no code object matching"), "{msg}");
        assert!(msg.contains("from $ROCBLAS_TENSILE_LIBPATH"), "{msg}");
        let empty = copy.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        std::env::set_var(tensile::TENSILE_LIBPATH_ENV, &empty);
        let msg = tensile::check_arch(&arch).unwrap_err().to_string();
        assert!(msg.contains("holds none of"), "{msg}");
        std::env::set_var(tensile::TENSILE_LIBPATH_ENV, copy.join("missing"));
        let msg = tensile::check_arch(&arch).unwrap_err().to_string();
        assert!(msg.contains("does not exist"), "{msg}");
        // An arch subdirectory of the variable's directory is read instead, as rocBLAS does.
        let sub = copy.join(&target.processor);
        std::fs::create_dir_all(&sub).unwrap();
        std::env::set_var(tensile::TENSILE_LIBPATH_ENV, &copy);
        let err = tensile::check_arch(&arch).unwrap_err();
        assert!(
            matches!(&err, Error::MissingTensileKernels { dir, .. } if dir == &sub),
            "{err}"
        );
    });
    std::env::remove_var(tensile::TENSILE_LIBPATH_ENV);
    std::fs::remove_dir_all(&copy).unwrap();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

/// The atomics-mode calls are in the table and reach rocBLAS: with a null handle it answers
/// `rocblas_status_invalid_handle` (no GPU needed); `Handle::new` calls the setter on every new
/// handle (tier 3 checks the mode read back).
#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn the_atomics_mode_calls_reach_rocblas() {
    assert_amd_platform();
    let (set, get) = rocblas_safe::__raw::probe_atomics_mode_null_handle();
    for (what, r) in [("set", set.err()), ("get", get.err())] {
        match r {
            Some(e @ Error::Blas { .. }) => {
                assert_eq!(
                    e.status_name(),
                    Some("rocblas_status_invalid_handle"),
                    "{what}: {e}"
                )
            }
            other => panic!("{what}: expected rocblas_status_invalid_handle, got {other:?}"),
        }
    }
}
