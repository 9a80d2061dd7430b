//! Statistics over arrays of fixed-width little-endian numbers (`u8` to `f64`): count,
//! sum, min, max, mean, variance, and a histogram on fixed bin edges.
//!
//! A record never crosses a chunk: chunk sizes are powers of two and record widths (1, 2,
//! 4 or 8 bytes) divide them, so every data chunk holds whole records and each drive
//! folds its own. Within a run, the bytes may still arrive in pieces cut anywhere; the
//! fold carries a cut record over to the next piece.
//!
//! Mean and variance are kept as Welford's `(count, mean, M2)`: each block of up to 1024
//! values is summarised in two passes over memory the CPU already holds (its mean, then
//! the sum of squared deviations from it), and blocks and partials are joined with Chan,
//! Golub and Le Veque's pairwise update, never as a naive sum of squares, which cancels
//! catastrophically on data far from zero. Integer sums are exact (128-bit). Float sums
//! are compensated (Neumaier), and a merged mean or variance may differ from a
//! single-pass one only in the last bits: the property tests bound it. NaNs are counted
//! apart and left out of everything else. Histogram counts are integers on fixed edges,
//! so they add up exactly.

// Statistics are floats: counts and integer values past 2^53 lose their last digits in
// the mean and variance by nature (the exact integer sum is kept apart).
#![allow(clippy::cast_precision_loss)]

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The record formats: little-endian fixed-width numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Unsigned bytes.
    U8,
    /// `u16`, little-endian.
    U16le,
    /// `u32`, little-endian.
    U32le,
    /// `u64`, little-endian.
    U64le,
    /// `i32`, little-endian.
    I32le,
    /// `i64`, little-endian.
    I64le,
    /// IEEE-754 single precision, little-endian.
    F32le,
    /// IEEE-754 double precision, little-endian.
    F64le,
}

impl Format {
    /// Bytes per record.
    #[must_use]
    pub fn width(self) -> usize {
        match self {
            Format::U8 => 1,
            Format::U16le => 2,
            Format::U32le | Format::I32le | Format::F32le => 4,
            Format::U64le | Format::I64le | Format::F64le => 8,
        }
    }

    fn is_float(self) -> bool {
        matches!(self, Format::F32le | Format::F64le)
    }
}

/// Values per block summarised at once: small enough to stay in the L1 cache.
const BLOCK: usize = 1024;

/// What a statistics operation computes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// The record format.
    pub format: Format,
    /// Histogram bin edges, ascending: bin `i` holds values in `[edges[i], edges[i+1])`,
    /// the last bin also its upper edge. None: no histogram.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edges: Option<Vec<f64>>,
}

/// Most histogram bins one operation may ask for.
pub const MAX_BINS: usize = 4096;

/// The sum of the values: exact for integers, compensated for floats.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sum {
    /// An exact integer sum.
    Int(i128),
    /// A Neumaier-compensated float sum: `sum + compensation`.
    Float {
        /// The running sum.
        sum: f64,
        /// What rounding took from it.
        compensation: f64,
    },
}

impl Sum {
    fn zero(format: Format) -> Self {
        if format.is_float() {
            Sum::Float {
                sum: 0.0,
                compensation: 0.0,
            }
        } else {
            Sum::Int(0)
        }
    }

    fn add(&mut self, other: Sum) {
        match (self, other) {
            (Sum::Int(a), Sum::Int(b)) => *a += b,
            (
                Sum::Float { sum, compensation },
                Sum::Float {
                    sum: s2,
                    compensation: c2,
                },
            ) => {
                neumaier(sum, compensation, s2);
                *compensation += c2;
            }
            // Partials of one operation have one format; a mixed pair is a caller's bug,
            // and the float form is the one that cannot be wrong by more than rounding.
            (a, b) => {
                *a = Sum::Float {
                    sum: a.value() + b.value(),
                    compensation: 0.0,
                }
            }
        }
    }

    /// The sum as a float.
    #[must_use]
    pub fn value(self) -> f64 {
        match self {
            Sum::Int(v) => v as f64,
            Sum::Float { sum, compensation } => sum + compensation,
        }
    }
}

