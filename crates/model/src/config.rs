//! The daemon's configuration: one [`Config`] loaded from a TOML file, then overridden by
//! `OED_*` environment variables, then by command-line flags. Every field has a default
//! and a doc line; `oedd config-defaults` prints them all as TOML (those without a default
//! commented out). Secrets are never taken
//! from flags: the cluster secret comes from `OED_CLUSTER_SECRET` or from the file named by
//! `cluster_secret_file`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The default of `raw_shard_upload_min_bytes`, the smallest shard file a drive sends as a
/// raw upload ([`oed_peer::RAW_UPLOAD`]); smaller ones go as request bodies on the pool's
/// kept-alive connections. A raw upload saves a copy of its bytes and costs an upgrade
/// (and, when no kept connection is free, a connection of its own): the receiving drive
/// spends less CPU on raw uploads than on bodies from shards of one 256 KiB chunk up,
/// and about as much below (`docs/results.md`, "Raw uploads").
pub const RAW_UPLOAD_MIN_BYTES: u64 = 256 * 1024;

/// The most a peer connection's read buffer grows to. A chunk of a shard arrives in
/// pieces of at most this size, each sent on as it is. A connection idling in the pool
/// keeps 64 KiB instead of hyper's default of about 400 KiB; the price is more, smaller
/// pieces per chunk, a few percent more CPU per GiB read through a coordinator
/// (`docs/results.md`, "Memory").
pub const READ_BUFFER_MAX: usize = 64 * 1024;

/// When the store forces data to the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    /// fsync every shard file and its directory, and sync every metadata write, before a
    /// write is acknowledged. Nothing acknowledged is lost on power failure.
    Always,
    /// Never fsync. Only for throwaway data (benchmarks of the software path, tests).
    Never,
}

