//! Counter-based random numbers (module `random`): uniform and normal values for f32, f64, f16
//! and bf16 from Philox4x32-10, reproducible bit for bit on every device, architecture and launch
//! geometry, and on the host ([`uniform_f32_host`] and friends compute the very same values).
//!
//! Kernels `rand_uniform_{T}(out, n, seed, offset, lo, up)` and
//! `rand_normal_{T}(out, n, seed, offset, mean, std)` (the scalars as f64 for f64, f32 otherwise).
//! Element `i` of a call is the value of *stream index* `j = offset + i` under `seed`: a pure
//! function of `(seed, j)`. Calling again with `offset` advanced by `n` continues the stream.
//!
//! ## The mapping
//! * Philox4x32-10 ([`philox4x32_10`], Salmon et al., SC'11: multipliers `0xD2511F53`,
//!   `0xCD9E8D57`, Weyl key increments `0x9E3779B9`, `0xBB67AE85`, 10 rounds) with
//!   key `[lo32(seed), hi32(seed)]` and counter `[lo32(b), hi32(b), tag, 0]`, giving the words
//!   `x[0..4]` of block `b`.
//! * f32 family (f32, f16, bf16): 4 values per block, `b = j / 4`, lane `l = j % 4`.
//!   * uniform (tag 0): `u = (x[l] >> 8) * 2^-24` in `[0, 1)`;
//!   * normal (tag 2): lanes `2p` and `2p + 1` share the pair `(a, c) = (x[2p], x[2p + 1])`.
//! * f64: 2 values per block, `b = j / 2`, lane `l = j % 2`, 64-bit words
//!   `w[k] = x[2k] | x[2k + 1] << 32`.
//!   * uniform (tag 1): `u = (w[l] >> 11) * 2^-53` in `[0, 1)`;
//!   * normal (tag 3): lanes 0 and 1 share the pair `(a, c) = (w[0], w[1])`.
//! * Uniform value: `v = fma(up - lo, u, lo)`; if rounding made it `up`, the largest value below
//!   `up` instead: always in `[lo, up)`.
//! * Normal value (Box–Muller), with `p = 24` (f32 family) or `53` (f64) bits taken from the top
//!   of each word: `u1 = ((a >> (w - p)) + 1) 2^-p` in `(0, 1]`, `t = (c >> (w - p)) 2^-p` in
//!   `[0, 1)`, `radius = sqrt(-2 ln u1)`; the even lane is `fma(std, radius * cos(2 pi t), mean)`,
//!   the odd lane `fma(std, radius * sin(2 pi t), mean)`. `ln`, `sin` and `cos` are our own
//!   (exact range reduction, then fixed polynomials, every multiply-add an fma), so that the
//!   device and the host round identically.
//! * f16 / bf16: `lo`, `up`, `mean`, `std` are first rounded to the type (the `half` crate's
//!   `from_f64`), the value is computed as for f32 and rounded to nearest even; a uniform value
//!   that rounds up to `up` becomes the largest value of the type below `up`.
//!
//! Wrappers validate before launching: an empty or non-finite range (after rounding to the
//! type), a negative or non-finite `std`, or `offset + n` past `u64::MAX` are
//! [`Error::Unsupported`] / [`Error::Layout`] errors; integer dtypes are unsupported (as in
//! Candle's CPU backend).

use hip_core::{DeviceSliceMut, LaunchConfig, Stream};

use crate::dtype::KernelDType;
use crate::error::{Error, Result};

/// Threads per block of the random kernels.
const BLOCK_SIZE: u32 = 256;
/// At most this many blocks per multiprocessor (the kernels loop).
const BLOCKS_PER_MULTIPROCESSOR: usize = 16;

// ------------------------------------------------------------------------------------------
// Host generator (the reference the kernels are checked against, bit for bit)
// ------------------------------------------------------------------------------------------

const PHILOX_M0: u32 = 0xD251_1F53;
const PHILOX_M1: u32 = 0xCD9E_8D57;
const PHILOX_W0: u32 = 0x9E37_79B9;
const PHILOX_W1: u32 = 0xBB67_AE85;

