//! GPU tests of the `reduce` family (a module of tests/gpu.rs): sum, min, max, argmin, argmax
//! over first / middle / last / several / all / no dims, every layout kind, every dtype, against
//! host references (exact i128 wrapped sums for integers, f64 sums for floats, Candle's CPU fold
//! for min/max/argmin/argmax: first index on ties, NaN only when it is the first element).

use super::*;
use rocm_kernels::reduce::{self as rd, ReduceOp};

/// (dims, reduce dims) of every case: ranks 0 to 4, empty shapes and empty reduced dims, long
/// rows (8192) and columns, short rows (1 to 3), sizes that are not multiples of a block.
fn reduce_cases() -> Vec<(Vec<usize>, Vec<usize>)> {
    vec![
        (vec![], vec![]),
        (vec![1], vec![0]),
        (vec![6, 3], vec![]),
        (vec![7, 13], vec![1]),
        (vec![7, 13], vec![0]),
        (vec![4, 5, 6], vec![1]),
        (vec![4, 5, 6], vec![0, 2]),
        (vec![4, 5, 6], vec![2, 0, 1]),
        (vec![2, 3, 4, 5], vec![1, 2]),
        (vec![2, 3, 4, 5], vec![3]),
        (vec![2, 3, 4, 5], vec![0, 3]),
        (vec![33, 65], vec![1]),
        (vec![517], vec![0]),
        (vec![1000, 1], vec![1]),
        (vec![1000, 2], vec![1]),
        (vec![700, 3], vec![1]),
        (vec![5, 8192], vec![1]),
        (vec![8192, 3], vec![0]),
        (vec![3, 0, 2], vec![1]),
        (vec![0, 5], vec![1]),
        (vec![6, 1], vec![1]),
    ]
}

/// For each element of `dims` (row-major): its output index (reduced dims set to 0) and its
/// index among the reduced elements (row-major over the reduced dims in increasing order).
fn reduce_positions(dims: &[usize], reduced: &[bool]) -> Vec<(usize, usize)> {
    let n = numel(dims);
    let mut idx = vec![0usize; dims.len()];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let (mut o, mut r) = (0usize, 0usize);
        for (d, &i) in idx.iter().enumerate() {
            if reduced[d] {
                r = r * dims[d] + i;
            } else {
                o = o * dims[d] + i;
            }
        }
        out.push((o, r));
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// Inputs with many ties (small values, signed zeros) and, with `nan`, some NaNs (often first).
fn gen_reduce_input<T: TT>(rng: &mut Lcg, nan: bool) -> T {
    if T::IS_FLOAT {
        if nan && rng.below(8) == 0 {
            return T::from_f64(f64::NAN);
        }
        const TIES: [f64; 6] = [-1.0, -0.0, 0.0, 0.5, 2.0, -3.0];
        match rng.below(4) {
            0 => T::from_f64(TIES[rng.below(6) as usize]),
            _ => T::from_f64(rng.uniform(-10.0, 10.0)),
        }
    } else if rng.below(2) == 0 {
        T::from_i128(rng.below(5) as i128 - 2)
    } else {
        gen_int(rng)
    }
}

/// Candle's fold over one output's elements: (chosen element, its index).
fn fold_ref<T: TT>(xs: &[T], min: bool) -> (T, u32) {
    let (mut val, mut acc) = (xs[0], 0u32);
    for (i, &x) in xs.iter().enumerate().skip(1) {
        let replace = if T::IS_FLOAT {
            let (v, s) = (val.to_f64(), x.to_f64());
            if min {
                v > s
            } else {
                v < s
            }
        } else {
            let (v, s) = (val.to_i128(), x.to_i128());
            if min {
                v > s
            } else {
                v < s
            }
        };
        if replace {
            val = x;
            acc = i as u32;
        }
    }
    (val, acc)
}

/// Sum tolerance: the result's rounding, plus the accumulation error (f32 accumulation for
/// f16/bf16/f32, f64 for f64) growing with sqrt(n) relative to the sum of magnitudes.
fn sum_ok<T: TT>(got: T, want: f64, sum_abs: f64, n: usize) -> bool {
    let g = got.to_f64();
    if want.is_nan() {
        return g.is_nan();
    }
    let acc_eps = if T::NAME == "f64" { 5e-16 } else { 2.4e-7 };
    let tol = T::REL * want.abs() + T::ABS + acc_eps * (n.max(1) as f64).sqrt() * sum_abs;
    // A sum beyond the type's range rounds to an infinity of its sign (f16 tops out at 65504):
    // the f64 reference must be rounded to T first. Within the tolerance of the overflow
    // threshold either outcome is correct.
    let rounded = T::from_f64(want).to_f64();
    if rounded.is_infinite() {
        let near_threshold = T::from_f64(want - want.signum() * tol).to_f64().is_finite();
        return g == rounded || (near_threshold && (g - want).abs() <= tol);
    }
    (g - want).abs() <= tol
}

/// An f64 sum with Neumaier's compensation: the reference for long sums (a plain left-to-right
/// f64 sum of 2^18 equal terms drifts further from the exact value than the tolerance allows).
fn compensated_sum(xs: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut c) = (0f64, 0f64);
    for x in xs {
        let t = sum + x;
        if !t.is_finite() {
            // Infinities and NaNs: the plain sum's value (no compensation to keep).
            sum = t;
            c = 0.0;
            continue;
        }
        if sum.abs() >= x.abs() {
            c += (sum - t) + x;
        } else {
            c += (x - t) + sum;
        }
        sum = t;
    }
    if sum.is_finite() {
        sum + c
    } else {
        sum
    }
}

