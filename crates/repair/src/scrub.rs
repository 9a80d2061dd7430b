//! Scrub: every drive reads all of its shards in the background, at `scrub_rate_bytes`,
//! checks every chunk's CRC32C, and queues what fails for heal. For each page of objects
//! it also asks the other holders which version they hold (no data moves), and:
//! - a holder without the current version's shard (wiped, or it missed the write) gets
//!   a heal entry (cause `missing`), sent to it or held here as a hint;
//! - this drive, when it holds an older version than the one `k` holders agree on, queues
//!   its own shard of the current one;
//! - a version here that no `k` drives hold and that is older than the grace period (a
//!   write that never reached its quorum, an object deleted while this drive was away)
//!   is removed.
//!
//! At the end of a pass it sweeps temp files and shard files without a record that are
//! older than the grace period, and publishes how many objects sit at each level of
//! remaining redundancy (each object counted by one holder). The cursor is kept in the
//! store, so a restarted drive resumes its pass.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::{Repair, RepairConfig, batches, entry_size};
use oed_model::drive::{ObjectRef, Settlement};
use oed_model::error::{Error, Result};
use oed_model::heal::{HealCause, HealEntry};
use oed_model::record::{ObjectRecord, VersionId, now_ms};

/// Objects checked per page.
const PAGE: usize = 128;

/// What the scrubber keeps in the store between starts.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Saved {
    /// The metadata key of the last object of the pass in progress (hex), if one is.
    cursor: Option<String>,
    /// When the pass in progress, or the last one, started.
    pass_started_ms: u64,
    /// When the last pass completed.
    last_complete_ms: Option<u64>,
    /// How long it took, seconds.
    last_pass_seconds: Option<f64>,
}

/// Counters of what the scrubber did since start.
#[derive(Debug, Default)]
pub struct ScrubStats {
    /// Shard bytes read and checked.
    pub bytes: AtomicU64,
    /// Shards of this drive found bad (a chunk failing its CRC32C, or the file gone).
    pub corrupt: AtomicU64,
    /// Shards found missing on a holder (this drive or another).
    pub missing: AtomicU64,
    /// Temp files removed.
    pub swept_temp: AtomicU64,
    /// Shard files without a record removed.
    pub swept_files: AtomicU64,
    /// Records of versions that no quorum holds, removed.
    pub swept_records: AtomicU64,
    /// Completed passes.
    pub passes: AtomicU64,
    /// Whether a pass runs now.
    pub running: AtomicBool,
    /// Objects checked in the pass in progress.
    pub pass_objects: AtomicU64,
    /// Bytes checked in the pass in progress.
    pub pass_bytes: AtomicU64,
    saved: Mutex<Saved>,
    /// Objects at each level of spare shards, from the last completed pass.
    redundancy: Mutex<BTreeMap<u16, u64>>,
}

/// Scrub's part of the drive's status.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScrubStatus {
    /// Bytes per second it reads (0: no limit; the schedule is off then).
    pub rate_limit_bytes: u64,
    /// Whether a pass runs now.
    pub running: bool,
    /// When the current (or last) pass started, ms since the epoch.
    pub pass_started_ms: u64,
    /// Objects checked in the current pass.
    pub pass_objects: u64,
    /// Bytes checked in the current pass.
    pub pass_bytes: u64,
    /// When the last pass completed.
    pub last_complete_ms: Option<u64>,
    /// How long it took, seconds.
    pub last_pass_seconds: Option<f64>,
    /// Bytes checked since start.
    pub bytes_total: u64,
    /// Shards found bad here since start.
    pub corrupt_found: u64,
    /// Shards found missing since start.
    pub missing_found: u64,
    /// Leftovers removed since start: temp files, shard files, records.
    pub swept: BTreeMap<String, u64>,
    /// Objects by spare shards (`k + m` held: `m` spare), from the last completed pass;
    /// each object counted by one of its holders.
    pub redundancy: BTreeMap<u16, u64>,
}

