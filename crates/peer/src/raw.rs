//! Raw shard uploads: `PUT shard` upgraded to a connection of its own, so a drive can
//! move the shard's bytes from the socket into its file without reading them into the
//! daemon (`oed_store::RawUpload`, `docs/peer-api.md`, "Raw uploads").
//!
//! The request is the same signed `PUT shard` with an empty body and the headers
//! `Connection: upgrade` and `Upgrade: oed-shard`. Once its signature and epoch are
//! checked the drive answers `101 Switching Protocols`; the sender then sends the body
//! it would have sent (the shard file, then the record tail with `tail=true`) and shuts
//! down its side of the connection. The drive answers with one frame, `STATUS LENGTH\n`
//! then `LENGTH` bytes of JSON (the stored record, or the error as a drive error
//! answer), and closes the connection.
//!
//! A sender that asks with `x-oed-raw-keep: 1` ([`KEEP_HEADER`]) keeps the connection
//! for its next request, if the drive's `101` says `x-oed-raw-keep: 1` too: it does not
//! shut down its side, and ends the body itself: the shard file (whose length the record
//! gives), then the length of what follows it in 4 bytes, big-endian, and that (the
//! record tail with `tail=true`; else nothing, length 0). After an answer of `200` the
//! drive serves HTTP on the connection again; after an error it closes it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{Buf, Bytes};
use futures_util::StreamExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::auth;
use super::client::{PeerClient, PeerError, check};
use super::{DRAIN_LIMIT, PeerOp, PeerState, PutShardQuery};
use oed_meter::traffic::{BodyMeter, Class, Direction};
use oed_model::drive::{DriveError, ErrorCode, ShardUpload, Stored};
use oed_model::error::Error;
use oed_model::record::{MAX_TAIL_BYTES, ObjectRecord};
use oed_store::{RawConn, RawUpload, Store};

/// The protocol named in the `Upgrade` header of a raw upload.
pub const RAW_UPLOAD: &str = "oed-shard";

/// The header with which a raw upload's sender asks to keep the connection, and the
/// drive's `101` says it will.
pub const KEEP_HEADER: &str = "x-oed-raw-keep";

/// Hands a connection back to the server that upgraded it, to serve HTTP on it again
/// (the server puts it in each request's extensions).
#[derive(Clone)]
pub struct ServeAgain(Arc<dyn Fn(tokio::net::TcpStream) + Send + Sync>);

impl ServeAgain {
    /// Serves a connection again with `serve`.
    pub fn new(serve: impl Fn(tokio::net::TcpStream) + Send + Sync + 'static) -> Self {
        Self(Arc::new(serve))
    }

    /// Serves `tcp` again.
    pub(super) fn serve(&self, tcp: tokio::net::TcpStream) {
        (self.0)(tcp);
    }
}

impl std::fmt::Debug for ServeAgain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServeAgain")
    }
}

/// The most an answer's writing may wait for the sender to read it.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// What a connection holds while it is open, held by the raw uploads it was upgraded to
/// as well (the server puts it in each request's extensions): the server's graceful
/// shutdown waits for it, and it counts against `max_connections`.
#[derive(Clone, Debug)]
pub struct ConnectionHold {
    _shutdown: Arc<hyper_util::server::graceful::Watcher>,
    _slot: Arc<tokio::sync::OwnedSemaphorePermit>,
}

impl ConnectionHold {
    /// Holds `shutdown` and `slot` for as long as a clone lives.
    #[must_use]
    pub fn new(
        shutdown: hyper_util::server::graceful::Watcher,
        slot: Arc<tokio::sync::OwnedSemaphorePermit>,
    ) -> Self {
        Self {
            _shutdown: Arc::new(shutdown),
            _slot: slot,
        }
    }
}

