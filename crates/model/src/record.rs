//! What the metadata store keeps: bucket and object records, their keys, and the checks
//! on names that come from clients (bucket names, object keys).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};

/// The first character of the cluster's own keys.
pub const INTERNAL_PREFIX: char = '\u{1}';
/// Where clients' keys start in a listing: after every internal key.
pub const USER_KEYS_START: &str = "\u{2}";

/// An object version id: 128 bits, compared as a number; larger is newer. Coordinators
/// make them from the time in the high bits and randomness in the low bits, so
/// concurrent writes of one key resolve to the same winner on every drive. A write's
/// final id is made when its body has ended (it reaches the drives in the
/// [`RecordTail`]), so of two writes of one key the one that completes last wins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VersionId(pub u128);

impl VersionId {
    /// A new id: milliseconds since the epoch in the top 64 bits, random low bits. Ids
    /// made by one process only grow, even within a millisecond or when the clock steps
    /// back: of two writes this coordinator completes, the later one has the larger id.
    #[must_use]
    pub fn generate() -> Self {
        Self::generate_corrected(0)
    }

    /// [`VersionId::generate`] at this clock's time plus `correction_ms`: the time of the
    /// other drives, when this one's clock is known to be off by `-correction_ms`. Ids
    /// still only grow: after ids made ahead (before the correction was known), the next
    /// ones follow them until the corrected time passes them, so that no later write of
    /// this coordinator gets an older id than an earlier one.
    #[must_use]
    pub fn generate_corrected(correction_ms: i64) -> Self {
        static LAST: std::sync::Mutex<u128> = std::sync::Mutex::new(0);
        let ms = now_ms().saturating_add_signed(correction_ms);
        let fresh = (u128::from(ms) << 64) | u128::from(rand::random::<u64>());
        let mut last = LAST
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *last = fresh.max(*last + 1);
        Self(*last)
    }

    /// The milliseconds since the epoch it was made at.
    #[must_use]
    pub fn millis(self) -> u64 {
        (self.0 >> 64) as u64
    }
}

impl fmt::Display for VersionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl std::str::FromStr for VersionId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        if s.len() != 32 {
            return Err(Error::BadRequest(format!(
                "version id {s:?} is not 32 hex digits"
            )));
        }
        u128::from_str_radix(s, 16)
            .map(VersionId)
            .map_err(|_| Error::BadRequest(format!("version id {s:?} is not 32 hex digits")))
    }
}

impl Serialize for VersionId {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for VersionId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The number of a shard file on one drive: the file is `shards/n/<dir>/<number>.shard`
/// ([`oed_store::Store`]), chosen by that drive when the upload begins. Written as 16
/// hex digits. Only the drive that holds the file uses it; a drive storing a record
/// sent by another sets its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId(pub u64);

impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl Serialize for FileId {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for FileId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.len() != 16 {
            return Err(serde::de::Error::custom(format!(
                "file number {s:?} is not 16 hex digits"
            )));
        }
        u64::from_str_radix(&s, 16).map(FileId).map_err(|_| {
            serde::de::Error::custom(format!("file number {s:?} is not 16 hex digits"))
        })
    }
}

/// A bucket as every drive records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    /// The bucket's name.
    pub name: String,
    /// Creation time, milliseconds since the epoch.
    pub created_ms: u64,
}

