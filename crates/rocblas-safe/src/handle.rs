//! [`Handle`]: a BLAS library handle bound to one hip-core stream.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use hip_core::{DeviceSlice, DeviceSliceMut, Platform, Stream};
use parking_lot::Mutex;

use crate::backend::{backend, Backend, Compute, GemmCall, MathMode, RawHandle, Scalar};
use crate::config::{GemmConfig, GemmDtype, GemmElement};
use crate::error::{Error, Result};
use crate::precision::{
    env_flag, gemm_reduced_precision_bf16, gemm_reduced_precision_f16, gemm_reduced_precision_f32,
    ALLOW_ATOMICS_ENV, FP16_ALT_IMPL_ENV,
};
use crate::tensile::{self, GfxTarget};

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
///
/// Deterministic by default: the library's algorithms that use atomics (split-K GEMMs whose
/// partial sums are added in whatever order they finish; allowed by default in rocBLAS 4 /
/// ROCm 6) are switched off when the handle is created. [`Handle::set_atomics_allowed`] or
/// `ROCBLAS_SAFE_ALLOW_ATOMICS=1` allows them (faster for some shapes, results may differ in
/// the last bits from run to run).
pub struct Handle {
    backend: &'static Backend,
    state: Mutex<State>,
    stream: Stream,
    /// The device's target on the AMD platform (`None` on NVIDIA).
    target: Option<GfxTarget>,
    /// Whether f16 GEMMs use rocBLAS' alternate kernels where they exist (gfx90a).
    fp16_alt_impl: AtomicBool,
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
    /// device, bound to `stream`, with atomics not allowed (unless `ROCBLAS_SAFE_ALLOW_ATOMICS=1`)
    /// and rocBLAS' alternate f16 kernels off (unless `ROCBLAS_SAFE_FP16_ALT_IMPL=1`).
    ///
    /// On the AMD platform, first checks that rocBLAS has GEMM kernels for the device
    /// ([`tensile::check_arch`]): rocBLAS aborts the process at the first GEMM when they are
    /// missing, so a missing or incomplete Tensile directory is an
    /// [`Error::MissingTensileKernels`] here, naming the directory and the fix.
    pub fn new(stream: &Stream) -> Result<Handle> {
        let backend = backend()?;
        let device = stream.device();
        device.make_current()?;
        let target = match backend {
            Backend::Amd(lib) => {
                let target = GfxTarget::parse(device.arch());
                tensile::check_base(&lib.tensile_base()?, &target)?;
                Some(target)
            }
            Backend::Nvidia(_) => None,
        };
        // SAFETY: the stream is live and belongs to the device just made current; the handle
        // keeps a clone of it, so it outlives the library handle (destroyed in `Drop`).
        let raw = unsafe { backend.create(stream.as_raw()) }.map_err(|e| {
            e.context(format!(
                "creating a {} handle on device {}",
                backend.platform(),
                device.ordinal()
            ))
        })?;
        let allow = env_flag(std::env::var_os(ALLOW_ATOMICS_ENV).as_deref());
        // SAFETY: `raw` was just created on the current device and nobody else has it.
        if let Err(e) = unsafe { backend.set_atomics(raw, allow) } {
            // SAFETY: created above, destroyed once, not used afterwards.
            let _ = unsafe { backend.destroy(raw) };
            return Err(e.context(format!(
                "setting the atomics mode of a new handle on device {}",
                device.ordinal()
            )));
        }
        Ok(Handle {
            backend,
            state: Mutex::new(State { raw, math: None }),
            stream: stream.clone(),
            target,
            fp16_alt_impl: AtomicBool::new(env_flag(
                std::env::var_os(FP16_ALT_IMPL_ENV).as_deref(),
            )),
        })
    }

