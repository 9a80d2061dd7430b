//! The peer API of one real `oedd` on 127.0.0.1, as HTTP: the smoke test the ARM builds
//! run, a graceful stop with an upload in flight, raw uploads (large ones, abandoned
//! ones), and requests that no `Drive` call makes (bad signatures, malformed queries,
//! unknown routes) refused with a clear error and changing nothing. Every operation and
//! its errors are in `drive_conformance.rs`.

use std::time::Duration;

use oed_model::drive::{Drive, ErrorCode};
use oed_model::record::ObjectRecord;
use oed_peer::PeerOp;
use oed_peer::client::PeerClient;
use oed_tests::{
    Daemon, bytes, chunk_bytes, files_under, raw_uploads_read_back, read_shard, record, shard_file,
    upload,
};
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
        c.put_shard(&rec, upload(&file, 10_000), false)
            .await
            .unwrap();
        let got = read_shard(&c, "smoke", "obj").await;
        assert_eq!(got, chunk_bytes(&file));
        // The same as a raw upload, spliced into its file by the drive.
        let rec = record("smoke", "raw", 7, data.len() as u64, 4, 2, 4);
        let file = shard_file(&rec, &data);
        let raw = c.clone().with_raw_uploads(true);
        raw.put_shard(&rec, upload(&file, 10_000), false)
            .await
            .unwrap();
        assert_eq!(read_shard(&c, "smoke", "raw").await, chunk_bytes(&file));
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
    sigterm_drains_the_upload_in_flight(false);
}

/// The same with the upload sent as a raw upload: the drive's shutdown waits for the
/// connection it was upgraded to.
#[test]
fn sigterm_drains_the_raw_upload_in_flight_then_stops() {
    sigterm_drains_the_upload_in_flight(true);
}

fn sigterm_drains_the_upload_in_flight(raw: bool) {
    use futures_util::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), &[]);
    let c = d.client().with_raw_uploads(raw);
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
        let put = tokio::spawn(async move { c2.put_shard(&rec2, Box::pin(upload), false).await });
        started_rx.await.unwrap();
        // Time for the drive to read the request's head and start on its body.
        tokio::time::sleep(Duration::from_millis(300)).await;
        d.sigterm();
        // The listener closes: a new connection is refused.
        let mut refused = false;
        for _ in 0..100 {
            // A client of its own has no pooled connection to reuse.
            let fresh = d.client();
            if fresh
                .info()
                .await
                .is_err_and(|e| e.code == ErrorCode::Unreachable)
            {
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
        assert_eq!(stored.record, rec);
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

/// A drive holding one good shard, and a check that it is exactly as it was.
struct Fixture {
    dir: tempfile::TempDir,
    d: Daemon,
    rec: ObjectRecord,
    file: Vec<u8>,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = Daemon::start(dir.path(), &[]);
        let data = bytes(2 * 4096 + 5, 3);
        let rec = record("bkt", "good", 1, data.len() as u64, 1, 1, 1);
        let file = shard_file(&rec, &data);
        let c = d.client();
        rt().block_on(async {
            c.create_bucket("bkt").await.unwrap();
            c.put_shard(&rec, upload(&file, 4096), false).await.unwrap();
        });
        Self { dir, d, rec, file }
    }

    async fn expect_unchanged(&self, c: &PeerClient) {
        assert_eq!(
            c.stat("bkt", "good").await.unwrap().as_ref(),
            Some(&self.rec)
        );
        let got = read_shard(c, "bkt", "good").await;
        assert_eq!(got, chunk_bytes(&self.file));
        assert_eq!(c.list_objects("bkt", "", 100).await.unwrap().len(), 1);
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
            wrong.info().await.unwrap_err().code,
            ErrorCode::Unauthenticated
        );
        let http = reqwest::Client::new();
        let resp = http
            .get(format!("{}/_oed/peer/v1/info", d.url))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        let path = "/_oed/peer/v1/info";
        let key = oed_peer::auth::PeerKey::derive(oed_tests::SECRET.as_bytes());
        let empty = oed_peer::auth::body_digest(b"");
        let old = (oed_peer::auth::now_secs() - 3600).to_string();
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
            .request(PeerOp::CreateBucket, "bucket=other", &empty)
            .body("smuggled")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(c.info().await.unwrap().auth_failures, 4);
        assert_eq!(c.buckets().await.unwrap().len(), 1);

        // Streaming is only for shard uploads.
        let resp = c
            .request(PeerOp::CreateBucket, "bucket=other", "STREAMING-CRC32C")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        f.expect_unchanged(&c).await;
    });
}

