//! Checksums of an object computed in pieces where its bytes lie, and joined exactly.
//!
//! Each run of object bytes (a data chunk on the drive that holds it, or any byte range)
//! is folded into a small partial; partials of adjacent runs merge, in object order, into
//! the partial of the runs together; the partial of the whole object finishes into the
//! checksum a single pass over the object would give, bit for bit.
//!
//! - **CRC32C and CRC64NVME** are linear: the CRC of `A || B` follows from the CRCs of `A`
//!   and `B` and the length of `B` (CRC combination), so a partial is a CRC and a length.
//! - **BLAKE3** is a tree. Bytes that start at a multiple of a power-of-two size `C` (at
//!   least BLAKE3's 1 KiB chunk) and are `C` long, or run to the object's end, are a
//!   subtree of the object's tree, so the drive that holds them computes the subtree's
//!   chaining value; the coordinator joins them along the tree into the root hash. With
//!   `C` the chunk size, every data chunk but those of the last stripe is such a subtree.
//!   What a run holds beyond whole subtrees (the last stripe's chunks, the ends of a byte
//!   range) travels as bytes and is hashed where the runs meet.
//! - **SHA-256** is a chain: no part of it can be computed before the part before it, so
//!   it has no partials. It is computed where the bytes are streamed in order (the S3
//!   upload path), never split across drives.

use blake3::hazmat::{
    ChainingValue, HasherExt, Mode, merge_subtrees_non_root, merge_subtrees_root,
};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The CRC of some bytes and how many there were: what two adjacent runs need to combine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrcPartial {
    /// The CRC of the run's bytes.
    pub crc: u64,
    /// The run's length in bytes.
    pub len: u64,
}

/// The CRCs this module computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Crc {
    /// CRC-32C (Castagnoli), as S3's `x-amz-checksum-crc32c` and OED's chunk frames.
    Crc32c,
    /// CRC-64/NVME, as S3's `x-amz-checksum-crc64nvme`.
    Crc64nvme,
}

impl Crc {
    /// The partial of `bytes`, a run of their own.
    #[must_use]
    pub fn of(self, bytes: &[u8]) -> CrcPartial {
        let mut p = CrcPartial::default();
        self.update(&mut p, bytes);
        p
    }

    /// Folds the next bytes of a run into its partial.
    pub fn update(self, p: &mut CrcPartial, bytes: &[u8]) {
        match self {
            Crc::Crc32c => p.crc = u64::from(crc32c::crc32c_append(p.crc as u32, bytes)),
            Crc::Crc64nvme => {
                let more = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, bytes);
                p.crc = self.join(p.crc, more, bytes.len() as u64);
            }
        }
        p.len += bytes.len() as u64;
    }

    /// The partial of `left`'s run followed by `right`'s.
    #[must_use]
    pub fn merge(self, left: CrcPartial, right: CrcPartial) -> CrcPartial {
        CrcPartial {
            crc: self.join(left.crc, right.crc, right.len),
            len: left.len + right.len,
        }
    }

    fn join(self, a: u64, b: u64, b_len: u64) -> u64 {
        match self {
            Crc::Crc32c => u64::from(crc32c::crc32c_combine(a as u32, b as u32, b_len as usize)),
            Crc::Crc64nvme => {
                crc_fast::checksum_combine(crc_fast::CrcAlgorithm::Crc64Nvme, a, b, b_len)
            }
        }
    }
}

/// A run of an object's bytes as a BLAKE3 partial holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Piece {
    /// A whole subtree of the object's tree: its chaining value.
    Subtree {
        /// Object offset of its first byte: a multiple of the subtree size.
        offset: u64,
        /// Its length: the subtree size, or less for the one that ends the object.
        len: u64,
        /// Its chaining value, hex.
        #[serde(with = "hex32")]
        cv: ChainingValue,
    },
    /// Bytes that do not make a whole subtree on their own (the start or end of a run
    /// that is not aligned to the subtree size, or an object no larger than one
    /// subtree): they are joined with their neighbours' when partials merge.
    Bytes {
        /// Object offset of the first byte.
        offset: u64,
        /// The bytes, base64.
        #[serde(with = "crate::b64")]
        bytes: Vec<u8>,
    },
}

impl Piece {
    fn offset(&self) -> u64 {
        match self {
            Piece::Subtree { offset, .. } | Piece::Bytes { offset, .. } => *offset,
        }
    }

    fn end(&self) -> u64 {
        match self {
            Piece::Subtree { offset, len, .. } => offset + len,
            Piece::Bytes { offset, bytes } => offset + bytes.len() as u64,
        }
    }
}

