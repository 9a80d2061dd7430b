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

mod drive;
mod files;
pub mod limiter;
pub mod meta;
pub mod near_data;
pub mod op_threads;
mod pool;
pub mod queue;
mod splice;

pub use drive::without_file;
pub use splice::{RawConn, RawUpload};

use std::io::Read;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use prometheus::{HistogramOpts, HistogramVec};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use meta::{Kept, MetaStore};
use oed_meter::traffic::Traffic;
use oed_model::config::{Config, FsyncPolicy};
use oed_model::drive::{Settlement, Stored};
use oed_model::error::{Error, Result};
use oed_model::record::{self, BucketRecord, FileId, ObjectRecord, RecordTail, VersionId};

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
    /// Raw uploads received by `splice` since the start, stored or not ([`splice`]).
    spliced: std::sync::atomic::AtomicU64,
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

    /// The metadata store.
    #[must_use]
    pub fn meta(&self) -> &MetaStore {
        &self.meta
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

    fn lock_for(&self, bucket: &str, key: &str) -> MutexGuard<'_, ()> {
        let h = crc32c::crc32c(&record::object_key(bucket, key));
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

    /// Stores one shard durably; see the module docs for the steps.
    ///
    /// `body` is the shard file (oed-ec format). Its header must agree with `record`
    /// (version, shard index, k, m, chunk size, object length) and every chunk's CRC32C
    /// must match, or nothing is stored. With `with_tail`, the file is followed by a
    /// JSON [`RecordTail`] (at most [`record::MAX_TAIL_BYTES`]) whose fields complete the
    /// record before it is committed; a body without one stores nothing. When the key
    /// already has a newer version here, nothing is stored and [`Error::Superseded`] is
    /// returned. After success the key's
    /// previous version's shard file, if any, is removed, and that version's parts are
    /// returned in [`Stored::replaced_parts`].
    ///
    /// # Errors
    /// [`Error::BadRequest`], [`Error::NotFound`] (bucket), [`Error::Shard`] (bad upload),
    /// [`Error::TooLarge`], [`Error::InsufficientStorage`], [`Error::Superseded`],
    /// [`Error::Io`], [`Error::Meta`]. On every error nothing visible has changed.
    pub async fn put_shard<S, E>(
        &self,
        record: ObjectRecord,
        body: S,
        with_tail: bool,
    ) -> Result<Stored>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (record, expected, mut upload) = self.start_upload(record, with_tail).await?;
        let started = Instant::now();
        // On an error the upload is dropped, and its file with it.
        let tail = upload
            .receive(body, &expected, with_tail, self.fsync)
            .await?;
        self.end_upload(record, &expected, upload, tail, with_tail, started)
            .await
    }

    /// [`Store::put_shard`] for an upload whose bytes come on a connection of their own
    /// (the peer API's `PUT shard` upgraded, `docs/peer-api.md`): on Linux, over plain
    /// TCP, into a file written through the page cache, they go from the socket through
    /// a pipe into the file with `splice`, and are checked over the file's pages
    /// ([`splice`]); otherwise they are read as any upload's body. The connection's
    /// body ends when its sender shuts down its side.
    ///
    /// # Errors
    /// Those of [`Store::put_shard`].
    pub async fn put_shard_raw(
        &self,
        record: ObjectRecord,
        conn: &mut RawUpload,
        with_tail: bool,
    ) -> Result<Stored> {
        let (record, expected, mut upload) = self.start_upload(record, with_tail).await?;
        let started = Instant::now();
        let tail = match &mut upload {
            Upload::File(file) if splice::takes(file, conn) => {
                self.spliced
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                splice::receive(file, conn, &expected, with_tail, self.fsync).await?
            }
            _ => {
                let body = conn.stream();
                upload
                    .receive(body, &expected, with_tail, self.fsync)
                    .await?
            }
        };
        self.end_upload(record, &expected, upload, tail, with_tail, started)
            .await
    }

    /// The checks an upload passes before its body is read, and where it will be
    /// received: the record as it will be stored (no file number yet), the shard header
    /// the body must start with, and the upload (in memory, or a file).
    async fn start_upload(
        &self,
        mut record: ObjectRecord,
        with_tail: bool,
    ) -> Result<(ObjectRecord, oed_ec::ShardHeader, Upload)> {
        record.validate()?;
        // Which file holds the shard is this drive's to say, at the commit.
        record.file = None;
        if self.meta.bucket(&record.bucket)?.is_none() {
            return Err(Error::NotFound(oed_model::error::Missing::Bucket));
        }
        // An upload with a tail gets its final version id only at its end: whether a
        // newer version is stored is known then (at the commit), not now.
        if !with_tail
            && let Some(existing) = self.meta.object(&record.bucket, &record.key)?
            && existing.version_id > record.version_id
        {
            return Err(Error::Superseded);
        }
        let expected = record.shard_header()?;
        if expected.file_len() > self.max_shard_bytes {
            return Err(Error::TooLarge(self.max_shard_bytes));
        }
        self.check_space(expected.file_len()).await?;
        let upload = if expected.file_len() <= self.inline_threshold {
            Upload::Inline(Vec::new())
        } else {
            Upload::File(Box::new(UploadFile::new(
                Arc::clone(&self.files),
                self.direct_io,
                Arc::clone(&self.pool),
            )))
        };
        Ok((record, expected, upload))
    }

    /// An upload received and checked in full: its tail applied to the record, then the
    /// commit ([`Store::commit_upload`]).
    async fn end_upload(
        &self,
        mut record: ObjectRecord,
        expected: &oed_ec::ShardHeader,
        mut upload: Upload,
        tail: Option<RecordTail>,
        with_tail: bool,
        started: Instant,
    ) -> Result<Stored> {
        if let Some(tail) = tail {
            record.etag = tail.etag;
            record.parts = tail.parts;
            record.checksum = tail.checksum;
            if let Some(v) = tail.version_id
                && v != record.version_id
            {
                record.version_id = v;
                record.last_modified_ms = v.millis();
                let header = oed_ec::ShardHeader {
                    version_id: v.0,
                    ..*expected
                };
                upload.restamp(header.encode());
            }
        }
        self.timed("receive", started);
        // The rest is one trip to a blocking thread: the last batch and fsync, the
        // directory's fsync, the synced record. A request dropped meanwhile (its client
        // gone) does not stop it halfway.
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.commit_upload(record, upload, with_tail))
            .await
            .map_err(join_error)?
    }

    /// The end of [`Store::put_shard`], on a blocking thread, for an upload received and
    /// checked in full: a file gets its last batch and, by policy, its fsync and its
    /// directory's, so its data and its name are on disk before a record names it; then,
    /// under the key's commit lock, the record is committed unless a newer version is
    /// stored. A file not committed is removed when dropped. With `keep_replaced` (a
    /// client write), the version it replaces is kept until the write is settled
    /// ([`Store::settle`]); any version kept before is dropped.
    fn commit_upload(
        &self,
        mut record: ObjectRecord,
        upload: Upload,
        keep_replaced: bool,
    ) -> Result<Stored> {
        let (inline, mut temp) = match upload {
            Upload::Inline(data) => (Some(data), None),
            Upload::File(mut temp) => {
                let mut started = Instant::now();
                temp.finish(self.fsync)?;
                started = self.timed("data_sync", started);
                if self.fsync {
                    temp.sync_dir()?;
                    self.timed("place", started);
                }
                record.file = temp.id;
                (None, Some(temp))
            }
        };
        let _guard = self.lock_for(&record.bucket, &record.key);
        let previous = self.meta.object(&record.bucket, &record.key)?;
        if previous
            .as_ref()
            .is_some_and(|p| p.version_id > record.version_id)
        {
            return Err(Error::Superseded);
        }
        let kept_before = self.meta.kept(&record.bucket, &record.key)?;
        let keep = match &previous {
            Some(p) if keep_replaced && p.version_id != record.version_id => Some(Kept {
                record: p.clone(),
                inline: self.meta.inline_shard(&p.bucket, &p.key, p.version_id)?,
            }),
            _ => None,
        };
        // Last step: the record. Until this synced write the new shard is invisible; if
        // it fails, the file goes with `temp`.
        let started = Instant::now();
        self.meta
            .commit_object(&record, previous.as_ref(), inline.as_deref(), keep.as_ref())?;
        let new_path = temp.as_mut().and_then(|t| t.committed());
        self.timed("record", started);
        // Files no record names now: the replaced version's unless it is kept, and the
        // version kept before. A new number never names an old file; checked all the
        // same, since freeing it would lose the shard just stored.
        let still_named = |old: &Path| new_path.as_deref() == Some(old);
        let mut replaced_parts = Vec::new();
        if let Some(prev) = previous {
            let old = self.record_path(&prev);
            if keep.is_none() && !still_named(&old) {
                self.pool.release(&old);
            }
            // The same version sent again keeps its parts.
            if prev.version_id != record.version_id {
                replaced_parts = prev.parts;
            }
        }
        if let Some(k) = kept_before {
            let old = self.record_path(&k.record);
            if !still_named(&old) {
                self.pool.release(&old);
            }
        }
        Ok(Stored {
            record,
            replaced_parts,
            kept: keep.is_some(),
        })
    }

    /// Settles a client write of this drive's: see [`oed_model::drive::Settlement`]. Returns
    /// whether anything changed here.
    ///
    /// # Errors
    /// [`Error::Meta`], [`Error::Record`].
    pub fn settle(&self, s: &Settlement) -> Result<bool> {
        let _guard = self.lock_for(&s.bucket, &s.key);
        let kept = self.meta.kept(&s.bucket, &s.key)?;
        // A stored write with nothing kept (the common case: the scrub asks for every
        // readable object) needs nothing more read.
        if s.stored && kept.is_none() {
            return Ok(false);
        }
        let current = self.meta.object(&s.bucket, &s.key)?;
        if s.stored {
            // The write reached its quorum: what it replaced is not needed any more.
            let Some(k) = kept else { return Ok(false) };
            if k.record.version_id >= s.version_id
                || current.is_none_or(|c| c.version_id < s.version_id)
            {
                return Ok(false);
            }
            self.meta.drop_kept(&s.bucket, &s.key)?;
            self.pool.release(&self.record_path(&k.record));
            return Ok(true);
        }
        // The write failed: its version goes, and the one it replaced comes back.
        match (current, kept) {
            (Some(c), kept) if c.version_id == s.version_id => {
                match &kept {
                    Some(k) => self.meta.restore_kept(k)?,
                    None => self.meta.delete_object(&s.bucket, &s.key)?,
                }
                self.pool.release(&self.record_path(&c));
                Ok(true)
            }
            // A newer write has replaced it since, and keeps it: it is dropped.
            (_, Some(k)) if k.record.version_id == s.version_id => {
                self.meta.drop_kept(&s.bucket, &s.key)?;
                self.pool.release(&self.record_path(&k.record));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Applies one [`oed_model::drive::Relocation`] to the records here, under the key's
    /// commit lock (so it cannot undo a newer version committed meanwhile). Returns
    /// whether they name the new drive now: `false` when no record here is of that
    /// version.
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn relocate(&self, m: &oed_model::drive::Relocation) -> Result<bool> {
        let i = usize::from(m.shard_index);
        let moved = |drives: &mut Vec<String>| -> Option<bool> {
            match drives.get(i) {
                Some(d) if *d == m.to => Some(false),
                Some(d) if *d == m.from => {
                    drives[i].clone_from(&m.to);
                    Some(true)
                }
                _ => None,
            }
        };
        let mut found = false;
        {
            let _guard = self.lock_for(&m.bucket, &m.key);
            if let Some(mut r) = self.meta.object(&m.bucket, &m.key)?
                && r.version_id == m.version_id
                && let Some(changed) = moved(&mut r.drives)
            {
                found = true;
                if changed {
                    self.meta.rewrite_record(&r)?;
                }
            }
        }
        if let Some(parent) = &m.parent {
            let _guard = self.lock_for(&m.bucket, parent);
            if let Some(mut r) = self.meta.object(&m.bucket, parent)? {
                let mut changed = false;
                for p in r
                    .parts
                    .iter_mut()
                    .filter(|p| p.key == m.key && p.version_id == m.version_id)
                {
                    if let Some(c) = moved(&mut p.drives) {
                        found = true;
                        changed |= c;
                    }
                }
                if changed {
                    self.meta.rewrite_record(&r)?;
                }
            }
        }
        Ok(found)
    }

    /// Where the bytes of the stored shard of `bucket`/`key` are, with its record.
    /// `version`, when given, must be the stored one.
    ///
    /// # Errors
    /// [`Error::NotFound`] when no such object (or version) is stored here.
    pub fn shard(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<(ObjectRecord, ShardBytes)> {
        let rec = self
            .meta
            .object(bucket, key)?
            .ok_or(Error::NotFound(oed_model::error::Missing::Object))?;
        if version.is_some_and(|v| v != rec.version_id) {
            return Err(Error::NotFound(oed_model::error::Missing::ObjectVersion));
        }
        if let Some(data) = self.meta.inline_shard(bucket, key, rec.version_id)? {
            return Ok((rec, ShardBytes::Inline(data)));
        }
        let path = self.record_path(&rec);
        // Registered before anyone opens it: the file is not reused while it is read.
        let file = ShardFile {
            _reading: self.pool.reading(&path),
            path,
        };
        Ok((rec, ShardBytes::File(file)))
    }

    /// Deletes the object record and shard of `bucket`/`key`. With `version`, only when
    /// the stored version is not newer (a delete never removes a newer write).
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::Superseded`], [`Error::Meta`].
    pub async fn delete_object(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<()> {
        // On a blocking thread, like a write's commit: a holder of a key's lock must never
        // wait for the blocking pool, which commits waiting for that lock may have filled.
        let (store, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        tokio::task::spawn_blocking(move || store.delete_now(&bucket, &key, version))
            .await
            .map_err(join_error)?
    }

    fn delete_now(&self, bucket: &str, key: &str, version: Option<VersionId>) -> Result<()> {
        let _guard = self.lock_for(bucket, key);
        let rec = self
            .meta
            .object(bucket, key)?
            .ok_or(Error::NotFound(oed_model::error::Missing::Object))?;
        if version.is_some_and(|v| rec.version_id > v) {
            return Err(Error::Superseded);
        }
        let kept = self.meta.kept(bucket, key)?;
        // Record first: a crash after it leaves an orphan file, never a dangling record.
        self.meta.delete_object(bucket, key)?;
        self.pool.release(&self.record_path(&rec));
        if let Some(k) = kept {
            self.pool.release(&self.record_path(&k.record));
        }
        Ok(())
    }

    /// Removes shard files that no record points to (left by a crash between a file's
    /// creation and its record's commit, or between a record's deletion and its file's).
    /// Returns how many. Safe while the drive takes writes: a file being written whose
    /// record is not committed yet is left alone (`files::Placements`).
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Meta`].
    pub fn sweep_orphans(&self) -> Result<u64> {
        // From now until the end, every placement is remembered, as are those already in
        // flight: a file placed before the records are read below but recorded after
        // is one of those, and must stay.
        self.files.begin_sweep();
        let result = self.sweep_unplaced();
        self.files.end_sweep();
        result
    }

    fn sweep_unplaced(&self) -> Result<u64> {
        let mut wanted = std::collections::HashSet::new();
        self.meta.for_each_object(|r| {
            wanted.insert(self.record_path(&r));
        })?;
        let mut removed = 0;
        for a in std::fs::read_dir(&self.shards)? {
            for b in std::fs::read_dir(a?.path())? {
                for f in std::fs::read_dir(b?.path())? {
                    let path = f?.path();
                    if wanted.contains(&path) {
                        continue;
                    }
                    // Checked and removed under the lock: a placement of this path
                    // registers before its file appears, so it either protects the file
                    // or makes it after the removal.
                    let p = self.files.lock_placements();
                    if !p.protects(&path) {
                        match std::fs::remove_file(&path) {
                            Ok(()) => removed += 1,
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
            }
        }
        Ok(removed)
    }

    /// Reads every chunk of this drive's shard of `record` and checks its CRC32C, taking
    /// each chunk's bytes from `limit` first; returns the bytes read. A bad chunk or a
    /// missing file is logged and queued for heal (cause `scrub_corrupt`). The pages read
    /// are dropped from the page cache afterwards, so a scrub does not push out what
    /// clients read. Blocks.
    ///
    /// # Errors
    /// [`Error::CorruptShard`]; [`Error::NotFound`] when the version is no longer stored.
    pub fn scrub_shard(
        &self,
        record: &ObjectRecord,
        limit: &crate::limiter::Limiter,
    ) -> Result<u64> {
        let (rec, bytes) = self.shard(&record.bucket, &record.key, Some(record.version_id))?;
        let path = match &bytes {
            ShardBytes::File(p) => Some(p.path().to_owned()),
            ShardBytes::Inline(_) => None,
        };
        let stripes = rec.layout()?.stripe_count(rec.size);
        let mut read = 0u64;
        let r = for_each_chunk(bytes, 0, stripes, &mut |_, buf| {
            limit.take_blocking(buf.len() as u64);
            read += buf.len() as u64;
            ControlFlow::Continue(())
        });
        if let Some(p) = path
            && let Ok(f) = std::fs::File::open(p)
        {
            let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
        }
        match r {
            // Replaced or deleted while it was read.
            Err(Error::CorruptShard { .. }) if !self.still_stored(&rec) => {
                Err(Error::NotFound(oed_model::error::Missing::ObjectVersion))
            }
            Err(Error::CorruptShard { stripe }) => {
                tracing::error!(bucket = %rec.bucket, key = %rec.key, stripe, "scrub: stored shard is corrupt");
                if let Err(q) = self
                    .meta
                    .queue_corrupt(&rec, oed_model::heal::HealCause::ScrubCorrupt)
                {
                    tracing::warn!(error = %q, "heal queue");
                }
                Err(Error::CorruptShard { stripe })
            }
            Err(e) => Err(e),
            Ok(()) => Ok(read),
        }
    }

    /// Removes leftovers older than `grace`: files in `tmp/` (left by versions before
    /// numbered files), and shard files that no record points to and no upload writes. Returns how many of each.
    /// Younger ones may belong to writes in progress and stay. Blocks.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Meta`].
    pub fn sweep_aged(&self, grace: std::time::Duration) -> Result<(u64, u64)> {
        let old = |p: &Path| {
            std::fs::metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > grace))
        };
        let mut temp = 0;
        for f in std::fs::read_dir(&self.tmp)? {
            let path = f?.path();
            if old(&path) && std::fs::remove_file(&path).is_ok() {
                temp += 1;
            }
        }
        // The first 8 bytes of each wanted file's name: a collision keeps an orphan,
        // never removes a shard.
        let mut wanted = std::collections::HashSet::new();
        self.meta.for_each_object(|r| {
            let p = self.record_path(&r);
            wanted.insert(name_prefix(&p));
        })?;
        let mut files = 0;
        for a in std::fs::read_dir(&self.shards)? {
            for b in std::fs::read_dir(a?.path())? {
                for f in std::fs::read_dir(b?.path())? {
                    let path = f?.path();
                    if wanted.contains(&name_prefix(&path)) || !old(&path) {
                        continue;
                    }
                    // An upload writing over a freed file keeps the file's old time until
                    // its first bytes land: placements are checked, under their lock.
                    let p = self.files.lock_placements();
                    if !p.protects(&path) && std::fs::remove_file(&path).is_ok() {
                        files += 1;
                    }
                }
            }
        }
        Ok((temp, files))
    }

    /// Flushes the metadata store (at shutdown).
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn flush(&self) -> Result<()> {
        self.meta.flush()
    }
}

/// The first 8 bytes of a shard file's name (hex of a hash).
fn name_prefix(p: &Path) -> u64 {
    p.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.get(..16))
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .unwrap_or(0)
}

/// An upload being received: in memory when it will be inlined, else a file.
enum Upload {
    Inline(Vec<u8>),
    /// Boxed: its state (the `O_DIRECT` stage, placement, directory ticket) is far larger
    /// than the other variant's.
    File(Box<UploadFile>),
}

/// Bytes collected before they are written to the file.
const WRITE_BATCH: usize = 512 * 1024;

/// A shard upload's file, numbered and opened at its first batch ([`files`]), with the
/// body's pieces received since the last batch was written (reference-counted `Bytes` as
/// they came, no copy into a buffer of ours). The file is a freed one from the pool,
/// renamed to its number, when there is one (overwritten from its start, cut to its new
/// length when finished), else a new one. Dropped before [`UploadFile::committed`], it
/// removes its file: whatever fails on the way, an upload leaves nothing behind.
#[derive(Default)]
struct UploadFile {
    /// Where the file is, once it is; `None` again once its record is committed (and in
    /// the empty value a batch's trip leaves behind).
    path: Option<PathBuf>,
    /// Its number, once it has one.
    id: Option<FileId>,
    /// Numbers, directories and placements; `None` in the empty value.
    files: Option<Arc<files::Files>>,
    /// The file's registration as being placed, from before it appears until it is
    /// committed or removed.
    placing: Option<files::Placing>,
    /// The claim on its directory's fsync, taken when its name appeared there.
    dir_ticket: Option<files::DirTicket>,
    file: Option<std::fs::File>,
    pending: Vec<Bytes>,
    pending_len: usize,
    /// Bytes of the file received so far (written or pending).
    len: u64,
    /// Where a freed file comes from; `None` in the empty value.
    pool: Option<Arc<pool::Pool>>,
    /// The length of the freed file being overwritten, if it is one.
    reused_len: Option<u64>,
    /// A header that replaces the one received, written over it when the file is
    /// finished (the version's final id came in the tail).
    header: Option<[u8; oed_ec::format::HEADER_LEN]>,
    /// Written with `O_DIRECT` (asked for, and the file system took it): whole blocks
    /// from `direct`'s aligned buffer.
    direct: Option<Direct>,
    /// `O_DIRECT` asked for (`direct_io`), for the file not opened yet.
    want_direct: bool,
}

/// The block size `O_DIRECT` writes are aligned to: the page size, which every device's
/// logical block size divides.
const DIRECT_ALIGN: usize = 4096;
/// Bytes staged in the aligned buffer per `O_DIRECT` write.
const DIRECT_STAGE: usize = 128 * 1024;

/// The state of an upload's file written with `O_DIRECT`: an aligned buffer with the bytes not yet
/// written (less than a block between batches) and where they go in the file.
struct Direct {
    /// `DIRECT_STAGE + DIRECT_ALIGN` bytes; the aligned region starts at `start`.
    buf: Vec<u8>,
    start: usize,
    filled: usize,
    offset: u64,
}

impl Direct {
    fn new() -> Self {
        let buf = vec![0u8; DIRECT_STAGE + DIRECT_ALIGN];
        let start = buf.as_ptr().align_offset(DIRECT_ALIGN);
        assert!(start < DIRECT_ALIGN, "a byte buffer can be aligned");
        Self {
            buf,
            start,
            filled: 0,
            offset: 0,
        }
    }

    /// Copies `data` into the buffer, writing each full stage (whole blocks) to `f`. On
    /// an error, also says how much of `data` the buffer took (still staged, unwritten).
    fn write(&mut self, f: &std::fs::File, data: &[u8]) -> Result<(), (usize, std::io::Error)> {
        let mut taken = 0;
        while taken < data.len() {
            let take = (DIRECT_STAGE - self.filled).min(data.len() - taken);
            let at = self.start + self.filled;
            self.buf[at..at + take].copy_from_slice(&data[taken..taken + take]);
            self.filled += take;
            taken += take;
            if self.filled == DIRECT_STAGE {
                self.flush_blocks(f).map_err(|e| (taken, e))?;
            }
        }
        Ok(())
    }

    /// Writes the whole blocks staged and keeps the rest (less than a block).
    fn flush_blocks(&mut self, f: &std::fs::File) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let whole = self.filled / DIRECT_ALIGN * DIRECT_ALIGN;
        if whole == 0 {
            return Ok(());
        }
        f.write_all_at(&self.buf[self.start..self.start + whole], self.offset)?;
        self.offset += whole as u64;
        self.buf
            .copy_within(self.start + whole..self.start + self.filled, self.start);
        self.filled -= whole;
        Ok(())
    }

    /// Writes what is left (less than a block, at the end of the file) through `f`, a
    /// descriptor without `O_DIRECT`.
    fn finish(&mut self, f: &std::fs::File) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        f.write_all_at(&self.buf[self.start..self.start + self.filled], self.offset)?;
        self.offset += self.filled as u64;
        self.filled = 0;
        Ok(())
    }
}