/// Everything `oedd serve` can be told. Defaults suit a drive with 1-2 GB of RAM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent switches of a settings file, each documented on its own"
)]
pub struct Config {
    /// This drive's id, as the cluster map names it. Default: "drive-1".
    pub drive_id: String,
    /// Directory for everything the drive stores: RocksDB in `meta/`, shard files in
    /// `shards/` (uploads in progress there too, in their numbered files), freed files in
    /// `pool/`. Default: "/var/lib/oed".
    pub data_dir: PathBuf,
    /// Address to serve on (peer API now, S3 too later). Default: "0.0.0.0:9400".
    pub listen: SocketAddr,
    /// Path of the cluster map (TOML). Default: none (a single drive).
    pub cluster_map: Option<PathBuf>,
    /// File holding the cluster secret (at least 16 bytes; surrounding white space is
    /// ignored). `OED_CLUSTER_SECRET` takes precedence. Default: none.
    pub cluster_secret_file: Option<PathBuf>,
    /// "always" or "never"; see [`FsyncPolicy`]. Default: "always".
    pub fsync: FsyncPolicy,
    /// Write shard files with `O_DIRECT` (whole 4 KiB blocks from an aligned buffer, past
    /// the page cache; the last partial block and the header through the page cache);
    /// raw uploads from other drives are read from their connection straight into that
    /// buffer. Where the file system refuses `O_DIRECT`, the drive writes through the
    /// page cache as without it. `false` writes through the page cache, where objects
    /// read soon after they are written are still found. Default: true (docs/drive.md,
    /// "Direct I/O").
    pub direct_io: bool,
    /// Send shard uploads to other drives as raw uploads: `PUT shard` upgraded to a
    /// connection of its own, whose bytes the receiving drive reads straight into the
    /// shard file's aligned buffer (`direct_io`) or splices from the socket into the file,
    /// one copy fewer than a request body (docs/peer-api.md, "Raw uploads"). Over TLS,
    /// and to drives of earlier versions, uploads go as request bodies either way.
    /// Default: true.
    pub raw_shard_uploads: bool,
    /// The smallest shard file sent as a raw upload; smaller ones go as request bodies on
    /// kept-alive connections (a raw upload's upgrade costs more than the copy it saves
    /// on a small shard). 0: every shard. Default: 262144 (docs/drive.md, "Shards from
    /// other drives: raw uploads").
    pub raw_shard_upload_min_bytes: u64,
    /// Ask other drives for the shards this drive reads as framed reads: `GET shard`
    /// upgraded to a connection of its own, on which the drive holding the shard sends
    /// the shard file's frames (each chunk with its CRC32C) from the page cache with
    /// `sendfile`, and this drive checks each chunk's CRC32C as it arrives (docs/peer-api.md,
    /// "Framed reads"). Over TLS, for shards kept inline, and from drives of earlier
    /// versions, the chunks come as a body, checked by the drive that sends them. Default:
    /// true.
    pub framed_shard_reads: bool,
    /// Send the frames of a framed read another drive asks for with `sendfile`, from the
    /// page cache straight to the socket; false: read into the daemon, then written to
    /// the socket (one read and one write per chunk). Default: true (docs/drive.md,
    /// "Shards to other drives: framed reads").
    pub shard_sendfile: bool,
    /// Whether shard uploads between drives go unsealed, as versions before the seal
    /// send them, and are taken so: for a rolling upgrade from such a version only, set
    /// on the upgraded drives until every drive runs this one, then removed. Unsealed, an
    /// upload's bytes and record tail are not authenticated: anyone on the drives'
    /// network can change them on the way (docs/peer-api.md, "Sealed shard uploads").
    /// Default: false.
    pub legacy_peer_requests: bool,
    /// Nonces of peer requests remembered at most, so that none is taken twice within
    /// `clock_skew_seconds` (at most 26 bytes each); full, a drive answers new requests
    /// that change something with 503 `SlowDown`. Default: 524288 (docs/peer-api.md,
    /// "Replays").
    pub replay_cache_entries: usize,
    /// Requests served at once; more wait for a slot. Default: 64.
    pub max_concurrent_requests: usize,
    /// Largest shard file accepted, in bytes. Default: 1 GiB.
    pub max_shard_bytes: u64,
    /// Largest body of any other request, in bytes. Default: 64 KiB.
    pub max_request_body_bytes: usize,
    /// Shard files up to this size live inside RocksDB instead of their own file. 0 turns
    /// inlining off. Default: 4096.
    pub inline_threshold_bytes: u64,
    /// Freed shard files (of versions replaced or deleted) kept for reuse, in bytes: a
    /// new upload overwrites one instead of creating a file, so the file system allocates
    /// and frees no inode per write. Counted as free space, and given back at once when a
    /// write would find too little. 0 turns it off. Default: 256 MiB (docs/drive.md,
    /// "Reused shard files").
    pub shard_file_pool_bytes: u64,
    /// Free space kept back: writes that would leave less get "insufficient storage" while
    /// reads and deletes go on. Default: 256 MiB.
    pub reserve_bytes: u64,
    /// RocksDB block cache, in bytes. Default: 32 MiB.
    pub rocksdb_block_cache_bytes: usize,
    /// RocksDB memtable size, in bytes; at most two exist at once. Default: 8 MiB.
    pub rocksdb_write_buffer_bytes: usize,
    /// Largest accepted difference between a peer request's timestamp and this drive's
    /// clock, in seconds; also how far ahead of this drive's clock a version id may have
    /// been made (one made later is refused, and supersedes nothing when stored).
    /// Default: 300.
    pub clock_skew_seconds: u64,
    /// On SIGTERM, how long requests in flight may take to finish, in seconds. Default: 10.
    pub shutdown_grace_seconds: u64,
    /// The S3 access key clients sign with. The S3 API is served only when its secret is
    /// set: `OED_S3_SECRET_KEY`, or the file named by `s3_secret_key_file`. Default: "oed".
    pub s3_access_key: String,
    /// File holding the S3 secret key (surrounding white space is ignored). Default: none.
    pub s3_secret_key_file: Option<PathBuf>,
    /// The region the S3 API answers as: `GetBucketLocation` names it, and requests signed
    /// for another region are refused, as S3 refuses them. Default: "us-east-1".
    pub region: String,
    /// How long another drive may take to accept or deliver one chunk before the
    /// coordinator goes on without it (parity covers it), in seconds. Default: 10.
    pub peer_timeout_seconds: u64,
    /// How long a connection to the drive's listeners (S3 and peer, metrics) may take to
    /// send a request's headers, counted from when it opened or its last answer was sent:
    /// so also the longest it may idle between requests. A connection that does not is
    /// closed. In seconds. Default: 20.
    pub http_header_timeout_seconds: u64,
    /// The slowest a client may send a PUT's or part's body, in bytes per second, over
    /// every `http_header_timeout_seconds` of waiting for it; a slower one is answered
    /// `400 RequestTimeout`. 0: no floor. Default: 1024.
    pub min_body_bytes_per_second: u64,
    /// The most connections the S3 and peer listener keeps open at once; a connection
    /// beyond it is answered `503` with `Retry-After: 1` and closed. The metrics listener
    /// keeps at most 64. Default: 1024.
    pub max_connections: usize,
    /// The most each connection to the S3 and peer listener buffers of what it reads (a
    /// request's head, and its body in pieces of up to this size). Smaller takes memory
    /// off a drive with many clients at some CPU per byte received; at least 16 KiB (a
    /// request's head must fit), at most 1 MiB. Default: 64 KiB.
    pub connection_read_buffer_bytes: usize,
    /// PEM file with the certificate chain the S3 and peer listener serves over TLS
    /// (the drive's certificate first). With `tls_key_file`, the listener speaks only
    /// TLS; both are read again on SIGHUP. Default: none (plain HTTP).
    pub tls_cert_file: Option<PathBuf>,
    /// PEM file with the private key of `tls_cert_file`. Default: none.
    pub tls_key_file: Option<PathBuf>,
    /// PEM file with the cluster CA: the certificates the drive trusts when it connects
    /// to other drives over TLS (a cluster map with `tls = true`). The system's roots are
    /// never trusted for this. Default: none.
    pub tls_ca_file: Option<PathBuf>,
    /// `ETag`s of single-part uploads are MD5 digests of the body, as S3 defines them and
    /// as some clients check. `false` uses a digest of the chunk CRC32Cs the drives compute
    /// anyway, which saves an MD5 pass over every byte (about a third of the CPU a PUT
    /// costs). A Content-MD5 sent by the client is checked either way. Default: true.
    pub md5_etags: bool,
    /// The MD5 kernel PUTs hash in: `auto` (the widest this CPU runs), `scalar`, `avx2`,
    /// `avx512` or `neon`. One this CPU does not run is refused at start. Default: auto.
    pub md5_kernel: String,
    /// How long the hashing thread holds a piece at most, waiting for more streams to
    /// fill its lanes, in milliseconds (0 to 1000; 0 never waits). It stops holding
    /// within 4 ms of an upload's starting to wait for a digest, and after two holds in
    /// a row that no other piece joined, so the hold delays an upload by 4 ms at most:
    /// set it to about the time an upload takes to bring its next stripe. Default: 50.
    pub md5_gather_ms: u64,
    /// Memory for the object data of the GETs and PUTs this drive coordinates, in bytes.
    /// Each holds about two stripes' worth while it runs (a 4 MiB GET of a 4+2 profile
    /// with 256 KiB chunks: 2 MiB; a PUT: 4 MiB); requests beyond wait for a share, so
    /// memory stays bounded however many clients there are. Default: 32 MiB (eight such
    /// PUTs, whose MD5 is then hashed in SIMD lanes together).
    pub coordinator_buffer_bytes: u64,
    /// How long a request may wait for its share of `coordinator_buffer_bytes` before it
    /// is refused with 503 `SlowDown` (clients retry it later), in seconds. Default: 30.
    pub coordinator_wait_seconds: u64,
    /// Requests of one client (one source address) that may wait for a share of
    /// `coordinator_buffer_bytes` at once; one more is refused at once with 503
    /// `SlowDown`. Shares that come free go to the waiting client that holds least.
    /// Default: 64.
    pub max_waiting_per_client: usize,
    /// Near-data operations this drive runs over its own shards at once; more wait for a
    /// turn. Each takes one thread while it runs, so S3 traffic keeps the others.
    /// Default: 1.
    pub max_concurrent_ops: usize,
    /// CPU time one near-data operation may spend on this drive, in seconds; past it,
    /// the operation is stopped and refused. Default: 300.
    pub op_cpu_seconds: u64,
    /// How long a coordinator waits for a drive's part of a near-data operation, in
    /// seconds; a drive that takes longer is treated as failed and its stripes are
    /// computed from parity. Default: 600.
    pub op_timeout_seconds: u64,
    /// Address of the Prometheus endpoint, `GET /metrics`, kept off the S3 port (where
    /// `/metrics` would be a bucket). Default: none (no metrics endpoint).
    pub metrics_listen: Option<SocketAddr>,
    /// Where power readings come from: "auto" (hwmon, then RAPL, then `power_command` if
    /// set, then the model), "hwmon", "rapl", "command", "model" or "none". A chosen
    /// sensor that does not work falls back to the model, which is labelled
    /// `method="modelled"`. Default: "auto".
    pub power_source: PowerSource,
    /// Use only the hwmon device with this `name` (or directory, as `hwmon3`).
    /// Default: none (the first with a power or energy channel).
    pub power_hwmon: Option<String>,
    /// A shell command that prints the drive's power in watts (IPMI DCMI, a smart plug, a
    /// lab meter); run once per sampler period. Default: none.
    pub power_command: Option<String>,
    /// How long `power_command` may run, in milliseconds. Default: 2000.
    pub power_command_timeout_ms: u64,
    /// Device profile of the power model: "arm-hdd", "arm-ssd", "oed-gen1",
    /// "x86-server", or the path of a TOML profile (`oedd meter calibrate` writes one).
    /// Default: "oed-gen1".
    pub power_profile: String,
    /// Period of the power and counter sampler, in milliseconds. Default: 1000.
    pub meter_period_ms: u64,
    /// Root of sysfs for the power sensors; only tests and containers change it.
    /// Default: "/sys".
    pub meter_sysfs_root: PathBuf,
    /// Whether this drive rebuilds its missing or bad shards from the queue. Off only for
    /// tests that look at a queue. Default: true.
    pub heal: bool,
    /// Bytes of shards this drive rebuilds per second, at most (each byte rebuilt reads
    /// `k` bytes from other drives). 0: no limit. Default: 16 MiB.
    pub heal_rate_bytes: u64,
    /// Share of `heal_rate_bytes` heal keeps while the drive serves requests: heal yields
    /// the rest to clients. Default: 0.75.
    pub heal_busy_share: f64,
    /// Shards rebuilt at once. Default: 2.
    pub heal_concurrency: usize,
    /// Seconds before heals that failed (too few shards readable, a drive away) are
    /// tried again. Default: 30.
    pub heal_retry_seconds: u64,
    /// Bytes per second the scrubber reads from this drive's shards. 0 turns the
    /// scrubber off. Default: 8 MiB.
    pub scrub_rate_bytes: u64,
    /// Seconds from the start of one scrub pass to the start of the next (a pass that
    /// takes longer is followed at once). Default: 604800 (a week).
    pub scrub_interval_seconds: u64,
    /// Age, in seconds, before the scrubber removes leftovers: temp files, shard files
    /// without a record, records of writes that never reached a quorum. Default: 3600.
    pub sweep_grace_seconds: u64,
    /// Lifecycle actions (a version expired, a delete marker removed, an upload
    /// aborted) this drive takes per second, at most. 0 turns lifecycle off on this
    /// drive, and so for the versions it is the first answering holder of: set it alike
    /// on every drive. Default: 50.
    pub lifecycle_actions_per_second: u32,
    /// How long a lifecycle "day" is, in seconds: the unit of the rules' `Days`, and the
    /// time from the start of one lifecycle pass to the start of the next. Only tests
    /// shorten it (as Ceph's `rgw_lc_debug_interval` does); with real days, an expiry
    /// is rounded up to the next midnight UTC, as S3 counts. Default: 86400.
    pub lifecycle_day_seconds: u64,
    /// Serve the web console under `/_oed/console/` on the S3 address (docs/console.md).
    /// Default: true.
    pub console: bool,
    /// How long a console login lasts, seconds. Default: 28800 (8 hours).
    pub console_session_seconds: u64,
}

