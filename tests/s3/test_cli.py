"""The aws CLI and curl against the cluster: a 100 MB multipart copy checked by
checksum, a directory tree synced both ways, presigned URLs, and SigV4 failures."""

import hashlib
import os
import subprocess
import time

import botocore.auth
import botocore.awsrequest
import botocore.credentials

import pytest
from botocore.exceptions import ClientError


def sha256_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def test_cp_100_mb_round_trip(cluster, tmp_path):
    src = tmp_path / "big.bin"
    with open(src, "wb") as f:
        for i in range(100):
            f.write(hashlib.shake_256(f"block{i}".encode()).digest(1_000_000))
    cluster.aws("s3", "mb", "s3://cli-big")
    cluster.aws("s3", "cp", str(src), "s3://cli-big/big.bin")
    head = cluster.client().head_object(Bucket="cli-big", Key="big.bin")
    assert head["ContentLength"] == 100_000_000
    assert head["ETag"].strip('"').endswith(f"-{head['PartsCount']}") or "-" in head["ETag"]
    dst = tmp_path / "back.bin"
    cluster.aws("s3", "cp", "s3://cli-big/big.bin", str(dst))
    assert sha256_file(dst) == sha256_file(src)


def test_sync_a_tree(cluster, tmp_path):
    tree = tmp_path / "tree"
    for d in ["a", "a/b", "c"]:
        (tree / d).mkdir(parents=True, exist_ok=True)
    files = {"a/one.txt": b"1", "a/b/two.bin": os.urandom(300_000), "c/three": b"",
             "top.md": b"# top"}
    for name, body in files.items():
        (tree / name).write_bytes(body)
    cluster.aws("s3", "mb", "s3://cli-sync")
    cluster.aws("s3", "sync", str(tree), "s3://cli-sync/tree")
    listed = cluster.aws("s3", "ls", "--recursive", "s3://cli-sync/tree/").stdout
    for name in files:
        assert f"tree/{name}" in listed
    back = tmp_path / "back"
    cluster.aws("s3", "sync", "s3://cli-sync/tree", str(back))
    for name, body in files.items():
        assert (back / name).read_bytes() == body
    # A second sync has nothing to do.
    again = cluster.aws("s3", "sync", str(tree), "s3://cli-sync/tree").stdout
    assert "upload:" not in again


def test_presigned_get_with_curl(cluster, s3):
    s3.create_bucket(Bucket="cli-presign")
    s3.put_object(Bucket="cli-presign", Key="doc.txt", Body=b"presigned bytes")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "cli-presign", "Key": "doc.txt"},
                                    ExpiresIn=300)
    out = subprocess.run(["curl", "-sS", "-f", url], capture_output=True, check=True, timeout=60)
    assert out.stdout == b"presigned bytes"
    expired = s3.generate_presigned_url("get_object", Params={"Bucket": "cli-presign", "Key": "doc.txt"},
                                        ExpiresIn=1)
    time.sleep(2)
    out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", expired],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout == "403"
    tampered = url.replace("doc.txt", "other.txt")
    out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", tampered],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout == "403"


def test_sigv4_failures_are_refused_and_change_nothing(cluster, s3):
    s3.create_bucket(Bucket="cli-auth")
    s3.put_object(Bucket="cli-auth", Key="k", Body=b"original")
    wrong = cluster.client(secret="not-the-secret-key")
    with pytest.raises(ClientError) as e:
        wrong.put_object(Bucket="cli-auth", Key="k", Body=b"evil")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    with pytest.raises(ClientError) as e:
        wrong.list_buckets()
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    # A body changed after signing: the signed payload hash no longer matches.
    creds = botocore.credentials.Credentials("oed-test", cluster.secret)
    r = botocore.awsrequest.AWSRequest(method="PUT", url=f"{cluster.endpoint()}/cli-auth/k",
                                       data=b"good body")
    botocore.auth.S3SigV4Auth(creds, "s3", "us-east-1").add_auth(r)
    headers = dict(r.headers.items())
    out = subprocess.run(
        ["curl", "-sS", "-X", "PUT", "--data-binary", "evil body", "-o", "/dev/null",
         "-w", "%{http_code}"] + sum((["-H", f"{k}: {v}"] for k, v in headers.items()), []) +
        [f"{cluster.endpoint()}/cli-auth/k"],
        capture_output=True, text=True, timeout=60)
    assert out.stdout in ("400", "403"), out
    anonymous = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                                f"{cluster.endpoint()}/cli-auth/k"],
                               capture_output=True, text=True, timeout=60)
    assert anonymous.stdout == "403"
    assert s3.get_object(Bucket="cli-auth", Key="k")["Body"].read() == b"original"
