//! Settling writes ([`Settlement`], `docs/cluster.md`, "The commit step"). A failed write
//! is settled at once, before the client's answer ([`Cluster::settle`]). A write that
//! reached its quorum is settled after the answer, and in batches: the drives' messages
//! wait in [`Settler`] while the ones before them are on their way, so a coordinator
//! busy with overwrites sends one request per drive for many writes rather than one
//! each. Whatever is not sent (a drive that does not answer, a full queue, a shutdown) is
//! done by each drive's scrub.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::join_all;

use super::{Cluster, RequestTasks};
use oed_model::drive::{Drive, MAX_BATCH, Settlement};
use oed_model::record::ObjectRecord;

/// Most settlements waiting at once; more are left to the scrub.
const MAX_WAITING: usize = 64 * 1024;

/// Settlements of stored writes waiting to be sent, by drive.
#[derive(Default)]
pub struct Settler(Arc<Mutex<Waiting>>);

impl std::fmt::Debug for Settler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        write!(f, "Settler({} waiting)", w.count)
    }
}

#[derive(Default)]
struct Waiting {
    /// By the address of the drive's handle.
    by_drive: HashMap<usize, (Arc<dyn Drive>, Vec<Settlement>)>,
    count: usize,
    /// Whether a task is sending them.
    sending: bool,
}

impl Settler {
    /// Queues `s` for each of `drives`, and starts a task on `tasks` to send what waits
    /// unless one is at it.
    pub fn queue(
        &self,
        tasks: &RequestTasks,
        drives: Vec<Arc<dyn Drive>>,
        s: &Settlement,
        timeout: Duration,
    ) {
        let start = {
            let mut w = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if w.count + drives.len() > MAX_WAITING {
                tracing::debug!(key = %s.key, "settle queue full; left to the scrub");
                return;
            }
            w.count += drives.len();
            for d in drives {
                let at = Arc::as_ptr(&d).cast::<()>() as usize;
                w.by_drive
                    .entry(at)
                    .or_insert_with(|| (d, Vec::new()))
                    .1
                    .push(s.clone());
            }
            !std::mem::replace(&mut w.sending, true)
        };
        if start {
            tasks.spawn(send_waiting(self.0.clone(), timeout));
        }
    }
}

/// Sends what waits, one request per drive and batch, until nothing does.
async fn send_waiting(waiting: Arc<Mutex<Waiting>>, timeout: Duration) {
    loop {
        let batches = {
            let mut w = waiting.lock().unwrap_or_else(PoisonError::into_inner);
            if w.by_drive.is_empty() {
                w.sending = false;
                return;
            }
            w.count = 0;
            std::mem::take(&mut w.by_drive)
        };
        let sends: Vec<(Arc<dyn Drive>, Vec<Settlement>)> = batches
            .into_values()
            .flat_map(|(d, list)| {
                list.chunks(MAX_BATCH)
                    .map(|c| (d.clone(), c.to_vec()))
                    .collect::<Vec<_>>()
            })
            .collect();
        join_all(
            sends
                .iter()
                .map(|(d, list)| settle_one(d.as_ref(), list, timeout)),
        )
        .await;
    }
}

/// How the write of `record` ended, for its drives.
pub(super) fn settlement(record: &ObjectRecord, stored: bool) -> Settlement {
    Settlement {
        bucket: record.bucket.clone(),
        key: record.key.clone(),
        version_id: record.version_id,
        stored,
    }
}

/// Sends `list` to `drive`; a drive that does not answer in `timeout` has it done by its
/// scrub.
async fn settle_one(drive: &dyn Drive, list: &[Settlement], timeout: Duration) {
    match tokio::time::timeout(timeout, drive.settle(list)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(writes = list.len(), error = %e, "writes not settled"),
        Err(_) => tracing::warn!(writes = list.len(), "writes not settled in time"),
    }
}

impl Cluster {
    /// Tells the drives of `record`'s shards `shards` how its write ended, and waits.
    pub(super) async fn settle(&self, record: &ObjectRecord, shards: &[usize], stored: bool) {
        let s = [settlement(record, stored)];
        let s = &s;
        join_all(
            shards
                .iter()
                .filter_map(|&i| self.drive(&record.drives[i]))
                .map(|d| async move { settle_one(d.as_ref(), s, self.timeout).await }),
        )
        .await;
    }
}
