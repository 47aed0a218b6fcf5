//! Tier 3: rocblas-safe on a real GPU. Every test here is `#[ignore = "needs a GPU"]`; run with
//! `cargo test -p rocblas-safe --test gpu -- --include-ignored` (`HIP_PLATFORM=nvidia` on an
//! NVIDIA card, where the same API runs over cuBLAS; `HIP_PLATFORM=amd` or nothing on AMD).
//!
//! Every GEMM is checked against an f64 CPU reference computed from the very values the GPU saw
//! (inputs rounded to the element type first), element by element, with a worst-case error
//! bound scaled by `k` (u: unit roundoff of the input rounding, accumulation and output types):
//!
//! ```text
//! |got - ref| <= 2 ((k + 2) u_acc + 2 u_in) |alpha| sum_l |a_il b_lj| + 2 u_acc |beta c| + 2 u_out |ref|
//! ```
//!
//! Outputs are poisoned (NaN) before the GEMM, and every element of C that the GEMM must not
//! touch (padding rows, gaps between batch entries, the rest of the buffer around a sub-slice)
//! is checked bit for bit. Inputs come from a fixed-seed generator; failures print the seed and
//! the case.

use std::sync::Mutex;

use half::{bf16, f16};
use hip_core::{Device, DeviceBuffer, Stream};
use rocblas_safe::{
    set_gemm_reduced_precision_bf16, set_gemm_reduced_precision_f16,
    set_gemm_reduced_precision_f32, Error, GemmConfig, GemmElement, Handle, Operation,
};

use Operation::{None as N, Transpose as T};

/// The reduced-precision flags are process-wide: every test holds this lock, so that no test
/// sees another one's flags (and the test that flips them restores them).
static FLAGS: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    FLAGS.lock().unwrap_or_else(|e| e.into_inner())
}

fn setup() -> (Stream, Handle) {
    let device = Device::new(0).expect("a GPU is required for this test");
    let stream = device.default_stream();
    let handle = Handle::new(&stream).expect("creating the BLAS handle");
    (stream, handle)
}

const TRANSPOSES: [(Operation, Operation); 4] = [(N, N), (N, T), (T, N), (T, T)];

/// An element type under test.
trait El: GemmElement + std::fmt::Debug {
    const NAME: &'static str;
    /// Unit roundoff.
    const U: f64;
    /// Spacing of the subnormals (absolute error floor of one rounding).
    const TINY: f64;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    fn bits(self) -> u64;
    fn nan() -> Self;
}

impl El for f32 {
    const NAME: &'static str = "f32";
    const U: f64 = 5.960464477539063e-8; // 2^-24
    const TINY: f64 = f32::from_bits(1) as f64;
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
    fn nan() -> Self {
        f32::NAN
    }
}

impl El for f64 {
    const NAME: &'static str = "f64";
    const U: f64 = 1.1102230246251565e-16; // 2^-53
    const TINY: f64 = f64::from_bits(1);
    fn from_f64(x: f64) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn nan() -> Self {
        f64::NAN
    }
}

impl El for f16 {
    const NAME: &'static str = "f16";
    const U: f64 = 4.8828125e-4; // 2^-11
    const TINY: f64 = 5.960464477539063e-8; // 2^-24
    fn from_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
    fn nan() -> Self {
        f16::NAN
    }
}

impl El for bf16 {
    const NAME: &'static str = "bf16";
    const U: f64 = 3.90625e-3; // 2^-8
    const TINY: f64 = 9.183549615799121e-41; // 2^-133
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
    fn nan() -> Self {
        bf16::NAN
    }
}

/// The error model of one GEMM: unit roundoffs of input rounding (TF32), accumulation, output.
#[derive(Clone, Copy, Debug)]
struct Prec {
    u_in: f64,
    u_acc: f64,
    u_out: f64,
}

