//! S3's checksums: the algorithms of `x-amz-checksum-*` (CRC32, CRC32C, CRC64NVME,
//! SHA-1, SHA-256), computed over a body as it streams, and the two forms of a multipart
//! object's checksum: **composite** (the checksum of the parts' checksums, then `-N`) and
//! **full object** (the CRC of the whole object, combined from the parts' CRCs and
//! lengths without reading a byte again; CRCs only).
//!
//! Values are as S3 carries them: the digest's bytes, big-endian for the CRCs, in base64.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::{Error, Result};

/// The checksum algorithms of S3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Algorithm {
    /// CRC-32 (ISO-HDLC, as zlib's).
    Crc32,
    /// CRC-32C (Castagnoli).
    Crc32c,
    /// CRC-64/NVME.
    Crc64nvme,
    /// SHA-1.
    Sha1,
    /// SHA-256.
    Sha256,
}

/// Every algorithm, in S3's order.
pub const ALL: [Algorithm; 5] = [
    Algorithm::Crc32,
    Algorithm::Crc32c,
    Algorithm::Crc64nvme,
    Algorithm::Sha1,
    Algorithm::Sha256,
];

impl Algorithm {
    /// The name S3 gives it (`CRC32`, ...).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "CRC32",
            Algorithm::Crc32c => "CRC32C",
            Algorithm::Crc64nvme => "CRC64NVME",
            Algorithm::Sha1 => "SHA1",
            Algorithm::Sha256 => "SHA256",
        }
    }

    /// The algorithm S3 names `name` (any case).
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        ALL.into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
    }

    /// The header that carries its value (`x-amz-checksum-crc32`, ...).
    #[must_use]
    pub fn header(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "x-amz-checksum-crc32",
            Algorithm::Crc32c => "x-amz-checksum-crc32c",
            Algorithm::Crc64nvme => "x-amz-checksum-crc64nvme",
            Algorithm::Sha1 => "x-amz-checksum-sha1",
            Algorithm::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// Bytes of its digest.
    #[must_use]
    pub fn digest_len(self) -> usize {
        match self {
            Algorithm::Crc32 | Algorithm::Crc32c => 4,
            Algorithm::Crc64nvme => 8,
            Algorithm::Sha1 => 20,
            Algorithm::Sha256 => 32,
        }
    }

    /// Whether it is a CRC (which combines, so a multipart object can have a full-object
    /// checksum).
    #[must_use]
    pub fn is_crc(self) -> bool {
        matches!(
            self,
            Algorithm::Crc32 | Algorithm::Crc32c | Algorithm::Crc64nvme
        )
    }

    fn crc(self) -> Option<crc_fast::CrcAlgorithm> {
        match self {
            Algorithm::Crc32 => Some(crc_fast::CrcAlgorithm::Crc32IsoHdlc),
            Algorithm::Crc32c => Some(crc_fast::CrcAlgorithm::Crc32Iscsi),
            Algorithm::Crc64nvme => Some(crc_fast::CrcAlgorithm::Crc64Nvme),
            _ => None,
        }
    }

    /// A hasher of this algorithm.
    #[must_use]
    pub fn hasher(self) -> Hasher {
        Hasher(match self.crc() {
            Some(c) => State::Crc(self, crc_fast::Digest::new(c)),
            None if self == Algorithm::Sha1 => State::Sha1(sha1::Sha1::default()),
            None => State::Sha256(sha2::Sha256::new()),
        })
    }

    /// Decodes a value a client sent (base64 of a digest of the right length).
    ///
    /// # Errors
    /// [`Error::BadArgument`] naming the header, when it is not one.
    pub fn decode(self, value: &str) -> Result<Vec<u8>> {
        base64::engine::general_purpose::STANDARD
            .decode(value.trim())
            .ok()
            .filter(|d| d.len() == self.digest_len())
            .ok_or_else(|| {
                Error::BadArgument(format!(
                    "Value for {} header is invalid: {} bytes in base64 expected",
                    self.header(),
                    self.digest_len()
                ))
            })
    }

    /// The CRC of `a` followed by `b`, from theirs and `b`'s length (a full-object CRC
    /// of a multipart object, from its parts'). `None` for SHA-1 and SHA-256.
    #[must_use]
    pub fn combine(self, a: &[u8], b: &[u8], len_b: u64) -> Option<Vec<u8>> {
        let crc = self.crc()?;
        let value = |d: &[u8]| d.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x));
        let joined = crc_fast::checksum_combine(crc, value(a), value(b), len_b);
        Some(joined.to_be_bytes()[8 - self.digest_len()..].to_vec())
    }

    /// A composite checksum: this algorithm over the parts' digests, concatenated, then
    /// `-` and their count (S3's `COMPOSITE` type).
    #[must_use]
    pub fn composite(self, parts: &[Vec<u8>]) -> String {
        let mut h = self.hasher();
        for p in parts {
            h.update(p);
        }
        format!("{}-{}", encode(&h.finish()), parts.len())
    }
}

