//! The conformance rows of the BLAS/DNN ops (a module of tests/conformance.rs): `matmul`, and
//! `conv1d`, `conv2d`, `conv_transpose1d`, `conv_transpose2d` on both convolution paths
//! (`(im2col)`: our kernels + GEMM; `(library)`: MIOpen, cuDNN on NVIDIA) and on the default
//! `(auto)` choice between them.
//!
//! matmul: the CPU oracle is `CpuStorage::matmul` through the same trait call (it refuses bf16
//! and the integer dtypes); the independent reference is the f64 product of the same inputs,
//! rounded once to the dtype. Convolutions: candle's `ParamsConv*` cannot be built outside
//! candle, so the GPU side runs `RocmStorage::conv2d_with` / `conv_transpose2d_with` (what the
//! trait methods call after reading candle's params) and the oracle is candle's Tensor-level
//! convolution on the CPU (same dtype), with an f64 direct-loop reference beside it.
//! Tolerances: the classic error bound of a sum of products (`compare_bound`), relative to
//! the sum of |products| of each output element.

use super::*;
use candle_core::{Device, Tensor};
use candle_rocm::{Conv2dSpec, ConvPath};

/// Unit roundoff of the storage dtype (each stored intermediate or output rounds once).
fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => 2f64.powi(-8),
        DType::F16 => 2f64.powi(-11),
        DType::F32 => 2f64.powi(-24),
        _ => 2f64.powi(-53),
    }
}

/// Compares element-wise against an f64 result with the classic bound for a sum of products:
/// `|got - want| <= (terms * u_acc + 3 * u_dtype) * sum |a_i b_i| + u_dtype * |want|`
/// (accumulation in f32, or f64 for f64, plus up to three roundings to the dtype: the inputs of
/// a second stage, e.g. the column buffer of a transposed convolution, and the output).
fn compare_bound(
    got: &CpuStorage,
    want: &[f64],
    abs_sums: &[f64],
    terms: usize,
) -> Result<(), String> {
    let dtype = got.dtype();
    let g = values_f64(got);
    if g.len() != want.len() {
        return Err(format!("{} elements, expected {}", g.len(), want.len()));
    }
    let u_acc = if dtype == DType::F64 {
        2f64.powi(-53)
    } else {
        2f64.powi(-24)
    };
    let u = unit_roundoff(dtype);
    let bound =
        |i: usize| (terms.max(1) as f64 * u_acc + 3.0 * u) * abs_sums[i] + u * want[i].abs();
    let bad: Vec<usize> = (0..g.len())
        .filter(|&i| (g[i] - want[i]).abs() > bound(i) || g[i].is_nan() != want[i].is_nan())
        .collect();
    match bad.first() {
        None => Ok(()),
        Some(&i) => Err(format!(
            "{} of {} elements exceed the error bound; first at {i}: got {}, expected {} \
             (bound {:e}, sum of |terms| {})",
            bad.len(),
            g.len(),
            g[i],
            want[i],
            bound(i),
            abs_sums[i]
        )),
    }
}

/// The error inside candle's backtrace wrapper.
fn unwrapped(e: &candle_core::Error) -> &candle_core::Error {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => unwrapped(inner),
        e => e,
    }
}

fn is_gemm_dtype(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
}

struct MCase {
    name: String,
    bmnk: (usize, usize, usize, usize),
    lhs: Layout,
    rhs: Layout,
}

fn strided(dims: &[usize], strides: &[usize], offset: usize) -> Layout {
    Layout::new(dims.into(), strides.to_vec(), offset)
}

/// Every combination of (transposed or not, batch-broadcast or not) for both operands at
/// batch > 1, each at two sizes (one of them the shape of a `Linear` after
/// `flatten(2).transpose(1, 2)` in vision models: bmnk (2, 71, 16, 31)).
fn matmul_combination_cases() -> Vec<MCase> {
    let mut v = Vec::new();
    for (b, m, n, k, off) in [(2, 71, 16, 31, 0), (3, 9, 5, 12, 7)] {
        for code in 0..16u32 {
            let (lt, lb, rt, rb) = (code & 1 != 0, code & 2 != 0, code & 4 != 0, code & 8 != 0);
            // An (rows, cols) batch of matrices: stored transposed or not, one matrix shared
            // by the batch (stride 0) or one per batch entry.
            let operand = |rows: usize, cols: usize, transposed: bool, broadcast: bool| {
                let (rs, cs) = if transposed { (1, rows) } else { (cols, 1) };
                let bs = if broadcast { 0 } else { rows * cols };
                strided(&[b, rows, cols], &[bs, rs, cs], off)
            };
            let word = |t: bool, br: bool| {
                format!(
                    "{}{}",
                    if t { "transposed" } else { "row-major" },
                    if br { " broadcast" } else { "" }
                )
            };
            v.push(MCase {
                name: format!(
                    "b{b} {m}x{k}.{k}x{n}: lhs {}, rhs {}",
                    word(lt, lb),
                    word(rt, rb)
                ),
                bmnk: (b, m, n, k),
                lhs: operand(m, k, lt, lb),
                rhs: operand(k, n, rt, rb),
            });
        }
    }
    v
}

