"""Raw shard uploads between drives (docs/peer-api.md, "Raw uploads"), on a real 6-drive
4+2 cluster, its drives writing through the page cache (`direct_io = false`), whose
drives differ: three coordinate with `raw_shard_uploads = false` (shard
uploads as request bodies), two send every shard as a raw upload, which the receiving
drive splices from the socket into the shard file (`raw_shard_upload_min_bytes = 0`),
and one has the defaults (raw uploads of shard files of 256 KiB and more, bodies below).
Objects of sizes around the drives' inline threshold, chunk and write batch, written
through any kind of drive, come back byte for byte from every drive; the drives count
spliced uploads only when a coordinator sends raw uploads, and a default one only for
its large shards; and a drive killed with SIGKILL while raw uploads stream to it loses
no acknowledged object."""

import hashlib
import threading

import pytest

from conftest import Cluster

CHUNK = 262144
BODIES_ONLY = (3, 4, 5)
RAW = (0, 1)
DEFAULT = 2
SPLICED = "oed_shard_uploads_spliced_total"
KEPT = "oed_raw_upload_connections_kept_total"


def data(n, seed):
    return hashlib.shake_256(f"r{seed}".encode()).digest(n)


@pytest.fixture(scope="module")
def mixed():
    # Through the page cache: with direct_io (the default) raw uploads are read into
    # the files' aligned buffers instead of spliced (test_direct_io.py).
    c = Cluster(
        chunk=CHUNK,
        extra=lambda i: ["direct_io=false"] + (
            ["raw_shard_uploads=false"] if i in BODIES_ONLY
            else ["raw_shard_upload_min_bytes=0"] if i in RAW else []),
    )
    yield c
    c.stop()


SIZES = [0, 1, 4 * 4096 - 1, 4 * 4096 + 1, 4 * CHUNK, 4 * CHUNK + 7,
         3 * 4 * CHUNK - 5, 6 * 1024 * 1024 + 12345]


def put_and_check(cluster, bucket, coordinators, tag):
    bodies = {f"{tag}-{n}": data(n, f"{tag}{n}") for n in SIZES}
    for j, (k, b) in enumerate(bodies.items()):
        cluster.client(coordinators[j % len(coordinators)]).put_object(
            Bucket=bucket, Key=k, Body=b)
    for i in range(6):
        s3 = cluster.client(i)
        for k, b in bodies.items():
            got = s3.get_object(Bucket=bucket, Key=k)["Body"].read()
            assert got == b, f"drive {i + 1}: {k} differs"


def spliced(cluster):
    return [cluster.metric(i, SPLICED) for i in range(6)]


def kept(cluster):
    return [cluster.metric(i, KEPT) for i in range(6)]


def test_bodies_then_raw_uploads_read_back_and_are_counted(mixed):
    mixed.client(0).create_bucket(Bucket="raw")
    before, kept_before = spliced(mixed), kept(mixed)
    put_and_check(mixed, "raw", BODIES_ONLY, "bodies")
    assert spliced(mixed) == before, "a coordinator with raw_shard_uploads=false sent raw uploads"
    assert kept(mixed) == kept_before
    put_and_check(mixed, "raw", RAW, "raw")
    after = spliced(mixed)
    # Every drive received shards with files of their own from a raw-upload coordinator
    # other than itself.
    assert all(a > b for a, b in zip(after, before)), (before, after)
    # And served the coordinator's next request on the connection of each stored one.
    kept_after = kept(mixed)
    assert all(a > b for a, b in zip(kept_after, kept_before)), (kept_before, kept_after)
    # Peer traffic in is counted for raw uploads as for bodies.
    for i in range(6):
        assert mixed.metric(i, "oed_traffic_bytes_total", '{class="peer",direction="in"}') > 0


def test_a_default_coordinator_sends_only_large_shards_as_raw_uploads(mixed):
    """Shard files under `raw_shard_upload_min_bytes` (256 KiB) go as request bodies on
    kept-alive connections; larger ones as raw uploads."""
    s3 = mixed.client(DEFAULT)
    s3.create_bucket(Bucket="rawmin")
    # 4 data shards of 256 KiB chunks: one stripe short of full, files of one short
    # chunk and a header, under the minimum.
    small = {f"small-{n}": data(n, f"s{n}") for n in (2 * CHUNK + 5, 4 * CHUNK - 4 * 4096)}
    before = spliced(mixed)
    for k, b in small.items():
        s3.put_object(Bucket="rawmin", Key=k, Body=b)
    assert spliced(mixed) == before, "shards under the minimum were sent as raw uploads"
    # Three stripes: files of three chunks, over the minimum.
    big = data(3 * 4 * CHUNK, "big")
    s3.put_object(Bucket="rawmin", Key="big", Body=big)
    after = spliced(mixed)
    others = [i for i in range(6) if i != DEFAULT]
    assert all(after[i] > before[i] for i in others), (before, after)
    for i in range(6):
        c = mixed.client(i)
        for k, b in {**small, "big": big}.items():
            assert c.get_object(Bucket="rawmin", Key=k)["Body"].read() == b, f"drive {i + 1}: {k}"


def test_a_drive_killed_during_raw_uploads_loses_no_acknowledged_object(mixed):
    s3 = mixed.client(0)
    s3.create_bucket(Bucket="rawkill")
    size = 4 * CHUNK * 2 + 999
    acked, errors = {}, []

    def writer(t):
        c = mixed.client(RAW[t % len(RAW)])
        for n in range(20):
            key = f"w{t}-{n}"
            body = data(size, key)
            try:
                c.put_object(Bucket="rawkill", Key=key, Body=body)
                acked[key] = body
            except Exception as e:  # noqa: BLE001 - a write may fail while a drive dies
                errors.append(repr(e))

    ts = [threading.Thread(target=writer, args=(t,)) for t in range(6)]
    for t in ts:
        t.start()
    mixed.wait_for("some writes", lambda: len(acked) >= 6, timeout=120, every=0.05)
    mixed.kill9(4)
    for t in ts:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in ts), "writers still running after 300 s"
    mixed.restart(4)
    assert len(acked) > 6, f"only {len(acked)} writes acknowledged: {errors[:3]}"
    for i in range(6):
        c = mixed.client(i)
        for k, b in acked.items():
            assert c.get_object(Bucket="rawkill", Key=k)["Body"].read() == b, f"drive {i + 1}: {k}"
