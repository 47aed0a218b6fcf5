// Dtype conversions cast_{S}_{D}(numel, num_dims, info, inp: S*, out: D*) for every ordered
// pair of distinct dtypes (a same-dtype "cast" is `unary`'s ucopy). Same layout ABI as `unary`.
//
// Semantics are those of Candle's CPU backend (Rust `as` casts and the `half` crate):
// * float -> integer truncates toward zero and saturates: NaN -> 0, out-of-range values clamp
//   to the integer type's MIN/MAX (f16/bf16 go through f32, exactly);
// * integer -> integer wraps (two's complement truncation / sign extension);
// * integer -> f16/bf16 converts to f32 first (round to nearest even), then to 16 bits (RNE);
// * f32 -> f16/bf16 and f16 <-> bf16 (through f32) round to nearest even; inf/NaN are kept;
// * f64 -> f16/bf16 rounds correctly to nearest even, in one step (through f32 rounded to odd).

template <typename D> struct rk_cast_int {
    template <typename S> static __device__ __forceinline__ D from(S x) { return (D)x; }
    static __device__ __forceinline__ D from(float x) { return rk_float_to_int<D, float>(x); }
    static __device__ __forceinline__ D from(double x) { return rk_float_to_int<D, double>(x); }
    static __device__ __forceinline__ D from(f16 x) { return from(__half2float(x)); }
    static __device__ __forceinline__ D from(bf16 x) { return from(__bfloat162float(x)); }
};
struct rk_cast_f32 {
    template <typename S> static __device__ __forceinline__ float from(S x) { return (float)x; }
    static __device__ __forceinline__ float from(f16 x) { return __half2float(x); }
    static __device__ __forceinline__ float from(bf16 x) { return __bfloat162float(x); }
};
struct rk_cast_f64 {
    template <typename S> static __device__ __forceinline__ double from(S x) { return (double)x; }
    static __device__ __forceinline__ double from(f16 x) { return (double)__half2float(x); }
    static __device__ __forceinline__ double from(bf16 x) { return (double)__bfloat162float(x); }
};
struct rk_cast_f16 {
    template <typename S> static __device__ __forceinline__ f16 from(S x) { return __float2half((float)x); }
    static __device__ __forceinline__ f16 from(float x) { return __float2half(x); }
    static __device__ __forceinline__ f16 from(double x) { return rk_f64_to_f16(x); }
    static __device__ __forceinline__ f16 from(bf16 x) { return __float2half(__bfloat162float(x)); }
};
struct rk_cast_bf16 {
    template <typename S> static __device__ __forceinline__ bf16 from(S x) { return __float2bfloat16((float)x); }
    static __device__ __forceinline__ bf16 from(float x) { return __float2bfloat16(x); }
    static __device__ __forceinline__ bf16 from(double x) { return rk_f64_to_bf16(x); }
    static __device__ __forceinline__ bf16 from(f16 x) { return __float2bfloat16(__half2float(x)); }
};

template <typename D> struct rk_cast_to;
template <> struct rk_cast_to<u8> : rk_cast_int<u8> {};
template <> struct rk_cast_to<u32> : rk_cast_int<u32> {};
template <> struct rk_cast_to<i16> : rk_cast_int<i16> {};
template <> struct rk_cast_to<i32> : rk_cast_int<i32> {};
template <> struct rk_cast_to<i64> : rk_cast_int<i64> {};
template <> struct rk_cast_to<f32> : rk_cast_f32 {};
template <> struct rk_cast_to<f64> : rk_cast_f64 {};
template <> struct rk_cast_to<f16> : rk_cast_f16 {};
template <> struct rk_cast_to<bf16> : rk_cast_bf16 {};

#define RK_CAST(S, D)                                                                        \
    RK_KERNEL void cast_##S##_##D(u64 numel, u64 num_dims, const u64* info, const S* inp,     \
                                  D* out) {                                                  \
        auto f = [](S x) { return rk_cast_to<D>::from(x); };                                 \
        if (info == nullptr && rk_map1_contiguous(numel, inp, out, f)) return;               \
        rk_for_each<1>(numel, num_dims, info,                                                \
                       [=](u64 i, const u64* off) { out[i] = f(inp[off[0]]); });             \
    }

