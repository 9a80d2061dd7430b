//! Real faults against a real `oedd`: kill -9 during a stream of writes, and a small file
//! system filling up. (Bytes flipped in a shard file and a shard file cut short are in
//! the drive conformance suite, `drive_conformance.rs`, against both kinds of drive.)

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use oed_model::drive::{Drive, ErrorCode};
use oed_tests::{
    Daemon, body, bytes, chunk_bytes, files_under, raw_uploads_read_back, read_shard, record,
    shard_file, upload,
};

use oed_tests::runtime as rt;

#[test]
fn kill_9_during_writes_loses_nothing_acknowledged_and_shows_nothing_partial() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let c = d.client();
    let acked: Arc<Mutex<BTreeMap<String, Vec<u8>>>> = Arc::default();
    let runtime = rt();
    runtime.block_on(c.create_bucket("crash")).unwrap();
    // Four writers; each body is slowed down so some uploads are mid-stream at the kill.
    let mut writers = Vec::new();
    for w in 0..4u64 {
        let c = c.clone();
        let acked = acked.clone();
        writers.push(runtime.spawn(async move {
            for i in 0..200u64 {
                let key = format!("w{w}/obj{i:03}");
                let data = bytes(40_000 + (i as usize * 997) % 20_000, w * 1000 + i);
                let rec = record("crash", &key, u128::from(i + 1), data.len() as u64, 2, 1, 0);
                let file = shard_file(&rec, &data);
                let slow = body(&file, 8192).then(|b| async move {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    b
                });
                match c.put_shard(&rec, Box::pin(slow), false).await {
                    Ok(_) => {
                        acked.lock().unwrap().insert(key, file);
                    }
                    Err(_) => return,
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_mins(1);
    while acked.lock().unwrap().len() < 40 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut d = d;
    d.kill9();
    runtime.block_on(async {
        for w in writers {
            let _ = tokio::time::timeout(Duration::from_secs(10), w).await;
        }
    });
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 40,
        "only {} writes acknowledged before the kill",
        acked.len()
    );

    let d = d.restart();
    let c = d.client();
    runtime.block_on(async {
        // Every acknowledged shard is there, intact.
        for (key, file) in &acked {
            let got = read_shard(&c, "crash", key).await;
            assert_eq!(got, chunk_bytes(file), "{key}");
        }
        // Everything visible is complete: no record without its whole, valid shard.
        let mut start = String::new();
        let mut seen = 0;
        loop {
            let page = c.list_objects("crash", &start, 100).await.unwrap();
            let last = page.last().map(|r| r.key.clone());
            for r in &page {
                if Some(&r.key) == last.as_ref() && page.len() == 100 {
                    continue;
                }
                let got = read_shard(&c, "crash", &r.key).await;
                assert_eq!(got.len() as u64, r.size.div_ceil(2), "{}", r.key);
                seen += 1;
            }
            match last {
                Some(k) if page.len() == 100 => start = k,
                _ => break,
            }
        }
        assert!(seen >= acked.len());
        let info = c.info().await.unwrap();
        assert_eq!(info.shard_count, seen as u64);
    });
    // Interrupted uploads were discarded and orphans swept (the sweep runs at start).
    assert!(files_under(&dir.path().join("tmp")).is_empty());
    let deadline = Instant::now() + Duration::from_secs(20);
    let files = || files_under(&dir.path().join("shards")).len();
    let records = runtime.block_on(c.info()).unwrap().shard_count as usize;
    while files() > records && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        files() <= records,
        "{} shard files for {records} records",
        files()
    );
}

/// A small tmpfs mounted for the test and unmounted when dropped.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(size: &str) -> Result<Self, String> {
        if std::env::var("USER").as_deref() != Ok("root") && !is_root() {
            return Err("not running as root".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        mount(
            &["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"],
            dir.path(),
        )?;
        Ok(Self { dir })
    }
}

/// Runs `mount ARGS PATH`.
fn mount(args: &[&str], path: &std::path::Path) -> Result<(), String> {
    let out = Command::new("mount")
        .args(args)
        .arg(path)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn a_full_file_system_refuses_writes_cleanly_and_recovers_after_deletes() {
    let fs = match SmallFs::mount("48m") {
        Ok(fs) => fs,
        Err(why) => {
            println!(
                "SKIPPED a_full_file_system_refuses_writes_cleanly_and_recovers_after_deletes: {why}"
            );
            return;
        }
    };
    let data_dir = fs.dir.path().join("drive");
    let d = Daemon::start(
        &data_dir,
        &[
            "reserve_bytes=8388608",
            "rocksdb_write_buffer_bytes=1048576",
        ],
    );
    let c = d.client();
    rt().block_on(async {
        c.create_bucket("full").await.unwrap();
        let data = bytes(1 << 20, 5);
        let mut stored = Vec::new();
        let mut refused = None;
        for i in 0..100u32 {
            let rec = record("full", &format!("k{i}"), 1, data.len() as u64, 1, 0, 0);
            let file = shard_file(&rec, &data);
            match c.put_shard(&rec, upload(&file, 65536), false).await {
                Ok(_) => stored.push(rec.key.clone()),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        let err = refused.expect("48 MiB filled up within 100 MiB of writes");
        assert_eq!(err.code, ErrorCode::InsufficientStorage, "{err}");
        assert!(err.to_string().contains("reserve"), "{err}");
        assert!(stored.len() >= 10, "only {} writes fit", stored.len());
        let info = c.info().await.unwrap();
        assert!(info.free_bytes < info.reserve_bytes + (2 << 20));
        // Reads and deletes keep working.
        for key in &stored {
            let got = read_shard(&c, "full", key).await;
            assert_eq!(got, data);
        }
        for key in stored.iter().take(5) {
            c.delete_object("full", key, None).await.unwrap();
        }
        // And writes work again.
        let rec = record("full", "after", 1, data.len() as u64, 1, 0, 0);
        c.put_shard(&rec, upload(&shard_file(&rec, &data), 65536), false)
            .await
            .unwrap();
        assert!(files_under(&data_dir.join("tmp")).is_empty());
    });
    drop(d);
}

/// A ramfs mounted at a path for the test (it refuses `O_DIRECT`, as some network and
/// FUSE file systems do; tmpfs takes it on recent kernels), unmounted when dropped.
struct RamFs {
    path: std::path::PathBuf,
}

impl RamFs {
    fn mount(path: &std::path::Path) -> Result<Self, String> {
        if !is_root() {
            return Err("not running as root".into());
        }
        std::fs::create_dir_all(path).map_err(|e| e.to_string())?;
        mount(&["-t", "ramfs", "ramfs"], path)?;
        Ok(Self {
            path: path.to_owned(),
        })
    }
}

impl Drop for RamFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

/// On a file system that refuses `O_DIRECT` (a ramfs under the drive's `shards/`) a
/// drive with `direct_io` (the default) writes through the page cache instead: raw
/// uploads, the first read from the connection in reads of every size (with the
/// refusal known only at its file's opening), the later ones spliced, are stored byte
/// for byte and read back.
#[test]
fn raw_uploads_where_o_direct_is_refused_are_stored_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("drive");
    let ram = match RamFs::mount(&data_dir.join("shards")) {
        Ok(ram) => ram,
        Err(why) => {
            println!(
                "SKIPPED raw_uploads_where_o_direct_is_refused_are_stored_byte_for_byte: {why}"
            );
            return;
        }
    };
    let probe = ram.path.join("probe");
    let refused = rustix::fs::open(
        &probe,
        rustix::fs::OFlags::CREATE | rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::DIRECT,
        rustix::fs::Mode::from_raw_mode(0o600),
    );
    assert_eq!(refused.err(), Some(rustix::io::Errno::INVAL));
    let _ = std::fs::remove_file(&probe);
    let d = Daemon::start(&data_dir, &["direct_io=true"]);
    let c = d.client().with_raw_uploads(true);
    let uploads = [
        ((3 << 20) + 5, 997),
        (3 << 20, 100_003),
        ((5 << 20) + 77, 1 << 20),
        (2_095_040, 65_536),
    ];
    rt().block_on(raw_uploads_read_back(
        &c,
        &data_dir.join("shards"),
        &uploads,
        11,
    ));
}
