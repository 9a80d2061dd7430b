//! The peer API under `/_oed/peer/v1/`: how the drives of a cluster use each other's
//! stores. Every route is authenticated ([`auth`]). Its handlers are thin adapters from
//! HTTP to the [`Drive`] interface of this drive's store; [`client::PeerClient`]
//! implements the same interface on the other side. The routes, named once in
//! [`PeerOp`] (all answers JSON unless said):
//!
//! | method and path | query | what |
//! |---|---|---|
//! | `PUT shard` | `record` (JSON)`[, tail=true]` | store a shard; body: the shard file, streamed (then a JSON record tail), or the same on the connection upgraded to a raw upload ([`raw`]) |
//! | `GET shard` | `bucket, key[, version][, from, to]` | chunk bytes of stripes `from..to`, each CRC-checked (binary) |
//! | `GET object` | `bucket, key` | the object record (stat) |
//! | `DELETE object` | `bucket, key[, version]` | delete record and shard |
//! | `GET objects` | `bucket[, start][, limit]` | records in key order from `start` |
//! | `PUT bucket`, `DELETE bucket` | `bucket` | bucket records |
//! | `GET buckets` | | every bucket record |
//! | `GET info` | | capacity, free space, counts, version, health |
//! | `POST op` | | a near-data operation on a shard (body: the request, JSON) |
//! | `POST heal` | | add entries to the drive's heal queue (body: JSON list) |
//! | `POST versions` | | the version held of each object (body: JSON list of `{bucket, key}`) |
//! | `GET records` | `drive[, bucket, key][, limit]` | records placing a shard on `drive`, after `bucket`/`key` |
//! | `POST relocate` | | records updated for shards that moved (body: JSON list) |
//! | `POST settle` | | client writes settled: replaced versions dropped or put back (body: JSON list) |
//! | `GET admin/status` | | the drive's heal, scrub, refill and drain state |
//! | `POST admin/action` | `do` (`scrub`, `refill`, `retry`, `drain`, `undrain`) | start or stop maintenance work |
//! | `GET admin/map` | | the cluster map in force (TOML) |
//! | `POST admin/map` | | put a newer cluster map in force (body: TOML) |

pub mod auth;
pub mod client;
mod frames;
mod raw;
pub mod refusals;
pub mod replay;
pub mod stall;
pub mod tls;

/// The response header of `GET shard` that names the version read.
pub const VERSION_HEADER: &str = "x-oed-version-id";
/// The request header naming the epoch of the cluster map its sender runs, as versions
/// before the signed `epoch=` query parameter ([`auth::EPOCH`]) send it: still sent, for
/// them; read only from a request without the parameter.
pub const EPOCH_HEADER: &str = "x-oed-map-epoch";
/// The header of every answer to an authenticated request with the answering drive's
/// clock, ms since the epoch: the sender learns how far its own clock is from it
/// ([`client::PeerClient::clock_offset_ms`]).
pub const TIME_HEADER: &str = "x-oed-time-ms";
/// The header with [`TIME_HEADER`]'s tag ([`auth::PeerKey::time_tag`]).
pub const TIME_TAG_HEADER: &str = "x-oed-time-tag";

/// The response header of `GET shard` that names the stripes sent, `from-to`.
pub const STRIPES_HEADER: &str = "x-oed-stripes";

pub use frames::FRAMED_READ;
pub use raw::{ConnectionHold, KEEP_HEADER, RAW_UPLOAD, ServeAgain};
pub use refusals::RefusalLog;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, put};
use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};
use http_body_util::BodyExt;
use serde::Deserialize;
use tokio::sync::Semaphore;

use auth::PeerKey;
use oed_meter::traffic::{BodyMeter, Class, Direction};
use oed_model::account::{AccountDigest, SignedEntry};
use oed_model::drive::{
    Amendment, Drive, DriveError, DriveInfo, HealEntry, MAX_LIST, ObjectRef, OpAnswer, OpRequest,
    RecordPage, Relocation, Settlement, Stored,
};
use oed_model::error::Error;
use oed_model::record::{BucketRecord, ObjectRecord, VersionId};

