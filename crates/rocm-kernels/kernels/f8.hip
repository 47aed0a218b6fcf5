// f8e4m3 arithmetic (OCP e4m3fn, Candle's `float8::F8E4M3`), values stored as their bytes (u8).
// Same layout ABI as `unary`, `affine` and `binary`:
//   u{op}_f8e4m3(numel, num_dims, info, inp, out)            op: exp log sin cos tanh neg recip
//                                                            sqr sqrt gelu gelu_erf erf silu abs
//                                                            ceil floor round relu sign
//   affine_f8e4m3(numel, num_dims, info, inp, out, f64 mul, f64 add)
//   powf_f8e4m3(numel, num_dims, info, inp, out, f64 exponent)
//   elu_f8e4m3(numel, num_dims, info, inp, out, f64 alpha)
//   b{add,sub,mul,div,minimum,maximum}_f8e4m3(numel, num_dims, info, lhs, rhs, out)
//   {eq,ne,lt,le,gt,ge}_f8e4m3(numel, num_dims, info, lhs, rhs, out: u8 0/1)
// and, for index types I in u8 u32 i16 i32 i64, the ordered accumulations
//   scatter_add_{I}_f8e4m3(n_cols, num_dims, info, ids, src, dst, ids_dim, ids_dim_stride,
//                          src_dim_stride, dst_dim, dst_dim_stride, err)
//   index_add_{I}_f8e4m3(n_cols, num_dims, info, ids, src, dst, n_ids, ids_stride,
//                        src_dim_stride, dst_dim, dst_dim_stride, err)
// The f64 scalars are rounded to f8e4m3 on the device (`F8E4M3::from_f64`, as Candle's
// `T::from_f64`).
//
// Semantics: bit for bit what candle-core 0.11.1's CPU backend computes with the `float8` 0.7
// crate on x86_64.
// * One f8 operation (float8's operators and num_traits functions) is: each operand's exact
//   value as f32 (a NaN byte reads as a positive NaN), one f32 operation, and the f32 result
//   rounded to f8 (round to nearest even, saturating at +-448). Composite ops follow Candle's
//   f8 formulas step by step, rounding to f8 after every step: gelu (tanh form, 9 steps), silu,
//   elu, affine (mul then add), scatter_add/index_add (one rounded add per term, in Candle's
//   order). erf rounds an f64 result to f8 directly; gelu_erf rounds Candle's f32 formula once.
// * The f32 result of each step is the correctly rounded one: + - * of two f8 values are exact
//   in f32; / and sqrt are computed in f64 and rounded to f32 (correct for these operations);
//   exp/log/sin/cos/tanh/pow/erf are evaluated in f64 and rounded to f32, which gives the f8
//   result of glibc's / libm's f32 functions for every f8 input (the GPU tests check all of
//   them against the float8 crate).
// * NaN signs are x86_64's: a NaN operand propagates as the positive NaN the CPU reads (0x7F);
//   an invalid operation on numbers (0/0, sqrt or log of a negative number, a negative base to
//   a non-integer power) gives the x86 default NaN, which is negative (0xFF); neg turns any NaN
//   into 0xFF and abs into 0x7F; relu, minimum and maximum return an operand's byte unchanged.
// * Comparisons are those of float8's PartialEq/PartialOrd, i.e. of the values: NaN compares
//   false (ne: true), -0 == +0.

#define F8_ONE ((u8)0x38)
#define F8_NEG_ONE ((u8)0xB8)

__device__ __forceinline__ bool f8_isnan(u8 b) { return (b & 0x7F) == 0x7F; }
__device__ __forceinline__ float f8_val(u8 b) { return rk_e4m3_to_f32(b); }

// An f32 step's result rounded to f8; a NaN result is 0x7F when an operand was NaN (x86
// propagates the operand's positive NaN), else 0xFF (x86's negative default NaN).
__device__ __forceinline__ u8 f8_round(float r, bool nan_operand) {
    if (r != r) return nan_operand ? (u8)0x7F : (u8)0xFF;
    return rk_f64_to_e4m3((double)r);
}
// A result computed in f64: rounded to f32 first (what the CPU's f32 operation returns), then
// to f8.
__device__ __forceinline__ u8 f8_round_via_f32(double r, bool nan_operand) {
    return f8_round((float)r, nan_operand);
}

