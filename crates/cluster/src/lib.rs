//! The cluster as a coordinator sees it: the map, a [`Drive`] for every drive, and the
//! operations that span drives. The drive that receives a client request coordinates it:
//! it places the object ([`map::ClusterMap::place`]), streams its stripes to the drives
//! ([`write`]), reads them back through a [`stripes::StripeSource`], with parity when a
//! drive fails ([`read`]), and merges the drives' listings ([`list`]). Work a request
//! leaves running after its handler returns (a response body being read, shard uploads)
//! runs as [`RequestTasks`], which shutdown waits for.
//!
//! Which version of an object is current is decided by its [`VersionId`] (time, then
//! random bits): every drive keeps the newest it was sent, and a reader takes the newest
//! version that at least `k` drives hold, so a write that did not reach its quorum is
//! never shown.

pub mod accounts;
pub mod amend;
pub mod budget;
pub mod compute;
pub mod init;
pub mod list;
pub mod md5;
pub mod read;
pub mod settle;
pub mod stripes;
pub mod versions;
pub mod write;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use oed_model::drive::{Drive, DriveError, ErrorCode};
use oed_model::error::{Error, Result};
use oed_model::map::ClusterMap;
use oed_model::record::{BucketRecord, ObjectRecord, VersionId};
use oed_peer::auth::PeerKey;
use oed_peer::client::PeerClient;
use oed_store::Store;

/// The tasks requests leave running after their handlers return: a response body being
/// read from the drives, the shard uploads of a write. Each runs in the span of the
/// request that spawned it. Shutdown closes the set and waits for them; past the grace
/// period it cancels what is left ([`RequestTasks::cancel`]). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct RequestTasks {
    tracker: TaskTracker,
    cancel: CancellationToken,
}

impl RequestTasks {
    /// Runs `task` in the current span; its handle yields `None` if it was cancelled.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<Option<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let cancel = self.cancel.clone();
        let task = async move {
            tokio::select! {
                out = task => Some(out),
                () = cancel.cancelled() => None,
            }
        };
        self.tracker
            .spawn(task.instrument(tracing::Span::current()))
    }

    /// Takes no more tasks and waits for the running ones.
    pub async fn close_and_wait(&self) {
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Stops the running tasks where they are (their futures are dropped).
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Tasks still running.
    #[must_use]
    pub fn len(&self) -> usize {
        self.tracker.len()
    }

    /// Whether none is running.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.tracker.is_empty()
    }
}

/// Counters of what the coordinator did, read by the metrics and the tests.
#[derive(Debug, Default)]
pub struct ClusterStats {
    /// Writes acknowledged with fewer than `k + m` shards stored.
    pub degraded_writes: AtomicU64,
    /// Stripes rebuilt from parity while reading.
    pub degraded_stripes: AtomicU64,
    /// Shards that failed while being written or read.
    pub shard_failures: AtomicU64,
    /// Connections open on the S3 and peer listener.
    pub connections_open: AtomicU64,
    /// Connections refused because `max_connections` were open.
    pub connections_refused: AtomicU64,
    /// Connections closed because their TLS handshake failed or did not finish within
    /// `http_header_timeout_seconds`.
    pub tls_handshake_failures: AtomicU64,
    /// S3 requests refused for want of a right, by operation.
    denied: Mutex<std::collections::BTreeMap<String, u64>>,
}

impl ClusterStats {
    /// Counts an S3 request of operation `op` refused for want of a right.
    pub fn count_denied(&self, op: &str) {
        let mut m = self
            .denied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *m.entry(op.to_owned()).or_default() += 1;
    }

    /// The requests refused for want of a right so far, by operation.
    #[must_use]
    pub fn denied_by_op(&self) -> Vec<(String, u64)> {
        self.denied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}

/// One cluster map, with a [`Drive`] for each of its drives (this drive's own store for
/// itself). It derefs to the map.
#[derive(Debug)]
pub struct MapView {
    /// The map.
    pub map: ClusterMap,
    /// This drive's index in the map.
    pub local: usize,
    handles: Vec<Arc<dyn Drive>>,
}

impl std::ops::Deref for MapView {
    type Target = ClusterMap;
    fn deref(&self) -> &ClusterMap {
        &self.map
    }
}

impl MapView {
    /// Drive `id`, if the map has it.
    #[must_use]
    pub fn drive(&self, id: &str) -> Option<Arc<dyn Drive>> {
        self.map.index_of(id).map(|i| self.handles[i].clone())
    }

