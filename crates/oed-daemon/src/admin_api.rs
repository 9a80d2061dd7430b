//! The admin routes of the peer API (`/_oed/peer/v1/admin/`): a drive's repair state,
//! maintenance actions, and the cluster map in force. They act on the drive's repair
//! work ([`Repair`]) and its cluster, which sit above the peer protocol, so they are
//! served from here and merged into the peer router by the server
//! ([`oed_peer::router`]), behind the same authentication as every peer request. Their
//! paths are [`PeerOp`]'s, the one route table the client uses too.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use oed_cluster::Cluster;
use oed_model::account::{AccountAnswer, AccountRequest};
use oed_model::drive::DriveError;
use oed_model::error::Error;
use oed_model::map::ClusterMap;
use oed_peer::PeerOp;
use oed_repair::{Repair, RepairStatus};

type Answer<T> = Result<T, DriveError>;

/// The admin routes, acting on `repair` and `cluster`, for a router of any state.
pub fn routes<S: Clone + Send + Sync + 'static>(
    repair: Arc<Repair>,
    cluster: Arc<Cluster>,
) -> Router<S> {
    Router::new()
        .route(PeerOp::AdminStatus.route().1, get(status))
        .route(PeerOp::AdminAction.route().1, post(action))
        .route(PeerOp::GetMap.route().1, get(get_map).post(put_map))
        .with_state(repair)
        .merge(
            Router::new()
                .route(PeerOp::AdminAccounts.route().1, post(accounts))
                .with_state(cluster),
        )
}

/// `POST admin/accounts`: one [`AccountRequest`] (JSON), carried out by this drive and
/// spread to the others (`oed_cluster::accounts`).
async fn accounts(State(cluster): State<Arc<Cluster>>, body: Bytes) -> Answer<Json<AccountAnswer>> {
    let req: AccountRequest = serde_json::from_slice(&body)
        .map_err(|e| Error::BadRequest(format!("account request: {e}")))?;
    Ok(Json(cluster.administer(req).await?))
}

/// A maintenance action (`POST admin/action?do=ACTION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// A scrub pass now.
    Scrub,
    /// Refill this drive from the others now.
    Refill,
    /// Retry the deferred heals now.
    Retry,
    /// Move every shard off this drive (it must be marked out in the map).
    Drain,
    /// Stop a drain.
    Undrain,
    /// A lifecycle pass now.
    Lifecycle,
}

impl Action {
    /// Its name in the query.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scrub => "scrub",
            Self::Refill => "refill",
            Self::Retry => "retry",
            Self::Drain => "drain",
            Self::Undrain => "undrain",
            Self::Lifecycle => "lifecycle",
        }
    }

    /// The action named `name`.
    ///
    /// # Errors
    /// [`Error::BadRequest`] naming the actions there are.
    pub fn parse(name: &str) -> Result<Self, Error> {
        [
            Self::Scrub,
            Self::Refill,
            Self::Retry,
            Self::Drain,
            Self::Undrain,
            Self::Lifecycle,
        ]
        .into_iter()
        .find(|a| a.as_str() == name)
        .ok_or_else(|| {
            Error::BadRequest(format!(
                "unknown action {name:?}: scrub, refill, retry, drain, undrain or lifecycle"
            ))
        })
    }
}

/// The answer to `POST admin/action`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionTaken {
    /// The action asked for.
    pub action: String,
    /// Whether it started (false: it was running already, or had nothing to do).
    pub started: bool,
}

/// The answer to `POST admin/map`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapTaken {
    /// The epoch of the map the drive runs now.
    pub epoch: u64,
    /// Whether the map sent differed from the one in force.
    pub changed: bool,
}

async fn status(State(repair): State<Arc<Repair>>) -> Json<RepairStatus> {
    Json(repair.status_now())
}

#[derive(Deserialize)]
struct ActionQuery {
    #[serde(rename = "do")]
    action: String,
}

async fn action(
    State(repair): State<Arc<Repair>>,
    Query(q): Query<ActionQuery>,
) -> Answer<Json<ActionTaken>> {
    let started = match Action::parse(&q.action)? {
        Action::Scrub => repair.start_scrub(),
        Action::Refill => repair.start_refill(),
        Action::Retry => repair.retry_deferred(),
        Action::Drain => repair.start_drain()?,
        Action::Undrain => repair.stop_drain(),
        Action::Lifecycle => repair.start_lifecycle(),
    };
    Ok(Json(ActionTaken {
        action: q.action,
        started,
    }))
}

async fn get_map(State(repair): State<Arc<Repair>>) -> Answer<Response> {
    let map = repair.cluster().map();
    let text = toml::to_string(&map.map).map_err(|e| Error::Config(e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, "application/toml")], text).into_response())
}

async fn put_map(State(repair): State<Arc<Repair>>, body: Bytes) -> Answer<Json<MapTaken>> {
    let text = std::str::from_utf8(&body)
        .map_err(|_| Error::BadRequest("the cluster map is not UTF-8 text".into()))?;
    let map: ClusterMap =
        toml::from_str(text).map_err(|e| Error::BadRequest(format!("cluster map: {e}")))?;
    let removed = repair.cluster().apply_map(map).await?;
    if let Some(removed) = &removed {
        repair.map_changed(removed);
    }
    Ok(Json(MapTaken {
        epoch: repair.cluster().map().epoch,
        changed: removed.is_some(),
    }))
}
