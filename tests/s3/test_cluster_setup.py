"""`oedd cluster init` and `oedd cluster check` (docs/deploy.md): a cluster made from a
list of drive addresses serves S3 with the map and secrets init wrote, and check finds
what would not work, in the files and, with --live, on the running drives."""

import os
import subprocess

from conftest import Cluster, free_ports

BIN = os.environ.get("OED_TEST_OEDD_BIN", "target/debug/oedd")


def oedd(*args, env=None):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **(env or {})))


def test_init_refuses_what_it_cannot_make(tmp_path):
    r = oedd("cluster", "init", "--out", str(tmp_path / "a"),
             "--drive", "127.0.0.1:1", "--drive", "127.0.0.1:2")
    assert r.returncode != 0 and "at least 3" in r.stderr, r.stderr
    r = oedd("cluster", "init", "--out", str(tmp_path / "a"), "--drive",
             "127.0.0.1:1,127.0.0.1:2,127.0.0.1:1")
    assert r.returncode != 0 and "used by another drive" in r.stderr, r.stderr
    assert not (tmp_path / "a").exists(), "nothing is written for a map that fails"
    ok = ["--drive", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"]
    assert oedd("cluster", "init", "--out", str(tmp_path / "b"), *ok).returncode == 0
    secret = (tmp_path / "b" / "cluster.secret").read_text()
    r = oedd("cluster", "init", "--out", str(tmp_path / "b"), *ok)
    assert r.returncode != 0 and "exists" in r.stderr, r.stderr
    assert (tmp_path / "b" / "cluster.secret").read_text() == secret


def test_a_cluster_made_by_init_serves_and_is_checked_live(tmp_path):
    ports = free_ports(6)
    out = tmp_path / "made"
    r = oedd("cluster", "init", "--out", str(out), "--cluster-id", "setup-test",
             *[a for p in ports for a in ("--drive", f"127.0.0.1:{p}")])
    assert r.returncode == 0, r.stderr
    assert "profile 4+2 over 6 drives" in r.stdout, r.stdout
    assert f'127.0.0.1:{ports[2]}: drive_id = "drive-3"' in r.stdout, r.stdout
    for f in ("cluster.secret", "s3.secret"):
        assert oct((out / f).stat().st_mode & 0o777) == "0o600"

    files = ["--map", str(out / "cluster.toml"), "--secret-file", str(out / "cluster.secret"),
             "--s3-secret-file", str(out / "s3.secret")]
    r = oedd("cluster", "check", *files, "--drive-id", "drive-6")
    assert r.returncode == 0 and r.stdout.startswith("ok: cluster \"setup-test\", epoch 1, profile 4+2"), r.stdout
    r = oedd("cluster", "check", *files, "--drive-id", "drive-7")
    assert r.returncode == 1 and 'drive "drive-7" is not in the map' in r.stdout, r.stdout

    c = Cluster(from_init=out)
    try:
        s3 = c.client()
        s3.create_bucket(Bucket="made")
        body = os.urandom(300_000)
        s3.put_object(Bucket="made", Key="k", Body=body)
        assert c.client(3).get_object(Bucket="made", Key="k")["Body"].read() == body

        r = oedd("cluster", "check", *files, "--live")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "every drive answers as the map says" in r.stdout, r.stdout

        # Two drives' addresses swapped in a copy of the map: each answers as the other.
        text = (out / "cluster.toml").read_text()
        a, b = f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"
        swapped = tmp_path / "swapped.toml"
        swapped.write_text(text.replace(a, "X").replace(b, a).replace("X", b))
        r = oedd("cluster", "check", "--map", str(swapped), "--secret-file",
                 str(out / "cluster.secret"), "--live")
        assert r.returncode == 1, r.stdout
        assert f'drive "drive-1": {b} answers as drive "drive-2"' in r.stdout, r.stdout

        # A newer map not yet pushed, and a drive that is down.
        newer = tmp_path / "newer.toml"
        newer.write_text(text.replace("epoch = 1", "epoch = 2"))
        c.kill9(5)
        r = oedd("cluster", "check", "--map", str(newer), "--live",
                 env={"OED_CLUSTER_SECRET": c.cluster_secret})
        assert r.returncode == 1, r.stdout
        assert 'drive "drive-1" runs epoch 1 of the map; this file is epoch 2' in r.stdout, r.stdout
        assert 'drive "drive-6" at' in r.stdout and "does not answer" in r.stdout, r.stdout

        # The wrong cluster secret: no drive accepts the check's requests.
        wrong = tmp_path / "wrong.secret"
        wrong.write_text("0" * 64 + "\n")
        r = oedd("cluster", "check", "--map", str(out / "cluster.toml"), "--secret-file",
                 str(wrong), "--live")
        assert r.returncode == 1 and 'drive "drive-1" at' in r.stdout, r.stdout
    finally:
        c.stop()