/// Makes [`PeerOp`] from the one table of the peer API's routes: each operation's name
/// (the `op` label of the request metrics), HTTP method and path under `/_oed/peer/v1/`.
macro_rules! peer_ops {
    ($($op:ident => $method:ident $path:literal,)*) => {
        /// The operations of the peer API: the one table of its routes (`peer_ops!`), used
        /// by the router, by [`client::PeerClient`] and by the request metrics (`op` label).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum PeerOp {
            $(
                #[doc = concat!("`", stringify!($method), " ", $path, "`.")]
                $op,
            )*
        }

        impl PeerOp {
            /// Every operation.
            pub const ALL: &[Self] = &[$(Self::$op),*];

            /// Its name, as the `op` label of the request metrics.
            #[must_use]
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$op => stringify!($op),)*
                }
            }

            /// Its HTTP method and path.
            #[must_use]
            pub fn route(self) -> (Method, &'static str) {
                match self {
                    $(Self::$op => (Method::$method, concat!("/_oed/peer/v1/", $path)),)*
                }
            }
        }
    };
}

peer_ops! {
    PutShard => PUT "shard",
    GetShard => GET "shard",
    StatObject => GET "object",
    DeleteObject => DELETE "object",
    ListObjects => GET "objects",
    CreateBucket => PUT "bucket",
    DeleteBucket => DELETE "bucket",
    ListBuckets => GET "buckets",
    Info => GET "info",
    RunOp => POST "op",
    QueueHeals => POST "heal",
    Versions => POST "versions",
    RecordsFor => GET "records",
    Relocate => POST "relocate",
    Settle => POST "settle",
    Promote => POST "promote",
    Amend => POST "amend",
    AccountDigest => GET "accounts/digest",
    AccountEntries => GET "accounts",
    MergeAccounts => POST "accounts",
    KeysUsed => GET "accounts/used",
    AdminStatus => GET "admin/status",
    AdminAction => POST "admin/action",
    GetMap => GET "admin/map",
    PutMap => POST "admin/map",
    AdminAccounts => POST "admin/accounts",
    AdminConsole => GET "admin/console",
    AdminHistory => GET "admin/history",
}

impl PeerOp {
    /// The operation a request's method and matched route name, if any.
    #[must_use]
    pub fn of(method: &Method, path: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|op| {
            let (m, p) = op.route();
            m == method && p == path
        })
    }

    /// Its handler; `None` for the admin routes, which act on layers above this one
    /// and come to [`router`] from the server ([`oed_daemon::admin_api`]).
    fn handler(self) -> Option<MethodRouter<Arc<PeerState>>> {
        Some(match self {
            Self::PutShard => put(put_shard),
            Self::GetShard => get(get_shard),
            Self::StatObject => get(stat),
            Self::DeleteObject => delete(delete_object),
            Self::ListObjects => get(list),
            Self::CreateBucket => put(create_bucket),
            Self::DeleteBucket => delete(delete_bucket),
            Self::ListBuckets => get(buckets),
            Self::Info => get(info),
            Self::RunOp => axum::routing::post(run_op),
            Self::QueueHeals => axum::routing::post(queue_heals),
            Self::Versions => axum::routing::post(versions),
            Self::RecordsFor => get(records_for),
            Self::Relocate => axum::routing::post(relocate),
            Self::Settle => axum::routing::post(settle),
            Self::Promote => axum::routing::post(promote),
            Self::Amend => axum::routing::post(amend),
            Self::AccountDigest => get(account_digest),
            Self::AccountEntries => get(account_entries),
            Self::MergeAccounts => axum::routing::post(merge_accounts),
            Self::KeysUsed => get(keys_used),
            Self::AdminStatus
            | Self::AdminAction
            | Self::GetMap
            | Self::PutMap
            | Self::AdminAccounts
            | Self::AdminConsole
            | Self::AdminHistory => return None,
        })
    }
}

