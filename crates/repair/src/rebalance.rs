//! Rebalance: after the cluster map changes (drives added, capacities changed, a lost
//! drive removed), every drive moves the shards it holds that the map in force places
//! elsewhere, in the background, at the heal rate.
//!
//! Which shard goes where is [`ClusterMap::moves`]: the shards on drives outside the
//! object's placement, paired in order with the placed drives that hold none. Every
//! holder computes the same pairing from its own copy of the record, so no drive asks
//! another. The shards of one object move one at a time, the lowest shard first: a
//! holder whose shard is not the first to move waits for a later pass, so the record a
//! mover sends to its target already names where the earlier shards went.
//!
//! For each record here, a page at a time, a few at once:
//! 1. The map in force places this drive's shard elsewhere and it is the object's first
//!    to move: ask the holders for the current version (a version that is not current
//!    any more is left to the sweep; one still being written waits for the next pass),
//!    then move it as drain does ([`crate::drain`]): send the stored shard file to its
//!    new drive, which checks every chunk's CRC and stores it durably; have every holder's
//!    record name the new drive; remove it here only then.
//! 2. The first shard to move is on a drive the map no longer lists (removed as lost):
//!    the first holder the map lists tells every holder that the shard is at its new
//!    drive now, and hands that drive a heal entry, which rebuilds it from `k` others.
//!
//! Where the pass stands (the last record key looked at) is kept in the store with the
//! counts, so a restarted drive resumes there. A pass that moved or waited for anything
//! is followed by another; the rebalance is done for the map's epoch when a pass finds
//! nothing to move. A newer map starts it again from the beginning. Reads find records
//! mid-move: [`ClusterMap::holders`] asks where the map placed objects before drives
//! joined, and a record names its shards' drives.

#![allow(clippy::cast_precision_loss)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::drain::{Moved, finish_move, is_out, tell_holders};
use super::heal::current_of;
use super::{Persisted, Rate, Repair, save_persisted};
use oed_model::drive::Relocation;
use oed_model::error::{Error, Result};
use oed_model::heal::{HealCause, HealEntry};
use oed_model::map::{ClusterMap, DriveState, ShardMove};
use oed_model::record::{ObjectRecord, now_ms};
use oed_store::Store;

/// Records taken at a time.
const PAGE: usize = 64;

/// Time between passes while something is left.
const PASS_PAUSE: Duration = Duration::from_secs(5);

phases! {
    /// Where a rebalance is.
    RebalancePhase {
        /// Moving the shards the map in force places elsewhere.
        Moving = "moving",
        /// Every shard here is where the map in force places it.
        Done = "done",
    }
}

/// Where this drive's rebalance is; kept in the store as `rebalance`, shown by
/// `oedd admin status`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RebalanceState {
    /// Its phase.
    pub state: RebalancePhase,
    /// The epoch of the map it moves shards for.
    pub epoch: u64,
    /// When it started, ms since the epoch.
    pub started_ms: Option<u64>,
    /// When it was done.
    pub finished_ms: Option<u64>,
    /// Passes over this drive's records so far.
    pub passes: u64,
    /// The store key of the last record the pass looked at, hex: a restart resumes after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Shards here that the map places elsewhere (this pass's plan, less what moved
    /// since).
    pub left_shards: u64,
    /// Their bytes.
    pub left_bytes: u64,
    /// Shards moved to their new drives.
    pub moved_shards: u64,
    /// Their bytes.
    pub moved_bytes: u64,
    /// Shards of drives the map no longer lists handed to their new drives to rebuild.
    pub rebuilt_shards: u64,
    /// Shards of the last pass that waited for another shard of their object to move
    /// first, or for a write in flight.
    pub waiting_shards: u64,
    /// Moves that failed (tried again on the next pass).
    pub failures: u64,
    /// The last failure.
    pub last_error: Option<String>,
    /// Bytes moved per second over the last 30 s (not kept).
    #[serde(default)]
    pub rate_bytes: f64,
    /// Seconds left at that rate.
    #[serde(default)]
    pub eta_seconds: Option<f64>,
    /// The drives later maps removed (the last 64), kept across epochs: the shards a
    /// record names on one of them are rebuilt elsewhere. A drive a record names that the
    /// map in force does not list and that was not removed belongs to a newer map than
    /// this drive runs: such a record is left alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
}

