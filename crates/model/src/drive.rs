//! The one interface drives offer each other: [`Drive`]. A coordinator holds a
//! `Arc<dyn Drive>` for every drive of its cluster and never asks which kind it is:
//! this drive's own [`Store`](oed_store::Store) implements it directly, and
//! [`PeerClient`](oed_peer::client::PeerClient) implements it over another drive's
//! peer API, whose handlers are thin adapters from HTTP to the same trait on that drive's
//! store. Errors are [`DriveError`]s with a typed [`ErrorCode`](crate::error::ErrorCode)
//! on both sides, so a local call and a remote one fail alike; `tests/drive_conformance.rs`
//! runs every operation, errors included, against both.
//!
//! A new drive operation (near-data work, heal, scrub) is one method here, one in the
//! store, one route in [`oed_peer::PeerOp`] with its handler, and one in the client.

use std::ops::Range;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::Stream;
use serde::{Deserialize, Serialize};

use crate::account::{AccountDigest, SignedEntry};
pub use crate::error::{DriveError, ErrorCode};
pub use crate::heal::HealEntry;
use crate::record::{BucketRecord, ObjectRecord, PartRef, VersionId};

/// The body of a shard upload: the shard file (oed-ec format), in pieces as they come,
/// optionally followed by a JSON [`RecordTail`](crate::record::RecordTail).
pub type ShardUpload = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// The chunk bytes of a shard read, in pieces (not necessarily one per chunk), each chunk
/// checked against its CRC32C before it is yielded: by the drive before it is sent, or,
/// in a framed read, by the peer client as it arrives. A chunk that fails its check ends
/// the stream with an error (a [`ErrorCode::CorruptShard`] from a local drive or a
/// framed read, an [`ErrorCode::Unreachable`] broken transfer from a remote one sending
/// a body): never bad bytes.
pub type ShardStream = Pin<Box<dyn Stream<Item = Result<Bytes, DriveError>> + Send>>;

/// A shard read that has started: the first chunk of the range was read and checked
/// (a bad one is an error of [`Drive::read_shard`] itself, not of the stream).
pub struct ShardRead {
    /// The version read.
    pub version: VersionId,
    /// The stripes the stream holds, clipped to the shard's.
    pub stripes: Range<u64>,
    /// Their chunk bytes, stripe after stripe.
    pub chunks: ShardStream,
}

impl std::fmt::Debug for ShardRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardRead")
            .field("version", &self.version)
            .field("stripes", &self.stripes)
            .finish_non_exhaustive()
    }
}

/// A committed shard: its record, and the parts of the version it replaced on the drive
/// when that was a multipart object (nothing else references them any more; the
/// coordinator deletes them). The peer API answers a shard upload with this, as JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    /// The committed record.
    #[serde(flatten)]
    pub record: ObjectRecord,
    /// Parts of the replaced version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced_parts: Vec<PartRef>,
    /// Whether the drive keeps the version this one replaced until the write is settled
    /// ([`Drive::settle`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kept: bool,
}

/// What a drive says about itself (`GET info`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriveInfo {
    /// Drive id.
    pub drive_id: String,
    /// `oedd` version.
    pub version: String,
    /// File system size.
    pub capacity_bytes: u64,
    /// Free bytes.
    pub free_bytes: u64,
    /// Reserve kept free.
    pub reserve_bytes: u64,
    /// Object records (so shards) held.
    pub shard_count: u64,
    /// Entries in the heal queue.
    pub heal_backlog: u64,
    /// Peer requests refused for bad or missing signatures since start (counted by the
    /// drive's HTTP server; 0 when asked without HTTP).
    pub auth_failures: u64,
    /// "ok", or "low-space" when free space is within the reserve.
    pub health: String,
    /// The drive's incarnation: written at its first start on an empty data directory;
    /// another one under the same id means its disk was replaced.
    #[serde(default)]
    pub incarnation: String,
}

