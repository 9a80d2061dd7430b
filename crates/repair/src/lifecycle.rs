//! Lifecycle: every drive applies its buckets' lifecycle rules
//! ([`oed_model::lifecycle`], set by `PutBucketLifecycleConfiguration`) to the versions
//! it holds, in passes, one lifecycle day (`lifecycle_day_seconds`) apart.
//!
//! Each version's rules are applied by one drive: of the drives holding the version's
//! shards, in shard order, the first that answers (the holder of shard 0 while it is
//! up). A drive walks its own records of the buckets that have rules, and acts on the
//! versions it is that drive for; it asks a drive ahead of it in a version's order
//! whether it is up at most every 30 s. Should two drives still act on one version (one
//! saw the other down), the action is taken once: expiring a current version writes a
//! delete marker on the condition that the expired version is still the current one
//! (a conditional write, which exactly one of two racing writers wins), and the other
//! actions delete a version named by its id, which a second time does nothing.
//!
//! What a pass does to each version it is the drive for, re-reading the key across the
//! cluster before it acts (the record here may be old):
//! - a current version past its rule's `Days` or `Date`: deleted in a bucket without
//!   versioning; else a delete marker becomes current (the `null` one while versioning
//!   is suspended);
//! - a current delete marker with no noncurrent version behind it, under a rule with
//!   `ExpiredObjectDeleteMarker` or one whose `Days` it has outlived: removed;
//! - a noncurrent version past `NoncurrentDays` since it stopped being current (the
//!   write of the version after it), unless it is among the `NewerNoncurrentVersions`
//!   newest noncurrent versions of its key, or object lock keeps it (a retention date
//!   not reached, or a legal hold): deleted;
//! - an unfinished multipart upload past `DaysAfterInitiation`: aborted (its parts
//!   deleted, then the upload).
//!
//! Actions are paced at `lifecycle_actions_per_second`. The pass's place (bucket and
//! metadata key) is kept in the store after each page, so a restarted drive resumes it.
//! A drive that holds no bucket with rules reads nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::{Persisted, Repair, RepairConfig, save_persisted};
use oed_cluster::list::{Merge, walk};
use oed_cluster::versions::Found;
use oed_cluster::write::{NewObject, parse_upload_key, parts_prefix, upload_key};
use oed_model::account::Versioning;
use oed_model::error::{Error, Result};
use oed_model::lifecycle::{Clock, Lifecycle, Subject};
use oed_model::record::{
    ObjectRecord, VersionId, WriteCondition, now_ms, object_key, parse_version_key, versions_of,
};

/// Records read per page.
const PAGE: usize = 128;

/// How long an answer to "are you up?" is taken as still true.
const UP_FOR: Duration = Duration::from_secs(30);

/// The most parts an upload has (S3's limit).
const MAX_PARTS: usize = 10_000;

/// What the lifecycle keeps in the store between starts.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LifecycleState {
    /// The bucket the pass in progress is in, if one is.
    #[serde(default)]
    pub bucket: Option<String>,
    /// The metadata key (hex) of the last record that pass read in it.
    #[serde(default)]
    pub cursor: String,
    /// When the pass in progress, or the last one, started.
    #[serde(default)]
    pub pass_started_ms: u64,
    /// When the last pass completed.
    #[serde(default)]
    pub last_complete_ms: Option<u64>,
    /// How long it took, seconds.
    #[serde(default)]
    pub last_pass_seconds: Option<f64>,
}

impl Persisted for LifecycleState {
    const NAME: &'static str = "lifecycle";
}

/// Counters of what the lifecycle did since start.
#[derive(Debug, Default)]
pub struct LifecycleStats {
    /// Whether a pass runs.
    pub running: AtomicBool,
    /// Passes completed.
    pub passes: AtomicU64,
    /// Versions this drive applied rules to.
    pub checked: AtomicU64,
    /// Current versions expired (deleted, or behind a new delete marker).
    pub expired_current: AtomicU64,
    /// Noncurrent versions deleted.
    pub expired_noncurrent: AtomicU64,
    /// Delete markers with nothing behind them removed.
    pub delete_markers_removed: AtomicU64,
    /// Multipart uploads aborted.
    pub uploads_aborted: AtomicU64,
    /// Actions that failed (each is tried again by the next pass).
    pub failures: AtomicU64,
    pub(crate) state: Mutex<LifecycleState>,
}

