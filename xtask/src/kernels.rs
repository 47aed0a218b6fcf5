//! `cargo xtask build-kernels`: compile every kernel module ahead of time.
//!
//! Every `crates/rocm-kernels/kernels/<name>.hip` is compiled (as its full source: the prelude, a
//! `#line` directive, the module, exactly what the run-time loader hashes and JIT-compiles) by the
//! ROCm toolchain's `hip-clang` for every target architecture into one uncompressed clang offload
//! bundle, committed gzip-compressed (best level, deterministic header) as
//! `crates/rocm-kernels/bundles/<name>.hipfb.gz`, and recorded in
//! `crates/rocm-kernels/bundles/manifest.txt` (source hash, flags, compiler, archs, size and hash
//! of the uncompressed bundle).
//! The per-kernel register, LDS and scratch usage of every code object is read back from its
//! AMDGPU metadata note and printed; scratch (spills, stack) on the archs of [`WATCH_ARCHS`] is
//! flagged.
//!
//! Usage: `cargo xtask build-kernels [--arch LIST] [--check] [--force] [--jobs N] [--table|--no-table]`
//!
//! * `--arch gfx90a,gfx942`: the processors to build (default [`bundle::DEFAULT_ARCHS`]); each
//!   is probed once and skipped, with a note recorded in the manifest, if the compiler does not
//!   support it;
//! * `--check`: fail when a committed bundle is missing, stale (built from another source, with
//!   other flags or for fewer archs), inconsistent with its manifest record, or when a module does
//!   not compile; changes nothing. A module whose committed bundle is up to date for this very
//!   compiler (same source hash, flags, compiler version and archs, and the bundle its record
//!   describes) is not compiled again: its record already proves that this compiler builds this
//!   source for these archs. Every other module is compiled into a temporary directory (with
//!   `--force`, every module is);
//! * `--force`: recompile modules whose committed bundle is up to date (by default they are
//!   kept: same source hash, flags, compiler and archs);
//! * `--jobs N`: modules compiled at once (default: the available parallelism);
//! * `--table` / `--no-table`: the per-kernel resource table (default: on when building, off
//!   with `--check`, which prints one line per module).
//!
//! Output is deterministic: `-cuid=<module>` replaces clang's path-derived compilation-unit id,
//! there are no timestamps and the manifest is sorted, so that rebuilding unchanged sources with
//! the same compiler changes no byte.

// The bundle and manifest format, shared with the run-time loader (std only).
#[allow(dead_code)]
#[path = "../../crates/rocm-kernels/src/bundle.rs"]
mod bundle;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use sha2::{Digest, Sha256};

use crate::rocm::{self, RocmEnv};

/// The flags every module is compiled with (besides `-cuid`, `--offload-arch`, input, output).
/// `hip-clang` itself adds `-x hip --cuda-device-only` and the HIP / device-library paths.
const FLAGS: &[&str] = &[
    "-O3",
    "-std=c++17",
    "-mcode-object-version=5",
    // Uncompressed bundles: the run-time parser needs no decompressor.
    "--no-offload-compress",
];

/// The archs on which any scratch use (register spills, stack) is flagged.
const WATCH_ARCHS: &[&str] = &["gfx942", "gfx1100"];

struct Options {
    archs: Vec<String>,
    check: bool,
    force: bool,
    jobs: usize,
    table: Option<bool>,
}

fn usage() -> &'static str {
    "usage: cargo xtask build-kernels [--arch gfx90a,gfx942,...] [--check] [--force] [--jobs N] [--table|--no-table]"
}

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        archs: Vec::new(),
        check: false,
        force: false,
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        table: None,
    };
    let mut it = args.iter();
    let split = |v: &str| -> Vec<String> {
        v.split([',', ' '])
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--check" => o.check = true,
            "--force" => o.force = true,
            "--table" => o.table = Some(true),
            "--no-table" => o.table = Some(false),
            "--arch" => o
                .archs
                .extend(split(it.next().ok_or("--arch needs a list")?)),
            "--jobs" | "-j" => {
                o.jobs = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .ok_or("--jobs needs a positive number")?
            }
            "-h" | "--help" => {
                println!("{}", usage());
                std::process::exit(0);
            }
            other => {
                if let Some(v) = other.strip_prefix("--arch=") {
                    o.archs.extend(split(v));
                } else if let Some(n) = other.strip_prefix("--jobs=") {
                    o.jobs = n
                        .parse()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or("--jobs needs a positive number")?;
                } else {
                    return Err(format!("unknown option `{other}`; {}", usage()));
                }
            }
        }
    }
    if o.archs.is_empty() {
        o.archs = bundle::DEFAULT_ARCHS
            .iter()
            .map(|s| s.to_string())
            .collect();
    }
    let mut seen = Vec::new();
    o.archs.retain(|a| {
        let new = !seen.contains(a);
        seen.push(a.clone());
        new
    });
    for a in &o.archs {
        if bundle::TargetId::parse(a).is_none() {
            return Err(format!("`{a}` is not an AMDGPU target id (e.g. gfx942)"));
        }
    }
    Ok(o)
}

