//! Keeping the cluster's redundancy: heal, scrub and refill, running in the background
//! on every drive.
//!
//! - [`heal`]: this drive rebuilds its own missing or bad shards from the heal queue
//!   ([`oed_store::queue`]), `k` good shards read from the other holders through the
//!   stripe source, written with the one durable write every shard gets; and it hands
//!   the entries it holds for other drives (hints) to them when they answer.
//! - [`scrub`]: this drive reads all its shards at a bounded rate and checks every
//!   chunk's CRC32C, checks with the other holders of each object that they hold their
//!   shards, and sweeps leftovers after a grace period.
//! - [`refill`]: a drive that starts on an empty data directory under an id the cluster
//!   knows (a replaced disk) lists what it held from the other drives and queues all of it.
//! - [`drain`]: a drive marked out moves its shards to drives that are in, and has every
//!   holder's record updated, before it is removed from the map.
//! - [`lifecycle`]: this drive applies its buckets' lifecycle rules to the versions it
//!   is the drive for.
//! - [`rebalance`]: after the map changes, every drive moves the shards the map in force
//!   places elsewhere to their new drives, and hands over the rebuild of the shards of a
//!   drive removed as lost.
//!
//! Heal and scrub are rate-limited in bytes per second ([`oed_store::limiter::Limiter`]); heal yields part of
//! its rate while the drive serves requests. Progress and findings are in
//! [`RepairStatus`] (`oedd admin`) and in the drive's metrics.

// Rates and ETAs are f64; byte counts convert with more than enough precision.
#![allow(clippy::cast_precision_loss)]

/// A phase of repair work, as it is kept in the store and shown in the status JSON: its
/// lowercase name, with `none` before it runs (an empty state kept by an earlier version
/// reads so too) and `unknown` for a name this version does not know (a newer drive's, or
/// a state a newer version kept), shown and never acted on.
macro_rules! phases {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $v:ident = $label:literal,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            /// Not run.
            #[default]
            #[serde(rename = "none", alias = "")]
            None,
            $($(#[$vdoc])* #[serde(rename = $label)] $v,)*
            /// A phase this version does not know.
            #[serde(rename = "unknown", other)]
            Unknown,
        }

        impl $name {
            /// Its name, as `oedd admin` and the status JSON show it.
            #[must_use]
            pub fn label(self) -> &'static str {
                match self {
                    Self::None => "none",
                    $(Self::$v => $label,)*
                    Self::Unknown => "unknown",
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.label())
            }
        }
    };
}

pub mod drain;
pub mod heal;
pub mod lifecycle;
pub mod metrics;
pub mod rebalance;
pub mod refill;
pub mod scrub;

pub use oed_store::limiter::Limiter;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use oed_cluster::Cluster;
use oed_model::config::Config;
use oed_model::heal::HealEntry;
use oed_store::Store;
use oed_store::queue::QueueCounts;

/// What the repair work is told, from [`Config`].
#[derive(Clone, Debug)]
pub struct RepairConfig {
    /// Whether heal runs.
    pub heal: bool,
    /// Bytes rebuilt per second (0: no limit).
    pub heal_rate: u64,
    /// Share of the rate kept while the drive serves requests.
    pub busy_share: f64,
    /// Heals at once.
    pub concurrency: usize,
    /// Time before failed heals are tried again.
    pub retry: Duration,
    /// Bytes scrubbed per second (0: no scrub).
    pub scrub_rate: u64,
    /// From the start of one pass to the start of the next.
    pub scrub_interval: Duration,
    /// Age of leftovers before they are swept.
    pub grace: Duration,
    /// Lifecycle actions per second (0: no lifecycle).
    pub lifecycle_rate: u32,
    /// A lifecycle day.
    pub lifecycle_day: Duration,
}

impl RepairConfig {
    /// The settings of `config`.
    #[must_use]
    pub fn of(config: &Config) -> Self {
        Self {
            heal: config.heal,
            heal_rate: config.heal_rate_bytes,
            busy_share: config.heal_busy_share,
            concurrency: config.heal_concurrency,
            retry: Duration::from_secs(config.heal_retry_seconds),
            scrub_rate: config.scrub_rate_bytes,
            scrub_interval: Duration::from_secs(config.scrub_interval_seconds),
            grace: Duration::from_secs(config.sweep_grace_seconds),
            lifecycle_rate: config.lifecycle_actions_per_second,
            lifecycle_day: Duration::from_secs(config.lifecycle_day_seconds),
        }
    }
}

