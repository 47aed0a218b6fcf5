//! Conformance suite: every op `RocmStorage` implements, run on the GPU and on candle's
//! `CpuStorage` (the oracle) through the `BackendStorage` trait, with identical inputs and
//! layouts, compared per dtype (integers exact; f32 1e-5, f16 1e-3, bf16 1e-2, f64 1e-12
//! relative).
//!
//! Where the oracle is known to be wrong or to refuse (DESIGN.md, "The oracle's own quirks"), the
//! result is judged against an independent reference instead (f64 math, or exact integer math),
//! or the pair is expected to return a typed `RocmError`. The suite keeps a matrix of
//! (op, dtype) -> outcome, prints it at the end and fails if a pair expected to pass does not.
//!
//! Reductions (`reduce sum/min/max/argmin/argmax`) are compared with the CPU oracle too; sums
//! with a tolerance that grows with the reduced length (see `compare_sum`), min/max exactly.
//! The fused ops of `RocmStorage` (`softmax_last_dim`, `rms_norm`, `layer_norm`, `rope`,
//! `rope_i`, `rope_thd`, and `rope_kv` / `rope_i_kv`, the rotation fused with a KV cache
//! append) have no CPU storage op: their oracle is the published definition
//! evaluated in f64 on the CPU (checked against candle-core tensor ops in a tier-1 test), and
//! `ok` in those rows means a match with it.
//!
//! GPU tests are `#[ignore = "needs a GPU"]`; run them with `--include-ignored`. Inputs are drawn
//! from a fixed seed (`CANDLE_ROCM_SEED` overrides it), printed with every failure.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::cpu_backend::CpuDevice;
use candle_core::op::{self, BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use candle_core::{CpuStorage, DType, Layout, Shape, WithDType};
use candle_rocm::layout::Copy2dSpec;
use candle_rocm::{RocmDevice, RocmError, RocmStorage};
use half::{bf16, f16};
use rocm_kernels::nn::RopeKind;

// ------------------------------------------------------------------------------------------
// Random numbers (SplitMix64: tiny, deterministic, good enough for test data)
// ------------------------------------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        lo + (hi - lo) * u
    }

    /// Uniform integer in `[lo, hi]`.
    fn int(&mut self, lo: i128, hi: i128) -> i128 {
        let span = (hi - lo + 1) as u128;
        lo + ((self.next_u64() as u128 * 0x1_0000_0001 + self.next_u64() as u128) % span) as i128
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[(self.next_u64() % xs.len() as u64) as usize]
    }
}

/// The base seed: `CANDLE_ROCM_SEED` or a fixed default.
fn base_seed() -> u64 {
    std::env::var("CANDLE_ROCM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_CAFE)
}

/// A seed per (op, dtype, case): independent of the order cases run in.
fn case_seed(base: u64, parts: &[&str]) -> u64 {
    let mut h = base ^ 0xCBF2_9CE4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0xFF]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01B3);
        }
    }
    h
}

// ------------------------------------------------------------------------------------------
// Dtypes, values, storages
// ------------------------------------------------------------------------------------------

const KERNEL_DTYPES: [DType; 9] = [
    DType::U8,
    DType::U32,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::BF16,
    DType::F16,
    DType::F32,
    DType::F64,
];

/// Every dtype with device storage (the kernel dtypes and f8e4m3).
fn storage_dtypes() -> Vec<DType> {
    let mut v = KERNEL_DTYPES.to_vec();
    v.push(DType::F8E4M3);
    v
}

fn is_unsigned(dtype: DType) -> bool {
    matches!(dtype, DType::U8 | DType::U32)
}

/// What values to draw.
#[derive(Clone, Copy, Debug)]
enum Dist {
    /// Floats in [-4, 4); integers small (|x| <= 50, unsigned 0..=50).
    General,
    /// Floats in [0.1, 10); integers 1..=50.
    Positive,
    /// |x| in [0.25, 4) with either sign; integers 1..=20 (either sign when signed).
    NonZero,
    /// Floats in [-3, 3); integers |x| <= 15 (products stay in range for every integer type).
    Small,
    /// Unsigned 100..=200 (left operand of an unsigned subtraction); otherwise as `General`.
    High,
    /// Unsigned 0..=99 (right operand of an unsigned subtraction); otherwise as `General`.
    Low,
    /// A few values, many equal (comparisons).
    FewValues,
    /// Predicates: 0 and a few non-zero values.
    Predicate,
    /// Casts: full integer ranges; floats with fractions, large magnitudes, ±inf, NaN, -0.
    CastMix,
    /// f8e4m3: every byte equally likely (NaN, ±0, subnormals, ±448 included); other dtypes
    /// as `CastMix`.
    AllBytes,
}

fn storage_from_f64(dtype: DType, v: &[f64]) -> CpuStorage {
    fn conv<T: WithDType>(v: &[f64]) -> CpuStorage {
        T::to_cpu_storage_owned(v.iter().map(|&x| T::from_f64(x)).collect())
    }
    match dtype {
        DType::U8 => conv::<u8>(v),
        DType::U32 => conv::<u32>(v),
        DType::I16 => conv::<i16>(v),
        DType::I32 => conv::<i32>(v),
        DType::I64 => conv::<i64>(v),
        DType::BF16 => conv::<bf16>(v),
        DType::F16 => conv::<f16>(v),
        DType::F32 => conv::<f32>(v),
        DType::F64 => conv::<f64>(v),
        DType::F8E4M3 => {
            CpuStorage::F8E4M3(v.iter().map(|&x| float8::F8E4M3::from_f64(x)).collect())
        }
        other => panic!("no test storage for {other:?}"),
    }
}

/// Integer storage; values wrap into the type like Rust's `as`.
fn storage_from_i128(dtype: DType, v: &[i128]) -> CpuStorage {
    match dtype {
        DType::U8 => CpuStorage::U8(v.iter().map(|&x| x as u8).collect()),
        DType::U32 => CpuStorage::U32(v.iter().map(|&x| x as u32).collect()),
        DType::I16 => CpuStorage::I16(v.iter().map(|&x| x as i16).collect()),
        DType::I32 => CpuStorage::I32(v.iter().map(|&x| x as i32).collect()),
        DType::I64 => CpuStorage::I64(v.iter().map(|&x| x as i64).collect()),
        other => panic!("{other:?} is not an integer dtype"),
    }
}

