//! An operation as a user asks for it ([`Op`], the JSON body of an `oed-op` request),
//! and as a [`Plan`] for one object: the operation with the object's length and the
//! subtree size, which every drive and the coordinator hold alike, so that a drive's
//! partials and the coordinator's merge agree.
//!
//! Most operations split: each drive folds the runs it holds ([`Plan::run`]), the
//! coordinator merges ([`Plan::merge`]) and finishes ([`Plan::finish`]). SHA-256 does
//! not split (see [`crate::checksum`]): [`Plan::sequential`] folds it in object order
//! where the bytes are streamed.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::checksum::{Blake3, Blake3Partial, Crc, CrcPartial};
use crate::compress::{Compress, CompressTo, Frames, Sizes};
use crate::dedup::{Dedup, DedupPartial};
use crate::grep::{Grep, GrepPartial, Matcher};
use crate::stats::{Stats, StatsPartial};
use crate::text::{TextFold, TextPartial, TextStats};
use crate::{Error, Result};

/// The checksum algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// CRC-32C, combined from the drives' runs.
    Crc32c,
    /// CRC-64/NVME, combined from the drives' runs.
    Crc64nvme,
    /// BLAKE3, joined from the drives' subtrees.
    Blake3,
    /// SHA-256, streamed in order through the coordinator.
    Sha256,
}

/// An operation on an object's bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Op {
    /// A checksum of the object.
    Checksum {
        /// Which one.
        algorithm: Algorithm,
        /// For CRC32C: answer from the CRC32C each drive stored with each chunk when it
        /// was written, without reading the chunks (a few bytes per chunk instead of the
        /// object). It trusts those stored values: a chunk that rotted since is not
        /// noticed (a scrub or a read finds it). Without it, every chunk is read and
        /// checked.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stored: bool,
    },
    /// Statistics over the object's records.
    Stats(Stats),
    /// Lines matching a literal or a regular expression.
    Grep(Grep),
    /// What compressing the object would save, writing nothing.
    Compressibility(Compress),
    /// The object compressed into a new object (frames of its chunks, made where they
    /// lie).
    Compress(CompressTo),
    /// How much of the object is duplicate content.
    Dedup(Dedup),
    /// The object plus another, record by record, into a new object (streamed through
    /// the coordinator: it does not split).
    Add(crate::vector::Add),
    /// The object's records sorted into a new object: each drive sorts its chunks, the
    /// coordinator merges.
    Sort(crate::sort::Sort),
    /// The object, a stream of zstd or LZ4 frames, decompressed into a new object
    /// (streamed through the coordinator: frames do not line up with chunks).
    Decompress(crate::compress::DecompressTo),
}

/// An operation planned for one object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The operation.
    pub op: Op,
    /// The object's length in bytes.
    pub object_len: u64,
    /// The BLAKE3 subtree size: a power of two, at least 1 KiB (the smallest chunk size
    /// among the object's parts).
    pub subtree: u64,
    /// The object bytes the operation covers, when not the whole object: runs are cut to
    /// them ([`Plan::clip`]), and `object_len` is their length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<std::ops::Range<u64>>,
    /// A grep's compiled pattern, made once per plan (a drive's plan arrives as JSON).
    #[serde(skip)]
    matcher: Compiled,
}

/// A compiled grep, made when first needed; not part of a plan's value.
#[derive(Clone, Debug, Default)]
struct Compiled(std::sync::OnceLock<Matcher>);

