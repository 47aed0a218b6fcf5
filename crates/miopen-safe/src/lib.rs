//! # miopen-safe (not implemented yet)
//!
//! Will hold safe MIOpen wrappers over hip-core: handle, tensor/convolution/pooling descriptors,
//! algorithm find + cache, convolution forward / backward-data and pooling, with a cuDNN adapter
//! on the `nvidia` platform. Tracked by the rocBLAS/MIOpen issue. This crate exposes no API yet;
//! nothing in it pretends to work.
