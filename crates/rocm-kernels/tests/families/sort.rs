//! GPU tests of the `sort` family (a module of tests/gpu.rs): arg_sort along the last dim,
//! ascending and descending, all 9 dtypes, rows of 1 to `max_cols` elements (powers of two and
//! not), with ties (checked against a stable sort, as Candle's CPU backend uses), -0.0/0.0,
//! infinities and NaN (defined as larger than every number), many rows (grid-stride), the
//! shared-memory limit (a typed error) and empty inputs.

use std::cmp::Ordering;

use super::*;
use rocm_kernels::sort as st;

/// The total order of values: exact for every type (integers as i128, floats as f64), NaN
/// above everything; `None` where `partial_cmp` has no answer (a NaN).
fn value_cmp<T: TT>(a: T, b: T) -> Option<Ordering> {
    if T::IS_FLOAT {
        a.to_f64().partial_cmp(&b.to_f64())
    } else {
        Some(a.to_i128().cmp(&b.to_i128()))
    }
}

/// The kernels' order: stable by value, NaN above everything (NaNs equal), ties by index.
fn reference<T: TT>(row: &[T], ascending: bool) -> Vec<u32> {
    let total = |a: T, b: T| match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => value_cmp(a, b).unwrap(),
    };
    let mut idx: Vec<u32> = (0..row.len() as u32).collect();
    idx.sort_by(|&i, &j| {
        let o = total(row[i as usize], row[j as usize]);
        if ascending {
            o
        } else {
            o.reverse()
        }
    });
    idx
}

/// Candle's CPU arg_sort (candle-core 0.11.1 `sort.rs`): a stable sort with
/// `partial_cmp().unwrap_or(Greater)`; a total order only without NaN.
fn candle_cpu<T: TT>(row: &[T], ascending: bool) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..row.len() as u32).collect();
    if ascending {
        idx.sort_by(|&i, &j| {
            value_cmp(row[i as usize], row[j as usize]).unwrap_or(Ordering::Greater)
        });
    } else {
        idx.sort_by(|&j, &i| {
            value_cmp(row[i as usize], row[j as usize]).unwrap_or(Ordering::Greater)
        });
    }
    idx
}

/// Row values: `style` 0 uniform, 1 few distinct values (many ties), 2 specials (±0, ±inf,
/// NaN for floats; MIN/MAX for integers) mixed in.
fn gen_sort_value<T: TT>(rng: &mut Lcg, style: u64) -> T {
    if T::IS_FLOAT {
        match style {
            0 => T::from_f64(rng.uniform(-1000.0, 1000.0)),
            1 => T::from_f64(rng.below(5) as f64 - 2.0),
            _ => match rng.below(8) {
                0 => T::from_f64(f64::NAN),
                1 => T::from_f64(-0.0),
                2 => T::from_f64(0.0),
                3 => T::from_f64(f64::INFINITY),
                4 => T::from_f64(f64::NEG_INFINITY),
                _ => T::from_f64(rng.uniform(-10.0, 10.0)),
            },
        }
    } else {
        match style {
            1 => T::from_i128(rng.below(5) as i128),
            _ => gen_int(rng),
        }
    }
}

fn check_sort<T: TT>(s: &Stream, nrows: usize, ncols: usize, ascending: bool, style: u64) {
    let label = format!(
        "arg_sort_{} {nrows}x{ncols} {} style {style}",
        T::NAME,
        if ascending { "asc" } else { "desc" }
    );
    let seed = seed_for(&label);
    let ctx = format!("{label} (seed {seed:#x})");
    let mut rng = Lcg::new(seed);
    // The matrix starts 3 elements into its buffer (an offset view) and is followed by more.
    let host: Vec<T> = (0..nrows * ncols + 5)
        .map(|_| gen_sort_value::<T>(&mut rng, style))
        .collect();
    let buf = s.alloc_from_host(&host).expect("upload");
    let mut out = Output::<u32>::new(s, nrows * ncols);
    st::arg_sort(
        s,
        buf.slice(3..).expect("view"),
        nrows,
        ncols,
        ascending,
        &mut out.view(),
    )
    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let got = out.read(&ctx);
    for r in 0..nrows {
        let row = &host[3 + r * ncols..3 + (r + 1) * ncols];
        let want = reference(row, ascending);
        if !row.iter().any(|x| x.is_nan()) {
            assert_eq!(
                want,
                candle_cpu(row, ascending),
                "{ctx}: the reference differs from Candle's CPU sort (test bug)"
            );
        }
        let g = &got[r * ncols..(r + 1) * ncols];
        if g != want.as_slice() {
            let first = (0..ncols).find(|&i| g[i] != want[i]).unwrap();
            panic!(
                "{ctx}: row {r} differs from position {first}: got {:?} want {:?} (values {:?} \
                 vs {:?})",
                &g[first..(first + 4).min(ncols)],
                &want[first..(first + 4).min(ncols)],
                row[g[first] as usize],
                row[want[first] as usize]
            );
        }
    }
}

