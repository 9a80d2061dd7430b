//! x86_64 GFNI kernel on 256-bit registers, for CPUs with GFNI but without AVX-512
//! (Intel's Alder Lake and later desktop and mobile parts, and the Gracemont cores of
//! N100-class boards that small storage servers are built on): the same 8x8 bit matrix
//! per constant as [`super::gfni`] (`vgf2p8affineqb`), 64 bytes (two registers) per step,
//! up to four output rows accumulated in registers.
#![allow(unsafe_code)]

use core::arch::x86_64::{
    _mm256_gf2p8affine_epi64_epi8, _mm256_loadu_si256, _mm256_set1_epi64x, _mm256_setzero_si256,
    _mm256_storeu_si256, _mm256_xor_si256,
};

const STEP: usize = 64;

pub(crate) fn supported() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("gfni")
}

super::simd_mul_rows!(supported, STEP, block);

super::gfni::gfni_block!(
    "avx2,gfni",
    32,
    _mm256_set1_epi64x,
    _mm256_setzero_si256,
    _mm256_loadu_si256,
    _mm256_storeu_si256,
    _mm256_xor_si256,
    _mm256_gf2p8affine_epi64_epi8
);
