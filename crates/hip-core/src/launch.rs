//! Kernel launch: configuration, argument packing and the launch builder.
//!
//! ```no_run
//! # use hip_core::*;
//! # fn f(function: &Function, stream: &Stream, x: &mut DeviceBuffer<f32>) -> Result<()> {
//! let n = x.len() as u32;
//! // SAFETY: the kernel's parameters are (float*, unsigned) and it touches x[0..n) only.
//! unsafe {
//!     function
//!         .builder(stream, LaunchConfig::for_elements(n as usize, 256))
//!         .arg(x)
//!         .arg(n)
//!         .launch()
//! }
//! # }
//! ```

use std::ffi::c_void;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};

use crate::error::{Error, Result, ResultExt};
use crate::memory::{DeviceBuffer, DeviceRepr, DeviceSlice, DeviceSliceMut};
use crate::module::Function;
use crate::stream::Stream;

/// Grid, block and dynamic shared memory of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in the grid (x, y, z).
    pub grid: [u32; 3],
    /// Threads in a block (x, y, z).
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// One thread per element: `block_size` threads per block and enough blocks for `n`
    /// elements (at least one block, so that `n == 0` is still a valid configuration).
    pub fn for_elements(n: usize, block_size: u32) -> LaunchConfig {
        let block_size = block_size.max(1);
        let blocks = n.div_ceil(block_size as usize).clamp(1, u32::MAX as usize) as u32;
        LaunchConfig {
            grid: [blocks, 1, 1],
            block: [block_size, 1, 1],
            shared_mem_bytes: 0,
        }
    }

    /// Total threads per block.
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&b| b as u64).product()
    }
}

/// Packed kernel arguments: each value stored 8-byte aligned in one buffer, and an array of
/// pointers to them built at launch time (what `hipModuleLaunchKernel` takes as `kernelParams`).
#[derive(Debug, Default, Clone)]
pub struct KernelArgs {
    words: Vec<u64>,
    spans: Vec<(usize, usize)>,
}

impl KernelArgs {
    /// No arguments yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a plain-data value.
    pub fn push<T: DeviceRepr>(&mut self, value: T) {
        // SAFETY: `DeviceRepr` types have no padding and align to at most 8 bytes.
        unsafe { self.push_raw(value) }.expect("DeviceRepr types are at most 8-byte aligned")
    }

    /// Appends any `Copy` value, e.g. a `#[repr(C)]` struct the kernel takes by value.
    /// Fails when its alignment exceeds 8 bytes.
    ///
    /// # Safety
    /// `T` must have no padding bytes (they would be read uninitialised), and the kernel must
    /// take a parameter of exactly `T`'s layout at this position.
    pub unsafe fn push_raw<T: Copy>(&mut self, value: T) -> Result<()> {
        if align_of::<T>() > align_of::<u64>() {
            return Err(Error::invalid(
                "KernelArgs::push_raw",
                format!(
                    "{} is aligned to {} bytes; at most 8 are supported",
                    std::any::type_name::<T>(),
                    align_of::<T>()
                ),
            ));
        }
        let start = self.words.len();
        let n_words = size_of::<T>().div_ceil(8).max(1);
        self.words.resize(start + n_words, 0);
        // SAFETY: the destination holds `n_words * 8 >= size_of::<T>()` bytes, 8-byte aligned.
        unsafe { self.words.as_mut_ptr().add(start).cast::<T>().write(value) };
        self.spans.push((start, size_of::<T>()));
        Ok(())
    }

    /// Number of arguments.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// `true` when there is no argument.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The bytes of argument `i`.
    pub fn bytes(&self, i: usize) -> Option<&[u8]> {
        let &(start, len) = self.spans.get(i)?;
        // SAFETY: argument `i` occupies `len` initialised bytes from word `start`.
        Some(unsafe {
            std::slice::from_raw_parts(self.words.as_ptr().add(start).cast::<u8>(), len)
        })
    }

