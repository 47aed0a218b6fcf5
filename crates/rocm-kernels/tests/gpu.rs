//! Tier 3: rocm-kernels' element-wise kernels on a real GPU. Every test here is
//! `#[ignore = "needs a GPU"]`; run with
//! `cargo test -p rocm-kernels --test gpu -- --include-ignored --nocapture`
//! (`HIP_PLATFORM=nvidia` on an NVIDIA card).
//!
//! Every (op, dtype) pair is checked against an independent host reference (f64 math for the
//! float types, exact i128 arithmetic wrapped to the type for the integers) over many layouts:
//! contiguous, offset, transposed, permuted, narrowed, broadcast (stride 0), mixed, empty, rank 0
//! to 5, sizes that are not a multiple of the block. Inputs come from a fixed-seed LCG (the seed
//! of each case is printed in its assertion messages); outputs are poisoned (0xff bytes) before
//! the kernel and surrounded by guard elements that must stay poisoned.

use std::fmt::Debug;

use half::{bf16, f16};
use hip_core::{Device, DeviceBuffer, DeviceSliceMut, Stream};
use rocm_kernels::elementwise::{self as ew, BinaryOp, CmpOp, Strided, UnaryOp};
use rocm_kernels::{Error, KernelDType};

const SEED: u64 = 0x5eed_c0de_2024_0001;

fn stream() -> Stream {
    let device = Device::new(0).expect("a GPU is required for this test");
    device.create_stream().expect("create a stream")
}

// ------------------------------------------------------------------------------------------
// Deterministic random numbers
// ------------------------------------------------------------------------------------------

/// A 64-bit LCG with a mixing output function.
struct Lcg(u64);

