//! The per-byte work of the code: "multiply a block of rows of a coefficient matrix by a set
//! of input shards" (`outputs[r] = sum_i coeffs[r][i] * inputs[i]`). Encoding, verifying and
//! every kind of reconstruction reduce to it. One portable implementation and one SIMD
//! implementation per instruction set, all bit-identical; the best one the running CPU has
//! is chosen at run time, so no binary ever requires an instruction set the CPU lacks.
//!
//! Large shards are processed in [`PIECE`]-byte pieces so that, when there are more output
//! rows than a kernel keeps in registers (4), the inputs of a piece are re-read from cache
//! rather than memory.

mod portable;

/// A SIMD kernel's `mul_rows`: checks the CPU has its instructions (`$supported`), then
/// has [`drive`] hand its `$block::<R>` the pieces, `$step` bytes at a time, with `R`
/// the rows of the group (1 to [`ROW_GROUP`]) so it keeps exactly that many
/// accumulators in registers.
///
/// `$block` must be an `unsafe fn` whose only requirements are its target features
/// (present: `$supported()` is asserted) and what `drive` guarantees: `start..end` within
/// every shard's length with `end - start` a multiple of `$step`, and `rows` holding
/// `outs.len() * inputs.len()` coefficients.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(unused_macros)
)]
macro_rules! simd_mul_rows {
    ($supported:ident, $step:expr, $block:ident) => {
        pub(crate) fn mul_rows(coeffs: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
            assert!($supported());
            super::drive(coeffs, inputs, outputs, $step, |rows, outs, start, end| {
                // SAFETY: the kernel's instructions are present (asserted above), and
                // `drive` keeps the contract `$block` states.
                unsafe {
                    match outs.len() {
                        1 => $block::<1>(rows, inputs, outs, start, end),
                        2 => $block::<2>(rows, inputs, outs, start, end),
                        3 => $block::<3>(rows, inputs, outs, start, end),
                        _ => $block::<4>(rows, inputs, outs, start, end),
                    }
                }
            });
        }
    };
}
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(unused_imports)
)]
pub(crate) use simd_mul_rows;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod gfni;
#[cfg(target_arch = "x86_64")]
mod gfni_avx2;
#[cfg(target_arch = "arm")]
mod neon32;
#[cfg(target_arch = "aarch64")]
mod neon64;

use std::fmt;
use std::sync::OnceLock;

/// Bytes of each shard processed together: a group of output rows passes over the same
/// piece of every input, so a wide code re-reads its inputs from cache, not memory (32 and
/// 64 KiB were the fastest in `benches/ec.rs`: `docs/results.md`, "Erasure code").
pub(crate) const PIECE: usize = 32 * 1024;

/// Output rows a SIMD kernel keeps in registers at once.
pub(crate) const ROW_GROUP: usize = 4;

/// How far ahead of its step an x86_64 kernel asks for each input's next cache line.
/// Inputs stream from memory (shards far larger than the caches), one stream per input,
/// more than the hardware prefetchers follow well: without asking ahead the kernels wait
/// on memory on large shards; a kilobyte ahead brings them to what the memory gives
/// (`docs/erasure-coding.md`, "Speed"; `docs/results.md`, "Erasure code").
#[cfg(target_arch = "x86_64")]
const PREFETCH: usize = 1024;

/// Asks for the cache line `PREFETCH` bytes past `off` in `input`, when it is still in
/// `input`: past the end it would fetch lines nobody reads (a quarter more of the memory
/// traffic of a 4 KiB shard). The address is only computed, never read by Rust.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "sse")]
pub(crate) fn prefetch(input: &[u8], off: usize) {
    use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    if off + PREFETCH < input.len() {
        _mm_prefetch::<_MM_HINT_T0>(input.as_ptr().wrapping_add(off + PREFETCH).cast());
    }
}

