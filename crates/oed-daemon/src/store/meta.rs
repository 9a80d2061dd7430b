//! The drive's metadata: one RocksDB with a column family per kind of record. Every
//! write that acknowledges something to a peer is a synced write (unless the fsync policy
//! is "never"). Memory is bounded by the block cache and two memtables (see `Config`).

use std::path::Path;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DB, Direction, IteratorMode, Options,
    WriteBatch, WriteOptions,
};

use crate::config::{Config, FsyncPolicy};
use crate::error::{Error, Result};
use crate::store::record::{BucketRecord, ObjectRecord, VersionId, object_key};

const BUCKETS: &str = "buckets";
const OBJECTS: &str = "objects";
const INLINE: &str = "inline";
const MULTIPART: &str = "multipart";
const HEAL: &str = "heal";
const FAMILIES: [&str; 5] = [BUCKETS, OBJECTS, INLINE, MULTIPART, HEAL];

/// The RocksDB of one drive.
pub struct MetaStore {
    db: DB,
    sync: bool,
    objects: AtomicU64,
    checksum_failures: AtomicU64,
    /// Entries in the heal queue: counted once at open, then kept as entries come and
    /// go, so that a scrape does not walk a queue that can grow to millions of entries
    /// while a drive is away.
    heal_entries: AtomicU64,
    /// Held while the heal queue changes, so that checking whether an entry exists and
    /// changing it are one step for the count.
    heal_lock: std::sync::Mutex<()>,
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
        let db = DB::open_cf_descriptors(&db_opts, path, cfs)?;
        let store = Self {
            db,
            sync: config.fsync == FsyncPolicy::Always,
            objects: AtomicU64::new(0),
            checksum_failures: AtomicU64::new(0),
            heal_entries: AtomicU64::new(0),
            heal_lock: std::sync::Mutex::new(()),
        };
        for (family, count) in [(OBJECTS, &store.objects), (HEAL, &store.heal_entries)] {
            let n = store
                .db
                .iterator_cf(store.cf(family), IteratorMode::Start)
                .count();
            count.store(n as u64, Ordering::Relaxed);
        }
        Ok(store)
    }

    fn cf(&self, name: &str) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("every column family is created at open")
    }

    /// Every write of this store. A synced one waits for its WAL to reach the disk; it does
    /// so without holding up the runtime's other requests: on a multi-threaded runtime the
    /// worker first hands its queue to another thread. Concurrent writers then also reach
    /// RocksDB together, which syncs their WAL records at once.
    fn write(&self, batch: WriteBatch) -> Result<()> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let mut opts = WriteOptions::default();
        opts.set_sync(self.sync);
        let write = || self.db.write_opt(batch, &opts);
        match Handle::try_current() {
            Ok(h) if self.sync && h.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(write)
            }
            _ => write(),
        }?;
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
            .get_pinned_cf(self.cf(BUCKETS), name)?
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
            return Err(Error::NotFound("bucket"));
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
            .map(|kv| Ok(serde_json::from_slice(&kv?.1)?))
            .collect()
    }

    /// The object record of `bucket`/`key`.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn object(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        self.db
            .get_pinned_cf(self.cf(OBJECTS), object_key(bucket, key))?
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
        let v = self.db.get_cf(self.cf(INLINE), object_key(bucket, key))?;
        Ok(v.and_then(|v| {
            let (id, data) = v.split_at_checked(16)?;
            (u128::from_le_bytes(id.try_into().ok()?) == version.0).then(|| data.to_vec())
        }))
    }

    /// Stores `record` (replacing the key's previous record) and, for a small shard, its
    /// bytes, in one synced batch: both become visible together or not at all.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`]; nothing is changed then.
    pub fn commit_object(
        &self,
        record: &ObjectRecord,
        previous: Option<&ObjectRecord>,
        inline: Option<&[u8]>,
    ) -> Result<()> {
        let key = object_key(&record.bucket, &record.key);
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(OBJECTS), &key, serde_json::to_vec(record)?);
        match inline {
            Some(data) => {
                let mut v = Vec::with_capacity(16 + data.len());
                v.extend_from_slice(&record.version_id.0.to_le_bytes());
                v.extend_from_slice(data);
                batch.put_cf(self.cf(INLINE), &key, v);
            }
            None => batch.delete_cf(self.cf(INLINE), &key),
        }
        self.write(batch)?;
        if previous.is_none() {
            self.objects.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Removes the record (and inline bytes) of `bucket`/`key`.
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        let k = object_key(bucket, key);
        let mut batch = WriteBatch::default();
        batch.delete_cf(self.cf(OBJECTS), &k);
        batch.delete_cf(self.cf(INLINE), &k);
        // Most objects have no heal entry; only those that do take the queue's lock (and
        // look again under it).
        let queue = self.db.get_pinned_cf(self.cf(HEAL), &k)?.map(|_| {
            self.heal_lock
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        });
        let queued = queue.is_some() && self.db.get_pinned_cf(self.cf(HEAL), &k)?.is_some();
        if queued {
            batch.delete_cf(self.cf(HEAL), &k);
        }
        self.write(batch)?;
        if queued {
            self.heal_entries.fetch_sub(1, Ordering::Relaxed);
        }
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
            let (k, v) = kv?;
            if !k.starts_with(&prefix) || out.len() >= limit {
                break;
            }
            out.push(serde_json::from_slice(&v)?);
        }
        Ok(out)
    }

    /// Every object record, for the orphan sweep.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn for_each_object(&self, mut f: impl FnMut(ObjectRecord)) -> Result<()> {
        for kv in self.db.iterator_cf(self.cf(OBJECTS), IteratorMode::Start) {
            f(serde_json::from_slice(&kv?.1)?);
        }
        Ok(())
    }

    /// Notes that this drive's shard of `record` needs rebuilding (why: `reason`).
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn queue_heal(&self, record: &ObjectRecord, reason: &str) -> Result<()> {
        let entry = serde_json::json!({
            "version_id": record.version_id,
            "shard_index": record.shard_index,
            "reason": reason,
            "queued_ms": crate::store::record::now_ms(),
        });
        let key = object_key(&record.bucket, &record.key);
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(HEAL), &key, serde_json::to_vec(&entry)?);
        let _queue = self
            .heal_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let new = self.db.get_pinned_cf(self.cf(HEAL), &key)?.is_none();
        self.write(batch)?;
        if new {
            self.heal_entries.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Queues a shard that failed its CRC32C check for heal, and counts it.
    ///
    /// # Errors
    /// As [`MetaStore::queue_heal`]; it is counted either way.
    pub fn queue_corrupt(&self, record: &ObjectRecord) -> Result<()> {
        self.checksum_failures.fetch_add(1, Ordering::Relaxed);
        self.queue_heal(record, "crc32c mismatch on read")
    }

    /// Shards found failing their CRC32C check since start.
    #[must_use]
    pub fn checksum_failures(&self) -> u64 {
        self.checksum_failures.load(Ordering::Relaxed)
    }

    /// Entries in the heal queue.
    #[must_use]
    pub fn heal_backlog(&self) -> u64 {
        self.heal_entries.load(Ordering::Relaxed)
    }

    /// Flushes memtables to disk (at shutdown, so the next start replays no WAL).
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn flush(&self) -> Result<()> {
        for name in FAMILIES {
            self.db.flush_cf(self.cf(name))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::test_record;

    fn record(key: &str) -> ObjectRecord {
        test_record(key, 1, 10)
    }

    #[test]
    fn the_heal_backlog_counts_queued_objects_once_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::default();
        {
            let meta = MetaStore::open(dir.path(), &config).unwrap();
            for key in ["a", "b", "c"] {
                meta.commit_object(&record(key), None, None).unwrap();
            }
            assert_eq!(meta.heal_backlog(), 0);
            meta.queue_heal(&record("a"), "test").unwrap();
            meta.queue_corrupt(&record("a")).unwrap(); // the same object again
            meta.queue_heal(&record("b"), "test").unwrap();
            assert_eq!(meta.heal_backlog(), 2);
            meta.delete_object("bkt", "c").unwrap(); // not queued
            assert_eq!(meta.heal_backlog(), 2);
            meta.delete_object("bkt", "a").unwrap();
            assert_eq!(meta.heal_backlog(), 1);
            assert_eq!(meta.object_count(), 1);
        }
        let meta = MetaStore::open(dir.path(), &config).unwrap();
        assert_eq!(meta.heal_backlog(), 1);
        assert_eq!(meta.object_count(), 1);
    }
}
