//! # rocblas-safe (not implemented yet)
//!
//! Will hold safe rocBLAS wrappers over hip-core: a handle bound to a hip-core stream and GEMM
//! (plain, strided-batched, `_ex` for f16/bf16), loaded at run time, with a cuBLAS adapter on
//! the `nvidia` platform. Tracked by the rocBLAS/MIOpen issue. This crate exposes no API yet;
//! nothing in it pretends to work.
