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

#define AT_THREADS 256
// The error code recorded in the shared indexing flag (IndexOp::AttentionSeqlens).
#define AT_ERR_VARLEN 8u
// Decode: the most queries (q heads of one kv head x rows) one block carries in registers.
#define AT_DEC_MAXQ 8
// Decode: keys per sub-chunk held in shared memory.
#define AT_DEC_CHUNK 512
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
template <typename T, int V>
__device__ __forceinline__ void at_load_vec(const T* src, float* dst) {
    const uint4 u = *(const uint4*)src;
    const T* t = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int e = 0; e < V; ++e) dst[e] = rk_to_compute(t[e]);
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
// Decode (flash-decoding): one block per (key split, kv head x query slice, batch). The block
// carries up to AT_DEC_MAXQ queries (the q heads sharing the kv head, times query rows), so every
// key and value row is read once for all of them. Per sub-chunk of keys: teams of TS lanes compute
// the logits (16-byte loads, xor-shuffle reductions) into shared memory; 32 lanes per query take
// the chunk's max and exponentials; then threads split (key group, query, row vectors) and
// accumulate P V. With one split the block writes the normalised output; otherwise unnormalised
// partial sums with their max and sum, merged by at_merge.
// ---------------------------------------------------------------------------------------------

template <typename T, int D>
struct at_dec_shape {
    static constexpr int VEC = 16 / (int)sizeof(T);
    static constexpr int NV = D / VEC;                 // 16-byte vectors per row
    static constexpr int VPL = (NV + 31) / 32;         // vectors per lane
    static constexpr int NVL = (NV + VPL - 1) / VPL;   // lanes needed
    static constexpr int TS = NVL <= 4 ? 4 : NVL <= 8 ? 8 : NVL <= 16 ? 16 : 32;  // team size
    static constexpr int EPL = VPL * VEC;              // elements per lane
};

template <typename T, int D>
__device__ __forceinline__ void at_decode(const AttnParams& p, const T* __restrict__ q,
                                          const T* __restrict__ k, const T* __restrict__ v,
                                          const T* __restrict__ mask, T* __restrict__ o,
                                          float* __restrict__ part) {
    typedef at_dec_shape<T, D> S;
    constexpr int VEC = S::VEC, VPL = S::VPL, TS = S::TS, EPL = S::EPL, NV = S::NV;
    __shared__ float logits[AT_DEC_MAXQ * AT_DEC_CHUNK];
    __shared__ float red[AT_THREADS * EPL];
    __shared__ float sm_alpha[AT_DEC_MAXQ], sm_m[AT_DEC_MAXQ], sm_l[AT_DEC_MAXQ];

    const int tid = threadIdx.x;
    const i64 g = p.hq / p.hkv;
    const i64 slices = (p.sq * g + AT_DEC_MAXQ - 1) / AT_DEC_MAXQ;
    const i64 hk = blockIdx.y / slices, slice = blockIdx.y % slices;
    const u32 b = blockIdx.z;
    const i64 flat0 = slice * AT_DEC_MAXQ;
    const int nq = (int)((p.sq * g - flat0) < AT_DEC_MAXQ ? (p.sq * g - flat0) : AT_DEC_MAXQ);
    const int nqp = nq <= 1 ? 1 : nq <= 2 ? 2 : nq <= 4 ? 4 : 8;
    const i64 sk = p.sk, shift = p.sk - p.sq;

    // Query (row i, head h) of slot qi.
    i64 qi_row[AT_DEC_MAXQ], qi_head[AT_DEC_MAXQ];
#pragma unroll
    for (int qi = 0; qi < AT_DEC_MAXQ; ++qi) {
        const i64 flat = flat0 + (qi < nq ? qi : 0);
        qi_row[qi] = flat / g;
        qi_head[qi] = hk * g + flat % g;
    }

    // The keys of this split, narrowed to those some query of the slice sees.
    const i64 per = (sk + gridDim.x - 1) / gridDim.x;
    i64 c_begin = (i64)blockIdx.x * per, c_end = c_begin + per < sk ? c_begin + per : sk;
    {
        const i64 lo = at_key_lo(p, qi_row[0], shift), hi = at_key_hi(p, qi_row[nq - 1], shift, sk);
        c_begin = c_begin > lo ? c_begin : lo;
        c_end = c_end < hi ? c_end : hi;
    }

    // Team role (logits): lane tl of team te; the lane's query slice in registers.
    const int tl = tid % TS, te = tid / TS;
    constexpr int NTEAM = AT_THREADS / TS;
    float qr[AT_DEC_MAXQ][EPL];
#pragma unroll
    for (int qi = 0; qi < AT_DEC_MAXQ; ++qi)
#pragma unroll
        for (int u = 0; u < VPL; ++u) {
            const int vi = tl + TS * u;
            if (qi < nq && vi < NV) {
                const T* src = q + (i64)b * p.q_sb + qi_row[qi] * p.q_ss + qi_head[qi] * p.q_sh;
                at_load_vec<T, VEC>(src + vi * VEC, &qr[qi][u * VEC]);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; ++e) qr[qi][u * VEC + e] = 0.0f;
            }
        }

    // Accumulator role (P V): key group kg, query qq, row lane vl.
    const int vl = tid % TS, qq = (tid / TS) % nqp, kg = tid / (TS * nqp);
    const int n_kg = AT_THREADS / (TS * nqp);
    float acc[EPL];