/// The Philox4x32-10 block function: 10 rounds over `counter` with `key` (bumped by the Weyl
/// constants between rounds).
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    let [mut k0, mut k1] = key;
    for r in 0..10 {
        if r > 0 {
            k0 = k0.wrapping_add(PHILOX_W0);
            k1 = k1.wrapping_add(PHILOX_W1);
        }
        let p0 = PHILOX_M0 as u64 * c0 as u64;
        let p1 = PHILOX_M1 as u64 * c2 as u64;
        let n0 = (p1 >> 32) as u32 ^ c1 ^ k0;
        let n2 = (p0 >> 32) as u32 ^ c3 ^ k1;
        c0 = n0;
        c1 = p1 as u32;
        c2 = n2;
        c3 = p0 as u32;
    }
    [c0, c1, c2, c3]
}

/// Stream tags (counter word 2).
const TAG_UNIFORM_F32: u32 = 0;
const TAG_UNIFORM_F64: u32 = 1;
const TAG_NORMAL_F32: u32 = 2;
const TAG_NORMAL_F64: u32 = 3;

fn block(seed: u64, b: u64, tag: u32) -> [u32; 4] {
    philox4x32_10(
        [b as u32, (b >> 32) as u32, tag, 0],
        [seed as u32, (seed >> 32) as u32],
    )
}

fn word64(x: &[u32; 4], k: usize) -> u64 {
    x[2 * k] as u64 | (x[2 * k + 1] as u64) << 32
}

fn below_f32(up: f32) -> f32 {
    let b = up.to_bits();
    if b & 0x7fff_ffff == 0 {
        return f32::from_bits(0x8000_0001);
    }
    f32::from_bits(if b >> 31 != 0 { b + 1 } else { b - 1 })
}

fn below_f64(up: f64) -> f64 {
    let b = up.to_bits();
    if b & 0x7fff_ffff_ffff_ffff == 0 {
        return f64::from_bits(0x8000_0000_0000_0001);
    }
    f64::from_bits(if b >> 63 != 0 { b + 1 } else { b - 1 })
}

fn below_16(b: u16) -> u16 {
    if b & 0x7fff == 0 {
        0x8001
    } else if b >> 15 != 0 {
        b + 1
    } else {
        b - 1
    }
}

/// (sin, cos) of `q pi/2 + a` from `(sin a, cos a)`.
fn quadrant<F: std::ops::Neg<Output = F> + Copy>(q: u64, s: F, c: F) -> (F, F) {
    match q {
        0 => (s, c),
        1 => (c, -s),
        2 => (-s, -c),
        _ => (-c, s),
    }
}

/// ln(k 2^-24) for 1 <= k <= 2^24 (as the kernel's `rk_ln_scaled_f32`).
#[allow(clippy::excessive_precision)]
fn ln_scaled_f32(k: u32) -> f32 {
    let bits = (k as f32).to_bits();
    let mut e = (bits >> 23) as i32 - 127;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    if m > std::f32::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let p = [
        0.666_666_666_666_666_63_f32,
        0.400_000_000_000_000_02,
        0.285_714_285_714_285_7,
        0.222_222_222_222_222_21,
        0.181_818_181_818_181_82,
    ]
    .iter()
    .rev()
    .copied()
    .reduce(|p, c| p.mul_add(z, c))
    .unwrap_or(0.0);
    let ln_m = (s * z).mul_add(p, s + s);
    let ef = (e - 24) as f32;
    ef.mul_add(
        0.693_145_751_953_125,
        ef.mul_add(1.428_606_820_309_417_232_12e-06, ln_m),
    )
}

/// (sin, cos) of 2 pi j 2^-24 for 0 <= j < 2^24 (as the kernel's `rk_sincos_turn_f32`).
#[allow(clippy::excessive_precision)]
fn sincos_turn_f32(j: u32) -> (f32, f32) {
    let quarter = 1u32 << 22;
    let q = j >> 22;
    let mut rem = j & (quarter - 1);
    let reflect = rem > quarter / 2;
    if reflect {
        rem = quarter - rem;
    }
    let t = rem as f32 * 2.384_185_791_015_625e-07_f32 * std::f32::consts::FRAC_PI_2;
    let z = t * t;
    let mut ps = 2.755_731_922_398_589_3e-06_f32;
    ps = ps.mul_add(z, -0.000_198_412_698_412_698_41);
    ps = ps.mul_add(z, 0.008_333_333_333_333_333_2);
    ps = ps.mul_add(z, -0.166_666_666_666_666_66);
    let s = (t * z).mul_add(ps, t);
    let mut pc = -2.755_731_922_398_588_8e-07_f32;
    pc = pc.mul_add(z, 2.480_158_730_158_730_2e-05);
    pc = pc.mul_add(z, -0.001_388_888_888_888_888_9);
    pc = pc.mul_add(z, 0.041_666_666_666_666_664);
    pc = pc.mul_add(z, -0.5);
    let c = z.mul_add(pc, 1.0);
    let (a, b) = if reflect { (c, s) } else { (s, c) };
    quadrant(q as u64, a, b)
}