/// Layouts one strided-batched GEMM cannot read, which Candle's CPU computes: copied to a
/// contiguous operand first.
fn matmul_copy_cases() -> Vec<MCase> {
    let t = |l: Layout, a: usize, b: usize| l.transpose(a, b).unwrap();
    vec![
        MCase {
            // mamba2's scan (`MatMulUnexpectedStriding` before): unit stride on the batch dim.
            name: "copy: lhs (2, 8, 4) strides [1, 2, 16] (mamba2)".into(),
            bmnk: (2, 8, 3, 4),
            lhs: strided(&[2, 8, 4], &[1, 2, 16], 0),
            rhs: Layout::contiguous((2, 4, 3)),
        },
        MCase {
            name: "copy: permuted batch dims on both".into(),
            bmnk: (6, 3, 5, 4),
            lhs: t(Layout::contiguous((3, 2, 3, 4)), 0, 1),
            rhs: t(Layout::contiguous((3, 2, 4, 5)), 0, 1),
        },
        MCase {
            name: "copy: broadcast column inside the lhs matrix".into(),
            bmnk: (2, 3, 5, 4),
            lhs: strided(&[2, 3, 4], &[3, 1, 0], 2),
            rhs: Layout::contiguous((2, 4, 5)),
        },
        MCase {
            name: "copy: inner batch dim broadcast, outer not (rank 4)".into(),
            bmnk: (6, 3, 5, 4),
            lhs: Layout::contiguous((2, 3, 3, 4)),
            rhs: strided(&[2, 3, 4, 5], &[20, 0, 5, 1], 1),
        },
        MCase {
            name: "copy: every other element of a wider rhs, with offset".into(),
            bmnk: (2, 4, 3, 5),
            lhs: Layout::contiguous((2, 4, 5)),
            rhs: strided(&[2, 5, 3], &[30, 6, 2], 3),
        },
    ]
}

/// A seeded random matmul layout of logical dims `dims` (rank 3 or 4): the dims stored in a
/// random order (permuted batch dims, a transposed or unit-stride-on-batch matrix), some batch
/// dims broadcast (stride 0), an optional gap after each stored dim, and an offset.
fn random_matmul_operand(dims: &[usize], rng: &mut Rng) -> Layout {
    let r = dims.len();
    let mut order: Vec<usize> = (0..r).collect();
    // Fisher-Yates over the storage order (outermost first).
    for i in (1..r).rev() {
        let j = rng.int(0, i as i128) as usize;
        order.swap(i, j);
    }
    let mut strides = vec![0usize; r];
    let mut next = 1usize;
    for &d in order.iter().rev() {
        strides[d] = next;
        let gap = if rng.int(0, 3) == 0 { 2 } else { 1 };
        next *= dims[d] * gap;
    }
    for (d, s) in strides.iter_mut().enumerate().take(r - 2) {
        if dims[d] > 1 && rng.int(0, 3) == 0 {
            *s = 0;
        }
    }
    strided(dims, &strides, rng.int(0, 5) as usize)
}

/// Seeded random layouts for both operands (see [`random_matmul_operand`]) at batch > 1.
fn matmul_random_cases(count: usize) -> Vec<MCase> {
    let mut rng = Rng::new(0x3a7_3a7);
    (0..count)
        .map(|i| {
            let batch: Vec<usize> = if rng.int(0, 1) == 0 {
                vec![rng.int(2, 3) as usize]
            } else {
                vec![rng.int(1, 3) as usize, rng.int(2, 3) as usize]
            };
            let (m, n, k) = (
                rng.pick(&[1usize, 2, 5, 8, 17]),
                rng.pick(&[1usize, 3, 4, 16]),
                rng.pick(&[1usize, 4, 7, 31]),
            );
            let with = |a: usize, b: usize| {
                let mut d = batch.clone();
                d.extend([a, b]);
                d
            };
            let lhs = random_matmul_operand(&with(m, k), &mut rng);
            let rhs = random_matmul_operand(&with(k, n), &mut rng);
            let b = batch.iter().product();
            MCase {
                name: format!(
                    "random {i}: bmnk ({b}, {m}, {n}, {k}), lhs {:?}@{}, rhs {:?}@{}",
                    lhs.stride(),
                    lhs.start_offset(),
                    rhs.stride(),
                    rhs.start_offset()
                ),
                bmnk: (b, m, n, k),
                lhs,
                rhs,
            }
        })
        .collect()
}

