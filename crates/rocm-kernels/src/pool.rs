//! Typed launch wrappers for pooling and upsampling (module `pool`): `avg_pool2d_{T}`,
//! `max_pool2d_{T}`, `upsample_nearest1d_{T}`, `upsample_nearest2d_{T}` and
//! `upsample_bilinear2d_{T}`, for all 9 dtypes.
//!
//! Inputs are NCHW (NCL for 1-D) [`Strided`] views (any strides, the view starting at the
//! layout's start offset); outputs are contiguous NCHW (NCL). Every wrapper validates before
//! launching ([`Error::Layout`] for a wrong rank, a view too short for its strides, a window
//! larger than the input, a zero kernel size or stride, an empty input to upsample from, a bad
//! scale factor, a destination of the wrong length) and never launches a kernel that could read
//! or write out of bounds. An empty output returns `Ok(())` without launching anything.
//!
//! ## Semantics (candle-core 0.11's CPU backend)
//! * pooling: no padding, `h_out = (h - k_h) / s_h + 1` (likewise w), window rows
//!   `y * s_h .. y * s_h + k_h`;
//!   * avg, floats: the window sum in row-major order, in the arithmetic type (f32 for f16/bf16,
//!     where Candle sums in the 16-bit type), times `1 / (k_h k_w)` (computed in f64, rounded to
//!     the arithmetic type): f32/f64 match Candle bit for bit;
//!   * avg, integers: the exact mean truncated toward zero (as PyTorch). Candle's CPU backend
//!     multiplies the sum by `T::from_f64(1 / (k_h k_w))`, which is 0 for integers, so it
//!     returns 0 for every window of more than one element (and may overflow the sum);
//!   * max: the window's first element, replaced by each later element it is less than
//!     (row-major): a NaN first element stays, later NaNs are skipped; bit-exact;
//! * nearest: per axis `src = min(in - 1, (dst as f64 * (in as f64 / out as f64)) as usize)`;
//!   bit-exact copies, all dtypes;
//! * bilinear: Candle's scale rules (`align_corners`: `(in - 1) / (out - 1)`, or 0 for a single
//!   output; else `1 / scale_factor` when given, or `in / out`), source coordinate
//!   `align ? scale * o : scale * (o + 0.5) - 0.5` clamped below at 0, taps
//!   `i0 = floor(src)`, `i1 = min(i0 + 1, in - 1)`, weight `clamp(src - i0, 0, 1)`, the blend in
//!   f64 in Candle's order, rounded once to T (integers: Rust `as`, truncating and saturating;
//!   f16/bf16: correctly rounded, where the `half` crate may round twice). Where a scale factor
//!   would put `i0` past the input (Candle then reads out of bounds), `i0` is clamped to `in - 1`.
//!   An unchanged size is an exact copy of the (strided) input, whatever `align_corners` and the
//!   scale factors (Candle returns the whole input storage there, ignoring the layout).

use hip_core::{DeviceSliceMut, KernelArg, KernelArgs, LaunchConfig, Stream};

use crate::dtype::KernelDType;
use crate::elementwise::layout_err;
use crate::elementwise::Strided;
use crate::error::{Error, Result};

/// Threads per block of every pool launch.
const BLOCK_SIZE: u32 = 256;
/// Grid-stride launches use at most this many blocks per multiprocessor.
const BLOCKS_PER_MULTIPROCESSOR: usize = 16;

/// The element count of `dims`, or an error when it overflows `usize`.
fn numel(op: &str, dims: &[usize]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d)
            .ok_or_else(|| layout_err(op, format!("the shape {dims:?} overflows usize")))
    })
}

