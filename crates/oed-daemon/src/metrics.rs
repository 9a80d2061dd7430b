//! The drive's Prometheus metrics: one [`Registry`] per drive holding the meter's power,
//! energy, host, disk, network and process collectors, the request and traffic counters,
//! and the drive's state (capacity, objects, heal backlog, degraded I/O), which is read at
//! scrape time. [`router`] serves them as `GET /metrics` on the metrics listener; the
//! [`metered`] middleware counts every S3 and peer request by operation and status.

// Prometheus samples are f64; counts past 2^52 lose their last digits there anyway.
#![allow(clippy::cast_precision_loss)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use oed_meter::process::{AtScrape, ProcessCollector, ScrapeTime, advance};
use oed_meter::traffic::Traffic;
use prometheus::core::Collector;
use prometheus::{Counter, CounterVec, Gauge, GaugeVec, Opts, Registry, TextEncoder};

use oed_cluster::Cluster;
use oed_model::error::Result;
use oed_peer::{PeerOp, PeerState};
use oed_s3::OpName;
use oed_store::Store;

/// A drive's registry and the handles the request path records into.
#[derive(Clone)]
pub struct DriveMetrics {
    /// Everything `/metrics` shows.
    pub registry: Registry,
    /// Request and traffic counters.
    pub traffic: Traffic,
}

impl std::fmt::Debug for DriveMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriveMetrics").finish_non_exhaustive()
    }
}

impl DriveMetrics {
    /// A registry with the traffic counters and the process collector.
    ///
    /// # Errors
    /// [`Error::Config`] if registration fails (a name taken twice: a bug).
    pub fn new() -> Result<Self> {
        let registry = Registry::new();
        let traffic = Traffic::new(&registry)?;
        let process = ProcessCollector::new(oed_meter::Roots::default())?;
        registry.register(Box::new(AtScrape(process)))?;
        Ok(Self { registry, traffic })
    }

    /// Adds the drive state collector (read at scrape time) and the store's shard-write
    /// timings.
    ///
    /// # Errors
    /// As [`DriveMetrics::new`].
    pub fn watch(
        &self,
        store: Store,
        cluster: Arc<Cluster>,
        peer: Arc<PeerState>,
        drive_id: &str,
    ) -> Result<()> {
        self.registry
            .register(Box::new(store.write_phases().clone()))?;
        let state = StateCollector::new(store, cluster, peer, drive_id)?;
        self.registry.register(Box::new(AtScrape(state)))?;
        Ok(())
    }

    /// The metrics in Prometheus' text format.
    #[must_use]
    pub fn render(&self) -> String {
        TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_else(|e| format!("# encoding failed: {e}\n"))
    }
}

/// `GET /metrics`; anything else is 404.
pub fn router(metrics: DriveMetrics) -> axum::Router {
    axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(|State(m): State<DriveMetrics>| async move {
                let started = Instant::now();
                let body = m.render();
                m.traffic
                    .request("metrics", "scrape", 200, started.elapsed().as_secs_f64());
                (
                    [(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                    )],
                    body,
                )
            }),
        )
        .fallback(|| async {
            (StatusCode::NOT_FOUND, "only GET /metrics is served here\n").into_response()
        })
        .with_state(metrics)
}

/// Counts each request in `oed_requests_total` and `oed_request_duration_seconds` by API
/// and operation once its response head is ready. A peer operation is named by the route
/// it matched ([`PeerOp`]), an S3 one by `s3s` ([`OpName`]); a request neither names
/// (unknown routes, S3 requests refused before `s3s` resolved them) counts as `Other`.
pub async fn metered(State(traffic): State<Traffic>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let peer = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| PeerOp::of(req.method(), p.as_str()));
    let console = req.uri().path().starts_with("/_oed/console/");
    let peer = peer.or_else(|| req.uri().path().starts_with("/_oed/").then_some(None));
    let s3 = OpName::default();
    req.extensions_mut().insert(s3.clone());
    let resp = next.run(req).await;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        // A raw shard upload: counted with its outcome once it is stored or refused.
        return resp;
    }
    let (api, op) = match peer {
        // The console names its own requests, and S3 those it passes on.
        _ if console => ("console", s3.get().unwrap_or("Other")),
        Some(op) => ("peer", op.map_or("Other", PeerOp::name)),
        None => ("s3", s3.get().unwrap_or("Other")),
    };
    traffic.request(
        api,
        op,
        resp.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    resp
}

