//! `oed-daemon`: the `oedd` drive daemon as a library, with a thin `main.rs`.
//!
//! So far it reports what it was built with ([`build_info`]); the local store, the peer
//! API, the S3 front end and the cluster arrive in the next steps (`docs/roadmap.md`).
//!
//! # Layout
//! - [`build_info`]: version and the erasure-coding kernel this CPU runs.

/// One line naming the version, target and the erasure-coding kernel chosen on this CPU,
/// so an operator can see what a drive runs (`oedd version`).
#[must_use]
pub fn build_info() -> String {
    format!(
        "oedd {} ({}-{}), erasure-coding kernel: {}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS,
        oed_ec::Kernel::detect()
    )
}