#pragma unroll
    for (int e = 0; e < EPL; ++e) acc[e] = 0.0f;
    if (tid < AT_DEC_MAXQ) {
        sm_m[tid] = AT_NEG_INF;
        sm_l[tid] = 0.0f;
    }

    const T* kb = k + (i64)b * p.k_sb + hk * p.k_sh;
    const T* vb = v + (i64)b * p.v_sb + hk * p.v_sh;
    for (i64 c0 = c_begin; c0 < c_end; c0 += AT_DEC_CHUNK) {
        const int n = (int)(c_end - c0 < AT_DEC_CHUNK ? c_end - c0 : AT_DEC_CHUNK);
        __syncthreads();  // the previous chunk's P V readers are done with logits
        // Logits: every lane runs the same trip count (shuffles need the whole warp).
        for (int jb = 0; jb < n; jb += NTEAM) {
            const int jj = jb + te;
            const bool valid = jj < n;
            float kv[EPL];
#pragma unroll
            for (int u = 0; u < VPL; ++u) {
                const int vi = tl + TS * u;
                if (valid && vi < NV) {
                    at_load_vec<T, VEC>(kb + (c0 + jj) * p.k_ss + vi * VEC, &kv[u * VEC]);
                } else {
#pragma unroll
                    for (int e = 0; e < VEC; ++e) kv[u * VEC + e] = 0.0f;
                }
            }
#pragma unroll
            for (int qi = 0; qi < AT_DEC_MAXQ; ++qi) {
                if (qi >= nq) break;
                float dot = 0.0f;
#pragma unroll
                for (int e = 0; e < EPL; ++e) dot += qr[qi][e] * kv[e];
#pragma unroll
                for (int off = TS / 2; off > 0; off >>= 1) dot += __shfl_xor(dot, off);
                if (valid && tl == 0) {
                    const i64 i = qi_row[qi], j = c0 + jj;
                    const bool seen = j >= at_key_lo(p, i, shift) && j < at_key_hi(p, i, shift, sk);
                    float mv = 0.0f;
                    if (seen && mask != nullptr)
                        mv = rk_to_compute(mask[(i64)b * p.m_sb + qi_head[qi] * p.m_sh +
                                                i * p.m_sq + j * p.m_sk]);
                    logits[qi * AT_DEC_CHUNK + jj] = seen ? at_logit(p, dot, mv) : AT_NEG_INF;
                }
            }
        }
        __syncthreads();
        // Softmax statistics: 32 lanes per query.
        {
            const int qs = tid / 32, lane = tid % 32;
            if (qs < nq) {
                float mx = AT_NEG_INF;
                for (int jj = lane; jj < n; jj += 32) mx = fmaxf(mx, logits[qs * AT_DEC_CHUNK + jj]);
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor(mx, off));
                const float m_old = sm_m[qs];
                const float m_new = fmaxf(m_old, mx);
                const float base = m_new == AT_NEG_INF ? 0.0f : m_new;
                float sum = 0.0f;
                for (int jj = lane; jj < n; jj += 32) {
                    const float pj = exp2f(logits[qs * AT_DEC_CHUNK + jj] - base);
                    logits[qs * AT_DEC_CHUNK + jj] = pj;
                    sum += pj;
                }
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor(sum, off);
                if (lane == 0) {
                    const float alpha = exp2f(m_old - base);
                    sm_alpha[qs] = alpha;
                    sm_l[qs] = sm_l[qs] * alpha + sum;
                    sm_m[qs] = m_new;
                }
            }
        }
        __syncthreads();
        // P V.
        if (qq < nq) {
            const float alpha = sm_alpha[qq];
#pragma unroll
            for (int e = 0; e < EPL; ++e) acc[e] *= alpha;
            for (int jj = kg; jj < n; jj += n_kg) {
                const float pj = logits[qq * AT_DEC_CHUNK + jj];
                if (pj == 0.0f) continue;
#pragma unroll
                for (int u = 0; u < VPL; ++u) {
                    const int vi = vl + TS * u;
                    if (vi < NV) {
                        float vv[VEC];
                        at_load_vec<T, VEC>(vb + (c0 + jj) * p.v_ss + vi * VEC, vv);
#pragma unroll
                        for (int e = 0; e < VEC; ++e) acc[u * VEC + e] += pj * vv[e];
                    }
                }
            }
        }
    }

    // Reduce the key groups, then write.
    __syncthreads();