fn values_f64(s: &CpuStorage) -> Vec<f64> {
    match s {
        CpuStorage::U8(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::U32(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::I16(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::I32(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::I64(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::F32(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::F64(v) => v.clone(),
        CpuStorage::F8E4M3(v) => v.iter().map(|x| x.to_f64()).collect(),
        other => panic!("no values for {:?}", other.dtype()),
    }
}

fn values_i128(s: &CpuStorage) -> Option<Vec<i128>> {
    Some(match s {
        CpuStorage::U8(v) => v.iter().map(|&x| x as i128).collect(),
        CpuStorage::U32(v) => v.iter().map(|&x| x as i128).collect(),
        CpuStorage::I16(v) => v.iter().map(|&x| x as i128).collect(),
        CpuStorage::I32(v) => v.iter().map(|&x| x as i128).collect(),
        CpuStorage::I64(v) => v.iter().map(|&x| x as i128).collect(),
        _ => return None,
    })
}

fn gen(dtype: DType, n: usize, dist: Dist, rng: &mut Rng) -> CpuStorage {
    if let Dist::AllBytes = dist {
        if dtype == DType::F8E4M3 {
            let v = (0..n).map(|_| float8::F8E4M3::from_bits(rng.next_u64() as u8));
            return CpuStorage::F8E4M3(v.collect());
        }
        return gen(dtype, n, Dist::CastMix, rng);
    }
    if dtype.is_int() {
        let unsigned = is_unsigned(dtype);
        let v: Vec<i128> = (0..n)
            .map(|_| match dist {
                Dist::General | Dist::High | Dist::Low if !unsigned => rng.int(-50, 50),
                Dist::General => rng.int(0, 50),
                Dist::High => rng.int(100, 200),
                Dist::Low => rng.int(0, 99),
                Dist::Positive => rng.int(1, 50),
                Dist::NonZero if unsigned => rng.int(1, 20),
                Dist::NonZero => rng.int(1, 20) * if rng.next_u64() & 1 == 0 { 1 } else { -1 },
                Dist::Small if unsigned => rng.int(0, 15),
                Dist::Small => rng.int(-15, 15),
                Dist::FewValues if unsigned => rng.int(0, 3),
                Dist::FewValues => rng.int(-2, 2),
                Dist::Predicate if unsigned => rng.pick(&[0, 0, 1, 7, 200]),
                Dist::Predicate => rng.pick(&[0, 0, 1, -1, 7]),
                Dist::CastMix | Dist::AllBytes => match dtype {
                    DType::U8 => rng.int(0, u8::MAX as i128),
                    DType::U32 => rng.int(0, u32::MAX as i128),
                    DType::I16 => rng.int(i16::MIN as i128, i16::MAX as i128),
                    DType::I32 => rng.int(i32::MIN as i128, i32::MAX as i128),
                    // Half small values, half the full range.
                    _ if rng.next_u64() & 1 == 0 => rng.int(-300, 300),
                    _ => rng.next_u64() as i64 as i128,
                },
            })
            .collect();
        return storage_from_i128(dtype, &v);
    }
    let v: Vec<f64> = (0..n)
        .map(|_| match dist {
            Dist::General | Dist::High | Dist::Low => rng.uniform(-4.0, 4.0),
            Dist::Positive => rng.uniform(0.1, 10.0),
            Dist::NonZero => {
                rng.uniform(0.25, 4.0) * if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 }
            }
            Dist::Small => rng.uniform(-3.0, 3.0),
            Dist::FewValues => rng.pick(&[-1.5, -1.0, 0.0, 0.5, 1.0, 2.0]),
            Dist::Predicate => rng.pick(&[0.0, 0.0, 1.0, -1.0, 0.5]),
            Dist::CastMix | Dist::AllBytes => match rng.next_u64() % 8 {
                0 => rng.pick(&[
                    f64::NAN,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    -0.0,
                    0.5,
                    -0.5,
                    2.5,
                    255.5,
                    256.0,
                    -129.0,
                    65504.0,
                    70000.0,
                ]),
                1 => rng.uniform(-1e10, 1e10),
                2 => rng.uniform(-70000.0, 70000.0),
                3 => rng.uniform(0.0, 300.0),
                // Tiny magnitudes: f8e4m3's subnormals and its rounding to zero.
                4 => rng.uniform(-0.03, 0.03),
                _ => rng.uniform(-200.0, 200.0),
            },
        })
        .collect();
    storage_from_f64(dtype, &v)
}

// ------------------------------------------------------------------------------------------
// Layouts
// ------------------------------------------------------------------------------------------

/// Buffer offsets of a layout's elements, in logical (row-major) order.
fn logical_offsets(l: &Layout) -> Vec<usize> {
    let dims = l.dims();
    let strides = l.stride();
    let n: usize = dims.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; dims.len()];
    for _ in 0..n {
        out.push(l.start_offset() + idx.iter().zip(strides).map(|(i, s)| i * s).sum::<usize>());
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// The storage length a layout needs, plus two guard elements.
fn needed_len(l: &Layout) -> usize {
    let end = logical_offsets(l).into_iter().max().map(|m| m + 1);
    end.unwrap_or(l.start_offset()).max(l.start_offset()) + 2
}

#[derive(Clone)]
struct Case {
    name: &'static str,
    layout: Layout,
}

fn c(name: &'static str, layout: candle_core::Result<Layout>) -> Case {
    Case {
        name,
        layout: layout.expect("test layouts are valid"),
    }
}

fn contiguous<S: Into<Shape>>(s: S) -> candle_core::Result<Layout> {
    Ok(Layout::contiguous(s))
}

fn with_offset<S: Into<Shape>>(s: S, o: usize) -> candle_core::Result<Layout> {
    Ok(Layout::contiguous_with_offset(s, o))
}

/// Layouts for one-input ops: contiguous, transposed, narrowed with a start offset, broadcast
/// (stride 0), empty, single element, rank 0..4, and large enough for several blocks.
fn unary_cases() -> Vec<Case> {
    vec![
        c("rank3 contiguous", contiguous((2, 3, 4))),
        c("rank0", contiguous(())),
        c("rank0 offset", with_offset((), 2)),
        c("rank1", contiguous(7)),
        c("single element offset", with_offset((1, 1), 3)),
        c("rank4 contiguous", contiguous((2, 3, 2, 3))),
        c(
            "rank4 permuted",
            Layout::contiguous((2, 3, 4, 5)).permute(&[3, 1, 0, 2]),
        ),
        c("transposed", Layout::contiguous((4, 5)).transpose(0, 1)),
        // Attention's head transposes: the inner dim contiguous, the outer ones permuted (the
        // strided copy's 16-byte path where the offset keeps the vectors aligned).
        c(
            "heads transposed",
            Layout::contiguous((2, 6, 3, 16)).transpose(1, 2),
        ),
        c(
            "heads transposed, aligned offset",
            Layout::contiguous_with_offset((2, 6, 3, 16), 32).transpose(1, 2),
        ),
        c(
            "heads transposed, odd offset",
            Layout::contiguous_with_offset((2, 5, 3, 8), 3).transpose(1, 2),
        ),
        c(
            "narrowed rows (offset)",
            Layout::contiguous((6, 5)).narrow(0, 2, 3),
        ),
        c("narrowed cols", Layout::contiguous((6, 5)).narrow(1, 1, 3)),
        c(
            "narrowed+transposed",
            Layout::contiguous((5, 6, 4))
                .narrow(1, 1, 4)
                .and_then(|l| l.transpose(0, 2)),
        ),
        c(
            "broadcast rows",
            Layout::contiguous((1, 3)).broadcast_as((4, 3)),
        ),
        c(
            "broadcast cols",
            Layout::contiguous((3, 1)).broadcast_as((3, 4)),
        ),
        c(
            "broadcast scalar",
            Layout::contiguous(()).broadcast_as((2, 3, 2)),
        ),
        c(
            "broadcast with offset",
            Layout::contiguous_with_offset((1, 5), 3).broadcast_as((2, 3, 5)),
        ),
        c("empty", contiguous((0, 3))),
        c("empty narrowed", Layout::contiguous((4, 5)).narrow(1, 2, 0)),
        c("large contiguous", contiguous((300, 347))),
        c(
            "large transposed",
            Layout::contiguous((347, 300)).transpose(0, 1),
        ),
    ]
}

struct Case2 {
    name: &'static str,
    lhs: Layout,
    rhs: Layout,
}

fn c2(
    name: &'static str,
    lhs: candle_core::Result<Layout>,
    rhs: candle_core::Result<Layout>,
) -> Case2 {
    Case2 {
        name,
        lhs: lhs.expect("valid"),
        rhs: rhs.expect("valid"),
    }
}

/// Layout pairs (same dims) for two-input ops.
fn binary_cases() -> Vec<Case2> {
    vec![
        c2("contiguous", contiguous((2, 3, 4)), contiguous((2, 3, 4))),
        c2(
            "transposed / contiguous",
            Layout::contiguous((4, 5)).transpose(0, 1),
            contiguous((5, 4)),
        ),
        c2(
            "contiguous / broadcast rows",
            contiguous((4, 3)),
            Layout::contiguous((1, 3)).broadcast_as((4, 3)),
        ),
        c2(
            "broadcast cols / narrowed (offset)",
            Layout::contiguous((3, 1)).broadcast_as((3, 4)),
            Layout::contiguous((5, 6))
                .narrow(0, 1, 3)
                .and_then(|l| l.narrow(1, 2, 4)),
        ),
        c2(
            "broadcast scalar / permuted",
            Layout::contiguous(()).broadcast_as((2, 3, 4)),
            Layout::contiguous((4, 2, 3)).permute(&[1, 2, 0]),
        ),
        c2("rank0 / rank0 offset", contiguous(()), with_offset((), 3)),
        c2("rank1 offset", with_offset(9, 2), contiguous(9)),
        c2(
            "rank4 permuted / rank4 permuted",
            Layout::contiguous((3, 2, 4, 2)).permute(&[1, 0, 3, 2]),
            Layout::contiguous((2, 2, 3, 4)).permute(&[0, 2, 1, 3]),
        ),
        c2("empty", contiguous((0, 3)), contiguous((0, 3))),
        c2("single element", with_offset(1, 4), contiguous(1)),
        c2(
            "large / broadcast",
            contiguous((300, 347)),
            Layout::contiguous((1, 347)).broadcast_as((300, 347)),
        ),
    ]
}

struct Case3 {
    name: &'static str,
    cond: Layout,
    t: Layout,
    f: Layout,
}

fn where_cases() -> Vec<Case3> {
    let l = |r: candle_core::Result<Layout>| r.expect("valid");
    vec![
        Case3 {
            name: "contiguous",
            cond: l(contiguous((2, 3, 4))),
            t: l(contiguous((2, 3, 4))),
            f: l(contiguous((2, 3, 4))),
        },
        Case3 {
            name: "broadcast cond / transposed / contiguous",
            cond: l(Layout::contiguous((1, 3)).broadcast_as((4, 3))),
            t: l(Layout::contiguous((3, 4)).transpose(0, 1)),
            f: l(contiguous((4, 3))),
        },
        Case3 {
            name: "narrowed cond (offset) / broadcast scalar / broadcast cols",
            cond: l(Layout::contiguous((5, 6))
                .narrow(0, 1, 3)
                .and_then(|x| x.narrow(1, 2, 4))),
            t: l(Layout::contiguous(()).broadcast_as((3, 4))),
            f: l(Layout::contiguous((3, 1)).broadcast_as((3, 4))),
        },
        Case3 {
            name: "rank0",
            cond: l(with_offset((), 1)),
            t: l(contiguous(())),
            f: l(with_offset((), 2)),
        },
        Case3 {
            name: "rank4 permuted",
            cond: l(Layout::contiguous((3, 2, 4, 2)).permute(&[1, 0, 3, 2])),
            t: l(contiguous((2, 3, 2, 4))),
            f: l(Layout::contiguous((2, 2, 3, 4)).permute(&[0, 2, 1, 3])),
        },
        Case3 {
            name: "empty",
            cond: l(contiguous((0, 3))),
            t: l(contiguous((0, 3))),
            f: l(contiguous((0, 3))),
        },
        Case3 {
            name: "large",
            cond: l(contiguous((300, 347))),
            t: l(Layout::contiguous((347, 300)).transpose(0, 1)),
            f: l(Layout::contiguous((1, 347)).broadcast_as((300, 347))),
        },
    ]
}

// ------------------------------------------------------------------------------------------
// Comparison
// ------------------------------------------------------------------------------------------

/// Relative tolerance per dtype (the absolute floor is 1e-3 of it).
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        DType::F16 => 1e-3,
        DType::BF16 => 1e-2,
        _ => 0.0,
    }
}

fn close(a: f64, b: f64, rtol: f64) -> bool {
    if a == b || (a.is_nan() && b.is_nan()) {
        return true;
    }
    if !a.is_finite() || !b.is_finite() {
        return false;
    }
    (a - b).abs() <= rtol * a.abs().max(b.abs()) + rtol * 1e-3
}

/// Compares two storages: integers (and everything when `exact`) exactly, floats within the
/// dtype's tolerance, NaN equal to NaN; f8e4m3 bit for bit (NaN signs and -0 included).
fn compare(got: &CpuStorage, want: &CpuStorage, exact: bool) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!(
            "dtype {:?}, expected {:?}",
            got.dtype(),
            want.dtype()
        ));
    }
    if let (Some(g), Some(w)) = (values_i128(got), values_i128(want)) {
        if g.len() != w.len() {
            return Err(format!("{} elements, expected {}", g.len(), w.len()));
        }
        let bad: Vec<usize> = (0..g.len()).filter(|&i| g[i] != w[i]).collect();
        if let Some(&i) = bad.first() {
            return Err(format!(
                "{} of {} elements differ; first at {i}: got {}, expected {}",
                bad.len(),
                g.len(),
                g[i],
                w[i]
            ));
        }
        return Ok(());
    }
    if let (CpuStorage::F8E4M3(g), CpuStorage::F8E4M3(w)) = (got, want) {
        // Bit for bit: NaN signs and -0 included.
        if g.len() != w.len() {
            return Err(format!("{} elements, expected {}", g.len(), w.len()));
        }
        let bad: Vec<usize> = (0..g.len())
            .filter(|&i| g[i].to_bits() != w[i].to_bits())
            .collect();
        if let Some(&i) = bad.first() {
            return Err(format!(
                "{} of {} f8e4m3 elements differ; first at {i}: got {:#04x} ({}), expected \
                 {:#04x} ({})",
                bad.len(),
                g.len(),
                g[i].to_bits(),
                g[i],
                w[i].to_bits(),
                w[i]
            ));
        }
        return Ok(());
    }
    let g = values_f64(got);
    let w = values_f64(want);
    if g.len() != w.len() {
        return Err(format!("{} elements, expected {}", g.len(), w.len()));
    }
    let rtol = if exact || got.dtype() == DType::F8E4M3 {
        0.0
    } else {
        tolerance(got.dtype())
    };
    let bad: Vec<usize> = (0..g.len()).filter(|&i| !close(g[i], w[i], rtol)).collect();
    if let Some(&i) = bad.first() {
        return Err(format!(
            "{} of {} elements differ (rtol {rtol:e}); first at {i}: got {}, expected {}",
            bad.len(),
            g.len(),
            g[i],
            w[i]
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Independent references (for pairs where the oracle is wrong, refuses or panics)
// ------------------------------------------------------------------------------------------

/// How to compute the expected output independently of the CPU backend.
enum Reference {
    /// None: the CPU oracle must agree.
    None,
    /// Each float element through an f64 function, rounded once to the dtype.
    Float(Box<dyn Fn(f64) -> f64>),
    /// Each integer element through exact integer math, wrapped into the dtype.
    Int(fn(i128) -> i128),
}

/// The reference output of a one-input op: the elements of `input` under `layout`, mapped.
fn reference1(reference: &Reference, input: &CpuStorage, layout: &Layout) -> Option<CpuStorage> {
    let offsets = logical_offsets(layout);
    match reference {
        Reference::None => None,
        Reference::Float(f) => {
            let v = values_f64(input);
            let out: Vec<f64> = offsets.iter().map(|&o| f(v[o])).collect();
            Some(storage_from_f64(input.dtype(), &out))
        }
        Reference::Int(f) => {
            let v = values_i128(input)?;
            let out: Vec<i128> = offsets.iter().map(|&o| f(v[o])).collect();
            Some(storage_from_i128(input.dtype(), &out))
        }
    }
}

/// `x` rounded to `dtype` (how the kernels and candle see an f64 scalar argument).
fn round_to(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::BF16 => bf16::from_f64(x).to_f64(),
        DType::F16 => f16::from_f64(x).to_f64(),
        DType::F32 => x as f32 as f64,
        _ => x,
    }
}

/// `dst` with element `i` replaced by `src[map[i]]` where `map[i]` is `Some` (same dtype): the
/// reference for copies and fills, exact for every dtype (f8e4m3 included).
fn remap(dst: &CpuStorage, src: &CpuStorage, map: &[Option<usize>]) -> CpuStorage {
    fn go<T: Copy>(d: &[T], s: &[T], map: &[Option<usize>]) -> Vec<T> {
        d.iter()
            .zip(map)
            .map(|(&x, m)| m.map_or(x, |j| s[j]))
            .collect()
    }
    use CpuStorage as C;
    match (dst, src) {
        (C::U8(d), C::U8(s)) => C::U8(go(d, s, map)),
        (C::U32(d), C::U32(s)) => C::U32(go(d, s, map)),
        (C::I16(d), C::I16(s)) => C::I16(go(d, s, map)),
        (C::I32(d), C::I32(s)) => C::I32(go(d, s, map)),
        (C::I64(d), C::I64(s)) => C::I64(go(d, s, map)),
        (C::BF16(d), C::BF16(s)) => C::BF16(go(d, s, map)),
        (C::F16(d), C::F16(s)) => C::F16(go(d, s, map)),
        (C::F32(d), C::F32(s)) => C::F32(go(d, s, map)),
        (C::F64(d), C::F64(s)) => C::F64(go(d, s, map)),
        (C::F8E4M3(d), C::F8E4M3(s)) => C::F8E4M3(go(d, s, map)),
        (d, s) => panic!("remap: {:?} vs {:?}", d.dtype(), s.dtype()),
    }
}

/// The elements `src[idx[k]]`, exact for every dtype.
fn gather(src: &CpuStorage, idx: &[usize]) -> CpuStorage {
    fn go<T: Copy>(s: &[T], idx: &[usize]) -> Vec<T> {
        idx.iter().map(|&i| s[i]).collect()
    }
    use CpuStorage as C;
    match src {
        C::U8(s) => C::U8(go(s, idx)),
        C::U32(s) => C::U32(go(s, idx)),
        C::I16(s) => C::I16(go(s, idx)),
        C::I32(s) => C::I32(go(s, idx)),
        C::I64(s) => C::I64(go(s, idx)),
        C::BF16(s) => C::BF16(go(s, idx)),
        C::F16(s) => C::F16(go(s, idx)),
        C::F32(s) => C::F32(go(s, idx)),
        C::F64(s) => C::F64(go(s, idx)),
        C::F8E4M3(s) => C::F8E4M3(go(s, idx)),
        other => panic!("gather: {:?}", other.dtype()),
    }
}

/// The reference output when a layout has no element: an empty storage of `dtype`.
fn empty_reference(layout: &Layout, dtype: DType) -> Option<CpuStorage> {
    (layout.shape().elem_count() == 0).then(|| storage_from_f64(dtype, &[]))
}

// ------------------------------------------------------------------------------------------
// The matrix
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// Matches the CPU oracle.
    Pass,
    /// Matches an independent reference (the oracle differs, refuses or panics here).
    PassReference(String),
    /// A typed `RocmError`, as expected.
    TypedError,
    /// Anything else.
    Fail(String),
}

#[derive(Clone, Copy, PartialEq)]
enum Expect {
    Pass,
    TypedError,
}

#[derive(Default)]
struct Matrix {
    rows: Vec<String>,
    cells: BTreeMap<(String, String), Outcome>,
    failures: Vec<String>,
    notes: Vec<String>,
    base_seed: u64,
}

const COLUMNS: [&str; 10] = [
    "u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64", "f8e4m3",
];

impl Matrix {
    fn new(base_seed: u64) -> Self {
        Matrix {
            base_seed,
            ..Default::default()
        }
    }

    fn record(&mut self, row: &str, col: &str, case: &str, seed: u64, outcome: Outcome) {
        if !self.rows.iter().any(|r| r == row) {
            self.rows.push(row.to_string());
        }
        match &outcome {
            Outcome::Fail(msg) => self.failures.push(format!(
                "{row} / {col} / {case}: {msg} (case seed {seed:#x}; base seed {:#x}, set \
                 CANDLE_ROCM_SEED={} to rerun)",
                self.base_seed, self.base_seed
            )),
            Outcome::PassReference(note) => {
                self.notes.push(format!("{row} / {col} / {case}: {note}"))
            }
            _ => {}
        }
        let key = (row.to_string(), col.to_string());
        // A cell shows its most telling case: a failure, else a pass against the reference,
        // else a pass, else an expected typed error (e.g. a row's non-contiguous case).
        let merged = match (self.cells.remove(&key), outcome) {
            (Some(Outcome::Fail(m)), _) | (_, Outcome::Fail(m)) => Outcome::Fail(m),
            (Some(Outcome::PassReference(n)), _) | (_, Outcome::PassReference(n)) => {
                Outcome::PassReference(n)
            }
            (Some(Outcome::Pass), _) | (_, Outcome::Pass) => Outcome::Pass,
            (_, o) => o,
        };
        self.cells.insert(key, merged);
    }

    /// The matrix as a markdown table, for docs/ops.md.
    fn render_markdown(&self, device: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# Op coverage (generated)\n");
        let _ = writeln!(
            s,
            "Written by the conformance suite (`CANDLE_ROCM_OPS_MD=docs/ops.md cargo test -p \
             candle-rocm --test conformance -- --include-ignored conformance_matrix`) on {device}, \
             base seed {:#x}. Do not edit by hand.\n",
            self.base_seed
        );
        let _ = writeln!(
            s,
            "`ok`: matches candle's CPU backend; `ok*`: matches an independent f64/integer \
             reference where the CPU oracle differs, refuses or panics; `err`: a typed \
             `RocmError` naming op and dtype, as expected; `.`: not applicable. Ops not listed \
             return a typed error (not implemented yet).\n"
        );
        let _ = writeln!(
            s,
            "Quantized GGUF tensors (every `GgmlDType`: load, dequantize, quantize, matmul, \
             `indexed_moe_forward`) are covered in [quantized.md](quantized.md#coverage), fused \
             attention (`flash_attn`, `flash_attn_varlen`, candle-nn's `sdpa`) in \
             [attention.md](attention.md).\n"
        );
        let _ = write!(s, "| op |");
        for c in COLUMNS {
            let _ = write!(s, " {c} |");
        }
        let _ = write!(s, "\n|---|");
        for _ in COLUMNS {
            let _ = write!(s, "---|");
        }
        s.push('\n');
        for r in &self.rows {
            let _ = write!(s, "| {r} |");
            for c in COLUMNS {
                let cell = match self.cells.get(&(r.clone(), c.to_string())) {
                    None => ".",
                    Some(Outcome::Pass) => "ok",
                    Some(Outcome::PassReference(_)) => "ok*",
                    Some(Outcome::TypedError) => "err",
                    Some(Outcome::Fail(_)) => "FAIL",
                };
                let _ = write!(s, " {cell} |");
            }
            s.push('\n');
        }
        s
    }

    fn render(&self) -> String {
        let width = self.rows.iter().map(|r| r.len()).max().unwrap_or(0).max(10);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\nROCm conformance matrix (base seed {:#x}): ok = matches candle's CPU backend; \
             ok* = matches an independent f64/integer reference where the CPU oracle differs, \
             refuses or panics; err = typed RocmError, as expected; FAIL; . = not applicable",
            self.base_seed
        );
        let _ = write!(s, "{:width$}", "op");
        for c in COLUMNS {
            let _ = write!(s, " {c:>6}");
        }
        s.push('\n');
        for r in &self.rows {
            let _ = write!(s, "{r:width$}");
            for c in COLUMNS {
                let cell = match self.cells.get(&(r.clone(), c.to_string())) {
                    None => ".",
                    Some(Outcome::Pass) => "ok",
                    Some(Outcome::PassReference(_)) => "ok*",
                    Some(Outcome::TypedError) => "err",
                    Some(Outcome::Fail(_)) => "FAIL",
                };
                let _ = write!(s, " {cell:>6}");
            }
            s.push('\n');
        }
        let (mut pass, mut refs, mut errs, mut fails) = (0, 0, 0, 0);
        for o in self.cells.values() {
            match o {
                Outcome::Pass => pass += 1,
                Outcome::PassReference(_) => refs += 1,
                Outcome::TypedError => errs += 1,
                Outcome::Fail(_) => fails += 1,
            }
        }
        let _ = writeln!(
            s,
            "{} rows x {} dtype columns: {pass} ok, {refs} ok*, {errs} err, {fails} FAIL",
            self.rows.len(),
            COLUMNS.len()
        );
        if !self.notes.is_empty() {
            let _ = writeln!(s, "ok* details (first 40 of {}):", self.notes.len());
            for n in self.notes.iter().take(40) {
                let _ = writeln!(s, "  {n}");
            }
        }
        s
    }
}

/// Judges one case. `gpu` is the backend's result (already copied to the host); `cpu` the
/// oracle's (None when it is known to panic or is not consulted); `reference` an independent
/// expected output, when one exists.
fn judge(
    expect: Expect,
    gpu: candle_core::Result<CpuStorage>,
    cpu: Option<OracleResult<CpuStorage>>,
    reference: Option<CpuStorage>,
    exact: bool,
) -> Outcome {
    judge_with(expect, gpu, cpu, reference, &|g, w| compare(g, w, exact))
}

/// [`judge`] with a caller-chosen comparison (e.g. tolerances that scale with a sum's length).
fn judge_with(
    expect: Expect,
    gpu: candle_core::Result<CpuStorage>,
    cpu: Option<OracleResult<CpuStorage>>,
    reference: Option<CpuStorage>,
    cmp: &dyn Fn(&CpuStorage, &CpuStorage) -> Result<(), String>,
) -> Outcome {
    match expect {
        Expect::TypedError => {
            return match gpu {
                Ok(_) => Outcome::Fail("expected a typed RocmError, got a result".into()),
                Err(e) => match RocmError::from_candle(&e) {
                    Some(_) => Outcome::TypedError,
                    None => Outcome::Fail(format!("expected a typed RocmError, got: {e}")),
                },
            }
        }
        Expect::Pass => {}
    }
    let got = match gpu {
        Ok(g) => g,
        Err(e) => return Outcome::Fail(format!("ROCm error: {e}")),
    };
    let oracle_problem = match cpu {
        Some(Ok(Ok(want))) => match cmp(&got, &want) {
            Ok(()) => return Outcome::Pass,
            Err(m) => format!("CPU oracle differs ({m})"),
        },
        Some(Ok(Err(e))) => format!("CPU oracle refuses ({e})"),
        Some(Err(msg)) => format!("CPU oracle panics ({msg})"),
        None => "CPU oracle not consulted (known to panic)".to_string(),
    };
    match reference {
        Some(r) => match cmp(&got, &r) {
            Ok(()) => Outcome::PassReference(format!("{oracle_problem}; matches the reference")),
            Err(m) => Outcome::Fail(format!("{oracle_problem}; reference differs too ({m})")),
        },
        None => Outcome::Fail(oracle_problem),
    }
}

// ------------------------------------------------------------------------------------------
// Running ops on both backends
// ------------------------------------------------------------------------------------------

struct Ctx {
    dev: RocmDevice,
    matrix: Matrix,
    base: u64,
}

impl Ctx {
    fn new() -> Self {
        let base = base_seed();
        Ctx {
            dev: RocmDevice::new(0).expect("opening GPU 0"),
            matrix: Matrix::new(base),
            base,
        }
    }

    fn upload(&self, s: &CpuStorage) -> RocmStorage {
        self.dev
            .storage_from_cpu_storage(s)
            .expect("uploading test data")
    }

    /// Lets the caching allocator hand out memory full of 0xFF bytes next (NaN for floats, -1
    /// or MAX for integers), so that an output element a kernel forgets to write shows. Call
    /// it after the inputs are uploaded, right before the op allocates its output.
    fn poison(&self, bytes: usize) {
        if bytes > 0 {
            drop(self.dev.storage_from_slice(&vec![0xFFu8; bytes]));
        }
    }
}

fn gpu_result(r: candle_core::Result<RocmStorage>) -> candle_core::Result<CpuStorage> {
    r.and_then(|s| s.to_cpu_storage())
}

thread_local! {
    static QUIET_PANICS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs the CPU oracle, catching its panics (`todo!`s, out-of-range slices) without printing
/// them: the panic message becomes part of the outcome instead.
fn oracle<T>(f: impl FnOnce() -> candle_core::Result<T>) -> OracleResult<T> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET_PANICS.with(|q| q.get()) {
                default(info)
            }
        }));
    });
    QUIET_PANICS.with(|q| q.set(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    QUIET_PANICS.with(|q| q.set(false));
    r.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string panic".into())
    })
}

