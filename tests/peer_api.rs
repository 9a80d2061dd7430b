//! The peer API of one real `oedd` on 127.0.0.1: every operation round-trips, and every
//! kind of bad request gets a clear error and changes nothing.

use std::time::Duration;

use oed_daemon::peer::client::PeerClient;
use oed_daemon::store::record::{ObjectRecord, VersionId};
use oed_tests::{Daemon, body, bytes, chunk_bytes, files_under, read_shard, record, shard_file};
use reqwest::{Method, StatusCode};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Also run by deploy/test.sh against the aarch64 and armv7 builds under qemu.
#[test]
fn smoke_put_get_and_clean_stop() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let c = d.client();
    rt().block_on(async {
        c.create_bucket("smoke").await.unwrap();
        let data = bytes(3 * 4 * 4096 + 99, 1);
        let rec = record("smoke", "obj", 7, data.len() as u64, 4, 2, 4);
        let file = shard_file(&rec, &data);
        c.put_shard(&rec, body(&file, 10_000)).await.unwrap();
        let got = read_shard(&c, "smoke", "obj").await;
        assert_eq!(got, chunk_bytes(&file));
    });
    assert!(
        d.terminate(Duration::from_secs(30)),
        "oedd did not stop cleanly on SIGTERM"
    );
}

/// SIGTERM while a shard upload is half sent: the drive stops taking connections, lets
/// the upload finish and acknowledges it, then exits 0; the shard is there after a
/// restart.
#[test]
fn sigterm_drains_the_upload_in_flight_then_stops() {
    use futures_util::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let c = d.client();
    let data = bytes(5 * 2 * 4096 + 321, 9);
    let rec = record("drain", "obj", 3, data.len() as u64, 2, 1, 0);
    let file = shard_file(&rec, &data);
    rt().block_on(async {
        c.create_bucket("drain").await.unwrap();
        let (first, rest) = file.split_at(file.len() / 2);
        let (first, rest) = (
            bytes::Bytes::copy_from_slice(first),
            bytes::Bytes::copy_from_slice(rest),
        );
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let upload = futures_util::stream::once(async move {
            let _ = started_tx.send(());
            Ok(first)
        })
        .chain(futures_util::stream::once(async move {
            let _ = go_rx.await;
            Ok(rest)
        }));
        let (c2, rec2) = (c.clone(), rec.clone());
        let put = tokio::spawn(async move { c2.put_shard(&rec2, upload).await });
        started_rx.await.unwrap();
        // Time for the drive to read the request's head and start on its body.
        tokio::time::sleep(Duration::from_millis(300)).await;
        d.sigterm();
        // The listener closes: a new connection is refused.
        let mut refused = false;
        for _ in 0..100 {
            // A client of its own has no pooled connection to reuse.
            let fresh = d.client();
            if matches!(
                fresh.info().await,
                Err(oed_daemon::peer::client::PeerError::Transport(_))
            ) {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(refused, "the drive still accepts connections after SIGTERM");
        // Long enough for a drive that did not wait for its requests to have flushed and
        // exited by now.
        tokio::time::sleep(Duration::from_secs(1)).await;
        go_tx
            .send(())
            .expect("the drive dropped the upload in flight");
        let stored = tokio::time::timeout(Duration::from_secs(30), put)
            .await
            .expect("the upload finished")
            .unwrap()
            .expect("the upload in flight was acknowledged");
        assert_eq!(stored, rec);
    });
    assert!(
        d.terminate(Duration::from_secs(30)),
        "oedd did not exit 0 after draining"
    );
    let d = d.restart();
    let c = d.client();
    rt().block_on(async {
        assert_eq!(read_shard(&c, "drain", "obj").await, chunk_bytes(&file));
    });
}

#[test]
fn every_operation_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let c = d.client();
    rt().block_on(async {
        assert!(c.buckets().await.unwrap().is_empty());
        c.create_bucket("photos").await.unwrap();
        c.create_bucket("photos").await.unwrap(); // idempotent
        c.create_bucket("logs").await.unwrap();
        let names: Vec<String> = c
            .buckets()
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.name)
            .collect();
        assert_eq!(names, ["logs", "photos"]);

        // A multi-stripe shard file and a small (inline) one.
        let big = bytes(5 * 2 * 4096 + 1234, 2);
        let rec_big = record("photos", "a/b/ünï code", 10, big.len() as u64, 2, 1, 2);
        let file_big = shard_file(&rec_big, &big);
        let stored = c.put_shard(&rec_big, body(&file_big, 3000)).await.unwrap();
        assert_eq!(stored, rec_big);
        let small = b"tiny".to_vec();
        let rec_small = record("photos", "tiny", 11, 4, 2, 1, 0);
        let file_small = shard_file(&rec_small, &small);
        c.put_shard(&rec_small, body(&file_small, 7)).await.unwrap();

        assert_eq!(c.stat("photos", "a/b/ünï code").await.unwrap(), rec_big);
        let whole = c
            .get_shard("photos", "a/b/ünï code", Some(VersionId(10)), None)
            .await
            .unwrap();
        assert_eq!(whole.bytes().await.unwrap(), chunk_bytes(&file_big));
        // Stripes 2..4: two full chunks.
        let part = c
            .get_shard("photos", "a/b/ünï code", None, Some((2, 4)))
            .await
            .unwrap();
        let all = chunk_bytes(&file_big);
        assert_eq!(part.bytes().await.unwrap(), all[2 * 4096..4 * 4096]);
        let tiny = read_shard(&c, "photos", "tiny").await;
        assert_eq!(tiny, chunk_bytes(&file_small));
        // Only the big shard has a file; the tiny one lives in RocksDB.
        assert_eq!(files_under(&dir.path().join("shards")).len(), 1);

        let keys: Vec<String> = c
            .list("photos", "", 10)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(keys, ["a/b/ünï code", "tiny"]);
        let from: Vec<String> = c
            .list("photos", "b", 10)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(from, ["tiny"]);
        assert_eq!(c.list("photos", "", 1).await.unwrap().len(), 1);

        let info = c.info().await.unwrap();
        assert_eq!(
            (
                info.drive_id.as_str(),
                info.shard_count,
                info.health.as_str()
            ),
            ("test-drive", 2, "ok")
        );
        assert!(info.capacity_bytes >= info.free_bytes && info.free_bytes > 0);

        let err = c.delete_bucket("photos").await.unwrap_err();
        assert_eq!(err.code(), Some("BucketNotEmpty"));
        c.delete("photos", "a/b/ünï code", None).await.unwrap();
        c.delete("photos", "tiny", Some(VersionId(11)))
            .await
            .unwrap();
        assert_eq!(
            c.stat("photos", "tiny").await.unwrap_err().code(),
            Some("NotFound")
        );
        assert_eq!(
            c.get_shard("photos", "tiny", None, None)
                .await
                .unwrap_err()
                .code(),
            Some("NotFound")
        );
        assert!(files_under(&dir.path().join("shards")).is_empty());
        c.delete_bucket("photos").await.unwrap();
        assert_eq!(
            c.delete_bucket("photos").await.unwrap_err().code(),
            Some("NotFound")
        );
        assert_eq!(c.info().await.unwrap().shard_count, 0);
    });
}

