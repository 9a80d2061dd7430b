"""Numbered shard files (docs/drive.md, "What is on the disk" and "Durability"), on a real
6-drive 4+2 cluster: objects PUT by many clients at once land in numbered files under
shards/n/ that their records name (every one read back), nothing is left beside them, the
drives sync each directory at most once per shard written and export the count, and a
drive killed with SIGKILL and started again numbers its new files past every old one."""

import hashlib
import re
import threading

import pytest

from conftest import Cluster

CHUNK = 65536
NUMBERED = re.compile(r"^[0-9a-f]{16}\.shard$")


def data(n, seed):
    return hashlib.shake_256(f"n{seed}".encode()).digest(n)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(chunk=CHUNK)
    yield c
    c.stop()


def put_all(cluster, bucket, keys, size, threads=16):
    errors = []

    def put(part):
        s3 = cluster.client(part % 6)
        for key in keys[part::threads]:
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=data(size, key))
            except Exception as e:  # noqa: BLE001 - recorded, the test fails below
                errors.append(f"PUT {key}: {e!r}")

    ts = [threading.Thread(target=put, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in ts), "PUTs still running after 300 s"
    assert not errors, errors[:5]


def numbered_files(cluster, i):
    """Drive i's shard files, each as (directory number, file number)."""
    out = []
    for f in cluster.shard_files(i):
        rel = f.relative_to(cluster.data_dir(i) / "shards")
        assert rel.parts[0] == "n" and NUMBERED.match(f.name), f"not a numbered file: {rel}"
        d, n = int(rel.parts[1], 16), int(f.name[:16], 16)
        assert d == n // 4096, f"{rel} is not in its number's directory"
        out.append((d, n))
    return out


def test_concurrent_puts_land_in_numbered_files_and_share_directory_syncs(cluster):
    s3 = cluster.client(0)
    s3.create_bucket(Bucket="numbered")
    keys = [f"obj{i:03d}" for i in range(64)]
    size = 4 * CHUNK * 2 + 1234  # three stripes, the last one short
    put_all(cluster, "numbered", keys, size)
    for key in keys:
        got = s3.get_object(Bucket="numbered", Key=key)["Body"].read()
        assert got == data(size, key), key
    files = 0
    for i in range(6):
        files += len(numbered_files(cluster, i))
        assert not list((cluster.data_dir(i) / "tmp").iterdir()), "files left in tmp/"
        shards = cluster.metric(i, "oed_shard_write_seconds_count", '{phase="place"}')
        syncs = cluster.metric(i, "oed_shard_directory_syncs_total")
        assert 0 < syncs <= shards, f"drive {i + 1}: {syncs} directory fsyncs for {shards} shards"
    # Each object has one shard on each of the six drives, and nothing else is there.
    assert files == 6 * len(keys)


def test_a_drive_killed_and_started_numbers_past_its_old_files(cluster):
    s3 = cluster.client(0)
    s3.create_bucket(Bucket="restart")
    size = 4 * CHUNK + 99
    put_all(cluster, "restart", [f"a{i}" for i in range(12)], size, threads=4)
    before = numbered_files(cluster, 2)
    last_dir = max(d for d, _ in before)
    cluster.kill9(2)
    cluster.start(2)
    cluster.wait_for("drive 3 back", lambda: cluster.status()[2] is not None)
    put_all(cluster, "restart", [f"b{i}" for i in range(12)], size, threads=4)
    after = set(numbered_files(cluster, 2)) - set(before)
    assert len(after) == 12, f"drive 3 has {len(after)} new files for 12 new objects"
    assert all(d > last_dir for d, _ in after), f"new files in old directories: {sorted(after)}"
    for key in [f"a{i}" for i in range(12)] + [f"b{i}" for i in range(12)]:
        got = s3.get_object(Bucket="restart", Key=key)["Body"].read()
        assert got == data(size, key), key
