//! The drive conformance suite: every operation of the `Drive` interface, and every
//! error it names, run alike against both implementations: this drive's store, called in
//! the test's own process, and a real `oedd` on 127.0.0.1 through the peer client. A
//! coordinator holds both kinds side by side and must not be able to tell them apart, so
//! every case checks results, error codes and what is left on disk the same way.

use std::path::PathBuf;
use std::sync::Arc;

use oed_model::config::Config;
use oed_model::drive::{
    Drive, DriveError, ErrorCode, HealEntry, ObjectRef, Relocation, Settlement,
};
use oed_model::heal::HealCause;
use oed_model::record::{ObjectRecord, RecordTail, VersionId};
use oed_store::Store;
use oed_tests::{
    Daemon, bytes, chunk_bytes, files_under, read_shard, record, shard_file, try_read_shard, upload,
};

/// Settings both kinds of drive run with (on top of the defaults they share).
const MAX_SHARD_BYTES: u64 = 100_000;

/// One drive under test and where its data lives.
struct Subject {
    name: &'static str,
    drive: Arc<dyn Drive>,
    dir: PathBuf,
    /// Keeps the remote drive running, and the data directory, for the test's length.
    _keep: (Option<Daemon>, tempfile::TempDir),
}

impl Subject {
    fn local() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().to_owned(),
            drive_id: "test-drive".into(),
            max_shard_bytes: MAX_SHARD_BYTES,
            ..Config::default()
        };
        let traffic =
            oed_meter::traffic::Traffic::new(&prometheus::Registry::new()).expect("counters");
        let store = Store::open(&config, traffic).expect("open the store");
        Self {
            name: "local store",
            drive: Arc::new(store),
            dir: dir.path().to_owned(),
            _keep: (None, dir),
        }
    }

    /// A real drive through the peer client, which sends shard uploads as request bodies
    /// and reads shards as bodies (`Peer::Bodies`), or sends raw uploads spliced into
    /// their files and reads shards as framed reads, which the drive sends from the file
    /// with `sendfile` (`Peer::Sendfile`) or through a buffer (`Peer::Copied`).
    fn remote(peer: Peer) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let sendfile = format!("shard_sendfile={}", peer == Peer::Sendfile);
        let d = Daemon::start(
            dir.path(),
            &[&format!("max_shard_bytes={MAX_SHARD_BYTES}"), &sendfile],
        );
        let framed = peer != Peer::Bodies;
        Self {
            name: match peer {
                Peer::Bodies => "peer client, upload and read bodies",
                Peer::Sendfile => "peer client, raw uploads, framed reads sent with sendfile",
                Peer::Copied => "peer client, raw uploads, framed reads copied",
            },
            drive: Arc::new(
                d.client()
                    .with_raw_uploads(framed)
                    .with_framed_reads(framed),
            ),
            dir: dir.path().to_owned(),
            _keep: (Some(d), dir),
        }
    }

    fn shard_files(&self) -> Vec<PathBuf> {
        files_under(&self.dir.join("shards"))
    }

    fn temp_files(&self) -> Vec<PathBuf> {
        files_under(&self.dir.join("tmp"))
    }
}

/// How a remote subject's client sends and reads shards.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Peer {
    Bodies,
    Sendfile,
    Copied,
}

/// Runs `case` against a local store and a remote drive (shard uploads and reads sent
/// every way the peer API takes them), each fresh.
fn both<F>(case: F)
where
    F: for<'a> Fn(&'a Subject) -> std::pin::Pin<Box<dyn Future<Output = ()> + 'a>>,
{
    let rt = oed_tests::runtime();
    for subject in [
        Subject::local(),
        Subject::remote(Peer::Bodies),
        Subject::remote(Peer::Sendfile),
        Subject::remote(Peer::Copied),
    ] {
        println!("case against the {}", subject.name);
        rt.block_on(case(&subject));
    }
}

#[track_caller]
fn expect_code<T: std::fmt::Debug>(r: Result<T, DriveError>, code: ErrorCode, s: &Subject) {
    match r {
        Err(e) => assert_eq!(e.code, code, "{}: {e}", s.name),
        Ok(v) => panic!("{}: expected {code}, got {v:?}", s.name),
    }
}

