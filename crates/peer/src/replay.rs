//! Requests taken once: every peer request that may change something (any method but
//! GET) carries a signed nonce, `nonce=<ms>-<32 hex digits>` in its query
//! ([`crate::auth::nonce`]), and a drive takes each nonce once. It remembers the nonces
//! it took for as long as their requests' signatures are good (`clock_skew_seconds` past
//! their time, after which the date check refuses them anyway), in bounded memory: at most
//! `replay_cache_entries` (12 bytes each in a table kept at most half full: at most 26
//! bytes each, 13.6 MiB at the default 524,288). Full, it refuses new requests with 503
//! `SlowDown` rather than forget one early.
//!
//! A drive forgets the nonces when it stops, so it also refuses requests signed before
//! it started (the nonce's time, in milliseconds, against its start): a request captured
//! before a restart cannot be replayed after it. A sender whose clock is behind this
//! drive's by `d` sees its first requests refused for `d` after the start, and retries.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::PoisonError;

use oed_model::error::Error;

/// The nonces taken, with when each may be forgotten.
#[derive(Debug)]
pub struct ReplayGuard {
    /// When this drive started, ms since the epoch: requests signed before are refused.
    started_ms: u64,
    /// How long a nonce is remembered past its request's time, seconds.
    window: u64,
    /// The most nonces remembered.
    capacity: usize,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// A nonce's first 8 random bytes, and the second after which it may be forgotten
    /// (seconds since the epoch fit 32 bits until 2106).
    expiry: HashMap<u64, u32>,
    /// When the forgettable are next dropped, seconds since the epoch.
    next_sweep: u64,
    /// When they last were.
    swept: u64,
}

/// How often the nonces past their window are dropped, seconds.
const SWEEP_EVERY: u64 = 10;

impl ReplayGuard {
    /// A guard of a drive started at `started_ms` whose signatures are good for `window`
    /// seconds either side, remembering at most `capacity` nonces.
    #[must_use]
    pub fn new(started_ms: u64, window: u64, capacity: usize) -> Self {
        Self {
            started_ms,
            window,
            capacity: capacity.max(1),
            seen: Mutex::default(),
        }
    }

    /// Takes `nonce` at `now` (seconds since the epoch), or refuses it: not a nonce, signed
    /// before this drive started, further from `now` than the window, or taken before.
    ///
    /// # Errors
    /// [`Error::Unauthenticated`] for those; [`Error::SlowDown`] when the guard is full of
    /// nonces still in their window.
    pub fn take(&self, nonce: &str, now: u64) -> Result<(), Error> {
        let (ms, id) = crate::auth::parse_nonce(nonce)
            .ok_or(Error::Unauthenticated("nonce is not <ms>-<32 hex digits>"))?;
        if ms < self.started_ms {
            return Err(Error::Unauthenticated(
                "signed before this drive started (a request from before a restart is not \
                 taken again)",
            ));
        }
        let at = ms / 1000;
        if at.abs_diff(now) > self.window {
            return Err(Error::Unauthenticated(
                "the nonce's time is outside clock_skew_seconds",
            ));
        }
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        // Every SWEEP_EVERY seconds, and when full, at most once a second.
        let full = seen.expiry.len() >= self.capacity;
        if now >= seen.next_sweep || (full && now > seen.swept) {
            seen.expiry.retain(|_, until| u64::from(*until) >= now);
            seen.next_sweep = now + SWEEP_EVERY;
            seen.swept = now;
        }
        if seen.expiry.contains_key(&id) {
            return Err(Error::Unauthenticated(
                "replayed: a request with this nonce was taken before",
            ));
        }
        if seen.expiry.len() >= self.capacity {
            return Err(Error::SlowDown(format!(
                "this drive remembers {} requests taken in the last clock_skew_seconds \
                 (replay_cache_entries): try again shortly",
                self.capacity
            )));
        }
        let until = u32::try_from(at + self.window + 1).unwrap_or(u32::MAX);
        seen.expiry.insert(id, until);
        Ok(())
    }

    /// Nonces remembered now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .expiry
            .len()
    }

    /// Whether no nonce is remembered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nonce(ms: u64, id: u64) -> String {
        format!("{ms}-{id:016x}{:016x}", 7)
    }

    #[test]
    fn each_nonce_is_taken_once_while_it_is_remembered() {
        let g = ReplayGuard::new(1_000_000, 300, 100);
        let now = 1_000;
        g.take(&nonce(1_000_500, 1), now).unwrap();
        let again = g.take(&nonce(1_000_500, 1), now + 299).unwrap_err();
        assert!(again.to_string().contains("replayed"), "{again}");
        g.take(&nonce(1_000_500, 2), now).unwrap();
        assert_eq!(g.len(), 2);
        // Forgotten once past its window (its date is refused from then on anyway).
        g.take(&nonce(1_310_000, 3), now + 310).unwrap();
        assert_eq!(g.len(), 1);
    }

    #[test]
    fn refused_before_the_start_outside_the_window_and_malformed() {
        let g = ReplayGuard::new(1_000_000, 300, 100);
        for (n, now, why) in [
            (nonce(999_999, 1), 1_000, "before this drive started"),
            (nonce(1_400_000, 1), 1_000, "outside"),
            ("12-34".to_owned(), 1_000, "not <ms>"),
            (
                format!("{}-{}", 1_000_500, "g".repeat(32)),
                1_000,
                "not <ms>",
            ),
            ("-".repeat(40), 1_000, "not <ms>"),
        ] {
            let e = g.take(&n, now).unwrap_err();
            assert!(e.to_string().contains(why), "{n}: {e}");
        }
        assert!(g.is_empty());
    }

    #[test]
    fn full_of_nonces_in_their_window_it_refuses_new_ones_until_they_pass() {
        let g = ReplayGuard::new(0, 300, 3);
        for id in 0..3 {
            g.take(&nonce(1_000_000, id), 1_000).unwrap();
        }
        let e = g.take(&nonce(1_000_000, 9), 1_000).unwrap_err();
        assert!(matches!(e, Error::SlowDown(_)), "{e}");
        // None is forgotten early: the three are still refused as replays.
        let e = g.take(&nonce(1_000_000, 1), 1_100).unwrap_err();
        assert!(e.to_string().contains("replayed"), "{e}");
        g.take(&nonce(1_302_000, 9), 1_302).unwrap();
    }
}
