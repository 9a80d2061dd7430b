"""Limits as S3 states them, checked by the coordinator before any shard moves: user
metadata (2 KB), the request's header section (8 KB), the size of one PUT or part
(5 GiB), and the largest shard the drives take. Bad input gets the S3 error that names
it, never a 503, and is not counted against the drives."""

import hashlib

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
