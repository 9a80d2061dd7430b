//! The overview page's JSON (`GET api/overview`): every drive of the map in force, each
//! from its own answer to `GET admin/console` (this drive's from its [`Probe`]), and the
//! cluster's totals. A drive that does not answer within [`ASK_TIMEOUT`] is down.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use serde::Serialize;

use oed_model::drive::within;
use oed_peer::PeerOp;

use crate::drive::{CapacityView, DriveView, HistoryView, Probe};
use oed_cluster::Cluster;

/// How long a drive may take to answer the console.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// The overview.
#[derive(Debug, Serialize)]
pub struct Overview {
    /// The cluster's name.
    pub cluster_id: String,
    /// The map's epoch.
    pub epoch: u64,
    /// Data shards of new objects.
    pub k: u16,
    /// Their parity shards.
    pub m: u16,
    /// When this was made, ms since the epoch.
    pub now_ms: u64,
    /// Every drive, in map order.
    pub drives: Vec<DriveLine>,
    /// Sums over the drives that answered.
    pub totals: Totals,
}

/// One drive of the overview. Everything but the map's facts is `None` when the drive
/// did not answer.
#[derive(Debug, Serialize)]
pub struct DriveLine {
    /// Its id.
    pub id: String,
    /// Its address in the map.
    pub address: String,
    /// Its failure domain.
    pub domain: Option<String>,
    /// `in` or `out`, from the map.
    pub map_state: String,
    /// Whether it answered.
    pub up: bool,
    /// Why it did not.
    pub error: Option<String>,
    /// Its file system.
    pub capacity: Option<CapacityView>,
    /// Its power and energy.
    pub power: Option<crate::drive::PowerView>,
    /// Its disk's temperature.
    pub temperature_c: Option<f64>,
    /// Host CPU busy, 0 to 1.
    pub cpu_busy: Option<f64>,
    /// S3 bytes sent to clients per second.
    pub read_bytes_per_second: Option<f64>,
    /// S3 bytes received from clients per second.
    pub written_bytes_per_second: Option<f64>,
    /// Requests answered per second.
    pub requests_per_second: Option<f64>,
    /// Bytes read from its disk per second.
    pub disk_read_bytes_per_second: Option<f64>,
    /// Bytes written to its disk per second.
    pub disk_written_bytes_per_second: Option<f64>,
    /// Bytes received on its network per second.
    pub net_rx_bytes_per_second: Option<f64>,
    /// Bytes sent on its network per second.
    pub net_tx_bytes_per_second: Option<f64>,
    /// Shards it holds.
    pub shards: Option<u64>,
    /// Its heal queue and rate.
    pub heal: Option<HealLine>,
    /// Its scrub.
    pub scrub: Option<ScrubLine>,
    /// Its drain.
    pub drain: Option<MoveLine>,
    /// Its rebalance.
    pub rebalance: Option<MoveLine>,
    /// Its lifecycle.
    pub lifecycle: Option<LifecycleLine>,
}

/// A drive's heal.
#[derive(Debug, Serialize)]
pub struct HealLine {
    /// Its own shards waiting to be rebuilt.
    pub queued: u64,
    /// Their bytes.
    pub queued_bytes: u64,
    /// Bytes rebuilt per second lately.
    pub rate_bytes_per_second: f64,
    /// Seconds until the queue is empty at that rate.
    pub eta_seconds: Option<f64>,
    /// Shards rebuilt since the drive started.
    pub healed_shards: u64,
}

/// A drive's scrub.
#[derive(Debug, Serialize)]
pub struct ScrubLine {
    /// Whether a pass runs.
    pub running: bool,
    /// When the last pass completed.
    pub last_complete_ms: Option<u64>,
    /// Bytes checked by the pass in progress.
    pub pass_bytes: u64,
}

/// A drive's drain or rebalance.
#[derive(Debug, Serialize)]
pub struct MoveLine {
    /// Its phase (`none`, `draining`, `moving`, `done`, `stopped`).
    pub state: String,
    /// Shards still to move.
    pub left_shards: u64,
    /// Shards moved.
    pub moved_shards: u64,
    /// Seconds left at the current rate.
    pub eta_seconds: Option<f64>,
}