fn neumaier(sum: &mut f64, comp: &mut f64, x: f64) {
    let t = *sum + x;
    if sum.abs() >= x.abs() {
        *comp += (*sum - t) + x;
    } else {
        *comp += (x - t) + *sum;
    }
    *sum = t;
}

/// The partial result of statistics over some runs of records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatsPartial {
    /// Values counted (NaNs apart).
    pub count: u64,
    /// NaN values, left out of everything else.
    pub nan: u64,
    /// Smallest value (None before any).
    pub min: Option<f64>,
    /// Largest value.
    pub max: Option<f64>,
    /// Their sum.
    pub sum: Sum,
    /// Welford's mean.
    pub mean: f64,
    /// Welford's M2: the sum of squared deviations from the mean.
    pub m2: f64,
    /// Histogram counts per bin, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bins: Option<Vec<u64>>,
    /// Values below the first edge.
    #[serde(default)]
    pub below: u64,
    /// Values above the last edge (or NaN-free values outside otherwise).
    #[serde(default)]
    pub above: u64,
}

/// The finished statistics (the `result` of a `stats` operation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatsResult {
    /// Values counted (NaNs apart).
    pub count: u64,
    /// NaN values seen.
    pub nan: u64,
    /// Their sum (exact for integer formats).
    pub sum: f64,
    /// Smallest value; None when there were none.
    pub min: Option<f64>,
    /// Largest value.
    pub max: Option<f64>,
    /// Mean; None when there were no values.
    pub mean: Option<f64>,
    /// Population variance (M2 / count); None when there were no values.
    pub variance: Option<f64>,
    /// Sample variance (M2 / (count - 1)); None with fewer than two values.
    pub sample_variance: Option<f64>,
    /// The histogram, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram: Option<Histogram>,
}

/// A histogram on fixed edges.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    /// The bin edges asked for.
    pub edges: Vec<f64>,
    /// Values per bin.
    pub counts: Vec<u64>,
    /// Values below the first edge.
    pub below: u64,
    /// Values above the last edge.
    pub above: u64,
}

impl Stats {
    /// Checks the operation: at least two finite edges, strictly ascending, at most
    /// [`MAX_BINS`] bins.
    ///
    /// # Errors
    /// [`Error::BadArgument`] naming what is wrong.
    pub fn validate(&self) -> Result<()> {
        let Some(edges) = &self.edges else {
            return Ok(());
        };
        if edges.len() < 2 || edges.len() > MAX_BINS + 1 {
            return Err(Error::BadArgument(format!(
                "histogram edges: between 2 and {} of them, got {}",
                MAX_BINS + 1,
                edges.len()
            )));
        }
        if edges.iter().any(|e| !e.is_finite()) || edges.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::BadArgument(
                "histogram edges must be finite and strictly ascending".into(),
            ));
        }
        Ok(())
    }

    /// The partial of no records.
    #[must_use]
    pub fn empty(&self) -> StatsPartial {
        StatsPartial {
            count: 0,
            nan: 0,
            min: None,
            max: None,
            sum: Sum::zero(self.format),
            mean: 0.0,
            m2: 0.0,
            bins: self.edges.as_ref().map(|e| vec![0; e.len() - 1]),
            below: 0,
            above: 0,
        }
    }

    /// A fold over one run of records that starts at object offset `offset`.
    ///
    /// # Errors
    /// [`Error::BadArgument`] when `offset` is not a multiple of the record width.
    pub fn fold(&self, offset: u64) -> Result<StatsFold<'_>> {
        if !offset.is_multiple_of(self.format.width() as u64) {
            return Err(Error::BadArgument(format!(
                "a run at offset {offset} does not start on a {}-byte record",
                self.format.width()
            )));
        }
        Ok(StatsFold {
            stats: self,
            partial: self.empty(),
            carry: Vec::with_capacity(8),
            block: Vec::with_capacity(BLOCK),
        })
    }

    /// The partial of `left`'s runs followed by `right`'s (the order does not change the
    /// counts; it is kept so that merges repeat bit for bit).
    #[must_use]
    pub fn merge(&self, mut left: StatsPartial, right: StatsPartial) -> StatsPartial {
        join_moments(&mut left, right.count, right.mean, right.m2);
        left.nan += right.nan;
        left.min = min_opt(left.min, right.min);
        left.max = max_opt(left.max, right.max);
        left.sum.add(right.sum);
        if let (Some(a), Some(b)) = (left.bins.as_mut(), right.bins) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
        left.below += right.below;
        left.above += right.above;
        left
    }

    /// The statistics of everything merged into `p`.
    #[must_use]
    pub fn finish(&self, p: &StatsPartial) -> StatsResult {
        let n = p.count as f64;
        StatsResult {
            count: p.count,
            nan: p.nan,
            sum: p.sum.value(),
            min: p.min,
            max: p.max,
            mean: (p.count > 0).then_some(p.mean),
            variance: (p.count > 0).then(|| p.m2 / n),
            sample_variance: (p.count > 1).then(|| p.m2 / (n - 1.0)),
            histogram: self.edges.as_ref().map(|edges| Histogram {
                edges: edges.clone(),
                counts: p.bins.clone().unwrap_or_default(),
                below: p.below,
                above: p.above,
            }),
        }
    }
}

