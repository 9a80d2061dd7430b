//! A client of another drive's peer API: the [`Drive`](oed_model::drive::Drive) interface over HTTP. It signs
//! each request, names its route from [`PeerOp`](crate::PeerOp), and reads error bodies back into the
//! typed [`DriveError`](oed_model::drive::DriveError) the drive sent. The coordinator of the cluster uses it; so do the
//! end-to-end tests.
//!
//! `wire` holds the request, its answer and the pooled HTTP client; `drive` the `Drive`
//! methods; `raw` and `frames` the sending side of raw uploads and the reading side of
//! framed reads (their protocols: `crate::raw`, `crate::frames`), sharing the connections
//! `kept`; `sealed` the seal both kinds of shard upload end with.
//!
//! It speaks HTTP/1.1 through hyper's pooled client directly. A connection's read buffer
//! is capped at [`READ_BUFFER_MAX`](oed_model::config::READ_BUFFER_MAX): hyper's default lets each connection grow one to
//! about 400 KiB and keep it while the connection idles in the pool, and a coordinator
//! holds dozens of connections (`docs/cluster.md`, "Memory and back-pressure").

mod drive;
mod frames;
mod kept;
mod raw;
mod sealed;
mod wire;

pub use wire::{PeerBody, PeerClient, PeerError, PeerHttp, PeerRequest, PeerResponse, check};