/// The oracle's result, or the message it panicked with.
type OracleResult<T> = Result<candle_core::Result<T>, String>;

/// A one-input op, generic over the backend.
trait Op1 {
    fn apply<S: BackendStorage>(&self, s: &S, l: &Layout) -> candle_core::Result<S>;
}

struct Unary<B>(std::marker::PhantomData<B>);
impl<B: UnaryOpT> Op1 for Unary<B> {
    fn apply<S: BackendStorage>(&self, s: &S, l: &Layout) -> candle_core::Result<S> {
        s.unary_impl::<B>(l)
    }
}

struct Affine(f64, f64);
impl Op1 for Affine {
    fn apply<S: BackendStorage>(&self, s: &S, l: &Layout) -> candle_core::Result<S> {
        s.affine(l, self.0, self.1)
    }
}

struct Powf(f64);
impl Op1 for Powf {
    fn apply<S: BackendStorage>(&self, s: &S, l: &Layout) -> candle_core::Result<S> {
        s.powf(l, self.0)
    }
}

struct Elu(f64);
impl Op1 for Elu {
    fn apply<S: BackendStorage>(&self, s: &S, l: &Layout) -> candle_core::Result<S> {
        s.elu(l, self.0)
    }
}

struct ToDType(DType);
impl Op1 for ToDType {
    fn apply<S: BackendStorage>(&self, s: &S, l: &Layout) -> candle_core::Result<S> {
        s.to_dtype(l, self.0)
    }
}

/// Describes one (op, dtype) pair of a one-input op.
struct Spec1<'a> {
    row: &'a str,
    dtype: DType,
    dist: Dist,
    expect: Expect,
    consult_cpu: bool,
    reference: Reference,
    out_dtype: DType,
}

fn run_op1<O: Op1>(ctx: &mut Ctx, op: &O, spec: Spec1<'_>) {
    let col = spec.dtype.as_str();
    for case in unary_cases() {
        let seed = case_seed(ctx.base, &[spec.row, col, case.name]);
        let mut rng = Rng::new(seed);
        let input = gen(spec.dtype, needed_len(&case.layout), spec.dist, &mut rng);
        let n = case.layout.shape().elem_count();
        let g_in = ctx.upload(&input);
        ctx.poison(n * spec.out_dtype.size_in_bytes());
        let gpu = gpu_result(op.apply(&g_in, &case.layout));
        let cpu = spec
            .consult_cpu
            .then(|| oracle(|| op.apply(&input, &case.layout)));
        let reference = reference1(&spec.reference, &input, &case.layout)
            .or_else(|| empty_reference(&case.layout, spec.out_dtype));
        let outcome = judge(spec.expect, gpu, cpu, reference, false);
        ctx.matrix.record(spec.row, col, case.name, seed, outcome);
    }
}

// ---- unary -----------------------------------------------------------------------------

/// How a unary op behaves on integers, in candle's CPU backend and in ours.
#[derive(Clone, Copy)]
enum IntKind {
    /// CPU `todo!()`s; the kernels refuse: a typed error is expected.
    Refused,
    /// CPU `todo!()`s; the kernels wrap: compared with exact integer math.
    Wrapping(fn(i128) -> i128),
    /// Defined on integers by the CPU backend: compared with it.
    Cpu,
}

fn unary_row<B: UnaryOpT + 'static>(ctx: &mut Ctx, dist: Dist, int: IntKind, neg_like: bool) {
    let row = format!("unary {}", B::NAME);
    let op = Unary::<B>(std::marker::PhantomData);
    for dtype in storage_dtypes() {
        let mut spec = Spec1 {
            row: &row,
            dtype,
            dist,
            expect: Expect::Pass,
            consult_cpu: true,
            reference: Reference::None,
            out_dtype: dtype,
        };
        if dtype == DType::F8E4M3 {
            // Every byte (NaN, ±0, subnormals, ±448), against the CPU oracle, bit for bit.
            spec.dist = Dist::AllBytes;
        } else if dtype.is_float() {
            spec.reference = Reference::Float(Box::new(B::f64));
        } else {
            match int {
                IntKind::Refused => {
                    spec.expect = Expect::TypedError;
                    spec.consult_cpu = false;
                }
                IntKind::Wrapping(_) if neg_like && is_unsigned(dtype) => {
                    spec.expect = Expect::TypedError;
                    spec.consult_cpu = false;
                }
                IntKind::Wrapping(f) => {
                    spec.consult_cpu = false;
                    spec.reference = Reference::Int(f);
                }
                IntKind::Cpu => {}
            }
        }
        run_op1(ctx, &op, spec);
    }
}

fn run_unary(ctx: &mut Ctx) {
    use Dist::*;
    use IntKind::*;
    unary_row::<op::Exp>(ctx, General, Refused, false);
    unary_row::<op::Log>(ctx, Positive, Refused, false);
    unary_row::<op::Sin>(ctx, General, Refused, false);
    unary_row::<op::Cos>(ctx, General, Refused, false);
    unary_row::<op::Tanh>(ctx, General, Refused, false);
    unary_row::<op::Neg>(ctx, General, Wrapping(|x| -x), true);
    unary_row::<op::Recip>(ctx, NonZero, Refused, false);
    unary_row::<op::Sqr>(ctx, General, Wrapping(|x| x * x), false);
    unary_row::<op::Sqrt>(ctx, Positive, Refused, false);
    unary_row::<op::Gelu>(ctx, General, Cpu, false);
    unary_row::<op::GeluErf>(ctx, General, Cpu, false);
    unary_row::<op::Erf>(ctx, General, Cpu, false);
    unary_row::<op::Silu>(ctx, General, Cpu, false);
    unary_row::<op::Abs>(ctx, General, Cpu, false);
    unary_row::<op::Ceil>(ctx, General, Cpu, false);
    unary_row::<op::Floor>(ctx, General, Cpu, false);
    unary_row::<op::Round>(ctx, General, Cpu, false);
    unary_row::<op::Relu>(ctx, General, Cpu, false);
    unary_row::<op::Sign>(ctx, FewValues, Cpu, false);
}

// ---- affine, powf, elu -------------------------------------------------------------------

fn run_affine_powf_elu(ctx: &mut Ctx) {
    for dtype in storage_dtypes() {
        let f8 = dtype == DType::F8E4M3;
        let float = dtype.is_float() && !f8;
        // f8e4m3: every byte, against the CPU oracle only (bit for bit).
        let f8_or = |d: Dist| if f8 { Dist::AllBytes } else { d };
        // affine: every storage dtype; integer inputs and factors small enough not to overflow
        // (candle's CPU backend panics on integer overflow in debug builds).
        let (mul, add) = if dtype.is_float() {
            (1.7, -0.3)
        } else {
            (3.0, 2.0)
        };
        let (m, a) = (round_to(dtype, mul), round_to(dtype, add));
        run_op1(
            ctx,
            &Affine(mul, add),
            Spec1 {
                row: "affine",
                dtype,
                dist: f8_or(Dist::Small),
                expect: Expect::Pass,
                consult_cpu: true,
                reference: if float {
                    Reference::Float(Box::new(move |x| x * m + a))
                } else {
                    Reference::None
                },
                out_dtype: dtype,
            },
        );
        // powf and elu: float dtypes; integers are refused (as by candle's CPU backend).
        for (row, dist, e) in [
            ("powf 2.3 (x > 0)", Dist::Positive, 2.3),
            ("powf 3", Dist::General, 3.0),
        ] {
            let er = round_to(dtype, e);
            run_op1(
                ctx,
                &Powf(e),
                Spec1 {
                    row,
                    dtype,
                    dist: f8_or(dist),
                    expect: if dtype.is_float() {
                        Expect::Pass
                    } else {
                        Expect::TypedError
                    },
                    consult_cpu: dtype.is_float(),
                    reference: if f8 {
                        Reference::None
                    } else {
                        Reference::Float(Box::new(move |x| x.powf(er)))
                    },
                    out_dtype: dtype,
                },
            );
        }
        let alpha = 0.7;
        let ar = round_to(dtype, alpha);
        run_op1(
            ctx,
            &Elu(alpha),
            Spec1 {
                row: "elu",
                dtype,
                dist: f8_or(Dist::General),
                expect: if dtype.is_float() {
                    Expect::Pass
                } else {
                    Expect::TypedError
                },
                consult_cpu: dtype.is_float(),
                reference: if f8 {
                    Reference::None
                } else {
                    Reference::Float(Box::new(
                        move |x| {
                            if x >= 0.0 {
                                x
                            } else {
                                ar * x.exp_m1()
                            }
                        },
                    ))
                },
                out_dtype: dtype,
            },
        );
    }
}

// ---- to_dtype --------------------------------------------------------------------------

fn run_to_dtype(ctx: &mut Ctx) {
    for dst in storage_dtypes() {
        let row = format!("to_dtype -> {}", dst.as_str());
        for src in storage_dtypes() {
            // The CPU oracle's f8e4m3 -> f64 conversion recurses forever (a stack overflow
            // cannot be caught): that pair is judged against the reference alone.
            let oracle_overflows = src == DType::F8E4M3 && dst == DType::F64;
            let expect = Expect::Pass;
            let op = ToDType(dst);
            let col = src.as_str();
            for case in unary_cases() {
                let seed = case_seed(ctx.base, &[&row, col, case.name]);
                let mut rng = Rng::new(seed);
                let input = gen(src, needed_len(&case.layout), Dist::CastMix, &mut rng);
                let g_in = ctx.upload(&input);
                ctx.poison(case.layout.shape().elem_count() * dst.size_in_bytes());
                let gpu = gpu_result(op.apply(&g_in, &case.layout));
                let cpu = (!oracle_overflows).then(|| oracle(|| op.apply(&input, &case.layout)));
                let reference = cast_reference(&input, &case.layout, dst)
                    .or_else(|| empty_reference(&case.layout, dst));
                let outcome = judge(expect, gpu, cpu, reference, false);
                ctx.matrix.record(&row, col, case.name, seed, outcome);
            }
        }
    }
}

/// Rust `as` semantics: integer -> integer wraps (exact, through i128); everything else goes
/// through f64 (float -> integer saturates, NaN -> 0; -> f16/bf16/f8e4m3 rounds once from f64,
/// which for f8e4m3 equals Candle's integer -> f32 -> f8e4m3 path: integers that f32 rounds
/// are far past f8e4m3's saturation at 448).
fn cast_reference(input: &CpuStorage, layout: &Layout, dst: DType) -> Option<CpuStorage> {
    let offsets = logical_offsets(layout);
    if let (Some(v), true) = (values_i128(input), dst.is_int()) {
        let out: Vec<i128> = offsets.iter().map(|&o| v[o]).collect();
        return Some(storage_from_i128(dst, &out));
    }
    let v = values_f64(input);
    let out: Vec<f64> = offsets.iter().map(|&o| v[o]).collect();
    Some(storage_from_f64(dst, &out))
}

// ---- binary and cmp --------------------------------------------------------------------

trait Op2 {
    fn apply<S: BackendStorage>(
        &self,
        a: &S,
        b: &S,
        la: &Layout,
        lb: &Layout,
    ) -> candle_core::Result<S>;
}

struct Binary<B>(std::marker::PhantomData<B>);
impl<B: BinaryOpT> Op2 for Binary<B> {
    fn apply<S: BackendStorage>(
        &self,
        a: &S,
        b: &S,
        la: &Layout,
        lb: &Layout,
    ) -> candle_core::Result<S> {
        a.binary_impl::<B>(b, la, lb)
    }
}

struct Cmp(CmpOp);
impl Op2 for Cmp {
    fn apply<S: BackendStorage>(
        &self,
        a: &S,
        b: &S,
        la: &Layout,
        lb: &Layout,
    ) -> candle_core::Result<S> {
        a.cmp(self.0, b, la, lb)
    }
}

#[allow(clippy::too_many_arguments)]
fn run_op2<O: Op2>(
    ctx: &mut Ctx,
    op: &O,
    row: &str,
    dtype: DType,
    (dl, dr): (Dist, Dist),
    expect: Expect,
    reference: Option<&dyn Fn(f64, f64) -> f64>,
    out_dtype: DType,
) {
    let col = dtype.as_str();
    for case in binary_cases() {
        let seed = case_seed(ctx.base, &[row, col, case.name]);
        let mut rng = Rng::new(seed);
        let lhs = gen(dtype, needed_len(&case.lhs), dl, &mut rng);
        let rhs = gen(dtype, needed_len(&case.rhs), dr, &mut rng);
        let (gl, gr) = (ctx.upload(&lhs), ctx.upload(&rhs));
        ctx.poison(case.lhs.shape().elem_count() * out_dtype.size_in_bytes());
        let gpu = gpu_result(op.apply(&gl, &gr, &case.lhs, &case.rhs));
        let consult = expect == Expect::Pass;
        let cpu = consult.then(|| oracle(|| op.apply(&lhs, &rhs, &case.lhs, &case.rhs)));
        let reference = reference.map(|f| {
            let (a, b) = (values_f64(&lhs), values_f64(&rhs));
            let out: Vec<f64> = logical_offsets(&case.lhs)
                .into_iter()
                .zip(logical_offsets(&case.rhs))
                .map(|(i, j)| f(a[i], b[j]))
                .collect();
            storage_from_f64(out_dtype, &out)
        });
        let reference = reference.or_else(|| empty_reference(&case.lhs, out_dtype));
        let outcome = judge(expect, gpu, cpu, reference, false);
        ctx.matrix.record(row, col, case.name, seed, outcome);
    }
}

fn binary_row<B: BinaryOpT + 'static>(ctx: &mut Ctx, dists: impl Fn(DType) -> (Dist, Dist)) {
    let row = format!("binary {}", B::NAME);
    let op = Binary::<B>(std::marker::PhantomData);
    for dtype in storage_dtypes() {
        let f8 = dtype == DType::F8E4M3;
        let float = dtype.is_float() && !f8;
        let reference: Option<&dyn Fn(f64, f64) -> f64> = if float { Some(&B::f64) } else { None };
        // f8e4m3: every byte on both sides (0/0, NaN operands, saturation), against the CPU
        // oracle only, bit for bit.
        let dists = if f8 {
            (Dist::AllBytes, Dist::AllBytes)
        } else {
            dists(dtype)
        };
        run_op2(ctx, &op, &row, dtype, dists, Expect::Pass, reference, dtype);
    }
}

fn run_binary(ctx: &mut Ctx) {
    use Dist::*;
    binary_row::<op::Add>(ctx, |_| (General, General));
    binary_row::<op::Sub>(ctx, |_| (High, Low));
    binary_row::<op::Mul>(ctx, |_| (Small, Small));
    binary_row::<op::Div>(ctx, |d| (if d.is_int() { High } else { General }, NonZero));
    binary_row::<op::Minimum>(ctx, |_| (FewValues, General));
    binary_row::<op::Maximum>(ctx, |_| (FewValues, General));
}

fn run_cmp(ctx: &mut Ctx) {
    for (cop, name) in [
        (CmpOp::Eq, "cmp eq"),
        (CmpOp::Ne, "cmp ne"),
        (CmpOp::Lt, "cmp lt"),
        (CmpOp::Le, "cmp le"),
        (CmpOp::Gt, "cmp gt"),
        (CmpOp::Ge, "cmp ge"),
    ] {
        for dtype in storage_dtypes() {
            // f8e4m3: every byte on both sides (NaN, ±0, ±448; the large cases hold many ties).
            let dists = if dtype == DType::F8E4M3 {
                (Dist::AllBytes, Dist::AllBytes)
            } else {
                (Dist::FewValues, Dist::FewValues)
            };
            run_op2(
                ctx,
                &Cmp(cop),
                name,
                dtype,
                dists,
                Expect::Pass,
                None,
                DType::U8,
            );
        }
    }
}

