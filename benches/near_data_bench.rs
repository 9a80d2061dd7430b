//! `oed-near-data-bench`: near-data operations against pulling the object and computing
//! the same answer in the client, in one run, on any OED endpoint. It writes one object of
//! little-endian f64 values, then for each operation runs both ways (each repeated for
//! `--seconds`, figures per run) and prints, per way:
//! wall time, bytes over the network, CPU seconds (the drives' processes named by `--pids`,
//! and this client's), and energy (the drives' `oed_energy_joules_total`, from the
//! `--metrics` endpoints, labelled measured or modelled as the drives say).
//!
//! "Bytes over the network" for a pull: the object to the client, plus the shards the
//! coordinator gathered from the other drives (`(k - 1) / k` of the object's data, `--k`);
//! for a near-data operation: the cost report's `network_bytes` plus the answer.
//!
//! ```text
//! oed-near-data-bench --endpoint http://127.0.0.1:9400 --size-mib 1024 \
//!     --pids "$(pgrep -x oedd)" --metrics http://127.0.0.1:9500/metrics,...
//! ```
//! `benches/near-data-bench` starts a cluster and runs it.

#![allow(
    clippy::cast_precision_loss,
    reason = "rates of a measurement tool; f64 is plenty"
)]

use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use futures_util::StreamExt;
use oed_ops::op::{Op, Plan, results_agree};
use oed_tools::op_client::{self, Target, ToSign};

#[derive(Parser)]
#[command(about = "Near-data operations against pull-and-compute, in one run")]
struct Args {
    /// S3 endpoint of any drive.
    #[arg(long)]
    endpoint: String,
    /// Region to sign for.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Bucket (created when missing).
    #[arg(long, default_value = "near-data-bench")]
    bucket: String,
    /// Object size in MiB.
    #[arg(long, default_value_t = 1024)]
    size_mib: u64,
    /// Data shards of the cluster's profile (for the pull's drive-to-drive bytes).
    #[arg(long, default_value_t = 4)]
    k: u64,
    /// Process ids of the drives, separated by spaces or commas (for their CPU time).
    #[arg(long, default_value = "")]
    pids: String,
    /// The drives' metrics endpoints, comma-separated (for their energy).
    #[arg(long, default_value = "")]
    metrics: String,
    /// Operations to run, as JSON, separated by `;`.
    #[arg(
        long,
        default_value = r#"{"op":"stats","format":"f64le"};{"op":"stats","format":"f64le","edges":[0,250,500,750,1000]};{"op":"checksum","algorithm":"crc32c"};{"op":"checksum","algorithm":"blake3"};{"op":"checksum","algorithm":"sha256"}"#
    )]
    ops: String,
    /// Do not write the object (an earlier run did).
    #[arg(long)]
    no_put: bool,
    /// Only the near-data way.
    #[arg(long)]
    near_only: bool,
    /// Each way is repeated until it has run this long (at least once), and its figures
    /// are per run: the drives' meters tick once a second, so energy needs several.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Then measure S3 GET latency of small objects, idle and while this operation (JSON)
    /// runs over the big object again and again: does S3 traffic keep working during a
    /// long scan on the same drives?
    #[arg(long)]
    latency_during: Option<String>,
    /// GETs per phase of the latency measurement.
    #[arg(long, default_value_t = 400)]
    latency_gets: usize,
    /// Write a text object instead: lines of 100 bytes, where `sel001` is in 1% of them,
    /// `sel050` in 50% and `sel100` in all (greps of known selectivity).
    #[arg(long)]
    text: bool,
}

/// Bytes per line of the text object.
const LINE: u64 = 100;

/// Bytes `at..at + len` of the text object: line `n` is its number, the words for the
/// selectivities it has, padding, and a newline, 100 bytes in all.
fn text_piece(at: u64, len: usize) -> Bytes {
    let mut out = Vec::with_capacity(len + 2 * LINE as usize);
    let first = at / LINE;
    let mut n = first;
    while (out.len() as u64) < at + len as u64 - first * LINE {
        let mut line = format!("{n:012} sel100");
        if n.is_multiple_of(2) {
            line.push_str(" sel050");
        }
        if n.is_multiple_of(100) {
            line.push_str(" sel001");
        }
        line.push_str(" level=info msg=");
        while line.len() < LINE as usize - 1 {
            line.push('x');
        }
        line.push('\n');
        out.extend_from_slice(line.as_bytes());
        n += 1;
    }
    let skip = (at - first * LINE) as usize;
    Bytes::copy_from_slice(&out[skip..skip + len])
}

