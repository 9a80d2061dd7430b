//! armv7 NEON kernel. Rust's 32-bit ARM NEON intrinsics and `is_arm_feature_detected!` are
//! not stable, so the inner loop is C (`neon32.c`, built by `build.rs` with `-mfpu=neon`)
//! and fed the same nibble tables as the other kernels; NEON is detected from the kernel's
//! hwcaps (`getauxval(AT_HWCAP)`), since many armv7 cores lack it.
#![allow(unsafe_code)]

use std::sync::OnceLock;

use crate::gf::NIBBLES;

const STEP: usize = 16;
/// `HWCAP_NEON` from the Linux arm uapi (`asm/hwcap.h`).
const HWCAP_NEON: libc::c_ulong = 1 << 12;

unsafe extern "C" {
    fn oed_ec_neon32_block(
        tables: *const *const u8,
        rows: usize,
        ins: *const *const u8,
        n: usize,
        outs: *const *mut u8,
        start: usize,
        end: usize,
    );
}

pub(crate) fn supported() -> bool {
    static NEON: OnceLock<bool> = OnceLock::new();
    *NEON.get_or_init(|| {
        // SAFETY: getauxval has no preconditions and only reads the process's aux vector.
        let hwcap = unsafe { libc::getauxval(libc::AT_HWCAP) };
        hwcap & HWCAP_NEON != 0
    })
}

pub(crate) fn mul_rows(coeffs: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
    assert!(supported());
    let ins: Vec<*const u8> = inputs.iter().map(|s| s.as_ptr()).collect();
    super::drive(coeffs, inputs, outputs, STEP, |rows, outs, start, end| {
        let tables: Vec<*const u8> = rows
            .iter()
            .map(|&c| NIBBLES[c as usize].0.as_ptr())
            .collect();
        let out_ptrs: Vec<*mut u8> = outs.iter_mut().map(|s| s.as_mut_ptr()).collect();
        // SAFETY: NEON is present (asserted above); `drive` gives `start..end` within every
        // shard with `end - start` a multiple of STEP and 1..=4 output rows; `tables` has
        // rows * n pointers to 32-byte tables; outputs never alias inputs (distinct borrows).
        unsafe {
            oed_ec_neon32_block(
                tables.as_ptr(),
                out_ptrs.len(),
                ins.as_ptr(),
                ins.len(),
                out_ptrs.as_ptr(),
                start,
                end,
            );
        }
    });
}
