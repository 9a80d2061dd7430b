//! Attacks on the peer API by someone on the drives' network (`docs/peer-api.md`,
//! "Threat model"): real requests between a client and one real `oedd` are captured by a
//! relay ([`Tap`]), changed, and sent again. Each test fails against a drive that takes
//! what it should refuse.

use oed_model::drive::{Drive, ErrorCode};
use oed_peer::auth::PeerKey;
use oed_peer::client::PeerClient;
use oed_tests::{
    DRIVE_ID, Daemon, SECRET, Tap, bytes, chunk_bytes, read_shard, record, replaced, resend,
    shard_file, upload,
};

fn rt() -> tokio::runtime::Runtime {
    oed_tests::runtime()
}

/// A shard upload (a client's write: shard file, then record tail) changed on its way to
/// the drive, with another shard file of the same record (every CRC32C right) or another
/// tail, is refused, and the shard stored stays as it was: as a request body, and as a
/// raw upload read into its file. (The upload is captured on its way to a second drive
/// of the cluster, so the drive under attack sees it only as changed, as it would from
/// someone rewriting traffic in passing.)
#[test]
fn a_shard_upload_changed_on_the_way_is_refused_and_stores_nothing() {
    for raw in [false, true] {
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let d = Daemon::start(dirs[0].path(), &[]);
        let elsewhere = Daemon::start(dirs[1].path(), &[]);
        let c = d.client();
        rt().block_on(async {
            c.create_bucket("bkt").await.unwrap();
            elsewhere.client().create_bucket("bkt").await.unwrap();
            let data = bytes(300_000, 1);
            let rec = record("bkt", "k", 1, data.len() as u64, 4, 2, 0);
            let file = shard_file(&rec, &data);
            let tail = br#"{"etag":"aaaa","parts":[]}"#;
            let body = [&file[..], tail].concat();
            c.put_shard(&rec, upload(&body, body.len()), true)
                .await
                .unwrap();

            // Each change is made to an upload of its own: each is taken once.
            let capture = || async {
                let tap = Tap::start(&elsewhere.url).await;
                let through = through(&tap, DRIVE_ID).with_raw_uploads(raw);
                through
                    .put_shard(&rec, upload(&body, body.len()), true)
                    .await
                    .unwrap();
                tap.sent().concat()
            };

            // The same record's shard for other data: a valid shard file, CRC32C and all.
            let other = shard_file(&rec, &bytes(data.len(), 2));
            assert_eq!(other.len(), file.len());
            let answer = resent(&d, &replaced(&capture().await, &file, &other)).await;
            assert!(
                answer.contains("seal does not match"),
                "raw={raw}: {answer}"
            );
            assert_eq!(
                read_shard(&c, "bkt", "k").await,
                chunk_bytes(&file),
                "raw={raw}: the shard stored is the one sent"
            );

            // The tail (etag, parts, checksum, final version id) changed.
            let other = br#"{"etag":"bbbb","parts":[]}"#;
            let answer = resent(&d, &replaced(&capture().await, tail, other)).await;
            assert!(
                answer.contains("seal does not match"),
                "raw={raw}: {answer}"
            );
            assert_eq!(c.stat("bkt", "k").await.unwrap().unwrap().etag, "aaaa");
            assert_eq!(c.info().await.unwrap().auth_failures, 2, "raw={raw}");
        });
    }
}

/// An upload sent unsealed, as versions before the seal send them, is refused unless the
/// drive is set to take them (`legacy_peer_requests`, for a rolling upgrade).
#[test]
fn unsealed_uploads_are_taken_only_with_legacy_peer_requests() {
    for (settings, taken) in [(&[][..], false), (&["legacy_peer_requests=true"][..], true)] {
        let dir = tempfile::tempdir().unwrap();
        let d = Daemon::start(dir.path(), settings);
        let c = d.client();
        rt().block_on(async {
            c.create_bucket("bkt").await.unwrap();
            let data = bytes(50_000, 3);
            let rec = record("bkt", "k", 1, data.len() as u64, 4, 2, 0);
            let file = shard_file(&rec, &data);
            for raw in [false, true] {
                let unsealed = c.clone().with_raw_uploads(raw).with_sealed_uploads(false);
                let got = unsealed.put_shard(&rec, upload(&file, 7_000), false).await;
                if taken {
                    got.unwrap();
                    assert_eq!(read_shard(&c, "bkt", "k").await, chunk_bytes(&file));
                } else {
                    let e = got.unwrap_err();
                    assert_eq!(e.code, ErrorCode::Unauthenticated, "raw={raw}: {e}");
                    assert!(e.message.contains("must be sealed"), "{e}");
                    assert_eq!(c.stat("bkt", "k").await.unwrap(), None);
                }
            }
        });
    }
}

/// A client of drive `id` whose requests go through `tap`.
fn through(tap: &Tap, id: &str) -> PeerClient {
    PeerClient::new(&tap.url, PeerKey::derive(SECRET.as_bytes())).for_drive(id)
}

/// The answer a drive gave to a request sent again, as text.
async fn resent(d: &Daemon, bytes: &[u8]) -> String {
    String::from_utf8_lossy(&resend(&d.url, bytes).await).into_owned()
}

