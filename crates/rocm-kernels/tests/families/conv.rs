//! GPU tests of the `conv` family (a module of tests/gpu.rs): im2col over every layout kind and
//! a grid of (kernel, padding, stride, dilation), and col2im against a host scatter-add, for
//! bf16, f16, f32 and f64; integer dtypes are typed errors.

use super::*;
use rocm_kernels::conv::{self as cv, ConvGeometry};

/// (dims NCHW, kernel, padding, stride, dilation)
type Case = (
    [usize; 4],
    (usize, usize),
    (usize, usize),
    (usize, usize),
    (usize, usize),
);

fn cases() -> Vec<Case> {
    vec![
        ([2, 3, 7, 9], (3, 3), (1, 1), (1, 1), (1, 1)),
        ([1, 2, 8, 8], (3, 2), (0, 2), (2, 1), (1, 2)),
        ([2, 1, 1, 17], (1, 4), (0, 1), (1, 3), (1, 2)),
        ([1, 4, 5, 5], (5, 5), (2, 2), (1, 1), (1, 1)),
        ([3, 2, 6, 4], (2, 2), (0, 0), (2, 2), (2, 1)),
        ([0, 2, 4, 4], (2, 2), (0, 0), (1, 1), (1, 1)),
    ]
}

fn geometry(c: &Case) -> ConvGeometry {
    ConvGeometry {
        batch: c.0[0],
        channels: c.0[1],
        kernel: c.1,
        padding: c.2,
        stride: c.3,
        dilation: c.4,
    }
}

fn check_im2col<T: TT>(s: &Stream, case: &Case, kind: Kind) {
    let g = geometry(case);
    let dims = case.0;
    let view = make_view(&dims, kind);
    let label = format!("im2col_{} {case:?} on {}", T::NAME, view.describe());
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let x = Operand::<T>::new(s, view, || T::from_f64(rng.uniform(-4.0, 4.0)));
    let vals = x.values();
    let (h_out, w_out) = g.forward_output((dims[2], dims[3])).expect("geometry");
    let (kh, kw) = g.kernel;
    let n = dims[0] * dims[1] * kh * kw * h_out * w_out;
    let mut out = Output::<T>::new(s, n);
    let got_hw = cv::im2col(s, &g, (dims[2], dims[3]), x.strided(), &mut out.view())
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(got_hw, (h_out, w_out), "{ctx}");
    let got = out.read(&ctx);
    let mut want = Vec::with_capacity(n);
    for b in 0..dims[0] {
        for c in 0..dims[1] {
            for ky in 0..kh {
                for kx in 0..kw {
                    for oy in 0..h_out {
                        for ox in 0..w_out {
                            let iy =
                                (oy * g.stride.0 + ky * g.dilation.0) as i64 - g.padding.0 as i64;
                            let ix =
                                (ox * g.stride.1 + kx * g.dilation.1) as i64 - g.padding.1 as i64;
                            let inside = iy >= 0
                                && ix >= 0
                                && (iy as usize) < dims[2]
                                && (ix as usize) < dims[3];
                            want.push(Want::Exact(if inside {
                                vals[((b * dims[1] + c) * dims[2] + iy as usize) * dims[3]
                                    + ix as usize]
                            } else {
                                T::from_f64(0.0)
                            }));
                        }
                    }
                }
            }
        }
    }
    compare(&ctx, &got, &want, 0.0, 0.0);
}

