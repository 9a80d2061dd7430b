//! How an object is cut into stripes and chunks, and back.
//!
//! An object of `len` bytes is cut into stripes of `k * chunk_size` bytes. Stripe `s`
//! starts at object offset `s * k * chunk_size`. Every stripe but the last is full; in the
//! last one (the tail) the chunk length shrinks to `ceil(tail_len / k)`, so a small object
//! costs only a little padding, not a whole chunk per shard. Data chunk `i` of a stripe
//! holds the stripe's bytes `[i * L, (i + 1) * L)` (L the stripe's chunk length), padded
//! with zeros at the end of the object; parity chunks have the same length L. Shard `i`
//! of an object is chunk `i` of every stripe, in stripe order.
//!
//! The chunk size is a power of two from [`MIN_CHUNK_SIZE`] (4 KiB) to [`MAX_CHUNK_SIZE`]
//! (16 MiB), default [`DEFAULT_CHUNK_SIZE`] (256 KiB): big enough that per-chunk costs
//! (a CRC32C, a frame, a network write) vanish, small enough that a coordinator holds a few
//! whole stripes per request in the memory of a small board.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::limits::MAX_SHARDS;
pub use crate::limits::{DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE};

/// An erasure-coding profile: `k` data and `m` parity shards and the chunk size.
/// Constructed only through [`Layout::new`], so its fields are always in range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    k: u16,
    m: u16,
    chunk_size: u32,
}

/// One stripe of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stripe {
    /// Stripe number, from 0.
    pub index: u64,
    /// Object offset of the stripe's first byte.
    pub object_offset: u64,
    /// Object bytes in the stripe (`k * chunk_size`, less in the tail).
    pub data_len: usize,
    /// Length of each of its `k + m` chunks.
    pub chunk_len: usize,
}

impl Stripe {
    /// The stripe-relative range of object bytes held by data chunk `i` (empty when the
    /// chunk is all padding). The chunk is these bytes followed by zeros up to `chunk_len`.
    #[must_use]
    pub fn chunk_range(&self, i: usize) -> Range<usize> {
        let start = (i * self.chunk_len).min(self.data_len);
        let end = ((i + 1) * self.chunk_len).min(self.data_len);
        start..end
    }
}

/// A piece of an object byte range that lies in one data chunk (see [`Layout::spans`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSpan {
    /// Stripe holding the bytes.
    pub stripe: u64,
    /// Data chunk (= data shard index) holding the bytes.
    pub chunk: usize,
    /// Offset of the first byte within the chunk.
    pub offset: usize,
    /// Number of bytes.
    pub len: usize,
    /// Object offset of the first byte.
    pub object_offset: u64,
}