/// An object version as each drive holding one of its shards records it. The default is
/// empty and invalid (k = 0): a base for records that set the fields they need.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRecord {
    /// Bucket name.
    pub bucket: String,
    /// Object key.
    pub key: String,
    /// This version.
    pub version_id: VersionId,
    /// Object length in bytes.
    pub size: u64,
    /// The S3 `ETag`, as clients see it.
    #[serde(default)]
    pub etag: String,
    /// Content type given at upload.
    #[serde(default)]
    pub content_type: Option<String>,
    /// User metadata (`x-amz-meta-*`), names lower-cased.
    #[serde(default)]
    pub user_meta: BTreeMap<String, String>,
    /// Last-modified time, milliseconds since the epoch.
    #[serde(default)]
    pub last_modified_ms: u64,
    /// Data shards.
    pub k: u16,
    /// Parity shards.
    pub m: u16,
    /// Chunk size in bytes.
    pub chunk_size: u32,
    /// Drive ids holding shards 0..k+m, in shard order (fixed at write time).
    #[serde(default)]
    pub drives: Vec<String>,
    /// The shard this drive holds.
    pub shard_index: u16,
    /// For an object assembled by a multipart upload: its parts, in order. The object's
    /// own shards then hold no data (`size` is 0) and [`ObjectRecord::object_size`] is the
    /// sum of the parts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartRef>,
    /// The S3 checksum the client asked for (`x-amz-checksum-*`), when it asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<StoredChecksum>,
    /// For a part of a multipart upload: the key of the object it is uploaded to, whose
    /// record lists the part's drives too (updated with it when a shard moves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The standard headers stored with the object and returned on GET and HEAD
    /// (`cache-control`, `content-disposition`, `content-encoding`, `content-language`,
    /// `expires`), by lower-case name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// This drive's shard file of the version, when it is a numbered one; `None` for a
    /// shard stored inline, and for a file written by a version before numbered files,
    /// which is found at a path hashed from the bucket, key, version and shard index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileId>,
    /// Whether clients name this version by its own id: written while the bucket's
    /// versioning was enabled. Otherwise it is S3's `null` version (every version of a
    /// bucket that never had versioning, and those written while it was suspended).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub versioned: bool,
    /// Whether this version is a delete marker: no data (`size` 0), and a key whose
    /// current version it is reads as deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete_marker: bool,
    /// Its tags (S3 object tagging): set by the write, changed since by
    /// [`Amendment`](crate::drive::Amendment)s, which keep the version.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// When its tags were last changed after the write (the id of that change); zero:
    /// as written. Of two records of one version, the one changed later is right.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tags_changed: VersionId,
    /// Its retention (S3 object lock): until when, and in which mode, no key may delete
    /// it. Set by the write, changed since by [`Amendment`](crate::drive::Amendment)s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    /// When its retention was last changed after the write (zero: as written).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retention_changed: VersionId,
    /// Whether a legal hold is on it (S3 object lock): no key may delete it until the
    /// hold is taken off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub legal_hold: bool,
    /// When its legal hold was last changed after the write (zero: as written).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub legal_hold_changed: VersionId,
}

/// How a version's retention may be undone (S3 object lock modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockMode {
    /// A key with the bucket's `owner` right may shorten or remove it, saying so
    /// (`x-amz-bypass-governance-retention: true`).
    Governance,
    /// Nobody may shorten or remove it, nor delete the version, until its date.
    Compliance,
}

/// A version's retention: its mode and the time until which it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// The mode.
    pub mode: LockMode,
    /// Until when, milliseconds since the epoch.
    pub until_ms: u64,
}

impl ObjectRecord {
    /// Whether object lock keeps this version from being deleted at `now_ms`: a legal
    /// hold, or a retention date not yet reached. `Some(mode)` for a retention (the hold
    /// is `None` inside: no mode lifts it).
    #[must_use]
    pub fn locked(&self, now_ms: u64) -> Option<Option<LockMode>> {
        if self.legal_hold {
            return Some(None);
        }
        self.retention
            .filter(|r| r.until_ms > now_ms)
            .map(|r| Some(r.mode))
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if takes a reference
fn is_zero(v: &VersionId) -> bool {
    v.0 == 0
}

/// An object's or a part's S3 checksum, as it is returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredChecksum {
    /// The algorithm.
    pub algorithm: oed_ops::s3sum::Algorithm,
    /// The digest in base64; a composite one ends in `-N` (N parts).
    pub value: String,
    /// Whether it is the checksum of the whole object's bytes (S3's `FULL_OBJECT`), or
    /// of its parts' checksums (`COMPOSITE`).
    pub full_object: bool,
}

/// One part of a multipart object: an erasure-coded object of its own, under an internal
/// key, read in place when the whole object is read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRef {
    /// Part number the client gave (1..=10000).
    pub number: u32,
    /// The part object's internal key.
    pub key: String,
    /// The part object's version.
    pub version_id: VersionId,
    /// Bytes in the part.
    pub size: u64,
    /// The part's `ETag` (hex, no quotes).
    pub etag: String,
    /// Data shards.
    pub k: u16,
    /// Parity shards.
    pub m: u16,
    /// Chunk size.
    pub chunk_size: u32,
    /// Drives holding the part's shards, in shard order.
    pub drives: Vec<String>,
    /// The part's S3 checksum, when its upload had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<StoredChecksum>,
}

