//! The peer API under `/_oed/peer/v1/`: how the drives of a cluster use each other's
//! stores. Every route is authenticated ([`auth`]); handlers are thin and call the
//! [`Store`](crate::store::Store). The routes (all answers JSON unless said):
//!
//! | method and path | query | what |
//! |---|---|---|
//! | `PUT shard` | `record` (JSON)`[, tail=true]` | store a shard; body: the shard file, streamed (then a JSON record tail) |
//! | `GET shard` | `bucket, key[, version][, from, to]` | chunk bytes of stripes `from..to`, each CRC-checked (binary) |
//! | `GET object` | `bucket, key` | the object record (stat) |
//! | `DELETE object` | `bucket, key[, version]` | delete record and shard |
//! | `GET objects` | `bucket[, start][, limit]` | records in key order from `start` |
//! | `PUT bucket`, `DELETE bucket` | `bucket` | bucket records |
//! | `GET buckets` | | every bucket record |
//! | `GET info` | | capacity, free space, counts, version, health |

pub mod auth;
pub mod client;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::BodyExt;
use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::error::{Error, Result};
use crate::metrics::BodyMeter;
use crate::store::Store;
use crate::store::record::{ObjectRecord, VersionId};
use auth::PeerKey;
use futures_util::StreamExt as _;
use oed_meter::traffic::{Class, Direction};

/// Everything the peer API's handlers share.
#[derive(Debug)]
pub struct PeerState {
    /// The drive's store.
    pub store: Arc<Store>,
    /// This drive's id.
    pub drive_id: String,
    /// Key peer requests must be signed with.
    pub key: PeerKey,
    /// Allowed clock skew, seconds.
    pub clock_skew: u64,
    /// Largest body of a request other than a shard upload.
    pub max_body: usize,
    /// Requests served at once.
    pub slots: Arc<Semaphore>,
    /// Requests refused for authentication since start.
    pub auth_failures: AtomicU64,
    /// Traffic counters (class `peer`).
    pub traffic: oed_meter::traffic::Traffic,
}

/// The peer API routes, with authentication and the concurrency limit applied.
pub fn router(state: Arc<PeerState>) -> Router {
    Router::new()
        .route("/_oed/peer/v1/shard", get(get_shard).put(put_shard))
        .route("/_oed/peer/v1/object", get(stat).delete(delete_object))
        .route("/_oed/peer/v1/objects", get(list))
        .route(
            "/_oed/peer/v1/bucket",
            axum::routing::put(create_bucket).delete(delete_bucket),
        )
        .route("/_oed/peer/v1/buckets", get(buckets))
        .route("/_oed/peer/v1/info", get(info))
        .route(
            "/_oed/{*rest}",
            axum::routing::any(|| async { Error::NotFound("route") }),
        )
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(middleware::from_fn_with_state(state.clone(), limit))
        .with_state(state)
}

async fn limit(State(state): State<Arc<PeerState>>, req: Request, next: Next) -> Response {
    let Ok(_permit) = state.slots.clone().acquire_owned().await else {
        return Error::ShuttingDown.into_response();
    };
    next.run(req).await
}

/// Checks the signature, the timestamp and (for small bodies) the body digest; counts
/// and refuses failures before any handler runs.
async fn authenticate(State(state): State<Arc<PeerState>>, req: Request, next: Next) -> Response {
    match check_auth(&state, req).await {
        Ok(req) => next.run(req).await,
        Err(e) => {
            if matches!(e, Error::Unauthenticated(_) | Error::Expired(_)) {
                state.auth_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "peer request refused");
            }
            e.into_response()
        }
    }
}

