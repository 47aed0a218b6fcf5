//! # rccl-safe: safe RCCL / NCCL collectives over hip-core
//!
//! The multi-GPU layer of the candle-rocm workspace: communicators and the collective
//! operations of the NCCL C API, on hip-core's typed device buffers and streams.
//!
//! * **Communicators** ([`Comm`]): one rank per device. Ranks in different processes share a
//!   [`UniqueId`] (128 bytes to pass around) and call [`Comm::init_rank`]; one process driving
//!   several devices calls [`Comm::init_all`] / [`Comm::init_devices`] (one [`Group`]).
//!   Communicators are created non-blocking where the library can
//!   (`ncclCommInitRankConfig`, NCCL >= 2.14 / RCCL >= 5.5) and waited for with a timeout, so
//!   that a rank that never joins is an [`Error::Timeout`], not a hang.
//! * **Collectives**: [`Comm::all_reduce`] (sum, prod, max, min, avg: [`ReduceOp`]),
//!   [`Comm::all_gather`], [`Comm::reduce_scatter`], [`Comm::broadcast`], [`Comm::reduce`],
//!   [`Comm::send`] / [`Comm::recv`] (inside a [`Group`]), with in-place forms, for every
//!   [`NcclType`] (`i8`, `u8`, `i32`, `u32`, `i64`, `u64`, `f16`, `bf16`, `f32`, `f64`).
//!   They are queued on the communicator's stream, ordered with the buffers' streams by events,
//!   and never block the host on the GPU.
//! * **Validated before the call**: buffer lengths against the counts (an all-gather's receive
//!   buffer is `nranks` times its send buffer, ...), buffers on the communicator's device,
//!   ranks in range: a bad argument is an [`Error::InvalidArgument`] before the library is
//!   called. Element types are checked at compile time ([`NcclType`]).
//! * **Loaded at run time**, like the workspace's other libraries: RCCL (`librccl.so.1`) on
//!   hip-core's `amd` platform, NCCL (`libnccl.so.2`, same C API and symbols) on `nvidia`
//!   ([`library`] says where each is searched). A missing library is one
//!   [`hip_core::Error::LibraryNotFound`] naming every path tried and the fix; a function the
//!   installed release lacks is a [`hip_core::Error::MissingSymbol`] from the call that needs
//!   it, never a panic.
//! * **Typed errors** with NCCL's own result names, `ncclGetErrorString`'s description and
//!   `ncclGetLastError`'s detail ([`Error::Nccl`]).
//!
//! See `docs/multi-gpu.md` for what is tested where.
//!
//! ## Example: one process, every GPU
//! ```no_run
//! use rccl_safe::{Comm, CommConfig, ReduceOp};
//!
//! # fn main() -> rccl_safe::Result<()> {
//! let devices = hip_core::Device::all()?;
//! let comms = Comm::init_all(&devices, CommConfig::default())?;
//! let mut bufs = Vec::new();
//! for c in &comms {
//!     bufs.push(c.stream().alloc_from_host(&[c.rank() as f32 + 1.0; 4])?);
//! }
//! // All ranks' operations in one group: one thread drives every device.
//! rccl_safe::group(|| {
//!     for (c, b) in comms.iter().zip(bufs.iter_mut()) {
//!         c.all_reduce_in_place(&mut b.as_mut_slice(), ReduceOp::Sum)?;
//!     }
//!     Ok(())
//! })?;
//! let n = comms.len() as f32;
//! assert_eq!(bufs[0].to_host_vec()?, vec![n * (n + 1.0) / 2.0; 4]);
//! # Ok(())
//! # }
//! ```

mod comm;
pub mod error;
pub mod library;
pub mod sys;
mod types;

pub use comm::{group, Comm, CommConfig, Group, UniqueId, DEFAULT_TIMEOUT};
pub use error::{Error, Result};
pub use library::{library, Library, NCCL_SONAMES, RCCL_SONAMES};
pub use types::{NcclType, ReduceOp};

/// The collectives library's version (`major.minor.patch` of `ncclGetVersion`: RCCL reports the
/// NCCL release it is based on). Opens the library (and hip-core's platform) if needed; needs
/// no GPU.
pub fn library_version() -> Result<String> {
    library()?.version()
}
