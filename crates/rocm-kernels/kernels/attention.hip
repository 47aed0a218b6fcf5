// Fused attention: softmax(Q K^T * scale [softcapped] + mask) V without materialising the scores
// (online softmax over key tiles), causal / sliding-window / full, grouped-query heads, optional
// additive mask, variable-length batches (cumulative offsets), and a split-key decode path
// (flash-decoding) whose partial softmaxes are merged by a second kernel.
//
// Tensors are addressed by element strides over (batch, sequence, head), the head dim contiguous;
// base pointers and strides are multiples of 16 bytes (checked by the launch wrappers), so rows are
// read with 16-byte loads. Every score is computed and accumulated in f32; exponentials are base 2
// (scores pre-multiplied by log2(e)). Masking: query row i of a sequence of `sq` queries against
// `sk` keys sees key j when j <= i + (sk - sq) + window_right and j >= i + (sk - sq) - window_left
// (bottom-right aligned, as flash-attention 2); a negative window is unbounded; causal is
// window_right = 0. A row that sees no key, or only keys whose mask is -inf, is zeros.

// ---------------------------------------------------------------------------------------------
// Matrix tiles (the tile-multiply abstraction; kept in this module until a second module needs
// it, then it moves to the prelude): one wave multiplies 16 x 16 x 16 tiles of f16/bf16 into f32 with the GPU's
// matrix instructions (attention). RK_MMA names the instruction family compiled for:
//   1 NVIDIA mma.sync m16n8k16 (sm_80+, 32 lanes; a 16-wide tile is two n8 halves)
//   2 CDNA MFMA v_mfma_f32_16x16x16{f16,bf16_1k} (gfx90a, gfx942, gfx950; 64 lanes)
//   3 RDNA3 WMMA v_wmma_f32_16x16x16_{f16,bf16} wave32 (gfx11)
//   4 RDNA4 WMMA v_wmma_f32_16x16x16_{f16,bf16} wave32, gfx12 operand layout
//   0 none (every other target): kernels using the tiles are not compiled.
// Operand layouts, from NVIDIA's PTX ISA (mma.m16n8k16 fragments) and AMD's instruction tables
// (CDNA3 ISA "matrix fused multiply-add" operand layouts, RDNA3/RDNA4 ISA WMMA sections); the
// line-by-line review is in docs/attention.md. Per lane, with l = lane, g = l / 4, t = l % 4:
//   A (16 x 16, row m, column k) and B (16 x 16, row k, column n) are read as "chunks" of
//   RK_MMA_CHUNK elements consecutive in k; C holds RK_MMA_ACC floats, element i at row
//   rk_mma_c_row(l, i), column rk_mma_c_col(l, i). Rows a lane holds are its "slots":
//   RK_MMA_SLOTS of them, element i in slot rk_mma_c_slot(i); the lanes holding one row differ in
//   their low log2(RK_MMA_ROW_LANES) lane bits.
// ---------------------------------------------------------------------------------------------

#if defined(__HIP_PLATFORM_NVIDIA__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define RK_MMA 1
#elif defined(__gfx90a__) || defined(__gfx942__) || defined(__gfx950__)
#define RK_MMA 2
#elif defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || \
    defined(__gfx1103__) || defined(__gfx1150__) || defined(__gfx1151__)
#define RK_MMA 3
#elif defined(__gfx1200__) || defined(__gfx1201__)
#define RK_MMA 4
#else
#define RK_MMA 0
#endif

#if RK_MMA == 1
#define RK_MMA_WAVE 32
#define RK_MMA_CHUNK 2  // A: a0a1 a2a3 a4a5 a6a7; B: b0b1 b2b3 per n8 half
#define RK_MMA_NCHUNK 4
#define RK_MMA_ACC 8  // two m16n8 accumulators c0..c3
#define RK_MMA_SLOTS 2
#define RK_MMA_ROW_LANES 4
// A chunk c: row g + 8 (c & 1), k 2t + 8 (c >> 1).
__device__ __forceinline__ int rk_mma_a_row(int l, int c) { return l / 4 + 8 * (c & 1); }
__device__ __forceinline__ int rk_mma_a_k(int l, int c) { return 2 * (l % 4) + 8 * (c >> 1); }
// B chunk c: column g + 8 (c >> 1) (the n8 half), k 2t + 8 (c & 1).
__device__ __forceinline__ int rk_mma_b_col(int l, int c) { return l / 4 + 8 * (c >> 1); }
__device__ __forceinline__ int rk_mma_b_k(int l, int c) { return 2 * (l % 4) + 8 * (c & 1); }
// C element i: half h = i / 4 (columns 8h..), c_j = i % 4: row g + 8 (c_j / 2), column 2t + c_j % 2.
__device__ __forceinline__ constexpr int rk_mma_c_slot(int i) { return (i % 4) / 2; }
__device__ __forceinline__ int rk_mma_c_row(int l, int i) { return l / 4 + 8 * ((i % 4) / 2); }
__device__ __forceinline__ int rk_mma_c_col(int l, int i) {
    return 8 * (i / 4) + 2 * (l % 4) + (i % 2);
}
#elif RK_MMA == 2
#define RK_MMA_WAVE 64
#define RK_MMA_CHUNK 4
#define RK_MMA_NCHUNK 1
#define RK_MMA_ACC 4
#define RK_MMA_SLOTS 4
#define RK_MMA_ROW_LANES 16
// A[i][k]: lane i + 16 (k / 4), item k % 4.  B[k][j]: lane j + 16 (k / 4), item k % 4.
// D[i][j]: lane j + 16 (i / 4), item i % 4.
__device__ __forceinline__ int rk_mma_a_row(int l, int) { return l % 16; }
__device__ __forceinline__ int rk_mma_a_k(int l, int) { return 4 * (l / 16); }
__device__ __forceinline__ int rk_mma_b_col(int l, int) { return l % 16; }
__device__ __forceinline__ int rk_mma_b_k(int l, int) { return 4 * (l / 16); }
__device__ __forceinline__ constexpr int rk_mma_c_slot(int i) { return i; }
__device__ __forceinline__ int rk_mma_c_row(int l, int i) { return 4 * (l / 16) + i; }
__device__ __forceinline__ int rk_mma_c_col(int l, int) { return l % 16; }
#elif RK_MMA == 3
#define RK_MMA_WAVE 32
#define RK_MMA_CHUNK 16
#define RK_MMA_NCHUNK 1
#define RK_MMA_ACC 8
#define RK_MMA_SLOTS 8
#define RK_MMA_ROW_LANES 16
// A: lanes l and l + 16 both hold row l % 16, k 0..15. B: lanes hold column l % 16, k 0..15.
// D (f32): element i of lane l is row 2i + l / 16, column l % 16.
__device__ __forceinline__ int rk_mma_a_row(int l, int) { return l % 16; }
__device__ __forceinline__ int rk_mma_a_k(int, int) { return 0; }
__device__ __forceinline__ int rk_mma_b_col(int l, int) { return l % 16; }
__device__ __forceinline__ int rk_mma_b_k(int, int) { return 0; }
__device__ __forceinline__ constexpr int rk_mma_c_slot(int i) { return i; }
__device__ __forceinline__ int rk_mma_c_row(int l, int i) { return 2 * i + l / 16; }
__device__ __forceinline__ int rk_mma_c_col(int l, int) { return l % 16; }
#elif RK_MMA == 4
#define RK_MMA_WAVE 32
#define RK_MMA_CHUNK 8
#define RK_MMA_NCHUNK 1
#define RK_MMA_ACC 8
#define RK_MMA_SLOTS 8
#define RK_MMA_ROW_LANES 16
// A: lane l holds row l % 16, k 8 (l / 16) .. +7. B: column l % 16, k 8 (l / 16) .. +7.
// D (f32): element i of lane l is row 8 (l / 16) + i, column l % 16.
__device__ __forceinline__ int rk_mma_a_row(int l, int) { return l % 16; }
__device__ __forceinline__ int rk_mma_a_k(int l, int) { return 8 * (l / 16); }
__device__ __forceinline__ int rk_mma_b_col(int l, int) { return l % 16; }
__device__ __forceinline__ int rk_mma_b_k(int l, int) { return 8 * (l / 16); }
__device__ __forceinline__ constexpr int rk_mma_c_slot(int i) { return i; }
__device__ __forceinline__ int rk_mma_c_row(int l, int i) { return 8 * (l / 16) + i; }
__device__ __forceinline__ int rk_mma_c_col(int l, int) { return l % 16; }
#endif

#if RK_MMA != 0
#define RK_MMA_FRAG (RK_MMA_CHUNK * RK_MMA_NCHUNK)

// One wave's operand fragment (A or B) of element type T (f16 or bf16): 16-bit patterns packed
// two to a 32-bit word (element 2w in the low half of word w), as the instructions take them.
template <typename T>
struct rk_mma_frag {
    u32 w[RK_MMA_FRAG / 2];
};
// One wave's f32 accumulator of a 16 x 16 tile.
struct rk_mma_acc {
    float v[RK_MMA_ACC];
};

__device__ __forceinline__ void rk_mma_zero(rk_mma_acc& c) {
#pragma unroll
    for (int i = 0; i < RK_MMA_ACC; ++i) c.v[i] = 0.0f;
}

// RK_MMA_CHUNK consecutive 16-bit elements from `src` (aligned to the chunk's size, at most 16
// bytes) into RK_MMA_CHUNK / 2 words.
__device__ __forceinline__ void rk_mma_copy_chunk(u32* dst, const void* src) {
#if RK_MMA_CHUNK == 2
    dst[0] = *(const u32*)src;
#elif RK_MMA_CHUNK == 4
    const uint2 x = *(const uint2*)src;
    dst[0] = x.x;
    dst[1] = x.y;
#else
#pragma unroll
    for (int h = 0; h < RK_MMA_CHUNK / 8; ++h) {
        const uint4 x = ((const uint4*)src)[h];
        dst[4 * h] = x.x;
        dst[4 * h + 1] = x.y;
        dst[4 * h + 2] = x.z;
        dst[4 * h + 3] = x.w;
    }
#endif
}

// Zero words for a chunk past the end of an operand.
__device__ __forceinline__ void rk_mma_zero_chunk(u32* dst) {
#pragma unroll
    for (int e = 0; e < RK_MMA_CHUNK / 2; ++e) dst[e] = 0u;
}

// A fragment of the 16 x 16 tile at `p`, element (m, k) at p[m * ld + k] (row-major along k;
// rows aligned to the chunk size).
template <typename T>
__device__ __forceinline__ rk_mma_frag<T> rk_mma_load_a(const T* p, i64 ld, int lane) {
    rk_mma_frag<T> f;
#pragma unroll
    for (int c = 0; c < RK_MMA_NCHUNK; ++c)
        rk_mma_copy_chunk(&f.w[c * RK_MMA_CHUNK / 2],
                          p + (i64)rk_mma_a_row(lane, c) * ld + rk_mma_a_k(lane, c));
    return f;
}

// B fragment of the 16 x 16 tile whose element (k, n) is at p[n * ld + k] (B transposed in
// memory, row-major along k: the keys of Q K^T, or V stored transposed).
template <typename T>
__device__ __forceinline__ rk_mma_frag<T> rk_mma_load_bt(const T* p, i64 ld, int lane) {
    rk_mma_frag<T> f;
#pragma unroll
    for (int c = 0; c < RK_MMA_NCHUNK; ++c)
        rk_mma_copy_chunk(&f.w[c * RK_MMA_CHUNK / 2],
                          p + (i64)rk_mma_b_col(lane, c) * ld + rk_mma_b_k(lane, c));
    return f;
}

template <typename T>
struct rk_mma_is_bf16 {
    static constexpr bool value = false;
};
template <>
struct rk_mma_is_bf16<bf16> {
    static constexpr bool value = true;
};

// c += a * b.
template <typename T>
__device__ __forceinline__ void rk_mma(rk_mma_acc& c, const rk_mma_frag<T>& a,
                                       const rk_mma_frag<T>& b) {
#if RK_MMA == 1
    const u32* ar = a.w;
    const u32* br = b.w;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float* d = &c.v[4 * h];
        if (rk_mma_is_bf16<T>::value) {
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[2 * h]),
                  "r"(br[2 * h + 1]));
        } else {
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[2 * h]),
                  "r"(br[2 * h + 1]));
        }
    }
#elif RK_MMA == 2
    typedef short v4s __attribute__((ext_vector_type(4)));
    typedef _Float16 v4h __attribute__((ext_vector_type(4)));
    typedef float v4f __attribute__((ext_vector_type(4)));
    v4f acc;
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i] = c.v[i];
    if constexpr (rk_mma_is_bf16<T>::value) {
        acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(v4s, a),
                                                         __builtin_bit_cast(v4s, b), acc, 0, 0, 0);
    } else {
        acc = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(v4h, a),
                                                     __builtin_bit_cast(v4h, b), acc, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) c.v[i] = acc[i];
