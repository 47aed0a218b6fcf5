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
//! ## Split (two-pass) reductions
//! One block per output leaves most of the GPU idle when there are few outputs (`sum_all` of
//! 10^8 elements would run on one multiprocessor). When there are at most
//! `SPLIT_OUTPUTS_PER_MULTIPROCESSOR` outputs per multiprocessor and at least
//! `2 * SPLIT_MIN_CHUNK` reduced elements per output, [`reduce`] splits one reduced dim of size
//! `D` and stride `S` into `(G, D / G)` with strides `(S * D / G, S)`, `G` a divisor of `D` chosen
//! so that `out_numel * G` blocks fill the machine (`SPLIT_BLOCKS_PER_MULTIPROCESSOR` per
//! multiprocessor; the divisor nearest that by ratio, over every reduced dim). The same kernels
//! then run twice: pass 1 treats `G` as an extra, innermost kept dim and writes `out_numel * G`
//! partials to a temporary buffer allocated on the stream (freed in stream order: no host
//! wait); pass 2 reduces each output's `G` contiguous partials. Where `D` has no divisor that
//! leaves parts of at least `SPLIT_MIN_CHUNK` elements, every other reduced dim is tried, else
//! the single pass stays.
//!
//! Only where the result is the single pass's (`split_is_exact`): integer sums (they wrap:
//! any grouping gives the same bits), integer min/max (equal integers have equal bits), f32 and
//! f64 sums (the partials keep the accumulator's own precision; only the order of the
//! additions changes, which the single pass's tree does not fix either), and float min/max
//! through the `{min,max}_part[_block]_{T}` kernels in pass 1 (Candle's NaN rule for the first
//! part of each output only, the outermost reduced dim split in order: the same bits). Not
//! f16/bf16 sums (partials would round to 16 bits), not argmin/argmax (partials would need
//! their indices).
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

use std::ffi::OsStr;
use std::sync::OnceLock;

use hip_core::{Device, DeviceSlice, DeviceSliceMut, LaunchConfig, Stream};

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
/// Largest block of the one-block-per-output kernels when there are fewer outputs than
/// multiprocessors.
const MAX_FEW_OUTPUTS_BLOCK: usize = 1024;
/// At most this many blocks per multiprocessor for grid-stride launches over outputs.
const BLOCKS_PER_MULTIPROCESSOR: usize = 16;
/// At least this many reduced elements before a block per output pays off.
const MIN_BLOCK_REDUCE: usize = 32;
/// Blocks per multiprocessor that a split reduction's first pass aims at (`out_numel * G` in
/// all): as many as the grid-stride launches over outputs allow, so that blocks finishing at
/// different times leave little of the machine idle at the end.
const SPLIT_BLOCKS_PER_MULTIPROCESSOR: usize = BLOCKS_PER_MULTIPROCESSOR;
/// Reductions with at most this many outputs per multiprocessor are split: with one block per
/// output, fewer than this many blocks per multiprocessor leave it mostly waiting on memory.
const SPLIT_OUTPUTS_PER_MULTIPROCESSOR: usize = 4;
/// Fewest reduced elements per first-pass block of a split (8 rounds of a 256-thread block's
/// 8 unrolled loads), so that the second launch pays off.
const SPLIT_MIN_CHUNK: usize = 1 << 14;
/// Fewest elements each part keeps of the split dim when that is the innermost reduced dim, so
/// that the threads of a block still read runs at least this long.
const SPLIT_MIN_INNER_RUN: usize = 64;
/// Set to anything but empty or `0`: [`reduce`] never splits (read once per process).
const NO_SPLIT_ENV: &str = "ROCM_KERNELS_NO_SPLIT_REDUCE";

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

    /// One past the largest input offset the kernel reads (0 when it reads none, i.e. an empty
    /// sum); `None` on overflow. With null info the kernel reads `o * red_numel + r`, which is
    /// what `kept` and `red` describe then.
    fn reach(&self) -> Option<usize> {
        if self.red_numel == 0 {
            return Some(0);
        }
        self.kept
            .iter()
            .chain(&self.red)
            .try_fold(1usize, |acc, &(d, s)| {
                d.saturating_sub(1).checked_mul(s)?.checked_add(acc)
            })
    }

    /// The two-pass form of this reduction on a device with `multiprocessors` multiprocessors,
    /// or `None` when the single pass stays (enough outputs to fill the machine, too few
    /// reduced elements, or no reduced dim with a suitable divisor; see the module docs).
    ///
    /// Only for ops that [`split_is_exact`] accepts: the reduced dims are reordered (largest
    /// stride outermost, broadcast dims first) and every part is reduced on its own, both of
    /// which those ops do not notice.
    fn split(&self, multiprocessors: usize, keep_order: bool) -> Option<Split> {
        let multiprocessors = multiprocessors.max(1);
        if self.out_numel > multiprocessors * SPLIT_OUTPUTS_PER_MULTIPROCESSOR {
            return None;
        }
        let max_parts = self.red_numel / SPLIT_MIN_CHUNK;
        if max_parts < 2 {
            return None;
        }
        let want = (multiprocessors * SPLIT_BLOCKS_PER_MULTIPROCESSOR).div_ceil(self.out_numel);
        let mut red = self.red.clone();
        if !keep_order {
            red.sort_by_key(|&(_, s)| std::cmp::Reverse(if s == 0 { usize::MAX } else { s }));
        }
        let red = canonical(red.into_iter());
        let innermost = red.len() - 1;
        let mut best: Option<(usize, usize)> = None;
        // With `keep_order`, only the outermost reduced dim is split: every part is then a run
        // of consecutive elements in the reduction's own order, as "first of equals" needs.
        let candidates = if keep_order { 1 } else { red.len() };
        for (j, &(d, _)) in red.iter().enumerate().take(candidates) {
            let max = if j == innermost {
                max_parts.min(d / SPLIT_MIN_INNER_RUN)
            } else {
                max_parts
            };
            if let Some(g) = nearest_divisor(d, want, max) {
                if best.is_none_or(|(_, b)| nearer(g, b, want)) {
                    best = Some((j, g));
                }
            }
        }
        let (j, parts) = best?;
        let (d, s) = red[j];
        let run = d / parts;
        // Part g of the split dim starts at element g * run of it: offset g * run * S.
        let part_stride = s.checked_mul(run)?;
        let first_red = canonical(
            red.iter()
                .enumerate()
                .map(|(i, &p)| if i == j { (run, s) } else { p }),
        );
        let first_kept = canonical(
            self.kept
                .iter()
                .copied()
                .chain(std::iter::once((parts, part_stride))),
        );
        Some(Split {
            parts,
            first: Plan {
                out_numel: self.out_numel * parts,
                red_numel: self.red_numel / parts,
                kept: first_kept,
                red: first_red,
            },
            second: Plan {
                out_numel: self.out_numel,
                red_numel: parts,
                kept: canonical(std::iter::once((self.out_numel, parts))),
                red: vec![(parts, 1)],
            },
        })
    }
}

