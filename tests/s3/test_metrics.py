"""Metrics end to end: a real Prometheus server (Debian's `prometheus` package) scrapes a
3-drive cluster while boto3 writes and reads, and its HTTP API shows the series arrive
with sane values. Drive 1 has a (fixture) INA226 power sensor, so its power is measured;
the others have none and are modelled, and the labels say so. The deploy/ files are
checked with promtool, and every metric they name must exist on a real drive.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import Cluster, free_ports

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy/prometheus/oed-rules.yml"
DASHBOARD = ROOT / "deploy/grafana/oed-dashboard.json"
SENSOR_WATTS = 4.25


def tool(name):
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None)
    if path is None:
        pytest.fail(f"{name} is not installed (deploy/test.sh installs Debian's prometheus package)")
    return path


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Prom:
    def __init__(self, targets):
        self.dir = Path(tempfile.mkdtemp(prefix="oed-prom-"))
        shutil.copy(RULES, self.dir / "oed-rules.yml")
        lines = [
            "global:",
            "  scrape_interval: 1s",
            "  evaluation_interval: 1s",
            "rule_files: [oed-rules.yml]",
            "scrape_configs:",
            "  - job_name: oed",
            "    static_configs:",
        ]
        for drive, addr in targets:
            lines.append(f'      - targets: ["{addr}"]')
            lines.append(f'        labels: {{drive: "{drive}", cluster: "test"}}')
        (self.dir / "prometheus.yml").write_text("\n".join(lines) + "\n")
        self.addr = f"127.0.0.1:{free_ports(1)[0]}"
        self.log = open(self.dir / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [
                tool("prometheus"),
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address={self.addr}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 60
        while True:
            try:
                http_get(f"http://{self.addr}/-/ready", timeout=1)
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("prometheus did not become ready")
                time.sleep(0.2)

    def query(self, expr):
        q = urllib.parse.urlencode({"query": expr})
        body = json.loads(http_get(f"http://{self.addr}/api/v1/query?{q}"))
        assert body["status"] == "success", body
        return body["data"]["result"]

    def wait_for(self, expr, check, what, timeout=45):
        """Polls `expr` until `check(result)` holds; returns the result."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = self.query(expr)
            if check(last):
                return last
            time.sleep(0.5)
        raise AssertionError(f"{what}: {expr} gave {last}")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def by_drive(result):
    return {r["metric"].get("drive"): float(r["value"][1]) for r in result}


