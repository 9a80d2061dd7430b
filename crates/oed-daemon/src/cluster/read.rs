//! The read path. On the healthy path the `k` data shards are streamed and their chunks
//! sent on as they are, with no decoding. A drive that is down, too slow, or sends a chunk
//! that fails its CRC32C (the drive checks every chunk before sending it and cuts the
//! stream at a bad one) is dropped, and from that stripe on parity shards stand in: any
//! `k` of the `k + m` chunks rebuild a stripe. A range reads only the stripes that hold
//! it. When fewer than `k` chunks of a stripe can be had, the read fails: never wrong
//! bytes.

use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::{Stream, StreamExt, future::join_all};
use tokio::sync::mpsc;

use super::Cluster;
use super::budget::{Budget, Share};
use super::drive::{DriveError, ShardStream};
use crate::error::{Error, Result};
use crate::metrics::BodyMeter;
use crate::store::record::{ObjectRecord, PartRef};
use oed_meter::traffic::{Class, Direction, EcOp};

/// The erasure-coded runs of `record`'s bytes in object order: its parts, or the whole
/// object as its only part.
#[must_use]
pub fn extents(record: &ObjectRecord) -> Vec<PartRef> {
    if record.parts.is_empty() {
        vec![PartRef::of(1, record)]
    } else {
        record.parts.clone()
    }
}

/// An object's bytes as they are read, for a response body. Dropping it stops the read.
pub struct ObjectBody(mpsc::Receiver<std::io::Result<Bytes>>);

