//! [`Handle`]: a MIOpen (or cuDNN) handle bound to a hip-core stream, with the algorithm cache.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::OnceLock;

use hip_core::{DeviceBuffer, DeviceSlice, DeviceSliceMut, Platform, Stream};
use parking_lot::Mutex;

use crate::backend::{describe, ConvPtrs, Direction, RawHandle, Workspace};
use crate::error::{Error, Result};
use crate::shape::{conv_plan, pool_plan, ConvParams, ConvProblem, Layout, TensorShape};
use crate::types::{ConvElement, DataType, PoolMode};

/// The algorithm the find step chose for one convolution problem.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvAlgorithm {
    /// The library's algorithm id: `miopenConvFwdAlgorithm_t` / `miopenConvBwdDataAlgorithm_t`,
    /// or `cudnnConvolutionFwdAlgo_t` / `cudnnConvolutionBwdDataAlgo_t` on `nvidia`.
    pub id: i32,
    /// The algorithm's name, e.g. `ImplicitGEMM` or `IMPLICIT_PRECOMP_GEMM`.
    pub name: &'static str,
    /// Workspace bytes it runs with.
    pub workspace_bytes: usize,
    /// The time the find step measured or estimated, in milliseconds.
    pub time_ms: f32,
    /// cuDNN's `cudnnMathType_t` chosen with the algorithm (set on the descriptor when it
    /// runs); 0 on MIOpen.
    pub math_type: i32,
}

/// Found algorithms of one problem at one operand alignment: `[forward, backward-data]`.
type Found = [Option<ConvAlgorithm>; 2];

/// The alignment of the three operands' addresses (log2 of bytes, at most 8 = 256 bytes): an
/// algorithm found for aligned buffers may need that alignment (vector loads), so a view at
/// an odd offset gets its own find.
type Alignment = [u32; 3];

fn alignment(ptrs: &ConvPtrs) -> Alignment {
    [ptrs.x, ptrs.w, ptrs.y].map(|p| (p as usize).trailing_zeros().min(8))
}

struct Inner {
    raw: RawHandle,
    /// The algorithm cache: per problem (dtype, every dim and stride, padding, stride, dilation,
    /// groups), per operand alignment, per direction. Kept per handle: MIOpen registers the
    /// kernels a find step compiled with the handle that ran it, so another handle must run its
    /// own find.
    algorithms: HashMap<ConvProblem, HashMap<Alignment, Found>>,
}

/// A MIOpen handle (a cuDNN handle on the `nvidia` platform) bound to one hip-core [`Stream`].
///
/// Every call is queued on that stream, after the work already queued on the operands' own
/// streams (events), and the operands' streams wait for it afterwards, so that results are
/// ordered for whoever uses the buffers next. `Send + Sync`: the library handle sits behind a
/// mutex (calls on one `Handle` are serialized; use one handle per stream for concurrency).
///
/// Convolutions run the library's find step (non-exhaustive) the first time a problem is seen
/// and cache the chosen algorithm in the handle; workspaces (for find and for runs) come from
/// hip-core's caching allocator on the handle's stream. See `docs/miopen.md`.
pub struct Handle {
    inner: Mutex<Inner>,
    stream: Stream,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("platform", &self.platform())
            .field("stream", &self.stream)
            .field("cached_algorithms", &self.cached_algorithms())
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
        Ok(Handle {
            inner: Mutex::new(Inner {
                raw,
                algorithms: HashMap::new(),
            }),
            stream: stream.clone(),
        })
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

    /// How many (problem, operand alignment, direction) algorithms the cache holds.
    pub fn cached_algorithms(&self) -> usize {
        self.inner
            .lock()
            .algorithms
            .values()
            .flat_map(HashMap::values)
            .map(|f| f.iter().flatten().count())
            .sum()
    }

    /// Forgets every cached algorithm: the next call of each problem runs the find step again.
    pub fn clear_algorithm_cache(&self) {
        self.inner.lock().algorithms.clear();
    }

    /// The algorithm cached for a forward convolution of these shapes, if one was found (for
    /// the best-aligned operands it was found with).
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

    /// The algorithm found for `p` at the best-aligned operands seen.
    fn cached(&self, dir: Direction, p: &ConvProblem) -> Option<ConvAlgorithm> {
        let inner = self.inner.lock();
        let by_alignment = inner.algorithms.get(p)?;
        by_alignment
            .iter()
            .filter_map(|(a, f)| {
                f[dir.index()]
                    .clone()
                    .map(|algo| (a.iter().sum::<u32>(), algo))
            })
            .max_by_key(|(a, _)| *a)
            .map(|(_, algo)| algo)
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

    /// Finds (once per problem and direction) and runs a convolution.
    fn conv(
        &self,
        op: &'static str,
        dir: Direction,
        p: &ConvProblem,
        ptrs: ConvPtrs,
    ) -> Result<ConvAlgorithm> {
        self.stream.device().make_current()?;
        let mut inner = self.inner.lock();
        let align = alignment(&ptrs);
        let cached = inner
            .algorithms
            .get(p)
            .and_then(|m| m.get(&align))
            .and_then(|f| f[dir.index()].clone());
        let algo = match cached {
            Some(a) => a,
            None => {
                let a = self.find(&inner.raw, dir, p, ptrs)?;
                inner
                    .algorithms
                    .entry(p.clone())
                    .or_default()
                    .entry(align)
                    .or_default()[dir.index()] = Some(a.clone());
                a
            }
        };
        let ws = self.workspace(algo.workspace_bytes)?;
        let workspace = Workspace {
            ptr: ws.device_ptr().0 as *mut c_void,
            bytes: ws.len(),
        };
        // SAFETY: the device is current; the operands were checked to hold every element `p`
        // reaches, on this device, and are recorded as used by the handle's stream; the
        // workspace is a live allocation of the algorithm's size on that stream (freed in stream
        // order after the call); `algo` was found on this handle for `p`.
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
