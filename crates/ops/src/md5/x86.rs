//! MD5 in SIMD lanes on x86_64: 8 streams in the 32-bit lanes of AVX2's registers, 16 in
//! AVX-512's. Every step of the compression function is the same few instructions in
//! every lane, so one vector step advances 8 (16) independent chains. The message words
//! are brought into lane order with an 8x8 transpose per half block (AVX2's unpacks and
//! 128-bit permutes); AVX-512 adds a one-instruction rotate and three-input logic
//! (`vprold`, `vpternlogd`), which halve the instructions of a step.
#![allow(unsafe_code)]

use core::arch::x86_64::{
    __m256i, __m512i, _mm256_add_epi32, _mm256_and_si256, _mm256_andnot_si256, _mm256_loadu_si256,
    _mm256_or_si256, _mm256_permute2x128_si256, _mm256_set1_epi32, _mm256_setzero_si256,
    _mm256_slli_epi32, _mm256_srli_epi32, _mm256_storeu_si256, _mm256_unpackhi_epi32,
    _mm256_unpackhi_epi64, _mm256_unpacklo_epi32, _mm256_unpacklo_epi64, _mm256_xor_si256,
    _mm512_add_epi32, _mm512_castsi256_si512, _mm512_inserti64x4, _mm512_loadu_si512,
    _mm512_rol_epi32, _mm512_set1_epi32, _mm512_storeu_si512, _mm512_ternarylogic_epi32,
};

/// `v`, unchanged, out of the compiler's sight. A step's `a + m + k` does not depend on
/// the step before (its `a` is four steps old); left visible, LLVM reassociates the sum
/// and adds the constant `k` last, after the round function of the newest word, which
/// puts one more addition on the chain from step to step, which the 16-lane kernel feels
/// and the AVX2 one does not (`docs/results.md`, "MD5").
#[inline]
#[target_feature(enable = "avx512f")]
fn opaque512(mut v: __m512i) -> __m512i {
    // SAFETY: an empty template: the register is left as it is.
    unsafe {
        core::arch::asm!(
            "/* {0} */",
            inout(zmm_reg) v,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    v
}

pub(crate) fn avx2_supported() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

pub(crate) fn avx512_supported() -> bool {
    avx2_supported() && std::arch::is_x86_feature_detected!("avx512f")
}

/// Transposes 8 rows of 8 words: word `j` of row `i` becomes word `i` of row `j`.
#[target_feature(enable = "avx2")]
fn transpose8(r: [__m256i; 8]) -> [__m256i; 8] {
    // Pairs of rows interleaved by word, then by pairs of words: each 128-bit half then
    // holds one word of four rows (words 0-3 in the low halves, 4-7 in the high ones).
    let t0 = _mm256_unpacklo_epi32(r[0], r[1]);
    let t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    let t2 = _mm256_unpacklo_epi32(r[2], r[3]);
    let t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    let t4 = _mm256_unpacklo_epi32(r[4], r[5]);
    let t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    let t6 = _mm256_unpacklo_epi32(r[6], r[7]);
    let t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    let u0 = _mm256_unpacklo_epi64(t0, t2);
    let u1 = _mm256_unpackhi_epi64(t0, t2);
    let u2 = _mm256_unpacklo_epi64(t1, t3);
    let u3 = _mm256_unpackhi_epi64(t1, t3);
    let u4 = _mm256_unpacklo_epi64(t4, t6);
    let u5 = _mm256_unpackhi_epi64(t4, t6);
    let u6 = _mm256_unpacklo_epi64(t5, t7);
    let u7 = _mm256_unpackhi_epi64(t5, t7);
    [
        _mm256_permute2x128_si256::<0x20>(u0, u4),
        _mm256_permute2x128_si256::<0x20>(u1, u5),
        _mm256_permute2x128_si256::<0x20>(u2, u6),
        _mm256_permute2x128_si256::<0x20>(u3, u7),
        _mm256_permute2x128_si256::<0x31>(u0, u4),
        _mm256_permute2x128_si256::<0x31>(u1, u5),
        _mm256_permute2x128_si256::<0x31>(u2, u6),
        _mm256_permute2x128_si256::<0x31>(u3, u7),
    ]
}

/// The 16 message words of the block at `off` of 8 lanes, word `w` of lane `l` in
/// 32-bit lane `l` of vector `w`.
#[target_feature(enable = "avx2")]
pub(crate) fn message8(data: &[&[u8]], off: usize) -> [__m256i; 16] {
    let mut m = [_mm256_setzero_si256(); 16];
    for half in 0..2 {
        let mut rows = [_mm256_setzero_si256(); 8];
        for (row, lane) in rows.iter_mut().zip(data) {
            let bytes: &[u8; 32] = lane[off + 32 * half..off + 32 * half + 32]
                .try_into()
                .expect("32 bytes");
            // SAFETY: `bytes` is 32 readable bytes; the load takes any alignment.
            *row = unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) };
        }
        m[8 * half..8 * half + 8].copy_from_slice(&transpose8(rows));
    }
    m
}