#[test]
fn malformed_queries_get_bad_request() {
    let f = Fixture::new();
    let c = f.d.client();
    rt().block_on(async {
        let empty = oed_peer::auth::body_digest(b"");
        for (op, query, digest) in [
            (
                PeerOp::PutShard,
                "record=%7Bnot-json",
                oed_peer::auth::SEALED,
            ),
            (
                PeerOp::GetShard,
                "bucket=bkt&key=good&version=xyz",
                empty.as_str(),
            ),
            (
                PeerOp::GetShard,
                "bucket=bkt&key=good&from=2&to=1",
                empty.as_str(),
            ),
            (
                PeerOp::DeleteObject,
                "bucket=bkt&key=good&version=-1",
                empty.as_str(),
            ),
        ] {
            let resp = c.request(op, query, digest).send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{op:?} {query}");
            let err = oed_peer::client::check(resp).await.unwrap_err();
            assert_eq!(err.code, ErrorCode::BadRequest, "{op:?} {query}: {err}");
        }
        // A route no operation has.
        let resp = c
            .request_raw(Method::GET, "/_oed/peer/v1/nothing", "", &empty)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);

        f.expect_unchanged(&c).await;
    });
}

/// A shard placed by a cluster map of another epoch is refused (409 `StaleMap`) and not
/// stored; other requests from such a drive are served; a request naming no epoch (a
/// tool, a test) is not checked.
#[test]
fn shard_writes_from_another_map_epoch_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let c = d.client();
    rt().block_on(async {
        c.create_bucket("epochs").await.unwrap();
        let data = bytes(3 * 4096, 2);
        let rec = record("epochs", "k", 1, data.len() as u64, 1, 1, 0);
        let file = shard_file(&rec, &data);
        let newer = c.clone().with_epoch(2);
        for raw in [false, true] {
            let e = newer
                .clone()
                .with_raw_uploads(raw)
                .put_shard(&rec, upload(&file, 5000), false)
                .await
                .unwrap_err();
            assert_eq!(e.code, ErrorCode::StaleMap, "{e}");
            assert!(
                e.message.contains("epoch 1") && e.message.contains("epoch 2"),
                "{e}"
            );
        }
        assert!(newer.stat("epochs", "k").await.unwrap().is_none());
        c.clone()
            .with_epoch(1)
            .put_shard(&rec, upload(&file, 5000), false)
            .await
            .unwrap();
        assert!(newer.stat("epochs", "k").await.unwrap().is_some());
    });
}

