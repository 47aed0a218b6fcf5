// Binary element-wise kernels, all 9 dtypes:
//   b{add,sub,mul,div,minimum,maximum}_{T}(numel, num_dims, info, lhs, rhs, out)
//   {eq,ne,lt,le,gt,ge}_{T}(numel, num_dims, info, lhs, rhs, out: u8*)
// `info` is dims, lhs strides, rhs strides, or null when both inputs are contiguous; inputs
// arrive offset to their layouts' starts; `out` is contiguous.
//
// f16/bf16 compute in f32 and round once (what Candle's CPU backend computes for one op).
// Integers wrap on overflow; integer division truncates toward zero, and never traps:
// x / 0 == 0 and MIN / -1 == MIN (Candle's CPU backend panics on both; the result here is
// defined only so that a bad input cannot take the GPU down).
// minimum/maximum follow Candle exactly: minimum(a, b) = a > b ? b : a, maximum(a, b) =
// a < b ? b : a (so with a NaN operand the result is `a`). Comparisons are IEEE (NaN compares
// unequal to everything, ne is true).

struct bop_add {
    template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return a + b; }
};
struct bop_sub {
    template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return a - b; }
};
struct bop_mul {
    template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return a * b; }
};
struct bop_div {
    template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return a / b; }
};
struct bop_minimum {
    template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return a > b ? b : a; }
};
struct bop_maximum {
    template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return a < b ? b : a; }
};
struct ibop_add {
    template <typename T> static __device__ __forceinline__ T apply(T a, T b) { return rk_wrapping_add(a, b); }
};
struct ibop_sub {
    template <typename T> static __device__ __forceinline__ T apply(T a, T b) { return rk_wrapping_sub(a, b); }
};
struct ibop_mul {
    template <typename T> static __device__ __forceinline__ T apply(T a, T b) { return rk_wrapping_mul(a, b); }
};
struct ibop_div {
    template <typename T> static __device__ __forceinline__ T apply(T a, T b) { return rk_int_div(a, b); }
};

struct cop_eq { template <typename C> static __device__ __forceinline__ bool apply(C a, C b) { return a == b; } };
struct cop_ne { template <typename C> static __device__ __forceinline__ bool apply(C a, C b) { return a != b; } };
struct cop_lt { template <typename C> static __device__ __forceinline__ bool apply(C a, C b) { return a < b; } };
struct cop_le { template <typename C> static __device__ __forceinline__ bool apply(C a, C b) { return a <= b; } };
struct cop_gt { template <typename C> static __device__ __forceinline__ bool apply(C a, C b) { return a > b; } };
struct cop_ge { template <typename C> static __device__ __forceinline__ bool apply(C a, C b) { return a >= b; } };

// Strided operands whose innermost dim is contiguous in both (stride 1, as a broadcast bias or
// attention mask is after the host merged the dims) and a multiple of the vector width K, every
// other stride a multiple of K and every pointer aligned: one offset computation and one 16-byte
// access per operand per K elements. Returns false, having done nothing, otherwise (the caller
// then takes the element-wise path). numel < 2^31 (32-bit index math).
template <typename T, typename R, typename F>
__device__ __forceinline__ bool rk_map2_inner_vec(u64 numel, u64 num_dims, const u64* info,
                                                  const T* a, const T* b, R* out, F f) {
    const int K = rk_vec_width<T, R>::value;
    typedef rk_vec<T, K> VT;
    typedef rk_vec<R, K> VR;
    if (num_dims == 0 || numel >= 0x80000000ull) return false;
    const u64* dims = info;
    const u64* sa = info + num_dims;
    const u64* sb = info + 2 * num_dims;
    if (dims[num_dims - 1] % K != 0 || sa[num_dims - 1] != 1 || sb[num_dims - 1] != 1) return false;
    for (u64 d = 0; d + 1 < num_dims; ++d) {
        if (sa[d] % K != 0 || sb[d] % K != 0) return false;
    }
    if (!rk_aligned(a, sizeof(VT)) || !rk_aligned(b, sizeof(VT)) || !rk_aligned(out, sizeof(VR)))
        return false;
    const u32 nvec = (u32)(numel / K);
    const u32 step = (u32)rk_thread_count();
    for (u32 v = (u32)rk_thread_id(); v < nvec; v += step) {
        u64 off[2];
        rk_strided_offsets<u32, 2>(v * (u32)K, (u32)num_dims, info, off);
        const VT x = *reinterpret_cast<const VT*>(a + off[0]);
        const VT y = *reinterpret_cast<const VT*>(b + off[1]);
        VR r;
#pragma unroll
        for (int k = 0; k < K; ++k) r.v[k] = f(x.v[k], y.v[k]);
        reinterpret_cast<VR*>(out)[v] = r;
    }
    return true;
}

