//! Tier 1: safetensors dtype conversion keeps names, integer tensors and metadata.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use candle_rocm_models::weights::{convert_safetensors, load_safetensors};

#[test]
fn f16_copy_keeps_names_metadata_and_values() {
    let dir =
        std::env::temp_dir().join(format!("candle-rocm-models-weights-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("model.safetensors");
    let dst = dir.join("model.f16.safetensors");
    let a: Vec<f32> = (0..600).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    let tensors = HashMap::from([
        (
            "encoder.layer.0.weight".to_string(),
            Tensor::from_vec(a.clone(), (20, 30), &Device::Cpu).unwrap(),
        ),
        (
            "embeddings.position_ids".to_string(),
            Tensor::arange(0i64, 12, &Device::Cpu)
                .unwrap()
                .reshape((1, 12))
                .unwrap(),
        ),
        (
            "bias".to_string(),
            Tensor::new(&[1.5f32, -2.25, 65504.0], &Device::Cpu).unwrap(),
        ),
    ]);
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let views: Vec<(String, Tensor)> = tensors
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    safetensors::serialize_to_file(views, Some(metadata.clone()), &src).unwrap();

    let s = convert_safetensors(&src, &dst, DType::F16).unwrap();
    assert_eq!((s.tensors, s.converted), (3, 2));
    assert!(s.bytes_out < s.bytes_in);

    let bytes = std::fs::read(&dst).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(header.metadata().as_ref(), Some(&metadata));
    let out = load_safetensors(&dst, &Device::Cpu).unwrap();
    let mut names: Vec<_> = out.keys().cloned().collect();
    names.sort();
    assert_eq!(
        names,
        vec!["bias", "embeddings.position_ids", "encoder.layer.0.weight"]
    );
    let w = &out["encoder.layer.0.weight"];
    assert_eq!((w.dtype(), w.dims()), (DType::F16, &[20usize, 30][..]));
    let back = w
        .to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    for (x, y) in a.iter().zip(&back) {
        assert!(
            (x - y).abs() <= x.abs() * 2f32.powi(-11) + 1e-7,
            "{x} -> {y}"
        );
    }
    let pos = &out["embeddings.position_ids"];
    assert_eq!(pos.dtype(), DType::I64);
    assert_eq!(
        pos.flatten_all().unwrap().to_vec1::<i64>().unwrap(),
        (0..12).collect::<Vec<i64>>()
    );
    assert_eq!(
        out["bias"]
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap(),
        vec![1.5, -2.25, 65504.0]
    );

    assert!(convert_safetensors(&src, &src, DType::F16).is_err());
    assert!(convert_safetensors(&src, &dst, DType::U8).is_err());
    assert!(convert_safetensors(&dir.join("absent"), &dst, DType::F16).is_err());
    std::fs::remove_dir_all(dir).unwrap();
}
