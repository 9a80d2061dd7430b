//! The seal of a shard upload's body: a Poly1305 tag over every byte of it (the shard
//! file, then the record tail), sent after them, with a key used for that one upload
//! (the peer API derives it from the request's signature, whose nonce makes it new each
//! time: `docs/peer-api.md`, "Sealed shard uploads"). The drive feeds the bytes to the
//! seal where it already checks their CRC32C and commits nothing whose tag does not
//! match, so an upload altered on the way, or made by someone without the cluster's key,
//! stores nothing.
//!
//! Poly1305 is the cheapest of the MACs measured for this (BLAKE3 keyed, HMAC-SHA256,
//! POLYVAL) on 32-bit ARM without crypto instructions, and on x86 with AVX-512 IFMA, where
//! `ifma` computes it sixteen blocks at a time (`docs/results.md`, "Shard upload seal").
//! Other CPUs get the `poly1305` crate's code (AVX2 or portable); the tag is the same.

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

#[cfg(target_arch = "x86_64")]
mod ifma;

/// A seal being computed over a body fed in pieces of any size.
#[derive(Clone)]
pub struct Seal(Mac);

#[derive(Clone)]
enum Mac {
    Crate(Box<Grouped>),
    #[cfg(target_arch = "x86_64")]
    Ifma(Box<ifma::Poly1305>),
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
        #[cfg(target_arch = "x86_64")]
        if ifma::supported() {
            return Self(Mac::Ifma(Box::new(ifma::Poly1305::new(key))));
        }
        Self(Mac::Crate(Box::new(Grouped::new(key))))
    }

    /// The `poly1305` crate's computation, whatever the CPU: what the tests compare with.
    #[cfg(test)]
    fn portable(key: &[u8; KEY_LEN]) -> Self {
        Self(Mac::Crate(Box::new(Grouped::new(key))))
    }

    /// Adds the next piece of the body.
    pub fn update(&mut self, bytes: &[u8]) {
        match &mut self.0 {
            Mac::Crate(m) => m.update(bytes),
            #[cfg(target_arch = "x86_64")]
            Mac::Ifma(m) => m.update(bytes),
        }
    }

    /// The tag of the body fed (RFC 8439's Poly1305 of its bytes).
    #[must_use]
    pub fn tag(self) -> [u8; TAG_LEN] {
        match self.0 {
            Mac::Crate(m) => m.tag(),
            #[cfg(target_arch = "x86_64")]
            Mac::Ifma(m) => m.tag(),
        }
    }

    /// Whether `tag` is the body's, compared in constant time.
    #[must_use]
    pub fn verify(self, tag: &[u8]) -> bool {
        let mine = self.tag();
        tag.len() == TAG_LEN && mine.iter().zip(tag).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
    }

    /// Which computation this CPU gets: `"avx512-ifma"` or `"poly1305-crate"`.
    #[must_use]
    pub fn backend() -> &'static str {
        #[cfg(target_arch = "x86_64")]
        if ifma::supported() {
            return "avx512-ifma";
        }
        "poly1305-crate"
    }
}

/// The `poly1305` crate's Poly1305 (its 256-bit vector backend where the CPU has AVX2),
/// fed whole groups.
#[derive(Clone)]
struct Grouped {
    mac: poly1305::Poly1305,
    pending: Pending<GROUP>,
}

impl Grouped {
    fn new(key: &[u8; KEY_LEN]) -> Self {
        Self {
            mac: poly1305::Poly1305::new(key.into()),
            pending: Pending::default(),
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        // Whole groups only: nothing is padded.
        self.pending
            .feed(bytes, |whole| self.mac.update_padded(whole));
    }

    fn tag(self) -> [u8; TAG_LEN] {
        self.mac.compute_unpadded(self.pending.rest()).into()
    }
}

/// The bytes of a body not yet making up a whole piece of `N`, for a MAC that takes whole
/// pieces only.
#[derive(Clone)]
struct Pending<const N: usize> {
    bytes: [u8; N],
    have: usize,
}

impl<const N: usize> Default for Pending<N> {
    fn default() -> Self {
        Self {
            bytes: [0; N],
            have: 0,
        }
    }
}

impl<const N: usize> Pending<N> {
    /// Hands `take` every whole piece `bytes` completes, as few calls as it can (a
    /// multiple of `N` at once), and keeps the rest.
    fn feed(&mut self, mut bytes: &[u8], mut take: impl FnMut(&[u8])) {
        if self.have > 0 {
            let n = (N - self.have).min(bytes.len());
            self.bytes[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have < N {
                return;
            }
            take(&self.bytes);
            self.have = 0;
        }
        let whole = bytes.len() / N * N;
        if whole > 0 {
            take(&bytes[..whole]);
        }
        let rest = &bytes[whole..];
        self.bytes[..rest.len()].copy_from_slice(rest);
        self.have = rest.len();
    }

    /// The bytes kept: fewer than `N`.
    fn rest(&self) -> &[u8] {
        &self.bytes[..self.have]
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

    /// Deterministic bytes for the comparisons below (splitmix64).
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) as u8
            })
            .collect()
    }

    /// The computation this CPU gets (AVX-512 IFMA where it has it) gives the crate's tag
    /// for every key, length and cut, including the extremes of the limbs' bounds: keys
    /// whose `r` is all ones after the clamp and bodies of all-ones blocks.
    #[test]
    fn the_fast_tag_is_the_crates_for_any_key_body_and_cut() {
        let mut keys: Vec<[u8; 32]> = (0..24).map(|i| bytes(i, 32).try_into().unwrap()).collect();
        keys.push([0xff; 32]);
        keys.push([0; 32]);
        let mut edge = [0xff; 32];
        edge[16..].fill(0);
        keys.push(edge);
        let lengths = [
            0, 1, 15, 16, 17, 127, 128, 129, 255, 256, 300, 1023, 1024, 4099,
        ];
        for (k, key) in keys.iter().enumerate() {
            for (l, &len) in lengths.iter().enumerate() {
                let seed = (k * 100 + l) as u64;
                let bodies = [bytes(seed, len), vec![0xff; len], vec![0; len]];
                for body in &bodies {
                    let mut want = Seal::portable(key);
                    want.update(body);
                    let want = want.tag();
                    for cut in [1, 7, 16, 100, 128, 200, 4096] {
                        let mut s = Seal::new(key);
                        for piece in body.chunks(cut) {
                            s.update(piece);
                        }
                        assert_eq!(s.tag(), want, "key {k}, {len} bytes in pieces of {cut}");
                    }
                }
            }
        }
        let big = bytes(7, (1 << 20) + 77);
        for key in &keys[..4] {
            let mut want = Seal::portable(key);
            want.update(&big);
            let mut s = Seal::new(key);
            s.update(&big[..5]);
            s.update(&big[5..]);
            assert_eq!(s.tag(), want.tag(), "1 MiB and 77 bytes");
        }
    }

    /// CI names the computation its host must get (`OED_EXPECT_SEAL`), so a detection
    /// that silently falls back to the slower one fails the build.
    #[test]
    fn the_seal_backend_is_the_one_ci_expects() {
        if let Ok(want) = std::env::var("OED_EXPECT_SEAL") {
            assert_eq!(Seal::backend(), want);
        }
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
