//! The `amd` platform: MIOpen through our bindgen table.
//!
//! `libMIOpen.so.1` (or `.so`) is opened on first use from `$ROCM_PATH/lib`, `/opt/rocm/lib`,
//! then the loader path; a missing library is [`hip_core::Error::LibraryNotFound`], a missing
//! function [`hip_core::Error::MissingSymbol`] when called. Descriptors are created per call and
//! destroyed by RAII guards. Convolutions are `miopenConvolution` mode (cross-correlation);
//! `alpha = 1`, `beta = 0` as `float`s (MIOpen reads them as `float` for every data type).
//!
//! Two ways to choose an algorithm: immediate mode (the default: `miopenConvolution*GetSolution`
//! from MIOpen's find-db or heuristics, `*CompileSolution`, then `*Immediate` runs), and the find
//! step (`miopenFindConvolution*Algorithm`, which benchmarks candidates, then
//! `miopenConvolution{Forward,BackwardData}` runs). The safe layer picks one per process.

use std::ffi::{c_int, c_void, CStr};
use std::ptr::null_mut;
use std::sync::OnceLock;

use hip_core::loader::LibrarySpec;
use hip_core::Stream;

use super::{describe, ConvPtrs, Direction, Workspace};
use crate::error::{Error, Result};
use crate::handle::ConvAlgorithm;
use crate::shape::{ConvProblem, Desc, PoolProblem};
use crate::sys::miopen as sys;
use crate::types::{DataType, PoolMode};

/// How errors name the library.
pub(crate) const LIBRARY: &str = "MIOpen";
/// What the loader looks for.
pub(crate) const DESCRIPTION: &str = "MIOpen (libMIOpen)";
/// MIOpen's file names, in order.
pub const SONAMES: &[&str] = &["libMIOpen.so.1", "libMIOpen.so"];

/// How many algorithms the find step is asked for (the best comes first).
const FIND_COUNT: usize = 4;

/// The most immediate-mode solutions asked for (MIOpen sorts them best first).
pub(crate) const MAX_SOLUTIONS: usize = 32;

static API: OnceLock<Result<sys::MIOpen>> = OnceLock::new();

/// The MIOpen table, opened on first use (a failure is remembered for the process).
pub(crate) fn api() -> Result<&'static sys::MIOpen> {
    API.get_or_init(|| load(&LibrarySpec::rocm(DESCRIPTION, SONAMES)))
        .as_ref()
        .map_err(Clone::clone)
}

/// Opens MIOpen as `spec` says and resolves the table.
pub(crate) fn load(spec: &LibrarySpec) -> Result<sys::MIOpen> {
    let library = spec.open()?;
    // SAFETY: `from_library` only looks the table's symbols up (dlsym) and calls none of them;
    // the prototypes come from the ROCm 6.4 miopen.h, whose ABI the accepted sonames share.
    unsafe { sys::MIOpen::from_library(library) }.map_err(|e| {
        Error::Hip(hip_core::Error::Platform(format!(
            "{DESCRIPTION} loaded but its symbols could not be read: {e}"
        )))
    })
}

/// Calls a function of the MIOpen table: `Result<()>`, with [`hip_core::Error::MissingSymbol`]
/// when the library lacks it and [`Error::Api`] for a failure status. Use inside an `unsafe`
/// block whose `SAFETY` comment covers the arguments.
macro_rules! mio {
    ($api:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match &$api.$f {
            Ok(f) => {
                let f = *f;
                check(stringify!($f), f($($arg),*))
            }
            Err(_) => Err(missing(stringify!($f))),
        }
    };
}

fn missing(symbol: &'static str) -> Error {
    Error::Hip(hip_core::Error::MissingSymbol {
        library: DESCRIPTION.to_string(),
        symbol,
    })
}

