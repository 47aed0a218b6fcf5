//! GPU tests of the `indexing` family (a module of tests/gpu.rs): index_select, gather, scatter,
//! scatter_add and index_add for every (ids dtype, data dtype) pair, against host references
//! written from Candle's CPU definitions (coordinates, the skip value `I::MAX`), over strided,
//! offset, transposed, broadcast and empty layouts, every dim of each shape, with the first and
//! last valid index, skip values, and injected out-of-range indices (which must be skipped,
//! recorded in the error flag as a typed error naming the op, and leave every guard element
//! poisoned).

use super::*;
use rocm_kernels::indexing::{self as ix, IndexError, IndexErrorFlag, IndexOp};

/// Shapes of the indexed operand (the source of index_select/gather, the destination of the
/// others); every dim of each is tried.
fn ix_shapes() -> Vec<Vec<usize>> {
    vec![
        vec![6],
        vec![4, 5],
        vec![3, 4, 5],
        vec![2, 3, 2, 4],
        vec![0, 4],
        vec![3, 0],
        vec![1, 7],
    ]
}

fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut c = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        c[d] = i % dims[d];
        i /= dims[d];
    }
    c
}

fn ravel(c: &[usize], dims: &[usize]) -> usize {
    c.iter().zip(dims).fold(0, |acc, (&x, &d)| acc * d + x)
}

/// A read operand whose view holds `f(k)` at its k-th (row-major) element; with broadcast
/// views the last write to a shared position wins (`values()` tells what the kernel sees).
fn operand_from<T: TT>(s: &Stream, view: View, mut f: impl FnMut(usize) -> T) -> Operand<T> {
    let mut host = vec![T::from_i128(0); view.buf_len];
    for (k, p) in view.positions().into_iter().enumerate() {
        host[p] = f(k);
    }
    let buf = s.alloc_from_host(&host).expect("upload");
    Operand { host, buf, view }
}

/// A 1-D view of `n` elements of the given kind, including a stride-2 one (`Mixed` here).
fn ids_view_1d(n: usize, kind: Kind) -> View {
    if kind == Kind::Mixed {
        return View {
            dims: vec![n],
            strides: vec![2],
            offset: 1,
            buf_len: 1 + 2 * n,
            kind,
        };
    }
    make_view(&[n], kind)
}

/// An in-place destination: the view's whole buffer (initial values `host`) between poisoned
/// guard elements.
struct Dest<T: TT> {
    buf: DeviceBuffer<T>,
    host: Vec<T>,
    view: View,
}

impl<T: TT> Dest<T> {
    fn new(s: &Stream, view: View, mut gen: impl FnMut() -> T) -> Self {
        let host: Vec<T> = (0..view.buf_len).map(|_| gen()).collect();
        let mut buf = s
            .alloc::<T>(view.buf_len + FRONT_GUARD + BACK_GUARD)
            .expect("alloc");
        buf.as_mut_slice().memset_async(0xff).expect("poison");
        buf.slice_mut(FRONT_GUARD..FRONT_GUARD + view.buf_len)
            .expect("body")
            .copy_from_host(&host)
            .expect("upload");
        Dest { buf, host, view }
    }
    fn view_mut(&mut self) -> DeviceSliceMut<'_, T> {
        self.buf
            .slice_mut(FRONT_GUARD + self.view.offset..FRONT_GUARD + self.view.buf_len)
            .expect("dst view")
    }
    /// The whole body (view and the elements around it), after checking the guards.
    fn read(&self, ctx: &str) -> Vec<T> {
        let all = self.buf.to_host_vec().expect("download");
        let (front, rest) = all.split_at(FRONT_GUARD);
        let (body, back) = rest.split_at(self.view.buf_len);
        assert!(
            front.iter().chain(back).all(|v| v.poisoned()),
            "{ctx}: a guard element around the destination was overwritten"
        );
        body.to_vec()
    }
    /// Buffer position of the element at coordinates `c` of the view.
    fn pos(&self, c: &[usize]) -> usize {
        self.view.offset
            + c.iter()
                .zip(&self.view.strides)
                .map(|(a, b)| a * b)
                .sum::<usize>()
    }
}

/// What an index of the generated ids is.
#[derive(Clone, Copy, PartialEq, Debug)]
enum IdKind {
    Valid(usize),
    Skip,
    Bad,
}

