//! # rocm-kernels (not implemented yet)
//!
//! Will hold candle-rocm's HIP kernel sources (`kernels/*.hip`), the ahead-of-time bundles built
//! by `cargo xtask build-kernels`, and typed launch wrappers with `SlicePtrOrNull` layout info.
//! Tracked by the kernels/backend issue. This crate exposes no API yet.
