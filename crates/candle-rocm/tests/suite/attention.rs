//! Fused attention on the GPU ([`candle_rocm::attention`]) against the plain computation
//! (`q k^T * scale`, softcap, mask, softmax, `· v`) in f64 on the host, from the same rounded
//! inputs (a module of tests/conformance.rs):
//!
//! * every dtype (f32, f16, bf16) and head dim (32, 64, 80, 96, 128, 256), prefill and decode;
//! * sequence lengths 1, 7, 127, 1000, 4097; GQA ratios 1, 4, 8; causal with `seq_q != seq_k`
//!   (bottom-right aligned, decode against a cache); sliding windows; softcap; additive masks
//!   (per head and broadcast over heads, -inf entries, fully masked rows give zeros, not NaN);
//! * layouts: (b, s, h, d) and (b, h, s, d) orders, transposed views, offsets (aligned: read in
//!   place; unaligned: copied), a split-key decode over 16k keys; batches above one;
//! * variable-length batches, with bad offsets reported as a typed error;
//! * empty problems, and bad input (head dims, head ratios, shapes, masks, dtypes) as typed
//!   errors. Outputs land in memory the caching allocator has just held NaN in;
//! * every prefill case of f16/bf16 with a matrix-instruction head dim runs on both kernel
//!   families (portable and matrix-instruction, the latter forced, without the first-use check),
//!   and the first-use check itself passes on the device.

