"""S3's additional checksums with boto3, as stock clients use them: x-amz-checksum-*
sent as headers or as aws-chunked trailers, verified before anything is stored,
returned on PUT, on GET and HEAD with ChecksumMode=ENABLED, per part and for the whole
of a multipart upload (COMPOSITE and FULL_OBJECT), and by GetObjectAttributes. Every
value is checked against the same checksum computed here with Python's own code."""

import base64
import hashlib
import zlib

import pytest
from botocore.exceptions import ClientError


def _table(poly, width):
    top = (1 << width) - 1
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c & top)
    return table


_CRC32C = _table(0x82F63B78, 32)
_CRC64NVME = _table(0x9A6C9329AC4BC9B5, 64)


def _reflected(data, table, width):
    top = (1 << width) - 1
    c = top
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ top


def digest(algorithm, data):
    """The digest's bytes, as S3 carries them (big-endian for CRCs)."""
    if algorithm == "CRC32":
        return zlib.crc32(data).to_bytes(4, "big")
    if algorithm == "CRC32C":
        return _reflected(data, _CRC32C, 32).to_bytes(4, "big")
    if algorithm == "CRC64NVME":
        return _reflected(data, _CRC64NVME, 64).to_bytes(8, "big")
    return hashlib.new(algorithm.lower(), data).digest()


def b64(b):
    return base64.b64encode(b).decode()


ALGORITHMS = ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"]


def test_reference_crcs_match_the_catalogue():
    assert digest("CRC32C", b"123456789").hex() == "e3069283"
    assert digest("CRC64NVME", b"123456789").hex() == "ae8b14860a799888"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_put_verifies_stores_and_returns_each_algorithm(s3, bucket, algorithm):
    data = bytes(range(256)) * 1000 + b"tail"
    want = b64(digest(algorithm, data))
    out = s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm=algorithm)
    assert out[f"Checksum{algorithm}"] == want, out
    for call in (s3.get_object, s3.head_object):
        got = call(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
        assert got[f"Checksum{algorithm}"] == want and got["ChecksumType"] == "FULL_OBJECT"
    # Without the mode, no checksum; a range read is not the whole object's.
    assert f"Checksum{algorithm}" not in s3.head_object(Bucket=bucket, Key="k")
    ranged = s3.get_object(Bucket=bucket, Key="k", Range="bytes=0-9", ChecksumMode="ENABLED")
    assert f"Checksum{algorithm}" not in ranged
    # The value given by the caller is checked too.
    out = s3.put_object(Bucket=bucket, Key="k2", Body=data, **{f"Checksum{algorithm}": want})
    assert out[f"Checksum{algorithm}"] == want


@pytest.mark.parametrize("size", [1, 65535, 4 * 65536 - 1, 4 * 65536, 4 * 65536 + 1, 13 * 65536 + 7])
def test_a_crc32c_over_stripes_is_the_bodys(s3, bucket, size):
    """A CRC32C is joined from the data chunks' (the cluster's stripes are 4 x 64 KiB):
    bodies that end inside, at and just past a stripe, padded or not, all check and store
    the body's own, and a wrong one is refused."""
    data = bytes((i * 7 + size) % 251 for i in range(size))
    want = b64(digest("CRC32C", data))
    out = s3.put_object(Bucket=bucket, Key=f"s{size}", Body=data, ChecksumCRC32C=want)
    assert out["ChecksumCRC32C"] == want
    head = s3.head_object(Bucket=bucket, Key=f"s{size}", ChecksumMode="ENABLED")
    assert head["ChecksumCRC32C"] == want
    wrong = b64(digest("CRC32C", data[:-1] + bytes([data[-1] ^ 1])))
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key=f"s{size}", Body=data, ChecksumCRC32C=wrong)
    assert e.value.response["Error"]["Code"] == "BadDigest"
    assert s3.get_object(Bucket=bucket, Key=f"s{size}")["Body"].read() == data


def test_stock_clients_send_a_checksum_and_get_it_back(s3, bucket):
    """botocore sends CRC32 on every PutObject by default; it is stored."""
    data = b"x" * 100_000
    s3.put_object(Bucket=bucket, Key="plain", Body=data)
    head = s3.head_object(Bucket=bucket, Key="plain", ChecksumMode="ENABLED")
    assert head.get("ChecksumCRC32") == b64(digest("CRC32", data)), head


