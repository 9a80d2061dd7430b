//! MD5 for S3's `ETag` and `Content-MD5`: an incremental hasher ([`Md5`]) and the
//! compression function over several independent streams at once ([`Lanes`]).
//!
//! MD5 is one long chain of dependent additions and rotations: a single stream keeps a
//! CPU's execution units mostly idle, and SIMD cannot speed up one chain. Independent
//! streams can share the work, though: in the 32-bit lanes of SIMD registers (8 with AVX2,
//! 16 with AVX-512, 4 with NEON on aarch64), or interleaved in one scalar loop where there
//! is no SIMD kernel (3 lanes: the CPU overlaps their chains). The daemon's write path
//! feeds concurrent uploads through [`Lanes::compress`] on one thread; `cargo bench -p
//! oed-benches --bench md5` measures every kernel with every number of lanes.

/// MD5's initial state (RFC 1321).
pub const INIT: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

/// MD5's 64 steps (RFC 1321) for one block: `$step!(fun, a, b, c, d, m[i], k, s)` each,
/// the state words taking turns as `a`. Every kernel expands this one list with its own
/// `step` and its own `f`, `g`, `h`, `i` in scope.
macro_rules! md5_steps {
    ($step:ident, $a:ident, $b:ident, $c:ident, $d:ident, $m:ident) => {
        $step!(f, $a, $b, $c, $d, $m[0], 0xd76a_a478, 7);
        $step!(f, $d, $a, $b, $c, $m[1], 0xe8c7_b756, 12);
        $step!(f, $c, $d, $a, $b, $m[2], 0x2420_70db, 17);
        $step!(f, $b, $c, $d, $a, $m[3], 0xc1bd_ceee, 22);
        $step!(f, $a, $b, $c, $d, $m[4], 0xf57c_0faf, 7);
        $step!(f, $d, $a, $b, $c, $m[5], 0x4787_c62a, 12);
        $step!(f, $c, $d, $a, $b, $m[6], 0xa830_4613, 17);
        $step!(f, $b, $c, $d, $a, $m[7], 0xfd46_9501, 22);
        $step!(f, $a, $b, $c, $d, $m[8], 0x6980_98d8, 7);
        $step!(f, $d, $a, $b, $c, $m[9], 0x8b44_f7af, 12);
        $step!(f, $c, $d, $a, $b, $m[10], 0xffff_5bb1, 17);
        $step!(f, $b, $c, $d, $a, $m[11], 0x895c_d7be, 22);
        $step!(f, $a, $b, $c, $d, $m[12], 0x6b90_1122, 7);
        $step!(f, $d, $a, $b, $c, $m[13], 0xfd98_7193, 12);
        $step!(f, $c, $d, $a, $b, $m[14], 0xa679_438e, 17);
        $step!(f, $b, $c, $d, $a, $m[15], 0x49b4_0821, 22);
        $step!(g, $a, $b, $c, $d, $m[1], 0xf61e_2562, 5);
        $step!(g, $d, $a, $b, $c, $m[6], 0xc040_b340, 9);
        $step!(g, $c, $d, $a, $b, $m[11], 0x265e_5a51, 14);
        $step!(g, $b, $c, $d, $a, $m[0], 0xe9b6_c7aa, 20);
        $step!(g, $a, $b, $c, $d, $m[5], 0xd62f_105d, 5);
        $step!(g, $d, $a, $b, $c, $m[10], 0x0244_1453, 9);
        $step!(g, $c, $d, $a, $b, $m[15], 0xd8a1_e681, 14);
        $step!(g, $b, $c, $d, $a, $m[4], 0xe7d3_fbc8, 20);
        $step!(g, $a, $b, $c, $d, $m[9], 0x21e1_cde6, 5);
        $step!(g, $d, $a, $b, $c, $m[14], 0xc337_07d6, 9);
        $step!(g, $c, $d, $a, $b, $m[3], 0xf4d5_0d87, 14);
        $step!(g, $b, $c, $d, $a, $m[8], 0x455a_14ed, 20);
        $step!(g, $a, $b, $c, $d, $m[13], 0xa9e3_e905, 5);
        $step!(g, $d, $a, $b, $c, $m[2], 0xfcef_a3f8, 9);
        $step!(g, $c, $d, $a, $b, $m[7], 0x676f_02d9, 14);
        $step!(g, $b, $c, $d, $a, $m[12], 0x8d2a_4c8a, 20);
        $step!(h, $a, $b, $c, $d, $m[5], 0xfffa_3942, 4);
        $step!(h, $d, $a, $b, $c, $m[8], 0x8771_f681, 11);
        $step!(h, $c, $d, $a, $b, $m[11], 0x6d9d_6122, 16);
        $step!(h, $b, $c, $d, $a, $m[14], 0xfde5_380c, 23);
        $step!(h, $a, $b, $c, $d, $m[1], 0xa4be_ea44, 4);
        $step!(h, $d, $a, $b, $c, $m[4], 0x4bde_cfa9, 11);
        $step!(h, $c, $d, $a, $b, $m[7], 0xf6bb_4b60, 16);
        $step!(h, $b, $c, $d, $a, $m[10], 0xbebf_bc70, 23);
        $step!(h, $a, $b, $c, $d, $m[13], 0x289b_7ec6, 4);
        $step!(h, $d, $a, $b, $c, $m[0], 0xeaa1_27fa, 11);
        $step!(h, $c, $d, $a, $b, $m[3], 0xd4ef_3085, 16);
        $step!(h, $b, $c, $d, $a, $m[6], 0x0488_1d05, 23);
        $step!(h, $a, $b, $c, $d, $m[9], 0xd9d4_d039, 4);
        $step!(h, $d, $a, $b, $c, $m[12], 0xe6db_99e5, 11);
        $step!(h, $c, $d, $a, $b, $m[15], 0x1fa2_7cf8, 16);
        $step!(h, $b, $c, $d, $a, $m[2], 0xc4ac_5665, 23);
        $step!(i, $a, $b, $c, $d, $m[0], 0xf429_2244, 6);
        $step!(i, $d, $a, $b, $c, $m[7], 0x432a_ff97, 10);
        $step!(i, $c, $d, $a, $b, $m[14], 0xab94_23a7, 15);
        $step!(i, $b, $c, $d, $a, $m[5], 0xfc93_a039, 21);
        $step!(i, $a, $b, $c, $d, $m[12], 0x655b_59c3, 6);
        $step!(i, $d, $a, $b, $c, $m[3], 0x8f0c_cc92, 10);
        $step!(i, $c, $d, $a, $b, $m[10], 0xffef_f47d, 15);
        $step!(i, $b, $c, $d, $a, $m[1], 0x8584_5dd1, 21);
        $step!(i, $a, $b, $c, $d, $m[8], 0x6fa8_7e4f, 6);
        $step!(i, $d, $a, $b, $c, $m[15], 0xfe2c_e6e0, 10);
        $step!(i, $c, $d, $a, $b, $m[6], 0xa301_4314, 15);
        $step!(i, $b, $c, $d, $a, $m[13], 0x4e08_11a1, 21);
        $step!(i, $a, $b, $c, $d, $m[4], 0xf753_7e82, 6);
        $step!(i, $d, $a, $b, $c, $m[11], 0xbd3a_f235, 10);
        $step!(i, $c, $d, $a, $b, $m[2], 0x2ad7_d2bb, 15);
        $step!(i, $b, $c, $d, $a, $m[9], 0xeb86_d391, 21);
    };
}