/// A reduction in two passes over the same kernels (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Split {
    /// Parts per output (`G`).
    parts: usize,
    /// Pass 1, over the input: `out_numel * G` partials, `G` innermost (an extra kept dim), each
    /// the reduction of one part of `red_numel / G` elements.
    first: Plan,
    /// Pass 2, over the contiguous `[out_numel, G]` partials: reduced over their last dim.
    second: Plan,
}

/// The divisor `g` of `d` with `2 <= g <= max` nearest to `want` by ratio (ties: the larger),
/// or `None` when there is none. Costs at most about `min(want, max)` trial divisions.
fn nearest_divisor(d: usize, want: usize, max: usize) -> Option<usize> {
    let max = max.min(d);
    if max < 2 {
        return None;
    }
    let want = want.clamp(2, max);
    let below = (2..=want).rev().find(|&g| d % g == 0);
    // Above `want`, only divisors at least as near as `below` count: g / want <= want / below.
    let limit = match below {
        Some(b) => {
            let limit = (want as u128 * want as u128) / b as u128;
            usize::try_from(limit).unwrap_or(usize::MAX).min(max)
        }
        None => max,
    };
    (want + 1..=limit).find(|&g| d % g == 0).or(below)
}

/// Whether `a` is strictly nearer to `want` than `b` by ratio (both and `want` at least 1).
fn nearer(a: usize, b: usize, want: usize) -> bool {
    let ratio = |g: usize| (g.max(want) as u128, g.min(want) as u128);
    let ((an, ad), (bn, bd)) = (ratio(a), ratio(b));
    an * bd < bn * ad
}

/// Whether splitting `op` over the dtype named `dtype` gives what the single pass gives: the
/// same bits, or (f32/f64 sums) the same accuracy.
///
/// * Integer sums wrap (modulo 2^bits, also in the partials the kernels truncate to the type):
///   any grouping gives the same bits.
/// * Integer min/max: the kernels write the chosen element itself, and equal integers have
///   equal bits, so which of several equal elements a part or the second pass picks does not
///   show.
/// * f32 and f64 sums accumulate in f32 / f64 and write the accumulator itself: the partials
///   lose nothing, only the order of the additions changes, which the single pass does not fix
///   either (a per-thread loop, then a tree). f16/bf16 sums accumulate in f32 but the partials
///   would round to 16 bits: not split.
/// * argmin/argmax: the partials would have to carry indices: not split.
/// * Float min/max: pass 1 takes the `_part` kernels, which apply Candle's rule for a NaN
///   element 0 to each output's first part only and skip NaNs in the others (with Candle's rule
///   in every part, a later part starting with a NaN would yield NaN and pass 2 would skip it:
///   max over [1, 2, NaN, 5] in two parts would give 2, not 5); and only the outermost reduced
///   dim is split, without reordering ([`Plan::split`]'s `keep_order`), so each part is a run
///   of consecutive elements: each part yields its first extremal element and pass 2 the first
///   of equal partials, i.e. the first of equal elements overall (+0 / -0 bits included).
fn split_is_exact(op: ReduceOp, dtype: &str, is_float: bool) -> bool {
    match op {
        ReduceOp::Sum => !is_float || dtype == "f32" || dtype == "f64",
        // Floats through the `_part` kernels in pass 1 (see [`uses_part_kernels`]).
        ReduceOp::Min | ReduceOp::Max => true,
        ReduceOp::ArgMin | ReduceOp::ArgMax => false,
    }
}