/// `miopenStatus_t` names and meanings (from miopen.h).
const STATUS: &[(u32, &str, &str)] = &[
    (sys::miopenStatusSuccess, "miopenStatusSuccess", "no error"),
    (
        sys::miopenStatusNotInitialized,
        "miopenStatusNotInitialized",
        "data not initialized",
    ),
    (
        sys::miopenStatusInvalidValue,
        "miopenStatusInvalidValue",
        "incorrect variable value",
    ),
    (
        sys::miopenStatusBadParm,
        "miopenStatusBadParm",
        "incorrect parameter detected",
    ),
    (
        sys::miopenStatusAllocFailed,
        "miopenStatusAllocFailed",
        "memory allocation error",
    ),
    (
        sys::miopenStatusInternalError,
        "miopenStatusInternalError",
        "MIOpen failure",
    ),
    (
        sys::miopenStatusNotImplemented,
        "miopenStatusNotImplemented",
        "use of an unimplemented feature",
    ),
    (
        sys::miopenStatusUnknownError,
        "miopenStatusUnknownError",
        "unknown error occurred (e.g. no GPU device: MIOpen logs the cause on stderr)",
    ),
    (
        sys::miopenStatusUnsupportedOp,
        "miopenStatusUnsupportedOp",
        "unsupported operator",
    ),
    (
        sys::miopenStatusGpuOperationsSkipped,
        "miopenStatusGpuOperationsSkipped",
        "GPU operations skipped",
    ),
    (
        sys::miopenStatusVersionMismatch,
        "miopenStatusVersionMismatch",
        "version mismatch of the supplied binary data",
    ),
];