#else
    typedef short vs __attribute__((ext_vector_type(RK_MMA_FRAG)));
    typedef _Float16 vh __attribute__((ext_vector_type(RK_MMA_FRAG)));
    typedef float v8f __attribute__((ext_vector_type(8)));
    v8f acc;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = c.v[i];
    if constexpr (rk_mma_is_bf16<T>::value) {
        const vs av = __builtin_bit_cast(vs, a), bv = __builtin_bit_cast(vs, b);
#if RK_MMA == 3
        acc = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(av, bv, acc);
#else
        acc = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(av, bv, acc);
#endif
    } else {
        const vh av = __builtin_bit_cast(vh, a), bv = __builtin_bit_cast(vh, b);
#if RK_MMA == 3
        acc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(av, bv, acc);
#else
        acc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(av, bv, acc);
#endif
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) c.v[i] = acc[i];
#endif
}

// Max and sum over the lanes that hold the same accumulator row.
__device__ __forceinline__ float rk_mma_row_max(float x) {
#pragma unroll
    for (int off = RK_MMA_ROW_LANES / 2; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor(x, off));
    return x;
}
__device__ __forceinline__ float rk_mma_row_sum(float x) {
#pragma unroll
    for (int off = RK_MMA_ROW_LANES / 2; off > 0; off >>= 1) x += __shfl_xor(x, off);
    return x;
}
#endif  // RK_MMA != 0

#define AT_THREADS 256
// The error code recorded in the shared indexing flag (IndexOp::AttentionSeqlens).
#define AT_ERR_VARLEN 8u
#define AT_LOG2E 1.4426950408889634f
#define AT_NEG_INF __int_as_float(0xff800000)

// Scalar parameters, one struct by value (layout mirrored by `AttnParams` in attention.rs:
// sixteen i64 strides, eleven i64 sizes, two f32).
struct AttnParams {
    i64 q_sb, q_ss, q_sh;
    i64 k_sb, k_ss, k_sh;
    i64 v_sb, v_ss, v_sh;
    i64 o_sb, o_ss, o_sh;
    i64 m_sb, m_sh, m_sq, m_sk;
    i64 batch, sq, sk, hq, hkv;
    i64 total_q, total_k;
    i64 window_left, window_right;
    i64 splits_rows;  // decode: rows of the partial buffers (batch * hq * sq)
    i64 reserved;
    float scale, softcap;
};

__device__ __forceinline__ void at_report(u32* err, u32 code, u64 idx, u64 size) {
    if (*(volatile u32*)err != 0u) return;
    if (atomicCAS(err, 0u, code) == 0u) {
        err[1] = (u32)idx;
        err[2] = (u32)(idx >> 32);
        err[3] = (u32)size;
        err[4] = (u32)(size >> 32);
    }
}

// The query and key ranges of batch `b`: fixed lengths, or read from the cumulative offsets
// (varlen). Bad offsets (decreasing, or past the tensors) are recorded and the batch skipped.
__device__ __forceinline__ bool at_bounds(const AttnParams& p, const u32* cu_q, const u32* cu_k,
                                          u32* err, u32 b, i64* q0, i64* sq, i64* k0, i64* sk) {
    if (cu_q == nullptr) {
        *q0 = 0; *sq = p.sq; *k0 = 0; *sk = p.sk;
        return true;
    }
    const u32 qa = cu_q[b], qe = cu_q[b + 1], ka = cu_k[b], ke = cu_k[b + 1];
    if (qe < qa || (i64)qe > p.total_q) {
        if (threadIdx.x == 0) at_report(err, AT_ERR_VARLEN, qe < qa ? qa : qe, (u64)p.total_q);
        return false;
    }
    if (ke < ka || (i64)ke > p.total_k) {
        if (threadIdx.x == 0) at_report(err, AT_ERR_VARLEN, ke < ka ? ka : ke, (u64)p.total_k);
        return false;
    }
    *q0 = qa; *sq = (i64)(qe - qa); *k0 = ka; *sk = (i64)(ke - ka);
    return true;
}

// First key row `i` sees, and one past its last (may be empty), within [0, sk).
__device__ __forceinline__ i64 at_key_lo(const AttnParams& p, i64 i, i64 shift) {
    if (p.window_left < 0) return 0;
    const i64 lo = i + shift - p.window_left;
    return lo < 0 ? 0 : lo;
}
__device__ __forceinline__ i64 at_key_hi(const AttnParams& p, i64 i, i64 shift, i64 sk) {
    if (p.window_right < 0) return sk;
    const i64 hi = i + shift + p.window_right + 1;
    return hi > sk ? sk : (hi < 0 ? 0 : hi);
}

// A raw dot product to a base-2 logit: scale, optional tanh softcap, additive mask.
__device__ __forceinline__ float at_logit(const AttnParams& p, float dot, float mask) {
    float s = dot * p.scale;
    if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
    return (s + mask) * AT_LOG2E;
}

// 16 bytes of T to floats.
// A raw 16-byte vector: the type one load moves, and its zero.
struct at_raw16 {
    typedef uint4 t;
    static __device__ __forceinline__ t zero() { return make_uint4(0u, 0u, 0u, 0u); }
};

// V elements of T held in a raw vector, to floats.
template <typename T, int V, typename R>
__device__ __forceinline__ void at_unpack(const R& u, float* dst) {
    const T* t = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int e = 0; e < V; ++e) dst[e] = rk_to_compute(t[e]);
}

// V contiguous elements of T (V * sizeof(T) = 16 bytes, aligned) to floats.
template <typename T, int V>
__device__ __forceinline__ void at_load_vec(const T* src, float* dst) {
    at_unpack<T, V>(*(const uint4*)src, dst);
}

// ---------------------------------------------------------------------------------------------
// Prefill (portable path): one block per (query tile, q head, batch); the block strides over
// query tiles when the grid is shorter than the sequence (varlen). 256 threads as a 16 x 16 grid:
// thread (ty, tx) owns rows ty*RM .. of the tile, score columns tx + 16c and output columns
// tx + 16d; row statistics are reduced across the 16 lanes of a row group with xor shuffles.
// ---------------------------------------------------------------------------------------------

