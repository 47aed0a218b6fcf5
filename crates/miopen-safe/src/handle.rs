//! [`Handle`]: a MIOpen (or cuDNN) handle bound to a hip-core stream, with the algorithm cache.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::OnceLock;

use hip_core::{DeviceBuffer, DeviceSlice, DeviceSliceMut, Platform, Stream};
use parking_lot::Mutex;

use crate::backend::amd::{AmdHandle, MAX_SOLUTIONS};
use crate::backend::{describe, ConvPtrs, Direction, RawHandle, Workspace};
use crate::error::{Error, Result};
use crate::shape::{conv_plan, pool_plan, ConvParams, ConvProblem, Layout, TensorShape};
use crate::types::{ConvElement, DataType, PoolMode};

/// The algorithm the library chose for one convolution problem.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvAlgorithm {
    /// The library's algorithm id: `miopenConvFwdAlgorithm_t` / `miopenConvBwdDataAlgorithm_t`
    /// (find step) or `miopenConvAlgorithm_t` (immediate mode), or `cudnnConvolutionFwdAlgo_t` /
    /// `cudnnConvolutionBwdDataAlgo_t` on `nvidia`.
    pub id: i32,
    /// The algorithm's name, e.g. `ImplicitGEMM` or `IMPLICIT_PRECOMP_GEMM`.
    pub name: &'static str,
    /// Workspace bytes it runs with.
    pub workspace_bytes: usize,
    /// The time the find step measured, or immediate mode's estimate (from MIOpen's find-db or
    /// heuristics), in milliseconds.
    pub time_ms: f32,
    /// cuDNN's `cudnnMathType_t` chosen with the algorithm (set on the descriptor when it
    /// runs); 0 on MIOpen.
    pub math_type: i32,
    /// MIOpen's immediate-mode solution (`miopenConvSolution_t::solution_id`), run with
    /// `miopenConvolution{Forward,BackwardData}Immediate`; `None` for an algorithm chosen by a
    /// find step, which runs by `id`.
    pub solution_id: Option<u64>,
}

/// How a [`Handle`] chooses the algorithm of a convolution problem it has not seen yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlgorithmSearch {
    /// The library's find step, which runs (benchmarks) candidate algorithms on the call's
    /// buffers: `cudnnFind*AlgorithmEx` on `nvidia` (always), `miopenFindConvolution*Algorithm`
    /// on `amd` with `MIOPEN_SAFE_SEARCH=find`.
    Find,
    /// MIOpen's immediate mode (the default on `amd`): the best solution from MIOpen's find-db
    /// or, for a problem it has no record of, its heuristics, compiled once; nothing is
    /// benchmarked.
    Immediate,
}

impl AlgorithmSearch {
    /// A `MIOPEN_SAFE_SEARCH` value: `immediate` or `find` (case and surrounding blanks
    /// ignored); `None` for anything else.
    fn parse(value: &str) -> Option<AlgorithmSearch> {
        match value.trim().to_ascii_lowercase().as_str() {
            "immediate" => Some(AlgorithmSearch::Immediate),
            "find" => Some(AlgorithmSearch::Find),
            _ => None,
        }
    }
}

/// The search MIOpen handles use: `$MIOPEN_SAFE_SEARCH` (`immediate`, the default, or `find`;
/// another value means the default), read once per process.
fn miopen_search() -> AlgorithmSearch {
    static SEARCH: OnceLock<AlgorithmSearch> = OnceLock::new();
    *SEARCH.get_or_init(|| {
        std::env::var("MIOPEN_SAFE_SEARCH")
            .ok()
            .and_then(|v| AlgorithmSearch::parse(&v))
            .unwrap_or(AlgorithmSearch::Immediate)
    })
}

