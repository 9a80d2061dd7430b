//! `oedd`: parses the command line, sets up tracing and signals, binds, and calls the
//! library.
#![allow(
    clippy::doc_markdown,
    reason = "doc comments here are clap's --help text, read as plain text"
)]

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use oed_daemon::server::DriveServer;
use oed_model::config::Config;
use tokio_util::sync::CancellationToken;

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
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
struct ServeArgs {
    /// Config file (TOML).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Data directory (config: data_dir).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Address to listen on, e.g. 127.0.0.1:0 (config: listen).
    #[arg(long)]
    listen: Option<String>,
    /// This drive's id (config: drive_id).
    #[arg(long)]
    drive_id: Option<String>,
    /// Any other setting, as FIELD=VALUE; repeatable.
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    set: Vec<String>,
}

#[derive(Args)]
struct ClusterArgs {
    #[command(subcommand)]
    action: ClusterAction,
}

#[derive(Subcommand)]
enum ClusterAction {
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
struct InitArgs {
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
    drives: Vec<String>,
    /// Data shards per object. Default: the number of drives less 2, at most 8.
    #[arg(long)]
    k: Option<u16>,
    /// Parity shards per object. Default: 2.
    #[arg(long)]
    m: Option<u16>,
    /// Chunk size in bytes (a power of two from 4 KiB to 16 MiB).
    #[arg(long, default_value_t = oed_ec::layout::DEFAULT_CHUNK_SIZE)]
    chunk_size: u32,
    /// The cluster's name.
    #[arg(long, default_value = "oed")]
    cluster_id: String,
    /// The drives serve S3 and the peer API over TLS (each needs a certificate;
    /// docs/drive.md, "TLS").
    #[arg(long)]
    tls: bool,
    /// Directory to write the three files into (created when missing).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
struct CheckArgs {
    /// The cluster map (TOML).
    #[arg(long, env = "OED_CLUSTER_MAP")]
    map: PathBuf,
    /// The cluster secret's file.
    #[arg(long)]
    secret_file: Option<PathBuf>,
    /// The S3 secret key's file.
    #[arg(long)]
    s3_secret_file: Option<PathBuf>,
    /// Check that the map lists this drive (the drive_id of the machine it goes to).
    #[arg(long)]
    drive_id: Option<String>,
    /// Also reach every drive (needs the cluster secret: --secret-file or
    /// OED_CLUSTER_SECRET).
    #[arg(long)]
    live: bool,
    /// The cluster CA (PEM), to reach drives of a map with `tls = true`.
    #[arg(long, env = "OED_TLS_CA_FILE")]
    ca_file: Option<PathBuf>,
}

#[derive(Args)]
struct MeterArgs {
    /// Config file (TOML); its power_* and meter_* settings are used.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Any setting, as FIELD=VALUE; repeatable.
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    set: Vec<String>,
    #[command(subcommand)]
    action: MeterAction,
}

#[derive(Subcommand)]
enum MeterAction {
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
struct AdminArgs {
    /// The cluster map (TOML).
    #[arg(long, env = "OED_CLUSTER_MAP")]
    map: PathBuf,
    /// File holding the cluster secret; by default OED_CLUSTER_SECRET.
    #[arg(long)]
    secret_file: Option<PathBuf>,
    /// The cluster CA (PEM), to reach drives of a map with `tls = true`.
    #[arg(long, env = "OED_TLS_CA_FILE")]
    ca_file: Option<PathBuf>,
    #[command(subcommand)]
    action: AdminAction,
}

#[derive(Subcommand)]
enum AdminAction {
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
    /// push the map. Stop the drive afterwards.
    Remove {
        /// A drive id.
        drive: String,
    },
    /// Push the map file as it is to every drive (one that was down when it changed).
    Push,
}

#[derive(Args)]
struct OpArgs {
    /// A drive's S3 endpoint (any drive).
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    endpoint: String,
    /// The region to sign for.
    #[arg(long, env = "AWS_DEFAULT_REGION", default_value = "us-east-1")]
    region: String,
    /// The bucket.
    bucket: String,
    /// The object's key.
    key: String,
    /// The operation, JSON: {"op": "stats", "format": "f64le"}, {"op": "checksum",
    /// "algorithm": "blake3"}, ... (docs/near-data.md).
    operation: String,
    /// Only these bytes of the object, as an HTTP range: bytes=FIRST-LAST, bytes=FIRST-
    /// or bytes=-N.
    #[arg(long)]
    range: Option<String>,
}

#[derive(Args)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent command-line switches"
)]
struct BenchArgs {
    /// An S3 endpoint, http://host:port or https://host:port; repeat it, or separate
    /// with commas, to send requests to several drives in turn (each a gateway).
    #[arg(long, required = true, value_delimiter = ',')]
    endpoint: Vec<String>,
    /// The region to sign for.
    #[arg(long, env = "AWS_DEFAULT_REGION", default_value = "us-east-1")]
    region: String,
    /// The bucket (made when missing).
    #[arg(long, default_value = "oed-bench")]
    bucket: String,
    /// Object size: 4MiB, 64KiB, 1GB...
    #[arg(long, default_value = "4MiB")]
    size: String,
    /// Data per phase (the number of objects is this over --size, rounded up).
    #[arg(long, default_value = "1GiB")]
    total: String,
    /// Objects per phase, instead of --total.
    #[arg(long)]
    count: Option<u64>,
    /// Requests in flight.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Repetitions of the phases.
    #[arg(long, default_value_t = 1)]
    reps: u32,
    /// Phases of each repetition: write, read, op (a near-data operation on each object).
    #[arg(long, default_value = "write,read")]
    phases: String,
    /// The near-data operation of the op phase (JSON, docs/near-data.md).
    #[arg(long, default_value = r#"{"op": "checksum", "algorithm": "crc32c"}"#)]
    operation: String,
    /// The drives' metrics URLs (http://host:9410/metrics), repeated or separated by
    /// commas: their energy counters give each phase's energy.
    #[arg(long, value_delimiter = ',')]
    metrics: Vec<String>,
    /// Drives in the cluster, for the peak (default: one per endpoint).
    #[arg(long)]
    drives: Option<u32>,
    /// Data shards per stripe, for the peak.
    #[arg(long, default_value_t = 4)]
    k: u32,
    /// Parity shards per stripe, for the peak.
    #[arg(long, default_value_t = 2)]
    m: u32,
    /// Each drive's link rate on the wire, as tc writes it (1gbit, 100mbit), for the
    /// peak.
    #[arg(long)]
    drive_link: Option<String>,
    /// The client's link rate on the wire, for the peak.
    #[arg(long)]
    client_link: Option<String>,
    /// The links' MTU, bytes.
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// Disks behind the drives, for the peak (default: one per drive).
    #[arg(long)]
    disks: Option<u32>,
    /// What each disk writes sequentially, MB/s (and reads, unless --disk-read-mb-s),
    /// for the peak.
    #[arg(long)]
    disk_mb_s: Option<f64>,
    /// What each disk reads sequentially, MB/s, for the peak of reads and operations.
    #[arg(long)]
    disk_read_mb_s: Option<f64>,
    /// A shell command run before every phase but the first, e.g. to drop the page
    /// cache: 'sync; echo 3 > /proc/sys/vm/drop_caches'.
    #[arg(long)]
    between_phases: Option<String>,
    /// A JSON file describing the environment (what was emulated and what not), put
    /// into the results as it is; the lab writes one.
    #[arg(long)]
    environment: Option<PathBuf>,
    /// A CA certificate (PEM) to trust for https:// endpoints.
    #[arg(long, env = "AWS_CA_BUNDLE")]
    ca_file: Option<PathBuf>,
    /// Keep the objects (they are deleted after each repetition otherwise).
    #[arg(long)]
    keep: bool,
    /// The objects' key prefix (keys PREFIX/rREP/NNNNNNNN; a new one each run by
    /// default). With it, a later run can read or overwrite the objects an earlier one
    /// kept (--phases read or op need no write then).
    #[arg(long)]
    prefix: Option<String>,
    /// Print the results as JSON on standard output (the table goes to standard error).
    #[arg(long)]
    json: bool,
    /// Also write the JSON to this file.
    #[arg(long)]
    json_file: Option<PathBuf>,
    /// Write a plot of throughput and power over the run (SVG) to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Worker threads of the client.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// A phase stops sending requests after this many seconds.
    #[arg(long, default_value_t = 3600)]
    max_phase_seconds: u64,
    /// A request that takes longer fails.
    #[arg(long, default_value_t = 120)]
    request_timeout_seconds: u64,
    /// Seconds between points of the timeline (throughput and power).
    #[arg(long, default_value_t = 1.0)]
    sample_seconds: f64,
    /// No progress lines on standard error.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
struct DevArgs {
    /// Drives to start.
    #[arg(long, default_value_t = 6)]
    drives: usize,
    /// Data shards per stripe.
    #[arg(long, default_value_t = 4)]
    k: u16,
    /// Parity shards per stripe.
    #[arg(long, default_value_t = 2)]
    m: u16,
    /// Chunk size in bytes (a power of two from 4 KiB to 16 MiB): the bytes of each shard
    /// per stripe.
    #[arg(long, default_value_t = oed_ec::layout::DEFAULT_CHUNK_SIZE)]
    chunk_size: u32,
    /// Directory for the drives' data (kept afterwards); a temporary one (removed at the
    /// end) by default.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Do not fsync writes (faster on one shared disk; data may be lost on a crash).
    #[arg(long)]
    no_fsync: bool,
    /// Serve S3 and the peer API over TLS: a throwaway CA signs a certificate for each
    /// drive (127.0.0.1 and localhost), and clients trust the CA file printed.
    #[arg(long)]
    tls: bool,
    /// As --tls for S3 clients, while the drives talk to each other in the clear (a
    /// trusted back network: the map's `tls` is false).
    #[arg(long)]
    tls_clear_peers: bool,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Version => println!("{}", oed_daemon::build_info()),
        Command::ConfigDefaults => print!("{}", Config::defaults_toml()),
        Command::Man => {
            use std::io::Write as _;
            let page = man_page()?;
            std::io::stdout().lock().write_all(&page)?;
        }
        Command::Serve(args) => serve(args)?,
        Command::Dev(args) => dev(args)?,
        Command::Op(args) => op(args)?,
        Command::Bench(args) => bench(*args)?,
        Command::Admin(args) => admin(args)?,
        Command::Cluster(args) => cluster(args)?,
        Command::Meter(args) => meter(args)?,
    }
    Ok(())
}

/// The manual page: clap_mangen's name, synopsis, description and options, then each
/// command's long help as --help prints it, then FILES and SEE ALSO.
fn man_page() -> anyhow::Result<Vec<u8>> {
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

fn cluster(args: ClusterArgs) -> anyhow::Result<()> {
    match args.action {
        ClusterAction::Init(a) => cluster_init(a),
        ClusterAction::Check(a) => cluster_check(a),
    }
}

/// `oedd cluster init`: writes the map and secrets, and says what goes where.
fn cluster_init(args: InitArgs) -> anyhow::Result<()> {
    use oed_cluster::init;
    let InitArgs {
        drives,
        k,
        m,
        chunk_size,
        cluster_id,
        tls,
        out,
    } = args;
    let drives = drives
        .iter()
        .enumerate()
        .map(|(i, d)| init::parse_drive(d, i + 1))
        .collect::<Result<Vec<_>, _>>()?;
    let map = init::make_map(&init::InitOptions {
        cluster_id,
        drives,
        k,
        m,
        chunk_size,
        tls,
    })?;
    let files = init::write_files(&out, &map)?;
    for f in &files {
        println!("wrote {}", f.display());
    }
    let p = map.profile;
    println!(
        "profile {}+{} over {} drives. On each drive (docs/deploy.md):\n  \
         install -o oed -g oed -m 0640 cluster.toml /var/lib/oed/\n  \
         install -o root -g oed -m 0640 cluster.secret s3.secret /etc/oed/\n\
         then in /etc/oed/oedd.toml set\n  \
         cluster_map = \"/var/lib/oed/cluster.toml\"\n\
         and drive_id and listen as follows, and restart oedd:",
        p.k,
        p.m,
        map.drives.len()
    );
    for d in &map.drives {
        let port = d.address.rsplit_once(':').map_or("9400", |(_, p)| p);
        println!(
            "  {}: drive_id = {:?}, listen = \"0.0.0.0:{port}\"",
            d.address, d.id
        );
    }
    println!("S3 clients use access key oed and the secret key in s3.secret.");
    Ok(())
}

/// `oedd cluster check`: the map and secret files, then with `--live` the drives.
fn cluster_check(args: CheckArgs) -> anyhow::Result<()> {
    use oed_cluster::init;
    let CheckArgs {
        map,
        secret_file,
        s3_secret_file,
        drive_id,
        live,
        ca_file,
    } = args;
    let (loaded, mut found) = init::check_files(
        &map,
        secret_file.as_deref(),
        s3_secret_file.as_deref(),
        drive_id.as_deref(),
    );
    if let (Some(m), true) = (&loaded, live) {
        match admin_access(secret_file, ca_file.as_deref()) {
            Ok(access) => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let answers = rt.block_on(oed_tools::admin::statuses(m, &access));
                found
                    .problems
                    .extend(oed_tools::admin::live_problems(m, &answers));
            }
            Err(e) => found.problems.push(format!("--live: {e}")),
        }
    }
    for w in &found.warnings {
        println!("warning: {w}");
    }
    for p in &found.problems {
        println!("problem: {p}");
    }
    if !found.problems.is_empty() {
        std::process::exit(1);
    }
    if let Some(m) = loaded {
        let p = m.profile;
        println!(
            "ok: cluster {:?}, epoch {}, profile {}+{}, {} drives{}",
            m.cluster_id,
            m.epoch,
            p.k,
            p.m,
            m.drives.len(),
            if live {
                ", every drive answers as the map says"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// How `oedd admin` and `oedd cluster check --live` reach drives: the cluster secret from
/// OED_CLUSTER_SECRET or `secret_file`, and the cluster CA for TLS.
fn admin_access(
    secret_file: Option<PathBuf>,
    ca_file: Option<&std::path::Path>,
) -> anyhow::Result<oed_tools::admin::Access> {
    let config = Config {
        cluster_secret_file: secret_file,
        ..Config::default()
    };
    let secret = config.cluster_secret(std::env::var("OED_CLUSTER_SECRET").ok())?;
    Ok(oed_tools::admin::Access::new(&secret, ca_file)?)
}

fn admin(args: AdminArgs) -> anyhow::Result<()> {
    use oed_tools::admin;
    let map = oed_model::map::ClusterMap::load(&args.map)?;
    let access = admin_access(args.secret_file, args.ca_file.as_deref())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let all = |d: String| -> Vec<String> {
        if d == "all" {
            map.drives.iter().map(|d| d.id.clone()).collect()
        } else {
            vec![d]
        }
    };
    match args.action {
        AdminAction::Status { json } => {
            let answers = rt.block_on(admin::statuses(&map, &access));
            if json {
                println!("{}", serde_json::to_string_pretty(&answers)?);
            } else {
                print!("{}", admin::report(&map, &answers));
            }
        }
        AdminAction::Scrub { drive } => {
            print!(
                "{}",
                rt.block_on(admin::act(&map, &access, "scrub", &all(drive)))?
            );
        }
        AdminAction::Refill { drive } => {
            print!(
                "{}",
                rt.block_on(admin::act(&map, &access, "refill", &[drive]))?
            );
        }
        AdminAction::Retry { drive } => {
            print!(
                "{}",
                rt.block_on(admin::act(&map, &access, "retry", &all(drive)))?
            );
        }
        action => admin_map(&args.map, &map, &access, action, &rt)?,
    }
    Ok(())
}

/// The `oedd admin` actions that change the cluster map.
fn admin_map(
    path: &std::path::Path,
    map: &oed_model::map::ClusterMap,
    access: &oed_tools::admin::Access,
    action: AdminAction,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<()> {
    use oed_model::map::DriveState;
    use oed_tools::admin;
    let state_of = |id: &str| map.drives.iter().find(|d| d.id == id).map(|d| d.state);
    let mark = |id: &str, state: DriveState| -> anyhow::Result<()> {
        let new = admin::change_map(path, |m| admin::set_state(m, id, state))?;
        println!("{id} is {} from epoch {}", state.label(), new.epoch);
        print!("{}", rt.block_on(admin::push(&new, access)));
        Ok(())
    };
    match action {
        AdminAction::Out { drive } => mark(&drive, DriveState::Out)?,
        AdminAction::In { drive } => mark(&drive, DriveState::In)?,
        AdminAction::Drain { drive } => {
            match state_of(&drive) {
                None => anyhow::bail!("drive {drive:?} is not in the cluster map"),
                Some(DriveState::In) => mark(&drive, DriveState::Out)?,
                Some(DriveState::Out) => {}
            }
            let map = oed_model::map::ClusterMap::load(path)?;
            print!(
                "{}",
                rt.block_on(admin::act(&map, access, "drain", &[drive]))?
            );
        }
        AdminAction::Remove { drive } => {
            rt.block_on(admin::check_drained(map, access, &drive))?;
            let new = admin::change_map(path, |m| {
                m.drives.retain(|d| d.id != drive);
                Ok(())
            })?;
            println!(
                "{drive} is removed from epoch {}; stop its oedd now",
                new.epoch
            );
            print!("{}", rt.block_on(admin::push(&new, access)));
        }
        AdminAction::Push => print!("{}", rt.block_on(admin::push(map, access))),
        AdminAction::Status { .. }
        | AdminAction::Scrub { .. }
        | AdminAction::Refill { .. }
        | AdminAction::Retry { .. } => {}
    }
    Ok(())
}

fn op(args: OpArgs) -> anyhow::Result<()> {
    let var = |name: &str| {
        std::env::var(name).with_context(|| format!("{name} is not set (the S3 credentials)"))
    };
    let target = oed_tools::op_client::Target {
        endpoint: args.endpoint,
        region: args.region,
        access_key: var("AWS_ACCESS_KEY_ID")?,
        secret_key: var("AWS_SECRET_ACCESS_KEY")?,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Progress on standard error while the drives work (the answer comes whole at the end).
    let mut ticked = false;
    let answer = rt.block_on(oed_tools::op_client::run(
        &target,
        &args.bucket,
        &args.key,
        &args.operation,
        args.range.as_deref(),
        |spent| {
            ticked = true;
            eprint!("\roedd op: running, {} s", spent.as_secs());
        },
    ));
    if ticked {
        eprintln!();
    }
    let answer = answer.map_err(|e| anyhow::anyhow!("{e}"))?;
    let pretty = serde_json::from_str::<serde_json::Value>(&answer)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or(answer);
    println!("{pretty}");
    Ok(())
}

fn bench(args: BenchArgs) -> anyhow::Result<()> {
    use oed_tools::bench::{self, peak};
    use std::io::IsTerminal as _;
    let var = |name: &str| {
        std::env::var(name).with_context(|| format!("{name} is not set (the S3 credentials)"))
    };
    let bad = |e: String| anyhow::anyhow!(e);
    let object_bytes = bench::parse_size(&args.size).map_err(bad)?;
    let objects = match args.count {
        Some(0) => anyhow::bail!("--count must be at least 1"),
        Some(n) => n,
        None => bench::parse_size(&args.total)
            .map_err(bad)?
            .div_ceil(object_bytes),
    };
    let rate = |r: &Option<String>| r.as_deref().map(peak::parse_rate).transpose().map_err(bad);
    let endpoints = u32::try_from(args.endpoint.len()).unwrap_or(u32::MAX);
    let drives = args.drives.unwrap_or(endpoints);
    anyhow::ensure!(args.clients >= 1, "--clients must be at least 1");
    anyhow::ensure!(args.threads >= 1, "--threads must be at least 1");
    anyhow::ensure!(
        args.sample_seconds >= 0.1,
        "--sample-seconds must be at least 0.1"
    );
    let environment = args
        .environment
        .as_ref()
        .map(|p| -> anyhow::Result<serde_json::Value> {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("--environment {}", p.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("--environment {}: not JSON", p.display()))
        })
        .transpose()?;
    let opts = bench::BenchOptions {
        endpoints: args.endpoint,
        access_key: var("AWS_ACCESS_KEY_ID")?,
        secret_key: var("AWS_SECRET_ACCESS_KEY")?,
        region: args.region,
        bucket: args.bucket,
        object_bytes,
        objects,
        clients: args.clients,
        reps: args.reps.max(1),
        phases: bench::parse_phases(&args.phases, args.prefix.is_some()).map_err(bad)?,
        operation: serde_json::from_str(&args.operation)
            .with_context(|| "--operation is not JSON")?,
        metrics: args.metrics,
        peak: peak::PeakInputs {
            drives,
            k: args.k,
            m: args.m,
            gateways: endpoints,
            drive_link_bit_s: rate(&args.drive_link)?,
            client_link_bit_s: rate(&args.client_link)?,
            mtu: args.mtu,
            disks: args.disks.unwrap_or(drives),
            disk_mb_s: args.disk_mb_s,
            disk_read_mb_s: args.disk_read_mb_s,
        },
        between_phases: args.between_phases,
        environment,
        ca_file: args.ca_file,
        keep: args.keep,
        prefix: args.prefix,
        max_phase: Duration::from_secs(args.max_phase_seconds),
        request_timeout: Duration::from_secs(args.request_timeout_seconds),
        sample_every: Duration::from_secs_f64(args.sample_seconds),
        progress: !args.quiet && std::io::stderr().is_terminal(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()?;
    let quiet = args.quiet;
    let run = rt
        .block_on(bench::run(&opts, |line| {
            if !quiet {
                eprintln!("oedd bench: {line}");
            }
        }))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let json = serde_json::to_string_pretty(&run)?;
    if let Some(path) = &args.json_file {
        std::fs::write(path, &json).with_context(|| format!("--json-file {}", path.display()))?;
    }
    if let Some(path) = &args.svg {
        std::fs::write(path, bench::svg::plot(&run))
            .with_context(|| format!("--svg {}", path.display()))?;
    }
    if args.json {
        eprint!("{}", run.table());
        println!("{json}");
    } else {
        print!("{}", run.table());
    }
    Ok(())
}

fn dev(args: DevArgs) -> anyhow::Result<()> {
    let opts = oed_tools::dev::DevOptions {
        drives: args.drives,
        k: args.k,
        m: args.m,
        chunk_size: args.chunk_size,
        dir: args.dir,
        fsync: !args.no_fsync,
        oedd: std::env::current_exe().context("locating the oedd binary")?,
        tls: args.tls || args.tls_clear_peers,
        clear_peers: args.tls_clear_peers,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Watched before the first drive starts: a stop asked for while the drives start, or
    // at any moment after the banner, stops them all. Unwatched, SIGTERM would end this
    // process alone and leave its drives running.
    let stop = {
        let _entered = runtime.enter();
        StopSignals::watch()?
    };
    let cluster = oed_tools::dev::DevCluster::start(&opts)?;
    println!("{}", cluster.banner());
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        tokio::spawn(async move {
            stop.wait().await;
            eprintln!("oedd dev: stopping the drives");
            token.cancel();
        });
        cluster.run_until(shutdown).await;
    });
    Ok(())
}

/// glibc gives every thread that allocates its own malloc arena and keeps freed memory in
/// each; with the runtime's worker and blocking threads moving shard-sized buffers about,
/// that held 30+ MiB after a burst of 8 concurrent 1 MiB shard writes, against about
/// 4 MiB with one arena and no throughput lost (docs/drive.md, "Memory"). `MALLOC_ARENA_MAX`
/// in the environment still wins.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(
    unsafe_code,
    reason = "mallopt is the only way to set the arena count in-process"
)]
fn limit_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator tunable; it runs before any other thread.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}

/// Raises the soft limit on open files to the hard one: each connection takes a
/// descriptor, and so do shard files and RocksDB. Warns when `max_connections` would not
/// leave 256 of them for the rest.
fn raise_open_files(max_connections: usize) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    if lim
        .maximum
        .is_some_and(|hard| lim.current.is_some_and(|soft| soft < hard))
    {
        lim.current = lim.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, lim) {
            tracing::debug!(error = %e, "cannot raise the open-file limit");
        }
    }
    if let Some(soft) = getrlimit(Resource::Nofile).current
        && max_connections as u64 + 256 > soft
    {
        tracing::warn!(
            open_files = soft,
            max_connections,
            "the open-file limit leaves too little room for max_connections plus 256 for \
             shard files and RocksDB; raise it (LimitNOFILE, ulimit -n) or lower max_connections"
        );
    }
}

fn meter(args: MeterArgs) -> anyhow::Result<()> {
    init_tracing();
    let overrides = parse_sets(args.set)?;
    let config = Config::load(args.config.as_deref(), std::env::vars(), &overrides)?;
    let meter_config = oed_daemon::server::meter_config(&config)?;
    let period = std::time::Duration::from_millis(config.meter_period_ms);
    match args.action {
        MeterAction::Show { readings } => {
            let registry = prometheus::Registry::new();
            let mut meter = oed_meter::Meter::new(&meter_config, &registry)?;
            println!(
                "source: {} ({})",
                meter.source_label(),
                meter
                    .method()
                    .map_or("off", oed_meter::power::Method::as_str)
            );
            println!("data disk: {}", meter.device().unwrap_or("none found"));
            meter.sample();
            for _ in 0..readings {
                std::thread::sleep(period);
                let (activity, watts) = meter.sample();
                match (activity, watts) {
                    (Some(a), Some(w)) => println!(
                        "{w:8.3} W   cpu {:5.1}%  disk {:5.1}%  net {:10.0} B/s",
                        a.cpu_busy * 100.0,
                        a.disk_busy * 100.0,
                        a.network_bytes_per_second
                    ),
                    _ => println!("no reading (see the log above)"),
                }
            }
        }
        MeterAction::Calibrate { seconds, name } => {
            let samples = usize::try_from((seconds * 1000 / config.meter_period_ms).max(3))?;
            let base = meter_config.source.profile.clone();
            eprintln!(
                "sampling {samples} readings, one per {} ms",
                config.meter_period_ms
            );
            let fit = oed_meter::calibrate(&meter_config, &base, samples, period, &name, |n| {
                if n % 10 == 0 {
                    eprint!("\r{n}/{samples}");
                }
            })?;
            eprintln!(
                "\rfitted on {} readings; RMS error {:.3} W",
                fit.samples, fit.rmse_watts
            );
            print!("{}", fit.profile.to_toml());
        }
    }
    Ok(())
}

fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OED_LOG")
                // s3s logs every refused request at error level; OED logs what matters.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,s3s=off")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn parse_sets(set: Vec<String>) -> anyhow::Result<Vec<(String, String)>> {
    let mut overrides = Vec::new();
    for kv in set {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--set {kv:?}: expected FIELD=VALUE"))?;
        anyhow::ensure!(
            k != "cluster_secret" && k != "s3_secret_key",
            "secrets are never taken from flags"
        );
        overrides.push((k.to_owned(), v.to_owned()));
    }
    Ok(overrides)
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    limit_malloc_arenas();
    init_tracing();
    let released = oed_daemon::loader_pages::release_relocation_pages();
    tracing::debug!(
        kib = released / 1024,
        "gave back the pages of the executable's relocations"
    );
    let mut overrides = Vec::new();
    if let Some(d) = args.data_dir {
        overrides.push(("data_dir".to_owned(), toml_string(&d.display().to_string())));
    }
    if let Some(l) = args.listen {
        overrides.push(("listen".to_owned(), toml_string(&l)));
    }
    if let Some(id) = args.drive_id {
        overrides.push(("drive_id".to_owned(), toml_string(&id)));
    }
    overrides.extend(parse_sets(args.set)?);
    let config = Config::load(args.config.as_deref(), std::env::vars(), &overrides)?;
    raise_open_files(config.max_connections);
    let secret = config.cluster_secret(std::env::var("OED_CLUSTER_SECRET").ok())?;
    let s3_secret = config.s3_secret(std::env::var("OED_S3_SECRET_KEY").ok())?;
    if s3_secret.is_none() {
        tracing::warn!(
            "no S3 secret (OED_S3_SECRET_KEY or s3_secret_key_file): serving the peer API only"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get().min(4)))
        .max_blocking_threads(16)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        // Watched before anything is opened or announced: a SIGTERM at any moment after
        // "listening on" and READY=1 (systemd's stop, a script's kill) stops the drive.
        let stop = StopSignals::watch()?;
        let drive = DriveServer::open(&config, &secret, s3_secret.as_deref())
            .with_context(|| format!("opening the store in {}", config.data_dir.display()))?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("listen: cannot bind {}", config.listen))?;
        let addr = listener.local_addr()?;
        tracing::info!(%addr, drive = %config.drive_id, "serving");
        // Bound before "listening on" is printed: what waits for that line finds every
        // port of the drive taken.
        let metrics = match config.metrics_listen {
            Some(at) => {
                let l = tokio::net::TcpListener::bind(at)
                    .await
                    .with_context(|| format!("metrics_listen: cannot bind {at}"))?;
                println!("oedd: metrics on http://{}/metrics", l.local_addr()?);
                Some(l)
            }
            None => None,
        };
        if drive.tls.is_some() {
            let suites = oed_peer::tls::suite_order();
            println!(
                "oedd: TLS on (certificate {}; reloaded on SIGHUP); suites preferred: {}",
                config
                    .tls_cert_file
                    .as_deref()
                    .unwrap_or(std::path::Path::new(""))
                    .display(),
                suites[..2.min(suites.len())].join(", ")
            );
        }
        // Scripts and tests read the bound address (the port may have been 0) from here.
        println!("oedd: listening on {addr}");
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        tokio::spawn(async move {
            stop.wait().await;
            tracing::info!("shutting down");
            let _ = oed_daemon::notify::notify("STOPPING=1");
            token.cancel();
        });
        // systemd (Type=notify) starts the next unit, or the next drive of a rolling
        // upgrade, only once this drive answers.
        if let Err(e) = oed_daemon::notify::notify(&format!("READY=1\nSTATUS=serving on {addr}")) {
            tracing::warn!(error = %e, "could not tell the service manager this drive is ready");
        }
        drive.serve(listener, metrics, shutdown).await?;
        anyhow::Ok(())
    })
}

/// SIGTERM and SIGINT, the two ways a drive or `oedd dev` is asked to stop.
///
/// Made before the process says it is ready, and kept until it stops: tokio installs a
/// signal's handler when its first stream is made, and from then on a signal that no
/// stream is subscribed to is swallowed, not acted on. Made after the readiness line, as
/// before, a stop sent right after that line either ended the process by the default
/// action (no drain, `oedd dev`'s drives left running) or, arriving between the handler
/// and the stream, was lost and left a process that ignored every later SIGTERM.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Starts watching both signals; must run inside a tokio runtime with signals enabled.
    ///
    /// # Errors
    /// When either cannot be watched: the caller stops starting, since it could not be
    /// stopped.
    fn watch() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot watch SIGINT")?,
        })
    }

    /// Returns at the first SIGTERM or SIGINT delivered since [`StopSignals::watch`].
    async fn wait(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// A flag's text as a quoted TOML string, so it is never read as a number or a table.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}
