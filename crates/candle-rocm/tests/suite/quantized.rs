//! Quantized GGML tensors on the GPU ([`QRocmStorage`]), against candle's CPU quantized path on
//! the same blocks (a module of tests/conformance.rs):
//!
//! * dequantize (to f32, f16, bf16) is bit-identical to the CPU's, for every `GgmlDType`;
//! * `matmul_t` (matrix-vector up to 8 rows, dequantize + GEMM above), every block type, m in {1,
//!   2, 3, 8, 9, 64, 511}, odd n, k multiples of 32 and 256, batched, offset and transposed
//!   activations, f32/f16/bf16. The float paths (dequantize + GEMM, the float matrix-vector kernel)
//!   are judged against an f64 evaluation of the dequantized weights times the activations: their
//!   error must stay within the CPU's own error against that reference (plus the rounding of the
//!   output dtype). The integer matrix-vector kernel (8-bit activations) is judged against an f64
//!   evaluation of the dequantized weights times the activations rounded exactly as it defines
//!   them: its error must stay within f32 summation error of that reference; the prefill's chunk
//!   plans (one row or a few rows per chunk, one stream or overlapped on the side stream, a last
//!   partial chunk) give the same accuracy;
//! * embedding rows and the indexed mixture-of-experts product against f64 references, with
//!   out-of-range ids reported as typed errors;
//! * bad input (partial blocks, shapes that disagree, unsupported dtypes) is a typed error.

use super::*;
use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{Device, Module, Tensor};
use candle_rocm::{QRocmStorage, QuantizedGemmPlan, QuantizedMatvec};

const ALL_TYPES: [GgmlDType; 15] = [
    GgmlDType::F32,
    GgmlDType::F16,
    GgmlDType::BF16,
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q8_1,
    GgmlDType::Q2K,
    GgmlDType::Q3K,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
    GgmlDType::Q8K,
];

/// The block types (what `QMatMul` keeps quantized).
fn block_types() -> Vec<GgmlDType> {
    ALL_TYPES[3..].to_vec()
}

fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect()
}

/// A CPU QTensor of `dtype` quantized from seeded random values, its blocks on the GPU.
fn quantized_pair(
    dev: &RocmDevice,
    dtype: GgmlDType,
    dims: &[usize],
    seed: u64,
) -> (QTensor, QRocmStorage) {
    let n: usize = dims.iter().product();
    let t = Tensor::from_vec(random_f32(n, seed), dims, &Device::Cpu).unwrap();
    let q = QTensor::quantize(&t, dtype).unwrap();
    let data = q.data().unwrap();
    let g = QRocmStorage::from_blocks(dev, dtype, &data).unwrap();
    (q, g)
}

fn bits(s: &CpuStorage) -> Vec<u32> {
    match s {
        CpuStorage::F32(v) => v.iter().map(|x| x.to_bits()).collect(),
        CpuStorage::F16(v) => v.iter().map(|x| x.to_bits() as u32).collect(),
        CpuStorage::BF16(v) => v.iter().map(|x| x.to_bits() as u32).collect(),
        other => panic!("unexpected dtype {:?}", other.dtype()),
    }
}

#[test]
#[ignore = "needs a GPU"]
fn dequantize_is_bit_exact_for_every_type_and_output_dtype() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let dims = [3usize, 512];
    for dtype in ALL_TYPES {
        let seed = case_seed(base_seed(), &["dequantize", &format!("{dtype:?}")]);
        let (q, g) = quantized_pair(&dev, dtype, &dims, seed);
        assert_eq!(g.storage_size_in_bytes(), q.storage_size_in_bytes());
        assert_eq!(
            g.data().unwrap(),
            q.data().unwrap().to_vec(),
            "{dtype:?} blocks"
        );
        let want = q.dequantize(&Device::Cpu).unwrap();
        for out in [DType::F32, DType::F16, DType::BF16] {
            // Poisoned output memory: an element the kernel forgets shows as NaN.
            drop(dev.storage_from_slice(&vec![0xFFu8; 3 * 512 * 4]).unwrap());
            let got = g
                .dequantize(3 * 512, out)
                .unwrap()
                .to_cpu_storage()
                .unwrap();
            let want = want.to_dtype(out).unwrap().flatten_all().unwrap();
            let want = match out {
                DType::F32 => CpuStorage::F32(want.to_vec1().unwrap()),
                DType::F16 => CpuStorage::F16(want.to_vec1().unwrap()),
                _ => CpuStorage::BF16(want.to_vec1().unwrap()),
            };
            assert_eq!(
                bits(&got),
                bits(&want),
                "dequantize {dtype:?} -> {out:?} (seed {seed:#x})"
            );
        }
    }
}

/// The kernel-level block type of a `GgmlDType` with blocks.
fn quant_type(dtype: GgmlDType) -> rocm_kernels::quantized::QuantType {
    use rocm_kernels::quantized::QuantType as Q;
    match dtype {
        GgmlDType::Q4_0 => Q::Q4_0,
        GgmlDType::Q4_1 => Q::Q4_1,
        GgmlDType::Q5_0 => Q::Q5_0,
        GgmlDType::Q5_1 => Q::Q5_1,
        GgmlDType::Q8_0 => Q::Q8_0,
        GgmlDType::Q8_1 => Q::Q8_1,
        GgmlDType::Q2K => Q::Q2K,
        GgmlDType::Q3K => Q::Q3K,
        GgmlDType::Q4K => Q::Q4K,
        GgmlDType::Q5K => Q::Q5K,
        GgmlDType::Q6K => Q::Q6K,
        GgmlDType::Q8K => Q::Q8K,
        other => panic!("{other:?} has no blocks"),
    }
}

/// Dequantizes `src` (whole blocks of `qt`) into a poisoned buffer of `len + 8` elements of `T`
/// through its first `len`, and returns those `len` after checking that the 8 after them were
/// not written.
fn dequantize_guarded<T: rocm_kernels::KernelDType + KernelDTypeBits>(
    s: &hip_core::Stream,
    qt: rocm_kernels::quantized::QuantType,
    src: &hip_core::DeviceSlice<'_, u8>,
    len: usize,
) -> Vec<T> {
    let mut out = s.alloc::<T>(len + 8).unwrap();
    out.as_mut_slice().memset_async(0xFF).unwrap();
    rocm_kernels::quantized::dequantize(s, qt, src, &mut out.slice_mut(0..len).unwrap()).unwrap();
    let mut got = out.to_host_vec().unwrap();
    let tail = got.split_off(len);
    assert!(
        tail.iter().all(|v| v.bits() == T::POISON),
        "{qt:?}: written past the destination"
    );
    got
}

/// The bits of an output element, and those of a 0xFF-poisoned one.
trait KernelDTypeBits {
    const POISON: u32;
    fn bits(&self) -> u32;
}
impl KernelDTypeBits for f32 {
    const POISON: u32 = u32::MAX;
    fn bits(&self) -> u32 {
        self.to_bits()
    }
}
impl KernelDTypeBits for f16 {
    const POISON: u32 = 0xFFFF;
    fn bits(&self) -> u32 {
        self.to_bits() as u32
    }
}

