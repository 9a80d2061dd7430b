//! `oedd bench`: an IOR-like benchmark of any S3 endpoint. Each repetition writes a fixed
//! number of objects of one size with a fixed number of clients, reads them back, and
//! optionally runs a near-data operation over each; every phase reports throughput,
//! latency percentiles, errors, its share of the theoretical peak (with the formula), and
//! the energy the drives used over it, read from their `oed_energy_joules_total` with its
//! source label. `docs/bench.md` is the user's page.
//!
//! # Layout
//! - [`peak`]: the peaks (the studies' and OED's data path) and link rates.
//! - [`meters`]: the drives' energy counters, parsed from their `/metrics` pages.
//! - [`report`]: the arithmetic of a phase and the run, the table and the JSON.
//! - [`svg`]: the plot of throughput and power over the run.
//! - [`signing`]: uploads signed as S3 clients sign them (unsigned, a whole-body SHA-256,
//!   `aws-chunked` with signed chunks, a CRC32C trailer).
//!
//! Requests are signed with SigV4 in header form, path-style, and sent to the endpoints in
//! turn; uploads are signed as the clients of [`signing`] sign theirs. Every object's body is a
//! window of one random buffer at its own offset, so no two objects are alike (a store
//! that deduplicates blocks gains nothing) and nothing is copied to send one; reads are
//! compared with the bytes written as they arrive.

pub mod meters;
pub mod peak;
pub mod report;
pub mod signing;
pub mod svg;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::op_client::{Target, ToSign};
use meters::Reading;
use oed_model::error::{Error, Result};
use oed_model::uri::encode;
use peak::{Kind, PeakInputs};
use report::{Measured, PhasePeak, PhaseResult, Run, Sample};
use signing::Frames;
pub use signing::Signing;

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// S3 endpoints (`http://host:port` or `https://`), used in turn.
    pub endpoints: Vec<String>,
    /// Access key, secret key and region to sign with.
    pub access_key: String,
    /// Secret access key.
    pub secret_key: String,
    /// Region.
    pub region: String,
    /// Bucket (made when missing).
    pub bucket: String,
    /// Bytes in each object.
    pub object_bytes: u64,
    /// Objects per phase; with `duration`, the objects a phase without a write before
    /// it reads (kept by an earlier run).
    pub objects: u64,
    /// Time-based phases: each phase sends requests for this long (a write writes new
    /// objects all along; a read or an operation goes over those its repetition's write
    /// wrote, again and again), instead of `objects` requests.
    pub duration: Option<Duration>,
    /// Requests in flight.
    pub clients: usize,
    /// How uploads are signed.
    pub signing: Signing,
    /// Repetitions of the phases.
    pub reps: u32,
    /// The phases of each repetition, in order; `write` comes first.
    pub phases: Vec<Kind>,
    /// The near-data operation of an `op` phase (JSON).
    pub operation: serde_json::Value,
    /// The drives' `/metrics` URLs, for energy.
    pub metrics: Vec<String>,
    /// What the peaks are computed from (`gateways` is set from the endpoints).
    pub peak: PeakInputs,
    /// A shell command run before every phase but the first (e.g. to drop caches).
    pub between_phases: Option<String>,
    /// What the environment emulated, recorded with the results as given.
    pub environment: Option<serde_json::Value>,
    /// A CA certificate (PEM) to trust for `https://` endpoints.
    pub ca_file: Option<std::path::PathBuf>,
    /// Keep the objects after the run.
    pub keep: bool,
    /// The objects' key prefix (`PREFIX/rREP/NNNNNNNN`); a new one for each run when
    /// `None`. Naming it lets a later run read what an earlier one kept.
    pub prefix: Option<String>,
    /// A phase stops issuing requests after this long.
    pub max_phase: Duration,
    /// A request that takes longer fails.
    pub request_timeout: Duration,
    /// How often the timeline takes a point.
    pub sample_every: Duration,
    /// Print progress on stderr.
    pub progress: bool,
}