/// A drive with `tls_cert_file`, in a cluster whose map says `tls = true`, serves its peer
/// API over TLS only. A peer client reaches it only when it trusts the CA that signed its
/// certificate: not with another CA, not with none, and not in plain HTTP. Shards go
/// through whole.
#[test]
fn the_peer_api_over_tls_trusts_the_cluster_ca_only() {
    use oed_peer::auth::PeerKey;
    use oed_peer::client::PeerHttp;
    use oed_peer::tls::{DevPki, client_config};
    let dir = tempfile::tempdir().unwrap();
    let pki = DevPki::create(&dir.path().join("tls"), &["test-drive".into()]).unwrap();
    let other = DevPki::create(&dir.path().join("other"), &["test-drive".into()]).unwrap();
    let (cert, key) = &pki.drives[0];
    // A map with `tls = true`: the drives talk to each other over TLS only.
    let map = dir.path().join("cluster.toml");
    std::fs::write(
        &map,
        "cluster_id = \"t\"\ntls = true\n[profile]\nk = 1\nm = 0\n\
         [[drives]]\nid = \"test-drive\"\naddress = \"127.0.0.1:9\"\n",
    )
    .unwrap();
    let setting =
        |name: &str, path: &std::path::Path| format!("{name}={:?}", path.display().to_string());
    let d = Daemon::start(
        &dir.path().join("data"),
        &[
            &setting("tls_cert_file", cert),
            &setting("tls_key_file", key),
            &setting("tls_ca_file", &pki.ca),
            &setting("cluster_map", &map),
        ],
    );
    let url = d.url.replacen("http://", "https://", 1);
    let key = PeerKey::derive(oed_tests::SECRET.as_bytes());
    let with_ca = |ca: &std::path::Path| {
        PeerClient::with_http(
            &url,
            key.clone(),
            PeerHttp::with_tls(&client_config(Some(ca)).unwrap()),
        )
        .for_drive(oed_tests::DRIVE_ID)
    };
    rt().block_on(async {
        let c = with_ca(&pki.ca);
        c.create_bucket("tls").await.unwrap();
        let data = bytes(3 * 4 * 4096 + 99, 5);
        let rec = record("tls", "obj", 7, data.len() as u64, 4, 2, 4);
        let file = shard_file(&rec, &data);
        c.put_shard(&rec, upload(&file, 10_000), false)
            .await
            .unwrap();
        assert_eq!(read_shard(&c, "tls", "obj").await, chunk_bytes(&file));
        for (what, refused) in [
            ("another CA", with_ca(&other.ca)),
            ("no CA", PeerClient::new(&url, key.clone())),
            ("plain HTTP", d.client()),
        ] {
            let e = refused.buckets().await.expect_err(what);
            assert_eq!(e.code, ErrorCode::Unreachable, "{what}: {e}");
        }
    });
}

/// Raw uploads of shards larger than the drive's pipe and its write batches, cut into
/// pieces of odd sizes, are stored byte for byte and read back, and leave nothing beside
/// their files, spliced into files written through the page cache (the S3 suite checks
/// that the drives count them as spliced).
#[test]
fn raw_uploads_of_large_shards_are_stored_byte_for_byte() {
    raw_uploads_stored_byte_for_byte(&["direct_io=false"]);
}

/// The same into files written with `O_DIRECT` (the default), read from the connection
/// into their aligned buffers (or, where the file system refuses `O_DIRECT`, through the
/// page cache); the S3 suite checks that the drives count them as read so.
#[test]
fn raw_uploads_with_direct_io_are_stored_byte_for_byte() {
    raw_uploads_stored_byte_for_byte(&["direct_io=true"]);
}

fn raw_uploads_stored_byte_for_byte(settings: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), settings);
    let c = d.client().with_raw_uploads(true);
    // A file of exactly 2 MiB (511 chunks of 4 KiB and one of 1984 bytes, each with its
    // CRC, and the header): whole 512 KiB stages, nothing left after.
    let uploads = [
        (3 << 20, 100_003),
        ((5 << 20) + 77, 1 << 20),
        (70_001, 7),
        (2_095_040, 65_536),
    ];
    rt().block_on(raw_uploads_read_back(
        &c,
        &dir.path().join("shards"),
        &uploads,
        1,
    ));
}

/// A raw upload whose sender gives up halfway (its body fails) is not stored: the drive
/// sees the connection end before the shard file does, refuses it, and removes what it
/// wrote.
#[test]
fn an_abandoned_raw_upload_leaves_nothing() {
    abandoned_raw_upload_leaves_nothing(&["direct_io=false"]);
}

/// The same into a file written with `O_DIRECT` (the default).
#[test]
fn an_abandoned_raw_upload_with_direct_io_leaves_nothing() {
    abandoned_raw_upload_leaves_nothing(&["direct_io=true"]);
}