/// A piece of repair work's state that survives restarts: kept in the store's `state`
/// column family under `name`, with a `state` field that reads `None` until it runs.
trait Persisted: Clone + Default + Serialize + serde::de::DeserializeOwned {
    /// Its name in the store.
    const NAME: &'static str;
    /// The state kept in `store`, or none.
    fn load(store: &Store) -> Self {
        store.state(Self::NAME).ok().flatten().unwrap_or_default()
    }
}

/// Changes the state behind `lock` with `f`, keeps it in `store`, and returns it.
fn save_persisted<T: Persisted>(store: &Store, lock: &Mutex<T>, f: impl FnOnce(&mut T)) -> T {
    let s = {
        let mut s = lock.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut s);
        s.clone()
    };
    if let Err(e) = store.set_state(T::NAME, &s) {
        tracing::warn!(error = %e, what = T::NAME, "saving the repair state");
    }
    s
}

/// Request bodies of the repair work stay within this (the peer API takes 64 KiB by
/// default, `max_request_body_bytes`).
const BODY_BUDGET: usize = 48 * 1024;

/// `items` cut into runs whose estimated JSON sizes (`size` of each) fit a peer request
/// body; an item larger than that is a run of its own.
fn batches<T>(items: &[T], size: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut used) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let s = size(item);
        if i > start && used + s > BODY_BUDGET {
            out.push(&items[start..i]);
            (start, used) = (i, 0);
        }
        used += s;
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}

/// A heal entry's size in a request body, at most.
fn entry_size(e: &HealEntry) -> usize {
    256 + e.bucket.len() + e.key.len()
}

/// Counters of what heal did since start.
#[derive(Debug, Default)]
pub struct HealStats {
    /// Shards rebuilt and stored.
    pub shards: AtomicU64,
    /// Their bytes.
    pub bytes: AtomicU64,
    /// Heals that failed and were deferred.
    pub failures: AtomicU64,
    /// Entries dropped because their version was overwritten, deleted, or is held.
    pub obsolete: AtomicU64,
    /// Entries handed to the drives they are for.
    pub hints_delivered: AtomicU64,
    /// Recent heals, for the current rate.
    recent: Rate,
}

/// The window a current rate is measured over.
const RATE_WINDOW: Duration = Duration::from_secs(30);

/// Bytes done recently (time, bytes), for a rate over the last 30 s.
#[derive(Debug, Default)]
pub(crate) struct Rate(Mutex<VecDeque<(Instant, u64)>>);

impl Rate {
    fn add(&self, bytes: u64) {
        let mut r = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        r.push_back((Instant::now(), bytes));
        while r.len() > 4096 {
            r.pop_front();
        }
    }

    /// Bytes per second over the last 30 s.
    fn per_second(&self) -> f64 {
        let mut r = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        while r
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW)
        {
            r.pop_front();
        }
        r.iter().map(|(_, b)| *b).sum::<u64>() as f64 / RATE_WINDOW.as_secs_f64()
    }
}

impl HealStats {
    fn healed(&self, bytes: u64) {
        self.shards.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.recent.add(bytes);
    }

    /// Bytes healed per second over the last 30 s.
    #[must_use]
    pub fn rate(&self) -> f64 {
        self.recent.per_second()
    }
}