/// An object by name, as the batch operations take it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    /// The bucket.
    pub bucket: String,
    /// The key.
    pub key: String,
}

/// One shard of one version that moved from one drive to another (a drive being
/// drained): every record that names `from` for that shard is to name `to`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relocation {
    /// The bucket.
    pub bucket: String,
    /// The key (for a part of a multipart object, the part's internal key).
    pub key: String,
    /// The version whose shard moved.
    pub version_id: VersionId,
    /// The shard that moved.
    pub shard_index: u16,
    /// The drive it left.
    pub from: String,
    /// The drive that holds it now.
    pub to: String,
    /// For a part: the key of the object it belongs to, whose record lists the part's
    /// drives too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

/// A change to one stored version that keeps the version (its id, data and `ETag`):
/// applied by each drive holding a record of it ([`Drive::amend`]). Of two changes of one
/// version, the one made later (`at`) stays on every drive, whichever arrives first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amendment {
    /// The bucket.
    pub bucket: String,
    /// The key the version is stored under (a noncurrent version's own key).
    pub key: String,
    /// The version changed.
    pub version_id: VersionId,
    /// When the change was made (an id the coordinator made for it).
    pub at: VersionId,
    /// What changes.
    pub change: Change,
}

/// What an [`Amendment`] changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// The object's tags become these (none: the tags are removed).
    Tags(std::collections::BTreeMap<String, String>),
    /// Its retention becomes this (none: it has none).
    Retention(Option<crate::record::Retention>),
    /// Its legal hold is put on (true) or taken off.
    LegalHold(bool),
}

/// The changes `newer` carries that `older`, a record of the same version, lacks: each
/// part an [`Amendment`] changes, with when it was changed.
#[must_use]
pub fn changes_since(newer: &ObjectRecord, older: &ObjectRecord) -> Vec<(VersionId, Change)> {
    let mut out = Vec::new();
    if newer.tags_changed > older.tags_changed {
        out.push((newer.tags_changed, Change::Tags(newer.tags.clone())));
    }
    if newer.retention_changed > older.retention_changed {
        out.push((newer.retention_changed, Change::Retention(newer.retention)));
    }
    if newer.legal_hold_changed > older.legal_hold_changed {
        out.push((
            newer.legal_hold_changed,
            Change::LegalHold(newer.legal_hold),
        ));
    }
    out
}

/// `into` with each part an amendment changes taken from `other` (a record of the same
/// version) where `other` changed it later: the version as the latest changes left it.
pub fn merge_changes(into: &mut ObjectRecord, other: &ObjectRecord) {
    for (at, change) in changes_since(other, into) {
        Amendment {
            bucket: String::new(),
            key: String::new(),
            version_id: into.version_id,
            at,
            change,
        }
        .apply(into);
    }
}

impl Amendment {
    /// Applies it to `record` (a record of its version), unless the record carries a
    /// change made later. Returns whether `record` changed.
    pub fn apply(&self, record: &mut ObjectRecord) -> bool {
        match &self.change {
            Change::Tags(tags) => {
                if record.tags_changed >= self.at {
                    return false;
                }
                record.tags.clone_from(tags);
                record.tags_changed = self.at;
            }
            Change::Retention(r) => {
                if record.retention_changed >= self.at {
                    return false;
                }
                record.retention = *r;
                record.retention_changed = self.at;
            }
            Change::LegalHold(on) => {
                if record.legal_hold_changed >= self.at {
                    return false;
                }
                record.legal_hold = *on;
                record.legal_hold_changed = self.at;
            }
        }
        true
    }
}

/// How a client write ended, told to the drives that stored its shards
/// ([`Drive::settle`]). A drive that commits a client write keeps the version it replaced
/// (record and shard) until then: an overwrite that fails must not take the version it
/// was to replace with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settlement {
    /// The bucket.
    pub bucket: String,
    /// The key.
    pub key: String,
    /// The version the write stored.
    pub version_id: VersionId,
    /// `true`: it reached its write quorum, and the version it replaced is dropped.
    /// `false`: it failed; it is removed, and the version it replaced is current again.
    pub stored: bool,
}

