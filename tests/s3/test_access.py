"""Access keys and bucket rights (docs/access.md), through boto3 and `oedd admin`: every
S3 operation OED serves against a key with no right, read, write or owner in the bucket,
and an anonymous client; the bucket a key makes is its own; a deleted key is refused on
every drive, also by one that was down when it was deleted; no secret in a log."""

import json
import time

import boto3
import botocore
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, Cluster

B = "rights"
OBJ = "present"


@pytest.fixture(scope="module")
def acl():
    c = Cluster(n=3, k=2, m=1, env=lambda i: {"OED_LOG": "info"}, logs=True)
    root = c.client()
    ROOT[:] = [root]
    root.create_bucket(Bucket=B)
    root.put_object(Bucket=B, Key=OBJ, Body=b"0123456789" * 100)
    keys = {}
    for name in ["none", "read", "write", "owner"]:
        keys[name] = json.loads(c.admin("key", "create", f"test {name}", "--json"))
    for name in ["read", "write", "owner"]:
        c.admin("bucket", "allow", B, "--key", keys[name]["access_key_id"], f"--{name}")
    yield c, keys
    c.stop()


def client(c, key, i=0):
    if key is None:
        cfg = Config(signature_version=botocore.UNSIGNED, s3={"addressing_style": "path"},
                     retries={"max_attempts": 1})
        return boto3.client("s3", endpoint_url=c.endpoint(i), region_name="us-east-1",
                            config=cfg)
    return boto3.client(
        "s3", endpoint_url=c.endpoint(i), region_name="us-east-1",
        aws_access_key_id=key["access_key_id"], aws_secret_access_key=key["secret_access_key"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


_n = [0]


def fresh():
    _n[0] += 1
    return f"k{_n[0]}"


def multipart_upload(s3):
    key = fresh()
    up = s3.create_multipart_upload(Bucket=B, Key=key)
    s3.abort_multipart_upload(Bucket=B, Key=key, UploadId=up["UploadId"])


# The bootstrap key's client, for uploads the key under test then works on.
ROOT = []


def root_upload():
    key = fresh()
    return key, ROOT[0].create_multipart_upload(Bucket=B, Key=key)["UploadId"]


def upload_and_complete(s3):
    key, upload = root_upload()
    part = s3.upload_part(Bucket=B, Key=key, UploadId=upload, PartNumber=1, Body=b"p" * 100)
    s3.complete_multipart_upload(
        Bucket=B, Key=key, UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})


def list_parts(s3):
    key, upload = root_upload()
    s3.list_parts(Bucket=B, Key=key, UploadId=upload)


def upload_part_copy(s3):
    key, upload = root_upload()
    s3.upload_part_copy(Bucket=B, Key=key, UploadId=upload, PartNumber=1,
                        CopySource={"Bucket": B, "Key": OBJ})


# A policy that makes nothing public that the table below reads (an owner puts it and
# deletes it again in the owner's column).
HARMLESS = json.dumps({"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
    "Resource": f"arn:aws:s3:::{B}/nothing-here/*"}]})

# What the column "anonymous, policy" has in force: the bucket readable and listable.
PUBLIC = json.dumps({"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:ListBucket"],
    "Resource": [f"arn:aws:s3:::{B}", f"arn:aws:s3:::{B}/*"]}]})

OWNER_FULL = {"Owner": {"ID": "oed"}, "Grants": [
    {"Grantee": {"ID": "oed", "Type": "CanonicalUser"}, "Permission": "FULL_CONTROL"}]}