fn keys(records: &[ObjectRecord]) -> Vec<&str> {
    records.iter().map(|r| r.key.as_str()).collect()
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one walk through every operation, in order"
)]
fn every_operation_round_trips() {
    both(|s| {
        Box::pin(async move {
            let d = &*s.drive;
            assert!(d.buckets().await.unwrap().is_empty(), "{}", s.name);
            d.create_bucket("photos").await.unwrap();
            d.create_bucket("photos").await.unwrap(); // idempotent
            d.create_bucket("logs").await.unwrap();
            let names: Vec<String> = d
                .buckets()
                .await
                .unwrap()
                .into_iter()
                .map(|b| b.name)
                .collect();
            assert_eq!(names, ["logs", "photos"], "{}", s.name);

            // A multi-stripe shard file and a small (inline) one.
            let big = bytes(5 * 2 * 4096 + 1234, 2);
            let rec_big = record("photos", "a/b/ünï code", 10, big.len() as u64, 2, 1, 2);
            let file_big = shard_file(&rec_big, &big);
            let stored = d
                .put_shard(&rec_big, upload(&file_big, 3000), false)
                .await
                .unwrap();
            assert_eq!(stored.record, rec_big, "{}", s.name);
            assert!(stored.replaced_parts.is_empty());
            let small = b"tiny".to_vec();
            let rec_small = record("photos", "tiny", 11, 4, 2, 1, 0);
            let file_small = shard_file(&rec_small, &small);
            d.put_shard(&rec_small, upload(&file_small, 7), false)
                .await
                .unwrap();

            assert_eq!(
                d.stat("photos", "a/b/ünï code").await.unwrap(),
                Some(rec_big.clone())
            );
            assert_eq!(
                d.stat("photos", "nothing").await.unwrap(),
                None,
                "{}",
                s.name
            );
            let read = d
                .read_shard("photos", "a/b/ünï code", Some(VersionId(10)), None)
                .await
                .unwrap();
            assert_eq!(
                (read.version, read.stripes.clone()),
                (VersionId(10), 0..6),
                "{}",
                s.name
            );
            let all = chunk_bytes(&file_big);
            assert_eq!(read_shard(d, "photos", "a/b/ünï code").await, all);
            // Stripes 2..4: two full chunks; a range past the end is clipped to it.
            let part = try_read_shard(d, "photos", "a/b/ünï code", Some(2..4))
                .await
                .unwrap();
            assert_eq!(part, all[2 * 4096..4 * 4096], "{}", s.name);
            let tail = d
                .read_shard("photos", "a/b/ünï code", None, Some(5..99))
                .await
                .unwrap();
            assert_eq!(tail.stripes, 5..6, "{}", s.name);
            assert_eq!(
                read_shard(d, "photos", "tiny").await,
                chunk_bytes(&file_small)
            );
            // Only the big shard has a file; the tiny one lives in RocksDB.
            assert_eq!(s.shard_files().len(), 1, "{}", s.name);

            let listed = d.list_objects("photos", "", 10).await.unwrap();
            assert_eq!(keys(&listed), ["a/b/ünï code", "tiny"], "{}", s.name);
            let from = d.list_objects("photos", "b", 10).await.unwrap();
            assert_eq!(keys(&from), ["tiny"], "{}", s.name);
            assert_eq!(d.list_objects("photos", "", 1).await.unwrap().len(), 1);
            assert!(d.list_objects("logs", "", 10).await.unwrap().is_empty());

            let info = d.info().await.unwrap();
            assert_eq!(
                (
                    info.drive_id.as_str(),
                    info.shard_count,
                    info.health.as_str(),
                    info.heal_backlog
                ),
                ("test-drive", 2, "ok", 0),
                "{}",
                s.name
            );
            assert!(info.capacity_bytes >= info.free_bytes && info.free_bytes > 0);
            assert_eq!(info.version, env!("CARGO_PKG_VERSION"));

            expect_code(
                d.delete_bucket("photos").await,
                ErrorCode::BucketNotEmpty,
                s,
            );
            d.delete_object("photos", "a/b/ünï code", None)
                .await
                .unwrap();
            d.delete_object("photos", "tiny", Some(VersionId(11)))
                .await
                .unwrap();
            assert_eq!(d.stat("photos", "tiny").await.unwrap(), None);
            expect_code(
                d.read_shard("photos", "tiny", None, None).await.map(|_| ()),
                ErrorCode::NotFound,
                s,
            );
            expect_code(
                d.delete_object("photos", "tiny", None).await,
                ErrorCode::NotFound,
                s,
            );
            assert!(s.shard_files().is_empty(), "{}", s.name);
            d.delete_bucket("photos").await.unwrap();
            expect_code(d.delete_bucket("photos").await, ErrorCode::NotFound, s);
            expect_code(
                d.list_objects("photos", "", 10).await,
                ErrorCode::NotFound,
                s,
            );
            assert_eq!(d.info().await.unwrap().shard_count, 0);
        })
    });
}