/// The lifecycle's part of [`crate::RepairStatus`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LifecycleStatus {
    /// Whether lifecycle runs on this drive (`lifecycle_actions_per_second` is not 0).
    pub enabled: bool,
    /// Actions per second, at most.
    pub actions_per_second: u32,
    /// A lifecycle day, seconds.
    pub day_seconds: u64,
    /// Buckets with lifecycle rules.
    pub buckets: usize,
    /// Whether a pass runs now.
    pub running: bool,
    /// The bucket the pass in progress is in.
    pub at_bucket: Option<String>,
    /// When the pass in progress, or the last one, started (ms since the epoch).
    pub pass_started_ms: u64,
    /// When the last pass completed.
    pub last_complete_ms: Option<u64>,
    /// How long it took, seconds.
    pub last_pass_seconds: Option<f64>,
    /// When the next pass starts, when none runs.
    pub next_pass_ms: Option<u64>,
    /// Passes completed since start.
    pub passes: u64,
    /// Versions this drive applied rules to since start.
    pub checked: u64,
    /// Current versions expired since start.
    pub expired_current: u64,
    /// Noncurrent versions deleted since start.
    pub expired_noncurrent: u64,
    /// Lone delete markers removed since start.
    pub delete_markers_removed: u64,
    /// Multipart uploads aborted since start.
    pub uploads_aborted: u64,
    /// Actions that failed since start.
    pub failures: u64,
}

impl LifecycleStats {
    pub(crate) fn status(&self, config: &RepairConfig, buckets: usize) -> LifecycleStatus {
        let s = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let running = self.running.load(Ordering::Relaxed);
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let enabled = config.lifecycle_rate > 0;
        LifecycleStatus {
            enabled,
            actions_per_second: config.lifecycle_rate,
            day_seconds: config.lifecycle_day.as_secs(),
            buckets,
            running,
            next_pass_ms: (enabled && !running && s.bucket.is_none()).then(|| {
                s.pass_started_ms
                    .saturating_add(config.lifecycle_day.as_millis() as u64)
            }),
            at_bucket: s.bucket,
            pass_started_ms: s.pass_started_ms,
            last_complete_ms: s.last_complete_ms,
            last_pass_seconds: s.last_pass_seconds,
            passes: n(&self.passes),
            checked: n(&self.checked),
            expired_current: n(&self.expired_current),
            expired_noncurrent: n(&self.expired_noncurrent),
            delete_markers_removed: n(&self.delete_markers_removed),
            uploads_aborted: n(&self.uploads_aborted),
            failures: n(&self.failures),
        }
    }
}

/// Runs lifecycle passes until `stop`: one lifecycle day after the start of the last,
/// or at once when asked (`oedd admin lifecycle`) or when one was left unfinished.
pub(crate) async fn run(r: Arc<Repair>, stop: CancellationToken) {
    if r.config.lifecycle_rate == 0 {
        return;
    }
    let saved = <LifecycleState as Persisted>::load(&r.store);
    *r.lifecycle_stats
        .state
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = saved;
    let day_ms = r.config.lifecycle_day.as_millis() as u64;
    loop {
        let (resume, started) = {
            let s = r
                .lifecycle_stats
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            (s.bucket.is_some(), s.pass_started_ms)
        };
        if !resume {
            let due = started.saturating_add(day_ms);
            let wait = Duration::from_millis(due.saturating_sub(now_ms()));
            tokio::select! {
                () = stop.cancelled() => return,
                () = r.lifecycle_now.notified() => {}
                () = tokio::time::sleep(wait.min(Duration::from_hours(24))) => {
                    if now_ms() < due {
                        continue;
                    }
                }
            }
        }
        r.lifecycle_stats.running.store(true, Ordering::Relaxed);
        let done = tokio::select! {
            () = stop.cancelled() => None,
            d = pass(&r) => Some(d),
        };
        r.lifecycle_stats.running.store(false, Ordering::Relaxed);
        match done {
            None => return,
            Some(Ok(())) => {}
            Some(Err(e)) => {
                tracing::warn!(error = %e, "lifecycle pass failed; resuming in a minute");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_mins(1)) => {}
                }
            }
        }
    }
}

fn save(r: &Repair, f: impl FnOnce(&mut LifecycleState)) {
    save_persisted(&r.store, &r.lifecycle_stats.state, f);
}

