//! The one Candle test file this harness does not compile as it is: candle-core's
//! `tests/quantized_tests.rs`. Used by `build.rs` (which writes the result to
//! `$OUT_DIR/quantized_tests.rs`) and by the harness's own tests of the rewrite
//! (`tests/candle_tests.rs`, `harness::quantized_rewrite_*`).
//!
//! [`rewrite`] returns the upstream text, byte for byte, except for three mechanical changes:
//!
//! 1. **Exhaustive `match`es on `Device`** (`Device::Metal(_) => .., Device::Cuda(_) => ..,
//!    Device::Cpu => ..`, which do not compile with the patch's extra `Device::Ext` variant) get
//!    one more arm, `Device::Ext(_) => <the body of the arm [`EXT_ARMS`] names>`, a verbatim copy
//!    of that arm's expected values and assertions. Every other `match` is left alone.
//! 2. **`crate::` paths become `self::`**: upstream the file is a crate root and names its own
//!    imports `crate::quantized`, `crate::k_quants`; here it is a module.
//! 3. **A prelude** (after any leading inner attributes) defines this harness's `test_device!`.
//!    A `macro_rules!` in textual scope takes precedence over the file's
//!    `use candle_core::test_device` (Rust reference, "Macros By Example", scoping), so every
//!    `test_device!` of the file, also those that `quantized_matmul!` expands to, gets it: the
//!    same `<test>_cpu` on `Device::Cpu` and `<test>::ext` on `crate::candle_ext_test_device()`
//!    as candle-core's patched macro, but the `ext` test is `#[ignore]`d (Candle's CPU behind
//!    `Device::Ext` has no quantized storage, so only candle-rocm can run it: run it with
//!    `--include-ignored`), and it first prints this harness's note on the test, if any
//!    ([`EXT_ARMS`], [`EXPECTED_ROCM_FAILURES`]); libtest shows it when the test fails.
//!
//! Anything the rewrite does not recognise fails the build with a message naming the line: an
//! exhaustive `Device` match whose arms are not exactly `Cpu`, `Cuda(_)`, `Metal(_)`, one in a
//! function [`EXT_ARMS`] does not list, a listed function without one, an arm name that is not
//! in its match, an [`EXPECTED_ROCM_FAILURES`] entry that is no `test_device!` test of the file.

/// The arm whose expected values `Device::Ext(_)` gets, for the exhaustive `Device` match in
/// `function`.
#[derive(Debug, Clone, Copy)]
pub struct ExtArm {
    /// The function (a `test_device!` body) holding the match.
    pub function: &'static str,
    /// The arm's pattern, as written upstream (whitespace ignored), e.g. `Device::Metal(_)`.
    pub arm: &'static str,
    /// Why the ext device is held to that arm's values.
    pub why: &'static str,
}

/// Why `Device::Ext` gets Metal's expected values: the one ext backend with quantized storage is
/// candle-rocm.
const F32_ACTIVATIONS: &str = "candle-rocm's float matrix-vector kernel (the harness's default, \
    CANDLE_EXT_TEST_QMATVEC=float) multiplies the dequantized weights by the f32 activations, as \
    Metal's does; the CPU first quantizes the activations to q8_0 and \
    CUDA to q8_1, which moves these sums by hundreds (the CPU's arm is up to 950 away from the \
    exact f32 products of `quantized_matmul`, CUDA's up to 91; Metal's arm equals them)";

/// The exhaustive `Device` matches of `quantized_tests.rs` and the arm `Device::Ext(_)` gets.
pub const EXT_ARMS: &[ExtArm] = &[
    ExtArm {
        function: "quantized_matmul",
        arm: "Device::Metal(_)",
        why: F32_ACTIVATIONS,
    },
    ExtArm {
        function: "quantized_matmul_neg",
        arm: "Device::Metal(_)",
        why: F32_ACTIVATIONS,
    },
];