/// base64, as S3's checksum headers carry digests.
#[must_use]
pub fn encode(digest: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(digest)
}

/// A checksum being computed over a body.
pub struct Hasher(State);

enum State {
    Crc(Algorithm, crc_fast::Digest),
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
}

impl Hasher {
    /// The next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        match &mut self.0 {
            State::Crc(_, d) => d.update(bytes),
            State::Sha1(h) => sha1::Digest::update(h, bytes),
            State::Sha256(h) => h.update(bytes),
        }
    }

    /// The digest's bytes.
    #[must_use]
    pub fn finish(self) -> Vec<u8> {
        match self.0 {
            State::Crc(a, d) => d.finalize().to_be_bytes()[8 - a.digest_len()..].to_vec(),
            State::Sha1(h) => sha1::Digest::finalize(h).to_vec(),
            State::Sha256(h) => h.finalize().to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn digest(a: Algorithm, bytes: &[u8]) -> Vec<u8> {
        let mut h = a.hasher();
        h.update(bytes);
        h.finish()
    }

    /// The check values of the CRC catalogue ("123456789"), and SHA's known digests.
    #[test]
    fn known_values() {
        let check = b"123456789";
        assert_eq!(
            digest(Algorithm::Crc32, check),
            0xCBF4_3926u32.to_be_bytes()
        );
        assert_eq!(
            digest(Algorithm::Crc32c, check),
            0xE306_9283u32.to_be_bytes()
        );
        assert_eq!(
            digest(Algorithm::Crc64nvme, check),
            0xAE8B_1486_0A79_9888u64.to_be_bytes()
        );
        assert_eq!(
            hex(&digest(Algorithm::Sha1, b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            encode(&digest(Algorithm::Sha256, b"")),
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
        );
        for a in ALL {
            assert_eq!(Algorithm::parse(&a.name().to_lowercase()), Some(a));
            assert!(a.decode("not base64!").is_err());
            assert!(a.decode(&encode(&[0; 3])).is_err());
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().fold(String::new(), |mut s, x| {
            use std::fmt::Write as _;
            let _ = write!(s, "{x:02x}");
            s
        })
    }

    proptest! {
        /// A CRC combined from two runs' is the CRC of both.
        #[test]
        fn crcs_combine(a in prop::collection::vec(any::<u8>(), 0..3000), b in prop::collection::vec(any::<u8>(), 0..3000)) {
            for alg in [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64nvme] {
                let whole = digest(alg, &[a.clone(), b.clone()].concat());
                let joined = alg.combine(&digest(alg, &a), &digest(alg, &b), b.len() as u64).unwrap();
                prop_assert_eq!(joined, whole);
            }
            prop_assert!(Algorithm::Sha256.combine(&[], &[], 0).is_none());
        }
    }
}
