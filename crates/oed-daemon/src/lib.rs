//! `oed-daemon`: the `oedd` drive daemon, the top of OED's layers, with a thin `main.rs`.
//!
//! One `oedd` runs on each drive. The layers below are crates of their own, each
//! depending only on those under it (ARCHITECTURE.md has the picture):
//! `oed-model` (errors, records, the cluster map, the drive interface, the settings) ->
//! `oed-store` (this drive's RocksDB and shard files) -> `oed-peer` (the peer protocol,
//! client and server) -> `oed-cluster` (placement, the write and read pipelines,
//! near-data operations) -> `oed-repair` (heal, scrub, refill, drain) and `oed-s3` (the
//! S3 front end). This crate wires them into one drive; `oed-tools` holds the commands
//! a drive does not run for itself (`oedd bench`, `dev`, `op`, `admin`).
//!
//! # Layout
//! - [`server`]: opening a drive and serving its listeners, with the meter's sampler, on
//!   one shutdown path.
//! - [`cli`]: the command line both binaries parse (`oedd` and `oedd-tools`, which runs
//!   the commands a drive does not run for itself), and the manual page made from it.
//! - [`signals`]: SIGTERM and SIGINT, watched from before a process says it is ready.
//! - [`admin_api`]: the peer API's admin routes (repair state, actions, the map in
//!   force), served beside the peer routes.
//! - [`metrics`]: the drive's Prometheus registry (the meter's collectors from `oed-meter`,
//!   request and traffic counters, the store's state at scrape time) and `/metrics`.
//! - [`notify`]: readiness and shutdown notices to systemd (`Type=notify`).
//! - [`loader_pages`]: pages given back: the executable's dynamic relocations at start,
//!   and once a drive is ready (and again when it has settled), its code and read-only
//!   data, which map again as they run.

pub mod admin_api;
pub mod cli;
#[doc(hidden)]
pub mod fuzzing;
pub mod loader_pages;
pub mod metrics;
pub mod notify;
pub mod server;
pub mod signals;

/// Logs to standard error, filtered by `OED_LOG` (default: `info`, s3s's own off).
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OED_LOG")
                // s3s logs every refused request at error level; OED logs what matters.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,s3s=off")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

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
