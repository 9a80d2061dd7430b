//! The drive's metadata: one RocksDB with a column family per kind of record. Every
//! write that acknowledges something to a peer is a synced write (unless the fsync policy
//! is "never"). Memory is bounded by the block cache and two memtables (see `Config`).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DB, Direction, IteratorMode, Options,
    WriteBatch, WriteOptions,
};

use oed_model::account::SignedEntry;
use oed_model::config::{Config, FsyncPolicy};
use oed_model::error::{Error, Result};
use oed_model::heal::{HealCause, HealEntry};
use oed_model::record::{BucketRecord, ObjectRecord, VersionId, object_key, versions_of};

const BUCKETS: &str = "buckets";
const OBJECTS: &str = "objects";
const INLINE: &str = "inline";
const MULTIPART: &str = "multipart";
/// The heal queue of the earlier format (one entry per object); moved into [`QUEUE`] at open.
pub(crate) const HEAL_LEGACY: &str = "heal";
/// The heal queue ([`super::queue`]).
pub(crate) const QUEUE: &str = "heal_queue";
/// The drive's own state: scrub progress, refill progress.
const STATE: &str = "state";
/// Versions a client write replaced, kept until that write is settled ([`Kept`]).
const KEPT: &str = "kept";
/// Where the account table's entries are kept, by name (`oed_model::account`): in the
/// [`STATE`] family under this prefix, not a family of their own, so that a drive rolled
/// back to a version without accounts still opens its database.
const ACCOUNTS_PREFIX: &str = "account/";

/// Where the time each access key was last used on this drive is kept, by key id.
pub const KEY_USED_PREFIX: &str = "keyused/";
const FAMILIES: [&str; 8] = [
    BUCKETS,
    OBJECTS,
    INLINE,
    MULTIPART,
    HEAL_LEGACY,
    QUEUE,
    STATE,
    KEPT,
];

/// The version of a key that a client write replaced here, kept (record, and its shard
/// bytes when they were stored inline; a shard file stays where it was) until that write
/// is settled: dropped once it is known to have reached its write quorum, put back if it
/// failed. At most one per key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// The replaced version's record.
    pub record: ObjectRecord,
    /// Its shard bytes, when they were stored inline.
    pub inline: Option<Vec<u8>>,
}

impl Kept {
    /// Stored as the record's JSON length (4 bytes, little-endian), the JSON, then the
    /// inline bytes if any.
    fn encode(&self) -> Result<Vec<u8>> {
        let json = serde_json::to_vec(&self.record)?;
        let inline = self.inline.as_deref().unwrap_or_default();
        let mut v = Vec::with_capacity(4 + json.len() + inline.len());
        v.extend_from_slice(&(json.len() as u32).to_le_bytes());
        v.extend_from_slice(&json);
        v.extend_from_slice(inline);
        Ok(v)
    }

    /// Reads what [`Kept::encode`] stored.
    ///
    /// # Errors
    /// [`Error::Record`] when the bytes are not such a value.
    pub fn decode(v: &[u8]) -> Result<Self> {
        let bad = || {
            Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a kept version's entry is damaged",
            ))
        };
        let (len, rest) = v.split_at_checked(4).ok_or_else(bad)?;
        let len = u32::from_le_bytes(len.try_into().map_err(|_| bad())?) as usize;
        let (json, inline) = rest.split_at_checked(len).ok_or_else(bad)?;
        Ok(Self {
            record: serde_json::from_slice(json)?,
            inline: (!inline.is_empty()).then(|| inline.to_vec()),
        })
    }
}

/// The RocksDB of one drive.
pub struct MetaStore {
    pub(crate) db: DB,
    sync: bool,
    /// This drive's id: the heal queue tells its own shards from other drives'.
    pub(crate) drive_id: String,
    objects: AtomicU64,
    checksum_failures: AtomicU64,
    /// The heal queue's counts; held while the queue changes, so that reading an entry
    /// and changing it are one step for them.
    pub(crate) heal_lock: std::sync::Mutex<Counts>,
}

impl std::fmt::Debug for MetaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaStore")
            .field("path", &self.db.path())
            .finish_non_exhaustive()
    }
}

