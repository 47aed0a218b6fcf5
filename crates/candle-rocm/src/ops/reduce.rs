//! Reductions: sum, min, max over any set of dims, and argmin/argmax over exactly one dim (as
//! candle's CPU backend requires), for every kernel dtype. The output keeps every reduced dim
//! as size 1 (Candle's convention), contiguous; argmin/argmax give `u32` indices.

use candle_core::backend::BackendStorage;
use candle_core::op::ReduceOp;
use candle_core::{Error, Layout, Result};
use hip_core::DeviceBuffer;
use rocm_kernels::KernelDType;

use crate::buffers::view;
use crate::device::RocmDevice;
use crate::error::kernel_err;
use crate::ops::dispatch::{f8_error, map_dtype};
use crate::storage::{RocmStorage, RocmStorageSlice};

/// Refuses an argmin/argmax that does not reduce exactly one dim, with the error candle's CPU
/// backend gives ([`Error::OnlySingleDimension`], `op` being `argmin` or `argmax`): an index
/// into several dims (or none) has no Candle convention. Other reductions pass.
pub(crate) fn check_reduce_dims(op: ReduceOp, reduce_dims: &[usize]) -> Result<()> {
    let name = match op {
        ReduceOp::ArgMin => "argmin",
        ReduceOp::ArgMax => "argmax",
        ReduceOp::Sum | ReduceOp::Min | ReduceOp::Max => return Ok(()),
    };
    if reduce_dims.len() == 1 {
        Ok(())
    } else {
        Err(Error::OnlySingleDimension {
            op: name,
            dims: reduce_dims.to_vec(),
        }
        .bt())
    }
}

/// argmin/argmax of `buf` over `reduce_dims` into a new `u32` buffer of `out_elems` indices.
fn arg_reduce_into<T: KernelDType>(
    dev: &RocmDevice,
    op: &str,
    kernel_op: rocm_kernels::reduce::ReduceOp,
    buf: &DeviceBuffer<T>,
    layout: &Layout,
    reduce_dims: &[usize],
    out_elems: usize,
) -> Result<DeviceBuffer<u32>> {
    let mut out = dev.alloc::<u32>(op, out_elems)?;
    let src = view(op, buf, layout)?;
    rocm_kernels::reduce::arg_reduce(
        dev.stream(),
        kernel_op,
        layout.dims(),
        src,
        reduce_dims,
        &mut out.as_mut_slice(),
    )
    .map_err(kernel_err(op))?;
    Ok(out)
}

/// The reduction `op` of `x` (viewed through `layout`) over `reduce_dims`.
pub(crate) fn reduce_op(
    x: &RocmStorage,
    op: ReduceOp,
    layout: &Layout,
    reduce_dims: &[usize],
) -> Result<RocmStorage> {
    check_reduce_dims(op, reduce_dims)?;
    let (name, kernel_op) = match op {
        ReduceOp::Sum => ("reduce sum", rocm_kernels::reduce::ReduceOp::Sum),
        ReduceOp::Min => ("reduce min", rocm_kernels::reduce::ReduceOp::Min),
        ReduceOp::Max => ("reduce max", rocm_kernels::reduce::ReduceOp::Max),
        ReduceOp::ArgMin => ("reduce argmin", rocm_kernels::reduce::ReduceOp::ArgMin),
        ReduceOp::ArgMax => ("reduce argmax", rocm_kernels::reduce::ReduceOp::ArgMax),
    };
    // The output keeps every reduced dim as size 1 (Candle's convention), contiguous.
    let out_elems: usize = layout
        .dims()
        .iter()
        .enumerate()
        .map(|(i, &d)| if reduce_dims.contains(&i) { 1 } else { d })
        .product();
    let dev = x.device();
    if kernel_op.returns_index() {
        let out = match x.as_slice() {
            RocmStorageSlice::U8(b) => {
                arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
            }
            RocmStorageSlice::U32(b) => {
                arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
            }
            RocmStorageSlice::I16(b) => {
                arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
            }
            RocmStorageSlice::I32(b) => {
                arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
            }
            RocmStorageSlice::I64(b) => {
                arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
            }
            RocmStorageSlice::BF16(b) => {
                arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
            }
            RocmStorageSlice::F16(b) => {
                arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
            }
            RocmStorageSlice::F32(b) => {
                arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
            }
            RocmStorageSlice::F64(b) => {
                arg_reduce_into(dev, name, kernel_op, b, layout, reduce_dims, out_elems)
            }
            RocmStorageSlice::F8E4M3(_) => return Err(f8_error(name)),
        }?;
        return Ok(x.wrap(RocmStorageSlice::U32(out)));
    }
    let slice = map_dtype!(x.as_slice(), name, |b| {
        let mut out = dev.alloc(name, out_elems)?;
        let src = view(name, b, layout)?;
        rocm_kernels::reduce::reduce(
            dev.stream(),
            kernel_op,
            layout.dims(),
            src,
            reduce_dims,
            &mut out.as_mut_slice(),
        )
        .map_err(kernel_err(name))
        .map(|()| out)
    });
    Ok(x.wrap(slice))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message and fields of the error, whether or not candle wrapped it in a backtrace.
    fn only_single_dimension(e: &Error) -> Option<(&'static str, Vec<usize>, String)> {
        match e {
            Error::WithBacktrace { inner, .. } => only_single_dimension(inner),
            Error::OnlySingleDimension { op, dims } => Some((op, dims.clone(), e.to_string())),
            _ => None,
        }
    }

    #[test]
    fn argmin_argmax_reduce_exactly_one_dim_as_on_the_cpu() {
        for (op, name) in [(ReduceOp::ArgMin, "argmin"), (ReduceOp::ArgMax, "argmax")] {
            for dims in [&[0usize, 1][..], &[], &[2, 0], &[1, 1]] {
                let e = check_reduce_dims(op, dims).unwrap_err();
                let (got_op, got_dims, msg) = only_single_dimension(&e)
                    .unwrap_or_else(|| panic!("{name} {dims:?}: unexpected error {e}"));
                assert_eq!((got_op, got_dims.as_slice()), (name, dims));
                assert_eq!(
                    msg,
                    format!("{name} can only be performed on a single dimension")
                );
            }
            for dims in [[0usize], [2]] {
                check_reduce_dims(op, &dims).unwrap();
            }
        }
        for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max] {
            for dims in [&[0usize, 1][..], &[], &[1]] {
                check_reduce_dims(op, dims).unwrap();
            }
        }
    }

    #[test]
    fn the_check_matches_candles_cpu_backend() {
        use candle_core::{CpuStorage, Layout};
        let x = CpuStorage::F32((0..24).map(|i| i as f32).collect());
        let l = Layout::contiguous((2, 3, 4));
        for op in [ReduceOp::ArgMin, ReduceOp::ArgMax] {
            for dims in [&[0usize, 1][..], &[]] {
                let cpu = x.reduce_op(op, &l, dims).unwrap_err();
                let ours = check_reduce_dims(op, dims).unwrap_err();
                assert_eq!(
                    only_single_dimension(&ours),
                    only_single_dimension(&cpu),
                    "{op:?} {dims:?}"
                );
            }
        }
    }
}
