//! Builds the armv7 NEON kernel. Rust's 32-bit ARM NEON intrinsics are not stable, so that
//! one kernel is C, compiled with NEON enabled for that file only and called only after the
//! run-time check in `kernel::neon32` has seen NEON in the CPU's hwcaps.

fn main() {
    println!("cargo::rerun-if-changed=src/kernel/neon32.c");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("arm") {
        cc::Build::new()
            .file("src/kernel/neon32.c")
            .flag("-mfpu=neon")
            .flag("-std=c99")
            .opt_level(3)
            .warnings(true)
            .extra_warnings(true)
            .compile("oed_ec_neon32");
    }
}
