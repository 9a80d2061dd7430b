//! Whole objects in memory: cut into stripes, encode, and frame every shard file at once.
//! For small objects and tests; the daemon streams stripe by stripe with the same pieces
//! ([`Layout::stripe`], [`Codec::encode_shards`], [`ShardWriter`]).

use crate::codec::Codec;
use crate::error::Result;
use crate::format::{ShardHeader, ShardWriter};
use crate::layout::Layout;

/// The `k + m` complete shard files of `data` (shard `i` at index `i`).
///
/// # Errors
/// [`crate::Error::InvalidHeader`] when the object is too long to describe.
pub fn encode_object(layout: Layout, version_id: u128, data: &[u8]) -> Result<Vec<Vec<u8>>> {
    let codec = Codec::new(layout.k(), layout.m())?;
    let len = data.len() as u64;
    let mut writers = (0..layout.total())
        .map(|i| {
            ShardWriter::new(
                Vec::new(),
                ShardHeader::new(version_id, i as u16, layout, len)?,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let mut chunks: Vec<Vec<u8>> = vec![Vec::new(); layout.total()];
    for s in 0..layout.stripe_count(len) {
        let stripe = layout.stripe(len, s).expect("s < stripe_count");
        let off = stripe.object_offset as usize;
        let sdata = &data[off..off + stripe.data_len];
        for (i, c) in chunks.iter_mut().enumerate() {
            c.clear();
            c.resize(stripe.chunk_len, 0);
            if i < layout.k() {
                let r = stripe.chunk_range(i);
                c[..r.len()].copy_from_slice(&sdata[r]);
            }
        }
        let mut refs: Vec<&mut [u8]> = chunks.iter_mut().map(Vec::as_mut_slice).collect();
        codec.encode_shards(&mut refs)?;
        for (w, c) in writers.iter_mut().zip(&chunks) {
            w.write_chunk(c)?;
        }
    }
    writers.into_iter().map(ShardWriter::finish).collect()
}
