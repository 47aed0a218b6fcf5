// Indexing kernels, for index types I in u8 u32 i16 i32 i64 and T all 9 dtypes:
//   index_select_{I}_{T}(numel, num_dims, info, src, ids, out, n_ids, right, src_dim,
//                        src_dim_stride, ids_stride, err)
//   gather_{I}_{T}(numel, num_dims, info, src, ids, out, ids_dim, right, src_dim, src_dim_stride,
//                  err)
//   scatter_{I}_{T} / scatter_add_{I}_{T}(numel, num_dims, info, ids, src, dst, ids_dim, right,
//                                         dst_dim, dst_dim_stride, err)
//   index_add_{I}_{T}(numel, num_dims, info, ids, src, dst, n_ids, right, dst_dim,
//                     dst_dim_stride, ids_stride, err)
//
// Every kernel walks an iteration shape (index_select: the output's; gather: the ids'; scatter,
// scatter_add, index_add: the source's) of `numel` elements; `right` is the product of its dims
// after `dim` and the third scalar its size along `dim`. The "indexed" operand (the source of
// index_select/gather, the destination of the others) has `*_dim` elements along `dim`, `*_dim
// _stride` apart. `info` is null when every operand is contiguous (then offsets come from
// left/right arithmetic), else it holds the iteration dims then one stride set per strided
// operand, the indexed operand last with its stride along `dim` set to 0 (the index supplies
// that part). 1-D ids (index_select, index_add) are read at `j * ids_stride`, j the iteration
// coordinate along `dim`. Pointers arrive offset to their layouts' starts; outputs of
// index_select/gather are contiguous.
//
// Indices: the largest value of I means "skip" (index_select/gather write 0, the others leave
// the destination alone), as in Candle. Any other index that is negative or >= the indexed size
// is skipped the same way (0 written, nothing read or written out of bounds) and recorded in
// `err` (u32[8], see ix_report), which the host checks.
//
// scatter (set) runs one thread per fiber along `dim` (numel / ids_dim of them), walking the
// fiber in order, so that of several ids naming one destination element the last one along
// `dim` wins, as on Candle's CPU and CUDA backends. scatter_add/index_add accumulate atomically (for floats the order, hence
// the rounding, is unspecified); integer sums wrap. 8- and 16-bit types use compare-and-swap
// loops on the aligned 32-bit word holding the element.

#define IX_ERR_INDEX_SELECT 1u
#define IX_ERR_GATHER 2u
#define IX_ERR_SCATTER 3u
#define IX_ERR_SCATTER_ADD 4u
#define IX_ERR_INDEX_ADD 5u

// Records the first out-of-range index: err[0] = op code (1..5, set once by compare-and-swap),
// then err[1..3) the index as i64 (low, high words) and err[3..5) the indexed size as u64. Only
// the thread that set err[0] writes the rest, so the record stays consistent.
template <typename I>
__device__ __forceinline__ void ix_report(u32* err, u32 code, I idx, u64 size) {
    if (*(volatile u32*)err != 0u) return;
    if (atomicCAS(err, 0u, code) == 0u) {
        const u64 v = (u64)(i64)idx;
        err[1] = (u32)v;
        err[2] = (u32)(v >> 32);
        err[3] = (u32)size;
        err[4] = (u32)(size >> 32);
    }
}

enum { IX_VALID = 0, IX_SKIP = 1, IX_OUT_OF_RANGE = 2 };

// Classifies an index against an indexed size; sets *pos when valid.
template <typename I>
__device__ __forceinline__ int ix_classify(I idx, u64 size, u64* pos) {
    if (idx == rk_int_limits<I>::max()) return IX_SKIP;
    if (rk_is_negative(idx) || (u64)idx >= size) return IX_OUT_OF_RANGE;
    *pos = (u64)idx;
    return IX_VALID;
}

template <typename T> __device__ __forceinline__ T ix_zero() {
    return rk_from_compute<T>((typename rk_compute<T>::type)0);
}