template <typename T, int D, int BM, int BN>
__device__ __forceinline__ void at_prefill(const AttnParams& p, const T* __restrict__ q,
                                           const T* __restrict__ k, const T* __restrict__ v,
                                           const T* __restrict__ mask, const u32* cu_q,
                                           const u32* cu_k, T* __restrict__ o, u32* err) {
    constexpr int VEC = 16 / (int)sizeof(T);
    constexpr int DP = D + VEC;  // padded shared row: 16-byte aligned, staggers banks
    constexpr int RM = BM / 16, CN = BN / 16, DN = D / 16;
    __shared__ __attribute__((aligned(16))) T qs[BM * DP];
    __shared__ __attribute__((aligned(16))) T kvs[BN * DP];
    __shared__ float ps[BM * (BN + 1)];

    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const u32 h = blockIdx.y, b = blockIdx.z;
    const u32 hk = h / (u32)(p.hq / p.hkv);
    i64 q0, sq, k0, sk;
    if (!at_bounds(p, cu_q, cu_k, err, b, &q0, &sq, &k0, &sk)) return;
    const i64 shift = sk - sq;
    const T* qb = q + (i64)b * p.q_sb + (i64)h * p.q_sh + q0 * p.q_ss;
    const T* kb = k + (i64)b * p.k_sb + (i64)hk * p.k_sh + k0 * p.k_ss;
    const T* vb = v + (i64)b * p.v_sb + (i64)hk * p.v_sh + k0 * p.v_ss;
    T* ob = o + (i64)b * p.o_sb + (i64)h * p.o_sh + q0 * p.o_ss;
    const T* mb = mask == nullptr ? nullptr : mask + (i64)b * p.m_sb + (i64)h * p.m_sh;

    for (i64 qt = blockIdx.x; qt * BM < sq; qt += gridDim.x) {
        const i64 i0 = qt * BM;
        const i64 i_last = (i0 + BM < sq ? i0 + BM : sq) - 1;
        const i64 k_begin = at_key_lo(p, i0, shift);
        const i64 k_end = at_key_hi(p, i_last, shift, sk);

        __syncthreads();  // the previous tile's readers are done with qs
        for (int e = tid; e < BM * (D / VEC); e += AT_THREADS) {
            const int r = e / (D / VEC), c = (e % (D / VEC)) * VEC;
            uint4 val = make_uint4(0u, 0u, 0u, 0u);
            if (i0 + r < sq) val = *(const uint4*)(qb + (i0 + r) * p.q_ss + c);
            *(uint4*)(qs + r * DP + c) = val;
        }

        float m[RM], l[RM], acc[RM][DN];
#pragma unroll
        for (int r = 0; r < RM; ++r) {
            m[r] = AT_NEG_INF;
            l[r] = 0.0f;
#pragma unroll
            for (int d = 0; d < DN; ++d) acc[r][d] = 0.0f;
        }

        for (i64 j0 = (k_begin / BN) * BN; j0 < k_end; j0 += BN) {
            __syncthreads();  // qs written; the previous V tile's readers are done
            for (int e = tid; e < BN * (D / VEC); e += AT_THREADS) {
                const int r = e / (D / VEC), c = (e % (D / VEC)) * VEC;
                uint4 val = make_uint4(0u, 0u, 0u, 0u);
                if (j0 + r < sk) val = *(const uint4*)(kb + (j0 + r) * p.k_ss + c);
                *(uint4*)(kvs + r * DP + c) = val;
            }
            __syncthreads();

            float s[RM][CN];
#pragma unroll
            for (int r = 0; r < RM; ++r)
#pragma unroll
                for (int c = 0; c < CN; ++c) s[r][c] = 0.0f;
#pragma unroll 4
            for (int d = 0; d < D; ++d) {
                float qv[RM], kv[CN];
#pragma unroll
                for (int r = 0; r < RM; ++r) qv[r] = rk_to_compute(qs[(ty * RM + r) * DP + d]);
#pragma unroll
                for (int c = 0; c < CN; ++c) kv[c] = rk_to_compute(kvs[(tx + 16 * c) * DP + d]);
#pragma unroll
                for (int r = 0; r < RM; ++r)
#pragma unroll
                    for (int c = 0; c < CN; ++c) s[r][c] += qv[r] * kv[c];
            }

#pragma unroll
            for (int r = 0; r < RM; ++r) {
                const i64 i = i0 + ty * RM + r;
                const i64 lo = at_key_lo(p, i, shift), hi = at_key_hi(p, i, shift, sk);
                float mx = AT_NEG_INF;
#pragma unroll
                for (int c = 0; c < CN; ++c) {
                    const i64 j = j0 + tx + 16 * c;
                    const bool seen = i < sq && j >= lo && j < hi;
                    float mv = 0.0f;
                    if (seen && mb != nullptr) mv = rk_to_compute(mb[i * p.m_sq + j * p.m_sk]);
                    s[r][c] = seen ? at_logit(p, s[r][c], mv) : AT_NEG_INF;
                    mx = fmaxf(mx, s[r][c]);
                }
#pragma unroll
                for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor(mx, off));
                const float m_new = fmaxf(m[r], mx);
                const float base = m_new == AT_NEG_INF ? 0.0f : m_new;
                const float alpha = exp2f(m[r] - base);
                float sum = 0.0f;
#pragma unroll
                for (int c = 0; c < CN; ++c) {
                    const float pc = exp2f(s[r][c] - base);
                    sum += pc;
                    ps[(ty * RM + r) * (BN + 1) + tx + 16 * c] = pc;
                }
#pragma unroll
                for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor(sum, off);
                l[r] = l[r] * alpha + sum;
                m[r] = m_new;
#pragma unroll
                for (int d = 0; d < DN; ++d) acc[r][d] *= alpha;
            }

            __syncthreads();  // K reads done, P written
            for (int e = tid; e < BN * (D / VEC); e += AT_THREADS) {
                const int r = e / (D / VEC), c = (e % (D / VEC)) * VEC;
                uint4 val = make_uint4(0u, 0u, 0u, 0u);
                if (j0 + r < sk) val = *(const uint4*)(vb + (j0 + r) * p.v_ss + c);
                *(uint4*)(kvs + r * DP + c) = val;
            }
            __syncthreads();
#pragma unroll 2
            for (int j = 0; j < BN; ++j) {
                float pv[RM];
#pragma unroll
                for (int r = 0; r < RM; ++r) pv[r] = ps[(ty * RM + r) * (BN + 1) + j];
#pragma unroll
                for (int d = 0; d < DN; ++d) {
                    const float vv = rk_to_compute(kvs[j * DP + tx + 16 * d]);
#pragma unroll
                    for (int r = 0; r < RM; ++r) acc[r][d] += pv[r] * vv;
                }
            }
        }

#pragma unroll
        for (int r = 0; r < RM; ++r) {
            const i64 i = i0 + ty * RM + r;
            if (i >= sq) continue;
            const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
#pragma unroll
            for (int d = 0; d < DN; ++d)
                ob[i * p.o_ss + tx + 16 * d] = rk_from_compute<T>(acc[r][d] * inv);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Prefill (matrix-instruction path, RK_MMA != 0; f16 and bf16): one block of 4 waves per (query
// tile of 64 rows, q head, batch), each wave owning 16 query rows. Per key tile of BN keys: K is
// staged row-major and V transposed in shared memory; S = Q K^T accumulates in the matrix tiles
// (Q's fragments stay in registers), the online softmax runs on the accumulator elements (rows
// reduced across the lanes that hold them), P goes through a per-wave shared tile in T and
// O += P V accumulates in the matrix tiles. Masking, softcap and fully masked rows as the portable
// path; exponentials base 2.
// ---------------------------------------------------------------------------------------------

#if RK_MMA != 0
#define AT_MMA_WAVES 4
#define AT_MMA_BM (16 * AT_MMA_WAVES)
// RDNA's wave32 tiles hold 8 rows per lane and replicate A across the two half-waves: with Q's
// fragments in registers the d128 kernels spill, so there Q stays in shared memory (64 KiB of
// LDS per workgroup leaves room for it).
// (Both overridable, so that tune_attention can run RDNA's shape of the kernel on NVIDIA.)
#ifndef AT_MMA_Q_SHARED
#define AT_MMA_Q_SHARED (RK_MMA >= 3)
#endif
// Keys per tile: 64, or 32 on RDNA (fewer logits per lane; its tiles hold 8 rows per lane).
#ifndef AT_MMA_BN
#define AT_MMA_BN (RK_MMA >= 3 ? 32 : 64)
#endif
// The Q K^T loop over head-dim steps: one step at a time on RDNA (Q's fragment read from shared
// memory each step; unrolled, the compiler hoisted every step's loads and the d64-d128 kernels
// spilled 40-213 VGPRs on gfx1100), unrolled where Q's fragments are registers (CDNA), whose
// index must then be a constant.
#if AT_MMA_Q_SHARED
#define AT_MMA_K_UNROLL _Pragma("unroll 1")
#else
#define AT_MMA_K_UNROLL _Pragma("unroll")
#endif

template <typename T, int D, int BN>
__device__ __forceinline__ void at_prefill_mma(const AttnParams& p, const T* __restrict__ q,
                                               const T* __restrict__ k, const T* __restrict__ v,
                                               const T* __restrict__ mask, const u32* cu_q,
                                               const u32* cu_k, T* __restrict__ o, u32* err) {
    constexpr int VEC = 16 / (int)sizeof(T);
    constexpr int KP = D + VEC;   // K row pitch (16-byte aligned, staggers banks)
    constexpr int VP = BN + VEC;  // V^T and P row pitch
    constexpr int DT = D / 16, NT = BN / 16;
    constexpr int NTHREADS = AT_MMA_WAVES * RK_MMA_WAVE;
    __shared__ __attribute__((aligned(16))) T ks[BN * KP];
    __shared__ __attribute__((aligned(16))) T vt[D * VP];
    __shared__ __attribute__((aligned(16))) T ps[AT_MMA_WAVES * 16 * VP];
#if AT_MMA_Q_SHARED
    __shared__ __attribute__((aligned(16))) T qsh[AT_MMA_BM * KP];
#endif

    const int tid = threadIdx.x, lane = tid % RK_MMA_WAVE, w = tid / RK_MMA_WAVE;
    const u32 h = blockIdx.y, b = blockIdx.z;
    const u32 hk = h / (u32)(p.hq / p.hkv);
    i64 q0, sq, k0, sk;
    if (!at_bounds(p, cu_q, cu_k, err, b, &q0, &sq, &k0, &sk)) return;
    const i64 shift = sk - sq;
    const T* qb = q + (i64)b * p.q_sb + (i64)h * p.q_sh + q0 * p.q_ss;
    const T* kb = k + (i64)b * p.k_sb + (i64)hk * p.k_sh + k0 * p.k_ss;
    const T* vb = v + (i64)b * p.v_sb + (i64)hk * p.v_sh + k0 * p.v_ss;
    T* ob = o + (i64)b * p.o_sb + (i64)h * p.o_sh + q0 * p.o_ss;
    const T* mb = mask == nullptr ? nullptr : mask + (i64)b * p.m_sb + (i64)h * p.m_sh;
    T* pw = ps + w * 16 * VP;

    // Heavier (later, under a causal mask) query tiles first.
    for (i64 qt = (i64)gridDim.x - 1 - blockIdx.x; qt * AT_MMA_BM < sq; qt += gridDim.x) {
        const i64 i0 = qt * AT_MMA_BM;
        const i64 i_last = (i0 + AT_MMA_BM < sq ? i0 + AT_MMA_BM : sq) - 1;
        const i64 k_begin = at_key_lo(p, i0, shift);
        const i64 k_end = at_key_hi(p, i_last, shift, sk);
        const i64 wr0 = i0 + 16 * w;  // the wave's first row

#if AT_MMA_Q_SHARED
        __syncthreads();  // the previous tile's readers are done with qsh
        for (int e = tid; e < AT_MMA_BM * (D / VEC); e += NTHREADS) {
            const int r = e / (D / VEC), c = (e % (D / VEC)) * VEC;
            uint4 val = make_uint4(0u, 0u, 0u, 0u);
            if (i0 + r < sq) val = *(const uint4*)(qb + (i0 + r) * p.q_ss + c);
            *(uint4*)(qsh + r * KP + c) = val;
        }
        const T* qw = qsh + 16 * w * KP;
#else
        // Q fragments straight from global memory (rows past the sequence read as zero).
        rk_mma_frag<T> qf[DT];
#pragma unroll
        for (int kk = 0; kk < DT; ++kk) {
#pragma unroll
            for (int c = 0; c < RK_MMA_NCHUNK; ++c) {
                const i64 r = wr0 + rk_mma_a_row(lane, c);
                u32* dst = &qf[kk].w[c * RK_MMA_CHUNK / 2];
                if (r < sq)
                    rk_mma_copy_chunk(dst, qb + r * p.q_ss + kk * 16 + rk_mma_a_k(lane, c));
                else
                    rk_mma_zero_chunk(dst);
            }
        }
#endif

        rk_mma_acc acc[DT];
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) rk_mma_zero(acc[dt]);
        float m[RK_MMA_SLOTS], l[RK_MMA_SLOTS];
#pragma unroll
        for (int s = 0; s < RK_MMA_SLOTS; ++s) {
            m[s] = AT_NEG_INF;
            l[s] = 0.0f;
        }

        for (i64 j0 = (k_begin / BN) * BN; j0 < k_end; j0 += BN) {
            __syncthreads();  // the previous tile's readers are done with ks, vt and ps
            for (int e = tid; e < BN * (D / VEC); e += NTHREADS) {
                const int r = e / (D / VEC), c = (e % (D / VEC)) * VEC;
                uint4 val = make_uint4(0u, 0u, 0u, 0u);
                if (j0 + r < sk) val = *(const uint4*)(kb + (j0 + r) * p.k_ss + c);
                *(uint4*)(ks + r * KP + c) = val;
            }
            // V transposed: consecutive threads take consecutive keys (conflict-free stores).
            for (int e = tid; e < BN * (D / VEC); e += NTHREADS) {
                const int r = e % BN, c = (e / BN) * VEC;
                uint4 val = make_uint4(0u, 0u, 0u, 0u);
                if (j0 + r < sk) val = *(const uint4*)(vb + (j0 + r) * p.v_ss + c);
                const T* t = reinterpret_cast<const T*>(&val);
#pragma unroll
                for (int x = 0; x < VEC; ++x) vt[(c + x) * VP + r] = t[x];
            }
            __syncthreads();

            rk_mma_acc st[NT];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) rk_mma_zero(st[nt]);
            AT_MMA_K_UNROLL
            for (int kk = 0; kk < DT; ++kk) {
#if AT_MMA_Q_SHARED
                const rk_mma_frag<T> qa = rk_mma_load_a(qw + kk * 16, KP, lane);
#else
                const rk_mma_frag<T>& qa = qf[kk];
#endif
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
                    rk_mma(st[nt], qa, rk_mma_load_bt(ks + nt * 16 * KP + kk * 16, KP, lane));
            }

            // Online softmax over the tile's logits. The keys row r sees, relative to j0 and
            // clamped to the tile: [lo, hi) (empty past the sequence).
            float mx[RK_MMA_SLOTS];
            int lo[RK_MMA_SLOTS], hi[RK_MMA_SLOTS];
#pragma unroll
            for (int i = 0; i < RK_MMA_ACC; ++i) {
                const int s = rk_mma_c_slot(i);
                const i64 r = wr0 + rk_mma_c_row(lane, i);
                i64 a = at_key_lo(p, r, shift) - j0, e = at_key_hi(p, r, shift, sk) - j0;
                a = a < 0 ? 0 : (a > BN ? BN : a);
                e = r >= sq || e < 0 ? 0 : (e > BN ? BN : e);
                lo[s] = (int)a;
                hi[s] = (int)e;
                mx[s] = AT_NEG_INF;
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < RK_MMA_ACC; ++i) {
                    const int s = rk_mma_c_slot(i);
                    const int jr = nt * 16 + rk_mma_c_col(lane, i);
                    const bool seen = jr >= lo[s] && jr < hi[s];
                    float mv = 0.0f;
                    if (seen && mb != nullptr) {
                        const i64 r = wr0 + rk_mma_c_row(lane, i);
                        mv = rk_to_compute(mb[r * p.m_sq + (j0 + jr) * p.m_sk]);
                    }
                    const float x = seen ? at_logit(p, st[nt].v[i], mv) : AT_NEG_INF;
                    st[nt].v[i] = x;
                    mx[s] = fmaxf(mx[s], x);
                }
            float alpha[RK_MMA_SLOTS], base[RK_MMA_SLOTS];
#pragma unroll
            for (int s = 0; s < RK_MMA_SLOTS; ++s) {
                const float m_new = fmaxf(m[s], rk_mma_row_max(mx[s]));
                base[s] = m_new == AT_NEG_INF ? 0.0f : m_new;
                alpha[s] = exp2f(m[s] - base[s]);
                m[s] = m_new;
                l[s] *= alpha[s];
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < RK_MMA_ACC; ++i) {
                    const int s = rk_mma_c_slot(i);
                    const float pv = exp2f(st[nt].v[i] - base[s]);
                    l[s] += pv;
                    pw[rk_mma_c_row(lane, i) * VP + nt * 16 + rk_mma_c_col(lane, i)] =
                        rk_from_compute<T>(pv);
                }
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
#pragma unroll
                for (int i = 0; i < RK_MMA_ACC; ++i) acc[dt].v[i] *= alpha[rk_mma_c_slot(i)];
            __syncthreads();  // P written (each wave reads its own tile; a block barrier is portable)

#pragma unroll
            for (int kk = 0; kk < NT; ++kk) {
                const rk_mma_frag<T> pa = rk_mma_load_a(pw + kk * 16, VP, lane);
#pragma unroll
                for (int dt = 0; dt < DT; ++dt)
                    rk_mma(acc[dt], pa, rk_mma_load_bt(vt + dt * 16 * VP + kk * 16, VP, lane));
            }
        }

#pragma unroll
        for (int s = 0; s < RK_MMA_SLOTS; ++s) l[s] = rk_mma_row_sum(l[s]);
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int i = 0; i < RK_MMA_ACC; ++i) {
                const int s = rk_mma_c_slot(i);
                const i64 r = wr0 + rk_mma_c_row(lane, i);
                if (r >= sq) continue;
                const float inv = l[s] > 0.0f ? 1.0f / l[s] : 0.0f;
                ob[r * p.o_ss + dt * 16 + rk_mma_c_col(lane, i)] =
                    rk_from_compute<T>(acc[dt].v[i] * inv);
            }
    }
}

