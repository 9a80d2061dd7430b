"""Versioning (docs/s3.md, "Versioning"): PutBucketVersioning and GetBucketVersioning,
a version id per write, delete markers, the `null` version of unversioned and suspended
writes, GET/HEAD/DELETE/CopyObject with `versionId`, ListObjectVersions with its markers
and paging, DeleteObjects with versions; and versions kept through drives killed with
SIGKILL and healed."""

import hashlib
import time

import pytest
from botocore.exceptions import ClientError

from conftest import Cluster


def code(e):
    r = e.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


def headers(e):
    return e.value.response["ResponseMetadata"]["HTTPHeaders"]


def body(s3, bucket, key, version=None):
    kw = {"VersionId": version} if version else {}
    return s3.get_object(Bucket=bucket, Key=key, **kw)["Body"].read()


def enable(s3, bucket, status="Enabled"):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": status})


def all_versions(s3, bucket, **kw):
    """Every version and delete marker, paged by the server's markers, in listing order."""
    out, marker = [], {}
    for _ in range(1000):
        page = s3.list_object_versions(Bucket=bucket, **kw, **marker)
        entries = [("v", v) for v in page.get("Versions", [])] + \
                  [("d", d) for d in page.get("DeleteMarkers", [])]
        # Within a page, the order of the listing: by key, each key's newest first.
        entries.sort(key=lambda e: (e[1]["Key"], -e[1]["LastModified"].timestamp()))
        out += entries
        if not page["IsTruncated"]:
            return out
        marker = {"KeyMarker": page["NextKeyMarker"]}
        if page.get("NextVersionIdMarker"):
            marker["VersionIdMarker"] = page["NextVersionIdMarker"]
    raise AssertionError("the listing never ended")


def test_the_versioning_state_is_set_and_read(s3, bucket):
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    enable(s3, bucket)
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    enable(s3, bucket, "Suspended")
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Suspended"
    with pytest.raises(ClientError) as e:
        enable(s3, bucket, "Sometimes")
    assert code(e) == ("MalformedXML", 400)
    with pytest.raises(ClientError) as e:
        enable(s3, "no-such-bucket-here")
    assert code(e) == ("NoSuchBucket", 404)
    # A bucket made again under the name starts unversioned.
    s3.delete_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=bucket)
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)


def test_an_unversioned_bucket_answers_as_before(s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"one")
    assert "VersionId" not in put
    s3.put_object(Bucket=bucket, Key="k", Body=b"two")
    listed = s3.list_object_versions(Bucket=bucket)
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in listed["Versions"]] == \
        [("k", "null", True)]
    assert body(s3, bucket, "k", "null") == b"two"
    d = s3.delete_object(Bucket=bucket, Key="k")
    assert "DeleteMarker" not in d
    assert s3.list_object_versions(Bucket=bucket).get("Versions", []) == []


def test_every_write_is_a_version_read_by_its_id(s3, bucket):
    enable(s3, bucket)
    ids = [s3.put_object(Bucket=bucket, Key="doc", Body=f"v{i}".encode())["VersionId"]
           for i in range(3)]
    assert len(set(ids)) == 3 and "null" not in ids
    for i, v in enumerate(ids):
        assert body(s3, bucket, "doc", v) == f"v{i}".encode()
        h = s3.head_object(Bucket=bucket, Key="doc", VersionId=v)
        assert h["VersionId"] == v and h["ContentLength"] == 2
    got = s3.get_object(Bucket=bucket, Key="doc")
    assert got["VersionId"] == ids[2] and got["Body"].read() == b"v2"
    listed = all_versions(s3, bucket)
    assert [(v["VersionId"], v["IsLatest"]) for _, v in listed] == \
        [(ids[2], True), (ids[1], False), (ids[0], False)]
    # Only the current version is an object.
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["doc"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="doc", VersionId="0" * 32)
    assert code(e) == ("NoSuchVersion", 404)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="doc", VersionId="not-a-version")
    assert code(e) == ("InvalidArgument", 400)


