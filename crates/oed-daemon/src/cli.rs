//! The command line of `oedd`, shared by its two binaries: `oedd` (the drive: `serve`,
//! `meter`, `version`, `config-defaults`, `man`) and `oedd-tools`, which runs the commands a
//! drive does not run for itself (`dev`, `op`, `bench`, `admin`, `cluster`) and which
//! `oedd` starts in its place for them. Both parse the same definitions, so `oedd --help`,
//! the manual page and every command's flags are the same whichever binary runs it.
#![allow(
    clippy::doc_markdown,
    reason = "doc comments here are clap's --help text, read as plain text"
)]

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// OED drive daemon: one per Open Ethernet Drive.
#[derive(Parser)]
#[command(
    version,
    about,
    long_about = "OED drive daemon: an S3 object store of Ethernet drives.\n\n\
        One oedd runs on each drive (`oedd serve`; the Debian package runs it as \
        oedd.service with /etc/oed/oedd.toml). Together the drives of a cluster serve S3, \
        erasure-code every object across drives, heal and scrub what they hold, run data \
        operations where the data lies, and export power, energy and I/O metrics to \
        Prometheus. The other commands make and check a cluster's map (`oedd cluster`), \
        look after a running cluster (`oedd admin`), run near-data operations (`oedd op`), \
        benchmark an S3 endpoint (`oedd bench`), show the power meter (`oedd meter`) and \
        start a whole cluster on one machine for trying it out (`oedd dev`)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Serve this drive: its store and the peer API.
    ///
    /// Settings come from the config file, then OED_<FIELD> environment variables (for
    /// example OED_DATA_DIR), then these flags. The cluster secret comes only from
    /// OED_CLUSTER_SECRET or the file named by cluster_secret_file, the S3 secret key only
    /// from OED_S3_SECRET_KEY or the file named by s3_secret_key_file.
    Serve(ServeArgs),
    /// Start a whole cluster on this machine (one oedd process per drive on 127.0.0.1)
    /// and print its S3 endpoint and credentials. Ctrl-C stops it.
    Dev(DevArgs),
    /// Show the power source this drive uses, or calibrate the power model against it.
    Meter(MeterArgs),
    /// Run a near-data operation on an object where its data lies, and print the answer
    /// (JSON: result and cost). Credentials come from AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY, as for other S3 tools.
    ///
    /// Example: oedd op --endpoint http://127.0.0.1:9400 demo log.f64
    ///          '{"op": "stats", "format": "f64le"}'
    Op(OpArgs),
    /// Cluster health and repair work (heal, scrub, refill), over the drives' peer API.
    /// Needs the cluster map and the cluster secret (OED_CLUSTER_SECRET, or
    /// --secret-file).
    ///
    /// Examples: oedd admin --map cluster.toml status
    ///           oedd admin --map cluster.toml scrub all
    ///           oedd admin --map cluster.toml refill drive-3
    ///           oedd admin --map cluster.toml drain drive-3
    Admin(AdminArgs),
    /// Make a new cluster's map and secrets from its drives' addresses, or check a map
    /// and its secret files before they go to the drives (docs/deploy.md).
    ///
    /// Examples: oedd cluster init --out ./oed-cluster --drive 10.0.0.11:9400
    ///               --drive 10.0.0.12:9400 --drive 10.0.0.13:9400
    ///           oedd cluster check --map /var/lib/oed/cluster.toml
    ///               --secret-file /etc/oed/cluster.secret --live
    Cluster(ClusterArgs),
    /// Benchmark an S3 endpoint (OED's or another's), IOR-like: write a fixed amount in
    /// objects of one size with C clients, read it back, optionally run a near-data
    /// operation on each object; repeat. Each phase reports MiB/s and MB/s, objects/s,
    /// latency percentiles (and time to first byte for reads), errors, the share of the
    /// theoretical peak with its formula, and, with --metrics, the drives' energy (J,
    /// W, J/GiB, EDP) with its source (measured or modelled). Credentials from
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. docs/bench.md explains every figure.
    ///
    /// Example: oedd bench --endpoint http://10.77.0.1:9000 --endpoint http://10.77.0.2:9000
    ///          --size 4MiB --total 2GiB --clients 16 --reps 3 --drives 6 --k 4 --m 2
    ///          --drive-link 1gbit --metrics http://10.77.0.1:9410/metrics,... --json
    Bench(Box<BenchArgs>),
    /// Print every setting with its default, as a TOML config file.
    ConfigDefaults,
    /// Print oedd's manual page (roff): every command's full help, the files the
    /// packages install, and where the documentation is. `oedd man | man -l -`
    #[command(hide = true)]
    Man,
    /// Print the version, target and the erasure-coding kernel this CPU runs.
    Version,
}

