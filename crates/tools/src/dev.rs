//! `oedd dev`: a whole cluster on one machine, for trying OED out. It writes a cluster
//! map, starts one `oedd serve` process per drive (each with its own data directory and
//! port on 127.0.0.1, as on real drives), prints the S3 endpoint and credentials, and on
//! Ctrl-C stops every drive with SIGTERM and waits for them.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use oed_model::error::{Error, Result};
use oed_model::map::{ClusterMap, DriveEntry, Profile};

/// What `oedd dev` is asked for.
#[derive(Clone, Debug)]
pub struct DevOptions {
    /// Drives to start.
    pub drives: usize,
    /// Data shards.
    pub k: u16,
    /// Parity shards.
    pub m: u16,
    /// Bytes of each shard per stripe (the profile's `chunk_size`).
    pub chunk_size: u32,
    /// Where the drives keep their data; a temporary directory (removed at the end)
    /// when `None`.
    pub dir: Option<PathBuf>,
    /// Sync every write to disk (as production drives do).
    pub fsync: bool,
    /// The `oedd` binary to start for each drive.
    pub oedd: PathBuf,
    /// Serve S3 and the peer API over TLS, with a throwaway CA made for this cluster.
    pub tls: bool,
    /// With `tls`, the drives still talk to each other in the clear (the map's `tls` is
    /// false): S3 clients get TLS, the back network is trusted.
    pub clear_peers: bool,
    /// Drives started outside the map, as spares waiting to be added (`oedd admin add`).
    pub spares: usize,
}

/// One running drive.
struct DriveProcess {
    id: String,
    child: Child,
}

/// The cluster `oedd dev` started.
pub struct DevCluster {
    drives: Vec<DriveProcess>,
    /// The S3 endpoint (the first drive; every drive serves S3).
    pub endpoint: String,
    /// Every drive's S3 endpoint.
    pub endpoints: Vec<String>,
    /// The S3 access key.
    pub access_key: String,
    /// The S3 secret key.
    pub secret_key: String,
    /// Every drive's `/metrics` URL.
    pub metrics: Vec<String>,
    /// The data directory.
    pub dir: PathBuf,
    /// The CA that signed the drives' certificates, with `--tls`: what clients trust.
    pub ca: Option<PathBuf>,
    /// The spares, as `oedd admin add` takes them (`ID=HOST:PORT`).
    pub spares: Vec<String>,
    remove_dir: bool,
}

fn random_hex(bytes: usize) -> String {
    (0..bytes).fold(String::new(), |mut s, _| {
        let _ = write!(s, "{:02x}", rand::random::<u8>());
        s
    })
}

/// Free ports on 127.0.0.1 (bound and released; a drive binds its own a moment later).
///
/// # Errors
/// When no port can be bound.
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// How often `oedd dev` starts its drives again, on other ports, when one exits before
/// it listens.
const START_ATTEMPTS: usize = 3;

/// What one attempt at starting the drives came to.
enum Launch {
    Up(DevCluster),
    /// This drive exited before it listened; the others were stopped again.
    Exited(String),
}

impl DevCluster {
    /// Writes the map and starts the drives; returns once every drive listens.
    ///
    /// The ports are found free and released before the drives bind them: another
    /// process can take one meanwhile. A drive that exits before it listens makes the
    /// whole cluster start again on other ports, up to three times.
    ///
    /// # Errors
    /// [`Error::Config`] for an impossible profile; [`Error::Io`] when a drive cannot be
    /// started, exits before it listens three times over, or does not come up within
    /// 60 s (the drives started are stopped again).
    pub fn start(opts: &DevOptions) -> Result<Self> {
        Self::start_on(opts, free_ports)
    }

