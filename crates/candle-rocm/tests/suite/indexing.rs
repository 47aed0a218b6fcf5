//! Conformance rows of the indexing ops for every storage dtype (a module of
//! tests/conformance.rs): `index_select`, `gather`, `scatter_set`, `scatter_add_set`,
//! `index_add`, with u32 and i64 ids, along every dim of a rank-3 source that is contiguous,
//! transposed or offset, ids including the first and last valid index and the skip value (the
//! index type's maximum: the element is skipped / reads as zero). The reference moves the same
//! elements exactly (copies) or sums in exact integer / f64 arithmetic (adds); f8e4m3 values
//! move as bytes, and its adds (each term rounded to f8, in candle's order) must match the CPU
//! oracle bit for bit.

use super::*;

fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        idx[d] = i % dims[d];
        i /= dims[d];
    }
    idx
}

fn ravel(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// Source layouts of dims (3, 4, 5): contiguous, transposed storage, a start offset.
fn sources() -> Vec<(&'static str, Layout)> {
    vec![
        ("contiguous", Layout::contiguous((3, 4, 5))),
        (
            "transposed",
            Layout::contiguous((5, 4, 3)).transpose(0, 2).unwrap(),
        ),
        ("offset", Layout::contiguous_with_offset((3, 4, 5), 7)),
    ]
}

/// Ids storage of `dtype` (u32 or i64) for the given index values (`None`: the skip value).
fn ids_storage(dtype: DType, v: &[Option<usize>]) -> CpuStorage {
    match dtype {
        DType::U32 => CpuStorage::U32(v.iter().map(|x| x.map_or(u32::MAX, |i| i as u32)).collect()),
        _ => CpuStorage::I64(v.iter().map(|x| x.map_or(i64::MAX, |i| i as i64)).collect()),
    }
}

fn zeros(dtype: DType, n: usize) -> CpuStorage {
    storage_from_f64(dtype, &vec![0.0; n])
}

/// `base` (logical, contiguous) plus `adds` at positions, in exact arithmetic, as `dtype`, and
/// per element the sum of the |terms| (for the float rounding bound).
fn add_reference(
    dtype: DType,
    base: &CpuStorage,
    adds: &[(usize, usize)],
    src: &CpuStorage,
) -> (CpuStorage, Vec<f64>) {
    let mut abs: Vec<f64> = values_f64(base).iter().map(|v| v.abs()).collect();
    let s = values_f64(src);
    for &(to, from) in adds {
        abs[to] += s[from].abs();
    }
    if let (Some(mut b), Some(s)) = (values_i128(base), values_i128(src)) {
        for &(to, from) in adds {
            b[to] += s[from];
        }
        return (storage_from_i128(dtype, &b), abs);
    }
    let mut b = values_f64(base);
    for &(to, from) in adds {
        b[to] += s[from];
    }
    (storage_from_f64(dtype, &b), abs)
}

/// Integers exactly; floats within the rounding bound of a short sum done in the dtype: each
/// of at most `terms` additions rounds once, `|got - want| <= terms * u * sum |terms|`.
fn compare_sum_bound(
    got: &CpuStorage,
    want: &CpuStorage,
    abs: &[f64],
    terms: usize,
) -> Result<(), String> {
    if got.dtype().is_int() {
        return compare(got, want, true);
    }
    let u = match got.dtype() {
        DType::BF16 => 2f64.powi(-8),
        DType::F16 => 2f64.powi(-11),
        DType::F32 => 2f64.powi(-24),
        _ => 2f64.powi(-53),
    };
    let (g, w) = (values_f64(got), values_f64(want));
    if g.len() != w.len() {
        return Err(format!("{} elements, expected {}", g.len(), w.len()));
    }
    let bad: Vec<usize> = (0..g.len())
        .filter(|&i| (g[i] - w[i]).abs() > terms as f64 * u * abs[i])
        .collect();
    match bad.first() {
        None => Ok(()),
        Some(&i) => Err(format!(
            "{} of {} elements exceed the rounding bound; first at {i}: got {}, expected {} \
             (sum of |terms| {})",
            bad.len(),
            g.len(),
            g[i],
            w[i],
            abs[i]
        )),
    }
}

struct Io {
    row: &'static str,
    case: String,
    dtype: DType,
    seed: u64,
}

fn record(
    ctx: &mut Ctx,
    io: &Io,
    expect: Expect,
    gpu: candle_core::Result<CpuStorage>,
    cpu: Option<OracleResult<CpuStorage>>,
    reference: Option<CpuStorage>,
) {
    let exact = io.dtype.is_int() || io.dtype == DType::F8E4M3;
    let outcome = judge(expect, gpu, cpu, reference, exact);
    ctx.matrix
        .record(io.row, io.dtype.as_str(), &io.case, io.seed, outcome);
}

pub(super) fn run_indexing(ctx: &mut Ctx) {
    for dtype in storage_dtypes() {
        let is_f8 = dtype == DType::F8E4M3;
        for ids_dtype in [DType::U32, DType::I64] {
            for (lname, sl) in sources() {
                let dims = sl.dims().to_vec();
                for dim in 0..3 {
                    let case = format!("{} ids, {lname} source, dim {dim}", ids_dtype.as_str());
                    let n_dim = dims[dim];
                    let seed = case_seed(ctx.base, &["indexing", dtype.as_str(), &case]);
                    let mut rng = Rng::new(seed);
                    let src = gen(dtype, needed_len(&sl), Dist::Small, &mut rng);
                    let src_vals = gather(&src, &logical_offsets(&sl));
                    let gsrc = ctx.upload(&src);
                    let csrc = CpuDevice.storage_from_cpu_storage(&src).unwrap();

                    // index_select: ids [last, 0, skip, 1, last].
                    let sel = [Some(n_dim - 1), Some(0), None, Some(1), Some(n_dim - 1)];
                    let ids = ids_storage(ids_dtype, &sel);
                    let ids_l = Layout::contiguous(sel.len());
                    let (gi, ci) = (
                        ctx.upload(&ids),
                        CpuDevice.storage_from_cpu_storage(&ids).unwrap(),
                    );
                    let mut out_dims = dims.clone();
                    out_dims[dim] = sel.len();
                    let n_out: usize = out_dims.iter().product();
                    let map: Vec<Option<usize>> = (0..n_out)
                        .map(|o| {
                            let mut idx = unravel(o, &out_dims);
                            sel[idx[dim]].map(|s| {
                                idx[dim] = s;
                                ravel(&idx, &dims)
                            })
                        })
                        .collect();
                    ctx.poison(n_out * dtype.size_in_bytes());
                    let gpu = gpu_result(gsrc.index_select(&gi, &sl, &ids_l, dim));
                    let cpu = Some(oracle(|| csrc.index_select(&ci, &sl, &ids_l, dim)));
                    let io = Io {
                        row: "index_select",
                        case: case.clone(),
                        dtype,
                        seed,
                    };
                    record(
                        ctx,
                        &io,
                        Expect::Pass,
                        gpu,
                        cpu,
                        Some(remap(&zeros(dtype, n_out), &src_vals, &map)),
                    );

                    // gather: ids of the source's shape but 2 along `dim`, values drawn in range.
                    let mut g_dims = dims.clone();
                    g_dims[dim] = 2;
                    let n_g: usize = g_dims.iter().product();
                    let g_sel: Vec<Option<usize>> = (0..n_g)
                        .map(|i| {
                            if i % 7 == 3 {
                                None
                            } else {
                                Some(rng.int(0, n_dim as i128 - 1) as usize)
                            }
                        })
                        .collect();
                    let gids = ids_storage(ids_dtype, &g_sel);
                    let gids_l = Layout::contiguous(g_dims.as_slice());
                    let (ggi, cgi) = (
                        ctx.upload(&gids),
                        CpuDevice.storage_from_cpu_storage(&gids).unwrap(),
                    );
                    let gmap: Vec<Option<usize>> = (0..n_g)
                        .map(|o| {
                            let mut idx = unravel(o, &g_dims);
                            g_sel[o].map(|s| {
                                idx[dim] = s;
                                ravel(&idx, &dims)
                            })
                        })
                        .collect();
                    ctx.poison(n_g * dtype.size_in_bytes());
                    let gpu = gpu_result(gsrc.gather(&sl, &ggi, &gids_l, dim));
                    let cpu = Some(oracle(|| csrc.gather(&sl, &cgi, &gids_l, dim)));
                    let io = Io {
                        row: "gather",
                        case: case.clone(),
                        dtype,
                        seed,
                    };
                    record(
                        ctx,
                        &io,
                        Expect::Pass,
                        gpu,
                        cpu,
                        Some(remap(&zeros(dtype, n_g), &src_vals, &gmap)),
                    );

                    // scatter_set / scatter_add_set into a contiguous copy of the source: ids of
                    // dims g_dims, distinct along `dim` for each position (no write races), one
                    // skip. The update has g_dims too.
                    let n_total: usize = dims.iter().product();
                    let dst_l = Layout::contiguous(dims.as_slice());
                    let upd = gen(dtype, n_g, Dist::Small, &mut rng);
                    let upd_l = Layout::contiguous(g_dims.as_slice());
                    let s_sel: Vec<Option<usize>> = (0..n_g)
                        .map(|o| {
                            let idx = unravel(o, &g_dims);
                            if o == 1 {
                                None
                            } else {
                                Some((idx[dim] * 2 + idx.iter().sum::<usize>()) % n_dim)
                            }
                        })
                        .collect();
                    // Positions with the same coordinates off `dim` must target distinct entries.
                    let distinct = {
                        let mut seen = std::collections::HashSet::new();
                        (0..n_g).all(|o| {
                            let mut idx = unravel(o, &g_dims);
                            match s_sel[o] {
                                None => true,
                                Some(s) => {
                                    idx[dim] = s;
                                    seen.insert(idx)
                                }
                            }
                        })
                    };
                    let s_sel: Vec<Option<usize>> = if distinct {
                        s_sel
                    } else {
                        // Fall back to the identity along `dim` (always distinct).
                        (0..n_g)
                            .map(|o| {
                                if o == 1 {
                                    None
                                } else {
                                    Some(unravel(o, &g_dims)[dim])
                                }
                            })
                            .collect()
                    };
                    let sids = ids_storage(ids_dtype, &s_sel);
                    let (gsi, csi) = (
                        ctx.upload(&sids),
                        CpuDevice.storage_from_cpu_storage(&sids).unwrap(),
                    );
                    let (gu, cu) = (
                        ctx.upload(&upd),
                        CpuDevice.storage_from_cpu_storage(&upd).unwrap(),
                    );
                    let targets: Vec<(usize, usize)> = (0..n_g)
                        .filter_map(|o| {
                            let mut idx = unravel(o, &g_dims);
                            s_sel[o].map(|s| {
                                idx[dim] = s;
                                (ravel(&idx, &dims), o)
                            })
                        })
                        .collect();
                    for add in [false, true] {
                        let row = if add {
                            "scatter_add_set"
                        } else {
                            "scatter_set"
                        };
                        let mut gdst = ctx
                            .dev
                            .zeros_impl(&Shape::from(dims.as_slice()), dtype)
                            .unwrap();
                        let copied = gsrc.copy_strided_src(&mut gdst, 0, &sl);
                        let mut cdst = {
                            let c = CpuDevice.storage_from_cpu_storage(&src_vals).unwrap();
                            c.try_clone(&dst_l).unwrap()
                        };
                        let gpu = copied.and_then(|_| {
                            if add {
                                gdst.scatter_add_set(&dst_l, &gsi, &upd_l, &gu, &upd_l, dim)
                            } else {
                                gdst.scatter_set(&dst_l, &gsi, &upd_l, &gu, &upd_l, dim)
                            }
                        });
                        let gpu = gpu.and_then(|_| gdst.to_cpu_storage());
                        let expect = Expect::Pass;
                        let (cpu, reference) = {
                            let cpu = oracle(|| {
                                if add {
                                    cdst.scatter_add_set(&dst_l, &csi, &upd_l, &cu, &upd_l, dim)?;
                                } else {
                                    cdst.scatter_set(&dst_l, &csi, &upd_l, &cu, &upd_l, dim)?;
                                }
                                cdst.try_clone(&dst_l)
                            });
                            // f8e4m3 sums round after every term: the CPU oracle alone judges.
                            let reference = if add && is_f8 {
                                None
                            } else if add {
                                Some(add_reference(dtype, &src_vals, &targets, &upd).0)
                            } else {
                                let mut map = vec![None; n_total];
                                for &(to, from) in &targets {
                                    map[to] = Some(from);
                                }
                                Some(remap(&src_vals, &upd, &map))
                            };
                            (Some(cpu), reference)
                        };
                        let io = Io {
                            row,
                            case: case.clone(),
                            dtype,
                            seed,
                        };
                        record(ctx, &io, expect, gpu, cpu, reference);
                    }

                    // index_add: ids [last, 0, last] (a repeat) along `dim`, src with 3 there.
                    let a_sel = [Some(n_dim - 1), Some(0), Some(n_dim - 1)];
                    let aids = ids_storage(ids_dtype, &a_sel);
                    let aids_l = Layout::contiguous(3);
                    let mut a_dims = dims.clone();
                    a_dims[dim] = 3;
                    let n_a: usize = a_dims.iter().product();
                    let add_src = gen(dtype, n_a, Dist::Small, &mut rng);
                    let add_l = Layout::contiguous(a_dims.as_slice());
                    let (gai, cai) = (
                        ctx.upload(&aids),
                        CpuDevice.storage_from_cpu_storage(&aids).unwrap(),
                    );
                    let (gas, cas) = (
                        ctx.upload(&add_src),
                        CpuDevice.storage_from_cpu_storage(&add_src).unwrap(),
                    );
                    ctx.poison(n_total * dtype.size_in_bytes());
                    let gpu = gpu_result(gsrc.index_add(&sl, &gai, &aids_l, &gas, &add_l, dim));
                    let expect = Expect::Pass;
                    let (cpu, reference) = {
                        let adds: Vec<(usize, usize)> = (0..n_a)
                            .map(|o| {
                                let mut idx = unravel(o, &a_dims);
                                idx[dim] = a_sel[idx[dim]].unwrap();
                                (ravel(&idx, &dims), o)
                            })
                            .collect();
                        (
                            Some(oracle(|| {
                                csrc.index_add(&sl, &cai, &aids_l, &cas, &add_l, dim)
                            })),
                            // f8e4m3 sums round after every term: the CPU oracle alone judges.
                            (!is_f8).then(|| add_reference(dtype, &src_vals, &adds, &add_src)),
                        )
                    };
                    // A repeated index sums three terms, in an order the GPU does not fix
                    // (except for f8e4m3, summed in candle's order and compared bit for bit).
                    let (reference, abs) = match reference {
                        Some((r, a)) => (Some(r), a),
                        None => (None, Vec::new()),
                    };
                    let outcome = judge_with(expect, gpu, cpu, reference, &|g, w| {
                        if is_f8 {
                            compare(g, w, true)
                        } else {
                            compare_sum_bound(g, w, &abs, 3)
                        }
                    });
                    ctx.matrix
                        .record("index_add", dtype.as_str(), &case, seed, outcome);
                }
            }
        }
    }
}