# Every operation, the rights a key needs for it in the bucket, whether an anonymous
# client may do it under the PUBLIC policy, and how it is called. The expected answer of
# each cell: a key with all the rights named gets an answer other than AccessDenied
# (allowed, even if S3 then refuses for another reason, e.g. BucketNotEmpty); any other
# key gets 403 AccessDenied; an anonymous client is denied everything without a policy,
# and allowed exactly the rows marked public under PUBLIC.
OPERATIONS = [
    # name, rights needed, public, call
    ("HeadBucket", {"read"}, True, lambda s3: s3.head_bucket(Bucket=B)),
    ("GetBucketLocation", {"read"}, False, lambda s3: s3.get_bucket_location(Bucket=B)),
    ("GetBucketVersioning", {"read"}, False, lambda s3: s3.get_bucket_versioning(Bucket=B)),
    ("ListObjects", {"read"}, True, lambda s3: s3.list_objects(Bucket=B)),
    ("ListObjectsV2", {"read"}, True, lambda s3: s3.list_objects_v2(Bucket=B)),
    ("ListObjectVersions", {"read"}, False, lambda s3: s3.list_object_versions(Bucket=B)),
    ("ListMultipartUploads", {"read"}, False, lambda s3: s3.list_multipart_uploads(Bucket=B)),
    ("GetObject", {"read"}, True, lambda s3: s3.get_object(Bucket=B, Key=OBJ)["Body"].read()),
    ("GetObject with a bad Range", {"read"}, True,
     lambda s3: s3.get_object(Bucket=B, Key=OBJ, Range="bytes=9-1")["Body"].read()),
    ("HeadObject", {"read"}, True, lambda s3: s3.head_object(Bucket=B, Key=OBJ)),
    ("GetObjectAttributes", {"read"}, False,
     lambda s3: s3.get_object_attributes(Bucket=B, Key=OBJ, ObjectAttributes=["ObjectSize"])),
    ("GetObjectAcl", {"read"}, False, lambda s3: s3.get_object_acl(Bucket=B, Key=OBJ)),
    ("PutObject", {"write"}, False, lambda s3: s3.put_object(Bucket=B, Key=fresh(), Body=b"x")),
    ("PutObjectAcl", {"write"}, False,
     lambda s3: s3.put_object_acl(Bucket=B, Key=OBJ, ACL="bucket-owner-full-control")),
    ("DeleteObject", {"write"}, False, lambda s3: s3.delete_object(Bucket=B, Key=fresh())),
    ("DeleteObjects", {"write"}, False,
     lambda s3: s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": fresh()}]})),
    ("CopyObject (source in the bucket)", {"read", "write"}, False,
     lambda s3: s3.copy_object(Bucket=B, Key=fresh(), CopySource={"Bucket": B, "Key": OBJ})),
    ("CreateMultipartUpload, AbortMultipartUpload", {"write"}, False, multipart_upload),
    ("UploadPart, CompleteMultipartUpload", {"write"}, False, upload_and_complete),
    ("ListParts", {"read"}, False, list_parts),
    ("UploadPartCopy (source in the bucket)", {"read", "write"}, False, upload_part_copy),
    ("GetBucketAcl", {"owner"}, False, lambda s3: s3.get_bucket_acl(Bucket=B)),
    ("PutBucketAcl", {"owner"}, False,
     lambda s3: s3.put_bucket_acl(Bucket=B, AccessControlPolicy=OWNER_FULL)),
    # A status S3 does not know: refused as MalformedXML by the owner, the bucket unchanged.
    ("PutBucketVersioning", {"owner"}, False,
     lambda s3: s3.put_bucket_versioning(Bucket=B, VersioningConfiguration={"Status": "Off"})),
    ("GetBucketPolicyStatus", {"owner"}, False,
     lambda s3: s3.get_bucket_policy_status(Bucket=B)),
    ("PutBucketPolicy", {"owner"}, False,
     lambda s3: s3.put_bucket_policy(Bucket=B, Policy=HARMLESS)),
    ("GetBucketPolicy", {"owner"}, False, lambda s3: s3.get_bucket_policy(Bucket=B)),
    ("DeleteBucketPolicy", {"owner"}, False, lambda s3: s3.delete_bucket_policy(Bucket=B)),
    ("DeleteBucket", {"owner"}, False, lambda s3: s3.delete_bucket(Bucket=B)),
]

KEYS = {
    "none": set(),
    "read": {"read"},
    "write": {"write"},
    "owner": {"owner"},
    "anonymous": set(),
    "anonymous, policy": set(),
}


def outcome(call, s3):
    try:
        call(s3)
        return "allowed"
    except ClientError as e:
        code = e.response["Error"]["Code"]
        status = e.response["ResponseMetadata"]["HTTPStatusCode"]
        if code == "AccessDenied" or (status == 403 and code in ("403", "Forbidden")):
            return "denied"
        return f"allowed ({code})"


@pytest.mark.parametrize("who", list(KEYS))
def test_every_operation_against_every_right(acl, who):
    c, keys = acl
    s3 = client(c, keys.get(who))
    policy = who == "anonymous, policy"
    if policy:
        ROOT[0].put_bucket_policy(Bucket=B, Policy=PUBLIC)
    wrong = []
    try:
        for name, needs, public, call in OPERATIONS:
            got = outcome(call, s3)
            allowed = public if policy else needs <= KEYS[who] and who != "anonymous"
            want = "allowed" if allowed else "denied"
            if got.split(" ")[0] != want:
                wrong.append(f"{name}: {got}, expected {want}")
    finally:
        if policy:
            ROOT[0].delete_bucket_policy(Bucket=B)
    assert not wrong, f"{who}:\n" + "\n".join(wrong)
    # Nothing a denied key tried changed the bucket's object.
    body = c.client().get_object(Bucket=B, Key=OBJ)["Body"].read()
    assert body == b"0123456789" * 100


def test_a_key_lists_the_buckets_it_has_rights_in_and_owns_what_it_makes(acl):
    c, keys = acl
    seen = lambda k: {b["Name"] for b in client(c, keys[k]).list_buckets()["Buckets"]}
    assert seen("none") == set()
    assert B in seen("read") and B in seen("owner")
    mine = client(c, keys["none"])
    mine.create_bucket(Bucket="made-by-none")
    mine.put_object(Bucket="made-by-none", Key="a", Body=b"mine")
    assert mine.get_object(Bucket="made-by-none", Key="a")["Body"].read() == b"mine"
    assert seen("none") == {"made-by-none"}
    assert "made-by-none" not in seen("read")
    assert outcome(lambda s: s.get_object(Bucket="made-by-none", Key="a"),
                   client(c, keys["read"])) == "denied"
    info = json.loads(c.admin("bucket", "info", "made-by-none", "--json"))
    assert info["grants"] == {
        keys["none"]["access_key_id"]: {"read": True, "write": True, "owner": True}}
    # Copying out of a bucket needs the read right there: the write key may write in B,
    # and is refused a copy from a bucket it cannot read, allowed one from a bucket it can.
    w = client(c, keys["write"])
    assert outcome(lambda s: s.copy_object(Bucket=B, Key=fresh(),
                                           CopySource={"Bucket": "made-by-none", "Key": "a"}),
                   w) == "denied"
    c.admin("bucket", "allow", "made-by-none", "--key", keys["write"]["access_key_id"], "--read")
    assert outcome(lambda s: s.copy_object(Bucket=B, Key=fresh(),
                                           CopySource={"Bucket": "made-by-none", "Key": "a"}),
                   w) == "allowed"
    # A bucket another key holds rights in is not made over to a second key.
    with pytest.raises(ClientError) as e:
        client(c, keys["read"]).create_bucket(Bucket="made-by-none")
    assert e.value.response["Error"]["Code"] in ("BucketAlreadyExists", "BucketAlreadyOwnedByYou")
    mine.delete_object(Bucket="made-by-none", Key="a")
    mine.delete_bucket(Bucket="made-by-none")
    # The bucket's grants went with it: made again by the bootstrap key, it is nobody's.
    c.client().create_bucket(Bucket="made-by-none")
    assert seen("none") == set()


def test_presigned_urls_carry_the_signers_rights(acl):
    import urllib.error
    import urllib.request
    c, keys = acl
    url = client(c, keys["read"]).generate_presigned_url(
        "get_object", Params={"Bucket": B, "Key": OBJ}, ExpiresIn=300)
    assert urllib.request.urlopen(url, timeout=30).read() == b"0123456789" * 100
    url = client(c, keys["write"]).generate_presigned_url(
        "get_object", Params={"Bucket": B, "Key": OBJ}, ExpiresIn=300)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url, timeout=30)
    assert e.value.code == 403 and b"AccessDenied" in e.value.read()