fn matmul_cases() -> Vec<MCase> {
    let t = |l: Layout, a: usize, b: usize| l.transpose(a, b).unwrap();
    let mut v = vec![
        MCase {
            name: "rank2 7x129 . 129x1000".into(),
            bmnk: (1, 7, 1000, 129),
            lhs: Layout::contiguous((7, 129)),
            rhs: Layout::contiguous((129, 1000)),
        },
        MCase {
            name: "rank2 1x1 . 1x1".into(),
            bmnk: (1, 1, 1, 1),
            lhs: Layout::contiguous((1, 1)),
            rhs: Layout::contiguous((1, 1)),
        },
        MCase {
            name: "lhs transposed".into(),
            bmnk: (1, 33, 17, 65),
            lhs: t(Layout::contiguous((65, 33)), 0, 1),
            rhs: Layout::contiguous((65, 17)),
        },
        MCase {
            name: "rhs transposed".into(),
            bmnk: (1, 33, 17, 65),
            lhs: Layout::contiguous((33, 65)),
            rhs: t(Layout::contiguous((17, 65)), 0, 1),
        },
        MCase {
            name: "both transposed, batched".into(),
            bmnk: (3, 9, 11, 7),
            lhs: t(Layout::contiguous((3, 7, 9)), 1, 2),
            rhs: t(Layout::contiguous((3, 11, 7)), 1, 2),
        },
        MCase {
            name: "rank4 batched".into(),
            bmnk: (6, 5, 4, 3),
            lhs: Layout::contiguous((2, 3, 5, 3)),
            rhs: Layout::contiguous((2, 3, 3, 4)),
        },
        MCase {
            name: "broadcast rhs batch (stride 0)".into(),
            bmnk: (4, 5, 6, 7),
            lhs: Layout::contiguous((4, 5, 7)),
            rhs: strided(&[4, 7, 6], &[0, 6, 1], 0),
        },
        MCase {
            name: "broadcast lhs batch, offset".into(),
            bmnk: (3, 5, 6, 7),
            lhs: strided(&[3, 5, 7], &[0, 7, 1], 4),
            rhs: Layout::contiguous((3, 7, 6)),
        },
        MCase {
            name: "narrowed lhs (ld 20) with offset".into(),
            bmnk: (2, 5, 6, 7),
            lhs: strided(&[2, 5, 7], &[100, 20, 1], 3),
            rhs: Layout::contiguous((2, 7, 6)),
        },
        MCase {
            name: "k = 1 (outer product)".into(),
            bmnk: (1, 8, 9, 1),
            lhs: Layout::contiguous((8, 1)),
            rhs: Layout::contiguous((1, 9)),
        },
        MCase {
            name: "n = 1 (matrix-vector)".into(),
            bmnk: (2, 8, 1, 9),
            lhs: Layout::contiguous((2, 8, 9)),
            rhs: Layout::contiguous((2, 9, 1)),
        },
        MCase {
            name: "m = 1 (vector-matrix)".into(),
            bmnk: (1, 1, 9, 8),
            lhs: Layout::contiguous((1, 8)),
            rhs: Layout::contiguous((8, 9)),
        },
        // Decode-step Linear layers: up to 4 activation rows times a row-major weight read
        // transposed take the float matrix-vector kernel (16-byte path where k, the weight's
        // row stride and the offsets allow; element by element otherwise).
        MCase {
            name: "gemv: 1 row . W^T (300 x 256)".into(),
            bmnk: (1, 1, 300, 256),
            lhs: Layout::contiguous((1, 256)),
            rhs: t(Layout::contiguous((300, 256)), 0, 1),
        },
        MCase {
            name: "gemv: 3 rows, odd k 37".into(),
            bmnk: (1, 3, 50, 37),
            lhs: Layout::contiguous((3, 37)),
            rhs: t(Layout::contiguous((50, 37)), 0, 1),
        },
        MCase {
            name: "gemv: batch 2 x 2 rows, weight broadcast over the batch".into(),
            bmnk: (2, 2, 40, 64),
            lhs: Layout::contiguous((2, 2, 64)),
            rhs: strided(&[2, 64, 40], &[0, 1, 64], 0),
        },
        MCase {
            name: "gemv: narrowed weight (ld 72), aligned offsets".into(),
            bmnk: (1, 4, 40, 64),
            lhs: Layout::contiguous_with_offset((4, 64), 16),
            rhs: strided(&[64, 40], &[1, 72], 8),
        },
        MCase {
            name: "gemv: narrowed weight (ld 72), odd offsets".into(),
            bmnk: (1, 2, 40, 64),
            lhs: Layout::contiguous_with_offset((2, 64), 3),
            rhs: strided(&[64, 40], &[1, 72], 5),
        },
        MCase {
            name: "gemv: n = 1".into(),
            bmnk: (1, 1, 1, 96),
            lhs: Layout::contiguous((1, 96)),
            rhs: strided(&[96, 1], &[1, 7], 0),
        },
        MCase {
            name: "k = 0 (zeros)".into(),
            bmnk: (2, 3, 4, 0),
            lhs: Layout::contiguous((2, 3, 0)),
            rhs: Layout::contiguous((2, 0, 4)),
        },
        MCase {
            name: "m = 0 (empty)".into(),
            bmnk: (2, 0, 4, 3),
            lhs: Layout::contiguous((2, 0, 3)),
            rhs: Layout::contiguous((2, 3, 4)),
        },
    ];
    v.extend(matmul_combination_cases());
    v.extend(matmul_copy_cases());
    v.extend(matmul_random_cases(40));
    v
}