/// Answers an upgrade request of `PUT shard` with 101 and receives the upload on the
/// upgraded connection in a task of its own; refuses it when the record is not JSON or
/// the connection cannot be upgraded.
pub(super) fn accept(
    state: Arc<PeerState>,
    store: Store,
    q: &PutShardQuery,
    mut req: Request,
) -> Response {
    let record = match serde_json::from_str::<ObjectRecord>(&q.record) {
        Ok(r) => r,
        Err(e) => return Error::BadRequest(format!("record: {e}")).into_response(),
    };
    let Some(on_upgrade) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() else {
        return Error::BadRequest("this connection cannot be upgraded".into()).into_response();
    };
    let hold = req.extensions_mut().remove::<ConnectionHold>();
    let again = req.extensions_mut().remove::<ServeAgain>();
    let tail = q.tail.unwrap_or(false);
    // The sender keeps the connection when it asks to and the server can serve it again;
    // a record without a shard file's length is refused by the store, however sent.
    let kept_len = req
        .headers()
        .get(KEEP_HEADER)
        .filter(|v| *v == "1" && again.is_some())
        .and_then(|_| record.shard_header().ok())
        .map(|h| h.file_len());
    tokio::spawn(async move {
        let _hold = hold;
        let Some((upgraded, _permit, started)) = upgrade(&state, on_upgrade, "raw upload").await
        else {
            return;
        };
        let (prefix, conn) = match upgraded
            .downcast::<TokioIo<crate::stall::WriteDeadline<tokio::net::TcpStream>>>()
        {
            Ok(parts) => (
                parts.read_buf,
                RawConn::Tcp(parts.io.into_inner().into_inner()),
            ),
            Err(u) => (Bytes::new(), RawConn::Other(TokioIo::new(u))),
        };
        let mut up = match kept_len {
            Some(len) => RawUpload::kept(prefix, conn, len),
            None => RawUpload::new(prefix, conn),
        };
        let result = store
            .put_shard_raw(record, &mut up, tail)
            .await
            .map(|mut stored| {
                oed_store::without_file(&mut stored.record);
                stored
            })
            .map_err(DriveError::from);
        let (status, body) = match &result {
            Ok(stored) => (StatusCode::OK, serde_json::to_vec(stored)),
            Err(e) => (e.code.status(), serde_json::to_vec(e)),
        };
        let body = body.unwrap_or_else(|_| b"{}".to_vec());
        state.traffic.request(
            "peer",
            super::PeerOp::PutShard.name(),
            status.as_u16(),
            started.elapsed().as_secs_f64(),
        );
        let keep = result.is_ok() && up.read_whole();
        let (drained, answered) = answer(&mut up, status, &body, result.is_err(), keep).await;
        // Counted as an upload's body is: what came, the drained rest included.
        let mut meter = BodyMeter::new(state.traffic.clone(), Class::Peer, Direction::In);
        meter.add(usize::try_from(up.received() + drained).unwrap_or(usize::MAX));
        if keep
            && answered
            && let (RawConn::Tcp(tcp), Some(again)) = (up.into_conn(), again)
        {
            state
                .raw_connections_kept
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            again.serve(tcp);
        }
    });
    let mut resp = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(RAW_UPLOAD));
    if kept_len.is_some() {
        h.insert(KEEP_HEADER, HeaderValue::from_static("1"));
    }
    resp
}

/// The connection of a request answered with `101`, once upgraded (`what` names the
/// request in the log when it is not), with a slot of the requests being served (it is
/// counted with them, as the request was before its upgrade) and when it started.
pub(super) async fn upgrade(
    state: &PeerState,
    on_upgrade: hyper::upgrade::OnUpgrade,
    what: &str,
) -> Option<(
    hyper::upgrade::Upgraded,
    Result<tokio::sync::OwnedSemaphorePermit, tokio::sync::AcquireError>,
    Instant,
)> {
    let permit = state.slots.clone().acquire_owned().await;
    let started = Instant::now();
    match on_upgrade.await {
        Ok(u) => Some((u, permit, started)),
        Err(e) => {
            tracing::debug!(error = %e, "a {what}'s connection was not upgraded");
            None
        }
    }
}

/// Sends the answer frame and, unless the connection is `kept`, closes the connection.
/// After an error the rest of the upload, up to [`DRAIN_LIMIT`] bytes or 5 s, is read and
/// dropped first, so that a sender still sending reads the answer rather than a reset.
/// Returns the bytes dropped, and whether the answer went out.
async fn answer(
    up: &mut RawUpload,
    status: StatusCode,
    body: &[u8],
    drain: bool,
    kept: bool,
) -> (u64, bool) {
    let conn = up.conn();
    let mut frame = format!("{} {}\n", status.as_u16(), body.len()).into_bytes();
    frame.extend_from_slice(body);
    match tokio::time::timeout(ANSWER_TIMEOUT, conn.write_all(&frame)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "a raw upload's answer could not be sent");
            return (0, false);
        }
        Err(_) => {
            tracing::debug!("a raw upload's sender read nothing of its answer");
            return (0, false);
        }
    }
    if kept {
        return (0, true);
    }
    let mut dropped = 0u64;
    if drain {
        let rest = async {
            let mut sink = vec![0u8; 64 * 1024];
            while dropped < DRAIN_LIMIT as u64 {
                match conn.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => dropped += n as u64,
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), rest).await;
    }
    let _ = tokio::time::timeout(ANSWER_TIMEOUT, conn.shutdown()).await;
    (dropped, true)
}