/// Drives remembered as removed.
const REMOVED_KEPT: usize = 64;

impl Persisted for RebalanceState {
    const NAME: &'static str = "rebalance";
}

/// Counters of moves since start, for the metrics.
#[derive(Debug, Default)]
pub struct RebalanceStats {
    /// Shards moved.
    pub moved_shards: AtomicU64,
    /// Their bytes.
    pub moved_bytes: AtomicU64,
    /// Shards of removed drives handed to a new drive to rebuild.
    pub rebuilt_shards: AtomicU64,
    /// Moves that failed.
    pub failures: AtomicU64,
    /// Recent moves, for the rate.
    pub(crate) rate: Rate,
}

fn save(r: &Repair, f: impl FnOnce(&mut RebalanceState)) -> RebalanceState {
    save_persisted(&r.store, &r.rebalance, f)
}

/// What this drive does about one record under `map`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Nothing: its shard here is where the map places it.
    Stay,
    /// Its shard here moves, after another shard of the object.
    Wait,
    /// Its shard here moves now.
    Move(ShardMove),
    /// The shard of a drive the map no longer lists is rebuilt on its new drive; this
    /// drive, the first holder the map lists, hands it over.
    Rebuild(ShardMove),
}

impl Step {
    /// Whether a shard of this drive's (or one it hands over) is still to move.
    fn counts(self) -> bool {
        !matches!(self, Self::Stay)
    }
}

fn step_of(map: &ClusterMap, removed: &[String], me: &str, rec: &ObjectRecord) -> Step {
    let Some(mine) = rec.drives.iter().position(|d| d == me) else {
        return Step::Stay;
    };
    let listed = |d: &String| map.index_of(d).is_some();
    if rec
        .drives
        .iter()
        .any(|d| !listed(d) && !removed.contains(d))
    {
        // A drive of a newer map than this one: not this drive's to judge until it runs
        // that map.
        return Step::Wait;
    }
    // Shards on drives that are out are their drain's to move (to the same drives).
    let out = |d: &String| {
        map.index_of(d)
            .is_some_and(|i| map.drives[i].state == DriveState::Out)
    };
    let moves: Vec<ShardMove> = map
        .moves(&rec.bucket, &rec.key, &rec.drives)
        .into_iter()
        .filter(|m| !out(&rec.drives[m.shard]))
        .collect();
    let Some(&first) = moves.first() else {
        return Step::Stay;
    };
    if first.shard == mine {
        return Step::Move(first);
    }
    if !listed(&rec.drives[first.shard]) && rec.drives.iter().position(listed) == Some(mine) {
        return Step::Rebuild(first);
    }
    if moves.iter().any(|m| m.shard == mine) {
        Step::Wait
    } else {
        Step::Stay
    }
}

impl Repair {
    /// The rebalance's state with its rate and ETA.
    #[must_use]
    pub fn rebalance_status(&self) -> RebalanceState {
        let mut s = self
            .rebalance
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        s.rate_bytes = self.rebalance_stats.rate.per_second();
        s.eta_seconds = (s.state == RebalancePhase::Moving && s.rate_bytes > 0.0)
            .then(|| s.left_bytes as f64 / s.rate_bytes);
        s
    }

    /// Remembers drives a newer map removed: the shards records name on them are rebuilt
    /// elsewhere.
    pub(crate) fn note_removed(&self, removed: &[String]) {
        if removed.is_empty() {
            return;
        }
        save(self, |s| {
            for id in removed {
                if !s.removed.contains(id) {
                    s.removed.push(id.clone());
                }
            }
            let extra = s.removed.len().saturating_sub(REMOVED_KEPT);
            s.removed.drain(..extra);
        });
    }
}

