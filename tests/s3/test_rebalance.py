"""Rebalance: after drives are added (or a lost one removed), every drive moves the shards
the map in force places elsewhere, in the background at the heal rate, while clients
read, write and list; kill -9 of a source or a destination mid-move loses nothing, and a
restarted drive resumes. Capacities set each drive's share (docs/cluster.md,
"Rebalance"; docs/deploy.md, "Adding drives")."""

import hashlib
import random
import struct
import threading
import time
import tomllib

import pytest
from botocore.exceptions import ClientError

from conftest import Cluster


def score(bucket, key, drive):
    """The placement hash of crates/model/src/map.rs: the first 8 bytes of SHA-256 over
    each part with its length before it, little-endian."""
    h = hashlib.sha256()
    for part in (bucket, key, drive):
        b = part.encode()
        h.update(struct.pack("<Q", len(b)))
        h.update(b)
    return struct.unpack("<Q", h.digest()[:8])[0]


def placed(bucket, key, drives, n):
    """The drives of an unweighted map with a domain per drive that get `key`'s shards."""
    return set(sorted(drives, key=lambda d: score(bucket, key, d), reverse=True)[:n])


def rebalanced(c, epoch):
    """Every drive answers and its rebalance is done for `epoch`."""
    status = c.status()
    if all(s and s["rebalance"]["state"] == "done" and s["rebalance"]["epoch"] == epoch
           for s in status):
        return status
    return None


class Load:
    """A client writing new objects and reading back acknowledged ones through one
    drive, and listing the bucket, until stopped; every failure is kept."""

    def __init__(self, c, drive, bucket, acked):
        self.s3 = c.client(drive)
        self.bucket, self.acked = bucket, acked
        self.lock = threading.Lock()
        self.errors, self.puts, self.gets, self.lists = [], 0, 0, 0
        # The key whose PUT is on its way: a listing may show it before its answer
        # arrives.
        self.pending = set()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.rw, daemon=True),
                        threading.Thread(target=self.list, daemon=True)]
        for t in self.threads:
            t.start()

    def rw(self):
        rnd = random.Random(7)
        deadline = time.time() + 600
        i = 0
        while not self.stop.is_set() and time.time() < deadline:
            key = f"during/{i:05d}"
            data = rnd.randbytes(rnd.randint(1, 96) * 1024)
            with self.lock:
                self.pending.add(key)
            try:
                try:
                    self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
                    with self.lock:
                        self.acked[key] = hashlib.sha256(data).hexdigest()
                        self.puts += 1
                        keys = list(self.acked)
                finally:
                    with self.lock:
                        self.pending.discard(key)
                for k in rnd.sample(keys, min(3, len(keys))):
                    got = self.s3.get_object(Bucket=self.bucket, Key=k)["Body"].read()
                    if hashlib.sha256(got).hexdigest() != self.acked[k]:
                        self.errors.append(f"GET {k}: other bytes")
                    self.gets += 1
            except Exception as e:  # noqa: BLE001 - every failure counts
                self.errors.append(f"{key}: {e!r}")
            i += 1

    def list(self):
        deadline = time.time() + 600
        while not self.stop.is_set() and time.time() < deadline:
            with self.lock:
                before = set(self.acked)
            try:
                seen, token = [], None
                while True:
                    args = dict(Bucket=self.bucket, MaxKeys=97)
                    if token:
                        args["ContinuationToken"] = token
                    page = self.s3.list_objects_v2(**args)
                    seen += [o["Key"] for o in page.get("Contents", [])]
                    if not page.get("IsTruncated"):
                        break
                    token = page["NextContinuationToken"]
            except Exception as e:  # noqa: BLE001
                self.errors.append(f"LIST: {e!r}")
                continue
            if len(seen) != len(set(seen)):
                self.errors.append(f"LIST: {len(seen) - len(set(seen))} keys twice")
            if seen != sorted(seen):
                self.errors.append("LIST: out of order")
            missing = before - set(seen)
            if missing:
                self.errors.append(f"LIST: {len(missing)} acknowledged keys missing, e.g. {sorted(missing)[:3]}")
            with self.lock:
                unknown = set(seen) - set(self.acked) - self.pending
            if unknown:
                self.errors.append(f"LIST: {len(unknown)} keys never acknowledged")
            self.lists += 1

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(120)
        return self.errors


