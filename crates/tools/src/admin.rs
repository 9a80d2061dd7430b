//! `oedd admin`: an operator's view of a cluster's health and repair work, and the
//! actions on it, over each drive's authenticated peer API (signed with the cluster
//! secret; no S3 credentials).
//!
//! `status` asks every drive of the map for its state (`GET admin/status`) and prints
//! one line per drive (up or down, incarnation, shards, heal queue, heal rate, scrub,
//! refill) and the cluster's totals: shards waiting for heal and their ETA, objects by
//! remaining redundancy from the drives' last scrub passes. `--json` prints the answers
//! as they came. `scrub`, `refill` and `retry` start that work on one drive or all.
//!
//! `out`, `in` and `remove` change the cluster map: the file is rewritten with the next
//! epoch and pushed to every drive (`POST admin/map`), which writes it to its own map
//! file and puts it in force at once; `push` sends the file as it is (to a drive that
//! was down). `drain` marks a drive out and has it move its shards away; `remove` takes
//! only a drive whose drain is done.

// Byte counts are shown to one decimal; f64 holds them well enough.
#![allow(clippy::cast_precision_loss)]

use std::fmt::Write as _;
use std::time::Duration;

use futures_util::future::join_all;
use serde::Serialize;

use oed_model::account::{AccountAnswer, AccountKeys, AccountRequest, Rights};
use oed_model::drive::{DriveError, ErrorCode};
use oed_model::error::{Error, Result};
use oed_model::map::{ClusterMap, DriveEntry, DriveState};
use oed_peer::PeerOp;
use oed_peer::auth::PeerKey;
use oed_peer::client::{PeerClient, PeerHttp};
use oed_repair::RepairStatus;
use oed_repair::drain::DrainPhase;
use oed_repair::rebalance::RebalancePhase;
use oed_repair::refill::RefillPhase;

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

/// What `oedd admin` reaches drives with: the key derived from the cluster secret, and
/// connections that trust the cluster CA (for a map with `tls = true`).
#[derive(Clone, Debug)]
pub struct Access {
    key: PeerKey,
    http: PeerHttp,
    /// Opens the secrets of new keys, which come sealed.
    accounts: std::sync::Arc<AccountKeys>,
}

impl Access {
    /// Access with the cluster `secret`, trusting the certificates in `ca` (PEM) for
    /// drives served over TLS.
    ///
    /// # Errors
    /// [`Error::Config`] for a CA file that does not load.
    pub fn new(secret: &[u8], ca: Option<&std::path::Path>) -> Result<Self> {
        Ok(Self {
            key: PeerKey::derive(secret),
            http: PeerHttp::with_tls(&oed_peer::tls::client_config(ca)?),
            accounts: std::sync::Arc::new(AccountKeys::derive(secret)),
        })
    }

    /// A client of drive `d` of `map`.
    #[must_use]
    pub fn client(&self, map: &ClusterMap, d: &oed_model::map::DriveEntry) -> PeerClient {
        PeerClient::with_http(&d.url(map.tls), self.key.clone(), self.http.clone()).for_drive(&d.id)
    }
}

fn client(map: &ClusterMap, access: &Access, id: &str) -> Result<PeerClient> {
    Ok(access.client(map, entry(map, id)?))
}

/// Drive `id`'s entry in `map`.
fn entry<'m>(map: &'m ClusterMap, id: &str) -> Result<&'m DriveEntry> {
    map.drives
        .iter()
        .find(|d| d.id == id)
        .ok_or_else(|| Error::Config(format!("drive {id:?} is not in the cluster map")))
}

/// Drive `d`'s status (`GET admin/status`), waiting at most `secs` seconds.
async fn status_of(
    map: &ClusterMap,
    access: &Access,
    d: &DriveEntry,
    secs: u64,
) -> std::result::Result<RepairStatus, DriveError> {
    let c = access.client(map, d);
    oed_model::drive::within(
        Duration::from_secs(secs),
        c.get_json(PeerOp::AdminStatus, ""),
    )
    .await
}

