//! The `nvidia` platform: a thin adapter over cuDNN 9's legacy convolution and pooling API.
//!
//! * `libcudnn.so.9` (or `.so`) is opened on first use through our own libloading table
//!   ([`Cudnn`]), typed with cudarc's raw cuDNN types; cudarc's functions are never called (its
//!   loader panics on a missing library). Search order: `$CUDNN_PATH/{lib64,lib,.}`, then the
//!   CUDA toolkit directories (`$CUDA_PATH/lib64`, `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`,
//!   `/usr/local/cuda/targets/x86_64-linux/lib`, `/usr/lib/x86_64-linux-gnu`), then the loader
//!   path. `libcudnn.so.9` itself dispatches to `libcudnn_cnn.so.9` and friends.
//! * Status codes are plain `c_int` (a newer cuDNN may return codes cudarc's enum lacks), and so
//!   are the algorithm fields of the find results ([`AlgoPerf`]).
//! * The adapter maps MIOpen semantics one to one: tensor descriptors with strides, a filter
//!   descriptor (NCHW, contiguous), a cross-correlation convolution descriptor with the group
//!   count, `cudnnFindConvolution*AlgorithmEx` as the find step, pooling with the same modes.
//!   Math: f32 with `CUDNN_FMA_MATH` (no TF32, as MIOpen computes f32), f16/bf16 with tensor
//!   cores and f32 accumulation.

// Table fields carry the exact C symbol names.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::OnceLock;

use cudarc::cudnn::sys::{
    cudaStream_t, cudnnConvolutionDescriptor_t, cudnnConvolutionFwdAlgoPerf_t,
    cudnnConvolutionMode_t, cudnnDataType_t, cudnnFilterDescriptor_t, cudnnHandle_t,
    cudnnMathType_t, cudnnNanPropagation_t, cudnnPoolingDescriptor_t, cudnnPoolingMode_t,
    cudnnTensorDescriptor_t, cudnnTensorFormat_t,
};
use hip_core::loader::LibrarySpec;
use hip_core::Stream;

use super::{ConvPtrs, Direction, Workspace};
use crate::error::{Error, Result};
use crate::handle::ConvAlgorithm;
use crate::shape::{ConvProblem, Desc, PoolProblem};
use crate::types::{DataType, PoolMode};

/// How errors name the library.
pub(crate) const LIBRARY: &str = "cuDNN";
/// What the loader looks for.
pub(crate) const DESCRIPTION: &str = "cuDNN (libcudnn)";
/// cuDNN's file names, in order.
pub const SONAMES: &[&str] = &["libcudnn.so.9", "libcudnn.so"];
/// How to fix a missing cuDNN.
pub(crate) const HINT: &str = "Install cuDNN 9 (libcudnn.so.9), point CUDNN_PATH at its installation (its lib64/ or lib/ must hold the library) or CUDA_PATH at a CUDA installation that includes it; on AMD GPUs set HIP_PLATFORM=amd";

/// One algorithm of `cudnnFind*AlgorithmEx` / `cudnnGet*Algorithm_v7`: the layout of
/// `cudnnConvolutionFwdAlgoPerf_t` and `cudnnConvolutionBwdDataAlgoPerf_t` (identical), with
/// every enum read as a plain `int`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AlgoPerf {
    /// `cudnnConvolution{Fwd,BwdData}Algo_t`.
    pub algo: c_int,
    /// `cudnnStatus_t` of this algorithm (0: usable).
    pub status: c_int,
    /// Measured (Find) or estimated (Get) time in milliseconds.
    pub time: f32,
    /// Workspace bytes it needs.
    pub memory: usize,
    /// `cudnnDeterminism_t`.
    pub determinism: c_int,
    /// `cudnnMathType_t` to set on the descriptor to get this algorithm's behaviour.
    pub math_type: c_int,
    /// Reserved.
    pub reserved: [c_int; 3],
}

const _: () = {
    assert!(
        std::mem::size_of::<AlgoPerf>() == std::mem::size_of::<cudnnConvolutionFwdAlgoPerf_t>()
    );
    assert!(
        std::mem::align_of::<AlgoPerf>() == std::mem::align_of::<cudnnConvolutionFwdAlgoPerf_t>()
    );
    assert!(
        std::mem::size_of::<AlgoPerf>()
            == std::mem::size_of::<cudarc::cudnn::sys::cudnnConvolutionBwdDataAlgoPerf_t>()
    );
};

