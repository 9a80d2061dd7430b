//! The durable write of a shard: [`Store::put_shard`] and [`Store::put_shard_raw`] stream
//! an upload into its file (checking each chunk's CRC32C), fsync it and its directory, and
//! commit the record that names it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use crate::meta::Kept;
use crate::{Store, files, join_error, pool, remove_file_if_exists};
use oed_model::drive::Stored;
use oed_model::error::{Error, Result};
use oed_model::record::{
    self, FileId, ObjectRecord, RecordTail, VersionId, WriteCondition, now_ms,
};
use oed_model::seal::{Seal, TAG_LEN};

pub(crate) mod direct;
pub(crate) mod splice;

use direct::{DIRECT_FILES, DIRECT_STAGE, Direct};
use splice::RawUpload;

impl Store {
    /// Stores one shard durably; see the module docs for the steps.
    ///
    /// `body` is the shard file (oed-ec format). Its header must agree with `record`
    /// (version, shard index, k, m, chunk size, object length) and every chunk's CRC32C
    /// must match, or nothing is stored. With `with_tail`, the file is followed by a
    /// JSON [`RecordTail`] (at most [`record::MAX_TAIL_BYTES`]) whose fields complete the
    /// record before it is committed; a body without one stores nothing. When the key
    /// already has a newer version here, nothing is stored and [`Error::Superseded`] is
    /// returned. After success the key's
    /// previous version's shard file, if any, is removed, and that version's parts are
    /// returned in [`Stored::replaced_parts`].
    ///
    /// # Errors
    /// [`Error::BadRequest`], [`Error::NotFound`] (bucket), [`Error::Shard`] (bad upload),
    /// [`Error::TooLarge`], [`Error::InsufficientStorage`], [`Error::Superseded`],
    /// [`Error::Io`], [`Error::Meta`]. On every error nothing visible has changed.
    pub async fn put_shard<S, E>(
        &self,
        record: ObjectRecord,
        body: S,
        with_tail: bool,
    ) -> Result<Stored>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.put_shard_sealed(record, body, with_tail, None).await
    }

    /// [`Store::put_shard`] of a body that ends with the tag of `seal` ([`oed_model::seal`]):
    /// every byte of the file and the tail is fed to it as it is checked, and the upload
    /// is committed only when the tag after them is the seal's.
    ///
    /// # Errors
    /// Those of [`Store::put_shard`]; [`Error::Unauthenticated`] when the tag is missing or
    /// not the seal's.
    pub async fn put_shard_sealed<S, E>(
        &self,
        record: ObjectRecord,
        body: S,
        with_tail: bool,
        seal: Option<Seal>,
    ) -> Result<Stored>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (record, expected, mut upload) = self.start_upload(record, with_tail).await?;
        let started = Instant::now();
        // On an error the upload is dropped, and its file with it.
        let tail = upload
            .receive(body, &expected, with_tail, self.fsync, seal)
            .await?;
        self.end_upload(record, &expected, upload, tail, with_tail, started)
            .await
    }

    /// [`Store::put_shard`] for an upload whose bytes come on a connection of their own
    /// (the peer API's `PUT shard` upgraded, `docs/peer-api.md`): into a file written
    /// with `O_DIRECT`, they are read from the connection into its aligned buffer and
    /// checked there ([`direct`]); on Linux, over plain TCP, into a file written through
    /// the page cache, they go from the socket through a pipe into the file with
    /// `splice`, and are checked over the file's pages ([`splice`]); otherwise they are
    /// read as any upload's body. The connection's
    /// body ends when its sender shuts down its side. With `seal`, the body ends with its
    /// tag, as in [`Store::put_shard_sealed`].
    ///
    /// # Errors
    /// Those of [`Store::put_shard_sealed`].
    pub async fn put_shard_raw(
        &self,
        record: ObjectRecord,
        conn: &mut RawUpload,
        with_tail: bool,
        seal: Option<Seal>,
    ) -> Result<Stored> {
        let (record, expected, mut upload) = self.start_upload(record, with_tail).await?;
        let started = Instant::now();
        let tail = match &mut upload {
            Upload::File(file) if direct::takes(file) => {
                let how = (with_tail, self.fsync);
                direct::receive(file, conn, &expected, how, seal, &self.received_direct).await?
            }
            Upload::File(file) if splice::takes(file, conn) => {
                self.spliced
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                splice::receive(file, conn, &expected, with_tail, self.fsync, seal).await?
            }
            _ => {
                let body = conn.stream();
                upload
                    .receive(body, &expected, with_tail, self.fsync, seal)
                    .await?
            }
        };
        self.end_upload(record, &expected, upload, tail, with_tail, started)
            .await
    }

    /// The checks an upload passes before its body is read, and where it will be
    /// received: the record as it will be stored (no file number yet), the shard header
    /// the body must start with, and the upload (in memory, or a file).
    async fn start_upload(
        &self,
        mut record: ObjectRecord,
        with_tail: bool,
    ) -> Result<(ObjectRecord, oed_ec::ShardHeader, Upload)> {
        record.validate()?;
        // A client's write (it ends with a tail) carries a version its coordinator just
        // made; other uploads (heal, drain, refill) copy a version already stored, made
        // whenever it was, which must move with its key whatever its id.
        if with_tail {
            self.check_version(record.version_id)?;
        }
        // Which file holds the shard is this drive's to say, at the commit.
        record.file = None;
        if self.meta.bucket(&record.bucket)?.is_none() {
            return Err(Error::NotFound(oed_model::error::Missing::Bucket));
        }
        // An upload with a tail gets its final version id only at its end: whether a
        // newer version is stored is known then (at the commit), not now.
        if !with_tail && let Some(existing) = self.meta.object(&record.bucket, &record.key)? {
            if self.supersedes(existing.version_id, record.version_id) {
                return Err(Error::Superseded);
            }
            // A copy of another shard of a version held here (two moves of one object
            // that raced, placed by two maps) must not replace the one held.
            if existing.version_id == record.version_id
                && existing.shard_index != record.shard_index
                && self.shard_held(&existing)
            {
                return Err(Error::Unavailable(format!(
                    "this drive holds shard {} of that version of {}/{}, not shard {}: the records that sent it here are stale",
                    existing.shard_index, record.bucket, record.key, record.shard_index
                )));
            }
        }
        let expected = record.shard_header()?;
        if expected.file_len() > self.max_shard_bytes {
            return Err(Error::TooLarge(self.max_shard_bytes));
        }
        self.check_space(expected.file_len()).await?;
        let upload = if expected.file_len() <= self.inline_threshold {
            Upload::Inline(Vec::new())
        } else {
            Upload::File(Box::new(UploadFile::new(
                Arc::clone(&self.files),
                self.direct_io,
                Arc::clone(&self.pool),
            )))
        };
        Ok((record, expected, upload))
    }

    /// An upload received and checked in full: its tail applied to the record, then the
    /// commit ([`Store::commit_upload`]).
    async fn end_upload(
        &self,
        mut record: ObjectRecord,
        expected: &oed_ec::ShardHeader,
        mut upload: Upload,
        tail: Option<RecordTail>,
        with_tail: bool,
        started: Instant,
    ) -> Result<Stored> {
        let condition = tail.as_ref().and_then(|t| t.condition);
        if let Some(tail) = tail {
            record.etag = tail.etag;
            record.parts = tail.parts;
            record.checksum = tail.checksum;
            if let Some(v) = tail.version_id
                && v != record.version_id
            {
                self.check_version(v)?;
                record.version_id = v;
                record.last_modified_ms = v.millis();
                let header = oed_ec::ShardHeader {
                    version_id: v.0,
                    ..*expected
                };
                upload.restamp(header.encode());
            }
        }
        self.timed("receive", started);
        // The rest is one trip to a blocking thread: the last batch and fsync, the
        // directory's fsync, the synced record. A request dropped meanwhile (its client
        // gone) does not stop it halfway.
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            store.commit_upload(record, upload, with_tail, condition)
        })
        .await
        .map_err(join_error)?
    }

    /// The end of [`Store::put_shard`], on a blocking thread, for an upload received and
    /// checked in full: a file gets its last batch and, by policy, its fsync and its
    /// directory's, so its data and its name are on disk before a record names it; then,
    /// under the key's commit lock, the record is committed unless a newer version is
    /// stored. A file not committed is removed when dropped. With `keep_replaced` (a
    /// client write), the version it replaces is kept until the write is settled
    /// ([`Store::settle`]); any version kept before is dropped. A write made on a
    /// `condition` that the key's version here fails is refused
    /// ([`Error::PreconditionFailed`]).
    fn commit_upload(
        &self,
        mut record: ObjectRecord,
        upload: Upload,
        keep_replaced: bool,
        condition: Option<WriteCondition>,
    ) -> Result<Stored> {
        let (inline, mut temp) = match upload {
            Upload::Inline(data) => (Some(data), None),
            Upload::File(mut temp) => {
                let mut started = Instant::now();
                temp.finish(self.fsync)?;
                started = self.timed("data_sync", started);
                if self.fsync {
                    temp.sync_dir()?;
                    self.timed("place", started);
                }
                record.file = temp.id;
                (None, Some(temp))
            }
        };
        let _guard = self.lock_for(&record.bucket, &record.key);
        let mut previous = self.meta.object(&record.bucket, &record.key)?;
        self.check_commit(&record, previous.as_ref(), condition)?;
        let kept_before = self.meta.kept(&record.bucket, &record.key)?;
        // The version replaced: kept as a noncurrent version when the bucket's versioning
        // says so ([`ObjectRecord::kept_when_replaced_by`]), and kept for the write's
        // settlement when it is a client's.
        let replaced_inline = match &previous {
            Some(p) if p.version_id != record.version_id => {
                Some(self.meta.inline_shard(&p.bucket, &p.key, p.version_id)?)
            }
            _ => None,
        };
        let mut noncurrent = None;
        let mut legacy_move = None;
        if let (Some(p), Some(inline)) = (&mut previous, &replaced_inline)
            && p.kept_when_replaced_by(&record)
        {
            let (n, legacy) = self.noncurrent_copy(p, inline.as_ref())?;
            noncurrent = Some(n);
            legacy_move = legacy;
        }
        let keep = match (&previous, replaced_inline) {
            (Some(p), Some(inline)) if keep_replaced => Some(Kept {
                record: p.clone(),
                inline,
            }),
            _ => None,
        };
        // Last step: the record. Until this synced write the new shard is invisible; if
        // it fails, the file goes with `temp`.
        let started = Instant::now();
        let committed = self.meta.commit_object(
            &record,
            previous.as_ref(),
            inline.as_deref(),
            keep.as_ref(),
            noncurrent.as_ref().map(|(n, before)| (n, before.is_none())),
        );
        if let Err(e) = committed {
            if let Some((old, new, _)) = &legacy_move
                && let Err(back) = std::fs::rename(new, old)
            {
                tracing::error!(path = %old.display(), error = %back, "a shard file could not be renamed back");
            }
            return Err(e);
        }
        drop(legacy_move);
        let new_path = temp.as_mut().and_then(|t| t.committed());
        self.timed("record", started);
        // Files no record names now: the replaced version's unless it is kept (for the
        // settlement, or as a noncurrent version), a noncurrent copy of that version
        // stored before in another file, and the version kept before unless it is a
        // noncurrent version now. A new number never names an old file; checked all the
        // same, since freeing it would lose the shard just stored.
        let still_named = |old: &Path| new_path.as_deref() == Some(old);
        let mut replaced_parts = Vec::new();
        if let Some((n, Some(before))) = &noncurrent
            && before.file != n.record.file
        {
            let old = self.record_path(before);
            if !still_named(&old) {
                self.pool.release(&old);
            }
        }
        if let Some(prev) = previous {
            let old = self.record_path(&prev);
            if keep.is_none() && noncurrent.is_none() && !still_named(&old) {
                self.pool.release(&old);
            }
            // The same version sent again keeps its parts, and so does one kept.
            if prev.version_id != record.version_id && noncurrent.is_none() {
                replaced_parts = prev.parts;
            }
        }
        if let Some(k) = kept_before {
            let old = self.record_path(&k.record);
            if !still_named(&old) && !self.meta.is_noncurrent(&k.record)? {
                self.pool.release(&old);
            }
        }
        Ok(Stored {
            record,
            replaced_parts,
            kept: keep.is_some(),
        })
    }
}