tokio::task_local! {
    /// The client a request came from (its address), for the request's task: set by the
    /// server around every request, read where a request takes its share of the memory
    /// budget (`oed-cluster`) and where a refused peer request is logged.
    pub static CLIENT: Option<std::net::IpAddr>;
}

/// The client of the request running on this task, if the server named one ([`CLIENT`]).
#[must_use]
pub fn request_client() -> Option<std::net::IpAddr> {
    CLIENT.try_with(|c| *c).ok().flatten()
}

/// Everything the peer API's handlers share.
#[derive(Debug)]
pub struct PeerState {
    /// This drive, as other drives use it: its store.
    pub drive: Arc<dyn Drive>,
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
    /// When a refused request last got a line in the log ([`refusals`]).
    pub refusals: RefusalLog,
    /// Traffic counters (class `peer`).
    pub traffic: oed_meter::traffic::Traffic,
    /// Told when heal entries arrive for this drive: its healer waits on it.
    pub heal_wake: Arc<tokio::sync::Notify>,
    /// The epoch of the cluster map this drive runs (it changes when a newer map is
    /// applied).
    pub epoch: Arc<AtomicU64>,
    /// Requests from drives that named another epoch since start.
    pub epoch_mismatches: AtomicU64,
    /// Raw uploads since start after which this drive served the sender's next request
    /// on the same connection ([`raw`]).
    pub raw_connections_kept: AtomicU64,
    /// Shard reads since start that this drive answered with their frames, sent from the
    /// shard file ([`frames`]).
    pub framed_reads: AtomicU64,
    /// Whether framed reads are sent with `sendfile` (`shard_sendfile`).
    pub sendfile: bool,
    /// Whether unsealed shard uploads are taken (`legacy_peer_requests`, during a
    /// rolling upgrade from a version before the seal).
    pub legacy_requests: bool,
    /// The nonces of requests taken ([`replay`]).
    pub replay: replay::ReplayGuard,
    /// This drive's id: requests named for another (`target=`) are refused.
    pub drive_id: String,
    /// The store-only extension of `drive`, when it is a store: the two transfers that
    /// move a shard file's bytes between the socket and the file without passing them
    /// through the daemon (raw uploads, [`raw`]: `Store::put_shard_raw`; framed reads,
    /// [`frames`]: `Store::shard` and `sendfile`) need the file itself, which the
    /// [`Drive`] interface does not give. Every other operation goes through `drive`;
    /// without a store, both transfers are answered the ordinary way.
    pub store: Option<oed_store::Store>,
}