impl PartRef {
    /// `record`'s object as part `number` of another.
    #[must_use]
    pub fn of(number: u32, record: &ObjectRecord) -> Self {
        Self {
            number,
            key: record.key.clone(),
            version_id: record.version_id,
            size: record.size,
            etag: record.etag.clone(),
            k: record.k,
            m: record.m,
            chunk_size: record.chunk_size,
            drives: record.drives.clone(),
            checksum: record.checksum.clone(),
        }
    }
}

/// Fields of a record that are known only once the whole body has been received (the
/// `ETag` is a digest of it). A shard upload may carry them after the shard file; they
/// are applied before the record is committed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordTail {
    /// The object's `ETag`.
    pub etag: String,
    /// The parts of a multipart object (too many for the request line).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartRef>,
    /// The object's S3 checksum, computed over the body as it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<StoredChecksum>,
    /// The version's final id, made when the body ended; it replaces the id the upload
    /// began with (in the record and in the shard file's header), and its time is the
    /// object's Last-Modified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<VersionId>,
    /// The condition the client's write is made on, checked by the drive as it commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<WriteCondition>,
}

/// A condition a client write is made on (S3's `If-None-Match: *` and `If-Match` on
/// `PutObject` and `CompleteMultipartUpload`), checked by every drive as it commits its shard,
/// under the key's commit lock: of two conditional writes of one key, each drive commits
/// the first to arrive and refuses the other, so at most one reaches a write quorum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteCondition {
    /// No version of the key is stored (`If-None-Match: *`); a delete marker counts as
    /// none (the drive passes `None` for it to [`WriteCondition::holds`]).
    Absent,
    /// The version stored is this one, whose `ETag` the client named (`If-Match`), or
    /// an older one (a drive that missed it); none, or a newer one, fails.
    Current(VersionId),
}

impl WriteCondition {
    /// Whether a drive holding `stored` (the key's version there, if any) may commit.
    #[must_use]
    pub fn holds(self, stored: Option<VersionId>) -> bool {
        match (self, stored) {
            (Self::Absent, stored) => stored.is_none(),
            (Self::Current(_), None) => false,
            (Self::Current(v), Some(s)) => s <= v,
        }
    }

    /// What a failure says.
    #[must_use]
    pub fn failure(self) -> &'static str {
        match self {
            Self::Absent => "If-None-Match: * and the key exists",
            Self::Current(_) => "If-Match: the object's ETag is another one now",
        }
    }
}

/// Where the versions of a key that are no longer current are kept: under an internal key
/// of their own each (`\u{1}v/`, the key, `\u{1}`, the version id subtracted from the
/// largest, in hex), so that they are erasure-coded objects like any other (healed,
/// scrubbed, drained and moved alike), placed where their key is
/// ([`placement_key`]), and listed after one another newest first.
pub const VERSIONS_PREFIX: &str = "\u{1}v/";

/// The internal key under which version `v` of `key` is kept once it is not current.
#[must_use]
pub fn version_key(key: &str, v: VersionId) -> String {
    format!("{VERSIONS_PREFIX}{key}\u{1}{:032x}", u128::MAX - v.0)
}

/// What every [`version_key`] of `key` starts with.
#[must_use]
pub fn versions_of(key: &str) -> String {
    format!("{VERSIONS_PREFIX}{key}\u{1}")
}

