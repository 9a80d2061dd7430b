"""Lifecycle (docs/s3.md, "Lifecycle"): Put/Get/DeleteBucketLifecycleConfiguration with
S3's checks and error codes, and the drives applying the rules with a lifecycle "day" of
two seconds (`lifecycle_day_seconds=2`): current versions expiring by days, date, tags
and size, noncurrent versions by age and count, lone delete markers removed, abandoned
multipart uploads aborted; each action taken once, by one drive, also with a drive
killed (SIGKILL); the x-amz-expiration header; `oedd admin status` and the metrics."""

import datetime
import time

import pytest
from botocore.exceptions import ClientError

from conftest import Cluster, code

DAY = 2


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(extra=lambda i: [f"lifecycle_day_seconds={DAY}"])
    yield c
    c.stop()


def put_rules(s3, bucket, *rules):
    s3.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": list(rules)})


def exists(s3, bucket, key):
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except ClientError as e:
        if e.response["ResponseMetadata"]["HTTPStatusCode"] == 404:
            return False
        raise


def versions(s3, bucket, key):
    """(version id, is a delete marker, is latest) of `key`: the latest first, then the
    others newest first (as each list of the answer gives them)."""
    r = s3.list_object_versions(Bucket=bucket, Prefix=key)
    out = [(v["VersionId"], False, v["IsLatest"]) for v in r.get("Versions", [])
           if v["Key"] == key]
    out += [(m["VersionId"], True, m["IsLatest"]) for m in r.get("DeleteMarkers", [])
            if m["Key"] == key]
    return sorted(out, key=lambda v: not v[2])


def actions(c, action):
    return sum(c.metric_sum(i, "oed_lifecycle_actions_total", action=action)
               for i in range(len(c.ids)))


def test_a_configuration_is_put_read_and_deleted_as_given(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert code(e) == ("NoSuchLifecycleConfiguration", 404)
    rules = [
        {"ID": "logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"},
         "Expiration": {"Days": 30}},
        {"ID": "old", "Status": "Disabled",
         "Filter": {"And": {"Prefix": "tmp/", "Tags": [{"Key": "a", "Value": "b"}],
                            "ObjectSizeGreaterThan": 10, "ObjectSizeLessThan": 1000}},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 3, "NewerNoncurrentVersions": 2}},
        {"ID": "uploads", "Status": "Enabled", "Filter": {},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}},
        {"ID": "markers", "Status": "Enabled", "Filter": {"Prefix": ""},
         "Expiration": {"ExpiredObjectDeleteMarker": True}},
        {"ID": "tagged", "Status": "Enabled", "Filter": {"Tag": {"Key": "t", "Value": "v"}},
         "Expiration": {"Date": datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)}},
    ]
    put_rules(s3, bucket, *rules)
    got = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert got == rules
    # The rule's own Prefix (the form before filters) answers back as it was given, and
    # a rule without an ID gets one.
    put_rules(s3, bucket, {"Status": "Enabled", "Prefix": "a/", "Expiration": {"Days": 1}})
    (got,) = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert got["Prefix"] == "a/" and "Filter" not in got and got["ID"]
    s3.delete_bucket_lifecycle(Bucket=bucket)
    s3.delete_bucket_lifecycle(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert code(e) == ("NoSuchLifecycleConfiguration", 404)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket="no-such-bucket-here")
    assert code(e) == ("NoSuchBucket", 404)


