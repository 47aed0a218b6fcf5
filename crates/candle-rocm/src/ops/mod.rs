//! The op families behind [`RocmStorage`](crate::RocmStorage)'s `BackendStorage` impl, one
//! module per family. Each holds its family's dtype dispatch and layout handling beside the
//! rocm-kernels (or vendor library) wrappers it calls, and takes the storages as plain
//! arguments; the trait impl in [`crate::storage`] only forwards to them.
//!
//! Dependencies point one way: a family uses the storage types ([`crate::storage`]), the
//! low-level buffer helpers ([`crate::buffers`]), the layout checks ([`crate::layout`]) and the
//! shared dispatch macros ([`dispatch`]); nothing here imports the trait impl. The
//! convolutions ([`crate::conv`], a public module) and the fused ops (`crate::fused`) are
//! families too, kept at the crate's top level.

pub(crate) mod copy;
pub(crate) mod dispatch;
pub(crate) mod elementwise;
pub(crate) mod index;
pub(crate) mod matmul;
pub(crate) mod pool;
pub(crate) mod reduce;