/// `test_device!` tests of `quantized_tests.rs` (by body function) whose `ext` run is expected
/// to fail on candle-rocm, and why. Their assertions stay as they are: the failure is the honest
/// outcome.
pub const EXPECTED_ROCM_FAILURES: &[(&str, &str)] = &[
    (
        "quantized_matmul_neg",
        "no arm holds for f32 activations: the exact f32 products, rounded, are \
         [[243666, -19714, -285433, -550453], [23782, 21654, 19400, 18369], \
         [-196102, 63022, 324233, 587191]]; Metal's arm is up to 54 away from them (its kernel \
         rounds differently on these mixed-sign sums), CUDA's (q8_1 activations) 113, the CPU's \
         (q8_0) 711",
    ),
    (
        "qmm_batch",
        "it asserts that rows 0..6 of a 12-row product equal the 6-row product bit for bit \
         (diff4 == 0.0) unless `dev.is_cuda()`, where 0 < diff4 < 0.5 is allowed because CUDA \
         computes up to 8 rows with one kernel and more with another; candle-rocm does the same \
         (up to 8 rows: the quantized matrix-vector kernel; more: dequantize + GEMM), so the \
         sums round differently, and an ext device is not `is_cuda()`",
    ),
];

/// The patterns of an exhaustive `Device` match this rewrite knows (whitespace removed).
const KNOWN_ARMS: [&str; 3] = ["Device::Metal(_)", "Device::Cuda(_)", "Device::Cpu"];

/// The rewritten file and a summary of what was changed (one line each).
#[derive(Debug)]
pub struct Rewritten {
    pub text: String,
    pub summary: Vec<String>,
}

/// Rewrites `source` (candle-core's `tests/quantized_tests.rs`, read from `origin`) into a
/// module of this harness; see the module docs. `ext_arms` and `expected_failures` are
/// [`EXT_ARMS`] and [`EXPECTED_ROCM_FAILURES`] (parameters for the harness's own tests).
pub fn rewrite(
    source: &str,
    origin: &str,
    ext_arms: &[ExtArm],
    expected_failures: &[(&str, &str)],
) -> Result<Rewritten, String> {
    let code = code_only(source);
    let line = |pos: usize| 1 + code[..pos].iter().filter(|&&b| b == b'\n').count();
    let mut edits: Vec<(usize, usize, String)> = Vec::new(); // (start, end, replacement)
    let mut summary = Vec::new();

    // 1. Exhaustive `Device` matches.
    let mut used = vec![0usize; ext_arms.len()];
    for at in keyword_positions(&code, b"match") {
        let open = find_at_depth0(&code, at + 5, code.len(), b"{")
            .ok_or_else(|| format!("{origin}:{}: a `match` without a body", line(at)))?;
        let close = closing(&code, open)?;
        if !code[open..close].windows(8).any(|w| w == b"Device::") {
            continue;
        }
        let arms = parse_arms(source, &code, open + 1, close)
            .map_err(|e| format!("{origin}:{}: {e}", line(at)))?;
        let patterns: Vec<String> = arms.iter().map(|a| squeeze(&a.pattern)).collect();
        if !patterns.iter().any(|p| p.contains("Device::")) {
            continue;
        }
        // A catch-all arm (`_`, a binding) or an arm of its own for `Device::Ext`: compiles as
        // it is.
        let covers_ext = patterns.iter().any(|p| {
            p == "_"
                || p.starts_with("Device::Ext")
                || (p.bytes().all(is_ident) && p.starts_with(|c: char| c.is_ascii_lowercase()))
        });
        if covers_ext {
            continue;
        }
        let function = enclosing_fn(&code, source, at).unwrap_or("<none>");
        let mut sorted = patterns.clone();
        sorted.sort();
        let mut known = KNOWN_ARMS.map(String::from).to_vec();
        known.sort();
        if sorted != known {
            return Err(format!(
                "{origin}:{}: fn {function} matches `Device` exhaustively with the arms {patterns:?}; \
                 the harness only knows {KNOWN_ARMS:?} (upstream changed: review \
                 candle-tests/build/quantized.rs)",
                line(at)
            ));
        }
        let index = ext_arms
            .iter()
            .position(|e| e.function == function)
            .ok_or_else(|| {
                format!(
                    "{origin}:{}: fn {function} matches `Device` exhaustively, and EXT_ARMS \
                     (candle-tests/build/quantized.rs) does not say which arm's expected values \
                     `Device::Ext` gets there",
                    line(at)
                )
            })?;
        used[index] += 1;
        let entry = &ext_arms[index];
        let source_arm = arms
            .iter()
            .find(|a| squeeze(&a.pattern) == squeeze(entry.arm))
            .ok_or_else(|| {
                format!(
                    "{origin}:{}: EXT_ARMS names the arm `{}` for fn {function}, which has {patterns:?}",
                    line(at),
                    entry.arm
                )
            })?;
        let last = arms.last().expect("three arms");
        let indent = indentation(source, arms[0].start);
        let mut insert = String::new();
        if !last.comma {
            insert.push(',');
        }
        insert.push_str(&format!(
            "\n{indent}// candle-device-tests: `Device::Ext(_)` gets the expected values of the \
             `{}` arm (candle-tests/build/quantized.rs, EXT_ARMS).\n{indent}Device::Ext(_) => {},",
            entry.arm,
            &source[source_arm.body.clone()]
        ));
        edits.push((last.end, last.end, insert));
        summary.push(format!(
            "line {}: fn {function}: exhaustive `match` on `Device`: added `Device::Ext(_)` with \
             the body of the `{}` arm",
            line(at),
            entry.arm
        ));
    }
    for (entry, count) in ext_arms.iter().zip(&used) {
        if *count != 1 {
            return Err(format!(
                "{origin}: EXT_ARMS lists fn {} for one exhaustive `Device` match; the file has {count} \
                 there (upstream changed: review candle-tests/build/quantized.rs)",
                entry.function
            ));
        }
    }

    // 2. `crate::` -> `self::`.
    let mut crate_paths = 0;
    for at in keyword_positions(&code, b"crate") {
        if code[at + 5..].starts_with(b"::") && (at == 0 || code[at - 1] != b'$') {
            edits.push((at, at + 5, "self".to_string()));
            crate_paths += 1;
        }
    }
    summary.push(format!(
        "{crate_paths} `crate::` paths (the file is a crate root upstream) now `self::`"
    ));

    // The expected failures name `test_device!` tests of the file.
    let tests = test_device_bodies(&code, source);
    for (name, _) in expected_failures {
        if !tests.iter().any(|t| t == name) {
            return Err(format!(
                "{origin}: EXPECTED_ROCM_FAILURES lists {name}, which is not the body of a \
                 `test_device!` test of the file (its tests: {tests:?}); review \
                 candle-tests/build/quantized.rs"
            ));
        }
    }

    // 3. The prelude, after any leading inner attributes.
    let mut at = skip_ws(&code, 0, code.len());
    while code[at..].starts_with(b"#![") {
        at = skip_ws(&code, closing(&code, at + 2)? + 1, code.len());
    }
    edits.push((at, at, prelude(ext_arms, expected_failures)));
    summary.push(format!(
        "prelude at line {}: this harness's `test_device!` (ext tests #[ignore]d, notes printed)",
        line(at)
    ));

    edits.sort_by_key(|(start, end, _)| (*start, *end));
    let mut text = format!(
        "// @generated by candle-device-tests' build.rs (candle-tests/build/quantized.rs) from\n\
         // {origin}:\n"
    );
    for s in &summary {
        text.push_str(&format!("// - {s}\n"));
    }
    text.push_str("// Everything else is the upstream text, unchanged.\n\n");
    let mut pos = 0;
    for (start, end, replacement) in &edits {
        text.push_str(&source[pos..*start]);
        text.push_str(replacement);
        pos = *end;
    }
    text.push_str(&source[pos..]);
    Ok(Rewritten { text, summary })
}

