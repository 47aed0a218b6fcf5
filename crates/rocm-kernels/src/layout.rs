//! Layout info for strided kernels ("SlicePtrOrNull").
//!
//! An element-wise kernel takes `(numel, num_dims, info, operands...)`. `info` points to
//! `num_dims` dims followed by one stride set (`num_dims` strides, in elements) per strided
//! operand, as `u64`s in device memory, or is null when every operand is contiguous: then the
//! kernel takes its fast path and no info is copied to the device at all. Operand pointers
//! arrive already offset by their layout's start offset.

/// `true` when `strides` are the row-major contiguous strides of `dims`.
pub fn is_contiguous(dims: &[usize], strides: &[usize]) -> bool {
    if dims.len() != strides.len() {
        return false;
    }
    let mut expected = 1usize;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected = expected.saturating_mul(d);
    }
    true
}

/// The info array for `dims` and each operand's strides: `dims ++ strides[0] ++ strides[1] ...`,
/// or `None` when every operand is contiguous.
pub fn info_array(dims: &[usize], operand_strides: &[&[usize]]) -> Option<Vec<u64>> {
    if operand_strides.iter().all(|s| is_contiguous(dims, s)) {
        return None;
    }
    let mut info = Vec::with_capacity(dims.len() * (1 + operand_strides.len()));
    info.extend(dims.iter().map(|&d| d as u64));
    for s in operand_strides {
        info.extend(s.iter().map(|&x| x as u64));
    }
    Some(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguity() {
        assert!(is_contiguous(&[2, 3], &[3, 1]));
        assert!(is_contiguous(&[], &[]));
        assert!(
            is_contiguous(&[2, 1, 3], &[3, 99, 1]),
            "size-1 dims may have any stride"
        );
        assert!(!is_contiguous(&[2, 3], &[1, 2]), "transposed");
        assert!(!is_contiguous(&[2, 3], &[0, 1]), "broadcast");
        assert!(!is_contiguous(&[2, 3], &[3]), "rank mismatch");
    }

    #[test]
    fn info_is_null_when_all_contiguous() {
        assert_eq!(info_array(&[2, 3], &[&[3, 1], &[3, 1]]), None);
        assert_eq!(
            info_array(&[2, 3], &[&[3, 1], &[0, 1]]),
            Some(vec![2, 3, 3, 1, 0, 1])
        );
    }
}
