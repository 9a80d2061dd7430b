//! `oedd`: parses the command line, sets up tracing and signals, binds, and calls the
//! library. The commands a drive does not run for itself (`dev`, `op`, `bench`, `admin`,
//! `cluster`) are `oedd-tools`'s: `oedd` replaces itself with that binary for them.

use anyhow::Context;
use clap::Parser as _;
use oed_daemon::cli::{Cli, Command, MeterAction, MeterArgs, ServeArgs};
use oed_daemon::init_tracing;
use oed_daemon::server::DriveServer;
use oed_daemon::signals::StopSignals;
use oed_model::config::Config;
use tokio_util::sync::CancellationToken;

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Version => println!("{}", oed_daemon::build_info()),
        Command::ConfigDefaults => print!("{}", Config::defaults_toml()),
        Command::Man => {
            use std::io::Write as _;
            let page = oed_daemon::cli::man_page()?;
            std::io::stdout().lock().write_all(&page)?;
        }
        Command::Serve(args) => serve(args)?,
        Command::Meter(args) => meter(args)?,
        Command::Dev(_)
        | Command::Op(_)
        | Command::Bench(_)
        | Command::Admin(_)
        | Command::Cluster(_) => return Err(run_tools()),
    }
    Ok(())
}

/// The name of the binary that runs `dev`, `op`, `bench`, `admin` and `cluster`.
const TOOLS: &str = "oedd-tools";

/// Replaces this process with [`TOOLS`], found beside this binary, given the same
/// arguments; returns only when that fails.
fn run_tools() -> anyhow::Error {
    use std::os::unix::process::CommandExt as _;
    let tools = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name(TOOLS),
        Err(e) => return anyhow::anyhow!("cannot locate this binary, nor {TOOLS} beside it: {e}"),
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| "oedd".into());
    let e = std::process::Command::new(&tools)
        .arg0(arg0)
        .args(args)
        .exec();
    anyhow::anyhow!(
        "cannot run {} (installed beside oedd; it runs dev, op, bench, admin and cluster): {e}",
        tools.display()
    )
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
        // Starting is over: what it alone ran need not stay mapped (docs/drive.md,
        // "The pages of starting"). The first seconds of serving still do work of their
        // own (the peers' first connections, the first rounds of the repair and metering
        // loops): their pages go once they have settled.
        oed_daemon::loader_pages::release_now_and_after_settling(shutdown.clone());
        drive.serve(listener, metrics, shutdown).await?;
        anyhow::Ok(())
    })
}

/// A flag's text as a quoted TOML string, so it is never read as a number or a table.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}
