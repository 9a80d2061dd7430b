//! SHA-256 of many independent messages at once ([`digest_many`]).
//!
//! SHA-256 is one chain of dependent rounds per message, so one message runs at what the
//! CPU's SHA instructions give it (SHA-NI on x86_64, the SHA2 extension on aarch64; the
//! `sha2` crate picks them at run time). Independent messages can share the work: with
//! AVX-512, sixteen of them advance together in the 32-bit lanes of the registers, with
//! its one-instruction rotates and three-input logic. The chunks of an upload signed in
//! aws-chunked form are such messages: each chunk's signature covers its own SHA-256
//! (only the signatures chain), so the chunks of a stripe can be hashed together.
//! `cargo bench -p oed-benches --bench sha256` measures both ways.

#[cfg(target_arch = "x86_64")]
mod x86;

use sha2::Digest as _;

/// SHA-256's initial state (FIPS 180-4, 5.3.3).
pub const INIT: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// SHA-256's round constants (FIPS 180-4, 4.2.2).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const K: [u32; 64] = [
    0x428a_2f98,
    0x7137_4491,
    0xb5c0_fbcf,
    0xe9b5_dba5,
    0x3956_c25b,
    0x59f1_11f1,
    0x923f_82a4,
    0xab1c_5ed5,
    0xd807_aa98,
    0x1283_5b01,
    0x2431_85be,
    0x550c_7dc3,
    0x72be_5d74,
    0x80de_b1fe,
    0x9bdc_06a7,
    0xc19b_f174,
    0xe49b_69c1,
    0xefbe_4786,
    0x0fc1_9dc6,
    0x240c_a1cc,
    0x2de9_2c6f,
    0x4a74_84aa,
    0x5cb0_a9dc,
    0x76f9_88da,
    0x983e_5152,
    0xa831_c66d,
    0xb003_27c8,
    0xbf59_7fc7,
    0xc6e0_0bf3,
    0xd5a7_9147,
    0x06ca_6351,
    0x1429_2967,
    0x27b7_0a85,
    0x2e1b_2138,
    0x4d2c_6dfc,
    0x5338_0d13,
    0x650a_7354,
    0x766a_0abb,
    0x81c2_c92e,
    0x9272_2c85,
    0xa2bf_e8a1,
    0xa81a_664b,
    0xc24b_8b70,
    0xc76c_51a3,
    0xd192_e819,
    0xd699_0624,
    0xf40e_3585,
    0x106a_a070,
    0x19a4_c116,
    0x1e37_6c08,
    0x2748_774c,
    0x34b0_bcb5,
    0x391c_0cb3,
    0x4ed8_aa4a,
    0x5b9c_ca4f,
    0x682e_6ff3,
    0x748f_82ee,
    0x78a5_636f,
    0x84c8_7814,
    0x8cc7_0208,
    0x90be_fffa,
    0xa450_6ceb,
    0xbef9_a3f7,
    0xc671_78f2,
];

/// Messages hashed together at most: AVX-512's 32-bit lanes.
pub const LANES: usize = 16;

/// Fewer messages than this are hashed one by one: sixteen lanes cost the same however
/// many of them are used, and SHA-NI hashes one message in a fraction of their time
/// (`docs/results.md`, "SHA-256").
pub const MIN_LANES: usize = 6;

/// Whether this CPU hashes in lanes (AVX-512 with byte shuffles); where it does not,
/// [`digest_many`] hashes one message after the other.
#[must_use]
pub fn lanes_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        x86::supported()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The SHA-256 of each message, in order: groups of [`LANES`] messages in SIMD lanes
/// where the CPU has them and a group holds at least [`MIN_LANES`], one by one otherwise.
#[must_use]
pub fn digest_many(msgs: &[&[u8]]) -> Vec<[u8; 32]> {
    let pieces: Vec<[&[u8]; 1]> = msgs.iter().map(|m| [*m]).collect();
    let msgs: Vec<&[&[u8]]> = pieces.iter().map(|p| &p[..]).collect();
    digest_pieces(&msgs)
}

