//! The read path: an object's bytes for a client. Each extent (the object, or each of its
//! parts) is read through a [`StripeSource`] that wants the `k` data chunks of every
//! stripe: on the healthy path they are sent on as they arrived, with no decoding; a
//! drive that is down, too slow, or sends a chunk that fails its CRC32C is replaced by
//! parity from that stripe on. A range reads only the stripes that hold it. When fewer
//! than `k` chunks of a stripe can be had, the read fails: never wrong bytes.

use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::mpsc;

use super::Cluster;
use super::budget::{Budget, Share};
use super::stripes::StripeSource;
use oed_meter::traffic::{BodyMeter, Class, Direction};
use oed_model::error::Result;
use oed_model::record::{ObjectRecord, PartRef};

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
        self.read(record, range, Pacing::Take).await
    }

    /// The share of the [`Budget`] a read of a large object coded with the cluster's
    /// profile takes, taken now: for a GET, before it looks its object up, so that a GET
    /// that would wait for its share does not first hold a connection to every drive
    /// for the lookup (connections then follow the reads moving data, not the clients).
    /// [`Cluster::read_object_with`] keeps what the read needs of it.
    ///
    /// # Errors
    /// [`Error::SlowDown`] when no share comes free in time.
    pub async fn take_read_share(&self) -> Result<Share> {
        let p = self.map().profile;
        let stripe = u64::from(p.k) * u64::from(p.chunk_size);
        self.budget.take(Budget::read_share(u64::MAX, stripe)).await
    }

    /// [`Cluster::read_object`] with a share taken before ([`Cluster::take_read_share`]):
    /// what the read does not need of it is given back at once; a read that needs more
    /// (an object coded in larger stripes) gives it back and waits for its own.
    ///
    /// # Errors
    /// As [`Cluster::read_object`].
    pub async fn read_object_with(
        self: &Arc<Self>,
        record: &ObjectRecord,
        range: Range<u64>,
        share: Share,
    ) -> Result<ObjectBody> {
        self.read(record, range, Pacing::Held(share)).await
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
        self.read(record, range, Pacing::Unpaced).await
    }

    async fn read(
        self: &Arc<Self>,
        record: &ObjectRecord,
        range: Range<u64>,
        pacing: Pacing,
    ) -> Result<ObjectBody> {
        let exts = extents(record);
        let size = record.object_size();
        let range = range.start.min(size)..range.end.min(size);
        // Each extent with the object offset it starts at.
        let mut at = 0u64;
        let mut plan = Vec::new();
        for e in exts {
            let start = at;
            at = at.saturating_add(e.size);
            if start < range.end && at > range.start && e.size > 0 {
                let local = range.start.saturating_sub(start)..(range.end - start).min(e.size);
                plan.push((e, local));
            }
        }
        let (tx, rx) = mpsc::channel(4);
        let Some((first, first_range)) = plan.first().cloned() else {
            return Ok(ObjectBody(rx));
        };
        let stripe = u64::from(first.k) * u64::from(first.chunk_size);
        let need = Budget::read_share(range.end - range.start, stripe);
        let share = match pacing {
            Pacing::Take => self.budget.take(need).await?,
            // A share is never more than the whole budget (see [`Budget::take`]).
            Pacing::Held(mut share) if share.bytes() >= need.min(self.budget.limit_bytes()) => {
                share.shrink_to(need);
                share
            }
            Pacing::Held(share) => {
                drop(share);
                self.budget.take(need).await?
            }
            Pacing::Unpaced => Share::none(),
        };
        let bucket = record.bucket.clone();
        let stripes = stripe_range(&first, &first_range)?;
        // The first extent is opened here, so that a failure is an error answer.
        let mut opened = Some(self.data_stripes(&bucket, first, stripes).await?);
        let cluster = self.clone();
        let mut meter = BodyMeter::new(self.traffic.clone(), Class::Client, Direction::Out);
        self.tasks.spawn(async move {
            let _share = share;
            for (ext, r) in plan {
                let reader = if let Some(reader) = opened.take() {
                    Ok(reader)
                } else {
                    match stripe_range(&ext, &r) {
                        Ok(stripes) => cluster.data_stripes(&bucket, ext.clone(), stripes).await,
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

/// How a read holds its share of the [`Budget`].
enum Pacing {
    /// It takes its own.
    Take,
    /// It was taken before; the read keeps what it needs of it.
    Held(Share),
    /// None: the read is paced by a share held elsewhere (a copy's write).
    Unpaced,
}

impl Cluster {
    /// The data chunks of stripes `stripes` of `ext`.
    async fn data_stripes(
        self: &Arc<Self>,
        bucket: &str,
        ext: PartRef,
        stripes: Range<u64>,
    ) -> Result<StripeSource> {
        let want = (0..usize::from(ext.k)).collect();
        StripeSource::open(self.clone(), bucket, ext, stripes, want).await
    }
}

/// Sends bytes `range` (extent offsets) of the extent `source` reads, stripe by stripe.
async fn send_extent(
    mut source: StripeSource,
    range: Range<u64>,
    tx: &mpsc::Sender<std::io::Result<Bytes>>,
    meter: &mut BodyMeter,
) -> Result<()> {
    while let Some(stripe) = source.next().await? {
        for chunk in stripe.chunks {
            let lo = chunk.offset;
            let hi = lo + chunk.data_len as u64;
            let (a, b) = (lo.max(range.start), hi.min(range.end));
            if a >= b {
                continue;
            }
            // The pieces of the chunk, clipped to bytes a..b of the extent.
            let mut at = lo;
            for piece in chunk.pieces {
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
