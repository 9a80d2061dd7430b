//! The plain types every layer shares: object and bucket records and their keys
//! ([`record`]), heal-queue entries ([`heal`]), the cluster map ([`map`]), and the
//! account table of access keys and bucket rights ([`account`]). Nothing
//! here opens a file or a connection; the store keeps these types, the peer protocol
//! carries them, and the cluster acts on them.

pub mod account;
pub mod config;
pub mod drive;
pub mod error;
pub mod heal;
pub mod lifecycle;
pub mod map;
pub mod policy;
pub mod record;
pub mod seal;
pub mod sigv4;
pub mod uri;

pub use error::{Error, Result};
