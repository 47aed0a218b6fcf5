//! Benchmark: a ResNet-50 layer, conv2d N=32, 64 -> 64 channels, 56x56, 3x3, padding 1, in f32
//! and f16, through [`Handle::conv_forward`] beside the library called directly through the raw
//! table (same process, same stream, same buffers), reported in ms and as the ratio
//! miopen-safe / direct.
//!
//! * `direct` on `nvidia`: cuDNN's own handle and descriptors, created once, running the
//!   algorithm (and math type) the safe handle's find step chose, with a preallocated workspace;
//!   the loop is `cudnnConvolutionForward` alone.
//! * `direct` on `amd`: MIOpen's own handle and descriptors, its own find step (MIOpen registers
//!   the found kernels with the handle that ran the find), then `miopenConvolutionForward` alone.
//!   The safe handle uses MIOpen's immediate mode unless `MIOPEN_SAFE_SEARCH=find`: set it to
//!   compare the same algorithm choice.
//!
//! Both sides queue `iters` convolutions and synchronize once (criterion's `iter_custom`), so
//! the numbers are the device time per convolution plus whatever host overhead the GPU cannot
//! hide. A summary at the end times 50 convolutions per side with events (best of 5 rounds)
//! and prints TFLOP/s and the ratio.
//!
//! Run: `cargo bench -p miopen-safe --bench conv` (criterion arguments after `--`).

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use half::f16;
use hip_core::{DeviceBuffer, Event, Platform, Stream};
use miopen_safe::{ConvElement, ConvParams, DataType, Handle, TensorShape};

const X: [usize; 4] = [32, 64, 56, 56];
const W: [usize; 4] = [64, 64, 3, 3];
const Y: [usize; 4] = [32, 64, 56, 56];

/// Multiply-adds x 2.
fn flops() -> f64 {
    2.0 * (Y.iter().product::<usize>() * W[1] * W[2] * W[3]) as f64
}

trait BenchElem: ConvElement {
    fn from_f32(v: f32) -> Self;
    fn to_f64(self) -> f64;
}
impl BenchElem for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}
impl BenchElem for f16 {
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
}

fn fill<T: BenchElem>(n: usize, seed: u32) -> Vec<T> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            T::from_f32((s % 2001) as f32 / 1000.0 - 1.0)
        })
        .collect()
}

fn i32s(v: &[usize]) -> Vec<c_int> {
    v.iter().map(|&d| d as c_int).collect()
}

fn contiguous(dims: &[usize]) -> Vec<c_int> {
    i32s(&miopen_safe::contiguous_strides(dims))
}

/// The library called directly through the raw table.
enum Direct {
    Cudnn(DirectCudnn),
    MiOpen(DirectMiOpen),
}

struct DirectCudnn {
    t: &'static miopen_safe::raw::Cudnn,
    handle: cudarc::cudnn::sys::cudnnHandle_t,
    x: cudarc::cudnn::sys::cudnnTensorDescriptor_t,
    w: cudarc::cudnn::sys::cudnnFilterDescriptor_t,
    y: cudarc::cudnn::sys::cudnnTensorDescriptor_t,
    conv: cudarc::cudnn::sys::cudnnConvolutionDescriptor_t,
    algo: c_int,
    ws: DeviceBuffer<u8>,
}

struct DirectMiOpen {
    t: &'static miopen_safe::sys::miopen::MIOpen,
    handle: miopen_safe::sys::miopen::miopenHandle_t,
    x: miopen_safe::sys::miopen::miopenTensorDescriptor_t,
    w: miopen_safe::sys::miopen::miopenTensorDescriptor_t,
    y: miopen_safe::sys::miopen::miopenTensorDescriptor_t,
    conv: miopen_safe::sys::miopen::miopenConvolutionDescriptor_t,
    algo: u32,
    ws: DeviceBuffer<u8>,
}

fn ok_cudnn(call: &str, status: c_int) {
    assert_eq!(status, 0, "{call} failed with cuDNN status {status}");
}

