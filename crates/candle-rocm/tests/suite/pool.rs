//! Conformance rows of pooling and upsampling for every kernel dtype (a module of
//! tests/conformance.rs): `avg_pool2d`, `max_pool2d`, `upsample_nearest1d`,
//! `upsample_nearest2d`, `upsample_bilinear2d` on contiguous, spatially transposed and offset
//! NCHW inputs. References: the f64 window mean (integers: the exact mean truncated toward
//! zero, where candle's CPU backend returns 0), the exact window max, the exact nearest source
//! element; bilinear is judged against the CPU oracle (the kernel follows its f64 arithmetic)
//! with an f64 reference for the float dtypes.

use super::*;

fn inputs() -> Vec<(&'static str, Layout)> {
    vec![
        ("contiguous", Layout::contiguous((2, 3, 7, 9))),
        (
            "transposed hw",
            Layout::contiguous((2, 3, 9, 7)).transpose(2, 3).unwrap(),
        ),
        ("offset", Layout::contiguous_with_offset((1, 2, 5, 6), 11)),
    ]
}

fn nchw(l: &Layout) -> [usize; 4] {
    let d = l.dims();
    [d[0], d[1], d[2], d[3]]
}

fn pool_reference(
    dtype: DType,
    vals: &CpuStorage,
    dims: [usize; 4],
    k: (usize, usize),
    s: (usize, usize),
    max: bool,
) -> CpuStorage {
    let [b, c, h, w] = dims;
    let (ho, wo) = ((h - k.0) / s.0 + 1, (w - k.1) / s.1 + 1);
    let at = |bb: usize, cc: usize, y: usize, x: usize| ((bb * c + cc) * h + y) * w + x;
    let mut idx = Vec::new();
    let mut means = Vec::new();
    let mut int_means = Vec::new();
    let f = values_f64(vals);
    let ints = values_i128(vals);
    for bb in 0..b {
        for cc in 0..c {
            for y in 0..ho {
                for x in 0..wo {
                    let window: Vec<usize> = (0..k.0)
                        .flat_map(|m| (0..k.1).map(move |n| (m, n)))
                        .map(|(m, n)| at(bb, cc, y * s.0 + m, x * s.1 + n))
                        .collect();
                    if max {
                        // The first maximum (no NaNs in these inputs).
                        let best = window.iter().copied().fold(window[0], |acc, i| {
                            if f[i] > f[acc] {
                                i
                            } else {
                                acc
                            }
                        });
                        idx.push(best);
                    } else if let Some(iv) = &ints {
                        let sum: i128 = window.iter().map(|&i| iv[i]).sum();
                        int_means.push(sum / window.len() as i128);
                    } else {
                        means.push(window.iter().map(|&i| f[i]).sum::<f64>() / window.len() as f64);
                    }
                }
            }
        }
    }
    if max {
        gather(vals, &idx)
    } else if ints.is_some() {
        storage_from_i128(dtype, &int_means)
    } else {
        storage_from_f64(dtype, &means)
    }
}

fn nearest_index(o: usize, input: usize, output: usize) -> usize {
    ((o as f64 * (input as f64 / output as f64)) as usize).min(input - 1)
}

fn bilinear_reference(
    vals: &[f64],
    dims: [usize; 4],
    ho: usize,
    wo: usize,
    align: bool,
) -> Vec<f64> {
    let [b, c, h, w] = dims;
    let axis = |o: usize, input: usize, output: usize| -> (usize, usize, f64) {
        let scale = if align {
            if output > 1 {
                (input - 1) as f64 / (output - 1) as f64
            } else {
                0.0
            }
        } else {
            input as f64 / output as f64
        };
        let src = if align {
            scale * o as f64
        } else {
            (scale * (o as f64 + 0.5) - 0.5).max(0.0)
        };
        let i0 = (src.floor() as usize).min(input - 1);
        let i1 = (i0 + 1).min(input - 1);
        (i0, i1, (src - i0 as f64).clamp(0.0, 1.0))
    };
    let mut out = Vec::with_capacity(b * c * ho * wo);
    for p in 0..b * c {
        for y in 0..ho {
            let (y0, y1, wy) = axis(y, h, ho);
            for x in 0..wo {
                let (x0, x1, wx) = axis(x, w, wo);
                let v = |yy: usize, xx: usize| vals[(p * h + yy) * w + xx];
                let top = v(y0, x0) * (1.0 - wx) + v(y0, x1) * wx;
                let bottom = v(y1, x0) * (1.0 - wx) + v(y1, x1) * wx;
                out.push(top * (1.0 - wy) + bottom * wy);
            }
        }
    }
    out
}

