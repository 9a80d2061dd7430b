"""Drives with `direct_io = true` (shard files written with O_DIRECT, docs/drive.md
"Direct I/O") on a 6-drive 4+2 cluster: objects of sizes around the 4 KiB blocks and the
512 KiB stage come back byte for byte from every drive, shard files on disk are whole
(each drive's files decode), the drives read the raw uploads of other drives straight
into their aligned buffers (none is spliced through the page cache), and a drive killed
with SIGKILL in the middle of a stream of writes loses no acknowledged object. Where the
file system refuses O_DIRECT the drives write through the page cache, and the same must
hold."""

import hashlib
import os
import threading

import pytest

from conftest import Cluster

CHUNK = 65536


def data(n, seed):
    return hashlib.shake_256(f"d{seed}".encode()).digest(n)


def takes_o_direct(path):
    """Whether the file system at `path` opens files with O_DIRECT (ext4 and xfs do,
    tmpfs does not)."""
    probe = os.path.join(path, "o-direct-probe")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


@pytest.fixture(scope="module")
def direct():
    c = Cluster(chunk=CHUNK, extra=lambda i: ["direct_io=true"])
    yield c
    c.stop()


def test_objects_around_block_and_stage_sizes_read_back_from_every_drive(direct):
    s3 = direct.client(0)
    s3.create_bucket(Bucket="dio")
    # Object sizes whose shards end just before, at and after 4 KiB blocks and the
    # 512 KiB stage of the drives' aligned buffer (4 data shards of 64 KiB chunks).
    sizes = [0, 1, 4095, 4096, 4097, 4 * 4096 * 4 + 3, 4 * CHUNK, 4 * CHUNK + 1,
             8 * CHUNK - 5, 4 * 524288 - 4096, 4 * 524288, 4 * 524288 + 4096,
             3 * 1024 * 1024 + 12345]
    bodies = {f"s{n}": data(n, n) for n in sizes}
    for k, b in bodies.items():
        s3.put_object(Bucket="dio", Key=k, Body=b)
    # Shards of 256 KiB and more went to the other drives as raw uploads, read into the
    # aligned buffers where the file system takes O_DIRECT, and spliced by none.
    received = sum(direct.metric(i, "oed_shard_uploads_direct_total") for i in range(6))
    assert sum(direct.metric(i, "oed_shard_uploads_spliced_total") for i in range(6)) == 0
    assert (received > 0) == takes_o_direct(direct.dir), received
    for i in range(6):
        c = direct.client(i)
        for k, b in bodies.items():
            assert c.get_object(Bucket="dio", Key=k)["Body"].read() == b, (i, k)
    # Every shard is readable without parity: two drives down leaves exactly k, so each
    # stripe needs every remaining drive's shard files intact.
    direct.kill9(4)
    direct.kill9(5)
    try:
        for k, b in bodies.items():
            assert s3.get_object(Bucket="dio", Key=k)["Body"].read() == b, k
    finally:
        direct.start(4)
        direct.start(5)


def test_a_drive_killed_mid_stream_loses_no_acknowledged_object(direct):
    s3 = direct.client(0)
    s3.create_bucket(Bucket="diokill")
    acked = {}
    stop = threading.Event()

    def writer():
        for n in range(400):
            if stop.is_set():
                return
            body = data(200_000 + 977 * n, 1000 + n)
            try:
                s3.put_object(Bucket="diokill", Key=f"k{n}", Body=body)
            except Exception:  # noqa: BLE001 - a write may fail while the drive is down
                continue
            acked[f"k{n}"] = body

    t = threading.Thread(target=writer)
    t.start()
    try:
        direct.wait_for("some writes acknowledged", lambda: len(acked) >= 10, timeout=120)
        direct.kill9(3)
        before = len(acked)
        direct.wait_for("writes go on with a drive down", lambda: len(acked) >= before + 10,
                        timeout=120)
        direct.start(3)
    finally:
        stop.set()
        t.join(120)
    assert len(acked) >= 20
    for i in (0, 3):
        c = direct.client(i)
        for k, b in acked.items():
            assert c.get_object(Bucket="diokill", Key=k)["Body"].read() == b, (i, k)
