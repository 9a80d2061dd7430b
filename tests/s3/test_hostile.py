"""Careless and hostile clients against a real cluster: connections that send half a
request header and then nothing are closed within `http_header_timeout_seconds`, while
normal requests go on; past `max_connections`, a connection is answered 503 and closed;
a body sent a byte a second is cut with RequestTimeout after one window."""

import hashlib
import socket
import time
import urllib.request

import pytest

from conftest import Cluster

HEADER_TIMEOUT = 16
MAX_CONNECTIONS = 400


@pytest.fixture(scope="module")
def guarded():
    c = Cluster(extra=lambda i: [
        f"http_header_timeout_seconds={HEADER_TIMEOUT}",
        f"max_connections={MAX_CONNECTIONS}",
    ])
    yield c
    c.stop()


def half_requests(cluster, n):
    """`n` connections to drive 0, each with half a request header sent."""
    host, port = cluster.addrs[0].split(":")
    socks = []
    for i in range(n):
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(f"GET /half-{i} HTTP/1.1\r\nHost: {cluster.addrs[0]}\r\nX-Slow: ".encode())
        socks.append(s)
    return socks


def closed(sock, deadline):
    """Whether the drive closed `sock` (or answered it) before `deadline`."""
    sock.settimeout(max(0.01, deadline - time.time()))
    try:
        return sock.recv(4096) is not None
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_half_requests_are_closed_in_time_and_requests_go_on(guarded):
    s3 = guarded.client(0)
    s3.create_bucket(Bucket="slow")
    body = hashlib.shake_256(b"slow").digest(1 << 20)
    s3.put_object(Bucket="slow", Key="o", Body=body)
    started = time.time()
    socks = half_requests(guarded, 300)
    try:
        # Normal requests through the same listener meanwhile.
        for _ in range(20):
            assert s3.get_object(Bucket="slow", Key="o")["Body"].read() == body
        assert guarded.metric(0, "oed_http_connections") >= 300
        deadline = started + HEADER_TIMEOUT + 10
        still_open = [s for s in socks if not closed(s, deadline)]
        assert not still_open, f"{len(still_open)} half requests still open after {HEADER_TIMEOUT + 10} s"
    finally:
        for s in socks:
            s.close()
    assert s3.get_object(Bucket="slow", Key="o")["Body"].read() == body
    guarded.wait_for("the connections closed", lambda: guarded.metric(0, "oed_http_connections") < 20, timeout=10)


def test_connections_past_the_limit_are_refused_with_503(guarded):
    s3 = guarded.client(0)
    socks = half_requests(guarded, MAX_CONNECTIONS)
    try:
        host, port = guarded.addrs[0].split(":")
        extra = socket.create_connection((host, int(port)), timeout=5)
        answer = extra.recv(4096).decode()
        extra.close()
        assert answer.startswith("HTTP/1.1 503") and "Retry-After: 1" in answer, answer
        assert guarded.metric(0, "oed_http_connections_refused_total") >= 1
    finally:
        for s in socks:
            s.close()
    # Once they are gone, requests are served again.
    guarded.wait_for(
        "a free connection slot",
        lambda: guarded.metric(0, "oed_http_connections") < MAX_CONNECTIONS - 50,
        timeout=10,
    )
    s3.list_buckets()


def test_a_body_sent_a_byte_a_second_is_cut_with_request_timeout(guarded):
    s3 = guarded.client(0)
    s3.create_bucket(Bucket="trickle")
    h = guarded.signed_headers("PUT", "/trickle/t", headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    h["Content-Length"] = str(1 << 20)
    host, port = guarded.addrs[0].split(":")
    started = time.time()
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        head = f"PUT /trickle/t HTTP/1.1\r\nHost: {guarded.addrs[0]}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in h.items())
        sock.sendall(head.encode() + b"\r\n")
        answer = b""
        sock.settimeout(1)
        while time.time() - started < HEADER_TIMEOUT + 15 and b"</Error>" not in answer:
            try:
                sock.sendall(b"x")
            except (BrokenPipeError, ConnectionResetError):
                pass
            try:
                piece = sock.recv(4096)
                if not piece:
                    break
                answer += piece
            except socket.timeout:
                pass
    text = answer.decode(errors="replace")
    assert " 400 " in text.split("\r\n")[0] and "<Code>RequestTimeout</Code>" in text, text
    # The memory it held is free again, and nothing was stored.
    held = guarded.metric(0, "oed_coordinator_buffer_bytes", '{what="held"}')
    assert held == 0
    assert "Contents" not in s3.list_objects_v2(Bucket="trickle")


def test_the_drive_raises_its_open_file_limit_to_the_hard_one(tmp_path):
    """A drive started with a low soft limit on open files (a shell's `ulimit -Sn 512`)
    raises it to the hard limit, so `max_connections` (1024 by default) fit."""
    import os
    import resource
    import subprocess
    import threading

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 512:
        pytest.skip(f"the hard limit here is {hard}: nothing to raise")
    binary = os.environ.get("OED_TEST_OEDD_BIN", "target/debug/oedd")
    p = subprocess.Popen(
        [binary, "serve", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0", "--drive-id", "lone"],
        env=dict(os.environ, OED_CLUSTER_SECRET="0" * 32, OED_LOG="error"),
        stdout=subprocess.PIPE, text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard)),
    )
    try:
        ready = threading.Event()
        threading.Thread(
            target=lambda: [ready.set() for line in p.stdout if line.startswith("oedd: listening on")],
            daemon=True,
        ).start()
        assert ready.wait(60), "the drive did not start"
        limits = open(f"/proc/{p.pid}/limits").read()
        soft = next(line.split()[3] for line in limits.splitlines() if line.startswith("Max open files"))
        assert soft == ("unlimited" if hard == resource.RLIM_INFINITY else str(hard)), limits
    finally:
        p.terminate()
        p.wait(20)