impl Store {
    /// Refuses a commit whose `condition` fails against the key's version here
    /// (`previous`; a delete marker counts as none), or that a newer version stored here
    /// supersedes.
    fn check_commit(
        &self,
        record: &ObjectRecord,
        previous: Option<&ObjectRecord>,
        condition: Option<WriteCondition>,
    ) -> Result<()> {
        if let Some(c) = condition
            && !c.holds(previous.filter(|p| !p.delete_marker).map(|p| p.version_id))
        {
            return Err(Error::PreconditionFailed(c.failure().into()));
        }
        if previous.is_some_and(|p| self.supersedes(p.version_id, record.version_id)) {
            return Err(Error::Superseded);
        }
        Ok(())
    }

    /// The copy of `replaced` (with its `inline` bytes) kept as a noncurrent version,
    /// with the record its version key held before, if any. A shard file of the earlier
    /// format is found by a path made from its key: one kept under another key is
    /// renamed to a numbered file first (`replaced` names it then), and the rename is
    /// returned, to be undone if the commit fails.
    fn noncurrent_copy(
        &self,
        replaced: &mut ObjectRecord,
        inline: Option<&Vec<u8>>,
    ) -> Result<(Noncurrent, Option<LegacyMove>)> {
        let mut legacy = None;
        if replaced.file.is_none() && inline.is_none() {
            let old = self.record_path(replaced);
            let (id, new) = self.files.allocate()?;
            let placing = self.files.placing(&new);
            files::rename_new(&old, &new)?;
            // Both names on disk before a record names the new one.
            if self.fsync {
                for dir in [new.parent(), old.parent()].into_iter().flatten() {
                    files::sync_dir(dir)?;
                }
            }
            replaced.file = Some(id);
            legacy = Some((old, new, placing));
        }
        let n = replaced.as_noncurrent();
        let before = self.meta.object(&n.bucket, &n.key)?;
        Ok((
            (
                Kept {
                    record: n,
                    inline: inline.cloned(),
                },
                before,
            ),
            legacy,
        ))
    }

