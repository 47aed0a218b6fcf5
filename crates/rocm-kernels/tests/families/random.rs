//! GPU tests of the `random` family (a module of tests/gpu.rs): Philox4x32-10 uniform and normal
//! values for f32, f64, f16 and bf16. The device output equals the host generator
//! (`rocm_kernels::random::*_host`) bit for bit, whatever the offset, the length and hence the
//! launch geometry, and whether a range is produced in one call or several; on 10^6 samples the
//! mean, variance and range are right (within a few standard errors).

use super::*;
use rocm_kernels::random as rnd;

/// What the random tests need of a float type: the host generator and the device wrappers.
trait RandT: TT {
    fn uniform_host(seed: u64, j: u64, lo: f64, up: f64) -> Self;
    fn normal_host(seed: u64, j: u64, mean: f64, std: f64) -> Self;
    /// Extra slack for the statistics: the type's rounding near the values used.
    const QUANTUM: f64;
}

impl RandT for f32 {
    fn uniform_host(seed: u64, j: u64, lo: f64, up: f64) -> Self {
        rnd::uniform_f32_host(seed, j, lo as f32, up as f32)
    }
    fn normal_host(seed: u64, j: u64, mean: f64, std: f64) -> Self {
        rnd::normal_f32_host(seed, j, mean as f32, std as f32)
    }
    const QUANTUM: f64 = 1e-6;
}

impl RandT for f64 {
    fn uniform_host(seed: u64, j: u64, lo: f64, up: f64) -> Self {
        rnd::uniform_f64_host(seed, j, lo, up)
    }
    fn normal_host(seed: u64, j: u64, mean: f64, std: f64) -> Self {
        rnd::normal_f64_host(seed, j, mean, std)
    }
    const QUANTUM: f64 = 1e-12;
}

impl RandT for f16 {
    fn uniform_host(seed: u64, j: u64, lo: f64, up: f64) -> Self {
        rnd::uniform_f16_host(seed, j, f16::from_f64(lo), f16::from_f64(up))
    }
    fn normal_host(seed: u64, j: u64, mean: f64, std: f64) -> Self {
        rnd::normal_f16_host(seed, j, f16::from_f64(mean), f16::from_f64(std))
    }
    const QUANTUM: f64 = 2e-3;
}

