//! GPU tests of the `nn` family (a module of tests/gpu.rs): softmax over the last dim,
//! rms_norm, layer_norm and the three rotary embeddings, for every float dtype, against f64
//! host references computed from the same (rounded) inputs. Inputs start at an offset inside
//! their buffers; outputs are poisoned and guarded.

use super::*;
use hip_core::DeviceSlice;
use rocm_kernels::nn;

/// (rows, cols): single elements, short rows (1 to 3), rows that are not multiples of a block,
/// a decode step's rows (1, 64 and 65 rows of a 4096 hidden size), long rows (8192: kept in
/// registers; 20001: longer than 16 x 1024, the block-strided loops), empty shapes.
const ROW_CASES: [(usize, usize); 15] = [
    (1, 1),
    (3, 2),
    (7, 3),
    (1000, 1),
    (5, 13),
    (33, 257),
    (4, 1000),
    (3, 4099),
    (1, 4096),
    (64, 4096),
    (65, 4096),
    (2, 8192),
    (2, 20001),
    (0, 5),
    (5, 0),
];

/// Offset of every input inside its buffer.
const IN_OFFSET: usize = 3;

/// `n` values of T after IN_OFFSET others, on the device; returns (host values, buffer).
fn upload<T: TT>(
    s: &Stream,
    rng: &mut Lcg,
    n: usize,
    lo: f64,
    hi: f64,
) -> (Vec<T>, DeviceBuffer<T>) {
    let host: Vec<T> = (0..n + IN_OFFSET)
        .map(|_| T::from_f64(rng.uniform(lo, hi)))
        .collect();
    let buf = s.alloc_from_host(&host).expect("upload");
    (host[IN_OFFSET..].to_vec(), buf)
}

fn view<T: TT>(buf: &DeviceBuffer<T>) -> DeviceSlice<'_, T> {
    buf.slice(IN_OFFSET..).expect("view")
}

/// |got - want| <= rel * scale + abs (NaN wants NaN).
fn check_close<T: TT>(ctx: &str, got: &[T], want: &[(f64, f64)]) {
    assert_eq!(got.len(), want.len(), "{ctx}: length");
    let bad: Vec<String> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, &(w, scale)))| {
            let g = g.to_f64();
            if w.is_nan() {
                !g.is_nan()
            } else {
                // NaN results fail too.
                let ok = (g - w).abs() <= T::REL * scale.max(w.abs()) + T::ABS;
                !ok
            }
        })
        .take(8)
        .map(|(i, (g, w))| format!("[{i}] got {g:?} want {}", w.0))
        .collect();
    assert!(bad.is_empty(), "{ctx}: {}", bad.join(", "));
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum RowOp {
    Softmax,
    RmsNorm,
    LayerNorm,
}

