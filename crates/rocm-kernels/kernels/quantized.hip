// Quantized GGML blocks: dequantization, quantized embedding rows, quantized matrix-vector
// products (decode) and the indexed mixture-of-experts product.
//
// Block layouts are GGML's (as candle-core 0.11's k_quants.rs lays them out, `#[repr(C)]`,
// little endian); every f16 field sits at an even offset of a block whose size is even, so it
// is read with an aligned 16-bit load. `QK` is the block's element count, `BYTES` its size.
//
//   q4_0  (32, 18)  f16 d; u8 qs[16]                 x = (nibble - 8) * d
//   q4_1  (32, 20)  f16 d, m; u8 qs[16]              x = nibble * d + m
//   q5_0  (32, 22)  f16 d; u8 qh[4]; u8 qs[16]       x = ((nibble | bit << 4) - 16) * d
//   q5_1  (32, 24)  f16 d, m; u8 qh[4]; u8 qs[16]    x = (nibble | bit << 4) * d + m
//   q8_0  (32, 34)  f16 d; i8 qs[32]                 x = q * d
//   q8_1  (32, 36)  f16 d, s; i8 qs[32]              x = q * d
//   q2k   (256, 84) u8 scales[16]; u8 qs[64]; f16 d, dmin
//   q3k   (256, 110) u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d
//   q4k   (256, 144) f16 d, dmin; u8 scales[12]; u8 qs[128]
//   q5k   (256, 176) f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
//   q6k   (256, 210) u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
//   q8k   (256, 292) f32 d; i8 qs[256]; i16 bsums[16]  x = d * q
// In the 32-element types element j < 16 is the low nibble of qs[j], element j + 16 its high
// nibble, and element e's fifth bit is bit e of qh. The k-quant sub-block rules are in each
// `deq8` below. Every `deq8(block, g, y)` writes elements 8g .. 8g + 8 of one block: 8
// consecutive elements always share their scales.
//
// Every type's `vals8(block, g, q, scale, bias)` gives the 8 values as small integers q (in f32)
// and the shared scale and bias (bias 0 for types without one, BIAS = 0): x = q * scale + bias.
// Dequantization rounds exactly like candle's CPU `to_float` (the same f32 operations in the same
// order, never contracted into an FMA), so results are bit-identical to it.
//
//   dequantize_{Q}_{O}(u64 groups, const u8* blocks, O* dst)
//       dst[8i .. 8i + 8) = group i (of 8 elements) of the blocks, as O (f32, f16, bf16: the
//       f32 value rounded to nearest even). Blocks of exactly QK_DEQ_THREADS (256) threads,
//       any grid (see qk_dequantize); blocks aligned as a whole block of a 16-byte-aligned
//       buffer is (2, 4, 8 or 16 bytes by type), dst 16-byte aligned (the wrapper checks).
//   dequantize_plain_{S}_{O}(u64 n, const u8* src, O* dst)    S, O in f32, f16, bf16
//       the F32/F16/BF16 "quantized" types: src holds n elements of S (aligned to S); an
//       element-wise conversion through f32.
//   qembedding_{Q}_{O}(u64 groups, u64 groups_per_row, u64 rows, const u32* ids,
//                      const u8* blocks, O* dst, u32* err)
//       dst[r * hidden ..] = row ids[r] of the (rows, hidden) table, dequantized; an id >= rows
//       is recorded in `err` (the indexing error record, op code 6) and its row is zeros.
//   qmatvec_{Q}_{I}(u32 m, u32 n, u32 k, const u8* w, const I* x, I* y)
//       y[r * n + c] = sum_j x[r * k + j] * W[c, j] for r < m <= 8, c < n; W is (n, k) in
//       blocks, x and y are contiguous rows of I (f32, f16, bf16), x 16-byte aligned. f32
//       products and sums; the result rounded once to I.
//   qmoe_{Q}_{I}(u32 pairs, u32 topk, u32 x_rows, u32 n, u32 k, u32 experts, const u32* ids,
//                const u8* w, const I* x, I* y, u32* err)
//       pair p = (b, t) = (p / topk, p % topk): y[p * n + c] = x[b * x_rows + (x_rows == 1 ? 0
//       : t)] . W[ids[p]][c] with W (experts, n, k); an id >= experts is recorded in `err` (op
//       code 7) and its output row is zeros.
//
// Launch shape of qmatvec/qmoe: blocks of 256 threads = 8 teams of 32 lanes (half a wavefront on
// wave64, a warp on NVIDIA and wave32), QK_COLS output columns per team (8 QK_COLS per block);
// grid (ceil(n / (8 QK_COLS)), 1) for qmatvec and (.., pairs) for qmoe. Lanes stride over the
// row's groups of 8 and reuse each group of activations for the team's columns (QK_COLS = 4
// measured slower than 1 on an H100: a quarter of the teams in flight); team sums use xor
// shuffles below 32, which stay inside a team on every wave size. Blocks, activations and
// outputs of qmatvec/qembedding and the outputs of dequantize are 16-byte aligned (the wrappers
// check).
//
// The integer products with 8-bit activations (quantize_q8x, qmatvec_i8 and the one-launch
// qmatvec_s8) are described in their sections below.

#if defined(__clang__)
#pragma clang fp contract(off)
#endif

#define QK_ERR_EMBEDDING 6u
#define QK_ERR_MOE 7u

// f32 operations that are never contracted (candle's CPU rounding).
__device__ __forceinline__ float qk_mul(float a, float b) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
__device__ __forceinline__ float qk_add(float a, float b) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
__device__ __forceinline__ float qk_sub(float a, float b) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

// An f16 field at an even byte offset.
__device__ __forceinline__ float qk_f16(const u8* p) {
    return __half2float(__ushort_as_half(*(const unsigned short*)p));
}
// The f16 value of the low 16 bits of v.
__device__ __forceinline__ float qk_f16_bits(u32 v) {
    return __half2float(__ushort_as_half((unsigned short)(v & 0xFFFFu)));
}

// The 8 bytes at p, which is aligned to A (8, 4 or 2) bytes, with the widest loads A allows.
template <int A> struct qk_bytes;
template <> struct qk_bytes<8> {
    static __device__ __forceinline__ void load(const u8* p, u8* o) {
        const uint2 v = *(const uint2*)p;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            o[t] = (u8)(v.x >> (8 * t));
            o[t + 4] = (u8)(v.y >> (8 * t));
        }
    }
};
template <> struct qk_bytes<4> {
    static __device__ __forceinline__ void load(const u8* p, u8* o) {
        const u32 a = ((const u32*)p)[0], b = ((const u32*)p)[1];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            o[t] = (u8)(a >> (8 * t));
            o[t + 4] = (u8)(b >> (8 * t));
        }
    }
};
template <> struct qk_bytes<2> {
    static __device__ __forceinline__ void load(const u8* p, u8* o) {
        const unsigned short* h = (const unsigned short*)p;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const unsigned short v = h[t];
            o[2 * t] = (u8)v;
            o[2 * t + 1] = (u8)(v >> 8);
        }
    }
};

// The 6-bit scale and min `j` (0..8) of a q4k/q5k block's 12 scale bytes.
__device__ __forceinline__ void qk_scale_min_k4(int j, const u8* q, int& sc, int& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

struct qk_q4_0 {
    enum { QK = 32, BYTES = 18, BIAS = 0 };
    static __device__ __forceinline__ void vals8(const u8* b, int g, float* q, float& scale,
                                                  float& bias) {
        bias = 0.0f;
        const float d = qk_f16(b);
        u8 qs[8];
        qk_bytes<2>::load(b + 2 + (g & 1) * 8, qs);
        const int shift = (g >> 1) * 4;
#pragma unroll
        for (int t = 0; t < 8; ++t) q[t] = (float)(((qs[t] >> shift) & 0xF) - 8);
        scale = d;
    }
};

struct qk_q4_1 {
    enum { QK = 32, BYTES = 20, BIAS = 1 };
    static __device__ __forceinline__ void vals8(const u8* b, int g, float* q, float& scale,
                                                  float& bias) {
        const float d = qk_f16(b);
        const float m = qk_f16(b + 2);
        u8 qs[8];
        qk_bytes<4>::load(b + 4 + (g & 1) * 8, qs);
        const int shift = (g >> 1) * 4;
#pragma unroll
        for (int t = 0; t < 8; ++t) q[t] = (float)((qs[t] >> shift) & 0xF);
        scale = d;
        bias = m;
    }
};

struct qk_q5_0 {
    enum { QK = 32, BYTES = 22, BIAS = 0 };
    static __device__ __forceinline__ void vals8(const u8* b, int g, float* qv, float& scale,
                                                  float& bias) {
        bias = 0.0f;
        const float d = qk_f16(b);
        const unsigned short* qh16 = (const unsigned short*)(b + 2);
        const u32 qh = (u32)qh16[0] | ((u32)qh16[1] << 16);
        u8 qs[8];
        qk_bytes<2>::load(b + 6 + (g & 1) * 8, qs);
        const int shift = (g >> 1) * 4;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int e = g * 8 + t;
            const int q = (((qs[t] >> shift) & 0xF) | (((qh >> e) & 1) << 4)) - 16;
            qv[t] = (float)q;
        }
        scale = d;
    }
};

struct qk_q5_1 {
    enum { QK = 32, BYTES = 24, BIAS = 1 };
    static __device__ __forceinline__ void vals8(const u8* b, int g, float* qv, float& scale,
                                                  float& bias) {
        const float d = qk_f16(b);
        const float m = qk_f16(b + 2);
        const u32 qh = *(const u32*)(b + 4);
        u8 qs[8];
        qk_bytes<8>::load(b + 8 + (g & 1) * 8, qs);
        const int shift = (g >> 1) * 4;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int e = g * 8 + t;
            const int q = ((qs[t] >> shift) & 0xF) | (((qh >> e) & 1) << 4);
            qv[t] = (float)q;
        }
        scale = d;
        bias = m;
    }
};

struct qk_q8_0 {
    enum { QK = 32, BYTES = 34, BIAS = 0 };
    static __device__ __forceinline__ void vals8(const u8* b, int g, float* q, float& scale,
                                                  float& bias) {
        bias = 0.0f;
        const float d = qk_f16(b);
        u8 qs[8];
        qk_bytes<2>::load(b + 2 + g * 8, qs);
#pragma unroll
        for (int t = 0; t < 8; ++t) q[t] = (float)(signed char)qs[t];
        scale = d;
    }
};

struct qk_q8_1 {
    enum { QK = 32, BYTES = 36, BIAS = 0 };
    static __device__ __forceinline__ void vals8(const u8* b, int g, float* q, float& scale,
                                                  float& bias) {
        bias = 0.0f;
        const float d = qk_f16(b);
        u8 qs[8];
        qk_bytes<4>::load(b + 4 + g * 8, qs);
#pragma unroll
        for (int t = 0; t < 8; ++t) q[t] = (float)(signed char)qs[t];
        scale = d;
    }
};

// q2k: element e = 128 h + 32 j + l (h < 2, j < 4, l < 32) is bits 2j..2j+2 of qs[32 h + l],
// with scale byte scales[8 h + 2 j + l / 16]: x = d * (sc & 15) * q - dmin * (sc >> 4).
struct qk_q2k {
    enum { QK = 256, BYTES = 84, BIAS = 1 };
    static __device__ __forceinline__ void vals8(const u8* b, int g, float* q, float& scale,
                                                  float& bias) {
        const int e = g * 8;
        const int h = e >> 7, j = (e >> 5) & 3, l = e & 31;
        const u8 sc = b[h * 8 + j * 2 + (l >> 4)];
        const float dl = qk_mul(qk_f16(b + 80), (float)(sc & 0xF));
        const float ml = qk_mul(qk_f16(b + 82), (float)(sc >> 4));
        u8 qs[8];
        qk_bytes<4>::load(b + 16 + h * 32 + l, qs);
#pragma unroll
        for (int t = 0; t < 8; ++t) q[t] = (float)((qs[t] >> (2 * j)) & 3);
        scale = dl;
        bias = -ml;
    }
};

// q3k: element e = 128 h + 32 j + l: q = bits 2j..2j+2 of qs[32 h + l], minus 4 unless bit
// 4h + j of hmask[l] is set; the 6-bit scale s (index i = 8 h + 2 j + l / 16) has its low 4
// bits in scales[i] (i < 8) or scales[i - 8] >> 4, its high 2 bits at bit 2 (i / 4) of
// scales[8 + i % 4]: x = d * (s - 32) * q.
struct qk_q3k {
    enum { QK = 256, BYTES = 110, BIAS = 0 };
    static __device__ __forceinline__ void vals8(const u8* b, int g, float* qv, float& scale,
                                                  float& bias) {
        bias = 0.0f;
        const int e = g * 8;
        const int h = e >> 7, j = (e >> 5) & 3, l = e & 31;
        const int i = h * 8 + j * 2 + (l >> 4);
        const u8* scales = b + 96;
        const int lo = i < 8 ? (scales[i] & 0xF) : (scales[i - 8] >> 4);
        const int hi = (scales[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
        const float dl = qk_mul(qk_f16(b + 108), (float)((lo | (hi << 4)) - 32));
        u8 qs[8], hmask[8];
        qk_bytes<2>::load(b + 32 + h * 32 + l, qs);
        qk_bytes<2>::load(b + l, hmask);
        const int mbit = 1 << (h * 4 + j);
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int q = ((qs[t] >> (2 * j)) & 3) - ((hmask[t] & mbit) ? 0 : 4);
            qv[t] = (float)q;
        }
        scale = dl;
    }
};

// q4k: element e = 64 c + 32 s + l: nibble s of qs[32 c + l], scale/min pair 2 c + s:
// x = d * sc * q - dmin * m.
struct qk_q4k {
    enum { QK = 256, BYTES = 144, BIAS = 1 };
    static __device__ __forceinline__ void vals8(const u8* b, int g, float* q, float& scale,
                                                  float& bias) {
        const int e = g * 8;
        const int c = e >> 6, s = (e >> 5) & 1, l = e & 31;
        int sc, m;
        qk_scale_min_k4(2 * c + s, b + 4, sc, m);
        const float d1 = qk_mul(qk_f16(b), (float)sc);
        const float m1 = qk_mul(qk_f16(b + 2), (float)m);
        u8 qs[8];
        qk_bytes<8>::load(b + 16 + c * 32 + l, qs);
#pragma unroll
        for (int t = 0; t < 8; ++t) q[t] = (float)((qs[t] >> (4 * s)) & 0xF);
        scale = d1;
        bias = -m1;
    }
};

// q5k: q4k plus a fifth bit, bit 2 c + s of qh[l].
struct qk_q5k {
    enum { QK = 256, BYTES = 176, BIAS = 1 };
    static __device__ __forceinline__ void vals8(const u8* b, int g, float* qv, float& scale,
                                                  float& bias) {
        const int e = g * 8;
        const int c = e >> 6, s = (e >> 5) & 1, l = e & 31;
        int sc, m;
        qk_scale_min_k4(2 * c + s, b + 4, sc, m);
        const float d1 = qk_mul(qk_f16(b), (float)sc);
        const float m1 = qk_mul(qk_f16(b + 2), (float)m);
        u8 qh[8], qs[8];
        qk_bytes<8>::load(b + 16 + l, qh);
        qk_bytes<8>::load(b + 48 + c * 32 + l, qs);
        const int hbit = 1 << (2 * c + s);
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            qv[t] = (float)(((qs[t] >> (4 * s)) & 0xF) | ((qh[t] & hbit) ? 16 : 0));
        }
        scale = d1;
        bias = -m1;
    }
};