/// Whether pass 1 of a split takes the `{min,max}_part[_block]_{T}` kernels: float min/max,
/// whose element-0 NaN rule must hold only for each output's first part (the other parts skip
/// NaNs), so that pass 2 over the partials gives the single pass's bits (kernels/reduce.hip).
fn uses_part_kernels(op: ReduceOp, is_float: bool) -> bool {
    is_float && matches!(op, ReduceOp::Min | ReduceOp::Max)
}

/// Whether a value of `ROCM_KERNELS_NO_SPLIT_REDUCE` turns the split off (set, not empty, not
/// `0`).
fn env_disables_split(value: Option<&OsStr>) -> bool {
    matches!(value, Some(v) if !v.is_empty() && v != OsStr::new("0"))
}

/// Whether [`reduce`] may split (`ROCM_KERNELS_NO_SPLIT_REDUCE`, read on the first call).
fn split_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| !env_disables_split(std::env::var_os(NO_SPLIT_ENV).as_deref()))
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
    // Checked: with an empty dim elsewhere, the others' product may exceed usize.
    let product = |kept: bool| {
        dims.iter()
            .zip(&reduced)
            .map(|(&d, &r)| if r != kept { d } else { 1 })
            .try_fold(1usize, usize::checked_mul)
            .ok_or_else(|| layout_err(name, format!("the sizes of {dims:?} overflow usize")))
    };
    let out_numel = product(true)?;
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
    // A non-empty output: the reduced dims' product times it is numel, which fits.
    let red_numel = product(false)?;
    debug_assert!(out_numel * red_numel == numel);
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

/// The device figures the launches depend on.
#[derive(Debug, Clone, Copy)]
struct Gpu {
    multiprocessors: usize,
    warp: usize,
}

impl Gpu {
    fn of(device: &Device) -> Gpu {
        let props = device.properties();
        Gpu {
            multiprocessors: match props.multiprocessor_count {
                0 => 64,
                n => n as usize,
            },
            warp: match props.warp_size {
                0 => 64,
                w => w as usize,
            },
        }
    }
}

