//! A zoo of candle-transformers architectures, each with a small random config that still
//! exercises its distinctive ops, seeded weights ([`weights`]) and seeded inputs at batch 2,
//! run on any candle [`Device`] and judged against Candle's CPU backend in f32 ([`compare`]).
//!
//! A [`Case`] runs one model for a chosen subset of its batch elements; the reference is the
//! CPU in f32 with **one batch element at a time** ([`reference`]): candle-core 0.11.1's CPU
//! matmul folds a batch-broadcast rhs into one GEMM whenever the lhs batch stride equals
//! `m * k`, which is wrong when the lhs is a transposed view (every `Linear` after
//! `flatten(2).transpose(1, 2)`, and its own conv_transpose1d col2im path): at batch 1 that
//! fold cannot misfire. See docs/validation.md ("The CPU oracle at batch > 1").
//!
//! Families: [`llm`] (decoder LLMs), [`moe`] (mixture of experts), [`ssm`] (state space and
//! recurrent), [`encdec`] (encoder-decoder), [`encoders`] (text and image encoders),
//! [`vision`], [`diffusion`], [`audio`].

pub mod common;
pub mod compare;
pub mod weights;

pub mod audio;
pub mod diffusion;
pub mod encdec;
pub mod encoders;
pub mod llm;
pub mod moe;
pub mod ssm;
pub mod vision;

use candle_core::{DType, Device, Result, Tensor};

/// One architecture of the zoo.
#[derive(Clone, Copy)]
pub struct Case {
    /// Short name (`llama`, `segformer`, ...).
    pub name: &'static str,
    /// Family, as in the docs' table (`decoder LLM`, `vision`, ...).
    pub family: &'static str,
    /// Number of batch elements of the full run (2 wherever the model allows it).
    pub batch: usize,
    /// Dtypes the case runs in on the device under test (the reference is always CPU f32).
    pub dtypes: &'static [DType],
    /// Runs the model on `device` with weights in `dtype` for the batch elements `elements`
    /// (indices below `batch`; inputs are seeded per element, so element `e` gets the same
    /// input in any subset). Returns the outputs to compare, each with the batch as its first
    /// dim, in a fixed order (decoders: the prompt's logits, then each decode step's).
    pub run: fn(&Device, DType, &[usize]) -> Result<Vec<Tensor>>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .field("family", &self.family)
            .field("batch", &self.batch)
            .field("dtypes", &self.dtypes)
            .finish()
    }
}

/// The float dtypes every case should run in.
pub const ALL_FLOATS: &[DType] = &[DType::F32, DType::F16, DType::BF16];

/// Every case of the zoo, family by family.
pub fn all_cases() -> Vec<Case> {
    let mut v = Vec::new();
    v.extend(llm::cases());
    v.extend(moe::cases());
    v.extend(ssm::cases());
    v.extend(encdec::cases());
    v.extend(encoders::cases());
    v.extend(vision::cases());
    v.extend(diffusion::cases());
    v.extend(audio::cases());
    v
}

/// Runs `case` on `device` in `dtype` for all its batch elements.
pub fn run_full(case: &Case, device: &Device, dtype: DType) -> Result<Vec<Tensor>> {
    let elements: Vec<usize> = (0..case.batch).collect();
    (case.run)(device, dtype, &elements)
}

/// The reference outputs: the CPU in f32, one batch element at a time, concatenated along the
/// batch dim (see the crate docs for why not the whole batch at once).
pub fn reference(case: &Case) -> Result<Vec<Tensor>> {
    let mut per_element: Vec<Vec<Tensor>> = Vec::with_capacity(case.batch);
    for e in 0..case.batch {
        per_element.push((case.run)(&Device::Cpu, DType::F32, &[e])?);
    }
    let outputs = per_element.first().map_or(0, Vec::len);
    (0..outputs)
        .map(|i| {
            let parts: Vec<&Tensor> = per_element.iter().map(|o| &o[i]).collect();
            Tensor::cat(&parts, 0)
        })
        .collect()
}

/// Outputs converted to f32 on the host (for keeping a reference around).
pub fn to_host_f32(outputs: &[Tensor]) -> Result<Vec<Tensor>> {
    outputs
        .iter()
        .map(|t| t.to_device(&Device::Cpu)?.to_dtype(DType::F32))
        .collect()
}
