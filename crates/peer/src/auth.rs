//! Authentication of the peer API. Every request carries
//!
//! - `x-oed-date`: the time of signing, seconds since the epoch;
//! - `x-oed-content-sha256`: hex SHA-256 of the body, or `STREAMING-CRC32C` for a shard
//!   upload (whose body is checked chunk by chunk by CRC32C instead, see below);
//! - `authorization: OED1-HMAC-SHA256 <hex>`: HMAC-SHA256, keyed with the peer key, of
//!   `method \n path \n query \n date \n content digest`.
//!
//! The peer key is HMAC-SHA256(cluster secret, "oed peer api v1"), so the secret itself
//! never signs anything. Signatures are compared in constant time. A request outside the
//! clock-skew window is refused, which bounds replays to that window.
//!
//! Shard uploads are streamed and may be gigabytes: hashing them with SHA-256 before
//! sending would cost a whole extra pass over the data on the drive's small CPU. Their
//! signature covers everything else (including the full object record in the query), and
//! the body's integrity rests on the shard format's header checksum and per-chunk CRC32C,
//! which the receiver checks before committing. That protects against corruption, not
//! against an active attacker on the drives' network; see `docs/peer-api.md`.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Header with the signing time.
pub const DATE_HEADER: &str = "x-oed-date";
/// Header with the body digest.
pub const DIGEST_HEADER: &str = "x-oed-content-sha256";
/// Digest value of streamed shard uploads.
pub const STREAMING: &str = "STREAMING-CRC32C";
/// Scheme word of the authorization header.
pub const SCHEME: &str = "OED1-HMAC-SHA256";

type HmacSha256 = Hmac<Sha256>;

/// The key peers sign with, derived from the cluster secret.
#[derive(Clone)]
pub struct PeerKey([u8; 32]);

impl std::fmt::Debug for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerKey(..)")
    }
}

impl PeerKey {
    /// Derives the peer key from the cluster secret.
    #[must_use]
    pub fn derive(secret: &[u8]) -> Self {
        let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
        mac.update(b"oed peer api v1");
        Self(mac.finalize().into_bytes().into())
    }

    fn mac(&self, method: &str, path: &str, query: &str, date: &str, digest: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        for (i, part) in [method, path, query, date, digest].iter().enumerate() {
            if i > 0 {
                mac.update(b"\n");
            }
            mac.update(part.as_bytes());
        }
        mac
    }

    /// The hex signature of a request.
    #[must_use]
    pub fn sign(&self, method: &str, path: &str, query: &str, date: &str, digest: &str) -> String {
        hex::encode(
            self.mac(method, path, query, date, digest)
                .finalize()
                .into_bytes(),
        )
    }

    /// Whether `signature` (hex) is right for the request, compared in constant time.
    #[must_use]
    pub fn verify(
        &self,
        method: &str,
        path: &str,
        query: &str,
        date: &str,
        digest: &str,
        signature: &str,
    ) -> bool {
        let Ok(sig) = hex::decode(signature) else {
            return false;
        };
        self.mac(method, path, query, date, digest)
            .verify_slice(&sig)
            .is_ok()
    }
}

/// Hex SHA-256 of a body.
#[must_use]
pub fn body_digest(body: &[u8]) -> String {
    hex::encode(Sha256::digest(body))
}

/// Seconds since the epoch.
#[must_use]
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_bind_every_part() {
        let k = PeerKey::derive(b"0123456789abcdef");
        let sig = k.sign("GET", "/p", "a=1", "100", "d");
        assert!(k.verify("GET", "/p", "a=1", "100", "d", &sig));
        for (m, p, q, t, d) in [
            ("PUT", "/p", "a=1", "100", "d"),
            ("GET", "/q", "a=1", "100", "d"),
            ("GET", "/p", "a=2", "100", "d"),
            ("GET", "/p", "a=1", "101", "d"),
            ("GET", "/p", "a=1", "100", "e"),
            // Moving a separator must not give the same signature.
            ("GET", "/p\na=1", "", "100", "d"),
        ] {
            assert!(!k.verify(m, p, q, t, d, &sig), "{m} {p} {q} {t} {d}");
        }
        let other = PeerKey::derive(b"0123456789abcdeF");
        assert!(!other.verify("GET", "/p", "a=1", "100", "d", &sig));
        assert!(!k.verify("GET", "/p", "a=1", "100", "d", "zz"));
    }
}
