//! `oedd admin`: an operator's view of a cluster's health and repair work, and the
//! actions on it, over each drive's authenticated peer API (signed with the cluster
//! secret; no S3 credentials).
//!
//! `status` asks every drive of the map for its state (`GET admin/status`) and prints
//! one line per drive (up or down, incarnation, shards, heal queue, heal rate, scrub,
//! refill) and the cluster's totals: shards waiting for heal and their ETA, objects by
//! remaining redundancy from the drives' last scrub passes. `--json` prints the answers
//! as they came. `scrub`, `refill` and `retry` start that work on one drive or all.

// Byte counts are shown to one decimal; f64 holds them well enough.
#![allow(clippy::cast_precision_loss)]

use std::fmt::Write as _;
use std::time::Duration;

use futures_util::future::join_all;
use serde::Serialize;

use crate::cluster::map::ClusterMap;
use crate::drive::DriveError;
use crate::error::{Error, Result};
use crate::peer::PeerOp;
use crate::peer::auth::PeerKey;
use crate::peer::client::PeerClient;
use crate::repair::RepairStatus;

/// One drive's answer.
#[derive(Debug, Serialize)]
pub struct DriveAnswer {
    /// The drive.
    pub drive: String,
    /// Its address.
    pub address: String,
    /// Its status, when it answered.
    pub status: Option<RepairStatus>,
    /// Why it did not.
    pub error: Option<String>,
}

fn client(map: &ClusterMap, secret: &[u8], id: &str) -> Result<PeerClient> {
    let d = map
        .drives
        .iter()
        .find(|d| d.id == id)
        .ok_or_else(|| Error::Config(format!("drive {id:?} is not in the cluster map")))?;
    Ok(PeerClient::new(&d.url(), PeerKey::derive(secret)))
}

/// Every drive's status, in map order.
pub async fn statuses(map: &ClusterMap, secret: &[u8]) -> Vec<DriveAnswer> {
    join_all(map.drives.iter().map(|d| async move {
        let c = PeerClient::new(&d.url(), PeerKey::derive(secret));
        let got = tokio::time::timeout(
            Duration::from_secs(10),
            c.get_json::<RepairStatus>(PeerOp::AdminStatus, ""),
        )
        .await
        .unwrap_or_else(|_| Err(DriveError::unreachable("timed out")));
        let (status, error) = match got {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e.to_string())),
        };
        DriveAnswer {
            drive: d.id.clone(),
            address: d.address.clone(),
            status,
            error,
        }
    }))
    .await
}

/// Starts `action` (`scrub`, `refill`, `retry`) on `drives`; returns a line per drive.
///
/// # Errors
/// [`Error::Config`] for a drive the map does not list.
pub async fn act(
    map: &ClusterMap,
    secret: &[u8],
    action: &str,
    drives: &[String],
) -> Result<String> {
    let mut out = String::new();
    for id in drives {
        let c = client(map, secret, id)?;
        let got: std::result::Result<serde_json::Value, DriveError> = c
            .post_json(PeerOp::AdminAction, &format!("do={action}"), &())
            .await;
        match got {
            Ok(_) => {
                let _ = writeln!(out, "{id}: {action} started");
            }
            Err(e) => {
                let _ = writeln!(out, "{id}: {action} not started: {e}");
            }
        }
    }
    Ok(out)
}

fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn ago(ms: Option<u64>) -> String {
    let Some(ms) = ms else {
        return "never".into();
    };
    let secs = crate::store::record::now_ms().saturating_sub(ms) / 1000;
    match secs {
        0..120 => format!("{secs} s ago"),
        120..7200 => format!("{} min ago", secs / 60),
        7200..172_800 => format!("{} h ago", secs / 3600),
        _ => format!("{} days ago", secs / 86400),
    }
}

fn duration(secs: f64) -> String {
    if secs < 120.0 {
        format!("{secs:.0} s")
    } else if secs < 7200.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{:.1} h", secs / 3600.0)
    }
}

