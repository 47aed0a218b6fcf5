//! Convolutions on ROCm: conv1d, conv2d, conv_transpose1d, conv_transpose2d.
//!
//! Two paths compute the same thing:
//! * [`ConvPath::Library`]: MIOpen (cuDNN on the `nvidia` platform) through miopen-safe, with
//!   its algorithm search and a cached choice per shape; f32, f16 and bf16;
//! * [`ConvPath::Im2col`]: our own im2col / col2im kernels (rocm-kernels' `conv` module) plus
//!   one strided-batched GEMM (rocblas-safe); f32, f64, f16 and bf16.
//!
//! [`ConvPath::Auto`] (the default) takes the library where it loads and supports the dtype,
//! else im2col; a call the library fails (e.g. none of the algorithms of its find step ran)
//! is computed on the im2col path instead. The path is chosen per device with [`RocmDevice::set_conv_path`] or for the
//! process with the environment variable `CANDLE_ROCM_CONV` (`auto`, `library`, `im2col`),
//! read when a device is opened. Forcing `library` where it cannot run is a typed error.
//!
//! A 1-D convolution is the 2-D one with a height of 1. Candle splits grouped convolutions
//! into single-group ones above the backend, so the backend always sees `groups == 1`.
//!
//! candle-core 0.11.1 keeps the fields of its `ParamsConv*` structs crate-private; the
//! [`BackendStorage`](candle_core::backend::BackendStorage) methods therefore read them from
//! their `Debug` form (stable for the pinned version, checked field by field), and the
//! inherent [`RocmStorage::conv2d_with`] / [`RocmStorage::conv_transpose2d_with`] take our own
//! [`Conv2dSpec`].

use std::collections::HashMap;

use candle_core::backend::BackendStorage;
use candle_core::conv::{ParamsConv1D, ParamsConv2D, ParamsConvTranspose1D, ParamsConvTranspose2D};
use candle_core::{Layout, Result};
use hip_core::{DeviceBuffer, DeviceSlice};
use rocm_kernels::conv::{self as kconv, ConvGeometry};
use rocm_kernels::KernelDType;

use crate::buffers::{copy_view, view};
use crate::device::RocmDevice;
use crate::error::{hip_err, kernel_err, RocmError};
use crate::storage::{RocmStorage, RocmStorageSlice};

/// Which implementation computes convolutions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ConvPath {
    /// The library where it loads and supports the dtype, else im2col + GEMM.
    #[default]
    Auto,
    /// MIOpen (cuDNN on NVIDIA) only: an error where it cannot run.
    Library,
    /// im2col / col2im kernels + GEMM only.
    Im2col,
}

impl ConvPath {
    /// Parses `auto`, `library` (or `miopen`), `im2col` (case-insensitive).
    pub fn parse(s: &str) -> Option<ConvPath> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Some(ConvPath::Auto),
            "library" | "miopen" | "cudnn" => Some(ConvPath::Library),
            "im2col" | "gemm" => Some(ConvPath::Im2col),
            _ => None,
        }
    }

    /// The path `CANDLE_ROCM_CONV` asks for (`Auto` when unset); an unknown value is an error.
    pub fn from_env() -> std::result::Result<ConvPath, RocmError> {
        match std::env::var("CANDLE_ROCM_CONV") {
            Ok(v) => ConvPath::parse(&v).ok_or_else(|| {
                RocmError::layout(
                    "CANDLE_ROCM_CONV",
                    format!("{v:?} is not a convolution path; use auto, library or im2col"),
                )
            }),
            Err(_) => Ok(ConvPath::Auto),
        }
    }
}

/// One 2-D convolution (a 1-D one has `input.0 == 1`, `kernel.0 == 1`, no padding, stride or
/// dilation along the height).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conv2dSpec {
    /// Batch size.
    pub batch: usize,
    /// Input channels.
    pub c_in: usize,
    /// Output channels.
    pub c_out: usize,
    /// Input `(height, width)`.
    pub input: (usize, usize),
    /// Kernel `(height, width)`.
    pub kernel: (usize, usize),
    /// Zero padding per side `(height, width)`.
    pub padding: (usize, usize),
    /// Stride `(height, width)`.
    pub stride: (usize, usize),
    /// Dilation `(height, width)`.
    pub dilation: (usize, usize),
    /// Extra output size of a transposed convolution `(height, width)` (0 for a forward one).
    pub output_padding: (usize, usize),
}