/// ln(k 2^-53) for 1 <= k <= 2^53 (as the kernel's `rk_ln_scaled_f64`).
#[allow(clippy::excessive_precision)]
fn ln_scaled_f64(k: u64) -> f64 {
    let bits = (k as f64).to_bits();
    let mut e = (bits >> 52) as i32 - 1023;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let coefficients: [f64; 10] = [
        0.095_238_095_238_095_233,
        0.105_263_157_894_736_84,
        0.117_647_058_823_529_41,
        0.133_333_333_333_333_33,
        0.153_846_153_846_153_85,
        0.181_818_181_818_181_82,
        0.222_222_222_222_222_21,
        0.285_714_285_714_285_7,
        0.400_000_000_000_000_02,
        0.666_666_666_666_666_63,
    ];
    let mut p = coefficients[0];
    for &c in &coefficients[1..] {
        p = p.mul_add(z, c);
    }
    let ln_m = (s * z).mul_add(p, s + s);
    let ef = (e - 53) as f64;
    ef.mul_add(
        6.931_471_803_691_238_164_90e-01,
        ef.mul_add(1.908_214_929_270_587_700_02e-10, ln_m),
    )
}

/// (sin, cos) of 2 pi j 2^-53 for 0 <= j < 2^53 (as the kernel's `rk_sincos_turn_f64`).
#[allow(clippy::excessive_precision)]
fn sincos_turn_f64(j: u64) -> (f64, f64) {
    let quarter = 1u64 << 51;
    let q = j >> 51;
    let mut rem = j & (quarter - 1);
    let reflect = rem > quarter / 2;
    if reflect {
        rem = quarter - rem;
    }
    let t = rem as f64 * 4.440_892_098_500_626e-16 * std::f64::consts::FRAC_PI_2;
    let z = t * t;
    let sin_c: [f64; 8] = [
        2.811_457_254_345_520_6e-15,
        -7.647_163_731_819_816_4e-13,
        1.605_904_383_682_161_3e-10,
        -2.505_210_838_544_172e-08,
        2.755_731_922_398_589_3e-06,
        -0.000_198_412_698_412_698_41,
        0.008_333_333_333_333_333_2,
        -0.166_666_666_666_666_66,
    ];
    let mut ps = sin_c[0];
    for &c in &sin_c[1..] {
        ps = ps.mul_add(z, c);
    }
    let s = (t * z).mul_add(ps, t);
    let cos_c: [f64; 9] = [
        -1.561_920_696_858_622_5e-16,
        4.779_477_332_387_385_3e-14,
        -1.147_074_559_772_972_5e-11,
        2.087_675_698_786_81e-09,
        -2.755_731_922_398_588_8e-07,
        2.480_158_730_158_730_2e-05,
        -0.001_388_888_888_888_888_9,
        0.041_666_666_666_666_664,
        -0.5,
    ];
    let mut pc = cos_c[0];
    for &c in &cos_c[1..] {
        pc = pc.mul_add(z, c);
    }
    let c = z.mul_add(pc, 1.0);
    let (a, b) = if reflect { (c, s) } else { (s, c) };
    quadrant(q, a, b)
}

/// Stream index `j` of the f32 uniform generator: the value in `[lo, up)` that
/// `rand_uniform_f32` writes for it.
pub fn uniform_f32_host(seed: u64, j: u64, lo: f32, up: f32) -> f32 {
    let x = block(seed, j / 4, TAG_UNIFORM_F32);
    let u = (x[(j % 4) as usize] >> 8) as f32 / 16_777_216.0; // * 2^-24, exact
    let r = (up - lo).mul_add(u, lo);
    if r < up {
        r
    } else {
        below_f32(up)
    }
}

/// Stream index `j` of the f64 uniform generator (`rand_uniform_f64`).
pub fn uniform_f64_host(seed: u64, j: u64, lo: f64, up: f64) -> f64 {
    let x = block(seed, j / 2, TAG_UNIFORM_F64);
    let u = (word64(&x, (j % 2) as usize) >> 11) as f64 / 9_007_199_254_740_992.0; // * 2^-53, exact
    let r = (up - lo).mul_add(u, lo);
    if r < up {
        r
    } else {
        below_f64(up)
    }
}

