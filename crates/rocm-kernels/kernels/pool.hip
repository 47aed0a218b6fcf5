// Pooling and upsampling over NCHW (NCL for 1-D) inputs, following candle-core 0.11's CPU
// backend. The input is strided (its 4 (or 3) strides are passed by value, in elements; `src`
// arrives offset to the layout's start); the output is contiguous, row-major over
// (b, c, h_out, w_out). Launches are 1-D grid-stride loops over the output elements; `numel` is
// the output's element count, `c` and the output's spatial sizes give its shape. Index math is
// 32-bit when numel < 2^31, 64-bit otherwise; input offsets are always 64-bit.
//
//   avg_pool2d_{T}(numel, c, h_out, w_out, s0, s1, s2, s3, k_h, k_w, st_h, st_w, f64 scale, src, dst)
//   max_pool2d_{T}(numel, c, h_out, w_out, s0, s1, s2, s3, k_h, k_w, st_h, st_w, src, dst)
//       window (y * st_h + m, x * st_w + n), m < k_h, n < k_w; no padding. avg: the sum in the
//       arithmetic type (f32 for f16/bf16), in row-major window order, times `scale` (1 / (k_h
//       k_w), rounded to the arithmetic type); integers: the exact mean truncated toward zero.
//       max: the first element, replaced by every later one it is less than (row-major window
//       order; a NaN first element stays, later NaNs are skipped), bit-exact.
//   upsample_nearest1d_{T}(numel, c, l_in, l_out, s0, s1, s2, f64 scale, src, dst)
//   upsample_nearest2d_{T}(numel, c, h_in, w_in, h_out, w_out, s0, s1, s2, s3, f64 scale_h,
//                          f64 scale_w, src, dst)
//       source index min(in - 1, (u64)(dst_index * scale)) per axis, scale = in / out (f64),
//       bit-exact copies.
//   upsample_bilinear2d_{T}(numel, c, h_in, w_in, h_out, w_out, s0, s1, s2, s3, u32 align_corners,
//                           f64 scale_h, f64 scale_w, src, dst)
//       per axis: src = align ? scale * o : scale * (o + 0.5) - 0.5, clamped below at 0;
//       i0 = min(floor(src), in - 1), i1 = min(i0 + 1, in - 1), weight clamp(src - i0, 0, 1);
//       the four taps blended in f64 (top, bottom, then vertical), rounded once to T (integers:
//       Rust `as`, i.e. truncating and saturating). `scale` per axis comes from the host
//       (Candle's rules: align_corners, the optional scale factor, or in / out).

// Products that feed a sum are never fused into an FMA (the bilinear blend and coordinates
// round like Candle's CPU code): contraction is off for this module under clang (hip-clang,
// hipRTC) and NVIDIA's __dmul_rn is never contracted by NVRTC.
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
__device__ __forceinline__ double rk_dmul(double a, double b) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}

// The output index i split into (plane = b * c + ch, y, x) of a (.., h_out, w_out) output.
template <typename I>
__device__ __forceinline__ void rk_split_hw(I i, I h_out, I w_out, I& plane, I& y, I& x) {
    x = i % w_out;
    i /= w_out;
    y = i % h_out;
    plane = i / h_out;
}

// The start offset of plane (b * c + ch) of an input with batch stride s0 and channel stride s1.
template <typename I>
__device__ __forceinline__ u64 rk_plane_offset(I plane, I c, u64 s0, u64 s1) {
    return (u64)(plane / c) * s0 + (u64)(plane % c) * s1;
}

// Runs body(i) over every output index with a u32 index below 2^31 elements, u64 otherwise.
#define RK_GENERIC_LOOP(NUMEL, BODY)                                                          \
    do {                                                                                      \
        if ((NUMEL) < 0x80000000ull) {                                                        \
            for (u32 i = (u32)rk_thread_id(); i < (u32)(NUMEL); i += (u32)rk_thread_count())  \
                BODY(i);                                                                      \
        } else {                                                                              \
            for (u64 i = rk_thread_id(); i < (NUMEL); i += rk_thread_count()) BODY(i);        \
        }                                                                                     \
    } while (0)

// ---- average pooling ----

// Exact mean of integers, truncated toward zero. The narrow types sum exactly in i64; i64 keeps
// the sum as q * count + r with |r| < count (no overflow whatever the values).
template <typename T> struct rk_int_mean {
    i64 sum;
    __device__ __forceinline__ rk_int_mean() : sum(0) {}
    __device__ __forceinline__ void add(T v, i64) { sum += (i64)v; }
    __device__ __forceinline__ T get(i64 count) const { return (T)(sum / count); }
};
template <> struct rk_int_mean<i64> {
    i64 q, r;
    __device__ __forceinline__ rk_int_mean() : q(0), r(0) {}
    __device__ __forceinline__ void add(i64 v, i64 count) {
        q += v / count;
        r += v % count;
        q += r / count;
        r %= count;
    }
    __device__ __forceinline__ i64 get(i64) const {
        // The mean is q + r / count with |r| < count.
        if (q > 0 && r < 0) return q - 1;
        if (q < 0 && r > 0) return q + 1;
        return q;
    }
};