/// Temp files opened with `O_DIRECT` by this process (for the tests).
static DIRECT_FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Logs once per process that the file system refused `O_DIRECT`.
fn direct_refused(e: &std::io::Error) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(error = %e, "direct_io: the data file system refuses O_DIRECT; writing through the page cache");
    });
}

impl UploadFile {
    fn new(files: Arc<files::Files>, direct_io: bool, pool: Arc<pool::Pool>) -> Self {
        Self {
            path: None,
            id: None,
            files: Some(files),
            placing: None,
            dir_ticket: None,
            file: None,
            pending: Vec::new(),
            pending_len: 0,
            len: 0,
            pool: Some(pool),
            reused_len: None,
            header: None,
            direct: None,
            want_direct: direct_io,
        }
    }

    fn push(&mut self, piece: Bytes) {
        self.pending_len += piece.len();
        self.len += piece.len() as u64;
        self.pending.push(piece);
    }

    /// Numbers the file and opens it, with `O_DIRECT` where asked for and taken: a freed
    /// file from the pool renamed to its number if there is one, else a new one. The
    /// file is registered as being placed before it appears, and its directory's fsync
    /// ticket taken once it has. Blocks.
    fn open(&mut self) -> std::io::Result<std::fs::File> {
        let files = Arc::clone(self.files.as_ref().expect("an upload's file"));
        let (id, path) = files.allocate()?;
        self.placing = Some(files.placing(&path));
        let pool = self.pool.clone().expect("an upload's pool");
        let reused = pool
            .take()
            .and_then(|(freed, len)| match files::rename_new(&freed, &path) {
                Ok(()) => Some(len),
                Err(e) => {
                    tracing::warn!(error = %e, path = %freed.display(), "shard file pool: a freed file cannot be reused");
                    remove_file_if_exists(&freed);
                    None
                }
            });
        // A renamed file is this upload's from now on (removed if it fails); a new one
        // once it is made.
        if reused.is_some() {
            self.path = Some(path.clone());
        }
        let f = self.open_at(&path, reused.is_none())?;
        self.path = Some(path);
        self.id = Some(id);
        self.dir_ticket = Some(files.ticket(id));
        if reused.is_some() {
            pool.reusing();
            self.reused_len = reused;
        }
        Ok(f)
    }

