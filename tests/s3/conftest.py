"""End-to-end S3 tests: a real cluster of `oedd` processes on 127.0.0.1, driven by
boto3, the aws CLI and curl. deploy/test.sh runs them with OED_TEST_OEDD_BIN set to the
freshly built daemon.

Each drive is its own process with its own data directory and port, as on real drives,
so a test can kill one with SIGKILL, flip bytes in its shard files, and start it again.
"""

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import boto3
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

ACCESS_KEY = "oed-test"


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class DriveExited(RuntimeError):
    """A drive's process ended before it printed that it listens."""


# The SDKs' standard retries, for concurrent PUTs of one key: of PUTs completing within
# moments, the older may be answered 503 where the drives saw a newer first (docs/cluster.md,
# "Versions and concurrent writes"), and a retry makes a newer version, as a client's would.
SDK_RETRIES = {"max_attempts": 10, "mode": "standard"}


class Cluster:
    """`n` drives, EC k+m, chunk size `chunk`, in a temporary directory. Each drive
    serves /metrics on its own port (`metrics_addrs`); `extra(i)` gives more `--set`
    settings for drive i, `env(i)` more environment variables."""

    def __init__(self, n=6, k=4, m=2, chunk=65536, extra=None, from_init=None, env=None,
                 logs=False):
        """With `from_init`, a directory `oedd cluster init` wrote, the drives run its
        map and secrets instead. With `logs`, each drive's log goes to `log_path(i)`."""
        self.logs = logs
        self.bin = os.environ.get("OED_TEST_OEDD_BIN", "target/debug/oedd")
        self.dir = Path(tempfile.mkdtemp(prefix="oed-s3-test-"))
        self.extra = extra or (lambda i: [])
        self.env = env or (lambda i: {})
        if from_init is not None:
            import tomllib
            made = tomllib.loads((Path(from_init) / "cluster.toml").read_text())
            self.secret = (Path(from_init) / "s3.secret").read_text().strip()
            self.cluster_secret = (Path(from_init) / "cluster.secret").read_text().strip()
            self.k, self.m = made["profile"]["k"], made["profile"]["m"]
            self.ids = [d["id"] for d in made["drives"]]
            self.addrs = [d["address"] for d in made["drives"]]
            n = len(self.ids)
            self.map = self.dir / "cluster.toml"
            shutil.copy(Path(from_init) / "cluster.toml", self.map)
        else:
            self.secret = secrets.token_hex(16)
            self.cluster_secret = secrets.token_hex(16)
            self.k, self.m = k, m
            self.ids = [f"drive-{i + 1}" for i in range(n)]
            self.map = self.dir / "cluster.toml"
        # The free ports are released before the drives bind them, and another process
        # may take one meanwhile: a drive that exits before it listens makes the drives
        # start again on other ports (a map made by `oedd cluster init` keeps its own).
        for attempt in range(3):
            if from_init is None:
                self.pick_ports(n, k, m, chunk)
            else:
                self.metrics_addrs = [f"127.0.0.1:{p}" for p in free_ports(n)]
            self.procs = [None] * n
            try:
                for i in range(n):
                    self.start(i)
                break
            except DriveExited:
                for i in range(n):
                    self.kill9(i)
                    shutil.rmtree(self.data_dir(i), ignore_errors=True)
                if attempt == 2:
                    raise

    def pick_ports(self, n, k, m, chunk):
        ports = free_ports(2 * n)
        self.metrics_addrs = [f"127.0.0.1:{p}" for p in ports[n:]]
        self.addrs = [f"127.0.0.1:{p}" for p in ports[:n]]
        lines = [
            'cluster_id = "test"',
            "[profile]",
            f"k = {k}",
            f"m = {m}",
            f"chunk_size = {chunk}",
        ]
        for i, a in zip(self.ids, self.addrs):
            lines += ["[[drives]]", f'id = "{i}"', f'address = "{a}"']
        self.map.write_text("\n".join(lines) + "\n")

    def data_dir(self, i):
        return self.dir / self.ids[i]

    def start(self, i):
        env = dict(os.environ)
        env.update(
            OED_CLUSTER_SECRET=self.cluster_secret,
            OED_S3_SECRET_KEY=self.secret,
            OED_LOG=os.environ.get("OED_LOG", "warn"),
        )
        env.update(self.env(i))
        p = subprocess.Popen(
            [
                self.bin, "serve",
                "--data-dir", str(self.data_dir(i)),
                "--listen", self.addrs[i],
                "--drive-id", self.ids[i],
                "--set", f'cluster_map="{self.map}"',
                "--set", f's3_access_key="{ACCESS_KEY}"',
                "--set", "reserve_bytes=0",
                "--set", "peer_timeout_seconds=5",
                "--set", f'metrics_listen="{self.metrics_addrs[i]}"',
                *[a for kv in self.extra(i) for a in ("--set", kv)],
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=open(self.log_path(i), "a") if self.logs else None,
            text=True,
        )
        ready = threading.Event()

        def watch():
            for line in p.stdout:
                if line.startswith("oedd: listening on"):
                    ready.set()

        threading.Thread(target=watch, daemon=True).start()
        deadline = time.time() + 60
        while not ready.wait(0.05):
            if p.poll() is not None:
                raise DriveExited(f"{self.ids[i]} exited ({p.returncode}) before it listened")
            if time.time() > deadline:
                p.kill()
                raise RuntimeError(f"{self.ids[i]} did not start")
        self.procs[i] = p

    def start_spare(self):
        """Starts one more drive, drive-N, outside the map: a spare waiting to be added
        (`oedd admin add`). Returns its index and its `ID=HOST:PORT` for `add`."""
        port, metrics_port = free_ports(2)
        i = len(self.ids)
        self.ids.append(f"drive-{i + 1}")
        self.addrs.append(f"127.0.0.1:{port}")
        self.metrics_addrs.append(f"127.0.0.1:{metrics_port}")
        self.procs.append(None)
        self.start(i)
        return i, f"{self.ids[i]}={self.addrs[i]}"

    def log_path(self, i):
        return self.dir / f"{self.ids[i]}.log"

    def kill9(self, i):
        p = self.procs[i]
        if p is not None:
            p.send_signal(signal.SIGKILL)
            p.wait()
            self.procs[i] = None

    def term(self, i, timeout=60):
        """Stops drive i as systemctl stop does: SIGTERM, then waits for it to exit.
        Returns its exit code."""
        p = self.procs[i]
        p.send_signal(signal.SIGTERM)
        try:
            return p.wait(timeout)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            self.procs[i] = None

    def restart(self, i):
        self.kill9(i)
        self.start(i)

    def endpoint(self, i=0):
        return f"http://{self.addrs[i]}"

    def client(self, i=0, secret=None, region="us-east-1", retries=None, **cfg):
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint(i),
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=secret or self.secret,
            region_name=region,
            config=Config(
                s3={"addressing_style": "path"},
                retries=retries or {"max_attempts": 1},
                **cfg,
            ),
        )

    def signed_headers(self, method, path, body=b"", headers=None):
        """The headers of a SigV4-signed request to drive 0 (payload hash included, as over
        plain HTTP), for clients other than boto3: curl, raw sockets."""
        req = AWSRequest(method=method, url=self.endpoint() + path, data=body, headers=headers or {})
        S3SigV4Auth(Credentials(ACCESS_KEY, self.secret), "s3", "us-east-1").add_auth(req)
        return dict(req.headers.items())

    def raw(self, method, path, headers, body=b"", until=b"</Error>"):
        """Sends a request to drive 0 on a raw socket, headers as given (plus Host), and
        returns the answer as text, read until `until` or the end. `body` is bytes, or
        an iterable of bytes sent one write each. The drive may answer and close before
        the body is sent (a request refused on its headers); that is not an error here."""
        import socket
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.addrs[0]}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k.lower() != "host")
        host, port = self.addrs[0].split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                sock.sendall(head.encode() + b"\r\n")
                for piece in [body] if isinstance(body, bytes) else body:
                    sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                pass
            answer = b""
            while until not in answer:
                piece = sock.recv(65536)
                if not piece:
                    break
                answer += piece
        return answer.decode(errors="replace")

    def aws_env(self):
        env = dict(os.environ)
        env.update(
            AWS_ACCESS_KEY_ID=ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=self.secret,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_CONFIG_FILE=str(self.dir / "aws-config"),
            AWS_SHARED_CREDENTIALS_FILE=str(self.dir / "aws-credentials"),
        )
        return env

    def aws(self, *args, check=True):
        """Runs the aws CLI against drive 0; returns the completed process."""
        return subprocess.run(
            ["aws", "--endpoint-url", self.endpoint(), *args],
            env=self.aws_env(),
            capture_output=True,
            text=True,
            check=check,
            timeout=600,
        )

    def metrics_text(self, i):
        """Drive i's /metrics, as text."""
        url = f"http://{self.metrics_addrs[i]}/metrics"
        return urllib.request.urlopen(url, timeout=5).read().decode()

    def metric(self, i, name, labels=""):
        """The value of series `name{labels}` on drive i's /metrics."""
        text = self.metrics_text(i)
        m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
        assert m, f"{name}{labels} not exported by {self.ids[i]}"
        return float(m.group(1))

    def series(self, i, name):
        """Every series of metric `name` on drive i's /metrics: (labels as a dict, value)."""
        text = self.metrics_text(i)
        found = []
        for labels, value in re.findall(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", text, re.M):
            found.append((dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels)), float(value)))
        return found

    def metric_sum(self, i, name, **labels):
        """The sum of drive i's series of `name` whose labels include `labels`."""
        return sum(v for have, v in self.series(i, name)
                   if all(have.get(k) == w for k, w in labels.items()))

    def admin(self, *args, timeout=60, check=True):
        """Runs `oedd admin` against this cluster; returns its standard output (with
        `check=False`, the finished process)."""
        env = dict(os.environ, OED_CLUSTER_SECRET=self.cluster_secret)
        r = subprocess.run(
            [self.bin, "admin", "--map", str(self.map), *args],
            env=env, capture_output=True, text=True, timeout=timeout,
        )
        if not check:
            return r
        assert r.returncode == 0, r.stderr
        return r.stdout

    def status(self):
        """Every drive's repair status (`oedd admin status --json`), in map order; None
        for a drive that did not answer."""
        import json
        return [a["status"] for a in json.loads(self.admin("status", "--json"))]

    def wait_for(self, what, check, timeout=120, every=0.5):
        """Polls `check()` until it returns something true (returned), at most `timeout` s."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = check()
            if last:
                return last
            time.sleep(every)
        raise AssertionError(f"timed out waiting for {what}; last: {last!r}")

    def wait_healed(self, timeout=120):
        """Waits until every drive answers with nothing queued for heal and no hints
        held for others."""
        self.wait_for("hints delivered and healed", lambda: all(
            s and not (sum(s["queue"]["local"].values()) + s["queue"]["hints"])
            for s in self.status()), timeout=timeout)

    def shard_files(self, i):
        return sorted((self.data_dir(i) / "shards").rglob("*.shard"))

    def stop(self):
        for p in self.procs:
            if p is not None:
                p.send_signal(signal.SIGTERM)
        deadline = time.time() + 20
        for p in self.procs:
            if p is None:
                continue
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def code(e):
    """The S3 error code and HTTP status of a `pytest.raises(ClientError)` result."""
    r = e.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def s3(cluster):
    return cluster.client()


_n = [0]


@pytest.fixture
def bucket(s3):
    _n[0] += 1
    name = f"b{_n[0]}-{secrets.token_hex(3)}"
    s3.create_bucket(Bucket=name)
    return name
