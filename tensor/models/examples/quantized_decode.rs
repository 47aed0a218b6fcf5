//! Decode throughput of a llama-3-8B-shaped quantized model on a device, against the bandwidth
//! roofline measured in the same run.
//!
//! The model: 32 layers, hidden 4096, MLP 14336, 32 heads / 8 key-value heads, vocabulary 128256,
//! matrices in Q4K and the output layer in Q6K (`--layers`, `--dtype`, `--output-dtype` change
//! them), with random weights: a few rows per matrix are quantized with Candle's CPU quantizer and
//! repeated to the full size (quantizing 8 billion values on the host would take far longer than
//! the run; repeated rows read as much memory as distinct ones). The GGUF is built in memory and
//! loaded with candle-transformers' `quantized_llama`.
//!
//! Reported, for batch 1 with the logits read back to the host after every token:
//! tokens/s; weight bytes per token (every matrix the forward pass multiplies, i.e. all but the
//! token embedding); the fraction of the roofline `bytes/token x tokens/s / copy bandwidth`
//! (the copy: a 1 GiB device-to-device tensor copy, read + write bytes); host time per token
//! (the forward call alone, which only queues work) beside the wall time per token; and kernel
//! launches per token (`hip_core::launch_count`; vendor-library launches inside a GEMM are not
//! counted), then the launches of one more token by kernel name (`hip_core::launch_profile_*`).
//!
//! `cargo run --release --example quantized_decode -- [--device rocm|cpu] [--layers N] [--tokens N]
//! [--host-profile N] [--matvec int8|int8-rounded-once|float] [--norm-in-matvec on|off]
//! [--overlap on|off]`
//! (`--host-profile`: sample the host over N more decode steps and print where its time goes;
//! `--norm-in-matvec off`: the residual adds and norms as launches of their own; `--overlap
//! off`: no overlapped launches, `hip_core::set_overlapped_launches`)

use std::collections::HashMap;
use std::io::Cursor;
use std::time::Instant;

use candle_core::quantized::{gguf_file, GgmlDType, QStorage, QTensor};
use candle_core::{DType, Device, Tensor};
use candle_rocm::RocmDeviceExt;
use candle_rocm_models::gguf_tools::{parse_ggml_dtype, RandomLlamaConfig};
use candle_transformers::models::quantized_llama::ModelWeights;

