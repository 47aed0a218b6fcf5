//! All-reduce bus bandwidth (issue 14): 256 MiB of bf16 summed over 1, 2, 4 and 8 GPUs (as many
//! as the machine has), three ways in the same run:
//! - `nccl`: `ncclAllReduce` called directly on the communicators' raw handles, in one
//!   `ncclGroupStart`/`ncclGroupEnd` (the library's own figure for the call);
//! - `rccl-safe`: [`rccl_safe::Comm::all_reduce_in_place`] inside a [`rccl_safe::Group`];
//! - `candle-rocm`: [`RocmComm::all_reduce_in_place`] on `RocmStorage`, inside a group.
//!
//! One thread drives every device (one rank per device, as NCCL requires). Each timed iteration
//! launches one all-reduce per rank; the timer stops when every device's stream is idle.
//! Bandwidths as nccl-tests defines them: algbw = bytes / time, busbw = algbw * 2(n-1)/n (zero
//! for one rank, where algbw is the figure). After criterion's groups, a summary line per rank
//! count gives each way's time, busbw and the wrappers' cost relative to the direct call
//! (target: < 3%). `ALL_REDUCE_MIB` changes the size.
//!
//! `cargo bench -p candle-rocm --bench all_reduce -- --warm-up-time 1 --measurement-time 2`
//! (`HIP_PLATFORM=nvidia` on NVIDIA GPUs, where NCCL stands in for RCCL); beside it, in the
//! same run, `python3 crates/candle-rocm/benches/all_reduce_torch.py` (PyTorch's NCCL
//! all-reduce of the same size).

#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::time::{Duration, Instant};

use candle_core::backend::BackendDevice;
use candle_core::{DType, Layout, Shape};
use candle_rocm::collective::{CommConfig, Group, ReduceOp, RocmComm};
use candle_rocm::{RocmDevice, RocmStorage, RocmStorageSlice};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rccl_safe::sys::rccl as sys;

/// The buffer size (bytes), 256 MiB unless `ALL_REDUCE_MIB` says otherwise.
fn bytes() -> usize {
    std::env::var("ALL_REDUCE_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(256)
        << 20
}

/// One rank count's setup: a communicator, a bf16 buffer and its layout per device.
struct Ranks {
    comms: Vec<RocmComm>,
    bufs: Vec<RocmStorage>,
    layout: Layout,
}

impl Ranks {
    fn new(devices: &[RocmDevice], elems: usize) -> Result<Ranks, String> {
        let comms = RocmComm::init_all(devices, CommConfig::default())
            .map_err(|e| format!("RocmComm::init_all on {} GPUs: {e}", devices.len()))?;
        let shape = Shape::from(elems);
        let bufs = devices
            .iter()
            .map(|d| d.zeros_impl(&shape, DType::BF16))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("allocating {elems} bf16 per GPU: {e}"))?;
        Ok(Ranks {
            comms,
            bufs,
            layout: Layout::contiguous(shape),
        })
    }

    fn sync(&self) {
        for c in &self.comms {
            c.device()
                .stream()
                .synchronize()
                .expect("stream synchronize");
        }
    }

    /// `ncclAllReduce` on the raw handles, one per rank, in one group.
    fn direct(&mut self) {
        let lib = rccl_safe::library().expect("NCCL/RCCL");
        let table = lib.table();
        let start = table.ncclGroupStart.as_ref().expect("ncclGroupStart");
        let end = table.ncclGroupEnd.as_ref().expect("ncclGroupEnd");
        let all_reduce = table.ncclAllReduce.as_ref().expect("ncclAllReduce");
        // SAFETY: no arguments.
        assert_eq!(unsafe { start() }, 0, "ncclGroupStart");
        for (comm, buf) in self.comms.iter().zip(&mut self.bufs) {
            let RocmStorageSlice::BF16(b) = buf.as_slice() else {
                unreachable!("the buffers are bf16")
            };
            let p = b.device_ptr().0 as usize as *mut std::ffi::c_void;
            // SAFETY: `p` is a live bf16 buffer of `b.len()` elements on the communicator's
            // device (it outlives the call's stream work: `sync` runs before it is freed); the
            // communicator is live; the stream is the device's stream.
            let st = unsafe {
                all_reduce(
                    p,
                    p,
                    b.len(),
                    sys::ncclBfloat16,
                    sys::ncclSum,
                    comm.comm().as_raw(),
                    comm.device().stream().as_raw().cast(),
                )
            };
            assert!(st == 0 || st == 7, "ncclAllReduce returned {st}"); // 7: in progress
        }
        // SAFETY: the group opened above.
        let st = unsafe { end() };
        assert!(st == 0 || st == 7, "ncclGroupEnd returned {st}");
    }

    /// `rccl_safe::Comm::all_reduce_in_place` per rank in one group.
    fn rccl_safe(&mut self) {
        let g = Group::start().expect("group");
        for (comm, buf) in self.comms.iter().zip(&mut self.bufs) {
            let RocmStorageSlice::BF16(b) = buf.as_slice_mut() else {
                unreachable!("the buffers are bf16")
            };
            comm.comm()
                .all_reduce_in_place(&mut b.as_mut_slice(), ReduceOp::Sum)
                .expect("all_reduce_in_place");
        }
        g.end().expect("group end");
    }

    /// `RocmComm::all_reduce_in_place` per rank in one group.
    fn candle_rocm(&mut self) {
        let g = Group::start().expect("group");
        for (comm, buf) in self.comms.iter().zip(&mut self.bufs) {
            comm.all_reduce_in_place(buf, &self.layout, ReduceOp::Sum)
                .expect("RocmComm::all_reduce_in_place");
        }
        g.end().expect("group end");
    }

    /// Wall time of `iters` calls of `way`, every stream idle before and after.
    fn time(&mut self, way: Way, iters: u64) -> Duration {
        self.sync();
        let t = Instant::now();
        for _ in 0..iters {
            way.run(self);
        }
        self.sync();
        t.elapsed()
    }
}

