//! Framed shard reads: `GET shard` upgraded to a connection of its own, on which the drive
//! sends the shard file's header and the frames of the stripes asked for (each chunk with
//! its CRC32C) as they lie in the file, with `sendfile`: the bytes go from the page cache
//! to the socket without passing through the daemon. The reader checks every frame's
//! CRC32C before it passes the chunk on (`docs/peer-api.md`, "Framed reads").
//!
//! The request is the signed `GET shard` with the headers `Connection: upgrade` and
//! `Upgrade: oed-frames`. A drive that can send the shard so (plain TCP, a shard file of
//! the length its record gives) answers `101 Switching Protocols` with the usual
//! `x-oed-version-id` and `x-oed-stripes`, then sends the 64-byte header and the frames of
//! those stripes, and serves HTTP on the connection again. Otherwise it answers as to any
//! `GET shard`: with the chunks as a body, or with an error.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;

use super::raw::{ConnectionHold, ServeAgain};
use super::{PeerOp, PeerState};
use oed_ec::format::{CRC_LEN, HEADER_LEN, ShardHeader};
use oed_meter::traffic::{BodyMeter, Class, Direction};
use oed_model::record::{ObjectRecord, VersionId};
use oed_store::{ShardBytes, ShardFile, Store};

/// The protocol named in the `Upgrade` header of a framed read.
pub const FRAMED_READ: &str = "oed-frames";

/// The most one `sendfile` may wait for the reader to take bytes.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// The buffer frames are read into when they are not sent with `sendfile`: a chunk of
/// the default size and its CRC32C, in one read and one write.
const COPY_BUFFER: usize = 256 * 1024 + CRC_LEN;

/// What a drive sends on a framed read: the file, its bytes to send (the header, then the
/// frames from `frames.start` to `frames.end`), and what it answers about them.
struct FramedSend {
    record: ObjectRecord,
    file: ShardFile,
    open: std::fs::File,
    header: ShardHeader,
    stripes: Range<u64>,
    frames: Range<u64>,
}

/// The plan of a framed read of `stripes` (clipped) of the shard `bucket`/`key` here, or
/// `None` when it is to be answered the ordinary way: no such shard (the ordinary answer
/// says so), a shard kept inline, a file that is missing or not of its record's length
/// (the ordinary read finds it corrupt and queues its heal), a reversed range.
fn plan(
    store: &Store,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
    stripes: Option<Range<u64>>,
) -> Option<FramedSend> {
    let (record, bytes) = store.shard(bucket, key, version).ok()?;
    let ShardBytes::File(file) = bytes else {
        return None;
    };
    let header = record.shard_header().ok()?;
    let open = std::fs::File::open(file.path()).ok()?;
    let len = open.metadata().ok()?.len();
    if len != header.file_len() {
        return None;
    }
    let count = header.stripe_count();
    let asked = stripes.unwrap_or(0..count);
    let stripes = asked.start..asked.end.min(count);
    if stripes.start > stripes.end {
        return None;
    }
    let frames =
        header.frame_offset(stripes.start).min(len)..header.frame_offset(stripes.end).min(len);
    Some(FramedSend {
        record,
        file,
        open,
        header,
        stripes,
        frames,
    })
}

/// Answers `GET shard` asking for frames with 101 and sends them on the upgraded
/// connection in a task of its own; `None` when the request is to be answered the
/// ordinary way (see [`plan`]; and over TLS, where nothing can be sent from the file).
pub(super) fn accept(
    state: &Arc<PeerState>,
    store: &Store,
    q: &super::ObjectQuery,
    mut req: Request,
) -> Option<Response> {
    // Only a connection in the clear can be served again, and sent to from a file.
    let again = req.extensions_mut().remove::<ServeAgain>()?;
    let plan = plan(store, &q.bucket, &q.key, q.version().ok()?, q.stripes())?;
    let on_upgrade = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>()?;
    let hold = req.extensions_mut().remove::<ConnectionHold>();
    let (version, stripes) = (plan.record.version_id, plan.stripes.clone());
    let (state, store) = (state.clone(), store.clone());
    tokio::spawn(async move {
        let _hold = hold;
        let Some((upgraded, _permit, started)) =
            super::raw::upgrade(&state, on_upgrade, "framed read").await
        else {
            return;
        };
        let Ok(parts) =
            upgraded.downcast::<TokioIo<crate::stall::WriteDeadline<tokio::net::TcpStream>>>()
        else {
            return;
        };
        // A GET has no body: bytes the reader sent after its request break the protocol.
        if !parts.read_buf.is_empty() {
            tracing::debug!("a framed read's reader sent bytes after its request: closed");
            return;
        }
        let tcp = parts.io.into_inner().into_inner();
        state.traffic.shard_read(plan.stripes.start);
        let (sent, bytes) = send(tcp, plan, &store, state.sendfile).await;
        let status = if sent.is_ok() { 200 } else { 500 };
        state.traffic.request(
            "peer",
            PeerOp::GetShard.name(),
            status,
            started.elapsed().as_secs_f64(),
        );
        // Counted as a body's bytes are: what went out, of a read that broke too.
        BodyMeter::new(state.traffic.clone(), Class::Peer, Direction::Out)
            .add(usize::try_from(bytes).unwrap_or(usize::MAX));
        match sent {
            Ok(tcp) => {
                state.framed_reads.fetch_add(1, Ordering::Relaxed);
                again.serve(tcp);
            }
            Err(e) => tracing::debug!(error = %e, "a framed read ended early; connection closed"),
        }
    });
    let mut resp = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(FRAMED_READ));
    super::read_headers(h, version, &stripes);
    Some(resp)
}