impl Conv2dSpec {
    fn geometry(&self, channels: usize) -> ConvGeometry {
        ConvGeometry {
            batch: self.batch,
            channels,
            kernel: self.kernel,
            padding: self.padding,
            stride: self.stride,
            dilation: self.dilation,
        }
    }

    /// Input dims `(b, c_in, h, w)`.
    fn input_dims(&self) -> [usize; 4] {
        [self.batch, self.c_in, self.input.0, self.input.1]
    }
}

/// The fields of a candle `ParamsConv*` value, read from its `Debug` form
/// (`ParamsConv2D { b_size: 2, i_h: 5, .., cudnn_fwd_algo: None }`).
pub(crate) fn debug_fields(
    op: &str,
    debug: &str,
) -> std::result::Result<HashMap<String, String>, RocmError> {
    let bad = || {
        RocmError::layout(
            op,
            format!("cannot read candle's convolution parameters from {debug:?} (candle-core version mismatch?)"),
        )
    };
    let open = debug.find('{').ok_or_else(bad)?;
    let close = debug.rfind('}').ok_or_else(bad)?;
    let mut out = HashMap::new();
    for field in debug[open + 1..close].split(',') {
        let field = field.trim();
        if field.is_empty() {
            continue;
        }
        let (name, value) = field.split_once(':').ok_or_else(bad)?;
        out.insert(name.trim().to_string(), value.trim().to_string());
    }
    Ok(out)
}

fn field(
    op: &str,
    fields: &HashMap<String, String>,
    name: &str,
) -> std::result::Result<usize, RocmError> {
    fields
        .get(name)
        .and_then(|v| v.parse::<usize>().ok())
        .ok_or_else(|| {
            RocmError::layout(
                op,
                format!(
                    "candle's convolution parameters have no integer field `{name}` ({fields:?})"
                ),
            )
        })
}

/// A [`Conv2dSpec`] from candle's `ParamsConv1D` / `ParamsConvTranspose1D` (`Debug` form).
pub(crate) fn spec_1d(op: &str, debug: &str) -> std::result::Result<Conv2dSpec, RocmError> {
    let f = debug_fields(op, debug)?;
    let get = |n: &str| field(op, &f, n);
    Ok(Conv2dSpec {
        batch: get("b_size")?,
        c_in: get("c_in")?,
        c_out: get("c_out")?,
        input: (1, get("l_in")?),
        kernel: (1, get("k_size")?),
        padding: (0, get("padding")?),
        stride: (1, get("stride")?),
        dilation: (1, get("dilation")?),
        output_padding: (
            0,
            if f.contains_key("output_padding") {
                get("output_padding")?
            } else {
                0
            },
        ),
    })
}

/// A [`Conv2dSpec`] from candle's `ParamsConv2D` / `ParamsConvTranspose2D` (`Debug` form).
pub(crate) fn spec_2d(op: &str, debug: &str) -> std::result::Result<Conv2dSpec, RocmError> {
    let f = debug_fields(op, debug)?;
    let get = |n: &str| field(op, &f, n);
    let (p, s, d) = (get("padding")?, get("stride")?, get("dilation")?);
    let op_pad = if f.contains_key("output_padding") {
        get("output_padding")?
    } else {
        0
    };
    Ok(Conv2dSpec {
        batch: get("b_size")?,
        c_in: get("c_in")?,
        c_out: get("c_out")?,
        input: (get("i_h")?, get("i_w")?),
        kernel: (get("k_h")?, get("k_w")?),
        padding: (p, p),
        stride: (s, s),
        dilation: (d, d),
        output_padding: (op_pad, op_pad),
    })
}

/// Checks that `layout` has the dims `want` (the spec's view of the operand).
fn check_dims(op: &str, what: &str, layout: &Layout, want: &[usize]) -> Result<()> {
    if layout.dims() != want {
        return Err(RocmError::layout(
            op,
            format!(
                "the {what} has dims {:?} but the parameters describe {want:?}",
                layout.dims()
            ),
        )
        .into());
    }
    Ok(())
}