#[test]
fn the_newest_version_wins_whatever_the_order() {
    both(|s| {
        Box::pin(async move {
            let d = &*s.drive;
            d.create_bucket("b-1").await.unwrap();
            let put = |v: u128, seed: u64| {
                let data = bytes(3 * 4096, seed);
                let rec = record("b-1", "k", v, data.len() as u64, 1, 1, 0);
                let file = shard_file(&rec, &data);
                async move { d.put_shard(&rec, upload(&file, 5000), false).await }
            };
            put(5, 5).await.unwrap();
            put(9, 9).await.unwrap();
            expect_code(put(7, 7).await, ErrorCode::Superseded, s);
            assert_eq!(
                d.stat("b-1", "k").await.unwrap().unwrap().version_id,
                VersionId(9)
            );
            // Reading a version that is not the stored one finds nothing.
            let old = d.read_shard("b-1", "k", Some(VersionId(5)), None).await;
            expect_code(old.map(|_| ()), ErrorCode::NotFound, s);
            // The replaced and the refused versions left no files behind.
            assert_eq!(s.shard_files().len(), 1, "{}", s.name);
            assert!(s.temp_files().is_empty(), "{}", s.name);
            // A delete older than the stored version changes nothing.
            expect_code(
                d.delete_object("b-1", "k", Some(VersionId(8))).await,
                ErrorCode::Superseded,
                s,
            );
            assert!(d.stat("b-1", "k").await.unwrap().is_some());
        })
    });
}

/// A client's write (a shard upload with a record tail) whose version id was made further
/// ahead of the drive's clock than `clock_skew_seconds` (no coordinator whose requests it
/// takes can have made it) is refused, whether the record or the tail names it, and
/// stores nothing; one inside the window is taken. A copy of a stored version (no tail:
/// heal, drain, refill) moves whatever its id.
#[test]
fn a_version_made_far_ahead_of_the_drives_clock_is_refused() {
    both(|s| {
        Box::pin(async move {
            let d = &*s.drive;
            d.create_bucket("ahead").await.unwrap();
            let now_ms = u128::from(oed_peer::auth::now_secs()) * 1000;
            let at = |ms: u128| (ms << 64) | 7;
            let ten_years = at(now_ms + 10 * 365 * 86_400_000);
            let data = bytes(2 * 4096, 3);
            let tail = |v: u128| {
                serde_json::to_vec(&RecordTail {
                    etag: "e".into(),
                    version_id: Some(VersionId(v)),
                    ..RecordTail::default()
                })
                .unwrap()
            };
            let ahead = record("ahead", "k", ten_years, data.len() as u64, 1, 1, 0);
            let mut file = shard_file(&ahead, &data);
            file.extend(tail(ten_years));
            expect_code(
                d.put_shard(&ahead, upload(&file, 5000), true).await,
                ErrorCode::BadRequest,
                s,
            );
            // Begun with a version of now, ended with one far ahead in its tail.
            let begun = record("ahead", "k", at(now_ms), data.len() as u64, 1, 1, 0);
            let mut with_tail = shard_file(&begun, &data);
            with_tail.extend(tail(ten_years));
            expect_code(
                d.put_shard(&begun, upload(&with_tail, 5000), true).await,
                ErrorCode::BadRequest,
                s,
            );
            assert!(d.stat("ahead", "k").await.unwrap().is_none(), "{}", s.name);
            assert!(s.shard_files().is_empty(), "{}", s.name);
            assert!(s.temp_files().is_empty(), "{}", s.name);
            // A minute ahead is inside the window (300 s by default): taken.
            let minute = record(
                "ahead",
                "k",
                at(now_ms + 60_000),
                data.len() as u64,
                1,
                1,
                0,
            );
            let mut file = shard_file(&minute, &data);
            file.extend(tail(at(now_ms + 60_000)));
            d.put_shard(&minute, upload(&file, 5000), true)
                .await
                .unwrap();
            // A copy of a version stored long ago far ahead (heal, drain) moves.
            let copy = record("ahead", "copied", ten_years, data.len() as u64, 1, 1, 0);
            let file = shard_file(&copy, &data);
            d.put_shard(&copy, upload(&file, 5000), false)
                .await
                .unwrap();
        })
    });
}