/// The name of a `miopenStatus_t`: our table, else the library's `miopenGetErrorString`.
pub(crate) fn status_name(code: sys::miopenStatus_t) -> String {
    if let Some((_, name, _)) = STATUS.iter().find(|(c, _, _)| *c == code) {
        return name.to_string();
    }
    let from_library = api().ok().and_then(|api| {
        let f = api.miopenGetErrorString.as_ref().ok()?;
        // SAFETY: miopenGetErrorString takes any status and returns a static NUL-terminated
        // string (or null).
        let s = unsafe { f(code) };
        // SAFETY: a non-null result points to a static NUL-terminated string.
        (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
    });
    from_library.unwrap_or_else(|| format!("miopenStatus({code})"))
}

fn check(call: &'static str, code: sys::miopenStatus_t) -> Result<()> {
    if code == sys::miopenStatusSuccess {
        return Ok(());
    }
    let message = STATUS
        .iter()
        .find(|(c, _, _)| *c == code)
        .map(|(_, _, m)| m.to_string())
        .unwrap_or_else(|| "unknown status".to_string());
    Err(Error::Api {
        library: LIBRARY,
        call,
        code: code as i32,
        name: status_name(code),
        message,
        context: None,
    })
}

fn data_type(dtype: DataType) -> sys::miopenDataType_t {
    match dtype {
        DataType::F32 => sys::miopenFloat,
        DataType::F16 => sys::miopenHalf,
        DataType::BF16 => sys::miopenBFloat16,
        DataType::F64 => sys::miopenDouble,
    }
}

/// A `miopenTensorDescriptor_t`, destroyed on drop.
struct TensorDesc {
    api: &'static sys::MIOpen,
    raw: sys::miopenTensorDescriptor_t,
}

impl TensorDesc {
    fn new(dtype: DataType, d: &Desc) -> Result<TensorDesc> {
        let api = api()?;
        let mut raw = null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        unsafe { mio!(api, miopenCreateTensorDescriptor(&mut raw)) }?;
        let desc = TensorDesc { api, raw };
        // SAFETY: `raw` is live; dims and strides hold `len` ints each and are only read.
        unsafe {
            mio!(
                api,
                miopenSetTensorDescriptor(
                    raw,
                    data_type(dtype),
                    d.dims.len() as c_int,
                    d.dims.as_ptr(),
                    d.strides.as_ptr(),
                )
            )
        }?;
        Ok(desc)
    }
}

impl Drop for TensorDesc {
    fn drop(&mut self) {
        // SAFETY: created by miopenCreateTensorDescriptor and destroyed once, here.
        let _ = unsafe { mio!(self.api, miopenDestroyTensorDescriptor(self.raw)) };
    }
}

/// A `miopenConvolutionDescriptor_t` (cross-correlation, N-d, grouped), destroyed on drop.
struct ConvDesc {
    api: &'static sys::MIOpen,
    raw: sys::miopenConvolutionDescriptor_t,
}

impl ConvDesc {
    fn new(p: &ConvProblem) -> Result<ConvDesc> {
        let api = api()?;
        let mut raw = null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        unsafe { mio!(api, miopenCreateConvolutionDescriptor(&mut raw)) }?;
        let desc = ConvDesc { api, raw };
        // SAFETY: `raw` is live; the three arrays hold `spatial` ints each and are only read.
        unsafe {
            mio!(
                api,
                miopenInitConvolutionNdDescriptor(
                    raw,
                    p.spatial() as c_int,
                    p.padding.as_ptr(),
                    p.stride.as_ptr(),
                    p.dilation.as_ptr(),
                    sys::miopenConvolution,
                )
            )
        }?;
        // SAFETY: `raw` is live.
        unsafe { mio!(api, miopenSetConvolutionGroupCount(raw, p.groups)) }?;
        Ok(desc)
    }
}

impl Drop for ConvDesc {
    fn drop(&mut self) {
        // SAFETY: created by miopenCreateConvolutionDescriptor and destroyed once, here.
        let _ = unsafe { mio!(self.api, miopenDestroyConvolutionDescriptor(self.raw)) };
    }
}

/// A `miopenPoolingDescriptor_t`, destroyed on drop.
struct PoolDesc {
    api: &'static sys::MIOpen,
    raw: sys::miopenPoolingDescriptor_t,
}

impl PoolDesc {
    fn new(p: &PoolProblem) -> Result<PoolDesc> {
        let api = api()?;
        let mut raw = null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        unsafe { mio!(api, miopenCreatePoolingDescriptor(&mut raw)) }?;
        let desc = PoolDesc { api, raw };
        let mode = match p.mode {
            PoolMode::Max => sys::miopenPoolingMax,
            PoolMode::Average => sys::miopenPoolingAverage,
            PoolMode::AverageIncludePadding => sys::miopenPoolingAverageInclusive,
        };
        // SAFETY: `raw` is live; the three arrays hold `window.len()` ints each, only read.
        unsafe {
            mio!(
                api,
                miopenSetNdPoolingDescriptor(
                    raw,
                    mode,
                    p.window.len() as c_int,
                    p.window.as_ptr(),
                    p.padding.as_ptr(),
                    p.stride.as_ptr(),
                )
            )
        }?;
        Ok(desc)
    }
}

impl Drop for PoolDesc {
    fn drop(&mut self) {
        // SAFETY: created by miopenCreatePoolingDescriptor and destroyed once, here.
        let _ = unsafe { mio!(self.api, miopenDestroyPoolingDescriptor(self.raw)) };
    }
}

/// The descriptors of one convolution.
struct ConvDescs {
    x: TensorDesc,
    w: TensorDesc,
    y: TensorDesc,
    conv: ConvDesc,
}

impl ConvDescs {
    fn new(p: &ConvProblem) -> Result<ConvDescs> {
        Ok(ConvDescs {
            x: TensorDesc::new(p.dtype, &p.x)?,
            w: TensorDesc::new(p.dtype, &p.w)?,
            y: TensorDesc::new(p.dtype, &p.y)?,
            conv: ConvDesc::new(p)?,
        })
    }
}

fn algorithm_name(dir: Direction, id: u32) -> &'static str {
    match (dir, id) {
        (_, 0) => "GEMM",
        (_, 1) => "Direct",
        (_, 2) => "FFT",
        (_, 3) => "Winograd",
        (Direction::BackwardData, 4) => "TransposeGEMM",
        (_, 5) => "ImplicitGEMM",
        _ => "unknown",
    }
}

/// A `miopenHandle_t` bound to a hip-core stream, destroyed on drop.
pub(crate) struct AmdHandle {
    api: &'static sys::MIOpen,
    raw: sys::miopenHandle_t,
    stream: Stream,
}

// SAFETY: a MIOpen handle may be used from any thread, one thread at a time; the safe layer
// keeps every `AmdHandle` behind a mutex.
unsafe impl Send for AmdHandle {}

