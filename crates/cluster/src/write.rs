//! The write path. The body is streamed, never held whole: it is cut into stripes of
//! `k` chunks, each stripe is coded into `m` parity chunks, and chunk `i` of every stripe
//! goes to the drive of shard `i` as the next frame of its shard file, all `k + m` uploads
//! running at once (this drive's own without HTTP). At most two stripes per drive are in
//! flight, so memory per request is a few stripes whatever the object's size.
//!
//! The `ETag` is known only when the body ends, so each shard upload ends with a record
//! tail carrying it; a drive commits nothing without that tail. The tail also carries the
//! version's final id, made when the body has ended: every drive keeps the version with
//! the largest id, so of two writes of one key the one that completes last wins (S3's
//! rule), and every drive picks the same one (never a mix of the two bodies).
//!
//! A drive that commits a write keeps the version it replaced until the coordinator
//! settles the write ([`Drive::settle`], [`super::settle`]): once the write quorum has
//! stored it, the replaced version is dropped (after the client has its answer); when it
//! fails, every drive removes it and makes the replaced version current again. An
//! overwrite that fails therefore never takes the version it was to replace with it.
//! When the coordinator dies before it settles, each drive's scrub does it. When the body is short,
//! too long, fails its Content-MD5 or the client goes away, every upload is failed and
//! nothing becomes visible.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use sha2::Digest as _;
use tokio::sync::mpsc;

use super::Cluster;
use super::budget::Budget;
use super::md5::Md5Stream;
use oed_meter::traffic::{Class, Direction, EcOp};
use oed_model::drive::{Drive, DriveError, ErrorCode, Stored};
use oed_model::error::{Error, Result};
use oed_model::heal::{HealCause, HealEntry};
use oed_model::record::{
    ObjectRecord, PartRef, RecordTail, StoredChecksum, WriteCondition, now_ms,
};

/// What the client asked to store.
#[derive(Clone, Debug, Default)]
pub struct NewObject {
    /// Bucket.
    pub bucket: String,
    /// Key.
    pub key: String,
    /// Exact body length (Content-Length, or the decoded length of an aws-chunked body).
    pub size: u64,
    /// Content type.
    pub content_type: Option<String>,
    /// `x-amz-meta-*`, names lower-cased.
    pub user_meta: BTreeMap<String, String>,
    /// The Content-MD5 the client sent, decoded: the body must match it.
    pub content_md5: Option<[u8; 16]>,
    /// For a completed multipart upload: its parts (the body is then empty) and `ETag`.
    pub parts: Vec<PartRef>,
    /// An `ETag` decided by the caller (multipart); computed from the body otherwise.
    pub etag: Option<String>,
    /// The S3 checksum to compute over the body, and what it must be.
    pub checksum: Option<BodyChecksum>,
    /// The checksum of a multipart object, decided by the caller from its parts'.
    pub parts_checksum: Option<StoredChecksum>,
    /// For a part of a multipart upload: the key of the object it is uploaded to.
    pub parent: Option<String>,
    /// Standard headers to store (see [`ObjectRecord::headers`]).
    pub headers: BTreeMap<String, String>,
    /// The condition the client's write is made on, checked by every drive as it
    /// commits ([`WriteCondition`]).
    pub condition: Option<WriteCondition>,
    /// A version of its own (the bucket's versioning is enabled), not the `null` one
    /// ([`ObjectRecord::versioned`]).
    pub versioned: bool,
    /// A delete marker (no body).
    pub delete_marker: bool,
    /// Its tags ([`ObjectRecord::tags`]), checked by the caller.
    pub tags: BTreeMap<String, String>,
    /// Its retention ([`ObjectRecord::retention`]), checked by the caller.
    pub retention: Option<oed_model::record::Retention>,
    /// Its legal hold ([`ObjectRecord::legal_hold`]).
    pub legal_hold: bool,
}

/// An S3 checksum (`x-amz-checksum-*`) asked for on a body: computed as the body streams,
/// checked against what the client sent (a header, or a trailer of an aws-chunked body,
/// known only once the body has ended), and stored with the object.
#[derive(Clone)]
pub struct BodyChecksum {
    /// The algorithm.
    pub algorithm: oed_ops::s3sum::Algorithm,
    /// What the client said it is.
    pub expected: Expected,
}

/// Where a body's expected checksum comes from.
#[derive(Clone)]
pub enum Expected {
    /// Nowhere: the algorithm was named without a value; the checksum is stored only.
    Nothing,
    /// A header: the digest's bytes.
    Value(Vec<u8>),
    /// A trailer, read when the body has ended (its value as sent, base64).
    Trailer(std::sync::Arc<dyn Fn() -> Option<String> + Send + Sync>),
}

impl std::fmt::Debug for BodyChecksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let from = match &self.expected {
            Expected::Nothing => "nothing",
            Expected::Value(_) => "a header",
            Expected::Trailer(_) => "a trailer",
        };
        write!(f, "BodyChecksum({} from {from})", self.algorithm.name())
    }
}

