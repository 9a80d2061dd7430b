"""Taking a drive out of a cluster: `oedd admin out`, `in`, `drain`, `remove` and `push`,
against a real cluster of 7 drives (EC 4+2) with real bytes on disk.

A drive that is out gets no new shards; a drained drive holds nothing and no record
names it, so the cluster reads everything with it stopped and two more drives down;
a map change reaches every drive at once under a higher epoch, and a drive refuses an
older map.
"""

import hashlib
import re

import pytest

from conftest import Cluster
from test_heal import HEAL, SIZES, Load, body, verify


@pytest.fixture
def seven():
    c = Cluster(n=7, extra=lambda i: HEAL)
    yield c
    c.stop()


def epochs(cluster):
    return [s["epoch"] if s else None for s in cluster.status()]


def multipart(s3, bucket, key, parts):
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)
    done = []
    for n, data in enumerate(parts, 1):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=up["UploadId"], PartNumber=n, Body=data)
        done.append({"PartNumber": n, "ETag": r["ETag"]})
    s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=up["UploadId"], MultipartUpload={"Parts": done}
    )
    return hashlib.sha256(b"".join(parts)).hexdigest()


def test_a_drive_that_is_out_gets_no_new_shards_until_it_is_in_again(seven):
    s3 = seven.client(0)
    s3.create_bucket(Bucket="outs")
    for i in range(20):
        s3.put_object(Bucket="outs", Key=f"a{i}", Body=body(5000 + i, i))
    before = seven.status()[2]["shards"]
    assert before > 0

    said = seven.admin("out", "drive-3")
    assert "drive-3 is out from epoch 2" in said, said
    assert said.count("epoch 2 in force") == 7, said
    assert epochs(seven) == [2] * 7
    assert "epoch = 2" in seven.map.read_text()
    st = seven.status()
    assert st[2]["map_state"] == "out" and st[0]["map_state"] == "in"
    assert seven.metric(2, "oed_drive_out") == 1
    assert "out" in seven.admin("status").splitlines()[4]

    acked = {}
    for i in range(30):
        data = body(70_000 + i, 100 + i)
        s3.put_object(Bucket="outs", Key=f"b{i}", Body=data)
        acked[f"b{i}"] = hashlib.sha256(data).hexdigest()
    assert seven.status()[2]["shards"] == before, "a drive that is out got new shards"
    verify(seven, "outs", acked)

    # A restarted drive runs the map it was last given.
    seven.restart(2)
    assert seven.status()[2]["map_state"] == "out"

    seven.admin("in", "drive-3")
    assert epochs(seven) == [3] * 7
    for i in range(30):
        s3.put_object(Bucket="outs", Key=f"c{i}", Body=body(100 + i, i))
    assert seven.status()[2]["shards"] > before


def test_a_drained_drive_holds_nothing_and_everything_reads_without_it(seven):
    s3 = seven.client(0)
    s3.create_bucket(Bucket="drain")
    acked = {}
    for i, size in enumerate(SIZES * 3):
        data = body(size + i, i)
        s3.put_object(Bucket="drain", Key=f"k{i}", Body=data)
        acked[f"k{i}"] = hashlib.sha256(data).hexdigest()
    acked["big"] = multipart(s3, "drain", "big", [body(5 << 20, 1), body(300_000, 2)])
    # An upload still in progress has parts on the drive too.
    pending = s3.create_multipart_upload(Bucket="drain", Key="later")["UploadId"]
    late = body(200_000, 3)
    etag = s3.upload_part(Bucket="drain", Key="later", UploadId=pending, PartNumber=1, Body=late)["ETag"]
    held = seven.status()[3]["shards"]
    assert held > 0

    # Removing a drive that was not drained is refused, and says why.
    r = seven.admin("remove", "drive-4", check=False)
    assert r.returncode != 0 and "drain it first" in r.stderr, r.stderr

    load = Load(seven, "drain", keys=12)
    load.start()
    said = seven.admin("drain", "drive-4")
    assert "drive-4 is out" in said and "drive-4: drain started" in said, said
    st = seven.wait_for(
        "the drain to finish",
        lambda: (s := seven.status()[3]) and s["drain"]["state"] == "done" and s,
        timeout=180,
    )
    load.finish()
    assert st["shards"] == 0
    assert st["drain"]["moved_shards"] >= held - 12, st["drain"]
    assert seven.metric(3, "oed_drain_moved_shards_total") == st["drain"]["moved_shards"]
    assert seven.metric(3, "oed_drain", '{what="done"}') == 1
    assert "drain: done" in seven.admin("status")

    # The upload in progress completes with its moved part.
    s3.complete_multipart_upload(
        Bucket="drain", Key="later", UploadId=pending,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
    )
    acked["later"] = hashlib.sha256(late).hexdigest()
    acked.update(load.acked)

    # Every object is on the six other drives: it reads with the drained drive stopped
    # and two more down.
    seven.kill9(3)
    for pair in ((4, 5), (0, 1), (2, 6)):
        via = next(i for i in range(7) if i not in pair and i != 3)
        for i in pair:
            seven.kill9(i)
        verify(seven, "drain", acked, via=via)
        for i in pair:
            seven.start(i)
    seven.start(3)

    said = seven.admin("remove", "drive-4")
    assert re.search(r"drive-4 is removed from epoch \d+", said), said
    assert said.count("in force") == 6, said
    assert "drive-4" not in seven.map.read_text()
    seven.kill9(3)
    assert len(seven.status()) == 6
    s3.put_object(Bucket="drain", Key="after", Body=b"x" * 1000)
    acked["after"] = hashlib.sha256(b"x" * 1000).hexdigest()
    verify(seven, "drain", acked, via=1)


def test_map_changes_that_would_mix_two_maps_are_refused(seven):
    old = seven.map.read_text()
    seven.admin("out", "drive-7")
    current = seven.map.read_text()
    # An older map pushed again: every drive refuses it and keeps the one in force.
    seven.map.write_text(old)
    said = seven.admin("push")
    assert said.count("map not taken") == 7, said
    assert "epoch must grow" in said, said
    assert epochs(seven) == [2] * 7
    # A drive that was down when the map changed gets it from `push`.
    seven.map.write_text(current)
    seven.kill9(5)
    said = seven.admin("in", "drive-7")
    assert "drive-6: map not taken" in said and said.count("epoch 3 in force") == 6, said
    assert epochs(seven) == [3, 3, 3, 3, 3, None, 3]
    seven.start(5)
    seven.admin("push")
    assert epochs(seven) == [3] * 7
    # 4+2 needs 6 drives that are in: a second drive of 7 cannot go out.
    seven.admin("out", "drive-1")
    r = seven.admin("out", "drive-2", check=False)
    assert r.returncode != 0 and "that are in" in r.stderr, r.stderr
    assert epochs(seven) == [4] * 7