/// A page of [`Drive::records_for`]: the records found, and where the next page starts
/// (`None` after the last).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordPage {
    /// Records that name the drive asked about.
    pub records: Vec<ObjectRecord>,
    /// The last object looked at: the `after` of the next page.
    pub next: Option<ObjectRef>,
}

/// Most objects one [`Drive::versions`] call takes.
pub const MAX_BATCH: usize = 1000;

/// `BadRequest` for a batch of more than [`MAX_BATCH`] items: refused alike by a drive
/// and, before it builds a body too large for the drive, by the peer client.
///
/// # Errors
/// As said.
pub fn check_batch(n: usize) -> Result<(), DriveError> {
    if n > MAX_BATCH {
        return Err(DriveError::new(
            ErrorCode::BadRequest,
            format!("{n} objects in one batch; at most {MAX_BATCH}"),
        ));
    }
    Ok(())
}

/// A near-data operation on the data chunks of one shard a drive holds
/// ([`Drive::run_op`]): the coordinator plans it once for the whole object and sends the
/// same plan to every data drive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpRequest {
    /// The bucket.
    pub bucket: String,
    /// The key of the erasure-coded extent: the object, or one part of a multipart object.
    pub key: String,
    /// The extent's version, which must be the one stored.
    pub version: VersionId,
    /// Object offset of the extent's first byte (0, or its part's place in the object).
    pub base: u64,
    /// The operation, planned for the whole object.
    pub plan: oed_ops::op::Plan,
    /// The stripes to fold (all when `None`).
    #[serde(default)]
    pub stripes: Option<Range<u64>>,
}

/// A drive's part of a near-data operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpAnswer {
    /// The shard (data chunk index) the drive holds.
    pub shard: u16,
    /// Partials of the chunks folded, in stripe order: one per chunk when the operation's
    /// merge depends on object order (checksums), one for all of them when it does not
    /// (statistics), keyed by the first stripe it covers.
    pub partials: Vec<StripePartial>,
    /// Stripes folded (from the first asked for): the rest, from the first chunk that
    /// failed its CRC32C, were not, and are the coordinator's to rebuild.
    pub stripes_done: u64,
    /// Bytes the drive read from its disk for it.
    pub bytes_read: u64,
    /// CPU time the drive spent on it, in seconds.
    pub cpu_seconds: f64,
    /// Energy the whole drive used while it ran, joules, from its meter; `None` when the
    /// drive has no power metering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_joules: Option<f64>,
    /// How that energy was had: "measured" or "modelled".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_method: Option<String>,
    /// Bytes the answer took on the network, as the client received it (0 from the
    /// coordinator's own drive); not sent.
    #[serde(skip)]
    pub wire_bytes: u64,
}

/// The partial of one stripe's chunk, or of a run of stripes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StripePartial {
    /// The first stripe it covers.
    pub stripe: u64,
    /// The partial.
    pub partial: oed_ops::op::Partial,
}

/// Most records one [`Drive::list_objects`] call returns, whatever the caller asks.
pub const MAX_LIST: usize = 1000;

/// The operations drives offer each other. Every method's errors are [`DriveError`]s;
/// [`ErrorCode::Unreachable`] means the drive could not be asked or its answer not read
/// (nothing is known about what it did then).
/// `call` to a drive, given at most `limit`: past it the drive counts as unreachable
/// ([`ErrorCode::Unreachable`], "timed out"), as when it cannot be asked at all. The one
/// way a caller bounds a drive operation.
///
/// # Errors
/// What `call` returns, or `Unreachable` past `limit`.
pub async fn within<T>(
    limit: std::time::Duration,
    call: impl std::future::Future<Output = Result<T, DriveError>>,
) -> Result<T, DriveError> {
    tokio::time::timeout(limit, call)
        .await
        .unwrap_or_else(|_| Err(DriveError::unreachable("timed out")))
}

