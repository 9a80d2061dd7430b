"""Growing a cluster: `oedd admin add` puts new drives into the map at the next epoch,
with their failure domain and capacity, and pushes it; started with that map, the new
drives take new objects' shards by capacity, and every object, old and new, reads back
(docs/cluster.md, "Placement"; docs/deploy.md, "Adding drives")."""

import hashlib
import tomllib

from conftest import Cluster, free_ports


def test_added_drives_take_new_shards_by_capacity():
    # Rebalance (test_rebalance.py) moves old objects' shards at the heal rate: kept to a
    # crawl here, so that reads of old objects go where they were written.
    c = Cluster(n=6, k=4, m=2, extra=lambda i: ["heal_rate_bytes=1024"])
    try:
        s3 = c.client()
        s3.create_bucket(Bucket="grow")
        written = {}

        def put(key, n):
            data = hashlib.sha256(key.encode()).digest() * n
            s3.put_object(Bucket="grow", Key=key, Body=data)
            written[key] = hashlib.sha256(data).hexdigest()

        for i in range(20):
            put(f"old{i}", 2000)
        ports = free_ports(4)
        # A weight on new drives alone, where no drive has one, is refused.
        r = c.admin("add", f"127.0.0.1:{ports[0]}", "--capacity-gb", "4000", check=False)
        assert r.returncode != 0 and "capacity_gb" in r.stderr, r.stderr
        said = c.admin("add", f"drive-7=127.0.0.1:{ports[0]}@shelf-2",
                       f"127.0.0.1:{ports[1]}@shelf-2")
        assert "drive-7, drive-8 added (out) from epoch 2" in said, said
        made = tomllib.loads(c.map.read_text())
        assert made["epoch"] == 2
        new = [d for d in made["drives"] if d["id"] in ("drive-7", "drive-8")]
        assert [(d["domain"], d["state"], d["since"]) for d in new] == [("shelf-2", "out", 2)] * 2
        # The running drives took the map; writes go on while the new drives are out and
        # not running yet.
        assert all(s and s["epoch"] == 2 for s in c.status()[:6])
        for i in range(10):
            put(f"between{i}", 1000)
        c.ids += ["drive-7", "drive-8"]
        c.addrs += [f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"]
        c.metrics_addrs += [f"127.0.0.1:{ports[2]}", f"127.0.0.1:{ports[3]}"]
        c.procs += [None, None]
        c.start(6)
        c.start(7)
        c.admin("in", "drive-7")
        c.admin("in", "drive-8")
        assert all(s and s["epoch"] == 4 for s in c.status())
        for i in range(120):
            put(f"new{i}", 500)
        status = c.status()
        shards = [s["shards"] for s in status]
        moved = sum(s["rebalance"]["moved_shards"] for s in status)
        # Each new object's 6 shards over 7 failure domains (the two new drives share
        # shelf-2; the six others without a capacity weigh as the mean of those with
        # one, so every drive weighs alike): at most one shard per domain, so shelf-2
        # holds about 6/7 of the 120 new objects' shards, split between its drives
        # (and the few old shards the rebalance moved there meanwhile, or is moving: at
        # most two at a time per old drive).
        assert 80 <= sum(shards[6:]) - moved <= 120 + 12 and min(shards[6:]) >= 30, (shards, moved)
        # Everything reads back, through an old drive and a new one.
        for j, (key, digest) in enumerate(sorted(written.items())):
            got = c.client([0, 6][j % 2]).get_object(Bucket="grow", Key=key)["Body"].read()
            assert hashlib.sha256(got).hexdigest() == digest, key
        # Objects written before the drives joined are found where they went, with two
        # old drives down (the placement of today alone would miss some).
        c.kill9(0)
        c.kill9(1)
        for key, digest in sorted(written.items()):
            got = c.client(6).get_object(Bucket="grow", Key=key)["Body"].read()
            assert hashlib.sha256(got).hexdigest() == digest, key
        # A drive listed twice, or an address in use, is refused and the map unchanged.
        r = c.admin("add", f"drive-7=127.0.0.1:{free_ports(1)[0]}", check=False)
        assert r.returncode != 0 and "listed twice" in r.stderr, r.stderr
        assert tomllib.loads(c.map.read_text())["epoch"] == 4
        # With drives down (0 and 1, killed above), the map is written and the command
        # says which running drives did not take it.
        r = c.admin("add", f"127.0.0.1:{free_ports(1)[0]}", check=False)
        assert r.returncode != 0 and "did not take it" in r.stderr, r.stderr
        assert "drive-1" in r.stderr and "drive-9 added (out) from epoch 5" in r.stdout, r.stdout
    finally:
        c.stop()