/// A GF(2^8) multiply-accumulate implementation.
///
/// Values are only handed out by [`Kernel::detect`] and [`Kernel::available`], and a
/// [`crate::Codec`] built with an explicit kernel checks [`Kernel::is_supported`] first, so a
/// kernel is never run on a CPU that lacks its instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kernel {
    /// Table lookups in plain Rust; every CPU.
    Portable,
    /// x86_64 AVX-512 with GFNI: each constant applied as an 8x8 bit matrix
    /// (`vgf2p8affineqb`), 128 bytes per step.
    Gfni,
    /// x86_64 AVX2 with GFNI (CPUs with GFNI but no AVX-512): the same matrices on
    /// 256-bit registers, 64 bytes per step.
    GfniAvx2,
    /// x86_64 AVX2 nibble-table shuffles, 64 bytes per step.
    Avx2,
    /// aarch64 Advanced SIMD (`tbl`), 32 bytes per step.
    Neon64,
    /// armv7 NEON (`vtbl`), 16 bytes per step, written in C.
    Neon32,
}

impl Kernel {
    /// Every kernel, supported here or not, best first.
    pub const ALL: [Kernel; 6] = [
        Kernel::Gfni,
        Kernel::GfniAvx2,
        Kernel::Avx2,
        Kernel::Neon64,
        Kernel::Neon32,
        Kernel::Portable,
    ];

    /// The fastest kernel this CPU supports (detected once, then cached).
    #[must_use]
    pub fn detect() -> Kernel {
        static BEST: OnceLock<Kernel> = OnceLock::new();
        *BEST.get_or_init(|| {
            Self::ALL
                .into_iter()
                .find(|k| k.is_supported())
                .unwrap_or(Kernel::Portable)
        })
    }

    /// The kernels this CPU can run, best first (always ends with [`Kernel::Portable`]).
    #[must_use]
    pub fn available() -> Vec<Kernel> {
        Self::ALL.into_iter().filter(|k| k.is_supported()).collect()
    }

    /// Whether the running CPU has the instructions this kernel needs.
    #[must_use]
    pub fn is_supported(self) -> bool {
        match self {
            Kernel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Gfni => gfni::supported(),
            #[cfg(target_arch = "x86_64")]
            Kernel::GfniAvx2 => gfni_avx2::supported(),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => avx2::supported(),
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon64 => neon64::supported(),
            #[cfg(target_arch = "arm")]
            Kernel::Neon32 => neon32::supported(),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Stable lower-case name, for logs, metrics and benchmark labels.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Portable => "portable",
            Kernel::Gfni => "gfni",
            Kernel::GfniAvx2 => "gfni-avx2",
            Kernel::Avx2 => "avx2",
            Kernel::Neon64 => "neon64",
            Kernel::Neon32 => "neon32",
        }
    }