#pragma unroll
    for (int e = 0; e < EPL; ++e) red[tid * EPL + e] = acc[e];
    __syncthreads();
    const bool single = gridDim.x == 1;
    for (int idx = tid; idx < nq * D; idx += AT_THREADS) {
        const int qi = idx / D, d = idx % D;
        const int u = (d / VEC) / TS, lane = (d / VEC) % TS, e = u * VEC + d % VEC;
        float sum = 0.0f;
        for (int g2 = 0; g2 < n_kg; ++g2) {
            const int t = (g2 * nqp + qi) * TS + lane;
            sum += red[t * EPL + e];
        }
        const i64 row = qi_row[qi < nq ? qi : 0], head = qi_head[qi < nq ? qi : 0];
        if (single) {
            const float l = sm_l[qi];
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
            o[(i64)b * p.o_sb + row * p.o_ss + head * p.o_sh + d] = rk_from_compute<T>(sum * inv);
        } else {
            const i64 prow = ((i64)blockIdx.x * p.splits_rows) + ((i64)b * p.hq + head) * p.sq + row;
            part[prow * D + d] = sum;
            if (d == 0) {
                float* stats = part + p.splits_rows * (i64)gridDim.x * D;
                stats[2 * prow] = sm_m[qi];
                stats[2 * prow + 1] = sm_l[qi];
            }
        }
    }
}

// Merges the splits' partial sums: one block per output row, one thread per element.
template <typename T, int D>
__device__ __forceinline__ void at_merge(const AttnParams& p, i64 splits,
                                         const float* __restrict__ part, T* __restrict__ o) {
    const i64 row = blockIdx.x;
    const int d = threadIdx.x;
    if (d >= D) return;
    const float* stats = part + p.splits_rows * splits * D;
    float mx = AT_NEG_INF;
    for (i64 s = 0; s < splits; ++s) mx = fmaxf(mx, stats[2 * (s * p.splits_rows + row)]);
    const float base = mx == AT_NEG_INF ? 0.0f : mx;
    float num = 0.0f, den = 0.0f;
    for (i64 s = 0; s < splits; ++s) {
        const i64 pr = s * p.splits_rows + row;
        const float w = exp2f(stats[2 * pr] - base);
        den += w * stats[2 * pr + 1];
        num += w * part[pr * D + d];
    }
    const i64 i = row % p.sq, h = (row / p.sq) % p.hq, b = row / (p.sq * p.hq);
    o[b * p.o_sb + i * p.o_ss + h * p.o_sh + d] = rk_from_compute<T>(den > 0.0f ? num / den : 0.0f);
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
#define AT_DECODE(TN, T, D)                                                                      \
    RK_KERNEL void __launch_bounds__(AT_THREADS)                                                 \
        attn_decode_##TN##_d##D(AttnParams p, const T* q, const T* k, const T* v,                \
                                const T* mask, T* o, float* part) {                              \
        at_decode<T, D>(p, q, k, v, mask, o, part);                                              \
    }                                                                                            \
    RK_KERNEL void __launch_bounds__(AT_THREADS)                                                 \
        attn_merge_##TN##_d##D(AttnParams p, i64 splits, const float* part, T* o) {              \
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