/// The f64 product of the logical values and, per element, the sum of |products|.
fn matmul_reference(c: &MCase, lhs: &CpuStorage, rhs: &CpuStorage) -> (Vec<f64>, Vec<f64>) {
    let (b, m, n, k) = c.bmnk;
    let (a, bb) = (logical_values(lhs, &c.lhs), logical_values(rhs, &c.rhs));
    let mut out = vec![0f64; b * m * n];
    let mut abs = vec![0f64; b * m * n];
    for bi in 0..b {
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut sa) = (0f64, 0f64);
                for p in 0..k {
                    let t = a[(bi * m + i) * k + p] * bb[(bi * k + p) * n + j];
                    s += t;
                    sa += t.abs();
                }
                out[(bi * m + i) * n + j] = s;
                abs[(bi * m + i) * n + j] = sa;
            }
        }
    }
    (out, abs)
}

pub(super) fn run_matmul(ctx: &mut Ctx) {
    let cpu = CpuDevice;
    for dtype in storage_dtypes() {
        let col = dtype.as_str();
        for c in matmul_cases() {
            let seed = case_seed(ctx.base, &["matmul", col, &c.name]);
            let mut rng = Rng::new(seed);
            let lhs = gen(dtype, needed_len(&c.lhs), Dist::General, &mut rng);
            let rhs = gen(dtype, needed_len(&c.rhs), Dist::General, &mut rng);
            let (gl, gr) = (ctx.upload(&lhs), ctx.upload(&rhs));
            let (b, m, n, _) = c.bmnk;
            ctx.poison(b * m * n * dtype.size_in_bytes());
            let gpu = gpu_result(gl.matmul(&gr, c.bmnk, &c.lhs, &c.rhs));
            let outcome = if is_gemm_dtype(dtype) {
                let (cl, cr) = (
                    cpu.storage_from_cpu_storage(&lhs).unwrap(),
                    cpu.storage_from_cpu_storage(&rhs).unwrap(),
                );
                let want = oracle(|| cl.matmul(&cr, c.bmnk, &c.lhs, &c.rhs));
                let (exact, abs) = matmul_reference(&c, &lhs, &rhs);
                let k = c.bmnk.3;
                let reference = storage_from_f64(dtype, &exact);
                // The same bound around the oracle's result and around the exact product.
                judge_with(Expect::Pass, gpu, Some(want), Some(reference), &|g, w| {
                    compare_bound(g, &values_f64(w), &abs, 2 * k)
                })
            } else {
                judge(Expect::TypedError, gpu, None, None, true)
            };
            ctx.matrix.record("matmul", col, &c.name, seed, outcome);
        }
    }
}

/// One convolution case: `spec` (1-D ones have `input.0 == 1`), whether the input is given
/// transposed in its spatial dims (a non-contiguous layout) and its start offset.
struct CCase {
    name: String,
    transposed: bool,
    spec: Conv2dSpec,
    one_d: bool,
    strided_input: bool,
    offset: usize,
    /// Explicit layouts (random cases); `None`: from `strided_input` / `offset` (input) and
    /// contiguous (kernel).
    layouts: Option<(Layout, Layout)>,
}

/// A random layout of `dims`: contiguous, at an offset, with two dims stored swapped, with
/// a size-1 dim given an odd stride, or a narrowed (wider-stored) last dim.
fn random_layout(dims: &[usize], rng: &mut Rng) -> Layout {
    let off = rng.int(0, 9) as usize;
    match rng.int(0, 4) {
        0 => Layout::contiguous(dims),
        1 => Layout::contiguous_with_offset(dims, off),
        2 => {
            // Stored with dims i and j swapped, then viewed transposed back.
            let r = dims.len();
            let i = rng.int(0, r as i128 - 2) as usize;
            let j = rng.int(i as i128 + 1, r as i128 - 1) as usize;
            let mut stored = dims.to_vec();
            stored.swap(i, j);
            Layout::contiguous_with_offset(stored.as_slice(), off)
                .transpose(i, j)
                .unwrap()
        }
        3 => {
            // Size-1 dims take any stride: give them a large odd one.
            let l = Layout::contiguous_with_offset(dims, off);
            let strides: Vec<usize> = dims
                .iter()
                .zip(l.stride())
                .map(|(&d, &st)| if d == 1 { 97 } else { st })
                .collect();
            strided(dims, &strides, off)
        }
        _ => {
            // The last dim narrowed out of a row twice as wide.
            let r = dims.len();
            let mut stored = dims.to_vec();
            stored[r - 1] = 2 * dims[r - 1] + 1;
            let l = Layout::contiguous_with_offset(stored.as_slice(), off);
            strided(dims, l.stride(), off)
        }
    }
}

