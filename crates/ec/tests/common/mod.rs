//! Helpers shared by the integration tests.

use oed_ec::Layout;

pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// Encodes `data` into `k + m` complete shard files.
pub fn shard_files(layout: Layout, version_id: u128, data: &[u8]) -> Vec<Vec<u8>> {
    oed_ec::encode_object(layout, version_id, data).unwrap()
}
