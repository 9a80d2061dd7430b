//! The repair work's metrics, read from its counters when Prometheus scrapes.

// Prometheus samples are f64.
#![allow(clippy::cast_precision_loss)]

use std::sync::Arc;
use std::sync::atomic::Ordering;

use oed_meter::process::{ScrapeTime, advance};
use prometheus::core::Collector;
use prometheus::{Counter, CounterVec, Gauge, GaugeVec, Opts};

use super::Repair;
use oed_model::heal::HealCause;

/// The collector; register it wrapped in `AtScrape`.
pub struct RepairCollector {
    repair: Arc<Repair>,
    queue: GaugeVec,
    queue_bytes: GaugeVec,
    hints: Gauge,
    queued: CounterVec,
    healed: Counter,
    healed_bytes: Counter,
    heal_failures: Counter,
    heal_obsolete: Counter,
    heal_rate: Gauge,
    in_flight: Gauge,
    scrub_bytes: Counter,
    scrub_corrupt: Counter,
    scrub_missing: Counter,
    scrub_running: Gauge,
    scrub_last: Gauge,
    scrub_pass_objects: Gauge,
    swept: CounterVec,
    redundancy: GaugeVec,
    refill: GaugeVec,
    drain: DrainMetrics,
    rebalance: RebalanceMetrics,
    lifecycle: LifecycleMetrics,
}

/// The lifecycle's metrics.
struct LifecycleMetrics {
    actions: CounterVec,
    checked: Counter,
    failures: Counter,
    running: Gauge,
    last: Gauge,
    buckets: Gauge,
}

impl LifecycleMetrics {
    fn new() -> prometheus::Result<Self> {
        let c = |n: &str, h: &str| Counter::with_opts(Opts::new(n, h));
        let g = |n: &str, h: &str| Gauge::with_opts(Opts::new(n, h));
        Ok(Self {
            actions: CounterVec::new(
                Opts::new(
                    "oed_lifecycle_actions_total",
                    "Lifecycle actions this drive took, by action: expire_current (a current version deleted, or put behind a delete marker), expire_noncurrent, remove_delete_marker, abort_upload.",
                ),
                &["action"],
            )?,
            checked: c(
                "oed_lifecycle_checked_total",
                "Versions this drive applied lifecycle rules to (those it is the drive for, in buckets with rules).",
            )?,
            failures: c(
                "oed_lifecycle_failures_total",
                "Lifecycle actions that failed; the next pass tries them again.",
            )?,
            running: g("oed_lifecycle_running", "1 while a lifecycle pass runs.")?,
            last: g(
                "oed_lifecycle_last_complete_timestamp_seconds",
                "When this drive last completed a lifecycle pass (0: never).",
            )?,
            buckets: g("oed_lifecycle_buckets", "Buckets with lifecycle rules.")?,
        })
    }

    fn parts(&self) -> [&dyn Collector; 6] {
        [
            &self.actions,
            &self.checked,
            &self.failures,
            &self.running,
            &self.last,
            &self.buckets,
        ]
    }

    fn refresh(&self, s: &crate::lifecycle::LifecycleStatus) {
        for (action, n) in [
            ("expire_current", s.expired_current),
            ("expire_noncurrent", s.expired_noncurrent),
            ("remove_delete_marker", s.delete_markers_removed),
            ("abort_upload", s.uploads_aborted),
        ] {
            advance(&self.actions.with_label_values(&[action]), n as f64);
        }
        advance(&self.checked, s.checked as f64);
        advance(&self.failures, s.failures as f64);
        self.running.set(f64::from(u8::from(s.running)));
        self.last
            .set(s.last_complete_ms.map_or(0.0, |ms| ms as f64 / 1000.0));
        self.buckets.set(s.buckets as f64);
    }
}

/// The rebalance's metrics.
struct RebalanceMetrics {
    gauges: GaugeVec,
    moved: Counter,
    moved_bytes: Counter,
    rebuilt: Counter,
    failures: Counter,
}