const KEY: &str = "values.f64";

/// The drives' processes' CPU time, seconds (utime + stime).
fn drive_cpu(pids: &[u32]) -> f64 {
    let ticks = rustix_ticks();
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .map(|s| {
            // Fields after the command name (which may hold spaces) start after ") ".
            let rest = s.rsplit_once(") ").map_or("", |r| r.1);
            let f: Vec<&str> = rest.split_whitespace().collect();
            let t = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            (t(11) + t(12)) as f64 / ticks
        })
        .sum()
}

fn rustix_ticks() -> f64 {
    // Linux's USER_HZ is 100 everywhere OED runs.
    100.0
}

/// This process's CPU time, seconds.
fn own_cpu() -> f64 {
    drive_cpu(&[std::process::id()])
}

/// The drives' energy counters summed, and how they were had (the pages parsed as
/// `oedd bench` parses them).
async fn energy(http: &reqwest::Client, urls: &[String]) -> (f64, String) {
    let mut joules = 0.0;
    let mut methods = std::collections::BTreeSet::new();
    for u in urls {
        let Ok(r) = http.get(u).send().await else {
            continue;
        };
        let Ok(text) = r.text().await else { continue };
        if let Some(reading) = oed_tools::bench::meters::parse(&text) {
            joules += reading.joules;
            methods.insert(reading.method);
        }
    }
    let method = match methods.len() {
        0 => "none".to_owned(),
        1 => methods.into_iter().next().unwrap_or_default(),
        _ => "mixed".to_owned(),
    };
    (joules, method)
}

struct S3 {
    http: reqwest::Client,
    target: Target,
    host: String,
}

impl S3 {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let to_sign = ToSign {
            method: method.as_str(),
            host: &self.host,
            path,
            query: "",
            payload: "UNSIGNED-PAYLOAD",
            headers: &[],
        };
        let headers = op_client::sign(&self.target, &to_sign, now);
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.target.endpoint));
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req
    }
}

/// The object: values from 0 to 1000 in a pattern that no pair of stripes repeats.
fn piece(index: u64, len: usize) -> Bytes {
    let first = index * len as u64 / 8;
    (0..len as u64 / 8)
        .flat_map(|i| ((((first + i) * 7919) % 1_000_003) as f64 / 1000.0).to_le_bytes())
        .collect::<Vec<u8>>()
        .into()
}

/// Seconds waited after each way, so that every drive's meter ticks once more and counts
/// the way's energy.
const SETTLE: Duration = Duration::from_millis(1100);

#[derive(Default)]
struct Figures {
    wall: f64,
    network: f64,
    drive_cpu: f64,
    client_cpu: f64,
    joules: f64,
    method: String,
}

fn print(op: &str, way: &str, f: &Figures, size: u64) {
    println!(
        "{op:<64} {way:<5} {:>8.3} s {:>10.2} MiB/s {:>12.0} B net ({:.4}%) {:>7.2} drive CPU-s {:>7.2} client CPU-s {:>8.1} J ({})",
        f.wall,
        size as f64 / f.wall / 1_048_576.0,
        f.network,
        100.0 * f.network / size as f64,
        f.drive_cpu,
        f.client_cpu,
        f.joules,
        f.method
    );
}