/// The dequantization kernels go a tile of whole blocks at a time through shared memory: many
/// tiles with a partial last one, starting at block offsets whose distance from a 16-byte
/// boundary varies (a chunk of a prefill starts at any row), bit-exact against the CPU's
/// dequantization of the same blocks, nothing written past the destination; a start between
/// blocks' natural alignment, or a destination that 16-byte stores cannot write, is a typed
/// error.
#[test]
#[ignore = "needs a GPU"]
fn dequantize_spans_tiles_from_any_block_offset() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let s = dev.stream();
    // 52480 elements: 205 blocks of 256 or 1640 of 32, 2.1 to 8.5 tiles of every type.
    let dims = [41usize, 1280];
    let n: usize = dims.iter().product();
    for dtype in block_types() {
        let qt = quant_type(dtype);
        let (blocks, tile) = (
            n / qt.block_elems(),
            rocm_kernels::quantized::dequantize_tile_blocks(qt),
        );
        assert!(
            blocks > 2 * tile && blocks % tile != 0,
            "{dtype:?}: {blocks} blocks, tiles of {tile}"
        );
        let seed = case_seed(base_seed(), &["dequantize tiles", &format!("{dtype:?}")]);
        let (q, g) = quantized_pair(&dev, dtype, &dims, seed);
        let want: Vec<f32> = q
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let (qk, bytes) = (qt.block_elems(), qt.block_bytes());
        for first in [0usize, 1, 3, 7, 13] {
            let src = g.blocks().slice(first * bytes..).unwrap();
            let len = n - first * qk;
            let got = dequantize_guarded::<f32>(s, qt, &src, len);
            let bad = (0..len).find(|&i| got[i].to_bits() != want[first * qk + i].to_bits());
            assert!(
                bad.is_none(),
                "dequantize {dtype:?} from block {first}: element {bad:?} differs (seed {seed:#x})"
            );
            let got = dequantize_guarded::<f16>(s, qt, &src, len);
            let bad = (0..len)
                .find(|&i| got[i].to_bits() != f16::from_f32(want[first * qk + i]).to_bits());
            assert!(
                bad.is_none(),
                "{dtype:?} -> f16 from block {first}: {bad:?}"
            );
        }
        // An odd start is no block's; a destination 4 bytes into a buffer is not 16-byte aligned.
        let src = g.blocks().slice(1..1 + bytes).unwrap();
        let mut out = s.alloc::<f32>(qk + 1).unwrap();
        let err =
            rocm_kernels::quantized::dequantize(s, qt, &src, &mut out.slice_mut(0..qk).unwrap())
                .unwrap_err();
        assert!(
            err.to_string().contains("blocks must start"),
            "{dtype:?}: {err}"
        );
        let src = g.blocks().slice(0..bytes).unwrap();
        let err = rocm_kernels::quantized::dequantize(
            s,
            qt,
            &src,
            &mut out.slice_mut(1..qk + 1).unwrap(),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("the destination must start"),
            "{dtype:?}: {err}"
        );
    }
}

/// More tiles than the dequantization launches blocks for the 256-element types
/// (`dequantize_resident_blocks`): each block strides over several, loading the next tile while
/// it decodes the current one. 61 random blocks repeated (quantizing millions of values on the
/// host would dominate the test; 61 is prime, so a tile never holds the same bytes as the tile a
/// stride before it, whose stride is a multiple of 8 blocks), from block 0 and from block 1
/// (Q3K and Q6K then start 2 bytes past a 16-byte boundary), bit-exact against the CPU's
/// dequantization of the 61, nothing written past the destination.
#[test]
#[ignore = "needs a GPU"]
fn dequantize_strides_over_more_tiles_than_blocks() {
    use rocm_kernels::quantized::{dequantize_resident_blocks, dequantize_tile_blocks};
    const PERIOD: usize = 61;
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let s = dev.stream();
    for dtype in [GgmlDType::Q3K, GgmlDType::Q4K, GgmlDType::Q6K] {
        let qt = quant_type(dtype);
        let (qk, bytes) = (qt.block_elems(), qt.block_bytes());
        let seed = case_seed(base_seed(), &["dequantize strides", &format!("{dtype:?}")]);
        let (q, _) = quantized_pair(&dev, dtype, &[PERIOD * qk], seed);
        let base_bytes = q.data().unwrap().to_vec();
        let base: Vec<f32> = q.dequantize(&Device::Cpu).unwrap().to_vec1().unwrap();
        // Two rounds of tiles for every block, a third for some, and a partial last tile.
        let tile = dequantize_tile_blocks(qt);
        let n_blocks = (2 * dequantize_resident_blocks(s) + 7) * tile + 5;
        let data: Vec<u8> = base_bytes
            .iter()
            .copied()
            .cycle()
            .take(n_blocks * bytes)
            .collect();
        let g = QRocmStorage::from_blocks(&dev, dtype, &data).unwrap();
        for first in [0usize, 1] {
            let src = g.blocks().slice(first * bytes..).unwrap();
            let len = (n_blocks - first) * qk;
            let got = dequantize_guarded::<f32>(s, qt, &src, len);
            let bad = (0..len)
                .find(|&i| got[i].to_bits() != base[(first * qk + i) % (PERIOD * qk)].to_bits());
            assert!(
                bad.is_none(),
                "dequantize {dtype:?} of {n_blocks} blocks from block {first}: element {bad:?} \
                 differs (seed {seed:#x})"
            );
        }
    }
}

/// `x (m, k)` (f64) times the dequantized `(n, k)` weights, in f64.
fn reference_matmul(x: &[f64], w: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for r in 0..m {
        for c in 0..n {
            let mut s = 0f64;
            for j in 0..k {
                s += x[r * k + j] * w[c * k + j];
            }
            out[r * n + c] = s;
        }
    }
    out
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(
            0.0,
            |m, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
        )
}

fn tensor_f64(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// The rounding allowance of an output in `dtype` with magnitudes up to `scale`.
fn output_rounding(dtype: DType, scale: f64) -> f64 {
    let eps = match dtype {
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        _ => 1.6e-2,
    };
    eps * scale.max(1.0)
}

/// The activations as the integer matrix-vector kernel rounds them, per 32-element block:
/// `d = amax / 127`, `x' = d * rint(x * (127 / amax))` (f32 arithmetic, ties to even; 0 where
/// amax = 0).
fn rounded_activations(x: &[f64]) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for block in x.chunks(32) {
        let v: Vec<f32> = block.iter().map(|&e| e as f32).collect();
        let amax = v.iter().fold(0f32, |a, e| a.max(e.abs()));
        let d = amax / 127.0;
        let id = if amax == 0.0 { 0.0 } else { 127.0 / amax };
        out.extend(v.iter().map(|&e| (d * (e * id).round_ties_even()) as f64));
    }
    out
}

/// Whether a matmul of `m` rows on `dev` takes the integer matrix-vector kernel.
fn takes_int_matvec(dev: &RocmDevice, dtype: GgmlDType, m: usize) -> bool {
    let int_type = !matches!(
        dtype,
        GgmlDType::Q8K | GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16
    );
    m <= 8 && int_type && dev.quantized_matvec().rounds_activations()
}