/// The drive's state, read when Prometheus scrapes.
struct StateCollector {
    store: Store,
    cluster: Arc<Cluster>,
    peer: Arc<PeerState>,
    capacity: GaugeVec,
    objects: Gauge,
    heal_backlog: Gauge,
    drives: Gauge,
    connections: Gauge,
    replay_nonces: Gauge,
    clock_offset: Gauge,
    epoch: Gauge,
    buffer: GaugeVec,
    info: GaugeVec,
    /// Requests refused with `SlowDown`, by reason.
    slowdown: CounterVec,
    /// Bytes hashed for MD5 `ETag`s, by streams hashed together.
    md5: CounterVec,
    /// S3 requests refused for want of a right, by operation.
    denied: CounterVec,
    /// Counters kept as atomics on the hot path, copied here on scrape.
    counters: [Counter; 15],
}

impl StateCollector {
    fn new(
        store: Store,
        cluster: Arc<Cluster>,
        peer: Arc<PeerState>,
        drive_id: &str,
    ) -> prometheus::Result<Self> {
        let info = GaugeVec::new(
            Opts::new(
                "oed_drive_info",
                "Always 1; the drive's id, cluster and version as labels.",
            ),
            &["drive", "cluster", "version"],
        )?;
        info.with_label_values(&[
            drive_id,
            &cluster.map().cluster_id,
            env!("CARGO_PKG_VERSION"),
        ])
        .set(1.0);
        Ok(Self {
            capacity: GaugeVec::new(
                Opts::new(
                    "oed_filesystem_bytes",
                    "The data file system: size, bytes free to the daemon (freed shard files kept for reuse included), of them the bytes of those files (pooled), and the configured reserve (writes stop below it).",
                ),
                &["what"],
            )?,
            objects: Gauge::with_opts(Opts::new(
                "oed_shards",
                "Shards (object records) stored on this drive.",
            ))?,
            heal_backlog: Gauge::with_opts(Opts::new(
                "oed_heal_backlog",
                "Shards queued for heal on this drive (missed by a degraded write or failing their CRC32C).",
            ))?,
            drives: Gauge::with_opts(Opts::new(
                "oed_cluster_drives",
                "Drives in this drive's cluster map.",
            ))?,
            connections: Gauge::with_opts(Opts::new(
                "oed_http_connections",
                "Connections open on this drive's S3 and peer listener (at most max_connections).",
            ))?,
            replay_nonces: Gauge::with_opts(Opts::new(
                "oed_peer_replay_nonces",
                "Nonces of peer requests this drive took in the last clock_skew_seconds and remembers, so that none is taken twice (at most replay_cache_entries; full, new requests get 503 SlowDown).",
            ))?,
            clock_offset: Gauge::with_opts(Opts::new(
                "oed_clock_offset_seconds",
                "This drive's clock minus the other drives' (the median of what their answers of the last two minutes tell; 0 until one answers). At 1 s or more either way, the version ids of the writes it coordinates are made from the others' time, and the log says so.",
            ))?,
            epoch: Gauge::with_opts(Opts::new(
                "oed_cluster_map_epoch",
                "The epoch of the cluster map this drive runs; drives of one cluster should all show the same.",
            ))?,
            buffer: GaugeVec::new(
                Opts::new(
                    "oed_coordinator_buffer_bytes",
                    "Memory for object data of the requests this drive coordinates: the limit (coordinator_buffer_bytes) and what requests hold now.",
                ),
                &["what"],
            )?,
            info,
            slowdown: CounterVec::new(
                Opts::new(
                    "oed_slowdown_total",
                    "Requests this drive refused with 503 SlowDown, by reason: memory_wait (no share of coordinator_buffer_bytes came free within coordinator_wait_seconds), client_waiting (the client already had max_waiting_per_client requests waiting).",
                ),
                &["reason"],
            )?,
            md5: md5_counter()?,
            denied: CounterVec::new(
                Opts::new(
                    "oed_s3_denied_total",
                    "S3 requests this drive refused with 403 AccessDenied because the key (or an unsigned request) lacks the right the operation needs in its bucket (docs/access.md), by operation.",
                ),
                &["op"],
            )?,
            counters: hot_counters()?,
            store,
            cluster,
            peer,
        })
    }

