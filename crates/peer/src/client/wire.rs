//! Requests to a drive's peer API and their answers: the signed request, the pooled
//! HTTP client, the error an answer carries.

use std::fmt::Write as _;
use std::ops::Range;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::auth::{self, PeerKey};
use crate::{EPOCH_HEADER, PeerOp, STRIPES_HEADER, VERSION_HEADER};
use oed_model::config::READ_BUFFER_MAX;
use oed_model::drive::{DriveError, ErrorCode, ShardRead, ShardStream};
use oed_model::record::VersionId;
use oed_model::seal::Seal;
use oed_model::uri::encode as q;

/// A boxed error, as the transport reports it.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What went wrong sending a request to a peer, before any answer was read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PeerError {
    /// The request did not complete (connection refused, reset, a body cut short).
    #[error("peer request failed")]
    Transport(#[source] BoxError),
    /// The drive's address is not an `http://host:port` or `https://host:port` URL.
    #[error("peer address {0:?} is not an http://host:port or https://host:port URL")]
    BadAddress(String),
}

impl PeerError {
    pub(super) fn transport(e: impl Into<BoxError>) -> Self {
        PeerError::Transport(e.into())
    }
}

impl From<PeerError> for DriveError {
    fn from(e: PeerError) -> Self {
        // The chain says more than the top line (connection refused, reset...).
        DriveError::unreachable(oed_model::error::source_chain(&e))
    }
}

/// A request body: bytes in memory, or a stream (sent chunked).
pub type PeerBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// The HTTP connections to other drives: one pool, shared by the [`PeerClient`]s of a
/// drive. Cheap to clone.
#[derive(Clone, Debug)]
pub struct PeerHttp(std::sync::Arc<Client<crate::tls::PeerConnector, PeerBody>>);

impl Default for PeerHttp {
    /// A pool for `http://` drives only (`https://` ones are refused: no CA is trusted).
    fn default() -> Self {
        Self::with_tls(&crate::tls::client_config(None).unwrap_or_else(|_| {
            unreachable!("a client configuration without a CA file always builds")
        }))
    }
}

impl PeerHttp {
    /// A pool that reaches `http://` drives in the clear and `https://` ones over TLS,
    /// verifying them with `tls` (see [`crate::tls::client_config`]). It connects within
    /// 2 s, with `TCP_NODELAY`, and keeps up to 16 idle connections per drive for 15 s:
    /// less than the shortest `http_header_timeout_seconds` (16), after which the other
    /// drive closes an idle connection, so a request is not sent on one being closed.
    #[must_use]
    pub fn with_tls(tls: &rustls::ClientConfig) -> Self {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(2)));
        http.enforce_http(false);
        let connector = crate::tls::PeerConnector::new(http, tls.clone());
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(15))
            .pool_max_idle_per_host(16)
            .http1_max_buf_size(READ_BUFFER_MAX)
            .build(connector);
        Self(std::sync::Arc::new(client))
    }
}

/// A body of bytes in memory, sent with a Content-Length.
fn full(bytes: Bytes) -> PeerBody {
    Full::new(bytes).map_err(|e| match e {}).boxed_unsync()
}

/// A drive's base URL, split once: a request only adds its path and query, which spares
/// the coordinator parsing the host on every shard request.
#[derive(Clone, Debug)]
struct Base {
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    /// A path of the base's own, kept in front of the peer API's ("" when none).
    prefix: String,
}

impl Base {
    fn parse(text: &str) -> Option<Self> {
        let uri: Uri = text.parse().ok()?;
        let parts = uri.into_parts();
        let scheme = parts
            .scheme
            .filter(|s| *s == http::uri::Scheme::HTTP || *s == http::uri::Scheme::HTTPS)?;
        let authority = parts.authority?;
        let prefix = match parts.path_and_query {
            Some(p) if p.query().is_some() => return None,
            Some(p) => p.path().trim_end_matches('/').to_owned(),
            None => String::new(),
        };
        Some(Self {
            scheme,
            authority,
            prefix,
        })
    }

