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


def stalled_get(url):
    """Sends a GET and reads only the status line: the body stays unread."""
    parts = urlsplit(url)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect((parts.hostname, parts.port))
    s.sendall(
        f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()
    )
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
        deadline = time.time() + 10
        while small.metric(0, "oed_coordinator_buffer_bytes", '{what="held"}') < MIB and time.time() < deadline:
            time.sleep(0.1)
        assert small.metric(0, "oed_coordinator_buffer_bytes", '{what="held"}') == MIB
        assert small.metric(0, "oed_coordinator_buffer_bytes", '{what="limit"}') == MIB

        # A fifth GET waits its 2 s and is refused; so is a PUT, which stores nothing.
        started = time.time()
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket="budget", Key="big")
        assert e.value.response["Error"]["Code"] == "SlowDown"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert "retry" in e.value.response["Error"]["Message"]
        assert time.time() - started >= 1.9
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket="budget", Key="other", Body=b"x" * 100_000)
        assert e.value.response["Error"]["Code"] == "SlowDown"
        # botocore retries a SlowDown once more here; every refusal is counted.
        assert small.metric(0, "oed_slowdown_total") >= 2

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
    deadline = time.time() + 10
    while small.metric(0, "oed_coordinator_buffer_bytes", '{what="held"}') > 0 and time.time() < deadline:
        time.sleep(0.1)
    assert small.metric(0, "oed_coordinator_buffer_bytes", '{what="held"}') == 0
    assert s3.get_object(Bucket="budget", Key="other")["Body"].read() == b"kept"
    s3.put_object(Bucket="budget", Key="other", Body=b"y" * MIB)
    assert s3.get_object(Bucket="budget", Key="other")["Body"].read() == b"y" * MIB
