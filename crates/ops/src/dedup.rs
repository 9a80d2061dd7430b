//! How much of an object (or of many) is duplicate content: content-defined chunking
//! (FastCDC, its 2020 form), a BLAKE3 fingerprint per chunk, and two mergeable sketches
//! of the distinct fingerprints: HyperLogLog registers for how many there are, and the
//! `SAMPLE` smallest fingerprints with their chunks' sizes (a uniform sample of the
//! distinct chunks) for how large they are. Unique bytes are estimated as the distinct
//! count times the sample's mean chunk size.
//!
//! Both sketches merge exactly and in any order (register-wise maximum; the smallest
//! fingerprints of a union are the smallest of the parts'), and the fingerprints are
//! plain BLAKE3, the same on every drive: no per-process seed. Chunking starts afresh at
//! every run (a stored chunk, on the drives), so about one content-defined chunk per run
//! is cut where a single pass over the whole would not have cut it.

// Estimates are floats.
#![allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// HyperLogLog precision: 2^12 registers, a standard error of 1.04 / 64 = 1.6%.
const P: u32 = 12;
const REGISTERS: usize = 1 << P;
/// Distinct chunks kept in the size sample.
const SAMPLE: usize = 256;

/// What a dedup estimate cuts by.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dedup {
    /// The average content-defined chunk size, bytes: a power of two from 256 to 1 MiB
    /// (default 8 KiB). Chunks are at least a quarter and at most four times this.
    #[serde(default = "default_average")]
    pub average: u32,
}

fn default_average() -> u32 {
    8192
}

/// The partial result: chunk and byte totals, and the two sketches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupPartial {
    /// Chunks cut.
    pub chunks: u64,
    /// Bytes chunked.
    pub bytes: u64,
    /// HyperLogLog registers (empty before any chunk), base64.
    #[serde(with = "crate::b64")]
    pub registers: Vec<u8>,
    /// The smallest fingerprints seen and their chunks' sizes, ascending, distinct.
    pub sample: Vec<(u64, u32)>,
}

impl Dedup {
    /// Checks the average size.
    ///
    /// # Errors
    /// [`Error::BadArgument`] when it is not a power of two from 256 to 1 MiB.
    pub fn validate(&self) -> Result<()> {
        if !self.average.is_power_of_two() || !(256..=1 << 20).contains(&self.average) {
            return Err(Error::BadArgument(format!(
                "dedup average chunk size must be a power of two from 256 to 1048576, got {}",
                self.average
            )));
        }
        Ok(())
    }

    /// The partial of nothing.
    #[must_use]
    pub fn empty() -> DedupPartial {
        DedupPartial {
            chunks: 0,
            bytes: 0,
            registers: Vec::new(),
            sample: Vec::new(),
        }
    }

    /// The partial of one run.
    #[must_use]
    pub fn run(&self, bytes: &[u8]) -> DedupPartial {
        let mut p = Self::empty();
        if bytes.is_empty() {
            return p;
        }
        p.registers = vec![0; REGISTERS];
        let avg = self.average;
        for c in fastcdc::v2020::FastCDC::new(bytes, (avg / 4).max(64), avg, avg * 4) {
            let chunk = &bytes[c.offset..c.offset + c.length];
            let h = blake3::hash(chunk);
            let fp = u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"));
            let idx = (fp >> (64 - P)) as usize;
            let rho = ((fp << P) | (1 << (P - 1))).leading_zeros() as u8 + 1;
            p.registers[idx] = p.registers[idx].max(rho);
            p.chunks += 1;
            p.bytes += c.length as u64;
            p.sample.push((fp, c.length as u32));
        }
        p.sample.sort_unstable();
        p.sample.dedup_by_key(|s| s.0);
        p.sample.truncate(SAMPLE);
        p
    }

    /// The partial of both (in any order).
    #[must_use]
    pub fn merge(mut a: DedupPartial, b: DedupPartial) -> DedupPartial {
        a.chunks += b.chunks;
        a.bytes += b.bytes;
        if a.registers.is_empty() {
            a.registers = b.registers;
        } else if !b.registers.is_empty() {
            for (x, y) in a.registers.iter_mut().zip(b.registers) {
                *x = (*x).max(y);
            }
        }
        a.sample.extend(b.sample);
        a.sample.sort_unstable();
        a.sample.dedup_by_key(|s| s.0);
        a.sample.truncate(SAMPLE);
        a
    }