/// As [`digest_many`], each message given as the pieces it came in (as received, not
/// joined): the lanes read whole blocks where they lie, and copy only a block that a
/// piece's end cuts (64 bytes).
#[must_use]
#[allow(unsafe_code)]
pub fn digest_pieces(msgs: &[&[&[u8]]]) -> Vec<[u8; 32]> {
    let mut out = vec![[0u8; 32]; msgs.len()];
    // Lanes run while every message of a group has whole blocks left: messages of like
    // lengths go together (the longest first), and those under half a group's longest
    // (an upload's last chunk) are hashed alone rather than cut the lanes short.
    let len = |i: usize| Cursor::new(msgs[i]).left;
    let mut order: Vec<usize> = (0..msgs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(len(i)));
    for ids in order.chunks(LANES) {
        let longest = len(ids[0]);
        let (long, short) = ids.split_at(ids.partition_point(|&i| 2 * len(i) >= longest));
        for part in [long, short] {
            let group: Vec<&[&[u8]]> = part.iter().map(|&i| msgs[i]).collect();
            for (&i, d) in part.iter().zip(lanes(&group)) {
                out[i] = d;
            }
        }
    }
    out
}

/// The digests of at most [`LANES`] messages, in lanes when they pay.
#[allow(unsafe_code)]
fn lanes(group: &[&[&[u8]]]) -> Vec<[u8; 32]> {
    let mut out = Vec::with_capacity(group.len());
    {
        let blocks = group
            .iter()
            .map(|m| Cursor::new(m).left / 64)
            .min()
            .unwrap_or(0);
        if group.len() < MIN_LANES || blocks == 0 || !lanes_supported() {
            out.extend(group.iter().map(|m| {
                let mut h = sha2::Sha256::new();
                for p in *m {
                    h.update(p);
                }
                <[u8; 32]>::from(h.finalize())
            }));
            return out;
        }
        let mut states = [INIT; LANES];
        // Unused lanes repeat the last message; their states are dropped.
        let mut cursors: [Cursor<'_>; LANES] =
            std::array::from_fn(|l| Cursor::new(group[l.min(group.len() - 1)]));
        #[cfg(target_arch = "x86_64")]
        {
            let mut done = 0;
            let mut bounce = [[0u8; 64]; LANES];
            while done < blocks {
                // The whole blocks every lane has in its current piece, or else one
                // block, copied out where a piece ends inside it.
                let n = cursors
                    .iter()
                    .map(|c| c.here().len() / 64)
                    .min()
                    .unwrap_or(0)
                    .min(blocks - done);
                if n > 0 {
                    let lanes: [&[u8]; LANES] = std::array::from_fn(|l| cursors[l].here());
                    // SAFETY: the CPU has the kernel's instructions (checked above), and
                    // every lane holds at least `n` blocks.
                    unsafe { x86::compress16(&mut states, &lanes, n) };
                    for c in &mut cursors {
                        c.skip(64 * n);
                    }
                    done += n;
                } else {
                    for (c, b) in cursors.iter_mut().zip(&mut bounce) {
                        c.copy_block(b);
                    }
                    let lanes: [&[u8]; LANES] = std::array::from_fn(|l| &bounce[l][..]);
                    // SAFETY: as above, one block each.
                    unsafe { x86::compress16(&mut states, &lanes, 1) };
                    done += 1;
                }
            }
        }
        for (c, state) in cursors.iter_mut().zip(&mut states).take(group.len()) {
            out.push(finish(state, c));
        }
    }
    out
}

/// A position in a message given in pieces.
#[derive(Clone, Copy)]
struct Cursor<'a> {
    pieces: &'a [&'a [u8]],
    /// Bytes of the current piece (`pieces[0]`) already taken.
    off: usize,
    /// Bytes taken in all.
    taken: usize,
    /// Bytes not yet taken.
    left: usize,
}

impl<'a> Cursor<'a> {
    fn new(pieces: &'a [&'a [u8]]) -> Self {
        let mut c = Self {
            pieces,
            off: 0,
            taken: 0,
            left: pieces.iter().map(|p| p.len()).sum(),
        };
        c.skip(0);
        c
    }

    /// The rest of the current piece.
    fn here(&self) -> &'a [u8] {
        self.pieces.first().map_or(&[], |p| &p[self.off..])
    }

    /// Takes `n` bytes, moving past pieces used up (and empty ones).
    fn skip(&mut self, mut n: usize) {
        self.taken += n;
        self.left -= n;
        while let Some((p, rest)) = self.pieces.split_first() {
            let here = p.len() - self.off;
            if n < here {
                self.off += n;
                return;
            }
            n -= here;
            self.pieces = rest;
            self.off = 0;
        }
    }

    /// Copies the next `out.len()` bytes (or as many as are left) into `out`; how many.
    fn copy_block(&mut self, out: &mut [u8]) -> usize {
        let mut filled = 0;
        while filled < out.len() && !self.pieces.is_empty() {
            let here = self.here();
            let n = here.len().min(out.len() - filled);
            out[filled..filled + n].copy_from_slice(&here[..n]);
            filled += n;
            self.skip(n);
        }
        filled
    }
}

