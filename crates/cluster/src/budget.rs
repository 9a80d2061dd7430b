//! The coordinator's memory for object data in flight. Every GET and PUT a drive
//! coordinates holds a share of one fixed budget for as long as it moves data: about
//! what its stripes in flight take (see [`Budget::read_share`] and
//! [`Budget::write_share`]). Requests beyond the budget wait for a share, the client
//! holding least first; one that waits longer than the configured time is refused with
//! 503 `SlowDown` (and `Retry-After`), which S3 clients retry after a back-off.
//!
//! Without it a drive's memory grows with the number of clients, about 4 MiB for each
//! concurrent 4 MiB GET of a 4+2 profile, which a 1-2 GB drive cannot grant for long.
//! Bandwidth does not need it: a few requests moving data keep a drive as busy as
//! sixteen (`docs/results.md`, "Memory", "Under load").

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

use oed_model::error::{Error, Result};

/// Stripes a request keeps in flight: one being filled or drained, one queued.
const STRIPES_HELD: u64 = 2;

/// Why a request was refused with `SlowDown` (its value indexes [`Budget::refusals`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No share came free within the wait.
    MemoryWait,
    /// Its client already had `max_waiting_per_client` requests waiting.
    ClientWaiting,
}

impl Refusal {
    /// Every reason, in the order of [`Budget::refusals`].
    pub const ALL: [Refusal; 2] = [Refusal::MemoryWait, Refusal::ClientWaiting];

    /// The `reason` label of `oed_slowdown_total`.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Refusal::MemoryWait => "memory_wait",
            Refusal::ClientWaiting => "client_waiting",
        }
    }
}

/// A budget of bytes shared by the requests a drive coordinates, fairly between
/// clients: when shares come free, the waiting request of the client that holds least
/// goes first (among one client's requests, the earliest), so a client with many
/// requests in flight does not keep one with few waiting behind it. A client alone may
/// use the whole budget. A client may have at most `max_waiting` requests waiting; one
/// more is refused at once.
#[derive(Debug)]
pub struct Budget {
    state: Arc<Mutex<State>>,
    /// The whole budget, in KiB.
    kib: u32,
    wait: Duration,
    max_waiting: usize,
    /// Requests refused, by [`Refusal`] (in the order of [`Refusal::ALL`]).
    refused: [AtomicU64; 2],
}

/// Who holds and who waits.
#[derive(Debug)]
struct State {
    free: u32,
    held: HashMap<Option<IpAddr>, u32>,
    waiting: Vec<Waiter>,
    next_id: u64,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    client: Option<IpAddr>,
    kib: u32,
    granted: oneshot::Sender<()>,
}

impl State {
    fn held_by(&self, client: Option<IpAddr>) -> u32 {
        self.held.get(&client).copied().unwrap_or(0)
    }

    fn grant(&mut self, client: Option<IpAddr>, kib: u32) {
        self.free -= kib;
        *self.held.entry(client).or_insert(0) += kib;
    }

    fn give_back(&mut self, client: Option<IpAddr>, kib: u32) {
        self.free += kib;
        if let Some(h) = self.held.get_mut(&client) {
            *h = h.saturating_sub(kib);
            if *h == 0 {
                self.held.remove(&client);
            }
        }
    }

    /// Grants waiting requests while the next one fits: the next is the one whose client
    /// holds least, the earliest on a tie. A large request that does not fit yet is not
    /// passed by later ones, so it is not starved.
    fn dispatch(&mut self) {
        loop {
            let next = self
                .waiting
                .iter()
                .enumerate()
                .min_by_key(|(_, w)| (self.held_by(w.client), w.id))
                .map(|(i, w)| (i, w.kib));
            let Some((i, kib)) = next else { return };
            if kib > self.free {
                return;
            }
            let w = self.waiting.swap_remove(i);
            self.grant(w.client, kib);
            if w.granted.send(()).is_err() {
                // It stopped waiting (its request went away) just now.
                self.give_back(w.client, kib);
            }
        }
    }
}

/// A request's share of the [`Budget`], given back when dropped.
#[derive(Debug)]
#[must_use = "the share is given back when dropped"]
pub struct Share(#[allow(dead_code, reason = "held for its Drop")] Option<Held>);

#[derive(Debug)]
struct Held {
    state: Arc<Mutex<State>>,
    client: Option<IpAddr>,
    kib: u32,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut st = lock(&self.state);
        st.give_back(self.client, self.kib);
        st.dispatch();
    }
}

impl Share {
    /// No share: for work paced by a share held elsewhere.
    pub(crate) fn none() -> Self {
        Share(None)
    }