/// Sends `plan`'s header and frames on `tcp` from the file, on a blocking thread (a read
/// of pages not in the page cache waits for the disk), with `sendfile` (`zero_copy`) or
/// through a buffer. Returns the connection, ready to serve again, and the bytes sent
/// (also when sending failed). A disk that cannot read the file (`EIO`) has the shard
/// queued for heal, as an ordinary read's would.
async fn send(
    tcp: tokio::net::TcpStream,
    plan: FramedSend,
    store: &Store,
    zero_copy: bool,
) -> (std::io::Result<tokio::net::TcpStream>, u64) {
    let blocking = |tcp: std::net::TcpStream| -> std::io::Result<std::net::TcpStream> {
        tcp.set_nonblocking(false)?;
        tcp.set_write_timeout(Some(SEND_TIMEOUT))?;
        Ok(tcp)
    };
    let tcp = match tcp.into_std().and_then(blocking) {
        Ok(tcp) => tcp,
        Err(e) => return (Err(e), 0),
    };
    let store = store.clone();
    let sent = tokio::task::spawn_blocking(move || {
        let FramedSend {
            record,
            file,
            mut open,
            header,
            frames,
            ..
        } = plan;
        let mut sent = 0u64;
        let step = if zero_copy { send_range } else { copy_range };
        for range in [0..HEADER_LEN as u64, frames] {
            if let Err(stop) = step(&tcp, &mut open, range, &mut sent) {
                let e = match stop {
                    Stop::Disk(at) => {
                        let frame = (header.layout.chunk_size() + CRC_LEN) as u64;
                        store.read_failed(&record, at.saturating_sub(HEADER_LEN as u64) / frame);
                        std::io::Error::from(rustix::io::Errno::IO)
                    }
                    Stop::Io(e) => e,
                };
                return (Err(e), sent);
            }
        }
        drop(file);
        let again = tcp
            .set_write_timeout(None)
            .and_then(|()| tcp.set_nonblocking(true))
            .map(|()| tcp);
        (again, sent)
    })
    .await;
    match sent {
        Ok((tcp, n)) => (tcp.and_then(tokio::net::TcpStream::from_std), n),
        Err(e) => (Err(std::io::Error::other(e)), 0),
    }
}

/// Why sending a framed read stopped.
enum Stop {
    /// The disk could not read the file at this offset.
    Disk(u64),
    /// Anything else (the reader went away, the send timed out).
    Io(std::io::Error),
}

/// Sends bytes `range` of `file` on `tcp` with `sendfile`, adding them to `sent`.
fn send_range(
    tcp: &std::net::TcpStream,
    file: &mut std::fs::File,
    range: Range<u64>,
    sent: &mut u64,
) -> Result<(), Stop> {
    let mut at = range.start;
    while at < range.end {
        let left = usize::try_from(range.end - at).unwrap_or(usize::MAX);
        match rustix::fs::sendfile(tcp, &*file, Some(&mut at), left) {
            Ok(0) => return Err(Stop::Io(std::io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => *sent += n as u64,
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::IO) => return Err(Stop::Disk(at)),
            Err(e) => return Err(Stop::Io(e.into())),
        }
    }
    Ok(())
}

/// Sends bytes `range` of `file` on `tcp` read through a buffer, adding them to `sent`.
/// The buffer is read into without being zeroed first ([`oed_store::read_uninit`]).
fn copy_range(
    tcp: &std::net::TcpStream,
    file: &mut std::fs::File,
    range: Range<u64>,
    sent: &mut u64,
) -> Result<(), Stop> {
    use std::io::{Seek as _, Write as _};
    let len = usize::try_from(range.end - range.start).unwrap_or(usize::MAX);
    let mut buf = Vec::with_capacity(COPY_BUFFER.min(len));
    file.seek(std::io::SeekFrom::Start(range.start))
        .map_err(Stop::Io)?;
    let mut at = range.start;
    let mut w = tcp;
    while at < range.end {
        let n = usize::try_from(range.end - at)
            .unwrap_or(usize::MAX)
            .min(COPY_BUFFER);
        buf.clear();
        oed_store::read_uninit(file, &mut buf, n).map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()) {
                Stop::Disk(at)
            } else {
                Stop::Io(e)
            }
        })?;
        w.write_all(&buf).map_err(Stop::Io)?;
        at += n as u64;
        *sent += n as u64;
    }
    Ok(())
}
