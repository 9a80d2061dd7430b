//! The stripe source: the stripes of one erasure-coded extent (an object, or one part of
//! a multipart object) in order, each with the chunks a caller wants, whatever becomes of
//! the drives meanwhile. It knows nothing of S3 or of where the bytes go next: a client's
//! GET streams the data chunks it yields ([`super::read`]); near-data operations, heal and
//! scrub take the same chunks with their stripe index, shard index and object offset.
//!
//! It runs on any drive. It reads the wanted shards from the drives that hold them (this
//! drive's own through its store, without HTTP), each chunk checked against its CRC32C by
//! its drive or, in a framed read, where it arrives. On the healthy path nothing is decoded: the chunks are passed on in the
//! pieces they arrived in. When a wanted shard's drive is down, too slow, or cuts its
//! stream at a bad chunk, the source opens other shards (parity first) until `k` chunks
//! of the stripe are at hand and rebuilds the wanted ones from them; the stripes after it
//! keep those shards open. When fewer than `k` chunks of a stripe can be had, it fails:
//! never wrong bytes.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures_util::StreamExt as _;
use futures_util::future::join_all;

use super::Cluster;
use oed_meter::traffic::EcOp;
use oed_model::drive::{DriveError, ShardStream};
use oed_model::error::{Error, Result};
use oed_model::record::PartRef;

/// One chunk as it arrived: pieces of a drive's stream, passed on as they are.
pub type Pieces = Vec<Bytes>;

/// One chunk of a stripe, as the source yields it.
#[derive(Clone, Debug)]
pub struct Chunk {
    /// Which chunk of the stripe: the shard index (data `0..k`, parity `k..k + m`).
    pub shard: usize,
    /// Object offset of its first byte (for a parity chunk: of the stripe's first byte).
    pub offset: u64,
    /// Object bytes it holds: `chunk_len` less the zero padding at the object's end (0 for
    /// a parity chunk, whose bytes are all code).
    pub data_len: usize,
    /// Its bytes (`chunk_len` of them, padding included), in the pieces they came in.
    pub pieces: Pieces,
    /// Whether it was rebuilt from other chunks instead of read.
    pub rebuilt: bool,
}

/// One stripe: the chunks asked for, in the order asked.
#[derive(Clone, Debug)]
pub struct Stripe {
    /// The stripe's place in the extent, from 0.
    pub index: u64,
    /// Object offset of its first byte.
    pub offset: u64,
    /// Length of each of its chunks.
    pub chunk_len: usize,
    /// The chunks asked for.
    pub chunks: Vec<Chunk>,
}

/// A shard being read, chunk by chunk.
struct ChunkReader {
    stream: ShardStream,
    buf: Bytes,
}

impl ChunkReader {
    /// The next `n` bytes, as the pieces they arrived in (cut where a piece crosses
    /// into the next chunk): nothing is copied on the healthy path.
    async fn read(&mut self, n: usize) -> Result<Pieces, DriveError> {
        let mut out = Vec::with_capacity(2);
        let mut have = 0;
        while have < n {
            if self.buf.is_empty() {
                let Some(piece) = self.stream.next().await else {
                    return Err(DriveError::unreachable("shard ended early"));
                };
                self.buf = piece?;
                continue;
            }
            let take = (n - have).min(self.buf.len());
            out.push(self.buf.split_to(take));
            have += take;
        }
        Ok(out)
    }
}

/// The pieces of one chunk, joined (for decoding).
fn joined(pieces: &[Bytes], len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    for p in pieces {
        v.extend_from_slice(p);
    }
    v
}

enum Source {
    Unopened,
    Open(ChunkReader),
    Failed,
}

/// The stripes of one extent; see the module docs.
pub struct StripeSource {
    cluster: Arc<Cluster>,
    bucket: String,
    ext: PartRef,
    layout: oed_ec::Layout,
    codec: Arc<oed_ec::Codec>,
    sources: Vec<Source>,
    want: Vec<usize>,
    next: u64,
    end: u64,
    bytes_read: u64,
}

