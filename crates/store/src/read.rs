//! Reading a stored shard: where its bytes are ([`Store::shard`]), its stripes streamed
//! with every chunk's CRC32C checked ([`Store::read_stripes`]), and what a failed read
//! notes for heal.

use std::io::Read;
use std::ops::ControlFlow;

use bytes::Bytes;
use tokio::sync::mpsc;

use oed_model::error::{Error, Result};
use oed_model::record::{ObjectRecord, VersionId};

use crate::{ShardBytes, ShardFile, Store};

impl Store {
    /// Whether the bytes of `record`'s shard are here (inline, or a file that exists).
    #[must_use]
    pub fn shard_held(&self, record: &ObjectRecord) -> bool {
        match self.shard(&record.bucket, &record.key, Some(record.version_id)) {
            Ok((_, ShardBytes::Inline(_))) => true,
            Ok((_, ShardBytes::File(f))) => f.path().try_exists().unwrap_or(true),
            Err(_) => false,
        }
    }

    /// Where the bytes of the stored shard of `bucket`/`key` are, with its record.
    /// `version`, when given, must be the stored one.
    ///
    /// # Errors
    /// [`Error::NotFound`] when no such object (or version) is stored here.
    pub fn shard(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<(ObjectRecord, ShardBytes)> {
        let rec = self
            .meta
            .object(bucket, key)?
            .ok_or(Error::NotFound(oed_model::error::Missing::Object))?;
        if version.is_some_and(|v| v != rec.version_id) {
            return Err(Error::NotFound(oed_model::error::Missing::ObjectVersion));
        }
        if let Some(data) = self.meta.inline_shard(bucket, key, rec.version_id)? {
            return Ok((rec, ShardBytes::Inline(data)));
        }
        let path = self.record_path(&rec);
        // Registered before anyone opens it: the file is not reused while it is read.
        let file = ShardFile {
            _reading: self.pool.reading(&path),
            path,
        };
        Ok((rec, ShardBytes::File(file)))
    }
}

impl Store {
    /// Reads and checks stripes `from..to` of `record`'s shard, whose bytes
    /// [`Store::shard`] gave, on a blocking thread: each chunk's bytes (CRC32C checked,
    /// CRC stripped) arrive on the returned channel, one read ahead of the receiver. A
    /// bad or missing chunk is logged and queued for heal ([`MetaStore::queue_corrupt`]),
    /// and arrives as [`Error::CorruptShard`] naming its stripe, which ends the stream.
    /// Reading stops when the receiver is dropped.
    #[must_use]
    pub fn read_stripes(
        &self,
        record: ObjectRecord,
        bytes: ShardBytes,
        from: u64,
        to: u64,
    ) -> mpsc::Receiver<Result<Bytes>> {
        let (tx, rx) = mpsc::channel(1);
        let store = self.clone();
        // The read outlives the call: it logs in the span of the request it serves.
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _in = span.enter();
            let Err(e) = read_stripes_into(bytes, from, to, &tx) else {
                return;
            };
            let _ = tx.blocking_send(Err(store.failed_read(&record, e)));
        });
        rx
    }
}

impl Store {
    /// Hands `f` each chunk of stripes `from..to` of the shard whose bytes [`Store::shard`]
    /// gave, as [`for_each_chunk`] does; a bad chunk is noted as a read's is
    /// ([`Store::failed_read`]) and returned. Blocks.
    ///
    /// # Errors
    /// [`Error::CorruptShard`] naming the bad chunk's stripe; [`Error::Io`].
    pub(crate) fn fold_chunks(
        &self,
        record: &ObjectRecord,
        bytes: ShardBytes,
        stripes: std::ops::Range<u64>,
        f: &mut dyn FnMut(u64, Vec<u8>) -> ControlFlow<()>,
    ) -> Result<()> {
        for_each_chunk(bytes, stripes.start, stripes.end, f)
            .map_err(|e| self.failed_read(record, e))
    }

    /// The CRC32C stored with the chunk of each stripe of `stripes` (its frame's CRC with
    /// the stripe number taken off): what was written, read without the chunks, 4 bytes a
    /// stripe. Only stripes whose chunks are all data (every stripe but the last).
    ///
    /// # Errors
    /// [`Error::CorruptShard`] for a shard file shorter than its frames; I/O errors.
    pub(crate) fn chunk_crcs(
        &self,
        record: &ObjectRecord,
        bytes: &ShardBytes,
        stripes: std::ops::Range<u64>,
    ) -> Result<Vec<u32>> {
        stored_crcs(record, bytes, stripes).map_err(|e| self.failed_read(record, e))
    }