    /// Whether `v` was made further ahead of this drive's clock than `clock_skew_seconds`
    /// allows: no coordinator whose requests this drive takes can have made it, so it
    /// came from a clock gone wrong or from someone else.
    #[must_use]
    pub fn ahead_of_time(&self, v: VersionId) -> bool {
        v.millis() > now_ms().saturating_add(self.clock_skew_ms)
    }

    /// Refuses a version id made too far ahead ([`Store::ahead_of_time`]).
    fn check_version(&self, v: VersionId) -> Result<()> {
        if self.ahead_of_time(v) {
            return Err(Error::BadRequest(format!(
                "version id {v} was made {} s ahead of this drive's clock; at most \
                 clock_skew_seconds ({} s) is allowed",
                v.millis().saturating_sub(now_ms()) / 1000,
                self.clock_skew_ms / 1000
            )));
        }
        Ok(())
    }

    /// Whether the stored version `stored` keeps `incoming` out: it is newer, and was not
    /// made ahead of time (such a version, stored before this check or by a drive whose
    /// clock was wrong, would otherwise keep every later write of the key out).
    #[must_use]
    pub fn supersedes(&self, stored: VersionId, incoming: VersionId) -> bool {
        stored > incoming && !self.ahead_of_time(stored)
    }
}

/// A shard file of the earlier format renamed to a numbered one: from, to, and its
/// placement (which keeps the orphan sweep off it until its record is committed).
type LegacyMove = (PathBuf, PathBuf, files::Placing);

