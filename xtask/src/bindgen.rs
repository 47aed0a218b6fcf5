//! `cargo xtask bindgen`: regenerates the committed FFI bindings from the ROCm headers.
//!
//! Each [`Spec`] turns one set of headers into one Rust file: bindgen runs with a narrow
//! allowlist, in dynamic-loading mode (every function is a field
//! `Result<unsafe extern "C" fn(..), libloading::Error>` of one struct, checked by the driver, so
//! a missing symbol is an error at call time, never a panic). The output gets a header naming the
//! ROCm version, a `FUNCTIONS` list (the tier-2 tests check each against the real library), and
//! is formatted with rustfmt. Lint exemptions live on the `mod` items in the crate's `sys/mod.rs`.
//!
//! To add a header set (rocBLAS, MIOpen), add a [`Spec`] to [`SPECS`]; `reuse` makes it import
//! HIP types (e.g. `hipStream_t`) from hip-core instead of declaring its own.
//!
//! Usage: `cargo xtask bindgen [--include DIR] [--only NAME[,NAME..]] [--check]`
//!
//! * `--include DIR`: the ROCm include directory (default: `$ROCM_PATH/include`,
//!   `$ROCM_DEB_INCLUDE`, `/opt/rocm-deb/root/usr/include`, `/opt/rocm/include`, the first that
//!   holds `hip/hip_runtime_api.h`);
//! * `--only`: regenerate only the named specs (`hip`, `hiprtc`, `rocblas`, `miopen`, `rccl`);
//! * `--check`: write nothing; fail if a committed file differs from what would be generated.
//!
//! bindgen needs libclang at run time (`LIBCLANG_PATH`, e.g. `/usr/lib/llvm-14/lib`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// One generated bindings file.
struct Spec {
    /// Short name, for `--only` and messages.
    name: &'static str,
    /// The output file, relative to the workspace root.
    out: &'static str,
    /// Headers to parse, relative to the include directory.
    headers: &'static [&'static str],
    /// Extra clang arguments (language, defines); `-I<include dir>` is added.
    clang_args: &'static [&'static str],
    /// The struct that holds the function table.
    library_struct: &'static str,
    /// Exact function names to bind (each must exist in the headers).
    functions: &'static [&'static str],
    /// Extra types to bind even if no function refers to them (regexes).
    types: &'static [&'static str],
    /// `#define`d constants and variables to bind (regexes).
    vars: &'static [&'static str],
    /// Types taken from another bindings module instead of being generated: `(path, names)`,
    /// e.g. `("crate::sys::hip", &["hipStream_t", "ihipStream_t"])`.
    reuse: &'static [(&'static str, &'static [&'static str])],
    /// Types generated as opaque blobs of the right size and alignment (regexes): structs whose
    /// fields nothing reads, e.g. bit fields whose accessors would be unsafe code of bindgen's.
    opaque: &'static [&'static str],
    /// C declarations parsed after the headers (our own, written from the library's API
    /// documentation), for API that an older installed header lacks; guard them with the
    /// header's version macros so that a newer header's own declarations win.
    supplement: Option<&'static str>,
}

/// NCCL 2.14's non-blocking communicator API, which Debian's RCCL header (RCCL 5.4, NCCL API
/// 2.13.4) predates. `ncclConfig_t` is declared in its first (2.14) layout: NCCL reads a config
/// by its `size` and `version` fields (it copies `size` bytes and gives every field newer than
/// `version` its default), so this layout is valid for every later library, and the safe layer
/// (crates/rccl-safe) sets `size` to the end of `blocking` whatever header the bindings came
/// from. A header of NCCL >= 2.14 (ROCm >= 5.5, NCCL) declares all of this itself.
const NCCL_2_14_SUPPLEMENT: &str = r#"
#include <stddef.h>
#if NCCL_VERSION_CODE < 21400
typedef struct ncclConfig_v21400 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
} ncclConfig_t;
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
#endif
"#;