fn classify<I: TT>(id: I, size: usize) -> IdKind {
    let v = id.to_i128();
    if v == I::MAX_I {
        IdKind::Skip
    } else if v < 0 || v >= size as i128 {
        IdKind::Bad
    } else {
        IdKind::Valid(v as usize)
    }
}

/// An out-of-range index for a dim of `size` (never the skip value).
fn bad_index<I: TT>(rng: &mut Lcg, size: usize) -> I {
    let signed = I::MIN_I < 0;
    match rng.below(if signed { 3 } else { 2 }) {
        0 => I::from_i128(size as i128),
        1 => I::from_i128((I::MAX_I - 1).min(size as i128 + 1000)),
        _ => I::from_i128(-1 - rng.below(3) as i128),
    }
}

/// A random index for a dim of `size`: mostly valid, sometimes the skip value, and with `bad`
/// sometimes out of range.
fn gen_index<I: TT>(rng: &mut Lcg, size: usize, bad: bool) -> I {
    let r = rng.below(12);
    if r == 0 || (size == 0 && !bad) {
        I::from_i128(I::MAX_I)
    } else if (r == 1 || size == 0) && bad {
        bad_index(rng, size)
    } else if size == 0 {
        I::from_i128(I::MAX_I)
    } else {
        I::from_i128(rng.below(size as u64) as i128)
    }
}

fn gen_value<T: TT>(rng: &mut Lcg) -> T {
    if T::IS_FLOAT {
        T::from_f64(rng.uniform(-8.0, 8.0))
    } else {
        gen_int(rng)
    }
}

/// Checks the flag after a case: a recorded error iff out-of-range indices were injected, and
/// then for this op, one of them, and the indexed size.
fn check_flag<I: TT>(ctx: &str, flag: &IndexErrorFlag, op: IndexOp, ids: &[I], size: usize) {
    let bad: Vec<i128> = ids
        .iter()
        .filter(|&&i| classify(i, size) == IdKind::Bad)
        .map(|i| i.to_i128())
        .collect();
    let got = flag
        .take()
        .unwrap_or_else(|e| panic!("{ctx}: reading the flag: {e}"));
    match got {
        None => assert!(
            bad.is_empty(),
            "{ctx}: out-of-range ids {bad:?} not flagged"
        ),
        Some(IndexError {
            op: got_op,
            index,
            size: got_size,
        }) => {
            assert!(
                !bad.is_empty(),
                "{ctx}: flagged {got:?} without a bad index"
            );
            assert_eq!(got_op, op, "{ctx}: flagged op");
            assert_eq!(got_size, size as u64, "{ctx}: flagged size");
            assert!(
                bad.contains(&(index as i128)),
                "{ctx}: flagged index {index} is none of {bad:?}"
            );
        }
    }
}

/// The k-th data/ids/dst layout kinds of a case.
fn kinds3(k: usize) -> (Kind, Kind, Kind) {
    (
        KINDS[k % KINDS.len()],
        KINDS[(k + 3) % KINDS.len()],
        KINDS[(k + 5) % KINDS.len()],
    )
}

// ------------------------------------------------------------------------------------------
// index_select and gather
// ------------------------------------------------------------------------------------------

fn check_index_select<I: TT, T: TT>(
    s: &Stream,
    flag: &IndexErrorFlag,
    dims: &[usize],
    dim: usize,
    k: usize,
) {
    let (sk, ik, _) = kinds3(k);
    let src_dim = dims[dim];
    let n_ids = [3usize, 1, 0, src_dim + 4][k % 4];
    let bad = k % 3 == 1;
    let sv = make_view(dims, sk);
    let iv = ids_view_1d(n_ids, ik);
    let label = format!(
        "index_select_{}_{} dim {dim} src {} ids {} bad {bad}",
        I::NAME,
        T::NAME,
        sv.describe(),
        iv.describe()
    );
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let src = Operand::new(s, sv, || gen_value::<T>(&mut rng));
    let ids = operand_from(s, iv, |j| match j {
        // The first and last valid indices always appear.
        0 if src_dim > 0 => I::from_i128(0),
        1 if src_dim > 0 => I::from_i128(src_dim as i128 - 1),
        _ => gen_index::<I>(&mut rng, src_dim, bad),
    });
    let mut out_dims = dims.to_vec();
    out_dims[dim] = n_ids;
    let n = numel(&out_dims);
    let mut out = Output::<T>::new(s, n);
    ix::index_select(
        s,
        src.strided(),
        dims,
        ids.strided(),
        &[n_ids],
        dim,
        &mut out.view(),
        flag,
    )
    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got = out.read(&ctx);
    let (sval, ival) = (src.values(), ids.values());
    let want: Vec<Want<T>> = (0..n)
        .map(|o| {
            let mut c = unravel(o, &out_dims);
            match classify(ival[c[dim]], src_dim) {
                IdKind::Valid(p) => {
                    c[dim] = p;
                    Want::Exact(sval[ravel(&c, dims)])
                }
                _ => Want::Exact(T::from_i128(0)),
            }
        })
        .collect();
    compare(&ctx, &got, &want, 0.0, 0.0);
    // With an empty output no id is looked at.
    let used = if n > 0 { &ival[..] } else { &[] };
    check_flag(&ctx, flag, IndexOp::IndexSelect, used, src_dim);
}

