//! A connection whose client stops reading ([`WriteDeadline`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A connection on which a write that cannot go on for `limit` (the client has stopped
/// reading, its receive window is full) fails with `TimedOut`, and the server drops the
/// connection: a client that asks for an answer and never reads it holds the connection,
/// and the memory and drive reads behind the answer, for `limit` and no longer. A client
/// that reads slowly but keeps reading is not affected.
pub struct WriteDeadline<T> {
    inner: T,
    limit: Duration,
    /// Reset when a write starts to wait (one timer per connection, not one per wait).
    timer: Pin<Box<Sleep>>,
    /// Whether a write is waiting, and `timer` runs for it.
    waiting: bool,
}

impl<T> WriteDeadline<T> {
    /// `inner`, whose writes may wait at most `limit` each.
    pub fn new(inner: T, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            timer: Box::pin(tokio::time::sleep(limit)),
            waiting: false,
        }
    }

    /// The connection, without the deadline.
    pub fn into_inner(self) -> T {
        self.inner
    }

    /// What a write (or flush) of the inner connection came to: while it waits, the
    /// error once it has waited `limit`.
    fn watch<R>(&mut self, cx: &mut Context<'_>, done: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        if done.is_ready() {
            self.waiting = false;
            return done;
        }
        if !self.waiting {
            self.waiting = true;
            self.timer.as_mut().reset(Instant::now() + self.limit);
        }
        self.timer.as_mut().poll(cx).map(|()| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing of the answer for too long",
            ))
        })
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let done = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, done)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let done = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, done)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let done = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, done)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