// ---------------------------------------------------------------------------------------------
// Prefill on NVIDIA sm_80+ (RK_MMA == 1): the same problem and parameters as at_prefill_mma, laid
// out the way mma.sync wants it. One block of AT_NV_WAVES warps per (16 x AT_NV_RT x AT_NV_WAVES
// query rows, q head, batch), each warp owning AT_NV_RT tiles of 16 rows (every K and V fragment
// it loads feeds AT_NV_RT products); with more than one, Q's tile is in shared memory too.
//  * K and V tiles (AT_NV_BN keys) are copied row-major into shared memory with asynchronous
//    16-byte copies (cp.async, rows past the sequence zero-filled): V's copy is in flight while
//    S = Q K^T and the softmax run, the next K's while O += P V runs.
//  * Operand fragments come from shared memory with ldmatrix (K as stored; V transposed by
//    ldmatrix.trans, so V is never transposed in memory). Rows are padded by 16 bytes, which
//    puts the 8 rows of each 8 x 8 matrix on distinct banks.
//  * P never leaves registers: the accumulator layout of two adjacent n8 tiles of S is the A
//    operand layout of the next product (PTX ISA, mma.m16n8k16 fragments), so the probabilities
//    are rounded to T and packed in place.
//  * Key tiles that need no masking for the block (no mask, no softcap, a positive scale, every
//    key visible to every row) run a body without the per-element checks; in the masked body a
//    warp skips the tiles its rows see nothing of.
// ---------------------------------------------------------------------------------------------
#if RK_MMA == 1
#ifndef AT_NV_WAVES
#define AT_NV_WAVES 4
#endif
#ifndef AT_NV_BN
#define AT_NV_BN 64
#endif
#ifndef AT_NV_MIN_BLOCKS
#define AT_NV_MIN_BLOCKS 1
#endif
#ifndef AT_NV_RT
#define AT_NV_RT 2
#endif

// A compile-time flag as a type (for generic lambdas).
template <bool B>
struct at_nv_bool {
    static constexpr bool value = B;
};

// The shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ u32 at_nv_smem(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// 16 bytes from global `src` to shared `dst`, asynchronously; `bytes` 0 writes zeros and reads
// nothing.
__device__ __forceinline__ void at_nv_cp16(u32 dst, const void* src, u32 bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void at_nv_cp_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void at_nv_cp_wait_all() {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
// Until at most N of this thread's copy groups are still in flight.
template <int N>
__device__ __forceinline__ void at_nv_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8 x 8 matrices of 16-bit elements; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void at_nv_ldsm4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void at_nv_ldsm4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}

// c (16 x 8, f32) += a (16 x 16) * b (16 x 8).
template <typename T>
__device__ __forceinline__ void at_nv_mma(float* c, const u32* a, u32 b0, u32 b1) {
    if (rk_mma_is_bf16<T>::value) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

__device__ __forceinline__ float at_nv_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Two floats rounded to T (to nearest even), the first in the low half (cvt's first source
// goes to the high half).
template <typename T>
__device__ __forceinline__ u32 at_nv_pack(float lo, float hi) {
    u32 r;
    if (rk_mma_is_bf16<T>::value)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// L2 hints on the K/V copies: 0 none, 1 evict-first (the rows are read once a step), 2 a
// 256-byte L2 prefetch (a 128-dim row of 2-byte elements), 3 both (the default: 2.8-4.1% faster
// at 16k and 64k keys on an H100, level at 4k; docs/attention.md).
#ifndef AT_DN_CP_HINT
#define AT_DN_CP_HINT 3
#endif

// 16 bytes from global to shared asynchronously, with the L2 hints AT_DN_CP_HINT selects.
template <int HINT>
__device__ __forceinline__ void at_dn_cp16(u32 dst, const void* src, u32 bytes, u64 policy) {
    if constexpr (HINT == 1)
        asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst),
                     "l"(src), "r"(bytes), "l"(policy)
                     : "memory");
    else if constexpr (HINT == 2)
        asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                     "r"(bytes)
                     : "memory");
    else if constexpr (HINT == 3)
        asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;\n" ::"r"(
                         dst),
                     "l"(src), "r"(bytes), "l"(policy)
                     : "memory");
    else
        at_nv_cp16(dst, src, bytes);
}

// Rows [j0, j0 + ROWS) of a head (row stride `ss`, rows at or past `n` zero-filled) into a
// shared tile of pitch P elements, asynchronously (the caller commits the copy group), by
// NTHREADS threads (`tid` this one's index among them) with at_dn_cp16's L2 hints HINT (0: none;
// `policy` is the evict-first policy that hints 1 and 3 take).
template <typename T, int D, int ROWS, int P, int NTHREADS, int HINT = 0>
__device__ __forceinline__ void at_nv_load_rows(u32 tile, const T* src, i64 ss, int j0, int n,
                                                int tid, u64 policy = 0) {
    constexpr int CH = D / 8;  // 16-byte chunks per row
#pragma unroll
    for (int e = tid; e < ROWS * CH; e += NTHREADS) {
        const int r = e / CH, c = (e % CH) * 8;
        const bool in = j0 + r < n;
        at_dn_cp16<HINT>(tile + (u32)(r * P + c) * 2u, src + (in ? (i64)(j0 + r) * ss : 0) + c,
                         in ? 16u : 0u, policy);
    }
}

// Dynamic shared memory of at_prefill_nv, in bytes: the K and V tiles, and the Q tile where
// the warps keep Q in shared memory (RT > 1). Mirrored by `nv_prefill_shared_bytes` in
// attention.rs.
#define AT_NV_SHARED(T, D, WAVES, BN, RT) \
    ((2 * (BN) + ((RT) > 1 ? 16 * (RT) * (WAVES) : 0)) * ((D) + 8) * (int)sizeof(T))

template <typename T, int D, int WAVES, int BN, int RT>
__device__ __forceinline__ void at_prefill_nv(const AttnParams& p, const T* __restrict__ q,
                                              const T* __restrict__ k, const T* __restrict__ v,
                                              const T* __restrict__ mask, const u32* cu_q,
                                              const u32* cu_k, T* __restrict__ o, u32* err) {
    constexpr int WR = 16 * RT;  // rows per warp
    constexpr int BM = WR * WAVES;
    constexpr int P = D + 8;  // row pitch: 16 bytes of padding
    constexpr int DK = D / 16, DN = D / 8, NN = BN / 8, KC = BN / 16;
    constexpr int NTHREADS = 32 * WAVES;
    // With one row tile per warp Q's fragments stay in registers; with more, in shared memory
    // (reloaded per key tile, as the registers hold RT accumulators).
    constexpr bool Q_SHARED = RT > 1;
    extern __shared__ __attribute__((aligned(128))) unsigned char at_nv_dyn[];
    T* ks = reinterpret_cast<T*>(at_nv_dyn);
    T* vs = ks + BN * P;
    T* qs = vs + BN * P;

    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const u32 h = blockIdx.y, b = blockIdx.z;
    const u32 hk = h / (u32)(p.hq / p.hkv);
    i64 q0, sq, k0, sk;
    if (!at_bounds(p, cu_q, cu_k, err, b, &q0, &sq, &k0, &sk)) return;
    // Rows and keys as 32-bit ints (the launcher keeps both below 2^30).
    const int nq = (int)sq, nk = (int)sk, shift = nk - nq;
    // (q, the output and the mask are addressed where they are used, so that their pointers
    // do not stay live across the key loop.)
    const T* kb = k + (i64)b * p.k_sb + (i64)hk * p.k_sh + k0 * p.k_ss;
    const T* vb = v + (i64)b * p.v_sb + (i64)hk * p.v_sh + k0 * p.v_ss;
    const bool plain = mask == nullptr && !(p.softcap > 0.0f);
    const float scale_log2 = p.scale * AT_LOG2E;

    const u32 ks_addr = at_nv_smem(ks), vs_addr = at_nv_smem(vs), qs_addr = at_nv_smem(qs);
    // ldmatrix row addresses (bytes from a 16-row x 16-column block's corner). K: matrices
    // (keys +0, cols +0), (+0, +8), (+8, +0), (+8, +8) = b0, b1 of two n8 key tiles. V (trans):
    // (keys +0, cols +0), (+8, +0), (+0, +8), (+8, +8) = b0, b1 of two n8 column tiles. Q: the
    // same matrices as V (untransposed) = a0, a1, a2, a3 of one A operand.
    const u32 k_lane = (u32)(((lane & 7) + 8 * (lane >> 4)) * P + 8 * ((lane >> 3) & 1)) * 2u;
    const u32 v_lane = (u32)(((lane & 7) + 8 * ((lane >> 3) & 1)) * P + 8 * (lane >> 4)) * 2u;

    // Heavier (later, under a causal mask) query tiles first.
    for (int qt = (int)gridDim.x - 1 - (int)blockIdx.x; qt * BM < nq; qt += (int)gridDim.x) {
        const int i0 = qt * BM;
        const int i_last = (i0 + BM < nq ? i0 + BM : nq) - 1;
        const int k_begin = (int)at_key_lo(p, i0, shift);
        const int k_end = (int)at_key_hi(p, i_last, shift, nk);
        const int wr0 = i0 + WR * w;  // the warp's first row
        const bool w_rows = wr0 < nq;
        const int w_last = (wr0 + WR - 1 < nq ? wr0 + WR - 1 : nq - 1);
        // The keys the warp's rows see at all.
        const int w_lo = w_rows ? (int)at_key_lo(p, wr0, shift) : 0;
        const int w_hi = w_rows ? (int)at_key_hi(p, w_last, shift, nk) : 0;

        __syncthreads();  // the previous query tile's readers are done with the shared tiles
        const int j_first = (k_begin / BN) * BN;
        // Q's fragments (A operands, one per 16 columns): from global memory into registers, or
        // the block's Q tile into shared memory (in the first K tile's copy group). Rows past
        // the sequence read as zero.
        u32 qf[Q_SHARED ? 1 : DK][4];
        const T* qb = q + (i64)b * p.q_sb + (i64)h * p.q_sh + q0 * p.q_ss;
        if constexpr (Q_SHARED) {
            at_nv_load_rows<T, D, BM, P, NTHREADS>(qs_addr, qb, p.q_ss, i0, nq, tid);
        } else {
            const int r0 = wr0 + g, r1 = wr0 + g + 8;
#pragma unroll
            for (int kk = 0; kk < DK; ++kk) {
                const int c = kk * 16 + 2 * t4;
                qf[kk][0] = r0 < nq ? *(const u32*)(qb + r0 * p.q_ss + c) : 0u;
                qf[kk][1] = r1 < nq ? *(const u32*)(qb + r1 * p.q_ss + c) : 0u;
                qf[kk][2] = r0 < nq ? *(const u32*)(qb + r0 * p.q_ss + c + 8) : 0u;
                qf[kk][3] = r1 < nq ? *(const u32*)(qb + r1 * p.q_ss + c + 8) : 0u;
            }
        }
        if (j_first < k_end)
            at_nv_load_rows<T, D, BN, P, NTHREADS>(ks_addr, kb, p.k_ss, j_first, nk, tid);
        at_nv_cp_commit();

        float acc[RT][DN][4];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt)
#pragma unroll
            for (int dn = 0; dn < DN; ++dn)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[rt][dn][i] = 0.0f;
        float m[RT][2], l[RT][2];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
            m[rt][0] = m[rt][1] = AT_NEG_INF;
            l[rt][0] = l[rt][1] = 0.0f;
        }

        // One key tile. MASKED (a block-uniform choice) checks every logit against the rows'
        // key ranges, the mask and the softcap; otherwise every row of the block sees every key
        // of the tile, the logits are the scaled dot products and the scale is applied in the
        // exponent's multiply-add. Two bodies, so that the common one carries no masking state.
        auto tile = [&](int j0, auto masked_tag) {
            constexpr bool MASKED = decltype(masked_tag)::value;
            at_nv_cp_wait_all();
            __syncthreads();  // K[j0] (and Q) are in; every warp is done with the previous V
            at_nv_load_rows<T, D, BN, P, NTHREADS>(vs_addr, vb, p.v_ss, j0, nk, tid);
            at_nv_cp_commit();

            const bool active = MASKED ? w_rows && j0 < w_hi && j0 + BN > w_lo : w_rows;
            u32 pa[RT][KC][4];
            if (active) {
                float s[RT][NN][4];
#pragma unroll
                for (int rt = 0; rt < RT; ++rt)
#pragma unroll
                    for (int n = 0; n < NN; ++n)
#pragma unroll
                        for (int i = 0; i < 4; ++i) s[rt][n][i] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < DK; ++kk) {
                    u32 qa[RT][4];
#pragma unroll
                    for (int rt = 0; rt < RT; ++rt) {
                        if constexpr (Q_SHARED) {
                            at_nv_ldsm4(qs_addr + (u32)((WR * w + 16 * rt) * P + kk * 16) * 2u +
                                            v_lane,
                                        qa[rt][0], qa[rt][1], qa[rt][2], qa[rt][3]);
                        } else {
#pragma unroll
                            for (int i = 0; i < 4; ++i) qa[rt][i] = qf[kk][i];
                        }
                    }
#pragma unroll
                    for (int np = 0; np < NN / 2; ++np) {
                        u32 b0, b1, b2, b3;
                        at_nv_ldsm4(ks_addr + (u32)(np * 16 * P + kk * 16) * 2u + k_lane, b0, b1,
                                    b2, b3);
#pragma unroll
                        for (int rt = 0; rt < RT; ++rt) {
                            at_nv_mma<T>(s[rt][2 * np], qa[rt], b0, b1);
                            at_nv_mma<T>(s[rt][2 * np + 1], qa[rt], b2, b3);
                        }
                    }
                }

#pragma unroll
                for (int rt = 0; rt < RT; ++rt) {
                    // Logits (base 2) and the tile's row maxima; slot 0 is row g, slot 1 row
                    // g + 8 of the row tile.
                    float mx[2] = {AT_NEG_INF, AT_NEG_INF};
                    if constexpr (!MASKED) {
                        // Raw maxima (the scale is positive here); the scale is applied in the
                        // exponent's multiply-add below.
#pragma unroll
                        for (int n = 0; n < NN; ++n)
#pragma unroll
                            for (int i = 0; i < 4; ++i) mx[i >> 1] = fmaxf(mx[i >> 1], s[rt][n][i]);
                        mx[0] *= scale_log2;
                        mx[1] *= scale_log2;
                    } else {
#pragma unroll
                        for (int sl = 0; sl < 2; ++sl) {
                            const int r = wr0 + 16 * rt + g + 8 * sl;
                            const T* mr = mask == nullptr
                                              ? nullptr
                                              : mask + (i64)b * p.m_sb + (i64)h * p.m_sh +
                                                    (i64)r * p.m_sq + (i64)j0 * p.m_sk;
                            const int lo = (int)at_key_lo(p, r, shift) - j0;
                            const int hi = r < nq ? (int)at_key_hi(p, r, shift, nk) - j0 : 0;
#pragma unroll
                            for (int n = 0; n < NN; ++n)
#pragma unroll
                                for (int e = 0; e < 2; ++e) {
                                    const int jr = n * 8 + 2 * t4 + e;
                                    const bool seen = jr >= lo && jr < hi;
                                    float mv = 0.0f;
                                    if (seen && mr != nullptr) mv = rk_to_compute(mr[jr * p.m_sk]);
                                    const float x =
                                        seen ? at_logit(p, s[rt][n][2 * sl + e], mv) : AT_NEG_INF;
                                    s[rt][n][2 * sl + e] = x;
                                    mx[sl] = fmaxf(mx[sl], x);
                                }
                        }
                    }
                    float base[2];
#pragma unroll
                    for (int sl = 0; sl < 2; ++sl) {
                        float t = mx[sl];
                        t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, 1));
                        t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, 2));
                        const float m_new = fmaxf(m[rt][sl], t);
                        base[sl] = m_new == AT_NEG_INF ? 0.0f : m_new;
                        const float alpha = at_nv_exp2(m[rt][sl] - base[sl]);
                        m[rt][sl] = m_new;
                        l[rt][sl] *= alpha;
