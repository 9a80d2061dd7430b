//! Heal: this drive rebuilds its own shards from the heal queue, and hands the entries it
//! holds for other drives to them.
//!
//! One heal, for an entry naming a shard of `bucket`/`key`:
//! 1. Ask the drives the object is placed on (and those the local record names) for
//!    their records; the current version is the newest that `k` of them hold. When none
//!    is readable the entry is dropped (the object was deleted, or its write never
//!    reached a quorum); when too few drives answer to tell, it is deferred.
//! 2. Rebuild only the current version, and only when this drive is one of its holders
//!    and lacks its shard (or the entry says the shard is bad): an entry for a version
//!    overwritten or deleted meanwhile brings nothing back.
//! 3. Stream the shard from the stripe source, which reads `k` good chunks of each stripe
//!    from the other holders and rebuilds this drive's chunk, at the heal rate, into the
//!    store's one durable write (temp file, fsync, rename, synced record). A heal killed
//!    at any point leaves the old state and the entry, which is tried again.
//! 4. Ask the holders again: if the version stopped being current while it was rebuilt
//!    (deleted, overwritten), the shard just written is removed again.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Repair, batches, entry_size};
use oed_cluster::newest_readable;
use oed_cluster::stripes::StripeSource;
use oed_model::drive::{Amendment, DriveError, ErrorCode};
use oed_model::error::{Error, Result};
use oed_model::heal::{HealCause, HealEntry};
use oed_model::record::{ObjectRecord, PartRef};

/// Entries taken from the queue at a time.
const BATCH: usize = 64;

/// What became of one entry.
#[derive(Debug)]
enum Outcome {
    /// The shard was rebuilt and stored: its bytes.
    Healed(u64),
    /// Nothing to do, and why.
    Obsolete(&'static str),
}

/// The healer: takes this drive's entries, fewest to spare first, `concurrency` at a
/// time, until `stop`.
pub async fn run(r: Arc<Repair>, stop: CancellationToken) {
    let me = r.store.drive_id().to_owned();
    let mut last_retry = Instant::now();
    loop {
        if stop.is_cancelled() {
            return;
        }
        let retry =
            r.retry_now.swap(false, Ordering::Relaxed) || last_retry.elapsed() >= r.config.retry;
        if retry {
            last_retry = Instant::now();
        }
        let batch = {
            let (store, me) = (r.store.clone(), me.clone());
            tokio::task::spawn_blocking(move || store.heal_queue().next(&me, BATCH, retry)).await
        };
        let batch = match batch {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "reading the heal queue");
                Vec::new()
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the heal queue");
                Vec::new()
            }
        };
        if batch.is_empty() {
            let wait = r.config.retry.min(Duration::from_secs(5));
            tokio::select! {
                () = stop.cancelled() => return,
                () = r.wake.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
            continue;
        }
        let work = futures_util::stream::iter(batch)
            .for_each_concurrent(r.config.concurrency, |e| settle(&r, e));
        tokio::select! {
            () = stop.cancelled() => return,
            () = work => {}
        }
    }
}

/// Heals one entry and settles it in the queue: removed when done or obsolete, deferred
/// when the heal failed.
async fn settle(r: &Arc<Repair>, e: HealEntry) {
    let started = Instant::now();
    let outcome = heal_or_follow(r, &e).await;
    let queue = r.store.heal_queue();
    let settled = match outcome {
        Ok(Outcome::Healed(bytes)) => {
            r.heal_stats.healed(bytes);
            r.cluster.traffic.body(
                oed_meter::traffic::Class::Heal,
                oed_meter::traffic::Direction::In,
                bytes,
                started.elapsed().as_secs_f64(),
            );
            tracing::info!(bucket = %e.bucket, key = %e.key, shard = e.shard_index, cause = e.cause.label(), bytes, "shard healed");
            queue.finish(&e).map(|_| ())
        }
        Ok(Outcome::Obsolete(why)) => {
            r.heal_stats.obsolete.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(bucket = %e.bucket, key = %e.key, why, "heal entry dropped");
            queue.finish(&e).map(|_| ())
        }
        Err(err) => {
            r.heal_stats.failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(bucket = %e.bucket, key = %e.key, shard = e.shard_index, attempts = e.attempts + 1, error = %err, "heal failed; trying again later");
            queue.defer(&e)
        }
    };
    if let Err(err) = settled {
        tracing::warn!(error = %err, "heal queue");
    }
}

