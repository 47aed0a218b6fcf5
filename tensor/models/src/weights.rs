//! Converting a safetensors checkpoint to another float dtype (e.g. the f16 copy of
//! all-MiniLM-L6-v2), keeping every tensor name and the file's `__metadata__`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use safetensors::tensor::{Dtype as StDtype, View};

use crate::error::{invalid, Error, Result};

/// What [`convert_safetensors`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertSummary {
    /// Tensors written (all of the source's).
    pub tensors: usize,
    /// Of those, the floating-point ones converted to the new dtype (integer tensors such as
    /// BERT's `position_ids` are copied unchanged).
    pub converted: usize,
    /// Size of the source file in bytes.
    pub bytes_in: u64,
    /// Size of the written file in bytes.
    pub bytes_out: u64,
}

/// Reads the safetensors file `src`, converts every floating-point tensor to `dtype` (F16, BF16,
/// F32 or F64) and writes all tensors under their original names, with the original
/// `__metadata__`, to `dst` (written to a temporary file renamed into place, with the
/// source's permissions).
pub fn convert_safetensors(src: &Path, dst: &Path, dtype: DType) -> Result<ConvertSummary> {
    if !dtype.is_float() || dtype.size_in_bytes() < 2 {
        return Err(invalid(format!(
            "convert_safetensors: target dtype {dtype:?} is not f16, bf16, f32 or f64"
        )));
    }
    if src == dst {
        return Err(invalid(format!(
            "convert_safetensors: source and destination are both {}",
            src.display()
        )));
    }
    let bytes = std::fs::read(src).map_err(|source| Error::Io {
        path: src.to_path_buf(),
        source,
    })?;
    let st_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Safetensors { path, source }
    };
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).map_err(st_err(src))?;
    let metadata = header.metadata().clone();
    let tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)?;
    let bytes_in = bytes.len() as u64;
    drop(bytes);

    let mut converted = 0;
    let mut out = Vec::with_capacity(tensors.len());
    let mut names: Vec<_> = tensors.keys().cloned().collect();
    names.sort();
    for name in names {
        let Some(t) = tensors.get(&name) else {
            continue;
        };
        let t = if t.dtype().is_float() && t.dtype() != dtype {
            converted += 1;
            t.to_dtype(dtype)?
        } else {
            t.clone()
        };
        out.push((name, HostTensor::new(&t)?));
    }
    let count = out.len();

    // safetensors writes a sibling temporary file and renames it into place; the temporary
    // file is private (0600), so give the result the source's permissions.
    safetensors::tensor::serialize_to_file(out, metadata, dst).map_err(st_err(dst))?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    let permissions = std::fs::metadata(src).map_err(io(src))?.permissions();
    std::fs::set_permissions(dst, permissions).map_err(io(dst))?;
    let bytes_out = std::fs::metadata(dst).map_err(io(dst))?.len();
    Ok(ConvertSummary {
        tensors: count,
        converted,
        bytes_in,
        bytes_out,
    })
}

/// Loads every tensor of a safetensors file onto `device` (names as in the file).
pub fn load_safetensors(path: &Path, device: &Device) -> Result<HashMap<String, Tensor>> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(candle_core::safetensors::load_buffer(&bytes, device)?)
}

/// A tensor's bytes on the host in little-endian order: a safetensors `View` that cannot fail
/// while writing (candle's own `View` impl unwraps its device-to-host copy).
struct HostTensor {
    dtype: StDtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl HostTensor {
    fn new(t: &Tensor) -> Result<Self> {
        let flat = t.to_device(&Device::Cpu)?.flatten_all()?;
        let (dtype, data) = match t.dtype() {
            DType::F16 => (
                StDtype::F16,
                le_bytes(flat.to_vec1::<half::f16>()?, |x| x.to_le_bytes()),
            ),
            DType::BF16 => (
                StDtype::BF16,
                le_bytes(flat.to_vec1::<half::bf16>()?, |x| x.to_le_bytes()),
            ),
            DType::F32 => (
                StDtype::F32,
                le_bytes(flat.to_vec1::<f32>()?, |x| x.to_le_bytes()),
            ),
            DType::F64 => (
                StDtype::F64,
                le_bytes(flat.to_vec1::<f64>()?, |x| x.to_le_bytes()),
            ),
            DType::I64 => (
                StDtype::I64,
                le_bytes(flat.to_vec1::<i64>()?, |x| x.to_le_bytes()),
            ),
            DType::U32 => (
                StDtype::U32,
                le_bytes(flat.to_vec1::<u32>()?, |x| x.to_le_bytes()),
            ),
            DType::U8 => (StDtype::U8, flat.to_vec1::<u8>()?),
            other => {
                return Err(invalid(format!(
                    "convert_safetensors: writing {other:?} tensors is not supported"
                )))
            }
        };
        Ok(Self {
            dtype,
            shape: t.dims().to_vec(),
            data,
        })
    }
}

fn le_bytes<T, const N: usize>(v: Vec<T>, f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.into_iter().flat_map(f).collect()
}

impl View for HostTensor {
    fn dtype(&self) -> StDtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}