/// The operations repair work uses: heal entries queued (and merged), versions asked
/// for in a batch, and the records that place a shard on a drive, paged.
#[test]
fn repair_operations_answer_alike() {
    both(|s| {
        Box::pin(async move {
            let d = &*s.drive;
            d.create_bucket("rep").await.unwrap();
            for (i, key) in ["a", "b", "c"].iter().enumerate() {
                let data = bytes(2 * 4096, i as u64);
                let mut rec = record("rep", key, 10 + i as u128, data.len() as u64, 1, 1, 0);
                rec.drives = if *key == "b" {
                    vec!["x".into(), "y".into()]
                } else {
                    vec!["test-drive".into(), "other".into()]
                };
                let file = shard_file(&rec, &data);
                d.put_shard(&rec, upload(&file, 3000), false).await.unwrap();
            }
            let refs: Vec<ObjectRef> = ["a", "zz", "c"]
                .iter()
                .map(|k| ObjectRef {
                    bucket: "rep".into(),
                    key: (*k).into(),
                })
                .collect();
            let v = d.versions(&refs).await.unwrap();
            assert_eq!(
                v,
                [Some(VersionId(10)), None, Some(VersionId(12))],
                "{}",
                s.name
            );
            let too_many = vec![refs[0].clone(); 1001];
            expect_code(d.versions(&too_many).await, ErrorCode::BadRequest, s);

            // Records placing a shard on "other", one at a time.
            let mut after = None;
            let mut found = Vec::new();
            for _ in 0..10 {
                let page = d.records_for("other", after.as_ref(), 1).await.unwrap();
                found.extend(page.records.into_iter().map(|r| r.key));
                after = page.next;
                if after.is_none() {
                    break;
                }
            }
            assert_eq!(found, ["a", "c"], "{}", s.name);

            let rec = d.stat("rep", "a").await.unwrap().unwrap();
            let e = HealEntry::of(&rec, 1, HealCause::Missing, 0, "test-drive");
            assert_eq!(e.drive, "other");
            assert_eq!(
                d.queue_heals(std::slice::from_ref(&e)).await.unwrap(),
                1,
                "{}",
                s.name
            );
            assert_eq!(d.queue_heals(&[e]).await.unwrap(), 0, "merged: {}", s.name);
            let mut bad = HealEntry::of(&rec, 1, HealCause::Missing, 0, "test-drive");
            bad.bucket = "No Such Name".into();
            expect_code(d.queue_heals(&[bad]).await, ErrorCode::BadRequest, s);
            assert_eq!(d.info().await.unwrap().heal_backlog, 1, "{}", s.name);
            assert_eq!(d.info().await.unwrap().incarnation.len(), 16, "{}", s.name);
        })
    });
}

/// A moved shard's old drive is replaced in the records that name it (the object's own,
/// at that version only, and its entry in the parts of the object a part belongs to);
/// a second time changes nothing, a record of another version is left alone.
#[test]
fn relocations_update_the_records_that_name_the_old_drive() {
    both(|s| {
        Box::pin(async move {
            let d = &*s.drive;
            d.create_bucket("moves").await.unwrap();
            let data = bytes(4096, 1);
            let mut part = record("moves", "\u{1}p/up/00001", 7, data.len() as u64, 1, 1, 0);
            part.drives = vec!["test-drive".into(), "old".into()];
            part.parent = Some("whole".into());
            d.put_shard(&part, upload(&shard_file(&part, &data), 4096), false)
                .await
                .unwrap();
            let mut whole = record("moves", "whole", 8, 0, 1, 1, 0);
            whole.drives = vec!["test-drive".into(), "old".into()];
            whole.parts = vec![oed_model::record::PartRef::of(1, &part)];
            d.put_shard(&whole, upload(&shard_file(&whole, &[]), 4096), false)
                .await
                .unwrap();
            let mv = |key: &str, version: u128, parent: Option<&str>| Relocation {
                bucket: "moves".into(),
                key: key.into(),
                version_id: VersionId(version),
                shard_index: 1,
                from: "old".into(),
                to: "new".into(),
                parent: parent.map(str::to_owned),
            };
            let moves = [
                mv("\u{1}p/up/00001", 7, Some("whole")),
                mv("whole", 9, None),
                mv("absent", 1, None),
            ];
            assert_eq!(
                d.relocate(&moves).await.unwrap(),
                [true, false, false],
                "{}",
                s.name
            );
            let got = d.stat("moves", "\u{1}p/up/00001").await.unwrap().unwrap();
            assert_eq!(got.drives, ["test-drive", "new"], "{}", s.name);
            let got = d.stat("moves", "whole").await.unwrap().unwrap();
            assert_eq!(
                got.drives,
                ["test-drive", "old"],
                "another version: {}",
                s.name
            );
            assert_eq!(got.parts[0].drives, ["test-drive", "new"], "{}", s.name);
            // Again: nothing changes, and it still says the records name the new drive.
            assert_eq!(d.relocate(&moves[..1]).await.unwrap(), [true], "{}", s.name);
            let too_many = vec![moves[2].clone(); 1001];
            expect_code(d.relocate(&too_many).await, ErrorCode::BadRequest, s);
        })
    });
}

