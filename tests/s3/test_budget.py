"""The coordinator's memory budget (`coordinator_buffer_bytes`): requests beyond it wait
for a share, and one that waits longer than `coordinator_wait_seconds` gets 503 SlowDown
and changes nothing. Clients that stop reading hold their share, so the test holds GETs
open with sockets whose receive buffer is tiny and reads nothing from them.
"""

import hashlib
import socket
import time
from urllib.parse import urlsplit

import pytest
from botocore.exceptions import ClientError

from conftest import Cluster

MIB = 1 << 20
SIZE = 16 * MIB  # far more than the socket buffers of a stalled GET can take


@pytest.fixture(scope="module")
def small():
    # 2+1 with 64 KiB chunks: a stripe is 128 KiB, a GET's share 256 KiB and a large
    # PUT's 512 KiB (one stripe filling, two coded stripes of 1.5x). A 1 MiB budget
    # admits four GETs at once.
    c = Cluster(
        n=3,
        k=2,
        m=1,
        extra=lambda i: ["coordinator_buffer_bytes=1048576", "coordinator_wait_seconds=2"],
    )
    yield c
    c.stop()


def send_get(url, source="127.0.0.1", timeout=10):
    """Sends a GET from `source` on a socket whose receive buffer is tiny; returns it."""
    parts = urlsplit(url)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect((parts.hostname, parts.port))
    s.sendall(
        f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()
    )
    return s


def held_bytes(cluster):
    """The bytes of drive 0's budget that requests hold now."""
    return cluster.metric(0, "oed_coordinator_buffer_bytes", '{what="held"}')


def wait_held(cluster, until, timeout=10):
    """Polls drive 0's budget until `until(held bytes)` holds or `timeout` seconds pass;
    returns the last value read."""
    deadline = time.time() + timeout
    while not until(now := held_bytes(cluster)) and time.time() < deadline:
        time.sleep(0.1)
    return now


def stalled_get(url, source="127.0.0.1"):
    """Sends a GET and reads only the status line: the body stays unread."""
    s = send_get(url, source)
    status = s.recv(64).decode(errors="replace")
    assert status.startswith("HTTP/1.1 200"), status
    return s


def test_requests_past_the_budget_get_slowdown_and_change_nothing(small):
    s3 = small.client()
    s3.create_bucket(Bucket="budget")
    body = bytes(range(256)) * (SIZE // 256)
    s3.put_object(Bucket="budget", Key="big", Body=body)
    s3.put_object(Bucket="budget", Key="other", Body=b"kept")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "budget", "Key": "big"})

    held = [stalled_get(url) for _ in range(4)]
    try:
        assert wait_held(small, lambda b: b >= MIB) == MIB
        assert small.metric(0, "oed_coordinator_buffer_bytes", '{what="limit"}') == MIB

        # A fifth GET waits its 2 s and is refused; so is a PUT, which stores nothing.
        started = time.time()
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket="budget", Key="big")
        assert e.value.response["Error"]["Code"] == "SlowDown"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert "retry" in e.value.response["Error"]["Message"]
        assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["retry-after"] == "1"
        assert time.time() - started >= 1.9
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket="budget", Key="other", Body=b"x" * 100_000)
        assert e.value.response["Error"]["Code"] == "SlowDown"
        # botocore retries a SlowDown once more here; every refusal is counted.
        assert small.metric(0, "oed_slowdown_total", '{reason="memory_wait"}') >= 2

        # Requests that need no share of object data go on meanwhile.
        s3.head_object(Bucket="budget", Key="big")
        assert [o["Key"] for o in s3.list_objects_v2(Bucket="budget")["Contents"]] == ["big", "other"]

        # A client going away gives its share back, and the next request runs.
        held.pop().close()
        got = s3.get_object(Bucket="budget", Key="big")["Body"].read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest()
    finally:
        for s in held:
            s.close()

    # Everything given back; the refused PUT left the object as it was.
    assert wait_held(small, lambda b: b <= 0) == 0
    assert s3.get_object(Bucket="budget", Key="other")["Body"].read() == b"kept"
    s3.put_object(Bucket="budget", Key="other", Body=b"y" * MIB)
    assert s3.get_object(Bucket="budget", Key="other")["Body"].read() == b"y" * MIB


def stat_requests(cluster, i):
    """The peer API's StatObject requests drive i has answered, whatever their status."""
    return cluster.metric_sum(i, "oed_requests_total", api="peer", op="StatObject")


