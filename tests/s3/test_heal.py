"""The fault suite: a 6-drive 4+2 cluster of real `oedd` processes with real bytes on
disk, faults made for real (SIGKILL, SIGSTOP, bytes flipped in shard files, a data
directory deleted), each case under a load whose content hashes the test keeps. Every
case ends with every acknowledged object read back byte for byte and every object back
at full redundancy: with six drives and k + m = 6, every drive holds a shard of every
object, so full redundancy is every drive holding as many shards as there are objects,
no heal queued anywhere, and the objects readable with two other drives stopped.

Heal runs without a rate limit and retries deferred heals after a second; the scrubber
runs only when `oedd admin scrub` asks (scrub_rate_bytes = 0), with leftovers swept
after two seconds.
"""

import hashlib
import os
import random
import shutil
import signal
import subprocess
import threading
import time

import pytest
from botocore.exceptions import ClientError

from conftest import Cluster

STRIPE = 4 * 65536
SIZES = [0, 1, 5000, 70_000, STRIPE - 1, STRIPE + 1, 3 * STRIPE + 12345]

HEAL = [
    "heal_rate_bytes=0",
    "heal_retry_seconds=1",
    "scrub_rate_bytes=0",
    "sweep_grace_seconds=2",
]


def body(n, seed):
    return hashlib.shake_256(f"h{seed}".encode()).digest(n)


@pytest.fixture
def fresh():
    c = Cluster(extra=lambda i: HEAL)
    yield c
    c.stop()


class Load:
    """Writes objects of many sizes through drive 0 and keeps the content of each key's
    last acknowledged write."""

    def __init__(self, cluster, bucket, keys=24):
        self.s3 = cluster.client(0, connect_timeout=5, read_timeout=30)
        self.bucket = bucket
        self.keys = keys
        self.acked = {}
        self.errors = 0
        self.stop = threading.Event()
        self.seed = 0
        self.thread = None

    def put(self, key, data):
        try:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
        except ClientError as e:
            assert e.response["ResponseMetadata"]["HTTPStatusCode"] in (500, 503), e
            self.errors += 1
            self.last_error = e
            return False
        except Exception as e:  # connection reset by a killed coordinator, timeouts
            self.errors += 1
            self.last_error = e
            return False
        self.acked[key] = hashlib.sha256(data).hexdigest()
        return True

    def one(self):
        self.seed += 1
        key = f"k{self.seed % self.keys}"
        return self.put(key, body(SIZES[self.seed % len(SIZES)] + self.seed, self.seed))

    def run(self, seconds=None, count=None):
        deadline = time.time() + (seconds or 3600)
        n = 0
        while not self.stop.is_set() and time.time() < deadline and (count is None or n < count):
            self.one()
            n += 1

    def start(self):
        self.thread = threading.Thread(target=self.run, kwargs={"seconds": 120}, daemon=True)
        self.thread.start()

    def finish(self):
        self.stop.set()
        self.thread.join(150)


def verify(cluster, bucket, acked, via=0):
    """Every acknowledged key reads back as its last acknowledged content."""
    s3 = cluster.client(via)
    for key, digest in sorted(acked.items()):
        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert hashlib.sha256(got).hexdigest() == digest, key


def healthy(cluster, objects):
    """True once every drive holds `objects` shards and no heal is queued anywhere."""
    st = cluster.status()
    if any(s is None for s in st):
        return False
    for s in st:
        queued = sum(s["queue"]["local"].values()) + s["queue"]["hints"]
        if queued or s["shards"] != objects:
            return False
    return st


def full_redundancy(cluster, bucket, acked, objects=None, timeout=120):
    """Waits for heal to finish, then proves each drive's shards by reading every object
    with two other drives stopped, for three different pairs."""
    n = objects if objects is not None else len(acked)
    cluster.wait_for("full redundancy", lambda: healthy(cluster, n), timeout=timeout)
    for pair in ((4, 5), (0, 1), (2, 3)):
        via = next(i for i in range(6) if i not in pair)
        for i in pair:
            cluster.kill9(i)
        verify(cluster, bucket, acked, via=via)
        for i in pair:
            cluster.start(i)