/// The element type of both convolution paths: every GEMM dtype; the library path exists for
/// those MIOpen computes (f32, f16, bf16) and is a typed error for f64.
pub(crate) trait ConvDType: KernelDType + rocblas_safe::GemmElement {
    /// The convolution through the library (see [`library_conv`]).
    fn library_conv(
        dev: &RocmDevice,
        op: &str,
        transposed: bool,
        x: (&DeviceBuffer<Self>, &Layout),
        w: (&DeviceBuffer<Self>, &Layout),
        spec: &Conv2dSpec,
    ) -> Result<DeviceBuffer<Self>>;
}

macro_rules! library_dtype {
    ($($t:ty),*) => {$(
        impl ConvDType for $t {
            fn library_conv(
                dev: &RocmDevice,
                op: &str,
                transposed: bool,
                x: (&DeviceBuffer<Self>, &Layout),
                w: (&DeviceBuffer<Self>, &Layout),
                spec: &Conv2dSpec,
            ) -> Result<DeviceBuffer<Self>> {
                library_conv(dev, op, transposed, x, w, spec)
            }
        }
    )*};
}
library_dtype!(f32, half::f16, half::bf16);

impl ConvDType for f64 {
    fn library_conv(
        _: &RocmDevice,
        op: &str,
        _: bool,
        _: (&DeviceBuffer<Self>, &Layout),
        _: (&DeviceBuffer<Self>, &Layout),
        _: &Conv2dSpec,
    ) -> Result<DeviceBuffer<Self>> {
        Err(RocmError::unsupported(
            op,
            candle_core::DType::F64,
            "the library convolution path (MIOpen/cuDNN) computes f32, f16 and bf16; use the \
             im2col path (ConvPath::Im2col or ConvPath::Auto) for f64",
        )
        .into())
    }
}

/// The convolution through MIOpen (cuDNN on NVIDIA): a forward convolution, or a transposed
/// one as the backward-data pass of the forward convolution whose weight is `w`
/// (`(c_in, c_out, k_h, k_w)` read as `c_in` output channels of `c_out` inputs each; the
/// output padding is carried by the output's dims). Inputs are made contiguous first.
fn library_conv<T: ConvDType + miopen_safe::ConvElement>(
    dev: &RocmDevice,
    op: &str,
    transposed: bool,
    (x, x_l): (&DeviceBuffer<T>, &Layout),
    (w, w_l): (&DeviceBuffer<T>, &Layout),
    spec: &Conv2dSpec,
) -> Result<DeviceBuffer<T>> {
    let geom = spec.geometry(if transposed { spec.c_out } else { spec.c_in });
    let (h_out, w_out) = if transposed {
        geom.transposed_output(spec.input, spec.output_padding)
    } else {
        geom.forward_output(spec.input)
    }
    .map_err(kernel_err(op))?;
    let out_dims = vec![spec.batch, spec.c_out, h_out, w_out];
    let mut out = dev.alloc::<T>(op, out_dims.iter().product())?;
    if out.is_empty() {
        return Ok(out);
    }
    let mut x_copy = None;
    let xs = contiguous(dev, op, x, x_l, &mut x_copy)?;
    let mut w_copy = None;
    let ws = contiguous(dev, op, w, w_l, &mut w_copy)?;
    if xs.is_empty() || ws.is_empty() {
        // No terms to sum (c_in == 0): zeros.
        out.as_mut_slice().memset_async(0).map_err(hip_err(op))?;
        return Ok(out);
    }
    let params = miopen_safe::ConvParams {
        padding: vec![spec.padding.0, spec.padding.1],
        stride: vec![spec.stride.0, spec.stride.1],
        dilation: vec![spec.dilation.0, spec.dilation.1],
        groups: 1,
    };
    let x_shape = miopen_safe::TensorShape::contiguous(x_l.dims().to_vec());
    let w_shape = miopen_safe::TensorShape::contiguous(w_l.dims().to_vec());
    let y_shape = miopen_safe::TensorShape::contiguous(out_dims);
    let handle = dev.dnn(op)?;
    let result = if transposed {
        handle.conv_backward_data(
            &x_shape,
            &xs,
            &w_shape,
            &ws,
            &params,
            &y_shape,
            &mut out.as_mut_slice(),
        )
    } else {
        handle.conv_forward(
            &x_shape,
            &xs,
            &w_shape,
            &ws,
            &params,
            &y_shape,
            &mut out.as_mut_slice(),
        )
    };
    result.map_err(|e| RocmError::library(op, "MIOpen", e))?;
    Ok(out)
}

