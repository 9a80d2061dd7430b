//! `oed-ops`: the kernels of the operations OED runs where the data lies. Like `oed-ec`,
//! it is pure computation (no async, no files, no network), so that every drive and
//! every target (x86_64, aarch64, armv7) runs the same code, and so that it can be
//! tested and benchmarked on its own.
//!
//! An operation on an object is a fold over runs of its bytes at known object offsets
//! (each drive folds the data chunks it holds) into a small **partial** result; partials
//! of adjacent runs **merge** exactly and associatively, in object order; the partial of
//! the whole object **finishes** into the answer. Partials are serde types, since they
//! cross the network from drive to coordinator.
//!
//! # Layout
//! - [`checksum`]: CRC32C and CRC64NVME (combined from per-run CRCs) and BLAKE3 (joined
//!   from subtree chaining values); why SHA-256 cannot be split.
//! - [`stats`]: count, sum, min, max, mean, variance and histograms over fixed-width
//!   little-endian numbers, with Welford's moments and Chan's merge.
//! - [`text`]: numbers written as text, one per line or one column of CSV, with records
//!   cut by runs joined where the runs meet.
//! - [`sort`]: fixed-width records sorted per run on the drives, merged k ways.
//! - [`vector`]: element-wise add of two objects' records (run by the coordinator).
//! - [`sketch`]: quantiles within a stated relative error (DDSketch), merged exactly.
//! - [`op`]: an operation as users ask for it, planned for one object: run, merge,
//!   finish, for every operation; SHA-256, which does not split, in order.
//! - [`grep`]: lines matching a literal or a regular expression, counted and returned,
//!   with lines cut by runs joined where the runs meet.
//! - [`compress`]: zstd and LZ4 frames of runs, which concatenate into one stream; the
//!   estimate of what compressing would save.
//! - [`dedup`]: duplicate content, by content-defined chunks and mergeable sketches of
//!   their distinct fingerprints.
//! - [`s3sum`]: S3's `x-amz-checksum-*` algorithms over a body, and multipart objects'
//!   composite and full-object checksums.
//! - [`md5`]: MD5 for S3's `ETag` and `Content-MD5`, incremental and over several
//!   independent streams at once (the write path hashes concurrent uploads together).

pub mod checksum;
pub mod compress;
pub mod dedup;
pub mod grep;
pub mod md5;
pub mod op;
pub mod s3sum;
pub mod sha256;
pub mod sketch;
pub mod sort;
pub mod stats;
pub mod text;
pub mod vector;

/// Byte fields of partials, as base64 strings in JSON.
mod b64 {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

/// What an operation can refuse or fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operation's parameters, or the runs it was given, do not fit it; the message
    /// says which and why.
    #[error("{0}")]
    BadArgument(String),
    /// The partials to finish do not cover the object exactly once.
    #[error("incomplete: {0}")]
    Incomplete(String),
    /// The partials cannot give the answer (a run guessed wrong where it started); the
    /// object must be folded in order ([`op::Plan::in_order`]).
    #[error("needs the object in order: {0}")]
    InOrder(String),
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
