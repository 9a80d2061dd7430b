//! x86_64 AVX2 kernel: split each byte into nibbles and look both up with `vpshufb` in the
//! coefficient's 16-entry tables, 64 bytes (two registers) per step, with up to four
//! output rows accumulated in registers so every input byte is loaded once per group.
#![allow(unsafe_code)]

use core::arch::x86_64::{
    __m256i, _mm_loadu_si128, _mm256_and_si256, _mm256_broadcastsi128_si256, _mm256_loadu_si256,
    _mm256_set1_epi8, _mm256_setzero_si256, _mm256_shuffle_epi8, _mm256_srli_epi64,
    _mm256_storeu_si256, _mm256_xor_si256,
};

use crate::gf::NIBBLES;

const STEP: usize = 64;

pub(crate) fn supported() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

super::simd_mul_rows!(supported, STEP, block);

/// # Safety
/// AVX2 must be available; `start..end` must lie within every input and output, with
/// `end - start` a multiple of [`STEP`]; `outs.len() == R` and `rows.len() == R * inputs.len()`.
#[target_feature(enable = "avx2")]
unsafe fn block<const R: usize>(
    rows: &[u8],
    inputs: &[&[u8]],
    outs: &mut [&mut [u8]],
    start: usize,
    end: usize,
) {
    let n = inputs.len();
    // Broadcast each (row, input) table pair once per block, not once per step.
    let tables: Vec<[__m256i; 2]> = rows
        .iter()
        .map(|&c| {
            let t = NIBBLES[c as usize].0.as_ptr();
            // SAFETY: each NibbleTable is 32 bytes; both 16-byte loads are in bounds.
            unsafe {
                [
                    _mm256_broadcastsi128_si256(_mm_loadu_si128(t.cast())),
                    _mm256_broadcastsi128_si256(_mm_loadu_si128(t.add(16).cast())),
                ]
            }
        })
        .collect();
    let mask = _mm256_set1_epi8(0x0f);
    let mut off = start;
    while off < end {
        let mut acc = [[_mm256_setzero_si256(); 2]; R];
        for (i, input) in inputs.iter().enumerate() {
            super::prefetch(input, off);
            // SAFETY: off + STEP <= end <= input.len() (caller's contract).
            let (x0, x1) = unsafe {
                let p = input.as_ptr().add(off);
                (
                    _mm256_loadu_si256(p.cast()),
                    _mm256_loadu_si256(p.add(32).cast()),
                )
            };
            let l0 = _mm256_and_si256(x0, mask);
            let l1 = _mm256_and_si256(x1, mask);
            let h0 = _mm256_and_si256(_mm256_srli_epi64(x0, 4), mask);
            let h1 = _mm256_and_si256(_mm256_srli_epi64(x1, 4), mask);
            for (r, a) in acc.iter_mut().enumerate() {
                let [tl, th] = tables[r * n + i];
                let p0 = _mm256_xor_si256(_mm256_shuffle_epi8(tl, l0), _mm256_shuffle_epi8(th, h0));
                let p1 = _mm256_xor_si256(_mm256_shuffle_epi8(tl, l1), _mm256_shuffle_epi8(th, h1));
                a[0] = _mm256_xor_si256(a[0], p0);
                a[1] = _mm256_xor_si256(a[1], p1);
            }
        }
        for (out, a) in outs.iter_mut().zip(acc) {
            // SAFETY: off + STEP <= end <= out.len() (caller's contract).
            unsafe {
                let p = out.as_mut_ptr().add(off);
                _mm256_storeu_si256(p.cast(), a[0]);
                _mm256_storeu_si256(p.add(32).cast(), a[1]);
            }
        }
        off += STEP;
    }
}