/// Seeded random convolutions of all four kinds: batch 2-3, size-1 channels, lengths and
/// kernels, every stride 1-4, padding, dilation, output padding, random layouts of both
/// operands (the class of layouts with size-1 dims and offsets at batch > 1).
fn random_conv_cases(count_per_op: usize) -> Vec<CCase> {
    let mut rng = Rng::new(0x5eed_c0de);
    let mut v = Vec::new();
    for (transposed, one_d) in [(false, true), (false, false), (true, true), (true, false)] {
        let mut made = 0;
        while made < count_per_op {
            let b = rng.int(2, 3) as usize;
            let ci = rng.pick(&[1usize, 1, 2, 3, 5]);
            let co = rng.pick(&[1usize, 1, 2, 4]);
            let k = |rng: &mut Rng| rng.pick(&[1usize, 1, 2, 3, 4]);
            let (kh, kw) = if one_d {
                (1, k(&mut rng))
            } else {
                (k(&mut rng), k(&mut rng))
            };
            let len = |rng: &mut Rng| rng.pick(&[1usize, 1, 2, 5, 8, 11]);
            let (h, w) = if one_d {
                (1, len(&mut rng))
            } else {
                (len(&mut rng), len(&mut rng))
            };
            let st = rng.int(1, 4) as usize;
            let d = rng.pick(&[1usize, 1, 2, 3]);
            let p = rng.pick(&[0usize, 0, 1, 2]);
            // candle: the output padding must be smaller than the stride or the dilation.
            let op = if transposed {
                rng.int(0, (st.max(d) - 1) as i128) as usize
            } else {
                0
            };
            let sp = spec(b, ci, co, (h, w), (kh, kw), p, st, d, op, one_d);
            let mut c = CCase {
                name: String::new(),
                transposed,
                spec: sp,
                one_d,
                strided_input: false,
                offset: 0,
                layouts: None,
            };
            // Keep shapes whose output exists (positive size) on both axes.
            let (hi, wi) = sp.input;
            let fits = |i: usize, k: usize, p: usize, d: usize| i + 2 * p > d * (k - 1);
            if !transposed
                && (!fits(hi, kh, sp.padding.0, sp.dilation.0)
                    || !fits(wi, kw, sp.padding.1, sp.dilation.1))
            {
                continue;
            }
            if transposed {
                let out = |i: usize, k: usize, p: usize, s: usize, d: usize, o: usize| {
                    ((i - 1) * s + d * (k - 1) + o + 1) as i64 - 2 * p as i64
                };
                if out(
                    hi,
                    kh,
                    sp.padding.0,
                    sp.stride.0,
                    sp.dilation.0,
                    sp.output_padding.0,
                ) < 1
                    || out(
                        wi,
                        kw,
                        sp.padding.1,
                        sp.stride.1,
                        sp.dilation.1,
                        sp.output_padding.1,
                    ) < 1
                {
                    continue;
                }
            }
            let xl = random_layout(&c.x_dims(), &mut rng);
            let wl = random_layout(&c.w_dims(), &mut rng);
            c.name = format!(
                "random: b{b} ci{ci} co{co} in {:?} k {:?} p{p} s{st} d{d} op{op}, x {:?}@{}, w {:?}@{}",
                if one_d { vec![w] } else { vec![h, w] },
                if one_d { vec![kw] } else { vec![kh, kw] },
                xl.stride(),
                xl.start_offset(),
                wl.stride(),
                wl.start_offset()
            );
            c.layouts = Some((xl, wl));
            v.push(c);
            made += 1;
        }
    }
    v
}

#[allow(clippy::too_many_arguments)]
fn spec(
    b: usize,
    ci: usize,
    co: usize,
    input: (usize, usize),
    k: (usize, usize),
    p: usize,
    s: usize,
    d: usize,
    op: usize,
    one_d: bool,
) -> Conv2dSpec {
    let (pad, st, dil, opad) = if one_d {
        ((0, p), (1, s), (1, d), (0, op))
    } else {
        ((p, p), (s, s), (d, d), (op, op))
    };
    Conv2dSpec {
        batch: b,
        c_in: ci,
        c_out: co,
        input,
        kernel: k,
        padding: pad,
        stride: st,
        dilation: dil,
        output_padding: opad,
    }
}