/// BLAKE3 of an object of `object_len` bytes, in subtrees of `subtree` bytes (a power of
/// two, at least 1 KiB: OED's chunk size fits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blake3 {
    subtree: u64,
    object_len: u64,
}

/// A BLAKE3 partial: the pieces of adjacent runs, in object order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blake3Partial {
    /// The pieces, in object order, adjacent.
    pub pieces: Vec<Piece>,
}

impl Blake3 {
    /// BLAKE3 in subtrees of `subtree` bytes over an object of `object_len`.
    ///
    /// # Errors
    /// [`Error::BadArgument`] when `subtree` is not a power of two of at least 1024.
    pub fn new(subtree: u64, object_len: u64) -> Result<Self> {
        if !subtree.is_power_of_two() || subtree < blake3::CHUNK_LEN as u64 {
            return Err(Error::BadArgument(format!(
                "BLAKE3 subtrees of {subtree} bytes: a power of two of at least 1024"
            )));
        }
        Ok(Self {
            subtree,
            object_len,
        })
    }

    /// The partial of one run: `bytes` are object bytes `offset..offset + len`. Whole
    /// subtrees in it are hashed here; what is left over is kept as bytes (at most one
    /// subtree's worth at each end of the run).
    ///
    /// # Errors
    /// [`Error::BadArgument`] when the run ends past the object.
    pub fn run(&self, offset: u64, bytes: &[u8]) -> Result<Blake3Partial> {
        if offset + bytes.len() as u64 > self.object_len {
            return Err(Error::BadArgument(format!(
                "bytes {offset}..{} are past the object's {}",
                offset + bytes.len() as u64,
                self.object_len
            )));
        }
        let mut p = Blake3Partial::default();
        self.push(&mut p.pieces, offset, bytes);
        Ok(p)
    }

    /// Appends the pieces of object bytes `offset..` to `out`: subtrees where they are
    /// whole, bytes elsewhere.
    fn push(&self, out: &mut Vec<Piece>, offset: u64, bytes: &[u8]) {
        let mut at = 0usize;
        while at < bytes.len() {
            let pos = offset + at as u64;
            let left = bytes.len() - at;
            let to_boundary = (self.subtree - pos % self.subtree) as usize;
            let aligned = pos.is_multiple_of(self.subtree);
            let ends_object = pos + left as u64 == self.object_len;
            // A whole subtree, or the object's last one (short), but never the only one:
            // an object of one subtree (a whole one included) is hashed as a root, from
            // its bytes, at the end.
            let only = self.object_len <= self.subtree;
            if aligned && !only && (left >= to_boundary || (ends_object && pos > 0)) {
                let len = to_boundary.min(left);
                let cv = blake3::Hasher::new()
                    .set_input_offset(pos)
                    .update(&bytes[at..at + len])
                    .finalize_non_root();
                out.push(Piece::Subtree {
                    offset: pos,
                    len: len as u64,
                    cv,
                });
                at += len;
            } else {
                let len = to_boundary.min(left);
                match out.last_mut() {
                    Some(Piece::Bytes {
                        offset,
                        bytes: held,
                    }) if *offset + held.len() as u64 == pos => {
                        held.extend_from_slice(&bytes[at..at + len]);
                    }
                    _ => out.push(Piece::Bytes {
                        offset: pos,
                        bytes: bytes[at..at + len].to_vec(),
                    }),
                }
                at += len;
            }
        }
    }

    /// The partial of `left`'s runs followed by `right`'s: bytes left over at their
    /// meeting point are joined, and hashed once they make whole subtrees.
    #[must_use]
    pub fn merge(&self, left: Blake3Partial, right: Blake3Partial) -> Blake3Partial {
        let mut pieces: Vec<Piece> = Vec::with_capacity(left.pieces.len() + right.pieces.len());
        for piece in left.pieces.into_iter().chain(right.pieces) {
            match piece {
                Piece::Bytes { offset, bytes } => {
                    // Joined with bytes before it, then re-cut: the start may now be on a
                    // boundary with a whole subtree's worth.
                    let (start, mut joined) = match pieces.last() {
                        Some(Piece::Bytes {
                            offset: o,
                            bytes: b,
                        }) if *o + b.len() as u64 == offset => {
                            let Some(Piece::Bytes {
                                offset: o,
                                bytes: b,
                            }) = pieces.pop()
                            else {
                                unreachable!("matched just above")
                            };
                            (o, b)
                        }
                        _ => (offset, Vec::new()),
                    };
                    joined.extend_from_slice(&bytes);
                    self.push(&mut pieces, start, &joined);
                }
                subtree @ Piece::Subtree { .. } => pieces.push(subtree),
            }
        }
        Blake3Partial { pieces }
    }

