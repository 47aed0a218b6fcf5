//! Typed launch wrappers for the `reduce` kernel family: sum, min, max, argmin and argmax over
//! an arbitrary set of dims of a strided input (Candle's `reduce_op(op, layout, reduce_dims)`),
//! for all 9 dtypes.
//!
//! The output is contiguous, with the input's dims except that every reduced dim has size 1
//! (Candle's keep-dim shape). Every wrapper validates before launching (ranks, view bounds,
//! reduce dims in range and unique, destination length) and reports problems as
//! [`Error::Layout`] or [`Error::Unsupported`]; it never launches a kernel that could read or
//! write out of bounds. An empty output returns `Ok(())` without launching anything.
//!
//! ## Kernels
//! Module `reduce`: `{op}_{dtype}` (one thread per output element, a sequential loop over its
//! reduced elements: coalesced when the innermost kept dim has stride 1) and
//! `{op}_block_{dtype}` (one block per output element, threads striding over the reduced
//! elements, then warp shuffles + shared memory, warp-size generic: coalesced when the
//! innermost reduced dim has stride 1, e.g. contiguous rows reduced over their last dim(s)).
//! Before launching, size-1 dims are dropped and adjacent dims that are contiguous with each
//! other are merged, separately for the kept and the reduced dims, so that e.g. a contiguous
//! tensor reduced over its trailing dims is a plain `[rows, cols]` reduction (null layout info).
//!
//! ## Semantics (candle-core 0.11 CPU backend)
//! * `sum`: integers wrap on overflow; f16/bf16/f32 accumulate in f32 and round once, f64 in
//!   f64. The summation order is a tree, not Candle's sequential order: float sums may differ in
//!   the last bits. Summing over an empty dim gives 0.
//! * `min`/`max`/`argmin`/`argmax`: Candle's fold: start at the first element, replace only by a
//!   strictly smaller (larger) one. Ties give the first index; NaNs are skipped, except a NaN
//!   first element, which is the result (index 0). `min`/`max` return the chosen element itself
//!   (bits preserved, e.g. the sign of a zero). Indices are `u32`, row-major over the reduced
//!   dims in increasing dim order (for one reduced dim: the index along it, as in Candle).
//!   Candle's CPU backend takes a single reduced dim for these; several are accepted here.
//!   Over an empty reduced set they are an [`Error::Layout`] (Candle: `EmptyTensor`); at most
//!   `u32::MAX - 1` reduced elements.

use hip_core::{DeviceSliceMut, LaunchConfig, Stream};

use crate::dtype::KernelDType;
use crate::elementwise::Strided;
use crate::elementwise::{layout_err, InfoArg};
use crate::error::{Error, Result};

/// The reductions (module `reduce`, kernels `{name}_{dtype}` and `{name}_block_{dtype}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (integers wrap).
    Sum,
    /// Minimum (Candle's NaN rule, see the module docs).
    Min,
    /// Maximum.
    Max,
    /// Index of the first minimum (`u32`); use [`arg_reduce`].
    ArgMin,
    /// Index of the first maximum (`u32`); use [`arg_reduce`].
    ArgMax,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::ArgMin,
        ReduceOp::ArgMax,
    ];

    /// The op's name, as in kernel names (`sum_f32`, `argmax_block_bf16`).
    pub fn name(&self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::ArgMin => "argmin",
            ReduceOp::ArgMax => "argmax",
        }
    }

    /// Whether the op returns indices (`u32`) rather than elements.
    pub fn returns_index(&self) -> bool {
        matches!(self, ReduceOp::ArgMin | ReduceOp::ArgMax)
    }
}

/// Threads per block of the one-thread-per-output kernels.
const THREAD_BLOCK: u32 = 256;
/// Largest block of the one-block-per-output kernels.
const MAX_REDUCE_BLOCK: usize = 256;
/// At most this many blocks per multiprocessor for grid-stride launches over outputs.
const BLOCKS_PER_MULTIPROCESSOR: usize = 16;
/// At least this many reduced elements before a block per output pays off.
const MIN_BLOCK_REDUCE: usize = 32;

fn checked_numel(op: &str, dims: &[usize]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d)
            .ok_or_else(|| layout_err(op, format!("the shape {dims:?} overflows usize")))
    })
}

