// rocm-kernels prelude: prepended to every module. Portable HIP: compiles with hip-clang and
// hipRTC on AMD and with NVRTC (through hip-core's virtual hip/*.h headers) on NVIDIA.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bf16.h>

typedef unsigned char u8;
typedef unsigned int u32;
typedef short i16;
typedef int i32;
typedef long long i64;
typedef unsigned long long u64;
typedef __half f16;
typedef __hip_bfloat16 bf16;
typedef float f32;
typedef double f64;

// Strided index: the offset, in elements, of the `i`-th element (row-major over `dims`) of an
// operand with `strides`. `info` holds dims[num_dims] then the operand's strides.
__device__ __forceinline__ u64 strided_offset(u64 i, u64 num_dims, const u64* dims,
                                              const u64* strides) {
    u64 offset = 0;
    for (long long d = (long long)num_dims - 1; d >= 0; --d) {
        u64 dim = dims[d];
        offset += (i % dim) * strides[d];
        i /= dim;
    }
    return offset;
}

// ---------------------------------------------------------------------------------------------
// Element-wise helpers (unary, affine, binary, cast, ternary, fill modules).
// ---------------------------------------------------------------------------------------------

#define RK_KERNEL extern "C" __global__

// Overlapped launches (programmatic dependent launch, NVIDIA sm_90 and later). A kernel that
// hip-core launches with `overlap_previous` may start while the previous kernel on its stream
// is still running. Before it reads anything earlier work wrote, and before it writes anything,
// each thread calls rk_wait_previous(): it returns once every earlier kernel has finished and
// its writes are visible. rk_release_next() lets the next overlapped kernel start; it comes
// after the wait, so that a kernel started early only ever overlaps the one kernel before it.
// Elsewhere (AMD, older NVIDIA) launches are never overlapped and both are empty.
__device__ __forceinline__ void rk_wait_previous() {
#if defined(__HIP_PLATFORM_NVIDIA__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void rk_release_next() {
#if defined(__HIP_PLATFORM_NVIDIA__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// The start of a kernel that reads nothing before the previous kernels have finished.
__device__ __forceinline__ void rk_overlapped_entry() {
    rk_wait_previous();
    rk_release_next();
}

// Grid-stride loop bounds. Launches use a 1-D grid whose total thread count stays below 2^31.
__device__ __forceinline__ u64 rk_thread_id() {
    return (u64)blockIdx.x * (u64)blockDim.x + (u64)threadIdx.x;
}
__device__ __forceinline__ u64 rk_thread_count() { return (u64)gridDim.x * (u64)blockDim.x; }

// Offsets, in elements, of the `i`-th element (row-major over dims) in each of N strided
// operands. `info` holds dims[num_dims] then N stride sets of num_dims each. `I` is the index
// type: u32 when numel < 2^31 (32-bit division is much cheaper), u64 otherwise.
template <typename I, int N>
__device__ __forceinline__ void rk_strided_offsets(I i, u32 num_dims, const u64* info, u64* off) {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = (int)num_dims - 1; d >= 0; --d) {
        const I dim = (I)info[d];
        const I coord = i % dim;
        i /= dim;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += (u64)coord * info[(u64)(k + 1) * num_dims + d];
    }
}

// Runs `f(out_index, offsets)` for every element, where offsets[k] is the element offset in
// operand k: the plain index when `info` is null (every operand contiguous), else computed
// from dims and strides. Output index = element index (outputs are contiguous).
template <int N, typename F>
__device__ __forceinline__ void rk_for_each(u64 numel, u64 num_dims, const u64* info, F f) {
    const u64 start = rk_thread_id();
    const u64 step = rk_thread_count();
    if (info == nullptr) {
        for (u64 i = start; i < numel; i += step) {
            u64 off[N];
#pragma unroll
            for (int k = 0; k < N; ++k) off[k] = i;
            f(i, off);
        }
    } else if (numel < 0x80000000ull) {
        // i < 2^31 and step < 2^31: i + step never wraps a u32.
        for (u32 i = (u32)start; i < (u32)numel; i += (u32)step) {
            u64 off[N];
            rk_strided_offsets<u32, N>(i, (u32)num_dims, info, off);
            f((u64)i, off);
        }
    } else {
        for (u64 i = start; i < numel; i += step) {
            u64 off[N];
            rk_strided_offsets<u64, N>(i, (u32)num_dims, info, off);
            f(i, off);
        }
    }
}

