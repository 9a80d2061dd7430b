"""Framed shard reads between drives (docs/peer-api.md, "Framed reads"), on a real 6-drive
4+2 cluster whose drives differ: two coordinate with `framed_shard_reads = false` (they
read other drives' shards as bodies, checked by the drive that sends them), two have the
defaults (they ask for framed reads, which the drive holding the shard sends from its
file with `sendfile`, and check each chunk's CRC32C as it arrives), and two ask for
framed reads and send theirs through a buffer (`shard_sendfile = false`). Objects of
sizes around the inline threshold, a chunk and a stripe, whole and in ranges, come back
byte for byte through every drive; drives count framed reads only when a coordinator
asks for them; and a byte flipped on a drive's disk is never served, whichever way the
chunk travels, and is counted and queued for heal on that drive."""

import hashlib

import pytest

from conftest import Cluster

CHUNK = 65536
STRIPE = 4 * CHUNK
BODIES = (0, 1)
SENDFILE = (2, 3)
COPIED = (4, 5)
FRAMED = "oed_shard_reads_framed_total"


def data(n, seed):
    return hashlib.shake_256(f"f{seed}".encode()).digest(n)


@pytest.fixture(scope="module")
def mixed():
    c = Cluster(
        chunk=CHUNK,
        extra=lambda i: (["framed_shard_reads=false"] if i in BODIES
                         else ["shard_sendfile=false"] if i in COPIED else []),
    )
    yield c
    c.stop()


SIZES = [1, 4 * 4096 - 1, 4 * 4096 + 1, STRIPE, 3 * STRIPE + 12345]


def framed(cluster):
    return [cluster.metric(i, FRAMED) for i in range(6)]


def read_all(cluster, bucket, bodies, via):
    for i in via:
        s3 = cluster.client(i)
        for k, b in bodies.items():
            got = s3.get_object(Bucket=bucket, Key=k)["Body"].read()
            assert got == b, f"drive {i + 1}: {k} differs"
            if len(b) > 10:
                lo, hi = len(b) // 3, len(b) - 2
                part = s3.get_object(Bucket=bucket, Key=k, Range=f"bytes={lo}-{hi}")
                assert part["Body"].read() == b[lo:hi + 1], f"drive {i + 1}: {k} range"


def test_every_way_reads_the_same_bytes_and_only_framed_reads_are_counted(mixed):
    s3 = mixed.client(0)
    s3.create_bucket(Bucket="frames")
    bodies = {f"o-{n}": data(n, n) for n in SIZES}
    for k, b in bodies.items():
        s3.put_object(Bucket="frames", Key=k, Body=b)
    before = framed(mixed)
    read_all(mixed, "frames", bodies, BODIES)
    assert framed(mixed) == before, "a coordinator with framed_shard_reads=false asked for frames"
    read_all(mixed, "frames", bodies, SENDFILE + COPIED)
    after = framed(mixed)
    # The four drives that hold an object's data shards (a GET reads no parity) served
    # them as framed reads to the coordinators among them that ask, or to another that
    # asks when the coordinator is one of them: at least four drives counted some.
    assert sum(a > b for a, b in zip(after, before)) >= 4, (before, after)


def shard_of_size(cluster, d, size):
    """The shard file of drive `d` that is `size` bytes long, and its shard index."""
    files = [f for f in cluster.shard_files(d) if f.stat().st_size == size]
    assert len(files) == 1, f"drive {d + 1}: {len(files)} shard files of {size} bytes"
    return files[0], int.from_bytes(files[0].read_bytes()[16:18], "little")


def test_a_byte_flipped_on_disk_is_never_served_either_way(mixed):
    s3 = mixed.client(0)
    s3.create_bucket(Bucket="rotten")
    victims = (SENDFILE[0], COPIED[0])
    # Objects of three stripes and a tail of a length of their own, so that each drive's
    # shard file of each is known by its size; the first whose data shards (which a GET
    # reads) lie on both victims is the one to spoil.
    chosen = None
    for i in range(16):
        tail = 4 * (i + 1)
        body = data(3 * STRIPE + tail, 100 + i)
        s3.put_object(Bucket="rotten", Key=f"k{i}", Body=body)
        size = 64 + 3 * (CHUNK + 4) + tail // 4 + 4
        held = [shard_of_size(mixed, d, size) for d in victims]
        if all(index < 4 for _, index in held):
            chosen = (f"k{i}", body, [f for f, _ in held])
            break
    assert chosen, "no object had data shards on both victims"
    key, body, files = chosen
    for f in files:
        raw = bytearray(f.read_bytes())
        raw[64 + CHUNK + 4 + 1000] ^= 0x33  # in the second stripe's chunk
        f.write_bytes(bytes(raw))
    failures = [mixed.metric(d, "oed_shard_checksum_failures_total") for d in victims]
    # Through coordinators that ask for frames (the chunk checked where it arrives, then
    # read again the ordinary way so that its drive finds it too) and one that asks for
    # bodies; none of them a victim, which would read its own shard from its store.
    for i in (SENDFILE[1], COPIED[1], BODIES[0]):
        got = mixed.client(i).get_object(Bucket="rotten", Key=key)["Body"].read()
        assert got == body, f"drive {i + 1} served bad bytes"
    for d, n in zip(victims, failures):
        assert mixed.metric(d, "oed_shard_checksum_failures_total") > n, f"drive {d + 1}"
        assert mixed.metric(d, "oed_heal_queued_total", '{cause="read_corrupt"}') >= 1