    /// [`DevCluster::start`] with the ports of each attempt taken from `ports` (asked
    /// for two per drive: S3 and peers, then metrics).
    ///
    /// # Errors
    /// As [`DevCluster::start`], and what `ports` returns.
    #[doc(hidden)]
    pub fn start_on(
        opts: &DevOptions,
        mut ports: impl FnMut(usize) -> Result<Vec<u16>>,
    ) -> Result<Self> {
        if opts.drives < usize::from(opts.k + opts.m) {
            return Err(Error::Config(format!(
                "--drives {} is fewer than k + m = {}",
                opts.drives,
                opts.k + opts.m
            )));
        }
        let (dir, remove_dir) = match &opts.dir {
            Some(d) => (d.clone(), false),
            None => (
                std::env::temp_dir().join(format!("oed-dev-{}", random_hex(4))),
                true,
            ),
        };
        std::fs::create_dir_all(&dir)?;
        let mut attempt = 1;
        let started = opts.drives + opts.spares;
        loop {
            let all_ports = ports(2 * started)?;
            if all_ports.len() != 2 * started {
                return Err(Error::Config(format!(
                    "{} ports for {started} drives",
                    all_ports.len(),
                )));
            }
            match Self::launch(opts, &dir, remove_dir, &all_ports)? {
                Launch::Up(cluster) => return Ok(cluster),
                Launch::Exited(id) if attempt < START_ATTEMPTS => {
                    eprintln!(
                        "oedd dev: {id} exited before it listened (its log is above); \
                         starting the drives again on other ports"
                    );
                    attempt += 1;
                }
                Launch::Exited(id) => {
                    if remove_dir {
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                    return Err(Error::Io(std::io::Error::other(format!(
                        "{id} exited before it listened, {START_ATTEMPTS} times (its log is above)"
                    ))));
                }
            }
        }
    }

    /// Writes the map of drives on `all_ports` and starts them.
    fn launch(
        opts: &DevOptions,
        dir: &Path,
        remove_dir: bool,
        all_ports: &[u16],
    ) -> Result<Launch> {
        let (ports, metric_ports) = all_ports.split_at(all_ports.len() / 2);
        let map_path = dir.join("cluster.toml");
        let map = write_map(opts, &ports[..opts.drives], &map_path)?;
        let spares = spare_entries(opts.drives, &ports[opts.drives..]);
        let all: Vec<&DriveEntry> = map.drives.iter().chain(&spares).collect();
        let pki = if opts.tls {
            let ids: Vec<String> = all.iter().map(|d| d.id.clone()).collect();
            Some(oed_peer::tls::DevPki::create(&dir.join("tls"), &ids)?)
        } else {
            None
        };
        let cluster_secret = random_hex(16);
        // For `oedd admin`; readable by this user only.
        let secret_path = dir.join("cluster.secret");
        std::fs::write(&secret_path, &cluster_secret)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&secret_path, std::fs::Permissions::from_mode(0o600))?;
        }
        let secret_key = std::env::var("OED_S3_SECRET_KEY").unwrap_or_else(|_| random_hex(16));
        let mut cluster = DevCluster {
            drives: Vec::new(),
            endpoint: String::new(),
            endpoints: Vec::new(),
            metrics: metric_ports
                .iter()
                .map(|p| format!("http://127.0.0.1:{p}/metrics"))
                .collect(),
            access_key: "oed".into(),
            secret_key,
            dir: dir.to_path_buf(),
            ca: pki.as_ref().map(|p| p.ca.clone()),
            spares: spares
                .iter()
                .map(|d| format!("{}={}", d.id, d.address))
                .collect(),
            // Until every drive listens: another attempt may use the directory.
            remove_dir: false,
        };
        std::fs::write(
            dir.join("prometheus.yml"),
            scrape_config(&map.cluster_id, &all, metric_ports),
        )?;
        let mut waiting = Vec::new();
        for (i, (d, metrics_port)) in all.iter().zip(metric_ports).enumerate() {
            let spawned = spawn_drive(
                opts,
                d,
                *metrics_port,
                &dir.join(&d.id),
                &map_path,
                &cluster_secret,
                (&cluster.access_key, &cluster.secret_key),
                pki.as_ref()
                    .map(|p| (&p.drives[i].0, &p.drives[i].1, &p.ca)),
            );
            let (child, rx) = match spawned {
                Ok(started) => started,
                Err(e) => {
                    // Dropping the cluster stops the drives started.
                    cluster.remove_dir = remove_dir;
                    return Err(e);
                }
            };
            waiting.push(rx);
            cluster.drives.push(DriveProcess {
                id: d.id.clone(),
                child,
            });
        }
        let deadline = Instant::now() + Duration::from_mins(1);
        for (rx, d) in waiting.iter().zip(&all) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(_) => cluster.endpoints.push(d.url(opts.tls)),
                // Its output ended: it exited.
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    cluster.stop(Duration::from_secs(5));
                    return Ok(Launch::Exited(d.id.clone()));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    cluster.remove_dir = remove_dir;
                    cluster.stop(Duration::from_secs(5));
                    return Err(Error::Io(std::io::Error::other(format!(
                        "{} did not start within 60 s (its log is above)",
                        d.id
                    ))));
                }
            }
        }
        cluster.endpoint = cluster.endpoints[0].clone();
        cluster.remove_dir = remove_dir;
        Ok(Launch::Up(cluster))
    }

    /// What a user needs: the endpoint, the credentials and a line to paste.
    #[must_use]
    pub fn banner(&self) -> String {
        let (ca_line, ca_env, ca_flag) = match &self.ca {
            Some(ca) => (
                format!(
                    "oedd dev: TLS    the drives' certificates are signed by the throwaway CA {}\n",
                    ca.display()
                ),
                format!(" AWS_CA_BUNDLE={}", ca.display()),
                format!(" --ca-file {}", ca.display()),
            ),
            None => (String::new(), String::new(), String::new()),
        };
        format!(
            "oedd dev: {n} drives, data in {dir}\n\
             oedd dev: endpoint {ep}\n\
             oedd dev: access key {ak}\n\
             oedd dev: secret key {sk}\n\
             oedd dev: console {ep}/_oed/console/ (log in with the access key and secret key)\n\
             oedd dev: metrics {metrics} (one per drive; Prometheus scrape config in {dir}/prometheus.yml)\n\
             {ca_line}\
             oedd dev: health  oedd admin --map {dir}/cluster.toml --secret-file {dir}/cluster.secret{ca_flag} status\n\
             {spares}\
             \n\
             Every drive serves S3 (also {others}). Try:\n\
             \n  export AWS_ACCESS_KEY_ID={ak} AWS_SECRET_ACCESS_KEY={sk} AWS_DEFAULT_REGION=us-east-1{ca_env}\n  \
             aws --endpoint-url {ep} s3 mb s3://demo\n  \
             aws --endpoint-url {ep} s3 cp ./some-file s3://demo/\n  \
             aws --endpoint-url {ep} s3 ls s3://demo\n\
             \nCtrl-C stops the cluster.",
            n = self.drives.len() - self.spares.len(),
            dir = self.dir.display(),
            ep = self.endpoint,
            ak = self.access_key,
            sk = self.secret_key,
            others = self.endpoints[1..self.endpoints.len() - self.spares.len()].join(", "),
            spares = if self.spares.is_empty() {
                String::new()
            } else {
                format!(
                    "oedd dev: {} spare drive(s) outside the map; this adds them:\n\
                     oedd admin --map {dir}/cluster.toml --secret-file {dir}/cluster.secret{ca_flag} add {}\n",
                    self.spares.len(),
                    self.spares.join(" "),
                    dir = self.dir.display(),
                )
            },
            metrics = self.metrics.join(" "),
        )
    }

    /// Runs until `shutdown` is cancelled, reporting drives that exit on their own; then
    /// stops every drive.
    pub async fn run_until(mut self, shutdown: CancellationToken) {
        let mut reported = vec![false; self.drives.len()];
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            for (d, seen) in self.drives.iter_mut().zip(reported.iter_mut()) {
                if !*seen && let Ok(Some(status)) = d.child.try_wait() {
                    eprintln!("oedd dev: {} exited ({status}); the others go on", d.id);
                    *seen = true;
                }
            }
        }
        self.stop(Duration::from_secs(20));
    }

    /// SIGTERM to every drive, then waits up to `within` (SIGKILL after that); removes
    /// a temporary data directory.
    pub fn stop(&mut self, within: Duration) {
        for d in &self.drives {
            if let Some(pid) = rustix::process::Pid::from_raw(d.child.id().cast_signed()) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        let deadline = Instant::now() + within;
        for d in &mut self.drives {
            loop {
                match d.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        eprintln!("oedd dev: {} did not stop in time; killing it", d.id);
                        let _ = d.child.kill();
                        let _ = d.child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        self.drives.clear();
        if self.remove_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        if !self.drives.is_empty() {
            self.stop(Duration::from_secs(10));
        }
    }
}

/// Writes the map of drives on `ports` to `path`. A directory used before holds drives
/// that ran its earlier map: the new one (new ports) follows it with a higher epoch.
fn write_map(opts: &DevOptions, ports: &[u16], path: &Path) -> Result<ClusterMap> {
    let old = ClusterMap::load(path).ok();
    // Drives marked out in the directory's earlier map stay out.
    let state_of = |id: &str| {
        old.as_ref()
            .and_then(|m| m.drives.iter().find(|d| d.id == id))
            .map_or(oed_model::map::DriveState::In, |d| d.state)
    };
    let map = ClusterMap {
        cluster_id: "dev".into(),
        epoch: old.as_ref().map_or(1, |old| old.epoch + 1),
        tls: opts.tls && !opts.clear_peers,
        profile: Profile {
            k: opts.k,
            m: opts.m,
            chunk_size: opts.chunk_size,
        },
        drives: ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let id = format!("drive-{}", i + 1);
                DriveEntry {
                    state: state_of(&id),
                    id,
                    address: format!("127.0.0.1:{p}"),
                    domain: None,
                    capacity_gb: None,
                    since: None,
                }
            })
            .collect(),
    };
    map.validate().map_err(Error::Config)?;
    std::fs::write(
        path,
        toml::to_string(&map).map_err(|e| Error::Config(e.to_string()))?,
    )?;
    Ok(map)
}