use super::*;
use candle_rocm::attention::{self, AttnKernel, AttnLayout, AttnOptions, HEAD_DIMS, MMA_HEAD_DIMS};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Store {
    /// Contiguous in the problem's order.
    Contiguous,
    /// Memory in the other order, presented through a transposed layout.
    Transposed,
    /// Contiguous after `n` leading elements.
    Offset(usize),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum MaskKind {
    /// (b, hq, sq, sk) random values, some -inf.
    PerHead,
    /// (b, 1, sq, sk) broadcast over heads, with query row 0 fully masked.
    Broadcast,
}

#[derive(Clone, Debug)]
struct Problem {
    dtype: DType,
    b: usize,
    sq: usize,
    sk: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    params: AttnOptions,
    order: AttnLayout,
    store: Store,
    mask: Option<MaskKind>,
}

fn problem(
    dtype: DType,
    (b, sq, sk): (usize, usize, usize),
    (hq, hkv, d): (usize, usize, usize),
) -> Problem {
    Problem {
        dtype,
        b,
        sq,
        sk,
        hq,
        hkv,
        d,
        params: AttnOptions {
            scale: 1.0 / (d as f32).sqrt(),
            softcap: None,
            window_left: None,
            window_right: None,
            kernel: AttnKernel::Portable,
        },
        order: AttnLayout::Bshd,
        store: Store::Contiguous,
        mask: None,
    }
}

impl Problem {
    fn causal(mut self) -> Self {
        self.params.window_right = Some(0);
        self
    }
    fn window(mut self, l: Option<usize>, r: Option<usize>) -> Self {
        self.params.window_left = l;
        self.params.window_right = r;
        self
    }
    fn order(mut self, o: AttnLayout) -> Self {
        self.order = o;
        self
    }
    fn store(mut self, s: Store) -> Self {
        self.store = s;
        self
    }
    fn mask(mut self, m: MaskKind) -> Self {
        self.mask = Some(m);
        self
    }
    fn softcap(mut self, scale: f32, cap: f32) -> Self {
        self.params.scale = scale;
        self.params.softcap = Some(cap);
        self
    }
    fn name(&self) -> String {
        format!("{self:?}")
    }
}

/// Logical (b, s, h, d) values -> a storage and layout in `order` / `store`.
fn place(
    dev: &RocmDevice,
    dtype: DType,
    vals: &[f64],
    [b, s, h, d]: [usize; 4],
    order: AttnLayout,
    store: Store,
) -> (RocmStorage, Layout) {
    // The dims in the problem's order, and the "other" order for transposed storage.
    let (dims, swap) = match order {
        AttnLayout::Bshd => ([b, s, h, d], (1, 2)),
        AttnLayout::Bhsd => ([b, h, s, d], (1, 2)),
    };
    let logical =
        |bi: usize, si: usize, hi: usize, di: usize| vals[((bi * s + si) * h + hi) * d + di];
    let at = |idx: [usize; 4]| -> f64 {
        match order {
            AttnLayout::Bshd => logical(idx[0], idx[1], idx[2], idx[3]),
            AttnLayout::Bhsd => logical(idx[0], idx[2], idx[1], idx[3]),
        }
    };
    let n = b * s * h * d;
    let (mem, layout): (Vec<f64>, Layout) = match store {
        Store::Contiguous | Store::Offset(_) => {
            let off = if let Store::Offset(o) = store { o } else { 0 };
            let mut mem = vec![7.0; off];
            for i0 in 0..dims[0] {
                for i1 in 0..dims[1] {
                    for i2 in 0..dims[2] {
                        for i3 in 0..dims[3] {
                            mem.push(at([i0, i1, i2, i3]));
                        }
                    }
                }
            }
            let l = Layout::contiguous_with_offset(Shape::from_dims(&dims), off);
            (mem, l)
        }
        Store::Transposed => {
            // Memory holds dims with axes 1 and 2 swapped; the layout transposes them back.
            let mdims = [dims[0], dims[2], dims[1], dims[3]];
            let mut mem = Vec::with_capacity(n);
            for i0 in 0..mdims[0] {
                for i1 in 0..mdims[1] {
                    for i2 in 0..mdims[2] {
                        for i3 in 0..mdims[3] {
                            mem.push(at([i0, i2, i1, i3]));
                        }
                    }
                }
            }
            let l = Layout::contiguous(Shape::from_dims(&mdims))
                .transpose(swap.0, swap.1)
                .unwrap();
            (mem, l)
        }
    };
    let cpu = storage_from_f64(dtype, &mem);
    (dev.storage_from_cpu_storage(&cpu).unwrap(), layout)
}

/// Values rounded to `dtype`.
fn rounded(dtype: DType, v: &[f64]) -> Vec<f64> {
    values_f64(&storage_from_f64(dtype, v))
}

fn random_vals(n: usize, rng: &mut Rng, lo: f64, hi: f64) -> Vec<f64> {
    (0..n).map(|_| rng.uniform(lo, hi)).collect()
}

/// The f64 reference: (b, sq, hq, d) logical output.
#[allow(clippy::too_many_arguments)]
fn reference(
    p: &Problem,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    mask: Option<&dyn Fn(usize, usize, usize, usize) -> f64>,
    (sq, sk): (usize, usize),
    (q0, k0, bq): (usize, usize, usize),
    out: &mut [f64],
) {
    let (hq, hkv, d) = (p.hq, p.hkv, p.d);
    let g = hq / hkv;
    let shift = sk as i64 - sq as i64;
    for h in 0..hq {
        let hk = h / g;
        for i in 0..sq {
            let qrow = &q[((q0 + i) * hq + h) * d..][..d];
            let lo = p
                .params
                .window_left
                .map_or(0, |w| i as i64 + shift - w as i64);
            let hi = p
                .params
                .window_right
                .map_or(sk as i64 - 1, |w| i as i64 + shift + w as i64);
            let mut scores = Vec::new();
            for j in 0..sk {
                if (j as i64) < lo || (j as i64) > hi {
                    continue;
                }
                let krow = &k[((k0 + j) * hkv + hk) * d..][..d];
                let mut s: f64 =
                    qrow.iter().zip(krow).map(|(a, b)| a * b).sum::<f64>() * p.params.scale as f64;
                if let Some(c) = p.params.softcap {
                    s = c as f64 * (s / c as f64).tanh();
                }
                if let Some(m) = mask {
                    s += m(bq, h, i, j);
                }
                if s != f64::NEG_INFINITY {
                    scores.push((j, s));
                }
            }
            let o = &mut out[((q0 + i) * hq + h) * d..][..d];
            o.iter_mut().for_each(|x| *x = 0.0);
            if scores.is_empty() {
                continue;
            }
            let mx = scores.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
            let den: f64 = scores.iter().map(|x| (x.1 - mx).exp()).sum();
            for &(j, s) in &scores {
                let w = (s - mx).exp() / den;
                let vrow = &v[((k0 + j) * hkv + hk) * d..][..d];
                for (x, y) in o.iter_mut().zip(vrow) {
                    *x += w * y;
                }
            }
        }
    }
}

fn attn_tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::BF16 => (1e-2, 1.6e-2),
        DType::F16 => (2e-3, 2e-3),
        _ => (2e-5, 1e-4),
    }
}

