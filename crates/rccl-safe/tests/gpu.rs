//! Tier 3: rccl-safe on a real GPU. Every test here is `#[ignore = "needs a GPU"]`; run with
//! `cargo test -p rccl-safe --test gpu -- --include-ignored --test-threads=1`
//! (`HIP_PLATFORM=nvidia` on an NVIDIA card, where the same API runs over NCCL;
//! `HIP_PLATFORM=amd` or nothing on AMD, over RCCL).
//!
//! One GPU allows one rank per communicator (NCCL refuses two ranks on one device), so the
//! collectives are checked on 1-rank communicators against host references: every reduction of
//! one rank is its input (avg divides by 1), an all-gather or reduce-scatter of one rank copies,
//! a broadcast from rank 0 copies, and a send to oneself arrives. What that proves: the call
//! wiring, the element type mapping (each type's size: a wrong NCCL type would copy too many or
//! too few bytes, which the poisoned elements around every output catch), the stream ordering
//! and the argument checks. Inputs come from a fixed-seed generator (the seed is in every
//! message); outputs are poisoned before each call and compared bit for bit. The multi-rank
//! arithmetic needs a machine with several GPUs (docs/multi-gpu.md).

use std::time::{Duration, Instant};

use half::{bf16, f16};
use hip_core::{Device, DeviceBuffer, Stream};
use rccl_safe::{group, Comm, CommConfig, Error, Group, NcclType, ReduceOp, UniqueId};

const SEED: u64 = 0x05ee_dcc1_2025;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// An element type under test: random values, a poison value, exact bit comparison.
trait El: NcclType + std::fmt::Debug {
    fn random(r: &mut Rng) -> Self;
    fn poison() -> Self;
    fn bits(self) -> u64;
}

macro_rules! int_el {
    ($($t:ty),*) => {$(
        impl El for $t {
            fn random(r: &mut Rng) -> Self { r.next() as $t }
            fn poison() -> Self { 0x5a as $t }
            fn bits(self) -> u64 { self as u64 }
        }
    )*};
}
int_el!(i8, u8, i32, u32, i64, u64);

