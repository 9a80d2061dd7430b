//! x86_64 AVX-512 + GFNI kernel: multiplying by a constant of GF(2^8) is a linear map of
//! the byte's eight bits, so `vgf2p8affineqb` applies it as an 8x8 bit matrix to 64
//! bytes in one instruction (no nibble split, no table lookups). 128 bytes (two
//! registers) per step, up to four output rows accumulated in registers.
//!
//! The instruction's own multiply (`vgf2p8mulb`) is of no use: it reduces by the AES
//! polynomial (0x11B), and the code's field is reduced by 0x11D. The affine form works for
//! any polynomial, since the matrix is made from this field's products.
#![allow(unsafe_code)]

use core::arch::x86_64::{
    _mm512_gf2p8affine_epi64_epi8, _mm512_loadu_si512, _mm512_set1_epi64, _mm512_setzero_si512,
    _mm512_storeu_si512, _mm512_xor_si512,
};

use crate::gf;

const STEP: usize = 128;

pub(crate) fn supported() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("gfni")
}

/// The bit matrix of "multiply by `c`" as `vgf2p8affineqb` takes it: bit `i` of the
/// product is the parity of `x` AND the matrix's byte `7 - i`, and that byte has bit `j`
/// set when bit `i` of `c * 2^j` is.
#[must_use]
pub(crate) const fn affine_matrix(c: u8) -> u64 {
    let mut m = 0u64;
    let mut i = 0;
    while i < 8 {
        let mut row = 0u8;
        let mut j = 0;
        while j < 8 {
            if gf::mul(c, 1 << j) >> i & 1 == 1 {
                row |= 1 << j;
            }
            j += 1;
        }
        m |= (row as u64) << (8 * (7 - i));
        i += 1;
    }
    m
}

/// [`affine_matrix`] of every constant.
pub(crate) static MATRICES: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut c = 0;
    while c < 256 {
        t[c] = affine_matrix(c as u8);
        c += 1;
    }
    t
};

super::simd_mul_rows!(supported, STEP, block);

/// A GFNI kernel's block function for one register width: `STEP` bytes (two registers)
/// per step, up to four output rows accumulated in registers, each (row, input) matrix
/// broadcast from [`MATRICES`] where it is used. `gfni` (512 bits) and `gfni_avx2` (256 bits) differ only in
/// their types and intrinsics.
macro_rules! gfni_block {
    ($features:literal, $width:literal, $set1:ident, $zero:ident, $load:ident,
     $store:ident, $xor:ident, $affine:ident) => {
        /// # Safety
        #[doc = concat!("The target features `", $features, "` must be available;")]
        /// `start..end` must lie within every input and output, with `end - start` a
        /// multiple of `STEP`; `outs.len() == R` and `rows.len() == R * inputs.len()`.
        #[target_feature(enable = $features)]
        unsafe fn block<const R: usize>(
            rows: &[u8],
            inputs: &[&[u8]],
            outs: &mut [&mut [u8]],
            start: usize,
            end: usize,
        ) {
            let n = inputs.len();
            // Each (row, input) constant's matrix is broadcast from the table as it is
            // used: one load either way, and nothing allocated per call.
            let matrix = |r: usize, i: usize| {
                $set1($crate::kernel::gfni::MATRICES[rows[r * n + i] as usize].cast_signed())
            };
            let mut off = start;
            while off < end {
                let mut acc = [[$zero(); 2]; R];
                for (i, input) in inputs.iter().enumerate() {
                    for line in (0..STEP).step_by(64) {
                        $crate::kernel::prefetch(input, off + line);
                    }
                    // SAFETY: off + STEP <= end <= input.len() (caller's contract).
                    let (x0, x1) = unsafe {
                        let p = input.as_ptr().add(off);
                        ($load(p.cast()), $load(p.add($width).cast()))
                    };
                    for (r, a) in acc.iter_mut().enumerate() {
                        let m = matrix(r, i);
                        a[0] = $xor(a[0], $affine::<0>(x0, m));
                        a[1] = $xor(a[1], $affine::<0>(x1, m));
                    }
                }
                for (out, a) in outs.iter_mut().zip(acc) {
                    // SAFETY: off + STEP <= end <= out.len() (caller's contract).
                    unsafe {
                        let p = out.as_mut_ptr().add(off);
                        $store(p.cast(), a[0]);
                        $store(p.add($width).cast(), a[1]);
                    }
                }
                off += STEP;
            }
        }
    };
}
pub(crate) use gfni_block;

gfni_block!(
    "avx512f,avx512bw,gfni",
    64,
    _mm512_set1_epi64,
    _mm512_setzero_si512,
    _mm512_loadu_si512,
    _mm512_storeu_si512,
    _mm512_xor_si512,
    _mm512_gf2p8affine_epi64_epi8
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The matrix applied as the instruction applies it, in plain Rust.
    fn apply(m: u64, x: u8) -> u8 {
        let mut y = 0u8;
        for i in 0..8 {
            let row = (m >> (8 * (7 - i))) as u8;
            y |= (((row & x).count_ones() & 1) as u8) << i;
        }
        y
    }

    #[test]
    fn each_matrix_multiplies_by_its_constant_in_this_field() {
        for c in 0..=255u8 {
            for x in 0..=255u8 {
                assert_eq!(apply(MATRICES[c as usize], x), gf::mul(c, x), "c {c} x {x}");
            }
        }
        assert_eq!(affine_matrix(1), 0x0102_0408_1020_4080, "identity");
    }
}