fn abandoned_raw_upload_leaves_nothing(settings: &[&str]) {
    use futures_util::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), settings);
    let c = d.client().with_raw_uploads(true);
    rt().block_on(async {
        c.create_bucket("raw").await.unwrap();
        let data = bytes(2 << 20, 5);
        let rec = record("raw", "gone", 1, data.len() as u64, 1, 1, 0);
        let file = shard_file(&rec, &data);
        let half = bytes::Bytes::copy_from_slice(&file[..file.len() / 2]);
        let body =
            futures_util::stream::iter([Ok(half)]).chain(futures_util::stream::once(async {
                Err(std::io::Error::other("the sender gave up"))
            }));
        let e = c.put_shard(&rec, Box::pin(body), false).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unreachable, "{e}");
        assert!(c.stat("raw", "gone").await.unwrap().is_none());
        let shards = dir.path().join("shards");
        let mut left = files_under(&shards);
        for _ in 0..100 {
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            left = files_under(&shards);
        }
        assert!(left.is_empty(), "left behind: {left:?}");
    });
}

/// A raw upload's connection carries the next one: the drive serves HTTP on it again once
/// the shard is stored, so a sender of many shards connects once. Uploads with and
/// without a record tail frame their ends themselves; a refused upload closes its
/// connection, and the drive still refuses what it refused before (bytes after the file
/// with no tail due, a tail missing).
#[test]
fn raw_uploads_keep_their_connection_for_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let c = d.client().with_raw_uploads(true);
    let tail = br#"{"etag":"e-tail","parts":[]}"#;
    rt().block_on(async {
        c.create_bucket("keep").await.unwrap();
        for i in 0..6u64 {
            let data = bytes(300_000 + 1000 * i as usize, i + 1);
            let key = format!("k{i}");
            let rec = record("keep", &key, 1, data.len() as u64, 1, 1, 0);
            let file = shard_file(&rec, &data);
            let with_tail = i % 2 == 1;
            let body = if with_tail {
                [file.as_slice(), tail].concat()
            } else {
                file.clone()
            };
            let stored = c
                .put_shard(&rec, upload(&body, 65_536 + i as usize), with_tail)
                .await
                .unwrap();
            if with_tail {
                assert_eq!(stored.record.etag, "e-tail");
            }
            assert_eq!(read_shard(&c, "keep", &key).await, chunk_bytes(&file));
            // One connection, kept; every upload after the first went on it.
            assert_eq!(c.kept_connections(), (1, i), "after upload {i}");
        }

        // Refused uploads close their connection; the drive's verdicts are those of an
        // upload that ends with its connection.
        let data = bytes(200_000, 9);
        let rec = record("keep", "bad", 1, data.len() as u64, 1, 1, 0);
        let file = shard_file(&rec, &data);
        let mut flipped = file.clone();
        flipped[70_000] ^= 1;
        let longer = [file.as_slice(), b"extra"].concat();
        for (what, body, with_tail, code) in [
            ("a byte flipped", flipped, false, ErrorCode::BadDigest),
            (
                "bytes after the file",
                longer,
                false,
                ErrorCode::InvalidShard,
            ),
            (
                "no tail where one is due",
                file.clone(),
                true,
                ErrorCode::BadRequest,
            ),
            (
                "cut short",
                file[..file.len() - 9].to_vec(),
                false,
                ErrorCode::IncompleteBody,
            ),
        ] {
            let e = c
                .put_shard(&rec, upload(&body, 50_000), with_tail)
                .await
                .expect_err(what);
            assert_eq!(e.code, code, "{what}: {e}");
            assert_eq!(c.kept_connections().0, 0, "{what}: its connection closed");
            assert!(c.stat("keep", "bad").await.unwrap().is_none(), "{what}");
            // The next one connects anew and is kept.
            let ok = record("keep", "after", 1, data.len() as u64, 1, 1, 0);
            c.put_shard(&ok, upload(&shard_file(&ok, &data), 50_000), false)
                .await
                .unwrap();
            assert_eq!(c.kept_connections().0, 1, "after {what}");
        }
    });
}

