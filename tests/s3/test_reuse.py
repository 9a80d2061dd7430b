"""Reused shard files (docs/drive.md, "Reused shard files"): on a 6-drive 4+2 cluster,
keys overwritten and deleted over and over, in sizes that grow and shrink, while other
clients read them: every read returns one whole acknowledged version (never bytes of
another object or a mix), the drives do overwrite freed files, and a drive killed with
SIGKILL comes back with its pool emptied and nothing acknowledged lost."""

import hashlib
import random
import threading
import time

import pytest

from conftest import Cluster

CHUNK = 65536
KEYS = [f"k{i}" for i in range(6)]


def data(n, seed):
    return hashlib.shake_256(f"r{seed}".encode()).digest(n)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(chunk=CHUNK)
    yield c
    c.stop()


def reused(cluster, drives):
    return sum(cluster.metric(i, "oed_shard_files_reused_total") for i in drives)


def test_reads_during_overwrites_and_deletes_return_whole_versions(cluster):
    s3 = cluster.client(0)
    s3.create_bucket(Bucket="reuse")
    # Every version ever acknowledged per key (by its digest); a read must match one.
    versions = {k: set() for k in KEYS}
    lock = threading.Lock()
    stop = threading.Event()
    errors = []
    reads = [0]

    def reader(i):
        c = cluster.client(i)
        rng = random.Random(i)
        deadline = time.time() + 120
        while not stop.is_set() and time.time() < deadline:
            key = rng.choice(KEYS)
            try:
                got = c.get_object(Bucket="reuse", Key=key)["Body"].read()
            except c.exceptions.NoSuchKey:
                continue
            except Exception as e:  # noqa: BLE001 - recorded, the test fails below
                errors.append(f"GET {key}: {e!r}")
                continue
            digest = hashlib.sha256(got).hexdigest()
            with lock:
                known = digest in versions[key]
            # A version is noted before its PUT, so a read of it is always known.
            if not known:
                errors.append(f"GET {key}: {len(got)} bytes of no version written")
            reads[0] += 1

    threads = [threading.Thread(target=reader, args=(i,)) for i in (1, 2, 3)]
    for t in threads:
        t.start()
    rng = random.Random(7)
    final = {}
    try:
        for n in range(240):
            key = KEYS[n % len(KEYS)]
            if n % 10 == 9:
                s3.delete_object(Bucket="reuse", Key=key)
                final.pop(key, None)
                continue
            # Sizes from a few chunks to about 3 MiB: shards shorter and longer than the
            # freed files they overwrite.
            body = data(rng.randrange(3 * CHUNK, 48 * CHUNK), n)
            with lock:
                versions[key].add(hashlib.sha256(body).hexdigest())
            s3.put_object(Bucket="reuse", Key=key, Body=body)
            final[key] = body
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=150)
    assert not errors, errors[:5]
    assert reads[0] > 0
    # A shard overwritten under its reader would fail its CRC32C (and be served from
    # parity, so the reads above could not tell).
    assert sum(cluster.metric(i, "oed_shard_checksum_failures_total") for i in range(6)) == 0
    assert reused(cluster, range(6)) > 0, "no drive overwrote a freed shard file"
    for i in range(6):
        c = cluster.client(i)
        for key, body in final.items():
            assert c.get_object(Bucket="reuse", Key=key)["Body"].read() == body, (i, key)


def test_a_drive_killed_while_reusing_files_keeps_every_acknowledged_object(cluster):
    s3 = cluster.client(0)
    s3.create_bucket(Bucket="reusekill")
    acked = {}
    written = [0]
    stop = threading.Event()
    failed = []

    def writer():
        deadline = time.time() + 400
        for n in range(5000):
            if stop.is_set() or time.time() > deadline:
                return
            key = f"k{n % 8}"
            body = data(CHUNK * (4 + n % 29), 5000 + n)
            try:
                s3.put_object(Bucket="reusekill", Key=key, Body=body)
            except Exception as e:  # noqa: BLE001 - a write may fail while the drive is down
                failed.append(repr(e))
                acked.pop(key, None)  # which version it holds now is not known
                continue
            acked[key] = body
            written[0] += 1

    before = reused(cluster, [3])
    t = threading.Thread(target=writer)
    t.start()
    try:
        cluster.wait_for("drive 4 reusing freed files",
                         lambda: reused(cluster, [3]) > before, timeout=120)
        # Killed while it overwrites freed files (uploads in progress in freed files
        # renamed to their numbers under shards/n/).
        cluster.kill9(3)
        n = written[0]
        cluster.wait_for("writes go on with a drive down",
                         lambda: written[0] >= n + 5 or (failed and failed[-5:]), timeout=120)
        cluster.start(3)
        n = written[0]
        cluster.wait_for("writes go on after the restart",
                         lambda: written[0] >= n + 5 or (failed and failed[-5:]), timeout=120)
    finally:
        stop.set()
        t.join(timeout=300)
    assert not failed, failed[:3]
    for i in range(6):
        c = cluster.client(i)
        for key, body in acked.items():
            assert c.get_object(Bucket="reusekill", Key=key)["Body"].read() == body, (i, key)