// ---- the f8 operations of float8 (one rounding each) ----
__device__ __forceinline__ u8 f8_add(u8 a, u8 b) {
    return f8_round(f8_val(a) + f8_val(b), f8_isnan(a) || f8_isnan(b));
}
__device__ __forceinline__ u8 f8_sub(u8 a, u8 b) {
    return f8_round(f8_val(a) - f8_val(b), f8_isnan(a) || f8_isnan(b));
}
__device__ __forceinline__ u8 f8_mul(u8 a, u8 b) {
    return f8_round(f8_val(a) * f8_val(b), f8_isnan(a) || f8_isnan(b));
}
__device__ __forceinline__ u8 f8_div(u8 a, u8 b) {
    return f8_round_via_f32((double)f8_val(a) / (double)f8_val(b), f8_isnan(a) || f8_isnan(b));
}
// `-x`: the sign flips, NaN included (any NaN reads as +NaN, so the result is 0xFF).
__device__ __forceinline__ u8 f8_neg(u8 b) { return f8_isnan(b) ? (u8)0xFF : (u8)(b ^ 0x80); }

// f(x) for an f64 function f, rounded through f32 like the CPU's f32 function.
#define F8_MATH(NAME, EXPR)                                                                     \
    __device__ __forceinline__ u8 f8_fn_##NAME(u8 b) {                                            \
        const double x = (double)f8_val(b);                                                    \
        return f8_round_via_f32(EXPR, f8_isnan(b));                                            \
    }
F8_MATH(exp, exp(x))
F8_MATH(log, log(x))
F8_MATH(sin, sin(x))
F8_MATH(cos, cos(x))
F8_MATH(tanh, tanh(x))
F8_MATH(sqrt, sqrt(x))
F8_MATH(ceil, ceil(x))
F8_MATH(floor, floor(x))
F8_MATH(round, round(x))
#undef F8_MATH

// ---- unary ops (Candle's `UnaryOpT::f8e4m3`) ----
struct f8u_exp { static __device__ __forceinline__ u8 apply(u8 b) { return f8_fn_exp(b); } };
struct f8u_log { static __device__ __forceinline__ u8 apply(u8 b) { return f8_fn_log(b); } };
struct f8u_sin { static __device__ __forceinline__ u8 apply(u8 b) { return f8_fn_sin(b); } };
struct f8u_cos { static __device__ __forceinline__ u8 apply(u8 b) { return f8_fn_cos(b); } };
struct f8u_tanh { static __device__ __forceinline__ u8 apply(u8 b) { return f8_fn_tanh(b); } };
struct f8u_neg { static __device__ __forceinline__ u8 apply(u8 b) { return f8_neg(b); } };
struct f8u_recip { static __device__ __forceinline__ u8 apply(u8 b) { return f8_div(F8_ONE, b); } };
struct f8u_sqr { static __device__ __forceinline__ u8 apply(u8 b) { return f8_mul(b, b); } };
struct f8u_sqrt { static __device__ __forceinline__ u8 apply(u8 b) { return f8_fn_sqrt(b); } };
struct f8u_ceil { static __device__ __forceinline__ u8 apply(u8 b) { return f8_fn_ceil(b); } };
struct f8u_floor { static __device__ __forceinline__ u8 apply(u8 b) { return f8_fn_floor(b); } };
// Half-way cases away from zero (Rust's `round`).
struct f8u_round { static __device__ __forceinline__ u8 apply(u8 b) { return f8_fn_round(b); } };
// |x| through f32: NaN -> 0x7F.
struct f8u_abs {
    static __device__ __forceinline__ u8 apply(u8 b) {
        return f8_isnan(b) ? (u8)0x7F : (u8)(b & 0x7F);
    }
};
// `v.max(ZERO)` (float8's inherent max): ZERO when 0 > v, else v itself (NaN and -0 kept).
struct f8u_relu {
    static __device__ __forceinline__ u8 apply(u8 b) { return 0.0f > f8_val(b) ? (u8)0 : b; }
};
// ONE, -ONE or ZERO (NaN and -0 -> ZERO).
struct f8u_sign {
    static __device__ __forceinline__ u8 apply(u8 b) {
        const float x = f8_val(b);
        return x > 0.0f ? F8_ONE : (x < 0.0f ? F8_NEG_ONE : (u8)0);
    }
};
// `from_f64(erf(v.to_f64()))`: one rounding, from f64.
struct f8u_erf {
    static __device__ __forceinline__ u8 apply(u8 b) {
        const double r = erf((double)f8_val(b));
        if (r != r) return f8_isnan(b) ? (u8)0x7F : (u8)0xFF;
        return rk_f64_to_e4m3(r);
    }
};
// `from_f32((erf(v * FRAC_1_SQRT_2) + 1) * 0.5 * v)`, Candle's f32 formula (its f32 steps
// rounded as in f32, erf through f64), rounded once to f8.
struct f8u_gelu_erf {
    static __device__ __forceinline__ u8 apply(u8 b) {
        const float x = f8_val(b);
        const float a = x * 0.707106781186547524400844362104849039f;
        const float e = (float)erf((double)a);
        const float r = (e + 1.0f) * 0.5f * x;
        return f8_round(r, f8_isnan(b));
    }
};
// 0.5 * v * (1 + tanh(c1 * v * (1 + c2 * v * v))), every step an f8 operation, the constants
// rounded to f8 from their f32 values (c1 = sqrt(2/pi), c2 = 0.044715).
struct f8u_gelu {
    static __device__ __forceinline__ u8 apply(u8 v) {
        const u8 half = rk_f64_to_e4m3((double)0.5f);
        const u8 c1 = rk_f64_to_e4m3((double)0.79788456080286535587989211986876373f);
        const u8 c2 = rk_f64_to_e4m3((double)0.044715f);
        const u8 inner = f8_add(F8_ONE, f8_mul(f8_mul(c2, v), v));
        const u8 t = f8_fn_tanh(f8_mul(f8_mul(c1, v), inner));
        return f8_mul(f8_mul(half, v), f8_add(F8_ONE, t));
    }
};
// v / (1 + exp(-v)), every step an f8 operation.
struct f8u_silu {
    static __device__ __forceinline__ u8 apply(u8 v) {
        return f8_div(v, f8_add(F8_ONE, f8_fn_exp(f8_neg(v))));
    }
};