#[async_trait::async_trait]
pub trait Drive: Send + Sync + std::fmt::Debug {
    /// Stores shard `record.shard_index` of an object durably. `body` is the shard file;
    /// with `tail`, a JSON record tail follows it whose fields complete the record. Its
    /// header must agree with `record` and every chunk's CRC32C must match.
    ///
    /// # Errors
    /// `BadRequest` (record, header), `NotFound` (bucket), `BadDigest`, `IncompleteBody`,
    /// `InvalidShard`, `EntityTooLarge`, `InsufficientStorage`, `Superseded` (a newer
    /// version is stored). Nothing is stored on any error.
    async fn put_shard(
        &self,
        record: &ObjectRecord,
        body: ShardUpload,
        tail: bool,
    ) -> Result<Stored, DriveError>;

    /// Reads stripes `stripes` (all when `None`; clipped to the shard's) of the stored
    /// shard of `bucket`/`key`, which must be at `version` when one is given.
    ///
    /// # Errors
    /// `NotFound` (no such object or version), `BadRequest` (a reversed range),
    /// `CorruptShard` (the first chunk is bad: queued for heal there).
    async fn read_shard(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
        stripes: Option<Range<u64>>,
    ) -> Result<ShardRead, DriveError>;

    /// The record of `bucket`/`key` held there, if any.
    ///
    /// # Errors
    /// When the drive cannot answer.
    async fn stat(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, DriveError>;

    /// Deletes the record and shard of `bucket`/`key`; with `version`, only when the
    /// stored version is not newer.
    ///
    /// # Errors
    /// `NotFound`, `Superseded`.
    async fn delete_object(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<(), DriveError>;

    /// Up to `limit` (at most [`MAX_LIST`]) records of `bucket` with keys `>= start`, in
    /// key order.
    ///
    /// # Errors
    /// `NotFound` when the drive has no such bucket.
    async fn list_objects(
        &self,
        bucket: &str,
        start: &str,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>, DriveError>;

    /// Creates a bucket record, or keeps the one there.
    ///
    /// # Errors
    /// `BadRequest` for an invalid name.
    async fn create_bucket(&self, name: &str) -> Result<BucketRecord, DriveError>;

    /// Deletes a bucket record that has no object records there.
    ///
    /// # Errors
    /// `NotFound`, `BucketNotEmpty`.
    async fn delete_bucket(&self, name: &str) -> Result<(), DriveError>;

    /// Every bucket record there, by name.
    ///
    /// # Errors
    /// When the drive cannot answer.
    async fn buckets(&self) -> Result<Vec<BucketRecord>, DriveError>;

    /// Capacity, counts, version and health.
    ///
    /// # Errors
    /// When the drive cannot answer.
    async fn info(&self) -> Result<DriveInfo, DriveError>;

    /// How far this drive's clock is ahead of the caller's (negative: behind), in ms, as
    /// far as its recent answers tell; `None` when they tell nothing (and for the
    /// caller's own drive, whose clock is its own).
    fn clock_offset_ms(&self) -> Option<i64> {
        None
    }

    /// Runs a near-data operation over the data chunks of the shard it holds of
    /// `req.key` at `req.version`, each chunk checked against its CRC32C as a read is, on
    /// a bounded pool of its own (waiting for a turn), within a CPU-time limit, and
    /// stopped when the caller goes away. A chunk that fails its check ends the fold
    /// there: the answer says how many stripes were done.
    ///
    /// # Errors
    /// `NotFound` (no such object or version), `BadRequest` (a parity shard, stripes out
    /// of range, a run the operation refuses, more CPU time than the drive allows).
    async fn run_op(&self, req: &OpRequest) -> Result<OpAnswer, DriveError>;

    /// Adds shards to the drive's persistent heal queue (its own shards, which it then
    /// rebuilds; or, when another drive's, held until that drive takes them). Returns how
    /// many were not queued already.
    ///
    /// # Errors
    /// `BadRequest` for more than [`MAX_BATCH`] entries.
    async fn queue_heals(&self, entries: &[HealEntry]) -> Result<usize, DriveError>;

    /// The version of each of `objects` held there (`None`: no record), in order: how
    /// holders of an object check each other's shards without reading them.
    ///
    /// # Errors
    /// `BadRequest` for more than [`MAX_BATCH`] objects.
    async fn versions(&self, objects: &[ObjectRef]) -> Result<Vec<Option<VersionId>>, DriveError>;

    /// A page of the records there that place a shard on drive `drive` (of the object,
    /// or of one of its parts), in key order after `after` (every bucket): what a
    /// replaced drive refills from, and what a drained one checks is left.
    ///
    /// # Errors
    /// When the drive cannot answer.
    async fn records_for(
        &self,
        drive: &str,
        after: Option<&ObjectRef>,
        limit: usize,
    ) -> Result<RecordPage, DriveError>;

    /// Updates the records there that name a moved shard's old drive (the object's own
    /// record at that version and, for a part, the part's entry in its object's record),
    /// each in one synced write. Returns, for each move, whether the records there now
    /// name the new drive (`false`: no record of that version there).
    ///
    /// # Errors
    /// `BadRequest` for more than [`MAX_BATCH`] moves.
    async fn relocate(&self, moves: &[Relocation]) -> Result<Vec<bool>, DriveError>;

    /// Settles client writes (see [`Settlement`]), each under its key's commit lock and
    /// in one synced write. Returns, for each, whether anything changed there (`false`:
    /// that version is neither current nor kept there, or nothing is kept).
    ///
    /// # Errors
    /// `BadRequest` for more than [`MAX_BATCH`] settlements.
    async fn settle(&self, settlements: &[Settlement]) -> Result<Vec<bool>, DriveError>;

    /// Makes the newest noncurrent version of `bucket`/`key` held there current when no
    /// version of the key is current there (a client deleted the current one), under the
    /// key's commit lock and in one synced write. Returns the version made current.
    ///
    /// # Errors
    /// When the drive cannot answer.
    async fn promote(&self, bucket: &str, key: &str) -> Result<Option<VersionId>, DriveError>;

    /// Applies each amendment to the record of its version held there, under the key's
    /// commit lock and in one synced write each. Returns, for each, whether the record
    /// there carries it now (`false`: no record of that version is there).
    ///
    /// # Errors
    /// `BadRequest` for more than [`MAX_BATCH`] amendments.
    async fn amend(&self, amendments: &[Amendment]) -> Result<Vec<bool>, DriveError>;

    /// The digest of the account table held there and how many entries it has.
    ///
    /// # Errors
    /// When the drive cannot answer.
    async fn account_digest(&self) -> Result<AccountDigest, DriveError>;

    /// When each access key last signed a request there (milliseconds since the epoch).
    ///
    /// # Errors
    /// When the drive cannot answer.
    async fn keys_used(&self) -> Result<std::collections::HashMap<String, u64>, DriveError>;

    /// Every entry of the account table held there, deleted keys included, as signed.
    ///
    /// # Errors
    /// When the drive cannot answer.
    async fn account_entries(&self) -> Result<Vec<SignedEntry>, DriveError>;

    /// Merges `entries` into the account table there (each taken when it is newer than
    /// the one of its name), stored before they are in force. Returns how many were taken.
    ///
    /// # Errors
    /// `BadRequest` for more than [`MAX_BATCH`] entries or one not signed with the
    /// cluster's key (then none is taken); `ServiceUnavailable` while the drive's table is
    /// not open yet.
    async fn merge_accounts(&self, entries: &[SignedEntry]) -> Result<usize, DriveError>;
}
