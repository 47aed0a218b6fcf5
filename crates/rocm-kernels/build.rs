//! Generates, from what exists on disk:
//!
//! * the table of kernel modules from `kernels/*.hip` (and `kernels/prelude.h`), so that adding
//!   a module is adding a file (`kernel_sources.rs`);
//! * with the `aot` feature, the table of committed ahead-of-time bundles `bundles/*.hipfb.gz`
//!   (gzip-compressed), each embedded with `include_bytes!` together with the source hash
//!   `bundles/manifest.txt` records for it (`kernel_bundles.rs`); without it, an empty table.

use std::fmt::Write as _;
use std::path::Path;

// The bundle/manifest format, shared with `cargo xtask build-kernels` (std only).
#[allow(dead_code)]
#[path = "src/bundle.rs"]
mod bundle;

/// The names `NAME` of the files `dir/NAME<suffix>` (`suffix` e.g. `.hip`), sorted.
fn stems(dir: &Path, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let file = e.file_name().into_string().ok()?;
                    let stem = file.strip_suffix(suffix)?;
                    (!stem.is_empty()).then(|| stem.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn main() {
    // The package directory cargo runs this script for, read at run time: a path baked in at
    // compile time (`env!`) went stale once, when a target directory shared with another checkout
    // of the same package reused this script's binary and read that checkout's kernels
    // (since removed: every module vanished from MODULE_SOURCES).
    let root = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&root);
    let out_dir = std::env::var("OUT_DIR").unwrap();
    println!("cargo:rerun-if-changed=src/bundle.rs");

    // Kernel sources.
    let dir = root.join("kernels");
    println!("cargo:rerun-if-changed={}", dir.display());
    let names = stems(&dir, ".hip");
    // A crate without its kernels would build and then fail at every launch: fail here instead.
    assert!(
        !names.is_empty(),
        "rocm-kernels: no kernel sources (*.hip) in {}",
        dir.display()
    );
    let mut out = String::from("/// Every kernel module: (name, HIP source without the prelude).\npub const MODULE_SOURCES: &[(&str, &str)] = &[\n");
    for n in &names {
        println!(
            "cargo:rerun-if-changed={}",
            dir.join(format!("{n}.hip")).display()
        );
        writeln!(
            out,
            "    ({n:?}, include_str!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/kernels/{n}.hip\"))),"
        )
        .unwrap();
    }
    out.push_str("];\n");
    std::fs::write(Path::new(&out_dir).join("kernel_sources.rs"), out).unwrap();

    // Ahead-of-time bundles.
    let bdir = root.join("bundles");
    println!("cargo:rerun-if-changed={}", bdir.display());
    let manifest_path = bdir.join(bundle::MANIFEST_FILE);
    println!("cargo:rerun-if-changed={}", manifest_path.display());
    let mut entries = Vec::new();
    if std::env::var_os("CARGO_FEATURE_AOT").is_some() {
        let bundles = stems(&bdir, ".hipfb.gz");
        let manifest = match std::fs::read_to_string(&manifest_path) {
            Ok(text) => match bundle::Manifest::parse(&text) {
                Ok(m) => Some(m),
                Err(e) => {
                    println!(
                        "cargo:warning=rocm-kernels: {}: {e}; no bundle embedded (every module JIT-compiles)",
                        manifest_path.display()
                    );
                    None
                }
            },
            Err(_) if bundles.is_empty() => None,
            Err(e) => {
                println!(
                    "cargo:warning=rocm-kernels: bundles/*.hipfb.gz without a readable {}: {e}; none embedded",
                    manifest_path.display()
                );
                None
            }
        };
        if let Some(manifest) = manifest {
            for n in &bundles {
                match manifest.module(n) {
                    Some(rec) => {
                        println!("cargo:rerun-if-changed={}", bdir.join(format!("{n}.hipfb.gz")).display());
                        entries.push((n.clone(), rec.source_sha256.clone()));
                    }
                    None => println!(
                        "cargo:warning=rocm-kernels: bundles/{n}.hipfb.gz is not in the manifest; not embedded"
                    ),
                }
            }
        }
    }
    let mut out = String::new();
    for (i, (n, _)) in entries.iter().enumerate() {
        writeln!(
            out,
            "static BUNDLE_{i}: &[u8] = include_bytes!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/bundles/{n}.hipfb.gz\"));"
        )
        .unwrap();
    }
    out.push_str(
        "\n/// The embedded ahead-of-time bundles, sorted by module name (empty without the `aot` feature).\n\
         pub static AOT_BUNDLES: &[EmbeddedBundle] = &[\n",
    );
    for (i, (n, hash)) in entries.iter().enumerate() {
        writeln!(
            out,
            "    EmbeddedBundle {{ module: {n:?}, source_sha256: {hash:?}, gz: BUNDLE_{i} }},"
        )
        .unwrap();
    }
    out.push_str("];\n");
    std::fs::write(Path::new(&out_dir).join("kernel_bundles.rs"), out).unwrap();
}
