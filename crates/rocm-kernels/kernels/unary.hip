// Unary element-wise kernels: u{op}_{T}(numel, num_dims, info, inp, out) and the strided copy
// ucopy_{T}. `info` is dims then the input's strides, or null when the input is contiguous;
// `inp` arrives offset to the layout's start; `out` is contiguous.
//
// Floating-point math runs in f32 for f16/bf16 (one rounding back at the end) and in the
// type itself for f32/f64. Integer kernels follow Candle's CPU backend: abs/relu/sign as on
// integers, ceil/floor/round are the identity, gelu/gelu_erf/erf/silu are 0; neg (signed
// types) and sqr wrap on overflow (Candle's CPU backend has no integer neg/sqr).

template <typename T, typename Op>
__device__ __forceinline__ void rk_unary(u64 numel, u64 num_dims, const u64* info, const T* inp,
                                         T* out) {
    auto f = [](T x) { return rk_from_compute<T>(Op::apply(rk_to_compute(x))); };
    if (info == nullptr && rk_map1_contiguous(numel, inp, out, f)) return;
    rk_for_each<1>(numel, num_dims, info, [=](u64 i, const u64* off) { out[i] = f(inp[off[0]]); });
}

// ---- floating-point ops (C = float or double) ----
struct op_exp { template <typename C> static __device__ __forceinline__ C apply(C x) { return rk_exp(x); } };
struct op_log { template <typename C> static __device__ __forceinline__ C apply(C x) { return rk_log(x); } };
struct op_sin { template <typename C> static __device__ __forceinline__ C apply(C x) { return rk_sin(x); } };
struct op_cos { template <typename C> static __device__ __forceinline__ C apply(C x) { return rk_cos(x); } };
struct op_tanh { template <typename C> static __device__ __forceinline__ C apply(C x) { return rk_tanh(x); } };
struct op_neg { template <typename C> static __device__ __forceinline__ C apply(C x) { return -x; } };
struct op_recip { template <typename C> static __device__ __forceinline__ C apply(C x) { return (C)1 / x; } };
struct op_sqr { template <typename C> static __device__ __forceinline__ C apply(C x) { return x * x; } };
struct op_sqrt { template <typename C> static __device__ __forceinline__ C apply(C x) { return rk_sqrt(x); } };
struct op_erf { template <typename C> static __device__ __forceinline__ C apply(C x) { return rk_erf(x); } };
struct op_abs { template <typename C> static __device__ __forceinline__ C apply(C x) { return rk_abs(x); } };
struct op_ceil { template <typename C> static __device__ __forceinline__ C apply(C x) { return rk_ceil(x); } };
struct op_floor { template <typename C> static __device__ __forceinline__ C apply(C x) { return rk_floor(x); } };
// Half-way cases away from zero (Rust's `round`, C's `round`).
struct op_round { template <typename C> static __device__ __forceinline__ C apply(C x) { return rk_round(x); } };
// max(x, 0) with NaN -> 0 (Rust's `max`, C's `fmax`).
struct op_relu { template <typename C> static __device__ __forceinline__ C apply(C x) { return rk_fmax(x, (C)0); } };
// 1, -1 or 0 (NaN -> 0).
struct op_sign {
    template <typename C> static __device__ __forceinline__ C apply(C x) {
        return (C)(x > (C)0) - (C)(x < (C)0);
    }
};
struct op_sigmoid {
    template <typename C> static __device__ __forceinline__ C apply(C x) {
        return (C)1 / ((C)1 + rk_exp(-x));
    }
};
struct op_silu {
    template <typename C> static __device__ __forceinline__ C apply(C x) {
        return x / ((C)1 + rk_exp(-x));
    }
};
// Tanh approximation, 0.5 x (1 + tanh(z)) with z = sqrt(2/pi) (x + 0.044715 x^3), evaluated
// as x / (1 + exp(-2z)) (the same function, without the cancellation for negative x).
struct op_gelu {
    template <typename C> static __device__ __forceinline__ C apply(C x) {
        const C z = (C)0.79788456080286535587989211986876373 * x * ((C)1 + (C)0.044715 * x * x);
        return x / ((C)1 + rk_exp((C)-2 * z));
    }
};
// Exact gelu, 0.5 x (1 + erf(x / sqrt 2)), evaluated as 0.5 x erfc(-x / sqrt 2).
struct op_gelu_erf {
    template <typename C> static __device__ __forceinline__ C apply(C x) {
        return (C)0.5 * x * rk_erfc(-x * (C)0.70710678118654752440084436210484903);
    }
};

// ---- integer ops (wrapping where they can overflow) ----
struct iop_neg { template <typename T> static __device__ __forceinline__ T apply(T x) { return rk_wrapping_neg(x); } };
struct iop_sqr { template <typename T> static __device__ __forceinline__ T apply(T x) { return rk_wrapping_mul(x, x); } };
struct iop_abs {
    template <typename T> static __device__ __forceinline__ T apply(T x) {
        return rk_is_negative(x) ? rk_wrapping_neg(x) : x;
    }
};
struct iop_relu { template <typename T> static __device__ __forceinline__ T apply(T x) { return rk_is_negative(x) ? (T)0 : x; } };
struct iop_sign {
    template <typename T> static __device__ __forceinline__ T apply(T x) {
        return (T)((int)(x != (T)0 && !rk_is_negative(x)) - (int)rk_is_negative(x));
    }
};
struct iop_identity { template <typename T> static __device__ __forceinline__ T apply(T x) { return x; } };
struct iop_zero { template <typename T> static __device__ __forceinline__ T apply(T) { return (T)0; } };