// ---- where_cond ------------------------------------------------------------------------

fn run_where(ctx: &mut Ctx) {
    let conds = [
        DType::U8,
        DType::U32,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::BF16,
        DType::F16,
        DType::F32,
        DType::F64,
        DType::F8E4M3,
    ];
    for cond_dtype in conds {
        let row = format!("where_cond (cond {})", cond_dtype.as_str());
        // Float predicates are refused by candle's CPU backend and by the kernels: one value
        // dtype is enough to check the typed error.
        let value_dtypes = if cond_dtype.is_int() {
            storage_dtypes()
        } else {
            vec![DType::F32]
        };
        for dtype in value_dtypes {
            let expect = if cond_dtype.is_int() {
                Expect::Pass
            } else {
                Expect::TypedError
            };
            let col = dtype.as_str();
            for case in where_cases() {
                let seed = case_seed(ctx.base, &[&row, col, case.name]);
                let mut rng = Rng::new(seed);
                let cond = gen(
                    cond_dtype,
                    needed_len(&case.cond),
                    Dist::Predicate,
                    &mut rng,
                );
                let t = gen(dtype, needed_len(&case.t), Dist::General, &mut rng);
                let f = gen(dtype, needed_len(&case.f), Dist::General, &mut rng);
                let (gc, gt, gf) = (ctx.upload(&cond), ctx.upload(&t), ctx.upload(&f));
                ctx.poison(case.cond.shape().elem_count() * dtype.size_in_bytes());
                let gpu = gpu_result(gc.where_cond(&case.cond, &gt, &case.t, &gf, &case.f));
                let cpu = (expect == Expect::Pass)
                    .then(|| oracle(|| cond.where_cond(&case.cond, &t, &case.t, &f, &case.f)));
                // Reference: pick from t or f by the predicate (non-zero is true).
                let pred = values_f64(&cond);
                let t_len = values_f64(&t).len();
                let picks: Vec<usize> = logical_offsets(&case.cond)
                    .into_iter()
                    .zip(
                        logical_offsets(&case.t)
                            .into_iter()
                            .zip(logical_offsets(&case.f)),
                    )
                    .map(|(c, (i, j))| if pred[c] != 0.0 { i } else { t_len + j })
                    .collect();
                let both = CpuStorage::concat(&[t.clone(), f.clone()]).expect("same dtype");
                let reference = (expect == Expect::Pass).then(|| gather(&both, &picks));
                let outcome = judge(expect, gpu, cpu, reference, true);
                ctx.matrix.record(&row, col, case.name, seed, outcome);
            }
        }
    }
}

// ---- copies, const_set, transfers --------------------------------------------------------

fn run_copies(ctx: &mut Ctx) {
    for dtype in storage_dtypes() {
        let col = dtype.as_str();

        // copy_strided_src into a destination at an offset; the rest of the destination must
        // be left alone.
        let offsets = [("copy_strided_src", 3), ("copy_strided_src at 0", 0)];
        for (case, (row, dst_offset)) in unary_cases()
            .into_iter()
            .flat_map(|case| offsets.map(|o| (case.clone(), o)))
        {
            let seed = case_seed(ctx.base, &[row, col, case.name]);
            let mut rng = Rng::new(seed);
            let src = gen(dtype, needed_len(&case.layout), Dist::General, &mut rng);
            let n = case.layout.shape().elem_count();
            let mut cpu_dst = gen(dtype, n + dst_offset + 2, Dist::General, &mut rng);
            let mut gpu_dst = ctx.upload(&cpu_dst);
            let gpu = ctx
                .upload(&src)
                .copy_strided_src(&mut gpu_dst, dst_offset, &case.layout)
                .and_then(|()| gpu_dst.to_cpu_storage());
            let mut map = vec![None; n + dst_offset + 2];
            for (k, o) in logical_offsets(&case.layout).into_iter().enumerate() {
                map[dst_offset + k] = Some(o);
            }
            let reference = remap(&cpu_dst, &src, &map);
            let cpu = oracle(|| {
                src.copy_strided_src(&mut cpu_dst, dst_offset, &case.layout)
                    .map(|()| cpu_dst.clone())
            });
            let outcome = judge(Expect::Pass, gpu, Some(cpu), Some(reference), true);
            ctx.matrix.record(row, col, case.name, seed, outcome);
        }

        // copy2d: (d1, d2, src_stride1, dst_stride1, src_offset, dst_offset).
        let copy2d_cases: [(&str, [usize; 6]); 6] = [
            ("rows into a wider dst", [3, 4, 6, 5, 1, 2]),
            ("single row", [1, 5, 0, 0, 2, 0]),
            ("packed both", [4, 3, 3, 3, 0, 0]),
            ("one column", [4, 1, 3, 2, 0, 1]),
            ("empty", [0, 3, 3, 3, 0, 0]),
            ("large", [100, 257, 300, 260, 7, 3]),
        ];
        // Source and destination lengths of a case (room around the rows) and where each
        // destination element comes from.
        let buffers = |[d1, d2, ss, ds, so, dof]: [usize; 6]| {
            let src_len = if d1 == 0 {
                so + 1
            } else {
                so + (d1 - 1) * ss + d2 + 1
            };
            let dst_len = if d1 == 0 {
                dof + 1
            } else {
                dof + (d1 - 1) * ds + d2 + 2
            };
            let mut map = vec![None; dst_len];
            for r in 0..d1 {
                for k in 0..d2 {
                    map[dof + r * ds + k] = Some(so + r * ss + k);
                }
            }
            (src_len, dst_len, map)
        };
        for (name, case) in copy2d_cases {
            let [d1, d2, ss, ds, so, dof] = case;
            let row = "copy2d";
            let seed = case_seed(ctx.base, &[row, col, name]);
            let mut rng = Rng::new(seed);
            let (src_len, dst_len, map) = buffers(case);
            let src = gen(dtype, src_len, Dist::General, &mut rng);
            let mut cpu_dst = gen(dtype, dst_len, Dist::General, &mut rng);
            let mut gpu_dst = ctx.upload(&cpu_dst);
            let gpu = ctx
                .upload(&src)
                .copy2d(&mut gpu_dst, d1, d2, ss, ds, so, dof)
                .and_then(|()| gpu_dst.to_cpu_storage());
            let reference = remap(&cpu_dst, &src, &map);
            let cpu = oracle(|| {
                src.copy2d(&mut cpu_dst, d1, d2, ss, ds, so, dof)
                    .map(|()| cpu_dst.clone())
            });
            let outcome = judge(Expect::Pass, gpu, Some(cpu), Some(reference), true);
            ctx.matrix.record(row, col, name, seed, outcome);
        }

        // copy2d_pair: two of the copy2d cases in one launch (each with its own source,
        // destination and shape), judged destination by destination.
        let spec = |[d1, d2, src_s, dst_s, src_o, dst_o]: [usize; 6]| Copy2dSpec {
            d1,
            d2,
            src_s,
            dst_s,
            src_o,
            dst_o,
        };
        for (i, (a_name, a)) in copy2d_cases.iter().enumerate() {
            let (b_name, b) = copy2d_cases[(i + 1) % copy2d_cases.len()];
            let row = "copy2d_pair";
            let name = format!("{a_name} + {b_name}");
            let seed = case_seed(ctx.base, &[row, col, &name]);
            let mut rng = Rng::new(seed);
            let ((a_src, a_dst, a_map), (b_src, b_dst, b_map)) = (buffers(*a), buffers(b));
            let (a_src, b_src) = (
                gen(dtype, a_src, Dist::General, &mut rng),
                gen(dtype, b_src, Dist::General, &mut rng),
            );
            let (a_cpu, b_cpu) = (
                gen(dtype, a_dst, Dist::General, &mut rng),
                gen(dtype, b_dst, Dist::General, &mut rng),
            );
            let (mut a_gpu, mut b_gpu) = (ctx.upload(&a_cpu), ctx.upload(&b_cpu));
            let pair = ctx.upload(&a_src).copy2d_pair(
                &mut a_gpu,
                spec(*a),
                &ctx.upload(&b_src),
                &mut b_gpu,
                spec(b),
            );
            for (which, dst, gpu_dst, src, map, c) in [
                ("first", a_cpu, a_gpu, &a_src, a_map, *a),
                ("second", b_cpu, b_gpu, &b_src, b_map, b),
            ] {
                let gpu = match &pair {
                    Ok(()) => gpu_dst.to_cpu_storage(),
                    Err(e) => Err(candle_core::Error::Msg(e.to_string())),
                };
                let reference = remap(&dst, src, &map);
                let mut cpu_dst = dst.clone();
                let [d1, d2, ss, ds, so, dof] = c;
                let cpu = oracle(|| {
                    src.copy2d(&mut cpu_dst, d1, d2, ss, ds, so, dof)
                        .map(|()| cpu_dst.clone())
                });
                let outcome = judge(Expect::Pass, gpu, Some(cpu), Some(reference), true);
                ctx.matrix
                    .record(row, col, &format!("{name}: {which}"), seed, outcome);
            }
        }

        // const_set through every layout (broadcast ones write the same element repeatedly).
        for case in unary_cases() {
            let row = "const_set";
            let seed = case_seed(ctx.base, &[row, col, case.name]);
            let mut rng = Rng::new(seed);
            let mut cpu_s = gen(dtype, needed_len(&case.layout), Dist::General, &mut rng);
            let value_storage = gen(dtype, 1, Dist::General, &mut rng);
            let value = match &value_storage {
                CpuStorage::U8(v) => v[0].to_scalar(),
                CpuStorage::U32(v) => v[0].to_scalar(),
                CpuStorage::I16(v) => v[0].to_scalar(),
                CpuStorage::I32(v) => v[0].to_scalar(),
                CpuStorage::I64(v) => v[0].to_scalar(),
                CpuStorage::BF16(v) => v[0].to_scalar(),
                CpuStorage::F16(v) => v[0].to_scalar(),
                CpuStorage::F32(v) => v[0].to_scalar(),
                CpuStorage::F64(v) => v[0].to_scalar(),
                CpuStorage::F8E4M3(v) => v[0].to_scalar(),
                other => panic!("{:?}", other.dtype()),
            };
            let mut gpu_s = ctx.upload(&cpu_s);
            let gpu = gpu_s
                .const_set(value, &case.layout)
                .and_then(|()| gpu_s.to_cpu_storage());
            let mut map = vec![None; needed_len(&case.layout)];
            for o in logical_offsets(&case.layout) {
                map[o] = Some(0);
            }
            let reference = remap(&cpu_s, &value_storage, &map);
            let cpu = oracle(|| cpu_s.const_set(value, &case.layout).map(|()| cpu_s.clone()));
            let outcome = judge(Expect::Pass, gpu, Some(cpu), Some(reference), true);
            ctx.matrix.record(row, col, case.name, seed, outcome);
        }

        // Host round trip, try_clone, zeros.
        for (name, len) in [("empty", 0usize), ("one", 1), ("many", 100_003)] {
            let seed = case_seed(ctx.base, &["transfers", col, name]);
            let mut rng = Rng::new(seed);
            let data = gen(dtype, len, Dist::General, &mut rng);
            let up = ctx.upload(&data);
            let back = up.to_cpu_storage();
            let o = judge(Expect::Pass, back, Some(Ok(Ok(data.clone()))), None, true);
            ctx.matrix
                .record("to_cpu_storage (round trip)", col, name, seed, o);
            let l = Layout::contiguous(len);
            let clone = up.try_clone(&l).and_then(|c| c.to_cpu_storage());
            let o = judge(Expect::Pass, clone, Some(Ok(Ok(data.clone()))), None, true);
            ctx.matrix.record("try_clone", col, name, seed, o);
            let shape = Shape::from(len);
            ctx.poison(len * dtype.size_in_bytes());
            let zeros = ctx
                .dev
                .zeros_impl(&shape, dtype)
                .and_then(|z| z.to_cpu_storage());
            let cpu = oracle(|| CpuDevice.zeros_impl(&shape, dtype));
            let o = judge(Expect::Pass, zeros, Some(cpu), None, true);
            ctx.matrix.record("zeros", col, name, seed, o);
        }
    }
}

// ---- reductions --------------------------------------------------------------------------

/// A reduction case: a layout and the dims reduced over.
struct RCase {
    name: &'static str,
    layout: Layout,
    dims: Vec<usize>,
    /// Float inputs get NaNs sprinkled in (min/max/argmin/argmax: Candle's NaN rule).
    nans: bool,
}

fn rc(name: &'static str, layout: candle_core::Result<Layout>, dims: &[usize]) -> RCase {
    RCase {
        name,
        layout: layout.expect("test layouts are valid"),
        dims: dims.to_vec(),
        nans: false,
    }
}

/// Reduction cases: first, last and middle dims, several dims (unsorted too), contiguous,
/// transposed, narrowed with an offset, broadcast (stride 0, including a size-1 stride-0
/// reduced dim), single element, long rows (4096, 4097), large, NaNs, an empty output.
fn reduce_cases() -> Vec<RCase> {
    let mut v = vec![
        rc("contiguous, last dim", contiguous((2, 3, 4)), &[2]),
        rc("contiguous, first dim", contiguous((2, 3, 4)), &[0]),
        rc("contiguous, middle dim", contiguous((2, 3, 4)), &[1]),
        rc(
            "contiguous, first+last dims",
            contiguous((2, 3, 4)),
            &[0, 2],
        ),
        rc("contiguous, dims [2, 0]", contiguous((2, 3, 4)), &[2, 0]),
        rc("contiguous, all dims", contiguous((2, 3, 4)), &[0, 1, 2]),
        rc("rank1", contiguous(7), &[0]),
        rc(
            "transposed, dim 0",
            Layout::contiguous((4, 5)).transpose(0, 1),
            &[0],
        ),
        rc(
            "transposed, dim 1",
            Layout::contiguous((4, 5)).transpose(0, 1),
            &[1],
        ),
        rc(
            "narrowed rows (offset), dim 1",
            Layout::contiguous((6, 5)).narrow(0, 2, 3),
            &[1],
        ),
        rc(
            "narrowed rows (offset), dim 0",
            Layout::contiguous((6, 5)).narrow(0, 2, 3),
            &[0],
        ),
        rc(
            "narrowed cols, dim 1",
            Layout::contiguous((6, 5)).narrow(1, 1, 3),
            &[1],
        ),
        rc(
            "narrowed+transposed, dim 1",
            Layout::contiguous((5, 6, 4))
                .narrow(1, 1, 4)
                .and_then(|l| l.transpose(0, 2)),
            &[1],
        ),
        rc(
            "rank4 permuted, dim 2",
            Layout::contiguous((2, 3, 4, 5)).permute(&[3, 1, 0, 2]),
            &[2],
        ),
        rc(
            "rank4 permuted, dims [1, 3]",
            Layout::contiguous((2, 3, 4, 5)).permute(&[3, 1, 0, 2]),
            &[1, 3],
        ),
        rc(
            "broadcast rows, stride-0 dim 0",
            Layout::contiguous((1, 3)).broadcast_as((4, 3)),
            &[0],
        ),
        rc(
            "broadcast cols, dim 1",
            Layout::contiguous((3, 1)).broadcast_as((3, 4)),
            &[1],
        ),
        rc(
            "broadcast with offset, dims [0, 1]",
            Layout::contiguous_with_offset((1, 5), 3).broadcast_as((2, 3, 5)),
            &[0, 1],
        ),
        rc(
            "size-1 stride-0 reduced dim",
            Layout::contiguous_with_offset(5, 1).broadcast_as((1, 5)),
            &[0],
        ),
        rc("single element, dim 1", with_offset((1, 1), 3), &[1]),
        rc("single element, all dims", with_offset((1, 1), 3), &[0, 1]),
        rc("4096-long rows", contiguous((2, 4096)), &[1]),
        rc("4097-long rows (offset)", with_offset((3, 4097), 5), &[1]),
        rc("large, dim 1", contiguous((300, 347)), &[1]),
        rc("large, dim 0", contiguous((300, 347)), &[0]),
        rc(
            "large transposed, dim 0",
            Layout::contiguous((347, 300)).transpose(0, 1),
            &[0],
        ),
        rc("empty output", contiguous((0, 3)), &[1]),
    ];
    for (name, l, d) in [
        ("NaNs, last dim", contiguous((16, 9)), [1]),
        ("NaNs, first dim", contiguous((9, 16)), [0]),
    ] {
        let mut case = rc(name, l, &d);
        case.nans = true;
        v.push(case);
    }
    v
}