/// The toolchain programs this command runs.
struct Toolchain {
    hip_clang: PathBuf,
    readelf: PathBuf,
    /// The first line of `--version`.
    version: String,
}

/// Finds the toolchain: the install prefix's `env.sh` (`$CANDLE_ROCM_PREFIX`, else
/// `$HOME/.cache/candle-rocm/rocm-deb`), else `hip-clang` on `PATH`.
fn toolchain() -> Result<Toolchain, String> {
    let prefix = std::env::var_os("CANDLE_ROCM_PREFIX")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/candle-rocm/rocm-deb"))
        });
    let env_file = prefix.map(|p| p.join("env.sh")).filter(|f| f.is_file());
    let bin = match env_file {
        Some(f) => RocmEnv::from_env_file(&f)?.bin_dir,
        None => std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .find(|d| d.join("hip-clang").is_file())
            .ok_or(
                "no ROCm toolchain: run `cargo xtask install-rocm` first (or put its bin/, with \
                 hip-clang, on PATH)",
            )?,
    };
    let hip_clang = bin.join("hip-clang");
    if !hip_clang.is_file() {
        return Err(format!(
            "{} is missing; re-run `cargo xtask install-rocm`",
            hip_clang.display()
        ));
    }
    let readelf = bin.join("llvm-readelf");
    if !readelf.is_file() {
        return Err(format!("{} is missing", readelf.display()));
    }
    let out = Command::new(&hip_clang)
        .arg("--version")
        .output()
        .map_err(|e| format!("running {}: {e}", hip_clang.display()))?;
    let version = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    if !out.status.success() || version.is_empty() {
        return Err(format!(
            "{} --version failed: {}",
            hip_clang.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(Toolchain {
        hip_clang,
        readelf,
        version,
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A kernel module's source.
struct Source {
    name: String,
    full: String,
    sha256: String,
}

fn read_sources(kernels: &Path) -> Result<(String, Vec<Source>), String> {
    let read =
        |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()));
    let prelude = read(&kernels.join("prelude.h"))?;
    let mut names: Vec<String> = std::fs::read_dir(kernels)
        .map_err(|e| format!("reading {}: {e}", kernels.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let p = e.path();
            (p.extension().and_then(|x| x.to_str()) == Some("hip"))
                .then(|| p.file_stem()?.to_str().map(str::to_string))
                .flatten()
        })
        .collect();
    names.sort();
    let mut sources = Vec::new();
    for name in names {
        let src = read(&kernels.join(format!("{name}.hip")))?;
        let full = bundle::full_source(&prelude, &name, &src);
        let sha256 = sha256_hex(full.as_bytes());
        sources.push(Source { name, full, sha256 });
    }
    Ok((sha256_hex(prelude.as_bytes()), sources))
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self, String> {
        let p =
            std::env::temp_dir().join(format!("candle-rocm-build-kernels-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).map_err(|e| format!("creating {}: {e}", p.display()))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `work(i)` for `0..n` on `jobs` threads; results in index order.
fn parallel<T: Send>(n: usize, jobs: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, n.max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    break;
                }
                let r = work(i);
                if let Ok(mut v) = results.lock() {
                    v[i] = Some(r);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .flatten()
        .collect()
}

/// An arch the compiler does not support, and why.
type Skipped = (String, String);

/// The archs of `wanted` the compiler supports, and the skipped ones with the reason.
fn probe_archs(
    tc: &Toolchain,
    tmp: &Path,
    wanted: &[String],
    jobs: usize,
) -> Result<(Vec<String>, Vec<Skipped>), String> {
    let src = tmp.join("probe.hip");
    std::fs::write(
        &src,
        "extern \"C\" __global__ void probe(int* p) { *p = 1; }\n",
    )
    .map_err(|e| format!("writing {}: {e}", src.display()))?;
    let results = parallel(wanted.len(), jobs, |i| {
        let arch = &wanted[i];
        Command::new(&tc.hip_clang)
            .args(FLAGS)
            .arg(format!("--offload-arch={arch}"))
            .arg("--no-gpu-bundle-output")
            .arg(&src)
            .arg("-o")
            .arg(tmp.join(format!("probe-{arch}.co")))
            .env_remove("HIP_COV")
            .output()
    });
    let (mut ok, mut skipped) = (Vec::new(), Vec::new());
    for (arch, r) in wanted.iter().zip(results) {
        match r {
            Ok(o) if o.status.success() => ok.push(arch.clone()),
            Ok(o) => {
                let why = String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .find(|l| l.contains("error"))
                    .unwrap_or("compilation failed")
                    .trim()
                    .to_string();
                skipped.push((arch.clone(), why));
            }
            Err(e) => return Err(format!("running {}: {e}", tc.hip_clang.display())),
        }
    }
    Ok((ok, skipped))
}

fn module_flags(name: &str) -> String {
    let mut f: Vec<String> = FLAGS.iter().map(|s| s.to_string()).collect();
    f.push(format!("-cuid={name}"));
    f.join(" ")
}

/// The outcome of compiling one module.
struct Compiled {
    /// The bundle, or the compiler's complaint.
    bundle: Result<Vec<u8>, String>,
    /// Compiler warnings (stderr of a successful compilation).
    warnings: String,
    secs: f64,
}

fn compile(tc: &Toolchain, tmp: &Path, src: &Source, archs: &[String]) -> Compiled {
    let t = Instant::now();
    let dir = tmp.join(&src.name);
    let run = || -> Result<(Vec<u8>, String), String> {
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let input = dir.join(format!("{}.hip", src.name));
        let output = dir.join(format!("{}.hipfb", src.name));
        std::fs::write(&input, &src.full)
            .map_err(|e| format!("writing {}: {e}", input.display()))?;
        let mut cmd = Command::new(&tc.hip_clang);
        cmd.args(FLAGS)
            .arg(format!("-cuid={}", src.name))
            .args(archs.iter().map(|a| format!("--offload-arch={a}")))
            .arg(&input)
            .arg("-o")
            .arg(&output)
            .env_remove("HIP_COV");
        let out = cmd
            .output()
            .map_err(|e| format!("running {}: {e}", tc.hip_clang.display()))?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(format!(
                "compilation failed ({}):\n{}",
                out.status,
                stderr.trim_end()
            ));
        }
        let bytes =
            std::fs::read(&output).map_err(|e| format!("reading {}: {e}", output.display()))?;
        Ok((bytes, stderr))
    };
    let (bundle, warnings) = match run() {
        Ok((b, w)) => (Ok(b), w),
        Err(e) => (Err(e), String::new()),
    };
    Compiled {
        bundle,
        warnings,
        secs: t.elapsed().as_secs_f64(),
    }
}

/// One kernel's resource use on one arch, from its code object's AMDGPU metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct KernelRes {
    name: String,
    vgpr: u64,
    agpr: u64,
    sgpr: u64,
    /// LDS: `.group_segment_fixed_size`.
    lds: u64,
    /// Scratch per work-item: `.private_segment_fixed_size`.
    scratch: u64,
    vgpr_spill: u64,
    sgpr_spill: u64,
    dynamic_stack: bool,
}

impl KernelRes {
    /// Scratch memory (VGPR spills, stack): what gets flagged. SGPR spills alone go to VGPR
    /// lanes, not to memory.
    fn uses_scratch(&self) -> bool {
        self.scratch > 0 || self.vgpr_spill > 0 || self.dynamic_stack
    }
}

/// Parses the kernels of `llvm-readelf --notes` output (the YAML rendering of the
/// `NT_AMDGPU_METADATA` note: `amdhsa.kernels:` then one `  - ` item per kernel whose keys sit
/// at indent 4; deeper lines, like `.args`, are skipped).
fn parse_notes(text: &str) -> Vec<KernelRes> {
    let mut kernels = Vec::new();
    let mut in_kernels = false;
    let mut cur: Option<KernelRes> = None;
    for line in text.lines() {
        if line.starts_with("amdhsa.kernels:") {
            in_kernels = true;
            continue;
        }
        if !in_kernels {
            continue;
        }
        let kv = if let Some(rest) = line.strip_prefix("  - ") {
            kernels.extend(cur.take());
            cur = Some(KernelRes::default());
            rest
        } else if let Some(rest) = line.strip_prefix("    ").filter(|r| r.starts_with('.')) {
            rest
        } else if !line.starts_with(' ') && !line.trim().is_empty() {
            in_kernels = false; // the next top-level key
            continue;
        } else {
            continue;
        };
        let (Some(k), Some((key, value))) = (cur.as_mut(), kv.split_once(':')) else {
            continue;
        };
        let value = value.trim().trim_matches(['\'', '"']);
        let num = || value.parse::<u64>().unwrap_or(0);
        match key.trim() {
            ".name" => k.name = value.to_string(),
            ".vgpr_count" => k.vgpr = num(),
            ".agpr_count" => k.agpr = num(),
            ".sgpr_count" => k.sgpr = num(),
            ".group_segment_fixed_size" => k.lds = num(),
            ".private_segment_fixed_size" => k.scratch = num(),
            ".vgpr_spill_count" => k.vgpr_spill = num(),
            ".sgpr_spill_count" => k.sgpr_spill = num(),
            ".uses_dynamic_stack" => k.dynamic_stack = value == "true",
            _ => {}
        }
    }
    kernels.extend(cur);
    kernels.sort_by(|a, b| a.name.cmp(&b.name));
    kernels
}

/// Per arch (in bundle order), the resource use of every kernel of a bundle; also checks that
/// the bundle holds exactly one AMDGPU code object per arch of `archs`.
fn resources(
    tc: &Toolchain,
    tmp: &Path,
    name: &str,
    bytes: &[u8],
    archs: &[String],
) -> Result<Vec<(String, Vec<KernelRes>)>, String> {
    let b = bundle::parse(bytes).map_err(|e| format!("{name}.hipfb: {e}"))?;
    let targets = b.targets();
    if !same_set(&targets, archs) {
        return Err(format!(
            "{name}.hipfb holds code objects for [{}], expected [{}]",
            targets.join(" "),
            archs.join(" ")
        ));
    }
    let dir = tmp.join(format!("{name}-objects"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for (t, e) in b.amdgpu_entries() {
        if !bundle::is_amdgpu_elf(e.data) {
            return Err(format!("{name}.hipfb: entry {} is not an AMDGPU ELF", e.id));
        }
        let arch = t.to_string();
        let path = dir.join(format!("{arch}.co"));
        std::fs::write(&path, e.data).map_err(|e| format!("writing {}: {e}", path.display()))?;
        let o = Command::new(&tc.readelf)
            .arg("--notes")
            .arg(&path)
            .output()
            .map_err(|e| format!("running {}: {e}", tc.readelf.display()))?;
        if !o.status.success() {
            return Err(format!(
                "llvm-readelf --notes {name} {arch}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        out.push((arch, parse_notes(&String::from_utf8_lossy(&o.stdout))));
    }
    // Columns in the requested order (clang writes the entries in an order of its own).
    out.sort_by_key(|(a, _)| archs.iter().position(|x| x == a));
    Ok(out)
}

/// Whether `a` and `b` hold the same archs, in any order.
fn same_set(a: &[String], b: &[String]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort();
    b.sort();
    a == b
}

/// What was learnt about one module's bundle, for the report.
struct Report {
    name: String,
    size: u64,
    /// `Some(seconds)` when compiled now, `None` when the committed bundle was kept.
    secs: Option<f64>,
    res: Vec<(String, Vec<KernelRes>)>,
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Prints a module's resource table (when `table`) and summary; returns its scratch findings
/// on [`WATCH_ARCHS`] as `(module, kernel, arch, detail)`.
fn print_report(r: &Report, table: bool) -> Vec<String> {
    let archs: Vec<&str> = r.res.iter().map(|(a, _)| a.as_str()).collect();
    let mut kernels: BTreeMap<&str, Vec<Option<&KernelRes>>> = BTreeMap::new();
    for (i, (_, ks)) in r.res.iter().enumerate() {
        for k in ks {
            kernels
                .entry(k.name.as_str())
                .or_insert_with(|| vec![None; archs.len()])[i] = Some(k);
        }
    }
    let how = match r.secs {
        Some(s) => format!("compiled in {s:.1} s"),
        None => "up to date, kept".to_string(),
    };
    println!(
        "\n{}: {} kernels x {} archs, {} ({})",
        r.name,
        kernels.len(),
        archs.len(),
        mib(r.size),
        how
    );
    let cell = |k: &KernelRes| {
        if k.agpr > 0 {
            format!("{}+{}a/{}", k.vgpr, k.agpr, k.sgpr)
        } else {
            format!("{}/{}", k.vgpr, k.sgpr)
        }
    };
    if table && !kernels.is_empty() {
        let wname = kernels.keys().map(|k| k.len()).max().unwrap_or(6).max(6);
        let widths: Vec<usize> = archs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                kernels
                    .values()
                    .filter_map(|v| v[i].map(|k| cell(k).len()))
                    .max()
                    .unwrap_or(0)
                    .max(a.len())
            })
            .collect();
        let mut head = format!("  {:<wname$}", "kernel (VGPR/SGPR)");
        for (a, w) in archs.iter().zip(&widths) {
            head.push_str(&format!(" {a:>w$}"));
        }
        println!("{head} {:>6} {:>7}", "LDS", "scratch");
        for (name, per) in &kernels {
            let mut line = format!("  {name:<wname$}");
            for (k, w) in per.iter().zip(&widths) {
                line.push_str(&format!(" {:>w$}", k.map_or("-".to_string(), &cell)));
            }
            let lds = per.iter().flatten().map(|k| k.lds).max().unwrap_or(0);
            let scratch = per.iter().flatten().map(|k| k.scratch).max().unwrap_or(0);
            println!("{line} {lds:>6} {scratch:>7}");
        }
    }
    let mut max = String::new();
    for (i, a) in archs.iter().enumerate() {
        let v = kernels
            .values()
            .filter_map(|v| v[i].map(|k| k.vgpr + k.agpr))
            .max()
            .unwrap_or(0);
        let s = kernels
            .values()
            .filter_map(|v| v[i].map(|k| k.sgpr))
            .max()
            .unwrap_or(0);
        max.push_str(&format!(" {a} {v}/{s}"));
    }
    println!("  max VGPR/SGPR:{max}");
    let lds = kernels
        .values()
        .flatten()
        .flatten()
        .map(|k| k.lds)
        .max()
        .unwrap_or(0);
    println!("  max LDS: {lds} bytes");
    let mut flagged = Vec::new();
    let mut scratch = Vec::new();
    let mut sgpr_spills = Vec::new();
    for (name, per) in &kernels {
        for (k, a) in per.iter().zip(&archs) {
            let Some(k) = k else { continue };
            if !k.uses_scratch() {
                if k.sgpr_spill > 0 {
                    sgpr_spills.push(format!("{name} on {a} ({})", k.sgpr_spill));
                }
                continue;
            }
            let detail = format!(
                "{name} on {a}: scratch {} bytes, {} VGPR / {} SGPR spills{}",
                k.scratch,
                k.vgpr_spill,
                k.sgpr_spill,
                if k.dynamic_stack {
                    ", dynamic stack"
                } else {
                    ""
                }
            );
            if WATCH_ARCHS.contains(a) {
                flagged.push(format!("{}: {detail}", r.name));
            }
            scratch.push(detail);
        }
    }
    if scratch.is_empty() {
        println!("  scratch: none");
    } else {
        for s in &scratch {
            println!("  scratch: {s}");
        }
    }
    if !sgpr_spills.is_empty() {
        println!(
            "  SGPR spills into VGPR lanes (no scratch): {}",
            sgpr_spills.join(", ")
        );
    }
    flagged
}

/// `bytes` gzip-compressed at the best level. Deterministic: the header records no file name
/// and an mtime of 0, so that the same bundle always gives the same `.hipfb.gz` bytes.
fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::GzBuilder::new().mtime(0).write(
        Vec::with_capacity(bytes.len() / 4 + 64),
        flate2::Compression::best(),
    );
    enc.write_all(bytes).expect("writing into a Vec");
    enc.finish().expect("writing into a Vec")
}

/// Decompresses a gzip stream (CRC and length checked).
fn gunzip(gz: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut out)
        .map_err(|e| format!("decompressing: {e}"))?;
    Ok(out)
}

/// Reads and decompresses the committed `bundles/<name>.hipfb.gz` at `path`.
fn read_gz(path: &Path) -> Result<Vec<u8>, String> {
    let gz = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    gunzip(&gz).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes `bytes` to `path` through a temporary file and a rename, unless it already holds them.
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&tmp, bytes).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("renaming {} into place: {e}", tmp.display())
    })
}

/// Runs `cargo xtask build-kernels`.
pub fn run(args: &[String]) -> Result<(), String> {
    let opts = parse_options(args)?;
    let t0 = Instant::now();
    let crate_dir = rocm::workspace_root().join("crates/rocm-kernels");
    let kernels_dir = crate_dir.join("kernels");
    let bundles_dir = crate_dir.join("bundles");
    let (prelude_sha, sources) = read_sources(&kernels_dir)?;
    let tc = toolchain()?;
    let tmp = TempDir::new()?;
    println!("build-kernels: {} ({})", tc.version, tc.hip_clang.display());
    println!(
        "build-kernels: {} module(s): {}",
        sources.len(),
        sources
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );

    let (archs, skipped) = probe_archs(&tc, &tmp.0, &opts.archs, opts.jobs)?;
    for (a, why) in &skipped {
        println!("build-kernels: note: skipping {a}, not supported by this compiler ({why})");
    }
    if archs.is_empty() {
        return Err("the compiler supports none of the requested archs".into());
    }
    println!("build-kernels: archs: {}", archs.join(" "));

    let manifest_path = bundles_dir.join(bundle::MANIFEST_FILE);
    let committed = match std::fs::read_to_string(&manifest_path) {
        Ok(text) => match bundle::Manifest::parse(&text) {
            Ok(m) => Some(m),
            Err(e) if opts.check => return Err(format!("{}: {e}", manifest_path.display())),
            Err(e) => {
                println!(
                    "build-kernels: note: ignoring {}: {e}",
                    manifest_path.display()
                );
                None
            }
        },
        Err(_) => None,
    };
    let record_of = |name: &str| committed.as_ref().and_then(|m| m.module(name));
    // Committed bundles are gzip-compressed; `<name>.hipfb` is the uncompressed form earlier
    // versions committed, still accepted as up to date (then compressed) and removed.
    let bundle_path = |name: &str| bundles_dir.join(format!("{name}.hipfb.gz"));
    let legacy_path = |name: &str| bundles_dir.join(format!("{name}.hipfb"));

    // What to compile: everything with --force, else what is not up to date (with --check too:
    // an up-to-date record names this compiler, source, flags and archs, so compiling again
    // would prove nothing new; its bundle is still parsed and checked against the record).
    let up_to_date = |s: &Source| -> Option<Vec<u8>> {
        let rec = record_of(&s.name)?;
        let fresh = |bytes: &[u8]| {
            rec.source_sha256 == s.sha256
                && rec.flags == module_flags(&s.name)
                && rec.compiler == tc.version
                && rec.archs == archs
                && rec.bundle_size == bytes.len() as u64
                && rec.bundle_sha256 == sha256_hex(bytes)
        };
        [
            read_gz(&bundle_path(&s.name)).ok(),
            std::fs::read(legacy_path(&s.name)).ok(),
        ]
        .into_iter()
        .flatten()
        .find(|b| fresh(b))
    };
    let kept: Vec<Option<Vec<u8>>> = sources
        .iter()
        .map(|s| if opts.force { None } else { up_to_date(s) })
        .collect();
    let todo: Vec<usize> = (0..sources.len()).filter(|&i| kept[i].is_none()).collect();
    println!(
        "build-kernels: compiling {} module(s) ({} up to date), {} at a time{}",
        todo.len(),
        sources.len() - todo.len(),
        opts.jobs,
        if opts.check {
            ", into a temporary directory (--check)"
        } else {
            ""
        }
    );
    let compiled = parallel(todo.len(), opts.jobs, |j| {
        let s = &sources[todo[j]];
        let c = compile(&tc, &tmp.0, s, &archs);
        let status = match &c.bundle {
            Ok(b) => format!("ok, {}", mib(b.len() as u64)),
            Err(_) => "FAILED".to_string(),
        };
        println!("  {:<24} {:>6.1} s  {status}", s.name, c.secs);
        let _ = std::io::stdout().flush();
        c
    });
    let mut results: Vec<Option<Compiled>> = (0..sources.len()).map(|_| None).collect();
    for (j, c) in compiled.into_iter().enumerate() {
        results[todo[j]] = Some(c);
    }

    let mut problems: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut reports = Vec::new();
    let mut records = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        let (bytes, secs) = match (&kept[i], results[i].take()) {
            (Some(b), _) => (b.clone(), None),
            (None, Some(c)) => {
                if !c.warnings.trim().is_empty() {
                    println!(
                        "\n{}: compiler warnings:\n{}",
                        s.name,
                        c.warnings.trim_end()
                    );
                }
                match c.bundle {
                    Ok(b) => (b, Some(c.secs)),
                    Err(e) => {
                        println!("\n{}: {e}", s.name);
                        problems.push(format!("{}: does not compile (see above)", s.name));
                        // Building: keep the committed bundle and record, consistent if stale.
                        if let Some(rec) = record_of(&s.name) {
                            records.push(rec.clone());
                        }
                        continue;
                    }
                }
            }
            (None, None) => unreachable!("every module is kept or compiled"),
        };
        match resources(&tc, &tmp.0, &s.name, &bytes, &archs) {
            Ok(res) => reports.push(Report {
                name: s.name.clone(),
                size: bytes.len() as u64,
                secs,
                res,
            }),
            Err(e) => {
                problems.push(format!("{}: bad bundle: {e}", s.name));
                if let Some(rec) = record_of(&s.name) {
                    records.push(rec.clone());
                }
                continue;
            }
        }
        let rec = bundle::ModuleRecord {
            name: s.name.clone(),
            source_sha256: s.sha256.clone(),
            flags: module_flags(&s.name),
            compiler: tc.version.clone(),
            archs: archs.clone(),
            bundle_size: bytes.len() as u64,
            bundle_sha256: sha256_hex(&bytes),
        };
        if opts.check {
            // A kept module's record was matched by `up_to_date` (source, flags, compiler, archs,
            // bundle size and hash) and its code objects by `resources`: nothing left to compare.
            if secs.is_some() {
                check_committed(
                    s,
                    &rec,
                    record_of(&s.name),
                    &bundle_path(&s.name),
                    &mut problems,
                    &mut notes,
                );
            }
        } else {
            let gz = gzip(&bytes);
            write_if_changed(&bundle_path(&s.name), &gz)?;
            if std::fs::remove_file(legacy_path(&s.name)).is_ok() {
                println!(
                    "build-kernels: removed the uncompressed bundles/{}.hipfb (now bundles/{}.hipfb.gz)",
                    s.name, s.name
                );
            }
            records.push(rec);
        }
    }

    // Bundles and records of modules that no longer exist.
    let orphans: Vec<String> = {
        let mut o: Vec<String> = std::fs::read_dir(&bundles_dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let file = e.file_name().into_string().ok()?;
                        let stem = file
                            .strip_suffix(".hipfb.gz")
                            .or_else(|| file.strip_suffix(".hipfb"))?;
                        (!stem.is_empty()).then(|| stem.to_string())
                    })
                    .collect()
            })
            .unwrap_or_default();
        if let Some(m) = &committed {
            o.extend(m.modules.iter().map(|r| r.name.clone()));
        }
        o.sort();
        o.dedup();
        o.retain(|n| !sources.iter().any(|s| &s.name == n));
        o
    };
    if opts.check {
        for s in &sources {
            if legacy_path(&s.name).exists() {
                problems.push(format!(
                    "{}: bundles/{}.hipfb is an uncompressed bundle; bundles are committed as bundles/{}.hipfb.gz",
                    s.name, s.name, s.name
                ));
            }
        }
    }
    for o in &orphans {
        if opts.check {
            problems.push(format!(
                "{o}: committed bundle or manifest record for a module that no longer exists (kernels/{o}.hip)"
            ));
        } else {
            let _ = std::fs::remove_file(bundle_path(o));
            let _ = std::fs::remove_file(legacy_path(o));
            println!("build-kernels: removed bundles/{o}.hipfb.gz (no kernels/{o}.hip)");
        }
    }

    if !opts.check {
        std::fs::create_dir_all(&bundles_dir)
            .map_err(|e| format!("creating {}: {e}", bundles_dir.display()))?;
        let manifest = bundle::Manifest {
            prelude_sha256: prelude_sha.clone(),
            compiler: tc.version.clone(),
            flags: FLAGS.join(" "),
            archs: archs.clone(),
            skipped_archs: skipped.iter().map(|(a, _)| a.clone()).collect(),
            modules: records,
        };
        write_if_changed(&manifest_path, manifest.render().as_bytes())?;
    } else if let Some(m) = &committed {
        if m.prelude_sha256 != prelude_sha {
            notes.push("kernels/prelude.h changed since the bundles were built".into());
        }
    }

    // Report.
    let table = opts.table.unwrap_or(!opts.check);
    let mut flagged = Vec::new();
    for r in &reports {
        flagged.extend(print_report(r, table));
    }
    let total: u64 = reports.iter().map(|r| r.size).sum();
    println!(
        "\nbuild-kernels: {} module(s), {} kernels x {} archs, bundles {} in all, {:.1} s",
        reports.len(),
        reports
            .iter()
            .map(|r| r.res.first().map_or(0, |(_, k)| k.len()))
            .sum::<usize>(),
        archs.len(),
        mib(total),
        t0.elapsed().as_secs_f64()
    );
    if flagged.is_empty() {
        println!(
            "build-kernels: no scratch use (spills) on {}",
            WATCH_ARCHS.join(", ")
        );
    } else {
        for f in &flagged {
            println!("build-kernels: WARNING scratch/spill: {f}");
        }
    }
    for n in &notes {
        println!("build-kernels: note: {n}");
    }
    if problems.is_empty() {
        if opts.check {
            let by_record = kept.iter().filter(|k| k.is_some()).count();
            println!(
                "build-kernels --check: every committed bundle is present, fresh, and its module compiles \
                 ({} compiled now, {by_record} up to date for this compiler, checked by their records; \
                 `--check --force` compiles every module)",
                sources.len() - by_record
            );
        }
        Ok(())
    } else {
        for p in &problems {
            eprintln!(
                "build-kernels{}: {p}",
                if opts.check { " --check" } else { "" }
            );
        }
        Err(format!(
            "{} problem(s){}",
            problems.len(),
            if opts.check {
                "; run `cargo xtask build-kernels` and commit crates/rocm-kernels/bundles"
            } else {
                ""
            }
        ))
    }
}

