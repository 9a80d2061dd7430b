//! A client of another drive's peer API: signs each request and maps error bodies back to
//! a [`PeerError`]. The coordinator of the cluster uses it; so do the end-to-end tests.
//!
//! It speaks HTTP/1.1 through hyper's pooled client directly. A connection's read buffer
//! is capped at [`READ_BUFFER_MAX`]: hyper's default lets each connection grow one to
//! about 400 KiB and keep it while the connection idles in the pool, and a coordinator
//! holds dozens of connections (`docs/cluster.md`, "Memory and back-pressure").

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::Deserialize;

use super::auth::{self, PeerKey};
use crate::store::record::{BucketRecord, ObjectRecord, VersionId};

/// The most a peer connection's read buffer grows to. A chunk of a shard arrives in
/// pieces of at most this size, each sent on as it is. A connection idling in the pool
/// keeps 64 KiB instead of hyper's default of about 400 KiB; the price is more, smaller
/// pieces per chunk, about 8-10% more CPU per GiB read through a coordinator
/// (`docs/benchmarks.md`, "Connection read buffers").
pub const READ_BUFFER_MAX: usize = 64 * 1024;

/// A boxed error, as the transport reports it.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What went wrong talking to a peer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PeerError {
    /// The peer answered with an error.
    #[error("peer answered {status} {code}: {message}")]
    Status {
        /// HTTP status.
        status: StatusCode,
        /// The stable error code of the body.
        code: String,
        /// The peer's message.
        message: String,
    },
    /// The request did not complete (connection refused, reset, a body cut short).
    #[error("peer request failed")]
    Transport(#[source] BoxError),
    /// The drive's address is not an `http://host:port` URL.
    #[error("peer address {0:?} is not an http://host:port URL")]
    BadAddress(String),
    /// The peer's answer could not be decoded.
    #[error("peer answer could not be decoded")]
    Decode(#[from] serde_json::Error),
}

impl PeerError {
    /// The error code, when the peer answered with one.
    #[must_use]
    pub fn code(&self) -> Option<&str> {
        match self {
            PeerError::Status { code, .. } => Some(code),
            _ => None,
        }
    }

    fn transport(e: impl Into<BoxError>) -> Self {
        PeerError::Transport(e.into())
    }
}

/// The record part of [`PeerClient::info`].
#[derive(Clone, Debug, Deserialize)]
pub struct DriveInfo {
    /// Drive id.
    pub drive_id: String,
    /// `oedd` version.
    pub version: String,
    /// File system size.
    pub capacity_bytes: u64,
    /// Free bytes.
    pub free_bytes: u64,
    /// Reserve kept free.
    pub reserve_bytes: u64,
    /// Object records (so shards) held.
    pub shard_count: u64,
    /// Entries in the heal queue.
    pub heal_backlog: u64,
    /// Requests refused for bad or missing signatures since start.
    pub auth_failures: u64,
    /// "ok", or "low-space" when free space is within the reserve.
    pub health: String,
}

/// A request body: bytes in memory, or a stream (sent chunked).
pub type PeerBody = BoxBody<Bytes, std::io::Error>;

/// The HTTP connections to other drives: one pool, shared by the [`PeerClient`]s of a
/// drive. Cheap to clone.
#[derive(Clone, Debug)]
pub struct PeerHttp(std::sync::Arc<Client<HttpConnector, PeerBody>>);

impl Default for PeerHttp {
    /// Connects within 2 s, with `TCP_NODELAY`, and keeps up to 16 idle connections per
    /// drive for 30 s.
    fn default() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(16)
            .http1_max_buf_size(READ_BUFFER_MAX)
            .build(connector);
        Self(std::sync::Arc::new(client))
    }
}

/// A body of bytes in memory, sent with a Content-Length.
fn full(bytes: Bytes) -> PeerBody {
    Full::new(bytes).map_err(|e| match e {}).boxed()
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
        let scheme = parts.scheme.filter(|s| *s == http::uri::Scheme::HTTP)?;
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
}

/// A signed request to a peer, ready to send; [`PeerClient::request`] makes one.
#[must_use = "a request does nothing until it is sent"]
pub struct PeerRequest {
    http: PeerHttp,
    head: Result<Request<()>, PeerError>,
    body: PeerBody,
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

