//! `oedd-tools`: the commands of `oedd` that a drive does not run for itself (`dev`, `op`,
//! `bench`, `admin`, `cluster`), in a binary of their own so that their code is not part of
//! every drive's. `oedd` starts this binary in its own place (same process, same
//! arguments) for them; it is installed beside `oedd`.
#![allow(
    clippy::doc_markdown,
    reason = "doc comments here are clap's --help text, read as plain text"
)]

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser as _;
use oed_daemon::cli::{
    AdminAction, AdminArgs, BenchArgs, CheckArgs, Cli, ClusterAction, ClusterArgs, Command,
    DevArgs, InitArgs, OpArgs,
};
use oed_daemon::signals::StopSignals;
use oed_model::config::Config;
use tokio_util::sync::CancellationToken;

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Dev(args) => dev(args),
        Command::Op(args) => op(args),
        Command::Bench(args) => bench(*args),
        Command::Admin(args) => admin(args),
        Command::Cluster(args) => cluster(args),
        _ => anyhow::bail!(
            "oedd-tools runs dev, op, bench, admin and cluster; the others are oedd's"
        ),
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
        AdminAction::Lifecycle { drive } => {
            print!(
                "{}",
                rt.block_on(admin::act(&map, &access, "lifecycle", &all(drive)))?
            );
        }
        AdminAction::Key { action } => {
            print!("{}", rt.block_on(admin_keys(&map, &access, action))?);
        }
        AdminAction::Bucket { action } => {
            print!("{}", rt.block_on(admin_bucket(&map, &access, action))?);
        }
        action => admin_map(&args.map, &map, &access, action, &rt)?,
    }
    Ok(())
}

/// `oedd admin key ...`: the request, sent to a drive of the map, and its answer shown.
async fn admin_keys(
    map: &oed_model::map::ClusterMap,
    access: &oed_tools::admin::Access,
    action: oed_daemon::cli::KeyAction,
) -> anyhow::Result<String> {
    use oed_daemon::cli::KeyAction;
    use oed_model::account::AccountRequest as R;
    let (req, json) = match action {
        KeyAction::Create { name, json } => (
            R::KeyCreate {
                name,
                id: Some(oed_model::account::new_key_id()),
            },
            json,
        ),
        KeyAction::List { json } => (R::KeyList, json),
        KeyAction::Info { id, json } => (R::KeyInfo { id }, json),
        KeyAction::Delete { id } => (R::KeyDelete { id }, false),
        KeyAction::Rotate { id, json } => (R::KeyRotate { id }, json),
    };
    let answer = oed_tools::admin::accounts(map, access, &req).await?;
    Ok(oed_tools::admin::show_accounts(access, &answer, json)?)
}

/// `oedd admin bucket ...`.
async fn admin_bucket(
    map: &oed_model::map::ClusterMap,
    access: &oed_tools::admin::Access,
    action: oed_daemon::cli::BucketAction,
) -> anyhow::Result<String> {
    use oed_daemon::cli::BucketAction;
    use oed_model::account::{AccountRequest as R, Rights};
    let grant = |bucket: String, r: oed_daemon::cli::RightsArgs, give: bool| {
        let rights = Rights {
            read: r.read,
            write: r.write,
            owner: r.owner,
        };
        let key = r.key;
        if give {
            R::BucketAllow {
                bucket,
                key,
                rights,
            }
        } else {
            R::BucketDeny {
                bucket,
                key,
                rights,
            }
        }
    };
    let (req, json) = match action {
        BucketAction::Allow { bucket, rights } => (grant(bucket, rights, true), false),
        BucketAction::Deny { bucket, rights } => (grant(bucket, rights, false), false),
        BucketAction::Info { bucket, json } => (R::BucketInfo { bucket }, json),
    };
    let answer = oed_tools::admin::accounts(map, access, &req).await?;
    Ok(oed_tools::admin::show_accounts(access, &answer, json)?)
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
        AdminAction::Remove { drive, lost } => {
            if lost {
                rt.block_on(admin::check_lost(map, access, &drive))?;
            } else {
                rt.block_on(admin::check_drained(map, access, &drive))?;
            }
            let new = admin::change_map(path, |m| {
                m.drives.retain(|d| d.id != drive);
                Ok(())
            })?;
            if lost {
                println!(
                    "{drive} is removed from epoch {} as lost; the shards it held are rebuilt on other drives (oedd admin status shows the rebalance)",
                    new.epoch
                );
            } else {
                println!(
                    "{drive} is removed from epoch {}; stop its oedd now",
                    new.epoch
                );
            }
            print!("{}", rt.block_on(admin::push(&new, access)));
        }
        AdminAction::Add {
            drives,
            capacity_gb,
        } => admin_add(path, map, access, &drives, capacity_gb, rt)?,
        AdminAction::Push => print!("{}", rt.block_on(admin::push(map, access))),
        AdminAction::Key { .. }
        | AdminAction::Bucket { .. }
        | AdminAction::Status { .. }
        | AdminAction::Scrub { .. }
        | AdminAction::Refill { .. }
        | AdminAction::Retry { .. }
        | AdminAction::Lifecycle { .. } => {}
    }
    Ok(())
}

