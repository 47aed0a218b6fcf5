//! One-dtype variants of a module's source, for run-time compilation.
//!
//! A module instantiates its kernels for every element type, one top-level macro call per type
//! (`RK_BINARY_FLOAT(f32)`, `RK_CAST_FROM(f16, u8, ...)`, `AT_DECODE(bf16, bf16, 128)`). Run-time
//! compilers (NVRTC on NVIDIA, hipRTC where no ahead-of-time code object fits) take time in
//! proportion to the kernels they compile, and a model needs few of them: an f32 model needs the
//! f32 instantiations and the index types it gathers with. So a kernel is compiled from its
//! module's **variant** for the kernel's first element type ([`kernel_variant`]: the first
//! underscore-separated token of its name that is a dtype, e.g. `f32` for `badd_f32` and
//! `cast_f32_f16`, `u32` for `index_select_u32_f32`, with `f8e4m3` last), a copy of the module's source
//! ([`variant_source`]) in which the top-level instantiation lines whose first dtype argument is
//! another type are blanked (lines without any dtype argument, such as `QK_ALL(q4k, qk_q4k)`,
//! stay; line numbers are kept for diagnostics).
//!
//! The rule relies on how the modules are written: each instantiation line's first dtype
//! argument is the first dtype in the names of the kernels it defines. The tier-2 test
//! (`tests/rocm_libraries.rs`) compiles every module's variants with hipRTC and checks that
//! each kernel of the committed bundle is defined by its variant; at run time a kernel missing
//! from its variant (or a variant that fails to compile) falls back to the whole module.

/// The dtype tokens kernel names and instantiation lines use, in a fixed order.
pub const DTYPE_TOKENS: &[&str] = &[
    "u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64", "f8e4m3",
];

/// The variant a kernel is compiled from: the first underscore-separated token of its name
/// that is a dtype, or `None` when the name has none (the whole module is used). `f8e4m3`
/// counts only when it is the name's one dtype: the f8 casts and scatters are instantiated per
/// the other type (`RK_CAST_F8_BOTH(bf16)` defines `cast_bf16_f8e4m3` and `cast_f8e4m3_bf16`).
pub fn kernel_variant(kernel: &str) -> Option<&'static str> {
    let mut dtypes = kernel.split('_').filter_map(dtype_token);
    let first = dtypes.next()?;
    if first == F8 {
        Some(dtypes.next().unwrap_or(F8))
    } else {
        Some(first)
    }
}

/// The f8 dtype token.
const F8: &str = "f8e4m3";

/// `token` as one of [`DTYPE_TOKENS`], if it is one.
fn dtype_token(token: &str) -> Option<&'static str> {
    DTYPE_TOKENS.iter().copied().find(|t| *t == token)
}

/// `module_source` with every top-level instantiation line whose first dtype argument is not
/// `dtype` replaced by an empty line. Lines inside a multi-line `#define`, and everything that
/// is not a one-line call of an upper-case macro at the start of a line, are kept.
pub fn variant_source(module_source: &str, dtype: &str) -> String {
    let mut out = String::with_capacity(module_source.len());
    let mut in_define_body = false;
    for line in module_source.split_inclusive('\n') {
        let text = line.trim_end_matches(['\n', '\r']);
        let drop =
            !in_define_body && instantiation_first_dtype(text).is_some_and(|first| first != dtype);
        in_define_body = text.ends_with('\\');
        if drop {
            out.push('\n');
        } else {
            out.push_str(line);
        }
    }
    out
}

/// For a line `NAME(args)` (an upper-case macro name at column 0, the call closed on the same
/// line): the first argument token that is a dtype. `None` for any other line, or a call
/// without a dtype argument.
fn instantiation_first_dtype(line: &str) -> Option<&'static str> {
    let open = line.find('(')?;
    let name = &line[..open];
    let is_macro_name = name.starts_with(|c: char| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    let args = line[open + 1..].trim_end().strip_suffix(')')?;
    if !is_macro_name {
        return None;
    }
    args.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .find_map(dtype_token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_s_variant_is_its_first_dtype_token() {
        assert_eq!(kernel_variant("badd_f32"), Some("f32"));
        assert_eq!(kernel_variant("cast_f32_f16"), Some("f32"));
        assert_eq!(kernel_variant("index_select_u32_f32"), Some("u32"));
        assert_eq!(kernel_variant("qmatvec_i8_q4k_f32"), Some("f32"));
        assert_eq!(kernel_variant("attn_decode_bf16_d128_q4"), Some("bf16"));
        assert_eq!(kernel_variant("uexp_f8e4m3"), Some("f8e4m3"));
        assert_eq!(kernel_variant("cast_f8e4m3_bf16"), Some("bf16"));
        assert_eq!(kernel_variant("scatter_add_u32_f8e4m3"), Some("u32"));
        assert_eq!(kernel_variant("dequantize_q4k_f16"), Some("f16"));
        // `f3` / `f320` are not dtypes; no dtype at all means the whole module.
        assert_eq!(kernel_variant("kernel_f3_f320"), None);
        assert_eq!(kernel_variant("philox_seed"), None);
    }

    #[test]
    fn other_dtypes_instantiations_are_blanked_and_the_rest_kept() {
        let src = "\
#define RK_X(T) \\
    RK_Y(f16) \\
    RK_KERNEL void x_##T() {}
RK_X(u8)
RK_X(f32)
RK_CAST_FROM(f16, u8, f32)
RK_REDUCE_PART_KERNELS(min, rd_min_op<f32>, f32)
QK_ALL(q4k, qk_q4k)
F8_MATH(exp, exp(x))
rk_helper(f16)
RK_MULTI(f16,
         f32)
";
        let want = "\
#define RK_X(T) \\
    RK_Y(f16) \\
    RK_KERNEL void x_##T() {}


RK_CAST_FROM(f16, u8, f32)

QK_ALL(q4k, qk_q4k)
F8_MATH(exp, exp(x))
rk_helper(f16)
RK_MULTI(f16,
         f32)
";
        assert_eq!(variant_source(src, "f16"), want);
        let f32_variant = variant_source(src, "f32");
        assert!(f32_variant.contains("RK_X(f32)\n"));
        assert!(f32_variant.contains("RK_REDUCE_PART_KERNELS(min, rd_min_op<f32>, f32)\n"));
        assert!(!f32_variant.contains("RK_CAST_FROM"));
        assert!(!f32_variant.contains("RK_X(u8)"));
        assert_eq!(f32_variant.lines().count(), src.lines().count());
    }

    /// Every module's variants together keep each instantiation line exactly once (those with a
    /// dtype) or in every variant (those without), and drop nothing else.
    #[test]
    fn every_module_s_variants_partition_its_instantiations() {
        for (name, src) in crate::modules::MODULE_SOURCES {
            let variants: Vec<String> = DTYPE_TOKENS
                .iter()
                .map(|t| variant_source(src, t))
                .collect();
            let mut dropped_somewhere = 0;
            for (i, line) in src.lines().enumerate() {
                let kept = variants
                    .iter()
                    .filter(|v| v.lines().nth(i) == Some(line))
                    .count();
                if instantiation_first_dtype(line).is_some() {
                    assert_eq!(kept, 1, "{name}:{}: `{line}`", i + 1);
                    dropped_somewhere += 1;
                } else {
                    assert!(
                        kept == DTYPE_TOKENS.len() || line.is_empty(),
                        "{name}:{}: `{line}`",
                        i + 1
                    );
                }
            }
            assert!(dropped_somewhere > 0, "{name}: no per-dtype instantiations");
        }
    }
}