    fn uri(&self, path: &str, query: &str) -> Result<Uri, http::Error> {
        let mut pq = format!("{}{path}", self.prefix);
        if !query.is_empty() {
            pq.push('?');
            pq.push_str(query);
        }
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(pq)
            .build()
    }
}

/// A signed client of one drive's peer API.
#[derive(Clone, Debug)]
pub struct PeerClient {
    /// The drive's base URL, or the text that did not parse as one (reported when a
    /// request is sent, so a drive with a bad address fails like a drive that is down).
    base: Result<Base, String>,
    key: PeerKey,
    http: PeerHttp,
    /// The epoch of the cluster map this side runs, sent with every request.
    epoch: Option<u64>,
    /// Whether shard uploads go as raw uploads, while the drive takes them
    /// ([`PeerClient::with_raw_uploads`]); `None`: never.
    raw: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// The smallest shard file sent as a raw upload ([`PeerClient::with_raw_upload_min`]).
    raw_min: u64,
    /// Connections of raw uploads (`x-oed-raw-keep`) and framed reads kept for the next
    /// request, shared by the clones made after [`PeerClient::with_raw_uploads`].
    kept: std::sync::Arc<super::kept::KeptConnections>,
    /// Whether shard reads ask for frames ([`PeerClient::with_framed_reads`]).
    framed: bool,
    /// Whether shard uploads are sealed ([`PeerClient::with_sealed_uploads`]).
    sealed: bool,
    /// The drive's clock, as its answers tell it; shared by clones.
    clock: std::sync::Arc<ClockSample>,
    /// The drive's id, named in every request that may change something
    /// ([`PeerClient::for_drive`]).
    drive: Option<String>,
}

/// How far a drive's clock is from this one's, from its last answer that came soon
/// enough to tell ([`PeerClient::clock_offset_ms`]).
#[derive(Debug, Default)]
pub(super) struct ClockSample {
    /// The drive's clock minus this one's, ms.
    offset_ms: std::sync::atomic::AtomicI64,
    /// When it was taken (this clock, ms since the epoch); 0: never.
    at_ms: std::sync::atomic::AtomicU64,
}

/// The longest round trip whose answer's time is taken as a sample: the drive answered
/// somewhere in it, so a sample is off by at most half of it.
const SAMPLE_ROUND_TRIP_MS: u64 = 500;
/// How long a sample stands for the drive's clock.
const SAMPLE_FRESH_MS: u64 = 120_000;

impl ClockSample {
    /// Takes the time of an answer to the request signed with `signature` that came
    /// between `sent` and `came` (this clock, ms), when its tag is right
    /// ([`PeerKey::time_tag`]): a time changed on the way is not taken.
    fn take(
        &self,
        resp: &Response<Incoming>,
        (key, signature): (&PeerKey, &str),
        sent: u64,
        came: u64,
    ) {
        use std::sync::atomic::Ordering::Relaxed;
        let text = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok());
        let (Some(theirs), Some(tag)) = (
            text(crate::TIME_HEADER).and_then(|v| v.parse::<u64>().ok()),
            text(crate::TIME_TAG_HEADER),
        ) else {
            return;
        };
        if came.saturating_sub(sent) > SAMPLE_ROUND_TRIP_MS
            || !key.verify_time(signature, theirs, tag)
        {
            return;
        }
        let mid = i64::try_from(sent / 2 + came / 2).unwrap_or(i64::MAX);
        let theirs = i64::try_from(theirs).unwrap_or(i64::MAX);
        self.offset_ms.store(theirs.saturating_sub(mid), Relaxed);
        self.at_ms.store(came, Relaxed);
    }

    /// The drive's clock minus this one's, ms, if a sample is fresh.
    fn offset_ms(&self, now: u64) -> Option<i64> {
        use std::sync::atomic::Ordering::Relaxed;
        let at = self.at_ms.load(Relaxed);
        (at > 0 && now.saturating_sub(at) <= SAMPLE_FRESH_MS).then(|| self.offset_ms.load(Relaxed))
    }
}