/// The current version from `records`, or `None` when none is readable; an error when
/// the drives that did not answer could hold one.
pub(super) fn current_of(records: &[ObjectRecord], failed: usize) -> Result<Option<ObjectRecord>> {
    if let Some(c) = newest_readable(records) {
        return Ok(Some(c));
    }
    let k = records.iter().map(|r| usize::from(r.k)).max().unwrap_or(1);
    if failed > 0 && records.len() + failed >= k {
        return Err(Error::Unavailable(format!(
            "{failed} drives did not answer; cannot tell the current version"
        )));
    }
    Ok(None)
}

/// Heals the entry's shard; in a bucket with versioning, an entry of a version that has
/// since been replaced (kept under its version key, `oed_model::record::version_key`)
/// heals that noncurrent version instead.
async fn heal_or_follow(r: &Arc<Repair>, e: &HealEntry) -> Result<Outcome> {
    let outcome = heal_one(r, e).await?;
    if matches!(outcome, Outcome::Obsolete(_))
        && !e.key.starts_with(oed_model::record::INTERNAL_PREFIX)
        && r.cluster.accounts().versioning(&e.bucket).configured()
    {
        let kept = HealEntry {
            key: oed_model::record::version_key(&e.key, e.version_id),
            ..e.clone()
        };
        if let healed @ Outcome::Healed(_) = heal_one(r, &kept).await? {
            return Ok(healed);
        }
    }
    Ok(outcome)
}

async fn heal_one(r: &Arc<Repair>, e: &HealEntry) -> Result<Outcome> {
    let store = &r.store;
    let cluster = &r.cluster;
    let local = store.record(&e.bucket, &e.key)?;
    let also = local.as_ref().map(|l| l.drives.clone()).unwrap_or_default();
    let (records, failed) = cluster.holders(&e.bucket, &e.key, &also).await;
    let Some(current) = current_of(&records, failed)? else {
        return Ok(Outcome::Obsolete("no version of the object is readable"));
    };
    let me = store.drive_id();
    let Some(shard) = current.drives.iter().position(|d| d == me) else {
        return Ok(Outcome::Obsolete("the current version has no shard here"));
    };
    if let Some(l) = &local {
        if store.supersedes(l.version_id, current.version_id) {
            return Ok(Outcome::Obsolete("a newer version is being written here"));
        }
        if l.version_id == current.version_id {
            // Changes of the version (its tags, its retention, its legal hold) this drive
            // missed.
            for (at, change) in oed_model::drive::changes_since(&current, l) {
                store.amend(&Amendment {
                    bucket: l.bucket.clone(),
                    key: l.key.clone(),
                    version_id: l.version_id,
                    at,
                    change,
                })?;
            }
        }
        let bad = matches!(e.cause, HealCause::ReadCorrupt | HealCause::ScrubCorrupt)
            && e.version_id == l.version_id;
        if l.version_id == current.version_id && !bad && store.shard_held(l) {
            return Ok(Outcome::Obsolete("the shard is here"));
        }
    }
    if !cluster.bucket_exists(&current.bucket).await? {
        return Ok(Outcome::Obsolete("the bucket is gone"));
    }
    let bytes = match rebuild(r, &current, shard).await {
        Ok(b) => b,
        Err(Error::Superseded) => return Ok(Outcome::Obsolete("a newer version arrived")),
        Err(err) => return Err(err),
    };
    // The version may have been deleted or overwritten while it was rebuilt.
    let (after, failed) = cluster.holders(&e.bucket, &e.key, &current.drives).await;
    if failed == 0 && newest_readable(&after).is_none_or(|n| n.version_id != current.version_id) {
        match store
            .delete_object(&current.bucket, &current.key, Some(current.version_id))
            .await
        {
            Ok(()) | Err(Error::NotFound(_) | Error::Superseded) => {}
            Err(err) => return Err(err),
        }
        return Ok(Outcome::Obsolete(
            "overwritten or deleted while it was rebuilt",
        ));
    }
    Ok(Outcome::Healed(bytes))
}

