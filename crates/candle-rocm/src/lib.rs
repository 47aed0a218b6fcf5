//! # candle-rocm (not implemented yet)
//!
//! Will implement Candle's `BackendDevice` / `BackendStorage` (candle-core 0.11.1) over hip-core,
//! rocm-kernels, rocblas-safe and miopen-safe. Tracked by the kernels/backend, BLAS/DNN and
//! Tensor-level issues. This crate exposes no API yet.
