//! Candle's own `test_device!` tests, bodies unchanged, on the out-of-tree device (`Device::Ext`).
//!
//! The modules (`tensor_tests`, `matmul_tests`, `conv_tests`, `pool_tests`, `bilinear_tests`,
//! `grad_tests`, `layout_tests` from candle-core, `nn_ops` from candle-nn's `tests/ops.rs`) are
//! Candle's test files, as `#[path]` modules that build.rs lists in `$OUT_DIR`. Under `cfg(candle_ext_device)`
//! (set by build.rs) the patched `test_device!` macro adds, next to Candle's `<test>_cpu`, a test
//! `<test>::ext` that runs the same body on [`candle_ext_test_device`].
//!
//! `quantized_tests` (candle-core's `tests/quantized_tests.rs`) is compiled from the rewrite of
//! `build/quantized.rs` in `$OUT_DIR`: a `Device::Ext(_)` arm in its two exhaustive `Device`
//! matches, and its `ext` tests `#[ignore]`d (they need quantized storage on the ext device:
//! candle-rocm, with `--include-ignored`). See README.md.
//!
//! The device comes from `CANDLE_EXT_TEST_DEVICE`: `cpu` (default): Candle's CPU backend behind
//! the ext hook; `rocm`: candle-rocm's device of ordinal `CANDLE_EXT_TEST_ORDINAL` (default 0),
//! with the quantized matrix-vector kernel `CANDLE_EXT_TEST_QMATVEC` names: `float` (default:
//! the quantized tests hold an ext device to Metal's f32-activation values) or `int8`
//! (candle-rocm's default kernel, 8-bit activations).

// candle-nn's tests name candle-core `candle`.
extern crate candle_core as candle;

use candle_core::{Error, Result};

include!(concat!(env!("OUT_DIR"), "/candle_test_modules.rs"));

/// Environment variable choosing the ext test device: `cpu` (default) or `rocm`.
pub const DEVICE_VAR: &str = "CANDLE_EXT_TEST_DEVICE";
/// Environment variable with the ROCm device ordinal (default 0) when the device is `rocm`.
pub const ORDINAL_VAR: &str = "CANDLE_EXT_TEST_ORDINAL";
/// Environment variable choosing candle-rocm's quantized matrix-vector kernel: `float`
/// (default) or `int8`.
pub const QMATVEC_VAR: &str = "CANDLE_EXT_TEST_QMATVEC";

/// The device the `ext` tests run on, created once per process (see the crate docs for the
/// environment variables). A failure to create it is an error of every `ext` test.
#[cfg(candle_ext_device)]
pub fn candle_ext_test_device() -> Result<candle_core::Device> {
    use std::sync::OnceLock;
    static DEVICE: OnceLock<std::result::Result<candle_core::Device, String>> = OnceLock::new();
    DEVICE
        .get_or_init(|| create_device().map_err(|e| e.to_string()))
        .clone()
        .map_err(Error::Msg)
}

/// The ext test devices this harness knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    /// Candle's CPU backend behind the ext hook.
    Cpu,
    /// candle-rocm's device of this ordinal.
    Rocm(usize),
}

/// Reads the choice from [`DEVICE_VAR`] and [`ORDINAL_VAR`].
#[cfg(candle_ext_device)]
fn choice_from_env() -> Result<Choice> {
    parse_choice(
        env_value(DEVICE_VAR)?.as_deref(),
        env_value(ORDINAL_VAR)?.as_deref(),
    )
}

/// An environment variable's value; `None` when it is unset or empty.
fn env_value(name: &str) -> Result<Option<String>> {
    match std::env::var(name) {
        Ok(value) if value.is_empty() => Ok(None),
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(Error::Msg(format!("{name}: {e}"))),
    }
}