/// Rebuilds shard `shard` of `current` from the other holders and stores it here;
/// returns its chunk bytes.
async fn rebuild(r: &Arc<Repair>, current: &ObjectRecord, shard: usize) -> Result<u64> {
    let layout = current.layout()?;
    let stripes = layout.stripe_count(current.size);
    let mut record = current.clone();
    record.shard_index = shard as u16;
    let header = record.shard_header()?;
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(8);
    let produce = async {
        let sent = produce(r, current, shard, stripes, header, &tx).await;
        if let Err(e) = &sent {
            // The store sees a broken upload and stores nothing.
            let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
        }
        drop(tx);
        sent
    };
    let body = tokio_stream_of(rx);
    let (sent, stored) = tokio::join!(produce, r.store.put_shard(record, body, false));
    match (sent, stored) {
        (Ok(bytes), Ok(_)) => Ok(bytes),
        // The store's refusal says more than the closed channel it left behind.
        (_, Err(e)) if !matches!(e, Error::Shard(_)) => Err(e),
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
    }
}

async fn produce(
    r: &Arc<Repair>,
    current: &ObjectRecord,
    shard: usize,
    stripes: u64,
    header: oed_ec::ShardHeader,
    tx: &mpsc::Sender<std::io::Result<Bytes>>,
) -> Result<u64> {
    let closed = || Error::Io(std::io::Error::other("the store stopped taking the shard"));
    tx.send(Ok(Bytes::copy_from_slice(&header.encode())))
        .await
        .map_err(|_| closed())?;
    if stripes == 0 {
        return Ok(0);
    }
    let mut src = StripeSource::open_rebuild(
        r.cluster.clone(),
        &current.bucket,
        PartRef::of(0, current),
        0..stripes,
        shard,
    )
    .await?;
    let mut bytes = 0;
    while let Some(stripe) = src.next().await? {
        r.heal_limit
            .take(stripe.chunk_len as u64, r.heal_share())
            .await;
        let Some(chunk) = stripe.chunks.into_iter().next() else {
            return Err(Error::Unavailable("the stripe source gave no chunk".into()));
        };
        let crc = chunk
            .pieces
            .iter()
            .fold(0, |c, p| crc32c::crc32c_append(c, p));
        let crc = crc32c::crc32c_append(crc, &stripe.index.to_le_bytes());
        for p in chunk.pieces {
            tx.send(Ok(p)).await.map_err(|_| closed())?;
        }
        tx.send(Ok(Bytes::copy_from_slice(&crc.to_le_bytes())))
            .await
            .map_err(|_| closed())?;
        bytes += stripe.chunk_len as u64;
    }
    Ok(bytes)
}

/// A receiver as a stream of the store's upload items.
fn tokio_stream_of(
    rx: mpsc::Receiver<std::io::Result<Bytes>>,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + Unpin {
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        let item = rx.recv().await?;
        Some((item, rx))
    }))
}

/// Hands the entries this drive holds for other drives to them, every few seconds, in
/// batches that fit a peer request.
pub async fn send_hints(r: Arc<Repair>, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
        let me = r.store.drive_id().to_owned();
        for d in &r.cluster.map().drives {
            if d.id == me {
                continue;
            }
            if let Err(e) = deliver(&r, &d.id).await
                && e.code != ErrorCode::Unreachable
            {
                tracing::warn!(drive = %d.id, error = %e, "handing heal entries over");
            }
        }
    }
}

async fn deliver(r: &Arc<Repair>, drive: &str) -> std::result::Result<(), DriveError> {
    let Some(peer) = r.cluster.drive(drive) else {
        return Ok(());
    };
    for _ in 0..100 {
        let entries = {
            let (store, d) = (r.store.clone(), drive.to_owned());
            tokio::task::spawn_blocking(move || store.heal_queue().entries_for(&d, 200))
                .await
                .map_err(|e| DriveError::unreachable(e.to_string()))??
        };
        if entries.is_empty() {
            return Ok(());
        }
        for batch in batches(&entries, entry_size) {
            oed_model::drive::within(r.cluster.timeout, peer.queue_heals(batch)).await?;
            for e in batch {
                r.store.heal_queue().finish(e)?;
            }
            r.heal_stats
                .hints_delivered
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
    }
    Ok(())
}