impl BodyChecksum {
    /// Checks `digest`, the body's, against what the client sent; what to store.
    ///
    /// # Errors
    /// [`Error::ChecksumMismatch`] when they differ; [`Error::BadRequest`] when a
    /// trailer was announced and did not come, or is not a checksum.
    pub fn check(&self, digest: &[u8]) -> Result<StoredChecksum> {
        let a = self.algorithm;
        let want = match &self.expected {
            Expected::Nothing => None,
            Expected::Value(v) => Some(v.clone()),
            Expected::Trailer(read) => {
                let sent = read().ok_or_else(|| {
                    Error::BadRequest(format!(
                        "the trailer {} was announced in x-amz-trailer and not sent",
                        a.header()
                    ))
                })?;
                Some(
                    a.decode(&sent)
                        .map_err(|e| Error::BadRequest(e.to_string()))?,
                )
            }
        };
        if want.is_some_and(|w| w != digest) {
            return Err(Error::ChecksumMismatch(a.name()));
        }
        Ok(StoredChecksum {
            algorithm: a,
            value: oed_ops::s3sum::encode(digest),
            full_object: true,
        })
    }
}

/// The drives a write's shards go to, in shard order.
type ShardDrives = Vec<Arc<dyn Drive>>;

/// A stored object.
#[derive(Clone, Debug)]
pub struct Written {
    /// Its record (shard index 0's).
    pub record: ObjectRecord,
    /// Shards that could not be stored (the write is degraded when this is not 0); they
    /// are queued for heal.
    pub missing: usize,
}

/// What a drive answered to its shard of a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ShardAnswer {
    /// It stored this version.
    Stored,
    /// It holds a newer version of the key (`Superseded`): not stored, nothing to heal.
    Newer,
    /// It failed, or did not answer in time: missing, to heal.
    Failed,
    /// The write's condition fails there (another version of the key is there): not
    /// stored; to heal should the write succeed elsewhere.
    Refused,
}

/// Where the parts of upload `upload_id` are stored: under a key prefix that user keys
/// never start with.
#[must_use]
pub fn parts_prefix(upload_id: &str) -> String {
    format!("\u{1}p/{upload_id}/")
}

/// The internal key of multipart upload `upload_id` of `key` while it is in progress:
/// an empty object whose record keeps the upload's metadata.
#[must_use]
pub fn upload_key(key: &str, upload_id: &str) -> String {
    format!("{UPLOADS_PREFIX}{key}\u{1}{upload_id}")
}

/// What every [`upload_key`] starts with.
pub const UPLOADS_PREFIX: &str = "\u{1}u/";

/// The client's key and the upload id of an [`upload_key`]; `None` for any other key.
#[must_use]
pub fn parse_upload_key(internal: &str) -> Option<(&str, &str)> {
    internal.strip_prefix(UPLOADS_PREFIX)?.rsplit_once('\u{1}')
}

/// The key of part `n` of upload `upload_id`.
#[must_use]
pub fn part_key(upload_id: &str, n: i32) -> String {
    format!("{}{n:05}", parts_prefix(upload_id))
}

/// S3's multipart `ETag`: the MD5 of the parts' binary digests, then `-` and their count.
#[must_use]
pub fn multipart_etag(part_etags: &[&str]) -> String {
    use md5::Digest as _;
    let mut h = md5::Md5::new();
    for e in part_etags {
        h.update(hex::decode(e).unwrap_or_else(|_| e.as_bytes().to_vec()));
    }
    format!("{}-{}", hex::encode(h.finalize()), part_etags.len())
}

/// The share of the coordinator's budget a write of `obj` holds. A completed multipart
/// upload writes its record only (its parts hold the data) and needs none.
fn write_share(obj: &NewObject, layout: oed_ec::Layout) -> u64 {
    if !obj.parts.is_empty() {
        return 0;
    }
    Budget::write_share(obj.size, layout.stripe_size(), layout.k(), layout.m())
}

/// The receiving end of one shard upload, as a stream.
struct ChunkChannel {
    rx: mpsc::Receiver<std::io::Result<Vec<Bytes>>>,
    /// The rest of the item last received.
    pending: std::vec::IntoIter<Bytes>,
}

impl Stream for ChunkChannel {
    type Item = std::io::Result<Bytes>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(piece) = self.pending.next() {
                return Poll::Ready(Some(Ok(piece)));
            }
            match std::task::ready!(self.rx.poll_recv(cx)) {
                Some(Ok(pieces)) => self.pending = pieces.into_iter(),
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => return Poll::Ready(None),
            }
        }
    }
}

/// The `k + m` uploads of one write, as the coordinator feeds them.
struct Uploads<'a> {
    cluster: &'a Cluster,
    /// One item per frame: the chunk's pieces and its CRC.
    senders: Vec<Option<mpsc::Sender<std::io::Result<Vec<Bytes>>>>>,
    tasks: Vec<tokio::task::JoinHandle<Option<Result<Stored, DriveError>>>>,
    quorum: usize,
}