pub(super) fn run_pool(ctx: &mut Ctx) {
    for dtype in storage_dtypes() {
        let col = dtype.as_str();
        let is_f8 = dtype == DType::F8E4M3;
        let exact = dtype.is_int();
        for (lname, l) in inputs() {
            let dims = nchw(&l);
            let seed = case_seed(ctx.base, &["pool", col, lname]);
            let mut rng = Rng::new(seed);
            let input = gen(dtype, needed_len(&l), Dist::General, &mut rng);
            let vals = gather(&input, &logical_offsets(&l));
            let g = ctx.upload(&input);
            let c = CpuDevice.storage_from_cpu_storage(&input).unwrap();
            let expect = if is_f8 {
                Expect::TypedError
            } else {
                Expect::Pass
            };
            for (k, s) in [((2, 2), (2, 2)), ((3, 2), (1, 2)), ((1, 1), (1, 1))] {
                let case = format!("{lname} k {k:?} s {s:?}");
                for max in [false, true] {
                    let row = if max { "max_pool2d" } else { "avg_pool2d" };
                    let gpu = gpu_result(if max {
                        g.max_pool2d(&l, k, s)
                    } else {
                        g.avg_pool2d(&l, k, s)
                    });
                    let (cpu, reference) = if is_f8 {
                        (None, None)
                    } else {
                        (
                            Some(oracle(|| {
                                if max {
                                    c.max_pool2d(&l, k, s)
                                } else {
                                    c.avg_pool2d(&l, k, s)
                                }
                            })),
                            Some(pool_reference(dtype, &vals, dims, k, s, max)),
                        )
                    };
                    let outcome = judge(expect, gpu, cpu, reference, exact || max);
                    ctx.matrix.record(row, col, &case, seed, outcome);
                }
            }
            // nearest 2-d (up and down) and 1-d (over the flattened (b, c * h, w) view when
            // contiguous).
            for (ho, wo) in [(11, 13), (3, 4)] {
                let case = format!("{lname} to {ho}x{wo}");
                let [b, c_, h, w] = dims;
                let idx: Vec<usize> = (0..b * c_)
                    .flat_map(|p| {
                        (0..ho).flat_map(move |y| {
                            (0..wo).map(move |x| {
                                (p * h + nearest_index(y, h, ho)) * w + nearest_index(x, w, wo)
                            })
                        })
                    })
                    .collect();
                let gpu = gpu_result(g.upsample_nearest2d(&l, ho, wo));
                let (cpu, reference) = if is_f8 {
                    (None, None)
                } else {
                    (
                        Some(oracle(|| c.upsample_nearest2d(&l, ho, wo))),
                        Some(gather(&vals, &idx)),
                    )
                };
                let outcome = judge(expect, gpu, cpu, reference, true);
                ctx.matrix
                    .record("upsample_nearest2d", col, &case, seed, outcome);
                for align in [false, true] {
                    let case = format!("{lname} to {ho}x{wo} align {align}");
                    let gpu = gpu_result(g.upsample_bilinear2d(&l, ho, wo, align, None, None));
                    let (cpu, reference) = if is_f8 {
                        (None, None)
                    } else {
                        let r = (!dtype.is_int()).then(|| {
                            storage_from_f64(
                                dtype,
                                &bilinear_reference(&values_f64(&vals), dims, ho, wo, align),
                            )
                        });
                        (
                            Some(oracle(|| {
                                c.upsample_bilinear2d(&l, ho, wo, align, None, None)
                            })),
                            r,
                        )
                    };
                    let outcome = judge(expect, gpu, cpu, reference, exact);
                    ctx.matrix
                        .record("upsample_bilinear2d", col, &case, seed, outcome);
                }
            }
            // nearest 1-d over (b, c, w) views: the input's first row of each plane.
            let l3 = Layout::new(
                (dims[0], dims[1], dims[3]).into(),
                vec![l.stride()[0], l.stride()[1], l.stride()[3]],
                l.start_offset(),
            );
            for lo in [17, 4] {
                let case = format!("{lname} rows to {lo}");
                let idx: Vec<usize> = (0..dims[0] * dims[1])
                    .flat_map(|p| {
                        (0..lo).map(move |x| p * dims[2] * dims[3] + nearest_index(x, dims[3], lo))
                    })
                    .collect();
                let gpu = gpu_result(g.upsample_nearest1d(&l3, lo));
                let (cpu, reference) = if is_f8 {
                    (None, None)
                } else {
                    (
                        Some(oracle(|| c.upsample_nearest1d(&l3, lo))),
                        Some(gather(&vals, &idx)),
                    )
                };
                let outcome = judge(expect, gpu, cpu, reference, true);
                ctx.matrix
                    .record("upsample_nearest1d", col, &case, seed, outcome);
            }
        }
    }
}