/// A replaced version as it is kept as a noncurrent one, with the record its version key
/// held before, if any.
type Noncurrent = (Kept, Option<ObjectRecord>);

/// An upload whose shard header is not the one its record makes.
fn header_mismatch() -> Error {
    Error::BadRequest(
        "shard header does not match the record (version, shard index, k, m, chunk size or \
         object length)"
            .into(),
    )
}

/// An upload being received: in memory when it will be inlined, else a file.
enum Upload {
    Inline(Vec<u8>),
    /// Boxed: its state (the `O_DIRECT` stage, placement, directory ticket) is far larger
    /// than the other variant's.
    File(Box<UploadFile>),
}

/// Bytes collected before they are written to the file.
pub(crate) const WRITE_BATCH: usize = 512 * 1024;

/// A shard upload's file, numbered and opened at its first batch ([`files`]), with the
/// body's pieces received since the last batch was written (reference-counted `Bytes` as
/// they came, no copy into a buffer of ours). The file is a freed one from the pool,
/// renamed to its number, when there is one (overwritten from its start, cut to its new
/// length when finished), else a new one. Dropped before [`UploadFile::committed`], it
/// removes its file: whatever fails on the way, an upload leaves nothing behind.
#[derive(Default)]
struct UploadFile {
    /// Where the file is, once it is; `None` again once its record is committed (and in
    /// the empty value a batch's trip leaves behind).
    path: Option<PathBuf>,
    /// Its number, once it has one.
    id: Option<FileId>,
    /// Numbers, directories and placements; `None` in the empty value.
    files: Option<Arc<files::Files>>,
    /// The file's registration as being placed, from before it appears until it is
    /// committed or removed.
    placing: Option<files::Placing>,
    /// The claim on its directory's fsync, taken when its name appeared there.
    dir_ticket: Option<files::DirTicket>,
    file: Option<std::fs::File>,
    pending: Vec<Bytes>,
    pending_len: usize,
    /// Bytes of the file received so far (written or pending).
    len: u64,
    /// Where a freed file comes from; `None` in the empty value.
    pool: Option<Arc<pool::Pool>>,
    /// The length of the freed file being overwritten, if it is one.
    reused_len: Option<u64>,
    /// A header that replaces the one received, written over it when the file is
    /// finished (the version's final id came in the tail).
    header: Option<[u8; oed_ec::format::HEADER_LEN]>,
    /// Written with `O_DIRECT` (asked for, and the file system took it): whole blocks
    /// from `direct`'s aligned buffer.
    direct: Option<Direct>,
    /// `O_DIRECT` asked for (`direct_io`), for the file not opened yet.
    want_direct: bool,
    /// The size of its aligned buffer, for the file not opened yet: [`DIRECT_STAGE`],
    /// or more for an upload read straight into it (0 in the empty value).
    direct_stage: usize,
}