#pragma unroll
                        for (int dn = 0; dn < DN; ++dn) {
                            acc[rt][dn][2 * sl] *= alpha;
                            acc[rt][dn][2 * sl + 1] *= alpha;
                        }
                    }
                    // Probabilities, packed as the A operands of P V: key tiles 2c and 2c + 1
                    // make the 16 keys of operand c. Unmasked tiles hold raw dot products.
                    const float mul = MASKED ? 1.0f : scale_log2;
#pragma unroll
                    for (int n = 0; n < NN; ++n) {
                        const float p0 = at_nv_exp2(fmaf(s[rt][n][0], mul, -base[0]));
                        const float p1 = at_nv_exp2(fmaf(s[rt][n][1], mul, -base[0]));
                        const float p2 = at_nv_exp2(fmaf(s[rt][n][2], mul, -base[1]));
                        const float p3 = at_nv_exp2(fmaf(s[rt][n][3], mul, -base[1]));
                        l[rt][0] += p0 + p1;
                        l[rt][1] += p2 + p3;
                        pa[rt][n >> 1][2 * (n & 1)] = at_nv_pack<T>(p0, p1);
                        pa[rt][n >> 1][2 * (n & 1) + 1] = at_nv_pack<T>(p2, p3);
                    }
                }
            }

            at_nv_cp_wait_all();
            __syncthreads();  // V[j0] is in; every warp is done with K[j0]
            if (j0 + BN < k_end) {
                at_nv_load_rows<T, D, BN, P, NTHREADS>(ks_addr, kb, p.k_ss, j0 + BN, nk, tid);
                at_nv_cp_commit();
            }

            if (active) {
#pragma unroll
                for (int c = 0; c < KC; ++c)
#pragma unroll
                    for (int dp = 0; dp < DN / 2; ++dp) {
                        u32 b0, b1, b2, b3;
                        at_nv_ldsm4_t(vs_addr + (u32)(c * 16 * P + dp * 16) * 2u + v_lane, b0, b1,
                                      b2, b3);
#pragma unroll
                        for (int rt = 0; rt < RT; ++rt) {
                            at_nv_mma<T>(acc[rt][2 * dp], pa[rt][c], b0, b1);
                            at_nv_mma<T>(acc[rt][2 * dp + 1], pa[rt][c], b2, b3);
                        }
                    }
            }
        };
        // Tiles every row of the block sees whole: [full_lo, full_hi).
        const int full_lo = (int)at_key_lo(p, i_last, shift);
        const int full_hi = (int)at_key_hi(p, i0, shift, nk);
        const bool unmasked = plain && scale_log2 > 0.0f;
        for (int j0 = j_first; j0 < k_end; j0 += BN) {
            if (unmasked && full_lo <= j0 && j0 + BN <= full_hi)
                tile(j0, at_nv_bool<false>());
            else
                tile(j0, at_nv_bool<true>());
        }
        at_nv_cp_wait_all();  // a Q copy of a tile without keys

#pragma unroll
        for (int rt = 0; rt < RT; ++rt)
#pragma unroll
            for (int sl = 0; sl < 2; ++sl) {
                float lt = l[rt][sl];
                lt += __shfl_xor_sync(0xffffffffu, lt, 1);
                lt += __shfl_xor_sync(0xffffffffu, lt, 2);
                const int r = wr0 + 16 * rt + g + 8 * sl;
                if (r >= nq) continue;
                T* ob = o + (i64)b * p.o_sb + (i64)h * p.o_sh + (q0 + r) * p.o_ss;
                const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
                T* orow = ob + 2 * t4;
#pragma unroll
                for (int dn = 0; dn < DN; ++dn)
                    *(u32*)(orow + dn * 8) =
                        at_nv_pack<T>(acc[rt][dn][2 * sl] * inv, acc[rt][dn][2 * sl + 1] * inv);
            }
    }
}

// ---------------------------------------------------------------------------------------------
// Decode on NVIDIA sm_80+ (RK_MMA == 1), with mma.sync: the same problem, parameters, grid
// layout (key split, kv head x query slice, batch) and partial-sum format as at_decode, for f16
// and bf16. A block carries up to 16 queries (the q heads of one kv head, times query rows) as
// the 16 rows of one A operand, so Q K^T and P V are matrix products (rows past the slice's
// queries are zero and masked; the products are cheap, the kernel is bound by the K/V bytes).
//  * Each of the AT_DN_WAVES warps walks its own tiles of AT_DN_KEYS keys (tiles w, w + W, ...
//    of the split) with its own online softmax: no block barrier in the key loop.
//  * A warp copies its tiles (K and V) into its own ring of AT_DN_STAGES slots in shared memory
//    with cp.async, AT_DN_STAGES - 1 tiles ahead; fragments come from there with ldmatrix (V
//    transposed by ldmatrix.trans), rows padded by 16 bytes as in at_prefill_nv.
//  * The warps are combined in shared memory at the end: normalised output with one split,
//    otherwise partial sums with their (max, sum), merged by at_merge as at_decode's are.
// ---------------------------------------------------------------------------------------------
#ifndef AT_DN_WAVES
#define AT_DN_WAVES 4
#endif
#ifndef AT_DN_KEYS
#define AT_DN_KEYS 16
#endif
#ifndef AT_DN_STAGES
#define AT_DN_STAGES 2
#endif
// Query slots per block (the rows of one mma A operand).
#define AT_DN_ROWS 16
// Dynamic shared memory of at_decode_nv, in bytes: every warp's ring of K and V tiles (the
// warps' combination reuses it). Mirrored by `nv_decode_shared_bytes` in attention.rs.
#define AT_DN_SHARED(T, D) \
    (AT_DN_WAVES * AT_DN_STAGES * 2 * AT_DN_KEYS * ((D) + 8) * (int)sizeof(T))