/// `buf` viewed through `layout` as a contiguous buffer: the same buffer when the layout is
/// contiguous (with its start offset), else a contiguous copy.
fn contiguous<'a, T: KernelDType>(
    dev: &RocmDevice,
    op: &str,
    buf: &'a DeviceBuffer<T>,
    layout: &Layout,
    copy: &'a mut Option<DeviceBuffer<T>>,
) -> Result<DeviceSlice<'a, T>> {
    if layout.is_contiguous() {
        let n = layout.shape().elem_count();
        let start = layout.start_offset();
        let end = start
            .checked_add(n)
            .filter(|&e| e <= buf.len())
            .ok_or_else(|| {
                RocmError::layout(
                    op,
                    format!("{n} elements at offset {start} do not fit in {}", buf.len()),
                )
            })?;
        return buf.slice(start..end).map_err(hip_err(op));
    }
    let c = copy.insert(copy_view(dev, op, buf, layout)?);
    Ok(c.as_slice())
}

/// Forward convolution through im2col + GEMM: `x (b, c_in, h, w)`, `w (c_out, c_in, k_h, k_w)`.
pub(crate) fn conv2d_im2col<T: ConvDType>(
    dev: &RocmDevice,
    op: &str,
    (x, x_l): (&DeviceBuffer<T>, &Layout),
    (w, w_l): (&DeviceBuffer<T>, &Layout),
    spec: &Conv2dSpec,
) -> Result<DeviceBuffer<T>> {
    let geom = spec.geometry(spec.c_in);
    let (h_out, w_out) = geom.forward_output(spec.input).map_err(kernel_err(op))?;
    let (b, ck, l) = (
        spec.batch,
        spec.c_in * spec.kernel.0 * spec.kernel.1,
        h_out * w_out,
    );
    let mut out = dev.alloc::<T>(op, b * spec.c_out * l)?;
    if out.is_empty() {
        return Ok(out);
    }
    let src = view(op, x, x_l)?;
    let mut col = dev.alloc::<T>(op, b * ck * l)?;
    kconv::im2col(
        dev.stream(),
        &geom,
        spec.input,
        src,
        &mut col.as_mut_slice(),
    )
    .map_err(kernel_err(op))?;
    let mut w_copy = None;
    let w = contiguous(dev, op, w, w_l, &mut w_copy)?;
    // out[b] (c_out, l) = w (c_out, ck) x col[b] (ck, l): w broadcast over the batch.
    let lhs = Layout::new((b, spec.c_out, ck).into(), vec![0, ck, 1], 0);
    let rhs = Layout::contiguous((b, ck, l));
    dev.gemm(
        op,
        (b, spec.c_out, l, ck),
        (&w, &lhs),
        (&col.as_slice(), &rhs),
        &mut out,
    )?;
    Ok(out)
}

/// Transposed convolution through GEMM + col2im: `x (b, c_in, h, w)`,
/// `w (c_in, c_out, k_h, k_w)`.
pub(crate) fn conv_transpose2d_im2col<T: ConvDType>(
    dev: &RocmDevice,
    op: &str,
    (x, x_l): (&DeviceBuffer<T>, &Layout),
    (w, w_l): (&DeviceBuffer<T>, &Layout),
    spec: &Conv2dSpec,
) -> Result<DeviceBuffer<T>> {
    let geom = spec.geometry(spec.c_out);
    let (h_out, w_out) = geom
        .transposed_output(spec.input, spec.output_padding)
        .map_err(kernel_err(op))?;
    let b = spec.batch;
    let cokk = spec.c_out * spec.kernel.0 * spec.kernel.1;
    let hw = spec.input.0 * spec.input.1;
    let mut out = dev.alloc::<T>(op, b * spec.c_out * h_out * w_out)?;
    if out.is_empty() {
        return Ok(out);
    }
    let mut col = dev.alloc::<T>(op, b * cokk * hw)?;
    let mut x_copy = None;
    let xs = contiguous(dev, op, x, x_l, &mut x_copy)?;
    let mut w_copy = None;
    let ws = contiguous(dev, op, w, w_l, &mut w_copy)?;
    if spec.c_in == 0 {
        col.as_mut_slice().memset_async(0).map_err(hip_err(op))?;
    } else {
        // col[b] (cokk, hw) = w^T (cokk, c_in) x x[b] (c_in, hw): w (c_in, cokk) read transposed
        // and broadcast over the batch.
        let lhs = Layout::new((b, cokk, spec.c_in).into(), vec![0, 1, cokk], 0);
        let rhs = Layout::contiguous((b, spec.c_in, hw));
        dev.gemm(
            op,
            (b, cokk, hw, spec.c_in),
            (&ws, &lhs),
            (&xs, &rhs),
            &mut col,
        )?;
    }
    kconv::col2im(
        dev.stream(),
        &geom,
        spec.input,
        (h_out, w_out),
        &col.as_slice(),
        &mut out.as_mut_slice(),
    )
    .map_err(kernel_err(op))?;
    Ok(out)
}