/// The digest from `state`, the state after the bytes `c` has taken (whole blocks): the
/// remaining whole blocks, then the padding (FIPS 180-4, 5.1.1).
fn finish(state: &mut [u32; 8], c: &mut Cursor<'_>) -> [u8; 32] {
    let mut block = [0u8; 64];
    while c.left >= 64 {
        if c.here().len() >= 64 {
            compress(state, &c.here()[..64]);
            c.skip(64);
        } else {
            c.copy_block(&mut block);
            compress(state, &block);
        }
    }
    let mut last = [0u8; 128];
    let tail = c.copy_block(&mut last[..63]);
    last[tail] = 0x80;
    let n = if tail < 56 { 64 } else { 128 };
    let bits = (c.taken as u64).wrapping_mul(8);
    last[n - 8..n].copy_from_slice(&bits.to_be_bytes());
    for block in last[..n].chunks_exact(64) {
        compress(state, block);
    }
    let mut digest = [0u8; 32];
    for (d, w) in digest.chunks_exact_mut(4).zip(state.iter()) {
        d.copy_from_slice(&w.to_be_bytes());
    }
    digest
}

/// One block into `state`, with the `sha2` crate's compression function (its SHA
/// instructions where the CPU has them).
fn compress(state: &mut [u32; 8], block: &[u8]) {
    let block = sha2::digest::generic_array::GenericArray::from_slice(block);
    sha2::compress256(state, std::slice::from_ref(block));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    fn expected(msgs: &[&[u8]]) -> Vec<[u8; 32]> {
        msgs.iter()
            .map(|m| <[u8; 32]>::from(sha2::Sha256::digest(m)))
            .collect()
    }

    fn hex(d: [u8; 32]) -> String {
        use std::fmt::Write as _;
        d.iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }

    #[test]
    fn known_answers() {
        // FIPS 180-4's examples, hashed in lanes with fifteen more copies.
        let abc: &[u8] = b"abc";
        let long: &[u8] = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        let msgs = [abc; 16];
        assert_eq!(
            hex(digest_many(&msgs)[15]),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let msgs = [long; 16];
        assert_eq!(
            hex(digest_many(&msgs)[0]),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
    }

    #[test]
    fn every_group_size_and_length_as_one_by_one() {
        let lens = [
            0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 1000, 4096, 65_536, 65_537,
        ];
        for count in [1, 2, 5, 6, 7, 15, 16, 17, 31, 33] {
            for (i, &len) in lens.iter().enumerate() {
                // Equal lengths, and lengths that differ from message to message.
                let same: Vec<Vec<u8>> = (0..count).map(|j| message(j as u64 + 7, len)).collect();
                let mixed: Vec<Vec<u8>> = (0..count)
                    .map(|j| message(j as u64 + 99, lens[(i + j) % lens.len()]))
                    .collect();
                for msgs in [same, mixed] {
                    let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
                    assert_eq!(
                        digest_many(&refs),
                        expected(&refs),
                        "{count} messages, {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn messages_in_pieces_as_whole_ones() {
        // Pieces cut anywhere: inside blocks, on their edges, empty ones, one byte.
        for count in [1, 6, 16, 20] {
            let msgs: Vec<Vec<u8>> = (0..count)
                .map(|j| message(j as u64 + 3, 5000 + 61 * j))
                .collect();
            let cuts = [0usize, 1, 63, 64, 65, 200, 1000, 1001, 4095, 4096];
            let pieces: Vec<Vec<&[u8]>> = msgs
                .iter()
                .enumerate()
                .map(|(j, m)| {
                    let mut at: Vec<usize> =
                        cuts.iter().map(|c| (c + 7 * j).min(m.len())).collect();
                    at.push(m.len());
                    at.sort_unstable();
                    let mut prev = 0;
                    at.iter()
                        .map(|&a| {
                            let p = &m[prev..a];
                            prev = a;
                            p
                        })
                        .collect()
                })
                .collect();
            let refs: Vec<&[&[u8]]> = pieces.iter().map(Vec::as_slice).collect();
            let whole: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
            assert_eq!(digest_pieces(&refs), expected(&whole), "{count} messages");
        }
    }

    #[test]
    fn the_kernel_itself_when_the_cpu_has_it() {
        if !lanes_supported() {
            return;
        }
        let msgs: Vec<Vec<u8>> = (0..LANES).map(|j| message(j as u64, 64 * 9 + j)).collect();
        let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        assert_eq!(digest_many(&refs), expected(&refs));
    }
}