impl RebalanceMetrics {
    fn new() -> prometheus::Result<Self> {
        let c = |n: &str, h: &str| Counter::with_opts(Opts::new(n, h));
        Ok(Self {
            gauges: GaugeVec::new(
                Opts::new(
                    "oed_rebalance",
                    "This drive's rebalance: left_shards and left_bytes (held here, placed elsewhere by the map in force), waiting_shards (wait for another shard of their object), rate_bytes (per second, last 30 s), eta_seconds, epoch (of the map it works for), active (1 while moving), done (1 once every shard here is where the map places it).",
                ),
                &["what"],
            )?,
            moved: c(
                "oed_rebalance_moved_shards_total",
                "Shards this drive moved to the drives the map in force places them on.",
            )?,
            moved_bytes: c(
                "oed_rebalance_moved_bytes_total",
                "Bytes of shards this drive moved to the drives the map in force places them on.",
            )?,
            rebuilt: c(
                "oed_rebalance_rebuilt_shards_total",
                "Shards of drives removed from the map that this drive handed to their new drives to rebuild.",
            )?,
            failures: c(
                "oed_rebalance_failures_total",
                "Moves that failed (each is tried again on the next pass).",
            )?,
        })
    }

    fn parts(&self) -> [&dyn Collector; 5] {
        [
            &self.gauges,
            &self.moved,
            &self.moved_bytes,
            &self.rebuilt,
            &self.failures,
        ]
    }

    fn refresh(
        &self,
        s: &crate::rebalance::RebalanceState,
        stats: &crate::rebalance::RebalanceStats,
    ) {
        use crate::rebalance::RebalancePhase;
        for (what, v) in [
            ("left_shards", s.left_shards as f64),
            ("left_bytes", s.left_bytes as f64),
            ("waiting_shards", s.waiting_shards as f64),
            ("rate_bytes", s.rate_bytes),
            ("eta_seconds", s.eta_seconds.unwrap_or(0.0)),
            ("epoch", s.epoch as f64),
            (
                "active",
                f64::from(u8::from(s.state == RebalancePhase::Moving)),
            ),
            ("done", f64::from(u8::from(s.state == RebalancePhase::Done))),
        ] {
            self.gauges.with_label_values(&[what]).set(v);
        }
        for (c, v) in [
            (&self.moved, &stats.moved_shards),
            (&self.moved_bytes, &stats.moved_bytes),
            (&self.rebuilt, &stats.rebuilt_shards),
            (&self.failures, &stats.failures),
        ] {
            advance(c, v.load(Ordering::Relaxed) as f64);
        }
    }
}

/// The drain's and the map state's metrics.
struct DrainMetrics {
    drain: GaugeVec,
    drained: Counter,
    drained_bytes: Counter,
    out: Gauge,
}

impl DrainMetrics {
    fn new() -> prometheus::Result<Self> {
        let g = |n: &str, h: &str| Gauge::with_opts(Opts::new(n, h));
        let c = |n: &str, h: &str| Counter::with_opts(Opts::new(n, h));
        let gv = |n: &str, h: &str, l: &str| GaugeVec::new(Opts::new(n, h), &[l]);
        Ok(Self {
            drain: gv(
                "oed_drain",
                "This drive's drain: left_shards (still here), eta_seconds, active (1 while draining), done (1 once nothing is left and no drive names it).",
                "what",
            )?,
            drained: c(
                "oed_drain_moved_shards_total",
                "Shards this drive moved to other drives while draining.",
            )?,
            drained_bytes: c(
                "oed_drain_moved_bytes_total",
                "Bytes of shards this drive moved to other drives while draining.",
            )?,
            out: g(
                "oed_drive_out",
                "1 when the cluster map in force marks this drive out (it gets no new shards).",
            )?,
        })
    }
}