#define RK_UNARY(NAME, OP, T)                                                                   \
    RK_KERNEL void u##NAME##_##T(u64 numel, u64 num_dims, const u64* info, const T* inp, T* out) { \
        rk_unary<T, OP>(numel, num_dims, info, inp, out);                                       \
    }

#define RK_UNARY_FLOAT(T)                  \
    RK_UNARY(exp, op_exp, T)               \
    RK_UNARY(log, op_log, T)               \
    RK_UNARY(sin, op_sin, T)               \
    RK_UNARY(cos, op_cos, T)               \
    RK_UNARY(tanh, op_tanh, T)             \
    RK_UNARY(neg, op_neg, T)               \
    RK_UNARY(recip, op_recip, T)           \
    RK_UNARY(sqr, op_sqr, T)               \
    RK_UNARY(sqrt, op_sqrt, T)             \
    RK_UNARY(gelu, op_gelu, T)             \
    RK_UNARY(gelu_erf, op_gelu_erf, T)     \
    RK_UNARY(erf, op_erf, T)               \
    RK_UNARY(silu, op_silu, T)             \
    RK_UNARY(abs, op_abs, T)               \
    RK_UNARY(ceil, op_ceil, T)             \
    RK_UNARY(floor, op_floor, T)           \
    RK_UNARY(round, op_round, T)           \
    RK_UNARY(relu, op_relu, T)             \
    RK_UNARY(sign, op_sign, T)             \
    RK_UNARY(sigmoid, op_sigmoid, T)

#define RK_UNARY_INT(T)                    \
    RK_UNARY(sqr, iop_sqr, T)              \
    RK_UNARY(abs, iop_abs, T)              \
    RK_UNARY(relu, iop_relu, T)            \
    RK_UNARY(sign, iop_sign, T)            \
    RK_UNARY(ceil, iop_identity, T)        \
    RK_UNARY(floor, iop_identity, T)       \
    RK_UNARY(round, iop_identity, T)       \
    RK_UNARY(gelu, iop_zero, T)            \
    RK_UNARY(gelu_erf, iop_zero, T)        \
    RK_UNARY(erf, iop_zero, T)             \
    RK_UNARY(silu, iop_zero, T)

// A strided copy whose innermost dim is contiguous in the input and a multiple of the vector
// width K, every other input stride a multiple of K and both pointers aligned (a permutation of
// the outer dims, e.g. attention's (b, s, h, d) -> (b, h, s, d) head transposes): one offset
// computation and one 16-byte load and store per K elements. Returns false, having done
// nothing, otherwise (the caller then copies element by element). numel < 2^31.
template <typename T>
__device__ __forceinline__ bool rk_copy_inner_vec(u64 numel, u64 num_dims, const u64* info,
                                                  const T* inp, T* out) {
    const int K = rk_vec_width<T, T>::value;
    typedef rk_vec<T, K> V;
    if (num_dims == 0 || numel >= 0x80000000ull) return false;
    const u64* dims = info;
    const u64* strides = info + num_dims;
    if (dims[num_dims - 1] % K != 0 || strides[num_dims - 1] != 1) return false;
    for (u64 d = 0; d + 1 < num_dims; ++d) {
        if (strides[d] % K != 0) return false;
    }
    if (!rk_aligned(inp, sizeof(V)) || !rk_aligned(out, sizeof(V))) return false;
    const u32 nvec = (u32)(numel / K);
    const u32 step = (u32)rk_thread_count();
    for (u32 v = (u32)rk_thread_id(); v < nvec; v += step) {
        u64 off[1];
        rk_strided_offsets<u32, 1>(v * (u32)K, (u32)num_dims, info, off);
        reinterpret_cast<V*>(out)[v] = *reinterpret_cast<const V*>(inp + off[0]);
    }
    return true;
}

// ucopy_{T}: a bit-exact (strided) copy, no conversion.
#define RK_COPY(T)                                                                             \
    RK_KERNEL void ucopy_##T(u64 numel, u64 num_dims, const u64* info, const T* inp, T* out) {   \
        auto f = [](T x) { return x; };                                                         \
        if (info == nullptr && rk_map1_contiguous(numel, inp, out, f)) return;                  \
        if (info != nullptr && rk_copy_inner_vec(numel, num_dims, info, inp, out)) return;      \
        rk_for_each<1>(numel, num_dims, info,                                                   \
                       [=](u64 i, const u64* off) { out[i] = inp[off[0]]; });                   \
    }

RK_COPY(u8)
RK_COPY(u32)
RK_COPY(i16)
RK_COPY(i32)
RK_COPY(i64)
RK_COPY(bf16)
RK_COPY(f16)
RK_COPY(f32)
RK_COPY(f64)

RK_UNARY_FLOAT(bf16)
RK_UNARY_FLOAT(f16)
RK_UNARY_FLOAT(f32)
RK_UNARY_FLOAT(f64)

RK_UNARY_INT(u8)
RK_UNARY_INT(u32)
RK_UNARY_INT(i16)
RK_UNARY_INT(i32)
RK_UNARY_INT(i64)
RK_UNARY(neg, iop_neg, i16)
RK_UNARY(neg, iop_neg, i32)
RK_UNARY(neg, iop_neg, i64)