impl<'a> Uploads<'a> {
    /// Starts one shard upload per drive in `placed`, each opened with its header.
    fn start(
        cluster: &'a Cluster,
        record: &ObjectRecord,
        placed: &[Arc<dyn Drive>],
    ) -> Result<Self> {
        let mut up = Uploads {
            cluster,
            senders: Vec::with_capacity(placed.len()),
            tasks: Vec::with_capacity(placed.len()),
            quorum: Cluster::write_quorum(record.k, record.m),
        };
        for (i, drive) in placed.iter().enumerate() {
            // The header, then up to two frames waiting.
            let (tx, rx) = mpsc::channel(2);
            let mut rec = record.clone();
            rec.shard_index = i as u16;
            let header = rec.shard_header()?;
            let drive = drive.clone();
            up.tasks.push(cluster.tasks.spawn(async move {
                drive
                    .put_shard(
                        &rec,
                        Box::pin(ChunkChannel {
                            rx,
                            pending: Vec::new().into_iter(),
                        }),
                        true,
                    )
                    .await
            }));
            // The channel is new and has room: this cannot wait.
            let _ = tx.try_send(Ok(vec![Bytes::copy_from_slice(&header.encode())]));
            up.senders.push(Some(tx));
        }
        Ok(up)
    }

    fn live(&self) -> usize {
        self.senders.iter().filter(|s| s.is_some()).count()
    }

    /// Sends `pieces` (a frame) to shard `i`; a drive that does not take them in time is
    /// dropped.
    async fn send(&mut self, i: usize, pieces: Vec<Bytes>) {
        let Some(tx) = &self.senders[i] else { return };
        let sent = tokio::time::timeout(self.cluster.timeout, tx.send(Ok(pieces))).await;
        if !matches!(sent, Ok(Ok(()))) {
            tracing::warn!(
                shard = i,
                "shard upload failed or stalled; going on without it"
            );
            self.senders[i] = None;
        }
    }

    fn check_quorum(&self) -> Result<()> {
        let live = self.live();
        if live < self.quorum {
            return Err(Error::Unavailable(format!(
                "only {live} drives take shards; a write needs {}",
                self.quorum
            )));
        }
        Ok(())
    }

    /// Fails every upload: no drive commits anything.
    async fn abort(mut self) {
        for tx in self.senders.iter_mut().filter_map(Option::take) {
            let _ = tx.try_send(Err(std::io::Error::other("write aborted")));
        }
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }
}

impl Cluster {
    /// Stores an object: see the module docs. Returns once all `k + m` shards are stored,
    /// or, with drives down, once the write quorum is ([`Cluster::write_quorum`]); then
    /// drops what the version it replaced held beyond its own shards (the parts of a
    /// multipart object).
    ///
    /// # Errors
    /// [`Error::BadRequest`] (a bad key, or a body longer than `size`),
    /// [`Error::IncompleteBody`], [`Error::BadDigest`] (Content-MD5), the body's own
    /// errors, [`Error::Unavailable`] (too few drives stored it). Nothing is visible after
    /// an error.
    pub async fn put_object<S>(&self, obj: NewObject, mut body: S) -> Result<Written>
    where
        S: Stream<Item = Result<Bytes>> + Unpin,
    {
        let started = std::time::Instant::now();
        let (record, placed, layout) = self.new_record(&obj)?;
        // Refused here, before any shard moves, not by every drive as a failed write.
        let shard_len = record.shard_header()?.file_len();
        let most = self.store.max_shard_bytes();
        if shard_len > most {
            return Err(Error::TooLarge(most.saturating_mul(u64::from(record.k))));
        }
        let _share = self.budget.take(write_share(&obj, layout)).await?;
        let mut up = Uploads::start(self, &record, &placed)?;
        let (etag, checksum) = match self.stream_stripes(&mut up, &obj, layout, &mut body).await {
            Ok(done) => done,
            Err(e) => {
                up.abort().await;
                return Err(e);
            }
        };
        // The final id, made now that the body has ended (the module docs say why).
        let version_id = self.new_version_id();
        let record = ObjectRecord {
            version_id,
            last_modified_ms: version_id.millis(),
            etag,
            parts: obj.parts,
            checksum: checksum.or(obj.parts_checksum),
            ..record
        };
        let (written, replaced) = self.collect(up, record, obj.condition).await?;
        // A completed multipart upload writes no data here: its parts were counted.
        if written.record.parts.is_empty() {
            self.traffic.body(
                Class::Client,
                Direction::In,
                written.record.size,
                started.elapsed().as_secs_f64(),
            );
        }
        if !replaced.is_empty() {
            // A record with no drives: only its parts are deleted.
            let parts_only = ObjectRecord {
                drives: Vec::new(),
                parts: replaced,
                ..written.record.clone()
            };
            self.delete_record(&parts_only).await;
        }
        Ok(written)
    }

