//! `oed-tools`: the commands of `oedd` that a drive does not run for itself. `oedd` keeps
//! them as subcommands (scripts, the package and the docs name them so); they live here,
//! apart from the drive's layers, so that nothing a drive serves depends on them.
//!
//! # Layout
//! - [`admin`]: `oedd admin`, cluster health and repair actions over the peer API.
//! - [`dev`]: `oedd dev`, a whole cluster of drives on one machine.
//! - [`op_client`]: `oedd op`, a near-data operation signed with SigV4 from a shell.
//! - [`bench`]: `oedd bench`, an IOR-like benchmark of any S3 endpoint with the share of
//!   the theoretical peak and the drives' energy per phase.

pub mod admin;
pub mod bench;
pub mod dev;
pub mod op_client;