/// Counters of a handle's algorithm cache (since the handle was created; clearing the cache
/// does not reset them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AlgorithmStats {
    /// Library searches started: find steps, or on MIOpen's immediate mode solution queries
    /// (each followed by the compilation of the chosen solution). Failed ones count too.
    pub searches: u64,
    /// Convolutions answered from the cache (no library search): an algorithm, or a
    /// remembered rejection.
    pub cache_hits: u64,
    /// Algorithms cached now, one per (problem, direction).
    pub cached: usize,
    /// Problems (and directions) cached as rejected now: MIOpen's immediate mode had no usable
    /// solution for them, so later calls fail at once with the same error.
    pub rejected: usize,
}

/// What the search answered for one problem and direction.
#[derive(Clone, Debug)]
enum Choice {
    /// The algorithm to run.
    Chosen(ConvAlgorithm),
    /// A definitive refusal (see [`AlgorithmStats::rejected`]), returned again without asking
    /// the library.
    Rejected(Error),
}

/// Cached answers for one problem: `[forward, backward-data]`.
type Found = [Option<Choice>; 2];

/// How many immediate-mode solutions are compiled, at most, before giving up on a problem
/// (solutions whose workspace is over the limit or cannot be allocated are skipped without
/// compiling).
const MAX_COMPILES: usize = 4;

struct Inner {
    raw: RawHandle,
    /// The algorithm cache: per problem (dtype, every dim and stride of the three tensors,
    /// padding, stride, dilation, groups) and direction. Operand addresses are not part of the
    /// key: both libraries choose among algorithms for a problem, whatever buffers (aligned to
    /// their element type) it later runs on (see docs/miopen.md). Kept per handle: MIOpen
    /// registers the kernels a find step compiled with the handle that ran it, so another
    /// handle must run its own search.
    algorithms: HashMap<ConvProblem, Found>,
    /// Library searches started (see [`AlgorithmStats::searches`]).
    searches: u64,
    /// Cache hits (see [`AlgorithmStats::cache_hits`]).
    cache_hits: u64,
}

/// A MIOpen handle (a cuDNN handle on the `nvidia` platform) bound to one hip-core [`Stream`].
///
/// Every call is queued on that stream, after the work already queued on the operands' own
/// streams (events), and the operands' streams wait for it afterwards, so that results are
/// ordered for whoever uses the buffers next. `Send + Sync`: the library handle sits behind a
/// mutex (calls on one `Handle` are serialized; use one handle per stream for concurrency).
///
/// The first time a convolution problem is seen, the library chooses its algorithm (MIOpen's
/// immediate mode, or a find step: see [`AlgorithmSearch`]), which the handle caches: at most
/// one search per (problem, dtype, direction). Workspaces come from hip-core's caching
/// allocator on the handle's stream. See `docs/miopen.md`.
pub struct Handle {
    inner: Mutex<Inner>,
    stream: Stream,
    search: AlgorithmSearch,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("platform", &self.platform())
            .field("stream", &self.stream)
            .field("search", &self.search)
            .field("algorithms", &self.algorithm_stats())
            .finish()
    }
}

/// The largest workspace the find step is given, in bytes: `$MIOPEN_SAFE_WORKSPACE_LIMIT_MB`
/// MiB (default 1024; an unparsable value means the default).
pub fn workspace_limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var("MIOPEN_SAFE_WORKSPACE_LIMIT_MB")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(1024)
            .saturating_mul(1 << 20)
    })
}

impl Handle {
    /// Creates a library handle bound to `stream` (MIOpen's `miopenCreateWithStream`; cuDNN's
    /// `cudnnCreate` + `cudnnSetStream`). Fails with a typed error when the library cannot be
    /// loaded.
    pub fn new(stream: &Stream) -> Result<Handle> {
        let raw = RawHandle::new(stream)?;
        let search = match raw.immediate() {
            Some(_) => miopen_search(),
            None => AlgorithmSearch::Find,
        };
        Ok(Handle {
            inner: Mutex::new(Inner {
                raw,
                algorithms: HashMap::new(),
                searches: 0,
                cache_hits: 0,
            }),
            stream: stream.clone(),
            search,
        })
    }

