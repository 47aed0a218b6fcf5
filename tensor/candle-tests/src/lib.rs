//! `candle-device-tests`: a test harness, with no library API of its own.
//!
//! Its one test binary, `tests/candle_tests.rs`, runs Candle's own `test_device!`-parametrized
//! tests (candle-core's `tests/{tensor,matmul,conv,pool,bilinear,grad,layout}_tests.rs` and
//! candle-nn's `tests/ops.rs`), their bodies unchanged, on the device registered through
//! candle-core's out-of-tree hook `Device::Ext`; also candle-core's `tests/quantized_tests.rs`,
//! through the rewrite of `build/quantized.rs` (an arm for `Device::Ext` in its exhaustive
//! `Device` matches). The build script locates the Candle sources the build actually uses and
//! turns each file into a module of that binary; the environment variable
//! `CANDLE_EXT_TEST_DEVICE` (`cpu`, the default, or `rocm`) picks the device. See `README.md`.