/// Uploads whose bytes come slower than the drive takes them (16 KiB at a time, a pause
/// between): the drive waits for a batch's worth at a time (its socket's low-water mark,
/// `docs/drive.md`), every byte is stored, and the connection serves the next request at
/// once afterwards: a mark left raised would hold back the next request's few hundred
/// bytes until the drive's header timeout closed the connection, and the next upload
/// would go on a new one. An upload that ends short still ends at once.
#[test]
fn slow_raw_uploads_are_stored_whole_and_keep_their_connection() {
    use futures_util::StreamExt as _;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let c = d.client().with_raw_uploads(true);
    let slow = |data: &[u8]| -> oed_model::drive::ShardUpload {
        Box::pin(oed_tests::body(data, 16 * 1024).then(|piece| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            piece
        }))
    };
    rt().block_on(async {
        tokio::time::timeout(Duration::from_mins(1), async {
            c.create_bucket("slow").await.unwrap();
            for i in 0..3u64 {
                let data = bytes(1_000_000 + 4096 * i as usize, i + 20);
                let key = format!("s{i}");
                let rec = record("slow", &key, 1, data.len() as u64, 1, 1, 0);
                let file = shard_file(&rec, &data);
                c.put_shard(&rec, slow(&file), false).await.unwrap();
                assert_eq!(read_shard(&c, "slow", &key).await, chunk_bytes(&file));
                assert_eq!(c.kept_connections(), (1, i), "after upload {i}");
            }
            let data = bytes(600_000, 7);
            let rec = record("slow", "short", 1, data.len() as u64, 1, 1, 0);
            let file = shard_file(&rec, &data);
            let e = c
                .put_shard(&rec, slow(&file[..400_000]), false)
                .await
                .expect_err("cut short");
            assert_eq!(e.code, ErrorCode::IncompleteBody, "{e}");
            assert!(c.stat("slow", "short").await.unwrap().is_none());
        })
        .await
        .expect("slow uploads took over a minute");
    });
}

/// A kept connection that the drive has closed since (here: it was killed and started
/// again at the same address) fails before any byte of the next upload's body is sent;
/// the upload goes on a new connection, which is kept in turn.
#[test]
fn a_kept_connection_the_drive_closed_is_replaced_by_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), &[]);
    let c = d.client().with_raw_uploads(true);
    let data = bytes(300_000, 4);
    let put = |key: &str| {
        let rec = record("stale", key, 1, data.len() as u64, 1, 1, 0);
        let file = shard_file(&rec, &data);
        let c = c.clone();
        async move {
            c.put_shard(&rec, upload(&file, 65_536), false)
                .await
                .unwrap();
            assert_eq!(read_shard(&c, "stale", &rec.key).await, chunk_bytes(&file));
        }
    };
    // One runtime throughout: the kept connection is registered with it.
    let rt = rt();
    rt.block_on(async {
        c.create_bucket("stale").await.unwrap();
        put("a").await;
        assert_eq!(c.kept_connections(), (1, 0));
    });
    let _d = d.restart_at_same_address();
    rt.block_on(async {
        put("b").await;
        // The stale connection was tried and dropped, the new one kept.
        assert_eq!(c.kept_connections(), (1, 0));
        put("c").await;
        assert_eq!(c.kept_connections(), (1, 1));
    });
}