/// Runs one (op, case, layout) and checks it; returns whether a kernel had work to do.
fn check_reduce<T: TT>(
    s: &Stream,
    op: ReduceOp,
    dims: &[usize],
    rdims: &[usize],
    kind: Kind,
    nan: bool,
) -> bool {
    let view = make_view(dims, kind);
    let label = format!(
        "{}_{} over {rdims:?}{} on {}",
        op.name(),
        T::NAME,
        if nan { " with NaNs" } else { "" },
        view.describe()
    );
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let src = Operand::new(s, view, || gen_reduce_input::<T>(&mut rng, nan));
    let reduced: Vec<bool> = (0..dims.len()).map(|d| rdims.contains(&d)).collect();
    let out_n: usize = dims
        .iter()
        .zip(&reduced)
        .map(|(&d, &r)| if r { 1 } else { d })
        .product();
    let red_n: usize = dims
        .iter()
        .zip(&reduced)
        .map(|(&d, &r)| if r { d } else { 1 })
        .product();
    // Group the elements by output, in reduced-index order.
    let mut groups: Vec<Vec<T>> = vec![vec![T::from_f64(0.0); red_n]; out_n];
    for ((o, r), x) in reduce_positions(dims, &reduced)
        .into_iter()
        .zip(src.values())
    {
        groups[o][r] = x;
    }
    let empty_extremum = op != ReduceOp::Sum && red_n == 0 && out_n > 0;
    if op.returns_index() {
        let mut out = Output::<u32>::new(s, out_n);
        let r = rd::arg_reduce(s, op, dims, src.strided(), rdims, &mut out.view());
        if empty_extremum {
            assert!(matches!(r, Err(Error::Layout { .. })), "{ctx}: {r:?}");
            assert!(out.untouched(), "{ctx}: launched anyway");
            return false;
        }
        r.unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let got = out.read(&ctx);
        let want: Vec<Want<u32>> = groups
            .iter()
            .map(|g| Want::Exact(fold_ref(g, op == ReduceOp::ArgMin).1))
            .collect();
        compare(&ctx, &got, &want, 0.0, 0.0);
    } else {
        let mut out = Output::<T>::new(s, out_n);
        let r = rd::reduce(s, op, dims, src.strided(), rdims, &mut out.view());
        if empty_extremum {
            assert!(matches!(r, Err(Error::Layout { .. })), "{ctx}: {r:?}");
            assert!(out.untouched(), "{ctx}: launched anyway");
            return false;
        }
        r.unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let got = out.read(&ctx);
        if op == ReduceOp::Sum {
            for (i, (g, xs)) in got.iter().zip(&groups).enumerate() {
                if T::IS_FLOAT {
                    let want = compensated_sum(xs.iter().map(|x| x.to_f64()));
                    let sum_abs: f64 = xs.iter().map(|x| x.to_f64().abs()).sum();
                    assert!(
                        sum_ok(*g, want, sum_abs, xs.len()),
                        "{ctx}: [{i}] got {g:?} want {want} (sum of |x| {sum_abs}, n {})",
                        xs.len()
                    );
                } else {
                    let want = T::from_i128(xs.iter().map(|x| x.to_i128()).sum());
                    assert_eq!(
                        g.bits(),
                        want.bits(),
                        "{ctx}: [{i}] got {g:?} want {want:?}"
                    );
                }
            }
        } else {
            let want: Vec<Want<T>> = groups
                .iter()
                .map(|g| Want::Exact(fold_ref(g, op == ReduceOp::Min).0))
                .collect();
            compare(&ctx, &got, &want, 0.0, 0.0);
        }
    }
    out_n > 0
}

