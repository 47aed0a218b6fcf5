//! Verdicts: a device run's outputs against the reference, in f64 on the host.

use candle_core::{DType, Device, Result, Tensor};

/// How close a run came to the reference, over all of a case's outputs together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// Cosine similarity of all outputs flattened into one vector.
    pub cosine: f64,
    /// Largest `|got - ref| / max(1, |ref|)` over every element.
    pub max_diff: f64,
    /// Whether the thresholds of the run's dtype are met (see [`Verdict::thresholds`]).
    pub pass: bool,
}

impl Verdict {
    /// `(min cosine, max diff)` for a run in `dtype` against an f32 reference: f32 must reach
    /// cosine >= 0.99999 and max diff <= 1e-3; f16 and bf16 cosine >= 0.999 (no diff bound).
    pub fn thresholds(dtype: DType) -> (f64, f64) {
        match dtype {
            DType::F32 | DType::F64 => (0.99999, 1e-3),
            _ => (0.999, f64::INFINITY),
        }
    }
}

/// A tensor's values as host f64s (any float dtype, any device).
pub fn host_f64(t: &Tensor) -> Result<Vec<f64>> {
    t.to_device(&Device::Cpu)?
        .to_dtype(DType::F64)?
        .flatten_all()?
        .to_vec1::<f64>()
}

/// Compares `got` (a run in `dtype`) with `reference` output by output. Shapes must match; a
/// NaN or infinity in `got` where the reference is finite fails the verdict.
pub fn judge(dtype: DType, got: &[Tensor], reference: &[Tensor]) -> Result<Verdict> {
    if got.len() != reference.len() {
        candle_core::bail!(
            "the run gave {} outputs, the reference {}",
            got.len(),
            reference.len()
        );
    }
    let (mut dot, mut gg, mut rr, mut max_diff) = (0f64, 0f64, 0f64, 0f64);
    let mut non_finite = false;
    for (i, (g, r)) in got.iter().zip(reference).enumerate() {
        if g.dims() != r.dims() {
            candle_core::bail!(
                "output {i}: the run has shape {:?}, the reference {:?}",
                g.dims(),
                r.dims()
            );
        }
        let (g, r) = (host_f64(g)?, host_f64(r)?);
        for (&x, &y) in g.iter().zip(&r) {
            if !x.is_finite() && y.is_finite() {
                non_finite = true;
                continue;
            }
            dot += x * y;
            gg += x * x;
            rr += y * y;
            max_diff = max_diff.max((x - y).abs() / y.abs().max(1.0));
        }
    }
    let cosine = if gg == 0.0 && rr == 0.0 {
        1.0
    } else {
        dot / (gg.sqrt() * rr.sqrt()).max(f64::MIN_POSITIVE)
    };
    let (min_cos, max_d) = Verdict::thresholds(dtype);
    Ok(Verdict {
        cosine,
        max_diff: if non_finite { f64::INFINITY } else { max_diff },
        pass: !non_finite && cosine >= min_cos && max_diff <= max_d,
    })
}

/// Whether two runs gave bit-identical outputs (same shapes, same f64 images).
pub fn identical(a: &[Tensor], b: &[Tensor]) -> Result<bool> {
    if a.len() != b.len() {
        return Ok(false);
    }
    for (x, y) in a.iter().zip(b) {
        if x.dims() != y.dims() || x.dtype() != y.dtype() {
            return Ok(false);
        }
        let (x, y) = (host_f64(x)?, host_f64(y)?);
        if x.iter()
            .zip(&y)
            .any(|(p, q)| p.to_bits() != q.to_bits() && !(p.is_nan() && q.is_nan()))
        {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judge_measures_cosine_and_relative_diff() {
        let r = Tensor::new(&[1f32, 2.0, -3.0, 100.0], &Device::Cpu).unwrap();
        let v = judge(
            DType::F32,
            std::slice::from_ref(&r),
            std::slice::from_ref(&r),
        )
        .unwrap();
        assert!(v.pass && (v.cosine - 1.0).abs() < 1e-12 && v.max_diff == 0.0);
        let g = Tensor::new(&[1f32, 2.0, -3.0, 100.5], &Device::Cpu).unwrap();
        let v = judge(DType::F32, &[g], std::slice::from_ref(&r)).unwrap();
        assert!((v.max_diff - 0.005).abs() < 1e-9, "{v:?}");
        assert!(!v.pass);
        let nan = Tensor::new(&[1f32, f32::NAN, -3.0, 100.0], &Device::Cpu).unwrap();
        assert!(!judge(DType::F16, &[nan], &[r]).unwrap().pass);
    }
}