// q6k: element e = 128 n + 32 i + l: low 4 bits from ql[64 n + l + 32 (i & 1)] (low nibble for
// i < 2, high for i >= 2), high 2 bits at bit 2 i of qh[32 n + l], minus 32; scale
// scales[8 n + l / 16 + 2 i]: x = (d * scale) * q.
struct qk_q6k {
    enum { QK = 256, BYTES = 210, BIAS = 0 };
    static __device__ __forceinline__ void vals8(const u8* b, int g, float* qv, float& scale,
                                                  float& bias) {
        bias = 0.0f;
        const int e = g * 8;
        const int n = e >> 7, i = (e >> 5) & 3, l = e & 31;
        const signed char sc = ((const signed char*)(b + 192))[8 * n + (l >> 4) + 2 * i];
        const float ds = qk_mul(qk_f16(b + 208), (float)sc);
        u8 ql[8], qh[8];
        qk_bytes<2>::load(b + 64 * n + l + 32 * (i & 1), ql);
        qk_bytes<2>::load(b + 128 + 32 * n + l, qh);
        const int lshift = (i >> 1) * 4;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int q = (((ql[t] >> lshift) & 0xF) | (((qh[t] >> (2 * i)) & 3) << 4)) - 32;
            qv[t] = (float)q;
        }
        scale = ds;
    }
};

struct qk_q8k {
    enum { QK = 256, BYTES = 292, BIAS = 0 };
    static __device__ __forceinline__ void vals8(const u8* b, int g, float* q, float& scale,
                                                  float& bias) {
        bias = 0.0f;
        const float d = *(const float*)b;
        u8 qs[8];
        qk_bytes<4>::load(b + 4 + g * 8, qs);
#pragma unroll
        for (int t = 0; t < 8; ++t) q[t] = (float)(signed char)qs[t];
        scale = d;
    }
};

// ---------------------------------------------------------------------------------------------
// Dequantization and embedding rows
// ---------------------------------------------------------------------------------------------

template <typename O> __device__ __forceinline__ O qk_out(float v) { return rk_from_compute<O>(v); }

// Stores 8 values at dst (16-byte aligned), rounded to O, with 16-byte stores.
__device__ __forceinline__ void qk_store8(f32* dst, const float* y) {
    ((float4*)dst)[0] = make_float4(y[0], y[1], y[2], y[3]);
    ((float4*)dst)[1] = make_float4(y[4], y[5], y[6], y[7]);
}
// NVIDIA rounds a pair of floats to f16 (bf16) in one instruction (cvt.rn.f16x2.f32), where the
// scalar conversion runs at a quarter of the FP32 rate; both round to nearest even.
__device__ __forceinline__ void qk_store8(f16* dst, const float* y) {
    u32 w[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
#if defined(__HIP_PLATFORM_NVIDIA__)
        const __half2 h = __floats2half2_rn(y[2 * t], y[2 * t + 1]);
        w[t] = (u32)__half_as_ushort(h.x) | ((u32)__half_as_ushort(h.y) << 16);
#else
        w[t] = (u32)__half_as_ushort(__float2half(y[2 * t])) |
               ((u32)__half_as_ushort(__float2half(y[2 * t + 1])) << 16);
#endif
    }
    *(uint4*)dst = make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ void qk_store8(bf16* dst, const float* y) {
    u32 w[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
#if defined(__HIP_PLATFORM_NVIDIA__)
        const __nv_bfloat162 h = __floats2bfloat162_rn(y[2 * t], y[2 * t + 1]);
        w[t] = (u32)__bfloat16_as_ushort(h.x) | ((u32)__bfloat16_as_ushort(h.y) << 16);
#else
        w[t] = (u32)__bfloat16_as_ushort(__float2bfloat16(y[2 * t])) |
               ((u32)__bfloat16_as_ushort(__float2bfloat16(y[2 * t + 1])) << 16);
#endif
    }
    *(uint4*)dst = make_uint4(w[0], w[1], w[2], w[3]);
}

// The 8 dequantized values of a block: q * scale, plus bias for the types that have one (never
// "+ 0", which would turn -0.0 into +0.0 where the CPU keeps it).
template <typename Q> __device__ __forceinline__ void qk_deq8(const u8* b, int g, float* y) {
    float q[8], scale, bias;
    Q::vals8(b, g, q, scale, bias);
#pragma unroll
    for (int t = 0; t < 8; ++t) y[t] = Q::BIAS ? qk_add(qk_mul(q[t], scale), bias) : qk_mul(q[t], scale);
}

template <typename Q>
__device__ __forceinline__ void qk_deq_group(const u8* blocks, u64 group, float* y) {
    const u64 per_block = Q::QK / 8;
    qk_deq8<Q>(blocks + (group / per_block) * (u64)Q::BYTES, (int)(group % per_block), y);
}

// Dequantization goes a tile of whole blocks at a time: a block of QK_DEQ_THREADS threads copies
// the tile's bytes into shared memory with 16-byte loads (qk_deq_tile::LOADS a thread, all issued
// before any is used), decodes its groups of 8 from there and writes them with 16-byte stores.
// The next tile's loads are issued before the current tile is decoded, so that every block keeps
// its bytes in flight while it computes. Reading each group's bytes straight from global memory
// instead (2-byte loads for the 2-byte-aligned types, one round of memory latency a group) held
// the first kernel to 72-86% of a copy of the same traffic on an H200.
// A tile holds a multiple of 8 blocks, so its bytes are a multiple of 16 (every block size is
// even) and every tile starts at the same offset from a 16-byte boundary as the first (`lead`):
// the copy covers the tile's 16-byte granules, of which the first and last may hold bytes outside
// it; those are read byte by byte, only the tile's own.
#define QK_DEQ_THREADS 256
#define QK_DEQ_TILE_BYTES 8192
// NVIDIA: up to 8 blocks a multiprocessor (the launcher's grid is at most 8 a multiprocessor;
// where a multiprocessor holds 2048 threads this caps registers at 32 a thread, which sm_90
// compiles without spills for every type but Q5K, 24 bytes).
#if defined(__HIP_PLATFORM_NVIDIA__)
#define QK_DEQ_BOUNDS __launch_bounds__(QK_DEQ_THREADS, 8)
#else
#define QK_DEQ_BOUNDS __launch_bounds__(QK_DEQ_THREADS)
#endif

template <typename Q> struct qk_deq_tile {
    enum {
        BLOCKS = QK_DEQ_TILE_BYTES / (8 * Q::BYTES) * 8,
        BYTES = BLOCKS * Q::BYTES,
        // One more granule than the bytes need: the tile may start inside one.
        GRANULES = BYTES / 16 + 1,
        LOADS = (GRANULES + QK_DEQ_THREADS - 1) / QK_DEQ_THREADS,
    };
};

// The 16-byte granule at p (16-byte aligned) with only its bytes in [lo, hi) read (the rest 0).
__device__ __forceinline__ uint4 qk_granule(const u8* p, const u8* lo, const u8* hi) {
    if (p >= lo && p + 16 <= hi) return *(const uint4*)p;
    u32 v[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < 16; ++j)
        if (p + j >= lo && p + j < hi) v[j / 4] |= (u32)p[j] << (8 * (j & 3));
    return make_uint4(v[0], v[1], v[2], v[3]);
}

// How many blocks the tile starting at block b0 (of n_blocks) holds.
template <typename Q>
__device__ __forceinline__ u32 qk_tile_blocks(u64 n_blocks, u64 b0) {
    typedef qk_deq_tile<Q> T;
    return (u32)(n_blocks - b0 < (u64)T::BLOCKS ? n_blocks - b0 : (u64)T::BLOCKS);
}

// Issues this thread's loads of the tile starting at block b0 into v.
template <typename Q>
__device__ __forceinline__ void qk_tile_load(const u8* blocks, u64 n_blocks, u64 b0, u32 lead,
                                             uint4* v) {
    typedef qk_deq_tile<Q> T;
    const u32 nb = qk_tile_blocks<Q>(n_blocks, b0);
    const u8* lo = blocks + b0 * Q::BYTES;
    const u8* hi = lo + (u64)nb * Q::BYTES;
    const u32 granules = (lead + nb * Q::BYTES + 15) / 16;
#pragma unroll
    for (int j = 0; j < T::LOADS; ++j) {
        const u32 i = threadIdx.x + j * QK_DEQ_THREADS;
        if (i < granules) v[j] = qk_granule(lo - lead + 16 * (u64)i, lo, hi);
    }
}

// A tile's work items: a block's ITEMS items each decode some of its elements from b (the
// block in shared memory) and store them into out (the block's first output element, 16-byte
// aligned). By default an item is a group of 8 (qk_deq8). Types with PREP > 0 first derive
// PREP values of every block of the tile into shared memory (`prepare`, the whole thread block
// taking the tile's nb * PREP values), which their items then read (`pre`: the block's PREP
// values) instead of decoding them again in every item.
// Item types without prepared values (PREP = 0) take the empty `prepare` of this base.
struct qk_tile_items_unprepared {
    enum { PREP = 0 };
    static __device__ __forceinline__ void prepare(const u8*, u32, float2*) {}
};
template <typename Q> struct qk_tile_items : qk_tile_items_unprepared {
    enum { ITEMS = Q::QK / 8 };
    template <typename O>
    static __device__ __forceinline__ void run(const u8* b, u32 item, const float2*, O* out) {
        float y[8];
        qk_deq8<Q>(b, (int)item, y);
        qk_store8(out + item * 8, y);
    }
};

// q4k and q5k: each sub-block's (d * scale, -(dmin * min)) is derived once a tile (the 6-bit
// fields take a dozen instructions), then an item is the group of 8 of qk_deq8 with the
// arithmetic of vals8 (the same bits). Items stay groups of 8 so that a warp's stores cover
// whole 128-byte lines: items of 16 (a qs byte's two nibbles, 32 elements apart) halved the
// lines a store instruction completes and were slower on an H200 (quantized.md).
template <typename Q, int QS, bool HB> struct qk_tile_items_k45 {
    enum { ITEMS = 32, PREP = 8 };
    static __device__ __forceinline__ void prepare(const u8* s, u32 nb, float2* pre) {
#pragma unroll 1
        for (u32 i = threadIdx.x; i < nb * PREP; i += QK_DEQ_THREADS) {
            const u8* b = s + (i / PREP) * Q::BYTES;
            int sc, m;
            qk_scale_min_k4((int)(i % PREP), b + 4, sc, m);
            pre[i] = make_float2(qk_mul(qk_f16(b), (float)sc), -qk_mul(qk_f16(b + 2), (float)m));
        }
    }
    template <typename O>
    static __device__ __forceinline__ void run(const u8* b, u32 item, const float2* pre, O* out) {
        const u32 e = item * 8, c = e >> 6, sub = (e >> 5) & 1, l = e & 31;
        const float2 f = pre[e >> 5];
        const uint2 v = *(const uint2*)(b + QS + 32 * c + l);  // b is 16-byte aligned
        uint2 h = make_uint2(0u, 0u);
        if (HB) h = *(const uint2*)(b + 16 + l);
        const u32 w[2] = {v.x, v.y}, hw[2] = {h.x, h.y};
        const u32 hbit = 2 * c + sub;
        float y[8];
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            u32 q = (w[t / 4] >> (8 * (t % 4) + 4 * sub)) & 0xFu;
            if (HB) q |= ((hw[t / 4] >> (8 * (t % 4) + hbit)) & 1u) << 4;
            y[t] = qk_add(qk_mul((float)q, f.x), f.y);
        }
        qk_store8(out + e, y);
    }
};
// NVIDIA only (where it was measured): the pairs take 3.5 KiB (q4k) and 2.5 KiB (q5k) of shared
// memory a block beside the 8 KiB tile, which on AMD would cut the blocks a CDNA compute unit
// holds (64 KiB of LDS) from 8 to 5 or 6 while the launcher starts 8 a multiprocessor; AMD keeps
// the groups of 8 that decode their own fields.
#if defined(__HIP_PLATFORM_NVIDIA__)
template <> struct qk_tile_items<qk_q4k> : qk_tile_items_k45<qk_q4k, 16, false> {};
template <> struct qk_tile_items<qk_q5k> : qk_tile_items_k45<qk_q5k, 48, true> {};
#endif

// q6k: item 8 n + 4 r + j takes bytes l = 8 j .. + 8 of half n's ql row r (64 n + 32 r + l)
// and of its qh row (128 + 32 n + l): elements 128 n + 32 i + l .. of rows i = r and r + 2 (the
// low and the high nibbles). Lanes r = 0 and r = 1 of a half store rows 0 and 1 (then 2 and 3)
// with one instruction each, so that every store fills whole 128-byte lines (f16). The
// arithmetic of qk_q6k::vals8 and qk_deq8 (the same bits).
template <> struct qk_tile_items<qk_q6k> : qk_tile_items_unprepared {
    enum { ITEMS = 16 };
    // The 8 bytes at p (2-byte aligned) as two little-endian words.
    static __device__ __forceinline__ void words(const u8* p, u32* w) {
        const unsigned short* h = (const unsigned short*)p;
        w[0] = (u32)h[0] | ((u32)h[1] << 16);
        w[1] = (u32)h[2] | ((u32)h[3] << 16);
    }
    template <typename O>
    static __device__ __forceinline__ void run(const u8* b, u32 item, const float2*, O* out) {
        const int n = (int)(item >> 3), r = (int)(item >> 2) & 1, l = (int)(item & 3) * 8;
        const float d = qk_f16(b + 208);
        const signed char* sc = (const signed char*)(b + 192 + 8 * n + (l >> 4));
        u32 lq[2], h[2];
        words(b + 64 * n + 32 * r + l, lq);
        words(b + 128 + 32 * n + l, h);
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
            const int i = r + 2 * hi;  // the row: low nibbles for rows 0 and 1, high for 2 and 3
            const float ds = qk_mul(d, (float)sc[2 * i]);
            float y[8];
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                // The row's 6-bit values (0 .. 63), a byte each.
                const u32 q6 = ((lq[k] >> (4 * hi)) & 0x0F0F0F0Fu) | (((h[k] >> (2 * i)) & 0x03030303u) << 4);
#pragma unroll
                for (int t = 0; t < 4; ++t) y[4 * k + t] = qk_mul((float)((int)((q6 >> (8 * t)) & 0xFFu) - 32), ds);
            }
            qk_store8(out + 128 * n + 32 * i + l, y);
        }
    }
};