/// Every bindings file the workspace commits.
const SPECS: &[Spec] = &[
    Spec {
        name: "hip",
        out: "crates/hip-core/src/sys/hip.rs",
        headers: &["hip/hip_runtime_api.h"],
        clang_args: &["-x", "c", "-D__HIP_PLATFORM_AMD__"],
        library_struct: "HipRuntime",
        functions: &[
            "hipInit",
            "hipDriverGetVersion",
            "hipRuntimeGetVersion",
            "hipGetDeviceCount",
            // `hipGetDeviceProperties` is a macro for this since ROCm 6.0 (new struct layout).
            "hipGetDevicePropertiesR0600",
            "hipDeviceGetAttribute",
            "hipSetDevice",
            "hipGetDevice",
            "hipDeviceSynchronize",
            "hipMemGetInfo",
            "hipDeviceCanAccessPeer",
            "hipMalloc",
            "hipFree",
            "hipHostMalloc",
            "hipHostFree",
            "hipMemcpyHtoDAsync",
            "hipMemcpyDtoHAsync",
            "hipMemcpyDtoDAsync",
            "hipMemcpyPeerAsync",
            "hipMemsetD8Async",
            "hipStreamCreateWithFlags",
            "hipStreamDestroy",
            "hipStreamSynchronize",
            "hipStreamQuery",
            "hipStreamWaitEvent",
            "hipEventCreateWithFlags",
            "hipEventDestroy",
            "hipEventRecord",
            "hipEventSynchronize",
            "hipEventQuery",
            "hipEventElapsedTime",
            "hipModuleLoadData",
            "hipModuleUnload",
            "hipModuleGetFunction",
            "hipFuncGetAttribute",
            "hipModuleLaunchKernel",
            "hipGetErrorName",
            "hipGetErrorString",
            // Clears HIP 7's per-thread "last error" after a failure hip-core handles itself.
            "hipGetLastError",
        ],
        types: &[
            "hipError_t",
            "hipDeviceAttribute_t",
            "hipFunction_attribute",
            "hipDeviceProp_tR0600",
            "hipDeviceArch_t",
        ],
        vars: &[
            "hipStream(Default|NonBlocking)",
            "hipEvent(Default|BlockingSync|DisableTiming|Interprocess)",
            "hipHostMalloc(Default|Portable|Mapped|WriteCombined|NonCoherent|Coherent)",
            "HIP_VERSION(_MAJOR|_MINOR|_PATCH)?",
        ],
        reuse: &[],
        opaque: &["hipDeviceArch_t"],
        supplement: None,
    },
    Spec {
        name: "hiprtc",
        out: "crates/hip-core/src/sys/hiprtc.rs",
        headers: &["hip/hiprtc.h"],
        clang_args: &[
            "-x",
            "c",
            "-D__HIP_PLATFORM_AMD__",
            "-Wno-pragma-once-outside-header",
        ],
        library_struct: "HipRtc",
        functions: &[
            "hiprtcVersion",
            "hiprtcGetErrorString",
            "hiprtcCreateProgram",
            "hiprtcCompileProgram",
            "hiprtcGetProgramLogSize",
            "hiprtcGetProgramLog",
            "hiprtcGetCodeSize",
            "hiprtcGetCode",
            "hiprtcDestroyProgram",
        ],
        types: &["hiprtcResult"],
        vars: &[],
        // hipRTC's calls above use no HIP type; were one added (e.g. the hiprtcLink* calls use
        // `hipJitOption`), list it here: ("crate::sys::hip", &["hipJitOption"]).
        reuse: &[],
        opaque: &[],
        supplement: None,
    },
    Spec {
        name: "rocblas",
        out: "crates/rocblas-safe/src/sys/rocblas.rs",
        headers: &["rocblas/rocblas.h"],
        clang_args: &["-x", "c", "-D__HIP_PLATFORM_AMD__"],
        library_struct: "RocBlas",
        functions: &[
            "rocblas_create_handle",
            "rocblas_destroy_handle",
            "rocblas_set_stream",
            "rocblas_get_stream",
            "rocblas_set_pointer_mode",
            "rocblas_get_pointer_mode",
            "rocblas_set_math_mode",
            "rocblas_get_math_mode",
            // Deterministic GEMMs: atomics are allowed by default on ROCm 6 (split-K).
            "rocblas_set_atomics_mode",
            "rocblas_get_atomics_mode",
            "rocblas_initialize",
            "rocblas_sgemm",
            "rocblas_dgemm",
            "rocblas_sgemm_strided_batched",
            "rocblas_dgemm_strided_batched",
            "rocblas_gemm_ex",
            "rocblas_gemm_strided_batched_ex",
            "rocblas_status_to_string",
            "rocblas_get_version_string",
            "rocblas_get_version_string_size",
        ],
        types: &[
            "rocblas_status",
            "rocblas_operation",
            "rocblas_datatype",
            "rocblas_pointer_mode",
            "rocblas_math_mode",
            "rocblas_atomics_mode",
            "rocblas_gemm_algo",
            "rocblas_gemm_flags",
        ],
        vars: &["ROCBLAS_VERSION_(MAJOR|MINOR|PATCH)"],
        // One `hipStream_t` in the whole workspace: rocblas_set_stream takes hip-core's.
        reuse: &[("hip_core::sys::hip", &["hipStream_t", "ihipStream_t"])],
        opaque: &[],
        supplement: None,
    },
    Spec {
        name: "miopen",
        out: "crates/miopen-safe/src/sys/miopen.rs",
        headers: &["miopen/miopen.h"],
        // miopen.h is C++ (`extern "C"` around empty-struct handle types) and includes the HIP
        // runtime header for hipStream_t.
        clang_args: &["-x", "c++", "-std=c++17", "-D__HIP_PLATFORM_AMD__"],
        library_struct: "MIOpen",
        functions: &[
            "miopenGetErrorString",
            "miopenGetVersion",
            "miopenCreateWithStream",
            "miopenDestroy",
            "miopenCreateTensorDescriptor",
            "miopenSetTensorDescriptor",
            "miopenDestroyTensorDescriptor",
            "miopenCreateConvolutionDescriptor",
            "miopenInitConvolutionNdDescriptor",
            "miopenSetConvolutionGroupCount",
            "miopenGetConvolutionNdForwardOutputDim",
            "miopenDestroyConvolutionDescriptor",
            "miopenConvolutionForwardGetWorkSpaceSize",
            "miopenFindConvolutionForwardAlgorithm",
            "miopenConvolutionForward",
            "miopenConvolutionBackwardDataGetWorkSpaceSize",
            "miopenFindConvolutionBackwardDataAlgorithm",
            "miopenConvolutionBackwardData",
            // Immediate mode, the default algorithm search (docs/miopen.md).
            "miopenConvolutionForwardGetSolutionCount",
            "miopenConvolutionForwardGetSolution",
            "miopenConvolutionForwardCompileSolution",
            "miopenConvolutionForwardImmediate",
            "miopenConvolutionBackwardDataGetSolutionCount",
            "miopenConvolutionBackwardDataGetSolution",
            "miopenConvolutionBackwardDataCompileSolution",
            "miopenConvolutionBackwardDataImmediate",
            "miopenCreatePoolingDescriptor",
            "miopenSetNdPoolingDescriptor",
            "miopenGetPoolingNdForwardOutputDim",
            "miopenPoolingForward",
            "miopenDestroyPoolingDescriptor",
        ],
        types: &[
            "miopenStatus_t",
            "miopenDataType_t",
            "miopenConvolutionMode_t",
            "miopenPoolingMode_t",
            "miopenConvFwdAlgorithm_t",
            "miopenConvBwdDataAlgorithm_t",
            "miopenConvAlgorithm_t",
        ],
        vars: &[],
        // One `hipStream_t` in the whole workspace: miopenCreateWithStream takes hip-core's.
        reuse: &[("hip_core::sys::hip", &["hipStream_t", "ihipStream_t"])],
        opaque: &[],
        supplement: None,
    },
    Spec {
        name: "rccl",
        out: "crates/rccl-safe/src/sys/rccl.rs",
        headers: &["rccl/rccl.h"],
        // rccl.h includes the HIP runtime header (hipStream_t) and hip_fp16.h; it parses as C.
        clang_args: &["-x", "c", "-D__HIP_PLATFORM_AMD__"],
        library_struct: "Rccl",
        functions: &[
            "ncclGetVersion",
            "ncclGetUniqueId",
            "ncclCommInitRank",
            "ncclCommInitAll",
            // NCCL >= 2.14 (RCCL >= 5.5): non-blocking init, so that a rank that never joins is a
            // timeout, not a hang (see NCCL_2_14_SUPPLEMENT).
            "ncclCommInitRankConfig",
            "ncclCommFinalize",
            "ncclCommDestroy",
            "ncclCommAbort",
            "ncclCommGetAsyncError",
            "ncclCommCount",
            "ncclCommCuDevice",
            "ncclCommUserRank",
            "ncclGetErrorString",
            "ncclGetLastError",
            "ncclAllReduce",
            "ncclBroadcast",
            "ncclReduce",
            "ncclAllGather",
            "ncclReduceScatter",
            "ncclSend",
            "ncclRecv",
            "ncclGroupStart",
            "ncclGroupEnd",
        ],
        types: &[
            "ncclResult_t",
            "ncclRedOp_t",
            "ncclDataType_t",
            "ncclUniqueId",
            "ncclConfig_t",
            "ncclComm_t",
        ],
        vars: &["NCCL_(MAJOR|MINOR|PATCH|VERSION_CODE|UNIQUE_ID_BYTES)"],
        // One `hipStream_t` in the whole workspace: the collectives take hip-core's.
        reuse: &[("hip_core::sys::hip", &["hipStream_t", "ihipStream_t"])],
        opaque: &[],
        supplement: Some(NCCL_2_14_SUPPLEMENT),
    },
];

