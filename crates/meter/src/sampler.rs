//! The sampler: one [`Meter::sample`] per period reads the power source and the kernel's
//! host, disk and network counters, turns them into the activity the model needs, adds the
//! interval's energy to the joules counter and updates the metrics. It never fails: a
//! counter that cannot be read is logged and skipped, a source that fails a reading adds
//! no energy for that interval and counts an error.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, CounterVec, Gauge, IntCounter, Opts, Registry};

use crate::history::{Counters, History};
use crate::power::{self, Activity, Method, Source, SourceConfig};
use crate::procfs::{self, CpuTimes, DiskStats};
use crate::{Result, Roots};

/// What [`Meter::new`] needs.
#[derive(Debug, Clone)]
pub struct MeterConfig {
    /// The power source to use.
    pub source: SourceConfig,
    /// The data directory; its block device gives the disk counters.
    pub data_dir: PathBuf,
    /// Where `/sys` and `/proc` are.
    pub roots: Roots,
}

struct Metrics {
    power: Option<Gauge>,
    /// The joules counter and the time of the tick it counts up to, exported together by
    /// [`EnergyCollector`].
    energy: Option<(Counter, Gauge)>,
    errors: Option<IntCounter>,
    cpu: CounterVec,
    /// In the order of [`DISK`].
    disk: Vec<CounterVec>,
    disk_ops: CounterVec,
    /// In the order of [`NET`].
    net: Vec<CounterVec>,
}

/// Disk counters: field, metric, help, divisor from the kernel's unit.
const DISK: [(&str, &str, &str, f64); 5] = [
    (
        "read_bytes",
        "oed_disk_read_bytes_total",
        "Bytes read from the data directory's block device (/proc/diskstats).",
        1.0,
    ),
    (
        "written_bytes",
        "oed_disk_written_bytes_total",
        "Bytes written to the data directory's block device.",
        1.0,
    ),
    (
        "busy",
        "oed_disk_busy_seconds_total",
        "Time the data directory's block device had a request in flight.",
        1000.0,
    ),
    (
        "read_time",
        "oed_disk_read_seconds_total",
        "Time spent by reads of the block device, summed over requests.",
        1000.0,
    ),
    (
        "write_time",
        "oed_disk_write_seconds_total",
        "Time spent by writes of the block device, summed over requests.",
        1000.0,
    ),
];

/// Network counters: direction, metric, help.
const NET: [(&str, &str, &str); 2] = [
    (
        "receive",
        "oed_network_receive_bytes_total",
        "Bytes received on each interface of the daemon's network namespace.",
    ),
    (
        "transmit",
        "oed_network_transmit_bytes_total",
        "Bytes sent on each interface of the daemon's network namespace.",
    ),
];

#[derive(Default)]
struct Previous {
    at: Option<Instant>,
    cpu: Option<CpuTimes>,
    disk: Option<DiskStats>,
    /// Last totals of every counter exported from a kernel total, by series.
    totals: HashMap<(String, String), u64>,
    net_bytes: Option<u64>,
}

/// Reads a drive's energy counter at any moment, for the cost of one piece of work: the
/// joules counted at the sampler's last tick, plus the last power reading times the time
/// since. Cheap to clone; every clone reads the same meter.
#[derive(Clone, Debug)]
pub struct EnergyReader {
    latest: Arc<Mutex<Latest>>,
    method: Option<Method>,
}

/// The meter's state at its last tick.
#[derive(Debug, Default)]
struct Latest {
    joules: f64,
    reading: Option<(Instant, f64)>,
}

/// Exports `oed_energy_joules_total` with `oed_energy_timestamp_seconds`, the wall-clock
/// time of the tick the counter counts up to, read under the lock the sampler updates
/// both under: a scrape never pairs one tick's joules with another's time. A reader that
/// has the pairs of two scrapes around a moment (a benchmark phase's start or end) can
/// interpolate the counter at that moment, exactly as the meter counts (constant power
/// between ticks), however short the phase.
struct EnergyCollector {
    latest: Arc<Mutex<Latest>>,
    energy: Counter,
    stamp: Gauge,
    descs: Vec<Desc>,
}