fn conv_cases() -> Vec<CCase> {
    let cc = |name: &str, transposed, spec, one_d, strided_input, offset| CCase {
        name: name.to_string(),
        transposed,
        spec,
        one_d,
        strided_input,
        offset,
        layouts: None,
    };
    let mut v = vec![
        cc(
            "2d 3x3 pad 1",
            false,
            spec(2, 3, 4, (7, 9), (3, 3), 1, 1, 1, 0, false),
            false,
            false,
            0,
        ),
        cc(
            "2d 3x2 stride 2 dil 2 pad 2, strided input",
            false,
            spec(1, 2, 3, (8, 8), (3, 2), 2, 2, 2, 0, false),
            false,
            true,
            0,
        ),
        cc(
            "2d 1x1, offset",
            false,
            spec(3, 5, 2, (4, 6), (1, 1), 0, 1, 1, 0, false),
            false,
            false,
            3,
        ),
        cc(
            "2d 5x5 on 5x5",
            false,
            spec(1, 1, 1, (5, 5), (5, 5), 0, 1, 1, 0, false),
            false,
            false,
            0,
        ),
        cc(
            "2d empty batch",
            false,
            spec(0, 2, 2, (4, 4), (2, 2), 0, 1, 1, 0, false),
            false,
            false,
            0,
        ),
        cc(
            "1d k3 pad 1 stride 2",
            false,
            spec(2, 3, 2, (1, 10), (1, 3), 1, 2, 1, 0, true),
            true,
            false,
            0,
        ),
        cc(
            "1d k2 dil 3, strided input",
            false,
            spec(1, 4, 3, (1, 11), (1, 2), 0, 1, 3, 0, true),
            true,
            true,
            0,
        ),
        cc(
            "transposed 2d k3 pad 1 stride 2 out-pad 1",
            true,
            spec(2, 3, 2, (4, 5), (3, 3), 1, 2, 1, 1, false),
            false,
            false,
            0,
        ),
        cc(
            "transposed 2d k2 dil 2, strided input",
            true,
            spec(1, 2, 3, (3, 3), (2, 2), 0, 1, 2, 0, false),
            false,
            true,
            0,
        ),
        cc(
            "transposed 1d k3 stride 3",
            true,
            spec(2, 3, 4, (1, 6), (1, 3), 0, 3, 1, 0, true),
            true,
            false,
            0,
        ),
        cc(
            "transposed 1d k4 pad 2 dil 2 out-pad 1, offset",
            true,
            spec(1, 2, 2, (1, 7), (1, 4), 2, 2, 2, 1, true),
            true,
            false,
            5,
        ),
    ];
    v.extend(random_conv_cases(24));
    v
}

impl CCase {
    fn x_dims(&self) -> Vec<usize> {
        let s = &self.spec;
        if self.one_d {
            vec![s.batch, s.c_in, s.input.1]
        } else {
            vec![s.batch, s.c_in, s.input.0, s.input.1]
        }
    }
    fn w_dims(&self) -> Vec<usize> {
        let s = &self.spec;
        let (a, b) = if self.transposed {
            (s.c_in, s.c_out)
        } else {
            (s.c_out, s.c_in)
        };
        if self.one_d {
            vec![a, b, s.kernel.1]
        } else {
            vec![a, b, s.kernel.0, s.kernel.1]
        }
    }
    /// The input layout: contiguous with the case's offset, or its last two dims stored
    /// transposed.
    fn x_layout(&self) -> Layout {
        if let Some((x, _)) = &self.layouts {
            return x.clone();
        }
        let dims = self.x_dims();
        if self.strided_input {
            let r = dims.len();
            let mut stored = dims.clone();
            stored.swap(r - 2, r - 1);
            Layout::contiguous_with_offset(stored.as_slice(), self.offset)
                .transpose(r - 2, r - 1)
                .unwrap()
        } else {
            Layout::contiguous_with_offset(dims.as_slice(), self.offset)
        }
    }
    /// The kernel layout: explicit, or contiguous.
    fn w_layout(&self) -> Layout {
        match &self.layouts {
            Some((_, w)) => w.clone(),
            None => Layout::contiguous(self.w_dims()),
        }
    }
    fn out_hw(&self) -> (usize, usize) {
        let s = &self.spec;
        let axis = |i: usize, k: usize, p: usize, st: usize, d: usize, op: usize| {
            if self.transposed {
                (i - 1) * st + d * (k - 1) + op + 1 - 2 * p
            } else {
                (i + 2 * p - d * (k - 1) - 1) / st + 1
            }
        };
        (
            axis(
                s.input.0,
                s.kernel.0,
                s.padding.0,
                s.stride.0,
                s.dilation.0,
                s.output_padding.0,
            ),
            axis(
                s.input.1,
                s.kernel.1,
                s.padding.1,
                s.stride.1,
                s.dilation.1,
                s.output_padding.1,
            ),
        )
    }
}

