// Fills and 2-D copies, all 9 dtypes:
//   fill_{T}(numel, out, T value)                          out[0..numel) = value (contiguous)
//   const_set_{T}(numel, num_dims, info, out, T value)     strided fill: here the OUTPUT is the
//       strided operand (the one exception to "outputs are contiguous"): `info` is dims then
//       out's strides, or null when out is contiguous; `out` arrives offset to the layout start.
//   copy2d_{T}(src, dst, u64 d1, u64 d2, u64 src_s, u64 dst_s)
//       d1 rows of d2 contiguous elements: dst[r * dst_s + c] = src[r * src_s + c]; pointers
//       arrive offset to the first element.
//   copy2d_pair_{T}(src0, dst0, src1, dst1, u64 d1_0, d2_0, src_s0, dst_s0, d1_1, d2_1, src_s1,
//       dst_s1): two copy2d in one launch, grid y = 2 (y selects the copy): a KV cache's new key
//       and value rows appended together.
// Scalars are passed as the element type (f16/bf16 as their 16-bit type).

// d1 rows of d2 contiguous elements, by the blocks of grid x (any count).
template <typename T>
__device__ __forceinline__ void fl_copy2d(const T* src, T* dst, u64 d1, u64 d2, u64 src_s, u64 dst_s) {
    rk_overlapped_entry();
    const u64 numel = d1 * d2;
    const u64 start = rk_thread_id();
    const u64 step = rk_thread_count();
    if (numel < 0x80000000ull) {
        const u32 cols = (u32)d2;
        for (u32 i = (u32)start; i < (u32)numel; i += (u32)step) {
            const u32 r = i / cols, c = i % cols;
            dst[(u64)r * dst_s + c] = src[(u64)r * src_s + c];
        }
    } else {
        for (u64 i = start; i < numel; i += step) {
            const u64 r = i / d2, c = i % d2;
            dst[r * dst_s + c] = src[r * src_s + c];
        }
    }
}

#define RK_FILL(T)                                                                           \
    RK_KERNEL void fill_##T(u64 numel, T* out, T value) {                                    \
        const u64 start = rk_thread_id();                                                    \
        const u64 step = rk_thread_count();                                                  \
        u64 done = 0;                                                                        \
        if (rk_aligned(out, 16)) {                                                           \
            typedef rk_vec<T, 16 / sizeof(T)> V;                                             \
            V v;                                                                             \
            for (int k = 0; k < (int)(16 / sizeof(T)); ++k) v.v[k] = value;                  \
            const u64 nvec = numel / (16 / sizeof(T));                                       \
            for (u64 j = start; j < nvec; j += step) reinterpret_cast<V*>(out)[j] = v;       \
            done = nvec * (16 / sizeof(T));                                                  \
        }                                                                                    \
        for (u64 i = done + start; i < numel; i += step) out[i] = value;                     \
    }                                                                                        \
    RK_KERNEL void const_set_##T(u64 numel, u64 num_dims, const u64* info, T* out, T value) { \
        rk_for_each<1>(numel, num_dims, info, [=](u64, const u64* off) { out[off[0]] = value; }); \
    }                                                                                        \
    RK_KERNEL void copy2d_##T(const T* src, T* dst, u64 d1, u64 d2, u64 src_s, u64 dst_s) {  \
        fl_copy2d(src, dst, d1, d2, src_s, dst_s);                                           \
    }                                                                                        \
    RK_KERNEL void copy2d_pair_##T(const T* src0, T* dst0, const T* src1, T* dst1, u64 d1_0,  \
                                   u64 d2_0, u64 src_s0, u64 dst_s0, u64 d1_1, u64 d2_1,     \
                                   u64 src_s1, u64 dst_s1) {                                 \
        if (blockIdx.y == 0)                                                                 \
            fl_copy2d(src0, dst0, d1_0, d2_0, src_s0, dst_s0);                               \
        else                                                                                 \
            fl_copy2d(src1, dst1, d1_1, d2_1, src_s1, dst_s1);                               \
    }

RK_FILL(u8)
RK_FILL(u32)
RK_FILL(i16)
RK_FILL(i32)
RK_FILL(i64)
RK_FILL(bf16)
RK_FILL(f16)
RK_FILL(f32)
RK_FILL(f64)