/// Checks that strides over dims stay inside a view of `len` elements.
fn check_operand(op: &str, dims: &[usize], strides: &[usize], len: usize) -> Result<()> {
    if strides.len() != dims.len() {
        return Err(layout_err(
            op,
            format!(
                "the input has {} strides {strides:?} for {} dims {dims:?}",
                strides.len(),
                dims.len()
            ),
        ));
    }
    if dims.contains(&0) {
        return Ok(());
    }
    let mut max_offset = 0usize;
    for (&d, &s) in dims.iter().zip(strides) {
        max_offset = (d - 1)
            .checked_mul(s)
            .and_then(|x| x.checked_add(max_offset))
            .ok_or_else(|| {
                layout_err(
                    op,
                    format!("strides {strides:?} over {dims:?} overflow usize"),
                )
            })?;
    }
    if max_offset >= len {
        return Err(layout_err(
            op,
            format!(
                "the input reaches element {max_offset} with strides {strides:?} over {dims:?}, \
                 but its view holds {len} elements"
            ),
        ));
    }
    Ok(())
}

/// `(dim, stride)` pairs with size-1 dims dropped and adjacent mergeable dims merged
/// (row-major order preserved); `[(1, 0)]` when nothing is left, `[(0, 0)]` when empty.
fn canonical(pairs: impl Iterator<Item = (usize, usize)>) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (d, s) in pairs {
        if d == 0 {
            return vec![(0, 0)];
        }
        if d == 1 {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.1 == d * s => *last = (last.0 * d, s),
            _ => out.push((d, s)),
        }
    }
    if out.is_empty() {
        out.push((1, 0));
    }
    out
}

/// A validated reduction, ready to launch.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    out_numel: usize,
    red_numel: usize,
    kept: Vec<(usize, usize)>,
    red: Vec<(usize, usize)>,
}

impl Plan {
    /// `None` when the input is contiguous and reduced over trailing dims (null info).
    fn info(&self) -> Option<Vec<u64>> {
        let rows = self.kept == [(1, 0)] || self.kept == [(self.out_numel, self.red_numel)];
        if rows && (self.red == [(self.red_numel, 1)] || self.red == [(1, 0)]) {
            return None;
        }
        let mut info = Vec::with_capacity(2 * (self.kept.len() + self.red.len()));
        info.extend(self.kept.iter().map(|&(d, _)| d as u64));
        info.extend(self.kept.iter().map(|&(_, s)| s as u64));
        info.extend(self.red.iter().map(|&(d, _)| d as u64));
        info.extend(self.red.iter().map(|&(_, s)| s as u64));
        Some(info)
    }

    /// Whether one block per output element is the better launch.
    fn use_block(&self, multiprocessors: usize) -> bool {
        if self.red_numel < MIN_BLOCK_REDUCE {
            return false;
        }
        let red_contiguous = self.red.last().is_some_and(|&(_, s)| s == 1);
        let few_outputs = self.out_numel < multiprocessors * THREAD_BLOCK as usize;
        red_contiguous || few_outputs
    }
}

/// Validates a reduction; `None` when the output is empty (nothing to launch).
fn plan(
    op: ReduceOp,
    dims: &[usize],
    strides: &[usize],
    src_len: usize,
    reduce_dims: &[usize],
    dst_len: usize,
) -> Result<Option<Plan>> {
    let name = op.name();
    let numel = checked_numel(name, dims)?;
    check_operand(name, dims, strides, src_len)?;
    let mut reduced = vec![false; dims.len()];
    for &d in reduce_dims {
        if d >= dims.len() {
            return Err(layout_err(
                name,
                format!(
                    "reduce dim {d} out of range for {} dims {dims:?}",
                    dims.len()
                ),
            ));
        }
        if reduced[d] {
            return Err(layout_err(
                name,
                format!("reduce dim {d} given twice in {reduce_dims:?}"),
            ));
        }
        reduced[d] = true;
    }
    let out_numel: usize = dims
        .iter()
        .zip(&reduced)
        .map(|(&d, &r)| if r { 1 } else { d })
        .product();
    let red_numel: usize = dims
        .iter()
        .zip(&reduced)
        .map(|(&d, &r)| if r { d } else { 1 })
        .product();
    debug_assert!(out_numel == 0 || out_numel * red_numel == numel);
    if dst_len != out_numel {
        return Err(layout_err(
            name,
            format!(
                "the destination holds {dst_len} elements but the output (dims {dims:?} with \
                 {reduce_dims:?} reduced to 1) has {out_numel}"
            ),
        ));
    }
    if out_numel == 0 {
        return Ok(None);
    }
    if op != ReduceOp::Sum {
        if red_numel == 0 {
            return Err(layout_err(
                name,
                format!(
                    "{name} over the empty dims {reduce_dims:?} of {dims:?} has no value \
                     (Candle: EmptyTensor)"
                ),
            ));
        }
        if red_numel >= u32::MAX as usize {
            return Err(Error::Unsupported {
                op: name.to_string(),
                dtype: "-".into(),
                reason: format!("{red_numel} reduced elements: u32 indices hold fewer"),
            });
        }
    }
    let pairs = |want: bool| {
        dims.iter()
            .zip(strides)
            .zip(&reduced)
            .filter(move |(_, &r)| r == want)
            .map(|((&d, &s), _)| (d, s))
    };
    Ok(Some(Plan {
        out_numel,
        red_numel,
        kept: canonical(pairs(false)),
        red: canonical(pairs(true)),
    }))
}

