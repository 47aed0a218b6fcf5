//! Kernel modules: sources, and loading them onto a device.
//!
//! Every `kernels/<name>.hip` is a module; its full source is `kernels/prelude.h` followed by the
//! file ([`full_source`]). Modules are loaded once per device and kept for the process.
//!
//! Loading ([`module`]):
//!
//! * on `amd`, when the library embeds a bundle for the module (`aot` feature, on by default;
//!   the bundles are committed gzip-compressed, `bundles/<name>.hipfb.gz`, built by
//!   `cargo xtask build-kernels`, and decompressed once, on first use), the manifest's hash of the
//!   source it was built from equals the hash of the current full source, and the bundle holds a
//!   code object for the device's `gcnArchName` (target features honoured, see
//!   [`crate::bundle::Bundle::select`]): that code object is loaded, no compiler involved;
//! * otherwise, and always on `nvidia`, the full source is compiled at run time through hip-core
//!   (hipRTC / NVRTC) and its on-disk cache.
//!
//! [`load_path`] says which way a module was loaded, and why it was JIT-compiled. A module
//! that is being compiled when another thread needs it is waited for, never compiled twice.
//! `ROCM_KERNELS_JIT=1` forces run-time compilation (to compare the two, or to bypass a bad
//! bundle).
//!
//! Where a kernel is JIT-compiled, [`function`] compiles only the kernel's one-dtype variant of
//! its module ([`crate::jit_variant`]): an f32 model's first run compiles the f32 kernels, not
//! those of nine element types. A kernel its variant lacks, or a variant that fails to compile,
//! falls back to the whole module. `ROCM_KERNELS_JIT_WHOLE_MODULES=1` compiles whole modules
//! (to compare first-use times). The first request of a float dtype's variant on a device
//! compiles that dtype's variants of the modules nearly every model uses ([`PREFETCH_MODULES`])
//! in parallel with the requested one, so that a model's first forward pass does not wait for
//! them one after another; `ROCM_KERNELS_JIT_PREFETCH=0` turns that off.

use std::collections::HashMap;
use std::fmt;
use std::sync::OnceLock;

use hip_core::{Device, Function, Module, Platform};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::bundle;
use crate::error::{Error, Result};

include!(concat!(env!("OUT_DIR"), "/kernel_sources.rs"));

/// A committed ahead-of-time bundle embedded in the library.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedBundle {
    /// The module's name.
    pub module: &'static str,
    /// The hex SHA-256 of the full source the bundle was built from (from the manifest).
    pub source_sha256: &'static str,
    /// The clang offload bundle, gzip-compressed (`bundles/<name>.hipfb.gz`); see
    /// [`EmbeddedBundle::bytes`] for the bundle itself.
    pub gz: &'static [u8],
}

impl EmbeddedBundle {
    /// The (uncompressed) clang offload bundle: decompressed on the first call, then cached for
    /// the process. An error if the embedded stream is not valid gzip.
    pub fn bytes(&self) -> std::result::Result<&'static [u8], String> {
        static CACHE: OnceLock<Mutex<HashMap<&'static str, &'static [u8]>>> = OnceLock::new();
        let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
        // Held while decompressing, so that each bundle is decompressed once.
        let mut cache = cache.lock();
        if let Some(bytes) = cache.get(self.module) {
            return Ok(bytes);
        }
        let bytes: &'static [u8] = gunzip(self.gz)?.leak();
        cache.insert(self.module, bytes);
        Ok(bytes)
    }
}

/// Decompresses a gzip stream (one member, CRC and length checked).
#[cfg(any(feature = "aot", test))]
fn gunzip(gz: &[u8]) -> std::result::Result<Vec<u8>, String> {
    use std::io::Read as _;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut out)
        .map_err(|e| format!("decompressing: {e}"))?;
    Ok(out)
}

/// Without the `aot` feature no bundle is embedded, so there is nothing to decompress.
#[cfg(not(any(feature = "aot", test)))]
fn gunzip(_gz: &[u8]) -> std::result::Result<Vec<u8>, String> {
    Err("built without the `aot` feature (no gzip decoder)".into())
}

include!(concat!(env!("OUT_DIR"), "/kernel_bundles.rs"));

/// The prelude prepended to every module.
pub const PRELUDE: &str = include_str!("../kernels/prelude.h");

/// The environment variable that, set to `1`, makes every module JIT-compile.
pub const FORCE_JIT_VAR: &str = "ROCM_KERNELS_JIT";

