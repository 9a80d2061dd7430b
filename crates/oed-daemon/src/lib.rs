//! `oed-daemon`: the `oedd` drive daemon as a library, with a thin `main.rs`.
//!
//! One `oedd` runs on each drive. This crate holds everything it does; `main.rs` only
//! parses flags, sets up tracing, binds the listeners and calls
//! [`server::DriveServer::serve`].
//!
//! # Layout
//! Layers from the client down: [`s3`] calls [`cluster`], which talks to every drive
//! through the one [`drive::Drive`] interface: this drive's [`store`] directly, the
//! others through [`peer`]'s client, whose server side hands requests to their stores.
//! - [`config`]: the documented [`config::Config`], from TOML, `OED_*` variables and flags.
//! - [`error`]: the one error type, the typed code that crosses the peer boundary, and the
//!   one place errors become peer API and S3 answers.
//! - [`model`]: the plain types every layer shares: records and keys
//!   ([`model::record`]), heal entries ([`model::heal`]), the cluster map ([`model::map`]).
//! - [`limiter`]: the byte-rate limit background work (heal, scrub) takes from.
//! - [`drive`]: the operations drives offer each other, their types and errors.
//! - [`store`]: the local store: RocksDB metadata ([`store::meta`], private to it),
//!   the heal queue, shard files, the durable write, the threads near-data operations
//!   run on; it is a `Drive`.
//! - [`peer`]: the authenticated peer API (`/_oed/peer/v1/`, its routes in
//!   [`peer::PeerOp`]), its signing ([`peer::auth`]) and the client that is a `Drive`
//!   ([`peer::client`]).
//! - [`cluster`]: placement over the cluster map, and the coordinator: the erasure-coded
//!   write path ([`cluster::write`], with MD5 in lanes, [`cluster::md5`]), the stripe
//!   source ([`cluster::stripes`]) and the read path on it ([`cluster::read`]), the merged
//!   listing ([`cluster::list`]), the memory budget, and the tasks requests leave running.
//! - [`compute`]: near-data operations: the drive side (folding its own chunks off the
//!   I/O path) and the coordinator side (plan, fan out, rebuild, merge).
//! - [`repair`]: heal, scrub and refill, in the background on every drive.
//! - [`s3`]: the S3 API (through `s3s`), with thin handlers that call the cluster.
//! - [`metrics`]: the drive's Prometheus registry (the meter's collectors from `oed-meter`,
//!   request and traffic counters, the store's state at scrape time) and `/metrics`.
//! - [`server`]: opening a drive and serving its listeners, with the meter's sampler, on
//!   one shutdown path.
//! - [`dev`]: `oedd dev`, a whole cluster of drives on one machine.
//! - [`uri`]: percent-encoding as S3, SigV4 and the peer API use it.
//! - [`admin_api`]: the peer API's admin routes (repair state, actions, the map in
//!   force), served by the server beside the peer routes.
//! - [`admin`]: `oedd admin`, cluster health and repair actions over the peer API.
//! - [`notify`]: readiness and shutdown notices to systemd (`Type=notify`).
//! - [`relocations`]: the pages of the executable's dynamic relocations, given back at start.
//! - [`op_client`]: `oedd op`, a near-data operation signed with SigV4 from a shell.
//! - [`bench`]: `oedd bench`, an IOR-like benchmark of any S3 endpoint with the share of
//!   the theoretical peak and the drives' energy per phase.

pub mod admin;
pub mod admin_api;
pub mod bench;
pub mod cluster;
pub mod compute;
pub mod config;
pub mod dev;
pub mod drive;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod limiter;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod op_client;
pub mod peer;
pub mod relocations;
pub mod repair;
pub mod s3;
pub mod server;
mod stall;
pub mod store;
pub mod tls;
pub mod uri;

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
