//! The slowest body a drive takes from a client ([`RateFloor`]).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use tokio::time::{Instant, Sleep};

use oed_model::error::Error;

/// A client's request body that must keep up a rate: over every `window` of time spent
/// waiting for it, it must deliver at least `window x min_rate` bytes, or it ends with
/// [`Error::TooSlow`] (S3's `RequestTimeout`). Only time spent waiting for the client
/// counts: while the coordinator waits for drives or memory, the clock stands still. A
/// client that sends a byte a second holds a connection and a share of the coordinator's
/// memory for one window, not for as long as it likes.
pub struct RateFloor<S> {
    inner: S,
    window: Duration,
    min_bytes: u64,
    /// Bytes received in the current window.
    got: u64,
    /// Time spent waiting for the client in the current window, before `since`.
    waited: Duration,
    /// When the current wait began, if the client is being waited for.
    since: Option<Instant>,
    timer: Pin<Box<Sleep>>,
}

impl<S> RateFloor<S> {
    /// `inner`, held to `min_rate` bytes per second over windows of `window`.
    pub fn new(inner: S, window: Duration, min_rate: u64) -> Self {
        Self {
            inner,
            window,
            min_bytes: min_rate.saturating_mul(window.as_secs().max(1)),
            got: 0,
            waited: Duration::ZERO,
            since: None,
            timer: Box::pin(tokio::time::sleep(window)),
        }
    }

    /// Ends a window that has been waited out: an error if too little came in it.
    fn close_window(&mut self, now: Instant) -> Result<(), Error> {
        if self.got < self.min_bytes {
            return Err(Error::TooSlow(format!(
                "Your socket connection to the server was not read from or written to within \
                 the timeout period: {} bytes of the body in {} s of waiting for it, at least \
                 {} needed",
                self.got,
                self.window.as_secs(),
                self.min_bytes
            )));
        }
        self.got = 0;
        self.waited = Duration::ZERO;
        self.since = self.since.map(|_| now);
        Ok(())
    }
}

impl<S> Stream for RateFloor<S>
where
    S: Stream<Item = Result<Bytes, Error>> + Unpin,
{
    type Item = Result<Bytes, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let now = Instant::now();
        match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(item) => {
                if let Some(t) = this.since.take() {
                    this.waited += now - t;
                }
                if let Some(Ok(b)) = &item {
                    this.got += b.len() as u64;
                }
                if item.as_ref().is_some_and(Result::is_ok) && this.waited >= this.window {
                    this.close_window(now)?;
                }
                Poll::Ready(item)
            }
            Poll::Pending => {
                let since = *this.since.get_or_insert(now);
                let left = this.window.saturating_sub(this.waited + (now - since));
                this.timer.as_mut().reset(now + left);
                if this.timer.as_mut().poll(cx).is_ready() {
                    this.waited = this.window;
                    this.since = None;
                    if let Err(e) = this.close_window(now) {
                        return Poll::Ready(Some(Err(e)));
                    }
                    this.since = Some(now);
                    this.timer.as_mut().reset(now + this.window);
                    let _ = this.timer.as_mut().poll(cx);
                }
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;

    /// A trickle is cut after one window of waiting; a fast body is not, and the time the
    /// consumer does not poll does not count. (Windows of 1 s, in real time.)
    #[tokio::test]
    async fn a_trickle_is_cut_after_one_window_and_a_fast_body_is_not() {
        let trickle = futures_util::stream::unfold(0u32, |n| async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Some((Ok(Bytes::from_static(b"x")), n + 1))
        });
        let mut body = RateFloor::new(Box::pin(trickle), Duration::from_secs(1), 1024);
        let mut got = 0;
        let err = loop {
            match body.next().await {
                Some(Ok(_)) => got += 1,
                Some(Err(e)) => break e,
                None => panic!("the trickle ended"),
            }
        };
        assert!(matches!(err, Error::TooSlow(_)), "{err}");
        // About 20 (a byte per 50 ms for 1 s), fewer on a loaded machine.
        assert!((1..=40).contains(&got), "{got} bytes before the cut");

        let fast = futures_util::stream::iter((0..3).map(|_| Ok(Bytes::from(vec![0u8; 64 << 10]))));
        let mut body = RateFloor::new(fast, Duration::from_secs(1), 1024);
        let mut n = 0;
        while let Some(piece) = body.next().await {
            piece.unwrap();
            n += 1;
            // The consumer is busy elsewhere for a while: not the client's doing.
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        assert_eq!(n, 3);
    }
}