    fn all(&self) -> Vec<&dyn Collector> {
        let mut v: Vec<&dyn Collector> = vec![
            &self.capacity,
            &self.objects,
            &self.heal_backlog,
            &self.drives,
            &self.connections,
            &self.replay_nonces,
            &self.clock_offset,
            &self.epoch,
            &self.buffer,
            &self.info,
            &self.slowdown,
            &self.md5,
            &self.denied,
        ];
        v.extend(self.counters.iter().map(|c| c as &dyn Collector));
        v
    }

    fn refresh(&self) {
        match self.store.capacity() {
            Ok(c) => {
                for (what, v) in [
                    ("size", c.capacity_bytes),
                    ("free", c.free_bytes),
                    ("reserve", c.reserve_bytes),
                    ("pooled", self.store.shard_file_pool_bytes()),
                ] {
                    self.capacity.with_label_values(&[what]).set(v as f64);
                }
            }
            Err(e) => tracing::debug!(error = %e, "capacity for metrics"),
        }
        self.objects.set(self.store.object_count() as f64);
        self.heal_backlog.set(self.store.heal_backlog() as f64);
        self.drives.set(self.cluster.map().drives.len() as f64);
        self.epoch.set(self.cluster.map().epoch as f64);
        let budget = &self.cluster.budget;
        for (what, v) in [
            ("limit", budget.limit_bytes()),
            ("held", budget.held_bytes()),
        ] {
            self.buffer.with_label_values(&[what]).set(v as f64);
        }
        for (why, n) in oed_cluster::budget::Refusal::ALL
            .iter()
            .zip(budget.refusals())
        {
            advance(&self.slowdown.with_label_values(&[why.label()]), n as f64);
        }
        for (streams, bytes) in oed_cluster::md5::hashed_bytes_by_streams()
            .into_iter()
            .enumerate()
            .filter(|&(_, b)| b > 0)
        {
            advance(
                &self.md5.with_label_values(&[&streams.to_string()]),
                bytes as f64,
            );
        }
        for (op, n) in self.cluster.stats.denied_by_op() {
            advance(&self.denied.with_label_values(&[op.as_str()]), n as f64);
        }
        let stats = &self.cluster.stats;
        let now = [
            stats.degraded_writes.load(Ordering::Relaxed),
            stats.degraded_stripes.load(Ordering::Relaxed),
            stats.shard_failures.load(Ordering::Relaxed),
            self.peer.auth_failures.load(Ordering::Relaxed),
            self.store.checksum_failures(),
            self.store.ops_cancelled(),
            self.peer.epoch_mismatches.load(Ordering::Relaxed),
            stats.connections_refused.load(Ordering::Relaxed),
            stats.tls_handshake_failures.load(Ordering::Relaxed),
            self.store.shard_files_reused(),
            self.store.directory_syncs(),
            self.store.uploads_spliced(),
            self.store.uploads_received_direct(),
            self.peer.raw_connections_kept.load(Ordering::Relaxed),
            self.peer.framed_reads.load(Ordering::Relaxed),
        ];
        self.connections
            .set(stats.connections_open.load(Ordering::Relaxed) as f64);
        self.replay_nonces.set(self.peer.replay.len() as f64);
        self.clock_offset
            .set(self.cluster.clock_offset_ms().unwrap_or(0) as f64 / 1000.0);
        for (c, n) in self.counters.iter().zip(now) {
            advance(c, n as f64);
        }
    }
}