/// Declares the table: one `Option<fn>` per function (resolved once; `None` when the library
/// lacks it) and the library that keeps them valid.
macro_rules! cudnn_table {
    ($( $name:ident : fn( $( $arg:ty ),* $(,)? ) -> $ret:ty; )*) => {
        /// The cuDNN functions the adapter (and the benchmarks' direct calls) use, resolved in
        /// `libcudnn` when it is opened. A function the library lacks is `None`, and an
        /// [`hip_core::Error::MissingSymbol`] when the adapter calls it.
        pub struct Cudnn {
            $(
                #[doc = concat!("`", stringify!($name), "`.")]
                pub $name: Option<unsafe extern "C" fn($($arg),*) -> $ret>,
            )*
            /// Keeps every function pointer above valid; never unloaded while the table lives.
            _library: libloading::Library,
        }

        /// Every function of [`Cudnn`], in table order.
        pub const CUDNN_FUNCTIONS: &[&str] = &[$(stringify!($name)),*];

        impl Cudnn {
            /// Resolves every function of the table in `library`.
            fn from_library(library: libloading::Library) -> Cudnn {
                $(
                    // SAFETY: each prototype is copied from cuDNN 9's cudnn_*.h (as cudarc's
                    // `sys` module declares them), with status and output enums widened to the
                    // `int` they are in C; the pointer lives in the same struct as `library`,
                    // which keeps it valid.
                    let $name = unsafe {
                        library
                            .get::<unsafe extern "C" fn($($arg),*) -> $ret>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                            .ok()
                            .map(|s| *s)
                    };
                )*
                Cudnn { $($name,)* _library: library }
            }

            /// The functions of the table the opened library does not export.
            pub fn missing(&self) -> Vec<&'static str> {
                let mut out = Vec::new();
                $(
                    if self.$name.is_none() {
                        out.push(stringify!($name));
                    }
                )*
                out
            }
        }
    };
}

