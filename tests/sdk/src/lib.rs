//! Helpers for the SDK tests: start `oedd dev` (the binary named by `OED_TEST_OEDD_BIN`,
//! else `target/debug/oedd`) in a temporary directory and read its endpoint and
//! credentials from the banner; stop it on drop.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running `oedd dev` cluster.
pub struct Dev {
    child: Child,
    _dir: tempfile::TempDir,
    /// The S3 endpoint.
    pub endpoint: String,
    /// The access key.
    pub access_key: String,
    /// The secret key.
    pub secret_key: String,
}

impl Dev {
    /// Starts `drives` drives with EC `k + m` (fsync on) and waits for the banner.
    ///
    /// # Panics
    /// When the cluster does not start within 60 s.
    #[must_use]
    pub fn start(drives: usize, k: u16, m: u16) -> Self {
        let bin =
            std::env::var("OED_TEST_OEDD_BIN").unwrap_or_else(|_| "../../target/debug/oedd".into());
        let dir = tempfile::tempdir().expect("temp dir");
        let mut child = Command::new(&bin)
            .args([
                "dev",
                "--drives",
                &drives.to_string(),
                "--k",
                &k.to_string(),
                "--m",
                &m.to_string(),
            ])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let (mut endpoint, mut access_key, mut secret_key) = (None, None, None);
        while secret_key.is_none() {
            let Ok(line) = rx.recv_timeout(Duration::from_mins(1)) else {
                let _ = child.kill();
                panic!("oedd dev did not print its banner within 60 s");
            };
            let field = |p: &str| line.strip_prefix(p).map(str::to_owned);
            endpoint = endpoint.or_else(|| field("oedd dev: endpoint "));
            access_key = access_key.or_else(|| field("oedd dev: access key "));
            secret_key = secret_key.or_else(|| field("oedd dev: secret key "));
        }
        Self {
            child,
            _dir: dir,
            endpoint: endpoint.expect("endpoint line"),
            access_key: access_key.expect("access key line"),
            secret_key: secret_key.expect("secret key line"),
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        // SIGTERM lets `oedd dev` stop its drives; SIGKILL after 20 s.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..200 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` pseudo-random bytes from `seed`.
#[must_use]
pub fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[3]
        })
        .collect()
}

/// A plain HTTP/1.1 GET of `url` (`http://host:port/path?query`): status and body.
///
/// # Panics
/// On a malformed URL or a connection failure.
#[must_use]
pub fn http_get(url: &str) -> (u16, Vec<u8>) {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut s = std::net::TcpStream::connect(host).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "chunked answers are not expected here"
    );
    (status, raw[split + 4..].to_vec())
}