/// Which dtype variants the convolution paths compute, as a storage slice dispatch.
macro_rules! conv_dtypes {
    ($slice:expr, $kernel:expr, $op:expr, |$x:ident, $w:ident| $body:expr) => {
        match ($slice, $kernel) {
            (RocmStorageSlice::F32($x), RocmStorageSlice::F32($w)) => RocmStorageSlice::F32($body?),
            (RocmStorageSlice::F64($x), RocmStorageSlice::F64($w)) => RocmStorageSlice::F64($body?),
            (RocmStorageSlice::F16($x), RocmStorageSlice::F16($w)) => RocmStorageSlice::F16($body?),
            (RocmStorageSlice::BF16($x), RocmStorageSlice::BF16($w)) => {
                RocmStorageSlice::BF16($body?)
            }
            (x, w) if x.dtype() != w.dtype() => {
                return Err(candle_core::Error::DTypeMismatchBinaryOp {
                    lhs: x.dtype(),
                    rhs: w.dtype(),
                    op: $op,
                }
                .bt())
            }
            (x, _) => return Err(RocmError::unsupported(
                $op,
                x.dtype(),
                "convolutions are computed for f32, f64, f16 and bf16 (as candle's CUDA backend)",
            )
            .into()),
        }
    };
}

impl RocmStorage {
    /// A forward convolution of this NCHW input with the `(c_out, c_in, k_h, k_w)` kernel as
    /// described by `spec` (see the module docs for the path taken). Returns the contiguous
    /// `(b, c_out, h_out, w_out)` output.
    pub fn conv2d_with(
        &self,
        layout: &Layout,
        kernel: &RocmStorage,
        kernel_l: &Layout,
        spec: &Conv2dSpec,
    ) -> Result<RocmStorage> {
        self.conv_impl("conv2d", false, layout, kernel, kernel_l, spec)
    }

    /// A transposed convolution of this NCHW input with the `(c_in, c_out, k_h, k_w)` kernel as
    /// described by `spec`. Returns the contiguous `(b, c_out, h_out, w_out)` output.
    pub fn conv_transpose2d_with(
        &self,
        layout: &Layout,
        kernel: &RocmStorage,
        kernel_l: &Layout,
        spec: &Conv2dSpec,
    ) -> Result<RocmStorage> {
        self.conv_impl("conv_transpose2d", true, layout, kernel, kernel_l, spec)
    }