impl Lcg {
    fn new(seed: u64) -> Self {
        Lcg(seed)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut z = self.0;
        z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        z ^ (z >> 33)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

/// The seed of one case: SEED mixed with the case's label (FNV-1a).
fn seed_for(label: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in label.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ SEED
}

// ------------------------------------------------------------------------------------------
// Element types
// ------------------------------------------------------------------------------------------

/// What the tests need of an element type.
trait TT: KernelDType + Copy + Debug + PartialEq {
    /// Relative and absolute tolerance for float results.
    const REL: f64;
    const ABS: f64;
    const MIN_I: i128;
    const MAX_I: i128;
    /// The value nearest to `v` (floats: correctly rounded, ties to even; integers: Rust `as`,
    /// i.e. truncating and saturating, NaN -> 0).
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    /// Integers: `v` wrapped into the type (two's complement truncation).
    fn from_i128(v: i128) -> Self;
    fn to_i128(self) -> i128;
    /// The bits, zero-extended.
    fn bits(self) -> u64;
    /// The value with these (low) bits.
    fn from_bits(bits: u64) -> Self;
    fn is_nan(self) -> bool {
        Self::IS_FLOAT && self.to_f64().is_nan()
    }
    fn poisoned(self) -> bool {
        let size = std::mem::size_of::<Self>() * 8;
        self.bits()
            == if size == 64 {
                u64::MAX
            } else {
                (1u64 << size) - 1
            }
    }
}

macro_rules! int_tt {
    ($($t:ty),*) => {$(
        impl TT for $t {
            const REL: f64 = 0.0;
            const ABS: f64 = 0.0;
            const MIN_I: i128 = <$t>::MIN as i128;
            const MAX_I: i128 = <$t>::MAX as i128;
            fn from_f64(v: f64) -> Self { v as $t }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_i128(v: i128) -> Self { v as $t }
            fn to_i128(self) -> i128 { self as i128 }
            fn bits(self) -> u64 { self as u64 & (u64::MAX >> (64 - 8 * std::mem::size_of::<$t>())) }
            fn from_bits(bits: u64) -> Self { bits as $t }
        }
    )*};
}
int_tt!(u8, u32, i16, i32, i64);

impl TT for f32 {
    const REL: f64 = 1e-5;
    const ABS: f64 = 1e-6;
    const MIN_I: i128 = 0;
    const MAX_I: i128 = 0;
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_i128(v: i128) -> Self {
        v as f32
    }
    fn to_i128(self) -> i128 {
        self as i128
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
    fn from_bits(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
}

impl TT for f64 {
    const REL: f64 = 1e-12;
    const ABS: f64 = 1e-14;
    const MIN_I: i128 = 0;
    const MAX_I: i128 = 0;
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn from_i128(v: i128) -> Self {
        v as f64
    }
    fn to_i128(self) -> i128 {
        self as i128
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn from_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
}

/// The 16-bit float nearest to `v` (ties to even), found among the neighbours of `guess` (the
/// `half` crate's own conversion, which is within one ulp): an independent check of the
/// kernels' f64 -> f16/bf16 rounding. `inf_bits` is +inf and `inf_at` where rounding treats it
/// (the next power of two after the largest finite value).
fn nearest_16(v: f64, guess: u16, value: fn(u16) -> f64, inf_bits: u16, inf_at: f64) -> u16 {
    if v.is_nan() {
        return inf_bits | 0x7f; // some quiet NaN; compared as "is NaN"
    }
    let sign = if v.is_sign_negative() { 0x8000u16 } else { 0 };
    let m = v.abs();
    let g = guess & 0x7fff;
    let pos = |c: u16| if c == inf_bits { inf_at } else { value(c) };
    let mut best = g.min(inf_bits);
    for c in [g.saturating_sub(1), g, g.saturating_add(1)] {
        if c > inf_bits {
            continue;
        }
        let (dc, db) = ((m - pos(c)).abs(), (m - pos(best)).abs());
        if dc < db || (dc == db && c & 1 == 0 && best & 1 == 1) {
            best = c;
        }
    }
    best | sign
}

impl TT for f16 {
    const REL: f64 = 1e-3;
    const ABS: f64 = 1e-5;
    const MIN_I: i128 = 0;
    const MAX_I: i128 = 0;
    fn from_f64(v: f64) -> Self {
        f16::from_bits(nearest_16(
            v,
            f16::from_f64(v.abs()).to_bits(),
            |b| f16::from_bits(b).to_f64(),
            0x7c00,
            65536.0,
        ))
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn from_i128(v: i128) -> Self {
        f16::from_f32(v as f32)
    }
    fn to_i128(self) -> i128 {
        f16::to_f64(self) as i128
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
    fn from_bits(bits: u64) -> Self {
        f16::from_bits(bits as u16)
    }
}

impl TT for bf16 {
    const REL: f64 = 1e-2;
    const ABS: f64 = 1e-5;
    const MIN_I: i128 = 0;
    const MAX_I: i128 = 0;
    fn from_f64(v: f64) -> Self {
        bf16::from_bits(nearest_16(
            v,
            bf16::from_f64(v.abs()).to_bits(),
            |b| bf16::from_bits(b).to_f64(),
            0x7f80,
            2f64.powi(128),
        ))
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn from_i128(v: i128) -> Self {
        bf16::from_f32(v as f32)
    }
    fn to_i128(self) -> i128 {
        bf16::to_f64(self) as i128
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
    fn from_bits(bits: u64) -> Self {
        bf16::from_bits(bits as u16)
    }
}

/// An integer value for T: a quarter of the time a special one (0, ±1, ±2, 3, MIN, MIN + 1,
/// MAX), otherwise uniform over the whole type.
fn gen_int<T: TT>(rng: &mut Lcg) -> T {
    let specials = [0, 1, -1, 2, -2, 3, T::MIN_I, T::MIN_I + 1, T::MAX_I];
    if rng.below(4) == 0 {
        T::from_i128(specials[rng.below(specials.len() as u64) as usize])
    } else {
        T::from_i128(rng.next_u64() as i128)
    }
}

// ------------------------------------------------------------------------------------------
// Layouts
// ------------------------------------------------------------------------------------------

/// A strided view into a buffer of `buf_len` elements, starting at `offset`.
#[derive(Clone, Debug)]
struct View {
    dims: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
    buf_len: usize,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Contiguous,
    Offset,
    Transposed,
    Rotated,
    Narrowed,
    Broadcast,
    Mixed,
}

const KINDS: [Kind; 7] = [
    Kind::Contiguous,
    Kind::Offset,
    Kind::Transposed,
    Kind::Rotated,
    Kind::Narrowed,
    Kind::Broadcast,
    Kind::Mixed,
];

/// Shapes every family is checked on: rank 0 to 5, empty ones, sizes that are not multiples of
/// anything in particular.
fn shapes() -> Vec<Vec<usize>> {
    vec![
        vec![],
        vec![1],
        vec![0, 5],
        vec![3, 0, 2],
        vec![1, 1],
        vec![7, 13],
        vec![4, 5, 6],
        vec![2, 3, 4, 5],
        vec![2, 1, 3, 2, 4],
        vec![33, 65],
        vec![517],
    ]
}

fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// A view of `dims` of the given kind: the storage is a row-major tensor whose dims are a
/// permutation of the view's (transposed: reversed, rotated: rotated by one), possibly padded
/// (narrowed views start inside the padding), with broadcast dims stored once (stride 0).
fn make_view(dims: &[usize], kind: Kind) -> View {
    let r = dims.len();
    let mut perm: Vec<usize> = (0..r).collect(); // storage dim k holds view dim perm[k]
    let mut pad = vec![0; r];
    let mut start = vec![0; r];
    let mut bcast = vec![false; r];
    let mut extra = 0;
    match kind {
        Kind::Contiguous => {}
        Kind::Offset => extra = 5,
        Kind::Transposed => perm.reverse(),
        Kind::Rotated if r > 0 => perm.rotate_left(1),
        Kind::Rotated => {}
        Kind::Narrowed => {
            for i in 0..r {
                pad[i] = 1 + i % 2;
                start[i] = if i % 2 == 0 { 1 } else { 0 };
            }
            extra = 2;
        }
        Kind::Broadcast => {
            for (i, b) in bcast.iter_mut().enumerate() {
                *b = i % 2 == 0;
            }
        }
        Kind::Mixed => {
            perm.reverse();
            if r > 0 {
                bcast[r - 1] = true;
                pad[0] = 2;
                start[0] = 1;
            }
            extra = 3;
        }
    }
    let stored: Vec<usize> = (0..r)
        .map(|i| if bcast[i] { 1 } else { dims[i] + pad[i] })
        .collect();
    let mut storage_strides = vec![0usize; r];
    let mut acc = 1usize;
    for k in (0..r).rev() {
        storage_strides[k] = acc;
        acc *= stored[perm[k]];
    }
    let mut strides = vec![0usize; r];
    for k in 0..r {
        let i = perm[k];
        strides[i] = if bcast[i] { 0 } else { storage_strides[k] };
    }
    let offset = extra + (0..r).map(|i| start[i] * strides[i]).sum::<usize>();
    View {
        dims: dims.to_vec(),
        strides,
        offset,
        // An empty view (a zero dim) may start past its padded storage: keep the slice valid.
        buf_len: (extra + acc).max(offset),
        kind,
    }
}

impl View {
    /// Buffer positions of the view's elements, in row-major order.
    fn positions(&self) -> Vec<usize> {
        let n = numel(&self.dims);
        let mut out = Vec::with_capacity(n);
        let r = self.dims.len();
        let mut idx = vec![0usize; r];
        for _ in 0..n {
            out.push(
                self.offset
                    + idx
                        .iter()
                        .zip(&self.strides)
                        .map(|(i, s)| i * s)
                        .sum::<usize>(),
            );
            for d in (0..r).rev() {
                idx[d] += 1;
                if idx[d] < self.dims[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        out
    }

    fn describe(&self) -> String {
        format!(
            "{:?} dims {:?} strides {:?} offset {}",
            self.kind, self.dims, self.strides, self.offset
        )
    }
}

/// A device copy of host data and a strided operand over it.
struct Operand<T: TT> {
    host: Vec<T>,
    buf: DeviceBuffer<T>,
    view: View,
}

impl<T: TT> Operand<T> {
    fn new(s: &Stream, view: View, mut gen: impl FnMut() -> T) -> Self {
        let host: Vec<T> = (0..view.buf_len).map(|_| gen()).collect();
        let buf = s.alloc_from_host(&host).expect("upload");
        Operand { host, buf, view }
    }
    fn strided(&self) -> Strided<'_, T> {
        Strided {
            data: self.buf.slice(self.view.offset..).expect("view"),
            strides: &self.view.strides,
        }
    }
    /// The view's elements in row-major order.
    fn values(&self) -> Vec<T> {
        self.view
            .positions()
            .into_iter()
            .map(|p| self.host[p])
            .collect()
    }
}

/// An output of `n` elements between poisoned guard elements; the whole buffer is poisoned
/// (0xff bytes) before the kernel runs.
struct Output<T: TT> {
    buf: DeviceBuffer<T>,
    n: usize,
}

const FRONT_GUARD: usize = 3;
const BACK_GUARD: usize = 5;

impl<T: TT> Output<T> {
    fn new(s: &Stream, n: usize) -> Self {
        let mut buf = s.alloc::<T>(n + FRONT_GUARD + BACK_GUARD).expect("alloc");
        buf.as_mut_slice().memset_async(0xff).expect("poison");
        Output { buf, n }
    }
    fn view(&mut self) -> DeviceSliceMut<'_, T> {
        self.buf
            .slice_mut(FRONT_GUARD..FRONT_GUARD + self.n)
            .expect("dst view")
    }
    /// The output, after checking that the guards are still poisoned.
    fn read(&self, ctx: &str) -> Vec<T> {
        let all = self.buf.to_host_vec().expect("download");
        let (front, rest) = all.split_at(FRONT_GUARD);
        let (out, back) = rest.split_at(self.n);
        assert!(
            front.iter().chain(back).all(|v| v.poisoned()),
            "{ctx}: a guard element around the output was overwritten: front {front:?} back {back:?}"
        );
        out.to_vec()
    }
    /// `true` when nothing (output or guards) was written.
    fn untouched(&self) -> bool {
        self.buf
            .to_host_vec()
            .expect("download")
            .iter()
            .all(|v| v.poisoned())
    }
}

// ------------------------------------------------------------------------------------------
// Comparisons
// ------------------------------------------------------------------------------------------

/// What an output element must be.
#[derive(Clone, Copy, Debug)]
enum Want<T> {
    /// Within the type's tolerance of this value (NaN: any NaN; infinities: exactly).
    Close(f64),
    /// Exactly this value (bits; any NaN matches a NaN).
    Exact(T),
}

fn matches<T: TT>(got: T, want: Want<T>, rel: f64, abs: f64) -> bool {
    match want {
        Want::Exact(w) => got.bits() == w.bits() || (got.is_nan() && w.is_nan()),
        Want::Close(w) => {
            let g = got.to_f64();
            if w.is_nan() {
                g.is_nan()
            } else if w.is_infinite() {
                g == w
            } else {
                (g - w).abs() <= abs + rel * w.abs()
            }
        }
    }
}

fn compare<T: TT>(ctx: &str, got: &[T], want: &[Want<T>], rel: f64, abs: f64) {
    assert_eq!(got.len(), want.len(), "{ctx}: output length");
    let bad: Vec<usize> = (0..got.len())
        .filter(|&i| !matches(got[i], want[i], rel, abs))
        .collect();
    if !bad.is_empty() {
        let first: Vec<String> = bad
            .iter()
            .take(8)
            .map(|&i| format!("[{i}] got {:?} want {:?}", got[i], want[i]))
            .collect();
        panic!(
            "{ctx}: {} of {} elements differ (rel {rel:e}, abs {abs:e}): {}",
            bad.len(),
            got.len(),
            first.join(", ")
        );
    }
}

fn want_int<T: TT>(v: i128) -> Want<T> {
    Want::Exact(T::from_i128(v))
}

// ------------------------------------------------------------------------------------------
// Unary family (unary, copy, affine, powf, elu)
// ------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum UOp {
    Unary(UnaryOp),
    Copy,
    Affine(f64, f64),
    Powf(f64),
    Elu(f64),
}

impl UOp {
    fn name(&self) -> String {
        match self {
            UOp::Unary(op) => op.name().to_string(),
            UOp::Copy => "copy".into(),
            UOp::Affine(m, a) => format!("affine({m}, {a})"),
            UOp::Powf(e) => format!("powf({e})"),
            UOp::Elu(a) => format!("elu({a})"),
        }
    }
}

/// Input domain of a float op: uniform in [lo, hi], or with `signed` a magnitude in [lo, hi]
/// with a random sign.
fn float_domain(op: UOp) -> (f64, f64, bool) {
    use UnaryOp::*;
    match op {
        UOp::Unary(o) => match o {
            Exp => (-10.0, 10.0, false),
            Log => (0.01, 100.0, false),
            Sin | Cos => (-10.0, 10.0, false),
            Tanh => (-5.0, 5.0, false),
            Recip => (0.1, 10.0, true),
            Sqrt => (0.0, 100.0, false),
            Gelu | GeluErf => (-6.0, 6.0, false),
            Erf => (-3.0, 3.0, false),
            Silu | Sigmoid => (-10.0, 10.0, false),
            Neg | Sqr | Abs | Ceil | Floor | Round | Relu | Sign => (-100.0, 100.0, false),
        },
        UOp::Copy | UOp::Affine(..) => (-100.0, 100.0, false),
        UOp::Powf(e) if e.fract() == 0.0 => (-4.0, 4.0, false),
        UOp::Powf(_) => (0.1, 4.0, false),
        UOp::Elu(_) => (-5.0, 5.0, false),
    }
}

fn gen_unary_input<T: TT>(rng: &mut Lcg, op: UOp) -> T {
    if T::IS_FLOAT {
        let (lo, hi, signed) = float_domain(op);
        let v = rng.uniform(lo, hi);
        T::from_f64(if signed && rng.below(2) == 0 { -v } else { v })
    } else {
        gen_int(rng)
    }
}

fn float_unary_ref(op: UnaryOp, x: f64) -> f64 {
    use UnaryOp::*;
    const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
    match op {
        Exp => x.exp(),
        Log => x.ln(),
        Sin => x.sin(),
        Cos => x.cos(),
        Tanh => x.tanh(),
        Neg => -x,
        Recip => 1.0 / x,
        Sqr => x * x,
        Sqrt => x.sqrt(),
        // 0.5 x (1 + tanh(z)) == x / (1 + exp(-2z)), the latter without cancellation.
        Gelu => x / (1.0 + (-2.0 * SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).exp()),
        GeluErf => 0.5 * x * libm::erfc(-x / std::f64::consts::SQRT_2),
        Erf => libm::erf(x),
        Silu => x / (1.0 + (-x).exp()),
        Abs => x.abs(),
        Ceil => x.ceil(),
        Floor => x.floor(),
        Round => x.round(),
        Relu => x.max(0.0),
        Sign => (x > 0.0) as i32 as f64 - (x < 0.0) as i32 as f64,
        Sigmoid => 1.0 / (1.0 + (-x).exp()),
    }
}

fn int_unary_ref(op: UnaryOp, x: i128) -> i128 {
    use UnaryOp::*;
    match op {
        Neg => -x,
        Sqr => x * x,
        Abs => x.abs(),
        Relu => x.max(0),
        Sign => x.signum(),
        Ceil | Floor | Round => x,
        Gelu | GeluErf | Erf | Silu => 0,
        _ => unreachable!("{op:?} has no integer kernel"),
    }
}

fn unary_want<T: TT>(op: UOp, x: T) -> Want<T> {
    match op {
        UOp::Copy => Want::Exact(x),
        UOp::Unary(o) if T::IS_FLOAT => Want::Close(float_unary_ref(o, x.to_f64())),
        UOp::Unary(o) => want_int(int_unary_ref(o, x.to_i128())),
        UOp::Affine(m, a) if T::IS_FLOAT => {
            let (m, a) = (T::from_f64(m).to_f64(), T::from_f64(a).to_f64());
            Want::Close(x.to_f64() * m + a)
        }
        UOp::Affine(m, a) => {
            let (m, a) = (T::from_f64(m).to_i128(), T::from_f64(a).to_i128());
            want_int(x.to_i128() * m + a)
        }
        UOp::Powf(e) => Want::Close(x.to_f64().powf(T::from_f64(e).to_f64())),
        UOp::Elu(alpha) => {
            let v = x.to_f64();
            let alpha = T::from_f64(alpha).to_f64();
            Want::Close(if v >= 0.0 { v } else { alpha * v.exp_m1() })
        }
    }
}

fn run_uop<T: TT>(
    s: &Stream,
    op: UOp,
    dims: &[usize],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
) -> rocm_kernels::Result<()> {
    match op {
        UOp::Unary(o) => ew::unary(s, o, dims, src, dst),
        UOp::Copy => ew::copy_strided(s, dims, src, dst),
        UOp::Affine(m, a) => ew::affine(s, dims, src, dst, m, a),
        UOp::Powf(e) => ew::powf(s, dims, src, dst, e),
        UOp::Elu(a) => ew::elu(s, dims, src, dst, a),
    }
}

/// Runs `op` on `view` and checks it; returns the number of elements checked.
fn check_uop<T: TT>(s: &Stream, op: UOp, view: View) -> usize {
    let label = format!("{}_{} on {}", op.name(), T::NAME, view.describe());
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let src = Operand::new(s, view, || gen_unary_input::<T>(&mut rng, op));
    let n = numel(&src.view.dims);
    let mut out = Output::<T>::new(s, n);
    run_uop(s, op, &src.view.dims, src.strided(), &mut out.view())
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got = out.read(&ctx);
    let want: Vec<Want<T>> = src
        .values()
        .into_iter()
        .map(|x| unary_want(op, x))
        .collect();
    compare(&ctx, &got, &want, T::REL, T::ABS);
    n
}

fn unary_ops_for<T: TT>(s: &Stream, pairs: &mut Vec<String>, layouts: &mut usize) {
    let mut ops: Vec<UOp> = UnaryOp::ALL.iter().map(|&o| UOp::Unary(o)).collect();
    ops.push(UOp::Copy);
    for op in ops {
        if let UOp::Unary(o) = op {
            if !o.supports(T::NAME) {
                // No kernel: a typed error, and nothing launched.
                let src =
                    Operand::new(s, make_view(&[3, 4], Kind::Contiguous), || T::from_f64(1.0));
                let mut out = Output::<T>::new(s, 12);
                let e = ew::unary(s, o, &[3, 4], src.strided(), &mut out.view()).unwrap_err();
                assert!(
                    matches!(e, Error::Unsupported { .. }),
                    "{} {}: {e}",
                    o.name(),
                    T::NAME
                );
                assert!(out.untouched(), "{} {}: launched anyway", o.name(), T::NAME);
                continue;
            }
        }
        for dims in shapes() {
            for kind in KINDS {
                check_uop::<T>(s, op, make_view(&dims, kind));
                *layouts += 1;
            }
        }
        pairs.push(format!("{}_{}", op.name(), T::NAME));
    }
}

/// Copies (ucopy, and same-dtype casts) move bits exactly, NaN payloads included.
fn check_bit_exact_copies<T: TT>(s: &Stream, pairs: &mut Vec<String>) {
    for kind in [Kind::Contiguous, Kind::Transposed, Kind::Offset] {
        let view = make_view(&[37, 29], kind);
        let label = format!("bit-exact copy {} on {}", T::NAME, view.describe());
        let seed = seed_for(&label);
        let ctx = format!("{label} (seed {seed:#x})");
        let mut rng = Lcg::new(seed);
        let src = Operand::new(s, view, || T::from_bits(rng.next_u64()));
        let want: Vec<u64> = src.values().iter().map(|v| v.bits()).collect();
        let mut out = Output::<T>::new(s, want.len());
        ew::copy_strided(s, &[37, 29], src.strided(), &mut out.view())
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let got: Vec<u64> = out.read(&ctx).iter().map(|v| v.bits()).collect();
        assert!(got == want, "{ctx}: ucopy changed bits");
        let mut out = Output::<T>::new(s, want.len());
        ew::cast::<T, T>(s, &[37, 29], src.strided(), &mut out.view())
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let got: Vec<u64> = out.read(&ctx).iter().map(|v| v.bits()).collect();
        assert!(got == want, "{ctx}: cast to the same dtype changed bits");
    }
    pairs.push(format!("bitcopy_{}", T::NAME));
}

#[test]
#[ignore = "needs a GPU"]
fn unary_all_ops_all_dtypes() {
    let s = stream();
    let (mut pairs, mut layouts) = (Vec::new(), 0);
    unary_ops_for::<u8>(&s, &mut pairs, &mut layouts);
    unary_ops_for::<u32>(&s, &mut pairs, &mut layouts);
    unary_ops_for::<i16>(&s, &mut pairs, &mut layouts);
    unary_ops_for::<i32>(&s, &mut pairs, &mut layouts);
    unary_ops_for::<i64>(&s, &mut pairs, &mut layouts);
    unary_ops_for::<bf16>(&s, &mut pairs, &mut layouts);
    unary_ops_for::<f16>(&s, &mut pairs, &mut layouts);
    unary_ops_for::<f32>(&s, &mut pairs, &mut layouts);
    unary_ops_for::<f64>(&s, &mut pairs, &mut layouts);
    check_bit_exact_copies::<u8>(&s, &mut pairs);
    check_bit_exact_copies::<u32>(&s, &mut pairs);
    check_bit_exact_copies::<i16>(&s, &mut pairs);
    check_bit_exact_copies::<i32>(&s, &mut pairs);
    check_bit_exact_copies::<i64>(&s, &mut pairs);
    check_bit_exact_copies::<bf16>(&s, &mut pairs);
    check_bit_exact_copies::<f16>(&s, &mut pairs);
    check_bit_exact_copies::<f32>(&s, &mut pairs);
    check_bit_exact_copies::<f64>(&s, &mut pairs);
    println!(
        "unary: {} (op, dtype) pairs over {layouts} layouts: {}",
        pairs.len(),
        pairs.join(" ")
    );
}

fn param_ops_for<T: TT>(s: &Stream, pairs: &mut Vec<String>, layouts: &mut usize) {
    let mut ops = vec![
        UOp::Affine(1.5, -0.25),
        UOp::Affine(-2.0, 7.0),
        UOp::Affine(3.0, 0.0),
    ];
    if T::IS_FLOAT {
        ops.extend([
            UOp::Powf(2.5),
            UOp::Powf(-1.25),
            UOp::Powf(3.0),
            UOp::Elu(1.0),
            UOp::Elu(0.5),
        ]);
    } else {
        // No integer powf/elu: typed errors.
        let src = Operand::new(s, make_view(&[5], Kind::Contiguous), || T::from_f64(1.0));
        let mut out = Output::<T>::new(s, 5);
        for op in [UOp::Powf(2.0), UOp::Elu(1.0)] {
            let e = run_uop(s, op, &[5], src.strided(), &mut out.view()).unwrap_err();
            assert!(matches!(e, Error::Unsupported { .. }), "{}: {e}", T::NAME);
        }
        assert!(out.untouched());
    }
    for op in ops {
        for dims in shapes() {
            for kind in KINDS {
                check_uop::<T>(s, op, make_view(&dims, kind));
                *layouts += 1;
            }
        }
        pairs.push(format!("{}_{}", op.name(), T::NAME));
    }
}

#[test]
#[ignore = "needs a GPU"]
fn affine_powf_elu_all_dtypes() {
    let s = stream();
    let (mut pairs, mut layouts) = (Vec::new(), 0);
    param_ops_for::<u8>(&s, &mut pairs, &mut layouts);
    param_ops_for::<u32>(&s, &mut pairs, &mut layouts);
    param_ops_for::<i16>(&s, &mut pairs, &mut layouts);
    param_ops_for::<i32>(&s, &mut pairs, &mut layouts);
    param_ops_for::<i64>(&s, &mut pairs, &mut layouts);
    param_ops_for::<bf16>(&s, &mut pairs, &mut layouts);
    param_ops_for::<f16>(&s, &mut pairs, &mut layouts);
    param_ops_for::<f32>(&s, &mut pairs, &mut layouts);
    param_ops_for::<f64>(&s, &mut pairs, &mut layouts);
    println!(
        "affine/powf/elu: {} (op, dtype) pairs over {layouts} layouts: {}",
        pairs.len(),
        pairs.join(" ")
    );
}

// ------------------------------------------------------------------------------------------
// Binary family (binary ops and comparisons)
// ------------------------------------------------------------------------------------------

/// Layout kinds of (lhs, rhs) for the k-th case: every kind on each side, paired differently.
fn kind_pair(k: usize) -> (Kind, Kind) {
    (KINDS[k % KINDS.len()], KINDS[(k + 3) % KINDS.len()])
}

fn gen_binary_input<T: TT>(rng: &mut Lcg, op: BinaryOp, is_rhs: bool) -> T {
    if T::IS_FLOAT {
        if rng.below(50) == 0 {
            return T::from_f64(f64::NAN);
        }
        if op == BinaryOp::Div && is_rhs {
            let v = rng.uniform(0.1, 10.0);
            return T::from_f64(if rng.below(2) == 0 { -v } else { v });
        }
        T::from_f64(rng.uniform(-10.0, 10.0))
    } else {
        gen_int(rng)
    }
}

fn binary_want<T: TT>(op: BinaryOp, a: T, b: T) -> Want<T> {
    let pick = |lhs_if: bool| Want::Exact(if lhs_if { a } else { b });
    if T::IS_FLOAT {
        let (x, y) = (a.to_f64(), b.to_f64());
        match op {
            BinaryOp::Add => Want::Close(x + y),
            BinaryOp::Sub => Want::Close(x - y),
            BinaryOp::Mul => Want::Close(x * y),
            BinaryOp::Div => Want::Close(x / y),
            // Candle: minimum = if a > b { b } else { a }; maximum = if a < b { b } else { a }.
            BinaryOp::Minimum => pick(x.partial_cmp(&y) != Some(std::cmp::Ordering::Greater)),
            BinaryOp::Maximum => pick(x.partial_cmp(&y) != Some(std::cmp::Ordering::Less)),
        }
    } else {
        let (x, y) = (a.to_i128(), b.to_i128());
        match op {
            BinaryOp::Add => want_int(x + y),
            BinaryOp::Sub => want_int(x - y),
            BinaryOp::Mul => want_int(x * y),
            // Defined by the kernels: x / 0 == 0, MIN / -1 wraps to MIN.
            BinaryOp::Div => want_int(if y == 0 { 0 } else { x / y }),
            BinaryOp::Minimum => pick(x <= y),
            BinaryOp::Maximum => pick(x >= y),
        }
    }
}

fn check_binary<T: TT>(s: &Stream, op: BinaryOp, dims: &[usize], k: usize) {
    let (lk, rk) = kind_pair(k);
    let (lv, rv) = (make_view(dims, lk), make_view(dims, rk));
    let label = format!(
        "b{}_{} lhs {} rhs {}",
        op.name(),
        T::NAME,
        lv.describe(),
        rv.describe()
    );
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let lhs = Operand::new(s, lv, || gen_binary_input::<T>(&mut rng, op, false));
    let rhs = Operand::new(s, rv, || gen_binary_input::<T>(&mut rng, op, true));
    let mut out = Output::<T>::new(s, numel(dims));
    ew::binary(s, op, dims, lhs.strided(), rhs.strided(), &mut out.view())
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got = out.read(&ctx);
    let want: Vec<Want<T>> = lhs
        .values()
        .into_iter()
        .zip(rhs.values())
        .map(|(a, b)| binary_want(op, a, b))
        .collect();
    compare(&ctx, &got, &want, T::REL, T::ABS);
}

fn binary_for<T: TT>(s: &Stream, pairs: &mut Vec<String>, layouts: &mut usize) {
    for op in BinaryOp::ALL {
        for dims in shapes() {
            for k in 0..KINDS.len() {
                check_binary::<T>(s, op, &dims, k);
                *layouts += 1;
            }
        }
        pairs.push(format!("b{}_{}", op.name(), T::NAME));
    }
}

#[test]
#[ignore = "needs a GPU"]
fn binary_all_ops_all_dtypes() {
    let s = stream();
    let (mut pairs, mut layouts) = (Vec::new(), 0);
    binary_for::<u8>(&s, &mut pairs, &mut layouts);
    binary_for::<u32>(&s, &mut pairs, &mut layouts);
    binary_for::<i16>(&s, &mut pairs, &mut layouts);
    binary_for::<i32>(&s, &mut pairs, &mut layouts);
    binary_for::<i64>(&s, &mut pairs, &mut layouts);
    binary_for::<bf16>(&s, &mut pairs, &mut layouts);
    binary_for::<f16>(&s, &mut pairs, &mut layouts);
    binary_for::<f32>(&s, &mut pairs, &mut layouts);
    binary_for::<f64>(&s, &mut pairs, &mut layouts);
    println!(
        "binary: {} (op, dtype) pairs over {layouts} layout pairs: {}",
        pairs.len(),
        pairs.join(" ")
    );
}

/// Comparison inputs: often equal, sometimes NaN or a signed zero (floats) or extreme (ints).
fn gen_cmp_input<T: TT>(rng: &mut Lcg) -> T {
    if T::IS_FLOAT {
        const SMALL: [f64; 8] = [-2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0];
        match rng.below(20) {
            0 => T::from_f64(f64::NAN),
            1..=10 => T::from_f64(SMALL[rng.below(8) as usize]),
            _ => T::from_f64(rng.uniform(-4.0, 4.0)),
        }
    } else if rng.below(2) == 0 {
        T::from_i128(rng.below(7) as i128 - 3)
    } else {
        gen_int(rng)
    }
}

fn cmp_ref<T: TT>(op: CmpOp, a: T, b: T) -> bool {
    if T::IS_FLOAT {
        let (x, y) = (a.to_f64(), b.to_f64());
        match op {
            CmpOp::Eq => x == y,
            CmpOp::Ne => x != y,
            CmpOp::Lt => x < y,
            CmpOp::Le => x <= y,
            CmpOp::Gt => x > y,
            CmpOp::Ge => x >= y,
        }
    } else {
        let (x, y) = (a.to_i128(), b.to_i128());
        match op {
            CmpOp::Eq => x == y,
            CmpOp::Ne => x != y,
            CmpOp::Lt => x < y,
            CmpOp::Le => x <= y,
            CmpOp::Gt => x > y,
            CmpOp::Ge => x >= y,
        }
    }
}

fn cmp_for<T: TT>(s: &Stream, pairs: &mut Vec<String>, layouts: &mut usize) {
    for op in CmpOp::ALL {
        for dims in shapes() {
            for k in 0..KINDS.len() {
                let (lk, rk) = kind_pair(k);
                let (lv, rv) = (make_view(&dims, lk), make_view(&dims, rk));
                let label = format!(
                    "{}_{} lhs {} rhs {}",
                    op.name(),
                    T::NAME,
                    lv.describe(),
                    rv.describe()
                );
                let seed = seed_for(&label);
                let ctx = format!("{label} (seed {seed:#x})");
                let mut rng = Lcg::new(seed);
                let lhs = Operand::new(s, lv, || gen_cmp_input::<T>(&mut rng));
                let rhs = Operand::new(s, rv, || gen_cmp_input::<T>(&mut rng));
                let mut out = Output::<u8>::new(s, numel(&dims));
                ew::cmp(s, op, &dims, lhs.strided(), rhs.strided(), &mut out.view())
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
                let got = out.read(&ctx);
                let want: Vec<Want<u8>> = lhs
                    .values()
                    .into_iter()
                    .zip(rhs.values())
                    .map(|(a, b)| Want::Exact(cmp_ref(op, a, b) as u8))
                    .collect();
                compare(&ctx, &got, &want, 0.0, 0.0);
                *layouts += 1;
            }
        }
        pairs.push(format!("{}_{}", op.name(), T::NAME));
    }
}

#[test]
#[ignore = "needs a GPU"]
fn cmp_all_ops_all_dtypes() {
    let s = stream();
    let (mut pairs, mut layouts) = (Vec::new(), 0);
    cmp_for::<u8>(&s, &mut pairs, &mut layouts);
    cmp_for::<u32>(&s, &mut pairs, &mut layouts);
    cmp_for::<i16>(&s, &mut pairs, &mut layouts);
    cmp_for::<i32>(&s, &mut pairs, &mut layouts);
    cmp_for::<i64>(&s, &mut pairs, &mut layouts);
    cmp_for::<bf16>(&s, &mut pairs, &mut layouts);
    cmp_for::<f16>(&s, &mut pairs, &mut layouts);
    cmp_for::<f32>(&s, &mut pairs, &mut layouts);
    cmp_for::<f64>(&s, &mut pairs, &mut layouts);
    println!(
        "cmp: {} (op, dtype) pairs over {layouts} layout pairs: {}",
        pairs.len(),
        pairs.join(" ")
    );
}

// ------------------------------------------------------------------------------------------
// Casts
// ------------------------------------------------------------------------------------------

/// Cast inputs: special values around every type's limits and rounding boundaries, then random
/// ones (floats: log-uniform magnitudes from 1e-10 to 1e20; integers: as gen_int).
fn gen_cast_input<S: TT>(rng: &mut Lcg, i: usize) -> S {
    const FLOAT_SPECIALS: [f64; 40] = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        0.5,
        -0.5,
        0.9999,
        -0.9999,
        1.5,
        2.5,
        -2.5,
        -1.0,
        127.5,
        -128.7,
        255.5,
        256.0,
        300.0,
        -129.0,
        32767.5,
        32768.0,
        -32768.9,
        -32769.0,
        65504.0,
        65519.0,
        65520.0,
        1e10,
        -1e10,
        2147483647.0,
        2147483648.0,
        -2147483649.0,
        4294967295.0,
        4294967296.0,
        9.2e18,
        9.3e18,
        -9.3e18,
        3.0e38,
        3.4e38,
        1e-8,
        6e-8,
    ];
    const INT_SPECIALS: [i128; 20] = [
        0,
        1,
        -1,
        127,
        128,
        255,
        256,
        -129,
        32767,
        32768,
        65535,
        65536,
        16_777_217,
        -16_777_217,
        2_147_483_647,
        2_147_483_648,
        4_294_967_295,
        4_294_967_296,
        i64::MAX as i128,
        i64::MIN as i128,
    ];
    if S::IS_FLOAT {
        if i < FLOAT_SPECIALS.len() {
            return S::from_f64(FLOAT_SPECIALS[i]);
        }
        let mag = 10f64.powf(rng.uniform(-10.0, 20.0));
        // Half of them small enough to hit every integer type's range.
        let mag = if rng.below(2) == 0 {
            mag
        } else {
            mag % 70000.0
        };
        S::from_f64(if rng.below(2) == 0 { -mag } else { mag })
    } else if i < INT_SPECIALS.len() {
        S::from_i128(INT_SPECIALS[i])
    } else {
        gen_int(rng)
    }
}

/// Candle's CPU casts: integer -> integer wraps; integer -> float through f32 (f64 directly);
/// float -> integer saturates (NaN -> 0); float -> float rounds to nearest even, once.
fn cast_ref<S: TT, D: TT>(x: S) -> D {
    if !S::IS_FLOAT {
        let v = x.to_i128();
        if !D::IS_FLOAT {
            D::from_i128(v)
        } else if D::NAME == "f64" {
            D::from_f64(v as f64)
        } else {
            D::from_f64((v as f32) as f64)
        }
    } else {
        D::from_f64(x.to_f64())
    }
}

fn cast_pair<S: TT, D: TT>(s: &Stream, pairs: &mut Vec<String>, layouts: &mut usize) {
    let mut shapes = shapes();
    shapes.push(vec![3, 41]); // room for every special value
    for dims in shapes {
        for kind in KINDS {
            let view = make_view(&dims, kind);
            let label = format!("cast_{}_{} on {}", S::NAME, D::NAME, view.describe());
            let seed = seed_for(&label);
            let ctx = format!("{label} (seed {seed:#x})");
            let mut rng = Lcg::new(seed);
            // Specials at the view's first positions (in storage order for contiguous views).
            let positions = view.positions();
            let mut host: Vec<S> = (0..view.buf_len)
                .map(|_| gen_cast_input(&mut rng, usize::MAX))
                .collect();
            for (i, &p) in positions.iter().enumerate() {
                host[p] = gen_cast_input(&mut rng, i);
            }
            let buf = s.alloc_from_host(&host).expect("upload");
            let src = Strided {
                data: buf.slice(view.offset..).expect("view"),
                strides: &view.strides,
            };
            let mut out = Output::<D>::new(s, positions.len());
            ew::cast::<S, D>(s, &dims, src, &mut out.view())
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let got = out.read(&ctx);
            let want: Vec<Want<D>> = positions
                .iter()
                .map(|&p| Want::Exact(cast_ref::<S, D>(host[p])))
                .collect();
            compare(&ctx, &got, &want, 0.0, 0.0);
            *layouts += 1;
        }
    }
    pairs.push(format!("{}->{}", S::NAME, D::NAME));
}

fn cast_from<S: TT>(s: &Stream, pairs: &mut Vec<String>, layouts: &mut usize) {
    cast_pair::<S, u8>(s, pairs, layouts);
    cast_pair::<S, u32>(s, pairs, layouts);
    cast_pair::<S, i16>(s, pairs, layouts);
    cast_pair::<S, i32>(s, pairs, layouts);
    cast_pair::<S, i64>(s, pairs, layouts);
    cast_pair::<S, bf16>(s, pairs, layouts);
    cast_pair::<S, f16>(s, pairs, layouts);
    cast_pair::<S, f32>(s, pairs, layouts);
    cast_pair::<S, f64>(s, pairs, layouts);
}

#[test]
#[ignore = "needs a GPU"]
fn cast_all_dtype_pairs() {
    let s = stream();
    let (mut pairs, mut layouts) = (Vec::new(), 0);
    cast_from::<u8>(&s, &mut pairs, &mut layouts);
    cast_from::<u32>(&s, &mut pairs, &mut layouts);
    cast_from::<i16>(&s, &mut pairs, &mut layouts);
    cast_from::<i32>(&s, &mut pairs, &mut layouts);
    cast_from::<i64>(&s, &mut pairs, &mut layouts);
    cast_from::<bf16>(&s, &mut pairs, &mut layouts);
    cast_from::<f16>(&s, &mut pairs, &mut layouts);
    cast_from::<f32>(&s, &mut pairs, &mut layouts);
    cast_from::<f64>(&s, &mut pairs, &mut layouts);
    println!(
        "cast: {} (src, dst) dtype pairs (identity = copy) over {layouts} layouts: {}",
        pairs.len(),
        pairs.join(" ")
    );
}

// ------------------------------------------------------------------------------------------
// where
// ------------------------------------------------------------------------------------------

/// Conditions: half zeros; non-zero ones include values whose low byte is zero.
fn gen_cond<C: TT>(rng: &mut Lcg) -> C {
    match rng.below(8) {
        0..=3 => C::from_i128(0),
        4 => C::from_i128(256),
        5 => C::from_i128(65536),
        _ => {
            let c = gen_int::<C>(rng);
            if c.to_i128() == 0 {
                C::from_i128(1)
            } else {
                c
            }
        }
    }
}

fn where_pair<C: TT, T: TT>(s: &Stream, pairs: &mut Vec<String>, layouts: &mut usize) {
    for dims in shapes() {
        for k in 0..KINDS.len() {
            let views = [
                make_view(&dims, KINDS[k]),
                make_view(&dims, KINDS[(k + 2) % KINDS.len()]),
                make_view(&dims, KINDS[(k + 5) % KINDS.len()]),
            ];
            let label = format!(
                "where_{}_{} cond {} t {} f {}",
                C::NAME,
                T::NAME,
                views[0].describe(),
                views[1].describe(),
                views[2].describe()
            );
            let seed = seed_for(&label);
            let ctx = format!("{label} (seed {seed:#x})");
            let mut rng = Lcg::new(seed);
            let [cv, tv, fv] = views;
            let cond = Operand::new(s, cv, || gen_cond::<C>(&mut rng));
            let gen_t = |rng: &mut Lcg| {
                if T::IS_FLOAT {
                    T::from_f64(rng.uniform(-100.0, 100.0))
                } else {
                    gen_int::<T>(rng)
                }
            };
            let on_true = Operand::new(s, tv, || gen_t(&mut rng));
            let on_false = Operand::new(s, fv, || gen_t(&mut rng));
            let mut out = Output::<T>::new(s, numel(&dims));
            ew::where_cond(
                s,
                &dims,
                cond.strided(),
                on_true.strided(),
                on_false.strided(),
                &mut out.view(),
            )
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let got = out.read(&ctx);
            let want: Vec<Want<T>> = cond
                .values()
                .into_iter()
                .zip(on_true.values().into_iter().zip(on_false.values()))
                .map(|(c, (t, f))| Want::Exact(if c.to_i128() != 0 { t } else { f }))
                .collect();
            compare(&ctx, &got, &want, 0.0, 0.0);
            *layouts += 1;
        }
    }
    pairs.push(format!("where_{}_{}", C::NAME, T::NAME));
}

fn where_for<C: TT>(s: &Stream, pairs: &mut Vec<String>, layouts: &mut usize) {
    where_pair::<C, u8>(s, pairs, layouts);
    where_pair::<C, u32>(s, pairs, layouts);
    where_pair::<C, i16>(s, pairs, layouts);
    where_pair::<C, i32>(s, pairs, layouts);
    where_pair::<C, i64>(s, pairs, layouts);
    where_pair::<C, bf16>(s, pairs, layouts);
    where_pair::<C, f16>(s, pairs, layouts);
    where_pair::<C, f32>(s, pairs, layouts);
    where_pair::<C, f64>(s, pairs, layouts);
}

#[test]
#[ignore = "needs a GPU"]
fn where_all_cond_and_value_dtypes() {
    let s = stream();
    let (mut pairs, mut layouts) = (Vec::new(), 0);
    where_for::<u8>(&s, &mut pairs, &mut layouts);
    where_for::<u32>(&s, &mut pairs, &mut layouts);
    where_for::<i16>(&s, &mut pairs, &mut layouts);
    where_for::<i32>(&s, &mut pairs, &mut layouts);
    where_for::<i64>(&s, &mut pairs, &mut layouts);
    // Float conditions have no kernel.
    let cond = Operand::new(&s, make_view(&[4], Kind::Contiguous), || 1.0f32);
    let t = Operand::new(&s, make_view(&[4], Kind::Contiguous), || 1.0f32);
    let mut out = Output::<f32>::new(&s, 4);
    let e = ew::where_cond(
        &s,
        &[4],
        cond.strided(),
        t.strided(),
        t.strided(),
        &mut out.view(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(out.untouched());
    println!(
        "where: {} (cond, value) dtype pairs over {layouts} layout triples: {}",
        pairs.len(),
        pairs.join(" ")
    );
}

// ------------------------------------------------------------------------------------------
// fill, const_set, copy2d
// ------------------------------------------------------------------------------------------

fn fills_for<T: TT>(s: &Stream, pairs: &mut Vec<String>, layouts: &mut usize) {
    let value = if T::IS_FLOAT {
        T::from_f64(-3.25)
    } else {
        T::from_i128(T::MAX_I - 1)
    };
    // fill: contiguous, several sizes.
    for n in [0usize, 1, 255, 256, 257, 4099, 100_003] {
        let ctx = format!("fill_{} n {n}", T::NAME);
        let mut out = Output::<T>::new(s, n);
        ew::fill(s, &mut out.view(), value).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let got = out.read(&ctx);
        compare(&ctx, &got, &vec![Want::Exact(value); n], 0.0, 0.0);
        *layouts += 1;
    }
    // const_set: strided destinations; elements outside the view keep their values.
    for dims in shapes() {
        for kind in KINDS {
            let view = make_view(&dims, kind);
            let label = format!("const_set_{} on {}", T::NAME, view.describe());
            let seed = seed_for(&label);
            let ctx = format!("{label} (seed {seed:#x})");
            let mut rng = Lcg::new(seed);
            let host: Vec<T> = (0..view.buf_len)
                .map(|_| gen_int_or_float::<T>(&mut rng))
                .collect();
            let mut buf = s.alloc_from_host(&host).expect("upload");
            let mut dst = buf.slice_mut(view.offset..).expect("view");
            ew::const_set(s, &dims, &view.strides, &mut dst, value)
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let got = buf.to_host_vec().expect("download");
            let mut want: Vec<Want<T>> = host.iter().map(|&v| Want::Exact(v)).collect();
            for p in view.positions() {
                want[p] = Want::Exact(value);
            }
            compare(&ctx, &got, &want, 0.0, 0.0);
            *layouts += 1;
        }
    }
    // copy2d: offset views, padded rows, single rows, empty.
    for (d1, d2, src_s, dst_s, src_off, dst_off) in [
        (5usize, 7usize, 9usize, 11usize, 3usize, 2usize),
        (1, 1000, 1000, 1000, 0, 1),
        (300, 1, 2, 1, 1, 0),
        (64, 64, 64, 64, 0, 0),
        (0, 5, 5, 5, 0, 0),
        (4, 0, 3, 3, 0, 0),
    ] {
        let label = format!(
            "copy2d_{} d1 {d1} d2 {d2} src_s {src_s} dst_s {dst_s} offsets {src_off}/{dst_off}",
            T::NAME
        );
        let seed = seed_for(&label);
        let ctx = format!("{label} (seed {seed:#x})");
        let mut rng = Lcg::new(seed);
        let span = |stride: usize| {
            if d1 == 0 || d2 == 0 {
                0
            } else {
                (d1 - 1) * stride + d2
            }
        };
        let src_host: Vec<T> = (0..src_off + span(src_s) + 2)
            .map(|_| gen_int_or_float::<T>(&mut rng))
            .collect();
        let dst_host: Vec<T> = (0..dst_off + span(dst_s) + 2)
            .map(|_| gen_int_or_float::<T>(&mut rng))
            .collect();
        let src = s.alloc_from_host(&src_host).expect("upload");
        let mut dst = s.alloc_from_host(&dst_host).expect("upload");
        {
            let src_view = src.slice(src_off..).expect("view");
            let mut dst_view = dst.slice_mut(dst_off..).expect("view");
            ew::copy2d(s, &src_view, &mut dst_view, d1, d2, src_s, dst_s)
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        }
        let got = dst.to_host_vec().expect("download");
        let mut want: Vec<Want<T>> = dst_host.iter().map(|&v| Want::Exact(v)).collect();
        for r in 0..d1 {
            for c in 0..d2 {
                want[dst_off + r * dst_s + c] = Want::Exact(src_host[src_off + r * src_s + c]);
            }
        }
        compare(&ctx, &got, &want, 0.0, 0.0);
        *layouts += 1;
    }
    pairs.push(format!("fill/const_set/copy2d_{}", T::NAME));
}

fn gen_int_or_float<T: TT>(rng: &mut Lcg) -> T {
    if T::IS_FLOAT {
        T::from_f64(rng.uniform(-100.0, 100.0))
    } else {
        gen_int(rng)
    }
}

#[test]
#[ignore = "needs a GPU"]
fn fill_const_set_copy2d_all_dtypes() {
    let s = stream();
    let (mut pairs, mut layouts) = (Vec::new(), 0);
    fills_for::<u8>(&s, &mut pairs, &mut layouts);
    fills_for::<u32>(&s, &mut pairs, &mut layouts);
    fills_for::<i16>(&s, &mut pairs, &mut layouts);
    fills_for::<i32>(&s, &mut pairs, &mut layouts);
    fills_for::<i64>(&s, &mut pairs, &mut layouts);
    fills_for::<bf16>(&s, &mut pairs, &mut layouts);
    fills_for::<f16>(&s, &mut pairs, &mut layouts);
    fills_for::<f32>(&s, &mut pairs, &mut layouts);
    fills_for::<f64>(&s, &mut pairs, &mut layouts);
    println!(
        "fill: {} (op, dtype) groups over {layouts} cases: {}",
        pairs.len(),
        pairs.join(" ")
    );
}

// ------------------------------------------------------------------------------------------
// Large sizes
// ------------------------------------------------------------------------------------------

/// 1000003 elements (not a multiple of the block, more than the grid-stride grid covers in one
/// pass), contiguous and transposed, for every family and dtype.
fn large_for<T: TT>(s: &Stream, pairs: &mut Vec<String>) {
    let contiguous = make_view(&[1_000_003], Kind::Contiguous);
    let offset = make_view(&[1_000_003], Kind::Offset);
    let transposed = make_view(&[1001, 999], Kind::Transposed);
    let op = if T::IS_FLOAT {
        UOp::Unary(UnaryOp::Exp)
    } else {
        UOp::Unary(UnaryOp::Abs)
    };
    check_uop::<T>(s, op, contiguous.clone());
    check_uop::<T>(s, UOp::Unary(UnaryOp::Neg).min_for::<T>(), offset.clone());
    check_uop::<T>(s, UOp::Copy, transposed.clone());
    check_uop::<T>(s, UOp::Affine(3.0, 1.0), transposed);
    check_binary::<T>(s, BinaryOp::Add, &[1_000_003], 0);
    check_binary::<T>(s, BinaryOp::Mul, &[1001, 999], 2);
    cast_pair_large::<T, f32>(s, &contiguous);
    cast_pair_large::<f32, T>(s, &offset);
    let n = 1_000_003;
    let mut out = Output::<T>::new(s, n);
    let value = T::from_f64(7.0);
    ew::fill(s, &mut out.view(), value).expect("fill");
    let got = out.read("large fill");
    compare("large fill", &got, &vec![Want::Exact(value); n], 0.0, 0.0);
    pairs.push(T::NAME.to_string());
}

impl UOp {
    /// `self`, or `abs` where the dtype has no kernel for it (unsigned neg).
    fn min_for<T: TT>(self) -> UOp {
        match self {
            UOp::Unary(o) if !o.supports(T::NAME) => UOp::Unary(UnaryOp::Abs),
            op => op,
        }
    }
}

fn cast_pair_large<S: TT, D: TT>(s: &Stream, view: &View) {
    let label = format!("cast_{}_{} on {}", S::NAME, D::NAME, view.describe());
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    let src = Operand::new(s, view.clone(), || {
        gen_cast_input::<S>(&mut rng, usize::MAX)
    });
    let mut out = Output::<D>::new(s, numel(&view.dims));
    ew::cast::<S, D>(s, &view.dims, src.strided(), &mut out.view())
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got = out.read(&ctx);
    let want: Vec<Want<D>> = src
        .values()
        .into_iter()
        .map(|x| Want::Exact(cast_ref::<S, D>(x)))
        .collect();
    compare(&ctx, &got, &want, 0.0, 0.0);
}

#[test]
#[ignore = "needs a GPU"]
fn large_sizes_all_dtypes() {
    let s = stream();
    let mut pairs = Vec::new();
    large_for::<u8>(&s, &mut pairs);
    large_for::<u32>(&s, &mut pairs);
    large_for::<i16>(&s, &mut pairs);
    large_for::<i32>(&s, &mut pairs);
    large_for::<i64>(&s, &mut pairs);
    large_for::<bf16>(&s, &mut pairs);
    large_for::<f16>(&s, &mut pairs);
    large_for::<f32>(&s, &mut pairs);
    large_for::<f64>(&s, &mut pairs);
    println!(
        "large: unary/copy/affine/binary/cast/fill at 1000003 and 1001x999 elements for {}",
        pairs.join(" ")
    );
}

/// More than 2^31 elements: the kernels' 64-bit strided index path (1 and 2 operands).
#[test]
#[ignore = "needs a GPU"]
fn index_math_beyond_2_pow_31() {
    let s = stream();
    let (free, _) = s.device().memory_info().expect("memory info");
    if free < 8 << 30 {
        println!("huge: skipped, only {free} bytes free");
        return;
    }
    let rows = (1usize << 31) / 7 + 100;
    let dims = [rows, 7];
    let n = rows * 7;
    assert!(n > 1 << 31);
    let pattern: Vec<u8> = (0..7).map(|j| 10 + j as u8).collect();
    let row_vals: Vec<u8> = (0..rows).map(|i| (i % 251) as u8).collect();
    let pat = s.alloc_from_host(&pattern).expect("upload");
    let rv = s.alloc_from_host(&row_vals).expect("upload");
    let mut out = s.alloc::<u8>(n).expect("alloc 2 GiB");
    let samples: Vec<usize> = [0usize, 1 << 20, (1 << 31) - 64, 1 << 31, n - 64]
        .into_iter()
        .collect();
    // ucopy: out[i * 7 + j] = pattern[j] (strides [0, 1]).
    ew::copy_strided(
        &s,
        &dims,
        Strided::new(pat.as_slice(), &[0, 1]),
        &mut out.as_mut_slice(),
    )
    .expect("copy");
    for &a in &samples {
        let got = out.slice(a..a + 64).unwrap().to_host_vec().unwrap();
        for (k, g) in got.iter().enumerate() {
            assert_eq!(*g, pattern[(a + k) % 7], "ucopy_u8 at element {}", a + k);
        }
    }
    // badd: out[i * 7 + j] = pattern[j] + row_vals[i] (strides [0, 1] and [1, 0]).
    ew::binary(
        &s,
        BinaryOp::Add,
        &dims,
        Strided::new(pat.as_slice(), &[0, 1]),
        Strided::new(rv.as_slice(), &[1, 0]),
        &mut out.as_mut_slice(),
    )
    .expect("add");
    for &a in &samples {
        let got = out.slice(a..a + 64).unwrap().to_host_vec().unwrap();
        for (k, g) in got.iter().enumerate() {
            let i = a + k;
            let want = pattern[i % 7].wrapping_add(row_vals[i / 7]);
            assert_eq!(*g, want, "badd_u8 at element {i}");
        }
    }
    println!("huge: ucopy_u8 and badd_u8 over {n} elements (64-bit strided index path)");
}

// ------------------------------------------------------------------------------------------
// Errors
// ------------------------------------------------------------------------------------------

fn assert_layout_err(what: &str, r: rocm_kernels::Result<()>) {
    match r {
        Err(Error::Layout { .. }) => {}
        Err(e) => panic!("{what}: expected a layout error, got {e}"),
        Ok(()) => panic!("{what}: expected a layout error, got Ok"),
    }
}

#[test]
#[ignore = "needs a GPU"]
fn invalid_layouts_are_errors_and_launch_nothing() {
    let s = stream();
    let src_host: Vec<f32> = (0..40).map(|i| i as f32).collect();
    let src = s.alloc_from_host(&src_host).unwrap();
    let mut out = Output::<f32>::new(&s, 20);
    let mut checked = 0;
    // Rank mismatch.
    assert_layout_err(
        "rank mismatch",
        ew::unary(
            &s,
            UnaryOp::Exp,
            &[4, 5],
            Strided::new(src.as_slice(), &[1]),
            &mut out.view(),
        ),
    );
    checked += 1;
    // A view too short for its strides (contiguous, transposed, broadcast).
    let short = src.slice(..19).unwrap();
    for strides in [[5usize, 1], [1, 4], [0, 1]] {
        let r = if strides == [0, 1] {
            let tiny = src.slice(..4).unwrap();
            ew::unary(
                &s,
                UnaryOp::Neg,
                &[4, 5],
                Strided::new(tiny, &strides),
                &mut out.view(),
            )
        } else {
            ew::unary(
                &s,
                UnaryOp::Neg,
                &[4, 5],
                Strided::new(short, &strides),
                &mut out.view(),
            )
        };
        assert_layout_err(&format!("short view, strides {strides:?}"), r);
        checked += 1;
    }
    // A start offset that leaves too little.
    let late = src.slice(25..).unwrap();
    assert_layout_err(
        "offset view too short",
        ew::copy_strided(&s, &[4, 5], Strided::new(late, &[5, 1]), &mut out.view()),
    );
    checked += 1;
    // Destination of the wrong length.
    {
        let mut small = s.alloc::<f32>(19).unwrap();
        assert_layout_err(
            "dst too short",
            ew::unary(
                &s,
                UnaryOp::Exp,
                &[4, 5],
                Strided::new(src.as_slice(), &[5, 1]),
                &mut small.as_mut_slice(),
            ),
        );
        checked += 1;
    }
    // Binary / cmp / where / cast operands.
    assert_layout_err(
        "binary rhs rank",
        ew::binary(
            &s,
            BinaryOp::Add,
            &[4, 5],
            Strided::new(src.as_slice(), &[5, 1]),
            Strided::new(src.as_slice(), &[5, 1, 1]),
            &mut out.view(),
        ),
    );
    assert_layout_err(
        "binary broadcast too short",
        ew::binary(
            &s,
            BinaryOp::Mul,
            &[4, 5],
            Strided::new(src.as_slice(), &[5, 1]),
            Strided::new(src.slice(..4).unwrap(), &[0, 1]),
            &mut out.view(),
        ),
    );
    {
        let mut cmp_out = Output::<u8>::new(&s, 20);
        assert_layout_err(
            "cmp lhs too short",
            ew::cmp(
                &s,
                CmpOp::Lt,
                &[4, 5],
                Strided::new(short, &[5, 1]),
                Strided::new(src.as_slice(), &[5, 1]),
                &mut cmp_out.view(),
            ),
        );
        assert!(cmp_out.untouched(), "cmp launched after a layout error");
        let cond = s.alloc_from_host(&[1u8; 19]).unwrap();
        let mut where_out = Output::<f32>::new(&s, 20);
        assert_layout_err(
            "where cond too short",
            ew::where_cond(
                &s,
                &[4, 5],
                Strided::new(cond.as_slice(), &[5, 1]),
                Strided::new(src.as_slice(), &[5, 1]),
                Strided::new(src.as_slice(), &[5, 1]),
                &mut where_out.view(),
            ),
        );
        assert!(where_out.untouched(), "where launched after a layout error");
        let mut cast_out = Output::<f16>::new(&s, 20);
        assert_layout_err(
            "cast src too short",
            ew::cast::<f32, f16>(
                &s,
                &[4, 5],
                Strided::new(short, &[5, 1]),
                &mut cast_out.view(),
            ),
        );
        assert!(cast_out.untouched(), "cast launched after a layout error");
        checked += 5;
    }
    // const_set and copy2d bounds.
    {
        let mut buf = Output::<f32>::new(&s, 13);
        assert_layout_err(
            "const_set past the end",
            ew::const_set(&s, &[3, 4], &[5, 1], &mut buf.view(), 1.0),
        );
        assert_layout_err(
            "const_set rank",
            ew::const_set(&s, &[3, 4], &[5], &mut buf.view(), 1.0),
        );
        assert!(buf.untouched(), "const_set launched after a layout error");
        let mut dst = Output::<f32>::new(&s, 20);
        assert_layout_err(
            "copy2d src too short",
            ew::copy2d(&s, &short, &mut dst.view(), 4, 5, 5, 5),
        );
        assert_layout_err(
            "copy2d dst too short",
            ew::copy2d(&s, &src.as_slice(), &mut dst.view(), 3, 5, 5, 8),
        );
        assert_layout_err(
            "copy2d overlapping dst rows",
            ew::copy2d(&s, &src.as_slice(), &mut dst.view(), 4, 5, 5, 4),
        );
        assert!(dst.untouched(), "copy2d launched after a layout error");
        checked += 5;
    }
    // Shapes whose element count overflows.
    assert_layout_err(
        "numel overflow",
        ew::unary(
            &s,
            UnaryOp::Exp,
            &[usize::MAX, 2],
            Strided::new(src.as_slice(), &[0, 0]),
            &mut out.view(),
        ),
    );
    checked += 1;
    assert!(out.untouched(), "a kernel ran despite a layout error");
    // Empty shapes: Ok without a launch (but the destination length must still match).
    {
        let mut empty = Output::<f32>::new(&s, 0);
        ew::unary(
            &s,
            UnaryOp::Exp,
            &[0, 3],
            Strided::new(src.slice(..0).unwrap(), &[3, 1]),
            &mut empty.view(),
        )
        .expect("empty unary");
        ew::binary(
            &s,
            BinaryOp::Add,
            &[5, 0],
            Strided::new(src.as_slice(), &[0, 1]),
            Strided::new(src.as_slice(), &[1, 1]),
            &mut empty.view(),
        )
        .expect("empty binary");
        ew::fill(&s, &mut empty.view(), 1.0).expect("empty fill");
        ew::const_set(&s, &[2, 0], &[0, 1], &mut empty.view(), 1.0).expect("empty const_set");
        ew::copy2d(&s, &src.as_slice(), &mut empty.view(), 0, 5, 5, 5).expect("empty copy2d");
        assert!(empty.untouched(), "a kernel ran for an empty shape");
        assert_layout_err(
            "empty shape, non-empty dst",
            ew::unary(
                &s,
                UnaryOp::Exp,
                &[0, 3],
                Strided::new(src.as_slice(), &[3, 1]),
                &mut out.view(),
            ),
        );
        checked += 6;
    }
    // Unsupported (op, dtype) pairs.
    {
        let ints = s.alloc_from_host(&[1i32; 20]).unwrap();
        let mut int_out = Output::<i32>::new(&s, 20);
        for op in [
            UnaryOp::Exp,
            UnaryOp::Sqrt,
            UnaryOp::Sigmoid,
            UnaryOp::Recip,
        ] {
            let e = ew::unary(
                &s,
                op,
                &[20],
                Strided::new(ints.as_slice(), &[1]),
                &mut int_out.view(),
            )
            .unwrap_err();
            assert!(matches!(e, Error::Unsupported { .. }), "{op:?} i32: {e}");
        }
        let e = ew::powf(
            &s,
            &[20],
            Strided::new(ints.as_slice(), &[1]),
            &mut int_out.view(),
            2.0,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "powf i32: {e}");
        assert!(int_out.untouched());
        let bytes = s.alloc_from_host(&[1u8; 20]).unwrap();
        let mut byte_out = Output::<u8>::new(&s, 20);
        let e = ew::unary(
            &s,
            UnaryOp::Neg,
            &[20],
            Strided::new(bytes.as_slice(), &[1]),
            &mut byte_out.view(),
        )
        .unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "neg u8: {e}");
        let e = ew::elu(
            &s,
            &[20],
            Strided::new(bytes.as_slice(), &[1]),
            &mut byte_out.view(),
            1.0,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "elu u8: {e}");
        assert!(byte_out.untouched());
        checked += 7;
    }
    println!("errors: {checked} invalid calls rejected before any launch");
}

/// A weight row stride so large that `(n - 1) * ldw + k` wraps around usize to a small extent
/// is a typed error, not a launch that reads rows at the real stride (far outside the weight).
#[test]
#[ignore = "needs a GPU"]
fn gemv_rejects_a_row_stride_whose_extent_overflows() {
    let s = stream();
    let (n, k) = (4usize, 32usize);
    // 3 * ldw wraps to 2: the wrapped extent would be 2 + 32 = 34 elements.
    let ldw = usize::MAX / 3 + 1;
    assert_eq!(3usize.wrapping_mul(ldw), 2);
    let w = s.alloc_from_host(&[1f32; 34]).unwrap();
    let x = s.alloc_from_host(&[1f32; 32]).unwrap();
    let mut y = s.alloc_from_host(&[7f32; 4]).unwrap();
    let e = rocm_kernels::gemv::gemv(
        &s,
        (1, n, k),
        &x.as_slice(),
        (&w.as_slice(), ldw),
        &mut y.as_mut_slice(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Layout { .. }), "{e}");
    assert_eq!(y.to_host_vec().unwrap(), vec![7f32; n], "y was written");
}

// Further kernel families, one file each (they use this file's helpers through `super::*`).
#[path = "families/conv.rs"]
mod conv;
#[path = "families/f8.rs"]
mod f8;
#[path = "families/indexing.rs"]
mod indexing;
#[path = "families/nn.rs"]
mod nn;
#[path = "families/pool.rs"]
mod pool;
#[path = "families/random.rs"]
mod random;
#[path = "families/reduce.rs"]
mod reduce;
#[path = "families/sort.rs"]
mod sort;