impl StripeSource {
    /// Opens the shards `want` (shard indexes, in the order the chunks are wanted) of
    /// `ext` at the first of `stripes` (clipped to the extent's), and others where those
    /// cannot be opened. An extent that cannot be read fails here, before any byte.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when fewer than `k` shards can be opened;
    /// [`Error::BadRequest`] for a shard index outside `0..k + m`.
    pub async fn open(
        cluster: Arc<Cluster>,
        bucket: &str,
        ext: PartRef,
        stripes: Range<u64>,
        want: Vec<usize>,
    ) -> Result<Self> {
        Self::open_with(cluster, bucket, ext, stripes, want, None).await
    }

    /// Opens a source that yields shard `shard` of `ext` rebuilt from the others, never
    /// read from its own drive: what heal writes back to that drive.
    ///
    /// # Errors
    /// As [`StripeSource::open`].
    pub async fn open_rebuild(
        cluster: Arc<Cluster>,
        bucket: &str,
        ext: PartRef,
        stripes: Range<u64>,
        shard: usize,
    ) -> Result<Self> {
        Self::open_with(cluster, bucket, ext, stripes, vec![shard], Some(shard)).await
    }

    async fn open_with(
        cluster: Arc<Cluster>,
        bucket: &str,
        ext: PartRef,
        stripes: Range<u64>,
        want: Vec<usize>,
        exclude: Option<usize>,
    ) -> Result<Self> {
        let layout = oed_ec::Layout::new(ext.k.into(), ext.m.into(), ext.chunk_size)?;
        if let Some(bad) = want.iter().find(|&&i| i >= layout.total()) {
            return Err(Error::BadRequest(format!(
                "shard {bad} of a {}+{} extent",
                ext.k, ext.m
            )));
        }
        let codec = cluster.codec(ext.k, ext.m)?;
        let end = stripes.end.min(layout.stripe_count(ext.size));
        let mut s = Self {
            cluster,
            bucket: bucket.to_owned(),
            ext,
            layout,
            codec,
            sources: (0..layout.total()).map(|_| Source::Unopened).collect(),
            want,
            next: stripes.start,
            end,
            bytes_read: 0,
        };
        if let Some(x) = exclude {
            s.sources[x] = Source::Failed;
        }
        if s.next >= s.end {
            return Ok(s);
        }
        let first: Vec<usize> = s
            .want
            .iter()
            .copied()
            .filter(|&i| Some(i) != exclude)
            .collect();
        s.open_sources(&first, s.next).await;
        if s.want
            .iter()
            .any(|&i| !matches!(s.sources[i], Source::Open(_)))
        {
            let open = s.count_open();
            if open < layout.k() {
                s.open_more(layout.k() - open, s.next).await?;
            }
        }
        Ok(s)
    }

    /// Chunk bytes read from the drives so far (rebuilding reads `k` chunks a stripe).
    #[must_use]
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// The extent's erasure-coding profile.
    #[must_use]
    pub fn layout(&self) -> oed_ec::Layout {
        self.layout
    }

    fn count_open(&self) -> usize {
        self.sources
            .iter()
            .filter(|s| matches!(s, Source::Open(_)))
            .count()
    }

    async fn open_sources(&mut self, which: &[usize], at: u64) {
        let end = self.end;
        let timeout = self.cluster.timeout;
        let (cluster, ext, bucket) = (&self.cluster, &self.ext, &self.bucket);
        let opened = join_all(which.iter().map(|&i| {
            let drive = cluster.drive(&ext.drives[i]);
            let (key, version) = (&ext.key, ext.version_id);
            async move {
                let Some(d) = drive else {
                    return Err(DriveError::unreachable("drive is not in the cluster map"));
                };
                oed_model::drive::within(
                    timeout,
                    d.read_shard(bucket, key, Some(version), Some(at..end)),
                )
                .await
            }
        }))
        .await;
        for (&i, r) in which.iter().zip(opened) {
            self.sources[i] = match r {
                Ok(read) => Source::Open(ChunkReader {
                    stream: read.chunks,
                    buf: Bytes::new(),
                }),
                Err(e) => {
                    self.failed(i, &e);
                    Source::Failed
                }
            };
        }
    }

