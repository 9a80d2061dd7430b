"""The aws CLI and curl against the cluster: a 100 MB multipart copy checked by
checksum, a directory tree synced both ways, presigned URLs, and SigV4 failures."""

import hashlib
import os
import subprocess
import time

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
    # The CLI uploads it in parts: S3's multipart ETag ends with the part count, which a
    # HEAD of one part reports.
    assert "PartsCount" not in head
    part = cluster.client().head_object(Bucket="cli-big", Key="big.bin", PartNumber=1)
    assert part["PartsCount"] > 1 and part["ContentLength"] < 100_000_000
    assert head["ETag"].endswith(f'-{part["PartsCount"]}"'), head["ETag"]
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
    headers = cluster.signed_headers("PUT", "/cli-auth/k", b"good body")
    out = subprocess.run(
        ["curl", "-sS", "-X", "PUT", "--data-binary", "evil body", "-o", "/dev/null",
         "-w", "%{http_code}"] + sum((["-H", f"{k}: {v}"] for k, v in headers.items()), []) +
        [f"{cluster.endpoint()}/cli-auth/k"],
        capture_output=True, text=True, timeout=60)
    assert out.stdout == "403", out
    anonymous = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                                f"{cluster.endpoint()}/cli-auth/k"],
                               capture_output=True, text=True, timeout=60)
    assert anonymous.stdout == "403"
    assert s3.get_object(Bucket="cli-auth", Key="k")["Body"].read() == b"original"


def _hmac(key, msg):
    import hmac
    return hmac.new(key, msg.encode() if isinstance(msg, str) else msg, hashlib.sha256).digest()


def aws_chunked_put(cluster, bucket, key, data, chunk=65536, tamper=False):
    """PUT with `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: the body in aws-chunked frames, each
    signed with the previous signature (what SDKs do to stream a signed upload). Returns
    (status, body). With `tamper`, one byte of the second frame changes after signing."""
    import datetime as dt
    import http.client
    now = dt.datetime.now(dt.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    host = cluster.addrs[0]
    scope = f"{day}/us-east-1/s3/aws4_request"
    pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)] + [b""]
    # The encoded length is known before signing: every frame's header has a fixed form.
    frame_len = lambda n: len(f"{n:x};chunk-signature={'0' * 64}\r\n") + n + 2
    headers = {
        "host": host,
        "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "x-amz-date": amz_date,
        "x-amz-decoded-content-length": str(len(data)),
        "content-encoding": "aws-chunked",
        "content-length": str(sum(frame_len(len(p)) for p in pieces)),
    }
    signed = sorted(headers)
    canonical = "\n".join([
        "PUT", f"/{bucket}/{key}", "",
        *(f"{h}:{headers[h]}" for h in signed), "",
        ";".join(signed), "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    k = _hmac(("AWS4" + cluster.secret).encode(), day)
    for part in ("us-east-1", "s3", "aws4_request"):
        k = _hmac(k, part)
    sig = _hmac(k, to_sign).hex()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential=oed-test/{scope}, "
                                f"SignedHeaders={';'.join(signed)}, Signature={sig}")
    body, prev = b"", sig
    empty = hashlib.sha256(b"").hexdigest()
    for i, p in enumerate(pieces):
        s = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, prev, empty,
                       hashlib.sha256(p).hexdigest()])
        prev = _hmac(k, s).hex()
        if tamper and i == 1:
            p = bytes([p[0] ^ 1]) + p[1:]
        body += f"{len(p):x};chunk-signature={prev}\r\n".encode() + p + b"\r\n"
    conn = http.client.HTTPConnection(host, timeout=60)
    conn.request("PUT", f"/{bucket}/{key}", body=body, headers=headers)
    r = conn.getresponse()
    out = (r.status, r.read())
    conn.close()
    return out


def test_aws_chunked_signed_streaming_upload(cluster, s3):
    s3.create_bucket(Bucket="cli-chunked")
    data = os.urandom(300_000)
    status, body = aws_chunked_put(cluster, "cli-chunked", "streamed", data)
    assert status == 200, body
    got = s3.get_object(Bucket="cli-chunked", Key="streamed")
    assert got["Body"].read() == data
    assert got["ETag"] == '"%s"' % hashlib.md5(data).hexdigest()
    status, body = aws_chunked_put(cluster, "cli-chunked", "streamed", os.urandom(300_000),
                                   tamper=True)
    assert status == 403 and b"SignatureDoesNotMatch" in body, (status, body)
    assert s3.get_object(Bucket="cli-chunked", Key="streamed")["Body"].read() == data


def test_aws_chunked_uploads_are_checked_by_the_drive_in_batches():
    """The drive that takes a chunk-signed upload checks it itself, its chunks hashed
    together (`crates/s3/src/chunked.rs`); one whose seed signature it does not reproduce
    (here a wrong secret) is left to S3's own checks, which refuse it."""
    from conftest import Cluster
    c = Cluster(n=3, k=2, m=1, env=lambda i: {"OED_LOG": "warn,oed_s3::chunked=debug"},
                logs=True)
    try:
        s3 = c.client()
        s3.create_bucket(Bucket="batched")
        data = os.urandom(40 * 65536 + 123)
        status, body = aws_chunked_put(c, "batched", "k", data)
        assert status == 200, body
        assert s3.get_object(Bucket="batched", Key="k")["Body"].read() == data
        status, body = aws_chunked_put(c, "batched", "k", os.urandom(40 * 65536), tamper=True)
        assert status == 403 and b"SignatureDoesNotMatch" in body, (status, body)
        log = c.log_path(0).read_text()
        assert log.count("checked here") == 2, log
        right = c.secret
        c.secret = "not-the-secret"
        try:
            status, body = aws_chunked_put(c, "batched", "k", b"x" * 70_000)
        finally:
            c.secret = right
        assert status == 403 and b"SignatureDoesNotMatch" in body, (status, body)
        assert "left to s3s" in c.log_path(0).read_text()
        assert s3.get_object(Bucket="batched", Key="k")["Body"].read() == data
    finally:
        c.stop()
