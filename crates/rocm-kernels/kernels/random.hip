// Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random
// numbers: as easy as 1, 2, 3", SC'11), uniform and normal (Box-Muller), for f32, f64, f16, bf16:
//   rand_uniform_{T}(T* out, u64 n, u64 seed, u64 offset, C lo, C up)
//   rand_normal_{T}(T* out, u64 n, u64 seed, u64 offset, C mean, C std)
// with C = double for f64 and float otherwise. out[i] (i < n) is a pure function of
// (seed, offset + i): the same on every device, architecture and launch geometry, and equal, bit
// for bit, to the host generator in src/random.rs (whose docs spell the mapping out; keep the
// two in step). For the stream index j = offset + i:
//   key = (lo32(seed), hi32(seed)), counter = (lo32(b), hi32(b), tag, 0), b = j's block;
//   f32 family (f32, f16, bf16): 4 values per block, b = j / 4, lane l = j % 4;
//     uniform (tag 0): u = (x[l] >> 8) 2^-24;
//     normal (tag 2): lanes 2p and 2p + 1 share (x[2p], x[2p + 1]): cos and sin respectively;
//   f64: 2 values per block, b = j / 2, lane l = j % 2, 64-bit words w[k] = x[2k] | x[2k+1] << 32;
//     uniform (tag 1): u = (w[l] >> 11) 2^-53;
//     normal (tag 3): lanes 0 and 1 share (w[0], w[1]): cos and sin respectively;
//   uniform: v = RK_FMA(up - lo, u, lo), replaced by the largest value below `up` if it rounded up
//     to `up`: v in [lo, up);
//   normal (p = 24 or 53 bits from the first word a and the second word c of the pair):
//     u1 = ((a >> (32|64 - p)) + 1) 2^-p in (0, 1], t = (c >> (32|64 - p)) 2^-p in [0, 1),
//     radius = sqrt(-2 ln u1), z = radius * cos(2 pi t) | radius * sin(2 pi t),
//     v = RK_FMA(stddev, z, mean).
// f16/bf16 compute the f32 value (their lo, up, mean, std being values of T, given as f32) and
// round it to nearest even; uniform steps below `up` if it rounded up to it.
//
// Bit-exact reproducibility: only IEEE operations that round correctly (+, -, *, /, fma, sqrt),
// with our own ln, sin and cos built from them (exact range reductions, then polynomials). No
// product is fused into a sum implicitly: every multiply-add is an explicit fma and no other
// product feeds a sum; contraction is also off for this module under clang (hip-clang, hipRTC).

#if defined(__clang__)
#pragma clang fp contract(off)
// The builtins, called here, carry this module's FP options (the math headers' wrappers were
// compiled before the pragma, with contraction allowed).
#define RK_FMAF __builtin_fmaf
#define RK_FMA __builtin_fma
#define RK_SQRTF __builtin_sqrtf
#define RK_SQRT __builtin_sqrt
#else
#define RK_FMAF fmaf
#define RK_FMA fma
#define RK_SQRTF sqrtf
#define RK_SQRT sqrt
#endif

// ---- Philox4x32-10 ----

__device__ __forceinline__ void rk_philox4x32_10(u32 c0, u32 c1, u32 c2, u32 c3, u32 k0, u32 k1,
                                                 u32 x[4]) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const u64 p0 = (u64)0xD2511F53u * (u64)c0;
        const u64 p1 = (u64)0xCD9E8D57u * (u64)c2;
        const u32 n0 = (u32)(p1 >> 32) ^ c1 ^ k0;
        const u32 n2 = (u32)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (u32)p1;
        c2 = n2;
        c3 = (u32)p0;
    }
    x[0] = c0;
    x[1] = c1;
    x[2] = c2;
    x[3] = c3;
}

// The Philox output of block b of stream `tag` under `seed`.
__device__ __forceinline__ void rk_philox_block(u64 seed, u64 b, u32 tag, u32 x[4]) {
    rk_philox4x32_10((u32)b, (u32)(b >> 32), tag, 0u, (u32)seed, (u32)(seed >> 32), x);
}

