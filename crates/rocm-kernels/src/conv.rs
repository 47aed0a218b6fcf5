//! Typed launch wrappers for the GEMM-based convolution path (module `conv`): [`im2col`] for
//! forward convolutions and [`col2im`] for transposed convolutions, over 2-D NCHW data (a 1-D
//! convolution is the 2-D one with a height of 1), for bf16, f16, f32 and f64 (the GEMM dtypes).
//!
//! A forward convolution of `x (b, c, h, w)` with `weight (c_out, c, k_h, k_w)` is
//! `out[b] = weight (c_out, c k_h k_w) x col[b] (c k_h k_w, h_out w_out)` with
//! `col = im2col(x)`; a transposed convolution of `x (b, c_in, h, w)` with
//! `weight (c_in, c_out, k_h, k_w)` is `col2im(col)` with
//! `col[b] = weight^T (c_out k_h k_w, c_in) x x[b] (c_in, h w)`. [`ConvGeometry`] holds the
//! sizes and parameters; its methods give the output sizes with Candle's formulas.
//!
//! Every wrapper validates before launching ([`Error::Layout`] for a zero stride or dilation, a
//! kernel window larger than the padded input, a view too short for its strides, a destination
//! of the wrong length; [`Error::Unsupported`] for an integer dtype) and never launches a kernel
//! that could read or write out of bounds. An empty output launches nothing.

use hip_core::{DeviceSlice, DeviceSliceMut, Stream};

use crate::dtype::KernelDType;
use crate::elementwise::{
    check_operand, function, launch_config, layout_err, numel, unsupported, Strided,
};
use crate::error::Result;

/// The dtypes the `conv` module has kernels for.
pub const CONV_DTYPES: &[&str] = &["bf16", "f16", "f32", "f64"];

/// The sizes and parameters of one 2-D convolution (per axis: `(height, width)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvGeometry {
    /// Batch size.
    pub batch: usize,
    /// Channels of the image side: the input of a forward convolution, the output of a
    /// transposed one.
    pub channels: usize,
    /// Kernel window `(k_h, k_w)`.
    pub kernel: (usize, usize),
    /// Zero padding `(pad_h, pad_w)` on both sides.
    pub padding: (usize, usize),
    /// Stride `(st_h, st_w)`, positive.
    pub stride: (usize, usize),
    /// Dilation `(dil_h, dil_w)`, positive.
    pub dilation: (usize, usize),
}

impl ConvGeometry {
    fn check(&self, op: &str) -> Result<()> {
        let (s, d, k) = (self.stride, self.dilation, self.kernel);
        if s.0 == 0 || s.1 == 0 || d.0 == 0 || d.1 == 0 || k.0 == 0 || k.1 == 0 {
            return Err(layout_err(
                op,
                format!("kernel {k:?}, stride {s:?} and dilation {d:?} must all be positive"),
            ));
        }
        Ok(())
    }

    /// The output size `(h_out, w_out)` of a forward convolution of an `(h, w)` image:
    /// `(h + 2 pad - dil (k - 1) - 1) / stride + 1` per axis, or an error when the dilated
    /// window is larger than the padded input (or a parameter is zero).
    pub fn forward_output(&self, input: (usize, usize)) -> Result<(usize, usize)> {
        const OP: &str = "conv";
        self.check(OP)?;
        let axis = |i: usize, k: usize, p: usize, s: usize, d: usize| -> Result<usize> {
            let (window, padded) = match (
                d.checked_mul(k - 1).and_then(|w| w.checked_add(1)),
                p.checked_mul(2).and_then(|w| w.checked_add(i)),
            ) {
                (Some(window), Some(padded)) => (window, padded),
                _ => return Err(overflow(OP, i, k, p, s, d)),
            };
            if window > padded {
                return Err(layout_err(
                    OP,
                    format!(
                        "the dilated kernel window {window} is larger than the padded input {padded}"
                    ),
                ));
            }
            Ok((padded - window) / s + 1)
        };
        Ok((
            axis(
                input.0,
                self.kernel.0,
                self.padding.0,
                self.stride.0,
                self.dilation.0,
            )?,
            axis(
                input.1,
                self.kernel.1,
                self.padding.1,
                self.stride.1,
                self.dilation.1,
            )?,
        ))
    }