fn check_gather<I: TT, T: TT>(
    s: &Stream,
    flag: &IndexErrorFlag,
    dims: &[usize],
    dim: usize,
    k: usize,
) {
    let (sk, ik, _) = kinds3(k);
    let src_dim = dims[dim];
    let mut ids_dims = dims.to_vec();
    ids_dims[dim] = [3usize, 1, 0, src_dim + 2][k % 4];
    // Every other case, ids smaller than the source in another dim (coordinates still match).
    if k % 2 == 1 {
        if let Some(d) = (0..dims.len()).find(|&d| d != dim && dims[d] > 1) {
            ids_dims[d] -= 1;
        }
    }
    let bad = k % 3 == 1;
    let sv = make_view(dims, sk);
    let iv = make_view(&ids_dims, ik);
    let label = format!(
        "gather_{}_{} dim {dim} src {} ids {} bad {bad}",
        I::NAME,
        T::NAME,
        sv.describe(),
        iv.describe()
    );
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let src = Operand::new(s, sv, || gen_value::<T>(&mut rng));
    let ni = numel(&ids_dims);
    let ids = operand_from(s, iv, |j| match j {
        0 if src_dim > 0 => I::from_i128(0),
        j if j + 1 == ni && src_dim > 0 => I::from_i128(src_dim as i128 - 1),
        _ => gen_index::<I>(&mut rng, src_dim, bad),
    });
    let mut out = Output::<T>::new(s, ni);
    ix::gather(
        s,
        src.strided(),
        dims,
        ids.strided(),
        &ids_dims,
        dim,
        &mut out.view(),
        flag,
    )
    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got = out.read(&ctx);
    let (sval, ival) = (src.values(), ids.values());
    let want: Vec<Want<T>> = (0..ni)
        .map(|o| match classify(ival[o], src_dim) {
            IdKind::Valid(p) => {
                let mut c = unravel(o, &ids_dims);
                c[dim] = p;
                Want::Exact(sval[ravel(&c, dims)])
            }
            _ => Want::Exact(T::from_i128(0)),
        })
        .collect();
    compare(&ctx, &got, &want, 0.0, 0.0);
    check_flag(&ctx, flag, IndexOp::Gather, &ival, src_dim);
}

// ------------------------------------------------------------------------------------------
// scatter, scatter_add, index_add
// ------------------------------------------------------------------------------------------

