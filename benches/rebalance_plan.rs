//! `oed-rebalance-plan`: what a drive's memory does while it plans a rebalance of many
//! objects. `fill` stores records of small objects in a drive's store (a real RocksDB on
//! disk, through the store's shard upload, unsynced) as a drive of a 6-drive EC 4+2 map
//! holds them; `plan`, in a process of its own, opens that store and prints its resident
//! memory after each of:
//! 1. opening it;
//! 2. one walk over every record keeping none (what a scrub or a listing does: RocksDB's
//!    block cache and table readers fill; the drive's usual footprint);
//! 3. the rebalance's plan under the map grown to 8 drives (`rebalance::to_move`, which
//!    counts what is to move);
//! 4. the rebalance's walk for moving (`rebalance::moving_after`, page after page, as a
//!    pass reads them; nothing is sent).
//!
//! Each step's peak (`VmHWM`) is measured from the step's start: the peak is reset
//! before it (`/proc/self/clear_refs`). `benches/rebalance-plan` runs both.
//!
//! `oed-rebalance-plan fill --dir D --objects 1000000`, then `oed-rebalance-plan plan --dir D`

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use clap::{Parser, Subcommand};
use futures_util::TryStreamExt as _;
use oed_model::config::{Config, FsyncPolicy};
use oed_model::map::{ClusterMap, DriveEntry, DriveState, Profile};
use oed_model::record::{ObjectRecord, VersionId};
use oed_store::Store;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Stores `objects` records (skips those already there).
    Fill {
        /// The drive's data directory.
        #[arg(long)]
        dir: PathBuf,
        /// Objects (each has a shard on every drive of the 6-drive map).
        #[arg(long, default_value_t = 1_000_000)]
        objects: usize,
        /// Each object's size in bytes (its shards are kept inline, under 4 KiB).
        #[arg(long, default_value_t = 4096)]
        size: usize,
    },
    /// Opens the store and measures the steps above.
    Plan {
        /// The drive's data directory.
        #[arg(long)]
        dir: PathBuf,
    },
}

const BUCKET: &str = "plan";

fn map(drives: usize) -> ClusterMap {
    ClusterMap {
        cluster_id: "rebalance-plan".into(),
        epoch: if drives > 6 { 2 } else { 1 },
        tls: false,
        profile: Profile {
            k: 4,
            m: 2,
            chunk_size: oed_ec::layout::DEFAULT_CHUNK_SIZE,
        },
        drives: (1..=drives)
            .map(|i| DriveEntry {
                id: format!("drive-{i}"),
                address: format!("127.0.0.1:{}", 9400 + i),
                domain: None,
                state: DriveState::In,
                capacity_gb: None,
                since: (i > 6).then_some(2),
            })
            .collect(),
    }
}

fn config(dir: PathBuf) -> Config {
    Config {
        data_dir: dir,
        drive_id: "drive-1".into(),
        fsync: FsyncPolicy::Never,
        ..Config::default()
    }
}

fn open(dir: PathBuf) -> anyhow::Result<Store> {
    let traffic = oed_meter::traffic::Traffic::new(&prometheus::Registry::new())?;
    Ok(Store::open(&config(dir), traffic)?)
}

/// `VmRSS` and `VmHWM` of this process, in MiB.
fn memory() -> anyhow::Result<(f64, f64)> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let field = |name: &str| -> anyhow::Result<f64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("no {name} in /proc/self/status"))?;
        let kib: f64 = line
            .split_whitespace()
            .nth(1)
            .context("no value")?
            .parse()?;
        Ok(kib / 1024.0)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// Resets the peak resident size to the current one.
fn reset_peak() -> anyhow::Result<()> {
    std::fs::write("/proc/self/clear_refs", "5").context("resetting VmHWM")
}

fn step(name: &str, started: Instant, what: &str) -> anyhow::Result<()> {
    let (rss, hwm) = memory()?;
    println!(
        "{name:<28} {:>7.1} s   RSS {rss:>6.1} MiB   peak {hwm:>6.1} MiB   {what}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn fill(dir: PathBuf, objects: usize, size: usize) -> anyhow::Result<()> {
    let store = open(dir)?;
    if store.bucket(BUCKET)?.is_none() {
        store.create_bucket(BUCKET)?;
    }
    let have = usize::try_from(store.object_count())?;
    let six = map(6);
    let payload: Vec<u8> = (0..size).map(|i| (i * 31 + i / 97) as u8).collect();
    let started = Instant::now();
    let records = (have..objects).map(|i| {
        let key = format!("object-{i:08}");
        let drives: Vec<String> = six
            .place(BUCKET, &key, 6)
            .into_iter()
            .map(|d| six.drives[d].id.clone())
            .collect();
        let shard = drives.iter().position(|d| d == "drive-1").unwrap_or(0);
        ObjectRecord {
            bucket: BUCKET.into(),
            key,
            version_id: VersionId::generate(),
            size: size as u64,
            etag: "0".repeat(32),
            last_modified_ms: oed_model::record::now_ms(),
            k: 4,
            m: 2,
            chunk_size: six.profile.chunk_size,
            drives,
            shard_index: u16::try_from(shard).unwrap_or(0),
            ..ObjectRecord::default()
        }
    });
    let stored = std::sync::atomic::AtomicUsize::new(0);
    futures_util::stream::iter(records.map(anyhow::Ok))
        .try_for_each_concurrent(8, |rec| {
            let (store, payload, stored) = (&store, &payload, &stored);
            async move {
                let shard = oed_ec::encode_object(rec.layout()?, rec.version_id.0, payload)?
                    .swap_remove(usize::from(rec.shard_index));
                let body =
                    futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from(shard))]);
                store.put_shard(rec, body, false).await?;
                stored.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                anyhow::Ok(())
            }
        })
        .await?;
    let stored = stored.into_inner();
    store.flush()?;
    println!(
        "filled: {stored} records stored in {:.1} s, {} in the store",
        started.elapsed().as_secs_f64(),
        store.object_count()
    );
    Ok(())
}

fn plan(dir: PathBuf) -> anyhow::Result<()> {
    let started = Instant::now();
    reset_peak()?;
    let store = open(dir)?;
    step(
        "opened",
        started,
        &format!("{} records", store.object_count()),
    )?;

    reset_peak()?;
    let mut after = Vec::new();
    let mut seen = 0u64;
    loop {
        let (_, last) = store.objects_after(&after, 64, |_| {
            seen += 1;
            false
        })?;
        match last {
            Some(l) => after = l,
            None => break,
        }
    }
    step("walked every record", started, &format!("{seen} records"))?;

    let eight = map(8);
    reset_peak()?;
    let (shards, bytes) = oed_repair::rebalance::to_move(&store, &eight, &[])?;
    step(
        "planned (6 -> 8 drives)",
        started,
        &format!("{shards} shards, {bytes} bytes to move"),
    )?;

    reset_peak()?;
    let (mut pages, mut records) = (0u64, 0u64);
    let mut after = Vec::new();
    loop {
        let (page, last) = oed_repair::rebalance::moving_after(&store, &eight, &[], &after)?;
        pages += 1;
        records += page.len() as u64;
        match last {
            Some(l) => after = l,
            None => break,
        }
    }
    step(
        "walked for moving",
        started,
        &format!("{records} records to move in {pages} pages"),
    )?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Command::Fill { dir, objects, size } => fill(dir, objects, size).await,
        Command::Plan { dir } => plan(dir),
    }
}