impl AmdHandle {
    pub(crate) fn new(stream: &Stream) -> Result<AmdHandle> {
        let api = api()?;
        stream.device().make_current()?;
        let mut raw = null_mut();
        // SAFETY: `raw` is a valid out-pointer; the stream is a live hipStream_t of the current
        // device and outlives the handle (we keep a clone).
        unsafe {
            mio!(
                api,
                miopenCreateWithStream(&mut raw, stream.as_raw().cast())
            )
        }
        .map_err(|e| {
            e.context(format!(
                "creating a MIOpen handle on device {}",
                stream.device().ordinal()
            ))
        })?;
        Ok(AmdHandle {
            api,
            raw,
            stream: stream.clone(),
        })
    }

    pub(crate) fn as_raw(&self) -> *mut c_void {
        self.raw.cast()
    }

    /// # Safety
    /// The handle's device is current.
    pub(crate) unsafe fn conv_find_workspace(
        &self,
        dir: Direction,
        p: &ConvProblem,
    ) -> Result<usize> {
        let d = ConvDescs::new(p)?;
        let mut bytes = 0usize;
        let api = self.api;
        // SAFETY: every descriptor is live; `bytes` is a valid out-pointer.
        unsafe {
            match dir {
                Direction::Forward => mio!(
                    api,
                    miopenConvolutionForwardGetWorkSpaceSize(
                        self.raw, d.w.raw, d.x.raw, d.conv.raw, d.y.raw, &mut bytes,
                    )
                ),
                Direction::BackwardData => mio!(
                    api,
                    miopenConvolutionBackwardDataGetWorkSpaceSize(
                        self.raw, d.y.raw, d.w.raw, d.conv.raw, d.x.raw, &mut bytes,
                    )
                ),
            }
        }?;
        Ok(bytes)
    }

    /// # Safety
    /// See [`super::RawHandle::conv_find`].
    pub(crate) unsafe fn conv_find(
        &self,
        dir: Direction,
        p: &ConvProblem,
        ptrs: ConvPtrs,
        ws: Workspace,
    ) -> Result<ConvAlgorithm> {
        let d = ConvDescs::new(p)?;
        let mut perf = [sys::miopenConvAlgoPerf_t::default(); FIND_COUNT];
        let mut returned: c_int = 0;
        let api = self.api;
        // SAFETY: descriptors are live; the caller guarantees the device pointers and the
        // workspace; `perf` has room for FIND_COUNT results and `returned` is an out-pointer.
        // exhaustiveSearch = false: MIOpen's find-db and heuristics, not a full tuning run.
        unsafe {
            match dir {
                Direction::Forward => mio!(
                    api,
                    miopenFindConvolutionForwardAlgorithm(
                        self.raw,
                        d.x.raw,
                        ptrs.x.cast_const(),
                        d.w.raw,
                        ptrs.w.cast_const(),
                        d.conv.raw,
                        d.y.raw,
                        ptrs.y,
                        FIND_COUNT as c_int,
                        &mut returned,
                        perf.as_mut_ptr(),
                        ws.ptr,
                        ws.bytes,
                        false,
                    )
                ),
                Direction::BackwardData => mio!(
                    api,
                    miopenFindConvolutionBackwardDataAlgorithm(
                        self.raw,
                        d.y.raw,
                        ptrs.y.cast_const(),
                        d.w.raw,
                        ptrs.w.cast_const(),
                        d.conv.raw,
                        d.x.raw,
                        ptrs.x,
                        FIND_COUNT as c_int,
                        &mut returned,
                        perf.as_mut_ptr(),
                        ws.ptr,
                        ws.bytes,
                        false,
                    )
                ),
            }
        }
        .map_err(|e| e.context(describe(dir, p)))?;
        if returned <= 0 {
            return Err(Error::Unsupported {
                op: "MIOpen's find step",
                dtype: p.dtype,
                reason: format!("it returned no algorithm for {}", describe(dir, p)),
            });
        }
        let best = perf[0];
        // SAFETY: every member of the union is a 32-bit enum (any bit pattern is a valid u32),
        // and MIOpen wrote the one for this direction.
        let id = unsafe {
            match dir {
                Direction::Forward => best.__bindgen_anon_1.fwd_algo,
                Direction::BackwardData => best.__bindgen_anon_1.bwd_data_algo,
            }
        };
        Ok(ConvAlgorithm {
            id: id as i32,
            name: algorithm_name(dir, id),
            workspace_bytes: best.memory,
            time_ms: best.time,
            math_type: 0,
            solution_id: None,
        })
    }