#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// The state of an MD5 computation between pieces, which whole blocks can also be
/// hashed into from outside (in lanes with others: [`compress_lanes`]) through
/// [`Md5::begin`], [`Md5::chain_mut`] and [`Md5::keep`].
#[derive(Clone, Debug)]
pub struct Md5 {
    h: [u32; 4],
    /// Bytes hashed so far, including those waiting in `tail`.
    len: u64,
    /// Bytes short of a whole block, waiting for the next piece.
    tail: [u8; 64],
    tail_len: usize,
}

impl Default for Md5 {
    fn default() -> Self {
        Self::new()
    }
}

impl Md5 {
    /// Nothing hashed yet.
    #[must_use]
    pub fn new() -> Self {
        Self {
            h: INIT,
            len: 0,
            tail: [0; 64],
            tail_len: 0,
        }
    }

    /// Moves as much of `data` as fits into the tail, compressing it once it is whole;
    /// returns the bytes taken.
    fn fill_tail(&mut self, data: &[u8]) -> usize {
        if self.tail_len == 0 {
            return 0;
        }
        let take = (64 - self.tail_len).min(data.len());
        self.tail[self.tail_len..self.tail_len + take].copy_from_slice(&data[..take]);
        self.tail_len += take;
        if self.tail_len == 64 {
            md5::block_api::compress(&mut self.h, &[self.tail]);
            self.tail_len = 0;
        }
        take
    }

