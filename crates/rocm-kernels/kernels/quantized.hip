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
//       f32 value rounded to nearest even).
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
// outputs of dequantize/qembedding are 16-byte aligned (the wrappers check).

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
            const float q = qk_add((float)((qs[t] >> (4 * s)) & 0xF), (qh[t] & hbit) ? 16.0f : 0.0f);
            qv[t] = q;
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
__device__ __forceinline__ void qk_store8(f16* dst, const float* y) {
    u32 w[4];
#pragma unroll
    for (int t = 0; t < 4; ++t)
        w[t] = (u32)__half_as_ushort(__float2half(y[2 * t])) |
               ((u32)__half_as_ushort(__float2half(y[2 * t + 1])) << 16);
    *(uint4*)dst = make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ void qk_store8(bf16* dst, const float* y) {
    u32 w[4];
#pragma unroll
    for (int t = 0; t < 4; ++t)
        w[t] = (u32)__bfloat16_as_ushort(__float2bfloat16(y[2 * t])) |
               ((u32)__bfloat16_as_ushort(__float2bfloat16(y[2 * t + 1])) << 16);
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

template <typename Q, typename O>
__device__ void qk_dequantize(u64 groups, const u8* blocks, O* dst) {
    for (u64 i = rk_thread_id(); i < groups; i += rk_thread_count()) {
        float y[8];
        qk_deq_group<Q>(blocks, i, y);
        qk_store8(dst + i * 8, y);
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
__device__ void qk_embedding(u64 groups, u64 groups_per_row, u64 rows, const u32* ids,
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
    RK_KERNEL void dequantize_##QNAME##_##ONAME(u64 groups, const u8* blocks, OTYPE* dst) {      \
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
__device__ void qk_matvec(u32 m, u32 n, u32 k, const u8* w, const I* x, I* y) {
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
__device__ void qk_moe(u32 pairs, u32 topk, u32 x_rows, u32 n, u32 k, u32 experts, const u32* ids,
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

#define QK_PLAIN_FROM(SNAME, STYPE)                                                              \
    QK_PLAIN_KERNEL(SNAME, STYPE, f32, f32)                                                      \
    QK_PLAIN_KERNEL(SNAME, STYPE, f16, f16)                                                      \
    QK_PLAIN_KERNEL(SNAME, STYPE, bf16, bf16)

QK_PLAIN_FROM(f32, f32)
QK_PLAIN_FROM(f16, f16)
QK_PLAIN_FROM(bf16, bf16)