/// A client write (a shard upload with a record tail) keeps the version it replaces
/// until it is settled: put back when the write failed, dropped when it was stored. The
/// tail's version id replaces the one the upload began with, in the shard's header too.
#[test]
fn client_writes_keep_what_they_replace_until_settled() {
    both(|s| {
        Box::pin(async move {
            let d = &*s.drive;
            d.create_bucket("keep").await.unwrap();
            // (version the upload begins with, final version, length, seed)
            let put = |first: u128, last: u128, len: usize, key: &'static str| {
                let data = bytes(len, u64::try_from(last).unwrap());
                let rec = record("keep", key, first, data.len() as u64, 1, 1, 0);
                let mut file = shard_file(&rec, &data);
                file.extend(
                    serde_json::to_vec(&RecordTail {
                        etag: format!("e{last}"),
                        version_id: Some(VersionId(last)),
                        ..RecordTail::default()
                    })
                    .unwrap(),
                );
                async move {
                    let stored = d.put_shard(&rec, upload(&file, 5000), true).await;
                    (stored.unwrap(), data)
                }
            };
            let settle = |key: &'static str, v: u128, stored: bool| async move {
                d.settle(&[Settlement {
                    bucket: "keep".into(),
                    key: key.into(),
                    version_id: VersionId(v),
                    stored,
                }])
                .await
                .unwrap()
            };
            for (key, len, files) in [("file", 3 * 4096, 1), ("inline", 100, 0)] {
                let (first, data5) = put(4, 5, len, key).await;
                assert!(!first.kept && first.record.version_id == VersionId(5));
                let (second, _) = put(8, 9, len, key).await;
                assert!(second.kept, "{}", s.name);
                assert_eq!(s.shard_files().len(), 2 * files, "{}: kept", s.name);
                // The write failed: the version it replaced is back, bytes and all.
                assert_eq!(settle(key, 9, false).await, [true], "{}", s.name);
                let back = d.stat("keep", key).await.unwrap().unwrap();
                assert_eq!((back.version_id, back.etag.as_str()), (VersionId(5), "e5"));
                assert_eq!(
                    read_shard(d, "keep", key).await,
                    chunk_bytes(&shard_file(&back, &data5))
                );
                assert_eq!(s.shard_files().len(), files, "{}", s.name);
                // The next one was stored: what it replaced goes.
                let (third, data12) = put(10, 12, len, key).await;
                assert!(third.kept && third.record.version_id == VersionId(12));
                assert_eq!(settle(key, 12, true).await, [true], "{}", s.name);
                assert_eq!(settle(key, 12, true).await, [false], "{}: again", s.name);
                let now = d.stat("keep", key).await.unwrap().unwrap();
                assert_eq!(now.version_id, VersionId(12));
                assert_eq!(
                    read_shard(d, "keep", key).await,
                    chunk_bytes(&shard_file(&now, &data12))
                );
                assert_eq!(s.shard_files().len(), files, "{}", s.name);
                // Nothing kept, or a version that is not here: nothing changes.
                assert_eq!(settle(key, 12, false).await[..], [true], "{}", s.name);
                assert!(d.stat("keep", key).await.unwrap().is_none(), "{}", s.name);
                assert_eq!(settle(key, 3, false).await, [false], "{}", s.name);
                assert!(s.shard_files().is_empty(), "{}", s.name);
            }
            let too_many = vec![
                Settlement {
                    bucket: "keep".into(),
                    key: "k".into(),
                    version_id: VersionId(1),
                    stored: true,
                };
                1001
            ];
            expect_code(d.settle(&too_many).await, ErrorCode::BadRequest, s);
        })
    });
}

/// In a bucket with versioning, a client write keeps the version it replaces under that
/// version's key (readable there, file and all), a failed write gives it back, and
/// `promote` makes the newest noncurrent version current again once the current one is
/// deleted, only where the key has no current version.
#[test]
fn versioned_writes_keep_what_they_replace_and_promote_brings_it_back() {
    use oed_model::record::version_key;
    both(|s| {
        Box::pin(async move {
            let d = &*s.drive;
            d.create_bucket("vers").await.unwrap();
            let put = |v: u128, len: usize, key: &'static str| {
                let data = bytes(len, u64::try_from(v).unwrap());
                let mut rec = record("vers", key, v, data.len() as u64, 1, 1, 0);
                rec.versioned = true;
                let mut file = shard_file(&rec, &data);
                file.extend(serde_json::to_vec(&RecordTail::default()).unwrap());
                async move {
                    let stored = d.put_shard(&rec, upload(&file, 5000), true).await;
                    (stored.unwrap(), data)
                }
            };
            let settle = |key: &'static str, v: u128, stored: bool| async move {
                d.settle(&[Settlement {
                    bucket: "vers".into(),
                    key: key.into(),
                    version_id: VersionId(v),
                    stored,
                }])
                .await
                .unwrap()
            };
            for (key, len) in [("file", 3 * 4096), ("inline", 100)] {
                let (_, data3) = put(3, len, key).await;
                let (second, _) = put(4, len, key).await;
                assert!(second.kept, "{}", s.name);
                assert_eq!(settle(key, 4, true).await, [true], "{}", s.name);
                let old = d
                    .stat("vers", &version_key(key, VersionId(3)))
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(old.version_id, VersionId(3), "{}", s.name);
                assert_eq!(
                    read_shard(d, "vers", &old.key).await,
                    chunk_bytes(&shard_file(&old, &data3)),
                    "{}",
                    s.name
                );
                // A failed write: version 4 is current again, and not kept as well.
                put(5, len, key).await;
                assert_eq!(settle(key, 5, false).await, [true], "{}", s.name);
                assert_eq!(
                    d.stat("vers", key).await.unwrap().unwrap().version_id,
                    VersionId(4)
                );
                let four = version_key(key, VersionId(4));
                assert!(d.stat("vers", &four).await.unwrap().is_none(), "{}", s.name);
                // Only where the key has no current version.
                assert_eq!(d.promote("vers", key).await.unwrap(), None, "{}", s.name);
                d.delete_object("vers", key, Some(VersionId(4)))
                    .await
                    .unwrap();
                assert_eq!(
                    d.promote("vers", key).await.unwrap(),
                    Some(VersionId(3)),
                    "{}",
                    s.name
                );
                let back = d.stat("vers", key).await.unwrap().unwrap();
                assert_eq!(back.version_id, VersionId(3));
                assert_eq!(
                    read_shard(d, "vers", key).await,
                    chunk_bytes(&shard_file(&back, &data3)),
                    "{}",
                    s.name
                );
                assert_eq!(d.promote("vers", key).await.unwrap(), None, "{}", s.name);
            }
        })
    });
}

