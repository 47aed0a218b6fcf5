// Neural-network ops of candle-nn 0.11 (float dtypes bf16, f16, f32, f64; contiguous operands,
// arriving offset to their layouts' starts):
//   softmax_{T}(x, out, rows, cols): softmax over each row of `cols` elements (softmax_short_{T}:
//       the same for rows of at most 4 elements per thread);
//   rms_norm_{T}(x, alpha, out, rows, cols, eps): x * (1 / sqrt(mean(x^2) + eps)) * alpha;
//   add_rms_norm_{T}(x, r, alpha, sum_out, rows, cols, eps): sum = x + r (rounded to T), then
//       out = rms_norm(sum) as above; sum_out holds sum then out (2 * rows * cols elements);
//   swiglu_{T}(x, out, rows, half): silu(first half of each row) * second half;
//   layer_norm_{T}(x, alpha, beta, out, rows, cols, eps):
//       (x - mean) / sqrt(var + eps) * alpha + beta (biased variance);
//   rope_{T}, rope_i_{T}, rope_thd_{T}(b, h_or_t, t_or_h, d, cs_stride_b, src, cos, sin, dst):
//       rotary embeddings, see below;
//   rope_kv_{T}, rope_i_kv_{T}(...): rope / rope_i over a step's query and key heads with the
//       rotated keys and the values appended to a KV cache, in one launch (see below).
// The row ops run one block per row (grid-stride over rows; blockDim.x a multiple of warpSize,
// at most 1024), threads striding over the columns, then warp shuffles and shared memory; rows
// of at most 16 (layer_norm: 8) blockDim.x elements are read once (kept in registers). Rows
// short enough for one warp run blockDim.y rows per block, one per warp (shuffles only).
// Math runs in f32 for f16/bf16/f32 and in f64 for f64, rounded once at the end (candle-nn
// rounds the intermediate results of f16/bf16 softmax and rms_norm to the type: results may
// differ in the last bits).

// Reduces `v` over the block; every thread gets the result (the same bits in every thread).
// Every thread of the block must call it.
template <typename C, typename F>
__device__ __forceinline__ C nn_block_allreduce(C v, F op) {
    __shared__ C partial[32];
    const int lane = (int)(threadIdx.x % warpSize);
    const int warp = (int)(threadIdx.x / warpSize);
    const int nwarps = (int)(blockDim.x / warpSize);
    for (int m = warpSize / 2; m > 0; m >>= 1) v = op(v, (C)__shfl_xor(v, m));
    if (nwarps > 1) {
        if (lane == 0) partial[warp] = v;
        __syncthreads();
        v = partial[0];
        for (int w = 1; w < nwarps; ++w) v = op(v, partial[w]);
        __syncthreads();  // `partial` is reused by the next call
    }
    return v;
}

// Rows are spread over blocks and, when a row takes one warp (blockDim.x == warpSize, so that
// nn_block_allreduce needs no shared memory), over the blockDim.y warps of a block as well.
// threadIdx.y is the same in every lane of a warp (blockDim.x is a multiple of warpSize): on
// AMD it is read from the first lane, so that the row and its pointers stay scalar registers.
__device__ __forceinline__ u64 nn_first_row() {
#if defined(__HIP_PLATFORM_NVIDIA__)
    const u32 y = threadIdx.y;
#else
    const u32 y = (u32)__builtin_amdgcn_readfirstlane((int)threadIdx.y);
#endif
    return (u64)blockIdx.x * blockDim.y + y;
}
__device__ __forceinline__ u64 nn_row_step() { return (u64)gridDim.x * blockDim.y; }

__device__ __forceinline__ float nn_neg_inf(float) { return __int_as_float(0xff800000); }
__device__ __forceinline__ double nn_neg_inf(double) {
    return __longlong_as_double((long long)0xfff0000000000000ull);
}

struct nn_add {
    template <typename C> __device__ __forceinline__ C operator()(C a, C b) const { return a + b; }
};
// max ignoring NaN (Rust's `max`, which Candle's softmax row maximum uses).
struct nn_max {
    template <typename C> __device__ __forceinline__ C operator()(C a, C b) const {
        return rk_fmax(a, b);
    }
};