/// One matmul case: `x` of dims `(.., k)` in `dtype` with `layout`, against the weights.
#[allow(clippy::too_many_arguments)]
fn check_matmul(
    dev: &RocmDevice,
    label: &str,
    q: &QTensor,
    g: &QRocmStorage,
    x_host: &Tensor,
    layout: &Layout,
    storage: &CpuStorage,
) {
    let (n, k) = q.shape().dims2().unwrap();
    let dtype = x_host.dtype();
    let m = x_host.elem_count() / k;
    // Reference: f64 of the CPU's dequantized weights times the activations as given.
    let w = tensor_f64(&q.dequantize(&Device::Cpu).unwrap());
    let x = tensor_f64(x_host);
    let want = reference_matmul(&x, &w, m, n, k);
    let scale = want.iter().fold(0f64, |a, v| a.max(v.abs()));
    // The CPU's own result (QMatMul over the same blocks, contiguous activations).
    let data = q.data().unwrap();
    let blocks = QStorage::from_data(data, &Device::Cpu, q.dtype()).unwrap();
    let cpu_q = QMatMul::from_qtensor(QTensor::new(blocks, (n, k)).unwrap()).unwrap();
    let cpu = cpu_q.forward(&x_host.contiguous().unwrap()).unwrap();
    let cpu_err = max_abs_diff(&tensor_f64(&cpu), &want);
    // The GPU, on the given layout of the uploaded storage.
    let xs = dev.storage_from_cpu_storage(storage).unwrap();
    drop(dev.storage_from_slice(&vec![0xFFu8; m * n * 4]).unwrap());
    let (out, shape) = g.matmul_t(q.shape(), &xs, layout).unwrap();
    let mut want_dims = x_host.dims().to_vec();
    *want_dims.last_mut().unwrap() = n;
    assert_eq!(shape.dims(), want_dims.as_slice(), "{label}: output shape");
    assert_eq!(out.dtype(), dtype, "{label}: output dtype");
    let got = values_f64(&out.to_cpu_storage().unwrap());
    if takes_int_matvec(dev, q.dtype(), m) {
        // The kernel's definition: the dequantized weights times the rounded activations, each
        // output within f32 summation error of it (relative to the sum of |terms|).
        let xr = rounded_activations(&x);
        let want_r = reference_matmul(&xr, &w, m, n, k);
        for r in 0..m {
            for c in 0..n {
                let i = r * n + c;
                let terms: f64 = (0..k).map(|j| (xr[r * k + j] * w[c * k + j]).abs()).sum();
                let bound = 1e-5 * terms + output_rounding(dtype, scale);
                let err = (got[i] - want_r[i]).abs();
                assert!(
                    err <= bound,
                    "{label} (8-bit activations): row {r} column {c}: {} against {} (error \
                     {err:.3e}, bound {bound:.3e}; the error against the unrounded product is \
                     {:.3e}, the CPU's {cpu_err:.3e})",
                    got[i],
                    want_r[i],
                    (got[i] - want[i]).abs()
                );
            }
        }
        return;
    }
    let err = max_abs_diff(&got, &want);
    let bound = 1.5 * cpu_err + output_rounding(dtype, scale);
    assert!(
        err <= bound,
        "{label}: max error {err:.3e} against the f64 reference, the CPU's {cpu_err:.3e} (bound \
         {bound:.3e}, |ref| up to {scale:.3})"
    );
}

fn cpu_storage_of(t: &Tensor) -> CpuStorage {
    let t = t.flatten_all().unwrap();
    match t.dtype() {
        DType::F32 => CpuStorage::F32(t.to_vec1().unwrap()),
        DType::F16 => CpuStorage::F16(t.to_vec1().unwrap()),
        DType::BF16 => CpuStorage::BF16(t.to_vec1().unwrap()),
        d => panic!("unexpected {d:?}"),
    }
}

#[test]
#[ignore = "needs a GPU"]
fn matmul_matches_the_cpu_within_its_own_error() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let n = 37;
    for dtype in block_types() {
        let ks: &[usize] = if dtype.block_size() == 32 {
            &[96, 256]
        } else {
            &[256, 512]
        };
        for &k in ks {
            let seed = case_seed(
                base_seed(),
                &["qmatmul", &format!("{dtype:?}"), &k.to_string()],
            );
            let (q, g) = quantized_pair(&dev, dtype, &[n, k], seed);
            for xdtype in [DType::F32, DType::F16, DType::BF16] {
                // Every m of the proof at the longer k, the small ones at the other.
                let ms: &[usize] = if k == ks[ks.len() - 1] {
                    &[1, 2, 3, 8, 9, 64, 511]
                } else {
                    &[1, 3, 8, 9, 64]
                };
                for &m in ms {
                    let x =
                        Tensor::from_vec(random_f32(m * k, seed ^ m as u64), (m, k), &Device::Cpu)
                            .unwrap()
                            .to_dtype(xdtype)
                            .unwrap();
                    // Every matrix-vector kernel (the choice does not change m > 8: one run).
                    let kinds: &[QuantizedMatvec] = if m <= 8 {
                        &[
                            QuantizedMatvec::FloatActivations,
                            QuantizedMatvec::Int8RoundedOnce,
                            QuantizedMatvec::Int8Activations,
                        ]
                    } else {
                        &[QuantizedMatvec::Int8Activations]
                    };
                    for &kind in kinds {
                        dev.set_quantized_matvec(kind);
                        let label =
                            format!("{dtype:?} k={k} {xdtype:?} m={m} {kind:?} seed={seed:#x}");
                        check_matmul(
                            &dev,
                            &label,
                            &q,
                            &g,
                            &x,
                            &Layout::contiguous((m, k)),
                            &cpu_storage_of(&x),
                        );
                    }
                }
                // A block of zeros (amax = 0: the rounded block is zeros, no division by 0).
                let mut zv = random_f32(2 * k, seed ^ 55);
                zv[k..k + 32].fill(0.0);
                let x = Tensor::from_vec(zv, (2, k), &Device::Cpu)
                    .unwrap()
                    .to_dtype(xdtype)
                    .unwrap();
                check_matmul(
                    &dev,
                    &format!("{dtype:?} k={k} {xdtype:?} zero block"),
                    &q,
                    &g,
                    &x,
                    &Layout::contiguous((2, k)),
                    &cpu_storage_of(&x),
                );
                // Batched (2, 3, k), with a start offset of 5 elements (unaligned: copied).
                let b = Tensor::from_vec(random_f32(6 * k + 5, seed ^ 77), 6 * k + 5, &Device::Cpu)
                    .unwrap()
                    .to_dtype(xdtype)
                    .unwrap();
                let x = b.narrow(0, 5, 6 * k).unwrap().reshape((2, 3, k)).unwrap();
                check_matmul(
                    &dev,
                    &format!("{dtype:?} k={k} {xdtype:?} batched+offset"),
                    &q,
                    &g,
                    &x,
                    &Layout::contiguous_with_offset((2, 3, k), 5),
                    &cpu_storage_of(&b),
                );
                // Transposed activations: stored (k, m), used as (m, k); m = 4 and 20.
                for m in [4usize, 20] {
                    let s = Tensor::from_vec(random_f32(k * m, seed ^ 99), (k, m), &Device::Cpu)
                        .unwrap()
                        .to_dtype(xdtype)
                        .unwrap();
                    let x = s.t().unwrap();
                    let l = Layout::new(Shape::from((m, k)), vec![1, m], 0);
                    check_matmul(
                        &dev,
                        &format!("{dtype:?} k={k} {xdtype:?} transposed m={m}"),
                        &q,
                        &g,
                        &x,
                        &l,
                        &cpu_storage_of(&s),
                    );
                }
            }
        }
    }
}