/// Launches one kernel for `plan` (validated by [`plan`], or one pass of its [`Plan::split`]).
fn launch<T: KernelDType, D: KernelDType>(
    stream: &Stream,
    op: ReduceOp,
    plan: &Plan,
    gpu: Gpu,
    src: DeviceSlice<'_, T>,
    dst: &mut DeviceSliceMut<'_, D>,
    parts: Option<u64>,
) -> Result<()> {
    // Re-checked here (a few multiplications) so that the launch's safety rests on this
    // function alone, whichever plan it is given.
    if dst.len() != plan.out_numel || plan.reach().is_none_or(|reach| reach > src.len()) {
        return Err(layout_err(
            op.name(),
            format!(
                "internal: the plan {plan:?} does not fit an input of {} and an output of {} \
                 elements",
                src.len(),
                dst.len()
            ),
        ));
    }
    let block = plan.use_block(gpu.multiprocessors);
    let part = if parts.is_some() { "_part" } else { "" };
    let kernel = if block {
        format!("{}{part}_block_{}", op.name(), T::NAME)
    } else {
        format!("{}{part}_{}", op.name(), T::NAME)
    };
    let f = crate::modules::function(&stream.device(), "reduce", &kernel)?;
    let config = if block {
        // A power of two, a multiple of the warp size, about one thread per reduced element.
        // Fewer outputs than multiprocessors (an argmax over a vocabulary, one row): each
        // output's block is alone on its multiprocessor, so it takes up to 1024 threads to keep
        // more loads in flight (a 128k-element row took 72 us with 256).
        let cap = if plan.out_numel < gpu.multiprocessors {
            MAX_FEW_OUTPUTS_BLOCK
        } else {
            MAX_REDUCE_BLOCK
        };
        let launchable = crate::elementwise::launchable_block(
            f.attributes().max_threads_per_block,
            MAX_REDUCE_BLOCK,
        );
        let threads = plan
            .red_numel
            .next_power_of_two()
            .clamp(gpu.warp, cap.min(launchable).max(gpu.warp));
        LaunchConfig {
            grid: [plan.out_numel.min(65_535) as u32, 1, 1],
            block: [threads as u32, 1, 1],
            shared_mem_bytes: 0,
        }
    } else {
        let max_blocks = (gpu.multiprocessors * BLOCKS_PER_MULTIPROCESSOR).min(65_535);
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
        Some(info) => Some(stream.alloc_from_host_async(&info)?),
        None => None,
    };
    // SAFETY: the kernel takes (u64 out_numel, u64 red_numel, u32 nk, u32 nr, const u64* info,
    // const T* inp, D* out). With info non-null it reads info[0..2 * (nk + nr)) (exactly that
    // buffer, alive until the launch is queued, then freed in stream order); the input offsets
    // it forms are offset(o; kept) + offset(r; red) <= sum of (d - 1) * s over both, below
    // plan.reach() <= src.len() (checked above), or o * red_numel + r < out_numel * red_numel
    // == plan.reach() when info is null (the plan's dims then describe exactly that). It writes
    // out[0..out_numel), out_numel == dst.len() (checked above). Blocks are multiples of the
    // warp size, as the shuffles need. The `_part` kernels take one more argument, u64 parts
    // (any value: it only selects which outputs keep the NaN rule).
    unsafe {
        // The kernels wait for the previous kernels before touching memory
        // (rk_overlapped_entry), so the launch may overlap the previous one.
        let mut b = f
            .builder(stream, config)
            .overlap_previous(true)
            .arg(plan.out_numel as u64)
            .arg(plan.red_numel as u64)
            .arg(plan.kept.len() as u32)
            .arg(plan.red.len() as u32)
            .arg(InfoArg(info.as_ref()))
            .arg(src)
            .arg(&mut *dst);
        if let Some(parts) = parts {
            b = b.arg(parts);
        }
        b.launch()?;
    }
    drop(info);
    Ok(())
}

/// [`reduce`], with the split allowed or not.
fn reduce_impl<T: KernelDType>(
    stream: &Stream,
    op: ReduceOp,
    dims: &[usize],
    src: Strided<'_, T>,
    reduce_dims: &[usize],
    dst: &mut DeviceSliceMut<'_, T>,
    allow_split: bool,
) -> Result<()> {
    if op.returns_index() {
        return Err(Error::Unsupported {
            op: op.name().to_string(),
            dtype: T::NAME.to_string(),
            reason: "it returns u32 indices: use reduce::arg_reduce".into(),
        });
    }
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
    let gpu = Gpu::of(&stream.device());
    let split = if allow_split && split_enabled() && split_is_exact(op, T::NAME, T::IS_FLOAT) {
        plan.split(gpu.multiprocessors, uses_part_kernels(op, T::IS_FLOAT))
    } else {
        None
    };
    let Some(split) = split else {
        return launch(stream, op, &plan, gpu, src.data, dst, None);
    };
    let parts = uses_part_kernels(op, T::IS_FLOAT)
        .then(|| split.first.out_numel.checked_div(plan.out_numel))
        .flatten()
        .map(|p| p as u64);
    // Pass 1 reads the same input elements as the single pass would (each part's offsets are
    // the split dim's own), pass 2 only the partials. The partials buffer comes from the
    // stream's caching allocator and goes back to it when dropped, in stream order: reused only
    // by work queued after pass 2, no host wait.
    let mut partials = stream.alloc::<T>(split.first.out_numel)?;
    launch(
        stream,
        op,
        &split.first,
        gpu,
        src.data,
        &mut partials.as_mut_slice(),
        parts,
    )?;
    launch(
        stream,
        op,
        &split.second,
        gpu,
        partials.as_slice(),
        dst,
        None,
    )?;
    drop(partials);
    Ok(())
}

/// `dst = op(src)` over `reduce_dims` of `dims` (`Sum`, `Min` or `Max`; all dtypes). `dst` is
/// contiguous with `dims`' element count after setting each reduced dim to 1. `reduce_dims`
/// may be in any order, must be unique and `< dims.len()`; empty means a copy. Few outputs of
/// many elements are reduced in two passes where that gives the same result (module docs).
pub fn reduce<T: KernelDType>(
    stream: &Stream,
    op: ReduceOp,
    dims: &[usize],
    src: Strided<'_, T>,
    reduce_dims: &[usize],
    dst: &mut DeviceSliceMut<'_, T>,
) -> Result<()> {
    reduce_impl(stream, op, dims, src, reduce_dims, dst, true)
}

