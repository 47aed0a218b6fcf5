//! Tier-3 tests: miopen-safe on a real GPU (MIOpen on AMD, the cuDNN adapter on NVIDIA).
//!
//! Every test is `#[ignore = "needs a GPU"]`: run them with `--include-ignored` on a machine
//! with a GPU (`HIP_PLATFORM=nvidia` on the NVIDIA test machine).
//!
//! Each case draws inputs from a fixed-seed generator (the seed is in every failure message),
//! rounds them to the element type, computes the expected output with an independent f64
//! direct-loop reference written here, poisons the output storage (NaN, including the gaps
//! of strided layouts and a tail past the last element), and compares per element with a
//! tolerance per dtype scaled by `sum |x * w|` of that output (+1): f32 2e-5, f16 2e-3,
//! bf16 1e-2. Max pooling must be exact; average pooling uses f32 1e-6, f16 2e-3 scaled by the
//! mean |x| of the window (+1e-3).

use std::fmt::Debug;

use half::{bf16, f16};
use hip_core::{Device, DeviceBuffer, Stream};
use miopen_safe::{
    conv_forward_output_dims, library_conv_forward_output_dims, library_pool_forward_output_dims,
    pool_forward_output_dims, AlgorithmSearch, ConvElement, ConvParams, DataType, Error, Handle,
    PoolMode, TensorShape,
};

// ---------------------------------------------------------------------------------------------
// Element types, random numbers, layouts
// ---------------------------------------------------------------------------------------------

trait Elem: ConvElement + Debug {
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn nan() -> Self;
    /// Convolution tolerance, relative to `sum |x * w| + 1`.
    const CONV_TOL: f64;
    /// Average-pooling tolerance, relative to the window's mean |x| (+1e-3).
    const POOL_TOL: f64;
}

impl Elem for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn nan() -> Self {
        f32::NAN
    }
    const CONV_TOL: f64 = 2e-5;
    const POOL_TOL: f64 = 1e-6;
}

impl Elem for f16 {
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn nan() -> Self {
        f16::NAN
    }
    const CONV_TOL: f64 = 2e-3;
    const POOL_TOL: f64 = 2e-3;
}

impl Elem for bf16 {
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn nan() -> Self {
        bf16::NAN
    }
    const CONV_TOL: f64 = 1e-2;
    const POOL_TOL: f64 = 1e-2;
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }

    /// `n` values in [-1, 1), rounded to `T` (returned as `T` and as the exact f64 they hold).
    fn values<T: Elem>(&mut self, n: usize) -> (Vec<T>, Vec<f64>) {
        let t: Vec<T> = (0..n).map(|_| T::from_f64(self.uniform())).collect();
        let f = t.iter().map(|v| v.to_f64()).collect();
        (t, f)
    }
}

fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

fn contiguous(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1].max(1);
    }
    s
}