    /// Completes a multipart upload: stores `obj` (the object's record, naming its parts),
    /// then removes the upload's `marker` and the parts it left `unused`.
    ///
    /// # Errors
    /// As [`Cluster::put_object`]; the upload is left as it was then.
    pub async fn complete_upload(
        &self,
        obj: NewObject,
        marker: &ObjectRecord,
        unused: &[ObjectRecord],
    ) -> Result<Written> {
        let written = self
            .put_object(obj, futures_util::stream::empty::<Result<Bytes>>())
            .await?;
        self.delete_record(marker).await;
        for r in unused {
            self.delete_record(r).await;
        }
        Ok(written)
    }

    /// The retention a new version of `obj` that names none gets: its bucket's default
    /// (object lock), from now; none for a delete marker and the cluster's own keys
    /// (parts and uploads in progress: a completed upload gets it when it completes).
    fn default_retention(&self, obj: &NewObject) -> Option<oed_model::record::Retention> {
        if obj.delete_marker || obj.key.starts_with('\u{1}') {
            return None;
        }
        let accounts = self.accounts();
        let d = accounts
            .settings(&obj.bucket)?
            .object_lock
            .as_ref()?
            .default_retention?;
        Some(d.at(now_ms()))
    }

    /// The record of a new version of `obj` (its `ETag` and final id still to come), the
    /// drives placed for its shards, and its layout.
    fn new_record(&self, obj: &NewObject) -> Result<(ObjectRecord, ShardDrives, oed_ec::Layout)> {
        let map = self.map();
        let p = map.profile;
        let layout = oed_ec::Layout::new(p.k.into(), p.m.into(), p.chunk_size)?;
        let placed = map.place(&obj.bucket, &obj.key, layout.total());
        let record = ObjectRecord {
            parent: obj.parent.clone(),
            headers: obj.headers.clone(),
            bucket: obj.bucket.clone(),
            key: obj.key.clone(),
            version_id: self.new_version_id(),
            size: obj.size,
            etag: String::new(),
            content_type: obj.content_type.clone(),
            user_meta: obj.user_meta.clone(),
            last_modified_ms: now_ms(),
            k: p.k,
            m: p.m,
            chunk_size: p.chunk_size,
            drives: placed.iter().map(|&i| map.drives[i].id.clone()).collect(),
            shard_index: 0,
            parts: Vec::new(),
            checksum: None,
            // Each drive names its own file when it stores its shard.
            file: None,
            versioned: obj.versioned,
            delete_marker: obj.delete_marker,
            tags: obj.tags.clone(),
            tags_changed: oed_model::record::VersionId(0),
            retention: obj.retention.or_else(|| self.default_retention(obj)),
            retention_changed: oed_model::record::VersionId(0),
            legal_hold: obj.legal_hold,
            legal_hold_changed: oed_model::record::VersionId(0),
        };
        record.validate()?;
        let placed = placed.iter().map(|&i| map.at(i).clone()).collect();
        Ok((record, placed, layout))
    }