// Element i of the iteration shape: f(i, j, off) where j is its coordinate along `dim` and
// off[k] the element offset in operand k; the last operand is the indexed one (offset without
// the `dim` part). Contiguous (info null): operands 0..N-2 are at i, the indexed operand's base
// is (left * indexed_dim) * right + r.
template <typename X, int N, typename F>
__device__ __forceinline__ void ix_visit(X i, u32 num_dims, const u64* info, X dim_size, X right,
                                         u64 indexed_dim, F& f) {
    const X q = i / right;
    const X r = i - q * right;
    const X j = q % dim_size;
    u64 off[N];
    if (info == nullptr) {
        const X left = q / dim_size;
#pragma unroll
        for (int k = 0; k < N - 1; ++k) off[k] = (u64)i;
        off[N - 1] = (u64)left * indexed_dim * (u64)right + (u64)r;
    } else {
        rk_strided_offsets<X, N>(i, num_dims, info, off);
    }
    f((u64)i, (u64)j, off);
}

template <int N, typename F>
__device__ __forceinline__ void ix_for_each(u64 numel, u64 num_dims, const u64* info, u64 dim_size,
                                            u64 right, u64 indexed_dim, F f) {
    const u64 start = rk_thread_id();
    const u64 step = rk_thread_count();
    if (numel < 0x80000000ull) {
        // i < 2^31 and step < 2^31: i + step never wraps a u32.
        for (u32 i = (u32)start; i < (u32)numel; i += (u32)step)
            ix_visit<u32, N>(i, (u32)num_dims, info, (u32)dim_size, (u32)right, indexed_dim, f);
    } else {
        for (u64 i = start; i < numel; i += step)
            ix_visit<u64, N>(i, (u32)num_dims, info, dim_size, right, indexed_dim, f);
    }
}

// ---- Atomic accumulation ----
// a + b: wrapping for integers, in f32 with one rounding for f16/bf16.
template <typename T> __device__ __forceinline__ T ix_add(T a, T b) {
    return rk_wrapping_add(a, b);
}
template <> __device__ __forceinline__ f16 ix_add<f16>(f16 a, f16 b) {
    return __float2half(__half2float(a) + __half2float(b));
}
template <> __device__ __forceinline__ bf16 ix_add<bf16>(bf16 a, bf16 b) {
    return __float2bfloat16(__bfloat162float(a) + __bfloat162float(b));
}

// The low bits of 8/16-bit values, and back.
__device__ __forceinline__ u32 ix_bits(u8 x) { return x; }
__device__ __forceinline__ u32 ix_bits(i16 x) { return (u32)(unsigned short)x; }
__device__ __forceinline__ u32 ix_bits(f16 x) { return __half_as_ushort(x); }
__device__ __forceinline__ u32 ix_bits(bf16 x) { return __bfloat16_as_ushort(x); }
template <typename T> __device__ __forceinline__ T ix_from_bits(u32 b);
template <> __device__ __forceinline__ u8 ix_from_bits<u8>(u32 b) { return (u8)b; }
template <> __device__ __forceinline__ i16 ix_from_bits<i16>(u32 b) { return (i16)(unsigned short)b; }
template <> __device__ __forceinline__ f16 ix_from_bits<f16>(u32 b) {
    return __ushort_as_half((unsigned short)b);
}
template <> __device__ __forceinline__ bf16 ix_from_bits<bf16>(u32 b) {
    return __ushort_as_bfloat16((unsigned short)b);
}

// *p += v for an 8- or 16-bit T: compare-and-swap on the aligned 32-bit word holding *p (the
// other bytes of the word are written back unchanged).
template <typename T> __device__ __forceinline__ void ix_atomic_add_narrow(T* p, T v) {
    u32* word = (u32*)((u64)p & ~(u64)3);
    const u32 shift = (u32)((u64)p & 3) * 8u;
    const u32 mask = (sizeof(T) == 1 ? 0xffu : 0xffffu) << shift;
    u32 old = *(volatile u32*)word;
    u32 assumed;
    do {
        assumed = old;
        const T cur = ix_from_bits<T>((assumed & mask) >> shift);
        const u32 next = (ix_bits(ix_add(cur, v)) << shift) & mask;
        old = atomicCAS(word, assumed, (assumed & ~mask) | next);
    } while (old != assumed);
}