/// The environment variable that, set to `1`, makes run-time compilation compile whole modules
/// instead of one-dtype variants.
pub const WHOLE_MODULES_VAR: &str = "ROCM_KERNELS_JIT_WHOLE_MODULES";

/// The full source of module `name` (prelude + module), or `None` if there is no such module.
pub fn full_source(name: &str) -> Option<String> {
    MODULE_SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, src)| bundle::full_source(PRELUDE, name, src))
}

/// The full source (prelude + module) of module `name`'s one-dtype variant for `dtype` (see
/// [`crate::jit_variant`]), or `None` if there is no such module.
pub fn variant_full_source(name: &str, dtype: &str) -> Option<String> {
    MODULE_SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, src)| {
            bundle::full_source(
                PRELUDE,
                name,
                &crate::jit_variant::variant_source(src, dtype),
            )
        })
}

/// Hex SHA-256 of module `name`'s [`full_source`] (what the bundle manifest records).
pub fn source_sha256(name: &str) -> Option<String> {
    full_source(name).map(|s| hex(&Sha256::digest(s.as_bytes())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compiler options every module is built with.
pub fn compile_options() -> Vec<String> {
    Vec::new()
}

/// The embedded bundle of module `name`, if any.
pub fn embedded_bundle(name: &str) -> Option<&'static EmbeddedBundle> {
    AOT_BUNDLES.iter().find(|b| b.module == name)
}

/// How a module was loaded onto a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadPath {
    /// The code object for `target` (an entry of the embedded bundle) was loaded.
    Aot {
        /// The entry's target id, e.g. `gfx942` or `gfx90a:xnack-`.
        target: String,
    },
    /// The full source was compiled at run time (hipRTC / NVRTC, through the disk cache).
    Jit {
        /// Why no ahead-of-time code object was used.
        reason: JitReason,
    },
}

/// Why a module was JIT-compiled rather than loaded from its bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JitReason {
    /// The device is not an AMD GPU (bundles hold AMDGPU code objects only).
    NotAmd,
    /// `ROCM_KERNELS_JIT=1`.
    Forced,
    /// The library embeds no bundle for the module (none committed, or the `aot` feature off).
    NotEmbedded,
    /// The bundle was built from another source than the current one (rebuild it with
    /// `cargo xtask build-kernels`).
    Stale {
        /// The hash the manifest records.
        bundle: String,
        /// The hash of the current full source.
        current: String,
    },
    /// The bundle holds no code object for the device.
    NoMatchingTarget {
        /// The device's `gcnArchName`.
        device_arch: String,
        /// The bundle's targets.
        available: Vec<String>,
    },
    /// The bundle or its code object is malformed.
    BadBundle(String),
    /// The runtime refused the code object.
    AotLoadFailed(String),
}

impl fmt::Display for JitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JitReason::NotAmd => write!(f, "not an AMD device"),
            JitReason::Forced => write!(f, "{FORCE_JIT_VAR}=1"),
            JitReason::NotEmbedded => write!(f, "no embedded bundle"),
            JitReason::Stale { bundle, current } => write!(
                f,
                "bundle built from another source (manifest {bundle}, current {current}); \
                 run `cargo xtask build-kernels`"
            ),
            JitReason::NoMatchingTarget {
                device_arch,
                available,
            } => write!(
                f,
                "no code object for {device_arch} (bundle has {})",
                available.join(", ")
            ),
            JitReason::BadBundle(e) => write!(f, "bad bundle: {e}"),
            JitReason::AotLoadFailed(e) => write!(f, "loading the code object failed: {e}"),
        }
    }
}

/// The ahead-of-time code object of module `name` for a device whose `gcnArchName` is
/// `device_arch`, with the bundle entry's target id; or why there is none. Needs no device.
pub fn aot_code_object(
    name: &str,
    device_arch: &str,
) -> std::result::Result<(String, &'static [u8]), JitReason> {
    let embedded = embedded_bundle(name).ok_or(JitReason::NotEmbedded)?;
    let current = source_sha256(name).ok_or(JitReason::NotEmbedded)?;
    if current != embedded.source_sha256 {
        return Err(JitReason::Stale {
            bundle: embedded.source_sha256.to_string(),
            current,
        });
    }
    let bytes = embedded
        .bytes()
        .map_err(|e| JitReason::BadBundle(format!("{name}: {e}")))?;
    let parsed = bundle::parse(bytes).map_err(|e| JitReason::BadBundle(format!("{name}: {e}")))?;
    let (target, entry) =
        parsed
            .select(device_arch)
            .ok_or_else(|| JitReason::NoMatchingTarget {
                device_arch: device_arch.to_string(),
                available: parsed.targets(),
            })?;
    if !bundle::is_amdgpu_elf(entry.data) {
        return Err(JitReason::BadBundle(format!(
            "{name}: entry `{}` is not an AMDGPU ELF code object",
            entry.id
        )));
    }
    Ok((target.to_string(), entry.data))
}