fn compare_attn(name: &str, dtype: DType, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let (atol, rtol) = attn_tolerance(dtype);
    let mut worst = (0.0f64, 0usize);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g.is_finite(), "{name}: element {i} is {g} (want {w})");
        let err = (g - w).abs() - (atol + rtol * w.abs());
        if err > worst.0 {
            worst = (err, i);
        }
    }
    let i = worst.1;
    assert!(
        worst.0 <= 0.0,
        "{name}: element {i}: got {} want {} (atol {atol}, rtol {rtol})",
        got[i],
        want[i]
    );
}

/// NaN in memory the caching allocator hands out next (outputs must overwrite it).
fn poison(dev: &RocmDevice, n: usize) {
    let s = dev
        .storage_from_cpu_storage(&CpuStorage::F32(vec![f32::NAN; n.max(1) + 64]))
        .unwrap();
    drop(s);
}

/// The output in logical (b, sq, hq, d) order.
fn logical_out(p: &Problem, vals: Vec<f64>) -> Vec<f64> {
    match p.order {
        AttnLayout::Bshd => vals,
        AttnLayout::Bhsd => {
            let mut out = vec![0.0; vals.len()];
            for b in 0..p.b {
                for h in 0..p.hq {
                    for i in 0..p.sq {
                        for e in 0..p.d {
                            out[((b * p.sq + i) * p.hq + h) * p.d + e] =
                                vals[((b * p.hq + h) * p.sq + i) * p.d + e];
                        }
                    }
                }
            }
            out
        }
    }
}

