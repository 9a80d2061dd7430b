//! Shard files written with `O_DIRECT` (`direct_io`): whole 4 KiB blocks go from one
//! aligned buffer ([`Direct`]) straight to the disk, with no copy into the page cache, no
//! writeback later and no page-cache pages to allocate, charge and reclaim; the last
//! partial block (and a header replaced at the end) go through the page cache.
//!
//! An upload on a connection of its own ([`receive`]) is read from the socket straight
//! into that buffer and checked there (every frame's CRC32C, and the seal) while the
//! bytes are in the CPU's cache: a received byte is copied once, from the socket, as a
//! spliced upload's is (into the page cache). Other uploads (a coordinator's own shard,
//! bodies of requests) copy their pieces into the buffer.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use tokio::io::AsyncReadExt;

use super::splice::RawUpload;
use super::{BodyCheck, UploadFile};
use oed_model::error::{Error, Result};
use oed_model::record::RecordTail;
use oed_model::seal::Seal;

/// The block size `O_DIRECT` writes are aligned to: the page size, which every device's
/// logical block size divides.
pub(crate) const DIRECT_ALIGN: usize = 4096;

/// Bytes staged in the aligned buffer per `O_DIRECT` write of an upload whose pieces
/// are copied in: the pieces of a write batch ([`super::WRITE_BATCH`]) are written on one
/// trip to a blocking thread, a few stages each.
pub(crate) const DIRECT_STAGE: usize = 128 * 1024;

/// The same for an upload read from its connection straight into the buffer
/// ([`receive`]): each full stage is one trip to a blocking thread, so it is as large as
/// a write batch. Against 256 KiB, a cluster's PUTs cost about 8% less CPU per byte, for
/// 2 MiB more of a drive's memory with eight uploads coming in (`docs/results.md`,
/// "Direct I/O").
pub(crate) const RAW_STAGE: usize = super::WRITE_BATCH;

/// Temp files opened with `O_DIRECT` by this process (for the tests).
pub(crate) static DIRECT_FILES: AtomicU64 = AtomicU64::new(0);

/// Logs once per process that the file system refused `O_DIRECT`.
pub(super) fn refused(e: &std::io::Error) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(error = %e, "direct_io: the data file system refuses O_DIRECT; writing through the page cache");
    });
}

/// The state of an upload's file written with `O_DIRECT`: the bytes not yet written, in a
/// buffer that starts on a block boundary (less than a block between batches), and where
/// they go in the file.
pub(super) struct Direct {
    /// Aligned at its start, with room for `stage` bytes; never grown (a new allocation
    /// would lose the alignment). Not zeroed: only bytes received are read.
    buf: BytesMut,
    stage: usize,
    offset: u64,
}

impl Direct {
    /// A buffer of `stage` bytes (a multiple of [`DIRECT_ALIGN`]).
    pub(super) fn new(stage: usize) -> Self {
        debug_assert!(stage > 0 && stage.is_multiple_of(DIRECT_ALIGN));
        let mut buf = BytesMut::with_capacity(stage + DIRECT_ALIGN);
        let pad = buf.as_ptr().align_offset(DIRECT_ALIGN);
        assert!(pad < DIRECT_ALIGN, "a byte buffer can be aligned");
        buf.put_bytes(0, pad);
        buf.advance(pad);
        Self {
            buf,
            stage,
            offset: 0,
        }
    }

    /// Room left in the stage.
    fn room(&self) -> usize {
        self.stage - self.buf.len()
    }

    /// Whether the stage is full: it is written before more comes in.
    pub(super) fn full(&self) -> bool {
        self.room() == 0
    }

    /// Copies `data` into the buffer, writing each full stage (whole blocks) to `f`. On
    /// an error, also says how much of `data` the buffer took (still staged, unwritten).
    pub(super) fn write(
        &mut self,
        f: &std::fs::File,
        data: &[u8],
    ) -> Result<(), (usize, std::io::Error)> {
        let mut taken = 0;
        while taken < data.len() {
            let take = self.room().min(data.len() - taken);
            self.buf.extend_from_slice(&data[taken..taken + take]);
            taken += take;
            if self.full() {
                self.flush_blocks(f).map_err(|e| (taken, e))?;
            }
        }
        Ok(())
    }

    /// Writes the whole blocks staged and keeps the rest (less than a block).
    pub(super) fn flush_blocks(&mut self, f: &std::fs::File) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let whole = self.buf.len() / DIRECT_ALIGN * DIRECT_ALIGN;
        if whole == 0 {
            return Ok(());
        }
        f.write_all_at(&self.buf[..whole], self.offset)?;
        self.offset += whole as u64;
        let rest = self.buf.len() - whole;
        self.buf.copy_within(whole.., 0);
        self.buf.truncate(rest);
        Ok(())
    }

    /// Writes what is left (less than a block, at the end of the file) through `f`, a
    /// descriptor without `O_DIRECT`; returns where the file's bytes end.
    pub(super) fn finish(&mut self, f: &std::fs::File) -> std::io::Result<u64> {
        use std::os::unix::fs::FileExt;
        f.write_all_at(&self.buf, self.offset)?;
        self.offset += self.buf.len() as u64;
        self.buf.clear();
        Ok(self.offset)
    }

    /// Reads at most `max` bytes (and no more than the stage has room for) from `up`
    /// into the stage, and checks them with `check`; returns how many (0: the connection
    /// ended).
    async fn read_from(
        &mut self,
        up: &mut RawUpload,
        check: &mut BodyCheck,
        max: usize,
    ) -> Result<usize> {
        let before = self.buf.len();
        let want = self.room().min(max);
        debug_assert!(want > 0, "a full stage is written before it is read into");
        let start = self.buf.as_ptr().addr();
        // Into the buffer's own room: `limit` keeps the read inside it, so it never
        // grows (and moves) the buffer.
        let n = up
            .read_buf(&mut (&mut self.buf).limit(want))
            .await
            .map_err(|e| Error::BodyBroken(e.to_string()))?;
        debug_assert_eq!(
            start,
            self.buf.as_ptr().addr(),
            "the stage stays where it is aligned"
        );
        check.feed(&self.buf[before..before + n])?;
        Ok(n)
    }
}