impl RepairCollector {
    /// Its metrics, empty until the first scrape.
    ///
    /// # Errors
    /// A metric that cannot be made (a bug).
    pub fn new(repair: Arc<Repair>) -> prometheus::Result<Self> {
        let g = |n: &str, h: &str| Gauge::with_opts(Opts::new(n, h));
        let c = |n: &str, h: &str| Counter::with_opts(Opts::new(n, h));
        let gv = |n: &str, h: &str, l: &str| GaugeVec::new(Opts::new(n, h), &[l]);
        let cv = |n: &str, h: &str, l: &str| CounterVec::new(Opts::new(n, h), &[l]);
        Ok(Self {
            queue: gv(
                "oed_heal_queue_shards",
                "This drive's own shards waiting to be rebuilt, by why they were queued (degraded_write, read_corrupt, scrub_corrupt, missing, refill).",
                "cause",
            )?,
            queue_bytes: gv(
                "oed_heal_queue_bytes",
                "Bytes of this drive's own shards waiting to be rebuilt, by cause.",
                "cause",
            )?,
            hints: g(
                "oed_heal_hints",
                "Heal entries this drive holds for other drives that could not be told yet (they were down).",
            )?,
            queued: cv(
                "oed_heal_queued_total",
                "Entries queued for this drive's own shards, by cause.",
                "cause",
            )?,
            healed: c(
                "oed_healed_shards_total",
                "Shards this drive rebuilt and stored.",
            )?,
            healed_bytes: c(
                "oed_healed_bytes_total",
                "Bytes of shards this drive rebuilt and stored.",
            )?,
            heal_failures: c(
                "oed_heal_failures_total",
                "Heals that failed (too few shards readable, a drive away) and were deferred for a retry.",
            )?,
            heal_obsolete: c(
                "oed_heal_obsolete_total",
                "Heal entries dropped with nothing to do: the version was overwritten or deleted, or the shard was there.",
            )?,
            heal_rate: g(
                "oed_heal_rate_bytes",
                "Bytes per second this drive rebuilt over the last 30 seconds.",
            )?,
            in_flight: g(
                "oed_requests_in_flight",
                "Requests (S3 and peer) this drive is serving now, each from its head to the end of its answer's body; heal keeps heal_busy_share of its rate while it is above 0.",
            )?,
            scrub_bytes: c(
                "oed_scrub_bytes_total",
                "Shard bytes the scrubber read and checked.",
            )?,
            scrub_corrupt: c(
                "oed_scrub_corrupt_total",
                "Shards of this drive the scrubber found bad (a chunk failing its CRC32C, or the file gone); each is queued for heal.",
            )?,
            scrub_missing: c(
                "oed_scrub_missing_total",
                "Shards the scrubber found missing on a holder (this drive or another) and queued for heal there.",
            )?,
            scrub_running: g("oed_scrub_running", "1 while a scrub pass runs.")?,
            scrub_last: g(
                "oed_scrub_last_complete_timestamp_seconds",
                "When this drive last completed a scrub pass (0: never).",
            )?,
            scrub_pass_objects: g(
                "oed_scrub_pass_objects",
                "Objects checked so far in the current (or last) scrub pass.",
            )?,
            swept: cv(
                "oed_sweep_removed_total",
                "Leftovers the scrubber removed after the grace period: temp_files, shard_files (no record), records (of versions no quorum holds).",
                "what",
            )?,
            redundancy: gv(
                "oed_objects_by_redundancy",
                "Objects by shards to spare (spare = held - k: m when whole, 0 when one more loss loses data), from this drive's last scrub pass; each object is counted by one drive, so the sum over drives counts each once.",
                "spare",
            )?,
            refill: gv(
                "oed_refill",
                "A replaced drive's refill: listed_bytes, remaining_bytes, progress (0-1), eta_seconds, active (1 while listing or rebuilding).",
                "what",
            )?,
            drain: DrainMetrics::new()?,
            rebalance: RebalanceMetrics::new()?,
            lifecycle: LifecycleMetrics::new()?,
            repair,
        })
    }
}

impl ScrapeTime for RepairCollector {
    fn parts(&self) -> Vec<&dyn Collector> {
        let mut parts: Vec<&dyn Collector> = vec![
            &self.queue,
            &self.queue_bytes,
            &self.hints,
            &self.queued,
            &self.healed,
            &self.healed_bytes,
            &self.heal_failures,
            &self.heal_obsolete,
            &self.heal_rate,
            &self.in_flight,
            &self.scrub_bytes,
            &self.scrub_corrupt,
            &self.scrub_missing,
            &self.scrub_running,
            &self.scrub_last,
            &self.scrub_pass_objects,
            &self.swept,
            &self.redundancy,
            &self.refill,
            &self.drain.drain,
            &self.drain.drained,
            &self.drain.drained_bytes,
            &self.drain.out,
        ];
        parts.extend(self.rebalance.parts());
        parts.extend(self.lifecycle.parts());
        parts
    }