/// Stream index `j` of the f32 normal generator (`rand_normal_f32`).
pub fn normal_f32_host(seed: u64, j: u64, mean: f32, std: f32) -> f32 {
    let x = block(seed, j / 4, TAG_NORMAL_F32);
    let p = ((j % 4) / 2) as usize;
    let radius = (-2.0 * ln_scaled_f32((x[2 * p] >> 8) + 1)).sqrt();
    let (sn, cs) = sincos_turn_f32(x[2 * p + 1] >> 8);
    let z = radius * if j % 2 == 0 { cs } else { sn };
    std.mul_add(z, mean)
}

/// Stream index `j` of the f64 normal generator (`rand_normal_f64`).
pub fn normal_f64_host(seed: u64, j: u64, mean: f64, std: f64) -> f64 {
    let x = block(seed, j / 2, TAG_NORMAL_F64);
    let radius = (-2.0 * ln_scaled_f64((word64(&x, 0) >> 11) + 1)).sqrt();
    let (sn, cs) = sincos_turn_f64(word64(&x, 1) >> 11);
    let z = radius * if j % 2 == 0 { cs } else { sn };
    std.mul_add(z, mean)
}

/// Stream index `j` of `rand_uniform_f16` (`lo < up`, both values of f16).
pub fn uniform_f16_host(seed: u64, j: u64, lo: half::f16, up: half::f16) -> half::f16 {
    let r = half::f16::from_f32(uniform_f32_host(seed, j, lo.to_f32(), up.to_f32()));
    if r < up {
        r
    } else {
        half::f16::from_bits(below_16(up.to_bits()))
    }
}

/// Stream index `j` of `rand_uniform_bf16` (`lo < up`, both values of bf16).
pub fn uniform_bf16_host(seed: u64, j: u64, lo: half::bf16, up: half::bf16) -> half::bf16 {
    let r = half::bf16::from_f32(uniform_f32_host(seed, j, lo.to_f32(), up.to_f32()));
    if r < up {
        r
    } else {
        half::bf16::from_bits(below_16(up.to_bits()))
    }
}

/// Stream index `j` of `rand_normal_f16`.
pub fn normal_f16_host(seed: u64, j: u64, mean: half::f16, std: half::f16) -> half::f16 {
    half::f16::from_f32(normal_f32_host(seed, j, mean.to_f32(), std.to_f32()))
}

/// Stream index `j` of `rand_normal_bf16`.
pub fn normal_bf16_host(seed: u64, j: u64, mean: half::bf16, std: half::bf16) -> half::bf16 {
    half::bf16::from_f32(normal_f32_host(seed, j, mean.to_f32(), std.to_f32()))
}

// ------------------------------------------------------------------------------------------
// Launch wrappers
// ------------------------------------------------------------------------------------------

/// The kernels' scalar arguments: f64 for f64, f32 (holding a value of T) otherwise.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Params {
    F32(f32, f32),
    F64(f64, f64),
}

/// `(a, b)` rounded to `T` (as Candle's `T::from_f64`), in the kernel's scalar type.
fn params<T: KernelDType>(op: &str, a: f64, b: f64) -> Result<Params> {
    Ok(match T::NAME {
        "f64" => Params::F64(a, b),
        "f32" => Params::F32(a as f32, b as f32),
        "f16" => Params::F32(
            half::f16::from_f64(a).to_f32(),
            half::f16::from_f64(b).to_f32(),
        ),
        "bf16" => Params::F32(
            half::bf16::from_f64(a).to_f32(),
            half::bf16::from_f64(b).to_f32(),
        ),
        _ => {
            return Err(Error::Unsupported {
                op: op.to_string(),
                dtype: T::NAME.to_string(),
                reason: "random values are generated for the float types only (as in Candle's \
                         CPU backend)"
                    .into(),
            })
        }
    })
}

fn bad_param(op: &str, dtype: &str, reason: String) -> Error {
    Error::Unsupported {
        op: op.to_string(),
        dtype: dtype.to_string(),
        reason,
    }
}