    /// The output size of a transposed convolution of an `(h, w)` input with `output_padding`:
    /// `(i - 1) stride + dil (k - 1) + output_padding + 1 - 2 pad` per axis, or an error when
    /// that is negative (or a parameter is zero).
    pub fn transposed_output(
        &self,
        input: (usize, usize),
        output_padding: (usize, usize),
    ) -> Result<(usize, usize)> {
        const OP: &str = "conv_transpose";
        self.check(OP)?;
        let axis = |i: usize, k: usize, p: usize, s: usize, d: usize, op: usize| -> Result<usize> {
            if i == 0 {
                return Err(layout_err(OP, "the input has an empty spatial axis"));
            }
            let full = (i - 1)
                .checked_mul(s)
                .and_then(|f| f.checked_add(d.checked_mul(k - 1)?))
                .and_then(|f| f.checked_add(op)?.checked_add(1));
            let (Some(full), Some(both)) = (full, p.checked_mul(2)) else {
                return Err(overflow(OP, i, k, p, s, d));
            };
            full.checked_sub(both).ok_or_else(|| {
                layout_err(
                    OP,
                    format!("padding {p} on both sides is more than the full output {full}"),
                )
            })
        };
        Ok((
            axis(
                input.0,
                self.kernel.0,
                self.padding.0,
                self.stride.0,
                self.dilation.0,
                output_padding.0,
            )?,
            axis(
                input.1,
                self.kernel.1,
                self.padding.1,
                self.stride.1,
                self.dilation.1,
                output_padding.1,
            )?,
        ))
    }
}

fn check_dtype<T: KernelDType>(op: &str) -> Result<()> {
    if !CONV_DTYPES.contains(&T::NAME) {
        return Err(unsupported(
            op,
            T::NAME,
            "the GEMM-based convolution path computes bf16, f16, f32 and f64 only",
        ));
    }
    Ok(())
}

fn check_len(op: &str, what: &str, expected: usize, len: usize) -> Result<()> {
    if expected != len {
        return Err(layout_err(
            op,
            format!("{what} holds {len} elements but needs {expected}"),
        ));
    }
    Ok(())
}

/// Unfolds the NCHW image `src` (`(geom.batch, geom.channels, h, w)` with any strides) into
/// the contiguous `dst` of `(batch, channels k_h k_w, h_out w_out)` elements (see the module
/// docs); `input = (h, w)`. Returns `(h_out, w_out)`.
pub fn im2col<T: KernelDType>(
    stream: &Stream,
    geom: &ConvGeometry,
    input: (usize, usize),
    src: Strided<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
) -> Result<(usize, usize)> {
    const OP: &str = "im2col";
    check_dtype::<T>(OP)?;
    let (h_out, w_out) = geom.forward_output(input)?;
    let dims = [geom.batch, geom.channels, input.0, input.1];
    check_operand(OP, "the input", &dims, src.strides, src.data.len())?;
    let n = numel(
        OP,
        &[
            geom.batch,
            geom.channels,
            geom.kernel.0,
            geom.kernel.1,
            h_out,
            w_out,
        ],
    )?;
    check_len(OP, "the column buffer", n, dst.len())?;
    if n == 0 {
        return Ok((h_out, w_out));
    }
    let s = src.strides;
    let f = function(stream, "conv", &format!("im2col_{}", T::NAME))?;
    let b = f
        .builder(stream, launch_config(stream, n))
        .arg(n as u64)
        .arg(geom.channels as u64)
        .arg(input.0 as u64)
        .arg(input.1 as u64)
        .arg(geom.kernel.0 as u64)
        .arg(geom.kernel.1 as u64)
        .arg(h_out as u64)
        .arg(w_out as u64)
        .arg(geom.padding.0 as u64)
        .arg(geom.padding.1 as u64)
        .arg(geom.stride.0 as u64)
        .arg(geom.stride.1 as u64)
        .arg(geom.dilation.0 as u64)
        .arg(geom.dilation.1 as u64)
        .arg(s[0] as u64)
        .arg(s[1] as u64)
        .arg(s[2] as u64)
        .arg(s[3] as u64);
    // SAFETY: `im2col_T(u64 numel, u64 c, h, w, k_h, k_w, h_out, w_out, pad_h, pad_w, st_h,
    // st_w, dil_h, dil_w, s0, s1, s2, s3, const T* src, T* dst)`, the arguments above in that
    // order. It reads src only at (b, ch, iy, ix) with 0 <= iy < h, 0 <= ix < w (padding taps
    // are skipped), inside the view (check_operand), and writes dst[0..n), n == dst.len().
    unsafe { b.arg(src.data).arg(&mut *dst).launch()? };
    Ok((h_out, w_out))
}