/// Parses a size: a number with `B`, `K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB` (powers
/// of 1024) or `KB`, `MB`, `GB`, `TB` (powers of 1000).
///
/// # Errors
/// A message naming what is not understood.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let (v, unit) =
        peak::number_and_unit(s).ok_or_else(|| format!("{s:?} is not a size like 4MiB or 1GiB"))?;
    let mult: f64 = match unit.as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1_048_576.0,
        "g" | "gib" => 1_073_741_824.0,
        "t" | "tib" => 1_099_511_627_776.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        u => {
            return Err(format!(
                "{s:?}: unit {u:?} is not B, KiB, MiB, GiB, TiB, KB, MB, GB or TB"
            ));
        }
    };
    let bytes = (v * mult).round();
    if !(1.0..=1e18).contains(&bytes) {
        return Err(format!("{s:?}: a size must be at least 1 byte"));
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "checked to lie in 1..1e18"
    )]
    Ok(bytes as u64)
}

/// A phase's length when no count or amount is given: ten periods of a drive's meter
/// (`meter_period_ms`, 1000 by default), so its energy is good to a tenth of a period's
/// power at each end even from drives that do not mark their meter's ticks.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// Parses a duration: a number of seconds, or one with `ms`, `s`, `m` or `h`.
///
/// # Errors
/// A message naming what is not understood.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let (v, unit) = peak::number_and_unit(s)
        .ok_or_else(|| format!("--duration {s:?} is not a time like 30s, 2m or 1h"))?;
    let secs = match unit.as_str() {
        "" | "s" => v,
        "ms" => v / 1000.0,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        u => return Err(format!("--duration {s:?}: unit {u:?} is not ms, s, m or h")),
    };
    if !(0.1..=86_400.0 * 7.0).contains(&secs) {
        return Err(format!(
            "--duration {s:?}: a phase lasts from 100 ms to a week"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a list of phases, `write,read,op`. Without `given_prefix` (objects of an earlier
/// run kept with `--keep`), the phases start with `write`.
///
/// # Errors
/// An unknown phase, or phases that read before anything is written.
pub fn parse_phases(s: &str, given_prefix: bool) -> std::result::Result<Vec<Kind>, String> {
    let phases = s
        .split(',')
        .map(|p| match p.trim() {
            "write" => Ok(Kind::Write),
            "read" => Ok(Kind::Read),
            "op" => Ok(Kind::Op),
            other => Err(format!("phase {other:?} is not write, read or op")),
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if !given_prefix && phases.first() != Some(&Kind::Write) {
        return Err(
            "the phases start with write: read and op work on what it wrote \
             (or on the objects of an earlier run with --keep, named by its --prefix)"
                .into(),
        );
    }
    Ok(phases)
}

/// The extra random bytes past one object in the shared buffer: objects start at
/// different offsets within it.
const WINDOW: u64 = 16 << 20;

/// Object `i`'s offset in the shared buffer: `i x 65537 mod 2^24`, a different offset for
/// each of the first 2^24 objects (65537 is odd) and never a multiple of a block size
/// for two neighbours.
fn offset(i: u64) -> u64 {
    i.wrapping_mul(65_537) % WINDOW
}

/// Random-looking bytes (xorshift64), made once.
fn random_bytes(n: usize) -> Bytes {
    let mut data = vec![0u8; n];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    Bytes::from(data)
}

struct Endpoint {
    scheme: String,
    host: String,
}

struct S3 {
    http: Client<oed_peer::tls::PeerConnector, Frames>,
    endpoints: Vec<Endpoint>,
    target: Target,
    timeout: Duration,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl S3 {
    fn new(opts: &BenchOptions) -> Result<Self> {
        let endpoints = opts
            .endpoints
            .iter()
            .map(|e| {
                let uri: http::Uri = e
                    .parse()
                    .map_err(|err| Error::BadRequest(format!("endpoint {e:?}: {err}")))?;
                let scheme = uri.scheme_str().unwrap_or_default().to_owned();
                if scheme != "http" && scheme != "https" {
                    return Err(Error::BadRequest(format!(
                        "endpoint {e:?} is not http://host:port or https://host:port"
                    )));
                }
                let host = uri
                    .authority()
                    .ok_or_else(|| Error::BadRequest(format!("endpoint {e:?} has no host")))?
                    .to_string();
                Ok(Endpoint { scheme, host })
            })
            .collect::<Result<Vec<_>>>()?;
        if endpoints.is_empty() {
            return Err(Error::BadRequest("give at least one --endpoint".into()));
        }
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(Duration::from_secs(5)));
        tcp.enforce_http(false);
        let tls = oed_peer::tls::client_config(opts.ca_file.as_deref())?;
        let http = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(opts.clients.max(1))
            .build(oed_peer::tls::PeerConnector::new(tcp, tls));
        Ok(Self {
            http,
            endpoints,
            target: Target {
                endpoint: String::new(),
                region: opts.region.clone(),
                access_key: opts.access_key.clone(),
                secret_key: opts.secret_key.clone(),
            },
            timeout: opts.request_timeout,
        })
    }

    /// Sends a request to endpoint `ep`, its body signed as `signing`; the answer once
    /// its head arrived.
    async fn send(
        &self,
        ep: usize,
        method: http::Method,
        path: &str,
        query: &str,
        body: Bytes,
        signing: Signing,
    ) -> std::result::Result<http::Response<hyper::body::Incoming>, String> {
        let e = &self.endpoints[ep % self.endpoints.len()];
        let prepared = signing::prepare(signing, &body);
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        let mut req = http::Request::builder()
            .method(method.clone())
            .uri(format!("{}://{}{path}{q}", e.scheme, e.host));
        let to_sign = ToSign {
            method: method.as_str(),
            host: &e.host,
            path,
            query,
            payload: &prepared.payload,
            headers: &prepared.headers,
        };
        let signer = oed_model::sigv4::Signer {
            access_key: &self.target.access_key,
            secret_key: &self.target.secret_key,
            region: &self.target.region,
        };
        let (headers, mut chunks) = oed_model::sigv4::sign_streaming(&signer, &to_sign, now_secs());
        for (name, value) in prepared.headers.into_iter().chain(headers) {
            req = req.header(name, value);
        }
        let body = signing::frames(signing, &body, &mut chunks);
        let req = req.body(body).map_err(|e| e.to_string())?;
        match tokio::time::timeout(self.timeout, self.http.request(req)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(err)) => Err(format!(
                "{}://{}: {}",
                e.scheme,
                e.host,
                oed_model::error::source_chain(&err)
            )),
            Err(_) => Err(format!(
                "{}://{}: no answer within {:?}",
                e.scheme, e.host, self.timeout
            )),
        }
    }

    /// Reads an answer's body to its end (within the request timeout); with `expect`,
    /// checks it is those bytes. Returns its length.
    async fn drain(
        &self,
        resp: http::Response<hyper::body::Incoming>,
        expect: Option<&[u8]>,
    ) -> std::result::Result<u64, String> {
        let mut body = resp.into_body();
        let mut n = 0usize;
        let read = async {
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| format!("the body broke off: {e}"))?;
                if let Some(data) = frame.data_ref() {
                    if let Some(want) = expect {
                        let end = n + data.len();
                        if end > want.len() || want[n..end] != data[..] {
                            return Err(format!(
                                "the bytes read differ from those written, at byte {n}"
                            ));
                        }
                    }
                    n += data.len();
                }
            }
            Ok(())
        };
        tokio::time::timeout(self.timeout, read)
            .await
            .map_err(|_| "the body did not arrive within the request timeout".to_owned())??;
        Ok(n as u64)
    }

    /// The text of an error answer, shortened.
    async fn error_text(&self, resp: http::Response<hyper::body::Incoming>) -> String {
        let status = resp.status();
        let body = tokio::time::timeout(self.timeout, resp.into_body().collect())
            .await
            .ok()
            .and_then(std::result::Result::ok)
            .map(http_body_util::Collected::to_bytes)
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&body);
        let code = text
            .split("<Code>")
            .nth(1)
            .and_then(|r| r.split("</Code>").next())
            .unwrap_or("");
        format!("{status} {code}").trim().to_owned()
    }

    /// Reads a drive's `/metrics` page for its energy; `None` if it does not answer.
    async fn meter(&self, url: &str) -> Option<Reading> {
        let req = http::Request::get(url).body(Frames::default()).ok()?;
        let resp = tokio::time::timeout(Duration::from_secs(2), self.http.request(req))
            .await
            .ok()?
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let body = tokio::time::timeout(Duration::from_secs(2), resp.into_body().collect())
            .await
            .ok()?
            .ok()?
            .to_bytes();
        meters::parse(&String::from_utf8_lossy(&body))
    }
}

/// Reads every meter at once.
async fn read_meters(s3: &S3, urls: &[String]) -> Vec<Option<Reading>> {
    futures_util::future::join_all(urls.iter().map(|u| s3.meter(u))).await
}

/// Seconds since the Unix epoch (the drives mark their meters' ticks on this clock).
fn wall_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// How often a meter is read while waiting for its next tick.
const TICK_POLL: Duration = Duration::from_millis(100);

/// Each meter's first reading of a tick after `at` (seconds since the epoch), waiting
/// up to [`report::AFTER_EDGE`] for it; `None` for a meter that did not tick in time,
/// and at once for one that did not answer `before` or does not mark its ticks.
async fn readings_after(
    s3: Arc<S3>,
    urls: Vec<String>,
    before: Vec<Option<Reading>>,
    at: f64,
) -> Vec<Option<Reading>> {
    let s3 = &s3;
    futures_util::future::join_all(urls.iter().zip(before).map(|(url, b)| async move {
        let b = b?;
        if b.at? > at {
            return Some(b);
        }
        let deadline = Instant::now() + report::AFTER_EDGE;
        while Instant::now() < deadline {
            tokio::time::sleep(TICK_POLL).await;
            if let Some(r) = s3.meter(url).await
                && r.at.is_some_and(|t| t > at)
            {
                return Some(r);
            }
        }
        None
    }))
    .await
}

fn object_path(bucket: &str, key: &str) -> String {
    format!(
        "/{}/{}",
        encode(bucket),
        key.split('/').map(encode).collect::<Vec<_>>().join("/")
    )
}

/// What the workers and the timeline share.
struct Live {
    /// Object bytes done by all phases so far.
    bytes: AtomicU64,
    /// The phase running and its repetition (`None` between phases).
    current: Mutex<(Option<Kind>, u32)>,
    done: AtomicU64,
    errors: AtomicU64,
}

impl Live {
    fn new() -> Self {
        Self {
            bytes: AtomicU64::new(0),
            current: Mutex::new((None, 0)),
            done: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    /// Says which phase runs now (`None` between phases).
    fn set(&self, phase: Option<Kind>, rep: u32) {
        *self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = (phase, rep);
    }
}

fn cpu_seconds() -> f64 {
    oed_meter::procfs::process_stats(&oed_meter::Roots::default()).map_or(0.0, |s| s.cpu_seconds)
}

/// One request of a `kind` phase on the object at `path` (`body` is what was written
/// there): whether it succeeded, and for a read the time to its first byte.
async fn request(
    s3: &S3,
    (kind, signing): (Kind, Signing),
    ep: usize,
    path: &str,
    body: Bytes,
    op_body: &Bytes,
    size: u64,
) -> (std::result::Result<(), String>, Option<Duration>) {
    let t = Instant::now();
    let mut first_byte = None;
    let outcome = async {
        let (resp, expect) = match kind {
            Kind::Write => (
                s3.send(ep, http::Method::PUT, path, "", body, signing)
                    .await?,
                None,
            ),
            Kind::Read => (
                s3.send(
                    ep,
                    http::Method::GET,
                    path,
                    "",
                    Bytes::new(),
                    Signing::Unsigned,
                )
                .await?,
                Some(&body[..]),
            ),
            Kind::Op => (
                s3.send(
                    ep,
                    http::Method::POST,
                    path,
                    "oed-op=",
                    op_body.clone(),
                    Signing::Sha256,
                )
                .await?,
                None,
            ),
        };
        if kind == Kind::Read {
            first_byte = Some(t.elapsed());
        }
        if !resp.status().is_success() {
            return Err(s3.error_text(resp).await);
        }
        let n = s3.drain(resp, expect).await?;
        if kind == Kind::Read && n != size {
            return Err(format!("a read returned {n} bytes of {size}"));
        }
        Ok(())
    }
    .await;
    (outcome, first_byte)
}

/// One phase, `opts.clients` requests at a time: `opts.objects` of them, or as many as
/// `opts.duration` allows. A read or an operation goes over the `objects` objects there
/// are (in turn, again and again with a duration). The phase's objects, for a write
/// the count it wrote to, come with its figures.
async fn phase(
    s3: &Arc<S3>,
    opts: &BenchOptions,
    live: &Arc<Live>,
    (kind, prefix): (Kind, &str),
    objects: u64,
    pool: &Bytes,
) -> (Measured, u64) {
    let next = Arc::new(AtomicU64::new(0));
    let first_errors = Arc::new(Mutex::new(Vec::<String>::new()));
    // Requests to send: with a duration, until its end (a write's keys go on; other
    // phases wrap around the objects there are).
    let (limit, wrap) = match (opts.duration, kind) {
        (None, Kind::Write) => (opts.objects, u64::MAX),
        (None, _) => (objects, u64::MAX),
        (Some(_), Kind::Write) => (u64::MAX, u64::MAX),
        (Some(_), _) => (u64::MAX, objects.max(1)),
    };
    let signing = opts.signing;
    let op_body = Bytes::from(opts.operation.to_string());
    let cpu0 = cpu_seconds();
    live.done.store(0, Ordering::Relaxed);
    live.errors.store(0, Ordering::Relaxed);
    let start = Instant::now();
    let deadline = start + opts.duration.unwrap_or(opts.max_phase).min(opts.max_phase);
    let mut workers = Vec::new();
    for _ in 0..opts.clients.max(1) {
        let (s3, live, next, first_errors, pool, op_body) = (
            s3.clone(),
            live.clone(),
            next.clone(),
            first_errors.clone(),
            pool.clone(),
            op_body.clone(),
        );
        let (bucket, prefix, size) = (opts.bucket.clone(), prefix.to_owned(), opts.object_bytes);
        workers.push(tokio::spawn(async move {
            let (mut lat, mut ttfb, mut bytes, mut ok) = (Vec::new(), Vec::new(), 0u64, 0u64);
            loop {
                // The deadline first: every key taken is sent, so a write's keys are
                // 0..n without a gap.
                if Instant::now() > deadline {
                    return (lat, ttfb, bytes, ok);
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= limit {
                    return (lat, ttfb, bytes, ok);
                }
                let i = i % wrap;
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "offsets within a buffer in memory"
                )]
                let (off, len) = (offset(i) as usize, size as usize);
                let body = pool.slice(off..off + len);
                let path = object_path(&bucket, &format!("{prefix}/{i:08}"));
                #[allow(clippy::cast_possible_truncation, reason = "an endpoint index")]
                let ep = i as usize;
                let t = Instant::now();
                let (outcome, first_byte) =
                    request(&s3, (kind, signing), ep, &path, body, &op_body, size).await;
                ttfb.extend(first_byte.map(|d| d.as_secs_f64() * 1000.0));
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
                match outcome {
                    Ok(()) => {
                        ok += 1;
                        bytes += size;
                        live.bytes.fetch_add(size, Ordering::Relaxed);
                        live.done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        live.errors.fetch_add(1, Ordering::Relaxed);
                        let mut f = first_errors
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        if f.len() < 5 {
                            f.push(format!("{} {path}: {e}", report::kind_name(kind)));
                        }
                    }
                }
            }
        }));
    }
    let mut m = Measured::default();
    for w in workers {
        if let Ok((lat, ttfb, bytes, ok)) = w.await {
            m.latency_ms.extend(lat);
            m.ttfb_ms.extend(ttfb);
            m.bytes += bytes;
            m.objects += ok;
        }
    }
    m.seconds = start.elapsed().as_secs_f64();
    m.client_cpu_seconds = cpu_seconds() - cpu0;
    m.errors = live.errors.load(Ordering::Relaxed);
    m.first_errors = std::mem::take(
        &mut first_errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let written = next.load(Ordering::Relaxed).min(limit);
    (
        m,
        if kind == Kind::Write {
            written
        } else {
            objects
        },
    )
}

/// [`phase`] between the drives' meters read at its edges: its figures, its objects, and
/// its energy (or why it is not known).
async fn metered_phase(
    s3: &Arc<S3>,
    opts: &BenchOptions,
    live: &Arc<Live>,
    what: (Kind, &str),
    objects: u64,
    pool: &Bytes,
) -> (Measured, u64, (Option<report::Energy>, Option<String>)) {
    let before = read_meters(s3, &opts.metrics).await;
    let t0 = wall_secs();
    // The meters' next ticks after the start, while the phase runs.
    let after = tokio::spawn(readings_after(
        s3.clone(),
        opts.metrics.clone(),
        before.clone(),
        t0,
    ));
    let (m, objects) = phase(s3, opts, live, what, objects, pool).await;
    let t1 = wall_secs();
    // Read at once: the start's next ticks may still be coming, and a reading taken
    // after them would be past the end.
    let before_end = read_meters(s3, &opts.metrics).await;
    let start = report::Edge {
        at: t0,
        after: after.await.unwrap_or_default(),
        before,
    };
    let end = report::Edge {
        at: t1,
        after: readings_after(s3.clone(), opts.metrics.clone(), before_end.clone(), t1).await,
        before: before_end,
    };
    let energy = report::energy(&opts.metrics, &start, &end, m.seconds, m.bytes);
    (m, objects, energy)
}

/// Deletes a repetition's `count` objects, `clients` at a time; how many could not be
/// deleted.
async fn delete_all(s3: &Arc<S3>, opts: &BenchOptions, prefix: &str, count: u64) -> u64 {
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..opts.clients.max(1) {
        let (s3, next, failed) = (s3.clone(), next.clone(), failed.clone());
        let (bucket, prefix) = (opts.bucket.clone(), prefix.to_owned());
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return;
                }
                let path = object_path(&bucket, &format!("{prefix}/{i:08}"));
                #[allow(clippy::cast_possible_truncation, reason = "an endpoint index")]
                let ok = match s3
                    .send(
                        i as usize,
                        http::Method::DELETE,
                        &path,
                        "",
                        Bytes::new(),
                        Signing::Unsigned,
                    )
                    .await
                {
                    Ok(r) => r.status().is_success() && s3.drain(r, None).await.is_ok(),
                    Err(_) => false,
                };
                if !ok {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
    failed.load(Ordering::Relaxed)
}

/// Makes the bucket, or finds it there already.
async fn make_bucket(s3: &S3, bucket: &str) -> Result<()> {
    let path = format!("/{}", encode(bucket));
    let resp = s3
        .send(
            0,
            http::Method::PUT,
            &path,
            "",
            Bytes::new(),
            Signing::Unsigned,
        )
        .await
        .map_err(Error::Unavailable)?;
    if resp.status().is_success() {
        return s3
            .drain(resp, None)
            .await
            .map(|_| ())
            .map_err(Error::Unavailable);
    }
    let text = s3.error_text(resp).await;
    if text.contains("BucketAlreadyOwnedByYou") {
        Ok(())
    } else {
        Err(Error::BadRequest(format!(
            "creating bucket {bucket}: {text}"
        )))
    }
}

/// Runs the command given to run between phases; says why when it fails.
fn between(cmd: &str) -> Result<()> {
    let status = std::process::Command::new("sh")
        .args(["-c", cmd])
        .status()
        .map_err(|e| Error::BadRequest(format!("--between-phases {cmd:?}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::BadRequest(format!(
            "--between-phases {cmd:?} failed ({status})"
        )))
    }
}

/// The timeline: a point every `opts.sample_every`, until `stop`.
async fn sample(
    s3: Arc<S3>,
    meters: Vec<String>,
    live: Arc<Live>,
    started: Instant,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) -> Vec<Sample> {
    let joules = |r: &[Option<Reading>]| -> Option<f64> {
        if r.is_empty() || r.iter().any(Option::is_none) {
            None
        } else {
            Some(r.iter().flatten().map(|x| x.joules).sum())
        }
    };
    let mut out = Vec::new();
    let mut prev = (0.0, 0u64, joules(&read_meters(&s3, &meters).await));
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        // A last point when the run ends, so even a short run has one.
        let last = tokio::select! {
            () = stop.cancelled() => true,
            _ = tick.tick() => false,
        };
        let (t, bytes) = (
            started.elapsed().as_secs_f64(),
            live.bytes.load(Ordering::Relaxed),
        );
        let j = joules(&read_meters(&s3, &meters).await);
        let (phase, rep) = *live
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dt = (t - prev.0).max(1e-3);
        #[allow(clippy::cast_precision_loss, reason = "bytes to MiB")]
        let mib_s = (bytes - prev.1) as f64 / 1_048_576.0 / dt;
        let watts = match (prev.2, j) {
            (Some(a), Some(b)) if b >= a => Some((b - a) / dt),
            _ => None,
        };
        // A last interval much shorter than the step is left out: its power, from a
        // counter that moves once a meter period, would be noise.
        if !last || out.is_empty() || dt >= every.as_secs_f64() / 2.0 {
            out.push(Sample {
                t,
                phase,
                rep,
                mib_s,
                watts,
            });
        }
        prev = (t, bytes, j);
        if last {
            return out;
        }
    }
}

/// A task that rewrites a progress line on standard error every second.
fn progress_line(
    live: Arc<Live>,
    kind: Kind,
    rep: u32,
    count: Option<u64>,
) -> tokio::task::JoinHandle<()> {
    let count = count.map_or_else(String::new, |c| format!("/{c}"));
    let name = report::kind_name(kind);
    let t0 = Instant::now();
    let b0 = live.bytes.load(Ordering::Relaxed);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            #[allow(clippy::cast_precision_loss, reason = "a progress line")]
            let mib = (live.bytes.load(Ordering::Relaxed) - b0) as f64 / 1_048_576.0;
            eprint!(
                "\r{name} {rep}: {}{count} done, {} errors, {:.1} MiB/s   ",
                live.done.load(Ordering::Relaxed),
                live.errors.load(Ordering::Relaxed),
                mib / t0.elapsed().as_secs_f64()
            );
        }
    })
}

