"""Buckets, objects, listings and multipart uploads through boto3, on a 6-drive 4+2
cluster with 64 KiB chunks (a stripe holds 256 KiB, so sizes below cross stripe and
chunk boundaries and end in short tail stripes)."""

import base64
import concurrent.futures
import datetime
import hashlib
import os
import socket

import pytest
from botocore.exceptions import ClientError

from conftest import SDK_RETRIES

STRIPE = 4 * 65536


def code(e):
    return e.value.response["Error"]["Code"]


def status(e):
    return e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def data(n, seed=1):
    return hashlib.shake_256(f"{seed}".encode()).digest(n) if n else b""


def test_bucket_lifecycle(s3):
    s3.create_bucket(Bucket="life-cycle")
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert "life-cycle" in names
    s3.head_bucket(Bucket="life-cycle")
    assert s3.get_bucket_location(Bucket="life-cycle").get("LocationConstraint") in (None, "")
    assert "Status" not in s3.get_bucket_versioning(Bucket="life-cycle")
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket="life-cycle")
    assert code(e) == "BucketAlreadyOwnedByYou"
    s3.put_object(Bucket="life-cycle", Key="x", Body=b"1")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket="life-cycle")
    assert code(e) == "BucketNotEmpty"
    s3.delete_object(Bucket="life-cycle", Key="x")
    s3.delete_bucket(Bucket="life-cycle")
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket="life-cycle")
    assert status(e) == 404
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="life-cycle", Key="x", Body=b"1")
    assert code(e) == "NoSuchBucket"
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket="Bad_Name")
    assert code(e) == "InvalidBucketName"


@pytest.mark.parametrize(
    "size", [0, 1, 4095, 65536, STRIPE - 1, STRIPE, STRIPE + 1, 3 * STRIPE + 12345]
)
def test_round_trip_sizes(s3, bucket, size):
    body = data(size, size)
    put = s3.put_object(Bucket=bucket, Key=f"obj-{size}", Body=body)
    assert put["ETag"] == '"%s"' % hashlib.md5(body).hexdigest()
    got = s3.get_object(Bucket=bucket, Key=f"obj-{size}")
    assert got["Body"].read() == body
    assert got["ContentLength"] == size
    assert got["ETag"] == put["ETag"]


def test_metadata_and_content_type(s3, bucket):
    s3.put_object(
        Bucket=bucket, Key="m", Body=b"hello", ContentType="text/plain",
        Metadata={"Color": "blue", "n": "1"},
    )
    h = s3.head_object(Bucket=bucket, Key="m")
    assert h["ContentType"] == "text/plain"
    assert h["Metadata"] == {"color": "blue", "n": "1"}
    assert h["ContentLength"] == 5
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="nope")
    assert status(e) == 404
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="nope")
    assert code(e) == "NoSuchKey"


def test_ranges(s3, bucket):
    body = data(3 * STRIPE + 999, 7)
    s3.put_object(Bucket=bucket, Key="r", Body=body)
    n = len(body)
    for a, b in [(0, 0), (0, 99), (65530, 65545), (STRIPE - 3, STRIPE + 3),
                 (STRIPE, 2 * STRIPE - 1), (n - 10, n - 1), (5, n - 1)]:
        got = s3.get_object(Bucket=bucket, Key="r", Range=f"bytes={a}-{b}")
        assert got["Body"].read() == body[a:b + 1], (a, b)
        assert got["ContentRange"] == f"bytes {a}-{b}/{n}"
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    got = s3.get_object(Bucket=bucket, Key="r", Range="bytes=-100")
    assert got["Body"].read() == body[-100:]
    got = s3.get_object(Bucket=bucket, Key="r", Range=f"bytes={n - 5}-")
    assert got["Body"].read() == body[-5:]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="r", Range=f"bytes={n}-{n + 5}")
    assert code(e) == "InvalidRange"


def test_conditional_requests(s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="c", Body=b"v1")
    tag = put["ETag"]
    assert s3.get_object(Bucket=bucket, Key="c", IfMatch=tag)["Body"].read() == b"v1"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfMatch='"0000"')
    assert status(e) == 412
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfNoneMatch=tag)
    assert status(e) == 304
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    past = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=future)
    assert status(e) == 304
    assert s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=past)["Body"].read() == b"v1"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfUnmodifiedSince=past)
    assert status(e) == 412
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="c", Body=b"v2", IfNoneMatch="*")
    assert status(e) == 412
    assert s3.get_object(Bucket=bucket, Key="c")["Body"].read() == b"v1"


