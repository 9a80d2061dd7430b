//! The AWS SDK for Rust against a real cluster: `oedd dev` with six drives (EC 4+2),
//! driven through the SDK over plain HTTP on 127.0.0.1. The SDK signs with SigV4 and
//! sends CRC32 checksums in aws-chunked trailers by default, so these tests cover that
//! path too.

use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier};
use oed_sdk_tests::{Dev, bytes, http_get};

fn start() -> Dev {
    Dev::start(6, 4, 2)
}

fn client(cluster: &Dev, secret: &str) -> Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(&cluster.endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            &cluster.access_key,
            secret,
            None,
            None,
            "oed-test",
        ))
        .force_path_style(true)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(conf)
}

async fn get(c: &Client, bucket: &str, key: &str) -> Vec<u8> {
    c.get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .expect("get")
        .body
        .collect()
        .await
        .expect("body")
        .into_bytes()
        .to_vec()
}

/// Deletes `keys` in one `DeleteObjects` request and checks each was deleted.
async fn delete_all(c: &Client, bucket: &str, keys: &[&str]) {
    let objects = keys
        .iter()
        .map(|k| ObjectIdentifier::builder().key(*k).build().expect("id"))
        .collect();
    let deleted = c
        .delete_objects()
        .bucket(bucket)
        .delete(
            Delete::builder()
                .set_objects(Some(objects))
                .build()
                .expect("delete"),
        )
        .send()
        .await
        .expect("delete objects");
    assert_eq!(deleted.deleted().len(), keys.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_objects_listing_copy_and_delete() {
    let cluster = start();
    let c = client(&cluster, &cluster.secret_key);
    c.create_bucket()
        .bucket("sdk")
        .send()
        .await
        .expect("create bucket");
    let big = bytes(3 * 1024 * 1024 + 7, 1);
    for (key, body) in [
        ("empty", Vec::new()),
        ("dir/a", b"alpha".to_vec()),
        ("dir/b", big.clone()),
        ("top", b"t".to_vec()),
    ] {
        c.put_object()
            .bucket("sdk")
            .key(key)
            .content_type("application/x-test")
            .metadata("origin", "sdk")
            .body(ByteStream::from(body))
            .send()
            .await
            .unwrap_or_else(|e| panic!("put {key}: {e:?}"));
    }
    assert_eq!(get(&c, "sdk", "dir/b").await, big);
    assert!(get(&c, "sdk", "empty").await.is_empty());
    let ranged = c
        .get_object()
        .bucket("sdk")
        .key("dir/b")
        .range("bytes=1048570-1048590")
        .send()
        .await
        .expect("ranged get");
    assert_eq!(
        ranged.content_range(),
        Some("bytes 1048570-1048590/3145735")
    );
    let got = ranged.body.collect().await.expect("body").into_bytes();
    assert_eq!(&got[..], &big[1_048_570..=1_048_590]);
    let head = c
        .head_object()
        .bucket("sdk")
        .key("dir/a")
        .send()
        .await
        .expect("head");
    assert_eq!(head.content_length(), Some(5));
    assert_eq!(head.content_type(), Some("application/x-test"));
    assert_eq!(
        head.metadata()
            .and_then(|m| m.get("origin"))
            .map(String::as_str),
        Some("sdk")
    );
    let list = c
        .list_objects_v2()
        .bucket("sdk")
        .delimiter("/")
        .send()
        .await
        .expect("list");
    let keys: Vec<_> = list.contents().iter().filter_map(|o| o.key()).collect();
    let prefixes: Vec<_> = list
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix())
        .collect();
    assert_eq!((keys, prefixes), (vec!["empty", "top"], vec!["dir/"]));
    c.copy_object()
        .bucket("sdk")
        .key("copy")
        .copy_source("sdk/dir/b")
        .send()
        .await
        .expect("copy");
    assert_eq!(get(&c, "sdk", "copy").await, big);
    let missing = c.get_object().bucket("sdk").key("nope").send().await;
    let err = missing.expect_err("no such key").into_service_error();
    assert!(err.is_no_such_key(), "{err:?}");
    delete_all(&c, "sdk", &["empty", "dir/a", "dir/b", "top", "copy"]).await;
    c.delete_bucket()
        .bucket("sdk")
        .send()
        .await
        .expect("delete bucket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_multipart_presign_and_bad_credentials() {
    let cluster = start();
    let c = client(&cluster, &cluster.secret_key);
    c.create_bucket()
        .bucket("mpu")
        .send()
        .await
        .expect("create bucket");
    let parts = [bytes(5 * 1024 * 1024, 2), bytes(777_777, 3)];
    let up = c
        .create_multipart_upload()
        .bucket("mpu")
        .key("whole")
        .send()
        .await
        .expect("create upload");
    let id = up.upload_id().expect("upload id");
    let mut done = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let n = i32::try_from(i + 1).expect("small");
        let r = c
            .upload_part()
            .bucket("mpu")
            .key("whole")
            .upload_id(id)
            .part_number(n)
            .body(ByteStream::from(p.clone()))
            .send()
            .await
            .expect("upload part");
        done.push(
            CompletedPart::builder()
                .part_number(n)
                .e_tag(r.e_tag().expect("etag"))
                .build(),
        );
    }
    let completed = c
        .complete_multipart_upload()
        .bucket("mpu")
        .key("whole")
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(done))
                .build(),
        )
        .send()
        .await
        .expect("complete");
    assert!(completed.e_tag().is_some_and(|e| e.ends_with("-2\"")));
    let whole = [parts[0].clone(), parts[1].clone()].concat();
    assert_eq!(get(&c, "mpu", "whole").await, whole);

    let presigned = c
        .get_object()
        .bucket("mpu")
        .key("whole")
        .presigned(
            aws_sdk_s3::presigning::PresigningConfig::expires_in(Duration::from_mins(5))
                .expect("presign config"),
        )
        .await
        .expect("presign");
    let uri = presigned.uri().to_owned();
    let (status, body) = tokio::task::spawn_blocking(move || http_get(&uri))
        .await
        .expect("presigned GET");
    assert_eq!(status, 200);
    assert_eq!(&body[..], &whole[..]);

    let wrong = client(&cluster, "not-the-secret");
    let err = wrong
        .put_object()
        .bucket("mpu")
        .key("whole")
        .body(ByteStream::from_static(b"evil"))
        .send()
        .await
        .expect_err("a wrong secret is refused");
    assert_eq!(
        err.raw_response().map(|r| r.status().as_u16()),
        Some(403),
        "{err:?}"
    );
    assert_eq!(get(&c, "mpu", "whole").await, whole);
}

