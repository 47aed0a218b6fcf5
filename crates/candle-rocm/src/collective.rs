//! Several ROCm devices: peer copies, collectives and tensor-parallel linear layers.
//!
//! * [`copy_to_device`]: a storage (any layout) copied to another ROCm device directly
//!   (`hipMemcpyPeerAsync`, `cuMemcpyPeerAsync` on NVIDIA: hip-core's peer copy), queued on the
//!   destination device's stream after the work queued on the source's; the host is not
//!   involved and never waits. [`to_device`] is the same for a `Tensor` (feature `tensor`).
//! * [`RocmComm`] (feature `rccl`, on by default): one rank of an RCCL communicator (NCCL on
//!   NVIDIA, through crates/rccl-safe) bound to a [`RocmDevice`]'s stream, with all-reduce,
//!   all-gather, reduce-scatter and broadcast on [`RocmStorage`] and (feature `tensor`) on
//!   `Tensor`s. Operations are stream-ordered with every other op of the device and make no host
//!   synchronisation (hip-core's `sync_count()` stays put).
//! * [`ColumnParallelLinear`] / [`RowParallelLinear`]: the two halves of Megatron-style tensor
//!   parallelism that candle's `llama_multiprocess` example builds with NCCL: a column-parallel
//!   layer holds a slice of the output features (no communication, or an all-gather of the
//!   outputs), a row-parallel one a slice of the input features followed by an all-reduce (sum)
//!   of the partial products.
//!
//! Element types: NCCL has no 16-bit integer type, so `i16` is refused (a typed error naming op
//! and dtype); `f8e4m3` is moved as bytes by the operations that do not compute (all-gather,
//! broadcast, peer copies) and refused by the reductions.

use candle_core::backend::{BackendDevice, BackendStorage};
#[cfg(feature = "rccl")]
use candle_core::{DType, Shape};
use candle_core::{Layout, Result};

use crate::device::RocmDevice;
use crate::error::hip_err;
#[cfg(feature = "rccl")]
use crate::error::RocmError;
use crate::storage::{RocmStorage, RocmStorageSlice};

#[cfg(feature = "rccl")]
pub use rccl_safe::{group, CommConfig, Group, ReduceOp, UniqueId};

/// `src` (in `layout`) as a contiguous storage of `layout`'s elements on its own device: a view
/// when `layout` is already contiguous from offset 0 over the whole buffer, else a copy.
/// Returns the storage and the element range `(start, len)` holding the data.
fn contiguous(src: &RocmStorage, layout: &Layout) -> Result<(Option<RocmStorage>, usize, usize)> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok((None, start, end - start)),
        None => {
            let shape = layout.shape();
            // SAFETY: every element of the new storage is written by copy_strided_src below
            // before anything reads it.
            let mut dst = unsafe { src.device().alloc_uninit(shape, src.dtype()) }?;
            src.copy_strided_src(&mut dst, 0, layout)?;
            Ok((Some(dst), 0, shape.elem_count()))
        }
    }
}

/// Copies `src` (its `layout`'s elements, in row-major order) to `dst`, a device of this
/// process: a contiguous storage of `layout.shape()` on `dst`. Between two devices the copy is
/// a direct peer copy (no host staging by us; the runtime stages through host memory itself
/// where the two GPUs cannot reach each other), queued on `dst`'s stream after the work queued
/// on `src`'s device stream; the host does not wait. On the same device it is a plain copy.
pub fn copy_to_device(src: &RocmStorage, layout: &Layout, dst: &RocmDevice) -> Result<RocmStorage> {
    const OP: &str = "copy_to_device";
    let (tmp, start, len) = contiguous(src, layout)?;
    let from = tmp.as_ref().unwrap_or(src);
    macro_rules! peer {
        ($($v:ident),*) => {
            match from.as_slice() {
                $(RocmStorageSlice::$v(b) => {
                    let view = b.slice(start..start + len).map_err(hip_err(OP))?;
                    let mut out = dst.alloc(OP, len)?;
                    out.as_mut_slice().copy_from_device(&view).map_err(hip_err(OP))?;
                    RocmStorageSlice::$v(out)
                })*
            }
        };
    }
    let slice = peer!(U8, U32, I16, I32, I64, BF16, F16, F32, F64, F8E4M3);
    Ok(RocmStorage::new(slice, dst.clone()))
}

