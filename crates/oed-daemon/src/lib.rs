//! `oed-daemon`: the `oedd` drive daemon as a library, with a thin `main.rs`.
//!
//! One `oedd` runs on each drive. This crate holds everything it does; `main.rs` only
//! parses flags, sets up tracing, binds the listeners and calls [`server::Drive::serve`].
//!
//! # Layout
//! - [`config`]: the documented [`config::Config`], from TOML, `OED_*` variables and flags.
//! - [`error`]: the one error type and the one place errors become HTTP responses.
//! - [`store`]: the local store: RocksDB metadata ([`store::meta`]), records
//!   ([`store::record`]), shard files, and the durable write.
//! - [`peer`]: the authenticated peer API (`/_oed/peer/v1/`), its signing ([`peer::auth`])
//!   and a client ([`peer::client`]).
//! - [`cluster`]: the cluster map and placement, and the coordinator: the erasure-coded
//!   write and read paths and the merged listing.
//! - [`s3`]: the S3 API (through `s3s`), with handlers that call the cluster.
//! - [`metrics`]: the drive's Prometheus registry (the meter's collectors from `oed-meter`,
//!   request and traffic counters, the store's state at scrape time) and `/metrics`.
//! - [`server`]: opening a drive and serving its listeners, with the meter's sampler, on
//!   one shutdown path.
//! - [`dev`]: `oedd dev`, a whole cluster of drives on one machine.

pub mod cluster;
pub mod config;
pub mod dev;
pub mod error;
pub mod md5_lanes;
pub mod metrics;
pub mod peer;
pub mod s3;
pub mod server;
pub mod store;

pub use error::{Error, Result};

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
