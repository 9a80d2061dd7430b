//! The one error type of `oed-ec`. Every variant says which shard, stripe or field was
//! wrong, so a caller can name it in a log line or an S3 error message.

/// Errors from coding, layout and the shard file format.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The erasure-coding profile cannot be built.
    #[error("invalid erasure-coding profile k={k} m={m}: {reason}")]
    InvalidProfile {
        /// Data shards asked for.
        k: usize,
        /// Parity shards asked for.
        m: usize,
        /// What is wrong and what is allowed.
        reason: &'static str,
    },
    /// The chunk size is not a power of two within the documented bounds.
    #[error(
        "invalid chunk size {chunk_size}: must be a power of two from {min} to {max} bytes",
        min = crate::limits::MIN_CHUNK_SIZE,
        max = crate::limits::MAX_CHUNK_SIZE
    )]
    InvalidChunkSize {
        /// The size asked for.
        chunk_size: u64,
    },
    /// The wrong number of shards (or presence flags) was passed.
    #[error("expected {expected} shards, got {got}")]
    ShardCount {
        /// How many the profile needs.
        expected: usize,
        /// How many were given.
        got: usize,
    },
    /// Shards of one stripe differ in length.
    #[error("shard {index} is {got} bytes long, expected {expected} like shard 0")]
    ShardLength {
        /// Index of the first shard whose length differs.
        index: usize,
        /// Length of shard 0.
        expected: usize,
        /// Length of this shard.
        got: usize,
    },
    /// Fewer than k shards are available, so nothing can be rebuilt.
    #[error("only {available} of the {needed} shards needed to rebuild are available")]
    TooFewShards {
        /// Shards present.
        available: usize,
        /// Shards needed (k).
        needed: usize,
    },
    /// A kernel was asked for that this CPU cannot run.
    #[error("erasure-coding kernel {kernel} is not supported by this CPU")]
    KernelUnsupported {
        /// The kernel asked for.
        kernel: crate::Kernel,
    },
    /// The shard file does not start with the magic bytes: not a shard file.
    #[error("not an OED shard file (bad magic bytes)")]
    BadMagic,
    /// The shard file has a format version this build does not read.
    #[error("unsupported shard format version {version} (this build reads version 1)")]
    UnsupportedVersion {
        /// Version found in the header.
        version: u16,
    },
    /// The shard header's checksum does not match its bytes.
    #[error("shard header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    HeaderChecksum {
        /// Checksum stored in the header.
        stored: u32,
        /// Checksum of the header bytes as read.
        computed: u32,
    },
    /// A shard header field holds a value that is out of range.
    #[error("invalid shard header field {field}: {reason}")]
    InvalidHeader {
        /// The field's name as in FORMAT.md.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A chunk's CRC32C does not match its bytes: bit rot or a torn write.
    #[error("chunk of stripe {stripe} is corrupt (CRC32C mismatch)")]
    CorruptChunk {
        /// The stripe whose chunk is bad.
        stripe: u64,
    },
    /// The shard file ends before the frame of this stripe is complete.
    #[error("shard file truncated in the frame of stripe {stripe}")]
    Truncated {
        /// The stripe whose frame is incomplete.
        stripe: u64,
    },
    /// The shard file holds bytes after its last frame.
    #[error("shard file has trailing bytes after its last frame")]
    TrailingData,
    /// A writer was given a chunk of the wrong length for its stripe.
    #[error("chunk of stripe {stripe} is {got} bytes, the layout requires {expected}")]
    ChunkLength {
        /// The stripe being written.
        stripe: u64,
        /// Length the layout requires.
        expected: usize,
        /// Length given.
        got: usize,
    },
    /// A writer was finished, or given more chunks, out of step with the object length.
    #[error("shard holds {expected} stripes, {written} were written")]
    StripeCount {
        /// Stripes the object length implies.
        expected: u64,
        /// Stripes written (or attempted).
        written: u64,
    },
    /// The underlying reader or writer failed.
    #[error("shard I/O failed")]
    Io(#[from] std::io::Error),
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