__device__ __forceinline__ void ix_atomic_add(u8* p, u8 v) { ix_atomic_add_narrow(p, v); }
__device__ __forceinline__ void ix_atomic_add(i16* p, i16 v) { ix_atomic_add_narrow(p, v); }
__device__ __forceinline__ void ix_atomic_add(f16* p, f16 v) { ix_atomic_add_narrow(p, v); }
__device__ __forceinline__ void ix_atomic_add(bf16* p, bf16 v) { ix_atomic_add_narrow(p, v); }
__device__ __forceinline__ void ix_atomic_add(u32* p, u32 v) { atomicAdd(p, v); }
__device__ __forceinline__ void ix_atomic_add(i32* p, i32 v) { atomicAdd(p, v); }
// Two's complement: a wrapping i64 add is the u64 add of the same bits.
__device__ __forceinline__ void ix_atomic_add(i64* p, i64 v) {
    atomicAdd((u64*)p, (u64)v);
}
__device__ __forceinline__ void ix_atomic_add(f32* p, f32 v) { atomicAdd(p, v); }
__device__ __forceinline__ void ix_atomic_add(f64* p, f64 v) { atomicAdd(p, v); }

// ---- Kernels ----

template <typename I, typename T>
__device__ __forceinline__ void ix_index_select(u64 numel, u64 num_dims, const u64* info,
                                                const T* src, const I* ids, T* out, u64 n_ids,
                                                u64 right, u64 src_dim, u64 src_dim_stride,
                                                u64 ids_stride, u32* err) {
    ix_for_each<1>(numel, num_dims, info, n_ids, right, src_dim,
                   [=](u64 i, u64 j, const u64* off) {
                       const I idx = ids[j * ids_stride];
                       u64 pos = 0;
                       T v = ix_zero<T>();
                       const int c = ix_classify(idx, src_dim, &pos);
                       if (c == IX_VALID) v = src[off[0] + pos * src_dim_stride];
                       else if (c == IX_OUT_OF_RANGE)
                           ix_report(err, IX_ERR_INDEX_SELECT, idx, src_dim);
                       out[i] = v;
                   });
}

template <typename I, typename T>
__device__ __forceinline__ void ix_gather(u64 numel, u64 num_dims, const u64* info, const T* src,
                                          const I* ids, T* out, u64 ids_dim, u64 right,
                                          u64 src_dim, u64 src_dim_stride, u32* err) {
    ix_for_each<2>(numel, num_dims, info, ids_dim, right, src_dim,
                   [=](u64 i, u64, const u64* off) {
                       const I idx = ids[off[0]];
                       u64 pos = 0;
                       T v = ix_zero<T>();
                       const int c = ix_classify(idx, src_dim, &pos);
                       if (c == IX_VALID) v = src[off[1] + pos * src_dim_stride];
                       else if (c == IX_OUT_OF_RANGE) ix_report(err, IX_ERR_GATHER, idx, src_dim);
                       out[i] = v;
                   });
}

template <bool ADD, typename I, typename T>
__device__ __forceinline__ void ix_scatter(u64 numel, u64 num_dims, const u64* info, const I* ids,
                                           const T* src, T* dst, u64 ids_dim, u64 right,
                                           u64 dst_dim, u64 dst_dim_stride, u32* err) {
    auto visit = [=](u64, u64, const u64* off) {
        const I idx = ids[off[0]];
        u64 pos = 0;
        const int c = ix_classify(idx, dst_dim, &pos);
        if (c == IX_VALID) {
            T* p = dst + off[2] + pos * dst_dim_stride;
            if (ADD) ix_atomic_add(p, src[off[1]]);
            else *p = src[off[1]];
        } else if (c == IX_OUT_OF_RANGE) {
            ix_report(err, ADD ? IX_ERR_SCATTER_ADD : IX_ERR_SCATTER, idx, dst_dim);
        }
    };
    if (ADD) {
        ix_for_each<3>(numel, num_dims, info, ids_dim, right, dst_dim, visit);
        return;
    }
    // Set: fiber p = (left, r) walks j = 0..ids_dim in order (the last write wins).
    const u64 fibers = numel / ids_dim;
    for (u64 p = rk_thread_id(); p < fibers; p += rk_thread_count()) {
        const u64 left = p / right;
        const u64 r = p - left * right;
        for (u64 j = 0; j < ids_dim; ++j)
            ix_visit<u64, 3>((left * ids_dim + j) * right + r, (u32)num_dims, info, ids_dim,
                             right, dst_dim, visit);
    }
}