/// Full precision: f32 accumulation for f32/f16/bf16, f64 for f64.
fn full<T: El>() -> Prec {
    let u_acc = if T::NAME == "f64" { f64::U } else { f32::U };
    Prec {
        u_in: 0.0,
        u_acc,
        u_out: T::U,
    }
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    fn vec<T: El>(&mut self, len: usize) -> Vec<T> {
        (0..len).map(|_| T::from_f64(self.next_f64())).collect()
    }
}

/// Minimal slice lengths for `cfg` (as `GemmConfig::validate` computes them).
fn lens(cfg: &GemmConfig) -> (usize, usize, usize) {
    let stored = |op: Operation, r: usize, c: usize| if op == N { (r, c) } else { (c, r) };
    let extent = |r: usize, c: usize, ld: usize| {
        if r == 0 || c == 0 {
            0
        } else {
            (c - 1) * ld + r
        }
    };
    let need = |e: usize, s: usize| {
        if e == 0 || cfg.batch == 0 {
            0
        } else {
            (cfg.batch - 1) * s + e
        }
    };
    let (ra, ca) = stored(cfg.transa, cfg.m, cfg.k);
    let (rb, cb) = stored(cfg.transb, cfg.k, cfg.n);
    (
        need(extent(ra, ca, cfg.lda), cfg.stride_a),
        need(extent(rb, cb, cfg.ldb), cfg.stride_b),
        need(extent(cfg.m, cfg.n, cfg.ldc), cfg.stride_c),
    )
}

/// Checks `got` (the whole C slice after the GEMM) against the f64 reference from `a`, `b` and
/// `c0` (C before), element by element; elements outside the GEMM must be bitwise unchanged.
/// Returns the largest `error / tolerance` seen.
#[allow(clippy::too_many_arguments)]
fn check<T: El>(
    what: &str,
    cfg: &GemmConfig,
    alpha: f64,
    beta: f64,
    a: &[T],
    b: &[T],
    c0: &[T],
    got: &[T],
    prec: Prec,
) -> f64 {
    assert_eq!(c0.len(), got.len());
    let mut covered = vec![false; got.len()];
    let mut worst = 0.0f64;
    let k = cfg.k as f64;
    for i in 0..cfg.batch {
        for j in 0..cfg.n {
            for r in 0..cfg.m {
                let mut sum = 0.0f64;
                let mut abs = 0.0f64;
                for l in 0..cfg.k {
                    let av = match cfg.transa {
                        N => a[i * cfg.stride_a + l * cfg.lda + r],
                        T => a[i * cfg.stride_a + r * cfg.lda + l],
                    }
                    .to_f64();
                    let bv = match cfg.transb {
                        N => b[i * cfg.stride_b + j * cfg.ldb + l],
                        T => b[i * cfg.stride_b + l * cfg.ldb + j],
                    }
                    .to_f64();
                    sum += av * bv;
                    abs += (av * bv).abs();
                }
                let idx = i * cfg.stride_c + j * cfg.ldc + r;
                assert!(
                    !covered[idx],
                    "{what}: C element {idx} written twice by the reference"
                );
                covered[idx] = true;
                let beta_c = if beta == 0.0 {
                    0.0
                } else {
                    beta * c0[idx].to_f64()
                };
                let reference = alpha * sum + beta_c;
                let tol = 2.0 * ((k + 2.0) * prec.u_acc + 2.0 * prec.u_in) * alpha.abs() * abs
                    + 2.0 * prec.u_acc * beta_c.abs()
                    + 2.0 * prec.u_out * reference.abs()
                    + T::TINY;
                let g = got[idx].to_f64();
                let err = (g - reference).abs();
                assert!(
                    err <= tol,
                    "{what}: {} C[batch {i}][{r}, {j}] (element {idx}) = {g}, expected {reference} \
                     (error {err:e} > tolerance {tol:e}; cfg {cfg:?}, alpha {alpha}, beta {beta}, {prec:?})",
                    T::NAME
                );
                worst = worst.max(err / tol);
            }
        }
    }
    for (idx, (&g, &c)) in got.iter().zip(c0).enumerate() {
        if !covered[idx] {
            assert_eq!(
                g.bits(),
                c.bits(),
                "{what}: {} element {idx} of C lies outside the GEMM but was changed ({c:?} -> {g:?}; cfg {cfg:?})",
                T::NAME
            );
        }
    }
    worst
}