// Rows of at most NN_CACHE * blockDim.x elements (NN_CACHE_LN for layer_norm, which keeps more
// live values) are read once: each thread keeps its elements (columns tid, tid + blockDim.x, ...)
// in registers between the passes. The arithmetic, and the order of each thread's partial
// sums, is the same as in the general loops.
#define NN_CACHE 16
#define NN_CACHE_LN 8

// The column of cached element k of thread `tid`: groups of G consecutive columns per thread
// (G = 4: one 16-byte load of f32; G = 1: one element), consecutive threads on consecutive
// groups, so every load instruction of a warp reads one contiguous span.
template <int G> __device__ __forceinline__ u32 nn_col(int k, u32 tid, u32 bd) {
    return (tid + (u32)(k / G) * bd) * (u32)G + (u32)(k % G);
}

// Loads / stores one group of G elements starting at column c0 (c0 + G <= cols when c0 < cols).
template <typename T, int G> struct nn_group {
    typedef typename rk_compute<T>::type C;
    static __device__ __forceinline__ void load(const T* r, u32 c0, C* v) {
#pragma unroll
        for (int j = 0; j < G; ++j) v[j] = rk_to_compute(r[c0 + j]);
    }
    static __device__ __forceinline__ void store(T* r, u32 c0, const C* v) {
#pragma unroll
        for (int j = 0; j < G; ++j) r[c0 + j] = rk_from_compute<T>(v[j]);
    }
};
template <> struct nn_group<f32, 4> {
    static __device__ __forceinline__ void load(const f32* r, u32 c0, float* v) {
        const float4 q = *reinterpret_cast<const float4*>(r + c0);
        v[0] = q.x;
        v[1] = q.y;
        v[2] = q.z;
        v[3] = q.w;
    }
    static __device__ __forceinline__ void store(f32* r, u32 c0, const float* v) {
        float4 q;
        q.x = v[0];
        q.y = v[1];
        q.z = v[2];
        q.w = v[3];
        *reinterpret_cast<float4*>(r + c0) = q;
    }
};

// 2-byte types: one 8-byte access per group of 4.
template <typename T> struct nn_group_half4 {
    static __device__ __forceinline__ void load(const T* r, u32 c0, float* v) {
        const uint2 q = *reinterpret_cast<const uint2*>(r + c0);
        const T* h = reinterpret_cast<const T*>(&q);
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = rk_to_compute(h[j]);
    }
    static __device__ __forceinline__ void store(T* r, u32 c0, const float* v) {
        uint2 q;
        T* h = reinterpret_cast<T*>(&q);
#pragma unroll
        for (int j = 0; j < 4; ++j) h[j] = rk_from_compute<T>(v[j]);
        *reinterpret_cast<uint2*>(r + c0) = q;
    }
};
template <> struct nn_group<f16, 4> : nn_group_half4<f16> {};
template <> struct nn_group<bf16, 4> : nn_group_half4<bf16> {};

template <typename T, int G, int N>
__device__ __forceinline__ void nn_softmax_cached(const T* x, T* out, u64 rows, u32 cols) {
    typedef typename rk_compute<T>::type C;
    const u32 tid = threadIdx.x, bd = blockDim.x;
    for (u64 row = nn_first_row(); row < rows; row += nn_row_step()) {
        const T* xr = x + row * cols;
        T* outr = out + row * cols;
        C v[N];
#pragma unroll
        for (int k = 0; k < N; k += G) {
            const u32 c0 = nn_col<G>(k, tid, bd);
            if (c0 < cols) {
                nn_group<T, G>::load(xr, c0, &v[k]);
            } else {
#pragma unroll
                for (int j = 0; j < G; ++j) v[k + j] = nn_neg_inf(C());
            }
        }
        C m = nn_neg_inf(C());
#pragma unroll
        for (int k = 0; k < N; ++k) m = rk_fmax(m, v[k]);
        m = nn_block_allreduce(m, nn_max());
        C s = (C)0;
#pragma unroll
        for (int k = 0; k < N; ++k) {
            if (nn_col<G>(k, tid, bd) < cols) {
                v[k] = rk_exp(v[k] - m);
                s += v[k];
            }
        }
        s = nn_block_allreduce(s, nn_add());
#pragma unroll
        for (int k = 0; k < N; ++k) v[k] = v[k] / s;
#pragma unroll
        for (int k = 0; k < N; k += G) {
            const u32 c0 = nn_col<G>(k, tid, bd);
            if (c0 < cols) nn_group<T, G>::store(outr, c0, &v[k]);
        }
    }
}