cudnn_table! {
    cudnnGetVersion: fn() -> usize;
    cudnnGetErrorString: fn(c_int) -> *const c_char;
    cudnnCreate: fn(*mut cudnnHandle_t) -> c_int;
    cudnnDestroy: fn(cudnnHandle_t) -> c_int;
    cudnnSetStream: fn(cudnnHandle_t, cudaStream_t) -> c_int;
    cudnnCreateTensorDescriptor: fn(*mut cudnnTensorDescriptor_t) -> c_int;
    cudnnSetTensorNdDescriptor: fn(
        cudnnTensorDescriptor_t, cudnnDataType_t, c_int, *const c_int, *const c_int,
    ) -> c_int;
    cudnnDestroyTensorDescriptor: fn(cudnnTensorDescriptor_t) -> c_int;
    cudnnCreateFilterDescriptor: fn(*mut cudnnFilterDescriptor_t) -> c_int;
    cudnnSetFilterNdDescriptor: fn(
        cudnnFilterDescriptor_t, cudnnDataType_t, cudnnTensorFormat_t, c_int, *const c_int,
    ) -> c_int;
    cudnnDestroyFilterDescriptor: fn(cudnnFilterDescriptor_t) -> c_int;
    cudnnCreateConvolutionDescriptor: fn(*mut cudnnConvolutionDescriptor_t) -> c_int;
    cudnnSetConvolutionNdDescriptor: fn(
        cudnnConvolutionDescriptor_t,
        c_int,
        *const c_int,
        *const c_int,
        *const c_int,
        cudnnConvolutionMode_t,
        cudnnDataType_t,
    ) -> c_int;
    cudnnSetConvolutionGroupCount: fn(cudnnConvolutionDescriptor_t, c_int) -> c_int;
    cudnnSetConvolutionMathType: fn(cudnnConvolutionDescriptor_t, c_int) -> c_int;
    cudnnGetConvolutionNdForwardOutputDim: fn(
        cudnnConvolutionDescriptor_t,
        cudnnTensorDescriptor_t,
        cudnnFilterDescriptor_t,
        c_int,
        *mut c_int,
    ) -> c_int;
    cudnnDestroyConvolutionDescriptor: fn(cudnnConvolutionDescriptor_t) -> c_int;
    cudnnGetConvolutionForwardAlgorithmMaxCount: fn(cudnnHandle_t, *mut c_int) -> c_int;
    cudnnGetConvolutionForwardAlgorithm_v7: fn(
        cudnnHandle_t,
        cudnnTensorDescriptor_t,
        cudnnFilterDescriptor_t,
        cudnnConvolutionDescriptor_t,
        cudnnTensorDescriptor_t,
        c_int,
        *mut c_int,
        *mut AlgoPerf,
    ) -> c_int;
    cudnnFindConvolutionForwardAlgorithmEx: fn(
        cudnnHandle_t,
        cudnnTensorDescriptor_t,
        *const c_void,
        cudnnFilterDescriptor_t,
        *const c_void,
        cudnnConvolutionDescriptor_t,
        cudnnTensorDescriptor_t,
        *mut c_void,
        c_int,
        *mut c_int,
        *mut AlgoPerf,
        *mut c_void,
        usize,
    ) -> c_int;
    cudnnGetConvolutionForwardWorkspaceSize: fn(
        cudnnHandle_t,
        cudnnTensorDescriptor_t,
        cudnnFilterDescriptor_t,
        cudnnConvolutionDescriptor_t,
        cudnnTensorDescriptor_t,
        c_int,
        *mut usize,
    ) -> c_int;
    cudnnConvolutionForward: fn(
        cudnnHandle_t,
        *const c_void,
        cudnnTensorDescriptor_t,
        *const c_void,
        cudnnFilterDescriptor_t,
        *const c_void,
        cudnnConvolutionDescriptor_t,
        c_int,
        *mut c_void,
        usize,
        *const c_void,
        cudnnTensorDescriptor_t,
        *mut c_void,
    ) -> c_int;
    cudnnGetConvolutionBackwardDataAlgorithmMaxCount: fn(cudnnHandle_t, *mut c_int) -> c_int;
    cudnnGetConvolutionBackwardDataAlgorithm_v7: fn(
        cudnnHandle_t,
        cudnnFilterDescriptor_t,
        cudnnTensorDescriptor_t,
        cudnnConvolutionDescriptor_t,
        cudnnTensorDescriptor_t,
        c_int,
        *mut c_int,
        *mut AlgoPerf,
    ) -> c_int;
    cudnnFindConvolutionBackwardDataAlgorithmEx: fn(
        cudnnHandle_t,
        cudnnFilterDescriptor_t,
        *const c_void,
        cudnnTensorDescriptor_t,
        *const c_void,
        cudnnConvolutionDescriptor_t,
        cudnnTensorDescriptor_t,
        *mut c_void,
        c_int,
        *mut c_int,
        *mut AlgoPerf,
        *mut c_void,
        usize,
    ) -> c_int;
    cudnnGetConvolutionBackwardDataWorkspaceSize: fn(
        cudnnHandle_t,
        cudnnFilterDescriptor_t,
        cudnnTensorDescriptor_t,
        cudnnConvolutionDescriptor_t,
        cudnnTensorDescriptor_t,
        c_int,
        *mut usize,
    ) -> c_int;
    cudnnConvolutionBackwardData: fn(
        cudnnHandle_t,
        *const c_void,
        cudnnFilterDescriptor_t,
        *const c_void,
        cudnnTensorDescriptor_t,
        *const c_void,
        cudnnConvolutionDescriptor_t,
        c_int,
        *mut c_void,
        usize,
        *const c_void,
        cudnnTensorDescriptor_t,
        *mut c_void,
    ) -> c_int;
    cudnnCreatePoolingDescriptor: fn(*mut cudnnPoolingDescriptor_t) -> c_int;
    cudnnSetPoolingNdDescriptor: fn(
        cudnnPoolingDescriptor_t,
        cudnnPoolingMode_t,
        cudnnNanPropagation_t,
        c_int,
        *const c_int,
        *const c_int,
        *const c_int,
    ) -> c_int;
    cudnnGetPoolingNdForwardOutputDim: fn(
        cudnnPoolingDescriptor_t, cudnnTensorDescriptor_t, c_int, *mut c_int,
    ) -> c_int;
    cudnnPoolingForward: fn(
        cudnnHandle_t,
        cudnnPoolingDescriptor_t,
        *const c_void,
        cudnnTensorDescriptor_t,
        *const c_void,
        *const c_void,
        cudnnTensorDescriptor_t,
        *mut c_void,
    ) -> c_int;
    cudnnDestroyPoolingDescriptor: fn(cudnnPoolingDescriptor_t) -> c_int;
}

/// Where cuDNN is looked for: `$CUDNN_PATH/{lib64,lib,.}`, the CUDA toolkit directories, then
/// the loader path.
pub(crate) fn library_spec(cudnn_path: Option<PathBuf>) -> LibrarySpec {
    let mut spec = LibrarySpec::cuda_toolkit(DESCRIPTION, SONAMES);
    spec.hint = HINT;
    if let Some(root) = cudnn_path.filter(|p| !p.as_os_str().is_empty()) {
        let own = [root.join("lib64"), root.join("lib"), root];
        spec.dirs.retain(|d| !own.contains(d));
        spec.dirs.splice(0..0, own);
    }
    spec
}

static API: OnceLock<Result<Cudnn>> = OnceLock::new();

