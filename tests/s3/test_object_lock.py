"""Object lock (docs/s3.md, "Object lock"): buckets made with object lock, their default
retention, Put/GetObjectLockConfiguration, Put/GetObjectRetention in GOVERNANCE and
COMPLIANCE mode with x-amz-bypass-governance-retention and the right it needs,
Put/GetObjectLegalHold, the headers on PUT, CreateMultipartUpload and CopyObject; a
locked version surviving a DELETE of every kind (the bootstrap key's included), a
lifecycle rule, and a change of its lock made while a drive was killed (SIGKILL)."""

import datetime
import json

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import Cluster, code

DAY = 2
UTC = datetime.timezone.utc


def later(**kw):
    return (datetime.datetime.now(UTC) + datetime.timedelta(**kw)).replace(microsecond=0)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(extra=lambda i: [f"lifecycle_day_seconds={DAY}"])
    yield c
    c.stop()


_n = [0]


@pytest.fixture
def locked(s3):
    """A bucket made with object lock."""
    _n[0] += 1
    name = f"lock{_n[0]}"
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return name


def key_client(c, key):
    return boto3.client(
        "s3", endpoint_url=c.endpoint(0), region_name="us-east-1",
        aws_access_key_id=key["access_key_id"], aws_secret_access_key=key["secret_access_key"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def test_a_bucket_made_with_object_lock_is_versioned_and_keeps_it(s3, locked, bucket):
    assert s3.get_bucket_versioning(Bucket=locked)["Status"] == "Enabled"
    got = s3.get_object_lock_configuration(Bucket=locked)["ObjectLockConfiguration"]
    assert got == {"ObjectLockEnabled": "Enabled"}
    with pytest.raises(ClientError) as e:
        s3.put_bucket_versioning(Bucket=locked, VersioningConfiguration={"Status": "Suspended"})
    assert code(e) == ("InvalidBucketState", 409)
    # A bucket without object lock has no configuration; enabling it needs versioning.
    with pytest.raises(ClientError) as e:
        s3.get_object_lock_configuration(Bucket=bucket)
    assert code(e) == ("ObjectLockConfigurationNotFoundError", 404)
    config = {"ObjectLockEnabled": "Enabled",
              "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}}
    with pytest.raises(ClientError) as e:
        s3.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration=config)
    assert code(e) == ("InvalidBucketState", 409)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration=config)
    got = s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]
    assert got == config