    /// Keeps `rest` (less than a block, with what the tail holds) for the next piece.
    pub fn keep(&mut self, rest: &[u8]) {
        debug_assert!(self.tail_len + rest.len() < 64);
        self.tail[self.tail_len..self.tail_len + rest.len()].copy_from_slice(rest);
        self.tail_len += rest.len();
    }

    /// Counts `data` in and completes the tail from it; returns where its next whole
    /// block starts. The caller hashes the whole blocks from there into
    /// [`Md5::chain_mut`] and hands the rest to [`Md5::keep`].
    #[must_use]
    pub fn begin(&mut self, data: &[u8]) -> usize {
        self.len += data.len() as u64;
        self.fill_tail(data)
    }

    /// The chaining value whole blocks are hashed into.
    pub fn chain_mut(&mut self) -> &mut [u32; 4] {
        &mut self.h
    }

    /// Bytes counted in so far.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was counted in yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Hashes `data` after what came before.
    pub fn absorb(&mut self, data: &[u8]) {
        let data = &data[self.begin(data)..];
        let (blocks, rest) = data.as_chunks::<64>();
        md5::block_api::compress(&mut self.h, blocks);
        self.keep(rest);
    }

    /// The digest.
    #[must_use]
    pub fn finish(mut self) -> [u8; 16] {
        let bits = self.len.wrapping_mul(8);
        let mut pad = [0u8; 72];
        pad[0] = 0x80;
        // To 56 bytes past a block boundary, then the length.
        let zeros = (55 + 64 - (self.len % 64) as usize) % 64;
        pad[1 + zeros..9 + zeros].copy_from_slice(&bits.to_le_bytes());
        self.absorb(&pad[..9 + zeros]);
        debug_assert_eq!(self.tail_len, 0);
        let mut out = [0u8; 16];
        for (o, h) in out.chunks_exact_mut(4).zip(self.h) {
            o.copy_from_slice(&h.to_le_bytes());
        }
        out
    }
}

/// The MD5 compression function over `N` independent streams at once: `data[l]` (a whole
/// number of blocks, the same for every lane) is hashed into `states[l]`. The lanes share
/// one loop, so each step's `N` chains are independent work the CPU overlaps; written with
/// plain arrays, the same code serves every target.
pub fn compress_lanes<const N: usize>(states: &mut [[u32; 4]; N], data: [&[u8]; N]) {
    let blocks = data[0].len() / 64;
    assert!(
        data.iter().all(|d| d.len() == blocks * 64),
        "every lane takes the same whole number of blocks"
    );
    let mut s: [[u32; N]; 4] = std::array::from_fn(|w| std::array::from_fn(|l| states[l][w]));
    for blk in 0..blocks {
        let mut m = [[0u32; N]; 16];
        for (l, lane) in data.iter().enumerate() {
            let (words, _) = lane[blk * 64..blk * 64 + 64].as_chunks::<4>();
            for (w, bytes) in words.iter().enumerate() {
                m[w][l] = u32::from_le_bytes(*bytes);
            }
        }
        let t = steps(s, &m);
        for (w, lanes) in s.iter_mut().enumerate() {
            for (x, y) in lanes.iter_mut().zip(t[w]) {
                *x = x.wrapping_add(y);
            }
        }
    }
    for (l, state) in states.iter_mut().enumerate() {
        *state = std::array::from_fn(|w| s[w][l]);
    }
}

