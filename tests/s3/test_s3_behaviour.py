"""S3 behaviour that stock clients and conformance suites rely on, through boto3 against
a real 6-drive cluster: DeleteBucket with uploads in progress, a CompleteMultipartUpload
sent again, GetObject/HeadObject of one part (`partNumber`), concurrent PUTs of one key,
stored headers, request ids, digests, presigned expiry, listings and regions."""

import hashlib
import time

import pytest
from botocore.exceptions import ClientError

from conftest import SDK_RETRIES

MIB = 1 << 20


def data(n, seed):
    return hashlib.shake_256(f"s3b{seed}".encode()).digest(n)


def code(e):
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def all_shards(cluster):
    return sum(len(cluster.shard_files(i)) for i in range(6))


def two_parts(s3, bucket, key, first=5 * MIB, second=1000):
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts, bodies = [], []
    for n, size in ((1, first), (2, second)):
        b = data(size, f"{key}{n}")
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=n, Body=b)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
        bodies.append(b)
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts}
    )
    return up, parts, bodies, done


def test_delete_bucket_aborts_the_uploads_in_progress_and_removes_their_shards(cluster, s3):
    before = all_shards(cluster)
    s3.create_bucket(Bucket="rb-force")
    first = s3.create_multipart_upload(Bucket="rb-force", Key="a/one")["UploadId"]
    s3.upload_part(Bucket="rb-force", Key="a/one", UploadId=first, PartNumber=1, Body=data(MIB, 1))
    s3.upload_part(Bucket="rb-force", Key="a/one", UploadId=first, PartNumber=2, Body=data(MIB, 2))
    s3.create_multipart_upload(Bucket="rb-force", Key="two")
    assert all_shards(cluster) > before
    assert len(s3.list_multipart_uploads(Bucket="rb-force")["Uploads"]) == 2

    s3.delete_bucket(Bucket="rb-force")
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket="rb-force")
    assert code(e)[1] == 404
    assert all_shards(cluster) == before, "the aborted uploads' shards are still on the drives"
    # The name is free again, and nothing of the old uploads comes back with it.
    s3.create_bucket(Bucket="rb-force")
    assert s3.list_multipart_uploads(Bucket="rb-force").get("Uploads", []) == []
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket="rb-force", Key="a/one", UploadId=first)
    assert code(e) == ("NoSuchUpload", 404)
    # A bucket that holds an object is still refused, uploads or not.
    s3.put_object(Bucket="rb-force", Key="kept", Body=b"x")
    s3.create_multipart_upload(Bucket="rb-force", Key="three")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket="rb-force")
    assert code(e) == ("BucketNotEmpty", 409)
    assert s3.get_object(Bucket="rb-force", Key="kept")["Body"].read() == b"x"
    assert len(s3.list_multipart_uploads(Bucket="rb-force")["Uploads"]) == 1


def test_a_completion_sent_again_gets_the_same_answer(s3, bucket):
    up, parts, bodies, done = two_parts(s3, bucket, "again")
    again = s3.complete_multipart_upload(
        Bucket=bucket, Key="again", UploadId=up, MultipartUpload={"Parts": parts}
    )
    assert again["ETag"] == done["ETag"] and again["Key"] == "again"
    assert s3.get_object(Bucket=bucket, Key="again")["Body"].read() == b"".join(bodies)
    # Another part list, or an upload id that never was, is still NoSuchUpload.
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="again", UploadId=up, MultipartUpload={"Parts": parts[:1]}
        )
    assert code(e) == ("NoSuchUpload", 404)
    other, _, _, _ = two_parts(s3, bucket, "other", second=10)
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="again", UploadId=other, MultipartUpload={"Parts": parts}
        )
    assert code(e) == ("NoSuchUpload", 404)