/// [`reduce`] always in a single pass (never split), whatever `ROCM_KERNELS_NO_SPLIT_REDUCE`
/// says: for tests and benchmarks that compare the two paths. Not part of the supported API.
#[doc(hidden)]
pub fn reduce_single_pass<T: KernelDType>(
    stream: &Stream,
    op: ReduceOp,
    dims: &[usize],
    src: Strided<'_, T>,
    reduce_dims: &[usize],
    dst: &mut DeviceSliceMut<'_, T>,
) -> Result<()> {
    reduce_impl(stream, op, dims, src, reduce_dims, dst, false)
}

/// Into how many parts [`reduce`] splits each output of this reduction of a view with
/// `strides` on `device` (`None`: a single pass), ignoring `ROCM_KERNELS_NO_SPLIT_REDUCE`; the
/// same validation errors as [`reduce`] (the view is taken to be exactly as long as the
/// strides reach). For tests and benchmarks. Not part of the supported API.
#[doc(hidden)]
pub fn split_parts<T: KernelDType>(
    device: &Device,
    op: ReduceOp,
    dims: &[usize],
    strides: &[usize],
    reduce_dims: &[usize],
) -> Result<Option<usize>> {
    planned_parts(
        op,
        T::NAME,
        T::IS_FLOAT,
        dims,
        strides,
        reduce_dims,
        Gpu::of(device).multiprocessors,
    )
}

