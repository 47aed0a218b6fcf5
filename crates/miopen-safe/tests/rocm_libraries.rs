//! Tier-2 tests: against the real MIOpen library (ROCm 6.4, Debian's packages), on a machine
//! without an AMD GPU.
//!
//! The tests marked `#[ignore]` need the ROCm libraries; `cargo xtask test` runs them with
//! `--ignored`, under the loader those libraries need (`sid-run` for the Debian packages). They
//! read:
//!
//! * `HIP_CORE_ROCM_LIB_DIR`, else `$ROCM_PATH/lib`, else `/opt/rocm/lib`: the directory holding
//!   `libMIOpen.so.1` (the symbol-table test reads the file there);
//! * `ROCM_PATH`, as miopen-safe itself does, to open the library (the host-only call tests);
//! * `HIP_PLATFORM`: unset or `amd`.
//!
//! What works without a GPU (found here): loading MIOpen, `miopenGetVersion`, creating and
//! setting tensor, convolution and pooling descriptors, and `miopenGetConvolutionNdForwardOutputDim`
//! / `miopenGetPoolingNdForwardOutputDim`. A handle does not: `miopenCreateWithStream` fails
//! with `miopenStatusUnknownError` ("No device"), and hip-core gives no stream without a device.

#[allow(dead_code)] // shared with the other crates' tier-2 tests; not every helper is used here
#[path = "../../hip-core/tests/support/rocm_libs.rs"]
mod rocm_libs;
use rocm_libs::{assert_amd_platform, assert_exports};

use miopen_safe::{
    conv_forward_output_dims, library_conv_forward_output_dims, library_pool_forward_output_dims,
    pool_forward_output_dims, ConvParams,
};

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn miopen_exports_every_function_of_the_table() {
    assert_exports(
        miopen_safe::raw::MIOPEN_SONAMES,
        miopen_safe::sys::miopen::FUNCTIONS,
    );
}

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn library_loads_and_reports_its_version_without_a_gpu() {
    assert_amd_platform();
    let v = miopen_safe::library_version().unwrap_or_else(|e| panic!("{e}"));
    println!("{v}");
    assert!(v.starts_with("MIOpen 3."), "{v}");
    // Every table entry resolved in the opened library.
    let t = miopen_safe::raw::miopen().unwrap();
    assert!(t.miopenCreateWithStream.is_ok() && t.miopenFindConvolutionForwardAlgorithm.is_ok());
    // Immediate mode, the default algorithm search on AMD.
    for (name, ok) in [
        (
            "miopenConvolutionForwardGetSolutionCount",
            t.miopenConvolutionForwardGetSolutionCount.is_ok(),
        ),
        (
            "miopenConvolutionForwardGetSolution",
            t.miopenConvolutionForwardGetSolution.is_ok(),
        ),
        (
            "miopenConvolutionForwardCompileSolution",
            t.miopenConvolutionForwardCompileSolution.is_ok(),
        ),
        (
            "miopenConvolutionForwardImmediate",
            t.miopenConvolutionForwardImmediate.is_ok(),
        ),
        (
            "miopenConvolutionBackwardDataGetSolutionCount",
            t.miopenConvolutionBackwardDataGetSolutionCount.is_ok(),
        ),
        (
            "miopenConvolutionBackwardDataGetSolution",
            t.miopenConvolutionBackwardDataGetSolution.is_ok(),
        ),
        (
            "miopenConvolutionBackwardDataCompileSolution",
            t.miopenConvolutionBackwardDataCompileSolution.is_ok(),
        ),
        (
            "miopenConvolutionBackwardDataImmediate",
            t.miopenConvolutionBackwardDataImmediate.is_ok(),
        ),
    ] {
        assert!(ok, "{name} did not resolve");
    }
}

fn params(padding: &[usize], stride: &[usize], dilation: &[usize], groups: usize) -> ConvParams {
    ConvParams {
        padding: padding.to_vec(),
        stride: stride.to_vec(),
        dilation: dilation.to_vec(),
        groups,
    }
}

/// Compares MIOpen's `miopenGetConvolutionNdForwardOutputDim` with our formula.
fn compare_conv(x: &[usize], w: &[usize], p: &ConvParams) -> bool {
    let Ok(ours) = conv_forward_output_dims(x, w, p) else {
        return false;
    };
    let lib = library_conv_forward_output_dims(x, w, p)
        .unwrap_or_else(|e| panic!("x {x:?} w {w:?} {p:?}: {e}"));
    assert_eq!(lib, ours, "x {x:?} w {w:?} {p:?}");
    true
}

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn host_only_conv_output_dims_match_our_formula() {
    assert_amd_platform();
    let mut checked = 0usize;
    // 1-d (run as 2-d with a unit height) and 2-d with independent parameters per dim.
    for input in [1usize, 2, 3, 5, 8, 13] {
        for k in 1..=4usize {
            for pad in 0..=2usize {
                for stride in 1..=3usize {
                    for dil in 1..=3usize {
                        for (c, g) in [(6usize, 1usize), (6, 3)] {
                            let p1 = params(&[pad], &[stride], &[dil], g);
                            checked +=
                                compare_conv(&[2, c, input], &[4 * g, c / g, k], &p1) as usize;
                            let p2 = params(&[pad, 2 - pad], &[stride, 4 - stride], &[dil, 1], g);
                            checked += compare_conv(
                                &[2, c, input, input + 4],
                                &[4 * g, c / g, k, 5 - k],
                                &p2,
                            ) as usize;
                        }
                    }
                }
            }
        }
    }
    // 3-d.
    for input in [3usize, 6, 9] {
        for k in 1..=3usize {
            for stride in 1..=2usize {
                let p3 = params(&[1, 0, 2], &[stride, 1, 2], &[1, 2, 1], 2);
                checked += compare_conv(&[1, 4, input, input + 1, input + 2], &[6, 2, k, 2, k], &p3)
                    as usize;
            }
        }
    }
    println!("{checked} convolution shapes: MIOpen's output dims equal ours");
    assert!(checked > 500, "only {checked} valid shapes in the grid");
}

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn host_only_pool_output_dims_match_our_formula() {
    assert_amd_platform();
    let mut checked = 0usize;
    for input in 1..=9usize {
        for k in 1..=4usize {
            for pad in 0..k {
                for stride in 1..=3usize {
                    for x in [vec![2, 3, input], vec![1, 2, input, input + 2]] {
                        let s = x.len() - 2;
                        let (win, padv, strv) = (vec![k; s], vec![pad; s], vec![stride; s]);
                        let Ok(ours) = pool_forward_output_dims(&x, &win, &padv, &strv) else {
                            continue;
                        };
                        let lib = library_pool_forward_output_dims(&x, &win, &padv, &strv)
                            .unwrap_or_else(|e| {
                                panic!("{x:?} k {k} pad {pad} stride {stride}: {e}")
                            });
                        assert_eq!(lib, ours, "{x:?} k {k} pad {pad} stride {stride}");
                        checked += 1;
                    }
                }
            }
        }
    }
    println!("{checked} pooling shapes: MIOpen's output dims equal ours");
    assert!(checked > 200, "only {checked} valid shapes in the grid");
}