impl Stream for ObjectBody {
    type Item = std::io::Result<Bytes>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// A shard being read, chunk by chunk.
struct ChunkReader {
    stream: ShardStream,
    buf: Bytes,
}

/// One chunk as it arrived: pieces of the stream, sent on as they are.
type Pieces = Vec<Bytes>;

impl ChunkReader {
    /// The next `n` bytes, as the pieces they arrived in (cut where a piece crosses
    /// into the next chunk): nothing is copied on the healthy path.
    async fn read(&mut self, n: usize) -> Result<Pieces, DriveError> {
        let mut out = Vec::with_capacity(2);
        let mut have = 0;
        while have < n {
            if self.buf.is_empty() {
                let Some(piece) = self.stream.next().await else {
                    return Err(DriveError::Failed("shard ended early".into()));
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

struct ExtentReader {
    cluster: Arc<Cluster>,
    bucket: String,
    ext: PartRef,
    layout: oed_ec::Layout,
    codec: Arc<oed_ec::Codec>,
    sources: Vec<Source>,
    end_stripe: u64,
}

impl ExtentReader {
    /// Opens the data shards at `first` (parity where a data shard cannot be opened).
    async fn open(
        cluster: Arc<Cluster>,
        bucket: String,
        ext: PartRef,
        stripes: Range<u64>,
    ) -> Result<Self> {
        let layout = oed_ec::Layout::new(ext.k.into(), ext.m.into(), ext.chunk_size)?;
        let codec = cluster.codec(ext.k, ext.m)?;
        let mut r = Self {
            cluster,
            bucket,
            ext,
            layout,
            codec,
            sources: (0..layout.total()).map(|_| Source::Unopened).collect(),
            end_stripe: stripes.end,
        };
        let data: Vec<usize> = (0..layout.k()).collect();
        r.open_sources(&data, stripes.start).await;
        let open = r.count(|s| matches!(s, Source::Open(_)));
        if open < layout.k() {
            r.open_more(layout.k() - open, stripes.start).await?;
        }
        Ok(r)
    }

    fn count(&self, f: impl Fn(&Source) -> bool) -> usize {
        self.sources.iter().filter(|s| f(s)).count()
    }

    async fn open_sources(&mut self, which: &[usize], at: u64) {
        let end = self.end_stripe;
        let timeout = self.cluster.timeout;
        let (cluster, ext, bucket) = (&self.cluster, &self.ext, &self.bucket);
        let opened = join_all(which.iter().map(|&i| {
            let drive = cluster.drive(&ext.drives[i]);
            let (key, version) = (&ext.key, ext.version_id);
            async move {
                let Some(d) = drive else {
                    return Err(DriveError::Failed("drive is not in the cluster map".into()));
                };
                tokio::time::timeout(timeout, d.read_shard(bucket, key, version, at, end))
                    .await
                    .unwrap_or_else(|_| Err(DriveError::Failed("timed out".into())))
            }
        }))
        .await;
        for (&i, r) in which.iter().zip(opened) {
            if r.is_ok()
                && matches!(
                    self.cluster.drive(&self.ext.drives[i]),
                    Some(crate::cluster::drive::DriveHandle::Local(_))
                )
            {
                self.cluster.traffic.shard_read(at);
            }
            self.sources[i] = match r {
                Ok(stream) => Source::Open(ChunkReader {
                    stream,
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

    /// The `k` data chunks of stripe `index`, rebuilt from parity where needed.
    async fn stripe(&mut self, index: u64, size: u64) -> Result<Vec<Pieces>> {
        let stripe = self
            .layout
            .stripe(size, index)
            .ok_or_else(|| Error::BadRequest("read past the end".into()))?;
        let cl = stripe.chunk_len;
        let total = self.layout.total();
        let k = self.layout.k();
        let mut chunks: Vec<Option<Pieces>> = vec![None; total];
        loop {
            let timeout = self.cluster.timeout;
            let reads = join_all(self.sources.iter_mut().enumerate().filter_map(|(i, s)| {
                if chunks[i].is_some() {
                    return None;
                }
                match s {
                    Source::Open(r) => Some(async move {
                        let got = tokio::time::timeout(timeout, r.read(cl))
                            .await
                            .unwrap_or_else(|_| Err(DriveError::Failed("timed out".into())));
                        (i, got)
                    }),
                    _ => None,
                }
            }))
            .await;
            for (i, got) in reads {
                match got {
                    Ok(b) => chunks[i] = Some(b),
                    Err(e) => {
                        self.failed(i, &e);
                        self.sources[i] = Source::Failed;
                    }
                }
            }
            let present = chunks.iter().filter(|c| c.is_some()).count();
            if present >= k {
                break;
            }
            self.open_more(k - present, index).await?;
        }
        if chunks[..k].iter().all(Option::is_some) {
            return Ok(chunks.into_iter().take(k).flatten().collect());
        }
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
        self.codec.reconstruct_data(&mut refs, &present)?;
        self.cluster.traffic.ec(
            EcOp::Decode,
            (k * cl) as u64,
            started.elapsed().as_secs_f64(),
        );
        Ok(bufs
            .into_iter()
            .take(k)
            .map(|b| vec![Bytes::from(b)])
            .collect())
    }
}

impl Cluster {
    /// Starts reading bytes `range` of `record` (clipped to its size) for a client, with
    /// a share of the coordinator's [`Budget`] held until the read ends. The shards of
    /// the first extent are opened before this returns, so an object that cannot be read
    /// fails here, before any response is sent; a failure later cuts the body short.
    ///
    /// # Errors
    /// [`Error::SlowDown`] when no share comes free in time; [`Error::Unavailable`] when
    /// fewer than `k` shards can be opened.
    pub async fn read_object(
        self: &Arc<Self>,
        record: &ObjectRecord,
        range: Range<u64>,
    ) -> Result<ObjectBody> {
        self.read(record, range, true).await
    }

    /// [`Cluster::read_object`] for the source of a copy: it takes no share of its own,
    /// because the copy's write holds one and paces it.
    ///
    /// # Errors
    /// As [`Cluster::read_object`], without the wait.
    pub async fn read_for_copy(
        self: &Arc<Self>,
        record: &ObjectRecord,
        range: Range<u64>,
    ) -> Result<ObjectBody> {
        self.read(record, range, false).await
    }

    async fn read(
        self: &Arc<Self>,
        record: &ObjectRecord,
        range: Range<u64>,
        budgeted: bool,
    ) -> Result<ObjectBody> {
        let exts = extents(record);
        let size = record.object_size();
        let range = range.start.min(size)..range.end.min(size);
        // Each extent with the object offset it starts at.
        let mut at = 0u64;
        let mut plan = Vec::new();
        for e in exts {
            let start = at;
            at += e.size;
            if start < range.end && at > range.start && e.size > 0 {
                let local = range.start.saturating_sub(start)..(range.end - start).min(e.size);
                plan.push((e, local));
            }
        }
        let (tx, rx) = mpsc::channel(4);
        let Some((first, first_range)) = plan.first().cloned() else {
            return Ok(ObjectBody(rx));
        };
        let share = if budgeted {
            let stripe = u64::from(first.k) * u64::from(first.chunk_size);
            let len = range.end - range.start;
            self.budget.take(Budget::read_share(len, stripe)).await?
        } else {
            Share::none()
        };
        let bucket = record.bucket.clone();
        let stripes = stripe_range(&first, &first_range)?;
        // The first extent is opened here, so that a failure is an error answer.
        let mut opened =
            Some(ExtentReader::open(self.clone(), bucket.clone(), first, stripes).await?);
        let cluster = self.clone();
        let mut meter = BodyMeter::new(self.traffic.clone(), Class::Client, Direction::Out);
        tokio::spawn(async move {
            let _share = share;
            for (ext, r) in plan {
                let reader = if let Some(reader) = opened.take() {
                    Ok(reader)
                } else {
                    match stripe_range(&ext, &r) {
                        Ok(stripes) => {
                            ExtentReader::open(
                                cluster.clone(),
                                bucket.clone(),
                                ext.clone(),
                                stripes,
                            )
                            .await
                        }
                        Err(e) => Err(e),
                    }
                };
                let sent = match reader {
                    Ok(reader) => send_extent(reader, r, &tx, &mut meter).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = sent {
                    tracing::error!(%bucket, key = %ext.key, error = %e, "read failed part-way; the response is cut short");
                    let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                    return;
                }
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(ObjectBody(rx))
    }
}

/// Sends bytes `range` of the extent `reader` reads, stripe by stripe.
async fn send_extent(
    mut reader: ExtentReader,
    range: Range<u64>,
    tx: &mpsc::Sender<std::io::Result<Bytes>>,
    meter: &mut BodyMeter,
) -> Result<()> {
    let size = reader.ext.size;
    let stripes = stripe_range(&reader.ext, &range)?;
    for s in stripes {
        let chunks = reader.stripe(s, size).await?;
        let stripe = reader
            .layout
            .stripe(size, s)
            .ok_or_else(|| Error::BadRequest("read past the end".into()))?;
        for (i, chunk) in chunks.into_iter().enumerate() {
            let r = stripe.chunk_range(i);
            let (lo, hi) = (
                stripe.object_offset + r.start as u64,
                stripe.object_offset + r.end as u64,
            );
            let (a, b) = (lo.max(range.start), hi.min(range.end));
            if a >= b {
                continue;
            }
            // The pieces of the chunk, clipped to bytes a..b of the object.
            let mut at = lo;
            for piece in chunk {
                let (p_lo, p_hi) = (at, at + piece.len() as u64);
                at = p_hi;
                let (x, y) = (p_lo.max(a), p_hi.min(b));
                if x >= y {
                    continue;
                }
                let part = piece.slice((x - p_lo) as usize..(y - p_lo) as usize);
                if tx.send(Ok(part)).await.is_err() {
                    return Ok(());
                }
                meter.add((y - x) as usize);
            }
        }
    }
    Ok(())
}

fn stripe_range(ext: &PartRef, range: &Range<u64>) -> Result<Range<u64>> {
    let layout = oed_ec::Layout::new(ext.k.into(), ext.m.into(), ext.chunk_size)?;
    let ss = layout.stripe_size();
    Ok(range.start / ss..range.end.div_ceil(ss))
}