/// Uploads random A and B and a C (poisoned with NaN when `beta == 0`, random otherwise), runs
/// the GEMM, checks it. Returns the worst error/tolerance ratio.
#[allow(clippy::too_many_arguments)]
fn run_case<T: El>(
    stream: &Stream,
    handle: &Handle,
    seed: u64,
    cfg: &GemmConfig,
    alpha: f64,
    beta: f64,
    prec: Prec,
) -> f64 {
    let what = format!("seed {seed}");
    let mut rng = Rng::new(seed);
    let (la, lb, lc) = lens(cfg);
    let a: Vec<T> = rng.vec(la);
    let b: Vec<T> = rng.vec(lb);
    let c0: Vec<T> = if beta == 0.0 {
        vec![T::nan(); lc]
    } else {
        rng.vec(lc)
    };
    let da = stream.alloc_from_host(&a).unwrap();
    let db = stream.alloc_from_host(&b).unwrap();
    let mut dc = stream.alloc_from_host(&c0).unwrap();
    handle
        .gemm(
            cfg,
            alpha,
            &da.as_slice(),
            &db.as_slice(),
            beta,
            &mut dc.as_mut_slice(),
        )
        .unwrap_or_else(|e| panic!("{what}: {} gemm {cfg:?}: {e}", T::NAME));
    let got = dc.to_host_vec().unwrap();
    check(&what, cfg, alpha, beta, &a, &b, &c0, &got, prec)
}

/// Odd sizes (1, 7, 129, 1000), every transpose combination, padded leading dimensions on some.
fn odd_sizes_every_transpose<T: El>(stream: &Stream, handle: &Handle, prec: Prec) -> f64 {
    let shapes: &[(usize, usize, usize)] = &[
        (1, 1, 1),
        (7, 1, 129),
        (1, 7, 7),
        (7, 129, 1),
        (129, 7, 1000),
        (1000, 7, 129),
        (129, 129, 129),
        (1, 1000, 7),
        (1000, 129, 7),
    ];
    let mut worst = 0.0f64;
    for (si, &(m, n, k)) in shapes.iter().enumerate() {
        for (ti, &(ta, tb)) in TRANSPOSES.iter().enumerate() {
            let mut cfg = GemmConfig::packed(ta, tb, m, n, k);
            if (si + ti) % 2 == 1 {
                cfg.lda += 3;
                cfg.ldb += 2;
                cfg.ldc += 5;
            }
            let seed = 1000 + (si * 4 + ti) as u64;
            worst = worst.max(run_case::<T>(stream, handle, seed, &cfg, 1.5, 0.0, prec));
        }
    }
    worst
}

#[test]
#[ignore = "needs a GPU"]
fn library_version_and_platform() {
    let _g = lock();
    let (_stream, handle) = setup();
    let version = rocblas_safe::library_version().unwrap();
    assert!(!version.is_empty());
    println!("{} platform, {version}", handle.platform());
}

#[test]
#[ignore = "needs a GPU"]
fn odd_sizes_and_every_transpose_match_the_f64_reference() {
    let _g = lock();
    let (stream, handle) = setup();
    let w32 = odd_sizes_every_transpose::<f32>(&stream, &handle, full::<f32>());
    let w64 = odd_sizes_every_transpose::<f64>(&stream, &handle, full::<f64>());
    let w16 = odd_sizes_every_transpose::<f16>(&stream, &handle, full::<f16>());
    let wb16 = odd_sizes_every_transpose::<bf16>(&stream, &handle, full::<bf16>());
    println!("worst error/tolerance: f32 {w32:.3e}, f64 {w64:.3e}, f16 {w16:.3e}, bf16 {wb16:.3e}");
}