/// The items the rewrite puts before the upstream text.
fn prelude(ext_arms: &[ExtArm], expected_failures: &[(&str, &str)]) -> String {
    let mut notes = String::new();
    for e in ext_arms {
        let note = format!(
            "exhaustive match on Device: Device::Ext(_) is held to the {} arm's values: {}",
            e.arm, e.why
        );
        notes.push_str(&format!("        ({:?}, {note:?}),\n", e.function));
    }
    for (name, why) in expected_failures {
        let note = format!("expected to fail on candle-rocm: {why}");
        notes.push_str(&format!("        ({name:?}, {note:?}),\n"));
    }
    format!(
        r#"// ---- candle-device-tests: prelude (candle-tests/build/quantized.rs) ----

/// What the `ext` run of a `test_device!` test prints first (libtest shows a test's output when
/// it fails, or always with `--nocapture`): candle-tests/build/quantized.rs, `EXT_ARMS` and
/// `EXPECTED_ROCM_FAILURES`.
mod candle_device_tests_notes {{
    pub(super) const NOTES: &[(&str, &str)] = &[
{notes}    ];

    pub(super) fn print(test: &str) {{
        for (name, note) in NOTES {{
            if *name == test {{
                println!("candle-device-tests: {{test}}: {{note}}");
            }}
        }}
    }}
}}

/// This harness's `test_device!`: it shadows the file's `use candle_core::test_device` (a
/// `macro_rules!` in textual scope comes first). Like candle-core's patched macro, `<test>_cpu`
/// on `Device::Cpu` and `<test>::ext` on `crate::candle_ext_test_device()` (the CUDA/Metal
/// tests need candle-core features this crate does not enable); the `ext` test is ignored unless
/// asked for, as it needs quantized storage on the ext device.
macro_rules! test_device {{
    ($fn_name: ident, $test_cpu: ident, $test_cuda: ident, $test_metal: ident) => {{
        #[test]
        fn $test_cpu() -> Result<()> {{
            $fn_name(&Device::Cpu)
        }}

        #[cfg(candle_ext_device)]
        mod $fn_name {{
            use super::*;
            #[test]
            #[ignore = "quantized: needs quantized storage on the ext device, which Candle's CPU behind Device::Ext lacks: run on candle-rocm (CANDLE_EXT_TEST_DEVICE=rocm) with --include-ignored"]
            fn ext() -> Result<()> {{
                super::candle_device_tests_notes::print(stringify!($fn_name));
                $fn_name(&crate::candle_ext_test_device()?)
            }}
        }}
    }};
}}

// ---- end of the prelude; the upstream file follows ----

"#
    )
}