/// Interprets the values of [`DEVICE_VAR`] and [`ORDINAL_VAR`] (`None`: unset).
fn parse_choice(device: Option<&str>, ordinal: Option<&str>) -> Result<Choice> {
    match device {
        None | Some("cpu") => Ok(Choice::Cpu),
        Some("rocm") => {
            let ordinal = match ordinal {
                None => 0,
                Some(text) => text.parse::<usize>().map_err(|e| {
                    Error::Msg(format!(
                        "{ORDINAL_VAR}={text:?} is not a device ordinal (a non-negative integer): {e}"
                    ))
                })?,
            };
            Ok(Choice::Rocm(ordinal))
        }
        Some(other) => Err(Error::Msg(format!(
            "{DEVICE_VAR}={other:?} is not supported: the accepted values are `cpu` (the default: \
             Candle's CPU backend behind Device::Ext) and `rocm` (candle-rocm, ordinal from \
             {ORDINAL_VAR}, default 0)"
        ))),
    }
}

/// Creates the device [`choice_from_env`] names.
#[cfg(candle_ext_device)]
fn create_device() -> Result<candle_core::Device> {
    use candle_core::Device;
    match choice_from_env()? {
        Choice::Cpu => Ok(Device::Ext(candle_core::ext::ExtDevice::cpu())),
        Choice::Rocm(ordinal) => {
            use candle_rocm::{QuantizedMatvec, RocmDeviceExt};
            let kind = match env_value(QMATVEC_VAR)?.as_deref() {
                None | Some("float") => QuantizedMatvec::FloatActivations,
                Some("int8") => QuantizedMatvec::Int8Activations,
                Some("int8-rounded-once") => QuantizedMatvec::Int8RoundedOnce,
                Some(other) => {
                    return Err(Error::Msg(format!(
                        "{QMATVEC_VAR}={other:?}: expected `float`, `int8` or `int8-rounded-once`"
                    )))
                }
            };
            let device = Device::new_rocm(ordinal)?;
            device.as_rocm_device()?.set_quantized_matvec(kind);
            Ok(device)
        }
    }
}

/// The rewrite of candle-core's `tests/quantized_tests.rs` that build.rs runs (tested below).
#[path = "../build/quantized.rs"]
mod quantized_rewrite;

/// Tests of the harness itself (not Candle's).
mod harness {
    use super::quantized_rewrite::{rewrite, ExtArm, EXPECTED_ROCM_FAILURES, EXT_ARMS};
    use super::{parse_choice, Choice};

    /// A quantized_tests.rs-like file: an exhaustive `Device` match (a block arm among them), a
    /// match with a catch-all, braces and `match` in a string, a `crate::` path.
    const SAMPLE: &str = r#"use candle_core::{test_device, Device, Result};
fn body(device: &Device) -> Result<()> {
    let _s = "match device { Device::Cpu => 0 }";
    let x = crate::helper(device)?;
    match device {
        Device::Metal(_) => assert_eq!(x, 1),
        Device::Cuda(_) => {
            assert_eq!(x, 2)
        }
        Device::Cpu => assert_eq!(x, 3),
    }
    let _y = match device {
        Device::Cpu => 1,
        _ => 2,
    };
    Ok(())
}
test_device!(body, body_cpu, body_cuda, body_metal);
"#;

    const CUDA_ARM: &[ExtArm] = &[ExtArm {
        function: "body",
        arm: "Device::Cuda(_)",
        why: "test",
    }];

    #[test]
    fn quantized_rewrite_adds_the_named_arm() {
        let out = rewrite(SAMPLE, "sample.rs", CUDA_ARM, &[("body", "test")]).unwrap();
        let text = out.text;
        assert_eq!(text.matches("Device::Ext(_) =>").count(), 1, "{text}");
        assert!(
            text.contains("Device::Ext(_) => {\n            assert_eq!(x, 2)\n        },"),
            "{text}"
        );
        assert!(text.contains("self::helper(device)"), "{text}");
        assert!(!text.contains("crate::helper"), "{text}");
        assert!(text.contains("macro_rules! test_device"), "{text}");
        // The upstream text is all there, in order.
        let mut rest = text.as_str();
        for line in SAMPLE.lines().filter(|l| !l.contains("crate::")) {
            let at = rest
                .find(line)
                .unwrap_or_else(|| panic!("{line:?} lost:\n{text}"));
            rest = &rest[at + line.len()..];
        }
        assert_eq!(out.summary.len(), 3, "{:?}", out.summary);
    }

