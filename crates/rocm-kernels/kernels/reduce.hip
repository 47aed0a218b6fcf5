// Reductions over an arbitrary set of dims of a strided input, all 9 dtypes:
//   {sum,min,max}_{T}(out_numel, red_numel, nk, nr, info, inp, out: T*)
//   {argmin,argmax}_{T}(out_numel, red_numel, nk, nr, info, inp, out: u32*)
// and the same with `_block` before the dtype ({op}_block_{T}): one thread per output element
// (sequential loop over the reduced elements; coalesced when the innermost kept dim has
// stride 1) versus one block per output element (threads stride over the reduced elements,
// then warp shuffles + shared memory; coalesced when the innermost reduced dim has stride 1,
// e.g. contiguous rows reduced over their last dim(s)).
//
// `info` holds kept_dims[nk], kept_strides[nk], red_dims[nr], red_strides[nr] (nk, nr >= 1):
// output element `o` (row-major over the kept dims, i.e. a contiguous output whose reduced dims
// have size 1) reads the input at offset(o; kept) + offset(r; red) for r < red_numel (row-major
// over the reduced dims in increasing dim order). `info` is null when the input is contiguous
// and reduced over its trailing dims: then offset = o * red_numel + r. `inp` arrives offset to
// the layout's start.
//
// Semantics (Candle's CPU backend, candle-core 0.11):
// * sum: integers wrap (accumulated in an unsigned type at least 32 bits wide, truncated);
//   f16/bf16/f32 accumulate in f32 (rounded once at the end), f64 in f64. Order: sequential per
//   thread, then a tree: results may differ from Candle's sequential sums in the last bits.
// * min/max/argmin/argmax fold like Candle's `ReduceIndex`: the result starts at element 0 and
//   is replaced by a later element only when that one is strictly smaller (min) / larger (max).
//   Hence ties give the first index; a NaN is never taken except when element 0 is NaN, which
//   then stays (value and index 0). min/max write the chosen input element itself (bits
//   preserved). argmin/argmax write the index r of the chosen element. red_numel >= 1 and
//   < 2^32 - 1 (checked by the wrappers).
//
// Pass 1 of a split min/max over floats ({min,max}_part_{T} and {min,max}_part_block_{T}, with
// one more argument, u64 parts): the outputs are [out_numel / parts, parts] partial results, and
// the element-0 NaN rule applies only to the first part of each output (o % parts == 0); the
// other parts skip NaNs (a part of NaNs only writes its element 0 (value path: the fold's
// identity, +-inf), which pass 2, a plain min/max over the partials, never takes over a
// number). So pass 2 gives the single pass's result, bits included: NaN exactly when the
// input's element 0 is, and of equal values (+0/-0) the first, since the parts are in order.

#define RD_NONE 0xffffffffu

__device__ __forceinline__ bool rd_isnan(float x) { return x != x; }
__device__ __forceinline__ bool rd_isnan(double x) { return x != x; }
__device__ __forceinline__ bool rd_isnan(u32) { return false; }
__device__ __forceinline__ bool rd_isnan(i32) { return false; }
__device__ __forceinline__ bool rd_isnan(i64) { return false; }

// Type sums accumulate in.
template <typename T> struct rd_sum_acc { typedef u32 type; };
template <> struct rd_sum_acc<i64> { typedef u64 type; };
template <> struct rd_sum_acc<bf16> { typedef float type; };
template <> struct rd_sum_acc<f16> { typedef float type; };
template <> struct rd_sum_acc<f32> { typedef float type; };
template <> struct rd_sum_acc<f64> { typedef double type; };

// Type min/max compare in (wide enough for shuffles, order-preserving).
template <typename T> struct rd_cmp_type { typedef typename rk_compute<T>::type type; };
template <> struct rd_cmp_type<u8> { typedef u32 type; };
template <> struct rd_cmp_type<i16> { typedef i32 type; };

template <typename T> struct rd_sum {
    typedef typename rd_sum_acc<T>::type V;
    static __device__ __forceinline__ V identity() { return (V)0; }
    static __device__ __forceinline__ V make(T x, u32) { return (V)rk_to_compute(x); }
    // Unsigned integers wrap; floats add.
    static __device__ __forceinline__ V combine(V a, V b) { return a + b; }
    static __device__ __forceinline__ V shfl_xor(V v, int mask) { return __shfl_xor(v, mask); }
};

template <typename C> struct rd_pair {
    C v;
    u32 i;  // RD_NONE: no element (yet)
};

