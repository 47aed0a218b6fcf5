//! GPU tests of the `pool` family (a module of tests/gpu.rs): avg/max pooling and nearest /
//! bilinear upsampling for every dtype and layout kind (contiguous, offset, transposed,
//! rotated, narrowed, broadcast, mixed), odd sizes, size-1 axes, kernel == stride and
//! kernel != stride, scale factors and align_corners, against host references: f64 means for
//! float avg pooling (exact truncated means for integers), Candle's CPU rules for max, nearest
//! and bilinear (computed in f64 exactly as Candle does: exact matches).

use super::*;
use rocm_kernels::pool as pl;

/// NCHW input shapes: odd sizes, size-1 axes, a plane larger than a block.
fn pool_shapes() -> Vec<Vec<usize>> {
    vec![
        vec![2, 3, 7, 9],
        vec![1, 1, 1, 1],
        vec![3, 2, 5, 4],
        vec![1, 4, 16, 16],
        vec![2, 1, 33, 17],
        vec![1, 2, 1, 6],
        vec![0, 3, 4, 4],
    ]
}

fn gen_pool_value<T: TT>(rng: &mut Lcg) -> T {
    if T::IS_FLOAT {
        T::from_f64(rng.uniform(-10.0, 10.0))
    } else {
        gen_int(rng)
    }
}