    /// How this handle chooses algorithms: [`AlgorithmSearch::Immediate`] on MIOpen unless
    /// `MIOPEN_SAFE_SEARCH=find`, [`AlgorithmSearch::Find`] on cuDNN.
    pub fn algorithm_search(&self) -> AlgorithmSearch {
        self.search
    }

    /// The stream every call is queued on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The platform, and so the library: MIOpen on `amd`, cuDNN on `nvidia`.
    pub fn platform(&self) -> Platform {
        self.stream.device().platform()
    }

    /// The raw `miopenHandle_t` (or `cudnnHandle_t`), for calling the library directly. It is
    /// valid while `self` lives; calling the library with it while another thread uses this
    /// `Handle` is a data race, which the caller must rule out.
    pub fn as_raw(&self) -> *mut c_void {
        self.inner.lock().raw.as_raw()
    }

    /// How many (problem, direction) algorithms the cache holds.
    pub fn cached_algorithms(&self) -> usize {
        self.algorithm_stats().cached
    }

    /// How many library searches (find steps, or MIOpen immediate-mode solution queries) this
    /// handle has started: [`AlgorithmStats::searches`].
    pub fn find_calls(&self) -> u64 {
        self.inner.lock().searches
    }

    /// The algorithm cache's counters.
    pub fn algorithm_stats(&self) -> AlgorithmStats {
        let inner = self.inner.lock();
        let answers = || inner.algorithms.values().flat_map(|f| f.iter().flatten());
        AlgorithmStats {
            searches: inner.searches,
            cache_hits: inner.cache_hits,
            cached: answers().filter(|c| matches!(c, Choice::Chosen(_))).count(),
            rejected: answers()
                .filter(|c| matches!(c, Choice::Rejected(_)))
                .count(),
        }
    }

    /// Forgets every cached algorithm and rejection: the next call of each problem searches
    /// again (the counters are kept).
    pub fn clear_algorithm_cache(&self) {
        self.inner.lock().algorithms.clear();
    }

    /// The algorithm cached for a forward convolution of these shapes, if one was chosen.
    pub fn conv_forward_algorithm<T: ConvElement>(
        &self,
        x: &TensorShape,
        w: &TensorShape,
        params: &ConvParams,
        y: &TensorShape,
    ) -> Result<Option<ConvAlgorithm>> {
        let plan = conv_plan(
            "Handle::conv_forward_algorithm",
            T::DTYPE,
            ("x", x),
            w,
            params,
            ("y", y),
        )?;
        Ok(self.cached(Direction::Forward, &plan.problem))
    }

    /// The algorithm cached for a backward-data convolution of these shapes, if one was found.
    pub fn conv_backward_data_algorithm<T: ConvElement>(
        &self,
        dy: &TensorShape,
        w: &TensorShape,
        params: &ConvParams,
        dx: &TensorShape,
    ) -> Result<Option<ConvAlgorithm>> {
        let plan = conv_plan(
            "Handle::conv_backward_data_algorithm",
            T::DTYPE,
            ("dx", dx),
            w,
            params,
            ("dy", dy),
        )?;
        Ok(self.cached(Direction::BackwardData, &plan.problem))
    }

    /// The algorithm cached for `p` in direction `dir`.
    fn cached(&self, dir: Direction, p: &ConvProblem) -> Option<ConvAlgorithm> {
        match self.inner.lock().algorithms.get(p)?[dir.index()].as_ref()? {
            Choice::Chosen(a) => Some(a.clone()),
            Choice::Rejected(_) => None,
        }
    }