fn reduce_for<T: TT>(s: &Stream, op: ReduceOp, pairs: &mut Vec<String>, launches: &mut usize) {
    for (dims, rdims) in reduce_cases() {
        for kind in KINDS {
            *launches += check_reduce::<T>(s, op, &dims, &rdims, kind, false) as usize;
        }
    }
    if T::IS_FLOAT {
        for (dims, rdims) in [
            (vec![40, 9], vec![1]),
            (vec![9, 40], vec![0]),
            (vec![4, 300], vec![1]),
        ] {
            for kind in [Kind::Contiguous, Kind::Transposed, Kind::Offset] {
                *launches += check_reduce::<T>(s, op, &dims, &rdims, kind, true) as usize;
            }
        }
    }
    pairs.push(format!("{}_{}", op.name(), T::NAME));
}

fn reduce_all_ops<T: TT>(s: &Stream, pairs: &mut Vec<String>, launches: &mut usize) {
    for op in ReduceOp::ALL {
        reduce_for::<T>(s, op, pairs, launches);
    }
}

#[test]
#[ignore = "needs a GPU"]
fn reduce_all_ops_all_dtypes() {
    let s = stream();
    let (mut pairs, mut launches) = (Vec::new(), 0);
    reduce_all_ops::<u8>(&s, &mut pairs, &mut launches);
    reduce_all_ops::<u32>(&s, &mut pairs, &mut launches);
    reduce_all_ops::<i16>(&s, &mut pairs, &mut launches);
    reduce_all_ops::<i32>(&s, &mut pairs, &mut launches);
    reduce_all_ops::<i64>(&s, &mut pairs, &mut launches);
    reduce_all_ops::<bf16>(&s, &mut pairs, &mut launches);
    reduce_all_ops::<f16>(&s, &mut pairs, &mut launches);
    reduce_all_ops::<f32>(&s, &mut pairs, &mut launches);
    reduce_all_ops::<f64>(&s, &mut pairs, &mut launches);
    println!(
        "reduce: {} (op, dtype) pairs, {launches} checked launches over {} cases x {} layouts \
         (+ NaN cases): {}",
        pairs.len(),
        reduce_cases().len(),
        KINDS.len(),
        pairs.join(" ")
    );
}