    /// Opens `path` for writing (`create`: a new file), with `O_DIRECT` where asked for
    /// and taken.
    fn open_at(&mut self, path: &Path, create: bool) -> std::io::Result<std::fs::File> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut options = std::fs::OpenOptions::new();
        // Readable too: a spliced upload checks its bytes over the file's pages.
        options.read(true).write(true).create_new(create);
        if self.want_direct {
            #[cfg(target_os = "linux")]
            match options.clone().custom_flags(libc::O_DIRECT).open(path) {
                Ok(f) => {
                    self.direct = Some(Direct::new());
                    DIRECT_FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Ok(f);
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    direct_refused(&e);
                    // The refusal may come after the file was made: it is ours either
                    // way (its number is new), so the second open may find it there.
                    if create {
                        options.create_new(false).create(true);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        options.open(path)
    }

    /// Writes the pending pieces, creating the file at the first call. Blocks.
    fn write_pending(&mut self) -> std::io::Result<&std::fs::File> {
        use std::io::Write;
        let mut f = match self.file.take() {
            Some(f) => f,
            None => self.open()?,
        };
        let pending = std::mem::take(&mut self.pending);
        self.pending_len = 0;
        let mut pieces = pending.iter();
        if let Some(direct) = self.direct.as_mut() {
            for p in pieces.by_ref() {
                match direct.write(&f, p) {
                    Ok(()) => {}
                    // Some file systems take the flag and refuse the writes: go on
                    // through the page cache from the bytes not yet written.
                    Err((taken, e)) if e.raw_os_error() == Some(libc::EINVAL) => {
                        direct_refused(&e);
                        f = self.leave_direct()?;
                        f.write_all(&p[taken..])?;
                        break;
                    }
                    Err((_, e)) => return Err(e),
                }
            }
        }
        for p in pieces {
            f.write_all(p)?;
        }
        Ok(self.file.insert(f))
    }

    /// Stops writing with `O_DIRECT`: the staged bytes are written through a new
    /// descriptor without it, positioned after them.
    fn leave_direct(&mut self) -> std::io::Result<std::fs::File> {
        use std::io::{Seek, SeekFrom};
        let mut direct = self.direct.take().expect("in direct mode");
        let path = self.path.as_ref().expect("an upload's file, opened");
        let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
        direct.finish(&f)?;
        f.seek(SeekFrom::Start(direct.offset))?;
        Ok(f)
    }

    /// Writes the pending pieces on one trip to a blocking thread. With `fsync`, the
    /// batch's writeback to the disk starts at once ([`start_writeback`]), so the disk
    /// works while the rest of the body arrives.
    async fn write_batch(&mut self, fsync: bool) -> Result<()> {
        let mut temp = std::mem::take(self);
        *self = tokio::task::spawn_blocking(move || {
            temp.write_pending()?;
            let buffered = temp.direct.is_none();
            if fsync && buffered {
                start_writeback(temp.file.as_ref().expect("written above"));
            }
            Ok::<_, std::io::Error>(temp)
        })
        .await
        .map_err(join_error)??;
        Ok(())
    }

    /// Writes the last pieces and, with `fsync`, syncs the file, which then waits only for
    /// the last batch and the journal; closes it. Blocks.
    fn finish(&mut self, fsync: bool) -> std::io::Result<()> {
        let header = self.header.take();
        self.write_pending()?;
        if self.direct.is_some() {
            // The last partial block, and a new header, go through the page cache.
            let f = self.leave_direct()?;
            self.file = Some(f);
        }
        let f = self.file.as_ref().expect("written above");
        if let Some(h) = header {
            std::os::unix::fs::FileExt::write_all_at(f, &h, 0)?;
        }
        // A freed file longer than this shard keeps none of its old bytes.
        if self.reused_len.is_some_and(|old| old > self.len) {
            f.set_len(self.len)?;
        }
        if fsync {
            f.sync_all()?;
        }
        self.file = None;
        Ok(())
    }

    /// Returns once the file's name is on disk: the fsync of its directory, shared with
    /// the uploads that named files there meanwhile ([`files::DirSync`]). With the
    /// file's own fsync before it ([`UploadFile::finish`]) and the record commit after it,
    /// this is the durable write:
    /// 1. the file written at its number and fsynced: data on disk, no record names it;
    /// 2. its directory fsynced: the name survives a power cut;
    /// 3. then (caller) the record, in a synced RocksDB write: only now is it visible,
    ///    and [`UploadFile::committed`] keeps the file.
    ///
    /// Blocks.
    fn sync_dir(&self) -> std::io::Result<()> {
        self.dir_ticket
            .as_ref()
            .map_or(Ok(()), files::DirTicket::sync)
    }

    /// Marks the file as named by its committed record, so that dropping this does not
    /// remove it; returns where it is.
    fn committed(&mut self) -> Option<PathBuf> {
        self.path.take()
    }
}

impl Drop for UploadFile {
    /// Removes a file that no record came to name. On an upload's error path this may
    /// run on a runtime worker: one unlink.
    fn drop(&mut self) {
        self.file = None; // closed first: not every system removes an open file
        if let Some(path) = &self.path {
            remove_file_if_exists(path);
        }
    }
}

/// An upload whose shard header is not the one its record makes.
fn header_mismatch() -> Error {
    Error::BadRequest(
        "shard header does not match the record (version, shard index, k, m, chunk size or \
         object length)"
            .into(),
    )
}

fn join_error(e: tokio::task::JoinError) -> Error {
    Error::Io(std::io::Error::other(e))
}

impl Upload {
    /// Replaces the shard file's header, received first, with `header`.
    fn restamp(&mut self, header: [u8; oed_ec::format::HEADER_LEN]) {
        match self {
            Upload::Inline(mem) => mem[..oed_ec::format::HEADER_LEN].copy_from_slice(&header),
            Upload::File(temp) => temp.header = Some(header),
        }
    }

    /// Receives and checks the whole body: its header must be `expected` (checked as soon
    /// as it has arrived, so a wrong upload is refused early), every frame's CRC32C must
    /// match, and the file must end after its last frame, where the tail follows when
    /// `with_tail` is set. A file is written in batches of about [`WRITE_BATCH`]
    /// bytes, their writeback started when the shard will be fsynced (`fsync`).
    async fn receive<S, E>(
        &mut self,
        mut body: S,
        expected: &oed_ec::ShardHeader,
        with_tail: bool,
        fsync: bool,
    ) -> Result<Option<RecordTail>>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let mut verifier = oed_ec::StreamVerifier::new();
        let mut header_checked = false;
        let mut tail: Vec<u8> = Vec::new();
        let file_len = expected.file_len();
        while let Some(piece) = body.next().await {
            // A body that breaks off is the sender's doing (a coordinator aborting a
            // write, a peer gone), not a fault of this drive.
            let mut piece = piece.map_err(|e| Error::BodyBroken(e.into().to_string()))?;
            let room = file_len - verifier.bytes_seen();
            if piece.len() as u64 > room {
                // Checked before the verifier sees it, so a huge body is refused early.
                let extra = piece.split_off(room as usize);
                if !with_tail || tail.len() + extra.len() > record::MAX_TAIL_BYTES {
                    return Err(Error::Shard(oed_ec::Error::TrailingData));
                }
                tail.extend_from_slice(&extra);
            }
            if piece.is_empty() {
                continue;
            }
            verifier.feed(&piece)?;
            if !header_checked && let Some(h) = verifier.header() {
                if h != expected {
                    return Err(header_mismatch());
                }
                header_checked = true;
            }
            match self {
                Upload::Inline(mem) => mem.extend_from_slice(&piece),
                Upload::File(temp) => {
                    temp.push(piece);
                    if temp.pending_len >= WRITE_BATCH {
                        temp.write_batch(fsync).await?;
                    }
                }
            }
        }
        end_of_upload(verifier, with_tail, &tail)
    }
}

/// The end of an upload's body: the shard file must be whole (`verifier`), and the bytes
/// after it (`tail`) the record tail when `with_tail` is set (none otherwise, checked by
/// the caller as they came).
fn end_of_upload(
    verifier: oed_ec::StreamVerifier,
    with_tail: bool,
    tail: &[u8],
) -> Result<Option<RecordTail>> {
    verifier.finish()?;
    if !with_tail {
        return Ok(None);
    }
    serde_json::from_slice(tail)
        .map(Some)
        .map_err(|e| Error::BadRequest(format!("record tail after the shard file: {e}")))
}

impl Store {
    /// Reads and checks stripes `from..to` of `record`'s shard, whose bytes
    /// [`Store::shard`] gave, on a blocking thread: each chunk's bytes (CRC32C checked,
    /// CRC stripped) arrive on the returned channel, one read ahead of the receiver. A
    /// bad or missing chunk is logged and queued for heal ([`MetaStore::queue_corrupt`]),
    /// and arrives as [`Error::CorruptShard`] naming its stripe, which ends the stream.
    /// Reading stops when the receiver is dropped.
    #[must_use]
    pub fn read_stripes(
        &self,
        record: ObjectRecord,
        bytes: ShardBytes,
        from: u64,
        to: u64,
    ) -> mpsc::Receiver<Result<Bytes>> {
        let (tx, rx) = mpsc::channel(1);
        let store = self.clone();
        // The read outlives the call: it logs in the span of the request it serves.
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _in = span.enter();
            let Err(e) = read_stripes_into(bytes, from, to, &tx) else {
                return;
            };
            let _ = tx.blocking_send(Err(store.failed_read(&record, e)));
        });
        rx
    }
}