/// Checks the rank and that an operand with `strides` over `dims` stays inside its view.
fn check_input<T: KernelDType>(
    op: &str,
    rank: usize,
    dims: &[usize],
    src: &Strided<'_, T>,
) -> Result<()> {
    if dims.len() != rank {
        return Err(layout_err(
            op,
            format!("expects a rank-{rank} input, got dims {dims:?}"),
        ));
    }
    let strides = src.strides;
    if strides.len() != dims.len() {
        return Err(layout_err(
            op,
            format!("{} strides {strides:?} for dims {dims:?}", strides.len()),
        ));
    }
    if dims.contains(&0) {
        return Ok(());
    }
    let mut max_offset = 0usize;
    for (&d, &s) in dims.iter().zip(strides) {
        max_offset = (d - 1)
            .checked_mul(s)
            .and_then(|x| x.checked_add(max_offset))
            .ok_or_else(|| {
                layout_err(
                    op,
                    format!("strides {strides:?} over {dims:?} overflow usize"),
                )
            })?;
    }
    if max_offset >= src.data.len() {
        return Err(layout_err(
            op,
            format!(
                "the input reaches element {max_offset} with strides {strides:?} over {dims:?}, \
                 but its view holds {} elements",
                src.data.len()
            ),
        ));
    }
    Ok(())
}

fn check_dst(op: &str, out_dims: &[usize], dst_len: usize) -> Result<usize> {
    let n = numel(op, out_dims)?;
    if dst_len != n {
        return Err(layout_err(
            op,
            format!("the destination holds {dst_len} elements but the output {out_dims:?} has {n}"),
        ));
    }
    Ok(n)
}

/// A kernel argument of one of the scalar types the pool kernels take.
#[derive(Debug, Clone, Copy)]
enum Arg {
    U64(usize),
    U32(u32),
    F64(f64),
}

impl KernelArg for Arg {
    fn push_arg(&self, args: &mut KernelArgs, _stream: &Stream) -> hip_core::Result<()> {
        match *self {
            Arg::U64(v) => args.push(v as u64),
            Arg::U32(v) => args.push(v),
            Arg::F64(v) => args.push(v),
        }
        Ok(())
    }
}

/// Launches `kernel(numel, scalars..., src, dst)` over `n` output elements.
///
/// # Safety
/// `scalars` must be the kernel's parameters between `numel` and `src`, and with them the
/// kernel must read `src` only inside its view and write exactly `dst[0..n)` (the callers check
/// both: input bounds by [`check_input`], the output length by [`check_dst`]).
unsafe fn launch<T: KernelDType>(
    stream: &Stream,
    kernel: &str,
    n: usize,
    scalars: &[Arg],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
) -> Result<()> {
    let device = stream.device();
    let sms = crate::elementwise::multiprocessors(stream);
    let max_blocks = (sms * BLOCKS_PER_MULTIPROCESSOR).min(65_535);
    let config = LaunchConfig {
        grid: [
            n.div_ceil(BLOCK_SIZE as usize).clamp(1, max_blocks) as u32,
            1,
            1,
        ],
        block: [BLOCK_SIZE, 1, 1],
        shared_mem_bytes: 0,
    };
    let f = crate::modules::function(&device, "pool", kernel)?;
    let mut builder = f.builder(stream, config).arg(n as u64);
    for &a in scalars {
        builder = builder.arg(a);
    }
    // SAFETY: the argument list is (u64 numel, scalars..., const T* src, T* dst) as the caller
    // guarantees, and the accesses are in bounds (the caller's contract).
    unsafe { builder.arg(src.data).arg(&mut *dst).launch()? };
    Ok(())
}

/// The output dims `[b, c, (h - k_h) / s_h + 1, (w - k_w) / s_w + 1]` of a 2-D pooling of the
/// NCHW `dims`, or an error (rank, zero kernel or stride, window larger than the input).
pub fn pool2d_output_dims(
    dims: &[usize],
    kernel: (usize, usize),
    stride: (usize, usize),
) -> Result<[usize; 4]> {
    const OP: &str = "pool2d";
    let &[b, c, h, w] = dims else {
        return Err(layout_err(
            OP,
            format!("expects a rank-4 (NCHW) input, got dims {dims:?}"),
        ));
    };
    let ((k_h, k_w), (s_h, s_w)) = (kernel, stride);
    if k_h == 0 || k_w == 0 || s_h == 0 || s_w == 0 {
        return Err(layout_err(
            OP,
            format!("kernel size {kernel:?} and stride {stride:?} must be positive"),
        ));
    }
    if k_h > h || k_w > w {
        return Err(layout_err(
            OP,
            format!("the kernel {kernel:?} is larger than the input's {h}x{w}"),
        ));
    }
    Ok([b, c, (h - k_h) / s_h + 1, (w - k_w) / s_w + 1])
}