template <typename T, bool MIN> struct rd_minmax {
    typedef typename rd_cmp_type<T>::type C;
    typedef rd_pair<C> V;
    static __device__ __forceinline__ V identity() {
        V r;
        r.v = (C)0;
        r.i = RD_NONE;
        return r;
    }
    // NaNs are skipped here; element 0 is handled when the result is written.
    static __device__ __forceinline__ V make(T x, u32 i) {
        V r;
        r.v = (C)rk_to_compute(x);
        r.i = rd_isnan(r.v) ? RD_NONE : i;
        return r;
    }
    // Commutative and associative: the strict extremum, the smallest index among equals.
    static __device__ __forceinline__ V combine(V a, V b) {
        if (b.i == RD_NONE) return a;
        if (a.i == RD_NONE) return b;
        if (MIN ? (b.v < a.v) : (b.v > a.v)) return b;
        if (MIN ? (a.v < b.v) : (a.v > b.v)) return a;
        return b.i < a.i ? b : a;
    }
    static __device__ __forceinline__ V shfl_xor(V v, int mask) {
        V r;
        r.v = __shfl_xor(v.v, mask);
        r.i = __shfl_xor(v.i, mask);
        return r;
    }
    static __device__ __forceinline__ V to_pair(V v) { return v; }
};