#[allow(
    clippy::too_many_lines,
    reason = "the bench's one script, step by step"
)]
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let target = Target {
        endpoint: args.endpoint.trim_end_matches('/').to_owned(),
        region: args.region.clone(),
        access_key: std::env::var("AWS_ACCESS_KEY_ID").context("AWS_ACCESS_KEY_ID")?,
        secret_key: std::env::var("AWS_SECRET_ACCESS_KEY").context("AWS_SECRET_ACCESS_KEY")?,
    };
    let host = target
        .endpoint
        .strip_prefix("http://")
        .context("the endpoint is http://host:port")?
        .to_owned();
    let s3 = S3 {
        http: reqwest::Client::new(),
        target: target.clone(),
        host,
    };
    let pids: Vec<u32> = args
        .pids
        .split([' ', ','])
        .filter_map(|p| p.parse().ok())
        .collect();
    let metrics: Vec<String> = args
        .metrics
        .split(',')
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect();
    let size = args.size_mib << 20;
    let text = args.text;
    let path = format!("/{}/{KEY}", oed_model::uri::encode(&args.bucket));
    if !args.no_put {
        s3.request(
            reqwest::Method::PUT,
            &format!("/{}", oed_model::uri::encode(&args.bucket)),
        )
        .send()
        .await?;
        let piece_len = 1 << 20;
        let pieces = futures_util::stream::iter(0..size / piece_len).map(move |i| {
            Ok::<Bytes, std::io::Error>(if text {
                text_piece(i * piece_len, piece_len as usize)
            } else {
                piece(i, piece_len as usize)
            })
        });
        let started = Instant::now();
        let resp = s3
            .request(reqwest::Method::PUT, &path)
            .header("content-length", size)
            .body(reqwest::Body::wrap_stream(pieces))
            .send()
            .await?;
        anyhow::ensure!(resp.status().is_success(), "PUT: {}", resp.status());
        println!(
            "## wrote {} MiB in {:.2} s",
            args.size_mib,
            started.elapsed().as_secs_f64()
        );
    }
    println!(
        "## {} MiB of {}, k = {}",
        args.size_mib,
        if text { "text (100-byte lines)" } else { "f64" },
        args.k
    );
    // The drives' idle power, to take out of each way's energy what the settling adds.
    let (i0, _) = energy(&s3.http, &metrics).await;
    tokio::time::sleep(2 * SETTLE).await;
    let (i1, _) = energy(&s3.http, &metrics).await;
    let idle_watts = (i1 - i0) / (2 * SETTLE).as_secs_f64();
    println!(
        "## drives idle at {idle_watts:.1} W together; each way's energy is net of it while settling"
    );
    let settle = SETTLE.as_secs_f64() * idle_watts;
    let bench = Bench {
        s3,
        target,
        pids,
        metrics,
        size,
        path,
        bucket: args.bucket.clone(),
        k: args.k,
        settle,
        seconds: args.seconds,
    };
    for op_text in args.ops.split(';').filter(|o| !o.trim().is_empty()) {
        let op: Op = serde_json::from_str(op_text).context("an operation")?;
        let (near, result) = bench.near(op_text).await?;
        print(op_text, "near", &near, size);
        if args.near_only {
            continue;
        }
        let pull = if matches!(op, Op::Compress(_) | Op::Sort(_)) {
            bench.pull_write(&op, &result).await?
        } else {
            bench.pull(op, &result).await?
        };
        print(op_text, "pull", &pull, size);
        println!(
            "{:<64} near / pull: {:.2}x faster, {:.5} of the network bytes, {:.2} of the CPU-s",
            "",
            pull.wall / near.wall,
            near.network / pull.network,
            (near.drive_cpu + near.client_cpu) / (pull.drive_cpu + pull.client_cpu)
        );
    }
    if let Some(op_text) = &args.latency_during {
        bench.latency(op_text, args.latency_gets).await?;
    }
    Ok(())
}

/// Milliseconds at quantile `q` (a percentage) of sorted `ms`.
fn at(ms: &[f64], percent: usize) -> f64 {
    ms[(ms.len() - 1) * percent / 100]
}

/// What both ways share.
struct Bench {
    s3: S3,
    target: Target,
    pids: Vec<u32>,
    metrics: Vec<String>,
    size: u64,
    path: String,
    bucket: String,
    k: u64,
    /// Joules the drives use idle while a way settles.
    settle: f64,
    /// How long each way repeats.
    seconds: f64,
}

impl Bench {
    /// Runs `way` until `self.seconds` have passed (at least once); the figures per run,
    /// with the network bytes `way` returns for one run.
    async fn repeat<F, Fut>(&self, mut way: F) -> anyhow::Result<Figures>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<f64>>,
    {
        let (j0, method) = energy(&self.s3.http, &self.metrics).await;
        let (d0, c0, t0) = (drive_cpu(&self.pids), own_cpu(), Instant::now());
        let (mut runs, mut network) = (0u32, 0.0);
        while runs == 0 || t0.elapsed().as_secs_f64() < self.seconds {
            network = way().await?;
            runs += 1;
        }
        let wall = t0.elapsed().as_secs_f64();
        let (d1, c1) = (drive_cpu(&self.pids), own_cpu());
        tokio::time::sleep(SETTLE).await;
        let (j1, _) = energy(&self.s3.http, &self.metrics).await;
        let n = f64::from(runs);
        Ok(Figures {
            wall: wall / n,
            network,
            drive_cpu: (d1 - d0) / n,
            client_cpu: (c1 - c0) / n,
            joules: (j1 - j0 - self.settle) / n,
            method,
        })
    }