@pytest.mark.parametrize("rule,expected", [
    ({"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1, "Years": 1}}, "MalformedXML"),
    ({"DefaultRetention": {"Mode": "GOVERNANCE"}}, "MalformedXML"),
    ({"DefaultRetention": {"Days": 1}}, "MalformedXML"),
    ({"DefaultRetention": {"Mode": "FOREVER", "Days": 1}}, "MalformedXML"),
    ({"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 0}}, "InvalidArgument"),
    ({"DefaultRetention": {"Mode": "COMPLIANCE", "Years": -1}}, "InvalidArgument"),
    ({"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 36501}}, "InvalidArgument"),
    ({"DefaultRetention": {"Mode": "COMPLIANCE", "Years": 101}}, "InvalidArgument"),
])
def test_a_bad_configuration_is_refused_and_nothing_changes(s3, locked, rule, expected):
    with pytest.raises(ClientError) as e:
        s3.put_object_lock_configuration(
            Bucket=locked, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled", "Rule": rule})
    assert code(e) == (expected, 400)
    assert s3.get_object_lock_configuration(Bucket=locked)["ObjectLockConfiguration"] == {
        "ObjectLockEnabled": "Enabled"}


def test_lock_headers_are_checked(s3, locked, bucket):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k", Body=b"x", ObjectLockMode="GOVERNANCE",
                      ObjectLockRetainUntilDate=later(days=1))
    assert code(e) == ("InvalidRequest", 400)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=locked, Key="k", Body=b"x", ObjectLockMode="GOVERNANCE")
    assert code(e) == ("InvalidArgument", 400)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=locked, Key="k", Body=b"x", ObjectLockMode="GOVERNANCE",
                      ObjectLockRetainUntilDate=later(days=-1))
    assert code(e) == ("InvalidArgument", 400)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=locked, Key="k", Body=b"x", ObjectLockMode="SOMETIMES",
                      ObjectLockRetainUntilDate=later(days=1))
    assert code(e) == ("InvalidArgument", 400)
    assert "Versions" not in s3.list_object_versions(Bucket=locked)
    s3.put_object(Bucket=locked, Key="plain", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.get_object_retention(Bucket=locked, Key="plain")
    assert code(e) == ("NoSuchObjectLockConfiguration", 404)
    assert s3.get_object_legal_hold(Bucket=locked, Key="plain")["LegalHold"] == {"Status": "OFF"}
    s3.put_object(Bucket=bucket, Key="plain", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.put_object_retention(Bucket=bucket, Key="plain", Retention={
            "Mode": "GOVERNANCE", "RetainUntilDate": later(days=1)})
    assert code(e) == ("InvalidRequest", 400)
    with pytest.raises(ClientError) as e:
        s3.put_object_legal_hold(Bucket=bucket, Key="plain", LegalHold={"Status": "ON"})
    assert code(e) == ("InvalidRequest", 400)


def delete_every_way(s3, bucket, key, version):
    """Every DELETE there is of `version`; returns the errors' codes."""
    codes = []
    for bypass in [False, True]:
        with pytest.raises(ClientError) as e:
            s3.delete_object(Bucket=bucket, Key=key, VersionId=version,
                             BypassGovernanceRetention=bypass)
        codes.append(code(e))
        r = s3.delete_objects(Bucket=bucket, BypassGovernanceRetention=bypass, Delete={
            "Objects": [{"Key": key, "VersionId": version}]})
        codes += [(err["Code"], 403) for err in r.get("Errors", [])]
        assert not r.get("Deleted")
    # Without a version id, a delete marker: the version stays.
    marker = s3.delete_object(Bucket=bucket, Key=key)
    assert marker["DeleteMarker"]
    s3.delete_object(Bucket=bucket, Key=key, VersionId=marker["VersionId"])
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=bucket)
    assert code(e) == ("BucketNotEmpty", 409)
    return codes


def test_a_compliance_version_survives_every_delete_and_can_only_be_extended(s3, locked):
    until = later(hours=1)
    v = s3.put_object(Bucket=locked, Key="k", Body=b"keep", ObjectLockMode="COMPLIANCE",
                      ObjectLockRetainUntilDate=until)["VersionId"]
    head = s3.head_object(Bucket=locked, Key="k")
    assert head["ObjectLockMode"] == "COMPLIANCE" and head["ObjectLockRetainUntilDate"] == until
    got = s3.get_object_retention(Bucket=locked, Key="k", VersionId=v)["Retention"]
    assert got == {"Mode": "COMPLIANCE", "RetainUntilDate": until}
    assert delete_every_way(s3, locked, "k", v) == [("AccessDenied", 403)] * 4
    # Shorter, another mode, or none: refused, also with the bypass header.
    for retention in [{"Mode": "COMPLIANCE", "RetainUntilDate": later(minutes=5)},
                      {"Mode": "GOVERNANCE", "RetainUntilDate": later(hours=2)}, {}]:
        with pytest.raises(ClientError) as e:
            s3.put_object_retention(Bucket=locked, Key="k", VersionId=v, Retention=retention,
                                    BypassGovernanceRetention=True)
        assert code(e) == ("AccessDenied", 403)
    longer = later(hours=3)
    s3.put_object_retention(Bucket=locked, Key="k", VersionId=v,
                            Retention={"Mode": "COMPLIANCE", "RetainUntilDate": longer})
    assert s3.get_object_retention(Bucket=locked, Key="k")["Retention"]["RetainUntilDate"] == longer
    # The version is the same: its data, ETag and id.
    got = s3.get_object(Bucket=locked, Key="k", VersionId=v)
    assert got["Body"].read() == b"keep" and got["VersionId"] == v


def test_governance_yields_to_the_owner_right_with_the_bypass_header(cluster, s3, locked):
    v = s3.put_object(Bucket=locked, Key="g", Body=b"g", ObjectLockMode="GOVERNANCE",
                      ObjectLockRetainUntilDate=later(hours=1))["VersionId"]
    writer = json.loads(cluster.admin("key", "create", "lock writer", "--json"))
    cluster.admin("bucket", "allow", locked, "--key", writer["access_key_id"], "--write")
    w = key_client(cluster, writer)
    with pytest.raises(ClientError) as e:
        w.delete_object(Bucket=locked, Key="g", VersionId=v, BypassGovernanceRetention=True)
    assert code(e) == ("AccessDenied", 403)
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=locked, Key="g", VersionId=v)
    assert code(e) == ("AccessDenied", 403)
    # Extending needs no bypass; shortening does.
    s3.put_object_retention(Bucket=locked, Key="g", VersionId=v,
                            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": later(hours=2)})
    with pytest.raises(ClientError) as e:
        w.put_object_retention(Bucket=locked, Key="g", VersionId=v, Retention={},
                               BypassGovernanceRetention=True)
    assert code(e) == ("AccessDenied", 403)
    s3.put_object_retention(Bucket=locked, Key="g", VersionId=v,
                            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": later(minutes=1)},
                            BypassGovernanceRetention=True)
    s3.delete_object(Bucket=locked, Key="g", VersionId=v, BypassGovernanceRetention=True)
    assert "Versions" not in s3.list_object_versions(Bucket=locked, Prefix="g")


def test_a_legal_hold_keeps_a_version_until_it_is_taken_off(s3, locked):
    v = s3.put_object(Bucket=locked, Key="h", Body=b"h", ObjectLockLegalHoldStatus="ON")["VersionId"]
    assert s3.head_object(Bucket=locked, Key="h")["ObjectLockLegalHoldStatus"] == "ON"
    assert delete_every_way(s3, locked, "h", v) == [("AccessDenied", 403)] * 4
    with pytest.raises(ClientError) as e:
        s3.put_object_legal_hold(Bucket=locked, Key="h", LegalHold={"Status": "MAYBE"})
    assert code(e) == ("MalformedXML", 400)
    s3.put_object_legal_hold(Bucket=locked, Key="h", VersionId=v, LegalHold={"Status": "OFF"})
    assert s3.get_object_legal_hold(Bucket=locked, Key="h")["LegalHold"] == {"Status": "OFF"}
    s3.delete_object(Bucket=locked, Key="h", VersionId=v)


def test_the_default_retention_applies_to_writes_uploads_and_copies(s3, locked):
    s3.put_object_lock_configuration(Bucket=locked, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 2}}})
    s3.put_object(Bucket=locked, Key="d", Body=b"d")
    up = s3.create_multipart_upload(Bucket=locked, Key="mp")["UploadId"]
    part = s3.upload_part(Bucket=locked, Key="mp", UploadId=up, PartNumber=1, Body=b"p" * 100)
    s3.complete_multipart_upload(Bucket=locked, Key="mp", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    s3.copy_object(Bucket=locked, Key="c", CopySource={"Bucket": locked, "Key": "d"})
    explicit = later(days=30)
    s3.copy_object(Bucket=locked, Key="e", CopySource={"Bucket": locked, "Key": "d"},
                   ObjectLockMode="COMPLIANCE", ObjectLockRetainUntilDate=explicit)
    for k in ["d", "mp", "c"]:
        h = s3.head_object(Bucket=locked, Key=k)
        assert h["ObjectLockMode"] == "GOVERNANCE", k
        left = h["ObjectLockRetainUntilDate"] - datetime.datetime.now(UTC)
        assert datetime.timedelta(days=1, hours=23) < left <= datetime.timedelta(days=2), k
    h = s3.head_object(Bucket=locked, Key="e")
    assert (h["ObjectLockMode"], h["ObjectLockRetainUntilDate"]) == ("COMPLIANCE", explicit)


def test_lifecycle_leaves_locked_versions(cluster, s3, locked):
    kept = s3.put_object(Bucket=locked, Key="lc", Body=b"1", ObjectLockMode="GOVERNANCE",
                         ObjectLockRetainUntilDate=later(hours=1))["VersionId"]
    held = s3.put_object(Bucket=locked, Key="lc", Body=b"2",
                         ObjectLockLegalHoldStatus="ON")["VersionId"]
    free = s3.put_object(Bucket=locked, Key="lc", Body=b"3")["VersionId"]
    current = s3.put_object(Bucket=locked, Key="lc", Body=b"4")["VersionId"]
    s3.put_bucket_lifecycle_configuration(Bucket=locked, LifecycleConfiguration={"Rules": [
        {"ID": "nc", "Status": "Enabled", "Filter": {},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 1}}]})

    def ids():
        r = s3.list_object_versions(Bucket=locked, Prefix="lc")
        return [v["VersionId"] for v in r.get("Versions", [])]
    cluster.wait_for("the unlocked noncurrent version to expire",
                     lambda: free not in ids(), timeout=90)
    assert ids() == [current, held, kept]


def test_a_lock_set_while_a_drive_was_killed_holds_everywhere():
    c = Cluster(extra=lambda i: ["heal_rate_bytes=0", "heal_retry_seconds=1"])
    try:
        s3 = c.client(0, connect_timeout=5, read_timeout=30)
        s3.create_bucket(Bucket="lock-heal", ObjectLockEnabledForBucket=True)
        v = s3.put_object(Bucket="lock-heal", Key="k", Body=b"x" * 5000)["VersionId"]
        c.kill9(5)
        s3.put_object_legal_hold(Bucket="lock-heal", Key="k", VersionId=v,
                                 LegalHold={"Status": "ON"})
        c.start(5)
        c.wait_healed()
        # With two of the drives that took the hold down, the returned drive is one of
        # the four records read, and the hold still refuses the delete.
        c.kill9(0)
        c.kill9(1)
        via = c.client(5, connect_timeout=5, read_timeout=30)
        assert via.get_object_legal_hold(Bucket="lock-heal", Key="k",
                                         VersionId=v)["LegalHold"] == {"Status": "ON"}
        with pytest.raises(ClientError) as e:
            via.delete_object(Bucket="lock-heal", Key="k", VersionId=v,
                              BypassGovernanceRetention=True)
        assert code(e) == ("AccessDenied", 403)
    finally:
        c.stop()
