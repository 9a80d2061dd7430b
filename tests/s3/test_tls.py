"""TLS, as a user gets it: `oedd dev --tls` makes a throwaway CA and serves S3 and the
peer API over TLS. boto3 and the aws CLI work against it when they trust the CA (the aws
CLI then sends its checksums as aws-chunked trailers with no Content-Length, which S3
takes); a client that does not trust it, or that speaks plain HTTP, gets nothing. SIGHUP
makes a drive read its certificate files again without dropping a connection."""

import http.client
import io
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

MIB = 1 << 20


class DevTls:
    """`oedd dev --tls`, started as a user starts it; its banner parsed."""

    def __init__(self):
        self.bin = os.environ.get("OED_TEST_OEDD_BIN", "target/debug/oedd")
        self.dir = Path(tempfile.mkdtemp(prefix="oed-tls-test-"))
        env = dict(os.environ, OED_LOG=os.environ.get("OED_LOG", "warn"))
        self.proc = subprocess.Popen(
            [self.bin, "dev", "--tls", "--no-fsync", "--dir", str(self.dir / "cluster")],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        lines = []
        done = threading.Event()

        def read():
            for line in self.proc.stdout:
                lines.append(line)
                if line.startswith("Ctrl-C stops"):
                    done.set()

        threading.Thread(target=read, daemon=True).start()
        if not done.wait(90):
            self.stop()
            raise RuntimeError("oedd dev --tls did not start: " + "".join(lines))
        banner = "".join(lines)
        self.endpoint = re.search(r"endpoint (\S+)", banner).group(1)
        self.secret = re.search(r"secret key (\S+)", banner).group(1)
        self.ca = re.search(r"AWS_CA_BUNDLE=(\S+)", banner).group(1)
        self.metrics = re.search(r"metrics (\S+)", banner).group(1)
        self.others = re.search(r"\(also ([^)]*)\)", banner).group(1).split(", ")
        self.tls_dir = self.dir / "cluster" / "tls"

    def client(self, verify=None, endpoint=None):
        return boto3.client(
            "s3",
            endpoint_url=endpoint or self.endpoint,
            aws_access_key_id="oed",
            aws_secret_access_key=self.secret,
            region_name="us-east-1",
            verify=self.ca if verify is None else verify,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )

    def aws(self, *args):
        env = dict(
            os.environ,
            AWS_ACCESS_KEY_ID="oed",
            AWS_SECRET_ACCESS_KEY=self.secret,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_CA_BUNDLE=self.ca,
            AWS_CONFIG_FILE=str(self.dir / "aws-config"),
            AWS_SHARED_CREDENTIALS_FILE=str(self.dir / "aws-credentials"),
        )
        return subprocess.run(
            ["aws", "--endpoint-url", self.endpoint, *args],
            env=env, capture_output=True, text=True, check=True, timeout=300,
        )

    def metric(self, name):
        text = urllib.request.urlopen(self.metrics, timeout=5).read().decode()
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        assert m, f"{name} not exported"
        return float(m.group(1))

    def drive_pid(self, drive_id):
        """The pid of `oedd serve` for `drive_id`, found by its command line."""
        want = str(self.dir / "cluster" / drive_id)
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                args = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"serve" in args and want.encode() in args:
                return int(d.name)
        raise AssertionError(f"no oedd serve for {drive_id}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def dev():
    d = DevTls()
    yield d
    d.stop()


def host_port(endpoint):
    host, port = endpoint.split("//")[1].split(":")
    return host, int(port)


def served_name(dev, conn=None):
    """The common name of the certificate a new (or the given) TLS connection to the
    first drive got."""
    if conn is None:
        ctx = ssl.create_default_context(cafile=dev.ca)
        conn = http.client.HTTPSConnection(*host_port(dev.endpoint), context=ctx, timeout=10)
        conn.connect()
    cert = conn.sock.getpeercert()
    return dict(x[0] for x in cert["subject"])["commonName"]


def test_boto3_and_the_aws_cli_work_over_tls(dev):
    s3 = dev.client()
    s3.create_bucket(Bucket="tls")
    body = os.urandom(3 * MIB + 5)
    s3.put_object(Bucket="tls", Key="put", Body=body)
    assert s3.get_object(Bucket="tls", Key="put")["Body"].read() == body
    big = os.urandom(12 * MIB + 7)
    s3.upload_fileobj(io.BytesIO(big), "tls", "multipart",
                      Config=TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB))
    got = io.BytesIO()
    s3.download_fileobj("tls", "multipart", got)
    assert got.getvalue() == big
    src = dev.dir / "up.bin"
    src.write_bytes(os.urandom(9 * MIB + 1))
    dev.aws("s3", "cp", str(src), "s3://tls/cli")
    dev.aws("s3", "cp", "s3://tls/cli", str(dev.dir / "down.bin"))
    assert (dev.dir / "down.bin").read_bytes() == src.read_bytes()
    listed = dev.aws("s3", "ls", "s3://tls/").stdout
    assert "cli" in listed and "multipart" in listed and "put" in listed
    head = s3.head_object(Bucket="tls", Key="cli")
    assert head["ContentLength"] == 9 * MIB + 1 and "ContentEncoding" not in head


def test_a_client_that_does_not_trust_the_ca_or_speaks_plain_http_gets_nothing(dev):
    before = dev.metric("oed_tls_handshake_failures_total")
    with pytest.raises(Exception) as e:
        dev.client(verify=True).list_buckets()
    assert "CERTIFICATE_VERIFY_FAILED" in str(e.value) or "SSL" in str(e.value)
    plain = dev.endpoint.replace("https://", "http://")
    with pytest.raises((http.client.HTTPException, ConnectionError, urllib.error.URLError)):
        urllib.request.urlopen(plain + "/", timeout=10).read()
    deadline = time.monotonic() + 10
    while dev.metric("oed_tls_handshake_failures_total") < before + 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert dev.metric("oed_tls_handshake_failures_total") >= before + 2


def test_sighup_reloads_the_certificate_without_dropping_connections(dev):
    ctx = ssl.create_default_context(cafile=dev.ca)
    old = http.client.HTTPSConnection(*host_port(dev.endpoint), context=ctx, timeout=10)
    old.request("GET", "/")
    old.getresponse().read()
    assert served_name(dev, old) == "drive-1"
    cert, key = dev.tls_dir / "drive-1.pem", dev.tls_dir / "drive-1.key"
    saved = cert.read_bytes(), key.read_bytes()
    pid = dev.drive_pid("drive-1")
    try:
        # drive-2's certificate, under drive-1's file names: what a renewal looks like.
        shutil.copy(dev.tls_dir / "drive-2.pem", cert)
        shutil.copy(dev.tls_dir / "drive-2.key", key)
        os.kill(pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while served_name(dev) != "drive-2" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert served_name(dev) == "drive-2"
        # The connection opened before goes on with the session it has.
        old.request("GET", "/")
        assert old.getresponse().status == 403
        assert served_name(dev, old) == "drive-1"
        # Files that do not load leave the certificate served as it was.
        cert.write_text("not a certificate")
        os.kill(pid, signal.SIGHUP)
        time.sleep(1)
        assert served_name(dev) == "drive-2"
        assert dev.client().list_buckets()["ResponseMetadata"]["HTTPStatusCode"] == 200
    finally:
        cert.write_bytes(saved[0])
        key.write_bytes(saved[1])
        os.kill(pid, signal.SIGHUP)
        old.close()
    deadline = time.monotonic() + 10
    while served_name(dev) != "drive-1" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert served_name(dev) == "drive-1"


def test_drives_write_to_each_other_over_tls(dev):
    """The coordinator sends shards to the five other drives over TLS: a PUT through
    each drive is stored whole (not degraded) and reads back through the next one."""
    s3 = dev.client()
    s3.create_bucket(Bucket="peers")
    drives = [dev.endpoint, *dev.others]
    for i, ep in enumerate(drives):
        body = os.urandom(2 * MIB + i)
        r = dev.client(endpoint=ep).put_object(Bucket="peers", Key=f"k{i}", Body=body)
        assert "x-oed-degraded" not in r["ResponseMetadata"]["HTTPHeaders"]
        nxt = dev.client(endpoint=drives[(i + 1) % len(drives)])
        assert nxt.get_object(Bucket="peers", Key=f"k{i}")["Body"].read() == body


def openssl_pki(d, ids):
    """A CA and one certificate per drive for 127.0.0.1, made with the openssl commands
    docs/drive.md gives operators."""
    d.mkdir(parents=True, exist_ok=True)
    run = lambda *a: subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True, timeout=60)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "30",
        "-subj", "/CN=test cluster CA", "-keyout", "ca.key", "-out", "ca.pem")
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    for i in ids:
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={i}",
            "-keyout", f"{i}.key", "-out", f"{i}.csr")
        run("x509", "-req", "-in", f"{i}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-days", "30",
            "-out", f"{i}.pem", "-extfile", "ext")
    return d / "ca.pem"