/// Copies a tensor on a ROCm device to another ROCm device with [`copy_to_device`] (a peer
/// copy, not through the host as Candle's `to_device` does between out-of-tree devices); a
/// tensor already on `device` is returned as it is.
#[cfg(feature = "tensor")]
pub fn to_device(
    tensor: &candle_core::Tensor,
    device: &candle_core::Device,
) -> Result<candle_core::Tensor> {
    use crate::tensor::RocmDeviceExt;
    if tensor.device().same_device(device) {
        return Ok(tensor.clone());
    }
    let dst = device.as_rocm_device()?;
    let storage = crate::tensor::with_rocm_storage(tensor, |s, l| copy_to_device(s, l, dst))?;
    crate::tensor::tensor_from_rocm_storage(storage, tensor.shape().clone())
}

#[cfg(feature = "rccl")]
pub use comm::{ColumnParallelLinear, RocmComm, RowParallelLinear};

#[cfg(feature = "rccl")]
mod comm {
    use super::*;
    use candle_core::op::Add;

    use rccl_safe::{Comm, CommConfig, ReduceOp, UniqueId};

    /// An rccl-safe error raised while running `op`, as a typed [`RocmError`] in candle's error.
    fn nccl_err(op: &str) -> impl FnOnce(rccl_safe::Error) -> candle_core::Error + '_ {
        move |e| {
            match e {
                rccl_safe::Error::Hip(h) => RocmError::hip(op, h),
                other => {
                    let lib = rccl_safe::library()
                        .map(|l| l.name())
                        .unwrap_or("RCCL (librccl)");
                    RocmError::library(op, lib, other)
                }
            }
            .into()
        }
    }

    /// One rank of an RCCL (NCCL on NVIDIA) communicator on a [`RocmDevice`], queued on the
    /// device's stream (so ordered with every other op of the backend).
    ///
    /// Ranks in different processes share a [`UniqueId`] and call [`RocmComm::new`]; a process
    /// driving several devices calls [`RocmComm::init_all`]. The operations take the storage
    /// and layout of this rank's tensor and return new contiguous storage (or work in place),
    /// never blocking the host.
    #[derive(Debug)]
    pub struct RocmComm {
        comm: Comm,
        device: RocmDevice,
    }

    /// Runs `$call` with `$s`, elements `$start .. $start + $len` of `$from`'s buffer, and `$d`,
    /// all of `$out`'s buffer, for the listed dtypes (both storages have `$from`'s); any other
    /// dtype is `$err`.
    macro_rules! src_dst {
        ($op:expr, $from:expr, $out:expr, ($start:expr, $len:expr), $err:expr,
         |$s:ident, $d:ident| $call:expr; $($v:ident),*) => {
            match ($from.as_slice(), $out.as_slice_mut()) {
                $((RocmStorageSlice::$v(src), RocmStorageSlice::$v(dst)) => {
                    let $s = src.slice($start..$start + $len).map_err(hip_err($op))?;
                    let mut $d = dst.as_mut_slice();
                    $call
                })*
                _ => return Err($err),
            }
        };
    }

    impl RocmComm {
        /// Rank `rank` of `nranks` on `device` ([`Comm::init_rank`]; waits for the other ranks
        /// at most `config.timeout`).
        pub fn new(
            device: &RocmDevice,
            id: &UniqueId,
            rank: usize,
            nranks: usize,
            config: CommConfig,
        ) -> Result<RocmComm> {
            let comm = Comm::init_rank(device.hip_device(), id, rank, nranks, config)
                .map_err(nccl_err("RocmComm::new"))?;
            Self::bind(comm, device)
        }

        /// One rank per device, device `i` being rank `i` ([`Comm::init_all`]).
        pub fn init_all(devices: &[RocmDevice], config: CommConfig) -> Result<Vec<RocmComm>> {
            let hip: Vec<hip_core::Device> = devices.iter().map(|d| d.hip_device()).collect();
            let comms = Comm::init_all(&hip, config).map_err(nccl_err("RocmComm::init_all"))?;
            comms
                .into_iter()
                .zip(devices)
                .map(|(c, d)| Self::bind(c, d))
                .collect()
        }

        fn bind(mut comm: Comm, device: &RocmDevice) -> Result<RocmComm> {
            comm.set_stream(device.stream().clone())
                .map_err(nccl_err("RocmComm::new"))?;
            Ok(RocmComm {
                comm,
                device: device.clone(),
            })
        }

        /// This rank.
        pub fn rank(&self) -> usize {
            self.comm.rank()
        }

        /// The number of ranks.
        pub fn nranks(&self) -> usize {
            self.comm.nranks()
        }

        /// The device of this rank.
        pub fn device(&self) -> &RocmDevice {
            &self.device
        }

        /// The rccl-safe communicator (for point-to-point operations and groups on raw
        /// buffers).
        pub fn comm(&self) -> &Comm {
            &self.comm
        }

        /// Aborts the communicator (`ncclCommAbort`, [`Comm::abort`]): its queued and running
        /// operations are cancelled instead of waiting for peers that will never join. For a
        /// rank that gives up after an error of its own or of a peer; dropping a communicator
        /// instead destroys it, which waits for its queued work.
        pub fn abort(self) {
            self.comm.abort();
        }

        fn check_device(&self, op: &str, s: &RocmStorage) -> Result<()> {
            if s.device().same_device(&self.device) {
                Ok(())
            } else {
                Err(RocmError::layout(
                    op,
                    format!(
                        "the storage is on ROCm device {}, this rank's communicator on device {}",
                        s.device().ordinal(),
                        self.device.ordinal()
                    ),
                )
                .into())
            }
        }

        /// `op` over the ranks of `src` (in `layout`): a new contiguous storage of
        /// `layout.shape()` on this device, the same on every rank.
        pub fn all_reduce(
            &self,
            src: &RocmStorage,
            layout: &Layout,
            op: ReduceOp,
        ) -> Result<RocmStorage> {
            const OP: &str = "all_reduce";
            self.check_device(OP, src)?;
            let (tmp, start, len) = contiguous(src, layout)?;
            let from = tmp.as_ref().unwrap_or(src);
            // SAFETY: the all-reduce below writes every element.
            let mut out = unsafe { self.device.alloc_uninit(&Shape::from(len), src.dtype()) }?;
            src_dst!(
                OP,
                from,
                out,
                (start, len),
                no_reduction(OP, src.dtype()),
                |s, d| self.comm.all_reduce(&s, &mut d, op);
                U8, U32, I32, I64, BF16, F16, F32, F64
            )
            .map_err(nccl_err(OP))?;
            Ok(out)
        }

        /// [`RocmComm::all_reduce`] in place: `layout` must be contiguous (any offset).
        pub fn all_reduce_in_place(
            &self,
            storage: &mut RocmStorage,
            layout: &Layout,
            op: ReduceOp,
        ) -> Result<()> {
            const OP: &str = "all_reduce_in_place";
            self.check_device(OP, storage)?;
            let Some((start, end)) = layout.contiguous_offsets() else {
                return Err(RocmError::layout(
                    OP,
                    format!("an in-place all-reduce needs a contiguous layout, got {layout:?}"),
                )
                .into());
            };
            let dtype = storage.dtype();
            macro_rules! run {
                ($($v:ident),*) => {
                    match storage.as_slice_mut() {
                        $(RocmStorageSlice::$v(b) => {
                            let mut view = b.slice_mut(start..end).map_err(hip_err(OP))?;
                            self.comm.all_reduce_in_place(&mut view, op)
                        })*
                        _ => return Err(no_reduction(OP, dtype)),
                    }
                };
            }
            run!(U8, U32, I32, I64, BF16, F16, F32, F64).map_err(nccl_err(OP))
        }

        /// Every rank's `src` (in `layout`, the same shape on every rank), rank after rank: a
        /// contiguous storage of `nranks * layout.shape().elem_count()` elements (shape
        /// `(nranks, ..layout.shape())`).
        pub fn all_gather(&self, src: &RocmStorage, layout: &Layout) -> Result<RocmStorage> {
            const OP: &str = "all_gather";
            self.check_device(OP, src)?;
            let (tmp, start, len) = contiguous(src, layout)?;
            let from = tmp.as_ref().unwrap_or(src);
            let total = len * self.nranks();
            // SAFETY: the all-gather below writes every element.
            let mut out = unsafe { self.device.alloc_uninit(&Shape::from(total), src.dtype()) }?;
            src_dst!(
                OP,
                from,
                out,
                (start, len),
                no_type(OP, src.dtype()),
                |s, d| self.comm.all_gather(&s, &mut d);
                U8, U32, I32, I64, BF16, F16, F32, F64, F8E4M3
            )
            .map_err(nccl_err(OP))?;
            Ok(out)
        }

        /// `op` over the ranks of `src`, of which this rank keeps block `rank`: `src` (in
        /// `layout`) holds `nranks` equal blocks (its element count divides by `nranks`); the
        /// result is a contiguous storage of one block.
        pub fn reduce_scatter(
            &self,
            src: &RocmStorage,
            layout: &Layout,
            op: ReduceOp,
        ) -> Result<RocmStorage> {
            const OP: &str = "reduce_scatter";
            self.check_device(OP, src)?;
            let n = layout.shape().elem_count();
            if n % self.nranks() != 0 {
                return Err(RocmError::layout(
                    OP,
                    format!(
                        "{n} elements do not split into {} equal blocks",
                        self.nranks()
                    ),
                )
                .into());
            }
            let (tmp, start, len) = contiguous(src, layout)?;
            let from = tmp.as_ref().unwrap_or(src);
            let block = len / self.nranks();
            // SAFETY: the reduce-scatter below writes every element.
            let mut out = unsafe { self.device.alloc_uninit(&Shape::from(block), src.dtype()) }?;
            src_dst!(
                OP,
                from,
                out,
                (start, len),
                no_reduction(OP, src.dtype()),
                |s, d| self.comm.reduce_scatter(&s, &mut d, op);
                U8, U32, I32, I64, BF16, F16, F32, F64
            )
            .map_err(nccl_err(OP))?;
            Ok(out)
        }

        /// The root's `src` on every rank: every rank passes a storage of the same shape and
        /// dtype (only the root's is read) and gets a new contiguous one.
        pub fn broadcast(
            &self,
            src: &RocmStorage,
            layout: &Layout,
            root: usize,
        ) -> Result<RocmStorage> {
            const OP: &str = "broadcast";
            self.check_device(OP, src)?;
            let is_root = self.rank() == root;
            let (tmp, start, len) = if is_root {
                contiguous(src, layout)?
            } else {
                (None, 0, layout.shape().elem_count())
            };
            let from = tmp.as_ref().unwrap_or(src);
            // SAFETY: the broadcast below writes every element.
            let mut out = unsafe { self.device.alloc_uninit(&Shape::from(len), src.dtype()) }?;
            macro_rules! run {
                ($($v:ident),*) => {
                    match (from.as_slice(), out.as_slice_mut()) {
                        $((RocmStorageSlice::$v(s), RocmStorageSlice::$v(d)) => {
                            if is_root {
                                let s = s.slice(start..start + len).map_err(hip_err(OP))?;
                                self.comm.broadcast(Some(&s), &mut d.as_mut_slice(), root)
                            } else {
                                self.comm.broadcast(None, &mut d.as_mut_slice(), root)
                            }
                        })*
                        _ => return Err(no_type(OP, src.dtype())),
                    }
                };
            }
            run!(U8, U32, I32, I64, BF16, F16, F32, F64, F8E4M3).map_err(nccl_err(OP))?;
            Ok(out)
        }
    }

    /// NCCL has no type for the dtype.
    fn no_type(op: &str, dtype: DType) -> candle_core::Error {
        RocmError::unsupported(
            op,
            dtype,
            "NCCL/RCCL have no 16-bit integer type; cast to i32 first",
        )
        .into()
    }

    /// The dtype cannot be reduced by NCCL.
    fn no_reduction(op: &str, dtype: DType) -> candle_core::Error {
        if dtype == DType::F8E4M3 {
            RocmError::unsupported(
                op,
                dtype,
                "RCCL/NCCL reductions have no f8e4m3 type here (it is moved as bytes by \
                 all-gather and broadcast only); cast to f16/bf16/f32 first",
            )
            .into()
        } else {
            no_type(op, dtype)
        }
    }

    /// `x (m, k) · w^T` for `w` of shape `(n, k)` (row-major, as candle's `Linear` stores it),
    /// plus `bias` (n) broadcast over the rows: a contiguous `(m, n)` storage.
    fn linear(
        x: &RocmStorage,
        x_l: &Layout,
        w: &RocmStorage,
        (n, k): (usize, usize),
        bias: Option<&RocmStorage>,
    ) -> Result<(RocmStorage, usize)> {
        let dims = x_l.dims();
        let Some((&last, rows)) = dims.split_last() else {
            return Err(RocmError::layout("parallel linear", "the input is a scalar").into());
        };
        if last != k {
            return Err(RocmError::layout(
                "parallel linear",
                format!("the input's last dim is {last}, the weight takes {k} features"),
            )
            .into());
        }
        let m: usize = rows.iter().product();
        let (tmp, start, _) = contiguous(x, x_l)?;
        let x = tmp.as_ref().unwrap_or(x);
        let x_l = Layout::contiguous_with_offset((m, k), start);
        let w_t = Layout::contiguous((n, k)).transpose(0, 1)?;
        let y = x.matmul(w, (1, m, n, k), &x_l, &w_t)?;
        let y = match bias {
            Some(b) => {
                let b_l = Layout::contiguous(n).broadcast_as((m, n))?;
                y.binary_impl::<Add>(b, &Layout::contiguous((m, n)), &b_l)?
            }
            None => y,
        };
        Ok((y, m))
    }

    /// Rows `[r * rows / nranks, (r + 1) * rows / nranks)` (`dim == 0`) or the same range of
    /// columns (`dim == 1`) of a `(rows, cols)` storage, copied contiguous.
    fn shard(
        full: &RocmStorage,
        full_l: &Layout,
        dim: usize,
        rank: usize,
        nranks: usize,
    ) -> Result<RocmStorage> {
        let size = full_l.dims()[dim];
        if size % nranks != 0 {
            return Err(RocmError::layout(
                "parallel linear",
                format!("dim {dim} of size {size} does not split into {nranks} equal shards"),
            )
            .into());
        }
        let part = size / nranks;
        let l = full_l.narrow(dim, rank * part, part)?;
        // SAFETY: copy_strided_src writes every element.
        let mut out = unsafe { full.device().alloc_uninit(l.shape(), full.dtype()) }?;
        full.copy_strided_src(&mut out, 0, &l)?;
        Ok(out)
    }

    fn check_2d(op: &str, l: &Layout) -> Result<(usize, usize)> {
        match l.dims() {
            &[r, c] => Ok((r, c)),
            d => Err(RocmError::layout(op, format!("a weight is 2-D (out, in), got {d:?}")).into()),
        }
    }

    /// A linear layer whose output features are split over the ranks: this rank holds rows
    /// `[rank * out / nranks, ..)` of the `(out, in)` weight (and that slice of the bias) and
    /// computes those output features of `x · W^T + b` without communication
    /// ([`ColumnParallelLinear::forward`]), or all of them with an all-gather
    /// ([`ColumnParallelLinear::forward_gathered`]). Candle's `llama_multiprocess` uses it for
    /// the q/k/v and gate/up projections.
    #[derive(Debug)]
    pub struct ColumnParallelLinear {
        weight: RocmStorage,
        bias: Option<RocmStorage>,
        out_local: usize,
        in_features: usize,
    }

    impl ColumnParallelLinear {
        /// From this rank's shard: `weight` `(out / nranks, in)`, contiguous, and its bias.
        pub fn new(
            weight: RocmStorage,
            weight_l: &Layout,
            bias: Option<RocmStorage>,
        ) -> Result<Self> {
            let (out_local, in_features) = check_2d("ColumnParallelLinear::new", weight_l)?;
            let weight = match weight_l.contiguous_offsets() {
                Some((0, _)) => weight,
                _ => shard(&weight, weight_l, 0, 0, 1)?,
            };
            Ok(ColumnParallelLinear {
                weight,
                bias,
                out_local,
                in_features,
            })
        }

        /// This rank's shard of a full `(out, in)` weight (and `(out)` bias) on its device.
        pub fn from_full(
            comm: &RocmComm,
            weight: &RocmStorage,
            weight_l: &Layout,
            bias: Option<(&RocmStorage, &Layout)>,
        ) -> Result<Self> {
            let (out, _) = check_2d("ColumnParallelLinear::from_full", weight_l)?;
            let (r, n) = (comm.rank(), comm.nranks());
            let w = shard(weight, weight_l, 0, r, n)?;
            let b = match bias {
                Some((b, bl)) => {
                    if bl.dims() != [out] {
                        return Err(RocmError::layout(
                            "ColumnParallelLinear::from_full",
                            format!(
                                "the bias has shape {:?}, the weight {out} outputs",
                                bl.dims()
                            ),
                        )
                        .into());
                    }
                    // The bias as an (out, 1) column, sharded like the weight's rows.
                    let col = Layout::new(
                        Shape::from((out, 1)),
                        vec![bl.stride()[0], 1],
                        bl.start_offset(),
                    );
                    Some(shard(b, &col, 0, r, n)?)
                }
                None => None,
            };
            Ok(ColumnParallelLinear {
                weight: w,
                bias: b,
                out_local: out / n,
                in_features: weight_l.dims()[1],
            })
        }

        /// This rank's output features: `x (.., in)` -> contiguous `(.., out / nranks)`.
        pub fn forward(&self, x: &RocmStorage, x_l: &Layout) -> Result<(RocmStorage, Shape)> {
            let (y, _) = linear(
                x,
                x_l,
                &self.weight,
                (self.out_local, self.in_features),
                self.bias.as_ref(),
            )?;
            let mut dims = x_l.dims().to_vec();
            if let Some(last) = dims.last_mut() {
                *last = self.out_local;
            }
            Ok((y, Shape::from(dims)))
        }

        /// Every output feature: [`ColumnParallelLinear::forward`], an all-gather of the
        /// ranks' slices, and one reordering copy: contiguous `(.., out)`.
        pub fn forward_gathered(
            &self,
            comm: &RocmComm,
            x: &RocmStorage,
            x_l: &Layout,
        ) -> Result<(RocmStorage, Shape)> {
            let (y, _) = linear(
                x,
                x_l,
                &self.weight,
                (self.out_local, self.in_features),
                self.bias.as_ref(),
            )?;
            let m = y.as_slice().len() / self.out_local.max(1);
            let n = comm.nranks();
            let g = comm.all_gather(&y, &Layout::contiguous((m, self.out_local)))?;
            // (nranks, m, out_local) -> (m, nranks, out_local).
            let l = Layout::contiguous((n, m, self.out_local)).transpose(0, 1)?;
            // SAFETY: copy_strided_src writes every element.
            let mut out = unsafe { g.device().alloc_uninit(l.shape(), g.dtype()) }?;
            g.copy_strided_src(&mut out, 0, &l)?;
            let mut dims = x_l.dims().to_vec();
            if let Some(last) = dims.last_mut() {
                *last = self.out_local * n;
            }
            Ok((out, Shape::from(dims)))
        }
    }

    /// A linear layer whose input features are split over the ranks: this rank holds columns
    /// `[rank * in / nranks, ..)` of the `(out, in)` weight and multiplies its slice of the
    /// input (as a column-parallel layer leaves it); an all-reduce (sum) adds the ranks'
    /// partial products, and the bias is added once, after it. Candle's `llama_multiprocess`
    /// uses it for the attention output and down projections.
    #[derive(Debug)]
    pub struct RowParallelLinear {
        weight: RocmStorage,
        bias: Option<RocmStorage>,
        out_features: usize,
        in_local: usize,
    }

    impl RowParallelLinear {
        /// From this rank's shard: `weight` `(out, in / nranks)` and the full `(out)` bias.
        pub fn new(
            weight: RocmStorage,
            weight_l: &Layout,
            bias: Option<RocmStorage>,
        ) -> Result<Self> {
            let (out_features, in_local) = check_2d("RowParallelLinear::new", weight_l)?;
            let weight = match weight_l.contiguous_offsets() {
                Some((0, _)) => weight,
                _ => shard(&weight, weight_l, 0, 0, 1)?,
            };
            Ok(RowParallelLinear {
                weight,
                bias,
                out_features,
                in_local,
            })
        }

        /// This rank's shard of a full `(out, in)` weight; the bias (contiguous `(out)`) is
        /// kept whole.
        pub fn from_full(
            comm: &RocmComm,
            weight: &RocmStorage,
            weight_l: &Layout,
            bias: Option<RocmStorage>,
        ) -> Result<Self> {
            let (out, inp) = check_2d("RowParallelLinear::from_full", weight_l)?;
            let w = shard(weight, weight_l, 1, comm.rank(), comm.nranks())?;
            Ok(RowParallelLinear {
                weight: w,
                bias,
                out_features: out,
                in_local: inp / comm.nranks(),
            })
        }

        /// `x_local (.., in / nranks)` -> the full `(.., out)` on every rank: the local
        /// product, an all-reduce (sum) in place, then the bias.
        pub fn forward(
            &self,
            comm: &RocmComm,
            x: &RocmStorage,
            x_l: &Layout,
        ) -> Result<(RocmStorage, Shape)> {
            let (mut y, m) = linear(
                x,
                x_l,
                &self.weight,
                (self.out_features, self.in_local),
                None,
            )?;
            let l = Layout::contiguous((m, self.out_features));
            comm.all_reduce_in_place(&mut y, &l, ReduceOp::Sum)?;
            let y = match &self.bias {
                Some(b) => {
                    let b_l = Layout::contiguous(self.out_features)
                        .broadcast_as((m, self.out_features))?;
                    y.binary_impl::<Add>(b, &l, &b_l)?
                }
                None => y,
            };
            let mut dims = x_l.dims().to_vec();
            if let Some(last) = dims.last_mut() {
                *last = self.out_features;
            }
            Ok((y, Shape::from(dims)))
        }
    }

    /// Tensor-level collectives (feature `tensor`): the [`RocmComm`] operations on tensors of
    /// a ROCm device.
    #[cfg(feature = "tensor")]
    impl RocmComm {
        /// [`RocmComm::all_reduce`] of a tensor: a new tensor of the same shape.
        pub fn all_reduce_tensor(
            &self,
            t: &candle_core::Tensor,
            op: ReduceOp,
        ) -> Result<candle_core::Tensor> {
            let s = crate::tensor::with_rocm_storage(t, |s, l| self.all_reduce(s, l, op))?;
            crate::tensor::tensor_from_rocm_storage(s, t.shape().clone())
        }

        /// [`RocmComm::all_gather`] of a tensor: shape `(nranks, ..t.shape())`.
        pub fn all_gather_tensor(&self, t: &candle_core::Tensor) -> Result<candle_core::Tensor> {
            let s = crate::tensor::with_rocm_storage(t, |s, l| self.all_gather(s, l))?;
            let mut dims = vec![self.nranks()];
            dims.extend_from_slice(t.dims());
            crate::tensor::tensor_from_rocm_storage(s, dims)
        }

        /// [`RocmComm::reduce_scatter`] of a tensor whose first dim divides by `nranks`: this
        /// rank's block, shape `(d0 / nranks, ..)`.
        pub fn reduce_scatter_tensor(
            &self,
            t: &candle_core::Tensor,
            op: ReduceOp,
        ) -> Result<candle_core::Tensor> {
            let mut dims = t.dims().to_vec();
            match dims.first_mut() {
                Some(d0) if *d0 % self.nranks() == 0 => *d0 /= self.nranks(),
                _ => {
                    return Err(RocmError::layout(
                        "reduce_scatter",
                        format!(
                            "the first dim of {:?} does not split into {} blocks",
                            t.dims(),
                            self.nranks()
                        ),
                    )
                    .into())
                }
            }
            let s = crate::tensor::with_rocm_storage(t, |s, l| self.reduce_scatter(s, l, op))?;
            crate::tensor::tensor_from_rocm_storage(s, dims)
        }

        /// [`RocmComm::broadcast`] of a tensor (same shape and dtype on every rank).
        pub fn broadcast_tensor(
            &self,
            t: &candle_core::Tensor,
            root: usize,
        ) -> Result<candle_core::Tensor> {
            let s = crate::tensor::with_rocm_storage(t, |s, l| self.broadcast(s, l, root))?;
            crate::tensor::tensor_from_rocm_storage(s, t.shape().clone())
        }
    }
}