template <typename Q, typename O>
__device__ __forceinline__ void qk_dequantize(u64 groups, const u8* blocks, O* dst) {
    typedef qk_deq_tile<Q> T;
    typedef qk_tile_items<Q> It;
    __shared__ uint4 tile[T::LOADS * QK_DEQ_THREADS];
    __shared__ float2 pre[It::PREP > 0 ? T::BLOCKS * It::PREP : 1];
    const u32 per_block = Q::QK / 8;
    const u64 n_blocks = groups / per_block;
    const u32 lead = (u32)((size_t)blocks & 15);
    const u64 stride = (u64)gridDim.x * T::BLOCKS;
    u64 b0 = (u64)blockIdx.x * T::BLOCKS;
    uint4 v[T::LOADS];
    if (b0 < n_blocks) qk_tile_load<Q>(blocks, n_blocks, b0, lead, v);
    for (; b0 < n_blocks; b0 += stride) {
        const u32 nb = qk_tile_blocks<Q>(n_blocks, b0);
        const u32 granules = (lead + nb * Q::BYTES + 15) / 16;
#pragma unroll
        for (int j = 0; j < T::LOADS; ++j) {
            const u32 i = threadIdx.x + j * QK_DEQ_THREADS;
            if (i < granules) tile[i] = v[j];
        }
        __syncthreads();
        if (b0 + stride < n_blocks) qk_tile_load<Q>(blocks, n_blocks, b0 + stride, lead, v);
        const u8* s = (const u8*)tile + lead;
        O* out = dst + b0 * Q::QK;
        auto item = [&](u32 i) {
            const u32 blk = i / It::ITEMS;
            It::run(s + blk * Q::BYTES, i % It::ITEMS, pre + blk * It::PREP, out + (u64)blk * Q::QK);
        };
        if (It::PREP > 0) {
            It::prepare(s, nb, pre);
            __syncthreads();
            // Not unrolled: under the 32-register bound, the unrolled loop spilled (q4k).
#pragma unroll 1
            for (u32 i = threadIdx.x; i < nb * It::ITEMS; i += QK_DEQ_THREADS) item(i);
        } else {
            for (u32 i = threadIdx.x; i < nb * It::ITEMS; i += QK_DEQ_THREADS) item(i);
        }
        __syncthreads();
    }
}

__device__ __forceinline__ void qk_report(u32* err, u32 code, u64 idx, u64 size) {
    if (*(volatile u32*)err != 0u) return;
    if (atomicCAS(err, 0u, code) == 0u) {
        err[1] = (u32)idx;
        err[2] = (u32)(idx >> 32);
        err[3] = (u32)size;
        err[4] = (u32)(size >> 32);
    }
}

template <typename Q, typename O>
__device__ __forceinline__ void qk_embedding(u64 groups, u64 groups_per_row, u64 rows, const u32* ids,
                             const u8* blocks, O* dst, u32* err) {
    for (u64 i = rk_thread_id(); i < groups; i += rk_thread_count()) {
        const u64 r = i / groups_per_row;
        const u64 id = ids[r];
        float y[8];
        if (id < rows) {
            qk_deq_group<Q>(blocks, id * groups_per_row + i % groups_per_row, y);
        } else {
            if (i % groups_per_row == 0) qk_report(err, QK_ERR_EMBEDDING, id, rows);
#pragma unroll
            for (int t = 0; t < 8; ++t) y[t] = 0.0f;
        }
        qk_store8(dst + i * 8, y);
    }
}

#define QK_DEQ_KERNELS(QNAME, QTYPE, ONAME, OTYPE)                                               \
    RK_KERNEL void QK_DEQ_BOUNDS                                                                 \
        dequantize_##QNAME##_##ONAME(u64 groups, const u8* blocks, OTYPE* dst) {                 \
        qk_dequantize<QTYPE, OTYPE>(groups, blocks, dst);                                        \
    }                                                                                            \
    RK_KERNEL void qembedding_##QNAME##_##ONAME(u64 groups, u64 groups_per_row, u64 rows,        \
                                                const u32* ids, const u8* blocks, OTYPE* dst,    \
                                                u32* err) {                                      \
        qk_embedding<QTYPE, OTYPE>(groups, groups_per_row, rows, ids, blocks, dst, err);         \
    }

#define QK_PLAIN_KERNEL(SNAME, STYPE, ONAME, OTYPE)                                              \
    RK_KERNEL void dequantize_plain_##SNAME##_##ONAME(u64 n, const u8* bytes, OTYPE* dst) {      \
        const STYPE* src = (const STYPE*)bytes;                                                  \
        for (u64 i = rk_thread_id(); i < n; i += rk_thread_count())                              \
            dst[i] = qk_out<OTYPE>(rk_to_compute(src[i]));                                       \
    }

// ---------------------------------------------------------------------------------------------
// Matrix-vector products
// ---------------------------------------------------------------------------------------------

#define QK_TEAM 32
#define QK_TEAMS 8
#define QK_MAX_M 8

// 8 consecutive activations (16-byte aligned) as f32.
__device__ __forceinline__ void qk_load8(const f32* x, float* v) {
    const float4 a = ((const float4*)x)[0];
    const float4 b = ((const float4*)x)[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ void qk_load8(const f16* x, float* v) {
    const uint4 a = *(const uint4*)x;
    const u32 w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        v[2 * t] = __half2float(__ushort_as_half((unsigned short)(w[t] & 0xFFFF)));
        v[2 * t + 1] = __half2float(__ushort_as_half((unsigned short)(w[t] >> 16)));
    }
}
__device__ __forceinline__ void qk_load8(const bf16* x, float* v) {
    const uint4 a = *(const uint4*)x;
    const u32 w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        v[2 * t] = __uint_as_float(w[t] << 16);
        v[2 * t + 1] = __uint_as_float(w[t] & 0xFFFF0000u);
    }
}

// Columns (weight rows) per team: each lane's activations are loaded once and used for all of
// them.
#define QK_COLS 1

// acc[r][c] += this lane's share of x[r] . W[col0 + c], over the row's k / 8 groups (lanes
// stride by 32); columns at or past n are skipped.
template <typename Q, typename I>
__device__ __forceinline__ void qk_rows_dot(const u8* w, u64 row_bytes, u32 col0, u32 n, const I* x,
                                            u64 x_stride, u32 m, u32 k, int lane,
                                            float (*acc)[QK_COLS]) {
    const u32 groups = k / 8;
    const u32 cols = min((u32)QK_COLS, n - col0);
    for (u32 gi = (u32)lane; gi < groups; gi += QK_TEAM) {
        // The weights as q * scale + bias: the dot product is scale * (q . x) + bias * sum(x),
        // two multiplies per 8 weights instead of 8.
        float qv[QK_COLS][8], scale[QK_COLS], bias[QK_COLS];
        const u32 per_block = Q::QK / 8;
#pragma unroll
        for (u32 c = 0; c < QK_COLS; ++c) {
            if (c < cols)
                Q::vals8(w + (u64)(col0 + c) * row_bytes + (u64)(gi / per_block) * Q::BYTES,
                         (int)(gi % per_block), qv[c], scale[c], bias[c]);
        }
#pragma unroll
        for (u32 r = 0; r < QK_MAX_M; ++r) {
            if (r < m) {
                float v[8];
                qk_load8(x + r * x_stride + (u64)gi * 8, v);
                float sx = 0.0f;
                if (Q::BIAS) {
#pragma unroll
                    for (int t = 0; t < 8; ++t) sx += v[t];
                }
#pragma unroll
                for (u32 c = 0; c < QK_COLS; ++c) {
                    float sq = 0.0f;
#pragma unroll
                    for (int t = 0; t < 8; ++t) sq = fmaf(qv[c][t], v[t], sq);
                    acc[r][c] = fmaf(scale[c], sq, acc[r][c]);
                    if (Q::BIAS) acc[r][c] = fmaf(bias[c], sx, acc[r][c]);
                }
            }
        }
    }
}

// The sum of v over the 32 lanes of a team (xor masks below 32 never leave the team).
__device__ __forceinline__ float qk_team_sum(float v) {
#pragma unroll
    for (int mask = QK_TEAM / 2; mask > 0; mask >>= 1) v += __shfl_xor(v, mask);
    return v;
}

template <typename Q, typename I>
__device__ __forceinline__ void qk_matvec(u32 m, u32 n, u32 k, const u8* w, const I* x, I* y) {
    const int lane = (int)(threadIdx.x % QK_TEAM);
    const u32 col0 = (blockIdx.x * QK_TEAMS + threadIdx.x / QK_TEAM) * QK_COLS;
    // Every lane of a team has the same col0: the shuffles below see whole teams.
    if (col0 >= n) return;
    const u64 row_bytes = (u64)(k / Q::QK) * Q::BYTES;
    float acc[QK_MAX_M][QK_COLS];
#pragma unroll
    for (int r = 0; r < QK_MAX_M; ++r)
#pragma unroll
        for (int c = 0; c < QK_COLS; ++c) acc[r][c] = 0.0f;
    qk_rows_dot<Q, I>(w, row_bytes, col0, n, x, k, m, k, lane, acc);
#pragma unroll
    for (u32 r = 0; r < QK_MAX_M; ++r) {
        if (r < m) {
#pragma unroll
            for (u32 c = 0; c < QK_COLS; ++c) {
                const float s = qk_team_sum(acc[r][c]);
                if (lane == 0 && col0 + c < n) y[(u64)r * n + col0 + c] = rk_from_compute<I>(s);
            }
        }
    }
}

template <typename Q, typename I>
__device__ __forceinline__ void qk_moe(u32 pairs, u32 topk, u32 x_rows, u32 n, u32 k, u32 experts, const u32* ids,
                       const u8* w, const I* x, I* y, u32* err) {
    const int lane = (int)(threadIdx.x % QK_TEAM);
    const u32 col0 = (blockIdx.x * QK_TEAMS + threadIdx.x / QK_TEAM) * QK_COLS;
    const u32 p = blockIdx.y;
    if (col0 >= n || p >= pairs) return;
    const u32 expert = ids[p];
    I* out = y + (u64)p * n;
    if (expert >= experts) {
        if (col0 == 0 && lane == 0) qk_report(err, QK_ERR_MOE, expert, experts);
        if (lane < QK_COLS && col0 + lane < n) out[col0 + lane] = rk_from_compute<I>(0.0f);
        return;
    }
    const u32 b = p / topk, t = p % topk;
    const I* xr = x + ((u64)b * x_rows + (x_rows == 1 ? 0 : t)) * k;
    const u64 row_bytes = (u64)(k / Q::QK) * Q::BYTES;
    const u8* we = w + (u64)expert * n * row_bytes;
    float acc[QK_MAX_M][QK_COLS];
#pragma unroll
    for (int r = 0; r < QK_MAX_M; ++r)
#pragma unroll
        for (int c = 0; c < QK_COLS; ++c) acc[r][c] = 0.0f;
    qk_rows_dot<Q, I>(we, row_bytes, col0, n, xr, k, 1, k, lane, acc);
#pragma unroll
    for (u32 c = 0; c < QK_COLS; ++c) {
        const float s = qk_team_sum(acc[0][c]);
        if (lane == 0 && col0 + c < n) out[col0 + c] = rk_from_compute<I>(s);
    }
}

#define QK_MATVEC_KERNELS(QNAME, QTYPE, INAME, ITYPE)                                            \
    RK_KERNEL void __launch_bounds__(256)                                                        \
        qmatvec_##QNAME##_##INAME(u32 m, u32 n, u32 k, const u8* w, const ITYPE* x, ITYPE* y) {  \
        qk_matvec<QTYPE, ITYPE>(m, n, k, w, x, y);                                               \
    }                                                                                            \
    RK_KERNEL void __launch_bounds__(256)                                                        \
        qmoe_##QNAME##_##INAME(u32 pairs, u32 topk, u32 x_rows, u32 n, u32 k, u32 experts,       \
                               const u32* ids, const u8* w, const ITYPE* x, ITYPE* y,            \
                               u32* err) {                                                       \
        qk_moe<QTYPE, ITYPE>(pairs, topk, x_rows, n, k, experts, ids, w, x, y, err);             \
    }

// ---------------------------------------------------------------------------------------------
// Integer matrix-vector products (8-bit activations, 4-byte dot products)
// ---------------------------------------------------------------------------------------------
//
// quantize_q8x_{I}(u32 groups, const I* x, signed char* q, float2* ds)
//     Rounds activations to 8 bits, per 32-element block b of x (groups * 4 elements):
//     q[32 b + t] = rint(x * (127 / amax)) (0 where amax = 0), ds[b] = (d, d * sum(q)) with
//     d = amax / 127 (f32), so that x' = d * q is the rounded activation.
// qmatvec_i8_{Q}_{I}(u32 m, u32 n, u32 k, const u8* w, const signed char* q, const float2* ds,
//                    I* y)
//     y[r * n + c] = sum_j W[c, j] * x'[r * k + j] for r < m <= 8, c < n: the dequantized
//     weights times the rounded activations, as per-block integer dot products of the weights'
//     small integers with q (4-byte dot-product instructions: __dp4a on NVIDIA, sdot4 / sudot4
//     on AMD, a portable fallback elsewhere), scaled by the blocks' factors in f32; bias/min terms
//     use the block's d * sum(q) (q2k, whose mins cover 16 elements, sums its q with a dot
//     product against ones). Every weight type but q8k. Blocks of QI_BLOCK (128) threads compute QI_CPB adjacent
//     columns for all m rows; grid (ceil(n / QI_CPB), 1). q and ds are the quantize kernel's
//     output for the m rows (16-byte aligned); the weights of q4k and q5k are 16-byte aligned.
//
// Each type's `qi_*` struct splits a block into PARTS lane-sized parts: `load(block, part, W&)`
// reads a part's weights into registers, unpacked to signed bytes, `qi_dot<Q, HP>(W, q, ds,
// part)` gives its share of the block's product with activations q (the block's first element)
// and ds (its first 32-element activation block; `X::load` loads them, `dot_x` multiplies); the
// shares of a block's parts sum to the block's product.
// HP: activations laid out with HP bytes of padding after every 128 (see
// qs_apad: the staged kernel's shared-memory copy, padded by the type's SPAD so that the lanes
// of one load instruction read distinct shared-memory banks); 256-element blocks then have HP
// bytes between their halves, and the caller's q already counts the padding before the block.
// Two iterations of a lane's item loop in flight (measured on an H100: 1, 2 and 4 tried).
#ifndef QI_UNROLL_PRAGMA
#define QI_UNROLL_PRAGMA _Pragma("unroll 2")
#endif

// Integer sums become floats through their bit patterns instead of conversion instructions
// (NVIDIA converts an int to a float at a quarter of its integer rate, 16 a clock per
// multiprocessor): a dot-product accumulator started at QI_MAGIC, the bits of 1.5 * 2^23, holds
// that float plus the sum, exactly while |sum| < 2^22 (every part's sum is far below), and one
// subtraction gives the sum's float, the value a conversion would give.
#define QI_MAGIC 0x4B400000
__device__ __forceinline__ float qi_unmagic(int acc) { return __int_as_float(acc) - 12582912.0f; }
// The float of an unsigned byte value v < 256 (the bits of 2^23 + v, minus 2^23).
__device__ __forceinline__ float qi_u8_float(u32 v) { return __uint_as_float(0x4B000000u | v) - 8388608.0f; }
// The float of a signed byte value (the low 8 bits of v).
__device__ __forceinline__ float qi_s8_float(u32 v) { return qi_unmagic(QI_MAGIC + (int)(signed char)(u8)v); }