    /// The disk could not read the chunk of stripe `stripe` of `record`'s shard while it
    /// was sent from the file: it is noted as a bad chunk of a read is
    /// ([`Store::failed_read`]).
    pub fn read_failed(&self, record: &ObjectRecord, stripe: u64) {
        let _ = self.failed_read(record, Error::CorruptShard { stripe });
    }

    /// A shard read failed: when a chunk was bad, logs it and queues the shard for heal.
    fn failed_read(&self, record: &ObjectRecord, e: Error) -> Error {
        let Error::CorruptShard { stripe } = e else {
            return e;
        };
        if !self.still_stored(record) {
            return Error::NotFound(oed_model::error::Missing::ObjectVersion);
        }
        tracing::error!(bucket = %record.bucket, key = %record.key, stripe, "stored shard is corrupt");
        if let Err(q) = self
            .meta
            .queue_corrupt(record, oed_model::heal::HealCause::ReadCorrupt)
        {
            tracing::warn!(error = %q, "heal queue");
        }
        e
    }

    /// Whether `record`'s version is still stored here in the file it names (current, or
    /// kept for its replacement's settlement). A read that fails on a version replaced or
    /// deleted since it began, or stored again in another file (a heal's copy), lost a
    /// race with that write (its file went away under it), which is no sign of a corrupt
    /// disk: it is not counted or healed. An error reading the records counts as stored.
    pub(crate) fn still_stored(&self, record: &ObjectRecord) -> bool {
        let (b, k, v) = (&record.bucket, &record.key, record.version_id);
        let same = |r: &ObjectRecord| r.version_id == v && r.file == record.file;
        // Both read under the key's commit lock: a version moved between the two meanwhile
        // (a kept version restored) is not missed.
        let _guard = self.lock_for(b, k);
        match (self.meta.object(b, k), self.meta.kept(b, k)) {
            (Ok(cur), Ok(kept)) => {
                cur.is_some_and(|c| same(&c)) || kept.is_some_and(|c| same(&c.record))
            }
            _ => true,
        }
    }
}

/// [`Store::chunk_crcs`], without the heal queue.
fn stored_crcs(
    record: &ObjectRecord,
    bytes: &ShardBytes,
    stripes: std::ops::Range<u64>,
) -> Result<Vec<u32>> {
    let chunk = u64::from(record.chunk_size);
    let frame = chunk + oed_ec::format::CRC_LEN as u64;
    let at = |s: u64| oed_ec::format::HEADER_LEN as u64 + s * frame + chunk;
    let mut out = Vec::with_capacity(usize::try_from(stripes.end - stripes.start).unwrap_or(0));
    let mut b = [0u8; 4];
    let file = match bytes {
        ShardBytes::File(path) => match std::fs::File::open(path) {
            Ok(f) => {
                // 4 bytes a chunk: no readahead of the chunks around them. Advice only;
                // a kernel that refuses it reads as usual.
                let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random);
                Some(f)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::CorruptShard {
                    stripe: stripes.start,
                });
            }
            Err(e) => return Err(e.into()),
        },
        ShardBytes::Inline(_) => None,
    };
    for s in stripes {
        match (&file, bytes) {
            (Some(f), _) => {
                use std::os::unix::fs::FileExt as _;
                f.read_exact_at(&mut b, at(s)).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        Error::CorruptShard { stripe: s }
                    } else {
                        e.into()
                    }
                })?;
            }
            (None, ShardBytes::Inline(data)) => {
                let o = usize::try_from(at(s)).unwrap_or(usize::MAX);
                let got = data
                    .get(o..o.saturating_add(4))
                    .filter(|g| g.len() == 4)
                    .ok_or(Error::CorruptShard { stripe: s })?;
                b.copy_from_slice(got);
            }
            (None, ShardBytes::File(_)) => unreachable!("opened above"),
        }
        out.push(oed_ops::checksum::crc32c_unappend(
            u32::from_le_bytes(b),
            &s.to_le_bytes(),
        ));
    }
    Ok(out)
}

