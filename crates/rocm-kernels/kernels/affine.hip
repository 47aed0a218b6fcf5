// Parameterised unary kernels, same layout ABI as `unary` plus trailing scalars passed as the
// element type (f16/bf16 as their 16-bit type):
//   affine_{T}(numel, num_dims, info, inp, out, T mul, T add)   out = inp * mul + add
//   powf_{T}(numel, num_dims, info, inp, out, T exponent)         float types only
//   elu_{T}(numel, num_dims, info, inp, out, T alpha)             float types only
// Float math runs in f32 for f16/bf16 and in the type itself for f32/f64; integer affine wraps
// on overflow (Rust's release-mode arithmetic, what Candle's CPU backend computes).

template <typename T>
__device__ __forceinline__ T rk_affine_one(T x, T mul, T add) {
    return rk_from_compute<T>(rk_to_compute(x) * rk_to_compute(mul) + rk_to_compute(add));
}
#define RK_AFFINE_INT_ONE(T) \
    template <> __device__ __forceinline__ T rk_affine_one<T>(T x, T mul, T add) { \
        return rk_wrapping_add(rk_wrapping_mul(x, mul), add); \
    }
RK_AFFINE_INT_ONE(u8)
RK_AFFINE_INT_ONE(u32)
RK_AFFINE_INT_ONE(i16)
RK_AFFINE_INT_ONE(i32)
RK_AFFINE_INT_ONE(i64)

#define RK_AFFINE(T)                                                                         \
    RK_KERNEL void affine_##T(u64 numel, u64 num_dims, const u64* info, const T* inp, T* out, \
                              T mul, T add) {                                                \
        auto f = [=](T x) { return rk_affine_one<T>(x, mul, add); };                         \
        if (info == nullptr && rk_map1_contiguous(numel, inp, out, f)) return;               \
        rk_for_each<1>(numel, num_dims, info,                                                \
                       [=](u64 i, const u64* off) { out[i] = f(inp[off[0]]); });             \
    }

// x^e (C's pow: pow(x, 0) == 1, negative x with a non-integer e is NaN).
#define RK_POWF(T)                                                                           \
    RK_KERNEL void powf_##T(u64 numel, u64 num_dims, const u64* info, const T* inp, T* out,  \
                            T exponent) {                                                    \
        const rk_compute<T>::type e = rk_to_compute(exponent);                               \
        auto f = [=](T x) { return rk_from_compute<T>(rk_pow(rk_to_compute(x), e)); };       \
        if (info == nullptr && rk_map1_contiguous(numel, inp, out, f)) return;               \
        rk_for_each<1>(numel, num_dims, info,                                                \
                       [=](u64 i, const u64* off) { out[i] = f(inp[off[0]]); });             \
    }

// x for x >= 0 (and NaN), alpha * (exp(x) - 1) otherwise.
#define RK_ELU(T)                                                                            \
    RK_KERNEL void elu_##T(u64 numel, u64 num_dims, const u64* info, const T* inp, T* out,   \
                           T alpha) {                                                        \
        typedef rk_compute<T>::type C;                                                       \
        const C a = rk_to_compute(alpha);                                                    \
        auto f = [=](T v) {                                                                  \
            const C x = rk_to_compute(v);                                                    \
            return rk_from_compute<T>(x < (C)0 ? rk_expm1(x) * a : x);                       \
        };                                                                                   \
        if (info == nullptr && rk_map1_contiguous(numel, inp, out, f)) return;               \
        rk_for_each<1>(numel, num_dims, info,                                                \
                       [=](u64 i, const u64* off) { out[i] = f(inp[off[0]]); });             \
    }

RK_AFFINE(u8)
RK_AFFINE(u32)
RK_AFFINE(i16)
RK_AFFINE(i32)
RK_AFFINE(i64)
RK_AFFINE(bf16)
RK_AFFINE(f16)
RK_AFFINE(f32)
RK_AFFINE(f64)

RK_POWF(bf16)
RK_POWF(f16)
RK_POWF(f32)
RK_POWF(f64)

RK_ELU(bf16)
RK_ELU(f16)
RK_ELU(f32)
RK_ELU(f64)
