//! Chat with SmolLM2-135M-Instruct (Q4_1 GGUF) through candle-transformers' quantized llama:
//! greedy decoding, the answer streamed as it is generated, then tokens/s.
//!
//! Usage: cargo run --release --example smollm2_generate -- [--model-dir DIR | --gguf FILE]
//!        [--device cpu|rocm] [--prompt TEXT] [--system TEXT] [--max-tokens N] [--ignore-eos]
//!
//! `--model-dir` defaults to `$CANDLE_ROCM_SMOLLM2_DIR`, else the directory of
//! `scripts/fetch-smollm2.sh` ($HOME/.cache/candle-rocm/smollm2-135m-instruct); `--gguf` names
//! the GGUF file directly (e.g. a copy made by `gguf_tool requantize`, which keeps the
//! tokenizer metadata). The prompt is
//! wrapped in SmolLM2's chat template, `<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n`
//! (preceded by a system turn when `--system` is given); generation stops at `<|im_end|>` (unless
//! `--ignore-eos`, for timings over a fixed count) or after `--max-tokens` tokens (default 64).

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use candle_rocm_models::device::synchronize;
use candle_rocm_models::gguf_tools::{
    default_smollm2_dir, gguf_token_id, greedy_generate_with, load_quantized_llama, read_gguf,
    tokenizer_from_gguf_metadata, SMOLLM2_DIR_ENV, SMOLLM2_GGUF_FILE,
};
use candle_rocm_models::pick_device;

struct Args {
    model_dir: Option<PathBuf>,
    gguf: Option<PathBuf>,
    device: String,
    prompt: String,
    system: Option<String>,
    max_tokens: usize,
    ignore_eos: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        model_dir: std::env::var_os(SMOLLM2_DIR_ENV).map(PathBuf::from),
        gguf: None,
        device: "cpu".to_string(),
        prompt: "What is the capital of France?".to_string(),
        system: None,
        max_tokens: 64,
        ignore_eos: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--model-dir" => args.model_dir = Some(PathBuf::from(value()?)),
            "--gguf" => args.gguf = Some(PathBuf::from(value()?)),
            "--device" => args.device = value()?,
            "--prompt" => args.prompt = value()?,
            "--system" => args.system = Some(value()?),
            "--max-tokens" => {
                args.max_tokens = value()?.parse().context("--max-tokens expects a number")?
            }
            "--ignore-eos" => args.ignore_eos = true,
            "-h" | "--help" => {
                println!(
                    "usage: smollm2_generate [--model-dir DIR | --gguf FILE] [--device cpu|rocm|rocm:N] \
                     [--prompt TEXT] [--system TEXT] [--max-tokens N] [--ignore-eos]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    Ok(args)
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let gguf = match (
        &args.gguf,
        args.model_dir.clone().or_else(default_smollm2_dir),
    ) {
        (Some(file), _) => file.clone(),
        (None, Some(dir)) => dir.join(SMOLLM2_GGUF_FILE),
        (None, None) => bail!("no model directory: pass --model-dir or set {SMOLLM2_DIR_ENV}"),
    };
    if !gguf.is_file() {
        bail!(
            "{} not found: run scripts/fetch-smollm2.sh or pass --model-dir / --gguf",
            gguf.display()
        );
    }
    let device = pick_device(&args.device)?;

    let t = Instant::now();
    let metadata = read_gguf(&gguf)?.metadata;
    let tokenizer = tokenizer_from_gguf_metadata(&metadata)?;
    let eos = gguf_token_id(&metadata, "eos");
    let stop = if args.ignore_eos { None } else { eos };
    let mut model = load_quantized_llama(&gguf, &device)?;
    synchronize(&device)?;
    eprintln!(
        "loaded {} on {:?} in {:.2?}",
        gguf.display(),
        device.location(),
        t.elapsed()
    );

    let mut text = String::new();
    if let Some(system) = &args.system {
        text.push_str(&format!("<|im_start|>system\n{system}<|im_end|>\n"));
    }
    text.push_str(&format!(
        "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",
        args.prompt
    ));
    let prompt = tokenizer
        .encode(text.as_str(), false)
        .map_err(anyhow::Error::msg)?
        .get_ids()
        .to_vec();
    eprintln!("prompt: {} tokens", prompt.len());

    let mut stream = tokenizer.decode_stream(true);
    let mut stdout = std::io::stdout();
    let mut decode_error = None;
    let start = Instant::now();
    let mut first_token: Option<Duration> = None;
    let tokens = greedy_generate_with(&mut model, &prompt, args.max_tokens, &device, |id| {
        if first_token.is_none() {
            first_token = Some(start.elapsed());
        }
        if Some(id) == stop {
            return false;
        }
        match stream.step(id) {
            Ok(Some(piece)) => {
                print!("{piece}");
                let _ = stdout.flush();
            }
            Ok(None) => {}
            Err(e) => {
                decode_error = Some(e.to_string());
                return false;
            }
        }
        true
    })?;
    synchronize(&device)?;
    let total = start.elapsed();
    println!();
    if let Some(e) = decode_error {
        bail!("decoding token stream: {e}");
    }
    let prefill = first_token.unwrap_or_default();
    let decoded = tokens.len().saturating_sub(1);
    let decode_time = total.saturating_sub(prefill);
    eprintln!(
        "{} tokens generated{}; prefill ({} tokens) {:.2?}; decode {} tokens in {:.2?}: {:.2} tokens/s; \
         overall {:.2} tokens/s",
        tokens.len(),
        if stop.is_some() && tokens.last() == stop.as_ref() {
            " (stopped at <|im_end|>)"
        } else {
            ""
        },
        prompt.len(),
        prefill,
        decoded,
        decode_time,
        if decode_time.is_zero() {
            0.0
        } else {
            decoded as f64 / decode_time.as_secs_f64()
        },
        tokens.len() as f64 / total.as_secs_f64().max(f64::MIN_POSITIVE),
    );
    Ok(())
}
