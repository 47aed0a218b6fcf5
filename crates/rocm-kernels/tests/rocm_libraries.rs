//! Tier 2: every kernel module JIT-compiles with the real hipRTC (ROCm 6.4) for one CDNA
//! (gfx942) and one RDNA (gfx1100) architecture, on a machine without an AMD GPU, and defines
//! exactly the kernels of the committed ahead-of-time bundle for that architecture.
//!
//! This is the path an AMD device takes when the bundles do not cover its architecture (or
//! `ROCM_KERNELS_JIT=1`). `cargo xtask test` runs it with `--ignored` under the loader the
//! Debian ROCm libraries need (`sid-run`), with `ROCM_PATH` pointing at the installed prefix
//! (hipRTC needs its `include/` for the HIP headers... and finds its device libraries itself).

use std::collections::BTreeSet;

use object::read::elf::ElfFile64;
use object::{Object, ObjectSymbol};
use rocm_kernels::modules::{compile_options, full_source, MODULE_SOURCES};

/// A private compile cache under the temp dir, removed when dropped (also when a test fails), so
/// that failed runs do not leave compiled code objects behind.
struct PrivateCache(std::path::PathBuf);

impl PrivateCache {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rocm-kernels-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::env::set_var("HIP_CORE_CACHE_DIR", &dir);
        PrivateCache(dir)
    }
}

impl Drop for PrivateCache {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The kernel names (symbols with a `.kd` kernel descriptor) of an AMDGPU code object.
fn kernels(image: &[u8], what: &str) -> BTreeSet<String> {
    let file = ElfFile64::<object::Endianness>::parse(image)
        .unwrap_or_else(|e| panic!("{what}: not a 64-bit ELF code object: {e}"));
    file.symbols()
        .filter_map(|s| {
            s.name()
                .ok()
                .and_then(|n| n.strip_suffix(".kd"))
                .map(str::to_string)
        })
        .collect()
}

#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn every_module_jit_compiles_for_cdna_and_rdna_without_a_gpu() {
    match hip_core::platform() {
        Ok(hip_core::Platform::Amd) => {}
        other => panic!(
            "the AMD platform did not load ({other:?}); run under sid-run with ROCM_PATH set, \
             or through `cargo xtask test`"
        ),
    }
    // A private cache directory: every compilation below is a real one.
    let _cache = PrivateCache::new("tier2");
    let mut total = 0;
    for arch in ["gfx942", "gfx1100"] {
        for (name, _) in MODULE_SOURCES {
            let source = full_source(name).expect("module source");
            let start = std::time::Instant::now();
            let compiled = hip_core::rtc::compile(name, &source, arch, &compile_options())
                .unwrap_or_else(|e| panic!("hipRTC failed on module `{name}` for {arch}: {e}"));
            assert!(!compiled.from_cache, "{name} {arch}: came from the cache");
            let jit = kernels(&compiled.image, &format!("{name} JIT {arch}"));
            assert!(!jit.is_empty(), "{name} {arch}: no kernels");
            // The committed bundle (when fresh) must define the same kernels.
            match rocm_kernels::modules::aot_code_object(name, arch) {
                Ok((target, aot)) => {
                    let aot = kernels(aot, &format!("{name} AOT {target}"));
                    assert_eq!(jit, aot, "{name} {arch}: JIT and AOT kernels differ");
                }
                Err(e) => panic!("{name} {arch}: no committed code object to compare with: {e}"),
            }
            println!(
                "{name:>10} {arch:>8}: {:4} kernels, {:7} bytes, {:.1} s",
                jit.len(),
                compiled.image.len(),
                start.elapsed().as_secs_f64()
            );
            total += jit.len();
        }
    }
    println!(
        "hipRTC compiled {} modules x 2 archs: {total} kernels",
        MODULE_SOURCES.len()
    );
}

/// Run-time compilation builds a kernel from its module's one-dtype variant
/// (`rocm_kernels::jit_variant`): every kernel of the committed gfx942 code object must be
/// defined by the variant of its name's first dtype, and every variant must compile.
#[test]
#[ignore = "needs the ROCm libraries: run `cargo xtask test`"]
fn every_kernel_is_defined_by_its_one_dtype_variant() {
    use rocm_kernels::jit_variant::kernel_variant;
    use rocm_kernels::modules::variant_full_source;
    use std::collections::BTreeMap;

    match hip_core::platform() {
        Ok(hip_core::Platform::Amd) => {}
        other => panic!("the AMD platform did not load ({other:?}); run `cargo xtask test`"),
    }
    let _cache = PrivateCache::new("variants");
    let arch = "gfx942";
    let (mut whole_kernels, mut variant_kernels) = (0, 0);
    for (name, _) in MODULE_SOURCES {
        let (_, aot) = rocm_kernels::modules::aot_code_object(name, arch)
            .unwrap_or_else(|e| panic!("{name}: no committed {arch} code object: {e}"));
        let all = kernels(aot, &format!("{name} AOT {arch}"));
        let mut by_variant: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
        for k in &all {
            if let Some(dtype) = kernel_variant(k) {
                by_variant.entry(dtype).or_default().push(k);
            }
        }
        for (dtype, wanted) in by_variant {
            let source = variant_full_source(name, dtype).expect("module");
            let start = std::time::Instant::now();
            let program = format!("{name}.{dtype}");
            let compiled = hip_core::rtc::compile(&program, &source, arch, &compile_options())
                .unwrap_or_else(|e| panic!("hipRTC failed on variant {program}: {e}"));
            let defined = kernels(&compiled.image, &program);
            for k in &wanted {
                assert!(defined.contains(*k), "{program} does not define `{k}`");
            }
            assert!(
                defined.is_subset(&all),
                "{program} defines kernels the module lacks"
            );
            println!(
                "{program:>16}: {:4} kernels ({:4} in the module), {:.1} s",
                defined.len(),
                all.len(),
                start.elapsed().as_secs_f64()
            );
            whole_kernels += all.len();
            variant_kernels += defined.len();
        }
    }
    println!(
        "one-dtype variants compile {variant_kernels} kernels where whole modules would \
         compile {whole_kernels}"
    );
}
