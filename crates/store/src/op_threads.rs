//! The threads a drive folds its own chunks on for near-data operations
//! ([`crate::near_data`]): as many as `max_concurrent_ops`, at a lower CPU priority
//! than the rest of the daemon, never the runtime's or the blocking pool's, so S3
//! requests on the same drive keep their threads and win the CPU when both want it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::Duration;

use oed_model::error::{Error, Result};

/// How much the `nice` value of operation threads is raised: the scheduler gives them
/// the CPU after the daemon's other threads.
pub const OP_NICENESS: i32 = 10;

/// A unit of work for an operation thread.
type Work = Box<dyn FnOnce() + Send>;

/// The threads a drive runs near-data operations on, and their limits.
#[derive(Debug)]
pub struct OpLimits {
    queue: Mutex<mpsc::Sender<Work>>,
    /// CPU time one operation may take.
    pub(crate) cpu: Duration,
    /// Operations stopped because their caller went away.
    pub(crate) cancelled: std::sync::atomic::AtomicU64,
}

impl OpLimits {
    /// `concurrent` threads (named `oed-op`), each running one operation at a time with at
    /// most `cpu` of CPU time. A thread that cannot be started, or whose priority cannot
    /// be lowered, is logged: operations then have fewer threads, or the usual priority.
    #[must_use]
    pub fn new(concurrent: usize, cpu: Duration) -> Self {
        let (tx, rx) = mpsc::channel::<Work>();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..concurrent {
            let rx = rx.clone();
            let started = std::thread::Builder::new()
                .name("oed-op".into())
                .spawn(move || {
                    let tid = rustix::thread::gettid();
                    let now = rustix::process::getpriority_process(Some(tid)).unwrap_or(0);
                    if let Err(e) =
                        rustix::process::setpriority_process(Some(tid), now + OP_NICENESS)
                    {
                        tracing::warn!(error = %e, "operation threads keep the daemon's priority");
                    }
                    loop {
                        // Whoever holds the lock waits for work; the others for the lock.
                        let work = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        let Ok(work) = work else { return };
                        work();
                    }
                });
            if let Err(e) = started {
                tracing::warn!(error = %e, "an operation thread could not be started");
            }
        }
        Self {
            queue: Mutex::new(tx),
            cpu,
            cancelled: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Operations stopped so far because their caller went away (the coordinator, or
    /// the client behind it, gave up).
    #[must_use]
    pub fn cancelled(&self) -> u64 {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Runs `work` on an operation thread once one is free; its result.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = self
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(Box::new(move || {
                let _ = tx.send(work());
            }));
        if sent.is_err() {
            return Err(Error::ShuttingDown);
        }
        rx.await
            .map_err(|_| Error::Unavailable("no operation thread ran the operation".into()))
    }
}
