"""Limits as S3 states them, checked by the coordinator before any shard moves: user
metadata (2 KB), the request's header section (8 KB), the size of one PUT or part
(5 GiB), and the largest shard the drives take. Bad input gets the S3 error that names
it, never a 503, and is not counted against the drives."""

import hashlib

import urllib.error
import urllib.request

import pytest
from botocore.exceptions import ClientError

from conftest import Cluster

MIB = 1 << 20


def code(e):
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def shard_failures(cluster):
    return cluster.metric(0, "oed_peer_shard_failures_total")


def test_user_metadata_is_limited_to_2_kb(cluster, s3, bucket):
    before = shard_failures(cluster)
    # Names (without x-amz-meta-) and values count: 1 + 2047 bytes is the most.
    s3.put_object(Bucket=bucket, Key="meta-ok", Body=b"x", Metadata={"m": "v" * 2047})
    assert s3.head_object(Bucket=bucket, Key="meta-ok")["Metadata"] == {"m": "v" * 2047}
    for meta in ({"m": "v" * 2048}, {"a": "v" * 1500, "b": "v" * 600}):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="meta-big", Body=b"x", Metadata=meta)
        assert code(e) == ("MetadataTooLarge", 400)
    with pytest.raises(ClientError) as e:
        s3.create_multipart_upload(Bucket=bucket, Key="meta-big", Metadata={"m": "v" * 3000})
    assert code(e) == ("MetadataTooLarge", 400)
    with pytest.raises(ClientError) as e:
        s3.copy_object(
            Bucket=bucket, Key="meta-big", CopySource={"Bucket": bucket, "Key": "meta-ok"},
            MetadataDirective="REPLACE", Metadata={"m": "v" * 3000},
        )
    assert code(e) == ("MetadataTooLarge", 400)
    # Far past it (the header section's limit then answers first): still the client's
    # error, not the cluster's.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="meta-big", Body=b"x", Metadata={"m": "v" * 65536})
    assert code(e)[1] == 400 and code(e)[0] in ("MetadataTooLarge", "RequestHeaderSectionTooLarge")
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="meta-big")
    assert code(e)[1] == 404
    assert shard_failures(cluster) == before


def test_a_header_section_over_8_kb_is_refused(cluster, s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="hdr", Body=b"x", CacheControl=", ".join(["no-cache"] * 900))
    assert code(e) == ("RequestHeaderSectionTooLarge", 400)
    fits = ", ".join(["no-cache"] * 500)
    s3.put_object(Bucket=bucket, Key="hdr", Body=b"x", CacheControl=fits)
    assert s3.head_object(Bucket=bucket, Key="hdr")["CacheControl"] == fits


def test_a_body_over_5_gib_is_refused_before_it_is_read(cluster, bucket):
    h = cluster.signed_headers("PUT", f"/{bucket}/huge", headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    h["Content-Length"] = str((5 << 30) + 1)
    text = cluster.raw("PUT", f"/{bucket}/huge", h)
    assert text.startswith("HTTP/1.1 400") and "<Code>EntityTooLarge</Code>" in text, text


@pytest.fixture
def small_shards():
    c = Cluster(extra=lambda i: [f"max_shard_bytes={2 * MIB}"])
    yield c
    c.stop()


def test_an_object_past_the_drives_shard_limit_is_refused_as_too_large(small_shards):
    c = small_shards
    s3 = c.client(0)
    s3.create_bucket(Bucket="lim")
    body = hashlib.shake_256(b"lim").digest(12 * MIB)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="lim", Key="big", Body=body)
    assert code(e) == ("EntityTooLarge", 400)
    assert shard_failures(c) == 0, "refused input was counted against the drives"
    # The same bytes in parts of 5, 5 and 2 MiB fit (shards of 1.25 MiB), and read back.
    up = s3.create_multipart_upload(Bucket="lim", Key="big")["UploadId"]
    parts = []
    pieces = (body[: 5 * MIB], body[5 * MIB: 10 * MIB], body[10 * MIB:])
    for n, piece in enumerate(pieces, start=1):
        r = s3.upload_part(Bucket="lim", Key="big", UploadId=up, PartNumber=n, Body=piece)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    s3.complete_multipart_upload(Bucket="lim", Key="big", UploadId=up, MultipartUpload={"Parts": parts})
    assert s3.get_object(Bucket="lim", Key="big")["Body"].read() == body