/// CRC-32 (ISO-HDLC), bit by bit: the reference the server's values are checked against.
fn crc32(data: &[u8]) -> u32 {
    let mut c = u32::MAX;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

fn b64(bytes: &[u8]) -> String {
    aws_smithy_types::base64::encode(bytes)
}

/// The SDK's default: a CRC32 in an aws-chunked trailer on every upload. The server
/// checks it, stores it, returns it with `ChecksumMode::Enabled` (which the SDK then
/// checks against the body it reads), and in `GetObjectAttributes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_checksums_are_checked_stored_and_returned() {
    use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode, ObjectAttributes};
    let cluster = start();
    let c = client(&cluster, &cluster.secret_key);
    c.create_bucket()
        .bucket("sums")
        .send()
        .await
        .expect("bucket");
    let data = bytes(300_000, 4);
    let want = b64(&crc32(&data).to_be_bytes());
    let put = c
        .put_object()
        .bucket("sums")
        .key("k")
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .expect("put");
    assert_eq!(put.checksum_crc32(), Some(want.as_str()));
    let head = c
        .head_object()
        .bucket("sums")
        .key("k")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .expect("head");
    assert_eq!(head.checksum_crc32(), Some(want.as_str()));
    // The SDK validates the body against the checksum the server returns.
    let got = c
        .get_object()
        .bucket("sums")
        .key("k")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .expect("get");
    assert_eq!(got.checksum_crc32(), Some(want.as_str()));
    let body = got
        .body
        .collect()
        .await
        .expect("a body that matches its checksum");
    assert_eq!(body.into_bytes().as_ref(), data.as_slice());
    // Another algorithm, asked for by name: the SDK computes it into the trailer.
    let put = c
        .put_object()
        .bucket("sums")
        .key("n")
        .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .expect("put crc64nvme");
    let value = put.checksum_crc64_nvme().expect("a CRC64NVME").to_owned();
    let attrs = c
        .get_object_attributes()
        .bucket("sums")
        .key("n")
        .object_attributes(ObjectAttributes::Checksum)
        .object_attributes(ObjectAttributes::ObjectSize)
        .send()
        .await
        .expect("attributes");
    assert_eq!(attrs.object_size(), Some(300_000));
    let sum = attrs.checksum().expect("a checksum");
    assert_eq!(sum.checksum_crc64_nvme(), Some(value.as_str()));
}