// Quadrant placement: (sin, cos) of q pi/2 + a from s = sin a, c = cos a.
template <typename F>
__device__ __forceinline__ void rk_quadrant(u64 q, F s, F c, F& sn, F& cs) {
    switch (q) {
        case 0: sn = s; cs = c; break;
        case 1: sn = c; cs = -s; break;
        case 2: sn = -s; cs = -c; break;
        default: sn = -c; cs = s; break;
    }
}

// ---- f32 family ----

// ln(k 2^-24) for 1 <= k <= 2^24: k = m 2^e exactly with m in [RK_SQRT(1/2), RK_SQRT(2)), then
// ln(m) = 2 atanh(s), s = (m - 1) / (m + 1), as an odd series in s.
__device__ __forceinline__ float rk_ln_scaled_f32(u32 k) {
    const u32 bits = __float_as_uint((float)k);  // exact
    int e = (int)(bits >> 23) - 127;
    float m = __uint_as_float((bits & 0x007fffffu) | 0x3f800000u);
    if (m > 1.41421356237309505f) {
        m = m * 0.5f;
        e += 1;
    }
    const float f = m - 1.0f;  // exact
    const float s = f / (2.0f + f);
    const float z = s * s;
    float p = 0.18181818181818182f;
    p = RK_FMAF(p, z, 0.22222222222222221f);
    p = RK_FMAF(p, z, 0.2857142857142857f);
    p = RK_FMAF(p, z, 0.40000000000000002f);
    p = RK_FMAF(p, z, 0.66666666666666663f);
    const float ln_m = RK_FMAF(s * z, p, s + s);
    const float ef = (float)(e - 24);
    return RK_FMAF(ef, 0.693145751953125f, RK_FMAF(ef, 1.42860682030941723212e-06f, ln_m));
}

// (sin, cos) of 2 pi j 2^-24 for 0 <= j < 2^24: quadrant and reflection to [0, pi/4] exactly
// (in integers), then Taylor polynomials.
__device__ __forceinline__ void rk_sincos_turn_f32(u32 j, float& sn, float& cs) {
    const u32 quarter = 1u << 22;
    const u32 q = j >> 22;
    u32 rem = j & (quarter - 1u);
    const bool reflect = rem > quarter / 2u;
    if (reflect) rem = quarter - rem;
    const float t = (float)rem * 2.384185791015625e-07f * 1.57079632679489662f;
    const float z = t * t;
    float ps = 2.7557319223985893e-06f;
    ps = RK_FMAF(ps, z, -0.00019841269841269841f);
    ps = RK_FMAF(ps, z, 0.0083333333333333332f);
    ps = RK_FMAF(ps, z, -0.16666666666666666f);
    const float s = RK_FMAF(t * z, ps, t);
    float pc = -2.7557319223985888e-07f;
    pc = RK_FMAF(pc, z, 2.4801587301587302e-05f);
    pc = RK_FMAF(pc, z, -0.0013888888888888889f);
    pc = RK_FMAF(pc, z, 0.041666666666666664f);
    pc = RK_FMAF(pc, z, -0.5f);
    const float c = RK_FMAF(z, pc, 1.0f);
    rk_quadrant<float>(q, reflect ? c : s, reflect ? s : c, sn, cs);
}

// The largest float below `up` (finite).
__device__ __forceinline__ float rk_below_f32(float up) {
    const u32 b = __float_as_uint(up);
    if ((b & 0x7fffffffu) == 0u) return __uint_as_float(0x80000001u);
    return __uint_as_float((b >> 31) ? b + 1u : b - 1u);
}

