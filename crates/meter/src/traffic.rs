//! The daemon's own counters: requests by API, operation and status code; bytes, operations,
//! latency and request sizes by traffic class; sequential against random shard reads; and
//! the erasure coding work. The daemon calls these from its request path; they are plain
//! atomic counters and histograms, cheap enough for every request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use prometheus::{CounterVec, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

use crate::Result;

/// Who a request served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// S3 clients.
    Client,
    /// Other drives' coordinators (shard reads and writes).
    Peer,
    /// Rebuilding missing shards.
    Heal,
    /// Verifying stored shards.
    Scrub,
    /// Near-data compute.
    Compute,
}

impl Class {
    /// Every class, for pre-creating series.
    pub const ALL: [Self; 5] = [
        Self::Client,
        Self::Peer,
        Self::Heal,
        Self::Scrub,
        Self::Compute,
    ];

    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Peer => "peer",
            Self::Heal => "heal",
            Self::Scrub => "scrub",
            Self::Compute => "compute",
        }
    }
}

/// Which way the bytes of a request went, seen from the drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Received: written to the drive (PUT bodies).
    In,
    /// Sent: read from the drive (GET bodies).
    Out,
}

impl Direction {
    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::In => "in",
            Self::Out => "out",
        }
    }
}

/// Erasure coding work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EcOp {
    /// Computing parity.
    Encode,
    /// Rebuilding data from parity.
    Decode,
}

/// The request and traffic metrics.
#[derive(Debug, Clone)]
pub struct Traffic {
    bytes: IntCounterVec,
    operations: IntCounterVec,
    duration: HistogramVec,
    size: HistogramVec,
    shard_reads: IntCounterVec,
    requests: IntCounterVec,
    request_duration: HistogramVec,
    ec_bytes: CounterVec,
    ec_seconds: CounterVec,
    /// Requests answered, whatever their API, operation and code.
    answered: Arc<AtomicU64>,
}

/// The totals [`crate::history::History`] makes rates of: S3 clients' body bytes each
/// way and requests answered, since the daemon started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Bytes S3 clients sent (PUT bodies).
    pub client_in: u64,
    /// Bytes sent to S3 clients (GET bodies).
    pub client_out: u64,
    /// Requests answered.
    pub requests: u64,
}

const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// 1 KiB to 1 GiB by powers of 4.
const SIZE_BUCKETS: [f64; 11] = [
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
    268_435_456.0,
    1_073_741_824.0,
];

