//! Refill: a drive that replaced an earlier one (an empty data directory under a drive
//! id the cluster knows) gets back every shard the earlier one held.
//!
//! At its first start the drive asks the other drives for the records that place a shard
//! on it (`records_for`). When any has some, it is a replacement: it lists them all from
//! every drive that answers (each object is known to all its other holders, so one drive
//! away loses nothing), queues each shard it lacks with cause `refill`, and the healer
//! rebuilds them at the heal rate. `oedd admin refill DRIVE` starts the same on a drive
//! an operator says lost its data. The listing's cursors are kept in the store: a drive
//! restarted mid-refill resumes where it was.

#![allow(clippy::cast_precision_loss)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::PoisonError;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::{Persisted, Repair, save_persisted};
use oed_model::drive::ObjectRef;
use oed_model::error::Result;
use oed_model::heal::{HealCause, HealEntry};
use oed_model::record::now_ms;
use oed_store::queue::QueueCounts;

/// Records asked for per page.
const PAGE: usize = 200;

phases! {
    /// Where a refill is.
    RefillPhase {
        /// Asking the other drives what this one held.
        Listing = "listing",
        /// All listed; the healer rebuilds.
        Healing = "healing",
        /// Every listed shard rebuilt.
        Done = "done",
    }
}

/// Where a refill is; kept in the store as `refill`, shown by `oedd admin`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RefillState {
    /// Its phase.
    pub state: RefillPhase,
    /// When it started, ms since the epoch.
    pub started_ms: Option<u64>,
    /// When the last shard was rebuilt.
    pub finished_ms: Option<u64>,
    /// Shards queued.
    pub listed_shards: u64,
    /// Their bytes.
    pub listed_bytes: u64,
    /// Bytes still to rebuild.
    #[serde(default)]
    pub remaining_bytes: u64,
    /// Share done, 0 to 1.
    #[serde(default)]
    pub progress: f64,
    /// Seconds left at the current heal rate.
    #[serde(default)]
    pub eta_seconds: Option<f64>,
    /// Where the listing of each drive is (`None`: done with it).
    #[serde(default)]
    pub cursors: BTreeMap<String, Option<ObjectRef>>,
}

impl Persisted for RefillState {
    const NAME: &'static str = "refill";
}

impl RefillState {
    /// Fills in the figures that follow from the queue and the heal rate.
    pub fn update(&mut self, queue: &QueueCounts, rate: f64) {
        if self.state == RefillPhase::None {
            return;
        }
        self.remaining_bytes = queue
            .local_bytes
            .get(HealCause::Refill.label())
            .copied()
            .unwrap_or(0);
        self.progress = if self.listed_bytes == 0 {
            if self.state == RefillPhase::Done {
                1.0
            } else {
                0.0
            }
        } else {
            1.0 - self.remaining_bytes.min(self.listed_bytes) as f64 / self.listed_bytes as f64
        };
        self.eta_seconds =
            (rate > 0.0 && self.remaining_bytes > 0).then(|| self.remaining_bytes as f64 / rate);
    }
}

fn save(r: &Repair, f: impl FnOnce(&mut RefillState)) -> RefillState {
    save_persisted(&r.store, &r.refill, f)
}

