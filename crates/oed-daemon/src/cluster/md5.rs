//! MD5 of the objects being written, for S3's `ETag` and `Content-MD5`, hashed in lanes
//! on one thread. The hashing itself is `oed_ops::md5`'s; this module feeds it.
//!
//! MD5 is one long chain of dependent additions and rotations: a single stream keeps a
//! CPU's execution units mostly idle, and on the coordinator of a PUT it was the largest
//! single cost (40% of its CPU time under 16 concurrent 4 MiB PUTs). The objects being
//! written at the same time are independent streams, though, and this module hashes up
//! to [`MAX_LANES`] of them together: one thread (`oed-md5`) takes each stream's next
//! piece and runs the compression function over all of them in one interleaved loop,
//! whose independent chains the CPU executes side by side. On the development machine
//! three lanes hash 1.66 times as many bytes per second as one (`docs/s3.md`, "MD5 in
//! lanes"). A stream alone is hashed as it would be anyway.
//!
//! A stream has one piece in flight at a time, so its bytes are hashed in order; the
//! caller awaits that piece's result only when it hands over the next one, so hashing
//! overlaps with the caller's own work on the same bytes.

use std::sync::OnceLock;
use std::sync::mpsc;

use bytes::Bytes;
use oed_ops::md5::{Md5, compress_lanes};
use tokio::sync::oneshot;

/// The most streams hashed together. Three ran fastest on the x86 development machine
/// (`cargo bench -p oed-benches --bench md5`: two lanes 1.3x, three 1.66x, four 1.57x
/// the bytes per second of one stream); beyond that the lanes' state no longer fits in
/// the registers.
pub const MAX_LANES: usize = 3;

/// Blocks (of 64 bytes) each lane hashes before the thread looks for new streams to
/// take in: 16 KiB, about 60 µs in three lanes on the development machine.
const ROUND_BLOCKS: usize = 256;

/// One piece of a stream, handed to the hashing thread.
struct Job {
    state: Md5,
    data: Bytes,
    done: oneshot::Sender<Md5>,
}

/// A job on the thread: `pos` is where its next whole block starts.
struct Lane {
    job: Job,
    pos: usize,
}

impl Lane {
    fn start(mut job: Job) -> Self {
        let pos = job.state.begin(&job.data);
        Self { job, pos }
    }

    fn blocks_left(&self) -> usize {
        (self.job.data.len() - self.pos) / 64
    }

    /// Keeps the bytes short of a block and hands the state back.
    fn finish(self) {
        let Lane { mut job, pos } = self;
        job.state.keep(&job.data[pos..]);
        // The stream may have been dropped (its request cancelled): nothing to do then.
        let _ = job.done.send(job.state);
    }
}

/// The sending side of the hashing thread, started on first use. `None` when the thread
/// could not be started: streams then hash on their own threads.
fn lanes() -> Option<&'static mpsc::Sender<Job>> {
    static LANES: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
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

/// The hashing thread: takes in streams' pieces, up to [`MAX_LANES`] at a time, and
/// hashes them together in rounds of at most [`ROUND_BLOCKS`] blocks.
fn run(rx: &mpsc::Receiver<Job>) {
    let mut active: Vec<Lane> = Vec::with_capacity(MAX_LANES);
    loop {
        if active.is_empty() {
            let Ok(job) = rx.recv() else { return };
            active.push(Lane::start(job));
        }
        while active.len() < MAX_LANES {
            let Ok(job) = rx.try_recv() else { break };
            active.push(Lane::start(job));
        }
        // Pieces with no whole block left are done.
        for done in active.extract_if(.., |lane| lane.blocks_left() == 0) {
            done.finish();
        }
        let Some(n) = active.iter().map(Lane::blocks_left).min() else {
            continue;
        };
        let n = n.min(ROUND_BLOCKS);
        match active.as_mut_slice() {
            [a] => round::<1>([a], n),
            [a, b] => round::<2>([a, b], n),
            [a, b, c] => round::<3>([a, b, c], n),
            _ => unreachable!("at most MAX_LANES lanes"),
        }
    }
}