def test_a_delete_adds_a_marker_and_removing_it_brings_the_object_back(s3, bucket):
    enable(s3, bucket)
    v1 = s3.put_object(Bucket=bucket, Key="a/x", Body=b"data")["VersionId"]
    d = s3.delete_object(Bucket=bucket, Key="a/x")
    assert d["DeleteMarker"] is True and d["VersionId"] not in (v1, "null")
    marker = d["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="a/x")
    assert code(e) == ("NoSuchKey", 404)
    assert headers(e).get("x-amz-delete-marker") == "true"
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="a/x", VersionId=marker)
    assert code(e)[1] == 405
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="a/x", VersionId=marker)
    assert code(e) == ("MethodNotAllowed", 405)
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    assert s3.list_objects_v2(Bucket=bucket, Delimiter="/").get("CommonPrefixes") is None
    listed = s3.list_object_versions(Bucket=bucket)
    assert [(m["VersionId"], m["IsLatest"]) for m in listed["DeleteMarkers"]] == [(marker, True)]
    assert [(v["VersionId"], v["IsLatest"]) for v in listed["Versions"]] == [(v1, False)]
    # The old version is still read by its id; removing the marker undeletes.
    assert body(s3, bucket, "a/x", v1) == b"data"
    d = s3.delete_object(Bucket=bucket, Key="a/x", VersionId=marker)
    assert d["DeleteMarker"] is True and d["VersionId"] == marker
    assert body(s3, bucket, "a/x") == b"data"
    assert s3.head_object(Bucket=bucket, Key="a/x")["VersionId"] == v1


def test_deleting_versions_for_good(s3, bucket):
    enable(s3, bucket)
    ids = [s3.put_object(Bucket=bucket, Key="k", Body=f"v{i}".encode())["VersionId"]
           for i in range(3)]
    # The current one: the newest of the rest becomes current.
    s3.delete_object(Bucket=bucket, Key="k", VersionId=ids[2])
    assert body(s3, bucket, "k") == b"v1"
    # A noncurrent one.
    s3.delete_object(Bucket=bucket, Key="k", VersionId=ids[0])
    assert [v["VersionId"] for _, v in all_versions(s3, bucket)] == [ids[1]]
    # One that is not there: deleted already, nothing to do.
    s3.delete_object(Bucket=bucket, Key="k", VersionId=ids[0])
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=bucket, Key="k", VersionId="zz")
    assert code(e) == ("InvalidArgument", 400)
    # A bucket that holds versions (or only delete markers) is not empty.
    s3.delete_object(Bucket=bucket, Key="k")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=bucket)
    assert code(e) == ("BucketNotEmpty", 409)
    for kind, v in all_versions(s3, bucket):
        s3.delete_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
    assert all_versions(s3, bucket) == []
    s3.delete_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=bucket)


def test_the_null_version_before_and_while_suspended(s3, bucket):
    s3.put_object(Bucket=bucket, Key="n", Body=b"before")
    enable(s3, bucket)
    v = s3.put_object(Bucket=bucket, Key="n", Body=b"versioned")["VersionId"]
    assert [(x["VersionId"], x["IsLatest"]) for _, x in all_versions(s3, bucket)] == \
        [(v, True), ("null", False)]
    assert body(s3, bucket, "n", "null") == b"before"
    enable(s3, bucket, "Suspended")
    put = s3.put_object(Bucket=bucket, Key="n", Body=b"suspended")
    assert put["VersionId"] == "null"
    # One null version per key: the one from before is gone.
    assert [(x["VersionId"], x["IsLatest"]) for _, x in all_versions(s3, bucket)] == \
        [("null", True), (v, False)]
    assert body(s3, bucket, "n", "null") == b"suspended"
    put = s3.put_object(Bucket=bucket, Key="n", Body=b"again")
    assert [x["VersionId"] for _, x in all_versions(s3, bucket)] == ["null", v]
    # A delete while suspended: a null delete marker replaces the null version.
    d = s3.delete_object(Bucket=bucket, Key="n")
    assert d["DeleteMarker"] is True and d["VersionId"] == "null"
    listed = all_versions(s3, bucket)
    assert [(k, x["VersionId"]) for k, x in listed] == [("d", "null"), ("v", v)]
    assert body(s3, bucket, "n", v) == b"versioned"