    fn conv_impl(
        &self,
        op: &'static str,
        transposed: bool,
        layout: &Layout,
        kernel: &RocmStorage,
        kernel_l: &Layout,
        spec: &Conv2dSpec,
    ) -> Result<RocmStorage> {
        self.check_device(kernel, op)?;
        // 1-D ops give rank-3 layouts; view them as rank 4 with a height of 1.
        let (x_l, w_l) = (
            as_rank4(op, layout, spec.input.0)?,
            as_rank4(op, kernel_l, spec.kernel.0)?,
        );
        check_dims(op, "input", &x_l, &spec.input_dims())?;
        let w_dims = if transposed {
            [spec.c_in, spec.c_out, spec.kernel.0, spec.kernel.1]
        } else {
            [spec.c_out, spec.c_in, spec.kernel.0, spec.kernel.1]
        };
        check_dims(op, "kernel", &w_l, &w_dims)?;
        let dev = self.device();
        let path = dev.conv_path()?;
        let expressible = library_expresses(spec, transposed);
        let use_library = match path {
            ConvPath::Im2col => false,
            ConvPath::Library if !expressible => {
                return Err(RocmError::unsupported(
                    op,
                    self.dtype(),
                    format!(
                        "the library computes a transposed convolution as the backward-data pass \
                         of a forward one, which cannot express an output padding {:?} that is \
                         not smaller than the stride {:?}; use ConvPath::Auto or Im2col",
                        spec.output_padding, spec.stride
                    ),
                )
                .into())
            }
            ConvPath::Library => true,
            // The library is not even asked for what it cannot express (on AMD each new
            // problem costs MIOpen a search).
            ConvPath::Auto => expressible && dev.conv_library_available(self.dtype()),
        };
        let library = if use_library {
            let run = || -> Result<RocmStorageSlice> {
                Ok(conv_dtypes!(
                    self.as_slice(),
                    kernel.as_slice(),
                    op,
                    |x, w| {
                        ConvDType::library_conv(dev, op, transposed, (x, &x_l), (w, &w_l), spec)
                    }
                ))
            };
            let result = run();
            match (result, path) {
                (Ok(slice), _) => Some(slice),
                (Err(e), ConvPath::Library) => return Err(e),
                // Auto: a library failure (e.g. no algorithm of the find step ran) falls back
                // to our kernels, which compute the same result.
                (Err(_), _) => None,
            }
        } else {
            None
        };
        let slice = if let Some(slice) = library {
            slice
        } else if transposed {
            conv_dtypes!(self.as_slice(), kernel.as_slice(), op, |x, w| {
                conv_transpose2d_im2col(dev, op, (x, &x_l), (w, &w_l), spec)
            })
        } else {
            conv_dtypes!(self.as_slice(), kernel.as_slice(), op, |x, w| {
                conv2d_im2col(dev, op, (x, &x_l), (w, &w_l), spec)
            })
        };
        RocmStorage::from_slice(slice, dev.clone())
    }
}

/// `BackendStorage::conv1d`: candle's parameters read into a [`Conv2dSpec`] of height 1.
pub(crate) fn conv1d(
    x: &RocmStorage,
    l: &Layout,
    kernel: &RocmStorage,
    kernel_l: &Layout,
    params: &ParamsConv1D,
) -> Result<RocmStorage> {
    let op = "conv1d";
    let spec = spec_1d(op, &format!("{params:?}"))?;
    x.conv_impl(op, false, l, kernel, kernel_l, &spec)
}

/// `BackendStorage::conv_transpose1d`: candle's parameters read into a [`Conv2dSpec`] of
/// height 1.
pub(crate) fn conv_transpose1d(
    x: &RocmStorage,
    l: &Layout,
    kernel: &RocmStorage,
    kernel_l: &Layout,
    params: &ParamsConvTranspose1D,
) -> Result<RocmStorage> {
    let op = "conv_transpose1d";
    let spec = spec_1d(op, &format!("{params:?}"))?;
    x.conv_impl(op, true, l, kernel, kernel_l, &spec)
}

/// `BackendStorage::conv2d`: candle's parameters read into a [`Conv2dSpec`].
pub(crate) fn conv2d(
    x: &RocmStorage,
    l: &Layout,
    kernel: &RocmStorage,
    kernel_l: &Layout,
    params: &ParamsConv2D,
) -> Result<RocmStorage> {
    let op = "conv2d";
    let spec = spec_2d(op, &format!("{params:?}"))?;
    x.conv_impl(op, false, l, kernel, kernel_l, &spec)
}

/// `BackendStorage::conv_transpose2d`: candle's parameters read into a [`Conv2dSpec`].
pub(crate) fn conv_transpose2d(
    x: &RocmStorage,
    l: &Layout,
    kernel: &RocmStorage,
    kernel_l: &Layout,
    params: &ParamsConvTranspose2D,
) -> Result<RocmStorage> {
    let op = "conv_transpose2d";
    let spec = spec_2d(op, &format!("{params:?}"))?;
    x.conv_impl(op, true, l, kernel, kernel_l, &spec)
}

/// Whether the library can compute `spec`: a forward convolution always; a transposed one is
/// the backward-data pass of the forward convolution of its output, which maps an output of
/// `(i - 1) * s + d * (k - 1) + op + 1 - 2 * p` back to `i - 1 + op / s + 1` inputs, so only an
/// output padding smaller than the stride (`op < s` on both axes) round-trips.
pub(crate) fn library_expresses(spec: &Conv2dSpec, transposed: bool) -> bool {
    !transposed
        || (spec.output_padding.0 < spec.stride.0.max(1)
            && spec.output_padding.1 < spec.stride.1.max(1))
}

