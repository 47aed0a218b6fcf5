//! Conformance rows of a step's rotary embedding fused with its KV cache append (a module of
//! tests/conformance.rs): `rope_kv` and `rope_i_kv` (`RocmStorage::rope_kv_append`) for every
//! kernel dtype. Reference: the f64 rotation (`rope_ref`) of the query and key heads; the
//! caches after the call hold the rotated keys and the values in the step's rows and every
//! other row as it was (caches start full of random values, the queries' output is poisoned).

use super::*;
use candle_rocm::layout::Copy2dSpec;
use candle_rocm::RopeKvInputs;

/// One call: `b` sequences of `t` positions, `hq` query and `hk` key heads of `d`, into caches
/// of `capacity` positions at `offset`; `qk` the q/k input's layout.
struct RopeKvCase {
    name: &'static str,
    b: usize,
    hq: usize,
    hk: usize,
    t: usize,
    d: usize,
    capacity: usize,
    offset: usize,
    qk: Layout,
    expect_error: bool,
}

fn case(name: &'static str, dims: [usize; 5], capacity: usize, offset: usize) -> RopeKvCase {
    let [b, hq, hk, t, d] = dims;
    RopeKvCase {
        name,
        b,
        hq,
        hk,
        t,
        d,
        capacity,
        offset,
        qk: Layout::contiguous((b, hq + hk, t, d)),
        expect_error: false,
    }
}

fn cases() -> Vec<RopeKvCase> {
    let mut offset_input = case("prompt, input at an offset", [2, 4, 2, 3, 8], 8, 0);
    offset_input.qk = Layout::contiguous_with_offset((2, 6, 3, 8), 5);
    let mut transposed = case("transposed input", [1, 2, 1, 3, 8], 4, 0);
    transposed.qk = Layout::contiguous((1, 3, 3, 8)).transpose(1, 2).unwrap();
    transposed.expect_error = true;
    let mut past_end = case("past the cache's end", [1, 2, 1, 2, 8], 4, 3);
    past_end.expect_error = true;
    vec![
        case("one pair", [1, 1, 1, 1, 2], 1, 0),
        case("decode step", [1, 4, 2, 1, 8], 7, 5),
        offset_input,
        case("odd half, batch 3", [3, 2, 1, 5, 6], 9, 2),
        case("8 q heads a kv head, d 128", [1, 8, 1, 2, 128], 6, 4),
        case("d 256, last rows", [2, 2, 2, 1, 256], 3, 2),
        transposed,
        past_end,
    ]
}

pub(super) fn run_rope_kv(ctx: &mut Ctx) {
    for dtype in storage_dtypes() {
        let col = dtype.as_str();
        for kind in [RopeKind::Rope, RopeKind::Interleaved] {
            let row = if kind == RopeKind::Rope {
                "rope_kv"
            } else {
                "rope_i_kv"
            };
            for c in cases() {
                // Non-float dtypes: one case is enough for the typed error.
                if !dtype.is_float() && c.name != "decode step" {
                    continue;
                }
                let float = dtype.is_float() && dtype != DType::F8E4M3;
                let expect = if float && !c.expect_error {
                    Expect::Pass
                } else {
                    Expect::TypedError
                };
                let seed = case_seed(ctx.base, &[row, col, c.name]);
                let outcome = run_case(ctx, dtype, kind, &c, expect, seed);
                ctx.matrix.record(row, col, c.name, seed, outcome);
            }
        }
    }
}