impl Traffic {
    /// Registers the metrics on `registry`, with every class and direction present at 0.
    ///
    /// # Errors
    /// [`crate::Error::Metrics`] if a name is already registered.
    pub fn new(registry: &Registry) -> Result<Self> {
        let cd = ["class", "direction"];
        let t = Self {
            bytes: IntCounterVec::new(
                Opts::new("oed_traffic_bytes_total", "Body bytes of requests the drive served, by traffic class and direction (in = received/written, out = sent/read)."),
                &cd,
            )?,
            operations: IntCounterVec::new(
                Opts::new("oed_traffic_operations_total", "Requests with a body the drive served, by traffic class and direction."),
                &cd,
            )?,
            duration: HistogramVec::new(
                HistogramOpts::new("oed_traffic_duration_seconds", "Time from a request's arrival to the end of its body, by traffic class and direction.")
                    .buckets(LATENCY_BUCKETS.to_vec()),
                &cd,
            )?,
            size: HistogramVec::new(
                HistogramOpts::new("oed_traffic_request_size_bytes", "Body size of each request, by traffic class and direction.")
                    .buckets(SIZE_BUCKETS.to_vec()),
                &cd,
            )?,
            shard_reads: IntCounterVec::new(
                Opts::new("oed_shard_reads_total", "Shard reads from this drive's disk by access pattern: sequential starts at the shard's beginning, random anywhere else."),
                &["pattern"],
            )?,
            requests: IntCounterVec::new(
                Opts::new("oed_requests_total", "Requests answered, by API (s3, peer, metrics), operation and HTTP status code."),
                &["api", "op", "code"],
            )?,
            request_duration: HistogramVec::new(
                HistogramOpts::new("oed_request_duration_seconds", "Time to answer a request (to the response head; bodies are in oed_traffic_duration_seconds), by API and operation.")
                    .buckets(LATENCY_BUCKETS.to_vec()),
                &["api", "op"],
            )?,
            ec_bytes: CounterVec::new(
                Opts::new("oed_ec_bytes_total", "Data bytes erasure coded by this drive as coordinator, by op (encode or decode)."),
                &["op"],
            )?,
            ec_seconds: CounterVec::new(
                Opts::new("oed_ec_seconds_total", "CPU time spent erasure coding, by op."),
                &["op"],
            )?,
            answered: Arc::default(),
        };
        for c in [
            Box::new(t.bytes.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(t.operations.clone()),
            Box::new(t.duration.clone()),
            Box::new(t.size.clone()),
            Box::new(t.shard_reads.clone()),
            Box::new(t.requests.clone()),
            Box::new(t.request_duration.clone()),
            Box::new(t.ec_bytes.clone()),
            Box::new(t.ec_seconds.clone()),
        ] {
            registry.register(c)?;
        }
        for class in Class::ALL {
            for dir in [Direction::In, Direction::Out] {
                let l = [class.as_str(), dir.as_str()];
                t.bytes.with_label_values(&l);
                t.operations.with_label_values(&l);
            }
        }
        for p in ["sequential", "random"] {
            t.shard_reads.with_label_values(&[p]);
        }
        for op in ["encode", "decode"] {
            t.ec_bytes.with_label_values(&[op]);
            t.ec_seconds.with_label_values(&[op]);
        }
        Ok(t)
    }

    /// One request's body: `bytes` moved in `seconds`.
    pub fn body(&self, class: Class, dir: Direction, bytes: u64, seconds: f64) {
        let l = [class.as_str(), dir.as_str()];
        self.bytes.with_label_values(&l).inc_by(bytes);
        self.operations.with_label_values(&l).inc();
        self.duration.with_label_values(&l).observe(seconds);
        self.size.with_label_values(&l).observe(bytes as f64);
    }

    /// One answered request.
    pub fn request(&self, api: &str, op: &str, code: u16, seconds: f64) {
        self.answered.fetch_add(1, Ordering::Relaxed);
        let code = code.to_string();
        self.requests
            .with_label_values(&[api, op, code.as_str()])
            .inc();
        self.request_duration
            .with_label_values(&[api, op])
            .observe(seconds);
    }

    /// The totals so far.
    #[must_use]
    pub fn totals(&self) -> Totals {
        let bytes = |d: Direction| {
            self.bytes
                .with_label_values(&[Class::Client.as_str(), d.as_str()])
                .get()
        };
        Totals {
            client_in: bytes(Direction::In),
            client_out: bytes(Direction::Out),
            requests: self.answered.load(Ordering::Relaxed),
        }
    }

    /// One shard read from disk starting at stripe `first` of the shard.
    pub fn shard_read(&self, first: u64) {
        let p = if first == 0 { "sequential" } else { "random" };
        self.shard_reads.with_label_values(&[p]).inc();
    }

    /// Erasure coding of `bytes` data bytes that took `seconds`.
    pub fn ec(&self, op: EcOp, bytes: u64, seconds: f64) {
        let op = match op {
            EcOp::Encode => "encode",
            EcOp::Decode => "decode",
        };
        self.ec_bytes.with_label_values(&[op]).inc_by(bytes as f64);
        self.ec_seconds.with_label_values(&[op]).inc_by(seconds);
    }
}

/// Counts the bytes of one request body as they go and records them, with the time
/// since it was made, when dropped: at the end of the body or when the client goes away.
#[derive(Debug)]
pub struct BodyMeter {
    traffic: Traffic,
    class: Class,
    direction: Direction,
    started: Instant,
    bytes: u64,
}

impl BodyMeter {
    /// Starts counting.
    #[must_use]
    pub fn new(traffic: Traffic, class: Class, direction: Direction) -> Self {
        Self {
            traffic,
            class,
            direction,
            started: Instant::now(),
            bytes: 0,
        }
    }

    /// `n` more bytes.
    pub fn add(&mut self, n: usize) {
        self.bytes += n as u64;
    }
}

impl Drop for BodyMeter {
    fn drop(&mut self) {
        self.traffic.body(
            self.class,
            self.direction,
            self.bytes,
            self.started.elapsed().as_secs_f64(),
        );
    }
}
