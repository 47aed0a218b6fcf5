//! Seeded random weights for any model: a candle-nn [`SimpleBackend`] that answers every
//! variable a model asks for with values drawn from a generator seeded by the variable's name.
//!
//! The values depend only on (name, shape, init hint), never on the device or dtype: they are
//! drawn in f32 on the host, then cast to the requested dtype and copied to the requested
//! device, so the CPU reference and the GPU run see the same weights. Every variable gets
//! non-trivial values: a constant hint `c` (e.g. 1 for norm weights, 0 for biases) becomes
//! `c + 0.1 * N(0, 1)`, so nothing stays at its zero initialiser; weight-norm magnitudes
//! (`*.weight_g`) are drawn around 1.

use candle_core::{DType, Device, Result, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};

/// The seeded backend; see the module docs.
#[derive(Debug, Clone, Copy)]
pub struct RandomWeights {
    seed: u64,
}

impl RandomWeights {
    /// A backend whose values also depend on `seed` (one per model).
    pub fn new(seed: u64) -> Self {
        Self { seed }
    }
}

/// 64-bit FNV-1a of `s`, mixed with `seed`.
fn name_hash(seed: u64, s: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A small deterministic generator (splitmix64) with uniform and normal draws.
#[derive(Debug, Clone)]
pub struct SeededRng(u64);

impl SeededRng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Seeded token ids: `len` ids below `vocab` for batch element `element` of a model's input
/// stream `stream` (the same ids whichever elements a run takes together).
pub fn tokens(stream: u64, element: usize, len: usize, vocab: usize) -> Vec<u32> {
    let mut rng = SeededRng::new(name_hash(stream, &format!("tokens/{element}")));
    (0..len).map(|_| rng.below(vocab) as u32).collect()
}

/// Seeded f32 values, N(0, 1) times `scale`, for batch element `element` of input `stream`.
pub fn values(stream: u64, element: usize, len: usize, scale: f64) -> Vec<f32> {
    let mut rng = SeededRng::new(name_hash(stream, &format!("values/{element}")));
    (0..len).map(|_| (rng.normal() * scale) as f32).collect()
}

/// A `(elements.len(), rest...)` token tensor: element `e` of the batch holds
/// [`tokens`]`(stream, e, ...)`.
pub fn token_batch(
    stream: u64,
    elements: &[usize],
    len: usize,
    vocab: usize,
    device: &Device,
) -> Result<Tensor> {
    let ids: Vec<u32> = elements
        .iter()
        .flat_map(|&e| tokens(stream, e, len, vocab))
        .collect();
    Tensor::from_vec(ids, (elements.len(), len), device)
}

/// A `(elements.len(), dims...)` f32 tensor of seeded N(0, scale^2) values per batch element,
/// cast to `dtype` on `device`.
pub fn value_batch(
    stream: u64,
    elements: &[usize],
    dims: &[usize],
    scale: f64,
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    let per: usize = dims.iter().product();
    let v: Vec<f32> = elements
        .iter()
        .flat_map(|&e| values(stream, e, per, scale))
        .collect();
    let mut shape = vec![elements.len()];
    shape.extend_from_slice(dims);
    Tensor::from_vec(v, shape, &Device::Cpu)?
        .to_dtype(dtype)?
        .to_device(device)
}

impl RandomWeights {
    /// The host f32 values of variable `name` with `shape` and init hint `init`.
    pub fn host_values(&self, shape: &Shape, name: &str, init: Init) -> Vec<f32> {
        let n = shape.elem_count();
        let dims = shape.dims();
        let mut rng = SeededRng::new(name_hash(self.seed, name));
        // Fan-in of a weight: everything but the first dim (linear (out, in), conv (out, in,
        // k...)); 1-D variables count as fan-in 1.
        let fan_in: usize = if dims.len() >= 2 {
            dims[1..].iter().product::<usize>().max(1)
        } else {
            1
        };
        let (mean, std) = match init {
            Init::Const(c) => (c, 0.1),
            Init::Randn { mean, stdev } => (mean, stdev.min(1.0)),
            Init::Uniform { lo, up } => ((lo + up) / 2.0, ((up - lo) / 12f64.sqrt()).min(1.0)),
            Init::Kaiming { .. } => (0.0, 1.0 / (fan_in as f64).sqrt()),
        };
        // Weight-norm magnitudes (`*.weight_g`, asked for without a hint) around 1, as in a
        // trained model: near 0 they would scale every such layer's output down tenfold.
        let (mean, std) = if name.ends_with("weight_g") {
            (1.0, 0.1)
        } else {
            (mean, std)
        };
        let std = if std == 0.0 { 0.1 } else { std };
        (0..n).map(|_| (mean + std * rng.normal()) as f32).collect()
    }
}

impl SimpleBackend for RandomWeights {
    fn get(&self, s: Shape, name: &str, h: Init, dtype: DType, dev: &Device) -> Result<Tensor> {
        let v = self.host_values(&s, name, h);
        let t = Tensor::from_vec(v, s, &Device::Cpu)?;
        let t = if dtype.is_float() {
            t.to_dtype(dtype)?
        } else {
            // Integer variables (rare: e.g. position ids): small non-negative values.
            t.abs()?.round()?.to_dtype(dtype)?
        };
        t.to_device(dev)
    }

    fn get_unchecked(&self, name: &str, _dtype: DType, _dev: &Device) -> Result<Tensor> {
        candle_core::bail!(
            "random weights: variable {name} was asked for without a shape; the zoo's \
             generator needs the shape"
        )
    }

    fn contains_tensor(&self, _name: &str) -> bool {
        true
    }
}

/// A [`VarBuilder`] over [`RandomWeights`] for `seed`, producing `dtype` tensors on `device`.
pub fn var_builder(seed: u64, dtype: DType, device: &Device) -> VarBuilder<'static> {
    VarBuilder::from_backend(Box::new(RandomWeights::new(seed)), dtype, device.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_depend_on_name_and_shape_only() {
        let w = RandomWeights::new(7);
        let s: Shape = (3, 4).into();
        let a = w.host_values(&s, "layer.0.weight", Init::Const(0.0));
        let b = w.host_values(&s, "layer.0.weight", Init::Const(0.0));
        let c = w.host_values(&s, "layer.1.weight", Init::Const(0.0));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(
            a.iter().all(|v| *v != 0.0),
            "a zero-initialised variable stayed zero"
        );
        let ones = w.host_values(&(64,).into(), "norm.weight", Init::Const(1.0));
        let mean = ones.iter().sum::<f32>() / 64.0;
        assert!((mean - 1.0).abs() < 0.1, "{mean}");
    }

    #[test]
    fn token_streams_are_per_element() {
        let both = token_batch(3, &[0, 1], 5, 100, &Device::Cpu).unwrap();
        let one = token_batch(3, &[1], 5, 100, &Device::Cpu).unwrap();
        assert_eq!(
            both.get(1).unwrap().to_vec1::<u32>().unwrap(),
            one.get(0).unwrap().to_vec1::<u32>().unwrap()
        );
    }
}