__device__ __forceinline__ void rk_uniform_block_f32(u64 seed, u64 b, float lo, float up,
                                                     float v[4]) {
    u32 x[4];
    rk_philox_block(seed, b, 0u, x);
    const float d = up - lo;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
        const float u = (float)(x[l] >> 8) * 5.9604644775390625e-08f;
        const float r = RK_FMAF(d, u, lo);
        v[l] = r < up ? r : rk_below_f32(up);
    }
}

__device__ __forceinline__ void rk_normal_block_f32(u64 seed, u64 b, float mean, float stddev,
                                                    float v[4]) {
    u32 x[4];
    rk_philox_block(seed, b, 2u, x);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
        const float radius = RK_SQRTF(-2.0f * rk_ln_scaled_f32((x[2 * p] >> 8) + 1u));
        float sn, cs;
        rk_sincos_turn_f32(x[2 * p + 1] >> 8, sn, cs);
        v[2 * p] = RK_FMAF(stddev, radius * cs, mean);
        v[2 * p + 1] = RK_FMAF(stddev, radius * sn, mean);
    }
}

// ---- f64 ----

// ln(k 2^-53) for 1 <= k <= 2^53 (as rk_ln_scaled_f32).
__device__ __forceinline__ double rk_ln_scaled_f64(u64 k) {
    const u64 bits = (u64)__double_as_longlong((double)k);  // exact
    int e = (int)(bits >> 52) - 1023;
    double m = __longlong_as_double((long long)((bits & 0x000fffffffffffffull) |
                                                0x3ff0000000000000ull));
    if (m > 1.4142135623730951) {
        m = m * 0.5;
        e += 1;
    }
    const double f = m - 1.0;  // exact
    const double s = f / (2.0 + f);
    const double z = s * s;
    double p = 0.095238095238095233;
    p = RK_FMA(p, z, 0.10526315789473684);
    p = RK_FMA(p, z, 0.11764705882352941);
    p = RK_FMA(p, z, 0.13333333333333333);
    p = RK_FMA(p, z, 0.15384615384615385);
    p = RK_FMA(p, z, 0.18181818181818182);
    p = RK_FMA(p, z, 0.22222222222222221);
    p = RK_FMA(p, z, 0.2857142857142857);
    p = RK_FMA(p, z, 0.40000000000000002);
    p = RK_FMA(p, z, 0.66666666666666663);
    const double ln_m = RK_FMA(s * z, p, s + s);
    const double ef = (double)(e - 53);
    return RK_FMA(ef, 6.93147180369123816490e-01, RK_FMA(ef, 1.90821492927058770002e-10, ln_m));
}

// (sin, cos) of 2 pi j 2^-53 for 0 <= j < 2^53 (as rk_sincos_turn_f32).
__device__ __forceinline__ void rk_sincos_turn_f64(u64 j, double& sn, double& cs) {
    const u64 quarter = 1ull << 51;
    const u64 q = j >> 51;
    u64 rem = j & (quarter - 1ull);
    const bool reflect = rem > quarter / 2ull;
    if (reflect) rem = quarter - rem;
    const double t = (double)rem * 4.440892098500626e-16 * 1.5707963267948966;
    const double z = t * t;
    double ps = 2.8114572543455206e-15;
    ps = RK_FMA(ps, z, -7.6471637318198164e-13);
    ps = RK_FMA(ps, z, 1.6059043836821613e-10);
    ps = RK_FMA(ps, z, -2.505210838544172e-08);
    ps = RK_FMA(ps, z, 2.7557319223985893e-06);
    ps = RK_FMA(ps, z, -0.00019841269841269841);
    ps = RK_FMA(ps, z, 0.0083333333333333332);
    ps = RK_FMA(ps, z, -0.16666666666666666);
    const double s = RK_FMA(t * z, ps, t);
    double pc = -1.5619206968586225e-16;
    pc = RK_FMA(pc, z, 4.7794773323873853e-14);
    pc = RK_FMA(pc, z, -1.1470745597729725e-11);
    pc = RK_FMA(pc, z, 2.08767569878681e-09);
    pc = RK_FMA(pc, z, -2.7557319223985888e-07);
    pc = RK_FMA(pc, z, 2.4801587301587302e-05);
    pc = RK_FMA(pc, z, -0.0013888888888888889);
    pc = RK_FMA(pc, z, 0.041666666666666664);
    pc = RK_FMA(pc, z, -0.5);
    const double c = RK_FMA(z, pc, 1.0);
    rk_quadrant<double>(q, reflect ? c : s, reflect ? s : c, sn, cs);
}