/// Word `w` of the 8 states, in lane order.
#[target_feature(enable = "avx2")]
fn load_states8(states: &[[u32; 4]], w: usize) -> __m256i {
    let words: [u32; 8] = std::array::from_fn(|l| states[l][w]);
    // SAFETY: `words` is 32 readable bytes; the load takes any alignment.
    unsafe { _mm256_loadu_si256(words.as_ptr().cast()) }
}

#[target_feature(enable = "avx2")]
fn store_states8(states: &mut [[u32; 4]], w: usize, v: __m256i) {
    let mut words = [0u32; 8];
    // SAFETY: `words` is 32 writable bytes; the store takes any alignment.
    unsafe { _mm256_storeu_si256(words.as_mut_ptr().cast(), v) };
    for (state, word) in states.iter_mut().zip(words) {
        state[w] = word;
    }
}

/// Hashes `blocks` blocks of each of 8 lanes (`data[l]`, at least that long) into
/// `states[l]`.
///
/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn compress8(states: &mut [[u32; 4]], data: &[&[u8]], blocks: usize) {
    #[inline]
    #[target_feature(enable = "avx2")]
    fn f(b: __m256i, c: __m256i, d: __m256i) -> __m256i {
        // (b & c) | (!b & d): d where b is clear, c where it is set.
        _mm256_xor_si256(d, _mm256_and_si256(b, _mm256_xor_si256(c, d)))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    fn g(b: __m256i, c: __m256i, d: __m256i) -> __m256i {
        // (d & b) | (!d & c), with b (the newest word) in one operation only.
        _mm256_or_si256(_mm256_and_si256(b, d), _mm256_andnot_si256(d, c))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    fn h(b: __m256i, c: __m256i, d: __m256i) -> __m256i {
        _mm256_xor_si256(b, _mm256_xor_si256(c, d))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    fn i(b: __m256i, c: __m256i, d: __m256i) -> __m256i {
        let not_d = _mm256_xor_si256(d, _mm256_set1_epi32(-1));
        _mm256_xor_si256(_mm256_or_si256(b, not_d), c)
    }
    macro_rules! step {
        ($fun:ident, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:expr, $s:literal) => {
            // a + m + k does not wait for this step's b: only the function of b and
            // the rotate are on the chain from one step to the next.
            let amk = _mm256_add_epi32(
                $a,
                _mm256_add_epi32($m, _mm256_set1_epi32(u32::cast_signed($k))),
            );
            let x = _mm256_add_epi32(amk, $fun($b, $c, $d));
            let rotated = _mm256_or_si256(
                _mm256_slli_epi32::<{ $s }>(x),
                _mm256_srli_epi32::<{ 32 - $s }>(x),
            );
            $a = _mm256_add_epi32($b, rotated);
        };
    }
    assert!(states.len() == 8 && data.len() == 8);
    let mut a = load_states8(states, 0);
    let mut b = load_states8(states, 1);
    let mut c = load_states8(states, 2);
    let mut d = load_states8(states, 3);
    for blk in 0..blocks {
        let m = message8(data, 64 * blk);
        let (a0, b0, c0, d0) = (a, b, c, d);
        md5_steps!(step, a, b, c, d, m);
        a = _mm256_add_epi32(a, a0);
        b = _mm256_add_epi32(b, b0);
        c = _mm256_add_epi32(c, c0);
        d = _mm256_add_epi32(d, d0);
    }
    store_states8(states, 0, a);
    store_states8(states, 1, b);
    store_states8(states, 2, c);
    store_states8(states, 3, d);
}

#[target_feature(enable = "avx2,avx512f")]
fn load_states16(states: &[[u32; 4]], w: usize) -> __m512i {
    let words: [u32; 16] = std::array::from_fn(|l| states[l][w]);
    // SAFETY: `words` is 64 readable bytes; the load takes any alignment.
    unsafe { _mm512_loadu_si512(words.as_ptr().cast()) }
}

#[target_feature(enable = "avx2,avx512f")]
fn store_states16(states: &mut [[u32; 4]], w: usize, v: __m512i) {
    let mut words = [0u32; 16];
    // SAFETY: `words` is 64 writable bytes; the store takes any alignment.
    unsafe { _mm512_storeu_si512(words.as_mut_ptr().cast(), v) };
    for (state, word) in states.iter_mut().zip(words) {
        state[w] = word;
    }
}

/// Hashes `blocks` blocks of each of 16 lanes into their states, as [`compress8`].
///
/// # Safety
/// AVX2 and AVX-512F must be available.
#[target_feature(enable = "avx2,avx512f")]
pub(crate) unsafe fn compress16(states: &mut [[u32; 4]], data: &[&[u8]], blocks: usize) {
    // Three-input logic: bit i of the constant is the result for inputs (x, y, z) with
    // i = 4x + 2y + z.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn f(b: __m512i, c: __m512i, d: __m512i) -> __m512i {
        _mm512_ternarylogic_epi32::<0xCA>(b, c, d) // b ? c : d
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn g(b: __m512i, c: __m512i, d: __m512i) -> __m512i {
        _mm512_ternarylogic_epi32::<0xCA>(d, b, c) // d ? b : c
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn h(b: __m512i, c: __m512i, d: __m512i) -> __m512i {
        _mm512_ternarylogic_epi32::<0x96>(b, c, d) // b ^ c ^ d
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn i(b: __m512i, c: __m512i, d: __m512i) -> __m512i {
        _mm512_ternarylogic_epi32::<0x39>(b, c, d) // c ^ (b | !d)
    }
    macro_rules! step {
        ($fun:ident, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:expr, $s:literal) => {
            let amk = opaque512(_mm512_add_epi32(
                $a,
                _mm512_add_epi32($m, _mm512_set1_epi32(u32::cast_signed($k))),
            ));
            let x = _mm512_add_epi32(amk, $fun($b, $c, $d));
            $a = _mm512_add_epi32($b, _mm512_rol_epi32::<{ $s }>(x));
        };
    }
    assert!(states.len() == 16 && data.len() == 16);
    let mut a = load_states16(states, 0);
    let mut b = load_states16(states, 1);
    let mut c = load_states16(states, 2);
    let mut d = load_states16(states, 3);
    for blk in 0..blocks {
        let lo = message8(&data[..8], 64 * blk);
        let hi = message8(&data[8..], 64 * blk);
        let mut m = [_mm512_castsi256_si512(_mm256_setzero_si256()); 16];
        for (w, word) in m.iter_mut().enumerate() {
            *word = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo[w]), hi[w]);
        }
        let (a0, b0, c0, d0) = (a, b, c, d);
        md5_steps!(step, a, b, c, d, m);
        a = _mm512_add_epi32(a, a0);
        b = _mm512_add_epi32(b, b0);
        c = _mm512_add_epi32(c, c0);
        d = _mm512_add_epi32(d, d0);
    }
    store_states16(states, 0, a);
    store_states16(states, 1, b);
    store_states16(states, 2, c);
    store_states16(states, 3, d);
}