    /// The bytes the share holds.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.0.as_ref().map_or(0, |h| u64::from(h.kib) * 1024)
    }

    /// Keeps `bytes` of the share (never more than it holds) and gives the rest back at
    /// once, to the requests waiting for it.
    pub fn shrink_to(&mut self, bytes: u64) {
        let Some(held) = self.0.as_mut() else { return };
        let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        if kib == 0 {
            self.0 = None;
            return;
        }
        if kib >= held.kib {
            return;
        }
        let mut st = lock(&held.state);
        st.give_back(held.client, held.kib - kib);
        held.kib = kib;
        st.dispatch();
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Budget {
    /// A budget of `bytes` (at least 1 KiB); a request waits at most `wait` for its
    /// share, and a client may have at most `max_waiting` requests waiting.
    #[must_use]
    pub fn new(bytes: u64, wait: Duration, max_waiting: usize) -> Self {
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .max(1);
        Self {
            state: Arc::new(Mutex::new(State {
                free: kib,
                held: HashMap::new(),
                waiting: Vec::new(),
                next_id: 0,
            })),
            kib,
            wait,
            max_waiting: max_waiting.max(1),
            refused: [AtomicU64::new(0), AtomicU64::new(0)],
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
        u64::from(self.kib - lock(&self.state).free.min(self.kib)) * 1024
    }

    /// Requests refused so far, for each [`Refusal`] of [`Refusal::ALL`].
    #[must_use]
    pub fn refusals(&self) -> [u64; 2] {
        Refusal::ALL.map(|r| self.refused[r as usize].load(Ordering::Relaxed))
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

    fn refuse(&self, why: Refusal, message: String) -> Error {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
        Error::SlowDown(message)
    }

    /// Waits for `bytes` of the budget (at most all of it, so that any request can run
    /// when it is alone), for the client of the request on this task ([`oed_peer::CLIENT`]).
    /// Nothing is taken for 0 bytes.
    ///
    /// # Errors
    /// [`Error::SlowDown`] when the share does not come free within the wait, or when
    /// the client already has `max_waiting` requests waiting.
    pub async fn take(&self, bytes: u64) -> Result<Share> {
        self.take_for(oed_peer::request_client(), bytes).await
    }

    /// [`Budget::take`] for `client`.
    ///
    /// # Errors
    /// As [`Budget::take`].
    pub async fn take_for(&self, client: Option<IpAddr>, bytes: u64) -> Result<Share> {
        if bytes == 0 {
            return Ok(Share(None));
        }
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(self.kib);
        let held = |state: &Arc<Mutex<State>>| {
            Share(Some(Held {
                state: state.clone(),
                client,
                kib,
            }))
        };
        let (id, granted) = {
            let mut st = lock(&self.state);
            if st.waiting.is_empty() && kib <= st.free {
                st.grant(client, kib);
                return Ok(held(&self.state));
            }
            if st.waiting.iter().filter(|w| w.client == client).count() >= self.max_waiting {
                drop(st);
                return Err(self.refuse(
                    Refusal::ClientWaiting,
                    format!(
                        "this client already has {} requests waiting for the drive's memory \
                         for data in flight; retry later",
                        self.max_waiting
                    ),
                ));
            }
            let (tx, rx) = oneshot::channel();
            let id = st.next_id;
            st.next_id += 1;
            st.waiting.push(Waiter {
                id,
                client,
                kib,
                granted: tx,
            });
            st.dispatch();
            (id, rx)
        };
        let mut waiter = Waiting {
            state: &self.state,
            id,
            client,
            kib,
            granted,
            done: false,
        };
        match tokio::time::timeout(self.wait, &mut waiter.granted).await {
            Ok(Ok(())) => {
                waiter.done = true;
                Ok(held(&self.state))
            }
            // The sender went without a grant: only when the budget is dropped.
            Ok(Err(_)) => Err(Error::ShuttingDown),
            Err(_) => {
                let mut st = lock(&self.state);
                waiter.done = true;
                if let Some(i) = st.waiting.iter().position(|w| w.id == id) {
                    st.waiting.swap_remove(i);
                    st.dispatch();
                    drop(st);
                    return Err(self.refuse(
                        Refusal::MemoryWait,
                        format!(
                            "the drive's {} MiB for data in flight stayed taken for {} s; retry later",
                            self.limit_bytes() >> 20,
                            self.wait.as_secs()
                        ),
                    ));
                }
                // Granted as the wait ran out (under the lock, to a receiver still
                // here): take it.
                Ok(held(&self.state))
            }
        }
    }
}

/// A request waiting in the budget's queue. Dropped before it was granted or refused
/// (the request went away), it leaves the queue, or gives back a share granted to it
/// meanwhile.
struct Waiting<'a> {
    state: &'a Arc<Mutex<State>>,
    id: u64,
    client: Option<IpAddr>,
    kib: u32,
    granted: oneshot::Receiver<()>,
    done: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut st = lock(self.state);
        if let Some(i) = st.waiting.iter().position(|w| w.id == self.id) {
            st.waiting.swap_remove(i);
        } else if self.granted.try_recv().is_ok() {
            // Granted (under the lock, so the receiver still here got it) but not taken.
            st.give_back(self.client, self.kib);
        }
        st.dispatch();
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
        let b = Budget::new(4 << 20, Duration::from_millis(50), 64);
        let first = b.take(3 << 20).await.unwrap();
        assert_eq!(b.held_bytes(), 3 << 20);
        // More than is free: refused after the wait, and counted.
        let e = b.take(2 << 20).await.unwrap_err();
        assert!(matches!(e, Error::SlowDown(_)), "{e}");
        assert_eq!(b.refusals(), [1, 0]);
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
    async fn a_share_shrunk_gives_the_rest_to_a_waiting_request() {
        let b = Arc::new(Budget::new(4 << 20, Duration::from_secs(10), 64));
        let mut provisional = b.take(3 << 20).await.unwrap();
        let waiting = {
            let b = b.clone();
            tokio::spawn(async move { b.take(2 << 20).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "1 MiB free is not enough");
        // The read needs 64 KiB of its 3 MiB: the rest goes to the waiting request.
        provisional.shrink_to(64 << 10);
        assert_eq!(provisional.bytes(), 64 << 10);
        let second = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("granted when the share shrank")
            .unwrap()
            .unwrap();
        assert_eq!(b.held_bytes(), (64 << 10) + (2 << 20));
        // A share never grows, and shrinking to nothing gives it all back.
        provisional.shrink_to(1 << 20);
        assert_eq!(provisional.bytes(), 64 << 10);
        provisional.shrink_to(0);
        assert_eq!(provisional.bytes(), 0);
        assert_eq!(b.held_bytes(), 2 << 20);
        drop(provisional);
        drop(second);
        assert_eq!(b.held_bytes(), 0);
    }

    #[tokio::test]
    async fn a_waiting_request_gets_its_share_when_one_is_given_back() {
        let b = Arc::new(Budget::new(1 << 20, Duration::from_secs(10), 64));
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

    #[allow(
        clippy::unnecessary_wraps,
        reason = "clients are named as the budget names them"
    )]
    fn ip(n: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, n]))
    }

    /// Spawns a request of `client` for `bytes`; its result says whether it was served.
    fn waiter(
        b: &Arc<Budget>,
        client: Option<IpAddr>,
        bytes: u64,
    ) -> tokio::task::JoinHandle<Result<Share>> {
        let b = b.clone();
        tokio::spawn(async move { b.take_for(client, bytes).await })
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_freed_share_goes_to_the_waiting_client_that_holds_least() {
        let b = Arc::new(Budget::new(4 << 20, Duration::from_secs(30), 64));
        let mut a_held = Vec::new();
        for _ in 0..4 {
            a_held.push(b.take_for(ip(1), 1 << 20).await.unwrap());
        }
        // A queues three more, then B one: B's comes first when a share is freed.
        let a_waiting: Vec<_> = (0..3).map(|_| waiter(&b, ip(1), 1 << 20)).collect();
        settle().await;
        let b_waiting = waiter(&b, ip(2), 1 << 20);
        settle().await;
        a_held.pop();
        settle().await;
        assert!(b_waiting.is_finished(), "B still waits behind A's queue");
        let b_share = b_waiting.await.unwrap().unwrap();
        assert!(a_waiting.iter().all(|w| !w.is_finished()));
        // A's next request is served when the next share comes free, in A's own order.
        drop(b_share);
        settle().await;
        assert!(a_waiting[0].is_finished());
        assert!(!a_waiting[1].is_finished() && !a_waiting[2].is_finished());
        drop(a_held);
        for w in a_waiting {
            drop(w.await.unwrap().unwrap());
        }
        assert_eq!(b.held_bytes(), 0);
    }

    #[tokio::test]
    async fn a_client_with_too_many_requests_waiting_is_refused_at_once() {
        let b = Arc::new(Budget::new(1 << 20, Duration::from_secs(30), 2));
        let held = b.take_for(ip(1), 1 << 20).await.unwrap();
        let waiting = [waiter(&b, ip(1), 1 << 20), waiter(&b, ip(1), 1 << 20)];
        settle().await;
        let e = b.take_for(ip(1), 1 << 20).await.unwrap_err();
        assert!(matches!(e, Error::SlowDown(_)), "{e}");
        assert!(e.to_string().contains("requests waiting"), "{e}");
        assert_eq!(b.refusals(), [0, 1]);
        // Another client still queues.
        let other = waiter(&b, ip(2), 1 << 20);
        settle().await;
        assert!(!other.is_finished());
        // With nothing held, they go in arrival order.
        drop(held);
        for w in waiting.into_iter().chain([other]) {
            drop(w.await.unwrap().unwrap());
        }
        assert_eq!(b.held_bytes(), 0);
    }

    #[tokio::test]
    async fn a_request_that_goes_away_while_waiting_leaves_the_queue() {
        let b = Arc::new(Budget::new(1 << 20, Duration::from_secs(30), 64));
        let held = b.take_for(ip(1), 1 << 20).await.unwrap();
        let gone = waiter(&b, ip(2), 1 << 20);
        let next = waiter(&b, ip(3), 1 << 20);
        settle().await;
        gone.abort();
        settle().await;
        drop(held);
        settle().await;
        assert!(next.is_finished());
        drop(next.await.unwrap().unwrap());
        assert_eq!(b.held_bytes(), 0);
        assert!(lock(&b.state).waiting.is_empty());
    }
}
