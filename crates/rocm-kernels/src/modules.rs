//! Kernel modules: sources, and loading them onto a device.
//!
//! Every `kernels/<name>.hip` is a module; its full source is `kernels/prelude.h` followed by the
//! file. Modules are loaded once per device and kept for the process.
//!
//! Loading currently JIT-compiles through hip-core's run-time compilation and its disk cache
//! (hipRTC on AMD, NVRTC on NVIDIA). Ahead-of-time bundles are being added.

use std::collections::HashMap;
use std::sync::OnceLock;

use hip_core::{Device, Function, Module};
use parking_lot::Mutex;

use crate::error::{Error, Result};

include!(concat!(env!("OUT_DIR"), "/kernel_sources.rs"));

/// The prelude prepended to every module.
pub const PRELUDE: &str = include_str!("../kernels/prelude.h");

/// The full source of module `name` (prelude + module), or `None` if there is no such module.
pub fn full_source(name: &str) -> Option<String> {
    MODULE_SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, src)| format!("{PRELUDE}\n#line 1 \"{name}.hip\"\n{src}"))
}

/// Compiler options every module is built with.
pub fn compile_options() -> Vec<String> {
    Vec::new()
}

type ModuleKey = (usize, &'static str);

fn loaded() -> &'static Mutex<HashMap<ModuleKey, Module>> {
    static LOADED: OnceLock<Mutex<HashMap<ModuleKey, Module>>> = OnceLock::new();
    LOADED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Module `name` loaded on `device` (loaded on first use, then cached).
pub fn module(device: &Device, name: &str) -> Result<Module> {
    let (static_name, _) = MODULE_SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| Error::Unsupported {
            op: format!("kernel module `{name}`"),
            dtype: "-".into(),
            reason: "no such module in rocm-kernels".into(),
        })?;
    let key = (device.ordinal(), *static_name);
    if let Some(m) = loaded().lock().get(&key) {
        return Ok(m.clone());
    }
    // Compile outside the lock: another thread may load another module meanwhile.
    let source = full_source(name).unwrap_or_default();
    let image = hip_core::rtc::compile(name, &source, device.arch(), &compile_options())?;
    let m = device.load_module(&image.image)?;
    Ok(loaded().lock().entry(key).or_insert(m).clone())
}

type FunctionKey = (usize, String);

fn functions() -> &'static Mutex<HashMap<FunctionKey, Function>> {
    static FUNCTIONS: OnceLock<Mutex<HashMap<FunctionKey, Function>>> = OnceLock::new();
    FUNCTIONS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Kernel `kernel` of module `module_name` on `device` (looked up once, then cached; kernel
/// names are unique across modules).
pub fn function(device: &Device, module_name: &str, kernel: &str) -> Result<Function> {
    let key = (device.ordinal(), kernel.to_string());
    if let Some(f) = functions().lock().get(&key) {
        return Ok(f.clone());
    }
    let f = module(device, module_name)?.function(kernel)?;
    Ok(functions().lock().entry(key).or_insert(f).clone())
}