def test_listing_versions_pages_with_markers_and_prefixes(s3, bucket):
    enable(s3, bucket)
    made = []
    for i in range(4):
        for key in ["p/a", "p/b", "q", "p/c/d"]:
            r = s3.put_object(Bucket=bucket, Key=key, Body=f"{key}{i}".encode())
            made.append((key, r["VersionId"]))
    s3.delete_object(Bucket=bucket, Key="q")
    whole = all_versions(s3, bucket)
    assert len(whole) == 17
    keys = [v["Key"] for _, v in whole]
    assert keys == sorted(keys)
    for size in (1, 3, 4, 1000):
        assert all_versions(s3, bucket, MaxKeys=size) == whole
    # A key marker without a version marker starts after every version of that key.
    rest = s3.list_object_versions(Bucket=bucket, KeyMarker="p/b")
    assert {v["Key"] for v in rest["Versions"]} == {"p/c/d", "q"}
    # Prefix and delimiter.
    page = s3.list_object_versions(Bucket=bucket, Prefix="p/", Delimiter="/")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["p/c/"]
    assert {v["Key"] for v in page["Versions"]} == {"p/a", "p/b"}
    assert len(page["Versions"]) == 8
    with pytest.raises(ClientError) as e:
        s3.list_object_versions(Bucket=bucket, VersionIdMarker=made[0][1])
    assert code(e) == ("InvalidArgument", 400)


def test_delete_objects_with_versions(s3, bucket):
    enable(s3, bucket)
    a1 = s3.put_object(Bucket=bucket, Key="a", Body=b"1")["VersionId"]
    a2 = s3.put_object(Bucket=bucket, Key="a", Body=b"2")["VersionId"]
    s3.put_object(Bucket=bucket, Key="b", Body=b"b")
    out = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "a", "VersionId": a1}, {"Key": "b"}]})
    got = {d["Key"]: d for d in out["Deleted"]}
    assert got["a"]["VersionId"] == a1 and "DeleteMarker" not in got["a"]
    assert got["b"]["DeleteMarker"] is True and got["b"]["DeleteMarkerVersionId"]
    assert [v["VersionId"] for v in s3.list_object_versions(Bucket=bucket, Prefix="a")["Versions"]] == [a2]
    with pytest.raises(ClientError):
        s3.get_object(Bucket=bucket, Key="b")


def test_copy_from_a_version_and_multipart_versions(s3, bucket):
    enable(s3, bucket)
    old = s3.put_object(Bucket=bucket, Key="src", Body=b"old")["VersionId"]
    s3.put_object(Bucket=bucket, Key="src", Body=b"new")
    c = s3.copy_object(Bucket=bucket, Key="dst",
                       CopySource={"Bucket": bucket, "Key": "src", "VersionId": old})
    assert c["CopySourceVersionId"] == old and c["VersionId"] not in (old, "null")
    assert body(s3, bucket, "dst") == b"old"
    # A multipart object replaced keeps its parts: its version still reads whole.
    part = b"m" * (5 << 20)
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    etags = [s3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=n,
                            Body=part)["ETag"] for n in (1, 2)]
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=up,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in zip((1, 2), etags)]})
    first = done["VersionId"]
    s3.put_object(Bucket=bucket, Key="mp", Body=b"small")
    assert body(s3, bucket, "mp") == b"small"
    assert hashlib.sha256(body(s3, bucket, "mp", first)).digest() == \
        hashlib.sha256(part * 2).digest()