def test_get_and_head_of_one_part(s3, bucket):
    _, _, (one, two), _ = two_parts(s3, bucket, "mp")
    total = len(one) + len(two)
    got = s3.get_object(Bucket=bucket, Key="mp", PartNumber=1)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["PartsCount"] == 2 and got["ContentLength"] == len(one)
    assert got["ContentRange"] == f"bytes 0-{len(one) - 1}/{total}"
    assert got["Body"].read() == one
    got = s3.get_object(Bucket=bucket, Key="mp", PartNumber=2)
    assert got["ContentRange"] == f"bytes {len(one)}-{total - 1}/{total}"
    assert got["Body"].read() == two
    head = s3.head_object(Bucket=bucket, Key="mp", PartNumber=2)
    assert head["ContentLength"] == len(two) and head["PartsCount"] == 2
    assert head["ContentRange"] == f"bytes {len(one)}-{total - 1}/{total}"
    whole = s3.head_object(Bucket=bucket, Key="mp")
    assert whole["ContentLength"] == total and "PartsCount" not in whole
    for n in (3, 10000):
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket=bucket, Key="mp", PartNumber=n)
        assert code(e) == ("InvalidPartNumber", 416)
        assert str(n) in e.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="mp", PartNumber=1, Range="bytes=0-9")
    assert code(e) == ("InvalidRequest", 400)

    # A single-part object is one part.
    s3.put_object(Bucket=bucket, Key="single", Body=b"whole object")
    got = s3.get_object(Bucket=bucket, Key="single", PartNumber=1)
    assert got["Body"].read() == b"whole object" and got["PartsCount"] == 1
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="single", PartNumber=2)
    assert code(e) == ("InvalidPartNumber", 416)
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="single", PartNumber=2)
    assert code(e)[1] == 416


def test_standard_headers_are_stored_returned_and_overridden(s3, bucket):
    import datetime
    expires = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    stored = dict(
        CacheControl="max-age=60",
        ContentDisposition='attachment; filename="a.csv"',
        ContentEncoding="gzip",
        ContentLanguage="de-CH",
        Expires=expires,
    )
    s3.put_object(Bucket=bucket, Key="h", Body=b"payload", ContentType="text/csv", **stored)
    for got in (s3.head_object(Bucket=bucket, Key="h"), s3.get_object(Bucket=bucket, Key="h")):
        for k, v in stored.items():
            assert got[k] == v, (k, got.get(k))
        assert got["ContentType"] == "text/csv"
    got = s3.get_object(
        Bucket=bucket, Key="h",
        ResponseContentDisposition="inline", ResponseCacheControl="no-store",
        ResponseContentType="application/octet-stream", ResponseContentLanguage="fr",
    )
    assert got["ContentDisposition"] == "inline" and got["CacheControl"] == "no-store"
    assert got["ContentType"] == "application/octet-stream" and got["ContentLanguage"] == "fr"
    assert got["ContentEncoding"] == "gzip"
    # A copy keeps them; a copy that replaces metadata takes the request's.
    s3.copy_object(Bucket=bucket, Key="h2", CopySource={"Bucket": bucket, "Key": "h"})
    assert s3.head_object(Bucket=bucket, Key="h2")["CacheControl"] == "max-age=60"
    s3.copy_object(
        Bucket=bucket, Key="h3", CopySource={"Bucket": bucket, "Key": "h"},
        MetadataDirective="REPLACE", CacheControl="no-cache",
    )
    h3 = s3.head_object(Bucket=bucket, Key="h3")
    assert h3["CacheControl"] == "no-cache" and "ContentDisposition" not in h3
    # A multipart object gets what its upload was created with.
    up = s3.create_multipart_upload(Bucket=bucket, Key="mph", ContentLanguage="en", CacheControl="private")
    r = s3.upload_part(Bucket=bucket, Key="mph", UploadId=up["UploadId"], PartNumber=1, Body=b"abc")
    s3.complete_multipart_upload(
        Bucket=bucket, Key="mph", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": r["ETag"]}]},
    )
    mph = s3.head_object(Bucket=bucket, Key="mph")
    assert mph["ContentLanguage"] == "en" and mph["CacheControl"] == "private"


def test_304_and_412_carry_etag_and_last_modified(s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="c", Body=b"conditional")
    for kwargs, status in (({"IfNoneMatch": put["ETag"]}, 304), ({"IfMatch": '"0000"'}, 412)):
        for call in (s3.get_object, s3.head_object):
            with pytest.raises(ClientError) as e:
                call(Bucket=bucket, Key="c", **kwargs)
            meta = e.value.response["ResponseMetadata"]
            assert meta["HTTPStatusCode"] == status
            assert meta["HTTPHeaders"]["etag"] == put["ETag"], meta["HTTPHeaders"]
            assert meta["HTTPHeaders"]["last-modified"].endswith("GMT"), meta["HTTPHeaders"]


