//! Shapes, parameters, output-size formulas and the validation every call goes through before
//! a library is touched.
//!
//! A call is turned into a [`ConvProblem`] / [`PoolProblem`]: dims and strides as the `int`s
//! the libraries take, at least 2 spatial dims (a 1-d problem gets a unit height, which both
//! MIOpen and cuDNN need), strides of unit dims normalised, and the slice lengths each operand
//! needs. The same problem is the key of the algorithm cache.

use crate::error::{Error, Result};
use crate::types::{DataType, PoolMode};

/// Convolution parameters for N spatial dims (N = 1, 2 or 3).
///
/// The convolution is a cross-correlation (no kernel flip), as in PyTorch and Candle. 1-d
/// convolutions are run as 2-d ones with a unit height (MIOpen and cuDNN need at least 2 spatial
/// dims).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConvParams {
    /// Zero padding on both sides of each spatial dim.
    pub padding: Vec<usize>,
    /// Step of the window in each spatial dim (>= 1).
    pub stride: Vec<usize>,
    /// Spacing between kernel taps in each spatial dim (>= 1).
    pub dilation: Vec<usize>,
    /// Number of channel groups (>= 1): input and output channels are split into `groups`
    /// blocks; block `g` of the output sees only block `g` of the input.
    pub groups: usize,
}

impl ConvParams {
    /// No padding, unit stride and dilation, one group, for `spatial_dims` spatial dims.
    pub fn new(spatial_dims: usize) -> ConvParams {
        ConvParams {
            padding: vec![0; spatial_dims],
            stride: vec![1; spatial_dims],
            dilation: vec![1; spatial_dims],
            groups: 1,
        }
    }

    /// The number of spatial dims these parameters describe.
    pub fn spatial_dims(&self) -> usize {
        self.padding.len()
    }
}

/// A dense N-d tensor shape, `(N, C, spatial..)`, with optional element strides
/// (`None` = contiguous, row-major).
///
/// Strides may describe a row-major layout with gaps: unit stride in the last dim, and each
/// other dim stepping over at least the extent of the next one (padded rows or planes, a slice
/// of a larger tensor along any dim but the last). Other layouts (NHWC memory with NCHW dims,
/// zero or overlapping strides) are refused: MIOpen 3.4 runs a convolution only when every
/// tensor has the same (default or NHWC) layout, and cuDNN's pooling needs a unit last stride;
/// the rule is the same on both platforms. Weights must be contiguous (cuDNN's filter
/// descriptors have no strides).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorShape {
    /// Extent of each dim.
    pub dims: Vec<usize>,
    /// Element stride of each dim, or `None` for the contiguous layout.
    pub strides: Option<Vec<usize>>,
}

impl TensorShape {
    /// A contiguous tensor of `dims`.
    pub fn contiguous(dims: impl Into<Vec<usize>>) -> TensorShape {
        TensorShape {
            dims: dims.into(),
            strides: None,
        }
    }

    /// A tensor of `dims` laid out with `strides` (in elements).
    pub fn strided(dims: impl Into<Vec<usize>>, strides: impl Into<Vec<usize>>) -> TensorShape {
        TensorShape {
            dims: dims.into(),
            strides: Some(strides.into()),
        }
    }

    /// The strides, the contiguous ones when none were given.
    pub fn strides_or_contiguous(&self) -> Vec<usize> {
        self.strides
            .clone()
            .unwrap_or_else(|| contiguous_strides(&self.dims))
    }

    /// The number of elements (0 if any dim is 0; saturating).
    pub fn elem_count(&self) -> usize {
        self.dims
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .unwrap_or(usize::MAX)
    }
}

/// Row-major strides of `dims` (a unit or empty dim gets the stride the next dim spans).
pub fn contiguous_strides(dims: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(dims[i + 1].max(1));
    }
    strides
}

/// The output shape `(N, C_out, out..)` of a convolution of `input` `(N, C_in, spatial..)` with
/// `weight` `(C_out, C_in / groups, k..)`, computed in Rust:
/// `out = (in + 2 * padding - dilation * (k - 1) - 1) / stride + 1` (floor).
///
/// Errors name the first inconsistency: rank (3 to 5 dims), parameter lengths, zero stride or
/// dilation, channel/group divisibility, a kernel larger than the padded input.
pub fn conv_forward_output_dims(
    input: &[usize],
    weight: &[usize],
    params: &ConvParams,
) -> Result<Vec<usize>> {
    conv_output_dims("conv_forward_output_dims", "input", input, weight, params)
}