#define RK_BINARY(NAME, OP, T)                                                                 \
    RK_KERNEL void b##NAME##_##T(u64 numel, u64 num_dims, const u64* info, const T* lhs,        \
                                 const T* rhs, T* out) {                                       \
        auto f = [](T a, T b) {                                                                \
            return rk_from_compute<T>(OP::apply(rk_to_compute(a), rk_to_compute(b)));          \
        };                                                                                     \
        if (info == nullptr && rk_map2_contiguous(numel, lhs, rhs, out, f)) return;            \
        if (info != nullptr && rk_map2_inner_vec(numel, num_dims, info, lhs, rhs, out, f)) return; \
        rk_for_each<2>(numel, num_dims, info, [=](u64 i, const u64* off) {                     \
            out[i] = f(lhs[off[0]], rhs[off[1]]);                                              \
        });                                                                                    \
    }

#define RK_CMP(NAME, OP, T)                                                                    \
    RK_KERNEL void NAME##_##T(u64 numel, u64 num_dims, const u64* info, const T* lhs,           \
                              const T* rhs, u8* out) {                                         \
        auto f = [](T a, T b) -> u8 {                                                          \
            return OP::apply(rk_to_compute(a), rk_to_compute(b)) ? 1 : 0;                      \
        };                                                                                     \
        if (info == nullptr && rk_map2_contiguous(numel, lhs, rhs, out, f)) return;            \
        rk_for_each<2>(numel, num_dims, info, [=](u64 i, const u64* off) {                     \
            out[i] = f(lhs[off[0]], rhs[off[1]]);                                              \
        });                                                                                    \
    }

#define RK_CMP_ALL(T)          \
    RK_CMP(eq, cop_eq, T)      \
    RK_CMP(ne, cop_ne, T)      \
    RK_CMP(lt, cop_lt, T)      \
    RK_CMP(le, cop_le, T)      \
    RK_CMP(gt, cop_gt, T)      \
    RK_CMP(ge, cop_ge, T)

#define RK_BINARY_FLOAT(T)                   \
    RK_BINARY(add, bop_add, T)               \
    RK_BINARY(sub, bop_sub, T)               \
    RK_BINARY(mul, bop_mul, T)               \
    RK_BINARY(div, bop_div, T)               \
    RK_BINARY(minimum, bop_minimum, T)       \
    RK_BINARY(maximum, bop_maximum, T)       \
    RK_CMP_ALL(T)

#define RK_BINARY_INT(T)                     \
    RK_BINARY(add, ibop_add, T)              \
    RK_BINARY(sub, ibop_sub, T)              \
    RK_BINARY(mul, ibop_mul, T)              \
    RK_BINARY(div, ibop_div, T)              \
    RK_BINARY(minimum, bop_minimum, T)       \
    RK_BINARY(maximum, bop_maximum, T)       \
    RK_CMP_ALL(T)

RK_BINARY_FLOAT(bf16)
RK_BINARY_FLOAT(f16)
RK_BINARY_FLOAT(f32)
RK_BINARY_FLOAT(f64)
RK_BINARY_INT(u8)
RK_BINARY_INT(u32)
RK_BINARY_INT(i16)
RK_BINARY_INT(i32)
RK_BINARY_INT(i64)