/// Starts a refill when this drive is a new incarnation of a known one, resumes one a
/// restart interrupted, and runs one whenever asked, until `stop`.
pub async fn run(r: Arc<Repair>, stop: CancellationToken) {
    let state = r
        .refill
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .state;
    let mut go = matches!(state, RefillPhase::Listing | RefillPhase::Healing);
    if !go && r.store.is_new_incarnation() {
        go = tokio::select! {
            () = stop.cancelled() => return,
            known = known_elsewhere(&r) => known,
        };
        if go {
            tracing::warn!(
                drive = r.store.drive_id(),
                "this drive starts empty, and other drives hold records of shards placed on it: it replaces an earlier disk; refilling"
            );
        }
    }
    loop {
        if go {
            tokio::select! {
                () = stop.cancelled() => return,
                () = refill(&r, &stop) => {}
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = r.refill_now.notified() => {}
        }
        save(&r, |s| {
            *s = RefillState {
                state: RefillPhase::Listing,
                started_ms: Some(now_ms()),
                ..RefillState::default()
            };
        });
        go = true;
    }
}

/// Whether any other drive holds a record placing a shard here that was written before
/// this drive's identity (asked for a minute at most, while the cluster comes up): the
/// records of a cluster whose drives all start new are written after them.
async fn known_elsewhere(r: &Repair) -> bool {
    let me = r.store.drive_id().to_owned();
    let born = r.store.identity().created_ms;
    for _ in 0..12 {
        let mut answered = 0;
        let map = r.cluster.map();
        for d in map.drives.iter().filter(|d| d.id != me) {
            let Some(peer) = map.drive(&d.id) else {
                continue;
            };
            match has_records_after(r, peer.as_ref(), &me, born).await {
                Some(true) => return true,
                Some(false) => answered += 1,
                None => {}
            }
        }
        if answered + 1 >= map.drives.len() {
            return false;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    false
}

/// Whether `peer` holds a record placing a shard on `me` written before `born`; `None`
/// when it does not answer.
async fn has_records_after(
    r: &Repair,
    peer: &dyn oed_model::drive::Drive,
    me: &str,
    born: u64,
) -> Option<bool> {
    let mut after: Option<ObjectRef> = None;
    loop {
        let page = tokio::time::timeout(
            r.cluster.timeout,
            peer.records_for(me, after.as_ref(), PAGE),
        )
        .await
        .ok()?
        .ok()?;
        if page.records.iter().any(|rec| rec.last_modified_ms < born) {
            return Some(true);
        }
        match page.next {
            Some(n) => after = Some(n),
            None => return Some(false),
        }
    }
}

/// Lists what this drive should hold from every other drive and queues what it lacks;
/// then waits for the healer to rebuild it.
async fn refill(r: &Arc<Repair>, stop: &CancellationToken) {
    let me = r.store.drive_id().to_owned();
    let mut s = save(r, |s| {
        if s.state != RefillPhase::Healing {
            s.state = RefillPhase::Listing;
        }
        if s.started_ms.is_none() {
            s.started_ms = Some(now_ms());
        }
    });
    if s.state == RefillPhase::Listing {
        for d in r.cluster.map().drives.iter().filter(|d| d.id != me) {
            if s.cursors.get(&d.id).is_some_and(Option::is_none) {
                continue;
            }
            if let Err(e) = list_from(r, &d.id).await {
                tracing::warn!(drive = %d.id, error = %e, "refill: cannot list this drive; the others hold the same objects");
            }
        }
        s = save(r, |s| s.state = RefillPhase::Healing);
        tracing::info!(
            shards = s.listed_shards,
            bytes = s.listed_bytes,
            "refill: listed; rebuilding"
        );
    }
    loop {
        let left = r
            .store
            .heal_queue()
            .status()
            .local
            .get(HealCause::Refill.label())
            .copied()
            .unwrap_or(0);
        if left == 0 {
            save(r, |s| {
                s.state = RefillPhase::Done;
                s.finished_ms = Some(now_ms());
            });
            tracing::info!("refill complete");
            return;
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
}

/// Pages through `drive`'s records placing shards here, queueing each this drive lacks.
async fn list_from(r: &Arc<Repair>, drive: &str) -> Result<()> {
    let me = r.store.drive_id().to_owned();
    let Some(peer) = r.cluster.drive(drive) else {
        return Ok(());
    };
    let mut after = r
        .refill
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .cursors
        .get(drive)
        .cloned()
        .flatten();
    loop {
        let page = oed_model::drive::within(
            r.cluster.timeout,
            peer.records_for(&me, after.as_ref(), PAGE),
        )
        .await
        .map_err(|e| oed_model::Error::Unavailable(format!("{drive}: {e}")))?;
        let mut entries = Vec::new();
        for rec in &page.records {
            let Some(shard) = rec.drives.iter().position(|d| *d == me) else {
                continue;
            };
            let held = r
                .store
                .record(&rec.bucket, &rec.key)?
                .is_some_and(|l| l.version_id >= rec.version_id);
            if !held {
                let spare = rec.m.saturating_sub(1);
                entries.push(HealEntry::of(
                    rec,
                    shard as u16,
                    HealCause::Refill,
                    spare,
                    &me,
                ));
            }
        }
        let new = r.store.heal_queue().queue(&entries)?;
        let (mut new_shards, mut new_bytes) = (0, 0);
        for (e, _) in entries.iter().zip(new).filter(|(_, n)| *n) {
            new_shards += 1;
            new_bytes += e.bytes;
        }
        r.wake();
        let next = page.next.clone();
        save(r, |s| {
            s.listed_shards += new_shards;
            s.listed_bytes += new_bytes;
            s.cursors.insert(drive.to_owned(), next.clone());
        });
        match next {
            Some(n) => after = Some(n),
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::{DrainPhase, DrainState};

    #[test]
    fn phases_read_and_write_the_names_kept_by_earlier_versions() {
        for (text, phase) in [
            ("", RefillPhase::None),
            ("none", RefillPhase::None),
            ("listing", RefillPhase::Listing),
            ("healing", RefillPhase::Healing),
            ("done", RefillPhase::Done),
        ] {
            let json = format!(
                r#"{{"state": "{text}", "started_ms": null, "finished_ms": null, "listed_shards": 0, "listed_bytes": 0}}"#
            );
            let s: RefillState = serde_json::from_str(&json).unwrap();
            assert_eq!(s.state, phase, "{text:?}");
        }
        for (text, phase) in [
            ("", DrainPhase::None),
            ("draining", DrainPhase::Draining),
            ("done", DrainPhase::Done),
            ("stopped", DrainPhase::Stopped),
        ] {
            let s: DrainState = serde_json::from_value(serde_json::json!({
                "state": text, "started_ms": null, "finished_ms": null, "passes": 0,
                "moved_shards": 0, "moved_bytes": 0, "dropped_shards": 0, "failures": 0,
                "last_error": null
            }))
            .unwrap();
            assert_eq!(s.state, phase, "{text:?}");
        }
        let shown = serde_json::to_value(DrainState {
            state: DrainPhase::Draining,
            ..DrainState::default()
        })
        .unwrap();
        assert_eq!(shown["state"], "draining");
        let newer: DrainPhase = serde_json::from_str(r#""paused""#).unwrap();
        assert_eq!(
            newer,
            DrainPhase::Unknown,
            "a newer drive's phase still reads"
        );
    }
}