def scrubbed(cluster, before):
    """Starts a scrub on every drive and waits until each completed a pass after `before`."""
    cluster.admin("scrub", "all")

    def done():
        st = cluster.status()
        return all(
            s and not s["scrub"]["running"] and (s["scrub"]["last_complete_ms"] or 0) > before
            for s in st
        ) and st
    return cluster.wait_for("scrub passes", done, timeout=120)


def test_degraded_writes_are_healed_when_the_drive_returns(fresh):
    s3 = fresh.client(0)
    s3.create_bucket(Bucket="deg")
    fresh.kill9(4)
    load = Load(fresh, "deg", keys=12)
    load.run(count=12)
    assert load.errors == 0
    put = s3.put_object(Bucket="deg", Key="one-more", Body=body(70_000, 99))
    assert put["ResponseMetadata"]["HTTPHeaders"]["x-oed-degraded"] == "1"
    load.acked["one-more"] = hashlib.sha256(body(70_000, 99)).hexdigest()
    st = fresh.status()
    assert st[4] is None
    assert st[0]["queue"]["hints"] == 13, "the coordinator holds what drive 5 missed"
    fresh.start(4)
    st = fresh.wait_for("heal", lambda: healthy(fresh, 13), timeout=120)
    assert st[4]["heal"]["healed_shards"] == 13
    assert fresh.metric(4, "oed_heal_queued_total", '{cause="degraded_write"}') == 13
    assert fresh.metric(4, "oed_healed_shards_total") == 13
    full_redundancy(fresh, "deg", load.acked)


def test_kill_9_of_m_drives_during_writes_and_reads_loses_nothing(fresh):
    s3 = fresh.client(0)
    s3.create_bucket(Bucket="kill")
    load = Load(fresh, "kill")
    load.run(count=30)
    load.start()
    time.sleep(1)
    fresh.kill9(5)
    time.sleep(1)
    # Reads meanwhile, with one drive down and then two; the writes go on (overwrites
    # that fail while two drives are down must leave what they were to replace).
    reader = fresh.client(1)
    snapshot = dict(load.acked)
    fresh.kill9(3)
    for key in list(snapshot)[:6]:
        reader.get_object(Bucket="kill", Key=key)["Body"].read()
    time.sleep(1)
    fresh.start(3)
    time.sleep(2)
    fresh.start(5)
    time.sleep(1)
    load.finish()
    verify(fresh, "kill", load.acked)
    full_redundancy(fresh, "kill", load.acked)


def test_flipped_bytes_are_found_by_scrub_and_healed(fresh):
    s3 = fresh.client(0)
    s3.create_bucket(Bucket="rot")
    load = Load(fresh, "rot", keys=16)
    load.run(count=16)
    rng = random.Random(7)
    flipped = 0
    for d in (1, 2):
        files = [f for f in fresh.shard_files(d) if f.stat().st_size > 200]
        for n, f in enumerate(rng.sample(files, 3)):
            raw = bytearray(f.read_bytes())
            # One flip in a header, the others in chunks or their CRCs.
            at = 10 if n == 0 else rng.randrange(64, len(raw))
            raw[at] ^= 0xFF
            f.write_bytes(bytes(raw))
            flipped += 1
    # Reads stay correct while the rot is there.
    verify(fresh, "rot", load.acked, via=3)
    before = int(time.time() * 1000)
    st = scrubbed(fresh, before)
    found = sum(s["scrub"]["corrupt_found"] for s in st)
    read_found = sum(
        fresh.metric(d, "oed_heal_queued_total", '{cause="read_corrupt"}') for d in (1, 2)
    )
    # Every flip was found: by the scrub, or already by the reads above.
    assert found + read_found >= flipped
    assert found >= 1
    full_redundancy(fresh, "rot", load.acked)
    # The drives restarted (their counters with them): a new pass finds nothing bad.
    st = scrubbed(fresh, int(time.time() * 1000))
    assert sum(s["scrub"]["corrupt_found"] for s in st) == 0, "a heal left a bad shard"
    assert fresh.metric(1, "oed_scrub_last_complete_timestamp_seconds") > before / 1000


