//! The bounds of a profile and of a shard file: how many shards a stripe can have and
//! which chunk sizes are accepted. They sit below everything else in the crate so that
//! the layout, the codec and the error messages all name the same figures.

/// Most shards a stripe can have: GF(2^8) has 256 distinct evaluation points.
pub const MAX_SHARDS: usize = 256;

/// Smallest chunk size accepted.
pub const MIN_CHUNK_SIZE: u32 = 4 * 1024;
/// Largest chunk size accepted.
pub const MAX_CHUNK_SIZE: u32 = 16 * 1024 * 1024;
/// Chunk size used when none is configured.
pub const DEFAULT_CHUNK_SIZE: u32 = 256 * 1024;