    /// Immediate mode: the solutions MIOpen offers for `p` (from its find-db when the problem
    /// is recorded there, else from its heuristics), best first, at most [`MAX_SOLUTIONS`].
    /// Nothing is compiled or run.
    ///
    /// # Safety
    /// The handle's device is current.
    pub(crate) unsafe fn conv_solutions(
        &self,
        dir: Direction,
        p: &ConvProblem,
    ) -> Result<Vec<ConvAlgorithm>> {
        let d = ConvDescs::new(p)?;
        let api = self.api;
        let mut count = 0usize;
        // SAFETY: every descriptor is live; `count` is a valid out-pointer.
        unsafe {
            match dir {
                Direction::Forward => mio!(
                    api,
                    miopenConvolutionForwardGetSolutionCount(
                        self.raw, d.w.raw, d.x.raw, d.conv.raw, d.y.raw, &mut count,
                    )
                ),
                Direction::BackwardData => mio!(
                    api,
                    miopenConvolutionBackwardDataGetSolutionCount(
                        self.raw, d.y.raw, d.w.raw, d.conv.raw, d.x.raw, &mut count,
                    )
                ),
            }
        }
        .map_err(|e| e.context(describe(dir, p)))?;
        let count = count.min(MAX_SOLUTIONS);
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut solutions = vec![sys::miopenConvSolution_t::default(); count];
        let mut returned = 0usize;
        // SAFETY: descriptors are live; `solutions` has room for `count` entries, the maximum
        // passed; `returned` is a valid out-pointer.
        unsafe {
            match dir {
                Direction::Forward => mio!(
                    api,
                    miopenConvolutionForwardGetSolution(
                        self.raw,
                        d.w.raw,
                        d.x.raw,
                        d.conv.raw,
                        d.y.raw,
                        count,
                        &mut returned,
                        solutions.as_mut_ptr(),
                    )
                ),
                Direction::BackwardData => mio!(
                    api,
                    miopenConvolutionBackwardDataGetSolution(
                        self.raw,
                        d.y.raw,
                        d.w.raw,
                        d.conv.raw,
                        d.x.raw,
                        count,
                        &mut returned,
                        solutions.as_mut_ptr(),
                    )
                ),
            }
        }
        .map_err(|e| e.context(describe(dir, p)))?;
        solutions.truncate(returned.min(count));
        Ok(solutions
            .iter()
            .map(|s| ConvAlgorithm {
                id: s.algorithm as i32,
                name: algorithm_name(dir, s.algorithm),
                workspace_bytes: s.workspace_size,
                time_ms: s.time,
                math_type: 0,
                solution_id: Some(s.solution_id),
            })
            .collect())
    }

    /// Immediate mode: compiles (or loads from MIOpen's kernel cache) the kernels of one
    /// solution of [`AmdHandle::conv_solutions`], so that running it compiles nothing.
    ///
    /// # Safety
    /// The handle's device is current.
    pub(crate) unsafe fn conv_compile(
        &self,
        dir: Direction,
        p: &ConvProblem,
        solution_id: u64,
    ) -> Result<()> {
        let d = ConvDescs::new(p)?;
        let api = self.api;
        // SAFETY: every descriptor is live; the solution id is only looked up by MIOpen (an
        // unknown one is an error status).
        unsafe {
            match dir {
                Direction::Forward => mio!(
                    api,
                    miopenConvolutionForwardCompileSolution(
                        self.raw,
                        d.w.raw,
                        d.x.raw,
                        d.conv.raw,
                        d.y.raw,
                        solution_id,
                    )
                ),
                Direction::BackwardData => mio!(
                    api,
                    miopenConvolutionBackwardDataCompileSolution(
                        self.raw,
                        d.y.raw,
                        d.w.raw,
                        d.conv.raw,
                        d.x.raw,
                        solution_id,
                    )
                ),
            }
        }
        .map_err(|e| {
            e.context(format!(
                "compiling solution {solution_id} of {}",
                describe(dir, p)
            ))
        })
    }