def test_a_range_past_the_end_is_416_with_the_object_size(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="r", Body=b"0123456789")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="r", Range="bytes=10-20")
    assert code(e) == ("InvalidRange", 416)
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["content-range"] == "bytes */10"
    # A range that starts inside and runs past the end is cut at the end.
    got = s3.get_object(Bucket=bucket, Key="r", Range="bytes=5-20")
    assert got["Body"].read() == b"56789" and got["ContentRange"] == "bytes 5-9/10"


@pytest.mark.parametrize("header", ["bytes=5-1", "bytes=0-1,3-4", "bytes=x-2", "items=0-3", "bytes=", "0-3"])
def test_a_range_that_cannot_be_used_is_ignored(cluster, s3, bucket, header):
    """S3 and HTTP send the whole object for a Range header they cannot use (signed
    requests, with the header signed, and presigned URLs)."""
    s3.put_object(Bucket=bucket, Key="whole", Body=b"0123456789")
    got = s3.get_object(Bucket=bucket, Key="whole", Range=header)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert got["Body"].read() == b"0123456789" and "ContentRange" not in got
    head = s3.head_object(Bucket=bucket, Key="whole", Range=header)
    assert head["ResponseMetadata"]["HTTPStatusCode"] == 200 and head["ContentLength"] == 10
    for signer in (s3, cluster.client(signature_version="s3v4")):  # SigV2 and SigV4 URLs
        url = signer.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "whole"})
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Range": header}), timeout=30) as r:
            assert (r.status, r.read()) == (200, b"0123456789")
        # The signature is still checked: a forged one is refused.
        at = url.index("Signature=") + len("Signature=")
        forged = url[:at] + ("1" if url[at] == "0" else "0") + url[at + 1 :]
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(forged, headers={"Range": header}), timeout=30)
        assert e.value.code == 403
    # A usable range on the same object still answers 206.
    assert s3.get_object(Bucket=bucket, Key="whole", Range="bytes=2-3")["Body"].read() == b"23"


def test_an_ignored_range_still_answers_missing_keys_and_conditions(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="cond", Body=b"abc")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="nope", Range="bytes=5-1")
    assert code(e) == ("NoSuchKey", 404)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="cond", Range="bytes=5-1", IfMatch='"0000"')
    assert code(e) == ("PreconditionFailed", 412)


@pytest.fixture(scope="module")
def small_read_buffers():
    c = Cluster(extra=lambda i: [f"connection_read_buffer_bytes={16 * 1024}"])
    yield c
    c.stop()


def test_small_connection_read_buffers_still_take_every_request_s3_allows(small_read_buffers):
    """`connection_read_buffer_bytes` at its least (16 KiB): the largest header section
    and metadata S3 allows still fit, a body read in pieces of at most that size is
    stored and read back whole (written through drive 0, a range read through drive 1),
    and a head larger than the buffer is answered 431 and the drive serves on."""
    c = small_read_buffers
    s3 = c.client(0)
    s3.create_bucket(Bucket="bufs")
    body = hashlib.shake_256(b"bufs").digest(5 * MIB + 12345)
    fits = ", ".join(["no-cache"] * 400)  # with the metadata, about 7 KB of 8 KB
    s3.put_object(Bucket="bufs", Key="o", Body=body, CacheControl=fits, Metadata={"m": "v" * 2047})
    got = s3.get_object(Bucket="bufs", Key="o")
    assert got["Body"].read() == body
    assert got["CacheControl"] == fits and got["Metadata"] == {"m": "v" * 2047}
    assert c.client(1).get_object(Bucket="bufs", Key="o", Range="bytes=1000000-3999999")["Body"].read() \
        == body[1000000:4000000]
    # Past S3's 8 KB but inside the buffer: the S3 error that names it, as with 64 KiB.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="bufs", Key="hdr", Body=b"x", CacheControl=", ".join(["no-cache"] * 900))
    assert code(e) == ("RequestHeaderSectionTooLarge", 400)
    # Past the buffer itself: hyper cannot hold the head, and says so.
    text = c.raw("GET", "/bufs/o", {"X-Pad": "p" * (20 * 1024)}, until=b"\r\n\r\n")
    assert text.startswith("HTTP/1.1 431"), text[:200]
    assert s3.get_object(Bucket="bufs", Key="o")["Body"].read() == body
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket="bufs", Key="hdr")
    assert code(e) == ("404", 404)