template <typename Op>
__device__ __forceinline__ void f8_unary(u64 numel, u64 num_dims, const u64* info, const u8* inp,
                                         u8* out) {
    auto f = [](u8 x) { return Op::apply(x); };
    if (info == nullptr && rk_map1_contiguous(numel, inp, out, f)) return;
    rk_for_each<1>(numel, num_dims, info, [=](u64 i, const u64* off) { out[i] = f(inp[off[0]]); });
}

#define F8_UNARY(NAME)                                                                         \
    RK_KERNEL void u##NAME##_f8e4m3(u64 numel, u64 num_dims, const u64* info, const u8* inp,     \
                                    u8* out) {                                                 \
        f8_unary<f8u_##NAME>(numel, num_dims, info, inp, out);                                 \
    }
F8_UNARY(exp)
F8_UNARY(log)
F8_UNARY(sin)
F8_UNARY(cos)
F8_UNARY(tanh)
F8_UNARY(neg)
F8_UNARY(recip)
F8_UNARY(sqr)
F8_UNARY(sqrt)
F8_UNARY(gelu)
F8_UNARY(gelu_erf)
F8_UNARY(erf)
F8_UNARY(silu)
F8_UNARY(abs)
F8_UNARY(ceil)
F8_UNARY(floor)
F8_UNARY(round)
F8_UNARY(relu)
F8_UNARY(sign)

// ---- affine, powf, elu (scalars rounded to f8 first, as Candle's `T::from_f64`) ----

// `v * mul + add`: two f8 operations.
RK_KERNEL void affine_f8e4m3(u64 numel, u64 num_dims, const u64* info, const u8* inp, u8* out,
                             double mul, double add) {
    const u8 m = rk_f64_to_e4m3(mul);
    const u8 a = rk_f64_to_e4m3(add);
    auto f = [=](u8 x) { return f8_add(f8_mul(x, m), a); };
    if (info == nullptr && rk_map1_contiguous(numel, inp, out, f)) return;
    rk_for_each<1>(numel, num_dims, info, [=](u64 i, const u64* off) { out[i] = f(inp[off[0]]); });
}

// `v.powf(e)`: pow of the two f32 values (C99 special cases: x^0 == 1, 1^y == 1, a negative
// base to a non-integer power is NaN), rounded through f32.
RK_KERNEL void powf_f8e4m3(u64 numel, u64 num_dims, const u64* info, const u8* inp, u8* out,
                           double exponent) {
    const u8 e = rk_f64_to_e4m3(exponent);
    auto f = [=](u8 x) {
        return f8_round_via_f32(pow((double)f8_val(x), (double)f8_val(e)),
                                f8_isnan(x) || f8_isnan(e));
    };
    if (info == nullptr && rk_map1_contiguous(numel, inp, out, f)) return;
    rk_for_each<1>(numel, num_dims, info, [=](u64 i, const u64* off) { out[i] = f(inp[off[0]]); });
}