impl Layout {
    /// A profile with `k >= 1`, `k + m <= 256` and a power-of-two chunk size within bounds.
    ///
    /// # Errors
    /// [`Error::InvalidProfile`] or [`Error::InvalidChunkSize`], naming what is wrong.
    pub fn new(k: usize, m: usize, chunk_size: u32) -> Result<Self> {
        if k == 0 {
            return Err(Error::InvalidProfile {
                k,
                m,
                reason: "k must be at least 1",
            });
        }
        if k + m > MAX_SHARDS {
            return Err(Error::InvalidProfile {
                k,
                m,
                reason: "k + m must be at most 256",
            });
        }
        if !chunk_size.is_power_of_two() || !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk_size)
        {
            return Err(Error::InvalidChunkSize {
                chunk_size: chunk_size.into(),
            });
        }
        Ok(Self {
            k: k as u16,
            m: m as u16,
            chunk_size,
        })
    }

    /// Data shards.
    #[must_use]
    pub fn k(&self) -> usize {
        self.k.into()
    }

    /// Parity shards.
    #[must_use]
    pub fn m(&self) -> usize {
        self.m.into()
    }

    /// All shards, `k + m`.
    #[must_use]
    pub fn total(&self) -> usize {
        self.k() + self.m()
    }

    /// Chunk length of full stripes.
    #[must_use]
    pub fn chunk_size(&self) -> usize {
        self.chunk_size as usize
    }

    /// Object bytes in a full stripe, `k * chunk_size`.
    #[must_use]
    pub fn stripe_size(&self) -> u64 {
        u64::from(self.k) * u64::from(self.chunk_size)
    }

    /// Stripes in an object of `len` bytes (0 for an empty object).
    #[must_use]
    pub fn stripe_count(&self, len: u64) -> u64 {
        len.div_ceil(self.stripe_size())
    }

    /// Stripe `index` of an object of `len` bytes, or `None` past the end.
    #[must_use]
    pub fn stripe(&self, len: u64, index: u64) -> Option<Stripe> {
        if index >= self.stripe_count(len) {
            return None;
        }
        let object_offset = index * self.stripe_size();
        // Bounded by stripe_size (<= 256 * 16 MiB), which fits in usize on 64-bit; on 32-bit
        // targets the daemon caps profiles so that a stripe fits in memory.
        let data_len = (len - object_offset).min(self.stripe_size()) as usize;
        Some(Stripe {
            index,
            object_offset,
            data_len,
            chunk_len: data_len.div_ceil(self.k()),
        })
    }

    /// Chunk bytes each shard holds for an object of `len` bytes (frames not counted).
    #[must_use]
    pub fn shard_data_len(&self, len: u64) -> u64 {
        let full = len / self.stripe_size();
        let tail = len % self.stripe_size();
        full * u64::from(self.chunk_size) + tail.div_ceil(u64::from(self.k))
    }

    /// The pieces of the object byte range `range` (clipped to `len`), each inside one
    /// data chunk, in object order. Ranged reads and near-data operations fetch exactly
    /// these bytes.
    #[must_use]
    pub fn spans(&self, len: u64, range: Range<u64>) -> Spans {
        Spans {
            layout: *self,
            len,
            pos: range.start.min(len),
            end: range.end.min(len),
        }
    }
}

/// Iterator returned by [`Layout::spans`].
#[derive(Clone, Debug)]
pub struct Spans {
    layout: Layout,
    len: u64,
    pos: u64,
    end: u64,
}

impl Iterator for Spans {
    type Item = ChunkSpan;

    fn next(&mut self) -> Option<ChunkSpan> {
        if self.pos >= self.end {
            return None;
        }
        let stripe = self
            .layout
            .stripe(self.len, self.pos / self.layout.stripe_size())?;
        let rel = (self.pos - stripe.object_offset) as usize;
        let chunk = rel / stripe.chunk_len;
        let offset = rel % stripe.chunk_len;
        let in_chunk = stripe.chunk_range(chunk).end - rel;
        let len = (in_chunk as u64).min(self.end - self.pos) as usize;
        let span = ChunkSpan {
            stripe: stripe.index,
            chunk,
            offset,
            len,
            object_offset: self.pos,
        };
        self.pos += len as u64;
        Some(span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_enforced() {
        assert!(Layout::new(4, 2, 3 * 4096).is_err());
        assert!(Layout::new(4, 2, 2048).is_err());
        assert!(Layout::new(4, 2, 32 * 1024 * 1024).is_err());
        assert!(Layout::new(0, 2, 4096).is_err());
        assert!(Layout::new(250, 7, 4096).is_err());
        assert!(Layout::new(4, 2, DEFAULT_CHUNK_SIZE).is_ok());
    }

    #[test]
    fn tail_stripe_shrinks_its_chunks() {
        let l = Layout::new(4, 2, 4096).unwrap();
        let len = 2 * 4 * 4096 + 10;
        assert_eq!(l.stripe_count(len), 3);
        let tail = l.stripe(len, 2).unwrap();
        assert_eq!((tail.data_len, tail.chunk_len), (10, 3));
        assert_eq!(tail.chunk_range(3), 9..10);
        assert_eq!(l.shard_data_len(len), 2 * 4096 + 3);
        assert!(l.stripe(len, 3).is_none());
        assert_eq!(l.stripe_count(0), 0);
        assert_eq!(l.shard_data_len(0), 0);
        // Fewer tail bytes than data chunks: the last chunks are all padding.
        let t = l.stripe(2, 0).unwrap();
        assert_eq!(
            (t.chunk_len, t.chunk_range(1), t.chunk_range(2)),
            (1, 1..2, 2..2)
        );
    }
}