/// The output shape `(N, C, out..)` of pooling `input` `(N, C, spatial..)` with `window`,
/// `padding` and `stride`: `out = (in + 2 * padding - window) / stride + 1` (floor, as Candle,
/// PyTorch without `ceil_mode`, MIOpen and cuDNN compute it).
///
/// Each padding must be smaller than its window, so that every window holds an input element.
pub fn pool_forward_output_dims(
    input: &[usize],
    window: &[usize],
    padding: &[usize],
    stride: &[usize],
) -> Result<Vec<usize>> {
    pool_output_dims("pool_forward_output_dims", input, window, padding, stride)
}

fn check_rank(op: &'static str, what: &str, dims: &[usize]) -> Result<usize> {
    if !(3..=5).contains(&dims.len()) {
        return Err(Error::invalid(
            op,
            format!(
                "{what} must be (N, C, spatial..) with 1 to 3 spatial dims, got {} dims {dims:?}",
                dims.len()
            ),
        ));
    }
    Ok(dims.len() - 2)
}

fn check_param_len(op: &'static str, what: &str, values: &[usize], spatial: usize) -> Result<()> {
    if values.len() != spatial {
        return Err(Error::invalid(
            op,
            format!(
                "{what} has {} entries {values:?} but the tensors have {spatial} spatial dims",
                values.len()
            ),
        ));
    }
    Ok(())
}

fn overflow(op: &'static str, what: &str) -> Error {
    Error::invalid(op, format!("{what} overflows"))
}

pub(crate) fn conv_output_dims(
    op: &'static str,
    input_name: &str,
    input: &[usize],
    weight: &[usize],
    params: &ConvParams,
) -> Result<Vec<usize>> {
    let spatial = check_rank(op, input_name, input)?;
    if weight.len() != input.len() {
        return Err(Error::invalid(
            op,
            format!(
                "the weight {weight:?} has {} dims but the {input_name} {input:?} has {}",
                weight.len(),
                input.len()
            ),
        ));
    }
    check_param_len(op, "padding", &params.padding, spatial)?;
    check_param_len(op, "stride", &params.stride, spatial)?;
    check_param_len(op, "dilation", &params.dilation, spatial)?;
    if let Some(i) = params.stride.iter().position(|&s| s == 0) {
        return Err(Error::invalid(op, format!("stride {i} is 0")));
    }
    if let Some(i) = params.dilation.iter().position(|&d| d == 0) {
        return Err(Error::invalid(op, format!("dilation {i} is 0")));
    }
    let groups = params.groups;
    if groups == 0 {
        return Err(Error::invalid(op, "groups is 0"));
    }
    let (n, c_in) = (input[0], input[1]);
    let (c_out, c_per_group) = (weight[0], weight[1]);
    if c_in % groups != 0 {
        return Err(Error::invalid(
            op,
            format!("the {input_name} has {c_in} channels, not divisible by groups = {groups}"),
        ));
    }
    if c_per_group != c_in / groups {
        return Err(Error::invalid(
            op,
            format!(
                "the weight {weight:?} has {c_per_group} input channels per group, but the \
                 {input_name} has {c_in} channels in {groups} group(s), i.e. {} per group",
                c_in / groups
            ),
        ));
    }
    if c_out % groups != 0 {
        return Err(Error::invalid(
            op,
            format!("the weight has {c_out} output channels, not divisible by groups = {groups}"),
        ));
    }
    let mut out = vec![n, c_out];
    for i in 0..spatial {
        let k = weight[2 + i];
        if k == 0 {
            return Err(Error::invalid(
                op,
                format!("the kernel has size 0 in spatial dim {i}"),
            ));
        }
        let effective = params.dilation[i]
            .checked_mul(k - 1)
            .and_then(|v| v.checked_add(1))
            .ok_or_else(|| overflow(op, "the dilated kernel size"))?;
        let padded = params.padding[i]
            .checked_mul(2)
            .and_then(|p| p.checked_add(input[2 + i]))
            .ok_or_else(|| overflow(op, "the padded input size"))?;
        if effective > padded {
            return Err(Error::invalid(
                op,
                format!(
                    "in spatial dim {i} the dilated kernel spans {effective} elements (size {k}, \
                     dilation {}) but the padded {input_name} only {padded} ({} + 2 * {})",
                    params.dilation[i],
                    input[2 + i],
                    params.padding[i]
                ),
            ));
        }
        out.push((padded - effective) / params.stride[i] + 1);
    }
    Ok(out)
}