#[derive(Args)]
pub struct ServeArgs {
    /// Config file (TOML).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Data directory (config: data_dir).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Address to listen on, e.g. 127.0.0.1:0 (config: listen).
    #[arg(long)]
    pub listen: Option<String>,
    /// This drive's id (config: drive_id).
    #[arg(long)]
    pub drive_id: Option<String>,
    /// Any other setting, as FIELD=VALUE; repeatable.
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
}

#[derive(Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub action: ClusterAction,
}

#[derive(Subcommand)]
pub enum ClusterAction {
    /// Write cluster.toml (the map, epoch 1), cluster.secret and s3.secret (32 random
    /// bytes each, hex, mode 0600) into --out, and print what to copy where. Refuses to
    /// replace existing files.
    Init(InitArgs),
    /// Check a cluster map and, when given, the secret files; with --live also ask
    /// every drive (over the peer API, with the cluster secret) whether it answers at
    /// its address as the drive the map names, under the map's epoch. Exits with 1 when
    /// anything would not work.
    Check(CheckArgs),
}

#[derive(Args)]
pub struct InitArgs {
    /// A drive, as [ID=]HOST:PORT[@DOMAIN]; repeat once per drive, or give several
    /// separated by commas. Without ID a drive is drive-N (N its place, from 1);
    /// without DOMAIN it is its own failure domain (give drives that share an
    /// enclosure or a power feed one DOMAIN).
    #[arg(
        long = "drive",
        value_name = "[ID=]HOST:PORT[@DOMAIN]",
        value_delimiter = ',',
        required = true
    )]
    pub drives: Vec<String>,
    /// Data shards per object. Default: the number of drives less 2, at most 8.
    #[arg(long)]
    pub k: Option<u16>,
    /// Parity shards per object. Default: 2.
    #[arg(long)]
    pub m: Option<u16>,
    /// Chunk size in bytes (a power of two from 4 KiB to 16 MiB).
    #[arg(long, default_value_t = oed_ec::layout::DEFAULT_CHUNK_SIZE)]
    pub chunk_size: u32,
    /// The cluster's name.
    #[arg(long, default_value = "oed")]
    pub cluster_id: String,
    /// The drives serve S3 and the peer API over TLS (each needs a certificate;
    /// docs/drive.md, "TLS").
    #[arg(long)]
    pub tls: bool,
    /// Directory to write the three files into (created when missing).
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Args)]
pub struct CheckArgs {
    /// The cluster map (TOML).
    #[arg(long, env = "OED_CLUSTER_MAP")]
    pub map: PathBuf,
    /// The cluster secret's file.
    #[arg(long)]
    pub secret_file: Option<PathBuf>,
    /// The S3 secret key's file.
    #[arg(long)]
    pub s3_secret_file: Option<PathBuf>,
    /// Check that the map lists this drive (the drive_id of the machine it goes to).
    #[arg(long)]
    pub drive_id: Option<String>,
    /// Also reach every drive (needs the cluster secret: --secret-file or
    /// OED_CLUSTER_SECRET).
    #[arg(long)]
    pub live: bool,
    /// The cluster CA (PEM), to reach drives of a map with `tls = true`.
    #[arg(long, env = "OED_TLS_CA_FILE")]
    pub ca_file: Option<PathBuf>,
}

#[derive(Args)]
pub struct MeterArgs {
    /// Config file (TOML); its power_* and meter_* settings are used.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Any setting, as FIELD=VALUE; repeatable.
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
    #[command(subcommand)]
    pub action: MeterAction,
}