impl El for f32 {
    fn random(r: &mut Rng) -> Self {
        (r.unit() * 100.0) as f32
    }
    fn poison() -> Self {
        f32::NAN
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}
impl El for f64 {
    fn random(r: &mut Rng) -> Self {
        r.unit() * 100.0
    }
    fn poison() -> Self {
        f64::NAN
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
}
impl El for f16 {
    fn random(r: &mut Rng) -> Self {
        f16::from_f64(r.unit() * 100.0)
    }
    fn poison() -> Self {
        f16::NAN
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}
impl El for bf16 {
    fn random(r: &mut Rng) -> Self {
        bf16::from_f64(r.unit() * 100.0)
    }
    fn poison() -> Self {
        bf16::NAN
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}

fn device() -> Device {
    Device::new(0).expect("a GPU is required for this test")
}

/// A 1-rank communicator on device 0 (non-blocking, with a timeout).
fn one_rank() -> Comm {
    let id = UniqueId::new().expect("ncclGetUniqueId");
    Comm::init_rank(
        device(),
        &id,
        0,
        1,
        CommConfig::with_timeout(Duration::from_secs(60)),
    )
    .expect("a 1-rank communicator")
}

fn random_vec<T: El>(n: usize, seed: u64) -> Vec<T> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| T::random(&mut r)).collect()
}

/// A poisoned buffer of `pad + n + pad` elements.
fn poisoned<T: El>(stream: &Stream, n: usize, pad: usize) -> DeviceBuffer<T> {
    stream
        .alloc_from_host(&vec![T::poison(); n + 2 * pad])
        .expect("a poisoned buffer")
}

/// `got` is `pad` poison, `want`, `pad` poison, bit for bit.
fn assert_padded<T: El>(got: &[T], want: &[T], pad: usize, what: &str) {
    assert_eq!(got.len(), want.len() + 2 * pad, "{what}: length");
    for (i, g) in got.iter().enumerate() {
        let expected = if i < pad || i >= pad + want.len() {
            T::poison()
        } else {
            want[i - pad]
        };
        assert_eq!(
            g.bits(),
            expected.bits(),
            "{what}: element {i} is {g:?}, expected {expected:?} (seed {SEED:#x}, pad {pad})"
        );
    }
}

const PAD: usize = 5;
/// Odd lengths: no vector width divides them.
const LENS: [usize; 3] = [1, 37, 4099];

fn check_all_reduce<T: El>(comm: &Comm) {
    let stream = comm.stream().clone();
    for (li, &n) in LENS.iter().enumerate() {
        for (oi, op) in ReduceOp::ALL.into_iter().enumerate() {
            let seed = SEED ^ ((li * 16 + oi) as u64);
            let host = random_vec::<T>(n, seed);
            let what = format!("all_reduce {} {} n={n}", op.name(), T::NAME);
            let send = stream.alloc_from_host(&host).unwrap();
            let mut recv = poisoned::<T>(&stream, n, PAD);
            comm.all_reduce(
                &send.as_slice(),
                &mut recv.slice_mut(PAD..PAD + n).unwrap(),
                op,
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_padded(&recv.to_host_vec().unwrap(), &host, PAD, &what);

            // In place, on a sub-slice of a poisoned buffer.
            let mut buf = poisoned::<T>(&stream, n, PAD);
            buf.slice_mut(PAD..PAD + n)
                .unwrap()
                .copy_from_host(&host)
                .unwrap();
            comm.all_reduce_in_place(&mut buf.slice_mut(PAD..PAD + n).unwrap(), op)
                .unwrap_or_else(|e| panic!("in-place {what}: {e}"));
            assert_padded(
                &buf.to_host_vec().unwrap(),
                &host,
                PAD,
                &format!("in-place {what}"),
            );
        }
    }
}

fn check_others<T: El>(comm: &Comm) {
    let stream = comm.stream().clone();
    for (li, &n) in LENS.iter().enumerate() {
        let seed = SEED ^ (0x100 + li as u64);
        let host = random_vec::<T>(n, seed);
        let send = stream.alloc_from_host(&host).unwrap();
        let name = T::NAME;

        let mut recv = poisoned::<T>(&stream, n, PAD);
        comm.all_gather(&send.as_slice(), &mut recv.slice_mut(PAD..PAD + n).unwrap())
            .unwrap();
        assert_padded(
            &recv.to_host_vec().unwrap(),
            &host,
            PAD,
            &format!("all_gather {name} n={n}"),
        );

        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg] {
            let mut recv = poisoned::<T>(&stream, n, PAD);
            comm.reduce_scatter(
                &send.as_slice(),
                &mut recv.slice_mut(PAD..PAD + n).unwrap(),
                op,
            )
            .unwrap();
            let what = format!("reduce_scatter {} {name} n={n}", op.name());
            assert_padded(&recv.to_host_vec().unwrap(), &host, PAD, &what);

            let mut recv = poisoned::<T>(&stream, n, PAD);
            comm.reduce(
                &send.as_slice(),
                Some(&mut recv.slice_mut(PAD..PAD + n).unwrap()),
                op,
                0,
            )
            .unwrap();
            let what = format!("reduce {} {name} n={n}", op.name());
            assert_padded(&recv.to_host_vec().unwrap(), &host, PAD, &what);
        }

        let mut recv = poisoned::<T>(&stream, n, PAD);
        comm.broadcast(
            Some(&send.as_slice()),
            &mut recv.slice_mut(PAD..PAD + n).unwrap(),
            0,
        )
        .unwrap();
        assert_padded(
            &recv.to_host_vec().unwrap(),
            &host,
            PAD,
            &format!("broadcast {name} n={n}"),
        );

        let mut buf = poisoned::<T>(&stream, n, PAD);
        buf.slice_mut(PAD..PAD + n)
            .unwrap()
            .copy_from_host(&host)
            .unwrap();
        comm.broadcast_in_place(&mut buf.slice_mut(PAD..PAD + n).unwrap(), 0)
            .unwrap();
        assert_padded(
            &buf.to_host_vec().unwrap(),
            &host,
            PAD,
            &format!("in-place broadcast {name} n={n}"),
        );

        // A send to oneself and the matching receive, in one group.
        let mut recv = poisoned::<T>(&stream, n, PAD);
        group(|| {
            comm.send(&send.as_slice(), 0)?;
            comm.recv(&mut recv.slice_mut(PAD..PAD + n).unwrap(), 0)
        })
        .unwrap_or_else(|e| panic!("send/recv to self {name} n={n}: {e}"));
        assert_padded(
            &recv.to_host_vec().unwrap(),
            &host,
            PAD,
            &format!("send/recv {name} n={n}"),
        );
    }
}

fn check_type<T: El>(comm: &Comm) {
    check_all_reduce::<T>(comm);
    check_others::<T>(comm);
    println!("{}: every collective matches the host reference", T::NAME);
}

#[test]
#[ignore = "needs a GPU"]
fn library_version_and_platform() {
    let lib = rccl_safe::library().expect("the collectives library");
    let version = lib.version().expect("ncclGetVersion");
    println!(
        "{} {version} on the {} platform (ncclCommInitRankConfig: {})",
        lib.name(),
        lib.platform(),
        lib.has("ncclCommInitRankConfig")
    );
    assert!(version.starts_with("2."), "{version}");
    let spec = match lib.platform() {
        hip_core::Platform::Amd => rccl_safe::library::rccl_spec(),
        hip_core::Platform::Nvidia => rccl_safe::library::nccl_spec(),
    };
    let first = spec
        .candidates()
        .into_iter()
        .find(|c| std::path::Path::new(c).exists());
    println!("first candidate on disk (the file opened): {first:?}");
}

#[test]
#[ignore = "needs a GPU"]
fn one_rank_communicator_reports_itself() {
    let comm = one_rank();
    assert_eq!((comm.rank(), comm.nranks()), (0, 1));
    assert_eq!(comm.query().unwrap(), (0, 1, 0));
    comm.check_async_error().unwrap();
    let non_blocking = rccl_safe::library().unwrap().has("ncclCommInitRankConfig");
    assert_eq!(comm.is_non_blocking(), non_blocking);
    let blocking = Comm::init_rank(
        device(),
        &UniqueId::new().unwrap(),
        0,
        1,
        CommConfig::blocking(),
    )
    .expect("a blocking 1-rank communicator");
    assert!(!blocking.is_non_blocking());
    assert_eq!(blocking.query().unwrap(), (0, 1, 0));
}

#[test]
#[ignore = "needs a GPU"]
fn every_collective_every_type() {
    let comm = one_rank();
    check_type::<f32>(&comm);
    check_type::<f64>(&comm);
    check_type::<f16>(&comm);
    check_type::<bf16>(&comm);
    check_type::<i8>(&comm);
    check_type::<u8>(&comm);
    check_type::<i32>(&comm);
    check_type::<u32>(&comm);
    check_type::<i64>(&comm);
    check_type::<u64>(&comm);
}

#[test]
#[ignore = "needs a GPU"]
fn blocking_communicator_runs_the_collectives_too() {
    let comm = Comm::init_rank(
        device(),
        &UniqueId::new().unwrap(),
        0,
        1,
        CommConfig::blocking(),
    )
    .unwrap();
    check_type::<f32>(&comm);
    check_type::<bf16>(&comm);
}

#[test]
#[ignore = "needs a GPU"]
fn init_all_and_a_group_of_one_device() {
    let comms = Comm::init_all(
        &[device()],
        CommConfig::with_timeout(Duration::from_secs(60)),
    )
    .expect("init_all");
    assert_eq!(comms.len(), 1);
    let host = random_vec::<f32>(1000, SEED);
    let mut b = comms[0].stream().alloc_from_host(&host).unwrap();
    group(|| {
        for c in &comms {
            c.all_reduce_in_place(&mut b.as_mut_slice(), ReduceOp::Sum)?;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(b.to_host_vec().unwrap(), host);
    // The explicit form, nested in another group (NCCL merges them).
    let outer = Group::start().unwrap();
    let inner = Group::start().unwrap();
    comms[0]
        .all_reduce_in_place(&mut b.as_mut_slice(), ReduceOp::Max)
        .unwrap();
    inner.end().unwrap();
    outer.end().unwrap();
    assert_eq!(b.to_host_vec().unwrap(), host);
}

/// Collectives queue work and return: no host synchronisation (hip-core's counter), and the
/// result is right once the stream is read.
#[test]
#[ignore = "needs a GPU"]
fn collectives_never_synchronise_the_host() {
    let comm = one_rank();
    let stream = comm.stream().clone();
    let host = random_vec::<f32>(1 << 20, SEED);
    let send = stream.alloc_from_host(&host).unwrap();
    let mut recv = stream.alloc::<f32>(1 << 20).unwrap();
    let mut gathered = stream.alloc::<f32>(1 << 20).unwrap();
    let before = hip_core::thread_sync_count();
    for _ in 0..10 {
        comm.all_reduce(&send.as_slice(), &mut recv.as_mut_slice(), ReduceOp::Sum)
            .unwrap();
        comm.all_gather(&recv.as_slice(), &mut gathered.as_mut_slice())
            .unwrap();
    }
    assert_eq!(
        hip_core::thread_sync_count(),
        before,
        "a collective synchronised the host"
    );
    assert_eq!(gathered.to_host_vec().unwrap(), host);
}

/// Buffers allocated on other streams: the collective waits for their queued work, and their
/// streams wait for the collective.
#[test]
#[ignore = "needs a GPU"]
fn buffers_of_other_streams_are_ordered() {
    let comm = one_rank();
    let dev = device();
    let a = dev.create_stream().unwrap();
    let b = dev.create_stream().unwrap();
    let n = 1 << 22;
    let host = random_vec::<f32>(n, SEED ^ 7);
    let src = a.alloc_from_host(&host).unwrap();
    // Queued on `a` right before the collective: a copy the all-reduce must wait for.
    let mut send = a.alloc::<f32>(n).unwrap();
    send.as_mut_slice()
        .copy_from_device(&src.as_slice())
        .unwrap();
    let mut recv = b.alloc::<f32>(n).unwrap();
    recv.as_mut_slice().memset_async(0xff).unwrap();
    comm.all_reduce(&send.as_slice(), &mut recv.as_mut_slice(), ReduceOp::Sum)
        .unwrap();
    // Read back on `b`'s order (to_host_vec waits for `b` only).
    assert_eq!(recv.to_host_vec().unwrap(), host);
}

#[test]
#[ignore = "needs a GPU"]
fn bad_arguments_are_typed_errors_before_the_library_is_called() {
    let comm = one_rank();
    let s = comm.stream().clone();
    let send = s.alloc_from_host(&[1.0f32; 8]).unwrap();
    let mut small = s.alloc::<f32>(7).unwrap();
    let mut big = s.alloc::<f32>(9).unwrap();
    let invalid = |r: rccl_safe::Result<()>, op: &str, needle: &str| match r {
        Err(Error::InvalidArgument { op: o, reason }) => {
            assert_eq!(o, op);
            assert!(reason.contains(needle), "{op}: {reason}");
        }
        other => panic!("{op}: expected InvalidArgument, got {other:?}"),
    };
    invalid(
        comm.all_reduce(&send.as_slice(), &mut small.as_mut_slice(), ReduceOp::Sum),
        "all_reduce",
        "holds 7 elements, the operation needs 8",
    );
    invalid(
        comm.all_gather(&send.as_slice(), &mut big.as_mut_slice()),
        "all_gather",
        "holds 9 elements, the operation needs 8",
    );
    invalid(
        comm.reduce_scatter(&send.as_slice(), &mut small.as_mut_slice(), ReduceOp::Sum),
        "reduce_scatter",
        "the send buffer holds 8 elements, the operation needs 7",
    );
    invalid(
        comm.broadcast(Some(&send.as_slice()), &mut small.as_mut_slice(), 0),
        "broadcast",
        "holds 8 elements, the operation needs 7",
    );
    invalid(
        comm.broadcast::<f32>(None, &mut small.as_mut_slice(), 0),
        "broadcast",
        "root rank must pass",
    );
    invalid(
        comm.broadcast(Some(&send.as_slice()), &mut big.as_mut_slice(), 1),
        "broadcast",
        "root 1 is not in 0..1",
    );
    invalid(
        comm.reduce(&send.as_slice(), None, ReduceOp::Sum, 0),
        "reduce",
        "root rank must pass a receive buffer",
    );
    invalid(
        comm.send(&send.as_slice(), 3),
        "send",
        "peer 3 is not in 0..1",
    );
    invalid(
        comm.recv(&mut small.as_mut_slice(), 1),
        "recv",
        "peer 1 is not in 0..1",
    );
    // Nothing was queued: the communicator is healthy and the buffers untouched.
    comm.check_async_error().unwrap();
    let mut ok = s.alloc::<f32>(8).unwrap();
    comm.all_reduce(&send.as_slice(), &mut ok.as_mut_slice(), ReduceOp::Sum)
        .unwrap();
    assert_eq!(ok.to_host_vec().unwrap(), vec![1.0; 8]);
    // Rank and size checks at init.
    let id = UniqueId::new().unwrap();
    invalid(
        Comm::init_rank(device(), &id, 2, 2, CommConfig::default()).map(|_| ()),
        "Comm::init_rank",
        "rank 2 is not in 0..2",
    );
    invalid(
        Comm::init_devices(
            &id,
            2,
            &[(device(), 0), (device(), 1)],
            CommConfig::default(),
        )
        .map(|_| ()),
        "Comm::init_devices",
        "appears twice",
    );
}

/// The child half of [`a_rank_that_never_joins_times_out`]: rank 0 of a 2-rank communicator
/// whose rank 1 never comes. Does nothing unless the parent started it.
#[test]
#[ignore = "needs a GPU"]
fn never_joining_peer_child() {
    if std::env::var_os("RCCL_SAFE_NEVER_JOINS_CHILD").is_none() {
        println!("run by a_rank_that_never_joins_times_out in a child process");
        return;
    }
    let id = UniqueId::new().unwrap();
    let timeout = Duration::from_secs(3);
    let start = Instant::now();
    let r = Comm::init_rank(device(), &id, 0, 2, CommConfig::with_timeout(timeout));
    let took = start.elapsed();
    match r {
        Err(e @ Error::Timeout { .. }) => {
            println!(
                "CHILD-RESULT timeout after {:.2} s: {e}",
                took.as_secs_f64()
            );
            assert!(
                took >= timeout && took < timeout + Duration::from_secs(5),
                "{took:?}"
            );
        }
        Err(e) if !rccl_safe::library().unwrap().has("ncclCommInitRankConfig") => {
            panic!("this library has no non-blocking init, and init failed: {e}")
        }
        other => panic!("expected a timeout, got {other:?} after {took:?}"),
    }
    // The device is still usable after the abort.
    let s = device().default_stream();
    let b = s.alloc_from_host(&[1u32, 2, 3]).unwrap();
    assert_eq!(b.to_host_vec().unwrap(), vec![1, 2, 3]);
    println!("CHILD-RESULT device usable after the abort");
}

/// A rank that never joins is a timeout error within a few seconds, not a hang. Runs the child
/// test above in a separate process (an aborted init may leave NCCL's bootstrap thread behind),
/// killing it if it hangs.
#[test]
#[ignore = "needs a GPU"]
fn a_rank_that_never_joins_times_out() {
    if !rccl_safe::library().unwrap().has("ncclCommInitRankConfig") {
        println!("this library has no ncclCommInitRankConfig (NCCL < 2.14): init cannot time out");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args([
            "--exact",
            "never_joining_peer_child",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RCCL_SAFE_NEVER_JOINS_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let limit = Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for line in text.lines().filter(|l| l.contains("CHILD-RESULT")) {
        println!("{line}");
    }
    let status = status.unwrap_or_else(|| panic!("the child hung for {limit:?}:\n{text}"));
    assert!(status.success(), "the child failed ({status}):\n{text}");
    assert!(text.contains("CHILD-RESULT timeout after"), "{text}");
    assert!(text.contains("device usable after the abort"), "{text}");
    println!("child exited after {:.2} s", start.elapsed().as_secs_f64());
}