@pytest.mark.parametrize("rule,expected", [
    ({"Status": "enabled", "Filter": {}, "Expiration": {"Days": 1}}, "MalformedXML"),
    ({"Status": "Enabled", "Filter": {}, "Expiration": {"Days": 0}}, "InvalidArgument"),
    ({"Status": "Enabled", "Filter": {}, "Expiration": {"Days": 1,
                                                          "ExpiredObjectDeleteMarker": True}},
     "InvalidArgument"),
    ({"Status": "Enabled", "Filter": {},
      "Expiration": {"Date": datetime.datetime(2030, 1, 1, 12, tzinfo=datetime.timezone.utc)}},
     "InvalidArgument"),
    ({"ID": "x" * 256, "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 1}},
     "InvalidArgument"),
    ({"Status": "Enabled", "Filter": {}}, "InvalidArgument"),
    ({"Status": "Enabled", "Expiration": {"Days": 1}}, "MalformedXML"),
    ({"Status": "Enabled", "Filter": {"Prefix": "a"}, "Prefix": "a", "Expiration": {"Days": 1}},
     "MalformedXML"),
    ({"Status": "Enabled", "Filter": {},
      "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}]}, "InvalidStorageClass"),
    ({"Status": "Enabled", "Filter": {},
      "NoncurrentVersionTransitions": [{"NoncurrentDays": 1, "StorageClass": "GLACIER"}],
      "Expiration": {"Days": 1}}, "InvalidStorageClass"),
    ({"Status": "Enabled", "Filter": {"Tag": {"Key": "a", "Value": "b"}},
      "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}, "InvalidRequest"),
    ({"Status": "Enabled", "Filter": {},
      "NoncurrentVersionExpiration": {"NoncurrentDays": 1, "NewerNoncurrentVersions": 101}},
     "InvalidArgument"),
    ({"Status": "Enabled", "Filter": {"Tag": {"Key": "aws:x", "Value": "b"}},
      "Expiration": {"Days": 1}}, "InvalidTag"),
])
def test_what_s3_refuses_is_refused_with_its_code_and_nothing_changes(s3, bucket, rule, expected):
    put_rules(s3, bucket, {"ID": "kept", "Status": "Enabled", "Filter": {},
                           "Expiration": {"Days": 7}})
    with pytest.raises(ClientError) as e:
        put_rules(s3, bucket, rule)
    assert code(e) == (expected, 400)
    assert e.value.response["Error"]["Message"]
    (kept,) = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert kept["ID"] == "kept"


def test_two_rules_with_one_id_are_refused(s3, bucket):
    rule = {"ID": "same", "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 1}}
    with pytest.raises(ClientError) as e:
        put_rules(s3, bucket, rule, rule)
    assert code(e) == ("InvalidArgument", 400)


def test_current_versions_expire_by_prefix_tags_size_and_date_once_each(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="logs/a", Body=b"a")
    s3.put_object(Bucket=bucket, Key="keep/b", Body=b"b")
    s3.put_object(Bucket=bucket, Key="t/yes", Body=b"c", Tagging="expire=yes")
    s3.put_object(Bucket=bucket, Key="t/no", Body=b"d", Tagging="expire=no")
    s3.put_object(Bucket=bucket, Key="big/large", Body=b"x" * 5000)
    s3.put_object(Bucket=bucket, Key="big/small", Body=b"x" * 10)
    s3.put_object(Bucket=bucket, Key="dated/x", Body=b"e")
    before = actions(cluster, "expire_current")
    put_rules(
        s3, bucket,
        {"ID": "logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"},
         "Expiration": {"Days": 1}},
        {"ID": "tags", "Status": "Enabled",
         "Filter": {"And": {"Prefix": "t/", "Tags": [{"Key": "expire", "Value": "yes"}]}},
         "Expiration": {"Days": 1}},
        {"ID": "size", "Status": "Enabled",
         "Filter": {"And": {"Prefix": "big/", "ObjectSizeGreaterThan": 1000}},
         "Expiration": {"Days": 1}},
        {"ID": "past", "Status": "Enabled", "Filter": {"Prefix": "dated/"},
         "Expiration": {"Date": datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)}},
        {"ID": "off", "Status": "Disabled", "Filter": {"Prefix": "keep/"},
         "Expiration": {"Days": 1}},
    )
    gone = ["logs/a", "t/yes", "big/large", "dated/x"]
    cluster.wait_for("the matching objects to expire",
                     lambda: not any(exists(s3, bucket, k) for k in gone), timeout=90)
    for k in ["keep/b", "t/no", "big/small"]:
        assert exists(s3, bucket, k), k
    # Each version's rule was applied by one drive: four actions in all.
    cluster.wait_for("the metrics", lambda: actions(cluster, "expire_current") - before >= 4)
    time.sleep(3 * DAY)
    assert actions(cluster, "expire_current") - before == 4


def test_the_expiration_header_names_the_date_and_the_rule(s3, bucket):
    put_rules(s3, bucket, {"ID": "month", "Status": "Enabled", "Filter": {"Prefix": "m/"},
                           "Expiration": {"Days": 100000}})
    put = s3.put_object(Bucket=bucket, Key="m/x", Body=b"x")
    assert 'rule-id="month"' in put["Expiration"] and "expiry-date=" in put["Expiration"]
    head = s3.head_object(Bucket=bucket, Key="m/x")
    assert head["Expiration"] == put["Expiration"]
    assert s3.get_object(Bucket=bucket, Key="m/x")["Expiration"] == put["Expiration"]
    s3.put_object(Bucket=bucket, Key="other", Body=b"x")
    assert "Expiration" not in s3.head_object(Bucket=bucket, Key="other")


def test_in_a_versioned_bucket_expiry_adds_a_marker_and_old_versions_go_by_age_and_count(
        cluster, s3, bucket):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    ids = [s3.put_object(Bucket=bucket, Key="nc", Body=str(i).encode())["VersionId"]
           for i in range(5)]
    s3.put_object(Bucket=bucket, Key="cur", Body=b"data")
    put_rules(
        s3, bucket,
        {"ID": "noncurrent", "Status": "Enabled", "Filter": {"Prefix": "nc"},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 1, "NewerNoncurrentVersions": 2}},
        {"ID": "current", "Status": "Enabled", "Filter": {"Prefix": "cur"},
         "Expiration": {"Days": 1}},
    )
    # The two newest noncurrent versions stay, whatever their age.
    cluster.wait_for("old versions to expire",
                     lambda: [v[0] for v in versions(s3, bucket, "nc")] == ids[::-1][:3],
                     timeout=90)
    assert s3.get_object(Bucket=bucket, Key="nc")["Body"].read() == b"4"
    # The current version of "cur" is behind a delete marker; its data stays.
    got = cluster.wait_for("a delete marker on cur",
                           lambda: (v := versions(s3, bucket, "cur")) and v[0][1] and v)
    assert [(m, latest) for _, m, latest in got] == [(True, True), (False, False)]
    time.sleep(3 * DAY)
    assert len(versions(s3, bucket, "cur")) == 2, "one marker, not one per drive"


def test_a_lone_delete_marker_is_removed_once_its_versions_expired(cluster, s3, bucket):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=bucket, Key="gone", Body=b"1")
    s3.delete_object(Bucket=bucket, Key="gone")
    s3.put_object(Bucket=bucket, Key="other", Body=b"1")
    marker_only = s3.delete_object(Bucket=bucket, Key="lone")["VersionId"]
    assert versions(s3, bucket, "lone") == [(marker_only, True, True)]
    put_rules(
        s3, bucket,
        {"ID": "versions", "Status": "Enabled", "Filter": {"Prefix": "gone"},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 1}},
        {"ID": "markers", "Status": "Enabled", "Filter": {"Prefix": ""},
         "Expiration": {"ExpiredObjectDeleteMarker": True}},
    )
    cluster.wait_for("the markers and the versions behind them to go",
                     lambda: not versions(s3, bucket, "gone") and not versions(s3, bucket, "lone"),
                     timeout=90)
    assert s3.get_object(Bucket=bucket, Key="other")["Body"].read() == b"1"


def test_a_suspended_bucket_gets_a_null_marker(cluster, s3, bucket):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"1")["VersionId"]
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    s3.put_object(Bucket=bucket, Key="k", Body=b"null")
    put_rules(s3, bucket, {"ID": "e", "Status": "Enabled", "Filter": {},
                           "Expiration": {"Days": 1}})
    # The null version is replaced by the null marker; the versioned one stays.
    cluster.wait_for("a null delete marker", lambda: versions(s3, bucket, "k") == [
        ("null", True, True), (v1, False, False)])