    /// Opens `n` more shards at stripe `at`, parity first, until enough are open.
    async fn open_more(&mut self, mut n: usize, at: u64) -> Result<()> {
        while n > 0 {
            let candidates: Vec<usize> = (0..self.sources.len())
                .rev()
                .filter(|&i| matches!(self.sources[i], Source::Unopened))
                .take(n)
                .collect();
            if candidates.is_empty() {
                return Err(Error::Unavailable(format!(
                    "fewer than k = {} shards of {:?} can be read",
                    self.ext.k, self.ext.key
                )));
            }
            self.open_sources(&candidates, at).await;
            let opened = candidates
                .iter()
                .filter(|&&i| matches!(self.sources[i], Source::Open(_)))
                .count();
            n -= opened;
        }
        Ok(())
    }

    fn failed(&self, shard: usize, e: &DriveError) {
        tracing::warn!(bucket = %self.bucket, key = %self.ext.key, shard, drive = %self.ext.drives[shard], error = %e, "shard unreadable; using parity");
        self.cluster
            .stats
            .shard_failures
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The next stripe, or `None` after the last one asked for.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when fewer than `k` of its chunks can be had; the source is
    /// spent then.
    pub async fn next(&mut self) -> Result<Option<Stripe>> {
        if self.next >= self.end {
            return Ok(None);
        }
        let index = self.next;
        let stripe = self
            .layout
            .stripe(self.ext.size, index)
            .ok_or_else(|| Error::BadRequest("read past the end".into()))?;
        let cl = stripe.chunk_len;
        let k = self.layout.k();
        let mut chunks: Vec<Option<Pieces>> = vec![None; self.layout.total()];
        loop {
            let timeout = self.cluster.timeout;
            let reads = join_all(self.sources.iter_mut().enumerate().filter_map(|(i, s)| {
                if chunks[i].is_some() {
                    return None;
                }
                match s {
                    Source::Open(r) => Some(async move {
                        let got = oed_model::drive::within(timeout, r.read(cl)).await;
                        (i, got)
                    }),
                    _ => None,
                }
            }))
            .await;
            for (i, got) in reads {
                match got {
                    Ok(b) => {
                        self.bytes_read += cl as u64;
                        chunks[i] = Some(b);
                    }
                    Err(e) => {
                        self.failed(i, &e);
                        self.sources[i] = Source::Failed;
                    }
                }
            }
            let present = chunks.iter().filter(|c| c.is_some()).count();
            if present >= k || self.want.iter().all(|&i| chunks[i].is_some()) {
                break;
            }
            if let Err(e) = self.open_more(k - present, index).await {
                self.next = self.end;
                return Err(e);
            }
        }
        self.next += 1;
        let missing: Vec<usize> = self
            .want
            .iter()
            .copied()
            .filter(|&i| chunks[i].is_none())
            .collect();
        if !missing.is_empty() {
            self.rebuild(&mut chunks, &missing, cl)?;
        }
        let chunks = self
            .want
            .iter()
            .map(|&i| {
                let range = if i < k { stripe.chunk_range(i) } else { 0..0 };
                Chunk {
                    shard: i,
                    offset: stripe.object_offset + range.start as u64,
                    data_len: range.len(),
                    pieces: chunks[i].clone().unwrap_or_default(),
                    rebuilt: missing.contains(&i),
                }
            })
            .collect();
        Ok(Some(Stripe {
            index,
            offset: stripe.object_offset,
            chunk_len: cl,
            chunks,
        }))
    }

    /// Rebuilds the chunks `missing` of a stripe from the `k` or more in `chunks`.
    fn rebuild(&self, chunks: &mut [Option<Pieces>], missing: &[usize], cl: usize) -> Result<()> {
        let k = self.layout.k();
        self.cluster
            .stats
            .degraded_stripes
            .fetch_add(1, Ordering::Relaxed);
        let present: Vec<bool> = chunks.iter().map(Option::is_some).collect();
        let mut bufs: Vec<Vec<u8>> = chunks
            .iter()
            .map(|c| c.as_ref().map_or_else(|| vec![0u8; cl], |p| joined(p, cl)))
            .collect();
        let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
        let started = std::time::Instant::now();
        if missing.iter().all(|&i| i < k) {
            self.codec.reconstruct_data(&mut refs, &present)?;
        } else {
            self.codec.reconstruct(&mut refs, &present)?;
        }
        self.cluster.traffic.ec(
            EcOp::Decode,
            (k * cl) as u64,
            started.elapsed().as_secs_f64(),
        );
        for &i in missing {
            chunks[i] = Some(vec![Bytes::from(std::mem::take(&mut bufs[i]))]);
        }
        Ok(())
    }
}
