//! A rate limit in bytes per second, for background work that must leave the disk and
//! the CPU to requests: heal and scrub take their bytes from one.

// Rates are f64; byte counts convert with more than enough precision.
#![allow(clippy::cast_precision_loss)]

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A rate limit in bytes per second, shared by the tasks that take from it: each take
/// reserves its bytes on a timeline advancing at the rate and waits for its turn. Up to
/// one second of unused rate may be spent at once.
#[derive(Debug)]
pub struct Limiter {
    rate: u64,
    next: Mutex<Instant>,
}

impl Limiter {
    /// A limit of `rate` bytes per second; 0 is no limit.
    #[must_use]
    pub fn new(rate: u64) -> Self {
        Self {
            rate,
            next: Mutex::new(Instant::now()),
        }
    }

    /// Reserves `n` bytes at `share` of the rate at time `now`; returns how long to wait
    /// before using them.
    fn reserve(&self, n: u64, share: f64, now: Instant) -> Duration {
        if self.rate == 0 {
            return Duration::ZERO;
        }
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        let start = (*next).max(now.checked_sub(Duration::from_secs(1)).unwrap_or(now));
        let cost = Duration::from_secs_f64(n as f64 / (self.rate as f64 * share.max(0.01)));
        *next = start + cost;
        start.saturating_duration_since(now)
    }

    /// Waits until `n` more bytes fit in `share` of the rate.
    pub async fn take(&self, n: u64, share: f64) {
        let wait = self.reserve(n, share, Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// [`Limiter::take`] for a blocking thread.
    pub fn take_blocking(&self, n: u64) {
        let wait = self.reserve(n, 1.0, Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes reserve consecutive stretches of the timeline at the rate (slower at a share
    /// of it), after at most a second of rate left unused; no rate is no wait.
    #[test]
    fn the_limiter_spaces_takes_at_its_rate() {
        let l = Limiter::new(1 << 20);
        let t = *l.next.lock().unwrap();
        let secs = |d: Duration| (d.as_millis() + 1) / 1000;
        assert_eq!(secs(l.reserve(1 << 20, 1.0, t)), 0);
        assert_eq!(secs(l.reserve(1 << 20, 1.0, t)), 1);
        // At half the rate the next MiB takes two seconds of the timeline.
        assert_eq!(secs(l.reserve(1 << 20, 0.5, t)), 2);
        assert_eq!(secs(l.reserve(1, 1.0, t)), 4);
        // Long idle: at most one second of unused rate is spent at once.
        let later = t + Duration::from_secs(100);
        assert_eq!(secs(l.reserve(1 << 20, 1.0, later)), 0);
        assert_eq!(secs(l.reserve(1 << 20, 1.0, later)), 0);
        assert_eq!(secs(l.reserve(1 << 20, 1.0, later)), 1);
        assert_eq!(
            Limiter::new(0).reserve(u64::MAX, 1.0, later),
            Duration::ZERO
        );
    }
}