/// A module load: device ordinal, module name, and the dtype of a one-dtype variant (`None`:
/// the whole module).
type ModuleKey = (usize, &'static str, Option<&'static str>);

/// One module's load on one device: initialised once; every caller that needs the module while
/// it is being compiled waits for that one compilation instead of starting another.
type Slot = std::sync::Arc<OnceLock<Result<(Module, LoadPath)>>>;

fn slots() -> &'static Mutex<HashMap<ModuleKey, Slot>> {
    static SLOTS: OnceLock<Mutex<HashMap<ModuleKey, Slot>>> = OnceLock::new();
    SLOTS.get_or_init(|| Mutex::new(HashMap::new()))
}

fn static_name(name: &str) -> Result<&'static str> {
    MODULE_SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(n, _)| *n)
        .ok_or_else(|| Error::Unsupported {
            op: format!("kernel module `{name}`"),
            dtype: "-".into(),
            reason: "no such module in rocm-kernels".into(),
        })
}

/// Module `name` loaded on `device` (loaded on first use, then cached): its ahead-of-time code
/// object where there is a fresh one for the device, else JIT-compiled (see the module docs).
/// Threads that need a module while it is being compiled wait for that one compilation.
pub fn module(device: &Device, name: &str) -> Result<Module> {
    let name = static_name(name)?;
    Ok(load_once(device, name, None)?.0)
}

/// Loads `name` (or its `variant`) on `device` once (concurrent callers wait for the one load).
/// A failure is not kept: the next call tries again.
fn load_once(
    device: &Device,
    name: &'static str,
    variant: Option<&'static str>,
) -> Result<(Module, LoadPath)> {
    let key = (device.ordinal(), name, variant);
    let slot = slots().lock().entry(key).or_default().clone();
    let result = slot
        .get_or_init(|| match variant {
            None => load(device, name),
            Some(dtype) => load_variant(device, name, dtype),
        })
        .clone();
    if result.is_err() {
        let mut map = slots().lock();
        if map
            .get(&key)
            .is_some_and(|s| std::sync::Arc::ptr_eq(s, &slot))
        {
            map.remove(&key);
        }
    }
    result
}

/// The ahead-of-time code object `device` would load for module `name`, or why it JIT-compiles.
fn aot_plan(
    device: &Device,
    name: &'static str,
) -> std::result::Result<(String, &'static [u8]), JitReason> {
    let forced = std::env::var(FORCE_JIT_VAR).is_ok_and(|v| v == "1");
    if device.platform() != Platform::Amd {
        Err(JitReason::NotAmd)
    } else if forced {
        Err(JitReason::Forced)
    } else {
        aot_code_object(name, device.arch())
    }
}

fn load(device: &Device, name: &'static str) -> Result<(Module, LoadPath)> {
    let reason = match aot_plan(device, name) {
        Ok((target, image)) => match device.load_module(image) {
            Ok(m) => return Ok((m, LoadPath::Aot { target })),
            Err(e) => JitReason::AotLoadFailed(e.to_string()),
        },
        Err(reason) => reason,
    };
    let source = full_source(name).unwrap_or_default();
    let image = hip_core::rtc::compile(name, &source, device.arch(), &compile_options())?;
    let m = device.load_module(&image.image)?;
    Ok((m, LoadPath::Jit { reason }))
}

/// How module `name` was loaded on `device`, or `None` if it has not been loaded there (yet).
/// Module `name`'s one-dtype variant for `dtype`, JIT-compiled (see [`crate::jit_variant`]).
fn load_variant(
    device: &Device,
    name: &'static str,
    dtype: &'static str,
) -> Result<(Module, LoadPath)> {
    let reason = match aot_plan(device, name) {
        Err(reason) => reason,
        // Not reached through `function` (it loads the whole module where a code object
        // fits); load that code object all the same rather than compile.
        Ok(_) => return load(device, name),
    };
    let source = variant_full_source(name, dtype).unwrap_or_default();
    let program = format!("{name}.{dtype}");
    let image = hip_core::rtc::compile(&program, &source, device.arch(), &compile_options())?;
    let m = device.load_module(&image.image)?;
    Ok((m, LoadPath::Jit { reason }))
}