/// One pass, from where the last one stopped (if it did) to the end of the last bucket
/// with rules.
async fn pass(r: &Arc<Repair>) -> Result<()> {
    let (resume_bucket, resume_at) = {
        let s = r
            .lifecycle_stats
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (s.bucket.clone(), hex::decode(&s.cursor).unwrap_or_default())
    };
    let started = Instant::now();
    if resume_bucket.is_none() {
        save(r, |s| {
            s.pass_started_ms = now_ms();
            s.bucket = Some(String::new());
            s.cursor.clear();
        });
    }
    let mut ctx = Pass::new(r);
    let buckets = r.cluster.accounts().lifecycles();
    for (bucket, _) in buckets {
        if resume_bucket.as_ref().is_some_and(|b| bucket < *b) {
            continue;
        }
        let prefix = object_key(&bucket, "");
        let mut at = match &resume_bucket {
            Some(b) if *b == bucket && resume_at.starts_with(&prefix) => resume_at.clone(),
            _ => prefix.clone(),
        };
        save(r, |s| {
            s.bucket = Some(bucket.clone());
            s.cursor = hex::encode(&at);
        });
        // The rules as they are now: a change made during the pass applies from the next
        // page on; rules deleted stop it.
        while let Some(lc) = rules(r, &bucket) {
            let (records, last) = {
                let (store, from, b) = (r.store.clone(), at.clone(), bucket.clone());
                tokio::task::spawn_blocking(move || {
                    store.objects_after(&from, PAGE, |rec| rec.bucket == b)
                })
                .await
                .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))??
            };
            for rec in &records {
                ctx.apply(&lc, rec).await;
            }
            let Some(last) = last.filter(|l| l.starts_with(&prefix)) else {
                break;
            };
            at = last;
            save(r, |s| s.cursor = hex::encode(&at));
        }
    }
    let secs = started.elapsed().as_secs_f64();
    r.lifecycle_stats.passes.fetch_add(1, Ordering::Relaxed);
    save(r, |s| {
        s.bucket = None;
        s.cursor.clear();
        s.last_complete_ms = Some(now_ms());
        s.last_pass_seconds = Some(secs);
    });
    tracing::debug!(seconds = secs, "lifecycle pass complete");
    Ok(())
}

/// The enabled rules of `bucket` now, if any.
fn rules(r: &Repair, bucket: &str) -> Option<Lifecycle> {
    r.cluster
        .accounts()
        .settings(bucket)
        .and_then(|s| s.lifecycle.clone())
        .filter(Lifecycle::any_enabled)
}

/// A key and its versions, newest first: (id, written at, current).
type KeyVersions = ((String, String), Vec<(VersionId, u64, bool)>);

/// A pass's working state: which drives answered, the versions of the last key looked
/// at, and the pace of its actions.
struct Pass<'a> {
    r: &'a Arc<Repair>,
    me: String,
    up: HashMap<String, (Instant, bool)>,
    /// The versions of the last key looked at.
    versions: Option<KeyVersions>,
    next_action: Instant,
    gap: Duration,
}

impl<'a> Pass<'a> {
    fn new(r: &'a Arc<Repair>) -> Self {
        Self {
            r,
            me: r.store.drive_id().to_owned(),
            up: HashMap::new(),
            versions: None,
            next_action: Instant::now(),
            gap: Duration::from_secs(1) / r.config.lifecycle_rate.max(1),
        }
    }

    fn clock(&self) -> Clock {
        Clock {
            now_ms: now_ms(),
            day_ms: self.r.config.lifecycle_day.as_millis() as u64,
        }
    }

    /// Whether drive `id` answers (asked at most every [`UP_FOR`]).
    async fn is_up(&mut self, id: &str) -> bool {
        if let Some((at, up)) = self.up.get(id)
            && at.elapsed() < UP_FOR
        {
            return *up;
        }
        let up = match self.r.cluster.drive(id) {
            Some(d) => oed_model::drive::within(self.r.cluster.timeout, d.versions(&[]))
                .await
                .is_ok(),
            None => false,
        };
        self.up.insert(id.to_owned(), (Instant::now(), up));
        up
    }

    /// Whether this drive applies the rules to `rec`: the first of its holders, in shard
    /// order, that answers.
    async fn owns(&mut self, rec: &ObjectRecord) -> bool {
        for d in &rec.drives {
            if *d == self.me {
                return true;
            }
            if self.is_up(d).await {
                return false;
            }
        }
        false
    }

    /// Waits for the next action's turn.
    async fn pace(&mut self) {
        let now = Instant::now();
        if self.next_action > now {
            tokio::time::sleep(self.next_action - now).await;
        }
        self.next_action = self.next_action.max(now) + self.gap;
    }