fn run(dev: &RocmDevice, p: &Problem) {
    let name = p.name();
    let mut rng = Rng::new(case_seed(base_seed(), &["attention", &name]));
    let (b, sq, sk, hq, hkv, d) = (p.b, p.sq, p.sk, p.hq, p.hkv, p.d);
    let q = rounded(p.dtype, &random_vals(b * sq * hq * d, &mut rng, -1.0, 1.0));
    let k = rounded(p.dtype, &random_vals(b * sk * hkv * d, &mut rng, -1.0, 1.0));
    let v = rounded(p.dtype, &random_vals(b * sk * hkv * d, &mut rng, -1.0, 1.0));
    let (qs, ql) = place(dev, p.dtype, &q, [b, sq, hq, d], p.order, p.store);
    let (ks, kl) = place(dev, p.dtype, &k, [b, sk, hkv, d], p.order, p.store);
    let (vs, vl) = place(dev, p.dtype, &v, [b, sk, hkv, d], p.order, p.store);
    // The mask, logical (b, mh, sq, sk) with mh = hq or 1.
    let mask_vals = p.mask.map(|kind| {
        let mh = if kind == MaskKind::PerHead { hq } else { 1 };
        let mut m = rounded(p.dtype, &random_vals(b * mh * sq * sk, &mut rng, -2.0, 2.0));
        for (idx, x) in m.iter_mut().enumerate() {
            let j = idx % sk.max(1);
            let i = (idx / sk.max(1)) % sq.max(1);
            if (kind == MaskKind::Broadcast && i == 0) || (idx * 7919) % 13 == 0 && j % 3 == 0 {
                *x = f64::NEG_INFINITY;
            }
        }
        (mh, m)
    });
    let mask_dev = mask_vals.as_ref().map(|(mh, m)| {
        let s = dev
            .storage_from_cpu_storage(&storage_from_f64(p.dtype, m))
            .unwrap();
        let l = Layout::contiguous(Shape::from_dims(&[b, *mh, sq, sk]));
        (s, l)
    });
    let mask_fn = mask_vals.as_ref().map(|(mh, m)| {
        let (mh, m) = (*mh, m.clone());
        move |bi: usize, h: usize, i: usize, j: usize| m[((bi * mh + h % mh) * sq + i) * sk + j]
    });
    let mut want = vec![0.0; b * sq * hq * d];
    for bi in 0..b {
        let qb = &q[bi * sq * hq * d..][..sq * hq * d];
        let kb = &k[bi * sk * hkv * d..][..sk * hkv * d];
        let vb = &v[bi * sk * hkv * d..][..sk * hkv * d];
        let ob = &mut want[bi * sq * hq * d..][..sq * hq * d];
        let m = mask_fn
            .as_ref()
            .map(|f| f as &dyn Fn(usize, usize, usize, usize) -> f64);
        reference(p, qb, kb, vb, m, (sq, sk), (0, 0, bi), ob);
    }
    let want_dims = match p.order {
        AttnLayout::Bshd => vec![b, sq, hq, d],
        AttnLayout::Bhsd => vec![b, hq, sq, d],
    };
    let prefill = sq > rocm_kernels::attention::DECODE_MAX_SEQ_Q;
    for kernel in kernels_for(p.dtype, d, prefill) {
        let name = format!("{name} {kernel:?}");
        let params = AttnOptions { kernel, ..p.params };
        poison(dev, b * sq * hq * d * 4);
        let (out, shape) = attention::attention(
            "flash_attn",
            p.order,
            (&qs, &ql),
            (&ks, &kl),
            (&vs, &vl),
            mask_dev.as_ref().map(|(s, l)| (s, l)),
            &params,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(shape.dims(), want_dims.as_slice(), "{name}");
        let got = logical_out(p, values_f64(&out.to_cpu_storage().unwrap()));
        compare_attn(&name, p.dtype, &got, &want);
    }
}

/// The kernel families a case runs on: the portable kernels, and the matrix-instruction kernels
/// where they exist for the dtype and head dim: for prefill the device's own and the
/// tile-abstraction ones (the same on AMD; on NVIDIA the AMD kernels' algorithm); for decode
/// the device's own (NVIDIA sm_80+; elsewhere `Matrix` decodes with the portable kernels).
fn kernels_for(dtype: DType, d: usize, prefill: bool) -> Vec<AttnKernel> {
    let mut k = vec![AttnKernel::Portable];
    if matches!(dtype, DType::F16 | DType::BF16) && MMA_HEAD_DIMS.contains(&d) {
        k.push(AttnKernel::Matrix);
        if prefill {
            k.push(AttnKernel::Tiles);
        }
    }
    k
}

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

#[test]
#[ignore = "needs a GPU"]
fn attention_every_dtype_and_head_dim() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    for dtype in FLOATS {
        for d in HEAD_DIMS {
            run(&dev, &problem(dtype, (2, 37, 37), (4, 2, d)).causal());
            run(&dev, &problem(dtype, (2, 1, 300), (8, 2, d)));
            run(&dev, &problem(dtype, (1, 70, 90), (2, 2, d)));
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn attention_sequence_lengths_and_gqa() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    for s in [1usize, 7, 127, 1000, 4097] {
        run(&dev, &problem(DType::BF16, (1, s, s), (2, 1, 64)).causal());
    }
    run(
        &dev,
        &problem(DType::F32, (1, 1000, 1000), (1, 1, 128)).causal(),
    );
    run(&dev, &problem(DType::F16, (1, 127, 127), (2, 2, 256)));
    for (hq, hkv) in [(8, 8), (8, 2), (8, 1)] {
        // causal with q_len != kv_len: prefill continuing a cache, and decode.
        run(
            &dev,
            &problem(DType::BF16, (2, 100, 250), (hq, hkv, 64)).causal(),
        );
        run(
            &dev,
            &problem(DType::F16, (2, 3, 777), (hq, hkv, 128)).causal(),
        );
        run(
            &dev,
            &problem(DType::F32, (1, 1, 513), (hq, hkv, 80)).causal(),
        );
    }
    // More query rows than keys (causal: the first rows see nothing and are zeros).
    run(&dev, &problem(DType::F32, (1, 50, 20), (2, 1, 64)).causal());
    run(&dev, &problem(DType::BF16, (1, 6, 2), (4, 2, 64)).causal());
    // A long KV cache: the split-key decode path with its merge.
    run(
        &dev,
        &problem(DType::BF16, (1, 1, 16384), (32, 8, 128)).causal(),
    );
    run(
        &dev,
        &problem(DType::F16, (2, 2, 5000), (16, 2, 64)).causal(),
    );
}

#[test]
#[ignore = "needs a GPU"]
fn attention_windows_softcap_and_masks() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let windows = [
        (Some(16), Some(0)),
        (Some(5), Some(3)),
        (None, Some(2)),
        (Some(0), Some(0)),
        (Some(40), None),
    ];
    for (l, r) in windows {
        run(
            &dev,
            &problem(DType::BF16, (2, 200, 200), (4, 2, 64)).window(l, r),
        );
        run(
            &dev,
            &problem(DType::F32, (1, 150, 300), (2, 1, 128)).window(l, r),
        );
        run(
            &dev,
            &problem(DType::F16, (2, 1, 500), (8, 1, 64)).window(l, r),
        );
    }
    for dtype in FLOATS {
        run(
            &dev,
            &problem(dtype, (2, 65, 65), (4, 2, 64))
                .causal()
                .softcap(0.5, 5.0),
        );
        run(
            &dev,
            &problem(dtype, (1, 1, 400), (4, 4, 128)).softcap(0.3, 2.0),
        );
        for kind in [MaskKind::PerHead, MaskKind::Broadcast] {
            run(&dev, &problem(dtype, (2, 33, 47), (4, 2, 64)).mask(kind));
            run(
                &dev,
                &problem(dtype, (2, 80, 80), (2, 1, 96)).causal().mask(kind),
            );
            run(&dev, &problem(dtype, (2, 1, 333), (8, 2, 64)).mask(kind));
            run(
                &dev,
                &problem(dtype, (1, 4, 600), (4, 1, 128))
                    .causal()
                    .mask(kind)
                    .order(AttnLayout::Bhsd),
            );
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn attention_layouts() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    for order in [AttnLayout::Bshd, AttnLayout::Bhsd] {
        for store in [
            Store::Contiguous,
            Store::Transposed,
            Store::Offset(64),
            Store::Offset(3),
        ] {
            for dtype in FLOATS {
                run(
                    &dev,
                    &problem(dtype, (3, 45, 45), (4, 2, 64))
                        .causal()
                        .order(order)
                        .store(store),
                );
                run(
                    &dev,
                    &problem(dtype, (3, 1, 129), (4, 2, 64))
                        .order(order)
                        .store(store),
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn attention_empty_problems() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    // No keys: zeros. No queries or no batch: empty outputs.
    run(&dev, &problem(DType::F32, (2, 5, 0), (2, 1, 64)));
    run(&dev, &problem(DType::BF16, (2, 20, 0), (2, 1, 64)).causal());
    run(&dev, &problem(DType::F16, (2, 0, 9), (2, 1, 64)));
    run(&dev, &problem(DType::F32, (0, 3, 9), (2, 1, 64)));
}

fn varlen_case(
    dev: &RocmDevice,
    dtype: DType,
    lens: &[(usize, usize)],
    (hq, hkv, d): (usize, usize, usize),
    params: AttnOptions,
) {
    let name = format!("varlen {dtype:?} {lens:?} {hq}/{hkv}x{d} {params:?}");
    let mut rng = Rng::new(case_seed(base_seed(), &["varlen", &name]));
    let tq: usize = lens.iter().map(|l| l.0).sum();
    let tk: usize = lens.iter().map(|l| l.1).sum();
    let q = rounded(dtype, &random_vals(tq * hq * d, &mut rng, -1.0, 1.0));
    let k = rounded(dtype, &random_vals(tk * hkv * d, &mut rng, -1.0, 1.0));
    let v = rounded(dtype, &random_vals(tk * hkv * d, &mut rng, -1.0, 1.0));
    let up = |x: &[f64], dims: &[usize]| {
        (
            dev.storage_from_cpu_storage(&storage_from_f64(dtype, x))
                .unwrap(),
            Layout::contiguous(Shape::from_dims(dims)),
        )
    };
    let (qs, ql) = up(&q, &[tq, hq, d]);
    let (ks, kl) = up(&k, &[tk, hkv, d]);
    let (vs, vl) = up(&v, &[tk, hkv, d]);
    let mut cq = vec![0u32];
    let mut ck = vec![0u32];
    for &(a, c) in lens {
        cq.push(cq.last().unwrap() + a as u32);
        ck.push(ck.last().unwrap() + c as u32);
    }
    let cl = Layout::contiguous(cq.len());
    let cqs = dev
        .storage_from_cpu_storage(&CpuStorage::U32(cq.clone()))
        .unwrap();
    let cks = dev
        .storage_from_cpu_storage(&CpuStorage::U32(ck.clone()))
        .unwrap();
    let maxq = lens.iter().map(|l| l.0).max().unwrap_or(0);
    let maxk = lens.iter().map(|l| l.1).max().unwrap_or(0);
    let mut want = vec![0.0; tq * hq * d];
    let p = Problem {
        params,
        ..problem(dtype, (1, 0, 0), (hq, hkv, d))
    };
    for (bi, &(a, c)) in lens.iter().enumerate() {
        reference(
            &p,
            &q,
            &k,
            &v,
            None,
            (a, c),
            (cq[bi] as usize, ck[bi] as usize, bi),
            &mut want,
        );
    }
    for kernel in kernels_for(dtype, d, true) {
        let name = format!("{name} {kernel:?}");
        poison(dev, tq * hq * d * 4);
        let (out, shape) = attention::attention_varlen(
            (&qs, &ql),
            (&ks, &kl),
            (&vs, &vl),
            (&cqs, &cl),
            (&cks, &cl),
            (maxq, maxk),
            &AttnOptions { kernel, ..params },
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(shape.dims(), &[tq, hq, d], "{name}");
        let got = values_f64(&out.to_cpu_storage().unwrap());
        compare_attn(&name, dtype, &got, &want);
    }
}

/// The first-use check of the matrix-instruction prefill agrees with the portable kernels on
/// this device for every dtype and head dim that has the kernels (NVIDIA sm_80+ here; on AMD,
/// CDNA2/3 and RDNA3/4), so that [`AttnKernel::Auto`] uses them.
#[test]
#[ignore = "needs a GPU"]
fn attention_matrix_prefill_passes_its_first_use_check() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let arch = dev.hip_device().arch().to_string();
    let expect_kernels = arch
        .strip_prefix("sm_")
        .and_then(|cc| cc.parse::<u32>().ok())
        .is_some_and(|cc| cc >= 80)
        || ["gfx90a", "gfx942", "gfx950", "gfx11", "gfx12"]
            .iter()
            .any(|a| arch.starts_with(a));
    for d in MMA_HEAD_DIMS {
        let bf = attention::matrix_prefill_verdict::<half::bf16>(dev.stream(), d).unwrap();
        let h = attention::matrix_prefill_verdict::<half::f16>(dev.stream(), d).unwrap();
        println!("{arch} d{d}: matrix prefill bf16 {bf}, f16 {h}");
        if expect_kernels {
            assert!(
                bf && h,
                "{arch} d{d}: the matrix-instruction prefill failed its check"
            );
        }
    }
    // f32 and head dim 256 have no matrix-instruction kernels: never used.
    assert!(!attention::matrix_prefill_verdict::<f32>(dev.stream(), 128).unwrap());
    assert!(!attention::matrix_prefill_verdict::<half::bf16>(dev.stream(), 256).unwrap());
}

#[test]
#[ignore = "needs a GPU"]
fn attention_varlen() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let causal = |d: usize| AttnOptions {
        scale: 1.0 / (d as f32).sqrt(),
        softcap: None,
        window_left: None,
        window_right: Some(0),
        kernel: AttnKernel::Auto,
    };
    let lens = [(5, 7), (130, 130), (1, 40), (0, 3), (70, 90)];
    for dtype in FLOATS {
        varlen_case(&dev, dtype, &lens, (4, 2, 64), causal(64));
        varlen_case(
            &dev,
            dtype,
            &lens,
            (8, 1, 128),
            AttnOptions {
                window_right: None,
                ..causal(128)
            },
        );
        varlen_case(
            &dev,
            dtype,
            &lens,
            (2, 2, 96),
            AttnOptions {
                window_left: Some(8),
                ..causal(96)
            },
        );
    }

    // Bad offsets: decreasing, and past the packed rows. A typed error at the next sync.
    let dtype = DType::BF16;
    let (hq, d) = (2usize, 64usize);
    let z = |n: usize| {
        dev.storage_from_cpu_storage(&storage_from_f64(dtype, &vec![0.5; n]))
            .unwrap()
    };
    let (qs, ks, vs) = (z(10 * hq * d), z(10 * hq * d), z(10 * hq * d));
    let l3 = Layout::contiguous((10, hq, d));
    for bad in [vec![0u32, 6, 4], vec![0u32, 4, 11]] {
        let cqs = dev
            .storage_from_cpu_storage(&CpuStorage::U32(bad.clone()))
            .unwrap();
        let cks = dev
            .storage_from_cpu_storage(&CpuStorage::U32(vec![0, 5, 10]))
            .unwrap();
        let cl = Layout::contiguous(3);
        let r = attention::attention_varlen(
            (&qs, &l3),
            (&ks, &l3),
            (&vs, &l3),
            (&cqs, &cl),
            (&cks, &cl),
            (6, 5),
            &causal(d),
        );
        let err = match r {
            Err(e) => e,
            Ok((out, _)) => out
                .to_cpu_storage()
                .expect_err("bad offsets must be reported"),
        };
        let msg = err.to_string();
        assert!(
            msg.contains("flash_attn_varlen") && msg.contains("offset"),
            "{bad:?}: {msg}"
        );
        // The device is usable afterwards.
        dev.synchronize().unwrap();
    }
}

#[test]
#[ignore = "needs a GPU"]
fn attention_bad_input_is_a_typed_error() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let mk = |dtype: DType, dims: &[usize]| {
        let n: usize = dims.iter().product();
        (
            dev.storage_from_cpu_storage(&storage_from_f64(dtype, &vec![0.25; n]))
                .unwrap(),
            Layout::contiguous(Shape::from_dims(dims)),
        )
    };
    let params = AttnOptions {
        scale: 0.125,
        softcap: None,
        window_left: None,
        window_right: None,
        kernel: AttnKernel::Auto,
    };
    let call = |q: &(RocmStorage, Layout),
                k: &(RocmStorage, Layout),
                v: &(RocmStorage, Layout),
                m: Option<&(RocmStorage, Layout)>| {
        attention::attention(
            "flash_attn",
            AttnLayout::Bshd,
            (&q.0, &q.1),
            (&k.0, &k.1),
            (&v.0, &v.1),
            m.map(|m| (&m.0, &m.1)),
            &params,
        )
        .map(|_| ())
    };
    let f = DType::F16;
    let q = mk(f, &[1, 4, 8, 64]);
    let k = mk(f, &[1, 6, 2, 64]);
    let cases: Vec<(&str, candle_core::Result<()>, &str)> = vec![
        (
            "head dim 72",
            call(
                &mk(f, &[1, 4, 2, 72]),
                &mk(f, &[1, 4, 2, 72]),
                &mk(f, &[1, 4, 2, 72]),
                None,
            ),
            "head dim",
        ),
        (
            "6 heads over 4",
            call(
                &mk(f, &[1, 4, 6, 64]),
                &mk(f, &[1, 4, 4, 64]),
                &mk(f, &[1, 4, 4, 64]),
                None,
            ),
            "multiple",
        ),
        (
            "k and v rows differ",
            call(&q, &k, &mk(f, &[1, 5, 2, 64]), None),
            "disagree",
        ),
        (
            "k head dim differs",
            call(&q, &mk(f, &[1, 6, 2, 32]), &mk(f, &[1, 6, 2, 32]), None),
            "disagree",
        ),
        ("3-D q", call(&mk(f, &[4, 8, 64]), &k, &k, None), "4-D"),
        (
            "mask shape",
            call(&q, &k, &k, Some(&mk(f, &[1, 8, 4, 5]))),
            "broadcast",
        ),
        (
            "mask dtype",
            call(&q, &k, &k, Some(&mk(DType::F32, &[1, 8, 4, 6]))),
            "dtype",
        ),
        (
            "f64",
            call(
                &mk(DType::F64, &[1, 4, 8, 64]),
                &mk(DType::F64, &[1, 6, 2, 64]),
                &mk(DType::F64, &[1, 6, 2, 64]),
                None,
            ),
            "f64",
        ),
        (
            "dtype mismatch",
            call(&q, &mk(DType::BF16, &[1, 6, 2, 64]), &k, None),
            "dtype",
        ),
    ];
    for (what, r, needle) in cases {
        let e = r.expect_err(what).to_string();
        assert!(
            e.to_lowercase().contains(&needle.to_lowercase()),
            "{what}: {e}"
        );
    }
    // A nonsensical softcap / scale.
    let bad = AttnOptions {
        softcap: Some(-1.0),
        ..params
    };
    let e = attention::attention(
        "flash_attn",
        AttnLayout::Bshd,
        (&q.0, &q.1),
        (&k.0, &k.1),
        (&k.0, &k.1),
        None,
        &bad,
    )
    .expect_err("negative softcap")
    .to_string();
    assert!(e.contains("softcap"), "{e}");
}