    /// The answer.
    #[must_use]
    pub fn finish(&self, p: &DedupPartial) -> serde_json::Value {
        let distinct = if p.sample.len() < SAMPLE {
            // Fewer distinct chunks than the sample holds: it holds them all, exactly.
            p.sample.len() as f64
        } else {
            hll_estimate(&p.registers).min(p.chunks as f64)
        };
        let mean = if p.sample.is_empty() {
            0.0
        } else {
            p.sample.iter().map(|s| f64::from(s.1)).sum::<f64>() / p.sample.len() as f64
        };
        let exact = p.sample.len() < SAMPLE;
        let unique = if exact {
            p.sample.iter().map(|s| u64::from(s.1)).sum::<u64>() as f64
        } else {
            (distinct * mean).min(p.bytes as f64)
        };
        serde_json::json!({
            "average_chunk": self.average,
            "chunks": p.chunks,
            "bytes": p.bytes,
            "distinct_chunks": distinct.round(),
            "unique_bytes": unique.round(),
            // Unique over total: 1.0 means nothing repeats.
            "unique_ratio": if p.bytes == 0 { 1.0 } else { unique / p.bytes as f64 },
            "exact": exact,
            "standard_error": if exact { 0.0 } else { 1.04 / f64::from(1u32 << (P / 2)) },
        })
    }
}

/// HyperLogLog's estimate, with linear counting while registers are still empty.
fn hll_estimate(registers: &[u8]) -> f64 {
    let m = registers.len() as f64;
    if registers.is_empty() {
        return 0.0;
    }
    let sum: f64 = registers.iter().map(|&r| (-f64::from(r)).exp2()).sum();
    let raw = 0.7213 / (1.0 + 1.079 / m) * m * m / sum;
    let zeros = registers.len() - registers.iter().map(|&r| usize::from(r > 0)).sum::<usize>();
    if raw <= 2.5 * m && zeros > 0 {
        m * (m / zeros as f64).ln()
    } else {
        raw
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn repeated_content_is_found() {
        let d = Dedup { average: 4096 };
        // 4 MiB of noise, then the same 4 MiB again, in 1 MiB runs: half is unique.
        let block = noise(4 << 20, 7);
        let object = [block.clone(), block].concat();
        let p = object
            .chunks(1 << 20)
            .map(|r| d.run(r))
            .fold(Dedup::empty(), Dedup::merge);
        let r = d.finish(&p);
        let ratio = r["unique_ratio"].as_f64().unwrap();
        assert!((ratio - 0.5).abs() < 0.1, "{r}");
        assert_eq!(r["bytes"], 8 << 20);
        // Nothing repeats in noise.
        let p = d.run(&noise(4 << 20, 9));
        let ratio = d.finish(&p)["unique_ratio"].as_f64().unwrap();
        assert!(ratio > 0.9, "{ratio}");
        // A few distinct chunks: counted exactly.
        let small = [noise(20_000, 3), noise(20_000, 3), noise(20_000, 3)].concat();
        let r = d.finish(&d.run(&small));
        assert_eq!(r["exact"], true);
        assert!(r["unique_ratio"].as_f64().unwrap() < 0.6, "{r}");
    }

    #[test]
    fn bad_averages_are_refused() {
        for average in [0, 100, 3000, 1 << 21] {
            assert!(Dedup { average }.validate().is_err(), "{average}");
        }
    }

    proptest! {
        /// Partials of runs merge to the same partial in any order.
        #[test]
        fn merges_are_order_free(seed in any::<u64>(), len in 0usize..200_000, cuts in prop::collection::vec(0usize..200_000, 0..6)) {
            let d = Dedup { average: 256 };
            let bytes = noise(len, seed);
            let mut bounds: Vec<usize> = cuts.into_iter().filter(|&c| c < len).collect();
            bounds.extend([0, len]);
            bounds.sort_unstable();
            bounds.dedup();
            let parts: Vec<DedupPartial> = bounds.windows(2).map(|r| d.run(&bytes[r[0]..r[1]])).collect();
            let forward = parts.iter().cloned().fold(Dedup::empty(), Dedup::merge);
            let backward = parts.iter().rev().cloned().fold(Dedup::empty(), Dedup::merge);
            prop_assert_eq!(&forward, &backward);
            prop_assert_eq!(forward.bytes, len as u64);
        }
    }
}
