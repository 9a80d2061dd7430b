"""Stock tools other than boto3 and the aws CLI against a real cluster: rclone (Debian's
package) copies a tree up (small objects and multipart ones), lists it, syncs it back,
compares it byte for byte, and purges the bucket; s3fs (Debian's package) mounts a bucket
and writes, reads, lists and removes files through it (where the machine offers FUSE)."""

import filecmp
import hashlib
import os
import shutil
import subprocess

import pytest

from conftest import ACCESS_KEY

RCLONE = shutil.which("rclone")


def rclone(cluster, *args, timeout=300):
    # The AWS SDK inside rclone reads AWS_* (a CA bundle, a profile): none of it applies.
    env = dict(
        {k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        RCLONE_CONFIG_OED_TYPE="s3",
        RCLONE_CONFIG_OED_PROVIDER="Other",
        RCLONE_CONFIG_OED_ACCESS_KEY_ID=ACCESS_KEY,
        RCLONE_CONFIG_OED_SECRET_ACCESS_KEY=cluster.secret,
        RCLONE_CONFIG_OED_ENDPOINT=cluster.endpoint(),
        RCLONE_CONFIG_OED_REGION="us-east-1",
        RCLONE_CONFIG_OED_FORCE_PATH_STYLE="true",
        RCLONE_CONFIG=os.devnull,
    )
    r = subprocess.run(
        [RCLONE, "--retries", "1", "--low-level-retries", "1", *args],
        env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert r.returncode == 0, f"rclone {' '.join(args)}: {r.stderr}"
    return r.stdout


def tree(root):
    files = {
        "empty": 0,
        "one": 1,
        "docs/readme.txt": 5000,
        "docs/deep/er/file.bin": 300_000,
        "data/big.bin": 12 << 20,  # multipart with 5 MiB chunks
        "name with spaces & symbols+=.txt": 77,
        "ünïcode/ファイル.txt": 1234,
    }
    for rel, size in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(hashlib.shake_256(rel.encode()).digest(size) if size else b"")
    return files


@pytest.mark.skipif(RCLONE is None, reason="rclone is not installed (deploy/test.sh installs it)")
def test_rclone_copies_lists_syncs_back_checks_and_purges(cluster, s3, tmp_path):
    src = tmp_path / "src"
    files = tree(src)
    rclone(cluster, "mkdir", "oed:rclone-tree")
    rclone(
        cluster, "copy", str(src), "oed:rclone-tree",
        "--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M",
    )
    listed = rclone(cluster, "lsf", "-R", "--files-only", "oed:rclone-tree").split("\n")
    assert sorted(x for x in listed if x) == sorted(files)
    sizes = rclone(cluster, "ls", "oed:rclone-tree")
    assert f"{12 << 20} data/big.bin" in sizes
    head = s3.head_object(Bucket="rclone-tree", Key="data/big.bin")
    assert head["ETag"].endswith('-3"'), head["ETag"]
    # Back down, compared byte for byte, and by rclone itself.
    back = tmp_path / "back"
    rclone(cluster, "sync", "oed:rclone-tree", str(back))
    for rel in files:
        assert filecmp.cmp(src / rel, back / rel, shallow=False), rel
    rclone(cluster, "check", "--download", str(src), "oed:rclone-tree")
    # A change syncs up as a change, and a removal as a removal.
    (src / "one").write_bytes(b"changed")
    (src / "docs/readme.txt").unlink()
    rclone(cluster, "sync", str(src), "oed:rclone-tree")
    assert s3.get_object(Bucket="rclone-tree", Key="one")["Body"].read() == b"changed"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="rclone-tree")["Contents"]]
    assert "docs/readme.txt" not in keys and len(keys) == len(files) - 1
    rclone(cluster, "purge", "oed:rclone-tree")
    assert "rclone-tree" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


