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
use rocm_libs::{assert_amd_platform, assert_exports};

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn rocblas_exports_every_function_of_the_table() {
    let functions = rocblas_safe::sys::rocblas::FUNCTIONS;
    for needed in [
        "rocblas_create_handle",
        "rocblas_destroy_handle",
        "rocblas_set_stream",
        "rocblas_set_pointer_mode",
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