/// The one-dtype variant `kernel` should be JIT-compiled from, or `None` where the whole module
/// is loaded: a module already loaded whole, a fresh ahead-of-time code object for the device,
/// a kernel name without a dtype, or `ROCM_KERNELS_JIT_WHOLE_MODULES=1`.
fn variant_for(device: &Device, name: &'static str, kernel: &str) -> Option<&'static str> {
    let dtype = crate::jit_variant::kernel_variant(kernel)?;
    if std::env::var(WHOLE_MODULES_VAR).is_ok_and(|v| v == "1") {
        return None;
    }
    let whole = slots().lock().get(&(device.ordinal(), name, None)).cloned();
    if whole.is_some_and(|slot| matches!(slot.get(), Some(Ok(_)))) {
        return None;
    }
    aot_plan(device, name).is_err().then_some(dtype)
}

/// The environment variable that, set to `0`, turns off the parallel compilation of
/// [`PREFETCH_MODULES`].
pub const PREFETCH_VAR: &str = "ROCM_KERNELS_JIT_PREFETCH";

/// The modules whose one-dtype variants are compiled together, in parallel, when the first
/// variant of a float dtype is requested on a device: the element-wise, reduction and row-wise
/// families every model uses.
pub const PREFETCH_MODULES: &[&str] =
    &["unary", "binary", "affine", "cast", "fill", "reduce", "nn"];

/// On the first request of float dtype `dtype`'s variant on `device` (once per device and
/// dtype): compiles `dtype`'s variants of [`PREFETCH_MODULES`] and of `requested` in parallel,
/// one thread each, and returns when all are done, so that a model's first forward pass does
/// not wait for them one after another. A failure is dropped here (the caller's own request
/// retries and reports it). No thread outlives the call.
fn prefetch_variants(device: &Device, requested: &'static str, dtype: &'static str) {
    static STARTED: OnceLock<Mutex<std::collections::HashSet<(usize, &'static str)>>> =
        OnceLock::new();
    if !matches!(dtype, "f32" | "f16" | "bf16" | "f64")
        || std::env::var(PREFETCH_VAR).is_ok_and(|v| v == "0")
    {
        return;
    }
    let started = STARTED.get_or_init(Default::default);
    if !started.lock().insert((device.ordinal(), dtype)) {
        return;
    }
    let mut names: Vec<&'static str> = PREFETCH_MODULES.to_vec();
    if !names.contains(&requested) {
        names.push(requested);
    }
    std::thread::scope(|scope| {
        for name in names {
            let spawned = std::thread::Builder::new()
                .name(format!("rocm-kernels-jit-{name}.{dtype}"))
                .spawn_scoped(scope, move || {
                    let _ = load_once(device, name, Some(dtype));
                });
            // No thread (resources exhausted): the module compiles when first needed.
            drop(spawned);
        }
    });
}

/// How module `name` was loaded on `device` (whole, or else any of its one-dtype variants), or
/// `None` if it has not been loaded there (yet).
pub fn load_path(device: &Device, name: &str) -> Option<LoadPath> {
    let name = static_name(name).ok()?;
    let slots = slots().lock();
    let mut loads: Vec<_> = slots
        .iter()
        .filter(|((ordinal, n, _), _)| *ordinal == device.ordinal() && *n == name)
        .collect();
    loads.sort_by_key(|((_, _, variant), _)| *variant);
    loads.into_iter().find_map(|(_, slot)| match slot.get() {
        Some(Ok((_, p))) => Some(p.clone()),
        _ => None,
    })
}

/// Kernels looked up so far: per device ordinal, by kernel name (looked up by `&str`: no
/// allocation on the path every launch takes).
type FunctionCache = rustc_hash::FxHashMap<usize, rustc_hash::FxHashMap<String, Function>>;

fn functions() -> &'static Mutex<FunctionCache> {
    static FUNCTIONS: OnceLock<Mutex<FunctionCache>> = OnceLock::new();
    FUNCTIONS.get_or_init(Default::default)
}

/// Kernel `kernel` of module `module_name` on `device` (looked up once, then cached; kernel
/// names are unique across modules).
/// Where the kernel is JIT-compiled, only its one-dtype variant of the module is compiled (see
/// the module docs).
pub fn function(device: &Device, module_name: &str, kernel: &str) -> Result<Function> {
    let ordinal = device.ordinal();
    if let Some(f) = functions()
        .lock()
        .get(&ordinal)
        .and_then(|kernels| kernels.get(kernel))
    {
        return Ok(f.clone());
    }
    let name = static_name(module_name)?;
    let from_variant = variant_for(device, name, kernel).and_then(|dtype| {
        prefetch_variants(device, name, dtype);
        let (m, _) = load_once(device, name, Some(dtype)).ok()?;
        m.function(kernel).ok()
    });
    let f = match from_variant {
        Some(f) => f,
        None => module(device, name)?.function(kernel)?,
    };
    Ok(functions()
        .lock()
        .entry(ordinal)
        .or_default()
        .entry(kernel.to_string())
        .or_insert(f)
        .clone())
}

type CustomKey = (usize, String);

fn custom_modules() -> &'static Mutex<HashMap<CustomKey, Module>> {
    static CUSTOM: OnceLock<Mutex<HashMap<CustomKey, Module>>> = OnceLock::new();
    CUSTOM.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Compiles and loads a downstream crate's own HIP source through the same pipeline as the
/// built-in modules: `kernels/prelude.h` is prepended (so the source can use `f16`, `bf16`,
/// `u64`, `RK_KERNEL`, the strided-index helpers, ...), it is compiled at run time for the
/// device (hipRTC on AMD, NVRTC on NVIDIA) through hip-core's disk cache, and the module is kept
/// for the process, keyed by device and a hash of `name` and `source`.
///
/// ```no_run
/// # fn f(device: &hip_core::Device) -> rocm_kernels::Result<()> {
/// let module = rocm_kernels::modules::custom_module(
///     device,
///     "my_clamp",
///     r#"RK_KERNEL void clamp_f32(f32* x, u64 n, f32 lo, f32 hi) {
///            u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
///            if (i < n) x[i] = fminf(fmaxf(x[i], lo), hi);
///        }"#,
/// )?;
/// let clamp = module.function("clamp_f32")?;
/// # let _ = clamp; Ok(()) }
/// ```
pub fn custom_module(device: &Device, name: &str, source: &str) -> Result<Module> {
    let digest: String = Sha256::digest(format!("{name}\n{source}").as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let key = (device.ordinal(), digest);
    if let Some(m) = custom_modules().lock().get(&key) {
        return Ok(m.clone());
    }
    let full = format!("{PRELUDE}\n#line 1 \"{name}.hip\"\n{source}");
    let image = hip_core::rtc::compile(name, &full, device.arch(), &compile_options())?;
    let m = device.load_module(&image.image)?;
    Ok(custom_modules().lock().entry(key).or_insert(m).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed manifest, if any.
    fn manifest() -> Option<bundle::Manifest> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/bundles/manifest.txt");
        let text = std::fs::read_to_string(path).ok()?;
        Some(bundle::Manifest::parse(&text).expect("bundles/manifest.txt parses"))
    }

    /// Typical `gcnArchName`s of devices of each processor.
    fn device_arch(processor: &str) -> String {
        match processor {
            "gfx90a" | "gfx942" | "gfx950" => format!("{processor}:sramecc+:xnack-"),
            p => p.to_string(),
        }
    }

    #[test]
    fn full_source_is_the_prelude_then_the_module() {
        for (name, src) in MODULE_SOURCES {
            let full = full_source(name).unwrap();
            assert!(full.starts_with(PRELUDE));
            assert!(full.ends_with(src));
            assert!(full.contains(&format!("#line 1 \"{name}.hip\"")));
            assert_eq!(source_sha256(name).unwrap().len(), 64);
        }
        assert_eq!(full_source("no-such-module"), None);
    }

    #[test]
    fn embedded_bundles_are_sorted_and_name_modules() {
        assert!(AOT_BUNDLES.windows(2).all(|w| w[0].module < w[1].module));
        if !cfg!(feature = "aot") {
            assert!(AOT_BUNDLES.is_empty());
        }
        for b in AOT_BUNDLES {
            assert_eq!(b.source_sha256.len(), 64, "{}", b.module);
            // Decompressed once, then cached.
            let bytes = b.bytes().unwrap_or_else(|e| panic!("{}: {e}", b.module));
            assert!(std::ptr::eq(bytes, b.bytes().unwrap()), "{}", b.module);
        }
    }

    /// Every committed bundle parses, matches its manifest record, and holds one AMDGPU code
    /// object per built arch (every default arch the compiler supported), each really built
    /// for that processor.
    #[test]
    fn committed_bundles_hold_every_default_arch() {
        let Some(manifest) = manifest() else {
            return; // nothing committed yet
        };
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/bundles");
        for &arch in bundle::DEFAULT_ARCHS {
            assert!(
                manifest.archs.iter().any(|a| a == arch)
                    || manifest.skipped_archs.iter().any(|a| a == arch),
                "default arch {arch} neither built nor recorded as skipped"
            );
        }
        for rec in &manifest.modules {
            let gz = std::fs::read(format!("{dir}/{}.hipfb.gz", rec.name))
                .unwrap_or_else(|e| panic!("bundles/{}.hipfb.gz: {e}", rec.name));
            let bytes =
                gunzip(&gz).unwrap_or_else(|e| panic!("bundles/{}.hipfb.gz: {e}", rec.name));
            assert_eq!(bytes.len() as u64, rec.bundle_size, "{}", rec.name);
            assert_eq!(
                hex(&Sha256::digest(&bytes)),
                rec.bundle_sha256,
                "{}",
                rec.name
            );
            let b = bundle::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", rec.name));
            let (mut targets, mut archs) = (b.targets(), rec.archs.clone());
            targets.sort();
            archs.sort();
            assert_eq!(targets, archs, "{}: bundle targets", rec.name);
            for arch in &manifest.archs {
                assert!(rec.archs.contains(arch), "{}: no {arch}", rec.name);
            }
            for (t, e) in b.amdgpu_entries() {
                assert!(bundle::is_amdgpu_elf(e.data), "{}: {}", rec.name, e.id);
                let marker = format!("amdgcn-amd-amdhsa--{}", t.processor);
                assert!(
                    e.data.windows(marker.len()).any(|w| w == marker.as_bytes()),
                    "{}: entry {} does not say it is for {}",
                    rec.name,
                    e.id,
                    t.processor
                );
            }
            // What the library embeds is this bundle, with this record's hash.
            if cfg!(feature = "aot") {
                let emb = embedded_bundle(&rec.name).expect("embedded");
                assert_eq!(emb.gz, &gz[..]);
                assert_eq!(emb.bytes().unwrap(), &bytes[..]);
                assert_eq!(emb.source_sha256, rec.source_sha256);
            }
        }
    }

    #[test]
    fn fresh_bundles_serve_every_built_arch() {
        let Some(manifest) = manifest() else {
            return;
        };
        for b in AOT_BUNDLES {
            let fresh = source_sha256(b.module).as_deref() == Some(b.source_sha256);
            for arch in &manifest.archs {
                let dev = device_arch(arch);
                match aot_code_object(b.module, &dev) {
                    Ok((target, image)) => {
                        assert!(fresh);
                        assert_eq!(&target, arch);
                        assert!(bundle::is_amdgpu_elf(image));
                    }
                    Err(JitReason::Stale { .. }) => assert!(!fresh),
                    Err(e) => panic!("{} on {dev}: {e}", b.module),
                }
            }
            if fresh {
                assert!(matches!(
                    aot_code_object(b.module, "gfx803"),
                    Err(JitReason::NoMatchingTarget { .. })
                ));
                // Code built without target features runs in either xnack mode.
                if manifest.archs.iter().any(|a| a == "gfx90a") {
                    aot_code_object(b.module, "gfx90a:sramecc-:xnack+").unwrap();
                }
                assert!(aot_code_object(b.module, "sm_90").is_err());
            }
        }
        assert_eq!(
            aot_code_object("no-such-module", "gfx942"),
            Err(JitReason::NotEmbedded)
        );
    }

    #[test]
    fn a_corrupt_embedded_bundle_is_an_error_not_a_panic() {
        for gz in [
            &b""[..],
            b"not gzip at all",
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00",
        ] {
            let bad = EmbeddedBundle {
                module: "corrupt-test-bundle",
                source_sha256: "",
                gz,
            };
            assert!(bad.bytes().is_err(), "{gz:?}");
        }
        // A valid stream whose CRC does not match.
        let mut gz = Vec::new();
        {
            use std::io::Write as _;
            let mut enc = flate2::write::GzEncoder::new(&mut gz, flate2::Compression::best());
            enc.write_all(b"hello bundle").unwrap();
            enc.finish().unwrap();
        }
        assert_eq!(gunzip(&gz).unwrap(), b"hello bundle");
        let n = gz.len();
        gz[n - 8] ^= 0xff;
        assert!(gunzip(&gz).is_err());
    }
}
