//! The `compress` operation: an object compressed into a new object of the same bucket,
//! without its bytes crossing the network. Each data drive compresses its own chunks, one
//! frame per chunk; the coordinator gathers the frames of a window of stripes in object
//! order (rebuilding from parity what a drive could not compress, as every operation
//! does) and writes them as one part of the new object through the usual erasure-coded
//! write, then the next window. The new object is a multipart object of those parts: a
//! sequence of frames, which is one valid zstd or LZ4 stream. Only one window of frames
//! is held at a time, whatever the object's size.

use std::sync::Arc;

use oed_ops::compress::Sizes;
use oed_ops::op::{Op, Partial};

use super::coordinator::{Cost, Outcome, Window, bad, extent_stripes, plan_for, windows};
use super::parts::NewParts;
use crate::Cluster;
use oed_model::error::{Error, Result};
use oed_model::record::ObjectRecord;

/// Stripes whose frames make one part of the new object.
const WINDOW: u64 = 8;

impl Cluster {
    /// Runs a `compress` operation over the current version of `record`'s object; see
    /// the module docs. The answer says what was written: `target`, its `etag`, and the
    /// sizes.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for an operation that is not `compress` or parameters it
    /// refuses; as [`Cluster::run_op`] and [`Cluster::put_object`] otherwise. Parts
    /// written before a failure are deleted.
    pub async fn compress(
        self: &Arc<Self>,
        record: &ObjectRecord,
        op: Op,
        range: Option<std::ops::Range<u64>>,
    ) -> Result<Outcome> {
        let window = Window::open(self);
        let Op::Compress(to) = &op else {
            return Err(Error::BadRequest("not a compress operation".into()));
        };
        let target = to.target.clone();
        let content_type = match to.how.codec {
            oed_ops::compress::Codec::Zstd => "application/zstd",
            oed_ops::compress::Codec::Lz4 => "application/x-lz4",
        };
        let (plan, exts) = plan_for(record, op.clone(), range)?;
        let mut cost = Cost {
            object_bytes: plan.object_len,
            passes: 1,
            ..Cost::default()
        };
        let mut out = NewParts::new(self, &record.bucket);
        let mut sizes = Sizes::default();
        let written = async {
            for (ext, base, stripes) in extent_stripes(&plan, &exts) {
                for window in windows(stripes, WINDOW) {
                    let mut got = self
                        .gather(&record.bucket, ext, base, &plan, window, &mut cost)
                        .await?;
                    got.sort_by_key(|(stripe, shard, _)| (*stripe, *shard));
                    // The frames in object order, each as it came: the part is their
                    // concatenation, written without joining them.
                    let mut frames = Vec::with_capacity(got.len());
                    for (_, _, p) in got {
                        let Partial::Frames(f) = p else {
                            return Err(Error::BadRequest("not frames".into()));
                        };
                        sizes = sizes.plus(Sizes {
                            input: f.input,
                            output: f.bytes.len() as u64,
                            frames: f.frames,
                        });
                        frames.push(bytes::Bytes::from(f.bytes));
                    }
                    out.push(frames).await?;
                }
            }
            if out.bytes() == 0 {
                // An empty object: one frame of nothing, a valid empty stream.
                let Partial::Frames(f) = plan.run(0, &[]).map_err(|e| bad(&e))? else {
                    return Err(Error::BadRequest("not frames".into()));
                };
                sizes.output += f.bytes.len() as u64;
                sizes.frames += 1;
                out.push(vec![bytes::Bytes::from(f.bytes)]).await?;
            }
            Ok(())
        }
        .await;
        // The frames went out to the drives of the new object, with their parity.
        cost.network_bytes += out.network_bytes();
        let done = out.finish(written, &target, content_type).await?;
        let mut result = sizes.result(&to.how);
        result["target"] = target.into();
        result["etag"] = done.etag.into();
        result["parts"] = done.parts.into();
        window.close(&mut cost);
        Ok(Outcome { result, cost })
    }
}

/// Bytes of the decompressed object per part written.
const DECOMPRESSED_PART: usize = 8 << 20;

/// A blocking reader over the pieces an async task sends.
struct Pieces {
    rx: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    piece: bytes::Bytes,
}

impl std::io::Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.piece.is_empty() {
            match self.rx.blocking_recv() {
                Some(p) => self.piece = p,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.piece.len());
        buf[..n].copy_from_slice(&self.piece.split_to(n));
        Ok(n)
    }
}