// The sum over t < 4 of the signed bytes t of a and b, plus c.
__device__ __forceinline__ int qi_dot4(int a, int b, int c) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    return __dp4a(a, b, c);
#elif defined(__GFX11__) || defined(__GFX12__)
    return __builtin_amdgcn_sudot4(true, a, true, b, c, false);
#elif defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) ||   \
    defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__) || defined(__gfx1011__) ||    \
    defined(__gfx1012__) || defined(__gfx1030__) || defined(__gfx1031__) ||                         \
    defined(__gfx1032__) || defined(__gfx1033__) || defined(__gfx1034__) ||                         \
    defined(__gfx1035__) || defined(__gfx1036__)
    return __builtin_amdgcn_sdot4(a, b, c, false);
#else
#pragma unroll
    for (int t = 0; t < 4; ++t) c += (int)(signed char)(a >> (8 * t)) * (int)(signed char)(b >> (8 * t));
    return c;
#endif
}

// 4 bytes at p (4-byte aligned).
__device__ __forceinline__ int qi_a4(const u8* p) { return *(const int*)p; }
// 4 rounded activation bytes (4-byte aligned).
__device__ __forceinline__ int qi_x(const signed char* q, int off) { return *(const int*)(q + off); }

// The 32 bits of hi:lo from bit `sh` (0 or 16) up.
__device__ __forceinline__ u32 qi_shift2(u32 lo, u32 hi, u32 sh) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    return __funnelshift_r(lo, hi, sh);
#else
    return __builtin_amdgcn_alignbit(hi, lo, sh);
#endif
}

// N little-endian 4-byte words starting at p, which is 2-byte aligned: N + 1 aligned 32-bit
// loads and funnel shifts where p is 2 past a 4-byte boundary, N loads where it is aligned
// (half the loads of 2-byte reads). Reads only 4-byte words holding some of the N words' bytes.
template <int N> __device__ __forceinline__ void qi_words(const u8* p, int* out) {
    const u32* a = (const u32*)((u64)p & ~(u64)3);
    const u32 sh = (u32)((u64)p & 2) * 8;
    u32 w[N + 1];
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = a[i];
    w[N] = a[sh != 0 ? N : N - 1];  // the last word again where p is aligned (sh = 0 ignores it)
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = (int)qi_shift2(w[i], w[i + 1], sh);
}

// N ints of activation bytes at q + off (aligned to 4 N bytes for N = 1, 2, 4, to 16 above),
// with the widest loads that alignment allows.
template <int N> __device__ __forceinline__ void qi_xs(const signed char* q, int off, int* out) {
    if (N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            const int4 v = *(const int4*)(q + off + 4 * i);
            out[i] = v.x; out[i + 1] = v.y; out[i + 2] = v.z; out[i + 3] = v.w;
        }
    } else if (N == 2) {
        const int2 v = *(const int2*)(q + off);
        out[0] = v.x; out[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) out[i] = qi_x(q, off + 4 * i);
    }
}

// Bits 0..3 of t moved to bit 4 of bytes 0..3 (the fifth bit of 4 consecutive 5-bit values).
__device__ __forceinline__ int qi_spread4(u32 t) { return (int)(((t * 0x00204081u) & 0x01010101u) << 4); }

// What a part's dot product reads of the rounded activations (each type's X): `x.load<HP>(q,
// ds, part)` loads it (from shared or global memory), `Q::dot_x(w, x)` multiplies it
// with the part's weights. Split so that a lane can keep its activations in registers across
// weight rows (qs_matvec's held items); `qi_dot` is the two in a row.
// The 32-element 4- and 5-bit types: a part's low-nibble and high-nibble activations (elements
// 4 part NI .. and 16 + 4 part NI ..) and the block's (d, d * sum q).
template <int NI> struct qi_x_lohi {
    int xl[NI], xh[NI];
    float2 a;
    template <int HP>  // 32-element blocks hold no padding
    __device__ __forceinline__ void load(const signed char* q, const float2* ds, int part) {
        qi_xs<NI>(q, 4 * part * NI, xl);
        qi_xs<NI>(q, 16 + 4 * part * NI, xh);
        a = ds[0];
    }
    // sum_i dot4(lo[i], xl[i]) + dot4(hi[i], xh[i]), started at QI_MAGIC.
    __device__ __forceinline__ int dot(const int* lo, const int* hi) const {
        int s = QI_MAGIC;
#pragma unroll
        for (int i = 0; i < NI; ++i) {
            s = qi_dot4(lo[i], xl[i], s);
            s = qi_dot4(hi[i], xh[i], s);
        }
        return s;
    }
};
// The 256-element types whose parts take LP = 4 NI elements of each of the four 32-element rows
// of half h of the block (q2k, q3k, q6k): those rows' activations and their d; with SUMS (q2k)
// also the sum of each row's LP activations, which q2k's mins multiply, computed once where the
// activations are held for many weight rows instead of once per weight row (H200, 14336 x 4096:
// 57.0-57.5% -> 59.6-60.3% of the copy). The same sums in place of q3k's and q6k's offset dot
// products measured slower for q3k (43.5 -> 42.5%) and made q6k's fused-norm product spill.
template <int P, int NI, bool SUMS> struct qi_x_rows {
    int x[4][NI];
    int xs[SUMS ? 4 : 1];
    float d[4];
    template <int HP>
    __device__ __forceinline__ void load(const signed char* q, const float2* ds, int part) {
        const int h = part / (P / 2), l0 = (part % (P / 2)) * (4 * NI);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            qi_xs<NI>(q, (128 + HP) * h + 32 * j + l0, x[j]);  // 4 NI-byte aligned (l0 a multiple of 4 NI)
            if (SUMS) {
                int t = 0;
#pragma unroll
                for (int i = 0; i < NI; ++i) t = qi_dot4(0x01010101, x[j][i], t);
                xs[j] = t;
            }
            d[j] = ds[4 * h + j].x;
        }
    }
};

// q4_0: part p holds qs ints p * NI .. (4 bytes = 4 low-nibble and 4 high-nibble values).
template <int P> struct qi_q4_0 {
    enum { QK = 32, BYTES = 18, PARTS = P, NI = 4 / P, SPAD = 16 };
    struct W { float d; int lo[NI], hi[NI]; };
    static __device__ __forceinline__ void load(const u8* b, int part, W& w) {
        int v[NI];
        if (P == 1) {
            // A whole block: the 5 aligned words from the one holding d (b is 2-byte aligned)
            // hold d and the 16 qs bytes, so d costs no load of its own (measured on an H200:
            // 66.8% of the copy against 64.8% with d loaded alone, 14336 x 4096).
            const u32* a = (const u32*)((u64)b & ~(u64)3);
            const bool two_past = ((u64)b & 2) != 0;
            u32 x[5];
#pragma unroll
            for (int i = 0; i < 5; ++i) x[i] = a[i];
            w.d = qk_f16_bits(two_past ? x[0] >> 16 : x[0]);
#pragma unroll
            for (int i = 0; i < NI; ++i) v[i] = (int)(two_past ? x[i + 1] : qi_shift2(x[i], x[i + 1], 16));
        } else {
            w.d = qk_f16(b);
            qi_words<NI>(b + 2 + 4 * part * NI, v);
        }
#pragma unroll
        for (int i = 0; i < NI; ++i) {
            w.lo[i] = v[i] & 0x0F0F0F0F;
            w.hi[i] = (int)(((u32)v[i] >> 4) & 0x0F0F0F0Fu);
        }
    }
    typedef qi_x_lohi<NI> X;
    static __device__ __forceinline__ float dot_x(const W& w, const X& x) {
        const int s = x.dot(w.lo, w.hi);
        return w.d * (x.a.x * qi_unmagic(s) - (8.0f / P) * x.a.y);
    }
};

template <int P> struct qi_q4_1 {
    enum { QK = 32, BYTES = 20, PARTS = P, NI = 4 / P, SPAD = 16 };
    struct W { float d, m; int lo[NI], hi[NI]; };
    static __device__ __forceinline__ void load(const u8* b, int part, W& w) {
        w.d = qk_f16(b);
        w.m = qk_f16(b + 2);
#pragma unroll
        for (int i = 0; i < NI; ++i) {
            const u32 v = (u32)qi_a4(b + 4 + 4 * (part * NI + i));
            w.lo[i] = (int)(v & 0x0F0F0F0Fu);
            w.hi[i] = (int)((v >> 4) & 0x0F0F0F0Fu);
        }
    }
    typedef qi_x_lohi<NI> X;
    static __device__ __forceinline__ float dot_x(const W& w, const X& x) {
        const int s = x.dot(w.lo, w.hi);
        return w.d * x.a.x * qi_unmagic(s) + (w.m / P) * x.a.y;
    }
};

template <int P> struct qi_q5_0 {
    enum { QK = 32, BYTES = 22, PARTS = P, NI = 4 / P, SPAD = 16 };
    struct W { float d; int lo[NI], hi[NI]; };
    static __device__ __forceinline__ void load(const u8* b, int part, W& w) {
        w.d = qk_f16(b);
        int qh1[1], vs[NI];
        qi_words<1>(b + 2, qh1);
        qi_words<NI>(b + 6 + 4 * part * NI, vs);
        const u32 qh = (u32)qh1[0];
#pragma unroll
        for (int i = 0; i < NI; ++i) {
            const int j = 4 * (part * NI + i);
            const u32 v = (u32)vs[i];
            w.lo[i] = (int)(v & 0x0F0F0F0Fu) | qi_spread4((qh >> j) & 0xFu);
            w.hi[i] = (int)((v >> 4) & 0x0F0F0F0Fu) | qi_spread4((qh >> (16 + j)) & 0xFu);
        }
    }
    typedef qi_x_lohi<NI> X;
    static __device__ __forceinline__ float dot_x(const W& w, const X& x) {
        const int s = x.dot(w.lo, w.hi);
        return w.d * (x.a.x * qi_unmagic(s) - (16.0f / P) * x.a.y);
    }
};

template <int P> struct qi_q5_1 {
    enum { QK = 32, BYTES = 24, PARTS = P, NI = 4 / P, SPAD = 16 };
    struct W { float d, m; int lo[NI], hi[NI]; };
    static __device__ __forceinline__ void load(const u8* b, int part, W& w) {
        w.d = qk_f16(b);
        w.m = qk_f16(b + 2);
        const u32 qh = (u32)qi_a4(b + 4);
#pragma unroll
        for (int i = 0; i < NI; ++i) {
            const int j = 4 * (part * NI + i);
            const u32 v = (u32)qi_a4(b + 8 + j);
            w.lo[i] = (int)(v & 0x0F0F0F0Fu) | qi_spread4((qh >> j) & 0xFu);
            w.hi[i] = (int)((v >> 4) & 0x0F0F0F0Fu) | qi_spread4((qh >> (16 + j)) & 0xFu);
        }
    }
    typedef qi_x_lohi<NI> X;
    static __device__ __forceinline__ float dot_x(const W& w, const X& x) {
        const int s = x.dot(w.lo, w.hi);
        return w.d * x.a.x * qi_unmagic(s) + (w.m / P) * x.a.y;
    }
};

// q8_0 and q8_1 weights: 8 qs ints (at byte OFF of the block), NI = 8 / P per part.
template <int P, int BYTES_, int OFF, bool A4> struct qi_q8 {
    enum { QK = 32, BYTES = BYTES_, PARTS = P, NI = 8 / P, SPAD = 16 };
    struct W { float d; int v[NI]; };
    static __device__ __forceinline__ void load(const u8* b, int part, W& w) {
        w.d = qk_f16(b);
        if (A4) {
#pragma unroll
            for (int i = 0; i < NI; ++i) w.v[i] = qi_a4(b + OFF + 4 * (part * NI + i));
        } else {
            qi_words<NI>(b + OFF + 4 * part * NI, w.v);
        }
    }
    struct X {
        int x[NI];
        float d;
        template <int HP>  // 32-element blocks hold no padding
        __device__ __forceinline__ void load(const signed char* q, const float2* ds, int part) {
            qi_xs<NI>(q, 4 * part * NI, x);
            d = ds[0].x;
        }
    };
    static __device__ __forceinline__ float dot_x(const W& w, const X& x) {
        int s = QI_MAGIC;
#pragma unroll
        for (int i = 0; i < NI; ++i) s = qi_dot4(w.v[i], x.x[i], s);
        return w.d * x.d * qi_unmagic(s);
    }
};
template <int P> using qi_q8_0 = qi_q8<P, 34, 2, false>;
template <int P> using qi_q8_1 = qi_q8<P, 36, 4, true>;

// The 6-bit scales and mins of q4k/q5k sub-blocks 2c and 2c + 1 from the 12 scale bytes as
// three little-endian words s0, s1, s2, without branches (a team's lanes take different c).
// Sub-blocks 0-3 hold their scales in bytes 0-3 and mins in 4-7 (6 bits each); sub-blocks 4-7
// their low 4 bits in the nibbles of bytes 8-11 and their top 2 bits in bits 6-7 of bytes 0-7.
__device__ __forceinline__ void qi_scales_k4(u32 s0, u32 s1, u32 s2, int c, float* sc, float* mn) {
    const u32 sh = 16u * (u32)(c & 1);  // the pair's two bytes in the low half
    const bool high = c >= 2;
    const u32 low_mask = high ? 0x0F0Fu : 0x3F3Fu, top_mask = high ? 0x3030u : 0u;
    const u32 s0h = s0 >> sh, s1h = s1 >> sh, s2h = s2 >> sh;
    const u32 scp = ((high ? s2h : s0h) & low_mask) | ((s0h >> 2) & top_mask);
    const u32 mnp = ((high ? s2h >> 4 : s1h) & low_mask) | ((s1h >> 2) & top_mask);
    sc[0] = qi_u8_float(scp & 0xFFu);
    sc[1] = qi_u8_float((scp >> 8) & 0xFFu);
    mn[0] = qi_u8_float(mnp & 0xFFu);
    mn[1] = qi_u8_float((mnp >> 8) & 0xFFu);
}

