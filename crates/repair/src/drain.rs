//! Drain: a drive marked out in the cluster map moves every shard it holds to drives
//! that are in, before it is removed from the map.
//!
//! For each record here, one at a time at the heal rate:
//! 1. Ask the holders for the current version. A version that is not current any more
//!    (overwritten, deleted) is dropped here; one whose write never reached a quorum is
//!    dropped once it is older than the sweep grace period; a current version whose shard
//!    this drive lacks is healed here first (and moved on a later pass).
//! 2. Pick the target: the first drive the map in force places the object on that holds
//!    none of its shards (else any drive that is in and holds none, another failure domain
//!    first).
//! 3. Send the shard file as it is stored; the target checks every chunk's CRC32C and
//!    stores it with the one durable write, its record naming itself for that shard.
//! 4. Tell every other holder of the object (and, for a part of a multipart object, every
//!    holder of that object's record) that the shard moved ([`oed_model::drive::Relocation`]);
//!    each updates its record in one synced write.
//! 5. Ask the holders again (a version deleted meanwhile is not brought back), then
//!    remove the shard here. Until every holder has said yes, the shard stays here and
//!    is tried again on the next pass.
//!
//! A pass ends with a check on every other drive that no record there names this drive
//! any more (for an object or a part): what one does is fixed (a shard this drive missed
//! is healed here and moved; a part entry left behind is pointed at where the part is).
//! The drain is done when this drive holds no record and no drive names it: it can be
//! removed from the map (`oedd admin remove`).

#![allow(clippy::cast_precision_loss)]

use std::sync::Arc;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::heal::current_of;
use super::{Persisted, Repair, save_persisted};
use oed_cluster::newest_readable;
use oed_model::drive::{Drive, DriveError, ErrorCode, ObjectRef, Relocation, ShardUpload};
use oed_model::error::{Error, Result};
use oed_model::heal::{HealCause, HealEntry};
use oed_model::record::{ObjectRecord, now_ms};
use oed_store::ShardBytes;

/// Records taken at a time.
const PAGE: usize = 64;

/// Time between passes while something is left.
const PASS_PAUSE: Duration = Duration::from_secs(5);

phases! {
    /// Where a drain is.
    DrainPhase {
        /// Moving this drive's shards to others.
        Draining = "draining",
        /// Nothing here, and no drive names this one.
        Done = "done",
        /// An operator stopped it, or the drive was marked in again.
        Stopped = "stopped",
    }
}

/// Where a drain is; kept in the store as `drain`, shown by `oedd admin`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DrainState {
    /// Its phase.
    pub state: DrainPhase,
    /// When it started, ms since the epoch.
    pub started_ms: Option<u64>,
    /// When it was done.
    pub finished_ms: Option<u64>,
    /// Passes over this drive's records so far.
    pub passes: u64,
    /// Shards moved to other drives.
    pub moved_shards: u64,
    /// Their bytes.
    pub moved_bytes: u64,
    /// Shards dropped instead of moved (not current any more).
    pub dropped_shards: u64,
    /// Moves that failed (tried again on the next pass).
    pub failures: u64,
    /// The last failure.
    pub last_error: Option<String>,
    /// Shards still here.
    #[serde(default)]
    pub left_shards: u64,
    /// Seconds left at the current move rate.
    #[serde(default)]
    pub eta_seconds: Option<f64>,
}

impl Persisted for DrainState {
    const NAME: &'static str = "drain";
}

impl DrainState {
    /// Fills in the figures that follow from the store and the rate.
    pub fn update(&mut self, left: u64, bytes_per_shard: f64, rate: f64) {
        if self.state == DrainPhase::None {
            return;
        }
        self.left_shards = left;
        self.eta_seconds = (self.state == DrainPhase::Draining && rate > 0.0 && left > 0)
            .then(|| left as f64 * bytes_per_shard / rate);
    }
}

/// Counters of moves since start, for the metrics.
#[derive(Debug, Default)]
pub struct DrainStats {
    /// Shards moved.
    pub moved_shards: AtomicU64,
    /// Their bytes.
    pub moved_bytes: AtomicU64,
    /// Moves that failed.
    pub failures: AtomicU64,
}