@pytest.fixture(scope="module")
def sensor_root():
    d = Path(tempfile.mkdtemp(prefix="oed-sysfs-"))
    hw = d / "class/hwmon/hwmon0"
    hw.mkdir(parents=True)
    (hw / "name").write_text("ina226\n")
    (hw / "power1_input").write_text(f"{int(SENSOR_WATTS * 1e6)}\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def metered(sensor_root):
    def extra(i):
        common = ["meter_period_ms=250"]
        if i == 0:
            return common + [f'meter_sysfs_root="{sensor_root}"']
        # No sensor on the others: an empty sysfs, so the test does not depend on what
        # this machine has.
        return common + [f'meter_sysfs_root="{sensor_root}/none"']

    c = Cluster(n=3, k=2, m=1, extra=extra)
    prom = Prom(list(zip(c.ids, c.metrics_addrs)))
    yield c, prom
    prom.stop()
    c.stop()


def test_prometheus_scrapes_power_energy_and_traffic_under_load(metered):
    cluster, prom = metered
    s3 = cluster.client()
    s3.create_bucket(Bucket="meter")
    prom.wait_for('up{job="oed"}', lambda r: len(r) == 3 and all(v == 1 for v in by_drive(r).values()), "all drives up")
    energy_before = by_drive(prom.wait_for("oed_energy_joules_total", lambda r: len(r) == 3, "energy series"))

    sizes = [1 << 20] * 12 + [3 * (1 << 20) + 17, 4096, 1]
    written = 0
    deadline = time.time() + 120
    for i, size in enumerate(sizes):
        assert time.time() < deadline, "load took too long"
        s3.put_object(Bucket="meter", Key=f"o{i}", Body=os.urandom(size))
        written += size
    read = 0
    for i, size in enumerate(sizes):
        read += len(s3.get_object(Bucket="meter", Key=f"o{i}")["Body"].read())
    assert read == written

    # Object bytes written through drive 1 (the coordinator): exactly what was sent.
    prom.wait_for(
        'sum(oed_traffic_bytes_total{class="client",direction="in"})',
        lambda r: r and float(r[0]["value"][1]) == written,
        "client bytes written",
    )
    prom.wait_for(
        'sum(oed_traffic_bytes_total{class="client",direction="out"})',
        lambda r: r and float(r[0]["value"][1]) >= read,
        "client bytes read",
    )
    prom.wait_for(
        'sum(oed_requests_total{api="s3",op="PutObject",code="200"})',
        lambda r: r and float(r[0]["value"][1]) == len(sizes),
        "PutObject requests",
    )
    # GetObject is named by s3s too, and each of the other drives answered one PutShard
    # per object, named by the peer route it matched (never "Other").
    prom.wait_for(
        'sum(oed_requests_total{api="s3",op="GetObject",code="200"})',
        lambda r: r and float(r[0]["value"][1]) == len(sizes),
        "GetObject requests",
    )
    prom.wait_for(
        'oed_requests_total{api="peer",op="PutShard",code="200",drive!="drive-1"}',
        lambda r: len(r) == 2 and all(v == len(sizes) for v in by_drive(r).values()),
        "PutShard requests on drives 2 and 3",
    )
    assert not prom.query('oed_requests_total{op="Other"} > 0'), "requests left unnamed"
    # The other drives stored shards for it over the peer API, and the coordinator
    # encoded every byte.
    prom.wait_for(
        'oed_traffic_bytes_total{class="peer",direction="in",drive!="drive-1"}',
        lambda r: len(r) == 2 and all(v > written / 4 for v in by_drive(r).values()),
        "peer shard bytes on drives 2 and 3",
    )
    prom.wait_for(
        'oed_ec_bytes_total{op="encode",drive="drive-1"}',
        lambda r: r and float(r[0]["value"][1]) >= written,
        "bytes encoded",
    )
    prom.wait_for(
        "oed_shards", lambda r: len(r) == 3 and all(v == len(sizes) for v in by_drive(r).values()), "shards per drive"
    )
    # Each drive timed every shard it stored: one record each; the data's fsync and the
    # rename for the shard files, all but the two smallest objects' (inline, under 4 KiB).
    steps = {
        phase: by_drive(prom.query(f'oed_shard_write_seconds_count{{phase="{phase}"}}'))
        for phase in ("receive", "data_sync", "place", "record")
    }
    for phase in ("receive", "record"):
        assert len(steps[phase]) == 3 and all(v == len(sizes) for v in steps[phase].values()), steps
    for phase in ("data_sync", "place"):
        assert len(steps[phase]) == 3 and all(v == len(sizes) - 2 for v in steps[phase].values()), steps
    synced = by_drive(prom.query('oed_shard_write_seconds_sum{phase="data_sync"}'))
    assert len(synced) == 3 and all(v > 0 for v in synced.values()), synced

    # Energy rises on every drive; power is measured where the sensor is, modelled
    # elsewhere, and the labels say which.
    prom.wait_for(
        "oed_energy_joules_total",
        lambda r: len(r) == 3 and all(by_drive(r)[d] > energy_before[d] for d in energy_before),
        "energy rising",
    )
    power = prom.query("oed_power_watts")
    labels = {r["metric"]["drive"]: (r["metric"]["source"], r["metric"]["method"]) for r in power}
    assert labels["drive-1"] == ("hwmon:ina226", "measured"), labels
    assert labels["drive-2"] == ("model:oed-gen1", "modelled"), labels
    watts = by_drive(power)
    assert watts["drive-1"] == pytest.approx(SENSOR_WATTS)
    # The model is at least its idle draw and at most everything busy.
    for d in ("drive-2", "drive-3"):
        assert 9.7 <= watts[d] <= 9.7 + 2.0 + 4.0 + 1.0, watts
    # The sensor's energy is its power integrated over time (once the load is over, so
    # the window holds no sampler delays).
    prom.wait_for(
        'rate(oed_energy_joules_total{drive="drive-1"}[5s])',
        lambda r: r and abs(float(r[0]["value"][1]) - SENSOR_WATTS) < 0.05 * SENSOR_WATTS,
        "energy = sensor power x time",
    )

    # The recording rules give the studies' efficiency figures.
    r = prom.wait_for(
        "cluster:oed_joules_per_gib_written:5m", lambda r: len(r) == 1, "joules per GiB written recorded"
    )
    assert 0 < float(r[0]["value"][1]) < float("inf")
    r = prom.wait_for(
        "cluster:oed_capacity_bytes_per_watt:5m", lambda r: len(r) == 1, "capacity per watt recorded"
    )
    assert float(r[0]["value"][1]) > 0
    # Process and disk metrics are there and plausible.
    rss = by_drive(prom.query("process_resident_memory_bytes"))
    assert all(1 << 20 < v < 1 << 30 for v in rss.values()), rss
    # Everything the test sent to drive 1 crossed loopback, which every drive counts.
    lo = by_drive(prom.query('oed_network_receive_bytes_total{interface="lo"}'))
    assert len(lo) == 3 and all(v >= written for v in lo.values()), lo


def test_a_degraded_write_shows_in_prometheus():
    # 2+2 on 4 drives: a write with one drive down still reaches its quorum of 3.
    cluster = Cluster(n=4, k=2, m=2, extra=lambda i: ["meter_period_ms=250"])
    prom = Prom(list(zip(cluster.ids, cluster.metrics_addrs)))
    s3 = cluster.client()
    s3.create_bucket(Bucket="meter")
    cluster.kill9(2)
    try:
        prom.wait_for('up{drive="drive-3"}', lambda r: r and float(r[0]["value"][1]) == 0, "drive-3 down")
        # Scraped at 0 first: increase() (the alert) ignores a series' first sample.
        prom.wait_for(
            'oed_degraded_writes_total{drive="drive-1"}',
            lambda r: r and float(r[0]["value"][1]) == 0,
            "degraded writes scraped before the write",
        )
        resp = s3.put_object(Bucket="meter", Key="degraded", Body=b"x" * 100_000)
        assert resp["ResponseMetadata"]["HTTPHeaders"].get("x-oed-degraded") == "1"
        prom.wait_for(
            'oed_degraded_writes_total{drive="drive-1"}',
            lambda r: r and float(r[0]["value"][1]) >= 1,
            "degraded write counted",
        )
        prom.wait_for('oed_heal_backlog{drive="drive-1"}', lambda r: r and float(r[0]["value"][1]) >= 1, "heal queued")
        alerts = prom.wait_for("ALERTS", lambda r: any(a["metric"]["alertname"] == "OedDegradedWrites" for a in r), "alert")
        assert any(a["metric"]["alertname"] == "OedDegradedWrites" for a in alerts)
        assert s3.get_object(Bucket="meter", Key="degraded")["Body"].read() == b"x" * 100_000
    finally:
        prom.stop()
        cluster.stop()


def promtool(*args):
    return subprocess.run([tool("promtool"), *args], capture_output=True, text=True, timeout=60)


def dashboard_exprs():
    d = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in d["panels"] for t in p["targets"]]