// v when its sign bit is clear (0x7F NaN included), else (exp(v) - 1) * alpha: three f8
// operations.
RK_KERNEL void elu_f8e4m3(u64 numel, u64 num_dims, const u64* info, const u8* inp, u8* out,
                          double alpha) {
    const u8 a = rk_f64_to_e4m3(alpha);
    auto f = [=](u8 x) { return (x & 0x80) == 0 ? x : f8_mul(f8_sub(f8_fn_exp(x), F8_ONE), a); };
    if (info == nullptr && rk_map1_contiguous(numel, inp, out, f)) return;
    rk_for_each<1>(numel, num_dims, info, [=](u64 i, const u64* off) { out[i] = f(inp[off[0]]); });
}

// ---- binary ops and comparisons ----
struct f8b_add { static __device__ __forceinline__ u8 apply(u8 a, u8 b) { return f8_add(a, b); } };
struct f8b_sub { static __device__ __forceinline__ u8 apply(u8 a, u8 b) { return f8_sub(a, b); } };
struct f8b_mul { static __device__ __forceinline__ u8 apply(u8 a, u8 b) { return f8_mul(a, b); } };
struct f8b_div { static __device__ __forceinline__ u8 apply(u8 a, u8 b) { return f8_div(a, b); } };
// Candle's definitions: minimum(a, b) = a > b ? b : a, maximum(a, b) = a < b ? b : a (bytes
// unchanged; with a NaN operand the result is a).
struct f8b_minimum {
    static __device__ __forceinline__ u8 apply(u8 a, u8 b) { return f8_val(a) > f8_val(b) ? b : a; }
};
struct f8b_maximum {
    static __device__ __forceinline__ u8 apply(u8 a, u8 b) { return f8_val(a) < f8_val(b) ? b : a; }
};
struct f8c_eq { static __device__ __forceinline__ u8 apply(u8 a, u8 b) { return f8_val(a) == f8_val(b); } };
struct f8c_ne { static __device__ __forceinline__ u8 apply(u8 a, u8 b) { return f8_val(a) != f8_val(b); } };
struct f8c_lt { static __device__ __forceinline__ u8 apply(u8 a, u8 b) { return f8_val(a) < f8_val(b); } };
struct f8c_le { static __device__ __forceinline__ u8 apply(u8 a, u8 b) { return f8_val(a) <= f8_val(b); } };
struct f8c_gt { static __device__ __forceinline__ u8 apply(u8 a, u8 b) { return f8_val(a) > f8_val(b); } };
struct f8c_ge { static __device__ __forceinline__ u8 apply(u8 a, u8 b) { return f8_val(a) >= f8_val(b); } };

template <typename Op>
__device__ __forceinline__ void f8_binary(u64 numel, u64 num_dims, const u64* info, const u8* lhs,
                                          const u8* rhs, u8* out) {
    auto f = [](u8 a, u8 b) -> u8 { return Op::apply(a, b); };
    if (info == nullptr && rk_map2_contiguous(numel, lhs, rhs, out, f)) return;
    rk_for_each<2>(numel, num_dims, info, [=](u64 i, const u64* off) {
        out[i] = f(lhs[off[0]], rhs[off[1]]);
    });
}

#define F8_BINARY(KERNEL, OP)                                                                  \
    RK_KERNEL void KERNEL##_f8e4m3(u64 numel, u64 num_dims, const u64* info, const u8* lhs,     \
                                   const u8* rhs, u8* out) {                                   \
        f8_binary<OP>(numel, num_dims, info, lhs, rhs, out);                                   \
    }
F8_BINARY(badd, f8b_add)
F8_BINARY(bsub, f8b_sub)
F8_BINARY(bmul, f8b_mul)
F8_BINARY(bdiv, f8b_div)
F8_BINARY(bminimum, f8b_minimum)
F8_BINARY(bmaximum, f8b_maximum)
F8_BINARY(eq, f8c_eq)
F8_BINARY(ne, f8c_ne)
F8_BINARY(lt, f8c_lt)
F8_BINARY(le, f8c_le)
F8_BINARY(gt, f8c_gt)
F8_BINARY(ge, f8c_ge)

