//! Helpers for OED's end-to-end tests: build and locate the real `oedd` binary, start it
//! as a child process on `127.0.0.1:0` in a temp directory, and always clean up.
//!
//! A test package cannot depend on another package's binary, so [`oedd`] asks cargo to
//! build it into the same target directory as the running test, once per test process.
//! `OED_TEST_OEDD_BIN` names another binary instead (an ARM build), and
//! `OED_TEST_OEDD_RUNNER` a command to run it with (qemu-user).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt as _;
use oed_model::drive::{Drive, DriveError, ShardUpload};
use oed_model::record::{ObjectRecord, VersionId};
use oed_peer::auth::PeerKey;
use oed_peer::client::PeerClient;

/// Path of a freshly built `oedd` (same target directory and profile as this test), or
/// `OED_TEST_OEDD_BIN`.
///
/// # Panics
/// When cargo cannot build it: every end-to-end test needs it, so failing loudly is right.
pub fn oedd() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(bin) = std::env::var_os("OED_TEST_OEDD_BIN") {
            return PathBuf::from(bin);
        }
        // The test binary lives in <target>/<profile>/deps/.
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("test executable is inside <target>/<profile>/deps");
        let target_dir = profile_dir.parent().expect("profile dir has a parent");
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args([
            "build",
            "--quiet",
            "-p",
            "oed-daemon",
            "--bin",
            "oedd",
            "--bin",
            "oedd-tools",
        ])
        .arg("--target-dir")
        .arg(target_dir);
        // Cargo sets these for the test crate, and some build scripts watch them (ring's:
        // `CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`): passed on, they would make this build
        // and the next `cargo test` rebuild those crates and everything above them in turn.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if [
                "CARGO_PKG_",
                "CARGO_MANIFEST_",
                "CARGO_CRATE_",
                "CARGO_BIN_",
            ]
            .iter()
            .any(|p| name.starts_with(p))
                || [
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "CARGO_RUSTC_CURRENT_DIR",
                ]
                .contains(&name.as_ref())
            {
                cmd.env_remove(name.as_ref());
            }
        }
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo to build oedd");
        assert!(status.success(), "building oedd failed");
        let path = profile_dir.join("oedd");
        assert!(path.exists(), "{} missing after build", path.display());
        path
    })
    .clone()
}

/// A command running `oedd` (through `OED_TEST_OEDD_RUNNER` when set).
#[must_use]
pub fn oedd_command() -> Command {
    match std::env::var("OED_TEST_OEDD_RUNNER") {
        Ok(runner) if !runner.trim().is_empty() => {
            let mut parts = runner.split_whitespace();
            let mut cmd = Command::new(parts.next().expect("runner is not empty"));
            cmd.args(parts).arg(oedd());
            cmd
        }
        _ => Command::new(oedd()),
    }
}

/// A multi-threaded runtime with two workers, as a drive has on the development machine.
///
/// # Panics
/// When the runtime cannot be built.
#[must_use]
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The id of every test drive [`Daemon::start`] starts (each alone in its map).
pub const DRIVE_ID: &str = "test-drive";

/// The secret every test drive uses.
pub const SECRET: &str = "test-cluster-secret-0123456789";

/// A running `oedd serve`, killed when dropped.
pub struct Daemon {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The data directory.
    pub data_dir: PathBuf,
    /// Extra `--set` settings it was started with.
    pub settings: Vec<String>,
    /// Its drive id.
    pub id: String,
}

impl Daemon {
    /// Starts a drive on `127.0.0.1:0` with its data in `data_dir` and extra `--set`
    /// settings (fsync stays on: tests check durability for real).
    ///
    /// # Panics
    /// When the daemon does not start within 60 s.
    #[must_use]
    pub fn start(data_dir: &Path, settings: &[&str]) -> Self {
        let settings: Vec<String> = settings.iter().map(|s| (*s).to_owned()).collect();
        Self::start_owned(data_dir, settings, "127.0.0.1:0", DRIVE_ID)
    }

