//! x86_64 GFNI kernel on 256-bit registers, for CPUs with GFNI but without AVX-512
//! (Intel's Alder Lake and later desktop and mobile parts, and the Gracemont cores of
//! N100-class boards that small storage servers are built on): the same 8x8 bit matrix
//! per constant as [`super::gfni`] (`vgf2p8affineqb`), 64 bytes (two registers) per step,
//! up to four output rows accumulated in registers.
#![allow(unsafe_code)]

use core::arch::x86_64::{
    __m256i, _mm256_gf2p8affine_epi64_epi8, _mm256_loadu_si256, _mm256_set1_epi64x,
    _mm256_setzero_si256, _mm256_storeu_si256, _mm256_xor_si256,
};

use super::gfni::MATRICES;

const STEP: usize = 64;

pub(crate) fn supported() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("gfni")
}

super::simd_mul_rows!(supported, STEP, block);

/// # Safety
/// AVX2 and GFNI must be available; `start..end` must lie within every input and output,
/// with `end - start` a multiple of [`STEP`]; `outs.len() == R` and
/// `rows.len() == R * inputs.len()`.
#[target_feature(enable = "avx2,gfni")]
unsafe fn block<const R: usize>(
    rows: &[u8],
    inputs: &[&[u8]],
    outs: &mut [&mut [u8]],
    start: usize,
    end: usize,
) {
    let n = inputs.len();
    // Broadcast each (row, input) matrix once per block, not once per step.
    let matrices: Vec<__m256i> = rows
        .iter()
        .map(|&c| _mm256_set1_epi64x(MATRICES[c as usize].cast_signed()))
        .collect();
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
            for (r, a) in acc.iter_mut().enumerate() {
                let m = matrices[r * n + i];
                a[0] = _mm256_xor_si256(a[0], _mm256_gf2p8affine_epi64_epi8::<0>(x0, m));
                a[1] = _mm256_xor_si256(a[1], _mm256_gf2p8affine_epi64_epi8::<0>(x1, m));
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