impl Store {
    /// Hands `f` each chunk of stripes `from..to` of the shard whose bytes [`Store::shard`]
    /// gave, as [`for_each_chunk`] does; a bad chunk is noted as a read's is
    /// ([`Store::failed_read`]) and returned. Blocks.
    ///
    /// # Errors
    /// [`Error::CorruptShard`] naming the bad chunk's stripe; [`Error::Io`].
    pub(crate) fn fold_chunks(
        &self,
        record: &ObjectRecord,
        bytes: ShardBytes,
        stripes: std::ops::Range<u64>,
        f: &mut dyn FnMut(u64, Vec<u8>) -> ControlFlow<()>,
    ) -> Result<()> {
        for_each_chunk(bytes, stripes.start, stripes.end, f)
            .map_err(|e| self.failed_read(record, e))
    }

    /// The CRC32C stored with the chunk of each stripe of `stripes` (its frame's CRC with
    /// the stripe number taken off): what was written, read without the chunks, 4 bytes a
    /// stripe. Only stripes whose chunks are all data (every stripe but the last).
    ///
    /// # Errors
    /// [`Error::CorruptShard`] for a shard file shorter than its frames; I/O errors.
    pub(crate) fn chunk_crcs(
        &self,
        record: &ObjectRecord,
        bytes: &ShardBytes,
        stripes: std::ops::Range<u64>,
    ) -> Result<Vec<u32>> {
        stored_crcs(record, bytes, stripes).map_err(|e| self.failed_read(record, e))
    }