impl ScrubStats {
    /// The status, with `config`'s rate.
    #[must_use]
    pub fn status(&self, config: &RepairConfig) -> ScrubStatus {
        let saved = self
            .saved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ScrubStatus {
            rate_limit_bytes: config.scrub_rate,
            running: self.running.load(Ordering::Relaxed),
            pass_started_ms: saved.pass_started_ms,
            pass_objects: load(&self.pass_objects),
            pass_bytes: load(&self.pass_bytes),
            last_complete_ms: saved.last_complete_ms,
            last_pass_seconds: saved.last_pass_seconds,
            bytes_total: load(&self.bytes),
            corrupt_found: load(&self.corrupt),
            missing_found: load(&self.missing),
            swept: [
                ("temp_files", load(&self.swept_temp)),
                ("shard_files", load(&self.swept_files)),
                ("records", load(&self.swept_records)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
            redundancy: self
                .redundancy
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

/// The scrubber: a pass every `scrub_interval` (the first one an interval after the
/// drive first started), or when asked; a pass a restart interrupted resumes at once.
pub async fn run(r: Arc<Repair>, stop: CancellationToken) {
    let saved: Saved = r
        .store
        .state("scrub")
        .ok()
        .flatten()
        .unwrap_or_else(|| Saved {
            pass_started_ms: r.store.identity().created_ms,
            ..Saved::default()
        });
    *r.scrub_stats
        .saved
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = saved;
    loop {
        let (resume, started) = {
            let s = r
                .scrub_stats
                .saved
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            (s.cursor.is_some(), s.pass_started_ms)
        };
        if !resume {
            let wait = if r.config.scrub_rate == 0 {
                Duration::MAX
            } else {
                let due = started.saturating_add(r.config.scrub_interval.as_millis() as u64);
                Duration::from_millis(due.saturating_sub(now_ms()))
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = r.scrub_now.notified() => {}
                () = sleep_long(wait) => {}
            }
        }
        r.scrub_stats.running.store(true, Ordering::Relaxed);
        let done = tokio::select! {
            () = stop.cancelled() => None,
            d = pass(&r) => Some(d),
        };
        r.scrub_stats.running.store(false, Ordering::Relaxed);
        match done {
            None => return,
            Some(Ok(())) => {}
            Some(Err(e)) => {
                tracing::warn!(error = %e, "scrub pass failed; resuming in a minute");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_mins(1)) => {}
                }
            }
        }
    }
}

async fn sleep_long(d: Duration) {
    // tokio's timer takes at most about two years.
    tokio::time::sleep(d.min(Duration::from_hours(365 * 24))).await;
}

fn save(r: &Repair, f: impl FnOnce(&mut Saved)) {
    let saved = {
        let mut s = r
            .scrub_stats
            .saved
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f(&mut s);
        s.clone()
    };
    if let Err(e) = r.store.set_state("scrub", &saved) {
        tracing::warn!(error = %e, "saving the scrub cursor");
    }
}

/// One pass, from the saved cursor to the end.
async fn pass(r: &Arc<Repair>) -> Result<()> {
    let stats = &r.scrub_stats;
    let mut cursor = {
        let s = stats.saved.lock().unwrap_or_else(PoisonError::into_inner);
        s.cursor.as_deref().and_then(|c| hex::decode(c).ok())
    };
    if cursor.is_none() {
        save(r, |s| {
            s.pass_started_ms = now_ms();
            s.cursor = Some(String::new());
        });
        stats.pass_objects.store(0, Ordering::Relaxed);
        stats.pass_bytes.store(0, Ordering::Relaxed);
        tracing::info!("scrub pass started");
    }
    let started = Instant::now();
    let mut levels: BTreeMap<u16, u64> = BTreeMap::new();
    let mut at = cursor.take().unwrap_or_default();
    loop {
        let page = {
            let (store, from) = (r.store.clone(), at.clone());
            tokio::task::spawn_blocking(move || store.objects_after(&from, PAGE, |_| true))
                .await
                .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))??
        };
        let (records, last) = page;
        for rec in &records {
            check_shard(r, rec).await?;
        }
        cross_check(r, &records, &mut levels).await;
        stats
            .pass_objects
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        let Some(last) = last else { break };
        at = last;
        save(r, |s| s.cursor = Some(hex::encode(&at)));
    }
    let (temp, files) = {
        let (store, grace) = (r.store.clone(), r.config.grace);
        tokio::task::spawn_blocking(move || store.sweep_aged(grace))
            .await
            .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))??
    };
    stats.swept_temp.fetch_add(temp, Ordering::Relaxed);
    stats.swept_files.fetch_add(files, Ordering::Relaxed);
    stats.passes.fetch_add(1, Ordering::Relaxed);
    *stats
        .redundancy
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = levels;
    let secs = started.elapsed().as_secs_f64();
    save(r, |s| {
        s.cursor = None;
        s.last_complete_ms = Some(now_ms());
        s.last_pass_seconds = Some(secs);
    });
    tracing::info!(
        objects = stats.pass_objects.load(Ordering::Relaxed),
        bytes = stats.pass_bytes.load(Ordering::Relaxed),
        seconds = secs,
        "scrub pass complete"
    );
    Ok(())
}