/// For each output element (contiguous, reduced dims kept as size 1), the buffer offsets of its
/// reduced elements, row-major over the reduced dims in increasing dim order.
fn reduce_groups(l: &Layout, rdims: &[usize]) -> Vec<Vec<usize>> {
    let dims = l.dims();
    let out_dims: Vec<usize> = (0..dims.len())
        .map(|d| if rdims.contains(&d) { 1 } else { dims[d] })
        .collect();
    let out_n: usize = out_dims.iter().product();
    let mut groups = vec![Vec::new(); out_n];
    let n: usize = dims.iter().product();
    let offsets = logical_offsets(l);
    let mut idx = vec![0usize; dims.len()];
    for &off in offsets.iter().take(n) {
        let mut o = 0;
        for d in 0..dims.len() {
            o = o * out_dims[d] + if rdims.contains(&d) { 0 } else { idx[d] };
        }
        groups[o].push(off);
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    groups
}

/// The reference reduction: sums in f64 (rounded once) or wrapping integer math; min/max/arg*
/// by Candle's fold (replace only by a strictly smaller/larger element: ties keep the first,
/// NaNs are skipped unless first), the chosen element copied bit for bit.
fn reduce_reference(op: ReduceOp, input: &CpuStorage, l: &Layout, rdims: &[usize]) -> CpuStorage {
    let groups = reduce_groups(l, rdims);
    if op == ReduceOp::Sum {
        if let Some(v) = values_i128(input) {
            let out: Vec<i128> = groups
                .iter()
                .map(|g| g.iter().map(|&o| v[o]).sum())
                .collect();
            return storage_from_i128(input.dtype(), &out);
        }
        let v = values_f64(input);
        let out: Vec<f64> = groups
            .iter()
            .map(|g| g.iter().map(|&o| v[o]).sum())
            .collect();
        return storage_from_f64(input.dtype(), &out);
    }
    let min = matches!(op, ReduceOp::Min | ReduceOp::ArgMin);
    let ints = values_i128(input);
    let floats = values_f64(input);
    let replaces = |acc: usize, s: usize| -> bool {
        match &ints {
            Some(v) if min => v[acc] > v[s],
            Some(v) => v[acc] < v[s],
            None if min => floats[acc] > floats[s],
            None => floats[acc] < floats[s],
        }
    };
    let chosen: Vec<(usize, usize)> = groups
        .iter()
        .map(|g| {
            let (mut acc, mut at) = (g[0], 0);
            for (k, &o) in g.iter().enumerate() {
                if replaces(acc, o) {
                    (acc, at) = (o, k);
                }
            }
            (acc, at)
        })
        .collect();
    if matches!(op, ReduceOp::ArgMin | ReduceOp::ArgMax) {
        CpuStorage::U32(chosen.iter().map(|&(_, k)| k as u32).collect())
    } else {
        gather(input, &chosen.iter().map(|&(o, _)| o).collect::<Vec<_>>())
    }
}

/// Compares sums: integers exactly; floats within `rtol * (|want| + sqrt(sum of x^2))` per
/// element, where the sum runs over that element's reduced inputs: the error of a float sum
/// grows with the reduced length (like a random walk, as sqrt(n) times the inputs' size), and
/// the CPU oracle accumulates in the dtype itself, sequentially.
fn compare_sum(got: &CpuStorage, want: &CpuStorage, scale: &[f64]) -> Result<(), String> {
    if got.dtype().is_int() || got.dtype() != want.dtype() {
        return compare(got, want, false);
    }
    let (g, w) = (values_f64(got), values_f64(want));
    if g.len() != w.len() {
        return Err(format!("{} elements, expected {}", g.len(), w.len()));
    }
    let rtol = tolerance(got.dtype());
    let ok = |i: usize| {
        (g[i].is_nan() && w[i].is_nan())
            || g[i] == w[i]
            || (g[i] - w[i]).abs() <= rtol * (w[i].abs() + scale[i]) + rtol * 1e-3
    };
    let bad: Vec<usize> = (0..g.len()).filter(|&i| !ok(i)).collect();
    match bad.first() {
        None => Ok(()),
        Some(&i) => Err(format!(
            "{} of {} elements differ (rtol {rtol:e} x (|want| + {:.3})); first at {i}: got {}, \
             expected {}",
            bad.len(),
            g.len(),
            scale[i],
            g[i],
            w[i]
        )),
    }
}

/// `sqrt(sum of x^2)` over each output element's reduced inputs (the sums' error scale).
fn sum_scales(input: &CpuStorage, l: &Layout, rdims: &[usize]) -> Vec<f64> {
    let v = values_f64(input);
    reduce_groups(l, rdims)
        .iter()
        .map(|g| g.iter().map(|&o| v[o] * v[o]).sum::<f64>().sqrt())
        .collect()
}

/// Replaces about one float element in eight with NaN (the first elements of some rows too).
fn sprinkle_nans(s: CpuStorage, rng: &mut Rng) -> CpuStorage {
    if !s.dtype().is_float() {
        return s;
    }
    let mut v = values_f64(&s);
    for x in v.iter_mut() {
        if rng.next_u64() % 8 == 0 {
            *x = f64::NAN;
        }
    }
    storage_from_f64(s.dtype(), &v)
}

fn reduce_input(op: ReduceOp, dtype: DType, case: &RCase, rng: &mut Rng) -> CpuStorage {
    let dist = match op {
        ReduceOp::ArgMin | ReduceOp::ArgMax => Dist::FewValues,
        _ => Dist::General,
    };
    let input = gen(dtype, needed_len(&case.layout), dist, rng);
    if case.nans {
        sprinkle_nans(input, rng)
    } else {
        input
    }
}

/// Whether candle refuses this argmin/argmax: it reduces exactly one dim (candle's CPU backend
/// returns `Error::OnlySingleDimension` otherwise, and so does this backend).
fn arg_reduce_refused(op: ReduceOp, dims: &[usize]) -> bool {
    matches!(op, ReduceOp::ArgMin | ReduceOp::ArgMax) && dims.len() != 1
}

/// `e` without candle's backtrace wrapper (present when `RUST_BACKTRACE` is set).
fn without_backtrace(e: &candle_core::Error) -> &candle_core::Error {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => without_backtrace(inner),
        e => e,
    }
}

/// Checks that the GPU refused an op with the very error (variant, fields, message) the CPU
/// oracle refused it with.
fn same_refusal<T>(gpu: candle_core::Result<()>, cpu: OracleResult<T>) -> Result<(), String> {
    let cpu = match cpu {
        Ok(Err(e)) => e,
        Ok(Ok(_)) => return Err("the CPU oracle computes this; expected it to refuse".into()),
        Err(msg) => return Err(format!("the CPU oracle panics ({msg})")),
    };
    let gpu = match gpu {
        Err(e) => e,
        Ok(()) => return Err(format!("computed a result; the CPU oracle refuses ({cpu})")),
    };
    let (g, c) = (without_backtrace(&gpu), without_backtrace(&cpu));
    if format!("{g:?}") == format!("{c:?}") && g.to_string() == c.to_string() {
        Ok(())
    } else {
        Err(format!("refused with {g:?}; the CPU oracle with {c:?}"))
    }
}

fn run_reduce(ctx: &mut Ctx) {
    for (op, row) in [
        (ReduceOp::Sum, "reduce sum"),
        (ReduceOp::Min, "reduce min"),
        (ReduceOp::Max, "reduce max"),
        (ReduceOp::ArgMin, "reduce argmin"),
        (ReduceOp::ArgMax, "reduce argmax"),
    ] {
        let out_dtype_of = |d: DType| {
            if matches!(op, ReduceOp::ArgMin | ReduceOp::ArgMax) {
                DType::U32
            } else {
                d
            }
        };
        for dtype in storage_dtypes() {
            let col = dtype.as_str();
            let expect = if dtype == DType::F8E4M3 {
                Expect::TypedError
            } else {
                Expect::Pass
            };
            let mut cases = reduce_cases();
            if op == ReduceOp::Sum {
                cases.push(rc("empty reduced dim", contiguous((0, 3)), &[0]));
                if dtype.is_int() {
                    // Full-range integers: the sums wrap (the CPU oracle panics on overflow in
                    // debug builds; the wrapping reference judges).
                    cases.push(rc("wrapping, last dim", contiguous((5, 33)), &[1]));
                }
            }
            for case in cases {
                let seed = case_seed(ctx.base, &[row, col, case.name]);
                let mut rng = Rng::new(seed);
                if arg_reduce_refused(op, &case.dims) {
                    // argmin/argmax over several dims (or none): refused as by the CPU oracle,
                    // before anything is launched (f8e4m3 too: the dims are checked first).
                    let input = reduce_input(op, dtype, &case, &mut rng);
                    let g_in = ctx.upload(&input);
                    let gpu = g_in.reduce_op(op, &case.layout, &case.dims).map(|_| ());
                    let cpu = oracle(|| input.reduce_op(op, &case.layout, &case.dims));
                    let outcome = match same_refusal(gpu, cpu) {
                        Ok(()) if expect == Expect::TypedError => Outcome::TypedError,
                        Ok(()) => Outcome::Pass,
                        Err(m) => Outcome::Fail(m),
                    };
                    ctx.matrix.record(row, col, case.name, seed, outcome);
                    continue;
                }
                let input = if case.name.starts_with("wrapping") {
                    gen(dtype, needed_len(&case.layout), Dist::CastMix, &mut rng)
                } else {
                    reduce_input(op, dtype, &case, &mut rng)
                };
                let g_in = ctx.upload(&input);
                let out_n: usize = reduce_groups(&case.layout, &case.dims).len();
                ctx.poison(out_n * out_dtype_of(dtype).size_in_bytes());
                let gpu = gpu_result(g_in.reduce_op(op, &case.layout, &case.dims));
                let consult = expect == Expect::Pass;
                let cpu = consult.then(|| oracle(|| input.reduce_op(op, &case.layout, &case.dims)));
                let reference =
                    consult.then(|| reduce_reference(op, &input, &case.layout, &case.dims));
                let outcome = if op == ReduceOp::Sum && consult {
                    let scale = sum_scales(&input, &case.layout, &case.dims);
                    judge_with(expect, gpu, cpu, reference, &|g, w| {
                        compare_sum(g, w, &scale)
                    })
                } else {
                    // min/max copy an element: exact, bits included.
                    judge(expect, gpu, cpu, reference, true)
                };
                ctx.matrix.record(row, col, case.name, seed, outcome);
            }
        }
    }
}

// ---- fused ops (RocmStorage's softmax_last_dim, rms_norm, add_rms_norm, swiglu, layer_norm,
// rope) ------------------------------------------------------------------------------------
//
// candle-core's CPU backend has no storage-level version of these (they are candle-nn custom
// ops), so the oracle is the published definition evaluated in f64 on the CPU from the very
// inputs (already rounded to the dtype), rounded once to the dtype.

/// `(rows, cols)` of a layout whose last dim is the row.
fn rows_cols(l: &Layout) -> (usize, usize) {
    let dims = l.dims();
    let cols = *dims.last().expect("rank >= 1");
    (dims[..dims.len() - 1].iter().product(), cols)
}

/// softmax over the last dim: `exp(x - max) / sum(exp(x - max))`.
fn softmax_ref(x: &[f64], cols: usize) -> Vec<f64> {
    x.chunks(cols)
        .flat_map(|row| {
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = row.iter().map(|v| (v - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect()
}

/// rms_norm: `x / sqrt(mean(x^2) + eps) * alpha`.
fn rms_norm_ref(x: &[f64], alpha: &[f64], eps: f64) -> Vec<f64> {
    let cols = alpha.len();
    x.chunks(cols)
        .flat_map(|row| {
            let ms = row.iter().map(|v| v * v).sum::<f64>() / cols as f64;
            let r = (ms + eps).sqrt();
            row.iter().zip(alpha).map(move |(v, a)| v / r * a)
        })
        .collect()
}

/// layer_norm: `(x - mean) / sqrt(var + eps) * alpha + beta` (biased variance).
fn layer_norm_ref(x: &[f64], alpha: &[f64], beta: &[f64], eps: f64) -> Vec<f64> {
    let cols = alpha.len();
    x.chunks(cols)
        .flat_map(|row| {
            let mean = row.iter().sum::<f64>() / cols as f64;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / cols as f64;
            let r = (var + eps).sqrt();
            row.iter()
                .zip(alpha.iter().zip(beta))
                .map(move |(v, (a, b))| (v - mean) / r * a + b)
        })
        .collect()
}

/// Rotary embeddings on rows of `d` (logical order of `dims`: `[b, h, t, d]`, or `[b, t, h, d]`
/// for `Thd`), tables `[t, d/2]`: rope and rope_thd rotate `(x[i], x[i + d/2])`, rope_i
/// `(x[2i], x[2i + 1])`, into `(x1 cos - x2 sin, x1 sin + x2 cos)`.
fn rope_ref(kind: RopeKind, x: &[f64], cos: &[f64], sin: &[f64], dims: [usize; 4]) -> Vec<f64> {
    let d = dims[3];
    let half = d / 2;
    let mut out = vec![0.0; x.len()];
    for (r, (row, o)) in x.chunks(d).zip(out.chunks_mut(d)).enumerate() {
        let t = match kind {
            RopeKind::Thd => (r / dims[2]) % dims[1],
            _ => r % dims[2],
        };
        for i in 0..half {
            let (c, s) = (cos[t * half + i], sin[t * half + i]);
            let (a, b) = match kind {
                RopeKind::Interleaved => (2 * i, 2 * i + 1),
                _ => (i, i + half),
            };
            o[a] = row[a] * c - row[b] * s;
            o[b] = row[a] * s + row[b] * c;
        }
    }
    out
}

/// `(rtol, atol)` for the fused ops. Norms in f32 get 1e-4: the kernels accumulate the mean and
/// variance of rows up to 4097 long in f32, and `x - mean` cancels.
fn fused_tolerance(dtype: DType, norm: bool) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-10, 1e-12),
        DType::F32 if norm => (1e-4, 1e-5),
        DType::F32 => (1e-5, 1e-6),
        DType::F16 => (1e-3, 1e-4),
        _ => (1e-2, 1e-3),
    }
}

fn compare_tol(got: &CpuStorage, want: &CpuStorage, rtol: f64, atol: f64) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!(
            "dtype {:?}, expected {:?}",
            got.dtype(),
            want.dtype()
        ));
    }
    let (g, w) = (values_f64(got), values_f64(want));
    if g.len() != w.len() {
        return Err(format!("{} elements, expected {}", g.len(), w.len()));
    }
    let ok = |i: usize| g[i] == w[i] || (g[i] - w[i]).abs() <= rtol * w[i].abs() + atol;
    let bad: Vec<usize> = (0..g.len()).filter(|&i| !ok(i)).collect();
    match bad.first() {
        None => Ok(()),
        Some(&i) => Err(format!(
            "{} of {} elements differ (rtol {rtol:e}, atol {atol:e}); first at {i}: got {}, \
             expected {}",
            bad.len(),
            g.len(),
            g[i],
            w[i]
        )),
    }
}

/// The elements of `s` under `l`, in logical order, as f64.
fn logical_values(s: &CpuStorage, l: &Layout) -> Vec<f64> {
    let v = values_f64(s);
    logical_offsets(l).into_iter().map(|o| v[o]).collect()
}

/// Layouts for the row-wise fused ops: single element, rows of 1, odd lengths, rank 3, a start
/// offset, 4096/4097-long rows, a decode step's one row, many rows; the last one is transposed
/// (a typed layout error).
fn fused_row_cases() -> Vec<Case> {
    vec![
        c("single element", contiguous((1, 1))),
        c("rows of 1", contiguous((5, 1))),
        c("one odd row", contiguous(7)),
        c("odd rows", contiguous((3, 17))),
        c("rank3 with offset", with_offset((2, 3, 33), 5)),
        c("4096-long rows", contiguous((4, 4096))),
        c("decode row", contiguous((1, 1, 4096))),
        c("4097-long rows", contiguous((2, 4097))),
        c("many rows", contiguous((300, 65))),
        c("transposed", Layout::contiguous((17, 3)).transpose(0, 1)),
    ]
}

/// Rope inputs (`[b, h, t, d]`, read as `[b, t, h, d]` by rope_thd); the last one is not
/// contiguous (a typed layout error).
fn rope_cases() -> Vec<Case> {
    vec![
        c("one pair", contiguous((1, 1, 1, 2))),
        c("small", contiguous((2, 3, 5, 8))),
        c("odd half", contiguous((1, 2, 7, 6))),
        c("offset", with_offset((2, 2, 3, 10), 3)),
        c("larger", contiguous((2, 4, 16, 64))),
        c("long rows", contiguous((1, 2, 3, 4096))),
        c(
            "transposed",
            Layout::contiguous((2, 5, 3, 8)).transpose(1, 2),
        ),
    ]
}

fn fused_expect(dtype: DType, l: &Layout) -> Expect {
    let float = dtype.is_float() && dtype != DType::F8E4M3;
    if float && l.is_contiguous() {
        Expect::Pass
    } else {
        Expect::TypedError
    }
}

/// Judges a fused op: the GPU result against the f64 definition (as the oracle).
fn judge_fused(
    expect: Expect,
    gpu: candle_core::Result<CpuStorage>,
    want: Option<Vec<f64>>,
    dtype: DType,
    norm: bool,
) -> Outcome {
    let (rtol, atol) = fused_tolerance(dtype, norm);
    let cpu = want.map(|w| Ok(Ok(storage_from_f64(dtype, &w))));
    judge_with(expect, gpu, cpu, None, &|g, w| {
        compare_tol(g, w, rtol, atol)
    })
}