// q4k (HB = false) and q5k (HB = true): part p covers qs bytes p * BP .. of pair c = p * BP / 32
// (BP = 128 / P bytes, offset l0 in the pair's 32): low nibbles are sub-block 2c, elements
// 64c + l0 + .., high nibbles sub-block 2c + 1, elements 64c + 32 + l0 + ...
template <int P, bool HB> struct qi_qk45 {
    enum { QK = 256, BYTES = HB ? 176 : 144, PARTS = P, BP = 128 / P, NI = BP / 4, SPAD = HB ? 16 : 32 };
    static_assert(NI % 4 == 0, "whole 16-byte loads");
    struct W { float d, dmin, sc[2], mn[2]; int lo[NI], hi[NI]; };
    static __device__ __forceinline__ void load(const u8* b, int part, W& w) {
        const int c = part * BP / 32, l0 = part * BP % 32;
        const uint4 head = *(const uint4*)b;  // d, dmin, then the 12 scale bytes
        w.d = qk_f16_bits(head.x);
        w.dmin = qk_f16_bits(head.x >> 16);
        qi_scales_k4(head.y, head.z, head.w, c, w.sc, w.mn);
        const u8* qs = b + (HB ? 48 : 16) + part * BP;
#pragma unroll
        for (int i = 0; i < NI; i += 4) {
            const uint4 v4 = *(const uint4*)(qs + 4 * i);
            const u32 v[4] = {v4.x, v4.y, v4.z, v4.w};
            u32 h[4] = {0u, 0u, 0u, 0u};
            if (HB) {
                const uint4 h4 = *(const uint4*)(b + 16 + l0 + 4 * i);
                h[0] = h4.x; h[1] = h4.y; h[2] = h4.z; h[3] = h4.w;
            }
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                w.lo[i + t] = (int)((v[t] & 0x0F0F0F0Fu) | (((h[t] >> (2 * c)) & 0x01010101u) << 4));
                w.hi[i + t] = (int)(((v[t] >> 4) & 0x0F0F0F0Fu) | (((h[t] >> (2 * c + 1)) & 0x01010101u) << 4));
            }
        }
    }
    struct X {
        int xl[NI], xh[NI];
        float4 a;
        template <int HP>
        __device__ __forceinline__ void load(const signed char* q, const float2* ds, int part) {
            const int c = part * BP / 32, l0 = part * BP % 32;
            // 16 activation bytes per load (the offsets are multiples of 16).
            qi_xs<NI>(q, 64 * c + HP * (c >> 1) + l0, xl);
            qi_xs<NI>(q, 64 * c + HP * (c >> 1) + 32 + l0, xh);
            // The two sub-blocks' (d, d * sum q) pairs in one 16-byte load (ds is 16-byte aligned).
            a = *(const float4*)(ds + 2 * c);
        }
    };
    static __device__ __forceinline__ float dot_x(const W& w, const X& x) {
        int slo = QI_MAGIC, shi = QI_MAGIC;
#pragma unroll
        for (int i = 0; i < NI; ++i) {
            slo = qi_dot4(w.lo[i], x.xl[i], slo);
            shi = qi_dot4(w.hi[i], x.xh[i], shi);
        }
        const float frac = (float)BP / 32.0f;
        return w.d * (w.sc[0] * x.a.x * qi_unmagic(slo) + w.sc[1] * x.a.z * qi_unmagic(shi)) -
               w.dmin * frac * (w.mn[0] * x.a.y + w.mn[1] * x.a.w);
    }
};
template <int P> using qi_q4k = qi_qk45<P, false>;
template <int P> using qi_q5k = qi_qk45<P, true>;

// Byte b (0 .. 11) of three little-endian words, without indexing a register array.
__device__ __forceinline__ u32 qi_byte12(u32 w0, u32 w1, u32 w2, int b) {
    const u32 w = b < 4 ? w0 : (b < 8 ? w1 : w2);
    return (w >> (8 * (b & 3))) & 0xFFu;
}

// q2k and q3k: part p covers half h = p / (P / 2) of the block and l = l0 .. l0 + LP (LP = 64 /
// P <= 16, within one 16-element scale group) of each of its four 32-element rows j (elements
// 128 h + 32 j + l): quants from qs bytes 32 h + l (bits 2j, 2j + 1), scale index 8 h + 2 j +
// l0 / 16.
template <int P> struct qi_q2k {
    enum { QK = 256, BYTES = 84, PARTS = P, LP = 64 / P, NI = LP / 4, SPAD = 32 };
    static_assert(LP <= 16, "a part stays inside one 16-element scale group");
    struct W { float d, dmin; float sc[4], mn[4]; int v[4][NI]; };
    static __device__ __forceinline__ void load(const u8* b, int part, W& w) {
        const int h = part / (P / 2), l0 = (part % (P / 2)) * LP;
        w.d = qk_f16(b + 80);
        w.dmin = qk_f16(b + 82);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const u32 sc = b[8 * h + 2 * j + l0 / 16];
            w.sc[j] = qi_u8_float(sc & 0xF);
            w.mn[j] = qi_u8_float(sc >> 4);
        }
#pragma unroll
        for (int i = 0; i < NI; ++i) {
            const u32 q = (u32)qi_a4(b + 16 + 32 * h + l0 + 4 * i);
#pragma unroll
            for (int j = 0; j < 4; ++j) w.v[j][i] = (int)((q >> (2 * j)) & 0x03030303u);
        }
    }
    typedef qi_x_rows<P, NI, true> X;
    static __device__ __forceinline__ float dot_x(const W& w, const X& x) {
        float acc = 0.0f, mins = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            int s = QI_MAGIC;
#pragma unroll
            for (int i = 0; i < NI; ++i) s = qi_dot4(w.v[j][i], x.x[j][i], s);
            acc += w.sc[j] * x.d[j] * qi_unmagic(s);
            mins += w.mn[j] * x.d[j] * qi_unmagic(QI_MAGIC + x.xs[j]);
        }
        return w.d * acc - w.dmin * mins;
    }
};

// Offsets taken off a part's integer sum instead of off every weight byte: q3k's quants are held
// as q + 4 (0 .. 7) and q6k's as stored, q + 32 (0 .. 63); sum (q + c) x + dot4(-c, x) = sum q x,
// one dot product a word (four signed bytes of -4, of -32) instead of a subtraction per byte.
#define QI_MINUS4 (int)0xFCFCFCFCu
#define QI_MINUS32 (int)0xE0E0E0E0u

template <int P> struct qi_q3k {
    enum { QK = 256, BYTES = 110, PARTS = P, LP = 64 / P, NI = LP / 4, SPAD = 32 };
    static_assert(LP <= 16, "a part stays inside one 16-element scale group");
    struct W { float d; float sc[4]; int v[4][NI]; };
    static __device__ __forceinline__ void load(const u8* b, int part, W& w) {
        const int h = part / (P / 2), l0 = (part % (P / 2)) * LP;
        w.d = qk_f16(b + 108);
        int sw[3];
        qi_words<3>(b + 96, sw);
        const u32 s0 = (u32)sw[0], s1 = (u32)sw[1], s2 = (u32)sw[2];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int i = 8 * h + 2 * j + l0 / 16;
            const u32 lo = i < 8 ? (qi_byte12(s0, s1, s2, i) & 0xF) : (qi_byte12(s0, s1, s2, i - 8) >> 4);
            const u32 hi = (qi_byte12(s0, s1, s2, 8 + (i & 3)) >> (2 * (i >> 2))) & 3;
            w.sc[j] = qi_unmagic(QI_MAGIC + (int)(lo | (hi << 4)) - 32);
        }
        int qv[NI], mv[NI];
        qi_words<NI>(b + 32 + 32 * h + l0, qv);
        qi_words<NI>(b + l0, mv);
#pragma unroll
        for (int i = 0; i < NI; ++i) {
            const u32 q = (u32)qv[i];
            const u32 m = (u32)mv[i];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                // 2 low bits, plus 4 where the hmask bit is set: q + 4 in 0 .. 7 (dot_x takes
                // the 4 off through QI_MINUS4).
                w.v[j][i] = (int)(((q >> (2 * j)) & 0x03030303u) | (((m >> (4 * h + j)) & 0x01010101u) << 2));
            }
        }
    }
    typedef qi_x_rows<P, NI, false> X;
    static __device__ __forceinline__ float dot_x(const W& w, const X& x) {
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            int s = QI_MAGIC;
#pragma unroll
            for (int i = 0; i < NI; ++i) {
                s = qi_dot4(w.v[j][i], x.x[j][i], s);
                s = qi_dot4(QI_MINUS4, x.x[j][i], s);
            }
            acc += w.sc[j] * x.d[j] * qi_unmagic(s);
        }
        return w.d * acc;
    }
};

// q6k: part p covers half nh = p / (P / 2) of the block (elements 128 nh ..) and l = l0 .. l0 +
// LP (LP = 64 / P) of each of its four 32-element rows i: ql bytes 64 nh + l (rows 0, 2) and
// 64 nh + 32 + l (rows 1, 3), qh bytes 128 + 32 nh + l, scales 192 + 8 nh + l0 / 16 + 2 i.
// W holds the stored 6-bit values (q + 32); dot_x takes the 32 off through QI_MINUS32.
template <int P> struct qi_q6k {
    enum { QK = 256, BYTES = 210, PARTS = P, LP = 64 / P, NI = LP / 4, SPAD = 32 };
    // A part's LP elements of a row share one scale (16 elements each): 4 to 16 parts.
    static_assert(P == 4 || P == 8 || P == 16, "q6k parts: 4, 8 or 16");
    struct W { float d; float sc[4]; int v[4][NI]; };
    static __device__ __forceinline__ void load(const u8* b, int part, W& w) {
        const int nh = part / (P / 2), l0 = (part % (P / 2)) * LP;
        w.d = qk_f16(b + 208);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const u32 s2 = ((const unsigned short*)(b + 192 + 8 * nh))[i];
            w.sc[i] = qi_s8_float(s2 >> (8 * (l0 / 16)));
        }
        int lav[NI], lbv[NI], hv[NI];
        qi_words<NI>(b + 64 * nh + l0, lav);
        qi_words<NI>(b + 64 * nh + 32 + l0, lbv);
        qi_words<NI>(b + 128 + 32 * nh + l0, hv);
#pragma unroll
        for (int i = 0; i < NI; ++i) {
            const u32 la = (u32)lav[i];
            const u32 lb = (u32)lbv[i];
            const u32 h = (u32)hv[i];
            w.v[0][i] = (int)((la & 0x0F0F0F0Fu) | ((h & 0x03030303u) << 4));
            w.v[1][i] = (int)((lb & 0x0F0F0F0Fu) | (((h >> 2) & 0x03030303u) << 4));
            w.v[2][i] = (int)(((la >> 4) & 0x0F0F0F0Fu) | (((h >> 4) & 0x03030303u) << 4));
            w.v[3][i] = (int)(((lb >> 4) & 0x0F0F0F0Fu) | (((h >> 6) & 0x03030303u) << 4));
        }
    }
    typedef qi_x_rows<P, NI, false> X;
    static __device__ __forceinline__ float dot_x(const W& w, const X& x) {
        int s[4] = {QI_MAGIC, QI_MAGIC, QI_MAGIC, QI_MAGIC};
#pragma unroll
        for (int r = 0; r < 4; ++r) {
#pragma unroll
            for (int i = 0; i < NI; ++i) {
                s[r] = qi_dot4(w.v[r][i], x.x[r][i], s[r]);
                s[r] = qi_dot4(QI_MINUS32, x.x[r][i], s[r]);
            }
        }
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) acc += w.sc[i] * x.d[i] * qi_unmagic(s[i]);
        return w.d * acc;
    }
};

// Part `part` of a block's product with the activations q (the block's first, HP bytes of padding
// after every 128) and ds (its first 32-element block's pair).
template <typename Q, int HP = 0>
__device__ __forceinline__ float qi_dot(const typename Q::W& w, const signed char* q, const float2* ds, int part) {
    typename Q::X x;
    x.template load<HP>(q, ds, part);
    return Q::dot_x(w, x);
}

// 4 consecutive activations (aligned to 4 elements) as f32.
__device__ __forceinline__ void qi_load4(const f32* x, float* v) {
    const float4 a = *(const float4*)x;
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
}
__device__ __forceinline__ void qi_load4(const f16* x, float* v) {
    const uint2 a = *(const uint2*)x;
    v[0] = __half2float(__ushort_as_half((unsigned short)(a.x & 0xFFFF)));
    v[1] = __half2float(__ushort_as_half((unsigned short)(a.x >> 16)));
    v[2] = __half2float(__ushort_as_half((unsigned short)(a.y & 0xFFFF)));
    v[3] = __half2float(__ushort_as_half((unsigned short)(a.y >> 16)));
}
__device__ __forceinline__ void qi_load4(const bf16* x, float* v) {
    const uint2 a = *(const uint2*)x;
    v[0] = __uint_as_float(a.x << 16);
    v[1] = __uint_as_float(a.x & 0xFFFF0000u);
    v[2] = __uint_as_float(a.y << 16);
    v[3] = __uint_as_float(a.y & 0xFFFF0000u);
}

// quantize_q8x_{I}(u32 groups, const I* x, signed char* q, float2* ds): x holds groups * 4
// elements (16-byte aligned for f32, 8-byte for f16/bf16) in 32-element blocks; block b becomes
// q[32 b ..] = rint(x * (127 / amax)) (0 where amax = 0) and ds[b] = (amax / 127, amax / 127 *
// sum(q)). 8 threads per block (8 consecutive lanes: their xor shuffles stay inside a team),
// 4 elements each.
// Rounds the 4 activations v of this lane, one of 8 consecutive lanes (their xor shuffles stay
// inside a team) that hold a 32-element block, every one of which calls this: `packed` gets
// the lane's 4 signed bytes, `ds` the block's (d, d * sum q).
__device__ __forceinline__ void qi_round4(const float* v, int& packed, float2& ds) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int mask = 1; mask < 8; mask <<= 1) amax = fmaxf(amax, __shfl_xor(amax, mask));
    const float id = amax == 0.0f ? 0.0f : 127.0f / amax;
    int sum = 0;
    packed = 0;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        const int qt = (int)rintf(v[t] * id);
        sum += qt;
        packed |= (qt & 0xFF) << (8 * t);
    }
#pragma unroll
    for (int mask = 1; mask < 8; mask <<= 1) sum += __shfl_xor(sum, mask);
    const float d = amax / 127.0f;
    ds = make_float2(d, d * (float)sum);
}

template <typename I>
__device__ __forceinline__ void qi_quantize(u32 groups, const I* x, signed char* q, float2* ds) {
    const u32 g = (u32)blockIdx.x * blockDim.x + threadIdx.x;
    // Whole blocks of 8 groups: every lane of an 8-lane block takes part in the shuffles.
    const bool live = g < groups;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live) qi_load4(x + (u64)g * 4, v);
    int packed;
    float2 f;
    qi_round4(v, packed, f);
    if (live) {
        ((int*)q)[g] = packed;
        if ((g & 7) == 0) ds[g / 8] = f;
    }
}

// swiglu_q8x_{I}(u32 groups, u32 half, const I* x, I* out, signed char* q, float2* ds):
// candle-nn's swiglu over rows of 2 half elements (half a multiple of 32; groups = rows half / 4)
// and its result rounded as quantize_q8x rounds it, in one launch: the decode step's gated
// activations then reach the down product already rounded (qmatvec_s8r_m1_*), instead of
// every block of that product rounding all of them again. Thread g takes 4 consecutive outputs
// (8 consecutive lanes a 32-element block). The arithmetic is nn.hip's nn_swiglu_loop (silu
// rounded to I, times b, rounded to I; conformance asserts the same bits), and the rounding
// reads those I values back as quantize_q8x would.
template <typename I>
__device__ __forceinline__ void qi_swiglu_round(u32 groups, u32 half, const I* x, I* out,
                                                signed char* q, float2* ds) {
    const u32 g = (u32)blockIdx.x * blockDim.x + threadIdx.x;
    const bool live = g < groups;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live) {
        const u32 row = g / (half / 4), j = (g - row * (half / 4)) * 4;
        const I* a = x + (u64)row * 2 * half + j;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const float av = rk_to_compute(a[t]);
            const float bv = rk_to_compute(a[half + t]);
            const float silu = rk_to_compute(rk_from_compute<I>(av / (1.0f + rk_exp(-av))));
            const I o = rk_from_compute<I>(silu * bv);
            out[(u64)g * 4 + t] = o;
            v[t] = rk_to_compute(o);
        }
    }
    int packed;
    float2 f;
    qi_round4(v, packed, f);
    if (live) {
        ((int*)q)[g] = packed;
        if ((g & 7) == 0) ds[g / 8] = f;
    }
}