/// Reads and checks this drive's shard of `rec`, at the scrub rate.
async fn check_shard(r: &Arc<Repair>, rec: &ObjectRecord) -> Result<()> {
    let started = Instant::now();
    let (store, rec2, limit) = (r.store.clone(), rec.clone(), r.scrub_limit.clone());
    let checked = tokio::task::spawn_blocking(move || store.scrub_shard(&rec2, &limit))
        .await
        .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?;
    match checked {
        Ok(bytes) => {
            r.cluster.traffic.body(
                oed_meter::traffic::Class::Scrub,
                oed_meter::traffic::Direction::Out,
                bytes,
                started.elapsed().as_secs_f64(),
            );
            r.scrub_stats.bytes.fetch_add(bytes, Ordering::Relaxed);
            r.scrub_stats.pass_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        Err(Error::CorruptShard { .. }) => {
            r.scrub_stats.corrupt.fetch_add(1, Ordering::Relaxed);
            r.wake();
        }
        // Deleted or overwritten since the page was read.
        Err(Error::NotFound(_)) => {}
        // Anything else is this shard's trouble, not the pass's: logged, and the pass
        // goes on (a pass stopped at one shard would never finish).
        Err(e) => {
            tracing::warn!(bucket = %rec.bucket, key = %rec.key, error = %e, "scrub: shard not checked");
        }
    }
    Ok(())
}

/// Asks the other holders of `records`' objects which versions they hold, and acts on
/// the answers (see the module docs); tallies the redundancy of the objects this drive
/// counts.
#[allow(
    clippy::too_many_lines,
    reason = "one decision per object, read in one place"
)]
async fn cross_check(r: &Arc<Repair>, records: &[ObjectRecord], levels: &mut BTreeMap<u16, u64>) {
    let me = r.store.drive_id().to_owned();
    // Each other holder, with the objects to ask it about.
    let mut asks: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, rec) in records.iter().enumerate() {
        for d in &rec.drives {
            if *d != me {
                asks.entry(d.as_str()).or_default().push(i);
            }
        }
    }
    let answers = join_all(asks.iter().map(|(drive, idx)| {
        let refs: Vec<ObjectRef> = idx
            .iter()
            .map(|&i| ObjectRef {
                bucket: records[i].bucket.clone(),
                key: records[i].key.clone(),
            })
            .collect();
        async move { (*drive, versions_of(r, drive, &refs).await) }
    }))
    .await;
    // (object, drive) -> the version it holds; absent when it did not answer.
    let mut held: HashMap<(usize, &str), Option<VersionId>> = HashMap::new();
    for ((drive, idx), (_, got)) in asks.iter().zip(&answers) {
        if let Some(got) = got {
            for (&i, v) in idx.iter().zip(got) {
                held.insert((i, drive), *v);
            }
        }
    }
    let mut hints: BTreeMap<String, Vec<HealEntry>> = BTreeMap::new();
    let mut own = Vec::new();
    let grace_ms = r.config.grace.as_millis() as u64;
    for (i, rec) in records.iter().enumerate() {
        let k = usize::from(rec.k);
        let mut count: BTreeMap<VersionId, usize> = BTreeMap::new();
        *count.entry(rec.version_id).or_default() += 1;
        let mut unanswered = 0;
        for d in rec.drives.iter().filter(|d| **d != me) {
            match held.get(&(i, d.as_str())) {
                Some(Some(v)) => *count.entry(*v).or_default() += 1,
                Some(None) => {}
                None => unanswered += 1,
            }
        }
        let current = count.iter().rev().find(|(_, n)| **n >= k).map(|(v, _)| *v);
        match current {
            Some(v) if v == rec.version_id => {
                let holding = count[&v];
                let spare = holding.saturating_sub(k) as u16;
                for (idx, d) in rec.drives.iter().enumerate() {
                    if *d == me {
                        continue;
                    }
                    if let Some(h) = held.get(&(i, d.as_str()))
                        && h.is_none_or(|hv| hv < v)
                    {
                        r.scrub_stats.missing.fetch_add(1, Ordering::Relaxed);
                        hints.entry(d.clone()).or_default().push(HealEntry::of(
                            rec,
                            idx as u16,
                            HealCause::Missing,
                            spare,
                            &me,
                        ));
                    }
                }
                // Counted by the first holder that holds it and answered.
                let first = rec.drives.iter().find(|d| {
                    **d == me || held.get(&(i, d.as_str())).is_some_and(|h| *h == Some(v))
                });
                if first.is_some_and(|d| *d == me) {
                    *levels.entry(spare).or_default() += 1;
                }
                // Readable, so settled: a version this drive kept for its write is not
                // needed any more (the write's coordinator did not say so, or not yet).
                let done = Settlement {
                    bucket: rec.bucket.clone(),
                    key: rec.key.clone(),
                    version_id: v,
                    stored: true,
                };
                if let Err(e) = r.store.settle(&done) {
                    tracing::debug!(error = %e, "settling a write");
                }
            }
            Some(v) if v > rec.version_id => {
                // This drive missed a newer version: its own shard of it.
                r.scrub_stats.missing.fetch_add(1, Ordering::Relaxed);
                let mut e = HealEntry::of(rec, rec.shard_index, HealCause::Missing, 0, &me);
                e.version_id = v;
                own.push(e);
            }
            _ => {
                let could = count.get(&rec.version_id).copied().unwrap_or(0) + unanswered;
                let old = now_ms().saturating_sub(rec.last_modified_ms) > grace_ms;
                // A noncurrent version whose replacing write is not settled here: that
                // write's sweep (or settlement) decides, and brings it back if it failed.
                let unsettled = oed_model::record::parse_version_key(&rec.key)
                    .is_some_and(|(user, v)| r.store.keeps(&rec.bucket, user, v).unwrap_or(true));
                if could < k && old && !unsettled {
                    sweep_record(r, rec, current).await;
                }
            }
        }
    }
    if !own.is_empty() {
        if let Err(e) = r.store.queue_heals(&own) {
            tracing::warn!(error = %e, "heal queue");
        }
        r.wake();
    }
    for (drive, entries) in hints {
        send_entries(r, &drive, entries).await;
    }
}