    /// The drive at index `i` of the map.
    #[must_use]
    pub fn at(&self, i: usize) -> &Arc<dyn Drive> {
        &self.handles[i]
    }

    /// Every drive, in map order.
    #[must_use]
    pub fn all(&self) -> &[Arc<dyn Drive>] {
        &self.handles
    }
}

/// A drive's view of its cluster.
#[derive(Debug)]
pub struct Cluster {
    view: std::sync::RwLock<Arc<MapView>>,
    /// The epoch of the map in force, shared with the peer API's epoch check.
    pub epoch: Arc<AtomicU64>,
    /// Where the map is kept (`cluster_map`), rewritten when a newer map is applied.
    map_path: Option<std::path::PathBuf>,
    /// One map change at a time.
    map_change: tokio::sync::Mutex<()>,
    key: PeerKey,
    http: oed_peer::client::PeerHttp,
    store: Store,
    codecs: Mutex<HashMap<(u16, u16), Arc<oed_ec::Codec>>>,
    /// The CRC32C shift of each chunk size written with, for a body's CRC32C joined from
    /// its chunks' (`write`).
    crc_shifts: Mutex<HashMap<usize, Arc<oed_ec::Crc32cShift>>>,
    /// How long one drive may take to take or give a chunk before it counts as failed.
    pub timeout: Duration,
    /// How long a drive may take over its part of a near-data operation.
    pub op_timeout: Duration,
    /// Whether single-part `ETag`s are MD5 digests (S3's rule) or a cheaper digest.
    pub md5_etags: bool,
    /// How shards go to and come from other drives.
    links: Links,
    /// Memory for the object data of the requests this drive coordinates.
    pub budget: budget::Budget,
    /// Counters.
    pub stats: ClusterStats,
    /// Request, traffic and erasure coding counters.
    pub traffic: oed_meter::traffic::Traffic,
    /// Work requests leave running.
    pub tasks: RequestTasks,
    /// Settlements of stored writes waiting to be sent.
    settler: settle::Settler,
    /// A client's body must deliver `min_body_rate` bytes per second over every window
    /// this long of waiting for it ([`oed_s3::RateFloor`]).
    pub body_window: Duration,
    /// See `body_window`.
    pub min_body_rate: u64,
    /// A lifecycle rule's day, milliseconds (`lifecycle_day_seconds`).
    pub lifecycle_day_ms: u64,
    /// When the log last said this drive's clock is off.
    clock_warned: Mutex<Option<std::time::Instant>>,
}

/// How far this drive's clock may be from the others' before it is off: version ids are
/// then made from their time, and the log says so.
pub const CLOCK_OFF_MS: i64 = 1000;

/// The median of `offsets` (the lower of the two middle ones for an even count).
fn median(mut offsets: Vec<i64>) -> Option<i64> {
    offsets.sort_unstable();
    let mid = offsets.len().checked_sub(1)? / 2;
    offsets.get(mid).copied()
}

impl Cluster {
    /// The cluster of `map`, seen from the drive `config` describes, whose store is
    /// `store`.
    ///
    /// # Errors
    /// [`Error::Config`] when the drive is not in the map.
    pub fn new(
        map: ClusterMap,
        config: &oed_model::config::Config,
        store: Store,
        key: &PeerKey,
        traffic: oed_meter::traffic::Traffic,
    ) -> Result<Self> {
        md5::configure(
            config.md5_lanes()?,
            Duration::from_millis(config.md5_gather_ms),
        );
        let drive_id = config.drive_id.as_str();
        let timeout = Duration::from_secs(config.peer_timeout_seconds);
        let local = map.index_of(drive_id).ok_or_else(|| {
            Error::Config(format!(
                "drive_id {drive_id:?} is not one of the cluster map's drives"
            ))
        })?;
        if map.tls && (config.tls_ca_file.is_none() || config.tls_cert_file.is_none()) {
            return Err(Error::Config(
                "the cluster map has tls = true: set tls_cert_file and tls_key_file (this \
                 drive's certificate) and tls_ca_file (the cluster CA)"
                    .into(),
            ));
        }
        let http = oed_peer::client::PeerHttp::with_tls(&oed_peer::tls::client_config(
            config.tls_ca_file.as_deref(),
        )?);
        let links = Links {
            raw_uploads: config
                .raw_shard_uploads
                .then_some(config.raw_shard_upload_min_bytes),
            framed_reads: config.framed_shard_reads,
            sealed_uploads: !config.legacy_peer_requests,
        };
        let drives = handles(&map, local, &store, key, &http, links);
        Ok(Self {
            epoch: Arc::new(AtomicU64::new(map.epoch)),
            view: std::sync::RwLock::new(Arc::new(MapView {
                map,
                local,
                handles: drives,
            })),
            map_path: config.cluster_map.clone(),
            map_change: tokio::sync::Mutex::new(()),
            key: key.clone(),
            http,
            store,
            codecs: Mutex::new(HashMap::new()),
            crc_shifts: Mutex::new(HashMap::new()),
            timeout,
            op_timeout: Duration::from_secs(config.op_timeout_seconds),
            md5_etags: config.md5_etags,
            links,
            budget: budget::Budget::new(
                config.coordinator_buffer_bytes,
                Duration::from_secs(config.coordinator_wait_seconds),
                config.max_waiting_per_client,
            ),
            stats: ClusterStats::default(),
            traffic,
            tasks: RequestTasks::default(),
            settler: settle::Settler::default(),
            body_window: Duration::from_secs(config.http_header_timeout_seconds),
            clock_warned: Mutex::new(None),
            min_body_rate: config.min_body_bytes_per_second,
            lifecycle_day_ms: config.lifecycle_day_seconds.saturating_mul(1000),
        })
    }