/// The cuDNN table, opened on first use (a failure is remembered for the process).
pub fn api() -> Result<&'static Cudnn> {
    API.get_or_init(|| {
        let spec = library_spec(std::env::var_os("CUDNN_PATH").map(PathBuf::from));
        Ok(Cudnn::from_library(spec.open()?))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Calls a function of the cuDNN table: `Result<()>`, [`hip_core::Error::MissingSymbol`] when
/// absent, [`Error::Api`] for a failure status. Use inside an `unsafe` block whose `SAFETY`
/// comment covers the arguments.
macro_rules! dnn {
    ($api:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $api.$f {
            Some(f) => $api.check(stringify!($f), f($($arg),*)),
            None => Err(missing(stringify!($f))),
        }
    };
}

fn missing(symbol: &'static str) -> Error {
    Error::Hip(hip_core::Error::MissingSymbol {
        library: DESCRIPTION.to_string(),
        symbol,
    })
}

/// What a cuDNN 9 status family means (codes are grouped by thousands).
fn status_message(code: c_int) -> &'static str {
    match code / 1000 {
        0 => "success",
        1 => "not initialized (or a library/version problem)",
        2 => "bad parameter",
        3 => "not supported",
        4 => "internal error",
        5 => "execution failed",
        _ => "unknown status",
    }
}

impl Cudnn {
    /// `Ok` for `CUDNN_STATUS_SUCCESS`, else the [`Error::Api`] named by `cudnnGetErrorString`.
    fn check(&self, call: &'static str, code: c_int) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        let name = self
            .cudnnGetErrorString
            .and_then(|f| {
                // SAFETY: cudnnGetErrorString takes any status and returns a static
                // NUL-terminated string (or null).
                let s = unsafe { f(code) };
                // SAFETY: a non-null result is a static NUL-terminated string.
                (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| format!("CUDNN_STATUS({code})"));
        Err(Error::Api {
            library: LIBRARY,
            call,
            code,
            name,
            message: status_message(code).to_string(),
            context: None,
        })
    }
}

fn data_type(dtype: DataType) -> cudnnDataType_t {
    match dtype {
        DataType::F32 => cudnnDataType_t::CUDNN_DATA_FLOAT,
        DataType::F16 => cudnnDataType_t::CUDNN_DATA_HALF,
        DataType::BF16 => cudnnDataType_t::CUDNN_DATA_BFLOAT16,
        DataType::F64 => cudnnDataType_t::CUDNN_DATA_DOUBLE,
    }
}

/// Accumulation type of a convolution: f32 for every type but f64.
fn compute_type(dtype: DataType) -> cudnnDataType_t {
    match dtype {
        DataType::F64 => cudnnDataType_t::CUDNN_DATA_DOUBLE,
        _ => cudnnDataType_t::CUDNN_DATA_FLOAT,
    }
}

/// The math type the find step starts from: FMA for f32/f64 (no TF32), tensor cores for
/// f16/bf16.
fn default_math(dtype: DataType) -> c_int {
    match dtype {
        DataType::F32 | DataType::F64 => cudnnMathType_t::CUDNN_FMA_MATH as c_int,
        DataType::F16 | DataType::BF16 => cudnnMathType_t::CUDNN_TENSOR_OP_MATH as c_int,
    }
}

/// alpha = 1, beta = 0 in the scaling type cuDNN wants (double for f64 data, else float).
enum Scaling {
    F32([f32; 2]),
    F64([f64; 2]),
}

impl Scaling {
    fn new(dtype: DataType) -> Scaling {
        match dtype {
            DataType::F64 => Scaling::F64([1.0, 0.0]),
            _ => Scaling::F32([1.0, 0.0]),
        }
    }

    fn alpha(&self) -> *const c_void {
        match self {
            Scaling::F32(v) => (&v[0] as *const f32).cast(),
            Scaling::F64(v) => (&v[0] as *const f64).cast(),
        }
    }

    fn beta(&self) -> *const c_void {
        match self {
            Scaling::F32(v) => (&v[1] as *const f32).cast(),
            Scaling::F64(v) => (&v[1] as *const f64).cast(),
        }
    }
}

/// A `cudnnTensorDescriptor_t`, destroyed on drop.
struct TensorDesc {
    api: &'static Cudnn,
    raw: cudnnTensorDescriptor_t,
}

impl TensorDesc {
    fn new(dtype: DataType, d: &Desc) -> Result<TensorDesc> {
        let api = api()?;
        let mut raw = null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        unsafe { dnn!(api, cudnnCreateTensorDescriptor(&mut raw)) }?;
        let desc = TensorDesc { api, raw };
        // SAFETY: `raw` is live; dims and strides hold `len` ints each, only read.
        unsafe {
            dnn!(
                api,
                cudnnSetTensorNdDescriptor(
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
        // SAFETY: created by cudnnCreateTensorDescriptor and destroyed once, here.
        let _ = unsafe { dnn!(self.api, cudnnDestroyTensorDescriptor(self.raw)) };
    }
}

/// A `cudnnFilterDescriptor_t` (NCHW, contiguous), destroyed on drop.
struct FilterDesc {
    api: &'static Cudnn,
    raw: cudnnFilterDescriptor_t,
}

impl FilterDesc {
    fn new(dtype: DataType, d: &Desc) -> Result<FilterDesc> {
        let api = api()?;
        let mut raw = null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        unsafe { dnn!(api, cudnnCreateFilterDescriptor(&mut raw)) }?;
        let desc = FilterDesc { api, raw };
        // SAFETY: `raw` is live; dims hold `len` ints, only read. The safe layer checked that
        // the weights are contiguous, which is what NCHW means for a filter.
        unsafe {
            dnn!(
                api,
                cudnnSetFilterNdDescriptor(
                    raw,
                    data_type(dtype),
                    cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                    d.dims.len() as c_int,
                    d.dims.as_ptr(),
                )
            )
        }?;
        Ok(desc)
    }
}

impl Drop for FilterDesc {
    fn drop(&mut self) {
        // SAFETY: created by cudnnCreateFilterDescriptor and destroyed once, here.
        let _ = unsafe { dnn!(self.api, cudnnDestroyFilterDescriptor(self.raw)) };
    }
}

/// A `cudnnConvolutionDescriptor_t`, destroyed on drop.
struct ConvDesc {
    api: &'static Cudnn,
    raw: cudnnConvolutionDescriptor_t,
}

impl ConvDesc {
    fn new(p: &ConvProblem, math: c_int) -> Result<ConvDesc> {
        let api = api()?;
        let mut raw = null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        unsafe { dnn!(api, cudnnCreateConvolutionDescriptor(&mut raw)) }?;
        let desc = ConvDesc { api, raw };
        // SAFETY: `raw` is live; the three arrays hold `spatial` ints each, only read.
        unsafe {
            dnn!(
                api,
                cudnnSetConvolutionNdDescriptor(
                    raw,
                    p.spatial() as c_int,
                    p.padding.as_ptr(),
                    p.stride.as_ptr(),
                    p.dilation.as_ptr(),
                    cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                    compute_type(p.dtype),
                )
            )
        }?;
        // SAFETY: `raw` is live.
        unsafe { dnn!(api, cudnnSetConvolutionGroupCount(raw, p.groups)) }?;
        // SAFETY: `raw` is live; `math` is a cudnnMathType_t value.
        unsafe { dnn!(api, cudnnSetConvolutionMathType(raw, math)) }?;
        Ok(desc)
    }
}

impl Drop for ConvDesc {
    fn drop(&mut self) {
        // SAFETY: created by cudnnCreateConvolutionDescriptor and destroyed once, here.
        let _ = unsafe { dnn!(self.api, cudnnDestroyConvolutionDescriptor(self.raw)) };
    }
}

/// A `cudnnPoolingDescriptor_t`, destroyed on drop.
struct PoolDesc {
    api: &'static Cudnn,
    raw: cudnnPoolingDescriptor_t,
}

impl PoolDesc {
    fn new(p: &PoolProblem) -> Result<PoolDesc> {
        let api = api()?;
        let mut raw = null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        unsafe { dnn!(api, cudnnCreatePoolingDescriptor(&mut raw)) }?;
        let desc = PoolDesc { api, raw };
        let mode = match p.mode {
            PoolMode::Max => cudnnPoolingMode_t::CUDNN_POOLING_MAX,
            PoolMode::Average => cudnnPoolingMode_t::CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
            PoolMode::AverageIncludePadding => {
                cudnnPoolingMode_t::CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
            }
        };
        // SAFETY: `raw` is live; the three arrays hold `window.len()` ints each, only read.
        unsafe {
            dnn!(
                api,
                cudnnSetPoolingNdDescriptor(
                    raw,
                    mode,
                    cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
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
        // SAFETY: created by cudnnCreatePoolingDescriptor and destroyed once, here.
        let _ = unsafe { dnn!(self.api, cudnnDestroyPoolingDescriptor(self.raw)) };
    }
}

/// The descriptors of one convolution.
struct ConvDescs {
    x: TensorDesc,
    w: FilterDesc,
    y: TensorDesc,
    conv: ConvDesc,
}

impl ConvDescs {
    fn new(p: &ConvProblem, math: c_int) -> Result<ConvDescs> {
        Ok(ConvDescs {
            x: TensorDesc::new(p.dtype, &p.x)?,
            w: FilterDesc::new(p.dtype, &p.w)?,
            y: TensorDesc::new(p.dtype, &p.y)?,
            conv: ConvDesc::new(p, math)?,
        })
    }
}

fn algorithm_name(dir: Direction, id: c_int) -> &'static str {
    const FWD: &[&str] = &[
        "IMPLICIT_GEMM",
        "IMPLICIT_PRECOMP_GEMM",
        "GEMM",
        "DIRECT",
        "FFT",
        "FFT_TILING",
        "WINOGRAD",
        "WINOGRAD_NONFUSED",
    ];
    const BWD_DATA: &[&str] = &[
        "ALGO_0",
        "ALGO_1",
        "FFT",
        "FFT_TILING",
        "WINOGRAD",
        "WINOGRAD_NONFUSED",
    ];
    let names = match dir {
        Direction::Forward => FWD,
        Direction::BackwardData => BWD_DATA,
    };
    usize::try_from(id)
        .ok()
        .and_then(|i| names.get(i).copied())
        .unwrap_or("unknown")
}

/// A `cudnnHandle_t` bound to a hip-core stream (a `CUstream`), destroyed on drop.
pub(crate) struct CudnnHandle {
    api: &'static Cudnn,
    raw: cudnnHandle_t,
    stream: Stream,
}

// SAFETY: a cuDNN handle may be used from any thread, one thread at a time; the safe layer
// keeps every `CudnnHandle` behind a mutex.
unsafe impl Send for CudnnHandle {}

impl CudnnHandle {
    pub(crate) fn new(stream: &Stream) -> Result<CudnnHandle> {
        let api = api()?;
        stream.device().make_current()?;
        let mut raw = null_mut();
        // SAFETY: `raw` is a valid out-pointer; the device's primary context is current.
        unsafe { dnn!(api, cudnnCreate(&mut raw)) }.map_err(|e| {
            e.context(format!(
                "creating a cuDNN handle on device {}",
                stream.device().ordinal()
            ))
        })?;
        let handle = CudnnHandle {
            api,
            raw,
            stream: stream.clone(),
        };
        // SAFETY: `raw` is live; the stream is a live CUstream of the current context that
        // outlives the handle (we keep a clone).
        unsafe { dnn!(api, cudnnSetStream(raw, stream.as_raw().cast())) }?;
        Ok(handle)
    }

    pub(crate) fn as_raw(&self) -> *mut c_void {
        self.raw.cast()
    }

    /// The candidates `cudnnGet*Algorithm_v7` lists (heuristics; nothing runs).
    fn candidates(&self, dir: Direction, d: &ConvDescs) -> Result<Vec<AlgoPerf>> {
        let api = self.api;
        let mut count: c_int = 0;
        // SAFETY: the handle is live; `count` is a valid out-pointer.
        unsafe {
            match dir {
                Direction::Forward => {
                    dnn!(
                        api,
                        cudnnGetConvolutionForwardAlgorithmMaxCount(self.raw, &mut count)
                    )
                }
                Direction::BackwardData => dnn!(
                    api,
                    cudnnGetConvolutionBackwardDataAlgorithmMaxCount(self.raw, &mut count)
                ),
            }
        }?;
        let mut perf = vec![AlgoPerf::default(); usize::try_from(count).unwrap_or(0).max(1)];
        let mut returned: c_int = 0;
        // SAFETY: descriptors are live; `perf` has room for `count` results.
        unsafe {
            match dir {
                Direction::Forward => dnn!(
                    api,
                    cudnnGetConvolutionForwardAlgorithm_v7(
                        self.raw,
                        d.x.raw,
                        d.w.raw,
                        d.conv.raw,
                        d.y.raw,
                        perf.len() as c_int,
                        &mut returned,
                        perf.as_mut_ptr(),
                    )
                ),
                Direction::BackwardData => dnn!(
                    api,
                    cudnnGetConvolutionBackwardDataAlgorithm_v7(
                        self.raw,
                        d.w.raw,
                        d.y.raw,
                        d.conv.raw,
                        d.x.raw,
                        perf.len() as c_int,
                        &mut returned,
                        perf.as_mut_ptr(),
                    )
                ),
            }
        }?;
        perf.truncate(usize::try_from(returned).unwrap_or(0));
        Ok(perf)
    }

    /// # Safety
    /// The handle's device is current.
    pub(crate) unsafe fn conv_find_workspace(
        &self,
        dir: Direction,
        p: &ConvProblem,
    ) -> Result<usize> {
        let d = ConvDescs::new(p, default_math(p.dtype))?;
        Ok(self
            .candidates(dir, &d)?
            .iter()
            .filter(|c| c.status == 0)
            .map(|c| c.memory)
            .max()
            .unwrap_or(0))
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
        let d = ConvDescs::new(p, default_math(p.dtype))?;
        let api = self.api;
        let mut count: c_int = 0;
        // SAFETY: the handle is live; `count` is a valid out-pointer.
        unsafe {
            match dir {
                Direction::Forward => {
                    dnn!(
                        api,
                        cudnnGetConvolutionForwardAlgorithmMaxCount(self.raw, &mut count)
                    )
                }
                Direction::BackwardData => dnn!(
                    api,
                    cudnnGetConvolutionBackwardDataAlgorithmMaxCount(self.raw, &mut count)
                ),
            }
        }?;
        let mut perf = vec![AlgoPerf::default(); usize::try_from(count).unwrap_or(0).max(1)];
        let mut returned: c_int = 0;
        // SAFETY: descriptors are live; the caller guarantees the device pointers and the
        // workspace; `perf` has room for `perf.len()` results.
        unsafe {
            match dir {
                Direction::Forward => dnn!(
                    api,
                    cudnnFindConvolutionForwardAlgorithmEx(
                        self.raw,
                        d.x.raw,
                        ptrs.x.cast_const(),
                        d.w.raw,
                        ptrs.w.cast_const(),
                        d.conv.raw,
                        d.y.raw,
                        ptrs.y,
                        perf.len() as c_int,
                        &mut returned,
                        perf.as_mut_ptr(),
                        ws.ptr,
                        ws.bytes,
                    )
                ),
                Direction::BackwardData => dnn!(
                    api,
                    cudnnFindConvolutionBackwardDataAlgorithmEx(
                        self.raw,
                        d.w.raw,
                        ptrs.w.cast_const(),
                        d.y.raw,
                        ptrs.y.cast_const(),
                        d.conv.raw,
                        d.x.raw,
                        ptrs.x,
                        perf.len() as c_int,
                        &mut returned,
                        perf.as_mut_ptr(),
                        ws.ptr,
                        ws.bytes,
                    )
                ),
            }
        }
        .map_err(|e| e.context(super::describe(dir, p)))?;
        perf.truncate(usize::try_from(returned).unwrap_or(0));
        // Sorted by time: the first usable one that fits the workspace we gave.
        let best = perf
            .iter()
            .find(|c| c.status == 0 && c.memory <= ws.bytes)
            .ok_or_else(|| Error::Unsupported {
                op: "cuDNN's find step",
                dtype: p.dtype,
                reason: format!(
                    "no algorithm ran for {} (statuses {:?})",
                    super::describe(dir, p),
                    perf.iter().map(|c| c.status).collect::<Vec<_>>()
                ),
            })?;
        Ok(ConvAlgorithm {
            id: best.algo,
            name: algorithm_name(dir, best.algo),
            workspace_bytes: best.memory,
            time_ms: best.time,
            math_type: best.math_type,
            solution_id: None,
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
        let d = ConvDescs::new(p, algo.math_type)?;
        let s = Scaling::new(p.dtype);
        let api = self.api;
        // SAFETY: descriptors are live; alpha/beta outlive the call; the caller guarantees the
        // device pointers and a workspace of at least the algorithm's size; `algo` came from this
        // handle's find step for this problem, with its math type set on the descriptor.
        unsafe {
            match dir {
                Direction::Forward => dnn!(
                    api,
                    cudnnConvolutionForward(
                        self.raw,
                        s.alpha(),
                        d.x.raw,
                        ptrs.x.cast_const(),
                        d.w.raw,
                        ptrs.w.cast_const(),
                        d.conv.raw,
                        algo.id,
                        ws.ptr,
                        ws.bytes,
                        s.beta(),
                        d.y.raw,
                        ptrs.y,
                    )
                ),
                Direction::BackwardData => dnn!(
                    api,
                    cudnnConvolutionBackwardData(
                        self.raw,
                        s.alpha(),
                        d.w.raw,
                        ptrs.w.cast_const(),
                        d.y.raw,
                        ptrs.y.cast_const(),
                        d.conv.raw,
                        algo.id,
                        ws.ptr,
                        ws.bytes,
                        s.beta(),
                        d.x.raw,
                        ptrs.x,
                    )
                ),
            }
        }
        .map_err(|e| e.context(super::describe(dir, p)))
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
        let s = Scaling::new(p.dtype);
        let api = self.api;
        // SAFETY: descriptors are live; alpha/beta outlive the call; the caller guarantees `x`
        // and `y`.
        unsafe {
            dnn!(
                api,
                cudnnPoolingForward(
                    self.raw,
                    pool.raw,
                    s.alpha(),
                    xd.raw,
                    x,
                    s.beta(),
                    yd.raw,
                    y,
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

impl Drop for CudnnHandle {
    fn drop(&mut self) {
        if self.stream.device().make_current().is_err() {
            return;
        }
        // SAFETY: created by cudnnCreate and destroyed once, here, after the safe layer
        // synchronized the stream.
        let _ = unsafe { dnn!(self.api, cudnnDestroy(self.raw)) };
    }
}

/// `cuDNN major.minor.patch` from `cudnnGetVersion`.
pub(crate) fn library_version() -> Result<String> {
    let api = api()?;
    let f = api
        .cudnnGetVersion
        .ok_or_else(|| missing("cudnnGetVersion"))?;
    // SAFETY: cudnnGetVersion takes no argument and only returns a number.
    let v = unsafe { f() };
    // cuDNN 9 encodes major * 10000 + minor * 100 + patch; cuDNN 8 major * 1000 + minor * 100 + patch.
    let (major, minor, patch) = if v >= 90000 {
        (v / 10000, (v % 10000) / 100, v % 100)
    } else {
        (v / 1000, (v % 1000) / 100, v % 100)
    };
    Ok(format!("cuDNN {major}.{minor}.{patch}"))
}

/// `cudnnGetConvolutionNdForwardOutputDim` (host only).
pub(crate) fn conv_output_dims(p: &ConvProblem) -> Result<Vec<i32>> {
    let api = api()?;
    let x = TensorDesc::new(p.dtype, &p.x)?;
    let w = FilterDesc::new(p.dtype, &p.w)?;
    let conv = ConvDesc::new(p, default_math(p.dtype))?;
    let rank = p.x.dims.len();
    let mut out = [0 as c_int; 8];
    // SAFETY: descriptors are live; cuDNN writes `rank` (at most 5) ints into `out`.
    unsafe {
        dnn!(
            api,
            cudnnGetConvolutionNdForwardOutputDim(
                conv.raw,
                x.raw,
                w.raw,
                rank as c_int,
                out.as_mut_ptr()
            )
        )
    }?;
    Ok(out[..rank].to_vec())
}

/// `cudnnGetPoolingNdForwardOutputDim` (host only).
pub(crate) fn pool_output_dims(p: &PoolProblem) -> Result<Vec<i32>> {
    let api = api()?;
    let x = TensorDesc::new(p.dtype, &p.x)?;
    let pool = PoolDesc::new(p)?;
    let rank = p.x.dims.len();
    let mut out = [0 as c_int; 8];
    // SAFETY: descriptors are live; cuDNN writes `rank` (at most 5) ints into `out`.
    unsafe {
        dnn!(
            api,
            cudnnGetPoolingNdForwardOutputDim(pool.raw, x.raw, rank as c_int, out.as_mut_ptr())
        )
    }?;
    Ok(out[..rank].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cudnn_path_comes_first_then_the_toolkit_dirs() {
        let spec = library_spec(Some(PathBuf::from("/opt/cudnn")));
        let c = spec.candidates();
        assert_eq!(c[0], "/opt/cudnn/lib64/libcudnn.so.9");
        assert_eq!(c[2], "/opt/cudnn/lib/libcudnn.so.9");
        assert_eq!(c[4], "/opt/cudnn/libcudnn.so.9");
        assert!(c.iter().any(|p| p == "/usr/local/cuda/lib64/libcudnn.so.9"));
        assert_eq!(c.last().map(String::as_str), Some("libcudnn.so"));
        assert!(spec.hint.contains("CUDNN_PATH"));
        assert_eq!(
            library_spec(Some(PathBuf::new())).dirs[0],
            PathBuf::from("/usr/local/cuda/lib64")
        );
    }

    #[test]
    fn missing_cudnn_is_library_not_found() {
        let mut spec = library_spec(Some(PathBuf::from("/nonexistent/cudnn")));
        spec.sonames = &["libcudnn_miopen_safe_test_absent.so.9"];
        match spec.open() {
            Err(e @ hip_core::Error::LibraryNotFound { .. }) => {
                let s = e.to_string();
                assert!(s.contains("/nonexistent/cudnn/lib64/"), "{s}");
                assert!(s.contains("CUDNN_PATH"), "{s}");
            }
            other => panic!("expected LibraryNotFound, got {:?}", other.err()),
        }
    }

    #[test]
    fn status_families_and_names() {
        assert_eq!(status_message(2000), "bad parameter");
        assert_eq!(status_message(3007), "not supported");
        assert_eq!(
            algorithm_name(Direction::Forward, 1),
            "IMPLICIT_PRECOMP_GEMM"
        );
        assert_eq!(algorithm_name(Direction::BackwardData, 1), "ALGO_1");
        assert_eq!(algorithm_name(Direction::Forward, 42), "unknown");
        assert_eq!(CUDNN_FUNCTIONS.len(), 32);
    }
}
