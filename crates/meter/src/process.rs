//! Process metrics in the names Prometheus' client libraries use (`process_*`), plus the
//! storage bytes this process caused (`/proc/self/io`). They reflect live state, so they
//! are read when Prometheus scrapes, not by the sampler.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Gauge, Opts};

use crate::procfs;
use crate::{Result, Roots};

/// The process metrics; register `AtScrape(ProcessCollector::new(..)?)` once.
pub struct ProcessCollector {
    roots: Roots,
    cpu: Counter,
    resident: Gauge,
    virtual_bytes: Gauge,
    threads: Gauge,
    fds: Gauge,
    start: Gauge,
    storage_read: Counter,
    storage_written: Counter,
}

impl std::fmt::Debug for ProcessCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessCollector").finish_non_exhaustive()
    }
}

impl ProcessCollector {
    /// A collector reading `{proc}/self`.
    ///
    /// # Errors
    /// Never in practice: the names are fixed and valid.
    pub fn new(roots: Roots) -> Result<Self> {
        let counter = |n: &str, h: &str| Counter::with_opts(Opts::new(n, h));
        let gauge = |n: &str, h: &str| Gauge::with_opts(Opts::new(n, h));
        Ok(Self {
            roots,
            cpu: counter(
                "process_cpu_seconds_total",
                "User and system CPU time of the daemon, seconds.",
            )?,
            resident: gauge(
                "process_resident_memory_bytes",
                "Resident memory of the daemon, bytes.",
            )?,
            virtual_bytes: gauge(
                "process_virtual_memory_bytes",
                "Virtual memory of the daemon, bytes.",
            )?,
            threads: gauge("process_threads", "Threads of the daemon.")?,
            fds: gauge("process_open_fds", "Open file descriptors of the daemon.")?,
            start: gauge(
                "process_start_time_seconds",
                "Start time of the daemon, seconds since the Unix epoch.",
            )?,
            storage_read: counter(
                "oed_process_storage_read_bytes_total",
                "Bytes the daemon caused to be read from storage (page cache misses), from /proc/self/io.",
            )?,
            storage_written: counter(
                "oed_process_storage_written_bytes_total",
                "Bytes the daemon caused to be written to storage, from /proc/self/io.",
            )?,
        })
    }

    fn all(&self) -> [&dyn Collector; 8] {
        [
            &self.cpu,
            &self.resident,
            &self.virtual_bytes,
            &self.threads,
            &self.fds,
            &self.start,
            &self.storage_read,
            &self.storage_written,
        ]
    }

    fn refresh(&self) {
        let s = match procfs::process_stats(&self.roots) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "process counters");
                return;
            }
        };
        advance(&self.cpu, s.cpu_seconds);
        if let Some(r) = s.storage_read_bytes {
            advance(&self.storage_read, r as f64);
        }
        if let Some(w) = s.storage_written_bytes {
            advance(&self.storage_written, w as f64);
        }
        self.resident.set(s.resident_bytes as f64);
        self.virtual_bytes.set(s.virtual_bytes as f64);
        self.threads.set(s.threads as f64);
        self.start.set(s.start_time_seconds);
        if let Some(n) = s.open_fds {
            // Reading the directory holds one descriptor of its own.
            self.fds.set(n.saturating_sub(1) as f64);
        }
    }
}

impl ScrapeTime for ProcessCollector {
    fn parts(&self) -> Vec<&dyn Collector> {
        self.all().to_vec()
    }

    fn refresh(&self) {
        ProcessCollector::refresh(self);
    }
}

/// Raises `counter` to `total`, a count kept elsewhere that only grows (an atomic of the
/// daemon, a per-process kernel counter), so the counter's own value is the only state.
pub fn advance(counter: &Counter, total: f64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

/// Metrics that reflect live state: [`ScrapeTime::refresh`] updates them, and
/// [`AtScrape`] calls it each time Prometheus collects.
pub trait ScrapeTime: Send + Sync {
    /// The collectors whose values `refresh` sets.
    fn parts(&self) -> Vec<&dyn Collector>;
    /// Reads the live values into the collectors.
    fn refresh(&self);
}

/// A [`ScrapeTime`] as a collector to register.
#[derive(Debug)]
pub struct AtScrape<T>(pub T);

impl<T: ScrapeTime> Collector for AtScrape<T> {
    fn desc(&self) -> Vec<&Desc> {
        self.0
            .parts()
            .into_iter()
            .flat_map(Collector::desc)
            .collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.0.refresh();
        self.0
            .parts()
            .into_iter()
            .flat_map(Collector::collect)
            .collect()
    }
}