@pytest.mark.skipif(RCLONE is None, reason="rclone is not installed (deploy/test.sh installs it)")
def test_rclone_reads_old_versions_of_a_versioned_bucket(cluster, s3, tmp_path):
    """rclone's own version support over ListObjectVersions and GET ?versionId: a file
    synced over and deleted keeps its versions, which `--s3-versions` lists and
    `--s3-version-at` reads as they were."""
    import time
    s3.create_bucket(Bucket="rclone-versions")
    s3.put_bucket_versioning(Bucket="rclone-versions",
                             VersioningConfiguration={"Status": "Enabled"})
    src = tmp_path / "src"
    src.mkdir()
    (src / "notes.txt").write_bytes(b"first draft")
    rclone(cluster, "copy", str(src), "oed:rclone-versions")
    time.sleep(1.1)
    between = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    time.sleep(1.1)
    (src / "notes.txt").write_bytes(b"second draft, longer")
    rclone(cluster, "copy", str(src), "oed:rclone-versions")
    rclone(cluster, "delete", "oed:rclone-versions/notes.txt")
    assert rclone(cluster, "lsf", "oed:rclone-versions").strip() == ""
    listed = rclone(cluster, "lsf", "--s3-versions", "oed:rclone-versions").split()
    assert len(listed) == 2 and all(n.startswith("notes-v") for n in listed), listed
    old = rclone(cluster, "cat", "--s3-version-at", between, "oed:rclone-versions/notes.txt")
    assert old == "first draft"
    versions = s3.list_object_versions(Bucket="rclone-versions")
    for v in versions.get("Versions", []) + versions.get("DeleteMarkers", []):
        s3.delete_object(Bucket="rclone-versions", Key=v["Key"], VersionId=v["VersionId"])
    s3.delete_bucket(Bucket="rclone-versions")


S3FS = shutil.which("s3fs")


def fuse_available():
    return S3FS is not None and os.path.exists("/dev/fuse") and shutil.which("fusermount")


@pytest.mark.skipif(not fuse_available(), reason="s3fs, /dev/fuse or fusermount missing: a FUSE mount cannot be tried here")
def test_s3fs_mount_writes_reads_lists_and_removes(cluster, s3, tmp_path):
    import time
    s3.create_bucket(Bucket="s3fs-mount")
    s3.put_object(Bucket="s3fs-mount", Key="there/before.txt", Body=b"put by boto3")
    passwd = tmp_path / "passwd"
    passwd.write_text(f"{ACCESS_KEY}:{cluster.secret}\n")
    passwd.chmod(0o600)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(
        [S3FS, "s3fs-mount", str(mnt), "-o", f"url={cluster.endpoint()}", "-o", "use_path_request_style",
         "-o", f"passwd_file={passwd}", "-o", "endpoint=us-east-1", "-o", "sigv4",
         "-o", "retries=1", "-o", "stat_cache_expire=1"],
        capture_output=True, text=True, timeout=60,
    )
    if r.returncode != 0:
        pytest.skip(f"this machine cannot mount FUSE file systems: {r.stderr.strip()}")
    try:
        deadline = time.time() + 20
        while not os.path.ismount(mnt) and time.time() < deadline:
            time.sleep(0.2)
        assert os.path.ismount(mnt)
        assert (mnt / "there" / "before.txt").read_bytes() == b"put by boto3"
        data = hashlib.shake_256(b"s3fs").digest(3 << 20)
        (mnt / "written.bin").write_bytes(data)
        (mnt / "dir").mkdir()
        (mnt / "dir" / "small.txt").write_text("small")
        assert s3.get_object(Bucket="s3fs-mount", Key="written.bin")["Body"].read() == data
        assert s3.get_object(Bucket="s3fs-mount", Key="dir/small.txt")["Body"].read() == b"small"
        assert sorted(os.listdir(mnt)) == ["dir", "there", "written.bin"]
        assert (mnt / "written.bin").stat().st_size == len(data)
        (mnt / "written.bin").unlink()
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="s3fs-mount")["Contents"]]
        assert "written.bin" not in keys
    finally:
        subprocess.run(["fusermount", "-u", str(mnt)], capture_output=True, timeout=30)
