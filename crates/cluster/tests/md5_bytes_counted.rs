//! `oed_md5_bytes_total` counts every byte the hashing thread hashes. The counters are
//! the process's own, so this test runs alone in its own binary: any other hashing in
//! the process would add to them, and the count could only be checked as a lower bound.

use bytes::Bytes;
use md5::Digest as _;
use oed_cluster::md5::{Md5Stream, hashed_bytes_by_streams};
use rand::{RngCore as _, SeedableRng as _};

/// Every byte of a stripe handed to the thread is counted, the blocks that span two of
/// its buffers included (hashed alone: counted under 1 stream), and none twice.
#[tokio::test]
async fn bytes_in_odd_buffers_are_all_counted_once() {
    let total = || hashed_bytes_by_streams().iter().sum::<u64>();
    assert_eq!(total(), 0, "nothing else in this process hashes");
    let mut data = vec![0u8; 64 * 1024 * 4];
    rand::rngs::SmallRng::seed_from_u64(77).fill_bytes(&mut data);
    let data = Bytes::from(data);
    let mut s = Md5Stream::new();
    // Two stripes of 128 KiB, each in buffers cut 1, 2 and 3 bytes off a block.
    for stripe in data.chunks(128 * 1024) {
        let stripe = data.slice_ref(stripe);
        let cuts = [0, 40_001, 80_002, 100_003, stripe.len()];
        s.update(cuts.windows(2).map(|w| stripe.slice(w[0]..w[1])).collect())
            .await
            .unwrap();
    }
    let expected: [u8; 16] = md5::Md5::digest(&data).into();
    assert_eq!(s.finish().await.unwrap(), expected);
    assert_eq!(total(), data.len() as u64);
}