/// Entry point of `cargo xtask bindgen`.
pub fn run(args: &[String]) -> Result<(), String> {
    let mut include: Option<PathBuf> = None;
    let mut only: Option<Vec<String>> = None;
    let mut check = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--include" => {
                let v = it.next().ok_or("--include needs a directory")?;
                include = Some(PathBuf::from(v));
            }
            "--only" => {
                let v = it.next().ok_or("--only needs a list of names")?;
                only = Some(v.split(',').map(|s| s.trim().to_string()).collect());
            }
            "--check" => check = true,
            "-h" | "--help" => {
                println!(
                    "usage: cargo xtask bindgen [--include DIR] [--only {}] [--check]",
                    SPECS.iter().map(|s| s.name).collect::<Vec<_>>().join(",")
                );
                return Ok(());
            }
            other => return Err(format!("unknown argument `{other}`; try --help")),
        }
    }
    if let Some(names) = &only {
        for n in names {
            if !SPECS.iter().any(|s| s.name == n) {
                return Err(format!("no bindings named `{n}`"));
            }
        }
    }

    let include = match include {
        Some(dir) => {
            if !dir.join("hip/hip_runtime_api.h").is_file() {
                return Err(format!(
                    "{} does not hold hip/hip_runtime_api.h",
                    dir.display()
                ));
            }
            dir
        }
        None => find_include_dir()?,
    };
    let version = hip_version(&include)?;
    let root = workspace_root();
    eprintln!(
        "bindgen: ROCm headers {} (HIP {version})",
        include.display()
    );

    let mut stale = Vec::new();
    for spec in SPECS {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| n == spec.name))
        {
            continue;
        }
        let text = generate(spec, &include, &version)?;
        let out = root.join(spec.out);
        if check {
            let old = std::fs::read_to_string(&out).unwrap_or_default();
            if old != text {
                stale.push(spec.out);
            }
        } else {
            std::fs::write(&out, &text).map_err(|e| format!("writing {}: {e}", out.display()))?;
            eprintln!("bindgen: wrote {}", spec.out);
        }
    }
    if !stale.is_empty() {
        return Err(format!(
            "out of date: {}; run `cargo xtask bindgen`",
            stale.join(", ")
        ));
    }
    Ok(())
}