/// The status report, as `oedd admin status` prints it.
#[must_use]
pub fn report(map: &ClusterMap, answers: &[DriveAnswer]) -> String {
    let p = map.profile;
    let up = answers.iter().filter(|a| a.status.is_some()).count();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "cluster {}: {} drives ({} up), EC {}+{}",
        map.cluster_id,
        answers.len(),
        up,
        p.k,
        p.m
    );
    let _ = writeln!(
        out,
        "{:<12} {:<5} {:>5} {:<17} {:>8} {:>8} {:>6} {:>11} {:>9}  {:<28} refill",
        "drive",
        "state",
        "epoch",
        "incarnation",
        "shards",
        "to-heal",
        "hints",
        "heal-rate",
        "healed",
        "scrub"
    );
    let mut queued = 0u64;
    let mut queued_bytes = 0u64;
    let mut rate = 0.0;
    let mut levels: std::collections::BTreeMap<u16, u64> = std::collections::BTreeMap::new();
    for a in answers {
        let Some(s) = &a.status else {
            let _ = writeln!(
                out,
                "{:<12} {:<5} {}",
                a.drive,
                "DOWN",
                a.error.as_deref().unwrap_or("")
            );
            continue;
        };
        let own: u64 = s.queue.local.values().sum();
        queued += own + s.queue.hints;
        queued_bytes += s.queue.local_bytes.values().sum::<u64>();
        rate += s.heal.rate_bytes;
        for (l, n) in &s.scrub.redundancy {
            *levels.entry(*l).or_default() += n;
        }
        let scrub = if s.scrub.running {
            format!("running, {} objects", s.scrub.pass_objects)
        } else {
            format!("last {}", ago(s.scrub.last_complete_ms))
        };
        let refill = match s.refill.state.as_str() {
            "listing" | "healing" => format!(
                "{} {:.0}% of {}{}",
                s.refill.state,
                100.0 * s.refill.progress,
                bytes(s.refill.listed_bytes as f64),
                s.refill
                    .eta_seconds
                    .map(|e| format!(", ETA {}", duration(e)))
                    .unwrap_or_default()
            ),
            other => other.to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<12} {:<5} {:>5} {:<17} {:>8} {:>8} {:>6} {:>9}/s {:>9}  {:<28} {}",
            a.drive,
            "up",
            s.epoch,
            s.incarnation,
            s.shards,
            own,
            s.queue.hints,
            bytes(s.heal.rate_bytes),
            s.heal.healed_shards,
            scrub,
            refill
        );
    }
    totals(&mut out, queued, queued_bytes, rate, &levels);
    epochs(&mut out, map, answers);
    if up < answers.len() {
        let _ = writeln!(
            out,
            "{} drive(s) down: objects with a shard there have {} fewer to spare until they return or are refilled",
            answers.len() - up,
            answers.len() - up
        );
    }
    out
}

/// A warning when the drives run different map epochs.
fn epochs(out: &mut String, map: &ClusterMap, answers: &[DriveAnswer]) {
    let epochs: std::collections::BTreeSet<u64> = answers
        .iter()
        .filter_map(|a| a.status.as_ref().map(|s| s.epoch))
        .collect();
    if epochs.len() > 1 {
        let _ = writeln!(
            out,
            "cluster map epochs differ ({epochs:?}; this map is epoch {}): shard writes between drives of different epochs are refused until every drive runs the same map",
            map.epoch
        );
    }
}

/// The cluster's totals under the drives' lines.
fn totals(
    out: &mut String,
    queued: u64,
    queued_bytes: u64,
    rate: f64,
    levels: &std::collections::BTreeMap<u16, u64>,
) {
    if queued == 0 {
        let _ = writeln!(out, "heal: nothing queued");
    } else {
        let eta = if rate > 0.0 {
            format!(", ETA {}", duration(queued_bytes as f64 / rate))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "heal: {queued} shards queued ({}), rebuilding at {}/s{eta}",
            bytes(queued_bytes as f64),
            bytes(rate)
        );
    }
    if levels.is_empty() {
        let _ = writeln!(out, "redundancy: no scrub pass has completed yet");
    } else {
        let parts: Vec<String> = levels
            .iter()
            .rev()
            .map(|(l, n)| format!("{n} with {l} to spare"))
            .collect();
        let _ = writeln!(out, "redundancy (last scrub passes): {}", parts.join(", "));
    }
}