    /// Ends every upload with the record tail and waits for the drives' answers: the
    /// write, and the parts of the multipart version it replaced (as the drives that held
    /// it report them). Missing shards, when the quorum is met, go to the heal queue; the
    /// write is settled.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when fewer than the quorum stored their shard; the shards
    /// that were stored are removed again and the version they replaced put back. Of a
    /// write on a `condition`: [`Error::PreconditionFailed`] when no drive stored it and
    /// one refused it, [`Error::ConditionConflict`] when drives split between it and
    /// another write (each drive commits the first of two to arrive).
    async fn collect(
        &self,
        mut up: Uploads<'_>,
        record: ObjectRecord,
        condition: Option<WriteCondition>,
    ) -> Result<(Written, Vec<PartRef>)> {
        let total = up.senders.len();
        let tail = Bytes::from(serde_json::to_vec(&RecordTail {
            etag: record.etag.clone(),
            parts: record.parts.clone(),
            checksum: record.checksum.clone(),
            version_id: Some(record.version_id),
            condition,
        })?);
        for i in 0..total {
            up.send(i, vec![tail.clone()]).await;
        }
        up.senders.clear();
        let mut answers = Vec::with_capacity(total);
        let mut replaced = Vec::new();
        // The shards whose drives keep the version this one replaced.
        let mut kept = Vec::new();
        // Every drive has its whole shard now: each answers once its commit is done, or
        // counts as failed after the timeout (a drive frozen mid-write never answers).
        let deadline = tokio::time::Instant::now() + self.timeout;
        for (i, t) in up.tasks.drain(..).enumerate() {
            let r = match tokio::time::timeout_at(deadline, t).await {
                Ok(Ok(Some(r))) => r,
                Ok(Ok(None)) => Err(DriveError::unreachable("the drive is shutting down")),
                Ok(Err(e)) => Err(DriveError::unreachable(e.to_string())),
                Err(_) => Err(DriveError::unreachable(
                    "no answer to the shard upload in time",
                )),
            };
            answers.push(match r {
                Ok(s) => {
                    // Every drive that held the replaced version reports the same parts.
                    if replaced.is_empty() {
                        replaced = s.replaced_parts;
                    }
                    if s.kept {
                        kept.push(i);
                    }
                    ShardAnswer::Stored
                }
                // A newer version of the key is on that drive, so this one's shard is
                // not: it does not count towards the write's quorum. Counting it would
                // acknowledge a write with fewer than k + 1 of its shards stored, lost
                // should that newer version itself not be kept (a write that failed, or
                // a version made by a wrong clock).
                Err(e) if e.code == ErrorCode::PreconditionFailed => {
                    tracing::info!(bucket = %record.bucket, key = %record.key, shard = i, drive = %record.drives[i], "shard not stored: the write's condition fails there");
                    ShardAnswer::Refused
                }
                Err(e) if e.code == ErrorCode::Superseded => {
                    tracing::info!(bucket = %record.bucket, key = %record.key, shard = i, drive = %record.drives[i], "shard not stored: the drive holds a newer version of the key");
                    ShardAnswer::Newer
                }
                Err(e) => {
                    tracing::warn!(bucket = %record.bucket, key = %record.key, shard = i, drive = %record.drives[i], error = %e, "shard not stored");
                    ShardAnswer::Failed
                }
            });
        }
        let count = |a: ShardAnswer| answers.iter().filter(|&&x| x == a).count();
        let (ok, newer) = (count(ShardAnswer::Stored), count(ShardAnswer::Newer));
        let refused = count(ShardAnswer::Refused);
        // Two writes of one key that each reach a quorum share a drive, which commits
        // only one of them: conditional writes need more than half the shards (more than
        // `k + 1` only where `m > k + 1`).
        let quorum = if condition.is_some() {
            up.quorum.max(total / 2 + 1)
        } else {
            up.quorum
        };
        if ok < quorum {
            self.stats
                .shard_failures
                .fetch_add((total - ok) as u64, Ordering::Relaxed);
            // Every drive is told: one whose answer was lost may have stored it.
            let all: Vec<usize> = (0..total).collect();
            self.settle(&record, &all, false).await;
            if let Some(c) = condition
                && refused + newer > 0
            {
                return Err(if ok == 0 {
                    Error::PreconditionFailed(c.failure().into())
                } else {
                    Error::ConditionConflict(format!(
                        "another write of this key raced this conditional one and neither was stored on enough drives ({ok} of {total} stored this one, {} refused it); nothing changed: try again",
                        refused + newer
                    ))
                });
            }
            let newer = if newer > 0 {
                format!("; {newer} drive(s) hold a newer version of the key (another write of it)")
            } else {
                String::new()
            };
            return Err(Error::Unavailable(format!(
                "{ok} of {total} shards stored; a write needs {quorum}{newer}"
            )));
        }
        // A drive that holds a newer version has nothing to heal and is not down: its
        // shard is neither stored nor missing (no hint, not a degraded write).
        let missing = count(ShardAnswer::Failed) + refused;
        if missing > 0 {
            self.queue_missing(&record, &answers);
        }
        if !kept.is_empty() {
            // Off the client's path: the answer does not wait for it.
            let drives: Vec<Arc<dyn Drive>> = kept
                .iter()
                .filter_map(|&i| self.drive(&record.drives[i]))
                .collect();
            let s = super::settle::settlement(&record, true);
            self.settler.queue(&self.tasks, drives, &s, self.timeout);
        }
        Ok((Written { record, missing }, replaced))
    }

    /// Counts a degraded write and queues the shards that failed for heal.
    fn queue_missing(&self, record: &ObjectRecord, answers: &[ShardAnswer]) {
        let lacks = |a: ShardAnswer| matches!(a, ShardAnswer::Failed | ShardAnswer::Refused);
        let missing = answers.iter().filter(|&&a| lacks(a)).count();
        let stored = answers
            .iter()
            .filter(|&&a| a == ShardAnswer::Stored)
            .count();
        self.stats.degraded_writes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .shard_failures
            .fetch_add(missing as u64, Ordering::Relaxed);
        // The drives that missed it are likely down: the entries wait here as hints,
        // handed to each drive when it answers again.
        let spare = stored.saturating_sub(usize::from(record.k));
        let entries: Vec<HealEntry> = answers
            .iter()
            .enumerate()
            .filter(|(_, a)| lacks(**a))
            .map(|(i, _)| {
                HealEntry::of(
                    record,
                    i as u16,
                    HealCause::DegradedWrite,
                    spare as u16,
                    self.store.drive_id(),
                )
            })
            .collect();
        if let Err(e) = self.store.queue_heals(&entries) {
            tracing::warn!(error = %e, "heal queue");
        }
    }