/// The workspace root (the parent of this crate's directory).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}

/// The first candidate include directory that holds the HIP headers.
fn find_include_dir() -> Result<PathBuf, String> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("ROCM_PATH").filter(|p| !p.is_empty()) {
        candidates.push(PathBuf::from(p).join("include"));
    }
    if let Some(p) = std::env::var_os("ROCM_DEB_INCLUDE").filter(|p| !p.is_empty()) {
        candidates.push(PathBuf::from(p));
    }
    candidates.push(PathBuf::from("/opt/rocm-deb/root/usr/include"));
    candidates.push(PathBuf::from("/opt/rocm/include"));
    candidates
        .iter()
        .find(|d| d.join("hip/hip_runtime_api.h").is_file())
        .cloned()
        .ok_or_else(|| {
            format!(
                "no ROCm headers found: looked for hip/hip_runtime_api.h in {}. Install the ROCm \
                 headers (`cargo xtask install-rocm`, or the libamdhip64-dev package), set \
                 ROCM_PATH, or pass --include DIR",
                candidates
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// `major.minor.patch` from `hip/hip_version.h`.
fn hip_version(include: &Path) -> Result<String, String> {
    let path = include.join("hip/hip_version.h");
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let field = |name: &str| -> Result<String, String> {
        text.lines()
            .find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some("#define") && w.next() == Some(name))
                    .then(|| w.next().map(str::to_string))
                    .flatten()
            })
            .ok_or_else(|| format!("{} does not define {name}", path.display()))
    };
    Ok(format!(
        "{}.{}.{}",
        field("HIP_VERSION_MAJOR")?,
        field("HIP_VERSION_MINOR")?,
        field("HIP_VERSION_PATCH")?
    ))
}