    /// This drive's own store.
    #[must_use]
    pub fn local_store(&self) -> &Store {
        &self.store
    }

    /// This drive's clock minus the other drives', in ms: the median of what their answers
    /// of the last two minutes tell ([`Drive::clock_offset_ms`]); `None` when none has
    /// answered.
    #[must_use]
    pub fn clock_offset_ms(&self) -> Option<i64> {
        self.clock_offsets().0
    }

    /// [`Cluster::clock_offset_ms`], and how many drives it comes from.
    fn clock_offsets(&self) -> (Option<i64>, usize) {
        let view = self.map();
        let theirs: Vec<i64> = view
            .handles
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != view.local)
            .filter_map(|(_, d)| d.clock_offset_ms())
            .collect();
        let n = theirs.len();
        (median(theirs).map(i64::saturating_neg), n)
    }

    /// A new version id for a write this drive coordinates. When this drive's clock is
    /// off from the others' by [`CLOCK_OFF_MS`] or more, the log says so, once a minute
    /// at most, and when at least two other drives tell it so (one alone cannot say
    /// which clock is wrong), the id is made from their time instead: the others would
    /// refuse ids made far ahead of theirs, and ids made behind would lose to older
    /// writes.
    #[must_use]
    pub fn new_version_id(&self) -> VersionId {
        match self.clock_offsets() {
            (Some(off), n) if off.abs() >= CLOCK_OFF_MS => {
                let corrected = n >= 2;
                self.warn_clock(off, corrected);
                if corrected {
                    VersionId::generate_corrected(-off)
                } else {
                    VersionId::generate()
                }
            }
            _ => VersionId::generate(),
        }
    }