/// `oedd admin add`: new drives into the map at the next epoch, in when they wait as
/// spares, else out until they run.
fn admin_add(
    path: &std::path::Path,
    map: &oed_model::map::ClusterMap,
    access: &oed_tools::admin::Access,
    drives: &[String],
    capacity_gb: Option<u64>,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<()> {
    use oed_model::map::DriveState;
    use oed_tools::admin;
    // Unnamed drives continue the map's drive-N names.
    let first = map
        .drives
        .iter()
        .filter_map(|d| d.id.strip_prefix("drive-")?.parse::<usize>().ok())
        .max()
        .unwrap_or(map.drives.len())
        + 1;
    let weighed = map.drives.iter().any(|d| d.capacity_gb.is_some());
    if capacity_gb.is_some() && !weighed {
        anyhow::bail!(
            "no drive of the map has a capacity_gb: give every drive one in the map \
             file first (or add these without --capacity-gb); a weight on the new \
             drives alone would weigh them against a mean of nothing"
        );
    }
    let mut added = Vec::new();
    for (i, spec) in drives.iter().enumerate() {
        let mut d = oed_cluster::init::parse_drive(spec, first + i)?;
        d.capacity_gb = capacity_gb;
        d.since = Some(map.epoch + 1);
        added.push(d);
    }
    // Drives already running as spares take the map at once and are in; otherwise
    // they are out until they run: no write waits on a drive that is not there yet.
    let waiting = rt.block_on(admin::spares_waiting(map, access, &added));
    let all_waiting = waiting.iter().all(|w| *w);
    for d in &mut added {
        d.state = if all_waiting {
            DriveState::In
        } else {
            DriveState::Out
        };
    }
    let ids: Vec<String> = added.iter().map(|d| d.id.clone()).collect();
    let new = admin::change_map(path, |m| {
        m.drives.extend(added);
        Ok(())
    })?;
    if all_waiting {
        println!(
            "{} added (in) from epoch {}: they were waiting as spares; the drives move shards to them in the background (oedd admin status shows the rebalance)",
            ids.join(", "),
            new.epoch
        );
    } else {
        println!(
            "{} added (out) from epoch {}; start each with this map file (cluster_map = {}), then: oedd admin --map {} in ID",
            ids.join(", "),
            new.epoch,
            path.display(),
            path.display()
        );
    }
    let (said, failed) = rt.block_on(admin::push_report(&new, access));
    print!("{said}");
    let running: Vec<&String> = failed
        .iter()
        .filter(|id| all_waiting || !ids.contains(id))
        .collect();
    if !running.is_empty() {
        anyhow::bail!(
            "the map file has the new drives, but {running:?} did not take it: run `oedd admin push` once they answer"
        );
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

/// `oedd bench`'s phases (time-based unless a count or an amount is given), the objects
/// a phase writes or reads, and how uploads are signed.
fn bench_amounts(
    args: &BenchArgs,
    object_bytes: u64,
) -> anyhow::Result<(Option<Duration>, u64, oed_tools::bench::Signing)> {
    use oed_tools::bench;
    let bad = |e: String| anyhow::anyhow!(e);
    let duration = match (&args.duration, args.count, &args.total) {
        (Some(d), _, _) => Some(bench::parse_duration(d).map_err(bad)?),
        (None, None, None) => Some(bench::DEFAULT_DURATION),
        _ => None,
    };
    let objects = match (args.count, &args.total) {
        (Some(0), _) => anyhow::bail!("--count must be at least 1"),
        (Some(n), _) => n,
        (None, Some(total)) => bench::parse_size(total)
            .map_err(bad)?
            .div_ceil(object_bytes),
        // Time-based: a read without a write before it goes over 1 GiB of objects.
        (None, None) => (1u64 << 30).div_ceil(object_bytes),
    };
    let signing = if args.signing == "auto" {
        let scheme = args
            .endpoint
            .first()
            .and_then(|e| e.split_once("://"))
            .map(|(s, _)| s);
        bench::Signing::auto(scheme.unwrap_or("http"))
    } else {
        bench::Signing::from_name(&args.signing).map_err(bad)?
    };
    Ok((duration, objects, signing))
}

fn bench(args: BenchArgs) -> anyhow::Result<()> {
    use oed_tools::bench::{self, peak};
    use std::io::IsTerminal as _;
    let var = |name: &str| {
        std::env::var(name).with_context(|| format!("{name} is not set (the S3 credentials)"))
    };
    let bad = |e: String| anyhow::anyhow!(e);
    let object_bytes = bench::parse_size(&args.size).map_err(bad)?;
    let (duration, objects, signing) = bench_amounts(&args, object_bytes)?;
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
        duration,
        clients: args.clients,
        signing,
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
        oedd: std::env::current_exe()
            .context("locating this binary")?
            .with_file_name("oedd"),
        tls: args.tls || args.tls_clear_peers,
        clear_peers: args.tls_clear_peers,
        spares: args.spares,
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