__device__ __forceinline__ double rk_below_f64(double up) {
    const u64 b = (u64)__double_as_longlong(up);
    if ((b & 0x7fffffffffffffffull) == 0ull) return __longlong_as_double((long long)0x8000000000000001ull);
    return __longlong_as_double((long long)((b >> 63) ? b + 1ull : b - 1ull));
}

__device__ __forceinline__ u64 rk_word64(const u32 x[4], int k) {
    return (u64)x[2 * k] | ((u64)x[2 * k + 1] << 32);
}

__device__ __forceinline__ void rk_uniform_block_f64(u64 seed, u64 b, double lo, double up,
                                                     double v[2]) {
    u32 x[4];
    rk_philox_block(seed, b, 1u, x);
    const double d = up - lo;
#pragma unroll
    for (int l = 0; l < 2; ++l) {
        const double u = (double)(rk_word64(x, l) >> 11) * 1.1102230246251565e-16;
        const double r = RK_FMA(d, u, lo);
        v[l] = r < up ? r : rk_below_f64(up);
    }
}

__device__ __forceinline__ void rk_normal_block_f64(u64 seed, u64 b, double mean, double stddev,
                                                    double v[2]) {
    u32 x[4];
    rk_philox_block(seed, b, 3u, x);
    const double radius = RK_SQRT(-2.0 * rk_ln_scaled_f64((rk_word64(x, 0) >> 11) + 1ull));
    double sn, cs;
    rk_sincos_turn_f64(rk_word64(x, 1) >> 11, sn, cs);
    v[0] = RK_FMA(stddev, radius * cs, mean);
    v[1] = RK_FMA(stddev, radius * sn, mean);
}

// ---- storing ----

// An f32-family value to T: normal() rounds; uniform() also steps below `up` if rounding
// reached it.
template <typename T> struct rk_rand_store;
template <> struct rk_rand_store<f32> {
    static __device__ __forceinline__ f32 normal(float v) { return v; }
    static __device__ __forceinline__ f32 uniform(float v, float) { return v; }
};
// The largest 16-bit float below the (finite) one with these bits.
__device__ __forceinline__ unsigned short rk_below_16(unsigned short b) {
    if ((b & 0x7fffu) == 0u) return (unsigned short)0x8001u;
    return (unsigned short)((b >> 15) ? b + 1u : b - 1u);
}
// f32 -> f16, nearest even, in integer arithmetic: the same bits on every target (AMDGPU may
// otherwise fold the conversion with the preceding fma into one mixed-precision instruction).
__device__ __forceinline__ f16 rk_f32_to_f16(float v) {
    const u32 x = __float_as_uint(v);
    const u32 sign = (x >> 16) & 0x8000u;
    const u32 a = x & 0x7fffffffu;
    u32 h;
    if (a >= 0x7f800000u) {
        h = a > 0x7f800000u ? 0x7e00u : 0x7c00u;  // NaN, infinity
    } else if (a >= 0x477ff000u) {
        h = 0x7c00u;  // rounds to infinity (>= 65520)
    } else if (a >= 0x38800000u) {
        // Normal: drop 13 mantissa bits, rebias the exponent (a carry may bump it).
        h = (a - 0x38000000u) >> 13;
        const u32 rem = a & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1u;
    } else {
        // Subnormal (or zero): the value in units of 2^-24, rounded.
        const u32 e = a >> 23;
        const u32 shift = 126u - e;
        if (shift > 24u) {
            h = 0u;
        } else {
            const u32 mant = (a & 0x007fffffu) | 0x00800000u;
            h = mant >> shift;
            const u32 rem = mant & ((1u << shift) - 1u);
            const u32 half = 1u << (shift - 1u);
            if (rem > half || (rem == half && (h & 1u))) h += 1u;
        }
    }
    return __ushort_as_half((unsigned short)(sign | h));
}
template <> struct rk_rand_store<f16> {
    static __device__ __forceinline__ f16 normal(float v) { return rk_f32_to_f16(v); }
    static __device__ __forceinline__ f16 uniform(float v, float up) {
        const f16 r = rk_f32_to_f16(v);
        if (__half2float(r) < up) return r;
        return __ushort_as_half(rk_below_16(__half_as_ushort(__float2half(up))));
    }
};
template <> struct rk_rand_store<bf16> {
    static __device__ __forceinline__ bf16 normal(float v) { return __float2bfloat16(v); }
    static __device__ __forceinline__ bf16 uniform(float v, float up) {
        const bf16 r = __float2bfloat16(v);
        if (__bfloat162float(r) < up) return r;
        return __ushort_as_bfloat16(rk_below_16(__bfloat16_as_ushort(__float2bfloat16(up))));
    }
};