    /// Allows (`true`) or forbids (`false`, the default) the library's GEMM algorithms that use
    /// atomics: `rocblas_set_atomics_mode` (rocBLAS allows them by default on ROCm 6, which
    /// makes split-K GEMMs non-deterministic) / `cublasSetAtomicsMode` (cuBLAS forbids them by
    /// default). Results are accurate either way; only with atomics forbidden are they
    /// bitwise reproducible.
    pub fn set_atomics_allowed(&self, allowed: bool) -> Result<()> {
        let state = self.state.lock();
        self.stream.device().make_current()?;
        // SAFETY: the handle is live and locked, its device current.
        unsafe { self.backend.set_atomics(state.raw, allowed) }
    }

    /// Whether the library may use atomics in this handle's GEMMs, read back from it.
    pub fn atomics_allowed(&self) -> Result<bool> {
        let state = self.state.lock();
        self.stream.device().make_current()?;
        // SAFETY: the handle is live and locked, its device current.
        unsafe { self.backend.atomics_allowed(state.raw) }
    }

    /// Asks for rocBLAS' alternate f16 GEMM kernels (`rocblas_gemm_flags_fp16_alt_impl`) on
    /// gfx90a (MI200), whose f16 matrix instructions flush subnormal inputs and outputs
    /// (|x| < 6.1e-5) to zero. The alternate kernels convert f16 to bf16 first: subnormals keep
    /// their value, every other element loses 3 bits of mantissa (AMD: "reduced accuracy").
    /// Off by default (as MIOpen's forward convolutions and PyTorch's forward GEMMs; PyTorch
    /// turns it on in backward passes, where gradients are often tiny); the initial value is
    /// `ROCBLAS_SAFE_FP16_ALT_IMPL=1`. Applies only to f16 GEMMs that accumulate in f32, and only
    /// on gfx90a ([`Handle::fp16_alt_impl_active`]); elsewhere it changes nothing.
    pub fn set_fp16_alt_impl(&self, enabled: bool) {
        self.fp16_alt_impl.store(enabled, Ordering::Relaxed);
    }

    /// Whether f16 GEMMs on this handle use rocBLAS' alternate kernels: asked for
    /// ([`Handle::set_fp16_alt_impl`]) and the device is a gfx90a.
    pub fn fp16_alt_impl_active(&self) -> bool {
        self.fp16_alt_impl.load(Ordering::Relaxed) && fp16_alt_impl_applies(self.target.as_ref())
    }

    /// The device's AMD GPU target (`gcnArchName` parsed), `None` on the `nvidia` platform.
    pub fn gfx_target(&self) -> Option<&GfxTarget> {
        self.target.as_ref()
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
            fp16_alt_impl: self.fp16_alt_impl_active(),
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
            let queued = hip_core::profile::library_call(
                || {
                    format!(
                        "gemm_{dtype}_{:?}{:?}_{}x{}x{}_batch{}",
                        cfg.transa, cfg.transb, cfg.m, cfg.n, cfg.k, cfg.batch
                    )
                },
                &self.stream,
                // SAFETY: see the comment above this statement (the closure runs at once, under
                // the same lock).
                || unsafe { self.backend.gemm(state.raw, &call) },
            );
            queued.map_err(|e| {
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

/// Whether rocBLAS' alternate f16 kernels exist for (and are needed on) `target`: gfx90a only.
/// Its f16 matrix instructions flush subnormals; gfx908 has no bf16 instruction the alternate
/// kernels could use, and gfx94x / RDNA matrix instructions keep subnormals.
fn fp16_alt_impl_applies(target: Option<&GfxTarget>) -> bool {
    target.is_some_and(|t| t.processor == "gfx90a")
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
    fn the_alternate_f16_kernels_are_for_gfx90a_only() {
        let t = |s: &str| Some(GfxTarget::parse(s));
        assert!(fp16_alt_impl_applies(t("gfx90a:sramecc+:xnack-").as_ref()));
        assert!(fp16_alt_impl_applies(t("gfx90a").as_ref()));
        for other in [
            "gfx908:sramecc+:xnack-",
            "gfx942:sramecc+:xnack-",
            "gfx1100",
            "gfx90",
        ] {
            assert!(!fp16_alt_impl_applies(t(other).as_ref()), "{other}");
        }
        assert!(!fp16_alt_impl_applies(None));
    }

    #[test]
    fn handle_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Handle>();
    }
}