    /// The object's BLAKE3 hash, hex, from the partial of all of it.
    ///
    /// # Errors
    /// [`Error::Incomplete`] when the pieces do not cover the object exactly once.
    pub fn finish(&self, p: &Blake3Partial) -> Result<String> {
        let mut at = 0;
        for piece in &p.pieces {
            if piece.offset() != at {
                return Err(Error::Incomplete(format!(
                    "BLAKE3: expected bytes from offset {at}, got {}",
                    piece.offset()
                )));
            }
            at = piece.end();
        }
        if at != self.object_len {
            return Err(Error::Incomplete(format!(
                "BLAKE3: the runs cover {at} of {} bytes",
                self.object_len
            )));
        }
        match p.pieces.as_slice() {
            [] => return Ok(blake3::hash(b"").to_hex().to_string()),
            [Piece::Bytes { bytes, .. }] => return Ok(blake3::hash(bytes).to_hex().to_string()),
            _ => {}
        }
        let mut leaves = Vec::with_capacity(p.pieces.len());
        for piece in &p.pieces {
            match piece {
                Piece::Subtree { cv, .. } => leaves.push(*cv),
                Piece::Bytes { offset, .. } => {
                    return Err(Error::Incomplete(format!(
                        "BLAKE3: bytes at offset {offset} were never joined into a subtree"
                    )));
                }
            }
        }
        let (left, right) = self.split(&leaves, self.object_len);
        Ok(merge_subtrees_root(&left, &right, Mode::Hash)
            .to_hex()
            .to_string())
    }

    /// The chaining values of the two children of a tree node over `len` bytes (more
    /// than one subtree) whose leaves are `leaves`.
    fn split(&self, leaves: &[ChainingValue], len: u64) -> (ChainingValue, ChainingValue) {
        // BLAKE3's left child holds the largest power-of-two number of chunks that leaves
        // the right child at least one byte; with `len` above the subtree size that is a
        // multiple of it, so both children are made of whole leaves.
        let left = blake3::hazmat::left_subtree_len(len);
        let n = (left / self.subtree) as usize;
        (
            self.node(&leaves[..n], left),
            self.node(&leaves[n..], len - left),
        )
    }

    fn node(&self, leaves: &[ChainingValue], len: u64) -> ChainingValue {
        if len <= self.subtree {
            return leaves[0];
        }
        let (l, r) = self.split(leaves, len);
        merge_subtrees_non_root(&l, &r, Mode::Hash)
    }
}

mod hex32 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        let mut out = String::with_capacity(64);
        for b in v {
            out.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
            out.push(char::from_digit(u32::from(b & 15), 16).unwrap_or('0'));
        }
        s.serialize_str(&out)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let text = String::deserialize(d)?;
        let bad = || serde::de::Error::custom("a chaining value is 64 hex digits");
        if text.len() != 64 {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (o, pair) in out.iter_mut().zip(text.as_bytes().chunks(2)) {
            let hi = (pair[0] as char).to_digit(16).ok_or_else(bad)?;
            let lo = (pair[1] as char).to_digit(16).ok_or_else(bad)?;
            *o = (hi * 16 + lo) as u8;
        }
        Ok(out)
    }
}

/// The CRC32C table, reflected (polynomial 0x82F63B78), as `crc32c_append` uses it.
const fn crc32c_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            bit += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static CRC32C_TABLE: [u32; 256] = crc32c_table();

