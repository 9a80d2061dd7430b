//! Arithmetic in GF(2^8) with the field polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D) and
//! generator 2: the field of the `reed-solomon-erasure` crate (and of Backblaze's Java code
//! it ports), so that our shards are byte-identical to its output. Every table is built at
//! compile time; nothing here allocates.

/// The low byte of the field polynomial (the x^8 term is implied).
pub const POLYNOMIAL: u16 = 0x11D;

const fn build_exp_log() -> ([u8; 510], [u8; 256]) {
    let mut exp = [0u8; 510];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        exp[i + 255] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLYNOMIAL;
        }
        i += 1;
    }
    (exp, log)
}

const EXP_LOG: ([u8; 510], [u8; 256]) = build_exp_log();
/// `EXP[i] = 2^i`, doubled in length so that `EXP[log a + log b]` needs no reduction.
const EXP: [u8; 510] = EXP_LOG.0;
/// `LOG[a]` for a != 0; `LOG[0]` is unused.
const LOG: [u8; 256] = EXP_LOG.1;

/// Product of two field elements.
#[inline]
#[must_use]
pub const fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// Multiplicative inverse; `inv(0)` is 0 (there is none, and callers never ask).
#[inline]
#[must_use]
pub const fn inv(a: u8) -> u8 {
    if a == 0 {
        0
    } else {
        EXP[255 - LOG[a as usize] as usize]
    }
}

/// `a` to the power `n`, with `a^0 = 1` also for `a = 0`, as the reference defines it
/// (this is what makes its Vandermonde matrix's first row all ones).
#[must_use]
pub const fn pow(a: u8, n: usize) -> u8 {
    if n == 0 {
        1
    } else if a == 0 {
        0
    } else {
        EXP[(LOG[a as usize] as usize * n) % 255]
    }
}

/// Per coefficient `c`, the two 16-entry tables the SIMD kernels shuffle with:
/// bytes 0..16 hold `c * x` and bytes 16..32 hold `c * (x << 4)` for x in 0..16, so that
/// `c * b = lo[b & 15] ^ hi[b >> 4]`.
#[repr(C, align(32))]
pub struct NibbleTable(pub [u8; 32]);

const fn build_nibbles() -> [NibbleTable; 256] {
    let mut t = [const { NibbleTable([0; 32]) }; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 16 {
            t[c].0[x] = mul(c as u8, x as u8);
            t[c].0[16 + x] = mul(c as u8, (x << 4) as u8);
            x += 1;
        }
        c += 1;
    }
    t
}

/// Nibble tables for every coefficient (8 KiB).
pub static NIBBLES: [NibbleTable; 256] = build_nibbles();

// Evaluated at compile time into a static; the array never lives on a stack at run time.
#[allow(clippy::large_stack_arrays)]
const fn build_mul_table() -> [[u8; 256]; 256] {
    let mut t = [[0u8; 256]; 256];
    let mut a = 0;
    while a < 256 {
        let mut b = 0;
        while b < 256 {
            t[a][b] = mul(a as u8, b as u8);
            b += 1;
        }
        a += 1;
    }
    t
}

/// Full product table (64 KiB) for the portable kernel: row `c` maps `b` to `c * b`.
pub static MUL_TABLE: [[u8; 256]; 256] = build_mul_table();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_axioms_hold_for_every_element() {
        for a in 0..=255u8 {
            assert_eq!(mul(a, 1), a);
            assert_eq!(mul(a, 0), 0);
            if a != 0 {
                assert_eq!(mul(a, inv(a)), 1, "inverse of {a}");
            }
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul(b, a));
                assert_eq!(MUL_TABLE[a as usize][b as usize], mul(a, b));
                let t = &NIBBLES[a as usize].0;
                assert_eq!(t[(b & 15) as usize] ^ t[16 + (b >> 4) as usize], mul(a, b));
            }
        }
    }

    #[test]
    fn multiplication_matches_carryless_product_reduced_by_the_polynomial() {
        fn slow(a: u8, b: u8) -> u8 {
            let mut p: u16 = 0;
            for i in 0..8 {
                if b & (1 << i) != 0 {
                    p ^= u16::from(a) << i;
                }
            }
            for i in (8..16).rev() {
                if p & (1 << i) != 0 {
                    p ^= POLYNOMIAL << (i - 8);
                }
            }
            p as u8
        }
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), slow(a, b));
            }
        }
    }

    #[test]
    fn pow_follows_the_reference_conventions() {
        assert_eq!(pow(0, 0), 1);
        assert_eq!(pow(0, 3), 0);
        assert_eq!(pow(2, 8), 0x1D);
        assert_eq!(pow(3, 2), mul(3, 3));
    }
}
