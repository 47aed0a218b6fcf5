// Arg-sort along the last dim, for T all 9 dtypes:
//   asort_asc_{T}(src, out: u32*, nrows, ncols, ncols_pad)
//   asort_desc_{T}(src, out: u32*, nrows, ncols, ncols_pad)
// `src` is a contiguous (nrows, ncols) matrix (offset to its start), `out` the contiguous
// (nrows, ncols) indices; ncols_pad is the next power of two >= ncols. Each block sorts rows
// (grid-stride over rows) with a bitonic network in dynamic shared memory: ncols_pad u32 indices
// (padded to 8 bytes) followed by ncols_pad values, i.e. 8 * ceil(ncols_pad / 2) + ncols_pad *
// sizeof(T) bytes.
//
// Order: a strict total order on (value, index), so the result is unique and equals a stable
// sort: ascending (descending) by value, equal values (including -0 == +0) by increasing
// index; NaN is larger than every number (last ascending, first descending), NaNs among
// themselves by index; padding slots come after everything.

__device__ __forceinline__ bool st_is_nan(float x) { return x != x; }
__device__ __forceinline__ bool st_is_nan(double x) { return x != x; }
__device__ __forceinline__ bool st_is_nan(u8) { return false; }
__device__ __forceinline__ bool st_is_nan(u32) { return false; }
__device__ __forceinline__ bool st_is_nan(i16) { return false; }
__device__ __forceinline__ bool st_is_nan(i32) { return false; }
__device__ __forceinline__ bool st_is_nan(i64) { return false; }

// Whether element (a, ia) goes before (b, ib) (ia != ib).
template <bool ASC, typename T>
__device__ __forceinline__ bool st_before(T a, u32 ia, T b, u32 ib, u32 ncols) {
    const bool pa = ia >= ncols, pb = ib >= ncols;
    if (pa || pb) return pa && pb ? ia < ib : pb;
    const auto x = rk_to_compute(a);
    const auto y = rk_to_compute(b);
    const bool nx = st_is_nan(x), ny = st_is_nan(y);
    if (nx || ny) {
        if (nx && ny) return ia < ib;
        return ASC ? ny : nx;
    }
    if (x < y) return ASC;
    if (y < x) return !ASC;
    return ia < ib;
}

template <bool ASC, typename T>
__device__ __forceinline__ void st_argsort(const T* src, u32* out, u64 nrows, u32 ncols,
                                           u32 ncols_pad) {
    HIP_DYNAMIC_SHARED(u64, st_smem)
    u32* si = reinterpret_cast<u32*>(st_smem);
    T* sv = reinterpret_cast<T*>(st_smem + (ncols_pad + 1u) / 2u);
    const u32 tid = threadIdx.x;
    const u32 nt = blockDim.x;
    const u32 half = ncols_pad / 2u;
    for (u64 row = blockIdx.x; row < nrows; row += gridDim.x) {
        const T* r = src + row * (u64)ncols;
        for (u32 c = tid; c < ncols_pad; c += nt) {
            si[c] = c;
            sv[c] = c < ncols ? r[c] : rk_from_compute<T>((typename rk_compute<T>::type)0);
        }
        __syncthreads();
        for (u32 k = 2; k <= ncols_pad; k <<= 1) {
            for (u32 j = k >> 1; j > 0; j >>= 1) {
                for (u32 t = tid; t < half; t += nt) {
                    const u32 i = ((t & ~(j - 1u)) << 1) | (t & (j - 1u));
                    const u32 l = i + j;
                    const T vi = sv[i], vl = sv[l];
                    const u32 ii = si[i], il = si[l];
                    // Ascending runs want (i, l) in order, descending runs the reverse.
                    const bool swap = (i & k) == 0u ? st_before<ASC>(vl, il, vi, ii, ncols)
                                                    : st_before<ASC>(vi, ii, vl, il, ncols);
                    if (swap) {
                        sv[i] = vl;
                        sv[l] = vi;
                        si[i] = il;
                        si[l] = ii;
                    }
                }
                __syncthreads();
            }
        }
        u32* o = out + row * (u64)ncols;
        for (u32 c = tid; c < ncols; c += nt) o[c] = si[c];
        __syncthreads();
    }
}

#define RK_ASORT(T)                                                                           \
    RK_KERNEL void asort_asc_##T(const T* src, u32* out, u64 nrows, u32 ncols,                \
                                 u32 ncols_pad) {                                             \
        st_argsort<true, T>(src, out, nrows, ncols, ncols_pad);                               \
    }                                                                                         \
    RK_KERNEL void asort_desc_##T(const T* src, u32* out, u64 nrows, u32 ncols,               \
                                  u32 ncols_pad) {                                            \
        st_argsort<false, T>(src, out, nrows, ncols, ncols_pad);                              \
    }

RK_ASORT(u8)
RK_ASORT(u32)
RK_ASORT(i16)
RK_ASORT(i32)
RK_ASORT(i64)
RK_ASORT(bf16)
RK_ASORT(f16)
RK_ASORT(f32)
RK_ASORT(f64)