fn pool2d<T: KernelDType>(
    stream: &Stream,
    name: &str,
    dims: &[usize],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    kernel: (usize, usize),
    stride: (usize, usize),
) -> Result<()> {
    check_input(name, 4, dims, &src)?;
    let out = pool2d_output_dims(dims, kernel, stride).map_err(|e| match e {
        Error::Layout { reason, .. } => layout_err(name, reason),
        e => e,
    })?;
    let n = check_dst(name, &out, dst.len())?;
    if n == 0 {
        return Ok(());
    }
    let s = src.strides;
    let mut scalars = vec![
        Arg::U64(out[1]),
        Arg::U64(out[2]),
        Arg::U64(out[3]),
        Arg::U64(s[0]),
        Arg::U64(s[1]),
        Arg::U64(s[2]),
        Arg::U64(s[3]),
        Arg::U64(kernel.0),
        Arg::U64(kernel.1),
        Arg::U64(stride.0),
        Arg::U64(stride.1),
    ];
    if name == "avg_pool2d" {
        scalars.push(Arg::F64(1.0 / (kernel.0 * kernel.1) as f64));
    }
    // SAFETY: `{avg,max}_pool2d_T(u64 numel, u64 c, u64 h_out, u64 w_out, u64 s0..s3, u64 k_h,
    // u64 k_w, u64 st_h, u64 st_w, [f64 scale,] src, dst)`: the scalars above. Output element
    // (b, ch, y, x) reads src at b s0 + ch s1 + (y st_h + m) s2 + (x st_w + n) s3 with
    // m < k_h, n < k_w: y st_h + m <= (h_out - 1) st_h + k_h - 1 <= h - 1 (likewise w), inside
    // the view (check_input); it writes dst[0..n), n == dst.len() (check_dst).
    unsafe {
        launch(
            stream,
            &format!("{name}_{}", T::NAME),
            n,
            &scalars,
            src,
            dst,
        )
    }
}

/// 2-D average pooling of the NCHW `src` (`dims`, any strides) into the contiguous `dst`
/// (`pool2d_output_dims(dims, kernel, stride)`), no padding. All dtypes (see the module docs
/// for integers).
pub fn avg_pool2d<T: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    kernel: (usize, usize),
    stride: (usize, usize),
) -> Result<()> {
    pool2d(stream, "avg_pool2d", dims, src, dst, kernel, stride)
}

/// 2-D max pooling of the NCHW `src` into the contiguous `dst`, no padding. All dtypes.
pub fn max_pool2d<T: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    kernel: (usize, usize),
    stride: (usize, usize),
) -> Result<()> {
    pool2d(stream, "max_pool2d", dims, src, dst, kernel, stride)
}

fn check_upsample_axis(op: &str, axis: &str, input: usize, output: usize) -> Result<()> {
    if input == 0 && output > 0 {
        return Err(layout_err(
            op,
            format!("cannot upsample an empty {axis} axis to {output}"),
        ));
    }
    Ok(())
}

/// Nearest-neighbour upsampling of the NCL `src` (`dims = [b, c, l]`, any strides) to length
/// `l_out` into the contiguous `dst` (`[b, c, l_out]`). All dtypes, bit-exact.
pub fn upsample_nearest1d<T: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    l_out: usize,
) -> Result<()> {
    const OP: &str = "upsample_nearest1d";
    check_input(OP, 3, dims, &src)?;
    let n = check_dst(OP, &[dims[0], dims[1], l_out], dst.len())?;
    check_upsample_axis(OP, "length", dims[2], l_out)?;
    if n == 0 {
        return Ok(());
    }
    let s = src.strides;
    let scalars = [
        Arg::U64(dims[1]),
        Arg::U64(dims[2]),
        Arg::U64(l_out),
        Arg::U64(s[0]),
        Arg::U64(s[1]),
        Arg::U64(s[2]),
        Arg::F64(dims[2] as f64 / l_out as f64),
    ];
    // SAFETY: `upsample_nearest1d_T(u64 numel, u64 c, u64 l_in, u64 l_out, u64 s0, s1, s2,
    // f64 scale, src, dst)`: the scalars above. The source index is clamped to l_in - 1, so
    // reads stay inside the view (check_input); it writes dst[0..n), n == dst.len().
    unsafe { launch(stream, &format!("{OP}_{}", T::NAME), n, &scalars, src, dst) }
}

