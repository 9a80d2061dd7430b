//! Compression of an object's runs, each into a frame of its own: zstd (RFC 8878) or
//! LZ4 (its frame format). A stream may be a sequence of independent frames in both
//! formats, so the frames of an object's runs, concatenated in object order, are one
//! valid stream that `zstd -d` or `lz4 -d` restore. On the drives, a run is a stored
//! chunk (1 MiB for large objects), so each drive compresses its own chunks and the result
//! depends on the object's layout, as any compressor's output depends on its block size.
//!
//! The **estimate** compresses the same way and keeps only the sizes: what `compress`
//! would write, exactly, without writing it.

// Ratios are floats.
#![allow(clippy::cast_precision_loss)]

use std::io::Write as _;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The codecs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// Zstandard.
    #[default]
    Zstd,
    /// LZ4 frames.
    Lz4,
}

/// Zstandard levels taken: 1 (fast) to 19. The levels above need far more memory than a
/// drive has to spare.
pub const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = 1..=19;

/// How to compress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compress {
    /// The codec (default zstd).
    #[serde(default)]
    pub codec: Codec,
    /// The zstd level (default 3); LZ4 has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<i32>,
}

/// What the `compress` operation writes: the object's runs compressed, into a new
/// object `target` of the same bucket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompressTo {
    /// The codec and level.
    #[serde(flatten)]
    pub how: Compress,
    /// The key of the object written.
    pub target: String,
}

/// What the `decompress` operation writes: the object, a stream of frames of `codec`,
/// decompressed into a new object `target`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecompressTo {
    /// The codec (default zstd).
    #[serde(default)]
    pub codec: Codec,
    /// The key of the object written.
    pub target: String,
}

/// Most bytes one compressed byte may expand to: a stream that would grow more is
/// refused as a decompression bomb.
pub const MAX_EXPANSION: u64 = 1024;
/// Most bytes a decompressed object may have.
pub const MAX_DECOMPRESSED: u64 = 64 << 30;

/// Decompresses `input`, a stream of concatenated frames of `codec`, handing `out` the
/// bytes a piece at a time (1 MiB at most); stops, refused, past `limit` bytes. Blocks.
///
/// # Errors
/// [`Error::BadArgument`] when `input` is not such a stream, or grows past `limit`; what
/// `out` fails with.
pub fn decode_stream<R: std::io::Read>(
    codec: Codec,
    input: R,
    limit: u64,
    out: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<u64> {
    use std::io::BufRead as _;
    let fail = |e: std::io::Error| Error::BadArgument(format!("not a {codec:?} stream: {e}"));
    let mut total = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    let mut pump = |r: &mut dyn std::io::Read, total: &mut u64| -> Result<()> {
        loop {
            let n = r.read(&mut buf).map_err(fail)?;
            if n == 0 {
                return Ok(());
            }
            *total += n as u64;
            if *total > limit {
                return Err(Error::BadArgument(format!(
                    "the stream decompresses to more than {limit} bytes"
                )));
            }
            out(&buf[..n])?;
        }
    };
    let mut input = std::io::BufReader::new(input);
    match codec {
        Codec::Zstd => {
            let mut d = zstd::stream::read::Decoder::with_buffer(input).map_err(fail)?;
            pump(&mut d, &mut total)?;
        }
        Codec::Lz4 => {
            // One decoder per frame: each ends where its frame does.
            while !input.fill_buf().map_err(fail)?.is_empty() {
                let mut d = lz4_flex::frame::FrameDecoder::new(&mut input);
                pump(&mut d, &mut total)?;
            }
        }
    }
    Ok(total)
}

/// Frames of consecutive runs, concatenated.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frames {
    /// Bytes compressed.
    pub input: u64,
    /// Frames.
    pub frames: u64,
    /// The frames, base64.
    #[serde(with = "crate::b64")]
    pub bytes: Vec<u8>,
}

/// Sizes before and after compression.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sizes {
    /// Bytes in.
    pub input: u64,
    /// Bytes out.
    pub output: u64,
    /// Frames written.
    pub frames: u64,
}

impl Sizes {
    /// Both sizes added.
    #[must_use]
    pub fn plus(self, o: Sizes) -> Sizes {
        Sizes {
            input: self.input + o.input,
            output: self.output + o.output,
            frames: self.frames + o.frames,
        }
    }

    /// The answer of an estimate.
    #[must_use]
    pub fn result(&self, c: &Compress) -> serde_json::Value {
        serde_json::json!({
            "codec": c.codec,
            "level": c.level(),
            "input_bytes": self.input,
            "output_bytes": self.output,
            "frames": self.frames,
            // Output over input: 0.25 means a quarter of the size.
            "ratio": if self.input == 0 { 1.0 } else { self.output as f64 / self.input as f64 },
            "saved_bytes": self.input.saturating_sub(self.output),
        })
    }
}

impl Compress {
    /// The zstd level that applies (None for LZ4).
    #[must_use]
    pub fn level(&self) -> Option<i32> {
        match self.codec {
            Codec::Zstd => Some(self.level.unwrap_or(3)),
            Codec::Lz4 => None,
        }
    }

