//! MD5, for S3's `ETag` and `Content-MD5`, hashed in lanes.
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
use tokio::sync::oneshot;

/// The most streams hashed together. Three ran fastest on the x86 development machine
/// (`cargo bench -p oed-benches --bench md5`: two lanes 1.3x, three 1.66x, four 1.57x
/// the bytes per second of one stream); beyond that the lanes' state no longer fits in
/// the registers.
pub const MAX_LANES: usize = 3;

/// Blocks (of 64 bytes) each lane hashes before the thread looks for new streams to
/// take in: 16 KiB, about 60 µs in three lanes on the development machine.
const ROUND_BLOCKS: usize = 256;

/// MD5's initial state (RFC 1321).
pub const INIT: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

/// The state of an MD5 computation between pieces.
#[derive(Clone, Debug)]
struct State {
    h: [u32; 4],
    /// Bytes hashed so far, including those waiting in `tail`.
    len: u64,
    /// Bytes short of a whole block, waiting for the next piece.
    tail: [u8; 64],
    tail_len: usize,
}

impl State {
    fn new() -> Self {
        Self {
            h: INIT,
            len: 0,
            tail: [0; 64],
            tail_len: 0,
        }
    }

    /// Moves as much of `data` as fits into the tail, compressing it once it is whole;
    /// returns the bytes taken.
    fn fill_tail(&mut self, data: &[u8]) -> usize {
        if self.tail_len == 0 {
            return 0;
        }
        let take = (64 - self.tail_len).min(data.len());
        self.tail[self.tail_len..self.tail_len + take].copy_from_slice(&data[..take]);
        self.tail_len += take;
        if self.tail_len == 64 {
            md5::block_api::compress(&mut self.h, &[self.tail]);
            self.tail_len = 0;
        }
        take
    }

    /// Keeps `rest` (less than a block) for the next piece.
    fn keep(&mut self, rest: &[u8]) {
        debug_assert!(self.tail_len + rest.len() < 64);
        self.tail[self.tail_len..self.tail_len + rest.len()].copy_from_slice(rest);
        self.tail_len += rest.len();
    }

    /// Counts `data` in and completes the tail from it; returns where its next whole
    /// block starts.
    fn begin(&mut self, data: &[u8]) -> usize {
        self.len += data.len() as u64;
        self.fill_tail(data)
    }

    /// Hashes `data` on the calling thread.
    fn absorb(&mut self, data: &[u8]) {
        let data = &data[self.begin(data)..];
        let (blocks, rest) = data.as_chunks::<64>();
        md5::block_api::compress(&mut self.h, blocks);
        self.keep(rest);
    }

    fn finish(mut self) -> [u8; 16] {
        let bits = self.len.wrapping_mul(8);
        let mut pad = [0u8; 72];
        pad[0] = 0x80;
        // To 56 bytes past a block boundary, then the length.
        let zeros = (55 + 64 - (self.len % 64) as usize) % 64;
        pad[1 + zeros..9 + zeros].copy_from_slice(&bits.to_le_bytes());
        self.absorb(&pad[..9 + zeros]);
        debug_assert_eq!(self.tail_len, 0);
        let mut out = [0u8; 16];
        for (o, h) in out.chunks_exact_mut(4).zip(self.h) {
            o.copy_from_slice(&h.to_le_bytes());
        }
        out
    }
}

/// One piece of a stream, handed to the hashing thread.
struct Job {
    state: State,
    data: Bytes,
    done: oneshot::Sender<State>,
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
    let mut states: [[u32; 4]; N] = std::array::from_fn(|l| lanes[l].job.state.h);
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
        lane.job.state.h = h;
        lane.pos += 64 * n;
    }
}

/// An MD5 computation fed piece by piece.
#[derive(Debug)]
pub struct Md5Stream(Progress);

