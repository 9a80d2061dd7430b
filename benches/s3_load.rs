//! `oed-s3-load`: PUT then GET of N objects of one size at a given concurrency against
//! any S3 endpoint (OED's or another's), printing MiB/s, objects/s, latency percentiles
//! and errors, with a progress line while it runs.
//!
//! Requests are signed with SigV4 (`UNSIGNED-PAYLOAD`, as S3 allows over any transport the
//! client trusts), path-style. Bodies are made once and shared, so the tool itself costs
//! little CPU next to the server.
//!
//! ```text
//! oed-s3-load --endpoint http://127.0.0.1:9000 --access-key oed --secret-key ... \
//!     --bucket load --size-kib 4096 --count 256 --concurrency 16
//! ```

#![allow(
    clippy::cast_precision_loss,
    clippy::cast_sign_loss,
    clippy::cast_possible_truncation,
    reason = "rates and percentiles of a measurement tool; f64 is plenty"
)]

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

#[derive(Parser)]
#[command(about = "PUT then GET N objects against an S3 endpoint and report throughput")]
struct Args {
    /// S3 endpoint, e.g. `http://127.0.0.1:9000`.
    #[arg(long)]
    endpoint: String,
    /// Access key.
    #[arg(long, env = "AWS_ACCESS_KEY_ID")]
    access_key: String,
    /// Secret key (or `AWS_SECRET_ACCESS_KEY`).
    #[arg(long, env = "AWS_SECRET_ACCESS_KEY", hide_env_values = true)]
    secret_key: String,
    /// Region the endpoint expects in signatures.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Bucket (created when missing).
    #[arg(long, default_value = "oed-load")]
    bucket: String,
    /// Object size in KiB.
    #[arg(long, default_value_t = 4096)]
    size_kib: usize,
    /// Objects to write and read.
    #[arg(long, default_value_t = 256)]
    count: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 600)]
    max_seconds: u64,
    /// Only PUT.
    #[arg(long)]
    put_only: bool,
    /// A CA certificate (PEM) to trust for an `https://` endpoint (`oedd dev --tls`
    /// prints its CA).
    #[arg(long)]
    ca_file: Option<std::path::PathBuf>,
    /// Only GET (objects an earlier run wrote).
    #[arg(long)]
    get_only: bool,
}

struct Signer {
    access: String,
    secret: String,
    region: String,
    host: String,
}

fn hmac(key: &[u8], msg: &str) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(msg.as_bytes());
    m.finalize().into_bytes().to_vec()
}

fn uri_encode(s: &str, slash: bool) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || (slash && b == b'/') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

impl Signer {
    /// Headers for a request to `path` (already encoded).
    fn headers(&self, method: &str, path: &str) -> Vec<(&'static str, String)> {
        let now = time_parts(SystemTime::now());
        let (date, stamp) = (&now[..8], now.as_str());
        let payload = "UNSIGNED-PAYLOAD";
        let canonical = format!(
            "{method}\n{path}\n\nhost:{}\nx-amz-content-sha256:{payload}\nx-amz-date:{stamp}\n\nhost;x-amz-content-sha256;x-amz-date\n{payload}",
            self.host
        );
        let scope = format!("{date}/{}/s3/aws4_request", self.region);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        let k = hmac(format!("AWS4{}", self.secret).as_bytes(), date);
        let k = hmac(&k, &self.region);
        let k = hmac(&k, "s3");
        let k = hmac(&k, "aws4_request");
        let sig = hex::encode(hmac(&k, &to_sign));
        vec![
            ("x-amz-date", stamp.to_owned()),
            ("x-amz-content-sha256", payload.to_owned()),
            (
                "authorization",
                format!(
                    "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={sig}",
                    self.access
                ),
            ),
        ]
    }
}

/// `YYYYMMDDTHHMMSSZ` for `t` (UTC), without a date library.
fn time_parts(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400).cast_signed();
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

struct Client {
    http: reqwest::Client,
    endpoint: String,
    signer: Signer,
}

impl Client {
    async fn send(
        &self,
        method: reqwest::Method,
        bucket: &str,
        key: Option<&str>,
        body: Option<Bytes>,
    ) -> anyhow::Result<reqwest::Response> {
        let path = match key {
            Some(k) => format!("/{}/{}", uri_encode(bucket, false), uri_encode(k, true)),
            None => format!("/{}", uri_encode(bucket, false)),
        };
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.endpoint));
        for (k, v) in self.signer.headers(method.as_str(), &path) {
            req = req.header(k, v);
        }
        if let Some(b) = body {
            req = req.header("content-length", b.len()).body(b);
        }
        Ok(req.send().await?)
    }
}

