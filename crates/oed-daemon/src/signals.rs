//! SIGTERM and SIGINT, watched from before a process says it is ready.

use anyhow::Context as _;

/// SIGTERM and SIGINT, the two ways a drive or `oedd dev` is asked to stop.
///
/// Made before the process says it is ready, and kept until it stops: tokio installs a
/// signal's handler when its first stream is made, and from then on a signal that no
/// stream is subscribed to is swallowed, not acted on. Made after the readiness line, as
/// before, a stop sent right after that line either ended the process by the default
/// action (no drain, `oedd dev`'s drives left running) or, arriving between the handler
/// and the stream, was lost and left a process that ignored every later SIGTERM.
pub struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Starts watching both signals; must run inside a tokio runtime with signals enabled.
    ///
    /// # Errors
    /// When either cannot be watched: the caller stops starting, since it could not be
    /// stopped.
    pub fn watch() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot watch SIGINT")?,
        })
    }

    /// Returns at the first SIGTERM or SIGINT delivered since [`StopSignals::watch`].
    pub async fn wait(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