    /// `y = conv(x, w)`: x `(N, C_in, spatial..)`, w `(C_out, C_in / groups, k..)`, y
    /// `(N, C_out, out..)` with `out` = [`conv_forward_output_dims`](crate::conv_forward_output_dims).
    /// A cross-correlation, as in PyTorch and Candle; 1 to 3 spatial dims; f32, f16, bf16
    /// (f64 is [`Error::Unsupported`]).
    ///
    /// Everything is validated first (ranks, channels and groups, y's shape, strides, slice
    /// lengths against the furthest element each layout reaches, devices); y is written only
    /// at the elements its layout describes.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_forward<T: ConvElement>(
        &self,
        x: &TensorShape,
        xd: &DeviceSlice<'_, T>,
        w: &TensorShape,
        wd: &DeviceSlice<'_, T>,
        params: &ConvParams,
        y: &TensorShape,
        yd: &mut DeviceSliceMut<'_, T>,
    ) -> Result<()> {
        const OP: &str = "Handle::conv_forward";
        let plan = conv_plan(OP, T::DTYPE, ("x", x), w, params, ("y", y))?;
        self.check_operand(OP, "x", xd.buffer(), xd.len(), &plan.x)?;
        self.check_operand(OP, "w", wd.buffer(), wd.len(), &plan.w)?;
        self.check_operand(OP, "y", yd.as_slice().buffer(), yd.len(), &plan.y)?;
        if plan.y.elems == 0 {
            return Ok(());
        }
        if plan.x.elems == 0 || plan.w.elems == 0 {
            // An empty reduction (no input channels, or an empty input whose windows see only
            // padding): every output is 0.
            return zero_fill(OP, T::DTYPE, "y", &plan.y, yd);
        }
        let ptrs = ConvPtrs {
            x: xd.device_ptr().0 as *mut c_void,
            w: wd.device_ptr().0 as *mut c_void,
            y: yd.device_ptr().0 as *mut c_void,
        };
        self.before(&[xd.buffer(), wd.buffer(), yd.as_slice().buffer()])?;
        self.conv(OP, Direction::Forward, &plan.problem, ptrs)?;
        self.after(yd.stream())
    }

    /// `dx = conv_backward_data(dy, w)`: the gradient of [`Handle::conv_forward`] with respect
    /// to its input, for dy `(N, C_out, out..)` and w `(C_out, C_in / groups, k..)`. dx's shape
    /// `(N, C_in, in..)` is given explicitly and must be one whose forward convolution has dy's
    /// shape: this is how a transposed convolution with output padding is computed (dy is the
    /// transposed convolution's input, dx its output).
    #[allow(clippy::too_many_arguments)]
    pub fn conv_backward_data<T: ConvElement>(
        &self,
        dy: &TensorShape,
        dyd: &DeviceSlice<'_, T>,
        w: &TensorShape,
        wd: &DeviceSlice<'_, T>,
        params: &ConvParams,
        dx: &TensorShape,
        dxd: &mut DeviceSliceMut<'_, T>,
    ) -> Result<()> {
        const OP: &str = "Handle::conv_backward_data";
        let plan = conv_plan(OP, T::DTYPE, ("dx", dx), w, params, ("dy", dy))?;
        self.check_operand(OP, "dy", dyd.buffer(), dyd.len(), &plan.y)?;
        self.check_operand(OP, "w", wd.buffer(), wd.len(), &plan.w)?;
        self.check_operand(OP, "dx", dxd.as_slice().buffer(), dxd.len(), &plan.x)?;
        if plan.x.elems == 0 {
            return Ok(());
        }
        if plan.y.elems == 0 || plan.w.elems == 0 {
            return zero_fill(OP, T::DTYPE, "dx", &plan.x, dxd);
        }
        let ptrs = ConvPtrs {
            x: dxd.device_ptr().0 as *mut c_void,
            w: wd.device_ptr().0 as *mut c_void,
            y: dyd.device_ptr().0 as *mut c_void,
        };
        self.before(&[dyd.buffer(), wd.buffer(), dxd.as_slice().buffer()])?;
        self.conv(OP, Direction::BackwardData, &plan.problem, ptrs)?;
        self.after(dxd.stream())
    }

    /// Pooling forward over 1 to 3 spatial dims: y `(N, C, out..)` with `out` =
    /// [`pool_forward_output_dims`](crate::pool_forward_output_dims). Each padding must be
    /// smaller than its window. f32 and f16 (bf16 and f64 are [`Error::Unsupported`]: MIOpen
    /// has no kernels for them). No indices are kept (inference: MIOpen's `do_backward = false`).
    #[allow(clippy::too_many_arguments)]
    pub fn pooling_forward<T: ConvElement>(
        &self,
        mode: PoolMode,
        window: &[usize],
        padding: &[usize],
        stride: &[usize],
        x: &TensorShape,
        xd: &DeviceSlice<'_, T>,
        y: &TensorShape,
        yd: &mut DeviceSliceMut<'_, T>,
    ) -> Result<()> {
        const OP: &str = "Handle::pooling_forward";
        let plan = pool_plan(OP, T::DTYPE, mode, window, padding, stride, x, y)?;
        self.check_operand(OP, "x", xd.buffer(), xd.len(), &plan.x)?;
        self.check_operand(OP, "y", yd.as_slice().buffer(), yd.len(), &plan.y)?;
        if plan.y.elems == 0 {
            return Ok(());
        }
        self.before(&[xd.buffer(), yd.as_slice().buffer()])?;
        {
            self.stream.device().make_current()?;
            let inner = self.inner.lock();
            // SAFETY: the device is current; both slices were checked to hold every element
            // their layouts reach, on this handle's device; the stream waits for their pending
            // work and the allocator knows the stream uses them, so they stay valid until the
            // queued pooling has run.
            unsafe {
                inner.raw.pool_forward(
                    &plan.problem,
                    xd.device_ptr().0 as *const c_void,
                    yd.device_ptr().0 as *mut c_void,
                )
            }?;
        }
        self.after(yd.stream())
    }

    /// Checks that an operand lives on this handle's device and holds every element its layout
    /// reaches.
    fn check_operand<T: ConvElement>(
        &self,
        op: &'static str,
        name: &str,
        buffer: &DeviceBuffer<T>,
        len: usize,
        layout: &Layout,
    ) -> Result<()> {
        if std::mem::size_of::<T>() != T::DTYPE.size_in_bytes() {
            // Unreachable with the sealed `ConvElement`; kept as the guard the raw calls rely on.
            return Err(Error::invalid(
                op,
                "element size does not match its data type",
            ));
        }
        let (mine, theirs) = (self.stream.device(), buffer.device());
        if mine != theirs {
            return Err(Error::invalid(
                op,
                format!(
                    "{name} lives on device {} but the handle's stream on device {}",
                    theirs.ordinal(),
                    mine.ordinal()
                ),
            ));
        }
        if len < layout.span {
            return Err(Error::invalid(
                op,
                format!(
                    "{name} holds {len} elements but its shape {:?} with strides {:?} reaches \
                     {} elements",
                    layout.desc.dims, layout.desc.strides, layout.span
                ),
            ));
        }
        Ok(())
    }

    /// Orders the handle's stream after the operands' streams and tells the allocator the
    /// handle's stream uses them.
    fn before<T: ConvElement>(&self, operands: &[&DeviceBuffer<T>]) -> Result<()> {
        for b in operands {
            self.stream.wait_for(b.stream())?;
            b.record_stream(&self.stream);
        }
        Ok(())
    }

    /// Orders the written operand's own stream after the handle's.
    fn after(&self, output_stream: &Stream) -> Result<()> {
        output_stream.wait_for(&self.stream)?;
        Ok(())
    }

    /// Chooses (once per problem and direction) and runs a convolution.
    fn conv(
        &self,
        op: &'static str,
        dir: Direction,
        p: &ConvProblem,
        ptrs: ConvPtrs,
    ) -> Result<ConvAlgorithm> {
        self.stream.device().make_current()?;
        let mut inner = self.inner.lock();
        let cached = inner.algorithms.get(p).and_then(|f| f[dir.index()].clone());
        let choice = match cached {
            Some(c) => {
                inner.cache_hits += 1;
                c
            }
            None => {
                inner.searches += 1;
                // An error of the search itself (`?`) is not remembered: it may not recur (an
                // out-of-memory, cuDNN's find step failing under load).
                let c = match (self.search, inner.raw.immediate()) {
                    (AlgorithmSearch::Immediate, Some(h)) => self.immediate(h, dir, p)?,
                    _ => Choice::Chosen(self.find(&inner.raw, dir, p, ptrs)?),
                };
                inner.algorithms.entry(p.clone()).or_default()[dir.index()] = Some(c.clone());
                c
            }
        };
        let algo = match choice {
            Choice::Chosen(a) => a,
            Choice::Rejected(e) => return Err(e),
        };
        let ws = self.workspace(algo.workspace_bytes)?;
        let workspace = Workspace {
            ptr: ws.device_ptr().0 as *mut c_void,
            bytes: ws.len(),
        };
        // SAFETY: the device is current; the operands were checked to hold every element `p`
        // reaches, on this device, and are recorded as used by the handle's stream; the
        // workspace is a live allocation of the algorithm's size on that stream (freed in stream
        // order after the call); `algo` was chosen (found, or compiled) on this handle for `p`.
        unsafe { inner.raw.conv_run(dir, p, &algo, ptrs, workspace) }
            .map_err(|e| e.context(format!("{op}: running {}", describe(dir, p))))?;
        Ok(algo)
    }

    /// Runs the find step with a workspace of the size the library asks for (at most
    /// [`workspace_limit`]; none if even that cannot be allocated).
    fn find(
        &self,
        raw: &RawHandle,
        dir: Direction,
        p: &ConvProblem,
        ptrs: ConvPtrs,
    ) -> Result<ConvAlgorithm> {
        // SAFETY: the caller made the device current.
        let wanted = unsafe { raw.conv_find_workspace(dir, p) }?;
        let ws = match self.workspace(wanted.min(workspace_limit())) {
            Ok(ws) => ws,
            Err(Error::Hip(hip_core::Error::OutOfMemory { .. })) => self.workspace(0)?,
            Err(e) => return Err(e),
        };
        let workspace = Workspace {
            ptr: ws.device_ptr().0 as *mut c_void,
            bytes: ws.len(),
        };
        // SAFETY: as in `conv`; the find step writes only the output side (or dx), which the
        // caller passed as the mutable operand.
        unsafe { raw.conv_find(dir, p, ptrs, workspace) }
    }

    /// MIOpen's immediate mode: the first of MIOpen's solutions for `p` (best first) whose
    /// workspace is within [`workspace_limit`], can be allocated now, and compiles; or, when
    /// MIOpen offers none, or none within the limit that compiles, a rejection
    /// ([`Error::Unsupported`]) to remember. A solution skipped because its workspace could not
    /// be allocated makes the failure an error instead (not remembered: memory may be free
    /// next time). The caller made the device current.
    fn immediate(&self, h: &AmdHandle, dir: Direction, p: &ConvProblem) -> Result<Choice> {
        // SAFETY: the caller made the device current.
        let solutions = match unsafe { h.conv_solutions(dir, p) } {
            Ok(solutions) => solutions,
            // MIOpen refuses the problem itself: it will again.
            Err(e) if refuses(&e) => return Ok(Choice::Rejected(e)),
            Err(e) => return Err(e),
        };
        let limit = workspace_limit();
        let mut skipped = Vec::new();
        let mut compiled = 0;
        let mut out_of_memory = false;
        for s in &solutions {
            let Some(id) = s.solution_id else {
                continue;
            };
            let what = format!("{} (solution {id})", s.name);
            if s.workspace_bytes > limit {
                skipped.push(format!(
                    "{what} needs {} workspace bytes, over the limit of {limit}",
                    s.workspace_bytes
                ));
                continue;
            }
            // Allocated and returned at once: the caching allocator keeps it for the run.
            match self.workspace(s.workspace_bytes) {
                Ok(_) => {}
                Err(Error::Hip(hip_core::Error::OutOfMemory { .. })) => {
                    out_of_memory = true;
                    skipped.push(format!(
                        "{what}: its {} workspace bytes cannot be allocated",
                        s.workspace_bytes
                    ));
                    continue;
                }
                Err(e) => return Err(e),
            }
            if compiled == MAX_COMPILES {
                skipped.push(format!(
                    "{what}: not tried ({MAX_COMPILES} failed to compile)"
                ));
                break;
            }
            compiled += 1;
            // SAFETY: the caller made the device current.
            match unsafe { h.conv_compile(dir, p, id) } {
                Ok(()) => return Ok(Choice::Chosen(s.clone())),
                Err(e @ Error::Api { .. }) => skipped.push(format!("{what}: {e}")),
                Err(e) => return Err(e),
            }
        }
        let reason = if solutions.is_empty() {
            format!("it offers no solution for {}", describe(dir, p))
        } else {
            format!(
                "none of its {} solutions (at most {MAX_SOLUTIONS} asked for) of {} is usable: {}",
                solutions.len(),
                describe(dir, p),
                skipped.join("; ")
            )
        };
        let e = Error::Unsupported {
            op: "MIOpen's immediate mode",
            dtype: p.dtype,
            reason,
        };
        if out_of_memory {
            return Err(e);
        }
        Ok(Choice::Rejected(e))
    }

    /// A workspace of `bytes` on the handle's stream (caching allocator; no memory for 0).
    fn workspace(&self, bytes: usize) -> Result<DeviceBuffer<u8>> {
        Ok(self.stream.alloc::<u8>(bytes)?)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // Work queued through the handle may still use its kernels: wait for it before the
        // library handle is destroyed (when `inner` drops, right after this).
        let _ = self.stream.synchronize();
    }
}

