//! `cargo xtask install-rocm`: install (or find) the ROCm toolchain and read it back.
//!
//! The work is done by `scripts/install-rocm.sh` (headers, the real ROCm libraries, an AMDGPU
//! clang and a private glibc from Debian unstable, in a prefix; or nothing, where `$ROCM_PATH`
//! already holds a ROCm install). It is cached: when the prefix is complete it prints
//! `ROCm prefix up to date: <prefix>` and touches no network. Its `<prefix>/env.sh` is then read
//! back into a [`RocmEnv`], which the other commands use.
//!
//! Usage: `cargo xtask install-rocm [--prefix DIR] [--update | --force | --check] [--no-selftest]
//! [--tensile-archs LIST]` (the options are the script's: see `cargo xtask install-rocm --help`).
//! The prefix defaults to `$CANDLE_ROCM_PREFIX`, else `$HOME/.cache/candle-rocm/rocm-deb`.
//!
//! rocBLAS' GEMM kernels (its Tensile library, 2.9 GB for every architecture, inside Debian's
//! `librocblas4` package) are installed for the architectures `CANDLE_ROCM_TENSILE_ARCHS` (or
//! `--tensile-archs`) names: `auto` (default: this machine's AMD GPUs, plus `gfx1010` for the
//! tier-2 tests), `none`, `all`, or a list such as `"gfx90a gfx1100"`. Without them rocBLAS
//! aborts the process at its first GEMM; rocblas-safe refuses to create a handle instead.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the ROCm described by a [`RocmEnv`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RocmKind {
    /// Debian unstable's packages, unpacked into the prefix by `scripts/install-rocm.sh`; its
    /// libraries need unstable's glibc, so programs that load them run through `sid-run`.
    Debian,
    /// An existing ROCm install named by `$ROCM_PATH`; nothing was installed.
    System,
}

/// The ROCm toolchain, as `<prefix>/env.sh` describes it.
#[derive(Debug, Clone)]
pub struct RocmEnv {
    /// Where it comes from.
    pub kind: RocmKind,
    /// The install prefix (it holds `env.sh`).
    pub prefix: PathBuf,
    /// The env file this was read from.
    pub env_file: PathBuf,
    /// The ROCm include directory (`hip/hip_runtime_api.h`, `rocblas/`, `miopen/`).
    pub include: PathBuf,
    /// The directory of the ROCm shared libraries (`libamdhip64.so.6`, ...).
    pub lib_dir: PathBuf,
    /// A directory laid out like a ROCm install (`include/`, `lib/`, ...): the `ROCM_PATH` to
    /// use when loading the libraries.
    pub rocm_path: PathBuf,
    /// The wrapper that runs a program under the glibc the libraries need (`<prefix>/bin/sid-run`),
    /// for a Debian install; `None` where programs can load the libraries as they are.
    pub sid_run: Option<PathBuf>,
    /// The toolchain's `bin/`: `hip-clang`, `clang`, `ld.lld`, `clang-offload-bundler`,
    /// `llvm-readelf`, ...
    pub bin_dir: PathBuf,
    /// The AMDGPU device library bitcode directory, when one was found.
    pub device_lib_path: Option<PathBuf>,
    /// Extra clang arguments for bindgen over the ROCm headers.
    pub bindgen_clang_args: String,
    /// A host libclang directory for bindgen, when one was found.
    pub libclang_path: Option<PathBuf>,
    /// rocBLAS' Tensile (GEMM kernel) directory, when the install has one.
    pub tensile_dir: Option<PathBuf>,
    /// The GPU architectures the installer put Tensile kernels in for (empty for an existing
    /// install, whose contents the installer does not choose).
    pub tensile_archs: Vec<String>,
}