/// Row-major NCHW element (b, c, y, x) of the view's values.
fn at<T: TT>(vals: &[T], dims: &[usize], b: usize, c: usize, y: usize, x: usize) -> T {
    vals[((b * dims[1] + c) * dims[2] + y) * dims[3] + x]
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum PoolOp {
    Avg,
    Max,
}

fn check_pool<T: TT>(
    s: &Stream,
    op: PoolOp,
    dims: &[usize],
    kind: Kind,
    k: (usize, usize),
    st: (usize, usize),
) {
    let view = make_view(dims, kind);
    let label = format!(
        "{op:?}_pool2d_{} k {k:?} stride {st:?} on {}",
        T::NAME,
        view.describe()
    );
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let mut nan_rng = Lcg::new(seed ^ 1);
    let src = Operand::new(s, view, || {
        // A few NaNs in float max pooling: Candle's `largest < v` rule.
        if T::IS_FLOAT && op == PoolOp::Max && nan_rng.below(16) == 0 {
            T::from_f64(f64::NAN)
        } else {
            gen_pool_value::<T>(&mut rng)
        }
    });
    let out_dims = pl::pool2d_output_dims(dims, k, st).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let n = numel(&out_dims);
    let mut out = Output::<T>::new(s, n);
    let r = match op {
        PoolOp::Avg => pl::avg_pool2d(s, dims, src.strided(), &mut out.view(), k, st),
        PoolOp::Max => pl::max_pool2d(s, dims, src.strided(), &mut out.view(), k, st),
    };
    r.unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got = out.read(&ctx);
    let vals = src.values();
    let mut want = Vec::with_capacity(n);
    for b in 0..out_dims[0] {
        for c in 0..out_dims[1] {
            for y in 0..out_dims[2] {
                for x in 0..out_dims[3] {
                    let window: Vec<T> = (0..k.0)
                        .flat_map(|m| (0..k.1).map(move |nn| (m, nn)))
                        .map(|(m, nn)| at(&vals, dims, b, c, y * st.0 + m, x * st.1 + nn))
                        .collect();
                    want.push(match op {
                        PoolOp::Avg if T::IS_FLOAT => Want::Close(
                            window.iter().map(|v| v.to_f64()).sum::<f64>() / window.len() as f64,
                        ),
                        PoolOp::Avg => {
                            let sum: i128 = window.iter().map(|v| v.to_i128()).sum();
                            // i128 division truncates toward zero.
                            want_int(sum / window.len() as i128)
                        }
                        PoolOp::Max => {
                            let mut largest = window[0];
                            for &v in &window {
                                let less = if T::IS_FLOAT {
                                    largest.to_f64() < v.to_f64()
                                } else {
                                    largest.to_i128() < v.to_i128()
                                };
                                if less {
                                    largest = v;
                                }
                            }
                            Want::Exact(largest)
                        }
                    });
                }
            }
        }
    }
    // Window sums of up to 33x17 values of magnitude <= 10: room for the sum's roundings.
    compare(&ctx, &got, &want, T::REL * 4.0, T::REL * 10.0);
}

fn pool_for<T: TT>(s: &Stream, pairs: &mut Vec<String>, cases: &mut usize) {
    for op in [PoolOp::Avg, PoolOp::Max] {
        for dims in pool_shapes() {
            let (h, w) = (dims[2], dims[3]);
            let mut params = vec![((1, 1), (1, 1)), ((h, w), (1, 1)), ((h, 1), (2, 3))];
            if h >= 2 && w >= 2 {
                params.push(((2, 2), (2, 2)));
                params.push(((2, 2), (1, 1)));
            }
            if h >= 3 && w >= 3 {
                params.push(((3, 3), (2, 2)));
                params.push(((3, 2), (1, 3)));
                params.push(((2, 3), (3, 2)));
            }
            for (i, (k, st)) in params.into_iter().enumerate() {
                for (j, kind) in KINDS.into_iter().enumerate() {
                    // Every kind for the first two parameter sets, then a rotation of kinds.
                    if i >= 2 && (i + j) % 3 != 0 {
                        continue;
                    }
                    check_pool::<T>(s, op, &dims, kind, k, st);
                    *cases += 1;
                }
            }
        }
        pairs.push(format!("{op:?}_{}", T::NAME).to_lowercase());
    }
}

#[test]
#[ignore = "needs a GPU"]
fn pool2d_all_dtypes() {
    let s = stream();
    let (mut pairs, mut cases) = (Vec::new(), 0);
    pool_for::<u8>(&s, &mut pairs, &mut cases);
    pool_for::<u32>(&s, &mut pairs, &mut cases);
    pool_for::<i16>(&s, &mut pairs, &mut cases);
    pool_for::<i32>(&s, &mut pairs, &mut cases);
    pool_for::<i64>(&s, &mut pairs, &mut cases);
    pool_for::<bf16>(&s, &mut pairs, &mut cases);
    pool_for::<f16>(&s, &mut pairs, &mut cases);
    pool_for::<f32>(&s, &mut pairs, &mut cases);
    pool_for::<f64>(&s, &mut pairs, &mut cases);
    println!(
        "pool2d: {} (op, dtype) pairs over {cases} (shape, kernel, stride, layout) cases: {}",
        pairs.len(),
        pairs.join(" ")
    );
}

// ------------------------------------------------------------------------------------------
// Upsampling
// ------------------------------------------------------------------------------------------

/// Candle's nearest source index.
fn nearest_src(o: usize, input: usize, output: usize) -> usize {
    let scale = input as f64 / output as f64;
    ((o as f64 * scale) as usize).min(input - 1)
}

fn check_nearest1d<T: TT>(s: &Stream, dims: &[usize], kind: Kind, l_out: usize) {
    let view = make_view(dims, kind);
    let label = format!(
        "upsample_nearest1d_{} to {l_out} on {}",
        T::NAME,
        view.describe()
    );
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let src = Operand::new(s, view, || T::from_bits(rng.next_u64()));
    let n = dims[0] * dims[1] * l_out;
    let mut out = Output::<T>::new(s, n);
    pl::upsample_nearest1d(s, dims, src.strided(), &mut out.view(), l_out)
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got = out.read(&ctx);
    let vals = src.values();
    let want: Vec<Want<T>> = (0..n)
        .map(|i| {
            let (plane, x) = (i / l_out, i % l_out);
            Want::Exact(vals[plane * dims[2] + nearest_src(x, dims[2], l_out)])
        })
        .collect();
    let got_bits: Vec<u64> = got.iter().map(|v| v.bits()).collect();
    let want_bits: Vec<u64> = want
        .iter()
        .map(|w| match w {
            Want::Exact(v) => v.bits(),
            Want::Close(_) => unreachable!(),
        })
        .collect();
    if got_bits != want_bits {
        compare(&ctx, &got, &want, 0.0, 0.0);
        panic!("{ctx}: bits differ (NaN payloads)");
    }
}

fn check_nearest2d<T: TT>(s: &Stream, dims: &[usize], kind: Kind, h_out: usize, w_out: usize) {
    let view = make_view(dims, kind);
    let label = format!(
        "upsample_nearest2d_{} to {h_out}x{w_out} on {}",
        T::NAME,
        view.describe()
    );
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let src = Operand::new(s, view, || T::from_bits(rng.next_u64()));
    let n = dims[0] * dims[1] * h_out * w_out;
    let mut out = Output::<T>::new(s, n);
    pl::upsample_nearest2d(s, dims, src.strided(), &mut out.view(), h_out, w_out)
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got: Vec<u64> = out.read(&ctx).iter().map(|v| v.bits()).collect();
    let vals = src.values();
    let want: Vec<u64> = (0..n)
        .map(|i| {
            let x = i % w_out;
            let y = (i / w_out) % h_out;
            let plane = i / (w_out * h_out);
            let (sy, sx) = (
                nearest_src(y, dims[2], h_out),
                nearest_src(x, dims[3], w_out),
            );
            vals[(plane * dims[2] + sy) * dims[3] + sx].bits()
        })
        .collect();
    if let Some(i) = (0..n).find(|&i| got[i] != want[i]) {
        panic!(
            "{ctx}: element {i} has bits {:#x}, want {:#x}",
            got[i], want[i]
        );
    }
}

/// Candle's per-axis taps and weight (f64), with i0 clamped to in - 1.
fn bilinear_axis(o: usize, input: usize, scale: f64, align: bool) -> (usize, usize, f64) {
    let src = if align {
        scale * o as f64
    } else {
        scale * (o as f64 + 0.5) - 0.5
    };
    let src = src.max(0.0);
    let f = src.floor().min((input - 1) as f64);
    let i0 = f as usize;
    let i1 = (i0 + 1).min(input - 1);
    (i0, i1, (src - f).clamp(0.0, 1.0))
}

#[allow(clippy::too_many_arguments)]
fn check_bilinear<T: TT>(
    s: &Stream,
    dims: &[usize],
    kind: Kind,
    h_out: usize,
    w_out: usize,
    align: bool,
    scale_h: Option<f64>,
    scale_w: Option<f64>,
) {
    let view = make_view(dims, kind);
    let label = format!(
        "upsample_bilinear2d_{} to {h_out}x{w_out} align {align} scales {scale_h:?} {scale_w:?} on {}",
        T::NAME,
        view.describe()
    );
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let src = Operand::new(s, view, || gen_pool_value::<T>(&mut rng));
    let n = dims[0] * dims[1] * h_out * w_out;
    let mut out = Output::<T>::new(s, n);
    pl::upsample_bilinear2d(
        s,
        dims,
        src.strided(),
        &mut out.view(),
        h_out,
        w_out,
        align,
        scale_h,
        scale_w,
    )
    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got = out.read(&ctx);
    let vals = src.values();
    let identity = dims[2] == h_out && dims[3] == w_out;
    let sh = pl::bilinear_scale(dims[2], h_out, align, scale_h);
    let sw = pl::bilinear_scale(dims[3], w_out, align, scale_w);
    let want: Vec<Want<T>> = (0..n)
        .map(|i| {
            let x = i % w_out;
            let y = (i / w_out) % h_out;
            let plane = i / (w_out * h_out);
            let v = |yy: usize, xx: usize| vals[(plane * dims[2] + yy) * dims[3] + xx];
            if identity {
                return Want::Exact(v(y, x));
            }
            let (h0, h1, wh) = bilinear_axis(y, dims[2], sh, align);
            let (w0, w1, ww) = bilinear_axis(x, dims[3], sw, align);
            let (v00, v10) = (v(h0, w0).to_f64(), v(h0, w1).to_f64());
            let (v01, v11) = (v(h1, w0).to_f64(), v(h1, w1).to_f64());
            let top = v00 * (1.0 - ww) + v10 * ww;
            let bottom = v01 * (1.0 - ww) + v11 * ww;
            Want::Exact(T::from_f64(top * (1.0 - wh) + bottom * wh))
        })
        .collect();
    compare(&ctx, &got, &want, 0.0, 0.0);
}

/// (input dims, h_out, w_out, align_corners, scale_h, scale_w).
type BilinearCase = (Vec<usize>, usize, usize, bool, Option<f64>, Option<f64>);

fn upsample_for<T: TT>(s: &Stream, pairs: &mut Vec<String>, cases: &mut usize) {
    // Nearest 1-D: up, down, unchanged, to 1, non-integer ratios.
    for (dims, outs) in [
        (vec![2, 3, 5], vec![10, 13, 5, 2, 1]),
        (vec![1, 1, 1], vec![1, 4]),
        (vec![3, 2, 17], vec![34, 9, 600]),
        (vec![0, 2, 3], vec![6]),
    ] {
        for (k, &l_out) in outs.iter().enumerate() {
            for kind in KINDS.iter().skip(k % 2).step_by(2) {
                check_nearest1d::<T>(s, &dims, *kind, l_out);
                *cases += 1;
            }
        }
    }
    // Nearest 2-D.
    for (dims, outs) in [
        (
            vec![2, 3, 5, 4],
            vec![(10, 8), (7, 9), (5, 4), (2, 3), (1, 1)],
        ),
        (vec![1, 1, 1, 1], vec![(3, 2)]),
        (vec![1, 2, 16, 9], vec![(32, 18), (33, 40)]),
    ] {
        for (k, &(h, w)) in outs.iter().enumerate() {
            for kind in KINDS.iter().skip(k % 2).step_by(2) {
                check_nearest2d::<T>(s, &dims, *kind, h, w);
                *cases += 1;
            }
        }
    }
    // Bilinear: up, down, unchanged (a copy), align_corners, scale factors (consistent with the
    // output size, as Candle's tensor API computes it, and arbitrary), single-row outputs.
    let bilinear_cases: Vec<BilinearCase> = vec![
        (vec![2, 3, 5, 4], 10, 8, false, None, None),
        (vec![2, 3, 5, 4], 10, 8, true, None, None),
        (vec![2, 3, 5, 4], 7, 9, false, None, None),
        (vec![2, 3, 5, 4], 3, 2, false, None, None),
        (vec![2, 3, 5, 4], 3, 2, true, None, None),
        (vec![2, 3, 5, 4], 5, 4, false, Some(3.0), None),
        (vec![2, 3, 5, 4], 10, 8, false, Some(2.0), Some(2.0)),
        (vec![2, 3, 5, 4], 8, 6, false, Some(1.7), Some(1.5)),
        (vec![2, 3, 5, 4], 9, 9, false, Some(0.5), Some(3.0)),
        (vec![2, 3, 5, 4], 1, 1, true, None, None),
        (vec![2, 3, 5, 4], 1, 7, false, None, None),
        (vec![1, 1, 1, 1], 4, 3, false, None, None),
        (vec![1, 1, 1, 1], 4, 3, true, None, None),
        (vec![1, 2, 16, 9], 33, 40, false, None, None),
        (vec![0, 2, 3, 3], 6, 6, false, None, None),
    ];
    for (k, (dims, h, w, align, sh, sw)) in bilinear_cases.iter().enumerate() {
        for kind in KINDS.iter().skip(k % 2).step_by(2) {
            check_bilinear::<T>(s, dims, *kind, *h, *w, *align, *sh, *sw);
            *cases += 1;
        }
    }
    pairs.push(T::NAME.to_string());
}

#[test]
#[ignore = "needs a GPU"]
fn upsample_all_dtypes() {
    let s = stream();
    let (mut dtypes, mut cases) = (Vec::new(), 0);
    upsample_for::<u8>(&s, &mut dtypes, &mut cases);
    upsample_for::<u32>(&s, &mut dtypes, &mut cases);
    upsample_for::<i16>(&s, &mut dtypes, &mut cases);
    upsample_for::<i32>(&s, &mut dtypes, &mut cases);
    upsample_for::<i64>(&s, &mut dtypes, &mut cases);
    upsample_for::<bf16>(&s, &mut dtypes, &mut cases);
    upsample_for::<f16>(&s, &mut dtypes, &mut cases);
    upsample_for::<f32>(&s, &mut dtypes, &mut cases);
    upsample_for::<f64>(&s, &mut dtypes, &mut cases);
    println!(
        "upsample: nearest1d/nearest2d/bilinear2d over {cases} cases for {}",
        dtypes.join(" ")
    );
}

#[test]
#[ignore = "needs a GPU"]
fn pool_invalid_calls_are_errors_and_launch_nothing() {
    let s = stream();
    let src = Operand::new(&s, make_view(&[1, 2, 4, 4], Kind::Contiguous), || 1.0f32);
    let mut out = Output::<f32>::new(&s, 8);
    let dims = [1, 2, 4, 4];
    let mut checked = 0;
    // Kernel larger than the input, zero stride, wrong rank, short view, wrong destination.
    assert_layout_err(
        "kernel > input",
        pl::avg_pool2d(&s, &dims, src.strided(), &mut out.view(), (5, 1), (1, 1)),
    );
    assert_layout_err(
        "zero stride",
        pl::max_pool2d(&s, &dims, src.strided(), &mut out.view(), (2, 2), (0, 1)),
    );
    assert_layout_err(
        "rank 3",
        pl::max_pool2d(
            &s,
            &dims[1..],
            src.strided(),
            &mut out.view(),
            (2, 2),
            (2, 2),
        ),
    );
    let short = Strided::new(src.buf.slice(1..).unwrap(), &src.view.strides);
    assert_layout_err(
        "short view",
        pl::avg_pool2d(&s, &dims, short, &mut out.view(), (2, 2), (2, 2)),
    );
    assert_layout_err(
        "wrong destination",
        pl::avg_pool2d(&s, &dims, src.strided(), &mut out.view(), (2, 2), (1, 1)),
    );
    assert_layout_err(
        "upsample empty axis",
        pl::upsample_nearest2d(
            &s,
            &[1, 2, 0, 4],
            Strided::new(src.buf.slice(0..).unwrap(), &[0, 0, 4, 1]),
            &mut out.view(),
            1,
            4,
        ),
    );
    assert_layout_err(
        "nearest1d rank",
        pl::upsample_nearest1d(&s, &dims, src.strided(), &mut out.view(), 8),
    );
    for f in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert_layout_err(
            "bad scale factor",
            pl::upsample_bilinear2d(
                &s,
                &dims,
                src.strided(),
                &mut out.view(),
                2,
                2,
                false,
                Some(f),
                None,
            ),
        );
        checked += 1;
    }
    checked += 7;
    assert!(out.untouched(), "an invalid call launched a kernel");
    println!("pool errors: {checked} invalid calls rejected before any launch");
}
