//! The stripe source on a real cluster: four drives (k = 2, m = 2) serving on 127.0.0.1 in
//! this process, each with its own store on disk, talking through the peer API. The
//! source yields any chunk of every stripe (data or parity) with its shard index and
//! object offset, reads it where it lies when its drive answers, rebuilds it from `k`
//! others when its drive is down or its bytes on disk are bad, and fails rather than
//! yield wrong bytes when fewer than `k` can be had.

use std::sync::Arc;

use oed_cluster::Cluster;
use oed_cluster::stripes::{Stripe, StripeSource};
use oed_model::record::{ObjectRecord, PartRef};
use oed_tests::{bytes, chunk_bytes, files_under};

const K: usize = 2;
const M: usize = 2;
const CHUNK: usize = 4096;

async fn cluster(root: &std::path::Path) -> Vec<oed_tests::LocalDrive> {
    oed_tests::local_cluster(root, K, M, CHUNK).await
}

/// The chunk bytes of every shard of `data`, as the drives hold them.
fn shards_of(record: &ObjectRecord, data: &[u8]) -> Vec<Vec<u8>> {
    oed_ec::encode_object(record.layout().unwrap(), record.version_id.0, data)
        .unwrap()
        .iter()
        .map(|f| chunk_bytes(f))
        .collect()
}

/// Every stripe of `record` with chunks `want`, read through the cluster `from`.
async fn all_stripes(
    from: &Arc<Cluster>,
    record: &ObjectRecord,
    want: &[usize],
) -> oed_model::Result<Vec<Stripe>> {
    let ext = PartRef::of(1, record);
    let mut src = StripeSource::open(from.clone(), "bkt", ext, 0..u64::MAX, want.to_vec()).await?;
    let mut out = Vec::new();
    while let Some(s) = src.next().await? {
        out.push(s);
    }
    Ok(out)
}

/// Checks that `stripes` hold exactly chunk `want[j]` of every stripe of `shards`, with
/// the offsets of the layout, and returns how many chunks were rebuilt.
fn check(stripes: &[Stripe], want: &[usize], shards: &[Vec<u8>], size: usize) -> usize {
    let stripe_bytes = (K * CHUNK) as u64;
    assert_eq!(stripes.len(), size.div_ceil(K * CHUNK));
    let mut rebuilt = 0;
    for (s, stripe) in stripes.iter().enumerate() {
        assert_eq!(stripe.index, s as u64);
        assert_eq!(stripe.offset, s as u64 * stripe_bytes);
        assert_eq!(stripe.chunks.len(), want.len());
        for (chunk, &i) in stripe.chunks.iter().zip(want) {
            assert_eq!(chunk.shard, i);
            let bytes: Vec<u8> = chunk.pieces.concat();
            // Every stripe before the tail has whole chunks.
            let at = s * CHUNK;
            assert_eq!(
                bytes,
                shards[i][at..at + stripe.chunk_len],
                "stripe {s} chunk {i}"
            );
            if i < K {
                let start = stripe.offset + (i * stripe.chunk_len) as u64;
                assert_eq!(chunk.offset, start.min(size as u64));
                let end = (start + stripe.chunk_len as u64).min(size as u64);
                assert_eq!(chunk.data_len as u64, end - start.min(end));
            } else {
                assert_eq!((chunk.offset, chunk.data_len), (stripe.offset, 0));
            }
            rebuilt += usize::from(chunk.rebuilt);
        }
    }
    rebuilt
}

#[test]
fn chunks_come_where_they_lie_and_are_rebuilt_where_they_do_not() {
    let root = tempfile::tempdir().unwrap();
    let rt = oed_tests::runtime();
    rt.block_on(async {
        let mut drives = cluster(root.path()).await;
        let c = drives[0].cluster.clone();
        c.create_bucket("bkt").await.unwrap();
        // Five stripes and a short tail stripe.
        let data = bytes(5 * K * CHUNK + 3000, 11);
        let record = oed_tests::put_object(&c, "bkt", "obj", &data).await;
        let shards = shards_of(&record, &data);
        let holder = |shard: usize| {
            drives
                .iter()
                .position(|d| d.id == record.drives[shard])
                .unwrap()
        };

        // The reader is the drive of shard 0: its own chunks come from its store, the
        // others over the peer API.
        let reader = drives[holder(0)].cluster.clone();
        let reader_id = record.drives[0].clone();

        // Healthy: one data chunk, both data chunks, the parity chunks; nothing rebuilt.
        for want in [vec![1], vec![0, 1], vec![3, 2]] {
            let got = all_stripes(&reader, &record, &want).await.unwrap();
            assert_eq!(check(&got, &want, &shards, data.len()), 0, "{want:?}");
        }

        // A byte flipped in shard 0's file: that stripe's chunk is rebuilt, the rest read.
        let d0 = &drives[holder(0)];
        let files = files_under(&d0.dir.join("shards"));
        assert_eq!(files.len(), 1);
        let mut on_disk = std::fs::read(&files[0]).unwrap();
        on_disk[64 + 2 * (CHUNK + 4) + 99] ^= 1; // stripe 2
        std::fs::write(&files[0], &on_disk).unwrap();
        let got = all_stripes(&reader, &record, &[0]).await.unwrap();
        assert!(check(&got, &[0], &shards, data.len()) >= 1);
        assert!(got[..2].iter().all(|s| !s.chunks[0].rebuilt));

        // The drive of shard 1 stopped: shard 1 (and parity 3) rebuilt in every stripe.
        let gone = drives.remove(holder(1));
        gone.stop().await;
        let want = [1, 3];
        let got = all_stripes(&reader, &record, &want).await.unwrap();
        let rebuilt = check(&got, &want, &shards, data.len());
        assert!(rebuilt >= got.len(), "{rebuilt} chunks rebuilt");

        // The drive of shard 2 stopped too, and shard 0 is bad in stripe 2: fewer than k
        // chunks of that stripe can be had, so the source fails there rather than yield
        // wrong bytes.
        let second = drives
            .iter()
            .position(|d| d.id == record.drives[2])
            .unwrap();
        assert_ne!(drives[second].id, reader_id);
        let gone = drives.remove(second);
        gone.stop().await;
        let err = all_stripes(&reader, &record, &[0, 1]).await.unwrap_err();
        assert!(err.to_string().contains("fewer than k"), "{err}");
        for d in drives {
            d.stop().await;
        }
    });
}