/// Captured shard uploads sent again after the object was deleted are refused, so the
/// object stays deleted (it came back, and heal completed it); the same for a raw upload.
#[test]
fn a_shard_upload_sent_again_does_not_bring_a_deleted_object_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let c = d.client();
    rt().block_on(async {
        c.create_bucket("bkt").await.unwrap();
        for raw in [false, true] {
            let tap = Tap::start(&d.url).await;
            let through = through(&tap, DRIVE_ID).with_raw_uploads(raw);
            let data = bytes(300_000, 5);
            let rec = record("bkt", "gone", 1, data.len() as u64, 4, 2, 0);
            let file = shard_file(&rec, &data);
            through
                .put_shard(&rec, upload(&file, 65_536), false)
                .await
                .unwrap();
            c.delete_object("bkt", "gone", None).await.unwrap();
            let answer = resent(&d, &tap.sent().concat()).await;
            assert!(answer.contains("replayed"), "raw={raw}: {answer}");
            assert_eq!(c.stat("bkt", "gone").await.unwrap(), None, "raw={raw}");
        }
    });
}

/// A captured bucket deletion sent again after the bucket was made again is refused: the
/// bucket stays, and writable (it was left listed but unwritable).
#[test]
fn a_bucket_deletion_sent_again_after_the_bucket_is_made_again_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let c = d.client();
    rt().block_on(async {
        c.create_bucket("again").await.unwrap();
        let tap = Tap::start(&d.url).await;
        let through = through(&tap, DRIVE_ID);
        through.delete_bucket("again").await.unwrap();
        c.create_bucket("again").await.unwrap();
        let answer = resent(&d, &tap.sent().concat()).await;
        assert!(answer.contains("replayed"), "{answer}");
        assert!(c.buckets().await.unwrap().iter().any(|b| b.name == "again"));
        let data = bytes(10_000, 6);
        let rec = record("again", "k", 1, data.len() as u64, 4, 2, 0);
        let file = shard_file(&rec, &data);
        c.put_shard(&rec, upload(&file, 4_096), false)
            .await
            .unwrap();
        assert_eq!(read_shard(&c, "again", "k").await, chunk_bytes(&file));
    });
}

/// A captured maintenance action sent again is refused (it started another scrub pass).
#[test]
fn an_admin_action_sent_again_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    rt().block_on(async {
        let tap = Tap::start(&d.url).await;
        let through = through(&tap, DRIVE_ID);
        let taken: serde_json::Value = through
            .post_json(oed_peer::PeerOp::AdminAction, "do=scrub", &())
            .await
            .unwrap();
        assert_eq!(taken["action"], "scrub");
        let answer = resent(&d, &tap.sent().concat()).await;
        assert!(answer.contains("replayed"), "{answer}");
    });
}

/// A request captured before the drive restarted (which forgets the nonces it took) and
/// sent after is refused: the bucket it made, deleted since, is not made again.
#[test]
fn a_request_from_before_a_restart_is_refused_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let sent = rt().block_on(async {
        let tap = Tap::start(&d.url).await;
        let through = through(&tap, DRIVE_ID);
        through.create_bucket("before").await.unwrap();
        d.client().delete_bucket("before").await.unwrap();
        tap.sent().concat()
    });
    let d = d.restart_at_same_address();
    rt().block_on(async {
        let answer = resent(&d, &sent).await;
        assert!(
            answer.contains("signed before this drive started"),
            "{answer}"
        );
        assert!(d.client().buckets().await.unwrap().is_empty());
    });
}

/// A request captured on its way to one drive and sent to another is refused there: it
/// names the drive it was for (the bucket it made on the first is not made on the second).
#[test]
fn a_request_for_one_drive_is_refused_by_another() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let d = Daemon::start(dirs[0].path(), &[]);
    let other = Daemon::start_as(dirs[1].path(), "other-drive", &[]);
    rt().block_on(async {
        let tap = Tap::start(&other.url).await;
        let through = through(&tap, "other-drive");
        through.create_bucket("elsewhere").await.unwrap();
        let answer = resent(&d, &tap.sent().concat()).await;
        assert!(answer.contains("addressed to another drive"), "{answer}");
        assert!(d.client().buckets().await.unwrap().is_empty());
    });
}

/// The epoch of the sender's cluster map is signed: a request whose `epoch=` was changed
/// on the way is refused (a drive could otherwise be made to refuse every write as from
/// a stale map, or take one from a drive that runs an old map), and changes nothing.
#[test]
fn a_map_epoch_changed_on_the_way_is_refused() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let d = Daemon::start(dirs[0].path(), &[]);
    let elsewhere = Daemon::start(dirs[1].path(), &[]);
    rt().block_on(async {
        let tap = Tap::start(&elsewhere.url).await;
        through(&tap, DRIVE_ID)
            .with_epoch(5)
            .create_bucket("epoch")
            .await
            .unwrap();
        let sent = tap.sent().concat();
        let answer = resent(&d, &replaced(&sent, b"epoch=5", b"epoch=6")).await;
        assert!(answer.contains("401"), "{answer}");
        assert!(d.client().buckets().await.unwrap().is_empty());
        // Unchanged, the same request is taken: the change is what was refused.
        let answer = resent(&d, &sent).await;
        assert!(answer.starts_with("HTTP/1.1 2"), "{answer}");
        assert_eq!(d.client().buckets().await.unwrap().len(), 1);
    });
}
