//! `cargo xtask patch-candle [--out DIR]`: Candle with the out-of-tree device hook.
//!
//! Takes the candle-core, candle-nn and candle-transformers sources of the pinned version from
//! the cargo registry (`cargo metadata` on a throwaway manifest finds, and if needed downloads,
//! them), copies them to `DIR/<crate>` (default `target/patched-candle`) and applies the
//! committed patches `patches/<crate>-<version>.patch` (unified diffs relative to each crate's
//! root). The `tensor/` workspace points `[patch.crates-io]` at the result. Candle's sources are
//! never committed: only our patches are.
//!
//! The output carries a stamp (the patches' SHA-256 and the source paths): when it matches, the
//! copy is left as it is, so that cargo does not rebuild the patched crates on every run.

use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Candle release the patches are made for (the workspace pins it exactly).
pub const CANDLE_VERSION: &str = "0.11.1";
/// The patched crates, in dependency order.
const CRATES: [&str; 3] = ["candle-core", "candle-nn", "candle-transformers"];
const STAMP: &str = "PATCHED-BY-CANDLE-ROCM";

/// Entry point of `cargo xtask patch-candle`.
pub fn run(args: &[String]) -> Result<(), String> {
    let root = crate::rocm::workspace_root();
    let mut out = root.join("target/patched-candle");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => {
                out = PathBuf::from(it.next().ok_or("--out needs a directory")?);
            }
            other => {
                return Err(format!(
                    "unknown argument `{other}` (usage: patch-candle [--out DIR])"
                ))
            }
        }
    }
    let out = if out.is_absolute() {
        out
    } else {
        std::env::current_dir()
            .map_err(|e| e.to_string())?
            .join(out)
    };
    patch_candle(&root, &out)
}

/// Writes the patched crates to `out` (see the module doc).
pub fn patch_candle(root: &Path, out: &Path) -> Result<(), String> {
    let sources = registry_sources(root)?;
    let mut stamp = String::new();
    let mut patches = Vec::new();
    for (name, src) in CRATES.iter().zip(&sources) {
        let patch_path = root.join(format!("patches/{name}-{CANDLE_VERSION}.patch"));
        let patch = fs::read_to_string(&patch_path)
            .map_err(|e| format!("reading {}: {e}", patch_path.display()))?;
        stamp.push_str(&format!(
            "{name} {} {}\n",
            src.display(),
            hex(&Sha256::digest(patch.as_bytes()))
        ));
        patches.push(patch);
    }
    if fs::read_to_string(out.join(STAMP)).ok().as_deref() == Some(stamp.as_str()) {
        println!(
            "patched Candle {CANDLE_VERSION} up to date in {}",
            out.display()
        );
        return Ok(());
    }
    fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let _ = fs::remove_file(out.join(STAMP));
    for ((name, src), patch) in CRATES.iter().zip(&sources).zip(&patches) {
        let dst = out.join(name);
        if dst.exists() {
            fs::remove_dir_all(&dst).map_err(|e| format!("removing {}: {e}", dst.display()))?;
        }
        copy_dir(src, &dst)?;
        let files = apply_patch(&dst, patch)
            .map_err(|e| format!("patches/{name}-{CANDLE_VERSION}.patch: {e}"))?;
        println!(
            "{name} {CANDLE_VERSION}: {} -> {} ({files} files patched)",
            src.display(),
            dst.display()
        );
    }
    fs::write(out.join(STAMP), stamp).map_err(|e| format!("writing the stamp: {e}"))?;
    Ok(())
}

/// The registry source directories of [`CRATES`], found with `cargo metadata` on a throwaway
/// manifest that depends on exactly [`CANDLE_VERSION`] (cargo downloads them if needed).
fn registry_sources(root: &Path) -> Result<Vec<PathBuf>, String> {
    let probe = root.join("target/xtask/candle-source-probe");
    fs::create_dir_all(probe.join("src"))
        .map_err(|e| format!("creating {}: {e}", probe.display()))?;
    let deps: String = CRATES
        .iter()
        .map(|c| format!("{c} = {{ version = \"={CANDLE_VERSION}\", default-features = false }}\n"))
        .collect();
    let manifest = format!(
        "[package]\nname = \"candle-source-probe\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         publish = false\n\n[dependencies]\n{deps}\n[workspace]\n"
    );
    fs::write(probe.join("Cargo.toml"), manifest).map_err(|e| e.to_string())?;
    fs::write(probe.join("src/lib.rs"), "").map_err(|e| e.to_string())?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(probe.join("Cargo.toml"))
        .output()
        .map_err(|e| format!("running cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cargo metadata output: {e}"))?;
    let packages = json["packages"]
        .as_array()
        .ok_or("cargo metadata: no packages")?;
    CRATES
        .iter()
        .map(|name| {
            packages
                .iter()
                .find(|p| p["name"] == *name && p["version"] == CANDLE_VERSION)
                .and_then(|p| p["manifest_path"].as_str())
                .and_then(|m| Path::new(m).parent().map(Path::to_path_buf))
                .ok_or_else(|| format!("cargo metadata did not list {name} {CANDLE_VERSION}"))
        })
        .collect()
}

