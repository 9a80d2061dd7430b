"""Near-data operations through the S3 port: `POST /BUCKET/KEY?oed-op`, signed with SigV4
by botocore's signer and by curl's --aws-sigv4, on a real six-drive cluster (4+2, 64 KiB
chunks). Answers are checked against the same computation done here with Python's own
code over the bytes the test wrote; bad requests get S3 errors."""

import csv
import hashlib
import io
import json
import math
import random
import struct
import subprocess
import urllib.error
import urllib.request

from conftest import ACCESS_KEY


def crc32c(data):
    """CRC-32C (Castagnoli), bit by bit: independent of every library the drives use."""
    crc = 0xFFFFFFFF
    table = crc32c.table
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _table():
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


crc32c.table = _table()


def op(cluster, bucket, key, body, sign=True):
    """POSTs `body` (an operation) to bucket/key?oed-op; returns (status, parsed body)."""
    path = f"/{bucket}/{key}?oed-op"
    data = json.dumps(body).encode() if not isinstance(body, bytes) else body
    headers = cluster.signed_headers("POST", path, data) if sign else {}
    req = urllib.request.Request(cluster.endpoint() + path, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            raw = resp.read()
            answer = json.loads(raw)
            # The answer reports its own size as what went to the client.
            assert answer["cost"]["client_bytes"] == len(raw), answer["cost"]
            return resp.status, answer
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_statistics_and_checksums_are_computed_on_the_drives(cluster, s3, bucket):
    rng = random.Random(7)
    values = [1e9 + rng.uniform(-1000, 1000) for _ in range(60_000)]  # 480 kB, 7+ stripes
    data = struct.pack(f"<{len(values)}d", *values)
    s3.put_object(Bucket=bucket, Key="sensor.f64", Body=data)

    status, answer = op(cluster, bucket, "sensor.f64", {"op": "stats", "format": "f64le"})
    assert status == 200, answer
    r, cost = answer["result"], answer["cost"]
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / n
    assert r["count"] == n
    assert abs(r["mean"] - mean) < 1e-6
    assert abs(r["variance"] - var) / var < 1e-9
    assert (r["min"], r["max"]) == (min(values), max(values))
    # The drives read the data; only their small answers crossed the network.
    assert cost["drive_bytes_read"] >= len(data)
    assert cost["network_bytes"] < len(data) / 100, cost
    assert not cost["parity_used"] and len(cost["drives"]) == cluster.k
    # Energy from the drives' meters, labelled with how it was had (where the machine has
    # no power sensor the drives can read, a model stands in, and must say so).
    assert cost["energy_method"] in ("measured", "modelled", "mixed"), cost
    assert cost["energy_joules"] >= 0 and cost["coordinator_energy_joules"] >= 0

    status, answer = op(cluster, bucket, "sensor.f64", {"op": "checksum", "algorithm": "crc32c"})
    assert status == 200, answer
    assert answer["result"]["hex"] == f"{crc32c(data):08x}"
    status, answer = op(cluster, bucket, "sensor.f64", {"op": "checksum", "algorithm": "sha256"})
    assert answer["result"]["hex"] == hashlib.sha256(data).hexdigest()


def test_curl_signs_an_operation_too(cluster, s3, bucket):
    """As docs/near-data.md shows it. curl before 8.x does not send the payload hash S3
    signatures need, so the command names it: the body's SHA-256."""
    s3.put_object(Bucket=bucket, Key="bytes", Body=bytes(range(256)) * 100)
    body = '{"op": "stats", "format": "u8", "edges": [0, 128, 256]}'
    out = subprocess.run(
        [
            "curl", "-sS", "-f", "--aws-sigv4", "aws:amz:us-east-1:s3",
            "--user", f"{ACCESS_KEY}:{cluster.secret}",
            "-H", "content-type: application/json",
            "-H", f"x-amz-content-sha256: {hashlib.sha256(body.encode()).hexdigest()}",
            "--data", body,
            f"{cluster.endpoint()}/{bucket}/bytes?oed-op=",
        ],
        capture_output=True, check=True, timeout=60,
    )
    r = json.loads(out.stdout)["result"]
    assert r["count"] == 25_600 and r["sum"] == 100 * sum(range(256))
    assert r["histogram"]["counts"] == [12_800, 12_800]


def test_bad_operations_get_s3_errors(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="odd", Body=b"x" * 1001)
    for body, code, says in [
        ({"op": "grep"}, 400, "InvalidArgument"),
        (b"not json", 400, "InvalidArgument"),
        ({"op": "stats", "format": "f64le"}, 400, "8-byte f64le records"),
        ({"op": "stats", "format": "u8", "edges": [5]}, 400, "histogram edges"),
    ]:
        status, answer = op(cluster, bucket, "odd", body)
        assert status == code and says in answer, (body, status, answer)
    status, answer = op(cluster, bucket, "missing", {"op": "stats", "format": "u8"})
    assert status == 404 and "NoSuchKey" in answer
    status, answer = op(cluster, bucket, "odd", {"op": "stats", "format": "u8"}, sign=False)
    assert status == 403, answer
    # Nothing changed.
    assert s3.get_object(Bucket=bucket, Key="odd")["Body"].read() == b"x" * 1001


def test_oedd_op_at_a_shell(cluster, s3, bucket):
    """`oedd op` signs with the credentials S3 tools use, prints the answer as JSON, and
    fails with the drive's S3 error."""
    s3.put_object(Bucket=bucket, Key="dir/three values", Body=struct.pack("<3d", 1.0, 2.0, 4.0))
    env = cluster.aws_env()

    def oedd_op(key, operation, *extra):
        return subprocess.run(
            [cluster.bin, "op", "--endpoint", cluster.endpoint(), *extra, bucket, key, operation],
            env=env, capture_output=True, text=True, timeout=60,
        )

    out = oedd_op("dir/three values", '{"op": "stats", "format": "f64le"}')
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["result"]["count"] == 3 and answer["result"]["mean"] == 7 / 3
    assert answer["cost"]["object_bytes"] == 24
    out = oedd_op("dir/three values", '{"op": "stats", "format": "f64le"}', "--range", "bytes=8-")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["result"]["sum"] == 6.0
    out = oedd_op("no such key", '{"op": "stats", "format": "u8"}')
    assert out.returncode != 0 and "NoSuchKey" in out.stderr, out.stderr
    out = oedd_op("dir/three values", "{not json")
    assert out.returncode != 0 and "not JSON" in out.stderr, out.stderr


def test_grep_through_s3(cluster, s3, bucket):
    lines = [f"{i} {'ERROR' if i % 7 == 0 else 'ok'} " + "y" * (i % 500) for i in range(3000)]
    body = "\n".join(lines).encode()
    s3.put_object(Bucket=bucket, Key="app.log", Body=body)
    status, answer = op(cluster, bucket, "app.log", {"op": "grep", "pattern": "ERROR", "lines": 3})
    assert status == 200, answer
    r = answer["result"]
    want = [i for i, line in enumerate(lines) if "ERROR" in line]
    assert (r["lines"], r["matches"]) == (len(lines), len(want))
    assert [m["text"] for m in r["matched"]] == [lines[i] for i in want[:3]]
    assert answer["cost"]["network_bytes"] < len(body) / 10
    status, answer = op(cluster, bucket, "app.log", {"op": "grep", "pattern": "a{1000}{1000}", "regex": True})
    assert status == 400 and "regular expression" in answer, answer


def test_operations_over_a_prefix(cluster, s3, bucket):
    """POST /BUCKET?oed-op&prefix=P: every object under P, each answered, statistics also
    merged over all of them exactly as if they were one array; other keys untouched."""
    parts = {
        "day/1": [1.0, 2.0, 3.0],
        "day/2": [1e9 + 4.0] * 5000,
        "day/3": [-7.5, 0.25],
        "night/1": [1e12],
    }
    for key, values in parts.items():
        s3.put_object(Bucket=bucket, Key=key, Body=struct.pack(f"<{len(values)}d", *values))
    path = f"/{bucket}?oed-op&prefix=day%2F"
    body = json.dumps({"op": "stats", "format": "f64le"}).encode()
    headers = cluster.signed_headers("POST", path, body)
    req = urllib.request.Request(cluster.endpoint() + path, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=120) as resp:
        answer = json.loads(resp.read())
    r = answer["result"]
    assert [o["key"] for o in r["objects"]] == ["day/1", "day/2", "day/3"]
    assert r["objects"][0]["result"]["count"] == 3
    values = [v for k in ("day/1", "day/2", "day/3") for v in parts[k]]
    mean = math.fsum(values) / len(values)
    var = math.fsum((v - mean) ** 2 for v in values) / len(values)
    total = r["total"]
    assert total["count"] == len(values) and (total["min"], total["max"]) == (-7.5, 1e9 + 4.0)
    assert abs(total["mean"] - mean) < 1e-6 and abs(total["variance"] - var) / var < 1e-9
    assert answer["cost"]["object_bytes"] == 8 * len(values)
    # Grep over a prefix totals its counts; an empty prefix's answer is empty.
    s3.put_object(Bucket=bucket, Key="logs/a", Body=b"x ERROR\ny\n")
    s3.put_object(Bucket=bucket, Key="logs/b", Body=b"ERROR z\nERROR w")
    path = f"/{bucket}?oed-op&prefix=logs%2F"
    body = json.dumps({"op": "grep", "pattern": "ERROR"}).encode()
    req = urllib.request.Request(
        cluster.endpoint() + path, data=body, headers=cluster.signed_headers("POST", path, body), method="POST"
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        r = json.loads(resp.read())["result"]
    assert r["total"] == {"lines": 4, "matches": 3}
    path = f"/{bucket}?oed-op&prefix=none%2F"
    req = urllib.request.Request(
        cluster.endpoint() + path, data=body, headers=cluster.signed_headers("POST", path, body), method="POST"
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert json.loads(resp.read())["result"]["objects"] == []


def test_csv_quantiles_compressibility_and_dedup_through_s3(cluster, s3, bucket):
    """The text formats, quantiles and the estimates, as a user calls them over S3;
    references computed here with Python's own csv module and sorted values."""
    rng = random.Random(11)
    rows = [["id", "city", "temp"]]
    for i in range(20_000):
        city = rng.choice(["Oslo", '"Quoted, city"', "multi\nline", "Lyon"])
        rows.append([str(i), city, f"{rng.uniform(-30, 40):.3f}"])
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    data = buf.getvalue().encode()
    s3.put_object(Bucket=bucket, Key="temps.csv", Body=data)
    temps = [float(r[2]) for r in list(csv.reader(io.StringIO(data.decode())))[1:]]
    assert len(temps) == 20_000
    status, answer = op(
        cluster, bucket, "temps.csv",
        {"op": "stats", "format": "csv", "column": 2, "header": True, "quantiles": [0.5, 0.99]},
    )
    assert status == 200, answer
    r = answer["result"]
    assert r["count"] == len(temps) and r["invalid"] == 0 and r["missing"] == 0, r
    assert abs(r["sum"] - math.fsum(temps)) < 1e-6
    s = sorted(temps)
    for q in r["quantiles"]["values"]:
        want = s[math.floor(q["q"] * (len(s) - 1))]
        assert abs(q["value"] - want) <= 0.01 * abs(want) + 1e-9, (q, want)
    # The column by its name in the header: the same answer.
    status, named = op(
        cluster, bucket, "temps.csv",
        {"op": "stats", "format": "csv", "column": "temp", "header": True, "quantiles": [0.5, 0.99]},
    )
    assert status == 200 and named["result"] == r, named
    status, answer = op(cluster, bucket, "temps.csv", {"op": "stats", "format": "csv", "column": "tmp", "header": True})
    assert status == 400 and "column &quot;tmp&quot; does not exist" in answer and "temp" in answer, answer
    # Compressibility writes nothing and says what zstd would save.
    keys = lambda: [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]  # noqa: E731
    before = keys()
    status, answer = op(cluster, bucket, "temps.csv", {"op": "compressibility", "level": 3})
    assert status == 200 and answer["result"]["input_bytes"] == len(data), answer
    assert 0 < answer["result"]["output_bytes"] < len(data) // 2
    assert keys() == before
    # Compress writes a new object of exactly that size: zstd frames, made on the drives.
    status, answer = op(cluster, bucket, "temps.csv", {"op": "compress", "level": 3, "target": "temps.csv.zst"})
    assert status == 200, answer
    out = s3.get_object(Bucket=bucket, Key="temps.csv.zst")
    stream = out["Body"].read()
    assert len(stream) == answer["result"]["output_bytes"] and out["ContentType"] == "application/zstd"
    assert stream[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame's magic number
    assert s3.get_object(Bucket=bucket, Key="temps.csv")["Body"].read() == data
    for body, says in [
        ({"op": "compress", "target": "temps.csv"}, "another key"),
        ({"op": "compress", "target": "\u0001x"}, "reserved"),
        ({"op": "compress", "codec": "lz4", "level": 3, "target": "x"}, "lz4 takes no level"),
    ]:
        status, answer = op(cluster, bucket, "temps.csv", body)
        assert status == 400 and says in answer, (body, status, answer)
    # Dedup over a prefix finds content repeated across objects (only those under it).
    block = rng.randbytes(100_000)
    s3.put_object(Bucket=bucket, Key="dup/a", Body=block * 2)
    s3.put_object(Bucket=bucket, Key="dup/b", Body=block)
    path = f"/{bucket}?oed-op&prefix=dup%2F"
    body = json.dumps({"op": "dedup", "average": 2048}).encode()
    req = urllib.request.Request(
        cluster.endpoint() + path, data=body, headers=cluster.signed_headers("POST", path, body), method="POST"
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        total = json.loads(resp.read())["result"]["total"]
    assert total["bytes"] == 300_000 and 0.25 < total["unique_ratio"] < 0.45, total
    # Bad parameters are named.
    for body, says in [
        ({"op": "stats", "format": "csv", "delimiter": '"'}, "delimiter"),
        ({"op": "stats", "format": "f64le", "quantiles": [1.5]}, "between 0 and 1"),
        ({"op": "compressibility", "level": 40}, "zstd level"),
        ({"op": "dedup", "average": 1000}, "power of two"),
        ({"op": "stats", "format": "csv", "column": 5}, "column 5 does not exist"),
        ({"op": "stats", "format": "f64le", "quantile": [0.5]}, "unknown field"),
    ]:
        status, answer = op(cluster, bucket, "temps.csv", body)
        assert status == 400 and says in answer, (body, status, answer)


def test_an_operation_over_a_byte_range(cluster, s3, bucket):
    """`Range: bytes=A-B` on the operation's POST, as on GET: only those bytes count."""
    values = [float(i) for i in range(50_000)]
    data = struct.pack(f"<{len(values)}d", *values)
    s3.put_object(Bucket=bucket, Key="v", Body=data)

    def ranged(body, rng):
        path = f"/{bucket}/v?oed-op"
        raw = json.dumps(body).encode()
        headers = cluster.signed_headers("POST", path, raw)
        headers["Range"] = rng
        req = urllib.request.Request(cluster.endpoint() + path, data=raw, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    status, answer = ranged({"op": "stats", "format": "f64le"}, "bytes=800-8799")
    assert status == 200, answer
    assert answer["result"]["count"] == 1000 and answer["result"]["sum"] == math.fsum(values[100:1100])
    assert answer["cost"]["object_bytes"] == 8000
    status, answer = ranged({"op": "checksum", "algorithm": "sha256"}, "bytes=-4096")
    assert answer["result"]["hex"] == hashlib.sha256(data[-4096:]).hexdigest()
    status, answer = ranged({"op": "checksum", "algorithm": "crc32c"}, "bytes=12345-")
    assert answer["result"]["hex"] == f"{crc32c(data[12345:]):08x}"
    status, answer = ranged({"op": "stats", "format": "f64le"}, f"bytes={len(data)}-")
    assert status == 416 and "InvalidRange" in answer, answer
    status, answer = ranged({"op": "stats", "format": "f64le"}, "pages=1-2")
    assert status == 416 and "InvalidRange" in answer, answer


def test_s3_keeps_working_while_operations_scan(cluster, s3, bucket):
    """Operations run on threads of their own at a lower priority: GETs and PUTs on the
    same drives are served, whole and correct, while scans run again and again. (How long
    they take then is measured by benches/near-data-bench, LATENCY_OP; not asserted here.)"""
    import threading

    big = bytes(random.Random(3).randbytes(1 << 20)) * 8
    s3.put_object(Bucket=bucket, Key="big", Body=big)
    small = {f"s{i}": random.Random(i).randbytes(65536) for i in range(8)}
    for k, v in small.items():
        s3.put_object(Bucket=bucket, Key=k, Body=v)
    stop = threading.Event()
    scans, failures = [], []

    def scan():
        while not stop.is_set() and len(scans) < 50:
            status, answer = op(cluster, bucket, "big", {"op": "compressibility", "level": 9})
            (scans if status == 200 else failures).append(answer)

    t = threading.Thread(target=scan)
    t.start()
    try:
        for i in range(40):
            k = f"s{i % 8}"
            assert s3.get_object(Bucket=bucket, Key=k)["Body"].read() == small[k]
            if i % 10 == 0:
                s3.put_object(Bucket=bucket, Key=f"new{i}", Body=small[k])
    finally:
        stop.set()
        t.join(timeout=300)
    assert not failures, failures[:1]
    assert scans and scans[0]["result"]["input_bytes"] == len(big)


def test_sort_and_add_write_new_objects(cluster, s3, bucket):
    """sort and add through S3: the new objects read back with boto3, checked here."""
    rng = random.Random(5)
    values = [rng.uniform(-1e6, 1e6) for _ in range(100_000)]
    s3.put_object(Bucket=bucket, Key="v", Body=struct.pack(f"<{len(values)}d", *values))
    status, answer = op(cluster, bucket, "v", {"op": "sort", "format": "f64le", "target": "v.sorted"})
    assert status == 200 and answer["result"]["records"] == len(values), answer
    body = s3.get_object(Bucket=bucket, Key="v.sorted")["Body"].read()
    assert list(struct.unpack(f"<{len(values)}d", body)) == sorted(values)
    ones = [1.0] * len(values)
    s3.put_object(Bucket=bucket, Key="ones", Body=struct.pack(f"<{len(ones)}d", *ones))
    status, answer = op(cluster, bucket, "v", {"op": "add", "format": "f64le", "with": "ones", "target": "v+1"})
    assert status == 200, answer
    body = s3.get_object(Bucket=bucket, Key="v+1")["Body"].read()
    assert list(struct.unpack(f"<{len(values)}d", body)) == [v + 1.0 for v in values]
    for body, says in [
        ({"op": "sort", "format": "f64le", "target": "v"}, "another key"),
        ({"op": "add", "format": "f64le", "with": "ones", "target": "ones"}, "another key"),
        ({"op": "add", "format": "f64le", "with": "nope", "target": "w"}, "no object"),
        ({"op": "sort", "format": "csv", "target": "w"}, "fixed-width"),
    ]:
        status, answer = op(cluster, bucket, "v", body)
        assert status == 400 and says in answer, (body, status, answer)


def test_a_client_that_disconnects_stops_the_drives(cluster, s3, bucket):
    """A client that closes its connection mid-operation: the drives stop their parts and
    count it in oed_ops_cancelled_total; the next operation is answered."""
    import http.client
    import time

    # Text that compresses: zstd's top level searches it hard (random bytes it would skip).
    big = b"".join(b"record %d value %d status ok\n" % (i, i * 7919 % 100_003) for i in range(600_000))
    s3.put_object(Bucket=bucket, Key="big", Body=big)
    before = sum(cluster.metric(i, "oed_ops_cancelled_total") for i in range(len(cluster.ids)))
    path = f"/{bucket}/big?oed-op"
    body = json.dumps({"op": "compressibility", "level": 19}).encode()
    host = cluster.endpoint().removeprefix("http://")
    conn = http.client.HTTPConnection(host, timeout=60)
    conn.request("POST", path, body=body, headers=cluster.signed_headers("POST", path, body))
    time.sleep(0.3)
    conn.close()  # gone, with the answer not read
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = sum(cluster.metric(i, "oed_ops_cancelled_total") for i in range(len(cluster.ids)))
        if now > before:
            break
        time.sleep(0.2)
    assert now > before, "no drive stopped the operation its caller left"
    status, answer = op(cluster, bucket, "big", {"op": "checksum", "algorithm": "crc32c"})
    assert status == 200 and answer["result"]["hex"] == f"{crc32c(big):08x}"
