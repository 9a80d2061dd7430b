//! The reading side of framed shard reads (the protocol: `crate::frames`).

use std::sync::atomic::Ordering;

use axum::http::{StatusCode, header};
use bytes::{BufMut as _, Bytes, BytesMut};
use futures_util::{StreamExt as _, TryStreamExt as _};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt as _;

use super::wire::{PeerClient, PeerError, PeerResponse, check, key_query, read_headers};
use crate::PeerOp;
use crate::frames::FRAMED_READ;
use oed_ec::format::{CRC_LEN, HEADER_LEN, ShardHeader};
use oed_model::config::READ_BUFFER_MAX;
use oed_model::drive::{DriveError, ErrorCode, ShardRead, ShardStream};
use oed_model::record::VersionId;

/// Sends `GET shard` with `query` to `client`'s drive asking for frames, on a connection
/// kept from an earlier framed read or raw upload when there is one (one the drive has
/// closed since fails before anything is read: then the next, or a new one).
///
/// # Errors
/// [`ErrorCode::Unreachable`] when the request could not be sent; the drive's error
/// answer.
pub(super) async fn request(client: &PeerClient, query: &str) -> Result<PeerResponse, DriveError> {
    let kept = client.kept();
    let request = || {
        client
            .request(PeerOp::GetShard, query, &crate::auth::body_digest(b""))
            .header(header::CONNECTION, "upgrade")
            .header(header::UPGRADE, FRAMED_READ)
    };
    let mut resp = None;
    while let Some(tcp) = kept.take() {
        if let Ok(r) = request().send_on(tcp).await {
            kept.reused.fetch_add(1, Ordering::Relaxed);
            resp = Some(r);
            break;
        }
    }
    let resp = match resp {
        Some(r) => r,
        None => request().send().await?,
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        return Ok(resp);
    }
    check(resp).await
}

/// The shard read a drive's `101` to a framed read starts (`resp`, for `bucket`/`key`):
/// the header and the first frame are read and checked before this returns, as a drive
/// reads and checks the first chunk before it answers an ordinary read. The connection
/// is kept for the next request once the last frame is read.
///
/// # Errors
/// [`ErrorCode::Unreachable`] when the answer or its bytes are not what was asked;
/// [`ErrorCode::CorruptShard`] when the first chunk fails its CRC32C.
pub(super) async fn read(
    client: &PeerClient,
    resp: PeerResponse,
    bucket: &str,
    key: &str,
) -> Result<ShardRead, DriveError> {
    let (version, stripes) = read_headers(&resp)?;
    let upgraded = hyper::upgrade::on(resp.into_inner())
        .await
        .map_err(PeerError::transport)?;
    let parts = upgraded
        .downcast::<TokioIo<crate::tls::PeerStream>>()
        .map_err(|_| {
            DriveError::unreachable("a framed read's connection is not a peer connection")
        })?;
    let crate::tls::PeerStream::Plain(tcp) = parts.io.into_inner() else {
        return Err(DriveError::unreachable(
            "a framed read's connection is not plain TCP",
        ));
    };
    let mut frames = Frames {
        tcp,
        prefix: parts.read_buf,
        header: None,
        next: stripes.start,
        end: stripes.end,
        client: client.clone(),
        query: key_query(bucket, key, Some(version)),
    };
    let head: Vec<u8> = frames.take(HEADER_LEN).await?.concat();
    let head: &[u8; HEADER_LEN] = head[..]
        .try_into()
        .map_err(|_| DriveError::unreachable("short shard header"))?;
    // A header that does not decode, or names another version or fewer stripes, is a
    // corrupt shard as it is for an ordinary read: the drive is asked to look.
    let header = match ShardHeader::decode(head) {
        Ok(h) if VersionId(h.version_id) == version && stripes.end <= h.stripe_count() => h,
        other => {
            frames.report(stripes.start).await;
            let why = other.map_or_else(|e| e.to_string(), |_| "another shard's".into());
            return Err(DriveError::new(
                ErrorCode::CorruptShard,
                format!(
                    "stripe {}: the shard's header where it arrived: {why}",
                    stripes.start
                ),
            ));
        }
    };
    frames.header = Some(header);
    let first = if frames.next < frames.end {
        Some(frames.chunk().await?)
    } else {
        None
    };
    let state = if frames.next < frames.end {
        Some(frames)
    } else {
        frames.keep();
        None
    };
    let rest = futures_util::stream::unfold(state, |st| async move {
        let mut f = st?;
        let chunk = f.chunk().await;
        let next = match &chunk {
            Ok(_) if f.next >= f.end => {
                f.keep();
                None
            }
            Ok(_) => Some(f),
            Err(_) => None,
        };
        Some((chunk, next))
    });
    let first = futures_util::stream::iter(first.map(Ok));
    let chunks: ShardStream = Box::pin(
        first
            .chain(rest)
            .map_ok(|pieces| futures_util::stream::iter(pieces.into_iter().map(Ok)))
            .try_flatten(),
    );
    Ok(ShardRead {
        version,
        stripes,
        chunks,
    })
}