struct Args {
    device: String,
    layers: usize,
    tokens: usize,
    dtype: GgmlDType,
    output_dtype: GgmlDType,
    /// The quantized matrix-vector kernel on ROCm (`--matvec int8|int8-rounded-once|float`).
    matvec: candle_rocm::QuantizedMatvec,
    /// Decode steps to sample the host over (0: none).
    host_profile: usize,
    /// Whether the residual add and rms_norm run inside the product that reads them on ROCm
    /// (`--norm-in-matvec on|off`, `RocmDevice::set_norm_in_matvec`).
    norm_in_matvec: bool,
    /// Whether kernels written for it may start before the previous kernel ends (`--overlap
    /// on|off`, `hip_core::set_overlapped_launches`; NVIDIA sm_90+ only).
    overlap: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        device: "rocm".into(),
        layers: 32,
        tokens: 64,
        dtype: GgmlDType::Q4K,
        output_dtype: GgmlDType::Q6K,
        matvec: candle_rocm::QuantizedMatvec::default(),
        host_profile: 0,
        norm_in_matvec: true,
        overlap: hip_core::overlapped_launches(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--device" => a.device = v()?,
            "--layers" => a.layers = v()?.parse().map_err(|e| format!("--layers: {e}"))?,
            "--tokens" => a.tokens = v()?.parse().map_err(|e| format!("--tokens: {e}"))?,
            "--host-profile" => {
                a.host_profile = v()?.parse().map_err(|e| format!("--host-profile: {e}"))?
            }
            "--matvec" => {
                a.matvec = match v()?.as_str() {
                    "int8" => candle_rocm::QuantizedMatvec::Int8Activations,
                    "int8-rounded-once" => candle_rocm::QuantizedMatvec::Int8RoundedOnce,
                    "float" => candle_rocm::QuantizedMatvec::FloatActivations,
                    other => {
                        return Err(format!(
                            "--matvec {other}: expected int8, int8-rounded-once or float"
                        ))
                    }
                }
            }
            "--norm-in-matvec" => {
                a.norm_in_matvec = match v()?.as_str() {
                    "on" => true,
                    "off" => false,
                    other => return Err(format!("--norm-in-matvec {other}: expected on or off")),
                }
            }
            "--overlap" => {
                a.overlap = match v()?.as_str() {
                    "on" => true,
                    "off" => false,
                    other => return Err(format!("--overlap {other}: expected on or off")),
                }
            }
            "--dtype" => a.dtype = parse_ggml_dtype(&v()?).map_err(|e| e.to_string())?,
            "--output-dtype" => {
                a.output_dtype = parse_ggml_dtype(&v()?).map_err(|e| e.to_string())?
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

/// A `dims` QTensor of `dtype`: 32 quantized random rows repeated.
fn repeated(dims: &[usize], dtype: GgmlDType) -> candle_core::Result<QTensor> {
    let (rows, cols) = (dims[0], dims[1]);
    let sample_rows = rows.min(32);
    let base = Tensor::randn(
        0f32,
        1.0 / (cols as f32).sqrt(),
        (sample_rows, cols),
        &Device::Cpu,
    )?;
    let q = QTensor::quantize(&base, dtype)?;
    let data = q.data()?;
    let row_bytes = data.len() / sample_rows;
    let mut all = Vec::with_capacity(row_bytes * rows);
    while all.len() < row_bytes * rows {
        let take = (row_bytes * rows - all.len()).min(data.len());
        all.extend_from_slice(&data[..take]);
    }
    QTensor::new(QStorage::from_data(all.into(), &Device::Cpu, dtype)?, dims)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse()?;
    let device = match args.device.as_str() {
        "cpu" => Device::Cpu,
        "rocm" => {
            let device = Device::new_rocm(0)?;
            let rocm = device.as_rocm_device()?;
            rocm.set_quantized_matvec(args.matvec);
            rocm.set_norm_in_matvec(args.norm_in_matvec);
            hip_core::set_overlapped_launches(args.overlap);
            device
        }
        other => return Err(format!("unknown device {other}").into()),
    };
    let cfg = RandomLlamaConfig {
        vocab_size: 128256,
        hidden_size: 4096,
        intermediate_size: 14336,
        num_layers: args.layers,
        num_heads: 32,
        num_kv_heads: 8,
        context_length: 8192,
        rms_norm_eps: 1e-5,
        rope_freq_base: 500000.0,
        tie_embeddings: false,
    };
    let t0 = Instant::now();
    let mut tensors = Vec::new();
    let mut matmul_bytes = 0usize;
    for (name, dims) in cfg.tensor_shapes() {
        let q = if dims.len() == 1 {
            QTensor::quantize(
                &Tensor::ones(dims.as_slice(), DType::F32, &Device::Cpu)?,
                GgmlDType::F32,
            )?
        } else if name == "output.weight" {
            repeated(&dims, args.output_dtype)?
        } else {
            repeated(&dims, args.dtype)?
        };
        if dims.len() == 2 && name != "token_embd.weight" {
            matmul_bytes += q.storage_size_in_bytes();
        }
        tensors.push((name, q));
    }
    let md = cfg.metadata(args.dtype);
    let md_refs: Vec<(&str, &gguf_file::Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut buf = Cursor::new(Vec::new());
    gguf_file::write(&mut buf, &md_refs, &t_refs)?;
    drop(t_refs);
    drop(tensors);
    buf.set_position(0);
    let content = gguf_file::Content::read(&mut buf)?;
    let mut model = ModelWeights::from_gguf(content, &mut buf, &device)?;
    drop(buf);
    println!(
        "model: {} layers, {:?} matrices, {:?} output, {:.2} GB of matrix weights per token; built and loaded in {:.1} s",
        args.layers,
        args.dtype,
        args.output_dtype,
        matmul_bytes as f64 / 1e9,
        t0.elapsed().as_secs_f64()
    );

    // Copy bandwidth in the same run: a 1 GiB device-to-device copy.
    let big = Tensor::zeros(1 << 28, DType::F32, &device)?;
    let mut copy_bw = 0f64;
    for _ in 0..5 {
        device.synchronize()?;
        let t = Instant::now();
        let c = big.copy()?;
        device.synchronize()?;
        let s = t.elapsed().as_secs_f64();
        drop(c);
        copy_bw = copy_bw.max(2.0 * (1u64 << 30) as f64 / s);
    }
    drop(big);

    let prompt: Vec<u32> = vec![128000, 791, 6864, 315, 9822, 374];
    let input = Tensor::new(prompt.as_slice(), &device)?.unsqueeze(0)?;
    let logits = model.forward(&input, 0)?;
    let mut next = logits.squeeze(0)?.argmax(0)?.to_scalar::<u32>()?;
    let mut pos = prompt.len();
    // Warm-up tokens (kernel loading, allocator).
    for _ in 0..3 {
        let x = Tensor::new(&[next], &device)?.unsqueeze(0)?;
        let l = model.forward(&x, pos)?;
        next = l.squeeze(0)?.argmax(0)?.to_scalar::<u32>()?;
        pos += 1;
    }
    let (mut host, mut launches) = (0f64, 0u64);
    let t = Instant::now();
    for _ in 0..args.tokens {
        let x = Tensor::new(&[next], &device)?.unsqueeze(0)?;
        let l0 = hip_core::launch_count();
        let h = Instant::now();
        let l = model.forward(&x, pos)?;
        host += h.elapsed().as_secs_f64();
        launches += hip_core::launch_count() - l0;
        let logits: Vec<f32> = l.squeeze(0)?.to_dtype(DType::F32)?.to_vec1()?;
        next = logits
            .iter()
            .enumerate()
            .fold((0usize, f32::NEG_INFINITY), |b, (i, &v)| {
                if v > b.1 {
                    (i, v)
                } else {
                    b
                }
            })
            .0 as u32;
        pos += 1;
    }
    let wall = t.elapsed().as_secs_f64();
    // One more (untimed) token with the launches counted and timed by kernel name.
    hip_core::launch_profile_start(true);
    let x = Tensor::new(&[next], &device)?.unsqueeze(0)?;
    let l = model.forward(&x, pos)?;
    let profile = hip_core::launch_profile_stop();
    drop(l.to_dtype(DType::F32)?.to_vec2::<f32>()?);
    let n = args.tokens as f64;
    let tps = n / wall;
    let roofline = matmul_bytes as f64 * tps / copy_bw;
    println!(
        "copy bandwidth (1 GiB, read + write): {:.0} GB/s",
        copy_bw / 1e9
    );
    println!(
        "decode (overlapped launches {}): {} tokens in {wall:.3} s = {tps:.1} tokens/s; {:.2} ms per token (wall), host time in forward {:.2} ms per token; {:.0} kernel launches per token",
        if hip_core::overlapped_launches() { "on" } else { "off" },
        args.tokens,
        wall / n * 1e3,
        host / n * 1e3,
        launches as f64 / n
    );
    println!(
        "roofline: {:.2} GB/token x {tps:.1} tokens/s = {:.0} GB/s = {:.1}% of the copy bandwidth",
        matmul_bytes as f64 / 1e9,
        matmul_bytes as f64 * tps / 1e9,
        roofline * 100.0
    );
    println!("launches of one token by kernel (GPU time from events around each launch):");
    candle_rocm_models::bench::print_launch_profile(&profile);
    if args.host_profile > 0 {
        host_profile(&mut model, &device, next, pos + 1, args.host_profile)?;
    }
    Ok(())
}

/// Samples the host (5 kHz) while `tokens` more decode steps are queued, without waiting for
/// their logits, and prints where the host time goes: functions by share of the samples that
/// include them, and the functions the samples were in.
fn host_profile(
    model: &mut ModelWeights,
    device: &Device,
    token: u32,
    mut pos: usize,
    tokens: usize,
) -> anyhow::Result<()> {
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(5000)
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()?;
    let x = Tensor::new(&[token], device)?.unsqueeze(0)?;
    for _ in 0..tokens {
        drop(model.forward(&x, pos)?);
        pos += 1;
    }
    let report = guard.report().build()?;
    device.synchronize()?;
    let (mut inclusive, mut own) = (HashMap::<String, isize>::new(), HashMap::new());
    let mut total = 0isize;
    for (frames, &count) in &report.data {
        total += count;
        let names: Vec<String> = frames
            .frames
            .iter()
            .flat_map(|f| f.iter().map(|s| short_name(&s.name())))
            .collect();
        if let Some(leaf) = names.first() {
            *own.entry(leaf.clone()).or_default() += count;
        }
        let unique: std::collections::HashSet<&String> = names.iter().collect();
        for n in unique {
            *inclusive.entry(n.clone()).or_default() += count;
        }
    }
    let print = |title: &str, map: HashMap<String, isize>, rows: usize| {
        let mut v: Vec<_> = map.into_iter().collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.1));
        println!("{title} ({total} samples over {tokens} decode steps):");
        for (name, n) in v.into_iter().take(rows) {
            println!("  {:5.1}%  {name}", 100.0 * n as f64 / total.max(1) as f64);
        }
    };
    print("host profile, inclusive", inclusive, 60);
    print("host profile, self", own, 30);
    Ok(())
}

/// A demangled symbol without its hash, cut to one line's width.
fn short_name(name: &str) -> String {
    let name = match name.rfind("::h") {
        Some(i) if name.len() - i == 19 => &name[..i],
        _ => name,
    };
    name.chars().take(140).collect()
}