fn copy_dir(src: &Path, dst: &Path) -> Result<(), String> {
    fs::create_dir_all(dst).map_err(|e| format!("creating {}: {e}", dst.display()))?;
    for entry in fs::read_dir(src).map_err(|e| format!("reading {}: {e}", src.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let kind = entry.file_type().map_err(|e| e.to_string())?;
        if kind.is_dir() {
            if entry.file_name() != "target" {
                copy_dir(&from, &to)?;
            }
        } else {
            fs::copy(&from, &to).map_err(|e| format!("copying {}: {e}", from.display()))?;
        }
    }
    Ok(())
}

/// Applies a multi-file unified diff (as `git diff` writes it, paths `a/...` / `b/...`) to the
/// files under `dir`; returns how many files it changed. Any hunk that does not apply is an error.
fn apply_patch(dir: &Path, patch: &str) -> Result<usize, String> {
    let files = split_files(patch);
    if files.is_empty() {
        return Err("no file diffs in the patch".into());
    }
    for file in &files {
        let target = target_path(file)?;
        let path = dir.join(&target);
        let new_file = file.lines().any(|l| l == "--- /dev/null");
        let base = if new_file {
            String::new()
        } else {
            fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?
        };
        let diff = diffy::Patch::from_str(file).map_err(|e| format!("{target}: {e}"))?;
        let patched =
            diffy::apply(&base, &diff).map_err(|e| format!("{target} does not apply: {e}"))?;
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        fs::write(&path, patched).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(files.len())
}

/// The per-file parts of a `git diff`: split at each `diff --git` line, each part starting at
/// its `--- ` line (git's extended header lines before it are dropped).
fn split_files(patch: &str) -> Vec<String> {
    let mut files = Vec::new();
    for part in patch
        .split("\ndiff --git ")
        .filter(|p| !p.trim().is_empty())
    {
        if let Some(start) = part.find("\n--- ") {
            let mut file = part[start + 1..].to_string();
            if !file.ends_with('\n') {
                file.push('\n');
            }
            files.push(file);
        }
    }
    files
}

/// The file a per-file diff changes, relative to the crate root (`+++ b/src/x.rs` -> `src/x.rs`).
fn target_path(file: &str) -> Result<String, String> {
    let plus = file
        .lines()
        .find_map(|l| l.strip_prefix("+++ "))
        .ok_or("a file diff without a +++ line")?;
    let path = plus.split('\t').next().unwrap_or(plus);
    let path = path.strip_prefix("b/").unwrap_or(path);
    if path.is_empty() || path.starts_with('/') || path.split('/').any(|c| c == "..") {
        return Err(format!("refusing the path `{path}` in the patch"));
    }
    Ok(path.to_string())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_a_multi_file_diff_with_a_new_file() {
        let dir = std::env::temp_dir().join(format!("xtask-patch-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("src")).unwrap();
        fs::write(dir.join("src/a.rs"), "one\ntwo\nthree\n").unwrap();
        let patch = "diff --git a/src/a.rs b/src/a.rs\nindex 1..2 100644\n--- a/src/a.rs\n+++ b/src/a.rs\n\
                     @@ -1,3 +1,4 @@\n one\n+one and a half\n two\n three\n\
                     diff --git a/src/b.rs b/src/b.rs\nnew file mode 100644\nindex 0..1\n--- /dev/null\n+++ b/src/b.rs\n\
                     @@ -0,0 +1,2 @@\n+fn b() {}\n+// end\n";
        assert_eq!(apply_patch(&dir, patch).unwrap(), 2);
        assert_eq!(
            fs::read_to_string(dir.join("src/a.rs")).unwrap(),
            "one\none and a half\ntwo\nthree\n"
        );
        assert_eq!(
            fs::read_to_string(dir.join("src/b.rs")).unwrap(),
            "fn b() {}\n// end\n"
        );
        // The same patch again no longer applies (its context moved): an error, not a silent skip.
        assert!(apply_patch(&dir, patch).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refuses_paths_outside_the_crate() {
        let file = "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n";
        assert!(target_path(file).is_err());
    }

    #[test]
    fn committed_patches_parse() {
        let root = crate::rocm::workspace_root();
        for name in CRATES {
            let patch =
                fs::read_to_string(root.join(format!("patches/{name}-{CANDLE_VERSION}.patch")))
                    .unwrap();
            let files = split_files(&patch);
            assert!(!files.is_empty(), "{name}");
            for f in files {
                target_path(&f).unwrap();
                diffy::Patch::from_str(&f).unwrap();
            }
        }
    }
}