/// Framed reads (`Upgrade: oed-frames`): the drive sends the frames of the stripes asked
/// for from its shard file, with `sendfile` or through a buffer (`shard_sendfile`); the
/// client checks every chunk's CRC32C, hands on the chunk bytes exactly as a read with a
/// body would, and keeps the connection for its next request. A shard kept inline comes
/// as a body, on the pool's connections. A byte flipped on disk ends the read with
/// `CorruptShard` at that stripe, after the chunks before it, and the drive has queued
/// the shard for heal by the time the client hears of it.
#[test]
fn framed_reads_come_checked_and_keep_their_connection() {
    use futures_util::StreamExt;
    for sendfile in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let d = Daemon::start(dir.path(), &[&format!("shard_sendfile={sendfile}")]);
        let c = d.client().with_framed_reads(true);
        rt().block_on(async {
            c.create_bucket("frames").await.unwrap();
            // Five full stripes of 4 KiB chunks and a short sixth.
            let data = bytes(5 * 4096 + 1000, 3);
            let rec = record("frames", "obj", 1, data.len() as u64, 1, 1, 0);
            let file = shard_file(&rec, &data);
            c.put_shard(&rec, upload(&file, 5000), false).await.unwrap();
            let chunks = chunk_bytes(&file);
            assert_eq!(read_shard(&c, "frames", "obj").await, chunks, "{sendfile}");
            assert_eq!(c.kept_connections(), (1, 0), "kept after the read");
            for (range, bytes) in [
                (1..3, &chunks[4096..3 * 4096]),
                (4..99, &chunks[4 * 4096..]),
                (2..2, &chunks[..0]),
            ] {
                let mut r = c
                    .read_shard("frames", "obj", None, Some(range.clone()))
                    .await
                    .unwrap();
                assert_eq!(r.stripes, range.start..range.end.min(6));
                let mut got = Vec::new();
                while let Some(piece) = r.chunks.next().await {
                    got.extend_from_slice(&piece.unwrap());
                }
                assert_eq!(got, bytes, "{range:?}");
            }
            // Every read after the first went on the connection it left.
            assert_eq!(c.kept_connections(), (1, 3));
            let e = c
                .read_shard(
                    "frames",
                    "obj",
                    None,
                    Some(std::ops::Range { start: 3, end: 2 }),
                )
                .await
                .expect_err("a reversed range");
            assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
            // It went on the kept connection, which an ordinary answer does not leave kept.
            assert_eq!(c.kept_connections(), (0, 4));

            // Inline: a body, not a framed read, on the pool's connections.
            let small = bytes(1000, 4);
            let inl = record("frames", "small", 1, small.len() as u64, 1, 1, 0);
            let inl_file = shard_file(&inl, &small);
            c.put_shard(&inl, upload(&inl_file, 5000), false)
                .await
                .unwrap();
            assert_eq!(
                read_shard(&c, "frames", "small").await,
                chunk_bytes(&inl_file)
            );
            assert_eq!(c.kept_connections(), (0, 4));

            // A byte flipped in stripe 2's chunk on disk.
            let files = files_under(&d.data_dir.join("shards"));
            assert_eq!(files.len(), 1, "{files:?}");
            let mut on_disk = std::fs::read(&files[0]).unwrap();
            on_disk[64 + 2 * (4096 + 4) + 100] ^= 0x40;
            std::fs::write(&files[0], &on_disk).unwrap();
            assert_eq!(c.info().await.unwrap().heal_backlog, 0);
            let mut r = c.read_shard("frames", "obj", None, None).await.unwrap();
            let mut got = Vec::new();
            let err = loop {
                match r.chunks.next().await {
                    Some(Ok(piece)) => got.extend_from_slice(&piece),
                    Some(Err(e)) => break e,
                    None => panic!("a corrupt shard was read whole"),
                }
            };
            assert_eq!(err.code, ErrorCode::CorruptShard, "{err}");
            assert!(err.message.contains("stripe 2"), "{err}");
            assert_eq!(got, chunks[..2 * 4096], "the chunks before the bad one");
            assert_eq!(c.info().await.unwrap().heal_backlog, 1, "queued for heal");

            // A byte flipped in another shard file's header: the read fails at once.
            let rec2 = record("frames", "obj2", 1, data.len() as u64, 1, 1, 0);
            c.put_shard(&rec2, upload(&shard_file(&rec2, &data), 5000), false)
                .await
                .unwrap();
            let file2 = files_under(&d.data_dir.join("shards"))
                .into_iter()
                .find(|f| *f != files[0])
                .unwrap();
            let mut on_disk = std::fs::read(&file2).unwrap();
            on_disk[30] ^= 0x01; // the object length
            std::fs::write(&file2, &on_disk).unwrap();
            let e = c
                .read_shard("frames", "obj2", None, Some(1..3))
                .await
                .expect_err("a bad header");
            assert_eq!(e.code, ErrorCode::CorruptShard, "{e}");
            assert!(e.message.contains("stripe 1"), "{e}");
            assert_eq!(c.info().await.unwrap().heal_backlog, 2, "queued for heal");
        });
    }
}
