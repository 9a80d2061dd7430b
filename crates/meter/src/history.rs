//! The last hour of a drive, in memory: one [`Point`] per [`SLOT_SECONDS`] (CPU, disk,
//! network, power, requests and S3 bytes, each a rate over its slot), the newest
//! [`SLOTS`] kept, and the rates over the sampler's last tick for "now". The meter's
//! sampler feeds it ([`crate::Meter::keep_history`]); the console reads it, so a drive
//! shows its recent past without Prometheus. The ring is allocated whole when it is made
//! ([`SLOTS`] points of ten figures each) and never grows.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::traffic::{Totals, Traffic};

/// Seconds one point covers.
pub const SLOT_SECONDS: u64 = 10;

/// Points kept: one hour.
pub const SLOTS: usize = 360;

const DAY_MS: u64 = 86_400_000;

/// A drive's rates over one slot (or one tick), ending at `t_ms`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// When the interval ended, ms since the epoch.
    pub t_ms: u64,
    /// The host's CPU busy, 0 to 1 over all cores.
    pub cpu_busy: f64,
    /// Bytes read from the data directory's block device, per second.
    pub disk_read_bytes_per_second: f64,
    /// Bytes written to it, per second.
    pub disk_written_bytes_per_second: f64,
    /// Bytes received on the network interfaces but loopback, per second.
    pub net_rx_bytes_per_second: f64,
    /// Bytes sent on them, per second.
    pub net_tx_bytes_per_second: f64,
    /// Average power, watts (`None`: power metering is off or failed all the interval).
    pub watts: Option<f64>,
    /// Requests answered (S3 and peer), per second.
    pub requests_per_second: f64,
    /// S3 body bytes received from clients (PUTs), per second.
    pub s3_in_bytes_per_second: f64,
    /// S3 body bytes sent to clients (GETs), per second.
    pub s3_out_bytes_per_second: f64,
}

/// The kernel's totals at one tick, as the sampler read them (0 where it could not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// CPU ticks busy, all cores.
    pub cpu_busy: u64,
    /// CPU ticks in all, all cores.
    pub cpu_total: u64,
    /// Bytes read from the block device.
    pub disk_read: u64,
    /// Bytes written to it.
    pub disk_written: u64,
    /// Bytes received on the interfaces but loopback.
    pub net_rx: u64,
    /// Bytes sent on them.
    pub net_tx: u64,
}

/// Totals at one moment: the kernel's and the daemon's.
#[derive(Clone, Copy, Debug)]
struct Mark {
    at: Instant,
    kernel: Counters,
    traffic: Totals,
}

#[derive(Debug, Default)]
struct Ring {
    points: VecDeque<Point>,
    now: Option<Point>,
    last: Option<Mark>,
    /// The start of the slot being filled, and its power so far: watt-seconds over the
    /// seconds that had a reading.
    slot: Option<(Mark, f64, f64)>,
    /// The UTC day of the last tick, and the joules counted when it began (0: the
    /// daemon started during that UTC day).
    day: Option<(u64, f64)>,
    joules: Option<f64>,
    temperature_c: Option<f64>,
}

/// The ring of points. Shared between the sampler (which writes once a tick) and
/// readers.
#[derive(Debug)]
pub struct History {
    ring: Mutex<Ring>,
    traffic: Option<Traffic>,
}

impl History {
    /// An empty history; requests and S3 bytes are read from `traffic` at each tick
    /// (0 without it).
    #[must_use]
    pub fn new(traffic: Option<Traffic>) -> Self {
        Self {
            ring: Mutex::new(Ring {
                points: VecDeque::with_capacity(SLOTS),
                ..Ring::default()
            }),
            traffic,
        }
    }

    /// One tick of the sampler at `at` (`wall_ms` since the epoch): the kernel's totals,
    /// the power read (if any) and the joules counted so far (if power is metered).
    pub fn tick(
        &self,
        at: Instant,
        wall_ms: u64,
        kernel: Counters,
        watts: Option<f64>,
        joules: Option<f64>,
    ) {
        let mark = Mark {
            at,
            kernel,
            traffic: self
                .traffic
                .as_ref()
                .map(Traffic::totals)
                .unwrap_or_default(),
        };
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(j) = joules {
            let day = wall_ms / DAY_MS;
            match ring.day {
                Some((d, _)) if d == day => {}
                Some(_) => ring.day = Some((day, j)),
                None => ring.day = Some((day, 0.0)),
            }
        }
        ring.joules = joules;
        if let Some(last) = ring.last.replace(mark) {
            ring.now = Some(rates(&last, &mark, wall_ms, watts));
            let secs = mark.at.duration_since(last.at).as_secs_f64();
            if let (Some((_, ws, s)), Some(w)) = (ring.slot.as_mut(), watts) {
                *ws += w * secs;
                *s += secs;
            }
        }
        let Some((start, ws, s)) = ring.slot else {
            ring.slot = Some((mark, 0.0, 0.0));
            return;
        };
        if mark.at.duration_since(start.at).as_secs() >= SLOT_SECONDS {
            let avg = (s > 0.0).then(|| ws / s);
            let point = rates(&start, &mark, wall_ms, avg);
            if ring.points.len() == SLOTS {
                ring.points.pop_front();
            }
            ring.points.push_back(point);
            ring.slot = Some((mark, 0.0, 0.0));
        }
    }

