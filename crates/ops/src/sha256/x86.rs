//! SHA-256 in the 16 32-bit lanes of AVX-512's registers: one vector round advances 16
//! independent messages. The message words come into lane order with MD5's transposes
//! (`crate::md5::x86::message8`), then byte-swapped (SHA-256 reads big-endian words);
//! the rotates are `vprord` and the three-input functions `vpternlogd`.
#![allow(unsafe_code)]

use core::arch::x86_64::{
    __m512i, _mm512_add_epi32, _mm512_castsi256_si512, _mm512_inserti64x4, _mm512_loadu_si512,
    _mm512_ror_epi32, _mm512_set1_epi32, _mm512_set4_epi32, _mm512_shuffle_epi8, _mm512_srli_epi32,
    _mm512_storeu_si512, _mm512_ternarylogic_epi32,
};

use super::{K, LANES};
use crate::md5::x86::message8;

pub(crate) fn supported() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
}

/// `x + y` in each lane.
#[inline]
#[target_feature(enable = "avx512f")]
fn add(x: __m512i, y: __m512i) -> __m512i {
    _mm512_add_epi32(x, y)
}

/// `x ^ y ^ z` in each lane. Three-input logic: bit i of the constant is the result for
/// inputs (x, y, z) with i = 4x + 2y + z.
#[inline]
#[target_feature(enable = "avx512f")]
fn xor3(x: __m512i, y: __m512i, z: __m512i) -> __m512i {
    _mm512_ternarylogic_epi32::<0x96>(x, y, z)
}

#[inline]
#[target_feature(enable = "avx512f")]
fn big_sigma0(x: __m512i) -> __m512i {
    xor3(
        _mm512_ror_epi32::<2>(x),
        _mm512_ror_epi32::<13>(x),
        _mm512_ror_epi32::<22>(x),
    )
}

#[inline]
#[target_feature(enable = "avx512f")]
fn big_sigma1(x: __m512i) -> __m512i {
    xor3(
        _mm512_ror_epi32::<6>(x),
        _mm512_ror_epi32::<11>(x),
        _mm512_ror_epi32::<25>(x),
    )
}

#[inline]
#[target_feature(enable = "avx512f")]
fn small_sigma0(x: __m512i) -> __m512i {
    xor3(
        _mm512_ror_epi32::<7>(x),
        _mm512_ror_epi32::<18>(x),
        _mm512_srli_epi32::<3>(x),
    )
}

#[inline]
#[target_feature(enable = "avx512f")]
fn small_sigma1(x: __m512i) -> __m512i {
    xor3(
        _mm512_ror_epi32::<17>(x),
        _mm512_ror_epi32::<19>(x),
        _mm512_srli_epi32::<10>(x),
    )
}

/// The 64 rounds of one block of every lane (FIPS 180-4, 6.2.2): the state after them,
/// before it is added to the one before. `w` holds the block's 16 words and becomes the
/// message schedule as the rounds go.
#[inline]
#[target_feature(enable = "avx512f")]
fn rounds(mut s: [__m512i; 8], mut w: [__m512i; 16]) -> [__m512i; 8] {
    // One round: `$i` the round within its 16 (the schedule's word), `$r` the first
    // round of the 16.
    macro_rules! round {
        ($r:expr, $i:literal) => {
            if $r >= 16 {
                w[$i] = add(
                    add(w[$i], small_sigma0(w[($i + 1) % 16])),
                    add(w[($i + 9) % 16], small_sigma1(w[($i + 14) % 16])),
                );
            }
            let [a, b, c, d, e, f, g, h] = s;
            let ch = _mm512_ternarylogic_epi32::<0xCA>(e, f, g); // e ? f : g
            let kw = add(_mm512_set1_epi32(K[$r + $i].cast_signed()), w[$i]);
            let t1 = add(add(h, big_sigma1(e)), add(ch, kw));
            let maj = _mm512_ternarylogic_epi32::<0xE8>(a, b, c); // majority
            let t2 = add(big_sigma0(a), maj);
            s = [add(t1, t2), a, b, c, add(d, t1), e, f, g];
        };
    }
    for r in [0, 16, 32, 48] {
        round!(r, 0);
        round!(r, 1);
        round!(r, 2);
        round!(r, 3);
        round!(r, 4);
        round!(r, 5);
        round!(r, 6);
        round!(r, 7);
        round!(r, 8);
        round!(r, 9);
        round!(r, 10);
        round!(r, 11);
        round!(r, 12);
        round!(r, 13);
        round!(r, 14);
        round!(r, 15);
    }
    s
}

/// Hashes `blocks` whole blocks of each of the 16 lanes (`data[l]`, at least that long)
/// into `states[l]`.
///
/// # Safety
/// AVX2, AVX-512F and AVX-512BW must be available.
#[target_feature(enable = "avx2,avx512f,avx512bw")]
pub(crate) unsafe fn compress16(
    states: &mut [[u32; 8]; LANES],
    data: &[&[u8]; LANES],
    blocks: usize,
) {
    // Bytes 3, 2, 1, 0 of each word: big-endian words from little-endian loads.
    let swap = _mm512_set4_epi32(0x0c0d_0e0f, 0x0809_0a0b, 0x0405_0607, 0x0001_0203);
    let mut state: [__m512i; 8] = std::array::from_fn(|w| {
        let words: [u32; LANES] = std::array::from_fn(|l| states[l][w]);
        // SAFETY: `words` is 64 readable bytes; the load takes any alignment.
        unsafe { _mm512_loadu_si512(words.as_ptr().cast()) }
    });
    let (lo_lanes, hi_lanes) = data.split_at(8);
    for blk in 0..blocks {
        let lo = message8(lo_lanes, 64 * blk);
        let hi = message8(hi_lanes, 64 * blk);
        let w: [__m512i; 16] = std::array::from_fn(|i| {
            let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo[i]), hi[i]);
            _mm512_shuffle_epi8(both, swap)
        });
        let s = rounds(state, w);
        for (x, y) in state.iter_mut().zip(s) {
            *x = add(*x, y);
        }
    }
    for (w, v) in state.into_iter().enumerate() {
        let mut words = [0u32; LANES];
        // SAFETY: `words` is 64 writable bytes; the store takes any alignment.
        unsafe { _mm512_storeu_si512(words.as_mut_ptr().cast(), v) };
        for (st, word) in states.iter_mut().zip(words) {
            st[w] = word;
        }
    }
}
