//! Tier-2 tests: against the real RCCL library, on a machine without an AMD GPU.
//!
//! `cargo xtask test` runs them with `--ignored`. They read `HIP_CORE_ROCM_LIB_DIR`, else
//! `$ROCM_PATH/lib`, else `/opt/rocm/lib`: the directory holding `librccl.so.1` (the installer,
//! `cargo xtask install-rocm`, puts Debian's there).
//!
//! Debian ships RCCL 5.4 (NCCL API 2.13.4), built against ROCm 5's HIP (`libamdhip64.so.5`): it
//! cannot share a process with the ROCm 6.4 runtime the rest of the workspace uses, so it is
//! never opened; its ELF symbol table is read instead. It predates NCCL 2.14's non-blocking
//! communicators, the only functions of our table it may lack.

#[allow(dead_code)] // shared with the other crates' tier-2 tests; not every helper is used here
#[path = "../../hip-core/tests/support/rocm_libs.rs"]
mod rocm_libs;
use rocm_libs::{exported_functions, find_library};

/// The functions of the table that came with NCCL 2.14 (non-blocking communicators), which an
/// older RCCL (Debian's 5.4) lacks; rccl-safe falls back to a blocking init without them.
const NCCL_2_14: &[&str] = &["ncclCommInitRankConfig", "ncclCommFinalize"];

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn rccl_exports_every_function_of_the_table() {
    let functions = rccl_safe::sys::rccl::FUNCTIONS;
    for needed in [
        "ncclGetUniqueId",
        "ncclCommInitRank",
        "ncclCommInitRankConfig",
        "ncclCommGetAsyncError",
        "ncclCommAbort",
        "ncclCommDestroy",
        "ncclGetErrorString",
        "ncclGetLastError",
        "ncclAllReduce",
        "ncclAllGather",
        "ncclReduceScatter",
        "ncclBroadcast",
        "ncclReduce",
        "ncclSend",
        "ncclRecv",
        "ncclGroupStart",
        "ncclGroupEnd",
    ] {
        assert!(functions.contains(&needed), "the table lacks {needed}");
    }
    let dir = rocm_libs::rocm_lib_dir();
    assert!(
        rccl_safe::RCCL_SONAMES.iter().any(|n| dir.join(n).exists()),
        "{} holds no {}: a ROCm prefix installed before the installer added Debian's RCCL; run \
         `cargo xtask install-rocm --update` (or scripts/install-rocm.sh --update), or set \
         HIP_CORE_ROCM_LIB_DIR to a directory holding librccl.so.1",
        dir.display(),
        rccl_safe::RCCL_SONAMES.join(" / ")
    );
    let path = find_library(rccl_safe::RCCL_SONAMES);
    let exported = exported_functions(&path);
    let missing: Vec<&str> = functions
        .iter()
        .copied()
        .filter(|f| !exported.contains(*f))
        .collect();
    let unexpected: Vec<&str> = missing
        .iter()
        .copied()
        .filter(|f| !NCCL_2_14.contains(f))
        .collect();
    assert!(
        unexpected.is_empty(),
        "{} does not export {} (of the {} functions in the bindings' table)",
        path.display(),
        unexpected.join(", "),
        functions.len()
    );
    println!(
        "{}: {} of the {} functions of the table are exported{}",
        path.display(),
        functions.len() - missing.len(),
        functions.len(),
        if missing.is_empty() {
            String::new()
        } else {
            format!(
                "; it predates NCCL 2.14 and lacks {} (blocking init there)",
                missing.join(", ")
            )
        }
    );
}

/// The bindings' constants are the NCCL API's.
#[test]
fn bindings_match_the_nccl_api() {
    use rccl_safe::sys::rccl as sys;
    assert_eq!(sys::NCCL_UNIQUE_ID_BYTES, 128);
    assert_eq!(size_of::<sys::ncclUniqueId>(), 128);
    assert_eq!(sys::ncclBfloat16, 9);
    assert_eq!(sys::ncclAvg, 4);
    // The config's first four fields, as NCCL 2.14 laid them out.
    assert_eq!(std::mem::offset_of!(sys::ncclConfig_t, blocking), 16);
}