def test_a_client_that_stops_reading_its_answer_is_dropped(guarded):
    """A GET of 8 MiB whose client reads nothing: after `http_header_timeout_seconds` of
    the drive's writes waiting, the connection is dropped, and the memory and drive reads
    behind the answer with it."""
    s3 = guarded.client(0)
    s3.create_bucket(Bucket="stall")
    size = 8 << 20
    s3.put_object(Bucket="stall", Key="o", Body=hashlib.shake_256(b"stall").digest(size))
    h = guarded.signed_headers("GET", "/stall/o")
    host, port = guarded.addrs[0].split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    sock.settimeout(5)
    sock.connect((host, int(port)))
    try:
        head = f"GET /stall/o HTTP/1.1\r\nHost: {guarded.addrs[0]}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in h.items())
        sock.sendall(head.encode() + b"\r\n")
        time.sleep(2)
        assert guarded.metric(0, "oed_coordinator_buffer_bytes", '{what="held"}') > 0
        guarded.wait_for(
            "the stalled answer's memory freed",
            lambda: guarded.metric(0, "oed_coordinator_buffer_bytes", '{what="held"}') == 0,
            timeout=HEADER_TIMEOUT + 15,
        )
        # What was sent before the drop can still be read; then the connection ends.
        got, deadline = 0, time.time() + 30
        while time.time() < deadline:
            try:
                piece = sock.recv(1 << 20)
            except (ConnectionResetError, socket.timeout):
                break
            if not piece:
                break
            got += len(piece)
        assert got < size, "the whole answer arrived: the connection was not dropped"
    finally:
        sock.close()
    assert s3.get_object(Bucket="stall", Key="o")["Body"].read() == hashlib.shake_256(b"stall").digest(size)


def test_unsigned_peer_requests_are_counted_and_logged_with_their_address_at_most_once_a_window(tmp_path):
    """A stranger's 2,000 unsigned peer requests: each refused with 401 and counted in
    `oed_peer_auth_failures_total`, while the drive's log gets one line (the address, the
    operation and the count left out) per ten seconds, not one per request."""
    import http.client
    import os
    import subprocess
    import threading

    binary = os.environ.get("OED_TEST_OEDD_BIN", "target/debug/oedd")
    metrics_port = free_port()
    log = open(tmp_path / "drive.log", "w")
    p = subprocess.Popen(
        [binary, "serve", "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0",
         "--drive-id", "lone", "--set", f'metrics_listen="127.0.0.1:{metrics_port}"'],
        env=dict(os.environ, OED_CLUSTER_SECRET="0" * 32, OED_LOG="warn"),
        stdout=subprocess.PIPE, stderr=log, text=True,
    )
    try:
        addr = []
        ready = threading.Event()

        def watch():
            for line in p.stdout:
                if line.startswith("oedd: listening on"):
                    addr.append(line.split()[-1])
                    ready.set()

        threading.Thread(target=watch, daemon=True).start()
        assert ready.wait(60), "the drive did not start"
        host, port = addr[0].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        statuses = set()
        deadline = time.time() + 60
        for _ in range(2000):
            assert time.time() < deadline, "2,000 refusals took over a minute"
            conn.request("GET", "/_oed/peer/v1/info")
            r = conn.getresponse()
            r.read()
            statuses.add(r.status)
        conn.close()
        assert statuses == {401}, statuses
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        counted = sum(float(line.split()[-1]) for line in text.splitlines()
                      if line.startswith("oed_peer_auth_failures_total"))
        assert counted == 2000, counted
    finally:
        p.terminate()
        p.wait(20)
        log.close()
    lines = [line for line in (tmp_path / "drive.log").read_text().splitlines()
             if "peer request refused" in line]
    assert 1 <= len(lines) <= 7, lines
    assert "client=127.0.0.1" in lines[0] and "op=Info" in lines[0], lines[0]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