/// Every drive's status, in map order.
pub async fn statuses(map: &ClusterMap, access: &Access) -> Vec<DriveAnswer> {
    join_all(map.drives.iter().map(|d| async move {
        let got = status_of(map, access, d, 10).await;
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

/// What `oedd cluster check --live` reports from the drives' answers: a drive that does
/// not answer, answers as another drive (two addresses swapped), or runs another epoch
/// of the map.
#[must_use]
pub fn live_problems(map: &ClusterMap, answers: &[DriveAnswer]) -> Vec<String> {
    let mut out = Vec::new();
    for a in answers {
        match (&a.status, &a.error) {
            (Some(s), _) if s.drive_id != a.drive => out.push(format!(
                "drive {:?}: {} answers as drive {:?}",
                a.drive, a.address, s.drive_id
            )),
            (Some(s), _) if s.epoch != map.epoch => out.push(format!(
                "drive {:?} runs epoch {} of the map; this file is epoch {} (`oedd admin --map FILE push` sends it)",
                a.drive, s.epoch, map.epoch
            )),
            (Some(_), _) => {}
            (None, e) => out.push(format!(
                "drive {:?} at {} does not answer: {}",
                a.drive,
                a.address,
                e.as_deref().unwrap_or("no answer")
            )),
        }
    }
    out
}

/// Starts `action` (`scrub`, `refill`, `retry`) on `drives`; returns a line per drive.
///
/// # Errors
/// [`Error::Config`] for a drive the map does not list.
pub async fn act(
    map: &ClusterMap,
    access: &Access,
    action: &str,
    drives: &[String],
) -> Result<String> {
    let mut out = String::new();
    for id in drives {
        let c = client(map, access, id)?;
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

/// Pushes `map` to every drive it lists; returns a line per drive.
pub async fn push(map: &ClusterMap, access: &Access) -> String {
    push_report(map, access).await.0
}

/// [`push`], with the ids of the drives that did not take the map.
pub async fn push_report(map: &ClusterMap, access: &Access) -> (String, Vec<String>) {
    let text = toml::to_string(map).unwrap_or_default();
    let answers = join_all(map.drives.iter().map(|d| {
        let text = text.clone();
        async move {
            let c = access.client(map, d);
            let got = oed_model::drive::within(
                Duration::from_secs(10),
                c.post_text::<serde_json::Value>(PeerOp::PutMap, text),
            )
            .await;
            match got {
                Ok(_) => (format!("{}: epoch {} in force", d.id, map.epoch), None),
                Err(e) => (
                    format!(
                        "{}: map not taken: {e} (run `oedd admin push` once it is up)",
                        d.id
                    ),
                    Some(d.id.clone()),
                ),
            }
        }
    }))
    .await;
    let mut out = String::new();
    let mut failed = Vec::new();
    for (line, id) in answers {
        let _ = writeln!(out, "{line}");
        failed.extend(id);
    }
    (out, failed)
}

/// Reads the map at `path`, lets `change` edit it, raises its epoch, checks it, writes it
/// back (atomically) and returns it.
///
/// # Errors
/// What `change` refuses; [`Error::Config`] for a map that does not validate; I/O.
pub fn change_map(
    path: &std::path::Path,
    change: impl FnOnce(&mut ClusterMap) -> Result<()>,
) -> Result<ClusterMap> {
    let mut map = ClusterMap::load(path)?;
    change(&mut map)?;
    map.epoch += 1;
    map.validate()
        .map_err(|e| Error::Config(format!("the changed map: {e}")))?;
    let text = toml::to_string(&map).map_err(|e| Error::Config(e.to_string()))?;
    let tmp = path.with_extension("admin.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(map)
}

/// Sets drive `id`'s state in `map`.
///
/// # Errors
/// [`Error::Config`] for a drive the map does not list.
pub fn set_state(map: &mut ClusterMap, id: &str, state: oed_model::map::DriveState) -> Result<()> {
    let d = map
        .drives
        .iter_mut()
        .find(|d| d.id == id)
        .ok_or_else(|| Error::Config(format!("drive {id:?} is not in the cluster map")))?;
    d.state = state;
    Ok(())
}

/// Whether drive `id` may leave the map: it answers, it is out, its drain is done and it
/// holds nothing. An error says why not.
///
/// # Errors
/// [`Error::Config`] saying what is missing.
pub async fn check_drained(map: &ClusterMap, access: &Access, id: &str) -> Result<()> {
    let s = status_of(map, access, entry(map, id)?, 10)
        .await
        .map_err(|e| {
            Error::Config(format!(
                "{id} does not answer ({e}): it cannot be removed before it says its drain is done"
            ))
        })?;
    if s.map_state != Some(DriveState::Out) || s.drain.state != DrainPhase::Done || s.shards > 0 {
        return Err(Error::Config(format!(
            "{id} is {}, its drain is {} and it holds {} shards: drain it first (oedd admin drain {id}) and wait for \"done\"",
            s.map_state.unwrap_or_default().label(),
            s.drain.state,
            s.shards
        )));
    }
    Ok(())
}

/// Whether each of `drives` (not in `map` yet) runs as a spare waiting for a map that
/// lists it: it answers under its own id, at epoch 0.
pub async fn spares_waiting(map: &ClusterMap, access: &Access, drives: &[DriveEntry]) -> Vec<bool> {
    join_all(drives.iter().map(|d| async move {
        status_of(map, access, d, 5)
            .await
            .is_ok_and(|s| s.drive_id == d.id && s.epoch == 0)
    }))
    .await
}

/// Whether drive `id` may be removed as lost: it is in the map and does not answer. A
/// drive that answers is drained instead (what it holds moves; nothing is rebuilt).
///
/// # Errors
/// [`Error::Config`] saying why not.
pub async fn check_lost(map: &ClusterMap, access: &Access, id: &str) -> Result<()> {
    if status_of(map, access, entry(map, id)?, 5).await.is_ok() {
        return Err(Error::Config(format!(
            "{id} answers: it is not lost. Drain it (oedd admin drain {id}) and remove it when its drain is done; only a drive that is dead for good is removed with --lost"
        )));
    }
    Ok(())
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
    let secs = oed_model::record::now_ms().saturating_sub(ms) / 1000;
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
        let refill = match s.refill.state {
            RefillPhase::Listing | RefillPhase::Healing => format!(
                "{} {:.0}% of {}{}",
                s.refill.state,
                100.0 * s.refill.progress,
                bytes(s.refill.listed_bytes as f64),
                s.refill
                    .eta_seconds
                    .map(|e| format!(", ETA {}", duration(e)))
                    .unwrap_or_default()
            ),
            other => other.label().to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<12} {:<5} {:>5} {:<17} {:>8} {:>8} {:>6} {:>9}/s {:>9}  {:<28} {}",
            a.drive,
            if s.map_state == Some(DriveState::Out) {
                "out"
            } else {
                "up"
            },
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
        under_line(&mut out, s);
    }
    totals(&mut out, queued, queued_bytes, rate, &levels);
    rebalance_total(&mut out, answers);
    lifecycle_total(&mut out, answers);
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

/// What shows under a drive's line: its drain, its rebalance, its clock.
fn under_line(out: &mut String, s: &RepairStatus) {
    drain_line(out, s);
    rebalance_line(out, s);
    clock_line(out, s);
}

/// A drive's clock, under its line, when it is off from the others' by a second or more.
fn clock_line(out: &mut String, s: &RepairStatus) {
    let Some(off) = s.clock_offset_seconds.filter(|o| o.abs() >= 1.0) else {
        return;
    };
    let _ = writeln!(
        out,
        "  clock: {:.1} s {} the other drives'; its version ids are made from theirs: set it right (NTP)",
        off.abs(),
        if off > 0.0 { "ahead of" } else { "behind" }
    );
}

/// A drive's drain, under its line, when it has one.
fn drain_line(out: &mut String, s: &RepairStatus) {
    let d = &s.drain;
    if d.state == DrainPhase::None {
        return;
    }
    let _ = writeln!(
        out,
        "  drain: {}, {} shards moved ({}), {} left{}{}",
        d.state,
        d.moved_shards,
        bytes(d.moved_bytes as f64),
        d.left_shards,
        d.eta_seconds
            .map(|e| format!(", ETA {}", duration(e)))
            .unwrap_or_default(),
        d.last_error
            .as_ref()
            .filter(|_| d.state == DrainPhase::Draining)
            .map(|e| format!("; last failure: {e}"))
            .unwrap_or_default()
    );
}

/// A drive's rebalance, under its line, while it moves shards or once it moved some.
fn rebalance_line(out: &mut String, s: &RepairStatus) {
    let b = &s.rebalance;
    let moved = format!(
        "{} shards moved ({}){}",
        b.moved_shards,
        bytes(b.moved_bytes as f64),
        if b.rebuilt_shards > 0 {
            format!(
                ", {} of removed drives handed over to rebuild",
                b.rebuilt_shards
            )
        } else {
            String::new()
        }
    );
    match b.state {
        RebalancePhase::Moving => {
            let _ = writeln!(
                out,
                "  rebalance: moving for epoch {}, {moved}, {} left ({}), {} waiting, {}/s{}{}",
                b.epoch,
                b.left_shards,
                bytes(b.left_bytes as f64),
                b.waiting_shards,
                bytes(b.rate_bytes),
                b.eta_seconds
                    .map(|e| format!(", ETA {}", duration(e)))
                    .unwrap_or_default(),
                b.last_error
                    .as_ref()
                    .map(|e| format!("; last failure: {e}"))
                    .unwrap_or_default()
            );
        }
        RebalancePhase::Done if b.moved_shards + b.rebuilt_shards > 0 => {
            let _ = writeln!(out, "  rebalance: done for epoch {}, {moved}", b.epoch);
        }
        _ => {}
    }
}

/// The whole cluster's rebalance, when a drive is moving shards.
fn rebalance_total(out: &mut String, answers: &[DriveAnswer]) {
    let moving: Vec<&RepairStatus> = answers
        .iter()
        .filter_map(|a| a.status.as_ref())
        .filter(|s| s.rebalance.state == RebalancePhase::Moving)
        .collect();
    if moving.is_empty() {
        return;
    }
    let left: u64 = moving.iter().map(|s| s.rebalance.left_bytes).sum();
    let shards: u64 = moving.iter().map(|s| s.rebalance.left_shards).sum();
    let rate: f64 = moving.iter().map(|s| s.rebalance.rate_bytes).sum();
    let _ = writeln!(
        out,
        "rebalance: {shards} shards ({}) to move on {} drive(s), moving at {}/s{}",
        bytes(left as f64),
        moving.len(),
        bytes(rate),
        if rate > 0.0 {
            format!(", ETA {}", duration(left as f64 / rate))
        } else {
            String::new()
        }
    );
}

/// The lifecycle's line: buckets with rules, passes running, what the drives did since
/// they started; nothing when no bucket has rules and nothing was done.
fn lifecycle_total(out: &mut String, answers: &[DriveAnswer]) {
    let all: Vec<&RepairStatus> = answers.iter().filter_map(|a| a.status.as_ref()).collect();
    let buckets = all.iter().map(|s| s.lifecycle.buckets).max().unwrap_or(0);
    let sum = |f: fn(&RepairStatus) -> u64| all.iter().map(|s| f(s)).sum::<u64>();
    let expired = sum(|s| s.lifecycle.expired_current);
    let noncurrent = sum(|s| s.lifecycle.expired_noncurrent);
    let markers = sum(|s| s.lifecycle.delete_markers_removed);
    let uploads = sum(|s| s.lifecycle.uploads_aborted);
    let failures = sum(|s| s.lifecycle.failures);
    if buckets == 0 && expired + noncurrent + markers + uploads + failures == 0 {
        return;
    }
    let running = all.iter().filter(|s| s.lifecycle.running).count();
    let last = all
        .iter()
        .filter_map(|s| s.lifecycle.last_complete_ms)
        .min();
    let _ = writeln!(
        out,
        "lifecycle: {buckets} bucket(s) with rules, {}; since start: {expired} expired, {noncurrent} noncurrent expired, {markers} delete markers removed, {uploads} uploads aborted, {failures} failed",
        if running > 0 {
            format!("a pass running on {running} drive(s)")
        } else {
            format!("oldest last pass {}", ago(last))
        }
    );
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

/// Sends an account request to the first drive of the map that answers (a drive that
/// is down is skipped; one that refuses the request answers for all).
///
/// # Errors
/// The drive's refusal (`BadRequest` naming what is wrong), or [`Error::Unavailable`]
/// when no drive answered.
pub async fn accounts(
    map: &ClusterMap,
    access: &Access,
    req: &AccountRequest,
) -> Result<AccountAnswer> {
    let mut last = String::from("the map lists no drive");
    for d in map.drives.iter().filter(|d| d.state == DriveState::In) {
        let c = access.client(map, d);
        match oed_model::drive::within(
            Duration::from_secs(15),
            c.post_json::<_, AccountAnswer>(PeerOp::AdminAccounts, "", req),
        )
        .await
        {
            Ok(a) => return Ok(a),
            Err(e) if e.code == ErrorCode::Unreachable => last = format!("{}: {e}", d.id),
            Err(e) => return Err(Error::BadRequest(e.message)),
        }
    }
    Err(Error::Unavailable(format!("no drive answered ({last})")))
}

/// An account answer as `oedd admin key` and `oedd admin bucket` print it: for people, or
/// JSON with `json` (a new key's secret opened: `access_key_id`, `secret_access_key`,
/// `name`).
///
/// # Errors
/// [`Error::Config`] when a new secret does not open with this cluster secret.
pub fn show_accounts(access: &Access, answer: &AccountAnswer, json: bool) -> Result<String> {
    let mut out = String::new();
    match answer {
        AccountAnswer::NewSecret {
            access_key_id,
            name,
            sealed_secret,
        } => {
            let secret = access
                .accounts
                .open(access_key_id, sealed_secret)
                .ok_or_else(|| {
                    Error::Config(
                        "the new key's secret does not open with this cluster secret".into(),
                    )
                })?;
            if json {
                let v = serde_json::json!({
                    "access_key_id": access_key_id,
                    "secret_access_key": secret,
                    "name": name,
                });
                let _ = writeln!(out, "{}", pretty(&v));
            } else {
                let _ = writeln!(out, "access key id:     {access_key_id}");
                let _ = writeln!(out, "secret access key: {secret}");
                let _ = writeln!(out, "name:              {name}");
                let _ = writeln!(out, "The secret is shown this once: keep it now.");
            }
        }
        AccountAnswer::Keys { keys } if json => {
            let _ = writeln!(out, "{}", pretty(keys));
        }
        AccountAnswer::Keys { keys } => {
            for k in keys {
                let _ = writeln!(
                    out,
                    "{}  {:<24}  made {}  used {}  {} bucket(s)",
                    k.id,
                    k.name,
                    utc(k.created_ms),
                    k.last_used_ms.map_or_else(|| "never".to_owned(), utc),
                    k.buckets.len()
                );
            }
        }
        AccountAnswer::Key(k) if json => {
            let _ = writeln!(out, "{}", pretty(k));
        }
        AccountAnswer::Key(k) => {
            let _ = writeln!(
                out,
                "{}  {}  made {}  used {}",
                k.id,
                k.name,
                utc(k.created_ms),
                k.last_used_ms.map_or_else(|| "never".to_owned(), utc)
            );
            for (b, r) in &k.buckets {
                let _ = writeln!(out, "  {b}: {}", rights_text(*r));
            }
        }
        AccountAnswer::Bucket { .. } => out = show_bucket(answer, json),
        AccountAnswer::Done { message } => {
            let _ = writeln!(out, "{message}");
        }
    }
    Ok(out)
}

/// `oedd admin bucket info`'s answer: for people, or its fields as JSON (`bucket`,
/// `grants`, `policy`, `objects`, `bytes`, `complete`).
fn show_bucket(answer: &AccountAnswer, json: bool) -> String {
    let mut out = String::new();
    let AccountAnswer::Bucket {
        bucket,
        grants,
        policy,
        objects,
        bytes,
        complete,
    } = answer
    else {
        return out;
    };
    if json {
        let mut v = serde_json::to_value(answer).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.remove("answer");
        }
        let _ = writeln!(out, "{}", pretty(&v));
        return out;
    }
    let more = if *complete {
        ""
    } else {
        " or more (counting stopped)"
    };
    let _ = writeln!(
        out,
        "bucket {bucket}: {objects} objects, {bytes} bytes{more}"
    );
    for (k, r) in grants {
        let _ = writeln!(out, "  {k}: {}", rights_text(*r));
    }
    match policy {
        Some(p) => {
            let _ = writeln!(out, "policy:\n{p}");
        }
        None => {
            let _ = writeln!(out, "no policy (nothing is public)");
        }
    }
    out
}

/// Rights as words: `read write owner`.
fn rights_text(r: Rights) -> String {
    let mut v = Vec::new();
    for (on, name) in [(r.read, "read"), (r.write, "write"), (r.owner, "owner")] {
        if on {
            v.push(name);
        }
    }
    v.join(" ")
}

/// `ms` since the epoch as `YYYY-MM-DD HH:MM UTC`.
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (hour, minute) = (secs % 86_400 / 3600, secs % 3600 / 60);
    let (year, month, day) =
        oed_model::record::civil_date(i64::try_from(secs / 86_400).unwrap_or(0));
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02} UTC")
}

/// Pretty JSON of an answer or a part of one.
fn pretty<T: Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_are_shown_in_utc() {
        assert_eq!(super::utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(super::utc(1_795_791_600_000), "2026-11-27 15:00 UTC");
        assert_eq!(super::utc(951_782_400_000), "2000-02-29 00:00 UTC");
    }
}