#[test]
fn amendments_change_one_version_and_the_later_one_stays() {
    use oed_model::drive::{Amendment, Change};
    both(|s| {
        Box::pin(async move {
            let d = &*s.drive;
            d.create_bucket("tags").await.unwrap();
            for (key, len) in [("file", 3 * 4096), ("inline", 100)] {
                let data = bytes(len, 7);
                let rec = record("tags", key, 5, data.len() as u64, 1, 1, 0);
                let mut file = shard_file(&rec, &data);
                file.extend(serde_json::to_vec(&RecordTail::default()).unwrap());
                d.put_shard(&rec, upload(&file, 5000), true).await.unwrap();
                let tags = |v: &str| Change::Tags([("t".to_owned(), v.to_owned())].into());
                let amend = |version: u128, at: u128, v: &str| Amendment {
                    bucket: "tags".into(),
                    key: key.into(),
                    version_id: VersionId(version),
                    at: VersionId(at),
                    change: tags(v),
                };
                // The later change stays, whichever comes first; another version is
                // not there to change.
                let got = d
                    .amend(&[
                        amend(5, 20, "late"),
                        amend(5, 10, "early"),
                        amend(4, 30, "x"),
                    ])
                    .await
                    .unwrap();
                assert_eq!(got, [true, true, false], "{}", s.name);
                let now = d.stat("tags", key).await.unwrap().unwrap();
                assert_eq!(now.tags["t"], "late", "{}", s.name);
                assert_eq!(now.tags_changed, VersionId(20), "{}", s.name);
                // The version and its data stay as they were.
                assert_eq!(now.version_id, VersionId(5), "{}", s.name);
                assert_eq!(
                    read_shard(d, "tags", key).await,
                    chunk_bytes(&shard_file(&rec, &data)),
                    "{}",
                    s.name
                );
                let too_many = vec![amend(5, 40, "y"); oed_model::drive::MAX_BATCH + 1];
                expect_code(d.amend(&too_many).await, ErrorCode::BadRequest, s);
                assert_eq!(
                    d.stat("tags", key).await.unwrap().unwrap().tags["t"],
                    "late"
                );
            }
        })
    });
}

/// A drive holding one good shard, and the check that it is exactly as it was.
async fn one_good_shard(d: &dyn Drive) -> (ObjectRecord, Vec<u8>, Vec<u8>) {
    let data = bytes(2 * 4096 + 5, 3);
    let rec = record("bkt", "good", 1, data.len() as u64, 1, 1, 1);
    let file = shard_file(&rec, &data);
    d.create_bucket("bkt").await.unwrap();
    d.put_shard(&rec, upload(&file, 4096), false).await.unwrap();
    (rec, file, data)
}

async fn expect_unchanged(s: &Subject, rec: &ObjectRecord, file: &[u8]) {
    let d = &*s.drive;
    assert_eq!(
        d.stat("bkt", "good").await.unwrap().as_ref(),
        Some(rec),
        "{}",
        s.name
    );
    assert_eq!(
        read_shard(d, "bkt", "good").await,
        chunk_bytes(file),
        "{}",
        s.name
    );
    assert_eq!(d.list_objects("bkt", "", 100).await.unwrap().len(), 1);
    assert!(s.temp_files().is_empty(), "{}", s.name);
}