/// How a pass ended.
enum Pass {
    /// Nothing was left to move.
    Done,
    /// Something moved, waited or failed: another pass follows.
    Again,
    /// The map changed or the drive was marked out.
    Interrupted,
}

/// Rebalances whenever the map in force is newer than the last rebalance (or one was
/// left unfinished by a restart), until `stop`.
pub async fn run(r: Arc<Repair>, stop: CancellationToken) {
    loop {
        let epoch = r.cluster.map().epoch;
        let st = r
            .rebalance
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if !is_out(&r) && (st.epoch != epoch || st.state == RebalancePhase::Moving) {
            if st.epoch != epoch {
                save(&r, |s| {
                    *s = RebalanceState {
                        state: RebalancePhase::Moving,
                        epoch,
                        started_ms: Some(now_ms()),
                        removed: std::mem::take(&mut s.removed),
                        ..RebalanceState::default()
                    };
                });
            }
            let ended = tokio::select! {
                () = stop.cancelled() => return,
                p = pass(&r, epoch) => p,
            };
            match ended {
                Pass::Interrupted => {}
                Pass::Done => {
                    let s = save(&r, |s| {
                        s.state = RebalancePhase::Done;
                        s.finished_ms = Some(now_ms());
                        (s.left_shards, s.left_bytes) = (0, 0);
                    });
                    if s.moved_shards + s.rebuilt_shards > 0 {
                        tracing::warn!(
                            epoch,
                            moved_shards = s.moved_shards,
                            moved_bytes = s.moved_bytes,
                            rebuilt_shards = s.rebuilt_shards,
                            "rebalance done: every shard here is where the map places it"
                        );
                    }
                }
                Pass::Again => {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = r.rebalance_now.notified() => {}
                        () = tokio::time::sleep(PASS_PAUSE) => {}
                    }
                }
            }
        } else {
            tokio::select! {
                () = stop.cancelled() => return,
                () = r.rebalance_now.notified() => {}
            }
        }
    }
}

/// Counts what is to move here under `map` without holding it: one walk over the
/// records, keeping none.
async fn plan(r: &Repair, map: Arc<ClusterMap>, removed: Arc<[String]>) -> Result<(u64, u64)> {
    let store = r.store.clone();
    tokio::task::spawn_blocking(move || to_move(&store, &map, &removed))
        .await
        .map_err(|e| Error::Io(std::io::Error::other(e)))?
}

/// The shards of `store`'s drive (and those it hands over) that `map` places elsewhere,
/// and their bytes: one walk over the records, a page at a time, holding none. Blocks.
///
/// # Errors
/// [`Error::Meta`], [`Error::Record`].
pub fn to_move(store: &Store, map: &ClusterMap, removed: &[String]) -> Result<(u64, u64)> {
    let me = store.drive_id();
    let (mut shards, mut bytes) = (0, 0);
    let mut after: Vec<u8> = Vec::new();
    loop {
        let (_, last) = store.objects_after(&after, PAGE, |rec| {
            if step_of(map, removed, me, rec).counts() {
                shards += 1;
                bytes += rec.shard_bytes();
            }
            false
        })?;
        match last {
            Some(l) => after = l,
            None => return Ok((shards, bytes)),
        }
    }
}

/// The next page of records after the key `after` with a shard to move (or hand over)
/// under `map`, and the key to go on from, `None` at the end. Blocks.
///
/// # Errors
/// [`Error::Meta`], [`Error::Record`].
pub fn moving_after(
    store: &Store,
    map: &ClusterMap,
    removed: &[String],
    after: &[u8],
) -> Result<(Vec<ObjectRecord>, Option<Vec<u8>>)> {
    let me = store.drive_id();
    store.objects_after(after, PAGE, |rec| step_of(map, removed, me, rec).counts())
}