impl MetaStore {
    /// Opens (creating if needed) the database at `path`.
    ///
    /// # Errors
    /// [`Error::Meta`] when RocksDB cannot open it (another process holds its lock, the
    /// files are damaged, the disk is unreadable).
    pub fn open(path: &Path, config: &Config) -> Result<Self> {
        let cache = Cache::new_lru_cache(config.rocksdb_block_cache_bytes);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_cache_index_and_filter_blocks(true);
        let mut cf_opts = Options::default();
        cf_opts.set_block_based_table_factory(&table);
        cf_opts.set_write_buffer_size(config.rocksdb_write_buffer_bytes / FAMILIES.len());
        cf_opts.set_max_write_buffer_number(2);
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        // One budget for all memtables, so the total stays within the configured limit.
        db_opts.set_db_write_buffer_size(2 * config.rocksdb_write_buffer_bytes);
        db_opts.set_max_background_jobs(2);
        db_opts.set_keep_log_file_num(4);
        db_opts.set_max_total_wal_size(4 * config.rocksdb_write_buffer_bytes as u64);
        let cfs = FAMILIES
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(*name, cf_opts.clone()));
        let db = DB::open_cf_descriptors(&db_opts, path, cfs).map_err(crate::meta_error)?;
        let store = Self {
            db,
            sync: config.fsync == FsyncPolicy::Always,
            drive_id: config.drive_id.clone(),
            objects: AtomicU64::new(0),
            checksum_failures: AtomicU64::new(0),
            heal_lock: std::sync::Mutex::default(),
        };
        let n = store
            .db
            .iterator_cf(store.cf(OBJECTS), IteratorMode::Start)
            .count();
        store.objects.store(n as u64, Ordering::Relaxed);
        store.open_queue()?;
        Ok(store)
    }

    pub(crate) fn cf(&self, name: &str) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("every column family is created at open")
    }

    /// Every write of this store. A synced one waits for its WAL to reach the disk; it does
    /// so without holding up the runtime's other requests: on a multi-threaded runtime the
    /// worker first hands its queue to another thread. Concurrent writers then also reach
    /// RocksDB together, which syncs their WAL records at once.
    pub(crate) fn write(&self, batch: WriteBatch) -> Result<()> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let mut opts = WriteOptions::default();
        opts.set_sync(self.sync);
        let write = || self.db.write_opt(batch, &opts);
        match Handle::try_current() {
            Ok(h) if self.sync && h.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(write)
            }
            _ => write(),
        }
        .map_err(crate::meta_error)?;
        Ok(())
    }

    /// Object records held here.
    #[must_use]
    pub fn object_count(&self) -> u64 {
        self.objects.load(Ordering::Relaxed)
    }

    /// A bucket's record.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn bucket(&self, name: &str) -> Result<Option<BucketRecord>> {
        self.db
            .get_pinned_cf(self.cf(BUCKETS), name)
            .map_err(crate::meta_error)?
            .map(|v| serde_json::from_slice(&v).map_err(Error::from))
            .transpose()
    }

    /// Creates a bucket record, or keeps the existing one (creating twice is not an error).
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn put_bucket(&self, record: &BucketRecord) -> Result<BucketRecord> {
        if let Some(existing) = self.bucket(&record.name)? {
            return Ok(existing);
        }
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(BUCKETS), &record.name, serde_json::to_vec(record)?);
        self.write(batch)?;
        Ok(record.clone())
    }

    /// Deletes a bucket record if no object record of it is held here.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::BucketNotEmpty`], [`Error::Meta`].
    pub fn delete_bucket(&self, name: &str) -> Result<()> {
        if self.bucket(name)?.is_none() {
            return Err(Error::NotFound(oed_model::error::Missing::Bucket));
        }
        if !self.list_objects(name, "", 1)?.is_empty() {
            return Err(Error::BucketNotEmpty);
        }
        let mut batch = WriteBatch::default();
        batch.delete_cf(self.cf(BUCKETS), name);
        self.write(batch)
    }

    /// Every bucket record, by name.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn buckets(&self) -> Result<Vec<BucketRecord>> {
        self.db
            .iterator_cf(self.cf(BUCKETS), IteratorMode::Start)
            .map(|kv| Ok(serde_json::from_slice(&kv.map_err(crate::meta_error)?.1)?))
            .collect()
    }

    /// The object record of `bucket`/`key`.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn object(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        self.db
            .get_pinned_cf(self.cf(OBJECTS), object_key(bucket, key))
            .map_err(crate::meta_error)?
            .map(|v| serde_json::from_slice(&v).map_err(Error::from))
            .transpose()
    }

    /// The inline shard bytes of a record stored inline.
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn inline_shard(
        &self,
        bucket: &str,
        key: &str,
        version: VersionId,
    ) -> Result<Option<Vec<u8>>> {
        let v = self
            .db
            .get_cf(self.cf(INLINE), object_key(bucket, key))
            .map_err(crate::meta_error)?;
        Ok(v.and_then(|v| {
            let (id, data) = v.split_at_checked(16)?;
            (u128::from_le_bytes(id.try_into().ok()?) == version.0).then(|| data.to_vec())
        }))
    }

    /// Stores `record` (replacing the key's previous record) and, for a small shard, its
    /// bytes, in one synced batch: both become visible together or not at all. The
    /// key's kept version becomes `keep`, or is dropped. The version it replaces is
    /// stored as `noncurrent` (under its version key, with its inline bytes) when it is
    /// kept as a noncurrent version; `new_noncurrent` says whether that key held no
    /// record before.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`]; nothing is changed then.
    pub fn commit_object(
        &self,
        record: &ObjectRecord,
        previous: Option<&ObjectRecord>,
        inline: Option<&[u8]>,
        keep: Option<&Kept>,
        noncurrent: Option<(&Kept, bool)>,
    ) -> Result<()> {
        let key = object_key(&record.bucket, &record.key);
        let mut batch = WriteBatch::default();
        match keep {
            Some(k) => batch.put_cf(self.cf(KEPT), &key, k.encode()?),
            None => batch.delete_cf(self.cf(KEPT), &key),
        }
        self.put_record(&mut batch, &key, record, inline)?;
        if let Some((n, _)) = noncurrent {
            let r = &n.record;
            self.put_record(
                &mut batch,
                &object_key(&r.bucket, &r.key),
                r,
                n.inline.as_deref(),
            )?;
        }
        self.write(batch)?;
        let added =
            u64::from(previous.is_none()) + u64::from(noncurrent.is_some_and(|(_, new)| new));
        self.objects.fetch_add(added, Ordering::Relaxed);
        Ok(())
    }

    /// Makes the newest noncurrent version of `bucket`/`key` held here current again
    /// (record and inline bytes move back to the key), in one synced batch, when the key
    /// has no current record here. Returns the record made current.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn promote(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        if self.object(bucket, key)?.is_some() {
            return Ok(None);
        }
        let from = object_key(bucket, &versions_of(key));
        let mut newest = None;
        for kv in self.db.iterator_cf(
            self.cf(OBJECTS),
            IteratorMode::From(&from, Direction::Forward),
        ) {
            let (k, v) = kv.map_err(crate::meta_error)?;
            if !k.starts_with(&from) {
                break;
            }
            let record: ObjectRecord = serde_json::from_slice(&v)?;
            // A longer key whose next character is U+0001 shares the prefix.
            if record.user_key() == key {
                newest = Some((k, record));
                break;
            }
        }
        let Some((k, mut record)) = newest else {
            return Ok(None);
        };
        let inline = self.inline_shard(bucket, &record.key, record.version_id)?;
        key.clone_into(&mut record.key);
        let mut batch = WriteBatch::default();
        batch.delete_cf(self.cf(OBJECTS), &k);
        batch.delete_cf(self.cf(INLINE), &k);
        self.put_record(
            &mut batch,
            &object_key(bucket, key),
            &record,
            inline.as_deref(),
        )?;
        self.write(batch)?;
        Ok(Some(record))
    }

    /// Replaces the record of `bucket`/`key` (its inline bytes, if any, stay), in one
    /// synced write. For changes that keep the version: [`MetaStore::commit_object`]
    /// stores a new one.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn rewrite_record(&self, record: &ObjectRecord) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put_cf(
            self.cf(OBJECTS),
            object_key(&record.bucket, &record.key),
            serde_json::to_vec(record)?,
        );
        self.write(batch)
    }

    /// The version of `bucket`/`key` kept here, if any.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn kept(&self, bucket: &str, key: &str) -> Result<Option<Kept>> {
        self.db
            .get_pinned_cf(self.cf(KEPT), object_key(bucket, key))
            .map_err(crate::meta_error)?
            .map(|v| Kept::decode(&v))
            .transpose()
    }

    /// Makes the kept version of its key current again (record and inline bytes), in one
    /// synced batch, replacing the current record; its copy as a noncurrent version, if
    /// the write stored one, goes.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn restore_kept(&self, kept: &Kept) -> Result<()> {
        let r = &kept.record;
        let key = object_key(&r.bucket, &r.key);
        let mut batch = WriteBatch::default();
        self.put_record(&mut batch, &key, r, kept.inline.as_deref())?;
        batch.delete_cf(self.cf(KEPT), &key);
        let noncurrent = r.as_noncurrent();
        let archived = self
            .object(&r.bucket, &noncurrent.key)?
            .is_some_and(|n| n.version_id == r.version_id);
        if archived {
            let k = object_key(&r.bucket, &noncurrent.key);
            batch.delete_cf(self.cf(OBJECTS), &k);
            batch.delete_cf(self.cf(INLINE), &k);
        }
        self.write(batch)?;
        if archived {
            self.objects.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Whether the kept version `kept` is also stored as a noncurrent version (its shard
    /// file is that record's then, not the kept entry's to free).
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn is_noncurrent(&self, kept: &ObjectRecord) -> Result<bool> {
        let n = kept.as_noncurrent();
        Ok(self
            .object(&n.bucket, &n.key)?
            .is_some_and(|r| r.version_id == kept.version_id && r.file == kept.file))
    }

    /// Adds to `batch` the record of `key` and its inline bytes (prefixed with their
    /// version), or the removal of inline bytes it no longer has.
    fn put_record(
        &self,
        batch: &mut WriteBatch,
        key: &[u8],
        record: &ObjectRecord,
        inline: Option<&[u8]>,
    ) -> Result<()> {
        batch.put_cf(self.cf(OBJECTS), key, serde_json::to_vec(record)?);
        match inline {
            Some(data) => {
                let mut v = Vec::with_capacity(16 + data.len());
                v.extend_from_slice(&record.version_id.0.to_le_bytes());
                v.extend_from_slice(data);
                batch.put_cf(self.cf(INLINE), key, v);
            }
            None => batch.delete_cf(self.cf(INLINE), key),
        }
        Ok(())
    }

    /// Drops the kept version of `bucket`/`key` (its shard file, if any, is the caller's).
    /// Not synced: a drop lost to a power cut brings the kept version back, and the scrub
    /// drops it again (the current version is readable).
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn drop_kept(&self, bucket: &str, key: &str) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.delete_cf(self.cf(KEPT), object_key(bucket, key));
        self.db
            .write_opt(batch, &WriteOptions::default())
            .map_err(crate::meta_error)?;
        Ok(())
    }

    /// Removes the record (and inline bytes, and kept version) of `bucket`/`key`.
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        let k = object_key(bucket, key);
        let mut batch = WriteBatch::default();
        batch.delete_cf(self.cf(OBJECTS), &k);
        batch.delete_cf(self.cf(INLINE), &k);
        batch.delete_cf(self.cf(KEPT), &k);
        // A heal entry of the object stays: the healer finds it obsolete and drops it.
        self.write(batch)?;
        self.objects.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }

    /// Up to `limit` object records of `bucket` with keys `>= start`, in key order.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn list_objects(
        &self,
        bucket: &str,
        start: &str,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>> {
        let from = object_key(bucket, start);
        let prefix = object_key(bucket, "");
        let mut out = Vec::new();
        for kv in self.db.iterator_cf(
            self.cf(OBJECTS),
            IteratorMode::From(&from, Direction::Forward),
        ) {
            let (k, v) = kv.map_err(crate::meta_error)?;
            if !k.starts_with(&prefix) || out.len() >= limit {
                break;
            }
            out.push(serde_json::from_slice(&v)?);
        }
        Ok(out)
    }

    /// Every object record, kept versions' too, as of one moment: for the sweeps of
    /// files no record points to. Both families are read from one snapshot: a version
    /// moved from one to the other meanwhile (a failed write's kept version restored, a
    /// replaced one kept) is seen once, where it was, never missed (its file would be
    /// swept from under its record).
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn for_each_object(&self, mut f: impl FnMut(ObjectRecord)) -> Result<()> {
        let snapshot = self.db.snapshot();
        for kv in snapshot.iterator_cf(self.cf(OBJECTS), IteratorMode::Start) {
            f(serde_json::from_slice(&kv.map_err(crate::meta_error)?.1)?);
        }
        for kv in snapshot.iterator_cf(self.cf(KEPT), IteratorMode::Start) {
            f(Kept::decode(&kv.map_err(crate::meta_error)?.1)?.record);
        }
        Ok(())
    }

    /// Queues this drive's shard of `record` for heal (a chunk failed its CRC32C, or the
    /// file is gone), and counts it.
    ///
    /// # Errors
    /// As [`MetaStore::queue_entries`]; it is counted either way.
    pub fn queue_corrupt(&self, record: &ObjectRecord, cause: HealCause) -> Result<()> {
        self.checksum_failures.fetch_add(1, Ordering::Relaxed);
        let redundancy = record.m.saturating_sub(1);
        let e = HealEntry::of(
            record,
            record.shard_index,
            cause,
            redundancy,
            &self.drive_id,
        );
        self.queue_entries(&[e]).map(drop)
    }

    /// Shards found failing their CRC32C check since start.
    #[must_use]
    pub fn checksum_failures(&self) -> u64 {
        self.checksum_failures.load(Ordering::Relaxed)
    }

    /// Every entry of the account table held here. One that does not decode is logged
    /// and left out (the other drives' copy replaces it).
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn account_entries(&self) -> Result<Vec<SignedEntry>> {
        let mut out = Vec::new();
        let from = IteratorMode::From(ACCOUNTS_PREFIX.as_bytes(), rocksdb::Direction::Forward);
        for kv in self.db.iterator_cf(self.cf(STATE), from) {
            let (k, v) = kv.map_err(crate::meta_error)?;
            if !k.starts_with(ACCOUNTS_PREFIX.as_bytes()) {
                break;
            }
            match serde_json::from_slice(&v) {
                Ok(e) => out.push(e),
                Err(e) => tracing::error!(
                    entry = %String::from_utf8_lossy(&k),
                    error = %e,
                    "an account entry on this drive's disk does not decode: left out"
                ),
            }
        }
        Ok(out)
    }

    /// Stores `entries` (each replacing the one of its name), in one synced write.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`]; then none is stored.
    pub fn put_account_entries(&self, entries: &[SignedEntry]) -> Result<()> {
        let mut batch = WriteBatch::default();
        for e in entries {
            let key = format!("{ACCOUNTS_PREFIX}{}", e.entry.name());
            batch.put_cf(self.cf(STATE), key, serde_json::to_vec(e)?);
        }
        self.write(batch)
    }

    /// When each access key was last used on this drive, as last stored
    /// ([`Meta::set_state`] under [`KEY_USED_PREFIX`]).
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn keys_used(&self) -> Result<Vec<(String, u64)>> {
        let mut out = Vec::new();
        let from = IteratorMode::From(KEY_USED_PREFIX.as_bytes(), rocksdb::Direction::Forward);
        for kv in self.db.iterator_cf(self.cf(STATE), from) {
            let (k, v) = kv.map_err(crate::meta_error)?;
            let Some(id) = k.strip_prefix(KEY_USED_PREFIX.as_bytes()) else {
                break;
            };
            if let (Ok(id), Ok(ms)) = (std::str::from_utf8(id), serde_json::from_slice(&v)) {
                out.push((id.to_owned(), ms));
            }
        }
        Ok(out)
    }

    /// A value of the drive's own state (scrub and refill progress), decoded.
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn state<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        Ok(self
            .db
            .get_pinned_cf(self.cf(STATE), name)
            .map_err(crate::meta_error)?
            .and_then(|v| serde_json::from_slice(&v).ok()))
    }

    /// Stores a value of the drive's own state.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn set_state<T: serde::Serialize>(&self, name: &str, value: &T) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(STATE), name, serde_json::to_vec(value)?);
        self.write(batch)
    }

    /// Up to `limit` object records after the metadata key `after` (every bucket, in key
    /// order), with the key of the last one: the scrubber's and the refill's cursor.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn objects_after(
        &self,
        after: &[u8],
        limit: usize,
        mut keep: impl FnMut(&ObjectRecord) -> bool,
    ) -> Result<(Vec<ObjectRecord>, Option<Vec<u8>>)> {
        let mut out = Vec::new();
        let mut last = None;
        let mut scanned = 0;
        for kv in self.db.iterator_cf(
            self.cf(OBJECTS),
            IteratorMode::From(after, Direction::Forward),
        ) {
            let (k, v) = kv.map_err(crate::meta_error)?;
            if *k == *after {
                continue;
            }
            scanned += 1;
            let rec: ObjectRecord = serde_json::from_slice(&v)?;
            last = Some(k.to_vec());
            if keep(&rec) {
                out.push(rec);
            }
            if out.len() >= limit || scanned >= 16 * limit.max(64) {
                break;
            }
        }
        Ok((out, last))
    }

    /// Flushes memtables to disk (at shutdown, so the next start replays no WAL).
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn flush(&self) -> Result<()> {
        for name in FAMILIES {
            self.db.flush_cf(self.cf(name)).map_err(crate::meta_error)?;
        }
        Ok(())
    }
}