    /// The `kernelParams` array: one pointer per argument into this buffer. Valid while `self`
    /// is neither moved nor modified.
    pub fn param_pointers(&mut self) -> Vec<*mut c_void> {
        let base = self.words.as_mut_ptr();
        self.spans
            .iter()
            // SAFETY: every span starts inside `words`.
            .map(|&(start, _)| unsafe { base.add(start) }.cast::<c_void>())
            .collect()
    }
}

/// Something that can be passed to a kernel: plain values by value, device buffers and views as
/// pointers to their first element.
pub trait KernelArg {
    /// Appends the argument; `stream` is the launch's stream (buffers record their use on it).
    fn push_arg(&self, args: &mut KernelArgs, stream: &Stream) -> Result<()>;
}

impl<T: DeviceRepr> KernelArg for T {
    fn push_arg(&self, args: &mut KernelArgs, _stream: &Stream) -> Result<()> {
        args.push(*self);
        Ok(())
    }
}

fn push_buffer_ptr<T: DeviceRepr>(
    buf: &DeviceBuffer<T>,
    ptr: crate::DevicePtr,
    args: &mut KernelArgs,
    stream: &Stream,
) -> Result<()> {
    if buf.device() != stream.device() {
        return Err(Error::invalid(
            "kernel launch",
            format!(
                "a buffer on device {} was passed to a launch on device {}",
                buf.device().ordinal(),
                stream.device().ordinal()
            ),
        ));
    }
    buf.record_stream(stream);
    args.push(ptr.0);
    Ok(())
}

impl<T: DeviceRepr> KernelArg for &DeviceBuffer<T> {
    fn push_arg(&self, args: &mut KernelArgs, stream: &Stream) -> Result<()> {
        push_buffer_ptr(self, self.device_ptr(), args, stream)
    }
}

impl<T: DeviceRepr> KernelArg for &mut DeviceBuffer<T> {
    fn push_arg(&self, args: &mut KernelArgs, stream: &Stream) -> Result<()> {
        push_buffer_ptr(self, self.device_ptr(), args, stream)
    }
}

impl<T: DeviceRepr> KernelArg for DeviceSlice<'_, T> {
    fn push_arg(&self, args: &mut KernelArgs, stream: &Stream) -> Result<()> {
        push_buffer_ptr(self.buffer(), self.device_ptr(), args, stream)
    }
}

impl<T: DeviceRepr> KernelArg for &DeviceSlice<'_, T> {
    fn push_arg(&self, args: &mut KernelArgs, stream: &Stream) -> Result<()> {
        (**self).push_arg(args, stream)
    }
}

impl<T: DeviceRepr> KernelArg for &mut DeviceSliceMut<'_, T> {
    fn push_arg(&self, args: &mut KernelArgs, stream: &Stream) -> Result<()> {
        push_buffer_ptr(self.as_slice().buffer(), self.device_ptr(), args, stream)
    }
}

/// A null device pointer argument (e.g. "no layout info: all operands contiguous").
#[derive(Debug, Clone, Copy)]
pub struct NullPtr;

impl KernelArg for NullPtr {
    fn push_arg(&self, args: &mut KernelArgs, _stream: &Stream) -> Result<()> {
        args.push(0u64);
        Ok(())
    }
}

/// Builds and performs one launch. Borrows every buffer argument until the launch is queued.
#[must_use = "a launch builder does nothing until `launch` is called"]
pub struct LaunchBuilder<'a> {
    function: &'a Function,
    stream: &'a Stream,
    config: LaunchConfig,
    args: KernelArgs,
    overlap: bool,
    error: Option<Error>,
    _borrows: PhantomData<&'a ()>,
}

impl Function {
    /// Starts a launch of this kernel on `stream`.
    pub fn builder<'a>(&'a self, stream: &'a Stream, config: LaunchConfig) -> LaunchBuilder<'a> {
        LaunchBuilder {
            function: self,
            stream,
            config,
            args: KernelArgs::new(),
            overlap: false,
            error: None,
            _borrows: PhantomData,
        }
    }
}

