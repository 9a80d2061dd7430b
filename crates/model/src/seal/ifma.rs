//! Poly1305 with AVX-512 IFMA (`x86_64`): the same tag as RFC 8439's, computed sixteen
//! blocks at a time. Numbers mod 2^130 - 5 are kept in three limbs of 44, 44 and 42 bits,
//! so `vpmadd52luq`/`vpmadd52huq` multiply them whole (52-bit inputs, the 104-bit
//! product's low and high halves). Two registers of eight lanes take a 256-byte step's two
//! halves, every lane one block, and are multiplied by `r^16` each step; the last step
//! multiplies lane by lane by `r^16` down to `r^1` and adds them all. The rest of a body
//! (under 256 bytes) and the finish are done one block at a time in the same limbs, the
//! 64-bit form of poly1305-donna.
//!
//! The `poly1305` crate's AVX2 backend, which the seal used before, takes about twice as
//! long per byte on the machines with IFMA measured (`docs/results.md`, "Shard upload
//! seal").
#![allow(unsafe_code)]

use super::Pending;

use core::arch::x86_64::{
    __m512i, _mm512_add_epi64, _mm512_and_si512, _mm512_loadu_si512, _mm512_madd52hi_epu64,
    _mm512_madd52lo_epu64, _mm512_or_si512, _mm512_permutex2var_epi64, _mm512_reduce_add_epi64,
    _mm512_set_epi64, _mm512_set1_epi64, _mm512_setzero_si512, _mm512_slli_epi64,
    _mm512_srli_epi64,
};

const M44: u64 = (1 << 44) - 1;
const M42: u64 = (1 << 42) - 1;
/// Lanes of a 512-bit register of 64-bit limbs.
const LANES: usize = 8;
/// Accumulators (registers of eight lanes) the vector loop keeps.
const ACCS: usize = 2;
/// Blocks the vector loop takes at a time, one per lane.
const BLOCKS: usize = LANES * ACCS;
/// Bytes the vector loop takes at a time.
pub(super) const STEP: usize = BLOCKS * 16;

/// Whether this CPU runs the vector loop.
pub(super) fn supported() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512ifma")
}

/// A 16-byte block (little-endian halves `t0`, `t1`) as limbs, without the bit above it.
fn limbs(t0: u64, t1: u64) -> [u64; 3] {
    [t0 & M44, ((t0 >> 44) | (t1 << 20)) & M44, t1 >> 24]
}

/// A multiplier: a power of `r` in limbs, with the second and third limbs times 20, which
/// is what their products that overflow 2^130 weigh (2^132 = 4 * 2^130 = 4 * 5).
#[derive(Clone, Copy, Default)]
struct Mult {
    r: [u64; 3],
    s1: u64,
    s2: u64,
}

impl Mult {
    fn new(r: [u64; 3]) -> Self {
        Self {
            r,
            s1: r[1] * 20,
            s2: r[2] * 20,
        }
    }
}

/// `h * m` mod 2^130 - 5, limbs carried back under 44, 44 and 42 bits (the first a little
/// over). `h`'s limbs may be up to about 2^46.
fn mul(h: [u64; 3], m: &Mult) -> [u64; 3] {
    let [h0, h1, h2] = h.map(u128::from);
    let [r0, r1, r2] = m.r.map(u128::from);
    let (s1, s2) = (u128::from(m.s1), u128::from(m.s2));
    let d0 = h0 * r0 + h1 * s2 + h2 * s1;
    let d1 = h0 * r1 + h1 * r0 + h2 * s2 + (d0 >> 44);
    let d2 = h0 * r2 + h1 * r1 + h2 * r0 + (d1 >> 44);
    // Truncations keep what the masks keep; d2 >> 42 is under 2^56.
    #[allow(clippy::cast_possible_truncation)]
    let (mut l0, l1, l2, c) = (
        d0 as u64 & M44,
        d1 as u64 & M44,
        d2 as u64 & M42,
        (d2 >> 42) as u64,
    );
    l0 += c * 5;
    [l0 & M44, l1 + (l0 >> 44), l2]
}

