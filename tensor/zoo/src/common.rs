//! Helpers shared by the decoder families ([`crate::llm`], [`crate::moe`], [`crate::ssm`]):
//! seeded prompts and teacher-forced decode steps.
//!
//! Every decoder case runs a prompt of [`PROMPT_LEN`] tokens, then [`DECODE_STEPS`] single-token
//! steps through its KV cache (or recurrent state). The step tokens are seeded (teacher
//! forcing), never the argmax of the previous logits, so a run on any device feeds the model
//! exactly the tokens the reference sees. All token streams are per batch element (see
//! [`token_batch`]).

use candle_core::{DType, Device, IndexOp, Result, Tensor};

use crate::weights::token_batch;
use crate::{Case, ALL_FLOATS};

/// The signature of [`Case::run`].
pub type RunFn = fn(&Device, DType, &[usize]) -> Result<Vec<Tensor>>;

/// A batch-2 case of `family` in every float dtype.
pub fn decoder_case(name: &'static str, family: &'static str, run: RunFn) -> Case {
    Case {
        name,
        family,
        batch: 2,
        dtypes: ALL_FLOATS,
        run,
    }
}

/// Prompt length of every decoder case (odd, so no kernel gets a power-of-two length only).
pub const PROMPT_LEN: usize = 7;

/// Number of single-token decode steps after the prompt.
pub const DECODE_STEPS: usize = 4;

/// The token stream of the prompt of a model whose weights use `seed`.
fn prompt_stream(seed: u64) -> u64 {
    seed.wrapping_mul(1000)
}

/// The token stream of decode step `step` of a model whose weights use `seed`.
fn step_stream(seed: u64, step: usize) -> u64 {
    seed.wrapping_mul(1000).wrapping_add(1 + step as u64)
}

/// The `(elements.len(), PROMPT_LEN)` prompt of a model whose weights use `seed`.
pub fn prompt(seed: u64, elements: &[usize], vocab: usize, device: &Device) -> Result<Tensor> {
    token_batch(prompt_stream(seed), elements, PROMPT_LEN, vocab, device)
}

/// The `(elements.len(), 1)` teacher-forced token of decode step `step`.
pub fn step_tokens(
    seed: u64,
    step: usize,
    elements: &[usize],
    vocab: usize,
    device: &Device,
) -> Result<Tensor> {
    token_batch(step_stream(seed, step), elements, 1, vocab, device)
}

/// Runs a KV-cache decoder: `forward(tokens, seqlen_offset)` on the `(batch, PROMPT_LEN)`
/// prompt at offset 0, then on each decode step's `(batch, 1)` token at offsets
/// `PROMPT_LEN, PROMPT_LEN + 1, ...`. Returns what each call returned, in order.
pub fn prompt_then_decode(
    seed: u64,
    elements: &[usize],
    vocab: usize,
    device: &Device,
    mut forward: impl FnMut(&Tensor, usize) -> Result<Tensor>,
) -> Result<Vec<Tensor>> {
    let mut outputs = Vec::with_capacity(1 + DECODE_STEPS);
    outputs.push(forward(&prompt(seed, elements, vocab, device)?, 0)?);
    for step in 0..DECODE_STEPS {
        let tokens = step_tokens(seed, step, elements, vocab, device)?;
        outputs.push(forward(&tokens, PROMPT_LEN + step)?);
    }
    Ok(outputs)
}

/// The same tokens as [`prompt_then_decode`] feeds, one `(batch,)` tensor per position (the
/// prompt's `PROMPT_LEN`, then the `DECODE_STEPS` steps'), for models that only take one
/// token at a time.
pub fn token_by_token(
    seed: u64,
    elements: &[usize],
    vocab: usize,
    device: &Device,
) -> Result<Vec<Tensor>> {
    let host = Device::Cpu;
    let prompt = prompt(seed, elements, vocab, &host)?;
    let mut tokens = Vec::with_capacity(PROMPT_LEN + DECODE_STEPS);
    for t in 0..PROMPT_LEN {
        tokens.push(prompt.i((.., t))?.contiguous()?.to_device(device)?);
    }
    for step in 0..DECODE_STEPS {
        let t = step_tokens(seed, step, elements, vocab, &host)?;
        tokens.push(t.i((.., 0))?.contiguous()?.to_device(device)?);
    }
    Ok(tokens)
}