/// A way to hash several MD5 streams at once: [`Lanes::best`] is the widest this CPU
/// has. Every kernel gives the same chaining values as [`md5::block_api::compress`]
/// (the known-answer tests check each one the CPU runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lanes {
    /// Up to 3 streams interleaved in plain Rust, on any target.
    Scalar,
    /// 8 streams in AVX2 registers (x86_64).
    Avx2,
    /// 16 streams in AVX-512 registers (x86_64 with AVX-512F).
    Avx512,
    /// 4 streams in NEON registers (aarch64).
    Neon,
}

/// The most lanes any kernel takes ([`Lanes::Avx512`]'s).
pub const MAX_LANES: usize = 16;

impl Lanes {
    /// Every kernel, widest first.
    pub const ALL: [Lanes; 4] = [Lanes::Avx512, Lanes::Avx2, Lanes::Neon, Lanes::Scalar];

    /// The widest kernel this CPU runs.
    #[must_use]
    pub fn best() -> Self {
        Self::ALL
            .into_iter()
            .find(|k| k.supported())
            .unwrap_or(Lanes::Scalar)
    }

    /// Whether this CPU runs the kernel.
    #[must_use]
    pub fn supported(self) -> bool {
        match self {
            Lanes::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Lanes::Avx2 => x86::avx2_supported(),
            #[cfg(target_arch = "x86_64")]
            Lanes::Avx512 => x86::avx512_supported(),
            #[cfg(target_arch = "aarch64")]
            Lanes::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// How many streams one call takes at most.
    #[must_use]
    pub const fn width(self) -> usize {
        match self {
            Lanes::Scalar => 3,
            Lanes::Avx2 => 8,
            Lanes::Avx512 => 16,
            Lanes::Neon => 4,
        }
    }

    /// The fewest streams the kernel hashes itself; fewer go to the scalar lanes. A
    /// vector step costs the same however many of its lanes carry a stream, and three
    /// scalar lanes are cheap, so a SIMD kernel pays only from the stream count at which
    /// one call of it costs less than the scalar lanes would for the same streams:
    /// AVX-512 from 4, AVX2 from 5 (`cargo bench -p oed-benches --bench md5`;
    /// `docs/results.md`, "MD5"). NEON's 3 is set without hardware to measure on (qemu
    /// says nothing about speed): one scalar chain leaves most of a small core idle.
    #[must_use]
    pub const fn min_streams(self) -> usize {
        match self {
            Lanes::Scalar => 1,
            Lanes::Avx2 => 5,
            Lanes::Avx512 => 4,
            Lanes::Neon => 3,
        }
    }

    /// The kernel's name, as logs and benchmarks print it.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Lanes::Scalar => "scalar",
            Lanes::Avx2 => "avx2",
            Lanes::Avx512 => "avx512",
            Lanes::Neon => "neon",
        }
    }