    fn warn_clock(&self, off: i64, corrected: bool) {
        let mut last = self
            .clock_warned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_some_and(|t| t.elapsed() < Duration::from_mins(1)) {
            return;
        }
        *last = Some(std::time::Instant::now());
        #[expect(
            clippy::cast_precision_loss,
            reason = "a clock offset in seconds, to log"
        )]
        let seconds = off as f64 / 1000.0;
        tracing::warn!(
            offset_seconds = seconds,
            ids_from_their_time = corrected,
            "this drive's clock is off from the other drives' (the median of their answers); \
             set it right (NTP)"
        );
    }

    /// The map in force, with its drives. Hold it for one operation: a newer map may be
    /// applied meanwhile ([`Cluster::apply_map`]).
    #[must_use]
    pub fn map(&self) -> Arc<MapView> {
        self.view
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Drive `id`, if the map in force has it.
    #[must_use]
    pub fn drive(&self, id: &str) -> Option<Arc<dyn Drive>> {
        self.map().drive(id)
    }

    /// A client of the peer API of drive `id` of the map in force, for the admin routes
    /// (this drive's own included), signed with the cluster's key.
    #[must_use]
    pub fn admin_client(&self, id: &str) -> Option<PeerClient> {
        let map = self.map();
        let d = map.drives.iter().find(|d| d.id == id)?;
        Some(
            PeerClient::with_http(&d.url(map.tls), self.key.clone(), self.http.clone())
                .for_drive(&d.id),
        )
    }

    /// Puts `new` in force: a map of this cluster with a higher epoch that still lists
    /// this drive (one with the same epoch and contents changes nothing). It is written
    /// to the `cluster_map` file first (so a restart runs it too), and recorded as the
    /// epoch this drive ran. Drives that stay keep their connections. Returns whether it
    /// changed anything.
    ///
    /// # Errors
    /// [`Error::BadRequest`] naming what is wrong with `new`; [`Error::Io`] when the file
    /// cannot be written (nothing changed then).
    pub async fn apply_map(&self, new: ClusterMap) -> Result<Option<Vec<String>>> {
        let _one = self.map_change.lock().await;
        let old = self.map();
        new.validate()
            .map_err(|e| Error::BadRequest(format!("cluster map: {e}")))?;
        if new.cluster_id != old.cluster_id {
            return Err(Error::BadRequest(format!(
                "the map is of cluster {:?}; this drive is in {:?}",
                new.cluster_id, old.cluster_id
            )));
        }
        let me = self.store.drive_id();
        let Some(local) = new.index_of(me) else {
            return Err(Error::BadRequest(format!(
                "the map does not list this drive ({me}); stop a drive before removing it"
            )));
        };
        if new.epoch == old.epoch && new.digest() == old.digest() {
            return Ok(None);
        }
        if new.epoch <= old.epoch {
            return Err(Error::BadRequest(format!(
                "the map's epoch {} is not above the epoch {} in force: a map's epoch must grow",
                new.epoch, old.epoch
            )));
        }
        if let Some(path) = &self.map_path {
            let text = toml::to_string(&new).map_err(|e| Error::Config(e.to_string()))?;
            let path = path.clone();
            let tmp = path.with_extension(format!("{me}.tmp"));
            tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                std::fs::write(&tmp, text)?;
                std::fs::File::open(&tmp)?.sync_all()?;
                std::fs::rename(&tmp, &path)
            })
            .await
            .map_err(|e| Error::Io(std::io::Error::other(e)))??;
        }
        self.store
            .record_ran_map(&oed_model::map::RanMap::of(&new))?;
        let drives = handles(&new, local, &self.store, &self.key, &self.http, self.links);
        tracing::warn!(
            from = old.epoch,
            to = new.epoch,
            "a newer cluster map is in force"
        );
        let removed = old
            .drives
            .iter()
            .filter(|d| new.index_of(&d.id).is_none())
            .map(|d| d.id.clone())
            .collect();
        self.epoch
            .store(new.epoch, std::sync::atomic::Ordering::Relaxed);
        *self
            .view
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(MapView {
            map: new,
            local,
            handles: drives,
        });
        Ok(Some(removed))
    }

    /// The codec for `k + m`, built once.
    ///
    /// # Errors
    /// [`Error::Shard`] for an impossible profile.
    pub fn codec(&self, k: u16, m: u16) -> Result<Arc<oed_ec::Codec>> {
        let mut codecs = self
            .codecs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = codecs.get(&(k, m)) {
            return Ok(c.clone());
        }
        let c = Arc::new(oed_ec::Codec::new(k.into(), m.into())?);
        codecs.insert((k, m), c.clone());
        Ok(c)
    }

    /// The CRC32C shift by `len` bytes, made once per chunk size.
    pub(crate) fn crc_shift(&self, len: usize) -> Arc<oed_ec::Crc32cShift> {
        let mut shifts = self
            .crc_shifts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        shifts
            .entry(len)
            .or_insert_with(|| Arc::new(oed_ec::Crc32cShift::new(len)))
            .clone()
    }

    /// The shards a write must store before it is acknowledged: `k + 1`, or `k` without
    /// parity.
    #[must_use]
    pub fn write_quorum(k: u16, m: u16) -> usize {
        usize::from(k) + usize::from(m.min(1))
    }

    /// The current record of `bucket`/`key`: the newest version that at least `k` of the
    /// drives placed for it hold. `None` when there is none.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when too many drives fail to answer to be sure.
    pub async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        let p = self.map().profile;
        let (records, failed) = self.holders(bucket, key, &[]).await;
        let current = newest_readable(&records);
        if current.is_none() && failed > usize::from(p.m) {
            return Err(Error::Unavailable(format!(
                "{failed} of the {} drives holding {key:?} did not answer",
                p.k + p.m
            )));
        }
        Ok(current)
    }

    /// The records of `bucket`/`key` that the drives the map places it on (before and
    /// after drives were marked out), and the drives `also` names, hold; with how many of
    /// them did not answer in time.
    pub async fn holders(
        &self,
        bucket: &str,
        key: &str,
        also: &[String],
    ) -> (Vec<ObjectRecord>, usize) {
        let map = self.map();
        let p = map.profile;
        let mut asked = map.holders(bucket, key, usize::from(p.k + p.m));
        for id in also {
            match map.index_of(id) {
                Some(i) if !asked.contains(&i) => asked.push(i),
                _ => {}
            }
        }
        let mut records = Vec::new();
        let mut failed = 0;
        // Records name their shards' drives: a shard moved to a drive that no placement
        // asked names (a rebalance under a map between two epochs) is asked for too.
        let mut from = 0;
        for _round in 0..2 {
            let answers = join_all(asked[from..].iter().map(|&i| {
                let d = map.at(i);
                async move { tokio::time::timeout(self.timeout, d.stat(bucket, key)).await }
            }))
            .await;
            let mut named = Vec::new();
            for a in answers {
                match a {
                    Ok(Ok(Some(r))) => {
                        named.extend(r.drives.iter().filter_map(|id| map.index_of(id)));
                        records.push(r);
                    }
                    Ok(Ok(None)) => {}
                    Ok(Err(_)) | Err(_) => failed += 1,
                }
            }
            let before = asked.len();
            from = before;
            for i in named {
                if !asked.contains(&i) {
                    asked.push(i);
                }
            }
            if asked.len() == before {
                break;
            }
        }
        (records, failed)
    }

    /// Runs `op` on every drive at once, each bounded by the timeout.
    async fn on_all<T, F, Fut>(&self, op: F) -> Vec<Result<T, DriveError>>
    where
        F: Fn(Arc<dyn Drive>) -> Fut,
        Fut: std::future::Future<Output = Result<T, DriveError>>,
    {
        let map = self.map();
        join_all(map.all().iter().map(|d| {
            let fut = op(d.clone());
            async move { oed_model::drive::within(self.timeout, fut).await }
        }))
        .await
    }

    /// Creates a bucket on every drive that answers; at least a majority must.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when fewer than a majority of drives stored it.
    pub async fn create_bucket(&self, name: &str) -> Result<()> {
        oed_model::record::check_bucket_name(name)?;
        let results = self
            .on_all(|d| async move { d.create_bucket(name).await })
            .await;
        let ok = results.iter().filter(|r| r.is_ok()).count();
        if ok * 2 <= results.len() {
            return Err(Error::Unavailable(format!(
                "only {ok} of {} drives stored the bucket",
                results.len()
            )));
        }
        Ok(())
    }

    /// Whether the bucket exists: this drive's record, else any drive's (which this drive
    /// then copies, having missed its creation while down).
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub async fn bucket_exists(&self, name: &str) -> Result<bool> {
        if self.store.bucket(name)?.is_some() {
            return Ok(true);
        }
        let found = self
            .on_all(|d| async move { d.buckets().await })
            .await
            .into_iter()
            .flatten()
            .flatten()
            .any(|b| b.name == name);
        if found {
            self.store.create_bucket(name)?;
        }
        Ok(found)
    }

    /// Copies the records of the buckets that a majority of the map's drives hold and
    /// this one lacks (it was new, or down, when they were made): a drive joining a
    /// cluster takes shards of every bucket from its start. A bucket only a minority
    /// holds (deleted while a drive was down) is not copied. Returns how many it copied.
    pub async fn copy_buckets(&self) -> usize {
        let lists = self.on_all(|d| async move { d.buckets().await }).await;
        let drives = lists.len();
        let mut held: std::collections::BTreeMap<String, (usize, BucketRecord)> =
            std::collections::BTreeMap::new();
        for list in lists.into_iter().flatten() {
            for b in list {
                held.entry(b.name.clone()).or_insert((0, b)).0 += 1;
            }
        }
        let mut copied = 0;
        for (name, (n, record)) in held {
            if n * 2 > drives
                && matches!(self.store.bucket(&name), Ok(None))
                && self.store.copy_bucket(&record).is_ok()
            {
                copied += 1;
            }
        }
        if copied > 0 {
            tracing::info!(copied, "bucket records copied from the other drives");
        }
        copied
    }

    /// Every bucket any answering drive has, by name.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when no drive answers.
    pub async fn buckets(&self) -> Result<Vec<BucketRecord>> {
        let mut all = std::collections::BTreeMap::new();
        let mut answered = false;
        for list in self
            .on_all(|d| async move { d.buckets().await })
            .await
            .into_iter()
            .flatten()
        {
            answered = true;
            for b in list {
                all.entry(b.name.clone()).or_insert(b);
            }
        }
        if !answered {
            return Err(Error::Unavailable("no drive answered".into()));
        }
        Ok(all.into_values().collect())
    }

    /// Deletes a bucket that holds no object on every drive; uploads in progress in it
    /// are aborted (their parts' shards deleted), as S3 does.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::BucketNotEmpty`] (when any object is still in it),
    /// [`Error::Unavailable`].
    pub async fn delete_bucket(&self, name: &str) -> Result<()> {
        if !self.bucket_exists(name).await? {
            return Err(Error::NotFound(oed_model::error::Missing::Bucket));
        }
        // Objects first: a drive that holds none of them may not know it is not empty.
        if list::Merge::new(self, name, oed_model::record::USER_KEYS_START)
            .next()
            .await?
            .is_some()
            || self.has_noncurrent(name).await?
        {
            return Err(Error::BucketNotEmpty);
        }
        // What is left is the cluster's own: uploads in progress and their parts. S3
        // aborts them with the bucket.
        let mut internal = list::Merge::new(self, name, "");
        let mut aborted = 0u64;
        while let Some(r) = internal.next().await? {
            if r.key.as_str() >= oed_model::record::USER_KEYS_START {
                break;
            }
            self.delete_record(&r).await;
            aborted += 1;
        }
        if aborted > 0 {
            tracing::info!(bucket = %name, records = aborted, "uploads in progress aborted with their bucket");
        }
        let results = self
            .on_all(|d| async move { d.delete_bucket(name).await })
            .await;
        if results.iter().any(|r| {
            r.as_ref()
                .is_err_and(|e| e.code == ErrorCode::BucketNotEmpty)
        }) {
            // Put the record back where it went, so the bucket stays whole.
            let _ = self
                .on_all(|d| async move { d.create_bucket(name).await })
                .await;
            return Err(Error::BucketNotEmpty);
        }
        let failed = results
            .iter()
            .filter(|r| r.as_ref().is_err_and(|e| !e.is_not_found()))
            .count();
        if failed * 2 >= results.len() {
            return Err(Error::Unavailable(format!(
                "{failed} of {} drives did not delete the bucket",
                results.len()
            )));
        }
        Ok(())
    }

    /// Deletes every shard of `record`'s version (and, for a multipart object, its parts).
    /// Drives that are down keep theirs until scrub finds them.
    pub async fn delete_record(&self, record: &ObjectRecord) {
        let mut targets: Vec<(String, String, oed_model::record::VersionId, Vec<String>)> = vec![(
            record.bucket.clone(),
            record.key.clone(),
            record.version_id,
            record.drives.clone(),
        )];
        for p in &record.parts {
            targets.push((
                record.bucket.clone(),
                p.key.clone(),
                p.version_id,
                p.drives.clone(),
            ));
        }
        for (bucket, key, version, drives) in &targets {
            join_all(
                drives
                    .iter()
                    .filter_map(|id| self.drive(id))
                    .map(|d| async move {
                        match tokio::time::timeout(
                            self.timeout,
                            d.delete_object(bucket, key, Some(*version)),
                        )
                        .await
                        {
                            Ok(Ok(())) => {}
                            Ok(Err(e))
                                if matches!(
                                    e.code,
                                    ErrorCode::NotFound | ErrorCode::Superseded
                                ) => {}
                            Ok(Err(e)) => {
                                tracing::warn!(%bucket, %key, error = %e, "shard not deleted");
                            }
                            Err(_) => tracing::warn!(%bucket, %key, "shard delete timed out"),
                        }
                    }),
            )
            .await;
        }
    }
}