/// Runs bindgen for one spec and returns the finished, formatted file.
fn generate(spec: &Spec, include: &Path, version: &str) -> Result<String, String> {
    let mut builder = bindgen::Builder::default()
        .clang_args(spec.clang_args.iter().copied())
        .clang_arg(format!("-I{}", include.display()))
        .dynamic_library_name(spec.library_struct)
        .dynamic_link_require_all(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .generate_comments(false)
        .formatter(bindgen::Formatter::None);
    for header in spec.headers {
        let path = include.join(header);
        if !path.is_file() {
            return Err(format!(
                "{} not found (the {} headers; `cargo xtask install-rocm` installs them)",
                path.display(),
                spec.name
            ));
        }
    }
    match spec.supplement {
        // One translation unit: the headers, then our declarations, which test the headers'
        // version macros.
        Some(extra) => {
            let mut unit = String::new();
            for header in spec.headers {
                unit.push_str(&format!("#include <{header}>\n"));
            }
            unit.push_str(extra);
            builder = builder.header_contents(&format!("{}_bindings.h", spec.name), &unit);
        }
        None => {
            for header in spec.headers {
                builder = builder.header(include.join(header).display().to_string());
            }
        }
    }
    for f in spec.functions {
        builder = builder.allowlist_function(format!("^{f}$"));
    }
    for t in spec.types {
        builder = builder.allowlist_type(format!("^({t})$"));
    }
    for v in spec.vars {
        builder = builder.allowlist_var(format!("^({v})$"));
    }
    for t in spec.opaque {
        builder = builder.opaque_type(format!("^({t})$"));
    }
    let mut uses = Vec::new();
    for (module, names) in spec.reuse {
        for n in *names {
            builder = builder.blocklist_type(format!("^{n}$"));
        }
        uses.push(format!("pub use {module}::{{{}}};", names.join(", ")));
    }

    // bindgen panics when libclang cannot be loaded; turn that into an error with the fix.
    let generated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.generate()))
        .map_err(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!(
                "bindgen failed for {} ({msg}); it needs libclang: set LIBCLANG_PATH (e.g. \
                 /usr/lib/llvm-14/lib) or install libclang-dev",
                spec.name
            )
        })?
        .map_err(|e| format!("bindgen failed for {}: {e}", spec.name))?;
    let body = generated.to_string();
    let found = table_functions(&body, spec.library_struct)?;
    let body = strip_panicking_wrappers(&body, &found)?;

    let missing: Vec<&str> = spec
        .functions
        .iter()
        .copied()
        .filter(|f| !found.iter().any(|g| g == f))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{}: the headers do not declare {} (renamed or removed in this ROCm version?)",
            spec.name,
            missing.join(", ")
        ));
    }

    let mut text = String::new();
    text.push_str(&format!(
        "// Generated by `cargo xtask bindgen` from the ROCm {} headers (HIP {version}): {}.\n\
         // Do not edit; change xtask/src/bindgen.rs and regenerate.\n{}\n",
        major_minor(version),
        spec.headers.join(", "),
        if spec.supplement.is_some() {
            format!(
                "// Declarations the header lacks come from the `supplement` of the `{}` spec there.\n",
                spec.name
            )
        } else {
            String::new()
        },
    ));
    for u in &uses {
        text.push_str(u);
        text.push('\n');
    }
    text.push_str(&format!(
        "\n/// The functions of [`{}`], in table order (each a `Result` field, checked at call time).\n\
         pub const FUNCTIONS: &[&str] = &[{}];\n\n",
        spec.library_struct,
        found
            .iter()
            .map(|f| format!("\"{f}\""))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    text.push_str(&body);
    annotate_unsafe(&rustfmt(&text)?, spec.name)
}

/// The `// SAFETY:` line put before the `unsafe` block of every zero-filling `Default` impl
/// bindgen writes (`MaybeUninit::uninit()`, `write_bytes(.., 0, 1)`, `assume_init()`).
const ZEROED_DEFAULT_SAFETY: &str = "// SAFETY: every field of this plain C struct (integers, \
     floats, raw pointers, arrays and structs of those) is valid as all-zero bytes, which \
     write_bytes gives before assume_init.";

/// Documents the `unsafe` blocks of bindgen's output: each zero-filling `Default` impl gets
/// [`ZEROED_DEFAULT_SAFETY`]; any other `unsafe` block is an error naming the line, so that a
/// new kind of generated unsafe code is looked at (and documented here) before it is committed.
fn annotate_unsafe(text: &str, name: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len() + 4096);
    let mut previous = "";
    for (i, line) in text.lines().enumerate() {
        let code = line.trim_start();
        let is_block = code.starts_with("unsafe {") || code.contains("= unsafe {");
        if is_block {
            if !previous.contains("MaybeUninit::<Self>::uninit()") {
                return Err(format!(
                    "{name}: bindgen wrote an unsafe block at line {} that has no SAFETY text \
                     in xtask/src/bindgen.rs: `{code}`",
                    i + 1
                ));
            }
            let indent = &line[..line.len() - code.len()];
            out.push_str(&format!("{indent}{ZEROED_DEFAULT_SAFETY}\n"));
        }
        out.push_str(line);
        out.push('\n');
        previous = line;
    }
    Ok(out)
}