fn ok_miopen(call: &str, status: u32) {
    assert_eq!(status, 0, "{call} failed with miopenStatus {status}");
}

impl DirectCudnn {
    fn new(stream: &Stream, dtype: DataType, algo: &miopen_safe::ConvAlgorithm) -> DirectCudnn {
        use cudarc::cudnn::sys::{cudnnConvolutionMode_t, cudnnDataType_t, cudnnTensorFormat_t};
        let t = miopen_safe::raw::cudnn().expect("cuDNN");
        let data = match dtype {
            DataType::F32 => cudnnDataType_t::CUDNN_DATA_FLOAT,
            DataType::F16 => cudnnDataType_t::CUDNN_DATA_HALF,
            other => panic!("not benchmarked: {other}"),
        };
        let (dx, sx, dw, dy, sy) = (i32s(&X), contiguous(&X), i32s(&W), i32s(&Y), contiguous(&Y));
        let (pad, one) = ([1 as c_int, 1], [1 as c_int, 1]);
        let mut d = DirectCudnn {
            t,
            handle: null_mut(),
            x: null_mut(),
            w: null_mut(),
            y: null_mut(),
            conv: null_mut(),
            algo: algo.id,
            ws: stream.alloc::<u8>(algo.workspace_bytes).expect("workspace"),
        };
        stream.device().make_current().unwrap();
        // SAFETY: out-pointers are valid; arrays hold 4 (tensors) or 2 (convolution) ints; the
        // stream outlives the handle (destroyed in Drop, after a synchronize).
        unsafe {
            ok_cudnn("cudnnCreate", t.cudnnCreate.unwrap()(&mut d.handle));
            ok_cudnn(
                "cudnnSetStream",
                t.cudnnSetStream.unwrap()(d.handle, stream.as_raw().cast()),
            );
            ok_cudnn("create x", t.cudnnCreateTensorDescriptor.unwrap()(&mut d.x));
            ok_cudnn("create y", t.cudnnCreateTensorDescriptor.unwrap()(&mut d.y));
            ok_cudnn("create w", t.cudnnCreateFilterDescriptor.unwrap()(&mut d.w));
            ok_cudnn(
                "create conv",
                t.cudnnCreateConvolutionDescriptor.unwrap()(&mut d.conv),
            );
            ok_cudnn(
                "set x",
                t.cudnnSetTensorNdDescriptor.unwrap()(d.x, data, 4, dx.as_ptr(), sx.as_ptr()),
            );
            ok_cudnn(
                "set y",
                t.cudnnSetTensorNdDescriptor.unwrap()(d.y, data, 4, dy.as_ptr(), sy.as_ptr()),
            );
            ok_cudnn(
                "set w",
                t.cudnnSetFilterNdDescriptor.unwrap()(
                    d.w,
                    data,
                    cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                    4,
                    dw.as_ptr(),
                ),
            );
            ok_cudnn(
                "set conv",
                t.cudnnSetConvolutionNdDescriptor.unwrap()(
                    d.conv,
                    2,
                    pad.as_ptr(),
                    one.as_ptr(),
                    one.as_ptr(),
                    cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                    cudnnDataType_t::CUDNN_DATA_FLOAT,
                ),
            );
            ok_cudnn(
                "set math",
                t.cudnnSetConvolutionMathType.unwrap()(d.conv, algo.math_type),
            );
        }
        d
    }

    fn run(&mut self, x: *const c_void, w: *const c_void, y: *mut c_void) {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: descriptors describe the buffers, which live on the handle's device; the
        // workspace holds the algorithm's bytes.
        let s = unsafe {
            self.t.cudnnConvolutionForward.unwrap()(
                self.handle,
                (&alpha as *const f32).cast(),
                self.x,
                x,
                self.w,
                w,
                self.conv,
                self.algo,
                self.ws.device_ptr().0 as *mut c_void,
                self.ws.len(),
                (&beta as *const f32).cast(),
                self.y,
                y,
            )
        };
        ok_cudnn("cudnnConvolutionForward", s);
    }
}