HEAL = [
    "heal_rate_bytes=0",
    "heal_retry_seconds=1",
    "scrub_rate_bytes=0",
    "sweep_grace_seconds=2",
]


@pytest.fixture
def fresh():
    c = Cluster(extra=lambda i: HEAL)
    yield c
    c.stop()


def healed(c, objects):
    """Every drive holds `objects` records and no heal is queued anywhere."""
    st = c.status()
    ok = all(s and not (sum(s["queue"]["local"].values()) + s["queue"]["hints"])
             and s["shards"] == objects for s in st)
    return st if ok else False


def read_all(c, want, marker=None, versions=None):
    """Every version reads back as written with any two drives down."""
    for down in ((0, 1), (2, 3), (4, 5)):
        for i in down:
            c.kill9(i)
        via = c.client(next(i for i in range(6) if i not in down), connect_timeout=5,
                       read_timeout=30)
        for (key, v), data in want.items():
            assert via.get_object(Bucket="versions-heal", Key=key, VersionId=v)["Body"].read() == data
        listed = via.list_object_versions(Bucket="versions-heal")
        assert len(listed["Versions"]) == (versions or len(want))
        if marker:
            assert [m["VersionId"] for m in listed["DeleteMarkers"]] == [marker]
        for i in down:
            c.start(i)


def test_versions_survive_killed_drives_and_are_healed(fresh):
    """Versions written while a drive is killed (SIGKILL; a write needs k + 1 = 5 of 6)
    are healed when it returns, and every version reads back with any two drives down."""
    c = fresh
    s3 = c.client(0, connect_timeout=5, read_timeout=30)
    s3.create_bucket(Bucket="versions-heal")
    enable(s3, "versions-heal")
    want = {}
    for i in range(3):
        r = s3.put_object(Bucket="versions-heal", Key="k", Body=f"before{i}".encode() * 1000)
        want["k", r["VersionId"]] = f"before{i}".encode() * 1000
    c.kill9(5)
    for i in range(3):
        r = s3.put_object(Bucket="versions-heal", Key="k", Body=f"during{i}".encode() * 1000)
        want["k", r["VersionId"]] = f"during{i}".encode() * 1000
    marker = s3.delete_object(Bucket="versions-heal", Key="k")["VersionId"]
    c.start(5)
    c.wait_for("versions healed", lambda: healed(c, 7), timeout=120)
    read_all(c, want, marker)