/// One pass over this drive's records, from where the last one stopped.
async fn pass(r: &Arc<Repair>, epoch: u64) -> Pass {
    let shared = Arc::new(r.cluster.map().map.clone());
    let map: &ClusterMap = &shared;
    let removed: Arc<[String]> = r
        .rebalance
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .removed
        .clone()
        .into();
    let (shards, bytes) = match plan(r, shared.clone(), removed.clone()).await {
        Ok(p) => p,
        Err(e) => {
            fail(r, &format!("reading the records: {e}"));
            return Pass::Again;
        }
    };
    let start = save(r, |s| {
        (s.left_shards, s.left_bytes, s.waiting_shards) = (shards, bytes, 0);
    });
    let mut after: Vec<u8> = start
        .cursor
        .as_deref()
        .and_then(|c| hex::decode(c).ok())
        .unwrap_or_default();
    let mut again = false;
    loop {
        if r.cluster.map().epoch != epoch || is_out(r) {
            return Pass::Interrupted;
        }
        let page = {
            let (store, from, map) = (r.store.clone(), after.clone(), shared.clone());
            let removed = removed.clone();
            tokio::task::spawn_blocking(move || moving_after(&store, &map, &removed, &from)).await
        };
        let (records, last) = match page.map_err(|e| Error::Io(std::io::Error::other(e))) {
            Ok(Ok(p)) => p,
            Ok(Err(e)) | Err(e) => {
                fail(r, &format!("reading the records: {e}"));
                return Pass::Again;
            }
        };
        // Records of multipart objects and their parts update each other's records:
        // those go one at a time, the rest a few at once.
        let (linked, plain): (Vec<ObjectRecord>, Vec<ObjectRecord>) = records
            .into_iter()
            .partition(|rec| rec.parent.is_some() || !rec.parts.is_empty());
        let concurrency = r.config.concurrency.max(1);
        let moves: Vec<_> = plain
            .into_iter()
            .map(|rec| {
                let removed = &removed;
                async move { (one(r, map, removed, &rec).await, rec) }
            })
            .collect();
        let mut done: Vec<(Result<Done>, ObjectRecord)> = futures_util::stream::iter(moves)
            .buffer_unordered(concurrency)
            .collect()
            .await;
        for rec in linked {
            done.push((one(r, map, &removed, &rec).await, rec));
        }
        for (outcome, rec) in done {
            again |= !matches!(outcome, Ok(Done::Moved(_) | Done::Rebuilt | Done::Stale));
            tally(r, &rec, outcome);
        }
        match last {
            Some(l) => {
                let cursor = hex::encode(&l);
                save(r, |s| s.cursor = Some(cursor));
                after = l;
            }
            None => break,
        }
    }
    save(r, |s| {
        s.cursor = None;
        s.passes += 1;
    });
    if again { Pass::Again } else { Pass::Done }
}