/// A signed request to a peer, ready to send; [`PeerClient::request`] makes one.
#[must_use = "a request does nothing until it is sent"]
pub struct PeerRequest {
    http: PeerHttp,
    /// Where the answer's time goes.
    clock: std::sync::Arc<ClockSample>,
    /// The key and the request's signature, which the answer's time is tagged with.
    key: PeerKey,
    signature: String,
    head: Result<Request<()>, PeerError>,
    body: PeerBody,
    /// The seal of its body, when its digest says it is sealed ([`auth::SEALED`]).
    seal: Option<Seal>,
}

impl std::fmt::Debug for PeerRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerRequest")
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}

impl PeerRequest {
    /// The request's URI, or why it has none.
    #[cfg(test)]
    fn uri(&self) -> Result<&Uri, &PeerError> {
        self.head.as_ref().map(Request::uri)
    }

    /// The seal its body must carry, once ([`auth::SEALED`]; `None` for other requests).
    pub fn take_seal(&mut self) -> Option<Seal> {
        self.seal.take()
    }

    /// Adds header `name: value` (both fixed text; not signed).
    pub fn header(mut self, name: http::HeaderName, value: &'static str) -> Self {
        if let Ok(head) = self.head.as_mut() {
            head.headers_mut()
                .insert(name, http::HeaderValue::from_static(value));
        }
        self
    }

    /// The body: `bytes`, sent with a Content-Length.
    pub fn body(mut self, bytes: impl Into<Bytes>) -> Self {
        self.body = full(bytes.into());
        self
    }

    /// The body: `stream`, sent chunked.
    pub fn stream_body<S>(mut self, stream: S) -> Self
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
    {
        self.body = BodyExt::boxed_unsync(StreamBody::new(stream.map_ok(Frame::data)));
        self
    }

    /// Sends the request, with an empty body, on `tcp` (a connection to the drive in the
    /// clear that is between requests) instead of a connection of the pool, and waits for
    /// the response's head; the connection can be upgraded.
    ///
    /// # Errors
    /// [`PeerError::Transport`] when no response came (the drive closed the connection,
    /// say); [`PeerError::BadAddress`].
    pub(super) async fn send_on(
        self,
        tcp: tokio::net::TcpStream,
    ) -> Result<PeerResponse, PeerError> {
        let (mut parts, ()) = self.head?.into_parts();
        if let Some(authority) = parts.uri.authority().cloned() {
            let host =
                http::HeaderValue::from_str(authority.as_str()).map_err(PeerError::transport)?;
            parts.headers.insert(http::header::HOST, host);
        }
        // A request on a connection of its own names only its path and query.
        parts.uri = parts
            .uri
            .path_and_query()
            .map_or_else(|| Uri::from_static("/"), |pq| Uri::from(pq.clone()));
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(READ_BUFFER_MAX)
            .handshake::<_, PeerBody>(hyper_util::rt::TokioIo::new(crate::tls::PeerStream::Plain(
                tcp,
            )))
            .await
            .map_err(PeerError::transport)?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "a kept raw upload connection failed");
            }
        });
        let resp = sender
            .send_request(Request::from_parts(parts, full(Bytes::new())))
            .await
            .map_err(PeerError::transport)?;
        Ok(PeerResponse(resp))
    }

    /// Sends the request and waits for the response's head.
    ///
    /// # Errors
    /// [`PeerError::Transport`] when no response came; [`PeerError::BadAddress`].
    pub async fn send(self) -> Result<PeerResponse, PeerError> {
        let (parts, ()) = self.head?.into_parts();
        let sent = oed_model::record::now_ms();
        let resp = self
            .http
            .0
            .request(Request::from_parts(parts, self.body))
            .await
            .map_err(PeerError::transport)?;
        self.clock.take(
            &resp,
            (&self.key, &self.signature),
            sent,
            oed_model::record::now_ms(),
        );
        Ok(PeerResponse(resp))
    }
}