pub(crate) fn pool_output_dims(
    op: &'static str,
    input: &[usize],
    window: &[usize],
    padding: &[usize],
    stride: &[usize],
) -> Result<Vec<usize>> {
    let spatial = check_rank(op, "input", input)?;
    check_param_len(op, "window", window, spatial)?;
    check_param_len(op, "padding", padding, spatial)?;
    check_param_len(op, "stride", stride, spatial)?;
    let mut out = vec![input[0], input[1]];
    for i in 0..spatial {
        if window[i] == 0 {
            return Err(Error::invalid(op, format!("window {i} is 0")));
        }
        if stride[i] == 0 {
            return Err(Error::invalid(op, format!("stride {i} is 0")));
        }
        if padding[i] >= window[i] {
            return Err(Error::invalid(
                op,
                format!(
                    "padding {i} ({}) must be smaller than the window ({}), or a window could \
                     hold padding only",
                    padding[i], window[i]
                ),
            ));
        }
        let padded = padding[i]
            .checked_mul(2)
            .and_then(|p| p.checked_add(input[2 + i]))
            .ok_or_else(|| overflow(op, "the padded input size"))?;
        if window[i] > padded {
            return Err(Error::invalid(
                op,
                format!(
                    "in spatial dim {i} the window ({}) is larger than the padded input ({padded})",
                    window[i]
                ),
            ));
        }
        out.push((padded - window[i]) / stride[i] + 1);
    }
    Ok(out)
}

/// A tensor as the libraries take it: `int` dims and strides.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Desc {
    pub dims: Vec<i32>,
    pub strides: Vec<i32>,
}

/// A checked layout: element count, the slice length it needs, and whether it is contiguous.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub desc: Desc,
    /// Number of elements.
    pub elems: usize,
    /// Elements a slice must hold: the furthest reachable offset + 1 (0 when empty).
    pub span: usize,
    /// Row-major contiguous (after normalising the strides of unit dims).
    pub contiguous: bool,
}

fn to_i32(op: &'static str, what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        Error::invalid(
            op,
            format!("{what} = {v} does not fit the libraries' 32-bit int"),
        )
    })
}

/// Checks one operand's layout. `name` is how errors call it (`x`, `dy`, ...).
pub(crate) fn layout(op: &'static str, name: &str, shape: &TensorShape) -> Result<Layout> {
    let dims = &shape.dims;
    let mut strides = shape.strides_or_contiguous();
    if strides.len() != dims.len() {
        return Err(Error::invalid(
            op,
            format!(
                "{name} has {} dims {dims:?} but {} strides {strides:?}",
                dims.len(),
                strides.len()
            ),
        ));
    }
    // A unit dim's stride never moves; give it the value a contiguous layout would have, so that
    // the libraries see contiguous tensors as packed whatever stride the caller carried along.
    for i in (0..dims.len()).rev() {
        if dims[i] == 1 {
            strides[i] = if i + 1 < dims.len() {
                strides[i + 1].saturating_mul(dims[i + 1].max(1))
            } else {
                1
            };
        }
    }
    let elems = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| overflow(op, &format!("the element count of {name} {dims:?}")))?;
    let mut span = 0usize;
    if elems > 0 {
        let mut last = 0usize;
        for (&d, &s) in dims.iter().zip(&strides) {
            if d > 1 && s == 0 {
                return Err(Error::invalid(
                    op,
                    format!(
                        "{name} has stride 0 on a dim of size {d} (strides {strides:?}): \
                         broadcast operands must be made contiguous first"
                    ),
                ));
            }
            last = (d - 1)
                .checked_mul(s)
                .and_then(|v| v.checked_add(last))
                .ok_or_else(|| overflow(op, &format!("the extent of {name}")))?;
        }
        span = last + 1;
        // No two elements may share an address: sorted by stride, each dim must step over
        // everything the smaller-strided dims span.
        let mut order: Vec<(usize, usize)> = dims
            .iter()
            .zip(&strides)
            .filter(|(&d, _)| d > 1)
            .map(|(&d, &s)| (s, d))
            .collect();
        order.sort_unstable();
        for pair in order.windows(2) {
            let (s0, d0) = pair[0];
            let (s1, _) = pair[1];
            if s0.checked_mul(d0).is_none_or(|extent| s1 < extent) {
                return Err(Error::invalid(
                    op,
                    format!(
                        "{name} {dims:?} with strides {strides:?} has overlapping elements; \
                         make it contiguous first"
                    ),
                ));
            }
        }
    }
    let contiguous = strides == contiguous_strides(dims);
    let desc = Desc {
        dims: dims
            .iter()
            .map(|&d| to_i32(op, &format!("a dim of {name}"), d))
            .collect::<Result<_>>()?,
        strides: strides
            .iter()
            .map(|&s| to_i32(op, &format!("a stride of {name}"), s))
            .collect::<Result<_>>()?,
    };
    Ok(Layout {
        desc,
        elems,
        span,
        contiguous,
    })
}