impl RandT for bf16 {
    fn uniform_host(seed: u64, j: u64, lo: f64, up: f64) -> Self {
        rnd::uniform_bf16_host(seed, j, bf16::from_f64(lo), bf16::from_f64(up))
    }
    fn normal_host(seed: u64, j: u64, mean: f64, std: f64) -> Self {
        rnd::normal_bf16_host(seed, j, bf16::from_f64(mean), bf16::from_f64(std))
    }
    const QUANTUM: f64 = 1.6e-2;
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Dist {
    Uniform(f64, f64),
    Normal(f64, f64),
}

/// Runs the generator on `n` elements from stream index `offset` (in a poisoned, guarded
/// output) and returns them.
fn generate<T: RandT>(s: &Stream, dist: Dist, seed: u64, offset: u64, n: usize) -> Vec<T> {
    let ctx = format!("{dist:?} {} seed {seed:#x} offset {offset} n {n}", T::NAME);
    let mut out = Output::<T>::new(s, n);
    let r = match dist {
        Dist::Uniform(lo, up) => rnd::rand_uniform(s, &mut out.view(), seed, offset, lo, up),
        Dist::Normal(m, sd) => rnd::rand_normal(s, &mut out.view(), seed, offset, m, sd),
    };
    r.unwrap_or_else(|e| panic!("{ctx}: {e}"));
    out.read(&ctx)
}

fn host<T: RandT>(dist: Dist, seed: u64, j: u64) -> T {
    match dist {
        Dist::Uniform(lo, up) => T::uniform_host(seed, j, lo, up),
        Dist::Normal(m, sd) => T::normal_host(seed, j, m, sd),
    }
}

fn check_bits<T: RandT>(ctx: &str, got: &[T], seed: u64, offset: u64, dist: Dist) {
    for (i, g) in got.iter().enumerate() {
        let want: T = host(dist, seed, offset + i as u64);
        assert!(
            g.bits() == want.bits(),
            "{ctx}: element {i} (stream index {}) is {g:?} ({:#x}), the host generator gives \
             {want:?} ({:#x})",
            offset + i as u64,
            g.bits(),
            want.bits()
        );
    }
}

/// Device == host bit for bit: offsets that are and are not multiples of the block, lengths
/// from 1 to 10^4 + 7 (different grid sizes), a high offset and seed, and a range produced in
/// one call equal to the same range produced in three.
fn bit_exact_for<T: RandT>(s: &Stream, pairs: &mut Vec<String>, checked: &mut usize) {
    for dist in [
        Dist::Uniform(0.0, 1.0),
        Dist::Uniform(-3.5, 7.25),
        Dist::Normal(0.0, 1.0),
        Dist::Normal(-2.0, 0.5),
    ] {
        for (seed, offset, n) in [
            (0u64, 0u64, 10_007usize),
            (42, 1, 10_000),
            (42, 3, 1),
            (0x0123_4567_89ab_cdef, 5, 2),
            (7, 6, 3),
            (u64::MAX, (1u64 << 40) + 3, 4_099),
            (0x5eed, 1_000_001, 257),
        ] {
            let got = generate::<T>(s, dist, seed, offset, n);
            let ctx = format!("{dist:?} {} seed {seed:#x} offset {offset}", T::NAME);
            check_bits(&ctx, &got, seed, offset, dist);
            *checked += n;
        }
        // One call == three calls over the same stream indices.
        let (seed, offset) = (99u64, 2u64);
        let whole = generate::<T>(s, dist, seed, offset, 5_003);
        let mut parts = generate::<T>(s, dist, seed, offset, 1_001);
        parts.extend(generate::<T>(s, dist, seed, offset + 1_001, 3));
        parts.extend(generate::<T>(s, dist, seed, offset + 1_004, 3_999));
        let (w, p): (Vec<u64>, Vec<u64>) = (
            whole.iter().map(|v| v.bits()).collect(),
            parts.iter().map(|v| v.bits()).collect(),
        );
        assert!(w == p, "{dist:?} {}: one call differs from three", T::NAME);
        pairs.push(format!(
            "{}_{}",
            match dist {
                Dist::Uniform(..) => "uniform",
                Dist::Normal(..) => "normal",
            },
            T::NAME
        ));
    }
}

#[test]
#[ignore = "needs a GPU"]
fn random_matches_host_generator_bit_for_bit() {
    let s = stream();
    let (mut pairs, mut checked) = (Vec::new(), 0);
    bit_exact_for::<f32>(&s, &mut pairs, &mut checked);
    bit_exact_for::<f64>(&s, &mut pairs, &mut checked);
    bit_exact_for::<f16>(&s, &mut pairs, &mut checked);
    bit_exact_for::<bf16>(&s, &mut pairs, &mut checked);
    pairs.dedup();
    println!(
        "random: {checked} values equal to the host Philox4x32-10 generator bit for bit: {}",
        pairs.join(" ")
    );
}

/// Mean and variance of 10^6 samples within 6 standard errors (plus the type's rounding), and
/// every uniform value in [lo, up).
fn stats_for<T: RandT>(s: &Stream, lines: &mut Vec<String>) {
    const N: usize = 1_000_000;
    for dist in [
        Dist::Uniform(0.0, 1.0),
        Dist::Uniform(-2.0, 3.0),
        Dist::Normal(0.0, 1.0),
        Dist::Normal(1.5, 2.0),
    ] {
        let seed = seed_for(&format!("stats {dist:?} {}", T::NAME));
        let got = generate::<T>(s, dist, seed, 17, N);
        let v: Vec<f64> = got.iter().map(|x| x.to_f64()).collect();
        let mean = v.iter().sum::<f64>() / N as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (N - 1) as f64;
        let (min, max) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        let ctx = format!("{dist:?} {} seed {seed:#x}", T::NAME);
        assert!(v.iter().all(|x| x.is_finite()), "{ctx}: non-finite values");
        let (want_mean, want_var, kurtosis_excess) = match dist {
            Dist::Uniform(lo, up) => {
                assert!(
                    min >= lo && max < up,
                    "{ctx}: values outside [{lo}, {up}): {min} {max}"
                );
                // Nearly the whole range is covered.
                let w = up - lo;
                assert!(min < lo + 1e-3 * w + T::QUANTUM && max > up - 1e-3 * w - T::QUANTUM);
                ((lo + up) / 2.0, w * w / 12.0, -1.2)
            }
            Dist::Normal(m, sd) => {
                // 10^6 normal samples reach beyond 4 sigma, not beyond ~6.
                assert!(
                    (max - m) / sd > 4.0 && (m - min) / sd > 4.0,
                    "{ctx}: tails {min} {max}"
                );
                assert!(
                    (max - m) / sd < 6.5 && (m - min) / sd < 6.5,
                    "{ctx}: tails {min} {max}"
                );
                (m, sd * sd, 0.0)
            }
        };
        let se_mean = (want_var / N as f64).sqrt();
        let se_var = want_var * ((2.0 + kurtosis_excess) / N as f64).sqrt();
        let scale = want_mean.abs().max(want_var.sqrt());
        assert!(
            (mean - want_mean).abs() <= 6.0 * se_mean + T::QUANTUM * scale,
            "{ctx}: mean {mean}, want {want_mean} (standard error {se_mean:e})"
        );
        assert!(
            (var - want_var).abs() <= 6.0 * se_var + 2.0 * T::QUANTUM * want_var,
            "{ctx}: variance {var}, want {want_var} (standard error {se_var:e})"
        );
        lines.push(format!(
            "{dist:?}_{}: mean {mean:.5} var {var:.5} [{min:.4}, {max:.4}]",
            T::NAME
        ));
    }
}

#[test]
#[ignore = "needs a GPU"]
fn random_statistics_on_a_million_samples() {
    let s = stream();
    let mut lines = Vec::new();
    stats_for::<f32>(&s, &mut lines);
    stats_for::<f64>(&s, &mut lines);
    stats_for::<f16>(&s, &mut lines);
    stats_for::<bf16>(&s, &mut lines);
    println!(
        "random statistics (10^6 samples each): {}",
        lines.join("; ")
    );
}

#[test]
#[ignore = "needs a GPU"]
fn random_invalid_calls_are_errors_and_launch_nothing() {
    let s = stream();
    let mut checked = 0;
    let mut out = Output::<f32>::new(&s, 16);
    for (lo, up) in [
        (1.0, 1.0),
        (2.0, 1.0),
        (f64::NAN, 1.0),
        (0.0, f64::INFINITY),
    ] {
        let e = rnd::rand_uniform(&s, &mut out.view(), 1, 0, lo, up).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "[{lo}, {up}): {e}");
        checked += 1;
    }
    // A range that is not empty in f64 but is in f32 after rounding.
    let e = rnd::rand_uniform(&s, &mut out.view(), 1, 0, 1.0, 1.0 + 1e-12).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    for (m, sd) in [(0.0, -1.0), (f64::NAN, 1.0), (0.0, f64::INFINITY)] {
        let e = rnd::rand_normal(&s, &mut out.view(), 1, 0, m, sd).unwrap_err();
        assert!(
            matches!(e, Error::Unsupported { .. }),
            "mean {m} std {sd}: {e}"
        );
        checked += 1;
    }
    let e = rnd::rand_uniform(&s, &mut out.view(), 1, u64::MAX - 3, 0.0, 1.0).unwrap_err();
    assert!(matches!(e, Error::Layout { .. }), "offset overflow: {e}");
    assert!(out.untouched(), "an invalid call launched a kernel");
    // Integer dtypes: unsupported, as in Candle's CPU backend.
    let mut ints = Output::<u32>::new(&s, 16);
    let e = rnd::rand_uniform(&s, &mut ints.view(), 1, 0, 0.0, 1.0).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "u32: {e}");
    let mut longs = Output::<i64>::new(&s, 16);
    let e = rnd::rand_normal(&s, &mut longs.view(), 1, 0, 0.0, 1.0).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "i64: {e}");
    assert!(ints.untouched() && longs.untouched());
    // Zero elements: nothing to do.
    let mut empty = Output::<f32>::new(&s, 0);
    rnd::rand_normal(&s, &mut empty.view(), 1, 0, 0.0, 1.0).expect("empty");
    assert!(empty.untouched());
    checked += 5;
    println!("random errors: {checked} invalid calls rejected before any launch");
}