template <typename T, bool IS_FLOAT> struct rk_avg;
template <typename T> struct rk_avg<T, true> {
    typedef typename rk_compute<T>::type C;
    static __device__ __forceinline__ T window(const T* p, u64 k_h, u64 k_w, u64 s2, u64 s3,
                                               double scale) {
        C sum = (C)0;
        for (u64 m = 0; m < k_h; ++m)
            for (u64 n = 0; n < k_w; ++n) sum += rk_to_compute(p[m * s2 + n * s3]);
        return rk_from_compute<T>(sum * (C)scale);
    }
};
template <typename T> struct rk_avg<T, false> {
    static __device__ __forceinline__ T window(const T* p, u64 k_h, u64 k_w, u64 s2, u64 s3,
                                               double) {
        const i64 count = (i64)(k_h * k_w);
        rk_int_mean<T> acc;
        for (u64 m = 0; m < k_h; ++m)
            for (u64 n = 0; n < k_w; ++n) acc.add(p[m * s2 + n * s3], count);
        return acc.get(count);
    }
};

template <typename T> struct rk_is_float { static const bool value = false; };
template <> struct rk_is_float<f16> { static const bool value = true; };
template <> struct rk_is_float<bf16> { static const bool value = true; };
template <> struct rk_is_float<f32> { static const bool value = true; };
template <> struct rk_is_float<f64> { static const bool value = true; };

#define RK_POOL_PARAMS                                                                        \
    u64 numel, u64 c, u64 h_out, u64 w_out, u64 s0, u64 s1, u64 s2, u64 s3, u64 k_h, u64 k_w, \
        u64 st_h, u64 st_w

// The first element of output i's window.
template <typename T, typename I>
__device__ __forceinline__ const T* rk_pool_window(const T* src, I i, u64 c, u64 h_out, u64 w_out,
                                                   u64 s0, u64 s1, u64 s2, u64 s3, u64 st_h,
                                                   u64 st_w) {
    I plane, y, x;
    rk_split_hw<I>(i, (I)h_out, (I)w_out, plane, y, x);
    return src + rk_plane_offset<I>(plane, (I)c, s0, s1) + (u64)y * st_h * s2 + (u64)x * st_w * s3;
}

template <typename T>
__device__ __forceinline__ void rk_avg_pool2d(RK_POOL_PARAMS, double scale, const T* src, T* dst) {
    auto body = [&](auto i) {
        const T* p = rk_pool_window(src, i, c, h_out, w_out, s0, s1, s2, s3, st_h, st_w);
        dst[i] = rk_avg<T, rk_is_float<T>::value>::window(p, k_h, k_w, s2, s3, scale);
    };
    RK_GENERIC_LOOP(numel, body);
}

// ---- max pooling ----

template <typename T>
__device__ __forceinline__ void rk_max_pool2d(RK_POOL_PARAMS, const T* src, T* dst) {
    auto body = [&](auto i) {
        const T* p = rk_pool_window(src, i, c, h_out, w_out, s0, s1, s2, s3, st_h, st_w);
        T largest = p[0];
        for (u64 m = 0; m < k_h; ++m)
            for (u64 n = 0; n < k_w; ++n) {
                const T v = p[m * s2 + n * s3];
                if (rk_to_compute(largest) < rk_to_compute(v)) largest = v;
            }
        dst[i] = largest;
    };
    RK_GENERIC_LOOP(numel, body);
}

#define RK_POOL(T)                                                                            \
    RK_KERNEL void avg_pool2d_##T(RK_POOL_PARAMS, double scale, const T* src, T* dst) {        \
        rk_avg_pool2d<T>(numel, c, h_out, w_out, s0, s1, s2, s3, k_h, k_w, st_h, st_w, scale,  \
                         src, dst);                                                           \
    }                                                                                         \
    RK_KERNEL void max_pool2d_##T(RK_POOL_PARAMS, const T* src, T* dst) {                      \
        rk_max_pool2d<T>(numel, c, h_out, w_out, s0, s1, s2, s3, k_h, k_w, st_h, st_w, src,    \
                         dst);                                                                \
    }

// ---- nearest upsampling ----

// min(in - 1, (u64)(o * scale)): Candle's `(o as f64 * scale) as usize`, clamped.
__device__ __forceinline__ u64 rk_nearest_src(u64 o, double scale, u64 in) {
    const u64 s = (u64)((double)o * scale);
    return s < in - 1 ? s : in - 1;
}