/// Poly1305 being computed: the accumulator, the key's powers and its pad, and the bytes
/// of a step not yet complete.
#[derive(Clone)]
pub(super) struct Poly1305 {
    h: [u64; 3],
    /// `r^1` to `r^BLOCKS`.
    pows: [Mult; BLOCKS],
    /// The last step's multipliers, per accumulator and lane.
    last: [LaneMults; ACCS],
    pad: [u64; 2],
    pending: Pending<STEP>,
}

impl Poly1305 {
    /// Only where [`supported`] said yes.
    pub(super) fn new(key: &[u8; 32]) -> Self {
        let word = |i: usize| u64::from_le_bytes(key[i..i + 8].try_into().expect("8 bytes"));
        // RFC 8439's clamp.
        let r = limbs(
            word(0) & 0x0fff_fffc_0fff_ffff,
            word(8) & 0x0fff_fffc_0fff_fffc,
        );
        let mut pows = [Mult::new(r); BLOCKS];
        for k in 1..pows.len() {
            pows[k] = Mult::new(mul(pows[k - 1].r, &pows[0]));
        }
        let last = std::array::from_fn(|k| LaneMults::descending(&pows, BLOCKS - LANES * (k + 1)));
        Self {
            h: [0; 3],
            pows,
            last,
            pad: [word(16), word(24)],
            pending: Pending::default(),
        }
    }

    pub(super) fn update(&mut self, bytes: &[u8]) {
        let Self {
            h,
            pows,
            last,
            pending,
            ..
        } = self;
        pending.feed(bytes, |whole| {
            // SAFETY: a `Poly1305` is made only where `supported()` found both features,
            // and `feed` hands whole steps.
            *h = unsafe { steps(*h, pows, last, whole) };
        });
    }

    /// One block at a time, the last padded with a 1 and zeros and given no bit 128.
    fn blocks(&mut self, bytes: &[u8]) {
        for block in bytes.chunks(16) {
            let mut b = [0u8; 16];
            b[..block.len()].copy_from_slice(block);
            let bit = if block.len() == 16 {
                1 << 40
            } else {
                b[block.len()] = 1;
                0
            };
            let m = limbs(
                u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
                u64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
            );
            let h = [self.h[0] + m[0], self.h[1] + m[1], self.h[2] + (m[2] | bit)];
            self.h = mul(h, &self.pows[0]);
        }
    }

    pub(super) fn tag(mut self) -> [u8; 16] {
        let pending = std::mem::take(&mut self.pending);
        self.blocks(pending.rest());
        let [mut h0, mut h1, mut h2] = self.h;
        // Carry fully: every limb under its width and h under 2^130 + a little.
        for _ in 0..2 {
            h1 += h0 >> 44;
            h0 &= M44;
            h2 += h1 >> 44;
            h1 &= M44;
            h0 += (h2 >> 42) * 5;
            h2 &= M42;
        }
        h1 += h0 >> 44;
        h0 &= M44;
        // h - p, taken when it does not go below zero (h >= p), chosen without a branch.
        let mut g0 = h0 + 5;
        let mut g1 = h1 + (g0 >> 44);
        g0 &= M44;
        let g2 = (h2 + (g1 >> 44)).wrapping_sub(1 << 42);
        g1 &= M44;
        let keep_h = (g2 >> 63).wrapping_neg();
        h0 = (h0 & keep_h) | (g0 & !keep_h);
        h1 = (h1 & keep_h) | (g1 & !keep_h);
        h2 = (h2 & keep_h) | (g2 & !keep_h & M42);
        // + the pad, mod 2^128.
        let [p0, p1, p2] = limbs(self.pad[0], self.pad[1]);
        h0 += p0;
        h1 += p1 + (h0 >> 44);
        h0 &= M44;
        h2 += p2 + (h1 >> 44);
        h1 &= M44;
        let lo = h0 | (h1 << 44);
        let hi = (h1 >> 20) | (h2 << 24);
        let mut tag = [0u8; 16];
        tag[..8].copy_from_slice(&lo.to_le_bytes());
        tag[8..].copy_from_slice(&hi.to_le_bytes());
        tag
    }
}

/// Three limbs of eight lanes.
#[derive(Clone, Copy)]
struct Lanes([__m512i; 3]);