/// Large reductions: 1000003 elements summed (both kernels), 2^20-element rows' argmax.
#[test]
#[ignore = "needs a GPU"]
fn reduce_large() {
    let s = stream();
    let mut checked = 0;
    for (dims, rdims, kind) in [
        (vec![1_000_003], vec![0], Kind::Contiguous),
        (vec![1001, 999], vec![0], Kind::Contiguous),
        (vec![1001, 999], vec![1], Kind::Transposed),
        (vec![3, 1 << 20], vec![1], Kind::Offset),
    ] {
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::ArgMin] {
            check_reduce::<f32>(&s, op, &dims, &rdims, kind, false);
            check_reduce::<i32>(&s, op, &dims, &rdims, kind, false);
            check_reduce::<bf16>(&s, op, &dims, &rdims, kind, false);
            checked += 3;
        }
    }
    println!("reduce large: {checked} (op, dtype, shape) cases up to 3 x 2^20 elements");
}

#[test]
#[ignore = "needs a GPU"]
fn reduce_invalid_calls_are_errors() {
    let s = stream();
    let host: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let src = s.alloc_from_host(&host).unwrap();
    let full = || Strided::new(src.as_slice(), &[12, 4, 1]);
    let mut out = Output::<f32>::new(&s, 6);
    let mut idx = Output::<u32>::new(&s, 6);
    let dims = [2usize, 3, 4];
    let layout = |what: &str, r: rocm_kernels::Result<()>| {
        assert!(matches!(r, Err(Error::Layout { .. })), "{what}: {r:?}");
    };
    layout(
        "dim out of range",
        rd::reduce(&s, ReduceOp::Sum, &dims, full(), &[3], &mut out.view()),
    );
    layout(
        "dim twice",
        rd::reduce(&s, ReduceOp::Max, &dims, full(), &[2, 2], &mut out.view()),
    );
    layout(
        "dst length",
        rd::reduce(&s, ReduceOp::Sum, &dims, full(), &[1], &mut out.view()),
    );
    layout(
        "rank",
        rd::reduce(
            &s,
            ReduceOp::Sum,
            &dims,
            Strided::new(src.as_slice(), &[4, 1]),
            &[2],
            &mut out.view(),
        ),
    );
    layout(
        "short view",
        rd::arg_reduce(
            &s,
            ReduceOp::ArgMax,
            &dims,
            Strided::new(src.slice(..23).unwrap(), &[12, 4, 1]),
            &[2],
            &mut idx.view(),
        ),
    );
    let e = rd::reduce(&s, ReduceOp::ArgMin, &dims, full(), &[2], &mut out.view()).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let e = rd::arg_reduce(&s, ReduceOp::Sum, &dims, full(), &[2], &mut idx.view()).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(
        out.untouched() && idx.untouched(),
        "launched after an error"
    );
    // Empty outputs: Ok, nothing launched.
    let mut empty = Output::<f32>::new(&s, 0);
    rd::reduce(
        &s,
        ReduceOp::Min,
        &[0, 4],
        Strided::new(src.slice(..0).unwrap(), &[4, 1]),
        &[1],
        &mut empty.view(),
    )
    .expect("empty min");
    assert!(empty.untouched());
    println!("reduce errors: 7 invalid calls rejected before any launch, empty output Ok");
}

// ------------------------------------------------------------------------------------------
// Split (two-pass) reductions
// ------------------------------------------------------------------------------------------

/// How a split case's input is filled (before `patch`).
#[derive(Clone, Copy, Debug)]
enum Fill<T> {
    /// [`gen_reduce_input`]: ties, signed zeros, full-range integers.
    Mixed,
    /// Integers 0 to 3: float sums stay exact (or nearly, past 2^24) in every order, so a
    /// lost or doubled part (1/G of the sum) shows far above the tolerance.
    Small,
    /// Every element this value.
    Const(T),
}

