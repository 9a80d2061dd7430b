//! `oed-ec`: the erasure code of OED and the format its shards are stored in.
//!
//! Every object OED stores is cut into stripes of `k` chunks; each stripe is encoded into
//! `m` parity chunks; chunk `i` of every stripe goes to drive `i` as one shard file. This
//! crate does that arithmetic and nothing else: no async, no files, no network (the
//! format's reader and writer take any `std::io` stream).
//!
//! # Layout
//! - [`gf`]: GF(2^8) arithmetic and the lookup tables the kernels share.
//! - `matrix`: small matrices over GF(2^8); the encoding matrix and its inverses.
//! - [`codec`]: [`Codec`], a systematic Reed-Solomon code byte-identical to the
//!   `reed-solomon-erasure` crate: encode, verify, reconstruct any `<= m` lost shards,
//!   with decode matrices cached per erasure pattern.
//! - [`kernel`]: the per-byte work, with SIMD kernels picked at run time ([`Kernel`]):
//!   AVX-512 with GFNI or AVX2 on x86_64, Advanced SIMD on aarch64, NEON on armv7 (in C,
//!   see `build.rs`), and a portable fallback; all bit-identical.
//! - [`layout`]: [`Layout`], how an object maps to stripes and chunks and how an object
//!   byte range maps to the chunk spans that hold it.
//! - [`format`]: the shard file ([`ShardHeader`], [`ShardWriter`], [`ShardReader`]),
//!   specified byte by byte in `FORMAT.md`; every chunk carries a CRC32C.
//!   [`StreamVerifier`] checks a shard file arriving in pieces (a network upload).
//! - [`object`]: [`encode_object`], a whole small object into its shard files at once.
//! - [`error`]: the crate's one error type, [`Error`].
//! - [`limits`]: the bounds every profile and shard file is checked against (shards per
//!   stripe, chunk sizes); the bottom of the crate, so that errors can name them.
//!
//! # Example
//! ```
//! use oed_ec::Codec;
//! let codec = Codec::new(4, 2)?;
//! let mut shards: Vec<Vec<u8>> = (0..6).map(|i| vec![i as u8; 1024]).collect();
//! let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(Vec::as_mut_slice).collect();
//! codec.encode_shards(&mut refs)?;
//! let original = shards[1].clone();
//! let mut lost: Vec<Option<Vec<u8>>> = shards.into_iter().map(Some).collect();
//! lost[1] = None;
//! lost[4] = None;
//! codec.reconstruct_vecs(&mut lost)?;
//! assert_eq!(lost[1].as_deref(), Some(original.as_slice()));
//! # Ok::<(), oed_ec::Error>(())
//! ```

pub mod codec;
pub mod error;
pub mod format;
pub mod gf;
pub mod kernel;
pub mod layout;
pub mod limits;
mod matrix;
pub mod object;

pub use codec::Codec;
pub use error::{Error, Result};
pub use format::{
    Crc32cShift, ShardHeader, ShardReader, ShardWriter, StreamVerifier, bind_stripe, frame_crc,
    frame_crc_pieces,
};
pub use kernel::Kernel;
pub use layout::{ChunkSpan, Layout, Stripe};
pub use object::encode_object;