/// Sends the checked chunks of stripes `from..to` to `tx` until the end, a failure (returned), or
/// the receiver going away. Runs on a blocking thread of the runtime. A chunk is read
/// only once the receiver has taken the one before it, so that one chunk waits for it
/// while it works on another: without that wait the next chunk would be read while the
/// last still sits in the channel, and the coordinator of 4 MiB GETs would hold about one
/// more 256 KiB chunk per GET (`docs/results.md`, "Memory", "Under load").
fn read_stripes_into(
    bytes: ShardBytes,
    from: u64,
    to: u64,
    tx: &mpsc::Sender<Result<Bytes>>,
) -> Result<()> {
    let runtime = tokio::runtime::Handle::current();
    for_each_chunk(bytes, from, to, &mut |stripe, buf| {
        if tx.blocking_send(Ok(Bytes::from(buf))).is_err() {
            return ControlFlow::Break(());
        }
        // After the last chunk there is nothing to read ahead of: the thread ends
        // now rather than waiting on a client that may have stopped reading.
        if stripe + 1 >= to {
            return ControlFlow::Break(());
        }
        // The channel holds one: a permit is free once the receiver took the chunk.
        match runtime.block_on(tx.reserve()) {
            Ok(_taken) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    })
}

/// Hands `f` each chunk of stripes `from..to` (its stripe and its bytes, CRC32C checked and
/// stripped) until the end, a failure (returned: a bad or missing chunk is
/// [`Error::CorruptShard`] naming its stripe), or `f` breaks. Blocks.
pub(crate) fn for_each_chunk(
    bytes: ShardBytes,
    from: u64,
    to: u64,
    f: &mut dyn FnMut(u64, Vec<u8>) -> ControlFlow<()>,
) -> Result<()> {
    /// Fills the empty `buf` with the next `n` bytes of `r`.
    type Fill<R> = fn(&mut R, &mut Vec<u8>, usize) -> std::io::Result<()>;
    fn run<R: Read + std::io::Seek>(
        r: R,
        fill: Fill<R>,
        from: u64,
        to: u64,
        f: &mut dyn FnMut(u64, Vec<u8>) -> ControlFlow<()>,
    ) -> Result<()> {
        // A header that does not decode (its checksum, magic or fields, a file cut
        // inside it) is a corrupt shard like a bad chunk: it is healed, not just refused.
        let bad_header = |e: oed_ec::Error| match e {
            oed_ec::Error::Io(io) if io.kind() != std::io::ErrorKind::UnexpectedEof => {
                Error::Io(io)
            }
            _ => Error::CorruptShard { stripe: from },
        };
        let mut reader = oed_ec::ShardReader::new(r).map_err(bad_header)?;
        if from < to {
            reader.seek_to_stripe(from)?;
        }
        for stripe in from..to {
            let mut buf = Vec::new();
            match reader.read_chunk_with(&mut buf, fill) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(
                    oed_ec::Error::CorruptChunk { stripe } | oed_ec::Error::Truncated { stripe },
                ) => {
                    return Err(Error::CorruptShard { stripe });
                }
                // The disk could not read the sector: the chunk is lost like a rotten one,
                // and rewriting the shard (heal) moves it to good sectors.
                Err(oed_ec::Error::Io(e))
                    if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()) =>
                {
                    return Err(Error::CorruptShard { stripe });
                }
                Err(e) => return Err(e.into()),
            }
            if f(stripe, buf).is_break() {
                return Ok(());
            }
        }
        Ok(())
    }
    match bytes {
        ShardBytes::Inline(data) => run(
            std::io::Cursor::new(data),
            oed_ec::format::read_zeroed,
            from,
            to,
            f,
        ),
        ShardBytes::File(path) => match std::fs::File::open(&path) {
            // No BufReader: each frame is one read straight into the chunk's buffer.
            Ok(file) => run(file, read_uninit, from, to, f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(Error::CorruptShard { stripe: from })
            }
            Err(e) => Err(e.into()),
        },
    }
}

/// Fills the empty `buf` with the next `n` bytes of `file`, read straight into the
/// vector's spare capacity: zeroing a 256 KiB buffer before each read would cost a drive
/// serving shards about as much CPU as the read's copy out of the page cache
/// (`docs/results.md`, "The cluster through S3").
///
/// # Errors
/// What the read returns; an end of file before `n` bytes is `UnexpectedEof`.
#[cfg(unix)]
#[expect(
    unsafe_code,
    reason = "std reads only into initialised memory on stable Rust"
)]
pub fn read_uninit(file: &mut std::fs::File, buf: &mut Vec<u8>, n: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    debug_assert!(buf.is_empty());
    buf.reserve_exact(n);
    while buf.len() < n {
        let want = n - buf.len();
        let spare = buf.spare_capacity_mut();
        debug_assert!(spare.len() >= want);
        // SAFETY: `spare` is memory the vector owns, at least `want` bytes long, and
        // nothing else refers to it; read(2) writes at most `want` bytes there.
        let got = unsafe { libc::read(file.as_raw_fd(), spare.as_mut_ptr().cast(), want) };
        match usize::try_from(got) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            // SAFETY: read(2) initialised the `got <= want` bytes after the old length.
            Ok(got) => unsafe { buf.set_len(buf.len() + got) },
            Err(_) => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

#[cfg(not(unix))]
pub fn read_uninit(file: &mut std::fs::File, buf: &mut Vec<u8>, n: usize) -> std::io::Result<()> {
    oed_ec::format::read_zeroed(file, buf, n)
}