/// The spares on `ports`: further drive-N names after the map's `drives`, outside it.
fn spare_entries(drives: usize, ports: &[u16]) -> Vec<DriveEntry> {
    ports
        .iter()
        .enumerate()
        .map(|(i, p)| DriveEntry {
            id: format!("drive-{}", drives + i + 1),
            address: format!("127.0.0.1:{p}"),
            domain: None,
            state: oed_model::map::DriveState::In,
            capacity_gb: None,
            since: None,
        })
        .collect()
}

/// Starts one drive's `oedd serve`; the receiver gets its address once it listens.
/// `tls` names its certificate, its key and the cluster CA.
#[allow(clippy::too_many_arguments)]
fn spawn_drive(
    opts: &DevOptions,
    d: &DriveEntry,
    metrics_port: u16,
    data: &Path,
    map_path: &Path,
    cluster_secret: &str,
    (access_key, secret_key): (&str, &str),
    tls: Option<(&PathBuf, &PathBuf, &PathBuf)>,
) -> Result<(Child, std::sync::mpsc::Receiver<String>)> {
    let mut cmd = Command::new(&opts.oedd);
    cmd.arg("serve")
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", &d.address, "--drive-id", &d.id])
        .arg("--set")
        .arg(format!("metrics_listen=\"127.0.0.1:{metrics_port}\""))
        .arg("--set")
        .arg(format!("cluster_map={}", toml_str(map_path)))
        .arg("--set")
        .arg(format!("s3_access_key={}", toml_str(Path::new(access_key))))
        .arg("--set")
        .arg(format!(
            "fsync={}",
            if opts.fsync {
                "\"always\""
            } else {
                "\"never\""
            }
        ))
        // Several drives share one disk here: keep the reserve small.
        .arg("--set")
        .arg("reserve_bytes=67108864")
        .args(tls.into_iter().flat_map(|(cert, key, ca)| {
            [
                ("tls_cert_file", cert),
                ("tls_key_file", key),
                ("tls_ca_file", ca),
            ]
            .map(|(name, path)| ["--set".to_owned(), format!("{name}={}", toml_str(path))])
            .into_iter()
            .flatten()
        }))
        .env("OED_CLUSTER_SECRET", cluster_secret)
        .env("OED_S3_SECRET_KEY", secret_key)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if std::env::var_os("OED_LOG").is_none() {
        // s3s logs every refused request at error level; OED logs what matters.
        cmd.env("OED_LOG", "warn,s3s=off");
    }
    let mut child = cmd.spawn()?;
    let stdout = child.stdout.take();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Some(out) = stdout else { return };
        for line in BufReader::new(out)
            .lines()
            .map_while(std::result::Result::ok)
        {
            if let Some(addr) = line.strip_prefix("oedd: listening on ") {
                let _ = tx.send(addr.to_owned());
            }
        }
    });
    Ok((child, rx))
}

/// A Prometheus configuration that scrapes every drive each 5 s, labelled by drive id.
fn scrape_config(cluster_id: &str, drives: &[&DriveEntry], metric_ports: &[u16]) -> String {
    let mut out = String::from(
        "# Written by `oedd dev`: prometheus --config.file=prometheus.yml\n\
         global:\n  scrape_interval: 5s\n\
         scrape_configs:\n  - job_name: oed\n    static_configs:\n",
    );
    for (d, p) in drives.iter().zip(metric_ports) {
        let _ = write!(
            out,
            "      - targets: [\"127.0.0.1:{p}\"]\n        labels: {{drive: \"{}\", cluster: \"{cluster_id}\"}}\n",
            d.id
        );
    }
    out
}

fn toml_str(p: &Path) -> String {
    toml::Value::String(p.display().to_string()).to_string()
}