fn check_row_op<T: TT>(s: &Stream, op: RowOp, rows: usize, cols: usize, nan: bool, masked: bool) {
    let label = format!(
        "{op:?}_{} rows {rows} cols {cols}{}{}",
        T::NAME,
        if nan { " with NaNs" } else { "" },
        if masked { " with -inf masks" } else { "" }
    );
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let n = rows * cols;
    let (mut x, mut xb) = upload::<T>(s, &mut rng, n, -10.0, 10.0);
    if nan && n > 0 {
        // A NaN in row 0, at its last element.
        x[cols - 1] = T::from_f64(f64::NAN);
        let mut host = vec![T::from_f64(0.0); IN_OFFSET];
        host.extend_from_slice(&x);
        xb = s.alloc_from_host(&host).expect("upload");
    }
    if masked && n > 0 {
        // Attention-style masks: row 0's first half is -inf (whole threads see only -inf),
        // odd rows have every third element -inf, row 2 is all -inf (a NaN row, as on the CPU).
        for r in 0..rows {
            for c in 0..cols {
                if (r == 0 && c < cols / 2) || (r % 2 == 1 && c % 3 == 0) || r == 2 {
                    x[r * cols + c] = T::from_f64(f64::NEG_INFINITY);
                }
            }
        }
        let mut host = vec![T::from_f64(0.0); IN_OFFSET];
        host.extend_from_slice(&x);
        xb = s.alloc_from_host(&host).expect("upload");
    }
    let (alpha, ab) = upload::<T>(s, &mut rng, cols, -2.0, 2.0);
    let (beta, bb) = upload::<T>(s, &mut rng, cols, -1.0, 1.0);
    let eps = 1e-5f32;
    let mut out = Output::<T>::new(s, n);
    match op {
        RowOp::Softmax => nn::softmax_last_dim(s, &view(&xb), &mut out.view(), rows, cols),
        RowOp::RmsNorm => nn::rms_norm(s, &view(&xb), &view(&ab), &mut out.view(), rows, cols, eps),
        RowOp::LayerNorm => nn::layer_norm(
            s,
            &view(&xb),
            &view(&ab),
            &view(&bb),
            &mut out.view(),
            rows,
            cols,
            eps,
        ),
    }
    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got = out.read(&ctx);
    let mut want = Vec::with_capacity(n);
    for r in 0..rows {
        let row: Vec<f64> = x[r * cols..(r + 1) * cols]
            .iter()
            .map(|v| v.to_f64())
            .collect();
        let c = cols as f64;
        match op {
            RowOp::Softmax => {
                let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                let sum: f64 = row.iter().map(|v| (v - m).exp()).sum();
                want.extend(row.iter().map(|v| ((v - m).exp() / sum, 0.0)));
            }
            RowOp::RmsNorm => {
                let m = (row.iter().map(|v| v * v).sum::<f64>() / c + eps as f64).sqrt();
                want.extend(
                    row.iter()
                        .zip(&alpha)
                        .map(|(v, a)| (v / m * a.to_f64(), 0.0)),
                );
            }
            RowOp::LayerNorm => {
                let mean = row.iter().sum::<f64>() / c;
                let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / c;
                let inv = 1.0 / (var + eps as f64).sqrt();
                want.extend(row.iter().zip(alpha.iter().zip(&beta)).map(|(v, (a, b))| {
                    let y = (v - mean) * inv * a.to_f64();
                    (y + b.to_f64(), y.abs() + b.to_f64().abs())
                }));
            }
        }
    }
    check_close(&ctx, &got, &want);
}

fn row_ops_for<T: TT>(s: &Stream, pairs: &mut Vec<String>, cases: &mut usize) {
    for op in [RowOp::Softmax, RowOp::RmsNorm, RowOp::LayerNorm] {
        for (rows, cols) in ROW_CASES {
            check_row_op::<T>(s, op, rows, cols, false, false);
            *cases += 1;
        }
        pairs.push(format!("{op:?}_{}", T::NAME));
    }
    // More rows than blocks (66000 > 65535: blocks take one or two rows). Not layer_norm: its
    // f32 mean of 3 near-equal values cancels (a host simulation of its f32 arithmetic misses the
    // f32 tolerance on about 11 of 66000 random rows: a limit of f32, not a kernel error).
    for op in [RowOp::Softmax, RowOp::RmsNorm] {
        check_row_op::<T>(s, op, 66_000, 3, false, false);
        *cases += 1;
    }
    // softmax: a NaN makes its row NaN (the other rows are unaffected).
    check_row_op::<T>(s, RowOp::Softmax, 3, 100, true, false);
    // softmax with -inf masks (rows of 100 and of 4099 columns).
    check_row_op::<T>(s, RowOp::Softmax, 4, 100, false, true);
    check_row_op::<T>(s, RowOp::Softmax, 4, 4099, false, true);
    *cases += 3;
}