    /// Checks the parameters.
    ///
    /// # Errors
    /// [`Error::BadArgument`] for a level out of range or given to LZ4.
    pub fn validate(&self) -> Result<()> {
        match (self.codec, self.level) {
            (Codec::Lz4, Some(_)) => Err(Error::BadArgument("lz4 takes no level".into())),
            (Codec::Zstd, Some(l)) if !ZSTD_LEVELS.contains(&l) => Err(Error::BadArgument(
                format!("zstd level must be between 1 and 19, got {l}"),
            )),
            _ => Ok(()),
        }
    }

    /// `bytes` as one frame.
    ///
    /// # Errors
    /// [`Error::BadArgument`] when the codec fails (it does not on valid parameters).
    pub fn frame(&self, bytes: &[u8]) -> Result<Vec<u8>> {
        let fail = |e: std::io::Error| Error::BadArgument(format!("compression failed: {e}"));
        match self.codec {
            Codec::Zstd => zstd::bulk::compress(bytes, self.level.unwrap_or(3)).map_err(fail),
            Codec::Lz4 => {
                let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::with_capacity(
                    lz4_flex::block::get_maximum_output_size(bytes.len()) + 32,
                ));
                enc.write_all(bytes).map_err(fail)?;
                enc.finish()
                    .map_err(|e| Error::BadArgument(format!("compression failed: {e}")))
            }
        }
    }

    /// The sizes of `bytes` as one frame.
    ///
    /// # Errors
    /// As [`Compress::frame`].
    pub fn sizes(&self, bytes: &[u8]) -> Result<Sizes> {
        Ok(Sizes {
            input: bytes.len() as u64,
            output: self.frame(bytes)?.len() as u64,
            frames: 1,
        })
    }
}

/// Decompresses a whole stream of concatenated frames (tests, and the check of what
/// `compress` wrote).
///
/// # Errors
/// [`Error::BadArgument`] for bytes that are not a stream of the codec.
pub fn decompress(codec: Codec, stream: &[u8]) -> Result<Vec<u8>> {
    use std::io::Read as _;
    let fail = |e: std::io::Error| Error::BadArgument(format!("not a {codec:?} stream: {e}"));
    let mut out = Vec::new();
    match codec {
        Codec::Zstd => {
            zstd::stream::read::Decoder::new(stream)
                .map_err(fail)?
                .read_to_end(&mut out)
                .map_err(fail)?;
        }
        Codec::Lz4 => {
            // The decoder ends at the end of a frame; the next one follows.
            let mut rest = std::io::Cursor::new(stream);
            while (rest.position() as usize) < stream.len() {
                let at = rest.position();
                lz4_flex::frame::FrameDecoder::new(&mut rest)
                    .read_to_end(&mut out)
                    .map_err(fail)?;
                if rest.position() == at {
                    return Err(Error::BadArgument(format!(
                        "not an lz4 stream: nothing decoded at byte {at}"
                    )));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| b"the quick brown fox jumps over the lazy dog\n"[i % 44])
            .collect()
    }

    /// Frames of runs, concatenated, decompress to the whole, in both codecs; the sizes
    /// the estimate gives are those of the frames.
    #[test]
    fn frames_of_runs_make_one_stream() {
        let bytes = text(300_000);
        for c in [
            Compress {
                codec: Codec::Zstd,
                level: Some(1),
            },
            Compress {
                codec: Codec::Lz4,
                level: None,
            },
        ] {
            c.validate().unwrap();
            let mut stream = Vec::new();
            let mut sizes = Sizes::default();
            for run in bytes.chunks(65_536) {
                let f = c.frame(run).unwrap();
                sizes = sizes.plus(c.sizes(run).unwrap());
                stream.extend_from_slice(&f);
            }
            assert_eq!(sizes.output, stream.len() as u64);
            assert_eq!((sizes.input, sizes.frames), (300_000, 5));
            assert!(sizes.output < sizes.input / 10, "{c:?}: {sizes:?}");
            assert!(
                decompress(c.codec, &stream).unwrap() == bytes,
                "{c:?}: the frames do not restore the runs"
            );
        }
    }

    /// Streams of frames decode in pieces, in both codecs; a bomb stops at its limit.
    #[test]
    fn streams_decode_piece_by_piece_within_a_limit() {
        let bytes = text(500_000);
        for c in [
            Compress {
                codec: Codec::Zstd,
                level: Some(3),
            },
            Compress {
                codec: Codec::Lz4,
                level: None,
            },
        ] {
            let stream: Vec<u8> = bytes
                .chunks(100_000)
                .flat_map(|r| c.frame(r).unwrap())
                .collect();
            let mut got = Vec::new();
            let n = decode_stream(c.codec, stream.as_slice(), u64::MAX, &mut |b| {
                got.extend_from_slice(b);
                Ok(())
            })
            .unwrap();
            assert!(n == 500_000 && got == bytes, "{c:?}");
            let e = decode_stream(c.codec, stream.as_slice(), 1000, &mut |_| Ok(())).unwrap_err();
            assert!(e.to_string().contains("more than 1000"), "{e}");
            assert!(decode_stream(c.codec, &b"garbage"[..], u64::MAX, &mut |_| Ok(())).is_err());
        }
    }

    #[test]
    fn bad_levels_are_refused() {
        for (codec, level) in [(Codec::Zstd, 0), (Codec::Zstd, 22), (Codec::Lz4, 1)] {
            let c = Compress {
                codec,
                level: Some(level),
            };
            assert!(c.validate().is_err(), "{c:?}");
        }
        assert!(decompress(Codec::Zstd, b"not zstd").is_err());
    }
}