/// The one-launch integer product over long rows: several stages per weight row with a partial
/// last one (a stage holds 16 to 128 blocks), more rows than teams in flight, m = 1, 2 and 5,
/// against the two-launch product and the f64 definition. One and two rows must take the
/// one-launch product (a `qmatvec_s8*` launch, no `qmatvec_i8_*`; Q6K takes it for one row
/// only), so that a change to its shared memory cannot move these cases to the other product
/// unnoticed; five rows of these lengths do not fit its shared memory on NVIDIA (48 KiB).
#[test]
#[ignore = "needs a GPU"]
fn staged_matvec_matches_over_many_stages_and_rows() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    for dtype in block_types() {
        if dtype == GgmlDType::Q8K {
            continue;
        }
        // 137 (32-element) or 33 (256-element) blocks per row: 2 or 3 stages, the last partial.
        let k = if dtype.block_size() == 32 {
            137 * 32
        } else {
            33 * 256
        };
        let n = if dtype.block_size() == 32 { 4099 } else { 1031 };
        let seed = case_seed(base_seed(), &["staged", &format!("{dtype:?}")]);
        let (q, g) = quantized_pair(&dev, dtype, &[n, k], seed);
        for (m, xdtype) in [(1usize, DType::F32), (2, DType::BF16), (5, DType::F16)] {
            let x = Tensor::from_vec(random_f32(m * k, seed ^ m as u64), (m, k), &Device::Cpu)
                .unwrap()
                .to_dtype(xdtype)
                .unwrap();
            let storage = cpu_storage_of(&x);
            let layout = Layout::contiguous((m, k));
            let xs = dev.storage_from_cpu_storage(&storage).unwrap();
            let mut outs = Vec::new();
            for kind in [
                QuantizedMatvec::Int8RoundedOnce,
                QuantizedMatvec::Int8Activations,
            ] {
                dev.set_quantized_matvec(kind);
                let label = format!("{dtype:?} ({n}, {k}) {xdtype:?} m={m} {kind:?}");
                check_matmul(&dev, &label, &q, &g, &x, &layout, &storage);
                let mut out = None;
                let launches =
                    launches_of(&mut || out = Some(g.matmul_t(q.shape(), &xs, &layout).unwrap().0));
                if kind == QuantizedMatvec::Int8Activations
                    && (m == 1 || (m == 2 && dtype != GgmlDType::Q6K))
                {
                    let named = |p: &str| launches.iter().any(|(name, _)| name.starts_with(p));
                    assert!(
                        named("qmatvec_s8") && !named("qmatvec_i8_"),
                        "{label}: the one-launch product expected, launches {launches:?}"
                    );
                }
                outs.push(values_f64(&out.unwrap().to_cpu_storage().unwrap()));
            }
            // The same rounded activations and block products: only the summation order of
            // the lanes' shares differs.
            let scale = outs[0].iter().fold(0f64, |a, v| a.max(v.abs()));
            let diff = max_abs_diff(&outs[0], &outs[1]);
            assert!(
                diff <= 1e-5 * scale + output_rounding(xdtype, scale),
                "{dtype:?} m={m} {xdtype:?}: one launch and two launches differ by {diff:.3e} \
                 (|y| up to {scale:.3})"
            );
        }
    }
    dev.set_quantized_matvec(QuantizedMatvec::Int8Activations);
}

/// The launches of the pre-rounded product (`qmatvec_s8r_m1_*`) that `f` makes on this thread.
fn s8r_launches(f: &mut dyn FnMut()) -> u64 {
    hip_core::launch_profile_start_this_thread(false);
    f();
    hip_core::launch_profile_stop()
        .iter()
        .filter(|p| p.name.starts_with("qmatvec_s8r_m1_"))
        .map(|p| p.launches)
        .sum::<u64>()
}

/// The bits of f32 values.
fn f32_bits(v: Vec<f32>) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The decode step's swiglu also rounds its one row for the integer product that multiplies it
/// next, on a device that has run such a product, and that product then reads the rounding
/// (one `qmatvec_s8r_m1_*` launch) instead of rounding the row in every block: the swiglu gives
/// the plain kernel's bits and the product the bits of the same product of a copy of the row
/// (rounded in every block), for every input dtype, several block types and (but for Q6K,
/// whose staged kernel takes shorter rows) a row long enough that the copy into shared memory
/// loops. The kernel alone, over several rows, gives the bits
/// of swiglu followed by `quantize_activations`.
#[test]
#[ignore = "needs a GPU"]
fn swiglu_rounding_reused_by_the_next_product_gives_the_same_bits() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    // Rows of 17664 (the copy into shared memory loops); Q6K's staged kernel takes rows up to
    // 14592 within 48 KiB of shared memory (its stages and padded activations), so 14336 there
    // (an 8B llama's down product).
    let n = 300;
    for (wtype, k) in [
        (GgmlDType::Q4_0, 69 * 256),
        (GgmlDType::Q4K, 69 * 256),
        (GgmlDType::Q5K, 69 * 256),
        (GgmlDType::Q6K, 56 * 256),
        (GgmlDType::Q8_0, 69 * 256),
    ] {
        let wide = Layout::contiguous((1, 2 * k));
        let seed = case_seed(base_seed(), &["swiglu rounding", &format!("{wtype:?}")]);
        let (q, g) = quantized_pair(&dev, wtype, &[n, k], seed);
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let label = format!("{wtype:?} ({n}, {k}) {dtype:?} (seed {seed:#x})");
            let x = Tensor::from_vec(random_f32(2 * k, seed ^ 7), (1, 2 * k), &Device::Cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let xs = dev.storage_from_cpu_storage(&cpu_storage_of(&x)).unwrap();
            // The plain swiglu (nothing is rounded where the float product is chosen), and
            // the integer product of a copy of its row: another buffer, rounded in every block.
            dev.set_quantized_matvec(QuantizedMatvec::FloatActivations);
            let (plain, shape) = xs.swiglu(&wide).unwrap();
            let plain = plain.to_cpu_storage().unwrap();
            dev.set_quantized_matvec(QuantizedMatvec::Int8Activations);
            let layout = Layout::contiguous(shape);
            let copy = dev.storage_from_cpu_storage(&plain).unwrap();
            let mut want = None;
            assert_eq!(
                s8r_launches(&mut || want = Some(g.matmul_t(q.shape(), &copy, &layout).unwrap().0)),
                0,
                "{label}: a copy of the row is rounded by the product"
            );
            // A product has run on this device: the swiglu rounds its row, the product reads it.
            let (h, _) = xs.swiglu(&wide).unwrap();
            assert_eq!(
                bits(&h.to_cpu_storage().unwrap()),
                bits(&plain),
                "{label}: swiglu"
            );
            let mut got = None;
            assert_eq!(
                s8r_launches(&mut || got = Some(g.matmul_t(q.shape(), &h, &layout).unwrap().0)),
                1,
                "{label}: the product reads the swiglu's rounding"
            );
            assert_eq!(
                bits(&got.unwrap().to_cpu_storage().unwrap()),
                bits(&want.unwrap().to_cpu_storage().unwrap()),
                "{label}: the product of the rounded row"
            );
        }
    }
    // The kernel over several rows: swiglu's bits, then quantize_activations' bytes and factors.
    let (rows, half) = (3usize, 96usize);
    let s = dev.stream();
    let xh = random_f32(rows * 2 * half, 11);
    let x = s.alloc_from_host(&xh).unwrap();
    let mut plain = s.alloc::<f32>(rows * half).unwrap();
    rocm_kernels::nn::swiglu(s, &x.as_slice(), &mut plain.as_mut_slice(), rows, half).unwrap();
    let (ql, dl) = rocm_kernels::quantized::matvec_int_scratch(rows, half);
    let (mut wq, mut wds) = (s.alloc::<u8>(ql).unwrap(), s.alloc::<f32>(dl).unwrap());
    rocm_kernels::quantized::quantize_activations(
        s,
        (rows, half),
        &plain.as_slice(),
        &mut wq.as_mut_slice(),
        &mut wds.as_mut_slice(),
    )
    .unwrap();
    let mut out = s.alloc::<f32>(rows * half).unwrap();
    let (mut gq, mut gds) = (s.alloc::<u8>(ql).unwrap(), s.alloc::<f32>(dl).unwrap());
    rocm_kernels::quantized::swiglu_rounded(
        s,
        &x.as_slice(),
        &mut out.as_mut_slice(),
        &mut gq.as_mut_slice(),
        &mut gds.as_mut_slice(),
        rows,
        half,
    )
    .unwrap();
    assert_eq!(
        f32_bits(out.to_host_vec().unwrap()),
        f32_bits(plain.to_host_vec().unwrap()),
        "swiglu_rounded over {rows} rows: the swiglu"
    );
    assert_eq!(
        gq.to_host_vec().unwrap(),
        wq.to_host_vec().unwrap(),
        "rounded bytes"
    );
    assert_eq!(
        f32_bits(gds.to_host_vec().unwrap()),
        f32_bits(wds.to_host_vec().unwrap()),
        "rounding factors"
    );
}