#[derive(Debug)]
enum Progress {
    /// No piece is being hashed.
    Ready(State),
    /// A piece is being hashed on the `oed-md5` thread.
    Hashing(oneshot::Receiver<State>),
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
        Self(Progress::Ready(State::new()))
    }

    /// The state once the piece in flight is hashed. The thread answers every piece it
    /// takes while it runs; if it stopped with one, that piece is lost and no digest of
    /// this stream can be right.
    async fn settle(&mut self) -> std::io::Result<State> {
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

/// The MD5 compression function over `N` independent streams at once: `data[l]` (a whole
/// number of blocks, the same for every lane) is hashed into `states[l]`. The lanes share
/// one loop, so each step's `N` chains are independent work the CPU overlaps; written with
/// plain arrays, the same code serves every target.
pub fn compress_lanes<const N: usize>(states: &mut [[u32; 4]; N], data: [&[u8]; N]) {
    let blocks = data[0].len() / 64;
    assert!(
        data.iter().all(|d| d.len() == blocks * 64),
        "every lane takes the same whole number of blocks"
    );
    let mut s: [[u32; N]; 4] = std::array::from_fn(|w| std::array::from_fn(|l| states[l][w]));
    for blk in 0..blocks {
        let mut m = [[0u32; N]; 16];
        for (l, lane) in data.iter().enumerate() {
            let (words, _) = lane[blk * 64..blk * 64 + 64].as_chunks::<4>();
            for (w, bytes) in words.iter().enumerate() {
                m[w][l] = u32::from_le_bytes(*bytes);
            }
        }
        let t = steps(s, &m);
        for (w, lanes) in s.iter_mut().enumerate() {
            for (x, y) in lanes.iter_mut().zip(t[w]) {
                *x = x.wrapping_add(y);
            }
        }
    }
    for (l, state) in states.iter_mut().enumerate() {
        *state = std::array::from_fn(|w| s[w][l]);
    }
}

#[inline]
fn f(b: u32, c: u32, d: u32) -> u32 {
    (b & c) | (!b & d)
}

#[inline]
fn g(b: u32, c: u32, d: u32) -> u32 {
    (d & b) | (!d & c)
}

#[inline]
fn h(b: u32, c: u32, d: u32) -> u32 {
    b ^ c ^ d
}

#[inline]
fn i(b: u32, c: u32, d: u32) -> u32 {
    c ^ (b | !d)
}

/// One MD5 step in every lane: `a = b + (a + fun(b, c, d) + m + k) <<< s`.
macro_rules! step {
    ($fun:ident, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:expr, $s:expr) => {
        for l in 0..$a.len() {
            let x = $fun($b[l], $c[l], $d[l]);
            $a[l] = $b[l].wrapping_add(
                $a[l]
                    .wrapping_add(x)
                    .wrapping_add($m[l])
                    .wrapping_add($k)
                    .rotate_left($s),
            );
        }
    };
}

/// The 64 steps of one block in every lane, from state `[a, b, c, d]`.
#[inline]
fn steps<const N: usize>(s: [[u32; N]; 4], m: &[[u32; N]; 16]) -> [[u32; N]; 4] {
    let [mut a, mut b, mut c, mut d] = s;
    step!(f, a, b, c, d, m[0], 0xd76a_a478, 7);
    step!(f, d, a, b, c, m[1], 0xe8c7_b756, 12);
    step!(f, c, d, a, b, m[2], 0x2420_70db, 17);
    step!(f, b, c, d, a, m[3], 0xc1bd_ceee, 22);
    step!(f, a, b, c, d, m[4], 0xf57c_0faf, 7);
    step!(f, d, a, b, c, m[5], 0x4787_c62a, 12);
    step!(f, c, d, a, b, m[6], 0xa830_4613, 17);
    step!(f, b, c, d, a, m[7], 0xfd46_9501, 22);
    step!(f, a, b, c, d, m[8], 0x6980_98d8, 7);
    step!(f, d, a, b, c, m[9], 0x8b44_f7af, 12);
    step!(f, c, d, a, b, m[10], 0xffff_5bb1, 17);
    step!(f, b, c, d, a, m[11], 0x895c_d7be, 22);
    step!(f, a, b, c, d, m[12], 0x6b90_1122, 7);
    step!(f, d, a, b, c, m[13], 0xfd98_7193, 12);
    step!(f, c, d, a, b, m[14], 0xa679_438e, 17);
    step!(f, b, c, d, a, m[15], 0x49b4_0821, 22);
    step!(g, a, b, c, d, m[1], 0xf61e_2562, 5);
    step!(g, d, a, b, c, m[6], 0xc040_b340, 9);
    step!(g, c, d, a, b, m[11], 0x265e_5a51, 14);
    step!(g, b, c, d, a, m[0], 0xe9b6_c7aa, 20);
    step!(g, a, b, c, d, m[5], 0xd62f_105d, 5);
    step!(g, d, a, b, c, m[10], 0x0244_1453, 9);
    step!(g, c, d, a, b, m[15], 0xd8a1_e681, 14);
    step!(g, b, c, d, a, m[4], 0xe7d3_fbc8, 20);
    step!(g, a, b, c, d, m[9], 0x21e1_cde6, 5);
    step!(g, d, a, b, c, m[14], 0xc337_07d6, 9);
    step!(g, c, d, a, b, m[3], 0xf4d5_0d87, 14);
    step!(g, b, c, d, a, m[8], 0x455a_14ed, 20);
    step!(g, a, b, c, d, m[13], 0xa9e3_e905, 5);
    step!(g, d, a, b, c, m[2], 0xfcef_a3f8, 9);
    step!(g, c, d, a, b, m[7], 0x676f_02d9, 14);
    step!(g, b, c, d, a, m[12], 0x8d2a_4c8a, 20);
    step!(h, a, b, c, d, m[5], 0xfffa_3942, 4);
    step!(h, d, a, b, c, m[8], 0x8771_f681, 11);
    step!(h, c, d, a, b, m[11], 0x6d9d_6122, 16);
    step!(h, b, c, d, a, m[14], 0xfde5_380c, 23);
    step!(h, a, b, c, d, m[1], 0xa4be_ea44, 4);
    step!(h, d, a, b, c, m[4], 0x4bde_cfa9, 11);
    step!(h, c, d, a, b, m[7], 0xf6bb_4b60, 16);
    step!(h, b, c, d, a, m[10], 0xbebf_bc70, 23);
    step!(h, a, b, c, d, m[13], 0x289b_7ec6, 4);
    step!(h, d, a, b, c, m[0], 0xeaa1_27fa, 11);
    step!(h, c, d, a, b, m[3], 0xd4ef_3085, 16);
    step!(h, b, c, d, a, m[6], 0x0488_1d05, 23);
    step!(h, a, b, c, d, m[9], 0xd9d4_d039, 4);
    step!(h, d, a, b, c, m[12], 0xe6db_99e5, 11);
    step!(h, c, d, a, b, m[15], 0x1fa2_7cf8, 16);
    step!(h, b, c, d, a, m[2], 0xc4ac_5665, 23);
    step!(i, a, b, c, d, m[0], 0xf429_2244, 6);
    step!(i, d, a, b, c, m[7], 0x432a_ff97, 10);
    step!(i, c, d, a, b, m[14], 0xab94_23a7, 15);
    step!(i, b, c, d, a, m[5], 0xfc93_a039, 21);
    step!(i, a, b, c, d, m[12], 0x655b_59c3, 6);
    step!(i, d, a, b, c, m[3], 0x8f0c_cc92, 10);
    step!(i, c, d, a, b, m[10], 0xffef_f47d, 15);
    step!(i, b, c, d, a, m[1], 0x8584_5dd1, 21);
    step!(i, a, b, c, d, m[8], 0x6fa8_7e4f, 6);
    step!(i, d, a, b, c, m[15], 0xfe2c_e6e0, 10);
    step!(i, c, d, a, b, m[6], 0xa301_4314, 15);
    step!(i, b, c, d, a, m[13], 0x4e08_11a1, 21);
    step!(i, a, b, c, d, m[4], 0xf753_7e82, 6);
    step!(i, d, a, b, c, m[11], 0xbd3a_f235, 10);
    step!(i, c, d, a, b, m[2], 0x2ad7_d2bb, 15);
    step!(i, b, c, d, a, m[9], 0xeb86_d391, 21);
    [a, b, c, d]
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

    #[test]
    fn lanes_compress_as_the_reference_does() {
        fn check<const N: usize>() {
            let inputs: Vec<Vec<u8>> = (0..N).map(|l| bytes(64 * 37, l as u32 + 7)).collect();
            let mut states = [INIT; N];
            compress_lanes(&mut states, std::array::from_fn(|l| &inputs[l][..]));
            for (l, input) in inputs.iter().enumerate() {
                let mut want = INIT;
                md5::block_api::compress(&mut want, input.as_chunks::<64>().0);
                assert_eq!(states[l], want, "lane {l} of {N}");
            }
        }
        check::<1>();
        check::<2>();
        check::<3>();
        check::<4>();
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
            let mut state = State::new();
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
            assert_eq!(state.len, input.len() as u64);
            assert_eq!(state.finish(), reference(input), "{} bytes", input.len());
        }
    }
}