#[derive(Subcommand)]
pub enum MeterAction {
    /// Detect the power source (saying why others were skipped) and print readings.
    Show {
        /// Readings to print, one per meter period.
        #[arg(long, default_value_t = 3)]
        readings: usize,
    },
    /// Fit the power model's coefficients against the drive's real power source while it
    /// works, and print the profile as TOML (save it and point power_profile at it).
    Calibrate {
        /// How long to sample, in seconds; run a varied load meanwhile.
        #[arg(long, default_value_t = 300)]
        seconds: u64,
        /// Name of the new profile.
        #[arg(long, default_value = "calibrated")]
        name: String,
    },
}

#[derive(Args)]
pub struct AdminArgs {
    /// The cluster map (TOML).
    #[arg(long, env = "OED_CLUSTER_MAP")]
    pub map: PathBuf,
    /// File holding the cluster secret; by default OED_CLUSTER_SECRET.
    #[arg(long)]
    pub secret_file: Option<PathBuf>,
    /// The cluster CA (PEM), to reach drives of a map with `tls = true`.
    #[arg(long, env = "OED_TLS_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    #[command(subcommand)]
    pub action: AdminAction,
}

#[derive(Subcommand)]
pub enum AdminAction {
    /// Every drive's state (up or down, incarnation, shards, heal queue and rate, scrub,
    /// refill), the shards waiting for heal with an ETA, and objects by redundancy.
    Status {
        /// Print each drive's answer as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Start a scrub pass now on DRIVE, or on every drive with "all".
    Scrub {
        /// A drive id, or "all".
        drive: String,
    },
    /// Refill DRIVE: it lists what it should hold from the other drives and rebuilds
    /// it at the heal rate (a replaced disk starts this by itself).
    Refill {
        /// A drive id.
        drive: String,
    },
    /// Retry deferred heals now on DRIVE, or on every drive with "all".
    Retry {
        /// A drive id, or "all".
        drive: String,
    },
    /// Start a lifecycle pass now on DRIVE, or on every drive with "all" (each applies
    /// its buckets' lifecycle rules to the versions it is the drive for).
    Lifecycle {
        /// A drive id, or "all".
        drive: String,
    },
    /// Mark DRIVE out: it gets no new shards; what it holds stays readable there. The
    /// map file gets the next epoch and is pushed to every drive.
    Out {
        /// A drive id.
        drive: String,
    },
    /// Mark DRIVE in again (a drain on it stops). The map file gets the next epoch and is
    /// pushed to every drive.
    In {
        /// A drive id.
        drive: String,
    },
    /// Drain DRIVE: mark it out (if it is not) and have it move every shard it holds to
    /// drives that are in, at the heal rate. `status` shows its progress.
    Drain {
        /// A drive id.
        drive: String,
    },
    /// Remove a drained DRIVE from the map (refused unless its drain is done), then
    /// push the map. Stop the drive afterwards. With --lost, remove a drive that is dead
    /// for good: the shards it held are rebuilt on the drives the map places them on.
    Remove {
        /// A drive id.
        drive: String,
        /// The drive is lost (refused while it answers: drain a drive that works).
        #[arg(long)]
        lost: bool,
    },
    /// Add drives to the map at the next epoch and push it to every drive; then start
    /// each new drive with this map file. New objects spread over them by capacity
    /// (`docs/cluster.md`, "Placement").
    ///
    /// Example: oedd admin --map cluster.toml add drive-7=10.0.0.17:9000@shelf-2 --capacity-gb 4000
    Add {
        /// Each new drive: [ID=]HOST:PORT[@DOMAIN] (as `oedd cluster init --drive`).
        #[arg(required = true)]
        drives: Vec<String>,
        /// Their capacity in GB: their share of new shards follows it. Without it they
        /// weigh as the mean of the drives that have one (alike, if none has).
        #[arg(long)]
        capacity_gb: Option<u64>,
    },
    /// Push the map file as it is to every drive (one that was down when it changed).
    Push,
    /// Access keys for S3 clients: create, list, info, delete, rotate (`docs/access.md`).
    Key {
        #[command(subcommand)]
        action: KeyAction,
    },
    /// What keys may do in a bucket: allow, deny, info (`docs/access.md`).
    Bucket {
        #[command(subcommand)]
        action: BucketAction,
    },
}

#[derive(Subcommand)]
pub enum KeyAction {
    /// A new key named NAME; prints its id and secret (the secret is shown this once).
    Create {
        /// A name for people (not unique).
        name: String,
        /// Print `{"access_key_id", "secret_access_key", "name"}`.
        #[arg(long)]
        json: bool,
    },
    /// Every key: id, name, when made, buckets with rights.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One key and its rights in each bucket.
    Info {
        /// The access key id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a key: requests signed with it are refused on every drive from then on.
    Delete {
        /// The access key id.
        id: String,
    },
    /// A new secret for a key; the old one is refused from then on (no grace period).
    Rotate {
        /// The access key id.
        id: String,
        /// Print `{"access_key_id", "secret_access_key", "name"}`.
        #[arg(long)]
        json: bool,
    },
}

/// The rights named on the command line.
#[derive(Args)]
pub struct RightsArgs {
    /// The access key id.
    #[arg(long)]
    pub key: String,
    /// GET, HEAD, listings, near-data operations that read.
    #[arg(long)]
    pub read: bool,
    /// PUT, copy into, delete, multipart, operations that write.
    #[arg(long)]
    pub write: bool,
    /// Bucket settings, deleting the bucket.
    #[arg(long)]
    pub owner: bool,
}

#[derive(Subcommand)]
pub enum BucketAction {
    /// Give KEY the rights named in BUCKET (adding to those it has).
    Allow {
        /// The bucket.
        bucket: String,
        #[command(flatten)]
        rights: RightsArgs,
    },
    /// Take the rights named from KEY in BUCKET.
    Deny {
        /// The bucket.
        bucket: String,
        #[command(flatten)]
        rights: RightsArgs,
    },
    /// The keys with rights in BUCKET, and which.
    Info {
        /// The bucket.
        bucket: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
pub struct OpArgs {
    /// A drive's S3 endpoint (any drive).
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    pub endpoint: String,
    /// The region to sign for.
    #[arg(long, env = "AWS_DEFAULT_REGION", default_value = "us-east-1")]
    pub region: String,
    /// The bucket.
    pub bucket: String,
    /// The object's key.
    pub key: String,
    /// The operation, JSON: {"op": "stats", "format": "f64le"}, {"op": "checksum",
    /// "algorithm": "blake3"}, ... (docs/near-data.md).
    pub operation: String,
    /// Only these bytes of the object, as an HTTP range: bytes=FIRST-LAST, bytes=FIRST-
    /// or bytes=-N.
    #[arg(long)]
    pub range: Option<String>,
}

#[derive(Args)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent command-line switches"
)]
pub struct BenchArgs {
    /// An S3 endpoint, http://host:port or https://host:port; repeat it, or separate
    /// with commas, to send requests to several drives in turn (each a gateway).
    #[arg(long, required = true, value_delimiter = ',')]
    pub endpoint: Vec<String>,
    /// The region to sign for.
    #[arg(long, env = "AWS_DEFAULT_REGION", default_value = "us-east-1")]
    pub region: String,
    /// The bucket (made when missing).
    #[arg(long, default_value = "oed-bench")]
    pub bucket: String,
    /// Object size: 4MiB, 64KiB, 1GB...
    #[arg(long, default_value = "4MiB")]
    pub size: String,
    /// Data per phase (the number of objects is this over --size, rounded up), instead
    /// of time-based phases.
    #[arg(long, conflicts_with = "duration")]
    pub total: Option<String>,
    /// Objects per phase, instead of --total or time-based phases. With --duration, the
    /// objects a read or op phase goes over when no write comes before it (--prefix).
    #[arg(long)]
    pub count: Option<u64>,
    /// Time-based phases: each phase sends requests for this long (30s, 2m, 1h; a number
    /// is seconds), a write writing new objects all along, a read or op going over
    /// those written, again and again. The default unless --count or --total is given:
    /// 10s, ten meter periods.
    #[arg(long)]
    pub duration: Option<String>,
    /// How uploads are signed: streaming-crc32c (aws-chunked, every 64 KiB chunk signed,
    /// a signed CRC32C trailer: minio-go's multipart parts over HTTP), streaming (chunks
    /// signed, no trailer: minio-go's single PUT over HTTP), sha256 (the whole body's SHA-256: boto3 and the aws CLI over HTTP),
    /// unsigned (UNSIGNED-PAYLOAD: clients over HTTPS), unsigned-crc32c (aws-chunked,
    /// unsigned, with a CRC32C trailer: the AWS SDKs over HTTPS), or auto:
    /// streaming-crc32c for http:// endpoints, unsigned for https://.
    #[arg(long, default_value = "auto")]
    pub signing: String,
    /// Requests in flight.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Repetitions of the phases.
    #[arg(long, default_value_t = 1)]
    pub reps: u32,
    /// Phases of each repetition: write, read, op (a near-data operation on each object).
    #[arg(long, default_value = "write,read")]
    pub phases: String,
    /// The near-data operation of the op phase (JSON, docs/near-data.md).
    #[arg(long, default_value = r#"{"op": "checksum", "algorithm": "crc32c"}"#)]
    pub operation: String,
    /// The drives' metrics URLs (http://host:9410/metrics), repeated or separated by
    /// commas: their energy counters give each phase's energy.
    #[arg(long, value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// Drives in the cluster, for the peak (default: one per endpoint).
    #[arg(long)]
    pub drives: Option<u32>,
    /// Data shards per stripe, for the peak.
    #[arg(long, default_value_t = 4)]
    pub k: u32,
    /// Parity shards per stripe, for the peak.
    #[arg(long, default_value_t = 2)]
    pub m: u32,
    /// Each drive's link rate on the wire, as tc writes it (1gbit, 100mbit), for the
    /// peak.
    #[arg(long)]
    pub drive_link: Option<String>,
    /// The client's link rate on the wire, for the peak.
    #[arg(long)]
    pub client_link: Option<String>,
    /// The links' MTU, bytes.
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    /// Disks behind the drives, for the peak (default: one per drive).
    #[arg(long)]
    pub disks: Option<u32>,
    /// What each disk writes sequentially, MB/s (and reads, unless --disk-read-mb-s),
    /// for the peak.
    #[arg(long)]
    pub disk_mb_s: Option<f64>,
    /// What each disk reads sequentially, MB/s, for the peak of reads and operations.
    #[arg(long)]
    pub disk_read_mb_s: Option<f64>,
    /// A shell command run before every phase but the first, e.g. to drop the page
    /// cache: 'sync; echo 3 > /proc/sys/vm/drop_caches'.
    #[arg(long)]
    pub between_phases: Option<String>,
    /// A JSON file describing the environment (what was emulated and what not), put
    /// into the results as it is; the lab writes one.
    #[arg(long)]
    pub environment: Option<PathBuf>,
    /// A CA certificate (PEM) to trust for https:// endpoints.
    #[arg(long, env = "AWS_CA_BUNDLE")]
    pub ca_file: Option<PathBuf>,
    /// Keep the objects (they are deleted after each repetition otherwise).
    #[arg(long)]
    pub keep: bool,
    /// The objects' key prefix (keys PREFIX/rREP/NNNNNNNN; a new one each run by
    /// default). With it, a later run can read or overwrite the objects an earlier one
    /// kept (--phases read or op need no write then).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Print the results as JSON on standard output (the table goes to standard error).
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this file.
    #[arg(long)]
    pub json_file: Option<PathBuf>,
    /// Write a plot of throughput and power over the run (SVG) to this file.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Worker threads of the client.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// A phase stops sending requests after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub max_phase_seconds: u64,
    /// A request that takes longer fails.
    #[arg(long, default_value_t = 120)]
    pub request_timeout_seconds: u64,
    /// Seconds between points of the timeline (throughput and power).
    #[arg(long, default_value_t = 1.0)]
    pub sample_seconds: f64,
    /// No progress lines on standard error.
    #[arg(long)]
    pub quiet: bool,
}

#[derive(Args)]
pub struct DevArgs {
    /// Drives to start.
    #[arg(long, default_value_t = 6)]
    pub drives: usize,
    /// Data shards per stripe.
    #[arg(long, default_value_t = 4)]
    pub k: u16,
    /// Parity shards per stripe.
    #[arg(long, default_value_t = 2)]
    pub m: u16,
    /// Chunk size in bytes (a power of two from 4 KiB to 16 MiB): the bytes of each shard
    /// per stripe.
    #[arg(long, default_value_t = oed_ec::layout::DEFAULT_CHUNK_SIZE)]
    pub chunk_size: u32,
    /// Directory for the drives' data (kept afterwards); a temporary one (removed at the
    /// end) by default.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Do not fsync writes (faster on one shared disk; data may be lost on a crash).
    #[arg(long)]
    pub no_fsync: bool,
    /// Serve S3 and the peer API over TLS: a throwaway CA signs a certificate for each
    /// drive (127.0.0.1 and localhost), and clients trust the CA file printed.
    #[arg(long)]
    pub tls: bool,
    /// As --tls for S3 clients, while the drives talk to each other in the clear (a
    /// trusted back network: the map's `tls` is false).
    #[arg(long)]
    pub tls_clear_peers: bool,
    /// Also start N drives outside the map, as spares, and print the command that adds
    /// them (`oedd admin ... add`): growing a cluster, on one machine.
    #[arg(long, default_value_t = 0)]
    pub spares: usize,
}

/// The manual page: clap_mangen's name, synopsis, description and options, then each
/// command's long help as --help prints it, then FILES and SEE ALSO.
///
/// # Errors
/// When clap_mangen cannot render a section.
pub fn man_page() -> anyhow::Result<Vec<u8>> {
    use clap::CommandFactory as _;
    let mut cmd = Cli::command().name("oedd");
    cmd.build();
    let mut page = Vec::new();
    let man = clap_mangen::Man::new(cmd.clone())
        .manual("OED")
        .source(format!("oedd {}", env!("CARGO_PKG_VERSION")));
    // Not clap_mangen's list of subcommands: it points at a page per command, and this
    // one page holds them all.
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    let mut more = String::from(".SH \"COMMANDS IN DETAIL\"\n");
    for sub in cmd.get_subcommands_mut() {
        man_command(&mut more, "oedd", sub);
    }
    more.push_str(concat!(
        ".SH FILES\n",
        ".TP\n/etc/oed/oedd.toml\nThe drive's settings (oedd.service runs oedd serve --config with it).\n",
        ".TP\n/etc/oed/s3.secret, /etc/oed/cluster.secret\n",
        "The S3 secret key of access key oed and the key drives sign their requests with, made at\n",
        "installation; a cluster shares both (oedd cluster init makes them).\n",
        ".TP\n/var/lib/oed/cluster.toml\n",
        "The cluster map, the same on every drive; oedd admin has the drives rewrite it.\n",
        ".TP\n/etc/default/oedd\nOED_<FIELD>=VALUE lines that override the settings file.\n",
        ".TP\n/var/lib/oed\nThe drive's data: RocksDB in meta/, shard files in shards/.\n",
        ".TP\n/usr/share/oed/prometheus, /usr/share/oed/grafana\n",
        "A Prometheus scrape configuration and alert rules, and a Grafana dashboard.\n",
        ".SH \"SEE ALSO\"\n",
        "systemctl(1), journalctl(1), aws(1); /usr/share/doc/oedd/ (deploy.md: from three machines\n",
        "to a working cluster, upgrades, power sensors).\n",
    ));
    page.extend_from_slice(more.as_bytes());
    Ok(page)
}

/// One command's long help as a man page subsection, then its own commands'.
fn man_command(out: &mut String, parent: &str, cmd: &mut clap::Command) {
    use std::fmt::Write as _;
    if cmd.is_hide_set() || cmd.get_name() == "help" {
        return;
    }
    let name = format!("{parent} {}", cmd.get_name());
    let help = cmd.render_long_help().to_string();
    let _ = writeln!(out, ".SS \"{name}\"\n.nf");
    for line in help.lines() {
        let line = line.replace('\\', "\\e");
        let lead = if line.starts_with('.') || line.starts_with('\'') {
            "\\&"
        } else {
            ""
        };
        let _ = writeln!(out, "{lead}{line}");
    }
    out.push_str(".fi\n");
    for sub in cmd.get_subcommands_mut() {
        man_command(out, &name, sub);
    }
}