def test_near_data_operations_need_read_and_writing_ones_write(acl):
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    import urllib.error
    import urllib.request
    c, keys = acl

    def op(key, path, body):
        creds = Credentials(key["access_key_id"], key["secret_access_key"])
        req = AWSRequest(method="POST", url=c.endpoint() + path, data=body)
        S3SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
        r = urllib.request.Request(req.url, data=body, method="POST", headers=dict(req.headers))
        try:
            with urllib.request.urlopen(r, timeout=60) as resp:
                return resp.status
        except urllib.error.HTTPError as e:
            return e.code

    stats = json.dumps({"op": "stats", "format": "f64le"}).encode()
    compress = json.dumps({"op": "compress", "target": fresh()}).encode()
    assert op(keys["read"], f"/{B}/{OBJ}?oed-op", stats) == 200
    assert op(keys["read"], f"/{B}?oed-op&prefix=pre", stats) == 200
    assert op(keys["write"], f"/{B}/{OBJ}?oed-op", stats) == 403
    assert op(keys["none"], f"/{B}/{OBJ}?oed-op", stats) == 403
    assert op(keys["read"], f"/{B}/{OBJ}?oed-op", compress) == 403
    c.admin("bucket", "allow", B, "--key", keys["read"]["access_key_id"], "--write")
    try:
        assert op(keys["read"], f"/{B}/{OBJ}?oed-op", compress) == 200
    finally:
        c.admin("bucket", "deny", B, "--key", keys["read"]["access_key_id"], "--write")