impl<'a> LaunchBuilder<'a> {
    /// Appends the next kernel argument.
    pub fn arg<A: KernelArg + 'a>(mut self, arg: A) -> Self {
        if self.error.is_none() {
            if let Err(e) = arg.push_arg(&mut self.args, self.stream) {
                self.error = Some(e);
            }
        }
        self
    }

    /// Appends already-packed arguments.
    pub fn args(mut self, args: &KernelArgs) -> Self {
        for i in 0..args.len() {
            let start = self.args.words.len();
            let (s, len) = args.spans[i];
            let n = len.div_ceil(8).max(1);
            self.args.words.extend_from_slice(&args.words[s..s + n]);
            self.args.spans.push((start, len));
        }
        self
    }

    /// Lets the kernel start while the previous kernel on the stream is still running (an
    /// *overlapped launch*), so that its blocks are resident, and can load what does not depend
    /// on earlier work, before that kernel ends. Only for kernels written for it: each thread
    /// waits for the previous kernels (`rk_wait_previous` in rocm-kernels' prelude, PTX
    /// `griddepcontrol.wait`) before it writes memory or reads memory that earlier work writes
    /// (see [`LaunchBuilder::launch`]). Honoured on NVIDIA devices of compute capability 9.0 and
    /// later (programmatic dependent launch) while [`overlapped_launches`] is on; elsewhere the
    /// launch is ordinary.
    pub fn overlap_previous(mut self, on: bool) -> Self {
        self.overlap = on;
        self
    }

    /// Checks the configuration against the device's and the kernel's limits.
    pub fn validate(&self) -> Result<()> {
        let device = self.stream.device();
        if self.function.device() != device {
            return Err(Error::invalid(
                "kernel launch",
                format!(
                    "kernel `{}` is loaded on device {} but the stream belongs to device {}",
                    self.function.name(),
                    self.function.device().ordinal(),
                    device.ordinal()
                ),
            ));
        }
        validate_config(
            &self.config,
            device.properties(),
            self.function.attributes(),
            self.function.dynamic_shared_allowed(),
            self.function.name(),
        )
    }

    /// Queues the launch.
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, order and type; the kernel
    /// must access only memory inside the buffers it is given (no out-of-bounds reads or writes
    /// for this grid); buffers it writes must not be accessed concurrently by other streams or
    /// the host until the kernel has finished (order such accesses with events or stream waits).
    /// With [`LaunchBuilder::overlap_previous`], every thread of the kernel waits for the
    /// previous kernels before it writes memory or reads memory that the kernel just before it
    /// on the stream may write.
    pub unsafe fn launch(mut self) -> Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.validate()?;
        LAUNCH_COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let profiled = crate::profile::is_on().then(|| crate::profile::before_launch(self.stream));
        let device = self.stream.device();
        device.make_current()?;
        let overlap = self.overlap && overlapped_launches() && device.can_overlap_launches();
        let mut params = self.args.param_pointers();
        // SAFETY: the function and stream are alive; `params` points into `self.args`, which is
        // not touched until the call returns (the runtime copies the values at launch); the
        // caller guarantees the argument types and memory accesses.
        let launched = unsafe {
            device.driver().launch_kernel(
                self.function.raw(),
                self.config.grid,
                self.config.block,
                self.config.shared_mem_bytes,
                self.stream.raw(),
                params.as_mut_ptr(),
                overlap,
            )
        }
        .context(|| {
            format!(
                "launching kernel `{}` with {:?}",
                self.function.name(),
                self.config
            )
        });
        if let Some(start) = profiled {
            crate::profile::after_launch(self.function.name(), self.stream, start);
        }
        launched
    }
}

