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

/// `dims` and each operand's strides with size-1 dims dropped and adjacent dims merged where
/// every operand steps over them as over one dim (`stride[d] == stride[d + 1] * dims[d + 1]`):
/// the same elements in the same row-major order, with fewer dims for the kernels to divide by
/// (a bias broadcast over `(32, 128, 384)` becomes `(4096, 384)` with strides `(0, 1)`).
pub fn merge_dims(dims: &[usize], strides: &[&[usize]]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut md: Vec<usize> = Vec::with_capacity(dims.len());
    let mut ms: Vec<Vec<usize>> = vec![Vec::with_capacity(dims.len()); strides.len()];
    for (d, &dim) in dims.iter().enumerate() {
        if dim == 1 {
            continue;
        }
        let joins_outer = strides
            .iter()
            .zip(&ms)
            .all(|(s, m)| m.last() == Some(&(s[d] * dim)));
        match md.last_mut() {
            Some(outer) if joins_outer => {
                *outer *= dim;
                for (s, m) in strides.iter().zip(ms.iter_mut()) {
                    m.pop();
                    m.push(s[d]);
                }
            }
            _ => {
                md.push(dim);
                for (s, m) in strides.iter().zip(ms.iter_mut()) {
                    m.push(s[d]);
                }
            }
        }
    }
    (md, ms)
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
    fn merging_keeps_the_element_order() {
        // A bias broadcast over (32, 128, 384) beside a contiguous operand.
        let (d, s) = merge_dims(&[32, 128, 384], &[&[49152, 384, 1], &[0, 0, 1]]);
        assert_eq!((d, s), (vec![4096, 384], vec![vec![384, 1], vec![0, 1]]));
        // An attention mask (32, 1, 1, 128) broadcast to (32, 12, 128, 128).
        let (d, s) = merge_dims(
            &[32, 12, 128, 128],
            &[&[196608, 16384, 128, 1], &[128, 0, 0, 1]],
        );
        assert_eq!(
            (d, s),
            (
                vec![32, 1536, 128],
                vec![vec![196608, 128, 1], vec![128, 0, 1]]
            )
        );
        // A transpose does not merge; size-1 dims go.
        let (d, s) = merge_dims(&[2, 1, 3], &[&[1, 7, 2]]);
        assert_eq!((d, s), (vec![2, 3], vec![vec![1, 2]]));
        // Everything contiguous: one dim. Only size-1 dims: none.
        let (d, s) = merge_dims(&[2, 3, 4], &[&[12, 4, 1], &[12, 4, 1]]);
        assert_eq!((d, s), (vec![24], vec![vec![1], vec![1]]));
        let (d, s) = merge_dims(&[1, 1], &[&[5, 9]]);
        assert_eq!((d, s), (vec![], vec![vec![]]));
        // A narrowed view (row stride 10 for rows of 4) stays two dims.
        let (d, _) = merge_dims(&[3, 4], &[&[10, 1]]);
        assert_eq!(d, vec![3, 4]);
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