/// The client's key and the version of a [`version_key`]; `None` for any other key.
#[must_use]
pub fn parse_version_key(internal: &str) -> Option<(&str, VersionId)> {
    let rest = internal.strip_prefix(VERSIONS_PREFIX)?;
    let (key, inverted) = rest.rsplit_once('\u{1}')?;
    if inverted.len() != 32 {
        return None;
    }
    let inverted = u128::from_str_radix(inverted, 16).ok()?;
    Some((key, VersionId(u128::MAX - inverted)))
}

/// The key an object is placed by: a kept version's is its key's, so that it stays on
/// the drives that held it when it was current.
#[must_use]
pub fn placement_key(key: &str) -> &str {
    parse_version_key(key).map_or(key, |(k, _)| k)
}

/// Largest accepted [`RecordTail`], encoded: room for 10,000 parts.
pub const MAX_TAIL_BYTES: usize = 4 << 20;

/// The largest object S3 stores, and so the largest a record may describe: 5 TiB.
pub const MAX_OBJECT_BYTES: u64 = 5 << 40;

impl ObjectRecord {
    /// The object's length as clients see it: `size`, or the sum of the parts (which
    /// [`ObjectRecord::validate`] keeps within [`MAX_OBJECT_BYTES`]; a damaged record's
    /// sum stops at `u64::MAX` rather than wrap).
    #[must_use]
    pub fn object_size(&self) -> u64 {
        if self.parts.is_empty() {
            self.size
        } else {
            self.parts
                .iter()
                .fold(0, |sum, p| sum.saturating_add(p.size))
        }
    }

    /// The client's key of this version (for a version kept under [`version_key`], the
    /// key it was written to).
    #[must_use]
    pub fn user_key(&self) -> &str {
        placement_key(&self.key)
    }

    /// The version id as S3 clients see it: `null`, or the id in hex.
    #[must_use]
    pub fn s3_version_id(&self) -> String {
        if self.versioned {
            self.version_id.to_string()
        } else {
            "null".to_owned()
        }
    }

    /// This version's record as it is kept once another is current: under
    /// [`version_key`].
    #[must_use]
    pub fn as_noncurrent(&self) -> Self {
        Self {
            key: version_key(self.user_key(), self.version_id),
            ..self.clone()
        }
    }

    /// Whether, when `successor` replaces this version as current, this one is kept as a
    /// noncurrent version: when either is a version of its own (S3 drops only a `null`
    /// version replaced by a `null` one), and never for the cluster's own keys.
    #[must_use]
    pub fn kept_when_replaced_by(&self, successor: &Self) -> bool {
        (self.versioned || successor.versioned)
            && self.version_id < successor.version_id
            && !self.key.starts_with(INTERNAL_PREFIX)
    }

    /// The erasure-coding layout of the object.
    ///
    /// # Errors
    /// [`Error::BadRequest`] when k, m or the chunk size are out of range.
    pub fn layout(&self) -> Result<oed_ec::Layout> {
        oed_ec::Layout::new(self.k.into(), self.m.into(), self.chunk_size)
            .map_err(|e| Error::BadRequest(format!("record: {e}")))
    }

    /// The chunk bytes of one shard of the object (without the file's header); 0 for a
    /// record whose layout is out of range.
    #[must_use]
    pub fn shard_bytes(&self) -> u64 {
        self.layout().map_or(0, |l| l.shard_data_len(self.size))
    }

    /// The header of the shard file this record describes: its version, shard index,
    /// layout and object length.
    ///
    /// # Errors
    /// [`Error::BadRequest`] when the layout is out of range, [`Error::Shard`] when the
    /// shard index or the object's length does not fit it.
    pub fn shard_header(&self) -> Result<oed_ec::ShardHeader> {
        Ok(oed_ec::ShardHeader::new(
            self.version_id.0,
            self.shard_index,
            self.layout()?,
            self.size,
        )?)
    }