/// The queue's counts, kept as entries come and go (counted once at open), so a scrape
/// never walks a queue that may hold millions of entries while a drive is away.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) local: [u64; HealCause::ALL.len()],
    pub(crate) local_bytes: [u64; HealCause::ALL.len()],
    pub(crate) hints: u64,
    /// Entries ever queued here for this drive, by cause (counters).
    pub(crate) queued: [u64; HealCause::ALL.len()],
}

impl Counts {
    pub(crate) fn add(&mut self, e: &HealEntry, local: &str, sign: i64) {
        if e.drive == local {
            let c = &mut self.local[e.cause.index()];
            *c = c.saturating_add_signed(sign);
            let b = &mut self.local_bytes[e.cause.index()];
            *b = b.saturating_add_signed(sign.saturating_mul(e.bytes.cast_signed()));
        } else {
            self.hints = self.hints.saturating_add_signed(sign);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oed_model::record::test_record;

    fn record(key: &str) -> ObjectRecord {
        test_record(key, 1, 10)
    }

    #[test]
    fn corrupt_shards_are_queued_once_and_the_queue_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::default();
        {
            let meta = MetaStore::open(dir.path(), &config).unwrap();
            for key in ["a", "b", "c"] {
                meta.commit_object(&record(key), None, None, None, None)
                    .unwrap();
            }
            assert_eq!(meta.heal_backlog(), 0);
            meta.queue_corrupt(&record("a"), HealCause::ReadCorrupt)
                .unwrap();
            meta.queue_corrupt(&record("a"), HealCause::ScrubCorrupt)
                .unwrap(); // again
            meta.queue_corrupt(&record("b"), HealCause::ReadCorrupt)
                .unwrap();
            assert_eq!(meta.heal_backlog(), 2);
            assert_eq!(meta.checksum_failures(), 3);
            meta.delete_object("bkt", "c").unwrap();
            assert_eq!(meta.object_count(), 2);
        }
        let meta = MetaStore::open(dir.path(), &config).unwrap();
        assert_eq!(meta.heal_backlog(), 2);
        assert_eq!(meta.object_count(), 2);
    }

    #[test]
    fn entries_of_the_earlier_format_move_into_the_queue() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::default();
        {
            let meta = MetaStore::open(dir.path(), &config).unwrap();
            meta.commit_object(&record("a"), None, None, None, None)
                .unwrap();
            meta.db
                .put_cf(meta.cf(HEAL_LEGACY), object_key("bkt", "a"), b"{}")
                .unwrap();
        }
        let meta = MetaStore::open(dir.path(), &config).unwrap();
        assert_eq!(meta.heal_backlog(), 1);
        assert_eq!(meta.entries_for(&config.drive_id, 10).unwrap()[0].key, "a");
    }
}