/// The integer matrix-vector product keeps the last rounded activations for the next product of
/// the same contents: reusing them gives bit-identical results to rounding afresh, and a write
/// into the activations or a new buffer in the freed one's memory is never mistaken for them.
/// The kernels `f` launches on this thread, with their launch counts.
fn launches_of(f: &mut dyn FnMut()) -> Vec<(String, u64)> {
    hip_core::launch_profile_start_this_thread(false);
    f();
    hip_core::launch_profile_stop()
        .into_iter()
        .map(|p| (p.name.to_string(), p.launches))
        .collect()
}

/// The decode step's residual add and rms_norm done by the product that reads the norm
/// (`QRocmStorage::rms_norm_matmul_t`: one `qmatvec_s8n_m1_*` launch and nothing else). The
/// sum has the bits of `add_rms_norm`'s; the product is judged against an f64 evaluation of
/// the dequantized weights times the rounded output of `add_rms_norm` (`rms_norm` without a
/// residual) run apart: within f32 summation error, plus one rounding step of two activations
/// (the fused norm sums its squares in another order, so its last bits, and then rarely an
/// 8-bit activation, may differ). Rows of one batch (4096) and of two (6144, read again for
/// the second pass), f32/f16/bf16, with and without a residual, several block types.
/// Operands the kernel does not take give `None`, for the caller to run the ops apart.
#[test]
#[ignore = "needs a GPU"]
fn norm_in_the_product_matches_the_norm_then_the_product() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let (n, eps) = (301usize, 1e-5f32);
    for wtype in [
        GgmlDType::Q4_0,
        GgmlDType::Q4K,
        GgmlDType::Q5K,
        GgmlDType::Q6K,
        GgmlDType::Q8_0,
    ] {
        for k in [4096usize, 6144] {
            let seed = case_seed(
                base_seed(),
                &["norm in the product", &format!("{wtype:?}"), &k.to_string()],
            );
            let (q, g) = quantized_pair(&dev, wtype, &[n, k], seed);
            let w = tensor_f64(&q.dequantize(&Device::Cpu).unwrap());
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                let host = |v: Vec<f32>, dims: &[usize]| {
                    Tensor::from_vec(v, dims, &Device::Cpu)
                        .unwrap()
                        .to_dtype(dtype)
                        .unwrap()
                };
                let scaled = random_f32(k, seed ^ 3)
                    .iter()
                    .map(|v| 1.0 + 0.5 * v)
                    .collect();
                let up = |t: &Tensor| dev.storage_from_cpu_storage(&cpu_storage_of(t)).unwrap();
                let xs = up(&host(random_f32(k, seed ^ 1), &[1, 1, k]));
                let rs = up(&host(
                    random_f32(k, seed ^ 2).iter().map(|v| 3.0 * v).collect(),
                    &[1, 1, k],
                ));
                let al = up(&host(scaled, &[k]));
                let (row, al_l) = (Layout::contiguous((1, 1, k)), Layout::contiguous(k));
                for with_residual in [true, false] {
                    let label = format!(
                        "{wtype:?} ({n}, {k}) {dtype:?}, residual {with_residual} (seed {seed:#x})"
                    );
                    // The ops apart: the norm (and sum), then its row's values.
                    let (want_sum, normed, normed_layout) = if with_residual {
                        let (both, _) = xs.add_rms_norm(&row, &rs, &row, &al, &al_l, eps).unwrap();
                        let all = both.to_cpu_storage().unwrap();
                        let sum = bits(&all)[..k].to_vec();
                        let l = Layout::contiguous_with_offset((1, 1, k), k);
                        (Some(sum), both, l)
                    } else {
                        (
                            None,
                            xs.rms_norm(&row, &al, &al_l, eps).unwrap(),
                            row.clone(),
                        )
                    };
                    let normed_values = values_f64(&normed.to_cpu_storage().unwrap());
                    let normed_values = &normed_values[normed_layout.start_offset()..][..k];
                    drop(dev.storage_from_slice(&vec![0xFFu8; 4 * (n + k)]).unwrap());
                    let mut got = None;
                    let residual = with_residual.then_some((&rs, &row));
                    let launches = launches_of(&mut || {
                        got = g
                            .rms_norm_matmul_t(q.shape(), (&xs, &row), residual, (&al, &al_l), eps)
                            .unwrap()
                    });
                    assert!(
                        launches.len() == 1
                            && launches[0].0.starts_with("qmatvec_s8n_m1_")
                            && launches[0].1 == 1,
                        "{label}: one fused launch expected, got {launches:?}"
                    );
                    let (sum, y, shape) = got.expect("the fused product takes one aligned row");
                    assert_eq!(shape.dims(), [1, 1, n], "{label}: product shape");
                    assert_eq!(y.dtype(), dtype, "{label}: product dtype");
                    assert_eq!(
                        sum.map(|s| bits(&s.to_cpu_storage().unwrap())),
                        want_sum,
                        "{label}: the sum x + residual"
                    );
                    // The product's definition on the norm run apart, and the allowance for
                    // two of its 8-bit activations one step apart.
                    let xr = rounded_activations(normed_values);
                    let want = reference_matmul(&xr, &w, 1, n, k);
                    let scale = want.iter().fold(0f64, |a, v| a.max(v.abs()));
                    let step = normed_values
                        .chunks(32)
                        .map(|b| b.iter().fold(0f64, |a, v| a.max(v.abs())) / 127.0)
                        .fold(0f64, f64::max);
                    let got = values_f64(&y.to_cpu_storage().unwrap());
                    for c in 0..n {
                        let wr = &w[c * k..(c + 1) * k];
                        let terms: f64 = (0..k).map(|j| (xr[j] * wr[j]).abs()).sum();
                        let wmax = wr.iter().fold(0f64, |a, v| a.max(v.abs()));
                        let bound =
                            1e-5 * terms + output_rounding(dtype, scale) + 2.0 * step * wmax;
                        let err = (got[c] - want[c]).abs();
                        assert!(
                            err <= bound,
                            "{label}: column {c}: {} against {} (error {err:.3e}, bound \
                             {bound:.3e})",
                            got[c],
                            want[c]
                        );
                    }
                }
            }
        }
    }
    // Operands the kernel does not take: None, and nothing launched.
    let k = 256;
    let (q, g) = quantized_pair(&dev, GgmlDType::Q4K, &[7, k], 5);
    let shape = q.shape().clone();
    let values = |len: usize| {
        let t = Tensor::from_vec(random_f32(len, 9), len, &Device::Cpu).unwrap();
        dev.storage_from_cpu_storage(&cpu_storage_of(&t)).unwrap()
    };
    let (x, x2, al) = (values(k + 1), values(2 * k), values(k));
    let (row, al_l) = (Layout::contiguous((1, k)), Layout::contiguous(k));
    let none = |label: &str, g: &QRocmStorage, shape: &Shape, x: &RocmStorage, l: &Layout| {
        let mut got = None;
        let launches = launches_of(&mut || {
            got = Some(
                g.rms_norm_matmul_t(shape, (x, l), Some((x, l)), (&al, &al_l), 1e-5)
                    .unwrap(),
            )
        });
        assert!(
            got.unwrap().is_none() && launches.is_empty(),
            "{label}: the ops apart expected, launches {launches:?}"
        );
    };
    none("two rows", &g, &shape, &x2, &Layout::contiguous((2, k)));
    none(
        "a row at an unaligned offset",
        &g,
        &shape,
        &x,
        &Layout::contiguous_with_offset((1, k), 1),
    );
    dev.set_norm_in_matvec(false);
    none("the switch off", &g, &shape, &x, &row);
    dev.set_norm_in_matvec(true);
    dev.set_quantized_matvec(QuantizedMatvec::FloatActivations);
    none("the float kernel", &g, &shape, &x, &row);
    dev.set_quantized_matvec(QuantizedMatvec::Int8Activations);
    let (q8k, g8k) = quantized_pair(&dev, GgmlDType::Q8K, &[7, k], 5);
    none("Q8K weights", &g8k, q8k.shape(), &x, &row);
    let f16_row = dev
        .storage_from_cpu_storage(&CpuStorage::F16(vec![f16::ONE; k]))
        .unwrap();
    none("an f16 row with f32 alpha", &g, &shape, &f16_row, &row);
}