fn save(r: &Repair, f: impl FnOnce(&mut DrainState)) -> DrainState {
    save_persisted(&r.store, &r.drain, f)
}

/// Whether this drive is out in the map in force.
pub(super) fn is_out(r: &Repair) -> bool {
    let map = r.cluster.map();
    map.drives[map.local].state == oed_model::map::DriveState::Out
}

impl Repair {
    /// Starts draining this drive, which must be out in the map in force.
    ///
    /// # Errors
    /// [`Error::BadRequest`] when the drive is in.
    pub fn start_drain(&self) -> Result<bool> {
        if !is_out(self) {
            return Err(Error::BadRequest(format!(
                "drive {} is in: mark it out first (oedd admin out {0}), so that it gets no new shards while it drains",
                self.store.drive_id()
            )));
        }
        save(self, |s| {
            if s.state != DrainPhase::Draining {
                *s = DrainState {
                    state: DrainPhase::Draining,
                    started_ms: Some(now_ms()),
                    ..DrainState::default()
                };
            }
        });
        self.drain_now.notify_one();
        Ok(true)
    }

    /// Stops a drain where it is (what moved stays moved).
    pub fn stop_drain(&self) -> bool {
        let was = save(self, |s| {
            if s.state == DrainPhase::Draining {
                s.state = DrainPhase::Stopped;
            }
        });
        self.drain_now.notify_one();
        was.state == DrainPhase::Stopped
    }

    /// A newer map is in force: a drain of a drive marked in again stops, and the heal
    /// entries held for drives the map no longer lists (`removed`, drained before they
    /// left) are dropped.
    pub fn map_changed(&self, removed: &[String]) {
        for id in removed {
            let mut dropped = 0;
            for _ in 0..10_000 {
                let entries = self
                    .store
                    .heal_queue()
                    .entries_for(id, 200)
                    .unwrap_or_default();
                if entries.is_empty() {
                    break;
                }
                for e in &entries {
                    if self.store.heal_queue().finish(e).unwrap_or(false) {
                        dropped += 1;
                    }
                }
            }
            if dropped > 0 {
                tracing::info!(drive = %id, dropped, "heal entries for a drive that left the map dropped");
            }
        }
        if !is_out(self) {
            let s = save(self, |s| {
                if s.state == DrainPhase::Draining {
                    s.state = DrainPhase::Stopped;
                }
            });
            if s.state == DrainPhase::Stopped {
                tracing::warn!("this drive is in again: its drain stops");
            }
        }
        self.note_removed(removed);
        self.drain_now.notify_one();
        self.rebalance_now.notify_one();
    }

    /// The drain's state with its figures.
    #[must_use]
    pub fn drain_status(&self) -> DrainState {
        let mut s = self
            .drain
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let moved = s.moved_shards.max(1) as f64;
        let per_shard = s.moved_bytes as f64 / moved;
        s.update(self.store.object_count(), per_shard, self.heal_stats.rate());
        s
    }
}

/// Runs a drain whenever one is asked for (or was left running by a restart), until
/// `stop`.
pub async fn run(r: Arc<Repair>, stop: CancellationToken) {
    loop {
        let draining =
            r.drain.lock().unwrap_or_else(PoisonError::into_inner).state == DrainPhase::Draining;
        if draining && is_out(&r) {
            let done = tokio::select! {
                () = stop.cancelled() => return,
                done = pass(&r) => done,
            };
            if done {
                let s = save(&r, |s| {
                    s.state = DrainPhase::Done;
                    s.finished_ms = Some(now_ms());
                });
                tracing::warn!(
                    moved_shards = s.moved_shards,
                    moved_bytes = s.moved_bytes,
                    "drain complete: nothing is left on this drive and no drive names it; it can be removed from the map"
                );
                continue;
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = r.drain_now.notified() => {}
                () = tokio::time::sleep(PASS_PAUSE) => {}
            }
        } else {
            tokio::select! {
                () = stop.cancelled() => return,
                () = r.drain_now.notified() => {}
            }
        }
    }
}

