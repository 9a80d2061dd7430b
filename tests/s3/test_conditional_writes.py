"""Conditional writes (docs/s3.md, "Conditional writes"): `If-None-Match: *` and
`If-Match` on PutObject and CompleteMultipartUpload, checked against the key's object and
again by every drive as it commits, so that of many conditional writes of one key that
race, exactly one is stored; the others get 412 PreconditionFailed, or 409
ConditionalRequestConflict when none was (try again)."""

import hashlib
import threading
import time

import pytest
from botocore.exceptions import ClientError


def code(e):
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_if_none_match_creates_only(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*")
    assert code(e) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"first"
    # S3 takes only * on a write.
    etag = s3.head_object(Bucket=bucket, Key="k")["ETag"]
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k", Body=b"third", IfNoneMatch=etag)
    assert code(e) == ("NotImplemented", 501)
    # After a delete the key is free again.
    s3.delete_object(Bucket=bucket, Key="k")
    s3.put_object(Bucket=bucket, Key="k", Body=b"again", IfNoneMatch="*")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"again"


def test_if_match_replaces_only_the_version_named(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="m", Body=b"x", IfMatch='"0123456789abcdef0123456789abcdef"')
    assert code(e) == ("NoSuchKey", 404)
    first = s3.put_object(Bucket=bucket, Key="m", Body=b"v1")["ETag"]
    second = s3.put_object(Bucket=bucket, Key="m", Body=b"v2", IfMatch=first)["ETag"]
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="m", Body=b"v3", IfMatch=first)
    assert code(e) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=bucket, Key="m")["Body"].read() == b"v2"
    s3.put_object(Bucket=bucket, Key="m", Body=b"v3", IfMatch=second)
    s3.put_object(Bucket=bucket, Key="m", Body=b"v4", IfMatch="*")
    assert s3.get_object(Bucket=bucket, Key="m")["Body"].read() == b"v4"


def test_complete_multipart_upload_is_conditional_too(s3, bucket):
    s3.put_object(Bucket=bucket, Key="mp", Body=b"there")
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=1, Body=b"p" * 1024)
    parts = {"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up,
                                     MultipartUpload=parts, IfNoneMatch="*")
    assert code(e) == ("PreconditionFailed", 412)
    # The upload is left as it was: completed with the right condition it stores.
    etag = s3.head_object(Bucket=bucket, Key="mp")["ETag"]
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up,
                                 MultipartUpload=parts, IfMatch=etag)
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == b"p" * 1024


def race(cluster, bucket, key, writers, condition):
    """`writers` clients (spread over the drives) each write `key` once on `condition`
    (a function of the client giving put_object's extra arguments), all released at
    once; a 409 is tried again (as S3 asks) until it is a 200 or a 412, within a minute.
    Returns each writer's outcome and body."""
    start = threading.Barrier(writers)
    outcomes = [None] * writers

    def one(i):
        s3 = cluster.client(i % len(cluster.addrs))
        body = f"writer {i} ".encode() * 100
        start.wait(30)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=body, **condition(s3))
                outcomes[i] = ("stored", body)
                return
            except ClientError as e:
                c = e.response["Error"]["Code"]
                if c != "ConditionalRequestConflict":
                    outcomes[i] = (c, body)
                    return
        outcomes[i] = ("timed out", body)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return outcomes


@pytest.mark.parametrize("rounds", [5])
def test_racing_creates_have_exactly_one_winner(cluster, s3, bucket, rounds):
    for r in range(rounds):
        key = f"lock-{r}"
        outcomes = race(cluster, bucket, key, 12, lambda _: {"IfNoneMatch": "*"})
        won = [body for what, body in outcomes if what == "stored"]
        lost = [what for what, _ in outcomes if what != "stored"]
        assert len(won) == 1, outcomes
        assert set(lost) == {"PreconditionFailed"}, lost
        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert got == won[0]
        # Every drive's coordinator agrees.
        for i in range(len(cluster.addrs)):
            assert cluster.client(i).get_object(Bucket=bucket, Key=key)["Body"].read() == got


def test_racing_replacements_of_one_version_have_exactly_one_winner(cluster, s3, bucket):
    for r in range(3):
        key = f"counter-{r}"
        base = s3.put_object(Bucket=bucket, Key=key, Body=b"base")["ETag"]
        outcomes = race(cluster, bucket, key, 10, lambda _: {"IfMatch": base})
        won = [body for what, body in outcomes if what == "stored"]
        assert len(won) == 1, outcomes
        assert {what for what, _ in outcomes if what != "stored"} == {"PreconditionFailed"}
        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(won[0]).digest()