/// The expected destination body after accumulating into it: exact for integers (wrapping)
/// and for untouched elements; for floats within the rounding of `count` additions of
/// magnitude at most `mag`.
fn check_accumulated<T: TT>(ctx: &str, got: &[T], init: &[T], adds: &[Vec<T>]) {
    for (p, (&g, terms)) in got.iter().zip(adds).enumerate() {
        if terms.is_empty() {
            assert!(
                g.bits() == init[p].bits(),
                "{ctx}: element {p} changed: {g:?}, was {:?}",
                init[p]
            );
            continue;
        }
        if T::IS_FLOAT {
            let want: f64 = init[p].to_f64() + terms.iter().map(|t| t.to_f64()).sum::<f64>();
            let mag: f64 =
                init[p].to_f64().abs() + terms.iter().map(|t| t.to_f64().abs()).sum::<f64>();
            let bound = T::REL * mag * terms.len() as f64 + T::ABS;
            assert!(
                (g.to_f64() - want).abs() <= bound,
                "{ctx}: element {p}: got {g:?}, want {want} +- {bound} ({} additions)",
                terms.len()
            );
        } else {
            let want =
                T::from_i128(init[p].to_i128() + terms.iter().map(|t| t.to_i128()).sum::<i128>());
            assert_eq!(g, want, "{ctx}: element {p}");
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum ScatterOp {
    Set,
    Add,
    IndexAdd,
}

fn check_scatter<I: TT, T: TT>(
    s: &Stream,
    flag: &IndexErrorFlag,
    op: ScatterOp,
    dims: &[usize],
    dim: usize,
    k: usize,
) {
    let (sk, ik, dk) = kinds3(k);
    // scatter (set) with aliased destinations or repeated ids is unspecified: no broadcast there.
    let no_bcast = |kind: Kind| match kind {
        Kind::Broadcast | Kind::Mixed if op == ScatterOp::Set => Kind::Transposed,
        other => other,
    };
    let (ik, dk) = (no_bcast(ik), no_bcast(dk));
    let dst_dim = dims[dim];
    let m = [3usize, 1, 0, dst_dim + 2][k % 4];
    let m = if op == ScatterOp::Set {
        m.min(dst_dim)
    } else {
        m
    };
    let mut src_dims = dims.to_vec();
    src_dims[dim] = m;
    let bad = k % 3 == 1;
    let (ix_op, name) = match op {
        ScatterOp::Set => (IndexOp::Scatter, "scatter"),
        ScatterOp::Add => (IndexOp::ScatterAdd, "scatter_add"),
        ScatterOp::IndexAdd => (IndexOp::IndexAdd, "index_add"),
    };
    let dv = make_view(dims, dk);
    let sv = make_view(&src_dims, sk);
    let iv = if op == ScatterOp::IndexAdd {
        ids_view_1d(m, ik)
    } else {
        make_view(&src_dims, ik)
    };
    let label = format!(
        "{name}_{}_{} dim {dim} dst {} src {} ids {} bad {bad}",
        I::NAME,
        T::NAME,
        dv.describe(),
        sv.describe(),
        iv.describe()
    );
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let mut dst = Dest::new(s, dv, || gen_value::<T>(&mut rng));
    let src = Operand::new(s, sv, || gen_value::<T>(&mut rng));
    let ids_dims = iv.dims.clone();
    let ni = numel(&ids_dims);
    // scatter (set): distinct indices along every fiber of `dim` (a random permutation's prefix).
    let perms: Vec<Vec<usize>> = if op == ScatterOp::Set {
        let fibers = ni.checked_div(m).unwrap_or(0);
        (0..fibers)
            .map(|_| {
                let mut p: Vec<usize> = (0..dst_dim).collect();
                for i in (1..p.len()).rev() {
                    p.swap(i, rng.below(i as u64 + 1) as usize);
                }
                p
            })
            .collect()
    } else {
        Vec::new()
    };
    let right: usize = src_dims[dim + 1..].iter().product();
    let ids = operand_from(s, iv, |j| {
        if op == ScatterOp::Set {
            let c = unravel(j, &ids_dims);
            let fiber = (j / (m * right)) * right + j % right;
            let r = rng.below(10);
            if r == 0 {
                I::from_i128(I::MAX_I)
            } else if r == 1 && bad {
                bad_index(&mut rng, dst_dim)
            } else {
                I::from_i128(perms[fiber][c[dim]] as i128)
            }
        } else {
            match j {
                0 if dst_dim > 0 => I::from_i128(0),
                j if j + 1 == ni && dst_dim > 0 => I::from_i128(dst_dim as i128 - 1),
                _ => gen_index::<I>(&mut rng, dst_dim, bad),
            }
        }
    });
    let (dst_dims, dst_strides) = (dst.view.dims.clone(), dst.view.strides.clone());
    let r = {
        let mut dview = dst.view_mut();
        match op {
            ScatterOp::Set => ix::scatter(
                s,
                &mut dview,
                &dst_dims,
                &dst_strides,
                ids.strided(),
                &ids_dims,
                src.strided(),
                &src_dims,
                dim,
                flag,
            ),
            ScatterOp::Add => ix::scatter_add(
                s,
                &mut dview,
                &dst_dims,
                &dst_strides,
                ids.strided(),
                &ids_dims,
                src.strided(),
                &src_dims,
                dim,
                flag,
            ),
            ScatterOp::IndexAdd => ix::index_add(
                s,
                &mut dview,
                &dst_dims,
                &dst_strides,
                ids.strided(),
                &ids_dims,
                src.strided(),
                &src_dims,
                dim,
                flag,
            ),
        }
    };
    r.unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got = dst.read(&ctx);
    let (sval, ival) = (src.values(), ids.values());
    let mut set: Vec<Option<T>> = vec![None; dst.host.len()];
    let mut adds: Vec<Vec<T>> = vec![Vec::new(); dst.host.len()];
    for (e, &v) in sval.iter().enumerate() {
        let mut c = unravel(e, &src_dims);
        let id = if op == ScatterOp::IndexAdd {
            ival[c[dim]]
        } else {
            ival[e]
        };
        if let IdKind::Valid(p) = classify(id, dst_dim) {
            c[dim] = p;
            let pos = dst.pos(&c);
            match op {
                ScatterOp::Set => {
                    assert!(set[pos].is_none(), "{ctx}: the test wrote twice to {pos}");
                    set[pos] = Some(v);
                }
                _ => adds[pos].push(v),
            }
        }
    }
    if op == ScatterOp::Set {
        let want: Vec<Want<T>> = (0..got.len())
            .map(|p| Want::Exact(set[p].unwrap_or(dst.host[p])))
            .collect();
        compare(&ctx, &got, &want, 0.0, 0.0);
    } else {
        check_accumulated(&ctx, &got, &dst.host, &adds);
    }
    // With an empty source no id is looked at.
    let used = if sval.is_empty() { &[] } else { &ival[..] };
    check_flag(&ctx, flag, ix_op, used, dst_dim);
}

// ------------------------------------------------------------------------------------------
// Drivers
// ------------------------------------------------------------------------------------------

fn indexing_pair<I: TT, T: TT>(
    s: &Stream,
    flag: &IndexErrorFlag,
    pairs: &mut Vec<String>,
    cases: &mut usize,
) {
    let mut k = 0;
    for dims in ix_shapes() {
        for dim in 0..dims.len() {
            // Several layout combinations (and id counts, and bad-index injection) per dim.
            for _ in 0..3 {
                check_index_select::<I, T>(s, flag, &dims, dim, k);
                check_gather::<I, T>(s, flag, &dims, dim, k);
                check_scatter::<I, T>(s, flag, ScatterOp::Set, &dims, dim, k);
                check_scatter::<I, T>(s, flag, ScatterOp::Add, &dims, dim, k);
                check_scatter::<I, T>(s, flag, ScatterOp::IndexAdd, &dims, dim, k);
                *cases += 5;
                k += 1;
            }
        }
    }
    pairs.push(format!("{}_{}", I::NAME, T::NAME));
}

fn indexing_for<I: TT>(
    s: &Stream,
    flag: &IndexErrorFlag,
    pairs: &mut Vec<String>,
    cases: &mut usize,
) {
    indexing_pair::<I, u8>(s, flag, pairs, cases);
    indexing_pair::<I, u32>(s, flag, pairs, cases);
    indexing_pair::<I, i16>(s, flag, pairs, cases);
    indexing_pair::<I, i32>(s, flag, pairs, cases);
    indexing_pair::<I, i64>(s, flag, pairs, cases);
    indexing_pair::<I, bf16>(s, flag, pairs, cases);
    indexing_pair::<I, f16>(s, flag, pairs, cases);
    indexing_pair::<I, f32>(s, flag, pairs, cases);
    indexing_pair::<I, f64>(s, flag, pairs, cases);
}

#[test]
#[ignore = "needs a GPU"]
fn indexing_all_id_and_value_dtypes() {
    let s = stream();
    let flag = IndexErrorFlag::new(&s).expect("flag");
    let (mut pairs, mut cases) = (Vec::new(), 0);
    indexing_for::<u8>(&s, &flag, &mut pairs, &mut cases);
    indexing_for::<u32>(&s, &flag, &mut pairs, &mut cases);
    indexing_for::<i16>(&s, &flag, &mut pairs, &mut cases);
    indexing_for::<i32>(&s, &flag, &mut pairs, &mut cases);
    indexing_for::<i64>(&s, &flag, &mut pairs, &mut cases);
    println!(
        "indexing: index_select/gather/scatter/scatter_add/index_add for {} (ids, value) dtype \
         pairs over {cases} cases: {}",
        pairs.len(),
        pairs.join(" ")
    );
}

/// Many additions into few elements (atomics under contention, 8/16-bit CAS loops on shared
/// words), a large index_select with 64-bit-sized rows, and the flag's typed error.
#[test]
#[ignore = "needs a GPU"]
fn indexing_contention_and_errors() {
    let s = stream();
    let flag = IndexErrorFlag::new(&s).expect("flag");
    let mut checked = 0;
    // scatter_add of 20000 ones into 3 neighbouring elements, per dtype.
    fn contention<T: TT>(s: &Stream, flag: &IndexErrorFlag) {
        let n = 20_000usize;
        let ctx = format!("scatter_add contention {}", T::NAME);
        let ids_host: Vec<u32> = (0..n).map(|i| (i % 3) as u32).collect();
        let ids = s.alloc_from_host(&ids_host).unwrap();
        let src = s.alloc_from_host(&vec![T::from_i128(1); n]).unwrap();
        let mut dst = Dest::new(s, make_view(&[3], Kind::Contiguous), || T::from_i128(0));
        {
            let mut d = dst.view_mut();
            ix::scatter_add(
                s,
                &mut d,
                &[3],
                &[1],
                Strided::new(ids.as_slice(), &[1]),
                &[n],
                Strided::new(src.as_slice(), &[1]),
                &[n],
                0,
                flag,
            )
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        }
        let got = dst.read(&ctx);
        for (i, g) in got.iter().enumerate() {
            let count = ids_host.iter().filter(|&&x| x as usize == i).count() as i128;
            // Integers wrap; adding 1 stops changing a bf16 sum at 256 and an f16 sum at 2048
            // (ties to even), whatever the order.
            let want = match T::NAME {
                "bf16" => T::from_i128(count.min(256)),
                "f16" => T::from_i128(count.min(2048)),
                _ => T::from_i128(count),
            };
            assert_eq!(
                *g, want,
                "{ctx}: element {i} ({count} additions; a lost update?)"
            );
        }
        assert!(flag.take().unwrap().is_none(), "{ctx}: flagged");
    }
    contention::<u8>(&s, &flag);
    contention::<u32>(&s, &flag);
    contention::<i16>(&s, &flag);
    contention::<i32>(&s, &flag);
    contention::<i64>(&s, &flag);
    contention::<bf16>(&s, &flag);
    contention::<f16>(&s, &flag);
    contention::<f32>(&s, &flag);
    contention::<f64>(&s, &flag);
    checked += 9;

    // A typed error naming the op, then a clean flag.
    let src = s.alloc_from_host(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let ids = s.alloc_from_host(&[1i64, 4, -3, i64::MAX, 0]).unwrap();
    let mut out = Output::<f32>::new(&s, 5);
    ix::index_select(
        &s,
        Strided::new(src.as_slice(), &[1]),
        &[4],
        Strided::new(ids.as_slice(), &[1]),
        &[5],
        0,
        &mut out.view(),
        &flag,
    )
    .unwrap();
    assert_eq!(
        out.read("index_select errors"),
        vec![2.0, 0.0, 0.0, 0.0, 1.0]
    );
    match flag.check() {
        Err(Error::Layout { op, reason }) => {
            assert_eq!(op, "index_select");
            assert!(reason.contains("size 4"), "{reason}");
        }
        other => panic!("expected a typed index error, got {other:?}"),
    }
    flag.check().expect("the flag is cleared after a check");
    checked += 2;

    // Invalid calls: typed errors, nothing launched.
    let fids = s.alloc_from_host(&[0.0f32; 2]).unwrap();
    let e = ix::index_select(
        &s,
        Strided::new(src.as_slice(), &[1]),
        &[4],
        Strided::new(fids.as_slice(), &[1]),
        &[2],
        0,
        &mut out.view(),
        &flag,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "float ids: {e}");
    let ids2 = s.alloc_from_host(&[0u32, 1]).unwrap();
    let mut out2 = Output::<f32>::new(&s, 2);
    let expect_layout = |what: &str, r: rocm_kernels::Result<()>| match r {
        Err(Error::Layout { .. }) => {}
        other => panic!("{what}: expected a layout error, got {other:?}"),
    };
    expect_layout(
        "dim out of range",
        ix::index_select(
            &s,
            Strided::new(src.as_slice(), &[1]),
            &[4],
            Strided::new(ids2.as_slice(), &[1]),
            &[2],
            1,
            &mut out2.view(),
            &flag,
        ),
    );
    expect_layout(
        "2-D ids",
        ix::index_select(
            &s,
            Strided::new(src.as_slice(), &[1]),
            &[4],
            Strided::new(ids2.as_slice(), &[1, 1]),
            &[1, 2],
            0,
            &mut out2.view(),
            &flag,
        ),
    );
    expect_layout(
        "source view too short",
        ix::index_select(
            &s,
            Strided::new(src.slice(..3).unwrap(), &[1]),
            &[4],
            Strided::new(ids2.as_slice(), &[1]),
            &[2],
            0,
            &mut out2.view(),
            &flag,
        ),
    );
    expect_layout(
        "gather ids larger than the source outside dim",
        ix::gather(
            &s,
            Strided::new(src.as_slice(), &[2, 1]),
            &[2, 2],
            Strided::new(ids2.as_slice(), &[1, 0]),
            &[2, 3],
            0,
            &mut out2.view(),
            &flag,
        ),
    );
    checked += 4;
    assert!(out2.untouched(), "an invalid call launched");
    let other_stream = stream();
    let e = ix::index_select(
        &other_stream,
        Strided::new(src.as_slice(), &[1]),
        &[4],
        Strided::new(ids2.as_slice(), &[1]),
        &[2],
        0,
        &mut out2.view(),
        &flag,
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::Layout { .. }),
        "flag of another stream: {e}"
    );
    assert!(
        out2.untouched(),
        "a call with another stream's flag launched"
    );
    flag.check().expect("nothing flagged");
    checked += 2;
    println!("indexing: contention for 9 dtypes and {checked} error paths checked");
}

/// scatter (set) with repeated ids along `dim`: the last one along `dim` wins (Candle's CPU and
/// CUDA order), on a strided (transposed) destination, with skip values among the ids.
#[test]
#[ignore = "needs a GPU"]
fn scatter_repeated_ids_last_wins() {
    let s = stream();
    let flag = IndexErrorFlag::new(&s).expect("flag");
    // dst (5, 7, 3) stored transposed as (3, 7, 5); src and ids (5, 40, 3): dim 1 has more ids
    // than destinations, so every fiber repeats indices.
    let (a, d, m, b) = (5usize, 7usize, 40usize, 3usize);
    let mut rng = Lcg::new(0x5ca7_7e12);
    let ids_host: Vec<u32> = (0..a * m * b)
        .map(|_| match rng.below(12) {
            0 => u32::MAX,
            _ => rng.below(d as u64) as u32,
        })
        .collect();
    let src_host: Vec<f32> = (0..a * m * b).map(|i| i as f32).collect();
    let dst_strides = [1usize, a, a * d];
    let init = vec![-1.0f32; a * d * b];
    let mut dst = s.alloc_from_host(&init).unwrap();
    let ids = s.alloc_from_host(&ids_host).unwrap();
    let src = s.alloc_from_host(&src_host).unwrap();
    ix::scatter(
        &s,
        &mut dst.as_mut_slice(),
        &[a, d, b],
        &dst_strides,
        Strided::new(ids.as_slice(), &[m * b, b, 1]),
        &[a, m, b],
        Strided::new(src.as_slice(), &[m * b, b, 1]),
        &[a, m, b],
        1,
        &flag,
    )
    .expect("scatter");
    let got = dst.to_host_vec().unwrap();
    let mut want = init.clone();
    for l in 0..a {
        for j in 0..m {
            for r in 0..b {
                let k = (l * m + j) * b + r;
                if ids_host[k] != u32::MAX {
                    let off = l * dst_strides[0]
                        + ids_host[k] as usize * dst_strides[1]
                        + r * dst_strides[2];
                    want[off] = src_host[k];
                }
            }
        }
    }
    assert_eq!(
        got, want,
        "scatter with repeated ids: the last one along dim must win"
    );
    assert!(flag.take().unwrap().is_none());
    println!(
        "scatter (set) with repeated ids: last along dim wins ({} writes)",
        a * m * b
    );
}