/// A rank-3 `(b, c, l)` layout as the rank-4 `(b, c, 1, l)` one (rank 4 unchanged).
fn as_rank4(op: &str, layout: &Layout, height: usize) -> Result<Layout> {
    match (layout.dims(), layout.stride()) {
        (&[_, _, _, _], _) => Ok(layout.clone()),
        (&[b, c, l], &[sb, sc, sl]) if height == 1 => Ok(Layout::new(
            (b, c, 1, l).into(),
            vec![sb, sc, l.max(1) * sl.max(1), sl],
            layout.start_offset(),
        )),
        (dims, _) => Err(RocmError::layout(
            op,
            format!("expects a rank-3 (1-D) or rank-4 (2-D) operand, got dims {dims:?}"),
        )
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_path_parses() {
        assert_eq!(ConvPath::parse("IM2COL"), Some(ConvPath::Im2col));
        assert_eq!(ConvPath::parse(" library "), Some(ConvPath::Library));
        assert_eq!(ConvPath::parse("miopen"), Some(ConvPath::Library));
        assert_eq!(ConvPath::parse("auto"), Some(ConvPath::Auto));
        assert_eq!(ConvPath::parse("fastest"), None);
    }

    #[test]
    fn candle_params_are_read_from_their_debug_form() {
        // The exact `Debug` output of candle-core 0.11.1's derived impls.
        let s = spec_2d(
            "conv2d",
            "ParamsConv2D { b_size: 2, i_h: 5, i_w: 7, k_h: 3, k_w: 2, c_out: 4, c_in: 3, padding: 1, stride: 2, dilation: 3, cudnn_fwd_algo: None }",
        )
        .unwrap();
        assert_eq!(
            s,
            Conv2dSpec {
                batch: 2,
                c_in: 3,
                c_out: 4,
                input: (5, 7),
                kernel: (3, 2),
                padding: (1, 1),
                stride: (2, 2),
                dilation: (3, 3),
                output_padding: (0, 0)
            }
        );
        let s = spec_1d(
            "conv_transpose1d",
            "ParamsConvTranspose1D { b_size: 1, l_in: 9, c_out: 2, c_in: 5, k_size: 4, padding: 0, output_padding: 1, stride: 3, dilation: 2 }",
        )
        .unwrap();
        assert_eq!(
            (s.input, s.kernel, s.output_padding, s.stride, s.dilation),
            ((1, 9), (1, 4), (0, 1), (1, 3), (1, 2))
        );
        let s = spec_2d(
            "conv2d",
            "ParamsConv2D { b_size: 1, i_h: 5, i_w: 5, k_h: 3, k_w: 3, c_out: 1, c_in: 1, padding: 0, stride: 1, dilation: 1, cudnn_fwd_algo: Some(ImplicitGemm) }",
        )
        .unwrap();
        assert_eq!(s.kernel, (3, 3));
        assert!(spec_2d("conv2d", "ParamsConv2D { b_size: 1 }").is_err());
        assert!(spec_2d("conv2d", "garbage").is_err());
    }

    #[test]
    fn the_library_is_asked_only_for_output_paddings_below_the_stride() {
        let mut s = Conv2dSpec {
            batch: 2,
            c_in: 3,
            c_out: 2,
            input: (1, 1),
            kernel: (3, 2),
            padding: (0, 0),
            stride: (2, 2),
            dilation: (3, 3),
            output_padding: (1, 1),
        };
        assert!(library_expresses(&s, true));
        s.output_padding = (2, 2);
        assert!(!library_expresses(&s, true));
        assert!(library_expresses(&s, false));
        s.output_padding = (0, 1);
        s.stride = (1, 2);
        assert!(library_expresses(&s, true));
        s.stride = (2, 1);
        assert!(!library_expresses(&s, true));
    }

    #[test]
    fn rank3_layouts_become_rank4() {
        let l = Layout::contiguous((2, 3, 5));
        let l4 = as_rank4("conv1d", &l, 1).unwrap();
        assert_eq!(l4.dims(), &[2, 3, 1, 5]);
        assert_eq!(l4.stride()[0..2], [15, 5]);
        assert_eq!(l4.stride()[3], 1);
        assert!(as_rank4("conv1d", &Layout::contiguous((2, 3)), 1).is_err());
    }
}