/// Counts what became of one record.
fn tally(r: &Repair, rec: &ObjectRecord, outcome: Result<Done>) {
    let stats = &r.rebalance_stats;
    let (moved, rebuilt) = match outcome {
        Ok(Done::Moved(bytes)) => {
            stats.moved_shards.fetch_add(1, Ordering::Relaxed);
            stats.moved_bytes.fetch_add(bytes, Ordering::Relaxed);
            stats.rate.add(bytes);
            (Some(bytes), false)
        }
        Ok(Done::Rebuilt) => {
            stats.rebuilt_shards.fetch_add(1, Ordering::Relaxed);
            (None, true)
        }
        Ok(Done::Stale) => (None, false),
        Ok(Done::Later(why)) => {
            tracing::debug!(bucket = %rec.bucket, key = %rec.key, why, "rebalance: later");
            save(r, |s| s.waiting_shards += 1);
            return;
        }
        Err(e) => {
            stats.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(bucket = %rec.bucket, key = %rec.key, error = %e, "rebalance: shard not moved; trying again on the next pass");
            fail(r, &format!("{}/{}: {e}", rec.bucket, rec.key));
            return;
        }
    };
    // Off the plan: moved, handed over, or not this drive's to move any more.
    let bytes = moved.unwrap_or_else(|| rec.shard_bytes());
    save(r, |s| {
        s.moved_shards += u64::from(moved.is_some());
        s.moved_bytes += moved.unwrap_or(0);
        s.rebuilt_shards += u64::from(rebuilt);
        s.left_shards = s.left_shards.saturating_sub(1);
        s.left_bytes = s.left_bytes.saturating_sub(bytes);
    });
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
enum Done {
    /// Its shard is at its new drive and gone from here: its bytes.
    Moved(u64),
    /// The shard of a removed drive was handed to its new drive to rebuild.
    Rebuilt,
    /// The version here is not the current one: nothing to move (the sweep removes it).
    Stale,
    /// Nothing done this pass, and why.
    Later(&'static str),
}

async fn one(
    r: &Arc<Repair>,
    map: &ClusterMap,
    removed: &[String],
    rec: &ObjectRecord,
) -> Result<Done> {
    let me = r.store.drive_id();
    // The page was read a while ago: another holder may have moved a shard of the object
    // since, and the map may be newer. Act on the record as it is now, under the map in
    // force, or not at all.
    let view = r.cluster.map();
    if view.epoch != map.epoch {
        return Ok(Done::Later("the map changed during the pass"));
    }
    let fresh = r.store.record(&rec.bucket, &rec.key)?;
    let Some(rec) = fresh.filter(|f| f.version_id == rec.version_id) else {
        return Ok(Done::Stale);
    };
    let rec = &rec;
    // Whether the version here is current comes first, for a shard waiting on another
    // too: a version overwritten since the map changed may be held here only (its new
    // version placed elsewhere), and its other holders never move theirs first.
    let (records, failed) = r.cluster.holders(&rec.bucket, &rec.key, &rec.drives).await;
    let Some(current) = current_of(&records, failed)? else {
        return Ok(Done::Stale);
    };
    if current.version_id != rec.version_id {
        return Ok(if current.version_id < rec.version_id {
            Done::Later("a newer version is being written")
        } else {
            Done::Stale
        });
    }
    let step = step_of(map, removed, me, rec);
    let (Step::Move(m) | Step::Rebuild(m)) = step else {
        return Ok(Done::Later(
            "another shard of the object moves first, or a drive of a newer map holds one",
        ));
    };
    if let Step::Rebuild(_) = step {
        return rebuild_elsewhere(r, map, rec, m).await;
    }
    let to = &map.drives[m.to];
    let target = r
        .cluster
        .drive(&to.id)
        .ok_or_else(|| Error::Unavailable(format!("drive {} left the map", to.id)))?;
    match finish_move(r, rec, m.shard, &to.id, target.as_ref()).await? {
        Moved::Away(bytes) => Ok(Done::Moved(bytes)),
        Moved::Dropped(_) => Ok(Done::Stale),
        Moved::Later(why) => Ok(Done::Later(why)),
    }
}

/// Points every holder's record at the new drive of a removed drive's shard, and hands
/// that drive a heal entry for it (kept here until it is delivered).
async fn rebuild_elsewhere(
    r: &Arc<Repair>,
    map: &ClusterMap,
    rec: &ObjectRecord,
    m: ShardMove,
) -> Result<Done> {
    let me = r.store.drive_id();
    let to = map.drives[m.to].id.clone();
    let relocation = Relocation {
        bucket: rec.bucket.clone(),
        key: rec.key.clone(),
        version_id: rec.version_id,
        shard_index: m.shard as u16,
        from: rec.drives[m.shard].clone(),
        to: to.clone(),
        parent: rec.parent.clone(),
    };
    tell_holders(r, rec, &relocation, &to, true).await?;
    let mut moved = rec.clone();
    moved.drives[m.shard].clone_from(&to);
    let held = moved
        .drives
        .iter()
        .filter(|d| **d != to && map.index_of(d).is_some())
        .count();
    let spare = u16::try_from(held.saturating_sub(usize::from(rec.k))).unwrap_or(u16::MAX);
    let entry = HealEntry::of(&moved, m.shard as u16, HealCause::Missing, spare, me);
    r.store.heal_queue().queue(std::slice::from_ref(&entry))?;
    Ok(Done::Rebuilt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oed_model::map::{DriveEntry, Profile};

    fn map_of(n: usize) -> ClusterMap {
        ClusterMap {
            cluster_id: "t".into(),
            epoch: 1,
            tls: false,
            profile: Profile {
                k: 2,
                m: 1,
                chunk_size: 65536,
            },
            drives: (0..n)
                .map(|i| DriveEntry {
                    id: format!("d{i}"),
                    address: format!("127.0.0.1:{}", 9000 + i),
                    domain: None,
                    state: DriveState::In,
                    capacity_gb: None,
                    since: None,
                })
                .collect(),
        }
    }

    fn record(drives: Vec<String>, key: &str) -> ObjectRecord {
        ObjectRecord {
            bucket: "b".into(),
            key: key.into(),
            drives,
            k: 2,
            m: 1,
            chunk_size: 65536,
            size: 200_000,
            ..ObjectRecord::default()
        }
    }

    #[test]
    fn one_holder_moves_first_and_a_removed_drives_shard_is_handed_over_once() {
        let four = map_of(4);
        let mut six = map_of(6);
        for d in &mut six.drives[4..] {
            d.since = Some(2);
        }
        let (mut moving, mut two) = (0, 0);
        for i in 0..400 {
            let key = format!("k{i}");
            let drives: Vec<String> = four
                .place("b", &key, 3)
                .into_iter()
                .map(|i| four.drives[i].id.clone())
                .collect();
            let rec = record(drives.clone(), &key);
            let steps: Vec<Step> = drives.iter().map(|d| step_of(&six, &[], d, &rec)).collect();
            let movers = steps.iter().filter(|s| matches!(s, Step::Move(_))).count();
            let waiting = steps.iter().filter(|s| matches!(s, Step::Wait)).count();
            let to_move = six.moves("b", &key, &drives).len();
            assert_eq!(movers, usize::from(to_move > 0), "{key}: {steps:?}");
            assert_eq!(movers + waiting, to_move, "{key}: {steps:?}");
            moving += movers;
            two += usize::from(to_move == 2);
            // A drive that holds none of it has nothing to do.
            assert_eq!(
                step_of(&six, &[], "d5", &rec).counts(),
                drives.contains(&"d5".into())
            );
        }
        assert!(moving > 0 && two > 0);
        // d1 is removed as lost: its shards are handed over by the first holder the map
        // still lists, and by no other.
        let mut less = four.clone();
        less.drives.remove(1);
        for i in 0..200 {
            let key = format!("k{i}");
            let drives: Vec<String> = four
                .place("b", &key, 3)
                .into_iter()
                .map(|i| four.drives[i].id.clone())
                .collect();
            let rec = record(drives.clone(), &key);
            let removed = ["d1".to_owned()];
            let steps: Vec<Step> = drives
                .iter()
                .map(|d| step_of(&less, &removed, d, &rec))
                .collect();
            let handing = steps
                .iter()
                .filter(|s| matches!(s, Step::Rebuild(_)))
                .count();
            assert_eq!(handing, usize::from(drives.contains(&"d1".into())), "{key}");
            // A drive that does not know d1 was removed (its map is older than the
            // record's) leaves the object alone.
            if drives.contains(&"d1".into()) {
                for d in &drives {
                    assert!(
                        !matches!(
                            step_of(&less, &[], d, &rec),
                            Step::Move(_) | Step::Rebuild(_)
                        ),
                        "{key}: {d}"
                    );
                }
            }
            // Shards on a drive that is out are its drain's to move: the others do not
            // wait for them.
            let mut draining = six.clone();
            draining.drives[0].state = DriveState::Out;
            let first_in = draining
                .moves("b", &key, &drives)
                .into_iter()
                .find(|m| rec.drives[m.shard] != "d0");
            if let Some(m) = first_in {
                let holder = &rec.drives[m.shard];
                assert_eq!(
                    step_of(&draining, &[], holder, &rec),
                    Step::Move(m),
                    "{key}"
                );
            }
            assert!(!matches!(
                step_of(&draining, &[], "d0", &rec),
                Step::Move(_)
            ));
        }
    }
}