/// Checks a launch configuration against device and kernel limits.
/// `dynamic_shared_allowed` is what [`Function::allow_dynamic_shared`] granted the kernel (0 if
/// never called): a launch may exceed the device's default per-block limit up to it.
pub(crate) fn validate_config(
    config: &LaunchConfig,
    props: &crate::DeviceProperties,
    attrs: &crate::FunctionAttributes,
    dynamic_shared_allowed: usize,
    name: &str,
) -> Result<()> {
    let fail = |reason: String| {
        Err(Error::invalid(
            "kernel launch",
            format!("`{name}`: {reason}"),
        ))
    };
    for (axis, (&g, &max)) in ["x", "y", "z"]
        .iter()
        .zip(config.grid.iter().zip(&props.max_grid_dim))
    {
        if g == 0 || (max > 0 && g > max) {
            return fail(format!("grid.{axis} = {g} is outside 1..={max}"));
        }
    }
    for (axis, (&b, &max)) in ["x", "y", "z"]
        .iter()
        .zip(config.block.iter().zip(&props.max_block_dim))
    {
        if b == 0 || (max > 0 && b > max) {
            return fail(format!("block.{axis} = {b} is outside 1..={max}"));
        }
    }
    let threads = config.threads_per_block();
    let mut max_threads = props.max_threads_per_block as u64;
    if attrs.max_threads_per_block > 0 {
        max_threads = max_threads.min(attrs.max_threads_per_block as u64);
    }
    if max_threads > 0 && threads > max_threads {
        return fail(format!(
            "{threads} threads per block exceed the limit of {max_threads}"
        ));
    }
    let shared = config.shared_mem_bytes as usize + attrs.shared_size_bytes;
    let limit = props
        .shared_memory_per_block
        .max(dynamic_shared_allowed + attrs.shared_size_bytes);
    if props.shared_memory_per_block > 0 && shared > limit {
        return fail(format!(
            "{shared} bytes of shared memory per block exceed the limit of {limit}"
        ));
    }
    Ok(())
}

/// Whether launches asking for [`LaunchBuilder::overlap_previous`] may overlap: 0 unset (read
/// `HIP_CORE_OVERLAPPED_LAUNCHES` on first use), 1 off, 2 on.
static OVERLAPPED_LAUNCHES: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether kernels launched with [`LaunchBuilder::overlap_previous`] may start before the
/// previous kernel ends (where the device supports it). On unless the environment variable
/// `HIP_CORE_OVERLAPPED_LAUNCHES` is `0`, `off` or `false`, or [`set_overlapped_launches`]
/// turned it off.
pub fn overlapped_launches() -> bool {
    use std::sync::atomic::Ordering;
    match OVERLAPPED_LAUNCHES.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let on = !matches!(
                std::env::var("HIP_CORE_OVERLAPPED_LAUNCHES")
                    .unwrap_or_default()
                    .to_ascii_lowercase()
                    .as_str(),
                "0" | "off" | "false"
            );
            // A concurrent `set_overlapped_launches` wins over the environment.
            let _ = OVERLAPPED_LAUNCHES.compare_exchange(
                0,
                if on { 2 } else { 1 },
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            OVERLAPPED_LAUNCHES.load(Ordering::Relaxed) == 2
        }
    }
}

/// Turns overlapped launches on or off for the whole process (for measuring what they give,
/// or to rule them out while debugging); launches queued before the call keep their setting.
pub fn set_overlapped_launches(on: bool) {
    OVERLAPPED_LAUNCHES.store(if on { 2 } else { 1 }, std::sync::atomic::Ordering::Relaxed);
}

