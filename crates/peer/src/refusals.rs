//! Refused peer requests in the drive's log: a stranger on the drives' network can send
//! thousands a second, and a line for each would fill the disk and hide the rest of the
//! log. At most one line per [`EVERY`] is written, with the sender's address and how many
//! refusals went unwritten since the line before; `oed_peer_auth_failures_total` counts
//! every one.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The shortest time between two lines about refused requests.
pub const EVERY: Duration = Duration::from_secs(10);

/// When the last line was written, and the refusals since that went unwritten.
#[derive(Debug, Default)]
pub struct RefusalLog(Mutex<Since>);

#[derive(Debug, Default)]
struct Since {
    logged_at: Option<Instant>,
    unwritten: u64,
}

impl RefusalLog {
    /// Whether a refusal at `now` gets a line: `Some(n)` with the `n` refusals left
    /// unwritten since the last line, or `None` (counted among those).
    pub fn line(&self, now: Instant) -> Option<u64> {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match s.logged_at {
            Some(t) if now.saturating_duration_since(t) < EVERY => {
                s.unwritten += 1;
                None
            }
            _ => {
                s.logged_at = Some(now);
                Some(std::mem::take(&mut s.unwritten))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_window_with_the_count_left_out() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        assert_eq!(log.line(t0), Some(0));
        for i in 1..=1999 {
            assert_eq!(log.line(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(log.line(t0 + EVERY), Some(1999));
        assert_eq!(log.line(t0 + EVERY + Duration::from_secs(1)), None);
        assert_eq!(log.line(t0 + EVERY * 3), Some(1));
    }
}
