//! GPU tests of the `f8` family (a module of tests/gpu.rs): f8e4m3 arithmetic on byte buffers,
//! checked bit for bit against a host reference built from the `float8` crate itself, as
//! candle-core 0.11.1's CPU backend uses it: float8's operators (`+ - * /`, neg, `max`,
//! comparisons, `from_f32`/`from_f64`/`to_f32`) and, for the functions (which float8 defines in
//! its num-traits impls as `from_f32(self.to_f32().f())`), the same expression over Rust's f32
//! functions; erf and gelu_erf through `libm`, as Candle's CPU backend.
//!
//! Exhaustive where it is cheap: every unary op on all 256 bytes, every binary op and
//! comparison on all 65,536 byte pairs, powf and elu for every f8 parameter (and a few f64
//! ones that round), affine for random parameters. Then strided, offset, transposed,
//! broadcast and empty layouts, and the ordered scatter_add/index_add (repeated indices, skip
//! values, out-of-range indices recorded in the error record). Each output is computed twice,
//! into buffers poisoned with two different bytes, so that an element the kernel forgets to
//! write cannot pass; guard bytes around it must stay poisoned.
//!
//! NaN bytes are compared exactly on x86_64 (where Candle's CPU backend runs and the kernels
//! reproduce its NaN signs); elsewhere any NaN matches a NaN.

use super::*;
use float8::F8E4M3 as F8;
use rocm_kernels::f8;
use rocm_kernels::indexing::{IndexError, IndexOp};

const POISONS: [u8; 2] = [0x5a, 0xa5];
const FRONT: usize = 3;
const BACK: usize = 5;

fn is_nan8(b: u8) -> bool {
    b & 0x7f == 0x7f
}

/// Bit-exact on x86_64; elsewhere a NaN matches any NaN (the CPU's NaN signs are x86's).
fn same(got: u8, want: u8) -> bool {
    got == want || (!cfg!(target_arch = "x86_64") && is_nan8(got) && is_nan8(want))
}

/// An output of `n` bytes between guards, all poisoned with `poison`.
struct Out {
    buf: DeviceBuffer<u8>,
    n: usize,
    poison: u8,
}

impl Out {
    fn new(s: &Stream, n: usize, poison: u8) -> Self {
        let mut buf = s.alloc::<u8>(n + FRONT + BACK).expect("alloc");
        buf.as_mut_slice().memset_async(poison).expect("poison");
        Out { buf, n, poison }
    }
    fn view(&mut self) -> DeviceSliceMut<'_, u8> {
        self.buf.slice_mut(FRONT..FRONT + self.n).expect("dst view")
    }
    fn read(&self, ctx: &str) -> Vec<u8> {
        let all = self.buf.to_host_vec().expect("download");
        let (front, rest) = all.split_at(FRONT);
        let (out, back) = rest.split_at(self.n);
        assert!(
            front.iter().chain(back).all(|&b| b == self.poison),
            "{ctx}: a guard byte was overwritten: {front:?} {back:?}"
        );
        out.to_vec()
    }
}