def test_a_deleted_key_is_refused_everywhere_also_by_a_drive_that_was_down(acl):
    c, keys = acl
    key = json.loads(c.admin("key", "create", "short-lived", "--json"))
    c.admin("bucket", "allow", B, "--key", key["access_key_id"], "--read")
    for i in range(3):
        c.wait_for(f"the new key on drive {i}",
                   lambda: outcome(lambda s: s.head_bucket(Bucket=B), client(c, key, i))
                   == "allowed", timeout=5, every=0.1)
    c.kill9(2)
    c.admin("key", "delete", key["access_key_id"])
    for i in range(2):
        with pytest.raises(ClientError) as e:
            client(c, key, i).head_bucket(Bucket=B)
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    c.restart(2)
    with pytest.raises(ClientError) as e:
        client(c, key, 2).list_objects_v2(Bucket=B)
    assert e.value.response["Error"]["Code"] == "InvalidAccessKeyId"
    listed = json.loads(c.admin("key", "list", "--json"))
    assert key["access_key_id"] not in {k["id"] for k in listed}


def test_a_rotated_secret_replaces_the_old_one(acl):
    c, keys = acl
    key = json.loads(c.admin("key", "create", "rotating", "--json"))
    c.admin("bucket", "allow", B, "--key", key["access_key_id"], "--read")
    new = json.loads(c.admin("key", "rotate", key["access_key_id"], "--json"))
    assert new["access_key_id"] == key["access_key_id"]
    assert new["secret_access_key"] != key["secret_access_key"]
    client(c, new).head_bucket(Bucket=B)
    with pytest.raises(ClientError) as e:
        client(c, key).head_bucket(Bucket=B)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_admin_refuses_what_it_cannot_do(acl):
    c, keys = acl
    r = c.admin("bucket", "allow", B, "--key", "OEDNOSUCHKEY00000000", "--read", check=False)
    assert r.returncode != 0 and "no access key" in r.stderr
    r = c.admin("bucket", "allow", "no-such-bucket", "--key", keys["read"]["access_key_id"],
                "--read", check=False)
    assert r.returncode != 0 and "no bucket" in r.stderr
    r = c.admin("bucket", "allow", B, "--key", keys["read"]["access_key_id"], check=False)
    assert r.returncode != 0 and "at least one right" in r.stderr
    r = c.admin("key", "info", "OEDNOSUCHKEY00000000", check=False)
    assert r.returncode != 0 and "no access key" in r.stderr
    info = c.admin("key", "info", keys["read"]["access_key_id"])
    assert f"{B}: read" in info


def test_no_secret_in_logs_metrics_or_errors(acl):
    c, keys = acl
    # Errors: a request signed with a wrong secret.
    bad = dict(keys["read"], secret_access_key="wrong" + keys["read"]["secret_access_key"][5:])
    with pytest.raises(ClientError) as e:
        client(c, bad).head_bucket(Bucket=B)
    body = json.dumps(e.value.response, default=str)
    secrets_ = [k["secret_access_key"] for k in keys.values()]
    texts = [body] + [c.log_path(i).read_text() for i in range(3)]
    texts += [c.metrics_text(i) for i in range(3) if c.procs[i] is not None]
    texts += [c.admin("key", "list"), c.admin("key", "list", "--json")]
    for d in range(3):
        texts += [p.read_bytes().decode("latin-1") for p in (c.data_dir(d) / "meta").glob("*.log")]
    for s in secrets_:
        for t in texts:
            assert s not in t
    assert "access key created" in c.log_path(0).read_text()