/// A drive's heal, scrub and refill work; see the module docs.
#[derive(Debug)]
pub struct Repair {
    cluster: Arc<Cluster>,
    store: Store,
    config: RepairConfig,
    /// Requests the drive is serving now, bodies included (counted by the server's
    /// outermost layer): what heal yields to.
    requests: Arc<AtomicUsize>,
    heal_limit: Limiter,
    scrub_limit: Arc<Limiter>,
    /// Wakes the healer: new entries, a retry asked for.
    wake: Arc<Notify>,
    retry_now: AtomicBool,
    /// Starts a scrub pass now.
    scrub_now: Notify,
    /// Starts a refill.
    refill_now: Notify,
    /// What heal did.
    pub heal_stats: HealStats,
    /// What scrub did.
    pub scrub_stats: scrub::ScrubStats,
    /// The refill's state (also kept in the store).
    refill: Mutex<refill::RefillState>,
    /// Wakes the drain.
    drain_now: Notify,
    /// The drain's state (also kept in the store).
    drain: Mutex<drain::DrainState>,
    /// What drain did since start.
    pub drain_stats: drain::DrainStats,
    /// Wakes the rebalance (the map changed).
    rebalance_now: Notify,
    /// The rebalance's state (also kept in the store).
    rebalance: Mutex<rebalance::RebalanceState>,
    /// What rebalance did since start.
    pub rebalance_stats: rebalance::RebalanceStats,
    /// Starts a lifecycle pass now.
    lifecycle_now: Notify,
    /// What the lifecycle did since start (and its state, also kept in the store).
    pub lifecycle_stats: lifecycle::LifecycleStats,
}

/// What `oedd admin` shows of a drive (`GET admin/status`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RepairStatus {
    /// The drive.
    pub drive_id: String,
    /// Its incarnation.
    pub incarnation: String,
    /// The epoch of the cluster map it runs.
    pub epoch: u64,
    /// Shards it holds.
    pub shards: u64,
    /// Its heal queue.
    pub queue: QueueCounts,
    /// Heal.
    pub heal: HealStatus,
    /// Scrub.
    pub scrub: scrub::ScrubStatus,
    /// Refill.
    pub refill: refill::RefillState,
    /// Drain.
    #[serde(default)]
    pub drain: drain::DrainState,
    /// Rebalance (absent from the answers of versions before it).
    #[serde(default)]
    pub rebalance: rebalance::RebalanceState,
    /// `in` or `out`: whether the map in force gives the drive new shards (absent from
    /// the answers of versions before it).
    #[serde(default)]
    pub map_state: Option<oed_model::map::DriveState>,
    /// Its clock minus the other drives', seconds, from their answers of the last two
    /// minutes (`None`: none answered; absent from the answers of versions before it).
    #[serde(default)]
    pub clock_offset_seconds: Option<f64>,
    /// Lifecycle (absent from the answers of versions before it).
    #[serde(default)]
    pub lifecycle: lifecycle::LifecycleStatus,
}

/// Heal's part of [`RepairStatus`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HealStatus {
    /// Whether heal runs.
    pub enabled: bool,
    /// The configured rate, bytes per second (0: none).
    pub rate_limit_bytes: u64,
    /// Bytes per second rebuilt over the last 30 s.
    pub rate_bytes: f64,
    /// Shards rebuilt since start.
    pub healed_shards: u64,
    /// Their bytes.
    pub healed_bytes: u64,
    /// Heals that failed (and were deferred) since start.
    pub failures: u64,
    /// Entries found obsolete since start.
    pub obsolete: u64,
    /// Seconds until the queue is empty at the current rate, when it is moving.
    pub eta_seconds: Option<f64>,
}

impl Repair {
    /// The repair work of the drive whose cluster is `cluster`; its healer also wakes
    /// when `wake` is told (heal entries arrived from other drives).
    #[must_use]
    pub fn new(cluster: Arc<Cluster>, config: RepairConfig, wake: Arc<Notify>) -> Arc<Self> {
        let store = cluster.local_store().clone();
        let refill = <refill::RefillState as Persisted>::load(&store);
        let drain = <drain::DrainState as Persisted>::load(&store);
        let rebalance = <rebalance::RebalanceState as Persisted>::load(&store);
        Arc::new(Self {
            heal_limit: Limiter::new(config.heal_rate),
            scrub_limit: Arc::new(Limiter::new(config.scrub_rate)),
            cluster,
            store,
            config,
            requests: Arc::default(),
            wake,
            retry_now: AtomicBool::new(false),
            scrub_now: Notify::new(),
            refill_now: Notify::new(),
            heal_stats: HealStats::default(),
            scrub_stats: scrub::ScrubStats::default(),
            refill: Mutex::new(refill),
            drain_now: Notify::new(),
            drain: Mutex::new(drain),
            drain_stats: drain::DrainStats::default(),
            rebalance_now: Notify::new(),
            rebalance: Mutex::new(rebalance),
            rebalance_stats: rebalance::RebalanceStats::default(),
            lifecycle_now: Notify::new(),
            lifecycle_stats: lifecycle::LifecycleStats::default(),
        })
    }