impl UploadFile {
    fn new(files: Arc<files::Files>, direct_io: bool, pool: Arc<pool::Pool>) -> Self {
        let want_direct = direct_io && !files.direct_refused();
        Self {
            path: None,
            id: None,
            files: Some(files),
            placing: None,
            dir_ticket: None,
            file: None,
            pending: Vec::new(),
            pending_len: 0,
            len: 0,
            pool: Some(pool),
            reused_len: None,
            header: None,
            direct: None,
            want_direct,
            direct_stage: DIRECT_STAGE,
        }
    }

    fn push(&mut self, piece: Bytes) {
        self.pending_len += piece.len();
        self.len += piece.len() as u64;
        self.pending.push(piece);
    }

    /// Numbers the file and opens it, with `O_DIRECT` where asked for and taken: a freed
    /// file from the pool renamed to its number if there is one, else a new one. The
    /// file is registered as being placed before it appears, and its directory's fsync
    /// ticket taken once it has. Blocks.
    fn open(&mut self) -> std::io::Result<std::fs::File> {
        let files = Arc::clone(self.files.as_ref().expect("an upload's file"));
        let (id, path) = files.allocate()?;
        self.placing = Some(files.placing(&path));
        let pool = self.pool.clone().expect("an upload's pool");
        let reused = pool
            .take()
            .and_then(|(freed, len)| match files::rename_new(&freed, &path) {
                Ok(()) => Some(len),
                Err(e) => {
                    tracing::warn!(error = %e, path = %freed.display(), "shard file pool: a freed file cannot be reused");
                    remove_file_if_exists(&freed);
                    None
                }
            });
        // A renamed file is this upload's from now on (removed if it fails); a new one
        // once it is made.
        if reused.is_some() {
            self.path = Some(path.clone());
        }
        let f = self.open_at(&path, reused.is_none())?;
        self.path = Some(path);
        self.id = Some(id);
        self.dir_ticket = Some(files.ticket(id));
        if reused.is_some() {
            pool.reusing();
            self.reused_len = reused;
        }
        Ok(f)
    }