def test_every_answer_names_its_request(cluster, s3, bucket):
    import re
    import urllib.error
    import urllib.request
    ok = s3.put_object(Bucket=bucket, Key="id", Body=b"x")
    assert re.fullmatch(r"[0-9A-F]{16}", ok["ResponseMetadata"]["RequestId"])
    ids = {s3.head_object(Bucket=bucket, Key="id")["ResponseMetadata"]["RequestId"] for _ in range(3)}
    assert len(ids) == 3
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "missing"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url, timeout=10)
    body = e.value.read().decode()
    rid = e.value.headers["x-amz-request-id"]
    assert e.value.code == 404 and f"<RequestId>{rid}</RequestId>" in body, body
    assert "<Code>NoSuchKey</Code>" in body


def test_the_region_is_named_and_other_regions_are_refused(cluster, s3, bucket):
    import urllib.error
    import urllib.request
    assert s3.get_bucket_location(Bucket=bucket)["LocationConstraint"] is None
    other = cluster.client(region="eu-west-1")
    with pytest.raises(ClientError) as e:
        other.list_objects_v2(Bucket=bucket)
    assert code(e) == ("AuthorizationHeaderMalformed", 400)
    assert "'eu-west-1' is wrong; expecting 'us-east-1'" in e.value.response["Error"]["Message"]
    v4 = cluster.client(region="eu-west-1", signature_version="s3v4")
    url = v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    assert "X-Amz-Credential" in url
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url, timeout=10)
    assert e.value.code == 400
    assert "<Code>AuthorizationQueryParametersError</Code>" in e.value.read().decode()


def test_a_cluster_of_another_region():
    from conftest import Cluster
    c = Cluster(extra=lambda i: ['region="eu-central-1"'])
    try:
        s3 = c.client(region="eu-central-1")
        s3.create_bucket(Bucket="regional")
        assert s3.get_bucket_location(Bucket="regional")["LocationConstraint"] == "eu-central-1"
        s3.put_object(Bucket="regional", Key="k", Body=b"v")
        assert s3.get_object(Bucket="regional", Key="k")["Body"].read() == b"v"
        with pytest.raises(ClientError) as e:
            c.client().head_bucket(Bucket="regional")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    finally:
        c.stop()


def _raw(cluster, method, path, body=b"", headers=None):
    """A signed request to drive 0 sent as is; returns (status, headers, body)."""
    import urllib.error
    import urllib.request
    h = cluster.signed_headers(method, path, body=body, headers=headers)
    req = urllib.request.Request(cluster.endpoint() + path, data=body or None, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_an_empty_or_malformed_content_md5_is_invalid_digest(cluster, s3, bucket):
    for md5 in ("", "not base64!", "AAAA"):
        status, _, body = _raw(cluster, "PUT", f"/{bucket}/md5", b"data", {"Content-MD5": md5})
        assert status == 400 and b"<Code>InvalidDigest</Code>" in body, (md5, body)
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="md5")


def test_presigned_urls_with_expiry_out_of_range_or_past(cluster, s3, bucket):
    import time
    import urllib.error
    import urllib.request
    s3.put_object(Bucket=bucket, Key="p", Body=b"presigned")
    v4 = cluster.client(signature_version="s3v4")
    url = v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"}, ExpiresIn=60)
    assert urllib.request.urlopen(url, timeout=10).read() == b"presigned"
    for expires, why in (("604801", "less than a week"), ("-1", "non-negative"), ("0", "at least 1"), ("x", "a number")):
        bad = url.replace("X-Amz-Expires=60", f"X-Amz-Expires={expires}")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(bad, timeout=10)
        body = e.value.read().decode()
        assert e.value.code == 400 and "<Code>AuthorizationQueryParametersError</Code>" in body, body
        assert why in body
    old = v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"}, ExpiresIn=1)
    time.sleep(2.2)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(old, timeout=10)
    assert e.value.code == 403 and "<Code>AccessDenied</Code>" in e.value.read().decode()