impl PartialEq for Compiled {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A partial result of a [`Plan`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Partial {
    /// A CRC and length.
    Crc(CrcPartial),
    /// BLAKE3 subtrees and leftover bytes.
    Blake3(Blake3Partial),
    /// Statistics.
    Stats(StatsPartial),
    /// Line counts, matching lines, cut lines.
    Grep(GrepPartial),
    /// Sizes before and after compression.
    Sizes(Sizes),
    /// Chunk counts and distinct-chunk sketches.
    Dedup(DedupPartial),
    /// Statistics of text numbers, and cut records.
    Text(TextPartial),
    /// Compressed frames, in object order.
    Frames(Frames),
    /// A sorted run (or, for a run of cut records, its bytes).
    Run(crate::sort::Run),
}

impl Plan {
    /// Plans `op` for an object of `object_len` bytes with BLAKE3 subtrees of `subtree`.
    ///
    /// # Errors
    /// [`Error::BadArgument`] for parameters the operation refuses (histogram edges, a
    /// record width that does not divide the object, a subtree size).
    pub fn new(op: Op, object_len: u64, subtree: u64) -> Result<Self> {
        if let Op::Checksum {
            algorithm,
            stored: true,
        } = &op
            && *algorithm != Algorithm::Crc32c
        {
            return Err(Error::BadArgument(
                "stored: only CRC32C is stored with the chunks".into(),
            ));
        }
        match &op {
            Op::Checksum {
                algorithm: Algorithm::Blake3,
                ..
            } => {
                Blake3::new(subtree, object_len)?;
            }
            Op::Stats(s) => {
                s.validate()?;
                let w = s.format.width() as u64;
                if !s.format.is_text() && !object_len.is_multiple_of(w) {
                    return Err(Error::BadArgument(format!(
                        "{object_len} bytes are not a whole number of {w}-byte {} records",
                        serde_json::to_value(s.format)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    )));
                }
            }
            Op::Grep(g) => {
                g.matcher(object_len)?;
            }
            Op::Compressibility(c) => c.validate()?,
            Op::Compress(c) => {
                c.how.validate()?;
                if c.target.is_empty() || c.target.len() > 1024 {
                    return Err(Error::BadArgument(
                        "compress: the target key must have 1 to 1024 bytes".into(),
                    ));
                }
            }
            Op::Dedup(d) => d.validate()?,
            Op::Add(a) => a.validate(object_len)?,
            Op::Sort(s) => s.validate(object_len)?,
            Op::Decompress(d) => {
                if d.target.is_empty() || d.target.len() > 1024 {
                    return Err(Error::BadArgument(
                        "decompress: the target key must have 1 to 1024 bytes".into(),
                    ));
                }
            }
            Op::Checksum { .. } => {}
        }
        Ok(Self {
            op,
            object_len,
            subtree,
            window: None,
            matcher: Compiled::default(),
        })
    }

    /// Plans `op` over object bytes `window` only (of an object whose smallest chunk is
    /// `subtree`): records, lines and checksums start at the window's first byte.
    ///
    /// # Errors
    /// As [`Plan::new`], for an object of the window's length.
    pub fn within(op: Op, window: std::ops::Range<u64>, subtree: u64) -> Result<Self> {
        let mut plan = Self::new(op, window.end.saturating_sub(window.start), subtree)?;
        plan.window = Some(window);
        Ok(plan)
    }

    /// The part of object bytes `at..at + bytes.len()` the plan covers, with the offset
    /// its runs take (from the window's start); `None` when it covers none of them.
    #[must_use]
    pub fn clip<'a>(&self, at: u64, bytes: &'a [u8]) -> Option<(u64, &'a [u8])> {
        let Some(w) = &self.window else {
            return Some((at, bytes));
        };
        let end = at + bytes.len() as u64;
        let (from, to) = (at.max(w.start), end.min(w.end));
        (from < to).then(|| {
            let cut = &bytes[usize::try_from(from - at).unwrap_or(usize::MAX)
                ..usize::try_from(to - at).unwrap_or(usize::MAX)];
            (from - w.start, cut)
        })
    }

    /// The stripes of an extent that hold bytes the plan covers: the extent starts at
    /// object offset `base`, has `size` bytes in stripes of `stripe` bytes.
    #[must_use]
    pub fn stripes(&self, base: u64, size: u64, stripe: u64) -> std::ops::Range<u64> {
        let count = size.div_ceil(stripe.max(1));
        let Some(w) = &self.window else {
            return 0..count;
        };
        let (from, to) = (w.start.max(base), w.end.min(base + size));
        if from >= to {
            return 0..0;
        }
        (from - base) / stripe..(to - base).div_ceil(stripe)
    }

    /// The grep's matcher, compiled once.
    fn matcher(&self) -> Result<&Matcher> {
        let Op::Grep(g) = &self.op else {
            return Err(mismatch());
        };
        if let Some(m) = self.matcher.0.get() {
            return Ok(m);
        }
        let m = g.matcher(self.object_len)?;
        Ok(self.matcher.0.get_or_init(|| m))
    }

    /// Whether a drive may answer from the CRC32C it stored with each chunk (a CRC32C
    /// asked with `stored`, over the whole object).
    #[must_use]
    pub fn from_stored_crcs(&self) -> bool {
        matches!(
            self.op,
            Op::Checksum {
                algorithm: Algorithm::Crc32c,
                stored: true
            }
        ) && self.window.is_none()
    }

    /// The partial of a run of `len` bytes whose CRC32C is `crc` (known without its
    /// bytes).
    #[must_use]
    pub fn crc32c_partial(crc: u32, len: u64) -> Partial {
        Partial::Crc(CrcPartial {
            crc: u64::from(crc),
            len,
        })
    }

    /// Whether the operation splits into partials (all but SHA-256).
    #[must_use]
    pub fn splits(&self) -> bool {
        !matches!(
            self.op,
            Op::Checksum {
                algorithm: Algorithm::Sha256,
                ..
            } | Op::Add(_)
                | Op::Decompress(_)
        )
    }

    /// Whether partials merge to the same answer in any order (statistics), so that a
    /// drive may fold all its runs into one partial. Checksums depend on object order.
    #[must_use]
    pub fn commutes(&self) -> bool {
        matches!(
            self.op,
            Op::Stats(_) | Op::Grep(_) | Op::Compressibility(_) | Op::Dedup(_)
        )
    }

    /// Statistics over text numbers, for the `text` and `csv` formats.
    fn text(&self) -> Option<TextStats> {
        match &self.op {
            Op::Stats(s) => TextStats::new(s, self.object_len),
            _ => None,
        }
    }

    fn blake3(&self) -> Result<Blake3> {
        Blake3::new(self.subtree, self.object_len)
    }

    fn crc(&self) -> Option<Crc> {
        match self.op {
            Op::Checksum {
                algorithm: Algorithm::Crc32c,
                ..
            } => Some(Crc::Crc32c),
            Op::Checksum {
                algorithm: Algorithm::Crc64nvme,
                ..
            } => Some(Crc::Crc64nvme),
            _ => None,
        }
    }

    /// The partial of nothing.
    ///
    /// # Errors
    /// [`Error::BadArgument`] for an operation that does not split.
    pub fn empty(&self) -> Result<Partial> {
        if let Some(t) = self.text() {
            return Ok(Partial::Text(t.empty()));
        }
        match &self.op {
            Op::Stats(s) => Ok(Partial::Stats(s.empty())),
            Op::Grep(_) => Ok(Partial::Grep(GrepPartial::default())),
            Op::Compressibility(_) => Ok(Partial::Sizes(Sizes::default())),
            Op::Compress(_) => Ok(Partial::Frames(Frames::default())),
            Op::Dedup(_) => Ok(Partial::Dedup(Dedup::empty())),
            Op::Sort(_) => Ok(Partial::Run(crate::sort::Run::default())),
            _ if self.crc().is_some() => Ok(Partial::Crc(CrcPartial::default())),
            Op::Checksum {
                algorithm: Algorithm::Blake3,
                ..
            } => Ok(Partial::Blake3(Blake3Partial::default())),
            Op::Checksum { .. } | Op::Add(_) | Op::Decompress(_) => Err(unsplittable()),
        }
    }
}

fn unsplittable() -> Error {
    Error::BadArgument(
        "this operation does not split: SHA-256 is a chain, computed only in object order \
             where the bytes are streamed; add is streamed through the coordinator"
            .into(),
    )
}

fn mismatch() -> Error {
    Error::BadArgument("partials of another operation".into())
}

impl Plan {
    /// The partial of one run: object bytes `offset..offset + bytes.len()`.
    ///
    /// # Errors
    /// [`Error::BadArgument`] when the run does not fit the operation (not on a record,
    /// past the object), or for an operation that does not split.
    pub fn run(&self, offset: u64, bytes: &[u8]) -> Result<Partial> {
        if let Some(crc) = self.crc() {
            return Ok(Partial::Crc(crc.of(bytes)));
        }
        if let Some(t) = self.text() {
            return Ok(Partial::Text(t.run(offset, bytes)?));
        }
        match &self.op {
            Op::Stats(s) => {
                let mut f = s.fold(offset);
                f.update(bytes);
                Ok(Partial::Stats(f.finish()))
            }
            Op::Grep(_) => Ok(Partial::Grep(self.matcher()?.run(offset, bytes)?)),
            Op::Compressibility(c) => Ok(Partial::Sizes(c.sizes(bytes)?)),
            Op::Compress(c) => Ok(Partial::Frames(Frames {
                input: bytes.len() as u64,
                frames: 1,
                bytes: c.how.frame(bytes)?,
            })),
            Op::Dedup(d) => Ok(Partial::Dedup(d.run(bytes))),
            Op::Sort(s) => Ok(Partial::Run(s.run(offset, bytes))),
            Op::Checksum {
                algorithm: Algorithm::Blake3,
                ..
            } => Ok(Partial::Blake3(self.blake3()?.run(offset, bytes)?)),
            Op::Checksum { .. } | Op::Add(_) | Op::Decompress(_) => Err(unsplittable()),
        }
    }