    /// [`Daemon::start`] of a drive with id `id` instead of [`DRIVE_ID`].
    ///
    /// # Panics
    /// When the daemon does not start within 60 s.
    #[must_use]
    pub fn start_as(data_dir: &Path, id: &str, settings: &[&str]) -> Self {
        let settings: Vec<String> = settings.iter().map(|s| (*s).to_owned()).collect();
        Self::start_owned(data_dir, settings, "127.0.0.1:0", id)
    }

    fn start_owned(data_dir: &Path, settings: Vec<String>, listen: &str, id: &str) -> Self {
        let mut cmd = oedd_command();
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen", listen, "--drive-id", id])
            .env("OED_CLUSTER_SECRET", SECRET)
            .env("OED_LOG", "warn")
            .stderr(Stdio::inherit());
        for s in &settings {
            cmd.arg("--set").arg(s);
        }
        let (child, addr) =
            spawn_until_line(&mut cmd, "oedd: listening on ", Duration::from_mins(1));
        let Some(addr) = addr else {
            panic!("oedd exited, or did not report its address within 60 s (its stderr is above)");
        };
        Self {
            child: Some(child),
            url: format!("http://{addr}"),
            data_dir: data_dir.to_owned(),
            settings,
            id: id.to_owned(),
        }
    }

    /// A client signing with the cluster's key.
    #[must_use]
    pub fn client(&self) -> PeerClient {
        PeerClient::new(&self.url, PeerKey::derive(SECRET.as_bytes())).for_drive(&self.id)
    }

    /// A client signing with another key.
    #[must_use]
    pub fn client_with_secret(&self, secret: &str) -> PeerClient {
        PeerClient::new(&self.url, PeerKey::derive(secret.as_bytes())).for_drive(&self.id)
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM and returns at once: the drive begins its graceful shutdown.
    pub fn sigterm(&self) {
        if let Some(c) = &self.child {
            // The `kill` command keeps the tests free of unsafe code.
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
        }
    }

    /// SIGTERM, then waits (at most `within`) for the exit; returns whether it exited 0.
    pub fn terminate(&mut self, within: Duration) -> bool {
        self.sigterm();
        let Some(mut c) = self.child.take() else {
            return false;
        };
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = c.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
        false
    }

    /// Starts the same drive again (same data directory and settings).
    #[must_use]
    pub fn restart(mut self) -> Self {
        self.kill9();
        let data_dir = self.data_dir.clone();
        let settings = std::mem::take(&mut self.settings);
        Self::start_owned(&data_dir, settings, "127.0.0.1:0", &self.id)
    }

    /// Kills the drive (SIGKILL) and starts it again at the same address: its clients'
    /// connections end, the clients themselves stay valid.
    #[must_use]
    pub fn restart_at_same_address(mut self) -> Self {
        self.kill9();
        let data_dir = self.data_dir.clone();
        let settings = std::mem::take(&mut self.settings);
        let listen = self.url.trim_start_matches("http://").to_owned();
        Self::start_owned(&data_dir, settings, &listen, &self.id)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Spawns `cmd` with its standard output piped, and returns once it prints a line that
/// starts with `prefix`, with the rest of that line; `None` (the child killed) when it
/// exits first or prints no such line within `within`. Later lines are read and
/// dropped, so the child never blocks on a full pipe.
///
/// # Panics
/// When the command cannot be spawned.
pub fn spawn_until_line(
    cmd: &mut Command,
    prefix: &str,
    within: Duration,
) -> (Child, Option<String>) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the command");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let prefix = prefix.to_owned();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix(&prefix) {
                let _ = tx.send(rest.to_owned());
            }
        }
    });
    if let Ok(rest) = rx.recv_timeout(within) {
        (child, Some(rest))
    } else {
        let _ = child.kill();
        let _ = child.wait();
        (child, None)
    }
}

