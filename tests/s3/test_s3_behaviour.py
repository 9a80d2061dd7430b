"""S3 behaviour that stock clients and conformance suites rely on, through boto3 against
a real 6-drive cluster: DeleteBucket with uploads in progress, a CompleteMultipartUpload
sent again, and GetObject/HeadObject of one part (`partNumber`)."""

import hashlib

import pytest
from botocore.exceptions import ClientError

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