/// Kernel launches queued through [`LaunchBuilder::launch`] by this process.
static LAUNCH_COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The number of kernel launches this process has queued through hip-core (all devices and
/// threads; vendor libraries' own launches, e.g. inside a rocBLAS GEMM, are not counted). For
/// measuring launches per operation: read it before and after.
pub fn launch_count() -> u64 {
    LAUNCH_COUNT.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DeviceProperties, FunctionAttributes};

    #[test]
    fn arguments_are_packed_8_byte_aligned_in_order() {
        let mut a = KernelArgs::new();
        a.push(7u8);
        a.push(-2i32);
        a.push(1.5f64);
        a.push(half::f16::from_f32(2.0));
        a.push(0xdead_beef_0000_0001u64);
        assert_eq!(a.len(), 5);
        assert_eq!(a.bytes(0).unwrap(), &[7]);
        assert_eq!(a.bytes(1).unwrap(), &(-2i32).to_ne_bytes());
        assert_eq!(a.bytes(2).unwrap(), &1.5f64.to_ne_bytes());
        assert_eq!(
            a.bytes(3).unwrap(),
            &half::f16::from_f32(2.0).to_bits().to_ne_bytes()
        );
        assert_eq!(a.bytes(4).unwrap(), &0xdead_beef_0000_0001u64.to_ne_bytes());
        let ptrs = a.param_pointers();
        assert_eq!(ptrs.len(), 5);
        for (i, p) in ptrs.iter().enumerate() {
            assert_eq!(*p as usize % 8, 0, "argument {i} is not 8-byte aligned");
            // SAFETY: each pointer addresses the argument's bytes inside `a`.
            let got =
                unsafe { std::slice::from_raw_parts(*p as *const u8, a.bytes(i).unwrap().len()) };
            assert_eq!(got, a.bytes(i).unwrap());
        }
    }

    #[test]
    fn structs_by_value_and_over_aligned_types() {
        #[derive(Clone, Copy)]
        #[repr(C)]
        struct Dims {
            a: u32,
            b: u32,
            c: u64,
        }
        let mut a = KernelArgs::new();
        // SAFETY: `Dims` has no padding.
        unsafe { a.push_raw(Dims { a: 1, b: 2, c: 3 }) }.unwrap();
        a.push(9u32);
        assert_eq!(a.bytes(0).unwrap().len(), 16);
        assert_eq!(&a.bytes(0).unwrap()[8..16], &3u64.to_ne_bytes());
        assert_eq!(a.bytes(1).unwrap(), &9u32.to_ne_bytes());
        #[derive(Clone, Copy)]
        #[repr(C, align(16))]
        struct Wide([u8; 16]);
        // SAFETY: no padding; the call must fail before anything is written.
        assert!(unsafe { a.push_raw(Wide([0; 16])) }.is_err());
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn overlapped_launches_follow_the_switch() {
        let before = overlapped_launches();
        set_overlapped_launches(false);
        assert!(!overlapped_launches());
        set_overlapped_launches(true);
        assert!(overlapped_launches());
        set_overlapped_launches(before);
    }

    #[test]
    fn launch_config_for_elements() {
        let c = LaunchConfig::for_elements(1000, 256);
        assert_eq!(c.grid, [4, 1, 1]);
        assert_eq!(c.block, [256, 1, 1]);
        assert_eq!(LaunchConfig::for_elements(0, 256).grid, [1, 1, 1]);
        assert_eq!(LaunchConfig::for_elements(256, 256).grid, [1, 1, 1]);
    }

    fn props() -> DeviceProperties {
        DeviceProperties {
            name: "test".into(),
            arch_name: "gfx942".into(),
            compute_capability: (9, 4),
            warp_size: 64,
            multiprocessor_count: 304,
            total_memory: 1 << 30,
            max_threads_per_block: 1024,
            max_block_dim: [1024, 1024, 1024],
            max_grid_dim: [u32::MAX, 65535, 65535],
            shared_memory_per_block: 65536,
            pci_bus_id: 0,
        }
    }

    #[test]
    fn invalid_configurations_are_rejected_before_the_runtime() {
        let attrs = FunctionAttributes {
            max_threads_per_block: 256,
            ..Default::default()
        };
        let ok = LaunchConfig::for_elements(10, 256);
        assert!(validate_config(&ok, &props(), &attrs, 0, "k").is_ok());
        let too_many = LaunchConfig::for_elements(10, 512);
        let e = validate_config(&too_many, &props(), &attrs, 0, "k")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("512 threads per block exceed the limit of 256"),
            "{e}"
        );
        let mut zero = ok;
        zero.grid = [0, 1, 1];
        assert!(validate_config(&zero, &props(), &attrs, 0, "k").is_err());
        let mut shared = ok;
        shared.shared_mem_bytes = 70000;
        assert!(validate_config(&shared, &props(), &attrs, 0, "k").is_err());
        // Allowed beyond the default limit by `Function::allow_dynamic_shared`.
        assert!(validate_config(&shared, &props(), &attrs, 70000, "k").is_ok());
        assert!(validate_config(&shared, &props(), &attrs, 69999, "k").is_err());
        let mut grid_y = ok;
        grid_y.grid = [1, 70000, 1];
        assert!(validate_config(&grid_y, &props(), &attrs, 0, "k").is_err());
    }
}