def test_a_wiped_drive_is_refilled_completely(fresh):
    s3 = fresh.client(0)
    s3.create_bucket(Bucket="wipe")
    load = Load(fresh, "wipe", keys=20)
    load.run(count=20)
    old = fresh.status()[2]["incarnation"]
    fresh.kill9(2)
    shutil.rmtree(fresh.data_dir(2))
    fresh.start(2)
    st = fresh.wait_for(
        "the refill",
        lambda: (s := fresh.status())[2] and s[2]["refill"]["state"] == "done" and s,
    )
    r = st[2]["refill"]
    assert st[2]["incarnation"] != old
    assert [s["epoch"] for s in st] == [1] * 6
    assert r["listed_shards"] == 20 and r["progress"] == 1.0
    full_redundancy(fresh, "wipe", load.acked)
    out = fresh.admin("status")
    assert "drive-3" in out and "done" in out and "nothing queued" in out


def test_a_second_fault_while_healing_loses_nothing(fresh):
    s3 = fresh.client(0)
    s3.create_bucket(Bucket="two")
    fresh.kill9(1)
    load = Load(fresh, "two", keys=20)
    load.run(count=20)
    fresh.start(1)
    # While drive 2 heals (or just after), drive 5 goes down and its disk is lost.
    time.sleep(0.2)
    fresh.kill9(4)
    shutil.rmtree(fresh.data_dir(4))
    verify(fresh, "two", load.acked, via=3)
    fresh.start(4)
    full_redundancy(fresh, "two", load.acked)


def test_a_frozen_drive_and_puts_of_the_same_keys_meanwhile(fresh):
    s3 = fresh.client(0)
    s3.create_bucket(Bucket="frz")
    load = Load(fresh, "frz", keys=6)
    load.run(count=6)
    fresh.procs[3].send_signal(signal.SIGSTOP)
    try:
        # Longer than the peer timeout (5 s): these writes go on without drive 4.
        load.run(count=8)
    finally:
        fresh.procs[3].send_signal(signal.SIGCONT)
    assert load.errors == 0, load.last_error
    load.run(count=6)
    verify(fresh, "frz", load.acked)
    full_redundancy(fresh, "frz", load.acked)