#[test]
fn newest_version_wins_whatever_the_order() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let c = d.client();
    rt().block_on(async {
        c.create_bucket("b-1").await.unwrap();
        let put = |v: u128, seed: u64| {
            let data = bytes(3 * 4096, seed);
            let rec = record("b-1", "k", v, data.len() as u64, 1, 1, 0);
            let file = shard_file(&rec, &data);
            let c = c.clone();
            async move { c.put_shard(&rec, body(&file, 5000)).await }
        };
        put(5, 5).await.unwrap();
        put(9, 9).await.unwrap();
        assert_eq!(put(7, 7).await.unwrap_err().code(), Some("Superseded"));
        assert_eq!(c.stat("b-1", "k").await.unwrap().version_id, VersionId(9));
        // The replaced and the refused versions left no files behind.
        assert_eq!(files_under(&dir.path().join("shards")).len(), 1);
        assert!(files_under(&dir.path().join("tmp")).is_empty());
        // A delete older than the stored version changes nothing.
        assert_eq!(
            c.delete("b-1", "k", Some(VersionId(8)))
                .await
                .unwrap_err()
                .code(),
            Some("Superseded")
        );
        assert!(c.stat("b-1", "k").await.is_ok());
    });
}

/// A drive holding one good shard, and a check that it is exactly as it was.
struct Fixture {
    dir: tempfile::TempDir,
    d: Daemon,
    data: Vec<u8>,
    rec: ObjectRecord,
    file: Vec<u8>,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = Daemon::start(dir.path(), &["max_shard_bytes=100000"]);
        let data = bytes(2 * 4096 + 5, 3);
        let rec = record("bkt", "good", 1, data.len() as u64, 1, 1, 1);
        let file = shard_file(&rec, &data);
        let c = d.client();
        rt().block_on(async {
            c.create_bucket("bkt").await.unwrap();
            c.put_shard(&rec, body(&file, 4096)).await.unwrap();
        });
        Self {
            dir,
            d,
            data,
            rec,
            file,
        }
    }

    async fn expect_unchanged(&self, c: &PeerClient) {
        assert_eq!(c.stat("bkt", "good").await.unwrap(), self.rec);
        let got = read_shard(c, "bkt", "good").await;
        assert_eq!(got, chunk_bytes(&self.file));
        assert_eq!(c.list("bkt", "", 100).await.unwrap().len(), 1);
        assert!(files_under(&self.dir.path().join("tmp")).is_empty());
    }
}