    /// Hashes `data[l]` into `states[l]` for every stream `l`: at most [`Lanes::width`]
    /// streams, each a whole number of blocks and all of the same length. A kernel this
    /// CPU does not run hashes in scalar lanes instead.
    ///
    /// # Panics
    /// When the counts or lengths break those rules.
    pub fn compress(self, states: &mut [[u32; 4]], data: &[&[u8]]) {
        let n = states.len();
        assert!(
            n == data.len() && n <= self.width(),
            "{n} states for {} streams, at most {}",
            data.len(),
            self.width()
        );
        let Some(first) = data.first() else { return };
        let blocks = first.len() / 64;
        assert!(
            data.iter().all(|d| d.len() == blocks * 64),
            "every stream takes the same whole number of blocks"
        );
        let kernel = if n < self.min_streams() || !self.supported() {
            Lanes::Scalar
        } else {
            self
        };
        match kernel {
            #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
            wide @ (Lanes::Avx2 | Lanes::Avx512 | Lanes::Neon) => {
                compress_padded(wide, states, data, blocks);
            }
            _ => compress_scalar(states, data),
        }
    }
}

/// Up to 3 streams in scalar lanes; more in groups of 3.
fn compress_scalar(states: &mut [[u32; 4]], data: &[&[u8]]) {
    for (states, data) in states.chunks_mut(3).zip(data.chunks(3)) {
        match (states, data) {
            ([s], [d]) => md5::block_api::compress(s, d.as_chunks::<64>().0),
            ([s0, s1], [d0, d1]) => {
                let mut both = [*s0, *s1];
                compress_lanes(&mut both, [d0, d1]);
                [*s0, *s1] = both;
            }
            ([s0, s1, s2], [d0, d1, d2]) => {
                let mut all = [*s0, *s1, *s2];
                compress_lanes(&mut all, [d0, d1, d2]);
                [*s0, *s1, *s2] = all;
            }
            _ => unreachable!("chunks of one to three"),
        }
    }
}

/// `n` streams in a SIMD kernel of width `w >= n` that this CPU runs: the lanes without a
/// stream hash the first stream's bytes into states that are thrown away.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[allow(unsafe_code)]
fn compress_padded(kernel: Lanes, states: &mut [[u32; 4]], data: &[&[u8]], blocks: usize) {
    let w = kernel.width();
    let mut all_states = [INIT; MAX_LANES];
    all_states[..states.len()].copy_from_slice(states);
    let mut all_data: [&[u8]; MAX_LANES] = [data[0]; MAX_LANES];
    all_data[..data.len()].copy_from_slice(data);
    let (s, d) = (&mut all_states[..w], &all_data[..w]);
    match kernel {
        // SAFETY (each arm): `Lanes::compress` picks a kernel only when `supported()`
        // says this CPU runs it; `s` and `d` hold the kernel's width of lanes, each with
        // `blocks` blocks.
        #[cfg(target_arch = "x86_64")]
        Lanes::Avx2 => unsafe { x86::compress8(s, d, blocks) },
        #[cfg(target_arch = "x86_64")]
        Lanes::Avx512 => unsafe { x86::compress16(s, d, blocks) },
        #[cfg(target_arch = "aarch64")]
        Lanes::Neon => unsafe { neon::compress4(s, d, blocks) },
        _ => unreachable!("{} is not a SIMD kernel of this target", kernel.name()),
    }
    let n = states.len();
    states.copy_from_slice(&all_states[..n]);
}

#[inline]
fn f(b: u32, c: u32, d: u32) -> u32 {
    (b & c) | (!b & d)
}

#[inline]
fn g(b: u32, c: u32, d: u32) -> u32 {
    (d & b) | (!d & c)
}

#[inline]
fn h(b: u32, c: u32, d: u32) -> u32 {
    b ^ c ^ d
}

#[inline]
fn i(b: u32, c: u32, d: u32) -> u32 {
    c ^ (b | !d)
}

/// One MD5 step in every lane: `a = b + (a + fun(b, c, d) + m + k) <<< s`.
macro_rules! step {
    ($fun:ident, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:expr, $s:literal) => {
        for l in 0..$a.len() {
            let x = $fun($b[l], $c[l], $d[l]);
            $a[l] = $b[l].wrapping_add(
                $a[l]
                    .wrapping_add($m[l])
                    .wrapping_add($k)
                    .wrapping_add(x)
                    .rotate_left($s),
            );
        }
    };
}

