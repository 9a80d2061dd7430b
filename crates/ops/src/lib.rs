//! `oed-ops`: the kernels of the operations OED runs where the data lies. Like `oed-ec`,
//! it is pure computation (no async, no files, no network), so that every drive and
//! every target (x86_64, aarch64, armv7) runs the same code, and so that it can be
//! tested and benchmarked on its own.
//!
//! Each kernel folds over byte runs at known object offsets into a small state that the
//! daemon carries from piece to piece; those that run on several drives at once (the
//! near-data operations to come) also merge partial states exactly, in object order.
//!
//! # Layout
//! - [`md5`]: MD5 for S3's `ETag` and `Content-MD5`, incremental and over several
//!   independent streams at once (the write path hashes concurrent uploads together).

pub mod md5;