/// A peer's response; its body is read as it arrives.
#[derive(Debug)]
pub struct PeerResponse(Response<Incoming>);

impl PeerResponse {
    /// The HTTP status.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        self.0.status()
    }

    /// The value of header `name`, if it is text.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.0.headers().get(name).and_then(|v| v.to_str().ok())
    }

    /// The response itself.
    pub(super) fn into_inner(self) -> Response<Incoming> {
        self.0
    }

    /// The whole body.
    ///
    /// # Errors
    /// [`PeerError::Transport`] when the body is cut short.
    pub async fn bytes(self) -> Result<Bytes, PeerError> {
        let body = self.0.into_body().collect().await;
        Ok(body.map_err(PeerError::transport)?.to_bytes())
    }

    /// The body, decoded from JSON.
    ///
    /// # Errors
    /// [`ErrorCode::Unreachable`] when it is cut short or is not the JSON expected.
    pub async fn json<T: serde::de::DeserializeOwned>(self) -> Result<T, DriveError> {
        let bytes = self.bytes().await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            DriveError::unreachable(format!("the drive's answer could not be decoded: {e}"))
        })
    }

    /// The body as it arrives, in pieces of at most [`READ_BUFFER_MAX`] bytes. A body cut
    /// short ends with an error.
    pub fn bytes_stream(self) -> impl Stream<Item = Result<Bytes, PeerError>> + Send {
        self.0
            .into_body()
            .into_data_stream()
            .map(|r| r.map_err(PeerError::transport))
    }
}

/// The version and the stripes a drive's answer to `GET shard` names.
///
/// # Errors
/// [`ErrorCode::Unreachable`] when it names either not.
pub(super) fn read_headers(resp: &PeerResponse) -> Result<(VersionId, Range<u64>), DriveError> {
    let bad = |what: &str| DriveError::unreachable(format!("GET shard answered without {what}"));
    let version = resp
        .header(VERSION_HEADER)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| bad(VERSION_HEADER))?;
    let stripes = resp
        .header(STRIPES_HEADER)
        .and_then(|v| v.split_once('-'))
        .and_then(|(a, b)| Some(a.parse().ok()?..b.parse().ok()?))
        .ok_or_else(|| bad(STRIPES_HEADER))?;
    Ok((version, stripes))
}

/// The shard read of an answer to `GET shard` with the chunks as its body.
pub(super) fn chunk_body(resp: PeerResponse) -> Result<ShardRead, DriveError> {
    let (version, stripes) = read_headers(&resp)?;
    let chunks: ShardStream = Box::pin(resp.bytes_stream().map(|r| {
        r.map_err(|e| {
            DriveError::unreachable(format!(
                "shard read broken: {}",
                oed_model::error::source_chain(&e)
            ))
        })
    }));
    Ok(ShardRead {
        version,
        stripes,
        chunks,
    })
}

/// `bucket=..&key=..[&version=..]`, encoded.
pub(super) fn key_query(bucket: &str, key: &str, version: Option<VersionId>) -> String {
    let mut query = format!("bucket={}&key={}", q(bucket), q(key));
    if let Some(v) = version {
        let _ = write!(query, "&version={v}");
    }
    query
}

impl PeerClient {
    /// A client of the drive at `base` (for example `http://127.0.0.1:9400`), with a
    /// connection pool of its own.
    #[must_use]
    pub fn new(base: &str, key: PeerKey) -> Self {
        Self::with_http(base, key, PeerHttp::default())
    }

    /// A client of the drive at `base` sharing `http`'s connection pool.
    #[must_use]
    pub fn with_http(base: &str, key: PeerKey, http: PeerHttp) -> Self {
        Self {
            base: Base::parse(base).ok_or_else(|| base.to_owned()),
            key,
            http,
            epoch: None,
            raw: None,
            raw_min: 0,
            kept: std::sync::Arc::default(),
            framed: false,
            sealed: true,
            clock: std::sync::Arc::default(),
            drive: None,
        }
    }