/// Inserts a unit height in front of the one spatial dim of a 3-d descriptor.
fn unit_height(desc: &mut Desc) {
    let (l, sl) = (desc.dims[2], desc.strides[2]);
    desc.dims.insert(2, 1);
    desc.strides.insert(2, sl.saturating_mul(l.max(1)));
}

/// Refuses a layout that is not row-major with gaps (see [`TensorShape`]).
fn check_row_major(op: &'static str, name: &str, l: &Layout) -> Result<()> {
    if l.elems == 0 {
        return Ok(());
    }
    let (dims, strides) = (&l.desc.dims, &l.desc.strides);
    let n = dims.len();
    let ok = strides[n - 1] == 1
        && (0..n - 1)
            .all(|i| i64::from(strides[i]) >= i64::from(strides[i + 1]) * i64::from(dims[i + 1]));
    if !ok {
        return Err(Error::invalid(
            op,
            format!(
                "{name} {dims:?} with strides {strides:?} is not row-major (unit stride in the \
                 last dim, each other dim stepping over the next one's extent): MIOpen and cuDNN \
                 do not both run other layouts; make it contiguous first"
            ),
        ));
    }
    Ok(())
}

/// A convolution as the libraries see it. `x` is the convolution's input side (x, or dx for
/// backward-data), `y` its output side (y, or dy).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ConvProblem {
    pub dtype: DataType,
    pub x: Desc,
    pub w: Desc,
    pub y: Desc,
    pub padding: Vec<i32>,
    pub stride: Vec<i32>,
    pub dilation: Vec<i32>,
    pub groups: i32,
}

impl ConvProblem {
    /// Spatial dims as the library sees them (2 or 3).
    pub fn spatial(&self) -> usize {
        self.padding.len()
    }
}

/// A validated convolution call.
#[derive(Clone, Debug)]
pub(crate) struct ConvPlan {
    pub problem: ConvProblem,
    pub x: Layout,
    pub w: Layout,
    pub y: Layout,
}

/// Validates a convolution: `x` is the input side, `y` the output side (named `x_name` and
/// `y_name` in errors); `y`'s dims must be what a forward convolution of `x` gives.
pub(crate) fn conv_plan(
    op: &'static str,
    dtype: DataType,
    (x_name, x): (&str, &TensorShape),
    w: &TensorShape,
    params: &ConvParams,
    (y_name, y): (&str, &TensorShape),
) -> Result<ConvPlan> {
    if !dtype.supports_convolution() {
        return Err(Error::Unsupported {
            op,
            dtype,
            reason: "MIOpen has no double-precision convolution solver, and the nvidia adapter \
                     refuses it too so that both platforms agree; convert to f32 (or use an \
                     im2col + GEMM path)"
                .into(),
        });
    }
    let expected = conv_output_dims(op, x_name, &x.dims, &w.dims, params)?;
    if y.dims != expected {
        return Err(Error::invalid(
            op,
            format!(
                "{y_name} has shape {:?} but the convolution of {x_name} {:?} with weight {:?} \
                 and {params:?} gives {expected:?}",
                y.dims, x.dims, w.dims
            ),
        ));
    }
    let xl = layout(op, x_name, x)?;
    let wl = layout(op, "the weight", w)?;
    let yl = layout(op, y_name, y)?;
    check_row_major(op, x_name, &xl)?;
    check_row_major(op, y_name, &yl)?;
    if !wl.contiguous && wl.elems > 0 {
        return Err(Error::invalid(
            op,
            format!(
                "the weight {:?} must be contiguous (strides {:?} given): cuDNN's filter \
                 descriptors have no strides, and both platforms apply the same rule",
                w.dims,
                w.strides_or_contiguous()
            ),
        ));
    }
    let conv_i32 = |what: &str, v: &[usize]| -> Result<Vec<i32>> {
        v.iter().map(|&e| to_i32(op, what, e)).collect()
    };
    let mut problem = ConvProblem {
        dtype,
        x: xl.desc.clone(),
        w: wl.desc.clone(),
        y: yl.desc.clone(),
        padding: conv_i32("padding", &params.padding)?,
        stride: conv_i32("stride", &params.stride)?,
        dilation: conv_i32("dilation", &params.dilation)?,
        groups: to_i32(op, "groups", params.groups)?,
    };
    if problem.spatial() == 1 {
        unit_height(&mut problem.x);
        unit_height(&mut problem.w);
        unit_height(&mut problem.y);
        problem.padding.insert(0, 0);
        problem.stride.insert(0, 1);
        problem.dilation.insert(0, 1);
    }
    Ok(ConvPlan {
        problem,
        x: xl,
        w: wl,
        y: yl,
    })
}