/// add_rms_norm: the sum `x + r` rounded to the dtype, then its rms_norm; the result stacks
/// both (`(2, shape...)`). The residual is contiguous, x takes the case's layout.
fn run_add_rms_norm(ctx: &mut Ctx, dtype: DType, eps: f32) {
    let (row, col) = ("add_rms_norm", dtype.as_str());
    for case in fused_row_cases() {
        let expect = fused_expect(dtype, &case.layout);
        if !dtype.is_float() && case.name != "odd rows" {
            continue;
        }
        let seed = case_seed(ctx.base, &[row, col, case.name]);
        let mut rng = Rng::new(seed);
        let (_, cols) = rows_cols(&case.layout);
        let n = case.layout.shape().elem_count();
        let x = gen(dtype, needed_len(&case.layout), Dist::General, &mut rng);
        let r = gen(dtype, n, Dist::General, &mut rng);
        let alpha = gen(dtype, cols, Dist::General, &mut rng);
        let (rl, al) = (
            Layout::contiguous(case.layout.shape()),
            Layout::contiguous(cols),
        );
        let (gx, gr, ga) = (ctx.upload(&x), ctx.upload(&r), ctx.upload(&alpha));
        ctx.poison(2 * n * dtype.size_in_bytes());
        let gpu = gpu_result(
            gx.add_rms_norm(&case.layout, &gr, &rl, &ga, &al, eps)
                .map(|(s, _)| s),
        );
        let want = (expect == Expect::Pass).then(|| {
            let xv = logical_values(&x, &case.layout);
            let sum: Vec<f64> = xv.iter().zip(values_f64(&r)).map(|(a, b)| a + b).collect();
            let sum = values_f64(&storage_from_f64(dtype, &sum));
            let normed = rms_norm_ref(&sum, &values_f64(&alpha), eps as f64);
            sum.into_iter().chain(normed).collect()
        });
        let outcome = judge_fused(expect, gpu, want, dtype, true);
        ctx.matrix.record(row, col, case.name, seed, outcome);
    }
}

/// swiglu inputs: even last dims, then an odd one and a transposed one (typed errors).
fn swiglu_cases() -> Vec<Case> {
    vec![
        c("one pair", contiguous((1, 2))),
        c("rows", contiguous((3, 34))),
        c("rank3 with offset", with_offset((2, 3, 66), 5)),
        c("decode row", contiguous((1, 1, 28672))),
        c("many rows", contiguous((300, 130))),
        c("odd last dim", contiguous((3, 17))),
        c("transposed", Layout::contiguous((16, 3)).transpose(0, 1)),
    ]
}

/// swiglu: `silu(a)` rounded to the dtype (as candle's `silu(a) * b`), times `b`.
fn run_swiglu(ctx: &mut Ctx, dtype: DType) {
    let (row, col) = ("swiglu", dtype.as_str());
    for case in swiglu_cases() {
        let (rows, cols) = rows_cols(&case.layout);
        let expect = if cols % 2 == 0 {
            fused_expect(dtype, &case.layout)
        } else {
            Expect::TypedError
        };
        if !dtype.is_float() && case.name != "rows" {
            continue;
        }
        let seed = case_seed(ctx.base, &[row, col, case.name]);
        let mut rng = Rng::new(seed);
        let x = gen(dtype, needed_len(&case.layout), Dist::General, &mut rng);
        let gx = ctx.upload(&x);
        ctx.poison(case.layout.shape().elem_count() / 2 * dtype.size_in_bytes());
        let gpu = gpu_result(gx.swiglu(&case.layout).map(|(s, _)| s));
        let want = (expect == Expect::Pass).then(|| {
            let xv = logical_values(&x, &case.layout);
            let half = cols / 2;
            let silu: Vec<f64> = (0..rows * half)
                .map(|i| xv[(i / half) * cols + i % half])
                .map(|a| a / (1.0 + (-a).exp()))
                .collect();
            let silu = values_f64(&storage_from_f64(dtype, &silu));
            (0..rows * half)
                .map(|i| silu[i] * xv[(i / half) * cols + half + i % half])
                .collect()
        });
        let outcome = judge_fused(expect, gpu, want, dtype, false);
        ctx.matrix.record(row, col, case.name, seed, outcome);
    }
}

