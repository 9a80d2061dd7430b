"""A rolling upgrade (docs/deploy.md, "Upgrading"): every drive of a running cluster is
stopped with SIGTERM, as `systemctl restart oedd` stops it, and started again, one after
the other, while clients write, read back and check objects. No request may fail beyond
the retries the deployment guide documents: a client whose connection is refused by the
drive that is restarting sends the request to another drive, and the SDK's standard
retries (three attempts) cover a connection the stopping drive closed.
"""

import hashlib
import os
import threading
import time

import boto3
import botocore.exceptions
from botocore.config import Config

from conftest import ACCESS_KEY, Cluster


class Load:
    """Clients that put objects and read them back, each request to the next drive."""

    def __init__(self, cluster, bucket, threads=3):
        self.cluster, self.bucket = cluster, bucket
        self.clients = [
            boto3.client(
                "s3", endpoint_url=cluster.endpoint(i), aws_access_key_id=ACCESS_KEY,
                aws_secret_access_key=cluster.secret, region_name="us-east-1",
                config=Config(s3={"addressing_style": "path"},
                              retries={"mode": "standard", "max_attempts": 3},
                              connect_timeout=2, read_timeout=30),
            )
            for i in range(len(cluster.ids))
        ]
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.written = {}
        self.ops = 0
        self.failovers = 0
        self.failures = []
        self.threads = [threading.Thread(target=self.work, args=(t,), daemon=True)
                        for t in range(threads)]

    def call(self, start, fn):
        """fn(client) on drive `start`, then on the next drives while connections are
        refused; the SDK retries the rest itself."""
        n = len(self.clients)
        for j in range(n):
            c = self.clients[(start + j) % n]
            try:
                return fn(c)
            except botocore.exceptions.EndpointConnectionError:
                with self.lock:
                    self.failovers += 1
        raise RuntimeError("no drive accepted the connection")

    def work(self, t):
        i = 0
        deadline = time.time() + 600
        while not self.stop.is_set() and time.time() < deadline:
            key = f"t{t}/o{i}"
            body = os.urandom(64 << 10) + key.encode() * (i % 7000)
            start = (t + i) % len(self.clients)
            try:
                self.call(start, lambda c: c.put_object(Bucket=self.bucket, Key=key, Body=body))
                with self.lock:
                    self.written[key] = hashlib.sha256(body).hexdigest()
                got = self.call(start + 1, lambda c: c.get_object(
                    Bucket=self.bucket, Key=key)["Body"].read())
                if hashlib.sha256(got).hexdigest() != self.written[key]:
                    raise AssertionError(f"{key}: read back other bytes")
            except Exception as e:  # noqa: BLE001 (every failure is reported)
                with self.lock:
                    self.failures.append(f"{key}: {type(e).__name__}: {e}")
            with self.lock:
                self.ops += 1
            i += 1

    def ops_now(self):
        with self.lock:
            return self.ops


def test_restarting_every_drive_in_turn_fails_no_request():
    c = Cluster(n=6, k=4, m=2)
    try:
        s3 = c.client()
        s3.create_bucket(Bucket="rolling")
        load = Load(c, "rolling")
        for th in load.threads:
            th.start()
        c.wait_for("the load to start", lambda: load.ops_now() >= 6, timeout=60)
        for i in range(len(c.ids)):
            before = load.ops_now()
            assert c.term(i) == 0, f"{c.ids[i]} did not exit cleanly on SIGTERM"
            time.sleep(0.5)  # requests go on while the drive is away
            c.start(i)
            c.wait_for(f"{c.ids[i]} to answer the cluster",
                       lambda: all(s is not None for s in c.status()), timeout=60)
            c.wait_for("requests after the restart", lambda: load.ops_now() >= before + 6,
                       timeout=120)
        load.stop.set()
        for th in load.threads:
            th.join(120)
        assert not load.failures, load.failures[:10]
        assert load.ops >= 36 and load.written
        # Every object written during the restarts reads back whole from any drive.
        for j, (key, digest) in enumerate(sorted(load.written.items())):
            got = c.client(j % len(c.ids)).get_object(Bucket="rolling", Key=key)["Body"].read()
            assert hashlib.sha256(got).hexdigest() == digest, key
        print(f"rolling restart: {load.ops} put+get pairs, {load.failovers} connections "
              "refused and sent to the next drive, 0 failed")
    finally:
        c.stop()