fn sort_for<T: TT>(s: &Stream, pairs: &mut Vec<String>, cases: &mut usize) {
    let max = st::max_cols::<T>(s);
    let mut lengths = vec![1usize, 2, 3, 7, 64, 100, 1000, 1023, 1024, 1025];
    lengths.push(max);
    for &ncols in &lengths {
        let nrows = match ncols {
            n if n <= 8 => 37,
            n if n <= 1024 => 5,
            _ => 2,
        };
        for ascending in [true, false] {
            for style in 0..3 {
                check_sort::<T>(s, nrows, ncols, ascending, style);
                *cases += 1;
            }
        }
    }
    // More rows than blocks in the grid (grid-stride over rows).
    check_sort::<T>(s, 70_000, 3, true, 1);
    check_sort::<T>(s, 70_000, 3, false, 2);
    // Empty inputs launch nothing.
    for (nrows, ncols) in [(0usize, 5usize), (4, 0)] {
        let buf = s.alloc_from_host(&[T::from_i128(1); 4]).unwrap();
        let mut out = Output::<u32>::new(s, 0);
        st::arg_sort(s, buf.as_slice(), nrows, ncols, true, &mut out.view())
            .unwrap_or_else(|e| panic!("empty {nrows}x{ncols} {}: {e}", T::NAME));
        assert!(out.untouched());
    }
    // Rows above the shared-memory limit: a typed error, nothing launched.
    let buf = s.alloc_from_host(&vec![T::from_i128(1); max + 1]).unwrap();
    let mut out = Output::<u32>::new(s, max + 1);
    let e = st::arg_sort(s, buf.as_slice(), 1, max + 1, true, &mut out.view()).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{}: {e}", T::NAME);
    assert!(out.untouched());
    // Wrong lengths: layout errors.
    let e = st::arg_sort(s, buf.slice(..4).unwrap(), 1, 5, true, &mut out.view()).unwrap_err();
    assert!(matches!(e, Error::Layout { .. }), "{}: {e}", T::NAME);
    let e = st::arg_sort(s, buf.as_slice(), 1, 4, true, &mut out.view()).unwrap_err();
    assert!(matches!(e, Error::Layout { .. }), "{}: {e}", T::NAME);
    assert!(out.untouched());
    *cases += 7;
    pairs.push(format!("asort_{}(max {max})", T::NAME));
}

#[test]
#[ignore = "needs a GPU"]
fn arg_sort_all_dtypes() {
    let s = stream();
    let (mut pairs, mut cases) = (Vec::new(), 0);
    sort_for::<u8>(&s, &mut pairs, &mut cases);
    sort_for::<u32>(&s, &mut pairs, &mut cases);
    sort_for::<i16>(&s, &mut pairs, &mut cases);
    sort_for::<i32>(&s, &mut pairs, &mut cases);
    sort_for::<i64>(&s, &mut pairs, &mut cases);
    sort_for::<bf16>(&s, &mut pairs, &mut cases);
    sort_for::<f16>(&s, &mut pairs, &mut cases);
    sort_for::<f32>(&s, &mut pairs, &mut cases);
    sort_for::<f64>(&s, &mut pairs, &mut cases);
    println!(
        "sort: asc/desc for {} dtypes over {cases} cases: {}",
        pairs.len(),
        pairs.join(" ")
    );
}