def test_days_remove_a_marker_left_alone_once_it_is_as_old(cluster, s3, bucket):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=bucket, Key="k", Body=b"1")
    put_rules(s3, bucket, {"ID": "all", "Status": "Enabled", "Filter": {"Prefix": "k"},
                           "Expiration": {"Days": 1},
                           "NoncurrentVersionExpiration": {"NoncurrentDays": 1}})
    # The object expires behind a marker, its version expires, then the marker goes.
    cluster.wait_for("nothing left of the key", lambda: not versions(s3, bucket, "k"),
                     timeout=90)


def test_abandoned_multipart_uploads_are_aborted(cluster, s3, bucket):
    put_rules(s3, bucket, {"ID": "abort", "Status": "Enabled", "Filter": {"Prefix": "tmp/"},
                           "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}})
    made = s3.create_multipart_upload(Bucket=bucket, Key="tmp/big")
    assert made["AbortRuleId"] == "abort" and made["AbortDate"]
    s3.delete_bucket_lifecycle(Bucket=bucket)
    up = made["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="tmp/big", UploadId=up, PartNumber=1,
                          Body=b"p" * 100_000)
    kept = s3.create_multipart_upload(Bucket=bucket, Key="data/big")["UploadId"]
    put_rules(s3, bucket, {"ID": "abort", "Status": "Enabled", "Filter": {"Prefix": "tmp/"},
                           "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}})
    cluster.wait_for("the upload to be aborted", lambda: [
        u["UploadId"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    ] == [kept], timeout=90)
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="tmp/big", UploadId=up,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert code(e) == ("NoSuchUpload", 404)
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket=bucket, Key="tmp/big", UploadId=up)
    assert code(e) == ("NoSuchUpload", 404)


def test_status_and_metrics_show_the_work(cluster, s3, bucket):
    put_rules(s3, bucket, {"ID": "e", "Status": "Enabled", "Filter": {},
                           "Expiration": {"Days": 1}})
    cluster.wait_for("a pass since the rules", lambda: all(
        s["lifecycle"]["buckets"] >= 1 and s["lifecycle"]["passes"] >= 1
        for s in cluster.status()))
    st = cluster.status()[0]["lifecycle"]
    assert st["enabled"] and st["day_seconds"] == DAY and st["actions_per_second"] == 50
    report = cluster.admin("status")
    assert "lifecycle:" in report and "bucket(s) with rules" in report
    assert "lifecycle" in cluster.admin("lifecycle", "all")
    text = cluster.metrics_text(0)
    for name in ["oed_lifecycle_actions_total", "oed_lifecycle_checked_total",
                 "oed_lifecycle_running", "oed_lifecycle_last_complete_timestamp_seconds",
                 "oed_lifecycle_buckets", "oed_lifecycle_failures_total"]:
        assert name in text, name


def test_rules_are_applied_with_a_drive_killed():
    """With drive-1 killed (SIGKILL), the versions whose first holder it is are expired by
    the next holder; every expiry is taken once."""
    c = Cluster(extra=lambda i: [f"lifecycle_day_seconds={DAY}"])
    try:
        s3 = c.client(1, connect_timeout=5, read_timeout=30)
        s3.create_bucket(Bucket="lc-down")
        keys = [f"o{i}" for i in range(12)]
        for k in keys:
            s3.put_object(Bucket="lc-down", Key=k, Body=k.encode() * 100)
        c.kill9(0)
        put_rules(s3, "lc-down", {"ID": "all", "Status": "Enabled", "Filter": {},
                                  "Expiration": {"Days": 1}})
        c.wait_for("every object to expire",
                   lambda: not s3.list_objects_v2(Bucket="lc-down").get("Contents"),
                   timeout=120)
        done = sum(c.metric_sum(i, "oed_lifecycle_actions_total", action="expire_current")
                   for i in range(1, 6))
        assert done == len(keys)
    finally:
        c.stop()


def test_a_pass_cut_by_a_kill_resumes_where_it_stopped():
    """A drive killed (SIGKILL) in the middle of a pass resumes that pass when it starts
    again (the same pass: a new one would only start a lifecycle day, here an hour,
    later), and every expiry is still taken once."""
    c = Cluster(extra=lambda i: ["lifecycle_day_seconds=3600", "lifecycle_actions_per_second=1"])
    try:
        s3 = c.client(0, connect_timeout=5, read_timeout=30)
        s3.create_bucket(Bucket="lc-resume")
        keys = [f"o{i:02}" for i in range(30)]
        for k in keys:
            s3.put_object(Bucket="lc-resume", Key=k, Body=b"x")
        put_rules(s3, "lc-resume", {"ID": "past", "Status": "Enabled", "Filter": {},
                                    "Expiration": {"Date": datetime.datetime(
                                        2020, 1, 1, tzinfo=datetime.timezone.utc)}})
        c.admin("lifecycle", "all")

        def running():
            for i, s in enumerate(c.status()):
                lc = s and s["lifecycle"]
                if i > 0 and lc and lc["running"] and lc["at_bucket"] == "lc-resume" \
                        and lc["checked"] >= 1:
                    return i, lc["pass_started_ms"]
            return None
        i, started = c.wait_for("a pass in progress", running, timeout=60, every=0.2)
        c.kill9(i)
        c.start(i)
        done = c.wait_for("the pass to complete", lambda: (
            (s := c.status()[i]) and s["lifecycle"]["passes"] >= 1 and s["lifecycle"]),
            timeout=120)
        assert done["pass_started_ms"] == started and done["passes"] == 1
        c.wait_for("every object to expire",
                   lambda: not s3.list_objects_v2(Bucket="lc-resume").get("Contents"),
                   timeout=120)
        # Counted once each, by one drive (the killed drive's counters restarted with
        # it, so its actions before the kill are not in the sum).
        assert actions(c, "expire_current") <= len(keys)
    finally:
        c.stop()