/// Runs `launch` into outputs poisoned with each of [`POISONS`] and compares both with `want`.
fn check_out(
    s: &Stream,
    ctx: &str,
    want: &[u8],
    show: &dyn Fn(usize) -> String,
    mut launch: impl FnMut(&mut DeviceSliceMut<'_, u8>) -> rocm_kernels::Result<()>,
) {
    for poison in POISONS {
        let mut out = Out::new(s, want.len(), poison);
        launch(&mut out.view()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let got = out.read(ctx);
        let bad: Vec<usize> = (0..want.len())
            .filter(|&i| !same(got[i], want[i]))
            .collect();
        if let Some(&i) = bad.first() {
            panic!(
                "{ctx} (poison {poison:#04x}): {} of {} bytes differ; first at {i} ({}): got \
                 {:#04x}, want {:#04x}",
                bad.len(),
                want.len(),
                show(i),
                got[i],
                want[i]
            );
        }
    }
}

/// A contiguous operand holding `bytes`.
fn upload(s: &Stream, bytes: &[u8]) -> DeviceBuffer<u8> {
    s.alloc_from_host(bytes).expect("upload")
}

fn contiguous<'a>(buf: &'a DeviceBuffer<u8>, strides: &'a [usize]) -> Strided<'a, u8> {
    Strided::new(buf.slice(..).expect("view"), strides)
}

// ------------------------------------------------------------------------------------------
// The host reference (float8, as Candle's CPU backend)
// ------------------------------------------------------------------------------------------

fn fx(b: u8) -> F8 {
    F8::from_bits(b)
}

/// float8's num-traits functions: `from_f32(self.to_f32().f())`.
fn via_f32(v: F8, f: fn(f32) -> f32) -> F8 {
    F8::from_f32(f(v.to_f32()))
}

fn ref_unary(op: UnaryOp, b: u8) -> u8 {
    let v = fx(b);
    let one = F8::ONE;
    let r = match op {
        UnaryOp::Exp => via_f32(v, f32::exp),
        UnaryOp::Log => via_f32(v, f32::ln),
        UnaryOp::Sin => via_f32(v, f32::sin),
        UnaryOp::Cos => via_f32(v, f32::cos),
        UnaryOp::Tanh => via_f32(v, f32::tanh),
        UnaryOp::Neg => -v,
        UnaryOp::Recip => via_f32(v, f32::recip),
        UnaryOp::Sqr => v * v,
        UnaryOp::Sqrt => via_f32(v, f32::sqrt),
        UnaryOp::Gelu => {
            let tanh = |x: F8| via_f32(x, f32::tanh);
            F8::from_f32(0.5)
                * v
                * (one
                    + tanh(F8::from_f32(0.797_884_6) * v * (one + F8::from_f32(0.044715) * v * v)))
        }
        UnaryOp::GeluErf => {
            let x = v.to_f32();
            F8::from_f32((libm::erff(x * std::f32::consts::FRAC_1_SQRT_2) + 1.) * 0.5 * x)
        }
        UnaryOp::Erf => F8::from_f64(libm::erf(v.to_f64())),
        UnaryOp::Silu => v / (one + via_f32(-v, f32::exp)),
        UnaryOp::Abs => via_f32(v, f32::abs),
        UnaryOp::Ceil => via_f32(v, f32::ceil),
        UnaryOp::Floor => via_f32(v, f32::floor),
        UnaryOp::Round => via_f32(v, f32::round),
        UnaryOp::Relu => v.max(F8::ZERO),
        UnaryOp::Sign => {
            if v > F8::ZERO {
                one
            } else if v < F8::ZERO {
                -one
            } else {
                F8::ZERO
            }
        }
        UnaryOp::Sigmoid => unreachable!("no f8 sigmoid"),
    };
    r.to_bits()
}

fn ref_binary(op: BinaryOp, a: u8, b: u8) -> u8 {
    let (x, y) = (fx(a), fx(b));
    let r = match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Minimum => {
            if x > y {
                y
            } else {
                x
            }
        }
        BinaryOp::Maximum => {
            if x < y {
                y
            } else {
                x
            }
        }
    };
    r.to_bits()
}

fn ref_cmp(op: CmpOp, a: u8, b: u8) -> u8 {
    let (x, y) = (fx(a), fx(b));
    u8::from(match op {
        CmpOp::Eq => x == y,
        CmpOp::Ne => x != y,
        CmpOp::Lt => x < y,
        CmpOp::Le => x <= y,
        CmpOp::Gt => x > y,
        CmpOp::Ge => x >= y,
    })
}

fn ref_affine(b: u8, mul: f64, add: f64) -> u8 {
    (fx(b) * F8::from_f64(mul) + F8::from_f64(add)).to_bits()
}

fn ref_powf(b: u8, e: f64) -> u8 {
    let e = F8::from_f64(e);
    F8::from_f32(fx(b).to_f32().powf(e.to_f32())).to_bits()
}

fn ref_elu(b: u8, alpha: f64) -> u8 {
    let v = fx(b);
    let r = if v.is_sign_positive() {
        v
    } else {
        (via_f32(v, f32::exp) - F8::ONE) * F8::from_f64(alpha)
    };
    r.to_bits()
}

/// The f64 that names byte `b` as a parameter (NaN bytes: NaN).
fn param(b: u8) -> f64 {
    if is_nan8(b) {
        f64::NAN
    } else {
        fx(b).to_f64()
    }
}

fn all_bytes() -> Vec<u8> {
    (0..=255).collect()
}

fn f8_unary_ops() -> Vec<UnaryOp> {
    UnaryOp::ALL
        .into_iter()
        .filter(|&op| f8::supports_unary(op))
        .collect()
}

// ------------------------------------------------------------------------------------------
// Exhaustive element-wise tests
// ------------------------------------------------------------------------------------------

#[test]
#[ignore = "needs a GPU"]
fn f8_unary_ops_on_every_byte() {
    let s = stream();
    let bytes = all_bytes();
    let input = upload(&s, &bytes);
    let dims = [256];
    let ops = f8_unary_ops();
    for &op in &ops {
        let want: Vec<u8> = bytes.iter().map(|&b| ref_unary(op, b)).collect();
        let ctx = format!("f8 unary {}", op.name());
        let show = |i: usize| format!("input {i:#04x} = {}", fx(i as u8));
        check_out(&s, &ctx, &want, &show, |d| {
            f8::unary(&s, op, &dims, contiguous(&input, &[1]), d)
        });
    }
    println!("f8: {} unary ops x 256 bytes, bit-exact", ops.len());
}

#[test]
#[ignore = "needs a GPU"]
fn f8_binary_and_cmp_on_every_pair() {
    let s = stream();
    let lhs: Vec<u8> = (0..65536u32).map(|i| (i >> 8) as u8).collect();
    let rhs: Vec<u8> = (0..65536u32).map(|i| i as u8).collect();
    let (gl, gr) = (upload(&s, &lhs), upload(&s, &rhs));
    let dims = [256, 256];
    let strides = [256, 1];
    let show = |i: usize| format!("{} op {}", fx(lhs[i]), fx(rhs[i]));
    for op in BinaryOp::ALL {
        let want: Vec<u8> = (0..65536).map(|i| ref_binary(op, lhs[i], rhs[i])).collect();
        check_out(&s, &format!("f8 binary {}", op.name()), &want, &show, |d| {
            f8::binary(
                &s,
                op,
                &dims,
                contiguous(&gl, &strides),
                contiguous(&gr, &strides),
                d,
            )
        });
    }
    for op in CmpOp::ALL {
        let want: Vec<u8> = (0..65536).map(|i| ref_cmp(op, lhs[i], rhs[i])).collect();
        check_out(&s, &format!("f8 cmp {}", op.name()), &want, &show, |d| {
            f8::cmp(
                &s,
                op,
                &dims,
                contiguous(&gl, &strides),
                contiguous(&gr, &strides),
                d,
            )
        });
    }
    println!("f8: 6 binary ops + 6 comparisons x 65536 byte pairs, bit-exact");
}

#[test]
#[ignore = "needs a GPU"]
fn f8_affine_powf_elu_on_every_byte() {
    let s = stream();
    let bytes = all_bytes();
    let input = upload(&s, &bytes);
    let dims = [256];
    let show = |i: usize| format!("input {i:#04x} = {}", fx(i as u8));
    // Parameters: every f8 value (and NaN) for powf and elu, plus f64 values that round (ties,
    // saturation, underflow, infinities).
    let mut params: Vec<f64> = bytes.iter().map(|&b| param(b)).collect();
    params.extend([
        2.3,
        -0.3,
        1.7,
        0.7,
        1e-9,
        -1e-9,
        464.0,
        464.1,
        1e30,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.001953125 * 0.5,
        0.0625 * 1.0625,
        -2.0f64.powi(-10) * 1.5,
    ]);
    for &e in &params {
        let want: Vec<u8> = bytes.iter().map(|&b| ref_powf(b, e)).collect();
        check_out(&s, &format!("f8 powf {e:e}"), &want, &show, |d| {
            f8::powf(&s, &dims, contiguous(&input, &[1]), d, e)
        });
        let want: Vec<u8> = bytes.iter().map(|&b| ref_elu(b, e)).collect();
        check_out(&s, &format!("f8 elu alpha {e:e}"), &want, &show, |d| {
            f8::elu(&s, &dims, contiguous(&input, &[1]), d, e)
        });
    }
    let mut rng = Lcg::new(seed_for("f8 affine"));
    let pick = |rng: &mut Lcg| -> f64 {
        if rng.below(3) == 0 {
            params[rng.below(params.len() as u64) as usize]
        } else {
            rng.uniform(-500.0, 500.0) * 2f64.powi(-(rng.below(12) as i32))
        }
    };
    let n_affine = 300;
    for _ in 0..n_affine {
        let (mul, add) = (pick(&mut rng), pick(&mut rng));
        let want: Vec<u8> = bytes.iter().map(|&b| ref_affine(b, mul, add)).collect();
        check_out(
            &s,
            &format!("f8 affine {mul:e} {add:e}"),
            &want,
            &show,
            |d| f8::affine(&s, &dims, contiguous(&input, &[1]), d, mul, add),
        );
    }
    println!(
        "f8: powf and elu for {} parameters, affine for {n_affine} (mul, add) pairs, x 256 \
         bytes, bit-exact",
        params.len()
    );
}

// ------------------------------------------------------------------------------------------
// Layouts
// ------------------------------------------------------------------------------------------

/// A read operand over random bytes (all 256 values, NaNs included).
fn byte_operand(s: &Stream, view: View, rng: &mut Lcg) -> Operand<u8> {
    Operand::new(s, view, || rng.below(256) as u8)
}

#[test]
#[ignore = "needs a GPU"]
fn f8_layouts() {
    let s = stream();
    let mut checked = 0;
    for dims in shapes() {
        for (k, &kind) in KINDS.iter().enumerate() {
            let label = format!("f8 layouts {dims:?} {kind:?}");
            let mut rng = Lcg::new(seed_for(&label));
            let a = byte_operand(&s, make_view(&dims, kind), &mut rng);
            let b = byte_operand(&s, make_view(&dims, KINDS[(k + 3) % KINDS.len()]), &mut rng);
            let (av, bv) = (a.values(), b.values());
            let ctx = |what: &str| {
                format!(
                    "{what}: {} / {} (seed {:#x})",
                    a.view.describe(),
                    b.view.describe(),
                    seed_for(&label)
                )
            };
            let show = |i: usize| format!("element {i}");
            for op in [UnaryOp::Gelu, UnaryOp::Neg, UnaryOp::Exp] {
                let want: Vec<u8> = av.iter().map(|&x| ref_unary(op, x)).collect();
                check_out(&s, &ctx(op.name()), &want, &show, |d| {
                    f8::unary(&s, op, &dims, a.strided(), d)
                });
            }
            let want: Vec<u8> = av.iter().map(|&x| ref_affine(x, 1.7, -0.3)).collect();
            check_out(&s, &ctx("affine"), &want, &show, |d| {
                f8::affine(&s, &dims, a.strided(), d, 1.7, -0.3)
            });
            let want: Vec<u8> = av.iter().map(|&x| ref_powf(x, 2.3)).collect();
            check_out(&s, &ctx("powf"), &want, &show, |d| {
                f8::powf(&s, &dims, a.strided(), d, 2.3)
            });
            let want: Vec<u8> = av.iter().map(|&x| ref_elu(x, 0.7)).collect();
            check_out(&s, &ctx("elu"), &want, &show, |d| {
                f8::elu(&s, &dims, a.strided(), d, 0.7)
            });
            for op in [BinaryOp::Add, BinaryOp::Div, BinaryOp::Maximum] {
                let want: Vec<u8> = av
                    .iter()
                    .zip(&bv)
                    .map(|(&x, &y)| ref_binary(op, x, y))
                    .collect();
                check_out(&s, &ctx(op.name()), &want, &show, |d| {
                    f8::binary(&s, op, &dims, a.strided(), b.strided(), d)
                });
            }
            let want: Vec<u8> = av
                .iter()
                .zip(&bv)
                .map(|(&x, &y)| ref_cmp(CmpOp::Le, x, y))
                .collect();
            check_out(&s, &ctx("le"), &want, &show, |d| {
                f8::cmp(&s, CmpOp::Le, &dims, a.strided(), b.strided(), d)
            });
            checked += 1;
        }
    }
    println!("f8: {checked} layouts x 10 ops, bit-exact");
}

// ------------------------------------------------------------------------------------------
// scatter_add / index_add (ordered)
// ------------------------------------------------------------------------------------------

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

/// An index for a dim of `size`: mostly valid (few distinct values, so repeats), sometimes the
/// skip value, and out of range when `bad`.
fn gen_id(rng: &mut Lcg, size: usize, bad: bool) -> i64 {
    if bad {
        return size as i64 + rng.below(3) as i64;
    }
    match rng.below(8) {
        0 => i64::MAX,
        _ => rng.below(size.min(3) as u64) as i64,
    }
}

fn err_record(s: &Stream) -> DeviceBuffer<u32> {
    s.alloc_zeroed::<u32>(f8::ERR_WORDS).expect("err record")
}

/// Candle's CPU scatter_add, sequentially with float8's `+=`: (dst, first bad index).
fn ref_scatter_add(
    dst: &[u8],
    dst_dims: &[usize],
    ids: &[i64],
    src: &[u8],
    src_dims: &[usize],
    dim: usize,
) -> (Vec<u8>, Option<i64>) {
    let mut out: Vec<F8> = dst.iter().map(|&b| fx(b)).collect();
    let mut bad = None;
    // Candle walks (left, i along dim, right): for one destination element, i increases.
    for (k, (&id, &term)) in ids.iter().zip(src).enumerate() {
        if id == i64::MAX {
            continue;
        }
        if id < 0 || id as usize >= dst_dims[dim] {
            bad.get_or_insert(id);
            continue;
        }
        let mut c = unravel(k, src_dims);
        c[dim] = id as usize;
        let p = ravel(&c, dst_dims);
        out[p] += fx(term);
    }
    (out.iter().map(|v| v.to_bits()).collect(), bad)
}

/// Candle's CPU index_add accumulation with float8's `+=`.
fn ref_index_add(
    dst: &[u8],
    dst_dims: &[usize],
    ids: &[i64],
    src: &[u8],
    src_dims: &[usize],
    dim: usize,
) -> (Vec<u8>, Option<i64>) {
    let mut out: Vec<F8> = dst.iter().map(|&b| fx(b)).collect();
    let mut bad = None;
    for (j, &id) in ids.iter().enumerate() {
        if id == i64::MAX {
            continue;
        }
        if id < 0 || id as usize >= dst_dims[dim] {
            bad.get_or_insert(id);
            continue;
        }
        for (k, &term) in src.iter().enumerate() {
            let mut c = unravel(k, src_dims);
            if c[dim] != j {
                continue;
            }
            c[dim] = id as usize;
            out[ravel(&c, dst_dims)] += fx(term);
        }
    }
    (out.iter().map(|v| v.to_bits()).collect(), bad)
}

fn check_record(ctx: &str, words: &[u32], op: IndexOp, bad: Option<i64>, size: usize) {
    match (IndexError::decode(words), bad) {
        (None, None) => {}
        (Some(e), Some(_)) => {
            assert_eq!(e.op, op, "{ctx}");
            assert_eq!(e.size, size as u64, "{ctx}");
            assert!(e.index < 0 || e.index as usize >= size, "{ctx}: {e:?}");
        }
        (got, want) => panic!("{ctx}: error record {got:?}, expected a bad index {want:?}"),
    }
}

#[test]
#[ignore = "needs a GPU"]
fn f8_scatter_add_and_index_add_in_candle_order() {
    let s = stream();
    let mut cases = 0;
    for dst_dims in [vec![5], vec![3, 4], vec![2, 3, 4], vec![40, 70]] {
        for dim in 0..dst_dims.len() {
            for (variant, bad) in [(0, false), (1, false), (2, true), (3, false)] {
                let label = format!("f8 accumulate {dst_dims:?} dim {dim} v{variant}");
                let mut rng = Lcg::new(seed_for(&label));
                let mut src_dims = dst_dims.clone();
                src_dims[dim] = [7, 1, 3, 0][variant];
                let n_dst = numel(&dst_dims);
                let n_src = numel(&src_dims);
                let dst_init: Vec<u8> = (0..n_dst).map(|_| rng.below(256) as u8).collect();
                // Small values most of the time, so that sums round rather than saturate.
                let gen_val = |rng: &mut Lcg| -> u8 {
                    if rng.below(4) == 0 {
                        rng.below(256) as u8
                    } else {
                        F8::from_f64(rng.uniform(-3.0, 3.0)).to_bits()
                    }
                };
                let src_host: Vec<u8> = (0..n_src).map(|_| gen_val(&mut rng)).collect();
                // Variant 1 reads the source through a transposed copy (strided).
                let (src_buf, src_strides): (DeviceBuffer<u8>, Vec<usize>) =
                    if variant == 1 && src_dims.len() >= 2 {
                        let r = src_dims.len();
                        let mut t_dims = src_dims.clone();
                        t_dims.reverse();
                        let mut t = vec![0u8; n_src];
                        for (k, &v) in src_host.iter().enumerate() {
                            let mut c = unravel(k, &src_dims);
                            c.reverse();
                            t[ravel(&c, &t_dims)] = v;
                        }
                        let mut strides = vec![0; r];
                        let mut acc = 1;
                        for k in (0..r).rev() {
                            strides[r - 1 - k] = acc;
                            acc *= t_dims[k];
                        }
                        (upload(&s, &t), strides)
                    } else {
                        let mut strides = vec![1; src_dims.len()];
                        for k in (0..src_dims.len().saturating_sub(1)).rev() {
                            strides[k] = strides[k + 1] * src_dims[k + 1];
                        }
                        (upload(&s, &src_host), strides)
                    };
                let dst_strides = {
                    let mut st = vec![1; dst_dims.len()];
                    for k in (0..dst_dims.len().saturating_sub(1)).rev() {
                        st[k] = st[k + 1] * dst_dims[k + 1];
                    }
                    st
                };
                let src = Strided::new(src_buf.slice(..).expect("src"), &src_strides);
                let size = dst_dims[dim];

                // scatter_add: ids of the source's shape.
                let sc_ids: Vec<i64> = (0..n_src)
                    .map(|k| gen_id(&mut rng, size.max(1), bad && k % 5 == 2))
                    .collect();
                let (want, bad_id) =
                    ref_scatter_add(&dst_init, &dst_dims, &sc_ids, &src_host, &src_dims, dim);
                let ids_buf = s.alloc_from_host(&sc_ids).expect("ids");
                let mut dst = upload(&s, &dst_init);
                let mut err = err_record(&s);
                f8::scatter_add(
                    &s,
                    &mut dst.as_mut_slice(),
                    &dst_dims,
                    &dst_strides,
                    Strided::new(
                        ids_buf.slice(..).expect("ids"),
                        &src_strides_contig(&src_dims),
                    ),
                    &src_dims,
                    src,
                    &src_dims,
                    dim,
                    &mut err.as_mut_slice(),
                )
                .unwrap_or_else(|e| panic!("{label}: scatter_add: {e}"));
                let got = dst.to_host_vec().expect("download");
                compare_bytes(&format!("{label}: scatter_add"), &got, &want);
                let words = err.to_host_vec().expect("err");
                check_record(&label, &words, IndexOp::ScatterAdd, bad_id, size);

                // index_add: 1-D ids along dim, read with a stride of 2.
                let n_ids = src_dims[dim];
                let ia: Vec<i64> = (0..n_ids)
                    .map(|j| gen_id(&mut rng, size.max(1), bad && j == n_ids - 1))
                    .collect();
                let mut spaced = vec![-7i64; 2 * n_ids + 1];
                for (j, &v) in ia.iter().enumerate() {
                    spaced[1 + 2 * j] = v;
                }
                let ia_buf = s.alloc_from_host(&spaced).expect("ids");
                let (want, bad_id) =
                    ref_index_add(&dst_init, &dst_dims, &ia, &src_host, &src_dims, dim);
                let mut dst = upload(&s, &dst_init);
                let mut err = err_record(&s);
                f8::index_add(
                    &s,
                    &mut dst.as_mut_slice(),
                    &dst_dims,
                    &dst_strides,
                    Strided::new(ia_buf.slice(1..).expect("ids"), &[2]),
                    &[n_ids],
                    Strided::new(src_buf.slice(..).expect("src"), &src_strides),
                    &src_dims,
                    dim,
                    &mut err.as_mut_slice(),
                )
                .unwrap_or_else(|e| panic!("{label}: index_add: {e}"));
                let got = dst.to_host_vec().expect("download");
                compare_bytes(&format!("{label}: index_add"), &got, &want);
                let words = err.to_host_vec().expect("err");
                check_record(&label, &words, IndexOp::IndexAdd, bad_id, size);
                cases += 1;
            }
        }
    }
    println!("f8: scatter_add/index_add, {cases} cases, bit-exact in Candle's order");
}

fn src_strides_contig(dims: &[usize]) -> Vec<usize> {
    let mut st = vec![1; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        st[k] = st[k + 1] * dims[k + 1];
    }
    st
}

fn compare_bytes(ctx: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{ctx}");
    if let Some(i) = (0..want.len()).find(|&i| !same(got[i], want[i])) {
        panic!(
            "{ctx}: byte {i}: got {:#04x}, want {:#04x}",
            got[i], want[i]
        );
    }
}

#[test]
#[ignore = "needs a GPU"]
fn f8_invalid_calls_are_errors() {
    let s = stream();
    let input = upload(&s, &[0x38; 8]);
    let mut out = Out::new(&s, 8, 0x5a);
    let r = f8::unary(
        &s,
        UnaryOp::Sigmoid,
        &[8],
        contiguous(&input, &[1]),
        &mut out.view(),
    );
    assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
    // A view too short for its strides, a destination of the wrong length.
    let r = f8::unary(
        &s,
        UnaryOp::Exp,
        &[4],
        contiguous(&input, &[3]),
        &mut out.view(),
    );
    assert!(matches!(r, Err(Error::Layout { .. })), "{r:?}");
    let r = f8::binary(
        &s,
        BinaryOp::Add,
        &[4],
        contiguous(&input, &[1]),
        contiguous(&input, &[1]),
        &mut out.view(),
    );
    assert!(matches!(r, Err(Error::Layout { .. })), "{r:?}");
    // A non-contiguous destination of an accumulation, a short error record.
    let ids = s.alloc_from_host(&[0u32; 8]).expect("ids");
    let mut dst = upload(&s, &[0u8; 8]);
    let mut err = err_record(&s);
    let r = f8::scatter_add(
        &s,
        &mut dst.as_mut_slice(),
        &[2, 4],
        &[1, 2],
        Strided::new(ids.slice(..).expect("ids"), &[4, 1]),
        &[2, 4],
        contiguous(&input, &[4, 1]),
        &[2, 4],
        1,
        &mut err.as_mut_slice(),
    );
    assert!(matches!(r, Err(Error::Layout { .. })), "{r:?}");
    let mut short = s.alloc_zeroed::<u32>(4).expect("short");
    let r = f8::index_add(
        &s,
        &mut dst.as_mut_slice(),
        &[2, 4],
        &[4, 1],
        Strided::new(ids.slice(..).expect("ids"), &[1]),
        &[2],
        contiguous(&input, &[4, 1]),
        &[2, 4],
        0,
        &mut short.as_mut_slice(),
    );
    assert!(matches!(r, Err(Error::Layout { .. })), "{r:?}");
    assert!(out.read("invalid calls").iter().all(|&b| b == 0x5a));
    assert_eq!(dst.to_host_vec().expect("dst"), vec![0u8; 8]);
    println!("f8: invalid calls rejected before any launch");
}