#[derive(Clone, Copy)]
enum Way {
    Direct,
    RcclSafe,
    CandleRocm,
}

impl Way {
    const ALL: [Way; 3] = [Way::Direct, Way::RcclSafe, Way::CandleRocm];

    fn name(self) -> &'static str {
        match self {
            Way::Direct => "nccl",
            Way::RcclSafe => "rccl-safe",
            Way::CandleRocm => "candle-rocm",
        }
    }

    fn run(self, r: &mut Ranks) {
        match self {
            Way::Direct => r.direct(),
            Way::RcclSafe => r.rccl_safe(),
            Way::CandleRocm => r.candle_rocm(),
        }
    }
}

/// The rank counts this machine allows: 1, 2, 4, 8 up to its GPU count.
fn rank_counts() -> Option<usize> {
    match hip_core::device_count() {
        Ok(n) if n > 0 => Some(n),
        Ok(_) => {
            eprintln!("all_reduce bench needs a GPU: none found");
            None
        }
        Err(e) => {
            eprintln!("all_reduce bench needs a GPU: {e}");
            None
        }
    }
}

fn bench(c: &mut Criterion) {
    let Some(gpus) = rank_counts() else {
        return;
    };
    let bytes = bytes();
    let elems = bytes / 2;
    let devices: Vec<RocmDevice> = match (0..gpus).map(RocmDevice::new).collect() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("all_reduce bench: opening the GPUs: {e}");
            return;
        }
    };
    let mut summary = Vec::new();
    for n in [1usize, 2, 4, 8].into_iter().filter(|&n| n <= gpus) {
        let mut ranks = match Ranks::new(&devices[..n], elems) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("all_reduce bench, {n} GPUs: {e}");
                continue;
            }
        };
        let mut group = c.benchmark_group(format!("all_reduce_bf16_{}MiB/{n}gpu", bytes >> 20));
        group.throughput(Throughput::Bytes(bytes as u64));
        for way in Way::ALL {
            group.bench_function(way.name(), |b| {
                b.iter_custom(|iters| ranks.time(way, iters))
            });
        }
        group.finish();

        // The summary: the best of 5 rounds of 10 calls per way, the ways interleaved so that
        // clock or thermal drift hits each alike.
        let mut best = [Duration::MAX; 3];
        for _ in 0..5 {
            for (i, way) in Way::ALL.into_iter().enumerate() {
                best[i] = best[i].min(ranks.time(way, 10) / 10);
            }
        }
        let bus = |t: Duration| {
            let alg = bytes as f64 / t.as_secs_f64() / 1e9;
            (alg, alg * 2.0 * (n as f64 - 1.0) / n as f64)
        };
        let mut line = format!("all_reduce bf16 {} MiB, {n} GPU(s):", bytes >> 20);
        for (i, way) in Way::ALL.into_iter().enumerate() {
            let (alg, busbw) = bus(best[i]);
            line += &format!(
                " {} {:.3} ms (algbw {alg:.1} GB/s, busbw {busbw:.1} GB/s);",
                way.name(),
                best[i].as_secs_f64() * 1e3
            );
        }
        for i in 1..3 {
            line += &format!(
                " {} costs {:+.2}% vs nccl;",
                Way::ALL[i].name(),
                (best[i].as_secs_f64() / best[0].as_secs_f64() - 1.0) * 100.0
            );
        }
        summary.push(line);
    }
    for line in summary {
        println!("{line}");
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