fn batched_and_broadcast<T: El>(stream: &Stream, handle: &Handle) {
    let (m, n, k, batch) = (7, 5, 129, 3);
    for (ti, &(ta, tb)) in TRANSPOSES.iter().enumerate() {
        for (bi, (bcast_a, bcast_b)) in [(false, false), (true, false), (false, true), (true, true)]
            .into_iter()
            .enumerate()
        {
            let mut cfg = GemmConfig::packed_batched(ta, tb, m, n, k, batch);
            if bcast_a {
                cfg.stride_a = 0;
            } else {
                cfg.stride_a += 4; // gaps between A matrices
            }
            if bcast_b {
                cfg.stride_b = 0;
            }
            cfg.ldc = m + 2;
            cfg.stride_c = (n - 1) * cfg.ldc + m + 3; // padding rows and gaps must stay untouched
            let seed = 2000 + (ti * 4 + bi) as u64;
            run_case::<T>(stream, handle, seed, &cfg, 1.5, 0.0, full::<T>());
            run_case::<T>(stream, handle, seed + 100, &cfg, -0.75, 0.5, full::<T>());
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn batched_and_broadcast_batches_match_the_reference() {
    let _g = lock();
    let (stream, handle) = setup();
    batched_and_broadcast::<f32>(&stream, &handle);
    batched_and_broadcast::<f64>(&stream, &handle);
    batched_and_broadcast::<f16>(&stream, &handle);
    batched_and_broadcast::<bf16>(&stream, &handle);
}

fn beta_nonzero<T: El>(stream: &Stream, handle: &Handle) {
    for (ti, &(ta, tb)) in TRANSPOSES.iter().enumerate() {
        let cfg = GemmConfig::packed(ta, tb, 129, 7, 1000);
        run_case::<T>(
            stream,
            handle,
            3000 + ti as u64,
            &cfg,
            -0.75,
            0.5,
            full::<T>(),
        );
        let cfg = GemmConfig::packed_batched(ta, tb, 7, 129, 7, 2);
        run_case::<T>(
            stream,
            handle,
            3100 + ti as u64,
            &cfg,
            2.0,
            -1.0,
            full::<T>(),
        );
        // alpha = 0: C = beta * C, A and B are not used.
        run_case::<T>(
            stream,
            handle,
            3200 + ti as u64,
            &cfg,
            0.0,
            1.5,
            full::<T>(),
        );
    }
}

#[test]
#[ignore = "needs a GPU"]
fn beta_nonzero_accumulates_into_c() {
    let _g = lock();
    let (stream, handle) = setup();
    beta_nonzero::<f32>(&stream, &handle);
    beta_nonzero::<f64>(&stream, &handle);
    beta_nonzero::<f16>(&stream, &handle);
    beta_nonzero::<bf16>(&stream, &handle);
}

fn k_zero<T: El>(stream: &Stream, handle: &Handle) {
    let (m, n) = (7, 5);
    let mut cfg = GemmConfig::packed_batched(N, T, m, n, 0, 2);
    cfg.ldc = m + 1;
    cfg.stride_c = (n - 1) * cfg.ldc + m + 2;
    let (_, _, lc) = lens(&cfg);
    let empty = stream.alloc::<T>(0).unwrap();
    // beta = 0: C becomes exactly zero, whatever it held (NaN here); padding stays NaN.
    let c0 = vec![T::nan(); lc];
    let mut dc = stream.alloc_from_host(&c0).unwrap();
    handle
        .gemm(
            &cfg,
            1.0,
            &empty.as_slice(),
            &empty.as_slice(),
            0.0,
            &mut dc.as_mut_slice(),
        )
        .unwrap();
    let got = dc.to_host_vec().unwrap();
    check(
        "k = 0, beta = 0",
        &cfg,
        1.0,
        0.0,
        &[],
        &[],
        &c0,
        &got,
        full::<T>(),
    );
    for i in 0..2 {
        for j in 0..n {
            for r in 0..m {
                let v = got[i * cfg.stride_c + j * cfg.ldc + r].to_f64();
                assert!(v == 0.0, "{}: k = 0, beta = 0 left {v}", T::NAME);
            }
        }
    }
    // beta = 2: C = 2 C, exactly.
    let c0: Vec<T> = Rng::new(4000).vec(lc);
    let mut dc = stream.alloc_from_host(&c0).unwrap();
    handle
        .gemm(
            &cfg,
            1.0,
            &empty.as_slice(),
            &empty.as_slice(),
            2.0,
            &mut dc.as_mut_slice(),
        )
        .unwrap();
    let got = dc.to_host_vec().unwrap();
    let exact = Prec {
        u_in: 0.0,
        u_acc: 0.0,
        u_out: 0.0,
    };
    check(
        "k = 0, beta = 2",
        &cfg,
        1.0,
        2.0,
        &[],
        &[],
        &c0,
        &got,
        exact,
    );
}

#[test]
#[ignore = "needs a GPU"]
fn k_zero_scales_c_by_beta_and_zeroes_poison() {
    let _g = lock();
    let (stream, handle) = setup();
    k_zero::<f32>(&stream, &handle);
    k_zero::<f64>(&stream, &handle);
    k_zero::<f16>(&stream, &handle);
    k_zero::<bf16>(&stream, &handle);
}

#[test]
#[ignore = "needs a GPU"]
fn empty_gemms_queue_nothing() {
    let _g = lock();
    let (stream, handle) = setup();
    let a = stream.alloc_from_host(&[1.0f32; 64]).unwrap();
    let c0 = vec![f32::NAN; 64];
    let mut c = stream.alloc_from_host(&c0).unwrap();
    for (m, n, batch) in [(0, 4, 2), (4, 0, 2), (4, 4, 0)] {
        let cfg = GemmConfig::packed_batched(N, N, m, n, 3, batch);
        handle
            .gemm(
                &cfg,
                1.0,
                &a.as_slice(),
                &a.as_slice(),
                0.0,
                &mut c.as_mut_slice(),
            )
            .unwrap();
        let got = c.to_host_vec().unwrap();
        assert!(got.iter().all(|v| v.is_nan()), "{cfg:?} changed C");
    }
}

fn offsets<T: El>(stream: &Stream, handle: &Handle) {
    let cfg = {
        let mut c = GemmConfig::packed_batched(T, N, 7, 129, 7, 2);
        c.ldc = 9;
        c.stride_c = 128 * 9 + 7 + 1;
        c
    };
    let (la, lb, lc) = lens(&cfg);
    let (oa, ob, oc) = (3, 5, 11);
    let mut rng = Rng::new(5000);
    let a_all: Vec<T> = rng.vec(oa + la + 4);
    let b_all: Vec<T> = rng.vec(ob + lb + 6);
    let c_all: Vec<T> = rng.vec(oc + lc + 8);
    let da: DeviceBuffer<T> = stream.alloc_from_host(&a_all).unwrap();
    let db = stream.alloc_from_host(&b_all).unwrap();
    let mut dc = stream.alloc_from_host(&c_all).unwrap();
    {
        let a = da.slice(oa..oa + la).unwrap();
        let b = db.slice(ob..ob + lb).unwrap();
        let mut c = dc.slice_mut(oc..oc + lc).unwrap();
        handle.gemm(&cfg, 0.5, &a, &b, -1.0, &mut c).unwrap();
    }
    let got = dc.to_host_vec().unwrap();
    for (idx, (g, c)) in got.iter().zip(&c_all).enumerate() {
        if idx < oc || idx >= oc + lc {
            assert_eq!(
                g.bits(),
                c.bits(),
                "{}: element {idx} outside the C slice changed",
                T::NAME
            );
        }
    }
    check(
        "sub-slices",
        &cfg,
        0.5,
        -1.0,
        &a_all[oa..oa + la],
        &b_all[ob..ob + lb],
        &c_all[oc..oc + lc],
        &got[oc..oc + lc],
        full::<T>(),
    );
}

#[test]
#[ignore = "needs a GPU"]
fn sub_slices_with_offsets() {
    let _g = lock();
    let (stream, handle) = setup();
    offsets::<f32>(&stream, &handle);
    offsets::<f64>(&stream, &handle);
    offsets::<f16>(&stream, &handle);
    offsets::<bf16>(&stream, &handle);
}

/// Restores the reduced-precision flags to off, also when a test panics.
struct FlagsOff;

impl Drop for FlagsOff {
    fn drop(&mut self) {
        set_gemm_reduced_precision_f16(false);
        set_gemm_reduced_precision_bf16(false);
        set_gemm_reduced_precision_f32(false);
    }
}

#[test]
#[ignore = "needs a GPU"]
fn reduced_precision_modes() {
    let _g = lock();
    let _off = FlagsOff;
    let (stream, handle) = setup();
    let nvidia = handle.platform() == hip_core::Platform::Nvidia;

    // f32: off is full f32; on allows TF32 (NVIDIA) / XF32 (AMD, where the device has it).
    assert!(!handle.f32_fast_math_active().unwrap());
    let strict = odd_sizes_every_transpose::<f32>(&stream, &handle, full::<f32>());
    set_gemm_reduced_precision_f32(true);
    let fast_active = handle.f32_fast_math_active().unwrap();
    if nvidia {
        assert!(
            fast_active,
            "cuBLAS did not take CUBLAS_TF32_TENSOR_OP_MATH"
        );
    }
    let tf32 = Prec {
        // TF32 keeps 10 mantissa bits (as f16 does); the inputs may be truncated rather than
        // rounded to them, so one input's relative error is below 2^-10.
        u_in: 2.0 * f16::U,
        ..full::<f32>()
    };
    let fast = odd_sizes_every_transpose::<f32>(&stream, &handle, tf32);
    set_gemm_reduced_precision_f32(false);
    assert!(!handle.f32_fast_math_active().unwrap());
    let strict_again = odd_sizes_every_transpose::<f32>(&stream, &handle, full::<f32>());

    // f16: on accumulates in f16.
    set_gemm_reduced_precision_f16(true);
    let f16_acc = Prec {
        u_acc: f16::U,
        ..full::<f16>()
    };
    let h = odd_sizes_every_transpose::<f16>(&stream, &handle, f16_acc);
    batched_and_broadcast_with::<f16>(&stream, &handle, f16_acc);
    set_gemm_reduced_precision_f16(false);

    // bf16: on allows reduced-precision (bf16) reductions on NVIDIA; no-op on AMD.
    set_gemm_reduced_precision_bf16(true);
    let bf16_red = Prec {
        u_acc: bf16::U,
        ..full::<bf16>()
    };
    let b = odd_sizes_every_transpose::<bf16>(&stream, &handle, bf16_red);
    set_gemm_reduced_precision_bf16(false);

    println!(
        "worst error/tolerance: f32 strict {strict:.3e}, f32 fast (active: {fast_active}) \
         {fast:.3e}, f32 strict again {strict_again:.3e}, f16 with f16 accumulation {h:.3e}, \
         bf16 with reduced reductions {b:.3e}"
    );
}

fn batched_and_broadcast_with<T: El>(stream: &Stream, handle: &Handle, prec: Prec) {
    let mut cfg = GemmConfig::packed_batched(T, N, 129, 7, 129, 3);
    cfg.stride_b = 0;
    run_case::<T>(stream, handle, 6000, &cfg, 1.5, 0.0, prec);
    run_case::<T>(stream, handle, 6001, &cfg, -0.75, 0.5, prec);
}

#[test]
#[ignore = "needs a GPU"]
fn invalid_descriptions_are_errors_and_queue_nothing() {
    let _g = lock();
    let (stream, handle) = setup();
    let a = stream.alloc_from_host(&[1.0f32; 64]).unwrap();
    let c0 = vec![f32::NAN; 64];
    let mut c = stream.alloc_from_host(&c0).unwrap();
    let mut bad = Vec::new();
    let mut cfg = GemmConfig::packed(N, N, 4, 4, 4);
    cfg.lda = 3;
    bad.push(cfg);
    bad.push(GemmConfig::packed(N, N, 8, 8, 8)); // A, B, C need 64 each: fits
    bad.push(GemmConfig::packed(N, N, 9, 8, 8)); // C needs 72
    let mut cfg = GemmConfig::packed_batched(N, N, 4, 4, 4, 3);
    cfg.stride_c = 0; // broadcast C
    bad.push(cfg);
    let mut cfg = GemmConfig::packed_batched(N, T, 4, 4, 4, 5);
    cfg.stride_a = 0;
    cfg.stride_b = 0; // C needs 80
    bad.push(cfg);
    let mut cfg = GemmConfig::packed(N, N, 4, 4, 4);
    cfg.ldb = i32::MAX as usize + 1;
    bad.push(cfg);
    for cfg in bad {
        let r = handle.gemm(
            &cfg,
            1.0,
            &a.as_slice(),
            &a.as_slice(),
            0.0,
            &mut c.as_mut_slice(),
        );
        if cfg == GemmConfig::packed(N, N, 8, 8, 8) {
            r.unwrap();
            c.copy_from_host(&c0).unwrap();
            continue;
        }
        match r {
            Err(Error::InvalidArgument { op: "gemm", reason }) => println!("rejected: {reason}"),
            other => panic!("{cfg:?}: expected InvalidArgument, got {other:?}"),
        }
        let got = c.to_host_vec().unwrap();
        assert!(
            got.iter().all(|v| v.is_nan()),
            "a rejected GEMM changed C: {cfg:?}"
        );
    }
}

#[test]
#[ignore = "needs a GPU"]
fn one_handle_shared_by_threads() {
    let _g = lock();
    let (stream, handle) = setup();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (stream, handle) = (&stream, &handle);
            s.spawn(move || {
                for i in 0..8u64 {
                    let cfg = GemmConfig::packed_batched(N, T, 33, 17, 65, 2);
                    run_case::<f32>(
                        stream,
                        handle,
                        7000 + t * 100 + i,
                        &cfg,
                        1.0,
                        0.0,
                        full::<f32>(),
                    );
                }
            });
        }
    });
}

