//! MD5 of the objects being written, for S3's `ETag` and `Content-MD5`, hashed in lanes
//! on one thread. The hashing itself is `oed_ops::md5`'s; this module feeds it.
//!
//! MD5 is one long chain of dependent additions and rotations: a single stream keeps a
//! CPU's execution units mostly idle, and hashed one stream per upload it is the largest
//! single cost of a PUT's coordinator (`docs/results.md`, "MD5"). The objects being
//! written at the same time are independent streams, though, and this module hashes as
//! many of them together as the CPU's widest MD5 kernel takes ([`Lanes::best`]: 16 in
//! AVX-512 registers, 8 in AVX2's, 4 in NEON's, 3 interleaved in scalar code elsewhere):
//! one thread (`oed-md5`) takes each stream's next piece and runs the compression
//! function over all of them at once (`docs/s3.md`, "MD5 in lanes", for what each kernel
//! gains). A stream alone is hashed as it would be anyway.
//!
//! A stream has one piece in flight at a time, so its bytes are hashed in order; the
//! caller awaits that piece's result only when it hands over the next one, so hashing
//! overlaps with the caller's own work on the same bytes. Until then the thread may hold
//! the piece for the other streams' pieces to join it; a stream that starts to wait for
//! its piece says so, and the thread then hashes what it holds at once, so holding never
//! makes an upload wait.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use oed_ops::md5::{Lanes, MAX_LANES, Md5};
use tokio::sync::oneshot;

/// Blocks (of 64 bytes) each lane hashes before the thread looks for new streams to
/// take in: 16 KiB, tens of microseconds in scalar lanes and less in SIMD lanes, so a
/// stream that arrives meanwhile soon joins.
const ROUND_BLOCKS: usize = 256;

/// How long the thread holds a piece at most for others to join it while more streams
/// are hashing than it has pieces of. A stream needs a piece's digest only when it hands
/// over its next piece (a whole stripe later: tens of milliseconds under load) or at its
/// end, and it says when it starts to wait ([`WAITING`]): the thread then stops holding
/// within [`WAIT_GRACE`], and after [`FRUITLESS_HOLDS`] holds that no piece joined. So
/// the hold costs an upload little time, and it can be as long as a stream takes to bring
/// its next stripe at a drive's rate; hashed together, the pieces cost a fraction of the
/// CPU time they cost alone (`docs/s3.md`, "MD5 in lanes").
const GATHER_WAIT: Duration = Duration::from_millis(50);

/// How long the thread goes on holding pieces once a stream waits for one: a stream
/// waits at its end (for its last piece, whose digest its answer needs) or when it brings
/// a stripe before the one before it was hashed. Longer fills more lanes at the cost of
/// as much latency on every PUT: 4 ms takes a sixth off the thread's CPU per byte with
/// no latency to be seen, 25 ms a quarter at about 5% more (`docs/results.md`, "MD5").
const WAIT_GRACE: Duration = Duration::from_millis(4);

/// Holds in a row that no other piece joined before the thread stops holding: the other
/// streams counted in [`HASHING`] are then not bringing pieces (a slow client's upload
/// beside a fast one), and a fast stream whose pieces were held would wait for each
/// stripe's digest instead of hashing beside its coding and sending. The thread holds
/// again once pieces of two streams meet.
const FRUITLESS_HOLDS: u32 = 2;

/// Streams that have handed a piece to the thread and have not ended: the company the
/// thread may wait for.
static HASHING: AtomicUsize = AtomicUsize::new(0);

/// Streams waiting for a piece the thread has not answered yet: while there is one, the
/// thread holds nothing back.
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Bytes the thread hashed, by how many streams the round that hashed them carried
/// (index: streams, 1 to [`MAX_LANES`]); `oed_md5_bytes_total{streams}`.
static HASHED: [AtomicU64; MAX_LANES + 1] = [const { AtomicU64::new(0) }; MAX_LANES + 1];

/// Bytes hashed on the `oed-md5` thread so far, by the number of streams hashed together
/// (index 0 is always 0; pieces under 16 KiB, hashed by their uploads, are not counted).
#[must_use]
pub fn hashed_bytes_by_streams() -> [u64; MAX_LANES + 1] {
    std::array::from_fn(|i| HASHED[i].load(Ordering::Relaxed))
}