    /// Reads the body, cuts it into stripes and sends their chunks; returns the `ETag`,
    /// and the S3 checksum asked for, checked.
    async fn stream_stripes<S>(
        &self,
        up: &mut Uploads<'_>,
        obj: &NewObject,
        layout: oed_ec::Layout,
        body: &mut S,
    ) -> Result<(String, Option<StoredChecksum>)>
    where
        S: Stream<Item = Result<Bytes>> + Unpin,
    {
        let codec = self.codec(layout.k() as u16, layout.m() as u16)?;
        let codec = &*codec;
        let stripe_size = layout.stripe_size() as usize;
        let mut buf = StripeBuf::new();
        let mut received: u64 = 0;
        let mut stripe: u64 = 0;
        // Hashed a stripe at a time, in lanes with other uploads' (super::md5).
        let mut md5 = (self.md5_etags || obj.content_md5.is_some()).then(Md5Stream::new);
        let mut fast = sha2::Sha256::new();
        fast.update(obj.size.to_le_bytes());
        // A CRC32C is joined from the data chunks' own, which the frames' CRCs compute
        // anyway: no pass of its own over the body (S3 clients' usual trailer).
        let crc32c = obj
            .checksum
            .as_ref()
            .is_some_and(|c| c.algorithm == oed_ops::s3sum::Algorithm::Crc32c);
        let shift = crc32c.then(|| self.crc_shift(layout.chunk_size()));
        let mut object_crc = shift.as_deref().map(|s| (0u32, s));
        let mut sum = obj
            .checksum
            .as_ref()
            .filter(|_| !crc32c)
            .map(|c| c.algorithm.hasher());
        while let Some(piece) = body.next().await {
            let mut piece = piece?;
            if let Some(h) = sum.as_mut() {
                h.update(&piece);
            }
            received += piece.len() as u64;
            if received > obj.size {
                return Err(Error::BadRequest(format!(
                    "the body is longer than its declared length of {} bytes",
                    obj.size
                )));
            }
            while !piece.is_empty() {
                let take = (stripe_size - buf.len()).min(piece.len());
                buf.push(piece.split_to(take));
                if buf.len() == stripe_size {
                    let data = buf.take();
                    if let Some(h) = md5.as_mut() {
                        h.update(data.clone()).await?;
                    }
                    let sums = (&mut fast, object_crc.as_mut());
                    self.send_stripe(up, layout, codec, obj.size, stripe, data, sums)
                        .await?;
                    stripe += 1;
                }
            }
        }
        if received != obj.size {
            return Err(Error::IncompleteBody {
                got: received,
                expected: obj.size,
            });
        }
        if buf.len() > 0 {
            let data = buf.take();
            if let Some(h) = md5.as_mut() {
                h.update(data.clone()).await?;
            }
            let sums = (&mut fast, object_crc.as_mut());
            self.send_stripe(up, layout, codec, obj.size, stripe, data, sums)
                .await?;
        }
        let md5 = match md5 {
            Some(h) => Some(h.finish().await?),
            None => None,
        };
        if let (Some(want), Some(got)) = (obj.content_md5, md5)
            && want != got
        {
            return Err(Error::BadDigest);
        }
        let checksum = match (&obj.checksum, sum, object_crc) {
            (Some(c), Some(h), _) => Some(c.check(&h.finish())?),
            (Some(c), None, Some((crc, _))) => Some(c.check(&crc.to_be_bytes())?),
            _ => None,
        };
        if let Some(etag) = &obj.etag {
            return Ok((etag.clone(), checksum));
        }
        let etag = match md5 {
            Some(d) if self.md5_etags => hex::encode(d),
            _ => hex::encode(&fast.finalize()[..16]),
        };
        Ok((etag, checksum))
    }

    /// Codes one stripe (the body's pieces, as received) and hands each drive its chunk,
    /// in pieces, and the chunk's CRC32C. The data chunks' CRC32Cs go into `fast` (the
    /// `ETag`'s hash) and, when given, are joined onto `object_crc`, the body's CRC32C so
    /// far (the zeros that pad the last stripe left out), whole chunks by the layout's
    /// shift.
    #[allow(clippy::too_many_arguments)]
    async fn send_stripe(
        &self,
        up: &mut Uploads<'_>,
        layout: oed_ec::Layout,
        codec: &oed_ec::Codec,
        size: u64,
        index: u64,
        mut data: Vec<Bytes>,
        (fast, mut object_crc): (&mut sha2::Sha256, Option<&mut (u32, &oed_ec::Crc32cShift)>),
    ) -> Result<()> {
        let stripe = layout
            .stripe(size, index)
            .ok_or_else(|| Error::BadRequest("body longer than declared".into()))?;
        let cl = stripe.chunk_len;
        let k = layout.k();
        let len: usize = data.iter().map(Bytes::len).sum();
        // The tail stripe's chunks are padded with zeros to equal length.
        pad_with_zeros(&mut data, (k * cl).saturating_sub(len));
        let chunks = split_chunks(data, k, cl);
        let mut parity: Vec<Vec<u8>> = (0..layout.m()).map(|_| vec![0u8; cl]).collect();
        {
            let d: Vec<&[Bytes]> = chunks.iter().map(Vec::as_slice).collect();
            let mut p: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            let started = std::time::Instant::now();
            codec.encode_pieces(&d, &mut p)?;
            self.traffic.ec(
                EcOp::Encode,
                (k * cl) as u64,
                started.elapsed().as_secs_f64(),
            );
        }
        let all = chunks
            .into_iter()
            .chain(parity.into_iter().map(|p| vec![Bytes::from(p)]));
        for (i, mut chunk) in all.enumerate() {
            let crc = if i < k {
                let real = len.saturating_sub(i * cl).min(cl);
                let (data_crc, chunk_crc) = crc_of_prefix(&chunk, real);
                if let Some((acc, shift)) = object_crc.as_deref_mut() {
                    *acc = if real == shift.len() {
                        shift.join(*acc, data_crc)
                    } else {
                        // The last stripe's: at most k a body.
                        crc32c::crc32c_combine(*acc, data_crc, real)
                    };
                }
                let crc = oed_ec::bind_stripe(chunk_crc, index);
                fast.update(crc.to_le_bytes());
                crc
            } else {
                oed_ec::frame_crc_pieces(index, &chunk)
            };
            chunk.push(Bytes::copy_from_slice(&crc.to_le_bytes()));
            up.send(i, chunk).await;
        }
        up.check_quorum()
    }
}

