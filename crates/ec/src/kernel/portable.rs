//! The portable kernel: one 256-byte product-table row per coefficient, a byte at a time.
//! It is the fallback on every CPU, the tail handler of the SIMD kernels, and the
//! definition the others are tested against.

use super::PIECE;
use crate::gf::MUL_TABLE;

/// [`super::Kernel::mul_rows`] over the byte range `[start, end)` of every shard.
pub(crate) fn mul_rows(
    coeffs: &[u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    start: usize,
    end: usize,
) {
    let n = inputs.len();
    let mut lo = start;
    while lo < end {
        let hi = (lo + PIECE).min(end);
        for (r, out) in outputs.iter_mut().enumerate() {
            let out = &mut out[lo..hi];
            for (i, input) in inputs.iter().enumerate() {
                let table = &MUL_TABLE[coeffs[r * n + i] as usize];
                let input = &input[lo..hi];
                if i == 0 {
                    for (o, &x) in out.iter_mut().zip(input) {
                        *o = table[x as usize];
                    }
                } else {
                    for (o, &x) in out.iter_mut().zip(input) {
                        *o ^= table[x as usize];
                    }
                }
            }
        }
        lo = hi;
    }
}