impl Cluster {
    /// Runs a `decompress` operation: `record`'s object, a stream of zstd or LZ4 frames,
    /// decompressed into a new object. Frames do not line up with the object's chunks, so
    /// the coordinator reads the object in order, decodes it on a blocking thread, and
    /// writes the result by parts of 8 MiB, holding one at a time. The result may have at
    /// most [`MAX_EXPANSION`](oed_ops::compress::MAX_EXPANSION) times the object's bytes
    /// and [`MAX_DECOMPRESSED`](oed_ops::compress::MAX_DECOMPRESSED) in all.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for an object that is not such a stream, or that grows past
    /// the limits; as [`Cluster::read_object`] and [`Cluster::put_object`] otherwise.
    /// Parts written before a failure are deleted.
    pub async fn decompress(self: &Arc<Self>, record: &ObjectRecord, op: Op) -> Result<Outcome> {
        use futures_util::StreamExt as _;
        let window = Window::open(self);
        let Op::Decompress(to) = &op else {
            return Err(Error::BadRequest("not a decompress operation".into()));
        };
        let n = record.object_size();
        let limit = n
            .saturating_mul(oed_ops::compress::MAX_EXPANSION)
            .clamp(1 << 20, oed_ops::compress::MAX_DECOMPRESSED);
        let mut body = self.read_object(record, 0..n).await?;
        let (in_tx, mut out_rx, decoder) = spawn_decoder(to.codec, limit);
        let feed = async move {
            while let Some(piece) = body.next().await {
                let piece =
                    piece.map_err(|e| Error::Unavailable(format!("reading the object: {e}")))?;
                if in_tx.send(piece).await.is_err() {
                    break; // the decoder stopped; it says why
                }
            }
            Ok::<(), Error>(())
        };
        let mut out = NewParts::new(self, &record.bucket);
        let write = async {
            while let Some(block) = out_rx.recv().await {
                out.push(vec![bytes::Bytes::from(block)]).await?;
            }
            Ok::<(), Error>(())
        };
        let (fed, wrote) = tokio::join!(feed, write);
        let decoded = decoder
            .await
            .map_err(|e| Error::Unavailable(format!("the decoder failed: {e}")))?;
        let written = (|| {
            fed?;
            wrote?;
            decoded.map(|_| ()).map_err(|e| bad(&e))
        })();
        let network = n + out.network_bytes();
        let done = out
            .finish(written, &to.target, "application/octet-stream")
            .await?;
        let (etag, total) = (done.etag, done.bytes);
        let mut cost = Cost {
            object_bytes: n,
            coordinator_bytes: n,
            network_bytes: network,
            passes: 1,
            ..Cost::default()
        };
        window.close(&mut cost);
        let result = serde_json::json!({
            "target": to.target,
            "etag": etag,
            "parts": done.parts,
            "codec": to.codec,
            "input_bytes": n,
            "output_bytes": total,
        });
        Ok(Outcome { result, cost })
    }
}

/// The decoder's thread: the bytes it decompressed, or why it stopped.
type Decoding = tokio::task::JoinHandle<std::result::Result<u64, oed_ops::Error>>;

/// A decoder of `codec` frames on a blocking thread: the compressed pieces go in, blocks
/// of about 8 MiB of decompressed bytes come out, and the thread ends with the total, or
/// why it stopped.
fn spawn_decoder(
    codec: oed_ops::compress::Codec,
    limit: u64,
) -> (
    tokio::sync::mpsc::Sender<bytes::Bytes>,
    tokio::sync::mpsc::Receiver<Vec<u8>>,
    Decoding,
) {
    let (in_tx, in_rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(4);
    let (out_tx, out_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(2);
    let decoder = tokio::task::spawn_blocking(move || {
        let mut block = Vec::with_capacity(DECOMPRESSED_PART);
        let input = Pieces {
            rx: in_rx,
            piece: bytes::Bytes::new(),
        };
        let total = oed_ops::compress::decode_stream(codec, input, limit, &mut |b| {
            block.extend_from_slice(b);
            if block.len() >= DECOMPRESSED_PART {
                let full = std::mem::replace(&mut block, Vec::with_capacity(DECOMPRESSED_PART));
                out_tx
                    .blocking_send(full)
                    .map_err(|_| oed_ops::Error::BadArgument("the writer went away".into()))?;
            }
            Ok(())
        })?;
        if !block.is_empty() {
            let _ = out_tx.blocking_send(block);
        }
        Ok(total)
    });
    (in_tx, out_rx, decoder)
}