#[test]
#[ignore = "needs a GPU"]
fn buffers_from_another_stream() {
    let _g = lock();
    let (stream, handle) = setup();
    let device = stream.device();
    let other = device.create_stream().unwrap();
    let cfg = GemmConfig::packed(N, N, 65, 33, 17);
    let (la, lb, lc) = lens(&cfg);
    let mut rng = Rng::new(8000);
    let a: Vec<f32> = rng.vec(la);
    let b: Vec<f32> = rng.vec(lb);
    let c0 = vec![f32::NAN; lc];
    let da = other.alloc_from_host(&a).unwrap();
    let db = other.alloc_from_host(&b).unwrap();
    let mut dc = other.alloc_from_host(&c0).unwrap();
    // The uploads above are complete (synchronous copies); order C's later reads after the GEMM.
    handle
        .gemm(
            &cfg,
            1.0,
            &da.as_slice(),
            &db.as_slice(),
            0.0,
            &mut dc.as_mut_slice(),
        )
        .unwrap();
    other.wait_for(handle.stream()).unwrap();
    let got = dc.to_host_vec().unwrap();
    drop(da); // freed while the GEMM's stream still records its use
    check(
        "other stream",
        &cfg,
        1.0,
        0.0,
        &a,
        &b,
        &c0,
        &got,
        full::<f32>(),
    );
}

