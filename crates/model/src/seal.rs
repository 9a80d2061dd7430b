//! The seal of a shard upload's body: a Poly1305 tag over every byte of it (the shard
//! file, then the record tail), sent after them, with a key used for that one upload
//! (the peer API derives it from the request's signature, whose nonce makes it new each
//! time: `docs/peer-api.md`, "Sealed shard uploads"). The drive feeds the bytes to the
//! seal where it already checks their CRC32C and commits nothing whose tag does not
//! match, so an upload altered on the way, or made by someone without the cluster's key,
//! stores nothing.
//!
//! Poly1305 is the cheapest of the MACs measured for this (BLAKE3 keyed, HMAC-SHA256,
//! POLYVAL) on 32-bit ARM without crypto instructions, and close to the cheapest on x86
//! (`docs/results.md`, "Shard upload seal").

use poly1305::universal_hash::{KeyInit, UniversalHash};

/// Bytes of a seal's key.
pub const KEY_LEN: usize = 32;
/// Bytes of a seal's tag, sent after the body it seals.
pub const TAG_LEN: usize = 16;

/// Bytes fed to Poly1305 at a time: four of its 16-byte blocks, which its vector backend
/// takes at once. Fed in other amounts (the body comes in pieces of any length), it would
/// keep blocks back in a cache of its own and take every later block through it, which
/// profiles showed costing twice the arithmetic.
const GROUP: usize = 64;

/// A seal being computed over a body fed in pieces of any size.
#[derive(Clone)]
pub struct Seal {
    mac: poly1305::Poly1305,
    /// Bytes of a group not yet complete.
    partial: [u8; GROUP],
    have: usize,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seal(..)")
    }
}

impl Seal {
    /// A seal keyed with `key`, which must seal no other body.
    #[must_use]
    pub fn new(key: &[u8; KEY_LEN]) -> Self {
        Self {
            mac: poly1305::Poly1305::new(key.into()),
            partial: [0; GROUP],
            have: 0,
        }
    }

    /// Adds the next piece of the body.
    pub fn update(&mut self, mut bytes: &[u8]) {
        if self.have > 0 {
            let n = (GROUP - self.have).min(bytes.len());
            self.partial[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have < GROUP {
                return;
            }
            self.mac.update_padded(&self.partial);
            self.have = 0;
        }
        let whole = bytes.len() / GROUP * GROUP;
        if whole > 0 {
            // Whole groups only: nothing is padded.
            self.mac.update_padded(&bytes[..whole]);
        }
        let rest = &bytes[whole..];
        self.partial[..rest.len()].copy_from_slice(rest);
        self.have = rest.len();
    }

    /// The tag of the body fed (RFC 8439's Poly1305 of its bytes).
    #[must_use]
    pub fn tag(self) -> [u8; TAG_LEN] {
        self.mac.compute_unpadded(&self.partial[..self.have]).into()
    }

    /// Whether `tag` is the body's, compared in constant time.
    #[must_use]
    pub fn verify(self, tag: &[u8]) -> bool {
        let mine = self.tag();
        tag.len() == TAG_LEN && mine.iter().zip(tag).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8439, 2.5.2.
    const KEY: [u8; 32] = [
        0x85, 0xd6, 0xbe, 0x78, 0x57, 0x55, 0x6d, 0x33, 0x7f, 0x44, 0x52, 0xfe, 0x42, 0xd5, 0x06,
        0xa8, 0x01, 0x03, 0x80, 0x8a, 0xfb, 0x0d, 0xb2, 0xfd, 0x4a, 0xbf, 0xf6, 0xaf, 0x41, 0x49,
        0xf5, 0x1b,
    ];
    const MESSAGE: &[u8] = b"Cryptographic Forum Research Group";
    const TAG: [u8; 16] = [
        0xa8, 0x06, 0x1d, 0xc1, 0x30, 0x51, 0x36, 0xc6, 0xc2, 0x2b, 0x8b, 0xaf, 0x0c, 0x01, 0x27,
        0xa9,
    ];

    #[test]
    fn the_tag_is_rfc_8439s_however_the_body_is_cut() {
        let long: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let mut whole = Seal::new(&KEY);
        whole.update(&long);
        let whole = whole.tag();
        let reference: [u8; 16] = poly1305::Poly1305::new((&KEY).into())
            .compute_unpadded(&long)
            .into();
        assert_eq!(whole, reference, "RFC 8439's Poly1305 of the whole");
        for cut in [1, 3, 4, 15, 16, 17, 63, 64, 65, 100] {
            let mut s = Seal::new(&KEY);
            for piece in long.chunks(cut) {
                s.update(piece);
            }
            assert_eq!(s.tag(), whole, "1000 bytes in pieces of {cut}");
        }
        for cut in [1, 3, 15, 16, 17, 33, 34] {
            let mut s = Seal::new(&KEY);
            for piece in MESSAGE.chunks(cut) {
                s.update(piece);
            }
            assert_eq!(s.tag(), TAG, "pieces of {cut}");
        }
        let mut s = Seal::new(&KEY);
        s.update(&MESSAGE[..5]);
        s.update(&[]);
        s.update(&MESSAGE[5..]);
        assert!(s.verify(&TAG));
    }

    #[test]
    fn a_changed_byte_key_or_tag_does_not_verify() {
        let sealed = |key: &[u8; 32], body: &[u8]| {
            let mut s = Seal::new(key);
            s.update(body);
            s
        };
        let mut body = MESSAGE.to_vec();
        body[7] ^= 1;
        assert!(!sealed(&KEY, &body).verify(&TAG));
        let mut other = KEY;
        other[0] ^= 1;
        assert!(!sealed(&other, MESSAGE).verify(&TAG));
        assert!(!sealed(&KEY, MESSAGE).verify(&TAG[..15]));
        let mut longer = MESSAGE.to_vec();
        longer.push(0);
        assert!(!sealed(&KEY, &longer).verify(&TAG));
    }
}