/// Whether `file`'s upload is received by [`receive`]: it is asked to be written with
/// `O_DIRECT`, over any connection.
pub(super) fn takes(file: &UploadFile) -> bool {
    file.want_direct
}

/// Receives a whole shard file from `up` into `file` (see the module docs), checking it
/// as [`super::Upload::receive`] does: the header must be `expected`, every frame's CRC32C
/// must match, and the file must end after its last frame, where the record tail
/// follows when `with_tail` is set, then the tag of `seal` when there is one. Returns the
/// tail. Where the file system refuses `O_DIRECT`, the rest of the file is read into
/// buffers and written through the page cache.
/// `received` counts the uploads read into the aligned buffer (the file system took
/// `O_DIRECT`).
pub(super) async fn receive(
    file: &mut Box<UploadFile>,
    up: &mut RawUpload,
    expected: &oed_ec::ShardHeader,
    (with_tail, fsync): (bool, bool),
    seal: Option<Seal>,
    received: &AtomicU64,
) -> Result<Option<RecordTail>> {
    let file_len = expected.file_len();
    let limit = super::after_file_limit(with_tail, seal.is_some());
    let mut check = BodyCheck::new(seal);
    let tail = super::splice::read_head(file, up, &mut check, expected, limit).await?;
    let mut pos = check.bytes_seen();
    if check.header().is_some() && pos < file_len {
        // Opens the file, and stages the header.
        file.direct_stage = RAW_STAGE;
        file.write_batch(fsync).await?;
        if file.direct.is_some() {
            received.fetch_add(1, Ordering::Relaxed);
        }
        // Where `O_DIRECT` is refused: what each read leaves of this buffer's room is
        // read into by the next, so small reads share an allocation (not one each).
        let mut spare = BytesMut::new();
        while pos < file_len {
            let left = usize::try_from(file_len - pos).unwrap_or(usize::MAX);
            let n = match file.direct.as_mut() {
                Some(direct) => {
                    let n = direct.read_from(up, &mut check, left).await?;
                    // The file's length so far (pieces pushed count themselves).
                    file.len += n as u64;
                    n
                }
                None => read_piece(file, up, &mut check, &mut spare, left).await?,
            };
            if n == 0 {
                break;
            }
            pos += n as u64;
            let stage_full = file.direct.as_ref().is_some_and(Direct::full);
            if stage_full || file.pending_len >= super::WRITE_BATCH {
                file.write_batch(fsync).await?;
            }
        }
    }
    super::splice::after_file(up, check, tail, pos == file_len, limit, with_tail).await
}

/// Reads at most `max` bytes of the file from `up` into the room left in `spare` (a new
/// buffer of [`oed_model::config::READ_BUFFER_MAX`] when little is left), checks them and
/// queues them for `file`, for a file written through the page cache; returns how many
/// (0: the connection ended). The pieces of one buffer share its allocation, so an
/// upload holds about what is queued, however small its reads.
async fn read_piece(
    file: &mut UploadFile,
    up: &mut RawUpload,
    check: &mut BodyCheck,
    spare: &mut BytesMut,
    max: usize,
) -> Result<usize> {
    if spare.capacity() < DIRECT_ALIGN {
        *spare = BytesMut::with_capacity(oed_model::config::READ_BUFFER_MAX);
    }
    let want = spare.capacity().min(max);
    let n = up
        .read_buf(&mut (&mut *spare).limit(want))
        .await
        .map_err(|e| Error::BodyBroken(e.to_string()))?;
    if n > 0 {
        let piece: Bytes = spare.split().freeze();
        check.feed(&piece)?;
        file.push(piece);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stage starts on a block boundary, takes pieces of any size, writes whole blocks
    /// only and keeps the rest at its start, and finishes with the rest: the file holds
    /// every byte in order.
    #[test]
    fn the_stage_writes_whole_blocks_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = std::fs::File::create(&path).unwrap();
        let mut d = Direct::new(RAW_STAGE);
        assert_eq!(d.buf.as_ptr().align_offset(DIRECT_ALIGN), 0);
        assert_eq!(d.room(), RAW_STAGE);
        let data: Vec<u8> = (0..(2 * RAW_STAGE + 5000))
            .map(|i| (i % 251) as u8)
            .collect();
        for piece in data.chunks(70_001) {
            d.write(&f, piece).unwrap();
            assert!(!d.full());
        }
        assert_eq!(d.offset, 2 * RAW_STAGE as u64);
        assert_eq!(d.buf.len(), 5000);
        d.flush_blocks(&f).unwrap();
        assert_eq!(d.offset, 2 * RAW_STAGE as u64 + 4096);
        assert_eq!(d.buf.len(), 5000 - 4096);
        assert_eq!(d.buf.as_ptr().align_offset(DIRECT_ALIGN), 0);
        assert_eq!(d.finish(&f).unwrap(), data.len() as u64);
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }
}