def test_a_sigv2_presigned_url_is_held_to_a_week_as_sigv4s(cluster, s3, bucket):
    """SigV2 states no longest expiry: a URL valid for ten years is refused as SigV4's
    X-Amz-Expires over a week is, and one within a week is served."""
    import urllib.error
    import urllib.request
    s3.put_object(Bucket=bucket, Key="v2", Body=b"presigned v2")
    v2 = cluster.client(signature_version="s3")
    url = v2.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "v2"},
                                    ExpiresIn=3600)
    assert "AWSAccessKeyId=" in url and "Expires=" in url, url
    assert urllib.request.urlopen(url, timeout=10).read() == b"presigned v2"
    decade = v2.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "v2"},
                                       ExpiresIn=10 * 365 * 86400)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(decade, timeout=10)
    body = e.value.read().decode()
    assert e.value.code == 400 and "<Code>AuthorizationQueryParametersError</Code>" in body, body
    assert "at most a week" in body, body


def test_xml_bodies_too_large_or_without_a_length_are_refused_before_they_are_read(cluster, s3, bucket):
    """A DeleteObjects of 38 MB and a CompleteMultipartUpload of 89 MB (as Content-Length
    says) are answered MaxMessageLengthExceeded (400) at once, from the headers alone,
    and a DeleteObjects without a length MissingContentLength (411); nothing is deleted."""
    import socket
    s3.put_object(Bucket=bucket, Key="stays", Body=b"x")
    host, port = cluster.addrs[0].split(":")

    def answer(head):
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(head.encode() + b"<Delete><Object><Key>stays</Key></Object>")
            data = b""
            while b"</Error>" not in data:
                got = s.recv(65536)
                if not got:
                    break
                data += got
        return data.decode(errors="replace")

    for path, size in ((f"/{bucket}?delete", 38_000_000),
                       (f"/{bucket}/k?uploadId=abc", 89_000_000)):
        got = answer(f"POST {path} HTTP/1.1\r\nHost: {cluster.addrs[0]}\r\n"
                     f"Content-Length: {size}\r\n\r\n")
        assert got.startswith("HTTP/1.1 400"), got
        assert "<Code>MaxMessageLengthExceeded</Code>" in got, got
    got = answer(f"POST /{bucket}?delete HTTP/1.1\r\nHost: {cluster.addrs[0]}\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n")
    assert got.startswith("HTTP/1.1 411") and "<Code>MissingContentLength</Code>" in got, got
    assert s3.get_object(Bucket=bucket, Key="stays")["Body"].read() == b"x"


def test_delete_objects_answers_in_xml_a_client_can_read_for_every_key(cluster, s3, bucket):
    """DeleteObjects with keys that hold control characters: those XML can carry (tab) are
    deleted and named; one it cannot (U+0001, U+0007, U+000C) is not deleted and gets a
    per-key InvalidArgument naming it with U+FFFD in their place, so that the whole answer
    stays XML that boto3 reads (it took the unreadable answer for a 500); DeleteObject
    deletes it."""
    import xml.etree.ElementTree as ET
    keys = ["plain", "tab\tkey", "ctl\x01key", "bell\x07", "ff\x0ckey"]
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["plain", "tab\tkey"], r
    assert sorted(e["Key"] for e in r["Errors"]) == ["bell\ufffd", "ctl\ufffdkey", "ff\ufffdkey"], r
    assert {e["Code"] for e in r["Errors"]} == {"InvalidArgument"}, r
    # The raw answer is XML a strict parser reads.
    body = "<Delete><Object><Key>ctl\x01key</Key></Object></Delete>".encode()
    import base64
    import hashlib
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    status, _, answer = _raw(cluster, "POST", f"/{bucket}?delete", body, {"Content-MD5": md5})
    assert status == 200, answer
    ET.fromstring(answer)
    left = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert sorted(left) == ["bell\x07", "ctl\x01key", "ff\x0ckey"], left
    for k in left:
        s3.delete_object(Bucket=bucket, Key=k)
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0


def test_multipart_uploads_take_keys_of_every_length_s3_allows(cluster, s3, bucket):
    """A key of 1,024 bytes (S3's longest) is uploaded in parts, listed among the uploads
    and read back; one byte more is KeyTooLongError, as for a PUT."""
    key = "k" * 1000 + "/" + "é" * 11 + "x"
    assert len(key.encode()) == 1024
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    assert [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [key]
    part = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=1, Body=b"long key")
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"long key"
    with pytest.raises(ClientError) as e:
        s3.create_multipart_upload(Bucket=bucket, Key=key + "y")
    assert e.value.response["Error"]["Code"] == "KeyTooLongError"