/// The peer API routes, with `admin` (the admin routes, [`PeerOp::AdminStatus`] and the
/// others of `admin/`) among them, authentication and the concurrency limit applied.
pub fn router(state: Arc<PeerState>, admin: Router<Arc<PeerState>>) -> Router {
    let mut router = Router::new();
    for &op in PeerOp::ALL {
        if let Some(handler) = op.handler() {
            router = router.route(op.route().1, handler);
        }
    }
    router
        .merge(admin)
        .route(
            "/_oed/{*rest}",
            axum::routing::any(|| async { Error::NotFound(oed_model::error::Missing::Route) }),
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

/// Counts a request refused for its authentication (its signature, its date, its body's
/// seal) and logs it, one line per [`refusals::EVERY`] at most, with the sender's address.
fn refused(
    state: &PeerState,
    op: Option<PeerOp>,
    client: Option<std::net::IpAddr>,
    e: &dyn std::fmt::Display,
) {
    state.auth_failures.fetch_add(1, Ordering::Relaxed);
    if let Some(unwritten) = state.refusals.line(std::time::Instant::now()) {
        let client = client.map_or_else(|| "unknown".to_owned(), |c| c.to_string());
        tracing::warn!(
            %client,
            op = %op.map_or("unknown", PeerOp::name),
            error = %e,
            refused_since_last_line = unwritten,
            "peer request refused (one line per {} s at most; \
             oed_peer_auth_failures_total counts them all)",
            refusals::EVERY.as_secs()
        );
    }
}

/// Checks the signature, the timestamp and (for small bodies) the body digest; counts
/// and refuses failures before any handler runs.
async fn authenticate(State(state): State<Arc<PeerState>>, req: Request, next: Next) -> Response {
    let op = PeerOp::of(req.method(), req.uri().path());
    let upload = op == Some(PeerOp::PutShard);
    match check_auth(&state, req)
        .await
        .and_then(|(req, signature)| Ok((check_epoch(&state, req)?, signature)))
    {
        Ok((req, signature)) => {
            let mut resp = next.run(req).await;
            // Authenticated: the answer's time, tagged for this request.
            let ms = oed_model::record::now_ms();
            let tag = state.key.time_tag(&signature, ms);
            let h = resp.headers_mut();
            h.insert(TIME_HEADER, HeaderValue::from(ms));
            if let Ok(tag) = HeaderValue::from_str(&tag) {
                h.insert(TIME_TAG_HEADER, tag);
            }
            resp
        }
        Err(e) => {
            if matches!(e, Error::Unauthenticated(_) | Error::Expired(_)) {
                refused(&state, op, request_client(), &e);
            }
            let mut resp = e.into_response();
            if upload {
                // The upload's body is left unread: the connection cannot carry another
                // request, so it closes, and the client opens a new one for the next.
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            resp
        }
    }
}

/// Counts a request whose sender named another cluster map epoch, and refuses it when it
/// stores a shard: a shard placed by another map must not mix with this drive's.
fn check_epoch(state: &PeerState, req: Request) -> Result<Request, Error> {
    // The epoch in the signed query; without it, the header that senders of earlier
    // versions send (not signed: it guards their writes against mistakes, as it did).
    let signed = req.uri().query().unwrap_or("").split('&').find_map(|p| {
        p.strip_prefix(auth::EPOCH)?
            .strip_prefix('=')?
            .parse::<u64>()
            .ok()
    });
    let theirs = signed.or_else(|| {
        req.headers()
            .get(EPOCH_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
    });
    let mine = state.epoch.load(Ordering::Relaxed);
    match theirs {
        Some(theirs) if theirs != mine => {
            state.epoch_mismatches.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                mine,
                theirs,
                path = req.uri().path(),
                "a peer runs another cluster map epoch"
            );
            if PeerOp::of(req.method(), req.uri().path()) == Some(PeerOp::PutShard) {
                return Err(Error::StaleMap { mine, theirs });
            }
            Ok(req)
        }
        _ => Ok(req),
    }
}

/// The request, authenticated, and its signature (hex).
async fn check_auth(state: &PeerState, req: Request) -> Result<(Request, String), Error> {
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
    let changes = req.method() != Method::GET && req.method() != Method::HEAD;
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
    };
    match param(auth::TARGET) {
        Some(to) if to != oed_model::uri::encode(&state.drive_id) => {
            return Err(Error::Unauthenticated(
                "addressed to another drive (target=): a request for one drive is not taken by \
                 another",
            ));
        }
        None if changes && !state.legacy_requests => {
            return Err(Error::Unauthenticated(
                "a request that changes something must name its drive (target=<drive id>); this \
                 drive takes one without only with legacy_peer_requests, during a rolling \
                 upgrade",
            ));
        }
        _ => {}
    }
    let nonce = param(auth::NONCE);
    match nonce {
        Some(n) => state.replay.take(n, auth::now_secs())?,
        None if changes && !state.legacy_requests => {
            return Err(Error::Unauthenticated(
                "a request that changes something must carry a nonce (nonce=<ms>-<hex>); \
                 this drive takes one without only with legacy_peer_requests, during a \
                 rolling upgrade",
            ));
        }
        None => {}
    }
    let streams = digest == auth::STREAMING || digest == auth::SEALED;
    if streams && PeerOp::of(req.method(), &path) != Some(PeerOp::PutShard) {
        return Err(Error::Unauthenticated(
            "only shard uploads may stream their body",
        ));
    }
    if digest == auth::SEALED {
        // The body is checked against its seal where its CRC32C is (the store).
        let mut req = req;
        req.extensions_mut()
            .insert(SealKey(state.key.seal_key(sig)));
        return Ok((req, sig.to_owned()));
    }
    if digest == auth::STREAMING {
        if !state.legacy_requests {
            return Err(Error::Unauthenticated(
                "shard uploads must be sealed (STREAMING-POLY1305): this drive takes \
                 unsealed ones only with legacy_peer_requests, during a rolling upgrade",
            ));
        }
        // Unsealed: the chunks are checked by CRC32C only.
        return Ok((req, sig.to_owned()));
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
    Ok((
        Request::from_parts(parts, Body::from(bytes)),
        sig.to_owned(),
    ))
}

/// The key of the seal a shard upload's body ends with, derived from its request's
/// signature ([`PeerKey::seal_key`]); in the extensions of a sealed upload's request.
#[derive(Clone, Copy)]
struct SealKey([u8; oed_model::seal::KEY_LEN]);

impl SealKey {
    /// The seal of the request carrying this key, if any.
    fn of(req: &Request) -> Option<oed_model::seal::Seal> {
        req.extensions()
            .get::<SealKey>()
            .map(|k| oed_model::seal::Seal::new(&k.0))
    }
}

/// A handler's answer: errors in their public form ([`DriveError`]).
type Answer<T> = Result<T, DriveError>;

#[derive(Deserialize)]
struct PutShardQuery {
    record: String,
    /// The shard file is followed by a JSON `RecordTail`.
    tail: Option<bool>,
}

/// How much of an unread upload is read and dropped before an early error answer.
const DRAIN_LIMIT: usize = 4 << 20;

/// A stream two owners take turns at: the drive reads the upload through one handle,
/// and when it refuses the upload early the handler drains the rest through the other.
struct TakenInTurns<S>(Arc<Mutex<S>>);

impl<S: Stream + Unpin> Stream for TakenInTurns<S> {
    type Item = S::Item;
    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        // Never contended: the handler waits for the drive before it reads.
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        s.poll_next_unpin(cx)
    }
}

async fn put_shard(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<PutShardQuery>,
    req: Request,
) -> Response {
    let raw = req
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(RAW_UPLOAD.as_bytes()));
    let seal = SealKey::of(&req);
    if raw && let Some(store) = state.store.clone() {
        return raw::accept(state, store, &q, req, seal);
    }
    put_shard_body(state, q, req.into_body(), seal)
        .await
        .into_response()
}

/// `PUT shard` with the shard file as the request's body.
async fn put_shard_body(
    state: Arc<PeerState>,
    q: PutShardQuery,
    body: Body,
    seal: Option<oed_model::seal::Seal>,
) -> Answer<Json<Stored>> {
    // Counted as it arrives, drained rest included; recorded when the stream is dropped.
    let mut meter = BodyMeter::new(state.traffic.clone(), Class::Peer, Direction::In);
    let stream = body.into_data_stream().map(move |piece| {
        let piece = piece.map_err(std::io::Error::other)?;
        meter.add(piece.len());
        Ok::<Bytes, std::io::Error>(piece)
    });
    let stream = Arc::new(Mutex::new(stream));
    let result = match serde_json::from_str::<ObjectRecord>(&q.record) {
        Ok(record) => {
            let upload = Box::pin(TakenInTurns(stream.clone()));
            let tail = q.tail.unwrap_or(false);
            match (seal, &state.store) {
                (None, _) => state.drive.put_shard(&record, upload, tail).await,
                // Only a store checks a seal: the `Drive` interface carries none.
                (Some(seal), Some(store)) => store
                    .put_shard_sealed(record, upload, tail, Some(seal))
                    .await
                    .map(|mut stored| {
                        oed_store::without_file(&mut stored.record);
                        stored
                    })
                    .map_err(DriveError::from),
                (Some(_), None) => Err(Error::Unauthenticated(
                    "this drive has no store to check a sealed upload against",
                )
                .into()),
            }
        }
        Err(e) => Err(Error::BadRequest(format!("record: {e}")).into()),
    };
    if let Err(e) = &result
        && e.code == oed_model::drive::ErrorCode::Unauthenticated
    {
        refused(&state, Some(PeerOp::PutShard), request_client(), e);
    }
    if result.is_err() {
        // A client still sending its body when the answer comes and the connection
        // closes sees a reset, not the answer. Reading a bounded rest lets it read the
        // error; past the bound, closing is the cheaper choice.
        let mut rest = TakenInTurns(stream);
        let drain = async {
            let mut left = DRAIN_LIMIT;
            while let Some(Ok(piece)) = rest.next().await {
                left = left.saturating_sub(piece.len());
                if left == 0 {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), drain).await;
    }
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
    fn version(&self) -> Answer<Option<VersionId>> {
        Ok(self.version.as_deref().map(str::parse).transpose()?)
    }

    /// The stripes asked for, `None`: all.
    fn stripes(&self) -> Option<std::ops::Range<u64>> {
        match (self.from, self.to) {
            (None, None) => None,
            (from, to) => Some(from.unwrap_or(0)..to.unwrap_or(u64::MAX)),
        }
    }
}

async fn get_shard(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<ObjectQuery>,
    req: Request,
) -> Answer<Response> {
    let framed = req
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(FRAMED_READ.as_bytes()));
    if framed
        && let Some(store) = state.store.clone()
        && let Some(resp) = frames::accept(&state, &store, &q, req)
    {
        return Ok(resp);
    }
    let read = state
        .drive
        .read_shard(&q.bucket, &q.key, q.version()?, q.stripes())
        .await?;
    let mut meter = BodyMeter::new(state.traffic.clone(), Class::Peer, Direction::Out);
    // An error ends the body: the client sees a broken transfer, never bad bytes.
    let body = read.chunks.map(move |item| {
        let b = item.map_err(std::io::Error::other)?;
        meter.add(b.len());
        Ok::<Bytes, std::io::Error>(b)
    });
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    read_headers(&mut headers, read.version, &read.stripes);
    Ok((StatusCode::OK, headers, Body::from_stream(body)).into_response())
}

/// The headers of an answer to `GET shard` (a body or a framed read's `101`) naming the
/// version read and the stripes sent.
fn read_headers(headers: &mut HeaderMap, version: VersionId, stripes: &std::ops::Range<u64>) {
    headers.insert(VERSION_HEADER, header_value(&version.to_string()));
    headers.insert(
        STRIPES_HEADER,
        header_value(&format!("{}-{}", stripes.start, stripes.end)),
    );
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

async fn stat(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<ObjectQuery>,
) -> Answer<Json<ObjectRecord>> {
    let rec = state.drive.stat(&q.bucket, &q.key).await?;
    Ok(Json(rec.ok_or(Error::NotFound(
        oed_model::error::Missing::Object,
    ))?))
}

async fn delete_object(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<ObjectQuery>,
) -> Answer<StatusCode> {
    state
        .drive
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

async fn list(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<ListQuery>,
) -> Answer<Json<Vec<ObjectRecord>>> {
    let limit = q.limit.unwrap_or(MAX_LIST);
    Ok(Json(
        state.drive.list_objects(&q.bucket, &q.start, limit).await?,
    ))
}

#[derive(Deserialize)]
struct BucketQuery {
    bucket: String,
}

async fn create_bucket(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<BucketQuery>,
) -> Answer<Json<BucketRecord>> {
    Ok(Json(state.drive.create_bucket(&q.bucket).await?))
}

async fn delete_bucket(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<BucketQuery>,
) -> Answer<StatusCode> {
    state.drive.delete_bucket(&q.bucket).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn buckets(State(state): State<Arc<PeerState>>) -> Answer<Json<Vec<BucketRecord>>> {
    Ok(Json(state.drive.buckets().await?))
}

async fn info(State(state): State<Arc<PeerState>>) -> Answer<Json<DriveInfo>> {
    let mut info = state.drive.info().await?;
    // The one figure the store cannot know: refusals happen before any handler runs.
    info.auth_failures = state.auth_failures.load(Ordering::Relaxed);
    Ok(Json(info))
}

async fn run_op(State(state): State<Arc<PeerState>>, body: Bytes) -> Answer<Json<OpAnswer>> {
    let req: OpRequest = serde_json::from_slice(&body)
        .map_err(|e| Error::BadRequest(format!("operation request: {e}")))?;
    Ok(Json(state.drive.run_op(&req).await?))
}

async fn queue_heals(State(state): State<Arc<PeerState>>, body: Bytes) -> Answer<Json<usize>> {
    let entries: Vec<HealEntry> = serde_json::from_slice(&body)
        .map_err(|e| Error::BadRequest(format!("heal entries: {e}")))?;
    let n = state.drive.queue_heals(&entries).await?;
    state.heal_wake.notify_one();
    Ok(Json(n))
}

async fn versions(
    State(state): State<Arc<PeerState>>,
    body: Bytes,
) -> Answer<Json<Vec<Option<VersionId>>>> {
    let objects: Vec<ObjectRef> =
        serde_json::from_slice(&body).map_err(|e| Error::BadRequest(format!("objects: {e}")))?;
    Ok(Json(state.drive.versions(&objects).await?))
}

#[derive(Deserialize)]
struct RecordsQuery {
    drive: String,
    bucket: Option<String>,
    key: Option<String>,
    limit: Option<usize>,
}

async fn records_for(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<RecordsQuery>,
) -> Answer<Json<RecordPage>> {
    let after = match (q.bucket, q.key) {
        (Some(bucket), Some(key)) => Some(ObjectRef { bucket, key }),
        _ => None,
    };
    let limit = q.limit.unwrap_or(MAX_LIST);
    Ok(Json(
        state
            .drive
            .records_for(&q.drive, after.as_ref(), limit)
            .await?,
    ))
}

async fn relocate(State(state): State<Arc<PeerState>>, body: Bytes) -> Answer<Json<Vec<bool>>> {
    let moves: Vec<Relocation> =
        serde_json::from_slice(&body).map_err(|e| Error::BadRequest(format!("moves: {e}")))?;
    Ok(Json(state.drive.relocate(&moves).await?))
}

async fn settle(State(state): State<Arc<PeerState>>, body: Bytes) -> Answer<Json<Vec<bool>>> {
    let settlements: Vec<Settlement> = serde_json::from_slice(&body)
        .map_err(|e| Error::BadRequest(format!("settlements: {e}")))?;
    Ok(Json(state.drive.settle(&settlements).await?))
}

async fn promote(
    State(state): State<Arc<PeerState>>,
    Query(q): Query<ObjectQuery>,
) -> Answer<Json<Option<VersionId>>> {
    Ok(Json(state.drive.promote(&q.bucket, &q.key).await?))
}

async fn amend(State(state): State<Arc<PeerState>>, body: Bytes) -> Answer<Json<Vec<bool>>> {
    let amendments: Vec<Amendment> =
        serde_json::from_slice(&body).map_err(|e| Error::BadRequest(format!("amendments: {e}")))?;
    Ok(Json(state.drive.amend(&amendments).await?))
}

async fn account_digest(State(state): State<Arc<PeerState>>) -> Answer<Json<AccountDigest>> {
    Ok(Json(state.drive.account_digest().await?))
}

async fn account_entries(State(state): State<Arc<PeerState>>) -> Answer<Json<Vec<SignedEntry>>> {
    Ok(Json(state.drive.account_entries().await?))
}

async fn keys_used(
    State(state): State<Arc<PeerState>>,
) -> Answer<Json<std::collections::HashMap<String, u64>>> {
    Ok(Json(state.drive.keys_used().await?))
}

async fn merge_accounts(State(state): State<Arc<PeerState>>, body: Bytes) -> Answer<Json<usize>> {
    let entries: Vec<SignedEntry> = serde_json::from_slice(&body)
        .map_err(|e| Error::BadRequest(format!("account entries: {e}")))?;
    let taken = state.drive.merge_accounts(&entries).await?;
    if taken > 0 {
        tracing::info!(taken, "account entries taken from a peer");
    }
    Ok(Json(taken))
}