    /// Opens `path` for writing (`create`: a new file), with `O_DIRECT` where asked for
    /// and taken.
    fn open_at(&mut self, path: &Path, create: bool) -> std::io::Result<std::fs::File> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut options = std::fs::OpenOptions::new();
        // Readable too: a spliced upload checks its bytes over the file's pages.
        options.read(true).write(true).create_new(create);
        if self.want_direct {
            #[cfg(target_os = "linux")]
            match options.clone().custom_flags(libc::O_DIRECT).open(path) {
                Ok(f) => {
                    self.direct = Some(Direct::new(self.direct_stage));
                    DIRECT_FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Ok(f);
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    self.refused_direct(&e);
                    // The refusal may come after the file was made: it is ours either
                    // way (its number is new), so the second open may find it there.
                    if create {
                        options.create_new(false).create(true);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        options.open(path)
    }

    /// Logs (once) and remembers for the drive's later uploads that the file system
    /// refused `O_DIRECT`.
    fn refused_direct(&self, e: &std::io::Error) {
        direct::refused(e);
        if let Some(files) = &self.files {
            files.refuse_direct();
        }
    }

    /// Writes the pending pieces, creating the file at the first call. Blocks.
    fn write_pending(&mut self) -> std::io::Result<&std::fs::File> {
        use std::io::Write;
        let mut f = match self.file.take() {
            Some(f) => f,
            None => self.open()?,
        };
        let pending = std::mem::take(&mut self.pending);
        self.pending_len = 0;
        let mut pieces = pending.iter();
        if let Some(direct) = self.direct.as_mut()
            && direct.full()
        {
            // Filled straight from a connection (`direct::receive`).
            if let Err(e) = direct.flush_blocks(&f) {
                if e.raw_os_error() != Some(libc::EINVAL) {
                    return Err(e);
                }
                self.refused_direct(&e);
                f = self.leave_direct()?;
            }
        }
        if let Some(direct) = self.direct.as_mut() {
            for p in pieces.by_ref() {
                match direct.write(&f, p) {
                    Ok(()) => {}
                    // Some file systems take the flag and refuse the writes: go on
                    // through the page cache from the bytes not yet written.
                    Err((taken, e)) if e.raw_os_error() == Some(libc::EINVAL) => {
                        self.refused_direct(&e);
                        f = self.leave_direct()?;
                        f.write_all(&p[taken..])?;
                        break;
                    }
                    Err((_, e)) => return Err(e),
                }
            }
        }
        for p in pieces {
            f.write_all(p)?;
        }
        Ok(self.file.insert(f))
    }

    /// Stops writing with `O_DIRECT`: the staged bytes are written through a new
    /// descriptor without it, positioned after them.
    fn leave_direct(&mut self) -> std::io::Result<std::fs::File> {
        use std::io::{Seek, SeekFrom};
        let mut direct = self.direct.take().expect("in direct mode");
        let path = self.path.as_ref().expect("an upload's file, opened");
        let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
        let end = direct.finish(&f)?;
        f.seek(SeekFrom::Start(end))?;
        Ok(f)
    }

    /// Writes the pending pieces on one trip to a blocking thread. With `fsync`, the
    /// batch's writeback to the disk starts at once ([`start_writeback`]), so the disk
    /// works while the rest of the body arrives.
    async fn write_batch(&mut self, fsync: bool) -> Result<()> {
        let mut temp = std::mem::take(self);
        *self = tokio::task::spawn_blocking(move || {
            temp.write_pending()?;
            let buffered = temp.direct.is_none();
            if fsync && buffered {
                start_writeback(temp.file.as_ref().expect("written above"));
            }
            Ok::<_, std::io::Error>(temp)
        })
        .await
        .map_err(join_error)??;
        Ok(())
    }

    /// Writes the last pieces and, with `fsync`, syncs the file, which then waits only for
    /// the last batch and the journal; closes it. Blocks.
    fn finish(&mut self, fsync: bool) -> std::io::Result<()> {
        let header = self.header.take();
        self.write_pending()?;
        if self.direct.is_some() {
            // The last partial block, and a new header, go through the page cache.
            let f = self.leave_direct()?;
            self.file = Some(f);
        }
        let f = self.file.as_ref().expect("written above");
        if let Some(h) = header {
            std::os::unix::fs::FileExt::write_all_at(f, &h, 0)?;
        }
        // A freed file longer than this shard keeps none of its old bytes.
        if self.reused_len.is_some_and(|old| old > self.len) {
            f.set_len(self.len)?;
        }
        if fsync {
            f.sync_all()?;
        }
        self.file = None;
        Ok(())
    }

    /// Returns once the file's name is on disk: the fsync of its directory, shared with
    /// the uploads that named files there meanwhile ([`files::DirSync`]). With the
    /// file's own fsync before it ([`UploadFile::finish`]) and the record commit after it,
    /// this is the durable write:
    /// 1. the file written at its number and fsynced: data on disk, no record names it;
    /// 2. its directory fsynced: the name survives a power cut;
    /// 3. then (caller) the record, in a synced RocksDB write: only now is it visible,
    ///    and [`UploadFile::committed`] keeps the file.
    ///
    /// Blocks.
    fn sync_dir(&self) -> std::io::Result<()> {
        self.dir_ticket
            .as_ref()
            .map_or(Ok(()), files::DirTicket::sync)
    }

    /// Marks the file as named by its committed record, so that dropping this does not
    /// remove it; returns where it is.
    fn committed(&mut self) -> Option<PathBuf> {
        self.path.take()
    }
}

impl Drop for UploadFile {
    /// Removes a file that no record came to name. On an upload's error path this may
    /// run on a runtime worker: one unlink.
    fn drop(&mut self) {
        self.file = None; // closed first: not every system removes an open file
        if let Some(path) = &self.path {
            remove_file_if_exists(path);
        }
    }
}

impl Upload {
    /// Replaces the shard file's header, received first, with `header`.
    fn restamp(&mut self, header: [u8; oed_ec::format::HEADER_LEN]) {
        match self {
            Upload::Inline(mem) => mem[..oed_ec::format::HEADER_LEN].copy_from_slice(&header),
            Upload::File(temp) => temp.header = Some(header),
        }
    }

    /// Receives and checks the whole body: its header must be `expected` (checked as soon
    /// as it has arrived, so a wrong upload is refused early), every frame's CRC32C must
    /// match, and the file must end after its last frame, where the tail follows when
    /// `with_tail` is set. A file is written in batches of about [`WRITE_BATCH`]
    /// bytes, their writeback started when the shard will be fsynced (`fsync`).
    async fn receive<S, E>(
        &mut self,
        mut body: S,
        expected: &oed_ec::ShardHeader,
        with_tail: bool,
        fsync: bool,
        seal: Option<Seal>,
    ) -> Result<Option<RecordTail>>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let limit = after_file_limit(with_tail, seal.is_some());
        let mut verifier = BodyCheck::new(seal);
        let mut header_checked = false;
        let mut tail: Vec<u8> = Vec::new();
        let file_len = expected.file_len();
        while let Some(piece) = body.next().await {
            // A body that breaks off is the sender's doing (a coordinator aborting a
            // write, a peer gone), not a fault of this drive.
            let mut piece = piece.map_err(|e| Error::BodyBroken(e.into().to_string()))?;
            let room = file_len - verifier.bytes_seen();
            if piece.len() as u64 > room {
                // Checked before the verifier sees it, so a huge body is refused early.
                let extra = piece.split_off(room as usize);
                if tail.len() + extra.len() > limit {
                    return Err(Error::Shard(oed_ec::Error::TrailingData));
                }
                tail.extend_from_slice(&extra);
            }
            if piece.is_empty() {
                continue;
            }
            verifier.feed(&piece)?;
            if !header_checked && let Some(h) = verifier.header() {
                if h != expected {
                    return Err(header_mismatch());
                }
                header_checked = true;
            }
            match self {
                Upload::Inline(mem) => mem.extend_from_slice(&piece),
                Upload::File(temp) => {
                    temp.push(piece);
                    if temp.pending_len >= WRITE_BATCH {
                        temp.write_batch(fsync).await?;
                    }
                }
            }
        }
        end_of_upload(verifier, with_tail, &tail)
    }
}

/// The most bytes an upload may send after its shard file: the record tail when it has
/// one, the seal's tag when it is sealed.
fn after_file_limit(with_tail: bool, sealed: bool) -> usize {
    let tail = if with_tail { record::MAX_TAIL_BYTES } else { 0 };
    tail + if sealed { TAG_LEN } else { 0 }
}

/// The checks every byte of an upload's shard file passes as it comes: its format (header,
/// frames and their CRC32C) and, for a sealed upload, its seal.
#[derive(Debug, Default)]
struct BodyCheck {
    verifier: oed_ec::StreamVerifier,
    seal: Option<Seal>,
}

impl BodyCheck {
    fn new(seal: Option<Seal>) -> Self {
        Self {
            verifier: oed_ec::StreamVerifier::new(),
            seal,
        }
    }

    /// Checks the next piece of the file ([`oed_ec::StreamVerifier::feed`]).
    fn feed(&mut self, bytes: &[u8]) -> Result<()> {
        self.verifier.feed(bytes)?;
        if let Some(seal) = &mut self.seal {
            seal.update(bytes);
        }
        Ok(())
    }

    fn header(&self) -> Option<&oed_ec::ShardHeader> {
        self.verifier.header()
    }

    fn bytes_seen(&self) -> u64 {
        self.verifier.bytes_seen()
    }
}

/// The end of an upload's body: the shard file must be whole, the bytes after it
/// (`after`, at most [`after_file_limit`], checked by the caller as they came) the
/// record tail when `with_tail` is set, then the seal's tag when the upload is sealed;
/// the seal must verify.
fn end_of_upload(check: BodyCheck, with_tail: bool, after: &[u8]) -> Result<Option<RecordTail>> {
    check.verifier.finish()?;
    let tail = match check.seal {
        Some(mut seal) => {
            let Some(at) = after.len().checked_sub(TAG_LEN) else {
                return Err(Error::Unauthenticated(
                    "the sealed upload ends without its tag",
                ));
            };
            let (tail, tag) = after.split_at(at);
            seal.update(tail);
            if !seal.verify(tag) {
                return Err(Error::Unauthenticated(
                    "the upload's seal does not match its bytes: changed on the way, or not \
                     sent by a drive of this cluster",
                ));
            }
            tail
        }
        None => after,
    };
    if !with_tail {
        return if tail.is_empty() {
            Ok(None)
        } else {
            Err(Error::Shard(oed_ec::Error::TrailingData))
        };
    }
    serde_json::from_slice(tail)
        .map(Some)
        .map_err(|e| Error::BadRequest(format!("record tail after the shard file: {e}")))
}

/// Asks the kernel to start writing `file`'s dirty pages to the disk, without waiting (Linux
/// `sync_file_range` over the whole file with `SYNC_FILE_RANGE_WRITE` only: pages already
/// being written are skipped, so each call sends the batch just written). It promises no
/// durability: the fsync after the last batch ([`UploadFile::finish`]) does that, and
/// finds less left to do. A failure here changes nothing and is left for that fsync to
/// report.
#[cfg(target_os = "linux")]
#[expect(
    unsafe_code,
    reason = "sync_file_range has no safe wrapper in std or rustix"
)]
fn start_writeback(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for as long as `file` is borrowed; the call reads no
    // memory of ours. Offset 0 and length 0 mean the whole file.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &std::fs::File) {}