/// [`split_parts`] for a dtype by name on `multiprocessors` multiprocessors.
fn planned_parts(
    op: ReduceOp,
    dtype: &str,
    is_float: bool,
    dims: &[usize],
    strides: &[usize],
    reduce_dims: &[usize],
    multiprocessors: usize,
) -> Result<Option<usize>> {
    let name = op.name();
    checked_numel(name, dims)?;
    let kept: Vec<usize> = (0..dims.len())
        .map(|i| if reduce_dims.contains(&i) { 1 } else { dims[i] })
        .collect();
    let out_numel = checked_numel(name, &kept)?;
    // The view's length: one past the furthest element (an overflow is check_operand's error).
    let len = if dims.contains(&0) {
        0
    } else {
        dims.iter()
            .zip(strides)
            .try_fold(1usize, |acc, (&d, &s)| {
                (d - 1).checked_mul(s)?.checked_add(acc)
            })
            .unwrap_or(usize::MAX)
    };
    let plan = plan(op, dims, strides, len, reduce_dims, out_numel)?;
    if !split_is_exact(op, dtype, is_float) {
        return Ok(None);
    }
    Ok(plan
        .and_then(|p| p.split(multiprocessors, uses_part_kernels(op, is_float)))
        .map(|s| s.parts))
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
    launch(
        stream,
        op,
        &plan,
        Gpu::of(&stream.device()),
        src.data,
        dst,
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_dim_beside_huge_ones_is_an_error_or_empty_not_an_overflow() {
        // 0 elements in all, but the kept dims' product exceeds usize.
        let dims = [0usize, 1 << 40, 1 << 40];
        let r = plan(ReduceOp::Sum, &dims, &[0, 0, 0], 0, &[0], 0);
        assert!(r.is_err(), "{r:?}");
        // The same with the huge dims reduced: an empty output, nothing to launch.
        let r = plan(ReduceOp::Sum, &dims, &[0, 0, 0], 0, &[1, 2], 0);
        assert!(matches!(r, Ok(None)), "{r:?}");
    }

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

    /// A sum's plan over a view exactly as long as its strides reach.
    fn sum_plan(dims: &[usize], strides: &[usize], rd: &[usize]) -> Plan {
        planned(dims, strides, rd).expect("a valid reduction")
    }

    fn planned(dims: &[usize], strides: &[usize], rd: &[usize]) -> Option<Plan> {
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
        plan(ReduceOp::Sum, dims, strides, len, rd, out).unwrap()
    }

    /// The input offsets each output of `plan` reads, in reduction order, as the kernels form
    /// them (and, with null info, checked to be `o * red_numel + r`).
    fn offsets(plan: &Plan) -> Vec<Vec<usize>> {
        let at = |pairs: &[(usize, usize)], mut i: usize| {
            let mut off = 0;
            for &(d, s) in pairs.iter().rev() {
                off += (i % d) * s;
                i /= d;
            }
            off
        };
        let null = plan.info().is_none();
        (0..plan.out_numel)
            .map(|o| {
                let base = at(&plan.kept, o);
                (0..plan.red_numel)
                    .map(|r| {
                        let off = base + at(&plan.red, r);
                        if null {
                            assert_eq!(off, o * plan.red_numel + r, "{plan:?}");
                        }
                        off
                    })
                    .collect()
            })
            .collect()
    }

    /// Checks that pass 1 of `split` reads every element of each output of `plan` exactly once,
    /// in `parts` runs laid out `[out_numel, parts]`, that pass 2 reads those partials, and
    /// that both fit the views [`launch`] checks.
    fn check_split_covers(plan: &Plan, split: &Split) {
        let g = split.parts;
        assert_eq!(split.first.out_numel, plan.out_numel * g);
        assert_eq!(split.first.red_numel * g, plan.red_numel);
        assert_eq!(split.first.reach(), plan.reach(), "same input view");
        assert_eq!(
            split.second.reach(),
            Some(plan.out_numel * g),
            "the partials"
        );
        let (whole, first, second) = (offsets(plan), offsets(&split.first), offsets(&split.second));
        for o in 0..plan.out_numel {
            let mut want = whole[o].clone();
            let mut got: Vec<usize> = first[o * g..(o + 1) * g].concat();
            want.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, want, "output {o} of {plan:?} split {split:?}");
            assert_eq!(second[o], (o * g..(o + 1) * g).collect::<Vec<_>>());
        }
    }

    #[test]
    fn split_divisor_is_the_nearest_by_ratio() {
        assert_eq!(nearest_divisor(1 << 26, 2112, 4096), Some(2048));
        assert_eq!(
            nearest_divisor(1 << 26, 1500, 4096),
            Some(2048),
            "1500/1024 > 2048/1500"
        );
        assert_eq!(nearest_divisor(1 << 26, 1400, 4096), Some(1024));
        assert_eq!(nearest_divisor(12, 5, 12), Some(6), "6/5 < 5/4");
        assert_eq!(nearest_divisor(16, 4, 16), Some(4));
        // The bound wins over the target; a prime has no divisor below itself.
        assert_eq!(nearest_divisor(1 << 26, 2112, 300), Some(256));
        assert_eq!(nearest_divisor(2 * 3 * 99_991, 2112, 36), Some(6));
        assert_eq!(nearest_divisor(1_000_003, 2112, 61), None);
        assert_eq!(nearest_divisor(1_000_003, 2112, 1_000_003), Some(1_000_003));
        assert_eq!(nearest_divisor(7, 100, 1), None);
        // Nothing at or below the target: the smallest divisor above it.
        assert_eq!(nearest_divisor(3 * 99_991, 2, 200_000), Some(3));
        assert!(nearer(1024, 2048, 1100) && !nearer(2048, 1024, 1100));
        assert!(!nearer(4, 16, 8) && !nearer(16, 4, 8), "equal ratios");
    }

    #[test]
    fn split_applies_to_few_long_reductions_of_exact_ops() {
        let mp = 132;
        let parts = |dims: &[usize], strides: &[usize], rd: &[usize]| {
            planned(dims, strides, rd).and_then(|p| p.split(mp, false).map(|s| s.parts))
        };
        assert_eq!(parts(&[1 << 26], &[1], &[0]), Some(2048));
        assert_eq!(
            parts(&[3, 1 << 22], &[1 << 22, 1], &[1]),
            Some(256),
            "part bound"
        );
        assert_eq!(
            parts(&[2 * 3 * 99_991], &[1], &[0]),
            Some(6),
            "awkward factors"
        );
        assert_eq!(parts(&[2, 3 * 99_991], &[3 * 99_991, 1], &[1]), Some(3));
        assert_eq!(
            parts(&[6, 99_991], &[99_991, 1], &[1]),
            None,
            "prime, parts < 2^14"
        );
        assert_eq!(parts(&[1_000_003], &[1], &[0]), None, "prime");
        assert_eq!(parts(&[1 << 15], &[1], &[0]), Some(2), "the smallest split");
        assert_eq!(parts(&[(1 << 15) - 2], &[1], &[0]), None, "too short");
        // Enough outputs to fill the machine: the single pass.
        assert_eq!(parts(&[528, 1 << 16], &[1 << 16, 1], &[1]), Some(4));
        assert_eq!(parts(&[529, 1 << 16], &[1 << 16, 1], &[1]), None);
        assert_eq!(parts(&[4096, 8192], &[8192, 1], &[1]), None);
        // An empty sum and a one-element reduction never split.
        assert_eq!(parts(&[2, 0], &[0, 1], &[1]), None);
        assert_eq!(parts(&[1 << 20, 1], &[1, 1], &[1]), None);
        // Which ops and dtypes.
        for op in ReduceOp::ALL {
            for (dt, float) in [
                ("u8", false),
                ("u32", false),
                ("i16", false),
                ("i32", false),
                ("i64", false),
                ("bf16", true),
                ("f16", true),
                ("f32", true),
                ("f64", true),
            ] {
                let want = match op {
                    ReduceOp::Sum => !matches!(dt, "bf16" | "f16"),
                    ReduceOp::Min | ReduceOp::Max => true,
                    ReduceOp::ArgMin | ReduceOp::ArgMax => false,
                };
                assert_eq!(split_is_exact(op, dt, float), want, "{op:?} {dt}");
                let got = planned_parts(op, dt, float, &[1 << 26], &[1], &[0], mp).unwrap();
                assert_eq!(got.is_some(), want, "{op:?} {dt}");
            }
        }
        // planned_parts validates as reduce does.
        let err = planned_parts(ReduceOp::Sum, "f32", true, &[4, 4], &[4, 1], &[2], mp);
        assert!(matches!(err, Err(Error::Layout { .. })), "{err:?}");
    }

    #[test]
    fn split_layouts_of_a_full_reduction() {
        let pl = sum_plan(&[1 << 26], &[1], &[0]);
        let sp = pl.split(132, false).unwrap();
        assert_eq!(sp.parts, 2048);
        assert_eq!((sp.first.out_numel, sp.first.red_numel), (2048, 1 << 15));
        assert_eq!(sp.first.kept, vec![(2048, 1 << 15)]);
        assert_eq!(sp.first.red, vec![(1 << 15, 1)]);
        assert_eq!(sp.first.info(), None, "contiguous rows: the fast path");
        assert_eq!((sp.second.out_numel, sp.second.red_numel), (1, 2048));
        assert_eq!(sp.second.kept, vec![(1, 0)]);
        assert_eq!(sp.second.red, vec![(2048, 1)]);
        assert_eq!(sp.second.info(), None);
        // Smaller machines aim lower: 4 multiprocessors x 16 blocks.
        assert_eq!(pl.split(4, false).unwrap().parts, 64);
        // (3, 2^22) over dim 1: the partials' dim merges with the kept one.
        let pl = sum_plan(&[3, 1 << 22], &[1 << 22, 1], &[1]);
        let sp = pl.split(132, false).unwrap();
        assert_eq!(sp.parts, 256);
        assert_eq!(sp.first.kept, vec![(768, 1 << 14)]);
        assert_eq!(sp.first.red, vec![(1 << 14, 1)]);
        assert_eq!(sp.first.info(), None);
        assert_eq!(sp.second.kept, vec![(3, 256)]);
        assert_eq!(sp.second.info(), None);
    }

    #[test]
    fn split_layouts_of_strided_views() {
        // (2^22, 3) contiguous over dim 0: kept stride 1, the parts an outer kept dim.
        let pl = sum_plan(&[1 << 22, 3], &[3, 1], &[0]);
        let sp = pl.split(132, false).unwrap();
        assert_eq!(sp.parts, 256);
        assert_eq!(sp.first.kept, vec![(3, 1), (256, 3 << 14)]);
        assert_eq!(sp.first.red, vec![(1 << 14, 3)]);
        assert_eq!(sp.first.info(), Some(vec![3, 256, 1, 3 << 14, 1 << 14, 3]));
        // A transposed (2048, 4096) reduced over everything: largest stride outermost, which
        // merges into one contiguous run.
        let pl = sum_plan(&[4096, 2048], &[1, 4096], &[0, 1]);
        assert_eq!(pl.red, vec![(4096, 1), (2048, 4096)]);
        let sp = pl.split(132, false).unwrap();
        assert_eq!(sp.parts, 512, "at most 2^23 / 2^14 parts");
        assert_eq!(sp.first.red, vec![(1 << 14, 1)]);
        assert_eq!(sp.first.info(), None);
        // Broadcast reduced dims go outermost. 5 parts of the broadcast dim or 16 of the other
        // (at most 20 parts): 16.
        let pl = sum_plan(&[1 << 16, 5], &[1, 0], &[0, 1]);
        assert_eq!(pl.red, vec![(1 << 16, 1), (5, 0)]);
        let sp = pl.split(132, false).unwrap();
        assert_eq!(sp.parts, 16);
        assert_eq!(sp.first.kept, vec![(16, 4096)]);
        assert_eq!(sp.first.red, vec![(5, 0), (4096, 1)]);
        // Rows padded to 70000: the two reduced dims do not merge. 7 parts of the outer dim or
        // 16 of the inner one (at most 28 parts of 2^14): the inner, nearer 2112.
        let pl = sum_plan(&[7, 65_536], &[70_000, 1], &[0, 1]);
        let sp = pl.split(132, false).unwrap();
        assert_eq!(sp.parts, 16);
        assert_eq!(sp.first.kept, vec![(16, 4096)]);
        assert_eq!(sp.first.red, vec![(7, 70_000), (4096, 1)]);
        // A prime outer dim: the inner one is split, keeping runs of at least 64.
        let pl = sum_plan(&[65_537, 6400], &[8000, 1], &[0, 1]);
        let sp = pl.split(132, false).unwrap();
        assert_eq!(sp.parts, 100);
        assert_eq!(sp.first.red, vec![(65_537, 8000), (64, 1)]);
        // Nothing to split: the prime outer dim, an inner dim too short to cut.
        assert_eq!(
            sum_plan(&[65_537, 100], &[128, 1], &[0, 1]).split(132, false),
            None
        );
    }

    #[test]
    fn split_reads_every_element_once() {
        for (dims, strides, rd, mp) in [
            (vec![1 << 16], vec![1], vec![0], 4),
            (vec![3, 40_000], vec![40_000, 1], vec![1], 132),
            (vec![40_000, 3], vec![3, 1], vec![0], 132),
            (vec![256, 512], vec![1, 256], vec![0, 1], 2),
            (vec![2 * 3 * 99_991], vec![1], vec![0], 132),
            (vec![2, 3, 20_000], vec![1, 2, 6], vec![0, 2], 1),
            (vec![7, 8192], vec![9000, 1], vec![0, 1], 1),
            (vec![4, 1 << 15], vec![0, 1], vec![0, 1], 1),
            (vec![5, 2, 1 << 15], vec![1, 0, 5], vec![2], 4),
        ] {
            let pl = sum_plan(&dims, &strides, &rd);
            let sp = pl
                .split(mp, false)
                .unwrap_or_else(|| panic!("{dims:?} {strides:?} {rd:?}: no split"));
            check_split_covers(&pl, &sp);
        }
    }

    /// Candle's max fold, as the kernels apply it to each output (module docs).
    fn candle_max(xs: &[f32]) -> f32 {
        xs[1..]
            .iter()
            .fold(xs[0], |m, &x| if x > m { x } else { m })
    }

    /// Pass 1 of a split float max as the `_part` kernels compute it: the first part keeps the
    /// NaN rule, the others skip NaNs (a part of NaNs gives its element 0).
    fn part_max(xs: &[f32], first: bool) -> f32 {
        if first {
            return candle_max(xs);
        }
        xs.iter()
            .copied()
            .filter(|x| !x.is_nan())
            .fold(None, |m: Option<f32>, x| match m {
                Some(m) if x <= m => Some(m),
                _ => Some(x),
            })
            .unwrap_or(xs[0])
    }

    #[test]
    fn float_max_splits_with_the_part_rule() {
        // With Candle's rule in every part, a NaN first in a later part would hide that part.
        let xs = [1.0, 2.0, f32::NAN, 5.0];
        let naive = [candle_max(&xs[..2]), candle_max(&xs[2..])];
        assert_eq!(candle_max(&naive), 2.0);
        // The part rule gives the single pass's bits, on many inputs with NaNs and signed zeros.
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for case in 0..2000 {
            let n = 2 + (next() % 40) as usize;
            let xs: Vec<f32> = (0..n)
                .map(|_| match next() % 6 {
                    0 => f32::NAN,
                    1 => 0.0,
                    2 => -0.0,
                    3 => -((next() % 5) as f32),
                    _ => (next() % 5) as f32 - 2.0,
                })
                .collect();
            for parts in [2, 3, 4, n] {
                if n % parts != 0 {
                    continue;
                }
                let run = n / parts;
                let partials: Vec<f32> = (0..parts)
                    .map(|g| part_max(&xs[g * run..(g + 1) * run], g == 0))
                    .collect();
                let (whole, split) = (candle_max(&xs), candle_max(&partials));
                assert!(
                    whole.to_bits() == split.to_bits() || (whole.is_nan() && split.is_nan()),
                    "case {case}: {xs:?} in {parts} parts: {whole} vs {split}"
                );
            }
        }
        for dt in ["bf16", "f16", "f32", "f64"] {
            assert!(split_is_exact(ReduceOp::Max, dt, true), "{dt}");
            assert!(uses_part_kernels(ReduceOp::Min, true), "{dt}");
        }
        assert!(!uses_part_kernels(ReduceOp::Max, false));
        // Float min/max split only the outermost reduced dim, keeping the elements' order.
        let pl = sum_plan(&[8, 1 << 16], &[1, 8], &[0, 1]);
        let kept = pl.split(132, true).unwrap();
        assert_eq!(kept.first.red.last(), Some(&(1 << 16, 8)), "{kept:?}");
    }

    #[test]
    fn no_split_env_values() {
        assert!(!env_disables_split(None));
        assert!(!env_disables_split(Some(OsStr::new(""))));
        assert!(!env_disables_split(Some(OsStr::new("0"))));
        assert!(env_disables_split(Some(OsStr::new("1"))));
        assert!(env_disables_split(Some(OsStr::new("yes"))));
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
        for dt in ["bf16", "f16", "f32", "f64"] {
            for op in ["min", "max"] {
                assert!(
                    src.contains(&format!(
                        "RK_REDUCE_PART_KERNELS({op}, rd_{op}_op<{dt}>, {dt})"
                    )),
                    "{op} {dt}"
                );
            }
        }
    }
}