/// Body pieces smaller than this are copied into a buffer of the stripe's with the small
/// pieces next to them, so that a stripe is never cut into many short runs (each a call
/// of the erasure code, an entry of a `writev`).
const MIN_PIECE: usize = 16 * 1024;

/// A stripe being received: the body's pieces as they came (reference-counted, not
/// copied), small ones joined ([`MIN_PIECE`]). The erasure code, the frame CRCs, MD5 and
/// the sends all work on the pieces, so the coordinator never copies a body into one
/// buffer per stripe.
struct StripeBuf {
    pieces: Vec<Bytes>,
    small: BytesMut,
    len: usize,
}

impl StripeBuf {
    fn new() -> Self {
        Self {
            pieces: Vec::new(),
            small: BytesMut::new(),
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, piece: Bytes) {
        self.len += piece.len();
        if piece.len() < MIN_PIECE {
            self.small.extend_from_slice(&piece);
            if self.small.len() >= MIN_PIECE {
                self.pieces.push(self.small.split().freeze());
            }
            return;
        }
        if !self.small.is_empty() {
            self.pieces.push(self.small.split().freeze());
        }
        self.pieces.push(piece);
    }

    /// The stripe's pieces, in order; empty again after.
    fn take(&mut self) -> Vec<Bytes> {
        if !self.small.is_empty() {
            self.pieces.push(self.small.split().freeze());
        }
        self.len = 0;
        std::mem::take(&mut self.pieces)
    }
}

/// Zeros to pad the last stripe of an object with (at most `k - 1` bytes: its chunks are
/// as long as its data divided by `k`, rounded up), shared by every request.
static ZEROS: [u8; 256] = [0; 256];

/// Appends `n` zero bytes to `pieces`, as pieces of [`ZEROS`] (nothing copied).
fn pad_with_zeros(pieces: &mut Vec<Bytes>, mut n: usize) {
    while n > 0 {
        let take = n.min(ZEROS.len());
        pieces.push(Bytes::from_static(&ZEROS[..take]));
        n -= take;
    }
}

/// The CRC32C of the first `n` bytes of `pieces` (in order) and of all of them, in one
/// pass.
fn crc_of_prefix(pieces: &[Bytes], n: usize) -> (u32, u32) {
    let (mut crc, mut prefix, mut at) = (0u32, None, 0usize);
    for p in pieces {
        if prefix.is_none() && at + p.len() >= n {
            let head = n - at;
            crc = crc32c::crc32c_append(crc, &p[..head]);
            prefix = Some(crc);
            crc = crc32c::crc32c_append(crc, &p[head..]);
        } else {
            crc = crc32c::crc32c_append(crc, p);
        }
        at += p.len();
    }
    (prefix.unwrap_or(crc), crc)
}

/// The `k` chunks of `cl` bytes each of a whole stripe in pieces, each chunk in pieces
/// (none empty; slices of the same buffers, nothing copied).
fn split_chunks(pieces: Vec<Bytes>, k: usize, cl: usize) -> Vec<Vec<Bytes>> {
    let mut chunks: Vec<Vec<Bytes>> = (0..k).map(|_| Vec::new()).collect();
    let mut i = 0;
    let mut room = cl;
    for mut p in pieces {
        while !p.is_empty() && i < k {
            let take = room.min(p.len());
            chunks[i].push(p.split_to(take));
            room -= take;
            if room == 0 {
                i += 1;
                room = cl;
            }
        }
    }
    chunks
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use oed_ops::s3sum::Algorithm;

    use super::*;

    #[test]
    fn a_prefix_crc_and_the_whole_come_from_one_pass() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 251) as u8).collect();
        let pieces: Vec<Bytes> = [0..10, 10..11, 11..400, 400..1000]
            .into_iter()
            .map(|r| Bytes::copy_from_slice(&data[r]))
            .collect();
        for n in [0, 1, 10, 11, 12, 399, 400, 401, 999, 1000] {
            assert_eq!(
                crc_of_prefix(&pieces, n),
                (crc32c::crc32c(&data[..n]), crc32c::crc32c(&data)),
                "{n}"
            );
        }
        assert_eq!(crc_of_prefix(&[], 0), (0, 0));
    }

    fn digest(a: Algorithm, data: &[u8]) -> Vec<u8> {
        let mut h = a.hasher();
        h.update(data);
        h.finish()
    }

    /// A body's checksum against a header, a trailer, or nothing; what is stored.
    /// A body's pieces go into stripes uncopied unless small, come out in order, and a
    /// stripe's chunks are slices of them, none empty.
    #[test]
    fn stripes_keep_large_pieces_and_join_small_ones() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        {
            for _ in 0..50 {
                let body: Vec<u8> = (0..rng.gen_range(1..300_000))
                    .map(|_| rng.r#gen())
                    .collect();
                let body = Bytes::from(body);
                let mut buf = StripeBuf::new();
                let mut at = 0;
                let mut large = false;
                while at < body.len() {
                    let n = [1, 5, 100, 16_383, 16_384, 40_000, 70_000][rng.gen_range(0..7)];
                    let end = (at + n).min(body.len());
                    large |= end - at >= MIN_PIECE;
                    buf.push(body.slice(at..end));
                    at = end;
                }
                assert_eq!(buf.len(), body.len());
                let pieces = buf.take();
                assert_eq!(buf.len(), 0);
                assert_eq!(pieces.concat(), body);
                // Uncopied pieces point into the body itself.
                let inside = |p: &Bytes| {
                    let (b, e) = (body.as_ptr() as usize, body.as_ptr() as usize + body.len());
                    (b..e).contains(&(p.as_ptr() as usize))
                };
                assert_eq!(pieces.iter().any(inside), large);
                // A short piece is only ever the join of small ones before a large piece,
                // or at the end.
                for w in pieces.windows(2) {
                    assert!(
                        w[0].len() >= MIN_PIECE || w[1].len() >= MIN_PIECE,
                        "{} {}",
                        w[0].len(),
                        w[1].len()
                    );
                }
                let (k, cl) = (4, body.len().div_ceil(4));
                let mut whole = pieces.concat();
                whole.resize(k * cl, 0);
                let mut stripe = pieces;
                pad_with_zeros(&mut stripe, k * cl - body.len());
                let chunks = split_chunks(stripe, k, cl);
                assert_eq!(chunks.len(), k);
                for (i, c) in chunks.iter().enumerate() {
                    assert!(c.iter().all(|p| !p.is_empty()));
                    assert_eq!(c.concat(), whole[i * cl..(i + 1) * cl], "chunk {i}");
                }
            }
        }
    }

    /// Padding of any length comes as pieces of the shared zeros, none empty.
    #[test]
    fn the_last_stripe_is_padded_with_shared_zeros() {
        for n in [0, 1, ZEROS.len() - 1, ZEROS.len(), 2 * ZEROS.len() + 5] {
            let mut pieces = vec![Bytes::from_static(b"data")];
            pad_with_zeros(&mut pieces, n);
            assert_eq!(pieces.iter().map(Bytes::len).sum::<usize>(), 4 + n);
            assert!(pieces[1..].iter().all(|p| !p.is_empty()
                && p.iter().all(|b| *b == 0)
                && ZEROS.as_ptr_range().contains(&p.as_ptr())));
        }
    }

    #[test]
    fn body_checksums_are_checked_against_what_the_client_sent() {
        let a = Algorithm::Crc32c;
        let body = b"the body";
        let good = digest(a, body);
        let check = |expected: Expected| {
            BodyChecksum {
                algorithm: a,
                expected,
            }
            .check(&good)
        };
        let stored = check(Expected::Value(good.clone())).unwrap();
        assert_eq!(stored.value, oed_ops::s3sum::encode(&good));
        assert!(stored.full_object && stored.algorithm == a);
        assert!(check(Expected::Nothing).is_ok());
        let wrong = digest(a, b"another body");
        assert!(matches!(
            check(Expected::Value(wrong.clone())),
            Err(Error::ChecksumMismatch("CRC32C"))
        ));
        let trailer = |v: Option<String>| Expected::Trailer(Arc::new(move || v.clone()));
        assert!(check(trailer(Some(oed_ops::s3sum::encode(&good)))).is_ok());
        assert!(matches!(
            check(trailer(Some(oed_ops::s3sum::encode(&wrong)))),
            Err(Error::ChecksumMismatch(_))
        ));
        // Announced and never sent, or not a checksum: refused, not taken as a match.
        for bad in [None, Some("###".to_owned())] {
            assert!(matches!(check(trailer(bad)), Err(Error::BadRequest(_))));
        }
    }
}