impl Drop for DirectCudnn {
    fn drop(&mut self) {
        // SAFETY: each object was created above and is destroyed once; the caller synchronized.
        unsafe {
            self.t.cudnnDestroyConvolutionDescriptor.unwrap()(self.conv);
            self.t.cudnnDestroyFilterDescriptor.unwrap()(self.w);
            self.t.cudnnDestroyTensorDescriptor.unwrap()(self.x);
            self.t.cudnnDestroyTensorDescriptor.unwrap()(self.y);
            self.t.cudnnDestroy.unwrap()(self.handle);
        }
    }
}

impl DirectMiOpen {
    fn new(
        stream: &Stream,
        dtype: DataType,
        x: *const c_void,
        w: *const c_void,
        y: *mut c_void,
    ) -> DirectMiOpen {
        use miopen_safe::sys::miopen as m;
        let t = miopen_safe::raw::miopen().expect("MIOpen");
        let data = match dtype {
            DataType::F32 => m::miopenFloat,
            DataType::F16 => m::miopenHalf,
            other => panic!("not benchmarked: {other}"),
        };
        let (dx, sx, dw, sw, dy, sy) = (
            i32s(&X),
            contiguous(&X),
            i32s(&W),
            contiguous(&W),
            i32s(&Y),
            contiguous(&Y),
        );
        let (pad, one) = ([1 as c_int, 1], [1 as c_int, 1]);
        let mut d = DirectMiOpen {
            t,
            handle: null_mut(),
            x: null_mut(),
            w: null_mut(),
            y: null_mut(),
            conv: null_mut(),
            algo: 0,
            ws: stream.alloc::<u8>(0).unwrap(),
        };
        stream.device().make_current().unwrap();
        // SAFETY: out-pointers are valid; arrays hold 4 (tensors) or 2 (convolution) ints; the
        // buffers match the descriptors; the stream outlives the handle.
        unsafe {
            ok_miopen(
                "create",
                t.miopenCreateWithStream.as_ref().unwrap()(&mut d.handle, stream.as_raw().cast()),
            );
            for desc in [&mut d.x, &mut d.w, &mut d.y] {
                ok_miopen(
                    "create tensor",
                    t.miopenCreateTensorDescriptor.as_ref().unwrap()(desc),
                );
            }
            ok_miopen(
                "set x",
                t.miopenSetTensorDescriptor.as_ref().unwrap()(
                    d.x,
                    data,
                    4,
                    dx.as_ptr(),
                    sx.as_ptr(),
                ),
            );
            ok_miopen(
                "set w",
                t.miopenSetTensorDescriptor.as_ref().unwrap()(
                    d.w,
                    data,
                    4,
                    dw.as_ptr(),
                    sw.as_ptr(),
                ),
            );
            ok_miopen(
                "set y",
                t.miopenSetTensorDescriptor.as_ref().unwrap()(
                    d.y,
                    data,
                    4,
                    dy.as_ptr(),
                    sy.as_ptr(),
                ),
            );
            ok_miopen(
                "create conv",
                t.miopenCreateConvolutionDescriptor.as_ref().unwrap()(&mut d.conv),
            );
            ok_miopen(
                "init conv",
                t.miopenInitConvolutionNdDescriptor.as_ref().unwrap()(
                    d.conv,
                    2,
                    pad.as_ptr(),
                    one.as_ptr(),
                    one.as_ptr(),
                    m::miopenConvolution,
                ),
            );
            let mut bytes = 0usize;
            ok_miopen(
                "workspace",
                t.miopenConvolutionForwardGetWorkSpaceSize.as_ref().unwrap()(
                    d.handle, d.w, d.x, d.conv, d.y, &mut bytes,
                ),
            );
            let find_ws = stream.alloc::<u8>(bytes).unwrap();
            let mut perf = m::miopenConvAlgoPerf_t::default();
            let mut n: c_int = 0;
            ok_miopen(
                "find",
                t.miopenFindConvolutionForwardAlgorithm.as_ref().unwrap()(
                    d.handle,
                    d.x,
                    x,
                    d.w,
                    w,
                    d.conv,
                    d.y,
                    y,
                    1,
                    &mut n,
                    &mut perf,
                    find_ws.device_ptr().0 as *mut c_void,
                    bytes,
                    false,
                ),
            );
            assert_eq!(n, 1, "MIOpen's find returned no algorithm");
            d.algo = perf.__bindgen_anon_1.fwd_algo;
            d.ws = stream.alloc::<u8>(perf.memory).unwrap();
        }
        d
    }