/// `measured` when every phase's energy was measured, `modelled` when any was modelled,
/// `None` when a phase had no energy.
fn run_energy_source(results: &[PhaseResult]) -> Option<String> {
    if results.iter().any(|r| r.energy_source.is_none()) {
        None
    } else if results
        .iter()
        .all(|r| r.energy_source.as_deref() == Some("measured"))
    {
        Some("measured".to_owned())
    } else {
        Some("modelled".to_owned())
    }
}

/// The inputs of the peaks (the endpoints are the gateways), the data-path peak of each
/// kind of phase asked for, and the studies' peak.
fn peaks_of(opts: &BenchOptions) -> (PeakInputs, Vec<PhasePeak>, peak::Peak) {
    let mut inputs = opts.peak.clone();
    inputs.gateways = u32::try_from(opts.endpoints.len()).unwrap_or(u32::MAX);
    let mut peaks: Vec<PhasePeak> = Vec::new();
    for k in &opts.phases {
        if !peaks.iter().any(|p| p.phase == *k) {
            peaks.push(PhasePeak {
                phase: *k,
                peak: inputs.oed(*k),
            });
        }
    }
    let tpp = inputs.tpp();
    (inputs, peaks, tpp)
}

/// Runs the benchmark. `progress` is told what happens (a line at a time).
///
/// # Errors
/// Bad options ([`Error::BadRequest`]), an endpoint that cannot be reached or refuses
/// the bucket. Failed requests during phases are counted in the results, not errors.
pub async fn run(opts: &BenchOptions, mut progress: impl FnMut(&str)) -> Result<Run> {
    if opts.object_bytes > (1 << 40) {
        return Err(Error::BadRequest(
            "objects over 1 TiB are not benchmarked".into(),
        ));
    }
    let s3 = Arc::new(S3::new(opts)?);
    make_bucket(&s3, &opts.bucket).await?;
    let started_at = time::OffsetDateTime::now_utc();
    let prefix = opts.prefix.clone().unwrap_or_else(|| {
        format!(
            "oedbench-{}-{}",
            started_at.unix_timestamp(),
            std::process::id()
        )
    });
    #[allow(
        clippy::cast_possible_truncation,
        reason = "checked to be at most 1 TiB above"
    )]
    let pool = random_bytes((opts.object_bytes + WINDOW) as usize);
    let (peak_inputs, peaks, tpp) = peaks_of(opts);
    let live = Arc::new(Live::new());
    let started = Instant::now();
    let stop = tokio_util::sync::CancellationToken::new();
    let sampler = tokio::spawn(sample(
        s3.clone(),
        opts.metrics.clone(),
        live.clone(),
        started,
        opts.sample_every,
        stop.clone(),
    ));
    let mut results = Vec::new();
    let mut first = true;
    for rep in 1..=opts.reps.max(1) {
        let rep_prefix = format!("{prefix}/r{rep}");
        // The objects there are to read: what this repetition's write wrote, or those
        // an earlier run kept.
        let mut objects = opts.objects;
        for &kind in &opts.phases {
            if !first && let Some(cmd) = &opts.between_phases {
                between(cmd)?;
            }
            first = false;
            live.set(Some(kind), rep);
            let ticker = opts.progress.then(|| {
                let count = opts.duration.is_none().then_some(opts.objects);
                progress_line(live.clone(), kind, rep, count)
            });
            let start_s = started.elapsed().as_secs_f64();
            let (m, phase_objects, energy) =
                metered_phase(&s3, opts, &live, (kind, &rep_prefix), objects, &pool).await;
            objects = phase_objects;
            let end_s = started.elapsed().as_secs_f64();
            if let Some(t) = ticker {
                t.abort();
                eprintln!();
            }
            live.set(None, rep);
            let peak = peaks
                .iter()
                .find(|p| p.phase == kind)
                .map_or_else(|| peak_inputs.oed(kind), |p| p.peak.clone());
            let r = PhaseResult {
                start_s,
                end_s,
                ..PhaseResult::new(kind, rep, m, &peak, &tpp, energy)
            };
            progress(&format!(
                "{} {rep}: {:.1} MiB/s, {} errors{}",
                report::kind_name(kind),
                r.mib_s,
                r.errors,
                r.pct_peak
                    .map_or_else(String::new, |p| format!(", {p:.1}% of peak"))
            ));
            results.push(r);
        }
        // Objects this run did not write (a named prefix read again) stay.
        if !opts.keep && opts.phases.contains(&Kind::Write) {
            let failed = delete_all(&s3, opts, &rep_prefix, objects).await;
            if failed > 0 {
                progress(&format!(
                    "{failed} objects of repetition {rep} could not be deleted"
                ));
            }
        }
    }
    stop.cancel();
    let timeline = sampler.await.unwrap_or_default();
    Ok(assemble(
        opts,
        started_at,
        peak_inputs,
        (peaks, tpp),
        results,
        timeline,
    ))
}