    /// The data disk's temperature as last read (`None`: no sensor, or it failed).
    pub fn set_temperature(&self, celsius: Option<f64>) {
        self.ring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .temperature_c = celsius;
    }

    /// The data disk's temperature, degrees Celsius, as last read.
    #[must_use]
    pub fn temperature(&self) -> Option<f64> {
        self.ring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .temperature_c
    }

    /// The points kept, oldest first.
    #[must_use]
    pub fn points(&self) -> Vec<Point> {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.points.iter().copied().collect()
    }

    /// The rates over the last tick, once there were two.
    #[must_use]
    pub fn now(&self) -> Option<Point> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner).now
    }

    /// Joules counted since the UTC day began (since the daemon started, when it started
    /// during the current UTC day); `None` when power is not metered.
    #[must_use]
    pub fn joules_today(&self) -> Option<f64> {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let (_, start) = ring.day?;
        ring.joules.map(|j| (j - start).max(0.0))
    }
}

/// The rates from `a` to `b`; a total that went backwards counts 0.
fn rates(a: &Mark, b: &Mark, t_ms: u64, watts: Option<f64>) -> Point {
    let secs = b.at.duration_since(a.at).as_secs_f64();
    let per_s = |x: u64, y: u64| {
        if secs > 0.0 {
            y.saturating_sub(x) as f64 / secs
        } else {
            0.0
        }
    };
    let (k, l) = (&a.kernel, &b.kernel);
    let total = l.cpu_total.saturating_sub(k.cpu_total);
    Point {
        t_ms,
        cpu_busy: if total > 0 {
            l.cpu_busy.saturating_sub(k.cpu_busy) as f64 / total as f64
        } else {
            0.0
        },
        disk_read_bytes_per_second: per_s(k.disk_read, l.disk_read),
        disk_written_bytes_per_second: per_s(k.disk_written, l.disk_written),
        net_rx_bytes_per_second: per_s(k.net_rx, l.net_rx),
        net_tx_bytes_per_second: per_s(k.net_tx, l.net_tx),
        watts,
        requests_per_second: per_s(a.traffic.requests, b.traffic.requests),
        s3_in_bytes_per_second: per_s(a.traffic.client_in, b.traffic.client_in),
        s3_out_bytes_per_second: per_s(a.traffic.client_out, b.traffic.client_out),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn counters(i: u64) -> Counters {
        Counters {
            cpu_busy: i * 10,
            cpu_total: i * 100,
            disk_read: i * 1000,
            disk_written: i * 2000,
            net_rx: i * 300,
            net_tx: i * 400,
        }
    }

    #[test]
    fn a_slot_is_the_rate_over_its_seconds_and_the_ring_keeps_an_hour() {
        let h = History::new(None);
        let t0 = Instant::now();
        let day0 = 20_000 * DAY_MS;
        for i in 0..=(SLOTS as u64 + 5) * SLOT_SECONDS {
            let at = t0 + Duration::from_secs(i);
            h.tick(
                at,
                day0 + i * 1000,
                counters(i),
                Some(2.0),
                Some(i as f64 * 2.0),
            );
        }
        let points = h.points();
        assert_eq!(points.len(), SLOTS);
        let p = points[SLOTS - 1];
        assert!((p.cpu_busy - 0.1).abs() < 1e-9);
        assert!((p.disk_read_bytes_per_second - 1000.0).abs() < 1e-9);
        assert!((p.disk_written_bytes_per_second - 2000.0).abs() < 1e-9);
        assert!((p.net_tx_bytes_per_second - 400.0).abs() < 1e-9);
        assert_eq!(p.watts, Some(2.0));
        assert!(points.windows(2).all(|w| w[0].t_ms < w[1].t_ms));
        let now = h.now().expect("rates after two ticks");
        assert!((now.net_rx_bytes_per_second - 300.0).abs() < 1e-9);
    }

    #[test]
    fn energy_today_restarts_at_midnight_utc() {
        let h = History::new(None);
        let t0 = Instant::now();
        let before = 20_000 * DAY_MS - 2000;
        h.tick(t0, before, counters(1), Some(1.0), Some(100.0));
        assert_eq!(h.joules_today(), Some(100.0));
        let t1 = t0 + Duration::from_secs(3);
        h.tick(t1, before + 3000, counters(2), Some(1.0), Some(103.0));
        h.tick(
            t1 + Duration::from_secs(1),
            before + 4000,
            counters(3),
            Some(1.0),
            Some(104.0),
        );
        assert_eq!(h.joules_today(), Some(1.0));
        assert_eq!(History::new(None).joules_today(), None);
    }

    #[test]
    fn a_counter_that_goes_back_counts_nothing() {
        let h = History::new(None);
        let t0 = Instant::now();
        h.tick(t0, 0, counters(5), None, None);
        h.tick(t0 + Duration::from_secs(1), 1000, counters(1), None, None);
        let now = h.now().expect("two ticks");
        assert!(now.disk_read_bytes_per_second.abs() < f64::EPSILON);
        assert_eq!(now.watts, None);
    }
}