/// A multiplier per lane.
#[derive(Clone, Copy)]
struct VMult {
    r: [__m512i; 3],
    s1: __m512i,
    s2: __m512i,
}

/// `h * m` per lane, carried as [`mul`] does but for the first limb's last carry.
#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn vmul(h: Lanes, m: &VMult) -> Lanes {
    let [h0, h1, h2] = h.0;
    let [r0, r1, r2] = m.r;
    let z = _mm512_setzero_si512();
    // Each sum of three products as its low 52 bits and the bits above (weight 2^52).
    let lo0 = _mm512_madd52lo_epu64(
        _mm512_madd52lo_epu64(_mm512_madd52lo_epu64(z, h0, r0), h1, m.s2),
        h2,
        m.s1,
    );
    let hi0 = _mm512_madd52hi_epu64(
        _mm512_madd52hi_epu64(_mm512_madd52hi_epu64(z, h0, r0), h1, m.s2),
        h2,
        m.s1,
    );
    let lo1 = _mm512_madd52lo_epu64(
        _mm512_madd52lo_epu64(_mm512_madd52lo_epu64(z, h0, r1), h1, r0),
        h2,
        m.s2,
    );
    let hi1 = _mm512_madd52hi_epu64(
        _mm512_madd52hi_epu64(_mm512_madd52hi_epu64(z, h0, r1), h1, r0),
        h2,
        m.s2,
    );
    let lo2 = _mm512_madd52lo_epu64(
        _mm512_madd52lo_epu64(_mm512_madd52lo_epu64(z, h0, r2), h1, r1),
        h2,
        r0,
    );
    let hi2 = _mm512_madd52hi_epu64(
        _mm512_madd52hi_epu64(_mm512_madd52hi_epu64(z, h0, r2), h1, r1),
        h2,
        r0,
    );
    // 2^52 is 2^8 above a limb of 44 bits; above the third limb it is 2^140, which is
    // 5 * 2^10 mod 2^130 - 5 and goes to the first.
    let d0 = _mm512_add_epi64(
        lo0,
        _mm512_slli_epi64::<10>(_mm512_add_epi64(hi2, _mm512_slli_epi64::<2>(hi2))),
    );
    let d1 = _mm512_add_epi64(lo1, _mm512_slli_epi64::<8>(hi0));
    let d2 = _mm512_add_epi64(lo2, _mm512_slli_epi64::<8>(hi1));
    let m44 = _mm512_set1_epi64(M44.cast_signed());
    let m42 = _mm512_set1_epi64(M42.cast_signed());
    let d1 = _mm512_add_epi64(d1, _mm512_srli_epi64::<44>(d0));
    let d0 = _mm512_and_si512(d0, m44);
    let d2 = _mm512_add_epi64(d2, _mm512_srli_epi64::<44>(d1));
    let d1 = _mm512_and_si512(d1, m44);
    let c = _mm512_srli_epi64::<42>(d2);
    let d2 = _mm512_and_si512(d2, m42);
    // The first limb is left a few bits over 44 (c * 5 is under 2^16), which the next
    // multiplication takes as it is: one carry fewer per step.
    let d0 = _mm512_add_epi64(d0, _mm512_add_epi64(c, _mm512_slli_epi64::<2>(c)));
    Lanes([d0, d1, d2])
}

#[target_feature(enable = "avx512f")]
fn broadcast(m: &Mult) -> VMult {
    let b = |v: u64| _mm512_set1_epi64(v.cast_signed());
    VMult {
        r: m.r.map(b),
        s1: b(m.s1),
        s2: b(m.s2),
    }
}

/// A multiplier per lane, as [`VMult`] holds it: the limbs of `r`, then `s1` and `s2`.
#[derive(Clone, Copy)]
struct LaneMults([[u64; LANES]; 5]);

impl LaneMults {
    /// Lane `j` gets `pows[first + 7 - j]`: the higher power for the lower lane, whose
    /// block comes first.
    fn descending(pows: &[Mult; BLOCKS], first: usize) -> Self {
        let lanes = |f: fn(&Mult) -> u64| std::array::from_fn(|j| f(&pows[first + LANES - 1 - j]));
        Self([
            lanes(|m| m.r[0]),
            lanes(|m| m.r[1]),
            lanes(|m| m.r[2]),
            lanes(|m| m.s1),
            lanes(|m| m.s2),
        ])
    }

