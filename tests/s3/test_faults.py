"""Real faults on a 6-drive 4+2 cluster: drives killed with SIGKILL, bytes flipped in
shard files on disk, and more drives lost than the code covers."""

import hashlib

import pytest
from botocore.exceptions import ClientError

from conftest import Cluster

STRIPE = 4 * 65536


def data(n, seed):
    return hashlib.shake_256(f"f{seed}".encode()).digest(n)


@pytest.fixture
def fresh():
    c = Cluster()
    yield c
    c.stop()


def test_reads_survive_m_drives_killed(fresh):
    s3 = fresh.client(0)
    s3.create_bucket(Bucket="deg")
    bodies = {f"o{i}": data(3 * STRIPE + i * 1000, i) for i in range(8)}
    for k, b in bodies.items():
        s3.put_object(Bucket="deg", Key=k, Body=b)
    fresh.kill9(4)
    fresh.kill9(5)
    for k, b in bodies.items():
        assert s3.get_object(Bucket="deg", Key=k)["Body"].read() == b, k
        r = s3.get_object(Bucket="deg", Key=k, Range=f"bytes={STRIPE - 5}-{STRIPE + 5}")
        assert r["Body"].read() == b[STRIPE - 5:STRIPE + 6]
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket="deg")["Contents"]]
    assert listed == sorted(bodies)
    # A third drive down: more than m; reads fail cleanly, never with wrong bytes.
    fresh.kill9(3)
    for k in bodies:
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket="deg", Key=k)["Body"].read()
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="deg", Key="new", Body=b"x" * 1000)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    for i in (3, 4, 5):
        fresh.start(i)
    for k, b in bodies.items():
        assert s3.get_object(Bucket="deg", Key=k)["Body"].read() == b


def test_write_with_a_drive_down_then_read_after_it_returns(fresh):
    s3 = fresh.client(0)
    s3.create_bucket(Bucket="wdown")
    fresh.kill9(2)
    body = data(2 * STRIPE + 77, 9)
    put = s3.put_object(Bucket="wdown", Key="k", Body=body)
    assert put["ResponseMetadata"]["HTTPHeaders"].get("x-oed-degraded") == "1"
    small = s3.put_object(Bucket="wdown", Key="small", Body=b"tiny")
    assert small["ResponseMetadata"]["HTTPHeaders"].get("x-oed-degraded") == "1"
    fresh.start(2)
    for i in range(6):
        c = fresh.client(i)
        assert c.get_object(Bucket="wdown", Key="k")["Body"].read() == body
        assert c.get_object(Bucket="wdown", Key="small")["Body"].read() == b"tiny"
    # The drive that was down serves S3 too, and writes through it are whole again.
    c = fresh.client(2)
    put = c.put_object(Bucket="wdown", Key="k2", Body=body)
    assert "x-oed-degraded" not in put["ResponseMetadata"]["HTTPHeaders"]