/// How a raw upload went, seen from its sender.
pub(super) enum Sent {
    /// The drive's answer (boxed: a record is large).
    Answer(Box<Result<Stored, DriveError>>),
    /// The drive took the request as an upload without a body (a version before raw
    /// uploads): the body, unsent, to send the usual way.
    NotTaken(ShardUpload),
}

/// Connections of raw uploads a drive client keeps for its next ones: at most
/// [`KEPT_MAX`], each for at most [`KEPT_IDLE`].
#[derive(Debug, Default)]
pub(super) struct KeptConnections {
    idle: std::sync::Mutex<Vec<(tokio::net::TcpStream, Instant)>>,
    /// Raw uploads and framed reads the drive answered on a kept connection.
    pub(super) reused: std::sync::atomic::AtomicU64,
}

/// The most connections kept per drive, as the pool keeps for other requests.
const KEPT_MAX: usize = 16;

/// How long a kept connection waits for its next upload: less than the shortest
/// `http_header_timeout_seconds` (16 s), after which the drive closes it.
const KEPT_IDLE: Duration = Duration::from_secs(15);

impl KeptConnections {
    /// The connection kept last, if one is kept and fresh.
    pub(super) fn take(&self) -> Option<tokio::net::TcpStream> {
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        idle.retain(|(_, since)| since.elapsed() < KEPT_IDLE);
        idle.pop().map(|(tcp, _)| tcp)
    }