/// A pooling as the libraries see it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PoolProblem {
    pub dtype: DataType,
    pub mode: PoolMode,
    pub x: Desc,
    pub y: Desc,
    pub window: Vec<i32>,
    pub padding: Vec<i32>,
    pub stride: Vec<i32>,
}

/// A validated pooling call.
#[derive(Clone, Debug)]
pub(crate) struct PoolPlan {
    pub problem: PoolProblem,
    pub x: Layout,
    pub y: Layout,
}

/// Validates a pooling call; `y`'s dims must be [`pool_forward_output_dims`] of `x`'s.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pool_plan(
    op: &'static str,
    dtype: DataType,
    mode: PoolMode,
    window: &[usize],
    padding: &[usize],
    stride: &[usize],
    x: &TensorShape,
    y: &TensorShape,
) -> Result<PoolPlan> {
    if !dtype.supports_pooling() {
        return Err(Error::Unsupported {
            op,
            dtype,
            reason: "MIOpen 3.4's pooling solvers take f32 and f16 only, and the nvidia adapter \
                     refuses the others too so that both platforms agree"
                .into(),
        });
    }
    let expected = pool_output_dims(op, &x.dims, window, padding, stride)?;
    if y.dims != expected {
        return Err(Error::invalid(
            op,
            format!(
                "y has shape {:?} but pooling x {:?} with window {window:?}, padding \
                 {padding:?}, stride {stride:?} gives {expected:?}",
                y.dims, x.dims
            ),
        ));
    }
    let xl = layout(op, "x", x)?;
    let yl = layout(op, "y", y)?;
    check_row_major(op, "x", &xl)?;
    check_row_major(op, "y", &yl)?;
    let conv_i32 = |what: &str, v: &[usize]| -> Result<Vec<i32>> {
        v.iter().map(|&e| to_i32(op, what, e)).collect()
    };
    let mut problem = PoolProblem {
        dtype,
        mode,
        x: xl.desc.clone(),
        y: yl.desc.clone(),
        window: conv_i32("window", window)?,
        padding: conv_i32("padding", padding)?,
        stride: conv_i32("stride", stride)?,
    };
    if problem.window.len() == 1 {
        unit_height(&mut problem.x);
        unit_height(&mut problem.y);
        problem.window.insert(0, 1);
        problem.padding.insert(0, 0);
        problem.stride.insert(0, 1);
    }
    Ok(PoolPlan {
        problem,
        x: xl,
        y: yl,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(padding: &[usize], stride: &[usize], dilation: &[usize], groups: usize) -> ConvParams {
        ConvParams {
            padding: padding.to_vec(),
            stride: stride.to_vec(),
            dilation: dilation.to_vec(),
            groups,
        }
    }

    /// The formula written out independently: the last valid window start, counted.
    fn brute_out(input: usize, k: usize, pad: usize, stride: usize, dil: usize) -> usize {
        let span = dil * (k - 1) + 1;
        (0..)
            .take_while(|o| o * stride + span <= input + 2 * pad)
            .count()
    }

    #[test]
    fn conv_output_dims_match_brute_force_over_a_grid() {
        for input in 1..12 {
            for k in 1..5 {
                for pad in 0..3 {
                    for stride in 1..4 {
                        for dil in 1..4 {
                            let params = p(&[pad], &[stride], &[dil], 1);
                            let got = conv_forward_output_dims(&[2, 3, input], &[5, 3, k], &params);
                            if dil * (k - 1) + 1 > input + 2 * pad {
                                assert!(got.is_err(), "{input} {k} {pad} {stride} {dil}");
                            } else {
                                let out = brute_out(input, k, pad, stride, dil);
                                assert_eq!(got.unwrap(), vec![2, 5, out]);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn conv_output_dims_examples() {
        // ResNet-50 stem: 224x224, 7x7, stride 2, padding 3 -> 112x112.
        let d = conv_forward_output_dims(
            &[8, 3, 224, 224],
            &[64, 3, 7, 7],
            &p(&[3, 3], &[2, 2], &[1, 1], 1),
        )
        .unwrap();
        assert_eq!(d, vec![8, 64, 112, 112]);
        // Dilation 2, 3x3, padding 2 keeps the size.
        let d = conv_forward_output_dims(
            &[1, 4, 9, 11],
            &[6, 2, 3, 3],
            &p(&[2, 2], &[1, 1], &[2, 2], 2),
        )
        .unwrap();
        assert_eq!(d, vec![1, 6, 9, 11]);
        // 3-d, mixed parameters.
        let d = conv_forward_output_dims(
            &[1, 2, 5, 6, 7],
            &[3, 2, 3, 2, 3],
            &p(&[1, 0, 1], &[1, 2, 1], &[1, 1, 2], 1),
        )
        .unwrap();
        assert_eq!(d, vec![1, 3, 5, 3, 5]);
    }

    #[test]
    fn conv_validation_errors_name_the_problem() {
        let err = |input: &[usize], weight: &[usize], params: ConvParams| {
            conv_forward_output_dims(input, weight, &params)
                .unwrap_err()
                .to_string()
        };
        let e = err(&[1, 4, 8], &[2, 4, 3, 3], p(&[0], &[1], &[1], 1));
        assert!(e.contains("has 4 dims") && e.contains("has 3"), "{e}");
        let e = err(&[1, 4], &[2, 4], p(&[], &[], &[], 1));
        assert!(e.contains("1 to 3 spatial dims"), "{e}");
        let e = err(&[1, 4, 8, 8], &[2, 4, 3, 3], p(&[0], &[1, 1], &[1, 1], 1));
        assert!(e.contains("padding has 1 entries"), "{e}");
        let e = err(
            &[1, 4, 8, 8],
            &[2, 4, 3, 3],
            p(&[0, 0], &[1, 0], &[1, 1], 1),
        );
        assert!(e.contains("stride 1 is 0"), "{e}");
        let e = err(
            &[1, 4, 8, 8],
            &[2, 4, 3, 3],
            p(&[0, 0], &[1, 1], &[0, 1], 1),
        );
        assert!(e.contains("dilation 0 is 0"), "{e}");
        let e = err(
            &[1, 4, 8, 8],
            &[2, 4, 3, 3],
            p(&[0, 0], &[1, 1], &[1, 1], 0),
        );
        assert!(e.contains("groups is 0"), "{e}");
        let e = err(
            &[1, 6, 8, 8],
            &[2, 1, 3, 3],
            p(&[0, 0], &[1, 1], &[1, 1], 4),
        );
        assert!(e.contains("not divisible by groups = 4"), "{e}");
        let e = err(
            &[1, 6, 8, 8],
            &[2, 6, 3, 3],
            p(&[0, 0], &[1, 1], &[1, 1], 2),
        );
        assert!(e.contains("3 per group"), "{e}");
        let e = err(
            &[1, 6, 8, 8],
            &[3, 3, 3, 3],
            p(&[0, 0], &[1, 1], &[1, 1], 2),
        );
        assert!(e.contains("3 output channels"), "{e}");
        let e = err(
            &[1, 4, 8, 8],
            &[2, 4, 3, 0],
            p(&[0, 0], &[1, 1], &[1, 1], 1),
        );
        assert!(e.contains("size 0 in spatial dim 1"), "{e}");
        let e = err(
            &[1, 4, 4, 8],
            &[2, 4, 3, 3],
            p(&[0, 0], &[1, 1], &[2, 1], 1),
        );
        assert!(
            e.contains("spans 5 elements") && e.contains("only 4"),
            "{e}"
        );
    }

    #[test]
    fn pool_output_dims_and_errors() {
        assert_eq!(
            pool_forward_output_dims(&[2, 3, 9, 11], &[3, 2], &[1, 0], &[2, 2]).unwrap(),
            vec![2, 3, 5, 5]
        );
        // Candle's max_pool2d((2, 2)): stride = window, no padding, floor.
        assert_eq!(
            pool_forward_output_dims(&[1, 1, 7, 6], &[2, 2], &[0, 0], &[2, 2]).unwrap(),
            vec![1, 1, 3, 3]
        );
        for input in 1..10 {
            for k in 1..4 {
                for pad in 0..k {
                    for stride in 1..4 {
                        let got = pool_forward_output_dims(&[1, 1, input], &[k], &[pad], &[stride]);
                        if k > input + 2 * pad {
                            assert!(got.is_err());
                        } else {
                            let out = brute_out(input, k, pad, stride, 1);
                            assert_eq!(got.unwrap(), vec![1, 1, out]);
                        }
                    }
                }
            }
        }
        let e = pool_forward_output_dims(&[1, 1, 8, 8], &[2, 2], &[2, 0], &[1, 1])
            .unwrap_err()
            .to_string();
        assert!(e.contains("smaller than the window"), "{e}");
        let e = pool_forward_output_dims(&[1, 1, 8, 8], &[2, 2], &[0, 0], &[1, 0])
            .unwrap_err()
            .to_string();
        assert!(e.contains("stride 1 is 0"), "{e}");
        let e = pool_forward_output_dims(&[1, 1, 8, 8], &[2], &[0], &[1])
            .unwrap_err()
            .to_string();
        assert!(e.contains("window has 1 entries"), "{e}");
    }

    #[test]
    fn layouts_span_contiguity_and_overlap() {
        let l = layout("t", "x", &TensorShape::contiguous([2, 3, 4, 5])).unwrap();
        assert!(l.contiguous);
        assert_eq!((l.elems, l.span), (120, 120));
        assert_eq!(l.desc.strides, vec![60, 20, 5, 1]);
        // NHWC memory with NCHW dims.
        let l = layout(
            "t",
            "x",
            &TensorShape::strided([2, 3, 4, 5], [60, 1, 15, 3]),
        )
        .unwrap();
        assert!(!l.contiguous);
        assert_eq!(l.span, 120);
        // Padded rows: a slice of a wider tensor.
        let l = layout(
            "t",
            "x",
            &TensorShape::strided([1, 2, 3, 4], [48, 24, 8, 1]),
        )
        .unwrap();
        assert_eq!(l.span, 24 + 16 + 3 + 1);
        // Unit dims get contiguous strides whatever was given.
        let l = layout("t", "x", &TensorShape::strided([1, 3, 1, 5], [0, 5, 77, 1])).unwrap();
        assert!(l.contiguous, "{:?}", l.desc);
        // Overlap and zero strides are refused.
        let e = layout("t", "x", &TensorShape::strided([2, 3, 4], [1, 1, 3]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("overlapping"), "{e}");
        let e = layout("t", "x", &TensorShape::strided([2, 3, 4], [12, 0, 1]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("stride 0"), "{e}");
        let e = layout("t", "x", &TensorShape::strided([2, 3], [1]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 dims") && e.contains("1 strides"), "{e}");
        // Empty tensors need no memory.
        let l = layout("t", "x", &TensorShape::contiguous([0, 3, 4])).unwrap();
        assert_eq!((l.elems, l.span), (0, 0));
        // Beyond int.
        let e = layout("t", "x", &TensorShape::contiguous([1, 1, 1 << 31]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("32-bit"), "{e}");
    }

    #[test]
    fn conv_plan_maps_1d_to_2d_and_checks_the_output_shape() {
        let params = p(&[1], &[2], &[3], 2);
        let plan = conv_plan(
            "t",
            DataType::F16,
            ("x", &TensorShape::contiguous([2, 4, 17])),
            &TensorShape::contiguous([6, 2, 3]),
            &params,
            ("y", &TensorShape::contiguous([2, 6, 7])),
        )
        .unwrap();
        let pr = &plan.problem;
        assert_eq!(pr.x.dims, vec![2, 4, 1, 17]);
        assert_eq!(pr.x.strides, vec![68, 17, 17, 1]);
        assert_eq!(pr.w.dims, vec![6, 2, 1, 3]);
        assert_eq!(pr.y.dims, vec![2, 6, 1, 7]);
        assert_eq!(
            (&pr.padding, &pr.stride, &pr.dilation, pr.groups),
            (&vec![0, 1], &vec![1, 2], &vec![1, 3], 2)
        );
        let e = conv_plan(
            "t",
            DataType::F32,
            ("x", &TensorShape::contiguous([2, 4, 17])),
            &TensorShape::contiguous([6, 2, 3]),
            &params,
            ("y", &TensorShape::contiguous([2, 6, 8])),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("y has shape [2, 6, 8]") && e.contains("[2, 6, 7]"),
            "{e}"
        );
    }

    #[test]
    fn conv_plan_refuses_f64_strided_weights() {
        let x = TensorShape::contiguous([1, 2, 5, 5]);
        let w = TensorShape::contiguous([3, 2, 3, 3]);
        let y = TensorShape::contiguous([1, 3, 3, 3]);
        let params = ConvParams::new(2);
        match conv_plan("op", DataType::F64, ("x", &x), &w, &params, ("y", &y)) {
            Err(Error::Unsupported { op, dtype, .. }) => {
                assert_eq!((op, dtype), ("op", DataType::F64))
            }
            other => panic!("{other:?}"),
        }
        let wt = TensorShape::strided([3, 2, 3, 3], [1, 3, 18, 6]);
        let e = conv_plan("op", DataType::F32, ("x", &x), &wt, &params, ("y", &y))
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be contiguous"), "{e}");
    }

    #[test]
    fn only_row_major_layouts_with_gaps_reach_the_libraries() {
        let w = TensorShape::contiguous([4, 3, 3, 3]);
        let params = ConvParams {
            padding: vec![1, 1],
            ..ConvParams::new(2)
        };
        let y = TensorShape::contiguous([2, 4, 9, 11]);
        let plan = |x: TensorShape, y: &TensorShape| {
            conv_plan("op", DataType::F32, ("x", &x), &w, &params, ("y", y))
        };
        // Padded rows, planes and images: accepted.
        let padded = TensorShape::strided([2, 3, 9, 11], [3 * 9 * 16 + 5, 9 * 16, 16, 1]);
        let p = plan(padded, &y).unwrap();
        assert_eq!(p.x.span, (3 * 9 * 16 + 5) + 2 * 9 * 16 + 8 * 16 + 10 + 1);
        // NHWC memory: refused with the reason.
        let nhwc = TensorShape::strided([2, 3, 9, 11], [9 * 11 * 3, 1, 11 * 3, 3]);
        let e = plan(nhwc, &y).unwrap_err().to_string();
        assert!(e.contains("not row-major"), "{e}");
        // A transposed output: refused.
        let yt = TensorShape::strided([2, 4, 9, 11], [396, 99, 1, 9]);
        let e = plan(TensorShape::contiguous([2, 3, 9, 11]), &yt)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("y [2, 4, 9, 11]") && e.contains("not row-major"),
            "{e}"
        );
        // Pooling applies the same rule.
        let e = pool_plan(
            "op",
            DataType::F32,
            PoolMode::Max,
            &[2, 2],
            &[0, 0],
            &[2, 2],
            &TensorShape::strided([1, 2, 4, 4], [32, 1, 8, 2]),
            &TensorShape::contiguous([1, 2, 2, 2]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not row-major"), "{e}");
    }

    #[test]
    fn pool_plan_refuses_bf16_and_maps_1d() {
        let x = TensorShape::contiguous([1, 2, 9]);
        let y = TensorShape::contiguous([1, 2, 4]);
        match pool_plan(
            "op",
            DataType::BF16,
            PoolMode::Max,
            &[2],
            &[0],
            &[2],
            &x,
            &y,
        ) {
            Err(Error::Unsupported { dtype, .. }) => assert_eq!(dtype, DataType::BF16),
            other => panic!("{other:?}"),
        }
        let plan = pool_plan(
            "op",
            DataType::F16,
            PoolMode::Average,
            &[2],
            &[0],
            &[2],
            &x,
            &y,
        )
        .unwrap();
        assert_eq!(plan.problem.x.dims, vec![1, 2, 1, 9]);
        assert_eq!(plan.problem.window, vec![1, 2]);
        assert_eq!(plan.problem.stride, vec![1, 2]);
        let e = pool_plan(
            "op",
            DataType::F32,
            PoolMode::Max,
            &[2],
            &[0],
            &[2],
            &x,
            &TensorShape::contiguous([1, 2, 5]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("gives [1, 2, 4]"), "{e}");
    }
}
