//! The drive's local store: shard files on disk and their records in RocksDB.
//!
//! Shard files live under `shards/`, numbered by the drive (`shards/n/<dir>/<number>.shard`,
//! `files`; files written before numbering are at paths hashed from bucket, key, version
//! and shard), never at paths derived from user input. An upload writes straight into its
//! numbered file, a new one or a freed one taken from the pool ([`pool`]).
//! [`Store::put_shard`] is the one durable write: stream into the file while checking
//! every chunk's CRC32C, fsync it, fsync its directory (one fsync shared by the uploads
//! that named files there meanwhile), then commit the record that names it with a synced
//! RocksDB write. A crash at any point leaves either the old state or the new one visible,
//! plus at most an unreferenced file, which [`Store::sweep_orphans`] removes.

mod accounts;
mod drive;
mod files;
pub mod limiter;
mod meta;
pub mod near_data;
pub mod op_threads;
mod pool;
pub mod queue;
mod read;
mod settle;
mod sweep;
mod upload;

pub use drive::without_file;
pub use meta::Kept;
pub use read::read_uninit;
pub use upload::splice::{RawConn, RawUpload};

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use prometheus::{HistogramOpts, HistogramVec};
use sha2::{Digest, Sha256};

use meta::MetaStore;
use oed_meter::traffic::Traffic;
use oed_model::config::{Config, FsyncPolicy};
use oed_model::error::{Error, Result};
use oed_model::record::{self, BucketRecord, ObjectRecord, VersionId};

/// The state entry that holds the cluster map this drive ran last.
const RAN_MAP: &str = "cluster_map";

/// `oed_shard_write_seconds` buckets: 100 µs (a directory's fsync on a fast disk) to 10 s.
const PHASE_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Commit locks, striped by object key: two uploads of one key commit one at a time.
const LOCK_STRIPES: usize = 64;

/// Where a stored shard's bytes are.
#[derive(Debug)]
pub enum ShardBytes {
    /// Small shard kept in RocksDB.
    Inline(Vec<u8>),
    /// Shard file.
    File(ShardFile),
}

/// A stored shard file's path, registered as being read while this value lives, so that
/// the file is not reused meanwhile ([`pool`]).
#[derive(Debug)]
pub struct ShardFile {
    path: PathBuf,
    _reading: pool::Reading,
}

impl ShardFile {
    /// Where the file is.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for ShardFile {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// Capacity of the data file system, as the drive reports it.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Capacity {
    /// Size of the file system.
    pub capacity_bytes: u64,
    /// Bytes available to this process.
    pub free_bytes: u64,
    /// The configured reserve.
    pub reserve_bytes: u64,
}

/// One drive's store: a cheap handle (clones share one store).
#[derive(Clone, Debug)]
pub struct Store(Arc<Shared>);

/// What the handles of one [`Store`] share; reached through the handle.
#[derive(Debug)]
pub struct Shared {
    meta: MetaStore,
    drive_id: String,
    /// Request and traffic counters (shard reads by access pattern).
    traffic: Traffic,
    root: PathBuf,
    shards: PathBuf,
    tmp: PathBuf,
    fsync: bool,
    /// Shard files written with `O_DIRECT` (`direct_io`).
    direct_io: bool,
    inline_threshold: u64,
    max_shard_bytes: u64,
    reserve: u64,
    /// How far ahead of this drive's clock a version id may have been made
    /// (`clock_skew_seconds`): one made later is refused, and one stored before that lies
    /// further ahead supersedes nothing ([`Store::ahead_of_time`]).
    clock_skew_ms: u64,
    /// Serialise a key's commit and delete. Taken only on blocking threads (see
    /// [`Store::delete_object`]).
    locks: Vec<Mutex<()>>,
    /// Time spent in each step of a shard write ([`Store::write_phases`]).
    phases: HistogramVec,
    /// How much near-data work the drive takes on.
    ops: op_threads::OpLimits,
    /// The drive's energy meter, once the server has one.
    energy: std::sync::OnceLock<oed_meter::EnergyReader>,
    /// Who this drive is: its id and the incarnation written at its first start.
    identity: Identity,
    /// Whether the identity was written at this start, on an empty data directory: a
    /// new drive, or one replacing an earlier drive of the same id.
    new_incarnation: bool,
    /// Numbered shard files: their numbers, directories and placements.
    files: Arc<files::Files>,
    /// Freed shard files kept for reuse (`shard_file_pool_bytes`).
    pool: Arc<pool::Pool>,
    /// Raw uploads received by `splice` since the start, stored or not ([`upload::splice`]).
    spliced: std::sync::atomic::AtomicU64,
    /// Raw uploads read into `O_DIRECT` buffers since the start, stored or not
    /// ([`upload::direct`]).
    received_direct: std::sync::atomic::AtomicU64,
    /// The account table ([`accounts`]).
    accounts: accounts::Accounts,
}

/// A drive's identity, in `identity.json` of its data directory: written once, at the
/// first start on an empty data directory. A drive id that comes back with another
/// incarnation is a replaced disk.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    /// The drive id.
    pub drive_id: String,
    /// Random, 16 hex digits, new for every empty data directory.
    pub incarnation: String,
    /// When it was written, milliseconds since the epoch.
    pub created_ms: u64,
}

impl Identity {
    /// Reads the identity in `root`, or writes a new one (durably) when there is none;
    /// says whether it is new.
    fn load_or_create(root: &Path, drive_id: &str) -> Result<(Self, bool)> {
        let path = root.join("identity.json");
        match std::fs::read(&path) {
            Ok(bytes) => {
                let id: Identity = serde_json::from_slice(&bytes)
                    .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
                if id.drive_id != drive_id {
                    return Err(Error::Config(format!(
                        "data directory {} belongs to drive {:?}, not {drive_id:?}",
                        root.display(),
                        id.drive_id
                    )));
                }
                Ok((id, false))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let id = Identity {
                    drive_id: drive_id.to_owned(),
                    incarnation: format!("{:016x}", rand::random::<u64>()),
                    created_ms: record::now_ms(),
                };
                let tmp = root.join("identity.json.tmp");
                {
                    use std::io::Write as _;
                    let mut f = std::fs::File::create(&tmp)?;
                    f.write_all(&serde_json::to_vec_pretty(&id)?)?;
                    f.sync_all()?;
                }
                std::fs::rename(&tmp, &path)?;
                std::fs::File::open(root)?.sync_all()?;
                Ok((id, true))
            }
            Err(e) => Err(e.into()),
        }
    }
}