    /// The partial of `left`'s runs followed by `right`'s.
    ///
    /// # Errors
    /// [`Error::BadArgument`] when the two are not partials of this operation.
    pub fn merge(&self, left: Partial, right: Partial) -> Result<Partial> {
        Ok(match (left, right) {
            (Partial::Crc(a), Partial::Crc(b)) => {
                Partial::Crc(self.crc().ok_or_else(mismatch)?.merge(a, b))
            }
            (Partial::Blake3(a), Partial::Blake3(b)) => Partial::Blake3(self.blake3()?.merge(a, b)),
            (Partial::Stats(a), Partial::Stats(b)) => match &self.op {
                Op::Stats(s) => Partial::Stats(s.merge(a, b)),
                _ => return Err(mismatch()),
            },
            (Partial::Grep(a), Partial::Grep(b)) => Partial::Grep(self.matcher()?.merge(a, b)?),
            (Partial::Sizes(a), Partial::Sizes(b)) => Partial::Sizes(a.plus(b)),
            (Partial::Frames(mut a), Partial::Frames(b)) => {
                a.input += b.input;
                a.frames += b.frames;
                a.bytes.extend_from_slice(&b.bytes);
                Partial::Frames(a)
            }
            (Partial::Text(a), Partial::Text(b)) => {
                Partial::Text(self.text().ok_or_else(mismatch)?.merge(a, b)?)
            }
            (Partial::Dedup(a), Partial::Dedup(b)) => Partial::Dedup(Dedup::merge(a, b)),
            _ => return Err(mismatch()),
        })
    }