    /// The disk could not read the chunk of stripe `stripe` of `record`'s shard while it
    /// was sent from the file: it is noted as a bad chunk of a read is
    /// ([`Store::failed_read`]).
    pub fn read_failed(&self, record: &ObjectRecord, stripe: u64) {
        let _ = self.failed_read(record, Error::CorruptShard { stripe });
    }

    /// A shard read failed: when a chunk was bad, logs it and queues the shard for heal.
    fn failed_read(&self, record: &ObjectRecord, e: Error) -> Error {
        let Error::CorruptShard { stripe } = e else {
            return e;
        };
        if !self.still_stored(record) {
            return Error::NotFound(oed_model::error::Missing::ObjectVersion);
        }
        tracing::error!(bucket = %record.bucket, key = %record.key, stripe, "stored shard is corrupt");
        if let Err(q) = self
            .meta
            .queue_corrupt(record, oed_model::heal::HealCause::ReadCorrupt)
        {
            tracing::warn!(error = %q, "heal queue");
        }
        e
    }

    /// Whether `record`'s version is still stored here (current, or kept for its
    /// replacement's settlement). A read that fails on a version replaced or deleted
    /// since it began lost a race with that write (its file went away under it), which
    /// is no sign of a corrupt disk: it is not counted or healed. An error reading the
    /// records counts as stored.
    fn still_stored(&self, record: &ObjectRecord) -> bool {
        let (b, k, v) = (&record.bucket, &record.key, record.version_id);
        match (self.meta.object(b, k), self.meta.kept(b, k)) {
            (Ok(cur), Ok(kept)) => {
                cur.is_some_and(|c| c.version_id == v)
                    || kept.is_some_and(|c| c.record.version_id == v)
            }
            _ => true,
        }
    }
}