/// Removes this drive's record of a version no quorum holds, as its coordinator would
/// have had the write failed: the version it replaced, if kept here, is current again
/// (and, when an older version is current, this drive's shard of that one is queued).
async fn sweep_record(r: &Arc<Repair>, rec: &ObjectRecord, current: Option<VersionId>) {
    let failed = Settlement {
        bucket: rec.bucket.clone(),
        key: rec.key.clone(),
        version_id: rec.version_id,
        stored: false,
    };
    let store = r.store.clone();
    match tokio::task::spawn_blocking(move || store.settle(&failed)).await {
        Ok(Ok(false)) => return,
        Ok(Ok(true)) => {
            r.scrub_stats.swept_records.fetch_add(1, Ordering::Relaxed);
            tracing::info!(bucket = %rec.bucket, key = %rec.key, version = %rec.version_id, "removed a version no quorum holds");
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "sweeping a record");
            return;
        }
        Err(e) => {
            tracing::debug!(error = %e, "sweeping a record");
            return;
        }
    }
    if let Some(v) = current {
        let mut e = HealEntry::of(
            rec,
            rec.shard_index,
            HealCause::Missing,
            0,
            r.store.drive_id(),
        );
        e.version_id = v;
        if r.store.queue_heals(&[e]).is_ok() {
            r.wake();
        }
    }
}

/// The versions `drive` holds of `refs`, asked in batches that fit a peer request;
/// `None` when it did not answer them all.
async fn versions_of(
    r: &Repair,
    drive: &str,
    refs: &[ObjectRef],
) -> Option<Vec<Option<VersionId>>> {
    let peer = r.cluster.drive(drive)?;
    let mut out = Vec::with_capacity(refs.len());
    for batch in batches(refs, |o| o.bucket.len() + o.key.len() + 32) {
        let got = oed_model::drive::within(r.cluster.timeout, peer.versions(batch)).await;
        match got {
            Ok(v) if v.len() == batch.len() => out.extend(v),
            _ => return None,
        }
    }
    Some(out)
}

/// Sends heal entries to the drive they are for; what it does not take is kept here as
/// hints.
pub(crate) async fn send_entries(r: &Repair, drive: &str, entries: Vec<HealEntry>) {
    for batch in batches(&entries, entry_size) {
        let sent = match r.cluster.drive(drive) {
            Some(peer) => tokio::time::timeout(r.cluster.timeout, peer.queue_heals(batch))
                .await
                .is_ok_and(|a| a.is_ok()),
            None => false,
        };
        if !sent && let Err(e) = r.store.queue_heals(batch) {
            tracing::warn!(error = %e, "heal queue");
        }
    }
}