/// f32 rows whose buffers are 16-byte aligned and whose length is a multiple of 4 take the
/// 16-byte-group path (the other tests use offset, unaligned views): softmax and rms_norm
/// against f64 references, incl. -inf masks and rows shorter than one group per thread.
fn check_aligned_f32(s: &Stream) -> usize {
    let mut cases = 0;
    // (65_539, 8): more rows than blocks (blocks take one or two rows).
    for (rows, cols) in [
        (3, 4),
        (5, 64),
        (7, 1000),
        (4, 4096),
        (2, 8192),
        (3, 16384),
        (65_539, 8),
    ] {
        for op in [RowOp::Softmax, RowOp::RmsNorm] {
            let ctx = format!("aligned {op:?} f32 rows {rows} cols {cols}");
            let mut rng = Lcg::new(seed_for(&ctx));
            let mut x: Vec<f32> = (0..rows * cols)
                .map(|_| rng.uniform(-10.0, 10.0) as f32)
                .collect();
            if op == RowOp::Softmax {
                x[..cols / 3].fill(f32::NEG_INFINITY); // a partly masked first row
            }
            let alpha: Vec<f32> = (0..cols).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
            let xb = s.alloc_from_host(&x).expect("upload");
            let ab = s.alloc_from_host(&alpha).expect("upload");
            let mut out = s.alloc::<f32>(rows * cols).expect("alloc");
            out.as_mut_slice().memset_async(0xff).expect("poison");
            match op {
                RowOp::Softmax => {
                    nn::softmax_last_dim(s, &xb.as_slice(), &mut out.as_mut_slice(), rows, cols)
                }
                _ => nn::rms_norm(
                    s,
                    &xb.as_slice(),
                    &ab.as_slice(),
                    &mut out.as_mut_slice(),
                    rows,
                    cols,
                    1e-5,
                ),
            }
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let got = out.to_host_vec().expect("download");
            let mut want = Vec::with_capacity(rows * cols);
            for r in 0..rows {
                let row: Vec<f64> = x[r * cols..(r + 1) * cols]
                    .iter()
                    .map(|&v| v as f64)
                    .collect();
                if op == RowOp::Softmax {
                    let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                    let sum: f64 = row.iter().map(|v| (v - m).exp()).sum();
                    want.extend(row.iter().map(|v| ((v - m).exp() / sum, 0.0)));
                } else {
                    let m = (row.iter().map(|v| v * v).sum::<f64>() / cols as f64 + 1e-5).sqrt();
                    want.extend(
                        row.iter()
                            .zip(&alpha)
                            .map(|(v, &a)| (v / m * a as f64, 0.0)),
                    );
                }
            }
            check_close(&ctx, &got, &want);
            cases += 1;
        }
    }
    cases
}

#[test]
#[ignore = "needs a GPU"]
fn nn_row_ops_all_float_dtypes() {
    let s = stream();
    let (mut pairs, mut cases) = (Vec::new(), 0);
    row_ops_for::<bf16>(&s, &mut pairs, &mut cases);
    row_ops_for::<f16>(&s, &mut pairs, &mut cases);
    row_ops_for::<f32>(&s, &mut pairs, &mut cases);
    row_ops_for::<f64>(&s, &mut pairs, &mut cases);
    cases += check_aligned_f32(&s);
    println!(
        "nn rows: {} (op, dtype) pairs over {cases} (rows, cols) cases up to 20001 cols: {}",
        pairs.len(),
        pairs.join(" ")
    );
}

/// (dims, table batched, t_cs - t) cases.
fn rope_cases() -> Vec<([usize; 4], bool, usize)> {
    vec![
        ([1, 1, 1, 2], false, 0),
        ([2, 3, 5, 8], false, 2),
        ([2, 3, 5, 8], true, 0),
        ([2, 3, 5, 8], true, 3),
        ([3, 2, 1, 16], false, 4),
        ([1, 2, 3, 130], true, 1),
        ([2, 4, 33, 64], false, 0),
        ([0, 2, 3, 8], false, 0),
    ]
}

fn check_rope<T: TT>(
    s: &Stream,
    kind: nn::RopeKind,
    dims: [usize; 4],
    batched: bool,
    extra: usize,
) {
    let [b, n1, n2, d] = dims;
    let t = if kind == nn::RopeKind::Thd { n1 } else { n2 };
    let t_cs = t + extra;
    let half = d / 2;
    let table: Vec<usize> = if batched {
        vec![b, t_cs, half]
    } else {
        vec![t_cs, half]
    };
    let label = format!("{}_{} dims {dims:?} tables {table:?}", kind.name(), T::NAME);
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let n: usize = dims.iter().product();
    let tn: usize = table.iter().product();
    let (x, xb) = upload::<T>(s, &mut rng, n, -3.0, 3.0);
    let (cos, cb) = upload::<T>(s, &mut rng, tn, -1.0, 1.0);
    let (sin, sb) = upload::<T>(s, &mut rng, tn, -1.0, 1.0);
    let mut out = Output::<T>::new(s, n);
    let f = match kind {
        nn::RopeKind::Rope => nn::rope::<T>,
        nn::RopeKind::Interleaved => nn::rope_i::<T>,
        nn::RopeKind::Thd => nn::rope_thd::<T>,
    };
    f(
        s,
        &view(&xb),
        &view(&cb),
        &view(&sb),
        &mut out.view(),
        dims,
        &table,
    )
    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got = out.read(&ctx);
    let mut want = vec![(f64::NAN, 0.0); n];
    let cs_b = if batched { t_cs * half } else { 0 };
    for i_b in 0..b {
        for i1_ in 0..n1 {
            for i2_ in 0..n2 {
                let row = ((i_b * n1 + i1_) * n2 + i2_) * d;
                let i_t = if kind == nn::RopeKind::Thd { i1_ } else { i2_ };
                for i_d in 0..half {
                    let (p, q) = if kind == nn::RopeKind::Interleaved {
                        (row + 2 * i_d, row + 2 * i_d + 1)
                    } else {
                        (row + i_d, row + i_d + half)
                    };
                    let cs = i_b * cs_b + i_t * half + i_d;
                    let (c, sn) = (cos[cs].to_f64(), sin[cs].to_f64());
                    let (x1, x2) = (x[p].to_f64(), x[q].to_f64());
                    let scale = (x1 * c).abs() + (x2 * sn).abs() + (x1 * sn).abs() + (x2 * c).abs();
                    want[p] = (x1 * c - x2 * sn, scale);
                    want[q] = (x1 * sn + x2 * c, scale);
                }
            }
        }
    }
    check_close(&ctx, &got, &want);
}