    /// # Safety
    /// See [`super::RawHandle::conv_run`].
    pub(crate) unsafe fn conv_run(
        &self,
        dir: Direction,
        p: &ConvProblem,
        algo: &ConvAlgorithm,
        ptrs: ConvPtrs,
        ws: Workspace,
    ) -> Result<()> {
        let d = ConvDescs::new(p)?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let alpha = (&alpha as *const f32).cast::<c_void>();
        let beta = (&beta as *const f32).cast::<c_void>();
        let api = self.api;
        if let Some(solution) = algo.solution_id {
            // SAFETY: descriptors are live; the caller guarantees the device pointers and a
            // workspace of at least the solution's size; `solution` was returned by this
            // handle's immediate-mode query for this problem and compiled on it.
            return unsafe {
                match dir {
                    Direction::Forward => mio!(
                        api,
                        miopenConvolutionForwardImmediate(
                            self.raw,
                            d.w.raw,
                            ptrs.w.cast_const(),
                            d.x.raw,
                            ptrs.x.cast_const(),
                            d.conv.raw,
                            d.y.raw,
                            ptrs.y,
                            ws.ptr,
                            ws.bytes,
                            solution,
                        )
                    ),
                    Direction::BackwardData => mio!(
                        api,
                        miopenConvolutionBackwardDataImmediate(
                            self.raw,
                            d.y.raw,
                            ptrs.y.cast_const(),
                            d.w.raw,
                            ptrs.w.cast_const(),
                            d.conv.raw,
                            d.x.raw,
                            ptrs.x,
                            ws.ptr,
                            ws.bytes,
                            solution,
                        )
                    ),
                }
            }
            .map_err(|e| e.context(describe(dir, p)));
        }
        // SAFETY: descriptors are live; alpha/beta point to floats that outlive the call; the
        // caller guarantees the device pointers and a workspace of at least the algorithm's size;
        // `algo` came from this handle's find step for this problem.
        unsafe {
            match dir {
                Direction::Forward => mio!(
                    api,
                    miopenConvolutionForward(
                        self.raw,
                        alpha,
                        d.x.raw,
                        ptrs.x.cast_const(),
                        d.w.raw,
                        ptrs.w.cast_const(),
                        d.conv.raw,
                        algo.id as sys::miopenConvFwdAlgorithm_t,
                        beta,
                        d.y.raw,
                        ptrs.y,
                        ws.ptr,
                        ws.bytes,
                    )
                ),
                Direction::BackwardData => mio!(
                    api,
                    miopenConvolutionBackwardData(
                        self.raw,
                        alpha,
                        d.y.raw,
                        ptrs.y.cast_const(),
                        d.w.raw,
                        ptrs.w.cast_const(),
                        d.conv.raw,
                        algo.id as sys::miopenConvBwdDataAlgorithm_t,
                        beta,
                        d.x.raw,
                        ptrs.x,
                        ws.ptr,
                        ws.bytes,
                    )
                ),
            }
        }
        .map_err(|e| e.context(describe(dir, p)))
    }

    /// # Safety
    /// See [`super::RawHandle::pool_forward`].
    pub(crate) unsafe fn pool_forward(
        &self,
        p: &PoolProblem,
        x: *const c_void,
        y: *mut c_void,
    ) -> Result<()> {
        let xd = TensorDesc::new(p.dtype, &p.x)?;
        let yd = TensorDesc::new(p.dtype, &p.y)?;
        let pool = PoolDesc::new(p)?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let api = self.api;
        // SAFETY: descriptors are live; alpha/beta outlive the call; the caller guarantees `x`
        // and `y`. do_backward = false: no indices are saved, so no workspace is needed.
        unsafe {
            mio!(
                api,
                miopenPoolingForward(
                    self.raw,
                    pool.raw,
                    (&alpha as *const f32).cast(),
                    xd.raw,
                    x,
                    (&beta as *const f32).cast(),
                    yd.raw,
                    y,
                    false,
                    null_mut(),
                    0,
                )
            )
        }
        .map_err(|e| {
            e.context(format!(
                "{:?} pooling of {} {:?}",
                p.mode, p.dtype, p.x.dims
            ))
        })
    }
}

