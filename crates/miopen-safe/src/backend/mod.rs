//! The narrow interface between the safe layer and the two platforms' DNN libraries.
//!
//! * [`amd`]: MIOpen, through our bindgen table ([`crate::sys::miopen`]);
//! * [`nvidia`]: a thin adapter over cuDNN 9's legacy convolution/pooling API, through our own
//!   libloading table typed with cudarc's raw cuDNN types.
//!
//! Both take the same validated [`ConvProblem`] / [`PoolProblem`] (at least 2 spatial dims,
//! `int` dims and strides), create their descriptors per call (RAII), and do nothing the other
//! lacks: validation, dtype support, 1-d mapping, workspaces and the algorithm cache live in the
//! safe layer above. The platform is hip-core's, chosen once per process.

use std::ffi::c_void;

use hip_core::{Platform, Stream};

use crate::error::Result;
use crate::handle::ConvAlgorithm;
use crate::shape::{ConvProblem, PoolProblem};

pub(crate) mod amd;
pub(crate) mod nvidia;

/// Which convolution a find/run is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Direction {
    /// `y = conv(x, w)`.
    Forward,
    /// `dx = conv_backward_data(dy, w)`.
    BackwardData,
}

impl Direction {
    /// Index into per-problem tables.
    pub(crate) fn index(self) -> usize {
        match self {
            Direction::Forward => 0,
            Direction::BackwardData => 1,
        }
    }
}

/// Device addresses of one convolution's operands: the input side (`x`, or `dx` for
/// backward-data), the weights, the output side (`y`, or `dy`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConvPtrs {
    pub x: *mut c_void,
    pub w: *mut c_void,
    pub y: *mut c_void,
}

/// A device workspace: address and size in bytes (null and 0 for none).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Workspace {
    pub ptr: *mut c_void,
    pub bytes: usize,
}

/// A library handle bound to one stream.
pub(crate) enum RawHandle {
    Amd(amd::AmdHandle),
    Nvidia(nvidia::CudnnHandle),
}

impl RawHandle {
    /// Creates the platform's handle on `stream`.
    pub(crate) fn new(stream: &Stream) -> Result<RawHandle> {
        Ok(match stream.device().platform() {
            Platform::Amd => RawHandle::Amd(amd::AmdHandle::new(stream)?),
            Platform::Nvidia => RawHandle::Nvidia(nvidia::CudnnHandle::new(stream)?),
        })
    }

    /// The raw `miopenHandle_t` / `cudnnHandle_t`.
    pub(crate) fn as_raw(&self) -> *mut c_void {
        match self {
            RawHandle::Amd(h) => h.as_raw(),
            RawHandle::Nvidia(h) => h.as_raw(),
        }
    }

    /// MIOpen's immediate-mode calls ([`amd::AmdHandle::conv_solutions`],
    /// [`amd::AmdHandle::conv_compile`]); `None` on cuDNN, which has no such mode.
    pub(crate) fn immediate(&self) -> Option<&amd::AmdHandle> {
        match self {
            RawHandle::Amd(h) => Some(h),
            RawHandle::Nvidia(_) => None,
        }
    }

    /// The workspace size the library asks for its find step.
    ///
    /// # Safety
    /// The handle's device is current on this thread.
    pub(crate) unsafe fn conv_find_workspace(
        &self,
        dir: Direction,
        p: &ConvProblem,
    ) -> Result<usize> {
        // SAFETY: forwarded contract.
        unsafe {
            match self {
                RawHandle::Amd(h) => h.conv_find_workspace(dir, p),
                RawHandle::Nvidia(h) => h.conv_find_workspace(dir, p),
            }
        }
    }

    /// Runs the library's find step (which runs candidate kernels, writing the output side
    /// for forward and the input side for backward-data) and returns the best algorithm that
    /// fits `ws`.
    ///
    /// # Safety
    /// The handle's device is current; `ptrs` point to device memory of this device laid out as
    /// `p` describes, valid until the stream has run the queued work; `ws` is device memory of
    /// `ws.bytes` bytes (or null and 0) with the same lifetime.
    pub(crate) unsafe fn conv_find(
        &self,
        dir: Direction,
        p: &ConvProblem,
        ptrs: ConvPtrs,
        ws: Workspace,
    ) -> Result<ConvAlgorithm> {
        // SAFETY: forwarded contract.
        unsafe {
            match self {
                RawHandle::Amd(h) => h.conv_find(dir, p, ptrs, ws),
                RawHandle::Nvidia(h) => h.conv_find(dir, p, ptrs, ws),
            }
        }
    }

    /// Queues the convolution with `algo`: from [`RawHandle::conv_find`] on this handle, or
    /// (MIOpen, `algo.solution_id` set) an immediate-mode solution compiled on this handle.
    ///
    /// # Safety
    /// As for [`RawHandle::conv_find`]; `ws.bytes >= algo.workspace_bytes`.
    pub(crate) unsafe fn conv_run(
        &self,
        dir: Direction,
        p: &ConvProblem,
        algo: &ConvAlgorithm,
        ptrs: ConvPtrs,
        ws: Workspace,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe {
            match self {
                RawHandle::Amd(h) => h.conv_run(dir, p, algo, ptrs, ws),
                RawHandle::Nvidia(h) => h.conv_run(dir, p, algo, ptrs, ws),
            }
        }
    }

    /// Queues a pooling forward (no indices saved: inference).
    ///
    /// # Safety
    /// The handle's device is current; `x` and `y` point to device memory laid out as `p`
    /// describes, valid until the stream has run the queued work.
    pub(crate) unsafe fn pool_forward(
        &self,
        p: &PoolProblem,
        x: *const c_void,
        y: *mut c_void,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe {
            match self {
                RawHandle::Amd(h) => h.pool_forward(p, x, y),
                RawHandle::Nvidia(h) => h.pool_forward(p, x, y),
            }
        }
    }
}

/// `a forward 2-d f16 convolution, input side [..] ...`, for error contexts.
pub(crate) fn describe(dir: Direction, p: &ConvProblem) -> String {
    let what = match dir {
        Direction::Forward => "forward",
        Direction::BackwardData => "backward-data",
    };
    format!(
        "a {what} {}-d {} convolution, input side {:?} (strides {:?}), weight {:?}, output side \
         {:?}, padding {:?}, stride {:?}, dilation {:?}, groups {}",
        p.spatial(),
        p.dtype,
        p.x.dims,
        p.x.strides,
        p.w.dims,
        p.y.dims,
        p.padding,
        p.stride,
        p.dilation,
        p.groups
    )
}

/// The library's name and version, e.g. `MIOpen 3.4.0` or `cuDNN 9.10.2`.
pub(crate) fn library_version(platform: Platform) -> Result<String> {
    match platform {
        Platform::Amd => amd::library_version(),
        Platform::Nvidia => nvidia::library_version(),
    }
}

/// The library's own output dims for a convolution (a host-only call).
pub(crate) fn conv_output_dims(platform: Platform, p: &ConvProblem) -> Result<Vec<i32>> {
    match platform {
        Platform::Amd => amd::conv_output_dims(p),
        Platform::Nvidia => nvidia::conv_output_dims(p),
    }
}

/// The library's own output dims for a pooling (a host-only call).
pub(crate) fn pool_output_dims(platform: Platform, p: &PoolProblem) -> Result<Vec<i32>> {
    match platform {
        Platform::Amd => amd::pool_output_dims(p),
        Platform::Nvidia => nvidia::pool_output_dims(p),
    }
}