    pub(super) fn reused(&self) -> u64 {
        self.reused.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn len(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    pub(super) fn put(&self, tcp: tokio::net::TcpStream) {
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if idle.len() < KEPT_MAX {
            idle.push((tcp, Instant::now()));
        }
    }
}

/// Sends `body`, whose shard file is `file_len` bytes, to `client`'s drive as a raw upload
/// of `PUT shard` with `query`, and reads the drive's answer (which may come before the
/// body is all sent, when the drive refuses it early). It goes on a connection kept from
/// an earlier raw upload when there is one, and keeps its own for the next when the
/// drive agrees and stores the shard.
///
/// # Errors
/// [`ErrorCode::Unreachable`] when the request could not be sent.
pub(super) async fn put_shard(
    client: &PeerClient,
    query: &str,
    body: ShardUpload,
    file_len: u64,
) -> Result<Sent, DriveError> {
    let kept = client.kept();
    let request = || {
        client
            .request(PeerOp::PutShard, query, auth::STREAMING)
            .header(header::CONNECTION, "upgrade")
            .header(header::UPGRADE, RAW_UPLOAD)
            .header(http::HeaderName::from_static(KEEP_HEADER), "1")
    };
    // A kept connection the drive has closed since fails before any of the body is
    // sent: then a new one.
    let mut resp = None;
    while let Some(tcp) = kept.take() {
        if let Ok(r) = request().send_on(tcp).await {
            kept.reused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            resp = Some(r);
            break;
        }
    }
    let resp = match resp {
        Some(r) => r,
        None => request().send().await?,
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let e = match check(resp).await {
            Err(e) => e,
            Ok(_) => {
                DriveError::unreachable("the drive took a raw upload without switching protocols")
            }
        };
        if e.code == ErrorCode::IncompleteBody {
            return Ok(Sent::NotTaken(body));
        }
        return Ok(Sent::Answer(Box::new(Err(e))));
    }
    let keep = resp.header(KEEP_HEADER) == Some("1");
    let upgraded = hyper::upgrade::on(resp.into_inner())
        .await
        .map_err(PeerError::transport)?;
    let (mut rd, mut wr) = tokio::io::split(TokioIo::new(upgraded));
    let send = async move {
        let sent = send_body(&mut wr, body, keep.then_some(file_len)).await;
        (sent, wr)
    };
    let answer = async move {
        let answer = read_answer(&mut rd).await;
        (answer, rd)
    };
    tokio::pin!(send, answer);
    let (sent, wr) = tokio::select! {
        sent = &mut send => sent,
        (answer, _) = &mut answer => return Ok(Sent::Answer(Box::new(answer))),
    };
    match sent {
        Ok(framed) => {
            let (answer, rd) = answer.await;
            if framed && answer.is_ok() {
                keep_connection(kept, rd.unsplit(wr));
            }
            Ok(Sent::Answer(Box::new(answer)))
        }
        // The body failed on this side (its sender gave up): the connection closes with
        // the upload incomplete, which the drive refuses.
        Err(Failed::Body(e)) => Err(DriveError::unreachable(format!(
            "raw upload: the body failed: {e}"
        ))),
        // The drive may have answered and closed: its answer says why.
        Err(Failed::Conn(e)) => match tokio::time::timeout(Duration::from_secs(1), answer).await {
            Ok((Ok(stored), _)) => Ok(Sent::Answer(Box::new(Ok(stored)))),
            Ok((Err(a), _)) if a.code != ErrorCode::Unreachable => {
                Ok(Sent::Answer(Box::new(Err(a))))
            }
            _ => Err(DriveError::unreachable(format!(
                "raw upload: sending failed: {e}"
            ))),
        },
    }
}

/// Sends `body`. Without `kept_len` it then shuts down this side of the connection, which
/// ends the upload. With it (the shard file's length, the connection being kept) it sends
/// the file, then what follows it (the record tail) with its length in front, and
/// returns whether it framed the upload so; a body that ends inside the file is ended by
/// a shutdown as well, which the drive refuses as incomplete.
async fn send_body<W: AsyncWrite + Unpin>(
    wr: &mut W,
    body: ShardUpload,
    kept_len: Option<u64>,
) -> Result<bool, Failed> {
    // Pieces that are ready go out in one call: a chunk and its 4-byte CRC together.
    let mut body = body.ready_chunks(32);
    let mut file_left = kept_len.unwrap_or(u64::MAX);
    let mut rest = Vec::new();
    while let Some(pieces) = body.next().await {
        let mut pieces: Vec<Bytes> = pieces
            .into_iter()
            .collect::<std::io::Result<_>>()
            .map_err(Failed::Body)?;
        if kept_len.is_some() {
            for p in &mut pieces {
                let file = p
                    .len()
                    .min(usize::try_from(file_left).unwrap_or(usize::MAX));
                file_left -= file as u64;
                let after = p.split_off(file);
                // More than a tail may be is refused by the drive all the same.
                let room = (MAX_TAIL_BYTES + 1).saturating_sub(rest.len());
                rest.extend_from_slice(&after[..after.len().min(room)]);
            }
        }
        write_all_vectored(wr, &mut pieces)
            .await
            .map_err(Failed::Conn)?;
    }
    if kept_len.is_none() || file_left > 0 {
        wr.shutdown().await.map_err(Failed::Conn)?;
        return Ok(false);
    }
    let len = u32::try_from(rest.len()).unwrap_or(u32::MAX);
    let mut end = Vec::with_capacity(4 + rest.len());
    end.extend_from_slice(&len.to_be_bytes());
    end.extend_from_slice(&rest);
    wr.write_all(&end).await.map_err(Failed::Conn)?;
    Ok(true)
}

/// Keeps the connection of a raw upload that is over, when it is a plain TCP connection
/// with nothing of the drive's left unread.
fn keep_connection(kept: &KeptConnections, io: TokioIo<hyper::upgrade::Upgraded>) {
    match io
        .into_inner()
        .downcast::<TokioIo<crate::tls::PeerStream>>()
    {
        Ok(parts) if parts.read_buf.is_empty() => {
            if let crate::tls::PeerStream::Plain(tcp) = parts.io.into_inner() {
                kept.put(tcp);
            }
        }
        Ok(_) => tracing::debug!("a raw upload's connection had bytes left over: not kept"),
        Err(_) => tracing::debug!("a raw upload's connection is not plain TCP: not kept"),
    }
}

/// Why sending a raw upload's body stopped.
enum Failed {
    Body(std::io::Error),
    Conn(std::io::Error),
}

/// Writes all of `pieces`, as many in each call as the connection takes.
async fn write_all_vectored<W: AsyncWrite + Unpin>(
    w: &mut W,
    pieces: &mut [Bytes],
) -> std::io::Result<()> {
    let mut i = 0;
    loop {
        while i < pieces.len() && pieces[i].is_empty() {
            i += 1;
        }
        if i == pieces.len() {
            return Ok(());
        }
        let slices: Vec<std::io::IoSlice<'_>> = pieces[i..]
            .iter()
            .map(|p| std::io::IoSlice::new(p))
            .collect();
        let mut n = w.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let take = n.min(pieces[i].len());
            pieces[i].advance(take);
            n -= take;
            if pieces[i].is_empty() {
                i += 1;
            }
        }
    }
}

/// The most an answer's JSON may be (a record with many parts).
const MAX_ANSWER: usize = 64 << 20;

/// Reads the drive's answer frame (see the module docs).
async fn read_answer<R: AsyncRead + Unpin>(r: &mut R) -> Result<Stored, DriveError> {
    let bad = |what: String| DriveError::unreachable(format!("raw upload: {what}"));
    let mut head = Vec::new();
    loop {
        let b = r
            .read_u8()
            .await
            .map_err(|e| bad(format!("no answer from the drive: {e}")))?;
        if b == b'\n' {
            break;
        }
        head.push(b);
        if head.len() > 32 {
            return Err(bad("the answer's head is too long".into()));
        }
    }
    let head = String::from_utf8_lossy(&head);
    let (status, len) = head
        .split_once(' ')
        .and_then(|(s, l)| Some((s.parse::<u16>().ok()?, l.parse::<usize>().ok()?)))
        .filter(|(_, len)| *len <= MAX_ANSWER)
        .ok_or_else(|| bad(format!("the answer's head {head:?} is not STATUS LENGTH")))?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)
        .await
        .map_err(|e| bad(format!("the answer was cut short: {e}")))?;
    if status == StatusCode::OK.as_u16() {
        return serde_json::from_slice(&body)
            .map_err(|e| bad(format!("the answer could not be decoded: {e}")));
    }
    Err(super::client::error_answer(status, &body))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use axum::extract::Query;
    use axum::http::HeaderMap;