/// Visits every multi-index of `dims` in row-major order.
fn for_each_index(dims: &[usize], mut f: impl FnMut(&[usize])) {
    if dims.contains(&0) {
        return;
    }
    let mut idx = vec![0usize; dims.len()];
    loop {
        f(&idx);
        let mut d = dims.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

fn offset(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

/// Elements a strided tensor reaches.
fn span(dims: &[usize], strides: &[usize]) -> usize {
    if dims.contains(&0) {
        return 0;
    }
    1 + dims
        .iter()
        .zip(strides)
        .map(|(d, s)| (d - 1) * s)
        .sum::<usize>()
}

/// Places a row-major logical tensor into strided storage of `len` elements filled with `fill`.
fn scatter<T: Copy>(
    logical: &[T],
    dims: &[usize],
    strides: &[usize],
    len: usize,
    fill: T,
) -> Vec<T> {
    let mut out = vec![fill; len];
    let mut i = 0;
    for_each_index(dims, |idx| {
        out[offset(idx, strides)] = logical[i];
        i += 1;
    });
    out
}

/// Reads a strided tensor back in row-major order, and the storage positions it covers.
fn gather<T: Copy>(storage: &[T], dims: &[usize], strides: &[usize]) -> (Vec<T>, Vec<bool>) {
    let mut out = Vec::with_capacity(numel(dims));
    let mut covered = vec![false; storage.len()];
    for_each_index(dims, |idx| {
        let o = offset(idx, strides);
        out.push(storage[o]);
        covered[o] = true;
    });
    (out, covered)
}

// ---------------------------------------------------------------------------------------------
// The f64 reference (direct loops, independent of the crate)
// ---------------------------------------------------------------------------------------------

/// Spatial parameters padded to 3 dims (a leading unit dim per missing one).
struct Geometry {
    n: usize,
    c_in: usize,
    c_out: usize,
    groups: usize,
    input: [usize; 3],
    kernel: [usize; 3],
    output: [usize; 3],
    pad: [usize; 3],
    stride: [usize; 3],
    dil: [usize; 3],
}

fn pad3(v: &[usize], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    out[3 - v.len()..].copy_from_slice(v);
    out
}

impl Geometry {
    fn new(x: &[usize], w: &[usize], y: &[usize], p: &ConvParams) -> Geometry {
        Geometry {
            n: x[0],
            c_in: x[1],
            c_out: w[0],
            groups: p.groups,
            input: pad3(&x[2..], 1),
            kernel: pad3(&w[2..], 1),
            output: pad3(&y[2..], 1),
            pad: pad3(&p.padding, 0),
            stride: pad3(&p.stride, 1),
            dil: pad3(&p.dilation, 1),
        }
    }

    /// Calls `f(x_index, w_index, y_index)` (row-major linear indices) for every product term.
    fn for_each_term(&self, mut f: impl FnMut(usize, usize, usize)) {
        let cpg_in = self.c_in / self.groups;
        let cpg_out = self.c_out / self.groups;
        let [id, ih, iw] = self.input;
        let [kd, kh, kw] = self.kernel;
        let [od, oh, ow] = self.output;
        for n in 0..self.n {
            for oc in 0..self.c_out {
                let g = oc / cpg_out;
                for o0 in 0..od {
                    for o1 in 0..oh {
                        for o2 in 0..ow {
                            let yi = (((n * self.c_out + oc) * od + o0) * oh + o1) * ow + o2;
                            for icl in 0..cpg_in {
                                let ic = g * cpg_in + icl;
                                for k0 in 0..kd {
                                    let i0 = (o0 * self.stride[0] + k0 * self.dil[0])
                                        .wrapping_sub(self.pad[0]);
                                    if i0 >= id {
                                        continue;
                                    }
                                    for k1 in 0..kh {
                                        let i1 = (o1 * self.stride[1] + k1 * self.dil[1])
                                            .wrapping_sub(self.pad[1]);
                                        if i1 >= ih {
                                            continue;
                                        }
                                        for k2 in 0..kw {
                                            let i2 = (o2 * self.stride[2] + k2 * self.dil[2])
                                                .wrapping_sub(self.pad[2]);
                                            if i2 >= iw {
                                                continue;
                                            }
                                            let xi = (((n * self.c_in + ic) * id + i0) * ih + i1)
                                                * iw
                                                + i2;
                                            let wi = (((oc * cpg_in + icl) * kd + k0) * kh + k1)
                                                * kw
                                                + k2;
                                            f(xi, wi, yi);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Output dims, computed here independently of the crate.
fn ref_out_dims(x: &[usize], w: &[usize], p: &ConvParams) -> Vec<usize> {
    let mut out = vec![x[0], w[0]];
    for i in 0..x.len() - 2 {
        let span = p.dilation[i] * (w[2 + i] - 1) + 1;
        out.push((x[2 + i] + 2 * p.padding[i] - span) / p.stride[i] + 1);
    }
    out
}

/// `(y, sum |x * w|)` of a forward convolution.
fn ref_conv_forward(
    x: &[f64],
    w: &[f64],
    xd: &[usize],
    wd: &[usize],
    yd: &[usize],
    p: &ConvParams,
) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; numel(yd)];
    let mut scale = vec![0.0; numel(yd)];
    Geometry::new(xd, wd, yd, p).for_each_term(|xi, wi, yi| {
        y[yi] += x[xi] * w[wi];
        scale[yi] += (x[xi] * w[wi]).abs();
    });
    (y, scale)
}

/// `(dx, sum |dy * w|)` of a backward-data convolution.
fn ref_conv_backward_data(
    dy: &[f64],
    w: &[f64],
    dxd: &[usize],
    wd: &[usize],
    dyd: &[usize],
    p: &ConvParams,
) -> (Vec<f64>, Vec<f64>) {
    let mut dx = vec![0.0; numel(dxd)];
    let mut scale = vec![0.0; numel(dxd)];
    Geometry::new(dxd, wd, dyd, p).for_each_term(|xi, wi, yi| {
        dx[xi] += dy[yi] * w[wi];
        scale[xi] += (dy[yi] * w[wi]).abs();
    });
    (dx, scale)
}

/// `(y, mean |x| over the window's input elements)` of a pooling.
fn ref_pool(
    x: &[f64],
    xd: &[usize],
    mode: PoolMode,
    window: &[usize],
    padding: &[usize],
    stride: &[usize],
) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let spatial = xd.len() - 2;
    let mut yd = vec![xd[0], xd[1]];
    for i in 0..spatial {
        yd.push((xd[2 + i] + 2 * padding[i] - window[i]) / stride[i] + 1);
    }
    let xs = contiguous(xd);
    let mut y = Vec::new();
    let mut scale = Vec::new();
    for_each_index(&yd, |oi| {
        let (mut max, mut sum, mut abs, mut count) = (f64::NEG_INFINITY, 0.0, 0.0, 0usize);
        for_each_index(window, |k| {
            let mut xi = vec![oi[0], oi[1]];
            for i in 0..spatial {
                let pos = (oi[2 + i] * stride[i] + k[i]).wrapping_sub(padding[i]);
                if pos >= xd[2 + i] {
                    return;
                }
                xi.push(pos);
            }
            let v = x[offset(&xi, &xs)];
            max = max.max(v);
            sum += v;
            abs += v.abs();
            count += 1;
        });
        assert!(count > 0, "a window holds no input element");
        y.push(match mode {
            PoolMode::Max => max,
            PoolMode::Average => sum / count as f64,
            PoolMode::AverageIncludePadding => sum / numel(window) as f64,
        });
        scale.push(abs / count as f64);
    });
    (yd, y, scale)
}

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

fn setup() -> (Stream, Handle) {
    let device = Device::new(0).unwrap_or_else(|e| panic!("no GPU: {e}"));
    let stream = device
        .create_stream()
        .unwrap_or_else(|e| panic!("creating a stream: {e}"));
    let handle = Handle::new(&stream).unwrap_or_else(|e| panic!("Handle::new: {e}"));
    (stream, handle)
}

/// Extra poisoned elements after every output's last reachable one.
const TAIL: usize = 8;

/// Compares a strided output read back from the device: the described elements against the
/// reference, everything else (gaps, tail) still poisoned.
#[allow(clippy::too_many_arguments)]
fn check_output<T: Elem>(
    what: &str,
    storage: &[T],
    dims: &[usize],
    strides: &[usize],
    want: &[f64],
    scale: &[f64],
    tol: f64,
    floor: f64,
) {
    let (got, covered) = gather(storage, dims, strides);
    let mut worst = (0.0f64, 0usize);
    for (i, ((g, w), s)) in got.iter().zip(want).zip(scale).enumerate() {
        let g = g.to_f64();
        let allowed = tol * (s + floor);
        let err = (g - w).abs();
        assert!(
            g.is_finite() && err <= allowed,
            "{what}: element {i} is {g}, expected {w} (|err| {err:e} > {allowed:e}; scale {s})"
        );
        if allowed > 0.0 && err / allowed > worst.0 {
            worst = (err / allowed, i);
        }
    }
    for (o, (v, c)) in storage.iter().zip(&covered).enumerate() {
        assert!(
            *c || v.to_f64().is_nan(),
            "{what}: storage element {o} outside the output's layout was overwritten with {v:?}"
        );
    }
    println!(
        "{what}: ok, {} elements, worst error {:.3} of the tolerance",
        got.len(),
        worst.0
    );
}

/// One forward convolution case: shapes, parameters, optional strides for x and y.
struct ConvCase {
    name: &'static str,
    x: Vec<usize>,
    w: Vec<usize>,
    padding: Vec<usize>,
    stride: Vec<usize>,
    dilation: Vec<usize>,
    groups: usize,
    x_strides: Option<Vec<usize>>,
    y_strides: Option<Vec<usize>>,
    x_offset: usize,
}

#[allow(clippy::too_many_arguments)]
fn case(
    name: &'static str,
    x: &[usize],
    w: &[usize],
    padding: &[usize],
    stride: &[usize],
    dilation: &[usize],
    groups: usize,
) -> ConvCase {
    ConvCase {
        name,
        x: x.to_vec(),
        w: w.to_vec(),
        padding: padding.to_vec(),
        stride: stride.to_vec(),
        dilation: dilation.to_vec(),
        groups,
        x_strides: None,
        y_strides: None,
        x_offset: 0,
    }
}

impl ConvCase {
    fn params(&self) -> ConvParams {
        ConvParams {
            padding: self.padding.clone(),
            stride: self.stride.clone(),
            dilation: self.dilation.clone(),
            groups: self.groups,
        }
    }
}

fn conv_cases() -> Vec<ConvCase> {
    vec![
        case(
            "1-d pad 1 stride 2",
            &[2, 4, 17],
            &[6, 4, 3],
            &[1],
            &[2],
            &[1],
            1,
        ),
        case(
            "1-d groups 3 dilation 2",
            &[1, 6, 20],
            &[6, 2, 5],
            &[2],
            &[1],
            &[2],
            3,
        ),
        case(
            "2-d 3x3 pad 1",
            &[2, 3, 9, 11],
            &[4, 3, 3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            1,
        ),
        case(
            "2-d 3x2 pad (0,2) stride (2,1)",
            &[1, 4, 10, 7],
            &[5, 4, 3, 2],
            &[0, 2],
            &[2, 1],
            &[1, 1],
            1,
        ),
        case(
            "2-d dilation (2,3)",
            &[2, 2, 12, 13],
            &[3, 2, 3, 3],
            &[2, 1],
            &[1, 1],
            &[2, 3],
            1,
        ),
        case(
            "2-d groups 2 stride 2",
            &[1, 4, 8, 8],
            &[6, 2, 3, 3],
            &[1, 1],
            &[2, 2],
            &[1, 1],
            2,
        ),
        case(
            "2-d depthwise",
            &[2, 8, 7, 7],
            &[8, 1, 3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            8,
        ),
        case(
            "2-d 1x1",
            &[2, 16, 5, 5],
            &[8, 16, 1, 1],
            &[0, 0],
            &[1, 1],
            &[1, 1],
            1,
        ),
        case(
            "2-d 32->64 3x3",
            &[4, 32, 14, 14],
            &[64, 32, 3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            1,
        ),
        case(
            "3-d",
            &[1, 2, 5, 6, 7],
            &[3, 2, 3, 2, 3],
            &[1, 0, 1],
            &[1, 2, 1],
            &[1, 1, 2],
            1,
        ),
    ]
}

fn strided_conv_cases() -> Vec<ConvCase> {
    let mut padded = case(
        "2-d x with padded rows, planes and images",
        &[2, 3, 9, 11],
        &[4, 3, 3, 3],
        &[1, 1],
        &[1, 1],
        &[1, 1],
        1,
    );
    padded.x_strides = Some(vec![3 * 9 * 16 + 5, 9 * 16, 16, 1]);
    let mut pitched = case(
        "2-d y with a row pitch of 16",
        &[2, 3, 9, 11],
        &[4, 3, 3, 3],
        &[1, 1],
        &[1, 1],
        &[1, 1],
        1,
    );
    pitched.y_strides = Some(vec![4 * 9 * 16, 9 * 16, 16, 1]);
    let mut offset = case(
        "2-d x at an offset of 7",
        &[2, 3, 9, 11],
        &[4, 3, 3, 3],
        &[1, 1],
        &[2, 2],
        &[1, 1],
        1,
    );
    offset.x_offset = 7;
    vec![padded, pitched, offset]
}

/// Runs one forward case on `T` and checks it.
fn run_conv_forward<T: Elem>(stream: &Stream, handle: &Handle, c: &ConvCase, seed: u64) {
    let what = format!("conv_forward {} {} (seed {seed})", T::DTYPE, c.name);
    let mut rng = Rng(seed);
    let params = c.params();
    let y_dims = ref_out_dims(&c.x, &c.w, &params);
    let x_strides = c.x_strides.clone().unwrap_or_else(|| contiguous(&c.x));
    let y_strides = c.y_strides.clone().unwrap_or_else(|| contiguous(&y_dims));
    let (xt, xf) = rng.values::<T>(numel(&c.x));
    let (wt, wf) = rng.values::<T>(numel(&c.w));
    let (want, scale) = ref_conv_forward(&xf, &wf, &c.x, &c.w, &y_dims, &params);

    let x_len = span(&c.x, &x_strides);
    let mut x_storage = vec![T::nan(); c.x_offset];
    x_storage.extend(scatter(&xt, &c.x, &x_strides, x_len, T::nan()));
    let xbuf = stream.alloc_from_host(&x_storage).unwrap();
    let wbuf = stream.alloc_from_host(&wt).unwrap();
    let y_len = span(&y_dims, &y_strides) + TAIL;
    let mut ybuf = stream.alloc_from_host(&vec![T::nan(); y_len]).unwrap();

    let xs = TensorShape::strided(c.x.clone(), x_strides.clone());
    let ws = TensorShape::contiguous(c.w.clone());
    let ys = TensorShape::strided(y_dims.clone(), y_strides.clone());
    handle
        .conv_forward(
            &xs,
            &xbuf.slice(c.x_offset..).unwrap(),
            &ws,
            &wbuf.as_slice(),
            &params,
            &ys,
            &mut ybuf.as_mut_slice(),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = ybuf.to_host_vec().unwrap();
    check_output(
        &what,
        &got,
        &y_dims,
        &y_strides,
        &want,
        &scale,
        T::CONV_TOL,
        1.0,
    );
    if let Ok(Some(a)) = handle.conv_forward_algorithm::<T>(&xs, &ws, &params, &ys) {
        println!(
            "{what}: algorithm {} ({}), workspace {} bytes",
            a.name, a.id, a.workspace_bytes
        );
    }
}

/// Runs one backward-data case: `dx_dims` may exceed the forward input by an output padding.
fn run_conv_backward_data<T: Elem>(
    stream: &Stream,
    handle: &Handle,
    name: &str,
    dx_dims: &[usize],
    w_dims: &[usize],
    params: &ConvParams,
    seed: u64,
) {
    let what = format!("conv_backward_data {} {name} (seed {seed})", T::DTYPE);
    let mut rng = Rng(seed);
    let dy_dims = ref_out_dims(dx_dims, w_dims, params);
    let (dyt, dyf) = rng.values::<T>(numel(&dy_dims));
    let (wt, wf) = rng.values::<T>(numel(w_dims));
    let (want, scale) = ref_conv_backward_data(&dyf, &wf, dx_dims, w_dims, &dy_dims, params);
    let dybuf = stream.alloc_from_host(&dyt).unwrap();
    let wbuf = stream.alloc_from_host(&wt).unwrap();
    let mut dxbuf = stream
        .alloc_from_host(&vec![T::nan(); numel(dx_dims) + TAIL])
        .unwrap();
    handle
        .conv_backward_data(
            &TensorShape::contiguous(dy_dims.clone()),
            &dybuf.as_slice(),
            &TensorShape::contiguous(w_dims),
            &wbuf.as_slice(),
            params,
            &TensorShape::contiguous(dx_dims),
            &mut dxbuf.as_mut_slice(),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = dxbuf.to_host_vec().unwrap();
    check_output(
        &what,
        &got,
        dx_dims,
        &contiguous(dx_dims),
        &want,
        &scale,
        T::CONV_TOL,
        1.0,
    );
}

fn params(padding: &[usize], stride: &[usize], dilation: &[usize], groups: usize) -> ConvParams {
    ConvParams {
        padding: padding.to_vec(),
        stride: stride.to_vec(),
        dilation: dilation.to_vec(),
        groups,
    }
}

fn backward_cases() -> Vec<(&'static str, Vec<usize>, Vec<usize>, ConvParams)> {
    vec![
        (
            "2-d 3x3 pad 1",
            vec![2, 3, 9, 11],
            vec![4, 3, 3, 3],
            params(&[1, 1], &[1, 1], &[1, 1], 1),
        ),
        (
            "2-d stride 2 groups 2 output padding 1",
            vec![1, 4, 10, 10],
            vec![6, 2, 3, 3],
            params(&[1, 1], &[2, 2], &[1, 1], 2),
        ),
        (
            "1-d stride 2 dilation 2 output padding 1",
            vec![2, 4, 18],
            vec![6, 4, 3],
            params(&[1], &[2], &[2], 1),
        ),
        (
            "3-d",
            vec![1, 2, 5, 6, 7],
            vec![3, 2, 3, 2, 3],
            params(&[1, 0, 1], &[1, 2, 1], &[1, 1, 2], 1),
        ),
    ]
}

struct PoolCase {
    name: &'static str,
    mode: PoolMode,
    x: Vec<usize>,
    window: Vec<usize>,
    padding: Vec<usize>,
    stride: Vec<usize>,
    x_strides: Option<Vec<usize>>,
}

fn pool_cases() -> Vec<PoolCase> {
    let p =
        |name, mode, x: &[usize], window: &[usize], padding: &[usize], stride: &[usize]| PoolCase {
            name,
            mode,
            x: x.to_vec(),
            window: window.to_vec(),
            padding: padding.to_vec(),
            stride: stride.to_vec(),
            x_strides: None,
        };
    let mut padded = p(
        "2-d max, x with padded rows",
        PoolMode::Max,
        &[2, 3, 8, 9],
        &[2, 2],
        &[0, 0],
        &[2, 2],
    );
    padded.x_strides = Some(vec![3 * 8 * 12, 8 * 12, 12, 1]);
    vec![
        p(
            "2-d max 2x2 (Candle max_pool2d)",
            PoolMode::Max,
            &[2, 3, 8, 9],
            &[2, 2],
            &[0, 0],
            &[2, 2],
        ),
        p(
            "2-d avg 2x2 (Candle avg_pool2d)",
            PoolMode::Average,
            &[2, 3, 8, 9],
            &[2, 2],
            &[0, 0],
            &[2, 2],
        ),
        p(
            "2-d avg 3x3 pad 1 stride 2",
            PoolMode::Average,
            &[1, 4, 9, 10],
            &[3, 3],
            &[1, 1],
            &[2, 2],
        ),
        p(
            "2-d avg incl. padding 3x3 pad 1 stride 2",
            PoolMode::AverageIncludePadding,
            &[1, 4, 9, 10],
            &[3, 3],
            &[1, 1],
            &[2, 2],
        ),
        p(
            "2-d max 3x2 pad (1,1) stride (1,2)",
            PoolMode::Max,
            &[2, 2, 7, 8],
            &[3, 2],
            &[1, 1],
            &[1, 2],
        ),
        p(
            "1-d max 3 pad 1 stride 2",
            PoolMode::Max,
            &[2, 3, 11],
            &[3],
            &[1],
            &[2],
        ),
        p(
            "3-d avg",
            PoolMode::Average,
            &[1, 2, 5, 6, 7],
            &[2, 3, 2],
            &[0, 1, 1],
            &[1, 2, 2],
        ),
        padded,
    ]
}

fn run_pool<T: Elem>(stream: &Stream, handle: &Handle, c: &PoolCase, seed: u64) {
    let what = format!("pooling_forward {} {} (seed {seed})", T::DTYPE, c.name);
    let mut rng = Rng(seed);
    let (xt, xf) = rng.values::<T>(numel(&c.x));
    let (y_dims, want, scale) = ref_pool(&xf, &c.x, c.mode, &c.window, &c.padding, &c.stride);
    let x_strides = c.x_strides.clone().unwrap_or_else(|| contiguous(&c.x));
    let x_storage = scatter(&xt, &c.x, &x_strides, span(&c.x, &x_strides), T::nan());
    let xbuf = stream.alloc_from_host(&x_storage).unwrap();
    let mut ybuf = stream
        .alloc_from_host(&vec![T::nan(); numel(&y_dims) + TAIL])
        .unwrap();
    handle
        .pooling_forward(
            c.mode,
            &c.window,
            &c.padding,
            &c.stride,
            &TensorShape::strided(c.x.clone(), x_strides),
            &xbuf.as_slice(),
            &TensorShape::contiguous(y_dims.clone()),
            &mut ybuf.as_mut_slice(),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = ybuf.to_host_vec().unwrap();
    let (tol, floor) = match c.mode {
        // The max of values already in T: exact.
        PoolMode::Max => (0.0, 0.0),
        _ => (T::POOL_TOL, 1e-3),
    };
    check_output(
        &what,
        &got,
        &y_dims,
        &contiguous(&y_dims),
        &want,
        &scale,
        tol,
        floor,
    );
}

/// Runs every case of a test even when one fails, so that one run reports them all.
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn run(&mut self, what: &str, f: impl FnOnce()) {
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            self.0.push(format!("{what}: {msg}"));
        }
    }

    fn check(self) {
        assert!(
            self.0.is_empty(),
            "{} case(s) failed:\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[test]
#[ignore = "needs a GPU"]
fn library_version_and_function_table() {
    let version = miopen_safe::library_version().unwrap_or_else(|e| panic!("{e}"));
    println!("library: {version}");
    match hip_core::platform().unwrap() {
        hip_core::Platform::Nvidia => {
            assert!(version.starts_with("cuDNN 9."), "{version}");
            let t = miopen_safe::raw::cudnn().unwrap();
            assert!(
                t.missing().is_empty(),
                "libcudnn lacks {:?} of the {} table functions",
                t.missing(),
                miopen_safe::raw::CUDNN_FUNCTIONS.len()
            );
            println!(
                "all {} functions of the cuDNN table resolved",
                miopen_safe::raw::CUDNN_FUNCTIONS.len()
            );
        }
        hip_core::Platform::Amd => {
            assert!(version.starts_with("MIOpen "), "{version}");
            let t = miopen_safe::raw::miopen().unwrap();
            assert!(t.miopenConvolutionForward.is_ok() && t.miopenPoolingForward.is_ok());
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn library_output_dims_match_ours() {
    let mut checked = 0;
    for input in [1usize, 2, 5, 8, 13] {
        for k in 1..=4usize {
            for pad in 0..=2usize {
                for stride in 1..=3usize {
                    for dil in 1..=2usize {
                        for (c, g) in [(4usize, 1usize), (4, 2)] {
                            let x = [2, c, input, input + 3];
                            let w = [6, c / g, k, k.max(2) - 1];
                            let p = params(&[pad, pad.min(1)], &[stride, 1], &[dil, 1], g);
                            let Ok(ours) = conv_forward_output_dims(&x, &w, &p) else {
                                continue;
                            };
                            let lib = library_conv_forward_output_dims(&x, &w, &p)
                                .unwrap_or_else(|e| panic!("{x:?} {w:?} {p:?}: {e}"));
                            assert_eq!(lib, ours, "{x:?} {w:?} {p:?}");
                            let x1 = [2, c, input];
                            let w1 = [6, c / g, k];
                            let p1 = params(&[pad], &[stride], &[dil], g);
                            if let Ok(ours) = conv_forward_output_dims(&x1, &w1, &p1) {
                                assert_eq!(
                                    library_conv_forward_output_dims(&x1, &w1, &p1).unwrap(),
                                    ours
                                );
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    for input in [2usize, 5, 9] {
        for k in 1..=3usize {
            for pad in 0..k {
                for stride in 1..=3usize {
                    let x = [1, 3, input, input + 1];
                    let Ok(ours) =
                        pool_forward_output_dims(&x, &[k, k], &[pad, pad], &[stride, stride])
                    else {
                        continue;
                    };
                    let lib = library_pool_forward_output_dims(
                        &x,
                        &[k, k],
                        &[pad, pad],
                        &[stride, stride],
                    )
                    .unwrap();
                    assert_eq!(lib, ours, "pool {x:?} k {k} pad {pad} stride {stride}");
                    checked += 1;
                }
            }
        }
    }
    println!("{checked} shapes: the library's output dims equal ours");
}

#[test]
#[ignore = "needs a GPU"]
fn conv_forward_f32() {
    let (stream, handle) = setup();
    let mut f = Failures::default();
    for (i, c) in conv_cases().iter().chain(&strided_conv_cases()).enumerate() {
        f.run(c.name, || {
            run_conv_forward::<f32>(&stream, &handle, c, 100 + i as u64)
        });
    }
    f.check();
}

#[test]
#[ignore = "needs a GPU"]
fn conv_forward_f16() {
    let (stream, handle) = setup();
    let mut f = Failures::default();
    for (i, c) in conv_cases().iter().chain(&strided_conv_cases()).enumerate() {
        f.run(c.name, || {
            run_conv_forward::<f16>(&stream, &handle, c, 200 + i as u64)
        });
    }
    f.check();
}

#[test]
#[ignore = "needs a GPU"]
fn conv_forward_bf16() {
    let (stream, handle) = setup();
    let mut f = Failures::default();
    for (i, c) in conv_cases().iter().enumerate() {
        f.run(c.name, || {
            run_conv_forward::<bf16>(&stream, &handle, c, 300 + i as u64)
        });
    }
    f.check();
}

#[test]
#[ignore = "needs a GPU"]
fn conv_backward_data_all_dtypes() {
    let (stream, handle) = setup();
    let mut f = Failures::default();
    for (i, (name, dx, w, p)) in backward_cases().iter().enumerate() {
        let seed = i as u64;
        f.run(name, || {
            run_conv_backward_data::<f32>(&stream, &handle, name, dx, w, p, 400 + seed)
        });
        f.run(name, || {
            run_conv_backward_data::<f16>(&stream, &handle, name, dx, w, p, 500 + seed)
        });
        f.run(name, || {
            run_conv_backward_data::<bf16>(&stream, &handle, name, dx, w, p, 600 + seed)
        });
    }
    f.check();
}

#[test]
#[ignore = "needs a GPU"]
fn pooling_f32_and_f16() {
    let (stream, handle) = setup();
    let mut f = Failures::default();
    for (i, c) in pool_cases().iter().enumerate() {
        f.run(c.name, || {
            run_pool::<f32>(&stream, &handle, c, 700 + i as u64)
        });
        f.run(c.name, || {
            run_pool::<f16>(&stream, &handle, c, 800 + i as u64)
        });
    }
    f.check();
}

#[test]
#[ignore = "needs a GPU"]
fn unsupported_dtypes_are_typed_errors() {
    let (stream, handle) = setup();
    let x = TensorShape::contiguous([1, 2, 6, 6]);
    let y = TensorShape::contiguous([1, 2, 3, 3]);
    let xb = stream.alloc_zeroed::<bf16>(72).unwrap();
    let mut yb = stream.alloc_zeroed::<bf16>(18).unwrap();
    match handle.pooling_forward(
        PoolMode::Max,
        &[2, 2],
        &[0, 0],
        &[2, 2],
        &x,
        &xb.as_slice(),
        &y,
        &mut yb.as_mut_slice(),
    ) {
        Err(Error::Unsupported { op, dtype, .. }) => {
            assert_eq!((op, dtype), ("Handle::pooling_forward", DataType::BF16))
        }
        other => panic!("bf16 pooling: {other:?}"),
    }
    let xd = stream.alloc_zeroed::<f64>(72).unwrap();
    let wd = stream.alloc_zeroed::<f64>(36).unwrap();
    let mut yd = stream.alloc_zeroed::<f64>(2 * 16).unwrap();
    let e = handle
        .conv_forward(
            &x,
            &xd.as_slice(),
            &TensorShape::contiguous([2, 2, 3, 3]),
            &wd.as_slice(),
            &ConvParams::new(2),
            &TensorShape::contiguous([1, 2, 4, 4]),
            &mut yd.as_mut_slice(),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                dtype: DataType::F64,
                ..
            }
        ),
        "{e:?}"
    );
    println!("f64 conv: {e}");
}

#[test]
#[ignore = "needs a GPU"]
fn bad_arguments_fail_before_any_call_and_leave_the_handle_usable() {
    let (stream, handle) = setup();
    let x = TensorShape::contiguous([2, 3, 9, 11]);
    let w = TensorShape::contiguous([4, 3, 3, 3]);
    let y = TensorShape::contiguous([2, 4, 9, 11]);
    let mut p = ConvParams::new(2);
    p.padding = vec![1, 1];
    let xb = stream.alloc_zeroed::<f32>(x.elem_count()).unwrap();
    let wb = stream.alloc_zeroed::<f32>(w.elem_count()).unwrap();
    let mut yb = stream
        .alloc_from_host(&vec![f32::NAN; y.elem_count()])
        .unwrap();
    // A slice one element short.
    let short = xb.slice(1..).unwrap();
    let e = handle
        .conv_forward(
            &x,
            &short,
            &w,
            &wb.as_slice(),
            &p,
            &y,
            &mut yb.as_mut_slice(),
        )
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("reaches 594"),
        "{e}"
    );
    // A wrong output shape.
    let bad_y = TensorShape::contiguous([2, 4, 9, 10]);
    let e = handle
        .conv_forward(
            &x,
            &xb.as_slice(),
            &w,
            &wb.as_slice(),
            &p,
            &bad_y,
            &mut yb.as_mut_slice(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("gives [2, 4, 9, 11]"), "{e}");
    // Strides that overlap.
    let e = handle
        .conv_forward(
            &TensorShape::strided([2, 3, 9, 11], [1, 1, 11, 1]),
            &xb.as_slice(),
            &w,
            &wb.as_slice(),
            &p,
            &y,
            &mut yb.as_mut_slice(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("overlapping"), "{e}");
    assert_eq!(
        handle.cached_algorithms(),
        0,
        "nothing may reach the library"
    );
    assert_eq!(handle.find_calls(), 0, "nothing may reach the library");
    let host = yb.to_host_vec().unwrap();
    assert!(
        host.iter().all(|v| v.is_nan()),
        "a refused call wrote its output"
    );
    // The handle still works.
    handle
        .conv_forward(
            &x,
            &xb.as_slice(),
            &w,
            &wb.as_slice(),
            &p,
            &y,
            &mut yb.as_mut_slice(),
        )
        .unwrap();
    assert!(yb.to_host_vec().unwrap().iter().all(|&v| v == 0.0));
}

#[test]
#[ignore = "needs a GPU"]
fn algorithm_cache_is_per_problem_and_direction() {
    let (stream, handle) = setup();
    let c = &conv_cases()[2];
    assert_eq!(handle.cached_algorithms(), 0);
    run_conv_forward::<f32>(&stream, &handle, c, 900);
    assert_eq!(handle.cached_algorithms(), 1);
    run_conv_forward::<f32>(&stream, &handle, c, 901);
    assert_eq!(
        handle.cached_algorithms(),
        1,
        "the same problem found twice"
    );
    assert_eq!(handle.find_calls(), 1, "the same problem searched twice");
    run_conv_forward::<f16>(&stream, &handle, c, 902);
    assert_eq!(
        handle.cached_algorithms(),
        2,
        "the dtype is part of the key"
    );
    run_conv_forward::<f32>(&stream, &handle, &strided_conv_cases()[0], 903);
    assert_eq!(handle.cached_algorithms(), 3, "strides are part of the key");
    let (name, dx, w, p) = &backward_cases()[0];
    run_conv_backward_data::<f32>(&stream, &handle, name, dx, w, p, 904);
    assert_eq!(
        handle.cached_algorithms(),
        4,
        "the direction is part of the key"
    );
    let a = handle
        .conv_forward_algorithm::<f32>(
            &TensorShape::contiguous(c.x.clone()),
            &TensorShape::contiguous(c.w.clone()),
            &c.params(),
            &TensorShape::contiguous(ref_out_dims(&c.x, &c.w, &c.params())),
        )
        .unwrap()
        .expect("cached");
    println!("{a:?}");
    assert_ne!(a.name, "unknown");
    assert_eq!(handle.find_calls(), 4);
    handle.clear_algorithm_cache();
    assert_eq!(handle.cached_algorithms(), 0);
    run_conv_forward::<f32>(&stream, &handle, c, 905);
    assert_eq!(handle.cached_algorithms(), 1);
    assert_eq!(handle.find_calls(), 5, "a cleared cache searches again");
}

/// Places `v` `offset` elements into a buffer whose first `offset` elements are poisoned.
fn at_offset<T: Elem>(v: &[T], offset: usize) -> Vec<T> {
    let mut out = vec![T::nan(); offset];
    out.extend_from_slice(v);
    out
}

/// Runs the forward case `c` (contiguous operands) with x, w and y `offsets` elements into their
/// buffers, so at addresses aligned only to the element size when an offset is odd, and checks
/// the result and that nothing before or after y was written.
fn run_conv_forward_at<T: Elem>(
    stream: &Stream,
    handle: &Handle,
    c: &ConvCase,
    offsets: [usize; 3],
    seed: u64,
) {
    let what = format!(
        "conv_forward {} {} at element offsets {offsets:?} (seed {seed})",
        T::DTYPE,
        c.name
    );
    let [xo, wo, yo] = offsets;
    let mut rng = Rng(seed);
    let params = c.params();
    let y_dims = ref_out_dims(&c.x, &c.w, &params);
    let (xt, xf) = rng.values::<T>(numel(&c.x));
    let (wt, wf) = rng.values::<T>(numel(&c.w));
    let (want, scale) = ref_conv_forward(&xf, &wf, &c.x, &c.w, &y_dims, &params);
    let xbuf = stream.alloc_from_host(&at_offset(&xt, xo)).unwrap();
    let wbuf = stream.alloc_from_host(&at_offset(&wt, wo)).unwrap();
    let mut ybuf = stream
        .alloc_from_host(&vec![T::nan(); yo + numel(&y_dims) + TAIL])
        .unwrap();
    handle
        .conv_forward(
            &TensorShape::contiguous(c.x.clone()),
            &xbuf.slice(xo..).unwrap(),
            &TensorShape::contiguous(c.w.clone()),
            &wbuf.slice(wo..).unwrap(),
            &params,
            &TensorShape::contiguous(y_dims.clone()),
            &mut ybuf.slice_mut(yo..).unwrap(),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = ybuf.to_host_vec().unwrap();
    assert!(
        got[..yo].iter().all(|v| v.to_f64().is_nan()),
        "{what}: an element before y was written"
    );
    check_output(
        &what,
        &got[yo..],
        &y_dims,
        &contiguous(&y_dims),
        &want,
        &scale,
        T::CONV_TOL,
        1.0,
    );
}

/// Runs the backward-data case with dy, w and dx `offsets` elements into their buffers.
fn run_conv_backward_data_at<T: Elem>(
    stream: &Stream,
    handle: &Handle,
    (name, dx_dims, w_dims, params): &(&str, Vec<usize>, Vec<usize>, ConvParams),
    offsets: [usize; 3],
    seed: u64,
) {
    let what = format!(
        "conv_backward_data {} {name} at element offsets {offsets:?} (seed {seed})",
        T::DTYPE
    );
    let [dyo, wo, dxo] = offsets;
    let mut rng = Rng(seed);
    let dy_dims = ref_out_dims(dx_dims, w_dims, params);
    let (dyt, dyf) = rng.values::<T>(numel(&dy_dims));
    let (wt, wf) = rng.values::<T>(numel(w_dims));
    let (want, scale) = ref_conv_backward_data(&dyf, &wf, dx_dims, w_dims, &dy_dims, params);
    let dybuf = stream.alloc_from_host(&at_offset(&dyt, dyo)).unwrap();
    let wbuf = stream.alloc_from_host(&at_offset(&wt, wo)).unwrap();
    let mut dxbuf = stream
        .alloc_from_host(&vec![T::nan(); dxo + numel(dx_dims) + TAIL])
        .unwrap();
    handle
        .conv_backward_data(
            &TensorShape::contiguous(dy_dims.clone()),
            &dybuf.slice(dyo..).unwrap(),
            &TensorShape::contiguous(w_dims.clone()),
            &wbuf.slice(wo..).unwrap(),
            params,
            &TensorShape::contiguous(dx_dims.clone()),
            &mut dxbuf.slice_mut(dxo..).unwrap(),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = dxbuf.to_host_vec().unwrap();
    assert!(
        got[..dxo].iter().all(|v| v.to_f64().is_nan()),
        "{what}: an element before dx was written"
    );
    check_output(
        &what,
        &got[dxo..],
        dx_dims,
        &contiguous(dx_dims),
        &want,
        &scale,
        T::CONV_TOL,
        1.0,
    );
}

/// Element offsets of (x, w, y), each run twice: 0 (the allocator's 512-byte aligned blocks),
/// odd ones (aligned to the element size only: 2 bytes in f16), 16 and 256 bytes in f32.
const OFFSETS: [[usize; 3]; 6] = [
    [0, 0, 0],
    [1, 0, 0],
    [0, 3, 0],
    [0, 0, 5],
    [7, 1, 3],
    [4, 64, 8],
];

#[test]
#[ignore = "needs a GPU"]
fn one_search_per_problem_dtype_and_direction_at_any_alignment() {
    let (stream, handle) = setup();
    println!("search: {:?}", handle.algorithm_search());
    assert_eq!(handle.find_calls(), 0);
    let c = &conv_cases()[2];
    let b = &backward_cases()[0];
    let mut runs = 0u64;
    let mut seed = 1100;
    for round in 0..2 {
        for offsets in OFFSETS {
            run_conv_forward_at::<f32>(&stream, &handle, c, offsets, seed);
            run_conv_forward_at::<f16>(&stream, &handle, c, offsets, seed + 1);
            run_conv_backward_data_at::<f32>(&stream, &handle, b, offsets, seed + 2);
            seed += 3;
            runs += 3;
            // (shape, f32, forward), (shape, f16, forward), (shape, f32, backward-data).
            assert_eq!(
                handle.find_calls(),
                3,
                "round {round}, offsets {offsets:?}: the alignment of the operands must not \
                 cause another search"
            );
        }
    }
    let stats = handle.algorithm_stats();
    println!("{stats:?}");
    assert_eq!(stats.searches, 3);
    assert_eq!(stats.cache_hits, runs - 3);
    assert_eq!(stats.cached, 3);
    for (dtype, a) in [
        (
            "f32",
            handle.conv_forward_algorithm::<f32>(
                &TensorShape::contiguous(c.x.clone()),
                &TensorShape::contiguous(c.w.clone()),
                &c.params(),
                &TensorShape::contiguous(ref_out_dims(&c.x, &c.w, &c.params())),
            ),
        ),
        (
            "f16",
            handle.conv_forward_algorithm::<f16>(
                &TensorShape::contiguous(c.x.clone()),
                &TensorShape::contiguous(c.w.clone()),
                &c.params(),
                &TensorShape::contiguous(ref_out_dims(&c.x, &c.w, &c.params())),
            ),
        ),
    ] {
        let a = a.unwrap().expect("cached");
        println!("forward {dtype}: {a:?}");
        assert_eq!(
            a.solution_id.is_some(),
            handle.algorithm_search() == AlgorithmSearch::Immediate
        );
    }
}

#[test]
#[ignore = "needs a GPU"]
fn operands_on_other_streams_are_ordered() {
    let (_, handle) = setup();
    let other = handle.stream().device().create_stream().unwrap();
    let c = &conv_cases()[2];
    let mut rng = Rng(1000);
    let params = c.params();
    let y_dims = ref_out_dims(&c.x, &c.w, &params);
    let (xt, xf) = rng.values::<f32>(numel(&c.x));
    let (wt, wf) = rng.values::<f32>(numel(&c.w));
    let (want, scale) = ref_conv_forward(&xf, &wf, &c.x, &c.w, &y_dims, &params);
    // Everything lives on `other`; the handle runs on its own stream.
    let xbuf = other.alloc_from_host(&xt).unwrap();
    let wbuf = other.alloc_from_host(&wt).unwrap();
    let mut ybuf: DeviceBuffer<f32> = other
        .alloc_from_host(&vec![f32::NAN; numel(&y_dims)])
        .unwrap();
    for _ in 0..3 {
        handle
            .conv_forward(
                &TensorShape::contiguous(c.x.clone()),
                &xbuf.as_slice(),
                &TensorShape::contiguous(c.w.clone()),
                &wbuf.as_slice(),
                &params,
                &TensorShape::contiguous(y_dims.clone()),
                &mut ybuf.as_mut_slice(),
            )
            .unwrap();
    }
    // Read back on `other`: ordered after the handle's stream by the crate.
    let got = ybuf.to_host_vec().unwrap();
    check_output(
        "cross-stream conv_forward f32",
        &got,
        &y_dims,
        &contiguous(&y_dims),
        &want,
        &scale,
        f32::CONV_TOL,
        1.0,
    );
}

#[test]
#[ignore = "needs a GPU"]
fn empty_shapes() {
    let (stream, handle) = setup();
    // N = 0: nothing to do.
    let x = TensorShape::contiguous([0, 3, 5, 5]);
    let w = TensorShape::contiguous([4, 3, 3, 3]);
    let y = TensorShape::contiguous([0, 4, 3, 3]);
    let xb = stream.alloc_zeroed::<f32>(0).unwrap();
    let wb = stream.alloc_zeroed::<f32>(108).unwrap();
    let mut yb = stream.alloc_zeroed::<f32>(0).unwrap();
    handle
        .conv_forward(
            &x,
            &xb.as_slice(),
            &w,
            &wb.as_slice(),
            &ConvParams::new(2),
            &y,
            &mut yb.as_mut_slice(),
        )
        .unwrap();
    // C_in = 0: every output is 0.
    let x = TensorShape::contiguous([2, 0, 5, 5]);
    let w = TensorShape::contiguous([4, 0, 3, 3]);
    let y = TensorShape::contiguous([2, 4, 3, 3]);
    let wb = stream.alloc_zeroed::<f32>(0).unwrap();
    let mut yb = stream.alloc_from_host(&vec![f32::NAN; 72]).unwrap();
    handle
        .conv_forward(
            &x,
            &xb.as_slice(),
            &w,
            &wb.as_slice(),
            &ConvParams::new(2),
            &y,
            &mut yb.as_mut_slice(),
        )
        .unwrap();
    assert!(yb.to_host_vec().unwrap().iter().all(|&v| v == 0.0));
    // Pooling over an empty batch.
    let mut yb = stream.alloc_zeroed::<f16>(0).unwrap();
    let xb = stream.alloc_zeroed::<f16>(0).unwrap();
    handle
        .pooling_forward(
            PoolMode::Max,
            &[2, 2],
            &[0, 0],
            &[2, 2],
            &TensorShape::contiguous([0, 3, 4, 4]),
            &xb.as_slice(),
            &TensorShape::contiguous([0, 3, 2, 2]),
            &mut yb.as_mut_slice(),
        )
        .unwrap();
    assert_eq!(handle.cached_algorithms(), 0);
    assert_eq!(handle.find_calls(), 0);
}