def kill_coordinator_mid_put(cluster, path, data):
    """Sends a signed PUT of `data` to drive 0, kills it (kill -9) when half the body is
    sent, and closes the connection."""
    import socket
    headers = cluster.signed_headers("PUT", path, body=data)
    headers["Content-Length"] = str(len(data))
    host, port = cluster.addrs[0].split(":")
    sock = socket.create_connection((host, int(port)))
    head = f"PUT {path} HTTP/1.1\r\nHost: {cluster.addrs[0]}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k.lower() != "host")
    sock.sendall(head.encode() + b"\r\n" + data[: len(data) // 2])
    time.sleep(0.5)
    cluster.kill9(0)
    sock.close()


def test_a_coordinator_killed_mid_put_leaves_nothing_visible_and_no_leftovers(fresh):
    s3 = fresh.client(1)
    s3.create_bucket(Bucket="half")
    s3.put_object(Bucket="half", Key="k", Body=b"old")
    kill_coordinator_mid_put(fresh, "/half/k", body(8 * STRIPE, 5))
    assert s3.get_object(Bucket="half", Key="k")["Body"].read() == b"old"
    fresh.start(0)
    # Leftovers of other crashes on drive 2, older than the grace period: a temp file and
    # a shard file no record points to.
    stale = time.time() - 3600
    leftovers = [fresh.data_dir(1) / "tmp" / "upload-0001", fresh.data_dir(1) / "shards" / "ab" / "cd" / ("ab" * 32 + ".shard")]
    for f in leftovers:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"left over")
        os.utime(f, (stale, stale))
    time.sleep(2.5)
    scrubbed(fresh, int(time.time() * 1000))
    assert not any(f.exists() for f in leftovers)
    assert fresh.metric(1, "oed_sweep_removed_total", '{what="shard_files"}') == 1
    assert fresh.metric(1, "oed_sweep_removed_total", '{what="temp_files"}') == 1
    for d in range(6):
        assert not any((fresh.data_dir(d) / "tmp").iterdir()), f"temp files left on drive {d}"
    assert s3.get_object(Bucket="half", Key="k")["Body"].read() == b"old"
    full_redundancy(fresh, "half", {"k": hashlib.sha256(b"old").hexdigest()})


def test_a_coordinator_killed_mid_upload_part_leaves_the_upload_as_it_was(fresh):
    s3 = fresh.client(1)
    s3.create_bucket(Bucket="halfmp")
    up = s3.create_multipart_upload(Bucket="halfmp", Key="m")["UploadId"]
    first = body(5 << 20, 6)
    etag = s3.upload_part(Bucket="halfmp", Key="m", UploadId=up, PartNumber=1, Body=first)["ETag"]
    kill_coordinator_mid_put(fresh, f"/halfmp/m?partNumber=2&uploadId={up}", body(8 * STRIPE, 7))
    # The part that was cut off is not part of the upload; the one before it is whole.
    parts = s3.list_parts(Bucket="halfmp", Key="m", UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["ETag"]) for p in parts] == [(1, etag)]
    fresh.start(0)
    for d in range(6):
        assert not any((fresh.data_dir(d) / "tmp").iterdir()), f"temp files left on drive {d}"
    s3.complete_multipart_upload(
        Bucket="halfmp", Key="m", UploadId=up,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
    )
    verify(fresh, "halfmp", {"m": hashlib.sha256(first).hexdigest()}, via=0)
    verify(fresh, "halfmp", {"m": hashlib.sha256(first).hexdigest()}, via=3)


def test_a_version_overwritten_or_deleted_while_queued_is_not_brought_back(fresh):
    s3 = fresh.client(0)
    s3.create_bucket(Bucket="old")
    v1 = body(70_000, 1)
    s3.put_object(Bucket="old", Key="a", Body=v1)
    s3.put_object(Bucket="old", Key="b", Body=body(5000, 2))
    fresh.kill9(4)
    # Queued for drive 5 while it is away, then overwritten or deleted.
    s3.put_object(Bucket="old", Key="c", Body=body(9000, 3))
    v2 = body(80_000, 4)
    s3.put_object(Bucket="old", Key="a", Body=v2)
    s3.delete_object(Bucket="old", Key="b")
    s3.delete_object(Bucket="old", Key="c")
    fresh.start(4)
    # Drive 5 still holds b, deleted while it was away: its scrub finds that no quorum
    # holds it, and removes it once older than the grace period.
    time.sleep(2.5)
    scrubbed(fresh, int(time.time() * 1000))
    acked = {"a": hashlib.sha256(v2).hexdigest()}
    full_redundancy(fresh, "old", acked, objects=1)
    for key in ("b", "c"):
        with pytest.raises(ClientError) as e:
            s3.head_object(Bucket="old", Key=key)
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="old")["Contents"]] == ["a"]