    /// The cluster this drive works in.
    #[must_use]
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Starts the healer, the hint sender, the scrubber and (on a new incarnation of a
    /// known drive, or one left unfinished) the refill, on `tasks`, until `stop`.
    pub fn spawn(self: &Arc<Self>, tasks: &TaskTracker, stop: &CancellationToken) {
        if self.config.heal {
            tasks.spawn(heal::run(self.clone(), stop.child_token()));
        }
        tasks.spawn(heal::send_hints(self.clone(), stop.child_token()));
        tasks.spawn(scrub::run(self.clone(), stop.child_token()));
        tasks.spawn(refill::run(self.clone(), stop.child_token()));
        tasks.spawn(drain::run(self.clone(), stop.child_token()));
        tasks.spawn(rebalance::run(self.clone(), stop.child_token()));
        tasks.spawn(lifecycle::run(self.clone(), stop.child_token()));
    }

    /// Wakes the healer (entries were queued).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Asks for a scrub pass now; returns true.
    pub fn start_scrub(&self) -> bool {
        self.scrub_now.notify_one();
        true
    }

    /// Asks for a lifecycle pass now; returns true.
    pub fn start_lifecycle(&self) -> bool {
        self.lifecycle_now.notify_one();
        true
    }

    /// Asks for a refill now (an operator says this drive's disk was replaced).
    pub fn start_refill(&self) -> bool {
        self.refill_now.notify_one();
        true
    }

    /// Retries deferred heals now.
    pub fn retry_deferred(&self) -> bool {
        self.retry_now.store(true, Ordering::Relaxed);
        self.wake.notify_one();
        true
    }

    /// The count of requests the drive is serving, for the server to keep
    /// ([`oed_daemon::server`] counts each from its head to the end of its answer's body).
    #[must_use]
    pub fn requests(&self) -> Arc<AtomicUsize> {
        self.requests.clone()
    }

    /// Whether the drive is serving requests.
    fn busy(&self) -> bool {
        self.requests.load(Ordering::Relaxed) > 0
    }

    /// The share of the heal rate to use now.
    fn heal_share(&self) -> f64 {
        if self.busy() {
            self.config.busy_share
        } else {
            1.0
        }
    }

    /// The drive's state, from counters (no I/O).
    #[must_use]
    pub fn status_now(&self) -> RepairStatus {
        let queue = self.store.heal_queue().status();
        let h = &self.heal_stats;
        let rate = h.rate();
        let left: u64 = queue.local_bytes.values().sum();
        let mut refill = self
            .refill
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        refill.update(&queue, rate);
        let map = self.cluster.map();
        RepairStatus {
            drive_id: self.store.drive_id().to_owned(),
            incarnation: self.store.identity().incarnation.clone(),
            epoch: map.epoch,
            map_state: Some(map.drives[map.local].state),
            #[expect(clippy::cast_precision_loss, reason = "a clock offset, in seconds")]
            clock_offset_seconds: self.cluster.clock_offset_ms().map(|ms| ms as f64 / 1000.0),
            drain: self.drain_status(),
            rebalance: self.rebalance_status(),
            shards: self.store.object_count(),
            heal: HealStatus {
                enabled: self.config.heal,
                rate_limit_bytes: self.config.heal_rate,
                rate_bytes: rate,
                healed_shards: h.shards.load(Ordering::Relaxed),
                healed_bytes: h.bytes.load(Ordering::Relaxed),
                failures: h.failures.load(Ordering::Relaxed),
                obsolete: h.obsolete.load(Ordering::Relaxed),
                eta_seconds: (rate > 0.0 && left > 0).then(|| left as f64 / rate),
            },
            scrub: self.scrub_stats.status(&self.config),
            lifecycle: self
                .lifecycle_stats
                .status(&self.config, self.cluster.accounts().lifecycles().len()),
            refill,
            queue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_fit_a_request_body_and_keep_every_item_once() {
        let items: Vec<usize> = vec![10_000, 20_000, 30_000, 60_000, 1, 2];
        let b = batches(&items, |s| *s);
        assert_eq!(b, [&items[0..2], &items[2..3], &items[3..4], &items[4..6]]);
        assert!(batches(&[] as &[usize], |s| *s).is_empty());
    }
}
