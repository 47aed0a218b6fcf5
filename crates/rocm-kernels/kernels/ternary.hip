// where_{C}_{T}(numel, num_dims, info, cond: C*, on_true: T*, on_false: T*, out: T*):
// out = cond != 0 ? on_true : on_false, for C in u8 u32 i16 i32 i64 and T all 9 dtypes.
// `info` is dims, cond strides, on_true strides, on_false strides, or null when all three are
// contiguous; inputs arrive offset to their layouts' starts; `out` is contiguous.

#define RK_WHERE(C, T)                                                                       \
    RK_KERNEL void where_##C##_##T(u64 numel, u64 num_dims, const u64* info, const C* cond,   \
                                   const T* on_true, const T* on_false, T* out) {            \
        auto f = [](C c, T t, T e) { return c != (C)0 ? t : e; };                            \
        if (info == nullptr && rk_map3_contiguous(numel, cond, on_true, on_false, out, f))   \
            return;                                                                          \
        rk_for_each<3>(numel, num_dims, info, [=](u64 i, const u64* off) {                   \
            out[i] = f(cond[off[0]], on_true[off[1]], on_false[off[2]]);                     \
        });                                                                                  \
    }

#define RK_WHERE_ALL(C) \
    RK_WHERE(C, u8) RK_WHERE(C, u32) RK_WHERE(C, i16) RK_WHERE(C, i32) RK_WHERE(C, i64) \
    RK_WHERE(C, bf16) RK_WHERE(C, f16) RK_WHERE(C, f32) RK_WHERE(C, f64)

RK_WHERE_ALL(u8)
RK_WHERE_ALL(u32)
RK_WHERE_ALL(i16)
RK_WHERE_ALL(i32)
RK_WHERE_ALL(i64)