def test_rot_in_noncurrent_versions_is_found_by_scrub_and_healed(fresh):
    """Bytes flipped in every shard file of one drive, noncurrent versions' included, are
    found by its scrub and healed: every version reads back with two other drives down."""
    c = fresh
    s3 = c.client(0, connect_timeout=5, read_timeout=30)
    s3.create_bucket(Bucket="versions-heal")
    enable(s3, "versions-heal")
    want = {}
    for key in ("a", "b", "c"):
        for i in range(3):
            data = hashlib.shake_256(f"{key}{i}".encode()).digest(100_000)
            want[key, s3.put_object(Bucket="versions-heal", Key=key, Body=data)["VersionId"]] = data
    files = c.shard_files(1)
    assert len(files) == 9, files
    for f in files:
        raw = bytearray(f.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        f.write_bytes(bytes(raw))
    before = int(time.time() * 1000)
    c.admin("scrub", "all")

    def scrubbed():
        st = c.status()
        return all(s and not s["scrub"]["running"] and (s["scrub"]["last_complete_ms"] or 0) > before
                   for s in st) and st
    st = c.wait_for("scrub passes", scrubbed, timeout=120)
    assert st[1]["scrub"]["corrupt_found"] == 9
    c.wait_for("versions healed", lambda: healed(c, 9), timeout=120)
    read_all(c, want)


def test_noncurrent_versions_move_with_their_key_when_drives_are_added():
    """Two drives added to a 6-drive 4+2 cluster: each noncurrent version moves where
    the new map places its key, like the current one, and every version reads back."""
    import tomllib
    from test_rebalance import placed, rebalanced
    c = Cluster(n=6, k=4, m=2, extra=lambda i: ["heal_rate_bytes=0"])
    try:
        s3 = c.client()
        s3.create_bucket(Bucket="versions-grow")
        enable(s3, "versions-grow")
        want = {}
        for i in range(20):
            for v in range(3):
                data = hashlib.shake_256(f"{i}/{v}".encode()).digest(20_000 + v)
                r = s3.put_object(Bucket="versions-grow", Key=f"k{i:02d}", Body=data)
                want[f"k{i:02d}", r["VersionId"]] = data
        spares = [c.start_spare(), c.start_spare()]
        c.admin("add", *[spec for _, spec in spares])
        epoch = tomllib.loads(c.map.read_text())["epoch"]
        status = c.wait_for("the rebalance to finish", lambda: rebalanced(c, epoch), timeout=300)
        # Three versions of every key, each where the map places the key now.
        expect = {d: 3 * sum(d in placed("versions-grow", f"k{i:02d}", c.ids, 6) for i in range(20))
                  for d in c.ids}
        assert {s["drive_id"]: s["shards"] for s in status} == expect
        for down in ((0, 1), (6, 7)):
            for i in down:
                c.kill9(i)
            via = c.client(next(i for i in range(8) if i not in down))
            for (key, v), data in want.items():
                assert via.get_object(Bucket="versions-grow", Key=key, VersionId=v)["Body"].read() == data
            for i in down:
                c.start(i)
    finally:
        c.stop()


def test_near_data_operations_take_a_version(cluster, s3, bucket):
    import json
    import urllib.request
    enable(s3, bucket)
    old = s3.put_object(Bucket=bucket, Key="data", Body=b"old bytes")["VersionId"]
    s3.put_object(Bucket=bucket, Key="data", Body=b"the new bytes")

    def sha256(query=""):
        path = f"/{bucket}/data?oed-op{query}"
        body = json.dumps({"op": "checksum", "algorithm": "sha256"}).encode()
        req = urllib.request.Request(cluster.endpoint() + path, data=body, method="POST",
                                     headers=cluster.signed_headers("POST", path, body))
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read())["result"]["hex"]
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    assert sha256() == (200, hashlib.sha256(b"the new bytes").hexdigest())
    assert sha256(f"&versionId={old}") == (200, hashlib.sha256(b"old bytes").hexdigest())
    status, text = sha256("&versionId=" + "0" * 32)
    assert status == 404 and "NoSuchVersion" in text


def test_a_public_bucket_serves_current_versions_only(cluster, s3, bucket):
    """A policy that makes objects public (s3:GetObject) lets anyone read the current
    version, not a version by its id (S3 needs s3:GetObjectVersion), and a deleted key
    reads as not there."""
    import json
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config
    enable(s3, bucket)
    old = s3.put_object(Bucket=bucket, Key="pub", Body=b"old")["VersionId"]
    s3.put_object(Bucket=bucket, Key="pub", Body=b"new")
    s3.put_object(Bucket=bucket, Key="gone", Body=b"x")
    s3.delete_object(Bucket=bucket, Key="gone")
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({
        "Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
            "Resource": f"arn:aws:s3:::{bucket}/*"}]}))
    anon = boto3.client("s3", endpoint_url=cluster.endpoint(), region_name="us-east-1",
                        config=Config(signature_version=UNSIGNED))
    assert anon.get_object(Bucket=bucket, Key="pub")["Body"].read() == b"new"
    with pytest.raises(ClientError) as e:
        anon.get_object(Bucket=bucket, Key="pub", VersionId=old)
    assert code(e) == ("AccessDenied", 403)
    with pytest.raises(ClientError) as e:
        anon.get_object(Bucket=bucket, Key="gone")
    assert code(e) == ("AccessDenied", 403)
    s3.delete_bucket_policy(Bucket=bucket)