impl Drop for AmdHandle {
    fn drop(&mut self) {
        if self.stream.device().make_current().is_err() {
            return;
        }
        // SAFETY: created by miopenCreateWithStream and destroyed once, here; the safe layer
        // synchronized the stream first, so no queued work still uses the handle's kernels.
        let _ = unsafe { mio!(self.api, miopenDestroy(self.raw)) };
    }
}

/// `MIOpen major.minor.patch` from `miopenGetVersion`.
pub(crate) fn library_version() -> Result<String> {
    let api = api()?;
    let (mut major, mut minor, mut patch) = (0usize, 0usize, 0usize);
    // SAFETY: three valid out-pointers.
    unsafe { mio!(api, miopenGetVersion(&mut major, &mut minor, &mut patch)) }?;
    Ok(format!("MIOpen {major}.{minor}.{patch}"))
}

/// `miopenGetConvolutionNdForwardOutputDim` (host only: works without a GPU).
pub(crate) fn conv_output_dims(p: &ConvProblem) -> Result<Vec<i32>> {
    let api = api()?;
    let x = TensorDesc::new(p.dtype, &p.x)?;
    let w = TensorDesc::new(p.dtype, &p.w)?;
    let conv = ConvDesc::new(p)?;
    let mut n: c_int = 0;
    let mut out = [0 as c_int; 8];
    // SAFETY: descriptors are live; MIOpen writes `spatial + 2` (at most 5) ints into `out`,
    // which holds 8, and one into `n`.
    unsafe {
        mio!(
            api,
            miopenGetConvolutionNdForwardOutputDim(
                conv.raw,
                x.raw,
                w.raw,
                &mut n,
                out.as_mut_ptr()
            )
        )
    }?;
    let n = usize::try_from(n).unwrap_or(0).min(out.len());
    Ok(out[..n].to_vec())
}

/// `miopenGetPoolingNdForwardOutputDim` (host only: works without a GPU).
pub(crate) fn pool_output_dims(p: &PoolProblem) -> Result<Vec<i32>> {
    let api = api()?;
    let x = TensorDesc::new(p.dtype, &p.x)?;
    let pool = PoolDesc::new(p)?;
    let rank = p.x.dims.len();
    let mut out = [0 as c_int; 8];
    // SAFETY: descriptors are live; MIOpen writes `rank` (at most 5) ints into `out`.
    unsafe {
        mio!(
            api,
            miopenGetPoolingNdForwardOutputDim(pool.raw, x.raw, rank as c_int, out.as_mut_ptr())
        )
    }?;
    Ok(out[..rank].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_names_every_path_and_the_fix() {
        let spec = LibrarySpec {
            description: DESCRIPTION,
            sonames: &["libMIOpen_miopen_safe_test_absent.so.1"],
            dirs: hip_core::loader::rocm_lib_dirs(Some("/nonexistent/rocm".into())),
            hint: hip_core::loader::ROCM_HINT,
        };
        let e = load(&spec).err().expect("an absent library must not load");
        let s = e.to_string();
        assert!(
            matches!(e, Error::Hip(hip_core::Error::LibraryNotFound { .. })),
            "{e:?}"
        );
        assert!(
            s.contains("/nonexistent/rocm/lib/libMIOpen_miopen_safe_test_absent.so.1"),
            "{s}"
        );
        assert!(s.contains("ROCM_PATH"), "{s}");
    }

    #[test]
    fn status_names_follow_miopen_h() {
        assert_eq!(status_name(sys::miopenStatusBadParm), "miopenStatusBadParm");
        let e = check("miopenConvolutionForward", sys::miopenStatusNotImplemented).unwrap_err();
        assert_eq!(e.status_name(), Some("miopenStatusNotImplemented"));
        assert!(check("x", sys::miopenStatusSuccess).is_ok());
        assert_eq!(algorithm_name(Direction::Forward, 5), "ImplicitGEMM");
    }
}