// ---- scatter_add / index_add: one thread per destination column, terms in Candle's order ----
// Candle's CPU backend adds the terms of one destination element one after the other (each
// add rounded to f8), in increasing order along `dim`; the sum depends on that order, so a
// thread walks the whole of `dim` for one position elsewhere (a "column": the iteration shape
// with its `dim` entry set to 1), reading and writing its destination elements itself. Columns
// never share a destination element (the destination is contiguous, checked by the wrapper),
// so no atomics are needed.
//
// `info` (never null) holds the column dims, then per operand its strides (scatter_add: ids,
// src, dst; index_add: src, dst); the dst strides' `dim` entry is unused (0). The largest value
// of I skips a term (as in Candle); any other index outside 0..dst_dim is skipped and recorded
// in `err` (u32[8]): err[0] = op code (4 scatter_add, 5 index_add, as the `indexing` module's
// IX_ERR_* codes), err[1..3) the index as i64, err[3..5) the dim size; the first one wins.

#define F8_ERR_SCATTER_ADD 4u
#define F8_ERR_INDEX_ADD 5u

template <typename I>
__device__ __forceinline__ bool f8_index(I idx, u64 size, u32 code, u32* err, u64* pos) {
    if (idx == rk_int_limits<I>::max()) return false;
    if (rk_is_negative(idx) || (u64)idx >= size) {
        if (*(volatile u32*)err == 0u && atomicCAS(err, 0u, code) == 0u) {
            const u64 v = (u64)(i64)idx;
            err[1] = (u32)v;
            err[2] = (u32)(v >> 32);
            err[3] = (u32)size;
            err[4] = (u32)(size >> 32);
        }
        return false;
    }
    *pos = (u64)idx;
    return true;
}

template <typename I>
__device__ __forceinline__ void f8_scatter_add(u64 n_cols, u64 num_dims, const u64* info,
                                               const I* ids, const u8* src, u8* dst, u64 ids_dim,
                                               u64 ids_dim_stride, u64 src_dim_stride,
                                               u64 dst_dim, u64 dst_dim_stride, u32* err) {
    const u64 step = rk_thread_count();
    for (u64 c = rk_thread_id(); c < n_cols; c += step) {
        u64 off[3];
        rk_strided_offsets<u64, 3>(c, (u32)num_dims, info, off);
        for (u64 j = 0; j < ids_dim; ++j) {
            u64 pos = 0;
            if (!f8_index(ids[off[0] + j * ids_dim_stride], dst_dim, F8_ERR_SCATTER_ADD, err, &pos))
                continue;
            u8* p = dst + off[2] + pos * dst_dim_stride;
            *p = f8_add(*p, src[off[1] + j * src_dim_stride]);
        }
    }
}

template <typename I>
__device__ __forceinline__ void f8_index_add(u64 n_cols, u64 num_dims, const u64* info,
                                             const I* ids, const u8* src, u8* dst, u64 n_ids,
                                             u64 ids_stride, u64 src_dim_stride, u64 dst_dim,
                                             u64 dst_dim_stride, u32* err) {
    const u64 step = rk_thread_count();
    for (u64 c = rk_thread_id(); c < n_cols; c += step) {
        u64 off[2];
        rk_strided_offsets<u64, 2>(c, (u32)num_dims, info, off);
        for (u64 j = 0; j < n_ids; ++j) {
            u64 pos = 0;
            if (!f8_index(ids[j * ids_stride], dst_dim, F8_ERR_INDEX_ADD, err, &pos)) continue;
            u8* p = dst + off[1] + pos * dst_dim_stride;
            *p = f8_add(*p, src[off[0] + j * src_dim_stride]);
        }
    }
}

#define F8_INDEXING(I)                                                                         \
    RK_KERNEL void scatter_add_##I##_f8e4m3(u64 n_cols, u64 num_dims, const u64* info,         \
                                            const I* ids, const u8* src, u8* dst, u64 ids_dim,  \
                                            u64 ids_dim_stride, u64 src_dim_stride,             \
                                            u64 dst_dim, u64 dst_dim_stride, u32* err) {        \
        f8_scatter_add<I>(n_cols, num_dims, info, ids, src, dst, ids_dim, ids_dim_stride,       \
                          src_dim_stride, dst_dim, dst_dim_stride, err);                        \
    }                                                                                           \
    RK_KERNEL void index_add_##I##_f8e4m3(u64 n_cols, u64 num_dims, const u64* info,           \
                                          const I* ids, const u8* src, u8* dst, u64 n_ids,      \
                                          u64 ids_stride, u64 src_dim_stride, u64 dst_dim,      \
                                          u64 dst_dim_stride, u32* err) {                       \
        f8_index_add<I>(n_cols, num_dims, info, ids, src, dst, n_ids, ids_stride,               \
                        src_dim_stride, dst_dim, dst_dim_stride, err);                          \
    }
F8_INDEXING(u8)
F8_INDEXING(u32)
F8_INDEXING(i16)
F8_INDEXING(i32)
F8_INDEXING(i64)