// out[i] = put(value of stream index offset + i) for i < n, where gen(b, v) fills the E values
// of block b. One block per thread and step; blocks straddling [offset, offset + n) are cut.
template <int E, typename T, typename F, typename Gen, typename Put>
__device__ __forceinline__ void rk_rand_fill(T* out, u64 n, u64 offset, Gen gen, Put put) {
    if (n == 0) return;
    const u64 last = offset + (n - 1);  // no overflow: checked by the host
    const u64 b0 = offset / E;
    const u64 nblocks = last / E - b0 + 1;
    for (u64 t = rk_thread_id(); t < nblocks; t += rk_thread_count()) {
        const u64 b = b0 + t;
        F v[E];
        gen(b, v);
#pragma unroll
        for (int l = 0; l < E; ++l) {
            const u64 j = b * E + (u64)l;
            if (j >= offset && j <= last) out[j - offset] = put(v[l]);
        }
    }
}

#define RK_RAND_F32_FAMILY(T)                                                                  \
    RK_KERNEL void rand_uniform_##T(T* out, u64 n, u64 seed, u64 offset, float lo, float up) { \
        rk_rand_fill<4, T, float>(                                                             \
            out, n, offset,                                                                    \
            [=](u64 b, float* v) { rk_uniform_block_f32(seed, b, lo, up, v); },                \
            [=](float v) { return rk_rand_store<T>::uniform(v, up); });                        \
    }                                                                                          \
    RK_KERNEL void rand_normal_##T(T* out, u64 n, u64 seed, u64 offset, float mean,            \
                                   float stddev) {                                                \
        rk_rand_fill<4, T, float>(                                                             \
            out, n, offset,                                                                    \
            [=](u64 b, float* v) { rk_normal_block_f32(seed, b, mean, stddev, v); },              \
            [=](float v) { return rk_rand_store<T>::normal(v); });                             \
    }

RK_RAND_F32_FAMILY(f32)
RK_RAND_F32_FAMILY(f16)
RK_RAND_F32_FAMILY(bf16)

RK_KERNEL void rand_uniform_f64(f64* out, u64 n, u64 seed, u64 offset, double lo, double up) {
    rk_rand_fill<2, f64, double>(
        out, n, offset, [=](u64 b, double* v) { rk_uniform_block_f64(seed, b, lo, up, v); },
        [=](double v) { return v; });
}
RK_KERNEL void rand_normal_f64(f64* out, u64 n, u64 seed, u64 offset, double mean, double stddev) {
    rk_rand_fill<2, f64, double>(
        out, n, offset, [=](u64 b, double* v) { rk_normal_block_f64(seed, b, mean, stddev, v); },
        [=](double v) { return v; });
}