/// Hashes the next `n` blocks of every lane.
fn round<const N: usize>(lanes: [&mut Lane; N], n: usize) {
    let mut states: [[u32; 4]; N] = std::array::from_fn(|l| *lanes[l].job.state.chain_mut());
    {
        let data: [&[u8]; N] =
            std::array::from_fn(|l| &lanes[l].job.data[lanes[l].pos..lanes[l].pos + 64 * n]);
        if N == 1 {
            md5::block_api::compress(&mut states[0], data[0].as_chunks::<64>().0);
        } else {
            compress_lanes(&mut states, data);
        }
    }
    for (lane, h) in lanes.into_iter().zip(states) {
        *lane.job.state.chain_mut() = h;
        lane.pos += 64 * n;
    }
}

/// An MD5 computation fed piece by piece.
#[derive(Debug)]
pub struct Md5Stream(Progress);

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
        Self(Progress::Ready(Md5::new()))
    }

    /// The state once the piece in flight is hashed. The thread answers every piece it
    /// takes while it runs; if it stopped with one, that piece is lost and no digest of
    /// this stream can be right.
    async fn settle(&mut self) -> std::io::Result<Md5> {
        let lost = || std::io::Error::other("the MD5 thread stopped with a piece of this object");
        match std::mem::replace(&mut self.0, Progress::Lost) {
            Progress::Ready(state) => Ok(state),
            Progress::Hashing(rx) => rx.await.map_err(|_| lost()),
            Progress::Lost => Err(lost()),
        }
    }

    /// Hashes `data` after the pieces before it. Returns once the previous piece is done;
    /// this one is hashed in the background.
    ///
    /// # Errors
    /// When the `oed-md5` thread stopped with the previous piece (it does not fail
    /// otherwise); the stream is then unusable.
    pub async fn update(&mut self, data: Bytes) -> std::io::Result<()> {
        let mut state = self.settle().await?;
        let lanes = lanes().filter(|_| data.len() >= HAND_OVER_MIN);
        let Some(lanes) = lanes else {
            state.absorb(&data);
            self.0 = Progress::Ready(state);
            return Ok(());
        };
        let (done, rx) = oneshot::channel();
        self.0 = match lanes.send(Job { state, data, done }) {
            Ok(()) => Progress::Hashing(rx),
            // The thread is gone: hash here.
            Err(mpsc::SendError(mut job)) => {
                job.state.absorb(&job.data);
                Progress::Ready(job.state)
            }
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
        s.update(Bytes::new()).await.unwrap();
        assert_eq!(
            hex(s.finish().await.unwrap()),
            "d41d8cd98f00b204e9800998ecf8427e"
        );
        let mut s = Md5Stream::new();
        s.update(Bytes::from_static(b"abc")).await.unwrap();
        assert_eq!(
            hex(s.finish().await.unwrap()),
            "900150983cd24fb0d6963f7d28e17f72"
        );
        for len in (0..=130).chain([HAND_OVER_MIN - 1, HAND_OVER_MIN, HAND_OVER_MIN + 55]) {
            let data = bytes(len, len as u32);
            let mut s = Md5Stream::new();
            s.update(Bytes::from(data.clone())).await.unwrap();
            assert_eq!(s.finish().await.unwrap(), reference(&data), "length {len}");
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
                        s.update(Bytes::copy_from_slice(&data[at..end]))
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
    /// them in three lanes, then in fewer as the shorter ones end, and hands each state
    /// back with its tail.
    #[test]
    fn the_thread_hashes_queued_pieces_in_lanes() {
        let (tx, rx) = mpsc::channel();
        let lens = [
            5 * 64 * ROUND_BLOCKS + 10,
            64 * 3 + 1,
            64 * ROUND_BLOCKS,
            63,
            100_000,
        ];
        let inputs: Vec<Vec<u8>> = lens.iter().map(|&n| bytes(n, n as u32)).collect();
        let mut answers = Vec::new();
        for input in &inputs {
            let (done, answer) = oneshot::channel();
            let mut state = Md5::new();
            // A tail carried in from an earlier piece.
            state.absorb(&input[..input.len().min(9)]);
            let data = Bytes::copy_from_slice(&input[input.len().min(9)..]);
            tx.send(Job { state, data, done }).unwrap();
            answers.push(answer);
        }
        drop(tx);
        run(&rx);
        for (input, answer) in inputs.iter().zip(answers) {
            let state = answer.blocking_recv().unwrap();
            assert_eq!(state.len(), input.len() as u64);
            assert_eq!(state.finish(), reference(input), "{} bytes", input.len());
        }
    }
}