def test_refusals_are_counted_by_operation(acl):
    c, keys = acl
    before = c.metric_sum(0, "oed_s3_denied_total", op="PutObject")
    for _ in range(3):
        assert outcome(lambda s: s.put_object(Bucket=B, Key=fresh(), Body=b"x"),
                       client(c, keys["read"])) == "denied"
    assert c.metric_sum(0, "oed_s3_denied_total", op="PutObject") == before + 3
    # Key ids are no label.
    assert keys["read"]["access_key_id"] not in c.metrics_text(0)


def error_of(call):
    with pytest.raises(ClientError) as e:
        call()
    return e.value.response["Error"]["Code"], e.value.response["Error"].get("Message", "")


def bucket_of_keys(bucket, keys):
    """A bucket made by the bootstrap key with `keys`, each holding its own name."""
    ROOT[0].create_bucket(Bucket=bucket)
    for k in keys:
        ROOT[0].put_object(Bucket=bucket, Key=k, Body=k.encode())
    return ROOT[0]


def test_a_policy_makes_a_prefix_public_on_every_drive_and_nothing_more(acl):
    c, keys = acl
    bucket = "public-data"
    root = bucket_of_keys(bucket, ["pub/a.csv", "pub/deep/b.csv", "private/c.csv"])
    policy = json.dumps({"Version": "2012-10-17", "Statement": [
        {"Sid": "objects", "Effect": "Allow", "Principal": {"AWS": "*"},
         "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/pub/*"},
        {"Sid": "listing", "Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket",
         "Resource": f"arn:aws:s3:::{bucket}",
         "Condition": {"StringLike": {"s3:prefix": ["pub/*"]}}}]})
    anon = [client(c, None, i) for i in range(3)]
    assert error_of(lambda: anon[1].get_object(Bucket=bucket, Key="pub/a.csv"))[0] \
        == "AccessDenied"
    started = time.monotonic()
    root.put_bucket_policy(Bucket=bucket, Policy=policy)
    # In force on every drive within 5 s.
    for i in range(3):
        c.wait_for(f"the policy on drive {i}",
                   lambda: outcome(lambda s: s.get_object(Bucket=bucket, Key="pub/a.csv"),
                                   anon[i]) == "allowed", timeout=5, every=0.1)
    assert time.monotonic() - started < 6
    assert root.get_bucket_policy(Bucket=bucket)["Policy"] == policy
    assert root.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"] is True
    s3 = anon[2]
    assert s3.get_object(Bucket=bucket, Key="pub/deep/b.csv")["Body"].read() == b"pub/deep/b.csv"
    assert s3.head_object(Bucket=bucket, Key="pub/a.csv")["ContentLength"] == 9
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="pub/")
    assert [o["Key"] for o in listed["Contents"]] == ["pub/a.csv", "pub/deep/b.csv"]
    # Outside the prefix, a listing without it, any write, the policy itself: refused.
    for call in [
        lambda: s3.get_object(Bucket=bucket, Key="private/c.csv"),
        lambda: s3.list_objects_v2(Bucket=bucket),
        lambda: s3.list_objects_v2(Bucket=bucket, Prefix="private/"),
        lambda: s3.put_object(Bucket=bucket, Key="pub/new", Body=b"x"),
        lambda: s3.delete_object(Bucket=bucket, Key="pub/a.csv"),
        lambda: s3.get_bucket_policy(Bucket=bucket),
        lambda: s3.list_buckets(),
    ]:
        assert error_of(call)[0] == "AccessDenied"
    # A key without rights in the bucket reads what anyone may read, and no more.
    none = client(c, keys["none"])
    assert none.get_object(Bucket=bucket, Key="pub/a.csv")["Body"].read() == b"pub/a.csv"
    assert error_of(lambda: none.get_object(Bucket=bucket, Key="private/c.csv"))[0] \
        == "AccessDenied"
    info = json.loads(c.admin("bucket", "info", bucket, "--json"))
    assert info["policy"] == policy
    assert (info["objects"], info["bytes"], info["complete"]) == (3, 9 + 14 + 13, True)
    # Deleted: private again everywhere; the bucket's policy reads as none.
    root.delete_bucket_policy(Bucket=bucket)
    for i in range(3):
        c.wait_for(f"the policy gone on drive {i}",
                   lambda: outcome(lambda s: s.get_object(Bucket=bucket, Key="pub/a.csv"),
                                   anon[i]) == "denied", timeout=5, every=0.1)
    assert error_of(lambda: root.get_bucket_policy(Bucket=bucket))[0] == "NoSuchBucketPolicy"
    assert error_of(lambda: root.get_bucket_policy_status(Bucket=bucket))[0] \
        == "NoSuchBucketPolicy"
    # A bucket deleted and made again has no policy left from before.
    root.put_bucket_policy(Bucket=bucket, Policy=policy)
    for k in ["pub/a.csv", "pub/deep/b.csv", "private/c.csv"]:
        root.delete_object(Bucket=bucket, Key=k)
    root.delete_bucket(Bucket=bucket)
    root.create_bucket(Bucket=bucket)
    assert error_of(lambda: root.get_bucket_policy(Bucket=bucket))[0] == "NoSuchBucketPolicy"
    root.delete_bucket(Bucket=bucket)