impl RocmEnv {
    /// Reads an `env.sh` written by `scripts/install-rocm.sh`.
    pub fn from_env_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "reading {}: {e}; run `cargo xtask install-rocm`",
                path.display()
            )
        })?;
        Self::parse(&text, path)
    }

    /// Parses the `export NAME="VALUE"` lines of an env file (values that refer to other
    /// variables, like `PATH`, are skipped).
    fn parse(text: &str, env_file: &Path) -> Result<Self, String> {
        let vars: HashMap<&str, &str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("export "))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim().trim_matches('"')))
            .filter(|(_, v)| !v.contains('$'))
            .collect();
        let get = |k: &str| -> Result<PathBuf, String> {
            match vars.get(k) {
                Some(v) if !v.is_empty() => Ok(PathBuf::from(v)),
                _ => Err(format!(
                    "{} does not set {k}; re-run `cargo xtask install-rocm`",
                    env_file.display()
                )),
            }
        };
        let opt = |k: &str| vars.get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let kind = match vars.get("CANDLE_ROCM_KIND").copied() {
            Some("deb") => RocmKind::Debian,
            Some("system") => RocmKind::System,
            other => {
                return Err(format!(
                    "{}: unknown CANDLE_ROCM_KIND {other:?}; re-run `cargo xtask install-rocm`",
                    env_file.display()
                ))
            }
        };
        Ok(Self {
            kind,
            prefix: get("ROCM_DEB_PREFIX")?,
            env_file: env_file.to_path_buf(),
            include: get("ROCM_DEB_INCLUDE")?,
            lib_dir: get("ROCM_DEB_LIB")?,
            rocm_path: get("CANDLE_ROCM_PATH")?,
            sid_run: opt("CANDLE_ROCM_SID_RUN"),
            bin_dir: get("CANDLE_ROCM_BIN")?,
            device_lib_path: opt("HIP_DEVICE_LIB_PATH"),
            bindgen_clang_args: vars
                .get("BINDGEN_EXTRA_CLANG_ARGS")
                .copied()
                .unwrap_or("")
                .to_string(),
            libclang_path: opt("LIBCLANG_PATH"),
            tensile_dir: opt("CANDLE_ROCM_TENSILE_DIR"),
            tensile_archs: vars
                .get("CANDLE_ROCM_TENSILE_ARCHS")
                .map(|v| v.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
        })
    }

    /// The device-only HIP compiler wrapper, if this install has one.
    pub fn hip_clang(&self) -> Option<PathBuf> {
        Some(self.bin_dir.join("hip-clang")).filter(|p| p.exists())
    }

    /// A few lines that say what was found.
    pub fn summary(&self) -> String {
        let show = |p: &Option<PathBuf>| {
            p.as_ref()
                .map_or("(none)".to_string(), |p| p.display().to_string())
        };
        let kind = match self.kind {
            RocmKind::Debian => "Debian unstable packages",
            RocmKind::System => "existing install ($ROCM_PATH)",
        };
        let tensile = match (&self.tensile_dir, self.tensile_archs.is_empty()) {
            (None, _) => "(none: rocBLAS GEMMs need CANDLE_ROCM_TENSILE_ARCHS)".to_string(),
            (Some(d), true) => d.display().to_string(),
            (Some(d), false) => format!("{} ({})", d.display(), self.tensile_archs.join(" ")),
        };
        format!(
            "ROCm: {kind} in {prefix} (source {env})\n  ROCM_PATH   {rocm}\n  include     {inc}\n  libraries   {lib}\n  \
             sid-run     {sid}\n  hip-clang   {clang}\n  device libs {dl}\n  Tensile     {tensile}\n  \
             bindgen     {bg} (libclang: {lc})",
            prefix = self.prefix.display(),
            env = self.env_file.display(),
            rocm = self.rocm_path.display(),
            inc = self.include.display(),
            lib = self.lib_dir.display(),
            sid = show(&self.sid_run),
            clang = show(&self.hip_clang()),
            dl = show(&self.device_lib_path),
            bg = self.bindgen_clang_args,
            lc = show(&self.libclang_path),
        )
    }
}

/// The workspace root (xtask's parent directory).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The prefix the script will use: `--prefix DIR` / `--prefix=DIR` in `args`, else
/// `$CANDLE_ROCM_PREFIX`, else `$HOME/.cache/candle-rocm/rocm-deb`.
fn prefix_from(args: &[String]) -> Result<PathBuf, String> {
    let mut from_args = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--prefix" {
            from_args = Some(it.next().ok_or("--prefix needs a directory")?.clone());
        } else if let Some(p) = a.strip_prefix("--prefix=") {
            from_args = Some(p.to_string());
        }
    }
    let p = match from_args.or_else(|| {
        std::env::var("CANDLE_ROCM_PREFIX")
            .ok()
            .filter(|p| !p.is_empty())
    }) {
        Some(p) => PathBuf::from(p),
        None => {
            let home = std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .ok_or("HOME is not set: pass --prefix DIR or set CANDLE_ROCM_PREFIX")?;
            PathBuf::from(home).join(".cache/candle-rocm/rocm-deb")
        }
    };
    let p = if p.is_absolute() {
        p
    } else {
        std::env::current_dir()
            .map_err(|e| format!("current directory: {e}"))?
            .join(p)
    };
    let s = p.to_string_lossy();
    Ok(PathBuf::from(s.trim_end_matches('/')))
}