def test_deploy_files_pass_promtool_and_name_real_metrics(metered):
    cluster, _ = metered
    r = promtool("check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr
    r = promtool("check", "config", str(ROOT / "deploy/prometheus/prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr

    # promtool has no dashboard check: each panel's query goes into a rules file, with
    # Grafana's variables replaced, so promtool parses it as PromQL.
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    with tempfile.TemporaryDirectory() as d:
        rules = Path(d) / "dashboard-rules.yml"
        body = ["groups:", "  - name: dashboard", "    rules:"]
        for i, e in enumerate(exprs):
            e = e.replace("$__rate_interval", "1m").replace("$cluster", ".*")
            body += [f"      - record: dashboard:q{i}", f"        expr: {json.dumps(e)}"]
        rules.write_text("\n".join(body) + "\n")
        r = promtool("check", "rules", str(rules))
        assert r.returncode == 0, r.stdout + r.stderr

    # Every metric the rules and the dashboard use is one a drive really exports.
    text = http_get(f"http://{cluster.metrics_addrs[0]}/metrics")
    exported = set(re.findall(r"^# TYPE (\S+)", text, re.M))
    # Recording rule names (level:metric:operations) are not exported names.
    used = set(re.findall(r"(?<![:\w])((?:oed|process)_[a-z_]+)(?!:)", RULES.read_text() + "\n".join(exprs)))
    for name in used:
        if name.startswith("oed_disk_"):
            # These drives' sysfs is a fixture without block devices, so they export no
            # disk series; crates/meter/tests/sources.rs checks those names.
            continue
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in exported or base in exported, f"{name} is not exported"


def test_metrics_endpoint_serves_only_metrics(metered):
    cluster, _ = metered
    base = f"http://{cluster.metrics_addrs[1]}"
    text = http_get(f"{base}/metrics")
    assert "# TYPE oed_energy_joules_total counter" in text
    # The time of the meter's tick the counter counts up to, beside it.
    assert "# TYPE oed_energy_timestamp_seconds gauge" in text
    assert 'oed_drive_info{cluster="test",drive="drive-2"' in text
    with pytest.raises(urllib.error.HTTPError) as e:
        http_get(f"{base}/other")
    assert e.value.code == 404
    # On the S3 port, /metrics is a bucket name like any other: anonymous access is
    # refused there, not answered with metrics.
    with pytest.raises(urllib.error.HTTPError) as e:
        http_get(f"{cluster.endpoint(1)}/metrics")
    assert e.value.code == 403