/// The function fields of the dynamic-loading struct, in order.
fn table_functions(body: &str, library_struct: &str) -> Result<Vec<String>, String> {
    let start = body
        .find(&format!("pub struct {library_struct}"))
        .ok_or_else(|| format!("bindgen output has no `{library_struct}` struct"))?;
    let rest = &body[start..];
    let end = rest.find('}').unwrap_or(rest.len());
    let mut names = Vec::new();
    // Fields look like `pub hipInit : Result < unsafe extern "C" fn (..) -> .., :: libloading :: Error >`
    // (token spacing: the formatter has not run yet).
    for part in rest[..end].split("pub ").skip(1) {
        if let Some((name, ty)) = part.split_once(':') {
            let name = name.trim();
            if ty.trim_start().starts_with("Result")
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                names.push(name.to_string());
            }
        }
    }
    if names.is_empty() {
        return Err(format!("no functions found in `{library_struct}`"));
    }
    Ok(names)
}

/// Removes bindgen's `pub unsafe fn name(&self, ..)` convenience methods: they `expect` the
/// symbol and so would panic on a missing one. Callers use the `Result` fields instead.
fn strip_panicking_wrappers(body: &str, functions: &[String]) -> Result<String, String> {
    let mut out = body.to_string();
    for f in functions {
        let pattern = format!("pub unsafe fn {f} (& self");
        let Some(start) = out.find(&pattern) else {
            return Err(format!(
                "bindgen output has no wrapper method `{f}` to strip"
            ));
        };
        let open = start
            + out[start..]
                .find('{')
                .ok_or_else(|| format!("wrapper `{f}` has no body"))?;
        let mut depth = 0usize;
        let mut end = None;
        for (i, c) in out[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(open + i + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
        let end = end.ok_or_else(|| format!("wrapper `{f}` is not closed"))?;
        out.replace_range(start..end, "");
    }
    if out.contains("Expected function, got error.") {
        return Err("a panicking bindgen wrapper survived stripping".into());
    }
    Ok(out)
}

fn major_minor(version: &str) -> String {
    version.splitn(3, '.').take(2).collect::<Vec<_>>().join(".")
}

/// Formats Rust source with rustfmt (edition 2021), as `cargo fmt` would.
fn rustfmt(text: &str) -> Result<String, String> {
    use std::io::Write;
    let rustfmt = std::env::var_os("RUSTFMT").unwrap_or_else(|| "rustfmt".into());
    let mut child = Command::new(&rustfmt)
        .args(["--edition", "2021", "--emit", "stdout", "--quiet"])
        .current_dir(workspace_root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!("running rustfmt: {e} (install it with `rustup component add rustfmt`)")
        })?;
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(text.as_bytes())
        .map_err(|e| format!("writing to rustfmt: {e}"))?;
    let out = child
        .wait_with_output()
        .map_err(|e| format!("running rustfmt: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "rustfmt failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("rustfmt output: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_functions_reads_result_fields_in_order() {
        let body = "pub struct Lib { __library: ::libloading::Library, \
                    pub hipInit: Result<unsafe extern \"C\" fn(flags: u32) -> hipError_t, ::libloading::Error>, \
                    pub hipFree: Result<unsafe extern \"C\" fn(ptr: *mut c_void) -> hipError_t, ::libloading::Error>,\n}\n\
                    impl Lib { pub unsafe fn other(&self) {} }";
        assert_eq!(
            table_functions(body, "Lib").unwrap(),
            ["hipInit", "hipFree"]
        );
    }

    #[test]
    fn specs_are_consistent() {
        for spec in SPECS {
            assert!(!spec.functions.is_empty(), "{}", spec.name);
            let mut f = spec.functions.to_vec();
            f.sort_unstable();
            f.dedup();
            assert_eq!(
                f.len(),
                spec.functions.len(),
                "{}: duplicate function",
                spec.name
            );
        }
        assert_eq!(major_minor("6.4.43484"), "6.4");
    }

    #[test]
    fn wrappers_are_stripped() {
        let body = "impl Lib { pub unsafe fn from_library () {} \
                    pub unsafe fn hipInit (& self , flags : u32) -> hipError_t { \
                    (self . hipInit . as_ref () . expect (\"Expected function, got error.\")) (flags) } }";
        let out = strip_panicking_wrappers(body, &["hipInit".to_string()]).unwrap();
        assert_eq!(out, "impl Lib { pub unsafe fn from_library () {}  }");
    }
}