/// Where power readings come from; see [`Config::power_source`].
pub type PowerSource = oed_meter::power::Choice;

impl Default for Config {
    fn default() -> Self {
        Self {
            drive_id: "drive-1".into(),
            data_dir: PathBuf::from("/var/lib/oed"),
            listen: SocketAddr::from(([0, 0, 0, 0], 9400)),
            cluster_map: None,
            cluster_secret_file: None,
            fsync: FsyncPolicy::Always,
            direct_io: true,
            raw_shard_uploads: true,
            raw_shard_upload_min_bytes: RAW_UPLOAD_MIN_BYTES,
            framed_shard_reads: true,
            shard_sendfile: true,
            legacy_peer_requests: false,
            replay_cache_entries: 1 << 19,
            max_concurrent_requests: 64,
            max_shard_bytes: 1 << 30,
            max_request_body_bytes: 64 * 1024,
            inline_threshold_bytes: 4096,
            shard_file_pool_bytes: 256 << 20,
            reserve_bytes: 256 << 20,
            rocksdb_block_cache_bytes: 32 << 20,
            rocksdb_write_buffer_bytes: 8 << 20,
            clock_skew_seconds: 300,
            shutdown_grace_seconds: 10,
            s3_access_key: "oed".into(),
            s3_secret_key_file: None,
            region: "us-east-1".into(),
            peer_timeout_seconds: 10,
            http_header_timeout_seconds: 20,
            max_connections: 1024,
            connection_read_buffer_bytes: 64 << 10,
            tls_cert_file: None,
            tls_key_file: None,
            tls_ca_file: None,
            min_body_bytes_per_second: 1024,
            md5_etags: true,
            md5_kernel: "auto".into(),
            md5_gather_ms: 50,
            coordinator_buffer_bytes: 32 << 20,
            coordinator_wait_seconds: 30,
            max_waiting_per_client: 64,
            max_concurrent_ops: 1,
            op_cpu_seconds: 300,
            op_timeout_seconds: 600,
            metrics_listen: None,
            power_source: PowerSource::Auto,
            power_hwmon: None,
            power_command: None,
            power_command_timeout_ms: 2000,
            power_profile: "oed-gen1".into(),
            meter_period_ms: 1000,
            meter_sysfs_root: PathBuf::from("/sys"),
            heal: true,
            heal_rate_bytes: 16 << 20,
            heal_busy_share: 0.75,
            heal_concurrency: 2,
            heal_retry_seconds: 30,
            scrub_rate_bytes: 8 << 20,
            scrub_interval_seconds: 7 * 24 * 3600,
            sweep_grace_seconds: 3600,
            lifecycle_actions_per_second: 50,
            lifecycle_day_seconds: 86_400,
            console: true,
            console_session_seconds: 8 * 3600,
        }
    }
}