def test_openssl_certificates_with_drives_talking_in_the_clear():
    """Certificates made with openssl, a map without `tls`: S3 clients get TLS and only
    TLS (an S3 request in the clear is 403 AccessDenied), while the drives reach each
    other in the clear on the same port."""
    from conftest import ACCESS_KEY, Cluster
    pki = Path(tempfile.mkdtemp(prefix="oed-pki-"))
    ids = [f"drive-{i + 1}" for i in range(6)]
    ca = openssl_pki(pki, ids)
    c = Cluster(extra=lambda i: [f'tls_cert_file="{pki / ids[i]}.pem"', f'tls_key_file="{pki / ids[i]}.key"'])
    try:
        def client(scheme, i=0):
            return boto3.client(
                "s3", endpoint_url=f"{scheme}://{c.addrs[i]}", aws_access_key_id=ACCESS_KEY,
                aws_secret_access_key=c.secret, region_name="us-east-1", verify=str(ca),
                config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
        s3 = client("https")
        s3.create_bucket(Bucket="clear")
        body = os.urandom(3 * MIB + 1)
        r = s3.put_object(Bucket="clear", Key="k", Body=body)
        assert "x-oed-degraded" not in r["ResponseMetadata"]["HTTPHeaders"]
        assert client("https", 3).get_object(Bucket="clear", Key="k")["Body"].read() == body
        with pytest.raises(Exception) as e:
            client("http").get_object(Bucket="clear", Key="k")
        assert "AccessDenied" in str(e.value) and "TLS only" in str(e.value)
        assert c.metric(0, "oed_peer_shard_failures_total") == 0
        # The console is TLS only too, and its cookie is Secure.
        plain = http.client.HTTPConnection(*c.addrs[0].split(":"), timeout=10)
        plain.request("GET", "/_oed/console/")
        assert plain.getresponse().status == 403
        login = json.dumps({"access_key_id": ACCESS_KEY, "secret_access_key": c.secret})
        conn = http.client.HTTPSConnection(*c.addrs[0].split(":"), timeout=10,
                                           context=ssl.create_default_context(cafile=str(ca)))
        conn.request("POST", "/_oed/console/api/login", login, {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        assert r.status == 200
        cookie = r.getheader("Set-Cookie")
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    finally:
        c.stop()
        shutil.rmtree(pki, ignore_errors=True)
