// Matrix-vector products of float weights, for the few activation rows of a decode step:
//
// gemv_{T}(u32 rows, u32 n, u32 k, const T* x, const T* w, u64 ldw, T* y)
//     y[r * n + j] = sum_t x[r * k + t] * w[j * ldw + t] for r < rows <= GV_MAX_ROWS, j < n:
//     x is `rows` contiguous rows of k, w the row-major (n, k) weight with row stride ldw (a
//     Linear layer's weight, which Candle multiplies transposed). T is f32, f16 or bf16; the
//     sums are f32, rounded once to T.
//
// One warp (wavefront) per output column j: its lanes stride over k, with one 16-byte load of
// the weight row and of each activation row per step where k, ldw and both pointers allow it
// (element by element otherwise), then reduce across the warp with xor shuffles. The weight
// row is read once for all rows. A vendor GEMM called for one row costs several times a plain
// launch on the host; this kernel is a plain launch.

#define GV_MAX_ROWS 4

__device__ __forceinline__ float gv_warp_sum(float v) {
    for (int offset = warpSize / 2; offset > 0; offset >>= 1) v += __shfl_xor(v, offset);
    return v;
}

template <typename T>
__device__ __forceinline__ void gv_run(u32 rows, u32 n, u32 k, const T* x, const T* w, u64 ldw,
                                       T* y) {
    const u32 lane = threadIdx.x % warpSize;
    const u32 j = (u32)((blockIdx.x * (u64)blockDim.x + threadIdx.x) / warpSize);
    // The whole warp shares j: it leaves together, before any shuffle.
    if (j >= n) return;
    const T* wr = w + (u64)j * ldw;
    float acc[GV_MAX_ROWS];
#pragma unroll
    for (int r = 0; r < GV_MAX_ROWS; ++r) acc[r] = 0.0f;
    const int K = rk_vec_width<T, T>::value;
    typedef rk_vec<T, K> V;
    u32 done = 0;
    if (k % K == 0 && ldw % K == 0 && rk_aligned(x, sizeof(V)) && rk_aligned(w, sizeof(V))) {
        const u32 kv = k / K;
        for (u32 v = lane; v < kv; v += warpSize) {
            const V wv = reinterpret_cast<const V*>(wr)[v];
#pragma unroll
            for (int r = 0; r < GV_MAX_ROWS; ++r) {
                if ((u32)r < rows) {
                    const V xv = reinterpret_cast<const V*>(x + (u64)r * k)[v];
#pragma unroll
                    for (int e = 0; e < K; ++e)
                        acc[r] += (float)rk_to_compute(wv.v[e]) * (float)rk_to_compute(xv.v[e]);
                }
            }
        }
        done = k;
    }
    for (u32 t = done + lane; t < k; t += warpSize) {
        const float wt = (float)rk_to_compute(wr[t]);
#pragma unroll
        for (int r = 0; r < GV_MAX_ROWS; ++r)
            if ((u32)r < rows) acc[r] += wt * (float)rk_to_compute(x[(u64)r * k + t]);
    }
#pragma unroll
    for (int r = 0; r < GV_MAX_ROWS; ++r) {
        if ((u32)r < rows) {
            const float s = gv_warp_sum(acc[r]);
            if (lane == 0) y[(u64)r * n + j] = rk_from_compute<T>(s);
        }
    }
}

#define GV_KERNEL(T)                                                                           \
    RK_KERNEL void __launch_bounds__(256)                                                      \
        gemv_##T(u32 rows, u32 n, u32 k, const T* x, const T* w, u64 ldw, T* y) {             \
        gv_run<T>(rows, n, k, x, w, ldw, y);                                                   \
    }

GV_KERNEL(f32)
GV_KERNEL(f16)
GV_KERNEL(bf16)