    /// Looks a kernel up by [`Kernel::name`].
    #[must_use]
    pub fn from_name(name: &str) -> Option<Kernel> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// `outputs[r] = XOR over i of coeffs[r * inputs.len() + i] * inputs[i]`, byte by byte.
    ///
    /// Every output is overwritten. Callers guarantee: the kernel is supported, `coeffs`
    /// has `outputs.len() * inputs.len()` entries, `inputs` is not empty and every input
    /// and output has the same length.
    pub(crate) fn mul_rows(self, coeffs: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        let n = inputs.len();
        assert!(n > 0 && coeffs.len() == outputs.len() * n);
        let len = inputs[0].len();
        assert!(inputs.iter().all(|s| s.len() == len));
        assert!(outputs.iter().all(|s| s.len() == len));
        if outputs.is_empty() || len == 0 {
            return;
        }
        match self {
            #[cfg(target_arch = "x86_64")]
            Kernel::Gfni => gfni::mul_rows(coeffs, inputs, outputs),
            #[cfg(target_arch = "x86_64")]
            Kernel::GfniAvx2 => gfni_avx2::mul_rows(coeffs, inputs, outputs),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => avx2::mul_rows(coeffs, inputs, outputs),
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon64 => neon64::mul_rows(coeffs, inputs, outputs),
            #[cfg(target_arch = "arm")]
            Kernel::Neon32 => neon32::mul_rows(coeffs, inputs, outputs),
            _ => portable::mul_rows(coeffs, inputs, outputs, 0, len),
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Runs `block(coeff_rows, outputs, start, end)` over `[0, vec_end)` piece by piece and
/// group of rows by group, then finishes `[vec_end, len)` with the portable kernel.
/// Shared by the SIMD kernels, which differ only in their block function and step.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "arm")),
    allow(dead_code)
)]
pub(crate) fn drive(
    coeffs: &[u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    step: usize,
    mut block: impl FnMut(&[u8], &mut [&mut [u8]], usize, usize),
) {
    let n = inputs.len();
    let len = inputs[0].len();
    let vec_end = len - len % step;
    let mut start = 0;
    while start < vec_end {
        let end = (start + PIECE).min(vec_end);
        for (g, outs) in outputs.chunks_mut(ROW_GROUP).enumerate() {
            let rows = &coeffs[g * ROW_GROUP * n..(g * ROW_GROUP + outs.len()) * n];
            block(rows, outs, start, end);
        }
        start = end;
    }
    if vec_end < len {
        portable::mul_rows(coeffs, inputs, outputs, vec_end, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gf;

    fn reference(coeffs: &[u8], inputs: &[Vec<u8>], rows: usize) -> Vec<Vec<u8>> {
        let len = inputs[0].len();
        (0..rows)
            .map(|r| {
                (0..len)
                    .map(|j| {
                        inputs.iter().enumerate().fold(0u8, |acc, (i, inp)| {
                            acc ^ gf::mul(coeffs[r * inputs.len() + i], inp[j])
                        })
                    })
                    .collect()
            })
            .collect()
    }

    fn fill(seed: &mut u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                (*seed >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn every_kernel_matches_the_scalar_definition_on_edge_lengths() {
        let lens = [
            1,
            2,
            15,
            16,
            17,
            31,
            32,
            33,
            63,
            64,
            65,
            127,
            129,
            4095,
            4096 + 13,
            PIECE - 1,
            PIECE + 7,
            2 * PIECE + 64,
        ];
        let mut seed = 0x9E37_79B9_7F4A_7C15;
        let kernels = Kernel::available();
        assert!(kernels.contains(&Kernel::Portable));
        for &len in &lens {
            for (n, rows) in [(1, 1), (3, 2), (4, 4), (10, 4), (5, 5), (17, 9)] {
                let inputs: Vec<Vec<u8>> = (0..n).map(|_| fill(&mut seed, len)).collect();
                let mut coeffs = fill(&mut seed, rows * n);
                coeffs[0] = 0; // zero and one coefficients are special cases in some codes
                coeffs[rows * n - 1] = 1;
                let want = reference(&coeffs, &inputs, rows);
                for &k in &kernels {
                    let ins: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
                    // Poisoned outputs prove the kernel overwrites rather than accumulates.
                    let mut outs: Vec<Vec<u8>> = vec![vec![0xA5; len]; rows];
                    let mut out_refs: Vec<&mut [u8]> =
                        outs.iter_mut().map(Vec::as_mut_slice).collect();
                    k.mul_rows(&coeffs, &ins, &mut out_refs);
                    assert_eq!(outs, want, "kernel {k}, len {len}, n {n}, rows {rows}");
                }
            }
        }
    }

    /// Every kernel this CPU runs multiplies every constant by every byte as the field
    /// does: 256 rows (one per constant) over one input holding each byte value, twice
    /// over so the SIMD kernels' steps cover it.
    #[test]
    fn every_kernel_multiplies_every_constant_by_every_byte() {
        let input: Vec<u8> = (0..=255u8).cycle().take(512).collect();
        let coeffs: Vec<u8> = (0..=255).collect();
        for k in Kernel::available() {
            let mut outs = vec![vec![0xA5u8; input.len()]; 256];
            let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
            k.mul_rows(&coeffs, &[&input], &mut refs);
            for (c, out) in outs.iter().enumerate() {
                for (x, y) in input.iter().zip(out) {
                    assert_eq!(*y, crate::gf::mul(c as u8, *x), "kernel {k}: {c} * {x}");
                }
            }
        }
    }

    #[test]
    fn detected_kernel_is_supported_and_names_round_trip() {
        assert!(Kernel::detect().is_supported());
        for k in Kernel::ALL {
            assert_eq!(Kernel::from_name(k.name()), Some(k));
        }
        #[cfg(target_arch = "aarch64")]
        assert_eq!(Kernel::detect(), Kernel::Neon64);
    }

    /// CI names the kernel each target must pick (AVX2 on the host, NEON under qemu), so a
    /// detection bug that silently falls back to the portable kernel fails the build.
    #[test]
    fn detected_kernel_is_the_one_ci_expects() {
        if let Ok(want) = std::env::var("OED_EXPECT_KERNEL") {
            assert_eq!(Kernel::detect().name(), want);
        }
    }
}
