//! [`Handle`]: a BLAS library handle bound to one hip-core stream.

use std::ffi::c_void;

use hip_core::{DeviceSlice, DeviceSliceMut, Platform, Stream};
use parking_lot::Mutex;

use crate::backend::{backend, Backend, Compute, GemmCall, MathMode, RawHandle, Scalar};
use crate::config::{GemmConfig, GemmDtype, GemmElement};
use crate::error::{Error, Result};
use crate::precision::{
    gemm_reduced_precision_bf16, gemm_reduced_precision_f16, gemm_reduced_precision_f32,
};

/// A rocBLAS handle (a cuBLAS handle on the `nvidia` platform) bound to one [`Stream`]: every
/// GEMM it runs is queued on that stream, in host pointer mode (alpha and beta are passed by
/// value).
///
/// `Send + Sync`: library handles are not thread-safe, so the raw handle is only used under a
/// mutex; calls from several threads are serialized (each call only queues work, so the lock is
/// held briefly). The handle keeps its stream alive and is destroyed on drop.
///
/// Buffers may come from any stream of the handle's device: like a kernel launch, a GEMM
/// records its use of each buffer on the handle's stream (so that freeing the buffer does not
/// recycle its memory before the GEMM is done), but ordering the GEMM after work queued on
/// other streams is the caller's job ([`Stream::wait_for`]).
pub struct Handle {
    backend: &'static Backend,
    state: Mutex<State>,
    stream: Stream,
}

struct State {
    raw: RawHandle,
    /// The math mode last set on the handle (the library's value), `None` before the first.
    math: Option<u32>,
}

