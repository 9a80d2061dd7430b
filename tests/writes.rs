//! What a write needs before it is acknowledged: `k + 1` drives that stored *this*
//! version. A drive that holds a newer version of the key refuses the shard
//! (`Superseded`), and such a refusal is not a stored shard.

use bytes::Bytes;
use oed_model::error::Error;
use oed_model::record::{ObjectRecord, VersionId};
use oed_tests::{bytes, put_object, upload};

use oed_tests::runtime as rt;

/// A version of `bkt`/`k` made `ahead_ms` after now, stored directly on the drives that
/// hold shards `shards` of `like` (the key's current version), as another coordinator's
/// write would have left it there.
async fn newer_on(
    c: &oed_cluster::Cluster,
    like: &ObjectRecord,
    shards: std::ops::Range<usize>,
    ahead_ms: u128,
) {
    let now_ms = u128::from(oed_peer::auth::now_secs()) * 1000;
    let v = VersionId(((now_ms + ahead_ms) << 64) | 1);
    let data = bytes(usize::try_from(like.size).unwrap(), 99);
    let files = oed_ec::encode_object(like.layout().unwrap(), v.0, &data).unwrap();
    for i in shards {
        let mut rec = like.clone();
        rec.version_id = v;
        rec.last_modified_ms = v.millis();
        rec.shard_index = u16::try_from(i).unwrap();
        rec.file = None;
        let drive = c.drive(&rec.drives[i]).expect("a drive of the map");
        drive
            .put_shard(&rec, upload(&files[i], 5000), false)
            .await
            .expect("the newer version stored");
    }
}

async fn write(
    c: &oed_cluster::Cluster,
    data: &[u8],
) -> Result<oed_cluster::write::Written, Error> {
    let obj = oed_cluster::write::NewObject {
        bucket: "bkt".into(),
        key: "k".into(),
        size: data.len() as u64,
        ..oed_cluster::write::NewObject::default()
    };
    let body = futures_util::stream::iter([Ok(Bytes::copy_from_slice(data))]);
    c.put_object(obj, body).await
}

#[test]
fn a_write_is_acknowledged_only_when_k_plus_1_drives_stored_this_version() {
    let root = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let drives = oed_tests::local_cluster(root.path(), 4, 2, 4096).await;
        let c = drives[0].cluster.clone();
        c.create_bucket("bkt").await.unwrap();
        let first = put_object(&c, "bkt", "k", &bytes(100_000, 1)).await;

        // One drive holds a newer version: five of six shards stored, k + 1: the write
        // is acknowledged, and not as degraded (that drive is up and needs no heal).
        newer_on(&c, &first, 0..1, 60_000).await;
        let written = write(&c, &bytes(100_000, 2))
            .await
            .expect("five of six stored");
        assert_eq!(written.missing, 0);
        let degraded = &c.stats.degraded_writes;
        assert_eq!(degraded.load(std::sync::atomic::Ordering::Relaxed), 0);

        // Two drives hold a newer version: four of six stored, fewer than k + 1: the
        // write is refused (it was acknowledged when a refusal counted as stored).
        newer_on(&c, &written.record, 0..2, 120_000).await;
        match write(&c, &bytes(100_000, 3)).await {
            Err(Error::Unavailable(why)) => {
                assert!(why.starts_with("4 of 6 shards stored"), "{why}");
                assert!(why.contains("2 drive(s) hold a newer version"), "{why}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        for d in drives {
            d.stop().await;
        }
    });
}
