//! Sorting fixed-width records, one of the example applications of the study OED comes
//! from: each drive sorts the records of each chunk it holds ([`sort_run`]), and the
//! coordinator merges the sorted runs ([`Merge`]) into a new object. Records sort by value:
//! integers as numbers, floats in IEEE-754's total order (`-NaN < -inf < ... < -0 < +0 <
//! ... < inf < NaN`). A run that does not hold whole records (the last stripe's short
//! chunks, a multipart part that ends inside a record) comes back as it is, and the
//! coordinator sorts those bytes together once it has joined them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

use crate::stats::Format;
use crate::{Error, Result};

/// What a `sort` operation writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sort {
    /// The records (a fixed-width format).
    pub format: Format,
    /// The key of the sorted object written.
    pub target: String,
}

/// A run as a drive hands it back.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// Object offset of the run's first byte.
    pub offset: u64,
    /// Whether `bytes` are whole records, sorted (else the run's bytes as they are).
    pub sorted: bool,
    /// The bytes, base64.
    #[serde(with = "crate::b64")]
    pub bytes: Vec<u8>,
}

impl Sort {
    /// Checks the format and the key, for an object of `len` bytes.
    ///
    /// # Errors
    /// [`Error::BadArgument`] for a text format, a length that is not whole records, or
    /// an empty or too long key.
    pub fn validate(&self, len: u64) -> Result<()> {
        if self.format.is_text() {
            return Err(Error::BadArgument(
                "sort takes fixed-width numbers (u8 .. f64le), not text".into(),
            ));
        }
        let w = self.format.width() as u64;
        if !len.is_multiple_of(w) {
            return Err(Error::BadArgument(format!(
                "{len} bytes are not a whole number of {w}-byte records"
            )));
        }
        if self.target.is_empty() || self.target.len() > 1024 {
            return Err(Error::BadArgument(
                "sort: the target key must have 1 to 1024 bytes".into(),
            ));
        }
        Ok(())
    }

    /// The run of object bytes `offset..`: sorted when they are whole records.
    #[must_use]
    pub fn run(&self, offset: u64, bytes: &[u8]) -> Run {
        let w = self.format.width();
        let whole = offset.is_multiple_of(w as u64) && bytes.len().is_multiple_of(w);
        Run {
            offset,
            sorted: whole,
            bytes: if whole {
                sort_run(self.format, bytes)
            } else {
                bytes.to_vec()
            },
        }
    }
}

/// An order-preserving key of a record: unsigned, sign-flipped signed, and floats mapped
/// to their total order.
fn key(format: Format, r: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..r.len()].copy_from_slice(r);
    let v = u64::from_le_bytes(b);
    match format {
        Format::I32le => u64::from((v as u32) ^ 0x8000_0000),
        Format::I64le => v ^ (1 << 63),
        Format::F32le => {
            let x = v as u32;
            u64::from(if x >> 31 == 1 { !x } else { x | 0x8000_0000 })
        }
        Format::F64le => {
            if v >> 63 == 1 {
                !v
            } else {
                v | (1 << 63)
            }
        }
        _ => v,
    }
}

/// Whole records of `format`, sorted.
#[must_use]
pub fn sort_run(format: Format, bytes: &[u8]) -> Vec<u8> {
    let w = format.width();
    let mut recs: Vec<(u64, &[u8])> = bytes.chunks_exact(w).map(|r| (key(format, r), r)).collect();
    recs.sort_unstable_by_key(|(k, _)| *k);
    let mut out = Vec::with_capacity(bytes.len());
    for (_, r) in recs {
        out.extend_from_slice(r);
    }
    out
}

/// A k-way merge of sorted runs, handing out the merged records a batch at a time.
pub struct Merge {
    format: Format,
    runs: Vec<Vec<u8>>,
    at: Vec<usize>,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
}

impl Merge {
    /// A merge of `runs`, each whole records of `format`, sorted.
    #[must_use]
    pub fn new(format: Format, runs: Vec<Vec<u8>>) -> Self {
        let w = format.width();
        let mut heap = BinaryHeap::with_capacity(runs.len());
        for (i, r) in runs.iter().enumerate() {
            if r.len() >= w {
                heap.push(Reverse((key(format, &r[..w]), i)));
            }
        }
        Self {
            format,
            at: vec![0; runs.len()],
            runs,
            heap,
        }
    }

    /// The next merged records, about `max` bytes of them; empty at the end.
    pub fn next_batch(&mut self, max: usize) -> Vec<u8> {
        let w = self.format.width();
        let mut out = Vec::with_capacity(max.min(1 << 24));
        while out.len() + w <= max.max(w) {
            let Some(Reverse((_, i))) = self.heap.pop() else {
                break;
            };
            let at = self.at[i];
            out.extend_from_slice(&self.runs[i][at..at + w]);
            self.at[i] = at + w;
            if at + 2 * w <= self.runs[i].len() {
                self.heap.push(Reverse((
                    key(self.format, &self.runs[i][at + w..at + 2 * w]),
                    i,
                )));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn merged(format: Format, runs: Vec<Vec<u8>>, batch: usize) -> Vec<u8> {
        let mut m = Merge::new(format, runs);
        let mut out = Vec::new();
        loop {
            let b = m.next_batch(batch);
            if b.is_empty() {
                return out;
            }
            out.extend(b);
        }
    }

    #[test]
    fn floats_sort_in_total_order() {
        let values = [3.0f64, -0.0, f64::NAN, -1.5, f64::NEG_INFINITY, 0.0, 2.5];
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let s = sort_run(Format::F64le, &bytes);
        let got: Vec<f64> = s
            .chunks(8)
            .map(|r| f64::from_le_bytes(r.try_into().unwrap()))
            .collect();
        let mut want = values.to_vec();
        want.sort_by(f64::total_cmp);
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
    }

    proptest! {
        /// Sorted runs cut anywhere on records, merged: the whole, sorted; every format.
        #[test]
        fn runs_merge_into_the_sorted_whole(raw in prop::collection::vec(any::<u8>(), 0..4000), cuts in prop::collection::vec(0usize..4000, 0..6), batch in 1usize..300) {
            for format in [Format::U8, Format::U16le, Format::I32le, Format::I64le, Format::F32le, Format::F64le] {
                let w = format.width();
                let bytes = &raw[..raw.len() / w * w];
                let mut bounds: Vec<usize> = cuts.iter().map(|c| c / w * w).filter(|&c| c < bytes.len()).collect();
                bounds.extend([0, bytes.len()]);
                bounds.sort_unstable();
                bounds.dedup();
                let runs: Vec<Vec<u8>> = bounds.windows(2).map(|r| sort_run(format, &bytes[r[0]..r[1]])).collect();
                let got = merged(format, runs, batch);
                prop_assert_eq!(got, sort_run(format, bytes));
            }
        }
    }
}