/// The CRC32C of `a`, from the CRC32C of `a` followed by `tail` (the append undone byte by
/// byte: each step's table entry is the only one with the register's top byte). A shard
/// frame's stored CRC binds its stripe number after the chunk; this gives back the CRC32C
/// of the chunk alone, so that a drive can answer a CRC32C from what it stores without
/// reading the chunk.
#[must_use]
pub fn crc32c_unappend(crc: u32, tail: &[u8]) -> u32 {
    let mut state = !crc;
    for &b in tail.iter().rev() {
        let top = state >> 24;
        let i = CRC32C_TABLE
            .iter()
            .position(|&t| t >> 24 == top)
            .unwrap_or(0);
        state = ((state ^ CRC32C_TABLE[i]) << 8) | ((i as u32 ^ u32::from(b)) & 0xff);
    }
    !state
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn data(len: usize, seed: u64) -> Vec<u8> {
        (0..len as u64)
            .map(|i| ((i ^ seed << 20).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
            .collect()
    }

    /// Cuts `0..len` into runs at the given points (sorted, deduplicated, inside).
    fn runs(len: usize, mut cuts: Vec<usize>) -> Vec<std::ops::Range<usize>> {
        cuts.retain(|&c| c > 0 && c < len);
        cuts.sort_unstable();
        cuts.dedup();
        let starts = std::iter::once(0).chain(cuts.iter().copied());
        let ends = cuts.iter().copied().chain(std::iter::once(len));
        starts.zip(ends).map(|(a, b)| a..b).collect()
    }

    #[test]
    fn known_answers() {
        assert_eq!(Crc::Crc32c.of(b"123456789").crc, 0xe306_9283);
        assert_eq!(Crc::Crc64nvme.of(b"123456789").crc, 0xae8b_1486_0a79_9888);
        let b = Blake3::new(1024, 0).unwrap();
        assert_eq!(b.run(0, b"").unwrap(), Blake3Partial::default());
        assert_eq!(
            b.finish(&Blake3Partial::default()).unwrap(),
            blake3::hash(b"").to_hex().to_string()
        );
    }

    proptest! {
        /// CRCs of runs cut anywhere, folded in pieces cut anywhere, merged in any
        /// grouping (left fold, then right fold), equal the single-pass CRC bit for bit.
        #[test]
        fn crcs_merge_exactly(len in 0usize..20_000, seed: u64, cuts in prop::collection::vec(0usize..20_000, 0..8), piece in 1usize..5000) {
            let bytes = data(len, seed);
            for crc in [Crc::Crc32c, Crc::Crc64nvme] {
                let parts: Vec<CrcPartial> = runs(len, cuts.clone())
                    .into_iter()
                    .map(|r| {
                        let mut p = CrcPartial::default();
                        for chunk in bytes[r].chunks(piece) {
                            crc.update(&mut p, chunk);
                        }
                        p
                    })
                    .collect();
                let whole = crc.of(&bytes);
                let left = parts.iter().copied().reduce(|a, b| crc.merge(a, b)).unwrap_or_default();
                let right = parts.iter().copied().rev().reduce(|b, a| crc.merge(a, b)).unwrap_or_default();
                prop_assert_eq!(left, whole);
                prop_assert_eq!(right, whole);
            }
        }

        /// BLAKE3 of runs cut anywhere (aligned or not), with subtrees of every
        /// power-of-two size from 1 KiB, merged in two groups, equals `blake3::hash`.
        #[test]
        fn blake3_joins_exactly(len in 0usize..70_000, seed: u64, shift in 0u32..5, cuts in prop::collection::vec(0usize..70_000, 0..6), split in 0usize..8) {
            let bytes = data(len, seed);
            let size = 1024u64 << shift;
            let b = Blake3::new(size, len as u64).unwrap();
            let parts: Vec<Blake3Partial> = runs(len, cuts)
                .into_iter()
                .map(|r| b.run(r.start as u64, &bytes[r]).unwrap())
                .collect();
            let at = split.min(parts.len());
            let fold = |ps: &[Blake3Partial]| ps.iter().cloned().fold(Blake3Partial::default(), |a, p| b.merge(a, p));
            let joined = b.merge(fold(&parts[..at]), fold(&parts[at..]));
            let want = blake3::hash(&bytes).to_hex().to_string();
            prop_assert_eq!(b.finish(&joined).unwrap(), want);
            // Whatever was joined, at most one short piece of bytes is left: the object's
            // only subtree.
            let raw = joined.pieces.iter().filter(|p| matches!(p, Piece::Bytes { .. })).count();
            prop_assert!(raw == 0 || (raw == 1 && len as u64 <= size));
            // Through JSON, as partials cross the network.
            let wire: Blake3Partial = serde_json::from_str(&serde_json::to_string(&joined).unwrap()).unwrap();
            prop_assert_eq!(wire, joined);
        }
    }

    #[test]
    fn an_object_of_exactly_one_subtree_is_hashed_as_a_root() {
        let bytes = data(16_384, 0);
        let b = Blake3::new(16_384, 16_384).unwrap();
        let whole = b.run(0, &bytes).unwrap();
        assert_eq!(
            b.finish(&whole).unwrap(),
            blake3::hash(&bytes).to_hex().to_string()
        );
        let halves = b.merge(
            b.run(0, &bytes[..8192]).unwrap(),
            b.run(8192, &bytes[8192..]).unwrap(),
        );
        assert_eq!(
            b.finish(&halves).unwrap(),
            blake3::hash(&bytes).to_hex().to_string()
        );
    }

    #[test]
    fn blake3_refuses_runs_past_the_end_and_gaps() {
        let b = Blake3::new(4096, 10_000).unwrap();
        assert!(b.run(8000, &[0; 4096]).is_err());
        assert!(Blake3::new(3000, 1).is_err());
        let first = b.run(0, &[1; 4096]).unwrap();
        let last = b.run(8192, &[1; 1808]).unwrap();
        assert!(matches!(
            b.finish(&b.merge(first, last)),
            Err(Error::Incomplete(_))
        ));
    }
}
