//! Statistics over arrays of fixed-width little-endian numbers (`u8` to `f64`): count,
//! sum, min, max, mean, variance, and a histogram on fixed bin edges.
//!
//! Records are aligned in the object (record `r` is bytes `r * w..(r + 1) * w`). In every
//! stripe but the last, chunks are powers of two and hold whole records, so each drive
//! folds its own; the last stripe's chunks are shorter (the stripe's length over `k`),
//! and the parts of a multipart object may end anywhere, so a run can begin or end inside
//! a record. The fold keeps those bytes as **fragments** with their offsets; merging
//! joins fragments that meet and folds the records they complete, so every record counts
//! exactly once, whatever the runs. Within a run, the bytes may also arrive in pieces cut
//! anywhere; the fold carries a cut record over to the next piece.
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

use crate::sketch::{self, Mapping, Quantiles, Sketch};
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
    /// Numbers written as text, one per line.
    Text,
    /// One column of comma-separated values (RFC 4180 quoting).
    Csv,
}

impl Format {
    /// Bytes per record.
    #[must_use]
    pub fn width(self) -> usize {
        match self {
            Format::U8 | Format::Text | Format::Csv => 1,
            Format::U16le => 2,
            Format::U32le | Format::I32le | Format::F32le => 4,
            Format::U64le | Format::I64le | Format::F64le => 8,
        }
    }

    fn is_float(self) -> bool {
        matches!(
            self,
            Format::F32le | Format::F64le | Format::Text | Format::Csv
        )
    }

    /// Whether records are text (lines), not fixed-width numbers.
    #[must_use]
    pub fn is_text(self) -> bool {
        matches!(self, Format::Text | Format::Csv)
    }
}

/// Values per block summarised at once: small enough to stay in the L1 cache.
const BLOCK: usize = 1024;

/// What a statistics operation computes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stats {
    /// The record format.
    pub format: Format,
    /// Histogram bin edges, ascending: bin `i` holds values in `[edges[i], edges[i+1])`,
    /// the last bin also its upper edge. None: no histogram.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edges: Option<Vec<f64>>,
    /// A histogram of this many equal bins between the data's minimum and maximum, found
    /// by a first pass ([`Stats::with_bins_over`] turns it into `edges`). Not with
    /// `edges`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bins: Option<usize>,
    /// Quantiles to answer (ranks in `[0, 1]`, at most
    /// [`MAX_QUANTILES`](crate::sketch::MAX_QUANTILES)), from a DDSketch within
    /// `accuracy`. None: no quantiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantiles: Option<Vec<f64>>,
    /// The quantiles' relative accuracy (default
    /// [`DEFAULT_ACCURACY`](crate::sketch::DEFAULT_ACCURACY), 1%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
    /// For `csv`: the column, by 0-based index (default 0) or by its name in the header
    /// (with `header`; the coordinator reads the header and asks the drives by index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<Column>,
    /// For `csv`: the field delimiter, one ASCII character (default `,`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delimiter: Option<char>,
    /// For `text` and `csv`: whether the object's first record is a header, skipped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub header: bool,
}

/// A CSV column: its index, or its name in the header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Column {
    /// 0-based.
    Index(usize),
    /// As the header names it.
    Name(String),
}

/// Most histogram bins one operation may ask for: its edges travel in every request to
/// a drive, which takes bodies of up to 64 KiB by default.
pub const MAX_BINS: usize = 1024;

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
    /// Values above the last edge.
    #[serde(default)]
    pub above: u64,
    /// Bytes of records cut by the ends of runs, not yet folded, by object offset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fragments: Vec<Fragment>,
    /// The values' sketch, when quantiles are asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sketch: Option<Sketch>,
}