/// The library behind a handle, for direct calls (the benchmark's reference).
#[doc(hidden)]
pub enum RawLibrary<'a> {
    /// rocBLAS' function table; the handle is a `rocblas_handle`.
    RocBlas(&'a crate::sys::rocblas::RocBlas),
    /// cuBLAS' function table; the handle is a `cublasHandle_t`.
    CuBlas(&'a crate::backend::nvidia::CublasApi),
}

impl Handle {
    /// Opens the platform's BLAS library (once per process) and creates a handle on `stream`'s
    /// device, bound to `stream`.
    pub fn new(stream: &Stream) -> Result<Handle> {
        let backend = backend()?;
        let device = stream.device();
        device.make_current()?;
        // SAFETY: the stream is live and belongs to the device just made current; the handle
        // keeps a clone of it, so it outlives the library handle (destroyed in `Drop`).
        let raw = unsafe { backend.create(stream.as_raw()) }.map_err(|e| {
            e.context(format!(
                "creating a {} handle on device {}",
                backend.platform(),
                device.ordinal()
            ))
        })?;
        Ok(Handle {
            backend,
            state: Mutex::new(State { raw, math: None }),
            stream: stream.clone(),
        })
    }

    /// The stream this handle queues its work on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The platform (and so the library: rocBLAS or cuBLAS) behind this handle.
    pub fn platform(&self) -> Platform {
        self.backend.platform()
    }

    /// Queues `C[i] = alpha * op(A[i]) * op(B[i]) + beta * C[i]` (column-major, see
    /// [`GemmConfig`]) on the handle's stream. `alpha` and `beta` are converted to the compute
    /// type (f32 for f32, f16 and bf16; f64 for f64; f16 for f16 when
    /// [`set_gemm_reduced_precision_f16`](crate::set_gemm_reduced_precision_f16) is on).
    ///
    /// `cfg` is validated against the three slices first ([`GemmConfig::validate`]); a bad
    /// description is an [`Error::InvalidArgument`] and queues nothing. An empty GEMM (`m`, `n`
    /// or `batch` zero) queues nothing; `k = 0` sets `C = beta * C`.
    pub fn gemm<T: GemmElement>(
        &self,
        cfg: &GemmConfig,
        alpha: f64,
        a: &DeviceSlice<'_, T>,
        b: &DeviceSlice<'_, T>,
        beta: f64,
        c: &mut DeviceSliceMut<'_, T>,
    ) -> Result<()> {
        let shape = cfg.resolve(a.len(), b.len(), c.len())?;
        let device = self.stream.device();
        let c_buf = c.as_slice().buffer();
        for (name, other) in [
            ("A", a.buffer().device()),
            ("B", b.buffer().device()),
            ("C", c_buf.device()),
        ] {
            if other != device {
                return Err(Error::invalid(
                    "gemm",
                    format!(
                        "{name} lives on device {} but the handle's stream on device {}",
                        other.ordinal(),
                        device.ordinal()
                    ),
                ));
            }
        }
        if cfg.is_empty() {
            return Ok(());
        }
        let dtype = T::DTYPE;
        let (compute, math) = match dtype {
            GemmDtype::F32 => (
                Compute::F32,
                Some(if gemm_reduced_precision_f32() {
                    MathMode::FastF32
                } else {
                    MathMode::Default
                }),
            ),
            GemmDtype::F64 => (Compute::F64, None),
            GemmDtype::F16 if gemm_reduced_precision_f16() => (Compute::F16, None),
            GemmDtype::F16 => (Compute::F32, Some(MathMode::StrictReduction)),
            GemmDtype::BF16 => (
                Compute::F32,
                Some(if gemm_reduced_precision_bf16() {
                    MathMode::Default
                } else {
                    MathMode::StrictReduction
                }),
            ),
        };
        let call = GemmCall {
            shape,
            dtype,
            compute,
            alpha: Scalar::new(alpha, compute),
            beta: Scalar::new(beta, compute),
            a: a.device_ptr().0,
            b: b.device_ptr().0,
            c: c.device_ptr().0,
        };
        {
            let mut state = self.state.lock();
            device.make_current()?;
            if let Some(mode) = math {
                self.apply_math(&mut state, mode)?;
            }
            // SAFETY: the handle is live and locked, its device current; `resolve` checked that
            // every element the call addresses lies inside the three slices, which borrow live
            // buffers of this device; the buffers record their use on our stream below, so their
            // memory is not recycled before the queued GEMM has finished; the GEMM is not empty.
            unsafe { self.backend.gemm(state.raw, &call) }.map_err(|e| {
                e.context(format!(
                    "a {}x{}x{} {dtype} GEMM ({:?}/{:?}, batch {}) on device {}",
                    cfg.m,
                    cfg.n,
                    cfg.k,
                    cfg.transa,
                    cfg.transb,
                    cfg.batch,
                    device.ordinal()
                ))
            })?;
        }
        a.buffer().record_stream(&self.stream);
        b.buffer().record_stream(&self.stream);
        c.as_slice().buffer().record_stream(&self.stream);
        Ok(())
    }

    /// Applies the f32 math mode that [`set_gemm_reduced_precision_f32`](crate::set_gemm_reduced_precision_f32)
    /// asks for and reports whether the library actually uses its fast f32 mode (TF32 on
    /// NVIDIA; XF32 on AMD, which rocBLAS only accepts where the device supports it).
    pub fn f32_fast_math_active(&self) -> Result<bool> {
        let mode = if gemm_reduced_precision_f32() {
            MathMode::FastF32
        } else {
            MathMode::Default
        };
        let mut state = self.state.lock();
        self.stream.device().make_current()?;
        self.apply_math(&mut state, mode)?;
        // SAFETY: the handle is live and locked, its device current.
        unsafe { self.backend.fast_f32_active(state.raw) }
    }

    /// Sets the handle's math mode when it differs from the last one set.
    fn apply_math(&self, state: &mut State, mode: MathMode) -> Result<()> {
        let native = self.backend.native_math(mode);
        if state.math != Some(native) {
            // SAFETY: the handle is live and locked by the caller, its device current.
            unsafe { self.backend.set_math(state.raw, native) }?;
            state.math = Some(native);
        }
        Ok(())
    }

    /// Runs `f` with the library's function table and the raw handle, under the handle's lock
    /// and with its device current: the benchmark's direct-call reference. Calling a table
    /// function is `unsafe`; `f` must leave the handle bound to its stream, in host pointer mode
    /// and in the math mode it found.
    #[doc(hidden)]
    pub fn with_raw<R>(&self, f: impl FnOnce(RawLibrary<'_>, *mut c_void) -> R) -> Result<R> {
        let state = self.state.lock();
        self.stream.device().make_current()?;
        let lib = match self.backend {
            Backend::Amd(l) => RawLibrary::RocBlas(l.table()),
            Backend::Nvidia(l) => RawLibrary::CuBlas(l.table()),
        };
        Ok(f(lib, state.raw.0))
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let raw = self.state.get_mut().raw;
        if self.stream.device().make_current().is_ok() {
            // SAFETY: we own the handle (nobody else can hold the lock during drop), destroy it
            // exactly once, and its stream is still alive (dropped after this).
            let _ = unsafe { self.backend.destroy(raw) };
        }
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("platform", &self.platform())
            .field("stream", &self.stream)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Handle>();
    }
}