def test_listing_with_an_empty_delimiter_and_keys_with_control_characters(cluster, s3, bucket):
    for k in ("a/b", "a/c", "d", "ctl\x01key"):
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    plain = s3.list_objects(Bucket=bucket)
    empty = s3.list_objects(Bucket=bucket, Delimiter="")
    assert [o["Key"] for o in empty["Contents"]] == [o["Key"] for o in plain["Contents"]]
    assert "CommonPrefixes" not in empty and "NextMarker" not in empty
    v2 = s3.list_objects_v2(Bucket=bucket, Delimiter="")
    assert v2["KeyCount"] == 4 and "CommonPrefixes" not in v2
    # Without encoding-type=url the key comes as it is, not URL-encoded.
    status, _, body = _raw(cluster, "GET", f"/{bucket}?list-type=2")
    assert status == 200
    assert b"ctl%01key" not in body and b"<Key>ctl\x01key</Key>" in body, body
    status, _, body = _raw(cluster, "GET", f"/{bucket}?list-type=2&encoding-type=url")
    assert b"<Key>ctl%01key</Key>" in body, body


def test_a_chunked_put_without_a_length_is_refused_as_s3_refuses_it(cluster, bucket):
    body = b"chunked body"
    h = cluster.signed_headers("PUT", f"/{bucket}/chunked", body=body)
    h.pop("Content-Length", None)
    h["Transfer-Encoding"] = "chunked"
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    text = cluster.raw("PUT", f"/{bucket}/chunked", h, chunked)
    assert text.startswith("HTTP/1.1 411") and "<Code>MissingContentLength</Code>" in text, text


def _slow_put(cluster, s3, bucket, key, body):
    """Starts a PUT of `body` through a URL boto3 presigned and sends its first half only;
    returns a function that sends the rest and returns the answer's status."""
    import http.client
    from urllib.parse import urlsplit
    url = urlsplit(s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": key}))
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.putrequest("PUT", f"{url.path}?{url.query}")
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders()
    conn.send(body[: len(body) // 2])

    def finish():
        conn.send(body[len(body) // 2:])
        r = conn.getresponse()
        r.read()
        conn.close()
        return r.status

    return finish


def _shard_versions(cluster, files):
    """The version id in each shard file's header."""
    return [f.read_bytes()[32:48].hex() for f in files]


@pytest.mark.parametrize("size", [100, 3 * MIB])
def test_of_two_puts_of_one_key_the_one_that_completes_last_wins(cluster, s3, bucket, size):
    key = f"race-{size}"
    first, second = data(size, f"first{size}"), data(size, f"second{size}")
    finish_first = _slow_put(cluster, s3, bucket, key, first)
    # The second starts later and completes while the first is still sending its body.
    time.sleep(0.05)
    s3.put_object(Bucket=bucket, Key=key, Body=second)
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == second
    assert finish_first() == 200
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["Body"].read() == first, "the PUT that completed last did not win"
    assert got["ETag"].strip('"') == hashlib.md5(first).hexdigest()


def test_concurrent_puts_of_one_key_leave_one_body_on_every_drive(cluster, s3, bucket):
    from concurrent.futures import ThreadPoolExecutor
    bodies = [data(MIB + i, f"many{i}") for i in range(8)]
    md5s = {hashlib.md5(b).hexdigest(): b for b in bodies}
    clients = [cluster.client(i % 6, retries=SDK_RETRIES) for i in range(8)]
    for round_ in range(3):
        before = {f for i in range(6) for f in cluster.shard_files(i)}
        with ThreadPoolExecutor(8) as pool:
            etags = list(pool.map(
                lambda i: clients[i].put_object(Bucket=bucket, Key="many", Body=bodies[i])["ETag"],
                range(8),
            ))
        assert {e.strip('"') for e in etags} == set(md5s)
        got = s3.get_object(Bucket=bucket, Key="many")
        body = got["Body"].read()
        assert md5s.get(hashlib.md5(body).hexdigest()) == body, f"round {round_}: a mixed body"
        assert got["ETag"].strip('"') == hashlib.md5(body).hexdigest()
        # Every drive kept the same version, and only it: one shard file each.
        new = [f for i in range(6) for f in cluster.shard_files(i) if f not in before]
        assert len(new) == 6, f"round {round_}: {len(new)} new shard files"
        assert len(set(_shard_versions(cluster, new))) == 1, f"round {round_}: drives disagree"
        for i in range(6):
            assert cluster.client(i).get_object(Bucket=bucket, Key="many")["Body"].read() == body
