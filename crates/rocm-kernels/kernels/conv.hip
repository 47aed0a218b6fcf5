// Convolution helpers for the GEMM-based convolution path: im2col (forward convolution) and
// col2im (transposed convolution), over 2-D NCHW data; 1-D convolutions use them with a height
// of 1. Launches are 1-D grid-stride loops over the output elements; index math is 32-bit when
// numel < 2^31, 64-bit otherwise; all offsets are 64-bit.
//
//   im2col_{T}(numel, c, h, w, k_h, k_w, h_out, w_out, pad_h, pad_w, st_h, st_w, dil_h, dil_w,
//              s0, s1, s2, s3, src, dst)
//       dst is contiguous (b, c * k_h * k_w, h_out * w_out): row (ch, ky, kx), column (oy, ox)
//       holds src[b, ch, oy * st_h + ky * dil_h - pad_h, ox * st_w + kx * dil_w - pad_w], or 0
//       where that falls into the padding. src is strided (s0..s3, in elements) and starts at
//       the view's first element. numel = b * c * k_h * k_w * h_out * w_out.
//       Then out[b] (c_out, h_out * w_out) = weight (c_out, c * k_h * k_w) x dst[b].
//
//   col2im_{T}(numel, c, h_out, w_out, h_in, w_in, k_h, k_w, pad_h, pad_w, st_h, st_w,
//              dil_h, dil_w, col, dst)
//       col is contiguous (b, c * k_h * k_w, h_in * w_in) (= weight^T x input of a transposed
//       convolution); dst is contiguous (b, c, h_out, w_out), each element the sum, in the
//       arithmetic type (f32 for f16/bf16), of every col entry (ch, ky, kx, iy, ix) with
//       iy * st_h + ky * dil_h - pad_h == oy and ix * st_w + kx * dil_w - pad_w == ox, in
//       (ky, kx) row-major order. A gather: deterministic, no atomics.

#define RK_CONV_LOOP(NUMEL, BODY)                                                             \
    do {                                                                                      \
        if ((NUMEL) < 0x80000000ull) {                                                        \
            for (u32 i = (u32)rk_thread_id(); i < (u32)(NUMEL); i += (u32)rk_thread_count())  \
                BODY(i);                                                                      \
        } else {                                                                              \
            for (u64 i = rk_thread_id(); i < (NUMEL); i += rk_thread_count()) BODY(i);        \
        }                                                                                     \
    } while (0)

#define RK_IM2COL(T)                                                                           \
    RK_KERNEL void im2col_##T(u64 numel, u64 c, u64 h, u64 w, u64 k_h, u64 k_w, u64 h_out,     \
                              u64 w_out, u64 pad_h, u64 pad_w, u64 st_h, u64 st_w, u64 dil_h,  \
                              u64 dil_w, u64 s0, u64 s1, u64 s2, u64 s3, const T* src,         \
                              T* dst) {                                                        \
        auto body = [&](auto i) {                                                              \
            typedef decltype(i) I;                                                             \
            I r = i;                                                                           \
            const I ox = r % (I)w_out;                                                         \
            r /= (I)w_out;                                                                     \
            const I oy = r % (I)h_out;                                                         \
            r /= (I)h_out;                                                                     \
            const I kx = r % (I)k_w;                                                           \
            r /= (I)k_w;                                                                       \
            const I ky = r % (I)k_h;                                                           \
            r /= (I)k_h;                                                                       \
            const I ch = r % (I)c;                                                             \
            const I b = r / (I)c;                                                              \
            const i64 iy = (i64)((u64)oy * st_h + (u64)ky * dil_h) - (i64)pad_h;               \
            const i64 ix = (i64)((u64)ox * st_w + (u64)kx * dil_w) - (i64)pad_w;               \
            T v = rk_from_compute<T>((typename rk_compute<T>::type)0);                         \
            if (iy >= 0 && iy < (i64)h && ix >= 0 && ix < (i64)w)                              \
                v = src[(u64)b * s0 + (u64)ch * s1 + (u64)iy * s2 + (u64)ix * s3];             \
            dst[i] = v;                                                                        \
        };                                                                                     \
        RK_CONV_LOOP(numel, body);                                                             \
    }

#define RK_COL2IM(T)                                                                           \
    RK_KERNEL void col2im_##T(u64 numel, u64 c, u64 h_out, u64 w_out, u64 h_in, u64 w_in,      \
                              u64 k_h, u64 k_w, u64 pad_h, u64 pad_w, u64 st_h, u64 st_w,      \
                              u64 dil_h, u64 dil_w, const T* col, T* dst) {                    \
        auto body = [&](auto i) {                                                              \
            typedef decltype(i) I;                                                             \
            I r = i;                                                                           \
            const I ox = r % (I)w_out;                                                         \
            r /= (I)w_out;                                                                     \
            const I oy = r % (I)h_out;                                                         \
            const I plane = r / (I)h_out; /* b * c + ch */                                     \
            const u64 hw = h_in * w_in;                                                        \
            const T* base = col + (u64)plane * k_h * k_w * hw;                                 \
            typename rk_compute<T>::type acc = 0;                                              \
            for (u64 ky = 0; ky < k_h; ++ky) {                                                 \
                const i64 ty = (i64)((u64)oy + pad_h) - (i64)(ky * dil_h);                     \
                if (ty < 0 || (u64)ty % st_h != 0) continue;                                   \
                const u64 iy = (u64)ty / st_h;                                                 \
                if (iy >= h_in) continue;                                                      \
                for (u64 kx = 0; kx < k_w; ++kx) {                                             \
                    const i64 tx = (i64)((u64)ox + pad_w) - (i64)(kx * dil_w);                 \
                    if (tx < 0 || (u64)tx % st_w != 0) continue;                               \
                    const u64 ix = (u64)tx / st_w;                                             \
                    if (ix >= w_in) continue;                                                  \
                    acc += rk_to_compute(base[(ky * k_w + kx) * hw + iy * w_in + ix]);         \
                }                                                                              \
            }                                                                                  \
            dst[i] = rk_from_compute<T>(acc);                                                  \
        };                                                                                     \
        RK_CONV_LOOP(numel, body);                                                             \
    }

#define RK_CONV_ALL(T) \
    RK_IM2COL(T)       \
    RK_COL2IM(T)

RK_CONV_ALL(bf16)
RK_CONV_ALL(f16)
RK_CONV_ALL(f32)
RK_CONV_ALL(f64)