/// One arm of a `match`: byte ranges into the source.
#[derive(Debug)]
struct Arm {
    /// Where the arm starts (its pattern).
    start: usize,
    pattern: String,
    /// The arm's expression (a block with its braces, or up to the separating comma).
    body: std::ops::Range<usize>,
    /// Just past the arm, its comma included.
    end: usize,
    comma: bool,
}

/// The arms of the match whose body is `code[from..to]` (the braces excluded).
fn parse_arms(source: &str, code: &[u8], from: usize, to: usize) -> Result<Vec<Arm>, String> {
    let mut arms = Vec::new();
    let mut p = skip_ws(code, from, to);
    while p < to {
        let arrow = find_at_depth0(code, p, to, b"=>")
            .ok_or_else(|| "a match arm without `=>`".to_string())?;
        let pattern = source[p..arrow].trim().to_string();
        let b = skip_ws(code, arrow + 2, to);
        let mut body_end = None;
        if code.get(b) == Some(&b'{') {
            let c = closing(code, b)? + 1;
            // A block arm ends at its brace unless the expression goes on (`{ .. }.f()`, `?`).
            if !matches!(code.get(skip_ws(code, c, to)), Some(b'.' | b'?')) {
                body_end = Some(c);
            }
        }
        let body_end = match body_end {
            Some(end) => end,
            None => {
                let comma = find_at_depth0(code, b, to, b",").unwrap_or(to);
                let mut end = comma;
                while end > b && code[end - 1].is_ascii_whitespace() {
                    end -= 1;
                }
                end
            }
        };
        let after = skip_ws(code, body_end, to);
        let comma = code.get(after) == Some(&b',') && after < to;
        let end = if comma { after + 1 } else { body_end };
        arms.push(Arm {
            start: p,
            pattern,
            body: b..body_end,
            end,
            comma,
        });
        p = skip_ws(code, end, to);
    }
    Ok(arms)
}

/// The name of the last `fn` before `pos`.
fn enclosing_fn<'a>(code: &[u8], source: &'a str, pos: usize) -> Option<&'a str> {
    let at = *keyword_positions(&code[..pos], b"fn").last()?;
    let start = skip_ws(code, at + 2, pos);
    let end = start + code[start..].iter().take_while(|&&b| is_ident(b)).count();
    Some(&source[start..end])
}