#define RK_CAST_FROM(S, A, B, C, D, E, F, G, H) \
    RK_CAST(S, A) RK_CAST(S, B) RK_CAST(S, C) RK_CAST(S, D) RK_CAST(S, E) RK_CAST(S, F) \
    RK_CAST(S, G) RK_CAST(S, H)

RK_CAST_FROM(u8, u32, i16, i32, i64, bf16, f16, f32, f64)
RK_CAST_FROM(u32, u8, i16, i32, i64, bf16, f16, f32, f64)
RK_CAST_FROM(i16, u8, u32, i32, i64, bf16, f16, f32, f64)
RK_CAST_FROM(i32, u8, u32, i16, i64, bf16, f16, f32, f64)
RK_CAST_FROM(i64, u8, u32, i16, i32, bf16, f16, f32, f64)
RK_CAST_FROM(bf16, u8, u32, i16, i32, i64, f16, f32, f64)
RK_CAST_FROM(f16, u8, u32, i16, i32, i64, bf16, f32, f64)
RK_CAST_FROM(f32, u8, u32, i16, i32, i64, bf16, f16, f64)
RK_CAST_FROM(f64, u8, u32, i16, i32, i64, bf16, f16, f32)

// ---- f8e4m3 (OCP e4m3fn, Candle's `float8::F8E4M3`), stored as its byte ----
// cast_{S}_f8e4m3(numel, num_dims, info, inp: S*, out: u8*) and
// cast_f8e4m3_{D}(numel, num_dims, info, inp: u8*, out: D*), same ABI as above.
// * to f8e4m3: integers go through f32 first (`v as f32`), f16/bf16 through f32, then the
//   f32/f64 value is rounded to nearest even in one step; NaN -> 0x7F with the input's sign;
//   magnitudes above 464 (infinities included) saturate to +-448 (0x7E); magnitudes up to 2^-10
//   round to +-0;
// * from f8e4m3: the exact value as f32 (0x7F/0xFF -> NaN), then Candle's f32 conversion to D
//   (integers: truncating, saturating, NaN -> 0; f16/bf16: round to nearest even; f64 exact).
// The two conversions themselves (rk_f64_to_e4m3, rk_e4m3_to_f32) are in the prelude.

template <typename S> __device__ __forceinline__ double rk_to_e4m3_input(S x) {
    return (double)(float)x; // integers: `as f32` first
}
template <> __device__ __forceinline__ double rk_to_e4m3_input<f16>(f16 x) {
    return (double)__half2float(x);
}
template <> __device__ __forceinline__ double rk_to_e4m3_input<bf16>(bf16 x) {
    return (double)__bfloat162float(x);
}
template <> __device__ __forceinline__ double rk_to_e4m3_input<f64>(f64 x) { return x; }

#define RK_CAST_TO_F8(S)                                                                     \
    RK_KERNEL void cast_##S##_f8e4m3(u64 numel, u64 num_dims, const u64* info, const S* inp, \
                                     u8* out) {                                              \
        auto f = [](S x) { return rk_f64_to_e4m3(rk_to_e4m3_input<S>(x)); };                 \
        if (info == nullptr && rk_map1_contiguous(numel, inp, out, f)) return;               \
        rk_for_each<1>(numel, num_dims, info,                                                \
                       [=](u64 i, const u64* off) { out[i] = f(inp[off[0]]); });             \
    }

#define RK_CAST_FROM_F8(D)                                                                   \
    RK_KERNEL void cast_f8e4m3_##D(u64 numel, u64 num_dims, const u64* info, const u8* inp,  \
                                   D* out) {                                                 \
        auto f = [](u8 x) { return rk_cast_to<D>::from(rk_e4m3_to_f32(x)); };                \
        if (info == nullptr && rk_map1_contiguous(numel, inp, out, f)) return;               \
        rk_for_each<1>(numel, num_dims, info,                                                \
                       [=](u64 i, const u64* off) { out[i] = f(inp[off[0]]); });             \
    }

#define RK_CAST_F8_BOTH(T) RK_CAST_TO_F8(T) RK_CAST_FROM_F8(T)
RK_CAST_F8_BOTH(u8)
RK_CAST_F8_BOTH(u32)
RK_CAST_F8_BOTH(i16)
RK_CAST_F8_BOTH(i32)
RK_CAST_F8_BOTH(i64)
RK_CAST_F8_BOTH(bf16)
RK_CAST_F8_BOTH(f16)
RK_CAST_F8_BOTH(f32)
RK_CAST_F8_BOTH(f64)
