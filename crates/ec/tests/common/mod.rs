//! Helpers shared by the integration tests: whole objects encoded into shard files.

use oed_ec::{Codec, Layout, ShardHeader, ShardWriter};

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

/// Encodes `data` stripe by stripe into `k + m` complete shard files.
pub fn shard_files(layout: Layout, version_id: u128, data: &[u8]) -> Vec<Vec<u8>> {
    let codec = Codec::new(layout.k(), layout.m()).unwrap();
    let len = data.len() as u64;
    let mut writers: Vec<ShardWriter<Vec<u8>>> = (0..layout.total())
        .map(|i| {
            let h = ShardHeader::new(version_id, i as u16, layout, len).unwrap();
            ShardWriter::new(Vec::new(), h).unwrap()
        })
        .collect();
    for s in 0..layout.stripe_count(len) {
        let stripe = layout.stripe(len, s).unwrap();
        let off = stripe.object_offset as usize;
        let sdata = &data[off..off + stripe.data_len];
        let mut chunks: Vec<Vec<u8>> = (0..layout.total())
            .map(|i| {
                let mut c = vec![0u8; stripe.chunk_len];
                if i < layout.k() {
                    let r = stripe.chunk_range(i);
                    c[..r.len()].copy_from_slice(&sdata[r]);
                }
                c
            })
            .collect();
        let mut refs: Vec<&mut [u8]> = chunks.iter_mut().map(Vec::as_mut_slice).collect();
        codec.encode_shards(&mut refs).unwrap();
        for (w, c) in writers.iter_mut().zip(&chunks) {
            w.write_chunk(c).unwrap();
        }
    }
    writers.into_iter().map(|w| w.finish().unwrap()).collect()
}