    #[test]
    fn quantized_rewrite_fails_loudly_on_unexpected_text() {
        let err = |source: &str, arms: &[ExtArm], failures: &[(&str, &str)]| {
            rewrite(source, "sample.rs", arms, failures).unwrap_err()
        };
        // An arm set the rewrite does not know.
        let vulkan = SAMPLE.replace(
            "Device::Cpu => assert_eq!(x, 3),",
            "Device::Cpu => assert_eq!(x, 3),\n        Device::Vulkan(_) => assert_eq!(x, 4),",
        );
        let e = err(&vulkan, CUDA_ARM, &[]);
        assert!(
            e.contains("sample.rs:5") && e.contains("Device::Vulkan"),
            "{e}"
        );
        // A match in a function the table does not list, and a listed function without one.
        let e = err(SAMPLE, &[], &[]);
        assert!(e.contains("fn body") && e.contains("EXT_ARMS"), "{e}");
        let other = [
            CUDA_ARM[0],
            ExtArm {
                function: "gone",
                ..CUDA_ARM[0]
            },
        ];
        let e = err(SAMPLE, &other, &[]);
        assert!(e.contains("fn gone"), "{e}");
        // An arm the match does not have.
        let rocm = [ExtArm {
            arm: "Device::Rocm(_)",
            ..CUDA_ARM[0]
        }];
        let e = err(SAMPLE, &rocm, &[]);
        assert!(e.contains("Device::Rocm(_)"), "{e}");
        // An expected failure that is no test of the file.
        let e = err(SAMPLE, CUDA_ARM, &[("renamed", "why")]);
        assert!(e.contains("renamed"), "{e}");
    }

    #[test]
    fn quantized_expectations_are_listed() {
        for arm in EXT_ARMS {
            println!(
                "quantized_tests::{}: Device::Ext(_) gets the {} arm: {}",
                arm.function, arm.arm, arm.why
            );
        }
        for (test, why) in EXPECTED_ROCM_FAILURES {
            println!("quantized_tests::{test}::ext: expected to fail on candle-rocm: {why}");
        }
        assert!(EXT_ARMS.iter().all(|a| !a.why.is_empty()));
        assert!(EXPECTED_ROCM_FAILURES
            .iter()
            .all(|(_, why)| !why.is_empty()));
    }

    #[test]
    fn device_choice_default() {
        assert_eq!(parse_choice(None, None).unwrap(), Choice::Cpu);
        assert_eq!(parse_choice(Some("cpu"), Some("3")).unwrap(), Choice::Cpu);
    }

    #[test]
    fn device_choice_rocm_ordinal() {
        assert_eq!(parse_choice(Some("rocm"), None).unwrap(), Choice::Rocm(0));
        assert_eq!(
            parse_choice(Some("rocm"), Some("2")).unwrap(),
            Choice::Rocm(2)
        );
        let err = parse_choice(Some("rocm"), Some("-1"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("CANDLE_EXT_TEST_ORDINAL=\"-1\""), "{err}");
    }

    /// The `ext` tests really run on `Device::Ext`: results live in ext storage.
    #[cfg(candle_ext_device)]
    #[test]
    fn ext_device_computes_in_ext_storage() -> candle_core::Result<()> {
        use candle_core::{Device, DeviceLocation, Storage, Tensor};
        let device = crate::candle_ext_test_device()?;
        assert!(device.is_ext(), "{device:?}");
        let t = Tensor::arange(0f32, 6., &device)?.reshape((2, 3))?;
        let sum = (&t + &t)?;
        assert!(matches!(
            &*sum.storage_and_layout().0,
            Storage::Ext(storage) if Device::Ext(storage.device()).same_device(&device)
        ));
        assert!(matches!(
            sum.device().location(),
            DeviceLocation::Ext { .. }
        ));
        assert_eq!(sum.to_vec2::<f32>()?, [[0., 2., 4.], [6., 8., 10.]]);
        Ok(())
    }

    #[test]
    fn device_choice_rejects_unknown_names() {
        let err = parse_choice(Some("cuda"), None).unwrap_err().to_string();
        assert!(err.contains("CANDLE_EXT_TEST_DEVICE=\"cuda\""), "{err}");
        assert!(err.contains("`cpu`") && err.contains("`rocm`"), "{err}");
    }
}