/// A [`Drive`] for each drive of `map`: the store for drive `local`, a peer client
/// naming the map's epoch for the others.
fn handles(
    map: &ClusterMap,
    local: usize,
    store: &Store,
    key: &PeerKey,
    http: &oed_peer::client::PeerHttp,
    links: Links,
) -> Vec<Arc<dyn Drive>> {
    map.drives
        .iter()
        .enumerate()
        .map(|(i, d)| -> Arc<dyn Drive> {
            if i == local {
                Arc::new(store.clone())
            } else {
                Arc::new(
                    PeerClient::with_http(&d.url(map.tls), key.clone(), http.clone())
                        .with_epoch(map.epoch)
                        .with_raw_uploads(links.raw_uploads.is_some())
                        .with_raw_upload_min(links.raw_uploads.unwrap_or(0))
                        .with_framed_reads(links.framed_reads)
                        .with_sealed_uploads(links.sealed_uploads)
                        .for_drive(&d.id),
                )
            }
        })
        .collect()
}

/// How shards go to and come from other drives.
#[derive(Clone, Copy, Debug)]
struct Links {
    /// Shard uploads go as raw uploads (`raw_shard_uploads`) when their file is at least
    /// this long (`raw_shard_upload_min_bytes`); `None`: never.
    raw_uploads: Option<u64>,
    /// Shard reads ask for frames (`framed_shard_reads`).
    framed_reads: bool,
    /// Shard uploads are sealed (not `legacy_peer_requests`).
    sealed_uploads: bool,
}