    /// Checks the names and the shard index.
    ///
    /// # Errors
    /// [`Error::BadRequest`] saying which part is wrong.
    pub fn validate(&self) -> Result<()> {
        check_bucket_name(&self.bucket)?;
        check_key(&self.key)?;
        let layout = self.layout()?;
        if usize::from(self.shard_index) >= layout.total() {
            return Err(Error::BadRequest(format!(
                "shard_index {} is not below k + m = {}",
                self.shard_index,
                layout.total()
            )));
        }
        if !self.drives.is_empty() && self.drives.len() != layout.total() {
            return Err(Error::BadRequest(format!(
                "drives lists {} drives, k + m is {}",
                self.drives.len(),
                layout.total()
            )));
        }
        if self.object_size() > MAX_OBJECT_BYTES {
            return Err(Error::BadRequest(format!(
                "the object's size {} is over 5 TiB",
                self.object_size()
            )));
        }
        Ok(())
    }
}

/// S3's bucket naming rules: 3-63 characters of lower-case letters, digits, '.' and '-',
/// starting and ending with a letter or digit.
///
/// # Errors
/// [`Error::BadRequest`] naming the rule broken.
pub fn check_bucket_name(name: &str) -> Result<()> {
    let ok_len = (3..=63).contains(&name.len());
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    let ok_ends = name
        .bytes()
        .next()
        .zip(name.bytes().last())
        .is_some_and(|(a, z)| a.is_ascii_alphanumeric() && z.is_ascii_alphanumeric());
    if ok_len && ok_chars && ok_ends {
        Ok(())
    } else {
        Err(Error::BadRequest(format!(
            "invalid bucket name {name:?}: use 3-63 lower-case letters, digits, '.' or '-', \
             starting and ending with a letter or digit"
        )))
    }
}

/// The longest key a client may name, as S3's.
pub const MAX_KEY: usize = 1024;

/// How much longer than [`MAX_KEY`] the cluster's own keys ([`INTERNAL_PREFIX`]) may be:
/// an upload's record is kept under its object's key with a prefix and the upload id
/// around it, and must fit for a key of the longest length.
pub const INTERNAL_KEY_EXTRA: usize = 128;

/// Object keys: 1 to [`MAX_KEY`] bytes of UTF-8 without NUL (NUL separates bucket and key
/// in the metadata store's keys); the cluster's own keys up to [`INTERNAL_KEY_EXTRA`]
/// more.
///
/// # Errors
/// [`Error::BadRequest`] naming the rule broken.
pub fn check_key(key: &str) -> Result<()> {
    let max = if key.starts_with(INTERNAL_PREFIX) {
        MAX_KEY + INTERNAL_KEY_EXTRA
    } else {
        MAX_KEY
    };
    if key.is_empty() || key.len() > max {
        return Err(Error::BadRequest(format!(
            "object key is {} bytes long; keys are 1 to {max} bytes",
            key.len()
        )));
    }
    if key.contains('\0') {
        return Err(Error::BadRequest(
            "object key contains a NUL character".into(),
        ));
    }
    Ok(())
}

/// The metadata store key of an object: bucket, NUL, key. Sorts by bucket then key.
#[must_use]
pub fn object_key(bucket: &str, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(bucket.len() + 1 + key.len());
    k.extend_from_slice(bucket.as_bytes());
    k.push(0);
    k.extend_from_slice(key.as_bytes());
    k
}