def test_heal_sees_a_streamed_answer_as_the_drive_being_busy(fresh):
    # Heal yields part of its rate while a drive serves requests; a GET whose body is
    # still streaming counts until its body is done, not only until its head. The
    # client's receive buffer is pinned small so that the kernel cannot take the whole
    # body off the drive's hands (its send buffer grows to at most 4 MiB here).
    import socket
    from urllib.parse import urlsplit

    s3 = fresh.client(0)
    s3.create_bucket(Bucket="busy")
    size = 64 * STRIPE
    s3.put_object(Bucket="busy", Key="big", Body=body(size, 8))
    assert fresh.metric(0, "oed_requests_in_flight") == 0
    url = urlsplit(s3.generate_presigned_url("get_object", Params={"Bucket": "busy", "Key": "big"}))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    sock.settimeout(30)
    sock.connect((url.hostname, url.port))
    try:
        sock.sendall(f"GET {url.path}?{url.query} HTTP/1.1\r\nHost: {url.netloc}\r\n\r\n".encode())
        first = sock.recv(1000)
        assert first.startswith(b"HTTP/1.1 200") and b"\r\n\r\n" in first
        assert fresh.metric(0, "oed_requests_in_flight") == 1
        got = len(first) - first.index(b"\r\n\r\n") - 4
        deadline = time.monotonic() + 60
        while got < size and time.monotonic() < deadline:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            got += len(chunk)
        assert got >= size
    finally:
        sock.close()
    fresh.wait_for("the count to drop", lambda: fresh.metric(0, "oed_requests_in_flight") == 0, timeout=10)


def test_a_healer_killed_mid_refill_resumes_and_places_nothing_half():
    # Drive 3 rebuilds at 512 KiB/s, so the refill is still running when it is killed.
    slow = Cluster(extra=lambda i: HEAL + (["heal_rate_bytes=524288"] if i == 2 else []))
    try:
        s3 = slow.client(0)
        s3.create_bucket(Bucket="mid")
        load = Load(slow, "mid", keys=8)
        for i in range(8):
            load.put(f"k{i}", body(3 * STRIPE + 1000 * i, i))
        slow.kill9(2)
        shutil.rmtree(slow.data_dir(2))
        slow.start(2)
        slow.wait_for(
            "part of the refill",
            lambda: (s := slow.status()[2]) and s["refill"]["state"] == "healing"
            and s["heal"]["healed_shards"] >= 2,
        )
        slow.kill9(2)
        slow.start(2)
        st = slow.wait_for(
            "the refill to resume and finish",
            lambda: (s := slow.status())[2] and s[2]["refill"]["state"] == "done" and s,
        )
        assert st[2]["refill"]["listed_shards"] == 8
        assert not any((slow.data_dir(2) / "tmp").iterdir())
        full_redundancy(slow, "mid", load.acked)
    finally:
        slow.stop()


def test_a_drive_whose_file_system_fills_up():
    """Drive 3's data directory is a 40 MiB tmpfs with 8 MiB kept in reserve: once it is
    full, writes land degraded on the other drives (hints for drive 3), nothing stored is
    damaged, and once deletes free space, drive 3 heals what it missed."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    small = Cluster(extra=lambda i: HEAL + (
        ["reserve_bytes=8388608", "rocksdb_write_buffer_bytes=1048576"] if i == 2 else []))
    mounted = False
    try:
        small.kill9(2)
        shutil.rmtree(small.data_dir(2))
        small.data_dir(2).mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(small.data_dir(2))],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"mount failed: {r.stderr.strip()}")
        mounted = True
        small.start(2)
        s3 = small.client(0)
        s3.create_bucket(Bucket="fill")
        load = Load(small, "fill", keys=1000)
        degraded = 0
        for i in range(48):
            data = body(4 * STRIPE * 4, i)  # 4 MiB: 1 MiB of shard on each drive
            put = s3.put_object(Bucket="fill", Key=f"k{i:02}", Body=data)
            load.acked[f"k{i:02}"] = hashlib.sha256(data).hexdigest()
            degraded += put["ResponseMetadata"]["HTTPHeaders"].get("x-oed-degraded") == "1"
        assert degraded > 0, "the small file system never filled up"
        assert small.metric(2, "oed_filesystem_bytes", '{what="free"}') < 10 << 20
        verify(small, "fill", load.acked)
        # Free space on drive 3: the first objects are on it.
        for i in range(28):
            s3.delete_object(Bucket="fill", Key=f"k{i:02}")
            del load.acked[f"k{i:02}"]
        full_redundancy(small, "fill", load.acked)
    finally:
        small.stop()
        if mounted:
            subprocess.run(["umount", "-l", str(small.data_dir(2))], check=False)
            shutil.rmtree(small.dir, ignore_errors=True)