/// Handles are deterministic by default (atomics off, read back from the library), the mode can
/// be switched and read back, and the same split-K-shaped GEMM (tiny m x n, long k: the shape
/// libraries split across workgroups) gives bitwise identical results run after run. On AMD the
/// handle knows its target, and rocBLAS' alternate f16 kernels are off unless asked for (and
/// only ever active on gfx90a).
#[test]
#[ignore = "needs a GPU"]
fn handles_are_deterministic_by_default() {
    let _g = lock();
    let (stream, handle) = setup();
    assert!(
        !handle.atomics_allowed().unwrap(),
        "atomics allowed on a new handle"
    );
    handle.set_atomics_allowed(true).unwrap();
    assert!(handle.atomics_allowed().unwrap());
    handle.set_atomics_allowed(false).unwrap();
    assert!(!handle.atomics_allowed().unwrap());
    if let Some(target) = handle.gfx_target() {
        assert!(!handle.fp16_alt_impl_active());
        handle.set_fp16_alt_impl(true);
        assert_eq!(handle.fp16_alt_impl_active(), target.processor == "gfx90a");
        handle.set_fp16_alt_impl(false);
        println!("AMD target {target}");
    }
    let (m, n, k) = (8usize, 8usize, 1 << 16);
    let mut rng = Rng::new(0x05ee_d0a7_01c5);
    let a: Vec<f32> = (0..m * k).map(|_| rng.next_f64() as f32).collect();
    let b: Vec<f32> = (0..k * n).map(|_| rng.next_f64() as f32).collect();
    let da = stream.alloc_from_host(&a).unwrap();
    let db = stream.alloc_from_host(&b).unwrap();
    let cfg = GemmConfig::packed(N, N, m, n, k);
    let mut first: Option<Vec<u32>> = None;
    for run in 0..20 {
        let mut dc = stream.alloc::<f32>(m * n).unwrap();
        handle
            .gemm(
                &cfg,
                1.0,
                &da.as_slice(),
                &db.as_slice(),
                0.0,
                &mut dc.as_mut_slice(),
            )
            .unwrap();
        let bits: Vec<u32> = dc
            .to_host_vec()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect();
        match &first {
            None => first = Some(bits),
            Some(f) => assert_eq!(f, &bits, "run {run} differs from run 0"),
        }
    }
}