#define QI_SWIGLU_KERNEL(INAME, ITYPE)                                                           \
    RK_KERNEL void __launch_bounds__(256)                                                        \
        swiglu_q8x_##INAME(u32 groups, u32 half, const ITYPE* x, ITYPE* out, signed char* q,     \
                           float2* ds) {                                                         \
        rk_overlapped_entry();                                                                   \
        qi_swiglu_round<ITYPE>(groups, half, x, out, q, ds);                                     \
    }

#define QI_BLOCK 128
// Columns per block (measured on an H100: 2, 4 and 8 tried; 2 is best or level for every type).
#ifndef QI_CPB
#define QI_CPB 2
#endif

// Block b computes columns QI_CPB b .. for all m rows: its 128 lanes stride over the (block,
// part) items of the row, each lane loading its part of every column before the products, and
// the lanes' sums meet in shared memory.
template <typename Q, typename I>
__device__ __forceinline__ void qi_matvec(u32 m, u32 n, u32 k, const u8* w, const signed char* xq,
                          const float2* xds, I* y) {
    __shared__ float red[QI_BLOCK / QK_TEAM][QK_MAX_M * QI_CPB];
    const u32 col0 = blockIdx.x * QI_CPB;
    const u32 cols = min((u32)QI_CPB, n - col0);
    const u64 row_bytes = (u64)(k / Q::QK) * Q::BYTES;
    const u32 blocks = k / Q::QK;
    // Items (block, part) t, t + QI_BLOCK, ...: the part is the thread's own.
    static_assert(QI_BLOCK % Q::PARTS == 0, "parts divide the block");
    const int part = (int)(threadIdx.x % Q::PARTS);
    float acc[QK_MAX_M][QI_CPB];
#pragma unroll
    for (int r = 0; r < QK_MAX_M; ++r)
#pragma unroll
        for (int c = 0; c < QI_CPB; ++c) acc[r][c] = 0.0f;
    const u8* w0 = w + (u64)col0 * row_bytes;
    QI_UNROLL_PRAGMA
    for (u32 blk = threadIdx.x / Q::PARTS; blk < blocks; blk += QI_BLOCK / Q::PARTS) {
        typename Q::W wv[QI_CPB];
#pragma unroll
        for (u32 c = 0; c < QI_CPB; ++c)
            if (c < cols) Q::load(w0 + c * row_bytes + (u64)blk * Q::BYTES, part, wv[c]);
#pragma unroll
        for (u32 r = 0; r < QK_MAX_M; ++r) {
            if (r < m) {
                const signed char* q = xq + (u64)r * k + (u64)blk * Q::QK;
                const float2* ds = xds + (u64)r * (k / 32) + (u64)blk * (Q::QK / 32);
#pragma unroll
                for (u32 c = 0; c < QI_CPB; ++c)
                    if (c < cols) acc[r][c] += qi_dot<Q>(wv[c], q, ds, part);
            }
        }
    }
    const int lane = (int)(threadIdx.x % QK_TEAM), team = (int)(threadIdx.x / QK_TEAM);
#pragma unroll
    for (u32 r = 0; r < QK_MAX_M; ++r) {
        if (r < m) {
#pragma unroll
            for (u32 c = 0; c < QI_CPB; ++c) {
                const float s = qk_team_sum(acc[r][c]);
                if (lane == 0) red[team][r * QI_CPB + c] = s;
            }
        }
    }
    __syncthreads();
    const u32 t = threadIdx.x;
    if (t < m * QI_CPB && t % QI_CPB < cols) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < QI_BLOCK / QK_TEAM; ++i) s += red[i][t];
        y[(u64)(t / QI_CPB) * n + col0 + t % QI_CPB] = rk_from_compute<I>(s);
    }
}

#define QI_QUANTIZE_KERNEL(INAME, ITYPE)                                                         \
    RK_KERNEL void __launch_bounds__(256)                                                        \
        quantize_q8x_##INAME(u32 groups, const ITYPE* x, signed char* q, float2* ds) {           \
        qi_quantize<ITYPE>(groups, x, q, ds);                                                    \
    }

#define QI_MATVEC_KERNEL(QNAME, QTYPE, INAME, ITYPE)                                             \
    RK_KERNEL void __launch_bounds__(QI_BLOCK)                                                   \
        qmatvec_i8_##QNAME##_##INAME(u32 m, u32 n, u32 k, const u8* w, const signed char* xq,    \
                                     const float2* xds, ITYPE* y) {                              \
        qi_matvec<QTYPE, ITYPE>(m, n, k, w, xq, xds, y);                                         \
    }

// ---------------------------------------------------------------------------------------------
// Staged integer matrix-vector products: one launch, weights streamed with 16-byte loads
// ---------------------------------------------------------------------------------------------
//
// qmatvec_s8_{Q}_{I}(u32 m, u32 n, u32 k, const u8* w, const I* x, I* y),
// qmatvec_s8_m1_{Q}_{I} (the same arguments and `const I* add`, m = 1 only: the decode step's
//     product; add, when not null, a residual added to the outputs: see qs_row_args), and
// qmatvec_s8r_m1_{Q}_{I}(u32 m, u32 n, u32 k, const u8* w, const i8* xq, const float2* xds, I* y,
//     const I* add) (m = 1, the activations already rounded by quantize_q8x or swiglu_q8x:
//     copied into shared memory instead of rounded there; xq and xds 16-byte aligned), and
// qmatvec_s8n_m1_{Q}_{I}(u32 n, u32 k, const u8* w, const I* x, const I* r, const I* alpha,
//     float eps, I* sum, I* y) (one row: the decode step's residual add and rms_norm done by the
//     product, qs_norm_round: y = rms_norm(x + r, alpha, eps) W^T and sum = x + r, or y =
//     rms_norm(x, alpha, eps) W^T where r and sum are null; x, r, alpha, sum 16-byte aligned)
//     The product of qmatvec_i8 (the same rounded activations x', the same per-block integer
//     dot products) in one launch: every block first rounds the m activation rows into its
//     shared memory (as quantize_q8x would), then each team of 32 lanes owns whole weight rows
//     (rows team, team + teams, ..., so one team sums each output and the result does not
//     depend on the grid) and streams them through its part of shared memory in stages of
//     QS_SB blocks: the team reads a stage's bytes with coalesced 16-byte loads (whatever the
//     block size: 18-, 34- and 210-byte blocks allow only 2-byte loads in place), holds the
//     next QS_DEPTH stages in registers while it computes the current one from shared memory, and the
//     lanes take the stage's (block, part) items as qmatvec_i8's do.
//     Dynamic shared memory: qs_act_bytes<Q::SPAD>(m, k) + QS_TEAMS * stage capacity (the wrapper's
//     `staged_shared_bytes`); grid: any number of blocks of QS_TEAMS * 32 threads (persistent:
//     the wrapper launches a few per multiprocessor). w is 16-byte aligned, x too.
#ifndef QS_TEAMS
#define QS_TEAMS 8
#endif
// Activation groups (of 4) each thread loads before rounding them.
#ifndef QS_ROUND_BATCH
#define QS_ROUND_BATCH 4
#endif
// 1: rows of one stage keep a lane's activations in registers (qs_matvec's held items). On
// NVIDIA (measured on an H200, quantized.md); AMD's kernels read them from LDS as before: the
// held items cost 30-60 more registers, which on AMD would mean fewer waves, not yet measured.
#ifndef QS_HOLD
#if defined(__HIP_PLATFORM_NVIDIA__)
#define QS_HOLD 1
#else
#define QS_HOLD 0
#endif
#endif
// 1: held items of a full stage are computed without a branch around each (see qs_matvec).
#ifndef QS_HOLD_FULL
#define QS_HOLD_FULL 1
#endif
// One item of the stage loop at a time (measured: unrolling by 2 or 4 was slower).
#ifndef QS_UNROLL
#define QS_UNROLL 1
#endif
#define QS_PRAGMA_STR(x) _Pragma(#x)
#define QS_PRAGMA_UNROLL(n) QS_PRAGMA_STR(unroll n)

// Orders a team's shared-memory writes before its lanes' later reads (and reads before later
// writes): a warp barrier on NVIDIA; on AMD a team is (half) a wavefront, whose LDS accesses
// are issued in order, so a wavefront-scope fence that keeps the compiler from moving them.
__device__ __forceinline__ void qs_team_sync() {
#if defined(__HIP_PLATFORM_NVIDIA__)
    __syncwarp();
#else
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
    __builtin_amdgcn_wave_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#endif
}

// The 16 bytes at p (16-byte aligned), of which only those before `end` (even) are read: the
// last bytes of the weights need not fill a 16-byte piece.
__device__ __forceinline__ uint4 qs_load16(const u8* p, const u8* end) {
    if (p + 16 <= end) return *(const uint4*)p;
    u32 v[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < 8; ++j)
        if (p + 2 * j < end) v[j / 2] |= (u32)((const unsigned short*)p)[j] << (16 * (j & 1));
    return make_uint4(v[0], v[1], v[2], v[3]);
}

// The rounded activations in shared memory have SPAD bytes of padding after every 128 (the
// weight type's SPAD, 16 or 32): without it the lanes of one 16-byte load read activation bytes
// 128 apart (a q6k block's two halves, q4k's sub-blocks 0-3 and 4-7, 32-element blocks 4 apart),
// which share banks; measured on an H200 before the padding, 59% (q6k) and 24% (q4k) of the
// staged product's shared-memory wavefronts were such conflicts.
// Bytes one padded row of k activations takes.
template <int SPAD> __device__ __forceinline__ u32 qs_arow(u32 k) { return k + SPAD * ((k + 127) / 128); }
// Where activation byte c of a row lies in its padded row.
template <int SPAD> __device__ __forceinline__ u32 qs_apad(u32 c) { return c + SPAD * (c / 128); }
// Shared bytes of m rounded activation rows of k: the padded signed bytes, then the (d, d * sum
// q) pairs, rounded up to 16. The wrapper (`staged_activation_pad` in int_matvec.rs) allocates
// each type's SPAD, so SPAD must stay a function of the type alone: a larger SPAD than the
// wrapper's would write past the block's shared memory. The values suit the committed part
// counts (QS_P_*): other counts stay correct but may conflict again (q4k and q5k want 32 at 8
// parts, 16 at 4).
template <int SPAD> __device__ __forceinline__ u32 qs_act_bytes(u32 m, u32 k) {
    return (m * qs_arow<SPAD>(k) + m * (k / 32) * 8 + 15) / 16 * 16;
}

template <typename Q, int SB> struct qs_stage {
    // A stage's bytes start at most 14 bytes past a 16-byte boundary (blocks have even sizes).
    enum { CAP = (SB * Q::BYTES + 14 + 15) / 16 * 16, PIECES = CAP / 16, LOADS = (PIECES + QK_TEAM - 1) / QK_TEAM };
};

// Where a staged product's activations come from (qs_matvec's SRC).
// QS_SRC_X: x, rounded into shared memory by every block.
// QS_SRC_ROUNDED: already rounded (xq, xds as quantize_q8x writes them; x unused), copied into
//     shared memory.
// QS_SRC_NORM: one row x (plus a residual), rms-normalised by every block before it is rounded
//     (qs_norm_round, qmatvec_s8n_m1_*).
// QS_SRC_GATHER: as QS_SRC_X, but activation row r is row extra.xrows[r] of x and output row r
//     is row extra.yrows[r] of y (qmoe_s8g: the pairs of one expert).
#define QS_SRC_X 0
#define QS_SRC_ROUNDED 1
#define QS_SRC_NORM 2
#define QS_SRC_GATHER 3

// The one-row (m = 1) products' extra operands. The residual add and rms_norm of a QS_SRC_NORM
// product's prologue: r the residual (null: the norm of x alone), alpha the norm's weights, sum
// the output of x + r (null without r; written by block 0). The epilogue's `add` (any m = 1
// product; null: none): a residual added to the outputs, y[c] = round(round(x W^T)[c] + add[c]),
// the bits of the product followed by candle's `add`.
template <typename I> struct qs_row_args {
    const I* r;
    const I* alpha;
    float eps;
    I* sum;
    const I* add;
    // QS_SRC_GATHER only: the rows of x and y of the product's m rows.
    const u32* xrows;
    const u32* yrows;
};

// 4 consecutive values (already rounded to I) stored as I, 16-byte aligned for f32, 8 for f16/bf16.
__device__ __forceinline__ void qi_store4(f32* p, const float* v) {
    *(float4*)p = make_float4(v[0], v[1], v[2], v[3]);
}
template <typename H> __device__ __forceinline__ void qi_store4_half(H* p, const float* v) {
    unsigned short h[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        const H e = rk_from_compute<H>(v[t]);
        h[t] = *(const unsigned short*)&e;
    }
    *(uint2*)p = make_uint2((u32)h[0] | ((u32)h[1] << 16), (u32)h[2] | ((u32)h[3] << 16));
}
__device__ __forceinline__ void qi_store4(f16* p, const float* v) { qi_store4_half(p, v); }
__device__ __forceinline__ void qi_store4(bf16* p, const float* v) { qi_store4_half(p, v); }

// The QS_SRC_NORM prologue: one row of k, s = x + r rounded to I (s = x without r; block 0 writes
// s to extra.sum), then s * (1 / sqrt(mean(s^2) + eps)) * alpha rounded to I, rounded into shared
// memory as quantize_q8x rounds it. The arithmetic of nn.hip's add_rms_norm / rms_norm, except
// that the squares are summed in another order (the norm's last bits may differ). Where the
// row is one batch (k <= 4 QS_ROUND_BATCH blockDim.x) its sums stay in registers between the
// two passes; longer rows are read again. Every lane runs every iteration (the rounding's
// shuffles need whole 8-lane groups).
template <typename I, int SPAD>
__device__ __forceinline__ void qs_norm_round(u32 k, const I* x, const qs_row_args<I>& extra,
                                              signed char* aq, float2* ads) {
    __shared__ float team_sums[QS_TEAMS];
    const u32 groups = k / 4, bd = blockDim.x, batch = QS_ROUND_BATCH * bd;
    const bool held = groups <= batch;
    float v[QS_ROUND_BATCH][4], a[QS_ROUND_BATCH][4];
    // The batch from group g0: v the sums (0 past the row), a alpha where `with_alpha`.
    auto load = [&](u32 g0, bool with_alpha) {
#pragma unroll
        for (int b = 0; b < QS_ROUND_BATCH; ++b) {
            const u32 g = g0 + b * bd + threadIdx.x;
#pragma unroll
            for (int t = 0; t < 4; ++t) v[b][t] = a[b][t] = 0.0f;
            if (g < groups) {
                qi_load4(x + (u64)g * 4, v[b]);
                if (extra.r != nullptr) {
                    float rv[4];
                    qi_load4(extra.r + (u64)g * 4, rv);
#pragma unroll
                    for (int t = 0; t < 4; ++t)
                        v[b][t] = rk_to_compute(rk_from_compute<I>(v[b][t] + rv[t]));
                }
                if (with_alpha) qi_load4(extra.alpha + (u64)g * 4, a[b]);
            }
        }
    };
    float ss = 0.0f;
    for (u32 g0 = 0; g0 < groups; g0 += batch) {
        load(g0, held);
#pragma unroll
        for (int b = 0; b < QS_ROUND_BATCH; ++b) {
#pragma unroll
            for (int t = 0; t < 4; ++t) ss += v[b][t] * v[b][t];
            const u32 g = g0 + b * bd + threadIdx.x;
            if (extra.sum != nullptr && blockIdx.x == 0 && g < groups) qi_store4(extra.sum + (u64)g * 4, v[b]);
        }
    }
    ss = qk_team_sum(ss);
    if (threadIdx.x % QK_TEAM == 0) team_sums[threadIdx.x / QK_TEAM] = ss;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int t = 0; t < QS_TEAMS; ++t) total += team_sums[t];
    const float inv = 1.0f / rk_sqrt(total / (float)k + extra.eps);
    for (u32 g0 = 0; g0 < groups; g0 += batch) {
        if (!held) load(g0, true);
#pragma unroll
        for (int b = 0; b < QS_ROUND_BATCH; ++b) {
            const u32 g = g0 + b * bd + threadIdx.x;
            float o[4];
#pragma unroll
            for (int t = 0; t < 4; ++t) o[t] = rk_to_compute(rk_from_compute<I>(v[b][t] * inv * a[b][t]));
            int packed;
            float2 f;
            qi_round4(o, packed, f);
            if (g < groups) {
                *(int*)(aq + qs_apad<SPAD>(4 * g)) = packed;
                if ((g & 7) == 0) ads[g / 8] = f;
            }
        }
    }
}