    fn run(&mut self, x: *const c_void, w: *const c_void, y: *mut c_void) {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: descriptors describe the buffers; the algorithm was found on this handle; the
        // workspace holds its bytes.
        let s = unsafe {
            self.t.miopenConvolutionForward.as_ref().unwrap()(
                self.handle,
                (&alpha as *const f32).cast(),
                self.x,
                x,
                self.w,
                w,
                self.conv,
                self.algo,
                (&beta as *const f32).cast(),
                self.y,
                y,
                self.ws.device_ptr().0 as *mut c_void,
                self.ws.len(),
            )
        };
        ok_miopen("miopenConvolutionForward", s);
    }
}

impl Drop for DirectMiOpen {
    fn drop(&mut self) {
        // SAFETY: each object was created above and is destroyed once; the caller synchronized.
        unsafe {
            let _ = self
                .t
                .miopenDestroyConvolutionDescriptor
                .as_ref()
                .map(|f| f(self.conv));
            for desc in [self.x, self.w, self.y] {
                let _ = self
                    .t
                    .miopenDestroyTensorDescriptor
                    .as_ref()
                    .map(|f| f(desc));
            }
            let _ = self.t.miopenDestroy.as_ref().map(|f| f(self.handle));
        }
    }
}

impl Direct {
    fn run(&mut self, x: *const c_void, w: *const c_void, y: *mut c_void) {
        match self {
            Direct::Cudnn(d) => d.run(x, w, y),
            Direct::MiOpen(d) => d.run(x, w, y),
        }
    }
}

/// Best per-convolution time over 5 rounds of `reps` queued convolutions, by events.
fn event_ms(stream: &Stream, reps: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = Event::new(stream.device(), true).unwrap();
        let end = Event::new(stream.device(), true).unwrap();
        start.record(stream).unwrap();
        for _ in 0..reps {
            f();
        }
        end.record(stream).unwrap();
        end.synchronize().unwrap();
        best = best.min(start.elapsed_ms(&end).unwrap() as f64 / reps as f64);
    }
    best
}