#define RK_UPSAMPLE_NEAREST(T)                                                                 \
    RK_KERNEL void upsample_nearest1d_##T(u64 numel, u64 c, u64 l_in, u64 l_out, u64 s0,       \
                                          u64 s1, u64 s2, double scale, const T* src, T* dst) { \
        auto body = [&](auto i) {                                                              \
            typedef decltype(i) I;                                                             \
            const I x = i % (I)l_out;                                                          \
            const I plane = i / (I)l_out;                                                      \
            dst[i] = src[rk_plane_offset<I>(plane, (I)c, s0, s1) +                             \
                         rk_nearest_src((u64)x, scale, l_in) * s2];                            \
        };                                                                                     \
        RK_GENERIC_LOOP(numel, body);                                                          \
    }                                                                                          \
    RK_KERNEL void upsample_nearest2d_##T(u64 numel, u64 c, u64 h_in, u64 w_in, u64 h_out,     \
                                          u64 w_out, u64 s0, u64 s1, u64 s2, u64 s3,           \
                                          double scale_h, double scale_w, const T* src,        \
                                          T* dst) {                                            \
        auto body = [&](auto i) {                                                              \
            typedef decltype(i) I;                                                             \
            I plane, y, x;                                                                     \
            rk_split_hw<I>(i, (I)h_out, (I)w_out, plane, y, x);                                \
            dst[i] = src[rk_plane_offset<I>(plane, (I)c, s0, s1) +                             \
                         rk_nearest_src((u64)y, scale_h, h_in) * s2 +                          \
                         rk_nearest_src((u64)x, scale_w, w_in) * s3];                          \
        };                                                                                     \
        RK_GENERIC_LOOP(numel, body);                                                          \
    }

// ---- bilinear upsampling ----

// One axis' taps and weight for output coordinate o (Candle's CPU formulas, with i0 clamped to
// in - 1 so that no scale factor can read out of bounds).
__device__ __forceinline__ void rk_bilinear_axis(u64 o, double scale, bool align, u64 in, u64& i0,
                                                 u64& i1, double& w) {
    double s = align ? rk_dmul(scale, (double)o) : rk_dmul(scale, (double)o + 0.5) - 0.5;
    s = fmax(s, 0.0);
    const double f = fmin(floor(s), (double)(in - 1));
    i0 = (u64)f;
    i1 = i0 + 1 < in - 1 ? i0 + 1 : in - 1;
    w = fmin(fmax(s - f, 0.0), 1.0);
}

// f64 back to T: f32/f64 rounding, f16/bf16 rounded once (correctly), integers as Rust's `as`.
template <typename T> __device__ __forceinline__ T rk_from_f64(double v) {
    return rk_float_to_int<T, double>(v);
}
template <> __device__ __forceinline__ f64 rk_from_f64<f64>(double v) { return v; }
template <> __device__ __forceinline__ f32 rk_from_f64<f32>(double v) { return (float)v; }
template <> __device__ __forceinline__ f16 rk_from_f64<f16>(double v) { return rk_f64_to_f16(v); }
template <> __device__ __forceinline__ bf16 rk_from_f64<bf16>(double v) {
    return rk_f64_to_bf16(v);
}

#define RK_UPSAMPLE_BILINEAR(T)                                                                \
    RK_KERNEL void upsample_bilinear2d_##T(u64 numel, u64 c, u64 h_in, u64 w_in, u64 h_out,    \
                                           u64 w_out, u64 s0, u64 s1, u64 s2, u64 s3,          \
                                           u32 align_corners, double scale_h, double scale_w,  \
                                           const T* src, T* dst) {                             \
        const bool align = align_corners != 0;                                                 \
        auto body = [&](auto i) {                                                              \
            typedef decltype(i) I;                                                             \
            I plane, y, x;                                                                     \
            rk_split_hw<I>(i, (I)h_out, (I)w_out, plane, y, x);                                \
            u64 h0, h1, w0, w1;                                                                \
            double wh, ww;                                                                     \
            rk_bilinear_axis((u64)y, scale_h, align, h_in, h0, h1, wh);                        \
            rk_bilinear_axis((u64)x, scale_w, align, w_in, w0, w1, ww);                        \
            const T* p = src + rk_plane_offset<I>(plane, (I)c, s0, s1);                        \
            const double v00 = (double)rk_to_compute(p[h0 * s2 + w0 * s3]);                    \
            const double v10 = (double)rk_to_compute(p[h0 * s2 + w1 * s3]);                    \
            const double v01 = (double)rk_to_compute(p[h1 * s2 + w0 * s3]);                    \
            const double v11 = (double)rk_to_compute(p[h1 * s2 + w1 * s3]);                    \
            const double top = rk_dmul(v00, 1.0 - ww) + rk_dmul(v10, ww);                                    \
            const double bottom = rk_dmul(v01, 1.0 - ww) + rk_dmul(v11, ww);                                 \
            dst[i] = rk_from_f64<T>(rk_dmul(top, 1.0 - wh) + rk_dmul(bottom, wh));                           \
        };                                                                                     \
        RK_GENERIC_LOOP(numel, body);                                                          \
    }

#define RK_POOL_ALL(T)        \
    RK_POOL(T)                \
    RK_UPSAMPLE_NEAREST(T)    \
    RK_UPSAMPLE_BILINEAR(T)

RK_POOL_ALL(u8)
RK_POOL_ALL(u32)
RK_POOL_ALL(i16)
RK_POOL_ALL(i32)
RK_POOL_ALL(i64)
RK_POOL_ALL(bf16)
RK_POOL_ALL(f16)
RK_POOL_ALL(f32)
RK_POOL_ALL(f64)