/// One reduction through [`rd::reduce`] (which splits where it may) and through
/// [`rd::reduce_single_pass`] on the same input: both checked against the host reference (exact
/// for min/max and integer sums; f64 sums for floats), and the two bit for bit against each
/// other for min/max and integer sums. `rdims` must be the trailing dims (the reference groups
/// the row-major elements by output). `patch` sets elements by row-major index. Asserts that
/// the split is planned on this device exactly when `want_split`; returns the parts.
#[allow(clippy::too_many_arguments)]
fn check_split<T: TT>(
    s: &Stream,
    op: ReduceOp,
    dims: &[usize],
    rdims: &[usize],
    kind: Kind,
    fill: Fill<T>,
    patch: &[(usize, T)],
    want_split: bool,
) -> Option<usize> {
    let r = dims.len();
    assert!(
        rdims.iter().copied().eq(r - rdims.len()..r),
        "check_split takes trailing reduce dims, not {rdims:?}"
    );
    let view = make_view(dims, kind);
    let label = format!(
        "split {}_{} over {rdims:?} of {} ({fill:?}, {} patched)",
        op.name(),
        T::NAME,
        view.describe(),
        patch.len()
    );
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let mut host: Vec<T> = (0..view.buf_len)
        .map(|_| match fill {
            Fill::Mixed => gen_reduce_input::<T>(&mut rng, false),
            Fill::Small => T::from_f64(rng.below(4) as f64),
            Fill::Const(v) => v,
        })
        .collect();
    let positions = view.positions();
    for &(i, v) in patch {
        host[positions[i]] = v;
    }
    let values: Vec<T> = positions.iter().map(|&p| host[p]).collect();
    drop(positions);
    let buf = s.alloc_from_host(&host).expect("upload");
    drop(host);
    let src = || Strided::new(buf.slice(view.offset..).expect("view"), &view.strides);
    let red_n: usize = dims[r - rdims.len()..].iter().product();
    let out_n = numel(dims) / red_n;

    let parts = rd::split_parts::<T>(&s.device(), op, dims, &view.strides, rdims)
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(
        parts.is_some(),
        want_split,
        "{ctx}: planned parts {parts:?}"
    );

    let mut split_out = Output::<T>::new(s, out_n);
    rd::reduce(s, op, dims, src(), rdims, &mut split_out.view())
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let mut single_out = Output::<T>::new(s, out_n);
    rd::reduce_single_pass(s, op, dims, src(), rdims, &mut single_out.view())
        .unwrap_or_else(|e| panic!("{ctx} (single pass): {e}"));
    let got = split_out.read(&ctx);
    let single = single_out.read(&format!("{ctx} (single pass)"));

    for (o, xs) in values.chunks(red_n).enumerate() {
        let (g, g1) = (got[o], single[o]);
        if op == ReduceOp::Sum && T::IS_FLOAT {
            let want = compensated_sum(xs.iter().map(|x| x.to_f64()));
            let sum_abs: f64 = xs.iter().map(|x| x.to_f64().abs()).sum();
            // Tighter than sum_ok when the terms are small integers (Fill::Small, Const):
            // f32 sums of them are exact up to 2^24, within a few ulps of the total beyond.
            let tight = !matches!(fill, Fill::Mixed);
            for (what, v) in [("split", g), ("single pass", g1)] {
                let ok = sum_ok(v, want, sum_abs, xs.len())
                    && (!tight || want.is_nan() || (v.to_f64() - want).abs() <= 1e-5 * sum_abs);
                assert!(
                    ok,
                    "{ctx}: [{o}] {what} got {v:?} want {want} (sum of |x| {sum_abs}, n {})",
                    xs.len()
                );
            }
        } else {
            let want = if op == ReduceOp::Sum {
                T::from_i128(xs.iter().map(|x| x.to_i128()).sum())
            } else {
                fold_ref(xs, op == ReduceOp::Min).0
            };
            compare(&ctx, &[g], &[Want::Exact(want)], 0.0, 0.0);
            assert_eq!(
                g.bits(),
                g1.bits(),
                "{ctx}: [{o}] split {g:?} vs single pass {g1:?}"
            );
        }
    }
    println!("{ctx}: {out_n} outputs of {red_n}, parts {parts:?}");
    parts
}