impl Collector for EnergyCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = self.energy.collect();
        out.extend(self.stamp.collect());
        out
    }
}

/// The power series of a drive whose source is `label` (`method`), registered on
/// `registry`: the power gauge, the energy counter with the time of its tick (exported
/// together by an [`EnergyCollector`] over `latest`), the failed readings.
fn power_metrics(
    label: &str,
    method: Method,
    latest: &Arc<Mutex<Latest>>,
    registry: &Registry,
) -> Result<(Gauge, (Counter, Gauge), IntCounter)> {
    let labels = |name: &str, help: &str| {
        Opts::new(name, help)
            .const_label("source", label)
            .const_label("method", method.as_str())
    };
    let power = Gauge::with_opts(labels(
        "oed_power_watts",
        "Power drawn by the drive over the last sampler period, watts. method=modelled means computed from activity and a device profile, not measured.",
    ))?;
    let energy = Counter::with_opts(labels(
        "oed_energy_joules_total",
        "Energy used by the drive since the daemon started, joules (measured or modelled, see method).",
    ))?;
    let stamp = Gauge::with_opts(labels(
        "oed_energy_timestamp_seconds",
        "When the meter last counted into oed_energy_joules_total (its last tick), seconds since the Unix epoch; scraped together with it.",
    ))?;
    let errors = IntCounter::with_opts(
        Opts::new(
            "oed_power_sample_errors_total",
            "Power readings that failed; their intervals add no energy.",
        )
        .const_label("source", label),
    )?;
    registry.register(Box::new(power.clone()))?;
    let mut descs: Vec<Desc> = energy.desc().into_iter().cloned().collect();
    descs.extend(stamp.desc().into_iter().cloned());
    registry.register(Box::new(EnergyCollector {
        latest: latest.clone(),
        energy: energy.clone(),
        stamp: stamp.clone(),
        descs,
    }))?;
    registry.register(Box::new(errors.clone()))?;
    Ok((power, (energy, stamp), errors))
}

impl EnergyReader {
    /// Joules used by the drive since the daemon started, up to now; `None` when power
    /// metering is off. Between ticks the last reading's power stands in for what the
    /// next tick will count, so two reads a moment apart differ by about power times time.
    #[must_use]
    pub fn joules_now(&self) -> Option<f64> {
        self.method?;
        let latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        let since = latest
            .reading
            .map_or(0.0, |(at, watts)| watts * at.elapsed().as_secs_f64());
        Some(latest.joules + since)
    }

    /// Measured or modelled; `None` when power metering is off.
    #[must_use]
    pub fn method(&self) -> Option<Method> {
        self.method
    }
}

/// The meter of one drive.
pub struct Meter {
    roots: Roots,
    source: Option<Source>,
    label: String,
    device: Option<String>,
    ticks_per_second: f64,
    metrics: Metrics,
    prev: Previous,
    last_power: Option<(Instant, f64)>,
    failing: bool,
    latest: Arc<Mutex<Latest>>,
    history: Option<Arc<History>>,
    /// The kernel's totals read at this tick, for the history.
    counters: Counters,
}

