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
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{DRAIN_LIMIT, PeerState, PutShardQuery};
use oed_meter::traffic::{BodyMeter, Class, Direction};
use oed_model::drive::DriveError;
use oed_model::error::Error;
use oed_model::record::ObjectRecord;
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
    seal: Option<oed_model::seal::Seal>,
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
    let client = crate::request_client();
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
            .put_shard_raw(record, &mut up, tail, seal)
            .await
            .map(|mut stored| {
                oed_store::without_file(&mut stored.record);
                stored
            })
            .map_err(DriveError::from);
        if let Err(e) = &result
            && e.code == oed_model::drive::ErrorCode::Unauthenticated
        {
            super::refused(&state, Some(super::PeerOp::PutShard), client, e);
        }
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