/// A residual added by the one-row product (`QRocmStorage::matmul_t_add`: one
/// `qmatvec_s8_m1_*` launch, or one `qmatvec_s8r_m1_*` where a swiglu rounded the row): the
/// bits of `matmul_t` followed by candle's `add` (each output rounded to the dtype, added to
/// the residual, rounded again), for several block types and every input dtype. Operands the
/// kernel does not take give `None` and launch nothing.
#[test]
#[ignore = "needs a GPU"]
fn residual_added_by_the_product_gives_the_bits_of_the_product_then_add() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let n = 301;
    // The sum as candle's add computes it: both values as f32, added, rounded to the dtype.
    let add = |y: &CpuStorage, r: &CpuStorage| -> Vec<u32> {
        match (y, r) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => {
                a.iter().zip(b).map(|(x, y)| (x + y).to_bits()).collect()
            }
            (CpuStorage::F16(a), CpuStorage::F16(b)) => a
                .iter()
                .zip(b)
                .map(|(x, y)| f16::from_f32(x.to_f32() + y.to_f32()).to_bits() as u32)
                .collect(),
            (CpuStorage::BF16(a), CpuStorage::BF16(b)) => a
                .iter()
                .zip(b)
                .map(|(x, y)| bf16::from_f32(x.to_f32() + y.to_f32()).to_bits() as u32)
                .collect(),
            _ => panic!("unexpected dtypes"),
        }
    };
    for wtype in [
        GgmlDType::Q4_0,
        GgmlDType::Q4K,
        GgmlDType::Q6K,
        GgmlDType::Q8_0,
    ] {
        // A row the product rounds (4096), and a swiglu's rounded row (2 x 4096 in).
        for (k, through_swiglu) in [(4096usize, false), (4096, true)] {
            let seed = case_seed(
                base_seed(),
                &[
                    "residual add",
                    &format!("{wtype:?}"),
                    &through_swiglu.to_string(),
                ],
            );
            let (q, g) = quantized_pair(&dev, wtype, &[n, k], seed);
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                let label = format!(
                    "{wtype:?} ({n}, {k}) {dtype:?}, swiglu row {through_swiglu} (seed {seed:#x})"
                );
                let host = |v: Vec<f32>, len: usize| {
                    let t = Tensor::from_vec(v, (1, len), &Device::Cpu).unwrap();
                    let t = t.to_dtype(dtype).unwrap();
                    dev.storage_from_cpu_storage(&cpu_storage_of(&t)).unwrap()
                };
                let rs = host(random_f32(n, seed ^ 5).iter().map(|v| 4.0 * v).collect(), n);
                let row = Layout::contiguous((1, k));
                let x = if through_swiglu {
                    // After a one-row product on the device, the swiglu keeps its rounding.
                    let any = host(random_f32(k, seed ^ 8), k);
                    g.matmul_t(q.shape(), &any, &row).unwrap();
                    let wide = host(random_f32(2 * k, seed ^ 6), 2 * k);
                    wide.swiglu(&Layout::contiguous((1, 2 * k))).unwrap().0
                } else {
                    host(random_f32(k, seed ^ 7), k)
                };
                let (plain, _) = g.matmul_t(q.shape(), &x, &row).unwrap();
                let want = add(
                    &plain.to_cpu_storage().unwrap(),
                    &rs.to_cpu_storage().unwrap(),
                );
                let r_l = Layout::contiguous((1, n));
                let mut got = None;
                let launches = launches_of(&mut || {
                    got = g.matmul_t_add(q.shape(), (&x, &row), (&rs, &r_l)).unwrap()
                });
                let kernel = if through_swiglu {
                    "qmatvec_s8r_m1_"
                } else {
                    "qmatvec_s8_m1_"
                };
                assert!(
                    launches.len() == 1 && launches[0].0.starts_with(kernel) && launches[0].1 == 1,
                    "{label}: one {kernel}* launch expected, got {launches:?}"
                );
                let (sum, shape) = got.expect("the fused product takes one aligned row");
                assert_eq!(shape.dims(), [1, n], "{label}: shape");
                assert_eq!(
                    bits(&sum.to_cpu_storage().unwrap()),
                    want,
                    "{label}: the product then add"
                );
            }
        }
    }
    // Operands the kernel does not take: None, and nothing launched.
    let k = 256;
    let (q, g) = quantized_pair(&dev, GgmlDType::Q4K, &[7, k], 5);
    let values = |len: usize| {
        let t = Tensor::from_vec(random_f32(len, 9), len, &Device::Cpu).unwrap();
        dev.storage_from_cpu_storage(&cpu_storage_of(&t)).unwrap()
    };
    let (x, x2, r, r2) = (values(k), values(2 * k), values(7), values(14));
    let none = |label: &str, x: &RocmStorage, xl: &Layout, r: &RocmStorage, rl: &Layout| {
        let mut got = None;
        let launches =
            launches_of(&mut || got = Some(g.matmul_t_add(q.shape(), (x, xl), (r, rl)).unwrap()));
        assert!(
            got.unwrap().is_none() && launches.is_empty(),
            "{label}: the ops apart expected, launches {launches:?}"
        );
    };
    let (row, out) = (Layout::contiguous((1, k)), Layout::contiguous((1, 7)));
    none(
        "two rows",
        &x2,
        &Layout::contiguous((2, k)),
        &r2,
        &Layout::contiguous((2, 7)),
    );
    none(
        "a residual of another shape",
        &x,
        &row,
        &r2,
        &Layout::contiguous((1, 14)),
    );
    let f16_r = dev
        .storage_from_cpu_storage(&CpuStorage::F16(vec![f16::ONE; 7]))
        .unwrap();
    none("an f16 residual", &x, &row, &f16_r, &out);
    dev.set_norm_in_matvec(false);
    none("the switch off", &x, &row, &r, &out);
    dev.set_norm_in_matvec(true);
}

