//! From candle's [`Layout`] to the part of a device buffer a kernel may touch.
//!
//! Kernels receive a view that already starts at the layout's start offset, plus dims and
//! strides. Before any launch we check, on the host, that every element the layout can reach
//! lies inside the buffer: a kernel reading past its allocation is memory-unsafe, so a wrong
//! layout must be an error here, never a launch.

use std::ops::Range;

use candle_core::Layout;

use crate::error::RocmError;

/// The range of buffer elements a strided view may touch: `start .. start + 1 + Σ (dᵢ-1)·sᵢ`,
/// or `None` when the view has no element (then nothing is read, whatever the start offset).
///
/// Fails when `dims` and `strides` differ in rank, when the arithmetic overflows, or when the
/// range does not fit in `buffer_len` elements.
pub fn strided_range(
    op: &str,
    dims: &[usize],
    strides: &[usize],
    start: usize,
    buffer_len: usize,
) -> Result<Option<Range<usize>>, RocmError> {
    if dims.len() != strides.len() {
        return Err(RocmError::layout(
            op,
            format!("{} dims but {} strides", dims.len(), strides.len()),
        ));
    }
    if dims.contains(&0) {
        return Ok(None);
    }
    let overflow = || {
        RocmError::layout(
            op,
            format!("dims {dims:?} with strides {strides:?} overflow"),
        )
    };
    let mut last = start;
    for (&d, &s) in dims.iter().zip(strides) {
        let reach = (d - 1).checked_mul(s).ok_or_else(overflow)?;
        last = last.checked_add(reach).ok_or_else(overflow)?;
    }
    if last >= buffer_len {
        return Err(RocmError::layout(
            op,
            format!(
                "dims {dims:?}, strides {strides:?} and start offset {start} reach element {last} \
                 but the buffer holds {buffer_len}"
            ),
        ));
    }
    Ok(Some(start..last + 1))
}

/// [`strided_range`] for a candle [`Layout`].
pub fn layout_range(
    op: &str,
    layout: &Layout,
    buffer_len: usize,
) -> Result<Option<Range<usize>>, RocmError> {
    strided_range(
        op,
        layout.dims(),
        layout.stride(),
        layout.start_offset(),
        buffer_len,
    )
}

/// The range touched by a 2D copy of `d1` rows of `d2` elements, rows `stride1` apart, starting
/// at `offset` (`None` when nothing is copied).
pub fn copy2d_range(
    op: &str,
    d1: usize,
    d2: usize,
    stride1: usize,
    offset: usize,
    buffer_len: usize,
) -> Result<Option<Range<usize>>, RocmError> {
    strided_range(op, &[d1, d2], &[stride1, 1], offset, buffer_len)
}

/// A 2-D copy: `d1` rows of `d2` elements, source rows `src_s` apart from element `src_o`,
/// destination rows `dst_s` apart from `dst_o` (as candle's `BackendStorage::copy2d` takes
/// them); see [`RocmStorage::copy2d_pair`](crate::RocmStorage::copy2d_pair).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copy2dSpec {
    /// Rows.
    pub d1: usize,
    /// Elements per row.
    pub d2: usize,
    /// Source row stride.
    pub src_s: usize,
    /// Destination row stride.
    pub dst_s: usize,
    /// Source start.
    pub src_o: usize,
    /// Destination start.
    pub dst_o: usize,
}

/// The source and destination element ranges of a `copy2d`.
pub type Copy2dRanges = (Range<usize>, Range<usize>);