/// The run's report from its parts.
fn assemble(
    opts: &BenchOptions,
    started_at: time::OffsetDateTime,
    peak_inputs: PeakInputs,
    (peaks, tpp): (Vec<PhasePeak>, peak::Peak),
    results: Vec<PhaseResult>,
    timeline: Vec<Sample>,
) -> Run {
    let energy_source = run_energy_source(&results);
    let summary = report::summarise(&results);
    Run {
        tool: format!("oedd bench {}", env!("CARGO_PKG_VERSION")),
        started: started_at
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
        endpoints: opts.endpoints.clone(),
        bucket: opts.bucket.clone(),
        object_bytes: opts.object_bytes,
        objects: opts.objects,
        duration_s: opts.duration.map(|d| d.as_secs_f64()),
        clients: opts.clients,
        signing: opts.signing.name().to_owned(),
        reps: opts.reps.max(1),
        operation: opts
            .phases
            .contains(&Kind::Op)
            .then(|| opts.operation.clone()),
        peak_inputs,
        peaks,
        tpp,
        energy_source,
        meters: opts.metrics.clone(),
        between_phases: opts.between_phases.clone(),
        environment: opts.environment.clone(),
        phases: results,
        summary,
        timeline,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_binary_and_decimal_units() {
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("100MB"), Ok(100_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("0").is_err());
        assert!(parse_size("4 furlongs").is_err());
        assert!(parse_size("MiB").is_err());
    }

    #[test]
    fn durations_in_seconds_minutes_and_hours() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_mins(2)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_mins(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("3 fortnights").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn phases_start_with_a_write() {
        assert_eq!(
            parse_phases("write,read,op", false),
            Ok(vec![Kind::Write, Kind::Read, Kind::Op])
        );
        assert!(parse_phases("read", false).is_err());
        assert_eq!(parse_phases("read", true), Ok(vec![Kind::Read]));
        assert!(parse_phases("write,scan", false).is_err());
    }

    #[test]
    fn objects_start_at_distinct_offsets() {
        let offs: std::collections::HashSet<u64> = (0..100_000).map(offset).collect();
        assert_eq!(offs.len(), 100_000);
        assert!((0..100_000).all(|i| offset(i) < WINDOW));
    }
}