#[test]
fn bad_requests_get_the_same_errors_and_change_nothing() {
    both(|s| {
        Box::pin(async move {
            let d = &*s.drive;
            let (rec, file, data) = one_good_shard(d).await;
            expect_code(d.create_bucket("Bad_Name").await, ErrorCode::BadRequest, s);
            let mut r = rec.clone();
            r.bucket = "missing".into();
            expect_code(
                d.put_shard(&r, upload(&file, 100), false).await,
                ErrorCode::NotFound,
                s,
            );

            // Oversized: the record promises a file over max_shard_bytes.
            let big = record("bkt", "good", 2, 200_000, 1, 1, 1);
            expect_code(
                d.put_shard(&big, upload(&[0; 10], 10), false).await,
                ErrorCode::EntityTooLarge,
                s,
            );

            // A newer version whose body is truncated, corrupt, too long, for another shard,
            // or without the record tail it was announced with.
            let newer = record("bkt", "good", 3, data.len() as u64, 1, 1, 1);
            let newer_file = shard_file(&newer, &data);
            let cut = &newer_file[..newer_file.len() - 3];
            expect_code(
                d.put_shard(&newer, upload(cut, 1000), false).await,
                ErrorCode::IncompleteBody,
                s,
            );
            let mut flipped = newer_file.clone();
            flipped[100] ^= 1;
            expect_code(
                d.put_shard(&newer, upload(&flipped, 1000), false).await,
                ErrorCode::BadDigest,
                s,
            );
            let mut longer = newer_file.clone();
            longer.extend_from_slice(b"extra");
            expect_code(
                d.put_shard(&newer, upload(&longer, 1000), false).await,
                ErrorCode::InvalidShard,
                s,
            );
            let other = shard_file(&record("bkt", "good", 3, data.len() as u64, 1, 1, 0), &data);
            expect_code(
                d.put_shard(&newer, upload(&other, 1000), false).await,
                ErrorCode::BadRequest,
                s,
            );
            let mut bad_index = newer.clone();
            bad_index.shard_index = 2;
            expect_code(
                d.put_shard(&bad_index, upload(&newer_file, 1000), false)
                    .await,
                ErrorCode::BadRequest,
                s,
            );
            expect_code(
                d.put_shard(&newer, upload(&newer_file, 1000), true).await,
                ErrorCode::BadRequest,
                s,
            );
            // A reversed stripe range, and one that starts past the shard's end.
            #[allow(
                clippy::reversed_empty_ranges,
                reason = "the reversed range is the bad input"
            )]
            let reversed = d.read_shard("bkt", "good", None, Some(2..1)).await;
            expect_code(reversed.map(|_| ()), ErrorCode::BadRequest, s);
            let past = d.read_shard("bkt", "good", None, Some(9..12)).await;
            expect_code(past.map(|_| ()), ErrorCode::BadRequest, s);
            expect_unchanged(s, &rec, &file).await;

            // The drive still works after all of that, and a record tail completes a record.
            let tail = br#"{"etag":"abc","parts":[]}"#;
            let with_tail = [newer_file.as_slice(), tail].concat();
            let stored = d
                .put_shard(&newer, upload(&with_tail, 1000), true)
                .await
                .unwrap();
            assert_eq!(
                (stored.record.version_id, stored.record.etag.as_str()),
                (VersionId(3), "abc")
            );
            assert_eq!(
                d.stat("bkt", "good").await.unwrap().unwrap().etag,
                "abc",
                "{}",
                s.name
            );
        })
    });
}

/// Stores "victim", 4 stripes of 4096 bytes, in a new `bucket`; returns its data and file.
async fn victim(s: &Subject, bucket: &str, seed: u64) -> (Vec<u8>, PathBuf) {
    let d = &*s.drive;
    d.create_bucket(bucket).await.unwrap();
    let data = bytes(4 * 4096, seed);
    let rec = record(bucket, "victim", 1, data.len() as u64, 1, 1, 0);
    let file = shard_file(&rec, &data);
    d.put_shard(&rec, upload(&file, 4096), false).await.unwrap();
    let mut shards = s.shard_files();
    assert_eq!(shards.len(), 1, "{}", s.name);
    assert_eq!(std::fs::read(&shards[0]).unwrap(), file);
    (data, shards.remove(0))
}

/// Reading from stripe `bad` on is refused, naming it, and the stripes before it are
/// served; the shard is queued for heal.
async fn expect_corrupt_from(s: &Subject, bucket: &str, bad: u64, data: &[u8]) {
    let d = &*s.drive;
    let err = d
        .read_shard(bucket, "victim", None, Some(bad..4))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::CorruptShard, "{}: {err}", s.name);
    assert!(
        err.message.contains(&format!("stripe {bad}")),
        "{}: {err}",
        s.name
    );
    let good = try_read_shard(d, bucket, "victim", Some(0..bad))
        .await
        .unwrap();
    assert_eq!(good, data[..bad as usize * 4096], "{}", s.name);
    // The whole shard: the stripes before the bad one may come, then the stream breaks
    // instead of carrying bad bytes (over HTTP the break may come before the answer's
    // head, which is a refusal too).
    match try_read_shard(d, bucket, "victim", None).await {
        Ok(_) => panic!("{}: a corrupt shard was delivered whole", s.name),
        Err(e) => assert!(
            matches!(e.code, ErrorCode::CorruptShard | ErrorCode::Unreachable),
            "{}: {e}",
            s.name
        ),
    }
    assert!(d.info().await.unwrap().heal_backlog >= 1, "{}", s.name);
}