/// f64 direct convolution of the logical values (contiguous NCHW input and kernel) and, per
/// output element, the sum of |products|.
fn conv_reference(c: &CCase, x: &[f64], w: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let s = &c.spec;
    let (ho, wo) = c.out_hw();
    let (hi, wi) = s.input;
    let (kh, kw) = s.kernel;
    let mut out = vec![0f64; s.batch * s.c_out * ho * wo];
    let mut abs = vec![0f64; s.batch * s.c_out * ho * wo];
    for b in 0..s.batch {
        for ci in 0..s.c_in {
            for co in 0..s.c_out {
                for ky in 0..kh {
                    for kx in 0..kw {
                        let wv = if c.transposed {
                            w[((ci * s.c_out + co) * kh + ky) * kw + kx]
                        } else {
                            w[((co * s.c_in + ci) * kh + ky) * kw + kx]
                        };
                        if c.transposed {
                            for iy in 0..hi {
                                for ix in 0..wi {
                                    let oy = (iy * s.stride.0 + ky * s.dilation.0) as i64
                                        - s.padding.0 as i64;
                                    let ox = (ix * s.stride.1 + kx * s.dilation.1) as i64
                                        - s.padding.1 as i64;
                                    if oy < 0 || ox < 0 || oy as usize >= ho || ox as usize >= wo {
                                        continue;
                                    }
                                    let o =
                                        ((b * s.c_out + co) * ho + oy as usize) * wo + ox as usize;
                                    let t = x[((b * s.c_in + ci) * hi + iy) * wi + ix] * wv;
                                    out[o] += t;
                                    abs[o] += t.abs();
                                }
                            }
                        } else {
                            for oy in 0..ho {
                                for ox in 0..wo {
                                    let iy = (oy * s.stride.0 + ky * s.dilation.0) as i64
                                        - s.padding.0 as i64;
                                    let ix = (ox * s.stride.1 + kx * s.dilation.1) as i64
                                        - s.padding.1 as i64;
                                    if iy < 0 || ix < 0 || iy as usize >= hi || ix as usize >= wi {
                                        continue;
                                    }
                                    let o = ((b * s.c_out + co) * ho + oy) * wo + ox;
                                    let t = x
                                        [((b * s.c_in + ci) * hi + iy as usize) * wi + ix as usize]
                                        * wv;
                                    out[o] += t;
                                    abs[o] += t.abs();
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    (out, abs)
}

/// candle's own CPU convolution (Tensor level, same dtype) of the logical values.
fn conv_oracle(c: &CCase, dtype: DType, x: &[f64], w: &[f64]) -> candle_core::Result<CpuStorage> {
    let s = &c.spec;
    let xt = Tensor::from_vec(x.to_vec(), c.x_dims(), &Device::Cpu)?.to_dtype(dtype)?;
    let wt = Tensor::from_vec(w.to_vec(), c.w_dims(), &Device::Cpu)?.to_dtype(dtype)?;
    let y = match (c.transposed, c.one_d) {
        (false, false) => xt.conv2d(&wt, s.padding.0, s.stride.0, s.dilation.0, 1)?,
        (false, true) => xt.conv1d(&wt, s.padding.1, s.stride.1, s.dilation.1, 1)?,
        (true, false) => xt.conv_transpose2d(
            &wt,
            s.padding.0,
            s.output_padding.0,
            s.stride.0,
            s.dilation.0,
        )?,
        (true, true) => xt.conv_transpose1d(
            &wt,
            s.padding.1,
            s.output_padding.1,
            s.stride.1,
            s.dilation.1,
            1,
        )?,
    };
    let v: Vec<f64> = y.to_dtype(DType::F64)?.flatten_all()?.to_vec1()?;
    Ok(storage_from_f64(dtype, &v))
}

pub(super) fn run_conv(ctx: &mut Ctx) {
    for (path, suffix) in [
        (ConvPath::Im2col, "(im2col)"),
        (ConvPath::Library, "(library)"),
        (ConvPath::Auto, "(auto)"),
    ] {
        ctx.dev.set_conv_path(path);
        for dtype in storage_dtypes() {
            let col = dtype.as_str();
            for c in conv_cases() {
                let op = match (c.transposed, c.one_d) {
                    (false, false) => "conv2d",
                    (false, true) => "conv1d",
                    (true, false) => "conv_transpose2d",
                    (true, true) => "conv_transpose1d",
                };
                let row = format!("{op} {suffix}");
                let seed = case_seed(ctx.base, &[&row, col, &c.name]);
                let mut rng = Rng::new(seed);
                let xl = c.x_layout();
                let wl = c.w_layout();
                let x = gen(dtype, needed_len(&xl), Dist::General, &mut rng);
                let w = gen(dtype, needed_len(&wl), Dist::General, &mut rng);
                let (gx, gw) = (ctx.upload(&x), ctx.upload(&w));
                let (ho, wo) = c.out_hw();
                ctx.poison(c.spec.batch * c.spec.c_out * ho * wo * dtype.size_in_bytes());
                let gpu = gpu_result(if c.transposed {
                    gx.conv_transpose2d_with(&xl, &gw, &wl, &c.spec)
                } else {
                    gx.conv2d_with(&xl, &gw, &wl, &c.spec)
                });
                let library_dtype = matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
                // The library computes a transposed convolution as a backward-data pass,
                // which cannot express an output padding >= the stride: a typed error when
                // forced (Auto takes im2col for it).
                let expressible = !c.transposed
                    || (c.spec.output_padding.0 < c.spec.stride.0
                        && c.spec.output_padding.1 < c.spec.stride.1);
                let expect_pass = is_gemm_dtype(dtype)
                    && (path != ConvPath::Library || (library_dtype && expressible));
                let outcome = if expect_pass {
                    let (xv, wv) = (logical_values(&x, &xl), logical_values(&w, &wl));
                    let want = oracle(|| conv_oracle(&c, dtype, &xv, &wv));
                    let (exact, abs) = conv_reference(&c, &xv, &wv);
                    let reference = storage_from_f64(dtype, &exact);
                    let terms = c.spec.c_in * c.spec.kernel.0 * c.spec.kernel.1;
                    judge_with(Expect::Pass, gpu, Some(want), Some(reference), &|g, w| {
                        compare_bound(g, &values_f64(w), &abs, 2 * terms)
                    })
                } else {
                    judge(Expect::TypedError, gpu, None, None, true)
                };
                ctx.matrix.record(&row, col, &c.name, seed, outcome);
            }
        }
    }
    ctx.dev.set_conv_path(ConvPath::Auto);
}

/// Dims that do not describe the product are candle's `MatMulUnexpectedStriding`, as on the
/// CPU (layouts GEMM cannot read are copied, see `matmul_copy_cases`); a view past its buffer,
/// a device or dtype mismatch are errors too. Nothing is launched for them.
pub(super) fn check_matmul_rejections(dev: &RocmDevice) {
    let a = dev
        .zeros_impl(&Shape::from((2, 3, 3, 4)), DType::F32)
        .unwrap();
    let b = dev
        .zeros_impl(&Shape::from((2, 3, 4, 5)), DType::F32)
        .unwrap();
    // The lhs's last dims are not (m, k).
    let e = a
        .matmul(
            &b,
            (6, 3, 5, 4),
            &Layout::contiguous((2, 3, 4, 3)),
            &Layout::contiguous((2, 3, 4, 5)),
        )
        .unwrap_err();
    assert!(
        matches!(
            unwrapped(&e),
            candle_core::Error::MatMulUnexpectedStriding(_)
        ),
        "{e}"
    );
    // A view past the end of its buffer is a typed error, not an out-of-bounds read.
    let e = a
        .matmul(
            &b,
            (1, 3, 5, 4),
            &Layout::contiguous_with_offset((3, 4), 70),
            &Layout::contiguous((4, 5)),
        )
        .unwrap_err();
    assert!(RocmError::from_candle(&e).is_some(), "{e}");
    // dtype mismatch
    let h = dev.zeros_impl(&Shape::from((4, 5)), DType::F16).unwrap();
    let e = a
        .matmul(
            &h,
            (1, 3, 5, 4),
            &Layout::contiguous((3, 4)),
            &Layout::contiguous((4, 5)),
        )
        .unwrap_err();
    assert!(
        matches!(
            unwrapped(&e),
            candle_core::Error::DTypeMismatchBinaryOp { .. }
        ),
        "{e}"
    );
}

/// The oracle's own quirk, checked without a GPU: candle-core 0.11.1's CPU matmul folds a
/// batch into one GEMM when the rhs batch stride is 0 and the lhs batch stride is `m * k`,
/// reading the stacked lhs rows with the lhs row stride — wrong when the lhs is a transposed
/// view (a `Linear` after `flatten(2).transpose(1, 2)`, and the CPU's own conv_transpose1d
/// col2im path). Batch 0 is right, every later batch is not; one batch at a time is right.
/// This is why the GPU suites judge such layouts against an f64 reference (the conformance
/// rows report them as `ok*`) and the model zoo takes its CPU reference one batch element at
/// a time. If this test fails, candle fixed the fold: drop those workarounds.
#[test]
fn cpu_oracle_folds_broadcast_batches_wrongly() {
    let (b, m, n, k) = (2usize, 71usize, 16usize, 31usize);
    let mut rng = Rng::new(71);
    let x = gen(DType::F32, b * k * m, Dist::General, &mut rng);
    let w = gen(DType::F32, n * k, Dist::General, &mut rng);
    // lhs: (2, 71, 31) = a contiguous (2, 31, 71) transposed; rhs: a (16, 31) weight
    // broadcast over the batch and transposed, as `Linear` makes it.
    let lhs_l = strided(&[b, m, k], &[m * k, 1, m], 0);
    let rhs_l = strided(&[b, k, n], &[0, 1, k], 0);
    let cpu = CpuDevice;
    let (cx, cw) = (
        cpu.storage_from_cpu_storage(&x).unwrap(),
        cpu.storage_from_cpu_storage(&w).unwrap(),
    );
    let got = values_f64(&cx.matmul(&cw, (b, m, n, k), &lhs_l, &rhs_l).unwrap());
    let case = MCase {
        name: "oracle".into(),
        bmnk: (b, m, n, k),
        lhs: lhs_l.clone(),
        rhs: rhs_l.clone(),
    };
    let (exact, abs) = matmul_reference(&case, &x, &w);
    let within = |i: usize| (got[i] - exact[i]).abs() <= 1e-5 * abs[i].max(1.0);
    let per = m * n;
    assert!(
        (0..per).all(within),
        "batch 0 of the CPU matmul is wrong too"
    );
    let wrong_in_batch1 = (per..2 * per).filter(|&i| !within(i)).count();
    assert!(
        wrong_in_batch1 > per / 2,
        "candle's CPU matmul now gets batch 1 right ({wrong_in_batch1} of {per} wrong): the \
         batch-fold quirk is gone; remove the per-element reference of the zoo and this test"
    );
    // One batch element at a time, the CPU is right.
    let one_l = strided(&[1, m, k], &[m * k, 1, m], m * k);
    let one_r = strided(&[1, k, n], &[0, 1, k], 0);
    let got1 = values_f64(&cx.matmul(&cw, (1, m, n, k), &one_l, &one_r).unwrap());
    assert!((0..per).all(|i| (got1[i] - exact[per + i]).abs() <= 1e-5 * abs[per + i].max(1.0)));
}