/// Source and destination ranges of `copy2d`; refuses destination rows that overlap each other
/// (the result would depend on the order in which threads write).
#[allow(clippy::too_many_arguments)]
pub fn copy2d_ranges(
    d1: usize,
    d2: usize,
    src_stride1: usize,
    dst_stride1: usize,
    src_offset: usize,
    dst_offset: usize,
    src_len: usize,
    dst_len: usize,
) -> Result<Option<Copy2dRanges>, RocmError> {
    let src = copy2d_range("copy2d (source)", d1, d2, src_stride1, src_offset, src_len)?;
    let dst = copy2d_range(
        "copy2d (destination)",
        d1,
        d2,
        dst_stride1,
        dst_offset,
        dst_len,
    )?;
    match (src, dst) {
        (Some(s), Some(d)) => {
            if d1 > 1 && dst_stride1 < d2 {
                return Err(RocmError::layout(
                    "copy2d",
                    format!(
                        "destination rows of {d2} elements overlap with row stride {dst_stride1}"
                    ),
                ));
            }
            Ok(Some((s, d)))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Shape;

    fn range(l: &Layout, len: usize) -> Option<Range<usize>> {
        layout_range("t", l, len).unwrap()
    }

    #[test]
    fn contiguous_layouts_touch_exactly_their_elements() {
        let l = Layout::contiguous((2, 3));
        assert_eq!(range(&l, 6), Some(0..6));
        assert_eq!(range(&l, 10), Some(0..6));
        let l = Layout::contiguous_with_offset((2, 3), 4);
        assert_eq!(range(&l, 10), Some(4..10));
        assert!(layout_range("t", &l, 9).is_err());
    }

    #[test]
    fn scalars_touch_one_element() {
        let l = Layout::contiguous(Shape::from(()));
        assert_eq!(range(&l, 1), Some(0..1));
        let l = Layout::contiguous_with_offset(Shape::from(()), 3);
        assert_eq!(range(&l, 4), Some(3..4));
        assert!(layout_range("t", &l, 3).is_err());
    }

    #[test]
    fn transposed_narrowed_and_broadcast_views() {
        // (3, 4) transposed to (4, 3): strides (1, 4), reaches 3 + 2*4 = 11.
        let l = Layout::contiguous((3, 4)).transpose(0, 1).unwrap();
        assert_eq!(l.stride(), &[1, 4]);
        assert_eq!(range(&l, 12), Some(0..12));
        // Narrow rows 1..3 of (4, 5): start 5, reaches 5 + 1*5 + 4 = 14.
        let l = Layout::contiguous((4, 5)).narrow(0, 1, 2).unwrap();
        assert_eq!(range(&l, 20), Some(5..15));
        // Narrow columns 2..4 of (4, 5): start 2, reaches 2 + 3*5 + 1 = 18.
        let l = Layout::contiguous((4, 5)).narrow(1, 2, 2).unwrap();
        assert_eq!(range(&l, 20), Some(2..19));
        // Broadcast (1, 3) to (5, 3): stride 0 on dim 0.
        let l = Layout::contiguous((1, 3)).broadcast_as((5, 3)).unwrap();
        assert_eq!(l.stride(), &[0, 1]);
        assert_eq!(range(&l, 3), Some(0..3));
    }

    #[test]
    fn empty_views_touch_nothing_even_past_the_end() {
        let l = Layout::contiguous_with_offset((0, 3), 100);
        assert_eq!(range(&l, 4), None);
        let l = Layout::contiguous((4, 5)).narrow(1, 5, 0).unwrap();
        assert_eq!(range(&l, 20), None);
    }

    #[test]
    fn bad_layouts_are_errors_not_launches() {
        let e = strided_range("op", &[2, 3], &[3], 0, 6)
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 dims but 1 strides"), "{e}");
        let e = strided_range("op", &[2, 3], &[3, 1], 1, 6)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("reach element 6") && e.contains("holds 6"),
            "{e}"
        );
        let e = strided_range("op", &[3, 2], &[usize::MAX, 1], 0, 6)
            .unwrap_err()
            .to_string();
        assert!(e.contains("overflow"), "{e}");
    }

    #[test]
    fn copy2d_ranges_check_both_sides() {
        // 3 rows of 2 from a (3, 4) source at offset 1 into a packed (3, 2) destination.
        let (s, d) = copy2d_ranges(3, 2, 4, 2, 1, 0, 12, 6).unwrap().unwrap();
        assert_eq!(s, 1..11);
        assert_eq!(d, 0..6);
        assert!(copy2d_ranges(0, 2, 4, 2, 100, 100, 12, 6)
            .unwrap()
            .is_none());
        assert!(
            copy2d_ranges(3, 2, 4, 2, 3, 0, 12, 6).is_err(),
            "source past the end"
        );
        assert!(
            copy2d_ranges(3, 2, 4, 2, 0, 1, 12, 6).is_err(),
            "destination past the end"
        );
        assert!(
            copy2d_ranges(3, 2, 4, 1, 0, 0, 12, 6).is_err(),
            "overlapping rows"
        );
        assert!(
            copy2d_ranges(1, 2, 0, 0, 0, 0, 12, 6).is_ok(),
            "one row never overlaps"
        );
    }
}
