"""Tagging (docs/s3.md, "Tagging"): Put/Get/DeleteObjectTagging (also of a version),
x-amz-tagging on PutObject, CreateMultipartUpload and CopyObject with its directive,
Put/Get/DeleteBucketTagging, S3's limits and error codes; tags changed while a drive is
killed (SIGKILL) read back after it returns."""

import pytest
from botocore.exceptions import ClientError

from conftest import Cluster, code


def tags(s3, bucket, key, **kw):
    got = s3.get_object_tagging(Bucket=bucket, Key=key, **kw)["TagSet"]
    return {t["Key"]: t["Value"] for t in got}


def tag_set(d):
    return {"TagSet": [{"Key": k, "Value": v} for k, v in d.items()]}


def test_object_tags_are_set_read_and_removed_and_keep_the_version(s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"data", Tagging="a=1&b%20c=d+e")
    assert tags(s3, bucket, "k") == {"a": "1", "b c": "d e"}
    got = s3.get_object(Bucket=bucket, Key="k")
    assert got["TagCount"] == 2 and got["Body"].read() == b"data"
    s3.put_object_tagging(Bucket=bucket, Key="k", Tagging=tag_set({"x": "ünï code", "y": ""}))
    assert tags(s3, bucket, "k") == {"x": "ünï code", "y": ""}
    # The version stays: the same ETag and data.
    head = s3.head_object(Bucket=bucket, Key="k")
    assert head["ETag"] == put["ETag"]
    s3.delete_object_tagging(Bucket=bucket, Key="k")
    assert tags(s3, bucket, "k") == {}
    assert "TagCount" not in s3.get_object(Bucket=bucket, Key="k")
    with pytest.raises(ClientError) as e:
        s3.get_object_tagging(Bucket=bucket, Key="missing")
    assert code(e) == ("NoSuchKey", 404)


def test_each_version_has_its_own_tags(s3, bucket):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"1", Tagging="gen=1")["VersionId"]
    v2 = s3.put_object(Bucket=bucket, Key="k", Body=b"2", Tagging="gen=2")["VersionId"]
    assert tags(s3, bucket, "k") == {"gen": "2"}
    assert tags(s3, bucket, "k", VersionId=v1) == {"gen": "1"}
    r = s3.put_object_tagging(Bucket=bucket, Key="k", VersionId=v1,
                              Tagging=tag_set({"gen": "one"}))
    assert r["VersionId"] == v1
    assert tags(s3, bucket, "k", VersionId=v1) == {"gen": "one"}
    assert tags(s3, bucket, "k", VersionId=v2) == {"gen": "2"}
    # A delete marker has no tags.
    marker = s3.delete_object(Bucket=bucket, Key="k")["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.get_object_tagging(Bucket=bucket, Key="k", VersionId=marker)
    assert code(e) == ("MethodNotAllowed", 405)
    # The version deleted for good takes its tags with it; the one made current keeps its.
    s3.delete_object(Bucket=bucket, Key="k", VersionId=marker)
    s3.delete_object(Bucket=bucket, Key="k", VersionId=v2)
    assert tags(s3, bucket, "k") == {"gen": "one"}


def test_multipart_and_copies_carry_tags(s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", Tagging="kind=multi")
    part = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=1,
                          Body=b"p" * 1000)
    s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert tags(s3, bucket, "mp") == {"kind": "multi"}
    src = {"Bucket": bucket, "Key": "mp"}
    s3.copy_object(Bucket=bucket, Key="copied", CopySource=src)
    assert tags(s3, bucket, "copied") == {"kind": "multi"}
    s3.copy_object(Bucket=bucket, Key="replaced", CopySource=src,
                   TaggingDirective="REPLACE", Tagging="kind=copy")
    assert tags(s3, bucket, "replaced") == {"kind": "copy"}
    s3.copy_object(Bucket=bucket, Key="none", CopySource=src, TaggingDirective="REPLACE")
    assert tags(s3, bucket, "none") == {}
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="bad", CopySource=src, TaggingDirective="MERGE")
    assert code(e) == ("InvalidArgument", 400)


def test_s3s_limits_and_error_codes(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", Tagging="keep=me")
    ten = {f"k{i}": "v" for i in range(10)}
    s3.put_object_tagging(Bucket=bucket, Key="k", Tagging=tag_set(ten))
    longest = {"k" * 128: "v" * 256}
    s3.put_object_tagging(Bucket=bucket, Key="k", Tagging=tag_set(longest))
    bad = [
        {f"k{i}": "v" for i in range(11)},
        {"k" * 129: "v"},
        {"k": "v" * 257},
        {"aws:reserved": "v"},
        {"bad<char>": "v"},
    ]
    for t in bad:
        with pytest.raises(ClientError) as e:
            s3.put_object_tagging(Bucket=bucket, Key="k", Tagging=tag_set(t))
        assert code(e) == ("InvalidTag", 400), t
    with pytest.raises(ClientError) as e:
        s3.put_object_tagging(Bucket=bucket, Key="k", Tagging={"TagSet": [
            {"Key": "d", "Value": "1"}, {"Key": "d", "Value": "2"}]})
    assert code(e) == ("InvalidTag", 400)
    # Nothing refused changed the tags.
    assert tags(s3, bucket, "k") == longest
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="other", Body=b"x", Tagging="a=1&a=2")
    assert code(e) == ("InvalidArgument", 400)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="other", Body=b"x", Tagging="aws:x=1")
    assert code(e) == ("InvalidTag", 400)
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="other")
    assert code(e) == ("404", 404)


def test_bucket_tags(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_bucket_tagging(Bucket=bucket)
    assert code(e) == ("NoSuchTagSet", 404)
    fifty = {f"team{i}": f"v{i}" for i in range(50)}
    s3.put_bucket_tagging(Bucket=bucket, Tagging=tag_set(fifty))
    got = s3.get_bucket_tagging(Bucket=bucket)["TagSet"]
    assert {t["Key"]: t["Value"] for t in got} == fifty
    with pytest.raises(ClientError) as e:
        s3.put_bucket_tagging(Bucket=bucket, Tagging=tag_set({**fifty, "one": "more"}))
    assert code(e) == ("InvalidTag", 400)
    # Versioning, kept in the same settings, is untouched by tags and the other way.
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    assert len(s3.get_bucket_tagging(Bucket=bucket)["TagSet"]) == 50
    s3.delete_bucket_tagging(Bucket=bucket)
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    with pytest.raises(ClientError) as e:
        s3.get_bucket_tagging(Bucket=bucket)
    assert code(e) == ("NoSuchTagSet", 404)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_tagging(Bucket="no-such-bucket-here")
    assert code(e) == ("NoSuchBucket", 404)


def test_tags_changed_while_a_drive_is_killed_read_back_after_it_returns():
    c = Cluster(extra=lambda i: ["heal_rate_bytes=0", "heal_retry_seconds=1"])
    try:
        s3 = c.client(0, connect_timeout=5, read_timeout=30)
        s3.create_bucket(Bucket="tags-heal")
        s3.put_object(Bucket="tags-heal", Key="k", Body=b"x" * 5000, Tagging="v=old")
        c.kill9(5)
        s3.put_object_tagging(Bucket="tags-heal", Key="k", Tagging=tag_set({"v": "new"}))
        c.start(5)
        c.wait_healed()
        # With two of the drives that took the change down, the returned drive is one of
        # the four records read.
        c.kill9(0)
        c.kill9(1)
        via = c.client(5, connect_timeout=5, read_timeout=30)
        assert tags(via, "tags-heal", "k") == {"v": "new"}
    finally:
        c.stop()