def test_a_policy_outside_the_subset_is_refused_by_name_and_changes_nothing(acl):
    root = ROOT[0]

    def stmt(**kw):
        s = {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
             "Resource": f"arn:aws:s3:::{B}/*"}
        s.update(kw)
        return json.dumps({"Version": "2012-10-17", "Statement": [s]})

    cases = [
        ("{not json", "valid JSON"),
        (stmt(Effect="Deny"), "Deny"),
        (stmt(Action="s3:PutObject"), "s3:PutObject"),
        (stmt(Principal={"AWS": "arn:aws:iam::123456789012:root"}), "Principal"),
        (stmt(Resource="arn:aws:s3:::another-bucket/*"), "invalid resource"),
        (stmt(Condition={"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}), "IpAddress"),
        (json.dumps({"Statement": []}), "must not be empty"),
    ]
    for text, says in cases:
        code, message = error_of(lambda: root.put_bucket_policy(Bucket=B, Policy=text))
        assert code == "MalformedPolicy" and says in message, (text, code, message)
    assert error_of(lambda: root.get_bucket_policy(Bucket=B))[0] == "NoSuchBucketPolicy"
    code, _ = error_of(lambda: root.put_bucket_policy(Bucket="no-such-bucket", Policy=stmt()))
    assert code == "NoSuchBucket"


def test_acls_answer_as_s3_with_acls_disabled(acl):
    c, keys = acl
    root = ROOT[0]
    acl_ = root.get_bucket_acl(Bucket=B)
    assert [g["Permission"] for g in acl_["Grants"]] == ["FULL_CONTROL"]
    assert acl_["Owner"]["ID"] == "oed"
    assert root.get_object_acl(Bucket=B, Key=OBJ)["Grants"][0]["Permission"] == "FULL_CONTROL"
    # An ACL that gives the owner alone full control is taken (private too, which rclone
    # sends by default); any other is refused and nothing stored.
    root.put_object(Bucket=B, Key="acl-bofc", Body=b"x", ACL="bucket-owner-full-control")
    root.put_object(Bucket=B, Key="acl-bofc", Body=b"x", ACL="private")
    for canned in ["public-read", "authenticated-read"]:
        code, message = error_of(
            lambda: root.put_object(Bucket=B, Key="acl-refused", Body=b"x", ACL=canned))
        assert code == "AccessControlListNotSupported" and canned in message
    assert error_of(lambda: root.head_object(Bucket=B, Key="acl-refused"))[0] in ("404", "NoSuchKey")
    # Refused for want of the right first, as S3 answers.
    assert error_of(lambda: client(c, keys["read"]).put_object(
        Bucket=B, Key="acl-refused", Body=b"x", ACL="public-read"))[0] == "AccessDenied"
    assert error_of(lambda: root.put_bucket_acl(Bucket=B, ACL="public-read"))[0] \
        == "AccessControlListNotSupported"
    assert error_of(lambda: root.put_object_acl(Bucket=B, Key=OBJ, ACL="public-read-write"))[0] \
        == "AccessControlListNotSupported"
    assert error_of(lambda: root.create_bucket(Bucket="acl-bucket", ACL="public-read"))[0] \
        == "InvalidBucketAclWithObjectOwnership"
    assert error_of(lambda: root.put_bucket_acl(Bucket=B, ACL="public-read-write"))[0] \
        == "AccessControlListNotSupported"
    root.put_bucket_acl(Bucket=B, ACL="private")
    root.create_bucket(Bucket="acl-private-made", ACL="private")
    root.delete_bucket(Bucket="acl-private-made")
    root.delete_object(Bucket=B, Key="acl-bofc")


def test_a_keys_last_use_is_shown(acl):
    c, keys = acl
    key = json.loads(c.admin("key", "create", "used-later", "--json"))
    c.admin("bucket", "allow", B, "--key", key["access_key_id"], "--read")
    info = json.loads(c.admin("key", "info", key["access_key_id"], "--json"))
    assert "last_used_ms" not in info
    before = time.time() * 1000
    c.wait_for("the new key on drive 1",
               lambda: outcome(lambda s: s.head_bucket(Bucket=B), client(c, key, 1))
               == "allowed", timeout=5, every=0.1)
    info = json.loads(c.admin("key", "info", key["access_key_id"], "--json"))
    assert before - 1000 <= info["last_used_ms"] <= time.time() * 1000 + 1000
    assert "used 20" in c.admin("key", "list")


def test_a_policy_cannot_be_got_around(acl):
    """Encoded parameter names, a policy listing only the top level, response overrides,
    keys that do not exist, and a Range the route around s3s takes."""
    import urllib.error
    import urllib.request
    c, keys = acl
    bucket = "public-top"
    root = bucket_of_keys(bucket, ["top.txt", "home/a.txt", "private/b.txt"])
    # AWS's example: list the top level and home/ only, read home/ only.
    policy = json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket",
         "Resource": f"arn:aws:s3:::{bucket}",
         "Condition": {"StringEquals": {"s3:prefix": ["", "home/"]}}},
        {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{bucket}/home/*"}]})
    root.put_bucket_policy(Bucket=bucket, Policy=policy)
    base = c.endpoint() + "/" + bucket

    def get(path):
        try:
            with urllib.request.urlopen(base + path, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    assert get("?list-type=2")[0] == 200
    assert get("?list-type=2&prefix=home%2F")[0] == 200
    assert get("?list-type=2&prefix=private%2F")[0] == 403
    # The parameter's name encoded: s3s reads it as prefix, and so does the check.
    status, body = get("?list-type=2&%70refix=private%2F")
    assert status == 403 and b"private/b.txt" not in body, body
    assert get("?list-type=2&prefix=%zz")[0] in (400, 403)
    assert get("/home/a.txt") == (200, b"home/a.txt")
    assert get("/private/b.txt")[0] == 403
    # Overrides of the answer's headers are for signed requests only, as in S3.
    status, body = get("/home/a.txt?response-content-type=text%2Fhtml")
    assert status == 400 and b"InvalidRequest" in body, body
    status, body = get("/home/a.txt?%72esponse-content-type=text%2Fhtml")
    assert status == 400 and b"InvalidRequest" in body, body
    # A Range that cannot be used is ignored (the route around s3s) for a public object.
    req = urllib.request.Request(base + "/home/a.txt", headers={"Range": "bytes=9-1"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.read() == b"home/a.txt"
    req = urllib.request.Request(base + "/home/a.txt?x-id=GetObject",
                                 headers={"Range": "bytes=9-1"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.read() == b"home/a.txt"
    req = urllib.request.Request(base + "/private/b.txt", headers={"Range": "bytes=9-1"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 403
    # A key under the public pattern that does not exist: 404 only where the policy lets
    # anyone list (here the top level is listable: 404), otherwise 403.
    assert get("/home/none.txt")[0] == 404
    only_get = json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{bucket}/home/*"}]})
    root.put_bucket_policy(Bucket=bucket, Policy=only_get)
    assert get("/home/none.txt")[0] == 403
    assert get("/home/a.txt") == (200, b"home/a.txt")
    assert get("?list-type=2")[0] == 403
    root.delete_bucket_policy(Bucket=bucket)
    for k in ["top.txt", "home/a.txt", "private/b.txt"]:
        root.delete_object(Bucket=bucket, Key=k)
    root.delete_bucket(Bucket=bucket)
