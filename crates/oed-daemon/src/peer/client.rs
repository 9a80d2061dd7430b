//! A client of another drive's peer API: signs each request and maps error bodies back to
//! a [`PeerError`]. The coordinator of the cluster uses it; so do the end-to-end tests.

use std::fmt::Write as _;

use bytes::Bytes;
use futures_util::Stream;
use reqwest::{Method, StatusCode};
use serde::Deserialize;

use super::auth::{self, PeerKey};
use crate::store::record::{BucketRecord, ObjectRecord, VersionId};

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
    /// The request did not complete (connection refused, reset, timed out).
    #[error("peer request failed")]
    Transport(#[from] reqwest::Error),
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

/// A signed client of one drive's peer API.
#[derive(Clone, Debug)]
pub struct PeerClient {
    /// The drive's base URL, parsed once: a request sets only the path and query of a
    /// copy, which spares the coordinator parsing the host (with its IDNA mapping) on
    /// every shard request. A base that does not parse is kept as text, for reqwest to
    /// report when a request is sent.
    base: Result<reqwest::Url, String>,
    key: PeerKey,
    http: reqwest::Client,
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
    /// A client of the drive at `base` (for example `http://127.0.0.1:9400`).
    #[must_use]
    pub fn new(base: &str, key: PeerKey) -> Self {
        Self::with_http(base, key, reqwest::Client::new())
    }

    /// A client of the drive at `base` sharing `http`'s connection pool and timeouts.
    #[must_use]
    pub fn with_http(base: &str, key: PeerKey, http: reqwest::Client) -> Self {
        let base = base.trim_end_matches('/');
        Self {
            base: reqwest::Url::parse(base).map_err(|_| base.to_owned()),
            key,
            http,
        }
    }

    /// A signed request builder; `query` must already be encoded.
    pub fn request(
        &self,
        method: Method,
        op: &str,
        query: &str,
        digest: &str,
    ) -> reqwest::RequestBuilder {
        let path = format!("/_oed/peer/v1/{op}");
        let date = auth::now_secs().to_string();
        let sig = self.key.sign(method.as_str(), &path, query, &date, digest);
        let builder = match &self.base {
            Ok(base) => {
                let mut url = base.clone();
                // A base with a path of its own keeps it in front.
                match base.path().trim_end_matches('/') {
                    "" => url.set_path(&path),
                    prefix => url.set_path(&format!("{prefix}{path}")),
                }
                url.set_query((!query.is_empty()).then_some(query));
                self.http.request(method, url)
            }
            Err(text) => self.http.request(method, format!("{text}{path}?{query}")),
        };
        builder
            .header(auth::DATE_HEADER, date)
            .header(auth::DIGEST_HEADER, digest)
            .header("authorization", format!("{} {sig}", auth::SCHEME))
    }

    async fn send(
        &self,
        method: Method,
        op: &str,
        query: &str,
    ) -> Result<reqwest::Response, PeerError> {
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
            .body(reqwest::Body::wrap_stream(body))
            .send()
            .await?;
        Ok(check(resp).await?.json().await?)
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
    ) -> Result<reqwest::Response, PeerError> {
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
        Ok(self
            .send(Method::GET, "object", &query)
            .await?
            .json()
            .await?)
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
        Ok(self
            .send(Method::GET, "objects", &query)
            .await?
            .json()
            .await?)
    }

    /// Creates (or keeps) a bucket record.
    ///
    /// # Errors
    /// [`PeerError`].
    pub async fn create_bucket(&self, name: &str) -> Result<BucketRecord, PeerError> {
        let query = format!("bucket={}", q(name));
        Ok(self
            .send(Method::PUT, "bucket", &query)
            .await?
            .json()
            .await?)
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
        Ok(self.send(Method::GET, "buckets", "").await?.json().await?)
    }

    /// Capacity, counts, version and health of the drive.
    ///
    /// # Errors
    /// [`PeerError`].
    pub async fn info(&self) -> Result<DriveInfo, PeerError> {
        Ok(self.send(Method::GET, "info", "").await?.json().await?)
    }
}

async fn check(resp: reqwest::Response) -> Result<reqwest::Response, PeerError> {
    #[derive(Deserialize)]
    struct Body {
        code: String,
        message: String,
    }
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let text = resp.text().await.unwrap_or_default();
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
        let req = c
            .request(Method::GET, "shard", query, &auth::body_digest(b""))
            .build()
            .unwrap();
        req.url().to_string()
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
        // A base that is no URL fails when the request is built, not before.
        let c = PeerClient::new("drive-3:9400", PeerKey::derive(b"0123456789abcdef"));
        let req = c.request(Method::GET, "info", "", &auth::body_digest(b""));
        assert!(req.build().is_err());
    }
}