/// One pass over this drive's records and the other drives' references to it; returns
/// whether nothing is left.
async fn pass(r: &Arc<Repair>) -> bool {
    let mut after: Vec<u8> = Vec::new();
    loop {
        if !still_draining(r) {
            return false;
        }
        let page = {
            let (store, from) = (r.store.clone(), after.clone());
            tokio::task::spawn_blocking(move || store.objects_after(&from, PAGE, |_| true)).await
        };
        let (records, last) = match page.map_err(|e| Error::Io(std::io::Error::other(e))) {
            Ok(Ok(p)) => p,
            Ok(Err(e)) | Err(e) => {
                fail(r, &format!("reading the records: {e}"));
                return false;
            }
        };
        for rec in records {
            if !still_draining(r) {
                return false;
            }
            match move_one(r, &rec).await {
                Ok(Moved::Away(bytes)) => {
                    r.drain_stats.moved_shards.fetch_add(1, Ordering::Relaxed);
                    r.drain_stats
                        .moved_bytes
                        .fetch_add(bytes, Ordering::Relaxed);
                    save(r, |s| {
                        s.moved_shards += 1;
                        s.moved_bytes += bytes;
                    });
                }
                Ok(Moved::Dropped(why)) => {
                    tracing::debug!(bucket = %rec.bucket, key = %rec.key, why, "drain: shard dropped");
                    save(r, |s| s.dropped_shards += 1);
                }
                Ok(Moved::Later(why)) => {
                    tracing::debug!(bucket = %rec.bucket, key = %rec.key, why, "drain: later");
                }
                Err(e) => {
                    r.drain_stats.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(bucket = %rec.bucket, key = %rec.key, error = %e, "drain: shard not moved; trying again on the next pass");
                    fail(r, &format!("{}/{}: {e}", rec.bucket, rec.key));
                }
            }
        }
        match last {
            Some(l) => after = l,
            None => break,
        }
    }
    save(r, |s| s.passes += 1);
    let named = match references(r).await {
        Ok(n) => n,
        Err(e) => {
            fail(r, &e.to_string());
            return false;
        }
    };
    named == 0 && r.store.object_count() == 0
}

fn still_draining(r: &Repair) -> bool {
    is_out(r)
        && r.drain.lock().unwrap_or_else(PoisonError::into_inner).state == DrainPhase::Draining
}

fn fail(r: &Repair, why: &str) {
    let why = why.to_owned();
    save(r, |s| {
        s.failures += 1;
        s.last_error = Some(why);
    });
}