def signed_head(cluster, method, path, body, headers):
    """The head of a SigV4-signed request to drive 0, as bytes (the body is not included)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {cluster.addrs[0]}"]
    lines += [f"{k}: {v}" for k, v in cluster.signed_headers(method, path, body, headers).items()]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_head(sock):
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response head: {got!r}"
        got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    return head.decode().lower(), rest


def test_a_refused_expect_continue_put_closes_the_connection(cluster, s3, bucket):
    # botocore sends "Expect: 100-continue" with every PutObject and, refused at once,
    # never sends the body. Were the connection kept, the server would take the first
    # bytes of the client's next request as that body, and the request would fail SigV4.
    s3.put_object(Bucket=bucket, Key="c", Body=b"v1")
    with socket.create_connection(tuple(cluster.addrs[0].split(":")), timeout=10) as sock:
        put = {"If-None-Match": "*", "Expect": "100-continue"}
        sock.sendall(signed_head(cluster, "PUT", f"/{bucket}/c", b"v2", put))
        head, _ = read_head(sock)
        assert head.startswith("http/1.1 412"), head
        assert "\r\nconnection: close" in head, head
        try:
            while sock.recv(65536):
                pass
        except TimeoutError:
            pytest.fail("the server kept the connection open after refusing the body")
    # A PUT whose body is read keeps its connection for the next request.
    with socket.create_connection(tuple(cluster.addrs[0].split(":")), timeout=10) as sock:
        sock.sendall(signed_head(cluster, "PUT", f"/{bucket}/d", b"v2", {"Expect": "100-continue"}))
        head, _ = read_head(sock)
        assert head.startswith("http/1.1 100"), head
        sock.sendall(b"v2")
        head, _ = read_head(sock)
        assert head.startswith("http/1.1 200") and "connection: close" not in head, head
        sock.sendall(signed_head(cluster, "GET", f"/{bucket}/d", b"", {}))
        head, _ = read_head(sock)
        assert head.startswith("http/1.1 200"), head
    assert s3.get_object(Bucket=bucket, Key="c")["Body"].read() == b"v1"
    assert s3.get_object(Bucket=bucket, Key="d")["Body"].read() == b"v2"


def test_content_md5_is_checked_and_a_bad_one_stores_nothing(s3, bucket):
    good = base64.b64encode(hashlib.md5(b"payload").digest()).decode()
    s3.put_object(Bucket=bucket, Key="md5", Body=b"payload", ContentMD5=good)
    bad = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="md5", Body=b"changed", ContentMD5=bad)
    assert code(e) == "BadDigest"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="md5-new", Body=b"changed", ContentMD5=bad)
    assert code(e) == "BadDigest"
    assert s3.get_object(Bucket=bucket, Key="md5")["Body"].read() == b"payload"
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="md5-new")


KEYS = [
    "ünïcødé/ключ/鍵 ✓",
    "../../etc/passwd",
    "a//b///c",
    "/leading",
    "trailing/",
    "sp ace+plus%percent?q=1&x#frag",
    "k" * 1024,
    "x",
]


def test_key_edge_cases_round_trip(s3, bucket):
    for i, k in enumerate(KEYS):
        s3.put_object(Bucket=bucket, Key=k, Body=f"v{i}".encode())
    for i, k in enumerate(KEYS):
        assert s3.get_object(Bucket=bucket, Key=k)["Body"].read() == f"v{i}".encode(), k
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert listed == sorted(KEYS, key=lambda k: k.encode())
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k" * 1025, Body=b"")
    assert code(e) in ("KeyTooLongError", "InvalidArgument")


def test_listing(s3, bucket):
    keys = [f"dir{d}/sub{s}/f{f}" for d in range(3) for s in range(2) for f in range(3)]
    keys += ["top1", "top2"]
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    everything = sorted(keys)
    r = s3.list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in r["Contents"]] == everything and r["KeyCount"] == len(keys)
    # Pages of 5 follow on exactly.
    seen, token = [], None
    for _ in range(20):
        kw = {"ContinuationToken": token} if token else {}
        r = s3.list_objects_v2(Bucket=bucket, MaxKeys=5, **kw)
        seen += [o["Key"] for o in r.get("Contents", [])]
        if not r["IsTruncated"]:
            break
        token = r["NextContinuationToken"]
    assert seen == everything
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["dir0/", "dir1/", "dir2/"]
    assert [o["Key"] for o in r["Contents"]] == ["top1", "top2"]
    r = s3.list_objects_v2(Bucket=bucket, Prefix="dir1/", Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["dir1/sub0/", "dir1/sub1/"]
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/", MaxKeys=2)
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["dir0/", "dir1/"] and r["IsTruncated"]
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/", ContinuationToken=r["NextContinuationToken"])
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["dir2/"]
    assert [o["Key"] for o in r["Contents"]] == ["top1", "top2"]
    r = s3.list_objects_v2(Bucket=bucket, StartAfter="dir2/sub1/f1")
    assert [o["Key"] for o in r["Contents"]] == ["dir2/sub1/f2", "top1", "top2"]
    # v1 with markers.
    r = s3.list_objects(Bucket=bucket, Prefix="dir0/", MaxKeys=4)
    assert len(r["Contents"]) == 4 and r["IsTruncated"]
    r2 = s3.list_objects(Bucket=bucket, Prefix="dir0/", Marker=r["Contents"][-1]["Key"])
    assert [o["Key"] for o in r["Contents"] + r2["Contents"]] == [k for k in everything if k.startswith("dir0/")]
    r = s3.list_objects(Bucket=bucket, Delimiter="/", MaxKeys=1)
    assert r["NextMarker"] == "dir0/"
    r = s3.list_objects(Bucket=bucket, Delimiter="/", Marker="dir0/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["dir1/", "dir2/"]
    # encoding-type=url: boto3 asks for it on its own and decodes it back, but leaves
    # the answer as it came when the caller asks.
    s3.put_object(Bucket=bucket, Key="sp ace/ü", Body=b"x")
    r = s3.list_objects_v2(Bucket=bucket, Prefix="sp ace/")
    assert [o["Key"] for o in r["Contents"]] == ["sp ace/ü"]
    r = s3.list_objects_v2(Bucket=bucket, Prefix="sp ace/", EncodingType="url")
    assert [o["Key"] for o in r["Contents"]] == ["sp%20ace/%C3%BC"]
    v = s3.list_object_versions(Bucket=bucket, Prefix="top")
    assert [(x["Key"], x["VersionId"], x["IsLatest"]) for x in v["Versions"]] == [
        ("top1", "null", True), ("top2", "null", True)]


def test_copy_and_multi_delete(s3, bucket):
    body = data(STRIPE + 7, 3)
    s3.put_object(Bucket=bucket, Key="src", Body=body, ContentType="a/b", Metadata={"k": "v"})
    s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    got = s3.get_object(Bucket=bucket, Key="dst")
    assert got["Body"].read() == body and got["ContentType"] == "a/b" and got["Metadata"] == {"k": "v"}
    s3.copy_object(Bucket=bucket, Key="dst2", CopySource={"Bucket": bucket, "Key": "src"},
                   MetadataDirective="REPLACE", Metadata={"new": "1"}, ContentType="c/d")
    h = s3.head_object(Bucket=bucket, Key="dst2")
    assert h["Metadata"] == {"new": "1"} and h["ContentType"] == "c/d"
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="x", CopySource={"Bucket": bucket, "Key": "missing"})
    assert code(e) == "NoSuchKey"
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "src"}, {"Key": "dst"}, {"Key": "never-existed"}]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["dst", "never-existed", "src"]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["dst2"]


def test_concurrent_puts_of_one_key_agree(cluster, bucket):
    bodies = [data(STRIPE + i, 100 + i) for i in range(6)]

    def put(i):
        c = cluster.client(i % 6, retries=SDK_RETRIES)
        c.put_object(Bucket=bucket, Key="race", Body=bodies[i])

    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        list(ex.map(put, range(6)))
    # Every drive answers with the same winner, and its bytes are whole.
    answers = set()
    for i in range(6):
        got = cluster.client(i).get_object(Bucket=bucket, Key="race")
        body = got["Body"].read()
        assert body in bodies
        assert got["ETag"] == '"%s"' % hashlib.md5(body).hexdigest()
        answers.add(body)
    assert len(answers) == 1


def test_multipart(s3, bucket):
    part = 5 * 1024 * 1024
    parts = [data(part, 1), data(part, 2), data(1234, 3)]
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", ContentType="x/y",
                                    Metadata={"a": "b"})
    uid = up["UploadId"]
    etags = []
    for n, p in enumerate(parts, 1):
        etags.append(s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=n, Body=p)["ETag"])
    listed = s3.list_parts(Bucket=bucket, Key="mp", UploadId=uid)["Parts"]
    assert [(p["PartNumber"], p["Size"], p["ETag"]) for p in listed] == [
        (i + 1, len(p), etags[i]) for i, p in enumerate(parts)]
    uploads = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [("mp", uid)]
    # Not visible before completion; internal keys never listed.
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid, MultipartUpload={
            "Parts": [{"PartNumber": 2, "ETag": etags[1]}, {"PartNumber": 1, "ETag": etags[0]}]})
    assert code(e) == "InvalidPartOrder"
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": etags[1]}]})
    assert code(e) == "InvalidPart"
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]})
    digests = b"".join(hashlib.md5(p).digest() for p in parts)
    assert done["ETag"] == '"%s-3"' % hashlib.md5(digests).hexdigest()
    whole = b"".join(parts)
    got = s3.get_object(Bucket=bucket, Key="mp")
    assert got["Body"].read() == whole
    assert got["ContentType"] == "x/y" and got["Metadata"] == {"a": "b"}
    assert got["ContentLength"] == len(whole)
    a, b = part - 10, part + 10
    r = s3.get_object(Bucket=bucket, Key="mp", Range=f"bytes={a}-{b}")
    assert r["Body"].read() == whole[a:b + 1]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["mp"]
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=1, Body=b"x")
    assert code(e) == "NoSuchUpload"
    # Part copy and a too-small middle part.
    up2 = s3.create_multipart_upload(Bucket=bucket, Key="mp2")["UploadId"]
    c1 = s3.upload_part_copy(Bucket=bucket, Key="mp2", UploadId=up2, PartNumber=1,
                             CopySource={"Bucket": bucket, "Key": "mp"},
                             CopySourceRange=f"bytes=0-{part - 1}")
    e2 = s3.upload_part(Bucket=bucket, Key="mp2", UploadId=up2, PartNumber=2, Body=b"tail")["ETag"]
    s3.complete_multipart_upload(Bucket=bucket, Key="mp2", UploadId=up2, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": c1["CopyPartResult"]["ETag"]}, {"PartNumber": 2, "ETag": e2}]})
    assert s3.get_object(Bucket=bucket, Key="mp2")["Body"].read() == parts[0] + b"tail"
    up3 = s3.create_multipart_upload(Bucket=bucket, Key="mp3")["UploadId"]
    t1 = s3.upload_part(Bucket=bucket, Key="mp3", UploadId=up3, PartNumber=1, Body=b"small")["ETag"]
    t2 = s3.upload_part(Bucket=bucket, Key="mp3", UploadId=up3, PartNumber=2, Body=b"last")["ETag"]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="mp3", UploadId=up3, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": t1}, {"PartNumber": 2, "ETag": t2}]})
    assert code(e) == "EntityTooSmall"
    s3.abort_multipart_upload(Bucket=bucket, Key="mp3", UploadId=up3)
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket=bucket, Key="mp3", UploadId=up3)
    assert code(e) == "NoSuchUpload"
    # Overwriting and deleting a multipart object leaves no internal records behind.
    s3.put_object(Bucket=bucket, Key="mp", Body=b"small now")
    s3.delete_object(Bucket=bucket, Key="mp")
    s3.delete_object(Bucket=bucket, Key="mp2")
    s3.delete_bucket(Bucket=bucket)


def test_md5_etags_of_concurrent_uploads_and_what_the_metric_counts(cluster, s3, bucket):
    """Uploads written at once are hashed together on the coordinator's MD5 thread; each
    ETag is still its own body's MD5, and `oed_md5_bytes_total{streams}` counts the
    bytes by how many uploads shared a call (1 to 16)."""

    def hashed():
        found = cluster.series(0, "oed_md5_bytes_total")
        assert found and all(1 <= int(l["streams"]) <= 16 for l, _ in found), found
        return sum(v for _, v in found)

    before = hashed()
    bodies = {f"md5-{i}": data(6 * STRIPE + 1000 * i, 700 + i) for i in range(6)}
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        etags = dict(zip(bodies, pool.map(
            lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1])["ETag"],
            bodies.items())))
    for k, b in bodies.items():
        assert etags[k] == f'"{hashlib.md5(b).hexdigest()}"', k
    # Whole stripes go to the thread (the last, short one of each object may not).
    assert hashed() - before >= sum(6 * STRIPE for _ in bodies)