/// The first argument of each `test_device!(..)` of the file (macro variables `$x` left out).
fn test_device_bodies(code: &[u8], source: &str) -> Vec<String> {
    let mut names = Vec::new();
    for at in keyword_positions(code, b"test_device") {
        let p = at + "test_device".len();
        if code.get(p) != Some(&b'!') {
            continue;
        }
        let p = skip_ws(code, p + 1, code.len());
        if code.get(p) != Some(&b'(') {
            continue;
        }
        let start = skip_ws(code, p + 1, code.len());
        let end = start + code[start..].iter().take_while(|&&b| is_ident(b)).count();
        if end > start {
            names.push(source[start..end].to_string());
        }
    }
    names
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `s` without whitespace.
fn squeeze(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// The leading whitespace of the line holding `pos`.
fn indentation(source: &str, pos: usize) -> &str {
    let line_start = source[..pos].rfind('\n').map_or(0, |i| i + 1);
    let line = &source[line_start..];
    &line[..line.len() - line.trim_start().len()]
}

fn skip_ws(code: &[u8], mut p: usize, to: usize) -> usize {
    while p < to && code[p].is_ascii_whitespace() {
        p += 1;
    }
    p
}

/// Where `word` occurs in `code` as a whole word.
fn keyword_positions(code: &[u8], word: &[u8]) -> Vec<usize> {
    let mut found = Vec::new();
    let mut i = 0;
    while i + word.len() <= code.len() {
        if code[i..].starts_with(word)
            && (i == 0 || !is_ident(code[i - 1]))
            && code.get(i + word.len()).is_none_or(|&b| !is_ident(b))
        {
            found.push(i);
            i += word.len();
        } else {
            i += 1;
        }
    }
    found
}

/// The first `needle` in `code[from..to]` outside any (), [], {}.
fn find_at_depth0(code: &[u8], from: usize, to: usize, needle: &[u8]) -> Option<usize> {
    let mut depth = 0i32;
    let mut i = from;
    while i < to {
        if depth == 0 && code[i..to].starts_with(needle) {
            return Some(i);
        }
        match code[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            _ => {}
        }
        if depth < 0 {
            return None;
        }
        i += 1;
    }
    None
}

/// The position of the delimiter closing the one at `open`.
fn closing(code: &[u8], open: usize) -> Result<usize, String> {
    let mut stack = Vec::new();
    for (i, &b) in code.iter().enumerate().skip(open) {
        match b {
            b'(' => stack.push(b')'),
            b'[' => stack.push(b']'),
            b'{' => stack.push(b'}'),
            b')' | b']' | b'}' => {
                if stack.pop() != Some(b) {
                    return Err(format!("unbalanced `{}` at byte {i}", b as char));
                }
                if stack.is_empty() {
                    return Ok(i);
                }
            }
            _ => {}
        }
    }
    Err(format!("the delimiter at byte {open} is not closed"))
}

/// `source` with comments and the contents of string and char literals blanked (same length,
/// newlines kept), so that delimiters, commas and keywords are looked for in code only.
fn code_only(source: &str) -> Vec<u8> {
    let s = source.as_bytes();
    let mut out = s.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for b in &mut out[from..to.min(s.len())] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0, i);
            while j < s.len() {
                if s[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if s[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            j
        } else if let Some(end) = raw_string_end(s, i) {
            end
        } else if s[i] == b'"' {
            let mut j = i + 1;
            while j < s.len() && s[j] != b'"' {
                j += if s[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if s[i] == b'\'' {
            match char_literal_end(source, i) {
                Some(end) => end,
                None => {
                    i += 1; // a lifetime or a label
                    continue;
                }
            }
        } else {
            i += 1;
            continue;
        };
        blank(&mut out, i, end);
        i = end;
    }
    out
}

/// The end of the raw string literal (`r"..."`, `r#"..."#`, `br".."`) starting at `i`.
fn raw_string_end(s: &[u8], i: usize) -> Option<usize> {
    if i > 0 && is_ident(s[i - 1]) {
        return None;
    }
    let mut j = i;
    if s.get(j) == Some(&b'b') {
        j += 1;
    }
    if s.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = s[j..].iter().take_while(|&&b| b == b'#').count();
    j += hashes;
    if s.get(j) != Some(&b'"') {
        return None;
    }
    j += 1;
    while j < s.len() {
        if s[j] == b'"'
            && s[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&b| b == b'#')
                .count()
                == hashes
        {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(s.len())
}

/// The end of the char literal starting at `i` (a `'`), or `None` for a lifetime or label.
fn char_literal_end(source: &str, i: usize) -> Option<usize> {
    let s = source.as_bytes();
    if s.get(i + 1) == Some(&b'\\') {
        // '\n', '\'', '\\', '\u{..}': up to the next quote after the escaped character.
        let from = i + 3;
        return s
            .get(from..)?
            .iter()
            .position(|&b| b == b'\'')
            .map(|p| from + p + 1);
    }
    let c = source.get(i + 1..)?.chars().next()?;
    let after = i + 1 + c.len_utf8();
    (s.get(after) == Some(&b'\'')).then_some(after + 1)
}