/// What became of one record.
#[derive(Debug)]
pub(super) enum Moved {
    /// Its shard is on another drive now and gone from here: its bytes.
    Away(u64),
    /// Its shard was removed here without a move, and why.
    Dropped(&'static str),
    /// Nothing done this pass, and why.
    Later(&'static str),
}

async fn move_one(r: &Arc<Repair>, rec: &ObjectRecord) -> Result<Moved> {
    let me = r.store.drive_id().to_owned();
    let (records, failed) = r.cluster.holders(&rec.bucket, &rec.key, &rec.drives).await;
    let Some(current) = current_of(&records, failed)? else {
        if now_ms().saturating_sub(rec.last_modified_ms) < r.config.grace.as_millis() as u64 {
            return Ok(Moved::Later(
                "no quorum holds it yet; the sweep grace period has not passed",
            ));
        }
        drop_local(r, rec).await?;
        return Ok(Moved::Dropped("no quorum holds this version"));
    };
    if current.version_id != rec.version_id {
        if current.version_id < rec.version_id {
            return Ok(Moved::Later("a newer version is being written"));
        }
        if let Some(shard) = current.drives.iter().position(|d| *d == me) {
            // This drive missed the current version: heal it here, move it next pass.
            let entry = HealEntry::of(&current, shard as u16, HealCause::Missing, 0, &me);
            r.store.heal_queue().queue(std::slice::from_ref(&entry))?;
            r.wake();
            return Ok(Moved::Later("the current version is being healed here"));
        }
        drop_local(r, rec).await?;
        return Ok(Moved::Dropped("overwritten"));
    }
    let Some(shard) = rec.drives.iter().position(|d| *d == me) else {
        // Every holder names another drive for what this one holds: it moved already.
        drop_local(r, rec).await?;
        return Ok(Moved::Dropped("moved before"));
    };
    let (target_id, target) = target(r, rec, shard)?;
    finish_move(r, rec, shard, &target_id, target.as_ref()).await
}

/// Moves this drive's shard `shard` of `rec` (the current version) to `target`: sends
/// it, has every holder's record name the target, and removes it here once all have
/// (and the version is still current).
pub(super) async fn finish_move(
    r: &Arc<Repair>,
    rec: &ObjectRecord,
    shard: usize,
    target_id: &str,
    target: &dyn Drive,
) -> Result<Moved> {
    let me = r.store.drive_id().to_owned();
    let bytes = copy(r, rec, shard, target_id, target).await?;
    let Some(bytes) = bytes else {
        return Ok(Moved::Later("the target holds a newer version"));
    };
    let relocation = Relocation {
        bucket: rec.bucket.clone(),
        key: rec.key.clone(),
        version_id: rec.version_id,
        shard_index: shard as u16,
        from: me.clone(),
        to: target_id.to_owned(),
        parent: rec.parent.clone(),
    };
    tell_holders(r, rec, &relocation, target_id, false).await?;
    // The version may have been deleted or overwritten while it moved.
    let (after, failed) = r.cluster.holders(&rec.bucket, &rec.key, &rec.drives).await;
    if failed == 0 && newest_readable(&after).is_none_or(|n| n.version_id != rec.version_id) {
        match target
            .delete_object(&rec.bucket, &rec.key, Some(rec.version_id))
            .await
        {
            Ok(()) => {}
            Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::Superseded) => {}
            Err(e) => return Err(Error::Unavailable(format!("{target_id}: {e}"))),
        }
        drop_local(r, rec).await?;
        return Ok(Moved::Dropped("overwritten or deleted while it moved"));
    }
    drop_local(r, rec).await?;
    Ok(Moved::Away(bytes))
}

/// Removes this drive's shard of `rec` (only that version).
pub(super) async fn drop_local(r: &Repair, rec: &ObjectRecord) -> Result<()> {
    match r
        .store
        .delete_object(&rec.bucket, &rec.key, Some(rec.version_id))
        .await
    {
        Ok(()) | Err(Error::NotFound(_) | Error::Superseded) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The drive shard `shard` goes to: the one the map in force pairs it with
/// ([`oed_model::map::ClusterMap::moves`], as a rebalance moves it); else the first the
/// map places the object on that holds none of its shards; else any drive that is in and
/// holds none, a failure domain the object does not use yet first.
fn target(r: &Repair, rec: &ObjectRecord, shard: usize) -> Result<(String, Arc<dyn Drive>)> {
    let map = r.cluster.map();
    let holds = |id: &str| rec.drives.iter().any(|d| d == id);
    let paired = map
        .moves(&rec.bucket, &rec.key, &rec.drives)
        .into_iter()
        .find(|m| m.shard == shard)
        .map(|m| &map.drives[m.to]);
    let placed = map.place(&rec.bucket, &rec.key, rec.drives.len());
    let mut pick = paired.or_else(|| {
        placed
            .into_iter()
            .map(|i| &map.drives[i])
            .find(|d| !holds(&d.id))
    });
    if pick.is_none() {
        let used: Vec<&str> = rec
            .drives
            .iter()
            .filter_map(|id| map.index_of(id).map(|i| map.drives[i].domain()))
            .collect();
        let free: Vec<_> = map
            .drives
            .iter()
            .filter(|d| d.state.is_in() && !holds(&d.id))
            .collect();
        pick = free
            .iter()
            .find(|d| !used.contains(&d.domain()))
            .or_else(|| free.first())
            .copied();
    }
    let d = pick.ok_or_else(|| {
        Error::Unavailable(format!(
            "no drive that is in holds none of the shards of {}/{}: add a drive, or mark one in",
            rec.bucket, rec.key
        ))
    })?;
    let handle = map
        .drive(&d.id)
        .ok_or_else(|| Error::Unavailable(format!("drive {} left the map", d.id)))?;
    Ok((d.id.clone(), handle))
}

/// Sends this drive's shard of `rec` to `target`, as shard `shard` of a record naming
/// it; returns its bytes, or `None` when the target holds a newer version.
pub(super) async fn copy(
    r: &Arc<Repair>,
    rec: &ObjectRecord,
    shard: usize,
    target_id: &str,
    target: &dyn Drive,
) -> Result<Option<u64>> {
    let mut record = rec.clone();
    target_id.clone_into(&mut record.drives[shard]);
    record.shard_index = shard as u16;
    for attempt in 0..2 {
        let (body, len) = shard_body(r, rec).await?;
        let started = Instant::now();
        match target.put_shard(&record, body, false).await {
            Ok(_) => {
                r.cluster.traffic.body(
                    oed_meter::traffic::Class::Heal,
                    oed_meter::traffic::Direction::Out,
                    len,
                    started.elapsed().as_secs_f64(),
                );
                return Ok(Some(len));
            }
            Err(e) if e.code == ErrorCode::Superseded => return Ok(None),
            Err(e) if e.code == ErrorCode::NotFound && attempt == 0 => {
                // The target missed the bucket's creation.
                target
                    .create_bucket(&rec.bucket)
                    .await
                    .map_err(|e| Error::Unavailable(format!("{target_id}: {e}")))?;
            }
            Err(e) if matches!(e.code, ErrorCode::BadDigest | ErrorCode::InvalidShard) => {
                // This drive's copy is bad: heal it here first.
                r.store
                    .heal_queue()
                    .queue_corrupt(rec, HealCause::ScrubCorrupt)?;
                r.wake();
                return Err(Error::Unavailable(format!(
                    "the shard here failed its check at {target_id}; it is healed here first"
                )));
            }
            Err(e) => return Err(Error::Unavailable(format!("{target_id}: {e}"))),
        }
    }
    Err(Error::Unavailable(format!(
        "{target_id} does not take the bucket {}",
        rec.bucket
    )))
}

/// The stored shard file of `rec`, as an upload body at the heal rate, and its length.
async fn shard_body(r: &Arc<Repair>, rec: &ObjectRecord) -> Result<(ShardUpload, u64)> {
    let (_, bytes) = r.store.shard(&rec.bucket, &rec.key, Some(rec.version_id))?;
    let limited = |s: ShardUpload| -> ShardUpload {
        let r = r.clone();
        Box::pin(s.then(move |piece| {
            let r = r.clone();
            async move {
                if let Ok(p) = &piece {
                    r.heal_limit.take(p.len() as u64, r.heal_share()).await;
                }
                piece
            }
        }))
    };
    match bytes {
        ShardBytes::Inline(data) => {
            let len = data.len() as u64;
            let body: ShardUpload = Box::pin(futures_util::stream::iter([Ok(Bytes::from(data))]));
            Ok((limited(body), len))
        }
        ShardBytes::File(shard) => {
            let file = tokio::fs::File::open(shard.path()).await?;
            let len = file.metadata().await?.len();
            // The body keeps the file registered as being read until it is dropped.
            let body: ShardUpload = Box::pin(
                tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024).map(move |piece| {
                    let _reading = &shard;
                    piece
                }),
            );
            Ok((limited(body), len))
        }
    }
}

/// Tells every holder of `rec` the map lists other than this drive and the target (and,
/// for a part, every holder of its object's record, this drive included) that the shard
/// moved; with `here`, this drive's record too.
///
/// # Errors
/// When any of them did not say yes: the move is finished on a later pass.
pub(super) async fn tell_holders(
    r: &Repair,
    rec: &ObjectRecord,
    relocation: &Relocation,
    target_id: &str,
    here: bool,
) -> Result<()> {
    let me = r.store.drive_id();
    let map = r.cluster.map();
    let mut asked: Vec<String> = rec
        .drives
        .iter()
        .filter(|d| *d != me && *d != target_id && map.index_of(d).is_some())
        .cloned()
        .collect();
    if let Some(parent) = &rec.parent {
        let (records, failed) = r.cluster.holders(&rec.bucket, parent, &[]).await;
        if failed > 0 {
            return Err(Error::Unavailable(format!(
                "{failed} holders of {parent:?}, whose record lists this part, did not answer"
            )));
        }
        for p in &records {
            for d in &p.drives {
                if !asked.contains(d) && d != me && map.index_of(d).is_some() {
                    asked.push(d.clone());
                }
            }
        }
    }
    if here || rec.parent.is_some() {
        // This drive may hold the object's record too; it moves later, updated.
        let local: &dyn Drive = &r.store;
        local
            .relocate(std::slice::from_ref(relocation))
            .await
            .map_err(|e| Error::Unavailable(format!("updating the record here: {e}")))?;
    }
    let moves = std::slice::from_ref(relocation);
    let answers = futures_util::future::join_all(asked.iter().map(|id| async move {
        let Some(d) = r.cluster.drive(id) else {
            return Err(DriveError::unreachable(format!("{id} is not in the map")));
        };
        oed_model::drive::within(r.cluster.timeout, d.relocate(moves)).await
    }))
    .await;
    let missed: Vec<String> = asked
        .iter()
        .zip(answers)
        .filter_map(|(id, a)| a.err().map(|e| format!("{id}: {e}")))
        .collect();
    if missed.is_empty() {
        Ok(())
    } else {
        Err(Error::Unavailable(format!(
            "the shard is at {target_id}, but not every holder's record says so yet ({})",
            missed.join("; ")
        )))
    }
}

/// Asks every other drive for the records that still name this drive and fixes what it
/// can; returns how many there were.
async fn references(r: &Arc<Repair>) -> Result<u64> {
    let me = r.store.drive_id().to_owned();
    let map = r.cluster.map();
    let mut named = 0;
    for d in map.drives.iter().filter(|d| d.id != me) {
        let Some(peer) = map.drive(&d.id) else {
            continue;
        };
        let mut after: Option<ObjectRef> = None;
        for _ in 0..10_000 {
            let page = oed_model::drive::within(
                r.cluster.timeout,
                peer.records_for(&me, after.as_ref(), 200),
            )
            .await
            .map_err(|e| Error::Unavailable(format!("{}: {e}", d.id)))?;
            for rec in &page.records {
                if fix_reference(r, peer.as_ref(), rec).await {
                    named += 1;
                }
            }
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
    }
    Ok(named)
}

/// A record on another drive that names this one: a shard this drive should hold is
/// healed here (then moved); a part entry is pointed at where the part is now. Returns
/// whether it still counts: a stale version there (the current one is another) does not,
/// since no read uses it and that drive's scrub replaces it.
async fn fix_reference(r: &Arc<Repair>, peer: &dyn Drive, rec: &ObjectRecord) -> bool {
    let me = r.store.drive_id().to_owned();
    let (records, failed) = r.cluster.holders(&rec.bucket, &rec.key, &rec.drives).await;
    if let Ok(Some(now)) = current_of(&records, failed)
        && now.version_id != rec.version_id
        && !now.drives.contains(&me)
        && now.parts.iter().all(|p| !p.drives.contains(&me))
    {
        return false;
    }
    if let Some(shard) = rec.drives.iter().position(|d| *d == me) {
        let held = r
            .store
            .record(&rec.bucket, &rec.key)
            .ok()
            .flatten()
            .is_some_and(|l| l.version_id >= rec.version_id);
        if !held {
            let entry = HealEntry::of(rec, shard as u16, HealCause::Missing, 0, &me);
            if r.store
                .heal_queue()
                .queue(std::slice::from_ref(&entry))
                .is_ok()
            {
                r.wake();
            }
        }
    }
    for part in &rec.parts {
        let Some(shard) = part.drives.iter().position(|d| *d == me) else {
            continue;
        };
        let (records, failed) = r.cluster.holders(&rec.bucket, &part.key, &[]).await;
        let Ok(Some(now)) = current_of(&records, failed) else {
            continue;
        };
        let to = &now.drives[shard.min(now.drives.len().saturating_sub(1))];
        if now.version_id != part.version_id || *to == me {
            continue;
        }
        let fix = Relocation {
            bucket: rec.bucket.clone(),
            key: part.key.clone(),
            version_id: part.version_id,
            shard_index: shard as u16,
            from: me.clone(),
            to: to.clone(),
            parent: Some(rec.key.clone()),
        };
        if let Err(e) = peer.relocate(std::slice::from_ref(&fix)).await {
            tracing::warn!(bucket = %rec.bucket, key = %rec.key, error = %e, "drain: a part entry not pointed at its new drive");
        }
    }
    true
}