    /// The same client, naming `epoch` as its cluster map's in every request.
    #[must_use]
    pub fn with_epoch(mut self, epoch: u64) -> Self {
        self.epoch = Some(epoch);
        self
    }

    /// The same client, sending shard uploads to an `http://` drive as raw uploads
    /// (`raw`: [`crate::RAW_UPLOAD`], which the drive splices into its file) or as request
    /// bodies. A drive that answers a raw upload as one without a body (a version before
    /// raw uploads) gets bodies from then on.
    #[must_use]
    pub fn with_raw_uploads(mut self, raw: bool) -> Self {
        self.raw = raw.then(|| std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)));
        self.kept = std::sync::Arc::default();
        self
    }

    /// The same client, asking a drive reached in the clear for the frames of the shards
    /// it reads (`framed`: [`crate::FRAMED_READ`], which the drive sends from its file
    /// with `sendfile`; this side checks each chunk's CRC32C) or for their chunks as a
    /// body. A drive that cannot send a shard so (over TLS, a shard kept inline, a
    /// version before framed reads) answers with a body either way.
    #[must_use]
    pub fn with_framed_reads(mut self, framed: bool) -> Self {
        self.framed = framed;
        self
    }

    /// The same client, sealing the shard uploads it sends (`sealed`, the default:
    /// [`auth::SEALED`]) or sending them unsealed as versions before the seal do
    /// ([`auth::STREAMING`]; `legacy_peer_requests`, for a rolling upgrade from one).
    #[must_use]
    pub fn with_sealed_uploads(mut self, sealed: bool) -> Self {
        self.sealed = sealed;
        self
    }

    /// The same client, naming drive `id` as the one its requests that may change
    /// something are for (`target=<id>`, signed): a drive refuses such a request named for
    /// another, so one captured on its way to one drive cannot be sent to another.
    /// Without it they name none, which a drive refuses unless `legacy_peer_requests`.
    #[must_use]
    pub fn for_drive(mut self, id: &str) -> Self {
        self.drive = Some(id.to_owned());
        self
    }

    /// How far the drive's clock is ahead of this one's (negative: behind), in ms, from
    /// its last answer that came within 500 ms of the request (so off by at most 250 ms)
    /// in the last two minutes; `None` without one.
    #[must_use]
    pub fn clock_offset_ms(&self) -> Option<i64> {
        self.clock.offset_ms(oed_model::record::now_ms())
    }

    /// The digest value of a shard upload's request: sealed or not.
    pub(super) fn shard_digest(&self) -> &'static str {
        if self.sealed {
            auth::SEALED
        } else {
            auth::STREAMING
        }
    }

    /// The connections of raw uploads this client keeps for the next.
    pub(super) fn kept(&self) -> &super::kept::KeptConnections {
        &self.kept
    }

    /// How many connections of raw uploads this client keeps now, and how many raw
    /// uploads went on a kept connection so far (for tests).
    #[doc(hidden)]
    #[must_use]
    pub fn kept_connections(&self) -> (usize, u64) {
        (self.kept.len(), self.kept.reused())
    }

    /// The same client, sending raw uploads ([`PeerClient::with_raw_uploads`]) only of
    /// shard files of at least `bytes` (`raw_shard_upload_min_bytes`; 0, the default
    /// here: all), smaller ones as request bodies.
    #[must_use]
    pub fn with_raw_upload_min(mut self, bytes: u64) -> Self {
        self.raw_min = bytes;
        self
    }

    /// A signed request of operation `op` with an empty body; `query` must already be
    /// encoded, `digest` is the body's (see [`auth::body_digest`], or [`auth::STREAMING`]).
    pub fn request(&self, op: PeerOp, query: &str, digest: &str) -> PeerRequest {
        let (method, path) = op.route();
        self.request_raw(method, path, query, digest)
    }

    /// A signed request of any method and path: for testing how a drive answers requests
    /// no [`PeerOp`] makes.
    pub fn request_raw(
        &self,
        method: Method,
        path: &str,
        query: &str,
        digest: &str,
    ) -> PeerRequest {
        let date = auth::now_secs().to_string();
        // A request that may change something is taken once: its nonce says which.
        // A request that may change something names the drive it is for, and is taken
        // once: its nonce says which.
        let with_nonce;
        let query = if method == Method::GET || method == Method::HEAD {
            if let Some(e) = self.epoch {
                with_nonce = format!("{query}&{}={e}", auth::EPOCH)
                    .trim_start_matches('&')
                    .to_owned();
                &with_nonce
            } else {
                query
            }
        } else {
            let mut q = query.to_owned();
            if let Some(e) = self.epoch {
                let _ = write!(q, "&{}={e}", auth::EPOCH);
            }
            if let Some(id) = &self.drive {
                let _ = write!(q, "&{}={}", auth::TARGET, oed_model::uri::encode(id));
            }
            let _ = write!(q, "&{}={}", auth::NONCE, auth::nonce());
            with_nonce = q.trim_start_matches('&').to_owned();
            &with_nonce
        };
        let sig = self.key.sign(method.as_str(), path, query, &date, digest);
        let head = match &self.base {
            Ok(base) => base
                .uri(path, query)
                .and_then(|uri| {
                    let mut b = Request::builder();
                    if let Some(e) = self.epoch {
                        b = b.header(EPOCH_HEADER, e);
                    }
                    b.method(method)
                        .uri(uri)
                        .header(auth::DATE_HEADER, date)
                        .header(auth::DIGEST_HEADER, digest)
                        .header("authorization", format!("{} {sig}", auth::SCHEME))
                        .body(())
                })
                .map_err(PeerError::transport),
            Err(text) => Err(PeerError::BadAddress(text.clone())),
        };
        let seal = (digest == auth::SEALED).then(|| Seal::new(&self.key.seal_key(&sig)));
        PeerRequest {
            http: self.http.clone(),
            clock: self.clock.clone(),
            key: self.key.clone(),
            signature: sig.clone(),
            head,
            body: full(Bytes::new()),
            seal,
        }
    }

    /// The flag of raw uploads to this drive when a shard file of `file_len` bytes goes
    /// as one: they are on and taken, the drive is reached in the clear, and the file is
    /// at least the minimum.
    pub(super) fn raw_upload(
        &self,
        file_len: u64,
    ) -> Option<&std::sync::Arc<std::sync::atomic::AtomicBool>> {
        self.raw.as_ref().filter(|r| {
            r.load(std::sync::atomic::Ordering::Relaxed)
                && self
                    .base
                    .as_ref()
                    .is_ok_and(|b| b.scheme == http::uri::Scheme::HTTP)
                && file_len >= self.raw_min
        })
    }

    /// The drive's `host:port`, when its base URL parsed.
    pub(super) fn authority(&self) -> Option<String> {
        self.base.as_ref().ok().map(|b| b.authority.to_string())
    }

    /// `GET shard` with `query`, the chunks sent as the answer's body.
    pub(super) async fn read_ordinary(&self, query: &str) -> Result<ShardRead, DriveError> {
        chunk_body(self.send(PeerOp::GetShard, query).await?)
    }

    /// Whether shard reads ask for frames ([`PeerClient::with_framed_reads`]) of this drive:
    /// one reached in the clear.
    pub(super) fn framed_reads(&self) -> bool {
        self.framed
            && self
                .base
                .as_ref()
                .is_ok_and(|b| b.scheme == http::uri::Scheme::HTTP)
    }

    /// Sends `op` with an empty body and reads an error answer into its [`DriveError`].
    pub(super) async fn send(&self, op: PeerOp, query: &str) -> Result<PeerResponse, DriveError> {
        let resp = self
            .request(op, query, &auth::body_digest(b""))
            .send()
            .await?;
        check(resp).await
    }
}