/// Bytes of records a run cut: the start of a record at a run's end, or the end of one
/// at a run's start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fragment {
    /// Object offset of the first byte.
    pub offset: u64,
    /// The bytes, base64.
    #[serde(with = "crate::b64")]
    pub bytes: Vec<u8>,
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
    /// The quantiles, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantiles: Option<Quantiles>,
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
    /// Count, sum, extremes, mean and variance of `format` records; no histogram, no
    /// quantiles.
    #[must_use]
    pub fn new(format: Format) -> Self {
        Self {
            format,
            edges: None,
            bins: None,
            quantiles: None,
            accuracy: None,
            column: None,
            delimiter: None,
            header: false,
        }
    }

    /// The statistics to run once the data's extremes are known: `bins` equal bins from
    /// `min` to `max` as `edges` (one bin of width 1 when they are equal; none when there
    /// are no values: no histogram then).
    #[must_use]
    pub fn with_bins_over(&self, min: Option<f64>, max: Option<f64>) -> Stats {
        let mut s = self.clone();
        let Some(n) = s.bins.take() else {
            return s;
        };
        s.edges = match (min, max) {
            (Some(lo), Some(hi)) if hi > lo => Some(
                (0..=n)
                    .map(|i| {
                        if i == n {
                            hi
                        } else {
                            lo + (hi - lo) * i as f64 / n as f64
                        }
                    })
                    .collect(),
            ),
            (Some(lo), Some(_)) => Some(vec![lo, lo + 1.0]),
            _ => None,
        };
        s
    }

    /// The quantiles' bucket mapping, when quantiles are asked for.
    fn mapping(&self) -> Option<Mapping> {
        self.quantiles.as_ref()?;
        Mapping::new(self.accuracy.unwrap_or(sketch::DEFAULT_ACCURACY)).ok()
    }

    /// Checks the operation: at least two finite edges, strictly ascending, at most
    /// [`MAX_BINS`] bins; quantiles in `[0, 1]`, an accuracy in range.
    ///
    /// # Errors
    /// [`Error::BadArgument`] naming what is wrong.
    pub fn validate(&self) -> Result<()> {
        if let Some(n) = self.bins {
            if self.edges.is_some() {
                return Err(Error::BadArgument(
                    "a histogram takes edges or bins, not both".into(),
                ));
            }
            if n == 0 || n > MAX_BINS {
                return Err(Error::BadArgument(format!(
                    "bins: between 1 and {MAX_BINS}, got {n}"
                )));
            }
        }
        if let Some(qs) = &self.quantiles {
            if qs.is_empty() || qs.len() > sketch::MAX_QUANTILES {
                return Err(Error::BadArgument(format!(
                    "quantiles: between 1 and {} of them, got {}",
                    sketch::MAX_QUANTILES,
                    qs.len()
                )));
            }
            if let Some(q) = qs.iter().find(|q| !(0.0..=1.0).contains(*q)) {
                return Err(Error::BadArgument(format!(
                    "quantiles are ranks between 0 and 1, got {q}"
                )));
            }
            Mapping::new(self.accuracy.unwrap_or(sketch::DEFAULT_ACCURACY))?;
        } else if self.accuracy.is_some() {
            return Err(Error::BadArgument(
                "accuracy applies to quantiles, and none were asked for".into(),
            ));
        }
        if !self.format.is_text() && (self.column.is_some() || self.header) {
            return Err(Error::BadArgument(
                "column and header apply to the text and csv formats".into(),
            ));
        }
        if self.format != Format::Csv && (self.delimiter.is_some() || self.column.is_some()) {
            return Err(Error::BadArgument(
                "column and delimiter apply to the csv format".into(),
            ));
        }
        if matches!(self.column, Some(Column::Name(_))) && !self.header {
            return Err(Error::BadArgument(
                "a column named needs \"header\": true, where the names are".into(),
            ));
        }
        if let Some(d) = self.delimiter
            && (!d.is_ascii() || d == '"' || d == '\n' || d == '\r')
        {
            return Err(Error::BadArgument(format!(
                "the delimiter must be one ASCII character other than a quote or a line end, got {d:?}"
            )));
        }
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
            fragments: Vec::new(),
            sketch: self.quantiles.as_ref().map(|_| Sketch::default()),
        }
    }

    /// A fold over one run of object bytes that starts at object offset `offset`.
    #[must_use]
    pub fn fold(&self, offset: u64) -> StatsFold {
        let w = self.format.width() as u64;
        StatsFold {
            stats: self.clone(),
            partial: self.empty(),
            head: (!offset.is_multiple_of(w)).then(|| Fragment {
                offset,
                bytes: Vec::with_capacity(8),
            }),
            head_len: ((w - offset % w) % w) as usize,
            carry_at: offset.next_multiple_of(w),
            carry: Vec::with_capacity(8),
            block: Vec::with_capacity(BLOCK),
            uniform: self.edges.as_deref().and_then(uniform_bins),
            mapping: self.mapping(),
        }
    }

    /// The partial of `left`'s runs followed by `right`'s (the order does not change the
    /// counts; it is kept so that merges repeat bit for bit).
    #[must_use]
    pub fn merge(&self, mut left: StatsPartial, right: StatsPartial) -> StatsPartial {
        absorb(&mut left, right);
        self.stitch(&mut left);
        left
    }

    /// Joins fragments that meet and folds the records they complete.
    fn stitch(&self, p: &mut StatsPartial) {
        if p.fragments.len() < 2 {
            return;
        }
        p.fragments.sort_by_key(|f| f.offset);
        let mut joined: Vec<Fragment> = Vec::with_capacity(p.fragments.len());
        for f in std::mem::take(&mut p.fragments) {
            match joined.last_mut() {
                Some(last) if last.offset + last.bytes.len() as u64 == f.offset => {
                    last.bytes.extend_from_slice(&f.bytes);
                }
                _ => joined.push(f),
            }
        }
        for f in joined {
            let mut fold = self.fold(f.offset);
            fold.update(&f.bytes);
            // What is still cut comes back as a fragment, for later merges.
            absorb(p, fold.finish());
        }
    }

    /// The statistics of everything merged into `p`.
    #[must_use]
    pub fn finish(&self, p: &StatsPartial) -> StatsResult {
        let n = p.count as f64;
        // Values all equal: their mean is that value and their variance 0, exactly. The
        // moments of merged runs can be off by a rounding of the mean there (three equal
        // values near 7.8e17 merged to a variance of 16384; the fuzzer found it).
        let same = p.min.filter(|lo| Some(*lo) == p.max);
        let (mean, m2) = match same {
            Some(v) => (v, 0.0),
            None => (p.mean, p.m2),
        };
        StatsResult {
            count: p.count,
            nan: p.nan,
            sum: p.sum.value(),
            min: p.min,
            max: p.max,
            mean: (p.count > 0).then_some(mean),
            variance: (p.count > 0).then(|| m2 / n),
            sample_variance: (p.count > 1).then(|| m2 / (n - 1.0)),
            histogram: self.edges.as_ref().map(|edges| Histogram {
                edges: edges.clone(),
                counts: p.bins.clone().unwrap_or_default(),
                below: p.below,
                above: p.above,
            }),
            quantiles: match (self.mapping(), &p.sketch, &self.quantiles) {
                (Some(m), Some(s), Some(qs)) if p.count > 0 => Some(m.quantiles(
                    s,
                    qs,
                    p.min.unwrap_or(f64::NEG_INFINITY),
                    p.max.unwrap_or(f64::INFINITY),
                )),
                _ => None,
            },
        }
    }
}