template <typename T, int D>
__device__ __forceinline__ void at_decode_nv(const AttnParams& p, const T* __restrict__ q,
                                             const T* __restrict__ k, const T* __restrict__ v,
                                             const T* __restrict__ mask, T* __restrict__ o,
                                             float* __restrict__ part) {
    constexpr int W = AT_DN_WAVES, KT = AT_DN_KEYS, ST = AT_DN_STAGES, NQ = AT_DN_ROWS;
    constexpr int P = D + 8;  // row pitch: 16 bytes of padding
    constexpr int TILE = KT * P;  // elements of one K or V tile
    constexpr int DK = D / 16, DN = D / 8, NN = KT / 8, KC = KT / 16;
    static_assert(KT % 16 == 0 && ST >= 2, "whole 16-key chunks, at least double-buffered");
    // The combination's floats (W x NQ x D partial sums, W x NQ maxima and sums) fit the ring.
    static_assert((W * NQ * D + 2 * W * NQ) * 4 <= AT_DN_SHARED(T, D), "combination space");
    extern __shared__ __attribute__((aligned(128))) unsigned char at_dn_dyn[];

    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int g8 = lane >> 2, t4 = lane & 3;
    // Query rows, heads and slots fit 32 bits (the launcher checks seq_q and the head counts).
    const int g = (int)(p.hq / p.hkv);
    const int slices = ((int)p.sq * g + NQ - 1) / NQ;
    const int hk = (int)blockIdx.y / slices, slice = (int)blockIdx.y % slices;
    const u32 b = blockIdx.z;
    const int flat0 = slice * NQ;
    const int nq = (int)p.sq * g - flat0 < NQ ? (int)p.sq * g - flat0 : NQ;
    const i64 sk = p.sk, shift = p.sk - p.sq;

    // The keys of this split, narrowed to those some query of the slice sees (as at_decode).
    const i64 per = (sk + gridDim.x - 1) / gridDim.x;
    i64 c_begin = (i64)blockIdx.x * per, c_end = c_begin + per < sk ? c_begin + per : sk;
    {
        const i64 lo = at_key_lo(p, flat0 / g, shift);
        const i64 hi = at_key_hi(p, (flat0 + nq - 1) / g, shift, sk);
        c_begin = c_begin > lo ? c_begin : lo;
        c_end = c_end < hi ? c_end : hi;
    }
    const int n = c_end > c_begin ? (int)(c_end - c_begin) : 0;

    // This lane's two query slots (accumulator rows g8 and g8 + 8): row, head, and the keys
    // each sees as offsets from the split's first key (empty for slots past the slice).
    int row_s[2], head_s[2], lo_s[2], hi_s[2];
#pragma unroll
    for (int sl = 0; sl < 2; ++sl) {
        const int r = g8 + 8 * sl;
        const int flat = flat0 + (r < nq ? r : 0);
        row_s[sl] = flat / g;
        head_s[sl] = hk * g + flat % g;
        const i64 lo = at_key_lo(p, row_s[sl], shift) - c_begin;
        const i64 hi = at_key_hi(p, row_s[sl], shift, sk) - c_begin;
        lo_s[sl] = lo < 0 ? 0 : (int)(lo < n ? lo : n);
        hi_s[sl] = r >= nq || hi < 0 ? 0 : (int)(hi < n ? hi : n);
    }
    // Q's fragments (A operands, one per 16 columns), straight from global memory.
    u32 qf[DK][4];
    {
        const T* q0 = q + (i64)b * p.q_sb + (i64)row_s[0] * p.q_ss + (i64)head_s[0] * p.q_sh;
        const T* q1 = q + (i64)b * p.q_sb + (i64)row_s[1] * p.q_ss + (i64)head_s[1] * p.q_sh;
        const bool in0 = g8 < nq, in1 = g8 + 8 < nq;
#pragma unroll
        for (int kk = 0; kk < DK; ++kk) {
            const int c = kk * 16 + 2 * t4;
            qf[kk][0] = in0 ? *(const u32*)(q0 + c) : 0u;
            qf[kk][1] = in1 ? *(const u32*)(q1 + c) : 0u;
            qf[kk][2] = in0 ? *(const u32*)(q0 + c + 8) : 0u;
            qf[kk][3] = in1 ? *(const u32*)(q1 + c + 8) : 0u;
        }
    }

    // The warp's ring: slot s holds K then V of one tile.
    const u32 ring = at_nv_smem(at_dn_dyn) + (u32)(w * ST * 2 * TILE) * (u32)sizeof(T);
    const u32 k_lane = (u32)(((lane & 7) + 8 * (lane >> 4)) * P + 8 * ((lane >> 3) & 1)) * 2u;
    const u32 v_lane = (u32)(((lane & 7) + 8 * ((lane >> 3) & 1)) * P + 8 * (lane >> 4)) * 2u;
    const T* kb = k + (i64)b * p.k_sb + (i64)hk * p.k_sh + c_begin * p.k_ss;
    const T* vb = v + (i64)b * p.v_sb + (i64)hk * p.v_sh + c_begin * p.v_ss;
    const int tiles = (n + KT - 1) / KT;
    const int mine = tiles > w ? (tiles - w + W - 1) / W : 0;  // this warp's tiles
    u64 policy = 0;
    if (AT_DN_CP_HINT & 1) asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    // The warp's i-th tile (split tile w + W i) into slot i % ST; an empty commit past the
    // last keeps the group count even.
    auto issue = [&](int i) {
        if (i < mine) {
            const u32 slot = ring + (u32)((i % ST) * 2 * TILE) * (u32)sizeof(T);
            const int j0 = (w + W * i) * KT;
            at_nv_load_rows<T, D, KT, P, 32, AT_DN_CP_HINT>(slot, kb, p.k_ss, j0, n, lane, policy);
            at_nv_load_rows<T, D, KT, P, 32, AT_DN_CP_HINT>(slot + (u32)TILE * (u32)sizeof(T), vb,
                                                            p.v_ss, j0, n, lane, policy);
        }
        at_nv_cp_commit();
    };

    float acc[DN][4];
#pragma unroll
    for (int dn = 0; dn < DN; ++dn)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[dn][i] = 0.0f;
    float m[2] = {AT_NEG_INF, AT_NEG_INF}, l[2] = {0.0f, 0.0f};

#pragma unroll
    for (int i = 0; i < ST - 1; ++i) issue(i);
    for (int i = 0; i < mine; ++i) {
        at_nv_cp_wait<ST - 2>();  // this lane's copies of tile i have landed
        __syncwarp();             // every lane's have; every lane is done with tile i - 1
        issue(i + ST - 1);        // into tile i - 1's slot
        const u32 ks = ring + (u32)((i % ST) * 2 * TILE) * (u32)sizeof(T);
        const u32 vs = ks + (u32)TILE * (u32)sizeof(T);
        const int j0 = (w + W * i) * KT;

        // S = Q K^T for the tile's keys.
        float s[NN][4];
#pragma unroll
        for (int nn = 0; nn < NN; ++nn)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[nn][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DK; ++kk)
#pragma unroll
            for (int np = 0; np < NN / 2; ++np) {
                u32 b0, b1, b2, b3;
                at_nv_ldsm4(ks + (u32)(np * 16 * P + kk * 16) * 2u + k_lane, b0, b1, b2, b3);
                at_nv_mma<T>(s[2 * np], qf[kk], b0, b1);
                at_nv_mma<T>(s[2 * np + 1], qf[kk], b2, b3);
            }

        // Logits (base 2) with each slot's visible keys, the mask and the softcap; the tile's
        // row maxima over the quad of lanes sharing a row.
        float base[2];
#pragma unroll
        for (int sl = 0; sl < 2; ++sl) {
            const T* mr = mask == nullptr ? nullptr
                                          : mask + (i64)b * p.m_sb + (i64)head_s[sl] * p.m_sh +
                                                (i64)row_s[sl] * p.m_sq + c_begin * p.m_sk;
            float mx = AT_NEG_INF;
#pragma unroll
            for (int nn = 0; nn < NN; ++nn)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int jr = j0 + nn * 8 + 2 * t4 + e;
                    const bool seen = jr >= lo_s[sl] && jr < hi_s[sl];
                    float mv = 0.0f;
                    if (seen && mr != nullptr) mv = rk_to_compute(mr[(i64)jr * p.m_sk]);
                    const float x = seen ? at_logit(p, s[nn][2 * sl + e], mv) : AT_NEG_INF;
                    s[nn][2 * sl + e] = x;
                    mx = fmaxf(mx, x);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m[sl], mx);
            base[sl] = m_new == AT_NEG_INF ? 0.0f : m_new;
            const float alpha = at_nv_exp2(m[sl] - base[sl]);
            m[sl] = m_new;
            l[sl] *= alpha;
#pragma unroll
            for (int dn = 0; dn < DN; ++dn) {
                acc[dn][2 * sl] *= alpha;
                acc[dn][2 * sl + 1] *= alpha;
            }
        }
        // Probabilities, packed as the A operands of P V (key tiles 2c and 2c + 1 make the 16
        // keys of operand c).
        u32 pa[KC][4];
#pragma unroll
        for (int nn = 0; nn < NN; ++nn) {
            const float p0 = at_nv_exp2(s[nn][0] - base[0]);
            const float p1 = at_nv_exp2(s[nn][1] - base[0]);
            const float p2 = at_nv_exp2(s[nn][2] - base[1]);
            const float p3 = at_nv_exp2(s[nn][3] - base[1]);
            l[0] += p0 + p1;
            l[1] += p2 + p3;
            pa[nn >> 1][2 * (nn & 1)] = at_nv_pack<T>(p0, p1);
            pa[nn >> 1][2 * (nn & 1) + 1] = at_nv_pack<T>(p2, p3);
        }
        // O += P V.
#pragma unroll
        for (int c = 0; c < KC; ++c)
#pragma unroll
            for (int dp = 0; dp < DN / 2; ++dp) {
                u32 b0, b1, b2, b3;
                at_nv_ldsm4_t(vs + (u32)(c * 16 * P + dp * 16) * 2u + v_lane, b0, b1, b2, b3);
                at_nv_mma<T>(acc[2 * dp], pa[c], b0, b1);
                at_nv_mma<T>(acc[2 * dp + 1], pa[c], b2, b3);
            }
    }
    at_nv_cp_wait<0>();

    // Combine the warps: each row's block max, every warp's sums rescaled to it, added.
    float* red = reinterpret_cast<float*>(at_dn_dyn);  // [W][NQ][D]
    float* wm = red + W * NQ * D;                      // [W][NQ]
    float* wl = wm + W * NQ;                           // [W][NQ]
    __syncthreads();  // every warp is done with its ring
#pragma unroll
    for (int sl = 0; sl < 2; ++sl) {
        float lt = l[sl];
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        if (t4 == 0) {
            wm[w * NQ + g8 + 8 * sl] = m[sl];
            wl[w * NQ + g8 + 8 * sl] = lt;
        }
    }
    __syncthreads();
#pragma unroll
    for (int sl = 0; sl < 2; ++sl) {
        const int r = g8 + 8 * sl;
        float mx = AT_NEG_INF;
#pragma unroll
        for (int t = 0; t < W; ++t) mx = fmaxf(mx, wm[t * NQ + r]);
        const float f = at_nv_exp2(m[sl] - (mx == AT_NEG_INF ? 0.0f : mx));
        float* dst = red + (w * NQ + r) * D + 2 * t4;
#pragma unroll
        for (int dn = 0; dn < DN; ++dn) {
            dst[dn * 8] = acc[dn][2 * sl] * f;
            dst[dn * 8 + 1] = acc[dn][2 * sl + 1] * f;
        }
    }
    __syncthreads();
    const bool single = gridDim.x == 1;
    for (int idx = tid; idx < nq * D; idx += W * 32) {
        const int r = idx / D, d = idx % D;
        float mx = AT_NEG_INF;
#pragma unroll
        for (int t = 0; t < W; ++t) mx = fmaxf(mx, wm[t * NQ + r]);
        const float base_r = mx == AT_NEG_INF ? 0.0f : mx;
        float sum = 0.0f, lsum = 0.0f;
#pragma unroll
        for (int t = 0; t < W; ++t) {
            sum += red[(t * NQ + r) * D + d];
            lsum += wl[t * NQ + r] * at_nv_exp2(wm[t * NQ + r] - base_r);
        }
        const int flat = flat0 + r;
        const i64 row = flat / g, head = hk * g + flat % g;
        if (single) {
            const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
            o[(i64)b * p.o_sb + row * p.o_ss + head * p.o_sh + d] = rk_from_compute<T>(sum * inv);
        } else {
            const i64 prow = ((i64)blockIdx.x * p.splits_rows) + ((i64)b * p.hq + head) * p.sq + row;
            part[prow * D + d] = sum;
            if (d == 0) {
                float* stats = part + p.splits_rows * (i64)gridDim.x * D;
                stats[2 * prow] = mx;
                stats[2 * prow + 1] = lsum;
            }
        }
    }
}

#define AT_DECODE_NV(TN, T, D)                                                                   \
    RK_KERNEL void __launch_bounds__(AT_DN_WAVES * 32)                                           \
        attn_decode_nv_##TN##_d##D(AttnParams p, const T* q, const T* k, const T* v,             \
                                   const T* mask, T* o, float* part) {                           \
        rk_overlapped_entry();                                                                   \
        at_decode_nv<T, D>(p, q, k, v, mask, o, part);                                           \
    }
#endif  // RK_MMA == 1

// The matrix-instruction prefill kernels: on NVIDIA the kernel above, elsewhere at_prefill_mma.
#if RK_MMA == 1
#define AT_PREFILL_MMA(TN, T, D, BN)                                                             \
    RK_KERNEL void __launch_bounds__(AT_NV_WAVES * 32, AT_NV_MIN_BLOCKS)                         \
        attn_prefill_mma_##TN##_d##D(AttnParams p, const T* q, const T* k, const T* v,           \
                                     const T* mask, const u32* cu_q, const u32* cu_k, T* o,      \
                                     u32* err) {                                                 \
        at_prefill_nv<T, D, AT_NV_WAVES, AT_NV_BN, AT_NV_RT>(p, q, k, v, mask, cu_q, cu_k, o,     \
                                                             err);                               \
    }
// The tile-abstraction kernels (AMD's matrix path), compiled for mma.sync as well
// (`AttnKernel::Tiles`), so that their algorithm runs on the NVIDIA GPUs at hand.
#define AT_PREFILL_TILES(TN, T, D, BN)                                                           \
    RK_KERNEL void __launch_bounds__(AT_MMA_WAVES * RK_MMA_WAVE)                                 \
        attn_prefill_tiles_##TN##_d##D(AttnParams p, const T* q, const T* k, const T* v,         \
                                       const T* mask, const u32* cu_q, const u32* cu_k, T* o,    \
                                       u32* err) {                                               \
        at_prefill_mma<T, D, BN>(p, q, k, v, mask, cu_q, cu_k, o, err);                          \
    }
#else
#define AT_PREFILL_MMA(TN, T, D, BN)                                                             \
    RK_KERNEL void __launch_bounds__(AT_MMA_WAVES * RK_MMA_WAVE)                                 \
        attn_prefill_mma_##TN##_d##D(AttnParams p, const T* q, const T* k, const T* v,           \
                                     const T* mask, const u32* cu_q, const u32* cu_k, T* o,      \
                                     u32* err) {                                                 \
        at_prefill_mma<T, D, BN>(p, q, k, v, mask, cu_q, cu_k, o, err);                          \
    }
#endif
#endif  // RK_MMA != 0

// ---------------------------------------------------------------------------------------------
// Decode (flash-decoding): one block per (key split, kv head x query slice, batch). The block
// carries up to NQ queries (the q heads sharing the kv head, times query rows), so every key and
// value row is read once for all of them. Teams of TS lanes (16-byte vectors across the head dim)
// walk the split's keys AT_DEC_UNROLL at a time, the next step's loads in flight while a step is
// computed; each team keeps its own online softmax (max, sum, P V accumulator per query) in
// registers, so the key loop has no block barrier. The teams are combined in shared memory at the end. With one split
// the block writes the normalised output; otherwise unnormalised partial sums with their max and
// sum, merged by at_merge.
// ---------------------------------------------------------------------------------------------

