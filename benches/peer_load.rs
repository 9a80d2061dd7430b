//! `oed-peer-load`: shard writes then reads through one drive's peer API, at a given size
//! and concurrency; prints MiB/s, shards/s and latency percentiles. `benches/peer-bench`
//! runs it next to raw disk throughput measured with dd in the same run.
//!
//! `OED_CLUSTER_SECRET=... oed-peer-load --url http://127.0.0.1:9400 --size-kib 1024
//!  --concurrency 8 --count 256`

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use futures_util::StreamExt;
use oed_model::drive::Drive as _;
use oed_model::record::{ObjectRecord, VersionId};
use oed_peer::auth::PeerKey;
use oed_peer::client::PeerClient;

/// Peer-API shard write and read load against one drive.
#[derive(Parser)]
struct Args {
    /// Base URL of the drive.
    #[arg(long)]
    url: String,
    /// Shard payload size in KiB.
    #[arg(long, default_value_t = 1024)]
    size_kib: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Shards to write, then read.
    #[arg(long, default_value_t = 128)]
    count: usize,
    /// Bucket to use (created if missing).
    #[arg(long, default_value = "bench")]
    bucket: String,
    /// Skip the read phase.
    #[arg(long)]
    write_only: bool,
    /// Skip the write phase (read shards an earlier run wrote).
    #[arg(long)]
    read_only: bool,
    /// The version the shards are written as: a run with a higher one than an earlier
    /// run's overwrites its shards (each write then replaces a stored version).
    #[arg(long, default_value_t = 1)]
    version: u128,
    /// Send shard uploads as raw uploads (spliced into their files by the drive) instead
    /// of request bodies, whatever their size (a drive sends only those of
    /// `raw_shard_upload_min_bytes` and more); also set by `OED_RAW_SHARD_UPLOADS=true`,
    /// the drive setting's variable, so that `ENV_B` of `benches/peer-ab` sets both.
    #[arg(long)]
    raw: bool,
}

fn record(bucket: &str, i: usize, size: usize, version: u128) -> ObjectRecord {
    ObjectRecord {
        bucket: bucket.into(),
        key: format!("shard-{i:06}"),
        version_id: VersionId(version),
        size: size as u64,
        k: 1,
        m: 0,
        chunk_size: oed_ec::layout::DEFAULT_CHUNK_SIZE,
        ..ObjectRecord::default()
    }
}

struct Phase {
    bytes: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
    errors: usize,
}

impl Phase {
    #[allow(
        clippy::cast_precision_loss,
        reason = "byte and request counts far below 2^52"
    )]
    fn print(&self, name: &str) {
        let mut l = self.latencies.clone();
        l.sort();
        let pct = |permille: usize| {
            l.get(l.len().saturating_sub(1) * permille / 1000)
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        };
        let secs = self.elapsed.as_secs_f64();
        println!(
            "{name}: {:.1} MiB/s, {:.1} shards/s, latency ms p50 {:.1} p90 {:.1} p99 {:.1}, errors {}",
            self.bytes as f64 / secs / f64::from(1 << 20),
            l.len() as f64 / secs,
            pct(500),
            pct(900),
            pct(990),
            self.errors
        );
    }
}

async fn run<F, Fut>(args: &Args, op: F) -> Phase
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<u64>> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (op, next, count) = (op.clone(), next.clone(), args.count);
        tasks.push(tokio::spawn(async move {
            let mut out = (0u64, Vec::new(), 0usize);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return out;
                }
                let t = Instant::now();
                match op(i).await {
                    Ok(b) => {
                        out.0 += b;
                        out.1.push(t.elapsed());
                    }
                    Err(e) => {
                        eprintln!("shard {i}: {e:#}");
                        out.2 += 1;
                    }
                }
            }
        }));
    }
    let mut phase = Phase {
        bytes: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
        errors: 0,
    };
    for t in tasks {
        if let Ok((b, l, e)) = t.await {
            phase.bytes += b;
            phase.latencies.extend(l);
            phase.errors += e;
        }
    }
    phase.elapsed = start.elapsed();
    phase
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    let secret = std::env::var("OED_CLUSTER_SECRET").context("set OED_CLUSTER_SECRET")?;
    let raw = args.raw || std::env::var("OED_RAW_SHARD_UPLOADS").is_ok_and(|v| v == "true");
    // Shard reads ask for frames unless the drive setting's variable turns them off, as a
    // coordinator's do, so that `ENV_A` of `benches/peer-ab` sets both sides.
    let framed = std::env::var("OED_FRAMED_SHARD_READS").map_or(true, |v| v != "false");
    let client = PeerClient::new(&args.url, PeerKey::derive(secret.trim().as_bytes()));
    // Its writes name the drive they are for: the one it says it is.
    let id = client.info().await?.drive_id;
    let client = client
        .for_drive(&id)
        .with_raw_uploads(raw)
        .with_framed_reads(framed);
    client.create_bucket(&args.bucket).await?;
    let size = args.size_kib * 1024;
    let rec = record(&args.bucket, 0, size, args.version);
    let payload: Vec<u8> = (0..size).map(|i| (i * 7 + i / 4096) as u8).collect();
    let file =
        Bytes::from(oed_ec::encode_object(rec.layout()?, args.version, &payload)?.swap_remove(0));
    println!(
        "peer load: {} shards of {} KiB ({} bytes on disk each), concurrency {}",
        args.count,
        args.size_kib,
        file.len(),
        args.concurrency
    );
    if !args.read_only {
        let (c, f, a) = (client.clone(), file.clone(), args.clone());
        let put = run(&args, move |i| {
            let (c, f, a) = (c.clone(), f.clone(), a.clone());
            async move {
                let rec = record(&a.bucket, i, a.size_kib * 1024, a.version);
                let len = f.len() as u64;
                let pieces: Vec<Result<Bytes, std::io::Error>> = (0..f.len())
                    .step_by(256 * 1024)
                    .map(|o| Ok(f.slice(o..(o + 256 * 1024).min(f.len()))))
                    .collect();
                c.put_shard(&rec, Box::pin(futures_util::stream::iter(pieces)), false)
                    .await?;
                Ok(len)
            }
        })
        .await;
        put.print("PUT");
    }
    if !args.write_only {
        let (c, a) = (client.clone(), args.clone());
        let get = run(&args, move |i| {
            let (c, a) = (c.clone(), a.clone());
            async move {
                let key = format!("shard-{i:06}");
                // Read as it arrives and keep none of it, as a coordinator does: collecting
                // each body into one buffer would add a copy of every byte, on the cores
                // the drive shares with this tool.
                let mut body = c.read_shard(&a.bucket, &key, None, None).await?.chunks;
                let (mut n, stored) = (0, a.size_kib * 1024);
                while let Some(piece) = body.next().await {
                    n += piece?.len();
                }
                anyhow::ensure!(n == stored, "{key}: {n} bytes read, {stored} stored");
                Ok(n as u64)
            }
        })
        .await;
        get.print("GET");
    }
    Ok(())
}