impl std::ops::Deref for Store {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl Store {
    /// Opens the store in `config.data_dir`, creating its directories, and empties `tmp/`
    /// (uploads a crash interrupted) and `pool/` (freed files, and such uploads).
    ///
    /// # Errors
    /// [`Error::Io`] when the directories cannot be created; [`Error::Meta`] when RocksDB
    /// cannot be opened.
    pub fn open(config: &Config, traffic: Traffic) -> Result<Self> {
        let root = config.data_dir.clone();
        let shards = root.join("shards");
        let tmp = root.join("tmp");
        let had_data = root.join("meta").exists();
        std::fs::create_dir_all(&shards)?;
        let (identity, created) = Identity::load_or_create(&root, &config.drive_id)?;
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        std::fs::create_dir_all(&tmp)?;
        let meta = MetaStore::open(&root.join("meta"), config)?;
        let pool = Arc::new(pool::Pool::open(
            root.join("pool"),
            config.shard_file_pool_bytes,
        )?);
        let files = Arc::new(files::Files::open(shards.join("n"))?);
        Ok(Self(Arc::new(Shared {
            meta,
            drive_id: config.drive_id.clone(),
            traffic,
            root,
            shards,
            tmp,
            fsync: config.fsync == FsyncPolicy::Always,
            direct_io: config.direct_io,
            inline_threshold: config.inline_threshold_bytes,
            max_shard_bytes: config.max_shard_bytes,
            clock_skew_ms: config.clock_skew_seconds.saturating_mul(1000),
            reserve: config.reserve_bytes,
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            phases: HistogramVec::new(
                HistogramOpts::new(
                    "oed_shard_write_seconds",
                    "Time each step of a shard write took on this drive: receive (the body, \
                     checked and written in batches), data_sync (the last batch and the \
                     file's fsync), place (the fsync of the file's directory, shared by \
                     the uploads naming files there at the time), record (the synced \
                     RocksDB write).",
                )
                .buckets(PHASE_BUCKETS.to_vec()),
                &["phase"],
            )?,
            ops: op_threads::OpLimits::new(
                config.max_concurrent_ops,
                std::time::Duration::from_secs(config.op_cpu_seconds),
            ),
            energy: std::sync::OnceLock::new(),
            identity,
            new_incarnation: created && !had_data,
            files,
            pool,
            spliced: std::sync::atomic::AtomicU64::new(0),
            received_direct: std::sync::atomic::AtomicU64::new(0),
            accounts: accounts::Accounts::default(),
        })))
    }

    /// This drive's identity.
    #[must_use]
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Whether this start began a new incarnation on an empty data directory.
    #[must_use]
    pub fn is_new_incarnation(&self) -> bool {
        self.new_incarnation
    }

    /// The cluster map this drive ran last, if it ran one.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn ran_map(&self) -> Result<Option<oed_model::map::RanMap>> {
        self.meta().state(RAN_MAP)
    }

    /// Records `ran` as the map this drive runs (a synced write).
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn record_ran_map(&self, ran: &oed_model::map::RanMap) -> Result<()> {
        self.meta().set_state(RAN_MAP, ran)
    }

    /// The metadata store (RocksDB): this crate's own; other layers use the typed calls
    /// below.
    pub(crate) fn meta(&self) -> &MetaStore {
        &self.meta
    }