/// Whether a MIOpen status says the problem is not supported (rather than that something
/// failed): `miopenStatusBadParm`, `miopenStatusNotImplemented`, `miopenStatusUnsupportedOp`.
fn refuses(e: &Error) -> bool {
    matches!(
        e.status_name(),
        Some("miopenStatusBadParm" | "miopenStatusNotImplemented" | "miopenStatusUnsupportedOp")
    )
}

/// Writes zeros over a contiguous output whose reduction is empty.
fn zero_fill<T: ConvElement>(
    op: &'static str,
    dtype: DataType,
    name: &str,
    layout: &Layout,
    out: &mut DeviceSliceMut<'_, T>,
) -> Result<()> {
    if !layout.contiguous {
        return Err(Error::Unsupported {
            op,
            dtype,
            reason: format!(
                "the reduction is empty, so {name} is all zeros, and zero-filling is done for a \
                 contiguous {name} only ({:?} with strides {:?} given)",
                layout.desc.dims, layout.desc.strides
            ),
        });
    }
    // All-zero bytes are +0.0 in every supported float type.
    out.slice_mut(0..layout.elems)?.memset_async(0)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_mode_parses_miopen_safe_search() {
        assert_eq!(
            AlgorithmSearch::parse("immediate"),
            Some(AlgorithmSearch::Immediate)
        );
        assert_eq!(
            AlgorithmSearch::parse(" Find\n"),
            Some(AlgorithmSearch::Find)
        );
        assert_eq!(AlgorithmSearch::parse("exhaustive"), None);
        assert_eq!(AlgorithmSearch::parse(""), None);
    }

    #[test]
    fn only_refusal_statuses_are_remembered_as_rejections() {
        let api = |name: &str| Error::Api {
            library: "MIOpen",
            call: "miopenConvolutionForwardGetSolution",
            code: 3,
            name: name.to_string(),
            message: String::new(),
            context: None,
        };
        assert!(refuses(&api("miopenStatusBadParm")));
        assert!(refuses(&api("miopenStatusNotImplemented")));
        assert!(refuses(&api("miopenStatusUnsupportedOp")));
        assert!(!refuses(&api("miopenStatusAllocFailed")));
        assert!(!refuses(&api("miopenStatusUnknownError")));
        assert!(!refuses(&Error::invalid("op", "bad")));
    }

    #[test]
    fn stats_start_at_zero() {
        assert_eq!(
            AlgorithmStats::default(),
            AlgorithmStats {
                searches: 0,
                cache_hits: 0,
                cached: 0,
                rejected: 0
            }
        );
    }
}