    /// GETs of 64 KiB objects, one at a time: their latencies, ms, sorted.
    async fn gets(&self, keys: &[String], count: usize) -> anyhow::Result<Vec<f64>> {
        let mut ms = Vec::with_capacity(count);
        for i in 0..count {
            let t = Instant::now();
            let resp = self
                .s3
                .request(reqwest::Method::GET, &keys[i % keys.len()])
                .send()
                .await?;
            anyhow::ensure!(resp.status().is_success(), "GET: {}", resp.status());
            resp.bytes().await?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ms.sort_by(f64::total_cmp);
        Ok(ms)
    }

    /// S3 GET latency idle, then while `op_text` runs over the big object in a loop.
    async fn latency(&self, op_text: &str, count: usize) -> anyhow::Result<()> {
        let bucket = oed_model::uri::encode(&self.bucket);
        let mut keys = Vec::new();
        for i in 0..32 {
            let path = format!("/{bucket}/small-{i}");
            let resp = self
                .s3
                .request(reqwest::Method::PUT, &path)
                .body(piece(i, 64 * 1024))
                .send()
                .await?;
            anyhow::ensure!(resp.status().is_success(), "PUT: {}", resp.status());
            keys.push(path);
        }
        self.gets(&keys, 32).await?; // warm
        let idle = self.gets(&keys, count).await?;
        let stop = std::sync::atomic::AtomicBool::new(false);
        let scans = std::sync::atomic::AtomicU32::new(0);
        let scan = async {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                op_client::run(&self.target, &self.bucket, KEY, op_text, None, |_| {}).await?;
                scans.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            anyhow::Ok(())
        };
        let measure = async {
            // The scan under way first.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let busy = self.gets(&keys, count).await;
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            busy
        };
        let (scanned, busy) = tokio::join!(scan, measure);
        scanned?;
        let busy = busy?;
        println!("## S3 GET latency, 64 KiB objects, one at a time, ms ({count} GETs a phase)");
        for (name, ms) in [("idle", &idle), ("during the scan", &busy)] {
            println!(
                "{name:<18} p50 {:>7.2}  p90 {:>7.2}  p99 {:>7.2}  max {:>7.2}",
                at(ms, 50),
                at(ms, 90),
                at(ms, 99),
                ms[ms.len() - 1]
            );
        }
        println!(
            "## the scan: {op_text}, {} runs over the {} MiB object while measured",
            scans.load(std::sync::atomic::Ordering::Relaxed),
            self.size >> 20
        );
        Ok(())
    }

    /// The operation near the data; its figures and result.
    async fn near(&self, op_text: &str) -> anyhow::Result<(Figures, serde_json::Value)> {
        let result = std::cell::RefCell::new(serde_json::Value::Null);
        let figures = self
            .repeat(|| async {
                let answer =
                    op_client::run(&self.target, &self.bucket, KEY, op_text, None, |_| {}).await?;
                let mut v: serde_json::Value = serde_json::from_str(&answer)?;
                *result.borrow_mut() = v["result"].take();
                Ok(v["cost"]["network_bytes"].as_f64().unwrap_or(0.0) + answer.len() as f64)
            })
            .await?;
        Ok((figures, result.into_inner()))
    }

    /// For an operation that writes a new object (compress, sort): the object pulled, the
    /// new one made here and PUT back (as `TARGET.pulled`); it must match what the
    /// operation wrote (its size, and for sort its CRC32C, asked of the drives).
    async fn pull_write(&self, op: &Op, expected: &serde_json::Value) -> anyhow::Result<Figures> {
        let (target, k, m) = match op {
            Op::Compress(c) => (c.target.clone(), self.k, 2),
            Op::Sort(s) => (s.target.clone(), self.k, 2),
            _ => anyhow::bail!("not an operation that writes"),
        };
        let out_path = format!(
            "/{}/{}",
            oed_model::uri::encode(&self.bucket),
            oed_model::uri::encode(&format!("{target}.pulled"))
        );
        let last = std::cell::RefCell::new(Vec::new());
        let figures = self
            .repeat(|| async {
                let resp = self
                    .s3
                    .request(reqwest::Method::GET, &self.path)
                    .send()
                    .await?;
                anyhow::ensure!(resp.status().is_success(), "GET: {}", resp.status());
                let object = resp.bytes().await?;
                let out: Vec<u8> = match op {
                    Op::Compress(c) => {
                        let mut frames = Vec::new();
                        for run in object.chunks(256 * 1024) {
                            frames.extend(c.how.frame(run).map_err(|e| anyhow::anyhow!("{e}"))?);
                        }
                        frames
                    }
                    Op::Sort(s) => oed_ops::sort::sort_run(s.format, &object),
                    _ => unreachable!(),
                };
                let resp = self
                    .s3
                    .request(reqwest::Method::PUT, &out_path)
                    .body(out.clone())
                    .send()
                    .await?;
                anyhow::ensure!(resp.status().is_success(), "PUT: {}", resp.status());
                let n = object.len() as f64;
                let o = out.len() as f64;
                *last.borrow_mut() = out;
                // In: the object, gathered from k drives; out: the result, and its shards.
                Ok(n * (1.0 + (k - 1) as f64 / k as f64)
                    + o * (1.0 + (k + m - 1) as f64 / k as f64))
            })
            .await?;
        let out = last.into_inner();
        if let Op::Compress(_) = op {
            anyhow::ensure!(
                expected["output_bytes"].as_u64() == Some(out.len() as u64),
                "compress wrote {} bytes near, {} here",
                expected["output_bytes"],
                out.len()
            );
        } else {
            let near = op_client::run(
                &self.target,
                &self.bucket,
                &target,
                r#"{"op":"checksum","algorithm":"crc32c"}"#,
                None,
                |_| {},
            )
            .await?;
            let near: serde_json::Value = serde_json::from_str(&near)?;
            let here = format!("{:08x}", crc32c::crc32c(&out));
            anyhow::ensure!(
                near["result"]["hex"].as_str() == Some(here.as_str()),
                "the sorted objects differ"
            );
        }
        Ok(figures)
    }

    /// The object pulled and the answer computed here, folding the bytes as they arrive;
    /// it must agree with `expected`.
    async fn pull(&self, op: Op, expected: &serde_json::Value) -> anyhow::Result<Figures> {
        let plan = Plan::new(op, self.size, 256 * 1024).map_err(|e| anyhow::anyhow!("{e}"))?;
        self.repeat(|| async {
            let mut resp = self
                .s3
                .request(reqwest::Method::GET, &self.path)
                .send()
                .await?;
            anyhow::ensure!(resp.status().is_success(), "GET: {}", resp.status());
            let mut at = 0u64;
            let result = if let Some(mut seq) = plan.in_order() {
                while let Some(piece) = resp.chunk().await? {
                    seq.update(&piece).map_err(|e| anyhow::anyhow!("{e}"))?;
                    at += piece.len() as u64;
                }
                seq.finish()
            } else {
                // Runs of the cluster's chunk size (256 KiB), as the drives fold them:
                // compressibility and dedup depend on the runs.
                const RUN: usize = 256 * 1024;
                let mut acc = plan.empty();
                let mut buf = Vec::with_capacity(2 * RUN);
                let fold = |buf: &[u8], at: &mut u64| {
                    let p = plan.run(*at, buf);
                    *at += buf.len() as u64;
                    p
                };
                while let Some(piece) = resp.chunk().await? {
                    buf.extend_from_slice(&piece);
                    let whole = buf.len() / RUN * RUN;
                    for run in buf[..whole].chunks(RUN) {
                        let p = fold(run, &mut at);
                        acc = acc.and_then(|a| plan.merge(a, p?));
                    }
                    buf.drain(..whole);
                }
                if !buf.is_empty() {
                    let p = fold(&buf, &mut at);
                    acc = acc.and_then(|a| plan.merge(a, p?));
                }
                acc.and_then(|a| plan.finish(&a))
            }
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            anyhow::ensure!(
                results_agree(&result, expected),
                "the two ways disagree:\n{result}\n{expected}"
            );
            Ok(at as f64 * (1.0 + (self.k - 1) as f64 / self.k as f64))
        })
        .await
    }
}