    /// The heal queue.
    #[must_use]
    pub fn heal_queue(&self) -> queue::HealQueue<'_> {
        queue::HealQueue(&self.meta)
    }

    /// The record of the version of `bucket`/`key` stored here, if any.
    ///
    /// # Errors
    /// [`Error::Meta`], [`Error::Record`].
    pub fn record(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        self.meta.object(bucket, key)
    }

    /// Up to `limit` records in key order after the raw key `after` (empty: from the
    /// first) that `keep` keeps, and the key to go on from, `None` at the end. A page
    /// stops early once it has scanned many records, so a sweep yields between pages.
    ///
    /// # Errors
    /// [`Error::Meta`], [`Error::Record`].
    pub fn objects_after(
        &self,
        after: &[u8],
        limit: usize,
        keep: impl FnMut(&ObjectRecord) -> bool,
    ) -> Result<(Vec<ObjectRecord>, Option<Vec<u8>>)> {
        self.meta.objects_after(after, limit, keep)
    }

    /// The state a background task kept under `name` (a scrub's progress, say), if any.
    ///
    /// # Errors
    /// [`Error::Meta`], [`Error::Record`] when it does not decode as a `T`.
    pub fn state<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        self.meta.state(name)
    }

    /// Keeps `value` as the state under `name`, durably.
    ///
    /// # Errors
    /// [`Error::Meta`], [`Error::Record`].
    pub fn set_state<T: serde::Serialize>(&self, name: &str, value: &T) -> Result<()> {
        self.meta.set_state(name, value)
    }

    /// How much near-data work the drive takes on.
    pub(crate) fn op_limits(&self) -> &op_threads::OpLimits {
        &self.ops
    }

    /// Near-data operations this drive stopped because their caller went away.
    #[must_use]
    pub fn ops_cancelled(&self) -> u64 {
        self.ops.cancelled()
    }

    /// Gives the store the drive's energy meter, for the cost of the work it does (the
    /// first one given stays).
    pub fn attach_energy(&self, reader: oed_meter::EnergyReader) {
        let _ = self.energy.set(reader);
    }

    /// The drive's energy meter, when it has one.
    #[must_use]
    pub fn energy(&self) -> Option<&oed_meter::EnergyReader> {
        self.energy.get()
    }

    /// The `oed_shard_write_seconds` histograms, by phase, for the drive's registry. Only
    /// writes that complete a phase count in it; an inline shard has no `data_sync` or `place`.
    #[must_use]
    pub fn write_phases(&self) -> &HistogramVec {
        &self.phases
    }

    /// Records that `phase` (one of the labels the histograms' help names) took the time
    /// since `since`; returns now, where the next one starts.
    fn timed(&self, phase: &str, since: Instant) -> Instant {
        let now = Instant::now();
        self.phases
            .with_label_values(&[phase])
            .observe(now.duration_since(since).as_secs_f64());
        now
    }

    /// The largest shard file this drive takes (`max_shard_bytes`).
    #[must_use]
    pub fn max_shard_bytes(&self) -> u64 {
        self.max_shard_bytes
    }

    /// Where the shard file of `record` (this drive's shard of its version) is: its
    /// numbered file, or for a record from before numbering, the hashed path.
    pub(crate) fn record_path(&self, record: &ObjectRecord) -> PathBuf {
        match record.file {
            Some(id) => self.files.path(id),
            None => self.shard_path(
                &record.bucket,
                &record.key,
                record.version_id,
                record.shard_index,
            ),
        }
    }

    /// This drive's id.
    #[must_use]
    pub fn drive_id(&self) -> &str {
        &self.drive_id
    }

    /// A bucket's record, if this drive has it.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn bucket(&self, name: &str) -> Result<Option<BucketRecord>> {
        self.meta.bucket(name)
    }

    /// Object records (so shards) held here.
    #[must_use]
    pub fn object_count(&self) -> u64 {
        self.meta.object_count()
    }

    /// Entries in the heal queue.
    #[must_use]
    pub fn heal_backlog(&self) -> u64 {
        self.meta.heal_backlog()
    }

    /// Shards found failing their CRC32C check since start.
    #[must_use]
    pub fn checksum_failures(&self) -> u64 {
        self.meta.checksum_failures()
    }

    /// Queues shards for heal in this drive's persistent heal queue (its own, or hints
    /// for other drives); returns how many were new.
    ///
    /// # Errors
    /// [`Error::Meta`] or [`Error::Record`].
    pub fn queue_heals(&self, entries: &[oed_model::heal::HealEntry]) -> Result<usize> {
        Ok(self
            .meta
            .queue_entries(entries)?
            .into_iter()
            .filter(|n| *n)
            .count())
    }

    /// Capacity and free space of the data file system.
    ///
    /// # Errors
    /// [`Error::Io`] when the file system cannot be queried.
    /// Free space counts the freed shard files kept for reuse: they are given back
    /// whenever a write would otherwise find too little.
    ///
    /// # Errors
    /// [`Error::Io`] when the file system cannot be queried.
    pub fn capacity(&self) -> Result<Capacity> {
        let (capacity_bytes, free) = self.file_system_space()?;
        Ok(Capacity {
            capacity_bytes,
            free_bytes: free.saturating_add(self.pool.bytes()),
            reserve_bytes: self.reserve,
        })
    }

    /// The data file system's size and the bytes available to this process.
    fn file_system_space(&self) -> Result<(u64, u64)> {
        let st = rustix::fs::statvfs(&self.root).map_err(std::io::Error::from)?;
        Ok((
            st.f_blocks.saturating_mul(st.f_frsize),
            st.f_bavail.saturating_mul(st.f_frsize),
        ))
    }

    /// Whether `incoming` bytes can be written and leave the reserve free. When they
    /// cannot, the freed files kept for reuse are given back first, on a blocking
    /// thread (thousands of unlinks), and the space looked at again.
    async fn check_space(&self, incoming: u64) -> Result<()> {
        if self.has_room(incoming).is_err() && self.pool.bytes() > 0 {
            let pool = Arc::clone(&self.pool);
            tokio::task::spawn_blocking(move || pool.drain())
                .await
                .map_err(join_error)?;
        }
        self.has_room(incoming)
    }

    fn has_room(&self, incoming: u64) -> Result<()> {
        let free = self.file_system_space()?.1;
        if free < self.reserve.saturating_add(incoming) {
            return Err(Error::InsufficientStorage {
                free,
                reserve: self.reserve,
            });
        }
        Ok(())
    }

    /// fsyncs of shard file directories run for uploads since the start (one serves
    /// every upload that named a file in its directory before it began).
    #[must_use]
    pub fn directory_syncs(&self) -> u64 {
        self.files.dir_syncs()
    }

    /// Shard uploads received by `splice` since the start, stored or not: raw uploads
    /// over plain TCP of shards that get a file ([`Store::put_shard_raw`]).
    #[must_use]
    pub fn uploads_spliced(&self) -> u64 {
        self.spliced.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Shard uploads read from their connection straight into the aligned buffer of a
    /// file written with `O_DIRECT` since the start, stored or not: raw uploads with
    /// `direct_io` on ([`Store::put_shard_raw`]).
    #[must_use]
    pub fn uploads_received_direct(&self) -> u64 {
        self.received_direct
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Freed shard files reused by uploads since the start.
    #[must_use]
    pub fn shard_files_reused(&self) -> u64 {
        self.pool.reused()
    }

    /// Bytes held by freed shard files kept for reuse.
    #[must_use]
    pub fn shard_file_pool_bytes(&self) -> u64 {
        self.pool.bytes()
    }

    /// The path of a shard file written before numbered files (a record without
    /// [`ObjectRecord::file`]): two levels of directories and a name, all from a hash.
    #[must_use]
    pub fn shard_path(&self, bucket: &str, key: &str, version: VersionId, shard: u16) -> PathBuf {
        let mut h = Sha256::new();
        for part in [
            bucket.as_bytes(),
            key.as_bytes(),
            &version.0.to_le_bytes(),
            &shard.to_le_bytes(),
        ] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        let name = hex::encode(h.finalize());
        self.shards
            .join(&name[0..2])
            .join(&name[2..4])
            .join(format!("{name}.shard"))
    }

    /// The commit lock of `bucket`/`key`, which its noncurrent versions share (a write
    /// that keeps the version it replaces, a promotion and a version's deletion are
    /// ordered by it).
    fn lock_for(&self, bucket: &str, key: &str) -> MutexGuard<'_, ()> {
        let h = crc32c::crc32c(&record::object_key(bucket, record::placement_key(key)));
        // The lock guards no data, only order: a panic while holding it leaves nothing
        // to distrust.
        self.locks[h as usize % LOCK_STRIPES]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates or keeps a bucket record.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for an invalid name; [`Error::Meta`].
    pub fn create_bucket(&self, name: &str) -> Result<BucketRecord> {
        record::check_bucket_name(name)?;
        self.meta.put_bucket(&BucketRecord {
            name: name.to_owned(),
            created_ms: record::now_ms(),
        })
    }

    /// Keeps `record`, another drive's record of a bucket this one lacks, as it is (its
    /// creation time included), or the existing record.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for an invalid name; [`Error::Meta`].
    pub fn copy_bucket(&self, record: &BucketRecord) -> Result<BucketRecord> {
        record::check_bucket_name(&record.name)?;
        self.meta.put_bucket(record)
    }

    /// Flushes the metadata store (at shutdown).
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn flush(&self) -> Result<()> {
        self.meta.flush()
    }
}

pub(crate) fn join_error(e: tokio::task::JoinError) -> Error {
    Error::Io(std::io::Error::other(e))
}

/// A failure of the metadata store, as the layers above see it.
pub(crate) fn meta_error(e: rocksdb::Error) -> Error {
    Error::Meta(Box::new(e))
}

/// Removes `path`, logging a failure other than its absence.
pub(crate) fn remove_file_if_exists(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "could not remove file");
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::ops::ControlFlow;
    use std::time::Duration;

    use super::*;
    use crate::upload::WRITE_BATCH;
    use crate::upload::direct::{DIRECT_FILES, DIRECT_STAGE};
    use bytes::Bytes;
    use futures_util::StreamExt;
    use oed_model::drive::Settlement;
    use oed_model::record::{FileId, RecordTail};

    /// Counters for a store under test.
    fn traffic() -> Traffic {
        Traffic::new(&prometheus::Registry::new()).unwrap()
    }

    fn open_store(dir: &Path) -> Store {
        open_store_with(dir, false)
    }

    fn open_store_with(dir: &Path, direct_io: bool) -> Store {
        let config = Config {
            data_dir: dir.to_owned(),
            inline_threshold_bytes: 0,
            reserve_bytes: 0,
            direct_io,
            ..Config::default()
        };
        let store = Store::open(&config, traffic()).unwrap();
        store.create_bucket("bkt").unwrap();
        store
    }

    /// Version `v` of `bkt`/`k`: its record and shard file, `size` bytes of object.
    fn shard(v: u128, size: usize) -> (ObjectRecord, Vec<u8>) {
        let data = vec![v as u8; size];
        let rec = record::test_record("k", v, data.len() as u64);
        let file = oed_ec::encode_object(rec.layout().unwrap(), v, &data)
            .unwrap()
            .swap_remove(0);
        (rec, file)
    }

    /// Files under `shards/` that no record names (current or kept), and files in
    /// `tmp/`: what an upload leaves behind.
    fn stray_files(store: &Store) -> usize {
        let mut named = std::collections::HashSet::new();
        store
            .meta
            .for_each_object(|r| {
                named.insert(store.record_path(&r));
            })
            .unwrap();
        let mut dirs = vec![store.shards.clone()];
        let mut stray = std::fs::read_dir(&store.tmp).unwrap().count();
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if !named.contains(&p) {
                    stray += 1;
                }
            }
        }
        stray
    }

    /// Where the current version of `bkt`/`key` has its shard file.
    fn current_path(store: &Store, key: &str) -> PathBuf {
        store.record_path(&store.meta.object("bkt", key).unwrap().unwrap())
    }

    /// A file being placed (written at its number, its record not committed yet) is not
    /// an orphan, even when old; once its placement ends without a record, it is.
    #[test]
    fn a_file_being_placed_is_not_an_orphan() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let (_, path) = store.files.allocate().unwrap();
        std::fs::write(&path, b"placed, not recorded yet").unwrap();
        // As a freed file renamed to its number keeps its old time.
        let old = std::time::SystemTime::now() - Duration::from_hours(2);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let placing = store.files.placing(&path);
        assert_eq!(store.sweep_orphans().unwrap(), 0);
        assert_eq!(store.sweep_aged(Duration::from_mins(1)).unwrap(), (0, 0));
        assert!(path.exists());
        drop(placing);
        assert_eq!(store.sweep_aged(Duration::from_mins(1)).unwrap(), (0, 1));
        assert!(!path.exists());
        std::fs::write(&path, b"left by a crash").unwrap();
        assert_eq!(store.sweep_orphans().unwrap(), 1);
        assert!(!path.exists());
    }

    /// Orphan sweeps running while shards are written (as the sweep at a drive's start
    /// runs while the drive already takes writes) never remove a file whose record is
    /// committed: every written shard's file is there afterwards.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn orphan_sweeps_during_writes_never_take_a_recorded_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sweeper = {
            let (store, done) = (store.clone(), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut sweeps = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) && sweeps < 100_000 {
                    store.sweep_orphans().unwrap();
                    sweeps += 1;
                }
                sweeps
            })
        };
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let store = store.clone();
                tokio::spawn(async move {
                    for i in 0..40 {
                        let (mut rec, file) = shard(1, 9000);
                        rec.key = format!("k{w}-{i}");
                        let body = futures_util::stream::iter([Ok::<_, std::io::Error>(
                            Bytes::from(file),
                        )]);
                        store.put_shard(rec, body, false).await.unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.await.unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(sweeper.join().unwrap() > 0);
        let mut missing = Vec::new();
        for w in 0..4 {
            for i in 0..40 {
                let key = format!("k{w}-{i}");
                let rec = store.meta.object("bkt", &key).unwrap().unwrap();
                if !store.record_path(&rec).exists() {
                    missing.push(key);
                }
            }
        }
        assert!(
            missing.is_empty(),
            "records without their file: {missing:?}"
        );
    }

    /// A replaced version kept for its write's settlement is a wanted file: the orphan
    /// sweep leaves it, and a restart keeps it kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kept_versions_survive_the_orphan_sweep_and_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let tail = |v: u128| {
            serde_json::to_vec(&RecordTail {
                etag: format!("e{v}"),
                ..RecordTail::default()
            })
            .unwrap()
        };
        {
            let store = open_store(dir.path());
            for v in [3, 4] {
                let (rec, mut file) = shard(v, 9000);
                file.extend(tail(v));
                let body = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from(file))]);
                let stored = store.put_shard(rec, body, true).await.unwrap();
                assert_eq!(stored.kept, v == 4);
            }
            assert_eq!(store.sweep_orphans().unwrap(), 0);
            store.flush().unwrap();
        }
        let store = open_store(dir.path());
        let kept = store.meta.kept("bkt", "k").unwrap().unwrap();
        assert_eq!(kept.record.version_id, VersionId(3));
        let (p3, p4) = (store.record_path(&kept.record), current_path(&store, "k"));
        let path = |v| if v == 3 { &p3 } else { &p4 };
        assert!(path(3).exists() && path(4).exists());
        let failed = Settlement {
            bucket: "bkt".into(),
            key: "k".into(),
            version_id: VersionId(4),
            stored: false,
        };
        assert!(store.settle(&failed).unwrap());
        assert_eq!(
            store.meta.object("bkt", "k").unwrap().unwrap().version_id,
            VersionId(3)
        );
        assert!(path(3).exists() && !path(4).exists());
        assert!(store.meta.kept("bkt", "k").unwrap().is_none());
    }

    /// In a bucket with versioning, the version a write replaces is kept under its
    /// version key as the write commits (its file, or its inline bytes, move with it): it
    /// stays when the write settles as stored, goes when the write failed (the version
    /// is current again), and becomes current again when the current one is deleted and
    /// the key promoted. Two `null` versions replace each other as before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replaced_versions_are_kept_as_noncurrent_ones() {
        use oed_model::record::version_key;
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let put = |v: u128, size: usize, versioned: bool| {
            let store = store.clone();
            async move {
                let (mut rec, mut file) = shard(v, size);
                rec.versioned = versioned;
                file.extend(serde_json::to_vec(&RecordTail::default()).unwrap());
                let body = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from(file))]);
                store.put_shard(rec, body, true).await.unwrap()
            }
        };
        let settle = |v: u128, stored: bool| Settlement {
            bucket: "bkt".into(),
            key: "k".into(),
            version_id: VersionId(v),
            stored,
        };
        let noncurrent = |v: u128| {
            store
                .meta
                .object("bkt", &version_key("k", VersionId(v)))
                .unwrap()
        };
        let current = || {
            store
                .meta
                .object("bkt", "k")
                .unwrap()
                .map(|r| r.version_id.0)
        };
        // Two null versions: the first is replaced, as without versioning.
        put(1, 9000, false).await;
        put(2, 9000, false).await;
        store.settle(&settle(2, true)).unwrap();
        assert!(noncurrent(1).is_none());
        // A version of its own keeps the null one it replaces, and so on.
        put(3, 9000, true).await;
        assert_eq!(noncurrent(2).unwrap().version_id, VersionId(2));
        store.settle(&settle(3, true)).unwrap();
        let kept2 = noncurrent(2).unwrap();
        assert!(store.record_path(&kept2).exists(), "settling kept its file");
        put(4, 100, true).await;
        store.settle(&settle(4, true)).unwrap();
        // A failed write: the version it replaced is current again, and only there.
        let stored = put(5, 100, true).await;
        assert!(stored.kept && noncurrent(4).is_some());
        store.settle(&settle(5, false)).unwrap();
        assert_eq!(current(), Some(4));
        assert!(noncurrent(4).is_none());
        assert_eq!(store.meta.object_count(), 3);
        store.shard("bkt", "k", Some(VersionId(4))).unwrap();
        // The current version deleted: the newest noncurrent one becomes current.
        store
            .delete_object("bkt", "k", Some(VersionId(4)))
            .await
            .unwrap();
        assert_eq!(store.promote("bkt", "k").unwrap(), Some(VersionId(3)));
        assert_eq!(current(), Some(3));
        assert!(noncurrent(3).is_none());
        assert!(
            store
                .record_path(&store.meta.object("bkt", "k").unwrap().unwrap())
                .exists()
        );
        // Only where the key has no current version.
        assert_eq!(store.promote("bkt", "k").unwrap(), None);
        // A longer key whose next character is U+0001 shares the prefix of the key's
        // noncurrent versions, and sorts first: its versions are not the key's.
        let (mut other, file) = shard(9, 100);
        other.key = version_key("k\u{1}0", VersionId(9));
        other.versioned = true;
        let body = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from(file))]);
        store.put_shard(other, body, false).await.unwrap();
        store
            .delete_object("bkt", "k", Some(VersionId(3)))
            .await
            .unwrap();
        assert_eq!(store.promote("bkt", "k").unwrap(), Some(VersionId(2)));
        assert_eq!(store.sweep_orphans().unwrap(), 0);
        assert_eq!(stray_files(&store), 0);
    }

    /// A write's condition is checked at its commit, against the version stored then:
    /// of two writes made on the key being absent, the second is refused and changes
    /// nothing; a write on the current version passes where that version (or an older
    /// one) is stored, and fails where a newer one is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_condition_is_checked_at_commit() {
        use oed_model::record::WriteCondition;
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let put = |v: u128, condition| {
            let store = store.clone();
            async move {
                let (rec, mut file) = shard(v, 9000);
                file.extend(
                    serde_json::to_vec(&RecordTail {
                        etag: format!("e{v}"),
                        condition,
                        ..RecordTail::default()
                    })
                    .unwrap(),
                );
                let body = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from(file))]);
                store.put_shard(rec, body, true).await
            }
        };
        let current = || store.meta.object("bkt", "k").unwrap().map(|r| r.version_id);
        put(3, Some(WriteCondition::Absent)).await.unwrap();
        let refused = put(4, Some(WriteCondition::Absent)).await.unwrap_err();
        assert!(matches!(refused, Error::PreconditionFailed(_)), "{refused}");
        assert_eq!(current(), Some(VersionId(3)));
        // Made on version 3: stored over 3; again on 3 over 5, refused.
        put(5, Some(WriteCondition::Current(VersionId(3))))
            .await
            .unwrap();
        let refused = put(6, Some(WriteCondition::Current(VersionId(3))))
            .await
            .unwrap_err();
        assert!(matches!(refused, Error::PreconditionFailed(_)), "{refused}");
        assert_eq!(current(), Some(VersionId(5)));
        // A drive behind (holding 5 while the client named 7, stored elsewhere) passes.
        put(8, Some(WriteCondition::Current(VersionId(7))))
            .await
            .unwrap();
        assert_eq!(current(), Some(VersionId(8)));
    }

    /// Version 3 of `k` written, then version 4 (client writes: 3 is kept until 4 is
    /// settled); returns the settlement of 4 as failed.
    async fn overwrite_kept(store: &Store) -> Settlement {
        for v in [3, 4] {
            let (rec, mut file) = shard(v, 9000);
            file.extend(serde_json::to_vec(&RecordTail::default()).unwrap());
            let body = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from(file))]);
            store.put_shard(rec, body, true).await.unwrap();
        }
        Settlement {
            bucket: "bkt".into(),
            key: "k".into(),
            version_id: VersionId(4),
            stored: false,
        }
    }

    /// The records the orphan sweep keeps are read as of one moment: a failed write's
    /// kept version restored while they are read (moved from the kept family back to
    /// the objects) is among them, so its file is not swept from under its record.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_version_restored_while_the_sweep_reads_the_records_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let failed = overwrite_kept(&store).await;
        let mut seen = Vec::new();
        store
            .meta
            .for_each_object(|r| {
                if seen.is_empty() {
                    assert!(store.settle(&failed).unwrap());
                }
                seen.push(r.version_id);
            })
            .unwrap();
        assert!(seen.contains(&VersionId(3)), "{seen:?}");
        assert_eq!(store.sweep_orphans().unwrap(), 0);
        assert!(current_path(&store, "k").exists());
    }

    /// A failed write whose kept version lost its file (its drop unsynced when power
    /// went) brings back no record without a shard: the key's record goes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kept_version_without_its_file_is_not_restored() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let failed = overwrite_kept(&store).await;
        let kept = store.meta.kept("bkt", "k").unwrap().unwrap();
        std::fs::remove_file(store.record_path(&kept.record)).unwrap();
        assert!(store.settle(&failed).unwrap());
        assert!(store.meta.object("bkt", "k").unwrap().is_none());
        assert!(store.meta.kept("bkt", "k").unwrap().is_none());
    }

    /// Shard files are stored byte for byte however their bodies are cut: in pieces of
    /// 10,007 bytes, in one piece, and past one batch in two pieces, cut so that the last
    /// one fills the only batch (nothing left for the final write) or so that the first
    /// one is a whole batch (the final write is the second).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shard_files_are_stored_byte_for_byte_however_the_body_is_cut() {
        stored_byte_for_byte(false, None).await;
    }

    /// The same with `direct_io`: whole blocks staged and written past the page cache,
    /// the last partial block through it. Where the file system takes `O_DIRECT` (ext4
    /// and xfs do, tmpfs does not), the files were opened with it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn direct_io_stores_shard_files_byte_for_byte() {
        direct_io_in(None).await;
        // tmpfs refuses O_DIRECT: the drive writes through the page cache instead.
        if Path::new("/dev/shm").is_dir() {
            direct_io_in(Some(Path::new("/dev/shm"))).await;
        }
    }

    async fn direct_io_in(base: Option<&Path>) {
        let dir = base
            .map_or_else(tempfile::tempdir, tempfile::tempdir_in)
            .unwrap();
        let probe = dir.path().join("probe");
        let takes_direct = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_DIRECT)
                .open(&probe)
                .is_ok()
        };
        let before = DIRECT_FILES.load(std::sync::atomic::Ordering::Relaxed);
        stored_byte_for_byte(true, base).await;
        let after = DIRECT_FILES.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            after > before,
            takes_direct,
            "O_DIRECT files: {before} -> {after}"
        );
    }

    async fn stored_byte_for_byte(direct_io: bool, base: Option<&Path>) {
        let dir = base
            .map_or_else(tempfile::tempdir, tempfile::tempdir_in)
            .unwrap();
        let store = open_store_with(dir.path(), direct_io);
        let mut v = 0;
        // Shard files (k = 2) of about 1.5 KiB, a batch and a bit, 2.5 batches, and
        // whole blocks of O_DIRECT's.
        for size in [
            3000,
            2 * WRITE_BATCH,
            5 * WRITE_BATCH + 12_345,
            2 * DIRECT_STAGE,
        ] {
            let len = shard(1, size).1.len();
            let cuts: [Vec<usize>; 4] = [
                (10_007..len).step_by(10_007).collect(),
                Vec::new(),
                (len > WRITE_BATCH)
                    .then_some(WRITE_BATCH - 1)
                    .into_iter()
                    .collect(),
                (len > WRITE_BATCH)
                    .then_some(WRITE_BATCH)
                    .into_iter()
                    .collect(),
            ];
            for cut in cuts {
                v += 1;
                let (rec, file) = shard(v, size);
                let pieces: Vec<_> = std::iter::once(0)
                    .chain(cut.iter().copied())
                    .zip(cut.iter().copied().chain(std::iter::once(len)))
                    .map(|(from, to)| {
                        Ok::<_, std::io::Error>(Bytes::copy_from_slice(&file[from..to]))
                    })
                    .collect();
                store
                    .put_shard(rec.clone(), futures_util::stream::iter(pieces), false)
                    .await
                    .unwrap();
                let stored = std::fs::read(current_path(&store, "k")).unwrap();
                assert!(stored == file, "{len} bytes cut at {cut:?}");
                assert_eq!(stray_files(&store), 0);
            }
        }
        // Each version replaced the one before, whose file the next one overwrote (all
        // but the first two), longer and shorter ones (cut to length) alike.
        assert_eq!(u128::from(store.shard_files_reused()), v - 2);
    }

    /// Stores version `v` of `key` from one piece; returns its shard file's bytes.
    async fn put(store: &Store, key: &str, v: u128, size: usize) -> Vec<u8> {
        let (mut rec, file) = shard(v, size);
        rec.key = key.into();
        let body =
            futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::copy_from_slice(&file))]);
        store.put_shard(rec, body, false).await.unwrap();
        file
    }

    fn pool_files(store: &Store) -> usize {
        std::fs::read_dir(store.root.join("pool")).unwrap().count()
    }

    /// A version stored before drives refused ones made far ahead of their clock (or by
    /// a drive whose own clock was wrong) keeps no later write of its key out: the next
    /// write replaces it, and a delete removes it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stored_version_made_far_ahead_supersedes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let now = |ahead_ms: u64| {
            let ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
                + u128::from(ahead_ms);
            ms << 64
        };
        let ten_years = 10 * 365 * 86_400_000;
        {
            // A drive that took any version (as drives did before the check).
            let config = Config {
                data_dir: dir.path().to_owned(),
                inline_threshold_bytes: 0,
                reserve_bytes: 0,
                clock_skew_seconds: 100 * 365 * 86_400,
                ..Config::default()
            };
            let store = Store::open(&config, traffic()).unwrap();
            store.create_bucket("bkt").unwrap();
            put(&store, "k", now(ten_years), 5000).await;
            put(&store, "gone", now(ten_years), 5000).await;
        }
        let store = Store::open(
            &Config {
                data_dir: dir.path().to_owned(),
                inline_threshold_bytes: 0,
                reserve_bytes: 0,
                ..Config::default()
            },
            traffic(),
        )
        .unwrap();
        let v = now(0);
        put(&store, "k", v, 5000).await;
        let got = store.meta.object("bkt", "k").unwrap().unwrap();
        assert_eq!(got.version_id, VersionId(v));
        store
            .delete_object("bkt", "gone", Some(VersionId(v)))
            .await
            .unwrap();
        assert!(store.meta.object("bkt", "gone").unwrap().is_none());
        // One inside the window is newer, as any newer version is.
        put(&store, "k", now(60_000), 5000).await;
        let (rec, file) = shard(v + 1, 5000);
        let body = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from(file))]);
        assert!(matches!(
            store.put_shard(rec, body, false).await,
            Err(Error::Superseded)
        ));
        assert_eq!(stray_files(&store), 0);
    }

    /// Every upload's file is a new number, written in place under `shards/n/` (nothing
    /// in `tmp/`, no rename of its own), and the record names it; a freed file taken
    /// from the pool is renamed to a new number. Numbers never repeat across a restart,
    /// and every file written before it is still read.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn uploads_write_numbered_files_that_records_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let a = put(&store, "a", 1, 300_000).await;
        let b = put(&store, "b", 2, 300_000).await;
        let rec = |store: &Store, key: &str| store.meta.object("bkt", key).unwrap().unwrap();
        let (fa, fb) = (
            rec(&store, "a").file.unwrap(),
            rec(&store, "b").file.unwrap(),
        );
        assert_ne!(fa, fb);
        assert_eq!(
            current_path(&store, "a"),
            dir.path()
                .join("shards/n/00000000")
                .join(format!("{fa}.shard"))
        );
        // A record sent with a file number of another drive's gets this drive's own.
        let (mut r, file) = shard(3, 300_000);
        r.key = "c".into();
        r.file = Some(FileId(999_999));
        let body = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from(file))]);
        let stored = store.put_shard(r, body, false).await.unwrap();
        assert_ne!(stored.record.file, Some(FileId(999_999)));
        assert_eq!(stored.record.file, rec(&store, "c").file);
        // Overwritten: the freed file goes to the pool, then to the next upload under a
        // new number.
        put(&store, "a", 4, 300_000).await;
        let a2 = put(&store, "d", 5, 300_000).await;
        assert_eq!(store.shard_files_reused(), 1);
        let fd = rec(&store, "d").file.unwrap();
        assert!(fd > fb && !store.files.path(fa).exists());
        assert!(std::fs::read(current_path(&store, "d")).unwrap() == a2);
        assert_eq!(stray_files(&store), 0);
        store.flush().unwrap();
        drop(store);

        let store = open_store(dir.path());
        assert!(std::fs::read(current_path(&store, "b")).unwrap() == b);
        put(&store, "e", 6, 300_000).await;
        let fe = rec(&store, "e").file.unwrap();
        assert!(fe.0 >= files::FILES_PER_DIR, "{fe} after a restart");
        assert!(std::fs::read(current_path(&store, "d")).unwrap() == a2);
        drop(a);
    }

    /// A record from before numbered files (no file number: the file at the path hashed
    /// from its bucket, key, version and shard) is read, replaced and deleted as before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_from_before_numbered_files_are_read_replaced_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let legacy = |key: &str| {
            let mut rec = store.meta.object("bkt", key).unwrap().unwrap();
            let numbered = store.record_path(&rec);
            rec.file = None;
            let hashed = store.shard_path("bkt", key, rec.version_id, rec.shard_index);
            std::fs::create_dir_all(hashed.parent().unwrap()).unwrap();
            std::fs::rename(numbered, &hashed).unwrap();
            store.meta.rewrite_record(&rec).unwrap();
            hashed
        };
        put(&store, "x", 1, 300_000).await;
        put(&store, "y", 2, 300_000).await;
        let (hx, hy) = (legacy("x"), legacy("y"));
        assert_eq!(store.sweep_orphans().unwrap(), 0);
        let (r, bytes) = store.shard("bkt", "x", None).unwrap();
        let mut read = Vec::new();
        store
            .fold_chunks(&r, bytes, 0..2, &mut |_, c| {
                read.extend(c);
                ControlFlow::Continue(())
            })
            .unwrap();
        // Version 1's object is 300,000 bytes of 1s, in chunks of 4 KiB.
        assert_eq!(read.len(), 2 * 4096);
        assert!(read.iter().all(|&b| b == 1));
        let x2 = put(&store, "x", 3, 300_000).await;
        assert!(!hx.exists(), "the replaced version's file is freed");
        assert!(std::fs::read(current_path(&store, "x")).unwrap() == x2);
        store.delete_object("bkt", "y", None).await.unwrap();
        assert!(!hy.exists());
        assert_eq!(stray_files(&store), 0);
    }

    /// Each upload's name is synced into its directory before its record commits: one
    /// directory fsync per upload when they come one at a time, and never more than one
    /// per upload when they run together (they share them).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn uploads_sync_their_directory_and_share_the_fsyncs() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        for (i, key) in ["a", "b", "c"].into_iter().enumerate() {
            put(&store, key, i as u128 + 1, 200_000).await;
            assert_eq!(store.directory_syncs(), i as u64 + 1);
        }
        let uploads: Vec<_> = (0..16)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { put(&store, &format!("k{i}"), 10 + i, 200_000).await })
            })
            .collect();
        for u in uploads {
            u.await.unwrap();
        }
        let syncs = store.directory_syncs();
        assert!(
            (4..=19).contains(&syncs),
            "{syncs} directory fsyncs for 19 uploads"
        );
    }

    /// A shard file open for reading is never overwritten: replaced meanwhile, it is
    /// unlinked rather than pooled, and its reader reads the old version to the end
    /// while other uploads go on. Once no one reads, a replaced file is reused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shard_file_being_read_is_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let v1 = put(&store, "k", 1, 300_000).await;
        let (_, bytes) = store.shard("bkt", "k", None).unwrap();
        let ShardBytes::File(reading) = bytes else {
            panic!("a shard file")
        };
        let mut held = std::fs::File::open(reading.path()).unwrap();
        put(&store, "k", 2, 300_000).await;
        // Would take v1's file, had it been pooled.
        put(&store, "other", 3, 300_000).await;
        assert_eq!(store.shard_files_reused(), 0);
        let mut read = Vec::new();
        held.read_to_end(&mut read).unwrap();
        assert!(read == v1, "a reader's file was overwritten");
        drop(reading);
        put(&store, "k", 4, 300_000).await;
        assert_eq!((pool_files(&store), store.shard_files_reused()), (1, 0));
        let v5 = put(&store, "another", 5, 200_000).await;
        assert_eq!((pool_files(&store), store.shard_files_reused()), (0, 1));
        let path = current_path(&store, "another");
        assert!(std::fs::read(path).unwrap() == v5);
    }

    /// A read hands its chunks over one at a time, and once the last is handed over its
    /// thread ends (the channel closes) without waiting for a receiver that may never
    /// take it: a client that stopped reading holds no blocking thread.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_ends_once_its_last_chunk_is_handed_over() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        // Two data shards of 4 KiB chunks: five stripes.
        let file = put(&store, "k", 1, 40_000).await;
        let (rec, bytes) = store.shard("bkt", "k", None).unwrap();
        let mut rx = store.read_stripes(rec, bytes, 0, 5);
        let mut got = Vec::new();
        for _ in 0..4 {
            got.extend_from_slice(&rx.recv().await.unwrap().unwrap());
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !rx.is_closed() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            rx.is_closed(),
            "the read waits for its last chunk to be taken"
        );
        got.extend_from_slice(&rx.recv().await.unwrap().unwrap());
        assert!(rx.recv().await.is_none());
        let mut expected = Vec::new();
        let mut reader = oed_ec::ShardReader::new(std::io::Cursor::new(file)).unwrap();
        let mut chunk = Vec::new();
        while reader.read_chunk(&mut chunk).unwrap().is_some() {
            expected.append(&mut chunk);
        }
        assert!(got == expected, "the chunks read are the shard's");
    }

    /// A read whose version was replaced under it (its file gone before it was opened)
    /// fails as "not found", neither counted as a checksum failure nor queued for heal;
    /// the current version's file gone is a corrupt shard, counted and queued.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_that_loses_a_race_with_a_write_is_no_corrupt_shard() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        put(&store, "k", 1, 300_000).await;
        let (old, bytes) = store.shard("bkt", "k", None).unwrap();
        let path = store.record_path(&old);
        put(&store, "k", 2, 300_000).await;
        assert!(!path.exists());
        let r = store.fold_chunks(&old, bytes, 0..1, &mut |_, _| ControlFlow::Continue(()));
        assert!(matches!(r, Err(Error::NotFound(_))), "{r:?}");
        assert_eq!((store.checksum_failures(), store.heal_backlog()), (0, 0));
        let (cur, bytes) = store.shard("bkt", "k", None).unwrap();
        std::fs::remove_file(store.record_path(&cur)).unwrap();
        let r = store.fold_chunks(&cur, bytes, 0..1, &mut |_, _| ControlFlow::Continue(()));
        assert!(matches!(r, Err(Error::CorruptShard { .. })), "{r:?}");
        assert_eq!((store.checksum_failures(), store.heal_backlog()), (1, 1));
    }

    /// A read of a version stored again under it (a heal of a drive that had just taken
    /// the client's own upload of that version, as after a restart): the file it was
    /// given went away with the first copy. That is no corrupt shard either: not counted,
    /// not queued for heal (which stored the version once more, and so on), and the
    /// shard reads whole from the record in force. The rolling-restart test saw "stored
    /// shard is corrupt" on a drive about once in 75 runs this way.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_of_a_version_stored_again_under_it_is_no_corrupt_shard() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let file = put(&store, "k", 1, 300_000).await;
        let (first, bytes) = store.shard("bkt", "k", None).unwrap();
        assert_eq!(put(&store, "k", 1, 300_000).await, file);
        let r = store.fold_chunks(&first, bytes, 0..1, &mut |_, _| ControlFlow::Continue(()));
        assert!(matches!(r, Err(Error::NotFound(_))), "{r:?}");
        assert_eq!((store.checksum_failures(), store.heal_backlog()), (0, 0));
        let (cur, bytes) = store.shard("bkt", "k", None).unwrap();
        assert_eq!(cur.version_id, first.version_id);
        let mut n = 0;
        store
            .fold_chunks(&cur, bytes, 0..1, &mut |_, _| {
                n += 1;
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(n, 1);
    }

    /// A pooled file removed behind the daemon's back: the upload that takes it makes a
    /// new file instead, and counts no reuse.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upload_whose_pooled_file_is_gone_makes_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        put(&store, "a", 1, 300_000).await;
        store.delete_object("bkt", "a", None).await.unwrap();
        assert_eq!(pool_files(&store), 1);
        for f in std::fs::read_dir(store.root.join("pool")).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
        let file = put(&store, "b", 2, 300_000).await;
        let path = current_path(&store, "b");
        assert!(std::fs::read(path).unwrap() == file);
        assert_eq!(
            (store.shard_files_reused(), store.shard_file_pool_bytes()),
            (0, 0)
        );
    }

    /// Deleted objects' files are pooled up to `shard_file_pool_bytes`, counted as free
    /// space, given back when a write would find too little, and dropped at a restart.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pool_is_bounded_and_given_back() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().to_owned(),
            inline_threshold_bytes: 0,
            reserve_bytes: 0,
            shard_file_pool_bytes: 400_000,
            ..Config::default()
        };
        let store = Store::open(&config, traffic()).unwrap();
        store.create_bucket("bkt").unwrap();
        for (i, key) in ["a", "b", "c"].into_iter().enumerate() {
            put(&store, key, i as u128 + 1, 300_000).await;
        }
        for key in ["a", "b", "c"] {
            store.delete_object("bkt", key, None).await.unwrap();
        }
        // Files of about 150 KB each: two fit in 400,000 bytes.
        assert_eq!(pool_files(&store), 2);
        let pooled = store.shard_file_pool_bytes();
        assert!(pooled > 250_000 && pooled <= 400_000, "{pooled}");
        // Free space is the file system's plus the pool's: compared on a sample where
        // the file system's did not change meanwhile (other tests write to it too).
        let stable = (0..100).find_map(|_| {
            let before = store.file_system_space().unwrap().1;
            let reported = store.capacity().unwrap().free_bytes;
            (store.file_system_space().unwrap().1 == before).then_some((before, reported))
        });
        let (fs_free, reported) = stable.expect("a quiet moment in 100 samples");
        assert_eq!(reported, fs_free + pooled);
        assert!(matches!(
            store.check_space(u64::MAX / 2).await,
            Err(Error::InsufficientStorage { .. })
        ));
        assert_eq!((pool_files(&store), store.shard_file_pool_bytes()), (0, 0));
        put(&store, "d", 4, 300_000).await;
        store.delete_object("bkt", "d", None).await.unwrap();
        assert_eq!(pool_files(&store), 1);
        drop(store);
        let store = Store::open(&config, traffic()).unwrap();
        assert_eq!((pool_files(&store), store.shard_file_pool_bytes()), (0, 0));
    }

    /// Each completed step of a shard write counts once in `oed_shard_write_seconds`: a
    /// shard file goes through all four, an inline shard has no `data_sync` or `place`, and
    /// an upload refused on the way counts in none after the step that failed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn write_phases_count_each_completed_step() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().to_owned(),
            inline_threshold_bytes: 4096,
            reserve_bytes: 0,
            ..Config::default()
        };
        let store = Store::open(&config, traffic()).unwrap();
        store.create_bucket("bkt").unwrap();
        let counts = |store: &Store| {
            ["receive", "data_sync", "place", "record"].map(|p| {
                let h = store.write_phases().with_label_values(&[p]);
                (h.get_sample_count(), h.get_sample_sum())
            })
        };
        let put = |v: u128, size: usize, keep: usize| {
            let (rec, file) = shard(v, size);
            let piece = Bytes::copy_from_slice(&file[..keep.min(file.len())]);
            let store = store.clone();
            async move {
                let body = futures_util::stream::iter([Ok::<_, std::io::Error>(piece)]);
                store.put_shard(rec, body, false).await
            }
        };

        put(1, 200_000, usize::MAX).await.unwrap(); // a shard file
        let after_file = counts(&store);
        assert_eq!(after_file.map(|c| c.0), [1, 1, 1, 1]);
        assert!(after_file.iter().all(|c| c.1 > 0.0), "{after_file:?}");

        put(2, 3000, usize::MAX).await.unwrap(); // inline: about 1.5 KiB
        assert_eq!(counts(&store).map(|c| c.0), [2, 1, 1, 2]);

        // A body cut short fails its check at the end of the receive: nothing counts.
        put(3, 200_000, 50_000).await.unwrap_err();
        assert_eq!(counts(&store).map(|c| c.0), [2, 1, 1, 2]);
    }

    /// Bodies past the first batch, so a file exists when they fail: one that breaks off,
    /// one whose request is dropped halfway (its client gone). Neither leaves a file or a
    /// record.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_broken_or_abandoned_upload_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let (rec, file) = shard(1, 4 * WRITE_BATCH);
        let first = Bytes::copy_from_slice(&file[..WRITE_BATCH + 1000]);

        let broken = futures_util::stream::iter([
            Ok(first.clone()),
            Err(std::io::Error::other("client gone")),
        ]);
        let err = store
            .put_shard(rec.clone(), broken, false)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::BodyBroken(_)), "{err}");
        assert_eq!(stray_files(&store), 0);

        let stalled = futures_util::stream::iter([Ok::<_, std::io::Error>(first)])
            .chain(futures_util::stream::pending());
        let upload = tokio::spawn({
            let store = store.clone();
            async move { store.put_shard(rec, stalled, false).await }
        });
        let waited = |want: usize| {
            let store = store.clone();
            async move {
                for _ in 0..500 {
                    if stray_files(&store) == want {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                false
            }
        };
        assert!(waited(1).await, "the first batch made no file");
        upload.abort();
        assert!(upload.await.unwrap_err().is_cancelled());
        assert!(
            waited(0).await,
            "the abandoned upload's file is still there"
        );
        assert!(store.meta.object("bkt", "k").unwrap().is_none());
    }

    /// Writes and deletes of one key, far more of them than the blocking pool has threads:
    /// every one finishes. A holder of the key's lock that waited for the pool while
    /// commits filled it waiting for the lock would hang here (and time out).
    #[test]
    fn writes_and_deletes_of_one_key_finish_with_a_small_blocking_pool() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let finished = rt.block_on(async {
            let tasks: Vec<_> = (1..=48u128)
                .map(|v| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        if v % 4 == 0 {
                            match store.delete_object("bkt", "k", None).await {
                                Ok(()) | Err(Error::NotFound(_)) => Ok(()),
                                Err(e) => Err(e),
                            }
                        } else {
                            let (rec, file) = shard(v, 3 * 4096 + 17);
                            let body = futures_util::stream::iter(
                                file.chunks(1000)
                                    .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c)))
                                    .collect::<Vec<_>>(),
                            );
                            match store.put_shard(rec, body, false).await {
                                Ok(_) | Err(Error::Superseded) => Ok(()),
                                Err(e) => Err(e),
                            }
                        }
                    })
                })
                .collect();
            tokio::time::timeout(
                Duration::from_mins(1),
                futures_util::future::join_all(tasks),
            )
            .await
        });
        // A hung blocking task would hold up the runtime's drop, and the test with it.
        rt.shutdown_timeout(Duration::from_secs(5));
        let finished = finished.expect("writes and deletes of one key still waiting after 60 s");
        for done in finished {
            done.unwrap().unwrap();
        }
        // Whatever order they ran in: at most one shard file, the record's, and no other.
        let shards = std::fs::read_dir(&store.shards)
            .unwrap()
            .flat_map(|a| std::fs::read_dir(a.unwrap().path()).unwrap())
            .flat_map(|b| std::fs::read_dir(b.unwrap().path()).unwrap())
            .count();
        let live = store.meta.object("bkt", "k").unwrap();
        assert_eq!(shards, usize::from(live.is_some()));
        assert_eq!(stray_files(&store), 0);
    }
}