    /// The body: `bytes`, sent with a Content-Length.
    pub fn body(mut self, bytes: impl Into<Bytes>) -> Self {
        self.body = full(bytes.into());
        self
    }

    /// The body: `stream`, sent chunked.
    pub fn stream_body<S>(mut self, stream: S) -> Self
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static,
    {
        self.body = BodyExt::boxed(StreamBody::new(stream.map_ok(Frame::data)));
        self
    }

    /// Sends the request and waits for the response's head.
    ///
    /// # Errors
    /// [`PeerError::Transport`] when no response came; [`PeerError::BadAddress`].
    pub async fn send(self) -> Result<PeerResponse, PeerError> {
        let (parts, ()) = self.head?.into_parts();
        let resp = self
            .http
            .0
            .request(Request::from_parts(parts, self.body))
            .await
            .map_err(PeerError::transport)?;
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
    /// [`PeerError::Transport`]; [`PeerError::Decode`].
    pub async fn json<T: serde::de::DeserializeOwned>(self) -> Result<T, PeerError> {
        Ok(serde_json::from_slice(&self.bytes().await?)?)
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

fn q(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `bucket=..&key=..[&version=..]`, encoded.
fn key_query(bucket: &str, key: &str, version: Option<VersionId>) -> String {
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
        }
    }

    /// A signed request with an empty body; `query` must already be encoded, `digest`
    /// is the body's (see [`auth::body_digest`], or [`auth::STREAMING`]).
    pub fn request(&self, method: Method, op: &str, query: &str, digest: &str) -> PeerRequest {
        let path = format!("/_oed/peer/v1/{op}");
        let date = auth::now_secs().to_string();
        let sig = self.key.sign(method.as_str(), &path, query, &date, digest);
        let head = match &self.base {
            Ok(base) => base
                .uri(&path, query)
                .and_then(|uri| {
                    Request::builder()
                        .method(method)
                        .uri(uri)
                        .header(auth::DATE_HEADER, date)
                        .header(auth::DIGEST_HEADER, digest)
                        .header("authorization", format!("{} {sig}", auth::SCHEME))
                        .body(())
                })
                .map_err(PeerError::transport),
            Err(text) => Err(PeerError::BadAddress(text.clone())),
        };
        PeerRequest {
            http: self.http.clone(),
            head,
            body: full(Bytes::new()),
        }
    }

    async fn send(&self, method: Method, op: &str, query: &str) -> Result<PeerResponse, PeerError> {
        let resp = self
            .request(method, op, query, &auth::body_digest(b""))
            .send()
            .await?;
        check(resp).await
    }

    /// Stores shard `record.shard_index` of an object: `shard_file` is the shard in the
    /// oed-ec file format, streamed.
    ///
    /// # Errors
    /// [`PeerError`]; the code says why (for example `Superseded`, `BadDigest`).
    pub async fn put_shard<S>(
        &self,
        record: &ObjectRecord,
        shard_file: S,
    ) -> Result<ObjectRecord, PeerError>
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static,
    {
        self.put_shard_inner(record, shard_file, false).await
    }

    /// Like [`PeerClient::put_shard`], with the shard file followed by a JSON
    /// [`RecordTail`](crate::store::record::RecordTail) that completes the record.
    ///
    /// # Errors
    /// As [`PeerClient::put_shard`].
    pub async fn put_shard_with_tail<S>(
        &self,
        record: &ObjectRecord,
        body: S,
    ) -> Result<crate::store::Stored, PeerError>
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static,
    {
        self.put_shard_inner(record, body, true).await
    }

    async fn put_shard_inner<S, T: serde::de::DeserializeOwned>(
        &self,
        record: &ObjectRecord,
        body: S,
        tail: bool,
    ) -> Result<T, PeerError>
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static,
    {
        let mut query = format!("record={}", q(&serde_json::to_string(record)?));
        if tail {
            query.push_str("&tail=true");
        }
        let resp = self
            .request(Method::PUT, "shard", &query, auth::STREAMING)
            .stream_body(body)
            .send()
            .await?;
        check(resp).await?.json().await
    }

    /// Reads stripes `from..to` of the stored shard (all when `None`): the response body
    /// is the chunk bytes, each checked against its CRC32C by the drive before sending.
    ///
    /// # Errors
    /// [`PeerError`]; `CorruptShard` when the first chunk sent would have been bad. A bad
    /// chunk later in the range ends the body early, which shows up as a transport error
    /// while reading it.
    pub async fn get_shard(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
        stripes: Option<(u64, u64)>,
    ) -> Result<PeerResponse, PeerError> {
        let mut query = key_query(bucket, key, version);
        if let Some((from, to)) = stripes {
            let _ = write!(query, "&from={from}&to={to}");
        }
        self.send(Method::GET, "shard", &query).await
    }

    /// The record of an object held here.
    ///
    /// # Errors
    /// [`PeerError`] (`NotFound`).
    pub async fn stat(&self, bucket: &str, key: &str) -> Result<ObjectRecord, PeerError> {
        let query = key_query(bucket, key, None);
        self.send(Method::GET, "object", &query).await?.json().await
    }

    /// Deletes an object's record and shard (with `version`: only if not newer).
    ///
    /// # Errors
    /// [`PeerError`] (`NotFound`, `Superseded`).
    pub async fn delete(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<(), PeerError> {
        let query = key_query(bucket, key, version);
        self.send(Method::DELETE, "object", &query).await?;
        Ok(())
    }

    /// Up to `limit` records of `bucket` from key `start` (inclusive), in key order.
    ///
    /// # Errors
    /// [`PeerError`].
    pub async fn list(
        &self,
        bucket: &str,
        start: &str,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>, PeerError> {
        let query = format!("bucket={}&start={}&limit={limit}", q(bucket), q(start));
        self.send(Method::GET, "objects", &query)
            .await?
            .json()
            .await
    }

    /// Creates (or keeps) a bucket record.
    ///
    /// # Errors
    /// [`PeerError`].
    pub async fn create_bucket(&self, name: &str) -> Result<BucketRecord, PeerError> {
        let query = format!("bucket={}", q(name));
        self.send(Method::PUT, "bucket", &query).await?.json().await
    }

    /// Deletes an empty bucket's record.
    ///
    /// # Errors
    /// [`PeerError`] (`NotFound`, `BucketNotEmpty`).
    pub async fn delete_bucket(&self, name: &str) -> Result<(), PeerError> {
        let query = format!("bucket={}", q(name));
        self.send(Method::DELETE, "bucket", &query).await?;
        Ok(())
    }

    /// Every bucket record.
    ///
    /// # Errors
    /// [`PeerError`].
    pub async fn buckets(&self) -> Result<Vec<BucketRecord>, PeerError> {
        self.send(Method::GET, "buckets", "").await?.json().await
    }

    /// Capacity, counts, version and health of the drive.
    ///
    /// # Errors
    /// [`PeerError`].
    pub async fn info(&self) -> Result<DriveInfo, PeerError> {
        self.send(Method::GET, "info", "").await?.json().await
    }
}

async fn check(resp: PeerResponse) -> Result<PeerResponse, PeerError> {
    #[derive(Deserialize)]
    struct Body {
        code: String,
        message: String,
    }
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let text = match resp.bytes().await {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => format!(
            "(the error body could not be read: {})",
            crate::error::source_chain(&e)
        ),
    };
    let body: Body = serde_json::from_str(&text).unwrap_or(Body {
        code: "Unknown".into(),
        message: text,
    });
    Err(PeerError::Status {
        status,
        code: body.code,
        message: body.message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url_of(base: &str, query: &str) -> String {
        let c = PeerClient::new(base, PeerKey::derive(b"0123456789abcdef"));
        let req = c.request(Method::GET, "shard", query, &auth::body_digest(b""));
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
            "https://drive-3:9400",
            "http://",
            "http://h:1/?q=1",
            "",
        ] {
            let c = PeerClient::new(bad, PeerKey::derive(b"0123456789abcdef"));
            let req = c.request(Method::GET, "info", "", &auth::body_digest(b""));
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
            assert!(
                err.to_string().contains("not an http://host:port URL"),
                "{err}"
            );
        }
    }
}