/// Folds the contiguous column buffer `col` of `(geom.batch, geom.channels k_h k_w, h_in w_in)`
/// elements into the contiguous NCHW `dst` of `(batch, channels, h_out, w_out)`, summing the
/// overlapping taps of a transposed convolution (see the module docs); `input = (h_in, w_in)`
/// is the transposed convolution's input size, `output = (h_out, w_out)` its output size (which
/// [`ConvGeometry::transposed_output`] gives for an output padding).
pub fn col2im<T: KernelDType>(
    stream: &Stream,
    geom: &ConvGeometry,
    input: (usize, usize),
    output: (usize, usize),
    col: &DeviceSlice<'_, T>,
    dst: &mut DeviceSliceMut<'_, T>,
) -> Result<()> {
    const OP: &str = "col2im";
    check_dtype::<T>(OP)?;
    geom.check(OP)?;
    let col_len = numel(
        OP,
        &[
            geom.batch,
            geom.channels,
            geom.kernel.0,
            geom.kernel.1,
            input.0,
            input.1,
        ],
    )?;
    check_len(OP, "the column buffer", col_len, col.len())?;
    let n = numel(OP, &[geom.batch, geom.channels, output.0, output.1])?;
    check_len(OP, "the destination", n, dst.len())?;
    if n == 0 {
        return Ok(());
    }
    let f = function(stream, "conv", &format!("col2im_{}", T::NAME))?;
    let b = f
        .builder(stream, launch_config(stream, n))
        .arg(n as u64)
        .arg(geom.channels as u64)
        .arg(output.0 as u64)
        .arg(output.1 as u64)
        .arg(input.0 as u64)
        .arg(input.1 as u64)
        .arg(geom.kernel.0 as u64)
        .arg(geom.kernel.1 as u64)
        .arg(geom.padding.0 as u64)
        .arg(geom.padding.1 as u64)
        .arg(geom.stride.0 as u64)
        .arg(geom.stride.1 as u64)
        .arg(geom.dilation.0 as u64)
        .arg(geom.dilation.1 as u64);
    // SAFETY: `col2im_T(u64 numel, u64 c, h_out, w_out, h_in, w_in, k_h, k_w, pad_h, pad_w,
    // st_h, st_w, dil_h, dil_w, const T* col, T* dst)`, the arguments above in that order. It
    // reads col only at (plane, ky, kx, iy, ix) with plane < b c, ky < k_h, kx < k_w, iy < h_in,
    // ix < w_in: inside the col_len == col.len() elements checked above; it writes dst[0..n),
    // n == dst.len().
    unsafe { b.arg(*col).arg(&mut *dst).launch()? };
    Ok(())
}

/// The error for an axis whose size arithmetic overflows usize (absurd parameters).
fn overflow(op: &str, i: usize, k: usize, p: usize, s: usize, d: usize) -> crate::Error {
    layout_err(
        op,
        format!(
            "input {i}, kernel {k}, padding {p}, stride {s} and dilation {d} overflow the size \
             arithmetic"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_parameters_are_errors_not_overflows() {
        let g = geom(3, 1, 1, usize::MAX);
        assert!(g.forward_output((8, 8)).is_err());
        assert!(g.transposed_output((8, 8), (0, 0)).is_err());
        let g = geom(3, usize::MAX, 1, 1);
        assert!(g.forward_output((8, 8)).is_err());
        assert!(g.transposed_output((8, 8), (0, 0)).is_err());
        let g = geom(3, 0, usize::MAX, 1);
        assert!(g.transposed_output((8, 8), (0, 0)).is_err());
        assert!(geom(3, 0, 1, 1)
            .transposed_output((8, 8), (usize::MAX, 0))
            .is_err());
    }

    fn geom(k: usize, p: usize, s: usize, d: usize) -> ConvGeometry {
        ConvGeometry {
            batch: 1,
            channels: 1,
            kernel: (k, k),
            padding: (p, p),
            stride: (s, s),
            dilation: (d, d),
        }
    }

    #[test]
    fn forward_output_matches_the_formula() {
        // (i + 2p - d(k-1) - 1) / s + 1, checked against a brute-force count of window starts.
        for i in 1..12 {
            for k in 1..5 {
                for p in 0..3 {
                    for s in 1..4 {
                        for d in 1..3 {
                            let g = geom(k, p, s, d);
                            let starts = (0..)
                                .map(|o: usize| o * s)
                                .take_while(|&start| start + d * (k - 1) < i + 2 * p)
                                .count();
                            match g.forward_output((i, i)) {
                                Ok((h, w)) => {
                                    assert_eq!((h, w), (starts, starts), "i{i} k{k} p{p} s{s} d{d}")
                                }
                                Err(_) => assert_eq!(starts, 0, "i{i} k{k} p{p} s{s} d{d}"),
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn transposed_output_matches_the_formula_and_rejects_bad_padding() {
        let g = geom(3, 1, 2, 1);
        assert_eq!(g.transposed_output((4, 5), (0, 1)).unwrap(), (7, 10));
        assert!(geom(1, 2, 1, 1).transposed_output((1, 1), (0, 0)).is_err());
        assert!(geom(3, 0, 0, 1).transposed_output((2, 2), (0, 0)).is_err());
        assert!(geom(3, 0, 1, 1).transposed_output((0, 2), (0, 0)).is_err());
    }

    #[test]
    fn zero_parameters_are_errors() {
        assert!(geom(3, 0, 0, 1).forward_output((5, 5)).is_err());
        assert!(geom(3, 0, 1, 0).forward_output((5, 5)).is_err());
        assert!(geom(0, 0, 1, 1).forward_output((5, 5)).is_err());
    }
}