fn rope_for<T: TT>(s: &Stream, pairs: &mut Vec<String>, cases: &mut usize) {
    for kind in [
        nn::RopeKind::Rope,
        nn::RopeKind::Interleaved,
        nn::RopeKind::Thd,
    ] {
        for (dims, batched, extra) in rope_cases() {
            check_rope::<T>(s, kind, dims, batched, extra);
            *cases += 1;
        }
        pairs.push(format!("{}_{}", kind.name(), T::NAME));
    }
}

#[test]
#[ignore = "needs a GPU"]
fn nn_rope_all_float_dtypes() {
    let s = stream();
    let (mut pairs, mut cases) = (Vec::new(), 0);
    rope_for::<bf16>(&s, &mut pairs, &mut cases);
    rope_for::<f16>(&s, &mut pairs, &mut cases);
    rope_for::<f32>(&s, &mut pairs, &mut cases);
    rope_for::<f64>(&s, &mut pairs, &mut cases);
    println!(
        "nn rope: {} (variant, dtype) pairs over {cases} shape/table cases (2-D and 3-D tables, \
         t < t_cs): {}",
        pairs.len(),
        pairs.join(" ")
    );
}

#[test]
#[ignore = "needs a GPU"]
fn nn_invalid_calls_are_errors() {
    let s = stream();
    let x = s.alloc_from_host(&[1.0f32; 24]).unwrap();
    let ints = s.alloc_from_host(&[1i32; 24]).unwrap();
    let mut out = Output::<f32>::new(&s, 24);
    let mut iout = Output::<i32>::new(&s, 24);
    let layout = |what: &str, r: rocm_kernels::Result<()>| {
        assert!(matches!(r, Err(Error::Layout { .. })), "{what}: {r:?}");
    };
    let short = x.slice(..23).unwrap();
    layout(
        "softmax short input",
        nn::softmax_last_dim(&s, &short, &mut out.view(), 4, 6),
    );
    layout(
        "softmax dst length",
        nn::softmax_last_dim(&s, &x.as_slice(), &mut out.view(), 4, 5),
    );
    layout(
        "rms_norm short alpha",
        nn::rms_norm(
            &s,
            &x.as_slice(),
            &x.slice(..5).unwrap(),
            &mut out.view(),
            4,
            6,
            1e-5,
        ),
    );
    layout(
        "layer_norm short beta",
        nn::layer_norm(
            &s,
            &x.as_slice(),
            &x.as_slice(),
            &x.slice(..5).unwrap(),
            &mut out.view(),
            4,
            6,
            1e-5,
        ),
    );
    layout(
        "rope odd d",
        nn::rope(
            &s,
            &x.as_slice(),
            &x.as_slice(),
            &x.as_slice(),
            &mut out.view(),
            [1, 2, 4, 3],
            &[4, 1],
        ),
    );
    layout(
        "rope t > t_cs",
        nn::rope_thd(
            &s,
            &x.as_slice(),
            &x.as_slice(),
            &x.as_slice(),
            &mut out.view(),
            [1, 4, 2, 4],
            &[3, 2],
        ),
    );
    layout(
        "rope_i short sin",
        nn::rope_i(
            &s,
            &x.as_slice(),
            &x.as_slice(),
            &x.slice(..3).unwrap(),
            &mut out.view(),
            [1, 2, 3, 4],
            &[3, 2],
        ),
    );
    let e = nn::softmax_last_dim(&s, &ints.as_slice(), &mut iout.view(), 4, 6).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(
        out.untouched() && iout.untouched(),
        "launched after an error"
    );
    println!("nn errors: 8 invalid calls rejected before any launch");
}