    use super::*;
    use oed_model::drive::Drive;

    /// Serves `app` on 127.0.0.1 at a port of its own; returns its URL.
    async fn serve(app: axum::Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    /// A drive of a version before raw uploads, as far as `PUT shard` goes: it takes the
    /// upgrade request as an upload without a body (`IncompleteBody`, as such a drive
    /// answers an empty shard file) and stores bodies (here: notes them and echoes the
    /// record). Returns its URL and what it saw: (asked to upgrade, body length).
    async fn earlier_drive() -> (String, Arc<Mutex<Vec<(bool, usize)>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let noted = seen.clone();
        let app = axum::Router::new().route(
            "/_oed/peer/v1/shard",
            axum::routing::put(
                move |q: Query<std::collections::HashMap<String, String>>,
                      headers: HeaderMap,
                      body: Bytes| async move {
                    noted
                        .lock()
                        .unwrap()
                        .push((headers.contains_key(header::UPGRADE), body.len()));
                    if body.is_empty() {
                        let e = DriveError::new(
                            ErrorCode::IncompleteBody,
                            "the body ended before its last frame",
                        );
                        return e.into_response();
                    }
                    (StatusCode::OK, q["record"].clone()).into_response()
                },
            ),
        );
        (serve(app).await, seen)
    }

    /// A shard file of 10,000 bytes of object (1+1, 4 KiB chunks) and its record.
    fn small_shard() -> (Bytes, ObjectRecord) {
        let data = vec![7u8; 10_000];
        let layout = oed_ec::Layout::new(1, 1, 4096).unwrap();
        let file = Bytes::from(
            oed_ec::encode_object(layout, 1, &data)
                .unwrap()
                .swap_remove(0),
        );
        let record: ObjectRecord = serde_json::from_value(serde_json::json!({
            "bucket": "b", "key": "k", "version_id": "00000000000000000000000000000001",
            "size": data.len(), "k": 1, "m": 1, "chunk_size": 4096, "shard_index": 0,
            "drives": ["d1", "d2"], "last_modified_ms": 0, "etag": ""
        }))
        .unwrap();
        (file, record)
    }

    #[tokio::test]
    async fn a_drive_that_takes_no_raw_uploads_gets_bodies_from_then_on() {
        let (url, seen) = earlier_drive().await;
        let client = PeerClient::new(&url, auth::PeerKey::derive(b"0123456789abcdef"))
            .with_raw_uploads(true);
        let (file, record) = small_shard();
        for _ in 0..2 {
            let body: ShardUpload = Box::pin(futures_util::stream::iter([Ok(file.clone())]));
            let stored = client.put_shard(&record, body, false).await.unwrap();
            assert_eq!(stored.record, record);
        }
        assert_eq!(
            *seen.lock().unwrap(),
            [(true, 0), (false, file.len()), (false, file.len())],
            "one raw upload tried, then bodies only"
        );
    }

    /// A shard file under the client's minimum goes as a body with no upgrade asked for,
    /// and says nothing about whether the drive takes raw uploads: one at the minimum
    /// still tries a raw upload first.
    #[tokio::test]
    async fn shards_under_the_minimum_go_as_bodies_without_an_upgrade() {
        let (url, seen) = earlier_drive().await;
        let (file, record) = small_shard();
        let client = PeerClient::new(&url, auth::PeerKey::derive(b"0123456789abcdef"))
            .with_raw_uploads(true);
        let len = file.len() as u64;
        for min in [len + 1, len] {
            let body: ShardUpload = Box::pin(futures_util::stream::iter([Ok(file.clone())]));
            let c = client.clone().with_raw_upload_min(min);
            let stored = c.put_shard(&record, body, false).await.unwrap();
            assert_eq!(stored.record, record);
        }
        assert_eq!(
            *seen.lock().unwrap(),
            [(false, file.len()), (true, 0), (false, file.len())],
            "a body under the minimum; at it, a raw upload tried first"
        );
    }

    /// A drive of a version that takes raw uploads but keeps no connection: its `101`
    /// does not say `x-oed-raw-keep`, it reads the upload to the sender's shutdown,
    /// answers (echoing the record) and closes. Returns its URL and the bodies it read.
    async fn drive_that_keeps_nothing() -> (String, Arc<Mutex<Vec<Vec<u8>>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let noted = seen.clone();
        let app = axum::Router::new().route(
            "/_oed/peer/v1/shard",
            axum::routing::put(
                move |q: Query<std::collections::HashMap<String, String>>, mut req: Request| {
                    let noted = noted.clone();
                    async move {
                        let on = req
                            .extensions_mut()
                            .remove::<hyper::upgrade::OnUpgrade>()
                            .unwrap();
                        let record = q["record"].clone();
                        tokio::spawn(async move {
                            let mut io = TokioIo::new(on.await.unwrap());
                            let mut got = Vec::new();
                            io.read_to_end(&mut got).await.unwrap();
                            noted.lock().unwrap().push(got);
                            let answer = format!("200 {}\n{record}", record.len());
                            io.write_all(answer.as_bytes()).await.unwrap();
                            io.shutdown().await.unwrap();
                        });
                        let mut resp = StatusCode::SWITCHING_PROTOCOLS.into_response();
                        let h = resp.headers_mut();
                        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
                        h.insert(header::UPGRADE, HeaderValue::from_static(RAW_UPLOAD));
                        resp
                    }
                },
            ),
        );
        (serve(app).await, seen)
    }

    /// A sender that asks to keep the connection and is not told the drive will sends
    /// the upload as such a drive expects it (ended by its shutdown, nothing framed) and
    /// keeps nothing.
    #[tokio::test]
    async fn a_drive_that_keeps_no_connection_gets_uploads_ended_by_shutdown() {
        let (url, seen) = drive_that_keeps_nothing().await;
        let client = PeerClient::new(&url, auth::PeerKey::derive(b"0123456789abcdef"))
            .with_raw_uploads(true);
        let (file, record) = small_shard();
        let tail = br#"{"etag":"x","parts":[]}"#;
        for with_tail in [false, true] {
            let body = if with_tail {
                Bytes::from([&file[..], tail].concat())
            } else {
                file.clone()
            };
            let sent: ShardUpload = Box::pin(futures_util::stream::iter([Ok(body.clone())]));
            let stored = client.put_shard(&record, sent, with_tail).await.unwrap();
            assert_eq!(stored.record, record);
            assert_eq!(seen.lock().unwrap().pop().unwrap(), body);
            assert_eq!(client.kept_connections(), (0, 0));
        }
    }

    #[tokio::test]
    async fn answers_are_read_whole_and_their_errors_keep_their_code() {
        let e = DriveError::new(ErrorCode::Superseded, "a newer version is stored");
        let body = serde_json::to_vec(&e).unwrap();
        let mut frame = format!("409 {}\n", body.len()).into_bytes();
        frame.extend_from_slice(&body);
        assert_eq!(read_answer(&mut &frame[..]).await.unwrap_err(), e);
        for bad in [
            &b"409"[..],
            b"409 5\n{}",
            b"xyz 2\n{}",
            b"200 99999999999\n",
        ] {
            let got = read_answer(&mut &bad[..]).await.unwrap_err();
            assert_eq!(got.code, ErrorCode::Unreachable, "{bad:?}: {got}");
        }
    }
}