impl MoveLine {
    fn of(state: &str, left_shards: u64, moved_shards: u64, eta_seconds: Option<f64>) -> Self {
        Self {
            state: state.to_owned(),
            left_shards,
            moved_shards,
            eta_seconds,
        }
    }
}

/// A drive's lifecycle.
#[derive(Debug, Serialize)]
pub struct LifecycleLine {
    /// Whether a pass runs.
    pub running: bool,
}

/// The cluster's sums.
#[derive(Debug, Default, Serialize)]
pub struct Totals {
    /// Drives in the map.
    pub drives: usize,
    /// Drives that answered.
    pub drives_up: usize,
    /// Their file systems' size.
    pub total_bytes: u64,
    /// Bytes used.
    pub used_bytes: u64,
    /// Bytes free.
    pub free_bytes: u64,
    /// Power of the drives that meter it (`None`: none does).
    pub watts: Option<f64>,
    /// Their joules since each started.
    pub joules: Option<f64>,
    /// Their joules today (UTC).
    pub joules_today: Option<f64>,
    /// `measured`, `modelled` or `mixed`.
    pub energy_method: Option<String>,
    /// S3 bytes sent to clients per second, all drives.
    pub read_bytes_per_second: f64,
    /// S3 bytes received per second, all drives.
    pub written_bytes_per_second: f64,
    /// Shards waiting to be rebuilt, all drives.
    pub heal_queued: u64,
    /// The longest heal ETA of a drive.
    pub heal_eta_seconds: Option<f64>,
}

/// Asks every drive of `cluster`'s map (this one through `probe`) and makes the
/// overview.
pub async fn gather(cluster: &Cluster, probe: &Arc<Probe>) -> Overview {
    let map = cluster.map();
    let local = map.local;
    let views = join_all(map.drives.iter().enumerate().map(|(i, d)| async move {
        if i == local {
            return tokio::time::timeout(ASK_TIMEOUT, probe.view_now())
                .await
                .unwrap_or_else(|_| Err("timed out".to_owned()));
        }
        let Some(client) = cluster.admin_client(&d.id) else {
            return Err("not in the map in force".to_owned());
        };
        within(
            ASK_TIMEOUT,
            client.get_json::<DriveView>(PeerOp::AdminConsole, ""),
        )
        .await
        .map_err(|e| e.to_string())
    }))
    .await;
    let drives: Vec<DriveLine> = map
        .drives
        .iter()
        .zip(views)
        .map(|(d, v)| line(d, v))
        .collect();
    Overview {
        cluster_id: map.cluster_id.clone(),
        epoch: map.epoch,
        k: map.profile.k,
        m: map.profile.m,
        now_ms: oed_meter::wall_ms(),
        totals: totals(&drives),
        drives,
    }
}

/// Drive `id`'s last hour, from itself.
///
/// # Errors
/// `None` when the map has no such drive; the drive's error when it does not answer.
pub async fn history(
    cluster: &Cluster,
    probe: &Probe,
    id: &str,
) -> Option<Result<HistoryView, String>> {
    let map = cluster.map();
    let i = map.index_of(id)?;
    if i == map.local {
        return Some(Ok(probe.history()));
    }
    let client = cluster.admin_client(id)?;
    Some(
        within(ASK_TIMEOUT, client.get_json(PeerOp::AdminHistory, ""))
            .await
            .map_err(|e| e.to_string()),
    )
}