// Keys one team reads per step, and the blocks per compute unit the NVIDIA build asks the
// register allocator for (CUDA's second __launch_bounds__ argument), by the per-lane state (NQ
// queries x EPL elements, twice: the queries and the accumulators). The loads of a step are
// double-buffered, so U rows of K and V are in flight per lane while the previous U are used.
// AMD keeps the compiler's register choice: HIP reads that argument as waves per execution unit,
// and the register files differ.
#define AT_DEC_UNROLL(NQ, EPL) ((NQ) * (EPL) >= 64 ? 1 : (NQ) * (EPL) >= 32 ? 2 : 4)
#define AT_DEC_MIN_BLOCKS(NQ, EPL) ((NQ) * (EPL) >= 64 ? 1 : 2)
// How far (base 2) a logit may pass the running max before the accumulators are rescaled.
#define AT_DEC_SLACK 8.0f
#if defined(__HIP_PLATFORM_NVIDIA__)
#define AT_DEC_BOUNDS(T, D, NQ) \
    __launch_bounds__(AT_THREADS, AT_DEC_MIN_BLOCKS(NQ, (at_dec_shape<T, D>::EPL)))
#else
#define AT_DEC_BOUNDS(T, D, NQ) __launch_bounds__(AT_THREADS)
#endif

template <typename T, int D>
struct at_dec_shape {
    static constexpr int VEC = 16 / (int)sizeof(T);   // elements per 16-byte load
    static constexpr int NV = D / VEC;                 // vectors per row
    static constexpr int VPL = (NV + 31) / 32;         // vectors per lane
    static constexpr int NVL = (NV + VPL - 1) / VPL;   // lanes needed
    static constexpr int TS = NVL <= 4 ? 4 : NVL <= 8 ? 8 : NVL <= 16 ? 16 : 32;  // team size
    static constexpr int EPL = VPL * VEC;              // elements per lane
    static constexpr int NTEAM = AT_THREADS / TS;
};

// A team's U key and value rows from relative key `j` on (this lane's vectors; rows at or past
// `n` read as zeros, without touching memory).
template <typename T, int U, int VPL, int TS, int VEC, int NV, typename RAW>
__device__ __forceinline__ void at_dec_load(const T* kt, const T* vt, i64 k_ss, i64 v_ss, int j,
                                            int n, int tl, typename RAW::t (&kr)[U][VPL],
                                            typename RAW::t (&vr)[U][VPL]) {
    typedef typename RAW::t R;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
        for (int w = 0; w < VPL; ++w) {
            const bool valid = j + u < n && tl + TS * w < NV;
            kr[u][w] = valid ? *(const R*)(kt + u * k_ss + TS * w * VEC) : RAW::zero();
            vr[u][w] = valid ? *(const R*)(vt + u * v_ss + TS * w * VEC) : RAW::zero();
        }
}

// Sums each of V values over the TS lanes of a team (TS a power of two, teams aligned to TS
// lanes), every lane getting every sum, in about 2V shuffles instead of V log2(TS) butterflies:
// a reduce-scatter, each stage sending the half of the still-held values that the partner lane
// keeps (so a lane ends with the sums of R = max(V / TS, 1) values), then a gather from their
// owners. Every lane gets the same bits (each sum is computed once, or by both lanes of a pair
// as a + b and b + a).
template <int CNT, int OFF>
struct at_reduce_scatter {
    static __device__ __forceinline__ void run(float* v, int tl) {
        if constexpr (OFF > 0) {
            if constexpr (CNT > 1) {
                constexpr int H = CNT / 2;
                const bool upper = (tl & OFF) != 0;
#pragma unroll
                for (int i = 0; i < H; ++i) {
                    const float send = upper ? v[i] : v[i + H];
                    const float keep = upper ? v[i + H] : v[i];
                    v[i] = keep + __shfl_xor(send, OFF);
                }
                at_reduce_scatter<H, OFF / 2>::run(v, tl);
            } else {
                v[0] += __shfl_xor(v[0], OFF);
                at_reduce_scatter<1, OFF / 2>::run(v, tl);
            }
        }
    }
};

template <int V, int TS>
__device__ __forceinline__ void at_team_allsum(float (&v)[V], int tl) {
    static_assert((V & (V - 1)) == 0 && (TS & (TS - 1)) == 0, "powers of two");
    constexpr int R = V >= TS ? V / TS : 1;  // sums a lane holds after the scatter
    constexpr int G = TS * R / V;            // lanes holding the same sums
    at_reduce_scatter<V, TS / 2>::run(v, tl);
    // Lane tl now holds the sums of values j + R * (tl / G), j < R, in v[0 .. R).
    float own[R];
#pragma unroll
    for (int j = 0; j < R; ++j) own[j] = v[j];
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = __shfl(own[i % R], (i / R) * G, TS);
}

template <typename T, int D, int NQ>
__device__ __forceinline__ void at_decode(const AttnParams& p, const T* __restrict__ q,
                                          const T* __restrict__ k, const T* __restrict__ v,
                                          const T* __restrict__ mask, T* __restrict__ o,
                                          float* __restrict__ part) {
    typedef at_dec_shape<T, D> S;
    constexpr int VEC = S::VEC, VPL = S::VPL, TS = S::TS, EPL = S::EPL, NV = S::NV;
    constexpr int NTEAM = S::NTEAM, U = AT_DEC_UNROLL(NQ, EPL);
    typedef at_raw16 RAW;
    typedef RAW::t R;
    __shared__ float red[NTEAM * D];
    __shared__ float team_m[NTEAM * NQ], team_l[NTEAM * NQ];

    const int tid = threadIdx.x, tl = tid % TS, te = tid / TS;
    // Query rows, heads and slots fit 32 bits (the launcher checks seq_q and the head counts);
    // element offsets stay 64-bit.
    const int g = (int)(p.hq / p.hkv);
    const int slices = ((int)p.sq * g + NQ - 1) / NQ;
    const int hk = (int)blockIdx.y / slices, slice = (int)blockIdx.y % slices;
    const u32 b = blockIdx.z;
    const int flat0 = slice * NQ;
    const int nq = (int)p.sq * g - flat0 < NQ ? (int)p.sq * g - flat0 : NQ;
    const i64 sk = p.sk, shift = p.sk - p.sq;

    // Query (row i, head h) of slot qi; padding slots repeat slot 0 and are never written.
    int qi_row[NQ], qi_head[NQ];
#pragma unroll
    for (int qi = 0; qi < NQ; ++qi) {
        const int flat = flat0 + (qi < nq ? qi : 0);
        qi_row[qi] = flat / g;
        qi_head[qi] = hk * g + flat % g;
    }

    // The keys of this split, narrowed to those some query of the slice sees; each query's own
    // range as offsets from the split's first key (the launcher keeps seq_k below 2^31).
    const i64 per = (sk + gridDim.x - 1) / gridDim.x;
    i64 c_begin = (i64)blockIdx.x * per, c_end = c_begin + per < sk ? c_begin + per : sk;
    {
        // The last query's row from its slot (not qi_row[nq - 1]: a run-time index would put
        // the array in local memory).
        const i64 last_row = (flat0 + nq - 1) / g;
        const i64 lo = at_key_lo(p, qi_row[0], shift), hi = at_key_hi(p, last_row, shift, sk);
        c_begin = c_begin > lo ? c_begin : lo;
        c_end = c_end < hi ? c_end : hi;
    }
    const int n = c_end > c_begin ? (int)(c_end - c_begin) : 0;
    int lo_r[NQ], hi_r[NQ];
#pragma unroll
    for (int qi = 0; qi < NQ; ++qi) {
        const i64 lo = at_key_lo(p, qi_row[qi], shift) - c_begin;
        const i64 hi = at_key_hi(p, qi_row[qi], shift, sk) - c_begin;
        lo_r[qi] = lo < 0 ? 0 : (int)(lo < n ? lo : n);
        hi_r[qi] = hi < 0 ? 0 : (int)(hi < n ? hi : n);
    }

    // The lane's slice of every query, in registers.
    float qr[NQ][EPL];
#pragma unroll
    for (int qi = 0; qi < NQ; ++qi)
#pragma unroll
        for (int w = 0; w < VPL; ++w) {
            const int vi = tl + TS * w;
            if (qi < nq && vi < NV) {
                const T* src = q + (i64)b * p.q_sb + qi_row[qi] * p.q_ss + qi_head[qi] * p.q_sh;
                at_load_vec<T, VEC>(src + vi * VEC, &qr[qi][w * VEC]);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; ++e) qr[qi][w * VEC + e] = 0.0f;
            }
        }

    float m[NQ], l[NQ], acc[NQ][EPL];
#pragma unroll
    for (int qi = 0; qi < NQ; ++qi) {
        m[qi] = AT_NEG_INF;
        l[qi] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[qi][e] = 0.0f;
    }

    // The team's first key and value rows (this lane's first vector); a step moves every team
    // NTEAM * U rows on.
    const T* kt = k + (i64)b * p.k_sb + hk * p.k_sh + (c_begin + (i64)te * U) * p.k_ss + tl * VEC;
    const T* vt = v + (i64)b * p.v_sb + hk * p.v_sh + (c_begin + (i64)te * U) * p.v_ss + tl * VEC;
    const i64 kstep = (i64)NTEAM * U * p.k_ss, vstep = (i64)NTEAM * U * p.v_ss;
    // Every lane of the block runs the same trip count: the shuffles need the whole warp (on
    // NVIDIA they are full-warp *_sync calls), and a warp holds several teams. The next step's
    // rows are loaded before this step's arithmetic, so loads stay in flight while it runs.
    R kr[U][VPL], vr[U][VPL];
    at_dec_load<T, U, VPL, TS, VEC, NV, RAW>(kt, vt, p.k_ss, p.v_ss, te * U, n, tl, kr, vr);
    for (int jb = 0; jb < n; jb += NTEAM * U, kt += kstep, vt += vstep) {
        const int j = jb + te * U;
        R kn[U][VPL], vn[U][VPL];
        at_dec_load<T, U, VPL, TS, VEC, NV, RAW>(kt + kstep, vt + vstep, p.k_ss, p.v_ss,
                                                 j + NTEAM * U, n, tl, kn, vn);
        // The lane's partial dot products, summed over the team (every lane gets all).
        float dots[NQ * U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float kf[EPL];
#pragma unroll
            for (int w = 0; w < VPL; ++w) at_unpack<T, VEC>(kr[u][w], &kf[w * VEC]);
#pragma unroll
            for (int qi = 0; qi < NQ; ++qi) {
                float dot = 0.0f;
#pragma unroll
                for (int e = 0; e < EPL; ++e) dot += qr[qi][e] * kf[e];
                dots[qi * U + u] = dot;
            }
        }
        at_team_allsum<NQ * U, TS>(dots, tl);
        float s[NQ][U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
            for (int qi = 0; qi < NQ; ++qi) {
                const float dot = dots[qi * U + u];
                const int jj = j + u;
                const bool seen = jj >= lo_r[qi] && jj < hi_r[qi];
                float mv = 0.0f;
                if (seen && mask != nullptr)
                    mv = rk_to_compute(mask[(i64)b * p.m_sb + qi_head[qi] * p.m_sh +
                                            qi_row[qi] * p.m_sq + (c_begin + jj) * p.m_sk]);
                s[qi][u] = seen ? at_logit(p, dot, mv) : AT_NEG_INF;
            }
        }
        // Lazy rescaling: the running max m moves only when a logit passes it by more than
        // AT_DEC_SLACK (base-2 units), so the weights stay below 2^AT_DEC_SLACK and most steps
        // skip rescaling the accumulators. (-inf + slack is -inf: the first seen key moves it.)
#pragma unroll
        for (int qi = 0; qi < NQ; ++qi) {
            float mx = AT_NEG_INF;
#pragma unroll
            for (int u = 0; u < U; ++u) mx = fmaxf(mx, s[qi][u]);
            if (mx > m[qi] + AT_DEC_SLACK) {
                const float alpha = exp2f(m[qi] - mx);
                m[qi] = mx;
                l[qi] *= alpha;
#pragma unroll
                for (int e = 0; e < EPL; ++e) acc[qi][e] *= alpha;
            }
            const float base = m[qi] == AT_NEG_INF ? 0.0f : m[qi];
#pragma unroll
            for (int u = 0; u < U; ++u) s[qi][u] = exp2f(s[qi][u] - base);
#pragma unroll
            for (int u = 0; u < U; ++u) l[qi] += s[qi][u];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float vf[EPL];
#pragma unroll
            for (int w = 0; w < VPL; ++w) at_unpack<T, VEC>(vr[u][w], &vf[w * VEC]);
#pragma unroll
            for (int qi = 0; qi < NQ; ++qi)
#pragma unroll
                for (int e = 0; e < EPL; ++e) acc[qi][e] += s[qi][u] * vf[e];
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int w = 0; w < VPL; ++w) {
                kr[u][w] = kn[u][w];
                vr[u][w] = vn[u][w];
            }
    }

    // Combine the teams: per query, the block's max, each team's share rescaled to it, summed.
    if (tl == 0) {
#pragma unroll
        for (int qi = 0; qi < NQ; ++qi) {
            team_m[te * NQ + qi] = m[qi];
            team_l[te * NQ + qi] = l[qi];
        }
    }
    const bool single = gridDim.x == 1;
    // Fully unrolled with a guard rather than a `break`: a loop that exits early indexes the
    // per-query arrays (m, l, acc) at run time, which moves them to local memory for the whole
    // kernel (NVRTC did so: a 1 KiB stack, 14 us for a handful of keys). `nq` is the same in
    // every thread of the block, so the barriers inside the guard are uniform.