def test_a_wrong_checksum_is_refused_and_nothing_is_stored(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"old")
    for algorithm in ALGORITHMS:
        wrong = b64(digest(algorithm, b"something else"))
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="k", Body=b"new", **{f"Checksum{algorithm}": wrong})
        assert e.value.response["Error"]["Code"] == "BadDigest", e.value.response
        assert f"The {algorithm} you specified did not match" in e.value.response["Error"]["Message"]
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"old"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k", Body=b"new", ChecksumCRC32="not base64!")
    assert e.value.response["Error"]["Code"] == "InvalidRequest"


def _multipart(s3, bucket, key, parts, **create):
    up = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)
    algorithm = create.get("ChecksumAlgorithm")
    done = []
    for n, body in enumerate(parts, start=1):
        extra = {"ChecksumAlgorithm": algorithm} if algorithm else {}
        out = s3.upload_part(Bucket=bucket, Key=key, UploadId=up["UploadId"], PartNumber=n, Body=body, **extra)
        part = {"PartNumber": n, "ETag": out["ETag"]}
        if algorithm:
            assert out[f"Checksum{algorithm}"] == b64(digest(algorithm, body))
            part[f"Checksum{algorithm}"] = out[f"Checksum{algorithm}"]
        done.append(part)
    return s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=up["UploadId"], MultipartUpload={"Parts": done}
    )


def test_multipart_composite_and_full_object_checksums(s3, bucket):
    parts = [b"a" * (5 << 20), b"b" * 1234]
    whole = b"".join(parts)
    # COMPOSITE: the checksum of the parts' checksums, then -N.
    out = _multipart(s3, bucket, "comp", parts, ChecksumAlgorithm="SHA256")
    want = b64(hashlib.sha256(b"".join(digest("SHA256", p) for p in parts)).digest()) + "-2"
    assert out["ChecksumSHA256"] == want and out["ChecksumType"] == "COMPOSITE", out
    head = s3.head_object(Bucket=bucket, Key="comp", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == want
    # FULL_OBJECT: the CRC of the whole object, combined from the parts'.
    for algorithm in ["CRC32", "CRC32C", "CRC64NVME"]:
        extra = {} if algorithm == "CRC64NVME" else {"ChecksumType": "FULL_OBJECT"}
        out = _multipart(s3, bucket, f"full-{algorithm}", parts, ChecksumAlgorithm=algorithm, **extra)
        assert out[f"Checksum{algorithm}"] == b64(digest(algorithm, whole)), out
        assert out["ChecksumType"] == "FULL_OBJECT"
    # S3's rules on the type.
    for bad in [
        {"ChecksumAlgorithm": "SHA1", "ChecksumType": "FULL_OBJECT"},
        {"ChecksumAlgorithm": "CRC64NVME", "ChecksumType": "COMPOSITE"},
    ]:
        with pytest.raises(ClientError) as e:
            s3.create_multipart_upload(Bucket=bucket, Key="x", **bad)
        assert e.value.response["Error"]["Code"] == "InvalidRequest", bad


def test_get_object_attributes(s3, bucket):
    parts = [b"p" * (5 << 20), b"q" * 10]
    _multipart(s3, bucket, "mp", parts, ChecksumAlgorithm="CRC32C", ChecksumType="FULL_OBJECT")
    attrs = s3.get_object_attributes(
        Bucket=bucket, Key="mp", ObjectAttributes=["ETag", "Checksum", "ObjectParts", "ObjectSize", "StorageClass"]
    )
    assert attrs["ObjectSize"] == sum(map(len, parts))
    assert attrs["StorageClass"] == "STANDARD" and attrs["ETag"].strip('"').endswith("-2")
    assert attrs["Checksum"]["ChecksumCRC32C"] == b64(digest("CRC32C", b"".join(parts)))
    assert attrs["Checksum"]["ChecksumType"] == "FULL_OBJECT"
    op = attrs["ObjectParts"]
    assert op["TotalPartsCount"] == 2 and not op["IsTruncated"]
    assert [(p["PartNumber"], p["Size"], p["ChecksumCRC32C"]) for p in op["Parts"]] == [
        (n, len(b), b64(digest("CRC32C", b))) for n, b in enumerate(parts, start=1)
    ]
    page = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts"], MaxParts=1)
    assert page["ObjectParts"]["IsTruncated"] and len(page["ObjectParts"]["Parts"]) == 1
    s3.put_object(Bucket=bucket, Key="single", Body=b"hello", ChecksumAlgorithm="SHA1")
    attrs = s3.get_object_attributes(Bucket=bucket, Key="single", ObjectAttributes=["Checksum", "ObjectSize"])
    assert attrs["Checksum"]["ChecksumSHA1"] == b64(hashlib.sha1(b"hello").digest())
    assert attrs["ObjectSize"] == 5 and "ObjectParts" not in attrs
