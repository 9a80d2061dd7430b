//! The coordinator's memory for object data in flight. Every GET and PUT a drive
//! coordinates holds a share of one fixed budget for as long as it moves data: about
//! what its stripes in flight take (see [`Budget::read_share`] and
//! [`Budget::write_share`]). Requests beyond the budget wait for a share in arrival
//! order; one that waits longer than the configured time is refused with 503
//! `SlowDown`, which S3 clients retry after a back-off.
//!
//! Without it a drive's memory grows with the number of clients, about 4 MiB for each
//! concurrent 4 MiB GET of a 4+2 profile, which a 1-2 GB drive cannot grant for long.
//! Bandwidth does not need it: on the machines measured, four requests moving data keep
//! a drive as busy as sixteen.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};

/// Stripes a request keeps in flight: one being filled or drained, one queued.
const STRIPES_HELD: u64 = 2;

/// A budget of bytes shared by the requests a drive coordinates.
#[derive(Debug)]
pub struct Budget {
    sem: Arc<Semaphore>,
    /// The whole budget, in KiB (the semaphore's unit).
    kib: u32,
    wait: Duration,
    /// Requests refused because no share came free in time.
    pub refused: AtomicU64,
}

/// A request's share of the [`Budget`], given back when dropped.
#[derive(Debug)]
#[must_use = "the share is given back when dropped"]
pub struct Share(#[allow(dead_code, reason = "held for its Drop")] Option<OwnedSemaphorePermit>);

impl Share {
    /// No share: for work paced by a share held elsewhere.
    pub(crate) fn none() -> Self {
        Share(None)
    }
}

impl Budget {
    /// A budget of `bytes` (at least 1 KiB); a request waits at most `wait` for its share.
    #[must_use]
    pub fn new(bytes: u64, wait: Duration) -> Self {
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .max(1);
        Self {
            sem: Arc::new(Semaphore::new(kib as usize)),
            kib,
            wait,
            refused: AtomicU64::new(0),
        }
    }

    /// The whole budget, in bytes.
    #[must_use]
    pub fn limit_bytes(&self) -> u64 {
        u64::from(self.kib) * 1024
    }

    /// Bytes held by requests now.
    #[must_use]
    pub fn held_bytes(&self) -> u64 {
        let free = self.sem.available_permits() as u64;
        (u64::from(self.kib) - free.min(u64::from(self.kib))) * 1024
    }

    /// The share of a read of `len` bytes of an object coded in stripes of `stripe_data`
    /// bytes (`k` chunks): the stripes it keeps in flight, no more than it reads.
    #[must_use]
    pub fn read_share(len: u64, stripe_data: u64) -> u64 {
        len.min(STRIPES_HELD * stripe_data)
    }

    /// The share of a write of `len` bytes in stripes of `k` data and `m` parity chunks
    /// of `stripe_data` bytes in all: the stripe being filled from the body, and the
    /// coded stripes (data and parity) on their way to the drives.
    #[must_use]
    pub fn write_share(len: u64, stripe_data: u64, k: usize, m: usize) -> u64 {
        let filling = len.min(stripe_data);
        let coded = len.min(STRIPES_HELD * stripe_data) * (k + m) as u64 / k.max(1) as u64;
        filling + coded
    }

    /// Waits for `bytes` of the budget (at most all of it, so that any request can run
    /// when it is alone). Nothing is taken for 0 bytes.
    ///
    /// # Errors
    /// [`Error::SlowDown`] when the share does not come free within the wait.
    pub async fn take(&self, bytes: u64) -> Result<Share> {
        if bytes == 0 {
            return Ok(Share(None));
        }
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(self.kib);
        let sem = self.sem.clone();
        match tokio::time::timeout(self.wait, sem.acquire_many_owned(kib)).await {
            Ok(Ok(permit)) => Ok(Share(Some(permit))),
            // The semaphore is never closed; a closed one would mean shutting down.
            Ok(Err(_)) => Err(Error::ShuttingDown),
            Err(_) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Err(Error::SlowDown(format!(
                    "the drive's {} MiB for data in flight stayed taken for {} s; retry later",
                    self.limit_bytes() >> 20,
                    self.wait.as_secs()
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_stripes_in_flight_and_no_more_than_the_object() {
        let stripe = 1 << 20; // 4 chunks of 256 KiB
        assert_eq!(Budget::read_share(4 << 20, stripe), 2 << 20);
        assert_eq!(Budget::read_share(1000, stripe), 1000);
        assert_eq!(
            Budget::write_share(4 << 20, stripe, 4, 2),
            (1 << 20) + (3 << 20)
        );
        assert_eq!(Budget::write_share(1000, stripe, 4, 2), 1000 + 1500);
        assert_eq!(Budget::write_share(0, stripe, 4, 2), 0);
    }

    #[tokio::test]
    async fn requests_wait_for_a_share_and_are_refused_after_the_wait() {
        let b = Budget::new(4 << 20, Duration::from_millis(50));
        let first = b.take(3 << 20).await.unwrap();
        assert_eq!(b.held_bytes(), 3 << 20);
        // More than is free: refused after the wait, and counted.
        let e = b.take(2 << 20).await.unwrap_err();
        assert!(matches!(e, Error::SlowDown(_)), "{e}");
        assert_eq!(b.refused.load(Ordering::Relaxed), 1);
        // Freed shares are taken by the next request.
        drop(first);
        let second = b.take(2 << 20).await.unwrap();
        assert_eq!(b.held_bytes(), 2 << 20);
        // More than the whole budget is clipped to it, so a lone large request runs.
        drop(second);
        let all = b.take(100 << 20).await.unwrap();
        assert_eq!(b.held_bytes(), b.limit_bytes());
        drop(all);
        assert_eq!(b.held_bytes(), 0);
        assert!(matches!(b.take(0).await.unwrap(), Share(None)));
    }

    #[tokio::test]
    async fn a_waiting_request_gets_its_share_when_one_is_given_back() {
        let b = Arc::new(Budget::new(1 << 20, Duration::from_secs(10)));
        let held = b.take(1 << 20).await.unwrap();
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move { b.take(512 << 10).await.map(|_| ()) })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(held);
        waiter.await.unwrap().unwrap();
    }
}