#[derive(Default)]
struct Phase {
    done: AtomicUsize,
    errors: AtomicUsize,
    bytes: AtomicU64,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// Reads a response body to its end as it arrives, keeping none of it (a client that
/// collected each 4 MiB body into one buffer would spend a copy of every byte read, on
/// the cores the server shares): its length, or `None` if it broke off.
async fn drain(mut r: reqwest::Response) -> Option<usize> {
    let mut n = 0;
    loop {
        match r.chunk().await {
            Ok(Some(piece)) => n += piece.len(),
            Ok(None) => return Some(n),
            Err(_) => return None,
        }
    }
}

async fn run_phase(
    name: &str,
    client: &Arc<Client>,
    args: &Args,
    body: &Bytes,
) -> anyhow::Result<()> {
    let phase = Arc::new(Phase::default());
    let next = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(args.max_seconds);
    let start = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..args.concurrency.max(1) {
        let (client, phase, next, body) =
            (client.clone(), phase.clone(), next.clone(), body.clone());
        let (bucket, count, put) = (args.bucket.clone(), args.count, name == "PUT");
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count || Instant::now() > deadline {
                    return lat;
                }
                let key = format!("obj-{i:08}");
                let t = Instant::now();
                let ok = if put {
                    match client
                        .send(
                            reqwest::Method::PUT,
                            &bucket,
                            Some(&key),
                            Some(body.clone()),
                        )
                        .await
                    {
                        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                        Err(_) => false,
                    }
                } else {
                    match client
                        .send(reqwest::Method::GET, &bucket, Some(&key), None)
                        .await
                    {
                        Ok(r) if r.status().is_success() => drain(r).await == Some(body.len()),
                        _ => false,
                    }
                };
                lat.push(t.elapsed());
                if ok {
                    phase.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                } else {
                    phase.errors.fetch_add(1, Ordering::Relaxed);
                }
                phase.done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let progress = {
        let phase = phase.clone();
        let (name, count) = (name.to_owned(), args.count);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let secs = start.elapsed().as_secs_f64();
                let mib = phase.bytes.load(Ordering::Relaxed) as f64 / 1_048_576.0;
                eprint!(
                    "\r{name}: {}/{count} done, {} errors, {:.1} MiB/s   ",
                    phase.done.load(Ordering::Relaxed),
                    phase.errors.load(Ordering::Relaxed),
                    mib / secs
                );
            }
        })
    };
    let mut lat = Vec::new();
    for w in workers {
        lat.extend(w.await.context("worker")?);
    }
    progress.abort();
    eprintln!();
    let secs = start.elapsed().as_secs_f64();
    lat.sort();
    let done = phase.done.load(Ordering::Relaxed);
    let mib = phase.bytes.load(Ordering::Relaxed) as f64 / 1_048_576.0;
    println!(
        "{name}: {:.1} MiB/s, {:.1} objects/s, {done} requests in {secs:.2} s, {} errors; latency ms p50 {:.1} p90 {:.1} p99 {:.1} max {:.1}",
        mib / secs,
        done as f64 / secs,
        phase.errors.load(Ordering::Relaxed),
        percentile(&lat, 0.5),
        percentile(&lat, 0.9),
        percentile(&lat, 0.99),
        percentile(&lat, 1.0),
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let url = reqwest::Url::parse(&args.endpoint).context("--endpoint is not a URL")?;
    let host = match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        _ => anyhow::bail!("--endpoint has no host"),
    };
    let mut http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .tcp_nodelay(true);
    if let Some(ca) = &args.ca_file {
        let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
        http = http.add_root_certificate(reqwest::Certificate::from_pem(&pem)?);
    }
    let client = Arc::new(Client {
        http: http.build()?,
        endpoint: args.endpoint.trim_end_matches('/').to_owned(),
        signer: Signer {
            access: args.access_key.clone(),
            secret: args.secret_key.clone(),
            region: args.region.clone(),
            host,
        },
    });
    let r = client
        .send(reqwest::Method::PUT, &args.bucket, None, Some(Bytes::new()))
        .await?;
    let status = r.status();
    let text = r.text().await.unwrap_or_default();
    anyhow::ensure!(
        status.is_success()
            || text.contains("BucketAlreadyOwnedByYou")
            || text.contains("BucketAlreadyExists"),
        "creating bucket {}: {status} {text}",
        args.bucket
    );
    let size = args.size_kib * 1024;
    // Incompressible, made once.
    let mut data = vec![0u8; size];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for b in &mut data {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = (x >> 24) as u8;
    }
    let body = Bytes::from(data);
    println!(
        "{} objects of {} KiB, concurrency {}, endpoint {}",
        args.count, args.size_kib, args.concurrency, args.endpoint
    );
    if !args.get_only {
        run_phase("PUT", &client, &args, &body).await?;
    }
    if !args.put_only {
        run_phase("GET", &client, &args, &body).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_civil() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(time_parts(t), "20231114T221320Z");
        assert_eq!(time_parts(SystemTime::UNIX_EPOCH), "19700101T000000Z");
    }
}