impl PeerClient {
    /// Sends `op` with `body` as JSON and decodes the JSON answer.
    ///
    /// # Errors
    /// The drive's error, or [`ErrorCode::Unreachable`].
    pub async fn post_json<B: serde::Serialize + ?Sized, T: serde::de::DeserializeOwned>(
        &self,
        op: PeerOp,
        query: &str,
        body: &B,
    ) -> Result<T, DriveError> {
        let body = serde_json::to_vec(body)
            .map_err(|e| DriveError::new(ErrorCode::BadRequest, e.to_string()))?;
        let digest = auth::body_digest(&body);
        let resp = self.request(op, query, &digest).body(body).send().await?;
        check(resp).await?.json().await
    }

    /// Sends `op` with a text body (a cluster map) and decodes the JSON answer.
    ///
    /// # Errors
    /// The drive's error, or [`ErrorCode::Unreachable`].
    pub async fn post_text<T: serde::de::DeserializeOwned>(
        &self,
        op: PeerOp,
        body: String,
    ) -> Result<T, DriveError> {
        let body = body.into_bytes();
        let digest = auth::body_digest(&body);
        let resp = self.request(op, "", &digest).body(body).send().await?;
        check(resp).await?.json().await
    }

    /// Sends `op` with an empty body and decodes the JSON answer.
    ///
    /// # Errors
    /// The drive's error, or [`ErrorCode::Unreachable`].
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        op: PeerOp,
        query: &str,
    ) -> Result<T, DriveError> {
        self.send(op, query).await?.json().await
    }
}