    /// The answer, from the partial of the whole object.
    ///
    /// # Errors
    /// [`Error::Incomplete`] when the partial does not cover the object;
    /// [`Error::BadArgument`] when it is not a partial of this operation.
    pub fn finish(&self, p: &Partial) -> Result<serde_json::Value> {
        match (&self.op, p) {
            (Op::Stats(s), Partial::Stats(p)) => {
                if let Some(f) = p.fragments.first() {
                    return Err(Error::Incomplete(format!(
                        "a record cut at offset {} was never completed",
                        f.offset
                    )));
                }
                serde_json::to_value(s.finish(p)).map_err(|e| Error::BadArgument(e.to_string()))
            }
            (Op::Grep(_), Partial::Grep(g)) => serde_json::to_value(self.matcher()?.finish(g)?)
                .map_err(|e| Error::BadArgument(e.to_string())),
            (Op::Stats(_), Partial::Text(p)) => self.text().ok_or_else(mismatch)?.finish(p),
            (Op::Compress(c), Partial::Frames(f)) => Ok(Sizes {
                input: f.input,
                output: f.bytes.len() as u64,
                frames: f.frames,
            }
            .result(&c.how)),
            (Op::Compressibility(c), Partial::Sizes(z)) => {
                if z.input != self.object_len {
                    return Err(Error::Incomplete(format!(
                        "the runs cover {} of {} bytes",
                        z.input, self.object_len
                    )));
                }
                Ok(z.result(c))
            }
            (Op::Dedup(d), Partial::Dedup(p)) => {
                if p.bytes != self.object_len {
                    return Err(Error::Incomplete(format!(
                        "the runs cover {} of {} bytes",
                        p.bytes, self.object_len
                    )));
                }
                Ok(d.finish(p))
            }
            (Op::Checksum { algorithm, .. }, Partial::Crc(c)) => {
                if c.len != self.object_len {
                    return Err(Error::Incomplete(format!(
                        "the runs cover {} of {} bytes",
                        c.len, self.object_len
                    )));
                }
                let bytes = if *algorithm == Algorithm::Crc32c {
                    (c.crc as u32).to_be_bytes().to_vec()
                } else {
                    c.crc.to_be_bytes().to_vec()
                };
                Ok(checksum_value(*algorithm, &bytes))
            }
            (Op::Checksum { algorithm, .. }, Partial::Blake3(b)) => {
                let hex = self.blake3()?.finish(b)?;
                let bytes = decode_hex(&hex);
                Ok(checksum_value(*algorithm, &bytes))
            }
            _ => Err(mismatch()),
        }
    }

