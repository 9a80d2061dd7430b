//! The sending side of raw shard uploads (the protocol: `crate::raw`).

use std::time::Duration;

use axum::http::{StatusCode, header};
use bytes::{Buf, Bytes};
use futures_util::StreamExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::kept::KeptConnections;
use super::wire::{PeerClient, PeerError, check, error_answer};
use crate::PeerOp;
use crate::raw::{KEEP_HEADER, RAW_UPLOAD};
use oed_model::drive::{DriveError, ErrorCode, ShardUpload, Stored};
use oed_model::record::MAX_TAIL_BYTES;
use oed_model::seal::TAG_LEN;

/// How a raw upload went, seen from its sender.
pub(super) enum Sent {
    /// The drive's answer (boxed: a record is large).
    Answer(Box<Result<Stored, DriveError>>),
    /// The drive took the request as an upload without a body (a version before raw
    /// uploads): the body, unsent, to send the usual way.
    NotTaken(ShardUpload),
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
            .request(PeerOp::PutShard, query, client.shard_digest())
            .header(header::CONNECTION, "upgrade")
            .header(header::UPGRADE, RAW_UPLOAD)
            .header(http::HeaderName::from_static(KEEP_HEADER), "1")
    };
    // A kept connection the drive has closed since fails before any of the body is
    // sent: then a new one.
    let mut resp = None;
    while let Some(tcp) = kept.take() {
        let mut req = request();
        let seal = req.take_seal();
        if let Ok(r) = req.send_on(tcp).await {
            kept.reused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            resp = Some((r, seal));
            break;
        }
    }
    let (resp, seal) = if let Some(r) = resp {
        r
    } else {
        let mut req = request();
        let seal = req.take_seal();
        (req.send().await?, seal)
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
        let body = super::sealed::sealed(body, seal, file_len);
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
                let room = (MAX_TAIL_BYTES + TAG_LEN + 1).saturating_sub(rest.len());
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
    Err(error_answer(status, &body))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use crate::auth;

    use axum::extract::Query;
    use axum::http::HeaderMap;

    use std::sync::Arc;

    use axum::extract::Request;
    use axum::http::HeaderValue;
    use axum::response::IntoResponse;

    use super::*;
    use oed_model::drive::Drive;
    use oed_model::record::ObjectRecord;

    /// Serves `app` on 127.0.0.1 at a port of its own; returns its URL.
    async fn serve(app: axum::Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    /// A drive of a version before raw uploads (and sealed ones), as far as `PUT shard` goes: it takes the
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
            .with_raw_uploads(true)
            .with_sealed_uploads(false);
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
            .with_raw_uploads(true)
            .with_sealed_uploads(false);
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
            .with_raw_uploads(true)
            .with_sealed_uploads(false);
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