/// `OED_*` variables that are not config fields: the secret (read on its own), the log
/// filter, and knobs of the tests and benchmarks.
const NOT_FIELDS: &[&str] = &["cluster_secret", "s3_secret_key", "log", "bless"];
/// Variables for the tests (`OED_EXPECT_KERNEL`, `OED_EXPECT_SEAL`: what CI expects this
/// CPU to get), the benchmarks and the lab, which are no settings.
const NOT_FIELD_PREFIXES: &[&str] = &["test_", "bench_", "lab_", "expect_"];

/// Budget for RocksDB's block cache plus its (two) memtables.
pub const ROCKSDB_MEMORY_LIMIT: usize = 64 << 20;

impl Config {
    /// Loads the file (if any), then `OED_<FIELD>` variables from `env`, then `overrides`
    /// (`field=value` pairs from flags), and validates the result.
    ///
    /// Values from the environment and flags are read as TOML values when they parse as
    /// one (numbers, booleans) and as strings otherwise.
    ///
    /// # Errors
    /// [`Error::Config`] naming the source and field that is wrong and what is expected.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &[(String, String)],
    ) -> Result<Self> {
        let mut table = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::Config(format!("cannot read config file {}: {e}", path.display()))
                })?;
                toml::from_str::<toml::Table>(&text)
                    .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?
            }
            None => toml::Table::new(),
        };
        for (name, value) in env {
            let Some(field) = name.strip_prefix("OED_") else {
                continue;
            };
            let field = field.to_ascii_lowercase();
            if NOT_FIELDS.contains(&field.as_str())
                || NOT_FIELD_PREFIXES.iter().any(|p| field.starts_with(p))
            {
                continue;
            }
            table.insert(field, parse_value(&value));
        }
        for (field, value) in overrides {
            table.insert(field.clone(), parse_value(value));
        }
        let config: Config = table.clone().try_into().map_err(|e: toml::de::Error| {
            // The message alone does not always say which field; find it by trying each
            // field on its own.
            let culprit = table.iter().find(|(k, v)| {
                let mut one = toml::Table::new();
                one.insert((*k).clone(), (*v).clone());
                one.try_into::<Config>().is_err()
            });
            match culprit {
                Some((k, v)) => Error::Config(format!("{k} = {v}: {}", e.message())),
                None => Error::Config(e.message().to_owned()),
            }
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks values that parse but make no sense.
    ///
    /// # Errors
    /// [`Error::Config`] naming the field and the fix.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(msg));
        self.md5_lanes()?;
        if self.md5_gather_ms > 1000 {
            return bad(format!(
                "md5_gather_ms is {}: at most 1000 (a second)",
                self.md5_gather_ms
            ));
        }
        if self.drive_id.is_empty()
            || !self
                .drive_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        {
            return bad(format!(
                "drive_id {:?}: use letters, digits, '-', '_' or '.'",
                self.drive_id
            ));
        }
        if self.max_concurrent_requests == 0 {
            return bad("max_concurrent_requests must be at least 1".into());
        }
        if self.lifecycle_day_seconds == 0 {
            return bad("lifecycle_day_seconds must be at least 1".into());
        }
        if !(60..=7 * 86_400).contains(&self.console_session_seconds) {
            return bad(format!(
                "console_session_seconds is {}: from 60 to 604800 (a week)",
                self.console_session_seconds
            ));
        }
        if !(0.05..=1.0).contains(&self.heal_busy_share) {
            return bad("heal_busy_share must be between 0.05 and 1".into());
        }
        if self.heal_concurrency == 0 {
            return bad("heal_concurrency must be at least 1".into());
        }
        if self.max_shard_bytes < 64 {
            return bad("max_shard_bytes must be at least 64 (a shard header)".into());
        }
        if self.rocksdb_block_cache_bytes + 2 * self.rocksdb_write_buffer_bytes
            > ROCKSDB_MEMORY_LIMIT
        {
            return bad(format!(
                "rocksdb_block_cache_bytes + 2 * rocksdb_write_buffer_bytes is {} bytes; keep it \
                 within {} (64 MiB) for a 1-2 GB drive",
                self.rocksdb_block_cache_bytes + 2 * self.rocksdb_write_buffer_bytes,
                ROCKSDB_MEMORY_LIMIT
            ));
        }
        if self.coordinator_buffer_bytes < 1 << 20 {
            return bad("coordinator_buffer_bytes must be at least 1 MiB (1048576)".into());
        }
        if self.max_waiting_per_client == 0 {
            return bad("max_waiting_per_client must be at least 1".into());
        }
        if self.coordinator_wait_seconds == 0 {
            return bad("coordinator_wait_seconds must be at least 1".into());
        }
        self.validate_connections()?;
        if self.max_concurrent_ops == 0 || self.op_cpu_seconds == 0 || self.op_timeout_seconds == 0
        {
            return bad(
                "max_concurrent_ops, op_cpu_seconds and op_timeout_seconds must be at least 1"
                    .into(),
            );
        }
        if self.s3_access_key.is_empty() {
            return bad("s3_access_key must not be empty".into());
        }
        if self.region.is_empty()
            || !self
                .region
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return bad(format!(
                "region {:?}: use lower-case letters, digits and '-' (like us-east-1)",
                self.region
            ));
        }
        if self.meter_period_ms < 100 {
            return bad("meter_period_ms must be at least 100".into());
        }
        if self.power_command_timeout_ms == 0 {
            return bad("power_command_timeout_ms must be at least 1".into());
        }
        if let Err(e) = oed_meter::power::Profile::load(&self.power_profile) {
            return bad(format!("power_profile: {e}"));
        }
        if self.power_source == PowerSource::Command && self.power_command.is_none() {
            return bad("power_source = \"command\" needs power_command".into());
        }
        if self.rocksdb_write_buffer_bytes < (1 << 20) {
            return bad("rocksdb_write_buffer_bytes must be at least 1 MiB".into());
        }
        Ok(())
    }

    /// [`Config::validate`]'s checks of the settings of connections: timeouts, limits,
    /// buffers and TLS files.
    /// The MD5 kernel `md5_kernel` names, `None` for `auto`.
    ///
    /// # Errors
    /// [`Error::Config`] for a name that is not a kernel, or one this CPU does not run.
    pub fn md5_lanes(&self) -> Result<Option<oed_ops::md5::Lanes>> {
        use oed_ops::md5::Lanes;
        if self.md5_kernel == "auto" {
            return Ok(None);
        }
        let names = || {
            Lanes::ALL
                .iter()
                .filter(|k| k.supported())
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match Lanes::ALL.into_iter().find(|k| k.name() == self.md5_kernel) {
            Some(k) if k.supported() => Ok(Some(k)),
            Some(_) => Err(Error::Config(format!(
                "md5_kernel = {:?}: this CPU does not run it; use auto or one of: {}",
                self.md5_kernel,
                names()
            ))),
            None => Err(Error::Config(format!(
                "md5_kernel = {:?} is no MD5 kernel; use auto or one of: {}",
                self.md5_kernel,
                names()
            ))),
        }
    }

    fn validate_connections(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(msg));
        if self.peer_timeout_seconds == 0 {
            return bad("peer_timeout_seconds must be at least 1".into());
        }
        if self.http_header_timeout_seconds < 16 {
            return bad(
                "http_header_timeout_seconds must be at least 16 (drives keep idle connections \
                 to each other for 15 s)"
                    .into(),
            );
        }
        if self.max_connections < 16 {
            return bad("max_connections must be at least 16".into());
        }
        if !(16 << 10..=1 << 20).contains(&self.connection_read_buffer_bytes) {
            return bad(
                "connection_read_buffer_bytes must be from 16 KiB (16384, room for a request's \
                 head) to 1 MiB (1048576)"
                    .into(),
            );
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            return bad("tls_cert_file and tls_key_file are set together, or neither".into());
        }
        Ok(())
    }

    /// The cluster secret, from `OED_CLUSTER_SECRET` or `cluster_secret_file`.
    ///
    /// # Errors
    /// [`Error::Config`] when neither is set, the file cannot be read, or the secret is
    /// shorter than 16 bytes.
    pub fn cluster_secret(&self, env_secret: Option<String>) -> Result<Vec<u8>> {
        let secret = match (env_secret, &self.cluster_secret_file) {
            (Some(s), _) => s,
            (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
                Error::Config(format!("cluster_secret_file {}: {e}", path.display()))
            })?,
            (None, None) => {
                return Err(Error::Config(
                    "no cluster secret: set OED_CLUSTER_SECRET or cluster_secret_file".into(),
                ));
            }
        };
        let secret = secret.trim().as_bytes().to_vec();
        if secret.len() < 16 {
            return Err(Error::Config(
                "the cluster secret must be at least 16 bytes long".into(),
            ));
        }
        Ok(secret)
    }

    /// The S3 secret key, from `OED_S3_SECRET_KEY` or `s3_secret_key_file`; `None` when
    /// neither is set (the drive then serves no S3).
    ///
    /// # Errors
    /// [`Error::Config`] when the file cannot be read or the key is shorter than 8 bytes.
    pub fn s3_secret(&self, env_secret: Option<String>) -> Result<Option<String>> {
        let secret = match (env_secret, &self.s3_secret_key_file) {
            (Some(s), _) => s,
            (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
                Error::Config(format!("s3_secret_key_file {}: {e}", path.display()))
            })?,
            (None, None) => return Ok(None),
        };
        let secret = secret.trim().to_owned();
        if secret.len() < 8 {
            return Err(Error::Config(
                "the S3 secret key must be at least 8 bytes long".into(),
            ));
        }
        Ok(Some(secret))
    }

    /// The defaults as a TOML file, with the settings that have no default (paths,
    /// addresses and commands left unset) as comments after them.
    #[must_use]
    pub fn defaults_toml() -> String {
        let mut text = toml::to_string(&Config::default()).unwrap_or_default();
        let set: toml::Table = toml::from_str(&text).unwrap_or_default();
        let unset: Vec<&str> = Config::setting_names()
            .iter()
            .copied()
            .filter(|n| !set.contains_key(*n))
            .collect();
        if !unset.is_empty() {
            text.push_str("\n# Not set by default:\n");
            for n in unset {
                text.push_str("# ");
                text.push_str(n);
                text.push_str(" = \n");
            }
        }
        text
    }

    /// The name of every setting, in the order [`Config`] declares them.
    #[must_use]
    pub fn setting_names() -> &'static [&'static str] {
        field_names::<Config>()
    }
}