/// What the hashing thread is sent.
enum Msg {
    /// A stream's next piece.
    Piece(Job),
    /// A stream started to wait for its piece ([`WAITING`] counts it): stop holding.
    Wake,
}

/// The next bytes of a stream, handed to the hashing thread: one or more buffers (a
/// stripe of a received body, as it came), hashed in order.
struct Job {
    state: Md5,
    data: Vec<Bytes>,
    done: oneshot::Sender<Md5>,
}

/// A job on the thread: `piece` is the buffer being hashed (counted into the state) and
/// `pos` where its next whole block starts; the bytes of a buffer short of a block are
/// kept in the state when the lane moves on to the next one.
struct Lane {
    job: Job,
    piece: usize,
    pos: usize,
    arrived: Instant,
}

impl Lane {
    fn start(mut job: Job) -> Self {
        let pos = job.data.first().map_or(0, |d| begin(&mut job.state, d));
        Self {
            job,
            piece: 0,
            pos,
            arrived: Instant::now(),
        }
    }

    /// The buffer being hashed (empty once all are).
    fn current(&self) -> &[u8] {
        self.job.data.get(self.piece).map_or(&[], |d| &d[..])
    }

    /// Whole blocks left in the buffer being hashed.
    fn blocks_left(&self) -> usize {
        (self.current().len() - self.pos) / 64
    }

    /// Moves on past buffers with no whole block left, keeping their last bytes in the
    /// state; false once every buffer is hashed.
    fn next_blocks(&mut self) -> bool {
        while self.blocks_left() == 0 {
            let Some(d) = self.job.data.get(self.piece) else {
                return false;
            };
            self.job.state.keep(&d[self.pos..]);
            self.piece += 1;
            let Some(d) = self.job.data.get(self.piece) else {
                return false;
            };
            self.pos = begin(&mut self.job.state, d);
        }
        true
    }

    /// Hands the state back (every buffer hashed or kept).
    fn finish(self) {
        // The stream may have been dropped (its request cancelled): nothing to do then.
        let _ = self.job.done.send(self.job.state);
    }
}

/// Counts buffer `d` into `state` ([`Md5::begin`]) and returns where its next whole block
/// starts. The block that the bytes kept from the buffer before complete is hashed there,
/// alone, and counted so in [`HASHED`]: a stripe's bytes are counted whatever buffers
/// they arrived in.
fn begin(state: &mut Md5, d: &[u8]) -> usize {
    // Between buffers every whole block is hashed: what the state holds is the rest.
    let kept = (state.len() % 64) as usize;
    let pos = state.begin(d);
    if kept > 0 && kept + pos == 64 {
        HASHED[1].fetch_add(64, Ordering::Relaxed);
    }
    pos
}

/// The sending side of the hashing thread, started on first use. `None` when the thread
/// could not be started: streams then hash on their own threads.
fn lanes() -> Option<&'static mpsc::Sender<Msg>> {
    static LANES: OnceLock<Option<mpsc::Sender<Msg>>> = OnceLock::new();
    LANES
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel();
            match std::thread::Builder::new()
                .name("oed-md5".into())
                .spawn(move || run(&rx))
            {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::warn!(error = %e, "no MD5 thread; hashing on the request threads");
                    None
                }
            }
        })
        .as_ref()
}

/// The kernel and hold time the hashing thread starts with, once set by [`configure`].
static SETTINGS: OnceLock<(Lanes, Duration)> = OnceLock::new();

/// Sets the hashing thread's kernel (`None`: the widest this CPU runs) and how long it
/// waits for more streams (`md5_kernel`, `md5_gather_ms`). Takes effect when the thread
/// starts, at the first hash; the first call wins.
pub fn configure(kernel: Option<Lanes>, gather_wait: Duration) {
    let _ = SETTINGS.set((kernel.unwrap_or_else(Lanes::best), gather_wait));
}

/// The hashing thread: takes in streams' pieces, up to the kernel's width at a time, and
/// hashes them together in rounds of at most [`ROUND_BLOCKS`] blocks, with the kernel
/// and hold time [`configure`] set (the widest kernel and [`GATHER_WAIT`] otherwise).
fn run(rx: &mpsc::Receiver<Msg>) {
    let (kernel, wait) = *SETTINGS.get_or_init(|| (Lanes::best(), GATHER_WAIT));
    let company = Company {
        hashing: &HASHING,
        waiting: &WAITING,
    };
    run_with(kernel, wait, &company, rx);
}