#[test]
#[ignore = "needs a GPU"]
fn rounded_activations_are_reused_only_for_the_same_contents() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    dev.set_quantized_matvec(QuantizedMatvec::Int8RoundedOnce);
    let (n, k, m) = (37, 256, 3);
    let seed = case_seed(base_seed(), &["rounded activations"]);
    let (q1, g1) = quantized_pair(&dev, GgmlDType::Q4_0, &[n, k], seed);
    let (_, g2) = quantized_pair(&dev, GgmlDType::Q4K, &[n, k], seed ^ 1);
    let layout = Layout::contiguous((m, k));
    let upload = |v: &[f32]| {
        dev.storage_from_cpu_storage(&CpuStorage::F32(v.to_vec()))
            .unwrap()
    };
    let bits_of = |s: &RocmStorage| bits(&s.to_cpu_storage().unwrap());
    // Each product on a buffer of its own: rounded afresh.
    let fresh = |g: &QRocmStorage, v: &[f32]| {
        bits_of(&g.matmul_t(q1.shape(), &upload(v), &layout).unwrap().0)
    };
    let (xa, xb) = (random_f32(m * k, seed ^ 2), random_f32(m * k, seed ^ 3));
    let (want_1a, want_2a, want_2b) = (fresh(&g1, &xa), fresh(&g2, &xa), fresh(&g2, &xb));
    assert_ne!(want_2a, want_2b);
    // Two products of the same buffer: the second reuses the first's rounding.
    let mut x = upload(&xa);
    assert_eq!(
        bits_of(&g1.matmul_t(q1.shape(), &x, &layout).unwrap().0),
        want_1a
    );
    assert_eq!(
        bits_of(&g2.matmul_t(q1.shape(), &x, &layout).unwrap().0),
        want_2a
    );
    // A write into the buffer: rounded again.
    upload(&xb)
        .copy2d(&mut x, 1, m * k, m * k, m * k, 0, 0)
        .unwrap();
    assert_eq!(
        bits_of(&g2.matmul_t(q1.shape(), &x, &layout).unwrap().0),
        want_2b
    );
    // A new buffer, likely in the freed one's memory, with other contents: rounded again.
    drop(x);
    let y = upload(&xa);
    assert_eq!(
        bits_of(&g2.matmul_t(q1.shape(), &y, &layout).unwrap().0),
        want_2a
    );
}

/// Prefill (m > 8) in chunks of rows: every plan gives the CPU's accuracy, for chunks of one
/// row, of a few rows with a partial last chunk, of the whole matrix, on one stream and
/// overlapped, contiguous, offset and transposed activations.
#[test]
#[ignore = "needs a GPU"]
fn prefill_chunk_plans_match_the_cpu() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let n = 37;
    for (dtype, k) in [
        (GgmlDType::Q4_0, 256),
        (GgmlDType::Q4K, 512),
        (GgmlDType::Q6K, 256),
        (GgmlDType::Q8_0, 96),
    ] {
        let seed = case_seed(base_seed(), &["qprefill", &format!("{dtype:?}")]);
        let (q, g) = quantized_pair(&dev, dtype, &[n, k], seed);
        for xdtype in [DType::F32, DType::F16, DType::BF16] {
            let esize = xdtype.size_in_bytes();
            for (rows, overlap) in [(1, true), (1, false), (5, true), (5, false), (0, true)] {
                dev.set_quantized_gemm_plan(QuantizedGemmPlan {
                    chunk_bytes: rows * k * esize,
                    overlap,
                });
                let plan = format!("{rows} rows per chunk, overlap {overlap}");
                for m in [9usize, 64] {
                    let x =
                        Tensor::from_vec(random_f32(m * k, seed ^ m as u64), (m, k), &Device::Cpu)
                            .unwrap()
                            .to_dtype(xdtype)
                            .unwrap();
                    check_matmul(
                        &dev,
                        &format!("{dtype:?} k={k} {xdtype:?} m={m} {plan}"),
                        &q,
                        &g,
                        &x,
                        &Layout::contiguous((m, k)),
                        &cpu_storage_of(&x),
                    );
                }
                // Batched (2, 6, k) at a start offset of 3 elements.
                let b =
                    Tensor::from_vec(random_f32(12 * k + 3, seed ^ 7), 12 * k + 3, &Device::Cpu)
                        .unwrap()
                        .to_dtype(xdtype)
                        .unwrap();
                let x = b.narrow(0, 3, 12 * k).unwrap().reshape((2, 6, k)).unwrap();
                check_matmul(
                    &dev,
                    &format!("{dtype:?} k={k} {xdtype:?} batched+offset {plan}"),
                    &q,
                    &g,
                    &x,
                    &Layout::contiguous_with_offset((2, 6, k), 3),
                    &cpu_storage_of(&b),
                );
                // Transposed activations (copied to rows first).
                let s = Tensor::from_vec(random_f32(k * 20, seed ^ 9), (k, 20), &Device::Cpu)
                    .unwrap()
                    .to_dtype(xdtype)
                    .unwrap();
                check_matmul(
                    &dev,
                    &format!("{dtype:?} k={k} {xdtype:?} transposed m=20 {plan}"),
                    &q,
                    &g,
                    &s.t().unwrap(),
                    &Layout::new(Shape::from((20, k)), vec![1, 20], 0),
                    &cpu_storage_of(&s),
                );
            }
        }
    }
    dev.set_quantized_gemm_plan(QuantizedGemmPlan::default());
}

#[test]
#[ignore = "needs a GPU"]
fn embedding_rows_match_and_out_of_range_ids_are_errors() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    for dtype in [
        GgmlDType::Q4_0,
        GgmlDType::Q4K,
        GgmlDType::Q6K,
        GgmlDType::F16,
    ] {
        let seed = case_seed(base_seed(), &["qembedding", &format!("{dtype:?}")]);
        let (rows, hidden) = (11usize, 256usize);
        let (q, g) = quantized_pair(&dev, dtype, &[rows, hidden], seed);
        let table = tensor_f64(&q.dequantize(&Device::Cpu).unwrap());
        let ids: Vec<u32> = vec![3, 0, 10, 3, 7];
        let ids_s = dev.storage_from_slice(&ids).unwrap();
        let out = g
            .embedding(q.shape(), &ids_s, &Layout::contiguous(ids.len()))
            .unwrap();
        let got = values_f64(&out.to_cpu_storage().unwrap());
        let want: Vec<f64> = ids
            .iter()
            .flat_map(|&i| table[i as usize * hidden..(i as usize + 1) * hidden].to_vec())
            .collect();
        assert_eq!(got, want, "embedding {dtype:?}");
        let bad = dev.storage_from_slice(&[1u32, 11]).unwrap();
        let r = g
            .embedding(q.shape(), &bad, &Layout::contiguous(2))
            .and_then(|s| s.to_cpu_storage());
        assert!(
            r.is_err(),
            "embedding {dtype:?}: id 11 of 11 rows must be an error"
        );
        // Later ops run normally.
        g.embedding(q.shape(), &ids_s, &Layout::contiguous(ids.len()))
            .unwrap()
            .to_cpu_storage()
            .unwrap();
    }
}