/// The split path on the shapes: 2^26 f32 summed and maxed (the max case puts a NaN
/// first in the second half: the `_part` kernels keep it from hiding that half), 2^26 i32
/// max/min, (3, 2^22) over dim 1, transposed inputs,
/// awkward factors (2 * 3 * 99991), NaNs, all negative zeros.
#[test]
#[ignore = "needs a GPU"]
fn reduce_split_large() {
    let s = stream();
    let mut cases = 0;
    let n = 1usize << 26;
    // Full reductions of 2^26 elements.
    check_split::<f32>(
        &s,
        ReduceOp::Sum,
        &[n],
        &[0],
        Kind::Contiguous,
        Fill::Small,
        &[],
        true,
    );
    check_split::<f32>(
        &s,
        ReduceOp::Max,
        &[n],
        &[0],
        Kind::Contiguous,
        Fill::Mixed,
        &[(n / 2, f32::NAN), (n / 2 + 1, 100.0)],
        true,
    );
    check_split::<i32>(
        &s,
        ReduceOp::Max,
        &[n],
        &[0],
        Kind::Contiguous,
        Fill::Mixed,
        &[],
        true,
    );
    check_split::<i32>(
        &s,
        ReduceOp::Min,
        &[n],
        &[0],
        Kind::Offset,
        Fill::Mixed,
        &[],
        true,
    );
    check_split::<i32>(
        &s,
        ReduceOp::Sum,
        &[n],
        &[0],
        Kind::Contiguous,
        Fill::Mixed,
        &[],
        true,
    );
    cases += 5;
    // (3, 2^22) over dim 1: contiguous, and transposed (kept stride 1, reduced stride 3: the
    // layout-info path with the parts as an extra kept dim).
    let dims = [3usize, 1 << 22];
    for kind in [Kind::Contiguous, Kind::Transposed] {
        check_split::<f32>(&s, ReduceOp::Sum, &dims, &[1], kind, Fill::Small, &[], true);
        check_split::<f64>(&s, ReduceOp::Sum, &dims, &[1], kind, Fill::Mixed, &[], true);
        check_split::<i32>(&s, ReduceOp::Max, &dims, &[1], kind, Fill::Mixed, &[], true);
        check_split::<f32>(&s, ReduceOp::Max, &dims, &[1], kind, Fill::Mixed, &[], true);
        cases += 4;
    }
    // A transposed (4096, 2048) reduced over everything: one contiguous run once the split
    // path orders the reduced dims by stride.
    let dims = [2048usize, 4096];
    for kind in [Kind::Transposed, Kind::Narrowed] {
        check_split::<f32>(
            &s,
            ReduceOp::Sum,
            &dims,
            &[0, 1],
            kind,
            Fill::Small,
            &[],
            true,
        );
        check_split::<i32>(
            &s,
            ReduceOp::Min,
            &dims,
            &[0, 1],
            kind,
            Fill::Mixed,
            &[],
            true,
        );
        cases += 2;
    }
    // Awkward factors: 6 parts of 2 * 3 * 99991, 3 of 3 * 99991 per row, none of the prime.
    let awkward = 2 * 3 * 99_991;
    for kind in [Kind::Contiguous, Kind::Offset] {
        check_split::<f32>(
            &s,
            ReduceOp::Sum,
            &[awkward],
            &[0],
            kind,
            Fill::Small,
            &[],
            true,
        );
        check_split::<u8>(
            &s,
            ReduceOp::Sum,
            &[awkward],
            &[0],
            kind,
            Fill::Mixed,
            &[],
            true,
        );
        check_split::<i16>(
            &s,
            ReduceOp::Max,
            &[awkward],
            &[0],
            kind,
            Fill::Mixed,
            &[],
            true,
        );
        cases += 3;
    }
    for (dims, split) in [([2usize, 3 * 99_991], true), ([6, 99_991], false)] {
        check_split::<f32>(
            &s,
            ReduceOp::Sum,
            &dims,
            &[1],
            Kind::Rotated,
            Fill::Small,
            &[],
            split,
        );
        check_split::<u32>(
            &s,
            ReduceOp::Min,
            &dims,
            &[1],
            Kind::Transposed,
            Fill::Mixed,
            &[],
            split,
        );
        cases += 2;
    }
    // NaNs: sums turn NaN, min/max follow Candle's fold (bit-identical to the single pass).
    let m = 1usize << 22;
    let nans = [(12_345, f32::NAN), (m / 2, f32::NAN), (m - 1, f32::NAN)];
    check_split::<f32>(
        &s,
        ReduceOp::Sum,
        &[m],
        &[0],
        Kind::Contiguous,
        Fill::Small,
        &nans,
        true,
    );
    check_split::<f64>(
        &s,
        ReduceOp::Sum,
        &[2, m],
        &[1],
        Kind::Transposed,
        Fill::Small,
        &[(m + 7, f64::NAN)],
        true,
    );
    check_split::<f32>(
        &s,
        ReduceOp::Max,
        &[m],
        &[0],
        Kind::Contiguous,
        Fill::Mixed,
        &nans,
        true,
    );
    check_split::<f32>(
        &s,
        ReduceOp::Min,
        &[m],
        &[0],
        Kind::Contiguous,
        Fill::Mixed,
        &[(0, f32::NAN)],
        true,
    );
    cases += 4;
    // Signed zeros: the max of all -0.0 is -0.0; of +0.0 with one -0.0 first, that -0.0.
    check_split::<f32>(
        &s,
        ReduceOp::Max,
        &[m],
        &[0],
        Kind::Contiguous,
        Fill::Const(-0.0),
        &[],
        true,
    );
    check_split::<f64>(
        &s,
        ReduceOp::Max,
        &[3, m],
        &[1],
        Kind::Contiguous,
        Fill::Const(-0.0),
        &[],
        true,
    );
    check_split::<f32>(
        &s,
        ReduceOp::Max,
        &[m],
        &[0],
        Kind::Contiguous,
        Fill::Const(0.0),
        &[(0, -0.0)],
        true,
    );
    check_split::<f32>(
        &s,
        ReduceOp::Sum,
        &[m],
        &[0],
        Kind::Contiguous,
        Fill::Const(-0.0),
        &[],
        true,
    );
    cases += 4;
    println!("reduce split: {cases} cases");
}