fn check_col2im<T: TT>(s: &Stream, case: &Case, output_padding: (usize, usize)) {
    // Here dims = (b, c_out, h_in, w_in): the transposed convolution's input spatial size.
    let g = geometry(case);
    let dims = case.0;
    let (h_in, w_in) = (dims[2], dims[3]);
    let label = format!(
        "col2im_{} {case:?} output padding {output_padding:?}",
        T::NAME
    );
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let Ok((h_out, w_out)) = g.transposed_output((h_in, w_in), output_padding) else {
        return;
    };
    let (kh, kw) = g.kernel;
    let col_len = dims[0] * dims[1] * kh * kw * h_in * w_in;
    let mut rng = Lcg::new(seed);
    let col_host: Vec<T> = (0..col_len)
        .map(|_| T::from_f64(rng.uniform(-2.0, 2.0)))
        .collect();
    let col = s.alloc_from_host(&col_host).expect("upload");
    let n = dims[0] * dims[1] * h_out * w_out;
    let mut out = Output::<T>::new(s, n);
    cv::col2im(
        s,
        &g,
        (h_in, w_in),
        (h_out, w_out),
        &col.as_slice(),
        &mut out.view(),
    )
    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got = out.read(&ctx);
    // Host reference: scatter-add every column entry to its output position, in f64.
    let mut acc = vec![0f64; n];
    let mut count = vec![0usize; n];
    for b in 0..dims[0] {
        for c in 0..dims[1] {
            for ky in 0..kh {
                for kx in 0..kw {
                    for iy in 0..h_in {
                        for ix in 0..w_in {
                            let oy =
                                (iy * g.stride.0 + ky * g.dilation.0) as i64 - g.padding.0 as i64;
                            let ox =
                                (ix * g.stride.1 + kx * g.dilation.1) as i64 - g.padding.1 as i64;
                            if oy < 0 || ox < 0 || oy as usize >= h_out || ox as usize >= w_out {
                                continue;
                            }
                            let o = ((b * dims[1] + c) * h_out + oy as usize) * w_out + ox as usize;
                            let ci =
                                ((((b * dims[1] + c) * kh + ky) * kw + kx) * h_in + iy) * w_in + ix;
                            acc[o] += col_host[ci].to_f64();
                            count[o] += 1;
                        }
                    }
                }
            }
        }
    }
    // Each output sums `count` terms of magnitude <= 2, accumulated in the arithmetic type.
    let want: Vec<Want<T>> = acc.iter().map(|&v| Want::Close(v)).collect();
    let max_terms = count.iter().copied().max().unwrap_or(1).max(1) as f64;
    let eps = if T::NAME == "f64" { 1e-15 } else { 2e-7 };
    compare(
        &ctx,
        &got,
        &want,
        T::REL,
        T::ABS + 2.0 * max_terms * eps * 4.0,
    );
}

fn conv_for<T: TT>(s: &Stream) -> usize {
    let mut checked = 0;
    for case in cases() {
        for kind in KINDS {
            check_im2col::<T>(s, &case, kind);
            checked += 1;
        }
        for op in [(0, 0), (1, 0)] {
            check_col2im::<T>(s, &case, op);
            checked += 1;
        }
    }
    checked
}

#[test]
#[ignore = "needs a GPU"]
fn im2col_col2im_float_dtypes() {
    let s = stream();
    let mut n = 0;
    n += conv_for::<bf16>(&s);
    n += conv_for::<f16>(&s);
    n += conv_for::<f32>(&s);
    n += conv_for::<f64>(&s);
    // Integers: a typed error, nothing launched.
    let x = s.alloc_from_host(&[1i32; 16]).unwrap();
    let g = geometry(&cases()[0]);
    let mut out = Output::<i32>::new(&s, 9 * 3 * 16);
    let err = cv::im2col(
        &s,
        &ConvGeometry {
            batch: 1,
            channels: 1,
            ..g
        },
        (4, 4),
        Strided::new(x.as_slice(), &[16, 16, 4, 1]),
        &mut out.view(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    assert!(out.untouched());
    // A view too short for its strides is a layout error.
    let y = s.alloc_from_host(&[1f32; 15]).unwrap();
    let mut out = Output::<f32>::new(&s, 16);
    let g1 = ConvGeometry {
        batch: 1,
        channels: 1,
        kernel: (1, 1),
        padding: (0, 0),
        stride: (1, 1),
        dilation: (1, 1),
    };
    let err = cv::im2col(
        &s,
        &g1,
        (4, 4),
        Strided::new(y.as_slice(), &[16, 16, 4, 1]),
        &mut out.view(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::Layout { .. }), "{err}");
    println!("conv: {n} im2col/col2im cases checked on bf16, f16, f32, f64");
}