template <typename I, typename T>
__device__ __forceinline__ void ix_index_add(u64 numel, u64 num_dims, const u64* info,
                                             const I* ids, const T* src, T* dst, u64 n_ids,
                                             u64 right, u64 dst_dim, u64 dst_dim_stride,
                                             u64 ids_stride, u32* err) {
    ix_for_each<2>(numel, num_dims, info, n_ids, right, dst_dim,
                   [=](u64, u64 j, const u64* off) {
                       const I idx = ids[j * ids_stride];
                       u64 pos = 0;
                       const int c = ix_classify(idx, dst_dim, &pos);
                       if (c == IX_VALID)
                           ix_atomic_add(dst + off[1] + pos * dst_dim_stride, src[off[0]]);
                       else if (c == IX_OUT_OF_RANGE)
                           ix_report(err, IX_ERR_INDEX_ADD, idx, dst_dim);
                   });
}

#define RK_INDEXING(I, T)                                                                      \
    RK_KERNEL void index_select_##I##_##T(u64 numel, u64 num_dims, const u64* info,            \
                                          const T* src, const I* ids, T* out, u64 n_ids,        \
                                          u64 right, u64 src_dim, u64 src_dim_stride,           \
                                          u64 ids_stride, u32* err) {                           \
        ix_index_select<I, T>(numel, num_dims, info, src, ids, out, n_ids, right, src_dim,      \
                              src_dim_stride, ids_stride, err);                                 \
    }                                                                                           \
    RK_KERNEL void gather_##I##_##T(u64 numel, u64 num_dims, const u64* info, const T* src,     \
                                    const I* ids, T* out, u64 ids_dim, u64 right, u64 src_dim,  \
                                    u64 src_dim_stride, u32* err) {                             \
        ix_gather<I, T>(numel, num_dims, info, src, ids, out, ids_dim, right, src_dim,          \
                        src_dim_stride, err);                                                   \
    }                                                                                           \
    RK_KERNEL void scatter_##I##_##T(u64 numel, u64 num_dims, const u64* info, const I* ids,    \
                                     const T* src, T* dst, u64 ids_dim, u64 right, u64 dst_dim, \
                                     u64 dst_dim_stride, u32* err) {                            \
        ix_scatter<false, I, T>(numel, num_dims, info, ids, src, dst, ids_dim, right, dst_dim,  \
                                dst_dim_stride, err);                                           \
    }                                                                                           \
    RK_KERNEL void scatter_add_##I##_##T(u64 numel, u64 num_dims, const u64* info,              \
                                         const I* ids, const T* src, T* dst, u64 ids_dim,       \
                                         u64 right, u64 dst_dim, u64 dst_dim_stride,            \
                                         u32* err) {                                            \
        ix_scatter<true, I, T>(numel, num_dims, info, ids, src, dst, ids_dim, right, dst_dim,   \
                               dst_dim_stride, err);                                            \
    }                                                                                           \
    RK_KERNEL void index_add_##I##_##T(u64 numel, u64 num_dims, const u64* info, const I* ids,  \
                                       const T* src, T* dst, u64 n_ids, u64 right, u64 dst_dim, \
                                       u64 dst_dim_stride, u64 ids_stride, u32* err) {          \
        ix_index_add<I, T>(numel, num_dims, info, ids, src, dst, n_ids, right, dst_dim,         \
                           dst_dim_stride, ids_stride, err);                                    \
    }

#define RK_INDEXING_ALL(I) \
    RK_INDEXING(I, u8) RK_INDEXING(I, u32) RK_INDEXING(I, i16) RK_INDEXING(I, i32) \
    RK_INDEXING(I, i64) RK_INDEXING(I, bf16) RK_INDEXING(I, f16) RK_INDEXING(I, f32) \
    RK_INDEXING(I, f64)

RK_INDEXING_ALL(u8)
RK_INDEXING_ALL(u32)
RK_INDEXING_ALL(i16)
RK_INDEXING_ALL(i32)
RK_INDEXING_ALL(i64)