// MAXM: the most activation rows the instantiation takes (1 for the decode kernels, whose
// loops and addresses then serve one row only; QK_MAX_M otherwise).
// SRC: where the activations come from (QS_SRC_*); extra's norm operands are read for QS_SRC_NORM
// only, its `add` by every one-row product.
template <typename Q, typename I, int SB, int DEPTH, int MAXM, int SRC>
__device__ __forceinline__ void qs_matvec(u32 m, u32 n, u32 k, const u8* w, const I* x,
                                          const signed char* xq, const float2* xds,
                                          const qs_row_args<I>& extra, I* y) {
    static_assert(SRC != QS_SRC_NORM || MAXM == 1, "the norm prologue takes one row");
    typedef qs_stage<Q, SB> S;
    static_assert(DEPTH >= 1, "at least one stage in flight");
    if (MAXM == 1) m = 1;
    extern __shared__ __attribute__((aligned(16))) u8 qs_smem[];
    const int lane = (int)(threadIdx.x % QK_TEAM), team = (int)(threadIdx.x / QK_TEAM);
    // A team's items (block, part) are lane, lane + 32, ...: each lane keeps one part (and
    // whatever of it does not depend on the block, such as q4k's scale positions).
    static_assert(QK_TEAM % Q::PARTS == 0, "parts divide a team");
    const int part = lane % Q::PARTS;
    // The activations, padded (see qs_apad): byte e of the m rows of k lies at act_at(e).
    enum { SP = Q::SPAD };
    const u32 arow = qs_arow<SP>(k);
    signed char* aq = (signed char*)qs_smem;
    auto act_at = [&](u32 e) {
        const u32 r = MAXM == 1 ? 0u : e / k;
        return aq + r * arow + qs_apad<SP>(e - r * k);
    };
    float2* ads = (float2*)(qs_smem + m * arow);
    u8* stage = qs_smem + qs_act_bytes<SP>(m, k) + team * S::CAP;
    const u32 bpr = k / Q::QK, stages = (bpr + SB - 1) / SB;
    const u64 row_bytes = (u64)bpr * Q::BYTES;
    const u8* w_end = w + (u64)n * row_bytes;
    const u32 teams = gridDim.x * QS_TEAMS;

    // QS_DEPTH stages in flight, slot by slot: slot d holds the stage (pre_row[d], pre_s[d])
    // (a row past n: empty), its 16-byte pieces (this lane's share), how many pieces and where
    // its first block starts in them. Rows of few stages (a 4096-column product is one Q4K
    // stage a row) make a team's stages a chain of DRAM round trips: a deeper ring overlaps them.
    uint4 pre[DEPTH][S::LOADS];
    u32 pre_pieces[DEPTH], pre_off[DEPTH], pre_row[DEPTH], pre_s[DEPTH];
    auto fetch = [&](int d, u32 row, u32 s) {
        const u8* start = w + (u64)row * row_bytes + (u64)s * SB * Q::BYTES;
        const u32 len = min((u32)SB, bpr - s * SB) * Q::BYTES;
        // Pointer arithmetic (not an integer round trip), so that the compiler keeps the
        // weights' address space.
        pre_off[d] = (u32)((u64)start & 15);
        const u8* a = start - pre_off[d];
        pre_pieces[d] = (pre_off[d] + len + 15) / 16;
        if (a + 16 * pre_pieces[d] <= w_end) {
#pragma unroll
            for (int j = 0; j < S::LOADS; ++j) {
                const u32 i = (u32)lane + QK_TEAM * j;
                if (i < pre_pieces[d]) pre[d][j] = *(const uint4*)(a + 16 * i);
            }
        } else {  // the weights' last stage: its last piece may end before 16 bytes
#pragma unroll
            for (int j = 0; j < S::LOADS; ++j) {
                const u32 i = (u32)lane + QK_TEAM * j;
                if (i < pre_pieces[d]) pre[d][j] = qs_load16(a + 16 * i, w_end);
            }
        }
    };
    // The next stage to fetch; once its row is past n it stays there.
    u32 next_row = blockIdx.x * QS_TEAMS + team, next_s = 0;
    // Slot d takes the next stage (or is left empty).
    auto refill = [&](int d) {
        pre_row[d] = next_row;
        pre_s[d] = next_s;
        if (next_row < n) {
            fetch(d, next_row, next_s);
            if (++next_s == stages) {
                next_s = 0;
                next_row += teams;
            }
        }
    };
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) refill(d);
    // Only the weights were read so far (they are never written by the kernel just before an
    // overlapped product: see `rocm_kernels::quantized`); the activations come after the wait.
    rk_wait_previous();
    rk_release_next();

    if (SRC == QS_SRC_NORM) {
        qs_norm_round<I, SP>(k, x, extra, aq, ads);
    } else if (SRC == QS_SRC_ROUNDED) {
        // The rounded activations, copied: m k bytes (a multiple of 16) and m k / 32 pairs, 4
        // pieces a thread loaded before any is stored (their loads in flight together; named
        // values, not an array, which AMD's compiler put in scratch).
        const u32 pieces = m * k / 16, pairs = m * k / 32, bd = blockDim.x;
        const uint4* src = (const uint4*)xq;
        // Piece i's place in the padded rows (a piece never straddles a row or a pad: k and 128
        // are multiples of 16).
        auto dst = [&](u32 i) { return (uint4*)act_at(16 * i); };
        const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
        for (u32 i = threadIdx.x; i < pieces; i += 4 * bd) {
            const uint4 a = src[i];
            const uint4 b = i + bd < pieces ? src[i + bd] : zero;
            const uint4 c = i + 2 * bd < pieces ? src[i + 2 * bd] : zero;
            const uint4 e = i + 3 * bd < pieces ? src[i + 3 * bd] : zero;
            *dst(i) = a;
            if (i + bd < pieces) *dst(i + bd) = b;
            if (i + 2 * bd < pieces) *dst(i + 2 * bd) = c;
            if (i + 3 * bd < pieces) *dst(i + 3 * bd) = e;
        }
        for (u32 i = threadIdx.x; i < pairs; i += bd) ads[i] = xds[i];
    } else {
        // The activations, rounded into shared memory by the whole block (every lane runs every
        // iteration: the rounding's shuffles need whole 8-lane groups). QS_ROUND_BATCH groups per
        // thread are loaded before any is rounded, so that their loads are in flight together.
        const u32 groups = m * k / 4;
        for (u32 g0 = 0; g0 < groups; g0 += QS_ROUND_BATCH * blockDim.x) {
            float v[QS_ROUND_BATCH][4];
#pragma unroll
            for (int b = 0; b < QS_ROUND_BATCH; ++b) {
                const u32 g = g0 + b * blockDim.x + threadIdx.x;
                v[b][0] = v[b][1] = v[b][2] = v[b][3] = 0.0f;
                if (g < groups) {
                    if (SRC == QS_SRC_GATHER) {
                        const u32 r = 4 * g / k;
                        qi_load4(x + (u64)extra.xrows[r] * k + (4 * g - r * k), v[b]);
                    } else {
                        qi_load4(x + (u64)g * 4, v[b]);
                    }
                }
            }
#pragma unroll
            for (int b = 0; b < QS_ROUND_BATCH; ++b) {
                const u32 g = g0 + b * blockDim.x + threadIdx.x;
                int packed;
                float2 f;
                qi_round4(v[b], packed, f);
                if (g < groups) {
                    *(int*)act_at(4 * g) = packed;
                    if ((g & 7) == 0) ads[g / 8] = f;
                }
            }
        }
    }
    __syncthreads();

    // Held items: where a row is one stage (k <= SB QK: every row of a 4096-column product), a
    // lane's items are the same blocks of every row, so one row's activations are loaded into
    // registers once (`X::load`) instead of from shared memory for every weight row. Types whose
    // held activations would take more than 48 registers (q2k, q3k) read them every time.
    enum { HOLD_ITEMS = SB * Q::PARTS / QK_TEAM };
    enum { HOLD = QS_HOLD && MAXM == 1 && HOLD_ITEMS * sizeof(typename Q::X) <= 48 * 4 };
    const bool held = HOLD && stages == 1;
    // The block of a lane's held item j (its items are lane, lane + 32, ... of the stage).
    auto held_blk = [&](int j) { return (u32)lane / Q::PARTS + (u32)j * (QK_TEAM / Q::PARTS); };
    typename Q::X hx[HOLD ? HOLD_ITEMS : 1];
    if (held) {
#pragma unroll
        for (int j = 0; j < (HOLD ? HOLD_ITEMS : 1); ++j) {
            const u32 blk = held_blk(j);
            if (blk < bpr) hx[j].template load<SP>(aq + qs_apad<SP>(blk * Q::QK), ads + blk * (Q::QK / 32), part);
        }
    }

    float acc[MAXM];
#pragma unroll
    for (int r = 0; r < MAXM; ++r) acc[r] = 0.0f;
    // Slots are consumed in order and refilled in order, so once slot 0 is empty at the start
    // of a pass every slot is.
    while (pre_row[0] < n) {
#pragma unroll
        for (int d = 0; d < DEPTH; ++d) {
            if (pre_row[d] >= n) continue;
            qs_team_sync();  // the previous stage's readers are done
#pragma unroll
            for (int j = 0; j < S::LOADS; ++j) {
                const u32 i = (u32)lane + QK_TEAM * j;
                if (i < pre_pieces[d]) ((uint4*)stage)[i] = pre[d][j];
            }
            qs_team_sync();
            const u32 cur_row = pre_row[d], cur_s = pre_s[d], cur_off = pre_off[d];
            refill(d);  // in flight, with the other slots, while this stage is computed
            const u32 blocks = min((u32)SB, bpr - cur_s * SB);
            const u32 blk0 = cur_s * SB;
            if (held && QS_HOLD_FULL && blocks == SB) {
                // A full stage: every lane has all its items, so their weights are read from
                // shared memory together, without a branch around each item, and the items'
                // arithmetic interleaves (the same order of sums).
                typename Q::W wv[HOLD ? HOLD_ITEMS : 1];
#pragma unroll
                for (int j = 0; j < (HOLD ? HOLD_ITEMS : 1); ++j)
                    Q::load(stage + cur_off + held_blk(j) * Q::BYTES, part, wv[j]);
#pragma unroll
                for (int j = 0; j < (HOLD ? HOLD_ITEMS : 1); ++j) acc[0] += Q::dot_x(wv[j], hx[j]);
            } else if (held) {  // the same items, their activations in hx (cur_s = 0, blocks = bpr)
#pragma unroll
                for (int j = 0; j < (HOLD ? HOLD_ITEMS : 1); ++j) {
                    const u32 blk = held_blk(j);
                    if (blk < blocks) {
                        typename Q::W wv;
                        Q::load(stage + cur_off + blk * Q::BYTES, part, wv);
                        acc[0] += Q::dot_x(wv, hx[j]);
                    }
                }
            } else {
                // Items (block, part) lane, lane + 32, ... of the stage: the part is the lane's own.
                QS_PRAGMA_UNROLL(QS_UNROLL)
                for (u32 blk = (u32)lane / Q::PARTS; blk < blocks; blk += QK_TEAM / Q::PARTS) {
                    typename Q::W wv;
                    Q::load(stage + cur_off + blk * Q::BYTES, part, wv);
#pragma unroll
                    for (u32 r = 0; r < MAXM; ++r) {
                        if (r < m) {
                            const signed char* q = aq + r * arow + qs_apad<SP>((blk0 + blk) * Q::QK);
                            const float2* ds = ads + r * (k / 32) + (blk0 + blk) * (Q::QK / 32);
                            acc[r] += qi_dot<Q, SP>(wv, q, ds, part);
                        }
                    }
                }
            }
            if (cur_s == stages - 1) {
#pragma unroll
                for (u32 r = 0; r < MAXM; ++r) {
                    if (r < m) {
                        const float t = qk_team_sum(acc[r]);
                        if (lane == 0) {
                            I out = rk_from_compute<I>(t);
                            if (MAXM == 1 && extra.add != nullptr)
                                out = rk_from_compute<I>(rk_to_compute(out) + rk_to_compute(extra.add[cur_row]));
                            const u64 yr = SRC == QS_SRC_GATHER ? (u64)extra.yrows[r] : (u64)r;
                            y[yr * n + cur_row] = out;
                        }
                        acc[r] = 0.0f;
                    }
                }
            }
        }
    }
}

// qmoe_s8_{Q}_{I}(u32 pairs, u32 topk, u32 x_rows, u32 n, u32 k, u32 experts, const u32* ids,
//                 const u8* w, const I* x, I* y, u32* err)
//     qmoe's product (the same arguments) as qmatvec_s8_m1 computes one row: grid (any, pairs);
//     the blocks of grid row p round pair p's activation row into their shared memory and
//     stream the n rows of expert ids[p], so every pair gets qmatvec_s8_m1's bits for its row
//     and expert. An id >= experts is recorded in `err` (op code 7) and the pair's outputs are
//     zeros. Dynamic shared memory as qmatvec_s8_m1's for one row of k.
template <typename Q, typename I, int SB, int DEPTH>
__device__ __forceinline__ void qs_moe(u32 pairs, u32 topk, u32 x_rows, u32 n, u32 k, u32 experts,
                                       const u32* ids, const u8* w, const I* x, I* y, u32* err) {
    const u32 p = blockIdx.y;
    if (p >= pairs) return;
    const u32 expert = ids[p];
    I* out = y + (u64)p * n;
    if (expert >= experts) {
        if (blockIdx.x == 0 && threadIdx.x == 0) qk_report(err, QK_ERR_MOE, expert, experts);
        for (u32 c = blockIdx.x * blockDim.x + threadIdx.x; c < n; c += gridDim.x * blockDim.x)
            out[c] = rk_from_compute<I>(0.0f);
        return;
    }
    const u32 b = p / topk, t = p % topk;
    const u64 row_bytes = (u64)(k / Q::QK) * Q::BYTES;
    qs_matvec<Q, I, SB, DEPTH, 1, QS_SRC_X>(1, n, k, w + (u64)expert * n * row_bytes,
                                            x + ((u64)b * x_rows + (x_rows == 1 ? 0 : t)) * k,
                                            nullptr, nullptr, qs_row_args<I>{}, out);
}