    fn refresh(&self) {
        let s = self.repair.status_now();
        for cause in HealCause::ALL {
            let l = cause.label();
            self.queue
                .with_label_values(&[l])
                .set(s.queue.local.get(l).copied().unwrap_or(0) as f64);
            self.queue_bytes
                .with_label_values(&[l])
                .set(s.queue.local_bytes.get(l).copied().unwrap_or(0) as f64);
        }
        for (cause, n) in self.repair.store.heal_queue().queued() {
            advance(&self.queued.with_label_values(&[cause.label()]), n as f64);
        }
        self.hints.set(s.queue.hints as f64);
        let h = &self.repair.heal_stats;
        advance(&self.healed, h.shards.load(Ordering::Relaxed) as f64);
        advance(&self.healed_bytes, h.bytes.load(Ordering::Relaxed) as f64);
        advance(
            &self.heal_failures,
            h.failures.load(Ordering::Relaxed) as f64,
        );
        advance(
            &self.heal_obsolete,
            h.obsolete.load(Ordering::Relaxed) as f64,
        );
        self.heal_rate.set(s.heal.rate_bytes);
        self.in_flight
            .set(self.repair.requests.load(Ordering::Relaxed) as f64);
        advance(&self.scrub_bytes, s.scrub.bytes_total as f64);
        advance(&self.scrub_corrupt, s.scrub.corrupt_found as f64);
        advance(&self.scrub_missing, s.scrub.missing_found as f64);
        self.scrub_running.set(f64::from(u8::from(s.scrub.running)));
        self.scrub_last.set(
            s.scrub
                .last_complete_ms
                .map_or(0.0, |ms| ms as f64 / 1000.0),
        );
        self.scrub_pass_objects.set(s.scrub.pass_objects as f64);
        for (what, n) in &s.scrub.swept {
            advance(&self.swept.with_label_values(&[what]), *n as f64);
        }
        let m = self.repair.cluster.map().profile.m;
        for spare in 0..=m {
            let n = s.scrub.redundancy.get(&spare).copied().unwrap_or(0);
            self.redundancy
                .with_label_values(&[&spare.to_string()])
                .set(n as f64);
        }
        let r = &s.refill;
        for (what, v) in [
            ("listed_bytes", r.listed_bytes as f64),
            ("remaining_bytes", r.remaining_bytes as f64),
            ("progress", r.progress),
            ("eta_seconds", r.eta_seconds.unwrap_or(0.0)),
            (
                "active",
                f64::from(u8::from(matches!(
                    r.state,
                    crate::refill::RefillPhase::Listing | crate::refill::RefillPhase::Healing
                ))),
            ),
        ] {
            self.refill.with_label_values(&[what]).set(v);
        }
        let d = &s.drain;
        for (what, v) in [
            ("left_shards", d.left_shards as f64),
            ("eta_seconds", d.eta_seconds.unwrap_or(0.0)),
            (
                "active",
                f64::from(u8::from(d.state == crate::drain::DrainPhase::Draining)),
            ),
            (
                "done",
                f64::from(u8::from(d.state == crate::drain::DrainPhase::Done)),
            ),
        ] {
            self.drain.drain.with_label_values(&[what]).set(v);
        }
        let ds = &self.repair.drain_stats;
        advance(
            &self.drain.drained,
            ds.moved_shards.load(Ordering::Relaxed) as f64,
        );
        advance(
            &self.drain.drained_bytes,
            ds.moved_bytes.load(Ordering::Relaxed) as f64,
        );
        self.drain.out.set(f64::from(u8::from(
            s.map_state == Some(oed_model::map::DriveState::Out),
        )));
        self.rebalance
            .refresh(&s.rebalance, &self.repair.rebalance_stats);
        self.lifecycle.refresh(&s.lifecycle);
    }
}
