//! Modules (loaded code objects) and the kernels in them.

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::device::Device;
use crate::driver::{FunctionAttributes, Platform, RawFunction, RawModule};
use crate::error::{Error, Result, ResultExt};

/// A loaded code object (AMD) or cubin (NVIDIA).
///
/// Cheap to clone. Functions taken from it keep it loaded; when the last handle goes, the device
/// is synchronized before the module is unloaded, so no queued launch can outlive its code.
#[derive(Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    device: Device,
    raw: RawModule,
}

impl Module {
    pub(crate) fn load(device: Device, image: &[u8]) -> Result<Module> {
        if image.is_empty() {
            return Err(Error::invalid(
                "Module::load",
                "the code-object image is empty",
            ));
        }
        device.make_current()?;
        let driver = device.driver();
        let raw = driver
            .module_load_data(image)
            .inspect_err(|_| {
                // The failure is reported as this Err, and callers recover from it (rocm-kernels
                // falls back from an ahead-of-time code object to JIT compilation): HIP 7 must
                // not keep reporting it to whoever reads the thread's last error next.
                driver.clear_last_error();
            })
            .context(|| {
                format!(
                    "loading a {}-byte module on device {}",
                    image.len(),
                    device.ordinal()
                )
            })?;
        Ok(Module {
            inner: Arc::new(ModuleInner { device, raw }),
        })
    }

    /// The device the module is loaded on.
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// The kernel called `name` (its `extern "C"` symbol name).
    pub fn function(&self, name: &str) -> Result<Function> {
        let cname = CString::new(name)
            .map_err(|_| Error::invalid("Module::function", "the name contains a NUL byte"))?;
        let device = self.inner.device;
        device.make_current()?;
        // SAFETY: the module is alive while `self` is.
        let raw = unsafe { device.driver().module_get_function(self.inner.raw, &cname) }
            .context(|| format!("looking up kernel `{name}`"))?;
        // SAFETY: `raw` was just obtained from the live module.
        let attributes = unsafe { device.driver().function_attributes(raw) }
            .context(|| format!("reading the attributes of kernel `{name}`"))?;
        Ok(Function(Arc::new(FunctionInner {
            module: self.inner.clone(),
            raw,
            name: name.into(),
            attributes,
            dynamic_shared: AtomicU32::new(0),
            dynamic_shared_lock: Mutex::new(()),
        })))
    }
}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        if self.device.make_current().is_err() {
            return;
        }
        let driver = self.device.driver();
        // SAFETY: no `Function` of this module is left (they hold the Arc); synchronizing the
        // device first guarantees no queued launch still runs its code.
        unsafe {
            if driver.device_synchronize().is_ok() {
                let _ = driver.module_unload(self.raw);
            }
        }
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("device", &self.inner.device.ordinal())
            .finish()
    }
}

/// A kernel in a loaded [`Module`]. Keeps its module loaded. Cheap to clone: one reference
/// count (the kernel caches hand out a clone per launch).
#[derive(Clone)]
pub struct Function(Arc<FunctionInner>);

/// What the clones of a [`Function`] share.
struct FunctionInner {
    module: Arc<ModuleInner>,
    raw: RawFunction,
    name: Box<str>,
    attributes: FunctionAttributes,
    /// The dynamic shared memory launches may ask for, as granted.
    dynamic_shared: AtomicU32,
    /// Serialises grants, so that the driver's setting only grows and equals `dynamic_shared`.
    dynamic_shared_lock: Mutex<()>,
}

impl Function {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The device the kernel's module is loaded on.
    pub fn device(&self) -> Device {
        self.0.module.device
    }

    /// Resource attributes (registers, shared and local memory, max threads per block).
    pub fn attributes(&self) -> &FunctionAttributes {
        &self.0.attributes
    }

    /// Lets launches of this kernel ask for up to `bytes` of dynamic shared memory: NVIDIA needs
    /// this opt-in above 48 KiB per block (up to the device's per-block maximum, else an error);
    /// on AMD, where a workgroup may use the device's LDS without one, it only checks `bytes`
    /// against that limit. Cheap once granted (one atomic load).
    pub fn allow_dynamic_shared(&self, bytes: u32) -> Result<()> {
        if self.0.dynamic_shared.load(Ordering::Acquire) >= bytes {
            return Ok(());
        }
        let _grant = self
            .0
            .dynamic_shared_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if self.0.dynamic_shared.load(Ordering::Acquire) >= bytes {
            return Ok(());
        }
        let device = self.0.module.device;
        let limit = device.properties().shared_memory_per_block;
        if device.platform() == Platform::Amd
            && bytes as usize + self.0.attributes.shared_size_bytes > limit
        {
            return Err(Error::invalid(
                "Function::allow_dynamic_shared",
                format!(
                    "`{}`: {bytes} bytes of dynamic shared memory and {} static exceed the \
                     device's {limit} per block",
                    self.0.name, self.0.attributes.shared_size_bytes
                ),
            ));
        }
        device.make_current()?;
        // SAFETY: the function's module is alive while `self` is.
        unsafe {
            device
                .driver()
                .function_allow_dynamic_shared(self.0.raw, bytes)
        }
        .context(|| {
            format!(
                "allowing {bytes} bytes of shared memory for `{}`",
                self.0.name
            )
        })?;
        self.0.dynamic_shared.store(bytes, Ordering::Release);
        Ok(())
    }

    /// The dynamic shared memory granted by [`Function::allow_dynamic_shared`] (0 if never).
    pub(crate) fn dynamic_shared_allowed(&self) -> usize {
        self.0.dynamic_shared.load(Ordering::Acquire) as usize
    }

    pub(crate) fn raw(&self) -> RawFunction {
        self.0.raw
    }
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.0.name)
            .field("attributes", &self.0.attributes)
            .finish()
    }
}