async fn check_auth(state: &PeerState, req: Request) -> Result<Request> {
    let h = req.headers();
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let date = text(auth::DATE_HEADER).ok_or(Error::Unauthenticated("missing x-oed-date"))?;
    let digest =
        text(auth::DIGEST_HEADER).ok_or(Error::Unauthenticated("missing x-oed-content-sha256"))?;
    let authz = text("authorization").ok_or(Error::Unauthenticated("missing authorization"))?;
    let sig = authz
        .strip_prefix(auth::SCHEME)
        .map(str::trim)
        .ok_or(Error::Unauthenticated(
            "authorization scheme is not OED1-HMAC-SHA256",
        ))?;
    let when: u64 = date
        .parse()
        .map_err(|_| Error::Unauthenticated("x-oed-date is not a number"))?;
    if when.abs_diff(auth::now_secs()) > state.clock_skew {
        return Err(Error::Expired(state.clock_skew));
    }
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    if !state
        .key
        .verify(&method, &path, &query, &date, &digest, sig)
    {
        return Err(Error::Unauthenticated("signature does not match"));
    }
    if digest == auth::STREAMING {
        // Only shard uploads may stream; their chunks are checked by CRC32C.
        if !(method == "PUT" && path == "/_oed/peer/v1/shard") {
            return Err(Error::Unauthenticated(
                "only shard uploads may use STREAMING-CRC32C",
            ));
        }
        return Ok(req);
    }
    let (parts, body) = req.into_parts();
    let bytes = http_body_util::Limited::new(body, state.max_body)
        .collect()
        .await
        .map_err(|_| Error::TooLarge(state.max_body as u64))?
        .to_bytes();
    if auth::body_digest(&bytes) != digest {
        return Err(Error::Unauthenticated(
            "body does not match x-oed-content-sha256",
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

#[derive(Deserialize)]
struct PutShardQuery {
    record: String,
    /// The shard file is followed by a JSON `RecordTail`.
    tail: Option<bool>,
}

/// How much of an unread upload is read and dropped before an early error answer.
const DRAIN_LIMIT: usize = 4 << 20;

async fn put_shard(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<PutShardQuery>,
    body: Body,
) -> Result<Json<crate::store::Stored>> {
    // Counted as it arrives, drained rest included; recorded when the stream is dropped.
    let mut meter = BodyMeter::new(state.traffic.clone(), Class::Peer, Direction::In);
    let mut stream = body.into_data_stream().inspect(move |piece| {
        if let Ok(b) = piece {
            meter.add(b.len());
        }
    });
    let result = match serde_json::from_str::<ObjectRecord>(&q.record) {
        Ok(record) => {
            state
                .store
                .put_shard(record, &mut stream, q.tail.unwrap_or(false))
                .await
        }
        Err(e) => Err(Error::BadRequest(format!("record: {e}"))),
    };
    if result.is_err() {
        // A client still sending its body when the answer comes and the connection
        // closes sees a reset, not the answer. Reading a bounded rest lets it read the
        // error; past the bound, closing is the cheaper choice.
        let drain = async {
            let mut left = DRAIN_LIMIT;
            while let Some(Ok(piece)) = futures_util::StreamExt::next(&mut stream).await {
                left = left.saturating_sub(piece.len());
                if left == 0 {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), drain).await;
    }
    drop(stream);
    Ok(Json(result?))
}

/// `bucket`, `key`, and optionally `version` and a stripe range (`GET shard` only).
#[derive(Deserialize)]
struct ObjectQuery {
    bucket: String,
    key: String,
    version: Option<String>,
    from: Option<u64>,
    to: Option<u64>,
}

impl ObjectQuery {
    fn version(&self) -> Result<Option<VersionId>> {
        self.version.as_deref().map(str::parse).transpose()
    }
}

async fn get_shard(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<ObjectQuery>,
) -> Result<Response> {
    let (record, bytes) = state.store.shard(&q.bucket, &q.key, q.version()?)?;
    let layout = record.layout()?;
    let stripes = layout.stripe_count(record.size);
    let from = q.from.unwrap_or(0);
    let to = q.to.unwrap_or(stripes).min(stripes);
    if from > to {
        return Err(Error::BadRequest(format!(
            "stripe range {from}..{to} is empty or reversed"
        )));
    }
    let version_id = record.version_id;
    let mut rx = state.store.read_stripes(record, bytes, from, to);
    state.traffic.shard_read(from);
    let mut meter = BodyMeter::new(state.traffic.clone(), Class::Peer, Direction::Out);
    // The first chunk decides the status: a bad one is an error answer, not a short body.
    let first = match rx.recv().await {
        Some(Err(e)) => return Err(e),
        Some(Ok(b)) => Some(b),
        None => None,
    };
    let body = futures_util::stream::unfold((first, rx), |(first, mut rx)| async move {
        let item = match first {
            Some(b) => Ok(b),
            // An error ends the body: the client sees a broken transfer.
            None => rx
                .recv()
                .await?
                .map_err(|e| std::io::Error::other(e.to_string())),
        };
        Some((item, (None, rx)))
    })
    .inspect(move |item| {
        if let Ok(b) = item {
            meter.add(b.len());
        }
    });
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert("x-oed-version-id", header_value(&version_id.to_string()));
    headers.insert("x-oed-stripes", header_value(&format!("{from}-{to}")));
    Ok((StatusCode::OK, headers, Body::from_stream(body)).into_response())
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

async fn stat(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<ObjectQuery>,
) -> Result<Json<ObjectRecord>> {
    let rec = state
        .store
        .meta()
        .object(&q.bucket, &q.key)?
        .ok_or(Error::NotFound("object"))?;
    Ok(Json(rec))
}

async fn delete_object(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<ObjectQuery>,
) -> Result<StatusCode> {
    state
        .store
        .delete_object(&q.bucket, &q.key, q.version()?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct ListQuery {
    bucket: String,
    #[serde(default)]
    start: String,
    limit: Option<usize>,
}

/// Most records one listing call returns.
const MAX_LIST: usize = 1000;

async fn list(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Vec<ObjectRecord>>> {
    if state.store.meta().bucket(&q.bucket)?.is_none() {
        return Err(Error::NotFound("bucket"));
    }
    let limit = q.limit.unwrap_or(MAX_LIST).min(MAX_LIST);
    Ok(Json(
        state
            .store
            .meta()
            .list_objects(&q.bucket, &q.start, limit)?,
    ))
}

#[derive(Deserialize)]
struct BucketQuery {
    bucket: String,
}

async fn create_bucket(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<BucketQuery>,
) -> Result<impl IntoResponse> {
    Ok(Json(state.store.create_bucket(&q.bucket)?))
}

async fn delete_bucket(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<BucketQuery>,
) -> Result<StatusCode> {
    state.store.meta().delete_bucket(&q.bucket)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn buckets(State(state): State<Arc<PeerState>>) -> Result<impl IntoResponse> {
    Ok(Json(state.store.meta().buckets()?))
}

async fn info(State(state): State<Arc<PeerState>>) -> Result<impl IntoResponse> {
    let cap = state.store.capacity()?;
    let health = if cap.free_bytes < cap.reserve_bytes {
        "low-space"
    } else {
        "ok"
    };
    Ok(Json(serde_json::json!({
        "drive_id": state.drive_id,
        "version": env!("CARGO_PKG_VERSION"),
        "capacity_bytes": cap.capacity_bytes,
        "free_bytes": cap.free_bytes,
        "reserve_bytes": cap.reserve_bytes,
        "shard_count": state.store.meta().object_count(),
        "heal_backlog": state.store.meta().heal_backlog(),
        "auth_failures": state.auth_failures.load(Ordering::Relaxed),
        "health": health,
    })))
}