/// Runs `scripts/install-rocm.sh` with `args` (output shown as it comes) and reads back the env
/// file it wrote.
pub fn install(args: &[String]) -> Result<RocmEnv, String> {
    let script = workspace_root().join("scripts/install-rocm.sh");
    if !script.is_file() {
        return Err(format!("{} is missing", script.display()));
    }
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: cargo xtask install-rocm [script options]; the script's help:\n");
        let _ = Command::new("bash").arg(&script).arg("--help").status();
        std::process::exit(0);
    }
    let prefix = prefix_from(args)?;
    let status = Command::new("bash")
        .arg(&script)
        .args(args)
        .env("CANDLE_ROCM_PREFIX", &prefix)
        .status()
        .map_err(|e| format!("running bash {}: {e}", script.display()))?;
    if !status.success() {
        return Err(format!(
            "{} failed ({status}); its last lines above say why",
            script.display()
        ));
    }
    let env = RocmEnv::from_env_file(&prefix.join("env.sh"))?;
    println!("{}", env.summary());
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEB: &str = r#"# candle-rocm ROCm environment (source me)
export CANDLE_ROCM_KIND="deb"
export CANDLE_ROCM_PATH="/p/rocm"
export CANDLE_ROCM_SID_RUN="/p/bin/sid-run"
export CANDLE_ROCM_BIN="/p/bin"
export ROCM_DEB_PREFIX="/p"
export ROCM_DEB_INCLUDE="/p/root/usr/include"
export ROCM_DEB_LIB="/p/root/usr/lib/x86_64-linux-gnu"
export HIP_DEVICE_LIB_PATH="/p/root/usr/lib/llvm-21/lib/clang/21/amdgcn/bitcode"
export CANDLE_ROCM_TENSILE_DIR="/p/root/usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library"
export CANDLE_ROCM_TENSILE_ARCHS="gfx1010 gfx90a"
export PATH="/p/bin:$PATH"
export BINDGEN_EXTRA_CLANG_ARGS="-I/p/root/usr/include -D__HIP_PLATFORM_AMD__"
export LIBCLANG_PATH="/usr/lib/llvm-14/lib"
"#;

    #[test]
    fn parses_a_debian_env_file() {
        let e = RocmEnv::parse(DEB, Path::new("/p/env.sh")).unwrap();
        assert_eq!(e.kind, RocmKind::Debian);
        assert_eq!(e.prefix, Path::new("/p"));
        assert_eq!(e.rocm_path, Path::new("/p/rocm"));
        assert_eq!(e.lib_dir, Path::new("/p/root/usr/lib/x86_64-linux-gnu"));
        assert_eq!(e.include, Path::new("/p/root/usr/include"));
        assert_eq!(e.sid_run.as_deref(), Some(Path::new("/p/bin/sid-run")));
        assert_eq!(e.bin_dir, Path::new("/p/bin"));
        assert_eq!(
            e.bindgen_clang_args,
            "-I/p/root/usr/include -D__HIP_PLATFORM_AMD__"
        );
        assert_eq!(
            e.libclang_path.as_deref(),
            Some(Path::new("/usr/lib/llvm-14/lib"))
        );
        assert!(e.summary().contains("/p/rocm"));
        assert_eq!(
            e.tensile_dir.as_deref(),
            Some(Path::new(
                "/p/root/usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library"
            ))
        );
        assert_eq!(e.tensile_archs, vec!["gfx1010", "gfx90a"]);
        assert!(e.summary().contains("(gfx1010 gfx90a)"), "{}", e.summary());
    }

    #[test]
    fn an_env_file_without_tensile_has_none() {
        let text = DEB
            .lines()
            .filter(|l| !l.contains("TENSILE"))
            .collect::<Vec<_>>()
            .join("\n");
        let e = RocmEnv::parse(&text, Path::new("/p/env.sh")).unwrap();
        assert_eq!((e.tensile_dir, e.tensile_archs.len()), (None, 0));
        let text = DEB.replace(
            r#"TENSILE_DIR="/p/root/usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library""#,
            r#"TENSILE_DIR="""#,
        );
        let e = RocmEnv::parse(&text, Path::new("/p/env.sh")).unwrap();
        assert!(
            e.summary().contains("CANDLE_ROCM_TENSILE_ARCHS"),
            "{}",
            e.summary()
        );
    }

    #[test]
    fn a_system_install_has_no_sid_run() {
        let text = DEB
            .replace(r#"KIND="deb""#, r#"KIND="system""#)
            .replace(r#"SID_RUN="/p/bin/sid-run""#, r#"SID_RUN="""#);
        let e = RocmEnv::parse(&text, Path::new("/p/env.sh")).unwrap();
        assert_eq!(e.kind, RocmKind::System);
        assert_eq!(e.sid_run, None);
    }

    #[test]
    fn a_missing_variable_is_named() {
        let text = DEB.replace("export ROCM_DEB_LIB", "# ");
        let err = RocmEnv::parse(&text, Path::new("/p/env.sh")).unwrap_err();
        assert!(err.contains("ROCM_DEB_LIB"), "{err}");
    }

    #[test]
    fn prefix_comes_from_the_arguments_first() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            prefix_from(&args(&["--prefix", "/x/y/"])).unwrap(),
            Path::new("/x/y")
        );
        assert_eq!(
            prefix_from(&args(&["--update", "--prefix=/z"])).unwrap(),
            Path::new("/z")
        );
        assert!(prefix_from(&args(&["--prefix"])).is_err());
    }
}
