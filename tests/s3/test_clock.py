"""A drive whose clock is off (docs/cluster.md, "Clocks"): one drive of three runs under
libfaketime two minutes ahead. It learns from the other drives' answers how far off it
is, reports it (`oed_clock_offset_seconds`, `oedd admin status`), and makes the version
ids of the writes it coordinates from their time, not its own."""

import datetime
import glob

from conftest import Cluster

AHEAD = 120


def faketime_lib():
    found = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    assert found, "libfaketime is missing: deploy/cross/setup.sh installs it (apt: faketime)"
    return found[0]


def test_a_drive_whose_clock_is_off_reports_it_and_writes_with_the_others_time():
    lib = faketime_lib()
    ahead = {"LD_PRELOAD": lib, "FAKETIME": f"+{AHEAD}s", "DONT_FAKE_MONOTONIC": "1"}
    c = Cluster(n=3, k=2, m=1, env=lambda i: ahead if i == 0 else {})
    try:
        s3 = c.client(0)
        s3.create_bucket(Bucket="clock")
        # The answers to the bucket's creation told drive 1 the others' time.
        c.wait_for("drive 1 to see its clock ahead",
                   lambda: c.metric(0, "oed_clock_offset_seconds") > AHEAD - 5, timeout=30)
        assert abs(c.metric(0, "oed_clock_offset_seconds") - AHEAD) < 5
        for key in ("a", "b"):
            s3.put_object(Bucket="clock", Key=key, Body=b"x" * 100_000)
        now = datetime.datetime.now(datetime.timezone.utc)
        for i in range(3):
            head = c.client(i).head_object(Bucket="clock", Key="a")
            made = head["LastModified"]
            assert abs((made - now).total_seconds()) < 10, (i, made, now)
        assert c.client(1).get_object(Bucket="clock", Key="b")["Body"].read() == b"x" * 100_000

        status = c.status()
        assert abs(status[0]["clock_offset_seconds"] - AHEAD) < 5, status[0]
        # The others see one drive ahead and one not: the median (the lower) is theirs.
        for s in status[1:]:
            assert s["clock_offset_seconds"] is None or abs(s["clock_offset_seconds"]) < 5, s
        text = c.admin("status")
        assert f"clock: {AHEAD}." in text or f"clock: {AHEAD - 1}." in text, text
        assert "ahead of the other drives'" in text, text
    finally:
        c.stop()