/// [`Store::chunk_crcs`], without the heal queue.
fn stored_crcs(
    record: &ObjectRecord,
    bytes: &ShardBytes,
    stripes: std::ops::Range<u64>,
) -> Result<Vec<u32>> {
    let chunk = u64::from(record.chunk_size);
    let frame = chunk + oed_ec::format::CRC_LEN as u64;
    let at = |s: u64| oed_ec::format::HEADER_LEN as u64 + s * frame + chunk;
    let mut out = Vec::with_capacity(usize::try_from(stripes.end - stripes.start).unwrap_or(0));
    let mut b = [0u8; 4];
    let file = match bytes {
        ShardBytes::File(path) => match std::fs::File::open(path) {
            Ok(f) => {
                // 4 bytes a chunk: no readahead of the chunks around them. Advice only;
                // a kernel that refuses it reads as usual.
                let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random);
                Some(f)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::CorruptShard {
                    stripe: stripes.start,
                });
            }
            Err(e) => return Err(e.into()),
        },
        ShardBytes::Inline(_) => None,
    };
    for s in stripes {
        match (&file, bytes) {
            (Some(f), _) => {
                use std::os::unix::fs::FileExt as _;
                f.read_exact_at(&mut b, at(s)).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        Error::CorruptShard { stripe: s }
                    } else {
                        e.into()
                    }
                })?;
            }
            (None, ShardBytes::Inline(data)) => {
                let o = usize::try_from(at(s)).unwrap_or(usize::MAX);
                let got = data
                    .get(o..o.saturating_add(4))
                    .filter(|g| g.len() == 4)
                    .ok_or(Error::CorruptShard { stripe: s })?;
                b.copy_from_slice(got);
            }
            (None, ShardBytes::File(_)) => unreachable!("opened above"),
        }
        out.push(oed_ops::checksum::crc32c_unappend(
            u32::from_le_bytes(b),
            &s.to_le_bytes(),
        ));
    }
    Ok(out)
}