    #[target_feature(enable = "avx512f")]
    fn load(&self) -> VMult {
        // SAFETY: each row is 64 bytes; unaligned loads.
        let row = |i: usize| unsafe { _mm512_loadu_si512(self.0[i].as_ptr().cast()) };
        VMult {
            r: [row(0), row(1), row(2)],
            s1: row(3),
            s2: row(4),
        }
    }
}

/// The eight blocks at `bytes` as limbs, block `j` in lane `j`, with bit 128 set.
///
/// # Safety
/// `bytes` must hold at least 128 bytes.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load(bytes: &[u8]) -> Lanes {
    debug_assert!(bytes.len() >= 128);
    // SAFETY: 128 bytes are there (the caller's promise); unaligned loads.
    let (a, b) = unsafe {
        (
            _mm512_loadu_si512(bytes.as_ptr().cast()),
            _mm512_loadu_si512(bytes.as_ptr().add(64).cast()),
        )
    };
    let t0 = _mm512_permutex2var_epi64(a, _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0), b);
    let t1 = _mm512_permutex2var_epi64(a, _mm512_set_epi64(15, 13, 11, 9, 7, 5, 3, 1), b);
    let m44 = _mm512_set1_epi64(M44.cast_signed());
    Lanes([
        _mm512_and_si512(t0, m44),
        _mm512_and_si512(
            _mm512_or_si512(_mm512_srli_epi64::<44>(t0), _mm512_slli_epi64::<20>(t1)),
            m44,
        ),
        _mm512_or_si512(_mm512_srli_epi64::<24>(t1), _mm512_set1_epi64(1 << 40)),
    ])
}

#[inline]
#[target_feature(enable = "avx512f")]
fn add(a: Lanes, b: Lanes) -> Lanes {
    Lanes([
        _mm512_add_epi64(a.0[0], b.0[0]),
        _mm512_add_epi64(a.0[1], b.0[1]),
        _mm512_add_epi64(a.0[2], b.0[2]),
    ])
}

/// `h` after the blocks of `bytes` (whole steps, at least one).
///
/// [`ACCS`] accumulators of eight lanes each take a step's parts, so that one's
/// multiplication runs while the others wait on their latency.
///
/// # Safety
/// The CPU must have AVX-512F and AVX-512 IFMA.
#[target_feature(enable = "avx512f,avx512ifma")]
unsafe fn steps(
    h: [u64; 3],
    pows: &[Mult; BLOCKS],
    last: &[LaneMults; ACCS],
    bytes: &[u8],
) -> [u64; 3] {
    debug_assert!(!bytes.is_empty() && bytes.len().is_multiple_of(STEP));
    let r_all = broadcast(&pows[BLOCKS - 1]);
    // Accumulator `k` holds blocks `8k` to `8k + 7` of each step.
    let last: [VMult; ACCS] = std::array::from_fn(|k| last[k].load());
    let z = _mm512_setzero_si512();
    let mut acc = [Lanes([z, z, z]); ACCS];
    let first = |v: u64| _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, v.cast_signed());
    acc[0] = Lanes([first(h[0]), first(h[1]), first(h[2])]);
    let count = bytes.len() / STEP;
    for (i, step) in bytes.chunks_exact(STEP).enumerate() {
        let by = if i + 1 < count { None } else { Some(&last) };
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: a step is 128 bytes per accumulator.
            let m = unsafe { load(&step[k * 128..]) };
            *a = vmul(add(*a, m), by.map_or(&r_all, |l| &l[k]));
        }
    }
    // 32 lanes of limbs under 2^46 add up to under 2^51: nothing is lost.
    let sum = acc[1..].iter().fold(acc[0], |s, a| add(s, *a));
    let total = |v: __m512i| _mm512_reduce_add_epi64(v).cast_unsigned();
    let [l0, l1, l2] = sum.0.map(total);
    let l1 = l1 + (l0 >> 44);
    let l2 = l2 + (l1 >> 44);
    let l0 = (l0 & M44) + (l2 >> 42) * 5;
    [l0 & M44, (l1 & M44) + (l0 >> 44), l2 & M42]
}