/// The counts the hashing thread holds pieces by: the streams hashing ([`HASHING`]) and
/// those waiting for a piece ([`WAITING`]); the tests give their own.
struct Company<'a> {
    hashing: &'a AtomicUsize,
    waiting: &'a AtomicUsize,
}

impl Company<'_> {
    /// Whether more streams are hashing than the thread holds pieces of (up to `width`):
    /// holding longer may fill more lanes.
    fn more_to_come(&self, held: usize, width: usize) -> bool {
        held < width.min(self.hashing.load(Ordering::Relaxed))
    }

    /// Whether a stream waits for a piece.
    fn waited_for(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0
    }
}

/// How many rounds ran with each number of lanes (index: lanes), for the tests.
type RoundsByLanes = [u64; MAX_LANES + 1];

/// [`run`] with its kernel, hold time and counts of streams given.
fn run_with(
    kernel: Lanes,
    gather_wait: Duration,
    company: &Company<'_>,
    rx: &mpsc::Receiver<Msg>,
) -> RoundsByLanes {
    tracing::debug!(
        kernel = kernel.name(),
        lanes = kernel.width(),
        gather_wait_ms = gather_wait.as_millis(),
        "MD5 thread"
    );
    let width = kernel.width();
    let mut active: Vec<Lane> = Vec::with_capacity(width);
    let mut rounds = [0; MAX_LANES + 1];
    // Since when the thread has known of a stream waiting (none: no stream waits).
    let mut waited: Option<Instant> = None;
    // Holds in a row that ended with no other piece joined.
    let mut fruitless = 0;
    loop {
        if active.is_empty() {
            match rx.recv() {
                Ok(Msg::Piece(job)) => active.push(Lane::start(job)),
                Ok(Msg::Wake) => continue,
                Err(_) => return rounds,
            }
        }
        while active.len() < width {
            match rx.try_recv() {
                Ok(Msg::Piece(job)) => active.push(Lane::start(job)),
                Ok(Msg::Wake) => {}
                Err(_) => break,
            }
        }
        if active.len() > 1 {
            fruitless = 0;
        }
        if !company.waited_for() {
            waited = None;
        } else if waited.is_none() {
            waited = Some(Instant::now());
        }
        // Other streams are on their way: hold the pieces here until they join, each for
        // at most `gather_wait` since it arrived, and at most `WAIT_GRACE` once a stream
        // waits; not after `FRUITLESS_HOLDS` holds that none joined.
        let (held, mut holding) = (active.len(), false);
        while fruitless < FRUITLESS_HOLDS && company.more_to_come(active.len(), width) {
            let Some(oldest) = active.iter().map(|l| l.arrived).min() else {
                break;
            };
            let until = waited.map_or(oldest + gather_wait, |w| {
                (w + WAIT_GRACE).min(oldest + gather_wait)
            });
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                break;
            };
            holding = true;
            match rx.recv_timeout(left) {
                Ok(Msg::Piece(job)) => active.push(Lane::start(job)),
                Ok(Msg::Wake) => {
                    waited.get_or_insert_with(Instant::now);
                }
                Err(_) => break,
            }
        }
        if holding && active.len() == held {
            fruitless += 1;
        }
        // Pieces with no whole block left are done.
        for done in active.extract_if(.., |lane| !lane.next_blocks()) {
            done.finish();
        }
        let Some(n) = active.iter().map(Lane::blocks_left).min() else {
            continue;
        };
        let n = n.min(ROUND_BLOCKS);
        rounds[active.len()] += 1;
        HASHED[active.len()].fetch_add((64 * n * active.len()) as u64, Ordering::Relaxed);
        round(kernel, &mut active, n);
    }
}

/// Hashes the next `n` blocks of every lane.
fn round(kernel: Lanes, lanes: &mut [Lane], n: usize) {
    let mut states = [[0u32; 4]; MAX_LANES];
    let mut data: [&[u8]; MAX_LANES] = [&[]; MAX_LANES];
    for (state, lane) in states.iter_mut().zip(lanes.iter_mut()) {
        *state = *lane.job.state.chain_mut();
    }
    let count = lanes.len();
    for (d, lane) in data.iter_mut().zip(lanes.iter()) {
        *d = &lane.current()[lane.pos..lane.pos + 64 * n];
    }
    kernel.compress(&mut states[..count], &data[..count]);
    for (lane, h) in lanes.iter_mut().zip(states) {
        *lane.job.state.chain_mut() = h;
        lane.pos += 64 * n;
    }
}

