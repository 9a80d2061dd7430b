"""benches/side-by-side against a real second S3 server on 127.0.0.1 (another OED
cluster stands in for MinIO or any other): both systems' runs in alternating order,
their CPU per GiB from their own processes, the ratio, each round's objects deleted, and
the script's refusals of missing or wrong input.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ACCESS_KEY

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benches" / "side-by-side"


def run(cluster, *args, env=None, timeout=600):
    e = dict(os.environ)
    e.update(
        BIN_DIR=str(Path(cluster.bin).resolve().parent),
        DRIVES="3", K="2", M="1", SIZE_KIB="256", COUNT="12", CONCURRENCY="4", FSYNC="0",
        OTHER_ACCESS_KEY=ACCESS_KEY, OTHER_SECRET_KEY=cluster.secret,
    )
    e.update(env or {})
    return subprocess.run(["bash", str(SCRIPT), *args], env=e, capture_output=True,
                          text=True, timeout=timeout)


def test_two_rounds_in_alternating_order_with_cpu_per_gib_and_ratios(cluster, s3):
    pids = " ".join(str(p.pid) for p in cluster.procs)
    r = run(cluster, "--endpoint", cluster.endpoint(), "--pids", pids, "--name", "second",
            "--rounds", "2", "--bucket", "sbs")
    assert r.returncode == 0, r.stdout + r.stderr
    runs = re.findall(r"^round (\d), (OED|second) (PUT|GET): ([0-9.]+) MiB/s, ([0-9.]+) "
                      r"CPU-s/GiB, RSS ([0-9.]+) MiB$", r.stdout, re.M)
    order = [(rnd, sys) for rnd, sys, ph, *_ in runs if ph == "PUT"]
    assert order == [("1", "OED"), ("1", "second"), ("2", "second"), ("2", "OED")], r.stdout
    for _, _, _, mibs, cpu, rss in runs:
        # Every server spends CPU on 3 MiB of requests and holds memory.
        assert float(mibs) > 0 and float(cpu) > 0 and float(rss) > 1, r.stdout
    for label in ("PUT", "GET"):
        line = re.search(rf"^{label} .*MiB/s.*MiB/s.* ([0-9.]+)x throughput, ([0-9.]+)x CPU per GiB$",
                         r.stdout, re.M)
        assert line and float(line[1]) > 0 and float(line[2]) > 0, r.stdout
    assert re.search(r"^RSS .* MiB .* MiB", r.stdout, re.M), r.stdout
    # Each round's objects were deleted from the other server after it.
    assert s3.list_objects_v2(Bucket="sbs").get("KeyCount") == 0


def test_processes_found_by_pattern(cluster):
    # The drives' command lines hold their data directory.
    r = run(cluster, "--endpoint", cluster.endpoint(), "--pgrep", str(cluster.dir),
            "--rounds", "1", "--bucket", "sbs-pgrep")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^round 1, other GET: [0-9.]+ MiB/s, [0-9.]+ CPU-s/GiB", r.stdout, re.M)


def test_missing_or_wrong_input_is_refused_with_a_reason(cluster):
    r = run(cluster, "--pids", "1")
    assert r.returncode == 2 and "--endpoint is required" in r.stderr
    r = run(cluster, "--endpoint", cluster.endpoint())
    assert r.returncode == 2 and "--pids or --pgrep is required" in r.stderr
    r = run(cluster, "--endpoint", cluster.endpoint(), "--pids", "1", "--rounds", "x")
    assert r.returncode == 2 and "--rounds must be a positive number" in r.stderr
    r = run(cluster, "--endpoint", cluster.endpoint(), "--pids", "1",
            env={"OTHER_SECRET_KEY": ""})
    assert r.returncode != 0 and "OTHER_SECRET_KEY" in r.stderr
    pids = " ".join(str(p.pid) for p in cluster.procs)
    r = run(cluster, "--endpoint", cluster.endpoint(), "--pids", pids, "--rounds", "1",
            env={"OTHER_SECRET_KEY": "wrong"})
    assert r.returncode == 1 and "the load failed against other" in r.stderr, r.stderr


def test_uploads_signed_as_asked(cluster):
    pids = " ".join(str(p.pid) for p in cluster.procs)
    r = run(cluster, "--endpoint", cluster.endpoint(), "--pids", pids, "--rounds", "1",
            "--bucket", "sbs-signed", env={"SIGNING": "sha256"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "load oedd, signed sha256" in r.stdout, r.stdout
    assert re.search(r"^round 1, other PUT: [0-9.]+ MiB/s", r.stdout, re.M), r.stdout
    r = run(cluster, "--endpoint", cluster.endpoint(), "--pids", pids, "--rounds", "1",
            "--bucket", "sbs-signed", env={"SIGNING": "no-such-mode"})
    assert r.returncode == 1 and "the load failed against oed" in r.stderr, r.stderr


def minio_go_modules():
    """Whether benches/minio-load can be built here: Go, and its modules in the cache or
    from the module proxy."""
    if shutil.which("go") is None:
        return False
    try:
        return subprocess.run(["go", "mod", "download"], cwd=ROOT / "benches" / "minio-load",
                              capture_output=True, timeout=120).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@pytest.mark.skipif(not minio_go_modules(), reason="benches/minio-load needs Go and minio-go's modules")
def test_the_minio_go_load(cluster, s3):
    pids = " ".join(str(p.pid) for p in cluster.procs)
    r = run(cluster, "--endpoint", cluster.endpoint(), "--pids", pids, "--rounds", "1",
            "--bucket", "sbs-minio-go", env={"LOAD": "minio-go"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "load minio-go" in r.stdout, r.stdout
    runs = re.findall(r"^round 1, (OED|other) (PUT|GET): ([0-9.]+) MiB/s, ([0-9.]+) CPU-s/GiB",
                      r.stdout, re.M)
    assert len(runs) == 4 and all(float(m) > 0 and float(c) > 0 for *_, m, c in runs), r.stdout
    # minio-load named its objects as the script deletes them.
    assert s3.list_objects_v2(Bucket="sbs-minio-go").get("KeyCount") == 0


def test_an_unknown_load_is_refused(cluster):
    r = run(cluster, "--endpoint", cluster.endpoint(), "--pids", "1", env={"LOAD": "warp"})
    assert r.returncode == 2 and "LOAD is oedd or minio-go, not warp" in r.stderr, r.stderr