/// The field names serde knows a struct by: a deserializer that records the `fields` the
/// struct's `Deserialize` asks for, and reads nothing.
fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Names(&'static [&'static str]);
    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("field names recorded")
        }
    }
    impl std::error::Error for Stop {}
    impl serde::de::Error for Stop {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    impl<'de> serde::Deserializer<'de> for &mut Names {
        type Error = Stop;
        fn deserialize_any<V: serde::de::Visitor<'de>>(
            self,
            _: V,
        ) -> std::result::Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> std::result::Result<V::Value, Stop> {
            self.0 = fields;
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut names = Names(&[]);
    let _ = T::deserialize(&mut names);
    names.0
}

fn parse_value(s: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {s}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(s.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_names_every_setting_and_loads_back() {
        let names = Config::setting_names();
        assert_eq!(names[0], "drive_id");
        assert!(names.contains(&"cluster_map") && names.contains(&"sweep_grace_seconds"));
        let text = Config::defaults_toml();
        for n in names {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&format!("{n} = "))
                        || l.starts_with(&format!("# {n} = "))),
                "{n} is not in config-defaults"
            );
        }
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back.drive_id, Config::default().drive_id);
        assert!(text.contains("# cluster_map = "));
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| ((*a).into(), (*b).into()))
            .collect()
    }

    #[test]
    fn file_then_env_then_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("oed.toml");
        std::fs::write(
            &path,
            "drive_id = \"a\"\nmax_concurrent_requests = 3\nfsync = \"never\"\n",
        )
        .unwrap();
        let c = Config::load(
            Some(&path),
            env(&[
                ("OED_MAX_CONCURRENT_REQUESTS", "5"),
                ("OED_CLUSTER_SECRET", "x"),
                ("OED_EXPECT_KERNEL", "gfni"),
                ("OED_EXPECT_SEAL", "avx512-ifma"),
                ("PATH", "/bin"),
            ]),
            &[("drive_id".into(), "b".into())],
        )
        .unwrap();
        assert_eq!((c.drive_id.as_str(), c.max_concurrent_requests), ("b", 5));
        assert_eq!(c.fsync, FsyncPolicy::Never);
        assert_eq!(c.reserve_bytes, Config::default().reserve_bytes);
    }

    #[test]
    fn errors_name_the_field() {
        let e = Config::load(None, env(&[("OED_LISTEN", "nowhere")]), &[]).unwrap_err();
        assert!(e.to_string().contains("listen"), "{e}");
        let e = Config::load(None, env(&[("OED_FSYNC", "sometimes")]), &[]).unwrap_err();
        assert!(
            e.to_string().contains("fsync") || e.to_string().contains("sometimes"),
            "{e}"
        );
        let e = Config::load(None, env(&[("OED_NO_SUCH_FIELD", "1")]), &[]).unwrap_err();
        assert!(e.to_string().contains("no_such_field"), "{e}");
        let e = Config::load(
            None,
            env(&[("OED_ROCKSDB_BLOCK_CACHE_BYTES", "100000000")]),
            &[],
        )
        .unwrap_err();
        assert!(e.to_string().contains("rocksdb_block_cache_bytes"), "{e}");
        for (var, value, field) in [
            ("OED_POWER_PROFILE", "no-such-device", "power_profile"),
            ("OED_POWER_SOURCE", "command", "power_command"),
            ("OED_POWER_SOURCE", "solar", "power_source"),
            ("OED_METER_PERIOD_MS", "10", "meter_period_ms"),
            ("OED_METRICS_LISTEN", "here", "metrics_listen"),
            (
                "OED_COORDINATOR_BUFFER_BYTES",
                "65536",
                "coordinator_buffer_bytes",
            ),
            (
                "OED_COORDINATOR_WAIT_SECONDS",
                "0",
                "coordinator_wait_seconds",
            ),
            (
                "OED_CONNECTION_READ_BUFFER_BYTES",
                "4096",
                "connection_read_buffer_bytes",
            ),
            (
                "OED_CONNECTION_READ_BUFFER_BYTES",
                "2097152",
                "connection_read_buffer_bytes",
            ),
        ] {
            let e = Config::load(None, env(&[(var, value)]), &[]).unwrap_err();
            assert!(
                e.to_string().contains(field) || e.to_string().contains(value),
                "{var}={value}: {e}"
            );
        }
        let c = Config::load(
            None,
            env(&[
                ("OED_POWER_SOURCE", "hwmon"),
                ("OED_POWER_PROFILE", "arm-ssd"),
                ("OED_METRICS_LISTEN", "127.0.0.1:9410"),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(c.power_source, PowerSource::Hwmon);
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9410".parse().unwrap()));
    }

    #[test]
    fn secrets_come_from_env_or_file_and_must_be_long_enough() {
        let c = Config::default();
        assert!(c.cluster_secret(None).is_err());
        assert!(c.cluster_secret(Some("short".into())).is_err());
        assert_eq!(
            c.cluster_secret(Some(" 0123456789abcdef\n".into()))
                .unwrap(),
            b"0123456789abcdef"
        );
    }

    #[test]
    fn defaults_round_trip_and_fit_the_memory_budget() {
        let c: Config = toml::from_str(&Config::defaults_toml()).unwrap();
        assert_eq!(c, Config::default());
        c.validate().unwrap();
    }

    /// `md5_kernel` takes `auto` and the kernels this CPU runs; anything else stops the
    /// start with the field, the value and the names it takes.
    #[test]
    fn md5_kernel_names_a_kernel_this_cpu_runs() {
        let with = |kernel: &str, ms: u64| Config {
            md5_kernel: kernel.into(),
            md5_gather_ms: ms,
            ..Config::default()
        };
        assert_eq!(with("auto", 4).md5_lanes().unwrap(), None);
        assert_eq!(
            with("scalar", 0).md5_lanes().unwrap(),
            Some(oed_ops::md5::Lanes::Scalar)
        );
        let e = with("sse9", 4).validate().unwrap_err().to_string();
        assert!(
            e.contains("md5_kernel") && e.contains("sse9") && e.contains("scalar"),
            "{e}"
        );
        let e = with("auto", 1001).validate().unwrap_err().to_string();
        assert!(e.contains("md5_gather_ms"), "{e}");
        for k in oed_ops::md5::Lanes::ALL
            .into_iter()
            .filter(|k| !k.supported())
        {
            let e = with(k.name(), 4).validate().unwrap_err().to_string();
            assert!(e.contains("does not run"), "{e}");
        }
    }
}