/// Bins per unit of value when `edges` are evenly spaced (a first guess of a value's bin
/// by arithmetic; the edges decide).
fn uniform_bins(edges: &[f64]) -> Option<f64> {
    let n = edges.len().checked_sub(1)?;
    let width = (edges[n] - edges[0]) / n as f64;
    let even = edges
        .windows(2)
        .all(|w| ((w[1] - w[0]) - width).abs() <= width * 1e-9);
    (even && width > 0.0).then(|| 1.0 / width)
}

/// Adds everything of `q` to `p`, its fragments as they are.
fn absorb(p: &mut StatsPartial, q: StatsPartial) {
    join_moments(p, q.count, q.mean, q.m2);
    p.nan += q.nan;
    p.min = min_opt(p.min, q.min);
    p.max = max_opt(p.max, q.max);
    p.sum.add(q.sum);
    if let (Some(a), Some(b)) = (p.bins.as_mut(), q.bins) {
        for (x, y) in a.iter_mut().zip(b) {
            *x += y;
        }
    }
    p.below += q.below;
    p.above += q.above;
    p.fragments.extend(q.fragments);
    match (p.sketch.as_mut(), q.sketch) {
        (Some(a), Some(b)) => sketch::merge(a, b),
        (None, b) => p.sketch = b,
        (Some(_), None) => {}
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

/// Statistics being folded over one run of object bytes, piece by piece.
#[derive(Debug)]
pub struct StatsFold {
    /// The operation (its own copy: a fold may outlive the request it came in).
    stats: Stats,
    partial: StatsPartial,
    /// The end of a record the run starts inside of, while it is collected.
    head: Option<Fragment>,
    /// Bytes of it still to come.
    head_len: usize,
    /// Object offset of `carry`'s first byte.
    carry_at: u64,
    /// The start of a record cut at the end of the last piece.
    carry: Vec<u8>,
    /// Values waiting to be summarised as a block.
    block: Vec<f64>,
    /// For evenly spaced histogram edges: bins per unit, to guess a value's bin.
    uniform: Option<f64>,
    /// The quantiles' bucket mapping, when asked for.
    mapping: Option<Mapping>,
}

impl StatsFold {
    /// Folds one value given as a number (records written as text).
    pub fn value(&mut self, v: f64) {
        if v.is_nan() {
            self.partial.nan += 1;
            return;
        }
        self.block.push(v);
        if self.block.len() == BLOCK {
            self.flush();
        }
    }

    /// Folds the next bytes of the run.
    pub fn update(&mut self, mut bytes: &[u8]) {
        let w = self.stats.format.width();
        if self.head_len > 0 {
            let take = self.head_len.min(bytes.len());
            if let Some(h) = self.head.as_mut() {
                h.bytes.extend_from_slice(&bytes[..take]);
            }
            self.head_len -= take;
            bytes = &bytes[take..];
        }
        if !self.carry.is_empty() {
            let take = (w - self.carry.len()).min(bytes.len());
            self.carry.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.carry.len() < w {
                return;
            }
            let record = std::mem::take(&mut self.carry);
            self.values(&record);
            self.carry_at += w as u64;
        }
        let whole = bytes.len() / w * w;
        self.values(&bytes[..whole]);
        self.carry_at += whole as u64;
        self.carry.extend_from_slice(&bytes[whole..]);
    }

    /// The run's partial: the cut records at its ends are fragments.
    #[must_use]
    pub fn finish(mut self) -> StatsPartial {
        self.flush();
        let mut p = self.partial;
        p.fragments
            .extend(self.head.filter(|h| !h.bytes.is_empty()));
        if !self.carry.is_empty() {
            p.fragments.push(Fragment {
                offset: self.carry_at,
                bytes: self.carry,
            });
        }
        p
    }

    fn values(&mut self, bytes: &[u8]) {
        macro_rules! each {
            ($t:ty, $n:expr, $int:expr) => {{
                let (records, _) = bytes.as_chunks::<$n>();
                let mut rest = records;
                while !rest.is_empty() {
                    // Straight into the block, as much as it takes.
                    let room = BLOCK - self.block.len();
                    let (now, later) = rest.split_at(room.min(rest.len()));
                    rest = later;
                    if $int {
                        if let Sum::Int(s) = &mut self.partial.sum {
                            *s += now
                                .iter()
                                .map(|r| <$t>::from_le_bytes(*r) as i128)
                                .sum::<i128>();
                        }
                    }
                    let before = self.block.len();
                    self.block.extend(
                        now.iter()
                            .map(|r| <$t>::from_le_bytes(*r) as f64)
                            .filter(|v| !v.is_nan()),
                    );
                    self.partial.nan += (now.len() - (self.block.len() - before)) as u64;
                    if self.block.len() == BLOCK {
                        self.flush();
                    }
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
            // Text records are parsed by `crate::text`, which folds values one by one.
            Format::Text | Format::Csv => {}
        }
    }

    /// Summarises the block: one pass for the sum and extremes (four lanes, so the CPU
    /// overlaps them), one for the squared deviations from the block's mean, then one
    /// pairwise join; the block's sum joins the running float sum compensated.
    fn flush(&mut self) {
        if self.block.is_empty() {
            return;
        }
        let n = self.block.len();
        let (mut lo, mut hi, mut sum) = ([f64::INFINITY; 4], [f64::NEG_INFINITY; 4], [0.0; 4]);
        let (quads, tail) = self.block.as_chunks::<4>();
        for q in quads {
            for l in 0..4 {
                sum[l] += q[l];
                lo[l] = if q[l] < lo[l] { q[l] } else { lo[l] };
                hi[l] = if q[l] > hi[l] { q[l] } else { hi[l] };
            }
        }
        for (l, &v) in tail.iter().enumerate() {
            sum[l] += v;
            lo[l] = lo[l].min(v);
            hi[l] = hi[l].max(v);
        }
        let sum = (sum[0] + sum[1]) + (sum[2] + sum[3]);
        let lo = lo.into_iter().fold(f64::INFINITY, f64::min);
        let hi = hi.into_iter().fold(f64::NEG_INFINITY, f64::max);
        let mean = sum / n as f64;
        let mut m2 = [0.0; 4];
        for q in quads {
            for l in 0..4 {
                let d = q[l] - mean;
                m2[l] += d * d;
            }
        }
        let m2 = (m2[0] + m2[1])
            + (m2[2] + m2[3])
            + tail.iter().map(|&v| (v - mean) * (v - mean)).sum::<f64>();
        let p = &mut self.partial;
        join_moments(p, n as u64, mean, m2);
        p.min = min_opt(p.min, Some(lo));
        p.max = max_opt(p.max, Some(hi));
        if let Sum::Float {
            sum: s,
            compensation,
        } = &mut p.sum
        {
            neumaier(s, compensation, sum);
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
                    // the last bin. Evenly spaced edges give a first guess by arithmetic,
                    // which the edges themselves then correct: the answer is exact.
                    let mut i = match self.uniform {
                        // v >= first here, so the guess is not negative.
                        #[allow(clippy::cast_sign_loss)]
                        Some(inv) => (((v - first) * inv) as usize).min(top),
                        None => edges
                            .partition_point(|&e| e <= v)
                            .saturating_sub(1)
                            .min(top),
                    };
                    while i > 0 && v < edges[i] {
                        i -= 1;
                    }
                    while i < top && v >= edges[i + 1] {
                        i += 1;
                    }
                    bins[i] += 1;
                }
            }
        }
        if let (Some(m), Some(s)) = (&self.mapping, p.sketch.as_mut()) {
            m.add_all(s, &self.block);
        }
        self.block.clear();
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Partials cross the network as JSON: every float must parse back to the value
        /// sent (serde_json's `float_roundtrip`), or a merged min, max or mean is off in
        /// its last digit.
        #[test]
        fn a_partial_survives_json_exactly(values in proptest::collection::vec(
            -1e100..1e100f64, 1..64)) {
            let stats = Stats::new(Format::F64le);
            let mut f = stats.fold(0);
            f.update(&f64s(&values));
            let partial = f.finish();
            let text = serde_json::to_string(&partial).expect("serialize");
            let back: StatsPartial = serde_json::from_str(&text).expect("parse");
            prop_assert_eq!(back, partial);
        }
    }

    fn f64s(values: &[f64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// The partial of `bytes` folded as runs cut at `cuts` (record-aligned), each fed in
    /// pieces of `piece` bytes cut anywhere, merged left to right.
    fn runs(stats: &Stats, bytes: &[u8], cuts: &[usize], piece: usize) -> StatsPartial {
        let mut bounds: Vec<usize> = cuts.iter().copied().filter(|&c| c < bytes.len()).collect();
        bounds.push(0);
        bounds.push(bytes.len());
        bounds.sort_unstable();
        bounds.dedup();
        bounds
            .windows(2)
            .map(|r| {
                let mut f = stats.fold(r[0] as u64);
                for p in bytes[r[0]..r[1]].chunks(piece) {
                    f.update(p);
                }
                f.finish()
            })
            .fold(stats.empty(), |a, b| stats.merge(a, b))
    }

    #[test]
    fn equal_values_have_their_value_as_mean_and_no_variance_however_cut() {
        let v = 7.760_296_587_914_263e17;
        let stats = Stats::new(Format::F64le);
        for cuts in [vec![], vec![8], vec![8, 16]] {
            let r = stats.finish(&runs(&stats, &f64s(&[v, v, v]), &cuts, 3));
            assert_eq!(
                (r.mean, r.variance, r.sample_variance),
                (Some(v), Some(0.0), Some(0.0))
            );
        }
    }

    #[test]
    fn known_values_and_far_from_zero() {
        // Values near 1e9 with a variance of 2/3: a naive sum of squares loses it all.
        let values: Vec<f64> = (0..300_000).map(|i| 1e9 + f64::from(i % 3)).collect();
        let stats = Stats {
            edges: Some(vec![1e9, 1e9 + 1.0, 1e9 + 2.0]),
            ..Stats::new(Format::F64le)
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
    fn bins_between_the_extremes_become_edges() {
        let s = Stats {
            bins: Some(4),
            ..Stats::new(Format::F64le)
        };
        s.validate().unwrap();
        let t = s.with_bins_over(Some(-2.0), Some(6.0));
        assert_eq!(
            (t.bins, t.edges),
            (None, Some(vec![-2.0, 0.0, 2.0, 4.0, 6.0]))
        );
        assert_eq!(
            s.with_bins_over(Some(3.0), Some(3.0)).edges,
            Some(vec![3.0, 4.0])
        );
        assert_eq!(s.with_bins_over(None, None).edges, None);
        for bad in [
            Stats {
                bins: Some(0),
                ..Stats::new(Format::U8)
            },
            Stats {
                bins: Some(MAX_BINS + 1),
                ..Stats::new(Format::U8)
            },
            Stats {
                bins: Some(2),
                edges: Some(vec![0.0, 1.0]),
                ..Stats::new(Format::U8)
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn integers_sum_exactly_and_nans_are_counted_apart() {
        let stats = Stats::new(Format::I64le);
        let values = [i64::MAX, i64::MAX, -5];
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let p = runs(&stats, &bytes, &[8], 3);
        assert_eq!(p.sum, Sum::Int(2 * i128::from(i64::MAX) - 5));
        let floats = Stats::new(Format::F32le);
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
                edges: Some(edges),
                ..Stats::new(Format::U8)
            };
            assert!(s.validate().is_err());
        }
        let s = Stats::new(Format::U32le);
        // A run that ends inside a record keeps the cut bytes for the next run's merge.
        let mut f = s.fold(0);
        f.update(&[1, 0, 0, 0, 5]);
        let p = f.finish();
        assert_eq!(p.count, 1);
        assert_eq!(
            p.fragments,
            [Fragment {
                offset: 4,
                bytes: vec![5]
            }]
        );
        let mut g = s.fold(5);
        g.update(&[0, 0, 0, 7]);
        let merged = s.merge(g.finish(), p);
        assert_eq!(
            (merged.count, merged.sum, merged.fragments.len()),
            (2, Sum::Int(6), 1)
        );
    }

    proptest! {
        /// Counts, min, max, integer sums and histograms of runs cut anywhere merge bit for
        /// bit into the single-pass result; mean and variance within 1e-9 relative.
        #[test]
        fn merged_runs_equal_one_pass(values in prop::collection::vec(-1e6f64..1e6, 0..5000), cuts in prop::collection::vec(0usize..40_000, 0..6), piece in 1usize..700) {
            let stats = Stats { edges: Some(vec![-1e6, -10.0, 0.0, 10.0, 1e5]), quantiles: Some(vec![0.0, 0.5, 0.99]), ..Stats::new(Format::F64le) };
            let bytes = f64s(&values);
            let one = {
                let mut f = stats.fold(0);
                f.update(&bytes);
                f.finish()
            };
            let many = runs(&stats, &bytes, &cuts, piece);
            prop_assert_eq!(many.count, one.count);
            prop_assert_eq!(many.min, one.min);
            prop_assert_eq!(many.max, one.max);
            prop_assert_eq!(&many.bins, &one.bins);
            prop_assert_eq!((many.below, many.above), (one.below, one.above));
            prop_assert_eq!(&many.sketch, &one.sketch);
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

        /// Evenly spaced edges (guessed by arithmetic, then corrected) put every value in
        /// the bin the edges say, values on an edge included.
        #[test]
        fn even_histograms_match_the_edges(raw in prop::collection::vec(0u32..2000, 1..3000), bins in 1usize..50, step in 1u32..30) {
            let w = f64::from(step) * 0.1;
            let edges: Vec<f64> = (0..=bins).map(|i| i as f64 * w).collect();
            // Values on edges and between them.
            let values: Vec<f64> = raw.iter().map(|&r| f64::from(r) * 0.05).collect();
            let stats = Stats { edges: Some(edges.clone()), ..Stats::new(Format::F64le) };
            let mut f = stats.fold(0);
            f.update(&f64s(&values));
            let p = f.finish();
            let mut want = vec![0u64; bins];
            let (mut below, mut above) = (0, 0);
            for &v in &values {
                if v < edges[0] { below += 1 } else if v > edges[bins] { above += 1 } else {
                    let i = edges.partition_point(|&e| e <= v).saturating_sub(1).min(bins - 1);
                    want[i] += 1;
                }
            }
            prop_assert_eq!(p.bins.unwrap(), want);
            prop_assert_eq!((p.below, p.above), (below, above));
        }

        /// Every integer format: exact sums and extremes, whatever the cuts.
        #[test]
        fn integer_formats_are_exact(raw in prop::collection::vec(any::<u8>(), 0..4000), cuts in prop::collection::vec(0usize..4000, 0..5), piece in 1usize..50) {
            for format in [Format::U8, Format::U16le, Format::U32le, Format::U64le, Format::I32le, Format::I64le] {
                let w = format.width();
                let bytes = &raw[..raw.len() / w * w];
                let stats = Stats::new(format);
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