// x * (1 / sqrt(mean(x^2) + eps)) * alpha: one division per row, then multiplications. A
// division per element was the bottleneck on (4096, 4096) f32 (57.9 vs 51.2 µs on an H100, alpha
// held in registers); without it, 16-byte groups win too (H200: 38.0 µs, against 50.1 µs with
// divisions and one-element groups, 52.5 µs with divisions and 16-byte groups).
//
// With a residual `r` (add_rms_norm), the row is first x + r rounded to T, which is written to
// `sum` and then normalised (candle's `x + r` followed by rms_norm, in one pass).
template <typename T, int G, int N>
__device__ __forceinline__ void nn_rms_norm_cached(const T* x, const T* r, T* sum,
                                                   const T* alpha, T* out, u64 rows, u32 cols,
                                                   float eps) {
    typedef typename rk_compute<T>::type C;
    const u32 tid = threadIdx.x, bd = blockDim.x;
    for (u64 row = nn_first_row(); row < rows; row += nn_row_step()) {
        const T* xr = x + row * cols;
        T* outr = out + row * cols;
        // alpha is loaded with the row (not after the reduction), so that its loads are in
        // flight together with x's: a short row is then one memory round trip, not two. Not for
        // f64, whose registers it would push past the 1024-thread budget of gfx9 (scratch).
        constexpr bool PRE = sizeof(C) == 4;
        C v[N], a[N];
#pragma unroll
        for (int k = 0; k < N; k += G) {
            const u32 c0 = nn_col<G>(k, tid, bd);
            if (c0 < cols) {
                nn_group<T, G>::load(xr, c0, &v[k]);
                if (PRE) nn_group<T, G>::load(alpha, c0, &a[k]);
                if (r != nullptr) {
                    C w[G];
                    nn_group<T, G>::load(r + row * cols, c0, w);
#pragma unroll
                    for (int j = 0; j < G; ++j)
                        v[k + j] = rk_to_compute(rk_from_compute<T>(v[k + j] + w[j]));
                    nn_group<T, G>::store(sum + row * cols, c0, &v[k]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < G; ++j) v[k + j] = a[k + j] = (C)0;
            }
        }
        C s2 = (C)0;
#pragma unroll
        for (int k = 0; k < N; ++k) s2 += v[k] * v[k];
        s2 = nn_block_allreduce(s2, nn_add());
        const C inv = (C)1 / rk_sqrt(s2 / (C)cols + (C)eps);
#pragma unroll
        for (int k = 0; k < N; k += G) {
            const u32 c0 = nn_col<G>(k, tid, bd);
            if (c0 < cols) {
                if (!PRE) nn_group<T, G>::load(alpha, c0, &a[k]);
#pragma unroll
                for (int j = 0; j < G; ++j) v[k + j] = v[k + j] * inv * a[k + j];
                nn_group<T, G>::store(outr, c0, &v[k]);
            }
        }
    }
}

// G = 4 (16-byte groups) for f32 rows whose length is a multiple of 4 and whose pointers are
// 16-byte aligned; G = 1 otherwise.
template <typename T> __device__ __forceinline__ bool nn_vec4(u32 cols, const void* a, const void* b,
                                                             const void* c) {
    return false;
}
template <> __device__ __forceinline__ bool nn_vec4<f32>(u32 cols, const void* a, const void* b,
                                                         const void* c) {
    return cols % 4 == 0 && (((unsigned long long)a | (unsigned long long)b |
                              (unsigned long long)c) & 15) == 0;
}
template <> __device__ __forceinline__ bool nn_vec4<f16>(u32 cols, const void* a, const void* b,
                                                         const void* c) {
    return cols % 4 == 0 && (((unsigned long long)a | (unsigned long long)b |
                              (unsigned long long)c) & 7) == 0;
}
template <> __device__ __forceinline__ bool nn_vec4<bf16>(u32 cols, const void* a, const void* b,
                                                          const void* c) {
    return nn_vec4<f16>(cols, a, b, c);
}

template <typename T>
__device__ __forceinline__ void nn_layer_norm_cached(const T* x, const T* alpha, const T* beta,
                                                     T* out, u64 rows, u32 cols, float eps) {
    typedef typename rk_compute<T>::type C;
    const u32 tid = threadIdx.x, bd = blockDim.x;
    for (u64 row = nn_first_row(); row < rows; row += nn_row_step()) {
        const T* xr = x + row * cols;
        T* outr = out + row * cols;
        C v[NN_CACHE_LN];
#pragma unroll
        for (int k = 0; k < NN_CACHE_LN; ++k) {
            const u32 c = tid + (u32)k * bd;
            v[k] = c < cols ? rk_to_compute(xr[c]) : (C)0;
        }
        C s = (C)0;
#pragma unroll
        for (int k = 0; k < NN_CACHE_LN; ++k) s += v[k];
        const C mean = nn_block_allreduce(s, nn_add()) / (C)cols;
        C s2 = (C)0;
#pragma unroll
        for (int k = 0; k < NN_CACHE_LN; ++k) {
            if (tid + (u32)k * bd < cols) {
                const C dv = v[k] - mean;
                s2 += dv * dv;
            }
        }
        const C var = nn_block_allreduce(s2, nn_add()) / (C)cols;
        const C inv_std = (C)1 / rk_sqrt(var + (C)eps);
#pragma unroll
        for (int k = 0; k < NN_CACHE_LN; ++k) {
            const u32 c = tid + (u32)k * bd;
            if (c < cols) {
                const C y = (v[k] - mean) * inv_std;
                outr[c] = rk_from_compute<T>(y * rk_to_compute(alpha[c]) + rk_to_compute(beta[c]));
            }
        }
    }
}

// softmax(x)_j = exp(x_j - max) / sum_k exp(x_k - max), max ignoring NaNs (a NaN in the row
// still makes the sum, hence the whole row, NaN, as in Candle). Rows of at most N * blockDim.x
// elements are cached in registers: N = NN_CACHE for `softmax_{T}`, N = 4 for
// `softmax_short_{T}` (short rows such as attention scores: a quarter of the registers, so
// more warps in flight).
template <typename T, int N>
__device__ __forceinline__ void nn_softmax(const T* x, T* out, u64 rows, u64 cols) {
    typedef typename rk_compute<T>::type C;
    if (cols <= (u64)N * blockDim.x) {
        if (nn_vec4<T>((u32)cols, x, out, out))
            nn_softmax_cached<T, 4, N>(x, out, rows, (u32)cols);
        else
            nn_softmax_cached<T, 1, N>(x, out, rows, (u32)cols);
        return;
    }
    for (u64 row = nn_first_row(); row < rows; row += nn_row_step()) {
        const T* xr = x + row * cols;
        T* outr = out + row * cols;
        C m = nn_neg_inf(C());
        for (u64 c = threadIdx.x; c < cols; c += blockDim.x) m = rk_fmax(m, rk_to_compute(xr[c]));
        m = nn_block_allreduce(m, nn_max());
        C s = (C)0;
        for (u64 c = threadIdx.x; c < cols; c += blockDim.x) s += rk_exp(rk_to_compute(xr[c]) - m);
        s = nn_block_allreduce(s, nn_add());
        for (u64 c = threadIdx.x; c < cols; c += blockDim.x)
            outr[c] = rk_from_compute<T>(rk_exp(rk_to_compute(xr[c]) - m) / s);
    }
}

// `r` and `sum` null: rms_norm; otherwise add_rms_norm (see nn_rms_norm_cached).
template <typename T>
__device__ __forceinline__ void nn_rms_norm(const T* x, const T* r, T* sum, const T* alpha,
                                            T* out, u64 rows, u64 cols, float eps) {
    typedef typename rk_compute<T>::type C;
    rk_overlapped_entry();
    if (cols <= (u64)NN_CACHE * blockDim.x) {
        if (nn_vec4<T>((u32)cols, x, alpha, out) && nn_vec4<T>((u32)cols, r, sum, out))
            nn_rms_norm_cached<T, 4, NN_CACHE>(x, r, sum, alpha, out, rows, (u32)cols, eps);
        else
            nn_rms_norm_cached<T, 1, NN_CACHE>(x, r, sum, alpha, out, rows, (u32)cols, eps);
        return;
    }
    for (u64 row = nn_first_row(); row < rows; row += nn_row_step()) {
        const T* xr = x + row * cols;
        T* outr = out + row * cols;
        C s2 = (C)0;
        for (u64 c = threadIdx.x; c < cols; c += blockDim.x) {
            C v = rk_to_compute(xr[c]);
            if (r != nullptr) {
                const T t = rk_from_compute<T>(v + rk_to_compute(r[row * cols + c]));
                sum[row * cols + c] = t;
                v = rk_to_compute(t);
            }
            s2 += v * v;
        }
        s2 = nn_block_allreduce(s2, nn_add());
        const C inv = (C)1 / rk_sqrt(s2 / (C)cols + (C)eps);
        // With a residual, each thread reads back the sums it wrote itself (same columns).
        const T* yr = r != nullptr ? sum + row * cols : xr;
        for (u64 c = threadIdx.x; c < cols; c += blockDim.x)
            outr[c] = rk_from_compute<T>(rk_to_compute(yr[c]) * inv * rk_to_compute(alpha[c]));
    }
}

// silu(x[.., j]) * x[.., half + j] for each row of 2 * half elements (candle-nn's `swiglu`:
// the first half gated by the second), into rows of `half`. silu's result is rounded to T
// before the product, as candle's `silu(a) * b` does: the same bits as this backend's `silu`
// then `mul` (Candle's CPU exp may differ in the last bits, as for `silu` alone).
template <typename T, typename I>
__device__ __forceinline__ void nn_swiglu_loop(const T* x, T* out, I rows, I half) {
    typedef typename rk_compute<T>::type C;
    const I n = rows * half;
    for (I i = (I)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (I)(gridDim.x * blockDim.x)) {
        const I row = i / half, j = i - row * half;
        const C a = rk_to_compute(x[(u64)row * 2 * half + j]);
        const C b = rk_to_compute(x[(u64)row * 2 * half + half + j]);
        const C silu = rk_to_compute(rk_from_compute<T>(a / ((C)1 + rk_exp(-a))));
        out[i] = rk_from_compute<T>(silu * b);
    }
}

// 32-bit index math (a division per element) below 2^31 outputs, 64-bit otherwise.
template <typename T>
__device__ __forceinline__ void nn_swiglu(const T* x, T* out, u64 rows, u64 half) {
    if (rows * half < 0x80000000ull)
        nn_swiglu_loop<T, u32>(x, out, (u32)rows, (u32)half);
    else
        nn_swiglu_loop<T, u64>(x, out, rows, half);
}

// Two passes (mean, then the mean squared deviation): no cancellation (candle-nn's CPU version
// computes E[x^2] - E[x]^2 in f32).
template <typename T>
__device__ __forceinline__ void nn_layer_norm(const T* x, const T* alpha, const T* beta, T* out,
                                              u64 rows, u64 cols, float eps) {
    typedef typename rk_compute<T>::type C;
    if (cols <= (u64)NN_CACHE_LN * blockDim.x) {
        nn_layer_norm_cached<T>(x, alpha, beta, out, rows, (u32)cols, eps);
        return;
    }
    for (u64 row = nn_first_row(); row < rows; row += nn_row_step()) {
        const T* xr = x + row * cols;
        T* outr = out + row * cols;
        C s = (C)0;
        for (u64 c = threadIdx.x; c < cols; c += blockDim.x) s += rk_to_compute(xr[c]);
        const C mean = nn_block_allreduce(s, nn_add()) / (C)cols;
        C s2 = (C)0;
        for (u64 c = threadIdx.x; c < cols; c += blockDim.x) {
            const C dv = rk_to_compute(xr[c]) - mean;
            s2 += dv * dv;
        }
        const C var = nn_block_allreduce(s2, nn_add()) / (C)cols;
        const C inv_std = (C)1 / rk_sqrt(var + (C)eps);
        for (u64 c = threadIdx.x; c < cols; c += blockDim.x) {
            const C v = (rk_to_compute(xr[c]) - mean) * inv_std;
            outr[c] = rk_from_compute<T>(v * rk_to_compute(alpha[c]) + rk_to_compute(beta[c]));
        }
    }
}

// ---- Rotary embeddings ----
// Pairs (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos), cos/sin read at
//   i_cs = i_t * (d / 2) + i_d + i_b * cs_stride_b
// (cs_stride_b = 0: one [t_cs, d/2] table for the whole batch; else [b, t_cs, d/2] tables).
//   rope     (src [b, h, t, d]): x1 = element i_d, x2 = element i_d + d/2 of a row;
//   rope_i   (src [b, h, t, d]): x1, x2 = elements 2 i_d, 2 i_d + 1 (interleaved);
//   rope_thd (src [b, t, h, d]): as rope, the table row from the t index.
// One thread per pair, grid-stride; u32 index math below 2^31 pairs.

template <typename T>
__device__ __forceinline__ void nn_rotate(const T* src, const T* cos, const T* sin, T* dst,
                                          u64 i1, u64 i2, u64 i_cs) {
    typedef typename rk_compute<T>::type C;
    const C c = rk_to_compute(cos[i_cs]);
    const C s = rk_to_compute(sin[i_cs]);
    const C x1 = rk_to_compute(src[i1]);
    const C x2 = rk_to_compute(src[i2]);
    dst[i1] = rk_from_compute<T>(x1 * c - x2 * s);
    dst[i2] = rk_from_compute<T>(x1 * s + x2 * c);
}

// MODE 0: rope, 1: rope_i, 2: rope_thd. `n1`, `n2` are (h, t) for rope/rope_i, (t, h) for
// rope_thd.
template <int MODE, typename I, typename T>
__device__ __forceinline__ void nn_rope_loop(u64 b, u64 n1, u64 n2, u64 d, u64 cs_stride_b,
                                             const T* src, const T* cos, const T* sin, T* dst) {
    const I half_d = (I)(d / 2);
    const I pairs = (I)(b * n1 * n2 * (d / 2));
    const I step = (I)rk_thread_count();
    for (I p = (I)rk_thread_id(); p < pairs; p += step) {
        const I i_d = p % half_d;
        const I row = p / half_d;  // index over [b, n1, n2]
        I i_b, i_t;
        if (MODE == 2) {
            i_t = (row / (I)n2) % (I)n1;  // [b, t, h]
            i_b = row / ((I)n1 * (I)n2);
        } else {
            i_t = row % (I)n2;  // [b, h, t]
            i_b = row / ((I)n1 * (I)n2);
        }
        const u64 i_cs = (u64)i_t * (u64)half_d + (u64)i_d + (u64)i_b * cs_stride_b;
        u64 i1, i2;
        if (MODE == 1) {
            i1 = 2 * (u64)p;
            i2 = i1 + 1;
        } else {
            i1 = (u64)row * d + (u64)i_d;
            i2 = i1 + (u64)half_d;
        }
        nn_rotate(src, cos, sin, dst, i1, i2, i_cs);
    }
}

template <int MODE, typename T>
__device__ __forceinline__ void nn_rope(u64 b, u64 n1, u64 n2, u64 d, u64 cs_stride_b,
                                        const T* src, const T* cos, const T* sin, T* dst) {
    rk_overlapped_entry();
    if (b * n1 * n2 * (d / 2) < 0x80000000ull)
        nn_rope_loop<MODE, u32>(b, n1, n2, d, cs_stride_b, src, cos, sin, dst);
    else
        nn_rope_loop<MODE, u64>(b, n1, n2, d, cs_stride_b, src, cos, sin, dst);
}

// Rotary embeddings and a KV cache append in one launch (a decode step's q/k rotation and the
// cache's new rows):
//   rope_kv_{T}, rope_i_kv_{T}(u64 b, u64 hq, u64 hk, u64 t, u64 d, u64 cs_stride_b,
//       const T* qk, const T* cos, const T* sin, T* q_out, T* k_dst, u64 k_d2, u64 k_dst_s,
//       const T* v, T* v_dst, u64 v_d1, u64 v_d2, u64 v_dst_s)
//   qk [b, hq + hk, t, d] is rotated as rope (MODE 0) / rope_i (MODE 1) rotate it, with the
//   same tables and arithmetic; the rotated q heads go to q_out [b, hq, t, d], element e of the
//   rotated k heads ([b, hk, t, d]) to k_dst[(e / k_d2) * k_dst_s + e % k_d2] (k_d2 a multiple
//   of d). The blocks of grid y = 1 copy v (v_d1 rows of v_d2 contiguous elements) to v_dst,
//   rows v_dst_s apart. Grid-stride in x (any block count); u32 index math below 2^31.
template <int MODE, typename I, typename T>
__device__ __forceinline__ void nn_rope_kv_loop(u64 b, u64 hq, u64 hk, u64 t, u64 d,
                                                u64 cs_stride_b, const T* qk, const T* cos,
                                                const T* sin, T* q_out, T* k_dst, u64 k_d2,
                                                u64 k_dst_s) {
    typedef typename rk_compute<T>::type C;
    const I half_d = (I)(d / 2), heads = (I)(hq + hk), tt = (I)t;
    const I pairs = (I)(b * (hq + hk) * t * (d / 2));
    const I step = (I)rk_thread_count();
    for (I p = (I)rk_thread_id(); p < pairs; p += step) {
        const I i_d = p % half_d;
        const I row = p / half_d;  // index over [b, hq + hk, t]
        const I i_t = row % tt;
        const I i_h = (row / tt) % heads;
        const I i_b = row / (tt * heads);
        const u64 i_cs = (u64)i_t * (u64)half_d + (u64)i_d + (u64)i_b * cs_stride_b;
        // The pair's places in its row of d elements.
        const u64 c1 = MODE == 1 ? 2 * (u64)i_d : (u64)i_d;
        const u64 c2 = MODE == 1 ? c1 + 1 : c1 + (u64)half_d;
        const C c = rk_to_compute(cos[i_cs]);
        const C s = rk_to_compute(sin[i_cs]);
        const C x1 = rk_to_compute(qk[(u64)row * d + c1]);
        const C x2 = rk_to_compute(qk[(u64)row * d + c2]);
        const T y1 = rk_from_compute<T>(x1 * c - x2 * s);
        const T y2 = rk_from_compute<T>(x1 * s + x2 * c);
        T* out;
        if ((u64)i_h < hq) {
            out = q_out + (((u64)i_b * hq + (u64)i_h) * t + (u64)i_t) * d;
        } else {
            // The row's first element among the k heads; a row never straddles two
            // destination rows (k_d2 is a multiple of d).
            const u64 e = (((u64)i_b * hk + ((u64)i_h - hq)) * t + (u64)i_t) * d;
            out = k_dst + (e / k_d2) * k_dst_s + e % k_d2;
        }
        out[c1] = y1;
        out[c2] = y2;
    }
}

template <int MODE, typename T>
__device__ __forceinline__ void nn_rope_kv(u64 b, u64 hq, u64 hk, u64 t, u64 d, u64 cs_stride_b,
                                           const T* qk, const T* cos, const T* sin, T* q_out,
                                           T* k_dst, u64 k_d2, u64 k_dst_s, const T* v, T* v_dst,
                                           u64 v_d1, u64 v_d2, u64 v_dst_s) {
    rk_overlapped_entry();
    if (blockIdx.y == 0) {
        if (b * (hq + hk) * t * d < 0x80000000ull)
            nn_rope_kv_loop<MODE, u32>(b, hq, hk, t, d, cs_stride_b, qk, cos, sin, q_out, k_dst,
                                       k_d2, k_dst_s);
        else
            nn_rope_kv_loop<MODE, u64>(b, hq, hk, t, d, cs_stride_b, qk, cos, sin, q_out, k_dst,
                                       k_d2, k_dst_s);
        return;
    }
    const u64 numel = v_d1 * v_d2, start = rk_thread_id(), step = rk_thread_count();
    if (numel < 0x80000000ull) {
        const u32 cols = (u32)v_d2;
        for (u32 i = (u32)start; i < (u32)numel; i += (u32)step)
            v_dst[(u64)(i / cols) * v_dst_s + i % cols] = v[i];
    } else {
        for (u64 i = start; i < numel; i += step) v_dst[(i / v_d2) * v_dst_s + i % v_d2] = v[i];
    }
}

#define RK_NN(T)                                                                               \
    RK_KERNEL void softmax_##T(const T* x, T* out, u64 rows, u64 cols) {                       \
        nn_softmax<T, NN_CACHE>(x, out, rows, cols);                                           \
    }                                                                                          \
    RK_KERNEL void softmax_short_##T(const T* x, T* out, u64 rows, u64 cols) {                 \
        nn_softmax<T, 4>(x, out, rows, cols);                                                  \
    }                                                                                          \
    RK_KERNEL void rms_norm_##T(const T* x, const T* alpha, T* out, u64 rows, u64 cols,        \
                                float eps) {                                                   \
        nn_rms_norm<T>(x, nullptr, nullptr, alpha, out, rows, cols, eps);                      \
    }                                                                                          \
    RK_KERNEL void add_rms_norm_##T(const T* x, const T* r, const T* alpha, T* sum_out,       \
                                    u64 rows, u64 cols, float eps) {                           \
        nn_rms_norm<T>(x, r, sum_out, alpha, sum_out + rows * cols, rows, cols, eps);          \
    }                                                                                          \
    RK_KERNEL void swiglu_##T(const T* x, T* out, u64 rows, u64 half) {                        \
        nn_swiglu<T>(x, out, rows, half);                                                      \
    }                                                                                          \
    RK_KERNEL void layer_norm_##T(const T* x, const T* alpha, const T* beta, T* out, u64 rows, \
                                  u64 cols, float eps) {                                       \
        nn_layer_norm<T>(x, alpha, beta, out, rows, cols, eps);                                \
    }                                                                                          \
    RK_KERNEL void rope_##T(u64 b, u64 h, u64 t, u64 d, u64 cs_stride_b, const T* src,         \
                            const T* cos, const T* sin, T* dst) {                              \
        nn_rope<0, T>(b, h, t, d, cs_stride_b, src, cos, sin, dst);                            \
    }                                                                                          \
    RK_KERNEL void rope_i_##T(u64 b, u64 h, u64 t, u64 d, u64 cs_stride_b, const T* src,       \
                              const T* cos, const T* sin, T* dst) {                            \
        nn_rope<1, T>(b, h, t, d, cs_stride_b, src, cos, sin, dst);                            \
    }                                                                                          \
    RK_KERNEL void rope_thd_##T(u64 b, u64 t, u64 h, u64 d, u64 cs_stride_b, const T* src,     \
                                const T* cos, const T* sin, T* dst) {                          \
        nn_rope<2, T>(b, t, h, d, cs_stride_b, src, cos, sin, dst);                            \
    }                                                                                          \
    RK_KERNEL void rope_kv_##T(u64 b, u64 hq, u64 hk, u64 t, u64 d, u64 cs_stride_b,           \
                               const T* qk, const T* cos, const T* sin, T* q_out, T* k_dst,    \
                               u64 k_d2, u64 k_dst_s, const T* v, T* v_dst, u64 v_d1,          \
                               u64 v_d2, u64 v_dst_s) {                                        \
        nn_rope_kv<0, T>(b, hq, hk, t, d, cs_stride_b, qk, cos, sin, q_out, k_dst, k_d2,       \
                         k_dst_s, v, v_dst, v_d1, v_d2, v_dst_s);                              \
    }                                                                                          \
    RK_KERNEL void rope_i_kv_##T(u64 b, u64 hq, u64 hk, u64 t, u64 d, u64 cs_stride_b,         \
                                 const T* qk, const T* cos, const T* sin, T* q_out, T* k_dst,  \
                                 u64 k_d2, u64 k_dst_s, const T* v, T* v_dst, u64 v_d1,        \
                                 u64 v_d2, u64 v_dst_s) {                                      \
        nn_rope_kv<1, T>(b, hq, hk, t, d, cs_stride_b, qk, cos, sin, q_out, k_dst, k_d2,       \
                         k_dst_s, v, v_dst, v_d1, v_d2, v_dst_s);                              \
    }

RK_NN(bf16)
RK_NN(f16)
RK_NN(f32)
RK_NN(f64)
