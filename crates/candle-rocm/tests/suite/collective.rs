//! Collectives, peer copies and tensor-parallel linear layers on `RocmStorage` (a module of
//! tests/conformance.rs; `candle_rocm::collective`, RCCL on AMD, NCCL on NVIDIA).
//!
//! One GPU allows 1-rank communicators only (NCCL refuses two ranks on one device): every
//! reduction of one rank is its input, an all-gather or reduce-scatter copies, a broadcast
//! copies. The CPU oracle is candle's `copy_strided_src` of the same input and layout (the
//! elements of the layout in row-major order), compared exactly; the parallel linear layers are
//! compared with an f64 `x W^T + b`. What this proves on one GPU: dtype dispatch, layouts
//! (transposed, offset, broadcast), stream ordering without host synchronisation, and the
//! typed errors. Multi-rank arithmetic and peer copies between two GPUs need a machine with
//! several (the peer-copy test runs between devices 0 and 1 when there are two).

use super::*;
use candle_rocm::collective::{
    copy_to_device, ColumnParallelLinear, CommConfig, ReduceOp, RocmComm, RowParallelLinear,
    UniqueId,
};

fn one_rank(dev: &RocmDevice) -> RocmComm {
    RocmComm::new(
        dev,
        &UniqueId::new().expect("ncclGetUniqueId"),
        0,
        1,
        CommConfig::with_timeout(std::time::Duration::from_secs(60)),
    )
    .expect("a 1-rank communicator")
}

/// The layouts every collective is run on: contiguous, offset, transposed, broadcast (stride
/// 0), over a 40-element storage.
fn layouts() -> Vec<(&'static str, Layout)> {
    vec![
        ("contiguous", Layout::contiguous((5, 8))),
        ("offset", Layout::contiguous_with_offset((3, 7), 11)),
        (
            "transposed",
            Layout::contiguous((5, 8)).transpose(0, 1).unwrap(),
        ),
        (
            "broadcast",
            Layout::contiguous_with_offset((1, 8), 8)
                .broadcast_as((3, 8))
                .unwrap(),
        ),
    ]
}

const DTYPES: [DType; 8] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::F64,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U32,
];

/// The layout's elements in row-major order, on the CPU.
fn expected(cpu: &CpuStorage, l: &Layout) -> CpuStorage {
    let dev = CpuDevice;
    let mut out = dev.zeros_impl(l.shape(), cpu.dtype()).unwrap();
    cpu.copy_strided_src(&mut out, 0, l).unwrap();
    out
}

fn input(dev: &RocmDevice, dtype: DType, seed: u64) -> (CpuStorage, RocmStorage) {
    let mut rng = Rng::new(seed);
    let cpu = gen(dtype, 40, Dist::General, &mut rng);
    let gpu = dev.storage_from_cpu_storage(&cpu).unwrap();
    (cpu, gpu)
}