/// Takes the last [`CRC_LEN`] bytes off `pieces` (a frame), as the CRC32C they hold.
fn split_crc(pieces: &mut Vec<Bytes>) -> u32 {
    let mut crc = [0u8; CRC_LEN];
    let mut need = CRC_LEN;
    while need > 0 {
        let Some(last) = pieces.last_mut() else {
            break;
        };
        let take = need.min(last.len());
        crc[need - take..need].copy_from_slice(&last[last.len() - take..]);
        last.truncate(last.len() - take);
        need -= take;
        if last.is_empty() {
            pieces.pop();
        }
    }
    u32::from_le_bytes(crc)
}

/// The frames of a framed read, as they arrive.
struct Frames {
    tcp: tokio::net::TcpStream,
    /// What the connection read past the `101` before it was handed over.
    prefix: Bytes,
    header: Option<ShardHeader>,
    next: u64,
    end: u64,
    /// The drive, and the query naming the shard's version: to read a bad chunk again.
    client: PeerClient,
    query: String,
}

impl Frames {
    /// The next `n` bytes, in pieces of at most [`READ_BUFFER_MAX`] bytes, each read
    /// straight into its buffer. Pieces of the size hyper reads a body in: a buffer the
    /// size of a chunk (256 KiB by default) for each shard being read raised a
    /// coordinator's peak memory by about 2 MiB with 16 clients reading 4 MiB objects.
    async fn take(&mut self, n: usize) -> Result<Vec<Bytes>, DriveError> {
        let mut pieces = Vec::with_capacity(n.div_ceil(READ_BUFFER_MAX) + 1);
        let mut left = n;
        if !self.prefix.is_empty() {
            let early = left.min(self.prefix.len());
            pieces.push(self.prefix.split_to(early));
            left -= early;
        }
        while left > 0 {
            let size = left.min(READ_BUFFER_MAX);
            let mut buf = BytesMut::with_capacity(size);
            while buf.len() < size {
                let room = size - buf.len();
                match self.tcp.read_buf(&mut (&mut buf).limit(room)).await {
                    Ok(0) => return Err(DriveError::unreachable("framed read ended early")),
                    Ok(_) => {}
                    Err(e) => {
                        return Err(DriveError::unreachable(format!("framed read broken: {e}")));
                    }
                }
            }
            left -= size;
            pieces.push(buf.freeze());
        }
        Ok(pieces)
    }

    /// The next chunk, its CRC32C checked, in the pieces it was read in. One that fails
    /// it is read once more the ordinary way, so that its drive checks it too and queues
    /// the shard for heal; this read ends with [`ErrorCode::CorruptShard`].
    async fn chunk(&mut self) -> Result<Vec<Bytes>, DriveError> {
        let s = self.next;
        let len = self.header.map_or(0, |h| h.chunk_len(s));
        let mut pieces = self.take(len + CRC_LEN).await?;
        let crc = split_crc(&mut pieces);
        if oed_ec::format::frame_crc_pieces(s, &pieces) != crc {
            self.report(s).await;
            return Err(DriveError::new(
                ErrorCode::CorruptShard,
                format!("stripe {s}: the chunk failed its CRC32C where it arrived"),
            ));
        }
        self.next += 1;
        Ok(pieces)
    }

    /// Reads stripe `s` again the ordinary way: the drive checks its chunk as it reads
    /// it and queues the shard for heal when it is bad there too (a chunk the disk holds
    /// intact was damaged on the way: nothing to heal). Done before the read reports the
    /// bad chunk, so that the heal is queued when the caller hears of it.
    async fn report(&self, s: u64) {
        let query = format!("{}&from={s}&to={}", self.query, s + 1);
        match self.client.read_ordinary(&query).await {
            Ok(read) => {
                let _ = read.chunks.count().await;
            }
            Err(e) => tracing::debug!(error = %e, "a bad chunk's second read"),
        }
    }

    /// Keeps the connection for the next request, the read being over.
    fn keep(self) {
        if self.prefix.is_empty() {
            self.client.kept().put(self.tcp);
        }
    }
}