def test_a_get_waiting_for_memory_asks_the_drives_nothing(small):
    """A GET takes its share before it looks its object up on the drives, so GETs that
    wait for memory hold no connections to them: the coordinator's connections follow
    the GETs moving data, not the clients (docs/cluster.md, "Memory and back-pressure")."""
    s3 = small.client()
    s3.create_bucket(Bucket="lookup")
    s3.put_object(Bucket="lookup", Key="big", Body=b"z" * SIZE)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "lookup", "Key": "big"})
    held = [stalled_get(url) for _ in range(4)]
    waiting = []
    try:
        assert wait_held(small, lambda b: b >= MIB) == MIB
        # Drive 0 coordinates; drives 1 and 2 hold the object's other shards and answer
        # its lookups.
        before = [stat_requests(small, i) for i in (1, 2)]
        waiting = [send_get(url) for _ in range(6)]
        time.sleep(1)  # within the 2 s the GETs may wait
        assert [stat_requests(small, i) for i in (1, 2)] == before
        # They are refused when the wait runs out, having asked nothing.
        for s in waiting:
            assert s.recv(64).decode(errors="replace").startswith("HTTP/1.1 503")
        assert [stat_requests(small, i) for i in (1, 2)] == before
    finally:
        for s in held + waiting:
            s.close()
    assert wait_held(small, lambda b: b <= 0) == 0
    # Given back, a GET looks up and reads as before.
    before = stat_requests(small, 1)
    assert s3.get_object(Bucket="lookup", Key="big")["Body"].read() == b"z" * SIZE
    assert stat_requests(small, 1) > before


@pytest.fixture(scope="module")
def fair():
    # As `small`, with a long wait and at most 3 requests waiting per client.
    c = Cluster(
        n=3,
        k=2,
        m=1,
        extra=lambda i: [
            "coordinator_buffer_bytes=1048576",
            "coordinator_wait_seconds=30",
            "max_waiting_per_client=3",
        ],
    )
    yield c
    c.stop()


def test_a_client_with_many_requests_does_not_keep_another_waiting(fair):
    """Client A (127.0.0.1) holds the whole budget with stalled GETs and queues three
    more; client B (127.0.0.2) asks once. The first share A gives back goes to B, who
    holds nothing, not to A's queue; A's fourth waiting request is refused at once with
    SlowDown and Retry-After."""
    s3 = fair.client()
    s3.create_bucket(Bucket="fair")
    body = bytes(range(256)) * (SIZE // 256)
    s3.put_object(Bucket="fair", Key="big", Body=body)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "fair", "Key": "big"})
    held = [stalled_get(url) for _ in range(4)]
    queued = [send_get(url, timeout=60) for _ in range(3)]
    got_status = {}

    def status_of(name, sock):
        try:
            got_status[name] = (time.time(), sock.recv(64).decode(errors="replace"))
        except OSError as e:
            got_status[name] = (time.time(), f"error {e}")

    import threading
    threads = [threading.Thread(target=status_of, args=(f"a{i}", q), daemon=True) for i, q in enumerate(queued)]
    for t in threads:
        t.start()
    try:
        wait_held(fair, lambda b: b >= MIB)
        time.sleep(0.5)  # A's three requests reach the queue
        # A fourth request of A's waiting: refused at once.
        over = send_get(url)
        answer = over.recv(4096).decode(errors="replace")
        over.close()
        assert answer.startswith("HTTP/1.1 503"), answer
        assert "<Code>SlowDown</Code>" in answer and "retry-after: 1" in answer.lower()
        assert fair.metric(0, "oed_slowdown_total", '{reason="client_waiting"}') == 1

        b = send_get(url, source="127.0.0.2", timeout=60)
        b_thread = threading.Thread(target=status_of, args=("b", b), daemon=True)
        b_thread.start()
        time.sleep(0.5)  # B's request reaches the queue, behind A's three
        assert not got_status, got_status
        held.pop().close()  # A gives back one share
        b_thread.join(20)
        assert "b" in got_status and got_status["b"][1].startswith("HTTP/1.1 200"), got_status
        # A's queue still waits: B came first.
        assert not any(k.startswith("a") for k in got_status), got_status
        b.close()  # B gives its share back: A's first waiting request goes on
        deadline = time.time() + 20
        while "a0" not in got_status and time.time() < deadline:
            time.sleep(0.1)
        assert got_status.get("a0", (0, ""))[1].startswith("HTTP/1.1 200"), got_status
    finally:
        for s in held + queued:
            s.close()
    assert wait_held(fair, lambda b: b <= 0, timeout=20) == 0
