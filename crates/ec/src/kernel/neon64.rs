//! aarch64 Advanced SIMD kernel: the nibble-table method with `tbl` (`vqtbl1q_u8`),
//! 32 bytes (two registers) per step, up to four output rows accumulated in registers.
//! Advanced SIMD is part of the aarch64 base ISA, but the check stays for symmetry.
#![allow(unsafe_code)]

use core::arch::aarch64::{
    uint8x16_t, vandq_u8, vdupq_n_u8, veorq_u8, vld1q_u8, vqtbl1q_u8, vshrq_n_u8, vst1q_u8,
};

use crate::gf::NIBBLES;

const STEP: usize = 32;

pub(crate) fn supported() -> bool {
    std::arch::is_aarch64_feature_detected!("neon")
}

super::simd_mul_rows!(supported, STEP, block);

/// # Safety
/// NEON must be available; `start..end` must lie within every input and output, with
/// `end - start` a multiple of [`STEP`]; `outs.len() == R` and `rows.len() == R * inputs.len()`.
#[target_feature(enable = "neon")]
unsafe fn block<const R: usize>(
    rows: &[u8],
    inputs: &[&[u8]],
    outs: &mut [&mut [u8]],
    start: usize,
    end: usize,
) {
    let n = inputs.len();
    let tables: Vec<[uint8x16_t; 2]> = rows
        .iter()
        .map(|&c| {
            let t = NIBBLES[c as usize].0.as_ptr();
            // SAFETY: each NibbleTable is 32 bytes; both 16-byte loads are in bounds.
            unsafe { [vld1q_u8(t), vld1q_u8(t.add(16))] }
        })
        .collect();
    let mask = vdupq_n_u8(0x0f);
    let mut off = start;
    while off < end {
        let mut acc = [[vdupq_n_u8(0); 2]; R];
        for (i, input) in inputs.iter().enumerate() {
            // SAFETY: off + STEP <= end <= input.len() (caller's contract).
            let (x0, x1) = unsafe {
                let p = input.as_ptr().add(off);
                (vld1q_u8(p), vld1q_u8(p.add(16)))
            };
            let l0 = vandq_u8(x0, mask);
            let l1 = vandq_u8(x1, mask);
            let h0 = vshrq_n_u8(x0, 4);
            let h1 = vshrq_n_u8(x1, 4);
            for (r, a) in acc.iter_mut().enumerate() {
                let [tl, th] = tables[r * n + i];
                a[0] = veorq_u8(a[0], veorq_u8(vqtbl1q_u8(tl, l0), vqtbl1q_u8(th, h0)));
                a[1] = veorq_u8(a[1], veorq_u8(vqtbl1q_u8(tl, l1), vqtbl1q_u8(th, h1)));
            }
        }
        for (out, a) in outs.iter_mut().zip(acc) {
            // SAFETY: off + STEP <= end <= out.len() (caller's contract).
            unsafe {
                let p = out.as_mut_ptr().add(off);
                vst1q_u8(p, a[0]);
                vst1q_u8(p.add(16), a[1]);
            }
        }
        off += STEP;
    }
}