/// The 64 steps of one block in every lane, from state `[a, b, c, d]`.
#[inline]
fn steps<const N: usize>(s: [[u32; N]; 4], m: &[[u32; N]; 16]) -> [[u32; N]; 4] {
    let [mut a, mut b, mut c, mut d] = s;
    md5_steps!(step, a, b, c, d, m);
    [a, b, c, d]
}

#[cfg(test)]
mod tests {
    use super::*;
    use md5::Digest as _;

    /// Deterministic bytes that vary with every position (any will do for MD5).
    fn bytes(len: usize, seed: u32) -> Vec<u8> {
        (0..len as u64)
            .map(|i| ((i ^ u64::from(seed) << 32).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
            .collect()
    }

    #[test]
    fn lanes_compress_as_the_reference_does() {
        fn check<const N: usize>() {
            let inputs: Vec<Vec<u8>> = (0..N).map(|l| bytes(64 * 37, l as u32 + 7)).collect();
            let mut states = [INIT; N];
            compress_lanes(&mut states, std::array::from_fn(|l| &inputs[l][..]));
            for (l, input) in inputs.iter().enumerate() {
                let mut want = INIT;
                md5::block_api::compress(&mut want, input.as_chunks::<64>().0);
                assert_eq!(states[l], want, "lane {l} of {N}");
            }
        }
        check::<1>();
        check::<2>();
        check::<3>();
        check::<4>();
    }

    /// Every kernel this CPU runs, with every number of streams it takes, from states
    /// part-way through a stream, agrees with the reference compression function.
    #[test]
    fn every_kernel_agrees_with_the_reference() {
        let supported: Vec<Lanes> = Lanes::ALL.into_iter().filter(|k| k.supported()).collect();
        #[cfg(target_arch = "aarch64")]
        assert!(supported.contains(&Lanes::Neon), "aarch64 always has NEON");
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            supported.contains(&Lanes::Avx2),
            std::arch::is_x86_feature_detected!("avx2")
        );
        assert_eq!(supported.first(), Some(&Lanes::best()));
        for kernel in supported {
            for n in 0..=kernel.width() {
                for blocks in [0, 1, 37] {
                    let inputs: Vec<Vec<u8>> = (0..n)
                        .map(|l| bytes(64 * blocks, (l * 131 + blocks) as u32))
                        .collect();
                    let start: Vec<[u32; 4]> = (0..n)
                        .map(|l| {
                            let mut h = INIT;
                            let prefix = bytes(64 * (l % 3), l as u32);
                            md5::block_api::compress(&mut h, prefix.as_chunks::<64>().0);
                            h
                        })
                        .collect();
                    let mut states = start.clone();
                    let data: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
                    kernel.compress(&mut states, &data);
                    for (l, input) in inputs.iter().enumerate() {
                        let mut want = start[l];
                        md5::block_api::compress(&mut want, input.as_chunks::<64>().0);
                        assert_eq!(
                            states[l],
                            want,
                            "{} lane {l} of {n}, {blocks} blocks",
                            kernel.name()
                        );
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "same whole number of blocks")]
    fn streams_of_unequal_length_are_refused() {
        let (a, b) = (vec![0u8; 128], vec![0u8; 64]);
        Lanes::best().compress(&mut [INIT; 2], &[&a, &b]);
    }

    /// Every padding length, and pieces that leave tails to carry over.
    #[test]
    fn incremental_hashing_matches_the_reference() {
        for len in 0..=200 {
            let data = bytes(len, len as u32);
            let mut h = Md5::new();
            for piece in data.chunks(1 + len % 67) {
                h.absorb(piece);
            }
            assert_eq!(h.len(), len as u64);
            let want: [u8; 16] = md5::Md5::digest(&data).into();
            assert_eq!(h.finish(), want, "length {len}");
        }
    }
}