/// `--check`: compares what was just built (`now`, which compiled) with the committed record
/// and bundle of the module.
///
/// Only the manifest is compared, not the bundle bytes: clang's output depends on the exact
/// compiler build (Debian's clang and AMD's ROCm clang differ, and so do their releases), so a
/// bundle rebuilt on another machine need not be bitwise equal to the committed one. What
/// matters is that the committed bundle was built from the current source (hash), flags and
/// archs, that it is the bundle its record describes, and that the source still compiles.
fn check_committed(
    s: &Source,
    now: &bundle::ModuleRecord,
    committed: Option<&bundle::ModuleRecord>,
    path: &Path,
    problems: &mut Vec<String>,
    notes: &mut Vec<String>,
) {
    let name = &s.name;
    let Some(rec) = committed else {
        problems.push(format!(
            "{name}: no committed bundle (not in bundles/manifest.txt)"
        ));
        return;
    };
    if !path.exists() {
        problems.push(format!("{name}: bundles/{name}.hipfb.gz is missing"));
        return;
    }
    let bytes = match read_gz(path) {
        Ok(b) => b,
        Err(e) => {
            problems.push(format!("{name}: bundles/{name}.hipfb.gz: {e}"));
            return;
        }
    };
    if rec.source_sha256 != now.source_sha256 {
        problems.push(format!(
            "{name}: stale: bundles/{name}.hipfb.gz was built from another source (manifest {}, current {})",
            &rec.source_sha256[..12.min(rec.source_sha256.len())],
            &now.source_sha256[..12]
        ));
        return;
    }
    if rec.flags != now.flags {
        problems.push(format!(
            "{name}: stale: built with flags `{}`, build-kernels now uses `{}`",
            rec.flags, now.flags
        ));
    }
    let missing: Vec<&str> = now
        .archs
        .iter()
        .filter(|a| !rec.archs.contains(a))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "{name}: stale: no code objects for {} (the bundle has {})",
            missing.join(" "),
            rec.archs.join(" ")
        ));
    }
    if bytes.len() as u64 != rec.bundle_size || sha256_hex(&bytes) != rec.bundle_sha256 {
        problems.push(format!(
            "{name}: bundles/{name}.hipfb.gz does not decompress to the bundle its manifest record describes (size/hash differ)"
        ));
    } else {
        match bundle::parse(&bytes) {
            Ok(b) if same_set(&b.targets(), &rec.archs) => {}
            Ok(b) => problems.push(format!(
                "{name}: bundles/{name}.hipfb.gz holds [{}], its record says [{}]",
                b.targets().join(" "),
                rec.archs.join(" ")
            )),
            Err(e) => problems.push(format!("{name}: bundles/{name}.hipfb.gz: {e}")),
        }
    }
    if rec.compiler == now.compiler {
        if rec.archs == now.archs && rec.bundle_sha256 != now.bundle_sha256 {
            notes.push(format!(
                "{name}: same compiler, but the rebuilt bundle differs bitwise from the committed one"
            ));
        }
    } else {
        notes.push(format!(
            "{name}: committed bundle built with `{}`, this toolchain is `{}` (not compared bitwise)",
            rec.compiler, now.compiler
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOTES: &str = "Displaying notes found in: .note
  Owner                Data size \tDescription
  AMDGPU               0x000006e8\tNT_AMDGPU_METADATA (AMDGPU Metadata)
    AMDGPU Metadata:
        ---
amdhsa.kernels:
  - .agpr_count:     0
    .args:
      - .offset:         0
        .size:           8
        .value_kind:     by_value
    .group_segment_fixed_size: 0
    .max_flat_workgroup_size: 1024
    .name:           uexp_f32
    .private_segment_fixed_size: 0
    .sgpr_count:     14
    .sgpr_spill_count: 0
    .uses_dynamic_stack: false
    .vgpr_count:     6
    .vgpr_spill_count: 0
  - .agpr_count:     4
    .group_segment_fixed_size: 1024
    .name:           lds_k
    .private_segment_fixed_size: 16
    .sgpr_count:     20
    .sgpr_spill_count: 0
    .uses_dynamic_stack: false
    .vgpr_count:     3
    .vgpr_spill_count: 2
amdhsa.target:   amdgcn-amd-amdhsa--gfx942
amdhsa.version:
  - 1
  - 2
...
";

    #[test]
    fn parses_readelf_metadata_notes() {
        let ks = parse_notes(NOTES);
        assert_eq!(ks.len(), 2);
        assert_eq!(
            ks[0],
            KernelRes {
                name: "lds_k".into(),
                vgpr: 3,
                agpr: 4,
                sgpr: 20,
                lds: 1024,
                scratch: 16,
                vgpr_spill: 2,
                sgpr_spill: 0,
                dynamic_stack: false,
            }
        );
        assert!(ks[0].uses_scratch());
        assert_eq!(ks[1].name, "uexp_f32");
        assert_eq!((ks[1].vgpr, ks[1].sgpr, ks[1].lds), (6, 14, 0));
        assert!(!ks[1].uses_scratch());
    }

    #[test]
    fn options() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let o = parse_options(&args(&[
            "--arch",
            "gfx942,gfx1100",
            "--arch=gfx942",
            "--check",
        ]))
        .unwrap();
        assert_eq!(o.archs, ["gfx942", "gfx1100"]);
        assert!(o.check && !o.force);
        let o = parse_options(&[]).unwrap();
        assert_eq!(o.archs.len(), bundle::DEFAULT_ARCHS.len());
        assert!(parse_options(&args(&["--arch", "gfx90a:"])).is_err());
        assert!(parse_options(&args(&["--jobs", "0"])).is_err());
        assert!(parse_options(&args(&["--bogus"])).is_err());
    }

    #[test]
    fn gzip_round_trips_deterministically() {
        // Something bundle-like: compressible runs and less compressible bytes.
        let mut data = vec![0u8; 10_000];
        data.extend((0..50_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
        data.extend(b"__CLANG_OFFLOAD_BUNDLE__".repeat(100));
        for input in [&data[..], b"", b"x"] {
            let gz = gzip(input);
            assert_eq!(gunzip(&gz).unwrap(), input);
            assert_eq!(gzip(input), gz, "same input, same bytes");
            // gzip magic, deflate, no FNAME/FEXTRA/FCOMMENT flags, mtime 0.
            assert_eq!(&gz[..4], &[0x1f, 0x8b, 8, 0]);
            assert_eq!(&gz[4..8], &[0, 0, 0, 0]);
        }
        assert!(gzip(&data).len() < data.len());
        let mut bad = gzip(&data);
        let n = bad.len();
        bad[n - 5] ^= 1; // the length trailer
        assert!(gunzip(&bad).is_err());
        assert!(gunzip(b"not gzip").is_err());
    }

    #[test]
    fn module_flags_pin_the_cuid() {
        assert!(module_flags("unary").ends_with("--no-offload-compress -cuid=unary"));
    }
}