// The same fold for element types of at most 32 bits, packed into one u64 key per candidate so
// that combining is a single integer min/max: the high half is the value mapped to an unsigned
// integer of the same order (floats: sign-magnitude to offset binary, with -0 mapped to +0 so
// that equal values tie), the low half the index (min: the index, max: its complement), so the
// smallest index wins ties. NaNs never become candidates; the identity is the key no element
// can have (max: 0, the key of a negative NaN; min: all ones, a positive NaN).
__device__ __forceinline__ u32 rd_order_key(float x) {
    u32 b = (u32)__float_as_int(x);
    if (b == 0x80000000u) b = 0u;  // -0 == +0
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ u32 rd_order_key(u32 x) { return x; }
__device__ __forceinline__ u32 rd_order_key(i32 x) { return (u32)x ^ 0x80000000u; }

template <typename T, bool MIN> struct rd_minmax_key {
    typedef typename rd_cmp_type<T>::type C;
    typedef unsigned long long V;
    static __device__ __forceinline__ V identity() { return MIN ? ~0ull : 0ull; }
    static __device__ __forceinline__ V make(T x, u32 i) {
        const C c = (C)rk_to_compute(x);
        if (rd_isnan(c)) return identity();
        const V hi = (V)rd_order_key(c) << 32;
        return hi | (V)(MIN ? i : ~i);
    }
    static __device__ __forceinline__ V combine(V a, V b) {
        return MIN ? (b < a ? b : a) : (b > a ? b : a);
    }
    static __device__ __forceinline__ V shfl_xor(V v, int mask) { return __shfl_xor(v, mask); }
    // Back to (value unused, index or RD_NONE) for rd_write_pair.
    static __device__ __forceinline__ rd_pair<C> to_pair(V v) {
        rd_pair<C> r;
        r.v = (C)0;
        r.i = v == identity() ? RD_NONE : (MIN ? (u32)v : ~(u32)v);
        return r;
    }
};

// Which min/max fold a type uses: the packed key for types of at most 32 bits, the pair
// otherwise (f64, i64).
template <typename T, bool MIN> struct rd_minmax_for { typedef rd_minmax_key<T, MIN> type; };
template <bool MIN> struct rd_minmax_for<f64, MIN> {
    typedef rd_minmax<f64, MIN> type;
};
template <bool MIN> struct rd_minmax_for<i64, MIN> {
    typedef rd_minmax<i64, MIN> type;
};

// Offset of the `i`-th element (row-major) of `n` dims with `strides`; index type I.
template <typename I>
__device__ __forceinline__ u64 rd_offset(I i, u32 n, const u64* dims, const u64* strides) {
    u64 off = 0;
    for (int d = (int)n - 1; d >= 0; --d) {
        const I dim = (I)dims[d];
        off += (u64)(i % dim) * strides[d];
        i /= dim;
    }
    return off;
}

// The reduced part of `info`: red_dims at info + 2 * nk, red_strides right after.
struct rd_layout {
    const u64* info;
    u32 nk, nr;
    // 0, or the parts of a split's pass 1 (see the header).
    u64 parts;
    // Whether output `o` keeps the rule for a NaN element 0.
    __device__ __forceinline__ bool nan_rule(u64 o) const { return parts == 0 || o % parts == 0; }
    __device__ __forceinline__ u64 base(u64 o, u64 red_numel) const {
        return info == nullptr ? o * red_numel : rd_offset<u64>(o, nk, info, info + nk);
    }
    template <typename I> __device__ __forceinline__ u64 red(I r) const {
        if (info == nullptr) return (u64)r;
        const u64* dims = info + 2 * nk;
        if (nr == 1) return (u64)r * dims[1];
        return rd_offset<I>(r, nr, dims, dims + nr);
    }
};

// Writes the result of output `o`: sums convert back to T; min/max/arg apply Candle's rule for a
// NaN element 0 and write the chosen element (IDX false) / its index (IDX true).
template <typename T>
__device__ __forceinline__ void rd_write(const rd_layout&, const T*, u64, u64 o,
                                         typename rd_sum<T>::V acc, T* out) {
    out[o] = rk_from_compute<T>((typename rk_compute<T>::type)acc);
}
template <bool IDX> struct rd_store;
template <> struct rd_store<false> {
    template <typename T>
    static __device__ __forceinline__ void store(const rd_layout& l, const T* inp, u64 base, u64 o,
                                                 u32 idx, T* out) {
        out[o] = inp[base + l.red<u32>(idx)];
    }
};
template <> struct rd_store<true> {
    template <typename T>
    static __device__ __forceinline__ void store(const rd_layout&, const T*, u64, u64 o, u32 idx,
                                                 u32* out) {
        out[o] = idx;
    }
};
template <bool IDX, typename T, typename C, typename O>
__device__ __forceinline__ void rd_write_pair(const rd_layout& l, const T* inp, u64 base, u64 o,
                                              rd_pair<C> acc, O* out) {
    const C x0 = (C)rk_to_compute(inp[base + l.red<u32>(0u)]);
    const u32 idx = ((l.nan_rule(o) && rd_isnan(x0)) || acc.i == RD_NONE) ? 0u : acc.i;
    rd_store<IDX>::store(l, inp, base, o, idx, out);
}

// The ops as kernels use them: IDX says whether the index (argmin/argmax) or the element is
// written.
template <typename T, bool MIN, bool IDX>
struct rd_extremum : rd_minmax_for<T, MIN>::type {
    typedef typename rd_minmax_for<T, MIN>::type Base;
    template <typename O>
    static __device__ __forceinline__ void write(const rd_layout& l, const T* inp, u64 base, u64 o,
                                                 typename Base::V acc, O* out) {
        rd_write_pair<IDX>(l, inp, base, o, Base::to_pair(acc), out);
    }
};
template <typename T> struct rd_min_op : rd_extremum<T, true, false> {};
template <typename T> struct rd_max_op : rd_extremum<T, false, false> {};
template <typename T> struct rd_argmin_op : rd_extremum<T, true, true> {};
template <typename T> struct rd_argmax_op : rd_extremum<T, false, true> {};
template <typename T> struct rd_sum_op : rd_sum<T> {
    static __device__ __forceinline__ void write(const rd_layout& l, const T* inp, u64 base, u64 o,
                                                 typename rd_sum<T>::V acc, T* out) {
        rd_write(l, inp, base, o, acc, out);
    }
};

// One thread per output element; the innermost reduced dim is the inner loop (no division).
template <typename T, typename Op, typename I, typename O>
__device__ __forceinline__ void rd_thread(u64 out_numel, u64 red_numel, const rd_layout& l,
                                          const T* inp, O* out) {
    const u64 step = rk_thread_count();
    for (u64 o = rk_thread_id(); o < out_numel; o += step) {
        const u64 base = l.base(o, red_numel);
        typename Op::V acc = Op::identity();
        if (l.info == nullptr) {
            for (I r = 0; r < (I)red_numel; ++r) acc = Op::combine(acc, Op::make(inp[base + r], (u32)r));
        } else {
            const u64* dims = l.info + 2 * l.nk;
            const u64* strides = dims + l.nr;
            const I inner = (I)dims[l.nr - 1];
            const u64 inner_stride = strides[l.nr - 1];
            const I outer_count = inner == 0 ? (I)0 : (I)red_numel / inner;
            for (I outer = 0; outer < outer_count; ++outer) {
                const u64 off = base + rd_offset<I>(outer, l.nr - 1, dims, strides);
                const I first = outer * inner;
                for (I j = 0; j < inner; ++j)
                    acc = Op::combine(acc, Op::make(inp[off + (u64)j * inner_stride], (u32)(first + j)));
            }
        }
        Op::write(l, inp, base, o, acc, out);
    }
}

// Block-wide reduction (blockDim.x a multiple of warpSize, at most 1024); the result is valid
// in thread 0. Every thread of the block must call it.
template <typename Op>
__device__ __forceinline__ typename Op::V rd_block_reduce(typename Op::V v) {
    typedef typename Op::V V;
    __shared__ V partial[32];
    const int lane = (int)(threadIdx.x % warpSize);
    const int warp = (int)(threadIdx.x / warpSize);
    const int nwarps = (int)(blockDim.x / warpSize);
    for (int m = warpSize / 2; m > 0; m >>= 1) v = Op::combine(v, Op::shfl_xor(v, m));
    if (nwarps > 1) {
        if (lane == 0) partial[warp] = v;
        __syncthreads();
        if (warp == 0) {
            v = lane < nwarps ? partial[lane] : Op::identity();
            for (int m = warpSize / 2; m > 0; m >>= 1) v = Op::combine(v, Op::shfl_xor(v, m));
        }
        __syncthreads();  // `partial` is reused by the next output
    }
    return v;
}

// Independent accumulators per thread in the contiguous block loop (r + 7 * blockDim.x stays
// below 2^32 for the u32 index path: red_numel < 2^31, blockDim.x <= 1024).
#define RD_UNROLL 8

// One block per output element (grid-stride over outputs).
template <typename T, typename Op, typename I, typename O>
__device__ __forceinline__ void rd_block(u64 out_numel, u64 red_numel, const rd_layout& l,
                                         const T* inp, O* out) {
    for (u64 o = blockIdx.x; o < out_numel; o += gridDim.x) {
        const u64 base = l.base(o, red_numel);
        typename Op::V acc = Op::identity();
        if (l.info == nullptr) {
            // Contiguous rows: RD_UNROLL independent accumulators keep RD_UNROLL loads in
            // flight per thread (combine is associative and commutative, see rd_minmax).
            const T* p = inp + base;
            const I bd = (I)blockDim.x;
            typename Op::V a[RD_UNROLL];
#pragma unroll
            for (int k = 0; k < RD_UNROLL; ++k) a[k] = Op::identity();
            I r = (I)threadIdx.x;
            for (; r + (RD_UNROLL - 1) * bd < (I)red_numel; r += RD_UNROLL * bd) {
                T x[RD_UNROLL];
#pragma unroll
                for (int k = 0; k < RD_UNROLL; ++k) x[k] = p[r + (I)k * bd];
#pragma unroll
                for (int k = 0; k < RD_UNROLL; ++k)
                    a[k] = Op::combine(a[k], Op::make(x[k], (u32)(r + (I)k * bd)));
            }
            for (; r < (I)red_numel; r += bd) a[0] = Op::combine(a[0], Op::make(p[r], (u32)r));
#pragma unroll
            for (int k = 1; k < RD_UNROLL; ++k) a[0] = Op::combine(a[0], a[k]);
            acc = a[0];
        } else {
            for (I r = (I)threadIdx.x; r < (I)red_numel; r += (I)blockDim.x)
                acc = Op::combine(acc, Op::make(inp[base + l.red<I>(r)], (u32)r));
        }
        acc = rd_block_reduce<Op>(acc);
        if (threadIdx.x == 0) Op::write(l, inp, base, o, acc, out);
    }
}

// min / max (not arg) of contiguous rows of f32, f16, bf16: a value-only fold (a float compare
// per element). Candle's fold keeps the first of equal elements; equal floats have equal bits
// except +0 and -0, so only a result of zero needs the first zero's bits, found by a second
// (rare) pass. NaNs are never taken (comparisons with NaN are false), except that a NaN element
// 0 is the result, as in rd_write_pair.
template <bool MIN> __device__ __forceinline__ float rd_value_combine(float a, float b) {
    return MIN ? (b < a ? b : a) : (b > a ? b : a);
}

// Block-wide fold whose result every thread gets.
template <typename V, typename F> __device__ __forceinline__ V rd_block_allreduce(V v, F f) {
    __shared__ V partial[32];
    const int lane = (int)(threadIdx.x % warpSize);
    const int warp = (int)(threadIdx.x / warpSize);
    const int nwarps = (int)(blockDim.x / warpSize);
    for (int m = warpSize / 2; m > 0; m >>= 1) v = f(v, (V)__shfl_xor(v, m));
    if (nwarps > 1) {
        if (lane == 0) partial[warp] = v;
        __syncthreads();
        v = partial[0];
        for (int w = 1; w < nwarps; ++w) v = f(v, partial[w]);
        __syncthreads();
    }
    return v;
}

template <typename T, bool MIN, typename I>
__device__ __forceinline__ void rd_block_value(u64 out_numel, u64 red_numel, const rd_layout& l,
                                               const T* inp, T* out) {
    const float none = MIN ? __int_as_float(0x7f800000) : __int_as_float(0xff800000);
    const I bd = (I)blockDim.x;
    for (u64 o = blockIdx.x; o < out_numel; o += gridDim.x) {
        const T* p = inp + o * red_numel;
        float a[RD_UNROLL];
#pragma unroll
        for (int k = 0; k < RD_UNROLL; ++k) a[k] = none;
        I r = (I)threadIdx.x;
        for (; r + (RD_UNROLL - 1) * bd < (I)red_numel; r += RD_UNROLL * bd) {
            T x[RD_UNROLL];
#pragma unroll
            for (int k = 0; k < RD_UNROLL; ++k) x[k] = p[r + (I)k * bd];
#pragma unroll
            for (int k = 0; k < RD_UNROLL; ++k) a[k] = rd_value_combine<MIN>(a[k], rk_to_compute(x[k]));
        }
        for (; r < (I)red_numel; r += bd) a[0] = rd_value_combine<MIN>(a[0], rk_to_compute(p[r]));
#pragma unroll
        for (int k = 1; k < RD_UNROLL; ++k) a[0] = rd_value_combine<MIN>(a[0], a[k]);
        const float acc = rd_block_allreduce(a[0], [](float x, float y) { return rd_value_combine<MIN>(x, y); });
        const T x0 = p[0];
        if (l.nan_rule(o) && rd_isnan(rk_to_compute(x0))) {
            if (threadIdx.x == 0) out[o] = x0;
        } else if (acc == 0.0f) {
            // The first zero (+0 or -0) of the row.
            u32 first = RD_NONE;
            for (I j = (I)threadIdx.x; j < (I)red_numel; j += bd) {
                if (rk_to_compute(p[j]) == 0.0f) {
                    first = (u32)j;
                    break;
                }
            }
            first = rd_block_allreduce(first, [](u32 x, u32 y) { return y < x ? y : x; });
            if (threadIdx.x == 0) out[o] = p[first];
        } else if (threadIdx.x == 0) {
            // Non-zero (or +-inf when nothing else is there): every element equal to it has
            // these bits.
            out[o] = rk_from_compute<T>(acc);
        }
    }
}

// Which block reductions take the value-only path on contiguous rows.
template <typename Op> struct rd_value_path { enum { ok = 0, min = 0 }; };
template <> struct rd_value_path<rd_min_op<f32> > { enum { ok = 1, min = 1 }; };
template <> struct rd_value_path<rd_max_op<f32> > { enum { ok = 1, min = 0 }; };
template <> struct rd_value_path<rd_min_op<f16> > { enum { ok = 1, min = 1 }; };
template <> struct rd_value_path<rd_max_op<f16> > { enum { ok = 1, min = 0 }; };
template <> struct rd_value_path<rd_min_op<bf16> > { enum { ok = 1, min = 1 }; };
template <> struct rd_value_path<rd_max_op<bf16> > { enum { ok = 1, min = 0 }; };

template <typename T, typename Op, typename I, typename O, int VALUE = rd_value_path<Op>::ok>
struct rd_block_dispatch {
    static __device__ __forceinline__ void run(u64 out_numel, u64 red_numel, const rd_layout& l,
                                               const T* inp, O* out) {
        rd_block<T, Op, I>(out_numel, red_numel, l, inp, out);
    }
};
template <typename T, typename Op, typename I, typename O>
struct rd_block_dispatch<T, Op, I, O, 1> {
    static __device__ __forceinline__ void run(u64 out_numel, u64 red_numel, const rd_layout& l,
                                               const T* inp, O* out) {
        if (l.info == nullptr)
            rd_block_value<T, rd_value_path<Op>::min != 0, I>(out_numel, red_numel, l, inp, out);
        else
            rd_block<T, Op, I>(out_numel, red_numel, l, inp, out);
    }
};

// u32 index math below 2^31 reduced elements (no u32 wrap-around in the strided loops), u64
// otherwise.
#define RK_REDUCE_KERNELS(NAME, OP, T, OUT)                                                     \
    RK_KERNEL void NAME##_##T(u64 out_numel, u64 red_numel, u32 nk, u32 nr, const u64* info,  \
                              const T* inp, OUT* out) {                                      \
        rk_overlapped_entry();                                                               \
        const rd_layout l = {info, nk, nr, 0};                                               \
        if (red_numel < 0x80000000ull)                                                       \
            rd_thread<T, OP, u32>(out_numel, red_numel, l, inp, out);                        \
        else                                                                                 \
            rd_thread<T, OP, u64>(out_numel, red_numel, l, inp, out);                        \
    }                                                                                        \
    RK_KERNEL void NAME##_block_##T(u64 out_numel, u64 red_numel, u32 nk, u32 nr,             \
                                    const u64* info, const T* inp, OUT* out) {               \
        rk_overlapped_entry();                                                               \
        const rd_layout l = {info, nk, nr, 0};                                               \
        if (red_numel < 0x80000000ull)                                                       \
            rd_block_dispatch<T, OP, u32, OUT>::run(out_numel, red_numel, l, inp, out);      \
        else                                                                                 \
            rd_block_dispatch<T, OP, u64, OUT>::run(out_numel, red_numel, l, inp, out);      \
    }