def test_rebalance_moves_shards_to_added_drives_under_load():
    # A low heal rate, so that the move lasts while drives are killed and restarted.
    c = Cluster(n=6, k=4, m=2, extra=lambda i: ["heal_rate_bytes=262144"])
    try:
        s3 = c.client()
        s3.create_bucket(Bucket="grow")
        rnd = random.Random(1)
        acked = {}
        for i in range(300):
            data = rnd.randbytes(rnd.randint(1, 160) * 1024)
            key = f"before/{i:04d}"
            s3.put_object(Bucket="grow", Key=key, Body=data)
            acked[key] = hashlib.sha256(data).hexdigest()
        old_ids = list(c.ids)
        before = {k: placed("grow", k, old_ids, 6) for k in acked}
        # Two spares, outside the map: no S3 there yet.
        spares = [c.start_spare(), c.start_spare()]
        with pytest.raises(ClientError) as refused:
            c.client(spares[0][0]).list_buckets()
        assert refused.value.response["Error"]["Code"] == "ServiceUnavailable"
        said = c.admin("add", *[spec for _, spec in spares])
        assert "drive-7, drive-8 added (in) from epoch 2" in said, said
        epoch = tomllib.loads(c.map.read_text())["epoch"]
        load = Load(c, 2, "grow", acked)
        # Mid-move: a source drive killed and restarted (it resumes where it stood),
        # then a destination.
        c.wait_for("shards moving", lambda: any(
            s and s["rebalance"]["moved_shards"] > 0 for s in c.status()), timeout=60)
        status = c.status()
        assert status[0]["rebalance"]["state"] == "moving", status[0]["rebalance"]
        c.kill9(0)
        time.sleep(2)
        c.start(0)
        c.wait_for("drive-1 back", lambda: c.status()[0])
        c.kill9(6)
        time.sleep(2)
        c.start(6)
        text = c.admin("status")
        assert "rebalance:" in text, text
        c.wait_for("the rebalance to finish", lambda: rebalanced(c, epoch), timeout=300)
        errors = load.finish()
        assert not errors, errors[:10]
        # Counted once the load has stopped: it writes until then.
        status = rebalanced(c, epoch)
        assert status, c.status()
        assert load.puts > 0 and load.gets > 0 and load.lists > 0
        # Everything reads back exactly, through a new drive.
        reader = c.client(7)
        for key, digest in sorted(acked.items()):
            got = reader.get_object(Bucket="grow", Key=key)["Body"].read()
            assert hashlib.sha256(got).hexdigest() == digest, key
        # Every object is where the map places it now: the shards of the objects written
        # before moved (those the new drives took, and no others), and every drive holds
        # its share, 6 of 8.
        new_ids = list(c.ids)
        minimum = sum(len(before[k] - placed("grow", k, new_ids, 6)) for k in before)
        # (A drive killed between a move and the save of its count forgets the count.)
        moved = sum(s["rebalance"]["moved_shards"] for s in status)
        assert 0 < moved <= 1.2 * minimum, (moved, minimum)
        want = {d: sum(d in placed("grow", k, new_ids, 6) for k in acked) for d in new_ids}
        assert {s["drive_id"]: s["shards"] for s in status} == want
        assert c.metric_sum(1, "oed_rebalance", what="done") == 1
        assert sum(c.metric_sum(i, "oed_rebalance_moved_shards_total") for i in range(8)) > 0
        # Listing is whole after the move too.
        keys = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket="grow")
                for o in p.get("Contents", [])]
        assert keys == sorted(acked)
    finally:
        c.stop()


def test_objects_overwritten_mid_move_do_not_hold_the_rebalance():
    # Overwritten after drives joined, an object's new version is placed by the new map;
    # its old version stays on drives that map leaves out (for the sweep) and must not
    # keep their rebalance waiting for another holder to move first.
    c = Cluster(n=6, k=4, m=2, extra=lambda i: ["heal_rate_bytes=65536"])
    try:
        s3 = c.client()
        s3.create_bucket(Bucket="over")
        rnd = random.Random(3)
        keys = [f"obj/{i:03d}" for i in range(40)]
        for key in keys:
            s3.put_object(Bucket="over", Key=key, Body=rnd.randbytes(1 << 20))
        spares = [c.start_spare(), c.start_spare()]
        c.admin("add", *[spec for _, spec in spares])
        epoch = tomllib.loads(c.map.read_text())["epoch"]
        latest = {}
        for key in keys:
            data = rnd.randbytes(rnd.randint(1, 64) * 1024)
            s3.put_object(Bucket="over", Key=key, Body=data)
            latest[key] = hashlib.sha256(data).hexdigest()
        c.wait_for("the rebalance to finish", lambda: rebalanced(c, epoch), timeout=150)
        reader = c.client(7)
        for key, digest in latest.items():
            got = reader.get_object(Bucket="over", Key=key)["Body"].read()
            assert hashlib.sha256(got).hexdigest() == digest, key
    finally:
        c.stop()