    /// A fold over the whole object in order: for an operation that does not split
    /// (SHA-256), and for statistics of CSV whose split answer could not be used
    /// ([`Error::InOrder`]). `None` for the others.
    #[must_use]
    pub fn in_order(&self) -> Option<Sequential> {
        let kind = if let Some(t) = self.text() {
            Kind::Text(Box::new(TextFold::new(&t, 0, true)), t)
        } else if self.splits() || matches!(self.op, Op::Add(_) | Op::Decompress(_)) {
            return None;
        } else {
            Kind::Sha(sha2::Sha256::new())
        };
        Some(Sequential {
            kind,
            len: 0,
            object_len: self.object_len,
        })
    }
}

/// Whether two answers agree: every field the same, numbers within 1e-9 relative (a
/// float mean or variance merged in another order may differ in its last bits; counts,
/// sums of integers, checksums and lines must be equal, and are).
#[must_use]
pub fn results_agree(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as V;
    match (a, b) {
        (V::Object(x), V::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| results_agree(v, w)))
        }
        (V::Array(x), V::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| results_agree(v, w))
        }
        (V::Number(x), V::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (
                x.as_f64().unwrap_or(f64::NAN),
                y.as_f64().unwrap_or(f64::NAN),
            );
            (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
        }
        _ => a == b,
    }
}

/// An operation over an object's bytes, fed in object order.
pub struct Sequential {
    kind: Kind,
    len: u64,
    object_len: u64,
}

enum Kind {
    Sha(sha2::Sha256),
    Text(Box<TextFold>, TextStats),
}

impl Sequential {
    /// The next bytes of the object.
    ///
    /// # Errors
    /// [`Error::BadArgument`] for a record the operation refuses (too long).
    pub fn update(&mut self, bytes: &[u8]) -> Result<()> {
        match &mut self.kind {
            Kind::Sha(sha) => sha.update(bytes),
            Kind::Text(fold, _) => fold.update(bytes)?,
        }
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// The answer.
    ///
    /// # Errors
    /// [`Error::Incomplete`] when not every byte of the object was fed.
    pub fn finish(self) -> Result<serde_json::Value> {
        if self.len != self.object_len {
            return Err(Error::Incomplete(format!(
                "{} of {} bytes hashed",
                self.len, self.object_len
            )));
        }
        match self.kind {
            Kind::Sha(sha) => Ok(checksum_value(Algorithm::Sha256, &sha.finalize())),
            Kind::Text(fold, text) => text.finish(&fold.finish()?),
        }
    }
}

/// `{"algorithm", "hex", "base64"}`: the base64 is what S3's `x-amz-checksum-*` headers
/// carry (big-endian for the CRCs).
fn checksum_value(algorithm: Algorithm, bytes: &[u8]) -> serde_json::Value {
    let hex = bytes.iter().fold(String::new(), |mut s, b| {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02x}");
        s
    });
    serde_json::json!({
        "algorithm": algorithm,
        "hex": hex,
        "base64": base64::engine::general_purpose::STANDARD.encode(bytes),
    })
}