/// Deterministic pseudo-random bytes.
#[must_use]
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// A record for shard `shard` of `bucket`/`key` in a k+m layout with 4 KiB chunks.
#[must_use]
pub fn record(
    bucket: &str,
    key: &str,
    version: u128,
    size: u64,
    k: u16,
    m: u16,
    shard: u16,
) -> ObjectRecord {
    ObjectRecord {
        parent: None,
        headers: std::collections::BTreeMap::default(),
        bucket: bucket.into(),
        key: key.into(),
        version_id: VersionId(version),
        size,
        k,
        m,
        chunk_size: 4096,
        shard_index: shard,
        ..ObjectRecord::default()
    }
}

/// The shard file of `rec` for `data`.
#[must_use]
pub fn shard_file(rec: &ObjectRecord, data: &[u8]) -> Vec<u8> {
    let layout = rec.layout().expect("valid layout");
    oed_ec::encode_object(layout, rec.version_id.0, data).expect("encode")
        [usize::from(rec.shard_index)]
    .clone()
}

/// The chunk bytes (frames without CRCs) of a shard file, as `GET shard` returns them.
#[must_use]
pub fn chunk_bytes(file: &[u8]) -> Vec<u8> {
    let mut r = oed_ec::ShardReader::new(file).expect("valid shard");
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while r.read_chunk(&mut buf).expect("valid chunk").is_some() {
        out.extend_from_slice(&buf);
    }
    out
}

/// The chunk bytes of stripes `stripes` (all when `None`) of the stored shard of
/// `bucket`/`key`, as [`Drive::read_shard`] streams them; the error that ends the stream,
/// if one does.
///
/// # Errors
/// The read's error, or the one the stream ended with.
pub async fn try_read_shard(
    d: &dyn Drive,
    bucket: &str,
    key: &str,
    stripes: Option<std::ops::Range<u64>>,
) -> Result<Vec<u8>, DriveError> {
    let mut read = d.read_shard(bucket, key, None, stripes).await?;
    let mut out = Vec::new();
    while let Some(piece) = read.chunks.next().await {
        out.extend_from_slice(&piece?);
    }
    Ok(out)
}

/// The chunk bytes of the whole stored shard of `bucket`/`key`.
///
/// # Panics
/// When the read or its stream fails.
pub async fn read_shard(d: &dyn Drive, bucket: &str, key: &str) -> Vec<u8> {
    try_read_shard(d, bucket, key, None)
        .await
        .expect("shard read")
}

/// A shard upload body of `data` in pieces of `piece` bytes.
#[must_use]
pub fn upload(data: &[u8], piece: usize) -> ShardUpload {
    Box::pin(body(data, piece))
}