fn line(d: &oed_model::map::DriveEntry, view: Result<DriveView, String>) -> DriveLine {
    let mut l = DriveLine {
        id: d.id.clone(),
        address: d.address.clone(),
        domain: d.domain.clone(),
        map_state: d.state.label().to_owned(),
        up: false,
        error: None,
        capacity: None,
        power: None,
        temperature_c: None,
        cpu_busy: None,
        read_bytes_per_second: None,
        written_bytes_per_second: None,
        requests_per_second: None,
        disk_read_bytes_per_second: None,
        disk_written_bytes_per_second: None,
        net_rx_bytes_per_second: None,
        net_tx_bytes_per_second: None,
        shards: None,
        heal: None,
        scrub: None,
        drain: None,
        rebalance: None,
        lifecycle: None,
    };
    let v = match view {
        Ok(v) if v.status.drive_id == d.id => v,
        Ok(v) => {
            l.error = Some(format!(
                "{} answers as drive {:?}",
                d.address, v.status.drive_id
            ));
            return l;
        }
        Err(e) => {
            l.error = Some(e);
            return l;
        }
    };
    let s = &v.status;
    l.up = true;
    l.capacity = v.capacity;
    l.power = v.power;
    l.temperature_c = v.temperature_c;
    l.cpu_busy = v.now.map(|p| p.cpu_busy);
    l.read_bytes_per_second = v.now.map(|p| p.s3_out_bytes_per_second);
    l.written_bytes_per_second = v.now.map(|p| p.s3_in_bytes_per_second);
    l.requests_per_second = v.now.map(|p| p.requests_per_second);
    l.disk_read_bytes_per_second = v.now.map(|p| p.disk_read_bytes_per_second);
    l.disk_written_bytes_per_second = v.now.map(|p| p.disk_written_bytes_per_second);
    l.net_rx_bytes_per_second = v.now.map(|p| p.net_rx_bytes_per_second);
    l.net_tx_bytes_per_second = v.now.map(|p| p.net_tx_bytes_per_second);
    l.shards = Some(s.shards);
    l.heal = Some(HealLine {
        queued: s.queue.local.values().sum(),
        queued_bytes: s.queue.local_bytes.values().sum(),
        rate_bytes_per_second: s.heal.rate_bytes,
        eta_seconds: s.heal.eta_seconds,
        healed_shards: s.heal.healed_shards,
    });
    l.scrub = Some(ScrubLine {
        running: s.scrub.running,
        last_complete_ms: s.scrub.last_complete_ms,
        pass_bytes: s.scrub.pass_bytes,
    });
    let (d, r) = (&s.drain, &s.rebalance);
    l.drain = Some(MoveLine::of(
        d.state.label(),
        d.left_shards,
        d.moved_shards,
        d.eta_seconds,
    ));
    l.rebalance = Some(MoveLine::of(
        r.state.label(),
        r.left_shards,
        r.moved_shards,
        r.eta_seconds,
    ));
    l.lifecycle = Some(LifecycleLine {
        running: s.lifecycle.running,
    });
    l
}

fn totals(drives: &[DriveLine]) -> Totals {
    let mut t = Totals {
        drives: drives.len(),
        ..Totals::default()
    };
    let mut methods: Vec<&str> = Vec::new();
    for d in drives.iter().filter(|d| d.up) {
        t.drives_up += 1;
        if let Some(c) = d.capacity {
            t.total_bytes += c.total_bytes;
            t.used_bytes += c.used_bytes;
            t.free_bytes += c.free_bytes;
        }
        if let Some(p) = &d.power {
            let add = |sum: &mut Option<f64>, x: Option<f64>| {
                if let Some(x) = x {
                    *sum = Some(sum.unwrap_or(0.0) + x);
                }
            };
            add(&mut t.watts, p.watts);
            add(&mut t.joules, Some(p.joules));
            add(&mut t.joules_today, p.joules_today);
            if !methods.contains(&p.method.as_str()) {
                methods.push(&p.method);
            }
        }
        t.read_bytes_per_second += d.read_bytes_per_second.unwrap_or(0.0);
        t.written_bytes_per_second += d.written_bytes_per_second.unwrap_or(0.0);
        if let Some(h) = &d.heal {
            t.heal_queued += h.queued;
            t.heal_eta_seconds = match (t.heal_eta_seconds, h.eta_seconds) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
    }
    t.energy_method = match methods.as_slice() {
        [] => None,
        [one] => Some((*one).to_owned()),
        _ => Some("mixed".to_owned()),
    };
    t
}