fn launch<T: KernelDType, D: KernelDType>(
    stream: &Stream,
    op: ReduceOp,
    dims: &[usize],
    src: Strided<'_, T>,
    reduce_dims: &[usize],
    dst: &mut DeviceSliceMut<'_, D>,
) -> Result<()> {
    let Some(plan) = plan(
        op,
        dims,
        src.strides,
        src.data.len(),
        reduce_dims,
        dst.len(),
    )?
    else {
        return Ok(());
    };
    let device = stream.device();
    let props = device.properties();
    let sms = match props.multiprocessor_count {
        0 => 64,
        n => n as usize,
    };
    let warp = match props.warp_size {
        0 => 64,
        w => w as usize,
    };
    let block = plan.use_block(sms);
    let config = if block {
        // A power of two, a multiple of the warp size, about one thread per reduced element.
        let threads = plan
            .red_numel
            .next_power_of_two()
            .clamp(warp, MAX_REDUCE_BLOCK.max(warp));
        LaunchConfig {
            grid: [plan.out_numel.min(65_535) as u32, 1, 1],
            block: [threads as u32, 1, 1],
            shared_mem_bytes: 0,
        }
    } else {
        let max_blocks = (sms * BLOCKS_PER_MULTIPROCESSOR).min(65_535);
        let blocks = plan
            .out_numel
            .div_ceil(THREAD_BLOCK as usize)
            .clamp(1, max_blocks);
        LaunchConfig {
            grid: [blocks as u32, 1, 1],
            block: [THREAD_BLOCK, 1, 1],
            shared_mem_bytes: 0,
        }
    };
    let info = match plan.info() {
        Some(info) => Some(stream.alloc_from_host(&info)?),
        None => None,
    };
    let kernel = if block {
        format!("{}_block_{}", op.name(), T::NAME)
    } else {
        format!("{}_{}", op.name(), T::NAME)
    };
    let f = crate::modules::function(&device, "reduce", &kernel)?;
    // SAFETY: the kernel takes (u64 out_numel, u64 red_numel, u32 nk, u32 nr, const u64* info,
    // const T* inp, D* out). With info non-null it reads info[0..2 * (nk + nr)) (exactly that
    // buffer, alive until the launch is queued, then freed in stream order); the input offsets
    // it forms are those of the layout (checked against the view length above; merging dims
    // keeps them), or o * red_numel + r < numel <= view length when info is null (contiguous).
    // It writes out[0..out_numel), out_numel == dst.len(). Blocks are multiples of the warp
    // size, as the shuffles need.
    unsafe {
        f.builder(stream, config)
            .arg(plan.out_numel as u64)
            .arg(plan.red_numel as u64)
            .arg(plan.kept.len() as u32)
            .arg(plan.red.len() as u32)
            .arg(InfoArg(info.as_ref()))
            .arg(src.data)
            .arg(&mut *dst)
            .launch()?;
    }
    drop(info);
    Ok(())
}

/// `dst = op(src)` over `reduce_dims` of `dims` (`Sum`, `Min` or `Max`; all dtypes). `dst` is
/// contiguous with `dims`' element count after setting each reduced dim to 1. `reduce_dims`
/// may be in any order, must be unique and `< dims.len()`; empty means a copy.
pub fn reduce<T: KernelDType>(
    stream: &Stream,
    op: ReduceOp,
    dims: &[usize],
    src: Strided<'_, T>,
    reduce_dims: &[usize],
    dst: &mut DeviceSliceMut<'_, T>,
) -> Result<()> {
    if op.returns_index() {
        return Err(Error::Unsupported {
            op: op.name().to_string(),
            dtype: T::NAME.to_string(),
            reason: "it returns u32 indices: use reduce::arg_reduce".into(),
        });
    }
    launch(stream, op, dims, src, reduce_dims, dst)
}