def test_capacity_weights_set_each_drives_share():
    # k + m = 3 of 8 drives: a drive of 4 TB beside drives of 1 TB holds a shard of
    # 3 * 4 / 14 of the objects, one of 1 TB 3 / 14.
    c = Cluster(n=6, k=2, m=1)
    try:
        s3 = c.client()
        s3.create_bucket(Bucket="weights")
        n = 1500
        for i in range(n):
            s3.put_object(Bucket="weights", Key=f"k{i:05d}", Body=b"x" * 100)
        made = tomllib.loads(c.map.read_text())
        epoch = made.get("epoch", 1)
        text = "\n".join(l for l in c.map.read_text().splitlines() if not l.startswith("epoch"))
        text = f"epoch = {epoch + 1}\n" + text.replace('address = "', 'capacity_gb = 1000\naddress = "')
        c.map.write_text(text)
        assert tomllib.loads(c.map.read_text())["drives"][0]["capacity_gb"] == 1000
        c.admin("push")
        spares = [c.start_spare(), c.start_spare()]
        c.admin("add", *[spec for _, spec in spares], "--capacity-gb", "4000")
        epoch = tomllib.loads(c.map.read_text())["epoch"]
        status = c.wait_for("the rebalance to finish", lambda: rebalanced(c, epoch), timeout=300)
        shards = [s["shards"] for s in status]
        big = 3 * 4000 / 14000 * n
        small = 3 * 1000 / 14000 * n
        for got in shards[6:]:
            assert abs(got - big) <= 0.1 * big, (shards, big)
        assert abs(sum(shards[:6]) - 6 * small) <= 0.1 * 6 * small, (shards, small)
        for got in shards[:6]:
            assert abs(got - small) <= 0.25 * small, (shards, small)
        for i in range(0, n, 37):
            assert s3.get_object(Bucket="weights", Key=f"k{i:05d}")["Body"].read() == b"x" * 100
    finally:
        c.stop()


def test_a_lost_drive_is_removed_and_its_shards_rebuilt_elsewhere():
    c = Cluster(n=7, k=4, m=2)
    try:
        s3 = c.client()
        s3.create_bucket(Bucket="lost")
        rnd = random.Random(3)
        acked = {}
        for i in range(80):
            data = rnd.randbytes(rnd.randint(1, 100) * 1024)
            s3.put_object(Bucket="lost", Key=f"k{i}", Body=data)
            acked[f"k{i}"] = hashlib.sha256(data).hexdigest()
        held = c.status()[6]["shards"]
        assert held > 0
        c.kill9(6)
        # A drain needs the drive; a drive that answers is not lost.
        r = c.admin("remove", "drive-7", check=False)
        assert r.returncode != 0 and "does not answer" in r.stderr, r.stderr
        r = c.admin("remove", "drive-1", "--lost", check=False)
        assert r.returncode != 0 and "answers" in r.stderr, r.stderr
        said = c.admin("remove", "drive-7", "--lost")
        assert "removed from epoch 2 as lost" in said, said
        c.ids, c.addrs, c.procs = c.ids[:6], c.addrs[:6], c.procs[:6]
        c.metrics_addrs = c.metrics_addrs[:6]

        def rebuilt():
            status = rebalanced(c, 2)
            if status and all(s["queue"]["hints"] == 0 and sum(s["queue"]["local"].values()) == 0
                              for s in status):
                return status
            return None

        status = c.wait_for("the lost drive's shards to be rebuilt", rebuilt, timeout=300)
        assert sum(s["rebalance"]["rebuilt_shards"] for s in status) == held
        # Every object has its 6 shards again: with two more drives down, all read.
        c.kill9(0)
        c.kill9(1)
        reader = c.client(2)
        for key, digest in sorted(acked.items()):
            got = reader.get_object(Bucket="lost", Key=key)["Body"].read()
            assert hashlib.sha256(got).hexdigest() == digest, key
    finally:
        c.stop()