/// A stream waiting for its piece, counted in [`WAITING`] while it lives (also when the
/// wait is cancelled).
struct Waiting;

impl Waiting {
    fn start() -> Self {
        WAITING.fetch_add(1, Ordering::Relaxed);
        if let Some(tx) = lanes() {
            // After the count is raised, so the thread reads it when it wakes.
            let _ = tx.send(Msg::Wake);
        }
        Waiting
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An MD5 computation fed piece by piece.
#[derive(Debug)]
pub struct Md5Stream {
    progress: Progress,
    /// Whether the stream is counted in [`HASHING`] (from its first piece handed over).
    counted: bool,
}

impl Drop for Md5Stream {
    fn drop(&mut self) {
        if self.counted {
            HASHING.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[derive(Debug)]
enum Progress {
    /// No piece is being hashed.
    Ready(Md5),
    /// A piece is being hashed on the `oed-md5` thread.
    Hashing(oneshot::Receiver<Md5>),
    /// The thread stopped with a piece of this stream.
    Lost,
}

impl Default for Md5Stream {
    fn default() -> Self {
        Self::new()
    }
}

/// Pieces smaller than this are hashed on the caller's thread: handing them over would
/// cost more than it saves.
const HAND_OVER_MIN: usize = 16 * 1024;

impl Md5Stream {
    /// An empty stream.
    #[must_use]
    pub fn new() -> Self {
        Self {
            progress: Progress::Ready(Md5::new()),
            counted: false,
        }
    }

    /// The state once the piece in flight is hashed. The thread answers every piece it
    /// takes while it runs; if it stopped with one, that piece is lost and no digest of
    /// this stream can be right.
    async fn settle(&mut self) -> std::io::Result<Md5> {
        let lost = || std::io::Error::other("the MD5 thread stopped with a piece of this object");
        match std::mem::replace(&mut self.progress, Progress::Lost) {
            Progress::Ready(state) => Ok(state),
            Progress::Hashing(mut rx) => match rx.try_recv() {
                Ok(state) => Ok(state),
                Err(oneshot::error::TryRecvError::Empty) => {
                    // The thread may be holding the piece for company: it stops holding
                    // while this waits.
                    let _waiting = Waiting::start();
                    rx.await.map_err(|_| lost())
                }
                Err(oneshot::error::TryRecvError::Closed) => Err(lost()),
            },
            Progress::Lost => Err(lost()),
        }
    }

    /// Hashes `data` (buffers in order, hashed as if joined) after the pieces before it.
    /// Returns once the previous piece is done; this one is hashed in the background.
    ///
    /// # Errors
    /// When the `oed-md5` thread stopped with the previous piece (it does not fail
    /// otherwise); the stream is then unusable.
    pub async fn update(&mut self, data: Vec<Bytes>) -> std::io::Result<()> {
        let mut state = self.settle().await?;
        let len: usize = data.iter().map(Bytes::len).sum();
        let lanes = lanes().filter(|_| len >= HAND_OVER_MIN);
        let Some(lanes) = lanes else {
            for d in &data {
                state.absorb(d);
            }
            self.progress = Progress::Ready(state);
            return Ok(());
        };
        let (done, rx) = oneshot::channel();
        if !self.counted {
            HASHING.fetch_add(1, Ordering::Relaxed);
            self.counted = true;
        }
        self.progress = match lanes.send(Msg::Piece(Job { state, data, done })) {
            Ok(()) => Progress::Hashing(rx),
            // The thread is gone: hash here.
            Err(mpsc::SendError(msg)) => match msg {
                Msg::Piece(mut job) => {
                    for d in &job.data {
                        job.state.absorb(d);
                    }
                    Progress::Ready(job.state)
                }
                // Not what was sent.
                Msg::Wake => Progress::Lost,
            },
        };
        Ok(())
    }

    /// The digest of everything passed to [`Md5Stream::update`].
    ///
    /// # Errors
    /// As [`Md5Stream::update`].
    pub async fn finish(mut self) -> std::io::Result<[u8; 16]> {
        Ok(self.settle().await?.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use md5::Digest as _;

    fn bytes(len: usize, seed: u32) -> Vec<u8> {
        use rand::{RngCore as _, SeedableRng as _};
        let mut v = vec![0u8; len];
        rand::rngs::SmallRng::seed_from_u64(seed.into()).fill_bytes(&mut v);
        v
    }

    fn reference(data: &[u8]) -> [u8; 16] {
        md5::Md5::digest(data).into()
    }

    #[tokio::test]
    async fn known_answers_and_every_padding_length() {
        let hex = |d: [u8; 16]| hex::encode(d);
        let mut s = Md5Stream::new();
        s.update(vec![Bytes::new()]).await.unwrap();
        assert_eq!(
            hex(s.finish().await.unwrap()),
            "d41d8cd98f00b204e9800998ecf8427e"
        );
        let mut s = Md5Stream::new();
        s.update(vec![Bytes::from_static(b"abc")]).await.unwrap();
        assert_eq!(
            hex(s.finish().await.unwrap()),
            "900150983cd24fb0d6963f7d28e17f72"
        );
        for len in (0..=130).chain([HAND_OVER_MIN - 1, HAND_OVER_MIN, HAND_OVER_MIN + 55]) {
            let data = bytes(len, len as u32);
            let mut s = Md5Stream::new();
            s.update(vec![Bytes::from(data.clone())]).await.unwrap();
            assert_eq!(s.finish().await.unwrap(), reference(&data), "length {len}");
            // The same bytes in buffers cut short of, at and past a block.
            let data = Bytes::from(data);
            let mut s = Md5Stream::new();
            let (a, b) = (len / 3, len / 3 + len.min(65) / 2);
            s.update(vec![
                data.slice(..a),
                Bytes::new(),
                data.slice(a..b),
                data.slice(b..),
            ])
            .await
            .unwrap();
            assert_eq!(
                s.finish().await.unwrap(),
                reference(&data),
                "length {len} in pieces"
            );
        }
    }

    /// Streams of pieces of many sizes (most large enough for the hashing thread, cut at
    /// odd offsets so that tails carry over), hashed concurrently so that lanes are
    /// joined and left in every order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_streams_in_odd_pieces_match_the_reference() {
        let tasks: Vec<_> = (0..12u32)
            .map(|t| {
                tokio::spawn(async move {
                    let data = bytes(300_000 + 7_777 * t as usize, t + 100);
                    let mut s = Md5Stream::new();
                    let mut at = 0;
                    let mut i = 0usize;
                    while at < data.len() {
                        let size =
                            [1, 63, 65, 20_000, 100_001, 64 * 1024, 17][(i + t as usize) % 7];
                        let end = (at + size).min(data.len());
                        // Some updates in two buffers, cut at an odd offset.
                        let cut = if i.is_multiple_of(2) {
                            at + (end - at) / 2 + 1
                        } else {
                            at
                        };
                        let cut = cut.min(end);
                        s.update(vec![
                            Bytes::copy_from_slice(&data[at..cut]),
                            Bytes::copy_from_slice(&data[cut..end]),
                        ])
                        .await
                        .unwrap();
                        at = end;
                        i += 1;
                    }
                    assert_eq!(s.finish().await.unwrap(), reference(&data), "stream {t}");
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    }

    /// Pieces queued before the thread starts are all taken in at once: the thread runs
    /// them in as many lanes as the kernel has (more pieces than some kernels' width),
    /// then in fewer as the shorter ones end, and hands each state back with its tail;
    /// with every kernel this CPU runs.
    #[test]
    fn the_thread_hashes_queued_pieces_in_lanes() {
        for kernel in Lanes::ALL.into_iter().filter(|k| k.supported()) {
            queued_pieces_in_lanes(kernel);
        }
    }

    fn queued_pieces_in_lanes(kernel: Lanes) {
        let (tx, rx) = mpsc::channel();
        let lens = [
            5 * 64 * ROUND_BLOCKS + 10,
            64 * 3 + 1,
            64 * ROUND_BLOCKS,
            63,
            100_000,
            64 * 7,
            3 * 64 * ROUND_BLOCKS + 64,
            2 * 64 * ROUND_BLOCKS - 1,
            40_000,
        ];
        let inputs: Vec<Vec<u8>> = lens.iter().map(|&n| bytes(n, n as u32)).collect();
        let mut answers = Vec::new();
        for input in &inputs {
            let (done, answer) = oneshot::channel();
            let mut state = Md5::new();
            // A tail carried in from an earlier piece.
            state.absorb(&input[..input.len().min(9)]);
            // The rest in up to three buffers, cut at odd offsets.
            let rest = Bytes::copy_from_slice(&input[input.len().min(9)..]);
            let (a, b) = (rest.len() / 2 + 3, rest.len() * 3 / 4 + 1);
            let data = if b < rest.len() {
                vec![rest.slice(..a), rest.slice(a..b), rest.slice(b..)]
            } else {
                vec![rest]
            };
            tx.send(Msg::Piece(Job { state, data, done })).unwrap();
            answers.push(answer);
        }
        drop(tx);
        let none = AtomicUsize::new(0);
        let company = Company {
            hashing: &none,
            waiting: &none,
        };
        run_with(kernel, Duration::ZERO, &company, &rx);
        for (input, answer) in inputs.iter().zip(answers) {
            let state = answer.blocking_recv().unwrap();
            assert_eq!(state.len(), input.len() as u64);
            assert_eq!(
                state.finish(),
                reference(input),
                "{}, {} bytes",
                kernel.name(),
                input.len()
            );
        }
    }

    /// With two streams hashing, a piece waits for the other stream's piece (sent 20 ms
    /// later) and the two are hashed together: no round runs one lane alone.
    #[test]
    fn pieces_wait_for_company_while_other_streams_hash() {
        let kernel = Lanes::best();
        let piece = |seed| {
            let (done, answer) = oneshot::channel();
            let data = vec![Bytes::from(bytes(64 * ROUND_BLOCKS * 3, seed))];
            (
                Job {
                    state: Md5::new(),
                    data,
                    done,
                },
                answer,
            )
        };
        let (tx, rx) = mpsc::channel();
        let (first, a1) = piece(1);
        let (second, a2) = piece(2);
        tx.send(Msg::Piece(first)).unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.send(Msg::Piece(second)).unwrap();
        });
        let (two, none) = (AtomicUsize::new(2), AtomicUsize::new(0));
        let company = Company {
            hashing: &two,
            waiting: &none,
        };
        let rounds = run_with(kernel, Duration::from_secs(10), &company, &rx);
        sender.join().unwrap();
        assert_eq!(rounds[1], 0, "{rounds:?}");
        assert_eq!(rounds[2], 3, "{rounds:?}");
        // What `oed_md5_bytes_total{streams="2"}` reports (other tests add to it too).
        assert!(hashed_bytes_by_streams()[2] >= 2 * 3 * 64 * ROUND_BLOCKS as u64);
        for a in [a1, a2] {
            assert_eq!(
                a.blocking_recv().unwrap().len(),
                64 * ROUND_BLOCKS as u64 * 3
            );
        }
    }

    /// With two streams hashing and a hold of an hour, a piece is held until its stream
    /// starts to wait for it, and then hashed at once, alone: holding never makes a
    /// stream wait. (Were the wake ignored, the piece would be answered only when the
    /// second stream's piece came, which the test sends after 10 s, and it fails.)
    #[test]
    fn a_waiting_stream_ends_the_hold() {
        let kernel = Lanes::best();
        let (tx, rx) = mpsc::channel();
        let (done, mut answer) = oneshot::channel();
        let data = vec![Bytes::from(bytes(64 * ROUND_BLOCKS * 2, 7))];
        tx.send(Msg::Piece(Job {
            state: Md5::new(),
            data,
            done,
        }))
        .unwrap();
        let (two, waiting) = (
            AtomicUsize::new(2),
            std::sync::Arc::new(AtomicUsize::new(0)),
        );
        let waiter = {
            let waiting = waiting.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                let held = answer.try_recv().is_err();
                waiting.fetch_add(1, Ordering::Relaxed);
                tx.send(Msg::Wake).unwrap();
                let start = Instant::now();
                let state = loop {
                    if let Ok(state) = answer.try_recv() {
                        break Some(state);
                    }
                    if start.elapsed() > Duration::from_secs(10) {
                        break None;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                };
                waiting.fetch_sub(1, Ordering::Relaxed);
                // Releases the thread either way, so the test ends.
                let (done, _) = oneshot::channel();
                let data = vec![Bytes::from(bytes(64, 8))];
                tx.send(Msg::Piece(Job {
                    state: Md5::new(),
                    data,
                    done,
                }))
                .unwrap();
                (held, state)
            })
        };
        let company = Company {
            hashing: &two,
            waiting: &waiting,
        };
        let rounds = run_with(kernel, Duration::from_hours(1), &company, &rx);
        let (held, state) = waiter.join().unwrap();
        assert!(held, "the piece was held while nobody waited");
        let state = state.expect("the piece was answered once its stream waited");
        assert_eq!(state.len(), 64 * ROUND_BLOCKS as u64 * 2);
        // Two rounds of the first piece alone, then the one block released with.
        assert_eq!(rounds[1], 3, "{rounds:?}");
        assert_eq!(rounds[2], 0, "{rounds:?}");
    }
    /// With two streams counted but only one bringing pieces, a hold of an hour and each
    /// held piece released by its stream's wait: after `FRUITLESS_HOLDS` such holds the
    /// thread hashes the next piece at once, unasked (were it held, the piece would be
    /// answered only when the sender gives up after 10 s, and the test fails); two pieces
    /// meeting make it hold again.
    #[test]
    fn holds_stop_when_no_other_piece_comes() {
        let kernel = Lanes::best();
        let (tx, rx) = mpsc::channel();
        let waiting = std::sync::Arc::new(AtomicUsize::new(0));
        let sender = {
            let waiting = waiting.clone();
            std::thread::spawn(move || {
                let send_len = |seed, len| {
                    let (done, answer) = oneshot::channel();
                    let data = vec![Bytes::from(bytes(len, seed))];
                    tx.send(Msg::Piece(Job {
                        state: Md5::new(),
                        data,
                        done,
                    }))
                    .unwrap();
                    answer
                };
                let send = |seed| send_len(seed, 64 * ROUND_BLOCKS);
                let answered = |mut answer: oneshot::Receiver<Md5>| {
                    let start = Instant::now();
                    while start.elapsed() < Duration::from_secs(10) {
                        if let Ok(state) = answer.try_recv() {
                            return Some(state.len());
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    None
                };
                // A piece held until its stream waits for it.
                let held_then_woken = |seed| {
                    let mut answer = send(seed);
                    std::thread::sleep(Duration::from_millis(20));
                    let held = answer.try_recv().is_err();
                    waiting.fetch_add(1, Ordering::Relaxed);
                    tx.send(Msg::Wake).unwrap();
                    let len = answered(answer);
                    waiting.fetch_sub(1, Ordering::Relaxed);
                    (held, len)
                };
                let mut seen = Vec::new();
                for seed in 0..FRUITLESS_HOLDS {
                    seen.push(held_then_woken(seed));
                }
                let unasked = answered(send(10));
                // A long piece and a short one sent just after it meet while the long
                // one is hashed (sent thrice, in case the sender is slow to send the
                // second: once they met, each pair meets in a hold). Their stream waits
                // for them, so what is left of the long one is held 4 ms at most.
                waiting.fetch_add(1, Ordering::Relaxed);
                tx.send(Msg::Wake).unwrap();
                let met: Vec<_> = (0..3)
                    .map(|i| {
                        let (a, b) = (send_len(20 + i, 64 << 16), send(30 + i));
                        (answered(a), answered(b))
                    })
                    .collect();
                waiting.fetch_sub(1, Ordering::Relaxed);
                let again = held_then_woken(13);
                (seen, unasked, met, again)
            })
        };
        let two = AtomicUsize::new(2);
        let company = Company {
            hashing: &two,
            waiting: &waiting,
        };
        run_with(kernel, Duration::from_hours(1), &company, &rx);
        let (seen, unasked, met, again) = sender.join().unwrap();
        let len = Some(64 * ROUND_BLOCKS as u64);
        for (i, (held, answered)) in seen.into_iter().enumerate() {
            assert!(held, "piece {i} was held");
            assert_eq!(
                answered, len,
                "piece {i} was answered once its stream waited"
            );
        }
        assert_eq!(
            unasked, len,
            "after fruitless holds a piece is hashed unasked"
        );
        let long = Some(64 << 16);
        assert!(met.iter().all(|m| *m == (long, len)), "{met:?}");
        assert_eq!(again, (true, len), "two pieces met: the thread holds again");
    }
}