fn launch<T: KernelDType>(
    stream: &Stream,
    op: &str,
    dst: &mut DeviceSliceMut<'_, T>,
    seed: u64,
    offset: u64,
    p: Params,
) -> Result<()> {
    let n = dst.len();
    if offset.checked_add(n as u64).is_none() {
        return Err(Error::Layout {
            op: op.to_string(),
            reason: format!("offset {offset} + {n} elements passes the end of the stream (2^64)"),
        });
    }
    if n == 0 {
        return Ok(());
    }
    let per_block = if T::NAME == "f64" { 2 } else { 4 };
    // Blocks touched: from offset / E to (offset + n - 1) / E.
    let blocks = ((offset + (n as u64 - 1)) / per_block - offset / per_block + 1) as usize;
    let device = stream.device();
    let sms = crate::elementwise::multiprocessors(stream);
    let max_blocks = (sms * BLOCKS_PER_MULTIPROCESSOR).min(65_535);
    let config = LaunchConfig {
        grid: [
            blocks.div_ceil(BLOCK_SIZE as usize).clamp(1, max_blocks) as u32,
            1,
            1,
        ],
        block: [BLOCK_SIZE, 1, 1],
        shared_mem_bytes: 0,
    };
    let kernel = format!("{op}_{}", T::NAME);
    let f = crate::modules::function(&device, "random", &kernel)?;
    let builder = f
        .builder(stream, config)
        .arg(&mut *dst)
        .arg(n as u64)
        .arg(seed)
        .arg(offset);
    let builder = match p {
        Params::F32(a, b) => builder.arg(a).arg(b),
        Params::F64(a, b) => builder.arg(a).arg(b),
    };
    // SAFETY: the kernel takes (T* out, u64 n, u64 seed, u64 offset, C a, C b) with C = double
    // for f64 and float otherwise, which is what was pushed (`params` picks the type by
    // T::NAME). It writes out[0..n) with n == dst.len(), and nothing else.
    unsafe { builder.launch()? };
    Ok(())
}

/// Fills `dst` with uniform values in `[lo, up)`: `dst[i]` is stream index `offset + i` under
/// `seed` (see the module docs). Float dtypes; `lo < up` after rounding both to `T`, and `up - lo`
/// finite.
pub fn rand_uniform<T: KernelDType>(
    stream: &Stream,
    dst: &mut DeviceSliceMut<'_, T>,
    seed: u64,
    offset: u64,
    lo: f64,
    up: f64,
) -> Result<()> {
    const OP: &str = "rand_uniform";
    let p = params::<T>(OP, lo, up)?;
    let ok = match p {
        Params::F32(a, b) => a < b && (b - a).is_finite(),
        Params::F64(a, b) => a < b && (b - a).is_finite(),
    };
    if !ok {
        return Err(bad_param(
            OP,
            T::NAME,
            format!(
                "the range [{lo}, {up}) is empty or not finite in {}",
                T::NAME
            ),
        ));
    }
    launch(stream, OP, dst, seed, offset, p)
}