#pragma unroll
    for (int qi = 0; qi < NQ; ++qi) {
        if (qi >= nq) continue;
        __syncthreads();  // team stats written; the previous query's readers are done with red
        float mx = AT_NEG_INF;
        for (int t = 0; t < NTEAM; ++t) mx = fmaxf(mx, team_m[t * NQ + qi]);
        const float base = mx == AT_NEG_INF ? 0.0f : mx;
        const float f = exp2f(m[qi] - base);
#pragma unroll
        for (int w = 0; w < VPL; ++w) {
            const int vi = tl + TS * w;
            if (vi < NV) {
#pragma unroll
                for (int e = 0; e < VEC; ++e) red[te * D + vi * VEC + e] = acc[qi][w * VEC + e] * f;
            }
        }
        __syncthreads();
        float lsum = 0.0f;
        for (int t = 0; t < NTEAM; ++t) lsum += team_l[t * NQ + qi] * exp2f(team_m[t * NQ + qi] - base);
        const i64 row = qi_row[qi], head = qi_head[qi];
        for (int d = tid; d < D; d += AT_THREADS) {
            float sum = 0.0f;
            for (int t = 0; t < NTEAM; ++t) sum += red[t * D + d];
            if (single) {
                const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
                o[(i64)b * p.o_sb + row * p.o_ss + head * p.o_sh + d] = rk_from_compute<T>(sum * inv);
            } else {
                const i64 prow =
                    ((i64)blockIdx.x * p.splits_rows) + ((i64)b * p.hq + head) * p.sq + row;
                part[prow * D + d] = sum;
                if (d == 0) {
                    float* stats = part + p.splits_rows * (i64)gridDim.x * D;
                    stats[2 * prow] = mx;
                    stats[2 * prow + 1] = lsum;
                }
            }
        }
    }
}

// Merges the splits' partial sums: one block of AT_THREADS per output row. The row's D columns
// are D / 4 four-float vectors; the block's threads form G = AT_THREADS / (D / 4) groups, and
// group t takes splits t, t + G, ... A thread loads its splits' vectors and (max, sum) pairs
// AT_MERGE_LOADS at a time, all in flight together (one round of memory latency for up to
// G x AT_MERGE_LOADS splits; the loads do not wait for the row's max), and folds them into its
// own online softmax; the groups are then rescaled to the row's max and added in shared memory.
#define AT_MAX_SPLITS 256
#define AT_MERGE_LOADS 8
template <typename T, int D>
__device__ __forceinline__ void at_merge(const AttnParams& p, i64 splits,
                                         const float* __restrict__ part, T* __restrict__ o) {
    constexpr int CW = D / 4;                // four-float vectors a row
    constexpr int G = AT_THREADS / CW;       // groups over the splits
    constexpr int U = AT_MERGE_LOADS;
    static_assert(D % 4 == 0 && G >= 1, "four-float vectors, at least one group");
    __shared__ float4 red[G * CW];
    __shared__ float gmax[G], gden[G];
    const i64 row = blockIdx.x, rows = p.splits_rows;
    const int tid = threadIdx.x, ns = (int)splits;
    const int cv = tid % CW, grp = tid / CW;
    const bool active = grp < G;
    const float* stats = part + rows * splits * D;
    const float4* part4 = reinterpret_cast<const float4*>(part);

    float mt = AT_NEG_INF, den = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s0 = grp; active && s0 < ns; s0 += G * U) {
        float ms[U], ls[U];
        float4 x[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int sp = s0 + G * u;
            const i64 pr = (i64)sp * rows + row;
            const bool in = sp < ns;
            ms[u] = in ? stats[2 * pr] : AT_NEG_INF;
            ls[u] = in ? stats[2 * pr + 1] : 0.0f;
            x[u] = in ? part4[pr * CW + cv] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        float mx = mt;
#pragma unroll
        for (int u = 0; u < U; ++u) mx = fmaxf(mx, ms[u]);
        const float base = mx == AT_NEG_INF ? 0.0f : mx;
        const float alpha = exp2f(mt - base);
        den *= alpha;
        acc.x *= alpha; acc.y *= alpha; acc.z *= alpha; acc.w *= alpha;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const float w = exp2f(ms[u] - base);
            den += w * ls[u];
            acc.x += w * x[u].x; acc.y += w * x[u].y; acc.z += w * x[u].z; acc.w += w * x[u].w;
        }
        mt = mx;
    }
    if (active && cv == 0) {
        gmax[grp] = mt;
        gden[grp] = den;
    }
    __syncthreads();
    float mx = AT_NEG_INF;
#pragma unroll
    for (int t = 0; t < G; ++t) mx = fmaxf(mx, gmax[t]);
    const float base = mx == AT_NEG_INF ? 0.0f : mx;
    if (active) {
        const float f = exp2f(mt - base);
        red[grp * CW + cv] = make_float4(acc.x * f, acc.y * f, acc.z * f, acc.w * f);
    }
    __syncthreads();
    if (tid < CW) {
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        float total = 0.0f;
#pragma unroll
        for (int t = 0; t < G; ++t) {
            const float4 r = red[t * CW + tid];
            sum.x += r.x; sum.y += r.y; sum.z += r.z; sum.w += r.w;
            total += gden[t] * exp2f(gmax[t] - base);
        }
        const float inv = total > 0.0f ? 1.0f / total : 0.0f;
        const i64 i = row % p.sq, h = (row / p.sq) % p.hq, b = row / (p.sq * p.hq);
        T* dst = o + b * p.o_sb + i * p.o_ss + h * p.o_sh + 4 * tid;
        dst[0] = rk_from_compute<T>(sum.x * inv);
        dst[1] = rk_from_compute<T>(sum.y * inv);
        dst[2] = rk_from_compute<T>(sum.z * inv);
        dst[3] = rk_from_compute<T>(sum.w * inv);
    }
}

// Tile shapes of the prefill path: the largest (BM, BN) of (64,64), (64,32), (32,32), (16,16)
// whose shared memory (Q and K/V tiles in T, P in f32) stays within 40 KiB. Mirrored by
// `prefill_tile` in attention.rs.
#define AT_PREFILL(TN, T, D, BM, BN)                                                             \
    RK_KERNEL void __launch_bounds__(AT_THREADS)                                                 \
        attn_prefill_##TN##_d##D(AttnParams p, const T* q, const T* k, const T* v,               \
                                 const T* mask, const u32* cu_q, const u32* cu_k, T* o,          \
                                 u32* err) {                                                     \
        at_prefill<T, D, BM, BN>(p, q, k, v, mask, cu_q, cu_k, o, err);                          \
    }
#define AT_DECODE_NQ(TN, T, D, NQ)                                                               \
    RK_KERNEL void AT_DEC_BOUNDS(T, D, NQ)                                                      \
        attn_decode_##TN##_d##D##_q##NQ(AttnParams p, const T* q, const T* k, const T* v,        \
                                        const T* mask, T* o, float* part) {                      \
        rk_overlapped_entry();                                                                   \
        at_decode<T, D, NQ>(p, q, k, v, mask, o, part);                                          \
    }
// Decode kernels for 1, 4 and 8 queries per block (mirrored by `decode_queries` in
// attention.rs), and the merge.
#define AT_DECODE(TN, T, D)                                                                      \
    AT_DECODE_NQ(TN, T, D, 1)                                                                    \
    AT_DECODE_NQ(TN, T, D, 4)                                                                    \
    AT_DECODE_NQ(TN, T, D, 8)                                                                    \
    RK_KERNEL void __launch_bounds__(AT_THREADS)                                                 \
        attn_merge_##TN##_d##D(AttnParams p, i64 splits, const float* part, T* o) {              \
        rk_overlapped_entry();                                                                   \
        at_merge<T, D>(p, splits, part, o);                                                      \
    }

AT_PREFILL(bf16, bf16, 32, 64, 64)
AT_PREFILL(bf16, bf16, 64, 64, 64)
AT_PREFILL(bf16, bf16, 80, 64, 64)
AT_PREFILL(bf16, bf16, 96, 64, 32)
AT_PREFILL(bf16, bf16, 128, 64, 32)
AT_PREFILL(bf16, bf16, 256, 32, 32)
AT_PREFILL(f16, f16, 32, 64, 64)
AT_PREFILL(f16, f16, 64, 64, 64)
AT_PREFILL(f16, f16, 80, 64, 64)
AT_PREFILL(f16, f16, 96, 64, 32)
AT_PREFILL(f16, f16, 128, 64, 32)
AT_PREFILL(f16, f16, 256, 32, 32)
AT_PREFILL(f32, f32, 32, 64, 64)
AT_PREFILL(f32, f32, 64, 64, 32)
AT_PREFILL(f32, f32, 80, 32, 32)
AT_PREFILL(f32, f32, 96, 32, 32)
AT_PREFILL(f32, f32, 128, 32, 32)
AT_PREFILL(f32, f32, 256, 16, 16)

AT_DECODE(bf16, bf16, 32)
AT_DECODE(bf16, bf16, 64)
AT_DECODE(bf16, bf16, 80)
AT_DECODE(bf16, bf16, 96)
AT_DECODE(bf16, bf16, 128)
AT_DECODE(bf16, bf16, 256)
AT_DECODE(f16, f16, 32)
AT_DECODE(f16, f16, 64)
AT_DECODE(f16, f16, 80)
AT_DECODE(f16, f16, 96)
AT_DECODE(f16, f16, 128)
AT_DECODE(f16, f16, 256)
AT_DECODE(f32, f32, 32)
AT_DECODE(f32, f32, 64)
AT_DECODE(f32, f32, 80)
AT_DECODE(f32, f32, 96)
AT_DECODE(f32, f32, 128)
AT_DECODE(f32, f32, 256)

// The matrix-instruction prefill, on targets that have the instructions (mirrored by
// `MMA_HEAD_DIMS` and `mma_key_tile` in attention.rs).
#if RK_MMA != 0
AT_PREFILL_MMA(bf16, bf16, 32, AT_MMA_BN)
AT_PREFILL_MMA(bf16, bf16, 64, AT_MMA_BN)
AT_PREFILL_MMA(bf16, bf16, 80, AT_MMA_BN)
AT_PREFILL_MMA(bf16, bf16, 96, AT_MMA_BN)
AT_PREFILL_MMA(bf16, bf16, 128, AT_MMA_BN)
AT_PREFILL_MMA(f16, f16, 32, AT_MMA_BN)
AT_PREFILL_MMA(f16, f16, 64, AT_MMA_BN)
AT_PREFILL_MMA(f16, f16, 80, AT_MMA_BN)
AT_PREFILL_MMA(f16, f16, 96, AT_MMA_BN)
AT_PREFILL_MMA(f16, f16, 128, AT_MMA_BN)
#endif
// NVIDIA's matrix-instruction decode (mirrored by `MMA_HEAD_DIMS` in attention.rs).
#if RK_MMA == 1
AT_DECODE_NV(bf16, bf16, 32)
AT_DECODE_NV(bf16, bf16, 64)
AT_DECODE_NV(bf16, bf16, 80)
AT_DECODE_NV(bf16, bf16, 96)
AT_DECODE_NV(bf16, bf16, 128)
AT_DECODE_NV(f16, f16, 32)
AT_DECODE_NV(f16, f16, 64)
AT_DECODE_NV(f16, f16, 80)
AT_DECODE_NV(f16, f16, 96)
AT_DECODE_NV(f16, f16, 128)
#endif
#if RK_MMA == 1
AT_PREFILL_TILES(bf16, bf16, 32, AT_MMA_BN)
AT_PREFILL_TILES(bf16, bf16, 64, AT_MMA_BN)
AT_PREFILL_TILES(bf16, bf16, 80, AT_MMA_BN)
AT_PREFILL_TILES(bf16, bf16, 96, AT_MMA_BN)
AT_PREFILL_TILES(bf16, bf16, 128, AT_MMA_BN)
AT_PREFILL_TILES(f16, f16, 32, AT_MMA_BN)
AT_PREFILL_TILES(f16, f16, 64, AT_MMA_BN)
AT_PREFILL_TILES(f16, f16, 80, AT_MMA_BN)
AT_PREFILL_TILES(f16, f16, 96, AT_MMA_BN)
AT_PREFILL_TILES(f16, f16, 128, AT_MMA_BN)
#endif
