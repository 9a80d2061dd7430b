//! Connections a drive client keeps for its next raw upload or framed read.

use std::time::{Duration, Instant};

/// Connections of raw uploads a drive client keeps for its next ones: at most
/// [`KEPT_MAX`], each for at most [`KEPT_IDLE`].
#[derive(Debug, Default)]
pub(super) struct KeptConnections {
    idle: std::sync::Mutex<Vec<(tokio::net::TcpStream, Instant)>>,
    /// Raw uploads and framed reads the drive answered on a kept connection.
    pub(super) reused: std::sync::atomic::AtomicU64,
}

/// The most connections kept per drive, as the pool keeps for other requests.
const KEPT_MAX: usize = 16;

/// How long a kept connection waits for its next upload: less than the shortest
/// `http_header_timeout_seconds` (16 s), after which the drive closes it.
const KEPT_IDLE: Duration = Duration::from_secs(15);

impl KeptConnections {
    /// The connection kept last, if one is kept and fresh.
    pub(super) fn take(&self) -> Option<tokio::net::TcpStream> {
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        idle.retain(|(_, since)| since.elapsed() < KEPT_IDLE);
        idle.pop().map(|(tcp, _)| tcp)
    }

    pub(super) fn reused(&self) -> u64 {
        self.reused.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn len(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    pub(super) fn put(&self, tcp: tokio::net::TcpStream) {
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if idle.len() < KEPT_MAX {
            idle.push((tcp, Instant::now()));
        }
    }
}