/// Fills `dst` with normal values of mean `mean` and standard deviation `std` (Box–Muller):
/// `dst[i]` is stream index `offset + i` under `seed` (see the module docs). Float dtypes;
/// `mean` finite, `std` finite and `>= 0` (after rounding to `T`).
pub fn rand_normal<T: KernelDType>(
    stream: &Stream,
    dst: &mut DeviceSliceMut<'_, T>,
    seed: u64,
    offset: u64,
    mean: f64,
    std: f64,
) -> Result<()> {
    const OP: &str = "rand_normal";
    let p = params::<T>(OP, mean, std)?;
    let ok = match p {
        Params::F32(m, s) => m.is_finite() && s.is_finite() && s >= 0.0,
        Params::F64(m, s) => m.is_finite() && s.is_finite() && s >= 0.0,
    };
    if !ok {
        return Err(bad_param(
            OP,
            T::NAME,
            format!(
                "mean {mean} and std {std} must be finite with std >= 0 in {}",
                T::NAME
            ),
        ));
    }
    launch(stream, OP, dst, seed, offset, p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's known-answer vectors for philox4x32_10 (kat_vectors).
    #[test]
    fn philox_known_answers() {
        let cases: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            (
                [0, 0, 0, 0],
                [0, 0],
                [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
            ),
            (
                [0xffffffff; 4],
                [0xffffffff; 2],
                [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
            ),
            (
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0],
                [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
            ),
        ];
        for (counter, key, want) in cases {
            assert_eq!(philox4x32_10(counter, key), want, "{counter:x?} {key:x?}");
        }
    }

    #[test]
    fn kernels_exist_in_the_source() {
        let src = crate::modules::full_source("random").expect("random module");
        for dt in ["f32", "f16", "bf16"] {
            assert!(src.contains("RK_RAND_F32_FAMILY(") && src.contains(&format!("({dt})")));
        }
        assert!(src.contains("void rand_uniform_f64(") && src.contains("void rand_normal_f64("));
        // The constants of the host generator and the kernels agree.
        for c in ["0xD2511F53u", "0xCD9E8D57u", "0x9E3779B9u", "0xBB67AE85u"] {
            assert!(src.contains(c), "{c}");
        }
    }

    #[test]
    fn helpers_are_accurate() {
        // ln(k 2^-p) and (sin, cos)(2 pi j 2^-p) against std's f64 functions.
        for k in [
            1u32,
            2,
            3,
            1000,
            5_000_000,
            11_863_283,
            (1 << 24) - 1,
            1 << 24,
        ] {
            let want = (k as f64 / 16_777_216.0).ln();
            let got = ln_scaled_f32(k) as f64;
            assert!(
                (got - want).abs() <= 1e-6 * want.abs().max(1e-7),
                "ln f32 {k}"
            );
        }
        for k in [1u64, 2, 12345, 1 << 40, (1 << 53) - 1, 1 << 53] {
            let want = (k as f64 / 9_007_199_254_740_992.0).ln();
            let got = ln_scaled_f64(k);
            assert!(
                (got - want).abs() <= 4e-16 * want.abs().max(1e-16),
                "ln f64 {k}"
            );
        }
        for j in (0u32..(1 << 24)).step_by(4099) {
            let a = std::f64::consts::TAU * j as f64 / 16_777_216.0;
            let (s, c) = sincos_turn_f32(j);
            assert!((s as f64 - a.sin()).abs() < 2e-7, "sin f32 {j}");
            assert!((c as f64 - a.cos()).abs() < 2e-7, "cos f32 {j}");
        }
        for j in (0u64..(1 << 53)).step_by((1 << 53) / 9973) {
            let a = std::f64::consts::TAU * j as f64 / 9_007_199_254_740_992.0;
            let (s, c) = sincos_turn_f64(j);
            assert!((s - a.sin()).abs() < 1e-15, "sin f64 {j}");
            assert!((c - a.cos()).abs() < 1e-15, "cos f64 {j}");
        }
    }

    #[test]
    fn host_generators_are_in_range_and_well_spread() {
        let n = 200_000u64;
        let (mut s, mut s2) = (0f64, 0f64);
        for j in 0..n {
            let v = uniform_f32_host(7, j, -1.0, 3.0);
            assert!((-1.0..3.0).contains(&v));
            s += v as f64;
            s2 += (v as f64) * (v as f64);
        }
        let mean = s / n as f64;
        let var = s2 / n as f64 - mean * mean;
        assert!((mean - 1.0).abs() < 0.02 && (var - 16.0 / 12.0).abs() < 0.02);
        let (mut s, mut s2) = (0f64, 0f64);
        for j in 0..n {
            let v = normal_f64_host(7, j, 2.0, 0.5);
            s += v;
            s2 += v * v;
        }
        let mean = s / n as f64;
        let var = s2 / n as f64 - mean * mean;
        assert!((mean - 2.0).abs() < 0.01 && (var - 0.25).abs() < 0.01);
        // Rounding up to `up` is stepped below it.
        assert_eq!(below_f32(1.0), 1.0 - f32::EPSILON / 2.0);
        assert_eq!(below_f32(0.0), -f32::from_bits(1));
        assert_eq!(below_f64(-1.0), -1.0 - f64::EPSILON);
        assert_eq!(below_16(half::f16::ONE.to_bits()), 0x3bff);
        // Different seeds and tags give different streams.
        assert_ne!(
            uniform_f32_host(1, 0, 0.0, 1.0),
            uniform_f32_host(2, 0, 0.0, 1.0)
        );
        assert_ne!(block(1, 0, TAG_UNIFORM_F32), block(1, 0, TAG_NORMAL_F32));
    }

    #[test]
    fn params_round_like_candle() {
        assert_eq!(
            params::<f32>("t", 0.1, 1.0).unwrap(),
            Params::F32(0.1f32, 1.0)
        );
        assert_eq!(
            params::<half::bf16>("t", 0.1, 1.0).unwrap(),
            Params::F32(half::bf16::from_f64(0.1).to_f32(), 1.0)
        );
        assert_eq!(params::<f64>("t", 0.1, 1.0).unwrap(), Params::F64(0.1, 1.0));
        let e = params::<u8>("t", 0.0, 1.0).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    }
}
