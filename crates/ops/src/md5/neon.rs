//! MD5 in SIMD lanes on aarch64: 4 streams in the 32-bit lanes of NEON's registers.
//! NEON's bit select (`bsl`) is MD5's F and G in one instruction, and shift-left-insert
//! (`sli`) makes a rotate of two. (armv7's NEON intrinsics are not stable in Rust yet, so
//! armv7 keeps the scalar lanes.)
#![allow(unsafe_code)]

use core::arch::aarch64::{
    uint32x4_t, vaddq_u32, vbslq_u32, vdupq_n_u32, veorq_u32, vld1q_u32, vornq_u32,
    vreinterpretq_u32_u64, vreinterpretq_u64_u32, vshrq_n_u32, vsliq_n_u32, vst1q_u32, vtrn1q_u32,
    vtrn1q_u64, vtrn2q_u32, vtrn2q_u64,
};

/// Words `off/4 .. off/4 + 4` of 4 lanes, transposed: vector `j` holds word `off/4 + j`
/// of every lane.
#[target_feature(enable = "neon")]
fn words4(data: &[&[u8]], off: usize) -> [uint32x4_t; 4] {
    let mut r = [vdupq_n_u32(0); 4];
    for (row, lane) in r.iter_mut().zip(data) {
        let bytes: &[u8; 16] = lane[off..off + 16].try_into().expect("16 bytes");
        // SAFETY: `bytes` is 16 readable bytes; the load takes any alignment. MD5's words
        // are little-endian, as aarch64 Linux is.
        *row = unsafe { vld1q_u32(bytes.as_ptr().cast()) };
    }
    let t0 = vtrn1q_u32(r[0], r[1]);
    let t1 = vtrn2q_u32(r[0], r[1]);
    let t2 = vtrn1q_u32(r[2], r[3]);
    let t3 = vtrn2q_u32(r[2], r[3]);
    let pairs = |x: uint32x4_t, y: uint32x4_t| (vreinterpretq_u64_u32(x), vreinterpretq_u64_u32(y));
    let (e0, e2) = pairs(t0, t2);
    let (o1, o3) = pairs(t1, t3);
    [
        vreinterpretq_u32_u64(vtrn1q_u64(e0, e2)),
        vreinterpretq_u32_u64(vtrn1q_u64(o1, o3)),
        vreinterpretq_u32_u64(vtrn2q_u64(e0, e2)),
        vreinterpretq_u32_u64(vtrn2q_u64(o1, o3)),
    ]
}

#[target_feature(enable = "neon")]
fn load_states4(states: &[[u32; 4]], w: usize) -> uint32x4_t {
    let words: [u32; 4] = std::array::from_fn(|l| states[l][w]);
    // SAFETY: `words` is 16 readable bytes.
    unsafe { vld1q_u32(words.as_ptr()) }
}

#[target_feature(enable = "neon")]
fn store_states4(states: &mut [[u32; 4]], w: usize, v: uint32x4_t) {
    let mut words = [0u32; 4];
    // SAFETY: `words` is 16 writable bytes.
    unsafe { vst1q_u32(words.as_mut_ptr(), v) };
    for (state, word) in states.iter_mut().zip(words) {
        state[w] = word;
    }
}

/// Hashes `blocks` blocks of each of 4 lanes (`data[l]`, at least that long) into
/// `states[l]`.
///
/// # Safety
/// NEON must be available (it always is on aarch64 Linux).
#[target_feature(enable = "neon")]
pub(crate) unsafe fn compress4(states: &mut [[u32; 4]], data: &[&[u8]], blocks: usize) {
    #[inline]
    #[target_feature(enable = "neon")]
    fn f(b: uint32x4_t, c: uint32x4_t, d: uint32x4_t) -> uint32x4_t {
        vbslq_u32(b, c, d) // c where b is set, d where it is clear
    }
    #[inline]
    #[target_feature(enable = "neon")]
    fn g(b: uint32x4_t, c: uint32x4_t, d: uint32x4_t) -> uint32x4_t {
        vbslq_u32(d, b, c)
    }
    #[inline]
    #[target_feature(enable = "neon")]
    fn h(b: uint32x4_t, c: uint32x4_t, d: uint32x4_t) -> uint32x4_t {
        veorq_u32(b, veorq_u32(c, d))
    }
    #[inline]
    #[target_feature(enable = "neon")]
    fn i(b: uint32x4_t, c: uint32x4_t, d: uint32x4_t) -> uint32x4_t {
        veorq_u32(c, vornq_u32(b, d)) // c ^ (b | !d)
    }
    macro_rules! step {
        ($fun:ident, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:expr, $s:literal) => {
            // a + m + k does not wait for this step's b.
            let x = vaddq_u32(
                vaddq_u32($a, vaddq_u32($m, vdupq_n_u32($k))),
                $fun($b, $c, $d),
            );
            // (x >> (32 - s)) with x << s inserted above it: x rotated left by s.
            let rotated = vsliq_n_u32::<{ $s }>(vshrq_n_u32::<{ 32 - $s }>(x), x);
            $a = vaddq_u32($b, rotated);
        };
    }
    assert!(states.len() == 4 && data.len() == 4);
    let mut a = load_states4(states, 0);
    let mut b = load_states4(states, 1);
    let mut c = load_states4(states, 2);
    let mut d = load_states4(states, 3);
    for blk in 0..blocks {
        let mut m = [vdupq_n_u32(0); 16];
        for q in 0..4 {
            m[4 * q..4 * q + 4].copy_from_slice(&words4(data, 64 * blk + 16 * q));
        }
        let (a0, b0, c0, d0) = (a, b, c, d);
        md5_steps!(step, a, b, c, d, m);
        a = vaddq_u32(a, a0);
        b = vaddq_u32(b, b0);
        c = vaddq_u32(c, c0);
        d = vaddq_u32(d, d0);
    }
    store_states4(states, 0, a);
    store_states4(states, 1, b);
    store_states4(states, 2, c);
    store_states4(states, 3, d);
}