fn run_case(
    ctx: &mut Ctx,
    dtype: DType,
    kind: RopeKind,
    c: &RopeKvCase,
    expect: Expect,
    seed: u64,
) -> Outcome {
    let mut rng = Rng::new(seed);
    let (b, hq, hk, t, d) = (c.b, c.hq, c.hk, c.t, c.d);
    let heads = hq + hk;
    let half = d / 2;
    let angles: Vec<f64> = (0..t * half)
        .map(|_| rng.uniform(-std::f64::consts::PI, std::f64::consts::PI))
        .collect();
    let cos = storage_from_f64(dtype, &angles.iter().map(|a| a.cos()).collect::<Vec<_>>());
    let sin = storage_from_f64(dtype, &angles.iter().map(|a| a.sin()).collect::<Vec<_>>());
    let qk = gen(dtype, needed_len(&c.qk), Dist::General, &mut rng);
    let kv_len = b * hk * t * d;
    let v = gen(dtype, kv_len, Dist::General, &mut rng);
    let cache_len = b * hk * c.capacity * d;
    let k_cache = gen(dtype, cache_len, Dist::General, &mut rng);
    let v_cache = gen(dtype, cache_len, Dist::General, &mut rng);
    let (tl, vl) = (
        Layout::contiguous((t, half)),
        Layout::contiguous((b, hk, t, d)),
    );
    let (gqk, gc, gs, gv) = (
        ctx.upload(&qk),
        ctx.upload(&cos),
        ctx.upload(&sin),
        ctx.upload(&v),
    );
    let (mut gk_cache, mut gv_cache) = (ctx.upload(&k_cache), ctx.upload(&v_cache));
    let rows = Copy2dSpec {
        d1: b * hk,
        d2: t * d,
        src_s: t * d,
        dst_s: c.capacity * d,
        src_o: 0,
        dst_o: c.offset * d,
    };
    let inputs = RopeKvInputs {
        kind,
        cos: (&gc, &tl),
        sin: (&gs, &tl),
        q_heads: hq,
        v: (&gv, &vl),
        k_rows: rows,
        v_rows: rows,
    };
    ctx.poison(b * hq * t * d * dtype.size_in_bytes());
    let result = gqk.rope_kv_append(&c.qk, inputs, &mut gk_cache, &mut gv_cache);
    let (q, shape) = match (expect, result) {
        (Expect::TypedError, r) => {
            return judge_fused(expect, gpu_result(r.map(|(q, _)| q)), None, dtype, false)
        }
        (Expect::Pass, Err(e)) => return Outcome::Fail(format!("ROCm error: {e}")),
        (Expect::Pass, Ok(r)) => r,
    };
    if shape.dims() != [b, hq, t, d] {
        return Outcome::Fail(format!("shape {shape:?}, expected {:?}", [b, hq, t, d]));
    }
    // The f64 rotation of every head, then where its rows go.
    let rotated = rope_ref(
        kind,
        &logical_values(&qk, &c.qk),
        &values_f64(&cos),
        &values_f64(&sin),
        [b, heads, t, d],
    );
    let head_rows = |bb: usize, h: usize| {
        let start = ((bb * heads + h) * t) * d;
        &rotated[start..start + t * d]
    };
    let mut q_want = Vec::with_capacity(b * hq * t * d);
    let (mut k_want, mut v_want) = (values_f64(&k_cache), values_f64(&v_cache));
    let v_in = values_f64(&v);
    for bb in 0..b {
        for h in 0..hq {
            q_want.extend_from_slice(head_rows(bb, h));
        }
        for h in 0..hk {
            let dst = ((bb * hk + h) * c.capacity + c.offset) * d;
            k_want[dst..dst + t * d].copy_from_slice(head_rows(bb, hq + h));
            let src = ((bb * hk + h) * t) * d;
            v_want[dst..dst + t * d].copy_from_slice(&v_in[src..src + t * d]);
        }
    }
    let parts = [
        ("queries", gpu_result(Ok(q)), q_want, false),
        ("key cache", gpu_result(Ok(gk_cache)), k_want, false),
        ("value cache", gpu_result(Ok(gv_cache)), v_want, true),
    ];
    for (what, got, want, exact) in parts {
        let outcome = if exact {
            let want = storage_from_f64(dtype, &want);
            judge(Expect::Pass, got, Some(Ok(Ok(want))), None, true)
        } else {
            judge_fused(Expect::Pass, got, Some(want), dtype, false)
        };
        match outcome {
            Outcome::Pass => {}
            Outcome::Fail(m) => return Outcome::Fail(format!("{what}: {m}")),
            other => return other,
        }
    }
    Outcome::Pass
}
