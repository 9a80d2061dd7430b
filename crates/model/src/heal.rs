//! The heal queue's entries: which shard of which object version a drive must rebuild,
//! and why. The queue that keeps them is the store's ([`oed_store::queue`]); other
//! drives send them over the peer API (hints, missing shards).

use serde::{Deserialize, Serialize};

use super::record::{ObjectRecord, VersionId, now_ms};
use crate::error::Result;

/// Why a shard was queued: the `cause` label of the heal metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealCause {
    /// A write was acknowledged without this shard (its drive was down or failed).
    DegradedWrite,
    /// A read found a chunk failing its CRC32C (or the shard file gone).
    ReadCorrupt,
    /// The scrubber found a chunk failing its CRC32C (or the shard file gone).
    ScrubCorrupt,
    /// Another holder of the object found this drive without the shard (a drive that
    /// missed writes, or was wiped).
    Missing,
    /// This drive replaced an earlier one and refills what it held.
    Refill,
}

impl HealCause {
    /// Every cause.
    pub const ALL: [Self; 5] = [
        Self::DegradedWrite,
        Self::ReadCorrupt,
        Self::ScrubCorrupt,
        Self::Missing,
        Self::Refill,
    ];

    /// The metric label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::DegradedWrite => "degraded_write",
            Self::ReadCorrupt => "read_corrupt",
            Self::ScrubCorrupt => "scrub_corrupt",
            Self::Missing => "missing",
            Self::Refill => "refill",
        }
    }

    /// Its place in arrays indexed by cause.
    #[must_use]
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One shard to rebuild.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealEntry {
    /// The bucket.
    pub bucket: String,
    /// The object (or part) key.
    pub key: String,
    /// The version whose shard is missing. The healer rebuilds the version that is
    /// current when it runs, and only when this drive holds a shard of it: a version
    /// overwritten or deleted meanwhile is never brought back.
    pub version_id: VersionId,
    /// The shard.
    pub shard_index: u16,
    /// The drive that should hold it.
    pub drive: String,
    /// Why it was queued.
    pub cause: HealCause,
    /// Shards of the object known good when it was queued, less `k`: how many more may
    /// be lost before the object is. Lower goes first.
    pub redundancy: u16,
    /// Bytes of the shard to rebuild (chunks, padding included), for progress and ETA.
    #[serde(default)]
    pub bytes: u64,
    /// When it was queued, milliseconds since the epoch.
    pub queued_ms: u64,
    /// Heals of it that failed so far.
    #[serde(default)]
    pub attempts: u32,
    /// Whether the version is one of its own (`ObjectRecord::versioned`): the version of
    /// the key it replaced is then kept as a noncurrent one, whose entry, when this one
    /// takes its place in a queue, is kept under its version key.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub versioned: bool,
}

impl HealEntry {
    /// An entry for shard `shard` of `record`'s object, on the drive the record places it
    /// on (`local` when the record names none: a drive of its own).
    #[must_use]
    pub fn of(
        record: &ObjectRecord,
        shard: u16,
        cause: HealCause,
        redundancy: u16,
        local: &str,
    ) -> Self {
        let bytes = record.shard_bytes();
        Self {
            bucket: record.bucket.clone(),
            key: record.key.clone(),
            version_id: record.version_id,
            shard_index: shard,
            drive: record
                .drives
                .get(usize::from(shard))
                .cloned()
                .unwrap_or_else(|| local.to_owned()),
            cause,
            redundancy,
            bytes,
            queued_ms: now_ms(),
            attempts: 0,
            versioned: record.versioned,
        }
    }

    /// Checks the names: a peer's entry becomes a key of this drive's store.
    ///
    /// # Errors
    /// [`crate::Error::BadRequest`] saying what is wrong.
    pub fn validate(&self) -> Result<()> {
        crate::record::check_bucket_name(&self.bucket)?;
        crate::record::check_key(&self.key)?;
        if self.drive.is_empty() || self.drive.contains('\0') {
            return Err(crate::Error::BadRequest(format!(
                "heal entry for drive {:?}",
                self.drive
            )));
        }
        Ok(())
    }
}