/// The counters kept as atomics on the hot path ([`StateCollector::refresh`] copies them,
/// in this order).
fn hot_counters() -> prometheus::Result<[Counter; 15]> {
    let counter = |n: &str, h: &str| Counter::with_opts(Opts::new(n, h));
    Ok([
        counter(
            "oed_degraded_writes_total",
            "Writes this drive coordinated that were acknowledged with shards missing (x-oed-degraded).",
        )?,
        counter(
            "oed_degraded_read_stripes_total",
            "Stripes this drive served from parity because a data shard could not be read.",
        )?,
        counter(
            "oed_peer_shard_failures_total",
            "Shard reads or writes to a drive that failed or timed out while this drive coordinated.",
        )?,
        counter(
            "oed_peer_auth_failures_total",
            "Peer requests to this drive refused for authentication.",
        )?,
        counter(
            "oed_shard_checksum_failures_total",
            "Shards on this drive found failing their CRC32C check (by reads now, by the scrubber when it runs); each is queued for heal.",
        )?,
        counter(
            "oed_ops_cancelled_total",
            "Near-data operations this drive stopped because their caller went away.",
        )?,
        counter(
            "oed_map_epoch_mismatch_total",
            "Peer requests to this drive from drives that run another cluster map epoch (their shard writes are refused).",
        )?,
        counter(
            "oed_http_connections_refused_total",
            "Connections this drive's S3 and peer listener answered 503 and closed because max_connections were open.",
        )?,
        counter(
            "oed_tls_handshake_failures_total",
            "Connections to this drive's TLS listener closed because their handshake failed (an untrusted or wrong certificate, not TLS at all) or did not finish within http_header_timeout_seconds.",
        )?,
        counter(
            "oed_shard_files_reused_total",
            "Shard files written by overwriting a freed one (of a version replaced or deleted) instead of creating a file (shard_file_pool_bytes).",
        )?,
        counter(
            "oed_shard_directory_syncs_total",
            "fsyncs of shard file directories this drive ran; one serves every upload that named a file in the directory before it began, so per shard written (oed_shard_write_seconds_count{phase=\"place\"}) it falls as uploads run together.",
        )?,
        counter(
            "oed_shard_uploads_spliced_total",
            "Shard uploads from other drives that this drive received with splice, from the socket into the shard file (raw uploads over plain TCP, shards with a file of their own, direct_io off), stored or refused.",
        )?,
        counter(
            "oed_shard_uploads_direct_total",
            "Shard uploads from other drives that this drive read from their connection straight into the aligned buffer of a shard file written with O_DIRECT (raw uploads, shards with a file of their own, direct_io on), stored or refused.",
        )?,
        counter(
            "oed_raw_upload_connections_kept_total",
            "Raw shard uploads after which this drive served the sending drive's next request on the same connection (x-oed-raw-keep) instead of closing it.",
        )?,
        counter(
            "oed_shard_reads_framed_total",
            "Shard reads from other drives that this drive answered with the shard file's frames sent from the file with sendfile (Upgrade: oed-frames), the reader checking each chunk's CRC32C; the others it read, checked and sent as a body.",
        )?,
    ])
}

/// `oed_md5_bytes_total{streams}`.
fn md5_counter() -> prometheus::Result<CounterVec> {
    CounterVec::new(
        Opts::new(
            "oed_md5_bytes_total",
            "Bytes of the uploads this drive coordinated that it hashed for MD5 ETags, by how many uploads were hashed together (streams, 1 to 16; more in one call cost less CPU per byte).",
        ),
        &["streams"],
    )
}

impl ScrapeTime for StateCollector {
    fn parts(&self) -> Vec<&dyn Collector> {
        self.all()
    }

    fn refresh(&self) {
        StateCollector::refresh(self);
    }
}