#[test]
fn a_byte_flipped_on_disk_is_reported_never_served() {
    both(|s| {
        Box::pin(async move {
            let (data, path) = victim(s, "rot", 4).await;
            let mut on_disk = std::fs::read(&path).unwrap();
            // Flip one byte inside stripe 2's chunk.
            on_disk[64 + 2 * (4096 + 4) + 777] ^= 0x20;
            std::fs::write(&path, &on_disk).unwrap();
            expect_corrupt_from(s, "rot", 2, &data).await;
        })
    });
}

#[test]
fn a_shard_cut_short_on_disk_is_reported_never_served() {
    both(|s| {
        Box::pin(async move {
            let (data, path) = victim(s, "cut", 5).await;
            // The file ends 1000 bytes into stripe 3's chunk.
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.set_len(64 + 3 * (4096 + 4) + 1000).unwrap();
            drop(f);
            expect_corrupt_from(s, "cut", 3, &data).await;
        })
    });
}

#[test]
fn operations_fold_the_chunks_a_drive_holds() {
    use oed_model::drive::OpRequest;
    use oed_ops::op::{Op, Partial, Plan};
    both(|s| {
        Box::pin(async move {
            let d = &*s.drive;
            d.create_bucket("ops").await.unwrap();
            // Data shard 1 of a 2+1 object of 5 stripes and a short one: chunks of 4096
            // bytes at object offsets 4096, 12288, ..., then the last stripe's.
            let data = bytes(5 * 2 * 4096 + 3000, 8);
            let rec = record("ops", "obj", 3, data.len() as u64, 2, 1, 1);
            d.put_shard(&rec, upload(&shard_file(&rec, &data), 5000), false)
                .await
                .unwrap();
            let op: Op = serde_json::from_str(r#"{"op":"checksum","algorithm":"crc32c"}"#).unwrap();
            let plan = Plan::new(op, data.len() as u64, 4096).unwrap();
            let req = OpRequest {
                bucket: "ops".into(),
                key: "obj".into(),
                version: VersionId(3),
                base: 0,
                plan: plan.clone(),
                stripes: None,
            };
            let a = d.run_op(&req).await.unwrap();
            assert_eq!((a.shard, a.stripes_done), (1, 6), "{}", s.name);
            assert_eq!(a.partials.len(), 6);
            // Each partial is the CRC of exactly that chunk's object bytes.
            let layout = rec.layout().unwrap();
            for p in &a.partials {
                let st = layout.stripe(rec.size, p.stripe).unwrap();
                let r = st.chunk_range(1);
                let at = (st.object_offset + r.start as u64) as usize;
                let want = crc32c::crc32c(&data[at..at + r.len()]);
                assert_eq!(
                    p.partial,
                    Partial::Crc(oed_ops::checksum::CrcPartial {
                        crc: u64::from(want),
                        len: r.len() as u64
                    }),
                    "{}",
                    s.name
                );
            }
            assert!(a.bytes_read >= 5 * 4096);
            // Some stripes only, a version not stored, stripes past the end.
            let some = d
                .run_op(&OpRequest {
                    stripes: Some(2..4),
                    ..req.clone()
                })
                .await
                .unwrap();
            assert_eq!((some.stripes_done, some.partials[0].stripe), (2, 2));
            expect_code(
                d.run_op(&OpRequest {
                    version: VersionId(4),
                    ..req.clone()
                })
                .await,
                ErrorCode::NotFound,
                s,
            );
            expect_code(
                d.run_op(&OpRequest {
                    stripes: Some(3..9),
                    ..req.clone()
                })
                .await,
                ErrorCode::BadRequest,
                s,
            );
            // A parity shard is no place for an operation.
            let parity = record("ops", "par", 1, data.len() as u64, 2, 1, 2);
            d.put_shard(&parity, upload(&shard_file(&parity, &data), 5000), false)
                .await
                .unwrap();
            let req_parity = OpRequest {
                key: "par".into(),
                version: VersionId(1),
                ..req.clone()
            };
            expect_code(d.run_op(&req_parity).await, ErrorCode::BadRequest, s);
            // A flipped byte in stripe 3: the fold stops there and says so.
            let file = s
                .shard_files()
                .into_iter()
                .find(|f| std::fs::read(f).unwrap() == shard_file(&rec, &data))
                .unwrap();
            let mut on_disk = std::fs::read(&file).unwrap();
            on_disk[64 + 3 * (4096 + 4) + 9] ^= 4;
            std::fs::write(&file, &on_disk).unwrap();
            let cut = d.run_op(&req).await.unwrap();
            assert_eq!((cut.stripes_done, cut.partials.len()), (3, 3), "{}", s.name);
            assert!(d.info().await.unwrap().heal_backlog >= 1);
        })
    });
}