fn bench_dtype<T: BenchElem>(
    c: &mut Criterion,
    stream: &Stream,
    handle: &Handle,
    summary: &mut Vec<String>,
) {
    let dtype = T::DTYPE;
    let xs = TensorShape::contiguous(X);
    let ws = TensorShape::contiguous(W);
    let ys = TensorShape::contiguous(Y);
    let mut params = ConvParams::new(2);
    params.padding = vec![1, 1];
    let xb = stream
        .alloc_from_host(&fill::<T>(xs.elem_count(), 1))
        .unwrap();
    let wb = stream
        .alloc_from_host(&fill::<T>(ws.elem_count(), 2))
        .unwrap();
    let mut yb = stream.alloc::<T>(ys.elem_count()).unwrap();
    let yb2 = stream.alloc::<T>(ys.elem_count()).unwrap();
    // The algorithm search runs here, outside the measurements.
    handle
        .conv_forward(
            &xs,
            &xb.as_slice(),
            &ws,
            &wb.as_slice(),
            &params,
            &ys,
            &mut yb.as_mut_slice(),
        )
        .unwrap_or_else(|e| panic!("{dtype}: {e}"));
    let algo = handle
        .conv_forward_algorithm::<T>(&xs, &ws, &params, &ys)
        .unwrap()
        .expect("found");
    let (xp, wp, yp) = (
        xb.device_ptr().0 as *const c_void,
        wb.device_ptr().0 as *const c_void,
        yb2.device_ptr().0 as *mut c_void,
    );
    let mut direct = match handle.platform() {
        Platform::Nvidia => Direct::Cudnn(DirectCudnn::new(stream, dtype, &algo)),
        Platform::Amd => Direct::MiOpen(DirectMiOpen::new(stream, dtype, xp, wp, yp)),
    };
    direct.run(xp, wp, yp);
    stream.synchronize().unwrap();
    // Both sides must compute the same thing (the same algorithm on nvidia; MIOpen's own find
    // on amd may pick another, hence a tolerance rather than bit equality).
    let (a, b) = (yb.to_host_vec().unwrap(), yb2.to_host_vec().unwrap());
    let peak = a.iter().map(|v| v.to_f64().abs()).fold(0.0, f64::max);
    let diff = a
        .iter()
        .zip(&b)
        .map(|(p, q)| (p.to_f64() - q.to_f64()).abs())
        .fold(0.0, f64::max);
    assert!(
        peak > 0.0 && diff <= 1e-2 * peak,
        "{dtype}: outputs differ by {diff} (peak {peak})"
    );

    let mut ours = || {
        handle
            .conv_forward(
                &xs,
                &xb.as_slice(),
                &ws,
                &wb.as_slice(),
                &params,
                &ys,
                &mut yb.as_mut_slice(),
            )
            .unwrap()
    };
    let mut group = c.benchmark_group("conv2d_n32_c64_56x56_k3x3");
    group.sample_size(20);
    group.bench_function(BenchmarkId::new("miopen-safe", dtype), |bench| {
        bench.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                ours();
            }
            stream.synchronize().unwrap();
            t.elapsed()
        })
    });
    group.bench_function(BenchmarkId::new("direct", dtype), |bench| {
        bench.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                direct.run(xp, wp, yp);
            }
            stream.synchronize().unwrap();
            t.elapsed()
        })
    });
    group.finish();

    let ours_ms = event_ms(stream, 50, &mut ours);
    let direct_ms = event_ms(stream, 50, || direct.run(xp, wp, yp));
    stream.synchronize().unwrap();
    drop(direct);
    let tflops = |ms: f64| flops() / (ms * 1e-3) / 1e12;
    summary.push(format!(
        "conv2d {dtype} N=32 64->64 56x56 3x3 pad 1 [{} {}, workspace {} B]: miopen-safe {ours_ms:.4} ms ({:.1} TFLOP/s), direct {direct_ms:.4} ms ({:.1} TFLOP/s), ratio miopen-safe/direct {:.3}",
        algo.name,
        algo.id,
        algo.workspace_bytes,
        tflops(ours_ms),
        tflops(direct_ms),
        ours_ms / direct_ms
    ));
}

fn main() {
    let device = match hip_core::Device::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("conv benchmark skipped: no GPU ({e})");
            return;
        }
    };
    let stream = device.create_stream().expect("a stream");
    let handle = match Handle::new(&stream) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("conv benchmark skipped: {e}");
            return;
        }
    };
    let version = miopen_safe::library_version().unwrap_or_else(|e| e.to_string());
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let mut summary = Vec::new();
    // One dtype failing must not hide the other's numbers.
    for (name, run) in [
        (
            "f32",
            bench_dtype::<f32> as fn(&mut Criterion, &Stream, &Handle, &mut Vec<String>),
        ),
        ("f16", bench_dtype::<f16>),
    ] {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run(&mut c, &stream, &handle, &mut summary)
        }));
        if r.is_err() {
            summary.push(format!("conv2d {name}: FAILED (see the panic above)"));
        }
    }
    c.final_summary();
    println!(
        "\n=== conv summary on {} ({version}, {}):",
        device.properties().name,
        handle.platform()
    );
    for line in summary {
        println!("{line}");
    }
}