/// Every (op, dtype) pair on a shape that splits when the op may: sums of every dtype but
/// f16/bf16, min/max of every dtype; the others (f16/bf16 sums, argmin/argmax) stay in one
/// pass.
#[test]
#[ignore = "needs a GPU"]
fn reduce_split_every_dtype() {
    fn for_dtype<T: TT>(s: &Stream, pairs: &mut Vec<String>) {
        let dims = [3usize, 1 << 18];
        for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max] {
            let split = match op {
                ReduceOp::Sum => !matches!(T::NAME, "f16" | "bf16"),
                _ => true,
            };
            for kind in [Kind::Contiguous, Kind::Mixed] {
                check_split::<T>(s, op, &dims, &[1], kind, Fill::Mixed, &[], split);
            }
            if split {
                pairs.push(format!("{}_{}", op.name(), T::NAME));
            }
        }
        for op in [ReduceOp::ArgMin, ReduceOp::ArgMax] {
            let parts = rd::split_parts::<T>(&s.device(), op, &dims, &[1 << 18, 1], &[1]);
            assert!(matches!(parts, Ok(None)), "{op:?} {}: {parts:?}", T::NAME);
        }
    }
    let s = stream();
    let mut pairs = Vec::new();
    for_dtype::<u8>(&s, &mut pairs);
    for_dtype::<u32>(&s, &mut pairs);
    for_dtype::<i16>(&s, &mut pairs);
    for_dtype::<i32>(&s, &mut pairs);
    for_dtype::<i64>(&s, &mut pairs);
    for_dtype::<bf16>(&s, &mut pairs);
    for_dtype::<f16>(&s, &mut pairs);
    for_dtype::<f32>(&s, &mut pairs);
    for_dtype::<f64>(&s, &mut pairs);
    println!(
        "reduce split: {} (op, dtype) pairs split: {}",
        pairs.len(),
        pairs.join(" ")
    );
}