/// The newest version among `records` that at least `k` of them hold, with each part
/// that amendments change (tags, retention, legal hold) as its latest change left it (a
/// drive that missed a change has the earlier).
#[must_use]
pub fn newest_readable(records: &[ObjectRecord]) -> Option<ObjectRecord> {
    let mut by_version: std::collections::BTreeMap<_, (usize, &ObjectRecord)> =
        std::collections::BTreeMap::new();
    for r in records {
        by_version.entry(r.version_id).or_insert((0, r)).0 += 1;
    }
    let (_, first) = by_version
        .into_values()
        .rev()
        .find(|(n, r)| *n >= usize::from(r.k))?;
    let mut out = first.clone();
    let version = out.version_id;
    for r in records.iter().filter(|r| r.version_id == version) {
        oed_model::drive::merge_changes(&mut out, r);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_clock_offset_is_the_median_of_the_others() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![5]), Some(5));
        // One drive far off does not move it; of two, the lower.
        assert_eq!(median(vec![120_000, 3, -2]), Some(3));
        assert_eq!(median(vec![120_000, 0]), Some(0));
        assert_eq!(median(vec![-9, 120_000, 4, 1]), Some(1));
    }

    /// A task runs in the span of whoever spawned it, shutdown waits for it to finish, and
    /// after `cancel` a task that would never finish is dropped where it waits.
    #[test]
    fn request_tasks_keep_their_span_and_are_waited_for_or_cancelled() {
        let subscriber = tracing_subscriber::registry();
        tracing::subscriber::with_default(subscriber, || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let tasks = RequestTasks::default();
                let done = Arc::new(AtomicBool::new(false));
                let span = tracing::info_span!("request", path = "/b/k");
                let finished = {
                    let _in = span.enter();
                    let done = done.clone();
                    tasks.spawn(async move {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        done.store(true, Ordering::SeqCst);
                        tracing::Span::current()
                            .metadata()
                            .map(tracing::Metadata::name)
                    })
                };
                tasks.close_and_wait().await;
                assert!(done.load(Ordering::SeqCst), "shutdown did not wait");
                assert_eq!(finished.await.unwrap(), Some(Some("request")));

                let stuck = RequestTasks::default();
                let never = stuck.spawn(std::future::pending::<()>());
                assert_eq!(stuck.len(), 1);
                stuck.cancel();
                tokio::time::timeout(Duration::from_secs(5), stuck.close_and_wait())
                    .await
                    .expect("a cancelled task still held up shutdown");
                assert_eq!(never.await.unwrap(), None);
                assert!(stuck.is_empty());
            });
        });
    }
}