fn same(got: &RocmStorage, want: &CpuStorage, what: &str) {
    let got = got.to_cpu_storage().unwrap();
    if let Err(e) = compare(&got, want, true) {
        panic!("{what}: {e}");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn collectives_on_storage_every_dtype_and_layout() {
    let dev = RocmDevice::new(0).unwrap();
    let comm = one_rank(&dev);
    let seed = base_seed();
    for dtype in DTYPES {
        for (name, l) in layouts() {
            let (cpu, gpu) = input(
                &dev,
                dtype,
                case_seed(seed, &["collective", dtype.as_str(), name]),
            );
            let want = expected(&cpu, &l);
            let what = |op: &str| format!("{op} {dtype:?} {name} (seed {seed:#x})");
            for op in [
                ReduceOp::Sum,
                ReduceOp::Prod,
                ReduceOp::Max,
                ReduceOp::Min,
                ReduceOp::Avg,
            ] {
                let r = comm.all_reduce(&gpu, &l, op).unwrap();
                same(&r, &want, &what(op.name()));
            }
            same(
                &comm.all_gather(&gpu, &l).unwrap(),
                &want,
                &what("all_gather"),
            );
            same(
                &comm.reduce_scatter(&gpu, &l, ReduceOp::Sum).unwrap(),
                &want,
                &what("reduce_scatter"),
            );
            same(
                &comm.broadcast(&gpu, &l, 0).unwrap(),
                &want,
                &what("broadcast"),
            );
            // Peer copy API, same device: the layout's elements.
            same(
                &copy_to_device(&gpu, &l, &dev).unwrap(),
                &want,
                &what("copy_to_device"),
            );
        }
        // In place on an offset contiguous view: the rest of the buffer is untouched.
        let (cpu, mut gpu) = input(&dev, dtype, case_seed(seed, &["in place", dtype.as_str()]));
        let l = Layout::contiguous_with_offset((4, 5), 9);
        comm.all_reduce_in_place(&mut gpu, &l, ReduceOp::Max)
            .unwrap();
        same(&gpu, &cpu, &format!("all_reduce_in_place {dtype:?}"));
    }
}

#[test]
#[ignore = "needs a GPU"]
fn collectives_refuse_what_nccl_cannot_do() {
    let dev = RocmDevice::new(0).unwrap();
    let comm = one_rank(&dev);
    let l = Layout::contiguous((2, 3));
    let i16s = dev.storage_from_slice(&[1i16, 2, 3, 4, 5, 6]).unwrap();
    let err = comm.all_reduce(&i16s, &l, ReduceOp::Sum).unwrap_err();
    assert!(
        matches!(
            RocmError::from_candle(&err),
            Some(RocmError::Unsupported { .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("i16"), "{err}");
    let f8 = dev
        .storage_from_cpu_storage(&CpuStorage::F8E4M3(vec![float8::F8E4M3::from_f32(1.5); 6]))
        .unwrap();
    let err = comm.all_reduce(&f8, &l, ReduceOp::Sum).unwrap_err();
    assert!(err.to_string().contains("f8e4m3"), "{err}");
    // f8e4m3 moves as bytes.
    let g = comm.all_gather(&f8, &l).unwrap();
    assert_eq!(g.to_cpu_storage().unwrap().dtype(), DType::F8E4M3);
    // In place needs a contiguous layout.
    let mut x = dev.storage_from_slice(&[1f32; 6]).unwrap();
    let err = comm
        .all_reduce_in_place(
            &mut x,
            &Layout::contiguous((2, 3)).transpose(0, 1).unwrap(),
            ReduceOp::Sum,
        )
        .unwrap_err();
    assert!(
        matches!(RocmError::from_candle(&err), Some(RocmError::Layout { .. })),
        "{err}"
    );
    // Blocks that do not split.
    let err = comm
        .reduce_scatter(&x, &Layout::contiguous(6), ReduceOp::Sum)
        .map(|_| ());
    assert!(err.is_ok(), "1 rank: 6 elements split into 1 block");
    // dtype mismatch between a layer's weight and its input: candle's typed error.
    let w = dev.storage_from_slice(&[f16::ONE; 6]).unwrap();
    let layer = ColumnParallelLinear::new(w, &Layout::contiguous((2, 3)), None).unwrap();
    let err = layer.forward(&x, &l).unwrap_err();
    assert!(err.to_string().to_lowercase().contains("dtype"), "{err}");
}

#[test]
#[ignore = "needs a GPU"]
fn collectives_do_not_synchronise_the_host() {
    let dev = RocmDevice::new(0).unwrap();
    let comm = one_rank(&dev);
    let x = dev.storage_from_slice(&vec![0.5f32; 1 << 20]).unwrap();
    let l = Layout::contiguous((1024, 1024));
    let t = l.transpose(0, 1).unwrap();
    let before = hip_core::thread_sync_count();
    let mut last = None;
    for _ in 0..5 {
        let r = comm.all_reduce(&x, &t, ReduceOp::Sum).unwrap();
        let g = comm.all_gather(&r, &l).unwrap();
        let p = copy_to_device(&g, &l, &dev).unwrap();
        last = Some(p);
    }
    assert_eq!(
        hip_core::thread_sync_count(),
        before,
        "a collective synchronised the host"
    );
    assert_eq!(host::<f32>(&last.unwrap()), vec![0.5f32; 1 << 20]);
}

/// `x W^T + b` in f64.
fn linear_ref(x: &[f32], w: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = b[j] as f64;
            for p in 0..k {
                acc += x[i * k + p] as f64 * w[j * k + p] as f64;
            }
            out[i * n + j] = acc;
        }
    }
    out
}

fn close_to(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "{what}: element {i} is {g}, expected {w}"
        );
    }
}

#[test]
#[ignore = "needs a GPU"]
fn tensor_parallel_linear_layers_on_one_rank() {
    let dev = RocmDevice::new(0).unwrap();
    let comm = one_rank(&dev);
    let (m, n, k) = (6, 10, 12);
    let mut rng = Rng::new(base_seed() ^ 0x11);
    let x: Vec<f32> = (0..2 * m * k)
        .map(|_| rng.uniform(-1.0, 1.0) as f32)
        .collect();
    let w: Vec<f32> = (0..n * k).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    let b: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    let gx = dev.storage_from_slice(&x).unwrap();
    let gw = dev.storage_from_slice(&w).unwrap();
    let gb = dev.storage_from_slice(&b).unwrap();
    // The input: the second half of a (2, 3, 2, 12) buffer as (3, 2, 12), with an offset.
    let xl = Layout::contiguous_with_offset((3, 2, k), m * k);
    let want = linear_ref(&x[m * k..], &w, &b, m, n, k);
    let wl = Layout::contiguous((n, k));

    let col = ColumnParallelLinear::from_full(&comm, &gw, &wl, Some((&gb, &Layout::contiguous(n))))
        .unwrap();
    let (y, shape) = col.forward(&gx, &xl).unwrap();
    assert_eq!(shape.dims(), &[3, 2, n]);
    close_to(&host::<f32>(&y), &want, "column-parallel");
    let (y, shape) = col.forward_gathered(&comm, &gx, &xl).unwrap();
    assert_eq!(shape.dims(), &[3, 2, n]);
    close_to(&host::<f32>(&y), &want, "column-parallel, gathered");

    let row = RowParallelLinear::from_full(
        &comm,
        &gw,
        &wl,
        Some(gb.try_clone(&Layout::contiguous(n)).unwrap()),
    )
    .unwrap();
    let (y, shape) = row.forward(&comm, &gx, &xl).unwrap();
    assert_eq!(shape.dims(), &[3, 2, n]);
    close_to(&host::<f32>(&y), &want, "row-parallel");

    // A transposed input goes through a contiguous copy first.
    let xt_l = Layout::contiguous((k, m)).transpose(0, 1).unwrap();
    let xt: Vec<f32> = (0..m * k).map(|i| x[(i % m) * k + i / m]).collect();
    // xt (k, m) row-major holds x[..m*k] transposed: its transpose is x's first (m, k) block.
    let gxt = dev.storage_from_slice(&xt).unwrap();
    let want0 = linear_ref(&x[..m * k], &w, &b, m, n, k);
    let (y, _) = col.forward(&gxt, &xt_l).unwrap();
    close_to(
        &host::<f32>(&y),
        &want0,
        "column-parallel, transposed input",
    );
}

#[test]
#[ignore = "needs a GPU"]
fn peer_copy_between_two_devices_when_there_are_two() {
    let count = hip_core::device_count().unwrap();
    if count < 2 {
        println!("{count} GPU: the peer copy between two devices needs two (docs/multi-gpu.md)");
        return;
    }
    let d0 = RocmDevice::new(0).unwrap();
    let d1 = RocmDevice::new(1).unwrap();
    let data: Vec<f32> = (0..4096).map(|i| i as f32).collect();
    let s = d0.storage_from_slice(&data).unwrap();
    let l = Layout::contiguous((64, 64)).transpose(0, 1).unwrap();
    let before = hip_core::thread_sync_count();
    let c = copy_to_device(&s, &l, &d1).unwrap();
    assert_eq!(hip_core::thread_sync_count(), before);
    let want: Vec<f32> = (0..4096).map(|i| ((i % 64) * 64 + i / 64) as f32).collect();
    assert_eq!(host::<f32>(&c), want);
}
