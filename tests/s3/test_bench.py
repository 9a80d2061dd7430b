"""`oedd bench` against a real cluster on 127.0.0.1 (no root needed; tests/lab runs it
through shaped links): every phase's figures and their JSON names, energy from the
drives' meters labelled modelled (interpolated between their ticks, so a phase shorter
than a meter period still gets its figure), uploads in every way S3 clients sign them,
time-based phases, the peak from given rates, the objects deleted after, and bad options
refused with a message that says what was wrong.
"""

import json
import subprocess
import time

import pytest

from conftest import Cluster


@pytest.fixture(scope="module")
def metered():
    # Meters every 100 ms, so even short phases see the counters move.
    c = Cluster(n=4, k=2, m=1, extra=lambda i: ["meter_period_ms=100"])
    yield c
    c.stop()


def bench(c, *args, check=True):
    eps = ",".join(f"http://{a}" for a in c.addrs)
    r = subprocess.run([c.bin, "bench", "--endpoint", eps, *args], env=c.aws_env(),
                       capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_every_phase_reports_throughput_latency_peak_and_energy(metered, tmp_path):
    c = metered
    out = tmp_path / "run.json"
    r = bench(c, "--bucket", "bench", "--size", "256KiB", "--count", "40", "--clients", "4",
              "--reps", "2", "--phases", "write,read,op",
              "--metrics", ",".join(f"http://{a}/metrics" for a in c.metrics_addrs),
              "--drives", "4", "--k", "2", "--m", "1", "--drive-link", "1gbit",
              "--client-link", "10gbit", "--disk-mb-s", "1000", "--disks", "1",
              "--json", "--json-file", str(out), "--svg", str(tmp_path / "run.svg"), "--quiet")
    run = json.loads(r.stdout)
    assert run == json.loads(out.read_text())
    assert [(p["phase"], p["rep"]) for p in run["phases"]] == [
        ("write", 1), ("read", 1), ("op", 1), ("write", 2), ("read", 2), ("op", 2)]
    for p in run["phases"]:
        assert p["errors"] == 0, p["first_errors"]
        assert p["objects"] == 40 and p["bytes"] == 40 * 256 * 1024
        assert p["mib_s"] > 0 and abs(p["mb_s"] - p["mib_s"] * 1.048576) < 1e-6 * p["mb_s"]
        lat = p["latency_ms"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
        assert (p["ttfb_ms"] is not None) == (p["phase"] == "read")
        # The peak is the least of its terms, and the share of it is what it says.
        assert p["pct_peak"] == pytest.approx(100 * p["mb_s"] / p["peak_mb_s"])
        assert p["pct_tpp"] == pytest.approx(100 * p["mb_s"] / p["tpp_mb_s"])
        # Energy from 4 modelled meters: J/GiB and EDP follow from joules and time.
        assert p["energy_source"] == "modelled"
        assert p["joules"] > 0 and p["energy"]["complete"]
        assert len(p["energy"]["drives"]) == 4
        assert {d["drive"] for d in p["energy"]["drives"]} == set(c.ids)
        assert p["j_per_gib"] == pytest.approx(p["joules"] / (p["bytes"] / 2**30))
        assert p["edp"] == pytest.approx(p["joules"] * p["seconds"])
        assert p["watts"] == pytest.approx(p["joules"] / p["seconds"])
        # Its own CPU time: ticks of 10 ms, so a short phase may show none.
        assert p["client_cpu_s_per_gib"] >= 0
    peaks = {p["phase"]: p for p in run["peaks"]}
    # 4 drives, 2+1, 4 gateways at 1 Gbit/s: a gateway's incoming link carries
    # 1/4 + 1.5/4 x 3/4 = 0.53125 of a write's bytes.
    assert peaks["write"]["mb_s"] == pytest.approx(1e9 / 8 * 1448 / 1538 / 1e6 / 0.53125)
    assert peaks["write"]["terms"][0]["name"] == "drive links"
    assert peaks["op"]["mb_s"] == pytest.approx(1000.0)
    assert run["energy_source"] == "modelled"
    assert [s["phase"] for s in run["summary"]] == ["write", "read", "op"]
    assert run["summary"][0]["reps"] == 2 and run["summary"][0]["mib_s"]["min"] > 0
    assert run["timeline"] and all("mib_s" in t for t in run["timeline"])
    assert "ENERGY IS MODELLED" in r.stderr
    assert "peak of OED's data path, write" in r.stderr
    assert (tmp_path / "run.svg").read_text().startswith("<svg")
    # Deleted after each repetition.
    assert c.client().list_objects_v2(Bucket="bench").get("KeyCount", 0) == 0


def test_without_meters_or_rates_it_says_so(metered):
    r = bench(metered, "--bucket", "bench2", "--size", "64KiB", "--count", "8", "--keep",
              "--quiet")
    assert "energy: not known" in r.stdout
    assert "no rates given" in r.stdout
    r = bench(metered, "--bucket", "bench2", "--size", "64KiB", "--count", "8", "--json",
              "--quiet")
    p = json.loads(r.stdout)["phases"][0]
    assert p["pct_peak"] is None and p["joules"] is None and p["energy_source"] is None


@pytest.fixture(scope="module")
def slow_meters():
    # A meter period of 4 s (the bench waits up to 5 s for a tick): every phase below
    # is shorter than one.
    c = Cluster(n=3, k=2, m=1, extra=lambda i: ["meter_period_ms=4000"])
    yield c
    c.stop()


def test_every_signing_mode_writes_what_reads_back(metered):
    c = metered
    # 200 KiB: three whole 64 KiB chunks and a short one.
    for mode in ["streaming-crc32c", "streaming", "sha256", "unsigned", "unsigned-crc32c"]:
        r = bench(c, "--bucket", "signed", "--size", "200KiB", "--count", "6", "--clients", "3",
                  "--signing", mode, "--json", "--quiet")
        run = json.loads(r.stdout)
        assert run["signing"] == mode
        for p in run["phases"]:
            assert p["errors"] == 0 and p["objects"] == 6, (mode, p["first_errors"])
        assert f"uploads signed {mode} (" in r.stderr
    # auto: streaming-crc32c over http://, as minio-go's multipart parts are signed.
    r = bench(c, "--bucket", "signed", "--size", "64KiB", "--count", "2", "--json", "--quiet")
    assert json.loads(r.stdout)["signing"] == "streaming-crc32c"


def test_a_phase_shorter_than_a_meter_period_gets_a_true_figure(slow_meters):
    c = slow_meters
    metrics = ",".join(f"http://{a}/metrics" for a in c.metrics_addrs)
    # Let every meter tick once after its first, so each has ticks to interpolate from.
    time.sleep(4.5)
    r = bench(c, "--bucket", "short", "--size", "64KiB", "--count", "8", "--clients", "4",
              "--metrics", metrics, "--json", "--quiet")
    run = json.loads(r.stdout)
    for p in run["phases"]:
        assert p["seconds"] < 4.0, "the phase was to be shorter than a meter period"
        # The counters moved at most once in the phase, often not at all; the figure
        # is each drive's power over exactly the phase's window.
        assert p["joules"] > 0 and p["energy"]["complete"], p["energy_unknown"]
        assert p["energy_unknown"] is None
        assert all(d["interpolated"] for d in p["energy"]["drives"])
        assert p["watts"] == pytest.approx(p["joules"] / p["seconds"])
        # Three modelled drives, each at least its model's idle power (oed-gen1: 9.7 W,
        # docs/metering.md) and well under a server's.
        assert 3 * 9.7 * 0.999 <= p["watts"] < 3 * 50.0, p["watts"]
    # A "meter" that is not an OED drive's: the phase's energy is unknown, and why.
    r = bench(c, "--bucket", "short", "--size", "64KiB", "--count", "2",
              "--metrics", f"http://{c.addrs[0]}/metrics", "--json", "--quiet")
    run = json.loads(r.stdout)
    for p in run["phases"]:
        assert p["joules"] is None and p["watts"] is None
        assert "did not answer with an OED meter's energy" in p["energy_unknown"]
    assert "energy unknown: " in r.stderr
    assert " unknown " in r.stderr.split("EDP J*s")[1]


def test_time_based_phases_run_for_their_duration(metered):
    c = metered
    r = bench(c, "--bucket", "timed", "--size", "64KiB", "--clients", "2", "--duration", "1.5",
              "--json", "--quiet")
    run = json.loads(r.stdout)
    assert run["duration_s"] == 1.5
    write, read = run["phases"]
    for p in (write, read):
        assert p["errors"] == 0, p["first_errors"]
        # Requests stop at the deadline; the last answers come a little after.
        assert 1.5 <= p["seconds"] < 10, p["seconds"]
        assert p["objects"] > 0
    # The read went over what the write wrote (again and again, when it is faster).
    assert read["objects"] >= 1
    assert "for 1.5 s a phase" in r.stderr
    # Everything written is deleted after the repetition.
    assert c.client().list_objects_v2(Bucket="timed").get("KeyCount", 0) == 0


@pytest.mark.parametrize("args,message", [
    (["--size", "4furlongs"], "unit"),
    (["--signing", "chunked"], "is not one of streaming-crc32c"),
    (["--duration", "3fortnights"], "is not ms, s, m or h"),
    (["--duration", "5", "--total", "1GiB"], "cannot be used with"),
    (["--phases", "read"], "start with write"),
    (["--drive-link", "100mbps"], "bytes a second"),
    (["--operation", "{not json"], "--operation is not JSON"),
    (["--count", "0"], "--count must be at least 1"),
])
def test_bad_options_are_refused_clearly(metered, args, message):
    r = bench(metered, *args, check=False)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr


def test_a_refused_signature_stops_it_with_the_reason(metered):
    # A wrong secret: the bucket cannot be made, and the error says why.
    c = metered
    env = c.aws_env()
    env["AWS_SECRET_ACCESS_KEY"] = "wrong"
    r = subprocess.run([c.bin, "bench", "--endpoint", f"http://{c.addrs[0]}", "--count", "2",
                        "--quiet"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "SignatureDoesNotMatch" in r.stderr or "403" in r.stderr, r.stderr


def test_a_named_prefix_reads_what_an_earlier_run_kept(metered):
    c = metered
    bench(c, "--bucket", "kept", "--size", "64KiB", "--count", "6", "--phases", "write",
          "--prefix", "p", "--keep", "--quiet")
    r = bench(c, "--bucket", "kept", "--size", "64KiB", "--count", "6", "--phases", "read",
              "--prefix", "p", "--json", "--quiet")
    p = json.loads(r.stdout)["phases"][0]
    assert p["phase"] == "read" and p["errors"] == 0 and p["objects"] == 6
    # A run without a write deletes nothing it did not write.
    keys = [o["Key"] for o in c.client().list_objects_v2(Bucket="kept")["Contents"]]
    assert keys == [f"p/r1/{i:08}" for i in range(6)]
    # Reading more than was kept: the missing ones fail, each counted with its error.
    r = bench(c, "--bucket", "kept", "--size", "64KiB", "--count", "8", "--phases", "read",
              "--prefix", "p", "--json", "--quiet")
    p = json.loads(r.stdout)["phases"][0]
    assert p["errors"] == 2 and p["objects"] == 6
    assert all("404" in e and "NoSuchKey" in e for e in p["first_errors"]), p["first_errors"]
