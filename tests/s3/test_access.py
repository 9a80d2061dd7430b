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


# Every operation, the rights it needs in the bucket, and how it is called. A key with
# all of them gets an answer other than AccessDenied (allowed, even if S3 then refuses
# for another reason, e.g. BucketNotEmpty); any other key gets 403 AccessDenied.
OPERATIONS = [
    ("HeadBucket", {"read"}, lambda s3: s3.head_bucket(Bucket=B)),
    ("GetBucketLocation", {"read"}, lambda s3: s3.get_bucket_location(Bucket=B)),
    ("GetBucketVersioning", {"read"}, lambda s3: s3.get_bucket_versioning(Bucket=B)),
    ("ListObjects", {"read"}, lambda s3: s3.list_objects(Bucket=B)),
    ("ListObjectsV2", {"read"}, lambda s3: s3.list_objects_v2(Bucket=B)),
    ("ListObjectVersions", {"read"}, lambda s3: s3.list_object_versions(Bucket=B)),
    ("ListMultipartUploads", {"read"}, lambda s3: s3.list_multipart_uploads(Bucket=B)),
    ("GetObject", {"read"}, lambda s3: s3.get_object(Bucket=B, Key=OBJ)["Body"].read()),
    ("GetObject with a bad Range", {"read"},
     lambda s3: s3.get_object(Bucket=B, Key=OBJ, Range="bytes=9-1")["Body"].read()),
    ("HeadObject", {"read"}, lambda s3: s3.head_object(Bucket=B, Key=OBJ)),
    ("GetObjectAttributes", {"read"},
     lambda s3: s3.get_object_attributes(Bucket=B, Key=OBJ, ObjectAttributes=["ObjectSize"])),
    ("PutObject", {"write"}, lambda s3: s3.put_object(Bucket=B, Key=fresh(), Body=b"x")),
    ("DeleteObject", {"write"}, lambda s3: s3.delete_object(Bucket=B, Key=fresh())),
    ("DeleteObjects", {"write"},
     lambda s3: s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": fresh()}]})),
    ("CopyObject (source in the bucket)", {"read", "write"},
     lambda s3: s3.copy_object(Bucket=B, Key=fresh(), CopySource={"Bucket": B, "Key": OBJ})),
    ("CreateMultipartUpload, AbortMultipartUpload", {"write"}, multipart_upload),
    ("UploadPart, CompleteMultipartUpload", {"write"}, upload_and_complete),
    ("ListParts", {"read"}, list_parts),
    ("UploadPartCopy (source in the bucket)", {"read", "write"}, upload_part_copy),
    ("DeleteBucket", {"owner"}, lambda s3: s3.delete_bucket(Bucket=B)),
]

KEYS = {
    "none": set(),
    "read": {"read"},
    "write": {"write"},
    "owner": {"owner"},
    "anonymous": set(),
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
    wrong = []
    for name, needs, call in OPERATIONS:
        got = outcome(call, s3)
        want = "allowed" if needs <= KEYS[who] else "denied"
        if got.split(" ")[0] != want:
            wrong.append(f"{name}: {got}, expected {want}")
    assert not wrong, f"key {who}:\n" + "\n".join(wrong)
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