fn run_fused(ctx: &mut Ctx) {
    let eps = 1e-5f32;
    for dtype in storage_dtypes() {
        let col = dtype.as_str();
        for row in ["softmax_last_dim", "rms_norm", "layer_norm"] {
            for case in fused_row_cases() {
                let expect = fused_expect(dtype, &case.layout);
                // Non-float dtypes: one case is enough for the typed error.
                if !dtype.is_float() && case.name != "odd rows" {
                    continue;
                }
                let seed = case_seed(ctx.base, &[row, col, case.name]);
                let mut rng = Rng::new(seed);
                let (_, cols) = rows_cols(&case.layout);
                let x = gen(dtype, needed_len(&case.layout), Dist::General, &mut rng);
                let alpha = gen(dtype, cols, Dist::General, &mut rng);
                let beta = gen(dtype, cols, Dist::General, &mut rng);
                let al = Layout::contiguous(cols);
                let (gx, ga, gb) = (ctx.upload(&x), ctx.upload(&alpha), ctx.upload(&beta));
                ctx.poison(case.layout.shape().elem_count() * dtype.size_in_bytes());
                let gpu = gpu_result(match row {
                    "softmax_last_dim" => gx.softmax_last_dim(&case.layout),
                    "rms_norm" => gx.rms_norm(&case.layout, &ga, &al, eps),
                    _ => gx.layer_norm(&case.layout, &ga, &al, &gb, &al, eps),
                });
                let want = (expect == Expect::Pass).then(|| {
                    let xv = logical_values(&x, &case.layout);
                    let (av, bv) = (values_f64(&alpha), values_f64(&beta));
                    match row {
                        "softmax_last_dim" => softmax_ref(&xv, cols),
                        "rms_norm" => rms_norm_ref(&xv, &av, eps as f64),
                        _ => layer_norm_ref(&xv, &av, &bv, eps as f64),
                    }
                });
                let norm = row != "softmax_last_dim";
                let outcome = judge_fused(expect, gpu, want, dtype, norm);
                ctx.matrix.record(row, col, case.name, seed, outcome);
            }
        }
        run_add_rms_norm(ctx, dtype, eps);
        run_swiglu(ctx, dtype);
        for kind in [RopeKind::Rope, RopeKind::Interleaved, RopeKind::Thd] {
            let row = kind.name();
            for case in rope_cases() {
                let expect = fused_expect(dtype, &case.layout);
                if !dtype.is_float() && case.name != "small" {
                    continue;
                }
                let seed = case_seed(ctx.base, &[row, col, case.name]);
                let mut rng = Rng::new(seed);
                let dims: [usize; 4] = case.layout.dims().try_into().expect("rank 4");
                let t = if kind == RopeKind::Thd {
                    dims[1]
                } else {
                    dims[2]
                };
                let half = dims[3] / 2;
                let angles: Vec<f64> = (0..t * half)
                    .map(|_| rng.uniform(-std::f64::consts::PI, std::f64::consts::PI))
                    .collect();
                let cos =
                    storage_from_f64(dtype, &angles.iter().map(|a| a.cos()).collect::<Vec<_>>());
                let sin =
                    storage_from_f64(dtype, &angles.iter().map(|a| a.sin()).collect::<Vec<_>>());
                let x = gen(dtype, needed_len(&case.layout), Dist::General, &mut rng);
                let tl = Layout::contiguous((t, half));
                let (gx, gc, gs) = (ctx.upload(&x), ctx.upload(&cos), ctx.upload(&sin));
                ctx.poison(case.layout.shape().elem_count() * dtype.size_in_bytes());
                let gpu = gpu_result(gx.rope(&case.layout, &gc, &tl, &gs, &tl, kind));
                let want = (expect == Expect::Pass).then(|| {
                    let xv = logical_values(&x, &case.layout);
                    rope_ref(kind, &xv, &values_f64(&cos), &values_f64(&sin), dims)
                });
                let outcome = judge_fused(expect, gpu, want, dtype, false);
                ctx.matrix.record(row, col, case.name, seed, outcome);
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// GPU tests
// ------------------------------------------------------------------------------------------

#[test]
#[ignore = "needs a GPU"]
fn conformance_matrix() {
    let mut ctx = Ctx::new();
    eprintln!("conformance on {:?}, base seed {:#x}", ctx.dev, ctx.base);
    run_unary(&mut ctx);
    run_affine_powf_elu(&mut ctx);
    run_to_dtype(&mut ctx);
    run_binary(&mut ctx);
    run_cmp(&mut ctx);
    run_where(&mut ctx);
    run_copies(&mut ctx);
    run_reduce(&mut ctx);
    run_fused(&mut ctx);
    indexing::run_indexing(&mut ctx);
    pool::run_pool(&mut ctx);
    rope_kv::run_rope_kv(&mut ctx);
    blas::run_matmul(&mut ctx);
    blas::run_conv(&mut ctx);
    println!("{}", ctx.matrix.render());
    // docs/ops.md is this table: `CANDLE_ROCM_OPS_MD=path` writes it as markdown.
    if let Some(path) = std::env::var_os("CANDLE_ROCM_OPS_MD") {
        let device = format!("{:?}", ctx.dev);
        std::fs::write(&path, ctx.matrix.render_markdown(&device))
            .unwrap_or_else(|e| panic!("writing {path:?}: {e}"));
    }
    if !ctx.matrix.failures.is_empty() {
        let mut msg = format!("{} failing case(s):\n", ctx.matrix.failures.len());
        for f in ctx.matrix.failures.iter().take(60) {
            let _ = writeln!(msg, "  {f}");
        }
        panic!("{msg}");
    }
}

fn typed(e: &candle_core::Error) -> &RocmError {
    RocmError::from_candle(e).unwrap_or_else(|| panic!("expected a typed RocmError, got: {e}"))
}

#[test]
#[ignore = "needs a GPU"]
fn matmul_rejects_unreadable_layouts_and_mismatches() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    blas::check_matmul_rejections(&dev);
}

#[test]
#[ignore = "needs a GPU"]
fn operand_mismatches_and_bad_layouts_are_errors_not_panics() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let a = dev.storage_from_slice(&[1f32, 2., 3., 4., 5., 6.]).unwrap();
    let b = dev.storage_from_slice(&[1f64, 2., 3., 4., 5., 6.]).unwrap();
    let l = Layout::contiguous((2, 3));
    let e = a
        .binary_impl::<op::Add>(&b, &l, &l)
        .unwrap_err()
        .to_string();
    assert!(e.contains("dtype mismatch"), "{e}");
    let e = a.cmp(CmpOp::Eq, &b, &l, &l).unwrap_err().to_string();
    assert!(e.contains("dtype mismatch"), "{e}");
    let e = a
        .binary_impl::<op::Add>(&a, &l, &Layout::contiguous((3, 2)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("shape mismatch"), "{e}");
    // A layout reaching past the buffer: a typed layout error, no launch.
    let e = a
        .unary_impl::<op::Exp>(&Layout::contiguous_with_offset((2, 3), 1))
        .unwrap_err();
    assert!(matches!(typed(&e), RocmError::Layout { .. }), "{e}");
    let mut dst = dev.zeros_impl(&Shape::from(4), DType::F32).unwrap();
    let e = a.copy_strided_src(&mut dst, 0, &l).unwrap_err();
    assert!(matches!(typed(&e), RocmError::Layout { .. }), "{e}");
    let e = a.copy2d(&mut dst, 2, 3, 3, 3, 0, 0).unwrap_err();
    assert!(matches!(typed(&e), RocmError::Layout { .. }), "{e}");
    let e = a
        .copy_strided_src(&mut b.try_clone(&l).unwrap(), 0, &l)
        .unwrap_err();
    assert!(e.to_string().contains("dtype mismatch"), "{e}");
    // const_set with a scalar of another dtype.
    let mut c = a.try_clone(&l).unwrap();
    let e = c.const_set(1f64.to_scalar(), &l).unwrap_err().to_string();
    assert!(e.contains("const_set"), "{e}");
    // An empty view whose start offset lies past the end reads nothing (candle's CPU backend
    // slices out of range here).
    let empty = Layout::contiguous_with_offset((0, 3), 100);
    let r = a.unary_impl::<op::Exp>(&empty).unwrap();
    assert_eq!(
        r.to_cpu_storage().unwrap().as_slice::<f32>().unwrap().len(),
        0
    );
    // Formats without device storage.
    for dtype in [DType::F4, DType::F6E2M3, DType::F6E3M2, DType::F8E8M0] {
        let e = dev.zeros_impl(&Shape::from(3), dtype).unwrap_err();
        assert!(matches!(typed(&e), RocmError::Unsupported { .. }), "{e}");
        let e = a.to_dtype(&l, dtype).unwrap_err();
        assert!(typed(&e).to_string().contains(dtype.as_str()), "{e}");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn argmin_argmax_over_several_dims_or_none_are_refused_as_on_the_cpu() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let data: Vec<f32> = (0..24).map(|i| ((i * 7) % 24) as f32).collect();
    let x = dev.storage_from_slice(&data).unwrap();
    let cpu = CpuStorage::F32(data);
    let l = Layout::contiguous((2, 3, 4));
    for (op, name) in [(ReduceOp::ArgMin, "argmin"), (ReduceOp::ArgMax, "argmax")] {
        for dims in [&[0usize, 1][..], &[]] {
            let e = x.reduce_op(op, &l, dims).unwrap_err();
            match without_backtrace(&e) {
                candle_core::Error::OnlySingleDimension { op: o, dims: d } => {
                    assert_eq!((*o, d.as_slice()), (name, dims), "{e}")
                }
                other => panic!("{name} over {dims:?}: expected OnlySingleDimension, got {other}"),
            }
            assert_eq!(
                without_backtrace(&e).to_string(),
                format!("{name} can only be performed on a single dimension")
            );
            same_refusal(Err(e), Ok(cpu.reduce_op(op, &l, dims)))
                .unwrap_or_else(|m| panic!("{name} over {dims:?}: {m}"));
        }
        // One dim still computes (first index of the extreme along dim 1).
        let r = x.reduce_op(op, &l, &[1]).unwrap().to_cpu_storage().unwrap();
        let want = cpu.reduce_op(op, &l, &[1]).unwrap();
        assert_eq!(
            r.as_slice::<u32>().unwrap(),
            want.as_slice::<u32>().unwrap()
        );
    }
}

#[test]
#[ignore = "needs a GPU"]
fn device_identity_seed_and_synchronize() {
    let d0 = RocmDevice::new(0).expect("opening GPU 0");
    let again = RocmDevice::new(0).unwrap();
    assert!(d0.same_device(&again));
    assert_eq!(
        d0.location(),
        candle_core::DeviceLocation::Cuda { gpu_id: 0 }
    );
    assert_eq!(
        d0.get_current_seed().unwrap(),
        candle_rocm::device::DEFAULT_SEED
    );
    d0.set_seed(42).unwrap();
    assert_eq!(d0.get_current_seed().unwrap(), 42);
    assert_eq!(
        d0.clone().get_current_seed().unwrap(),
        42,
        "clones share the seed"
    );
    d0.synchronize().unwrap();
    let s = d0
        .storage_from_cpu_storage_owned(CpuStorage::I16(vec![1, -2, 3]))
        .unwrap();
    assert_eq!(s.dtype(), DType::I16);
    assert!(s.device().same_device(&d0));
    // SAFETY: the storage is written (by the copy below) before it is read.
    let mut u = unsafe { d0.alloc_uninit(&Shape::from(3), DType::I16) }.unwrap();
    s.copy_strided_src(&mut u, 0, &Layout::contiguous(3))
        .unwrap();
    assert_eq!(
        u.to_cpu_storage().unwrap().as_slice::<i16>().unwrap(),
        &[1, -2, 3]
    );
}

// ------------------------------------------------------------------------------------------
// Tier 1: the suite's own logic, no GPU needed
// ------------------------------------------------------------------------------------------

#[test]
fn opening_a_device_never_panics() {
    // Without a GPU (or without ROCm/CUDA) this is an error that says why; with one it works.
    match RocmDevice::new(0) {
        Ok(d) => assert_eq!(d.ordinal(), 0),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

#[test]
fn tolerances_are_relative_with_a_tiny_floor() {
    assert!(close(1.0, 1.0 + 0.9e-5, tolerance(DType::F32)));
    assert!(!close(1.0, 1.0 + 2e-5, tolerance(DType::F32)));
    assert!(close(1000.0, 1000.009, tolerance(DType::F32)));
    assert!(close(f64::NAN, f64::NAN, 1e-5));
    assert!(!close(f64::NAN, 1.0, 1e-5));
    assert!(close(f64::INFINITY, f64::INFINITY, 1e-5));
    assert!(!close(f64::INFINITY, f64::NEG_INFINITY, 1e-5));
    assert!(!close(0.0, 1e-6, tolerance(DType::F32)));
    // One ulp of every float dtype passes its tolerance.
    assert!(close(1.0, 1.0 + 2f64.powi(-7), tolerance(DType::BF16)));
    assert!(close(1.0, 1.0 + 2f64.powi(-10), tolerance(DType::F16)));
    assert!(close(1.0, 1.0 + 2f64.powi(-23), tolerance(DType::F32)));
    assert!(close(1.0, 1.0 + 2f64.powi(-52), tolerance(DType::F64)));
}

#[test]
fn comparisons_are_exact_for_integers_and_report_the_first_difference() {
    let a = CpuStorage::I64(vec![1, 2, i64::MAX]);
    let b = CpuStorage::I64(vec![1, 2, i64::MAX - 1]);
    let e = compare(&a, &b, false).unwrap_err();
    assert!(e.contains("first at 2"), "{e}");
    assert!(compare(&a, &a, false).is_ok());
    let f = CpuStorage::F32(vec![1.0, f32::NAN]);
    assert!(compare(&f, &f, true).is_ok());
    assert!(compare(&f, &CpuStorage::F64(vec![1.0, f64::NAN]), false).is_err());
}

#[test]
fn logical_offsets_follow_strides_and_offsets() {
    let l = Layout::contiguous((2, 3)).transpose(0, 1).unwrap();
    assert_eq!(logical_offsets(&l), vec![0, 3, 1, 4, 2, 5]);
    let l = Layout::contiguous((4, 5)).narrow(0, 1, 2).unwrap();
    assert_eq!(logical_offsets(&l), (5..15).collect::<Vec<_>>());
    let l = Layout::contiguous((1, 2)).broadcast_as((3, 2)).unwrap();
    assert_eq!(logical_offsets(&l), vec![0, 1, 0, 1, 0, 1]);
    assert_eq!(
        logical_offsets(&Layout::contiguous_with_offset((), 4)),
        vec![4]
    );
    assert!(logical_offsets(&Layout::contiguous((0, 3))).is_empty());
}

#[test]
fn every_test_layout_fits_its_storage_and_the_cases_cover_the_brief() {
    let check = |l: &Layout| {
        let len = needed_len(l);
        assert!(
            candle_rocm::layout::layout_range("t", l, len).is_ok(),
            "{l:?} does not fit {len}"
        );
    };
    let cases = unary_cases();
    for c in &cases {
        check(&c.layout);
    }
    let ranks: std::collections::BTreeSet<usize> =
        cases.iter().map(|c| c.layout.dims().len()).collect();
    assert!((0..=4).all(|r| ranks.contains(&r)), "ranks {ranks:?}");
    assert!(
        cases.iter().any(|c| c.layout.stride().contains(&0)),
        "broadcast"
    );
    assert!(cases.iter().any(|c| c.layout.start_offset() > 0), "offset");
    assert!(
        cases.iter().any(|c| c.layout.shape().elem_count() == 0),
        "empty"
    );
    assert!(
        cases.iter().any(|c| c.layout.shape().elem_count() == 1),
        "single"
    );
    assert!(
        cases.iter().any(|c| !c.layout.is_contiguous()),
        "non-contiguous"
    );
    for c in binary_cases() {
        assert_eq!(c.lhs.dims(), c.rhs.dims(), "{}", c.name);
        check(&c.lhs);
        check(&c.rhs);
    }
    for c in reduce_cases() {
        check(&c.layout);
        assert!(
            c.dims.iter().all(|&d| d < c.layout.dims().len()),
            "{}",
            c.name
        );
    }
    for c in fused_row_cases().iter().chain(&rope_cases()) {
        check(&c.layout);
    }
    assert!(rope_cases().iter().all(|c| c.layout.dims()[3] % 2 == 0));
    for c in where_cases() {
        assert_eq!(c.cond.dims(), c.t.dims(), "{}", c.name);
        assert_eq!(c.cond.dims(), c.f.dims(), "{}", c.name);
        check(&c.cond);
        check(&c.t);
        check(&c.f);
    }
}

#[test]
fn generated_inputs_keep_the_cpu_oracle_away_from_its_panics() {
    // Integer inputs for each op must not overflow (candle's CPU backend panics on overflow in
    // debug builds) nor divide by zero. Run the CPU ops the suite consults on them.
    let mut rng = Rng::new(base_seed());
    let l = Layout::contiguous(2000);
    for dtype in KERNEL_DTYPES {
        let g = |d, rng: &mut Rng| gen(dtype, 2000, d, rng);
        let (hi, lo) = (g(Dist::High, &mut rng), g(Dist::Low, &mut rng));
        hi.binary_impl::<op::Sub>(&lo, &l, &l).unwrap();
        let (a, b) = (g(Dist::Small, &mut rng), g(Dist::Small, &mut rng));
        a.binary_impl::<op::Mul>(&b, &l, &l).unwrap();
        a.affine(&l, 3.0, 2.0).unwrap();
        let (a, b) = (g(Dist::General, &mut rng), g(Dist::General, &mut rng));
        a.binary_impl::<op::Add>(&b, &l, &l).unwrap();
        a.unary_impl::<op::Abs>(&l).unwrap();
        let (a, b) = (g(Dist::High, &mut rng), g(Dist::NonZero, &mut rng));
        a.binary_impl::<op::Div>(&b, &l, &l).unwrap();
        let c = g(Dist::CastMix, &mut rng);
        for dst in KERNEL_DTYPES {
            c.to_dtype(&l, dst).unwrap();
        }
    }
}

#[test]
fn the_matrix_merges_cases_and_reports_failures_with_seeds() {
    let mut m = Matrix::new(7);
    m.record("unary exp", "f32", "a", 1, Outcome::Pass);
    m.record(
        "unary exp",
        "f32",
        "b",
        2,
        Outcome::PassReference("x".into()),
    );
    m.record("unary exp", "u8", "a", 3, Outcome::TypedError);
    m.record("unary log", "f32", "a", 4, Outcome::Fail("boom".into()));
    m.record("unary log", "f32", "b", 5, Outcome::Pass);
    let r = m.render();
    assert!(
        r.contains("ok*") && r.contains("err") && r.contains("FAIL"),
        "{r}"
    );
    assert_eq!(m.failures.len(), 1);
    assert!(m.failures[0].contains("0x4") && m.failures[0].contains("CANDLE_ROCM_SEED=7"));
    assert_eq!(
        m.cells[&("unary log".to_string(), "f32".to_string())],
        Outcome::Fail("boom".into())
    );
}

#[test]
fn references_agree_with_the_cpu_oracle_where_it_is_right() {
    // The independent references are only trusted if they match candle's CPU backend where that
    // one is known to be right (f32/f64, and casts). Checked here without a GPU.
    fn unary<B: UnaryOpT + 'static>(dist: Dist) {
        for dtype in [DType::F32, DType::F64] {
            // Empty layouts are skipped: the CPU backend panics on some of them (a zero inner
            // dim after a narrow), and the suite compares them with an empty reference. Large layouts
            // are skipped to keep this tier-1 test fast in debug builds.
            let small = |c: &Case| (1..=1000).contains(&c.layout.shape().elem_count());
            for case in unary_cases().into_iter().filter(small) {
                let mut rng = Rng::new(case_seed(1, &[B::NAME, case.name]));
                let input = gen(dtype, needed_len(&case.layout), dist, &mut rng);
                let want = input.unary_impl::<B>(&case.layout).unwrap();
                let r = Reference::Float(Box::new(B::f64));
                let got = reference1(&r, &input, &case.layout).unwrap();
                compare(&got, &want, false)
                    .unwrap_or_else(|e| panic!("{} {dtype:?} {}: {e}", B::NAME, case.name));
            }
        }
    }
    unary::<op::Exp>(Dist::General);
    unary::<op::Log>(Dist::Positive);
    unary::<op::Sin>(Dist::General);
    unary::<op::Cos>(Dist::General);
    unary::<op::Tanh>(Dist::General);
    unary::<op::Neg>(Dist::General);
    unary::<op::Recip>(Dist::NonZero);
    unary::<op::Sqr>(Dist::General);
    unary::<op::Sqrt>(Dist::Positive);
    // The CPU's f32 gelu and gelu_erf lose relative precision for x << 0 (0.5 x (1 + tanh z)
    // cancels: up to ~1e-4 relative at x = -4), so the reference is checked against them on
    // positive inputs only; the suite itself draws from [-4, 4) and falls back to the reference.
    unary::<op::Gelu>(Dist::Positive);
    unary::<op::GeluErf>(Dist::Positive);
    unary::<op::Erf>(Dist::General);
    unary::<op::Silu>(Dist::General);
    unary::<op::Abs>(Dist::General);
    unary::<op::Ceil>(Dist::General);
    unary::<op::Floor>(Dist::General);
    unary::<op::Round>(Dist::General);
    unary::<op::Relu>(Dist::General);
    unary::<op::Sign>(Dist::FewValues);

    let l = Layout::contiguous((7, 11)).transpose(0, 1).unwrap();
    for dtype in [DType::F32, DType::F64] {
        let mut rng = Rng::new(2);
        let x = gen(dtype, 80, Dist::General, &mut rng);
        let p = gen(dtype, 80, Dist::Positive, &mut rng);
        let (m, a) = (round_to(dtype, 1.7), round_to(dtype, -0.3));
        let cases: Vec<(&str, &CpuStorage, CpuStorage, Reference)> = vec![
            (
                "affine",
                &x,
                x.affine(&l, 1.7, -0.3).unwrap(),
                Reference::Float(Box::new(move |v| v * m + a)),
            ),
            (
                "powf",
                &p,
                p.powf(&l, 2.3).unwrap(),
                Reference::Float(Box::new(move |v| v.powf(round_to(dtype, 2.3)))),
            ),
            (
                "elu",
                &x,
                x.elu(&l, 0.7).unwrap(),
                Reference::Float(Box::new(move |v| {
                    if v >= 0.0 {
                        v
                    } else {
                        round_to(dtype, 0.7) * v.exp_m1()
                    }
                })),
            ),
        ];
        for (name, input, want, r) in cases {
            let got = reference1(&r, input, &l).unwrap();
            compare(&got, &want, false).unwrap_or_else(|e| panic!("{name} {dtype:?}: {e}"));
        }
    }

    // Casts: the reference is Rust's `as`, which is what the CPU backend does (bar f16/bf16
    // rounding paths, compared with tolerance).
    for src in KERNEL_DTYPES {
        for dst in KERNEL_DTYPES {
            let small = |c: &Case| (1..=1000).contains(&c.layout.shape().elem_count());
            for case in unary_cases().into_iter().filter(small) {
                let mut rng = Rng::new(case_seed(3, &[src.as_str(), dst.as_str(), case.name]));
                let input = gen(src, needed_len(&case.layout), Dist::CastMix, &mut rng);
                let want = input.to_dtype(&case.layout, dst).unwrap();
                let got = cast_reference(&input, &case.layout, dst).unwrap();
                compare(&got, &want, false)
                    .unwrap_or_else(|e| panic!("cast {src:?} -> {dst:?} {}: {e}", case.name));
            }
        }
    }
    // f8e4m3 <-> every dtype, but f8e4m3 -> f64 (the oracle recurses forever there).
    for other in KERNEL_DTYPES {
        for (src, dst) in [(other, DType::F8E4M3), (DType::F8E4M3, other)] {
            if (src, dst) == (DType::F8E4M3, DType::F64) {
                continue;
            }
            let case = Case {
                name: "f8",
                layout: Layout::contiguous(600),
            };
            let mut rng = Rng::new(case_seed(4, &[src.as_str(), dst.as_str()]));
            let input = gen(src, needed_len(&case.layout), Dist::CastMix, &mut rng);
            let want = input.to_dtype(&case.layout, dst).unwrap();
            let got = cast_reference(&input, &case.layout, dst).unwrap();
            compare(&got, &want, false).unwrap_or_else(|e| panic!("cast {src:?} -> {dst:?}: {e}"));
        }
    }
}

#[path = "../examples/custom_kernel.rs"]
mod custom_kernel;

/// A downstream HIP kernel through rocm-kernels' pipeline, on a storage's buffer, ordered with
/// the ops before and after it; a buffer from another stream is refused.
#[test]
#[ignore = "needs a GPU"]
fn custom_kernel_on_storage_buffers() {
    use candle_core::backend::{BackendDevice, BackendStorage};
    let device = candle_rocm::RocmDevice::new(0).unwrap();
    let n = 100_003usize;
    let data: Vec<f32> = (0..n).map(|i| (i as f32 - 50_000.0) * 1e-3).collect();
    let layout = candle_core::Layout::contiguous(n);
    // An op before the kernel, the kernel, an op after it.
    let mut s = device
        .storage_from_slice(&data)
        .unwrap()
        .affine(&layout, 3.0, 0.5)
        .unwrap();
    custom_kernel::clamp_in_place(&mut s, -10.0, 20.0).unwrap();
    let out = s.affine(&layout, 1.0, -1.0).unwrap();
    let candle_core::CpuStorage::F32(got) = out.to_cpu_storage().unwrap() else {
        panic!("not f32")
    };
    for (i, (g, x)) in got.iter().zip(&data).enumerate() {
        // affine may fuse x * 3 + 0.5 into one rounding: compare to within an ulp or two.
        let want = (x * 3.0 + 0.5).clamp(-10.0, 20.0) - 1.0;
        assert!(
            (g - want).abs() <= 2e-6 * want.abs().max(1.0),
            "element {i}: {g} vs {want}"
        );
    }
    // A buffer allocated on another stream cannot be wrapped.
    let other = device.hip_device().create_stream().unwrap();
    let buf = other.alloc_zeroed::<f32>(4).unwrap();
    let e = candle_rocm::RocmStorage::from_slice(candle_rocm::RocmStorageSlice::F32(buf), device)
        .unwrap_err();
    assert!(e.to_string().contains("not on the stream"), "{e}");
}

#[test]
fn the_cpu_oracle_refuses_exactly_the_arg_reductions_the_suite_expects_refused() {
    // run_reduce expects argmin/argmax over several dims (or none) to be refused with the CPU's
    // error; the rule must be the CPU's own, and `same_refusal` must tell errors apart.
    let mut cases = reduce_cases();
    cases.push(rc("no dims", contiguous((2, 3, 4)), &[]));
    for case in cases {
        for (op, name) in [(ReduceOp::ArgMin, "argmin"), (ReduceOp::ArgMax, "argmax")] {
            let mut rng = Rng::new(case_seed(6, &[case.name, name]));
            let input = reduce_input(op, DType::F32, &case, &mut rng);
            let cpu = oracle(|| input.reduce_op(op, &case.layout, &case.dims));
            if arg_reduce_refused(op, &case.dims) {
                let ours = candle_core::Error::OnlySingleDimension {
                    op: name,
                    dims: case.dims.clone(),
                };
                same_refusal(Err(ours.bt()), cpu)
                    .unwrap_or_else(|m| panic!("{name} {}: {m}", case.name));
            } else if let Ok(Err(e)) = cpu {
                assert!(
                    !matches!(
                        without_backtrace(&e),
                        candle_core::Error::OnlySingleDimension { .. }
                    ),
                    "{name} {}: {e}",
                    case.name
                );
            }
        }
    }
    let cpu = CpuStorage::F32(vec![0.0; 6]);
    let l = Layout::contiguous((2, 3));
    let refused = || oracle(|| cpu.reduce_op(ReduceOp::ArgMax, &l, &[0, 1]));
    let wrong_op = candle_core::Error::OnlySingleDimension {
        op: "argmin",
        dims: vec![0, 1],
    };
    assert!(same_refusal(Err(wrong_op), refused()).is_err());
    assert!(same_refusal(Ok(()), refused()).is_err());
    let computed = oracle(|| cpu.reduce_op(ReduceOp::ArgMax, &l, &[1]));
    assert!(same_refusal(Err(candle_core::Error::Msg("x".into())), computed).is_err());
}

#[test]
fn reduce_references_agree_with_the_cpu_oracle_where_it_is_right() {
    // Where candle's CPU backend is right (one reduced dim, no size-1 stride-0 reduced dim, no
    // overflow, non-empty), the reduction reference must match it, and the groups must cover
    // every input element once.
    for case in reduce_cases() {
        let n = case.layout.shape().elem_count();
        let groups = reduce_groups(&case.layout, &case.dims);
        assert_eq!(
            groups.iter().map(Vec::len).sum::<usize>(),
            n,
            "{}",
            case.name
        );
        let quirk = case.dims.len() != 1
            || n == 0
            || case.layout.stride()[case.dims[0]] == 0 && case.layout.dims()[case.dims[0]] == 1;
        for dtype in [DType::I32, DType::I64, DType::F32, DType::F64] {
            for op in [
                ReduceOp::Sum,
                ReduceOp::Min,
                ReduceOp::Max,
                ReduceOp::ArgMin,
                ReduceOp::ArgMax,
            ] {
                if quirk && op != ReduceOp::Sum {
                    continue;
                }
                let mut rng = Rng::new(case_seed(4, &[case.name, dtype.as_str()]));
                let input = reduce_input(op, dtype, &case, &mut rng);
                let want = input.reduce_op(op, &case.layout, &case.dims).unwrap();
                let got = reduce_reference(op, &input, &case.layout, &case.dims);
                let r = if op == ReduceOp::Sum {
                    let scale = sum_scales(&input, &case.layout, &case.dims);
                    compare_sum(&got, &want, &scale)
                } else {
                    compare(&got, &want, true)
                };
                r.unwrap_or_else(|e| panic!("{op:?} {dtype:?} {}: {e}", case.name));
            }
        }
    }
    // The sum tolerance catches one missing element of a long row, and wraps integers.
    let x = CpuStorage::F32(vec![0.5; 4096]);
    let l = Layout::contiguous(4096);
    let scale = sum_scales(&x, &l, &[0]);
    assert!(compare_sum(
        &CpuStorage::F32(vec![2047.5]),
        &CpuStorage::F32(vec![2048.0]),
        &scale
    )
    .is_err());
    let s = reduce_reference(
        ReduceOp::Sum,
        &CpuStorage::U8(vec![200, 100]),
        &Layout::contiguous(2),
        &[0],
    );
    assert_eq!(s.as_slice::<u8>().unwrap(), &[44]);
    // Several dims: indices row-major over the reduced dims; NaN first wins, NaN later skipped.
    let x = CpuStorage::F32(vec![1.0, f32::NAN, 0.5, 3.0, f32::NAN, 2.0]);
    let l = Layout::contiguous((2, 3));
    let a = reduce_reference(ReduceOp::ArgMin, &x, &l, &[0, 1]);
    assert_eq!(a.as_slice::<u32>().unwrap(), &[2]);
    let a = reduce_reference(ReduceOp::ArgMax, &x, &l, &[0]);
    assert_eq!(a.as_slice::<u32>().unwrap(), &[1, 0, 1]);
}

#[test]
fn fused_references_agree_with_candle_tensor_ops_on_the_cpu() {
    use candle_core::{Device, Tensor, D};
    let dev = Device::Cpu;
    let mut rng = Rng::new(5);
    let (rows, cols) = (5usize, 37usize);
    let xs: Vec<f64> = (0..rows * cols).map(|_| rng.uniform(-4.0, 4.0)).collect();
    let al: Vec<f64> = (0..cols).map(|_| rng.uniform(-4.0, 4.0)).collect();
    let be: Vec<f64> = (0..cols).map(|_| rng.uniform(-4.0, 4.0)).collect();
    let x = Tensor::from_vec(xs.clone(), (rows, cols), &dev).unwrap();
    let a = Tensor::from_vec(al.clone(), cols, &dev).unwrap();
    let b = Tensor::from_vec(be.clone(), cols, &dev).unwrap();
    let eps = 1e-5;
    let check = |name: &str, got: Vec<f64>, want: &Tensor| {
        let want: Vec<f64> = want.flatten_all().unwrap().to_vec1().unwrap();
        let g = CpuStorage::F64(got);
        compare(&g, &CpuStorage::F64(want), false).unwrap_or_else(|e| panic!("{name}: {e}"));
    };
    let e = x
        .broadcast_sub(&x.max_keepdim(D::Minus1).unwrap())
        .unwrap()
        .exp()
        .unwrap();
    let sm = e.broadcast_div(&e.sum_keepdim(D::Minus1).unwrap()).unwrap();
    check("softmax", softmax_ref(&xs, cols), &sm);
    let ms = x.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
    let rms = x
        .broadcast_div(&(ms + eps).unwrap().sqrt().unwrap())
        .unwrap()
        .broadcast_mul(&a)
        .unwrap();
    check("rms_norm", rms_norm_ref(&xs, &al, eps), &rms);
    let xc = x
        .broadcast_sub(&x.mean_keepdim(D::Minus1).unwrap())
        .unwrap();
    let var = xc.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
    let ln = xc
        .broadcast_div(&(var + eps).unwrap().sqrt().unwrap())
        .unwrap()
        .broadcast_mul(&a)
        .unwrap()
        .broadcast_add(&b)
        .unwrap();
    check("layer_norm", layer_norm_ref(&xs, &al, &be, eps), &ln);

    // rope / rope_i / rope_thd through narrow/cat/reshape on [b, h, t, d].
    let (bs, h, t, d) = (2usize, 3usize, 4usize, 6usize);
    let xs: Vec<f64> = (0..bs * h * t * d)
        .map(|_| rng.uniform(-4.0, 4.0))
        .collect();
    let ang: Vec<f64> = (0..t * d / 2).map(|_| rng.uniform(-3.0, 3.0)).collect();
    let cv: Vec<f64> = ang.iter().map(|a| a.cos()).collect();
    let sv: Vec<f64> = ang.iter().map(|a| a.sin()).collect();
    let cos = Tensor::from_vec(cv.clone(), (t, d / 2), &dev).unwrap();
    let sin = Tensor::from_vec(sv.clone(), (t, d / 2), &dev).unwrap();
    let rotate = |x1: &Tensor, x2: &Tensor, c: &Tensor, s: &Tensor| {
        let o1 = (x1.broadcast_mul(c).unwrap() - x2.broadcast_mul(s).unwrap()).unwrap();
        let o2 = (x1.broadcast_mul(s).unwrap() + x2.broadcast_mul(c).unwrap()).unwrap();
        (o1, o2)
    };
    let x = Tensor::from_vec(xs.clone(), (bs, h, t, d), &dev).unwrap();
    let (o1, o2) = rotate(
        &x.narrow(3, 0, d / 2).unwrap(),
        &x.narrow(3, d / 2, d / 2).unwrap(),
        &cos,
        &sin,
    );
    let rope = Tensor::cat(&[o1, o2], 3).unwrap();
    check(
        "rope",
        rope_ref(RopeKind::Rope, &xs, &cv, &sv, [bs, h, t, d]),
        &rope,
    );
    let xp = x.reshape((bs, h, t, d / 2, 2)).unwrap();
    let (c5, s5) = (cos.unsqueeze(2).unwrap(), sin.unsqueeze(2).unwrap());
    let (o1, o2) = rotate(
        &xp.narrow(4, 0, 1).unwrap(),
        &xp.narrow(4, 1, 1).unwrap(),
        &c5,
        &s5,
    );
    let rope_i = Tensor::cat(&[o1, o2], 4).unwrap();
    let got = rope_ref(RopeKind::Interleaved, &xs, &cv, &sv, [bs, h, t, d]);
    check("rope_i", got, &rope_i);
    // rope_thd: the same rotation on [b, t, h, d] (tables broadcast over h).
    let xt = Tensor::from_vec(xs.clone(), (bs, t, h, d), &dev).unwrap();
    let (ct, st) = (cos.unsqueeze(1).unwrap(), sin.unsqueeze(1).unwrap());
    let (o1, o2) = rotate(
        &xt.narrow(3, 0, d / 2).unwrap(),
        &xt.narrow(3, d / 2, d / 2).unwrap(),
        &ct,
        &st,
    );
    let thd = Tensor::cat(&[o1, o2], 3).unwrap();
    check(
        "rope_thd",
        rope_ref(RopeKind::Thd, &xs, &cv, &sv, [bs, t, h, d]),
        &thd,
    );
}

fn host<T: WithDType>(s: &RocmStorage) -> Vec<T> {
    s.to_cpu_storage()
        .unwrap()
        .as_slice::<T>()
        .unwrap()
        .to_vec()
}

#[test]
#[ignore = "needs a GPU"]
fn indexing_ops_match_cpu_for_u32_and_i64_ids() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let cpu = CpuDevice;
    let src: Vec<f32> = (0..12).map(|x| x as f32).collect();
    let l = Layout::contiguous((3, 4));
    let (g, c) = (
        dev.storage_from_slice(&src).unwrap(),
        cpu.storage_from_slice(&src).unwrap(),
    );
    // ids as u32 and as i64 (the same values).
    let sel = [2u32, 0, 1, 2];
    let gat = [0u32, 2, 1, 0, 1, 1, 2, 0, 0, 0, 2, 2];
    for wide in [false, true] {
        let up = |v: &[u32]| -> (RocmStorage, CpuStorage) {
            if wide {
                let w: Vec<i64> = v.iter().map(|&x| x as i64).collect();
                (
                    dev.storage_from_slice(&w).unwrap(),
                    cpu.storage_from_slice(&w).unwrap(),
                )
            } else {
                (
                    dev.storage_from_slice(v).unwrap(),
                    cpu.storage_from_slice(v).unwrap(),
                )
            }
        };
        // index_select along dim 0 and dim 1.
        let (gi, ci) = up(&sel);
        let il = Layout::contiguous(4);
        for dim in [0, 1] {
            // dim 0 has size 3: the last three ids, through an offset view.
            let ids_l = if dim == 0 {
                Layout::contiguous_with_offset(3, 1)
            } else {
                il.clone()
            };
            let r = g.index_select(&gi, &l, &ids_l, dim).unwrap();
            let e = c.index_select(&ci, &l, &ids_l, dim).unwrap();
            assert_eq!(
                host::<f32>(&r),
                e.as_slice::<f32>().unwrap(),
                "index_select {dim}"
            );
        }
        // gather along dim 0 (ids the source's shape).
        let (gg, cg) = up(&gat);
        let r = g.gather(&l, &gg, &l, 0).unwrap();
        let e = c.gather(&l, &cg, &l, 0).unwrap();
        assert_eq!(host::<f32>(&r), e.as_slice::<f32>().unwrap(), "gather");
        // scatter_set / scatter_add_set along dim 1 with a permutation per row (no repeats).
        let perm = [3u32, 0, 2, 1, 1, 2, 0, 3, 0, 1, 2, 3];
        let (gp, cp) = up(&perm);
        let upd: Vec<f32> = (0..12).map(|x| 100.0 + x as f32).collect();
        let (gu, cu) = (
            dev.storage_from_slice(&upd).unwrap(),
            cpu.storage_from_slice(&upd).unwrap(),
        );
        let mut gd = g.try_clone(&l).unwrap();
        let mut cd = c.try_clone(&l).unwrap();
        gd.scatter_set(&l, &gp, &l, &gu, &l, 1).unwrap();
        cd.scatter_set(&l, &cp, &l, &cu, &l, 1).unwrap();
        assert_eq!(
            host::<f32>(&gd),
            cd.as_slice::<f32>().unwrap(),
            "scatter_set"
        );
        gd.scatter_add_set(&l, &gp, &l, &gu, &l, 1).unwrap();
        cd.scatter_add_set(&l, &cp, &l, &cu, &l, 1).unwrap();
        assert_eq!(
            host::<f32>(&gd),
            cd.as_slice::<f32>().unwrap(),
            "scatter_add_set"
        );
        // index_add along dim 0 with a repeated index (exact in f32 for these small integers).
        let rows = [2u32, 0, 2];
        let (gr, cr) = up(&rows);
        let rl = Layout::contiguous(3);
        let r = g.index_add(&l, &gr, &rl, &gu, &l, 0).unwrap();
        let e = c.index_add(&l, &cr, &rl, &cu, &l, 0).unwrap();
        assert_eq!(host::<f32>(&r), e.as_slice::<f32>().unwrap(), "index_add");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn out_of_range_index_is_a_typed_error_at_the_host_read() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let src = dev.storage_from_slice(&[1f32, 2., 3., 4., 5., 6.]).unwrap();
    let ids = dev.storage_from_slice(&[0u32, 7]).unwrap();
    let l = Layout::contiguous((3, 2));
    let r = src
        .index_select(&ids, &l, &Layout::contiguous(2), 0)
        .unwrap();
    let e = r.to_cpu_storage().unwrap_err();
    match e.bt_free() {
        candle_core::Error::InvalidIndex { op, index, size } => {
            assert_eq!((*op, *index, *size), ("index_select", 7, 3), "{e}");
        }
        other => panic!("unexpected {other:?}"),
    }
    // Reported once: the next op and read work.
    let ok = dev.storage_from_slice(&[0u32, 2]).unwrap();
    let r = src
        .index_select(&ok, &l, &Layout::contiguous(2), 0)
        .unwrap();
    assert_eq!(host::<f32>(&r), [1., 2., 5., 6.]);
    dev.synchronize().unwrap();
}

trait BtFree {
    fn bt_free(&self) -> &candle_core::Error;
}

impl BtFree for candle_core::Error {
    fn bt_free(&self) -> &candle_core::Error {
        match self {
            candle_core::Error::WithBacktrace { inner, .. } => inner.bt_free(),
            e => e,
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn pooling_and_upsampling_match_cpu() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let cpu = CpuDevice;
    let src: Vec<f32> = (0..2 * 3 * 5 * 6)
        .map(|x| ((x * 7) % 11) as f32 - 5.0)
        .collect();
    let l = Layout::contiguous((2, 3, 5, 6));
    let g = dev.storage_from_slice(&src).unwrap();
    let c = cpu.storage_from_slice(&src).unwrap();
    let close = |a: &[f32], b: &[f32], what: &str| {
        assert_eq!(a.len(), b.len(), "{what}");
        for (x, y) in a.iter().zip(b) {
            assert!(
                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                "{what}: {x} vs {y}"
            );
        }
    };
    for (k, s) in [((2, 2), (2, 2)), ((3, 2), (1, 2)), ((1, 1), (1, 1))] {
        let r = g.avg_pool2d(&l, k, s).unwrap();
        let e = c.avg_pool2d(&l, k, s).unwrap();
        close(&host::<f32>(&r), e.as_slice().unwrap(), "avg_pool2d");
        let r = g.max_pool2d(&l, k, s).unwrap();
        let e = c.max_pool2d(&l, k, s).unwrap();
        close(&host::<f32>(&r), e.as_slice().unwrap(), "max_pool2d");
    }
    let l3 = Layout::contiguous((6, 5, 6));
    let r = g.upsample_nearest1d(&l3, 13).unwrap();
    let e = c.upsample_nearest1d(&l3, 13).unwrap();
    close(
        &host::<f32>(&r),
        e.as_slice().unwrap(),
        "upsample_nearest1d",
    );
    let r = g.upsample_nearest2d(&l, 11, 9).unwrap();
    let e = c.upsample_nearest2d(&l, 11, 9).unwrap();
    close(
        &host::<f32>(&r),
        e.as_slice().unwrap(),
        "upsample_nearest2d",
    );
    for align in [false, true] {
        let r = g.upsample_bilinear2d(&l, 9, 13, align, None, None).unwrap();
        let e = c.upsample_bilinear2d(&l, 9, 13, align, None, None).unwrap();
        close(
            &host::<f32>(&r),
            e.as_slice().unwrap(),
            "upsample_bilinear2d",
        );
    }
}

#[test]
#[ignore = "needs a GPU"]
fn random_numbers_have_the_right_moments_and_follow_the_seed() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let n = 1_000_000;
    let shape = Shape::from(n);
    dev.set_seed(42).unwrap();
    let u = host::<f32>(&dev.rand_uniform(&shape, DType::F32, -1.0, 3.0).unwrap());
    let z = host::<f32>(&dev.rand_normal(&shape, DType::F32, 2.0, 0.5).unwrap());
    let moments = |v: &[f32]| {
        let m = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / v.len() as f64;
        (m, var)
    };
    assert!(u.iter().all(|&x| (-1.0..3.0).contains(&x)));
    let (m, var) = moments(&u);
    assert!(
        (m - 1.0).abs() < 0.01 && (var - 16.0 / 12.0).abs() < 0.01,
        "{m} {var}"
    );
    let (m, var) = moments(&z);
    assert!(
        (m - 2.0).abs() < 0.005 && (var - 0.25).abs() < 0.005,
        "{m} {var}"
    );
    // Same seed: the same sequence; the next call: fresh numbers; another seed: different.
    dev.set_seed(42).unwrap();
    let u2 = host::<f32>(&dev.rand_uniform(&shape, DType::F32, -1.0, 3.0).unwrap());
    assert_eq!(u, u2);
    let u3 = host::<f32>(&dev.rand_uniform(&shape, DType::F32, -1.0, 3.0).unwrap());
    assert_ne!(u, u3);
    dev.set_seed(43).unwrap();
    let u4 = host::<f32>(&dev.rand_uniform(&shape, DType::F32, -1.0, 3.0).unwrap());
    assert_ne!(u, u4);
    // Integer dtypes: a typed error naming the op.
    let e = dev.rand_uniform(&shape, DType::U32, 0.0, 1.0).unwrap_err();
    assert!(matches!(typed(&e), RocmError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("rand_uniform"), "{e}");
}

#[test]
#[ignore = "needs a GPU"]
fn arg_sort_last_dim_sorts_rows() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let v = [3f32, 1., 2., -1., 9., 0., 5., 4.];
    let s = dev.storage_from_slice(&v).unwrap();
    let l = Layout::contiguous((2, 4));
    let asc = host::<u32>(&s.arg_sort_last_dim(&l, true).unwrap());
    assert_eq!(asc, [3, 1, 2, 0, 1, 3, 2, 0]);
    let desc = host::<u32>(&s.arg_sort_last_dim(&l, false).unwrap());
    assert_eq!(desc, [0, 2, 1, 3, 0, 2, 3, 1]);
}

#[path = "suite/blas.rs"]
mod blas;

#[cfg(feature = "rccl")]
#[path = "suite/collective.rs"]
mod collective;

#[path = "suite/indexing.rs"]
mod indexing;

#[path = "suite/pool.rs"]
mod pool;

#[path = "suite/rope_kv.rs"]
mod rope_kv;

#[path = "suite/quantized.rs"]
mod quantized;

#[path = "suite/attention.rs"]
mod attention_suite;