    /// Applies the rules `lc` to the version whose record here is `rec`.
    async fn apply(&mut self, lc: &Lifecycle, rec: &ObjectRecord) {
        let key = rec.key.as_str();
        let kind = if let Some((user, upload)) = parse_upload_key(key) {
            if lc
                .abort_due(user, rec.last_modified_ms, self.clock())
                .is_none()
            {
                return;
            }
            Kind::Upload(user, upload)
        } else if let Some((user, v)) = parse_version_key(key) {
            if !lc.expires_noncurrent() {
                return;
            }
            Kind::Noncurrent(user, v)
        } else if key.starts_with('\u{1}') {
            return;
        } else {
            Kind::Current
        };
        if !self.owns(rec).await {
            return;
        }
        self.r
            .lifecycle_stats
            .checked
            .fetch_add(1, Ordering::Relaxed);
        let done = match kind {
            Kind::Current if rec.delete_marker => self.lone_marker(lc, rec).await,
            Kind::Current => self.expire_current(lc, rec).await,
            Kind::Noncurrent(user, v) => self.expire_noncurrent(lc, rec, user, v).await,
            Kind::Upload(user, upload) => self.abort_upload(lc, rec, user, upload).await,
        };
        let stats = &self.r.lifecycle_stats;
        match done {
            Ok(None) => {}
            Ok(Some(action)) => {
                let c = match action {
                    Action::ExpiredCurrent => &stats.expired_current,
                    Action::ExpiredNoncurrent => &stats.expired_noncurrent,
                    Action::RemovedMarker => &stats.delete_markers_removed,
                    Action::AbortedUpload => &stats.uploads_aborted,
                };
                c.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(bucket = %rec.bucket, key = %rec.key, ?action, "lifecycle");
            }
            Err(e) => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                tracing::info!(bucket = %rec.bucket, key = %rec.key, error = %e, "lifecycle action not taken; the next pass tries again");
            }
        }
    }

    /// A current version past its rule's day or date: deleted, or behind a delete marker.
    async fn expire_current(
        &mut self,
        lc: &Lifecycle,
        rec: &ObjectRecord,
    ) -> Result<Option<Action>> {
        let clock = self.clock();
        let Some((due, _)) = lc.current_expiry(subject(rec), rec.last_modified_ms, clock) else {
            return Ok(None);
        };
        if clock.now_ms < due {
            return Ok(None);
        }
        let cluster = &self.r.cluster;
        let Some(current) = cluster.head(&rec.bucket, &rec.key).await? else {
            return Ok(None);
        };
        if current.version_id != rec.version_id || current.delete_marker {
            return Ok(None);
        }
        // Again with the record as the cluster has it (a tag change this drive missed).
        if lc
            .current_expiry(subject(&current), current.last_modified_ms, clock)
            .is_none_or(|(due, _)| clock.now_ms < due)
        {
            return Ok(None);
        }
        let versioning = cluster.accounts().versioning(&rec.bucket);
        if versioning == Versioning::Unversioned {
            // Deleted for good: not while object lock keeps it.
            if current.locked(clock.now_ms).is_some() {
                return Ok(None);
            }
            self.pace().await;
            cluster.delete_record(&current).await;
            return Ok(Some(Action::ExpiredCurrent));
        }
        self.pace().await;
        let marker = NewObject {
            bucket: rec.bucket.clone(),
            key: rec.key.clone(),
            delete_marker: true,
            versioned: versioning == Versioning::Enabled,
            condition: Some(WriteCondition::Current(current.version_id)),
            ..NewObject::default()
        };
        match cluster
            .put_object(marker, futures_util::stream::empty())
            .await
        {
            Ok(written) => {
                if versioning == Versioning::Suspended {
                    cluster.drop_replaced_nulls(&written.record).await?;
                }
                Ok(Some(Action::ExpiredCurrent))
            }
            // A write since (a client's, or another drive's marker) made it noncurrent.
            Err(Error::PreconditionFailed(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A current delete marker with no noncurrent version behind it: removed.
    async fn lone_marker(&mut self, lc: &Lifecycle, rec: &ObjectRecord) -> Result<Option<Action>> {
        if !lc.removes_lone_marker(&rec.key, rec.last_modified_ms, self.clock()) {
            return Ok(None);
        }
        let cluster = &self.r.cluster;
        if cluster
            .newest_noncurrent(&rec.bucket, &rec.key)
            .await?
            .is_some()
        {
            return Ok(None);
        }
        let Some(current) = cluster.head(&rec.bucket, &rec.key).await? else {
            return Ok(None);
        };
        if current.version_id != rec.version_id || !current.delete_marker {
            return Ok(None);
        }
        self.pace().await;
        cluster
            .delete_version(&Found {
                record: current,
                current: true,
            })
            .await?;
        Ok(Some(Action::RemovedMarker))
    }

    /// The versions of `bucket`/`key`, newest first: (id, written at, current).
    async fn versions(&mut self, bucket: &str, key: &str) -> Result<&[(VersionId, u64, bool)]> {
        let fresh = self
            .versions
            .as_ref()
            .is_some_and(|((b, k), _)| b == bucket && k == key);
        if !fresh {
            let cluster = &self.r.cluster;
            let mut all = Vec::new();
            if let Some(c) = cluster.head(bucket, key).await? {
                all.push((c.version_id, c.last_modified_ms, true));
            }
            let prefix = versions_of(key);
            let mut merge = Merge::new(cluster, bucket, &prefix);
            while let Some(r) = merge.next().await? {
                if !r.key.starts_with(&prefix) {
                    break;
                }
                if r.user_key() == key {
                    all.push((r.version_id, r.last_modified_ms, false));
                }
            }
            self.versions = Some(((bucket.to_owned(), key.to_owned()), all));
        }
        Ok(self.versions.as_ref().map_or(&[], |(_, v)| v.as_slice()))
    }

    /// A noncurrent version past its rule's days since it stopped being current, and
    /// not among the newest its rule keeps: deleted.
    async fn expire_noncurrent(
        &mut self,
        lc: &Lifecycle,
        rec: &ObjectRecord,
        key: &str,
        v: VersionId,
    ) -> Result<Option<Action>> {
        let clock = self.clock();
        let versions = self.versions(&rec.bucket, key).await?;
        let Some(i) = versions.iter().position(|(id, _, _)| *id == v) else {
            return Ok(None);
        };
        if i == 0 || versions[i].2 {
            // Nothing newer is known (its successor was deleted, and it is about to be
            // made current), or it is current again.
            return Ok(None);
        }
        let since = versions[i - 1].1;
        let newer = i - usize::from(versions[0].2);
        let Some(due) = lc.noncurrent_expiry(subject(rec), since, newer, clock) else {
            return Ok(None);
        };
        if clock.now_ms < due {
            return Ok(None);
        }
        // As the cluster has it now: object lock may keep it (a change this drive
        // missed included).
        let cluster = &self.r.cluster;
        let Some(now) = cluster.head(&rec.bucket, &rec.key).await? else {
            return Ok(None);
        };
        if now.version_id != v
            || now.locked(clock.now_ms).is_some()
            || lc
                .noncurrent_expiry(subject(&now), since, newer, clock)
                .is_none_or(|due| clock.now_ms < due)
        {
            return Ok(None);
        }
        self.pace().await;
        cluster
            .delete_version(&Found {
                record: now,
                current: false,
            })
            .await?;
        Ok(Some(Action::ExpiredNoncurrent))
    }

    /// An unfinished multipart upload past its rule's days: aborted.
    async fn abort_upload(
        &mut self,
        lc: &Lifecycle,
        rec: &ObjectRecord,
        key: &str,
        upload: &str,
    ) -> Result<Option<Action>> {
        let clock = self.clock();
        if lc
            .abort_due(key, rec.last_modified_ms, clock)
            .is_none_or(|due| clock.now_ms < due)
        {
            return Ok(None);
        }
        let cluster = &self.r.cluster;
        let Some(marker) = cluster.head(&rec.bucket, &upload_key(key, upload)).await? else {
            return Ok(None);
        };
        self.pace().await;
        // The upload first, so that completing it now fails (`NoSuchUpload`), then its
        // parts, unless a completion that came just before made them an object's.
        cluster.delete_record(&marker).await;
        let prefix = parts_prefix(upload);
        if cluster
            .head(&rec.bucket, key)
            .await?
            .is_some_and(|o| o.parts.iter().any(|p| p.key.starts_with(&prefix)))
        {
            return Ok(None);
        }
        let parts = walk(
            cluster,
            &rec.bucket,
            &prefix,
            None,
            None,
            MAX_PARTS,
            &prefix,
        )
        .await?;
        for p in &parts.contents {
            cluster.delete_record(p).await;
        }
        Ok(Some(Action::AbortedUpload))
    }
}

/// What a version's record names.
enum Kind<'k> {
    Current,
    Noncurrent(&'k str, VersionId),
    Upload(&'k str, &'k str),
}

/// What the rules did to a version.
#[derive(Clone, Copy, Debug)]
enum Action {
    ExpiredCurrent,
    ExpiredNoncurrent,
    RemovedMarker,
    AbortedUpload,
}

fn subject(rec: &ObjectRecord) -> Subject<'_> {
    Subject {
        key: rec.user_key(),
        size: rec.object_size(),
        tags: &rec.tags,
    }
}