// Arithmetic type of each element type: f32 for the 16-bit floats, the type itself otherwise.
template <typename T> struct rk_compute { typedef T type; };
template <> struct rk_compute<f16> { typedef float type; };
template <> struct rk_compute<bf16> { typedef float type; };

__device__ __forceinline__ float rk_to_compute(f16 x) { return __half2float(x); }
__device__ __forceinline__ float rk_to_compute(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float rk_to_compute(f32 x) { return x; }
__device__ __forceinline__ double rk_to_compute(f64 x) { return x; }
__device__ __forceinline__ u8 rk_to_compute(u8 x) { return x; }
__device__ __forceinline__ u32 rk_to_compute(u32 x) { return x; }
__device__ __forceinline__ i16 rk_to_compute(i16 x) { return x; }
__device__ __forceinline__ i32 rk_to_compute(i32 x) { return x; }
__device__ __forceinline__ i64 rk_to_compute(i64 x) { return x; }

// Back from the arithmetic type (round to nearest even for the 16-bit floats).
template <typename T> __device__ __forceinline__ T rk_from_compute(typename rk_compute<T>::type x) {
    return x;
}
template <> __device__ __forceinline__ f16 rk_from_compute<f16>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ bf16 rk_from_compute<bf16>(float x) {
    return __float2bfloat16(x);
}

// Wrapping integer arithmetic: computed in an unsigned type at least 32 bits wide (no signed
// overflow, no promotion to int), then truncated back (two's complement), like Rust's
// wrapping_* methods.
template <typename T> struct rk_wide_unsigned { typedef u32 type; };
template <> struct rk_wide_unsigned<i64> { typedef u64 type; };
template <typename T> __device__ __forceinline__ T rk_wrapping_add(T a, T b) {
    typedef typename rk_wide_unsigned<T>::type W;
    return (T)((W)a + (W)b);
}
template <typename T> __device__ __forceinline__ T rk_wrapping_sub(T a, T b) {
    typedef typename rk_wide_unsigned<T>::type W;
    return (T)((W)a - (W)b);
}
template <typename T> __device__ __forceinline__ T rk_wrapping_mul(T a, T b) {
    typedef typename rk_wide_unsigned<T>::type W;
    return (T)((W)a * (W)b);
}
template <typename T> __device__ __forceinline__ T rk_wrapping_neg(T a) {
    typedef typename rk_wide_unsigned<T>::type W;
    return (T)((W)0 - (W)a);
}
// x < 0, spelled without comparing an unsigned value with zero.
__device__ __forceinline__ bool rk_is_negative(u8) { return false; }
__device__ __forceinline__ bool rk_is_negative(u32) { return false; }
__device__ __forceinline__ bool rk_is_negative(i16 x) { return x < 0; }
__device__ __forceinline__ bool rk_is_negative(i32 x) { return x < 0; }
__device__ __forceinline__ bool rk_is_negative(i64 x) { return x < 0; }
// Integer division that never traps: x / 0 == 0, and MIN / -1 == MIN (wrapping) for signed
// types; otherwise truncating toward zero (Rust's and C's `/`).
template <typename T> __device__ __forceinline__ T rk_int_div(T a, T b) {
    if (b == (T)0) return (T)0;
    if (rk_is_negative(b) && (T)(b + (T)1) == (T)0) return rk_wrapping_neg(a);  // b == -1
    return (T)(a / b);
}

// Saturating float -> integer conversion with Rust `as` semantics: truncation toward zero,
// NaN -> 0, values out of range clamp to the type's MIN/MAX. `lo` is MIN and `hi_excl` is
// MAX + 1 (both exact powers of two or zero, hence exactly representable in F).
template <typename I, typename F>
__device__ __forceinline__ I rk_sat_cast(F v, F lo, F hi_excl, I min_value, I max_value) {
    if (v != v) return (I)0;
    if (v <= lo) return min_value;
    if (v >= hi_excl) return max_value;
    return (I)v;
}
template <typename I> struct rk_int_limits;
template <> struct rk_int_limits<u8> {
    static __device__ __forceinline__ u8 min() { return 0; }
    static __device__ __forceinline__ u8 max() { return 255; }
    static __device__ __forceinline__ double hi_excl() { return 256.0; }
};
template <> struct rk_int_limits<u32> {
    static __device__ __forceinline__ u32 min() { return 0u; }
    static __device__ __forceinline__ u32 max() { return 0xffffffffu; }
    static __device__ __forceinline__ double hi_excl() { return 4294967296.0; }
};
template <> struct rk_int_limits<i16> {
    static __device__ __forceinline__ i16 min() { return (i16)-32768; }
    static __device__ __forceinline__ i16 max() { return (i16)32767; }
    static __device__ __forceinline__ double hi_excl() { return 32768.0; }
};
template <> struct rk_int_limits<i32> {
    static __device__ __forceinline__ i32 min() { return (i32)(-2147483647 - 1); }
    static __device__ __forceinline__ i32 max() { return (i32)2147483647; }
    static __device__ __forceinline__ double hi_excl() { return 2147483648.0; }
};
template <> struct rk_int_limits<i64> {
    static __device__ __forceinline__ i64 min() { return (i64)(-9223372036854775807ll - 1); }
    static __device__ __forceinline__ i64 max() { return (i64)9223372036854775807ll; }
    static __device__ __forceinline__ double hi_excl() { return 9223372036854775808.0; }
};
// Float (f32 or f64) to integer `I`, saturating like Rust's `as`.
template <typename I, typename F> __device__ __forceinline__ I rk_float_to_int(F v) {
    typedef rk_int_limits<I> L;
    return rk_sat_cast<I, F>(v, (F)(double)L::min(), (F)L::hi_excl(), L::min(), L::max());
}

// f64 -> f32 rounded to odd: exact results stay, inexact ones become the neighbour (of the two
// around x) whose last mantissa bit is 1. Rounding that to a format of at most 22 significant
// bits (f16, bf16) to nearest-even gives the correctly rounded result (no double rounding).
__device__ __forceinline__ float rk_f64_to_f32_round_odd(double x) {
    float f = (float)x;
    u32 bits = __float_as_uint(f);
    const bool finite = (bits & 0x7f800000u) != 0x7f800000u;
    if (finite && (double)f != x && (bits & 1u) == 0u) {
        // |f| > |x|: the other neighbour is one ulp smaller in magnitude, else one ulp larger.
        if (fabs((double)f) > fabs(x)) bits -= 1u; else bits += 1u;
        f = __uint_as_float(bits);
    }
    return f;
}
__device__ __forceinline__ f16 rk_f64_to_f16(double x) {
    return __float2half(rk_f64_to_f32_round_odd(x));
}
__device__ __forceinline__ bf16 rk_f64_to_bf16(double x) {
    return __float2bfloat16(rk_f64_to_f32_round_odd(x));
}

// ---- f8e4m3 (OCP e4m3fn, Candle's `float8::F8E4M3`), stored as its byte ----
// f64 -> f8e4m3 as `F8E4M3::from_f64` (float8 0.7): round to nearest even in one step; NaN ->
// 0x7F with the input's sign; magnitudes above 464 (infinities included) saturate to +-448
// (0x7E); magnitudes up to 2^-10 round to +-0. (`from_f32(x)` is `from_f64(x as f64)`.)
__device__ __forceinline__ u8 rk_f64_to_e4m3(double x) {
    const unsigned long long xb = (unsigned long long)__double_as_longlong(x);
    const u8 sign = (u8)((xb >> 63) << 7);
    const unsigned long long ax = xb & 0x7FFFFFFFFFFFFFFFull;
    if (ax > 0x7FF0000000000000ull) return (u8)(0x7F | sign); // NaN
    if (ax > 0x407D000000000000ull) return (u8)(0x7E | sign); // > 464, inf: saturate to 448
    const double a = fabs(x);
    int e2 = 0;
    (void)frexp(a, &e2); // a = f * 2^e2, f in [0.5, 1)
    const int e = e2 - 1; // unbiased exponent of a normal double
    if (a == 0.0 || e < -6) {
        // Subnormal range: units of 2^-9; 8 units is the smallest normal (bits 0x08).
        return (u8)((u8)rint(ldexp(a, 9)) | sign);
    }
    // Normal range: the significand in units of 2^(e-3) is in [8, 16]; 16 carries into the
    // exponent, which the addition below does by itself (|x| <= 464 keeps it finite).
    const int q = (int)rint(ldexp(a, 3 - e));
    return (u8)((((e + 7) << 3) + q - 8) | sign);
}

// f8e4m3 -> f32, exact (`F8E4M3::to_f32`): 0x7F/0xFF are NaN (a positive NaN, as float8 returns).
__device__ __forceinline__ float rk_e4m3_to_f32(u8 b) {
    if ((b & 0x7F) == 0x7F) return __int_as_float(0x7FC00000); // NaN
    const int exp = (b >> 3) & 0xF;
    const int man = b & 7;
    const float mag = exp == 0 ? ldexpf((float)man, -9) : ldexpf((float)(8 + man), exp - 10);
    return (b & 0x80) ? -mag : mag;
}

// Math in the arithmetic type: the f32 functions for float, the f64 ones for double.
#define RK_MATH1(NAME, F32, F64) \
    __device__ __forceinline__ float NAME(float x) { return F32(x); } \
    __device__ __forceinline__ double NAME(double x) { return F64(x); }
RK_MATH1(rk_exp, expf, exp)
RK_MATH1(rk_expm1, expm1f, expm1)
RK_MATH1(rk_log, logf, log)
RK_MATH1(rk_sin, sinf, sin)
RK_MATH1(rk_cos, cosf, cos)
RK_MATH1(rk_tanh, tanhf, tanh)
RK_MATH1(rk_sqrt, sqrtf, sqrt)
RK_MATH1(rk_erf, erff, erf)
RK_MATH1(rk_erfc, erfcf, erfc)
RK_MATH1(rk_abs, fabsf, fabs)
RK_MATH1(rk_ceil, ceilf, ceil)
RK_MATH1(rk_floor, floorf, floor)
RK_MATH1(rk_round, roundf, round)
#undef RK_MATH1
__device__ __forceinline__ float rk_pow(float x, float e) { return powf(x, e); }
__device__ __forceinline__ double rk_pow(double x, double e) { return pow(x, e); }
__device__ __forceinline__ float rk_fmax(float x, float y) { return fmaxf(x, y); }
__device__ __forceinline__ double rk_fmax(double x, double y) { return fmax(x, y); }

// ---- Vectorised contiguous fast paths ----
// K consecutive elements moved in one access of K * sizeof(T) bytes (at most 16).
template <typename T, int K> struct alignas(sizeof(T) * K) rk_vec { T v[K]; };

// Elements per vector access: 16 bytes of the widest of the element types involved.
template <typename A, typename B, typename C = A, typename D = A> struct rk_vec_width {
    static const int ab = sizeof(A) > sizeof(B) ? (int)sizeof(A) : (int)sizeof(B);
    static const int cd = sizeof(C) > sizeof(D) ? (int)sizeof(C) : (int)sizeof(D);
    static const int value = 16 / (ab > cd ? ab : cd);
};

__device__ __forceinline__ bool rk_aligned(const void* p, u64 bytes) {
    return ((u64)p & (bytes - 1)) == 0;
}

// out[i] = f(a[i]) for every i < numel (all operands contiguous), with one 16-byte access per
// operand per K elements when every pointer is aligned for it; returns false, having done
// nothing, when one is not (the caller then takes its scalar path).
template <typename A, typename R, typename F>
__device__ __forceinline__ bool rk_map1_contiguous(u64 numel, const A* a, R* out, F f) {
    const int K = rk_vec_width<A, R>::value;
    typedef rk_vec<A, K> VA;
    typedef rk_vec<R, K> VR;
    if (!rk_aligned(a, sizeof(VA)) || !rk_aligned(out, sizeof(VR))) return false;
    const u64 start = rk_thread_id();
    const u64 step = rk_thread_count();
    const u64 nvec = numel / K;
    for (u64 v = start; v < nvec; v += step) {
        const VA x = reinterpret_cast<const VA*>(a)[v];
        VR r;
#pragma unroll
        for (int k = 0; k < K; ++k) r.v[k] = f(x.v[k]);
        reinterpret_cast<VR*>(out)[v] = r;
    }
    for (u64 i = nvec * K + start; i < numel; i += step) out[i] = f(a[i]);
    return true;
}

// out[i] = f(a[i], b[i]), as rk_map1_contiguous.
template <typename A, typename B, typename R, typename F>
__device__ __forceinline__ bool rk_map2_contiguous(u64 numel, const A* a, const B* b, R* out,
                                                   F f) {
    const int K = rk_vec_width<A, B, R>::value;
    typedef rk_vec<A, K> VA;
    typedef rk_vec<B, K> VB;
    typedef rk_vec<R, K> VR;
    if (!rk_aligned(a, sizeof(VA)) || !rk_aligned(b, sizeof(VB)) || !rk_aligned(out, sizeof(VR)))
        return false;
    const u64 start = rk_thread_id();
    const u64 step = rk_thread_count();
    const u64 nvec = numel / K;
    for (u64 v = start; v < nvec; v += step) {
        const VA x = reinterpret_cast<const VA*>(a)[v];
        const VB y = reinterpret_cast<const VB*>(b)[v];
        VR r;
#pragma unroll
        for (int k = 0; k < K; ++k) r.v[k] = f(x.v[k], y.v[k]);
        reinterpret_cast<VR*>(out)[v] = r;
    }
    for (u64 i = nvec * K + start; i < numel; i += step) out[i] = f(a[i], b[i]);
    return true;
}

// out[i] = f(a[i], b[i], c[i]), as rk_map1_contiguous.
template <typename A, typename B, typename C, typename R, typename F>
__device__ __forceinline__ bool rk_map3_contiguous(u64 numel, const A* a, const B* b, const C* c,
                                                   R* out, F f) {
    const int K = rk_vec_width<A, B, C, R>::value;
    typedef rk_vec<A, K> VA;
    typedef rk_vec<B, K> VB;
    typedef rk_vec<C, K> VC;
    typedef rk_vec<R, K> VR;
    if (!rk_aligned(a, sizeof(VA)) || !rk_aligned(b, sizeof(VB)) || !rk_aligned(c, sizeof(VC)) ||
        !rk_aligned(out, sizeof(VR)))
        return false;
    const u64 start = rk_thread_id();
    const u64 step = rk_thread_count();
    const u64 nvec = numel / K;
    for (u64 v = start; v < nvec; v += step) {
        const VA x = reinterpret_cast<const VA*>(a)[v];
        const VB y = reinterpret_cast<const VB*>(b)[v];
        const VC z = reinterpret_cast<const VC*>(c)[v];
        VR r;
#pragma unroll
        for (int k = 0; k < K; ++k) r.v[k] = f(x.v[k], y.v[k], z.v[k]);
        reinterpret_cast<VR*>(out)[v] = r;
    }
    for (u64 i = nvec * K + start; i < numel; i += step) out[i] = f(a[i], b[i], c[i]);
    return true;
}