/// The indexed MoE product, both arithmetics: with float activations against the f64 product of
/// the dequantized weights; with 8-bit activations (the default: the staged one-row product per
/// (token, slot) pair, or grouped by expert for many pairs) against the f64 product of the
/// rounded activations, within f32 summation error, and (pairs alone) bit-equal to the one-row
/// product of the same row and expert; a decode step's 6 pairs and a prompt's 111. Every
/// integer block type (and Q8K, which takes the float kernel), x rows 1 and topk, f32/f16/bf16,
/// ids that repeat an expert; an expert id out of range is an error at the next read.
#[test]
#[ignore = "needs a GPU"]
fn indexed_moe_forward_matches_f64_and_reports_bad_expert_ids() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    let (experts, n, k) = (4usize, 29usize, 512usize);
    // A decode step's few pairs (each pair alone), and a prompt's many (grouped by expert:
    // 111 pairs, chunks of 8 that straddle experts, a last partial chunk).
    let many: Vec<u32> = (0..37 * 3)
        .map(|i| ((i * 7 + i / 5) % experts) as u32)
        .collect();
    let cases = [(3usize, 2usize, vec![2u32, 0, 3, 3, 1, 2]), (37, 3, many)];
    for (dtype, (batch, topk, ids)) in block_types()
        .into_iter()
        .flat_map(|d| cases.iter().cloned().map(move |c| (d, c)))
    {
        let seed = case_seed(base_seed(), &["qmoe", &format!("{dtype:?}")]);
        let (q, g) = quantized_pair(&dev, dtype, &[experts, n, k], seed);
        let w = tensor_f64(&q.dequantize(&Device::Cpu).unwrap());
        let grouped = rocm_kernels::quantized::moe_groups_pairs(
            dev.stream(),
            quant_type(dtype),
            (experts, k),
            batch * topk,
        );
        let ids_s = dev.storage_from_slice(&ids).unwrap();
        let ids_l = Layout::contiguous((batch, topk));
        for kind in [
            QuantizedMatvec::FloatActivations,
            QuantizedMatvec::Int8Activations,
        ] {
            dev.set_quantized_matvec(kind);
            let int8 = takes_int_matvec(&dev, dtype, 1);
            // Pairs grouped by expert (qmoe_s8g), where the 8-bit product takes them.
            let grouped = grouped && int8;
            for x_rows in [1usize, topk] {
                for xdtype in [DType::F32, DType::F16, DType::BF16] {
                    let label = format!(
                        "moe {dtype:?} {kind:?} {xdtype:?} batch={batch} topk={topk} \
                         x_rows={x_rows} grouped={grouped}"
                    );
                    let xt = Tensor::from_vec(
                        random_f32(batch * x_rows * k, seed ^ x_rows as u64),
                        (batch, x_rows, k),
                        &Device::Cpu,
                    )
                    .unwrap()
                    .to_dtype(xdtype)
                    .unwrap();
                    let x = tensor_f64(&xt);
                    let x = if int8 { rounded_activations(&x) } else { x };
                    let xs = dev.storage_from_cpu_storage(&cpu_storage_of(&xt)).unwrap();
                    let (out, shape) = g
                        .indexed_moe_forward(
                            q.shape(),
                            &xs,
                            &Layout::contiguous((batch, x_rows, k)),
                            &ids_s,
                            &ids_l,
                        )
                        .unwrap();
                    assert_eq!(shape.dims(), &[batch, topk, n]);
                    let got = values_f64(&out.to_cpu_storage().unwrap());
                    let mut want = vec![0f64; batch * topk * n];
                    let mut terms = vec![0f64; batch * topk * n];
                    for b in 0..batch {
                        for t in 0..topk {
                            let e = ids[b * topk + t] as usize;
                            let xr = b * x_rows + if x_rows == 1 { 0 } else { t };
                            for c in 0..n {
                                let i = (b * topk + t) * n + c;
                                for j in 0..k {
                                    let p = x[xr * k + j] * w[(e * n + c) * k + j];
                                    want[i] += p;
                                    terms[i] += p.abs();
                                }
                            }
                        }
                    }
                    let scale = want.iter().fold(0f64, |a, v| a.max(v.abs()));
                    for (i, ((&got, &want), &terms)) in
                        got.iter().zip(&want).zip(&terms).enumerate()
                    {
                        let bound = 1e-5 * terms + output_rounding(xdtype, scale);
                        assert!(
                            (got - want).abs() <= bound,
                            "{label}: output {i}: {got} against {want} (bound {bound:.3e})"
                        );
                    }
                    if int8 && x_rows == topk && !grouped {
                        // Each pair's row: the bits of the one-row product with its expert.
                        let data = q.data().unwrap();
                        let expert_bytes = data.len() / experts;
                        for (p, &e) in ids.iter().enumerate() {
                            let e = e as usize;
                            let blocks = &data[e * expert_bytes..(e + 1) * expert_bytes];
                            let ge = QRocmStorage::from_blocks(&dev, dtype, blocks).unwrap();
                            let (one, _) = ge
                                .matmul_t(
                                    &Shape::from((n, k)),
                                    &xs,
                                    &Layout::contiguous_with_offset((1, k), p * k),
                                )
                                .unwrap();
                            let one = values_f64(&one.to_cpu_storage().unwrap());
                            assert_eq!(
                                one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                                got[p * n..(p + 1) * n]
                                    .iter()
                                    .map(|v| v.to_bits())
                                    .collect::<Vec<_>>(),
                                "{label}: pair {p} (expert {e}) against the one-row product"
                            );
                        }
                    }
                }
            }
            let mut bad_ids = ids.clone();
            bad_ids[1] = experts as u32;
            let bad = dev.storage_from_slice(&bad_ids).unwrap();
            let xs = dev.storage_from_slice(&random_f32(batch * k, 5)).unwrap();
            let r = g
                .indexed_moe_forward(
                    q.shape(),
                    &xs,
                    &Layout::contiguous((batch, 1, k)),
                    &bad,
                    &ids_l,
                )
                .and_then(|(s, _)| s.to_cpu_storage());
            assert!(
                r.is_err(),
                "moe {dtype:?} {kind:?}: expert id 4 of 4 must be an error"
            );
        }
    }
    dev.set_quantized_matvec(QuantizedMatvec::default());
}

#[test]
#[ignore = "needs a GPU"]
fn bad_quantized_input_is_a_typed_error() {
    let dev = RocmDevice::new(0).expect("opening GPU 0");
    // A partial block.
    assert!(QRocmStorage::from_blocks(&dev, GgmlDType::Q4K, &[0u8; 143]).is_err());
    assert!(QRocmStorage::zeros(&dev, 100, GgmlDType::Q4_0).is_err());
    let (q, g) = quantized_pair(&dev, GgmlDType::Q4_0, &[8, 64], 1);
    // k disagrees with the weights.
    let x = dev.storage_from_slice(&random_f32(2 * 32, 2)).unwrap();
    assert!(g
        .matmul_t(q.shape(), &x, &Layout::contiguous((2, 32)))
        .is_err());
    // Unsupported activation dtype.
    let x64 = dev.storage_from_slice(&vec![0f64; 2 * 64]).unwrap();
    let e = g
        .matmul_t(q.shape(), &x64, &Layout::contiguous((2, 64)))
        .unwrap_err();
    assert!(e.to_string().contains("qmatmul"), "{e}");
    // Rank-1 activations.
    let x1 = dev.storage_from_slice(&random_f32(64, 3)).unwrap();
    assert!(g.matmul_t(q.shape(), &x1, &Layout::contiguous(64)).is_err());
    // Weights whose shape is not (n, k).
    assert!(g
        .matmul_t(&Shape::from((2, 4, 64)), &x, &Layout::contiguous((2, 64)))
        .is_err());
    // More elements than the blocks hold.
    assert!(g.dequantize(8 * 64 + 32, DType::F32).is_err());
    assert!(g.dequantize(8 * 64, DType::F64).is_err());
}