#[test]
fn bad_authentication_is_refused_counted_and_changes_nothing() {
    let f = Fixture::new();
    let (d, c) = (&f.d, f.d.client());
    rt().block_on(async {
        // Authentication: wrong secret (401), stale timestamp (403), no signature (401),
        // a body that does not match its signed digest (401).
        let wrong = d.client_with_secret("another-secret-0123456789");
        assert_eq!(
            wrong.info().await.unwrap_err().code(),
            Some("Unauthenticated")
        );
        let http = reqwest::Client::new();
        let resp = http
            .get(format!("{}/_oed/peer/v1/info", d.url))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        let path = "/_oed/peer/v1/info";
        let key = oed_daemon::peer::auth::PeerKey::derive(oed_tests::SECRET.as_bytes());
        let empty = oed_daemon::peer::auth::body_digest(b"");
        let old = (oed_daemon::peer::auth::now_secs() - 3600).to_string();
        let sig = key.sign("GET", path, "", &old, &empty);
        let resp = http
            .get(format!("{}{path}", d.url))
            .header("x-oed-date", &old)
            .header("x-oed-content-sha256", &empty)
            .header("authorization", format!("OED1-HMAC-SHA256 {sig}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        let resp = c
            .request(Method::PUT, "bucket", "bucket=other", &empty)
            .body("smuggled")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(c.info().await.unwrap().auth_failures, 4);
        assert_eq!(c.buckets().await.unwrap().len(), 1);

        // Streaming is only for shard uploads.
        let resp = c
            .request(Method::PUT, "bucket", "bucket=other", "STREAMING-CRC32C")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        f.expect_unchanged(&c).await;
    });
}

#[test]
fn bad_requests_get_clear_errors_and_change_nothing() {
    let f = Fixture::new();
    let (c, rec, file, data) = (f.d.client(), &f.rec, &f.file, &f.data);
    rt().block_on(async {
        let empty = oed_daemon::peer::auth::body_digest(b"");

        // Unknown route, bad names, missing bucket.
        let resp = c
            .request(Method::GET, "nothing", "", &empty)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            c.create_bucket("Bad_Name").await.unwrap_err().code(),
            Some("BadRequest")
        );
        let mut r = rec.clone();
        r.bucket = "missing".into();
        assert_eq!(
            c.put_shard(&r, body(file, 100)).await.unwrap_err().code(),
            Some("NotFound")
        );

        // Oversized: the record promises a file over max_shard_bytes.
        let big = record("bkt", "good", 2, 200_000, 1, 1, 1);
        let err = c.put_shard(&big, body(&[0; 10], 10)).await.unwrap_err();
        assert_eq!(err.code(), Some("EntityTooLarge"));

        // A newer version whose body is truncated, corrupt, too long, or for another shard.
        let newer = record("bkt", "good", 3, data.len() as u64, 1, 1, 1);
        let newer_file = shard_file(&newer, data);
        let cut = newer_file[..newer_file.len() - 3].to_vec();
        assert_eq!(
            c.put_shard(&newer, body(&cut, 1000))
                .await
                .unwrap_err()
                .code(),
            Some("IncompleteBody")
        );
        let mut flipped = newer_file.clone();
        flipped[100] ^= 1;
        assert_eq!(
            c.put_shard(&newer, body(&flipped, 1000))
                .await
                .unwrap_err()
                .code(),
            Some("BadDigest")
        );
        let mut longer = newer_file.clone();
        longer.extend_from_slice(b"extra");
        assert_eq!(
            c.put_shard(&newer, body(&longer, 1000))
                .await
                .unwrap_err()
                .code(),
            Some("InvalidShard")
        );
        let other_shard = shard_file(&record("bkt", "good", 3, data.len() as u64, 1, 1, 0), data);
        assert_eq!(
            c.put_shard(&newer, body(&other_shard, 1000))
                .await
                .unwrap_err()
                .code(),
            Some("BadRequest")
        );
        let mut bad_index = newer.clone();
        bad_index.shard_index = 2;
        assert_eq!(
            c.put_shard(&bad_index, body(&newer_file, 1000))
                .await
                .unwrap_err()
                .code(),
            Some("BadRequest")
        );
        f.expect_unchanged(&c).await;
        // The drive still works after all of that.
        c.put_shard(&newer, body(&newer_file, 1000)).await.unwrap();
        assert_eq!(
            c.stat("bkt", "good").await.unwrap().version_id,
            VersionId(3)
        );
    });
}

#[test]
fn malformed_queries_get_bad_request() {
    let f = Fixture::new();
    let c = f.d.client();
    rt().block_on(async {
        let empty = oed_daemon::peer::auth::body_digest(b"");
        for (method, op, query, digest) in [
            (
                Method::PUT,
                "shard",
                "record=%7Bnot-json",
                "STREAMING-CRC32C",
            ),
            (
                Method::GET,
                "shard",
                "bucket=bkt&key=good&version=xyz",
                empty.as_str(),
            ),
            (
                Method::GET,
                "shard",
                "bucket=bkt&key=good&from=2&to=1",
                empty.as_str(),
            ),
            (
                Method::DELETE,
                "object",
                "bucket=bkt&key=good&version=-1",
                empty.as_str(),
            ),
        ] {
            let resp = c
                .request(method.clone(), op, query, digest)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{method} {query}");
        }

        f.expect_unchanged(&c).await;
    });
}