/// Chan et al.: joins `(count, mean, m2)` of a second group into the first.
fn join_moments(p: &mut StatsPartial, n_b: u64, mean_b: f64, m2_b: f64) {
    if n_b == 0 {
        return;
    }
    if p.count == 0 {
        (p.count, p.mean, p.m2) = (n_b, mean_b, m2_b);
        return;
    }
    let (na, nb) = (p.count as f64, n_b as f64);
    let n = na + nb;
    let delta = mean_b - p.mean;
    p.mean += delta * nb / n;
    p.m2 += m2_b + delta * delta * na * nb / n;
    p.count += n_b;
}

fn min_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    }
}

/// Statistics being folded over one run of records, piece by piece.
#[derive(Debug)]
pub struct StatsFold<'a> {
    stats: &'a Stats,
    partial: StatsPartial,
    /// The start of a record cut at the end of the last piece.
    carry: Vec<u8>,
    /// Values waiting to be summarised as a block.
    block: Vec<f64>,
}

impl StatsFold<'_> {
    /// Folds the next bytes of the run.
    pub fn update(&mut self, mut bytes: &[u8]) {
        let w = self.stats.format.width();
        if !self.carry.is_empty() {
            let take = (w - self.carry.len()).min(bytes.len());
            self.carry.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.carry.len() < w {
                return;
            }
            let record = std::mem::take(&mut self.carry);
            self.values(&record);
        }
        let whole = bytes.len() / w * w;
        self.values(&bytes[..whole]);
        self.carry.extend_from_slice(&bytes[whole..]);
    }

    /// The run's partial.
    ///
    /// # Errors
    /// [`Error::BadArgument`] when the run ended inside a record.
    pub fn finish(mut self) -> Result<StatsPartial> {
        if !self.carry.is_empty() {
            return Err(Error::BadArgument(format!(
                "the run ends {} bytes into a {}-byte record",
                self.carry.len(),
                self.stats.format.width()
            )));
        }
        self.flush();
        Ok(self.partial)
    }

    fn values(&mut self, bytes: &[u8]) {
        macro_rules! each {
            ($t:ty, $n:expr, $int:expr) => {{
                let (records, _) = bytes.as_chunks::<$n>();
                for r in records {
                    let v = <$t>::from_le_bytes(*r);
                    if $int {
                        if let Sum::Int(s) = &mut self.partial.sum {
                            *s += v as i128;
                        }
                    }
                    self.push(v as f64);
                }
            }};
        }
        match self.stats.format {
            Format::U8 => each!(u8, 1, true),
            Format::U16le => each!(u16, 2, true),
            Format::U32le => each!(u32, 4, true),
            Format::U64le => each!(u64, 8, true),
            Format::I32le => each!(i32, 4, true),
            Format::I64le => each!(i64, 8, true),
            Format::F32le => each!(f32, 4, false),
            Format::F64le => each!(f64, 8, false),
        }
    }

    #[inline]
    fn push(&mut self, v: f64) {
        if v.is_nan() {
            self.partial.nan += 1;
            return;
        }
        self.block.push(v);
        if self.block.len() == BLOCK {
            self.flush();
        }
    }

    /// Summarises the block: two passes over values in cache, then one pairwise join.
    fn flush(&mut self) {
        if self.block.is_empty() {
            return;
        }
        let n = self.block.len();
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        let mut sum = 0.0;
        for &v in &self.block {
            sum += v;
            lo = lo.min(v);
            hi = hi.max(v);
        }
        let mean = sum / n as f64;
        let m2: f64 = self.block.iter().map(|&v| (v - mean) * (v - mean)).sum();
        let p = &mut self.partial;
        join_moments(p, n as u64, mean, m2);
        p.min = min_opt(p.min, Some(lo));
        p.max = max_opt(p.max, Some(hi));
        if let Sum::Float {
            sum: s,
            compensation,
        } = &mut p.sum
        {
            for &v in &self.block {
                neumaier(s, compensation, v);
            }
        }
        if let (Some(edges), Some(bins)) = (&self.stats.edges, p.bins.as_mut()) {
            let (first, last) = (edges[0], edges[edges.len() - 1]);
            let top = bins.len() - 1;
            for &v in &self.block {
                if v < first {
                    p.below += 1;
                } else if v > last {
                    p.above += 1;
                } else {
                    // The bin whose lower edge is the last one <= v; the top edge closes
                    // the last bin.
                    let i = edges.partition_point(|&e| e <= v).saturating_sub(1);
                    bins[i.min(top)] += 1;
                }
            }
        }
        self.block.clear();
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn f64s(values: &[f64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// The partial of `bytes` folded as runs cut at `cuts` (record-aligned), each fed in
    /// pieces of `piece` bytes cut anywhere, merged left to right.
    fn runs(stats: &Stats, bytes: &[u8], cuts: &[usize], piece: usize) -> StatsPartial {
        let w = stats.format.width();
        let mut bounds: Vec<usize> = cuts
            .iter()
            .map(|c| c / w * w)
            .filter(|&c| c < bytes.len())
            .collect();
        bounds.push(0);
        bounds.push(bytes.len());
        bounds.sort_unstable();
        bounds.dedup();
        bounds
            .windows(2)
            .map(|r| {
                let mut f = stats.fold(r[0] as u64).unwrap();
                for p in bytes[r[0]..r[1]].chunks(piece) {
                    f.update(p);
                }
                f.finish().unwrap()
            })
            .fold(stats.empty(), |a, b| stats.merge(a, b))
    }

    #[test]
    fn known_values_and_far_from_zero() {
        // Values near 1e9 with a variance of 2/3: a naive sum of squares loses it all.
        let values: Vec<f64> = (0..300_000).map(|i| 1e9 + f64::from(i % 3)).collect();
        let stats = Stats {
            format: Format::F64le,
            edges: Some(vec![1e9, 1e9 + 1.0, 1e9 + 2.0]),
        };
        let r = stats.finish(&runs(&stats, &f64s(&values), &[8 * 1000, 8 * 77_777], 5003));
        assert_eq!(
            (r.count, r.min, r.max),
            (300_000, Some(1e9), Some(1e9 + 2.0))
        );
        assert!((r.mean.unwrap() - (1e9 + 1.0)).abs() < 1e-6);
        assert!(
            (r.variance.unwrap() - 2.0 / 3.0).abs() < 1e-6,
            "{:?}",
            r.variance
        );
        let h = r.histogram.unwrap();
        assert_eq!((h.counts, h.below, h.above), (vec![100_000, 200_000], 0, 0));
    }

    #[test]
    fn integers_sum_exactly_and_nans_are_counted_apart() {
        let stats = Stats {
            format: Format::I64le,
            edges: None,
        };
        let values = [i64::MAX, i64::MAX, -5];
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let p = runs(&stats, &bytes, &[8], 3);
        assert_eq!(p.sum, Sum::Int(2 * i128::from(i64::MAX) - 5));
        let floats = Stats {
            format: Format::F32le,
            edges: None,
        };
        let bytes: Vec<u8> = [1.0f32, f32::NAN, 3.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let r = floats.finish(&runs(&floats, &bytes, &[], 1));
        assert_eq!((r.count, r.nan, r.mean), (2, 1, Some(2.0)));
    }

    #[test]
    fn bad_edges_and_cut_records_are_refused() {
        for edges in [vec![1.0], vec![2.0, 1.0], vec![0.0, f64::NAN]] {
            let s = Stats {
                format: Format::U8,
                edges: Some(edges),
            };
            assert!(s.validate().is_err());
        }
        let s = Stats {
            format: Format::U32le,
            edges: None,
        };
        assert!(s.fold(2).is_err());
        let mut f = s.fold(0).unwrap();
        f.update(&[1, 2, 3, 4, 5]);
        assert!(f.finish().is_err());
    }

    proptest! {
        /// Counts, min, max, integer sums and histograms of runs cut anywhere merge bit for
        /// bit into the single-pass result; mean and variance within 1e-9 relative.
        #[test]
        fn merged_runs_equal_one_pass(values in prop::collection::vec(-1e6f64..1e6, 0..5000), cuts in prop::collection::vec(0usize..40_000, 0..6), piece in 1usize..700) {
            let stats = Stats { format: Format::F64le, edges: Some(vec![-1e6, -10.0, 0.0, 10.0, 1e5]) };
            let bytes = f64s(&values);
            let one = {
                let mut f = stats.fold(0).unwrap();
                f.update(&bytes);
                f.finish().unwrap()
            };
            let many = runs(&stats, &bytes, &cuts, piece);
            prop_assert_eq!(many.count, one.count);
            prop_assert_eq!(many.min, one.min);
            prop_assert_eq!(many.max, one.max);
            prop_assert_eq!(&many.bins, &one.bins);
            prop_assert_eq!((many.below, many.above), (one.below, one.above));
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()));
            prop_assert!(close(many.mean, one.mean), "{} {}", many.mean, one.mean);
            prop_assert!(close(many.m2, one.m2), "{} {}", many.m2, one.m2);
            prop_assert!(close(many.sum.value(), one.sum.value()));
            // The reference: plain two-pass statistics over the values.
            if !values.is_empty() {
                let n = values.len() as f64;
                let mean = values.iter().sum::<f64>() / n;
                let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
                let r = stats.finish(&many);
                prop_assert!(close(r.mean.unwrap(), mean));
                prop_assert!((r.variance.unwrap() - var).abs() <= 1e-6 * (1.0 + var));
                let in_bins: u64 = r.histogram.unwrap().counts.iter().sum();
                prop_assert_eq!(in_bins, values.iter().filter(|v| (-1e6..=1e5).contains(*v)).count() as u64);
            }
        }

        /// Every integer format: exact sums and extremes, whatever the cuts.
        #[test]
        fn integer_formats_are_exact(raw in prop::collection::vec(any::<u8>(), 0..4000), cuts in prop::collection::vec(0usize..4000, 0..5), piece in 1usize..50) {
            for format in [Format::U8, Format::U16le, Format::U32le, Format::U64le, Format::I32le, Format::I64le] {
                let w = format.width();
                let bytes = &raw[..raw.len() / w * w];
                let stats = Stats { format, edges: None };
                let p = runs(&stats, bytes, &cuts, piece);
                let want: Vec<i128> = bytes.chunks(w).map(|r| {
                    let mut b = [0u8; 8];
                    b[..w].copy_from_slice(r);
                    match format {
                        Format::I32le => i128::from(i32::from_le_bytes(b[..4].try_into().unwrap())),
                        Format::I64le => i128::from(i64::from_le_bytes(b)),
                        _ => i128::from(u64::from_le_bytes(b)),
                    }
                }).collect();
                prop_assert_eq!(p.count, want.len() as u64);
                prop_assert_eq!(p.sum, Sum::Int(want.iter().sum()));
                prop_assert_eq!(p.min, want.iter().min().map(|&v| v as f64));
                prop_assert_eq!(p.max, want.iter().max().map(|&v| v as f64));
            }
        }
    }
}