/// Sends the checked chunks of stripes `from..to` to `tx` until the end, a failure (returned), or
/// the receiver going away. Runs on a blocking thread of the runtime. A chunk is read
/// only once the receiver has taken the one before it, so that one chunk waits for it
/// while it works on another: without that wait the next chunk was read while the last
/// still sat in the channel, and the coordinator of 4 MiB GETs held about one more
/// 256 KiB chunk per GET (`docs/benchmarks.md`, "Memory under load").
fn read_stripes_into(
    bytes: ShardBytes,
    from: u64,
    to: u64,
    tx: &mpsc::Sender<Result<Bytes>>,
) -> Result<()> {
    let runtime = tokio::runtime::Handle::current();
    for_each_chunk(bytes, from, to, &mut |stripe, buf| {
        if tx.blocking_send(Ok(Bytes::from(buf))).is_err() {
            return ControlFlow::Break(());
        }
        // After the last chunk there is nothing to read ahead of: the thread ends
        // now rather than waiting on a client that may have stopped reading.
        if stripe + 1 >= to {
            return ControlFlow::Break(());
        }
        // The channel holds one: a permit is free once the receiver took the chunk.
        match runtime.block_on(tx.reserve()) {
            Ok(_taken) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    })
}

/// Hands `f` each chunk of stripes `from..to` (its stripe and its bytes, CRC32C checked and
/// stripped) until the end, a failure (returned: a bad or missing chunk is
/// [`Error::CorruptShard`] naming its stripe), or `f` breaks. Blocks.
fn for_each_chunk(
    bytes: ShardBytes,
    from: u64,
    to: u64,
    f: &mut dyn FnMut(u64, Vec<u8>) -> ControlFlow<()>,
) -> Result<()> {
    /// Fills the empty `buf` with the next `n` bytes of `r`.
    type Fill<R> = fn(&mut R, &mut Vec<u8>, usize) -> std::io::Result<()>;
    fn run<R: Read + std::io::Seek>(
        r: R,
        fill: Fill<R>,
        from: u64,
        to: u64,
        f: &mut dyn FnMut(u64, Vec<u8>) -> ControlFlow<()>,
    ) -> Result<()> {
        // A header that does not decode (its checksum, magic or fields, a file cut
        // inside it) is a corrupt shard like a bad chunk: it is healed, not just refused.
        let bad_header = |e: oed_ec::Error| match e {
            oed_ec::Error::Io(io) if io.kind() != std::io::ErrorKind::UnexpectedEof => {
                Error::Io(io)
            }
            _ => Error::CorruptShard { stripe: from },
        };
        let mut reader = oed_ec::ShardReader::new(r).map_err(bad_header)?;
        if from < to {
            reader.seek_to_stripe(from)?;
        }
        for stripe in from..to {
            let mut buf = Vec::new();
            match reader.read_chunk_with(&mut buf, fill) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(
                    oed_ec::Error::CorruptChunk { stripe } | oed_ec::Error::Truncated { stripe },
                ) => {
                    return Err(Error::CorruptShard { stripe });
                }
                // The disk could not read the sector: the chunk is lost like a rotten one,
                // and rewriting the shard (heal) moves it to good sectors.
                Err(oed_ec::Error::Io(e))
                    if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()) =>
                {
                    return Err(Error::CorruptShard { stripe });
                }
                Err(e) => return Err(e.into()),
            }
            if f(stripe, buf).is_break() {
                return Ok(());
            }
        }
        Ok(())
    }
    match bytes {
        ShardBytes::Inline(data) => run(
            std::io::Cursor::new(data),
            oed_ec::format::read_zeroed,
            from,
            to,
            f,
        ),
        ShardBytes::File(path) => match std::fs::File::open(&path) {
            // No BufReader: each frame is one read straight into the chunk's buffer.
            Ok(file) => run(file, read_uninit, from, to, f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(Error::CorruptShard { stripe: from })
            }
            Err(e) => Err(e.into()),
        },
    }
}