// Pass 1 of a split float min/max (see the header): `parts` >= 1 partials per output.
#define RK_REDUCE_PART_KERNELS(NAME, OP, T)                                                   \
    RK_KERNEL void NAME##_part_##T(u64 out_numel, u64 red_numel, u32 nk, u32 nr,              \
                                   const u64* info, const T* inp, T* out, u64 parts) {       \
        rk_overlapped_entry();                                                               \
        const rd_layout l = {info, nk, nr, parts};                                           \
        if (red_numel < 0x80000000ull)                                                       \
            rd_thread<T, OP, u32>(out_numel, red_numel, l, inp, out);                        \
        else                                                                                 \
            rd_thread<T, OP, u64>(out_numel, red_numel, l, inp, out);                        \
    }                                                                                        \
    RK_KERNEL void NAME##_part_block_##T(u64 out_numel, u64 red_numel, u32 nk, u32 nr,        \
                                         const u64* info, const T* inp, T* out, u64 parts) { \
        rk_overlapped_entry();                                                               \
        const rd_layout l = {info, nk, nr, parts};                                           \
        if (red_numel < 0x80000000ull)                                                       \
            rd_block_dispatch<T, OP, u32, T>::run(out_numel, red_numel, l, inp, out);        \
        else                                                                                 \
            rd_block_dispatch<T, OP, u64, T>::run(out_numel, red_numel, l, inp, out);        \
    }