// qmoe_s8g_{Q}_{I}(u32 pairs, u32 topk, u32 x_rows, u32 n, u32 k, u32 experts, u32 seg,
//                  const u32* ids, const u32* order, const u8* w, const I* x, I* y, u32* err)
//     qmoe_s8's product for many pairs, grouped: order holds the pairs sorted by expert in
//     segments of `seg` pairs (an arg_sort of ids, row by row: sorted pair q is pair
//     (q / seg) seg + order[q]); grid row c takes sorted pairs 8c .. 8c + 7 and multiplies each run of
//     one expert among them (up to 8 rows) with that expert's rows at once, as qmatvec_s8 does
//     m rows, so a weight block is decoded once for up to 8 pairs. Each pair's row gets the
//     rounded activations and integer sums of the one-row product. Ids >= experts sort last:
//     their pairs are recorded in `err` (op code 7) and their outputs are zeros. Dynamic shared
//     memory as qmatvec_s8's for 8 rows of k.
template <typename Q, typename I, int SB, int DEPTH>
__device__ __forceinline__ void qs_moe_grouped(u32 pairs, u32 topk, u32 x_rows, u32 n, u32 k,
                                               u32 experts, u32 seg, const u32* ids,
                                               const u32* order, const u8* w, const I* x, I* y,
                                               u32* err) {
    __shared__ u32 chunk_pair[QK_MAX_M], chunk_expert[QK_MAX_M], xrows[QK_MAX_M], yrows[QK_MAX_M];
    const u32 first = blockIdx.y * QK_MAX_M;
    if (first >= pairs) return;
    const u32 count = min((u32)QK_MAX_M, pairs - first);
    if (threadIdx.x < count) {
        const u32 q = first + threadIdx.x;
        const u32 p = q / seg * seg + order[q];
        chunk_pair[threadIdx.x] = p;
        chunk_expert[threadIdx.x] = ids[p];
    }
    __syncthreads();
    const u64 row_bytes = (u64)(k / Q::QK) * Q::BYTES;
    for (u32 j0 = 0; j0 < count;) {
        const u32 expert = chunk_expert[j0];
        u32 j1 = j0 + 1;
        while (j1 < count && chunk_expert[j1] == expert) ++j1;
        if (expert >= experts) {
            for (u32 j = j0; j < j1; ++j) {
                I* out = y + (u64)chunk_pair[j] * n;
                if (blockIdx.x == 0 && threadIdx.x == 0) qk_report(err, QK_ERR_MOE, expert, experts);
                for (u32 c = blockIdx.x * blockDim.x + threadIdx.x; c < n; c += gridDim.x * blockDim.x)
                    out[c] = rk_from_compute<I>(0.0f);
            }
        } else {
            if (threadIdx.x < j1 - j0) {
                const u32 p = chunk_pair[j0 + threadIdx.x];
                xrows[threadIdx.x] = (p / topk) * x_rows + (x_rows == 1 ? 0u : p % topk);
                yrows[threadIdx.x] = p;
            }
            __syncthreads();
            qs_row_args<I> extra{};
            extra.xrows = xrows;
            extra.yrows = yrows;
            qs_matvec<Q, I, SB, DEPTH, QK_MAX_M, QS_SRC_GATHER>(j1 - j0, n, k, w + (u64)expert * n * row_bytes,
                                                               x, nullptr, nullptr, extra, y);
        }
        // The next run reuses the shared memory.
        __syncthreads();
        j0 = j1;
    }
}

// Blocks per stage: about 2-3 KiB of weights per team (measured on an H100, see quantized.md).
#ifndef QS_SB_32
#define QS_SB_32 128
#endif
#ifndef QS_SB_8
#define QS_SB_8 64
#endif
#ifndef QS_SB_K
#define QS_SB_K 16
#endif

// NVIDIA: at least QS_MIN_BLOCKS blocks per multiprocessor (the register budget follows). The
// held items need 2 (128 registers; without the bound the one-row q5k and q6k products took up
// to 154 and only one block would be resident).
#if defined(__HIP_PLATFORM_NVIDIA__) && QS_HOLD && !defined(QS_MIN_BLOCKS)
#define QS_MIN_BLOCKS 2
#endif
#if defined(__HIP_PLATFORM_NVIDIA__) && defined(QS_MIN_BLOCKS)
#define QS_BOUNDS __launch_bounds__(QS_TEAMS * QK_TEAM, QS_MIN_BLOCKS)
#else
#define QS_BOUNDS __launch_bounds__(QS_TEAMS * QK_TEAM)
#endif

#define QS_MATVEC_KERNEL(QNAME, QTYPE, INAME, ITYPE, SB, DEPTH)                                  \
    RK_KERNEL void QS_BOUNDS                                                                     \
        qmatvec_s8_##QNAME##_##INAME(u32 m, u32 n, u32 k, const u8* w, const ITYPE* x,           \
                                     ITYPE* y) {                                                 \
        qs_matvec<QTYPE, ITYPE, SB, DEPTH, QK_MAX_M, QS_SRC_X>(m, n, k, w, x, nullptr, nullptr,  \
                                                               qs_row_args<ITYPE>{}, y);        \
    }                                                                                            \
    RK_KERNEL void QS_BOUNDS                                                                     \
        qmatvec_s8_m1_##QNAME##_##INAME(u32 m, u32 n, u32 k, const u8* w, const ITYPE* x,        \
                                        ITYPE* y, const ITYPE* add) {                            \
        qs_matvec<QTYPE, ITYPE, SB, DEPTH, 1, QS_SRC_X>(                                         \
            m, n, k, w, x, nullptr, nullptr,                                                     \
            qs_row_args<ITYPE>{nullptr, nullptr, 0.0f, nullptr, add}, y);                       \
    }                                                                                            \
    RK_KERNEL void QS_BOUNDS                                                                     \
        qmatvec_s8r_m1_##QNAME##_##INAME(u32 m, u32 n, u32 k, const u8* w,                       \
                                         const signed char* xq, const float2* xds, ITYPE* y,     \
                                         const ITYPE* add) {                                     \
        qs_matvec<QTYPE, ITYPE, SB, DEPTH, 1, QS_SRC_ROUNDED>(                                   \
            m, n, k, w, nullptr, xq, xds,                                                        \
            qs_row_args<ITYPE>{nullptr, nullptr, 0.0f, nullptr, add}, y);                       \
    }                                                                                            \
    RK_KERNEL void QS_BOUNDS                                                                     \
        qmatvec_s8n_m1_##QNAME##_##INAME(u32 n, u32 k, const u8* w, const ITYPE* x,              \
                                         const ITYPE* r, const ITYPE* alpha, float eps,          \
                                         ITYPE* sum, ITYPE* y) {                                 \
        qs_matvec<QTYPE, ITYPE, SB, DEPTH, 1, QS_SRC_NORM>(1, n, k, w, x, nullptr, nullptr,      \
                                                           qs_row_args<ITYPE>{r, alpha, eps,    \
                                                                               sum, nullptr},    \
                                                           y);                                   \
    }                                                                                            \
    RK_KERNEL void QS_BOUNDS                                                                     \
        qmoe_s8_##QNAME##_##INAME(u32 pairs, u32 topk, u32 x_rows, u32 n, u32 k, u32 experts,    \
                                  const u32* ids, const u8* w, const ITYPE* x, ITYPE* y,         \
                                  u32* err) {                                                    \
        qs_moe<QTYPE, ITYPE, SB, DEPTH>(pairs, topk, x_rows, n, k, experts, ids, w, x, y, err);  \
    }                                                                                            \
    RK_KERNEL void QS_BOUNDS                                                                     \
        qmoe_s8g_##QNAME##_##INAME(u32 pairs, u32 topk, u32 x_rows, u32 n, u32 k, u32 experts,   \
                                   u32 seg, const u32* ids, const u32* order, const u8* w,       \
                                   const ITYPE* x, ITYPE* y, u32* err) {                         \
        qs_moe_grouped<QTYPE, ITYPE, SB, DEPTH>(pairs, topk, x_rows, n, k, experts, seg, ids,    \
                                                order, w, x, y, err);                            \
    }
#define QS_ALL(QNAME, QTYPE, SB, DEPTH)                                                          \
    QS_MATVEC_KERNEL(QNAME, QTYPE, f32, f32, SB, DEPTH)                                          \
    QS_MATVEC_KERNEL(QNAME, QTYPE, f16, f16, SB, DEPTH)                                          \
    QS_MATVEC_KERNEL(QNAME, QTYPE, bf16, bf16, SB, DEPTH)

#ifndef QI_P_32
#define QI_P_32 4
#endif
#ifndef QI_P_K
#define QI_P_K 8
#endif

#define QK_FOR_FLOATS(M, QNAME, QTYPE)                                                           \
    M(QNAME, QTYPE, f32, f32)                                                                    \
    M(QNAME, QTYPE, f16, f16)                                                                    \
    M(QNAME, QTYPE, bf16, bf16)

#define QK_ALL(QNAME, QTYPE)                                                                     \
    QK_FOR_FLOATS(QK_DEQ_KERNELS, QNAME, QTYPE)                                                  \
    QK_FOR_FLOATS(QK_MATVEC_KERNELS, QNAME, QTYPE)

QK_ALL(q4_0, qk_q4_0)
QK_ALL(q4_1, qk_q4_1)
QK_ALL(q5_0, qk_q5_0)
QK_ALL(q5_1, qk_q5_1)
QK_ALL(q8_0, qk_q8_0)
QK_ALL(q8_1, qk_q8_1)
QK_ALL(q2k, qk_q2k)
QK_ALL(q3k, qk_q3k)
QK_ALL(q4k, qk_q4k)
QK_ALL(q5k, qk_q5k)
QK_ALL(q6k, qk_q6k)
QK_ALL(q8k, qk_q8k)

#define QI_ALL(QNAME, QTYPE) QK_FOR_FLOATS(QI_MATVEC_KERNEL, QNAME, QTYPE)
QI_QUANTIZE_KERNEL(f32, f32)
QI_QUANTIZE_KERNEL(f16, f16)
QI_QUANTIZE_KERNEL(bf16, bf16)
QI_SWIGLU_KERNEL(f32, f32)
QI_SWIGLU_KERNEL(f16, f16)
QI_SWIGLU_KERNEL(bf16, bf16)
QI_ALL(q4_0, qi_q4_0<QI_P_32>)
QI_ALL(q4_1, qi_q4_1<QI_P_32>)
QI_ALL(q5_0, qi_q5_0<QI_P_32>)
QI_ALL(q5_1, qi_q5_1<QI_P_32>)
QI_ALL(q8_0, qi_q8_0<QI_P_32>)
QI_ALL(q8_1, qi_q8_1<QI_P_32>)
QI_ALL(q4k, qi_q4k<QI_P_K>)
QI_ALL(q5k, qi_q5k<QI_P_K>)
// q6k: 16 parts of 16 weights (measured on an H100: 51% of copy at m = 1 and 1.6x the 8-part
// speed at m = 8; its 2-byte-aligned blocks take 16-bit loads, so smaller parts keep more loads
// in flight).
QI_ALL(q6k, qi_q6k<16>)
QI_ALL(q2k, qi_q2k<QI_P_K>)
QI_ALL(q3k, qi_q3k<QI_P_K>)

// Parts per block of the staged kernel (measured on an H100 with examples/tune_qmatvec.rs, see
// quantized.md): a whole block per lane for the 32-element types, 8 parts for q4k, 4 for q5k,
// q6k, q2k and q3k.
#ifndef QS_P_32
#define QS_P_32 1
#endif
#ifndef QS_P_K
#define QS_P_K 8
#endif
#ifndef QS_P_Q5K
#define QS_P_Q5K 4
#endif
#ifndef QS_P_Q6K
#define QS_P_Q6K 4
#endif
// q2k and q3k: 4 parts of 16 elements a row and 16 blocks a stage, so that a lane's items of a
// 4096-column row (2 a lane) keep their activations in registers (held, as q6k's); 8 parts with
// stages of 32 / 24 blocks, which read them from shared memory for every weight row, ran at
// 41% / 30% of the copy (H200, 2026-11-29).
#ifndef QS_P_Q23K
#define QS_P_Q23K 4
#endif
#ifndef QS_SB_Q2K
#define QS_SB_Q2K 16
#endif
#ifndef QS_SB_Q3K
#define QS_SB_Q3K 16
#endif
// Stages in flight per team. Measured on an H100 (tune_qmatvec, quantized.md): 2 and 3 were
// slower than 1 at every decode shape (more registers, no gain: the stages of one team are not
// the bound); kept as a tunable for GPUs of longer memory latency.
#ifndef QS_DEPTH
#define QS_DEPTH 1
#endif
QS_ALL(q4_0, qi_q4_0<QS_P_32>, QS_SB_32, QS_DEPTH)
QS_ALL(q4_1, qi_q4_1<QS_P_32>, QS_SB_32, QS_DEPTH)
QS_ALL(q5_0, qi_q5_0<QS_P_32>, QS_SB_32, QS_DEPTH)
QS_ALL(q5_1, qi_q5_1<QS_P_32>, QS_SB_32, QS_DEPTH)
QS_ALL(q8_0, qi_q8_0<QS_P_32>, QS_SB_8, QS_DEPTH)
QS_ALL(q8_1, qi_q8_1<QS_P_32>, QS_SB_8, QS_DEPTH)
QS_ALL(q4k, qi_q4k<QS_P_K>, QS_SB_K, QS_DEPTH)
QS_ALL(q5k, qi_q5k<QS_P_Q5K>, QS_SB_K, QS_DEPTH)
QS_ALL(q6k, qi_q6k<QS_P_Q6K>, QS_SB_K, QS_DEPTH)
QS_ALL(q2k, qi_q2k<QS_P_Q23K>, QS_SB_Q2K, QS_DEPTH)
QS_ALL(q3k, qi_q3k<QS_P_Q23K>, QS_SB_Q3K, QS_DEPTH)

#define QK_PLAIN_FROM(SNAME, STYPE)                                                              \
    QK_PLAIN_KERNEL(SNAME, STYPE, f32, f32)                                                      \
    QK_PLAIN_KERNEL(SNAME, STYPE, f16, f16)                                                      \
    QK_PLAIN_KERNEL(SNAME, STYPE, bf16, bf16)

QK_PLAIN_FROM(f32, f32)
QK_PLAIN_FROM(f16, f16)
QK_PLAIN_FROM(bf16, bf16)