/// Fills the empty `buf` with the next `n` bytes of `file`, read straight into the
/// vector's spare capacity: zeroing a 256 KiB buffer before each read cost a drive
/// serving shards about as much CPU as the read's copy out of the page cache.
///
/// # Errors
/// What the read returns; an end of file before `n` bytes is `UnexpectedEof`.
#[cfg(unix)]
#[expect(
    unsafe_code,
    reason = "std reads only into initialised memory on stable Rust"
)]
pub fn read_uninit(file: &mut std::fs::File, buf: &mut Vec<u8>, n: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    debug_assert!(buf.is_empty());
    buf.reserve_exact(n);
    while buf.len() < n {
        let want = n - buf.len();
        let spare = buf.spare_capacity_mut();
        debug_assert!(spare.len() >= want);
        // SAFETY: `spare` is memory the vector owns, at least `want` bytes long, and
        // nothing else refers to it; read(2) writes at most `want` bytes there.
        let got = unsafe { libc::read(file.as_raw_fd(), spare.as_mut_ptr().cast(), want) };
        match usize::try_from(got) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            // SAFETY: read(2) initialised the `got <= want` bytes after the old length.
            Ok(got) => unsafe { buf.set_len(buf.len() + got) },
            Err(_) => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

#[cfg(not(unix))]
pub(crate) fn read_uninit(
    file: &mut std::fs::File,
    buf: &mut Vec<u8>,
    n: usize,
) -> std::io::Result<()> {
    oed_ec::format::read_zeroed(file, buf, n)
}

/// Asks the kernel to start writing `file`'s dirty pages to the disk, without waiting (Linux
/// `sync_file_range` over the whole file with `SYNC_FILE_RANGE_WRITE` only: pages already
/// being written are skipped, so each call sends the batch just written). It promises no
/// durability: the fsync after the last batch ([`UploadFile::finish`]) does that, and
/// finds less left to do. A failure here changes nothing and is left for that fsync to
/// report.
#[cfg(target_os = "linux")]
#[expect(
    unsafe_code,
    reason = "sync_file_range has no safe wrapper in std or rustix"
)]
fn start_writeback(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for as long as `file` is borrowed; the call reads no
    // memory of ours. Offset 0 and length 0 mean the whole file.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &std::fs::File) {}

fn remove_file_if_exists(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "could not remove file");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