/// `ROCBLAS_TENSILE_LIBPATH` at an empty directory: creating a handle is the typed error, not
/// rocBLAS' abort at the first GEMM (AMD only; in a child process, since rocBLAS reads the
/// variable once per process).
#[test]
#[ignore = "needs a GPU"]
fn missing_tensile_kernels_are_an_error_not_an_abort() {
    const CHILD: &str = "ROCBLAS_SAFE_TEST_TENSILE_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let device = Device::new(0).unwrap();
        match Handle::new(&device.default_stream()) {
            Err(e @ Error::MissingTensileKernels { .. }) => println!("CHILD-OK: {e}"),
            Err(e) => println!("CHILD-OTHER: {e}"),
            Ok(h) => println!("CHILD-CREATED on {}", h.platform()),
        }
        return;
    }
    let _g = lock();
    let (_stream, handle) = setup();
    if handle.gfx_target().is_none() {
        println!("not an AMD GPU: nothing to check");
        return;
    }
    let empty = std::env::temp_dir().join(format!("rocblas-safe-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let exe = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_file())
        .unwrap_or_else(|| std::env::current_exe().unwrap());
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "missing_tensile_kernels_are_an_error_not_an_abort",
            "--include-ignored",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("ROCBLAS_TENSILE_LIBPATH", &empty)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&empty);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child died: {}\n{stdout}", out.status);
    assert!(stdout.contains("CHILD-OK"), "{stdout}");
}