def test_flipped_bytes_on_disk_are_never_served(fresh):
    s3 = fresh.client(0)
    s3.create_bucket(Bucket="rot")
    body = data(4 * STRIPE + 5, 11)
    s3.put_object(Bucket="rot", Key="k", Body=body)
    # Flip one byte in the middle of every shard file on two drives: each stripe then
    # misses up to two chunks, which parity covers.
    flipped = 0
    for d in (0, 1):
        for f in fresh.shard_files(d):
            raw = bytearray(f.read_bytes())
            raw[len(raw) // 2] ^= 0x5A
            f.write_bytes(bytes(raw))
            flipped += 1
    assert flipped >= 2
    for i in range(6):
        assert fresh.client(i).get_object(Bucket="rot", Key="k")["Body"].read() == body
    # Each coordinator read its own shard directly and the others' through the peer
    # API; either way a bad chunk found on a drive is counted there and queued for heal.
    found = [fresh.metric(d, "oed_shard_checksum_failures_total") for d in (0, 1)]
    assert sum(found) >= 1
    for d, n in zip((0, 1), found):
        assert fresh.metric(d, "oed_heal_backlog") >= min(n, 1)
    for d in range(2, 6):
        assert fresh.metric(d, "oed_shard_checksum_failures_total") == 0


@pytest.fixture
def quick():
    """A cluster whose drives give up on a peer after 2 s."""
    c = Cluster(extra=lambda i: ["peer_timeout_seconds=2"])
    yield c
    c.stop()


def test_an_overwrite_that_fails_keeps_the_version_it_was_to_replace(quick):
    """With one drive killed and another frozen (SIGSTOP) before it could answer, an
    overwrite reaches four drives, one short of its quorum, and fails. The four had
    committed it; they must put back the version it was to replace, which is then on
    exactly the `k` drives a read needs."""
    import os
    import signal

    s3 = quick.client(0)
    s3.create_bucket(Bucket="keep")
    # One inline shard per drive, and one shard file per drive (a single stripe, so the
    # whole body is with the drives before any answers).
    before = {"small": data(100, "s"), "file": data(200_000, "f")}
    for k, b in before.items():
        s3.put_object(Bucket="keep", Key=k, Body=b)
    quick.kill9(5)
    frozen = quick.procs[4]
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        for k, b in before.items():
            with pytest.raises(ClientError) as e:
                s3.put_object(Bucket="keep", Key=k, Body=data(len(b), f"new{k}"))
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
            got = s3.get_object(Bucket="keep", Key=k)["Body"].read()
            assert got == b, f"{k}: the failed overwrite took the stored version with it"
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    quick.start(5)
    for k, b in before.items():
        assert s3.get_object(Bucket="keep", Key=k)["Body"].read() == b
    # Overwrites with every drive up succeed, and leave one shard per drive per key once
    # they are settled (the replaced versions' files are gone).
    after = {k: data(len(b), f"again{k}") for k, b in before.items()}
    for k, b in after.items():
        s3.put_object(Bucket="keep", Key=k, Body=b)
        assert s3.get_object(Bucket="keep", Key=k)["Body"].read() == b
    files = lambda: sum(len(quick.shard_files(i)) for i in range(6))  # noqa: E731
    quick.wait_for("replaced versions' files removed", lambda: files() == 6, timeout=30)


def test_bodies_arriving_in_odd_pieces_decode_from_parity(fresh):
    """The coordinator codes a body in the pieces it arrives in (no copy into one buffer
    per stripe): bodies sent in writes of odd sizes, with pauses so that the drive reads
    them piece by piece, get their MD5 ETag and read back whole, also from parity with two
    drives down."""
    import random
    import time

    s3 = fresh.client(0)
    s3.create_bucket(Bucket="odd")
    rng = random.Random(5)
    bodies = {}
    for n in range(4):
        body = data(3 * STRIPE + 333 * n + 1, 40 + n)
        headers = fresh.signed_headers("PUT", f"/odd/o{n}", body)
        headers.update({"Content-Length": str(len(body)), "Connection": "close"})

        def writes(body=body):
            at, count = 0, 0
            while at < len(body) and count < 2000:
                size = rng.choice([1, 7, 63, 100, 4095, 16383, 16385, 40000, 65536, 99999])
                yield body[at:at + size]
                at += size
                count += 1
                if count % 3 == 0:
                    time.sleep(0.002)
            assert at >= len(body)

        answer = fresh.raw("PUT", f"/odd/o{n}", headers, writes(), until=b"\r\n\r\n")
        assert answer.startswith("HTTP/1.1 200"), answer[:300]
        assert f'etag: "{hashlib.md5(body).hexdigest()}"' in answer.lower(), answer
        bodies[f"o{n}"] = body
    for k, b in bodies.items():
        assert s3.get_object(Bucket="odd", Key=k)["Body"].read() == b, k
    fresh.kill9(4)
    fresh.kill9(5)
    for k, b in bodies.items():
        assert s3.get_object(Bucket="odd", Key=k)["Body"].read() == b, k