/// A success as it is; an error answer read into the [`DriveError`] the drive sent.
///
/// # Errors
/// The drive's error; [`ErrorCode::Unreachable`] when its body cannot be read, and
/// [`ErrorCode::Unknown`] when it is not an error body (a proxy's page, say).
pub async fn check(resp: PeerResponse) -> Result<PeerResponse, DriveError> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let body = resp.bytes().await?;
    Err(error_answer(status.as_u16(), &body))
}

/// A drive's error answer with `status` and `body`: the error it names, or
/// [`ErrorCode::Unknown`] when it names none.
pub(super) fn error_answer(status: u16, body: &[u8]) -> DriveError {
    serde_json::from_slice(body).unwrap_or_else(|_| {
        DriveError::new(
            ErrorCode::Unknown,
            format!("{status}: {}", String::from_utf8_lossy(body)),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oed_model::drive::Drive;

    fn url_of(base: &str, query: &str) -> String {
        let c = PeerClient::new(base, PeerKey::derive(b"0123456789abcdef"));
        let req = c.request(PeerOp::GetShard, query, &auth::body_digest(b""));
        req.uri().unwrap().to_string()
    }

    #[test]
    fn request_urls_are_the_base_with_the_operation_and_query() {
        assert_eq!(
            url_of("http://127.0.0.1:9400/", "bucket=b&key=a%2Fb%20c"),
            "http://127.0.0.1:9400/_oed/peer/v1/shard?bucket=b&key=a%2Fb%20c"
        );
        assert_eq!(
            url_of("http://127.0.0.1:9400", ""),
            "http://127.0.0.1:9400/_oed/peer/v1/shard"
        );
        // A base with a path keeps it.
        assert_eq!(
            url_of("http://drive-3.example:9400/oed/", "x=1"),
            "http://drive-3.example:9400/oed/_oed/peer/v1/shard?x=1"
        );
    }

    #[test]
    fn a_base_that_is_no_http_url_fails_when_a_request_is_sent() {
        for bad in [
            "drive-3:9400",
            "ftp://drive-3:9400",
            "http://",
            "http://h:1/?q=1",
            "",
        ] {
            let c = PeerClient::new(bad, PeerKey::derive(b"0123456789abcdef"));
            let req = c.request(PeerOp::Info, "", &auth::body_digest(b""));
            assert!(
                matches!(req.uri(), Err(PeerError::BadAddress(t)) if t == bad),
                "{bad:?}"
            );
            let err = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(c.info())
                .unwrap_err();
            assert_eq!(err.code, ErrorCode::Unreachable);
            assert!(
                err.message
                    .contains("not an http://host:port or https://host:port URL"),
                "{err}"
            );
        }
    }
}