fn decode_hex(hex: &str) -> Vec<u8> {
    hex.as_bytes()
        .chunks(2)
        .filter_map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Format;

    fn data(len: usize) -> Vec<u8> {
        (0..len as u64)
            .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
            .collect()
    }

    /// Plans from user JSON, split into chunk-sized runs, merged, finished: the same
    /// answers as the plain algorithms over the whole object.
    #[test]
    fn planned_operations_answer_as_single_passes() {
        let bytes = data(5 * 4096 + 1000);
        let len = bytes.len() as u64;
        let answer = |json: &str| {
            let op: Op = serde_json::from_str(json).unwrap();
            let plan = Plan::new(op, len, 4096).unwrap();
            let mut acc = plan.empty().unwrap();
            for (i, c) in bytes.chunks(4096).enumerate() {
                acc = plan
                    .merge(acc, plan.run(i as u64 * 4096, c).unwrap())
                    .unwrap();
            }
            plan.finish(&acc).unwrap()
        };
        let crc = crc32c::crc32c(&bytes);
        assert_eq!(
            answer(r#"{"op":"checksum","algorithm":"crc32c"}"#)["hex"],
            format!("{crc:08x}")
        );
        assert_eq!(
            answer(r#"{"op":"checksum","algorithm":"blake3"}"#)["hex"],
            blake3::hash(&bytes).to_hex().as_str()
        );
        let stats = answer(r#"{"op":"stats","format":"u8","edges":[0,128,256]}"#);
        assert_eq!(stats["count"], bytes.len());
        let sum: u32 = bytes.iter().map(|&b| u32::from(b)).sum();
        assert_eq!(stats["sum"], f64::from(sum));
        // SHA-256 does not split, and says so; it streams instead.
        let sha = Plan::new(
            serde_json::from_str(r#"{"op":"checksum","algorithm":"sha256"}"#).unwrap(),
            len,
            4096,
        )
        .unwrap();
        assert!(!sha.splits() && sha.run(0, &bytes).is_err());
        let mut seq = sha.in_order().unwrap();
        seq.update(&bytes).unwrap();
        let want: [u8; 32] = sha2::Sha256::digest(&bytes).into();
        assert_eq!(
            seq.finish().unwrap()["base64"],
            base64::engine::general_purpose::STANDARD.encode(want)
        );
    }

    /// A plan over a window sees its bytes as the whole: runs are cut to it and shifted.
    #[test]
    fn windows_cut_runs_and_name_their_stripes() {
        let op = Op::Checksum {
            algorithm: Algorithm::Crc32c,
            stored: false,
        };
        let plan = Plan::within(op, 100..250, 4096).unwrap();
        assert_eq!(plan.object_len, 150);
        let bytes = [7u8; 100];
        assert_eq!(plan.clip(0, &bytes), None);
        assert_eq!(
            plan.clip(50, &bytes).map(|(o, b)| (o, b.len())),
            Some((0, 50))
        );
        assert_eq!(
            plan.clip(120, &bytes).map(|(o, b)| (o, b.len())),
            Some((20, 100))
        );
        assert_eq!(
            plan.clip(200, &bytes).map(|(o, b)| (o, b.len())),
            Some((100, 50))
        );
        assert_eq!(plan.clip(250, &bytes), None);
        // Stripes of 64 bytes of an extent at 90: bytes 100..250 are its stripes 0..3.
        assert_eq!(plan.stripes(90, 1000, 64), 0..3);
        assert_eq!(plan.stripes(300, 1000, 64), 0..0);
        let whole = Plan::new(plan.op.clone(), 1000, 4096).unwrap();
        assert_eq!(whole.stripes(0, 1000, 64), 0..16);
        // The answer is the checksum of the window's bytes.
        let data = data(1000);
        let mut acc = plan.empty().unwrap();
        for (i, run) in data.chunks(64).enumerate() {
            if let Some((at, b)) = plan.clip(i as u64 * 64, run) {
                acc = plan.merge(acc, plan.run(at, b).unwrap()).unwrap();
            }
        }
        let want = crc32c::crc32c(&data[100..250]);
        assert_eq!(plan.finish(&acc).unwrap()["hex"], format!("{want:08x}"));
    }

    #[test]
    fn answers_agree_to_the_last_bits_of_floats_only() {
        let a = serde_json::json!({"count": 3, "mean": 1.5, "hex": "ab", "lines": [1, 2]});
        let close =
            serde_json::json!({"count": 3, "mean": 1.5 + 1e-13, "hex": "ab", "lines": [1, 2]});
        assert!(results_agree(&a, &close));
        for differ in [
            serde_json::json!({"count": 4, "mean": 1.5, "hex": "ab", "lines": [1, 2]}),
            serde_json::json!({"count": 3, "mean": 1.6, "hex": "ab", "lines": [1, 2]}),
            serde_json::json!({"count": 3, "mean": 1.5, "hex": "ac", "lines": [1, 2]}),
            serde_json::json!({"count": 3, "mean": 1.5, "hex": "ab", "lines": [1]}),
            serde_json::json!({"count": 3, "mean": 1.5, "hex": "ab"}),
        ] {
            assert!(!results_agree(&a, &differ), "{differ}");
        }
    }

    #[test]
    fn bad_operations_are_refused_with_what_is_wrong() {
        for bad in [
            r#"{"op":"grep"}"#,
            r#"{"op":"stats","format":"f128"}"#,
            r#"{"op":"checksum","algorithm":"md4"}"#,
        ] {
            assert!(serde_json::from_str::<Op>(bad).is_err(), "{bad}");
        }
        let f64s = Op::Stats(Stats::new(Format::F64le));
        let err = Plan::new(f64s, 12, 4096).unwrap_err();
        assert!(err.to_string().contains("8-byte f64le"), "{err}");
        let plan = Plan::new(
            Op::Checksum {
                algorithm: Algorithm::Crc32c,
                stored: false,
            },
            10,
            4096,
        )
        .unwrap();
        let partial = plan.run(0, b"12345").unwrap();
        assert!(matches!(plan.finish(&partial), Err(Error::Incomplete(_))));
    }
}