/// Nearest-neighbour upsampling of the NCHW `src` to `h_out x w_out` into the contiguous `dst`
/// (`[b, c, h_out, w_out]`). All dtypes, bit-exact.
pub fn upsample_nearest2d<T: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    h_out: usize,
    w_out: usize,
) -> Result<()> {
    nearest2d("upsample_nearest2d", stream, dims, src, dst, h_out, w_out)
}

fn nearest2d<T: KernelDType>(
    op: &str,
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    h_out: usize,
    w_out: usize,
) -> Result<()> {
    check_input(op, 4, dims, &src)?;
    let n = check_dst(op, &[dims[0], dims[1], h_out, w_out], dst.len())?;
    check_upsample_axis(op, "height", dims[2], h_out)?;
    check_upsample_axis(op, "width", dims[3], w_out)?;
    if n == 0 {
        return Ok(());
    }
    let s = src.strides;
    let scalars = [
        Arg::U64(dims[1]),
        Arg::U64(dims[2]),
        Arg::U64(dims[3]),
        Arg::U64(h_out),
        Arg::U64(w_out),
        Arg::U64(s[0]),
        Arg::U64(s[1]),
        Arg::U64(s[2]),
        Arg::U64(s[3]),
        Arg::F64(dims[2] as f64 / h_out as f64),
        Arg::F64(dims[3] as f64 / w_out as f64),
    ];
    // SAFETY: `upsample_nearest2d_T(u64 numel, u64 c, u64 h_in, u64 w_in, u64 h_out, u64 w_out,
    // u64 s0..s3, f64 scale_h, f64 scale_w, src, dst)`: the scalars above. Source indices are
    // clamped to in - 1 per axis, inside the view (check_input); it writes dst[0..n).
    unsafe {
        launch(
            stream,
            &format!("upsample_nearest2d_{}", T::NAME),
            n,
            &scalars,
            src,
            dst,
        )
    }
}

/// The source-coordinate scale of one bilinear axis, by Candle's rules: with `align_corners`
/// `(input - 1) / (output - 1)` (0 for a single output); otherwise `1 / scale_factor` when one
/// is given, else `input / output`.
pub fn bilinear_scale(
    input: usize,
    output: usize,
    align_corners: bool,
    scale_factor: Option<f64>,
) -> f64 {
    if align_corners {
        if output > 1 {
            (input - 1) as f64 / (output - 1) as f64
        } else {
            0.0
        }
    } else if let Some(f) = scale_factor {
        1.0 / f
    } else {
        input as f64 / output as f64
    }
}