/// How often the disk's temperature is read: reading `drivetemp`'s sensor sends the
/// disk a command, which a disk that could spin down should not get every second.
const TEMPERATURE_EVERY: std::time::Duration = std::time::Duration::from_mins(1);

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter")
            .field("source", &self.label)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl Meter {
    /// Detects the power source, finds the data directory's block device and registers
    /// the metrics on `registry`. Skipped sources and a missing block device are logged,
    /// not errors.
    ///
    /// # Errors
    /// [`crate::Error::Metrics`] if a metric of the same name is already registered.
    pub fn new(config: &MeterConfig, registry: &Registry) -> Result<Self> {
        let (source, skipped) = power::detect(&config.roots, &config.source);
        for reason in &skipped {
            tracing::info!(reason = %reason, "power source not used");
        }
        let (label, method) = match &source {
            Some(s) => (s.label(), Some(s.method())),
            None => ("none".to_owned(), None),
        };
        if let Some(m) = method {
            tracing::info!(source = %label, method = m.as_str(), "power source");
        } else {
            tracing::info!("power metrics are off (power_source = \"none\")");
        }
        let device = match procfs::device_of(&config.roots, &config.data_dir) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!(error = %e, dir = %config.data_dir.display(), "no disk counters for the data directory");
                None
            }
        };
        let latest: Arc<Mutex<Latest>> = Arc::default();
        let (power, energy, errors) = match method {
            Some(m) => {
                let (power, energy, errors) = power_metrics(&label, m, &latest, registry)?;
                (Some(power), Some(energy), Some(errors))
            }
            None => (None, None, None),
        };
        let cpu = CounterVec::new(
            Opts::new(
                "oed_host_cpu_seconds_total",
                "Host CPU time over all cores, by mode (busy, or idle including I/O wait).",
            ),
            &["mode"],
        )?;
        let counter = |name: &str, help: &str, labels: &[&str]| -> Result<CounterVec> {
            let c = CounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let disk = DISK
            .iter()
            .map(|(_, name, help, _)| counter(name, help, &["device"]))
            .collect::<Result<Vec<_>>>()?;
        let disk_ops = counter(
            "oed_disk_operations_total",
            "Completed requests of the data directory's block device, by op (read or write).",
            &["device", "op"],
        )?;
        let net = NET
            .iter()
            .map(|(_, name, help)| counter(name, help, &["interface"]))
            .collect::<Result<Vec<_>>>()?;
        registry.register(Box::new(cpu.clone()))?;
        Ok(Self {
            roots: config.roots.clone(),
            source,
            label,
            device,
            ticks_per_second: rustix::param::clock_ticks_per_second() as f64,
            metrics: Metrics {
                power,
                energy,
                errors,
                cpu,
                disk,
                disk_ops,
                net,
            },
            prev: Previous::default(),
            last_power: None,
            failing: false,
            latest,
            history: None,
            counters: Counters::default(),
        })
    }

    /// The `source` label of the power series (`none` when power metering is off).
    #[must_use]
    pub fn source_label(&self) -> &str {
        &self.label
    }

    /// Measured or modelled; `None` when power metering is off.
    #[must_use]
    pub fn method(&self) -> Option<Method> {
        self.source.as_ref().map(Source::method)
    }

    /// The data directory's block device, if it has one.
    #[must_use]
    pub fn device(&self) -> Option<&str> {
        self.device.as_deref()
    }

    /// Joules counted so far.
    #[must_use]
    pub fn energy_joules(&self) -> f64 {
        self.metrics.energy.as_ref().map_or(0.0, |(c, _)| c.get())
    }

    /// Feeds `history` at every tick from now on, and the data disk's temperature
    /// once a minute when it has a sensor. The temperature is read on a thread of its
    /// own, so that a disk slow to answer its sensor never holds up the sampler; the
    /// thread ends once `history` is dropped.
    pub fn keep_history(&mut self, history: Arc<History>) {
        let sensor = self
            .device
            .as_deref()
            .and_then(|d| procfs::temperature_file(&self.roots, d));
        if let Some(file) = sensor {
            let weak = Arc::downgrade(&history);
            let spawned = std::thread::Builder::new()
                .name("oed-temperature".into())
                .spawn(move || {
                    while let Some(h) = weak.upgrade() {
                        h.set_temperature(procfs::read_temperature(&file).ok());
                        drop(h);
                        std::thread::sleep(TEMPERATURE_EVERY);
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "no thread to read the disk's temperature");
            }
        }
        self.history = Some(history);
    }

    /// A reader of this meter's energy for others to hold.
    #[must_use]
    pub fn energy_reader(&self) -> EnergyReader {
        EnergyReader {
            latest: self.latest.clone(),
            method: self.method(),
        }
    }

    /// One tick. Returns the activity of the interval since the previous tick (`None` on
    /// the first) and the power reading, for callers that calibrate.
    pub fn sample(&mut self) -> (Option<Activity>, Option<f64>) {
        // The tick's moment on both clocks: the interval it counts ends here, however
        // long the readings below take (an external power command may take a while).
        let now = Instant::now();
        let wall = crate::wall_ms();
        let activity = self.read_system(now);
        let (watts, added) = self.read_power(now, activity.as_ref());
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((counter, stamp)) = &self.metrics.energy {
            if let Some(j) = added {
                counter.inc_by(j);
            }
            #[allow(clippy::cast_precision_loss, reason = "milliseconds since 1970 fit")]
            stamp.set(wall as f64 / 1000.0);
        }
        latest.joules = self.energy_joules();
        latest.reading = self.last_power;
        drop(latest);
        if let Some(h) = &self.history {
            let joules = self.metrics.energy.as_ref().map(|(c, _)| c.get());
            h.tick(now, wall, self.counters, watts, joules);
        }
        (activity, watts)
    }

    /// Reads the source: the power, and the joules of the interval since the last tick
    /// (`None` when they cannot be known: a failed reading, the first of an
    /// instantaneous source).
    fn read_power(
        &mut self,
        now: Instant,
        activity: Option<&Activity>,
    ) -> (Option<f64>, Option<f64>) {
        let Some(source) = self.source.as_mut() else {
            return (None, None);
        };
        match source.sample(now, activity) {
            Ok(Some(s)) => {
                if self.failing {
                    tracing::info!(source = %self.label, "power readings work again");
                    self.failing = false;
                }
                let joules = match (s.joules, source.method(), activity) {
                    (Some(j), _, _) => Some(j),
                    // The model gives the average over the activity interval.
                    (None, Method::Modelled, Some(a)) => Some(s.watts * a.seconds),
                    // An instantaneous reading: the trapezoid from the previous one.
                    (None, _, _) => self.last_power.map(|(t, w)| {
                        f64::midpoint(w, s.watts) * now.duration_since(t).as_secs_f64()
                    }),
                };
                self.last_power = Some((now, s.watts));
                if let Some(g) = &self.metrics.power {
                    g.set(s.watts);
                }
                (Some(s.watts), joules.filter(|j| j.is_finite() && *j >= 0.0))
            }
            Ok(None) => (None, None),
            Err(e) => {
                if !self.failing {
                    tracing::warn!(source = %self.label, error = %e, "power reading failed; its interval adds no energy");
                    self.failing = true;
                }
                if let Some(c) = &self.metrics.errors {
                    c.inc();
                }
                self.last_power = None;
                (None, None)
            }
        }
    }

    fn read_system(&mut self, now: Instant) -> Option<Activity> {
        let secs = self
            .prev
            .at
            .replace(now)
            .map(|t| now.duration_since(t).as_secs_f64());
        let mut activity = Activity {
            seconds: secs.unwrap_or(0.0),
            ..Activity::default()
        };
        match procfs::cpu_times(&self.roots) {
            Ok(cpu) => {
                self.counters.cpu_busy = cpu.busy;
                self.counters.cpu_total = cpu.total;
                let tps = self.ticks_per_second;
                for (mode, v) in [("busy", cpu.busy), ("idle", cpu.total - cpu.busy)] {
                    self.total("cpu", mode, v, |m, d| {
                        m.cpu.with_label_values(&[mode]).inc_by(d as f64 / tps);
                    });
                }
                if let Some(p) = self.prev.cpu.replace(cpu) {
                    let total = cpu.total.saturating_sub(p.total);
                    if total > 0 {
                        activity.cpu_busy = cpu.busy.saturating_sub(p.busy) as f64 / total as f64;
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "host CPU counters"),
        }
        if let Some(device) = self.device.clone() {
            match procfs::disk_stats(&self.roots, &device) {
                Ok(d) => {
                    self.counters.disk_read = d.read_bytes;
                    self.counters.disk_written = d.written_bytes;
                    let values = [
                        d.read_bytes,
                        d.written_bytes,
                        d.io_ms,
                        d.read_ms,
                        d.write_ms,
                    ];
                    for (i, ((what, _, _, scale), v)) in DISK.iter().zip(values).enumerate() {
                        self.total(&device, what, v, |m, delta| {
                            m.disk[i]
                                .with_label_values(&[device.as_str()])
                                .inc_by(delta as f64 / scale);
                        });
                    }
                    for (op, v) in [("read", d.reads), ("write", d.writes)] {
                        self.total(&device, op, v, |m, delta| {
                            m.disk_ops
                                .with_label_values(&[device.as_str(), op])
                                .inc_by(delta as f64);
                        });
                    }
                    if let (Some(p), Some(s)) = (self.prev.disk.replace(d), secs)
                        && s > 0.0
                    {
                        activity.disk_busy = d.io_ms.saturating_sub(p.io_ms) as f64 / 1000.0 / s;
                    }
                }
                Err(e) => tracing::debug!(error = %e, "disk counters"),
            }
        }
        match procfs::net_stats(&self.roots) {
            Ok(ifaces) => {
                let mut external = 0u64;
                let (mut rx, mut tx) = (0u64, 0u64);
                for i in &ifaces {
                    for (k, v) in [i.rx_bytes, i.tx_bytes].into_iter().enumerate() {
                        self.total(&i.interface, NET[k].0, v, |m, delta| {
                            m.net[k]
                                .with_label_values(&[i.interface.as_str()])
                                .inc_by(delta as f64);
                        });
                    }
                    if i.interface != "lo" {
                        rx = rx.saturating_add(i.rx_bytes);
                        tx = tx.saturating_add(i.tx_bytes);
                        external = external
                            .saturating_add(i.rx_bytes)
                            .saturating_add(i.tx_bytes);
                    }
                }
                self.counters.net_rx = rx;
                self.counters.net_tx = tx;
                if let (Some(p), Some(s)) = (self.prev.net_bytes.replace(external), secs)
                    && s > 0.0
                {
                    activity.network_bytes_per_second = external.saturating_sub(p) as f64 / s;
                }
            }
            Err(e) => tracing::debug!(error = %e, "network counters"),
        }
        secs.filter(|s| *s > 0.0).map(|_| activity)
    }

    /// Exports a kernel total as a counter: adds what it grew by since the last tick (its
    /// whole value on the first). A total that went backwards (a device re-attached)
    /// restarts from the new value without adding.
    fn total(&mut self, series: &str, what: &str, value: u64, add: impl FnOnce(&Metrics, u64)) {
        let key = (series.to_owned(), what.to_owned());
        let before = self.prev.totals.insert(key, value);
        let delta = match before {
            None => value,
            Some(b) if value >= b => value - b,
            Some(_) => 0,
        };
        if delta > 0 {
            add(&self.metrics, delta);
        }
    }
}

/// Fits the model's parameters against the real source `config` detects: takes `samples`
/// readings `period` apart (the drive should be doing its usual mix of work meanwhile)
/// and returns a profile named `name`, starting from `base` for what did not vary.
/// `progress` is called after each reading with the count so far.
///
/// # Errors
/// [`crate::Error::Unavailable`] when the source found is the model itself (there is
/// nothing to calibrate against) or power metering is off; [`crate::Error::Profile`]
/// when too few readings succeeded.
pub fn calibrate(
    config: &MeterConfig,
    base: &crate::power::Profile,
    samples: usize,
    period: std::time::Duration,
    name: &str,
    mut progress: impl FnMut(usize),
) -> Result<crate::power::model::Fit> {
    let registry = Registry::new();
    let mut meter = Meter::new(config, &registry)?;
    if meter.method() != Some(Method::Measured) {
        return Err(crate::Error::Unavailable(format!(
            "calibration needs a measured power source; this drive has {} (set power_source, \
             power_hwmon or power_command)",
            meter.source_label()
        )));
    }
    let mut cal = crate::power::model::Calibration::default();
    meter.sample();
    for i in 0..samples {
        std::thread::sleep(period);
        if let (Some(a), Some(w)) = meter.sample() {
            cal.push(&a, w);
        }
        progress(i + 1);
    }
    cal.fit(base, name)
}