/// A body stream of `data` in pieces of `piece` bytes.
pub fn body(
    data: &[u8],
    piece: usize,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static {
    let pieces: Vec<Result<Bytes, std::io::Error>> = data
        .chunks(piece.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    futures_util::stream::iter(pieces)
}

/// Sends shard files of the given lengths as raw uploads in pieces of the given sizes
/// (their data seeded from `seed` on) into bucket `raw`, made here, checking that each
/// is stored byte for byte and read back, and that `shards` then holds one file each.
///
/// # Panics
/// When an upload fails, or a shard reads back other than sent.
pub async fn raw_uploads_read_back(
    c: &PeerClient,
    shards: &Path,
    uploads: &[(usize, usize)],
    seed: u64,
) {
    c.create_bucket("raw").await.unwrap();
    for (i, &(len, piece)) in uploads.iter().enumerate() {
        let data = bytes(len, i as u64 + seed);
        let key = format!("obj{i}");
        let rec = record("raw", &key, 1, data.len() as u64, 1, 1, 0);
        let file = shard_file(&rec, &data);
        let stored = c
            .put_shard(&rec, upload(&file, piece), false)
            .await
            .unwrap();
        assert_eq!(stored.record, rec);
        assert_eq!(
            read_shard(c, "raw", &key).await,
            chunk_bytes(&file),
            "{key}"
        );
    }
    assert_eq!(files_under(shards).len(), uploads.len());
}

/// Every file under `dir`, recursively.
#[must_use]
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A drive of a cluster served in the test's own process ([`local_cluster`]): its id, its
/// data directory, its view of the cluster (to coordinate through), and how to stop it.
pub struct LocalDrive {
    /// Its id in the cluster map.
    pub id: String,
    /// Its data directory.
    pub dir: PathBuf,
    /// The cluster as it coordinates requests.
    pub cluster: std::sync::Arc<oed_cluster::Cluster>,
    config: oed_model::config::Config,
    stop: tokio_util::sync::CancellationToken,
    /// The server's task, until the drive is stopped.
    served: Option<tokio::task::JoinHandle<()>>,
}

impl LocalDrive {
    /// `http://ADDRESS` of its API (S3 and peer).
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.config.listen)
    }

    /// Stops serving (a drive gone down) and waits until it has.
    ///
    /// # Panics
    /// When serving failed.
    pub async fn stop(mut self) {
        self.down().await;
    }

    /// Stops serving, keeping what it takes to start the drive again
    /// ([`LocalDrive::restart`]).
    ///
    /// # Panics
    /// When serving failed.
    pub async fn down(&mut self) {
        self.stop.cancel();
        if let Some(served) = self.served.take() {
            served.await.expect("the drive's server task");
        }
    }

    /// Stops the drive if it runs, then starts it again on its data directory and
    /// address.
    ///
    /// # Panics
    /// When serving failed or the drive cannot be started again.
    pub async fn restart(mut self) -> Self {
        let config = self.config.clone();
        self.down().await;
        // Its cluster holds the store (and RocksDB's lock) until dropped.
        drop(self);
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .expect("bind the drive's address again");
        serve_local(config, listener)
    }
}

/// Opens the drive of `config` and serves it on `listener` in the current runtime.
fn serve_local(config: oed_model::config::Config, listener: tokio::net::TcpListener) -> LocalDrive {
    let server = oed_daemon::server::DriveServer::open(&config, SECRET.as_bytes(), None)
        .expect("open the drive");
    let cluster = server.cluster.clone();
    let stop = tokio_util::sync::CancellationToken::new();
    let served = tokio::spawn({
        let stop = stop.clone();
        async move { server.serve(listener, None, stop).await.expect("serve") }
    });
    LocalDrive {
        id: config.drive_id.clone(),
        dir: config.data_dir.clone(),
        cluster,
        config,
        stop,
        served: Some(served),
    }
}

/// Starts `k + m` drives sharing one cluster map (EC `k + m`, chunks of `chunk` bytes),
/// each with its store in a directory under `root`, serving the peer API on 127.0.0.1
/// in the current runtime. No S3: tests coordinate through a drive's `cluster`.
///
/// # Panics
/// When a drive cannot be started.
pub async fn local_cluster(root: &Path, k: usize, m: usize, chunk: usize) -> Vec<LocalDrive> {
    use std::fmt::Write as _;
    let mut listeners = Vec::new();
    for _ in 0..k + m {
        listeners.push(
            tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind 127.0.0.1:0"),
        );
    }
    let mut map =
        format!("cluster_id = \"local\"\n[profile]\nk = {k}\nm = {m}\nchunk_size = {chunk}\n");
    for (i, l) in listeners.iter().enumerate() {
        let addr = l.local_addr().expect("bound address");
        let _ = write!(map, "[[drives]]\nid = \"d{i}\"\naddress = \"{addr}\"\n");
    }
    let map_path = root.join("cluster.toml");
    std::fs::write(&map_path, map).expect("write the cluster map");
    let mut drives = Vec::new();
    for (i, listener) in listeners.into_iter().enumerate() {
        let dir = root.join(format!("d{i}"));
        let config = oed_model::config::Config {
            drive_id: format!("d{i}"),
            data_dir: dir.clone(),
            listen: listener.local_addr().expect("bound address"),
            cluster_map: Some(map_path.clone()),
            inline_threshold_bytes: 0,
            reserve_bytes: 0,
            peer_timeout_seconds: 2,
            op_timeout_seconds: 10,
            ..oed_model::config::Config::default()
        };
        drives.push(serve_local(config, listener));
    }
    drives
}