/// Bilinear upsampling (or downsampling) of the NCHW `src` to `h_out x w_out` into the
/// contiguous `dst` (`[b, c, h_out, w_out]`), Candle's `upsample_bilinear2d` (see the module
/// docs). `scale_h` / `scale_w` are the optional scale factors (output / input) that replace
/// `input / output` in the coordinate mapping when `align_corners` is false; they must be
/// finite and positive. All dtypes.
#[allow(clippy::too_many_arguments)]
pub fn upsample_bilinear2d<T: KernelDType>(
    stream: &Stream,
    dims: &[usize],
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
    h_out: usize,
    w_out: usize,
    align_corners: bool,
    scale_h: Option<f64>,
    scale_w: Option<f64>,
) -> Result<()> {
    const OP: &str = "upsample_bilinear2d";
    check_input(OP, 4, dims, &src)?;
    let n = check_dst(OP, &[dims[0], dims[1], h_out, w_out], dst.len())?;
    check_upsample_axis(OP, "height", dims[2], h_out)?;
    check_upsample_axis(OP, "width", dims[3], w_out)?;
    for f in [scale_h, scale_w].into_iter().flatten() {
        if !(f.is_finite() && f > 0.0) {
            return Err(layout_err(
                OP,
                format!("scale factors must be finite and positive, got {f}"),
            ));
        }
    }
    if n == 0 {
        return Ok(());
    }
    if dims[2] == h_out && dims[3] == w_out {
        // Unchanged size: an exact copy (nearest with scale 1 maps every index to itself).
        return nearest2d(OP, stream, dims, src, dst, h_out, w_out);
    }
    let s = src.strides;
    let scalars = [
        Arg::U64(dims[1]),
        Arg::U64(dims[2]),
        Arg::U64(dims[3]),
        Arg::U64(h_out),
        Arg::U64(w_out),
        Arg::U64(s[0]),
        Arg::U64(s[1]),
        Arg::U64(s[2]),
        Arg::U64(s[3]),
        Arg::U32(align_corners as u32),
        Arg::F64(bilinear_scale(dims[2], h_out, align_corners, scale_h)),
        Arg::F64(bilinear_scale(dims[3], w_out, align_corners, scale_w)),
    ];
    // SAFETY: `upsample_bilinear2d_T(u64 numel, u64 c, u64 h_in, u64 w_in, u64 h_out,
    // u64 w_out, u64 s0..s3, u32 align_corners, f64 scale_h, f64 scale_w, src, dst)`: the
    // scalars above. The taps are clamped to [0, in - 1] per axis (in >= 1 here), inside the
    // view (check_input); it writes dst[0..n), n == dst.len().
    unsafe { launch(stream, &format!("{OP}_{}", T::NAME), n, &scalars, src, dst) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_dims_and_errors() {
        assert_eq!(
            pool2d_output_dims(&[2, 3, 7, 5], (2, 2), (2, 2)).unwrap(),
            [2, 3, 3, 2]
        );
        assert_eq!(
            pool2d_output_dims(&[1, 1, 7, 5], (3, 1), (1, 2)).unwrap(),
            [1, 1, 5, 3]
        );
        assert_eq!(
            pool2d_output_dims(&[1, 1, 4, 4], (4, 4), (9, 9)).unwrap(),
            [1, 1, 1, 1]
        );
        for (dims, k, s) in [
            (&[1usize, 1, 4, 4][..], (5, 1), (1, 1)),
            (&[1, 1, 4, 4], (0, 1), (1, 1)),
            (&[1, 1, 4, 4], (1, 1), (1, 0)),
            (&[1, 4, 4], (1, 1), (1, 1)),
        ] {
            let e = pool2d_output_dims(dims, k, s).unwrap_err();
            assert!(matches!(e, Error::Layout { .. }), "{e}");
        }
    }

    #[test]
    fn bilinear_scales_follow_candle() {
        assert_eq!(bilinear_scale(4, 8, false, None), 0.5);
        assert_eq!(bilinear_scale(4, 8, false, Some(2.0)), 0.5);
        assert_eq!(bilinear_scale(4, 7, false, Some(2.0)), 0.5);
        assert_eq!(bilinear_scale(4, 7, true, Some(2.0)), 0.5);
        assert_eq!(bilinear_scale(4, 1, true, None), 0.0);
    }

    #[test]
    fn kernels_exist_in_the_source() {
        let src = crate::modules::full_source("pool").expect("pool module");
        for dt in [
            "u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64",
        ] {
            assert!(src.contains(&format!("RK_POOL_ALL({dt})")), "{dt}");
        }
        for k in [
            "void avg_pool2d_##T(",
            "void max_pool2d_##T(",
            "void upsample_nearest1d_##T(",
            "void upsample_nearest2d_##T(",
            "void upsample_bilinear2d_##T(",
        ] {
            assert!(src.contains(k), "{k}");
        }
    }
}
