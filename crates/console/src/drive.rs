//! What one drive tells the console about itself, over the peer API's admin routes
//! (`GET admin/console`, `GET admin/history`): its repair status, capacity, power,
//! energy, temperature and rates now ([`DriveView`]), and its last hour
//! ([`HistoryView`]). Every drive answers for itself; the drive a browser talks to
//! gathers the answers.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use oed_meter::EnergyReader;
use oed_meter::history::{History, Point, SLOT_SECONDS};
use oed_peer::PeerOp;
use oed_repair::{Repair, RepairStatus};

/// An hour, ms.
const HOUR_MS: u64 = 3_600_000;

/// A drive's data file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityView {
    /// Its size.
    pub total_bytes: u64,
    /// Bytes in use (size less free).
    pub used_bytes: u64,
    /// Bytes free for this drive's data.
    pub free_bytes: u64,
}

/// A drive's power and energy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerView {
    /// Power over the last sampler period (`None` before the first reading, or when the
    /// last failed).
    pub watts: Option<f64>,
    /// Joules since the daemon started.
    pub joules: f64,
    /// Joules since midnight UTC (since the start, if it started today).
    pub joules_today: Option<f64>,
    /// `measured` or `modelled`.
    pub method: String,
    /// The source, as the metrics' `source` label.
    pub source: String,
}

/// A drive's answer to `GET admin/console`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DriveView {
    /// Its repair work, as `oedd admin status` shows it.
    pub status: RepairStatus,
    /// Its file system (`None` when it cannot be read).
    pub capacity: Option<CapacityView>,
    /// Its power (`None` when power metering is off).
    pub power: Option<PowerView>,
    /// Its disk's temperature, degrees Celsius, when a sensor gives it.
    pub temperature_c: Option<f64>,
    /// Its rates over the sampler's last period.
    pub now: Option<Point>,
}

/// A drive's answer to `GET admin/history`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HistoryView {
    /// The drive.
    pub id: String,
    /// Seconds each point covers.
    pub period_seconds: u64,
    /// When it answered, ms since the epoch.
    pub now_ms: u64,
    /// Oldest first, at most an hour.
    pub points: Vec<Point>,
}

/// Where a drive's figures come from.
pub struct Probe {
    /// Its repair work and, through it, its store.
    repair: Arc<Repair>,
    /// Its last hour (none when the console is off on this drive).
    history: Option<Arc<History>>,
    /// Its energy counter.
    energy: EnergyReader,
    /// The power source's label.
    source: String,
    /// The last view made, and when: one view at a time, and at most one a second
    /// however many drives and pages ask.
    last: tokio::sync::Mutex<Option<(std::time::Instant, DriveView)>>,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// How long a view is given again.
const VIEW_FRESH: std::time::Duration = std::time::Duration::from_secs(1);

impl Probe {
    /// The figures of the drive whose repair work is `repair`, with its `history` (if
    /// kept), `energy` counter and power source label.
    #[must_use]
    pub fn new(
        repair: Arc<Repair>,
        history: Option<Arc<History>>,
        energy: EnergyReader,
        source: String,
    ) -> Arc<Self> {
        Arc::new(Self {
            repair,
            history,
            energy,
            source,
            last: tokio::sync::Mutex::new(None),
        })
    }

    /// The drive's figures now.
    #[must_use]
    pub fn view(&self) -> DriveView {
        let capacity = self
            .repair
            .cluster()
            .local_store()
            .capacity()
            .ok()
            .map(|c| CapacityView {
                total_bytes: c.capacity_bytes,
                used_bytes: c.capacity_bytes.saturating_sub(c.free_bytes),
                free_bytes: c.free_bytes,
            });
        let now = self.history.as_ref().and_then(|h| h.now());
        let power = match (self.energy.method(), self.energy.joules_now()) {
            (Some(method), Some(joules)) => Some(PowerView {
                watts: now.and_then(|p| p.watts),
                joules,
                joules_today: self.history.as_ref().and_then(|h| h.joules_today()),
                method: method.as_str().to_owned(),
                source: self.source.clone(),
            }),
            _ => None,
        };
        DriveView {
            status: self.repair.status_now(),
            capacity,
            power,
            temperature_c: self.history.as_ref().and_then(|h| h.temperature()),
            now,
        }
    }

    /// [`Probe::view`] on a blocking thread (it asks the file system, which a failing
    /// disk can hold up), one at a time, the last one again within [`VIEW_FRESH`] of
    /// it. A caller that gives up (a timeout) only stops waiting.
    ///
    /// # Errors
    /// The message of a panic while it read them.
    pub async fn view_now(self: &Arc<Self>) -> Result<DriveView, String> {
        let mut last = self.last.lock().await;
        if let Some((at, view)) = &*last
            && at.elapsed() < VIEW_FRESH
        {
            return Ok(view.clone());
        }
        let probe = self.clone();
        let view = tokio::task::spawn_blocking(move || probe.view())
            .await
            .map_err(|e| e.to_string())?;
        *last = Some((std::time::Instant::now(), view.clone()));
        Ok(view)
    }

    /// The drive's last hour. A point covers [`SLOT_SECONDS`], or the meter's period
    /// when that is longer (`meter_period_ms`): the period given is the points' median
    /// spacing.
    #[must_use]
    pub fn history(&self) -> HistoryView {
        let now_ms = oed_meter::wall_ms();
        let mut points = self
            .history
            .as_ref()
            .map(|h| h.points())
            .unwrap_or_default();
        points.retain(|p| p.t_ms + HOUR_MS >= now_ms);
        let mut gaps: Vec<u64> = points
            .windows(2)
            .map(|w| w[1].t_ms.saturating_sub(w[0].t_ms))
            .collect();
        gaps.sort_unstable();
        let period_seconds = gaps
            .get(gaps.len() / 2)
            .map_or(SLOT_SECONDS, |ms| ms.div_ceil(1000).max(SLOT_SECONDS));
        HistoryView {
            id: self.repair.cluster().local_store().drive_id().to_owned(),
            period_seconds,
            now_ms,
            points,
        }
    }
}

/// The peer API's admin routes of the console (`GET admin/console`, `GET admin/history`),
/// to merge into the admin routes, behind the peer API's authentication.
pub fn peer_routes<S: Clone + Send + Sync + 'static>(probe: Arc<Probe>) -> Router<S> {
    Router::new()
        .route(
            PeerOp::AdminConsole.route().1,
            get(|State(p): State<Arc<Probe>>| async move {
                p.view_now().await.map(Json).map_err(|e| {
                    oed_model::drive::DriveError::from(oed_model::error::Error::Unavailable(e))
                })
            }),
        )
        .route(
            PeerOp::AdminHistory.route().1,
            get(|State(p): State<Arc<Probe>>| async move { Json(p.history()) }),
        )
        .with_state(probe)
}