/// The civil date (year, month 1-12, day 1-31) of `days` since 1970-01-01, in the
/// proleptic Gregorian calendar (Howard Hinnant's `civil_from_days`).
#[must_use]
pub fn civil_date(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Milliseconds since the epoch.
#[must_use]
pub fn now_ms() -> u64 {
    oed_meter::wall_ms()
}

/// A record of shard 0 of `bkt`/`key` with k = 2, m = 1 and 4 KiB chunks, for tests (and
/// the fuzz entry points).
#[doc(hidden)]
#[must_use]
pub fn test_record(key: &str, version: u128, size: u64) -> ObjectRecord {
    ObjectRecord {
        parent: None,
        headers: BTreeMap::default(),
        bucket: "bkt".into(),
        key: key.into(),
        version_id: VersionId(version),
        size,
        k: 2,
        m: 1,
        chunk_size: 4096,
        ..ObjectRecord::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_s3s_length_and_the_clusters_own_a_little_longer() {
        check_key(&"k".repeat(MAX_KEY)).unwrap();
        assert!(check_key(&"k".repeat(MAX_KEY + 1)).is_err());
        assert!(check_key("").is_err());
        // An upload's record: prefix, the longest key, separator, upload id.
        let upload = format!("\u{1}u/{}\u{1}{}", "k".repeat(MAX_KEY), "f".repeat(32));
        check_key(&upload).unwrap();
        assert!(
            check_key(&format!(
                "\u{1}{}",
                "k".repeat(MAX_KEY + INTERNAL_KEY_EXTRA)
            ))
            .is_err()
        );
    }

    #[test]
    fn names_follow_s3_rules() {
        for good in ["abc", "my-bucket.1", &"a".repeat(63)] {
            check_bucket_name(good).unwrap();
        }
        for bad in [
            "ab",
            "Abc",
            "-abc",
            "abc-",
            "a_b",
            "a/b",
            "..",
            &"a".repeat(64),
        ] {
            assert!(check_bucket_name(bad).is_err(), "{bad}");
        }
        check_key("../x/ü//").unwrap();
        assert!(check_key("").is_err());
        assert!(check_key("a\0b").is_err());
        assert!(check_key(&"k".repeat(1025)).is_err());
    }

    #[test]
    fn version_ids_order_and_round_trip() {
        let a = VersionId::generate();
        let s = a.to_string();
        assert_eq!(s.parse::<VersionId>().unwrap(), a);
        assert!(VersionId(1) < VersionId(2));
        // Ids made one after another only grow, however fast they are made.
        let ids: Vec<VersionId> = (0..10_000).map(|_| VersionId::generate()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]) && a < ids[0]);
        assert!(ids[0].millis() > 1_700_000_000_000);
        assert!("xyz".parse::<VersionId>().is_err());
    }

    #[test]
    fn corrected_ids_follow_the_corrected_time_and_still_only_grow() {
        let a = VersionId::generate();
        // Behind: the id follows the last one, never an older time.
        let behind = VersionId::generate_corrected(-3_600_000);
        assert!(behind > a);
        // Ahead: the corrected time.
        let ahead = VersionId::generate_corrected(5_000).millis();
        let now = now_ms();
        assert!(
            ahead >= now + 4_000 && ahead <= now + 6_000,
            "{ahead} {now}"
        );
        assert!(VersionId::generate() > VersionId(u128::from(ahead) << 64));
    }

    #[test]
    fn version_keys_sort_newest_first_and_name_their_key() {
        let (a, b) = (VersionId(5 << 64), VersionId(6 << 64));
        assert!(version_key("k", b) < version_key("k", a));
        assert!(version_key("k", a).starts_with(&versions_of("k")));
        assert_eq!(
            parse_version_key(&version_key("k/\u{1}x", a)),
            Some(("k/\u{1}x", a))
        );
        assert_eq!(placement_key(&version_key("k", a)), "k");
        assert_eq!(placement_key("k"), "k");
        assert_eq!(parse_version_key("\u{1}u/k\u{1}abc"), None);
        check_key(&version_key(&"k".repeat(MAX_KEY), a)).unwrap();
        let mut r = test_record("k", 1, 0);
        assert_eq!(r.s3_version_id(), "null");
        r.versioned = true;
        assert_eq!(r.as_noncurrent().user_key(), "k");
        assert!(r.kept_when_replaced_by(&test_record("k", 2, 0)));
        assert!(!test_record("k", 1, 0).kept_when_replaced_by(&test_record("k", 2, 0)));
    }

    #[test]
    fn a_record_names_its_shard_header() {
        let mut r = test_record("k", 7, 10_000);
        r.shard_index = 2;
        let h = r.shard_header().unwrap();
        let want = oed_ec::ShardHeader::new(7, 2, r.layout().unwrap(), 10_000).unwrap();
        assert_eq!(h.encode(), want.encode());
        r.shard_index = 3;
        assert!(matches!(r.shard_header(), Err(Error::Shard(_))));
        r.shard_index = 0;
        r.k = 0;
        assert!(matches!(r.shard_header(), Err(Error::BadRequest(_))));
    }
}