/// `dst = op(src)` (`ArgMin` or `ArgMax`; all dtypes): `u32` indices, row-major over the
/// reduced dims, of the first extremum (see the module docs for NaN); shapes as [`reduce`].
pub fn arg_reduce<T: KernelDType>(
    stream: &Stream,
    op: ReduceOp,
    dims: &[usize],
    src: Strided<'_, T>,
    reduce_dims: &[usize],
    dst: &mut DeviceSliceMut<'_, u32>,
) -> Result<()> {
    if !op.returns_index() {
        return Err(Error::Unsupported {
            op: op.name().to_string(),
            dtype: T::NAME.to_string(),
            reason: "it returns elements, not indices: use reduce::reduce".into(),
        });
    }
    launch(stream, op, dims, src, reduce_dims, dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(dims: &[usize], strides: &[usize], rd: &[usize]) -> Result<Option<Plan>> {
        let len = 1 + dims
            .iter()
            .zip(strides)
            .map(|(&d, &s)| d.saturating_sub(1) * s)
            .sum::<usize>();
        let out: usize = dims
            .iter()
            .enumerate()
            .map(|(i, &d)| if rd.contains(&i) { 1 } else { d })
            .product();
        plan(ReduceOp::Max, dims, strides, len, rd, out)
    }

    #[test]
    fn contiguous_trailing_reductions_need_no_info() {
        let pl = p(&[4, 5, 8], &[40, 8, 1], &[1, 2]).unwrap().unwrap();
        assert_eq!((pl.out_numel, pl.red_numel), (4, 40));
        assert_eq!(pl.kept, vec![(4, 40)]);
        assert_eq!(pl.red, vec![(40, 1)]);
        assert_eq!(pl.info(), None);
        assert!(pl.use_block(100));
        // Everything reduced, in any order.
        let pl = p(&[4, 5, 6], &[30, 6, 1], &[2, 0, 1]).unwrap().unwrap();
        assert_eq!(
            (pl.kept.clone(), pl.red.clone()),
            (vec![(1, 0)], vec![(120, 1)])
        );
        assert_eq!(pl.info(), None);
    }

    #[test]
    fn strided_reductions_keep_dim_order() {
        // Reduce the first dim of a contiguous [8, 3, 5]: kept [15] stride 1, red [8] stride 15.
        let pl = p(&[8, 3, 5], &[15, 5, 1], &[0]).unwrap().unwrap();
        assert_eq!(pl.kept, vec![(15, 1)]);
        assert_eq!(pl.red, vec![(8, 15)]);
        assert_eq!(pl.info(), Some(vec![15, 1, 8, 15]));
        assert!(
            !pl.use_block(1),
            "few reduced elements: one thread per output"
        );
        // Middle and first dims of a transposed view: not mergeable.
        let pl = p(&[3, 4, 5], &[1, 15, 3], &[0, 1]).unwrap().unwrap();
        assert_eq!(pl.red, vec![(3, 1), (4, 15)]);
        assert_eq!(pl.kept, vec![(5, 3)]);
        // Size-1 and broadcast dims.
        let pl = p(&[1, 6, 1], &[0, 0, 7], &[1]).unwrap().unwrap();
        assert_eq!(
            (pl.kept.clone(), pl.red.clone()),
            (vec![(1, 0)], vec![(6, 0)])
        );
    }

    #[test]
    fn invalid_reductions_are_errors() {
        let err = |r: Result<Option<Plan>>| matches!(r, Err(Error::Layout { .. }));
        assert!(err(p(&[2, 3], &[3, 1], &[2])), "dim out of range");
        assert!(err(p(&[2, 3], &[3, 1], &[1, 1])), "dim twice");
        assert!(
            err(plan(ReduceOp::Sum, &[2, 3], &[3, 1], 5, &[1], 2)),
            "short view"
        );
        assert!(
            err(plan(ReduceOp::Sum, &[2, 3], &[3, 1], 6, &[1], 3)),
            "dst length"
        );
        assert!(
            err(plan(ReduceOp::Min, &[2, 0], &[0, 1], 0, &[1], 2)),
            "empty min"
        );
        // An empty sum is zeros; an empty output needs no launch.
        let pl = plan(ReduceOp::Sum, &[2, 0], &[0, 1], 0, &[1], 2)
            .unwrap()
            .unwrap();
        assert_eq!((pl.red_numel, pl.red.clone()), (0, vec![(0, 0)]));
        assert_eq!(
            plan(ReduceOp::Min, &[0, 4], &[4, 1], 0, &[1], 0).unwrap(),
            None
        );
        assert_eq!(
            plan(ReduceOp::Sum, &[0, 4], &[4, 1], 0, &[0], 4)
                .map(|p| p.is_some())
                .ok(),
            Some(true)
        );
    }

    #[test]
    fn kernels_exist_in_the_source() {
        let src = crate::modules::full_source("reduce").expect("reduce module");
        for op in ReduceOp::ALL {
            assert!(
                src.contains(&format!("RK_REDUCE_KERNELS({}, ", op.name())),
                "{op:?}"
            );
        }
        for dt in [
            "u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64",
        ] {
            assert!(src.contains(&format!("RK_REDUCE_ALL({dt})")), "{dt}");
        }
    }
}
