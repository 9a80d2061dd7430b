//! Authentication of the peer API. Every request carries
//!
//! - `x-oed-date`: the time of signing, seconds since the epoch;
//! - `x-oed-content-sha256`: hex SHA-256 of the body, or for a shard upload
//!   `STREAMING-POLY1305`: the body is sealed (below);
//! - `authorization: OED1-HMAC-SHA256 <hex>`: HMAC-SHA256, keyed with the peer key, of
//!   `method \n path \n query \n date \n content digest`.
//!
//! The peer key is HMAC-SHA256(cluster secret, "oed peer api v1"), so the secret itself
//! never signs anything. Signatures are compared in constant time. A request outside the
//! clock-skew window is refused; within it, a request that changes anything (every method
//! but GET) names the drive it is for, `target=<drive id>`, which refuses it when that is
//! another, and carries a nonce, `nonce=<ms>-<32 hex digits>` ([`nonce`]), which the drive
//! takes once ([`crate::replay`]): both in its query, so both signed. A drive's request
//! names the epoch of the cluster map it runs the same way, `epoch=<n>` ([`EPOCH`]).
//!
//! Shard uploads are streamed and may be gigabytes: hashing them with SHA-256 before
//! sending would need them whole, or a second pass. Their body (the shard file, then the
//! record tail) is sealed instead ([`oed_model::seal`]): a Poly1305 tag computed as the
//! bytes are sent and sent after them, keyed for that request alone with
//! HMAC-SHA256(peer key, "oed shard seal v1\n" + the request's signature), which the
//! request's nonce makes new each time. The drive feeds the bytes to the seal where it checks their
//! CRC32C and commits the upload only when the tag matches.
//!
//! `STREAMING-CRC32C` names the unsealed shard upload of versions before the seal. A drive
//! takes it only with `legacy_peer_requests` set, for a rolling upgrade from one of
//! them (`docs/peer-api.md`, "Sealed shard uploads").

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Header with the signing time.
pub const DATE_HEADER: &str = "x-oed-date";
/// Header with the body digest.
pub const DIGEST_HEADER: &str = "x-oed-content-sha256";
/// Digest value of the unsealed shard uploads of earlier versions.
pub const STREAMING: &str = "STREAMING-CRC32C";
/// Digest value of sealed shard uploads.
pub const SEALED: &str = "STREAMING-POLY1305";
/// The query parameter with the epoch of the cluster map the sender runs (signed with the
/// rest of the query: a drive refuses a shard upload of another epoch, and nobody on the
/// way can make it refuse or take one by changing it).
pub const EPOCH: &str = "epoch";
/// The query parameter with a request's nonce.
pub const NONCE: &str = "nonce";
/// The query parameter naming the drive a request is for (its id).
pub const TARGET: &str = "target";
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

    /// The key of the seal of the body of the request signed with `signature` (hex, in
    /// either case: the key is of its bytes): that request's alone.
    #[must_use]
    pub fn seal_key(&self, signature: &str) -> [u8; oed_model::seal::KEY_LEN] {
        let mut mac = self.keyed(b"oed shard seal v1\n");
        mac.update(&hex::decode(signature).unwrap_or_default());
        mac.finalize().into_bytes().into()
    }

    /// The tag of the time `ms` a drive answered the request signed with `signature`
    /// with (`x-oed-time-tag`): only a holder of the key can make it, so an answer's
    /// time cannot be changed on the way.
    #[must_use]
    pub fn time_tag(&self, signature: &str, ms: u64) -> String {
        hex::encode(self.time_mac(signature, ms).finalize().into_bytes())
    }

    /// Whether `tag` is [`PeerKey::time_tag`]'s, compared in constant time.
    #[must_use]
    pub fn verify_time(&self, signature: &str, ms: u64, tag: &str) -> bool {
        let Ok(tag) = hex::decode(tag) else {
            return false;
        };
        self.time_mac(signature, ms).verify_slice(&tag).is_ok()
    }

    /// The MAC of [`PeerKey::time_tag`], before it is finalized.
    fn time_mac(&self, signature: &str, ms: u64) -> HmacSha256 {
        let mut mac = self.keyed(b"oed answer time v1\n");
        mac.update(&hex::decode(signature).unwrap_or_default());
        mac.update(b"\n");
        mac.update(ms.to_string().as_bytes());
        mac
    }

    fn keyed(&self, domain: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(domain);
        mac
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

/// A new nonce: the time in milliseconds since the epoch, `-`, 16 random bytes in hex.
#[must_use]
pub fn nonce() -> String {
    format!(
        "{}-{}",
        oed_model::record::now_ms(),
        hex::encode(rand::random::<[u8; 16]>())
    )
}

/// A nonce's time (milliseconds since the epoch) and its first 8 random bytes, or `None`
/// when it is not one.
#[must_use]
pub fn parse_nonce(nonce: &str) -> Option<(u64, u64)> {
    let (ms, random) = nonce.split_once('-')?;
    if random.len() != 32 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((
        ms.parse().ok()?,
        u64::from_str_radix(&random[..16], 16).ok()?,
    ))
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

    #[test]
    fn an_answers_time_and_a_seal_key_are_bound_to_the_request_and_the_key() {
        let k = PeerKey::derive(b"0123456789abcdef");
        let sig = k.sign("PUT", "/p", "nonce=1", "100", "d");
        let tag = k.time_tag(&sig, 1_000);
        assert!(k.verify_time(&sig, 1_000, &tag));
        assert!(!k.verify_time(&sig, 1_001, &tag), "another time");
        let other_sig = k.sign("PUT", "/p", "nonce=2", "100", "d");
        assert!(!k.verify_time(&other_sig, 1_000, &tag), "another request");
        let other = PeerKey::derive(b"0123456789abcdeF");
        assert!(!other.verify_time(&sig, 1_000, &tag), "another key");
        // The seal key is of the signature's bytes: its case does not matter.
        assert_eq!(k.seal_key(&sig), k.seal_key(&sig.to_uppercase()));
        assert_ne!(k.seal_key(&sig), k.seal_key(&other_sig));
    }
}