#define RK_REDUCE_ALL(T)                                   \
    RK_REDUCE_KERNELS(sum, rd_sum_op<T>, T, T)                          \
    RK_REDUCE_KERNELS(min, rd_min_op<T>, T, T)                          \
    RK_REDUCE_KERNELS(max, rd_max_op<T>, T, T)                          \
    RK_REDUCE_KERNELS(argmin, rd_argmin_op<T>, T, u32)                  \
    RK_REDUCE_KERNELS(argmax, rd_argmax_op<T>, T, u32)

RK_REDUCE_ALL(u8)
RK_REDUCE_ALL(u32)
RK_REDUCE_ALL(i16)
RK_REDUCE_ALL(i32)
RK_REDUCE_ALL(i64)
RK_REDUCE_ALL(bf16)
RK_REDUCE_ALL(f16)
RK_REDUCE_ALL(f32)
RK_REDUCE_ALL(f64)

RK_REDUCE_PART_KERNELS(min, rd_min_op<bf16>, bf16)
RK_REDUCE_PART_KERNELS(max, rd_max_op<bf16>, bf16)
RK_REDUCE_PART_KERNELS(min, rd_min_op<f16>, f16)
RK_REDUCE_PART_KERNELS(max, rd_max_op<f16>, f16)
RK_REDUCE_PART_KERNELS(min, rd_min_op<f32>, f32)
RK_REDUCE_PART_KERNELS(max, rd_max_op<f32>, f32)
RK_REDUCE_PART_KERNELS(min, rd_min_op<f64>, f64)
RK_REDUCE_PART_KERNELS(max, rd_max_op<f64>, f64)