/// Stores `data` as `bucket`/`key` through `cluster`, in pieces of 10,000 bytes; returns
/// the record of the write, which must have stored every shard.
///
/// # Panics
/// When the write fails or is degraded.
pub async fn put_object(
    cluster: &oed_cluster::Cluster,
    bucket: &str,
    key: &str,
    data: &[u8],
) -> ObjectRecord {
    let obj = oed_cluster::write::NewObject {
        parent: None,
        headers: std::collections::BTreeMap::default(),
        bucket: bucket.into(),
        key: key.into(),
        size: data.len() as u64,
        ..oed_cluster::write::NewObject::default()
    };
    let pieces: Vec<oed_model::Result<Bytes>> = data
        .chunks(10_000)
        .map(|p| Ok(Bytes::copy_from_slice(p)))
        .collect();
    let written = cluster
        .put_object(obj, futures_util::stream::iter(pieces))
        .await
        .expect("put the object");
    assert_eq!(written.missing, 0, "a degraded write");
    written.record
}

/// A recording relay between peer clients and a drive, as someone on the drives' network
/// would see their traffic: each connection made to [`Tap::url`] is joined to the drive's,
/// and what the client sent on it is kept, byte for byte ([`Tap::sent`]), to be changed
/// and sent again ([`resend`]).
pub struct Tap {
    /// `http://127.0.0.1:PORT` of the relay.
    pub url: String,
    sent: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Tap {
    /// A relay to the drive at `to` (`http://host:port`). Needs a Tokio runtime.
    ///
    /// # Panics
    /// When no port on 127.0.0.1 can be bound.
    pub async fn start(to: &str) -> Self {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let upstream = to.trim_start_matches("http://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let all = sent.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(drive) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let index = {
                    let mut all = all.lock().unwrap();
                    all.push(Vec::new());
                    all.len() - 1
                };
                let all = all.clone();
                tokio::spawn(async move {
                    let (mut cr, mut cw) = client.into_split();
                    let (mut dr, mut dw) = drive.into_split();
                    let up = async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n) = cr.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            all.lock().unwrap()[index].extend_from_slice(&buf[..n]);
                            if dw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        let _ = dw.shutdown().await;
                    };
                    let down = async move {
                        let _ = tokio::io::copy(&mut dr, &mut cw).await;
                        let _ = cw.shutdown().await;
                    };
                    tokio::join!(up, down);
                });
            }
        });
        Self { url, sent, task }
    }

    /// What clients sent on each connection so far, in the order they connected.
    #[must_use]
    pub fn sent(&self) -> Vec<Vec<u8>> {
        self.sent.lock().unwrap().clone()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sends `bytes` as they are to the drive at `to` on a new connection and returns what it
/// answers: all that comes within 10 s, until it has been silent for 1 s. (This side is
/// not shut down: a drive closes a connection whose client did so before its answer.)
///
/// # Panics
/// When the drive cannot be reached.
pub async fn resend(to: &str, bytes: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(to.trim_start_matches("http://"))
        .await
        .unwrap();
    let mut answer = Vec::new();
    if s.write_all(bytes).await.is_err() {
        return answer;
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let wait = if answer.is_empty() {
            until.saturating_duration_since(tokio::time::Instant::now())
        } else {
            Duration::from_secs(1)
        };
        match tokio::time::timeout(wait, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
            _ => return answer,
        }
        if tokio::time::Instant::now() > until {
            return answer;
        }
    }
}

/// `haystack` with the first `from` in it replaced by `to` (of the same length).
///
/// # Panics
/// When `from` is not in `haystack` or the lengths differ.
#[must_use]
pub fn replaced(haystack: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len(), "a replacement of the same length");
    let at = haystack
        .windows(from.len())
        .position(|w| w == from)
        .expect("the bytes to replace were sent");
    let mut out = haystack.to_vec();
    out[at..at + to.len()].copy_from_slice(to);
    out
}
